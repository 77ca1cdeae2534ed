/* flusher.c — the tracer's own thread (all signals blocked): stores the
 * tick every 100 us, drains half-full rings compressed at each tick,
 * samples RSS every 10 ms into its own stream, writes every ring and a
 * SYNC every 50 ms (and when poolscope_api.flush asks), retires dead
 * threads' records, rescans modules, and stops the recording when record
 * asks (the counters file's stop_req). */
#include "preload.h"
#include <fcntl.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include <linux/membarrier.h>

static void sample_rss(ps_thr_t *t)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    ps_real_close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    unsigned long long size, res, shared;
    char *q = buf;
    size = strtoull(q, &q, 10);
    res = strtoull(q, &q, 10);
    shared = strtoull(q, &q, 10);
    (void)size;
    pst_event_t ev = { .type = PST_EV_RSS, .f = { res * (uint64_t)ps_g.page_size,
        (res > shared ? res - shared : 0) * (uint64_t)ps_g.page_size, shared * (uint64_t)ps_g.page_size } };
    ps_emit_generic(t, &ev);
}

static void retire_dead(void)
{
    pthread_mutex_lock(&ps_g.tlock);
    ps_thr_t **pp = &ps_g.threads;
    while (*pp) {
        ps_thr_t *t = *pp;
        if (__atomic_load_n(&t->dead, __ATOMIC_ACQUIRE) && t->tail == t->head) {
            *pp = t->next;
            if (t->age_max > ps_g.age_dead) ps_g.age_dead = t->age_max;
            t->c.stream = 0;           /* a free slot: everything it published is in the file */
            t->next = ps_g.thr_free;
            ps_g.thr_free = t;
        } else {
            pp = &t->next;
        }
    }
    pthread_mutex_unlock(&ps_g.tlock);
}

/* record --duration / --until-signal asked this image to stop (ctl.h):
 * the counters file's stop_req, read at each tick. */
static int stop_asked(void)
{
    return ps_g.cnt != &ps_g.cnt_local && __atomic_load_n(&ps_g.cnt->stop_req, __ATOMIC_ACQUIRE) != 0;
}

/* Stop = pause for good, then the exit's final flush (ps_final), from the
 * tracer's thread while the program runs on. Paused first, so calls of
 * other threads from now on are neither recorded nor counted as lost (they
 * are after the window, not missing from it); then closing stops the
 * frees a pause still records (ps_enter_paused), and ps_final writes every
 * ring, a last SYNC and END (PST_END_STOPPED) and removes the counters
 * file. Every hook passes its call through from then on (closed). */
static void stop_recording(void)
{
    ps_g.stopped = 1;
    ps_g.paused = 1;
    ps_recompute_on();
    ps_g.closing = 1;
    /* an attach window: the program's own slots back before END
     * (attach.c). After closing, so that the frees made while the slots
     * are walked (a python3 process makes 75 in that time) are not
     * recorded without the allocations that replace them */
    if (ps_g.attach) ps_att_restore();
    ps_final();
    /* END is written and closed set: every hook now passes its call
     * through. Without closing and paused they do so on ps_enter's first
     * test (preload.h), as in an image that is not traced; with them every
     * call took the slow entry (tests/progs/churn 20000000 stopped after
     * 0.1 s: 0.84 s, where it runs in 0.18 s plain; now 60000000 take
     * 2.0 s, 1.8 s preloaded untraced, 1.1 s plain: what is left is the
     * hooks' pass-through and glibc's multi-threaded malloc, the tracer's
     * thread having made the process multi-threaded). The toggle signal
     * and ps_trace_enable cannot resume (stopped). */
    ps_g.closing = 0;
    ps_g.paused = 0;
}

/* Advance the time base. Every event reads ps_g.tick with one plain load,
 * so this store is the whole cost of "a time per event" (docs/DESIGN.md,
 * "Time and order"). */
