/* stacks.c — call stacks, interned strings and module maps (META records).
 *
 * Capture
 *   fp     walk rbp chains from our own frame. A step reads [fp, fp+16) only
 *          when fp lies in [sp, hi) of the thread's own stack (and the stack
 *          pointer itself lies in [lo, hi)), fp is 8-aligned and strictly
 *          above the previous one: it cannot fault, whatever a frame
 *          without a frame pointer left in rbp.
 *   dwarf  our own walker over the .eh_frame CFI (walk_cfi: a per-address
 *          rule cache, reads bounded to the thread's stack); any address it
 *          cannot express, a signal frame, another stack (sigaltstack) or
 *          a frame of ours below the program's sends the whole capture to
 *          libunwind's unw_backtrace (UNW_CACHE_PER_THREAD), whose frames
 *          walk_cfi reproduces exactly (build with -DPS_DWARF_VERIFY to
 *          check every capture against it, and the fp walk against the
 *          plain chase).
 *   Frames inside this library are dropped. Frames are return addresses
 *   (symbolisers look up address - 1), innermost first.
 *
 * Dedup
 *   A 64-bit hash of the frames names a stack: the sum over the frames of a
 *   bijective mix of (frame, position), kept per thread with the previous
 *   stack, so a stack is re-hashed only in the frames that changed and the
 *   same stack twice in a row reuses its id. Per thread: a direct-mapped
 *   cache (hash -> id), no lock. Global: an open-addressing table read
 *   without a lock (the id is stored before the hash is published with a
 *   release store) and written under its lock; a new stack appends its
 *   META STACK record before its id is published, so the definition is in
 *   the META buffer before any event can use it. Two different stacks
 *   with the same 64-bit hash would share an id: with a million distinct
 *   stacks the chance is ~3e-8; we accept it instead of storing frames.
 *   A full table (3/4 of 2^20 slots) still works: new stacks get a fresh
 *   id and definition every time, so the trace stays right, only larger.
 *
 * Strings (S fields) are interned the same way (hash of the bytes).
 *
 * Modules: dl_iterate_phdr; base = lowest PT_LOAD address (load bias +
 * p_vaddr, as /proc/self/maps shows it), size = span of the PT_LOADs,
 * path (the executable's from /proc/self/exe), GNU build-id. Rescanned on
 * dlclose, by the flusher when the loader's adds/subs counters move, and
 * before a new stack is defined if they moved (so a stack in a freshly
 * dlopen'ed library follows its module record).
 */
#include "preload.h"

#include <elf.h>
#include <link.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

/* ---- hash tables ----------------------------------------------------------- */

/* The tables (ps_table_t, preload.h) live in ps_g.stk: the stack table and
 * the string table, each behind its own lock. */

static void ucache_clear(void);   /* dwarf walk's rule cache */

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1;
}

/* murmur3's finaliser of frame + position: a bijection of the frame. */
static inline uint64_t frame_hash(uint64_t f, int i)
{
    uint64_t h = f + (uint64_t)(i + 1) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint32_t tab_find(ps_table_t *tb, uint64_t h)
{
    ps_slot_t *s = __atomic_load_n(&tb->slots, __ATOMIC_ACQUIRE);
    if (!s) return 0;
    size_t mask = ((size_t)1 << tb->bits) - 1;
    for (size_t i = h & mask, k = 0; k < 64; i = (i + 1) & mask, k++) {
        uint64_t v = __atomic_load_n(&s[i].hash, __ATOMIC_ACQUIRE);
        if (v == h) return s[i].id;
        if (v == 0) return 0;
    }
    return 0;
}

/* Under tb->lock: publish h -> id (best effort: a full probe run is fine). */
static void tab_put(ps_table_t *tb, uint64_t h, uint32_t id)
{
    if (!tb->slots) {
        ps_slot_t *s = ps_sys_mmap(sizeof(ps_slot_t) << tb->bits);
        if (!s) return;
        __atomic_store_n(&tb->slots, s, __ATOMIC_RELEASE);
    }
    size_t n = (size_t)1 << tb->bits, mask = n - 1;
    if (tb->used >= n / 4 * 3) return;
    for (size_t i = h & mask, k = 0; k < 64; i = (i + 1) & mask, k++) {
        if (tb->slots[i].hash == 0) {
            tb->slots[i].id = id;
            __atomic_store_n(&tb->slots[i].hash, h, __ATOMIC_RELEASE);
            tb->used++;
            return;
        }
    }
}

void ps_tables_lock_all(void)
{
    pthread_mutex_lock(&ps_g.stk.modlock);
    pthread_mutex_lock(&ps_g.stk.stab.lock);
    pthread_mutex_lock(&ps_g.stk.strtab.lock);
}

void ps_tables_unlock_all(void)
{
    pthread_mutex_unlock(&ps_g.stk.strtab.lock);
    pthread_mutex_unlock(&ps_g.stk.stab.lock);
    pthread_mutex_unlock(&ps_g.stk.modlock);
}

static void tab_reset(ps_table_t *tb)
{
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    tb->lock = init;
    ps_sys_munmap(tb->slots, sizeof(ps_slot_t) << tb->bits);
    tb->slots = NULL;
    tb->used = 0;
    tb->next_id = 0;
}

/* ---- strings ------------------------------------------------------------------- */

uint32_t ps_string_id(const char *s)
{
    if (!s) return 0;
    size_t n = strlen(s);
    if (n > 65536) n = 65536;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    h = mix(h);
    uint32_t id = tab_find(&ps_g.stk.strtab, h);
    if (id) return id;
    pthread_mutex_lock(&ps_g.stk.strtab.lock);
    id = tab_find(&ps_g.stk.strtab, h);
    if (!id) {
        id = ++ps_g.stk.strtab.next_id;
        /* The layout of pst_put_meta_string, written in two pieces so a
         * long string needs no copy buffer. */
        uint8_t hdr[1 + 2 * PST_VARINT_MAX];
        uint8_t *q = hdr;
        *q++ = PST_META_STRING;
        q = pst_put_varint(q, id);
        q = pst_put_varint(q, n);
        ps_meta_lock();
        ps_meta_append(hdr, (size_t)(q - hdr));
        ps_meta_append(s, n);
        ps_meta_unlock();
        tab_put(&ps_g.stk.strtab, h, id);
    }
    pthread_mutex_unlock(&ps_g.stk.strtab.lock);
    return id;
}

/* ---- modules ---------------------------------------------------------------------- */

#define MAX_MODS 4096

static uint64_t path_key(const char *p, uint64_t base)
{
    uint64_t h = 0xcbf29ce484222325ull ^ base;
    for (; *p; p++) h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
    return mix(h);
}

static size_t build_id(const struct dl_phdr_info *info, const uint8_t **out)
{
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr);
        const uint8_t *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            size_t nsz = (nh->n_namesz + 3) & ~3u, dsz = (nh->n_descsz + 3) & ~3u;
            const uint8_t *name = p + sizeof *nh, *desc = name + nsz;
            if (desc + dsz > end) break;
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && !memcmp(name, "GNU", 4)) {
                *out = desc;
                return nh->n_descsz;
            }
            p = desc + dsz;
        }
    }
    return 0;
}

