/* bufpool.h — the buffer pool: refcounted, size-rounded, capped free lists.
 *
 * Semantics (docs/DESIGN.md, "Buffer pool"):
 *
 *  - Two arms share one byte budget (max_cached_bytes):
 *      the f32 arm   — buffers measured in f32 elements; a request of n
 *                      elements is rounded by bp_round_f32();
 *      the slab arm  — 64-byte aligned raw byte slabs rounded by
 *                      bp_round_slab() to 4096 bytes; it serves every
 *                      non-f32 element type and raw scratch leases, and a
 *                      slab is reused across types (an f16 slab can serve i8
 *                      scratch next).
 *  - Acquire takes the smallest cached buffer of its arm whose length is >=
 *    the rounded request; among equal lengths the most recently released
 *    comes back first (LIFO). A miss allocates a new backing buffer.
 *  - Buffers are refcounted. Acquire hands out one reference; views take
 *    more with bp_retain(). When the last holder calls bp_release() the
 *    buffer is reclaimed: cached, or destroyed if it alone exceeds the cap or
 *    caching it would take the cached bytes over the cap.
 *  - The pool never dereferences data pointers: the backing allocator may
 *    hand out fake addresses (the replay tool runs this code over a
 *    simulated store).
 *
 * Errors follow error.h: int-returning functions return 0 (or a small
 * non-negative value where documented) or a negative PS_E* code;
 * pointer-returning functions return NULL and store the code in *err when
 * err is not NULL.
 *
 * Thread-safety: every function taking a pool or a buffer may be called from
 * any thread concurrently, except bp_destroy(), which must not race with
 * other calls on the same pool (outstanding buffers may still be released
 * afterwards, see bp_destroy()).
 */
#ifndef POOLSCOPE_BUFPOOL_H
#define POOLSCOPE_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bp_pool bp_pool_t;  /* opaque */
typedef struct bp_buf bp_buf_t;    /* opaque: one backing buffer + its header */

/* Default cap on cached bytes (both arms together): 1 GiB. */
#define BP_DEFAULT_MAX_CACHED_BYTES ((size_t)1 << 30)
/* Alignment of every data pointer the pool asks its backing store for. */
#define BP_ALIGN 64u
/* Slab arm rounding quantum, in bytes. */
#define BP_SLAB_QUANTUM 4096u

typedef enum bp_arm {
    BP_ARM_F32  = 0,  /* lengths in f32 elements */
    BP_ARM_SLAB = 1,  /* lengths in bytes */
    BP_ARM_COUNT
} bp_arm_t;

/* Element types. Block-quantized types have an element count per block and
 * a byte size per block (Q8_0: 32 int8 values + one f16 scale = 34 bytes). */
typedef enum bp_dtype {
    BP_DT_F32 = 0,
    BP_DT_F16,
    BP_DT_BF16,
    BP_DT_I8,
    BP_DT_U8,
    BP_DT_I32,
    BP_DT_Q8_0,   /* blocks of 32 elements, 34 bytes each */
    BP_DT_RAW,    /* raw bytes: scratch leases */
    BP_DT_COUNT
} bp_dtype_t;

/* Bytes needed for n elements of dtype (whole blocks for block types).
 * Returns 0 for an unknown dtype or on overflow (and for n == 0). */
size_t bp_dtype_bytes(bp_dtype_t dtype, size_t n);
/* Short lower-case name ("f32", "q8_0", ...); "?" for an unknown dtype. */
const char *bp_dtype_name(bp_dtype_t dtype);
/* "f32" or "slab"; "?" otherwise. */
const char *bp_arm_name(bp_arm_t arm);

/* f32 arm rounding: n <= 1024 -> next power of two (0 counts as 1),
 * otherwise up to a multiple of 1024. Returns 0 on overflow. */
size_t bp_round_f32(size_t n);
/* Slab arm rounding: up to a multiple of 4096 bytes (0 counts as 1).
 * Returns 0 on overflow. */
size_t bp_round_slab(size_t bytes);

/* An injected allocator. NULL alloc/free = the default (posix_memalign /
 * free for data, malloc / free for bookkeeping). `free` gets the byte count
 * that was passed to `alloc`. alloc returns NULL on failure; it must return
 * a pointer aligned to `align` (a power of two). For the backing store the
 * returned pointer is never dereferenced by the pool. */
