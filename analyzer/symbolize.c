/* symbolize.c — offline symbolization through libdwfl and libdw (see
 * symbolize.h).
 *
 * One Dwfl session, modules reported with dwfl_report_elf at the address of
 * their first PT_LOAD (add_p_vaddr = true, so prelinked or non-zero p_vaddr
 * files land right). A file that cannot be opened is skipped: its addresses
 * come out as module+offset.
 *
 * Inline chains: dwfl_module_addrdie gives the CU of the address,
 * dwarf_getscopes its innermost scope, dwarf_getscopes_die the DIEs that
 * contain that one, innermost first; each
 * DW_TAG_inlined_subroutine is one displayed frame (its abstract origin
 * names it), the DW_TAG_subprogram that ends the walk the physical one. The
 * innermost frame takes the line table's file:line; each outer one the
 * DW_AT_call_file/DW_AT_call_line of the inlined DIE just inside it. Names
 * prefer DW_AT_linkage_name (demangled, so C++ names carry their class,
 * template arguments and parameters, as addr2line -C prints them), then
 * DW_AT_name, then the symbol table.
 *
 * Memo: looked-up address -> (first, count) in one array of chain frames;
 * a second map remembers which recorded addresses are signal trampolines.
 */
#include "symbolize.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "demangle.h"
#include "hashmap.h"

typedef struct chain_ref { uint32_t first, count; } chain_ref_t;

/* A module's symbols sorted by address, built on its first lookup.
 * elfutils' address-to-symbol search walks the module's whole table on
 * each call: on a PyTorch trace (libtorch_cpu: 34,926 symbols, looked up
 * at 76,523 addresses) that made `report` take minutes. */
typedef struct msym { uint64_t addr, size; const char *name; int rank; } msym_t;
typedef struct modsyms { Dwfl_Module *mod; msym_t *v; size_t n; } modsyms_t;

/* A Python file and the part of its path labels show (a suffix of it). */
typedef struct pyfile { const char *path, *shown; } pyfile_t;

struct az_sym {
    Dwfl *dwfl;
    Dwfl_Callbacks cb;
    char *debuginfo_path;
    struct { uint64_t base, size; char *name; } *mods;
    size_t n_mods;
    psc_map_t cache;             /* looked-up address -> chain_ref_t */
    psc_map_t tramp;             /* recorded address -> 1 trampoline, 2 not */
    az_frame_t *fr;              /* every chain, back to back */
    size_t n_fr, cap_fr;
    char **strs;                 /* owned strings */
    size_t n_strs, cap_strs;
    modsyms_t *ms;               /* per module: its sorted symbols */
    size_t n_ms, cap_ms;
    const pst_reader_t *r;       /* az_sym_open: the strings that name Python frames */
    pst_reader_t *owned;         /* az_sym_adopt: closed with the symbolizer */
    pyfile_t *pyf;               /* the trace's .py files, by path (pyfiles()) */
    size_t n_pyf;
    int pyf_done;
};

static const char *keep(az_sym_t *s, const char *str)
{
    if (!str) return NULL;
    if (s->n_strs == s->cap_strs) {
        size_t n = s->cap_strs ? s->cap_strs * 2 : 256;
        char **a = realloc(s->strs, n * sizeof *a);
        if (!a) return NULL;
        s->strs = a; s->cap_strs = n;
    }
    char *c = strdup(str);
    if (c) s->strs[s->n_strs++] = c;
    return c;
}

/* The demangled form of a name, kept. */
static const char *keep_name(az_sym_t *s, const char *name)
{
    if (!name) return NULL;
    char buf[2048];
    return keep(s, az_dm_name(name, buf, sizeof buf));
}