static int scan_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    int emit_all = *(int *)arg;
    (void)size;
    uint64_t lo = UINT64_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uint64_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lo) lo = a;
        if (a + ph->p_memsz > hi) hi = a + ph->p_memsz;
    }
    if (hi == 0 || ps_g.stk.n_cur >= MAX_MODS) return 0;
    const char *path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : ps_g.stk.exe_path;
    ps_mod_t m = { lo, hi - lo, path_key(path, lo) };
    ps_g.stk.cur[ps_g.stk.n_cur++] = m;
    int known = 0;
    if (!emit_all)
        for (size_t i = 0; i < ps_g.stk.n_mods && !known; i++) known = ps_g.stk.mods[i].key == m.key;
    if (!known) {
        const uint8_t *bid = NULL;
        size_t bl = build_id(info, &bid);
        size_t pl = strlen(path);
        if (pl > 4000) pl = 4000;
        uint8_t rec[1 + 6 * PST_VARINT_MAX + 4000 + 64];
        if (bl > 64) bl = 64;
        uint8_t *e = pst_put_meta_module(rec, 1, ps_now(), lo, hi - lo, path, pl, bid, bl);
        ps_meta_lock();
        ps_meta_append(rec, (size_t)(e - rec));
        ps_meta_unlock();
    }
    return 0;
}

static int counters_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    unsigned long long *c = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        c[0] = info->dlpi_adds;
        c[1] = info->dlpi_subs;
    }
    return 1;
}

/* The loader's counters of objects added and removed: c[0], c[1]. */
void ps_loader_counters(unsigned long long c[2])
{
    c[0] = c[1] = 0;
    dl_iterate_phdr(counters_cb, c);
}

/* ps_g.stk.modlock held */
static void scan_locked(int emit_all)
{
    if (!ps_g.stk.mods) {
        ps_g.stk.mods = ps_sys_mmap(2 * MAX_MODS * sizeof(ps_mod_t));
        if (!ps_g.stk.mods) return;
        ps_g.stk.cur = ps_g.stk.mods + MAX_MODS;
    }
    if (!ps_g.stk.exe_path[0]) {
        ssize_t n = readlink("/proc/self/exe", ps_g.stk.exe_path, sizeof ps_g.stk.exe_path - 1);
        ps_g.stk.exe_path[n > 0 ? n : 0] = 0;
    }
    unsigned long long c[2] = { 0, 0 };
    ps_loader_counters(c);
    if (c[1] != ps_g.stk.seen_subs) ucache_clear();   /* a module went away: its code rules too */
    ps_g.stk.seen_adds = c[0];
    ps_g.stk.seen_subs = c[1];
    ps_g.stk.n_cur = 0;
    dl_iterate_phdr(scan_cb, &emit_all);
    /* Unmaps: known before, gone now. */
    for (size_t i = 0; i < ps_g.stk.n_mods && !emit_all; i++) {
        int still = 0;
        for (size_t k = 0; k < ps_g.stk.n_cur && !still; k++) still = ps_g.stk.cur[k].key == ps_g.stk.mods[i].key;
        if (!still) {
            uint8_t rec[1 + 6 * PST_VARINT_MAX];
            uint8_t *e = pst_put_meta_module(rec, 0, ps_now(), ps_g.stk.mods[i].base, ps_g.stk.mods[i].size, "", 0, NULL, 0);
            ps_meta_lock();
            ps_meta_append(rec, (size_t)(e - rec));
            ps_meta_unlock();
        }
    }
    ps_mod_t *t = ps_g.stk.mods; ps_g.stk.mods = ps_g.stk.cur; ps_g.stk.cur = t;
    ps_g.stk.n_mods = ps_g.stk.n_cur;
}

