/* truth_taskpool.c — a thread pool's memory shape, with the program's own
 * exact figures: one submitter thread allocates task structs (malloc) and a
 * payload for each (calloc, grown with realloc now and then), and queues
 * them; W worker threads run the tasks (check the payload), sometimes
 * shrink the payload with realloc (a realloc on another thread than the
 * one that allocated the block), and free payload and task.
 *
 *   truth_taskpool W TASKS LEAK_EVERY
 *
 * Task i (from 1) with i % LEAK_EVERY == 0 is kept by the worker that runs
 * it, task and payload, and never freed (LEAK_EVERY 0: no leaks). Payloads
 * are calloc(n, 8) with n in 2..512 (16..4096 bytes, from an xorshift
 * generator: the same on every run); every 3rd task the submitter grows
 * its payload with realloc by 8..2048 bytes, every 5th the worker shrinks
 * it to half with realloc before freeing (or keeping) it.
 *
 * The peak is made deterministic as in truth_handoff.c: live bytes in an
 * atomic (added after each allocation, the old size subtracted before a
 * realloc and before each free), the maximum with a CAS loop after each
 * allocation, and after every thread is joined and 50 ms have passed the
 * main thread mallocs a burst of more bytes than the threaded phase
 * allocated in all, frees it 50 ms later; the printed peak is the CAS
 * maximum, which the program checks is leaked_bytes + burst_bytes.
 * Run with GLIBC_TUNABLES=glibc.pthread.stack_cache_size=0 so that the
 * DTV glibc callocs for each new thread is freed at join (see
 * truth_handoff.c). Output through write(2).
 *
 * Prints: allocs (malloc + calloc + realloc calls), frees, leaked_objects,
 * leaked_bytes, peak_live_bytes, then mallocs, callocs, reallocs,
 * threads, streamed_bytes (bytes the threads allocated, realloc's new size
 * counted), burst_bytes, burst_allocs, errors (payload check failures),
 * cross_thread_frees (frees of a block the submitter allocated).
 * Exit 0; 1 on allocation failure or a failed self-check; 2 bad usage.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "truth_util.h"

#define QCAP 64
#define MAX_WORKERS 62
#define BURST_BLOCK ((size_t)4 << 20)

static void *(*volatile f_malloc)(size_t) = malloc;
static void *(*volatile f_calloc)(size_t, size_t) = calloc;
static void *(*volatile f_realloc)(void *, size_t) = realloc;
static void (*volatile f_free)(void *) = free;

typedef struct task {
    uint64_t id;
    size_t len;               /* payload bytes requested (after any realloc) */
    size_t filled;            /* bytes of the payload holding the pattern */
    unsigned char *payload;
    struct task *next;        /* queue, then kept list */
    int leak;
} task_t;

static atomic_uint_fast64_t live_bytes, peak_bytes, streamed;
static atomic_uint_fast64_t n_malloc, n_calloc, n_realloc, n_frees, n_leaked, leaked_bytes, n_errors, n_cross;




static void note_alloc(uint64_t n, atomic_uint_fast64_t *kind)
{
    uint64_t now = atomic_fetch_add(&live_bytes, n) + n;
    uint64_t pk = atomic_load(&peak_bytes);
    while (now > pk && !atomic_compare_exchange_weak(&peak_bytes, &pk, now)) { }
    atomic_fetch_add(kind, 1);
}

static void note_gone(uint64_t n) { atomic_fetch_sub(&live_bytes, n); }

static void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) != 0) { }
}

static unsigned char pattern(uint64_t id, size_t i) { return (unsigned char)(id * 131 + i * 7 + 1); }

/* ---- the queue ------------------------------------------------------------- */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t not_empty, not_full;
    task_t *ring[QCAP];
    unsigned head, count;
    int done;
} q = { PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, PTHREAD_COND_INITIALIZER,
        { 0 }, 0, 0, 0 };