az_sym_t *az_sym_create(const pst_module_t *mods, size_t n)
{
    az_sym_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cb.find_elf = dwfl_build_id_find_elf;
    s->cb.find_debuginfo = dwfl_standard_find_debuginfo;
    s->cb.debuginfo_path = &s->debuginfo_path;
    s->dwfl = dwfl_begin(&s->cb);
    int rc = psc_map_init(&s->cache, sizeof(chain_ref_t), 512, 50, NULL);
    if (!rc) rc = psc_map_init(&s->tramp, sizeof(int), 512, 50, NULL);
    s->mods = calloc(n ? n : 1, sizeof *s->mods);
    if (rc || !s->mods) { az_sym_destroy(s); return NULL; }
    if (s->dwfl) dwfl_report_begin(s->dwfl);
    /* the latest map at a base wins: report from the end, skip bases seen */
    for (size_t i = n; i-- > 0;) {
        const pst_module_t *m = &mods[i];
        if (!m->path || !m->path[0]) continue;
        int dup = 0;
        for (size_t k = 0; k < s->n_mods && !dup; k++) dup = s->mods[k].base == m->base;
        if (dup) continue;
        const char *slash = strrchr(m->path, '/');
        s->mods[s->n_mods].base = m->base;
        s->mods[s->n_mods].size = m->size;
        s->mods[s->n_mods].name = (char *)keep(s, slash ? slash + 1 : m->path);
        s->n_mods++;
        if (s->dwfl && m->path[0] == '/' && strncmp(m->path, "linux-vdso", 10) != 0)
            dwfl_report_elf(s->dwfl, s->mods[s->n_mods - 1].name, m->path, -1, m->base, true);
    }
    if (s->dwfl) dwfl_report_end(s->dwfl, NULL, NULL);
    return s;
}

az_sym_t *az_sym_open(const pst_reader_t *r)
{
    size_t n = 0;
    const pst_module_t *mods = pst_modules(r, &n);
    az_sym_t *s = az_sym_create(mods, n);
    if (s) s->r = r;
    return s;
}

void az_sym_adopt(az_sym_t *s, pst_reader_t *r)
{
    s->owned = r;
}

void az_sym_destroy(az_sym_t *s)
{
    if (!s) return;
    pst_close(s->owned);
    if (s->dwfl) dwfl_end(s->dwfl);
    for (size_t i = 0; i < s->n_strs; i++) free(s->strs[i]);
    free(s->strs);
    free(s->fr);
    psc_map_free(&s->cache);
    psc_map_free(&s->tramp);
    for (size_t i = 0; i < s->n_ms; i++) free(s->ms[i].v);
    free(s->ms);
    free(s->pyf);
    free(s->mods);
    free(s);
}

static az_frame_t *push(az_sym_t *s)
{
    if (s->n_fr == s->cap_fr) {
        size_t n = s->cap_fr ? s->cap_fr * 2 : 1024;
        az_frame_t *a = realloc(s->fr, n * sizeof *a);
        if (!a) return NULL;
        s->fr = a; s->cap_fr = n;
    }
    az_frame_t *f = &s->fr[s->n_fr++];
    memset(f, 0, sizeof *f);
    return f;
}

/* A function DIE's name: linkage name, else DW_AT_name, following
 * DW_AT_abstract_origin / DW_AT_specification. */
static const char *die_name(Dwarf_Die *d)
{
    Dwarf_Attribute a;
    const char *n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_linkage_name, &a));
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_MIPS_linkage_name, &a));
    if (!n) n = dwarf_formstring(dwarf_attr_integrate(d, DW_AT_name, &a));
    return n;
}

static int msym_cmp(const void *x, const void *y)
{
    const msym_t *a = x, *b = y;
    if (a->addr != b->addr) return a->addr < b->addr ? -1 : 1;
    return a->rank - b->rank;
}

static modsyms_t *syms_of(az_sym_t *s, Dwfl_Module *mod)
{
    for (size_t i = 0; i < s->n_ms; i++)
        if (s->ms[i].mod == mod) return &s->ms[i];
    if (s->n_ms == s->cap_ms) {
        size_t n = s->cap_ms ? s->cap_ms * 2 : 16;
        modsyms_t *a = realloc(s->ms, n * sizeof *a);
        if (!a) return NULL;
        s->ms = a;
        s->cap_ms = n;
    }
    modsyms_t *m = &s->ms[s->n_ms++];
    m->mod = mod;
    m->v = NULL;
    m->n = 0;
    int n = dwfl_module_getsymtab(mod);
    if (n <= 1 || !(m->v = malloc((size_t)n * sizeof *m->v))) return m;
    for (int i = 1; i < n; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, NULL, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
        if (!name || !*name || sym.st_shndx == SHN_UNDEF || !addr) continue;
        if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) continue;
        /* at one address: a global name before a weak one before a local one */
        int rank = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
        m->v[m->n++] = (msym_t){ addr, sym.st_size, name, rank };
    }
    qsort(m->v, m->n, sizeof *m->v, msym_cmp);
    return m;
}

