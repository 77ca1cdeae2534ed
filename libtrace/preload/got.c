/* got.c — finding and writing GOT slots without calling the loader.
 *
 * `--scope-function` (hooks_func.c) and `poolscope attach` (attach.c) point
 * GOT slots of loaded objects at code of ours. Both used to ask the loader
 * for a slot's definition (dlsym/dlvsym) and to keep the slot's object
 * loaded while writing (dlopen RTLD_NOLOAD, dlclose). Those calls are not
 * free of side effects: a dlsym(RTLD_DEFAULT) that finds a symbol in a
 * library the program dlopened RTLD_GLOBAL adds a dependency of our
 * library on it, and the program's dlclose no longer unloads it, so its
 * next dlopen allocates less (issue 27, item 4: llama.cpp leaked 20,762
 * objects with --scope-function and 20,764 without); a failed dlsym
 * mallocs its error text on the tracer's thread.
 *
 * Here everything happens inside dl_iterate_phdr callbacks: the loader
 * holds its (recursive) list lock across the whole iteration, and unmaps
 * an object only after taking that lock to unlink it, so every object the
 * walk is shown stays mapped until the walk returns. A definition is looked
 * up from the objects' own dynamic symbol tables (DT_GNU_HASH or DT_HASH,
 * with DT_VERSYM/DT_VERDEF) by a nested dl_iterate_phdr, in load order:
 * the executable and the libraries it was started with first, then what
 * was loaded later. That is the loader's global scope for every object
 * loaded at start or RTLD_GLOBAL; for an RTLD_LOCAL object whose function
 * is defined by two local objects, the earlier loaded one is taken. A slot
 * already bound (not pointing into its own object's PLT) is its own
 * definition, and no lookup is made for it.
 *
 * No allocation, no lock of ours, no loader call but dl_iterate_phdr;
 * writes to read-only (RELRO) pages go through raw mprotect syscalls (sys.c).
 */
#include "preload.h"

#include <elf.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef struct got_dyn {
    uintptr_t base, lo, hi, relro_lo, relro_hi;
    const ElfW(Sym) *syms;
    const char *strs;
    uintptr_t strsz;
    const uint32_t *gnu_hash, *sysv_hash;
    const ElfW(Half) *versym;
    uintptr_t verdef, verneed, verneednum;
    uintptr_t jmprel, pltrelsz, rela, relasz;
    long pltrel;
} got_dyn_t;

static int is_vdso(const char *name)
{
    return !strncmp(name, "linux-vdso", 10) || !strncmp(name, "linux-gate", 10);
}

/* The object's dynamic tables, 0 when it has none we can read. */
static int read_dyn(const struct dl_phdr_info *info, got_dyn_t *d)
{
    memset(d, 0, sizeof *d);
    d->base = info->dlpi_addr;
    d->lo = UINTPTR_MAX;
    d->pltrel = DT_RELA;
    const ElfW(Dyn) *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            if (d->base + ph->p_vaddr < d->lo) d->lo = d->base + ph->p_vaddr;
            if (d->base + ph->p_vaddr + ph->p_memsz > d->hi) d->hi = d->base + ph->p_vaddr + ph->p_memsz;
        } else if (ph->p_type == PT_DYNAMIC) {
            dyn = (const ElfW(Dyn) *)(d->base + ph->p_vaddr);
        } else if (ph->p_type == PT_GNU_RELRO) {
            d->relro_lo = d->base + ph->p_vaddr;
            d->relro_hi = d->relro_lo + ph->p_memsz;
        }
    }
    if (!dyn || d->lo >= d->hi) return 0;
    uintptr_t symtab = 0, strtab = 0, gnu = 0, sysv = 0, versym = 0;
    for (const ElfW(Dyn) *e = dyn; e->d_tag != DT_NULL; e++) {
        uintptr_t v = e->d_un.d_ptr;
        switch (e->d_tag) {
        case DT_SYMTAB:     symtab = v; break;
        case DT_STRTAB:     strtab = v; break;
        case DT_STRSZ:      d->strsz = v; break;
        case DT_GNU_HASH:   gnu = v; break;
        case DT_HASH:       sysv = v; break;
        case DT_VERSYM:     versym = v; break;
        case DT_VERDEF:     d->verdef = v; break;
        case DT_VERNEED:    d->verneed = v; break;
        case DT_VERNEEDNUM: d->verneednum = v; break;
        case DT_JMPREL:     d->jmprel = v; break;
        case DT_PLTRELSZ:   d->pltrelsz = v; break;
        case DT_PLTREL:     d->pltrel = (long)v; break;
        case DT_RELA:       d->rela = v; break;
        case DT_RELASZ:     d->relasz = v; break;
        default: break;
        }
    }
    /* The loader relocates these entries in place for most objects, not
     * for all (a read-only dynamic section, the vDSO): an address below
     * the base is not one yet. */
