/* blockpool.h — the KV-cache block pool (prefix kvb_).
 *
 * Three layers, one header:
 *
 *   1. Block bookkeeping (pool/blockpool.c): a fixed number of fixed-size
 *      blocks of `block_size` token slots, handed out to owners (request ids)
 *      from per-stream LIFO free lists, with reuse/fragmentation counters, a
 *      bounded stats history, a Prometheus exposition and an observer.
 *   2. Block storage (pool/blockpool.c, on when cfg.row_elems > 0): the bytes
 *      behind every block, reserved up front with mmap so that writing a block
 *      never calls an allocator.  Storage is part of the pool, so growth maps
 *      the new blocks' address space under the pool's lock.
 *   3. A KV cache on the pool (pool/kvcache.c): appends K and V token rows,
 *      taking a new block only when the previous one is full, and keeps a block
 *      table attention can read straight from.
 *
 * Semantics follow docs/DESIGN.md ("KV block pool"), in detail where an API
 * of this kind could go either way:
 *
 *   - Counters count BLOCKS: one allocate of 40 tokens at block size 16 adds 3
 *     to n_allocations; n_frees counts blocks actually returned (freeing an
 *     already free block counts nothing).  n_exhausted counts failed attempts.
 *   - n_blocks and max_blocks are totals for the whole pool.  With separate_kv
 *     they are split between K and V; an odd count gives the extra block to K
 *     (K = n - n/2, V = n/2), so n_blocks = 1 leaves V empty until it grows.
 *     max_blocks is split the same way and caps each stream's growth.
 *   - Streams: with separate_kv on, K and V are valid and KV is PSC_EINVAL.
 *     With separate_kv off there is one free list; K, V and KV are all accepted
 *     and all mean KV (docs/DESIGN.md), and block records report KV.
 *   - Owners are ids >= 0 (-1 means "no owner").  An owner is *active* once
 *     registered (explicitly or by its first allocate) until release_owner or
 *     free_all.  release_owner does not free blocks: they stay checked out to
 *     the id (blocks_for and free_all still see them) but a new register_owner
 *     on that id succeeds.
 *   - History: one snapshot is appended by every successful call that changes
 *     the bookkeeping (allocate, free, free_all, set_used, write,
 *     register_owner, release_owner, shrink) and by an allocate that fails as
 *     exhausted (it bumps n_exhausted).  Calls rejected with an error code
 *     change nothing and append nothing.
 *
 * Thread safety: every call on a pool takes one internal mutex.  A kvb_cache_t
 * is used by one thread at a time (several caches may share a pool).
 *
 * Errors: the project convention in error.h (negative PSC_E* codes).
 */
#ifndef POOLSCOPE_BLOCKPOOL_H
#define POOLSCOPE_BLOCKPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "error.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- streams and formats ------------------------------------------------ */

typedef enum {
    KVB_STREAM_K  = 0,
    KVB_STREAM_V  = 1,
    KVB_STREAM_KV = 2,   /* the single stream when separate_kv is off */
} kvb_stream_t;

/* "k", "v", "kv"; "?" for anything else. */
const char *kvb_stream_name(kvb_stream_t s);

/* Compression-format tags recorded on each block.  Storage slots are sized
 * for the widest (f32), so a block can change format with no reallocation. */
typedef enum {
    KVB_FMT_F32 = 0,
    KVB_FMT_F16,
    KVB_FMT_BF16,
    KVB_FMT_INT8,
    KVB_FMT_INT4,
    KVB_FMT_INT2,
    KVB_FMT_INT1,
    KVB_FMT_COUNT
} kvb_format_t;

int         kvb_format_bits(kvb_format_t f);        /* 32,16,16,8,4,2,1; PSC_EINVAL otherwise */
const char *kvb_format_name(kvb_format_t f);        /* "f32".."int1"; "?" otherwise */
int         kvb_format_parse(const char *name);     /* the enum value, or PSC_EINVAL */

/* ---- configuration -------------------------------------------------------- */

/* Allocator for the pool's own bookkeeping (block records, owner table,
 * history, storage chunk list, cache tables).  alloc == NULL means malloc/free.
 * Block *storage* never goes through it: that is mmap. */