void ps_modules_scan(int emit_all)
{
    pthread_mutex_lock(&ps_g.stk.modlock);
    scan_locked(emit_all);
    pthread_mutex_unlock(&ps_g.stk.modlock);
}

void ps_modules_poll(void)
{
    unsigned long long c[2] = { 0, 0 };
    ps_loader_counters(c);
    if (c[0] == ps_g.stk.seen_adds && c[1] == ps_g.stk.seen_subs) return;
    ps_modules_scan(0);
}

void ps_modules_reset(void)
{
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    ps_g.stk.modlock = init;
    ps_g.stk.n_mods = 0;
    ps_g.stk.seen_adds = ps_g.stk.seen_subs = ~0ull;
}

void ps_tables_reset(void)
{
    tab_reset(&ps_g.stk.stab);
    tab_reset(&ps_g.stk.strtab);
    ps_modules_reset();
    ps_py_reset();
}

/* ---- capture ------------------------------------------------------------------------- */

void ps_stacks_init(void)
{
    if (ps_g.stacks == PST_STACKS_DWARF)
        unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
}

/* The walk follows the rbp chain and writes the frames straight into
 * t->walk.fr, comparing each with the frame the previous stack of the
 * thread had there: a changed frame moves the hash sum by its own term
 * only (see ps_stack_id). *same: the stack is the previous one. */
__attribute__((noinline)) static int walk_fp(ps_thr_t *t, int max, int *same)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    uintptr_t lo = t->stk_lo, hi = t->stk_hi;
    ps_walk_t *w = &t->walk;
    *same = 0;
    if (!hi || sp < lo || sp >= hi || max <= 0) return 0;
    /* Locals: the stores through `o` may alias ps_g for the compiler,
     * which would reload the bounds on every frame. fp >= sp holds by
     * induction (fp starts at sp and only grows), so only the top bound
     * needs a check. */
    const uintptr_t slo = ps_g.self_lo, sspan = ps_g.self_hi - ps_g.self_lo;
    const uintptr_t lim = hi - 16;
    uint64_t *const fr = w->fr, *o = fr, *const oend = fr + max;
    const uint64_t *const had = fr + w->nfr;   /* frames of the previous stack */
    uint64_t sum = w->hsum;
    int diff = 0;
    uintptr_t fp = sp;
    for (int steps = max + 16; steps > 0; steps--) {
        if (fp > lim || (fp & 7)) break;
        uintptr_t next = ((const uintptr_t *)fp)[0];
        uintptr_t ret = ((const uintptr_t *)fp)[1];
        if (ret < 4096) break;
        if (ret - slo >= sspan) {   /* not in this library */
            uint64_t old = *o;
            if (old != ret) {
                if (o < had) sum += frame_hash(ret, (int)(o - fr)) - frame_hash(old, (int)(o - fr));
                *o = ret;
                diff = 1;
            }
            if (++o == oend) break;
        }
        if (next <= fp) break;
        fp = next;
    }
    int n = (int)(o - fr);
    if (n != (int)w->nfr) {
        sum = 0;
        for (int i = 0; i < n; i++) sum += frame_hash(fr[i], i);
        w->nfr = (uint32_t)n;
        diff = 1;
    }
    w->hsum = sum;
    *same = !diff;
    return n;
}

/* Frames of another walk into t->walk (as walk_fp keeps them). */
static void frames_set(ps_walk_t *w, const uint64_t *fr, int n, int *same)
{
    *same = 0;
    if (n <= 0) return;
    uint64_t sum = w->hsum;
    int diff = 0;
    if ((uint32_t)n == w->nfr) {
        for (int i = 0; i < n; i++) {
            uint64_t a = fr[i], b = w->fr[i];
            if (a != b) {
                sum += frame_hash(a, i) - frame_hash(b, i);
                w->fr[i] = a;
                diff = 1;
            }
        }
    } else {
        sum = 0;
        for (int i = 0; i < n; i++) {
            sum += frame_hash(fr[i], i);
            w->fr[i] = fr[i];
        }
        w->nfr = (uint32_t)n;
        diff = 1;
    }
    w->hsum = sum;
    *same = !diff;
}

