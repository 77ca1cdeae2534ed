/* replay.h — re-simulate a trace under allocation policies (prefix rp_).
 *
 * A trace is turned into a request stream (allocate / free of objects, reset
 * points, KV request state) and every selected policy runs over it in one
 * streaming pass:
 *
 *   malloc         the real allocator of this process (glibc, or jemalloc /
 *                  mimalloc when preloaded), one byte per page touched
 *   malloc-jemalloc, malloc-mimalloc
 *                  the same calls in a helper with that library preloaded
 *                  (skipped from a set when the library is not installed)
 *   arena          64-byte bumps in chunks doubling from 1 MiB, reset at the
 *                  end of each outermost scope of a marker (default forward);
 *                  objects live at a reset are lifetime violations and pin
 *                  their chunk until their last object dies; objects made
 *                  outside every scope of the marker are long-lived, bumped
 *                  in a region of their own that is never reset
 *   pool           the real pool/bufpool.c over a simulated backing store;
 *                  on the heap stream only allocations of at least pool_min
 *                  bytes (or from pool_sites) go to it, the rest to a glibc
 *                  chunk model
 *   caching        a caching tensor allocator in the manner of PyTorch's
 *                  (512-byte rounding, 2 MiB small-pool segments, best fit,
 *                  splitting, coalescing; pol_caching.c has the rules)
 *   ideal          the peak-live lower bound
 *   kv-contiguous, kv-reserve, kv-step, kv-paged
 *                  KV-cache reservation policies, from the trace's request
 *                  markers and KV block events
 *
 * Every metric comes from the analyzer's accumulators (analyzer/metrics.h):
 * each policy feeds the addresses and sizes it hands out into its own
 * az_metrics_t; replay only adds what is policy-specific (lifetime
 * violations, the pool's cap decisions, the allocator's timing).
 *
 *   rp_config_t cfg = rp_config_default();
 *   rp_policy_select("pool,arena", &cfg.policies, &cfg.optional, msg, sizeof msg);
 *   rp_report_t *rep;
 *   int rc = rp_run("t.pst", &cfg, &rep, msg, sizeof msg);   // msg: what is wrong
 *   rp_report_table(rep, stdout);  // or rp_report_json(rep, stdout)
 *   rp_report_free(rep);
 *
 * Memory is bounded by the live objects (and the live KV requests), not by
 * the length of the trace. Errors follow include/poolscope/error.h; the library never
 * prints except through the progress callback.
 */
#ifndef POOLSCOPE_REPLAY_H
#define POOLSCOPE_REPLAY_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "metrics.h"
#include "poolscope/error.h"

typedef enum rp_policy {
    RP_MALLOC = 0,
    RP_MALLOC_JEMALLOC,
    RP_MALLOC_MIMALLOC,
    RP_ARENA,
    RP_POOL,
    RP_CACHING,
    RP_IDEAL,
    RP_KV_CONTIGUOUS,
    RP_KV_RESERVE,
    RP_KV_STEP,
    RP_KV_PAGED,
    RP_POLICY_COUNT
} rp_policy_t;

#define RP_KV_MASK ((1u << RP_KV_CONTIGUOUS) | (1u << RP_KV_RESERVE) | \
                    (1u << RP_KV_STEP) | (1u << RP_KV_PAGED))
#define RP_ALL_MASK ((1u << RP_POLICY_COUNT) - 1u)
#define RP_MALLOC_MASK ((1u << RP_MALLOC) | (1u << RP_MALLOC_JEMALLOC) | (1u << RP_MALLOC_MIMALLOC))

/* The pool's default threshold on the heap stream (rp_config_t.pool_min):
 * 128 KiB. It is glibc's mmap threshold (M_MMAP_THRESHOLD's default), the
 * size from which glibc itself stops carving chunks out of its heap, and
 * on a PyTorch CPU run the size above which tensor storage dominates: of
 * the allocations of 128 KiB or more, 99.9% of the bytes are tensors
 * (c10::alloc_cpu's posix_memalign), while below it 99.98% of the calls
 * are the interpreter's and the libraries' small objects, which a pool of
 * 4 KiB slabs would blow up twenty-fold. */
#define RP_POOL_MIN_DEFAULT ((uint64_t)128 << 10)
#define RP_MAX_POOL_SITES 16

/* "malloc", "arena", ...; "?" otherwise. */
const char *rp_policy_name(rp_policy_t p);
/* Comma-separated names (or a set: "all", "kv", "allocators" = the three
 * malloc policies) into a bit set (1 << rp_policy_t).
 * 0 or PSC_EINVAL with a message naming the bad entry. */
int rp_policy_parse(const char *list, unsigned *mask, char *msg, size_t cap);
/* The same, and *optional gets the policies that came only from a set
 * ("all", "kv"), never by their own name: those are what rp_config_t's
 * `optional` takes. "all,pool" makes pool required and the rest optional. */