static void store_tick(uint64_t *last)
{
    ps_tick_advance(last);   /* the clock's time: what the watermark may promise */
    ps_calibrate();
}

/* The oldest tick any event was stamped with, in ns: the trace's time
 * resolution, measured by the events themselves (ps_tick_stale), so a
 * thread that moved the tick itself or a flusher that slept long is
 * counted as the events saw it. */
static uint64_t age_max_ns(void)
{
    uint64_t m = ps_g.age_dead;
    for (ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE); t; t = t->next) {
        uint64_t a = __atomic_load_n(&t->age_max, __ATOMIC_RELAXED);
        if (a > m) m = a;
    }
    return ps_cyc_to_ns(m);
}

/* A SYNC chunk (format 1.2 fields: the tick's worst age, the tracer's
 * mapped bytes, the tracer's own stream). wlock held. Also written by the
 * final flush, so a program that ends before the first flush round still
 * says which stream is the tracer's and what the tracer cost. */
void ps_write_sync_locked(uint64_t mark)
{
    uint32_t fl = 0;
    for (ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
        if (t->is_flusher) fl = t->c.stream;
    uint8_t sync[4 * PST_VARINT_MAX];
    uint8_t *q = pst_put_sync(sync, mark);
    q = pst_put_varint(q, age_max_ns());
    q = pst_put_varint(q, __atomic_load_n(&ps_g.tracer_bytes, __ATOMIC_RELAXED));
    q = pst_put_varint(q, fl);
    struct iovec iov[2] = { { 0, 0 }, { sync, (size_t)(q - sync) } };
    ps_write_chunk_locked(PST_CHUNK_SYNC, 0, iov, 2);
}

/* One flush round: every ring out, then a SYNC chunk whose watermark W
 * promises that no later chunk holds an event stamped before W.
 *
 * W is the tick just stored. A thread that read an older tick and has not
 * published its event yet is caught by its `inflight` flag: the tick store
 * and each thread's flag store are ordered by a process-wide barrier
 * (membarrier, or failing that a pause far longer than a store buffer takes
 * to drain), so a thread whose flag we read as 0 either published already
 * or reads W or later. For a thread caught in flight the watermark stays at
 * its stream's previous stamp, which its pending event cannot undercut. */
static void flush_round(uint64_t *last_tick)
{
    ps_modules_poll();
    store_tick(last_tick);
    uint64_t mark = *last_tick;   /* what we stored; the tick may be later already */
    if (!ps_g.membarrier_ok ||
        ps_sys_membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
        struct timespec d = { 0, 50 * 1000 };
        nanosleep(&d, NULL);
    }
    ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE);
    for (; t; t = t->next) {
        if (t->inflight) {
            uint64_t prev = t->enc.last_ts;
            if (prev < mark) mark = prev;
        }
        if (__atomic_load_n(&t->head, __ATOMIC_ACQUIRE) != t->tail) ps_flush_thr(t, 1);
    }
    int zh = ps_z_take(1);
    pthread_mutex_lock(&ps_g.wlock);
    ps_meta_flush_locked(zh);   /* definitions no event has needed yet (module maps), compressed */
    ps_write_sync_locked(mark);
    pthread_mutex_unlock(&ps_g.wlock);
    ps_z_give(zh);
    retire_dead();
}

/* Every tick: the rings that are half full are written now, compressed,
 * so a busy thread never reaches the 7/8 at which it would write its ring
 * itself (uncompressed). No SYNC: that needs every ring (flush_round). */