#ifdef PS_DWARF_VERIFY
__attribute__((noinline)) static int walk_fp_ref(ps_thr_t *t, uint64_t *out, int max)
{
    uintptr_t sp = (uintptr_t)__builtin_frame_address(0);
    uintptr_t lo = t->stk_lo, hi = t->stk_hi;
    if (!hi || sp < lo || sp >= hi) return 0;
    uintptr_t fp = sp;
    int n = 0;
    for (int steps = 0; n < max && steps < max + 16; steps++) {
        if (fp < sp || fp > hi - 16 || (fp & 7)) break;
        uintptr_t next = ((const uintptr_t *)fp)[0];
        uintptr_t ret = ((const uintptr_t *)fp)[1];
        if (ret < 4096) break;
        if (!(ret >= ps_g.self_lo && ret < ps_g.self_hi)) out[n++] = ret;
        if (next <= fp) break;
        fp = next;
    }
    return n;
}
#endif

/* libunwind's unw_backtrace: the reference, and the fallback of walk_cfi. */
__attribute__((noinline)) static int walk_dwarf(uint64_t *out, int max)
{
    void *buf[PST_MAX_DEPTH + 16];
    ps_tls.busy += PS_BUSY_OWN;   /* libunwind may map memory of its own (core.c, nested_lost) */
    int got = unw_backtrace(buf, max + 8 > PST_MAX_DEPTH + 16 ? PST_MAX_DEPTH + 16 : max + 8);
    ps_tls.busy -= PS_BUSY_OWN;
    const uintptr_t slo = ps_g.self_lo, sspan = ps_g.self_hi - ps_g.self_lo;
    int n = 0;
    for (int i = 0; i < got && n < max; i++)
        if ((uintptr_t)buf[i] - slo >= sspan) out[n++] = (uintptr_t)buf[i];
    return n;
}

/* ---- dwarf fast path: our own CFI walker ---------------------------------------------
 *
 * unw_backtrace spends ~80 instructions a frame (context save, cursor init,
 * its hashed frame cache). Most code addresses of a program unwind with one
 * of two simple rules, which the .eh_frame CFI row of the address gives:
 *   CFA = rsp + off  or  CFA = rbp + off;  return address at CFA - 8;
 *   the caller's rbp unchanged or saved at CFA + off2;  caller's rsp = CFA.
 * walk_cfi interprets the CFI of an address once (eh_frame_hdr binary
 * search, CIE + FDE programs up to the address), keeps the rule in a global
 * direct-mapped cache (one 64-bit word per entry: written and read whole,
 * no lock) and steps frames with two loads each. Any address whose rule is
 * not of that shape (signal trampolines, DW_CFA_*_expression, other CFA
 * registers, no FDE, 'S' augmentation...) makes the whole walk fall back to
 * unw_backtrace, as does a frame of this library below the program's frames
 * or a read outside [sp, top of the thread's stack): the frames are those
 * unw_backtrace gives, never a guess. Return addresses are looked up at
 * address - 1 (the call may be the last instruction of a noreturn
 * function), the innermost frame (our own) at its address.
 * The cache is cleared when the module list loses an entry (dlclose). */

#define UR_OK     1ull    /* set in every cached rule */
#define UR_CFARBP 2ull    /* CFA = rbp + off (else rsp + off) */
#define UR_RBP    4ull    /* the caller's rbp is saved at CFA - 8 * k (else unchanged) */
#define UR_LAST   8ull    /* return address undefined: outermost frame */
#define UR_NONE   16ull   /* not expressible here: fall back to libunwind */
#define UR_CFA_SHIFT 5    /* 16 bits: CFA offset, 0..65535 */
#define UR_K_SHIFT   21   /* 9 bits: k of the rbp slot CFA - 8k */
#define UR_TAG_SHIFT 30   /* 34 bits: pc >> UR_BITS */
#define UR_BITS   13
#define UR_SLOTS  (1u << UR_BITS)
_Static_assert(UR_SLOTS == PS_UR_SLOTS, "preload.h sizes the rule cache");


static void ucache_clear(void)
{
    __atomic_add_fetch(&ps_g.stk.ucache_gen, 1, __ATOMIC_RELAXED);
    for (size_t i = 0; i < UR_SLOTS; i++) __atomic_store_n(&ps_g.stk.ucache[i], 0, __ATOMIC_RELAXED);
}

/* ---- CFI interpretation (slow path, once per code address) ---- */

static uint64_t uleb(const uint8_t **pp)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    unsigned sh = 0;
    uint8_t b;
    do { b = *p++; if (sh < 64) v |= (uint64_t)(b & 0x7f) << sh; sh += 7; } while (b & 0x80);
    *pp = p;
    return v;
}

static int64_t sleb(const uint8_t **pp)
{
    const uint8_t *p = *pp;
    uint64_t v = 0;
    unsigned sh = 0;
    uint8_t b;
    do { b = *p++; if (sh < 64) v |= (uint64_t)(b & 0x7f) << sh; sh += 7; } while (b & 0x80);
    if (sh < 64 && (b & 0x40)) v |= ~0ull << sh;
    *pp = p;
    return (int64_t)v;
}

