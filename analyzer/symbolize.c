/* symbolize.c — offline symbolization through libdwfl (see symbolize.h).
 *
 * One Dwfl session, modules reported with dwfl_report_elf at the address of
 * their first PT_LOAD (add_p_vaddr = true, so prelinked or non-zero p_vaddr
 * files land right). A file that cannot be opened is skipped: its addresses
 * come out as module+offset. Lookups are memoized in the common hash map,
 * keyed by the looked-up address.
 */
#include "symbolize.h"

#include <elfutils/libdwfl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hashmap.h"

struct az_sym {
    Dwfl *dwfl;
    Dwfl_Callbacks cb;
    char *debuginfo_path;
    struct { uint64_t base, size; char *name; } *mods;
    size_t n_mods;
    psc_map_t cache;             /* looked-up address -> az_frame_t */
    char **strs;                 /* owned strings */
    size_t n_strs, cap_strs;
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

az_sym_t *az_sym_create(const pst_module_t *mods, size_t n)
{
    az_sym_t *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->cb.find_elf = dwfl_build_id_find_elf;
    s->cb.find_debuginfo = dwfl_standard_find_debuginfo;
    s->cb.debuginfo_path = &s->debuginfo_path;
    s->dwfl = dwfl_begin(&s->cb);
    int rc = psc_map_init(&s->cache, sizeof(az_frame_t), 512, 50, NULL);   /* 1024 slots */
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

void az_sym_destroy(az_sym_t *s)
{
    if (!s) return;
    if (s->dwfl) dwfl_end(s->dwfl);
    for (size_t i = 0; i < s->n_strs; i++) free(s->strs[i]);
    free(s->strs);
    psc_map_free(&s->cache);
    free(s->mods);
    free(s);
}

static void resolve(az_sym_t *s, uint64_t a, az_frame_t *out)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < s->n_mods; i++)
        if (a >= s->mods[i].base && a - s->mods[i].base < s->mods[i].size) {
            out->module = s->mods[i].name;
            out->offset = a - s->mods[i].base;
            break;
        }
    if (!s->dwfl) return;
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, a);
    if (!mod) return;
    const char *name = dwfl_module_addrname(mod, a);
    out->function = keep(s, name);
    Dwfl_Line *line = dwfl_module_getsrc(mod, a);
    if (line) {
        int ln = 0;
        const char *file = dwfl_lineinfo(line, NULL, &ln, NULL, NULL, NULL);
        if (file) { out->file = keep(s, file); out->line = ln; }
    }
}

void az_sym_lookup(az_sym_t *s, uint64_t pc, int ret_addr, az_frame_t *out)
{
    uint64_t a = ret_addr && pc ? pc - 1 : pc;
    const az_frame_t *hit = psc_map_get_sz(&s->cache, a, sizeof(az_frame_t));
    if (hit) { *out = *hit; return; }
    resolve(s, a, out);
    az_frame_t *slot = psc_map_put_sz(&s->cache, a, NULL, sizeof(az_frame_t));   /* NULL: the memo cannot grow, skip it */
    if (slot) *slot = *out;
}

const char *az_sym_format(const az_frame_t *f, uint64_t pc, char *buf, size_t len)
{
    if (f->function && f->file) {
        const char *base = strrchr(f->file, '/');
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

int az_sym_is_allocator(const az_frame_t *f)
{
    if (f->module && strstr(f->module, "poolscope-preload")) return 1;
    if (!f->function) return 0;
    static const char *const names[] = {
        "malloc", "calloc", "realloc", "reallocarray", "free", "posix_memalign",
        "aligned_alloc", "memalign", "valloc", "pvalloc", "mmap", "mmap64", "munmap",
        "mremap", "__libc_malloc", "__libc_calloc", "__libc_realloc", "__libc_free",
        "__libc_memalign", "operator new", "operator new[]", "_Znwm", "_Znam",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(f->function, names[i]) == 0) return 1;
    return strncmp(f->function, "ps_", 3) == 0 || strncmp(f->function, "pst_", 4) == 0;
}
