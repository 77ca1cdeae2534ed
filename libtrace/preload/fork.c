/* fork.c — fork: the parent's locks taken around the fork (pthread_atfork),
 * the child's copy of every record and ring dropped, and the child's own
 * file opened lazily at its first event, exit or exec (ps_ensure_child). */
#include "preload.h"
#include <errno.h>
#include <string.h>

/* The mappings of every thread record (live, retired, the exit stream's),
 * tlock held, into ps_g.fork_maps: the child must not walk the records
 * themselves. They are slots of the counters file, MAP_SHARED with the
 * parent, whose threads go on registering and retiring records (rewriting
 * `next`) while the child runs its atfork handler: a child that followed
 * `next` there reached records mapped after the fork, in the parent only
 * (SIGSEGV in 1-4 of 128 children of a 16-thread fork storm). */
static void fork_maps_take(void)
{
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (ps_thr_t *t = pass ? ps_g.thr_free : ps_g.threads; t; t = t->next) n++;
    if (n > ps_g.fork_cap) {
        size_t cap = n * 2 + 16;
        struct ps_recmap *m = ps_sys_mmap(cap * sizeof *m);
        if (!m) { ps_g.fork_n = SIZE_MAX; return; }   /* the child leaves them mapped */
        if (ps_g.fork_maps) ps_sys_munmap(ps_g.fork_maps, ps_g.fork_cap * sizeof *m);
        ps_g.fork_maps = m;
        ps_g.fork_cap = cap;
    }
    n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (ps_thr_t *t = pass ? ps_g.thr_free : ps_g.threads; t; t = t->next)
            ps_g.fork_maps[n++] = (struct ps_recmap){ t, t->ring, t->map_len, t->rmask + 1 + PS_RING_SLACK };
    ps_g.fork_n = n;
}

void ps_prepare_fork(void)
{
    ps_tls.busy += PS_BUSY_OWN;
    ps_g.fork_n = 0;
    if (!ps_g.active) return;
    pthread_mutex_lock(&ps_g.child_lock);
    pthread_mutex_lock(&ps_g.tlock);
    fork_maps_take();
    pthread_mutex_lock(&ps_g.z.lock);   /* the child gets the compressor between two chunks */
    pthread_mutex_lock(&ps_g.wlock);
    ps_tables_lock_all();
    pthread_mutex_lock(&ps_g.mlock);
}

void ps_parent_after_fork(void)
{
    if (ps_g.active) {
        pthread_mutex_unlock(&ps_g.mlock);
        ps_tables_unlock_all();
        pthread_mutex_unlock(&ps_g.wlock);
        pthread_mutex_unlock(&ps_g.z.lock);
        pthread_mutex_unlock(&ps_g.tlock);
        pthread_mutex_unlock(&ps_g.child_lock);
    }
    ps_tls.busy -= PS_BUSY_OWN;
}

/* Child: everything of the parent's is dropped (its rings, its unflushed
 * bytes, its definitions: the child's file must define everything again);
 * the file is opened lazily by ps_ensure_child at the next event, exit, exec. */
void ps_child_after_fork(void)
{
    if (!ps_g.active && !ps_g.child_pending) { ps_tls.busy -= PS_BUSY_OWN; return; }
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    ps_g.mlock = init; ps_g.wlock = init; ps_g.tlock = init; ps_g.child_lock = init;
    ps_g.z.lock = init;   /* its context and buffers are the parent's copies, idle: kept */
    ps_g.late_lock = init;
    ps_g.late = NULL;   /* unmapped below with the other records */
    ps_tables_reset();   /* re-inits the table locks too */
    /* Every thread record goes, this thread's too: they are slots of the
     * parent's counters file, shared with it. This thread registers again
     * at its next event, in the child's own file. Their mappings come from
     * the private copy made before the fork (fork_maps_take). */
    if (ps_g.fork_n != SIZE_MAX)
        for (size_t i = 0; i < ps_g.fork_n; i++) {
            ps_sys_munmap(ps_g.fork_maps[i].ring, ps_g.fork_maps[i].ring_len);
            ps_sys_munmap(ps_g.fork_maps[i].rec, ps_g.fork_maps[i].rec_len);
        }
    ps_g.fork_n = 0;
    ps_g.threads = NULL;
    ps_g.thr_free = NULL;
    /* the child's trace starts its versions afresh, with one thread */
    ps_g.multi = 0;
    memset(ps_g.vtab, 0, sizeof ps_g.vtab);
    if (ps_tls.thr != PS_THR_DEAD) ps_tls.thr = NULL;
    if (ps_g.cnt != &ps_g.cnt_local) {
        ps_sys_munmap(ps_g.cnt, PST_CTL_HDR);
        ps_g.cnt = &ps_g.cnt_local;
    }
    if (ps_g.ctl_fd >= 0) ps_real_close(ps_g.ctl_fd);
    ps_g.ctl_fd = -1;
    ps_g.ctl_path[0] = 0;
    memset(&ps_g.cnt_local, 0, sizeof ps_g.cnt_local);
    ps_g.meta_len = 0;
    if (ps_g.fd >= 0) ps_real_close(ps_g.fd);
    ps_g.fd = -1;
    ps_g.parent_pid = ps_g.pid;
    ps_g.pid = getpid();
    ps_g.gen = 0;
    ps_g.flusher_on = 0;
    ps_g.next_stream = 0;
    ps_g.ev_written = 0;
    ps_g.cnt->lost_total = 0;
    ps_g.file_off = 0;
    ps_g.closed = 0;
    ps_g.stopping = 0;
    ps_g.closing = 0;        /* a fork after the parent's exit flush records anew */
    ps_g.cnt->closing_lost = 0;
    ps_g.cnt->lost_reported = 0;
    ps_g.active = 0;
    ps_g.retry_after = 0;
    ps_g.child_pending = !ps_g.stopped;   /* a fork after the stop is not traced */
    ps_recompute_on();
    ps_tls.busy -= PS_BUSY_OWN;
}

void ps_ensure_child(void)
{
    if (!ps_g.child_pending) return;
    ps_tls.busy += PS_BUSY_OWN;
    PS_SIGFENCE();
    pthread_mutex_lock(&ps_g.child_lock);
    if (ps_g.child_pending) {
        if (ps_common_open(0) == 0) {
            ps_g.child_pending = 0;
            ps_recompute_on();
            ps_start_flusher();
        } else {
            ps_note_untraced(errno);
            ps_g.child_pending = 0;   /* untraced from here on */
            ps_recompute_on();
        }
    }
    pthread_mutex_unlock(&ps_g.child_lock);
    PS_SIGFENCE();
    ps_tls.busy -= PS_BUSY_OWN;
}
