/* threadpool.c — persistent workers, chunks claimed from one atomic word.
 *
 * A parallel region is split into chunks (a few per thread, each a multiple
 * of the grain). The caller and the workers claim chunks from one 64-bit
 * atomic word holding (generation, chunk count, next chunk); a claim is a
 * CAS on that word, so it only succeeds for a chunk that exists in the
 * current generation, and a worker that wakes late can never run a chunk of
 * a region that is already over. The region's function and sizes are read
 * only after a successful claim (the caller cannot rewrite them before that
 * chunk is done). The caller works too and
 * returns as soon as every chunk is done — it never waits for a worker that
 * has not started (on a shared, oversubscribed machine a descheduled worker
 * just finds nothing left to do).
 *
 * Which thread runs a chunk does not matter to the results: callers make
 * every item independent (the matmul splits output rows, never the
 * reduction). Workers spin briefly between regions (a forward posts 40+ of
 * them back to back) and then sleep on a condition variable. Nothing here
 * allocates after re_tp_create().
 */
#include "threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "poolscope/error.h"

#define RE_TP_SPIN 4000          /* pause iterations before sleeping / yielding */
#define RE_TP_CHUNKS_PER_THREAD 4

struct re_tp {
    int n_threads;
    pthread_t *threads;          /* (n_threads - 1) workers */
    pthread_mutex_t mu;
    pthread_cond_t wake;
    int sleepers;                /* workers waiting on `wake` (under mu) */
    int stop;                    /* under mu */
    _Atomic uint64_t claim;      /* generation:24 | n_chunks:20 | next chunk:20 */
    _Atomic uint32_t done;       /* chunks finished in this generation */
    /* the current region: written by the caller before it publishes the
     * generation, read by workers only after a successful claim */
    re_tp_fn fn;
    void *ctx;
    size_t n, chunk;             /* items, items per chunk */
    uint32_t n_chunks;
    int strict;                  /* chunk k runs on thread k % n_threads (atomic: set between jobs
                                    while workers may still be leaving the last one) */
    unsigned long *ran;          /* (n_threads) chunks run per thread (a
                                    padded slot each: written by one thread) */
};
#define RE_TP_PAD 16             /* 128 bytes between counters */

#define RE_TP_FIELD 20
#define RE_TP_MASK ((1u << RE_TP_FIELD) - 1)
static uint32_t re_gen_of(uint64_t c) { return (uint32_t)(c >> (2 * RE_TP_FIELD)); }
static uint32_t re_nchunks_of(uint64_t c) { return (uint32_t)(c >> RE_TP_FIELD) & RE_TP_MASK; }
static uint32_t re_next_of(uint64_t c) { return (uint32_t)c & RE_TP_MASK; }

static void re_tp_chunk(re_tp_t *tp, uint32_t k, int tid)
{
    size_t b = (size_t)k * tp->chunk, e = b + tp->chunk;
    if (e > tp->n) e = tp->n;
    tp->fn(tp->ctx, b, e, tid);
    tp->ran[(size_t)tid * RE_TP_PAD]++;
    atomic_fetch_add_explicit(&tp->done, 1, memory_order_release);
}

/* Claim and run chunks of generation g until none are left. */
static void re_tp_work(re_tp_t *tp, uint32_t g, int tid)
{
    uint64_t c = atomic_load_explicit(&tp->claim, memory_order_acquire);
    if (__atomic_load_n(&tp->strict, __ATOMIC_RELAXED)) {   /* static assignment; the caller waits for all of it */
        if (re_gen_of(c) != g) return;
        for (uint32_t k = (uint32_t)tid; k < re_nchunks_of(c); k += (uint32_t)tp->n_threads)
            re_tp_chunk(tp, k, tid);
        return;
    }
    for (;;) {
        if (re_gen_of(c) != g) return;
        uint32_t k = re_next_of(c);
        if (k >= re_nchunks_of(c)) return;
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        re_tp_chunk(tp, k, tid);
        c = atomic_load_explicit(&tp->claim, memory_order_acquire);
    }
}

typedef struct { re_tp_t *tp; int tid; } re_tp_arg_t;