static void drain_half_full(void)
{
    if (ps_g.stopping) return;   /* the final flush or an exec has the file */
    for (ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
        if (__atomic_load_n(&t->head, __ATOMIC_ACQUIRE) - t->tail >= PS_SOFT_FILL) ps_flush_thr(t, 1);
}

/* Flushes asked for through poolscope_api.flush (atomics): rounds asked
 * for, and the latest request a finished round covers. */
static uint64_t flush_req, flush_done;

/* poolscope_api.flush: ask the flusher for a whole round at its next tick
 * (every ring, pending META, a SYNC) and wait for it, so that the file
 * holds every event published before the call (what a reader of the
 * unfinished trace sees: report reads it as cut short). 0 done; -1 no
 * trace file, the trace is closing, or no answer within 5 s. The caller
 * only sleeps: it holds no lock of ours and allocates nothing. */
int ps_flush_sync(void)
{
    if (!ps_g.active || !ps_g.flusher_on || ps_g.closed || ps_g.stopping) return -1;
    uint64_t want = __atomic_add_fetch(&flush_req, 1, __ATOMIC_ACQ_REL);
    uint64_t deadline = ps_mono_ns() + 5000000000ull;
    while (__atomic_load_n(&flush_done, __ATOMIC_ACQUIRE) < want) {
        if (ps_g.closed || ps_g.stopping || ps_mono_ns() > deadline) return -1;
        struct timespec d = { 0, 20 * 1000 };
        nanosleep(&d, NULL);
    }
    return 0;
}

/* The flusher: stores the tick every PS_TICK_NS, drains half-full rings
 * every tick, samples RSS every 10 ms, flushes every ring every 50 ms, and
 * at once when ps_flush_sync asks. */
void *ps_flusher_main(void *arg)
{
    (void)arg;
    ps_tls.busy = PS_BUSY_OWN;   /* everything this thread does is the tracer's own */
    ps_thr_t *self = ps_thr_register();
    if (self) self->is_flusher = 1;
    uint64_t last_tick = 0, next_rss = 0, next_flush = 0;
    unsigned session = ps_g.session;
    for (;;) {
        struct timespec d = { 0, PS_TICK_NS };
        /* closed for good (stopped, or an exec under way): no tick to keep,
         * so no reason to wake 10,000 times a second while the program runs on */
        if (ps_g.closed && ps_g.stopped) d.tv_nsec = 100 * 1000 * 1000;
        clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL);
        if (ps_g.closed || !ps_g.active) continue;
        if (PS_UNLIKELY(session != ps_g.session)) {   /* a new attach window: its clock starts at 0 */
            session = ps_g.session;
            last_tick = next_rss = next_flush = 0;
        }
        if (PS_UNLIKELY(stop_asked())) { stop_recording(); continue; }
        store_tick(&last_tick);
        drain_half_full();
        uint64_t asked = __atomic_load_n(&flush_req, __ATOMIC_ACQUIRE);
        int now = asked != __atomic_load_n(&flush_done, __ATOMIC_RELAXED);
        if (last_tick < next_rss && !now) continue;
        next_rss = last_tick + 10 * 1000 * 1000;
        pthread_mutex_lock(&ps_g.tlock);   /* not while a final flush runs */
        if (ps_g.closed || ps_g.stopping) { pthread_mutex_unlock(&ps_g.tlock); continue; }
        ps_emit_toggle(self);              /* the toggle signal arrived */
        if (self && ps_g.on) sample_rss(self);
        pthread_mutex_unlock(&ps_g.tlock);
        ps_fn_poll();                      /* not under tlock: it takes the loader's locks */
        ps_att_poll();
        if (last_tick < next_flush && !now) continue;
        next_flush = last_tick + 50 * 1000 * 1000;
        flush_round(&last_tick);
        if (now) __atomic_store_n(&flush_done, asked, __ATOMIC_RELEASE);
    }
    return NULL;
}

void ps_start_flusher(void)
{
    if (ps_g.flusher_on || !ps_g.active) return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ps_tls.busy += PS_BUSY_OWN;
    if (pthread_create(&ps_g.flusher, NULL, ps_flusher_main, NULL) == 0) ps_g.flusher_on = 1;
    ps_tls.busy -= PS_BUSY_OWN;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}