/* A DW_EH_PE-encoded pointer. Indirect values are not followed (only the
 * personality routine uses them, and it is skipped). -1: unsupported. */
static int rd_enc(const uint8_t **pp, unsigned enc, uintptr_t datarel, uint64_t *out)
{
    const uint8_t *p = *pp;
    uintptr_t at = (uintptr_t)p;
    uint64_t v;
    if (enc == 0xff) { *out = 0; return 0; }   /* DW_EH_PE_omit */
    switch (enc & 0x0f) {
    case 0x00: case 0x04: { uint64_t x; memcpy(&x, p, 8); v = x; p += 8; break; }
    case 0x0c:            { int64_t x; memcpy(&x, p, 8); v = (uint64_t)x; p += 8; break; }
    case 0x01: v = uleb(&p); break;
    case 0x09: v = (uint64_t)sleb(&p); break;
    case 0x02: { uint16_t x; memcpy(&x, p, 2); v = x; p += 2; break; }
    case 0x0a: { int16_t x; memcpy(&x, p, 2); v = (uint64_t)(int64_t)x; p += 2; break; }
    case 0x03: { uint32_t x; memcpy(&x, p, 4); v = x; p += 4; break; }
    case 0x0b: { int32_t x; memcpy(&x, p, 4); v = (uint64_t)(int64_t)x; p += 4; break; }
    default: return -1;
    }
    switch (enc & 0x70) {
    case 0x00: break;
    case 0x10: v += at; break;        /* pcrel */
    case 0x30: v += datarel; break;   /* datarel (eh_frame_hdr) */
    default: return -1;
    }
    *pp = p;
    *out = v;
    return 0;
}

typedef struct obj_find { uintptr_t pc; const uint8_t *hdr; } obj_find_t;

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    obj_find_t *f = arg;
    const uint8_t *hdr = NULL;
    int in = 0;
    (void)size;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        uintptr_t a = info->dlpi_addr + ph->p_vaddr;
        if (ph->p_type == PT_LOAD && f->pc >= a && f->pc < a + ph->p_memsz) in = 1;
        else if (ph->p_type == PT_GNU_EH_FRAME) hdr = (const uint8_t *)a;
    }
    if (!in) return 0;
    f->hdr = hdr;
    return 1;
}

enum { RK_SAME, RK_OFF, RK_UNDEF, RK_OTHER };
typedef struct cfi_row {
    int cfa_reg;          /* DWARF register, -1: an expression */
    int64_t cfa_off;
    int rbp_k, ra_k, rsp_k;
    int64_t rbp_off, ra_off;
} cfi_row_t;

static void set_reg(cfi_row_t *r, uint64_t reg, int kind, int64_t off)
{
    if (reg == 6) { r->rbp_k = kind; r->rbp_off = off; }
    else if (reg == 16) { r->ra_k = kind; r->ra_off = off; }
    else if (reg == 7) { r->rsp_k = kind; }
}

static void restore_reg(cfi_row_t *r, const cfi_row_t *init, uint64_t reg)
{
    if (reg == 6) { r->rbp_k = init->rbp_k; r->rbp_off = init->rbp_off; }
    else if (reg == 16) { r->ra_k = init->ra_k; r->ra_off = init->ra_off; }
    else if (reg == 7) { r->rsp_k = init->rsp_k; }
}

/* Runs a CFI program from *loc until the row covering pc is complete.
 * 0: done, -1: an instruction we do not handle. */
