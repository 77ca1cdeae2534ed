/* threads.c — the thread registry and the hooks' slow entry: a thread's
 * record (a slot of the counters file, its ring), its stream id and
 * THREAD_START, its stack bounds, its exit (THREAD_END, the ring left to
 * the flusher), the exit stream of calls made after THREAD_END, and the
 * entry paths a hook takes when the inline check fails (first call before
 * the constructor, a new thread, a nested call, a pause). */
#include "preload.h"
#include "enc_inline.h"

#include <errno.h>
#include <string.h>
#include <sys/resource.h>

static void thr_start_stream(ps_thr_t *t, uint32_t parent)
{
    t->c.stream = __atomic_add_fetch(&ps_g.next_stream, 1, __ATOMIC_RELAXED);
    t->vtag = (uint16_t)t->c.stream ? (uint16_t)t->c.stream : 0xffff;
    t->tid = ps_gettid();
    pst_event_t ev = { .type = PST_EV_THREAD_START, .f = { (uint64_t)t->tid, parent } };
    ps_emit_generic(t, &ev);
    if (ps_tls.nobuf) {
        ps_add_lost(0);
        ps_put_lost(t, ps_tls.nobuf, PST_LOST_NOBUF);
        ps_tls.nobuf = 0;
    }
}

/* Bounds for the fp walk. A walk reads only inside [sp, hi) and only when
 * the stack pointer lies in [lo, hi): then every byte read is on the
 * thread's own, mapped stack, whatever garbage a frame-pointer-less frame
 * left in rbp. On another stack (sigaltstack, coroutines) we record no
 * frames rather than guess. */
static void stack_bounds(ps_thr_t *t, pid_t tid)
{
    if (tid == ps_g.pid) {
        struct rlimit rl;
        uintptr_t max = 8u << 20;
        if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max)
            max = rl.rlim_cur;
        t->stk_hi = ps_g.main_stk_hi;
        t->stk_lo = t->stk_hi > max ? t->stk_hi - max : 0;
        return;
    }
    /* pthread_getattr_np may allocate (the cpuset): we are inside the
     * reentrancy guard, so those calls are the tracer's own and pass
     * through unrecorded, paired. Once per thread, in fp and dwarf modes. */
    pthread_attr_t a;
    void *addr; size_t size;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        if (pthread_attr_getstack(&a, &addr, &size) == 0) {
            t->stk_lo = (uintptr_t)addr;
            t->stk_hi = (uintptr_t)addr + size;
        }
        pthread_attr_destroy(&a);
    }
}

/* A thread record: a retired one, else a new slot of the counters file,
 * else anonymous memory; its ring is always anonymous. tlock held. */
static ps_thr_t *rec_alloc(void)
{
    ps_thr_t *t = ps_g.thr_free;
    if (t) {
        ps_g.thr_free = t->next;
        uint8_t *ring = t->ring;
        uint64_t rmask = t->rmask;   /* a ring that grew keeps its size */
        size_t len = t->map_len;
        int in_ctl = t->in_ctl;
        memset(t, 0, sizeof *t);
        t->ring = ring;
        t->rmask = rmask;
        t->map_len = len;
        t->in_ctl = in_ctl;
        pst_enc_init(&t->enc, PST_CODING_RECENT, t->enc_index);
        return t;
    }
    uint8_t *ring = ps_sys_mmap(PS_RING_SIZE + PS_RING_SLACK);
    if (!ring) return NULL;
    if (ps_g.cnt != &ps_g.cnt_local && ps_ctl_fd_ok() == 0) {
        uint64_t off = PST_CTL_HDR + (uint64_t)ps_g.cnt->n_slots * PS_REC_BYTES;
        if (ftruncate(ps_g.ctl_fd, (off_t)(off + PS_REC_BYTES)) == 0 && (t = ps_map_shared(ps_g.ctl_fd, PS_REC_BYTES, off))) {
            t->in_ctl = 1;
            __atomic_store_n(&ps_g.cnt->n_slots, ps_g.cnt->n_slots + 1, __ATOMIC_RELEASE);
        }
    }
    if (!t && !(t = ps_sys_mmap(PS_REC_BYTES))) { ps_sys_munmap(ring, PS_RING_SIZE + PS_RING_SLACK); return NULL; }
    t->ring = ring;
    t->rmask = PS_RING_SIZE - 1;
    t->map_len = PS_REC_BYTES;
    pst_enc_init(&t->enc, PST_CODING_RECENT, t->enc_index);   /* format 1.5: recent addresses */
    return t;
}

