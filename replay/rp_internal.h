/* rp_internal.h — what the parts of replay/ share (not installed).
 *
 *   map.c      u64 -> u32 hash map and a dense slot allocator
 *   stream.c   trace events -> request stream (tensor or heap, markers, KV)
 *   pol_*.c    one policy each, behind rp_pol_ops_t
 *   replay.c   the driver: the pass, batches, timing, results, and the
 *              reset marker's scope count (RQ_SCOPE) for the arena
 *   output.c   table and JSON
 */
#ifndef POOLSCOPE_RP_INTERNAL_H
#define POOLSCOPE_RP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "grow.h"
#include "hashmap.h"
#include "metrics.h"
#include "poolscope/reader.h"
#include "replay.h"

/* ---- u64 -> u32 map: the common hash map (common/hashmap.h) with u32
 * values, shrunk when a burst of live objects is gone so memory follows the
 * live set ---------------------------------------------------------------- */
typedef struct rp_map {
    psc_map_t m;
    size_t cap;             /* slots; nonzero once initialized */
} rp_map_t;

int  rp_map_init(rp_map_t *m, size_t cap_hint);
void rp_map_free(rp_map_t *m);
/* Value of key, or UINT32_MAX. */
uint32_t rp_map_get(const rp_map_t *m, uint64_t key);
/* Insert or overwrite. 0 or PSC_ENOMEM. */
int rp_map_put(rp_map_t *m, uint64_t key, uint32_t val);
/* The value of key, added (*is_new = 1, value UINT32_MAX) when absent:
 * one probe where a get then a put took two. NULL on PSC_ENOMEM. */
uint32_t *rp_map_slot(rp_map_t *m, uint64_t key, int *is_new);
/* Remove; returns the value or UINT32_MAX if absent. */
uint32_t rp_map_del(rp_map_t *m, uint64_t key);

/* Dense small-integer slots, recycled LIFO. */
typedef struct rp_slots {
    uint32_t *free;
    size_t n_free, cap_free;
    uint32_t next;          /* slots ever handed out = 1 + highest slot */
} rp_slots_t;
int  rp_slots_get(rp_slots_t *s, uint32_t *slot);
int  rp_slots_put(rp_slots_t *s, uint32_t slot);
void rp_slots_free(rp_slots_t *s);

/* Grow a per-slot array to hold index `need` (zero-filling new entries):
 * common/grow.h's, from 256 slots. Inline for the common case (it holds it
 * already): the policies call it once or twice per request. */
static inline int rp_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    return psc_grow(arr, cap, need, elem, 256);
}

/* ---- requests ------------------------------------------------------------ */
enum rp_op {
    RQ_ALLOC = 1,     /* slot, bytes (requested), n (elements), arm, dtype, stack, flags */
    RQ_FREE,          /* slot */
    RQ_RESET,         /* end of an outermost scope of the reset marker */
    RQ_KV_CONFIG,     /* n = block_size (tokens), bytes = bytes per block */
    RQ_KV,            /* slot = KV request; n = tokens stored; bytes = prompt + max
                         tokens (0 unknown); flags RQ_F_RESIDENT while it holds blocks */
    RQ_SCOPE,         /* n = scopes of the reset marker open from here on (0 or more):
                         added by replay.c (not stream.c) where that count leaves or
                         comes back to 0, for the arena's long-lived region */
};
#define RQ_F_KV       1u   /* ALLOC/FREE: a KV block (arena with --with-kv only) */
#define RQ_F_RESIDENT 2u   /* RQ_KV: holds KV blocks */

typedef struct rp_req {
    uint8_t  op, arm, dtype, flags;
    uint32_t slot;
    uint32_t stack;
    uint32_t pad_;
    uint64_t bytes;
    uint64_t n;
    uint64_t t;       /* ns since trace start */
} rp_req_t;

/* ---- the stream ---------------------------------------------------------- */
typedef struct rp_stream_cfg {
    int heap;                   /* 1 heap events, 0 tensor events */
    const char *reset_marker;
    int kv_objects;             /* emit KV blocks as ALLOC/FREE (RQ_F_KV) */
    int kv_requests;            /* emit RQ_KV state */
} rp_stream_cfg_t;

typedef struct rp_rstream rp_rstream_t;
rp_rstream_t *rp_stream_create(const rp_stream_cfg_t *cfg, int *err);
void rp_stream_destroy(rp_rstream_t *s);
/* Turn one trace event into requests appended at out[*n] (room for at least
 * RP_STREAM_MAX_OUT). 0 or PSC_ENOMEM. */
#define RP_STREAM_MAX_OUT (2 * PST_MAX_IDS + 8)
int rp_stream_event(rp_rstream_t *s, const pst_event_t *ev, rp_req_t *out, size_t *n);
/* At the end of the trace: a final RQ_RESET if a reset scope is open is not
 * emitted (the arena resets at the end anyway). Counters for the report. */
void rp_stream_counts(const rp_rstream_t *s, uint64_t *allocs, uint64_t *frees,
                      uint64_t *unmatched, uint64_t *kv_pools);
