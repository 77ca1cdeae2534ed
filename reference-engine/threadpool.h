/* threadpool.h — a persistent worker pool for the reference engine (re_tp_).
 *
 * Workers are created once, with the engine; each parallel region wakes them
 * through one shared job slot, so a step creates no thread and calls no
 * allocator. The calling thread is worker 0 and takes its share too.
 *
 * Work is a range [0, n) split into at most n_threads contiguous pieces; the
 * split depends only on n and the thread count, and callers make every item
 * independent of which thread runs it (the matmul splits output rows, never
 * the reduction), so results do not depend on the thread count.
 */
#ifndef RE_THREADPOOL_H
#define RE_THREADPOOL_H

#include <stddef.h>

typedef struct re_tp re_tp_t;

/* fn(ctx, begin, end, thread index) processes items [begin, end). */
typedef void (*re_tp_fn)(void *ctx, size_t begin, size_t end, int tid);

/* n_threads >= 1 (1 = no workers: everything runs in the caller). NULL on
 * failure with *err = PSC_EINVAL or PSC_ENOMEM. */
re_tp_t *re_tp_create(int n_threads, int *err);
void re_tp_destroy(re_tp_t *tp);            /* NULL ok; joins the workers */
int re_tp_threads(const re_tp_t *tp);       /* 1 for NULL */

/* Strict mode (for tests): chunk k of a region always runs on thread
 * k % n_threads, and the caller waits for every thread, so every thread
 * really does its share even on a busy machine. Off by default (the caller
 * and whichever workers are awake share the chunks). Call between regions. */
void re_tp_set_strict(re_tp_t *tp, int on);
/* Chunks run by thread tid since creation (tests). */
unsigned long re_tp_chunks_run(const re_tp_t *tp, int tid);

/* Run fn over [0, n) in pieces that are multiples of `grain` (the last may be
 * shorter); returns when every piece is done. Not reentrant: one region at a
 * time, from one thread. tp NULL = run inline. */
void re_tp_run(re_tp_t *tp, re_tp_fn fn, void *ctx, size_t n, size_t grain);

#endif