ps_thr_t *ps_thr_register(void)
{
    pthread_mutex_lock(&ps_g.tlock);
    ps_thr_t *t = rec_alloc();
    pthread_mutex_unlock(&ps_g.tlock);
    if (!t) return NULL;
    t->soft = PS_SELF_FILL(t->rmask + 1);
    pthread_mutex_init(&t->clock, NULL);
    pid_t tid = ps_gettid();
    if (ps_g.stacks != PST_STACKS_NONE) stack_bounds(t, tid);   /* fp and dwarf walks stay inside */
    /* Id, list entry and THREAD_START under tlock: a final flush (which
     * holds tlock) sees every counted stream with its first event. */
    pthread_mutex_lock(&ps_g.tlock);
    t->next = ps_g.threads;
    __atomic_store_n(&ps_g.threads, t, __ATOMIC_RELEASE);
    ps_tls.thr = t;
    thr_start_stream(t, ps_tls.parent_stream);
    pthread_mutex_unlock(&ps_g.tlock);
    if (ps_g.key_ok) pthread_setspecific(ps_g.key, t);
    return t;
}

/* Thread exit (pthread key destructor): THREAD_END, then the ring goes to
 * the flusher, which writes it (compressed) at its next round and then
 * retires the record. Later calls of this thread go to the exit stream. */
void ps_thread_exit(ps_thr_t *t)
{
    if (!t || t == PS_THR_DEAD || ps_tls.thr != t) return;
    ps_tls.busy += PS_BUSY_OWN;
    PS_SIGFENCE();
    if (!ps_g.closed) {
        pst_event_t ev = { .type = PST_EV_THREAD_END };
        ps_emit_generic(t, &ev);
    }
    ps_tls.thr = PS_THR_DEAD;
    __atomic_store_n(&t->dead, 1, __ATOMIC_RELEASE);
    PS_SIGFENCE();
    ps_tls.busy -= PS_BUSY_OWN;
}

void ps_key_dtor(void *v) { ps_thread_exit(v); }

/* The exit stream. glibc frees what a thread's dynamic TLS holds (its DTV,
 * the TLS blocks of modules loaded with dlopen), and runs the destructors
 * of pthread keys made after ours, only after our key's destructor has
 * written the thread's THREAD_END and handed its ring to the flusher. Those
 * calls go to one record shared by all exiting threads, under a lock (a
 * thread's end is no hot path), so they are not lost; their order with
 * other threads' events comes from versions like any stream's. The stream
 * is named PST_EXIT_STREAM_NAME. Called with the guard taken; returns the
 * record with late_lock held (ps_late_leave lets go), or NULL. */
static ps_thr_t *late_enter(void)
{
    if (ps_lock_c(&ps_g.late_lock) != 0) return NULL;
    ps_thr_t *t = ps_g.late;
    if (!t) {
        pthread_mutex_lock(&ps_g.tlock);
        t = rec_alloc();
        if (t) {
            t->soft = PS_SELF_FILL(t->rmask + 1);   /* no stack bounds: fp walks record nothing */
            pthread_mutex_init(&t->clock, NULL);
            t->next = ps_g.threads;
            __atomic_store_n(&ps_g.threads, t, __ATOMIC_RELEASE);
            thr_start_stream(t, 0);
        }
        pthread_mutex_unlock(&ps_g.tlock);
        if (!t) { pthread_mutex_unlock(&ps_g.late_lock); return NULL; }
        pst_event_t ev = { .type = PST_EV_THREAD_NAME, .f = { ps_string_id(PST_EXIT_STREAM_NAME) } };
        ps_emit_generic(t, &ev);
        ps_g.late = t;
    }
    ps_tls.late = 1;
    return t;
}

/* Called by a hook when the fast check failed. Returns the thread's record
 * with the guard taken, or NULL: pass the call through. */