#define FIX(p) do { if ((p) && (p) < d->base) (p) += d->base; } while (0)
    FIX(symtab); FIX(strtab); FIX(gnu); FIX(sysv); FIX(versym);
    FIX(d->verdef); FIX(d->verneed); FIX(d->jmprel); FIX(d->rela);
#undef FIX
    if (!symtab || !strtab) return 0;
    d->syms = (const ElfW(Sym) *)symtab;
    d->strs = (const char *)strtab;
    d->gnu_hash = (const uint32_t *)gnu;
    d->sysv_hash = (const uint32_t *)sysv;
    d->versym = (const ElfW(Half) *)versym;
    return 1;
}

/* The name of version index vi in the object's DT_VERNEED list, or NULL. */
static const char *needed_version(const got_dyn_t *d, unsigned vi)
{
    if (vi < 2 || !d->verneed) return NULL;
    const ElfW(Verneed) *vn = (const ElfW(Verneed) *)d->verneed;
    for (uintptr_t k = 0; k < d->verneednum; k++) {
        const ElfW(Vernaux) *va = (const ElfW(Vernaux) *)((const char *)vn + vn->vn_aux);
        for (unsigned j = 0; j < vn->vn_cnt; j++) {
            if (va->vna_other == vi) return va->vna_name < d->strsz ? d->strs + va->vna_name : NULL;
            va = (const ElfW(Vernaux) *)((const char *)va + va->vna_next);
        }
        if (!vn->vn_next) break;
        vn = (const ElfW(Verneed) *)((const char *)vn + vn->vn_next);
    }
    return NULL;
}

/* The name of version index vi in the object's DT_VERDEF list, or NULL. */
static const char *defined_version(const got_dyn_t *d, unsigned vi)
{
    if (!d->verdef) return NULL;
    const ElfW(Verdef) *vd = (const ElfW(Verdef) *)d->verdef;
    for (;;) {
        if (vd->vd_ndx == vi) {
            const ElfW(Verdaux) *a = (const ElfW(Verdaux) *)((const char *)vd + vd->vd_aux);
            return a->vda_name < d->strsz ? d->strs + a->vda_name : NULL;
        }
        if (!vd->vd_next) return NULL;
        vd = (const ElfW(Verdef) *)((const char *)vd + vd->vd_next);
    }
}

/* Whether symbol i of d defines `name` for a reference asking `version`
 * (NULL: none): the loader's rule, short of its warnings. */
