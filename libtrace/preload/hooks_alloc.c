/* hooks_alloc.c — the malloc and mmap families: the hot path.
 *
 * Per call: one TLS block (ps_tls), a check of the global `on` flag, the
 * real call, the hand-coded encoder into the thread's ring and a release
 * store of the ring head. No lock, no atomic RMW, no clock read: a read of
 * the cycle counter tells whether the tick is stale (preload.h). malloc and
 * free have a fast path on top (see malloc below): one call, no spills.
 *
 * mprotect and a file mapping's name (format 1.4) ride on the mmap family:
 * see mprotect and emit_mmap_name below.
 *
 * Frees (free, munmap) are recorded BEFORE the real call, so the address
 * cannot be handed to another thread before the free is in our stream;
 * allocations after the real call returns. realloc's implicit free cannot
 * be recorded first (one event carries both addresses): its old block's
 * version is taken before the call instead (format.h, pst_vslot).
 *
 * Real functions: resolved on the first call (or in the constructor) with
 * dlsym(RTLD_NEXT), so an allocator preloaded before us (jemalloc, mimalloc)
 * is the one we call; glibc's __libc_* entry points are the fallback. While
 * dlsym runs, its own allocations come from a static bootstrap arena whose
 * frees are recognised by address and ignored.
 */
#include "preload.h"
#include "enc_inline.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <malloc.h>   /* the prototypes of what we define */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

ps_real_t ps_real;
volatile int ps_real_ready;

/* ---- bootstrap arena ------------------------------------------------------ */

/* ps_g.boot: the arena (.bss, already zero, never reused) and its fill. */

static inline int in_boot(const void *p)
{
    return (uintptr_t)p - (uintptr_t)ps_g.boot.arena < sizeof ps_g.boot.arena;   /* one compare */
}

static void *boot_alloc(size_t n, size_t align)
{
    if (align < 16) align = 16;
    size_t off = (ps_g.boot.used + 16 + align - 1) & ~(align - 1);   /* 16: room for the size */
    if (off + n > sizeof ps_g.boot.arena || n > sizeof ps_g.boot.arena) return NULL;
    ((size_t *)(ps_g.boot.arena + off))[-1] = n;
    ps_g.boot.used = off + n;
    ps_g.fast1 = 0;   /* free's fast path (fast1) does not look for the arena's blocks */
    return ps_g.boot.arena + off;   /* .bss: already zero, never reused */
}

static size_t boot_size(const void *p) { return ((const size_t *)p)[-1]; }

/* ---- fallbacks when the next object lacks a function ---------------------- */

static int fb_posix_memalign(void **out, size_t align, size_t n)
{
    if (align % sizeof(void *) || (align & (align - 1))) return EINVAL;
    void *p = ps_real.memalign(align, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}
static void *fb_aligned_alloc(size_t align, size_t n) { return ps_real.memalign(align, n); }
static void *fb_reallocarray(void *p, size_t a, size_t b)
{
    size_t n;
    if (__builtin_mul_overflow(a, b, &n)) { errno = ENOMEM; return NULL; }
    return ps_real.realloc(p, n);
}
static size_t fb_usable(void *p) { (void)p; return 0; }

#define NEXT(name, fb) do { void *f_ = dlsym(RTLD_NEXT, #name); \
    r.name = f_ ? (__typeof__(r.name))f_ : (fb); } while (0)


