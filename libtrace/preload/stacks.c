/* stacks.c — call stacks, interned strings and module maps (META records).
 *
 * Capture
 *   fp     walk rbp chains from our own frame. A step reads [fp, fp+16) only
 *          when fp lies in [sp, hi) of the thread's own stack (and the stack
 *          pointer itself lies in [lo, hi)), fp is 8-aligned and strictly
 *          above the previous one: it cannot fault, whatever a frame
 *          without a frame pointer left in rbp.
 *   dwarf  libunwind's unw_backtrace with UNW_CACHE_PER_THREAD.
 *   Frames inside this library are dropped. Frames are return addresses
 *   (symbolisers look up address - 1), innermost first.
 *
 * Dedup
 *   A 64-bit hash of the frames names a stack. Per thread: a direct-mapped
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
#include <sys/resource.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

/* ---- hash tables ----------------------------------------------------------- */

typedef struct slot { uint64_t hash; uint32_t id; uint32_t pad; } slot_t;

typedef struct table {
    pthread_mutex_t lock;
    slot_t *slots;
    size_t bits, used;
    uint32_t next_id;
} table_t;

static table_t stab = { .lock = PTHREAD_MUTEX_INITIALIZER, .bits = 20 };
static table_t strtab = { .lock = PTHREAD_MUTEX_INITIALIZER, .bits = 16 };
static pthread_mutex_t modlock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t mix(uint64_t h)
{
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h ? h : 1;
}

static uint32_t tab_find(table_t *tb, uint64_t h)
{
    slot_t *s = __atomic_load_n(&tb->slots, __ATOMIC_ACQUIRE);
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
static void tab_put(table_t *tb, uint64_t h, uint32_t id)
{
    if (!tb->slots) {
        slot_t *s = ps_sys_mmap(sizeof(slot_t) << tb->bits);
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
    pthread_mutex_lock(&modlock);
    pthread_mutex_lock(&stab.lock);
    pthread_mutex_lock(&strtab.lock);
}

void ps_tables_unlock_all(void)
{
    pthread_mutex_unlock(&strtab.lock);
    pthread_mutex_unlock(&stab.lock);
    pthread_mutex_unlock(&modlock);
}

static void tab_reset(table_t *tb)
{
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    tb->lock = init;
    ps_sys_munmap(tb->slots, sizeof(slot_t) << tb->bits);
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
    uint32_t id = tab_find(&strtab, h);
    if (id) return id;
    pthread_mutex_lock(&strtab.lock);
    id = tab_find(&strtab, h);
    if (!id) {
        id = ++strtab.next_id;
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
        tab_put(&strtab, h, id);
    }
    pthread_mutex_unlock(&strtab.lock);
    return id;
}

/* ---- modules ---------------------------------------------------------------------- */

#define MAX_MODS 4096
typedef struct mod { uint64_t base, size; uint64_t key; } mod_t;
static mod_t *mods, *cur;            /* mapped on first scan */
static size_t n_mods, n_cur;
static unsigned long long seen_adds = ~0ull, seen_subs = ~0ull;
static char exe_path[4096];

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
    if (hi == 0 || n_cur >= MAX_MODS) return 0;
    const char *path = info->dlpi_name && info->dlpi_name[0] ? info->dlpi_name : exe_path;
    mod_t m = { lo, hi - lo, path_key(path, lo) };
    cur[n_cur++] = m;
    int known = 0;
    if (!emit_all)
        for (size_t i = 0; i < n_mods && !known; i++) known = mods[i].key == m.key;
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

/* modlock held */
static void scan_locked(int emit_all)
{
    if (!mods) {
        mods = ps_sys_mmap(2 * MAX_MODS * sizeof(mod_t));
        if (!mods) return;
        cur = mods + MAX_MODS;
    }
    if (!exe_path[0]) {
        ssize_t n = readlink("/proc/self/exe", exe_path, sizeof exe_path - 1);
        exe_path[n > 0 ? n : 0] = 0;
    }
    unsigned long long c[2] = { 0, 0 };
    dl_iterate_phdr(counters_cb, c);
    seen_adds = c[0];
    seen_subs = c[1];
    n_cur = 0;
    dl_iterate_phdr(scan_cb, &emit_all);
    /* Unmaps: known before, gone now. */
    for (size_t i = 0; i < n_mods && !emit_all; i++) {
        int still = 0;
        for (size_t k = 0; k < n_cur && !still; k++) still = cur[k].key == mods[i].key;
        if (!still) {
            uint8_t rec[1 + 6 * PST_VARINT_MAX];
            uint8_t *e = pst_put_meta_module(rec, 0, ps_now(), mods[i].base, mods[i].size, "", 0, NULL, 0);
            ps_meta_lock();
            ps_meta_append(rec, (size_t)(e - rec));
            ps_meta_unlock();
        }
    }
    mod_t *t = mods; mods = cur; cur = t;
    n_mods = n_cur;
}

void ps_modules_scan(int emit_all)
{
    pthread_mutex_lock(&modlock);
    scan_locked(emit_all);
    pthread_mutex_unlock(&modlock);
}

void ps_modules_poll(void)
{
    unsigned long long c[2] = { 0, 0 };
    dl_iterate_phdr(counters_cb, c);
    if (c[0] == seen_adds && c[1] == seen_subs) return;
    ps_modules_scan(0);
}

void ps_modules_reset(void)
{
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    modlock = init;
    n_mods = 0;
    seen_adds = seen_subs = ~0ull;
}

void ps_tables_reset(void)
{
    tab_reset(&stab);
    tab_reset(&strtab);
    ps_modules_reset();
}

/* ---- capture ------------------------------------------------------------------------- */

void ps_stacks_init(void)
{
    if (ps_g.stacks == PST_STACKS_DWARF)
        unw_set_caching_policy(unw_local_addr_space, UNW_CACHE_PER_THREAD);
}

static inline int in_self(uintptr_t ip) { return ip >= ps_g.self_lo && ip < ps_g.self_hi; }

__attribute__((noinline)) static int walk_fp(ps_thr_t *t, uint64_t *out, int max)
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
        if (!in_self(ret)) out[n++] = ret;
        if (next <= fp) break;
        fp = next;
    }
    return n;
}

