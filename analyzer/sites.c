/* sites.c — site labels, wrapper skipping and rows by label (see sites.h).
 *
 * A stack's label is computed once (memo: stack id -> label index): its
 * displayed frames from the symbolizer, the tracer's own dropped, the
 * wrappers at the inner end skipped, then the first meaningful frame as
 * "function (file:line)" and depth - 1 callers by their short names;
 * inlined frames carry " [inlined]". Rows: the heap accumulator's
 * per-stack sites sorted by (label, via) and merged.
 */
#include "sites.h"

#include <ctype.h>
#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "hashmap.h"
#include "strkeep.h"

/* The default wrappers. Function patterns match the demangled name with
 * its parameters ("operator new(unsigned long)"), hence the trailing '*'
 * or '(*' on C++ names. Keep README.md ("Sites") in step. */
const char *const az_sv_default_skip[] = {
    /* the C allocator and its libc helpers */
    "malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign", "aligned_alloc",
    "memalign", "valloc", "pvalloc", "mmap", "mmap64", "munmap", "mremap", "__libc_*alloc*", "__libc_memalign", "__libc_free",
    "strdup", "strndup", "__strdup", "__strndup", "xmalloc", "xcalloc", "xrealloc", "xstrdup",
    /* C++: operator new, the std::allocator machinery, containers' growth */
    "operator new*", "operator new[]*", "std::allocator<*", "std::allocator_traits<*",
    "std::__new_allocator<*", "__gnu_cxx::new_allocator<*", "__gnu_cxx::__new_allocator<*",
    "std::_Vector_base<*", "std::vector<*", "std::__cxx11::basic_string<*", "std::basic_string<*",
    "std::__detail::_Hashtable_alloc<*", "std::_Hashtable<*", "std::__cxx11::list<*",
    "std::_List_base<*", "std::_Rb_tree<*", "std::deque<*", "std::_Deque_base<*",
    "std::make_unique<*", "std::make_shared<*", "std::__shared_count<*", "std::__allocate_shared<*",
    /* PyTorch, ggml */
    "c10::alloc_cpu*", "c10::DefaultCPUAllocator::*", "ggml_aligned_malloc*",
    "ggml_backend_*alloc_buffer*", "ggml_backend_buffer_init*",
    /* CPython's allocators */
    "PyMem_*", "_PyMem_*", "PyObject_Malloc", "PyObject_Calloc", "PyObject_Realloc",
    "_PyObject_Malloc", "_PyObject_Calloc", "_PyObject_Realloc", "pymalloc_*",
    "_PyObject_GC_New*", "_PyObject_GC_Link", "gc_alloc", "_PyType_AllocNoTrack",
    "PyType_GenericAlloc", "_PyObject_New*", "PyObject_GC_*",
    /* our own pool library (its functions, whatever their names), and the
     * reference engine's tensor layer, which only picks pool, malloc or arena */
    "file:*/pool/bufpool.c", "file:*/pool/blockpool.c", "file:*/libtrace/pool_adapter.c",
    "file:*/include/poolscope/bufpool.h", "file:*/include/poolscope/blockpool.h",
    "file:*/reference-engine/alloc.c",
    NULL,
};

const char *const az_sv_kind_names[AZ_SV_KINDS] = {
    "heap", "pool acquires", "KV blocks", "mmap anonymous", "mmap file-backed",
};

typedef struct lab { const char *label, *via, *file; int line; } lab_t;

struct az_sv {
    const az_scan_t *scan;
    az_sym_t *sym;
    az_sv_opts_t o;
    /* A stack's label, computed once: stack id -> index + 1 into labs (0
     * not yet), direct for the dense ids a writer gives (1, 2, ...), by map
     * beyond LAB_DIRECT. labs holds each distinct label once: a PyTorch
     * run's 1.4 M stacks have a few thousand (a map and a lab_t per stack
     * were 160 MB of report's peak). */
    uint32_t *lab_of;
    size_t cap_lab_of;
    psc_map_t memo;
    lab_t *labs;
    size_t n_labs, cap_labs;
    psc_map_t lab_ids;           /* hash of a lab_t (probed on a clash) -> its index */
    psc_strset_t texts;          /* labels, files and callers' names, each text once */
    az_dsite_t *rows[AZ_SV_KINDS];
    size_t n_rows[AZ_SV_KINDS];
    int rows_done[AZ_SV_KINDS];
    az_frame_t *buf;             /* az_sv_frames scratch */
    size_t cap_buf;
    /* Pattern results by the address of the one string they test: the
     * symbolizer keeps each function, file and module text at one address
     * for its life, and a PyTorch trace's 1.4 M stacks (113 M frames) name
     * a few thousand of them, so each wrapper pattern runs once per
     * distinct text instead of once per frame (a third of `report`'s time
     * when it ran per frame). A pointer member: the functions that fill it
     * take a const view, and the memo changes no answer. */
    psc_map_t *seen;             /* tag << 56 | address -> 1 yes, 2 no */
};