void ps_resolve_real(void)
{
    if (ps_real_ready || ps_g.resolving) return;
    ps_g.resolving = 1;
    ps_tls.busy += PS_BUSY_OWN;
    ps_real_t r;
    NEXT(malloc, __libc_malloc);
    NEXT(free, __libc_free);
    NEXT(calloc, __libc_calloc);
    NEXT(realloc, __libc_realloc);
    NEXT(memalign, __libc_memalign);
    NEXT(valloc, __libc_valloc);
    NEXT(pvalloc, __libc_pvalloc);
    NEXT(posix_memalign, fb_posix_memalign);
    NEXT(aligned_alloc, fb_aligned_alloc);
    NEXT(reallocarray, fb_reallocarray);
    NEXT(malloc_usable_size, fb_usable);
    /* glibc's own malloc and free (not another allocator preloaded before
     * us): the fast paths may call them without the guard (see malloc) */
    r.glibc = r.malloc == __libc_malloc && r.free == __libc_free;
    ps_real = r;
    __atomic_store_n(&ps_real_ready, 1, __ATOMIC_RELEASE);
    ps_proc_resolve();
    ps_tls.busy -= PS_BUSY_OWN;
    ps_g.resolving = 0;
}

#define ENSURE_REAL() do { if (PS_UNLIKELY(!ps_real_ready)) ps_resolve_real(); } while (0)

/* A real call made with the guard held: calls it makes to interposed
 * functions are its own (glibc's reallocarray calls realloc, another
 * allocator its mmap), passed through and not counted as a signal
 * handler's (threads.c, nested_lost). */
#define PS_OWN(call) __extension__({ ps_tls.busy += PS_BUSY_OWN; __typeof__(call) r_ = (call); \
                                     ps_tls.busy -= PS_BUSY_OWN; r_; })
#define PS_OWN_VOID(call) do { ps_tls.busy += PS_BUSY_OWN; call; ps_tls.busy -= PS_BUSY_OWN; } while (0)

static inline uint32_t stack_of(ps_thr_t *t)
{
    return PS_UNLIKELY(ps_g.stacks != PST_STACKS_NONE) ? ps_stack_id(t) : 0;
}

/* ---- malloc family ------------------------------------------------------------ */

/* malloc and free: a fast path for the common case, the general hooks
 * (malloc_cold, free_cold) for everything else.
 *
 * The fast path runs while ps_g.fast: recording, and the next allocator is
 * glibc's (ps_real.glibc), whose malloc and free never call an interposable
 * function (their mmap, munmap, sbrk and madvise are libc-internal calls),
 * so the guard need not be held across the real call: malloc calls it
 * first and takes the guard only to record; free records, lets the guard
 * go and tail-calls it. Another allocator gets the general hooks, which
 * hold the guard across the call (so its own mmap calls are not recorded).
 * Once the guard is taken, anything out of the ordinary (stacks, a full or
 * wrapping ring, a TS record due) goes to the *_rec functions:
 * the general recording, the guard held. So the fast path makes no call but
 * the real one and keeps nothing but n across it. No ps_tls.late test: a
 * registered thread's record is never the exit stream. */

/* A record of the fast path: CYC, VER, type, address, size (PS_FAST_MAX bytes
 * at most); ps_make_room keeps it clear of the ring's end. */
_Static_assert(1 + PST_VARINT_MAX + 3 + 1 + 1 + 2 * PST_VARINT_MAX <= PS_FAST_MAX, "a fast record fits before the ring's end");

/* Two fast paths. malloc and free themselves while ps_g.fast1 (no stacks,
 * one program thread, no bootstrap block: one flag): the ring's budget
 * (t->fast_left, preload.h: one counter for the soft mark, the clock check
 * and since_ts) and the tick, then type, address and size straight into
 * the ring, no version to take. malloc_mt and free_mt otherwise (more than
 * one thread: ps_ver; or stacks, for free): the checks of ps_fast_begin,
 * as before the budget. The four are built without a frame pointer: every
 * exit but the plain return is a tail call, so the general functions'
 * frames (which fp stack walks follow) sit where they did, and malloc keeps
 * one register across its call (callgrind, churn 440000, --stacks none:
 * 185 -> 141 instructions per malloc+free pair with the budget and the
 * address coding's hit first). */
#define PS_FAST_FN __attribute__((optimize("omit-frame-pointer")))

/* The fast paths' encoders: ps_enc_Au / ps_enc_A without the since_ts
 * count (the budget counted it) and with the index at its place in t. */