static int cfi_run(const uint8_t *p, const uint8_t *end, cfi_row_t *r, const cfi_row_t *init,
                   uint64_t *loc, uint64_t pc, uint64_t caf, int64_t daf, unsigned fenc)
{
    cfi_row_t stack[8];
    int sp = 0;
    while (p < end) {
        uint8_t op = *p++;
        uint64_t reg, d;
        switch (op >> 6) {
        case 1: *loc += (uint64_t)(op & 0x3f) * caf; if (*loc > pc) return 0; continue;
        case 2: set_reg(r, op & 0x3f, RK_OFF, (int64_t)uleb(&p) * daf); continue;
        case 3: restore_reg(r, init, op & 0x3f); continue;
        default: break;
        }
        switch (op) {
        case 0x00: break;                                               /* nop */
        case 0x01: if (rd_enc(&p, fenc, 0, loc)) return -1;            /* set_loc */
                   if (*loc > pc) return 0;
                   break;
        case 0x02: d = *p; p += 1; goto adv;                            /* advance_loc1 */
        case 0x03: { uint16_t x; memcpy(&x, p, 2); p += 2; d = x; goto adv; }
        case 0x04: { uint32_t x; memcpy(&x, p, 4); p += 4; d = x; goto adv; }
        adv:       *loc += d * caf; if (*loc > pc) return 0; break;
        case 0x05: reg = uleb(&p); set_reg(r, reg, RK_OFF, (int64_t)uleb(&p) * daf); break;
        case 0x06: restore_reg(r, init, uleb(&p)); break;
        case 0x07: set_reg(r, uleb(&p), RK_UNDEF, 0); break;
        case 0x08: set_reg(r, uleb(&p), RK_SAME, 0); break;
        case 0x09: reg = uleb(&p); (void)uleb(&p); set_reg(r, reg, RK_OTHER, 0); break;
        case 0x0a: if (sp >= 8) return -1; stack[sp++] = *r; break;    /* remember_state */
        case 0x0b: if (sp <= 0) return -1;                              /* restore_state */
                   *r = stack[--sp];   /* the CFA rule included (gcc's epilogues rely on it) */
                   break;
        case 0x0c: r->cfa_reg = (int)uleb(&p); r->cfa_off = (int64_t)uleb(&p); break;
        case 0x0d: r->cfa_reg = (int)uleb(&p); break;
        case 0x0e: r->cfa_off = (int64_t)uleb(&p); break;
        case 0x0f: d = uleb(&p); p += d; r->cfa_reg = -1; break;       /* def_cfa_expression */
        case 0x10: reg = uleb(&p); d = uleb(&p); p += d; set_reg(r, reg, RK_OTHER, 0); break;
        case 0x11: reg = uleb(&p); set_reg(r, reg, RK_OFF, sleb(&p) * daf); break;
        case 0x12: r->cfa_reg = (int)uleb(&p); r->cfa_off = sleb(&p) * daf; break;
        case 0x13: r->cfa_off = sleb(&p) * daf; break;
        case 0x14: reg = uleb(&p); (void)uleb(&p); set_reg(r, reg, RK_OTHER, 0); break;
        case 0x15: reg = uleb(&p); (void)sleb(&p); set_reg(r, reg, RK_OTHER, 0); break;
        case 0x16: reg = uleb(&p); d = uleb(&p); p += d; set_reg(r, reg, RK_OTHER, 0); break;
        case 0x2e: (void)uleb(&p); break;                               /* GNU_args_size */
        case 0x2f: reg = uleb(&p); set_reg(r, reg, RK_OFF, -(int64_t)uleb(&p) * daf); break;
        default: return -1;
        }
    }
    return 0;
}

/* The rule of code address pc (already "- 1" for return addresses). */
__attribute__((noinline, cold)) static uint64_t rule_compute(uintptr_t pc)
{
    const uint64_t NONE = UR_OK | UR_NONE;
    obj_find_t f = { pc, NULL };
    dl_iterate_phdr(find_cb, &f);
    const uint8_t *h = f.hdr;
    if (!h || h[0] != 1 || h[3] != 0x3b) return NONE;   /* table: datarel sdata4 */
    const uint8_t *p = h + 4;
    uint64_t ehf, count;
    if (rd_enc(&p, h[1], (uintptr_t)h, &ehf) || rd_enc(&p, h[2], (uintptr_t)h, &count) || !count)
        return NONE;
    /* binary search: the last entry whose start <= pc */
    size_t lo = 0, hi = count;
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        int32_t s;
        memcpy(&s, p + mid * 8, 4);
        if ((uintptr_t)h + (intptr_t)s <= pc) lo = mid; else hi = mid;
    }
    int32_t s0, fo;
    memcpy(&s0, p + lo * 8, 4);
    memcpy(&fo, p + lo * 8 + 4, 4);
    if ((uintptr_t)h + (intptr_t)s0 > pc) return NONE;
    const uint8_t *fde = h + fo;
    uint32_t flen, clen;
    memcpy(&flen, fde, 4);
    if (flen == 0 || flen == 0xffffffffu) return NONE;
    const uint8_t *fend = fde + 4 + flen, *q = fde + 4;
    int32_t cptr;
    memcpy(&cptr, q, 4);
    const uint8_t *cie = q - cptr;
    q += 4;
    /* CIE */
    memcpy(&clen, cie, 4);
    if (clen == 0 || clen == 0xffffffffu) return NONE;
    const uint8_t *cend = cie + 4 + clen, *c = cie + 4;
    uint32_t cid;
    memcpy(&cid, c, 4);
    c += 4;
    if (cid != 0) return NONE;
    unsigned ver = *c++;
    if (ver != 1 && ver != 3) return NONE;
    const char *aug = (const char *)c;
    c += strlen(aug) + 1;
    uint64_t caf = uleb(&c);
    int64_t daf = sleb(&c);
    uint64_t ra_reg = ver == 1 ? *c++ : uleb(&c);
    unsigned fenc = 0;
    int has_z = aug[0] == 'z';
    if (has_z) {
        uint64_t alen = uleb(&c);
        const uint8_t *aend = c + alen;
        for (const char *a = aug + 1; *a; a++) {
            uint64_t dummy;
            if (*a == 'R') fenc = *c++;
            else if (*a == 'L') c++;
            else if (*a == 'P') { unsigned e = *c++; if (rd_enc(&c, e & 0x7f, 0, &dummy)) return NONE; }
            else return NONE;   /* 'S' (signal frame) or unknown */
        }
        c = aend;
    } else if (aug[0]) {
        return NONE;
    }
    if (ra_reg != 16) return NONE;
    /* FDE */
    uint64_t pc_begin, pc_range;
    if (rd_enc(&q, fenc, 0, &pc_begin) || rd_enc(&q, fenc & 0x0f, 0, &pc_range)) return NONE;
    if (pc < pc_begin || pc - pc_begin >= pc_range) return NONE;
    if (has_z) { uint64_t alen = uleb(&q); q += alen; }
    cfi_row_t init = { .cfa_reg = -2 }, row;
    uint64_t loc = 0;
    if (cfi_run(c, cend, &init, &init, &loc, UINT64_MAX, caf, daf, fenc)) return NONE;
    row = init;
    loc = pc_begin;
    if (cfi_run(q, fend, &row, &init, &loc, pc, caf, daf, fenc)) return NONE;
    /* the row at pc */
    uint64_t r = UR_OK;
    if (row.cfa_reg == 6) r |= UR_CFARBP;
    else if (row.cfa_reg != 7) return NONE;
    if (row.cfa_off < 0 || row.cfa_off > 0xffff) return NONE;
    r |= (uint64_t)row.cfa_off << UR_CFA_SHIFT;
    if (row.rsp_k != RK_SAME) return NONE;
    if (row.ra_k == RK_UNDEF) r |= UR_LAST;
    else if (row.ra_k != RK_OFF || row.ra_off != -8) return NONE;
    if (row.rbp_k == RK_OFF) {
        if (row.rbp_off >= 0 || (row.rbp_off & 7) || -row.rbp_off / 8 > 511) return NONE;
        r |= UR_RBP | (uint64_t)(-row.rbp_off / 8) << UR_K_SHIFT;
    } else if (row.rbp_k != RK_SAME) {
        return NONE;
    }
    return r;
}