static void *re_tp_main(void *p)
{
    re_tp_arg_t *a = p;
    re_tp_t *tp = a->tp;
    uint32_t seen = 0;
    for (;;) {
        uint32_t g;
        int spins = 0;
        while ((g = re_gen_of(atomic_load_explicit(&tp->claim, memory_order_acquire))) == seen &&
               spins < RE_TP_SPIN) {
            spins++;
            __builtin_ia32_pause();
        }
        if (g == seen) {
            pthread_mutex_lock(&tp->mu);
            tp->sleepers++;
            while ((g = re_gen_of(atomic_load_explicit(&tp->claim, memory_order_acquire))) == seen &&
                   !tp->stop)
                pthread_cond_wait(&tp->wake, &tp->mu);
            tp->sleepers--;
            int stop = tp->stop;
            pthread_mutex_unlock(&tp->mu);
            if (stop) break;
        }
        seen = g;
        re_tp_work(tp, g, a->tid);
    }
    return NULL;
}

re_tp_t *re_tp_create(int n_threads, int *err)
{
    if (n_threads < 1 || n_threads > 256) {
        if (err) *err = PSC_EINVAL;
        return NULL;
    }
    re_tp_t *tp = calloc(1, sizeof *tp);
    if (!tp) goto nomem;
    tp->n_threads = n_threads;
    tp->threads = calloc((size_t)n_threads, sizeof(pthread_t) + sizeof(re_tp_arg_t));
    tp->ran = calloc((size_t)n_threads * RE_TP_PAD, sizeof(unsigned long));
    if (!tp->threads || !tp->ran) { free(tp->threads); free(tp->ran); free(tp); goto nomem; }
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->done, 0);
    re_tp_arg_t *args = (re_tp_arg_t *)(tp->threads + n_threads);
    for (int i = 1; i < n_threads; i++) {
        args[i].tp = tp;
        args[i].tid = i;
        if (pthread_create(&tp->threads[i - 1], NULL, re_tp_main, &args[i]) != 0) {
            tp->n_threads = i;     /* join the ones that started */
            re_tp_destroy(tp);
            goto nomem;
        }
    }
    return tp;
nomem:
    if (err) *err = PSC_ENOMEM;
    return NULL;
}

void re_tp_destroy(re_tp_t *tp)
{
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    tp->stop = 1;
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n_threads; i++) pthread_join(tp->threads[i - 1], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->wake);
    free(tp->threads);
    free(tp->ran);
    free(tp);
}

void re_tp_set_strict(re_tp_t *tp, int on) { if (tp) __atomic_store_n(&tp->strict, on != 0, __ATOMIC_RELAXED); }
unsigned long re_tp_chunks_run(const re_tp_t *tp, int tid)
{
    return tp && tid >= 0 && tid < tp->n_threads ? tp->ran[(size_t)tid * RE_TP_PAD] : 0;
}

int re_tp_threads(const re_tp_t *tp) { return tp ? tp->n_threads : 1; }

void re_tp_run(re_tp_t *tp, re_tp_fn fn, void *ctx, size_t n, size_t grain)
{
    if (n == 0) return;
    if (grain == 0) grain = 1;
    if (!tp || tp->n_threads == 1 || (n <= grain && !__atomic_load_n(&tp->strict, __ATOMIC_RELAXED))) {
        fn(ctx, 0, n, 0);
        return;
    }
    size_t units = (n + grain - 1) / grain;
    size_t want = (size_t)tp->n_threads * RE_TP_CHUNKS_PER_THREAD;
    size_t per = (units + want - 1) / want;
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n = n;
    tp->chunk = per * grain;
    tp->n_chunks = (uint32_t)((n + tp->chunk - 1) / tp->chunk);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    uint32_t g = (re_gen_of(atomic_load_explicit(&tp->claim, memory_order_relaxed)) + 1) & 0xFFFFFFu;
    atomic_store_explicit(&tp->claim, ((uint64_t)g << (2 * RE_TP_FIELD)) |
                                      ((uint64_t)tp->n_chunks << RE_TP_FIELD),
                          memory_order_release);   /* publish */
    pthread_mutex_lock(&tp->mu);
    if (tp->sleepers) pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    re_tp_work(tp, g, 0);

    int spins = 0;
    while (atomic_load_explicit(&tp->done, memory_order_acquire) < tp->n_chunks) {
        if (++spins < RE_TP_SPIN) __builtin_ia32_pause();
        else sched_yield();   /* a worker holding a chunk was descheduled */
    }
}