static inline __attribute__((always_inline)) uint8_t *ps_enc_Au_fast(ps_thr_t *t, uint8_t *p, unsigned type,
                                                                    uint64_t a, uint64_t u)
{
    *p++ = (uint8_t)type;
    p = ps_put_addr_ix(&t->enc, t->enc_index, p, a);
    return ps_put_varint(p, u);
}

static inline __attribute__((always_inline)) uint8_t *ps_enc_A_fast(ps_thr_t *t, uint8_t *p, unsigned type, uint64_t a)
{
    *p++ = (uint8_t)type;
    return ps_put_addr_ix(&t->enc, t->enc_index, p, a);
}

static __attribute__((noinline, cold)) void *malloc_cold(size_t n)
{
    if (PS_UNLIKELY(!ps_real_ready)) {
        if (ps_g.resolving) return boot_alloc(n, 16);
        ps_resolve_real();
    }
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.malloc(n);
    void *r = PS_OWN(ps_real.malloc(n));
    uint32_t sid = stack_of(t);
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_Au(&t->enc, ps_ver(t, p, (uintptr_t)r), PST_EV_MALLOC, sid, (uintptr_t)r, n));
    ps_leave_inline();
    return r;
}

/* The recording of a malloc that returned r, the guard held by the caller;
 * then the thread's fast budget anew. */
static __attribute__((noinline)) void *malloc_rec(ps_thr_t *t, void *r, size_t n)
{
    uint32_t sid = stack_of(t);
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_Au(&t->enc, ps_ver(t, p, (uintptr_t)r), PST_EV_MALLOC, sid, (uintptr_t)r, n));
    if (ps_g.fast1 && t == ps_tls.thr) ps_fast_refill(t);   /* not the exit stream */
    ps_leave_inline();
    return r;
}

/* The recording of a malloc that returned r, the fast path's checks having
 * failed after the call: the general entry (it counts a call that came
 * while the trace closes, registers a new thread...). */
static __attribute__((noinline, cold)) void *malloc_rec_enter(void *r, size_t n)
{
    ps_thr_t *t = ps_enter();
    return t ? malloc_rec(t, r, n) : r;
}

/* malloc's other path, the guard taken by malloc (t registered): more
 * than one program thread (the fast path with the address's version), or
 * stacks (malloc_rec captures one: with malloc and this function frameless
 * and both exits tail calls, its frame is the one the caller's call made),
 * or recording stopped during the call (the general entry counts it). */
static __attribute__((noinline)) PS_FAST_FN void *malloc_mt(ps_thr_t *t, void *r, size_t n)
{
    if (PS_UNLIKELY(!ps_g.fast_ns)) {
        if (PS_LIKELY(ps_g.fast)) return malloc_rec(t, r, n);
        ps_leave_fast();
        return malloc_rec_enter(r, n);
    }
    uint64_t h = t->head;
    if (PS_UNLIKELY(!ps_fast_begin(t, h))) return malloc_rec(t, r, n);
    uint8_t *p = t->ring + (h & t->rmask);
    ps_fast_end(t, p, ps_enc_Au(&t->enc, ps_ver(t, ps_cyc_rec(t, p), (uintptr_t)r), PST_EV_MALLOC, 0, (uintptr_t)r, n), h);
    ps_leave_fast();
    return r;
}

EXPORT PS_FAST_FN void *malloc(size_t n)
{
    if (PS_UNLIKELY(!ps_g.fast)) return malloc_cold(n);
    void *r = ps_real.malloc(n);
    /* ps_g's address made after the call, where the compiler cannot see it
     * (else it keeps it across the call in a callee-saved register: two
     * more pushes and pops) */
    ps_global_t *g = &ps_g;
#if defined(__x86_64__)
    __asm__("lea ps_g(%%rip), %0" : "=r"(g));
#endif
    ps_thr_t *t = ps_tls.thr;
    if (PS_UNLIKELY(ps_tls.busy || (uintptr_t)t <= 1)) return malloc_rec_enter(r, n);
    ps_tls.busy = 1;
    PS_SIGFENCE();
    if (PS_UNLIKELY(!g->fast1)) return malloc_mt(t, r, n);
    if (PS_UNLIKELY(!ps_fast1_begin(g, t))) return malloc_rec(t, r, n);
    uint64_t h = t->head;
    uint8_t *p = t->ring + (h & t->rmask);
    ps_fast_end(t, p, ps_enc_Au_fast(t, p, PST_EV_MALLOC, (uintptr_t)r, n), h);
    ps_leave_fast();
    return r;
}