/* what a memo entry says of its string (the key's top byte) */
enum { SEEN_SKIP_FN = 1, SEEN_SKIP_FILE = 2, SEEN_TRACER = 3 };

/* str's copy in v, one per distinct text: 1.4 M stacks of a PyTorch run
 * share a few thousand labels (213 MB of copies when each stack kept its
 * own). NULL for NULL or out of memory. */
static const char *keep(az_sv_t *v, const char *str)
{
    uint32_t id = psc_strset_id(&v->texts, str, NULL);
    return id ? psc_strset_text(&v->texts, id) : NULL;
}

az_sv_t *az_sv_create(const az_scan_t *s, az_sym_t *sym, const az_sv_opts_t *o)
{
    az_sv_t *v = calloc(1, sizeof *v);
    if (!v) return NULL;
    v->scan = s;
    v->sym = sym;
    if (o) v->o = *o;
    if (!v->o.depth) v->o.depth = 2;
    v->seen = malloc(sizeof *v->seen);
    if (!v->seen || psc_map_init(v->seen, 1, 1024, 50, NULL)) { free(v->seen); free(v); return NULL; }
    if (psc_map_init(&v->memo, sizeof(uint32_t), 256, 50, NULL) ||
        psc_strset_init(&v->texts) ||
        psc_map_init(&v->lab_ids, sizeof(uint32_t), 256, 50, NULL)) {
        psc_map_free(&v->memo);
        psc_strset_free(&v->texts);
        psc_map_free(v->seen);
        free(v->seen);
        free(v);
        return NULL;
    }
    return v;
}

void az_sv_destroy(az_sv_t *v)
{
    if (!v) return;
    psc_map_free(&v->memo);
    psc_strset_free(&v->texts);
    psc_map_free(&v->lab_ids);
    psc_map_free(v->seen);
    free(v->seen);
    free(v->labs);
    free(v->lab_of);
    for (int k = 0; k < AZ_SV_KINDS; k++) free(v->rows[k]);
    free(v->buf);
    free(v);
}

/* Does file pattern pat (after "file:") match path? A path relative to
 * the compilation directory ("pool/bufpool.c") matches "*\/pool/bufpool.c"
 * too. */
static int file_match(const char *pat, const char *path)
{
    if (fnmatch(pat, path, 0) == 0) return 1;
    char abs[4096];
    return path[0] != '/' && snprintf(abs, sizeof abs, "/%s", path) < (int)sizeof abs && fnmatch(pat, abs, 0) == 0;
}

/* Does wrapper pattern pat name text, a function (files 0) or a file
 * path (files 1)? A "file:" pattern names only files, any other only
 * functions. */
static int pat_hits(const char *pat, const char *text, int files)
{
    if (!strncmp(pat, "file:", 5)) return files && file_match(pat + 5, text);
    return !files && fnmatch(pat, text, 0) == 0;
}

static int skip_text(const az_sv_t *v, const char *text, int files)
{
    if (!v->o.no_skip)
        for (const char *const *p = az_sv_default_skip; *p; p++)
            if (pat_hits(*p, text, files)) return 1;
    for (size_t i = 0; i < v->o.n_skip; i++)
        if (v->o.skip[i] && pat_hits(v->o.skip[i], text, files)) return 1;
    return 0;
}

/* The memoized answer for text under tag, test(v, text) when new. */
static int seen(const az_sv_t *v, int tag, const char *text, int (*test)(const az_sv_t *, const char *))
{
    uint64_t key = (uint64_t)tag << 56 | (uint64_t)(uintptr_t)text;
    uint8_t *r = psc_map_get_sz(v->seen, key, 1);
    if (r) return *r == 1;
    int yes = test(v, text);
    if ((uint64_t)(uintptr_t)text >> 56 == 0 && (r = psc_map_put_sz(v->seen, key, NULL, 1))) *r = yes ? 1 : 2;
    return yes;
}