static ps_thr_t *enter_slow(void);

/* errno is the program's: registering a thread, opening a fork child's file
 * or the first initialization must not change what the call left there. */
ps_thr_t *ps_enter_slow(void)
{
    int saved_errno = errno;
    ps_thr_t *t = enter_slow();
    errno = saved_errno;
    return t;
}

/* A hook that finds the guard taken by a hook of its own thread (busy
 * exactly 1: no PS_BUSY_OWN part, so not the tracer's own call) runs in a
 * signal handler that interrupted that hook: with glibc's allocator a hook
 * calls nothing interposable while it holds the guard (the mmap family
 * lets it go across the system call). The interrupted hook may be halfway
 * through a record in the thread's ring, so this call cannot be recorded:
 * it is counted, and END says so. (With another allocator a nested call is
 * usually that allocator's own mmap, not a program's call: not counted.) */
static void nested_lost(void)
{
    if (ps_tls.busy == 1 && ps_g.on && ps_real.glibc) ps_add_lost(1);
}

static ps_thr_t *enter_slow(void)
{
    if (ps_tls.busy) { nested_lost(); return NULL; }
    if (PS_UNLIKELY(!ps_g.inited)) {
        /* A hook ran before our constructor: another preloaded library's
         * constructor (libstdc++'s emergency pool is the usual one) or the
         * loader. Initialize now so that call is recorded like any other;
         * only a second thread racing the first initialization is counted
         * as lost. */
        ps_init();
        if (!ps_g.inited) {
            __atomic_add_fetch(&ps_g.boot_lost, 1, __ATOMIC_RELAXED);
            return NULL;
        }
        if (!ps_g.on) return NULL;
    }
    if (ps_g.child_pending) ps_ensure_child();
    if (ps_g.closing && !ps_g.paused) {   /* an exec or the exit flush is closing the file */
        __atomic_add_fetch(&ps_g.cnt->closing_lost, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    if (!ps_g.on) return NULL;
    ps_thr_t *t = ps_tls.thr;
    if (PS_LIKELY((uintptr_t)t > 1)) {
        ps_tls.busy = 1;
        PS_SIGFENCE();
        return t;
    }
    /* Registering calls functions that may allocate (pthread_getattr_np,
     * pthread_setspecific): the tracer's own calls, passed through. */
    ps_tls.busy = 1 + PS_BUSY_OWN;
    PS_SIGFENCE();
    if (t == PS_THR_DEAD) {   /* after the thread's THREAD_END */
        if (!(t = late_enter())) ps_add_lost(1);
    } else if (!(t = ps_thr_register())) {
        ps_tls.nobuf++;
        ps_add_lost(1);
    }
    PS_SIGFENCE();
    ps_tls.busy = t ? 1 : 0;
    return t;
}

/* While tracing is paused, frees (free, realloc's old block, munmap) are
 * still recorded, so memory allocated while recording and released while
 * paused is not reported as leaked; the matching allocations of memory
 * allocated while paused are absent, and their frees are the trace's only
 * "unknown frees" (FORMAT.md). Called by those hooks when ps_enter said no. */
ps_thr_t *ps_enter_paused(void)
{
    if (!ps_g.paused || !ps_g.active || ps_g.closed || ps_g.stopping || ps_g.child_pending ||
        ps_g.closing || ps_tls.busy)
        return NULL;
    ps_thr_t *t = ps_tls.thr;
    if (t == PS_THR_DEAD) return NULL;
    ps_tls.busy = 1;
    PS_SIGFENCE();
    if (!t) {
        int saved_errno = errno;
        ps_tls.busy = 1 + PS_BUSY_OWN;   /* as enter_slow */
        t = ps_thr_register();
        errno = saved_errno;
        PS_SIGFENCE();
        ps_tls.busy = t ? 1 : 0;
    }
    return t;
}

void ps_leave(void)
{
    ps_leave_inline();
}

void ps_late_leave(void)
{
    ps_tls.late = 0;
    PS_SIGFENCE();
    ps_tls.busy = 0;
    pthread_mutex_unlock(&ps_g.late_lock);
}