static __attribute__((noinline, cold)) void free_cold(void *ptr)
{
    if (!ptr || PS_UNLIKELY(in_boot(ptr))) return;
    ENSURE_REAL();
    ps_thr_t *t = ps_enter();
    if (!t && (!PS_UNLIKELY(ps_g.paused) || !(t = ps_enter_paused()))) { ps_real.free(ptr); return; }
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_A(&t->enc, ps_ver(t, p, (uintptr_t)ptr), PST_EV_FREE, 0, (uintptr_t)ptr));
    PS_OWN_VOID(ps_real.free(ptr));
    ps_leave_inline();
}

/* A free the fast path could not record itself, the guard held; then the
 * thread's fast budget anew (a registered thread's record: never the
 * exit stream). */
static __attribute__((noinline)) void free_rec(ps_thr_t *t, void *ptr)
{
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_A(&t->enc, ps_ver(t, p, (uintptr_t)ptr), PST_EV_FREE, 0, (uintptr_t)ptr));
    if (ps_g.fast1) ps_fast_refill(t);
    PS_OWN_VOID(ps_real.free(ptr));
    ps_leave_inline();
}

/* free's other path (t registered, the guard not taken): the fast path
 * with the address's version once the program has more than one thread,
 * or with stacks (frees carry none); the general hook for a block of the
 * bootstrap arena or when not recording. Inlined into free (it needs no
 * register free's own path does not; malloc's counterpart is a function:
 * inlined, it would cost malloc's fast path a push and a pop). */
static inline __attribute__((always_inline)) void free_mt(ps_thr_t *t, void *ptr)
{
    if (PS_UNLIKELY(!ps_g.fast || in_boot(ptr))) { free_cold(ptr); return; }
    ps_tls.busy = 1;
    PS_SIGFENCE();
    uint64_t h = t->head;
    if (PS_UNLIKELY(!ps_fast_begin(t, h))) { free_rec(t, ptr); return; }
    uint8_t *p = t->ring + (h & t->rmask);
    ps_fast_end(t, p, ps_enc_A(&t->enc, ps_ver(t, ps_cyc_rec(t, p), (uintptr_t)ptr), PST_EV_FREE, 0, (uintptr_t)ptr), h);
    ps_leave_fast();
    ps_real.free(ptr);
}

EXPORT PS_FAST_FN void free(void *ptr)
{
    if (PS_UNLIKELY(!ptr)) return;
    ps_thr_t *t = ps_tls.thr;
    if (PS_UNLIKELY(ps_tls.busy || (uintptr_t)t <= 1)) { free_cold(ptr); return; }
    /* fast1: no block is the bootstrap arena's (in_boot is free_mt's) */
    if (PS_UNLIKELY(!ps_g.fast1)) { free_mt(t, ptr); return; }
    ps_tls.busy = 1;
    PS_SIGFENCE();
    if (PS_UNLIKELY(!ps_fast1_begin(&ps_g, t))) { free_rec(t, ptr); return; }
    uint64_t h = t->head;
    uint8_t *p = t->ring + (h & t->rmask);
    ps_fast_end(t, p, ps_enc_A_fast(t, p, PST_EV_FREE, (uintptr_t)ptr), h);
    ps_leave_fast();
    ps_real.free(ptr);
}