static int is_tracer_module(const az_sv_t *v, const char *module)
{
    (void)v;
    az_frame_t f = { .module = module };
    return az_sym_is_tracer(&f);
}

static int skip_fn(const az_sv_t *v, const char *fn) { return skip_text(v, fn, 0); }
static int skip_file(const az_sv_t *v, const char *file) { return skip_text(v, file, 1); }

int az_sv_skipped(const az_sv_t *v, const az_frame_t *f)
{
    return (f->function && seen(v, SEEN_SKIP_FN, f->function, skip_fn)) ||
           (f->file && seen(v, SEEN_SKIP_FILE, f->file, skip_file));
}

const char *az_sv_short(const char *name, char *buf, size_t len)
{
    if (!len) return buf;
    size_t o = 0;
    int depth = 0;
    for (const char *p = name; *p && o + 1 < len;) {
        /* the first character before a call: this runs per character */
        if (*p == 'o' && !strncmp(p, "operator", 8) && (p == name || p[-1] == ':' || p[-1] == ' ')) {
            size_t k = 8;
            if (!strncmp(p + 8, "()", 2)) k = 10;
            else while (p[k] && strchr("<>=!+-*/%^&|~[],", p[k])) k++;
            for (size_t i = 0; i < k && o + 1 < len; i++) buf[o++] = p[i];
            p += k;
            continue;
        }
        if (*p == '(' && depth == 0 && !strncmp(p, "(anonymous namespace)", 21)) {
            for (size_t i = 0; i < 21 && o + 1 < len; i++) buf[o++] = p[i];
            p += 21;
            continue;
        }
        char c = *p;
        if (c == '(' && depth == 0) break;
        if (c == '<' || c == '(' || c == '{' || c == '[') depth++;
        else if ((c == '>' || c == ')' || c == '}' || c == ']') && depth > 0) depth--;
        buf[o++] = c;
        p++;
    }
    while (o && buf[o - 1] == ' ') o--;
    buf[o] = 0;
    return buf;
}

const char *az_sv_fold(const char *name, char *buf, size_t len)
{
    if (!len) return buf;
    size_t o = 0;
    int depth = 0, paren = 0;    /* paren: parentheses open inside a template argument list */
    static const char ell[] = "\xe2\x80\xa6";   /* U+2026 */
    for (const char *p = name; *p && o + 1 < len; p++) {
        /* operator<, operator<<=, operator->, operator<=>: no bracket */
        if (*p == 'o' && !strncmp(p, "operator", 8) && (p == name || strchr(": ~", p[-1]))) {
            size_t k = 8;
            while (p[k] && strchr("<>=-", p[k])) k++;
            for (size_t i = 0; i < k && o + 1 < len; i++)
                if (!depth) buf[o++] = p[i];
            p += k - 1;
            continue;
        }
        /* inside an argument list's parentheses (a function type, a
         * decltype) a '<' may be a comparison: not counted there */
        if (depth && (*p == '(' || *p == ')')) { paren += *p == '(' ? 1 : paren > 0 ? -1 : 0; continue; }
        if (paren && (*p == '<' || *p == '>')) continue;
        if (*p == '<' && !depth && p > name && p[-1] == ' ' && p[1] == ' ') {
            buf[o++] = '<';   /* a label's " < " between a frame and its caller */
            continue;
        }
        /* a template's list opens right after its name; a '<' after
         * anything else at the top level is not one: Python's <module>,
         * <locals>, <frozen importlib._bootstrap>, a '[<unknown>]' */
        if (*p == '<' && !depth && !(p > name && (isalnum((unsigned char)p[-1]) || p[-1] == '_'))) {
            buf[o++] = '<';
            continue;
        }
        if (*p == '<') {
            if (!depth++) {
                buf[o++] = '<';
                for (size_t i = 0; i < 3 && o + 1 < len; i++) buf[o++] = ell[i];
            }
            continue;
        }
        if (*p == '>' && depth) {
            if (!--depth && o + 1 < len) buf[o++] = '>';
            continue;
        }
        if (!depth) buf[o++] = *p;
    }
    buf[o] = 0;
    return buf;
}

