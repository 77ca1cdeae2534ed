/* end.c — the end of an image: exit (ps_final, from the destructor or a
 * stop), a fatal signal (ps_final_from_signal), exec (ps_exec_begin, and
 * ps_exec_failed when the exec returns). Every ring flushed, a last SYNC,
 * END with the lost counts; recording stopped first and other threads given
 * a moment to publish, so END counts exactly what the streams hold. */
#include "preload.h"
#include "enc_inline.h"

#include <time.h>

/* At the end of an image, after the last flush: what the rings still hold
 * was not written (disk full, a file size limit, a thread that published
 * after the flush) and is counted as lost, so END says so; END itself gets
 * one more try past the retry pause. At exit (drop) the bytes go; before an
 * exec they stay, since a failed exec goes on with the same streams: the
 * count is returned so ps_exec_failed can take it back. tlock held. */
static uint64_t end_of_image_locked(int drop)
{
    uint64_t n = 0;
    for (ps_thr_t *t = ps_g.threads; t; t = t->next) {
        uint64_t head = __atomic_load_n(&t->head, __ATOMIC_ACQUIRE);
        uint64_t nev = __atomic_load_n(&t->c.nev, __ATOMIC_RELAXED);
        if (t->tail != head && nev > t->nev_done) {
            n += nev - t->nev_done;
            if (drop) {
                t->nev_done = nev;
                __atomic_store_n(&t->tail, head, __ATOMIC_RELEASE);
            }
        }
    }
    ps_add_lost(n);
    ps_g.retry_after = 0;
    return n;
}

void ps_flush_all(int z)
{
    ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE);
    for (; t; t = t->next) ps_flush_thr(t, z);
    int zh = ps_z_take(z);
    if (ps_lock_c(&ps_g.wlock) == 0) {
        ps_meta_flush_locked(zh);
        pthread_mutex_unlock(&ps_g.wlock);
    }
    ps_z_give(zh);
}

/* Stop recording and give hooks already running in other threads a moment
 * to publish their event, so END counts exactly what the streams hold. */
static void ps_quiesce(void)
{
    ps_g.closing = 1;   /* from now on other threads' calls are counted */
    ps_g.stopping = 1;
    ps_recompute_on();
    int others = 0;
    /* Under tlock: the flusher unmaps dead threads' records (retire_dead). */
    if (ps_lock_c(&ps_g.tlock) != 0) return;
    for (ps_thr_t *t = ps_g.threads; t; t = t->next)
        if (t != ps_tls.thr && !t->dead && !t->is_flusher) others = 1;
    pthread_mutex_unlock(&ps_g.tlock);
    if (others) {
        struct timespec d = { 0, 1000 * 1000 };
        nanosleep(&d, NULL);
    }
}

/* A toggle signal's marker, stamped with the signal's time (never before
 * the stream's previous time), into t's stream. The next event of t reads
 * the clock again. Caller holds tlock or is the last thread. */
void ps_emit_toggle(ps_thr_t *t)
{
    if (!t || (uintptr_t)t <= 1 || !ps_g.toggle_req) return;
    ps_g.toggle_req = 0;
    uint8_t *p = ps_rec_begin(t);
    if (!p) return;
    uint64_t ts = ps_g.toggle_ts > t->enc.last_ts ? ps_g.toggle_ts : t->enc.last_ts;
    p = pst_put_ts(&t->enc, p, ts);
    pst_event_t ev = { .type = ps_g.paused ? PST_EV_TRACE_OFF : PST_EV_TRACE_ON };
    t->enc.last_addr = ps_enc_last(&t->enc);   /* as ps_emit_generic (no A field here, though) */
    p = pst_encode_event(&t->enc, p, &ev);
    ps_rec_end(t, p);
}