static int defines(const got_dyn_t *d, size_t i, const char *name, const char *version)
{
    const ElfW(Sym) *s = &d->syms[i];
    if (s->st_shndx == SHN_UNDEF || s->st_name >= d->strsz) return 0;
    unsigned type = ELF64_ST_TYPE(s->st_info), bind = ELF64_ST_BIND(s->st_info);
    if (type != STT_FUNC && type != STT_GNU_IFUNC && type != STT_NOTYPE) return 0;
    if (bind != STB_GLOBAL && bind != STB_WEAK && bind != STB_GNU_UNIQUE) return 0;
    if (strcmp(d->strs + s->st_name, name)) return 0;
    if (!d->versym) return 1;
    unsigned v = d->versym[i];
    if (!version) return !(v & 0x8000);   /* the default version */
    if ((v & 0x7fff) < 2) return !(v & 0x8000);
    const char *have = defined_version(d, v & 0x7fff);
    return have && !strcmp(have, version);
}

static uint32_t hash_gnu(const char *s)
{
    uint32_t h = 5381;
    for (; *s; s++) h = h * 33 + (unsigned char)*s;
    return h;
}

static uint32_t hash_sysv(const char *s)
{
    uint32_t h = 0;
    for (; *s; s++) {
        h = (h << 4) + (unsigned char)*s;
        uint32_t g = h & 0xf0000000u;
        if (g) h ^= g >> 24;
        h &= ~g;
    }
    return h;
}

/* The index of d's symbol defining name/version, 0 if none. */
static size_t find_sym(const got_dyn_t *d, const char *name, const char *version)
{
    if (d->gnu_hash) {
        const uint32_t *h = d->gnu_hash;
        uint32_t nb = h[0], off = h[1], nbloom = h[2];
        if (!nb) return 0;
        const uint32_t *buckets = h + 4 + nbloom * (sizeof(ElfW(Addr)) / 4);
        const uint32_t *chain = buckets + nb;
        uint32_t hv = hash_gnu(name), i = buckets[hv % nb];
        if (i < off) return 0;
        for (;; i++) {
            uint32_t c = chain[i - off];
            if ((c | 1) == (hv | 1) && defines(d, i, name, version)) return i;
            if (c & 1) return 0;
        }
    }
    if (d->sysv_hash) {
        const uint32_t *h = d->sysv_hash;
        uint32_t nb = h[0], nc = h[1];
        if (!nb) return 0;
        const uint32_t *chain = h + 2 + nb;
        for (uint32_t i = h[2 + hash_sysv(name) % nb], k = 0; i && i < nc && k < nc; i = chain[i], k++)
            if (defines(d, i, name, version)) return i;
    }
    return 0;
}

typedef struct got_query {
    const char *name, *version;
    uintptr_t found;
    int self;              /* only in our own object */
} got_query_t;

static int lookup_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    got_query_t *q = arg;
    if (info->dlpi_name && is_vdso(info->dlpi_name)) return 0;
    got_dyn_t d;
    if (!read_dyn(info, &d)) return 0;
    if (q->self && ((uintptr_t)ps_got_lookup < d.lo || (uintptr_t)ps_got_lookup >= d.hi)) return 0;
    size_t i = find_sym(&d, q->name, q->version);
    if (!i) return 0;
    uintptr_t v = d.base + d.syms[i].st_value;
    /* an IFUNC's value is its resolver, which the loader calls without
     * arguments on x86-64 to get the implementation */
    if (ELF64_ST_TYPE(d.syms[i].st_info) == STT_GNU_IFUNC) v = ((uintptr_t (*)(void))v)();
    q->found = v;
    return 1;
}

uintptr_t ps_got_lookup(const char *name, const char *version)
{
    got_query_t q = { name, version, 0, 0 };
    dl_iterate_phdr(lookup_cb, &q);   /* nested inside a walk: the lock is recursive */
    return q.found;
}

uintptr_t ps_got_lookup_self(const char *name)
{
    got_query_t q = { name, NULL, 0, 1 };
    dl_iterate_phdr(lookup_cb, &q);
    return q.found;
}

typedef struct got_walk {
    ps_got_match_fn match;
    ps_got_slot_fn on_slot;
    void *arg;
    unsigned index;
} got_walk_t;

