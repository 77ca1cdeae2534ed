/* stacks.c — call stacks, interned strings and module maps (META records).
 *
 * Capture
 *   fp     walk rbp chains from our own frame. A step reads [fp, fp+16) only
 *          when fp lies in [sp, hi) of the thread's own stack (and the stack
 *          pointer itself lies in [lo, hi)), fp is 8-aligned and strictly
 *          above the previous one: it cannot fault, whatever a frame
 *          without a frame pointer left in rbp.
 *   dwarf  our own walker over the .eh_frame CFI (cfi.c: a per-address
 *          rule cache, reads bounded to the thread's stack); any address it
 *          cannot express, a signal frame, another stack (sigaltstack) or
 *          a frame of ours below the program's sends the whole capture to
 *          libunwind's unw_backtrace (UNW_CACHE_PER_THREAD), whose frames
 *          ps_walk_cfi reproduces exactly (build with -DPS_DWARF_VERIFY to
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
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

/* ---- hash tables ----------------------------------------------------------- */

/* The tables (ps_table_t, preload.h) live in ps_g.stk: the stack table and
 * the string table, each behind its own lock. */

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
    if (c[1] != ps_g.stk.seen_subs) ps_ucache_clear();   /* a module went away: its code rules too */
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
    ps_g.stk.prev_id = 0;
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

/* libunwind's unw_backtrace: the reference, and the fallback of ps_walk_cfi. */
__attribute__((noinline)) static int walk_dwarf(uint64_t *out, int max)
{
    void *buf[PST_MAX_DEPTH + 16];
    ps_tls.busy += PS_BUSY_OWN;   /* libunwind may map memory of its own (threads.c, nested_lost) */
    int got = unw_backtrace(buf, max + 8 > PST_MAX_DEPTH + 16 ? PST_MAX_DEPTH + 16 : max + 8);
    ps_tls.busy -= PS_BUSY_OWN;
    const uintptr_t slo = ps_g.self_lo, sspan = ps_g.self_hi - ps_g.self_lo;
    int n = 0;
    for (int i = 0; i < got && n < max; i++)
        if ((uintptr_t)buf[i] - slo >= sspan) out[n++] = (uintptr_t)buf[i];
    return n;
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
        n = ps_walk_cfi(t, fr, ps_g.depth);
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
            /* as the new inner frames of the stack defined before it when
             * they share their outer ones (STACK_TAIL): a third of the
             * bytes of a Python program's stacks. Named only if its record
             * is in META: a reference is never to a record not written. */
            ps_stk_t *k = &ps_g.stk;
            uint8_t rec[1 + PST_VARINT_MAX * (4 + PST_MAX_DEPTH)];
            uint8_t *e = pst_put_meta_stack_near(rec, id, w->fr, (uint32_t)n, k->prev_id, k->prev_fr, k->prev_depth);
            ps_meta_lock();
            int lost = ps_meta_append(rec, (size_t)(e - rec));
            ps_meta_unlock();
            k->prev_id = lost ? 0 : id;
            k->prev_depth = (uint32_t)n;
            memcpy(k->prev_fr, w->fr, (size_t)n * sizeof *w->fr);
            tab_put(&ps_g.stk.stab, h, id);
        }
        pthread_mutex_unlock(&ps_g.stk.stab.lock);
    }
    c->hash = h;
    c->id = id;
    w->id = id;
    return id;
}