void ps_final(void)
{
    if (ps_g.child_pending) ps_ensure_child();
    if (!ps_g.active || ps_g.closed) return;
    ps_tls.busy += PS_BUSY_OWN;
    PS_SIGFENCE();
    ps_quiesce();
    int have_tlock = ps_lock_c(&ps_g.tlock) == 0;   /* fails only from a signal */
    ps_emit_toggle(ps_tls.thr);   /* a toggle the flusher had no tick for */
    ps_g.retry_after = 0;              /* the last flush tries even a refused file */
    ps_flush_all(1);                   /* compressed, but from a fatal signal (ps_z_take) */
    end_of_image_locked(1);
    ps_add_lost(__atomic_exchange_n(&ps_g.cnt->closing_lost, 0, __ATOMIC_RELAXED));
    if (ps_lock_c(&ps_g.wlock) == 0) {
        if (!ps_g.closed) {
            ps_write_sync_locked(ps_now());   /* everything is out: nothing earlier can follow */
            ps_write_end_locked();
            ps_g.closed = 1;
            ps_recompute_on();
        }
        pthread_mutex_unlock(&ps_g.wlock);
    }
    ps_ctl_done();   /* the process is ending on its own: nothing for a SIGKILL recovery to do */
    if (have_tlock) pthread_mutex_unlock(&ps_g.tlock);
    PS_SIGFENCE();
    ps_tls.busy -= PS_BUSY_OWN;
}

/* A fatal signal's handler (hooks_signal.c): ps_final with every lock
 * tried for at most 200 ms in all. Runs at most once. */
void ps_final_from_signal(void)
{
    if (__atomic_exchange_n(&ps_g.fatal, 1, __ATOMIC_ACQ_REL)) return;
    ps_g.fatal_deadline = ps_mono_ns() + 200 * 1000 * 1000;
    ps_final();
}


/* Before an exec: record EXEC, flush every ring, write END, and keep the
 * thread list and the file locked so nothing is written after END. */
void ps_exec_begin(const char *path)
{
    if (ps_g.child_pending) ps_ensure_child();
    ps_tls.exec_locked = 0;
    if (!ps_g.active || ps_g.closed) return;
    ps_thr_t *t = ps_enter();
    if (t) {
        pst_event_t ev = { .type = PST_EV_EXEC };
        ev.f[0] = ps_string_id(path);
        ps_emit_generic(t, &ev);
        ps_leave();
    }
    ps_tls.busy += PS_BUSY_OWN;
    ps_quiesce();
    pthread_mutex_lock(&ps_g.tlock);
    ps_g.retry_after = 0;
    ps_flush_all(1);
    ps_g.exec_unflushed = end_of_image_locked(0);
    ps_g.exec_counted = __atomic_load_n(&ps_g.cnt->closing_lost, __ATOMIC_RELAXED);
    ps_add_lost(ps_g.exec_counted);
    pthread_mutex_lock(&ps_g.wlock);
    ps_g.exec_end_off = ps_g.file_off;
    if (ps_write_end_locked() == 0) ps_ctl_done();   /* a failed exec cannot SIGKILL-account any more */
    ps_g.closed = 1;
    ps_recompute_on();
    ps_tls.exec_locked = 1;
}

void ps_exec_failed(void)
{
    if (!ps_tls.exec_locked) return;
    ps_tls.exec_locked = 0;
    ps_truncate_locked(ps_g.exec_end_off);
    ps_g.cnt->end_written = 0;
    /* the END that counted them as lost is gone; they will be written */
    __atomic_sub_fetch(&ps_g.cnt->lost_total, ps_g.exec_unflushed + ps_g.exec_counted, __ATOMIC_RELAXED);
    ps_g.closed = 0;
    ps_g.stopping = 0;
    ps_g.closing = 0;
    ps_recompute_on();
    pthread_mutex_unlock(&ps_g.wlock);
    pthread_mutex_unlock(&ps_g.tlock);
    /* What other threads did while the file was closed is gone: say so. */
    uint64_t n = __atomic_exchange_n(&ps_g.cnt->closing_lost, 0, __ATOMIC_RELAXED);
    ps_thr_t *t = ps_tls.thr;
    if (n) {
        ps_add_lost(n);
        if (t && (uintptr_t)t > 1) {
            pst_event_t ev = { .type = PST_EV_LOST, .f = { n, PST_LOST_EXEC } };
            ps_emit_generic(t, &ev);
            __atomic_add_fetch(&ps_g.cnt->lost_reported, n, __ATOMIC_RELAXED);
        }
    }
    ps_tls.busy -= PS_BUSY_OWN;
}