/* The symbol containing address a of module mod (the nearest one at or
 * below it whose size covers it, or a sizeless one), with *off its offset
 * into it; NULL when none. */
static const char *sym_at(az_sym_t *s, Dwfl_Module *mod, uint64_t a, uint64_t *off)
{
    modsyms_t *m = syms_of(s, mod);
    if (!m || !m->n) return NULL;
    size_t lo = 0, hi = m->n;           /* first entry with addr > a */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->v[mid].addr <= a) lo = mid + 1; else hi = mid;
    }
    for (size_t i = lo, k = 0; i-- > 0 && k < 64; k++) {
        const msym_t *e = &m->v[i];
        if (e->size && a - e->addr >= e->size) continue;
        while (i > 0 && m->v[i - 1].addr == e->addr) e = &m->v[--i];   /* the best name at that address */
        if (off) *off = a - e->addr;
        return e->name;
    }
    return NULL;
}

/* The last k components of path ("a/b/c.py", 2: "b/c.py"); the whole
 * path when it has no more. */
static const char *suffix(const char *path, int k)
{
    const char *p = path + strlen(path);
    while (p > path) {
        if (p[-1] == '/' && --k == 0) return p;
        p--;
    }
    return path;
}

static int by_path(const void *a, const void *b)
{
    return strcmp(((const pyfile_t *)a)->path, ((const pyfile_t *)b)->path);
}

static int by_base(const void *a, const void *b)
{
    const pyfile_t *x = a, *y = b;
    int c = strcmp(suffix(x->path, 1), suffix(y->path, 1));
    return c ? c : strcmp(x->path, y->path);
}

/* Every .py file the trace's Python frames name (the file part of each
 * "qualname\nfile" string), each shown as the shortest tail of its path
 * that no other of them ends with: "module.py" while it is the only one,
 * "a/__init__.py" beside "b/__init__.py". Labels name files, and rows
 * merge by label: a bare base name would merge two packages' lines. Built
 * once, from the strings defined when the first Python frame is named
 * (the analyzers name frames after their pass: all of them). */
static void pyfiles(az_sym_t *s)
{
    s->pyf_done = 1;
    size_t n = pst_string_count(s->r), k = 0;
    pyfile_t *a = n ? malloc(n * sizeof *a) : NULL;
    if (!a) return;
    for (size_t i = 0; i < n; i++) {
        const char *str = pst_string_at(s->r, i), *nl = str ? strchr(str, '\n') : NULL;
        if (nl && nl[1]) a[k++] = (pyfile_t){ nl + 1, NULL };
    }
    qsort(a, k, sizeof *a, by_base);
    size_t m = 0;
    for (size_t i = 0; i < k; i++)            /* one entry per path */
        if (!m || strcmp(a[m - 1].path, a[i].path)) a[m++] = a[i];
    for (size_t g = 0; g < m;) {              /* each run of one base name */
        size_t e = g + 1;
        while (e < m && !strcmp(suffix(a[g].path, 1), suffix(a[e].path, 1))) e++;
        for (size_t i = g; i < e; i++) {
            int c = 1;
            for (int clash = 1; clash && suffix(a[i].path, c) != a[i].path; ) {
                clash = 0;
                for (size_t j = g; j < e && !clash; j++)
                    clash = j != i && !strcmp(suffix(a[i].path, c), suffix(a[j].path, c));
                if (clash) c++;
            }
            a[i].shown = suffix(a[i].path, c);
        }
        g = e;
    }
    qsort(a, m, sizeof *a, by_path);
    s->pyf = a;
    s->n_pyf = m;
}