int rp_policy_select(const char *list, unsigned *mask, unsigned *optional, char *msg, size_t cap);

typedef enum rp_source {
    RP_STREAM_AUTO = 0,   /* tensor events if the trace has any, else heap */
    RP_STREAM_TENSOR,
    RP_STREAM_HEAP,
} rp_source_t;

/* Progress: called about twice a second with bytes consumed of the file. */
typedef void (*rp_progress_fn)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes);

typedef struct rp_config {
    unsigned policies;          /* bit set; 0 = every policy, all of them optional */
    unsigned optional;          /* of those, the ones that may be skipped when they do not
                                   apply to the trace (rp_report_skipped says which and why);
                                   one not in this set that does not apply is an error */
    rp_source_t stream;
    uint64_t pool_cap;          /* cap on cached bytes; used when pool_cap_set */
    int pool_cap_set;           /* else: the trace's POOL_CREATE cap, else 1 GiB */
    /* pool on the heap stream: an allocation goes to the pool when it asks
     * for at least pool_min bytes (when pool_min_set, else
     * RP_POOL_MIN_DEFAULT; 0 = every one) or when its site matches one of
     * pool_sites (a substring of the function name of the allocation site
     * or of a wrapper it called through, as `report` names sites); the
     * rest is counted as glibc chunks. The tensor stream ignores both. */
    uint64_t pool_min;
    int pool_min_set;
    const char *const *pool_sites;
    size_t n_pool_sites;        /* at most RP_MAX_POOL_SITES */
    /* caching: bytes of wholly free segments kept; beyond them free
     * segments are released (largest first). Used when cache_cap_set,
     * else unlimited. */
    uint64_t cache_cap;
    int cache_cap_set;
    const char *arena_reset;    /* marker name; NULL = "forward". One given
                                   that never opens a scope in the trace is
                                   an error; the default missing, a warning */
    int with_kv;                /* KV blocks are arena objects too */
    uint32_t block_size;        /* kv-paged block size in tokens; 0 = the trace's */
    uint64_t kv_context;        /* kv-contiguous reservation; 0 = largest prompt+max in the trace */
    uint32_t kv_step;           /* kv-step growth in tokens; 0 = 256 */
    uint32_t batch;             /* requests per batch; 0 = 4096 */
    uint64_t window_ns;         /* reader merge window (pst_reader_set_window); 0 = the
                                   reader's default (1 s), as report reads the trace.
                                   The reader queues this much trace time, so it bounds
                                   replay's memory along with the live set */
    const char *const *phase_frames;   /* --phase-frame FUNC[=NAME] (analyzer/phase_frame.h):
                                   scopes from the stacks, read as markers (--arena-reset NAME) */
    size_t n_phase_frames;
    rp_progress_fn progress;    /* NULL = none */
    void *progress_ctx;
} rp_config_t;

rp_config_t rp_config_default(void);

/* A call stack of lifetime violations (arena). */
typedef struct rp_vstack {
    uint32_t stack;             /* trace stack id, 0 = none recorded */
    uint64_t count, bytes;      /* violating objects from it, their requested bytes */
    uint32_t depth;
    const uint64_t *frames;     /* innermost first; valid until rp_report_free */
} rp_vstack_t;

/* One policy's outcome. The metrics are the analyzer's (az_result_t); the
 * rest is what only the simulation knows. */