/* az_sv_frames of the innermost lim recorded frames of stack fr[0..depth). */
static size_t frames_of(az_sv_t *v, const uint64_t *fr, uint32_t depth, uint32_t lim, az_frame_t *out, size_t max)
{
    if (!fr || !depth || !v->sym) return 0;
    size_t n = az_sym_stack(v->sym, fr, depth < lim ? depth : lim, out, max);
    if (n > max) n = max;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!out[i].module || !seen(v, SEEN_TRACER, out[i].module, is_tracer_module)) out[k++] = out[i];
    return k;
}

size_t az_sv_frames(az_sv_t *v, uint32_t stack, az_frame_t *out, size_t max)
{
    uint32_t depth = 0;
    const uint64_t *fr = stack ? pst_stack(v->scan->r, stack, &depth) : NULL;
    return frames_of(v, fr, depth, depth, out, max);
}

static void append(char *buf, size_t len, size_t *o, const char *s)
{
    int w = snprintf(buf + *o, *o < len ? len - *o : 0, "%s", s);
    if (w > 0) *o += (size_t)w;
    if (*o >= len) *o = len - 1;
}

#define LABEL_FRAMES 24   /* recorded frames symbolized first for a label (compute) */

static lab_t compute(az_sv_t *v, uint32_t stack)
{
    lab_t r = { NULL, NULL, NULL, 0 };
    char out[32768];
    uint32_t depth = 0;
    const uint64_t *fr = stack ? pst_stack(v->scan->r, stack, &depth) : NULL;
    if (!fr || !depth) { r.label = keep(v, stack ? "(stack undefined)" : "(no stack)"); return r; }
    if (!v->sym) {
        if (PST_IS_PYFRAME(fr[0])) snprintf(out, sizeof out, "<python>:%u", PST_PYFRAME_LINE(fr[0]));
        else snprintf(out, sizeof out, "0x%" PRIx64, fr[0]);
        r.label = keep(v, out);
        return r;
    }
    if (v->cap_buf < 4096) {
        az_frame_t *b = realloc(v->buf, 4096 * sizeof *b);
        if (!b) { r.label = keep(v, "(out of memory)"); return r; }
        v->buf = b; v->cap_buf = 4096;
    }
    /* A label mostly needs the innermost frames: the skipped ones, the
     * first kept, its callers; a Python line's, the native frames down to
     * the nearest Python frame. So the innermost LABEL_FRAMES are
     * symbolized first, the whole stack only when the label reaches past
     * them. On a PyTorch trace of 1.4 M stacks of about 55 frames, a
     * quarter of the labels need more; report takes 10% less time. */
    az_frame_t *f = v->buf;
    uint32_t lim = depth > LABEL_FRAMES ? LABEL_FRAMES : depth;
again:
    r = (lab_t){ NULL, NULL, NULL, 0 };
    size_t n = frames_of(v, fr, depth, lim, f, v->cap_buf);
    int cut = lim < depth;   /* frames left out: a search that ends at n is not over */
    if (!n && cut) { lim = depth; goto again; }
    if (!n) {
        if (PST_IS_PYFRAME(fr[0])) snprintf(out, sizeof out, "<python>:%u", PST_PYFRAME_LINE(fr[0]));
        else snprintf(out, sizeof out, "0x%" PRIx64, fr[0]);
        r.label = keep(v, out);
        return r;
    }
    size_t m = 0;
    while (m < n && az_sv_skipped(v, &f[m])) m++;
    if (m == n && cut) { lim = depth; goto again; }
    if (m == n) m = 0;
    char tmp[16384];
    /* A stack that runs Python is named by its innermost Python line: the
     * native frames inside it are the interpreter's (or an extension's)
     * machinery, which a Python user cannot act on; they stay in the full
     * stack (html, sql, export) */
    size_t py = m;
    while (py < n && !f[py].python) py++;
    if (py == n && cut && !v->o.no_skip) { lim = depth; goto again; }
    if (py < n && py >= m && !v->o.no_skip) {
        m = py;   /* one row per Python line, whatever C code it went through: no via */
        r.file = keep(v, f[m].file);
        r.line = f[m].line;
    } else if (m > 0) {
        const az_frame_t *w = &f[m - 1];
        r.via = keep(v, w->function ? az_sv_short(w->function, tmp, sizeof tmp) : az_sym_format(w, w->pc, tmp, sizeof tmp));
    }
    size_t o = 0;
    out[0] = 0;
    int py_label = f[m].python;   /* a Python line's callers: the Python frames that called it */
    for (unsigned k = 0, at = (unsigned)m; k < v->o.depth; k++, at++) {
        if (py_label) while (at < n && !f[at].python) at++;
        if (at >= n && cut) { lim = depth; goto again; }
        if (at >= n) break;
        const az_frame_t *x = &f[at];
        if (k) append(out, sizeof out, &o, " < ");
        if (k == 0 || !x->function || x->python) append(out, sizeof out, &o, az_sym_format(x, x->pc, tmp, sizeof tmp));
        else append(out, sizeof out, &o, az_sv_short(x->function, tmp, sizeof tmp));
        if (x->inlined) append(out, sizeof out, &o, " [inlined]");
    }
    r.label = keep(v, out);
    return r;
}