/* Append the chain of address a to s->fr; returns the number appended. */
/* A Python frame (format.h, PST_PYFRAME): its string is "qualname\nfile". */
static uint32_t resolve_py(az_sym_t *s, uint64_t a)
{
    az_frame_t *f = push(s);
    if (!f) return 0;
    f->pc = f->addr = a;
    f->python = 1;
    f->line = (int)PST_PYFRAME_LINE(a);
    const char *str = s->r ? pst_string(s->r, PST_PYFRAME_SID(a)) : NULL;
    const char *nl = str ? strchr(str, '\n') : NULL;
    if (nl) {
        char name[1024];
        size_t k = (size_t)(nl - str) < sizeof name - 1 ? (size_t)(nl - str) : sizeof name - 1;
        memcpy(name, str, k);
        name[k] = 0;
        if (!s->pyf_done) pyfiles(s);
        pyfile_t key = { nl + 1, NULL }, *hit = s->n_pyf ? bsearch(&key, s->pyf, s->n_pyf, sizeof key, by_path) : NULL;
        const char *fn = keep(s, name), *file = keep(s, nl + 1);
        f = &s->fr[s->n_fr - 1];          /* keep() does not move fr, but stay plain */
        f->function = fn;
        f->file = file;
        /* the strings stay the reader's while it lives: the tail as a copy */
        f->shown_file = hit && file ? file + (hit->shown - hit->path) : NULL;
    } else {   /* its string lost (a damaged trace, or no reader): still no address */
        f->function = "<python>";
        f->file = "?";
    }
    return 1;
}

static uint32_t resolve(az_sym_t *s, uint64_t a)
{
    if (PST_IS_PYFRAME(a)) return resolve_py(s, a);
    const char *module = NULL;
    uint64_t offset = 0;
    for (size_t i = 0; i < s->n_mods; i++)
        if (a >= s->mods[i].base && a - s->mods[i].base < s->mods[i].size) {
            module = s->mods[i].name;
            offset = a - s->mods[i].base;
            break;
        }
    size_t first = s->n_fr;
    Dwfl_Module *mod = s->dwfl ? dwfl_addrmodule(s->dwfl, a) : NULL;
    const char *lfile = NULL;
    int lline = 0;
    if (mod) {
        Dwfl_Line *line = dwfl_module_getsrc(mod, a);
        if (line) lfile = dwfl_lineinfo(line, NULL, &lline, NULL, NULL, NULL);
        if (!lfile) lline = 0;
        Dwarf_Addr bias = 0;
        Dwarf_Die *cu = dwfl_module_addrdie(mod, a, &bias);
        /* dwarf_getscopes continues outside the first inlined DIE with its
         * abstract origin's scopes; the concrete nesting (each inlined DIE
         * inside the one it was inlined into) is dwarf_getscopes_die's of
         * the innermost scope */
        Dwarf_Die *scopes = NULL, inner;
        int n = cu ? dwarf_getscopes(cu, a - bias, &scopes) : 0;
        if (n > 0) {
            inner = scopes[0];
            free(scopes);
            scopes = NULL;
            n = dwarf_getscopes_die(&inner, &scopes);
        }
        Dwarf_Files *files = NULL;
        size_t nfiles = 0;
        if (n > 0 && dwarf_getsrcfiles(cu, &files, &nfiles) != 0) files = NULL;
        const char *file = lfile;
        int ln = lline;
        for (int i = 0; i < n; i++) {
            int tag = dwarf_tag(&scopes[i]);
            if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram) continue;
            az_frame_t *f = push(s);
            if (!f) break;
            f->function = keep_name(s, die_name(&scopes[i]));
            f->file = keep(s, file);
            f->line = file ? ln : 0;
            if (tag == DW_TAG_subprogram) break;
            f->inlined = 1;
            /* the next frame out is at this inlined call's site */
            Dwarf_Attribute at;
            Dwarf_Word cf = 0, cl = 0;
            file = NULL; ln = 0;
            if (files && dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &at), &cf) == 0 && cf < nfiles)
                file = dwarf_filesrc(files, cf, NULL, NULL);
            if (dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &at), &cl) == 0) ln = (int)cl;
        }
        free(scopes);
        /* an inlined chain must end in a physical function */
        if (s->n_fr > first && s->fr[s->n_fr - 1].inlined) {
            az_frame_t *f = push(s);
            if (f) { f->file = keep(s, file); f->line = file ? ln : 0; }
        }
    }
    if (s->n_fr == first) {
        az_frame_t *f = push(s);
        if (!f) return 0;
        f->file = keep(s, lfile);
        f->line = lline;
    }
    /* the physical frame without a DWARF name: the symbol table's */
    az_frame_t *phys = &s->fr[s->n_fr - 1];
    if (!phys->function && mod) phys->function = keep_name(s, sym_at(s, mod, a, NULL));
    for (size_t i = first; i < s->n_fr; i++) {
        s->fr[i].module = module;
        s->fr[i].offset = offset;
        s->fr[i].addr = a;
    }
    return (uint32_t)(s->n_fr - first);
}