typedef struct {
    void *(*alloc)(void *ctx, size_t size);
    void  (*free)(void *ctx, void *p);
    void   *ctx;
} kvb_alloc_t;

typedef enum {
    KVB_EV_CREATE = 0,      /* config                                          */
    KVB_EV_ALLOCATE,        /* stream, owner, format, n_tokens, ids[n_ids]     */
    KVB_EV_TOKENS,          /* block, n_used                                   */
    KVB_EV_FREE,            /* ids[n_ids] (blocks actually freed; a large free
                               is reported as several FREE events)             */
    KVB_EV_GROW,            /* stream, ids block .. block+n_ids-1 added        */
    KVB_EV_SHRINK,          /* stream, ids[n_ids] retired (may be several)     */
    KVB_EV_EXHAUSTED,       /* stream, owner, n_tokens                         */
    KVB_EV_OWNER_REGISTER,  /* owner                                           */
    KVB_EV_OWNER_RELEASE,   /* owner                                           */
} kvb_event_kind_t;

struct kvb_config;

/* One event.  Fields not listed for a kind are zero (owner -1).  Pointers are
 * valid only during the callback. */
typedef struct {
    kvb_event_kind_t kind;
    uint64_t         seq;        /* per pool, 0 for CREATE, +1 per event */
    kvb_stream_t     stream;
    kvb_format_t     format;
    int64_t          owner;
    int64_t          n_tokens;
    int32_t          block;      /* TOKENS: the block; GROW: first new id */
    int32_t          n_used;     /* TOKENS */
    const int32_t   *ids;        /* ALLOCATE, FREE, SHRINK */
    int32_t          n_ids;      /* ALLOCATE, FREE, SHRINK, GROW */
    const struct kvb_config *config; /* CREATE */
} kvb_event_t;

/* The observer runs under the pool's lock, in the order the pool saw the
 * events.  It must not call back into the pool (the lock is not recursive). */
typedef void (*kvb_observe_fn)(void *ctx, const kvb_event_t *ev);

typedef struct kvb_config {
    int32_t block_size;          /* token slots per block; default 16            */
    int32_t n_blocks;            /* initial blocks, whole pool; default 1024     */
    bool    separate_kv;         /* K and V on separate free lists; default on   */
    bool    grow_on_exhaustion;  /* grow instead of failing; default off         */
    int32_t max_blocks;          /* cap on the whole pool once grown; 0 = none   */
    size_t  row_elems;           /* elements per token row; 0 = no storage       */
    kvb_alloc_t    alloc;        /* meta allocator; {0} = malloc                 */
    kvb_observe_fn observe;      /* NULL = off                                   */
    void          *observe_ctx;
} kvb_config_t;

kvb_config_t kvb_config_default(void);

/* ---- the pool --------------------------------------------------------------- */

typedef struct kvb_pool kvb_pool_t;

/* NULL on failure with *err (may be NULL) set: PSC_EINVAL for block_size < 1,
 * n_blocks < 1, max_blocks != 0 && max_blocks < n_blocks, max_blocks < 0, or
 * a storage size that overflows; PSC_ENOMEM if memory or mmap fails. */
kvb_pool_t *kvb_create(const kvb_config_t *cfg, int *err);
void        kvb_destroy(kvb_pool_t *pool);   /* NULL ok; frees even live blocks */

/* Check out ceil(n_tokens / block_size) blocks to owner, all or nothing.
 * The ids go to ids[0..count) (cap must be >= count, else PSC_ERANGE) and the
 * count is returned.  n_used is filled (16,16,8 for 40 tokens at 16).
 * Errors: PSC_EINVAL (n_tokens <= 0, owner < 0, bad stream/format),
 * PSC_EEXHAUSTED (not enough free blocks and no growth allowed/possible),
 * PSC_ENOMEM.  A repeated allocate for an active owner is the same request
 * growing: never an error.  An unseen owner is registered. */
int kvb_allocate(kvb_pool_t *pool, kvb_stream_t stream, int64_t n_tokens,
                 int64_t owner, kvb_format_t format, int32_t *ids, int32_t cap);