#define LAB_DIRECT (1u << 26)

/* Where stack's label index + 1 is kept; NULL when it has no place (not
 * yet, with create 0; out of memory). */
static uint32_t *lab_slot(az_sv_t *v, uint32_t stack, int create)
{
    if (stack >= LAB_DIRECT) {
        if (!create) return psc_map_get_sz(&v->memo, stack, sizeof(uint32_t));
        int is_new;
        uint32_t *slot = psc_map_put_sz(&v->memo, stack, &is_new, sizeof(uint32_t));
        if (slot && is_new) *slot = 0;
        return slot;
    }
    if (stack >= v->cap_lab_of) {
        if (!create) return NULL;
        size_t cap = v->cap_lab_of ? v->cap_lab_of : 1024;
        while (cap <= stack) cap *= 2;
        uint32_t *a = realloc(v->lab_of, cap * sizeof *a);
        if (!a) return NULL;
        memset(a + v->cap_lab_of, 0, (cap - v->cap_lab_of) * sizeof *a);
        v->lab_of = a;
        v->cap_lab_of = cap;
    }
    return &v->lab_of[stack];
}

/* The index of r in labs, added when new; -1 out of memory. Its texts are
 * kept once (keep), so equal labels have equal pointers. */
static long lab_index(az_sv_t *v, lab_t r)
{
    uint64_t h = ((uint64_t)(uintptr_t)r.label * 0x9E3779B97F4A7C15ull) ^ (uint64_t)(uintptr_t)r.via ^
                 ((uint64_t)(uintptr_t)r.file << 7) ^ (uint64_t)(uint32_t)r.line;
    for (uint64_t key = h;; key = key * 0x9E3779B97F4A7C15ull + 1) {
        int is_new;
        uint32_t *slot = psc_map_put_sz(&v->lab_ids, key, &is_new, sizeof *slot);
        if (!slot) return -1;
        if (!is_new) {
            const lab_t *x = &v->labs[*slot];
            if (x->label == r.label && x->via == r.via && x->file == r.file && x->line == r.line) return *slot;
            continue;
        }
        if (psc_grow((void **)&v->labs, &v->cap_labs, v->n_labs, sizeof *v->labs, 256)) {
            psc_map_del(&v->lab_ids, key);
            return -1;
        }
        *slot = (uint32_t)v->n_labs;
        v->labs[v->n_labs] = r;
        return (long)v->n_labs++;
    }
}

const char *az_sv_label(az_sv_t *v, uint32_t stack, const char **via)
{
    const uint32_t *hit = lab_slot(v, stack, 0);
    lab_t r;
    if (hit && *hit) {
        r = v->labs[*hit - 1];
    } else {
        r = compute(v, stack);
        long i = lab_index(v, r);   /* else not memoized */
        uint32_t *slot = i >= 0 ? lab_slot(v, stack, 1) : NULL;
        if (slot) *slot = (uint32_t)i + 1;
    }
    if (!r.label) r.label = "(out of memory)";
    if (via) *via = r.via;
    return r.label;
}

