/* blockpool_int.h — the KV block pool's structures (internal to pool/; the
 * tests include it to corrupt a pool on purpose and see kvb_check and the
 * debug build's walker catch it). Users see only poolscope/blockpool.h.
 *
 * Why the records and lists are shaped so: the top of blockpool.c.
 */
#ifndef KVB_INT_H
#define KVB_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "hashmap.h"
#include "invariant.h"
#include "poolscope/blockpool.h"

#define NIL (-1)

enum { F_EVER = 1, F_RETIRED = 2, F_RESIDENT = 4 };

struct blk {
    uint8_t *slot;     /* storage slot, NULL without storage */
    int64_t  owner;    /* -1 when free or retired */
    int32_t  next;     /* free list: next down the stack; owner list: next */
    int32_t  prev;     /* owner list only */
    int32_t  n_used;
    uint8_t  list;     /* free-list index 0 (K or KV) / 1 (V) */
    uint8_t  format;
    uint8_t  flags;
};

struct owner {          /* the value of an owner id in the owner map */
    int32_t head, tail;
    int32_t count;
    int32_t active;
};

struct chunk {
    uint8_t *base;
    size_t   len;
};

struct kvb_pool {
    pthread_mutex_t mu;
    kvb_config_t    cfg;
    kvb_alloc_t     a;

    struct blk *blk;           /* [n_ids] */
    int32_t     n_ids, blk_cap;

    int         n_lists;       /* 2 with separate_kv, else 1 */
    int32_t     top[2];        /* free-list heads */
    int32_t     n_free[2];
    int32_t     n_total[2];    /* managed blocks per list (not retired) */
    int32_t     cap[2];        /* growth cap per list; 0 = none */

    psc_map_t       own;       /* owner id -> struct owner; grows beyond 1/2 full */

    int64_t n_alloc, n_frees, n_reused, n_exh, n_grown, n_retired, peak;
    int64_t n_partial, n_resident;

    kvb_stats_t *hist;         /* ring of KVB_HISTORY_LEN */
    uint32_t     hist_head, hist_n;

    uint64_t seq;

    size_t        slot_bytes;  /* 0 = no storage */
    struct chunk *chunks;
    int32_t       n_chunks, chunk_cap;
#if PS_DEBUG
    unsigned      dbg_ops, dbg_every;   /* the walker runs every dbg_every-th change */
#endif
};

#endif