/* Return blocks; already free (or retired) blocks are skipped.  Returns the
 * number actually freed; PSC_EINVAL (nothing freed) if any id was never part
 * of the pool. */
int kvb_free(kvb_pool_t *pool, const int32_t *ids, int32_t n);

/* Free every block of owner and release it.  Returns the number freed. */
int kvb_free_all(kvb_pool_t *pool, int64_t owner);

/* Set the token count of a checked-out block (0..block_size).  PSC_EINVAL for
 * a free block or a bad count, PSC_ENOENT for an id not in the pool. */
int kvb_set_used(kvb_pool_t *pool, int32_t id, int32_t n_used);

/* Copies the owner's block ids in allocation order into ids[0..min(cap,n));
 * returns n (snprintf-style), 0 for an unknown owner. */
int kvb_blocks_for(kvb_pool_t *pool, int64_t owner, int32_t *ids, int32_t cap);

int kvb_n_free(kvb_pool_t *pool, kvb_stream_t stream);   /* or PSC_EINVAL */

int kvb_register_owner(kvb_pool_t *pool, int64_t owner); /* PSC_EOWNER if active */
int kvb_release_owner(kvb_pool_t *pool, int64_t owner);  /* no-op if inactive */

/* Retire free blocks of stream (coldest first: the bottom of the LIFO list)
 * until target_free remain; live blocks are never touched.  Returns how many
 * were retired (PSC_EINVAL if target_free < 0).  Retired ids are never reused
 * and their storage pages are given back. */
int kvb_shrink(kvb_pool_t *pool, kvb_stream_t stream, int32_t target_free);

typedef struct {
    int32_t      id;
    kvb_stream_t stream;
    kvb_format_t format;
    int32_t      n_used;
    int64_t      owner;          /* -1 when free */
    bool         ever_allocated;
} kvb_block_t;

/* PSC_ENOENT for an id never in the pool or retired. */
int kvb_block_get(kvb_pool_t *pool, int32_t id, kvb_block_t *out);

int32_t kvb_block_size(const kvb_pool_t *pool);   /* immutable: no lock */

/* The pool's meta allocator, for components built on the pool (the KV cache,
 * an engine's paged KV) so their bookkeeping is counted the same way. */
const kvb_alloc_t *kvb_pool_allocator(const kvb_pool_t *pool);

/* Invariant walker: free lists, owner lists, counters, resident flags.
 * 0 or PSC_ECORRUPT. */
int kvb_check(kvb_pool_t *pool);

/* ---- stats ------------------------------------------------------------------ */

typedef struct {
    int64_t n_blocks;            /* blocks currently managed (grown - retired) */
    int64_t n_allocations;       /* blocks handed out, cumulative              */
    int64_t n_frees;             /* blocks returned, cumulative                */
    int64_t n_reused;            /* handed out blocks that had been out before */
    int64_t n_exhausted;         /* allocate attempts failed for lack of room  */
    int64_t n_grown;             /* blocks added by growth                     */
    int64_t n_retired;           /* blocks removed by shrink                   */
    int64_t peak_blocks_in_use;
    int64_t blocks_in_use;       /* n_allocations - n_frees                    */
    int64_t blocks_partial;      /* in use and not full                        */
    double  fragmentation;       /* blocks_partial / n_blocks                  */
} kvb_stats_t;

int kvb_stats(kvb_pool_t *pool, kvb_stats_t *out);

#define KVB_HISTORY_LEN 256
/* Copies the most recent min(cap, stored) snapshots, oldest first; returns
 * the number copied.  At most KVB_HISTORY_LEN are kept. */
int kvb_history(kvb_pool_t *pool, kvb_stats_t *out, int cap);

#define KVB_PROM_PREFIX "poolscope_block_pool"
/* Prometheus text exposition of a snapshot into buf (snprintf-style: always
 * NUL-terminated when cap > 0, returns the length the full text needs).
 * prefix NULL = KVB_PROM_PREFIX; PSC_EINVAL for a prefix that is not a valid
 * metric name.  Gauges: blocks_in_use, blocks_managed (once
 * "blocks_total": renamed because Prometheus reserves _total for counters and
 * promtool rejects it on a gauge), fragmentation, peak_blocks_in_use.
 * Counters: allocations_total, frees_total, reused_total, exhausted_total,
 * grown_total, retired_total. */