static int walk_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    got_walk_t *w = arg;
    unsigned index = w->index++;
    const char *name = info->dlpi_name ? info->dlpi_name : "";
    if (is_vdso(name)) return 0;
    got_dyn_t d;
    if (!read_dyn(info, &d) || d.pltrel != DT_RELA) return 0;
    if ((uintptr_t)ps_got_lookup >= d.lo && (uintptr_t)ps_got_lookup < d.hi) return 0;   /* ourselves */
    const struct { uintptr_t p, n; } tabs[2] = { { d.jmprel, d.pltrelsz }, { d.rela, d.relasz } };
    for (int ti = 0; ti < 2; ti++) {
        const ElfW(Rela) *r = (const ElfW(Rela) *)tabs[ti].p;
        size_t nr = tabs[ti].p ? tabs[ti].n / sizeof *r : 0;
        for (size_t i = 0; i < nr; i++) {
            unsigned type = ELF64_R_TYPE(r[i].r_info);
            if (type != R_X86_64_JUMP_SLOT && type != R_X86_64_GLOB_DAT) continue;
            size_t si = ELF64_R_SYM(r[i].r_info);
            const ElfW(Sym) *sym = &d.syms[si];
            unsigned st = ELF64_ST_TYPE(sym->st_info);
            if (!si || sym->st_name >= d.strsz) continue;
            if (st != STT_FUNC && st != STT_GNU_IFUNC && st != STT_NOTYPE) continue;
            const char *sname = d.strs + sym->st_name;
            int fn = w->match(sname, w->arg);
            if (fn < 0) continue;
            ps_got_slot_t s;
            s.addr = d.base + r[i].r_offset;
            s.name = sname;
            s.version = d.versym ? needed_version(&d, d.versym[si] & 0x7fff) : NULL;
            s.fn = fn;
            s.obj_lo = d.lo;
            s.obj_hi = d.hi;
            s.relro_lo = d.relro_lo;
            s.relro_hi = d.relro_hi;
            s.is_exe = index == 0 && !name[0];
            /* the executable takes the function's address: its undefined
             * symbol's value is a PLT entry that jumps through its own slot */
            s.canon = s.is_exe && sym->st_shndx == SHN_UNDEF && sym->st_value ? d.base + sym->st_value : 0;
            s.obj_index = index;
            w->on_slot(&s, w->arg);
        }
    }
    return 0;
}

void ps_got_walk(ps_got_match_fn match, ps_got_slot_fn on_slot, void *arg)
{
    got_walk_t w = { match, on_slot, arg, 0 };
    dl_iterate_phdr(walk_cb, &w);
}

uintptr_t ps_got_definition(const ps_got_slot_t *s, uintptr_t canon)
{
    uintptr_t v = __atomic_load_n((uintptr_t *)s->addr, __ATOMIC_RELAXED);
    /* unbound: 0, or a lazy slot pointing into its own object's PLT; and
     * the executable's canonical PLT entry, which would jump back through
     * a hooked slot: the definition is the one the libraries hold */
    if (!v || (v >= s->obj_lo && v < s->obj_hi) || (canon && v == canon))
        v = ps_got_lookup(s->name, s->version);
    return v;
}

int ps_got_write(const ps_got_slot_t *s, uintptr_t value)
{
    /* the loader protects RELRO's whole pages only: its last partial page
     * stays writable, and is left as it is */
    uintptr_t pgsz = (uintptr_t)ps_g.page_size;
    uintptr_t pg = s->addr & ~(pgsz - 1), rend = s->relro_hi & ~(pgsz - 1);
    int ro = s->addr >= s->relro_lo && pg + pgsz <= rend;
    if (ro && ps_sys_mprotect((void *)pg, (size_t)pgsz, PROT_READ | PROT_WRITE) != 0) return -1;
    __atomic_store_n((uintptr_t *)s->addr, value, __ATOMIC_RELEASE);
    if (ro) ps_sys_mprotect((void *)pg, (size_t)pgsz, PROT_READ);
    return 0;
}