typedef struct bp_allocator {
    void *(*alloc)(void *ctx, size_t bytes, size_t align);
    void (*free)(void *ctx, void *p, size_t bytes);
    void *ctx;
} bp_allocator_t;

typedef enum bp_event_kind {
    BP_EV_ACQUIRE = 0,      /* a buffer was handed out (hit or miss) */
    BP_EV_RECLAIM,          /* the last reference went: cached or destroyed */
    BP_EV_BACKING_ALLOC,    /* a new backing buffer was allocated */
    BP_EV_BACKING_FREE,     /* a backing buffer was freed */
    BP_EV_COUNT
} bp_event_kind_t;

/* One observer event. Fields that do not apply to a kind are 0.
 * On a miss the pool emits BACKING_ALLOC, then ACQUIRE(hit=0); a reclaim
 * over the cap emits RECLAIM(cached=0), then BACKING_FREE. */
typedef struct bp_event {
    bp_event_kind_t kind;
    uint64_t seq;          /* per pool, strictly increasing, assigned under the lock */
    bp_arm_t arm;
    bp_dtype_t dtype;      /* element type of the current (or last) lease */
    uint64_t buf_id;       /* bp_id() of the backing buffer */
    size_t n_elems;        /* ACQUIRE/RECLAIM: requested elements of dtype */
    size_t req_len;        /* ACQUIRE/RECLAIM: requested length, arm units */
    size_t granted_len;    /* granted length, arm units */
    size_t req_bytes;      /* ACQUIRE/RECLAIM: requested bytes */
    size_t granted_bytes;  /* granted bytes (true data bytes) */
    int hit;               /* ACQUIRE: 1 served from the cache, 0 miss */
    int cached;            /* RECLAIM: 1 cached, 0 destroyed (over the cap) */
    void *data;            /* data pointer (never dereferenced by the pool) */
    size_t bytes;          /* BACKING_*: bytes allocated / freed */
} bp_event_t;

/* The observer is called with the pool's lock held, so events arrive in the
 * pool's order. It must be quick and must NOT call back into the pool (no
 * acquire, release, stats, check, ...): that would deadlock. */
typedef void (*bp_observe_fn)(void *ctx, const bp_event_t *ev);

typedef struct bp_config {
    const char *name;             /* for reporting; may be NULL; copied,
                                     truncated to 63 bytes */
    size_t max_cached_bytes;      /* cap on cached bytes, both arms; taken
                                     literally: 0 caches nothing. Start from
                                     bp_config_default() to get 1 GiB. */
    bp_allocator_t backing;       /* buffer data */
    bp_allocator_t meta;          /* the pool's own bookkeeping */
    bp_observe_fn observe;        /* NULL = off */
    void *observe_ctx;
} bp_config_t;

/* A config with the defaults: no name, 1 GiB cap, default allocators, no
 * observer. */
bp_config_t bp_config_default(void);

/* Per-arm counters. Totals live in bp_stats_t. */
typedef struct bp_arm_stats {
    uint64_t acquires, hits, misses;
    uint64_t backing_allocs, backing_frees;
    uint64_t reclaims_cached, destroyed_over_cap;
    size_t cached_bytes, peak_cached_bytes, cached_buffers;
    size_t outstanding_buffers, outstanding_bytes, peak_outstanding_bytes;
    size_t requested_bytes;       /* requested bytes of outstanding buffers */
} bp_arm_stats_t;

typedef struct bp_stats {
    uint64_t acquires;            /* successful acquires = hits + misses */
    uint64_t hits, misses;
    uint64_t failed_acquires;     /* returned NULL (ENOMEM / EINVAL) */
    uint64_t backing_allocs, backing_frees;
    uint64_t reclaims_cached;     /* last release -> cached */
    uint64_t destroyed_over_cap;  /* last release -> destroyed (cap) */
    size_t cached_bytes, peak_cached_bytes, cached_buffers;
    size_t outstanding_buffers, peak_outstanding_buffers;
    size_t outstanding_bytes, peak_outstanding_bytes;   /* granted bytes */
    size_t requested_bytes;       /* requested bytes of outstanding buffers */
    size_t reserved_bytes, peak_reserved_bytes;  /* outstanding + cached */
    double internal_frag;         /* (granted-requested)/granted, outstanding; 0 if none */
    double internal_frag_at_peak; /* the same at the peak of outstanding bytes */
    size_t max_cached_bytes;
    bp_arm_stats_t arm[BP_ARM_COUNT];
} bp_stats_t;