static inline uint64_t rule_get(uintptr_t pc)
{
    uint64_t *e = &ps_g.stk.ucache[pc & (UR_SLOTS - 1)];
    uint64_t tag = (uint64_t)pc >> UR_BITS;
    uint64_t v = __atomic_load_n(e, __ATOMIC_RELAXED);
    if (PS_LIKELY(v >> UR_TAG_SHIFT == tag && v)) return v;
    uint64_t r = rule_compute(pc);
    if (tag < (1ull << (64 - UR_TAG_SHIFT)))
        __atomic_store_n(e, r | tag << UR_TAG_SHIFT, __ATOMIC_RELAXED);
    return r;
}

/* -1: use unw_backtrace. Reads only inside [sp at entry, top of the
 * thread's stack): every return address slot lies in [sp, cfa), so
 * sp + 8 <= cfa <= top, and the saved rbp slot below cfa and above the
 * walk's start.
 * Each step's state (ip, sp, bp) and what it gave (rule, cfa, rbp slot) is
 * kept in t->walk; a step whose state equals the recorded state of the same
 * step number takes the recorded results (functions of that state) instead
 * of looking the rule up: exact, and its loads do not wait for the previous
 * step's. Recorded steps are dropped when the rule cache is cleared. */
__attribute__((noinline)) static int walk_cfi(ps_thr_t *t, uint64_t *out, int max)
{
    uintptr_t ip, sp, bp;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                     : "=r"(ip), "=r"(sp), "=r"(bp));
    const uintptr_t hi = t->stk_hi;
    if (!hi || sp < t->stk_lo || sp >= hi || max <= 0) return -1;
    const uintptr_t base = sp;
    const uintptr_t slo = ps_g.self_lo, sspan = ps_g.self_hi - ps_g.self_lo;
    ps_walk_t *w = &t->walk;
    uint32_t gen = __atomic_load_n(&ps_g.stk.ucache_gen, __ATOMIC_RELAXED);
    if (PS_UNLIKELY(w->gen != gen)) { w->gen = gen; w->n = 0; }
    unsigned cn = w->n, j = 0;
    uint64_t *o = out, *const oend = out + max;
    int ret = -1;
    for (int steps = max + 16; steps > 0; steps--, j++) {
        if (ip - slo >= sspan) {
            *o++ = ip;
            if (o == oend) { ret = max; break; }
        } else if (o != out) {
            break;        /* our frame below the program's: rare, exact path */
        }
        ps_wstep_t *e = &w->st[j];
        uint64_t r;
        uintptr_t cfa, slot;
        if (j < cn && e->ip == ip && e->sp == sp && e->bp == bp) {
            r = e->r; cfa = e->cfa; slot = e->slot;
        } else {
            r = rule_get(ip - (j != 0));
            cfa = ((r & UR_CFARBP) ? bp : sp) + ((r >> UR_CFA_SHIFT) & 0xffff);
            slot = (r & UR_RBP) ? cfa - 8 * ((r >> UR_K_SHIFT) & 511) : 0;
            e->ip = ip; e->sp = sp; e->bp = bp; e->r = r; e->cfa = cfa; e->slot = slot;
            if (j >= cn) cn = j + 1;
        }
        if (PS_UNLIKELY(r & (UR_NONE | UR_LAST))) { if (!(r & UR_NONE)) ret = (int)(o - out); break; }
        if (cfa - 8 - sp > hi - 8 - sp) break;   /* cfa < sp + 8 or cfa > hi */
        if (slot) {
            if (slot < base) break;              /* k >= 1: slot <= hi - 8 */
            bp = *(const uintptr_t *)slot;
        }
        ip = ((const uintptr_t *)cfa)[-1];
        if (ip == 0) { ret = (int)(o - out); break; }
        sp = cfa;
    }
    w->n = cn;
    return ret;
}