int kvb_stats_prometheus(const kvb_stats_t *s, const char *prefix,
                         char *buf, size_t cap);

/* ---- block storage (cfg.row_elems > 0) --------------------------------------- */

/* Bytes of one token row in a format: ceil(row_elems * bits / 8).  Rows of a
 * block are packed at this stride from the start of its slot. 0 if no storage. */
size_t kvb_row_bytes(const kvb_pool_t *pool, kvb_format_t f);
/* Bytes reserved per block: block_size rows of f32, rounded up to a page so a
 * block's pages can be given back on their own. 0 if no storage. */
size_t kvb_slot_bytes(const kvb_pool_t *pool);

/* Copy n_rows rows (at the block's format stride) into a checked-out block at
 * token offset; extends n_used to offset + n_rows if that is larger.
 * PSC_ERANGE past block_size, PSC_EINVAL for a free block or no storage,
 * PSC_ENOENT for an unknown/retired id.  Never allocates. */
int kvb_write(kvb_pool_t *pool, int32_t id, int32_t offset,
              const void *rows, int32_t n_rows);

/* The used slice: *rows = slot start, *n_rows = n_used. */
int kvb_read(kvb_pool_t *pool, int32_t id, const void **rows, int32_t *n_rows);

/* Direct slot pointer for engines that write/read in place (stable for the
 * life of the pool; NULL for an unknown/retired id or no storage).  Taking it
 * counts as a write for resident_bytes. */
void *kvb_slot(kvb_pool_t *pool, int32_t id);

/* slot_bytes times the number of blocks written since their last release. */
int64_t kvb_resident_bytes(kvb_pool_t *pool);

/* Give a free block's pages back to the OS (MADV_DONTNEED); its contents
 * read as zero afterwards.  PSC_EBUSY for a checked-out block. */
int kvb_release(kvb_pool_t *pool, int32_t id);

/* Number of storage mappings (one at creation, one per growth step). */
int kvb_storage_mappings(kvb_pool_t *pool);

/* ---- KV cache on the pool (pool/kvcache.c) -------------------------------- */

typedef struct kvb_cache kvb_cache_t;

/* A cache for one owner.  Registers the owner (PSC_EOWNER if it is active).
 * Its block tables use the pool's meta allocator.  Destroy caches before the
 * pool. */
kvb_cache_t *kvb_cache_create(kvb_pool_t *pool, int64_t owner,
                              kvb_format_t format, int *err);
void kvb_cache_destroy(kvb_cache_t *c);   /* NULL ok; frees the owner's blocks */

/* Append n_rows token rows to K and V (rows at kvb_row_bytes stride).  Both
 * NULL = accounting only (also the only choice without storage).  Takes a new
 * block per stream only when the last one is full.  On failure nothing is
 * appended (blocks taken for K are given back if V cannot be had). */
int kvb_cache_append(kvb_cache_t *c, const void *k_rows, const void *v_rows,
                     int32_t n_rows);

/* Free every block of the owner at once; the cache is empty afterwards and
 * may be appended to again.  Returns the number of blocks freed. */
int kvb_cache_release(kvb_cache_t *c);

int64_t kvb_cache_len(const kvb_cache_t *c);        /* tokens */
int32_t kvb_cache_n_blocks(const kvb_cache_t *c);   /* per stream */
/* Block table of stream K or V: ids and slot pointers, n_blocks entries,
 * in token order (token t lives in block t / block_size, row t % block_size).
 * Valid until the next append/release.  NULL for another stream. */
const int32_t *kvb_cache_blocks(const kvb_cache_t *c, kvb_stream_t s);
void *const   *kvb_cache_slots(const kvb_cache_t *c, kvb_stream_t s);
/* Row of token t in stream s (NULL out of range or no storage). */
const void *kvb_cache_row(const kvb_cache_t *c, kvb_stream_t s, int64_t t);

#ifdef __cplusplus
}
#endif

#endif