/* Highest object slot + 1 handed out so far. */
uint32_t rp_stream_slots(const rp_rstream_t *s);
/* RQ_KV and RQ_KV_CONFIG requests emitted so far: a batch without any
 * leaves the KV policies nothing to do (replay.c skips their runs). */
uint64_t rp_stream_kv_out(const rp_rstream_t *s);

/* ---- policies ------------------------------------------------------------ */
typedef struct rp_pol rp_pol_t;

typedef struct az_sym az_sym_t;

typedef struct rp_ctx {
    const rp_config_t *cfg;
    uint64_t pool_cap;          /* resolved */
    uint64_t kv_context;        /* resolved (kv-contiguous) */
    uint64_t pool_min;          /* resolved (pool, heap stream) */
    int heap;                   /* the request stream is heap events */
    pst_reader_t *reader;       /* for stack frames (as far as read) */
    az_sym_t *sym;              /* the trace's modules, for pool_sites; NULL without */
} rp_ctx_t;

typedef struct rp_pol_ops {
    rp_policy_t id;
    size_t size;                                        /* bytes of the policy struct */
    int  (*init)(rp_pol_t *p, const rp_ctx_t *ctx);
    int  (*run)(rp_pol_t *p, const rp_req_t *rq, size_t n);
    int  (*finish)(rp_pol_t *p, uint64_t t_end, rp_result_t *res);
    void (*fini)(rp_pol_t *p);
    /* Optional (NULL): hand the batch on ahead of run, which then finishes
     * it, so work done elsewhere (the malloc helpers) overlaps the other
     * policies' runs. run without a submit first must still do it all. */
    int  (*submit)(rp_pol_t *p, const rp_req_t *rq, size_t n);
} rp_pol_ops_t;

/* ---- the heap stream's split (pol_pool.c) --------------------------------
 * A tensor allocator is for tensors, and a program's heap is mostly not: on
 * the heap stream the tensor allocators (pool, caching) take only what a
 * tensor allocator would be asked for — an allocation of at least
 * ctx->pool_min bytes, or one whose site matches a --pool-sites pattern —
 * and the rest goes to a glibc chunk model: while live, an object holds its
 * glibc chunk (request + 8 rounded up to 16, at least 32; page-rounded plus
 * 16 from 128 KiB) and no more. Both policies split by this one rule, so
 * their rows model the same requests and compare. On the tensor stream
 * every request is taken. Each policy has its own (the model's objects go
 * to that policy's metrics). */
typedef struct rp_split rp_split_t;
rp_split_t *rp_split_create(const rp_ctx_t *ctx, int *err);   /* NULL: *err */
void rp_split_destroy(rp_split_t *s);                          /* accepts NULL */
/* An RQ_ALLOC: 1 the tensor allocator takes it; 0 the chunk model took it
 * (an object of m: az_alloc_obj done; the policy then updates its
 * reserved bytes); a negative error code. */
int rp_split_alloc(rp_split_t *s, az_metrics_t *m, const rp_req_t *r);
/* An RQ_FREE: 1 the chunk model held it (freed in m: the policy updates
 * its reserved bytes), 0 not its. */
int rp_split_free(rp_split_t *s, az_metrics_t *m, const rp_req_t *r);
/* The chunk model's bytes held now: part of the policy's outstanding. */
uint64_t rp_split_held(const rp_split_t *s);
/* heap_split, pool_min, pooled_* (the calls the allocator took), site_*,
 * small_* and peak_small_held of res. */
void rp_split_result(const rp_split_t *s, rp_result_t *res);

/* Every policy struct starts with this. */
struct rp_pol {
    const rp_pol_ops_t *ops;
    const rp_ctx_t *ctx;
    az_metrics_t *m;
    uint64_t requests;
    double seconds;
    /* init's PSC_ENOENT: why the policy cannot run here (a sentence in
     * static storage, for "skipped NAME: REASON"); NULL = no helper */
    const char *skip_reason;
};

extern const rp_pol_ops_t rp_pol_malloc, rp_pol_malloc_jemalloc, rp_pol_malloc_mimalloc, rp_pol_arena,
    rp_pol_pool, rp_pol_caching, rp_pol_ideal, rp_pol_kv_contiguous, rp_pol_kv_reserve, rp_pol_kv_step,
    rp_pol_kv_paged;

/* Report internals shared with output.c. */
#define RP_MAX_WARNINGS 8
struct rp_report {
    rp_result_t res[RP_POLICY_COUNT];
    size_t n;
    rp_skip_t skipped[RP_POLICY_COUNT];  /* optional policies that did not apply */
    size_t n_skipped;
    rp_trace_info_t info;
    char *warnings[RP_MAX_WARNINGS];     /* rp_report_warning */
    size_t n_warnings;
    /* storage owned by the report */
    az_metrics_t *ms[RP_POLICY_COUNT];   /* kept alive: az_result_t points into them */
};

#endif