EXPORT void *calloc(size_t a, size_t b)
{
    if (PS_UNLIKELY(!ps_real_ready)) {
        if (ps_g.resolving) {
            size_t n;
            return __builtin_mul_overflow(a, b, &n) ? NULL : boot_alloc(n, 16);
        }
        ps_resolve_real();
    }
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.calloc(a, b);
    void *r = PS_OWN(ps_real.calloc(a, b));
    uint32_t sid = stack_of(t);
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_Auu(&t->enc, ps_ver(t, p, (uintptr_t)r), PST_EV_CALLOC, sid, (uintptr_t)r, a, b));
    ps_leave_inline();
    return r;
}

EXPORT void *realloc(void *old, size_t n)
{
    if (PS_UNLIKELY(!ps_real_ready)) {
        if (ps_g.resolving) {
            void *r = boot_alloc(n, 16);
            if (r && old) memcpy(r, old, boot_size(old) < n ? boot_size(old) : n);
            return r;
        }
        ps_resolve_real();
    }
    int from_boot = old && in_boot(old);
    ps_thr_t *t = ps_enter();
    if (!t && old && !from_boot && PS_UNLIKELY(ps_g.paused) && (t = ps_enter_paused())) {
        /* paused: only the release of the old block is recorded (its
         * version taken before the call, which may hand it to another thread) */
        ps_call_begin(t);
        uint32_t xo = ps_g.multi ? ps_vtake(t, (uintptr_t)old) : 0;
        void *r = PS_OWN(ps_real.realloc(old, n));
        uint8_t *p = r || n == 0 ? ps_rec_begin(t) : NULL;
        if (p && xo >> 16) p = pst_put_ver(p, (uint16_t)xo);
        if (p) ps_rec_end(t, ps_enc_A(&t->enc, p, PST_EV_FREE, 0, (uintptr_t)old));
        else t->inflight = 0;
        ps_leave_inline();
        return r;
    }
    if (!t) {
        if (!from_boot) return ps_real.realloc(old, n);
        void *r = ps_real.malloc(n);
        if (r) memcpy(r, old, boot_size(old) < n ? boot_size(old) : n);
        return r;
    }
    void *r;
    /* Versions: the old block's before the call (another thread may be
     * handed it inside the call), the new one's after (nobody else touches
     * it between the allocation inside and our return). Both exact per
     * address; readers know the event spans the two (FORMAT.md). */
    ps_call_begin(t);
    int multi = ps_g.multi;
    uint32_t xo = multi && old && !from_boot ? ps_vtake(t, (uintptr_t)old) : 0;
    if (from_boot) {   /* the tracer's bootstrap memory: a plain allocation */
        r = PS_OWN(ps_real.malloc(n));
        if (r) memcpy(r, old, boot_size(old) < n ? boot_size(old) : n);
        old = NULL;
    } else {
        r = PS_OWN(ps_real.realloc(old, n));
    }
    uint32_t sid = stack_of(t);
    uint8_t *p = ps_rec_begin(t);
    if (p) {
        uint16_t ver[2];
        unsigned nv = multi ? ps_ver2(t, xo, (uintptr_t)old, (uintptr_t)r, ver) : 0;
        for (unsigned i = 0; i < nv; i++) p = pst_put_ver(p, ver[i]);
        ps_rec_end(t, ps_enc_AAu(&t->enc, p, PST_EV_REALLOC, sid, (uintptr_t)old, (uintptr_t)r, n));
    } else {
        t->inflight = 0;
    }
    ps_leave_inline();
    return r;
}

EXPORT void *reallocarray(void *old, size_t a, size_t b)
{
    ENSURE_REAL();
    if (old && in_boot(old)) {
        size_t n;
        if (__builtin_mul_overflow(a, b, &n)) { errno = ENOMEM; return NULL; }
        return realloc(old, n);
    }
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.reallocarray(old, a, b);
    ps_call_begin(t);
    int multi = ps_g.multi;
    uint32_t xo = multi && old ? ps_vtake(t, (uintptr_t)old) : 0;   /* before the call, as realloc */
    void *r = PS_OWN(ps_real.reallocarray(old, a, b));
    pst_event_t ev = { .type = PST_EV_REALLOCARRAY, .stack = stack_of(t),
                       .f = { (uintptr_t)old, (uintptr_t)r, a, b } };
    if (multi) ev.n_ver = ps_ver2(t, xo, (uintptr_t)old, (uintptr_t)r, ev.ver);
    ps_emit_generic(t, &ev);
    ps_leave_inline();
    return r;
}