__attribute__((noinline)) static int walk_dwarf(uint64_t *out, int max)
{
    void *buf[PST_MAX_DEPTH + 16];
    int got = unw_backtrace(buf, max + 8 > PST_MAX_DEPTH + 16 ? PST_MAX_DEPTH + 16 : max + 8);
    int n = 0;
    for (int i = 0; i < got && n < max; i++)
        if (!in_self((uintptr_t)buf[i])) out[n++] = (uintptr_t)buf[i];
    return n;
}

uint32_t ps_stack_id(ps_thr_t *t)
{
    uint64_t fr[PST_MAX_DEPTH];
    int n = ps_g.stacks == PST_STACKS_FP ? walk_fp(t, fr, ps_g.depth) : walk_dwarf(fr, ps_g.depth);
    if (n <= 0) return 0;
    uint64_t h = (uint64_t)n * 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < n; i++) h = (h ^ fr[i]) * 0x100000001b3ull + (h >> 29);
    h = mix(h);
    ps_scache_ent_t *c = &t->scache[h & (PS_SCACHE - 1)];
    if (c->hash == h) return c->id;
    uint32_t id = tab_find(&stab, h);
    if (!id) {
        /* A new stack: module maps first if the loader changed. */
        unsigned long long cnt[2] = { 0, 0 };
        dl_iterate_phdr(counters_cb, cnt);
        if (cnt[0] != seen_adds || cnt[1] != seen_subs) ps_modules_scan(0);
        pthread_mutex_lock(&stab.lock);
        id = tab_find(&stab, h);
        if (!id) {
            id = ++stab.next_id;
            uint8_t rec[1 + PST_VARINT_MAX * (2 + PST_MAX_DEPTH)];
            uint8_t *e = pst_put_meta_stack(rec, id, fr, (uint32_t)n);
            ps_meta_lock();
            ps_meta_append(rec, (size_t)(e - rec));
            ps_meta_unlock();
            tab_put(&stab, h, id);
        }
        pthread_mutex_unlock(&stab.lock);
    }
    c->hash = h;
    c->id = id;
    return id;
}