uint32_t ps_stack_id(ps_thr_t *t)
{
    /* Hash of a stack: the sum of one bijective mix per (position, frame),
     * kept per thread with the frames, so a stack that differs from the
     * thread's previous one in a few frames is re-hashed in those only,
     * and the previous stack again reuses its id. */
    ps_walk_t *w = &t->walk;
    int n, same;
    if (PS_UNLIKELY(ps_py_watch)) ps_py_watch_check();
    if (ps_g.stacks == PST_STACKS_FP) {
        n = walk_fp(t, ps_g.depth, &same);
#ifdef PS_DWARF_VERIFY
        {   /* the plain chase, from the same frame (walk_fp is noinline at our depth) */
            uint64_t ref[PST_MAX_DEPTH];
            int m = walk_fp_ref(t, ref, ps_g.depth);
            uint64_t s2 = 0;
            for (int i = 0; i < m; i++) s2 += frame_hash(ref[i], i);
            if (n != m || memcmp(w->fr, ref, (size_t)n * 8) || (n && s2 != w->hsum)) {
                (void)!write(2, "FP mismatch\n", 12); abort();
            }
        }
#endif
        if (ps_py_on() && n > 0) {   /* spliced in a copy: the walk's frames stay its reference */
            uint64_t fr[PST_MAX_DEPTH];
            memcpy(fr, w->fr, (size_t)n * sizeof *fr);
            int m = ps_py_splice(fr, n, ps_g.depth);
            if (m != n || memcmp(fr, w->fr, (size_t)n * sizeof *fr)) { n = m; frames_set(w, fr, n, &same); }
        }
    } else {
        uint64_t fr[PST_MAX_DEPTH];
        n = walk_cfi(t, fr, ps_g.depth);
#ifdef PS_DWARF_VERIFY
        {
            uint64_t ref[PST_MAX_DEPTH];
            int m = walk_dwarf(ref, ps_g.depth);
            if (n >= 0 && (n != m || memcmp(fr, ref, (size_t)n * 8))) {
                char msg[4096];
                int k = snprintf(msg, sizeof msg, "PS_DWARF_VERIFY mismatch n=%d m=%d\n", n, m);
                for (int i = 0; i < (n > m ? n : m) && k < 3900; i++)
                    k += snprintf(msg + k, sizeof msg - k, "  %d %lx %lx\n", i,
                                  i < n ? (unsigned long)fr[i] : 0ul, i < m ? (unsigned long)ref[i] : 0ul);
                (void)!write(2, msg, (size_t)k);
                abort();
            }
            if (n < 0) (void)!write(2, "PS_DWARF_VERIFY fallback\n", 25);
        }
#endif
        if (n < 0) n = walk_dwarf(fr, ps_g.depth);
        if (ps_py_on() && n > 0) n = ps_py_splice(fr, n, ps_g.depth);
        frames_set(w, fr, n, &same);
    }
    if (n <= 0) return 0;
    if (same && w->id) return w->id;
    w->id = 0;
    uint64_t h = mix(w->hsum ^ (uint64_t)n * 0x9e3779b97f4a7c15ull);
    ps_scache_ent_t *c = &t->scache[h & (PS_SCACHE - 1)];
    if (c->hash == h) return w->id = c->id;
    uint32_t id = tab_find(&ps_g.stk.stab, h);
    if (!id) {
        /* A new stack: module maps first if the loader changed. */
        unsigned long long cnt[2] = { 0, 0 };
        ps_loader_counters(cnt);
        if (cnt[0] != ps_g.stk.seen_adds || cnt[1] != ps_g.stk.seen_subs) ps_modules_scan(0);
        pthread_mutex_lock(&ps_g.stk.stab.lock);
        id = tab_find(&ps_g.stk.stab, h);
        if (!id) {
            id = ++ps_g.stk.stab.next_id;
            uint8_t rec[1 + PST_VARINT_MAX * (2 + PST_MAX_DEPTH)];
            uint8_t *e = pst_put_meta_stack(rec, id, w->fr, (uint32_t)n);
            ps_meta_lock();
            ps_meta_append(rec, (size_t)(e - rec));
            ps_meta_unlock();
            tab_put(&ps_g.stk.stab, h, id);
        }
        pthread_mutex_unlock(&ps_g.stk.stab.lock);
    }
    c->hash = h;
    c->id = id;
    w->id = id;
    return id;
}