static void *aligned_common(unsigned type, size_t align, size_t n, void *r, ps_thr_t *t)
{
    uint32_t sid = stack_of(t);
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_Auu(&t->enc, ps_ver(t, p, (uintptr_t)r), type, sid, (uintptr_t)r, align, n));
    ps_leave_inline();
    return r;
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    ENSURE_REAL();
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.posix_memalign(out, align, n);
    int rc = PS_OWN(ps_real.posix_memalign(out, align, n));
    aligned_common(PST_EV_POSIX_MEMALIGN, align, n, rc == 0 ? *out : NULL, t);
    return rc;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    ENSURE_REAL();
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.aligned_alloc(align, n);
    return aligned_common(PST_EV_ALIGNED_ALLOC, align, n, PS_OWN(ps_real.aligned_alloc(align, n)), t);
}

EXPORT void *memalign(size_t align, size_t n)
{
    if (PS_UNLIKELY(!ps_real_ready)) {
        if (ps_g.resolving) return boot_alloc(n, align);
        ps_resolve_real();
    }
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.memalign(align, n);
    return aligned_common(PST_EV_MEMALIGN, align, n, PS_OWN(ps_real.memalign(align, n)), t);
}

static void *page_common(unsigned type, size_t n, void *r, ps_thr_t *t)
{
    uint32_t sid = stack_of(t);
    uint8_t *p = ps_rec_begin(t);
    if (p) ps_rec_end(t, ps_enc_Au(&t->enc, ps_ver(t, p, (uintptr_t)r), type, sid, (uintptr_t)r, n));
    ps_leave_inline();
    return r;
}

EXPORT void *valloc(size_t n)
{
    ENSURE_REAL();
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.valloc(n);
    return page_common(PST_EV_VALLOC, n, PS_OWN(ps_real.valloc(n)), t);
}

EXPORT void *pvalloc(size_t n)
{
    ENSURE_REAL();
    ps_thr_t *t = ps_enter();
    if (!t) return ps_real.pvalloc(n);
    return page_common(PST_EV_PVALLOC, n, PS_OWN(ps_real.pvalloc(n)), t);
}

EXPORT size_t malloc_usable_size(void *p)
{
    if (p && in_boot(p)) return boot_size(p);
    ENSURE_REAL();
    return ps_real.malloc_usable_size(p);
}

/* ---- mmap family ----------------------------------------------------------------- */


void ps_alloc_resolve_mm(void)
{
    ps_real.mmap = (__typeof__(ps_real.mmap))dlsym(RTLD_NEXT, "mmap");
    ps_real.munmap = (__typeof__(ps_real.munmap))dlsym(RTLD_NEXT, "munmap");
    ps_real.mremap = (__typeof__(ps_real.mremap))dlsym(RTLD_NEXT, "mremap");
    ps_real.madvise = (__typeof__(ps_real.madvise))dlsym(RTLD_NEXT, "madvise");
    ps_real.mprotect = (__typeof__(ps_real.mprotect))dlsym(RTLD_NEXT, "mprotect");
    ps_real.brk = (__typeof__(ps_real.brk))dlsym(RTLD_NEXT, "brk");
    ps_real.sbrk = (__typeof__(ps_real.sbrk))dlsym(RTLD_NEXT, "sbrk");
}

static void *do_mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    if (ps_real.mmap) return ps_real.mmap(a, len, prot, flags, fd, off);
    return ps_sys_mmap_raw(a, len, prot, flags, fd, off);
}