static void q_push(task_t *t)
{
    pthread_mutex_lock(&q.mu);
    while (q.count == QCAP) pthread_cond_wait(&q.not_full, &q.mu);
    q.ring[(q.head + q.count) % QCAP] = t;
    q.count++;
    pthread_cond_signal(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
}

static task_t *q_pop(void)
{
    pthread_mutex_lock(&q.mu);
    while (q.count == 0 && !q.done) pthread_cond_wait(&q.not_empty, &q.mu);
    task_t *t = NULL;
    if (q.count) {
        t = q.ring[q.head];
        q.head = (q.head + 1) % QCAP;
        q.count--;
        pthread_cond_signal(&q.not_full);
    }
    pthread_mutex_unlock(&q.mu);
    return t;
}

/* ---- submitter and workers --------------------------------------------------- */

static long n_tasks, leak_every;

static void *submitter(void *arg)
{
    (void)arg;
    uint64_t s = 0x2545F4914F6CDD1Dull;
    for (long i = 1; i <= n_tasks; i++) {
        task_t *t = f_malloc(sizeof *t);
        if (!t) die("truth_taskpool: out of memory\n");
        note_alloc(sizeof *t, &n_malloc);
        atomic_fetch_add(&streamed, sizeof *t);
        size_t n = 2 + (size_t)(next_rand(&s) % 511);
        t->id = (uint64_t)i;
        t->len = n * 8;
        t->payload = f_calloc(n, 8);
        if (!t->payload) die("truth_taskpool: out of memory\n");
        note_alloc(t->len, &n_calloc);
        atomic_fetch_add(&streamed, t->len);
        for (size_t k = 0; k < t->len; k++)
            if (t->payload[k]) atomic_fetch_add(&n_errors, 1);
        size_t fill = t->len / 2;
        for (size_t k = 0; k < fill; k++) t->payload[k] = pattern(t->id, k);
        t->filled = fill;
        if (i % 3 == 0) {        /* grow */
            size_t grown = t->len + 8 + (size_t)(next_rand(&s) % 2041);
            note_gone(t->len);
            unsigned char *p = f_realloc(t->payload, grown);
            if (!p) die("truth_taskpool: out of memory\n");
            note_alloc(grown, &n_realloc);
            atomic_fetch_add(&streamed, grown);
            t->payload = p;
            t->len = grown;
        }
        t->leak = leak_every > 0 && i % leak_every == 0;
        t->next = NULL;
        q_push(t);
    }
    pthread_mutex_lock(&q.mu);
    q.done = 1;
    pthread_cond_broadcast(&q.not_empty);
    pthread_mutex_unlock(&q.mu);
    return NULL;
}

static void *worker(void *arg)
{
    (void)arg;
    task_t *kept = NULL, *t;
    while ((t = q_pop())) {
        for (size_t k = 0; k < t->filled; k++)
            if (t->payload[k] != pattern(t->id, k)) { atomic_fetch_add(&n_errors, 1); break; }
        if (t->id % 5 == 0) {    /* shrink, on this thread */
            size_t half = t->len / 2;
            note_gone(t->len);
            unsigned char *p = f_realloc(t->payload, half);
            if (!p) die("truth_taskpool: out of memory\n");
            note_alloc(half, &n_realloc);
            atomic_fetch_add(&streamed, half);
            t->payload = p;
            t->len = half;
            if (t->filled > half) t->filled = half;
        }
        if (t->leak) {
            t->next = kept;
            kept = t;
            atomic_fetch_add(&n_leaked, 2);
            atomic_fetch_add(&leaked_bytes, sizeof *t + t->len);
            continue;
        }
        /* the task struct, and a payload this worker did not realloc, came
         * from the submitter thread */
        atomic_fetch_add(&n_cross, t->id % 5 == 0 ? 1 : 2);
        note_gone(t->len);
        atomic_fetch_add(&n_frees, 1);
        f_free(t->payload);
        note_gone(sizeof *t);
        atomic_fetch_add(&n_frees, 1);
        f_free(t);
    }
    return NULL;             /* `kept` dropped on purpose */
}

static void usage(void) { die("usage: truth_taskpool W TASKS LEAK_EVERY\n"); }

static long arg_num(const char *s, long lo, long hi)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) usage();
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 4) usage();
    int w = (int)arg_num(argv[1], 1, MAX_WORKERS);
    n_tasks = arg_num(argv[2], 0, 1L << 40);
    leak_every = arg_num(argv[3], 0, 1L << 40);
    pthread_t th[MAX_WORKERS + 1];
    int nth = 0;
    for (int i = 0; i < w; i++)
        if (pthread_create(&th[nth++], NULL, worker, NULL)) die("truth_taskpool: pthread_create failed\n");
    if (pthread_create(&th[nth++], NULL, submitter, NULL)) die("truth_taskpool: pthread_create failed\n");
    for (int i = 0; i < nth; i++) pthread_join(th[i], NULL);

    sleep_ms(50);
    uint64_t stream_total = atomic_load(&streamed);
    uint64_t target = stream_total + ((uint64_t)1 << 20), burst = 0;
    void *blk[4096];
    size_t bsz[4096], nb = 0;
    while (burst < target && nb < sizeof blk / sizeof blk[0]) {
        size_t sz = target - burst < BURST_BLOCK ? (size_t)(target - burst) : BURST_BLOCK;
        if (sz < 16) sz = 16;
        blk[nb] = f_malloc(sz);
        if (!blk[nb]) die("truth_taskpool: out of memory (burst)\n");
        note_alloc(sz, &n_malloc);
        bsz[nb++] = sz;
        burst += sz;
    }
    if (burst < target) die("truth_taskpool: burst too large\n");
    uint64_t leaked = atomic_load(&leaked_bytes);
    if (atomic_load(&live_bytes) != leaked + burst || atomic_load(&peak_bytes) != leaked + burst)
        die("truth_taskpool: self-check failed: the peak is not leaked + burst\n");
    sleep_ms(50);
    for (size_t i = 0; i < nb; i++) {
        note_gone(bsz[i]);
        atomic_fetch_add(&n_frees, 1);
        f_free(blk[i]);
    }
    if (atomic_load(&live_bytes) != leaked) die("truth_taskpool: self-check failed: live != leaked\n");

    uint64_t m = atomic_load(&n_malloc), c = atomic_load(&n_calloc), r = atomic_load(&n_realloc);
    put("allocs", m + c + r);
    put("frees", atomic_load(&n_frees));
    put("leaked_objects", atomic_load(&n_leaked));
    put("leaked_bytes", leaked);
    put("peak_live_bytes", atomic_load(&peak_bytes));
    put("mallocs", m);
    put("callocs", c);
    put("reallocs", r);
    put("threads", (uint64_t)nth);
    put("streamed_bytes", stream_total);
    put("burst_bytes", burst);
    put("burst_allocs", nb);
    put("errors", atomic_load(&n_errors));
    put("cross_thread_frees", atomic_load(&n_cross));
    return atomic_load(&n_errors) ? 1 : 0;
}
