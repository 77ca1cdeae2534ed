/* clock.c — the trace's time base: the monotonic clock since the trace's
 * start, the shared tick (moved forward by the flusher every PS_TICK_NS,
 * or by a thread that finds it stale), and the cycle counter's rate that
 * tells an event how old the tick is (docs/DESIGN.md, "Time and order"). */
#include "preload.h"
#include <time.h>

uint64_t ps_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ps_now(void) { return ps_mono_ns() - ps_g.start_mono; }

/* Moves the tick forward to the clock's time, never back (the flusher and
 * busy threads both advance it), then notes the cycle count read before
 * the clock as the tick's (ps_tick_stale); returns the tick after the
 * move (*clock: the clock's time, when asked for). tick_cyc may be stored out of order by two advancing threads: an
 * older count only makes events read the clock sooner. */
uint64_t ps_tick_advance(uint64_t *clock)
{
    uint64_t c = ps_cycles(), v = ps_now();
    if (clock) *clock = v;
    uint64_t cur = __atomic_load_n(&ps_g.tick, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(&ps_g.tick, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    __atomic_store_n(&ps_g.tick_cyc, c, __ATOMIC_RELEASE);
    return cur < v ? v : cur;
}

/* An event found the tick older than PS_TICK_STALE_NS (the flusher is not
 * being scheduled): its thread moves the shared tick to the clock's time
 * rather than stamping its own, so times stay causal: whatever another
 * thread does after this event (a free of what it allocated) reads a tick
 * at least as late. */
uint64_t ps_stale_tick(void)
{
    return ps_tick_advance(NULL);
}

/* A thread about to start another (pthread_create): the tick moves to the
 * clock's time, so every event of the new thread is stamped after every
 * event its creator recorded before; events of threads that share no
 * address are ordered by time alone, and a stale tick would let the new
 * thread's first events tie with them. */
void ps_tick_now(void)
{
    ps_tick_advance(NULL);
}

/* Cycles to ns at the rate measured since start (cyc0, mono0): rounded up,
 * as a resolution must not be understated. */
uint64_t ps_cyc_to_ns(uint64_t cyc)
{
    uint64_t dc = ps_cycles() - ps_g.cyc0, dn = ps_mono_ns() - ps_g.mono0;
    if (!dc || !dn) return cyc;
    return (uint64_t)(((unsigned __int128)cyc * dn + dc - 1) / dc);
}

/* PS_TICK_STALE_NS in cycles at the measured rate. Before a rate is known
 * (the first millisecond) one cycle per ns: every counter here runs at
 * 1 GHz or faster, so that errs towards reading the clock sooner. */
void ps_calibrate(void)
{
    uint64_t dc = ps_cycles() - ps_g.cyc0, dn = ps_mono_ns() - ps_g.mono0;
    ps_g.stale_cyc = dn < 1000000 ? PS_TICK_STALE_NS
                                  : (uint64_t)((unsigned __int128)PS_TICK_STALE_NS * dc / dn);
}