/* MMAP_NAME (format 1.4) of a file mapping at r: the path of fd as
 * /proc/self/fd/<fd> names it, read with the raw syscall into a stack
 * buffer (no allocation; a string id is interned as THREAD_NAME's are).
 * Nothing when the link cannot be read or is longer than PATH_MAX - 1.
 * Out of line: the 4 KiB buffer is no cost to anonymous mappings. File
 * mappings are rare (a loader's own mappings do not come through here),
 * and this adds one readlinkat and a hash of the path to each. */
static __attribute__((noinline)) void emit_mmap_name(ps_thr_t *t, uintptr_t r, int fd)
{
    char link[32] = "/proc/self/fd/", path[PATH_MAX];
    char digits[12];
    int nd = 0;
    unsigned v = (unsigned)fd;
    do { digits[nd++] = (char)('0' + v % 10); v /= 10; } while (v);
    size_t o = 14;
    while (nd) link[o++] = digits[--nd];
    link[o] = 0;
    long n = ps_sys_readlinkat(AT_FDCWD, link, path, sizeof path);
    if (n <= 0 || n >= (long)sizeof path) return;
    path[n] = 0;
    pst_event_t ev = { .type = PST_EV_MMAP_NAME, .f = { r, ps_string_id(path) } };
    ps_emit_generic(t, &ev);
}

/* The mmap family takes the guard only to record, never across the system
 * call: a signal handler that allocates while the thread waits in mmap or
 * munmap is then recorded like any call (with the guard held there, such
 * calls went through unrecorded and uncounted). mremap keeps it across its
 * call, as realloc: the thread is in flight from the old block's version on
 * (preload.h, ps_call_begin), and a handler's record would end that. */
static void *mmap_hook(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    ENSURE_REAL();
    void *r = do_mmap(a, len, prot, flags, fd, off);
    ps_thr_t *t = ps_enter();
    if (!t) return r;
    pst_event_t ev = { .type = PST_EV_MMAP, .stack = stack_of(t),
                       .f = { r == MAP_FAILED ? 0 : (uintptr_t)r, len, (unsigned)prot,
                              (unsigned)flags, (uint64_t)(int64_t)fd, (uint64_t)off } };
    int e = errno;
    /* the name right after its MMAP, and only when that went in */
    if (ps_emit_generic(t, &ev) && PS_UNLIKELY(fd >= 0) && !(flags & MAP_ANONYMOUS) && r != MAP_FAILED)
        emit_mmap_name(t, (uintptr_t)r, fd);
    ps_leave_inline();
    errno = e;
    return r;
}

/* Both names reach the hook directly: a call of mmap by name from here is
 * bound like any other, and in an attached process, where this library is
 * last in the lookup order, it went to libc's (mmap64 calls went
 * unrecorded while their munmaps were). */
EXPORT void *mmap(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap_hook(a, len, prot, flags, fd, off);
}

EXPORT void *mmap64(void *a, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap_hook(a, len, prot, flags, fd, off);
}

EXPORT int munmap(void *a, size_t len)
{
    ENSURE_REAL();
    ps_thr_t *t = ps_enter();
    if (t || (PS_UNLIKELY(ps_g.paused) && (t = ps_enter_paused()))) {
        pst_event_t ev = { .type = PST_EV_MUNMAP, .f = { (uintptr_t)a, len } };
        ps_emit_generic(t, &ev);   /* before the call, as free */
        ps_leave_inline();
    }
    return ps_real.munmap ? ps_real.munmap(a, len) : ps_sys_munmap_raw(a, len);
}

