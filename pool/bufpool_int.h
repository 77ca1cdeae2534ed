/* bufpool_int.h — the buffer pool's structures (internal to pool/; the
 * tests include it to corrupt a pool on purpose and see bp_check and the
 * debug build's walker catch it). Users see only poolscope/bufpool.h.
 *
 * The index these structures make is described at the top of bufpool.c.
 */
#ifndef BP_INT_H
#define BP_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "invariant.h"
#include "poolscope/bufpool.h"

#define BP_NCLASS 4096                /* direct size classes per arm */
#define BP_NWORDS (BP_NCLASS / 64)    /* == 64: one summary word */
#define BP_SPARE_MAX 64               /* spare headers kept for misses */

enum { ST_OUT = 1, ST_CACHED = 2 };

struct bp_buf {
    /* First cache line: what acquire and release touch. */
    void *data;
    size_t len;            /* granted length, arm units (the index key) */
    size_t bytes;          /* granted bytes */
    bp_buf_t *below;       /* stacked: next older buffer of the same length */
    bp_pool_t *pool;
    _Atomic uint32_t refs;
    uint8_t arm, dtype, state;
    int8_t height;         /* AVL height when a tree node */
    size_t req_bytes;      /* the current (or last) lease */
    uint64_t stamp;        /* release clock when cached (LIFO check) */
    /* Second line: events, the tree, the walker. */
    size_t n_elems, req_len;
    uint64_t id;
    bp_buf_t *stack;       /* tree node: newest buffer stacked on it */
    bp_buf_t *left, *right;
    uint64_t mark;         /* bp_check epoch */
    bp_buf_t *all_prev, *all_next;   /* every live header of the pool */
};

typedef struct bp_index {
    bp_arm_stats_t st;
    bp_buf_t *tree;                /* AVL of longer lengths */
    uint64_t summary;              /* bit w: words[w] != 0 */
    uint64_t words[BP_NWORDS];     /* bit c: heads[c] != NULL */
    bp_buf_t *heads[BP_NCLASS];    /* LIFO stack per class */
} bp_index_t;

struct bp_pool {
    pthread_mutex_t lock;
    atomic_size_t outstanding;     /* written under the lock only */
    bp_observe_fn observe;
    void *observe_ctx;
    bp_allocator_t backing, meta;
    size_t cap;
    uint64_t seq, next_id, clock, epoch, failed;
    size_t cached_bytes, peak_cached;
    size_t out_bufs, peak_out_bufs, out_bytes, peak_out_bytes, req_bytes;
    size_t peak_reserved;
    double frag_at_peak;
    int detached;                  /* bp_destroy returned PSC_EBUSY */
    bp_buf_t *all;
    bp_buf_t *spare;
    size_t nspare;
    char name[64];
#if PS_DEBUG
    unsigned dbg_ops, dbg_every;   /* the walker runs every dbg_every-th unlock */
#endif
    bp_index_t idx[BP_ARM_COUNT];
};

#endif