/* The chain of looked-up address a: from the memo, else resolved. */
static chain_ref_t chain_of(az_sym_t *s, uint64_t a)
{
    const chain_ref_t *hit = psc_map_get_sz(&s->cache, a, sizeof(chain_ref_t));
    if (hit) return *hit;
    chain_ref_t r = { (uint32_t)s->n_fr, 0 };
    r.count = resolve(s, a);
    chain_ref_t *slot = psc_map_put_sz(&s->cache, a, NULL, sizeof(chain_ref_t));
    if (slot) *slot = r;
    return r;
}

/* Is recorded address pc the first instruction of a signal trampoline? */
static int is_trampoline(az_sym_t *s, uint64_t pc)
{
    const int *hit = psc_map_get_sz(&s->tramp, pc, sizeof(int));
    if (hit) return *hit == 1;
    int t = 2;
    Dwfl_Module *mod = s->dwfl ? dwfl_addrmodule(s->dwfl, pc) : NULL;
    if (mod) {
        uint64_t off = 1;
        const char *n = sym_at(s, mod, pc, &off);
        if (n && off == 0 && !strcmp(n, "__restore_rt")) t = 1;
    }
    int *slot = psc_map_put_sz(&s->tramp, pc, NULL, sizeof(int));
    if (slot) *slot = t;
    return t == 1;
}

static size_t copy_chain(az_sym_t *s, uint64_t pc, uint64_t a, uint32_t level, az_frame_t *out,
                         size_t at, size_t max)
{
    chain_ref_t r = chain_of(s, a);
    for (uint32_t k = 0; k < r.count; k++, at++) {
        if (at >= max) continue;
        out[at] = s->fr[r.first + k];
        out[at].pc = pc;
        out[at].level = level;
    }
    return at;
}

size_t az_sym_stack(az_sym_t *s, const uint64_t *pcs, uint32_t depth, az_frame_t *out, size_t max)
{
    size_t n = 0;
    int interrupted = 0;   /* the frame above a trampoline: at its pc */
    for (uint32_t i = 0; i < depth; i++) {
        uint64_t pc = pcs[i], a = pc;
        if (PST_IS_PYFRAME(pc)) {   /* no return address: looked up as it is */
            interrupted = 0;
            n = copy_chain(s, pc, pc, i, out, n, max);
            continue;
        }
        int tramp = pc && is_trampoline(s, pc);
        if (!tramp && !interrupted && pc) a = pc - 1;
        interrupted = tramp;
        n = copy_chain(s, pc, a, i, out, n, max);
    }
    return n;
}

size_t az_sym_chain(az_sym_t *s, uint64_t pc, int ret_addr, az_frame_t *out, size_t max)
{
    return copy_chain(s, pc, ret_addr && pc && !PST_IS_PYFRAME(pc) ? pc - 1 : pc, 0, out, 0, max);
}

void az_sym_lookup(az_sym_t *s, uint64_t pc, int ret_addr, az_frame_t *out)
{
    az_frame_t one;
    memset(&one, 0, sizeof one);
    if (!az_sym_chain(s, pc, ret_addr, &one, 1)) one.pc = pc;
    *out = one;
}

const char *az_sym_format(const az_frame_t *f, uint64_t pc, char *buf, size_t len)
{
    if (f->function && f->file) {
        const char *base = strrchr(f->file, '/');
        if (f->shown_file) base = f->shown_file - 1;
        snprintf(buf, len, "%s (%s:%d)", f->function, base ? base + 1 : f->file, f->line);
    } else if (f->function) {
        snprintf(buf, len, "%s", f->function);
    } else if (f->module) {
        snprintf(buf, len, "%s+0x%llx", f->module, (unsigned long long)f->offset);
    } else {
        snprintf(buf, len, "0x%llx", (unsigned long long)pc);
    }
    return buf;
}

int az_sym_is_tracer(const az_frame_t *f)
{
    return f->module && strstr(f->module, "poolscope-preload") != NULL;
}