EXPORT void *mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *na = NULL;
    if (flags & MREMAP_FIXED) {
        __builtin_va_list ap;
        __builtin_va_start(ap, flags);
        na = __builtin_va_arg(ap, void *);
        __builtin_va_end(ap);
    }
    ENSURE_REAL();
    ps_thr_t *t = ps_enter();
    if (t) ps_call_begin(t);
    int multi = t && ps_g.multi;
    uint32_t xo = multi && old ? ps_vtake(t, (uintptr_t)old) : 0;   /* before the call, as realloc */
    void *r = ps_real.mremap ? ps_real.mremap(old, old_len, new_len, flags, na)
                          : ps_sys_mremap(old, old_len, new_len, flags, na);
    if (!t) return r;
    int e = errno;
    pst_event_t ev = { .type = PST_EV_MREMAP, .stack = stack_of(t),
                       .f = { (uintptr_t)old, old_len, r == MAP_FAILED ? 0 : (uintptr_t)r,
                              new_len, (unsigned)flags } };
    if (multi) ev.n_ver = ps_ver2(t, xo, ev.f[0], ev.f[2], ev.ver);
    ps_emit_generic(t, &ev);
    ps_leave_inline();
    errno = e;
    return r;
}

static int drops_pages(int advice)
{
    switch (advice) {
    case MADV_DONTNEED: case MADV_FREE: case MADV_REMOVE:
#ifdef MADV_PAGEOUT
    case MADV_PAGEOUT:
#endif
    case 24: /* MADV_DONTNEED_LOCKED */
        return 1;
    default:
        return 0;
    }
}

EXPORT int madvise(void *a, size_t len, int advice)
{
    ENSURE_REAL();
    if (!drops_pages(advice))
        return ps_real.madvise ? ps_real.madvise(a, len, advice) : ps_sys_madvise(a, len, advice);
    int r = ps_real.madvise ? ps_real.madvise(a, len, advice) : ps_sys_madvise(a, len, advice);
    ps_thr_t *t = ps_enter();
    if (!t) return r;
    int e = errno;
    if (r == 0) {
        pst_event_t ev = { .type = PST_EV_MADVISE, .f = { (uintptr_t)a, len, (unsigned)advice } };
        ps_emit_generic(t, &ev);
    }
    ps_leave_inline();
    errno = e;
    return r;
}

/* mprotect (format 1.4): only calls that succeeded, stamped after the call
 * (a failed one changed nothing), while recording (not while paused, as
 * mmap). No stack (as munmap and madvise): JITs toggle protections often,
 * and the mapping's own MMAP carries the stack of who reserved it. */
EXPORT int mprotect(void *a, size_t len, int prot)
{
    ENSURE_REAL();
    int r = ps_real.mprotect ? ps_real.mprotect(a, len, prot) : ps_sys_mprotect(a, len, prot);
    ps_thr_t *t = ps_enter();
    if (!t) return r;
    int e = errno;
    if (r == 0) {
        pst_event_t ev = { .type = PST_EV_MPROTECT, .f = { (uintptr_t)a, len, (unsigned)prot } };
        ps_emit_generic(t, &ev);
    }
    ps_leave_inline();
    errno = e;
    return r;
}

EXPORT int brk(void *end)
{
    ENSURE_REAL();
    if (!ps_real.brk) { errno = ENOMEM; return -1; }
    int r = ps_real.brk(end);
    ps_thr_t *t = ps_enter();
    if (!t) return r;
    int e = errno;
    pst_event_t ev = { .type = PST_EV_BRK, .f = { (uintptr_t)end, (uint64_t)(int64_t)r } };
    ps_emit_generic(t, &ev);
    ps_leave_inline();
    errno = e;
    return r;
}

EXPORT void *sbrk(intptr_t inc)
{
    ENSURE_REAL();
    if (!ps_real.sbrk) { errno = ENOMEM; return (void *)-1; }
    void *r = ps_real.sbrk(inc);
    ps_thr_t *t = ps_enter();
    if (!t) return r;
    int e = errno;
    pst_event_t ev = { .type = PST_EV_SBRK, .f = { (uint64_t)(int64_t)inc,
                                                   r == (void *)-1 ? 0 : (uintptr_t)r } };
    ps_emit_generic(t, &ev);
    ps_leave_inline();
    errno = e;
    return r;
}