/* Create a pool. cfg may be NULL (= bp_config_default()). Returns NULL on
 * failure: PSC_ENOMEM (meta allocator failed) or PSC_EINVAL (an allocator with
 * only one of alloc/free set). Thread-safe (independent pools). */
bp_pool_t *bp_create(const bp_config_t *cfg, int *err);

/* Destroy a pool; NULL is accepted (returns 0). Frees every cached buffer.
 * Returns 0, or PSC_EBUSY if buffers are still outstanding: then the pool is
 * detached (no more observer calls, no more acquires allowed) and each
 * outstanding buffer is freed to the backing store when its last reference
 * goes; the pool's memory goes with the last one. Asserts on PSC_EBUSY when
 * built with -DPS_DEBUG=1. Must not race with other calls on this pool
 * except bp_release()/bp_retain() of outstanding buffers. */
int bp_destroy(bp_pool_t *pool);

/* Acquire an f32 buffer of at least n elements (granted bp_round_f32(n)).
 * Refcount 1. NULL on failure with *err = PSC_ENOMEM (either allocator
 * failed; the pool is unchanged) or PSC_EINVAL (size overflow, NULL pool).
 * Thread-safe. */
bp_buf_t *bp_acquire(bp_pool_t *pool, size_t n, int *err);
/* Acquire a buffer for n elements of dtype: BP_DT_F32 goes to the f32 arm
 * (as bp_acquire), every other dtype to the slab arm. Errors as above, and
 * PSC_EINVAL for an unknown dtype. Thread-safe. */
bp_buf_t *bp_acquire_typed(bp_pool_t *pool, bp_dtype_t dtype, size_t n, int *err);
/* A raw scratch lease of at least `bytes` bytes from the slab arm
 * (dtype BP_DT_RAW). Errors as bp_acquire. Thread-safe. */
bp_buf_t *bp_acquire_scratch(bp_pool_t *pool, size_t bytes, int *err);

/* Take one more reference (a view). Returns 0, or PSC_EINVAL if buf is NULL
 * or its refcount was already 0 (a use after release; asserts under
 * PS_DEBUG). Lock-free; any thread. */
int bp_retain(bp_buf_t *buf);
/* Drop one reference. Returns 1 if this was the last one (the buffer was
 * reclaimed: cached or destroyed, and buf must not be used again), 0 if
 * references remain, PSC_EINVAL if buf is NULL or already released.
 * Any thread; takes the pool lock only for the last reference. */
int bp_release(bp_buf_t *buf);

/* Accessors for a held buffer (any thread holding a reference). */
void *bp_data(const bp_buf_t *buf);       /* data pointer, BP_ALIGN aligned */
float *bp_f32(const bp_buf_t *buf);       /* data as float*, NULL for slabs */
size_t bp_len(const bp_buf_t *buf);       /* granted length: f32 elements or slab bytes */
size_t bp_bytes(const bp_buf_t *buf);     /* granted bytes */
size_t bp_elems(const bp_buf_t *buf);     /* granted capacity in elements of bp_dtype() */
size_t bp_requested_bytes(const bp_buf_t *buf);  /* bytes asked for by this lease */
bp_arm_t bp_arm(const bp_buf_t *buf);
bp_dtype_t bp_dtype(const bp_buf_t *buf); /* dtype of the current lease */
uint64_t bp_id(const bp_buf_t *buf);      /* stable per backing buffer, from 1 */
uint32_t bp_refcount(const bp_buf_t *buf); /* a snapshot; for tests and debugging */

/* Snapshot the counters (taken under the lock). Returns 0 or PSC_EINVAL. */
int bp_stats(const bp_pool_t *pool, bp_stats_t *out);
/* Outstanding buffers, lock-free (an atomic read). */
size_t bp_outstanding(const bp_pool_t *pool);
const char *bp_name(const bp_pool_t *pool);      /* "" when none was given */
size_t bp_max_cached_bytes(const bp_pool_t *pool);

/* Invariant walker (under the lock): free lists sorted by length with one
 * entry per length, LIFO order consistent within a length, no buffer twice,
 * cached bytes and counts add up per arm, cached <= cap, outstanding
 * buffers/bytes match the buffers handed out. O(buffers + size classes).
 * Returns 0, PSC_ECORRUPT, or PSC_EINVAL for NULL. */
int bp_check(const bp_pool_t *pool);

#ifdef __cplusplus
}
#endif
#endif