const char *az_sv_file(az_sv_t *v, uint32_t stack, int *line)
{
    const uint32_t *hit = lab_slot(v, stack, 0);
    if (!hit || !*hit) { az_sv_label(v, stack, NULL); hit = lab_slot(v, stack, 0); }
    if (!hit || !*hit || !v->labs[*hit - 1].file) return NULL;
    if (line) *line = v->labs[*hit - 1].line;
    return v->labs[*hit - 1].file;
}

static int by_key(const void *a, const void *b)
{
    const az_dsite_t *x = a, *y = b;
    int c = strcmp(x->label, y->label);
    if (c) return c;
    if (!x->via || !y->via) return (x->via != NULL) - (y->via != NULL);
    return strcmp(x->via, y->via);
}

static const az_site_t *kind_src(az_sv_t *v, int kind, size_t *ns)
{
    *ns = 0;
    switch (kind) {
    case AZ_SV_HEAP: return az_sites(v->scan->heap, ns);
    case AZ_SV_POOL: return az_sites(v->scan->pool, ns);
    case AZ_SV_KV: return v->scan->kinds ? az_ks_sites(v->scan->kinds, AZ_KS_KV, ns) : NULL;
    case AZ_SV_MMAP_ANON: return v->scan->kinds ? az_ks_sites(v->scan->kinds, AZ_KS_MMAP_ANON, ns) : NULL;
    case AZ_SV_MMAP_FILE: return v->scan->kinds ? az_ks_sites(v->scan->kinds, AZ_KS_MMAP_FILE, ns) : NULL;
    default: return NULL;
    }
}

const az_dsite_t *az_sv_sites(az_sv_t *v, size_t *n) { return az_sv_kind_sites(v, AZ_SV_HEAP, n); }

/* Rows by (label, via): every text of v is kept once (keep), so a row is
 * found by the two pointers, one probe per stack, and only the rows are
 * sorted, by their texts (a sort of one record per stack was 96 MB and 5%
 * of report's time on a PyTorch trace). A row's stack is its first member,
 * in az_sites' order, with the most bytes. */
const az_dsite_t *az_sv_kind_sites(az_sv_t *v, int kind, size_t *n)
{
    *n = 0;
    if (kind < 0 || kind >= AZ_SV_KINDS) return NULL;
    if (v->rows_done[kind]) { *n = v->n_rows[kind]; return v->rows[kind]; }
    size_t ns = 0;
    const az_site_t *src = kind_src(v, kind, &ns);
    v->rows_done[kind] = 1;
    v->n_rows[kind] = 0;
    if (!ns) return NULL;
    az_dsite_t *a = NULL;
    uint64_t *best = NULL;
    size_t k = 0, cap = 0, cap_best = 0;
    psc_map_t ids;
    if (psc_map_init(&ids, sizeof(uint32_t), 256, 50, NULL)) return NULL;
    for (size_t i = 0; i < ns; i++) {
        const az_site_t *x = &src[i];
        const char *via, *label = az_sv_label(v, x->stack, &via);
        uint64_t key = (uint64_t)(uintptr_t)label * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)via;
        uint32_t *slot;
        for (;; key = key * 0x9E3779B97F4A7C15ull + 1) {
            int is_new;
            if (!(slot = psc_map_put_sz(&ids, key, &is_new, sizeof *slot))) goto nomem;
            if (is_new) {
                if (psc_grow((void **)&a, &cap, k, sizeof *a, 256) ||
                    psc_grow((void **)&best, &cap_best, k, sizeof *best, 256))
                    goto nomem;
                *slot = (uint32_t)k;
                a[k] = (az_dsite_t){ .label = label, .via = via, .stack = x->stack };
                best[k++] = x->bytes;
                break;
            }
            if (a[*slot].label == label && a[*slot].via == via) break;
        }
        az_dsite_t *d = &a[*slot];
        if (x->bytes > best[*slot]) { best[*slot] = x->bytes; d->stack = x->stack; }
        d->n_stacks++;
        d->calls += x->calls; d->bytes += x->bytes; d->live_bytes += x->live_bytes;
        d->live_count += x->live_count; d->peak_bytes += x->peak_bytes; d->temporary += x->temporary;
    }
    psc_map_free(&ids);
    free(best);
    qsort(a, k, sizeof *a, by_key);
    v->rows[kind] = a;
    v->n_rows[kind] = k;
    *n = k;
    return a;
nomem:
    psc_map_free(&ids);
    free(a);
    free(best);
    return NULL;
}