typedef struct rp_result {
    rp_policy_t policy;
    const char *name;
    az_result_t m;              /* peak_reserved_bytes, peak_live_bytes, hit_rate, ... */
    uint64_t requests;          /* requests the policy handled */
    double seconds;             /* time spent in the policy */
    double events_per_s;        /* requests / seconds */
    /* pool and arena */
    uint64_t peak_outstanding_buffers;   /* pool: buffers out; arena: objects whose
                                            memory is held (allocated since the
                                            last reset, pinned, or in a long-lived
                                            chunk still held) */
    /* pool */
    uint64_t destroyed_over_cap, reclaims_cached, pool_cap;
    int heap_split;             /* 1: the heap stream was split (pool_min, pool_sites) */
    uint64_t pool_min;          /* the threshold used */
    uint64_t pooled_calls, pooled_bytes;     /* allocations (requested bytes) to the pool */
    uint64_t site_calls, site_bytes;         /* of them: below pool_min, by site */
    uint64_t site_stacks;       /* distinct stack ids whose site matched */
    uint64_t small_calls, small_bytes;       /* to the glibc chunk model */
    uint64_t peak_small_held;   /* peak of the live chunks' bytes of the model */
    uint64_t pool_peak_outstanding, pool_peak_reserved;   /* the pool's (bp_stats) or the caching
                                                             allocator's own, chunks not counted */
    /* caching */
    uint64_t cache_cap;         /* UINT64_MAX: unlimited */
    uint64_t segments_allocated, segments_released, peak_segments;
    uint64_t released_over_cap; /* segments released because of the cap */
    uint64_t splits, merges;
    double fragmentation;       /* 1 - peak allocated / peak reserved: not shown (i_frag is the
                                   row's figure), kept for the tests */
    /* arena */
    uint64_t resets, lifetime_violations, violation_bytes;   /* distinct objects */
    uint64_t pinned_chunks, peak_pinned_bytes, chunks_allocated;
    const rp_vstack_t *vstacks; /* worst first (by bytes), n_vstacks of them */
    size_t n_vstacks;
    const char *reset_marker;   /* the marker whose scopes reset it */
    uint64_t reset_scopes;      /* outermost scopes of it opened */
    uint64_t longlived_objects, longlived_bytes;   /* made outside every scope (requested bytes) */
    uint64_t peak_longlived_bytes;   /* peak of the long-lived region's chunks */
    uint64_t peak_scoped_bytes;      /* peak of the scoped chunks (pinned ones too) */
    uint64_t longlived_chunks;       /* chunks taken for the long-lived region */
    /* malloc */
    const char *allocator;      /* "glibc", "jemalloc", "mimalloc" */
    const char *held_source;    /* where the held figure comes from ("mallinfo2", ...) */
    const char *library;        /* the preloaded library, NULL for the inherited one;
                                   valid until rp_report_free */
    uint64_t peak_rss_bytes;    /* touched pages, above the baseline at start */
    double ns_per_op;
    /* KV */
    uint64_t kv_context, kv_block_size, kv_token_bytes;
    uint64_t peak_kv_reserved_tokens, peak_kv_tokens, kv_requests;
    uint64_t kv_overflows;      /* requests that stored more than the policy reserves */
} rp_result_t;

typedef struct rp_report rp_report_t;

/* Replay `path`. 0 with *out set, or a negative PS_E* code with a one-line
 * reason in msg (for "poolscope replay: FILE: <msg>"): unreadable, not a
 * trace, truncated, corrupt, nothing to replay. A path that is not a
 * regular file (a pipe, /dev/stdin) is read into memory once, since the
 * replay reads its input more than once.
 *
 * A policy does not apply when the trace cannot drive it: the KV policies
 * need KV block events, kv-contiguous also a context (--kv-context, or
 * request markers with prompt and max tokens), malloc its helper program,
 * malloc-jemalloc and malloc-mimalloc also their library.
 * An optional one is then skipped and listed in the report; a required
 * one is PSC_EINVAL with the reason (the whole run fails), and so is a run
 * where every selected policy was skipped. */
int rp_run(const char *path, const rp_config_t *cfg, rp_report_t **out, char *msg, size_t cap);
/* The same for a trace in memory. */
int rp_run_mem(const void *buf, size_t len, const rp_config_t *cfg, rp_report_t **out,
               char *msg, size_t cap);

size_t rp_report_count(const rp_report_t *r);
const rp_result_t *rp_report_result(const rp_report_t *r, size_t i);
/* NULL when the policy did not run. */
const rp_result_t *rp_report_find(const rp_report_t *r, rp_policy_t p);

/* An optional policy that did not run, and why ("the trace has no KV block
 * events"): a sentence for "skipped NAME: REASON", static storage. */
typedef struct rp_skip {
    rp_policy_t policy;
    const char *name;
    const char *reason;
} rp_skip_t;
size_t rp_report_skipped_count(const rp_report_t *r);
const rp_skip_t *rp_report_skipped(const rp_report_t *r, size_t i);

typedef struct rp_trace_info {
    const char *stream;         /* "tensor" or "heap" */
    uint64_t events;            /* trace events read */
    uint64_t requests;          /* requests made from them */
    uint64_t allocs, frees;     /* object allocations / frees in the request stream */
    uint64_t unmatched_frees;   /* frees of objects never seen allocated */
    uint64_t kv_pools;          /* KVB_CREATE events */
    uint64_t lost;              /* events the tracer lost */
    double read_seconds;        /* decoding the trace and building requests */
    double seconds;             /* the whole run */
} rp_trace_info_t;
const rp_trace_info_t *rp_report_info(const rp_report_t *r);

/* What a reader of the figures must know and the figures alone do not say
 * (the arena's reset marker never occurs in the trace, ...): sentences,
 * valid until rp_report_free. The table prints them as "warning: ...",
 * JSON as "warnings": [...]. */
size_t rp_report_warning_count(const rp_report_t *r);
const char *rp_report_warning(const rp_report_t *r, size_t i);

/* Readable table, one "skipped NAME: REASON" line per skipped policy at
 * the end, then one "warning: ..." line per warning / JSON ({"trace": ...,
 * "policies": [...], "skipped": [{"policy": NAME, "reason": ...}],
 * "warnings": [...]}, skipped and warnings always present). */
void rp_report_table(const rp_report_t *r, FILE *out);
void rp_report_json(const rp_report_t *r, FILE *out);
void rp_report_free(rp_report_t *r);   /* accepts NULL */

#endif
