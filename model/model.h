/* model.h — what a trace's events mean: the one model of the traced
 * process's memory (prefix pm_).
 *
 * Every output of poolscope (report, plot, sql, export, diff, gate through
 * analyzer/scan.c; replay through replay/stream.c) reads the events through
 * this model, so two outputs cannot read one event two ways. The model
 * turns each event into a short list of operations (pm_op_t) and keeps the
 * state that needs memory between events:
 *
 *   heap      no state: the malloc family as allocations and frees
 *             (realloc = free old + allocate new; a failed call changes
 *             nothing; calloc/reallocarray sizes multiplied with overflow
 *             checks, an overflowing product is a failed call)
 *   tensors   no state: TENSOR_ACQUIRE / TENSOR_RELEASE as objects
 *   mappings  start -> length, anonymous or file-backed (with the file's
 *             name when the trace has it), reserved (PROT_NONE) or
 *             committed; totals and peaks
 *   pools     per pool: cap, acquires, hits, requested and granted bytes,
 *             how many acquires a buffer more than twice the request served,
 *             outstanding and cached bytes and their peaks
 *   KV        per block (pool, id): owner, stream, tokens held. The pool
 *             fills a block at allocation (the ALLOC's n_tokens spread over
 *             its ids in order, block_size each, the last one partial; a
 *             list split over several events carries n_tokens on its first
 *             piece, the rest carries over); TOKENS events change a count;
 *             a freed block holds nothing. Per pool: blocks and tokens held.
 *             Per request (owner): tokens stored (K/KV streams; V blocks
 *             duplicate K's), blocks held, prompt + max tokens from the
 *             "request" marker's payload
 *   markers   per name: how many scopes are open (nesting and overlap)
 *   RSS       the latest sample and the peak
 *
 * Peaks are taken only while counting is on (pm_set_counting: a report's
 * --phase or --from/--to window); the state is always exact.
 *
 *   pm_model_t *m = pm_create(&err);
 *   pm_step_t st;
 *   while (pst_next(r, &ev) > 0) {
 *       pm_event(m, &ev, &st);
 *       for (size_t i = 0; i < st.n_ops; i++) use(&st.ops[i]);
 *   }
 *   pm_destroy(m);
 *
 * Memory is bounded by live mappings, KV blocks, KV requests and marker
 * names, never by the length of the trace. Ids read from a trace size
 * nothing: tables are hashed. Errors follow include/poolscope/error.h.
 */
#ifndef POOLSCOPE_MODEL_H
#define POOLSCOPE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "poolscope/reader.h"

/* The hooked functions, in the order of the report's `calls` object. */
enum {
    PM_F_MALLOC, PM_F_CALLOC, PM_F_REALLOC, PM_F_REALLOCARRAY, PM_F_FREE,
    PM_F_POSIX_MEMALIGN, PM_F_ALIGNED_ALLOC, PM_F_MEMALIGN, PM_F_VALLOC, PM_F_PVALLOC,
    PM_F_MMAP, PM_F_MUNMAP, PM_F_MREMAP, PM_F_COUNT
};
extern const char *const pm_func_names[PM_F_COUNT];

typedef enum pm_kind {
    PM_HEAP_ALLOC = 1,   /* key = address, bytes = requested, stack */
    PM_HEAP_FREE,        /* key = address */
    PM_HEAP_FAILED,      /* an allocating call that returned nothing */
    PM_TENSOR_ALLOC,     /* key = tensor id, bytes, n = elements, arm, dtype, stack */
    PM_TENSOR_FREE,      /* key = tensor id */
    PM_POOL_ACQUIRE,     /* pool, key = buffer key, req, bytes = granted, flags PM_F_HIT */
    PM_POOL_RECLAIM,     /* pool, key = buffer key, bytes = granted, flags PM_F_CACHED */
    PM_POOL_BACKING,     /* pool, flags PM_F_FREED for a backing free */
    PM_KV_CONFIG,        /* the first KV pool: n = block size (tokens), bytes = bytes per block */
    PM_KV_BLOCK_ALLOC,   /* pool, key = block key, n = tokens, owner (request slot), stack,
                            flags PM_F_COUNTS (a K or KV block), bytes = bytes per block,
                            req = tokens per block */
    PM_KV_BLOCK_FREE,    /* pool, key = block key, n = tokens it held, owner, flags as above */
    PM_KV_REQUEST,       /* owner (request slot): n = tokens stored, bytes = prompt + max
                            (0 unknown), flags PM_F_RESIDENT while it holds blocks; emitted when
                            its state changed or a marker of it came */
    PM_MARK,             /* a marker: flags PM_F_BEGIN / PM_F_END / neither (a point),
                            n = scopes of this name open after it, req = before it (an END
                            with req 0 closed nothing), key = instance */
    PM_MAP_ADD,          /* a mapping: key = start, n = length, bytes = committed (0 when mapped
                            PROT_NONE: a reservation; what mprotect commits in it later is in
                            the totals, not here), stack (of the call that mapped it), flags
                            PM_F_FILE (file-backed), PM_F_REST (what a munmap of its start left of
                            a mapping, or an mremap's new place: no call of its own, the stack of
                            the call that first mapped it) */
    PM_MAP_DEL,          /* key = start, n = length, stack, flags PM_F_FILE: the mapping is gone
                            (a munmap of its start, an mremap, a mapping put over it) */
} pm_kind_t;

#define PM_F_HIT      1u
#define PM_F_CACHED   1u
#define PM_F_FREED    1u
#define PM_F_COUNTS   1u
#define PM_F_RESIDENT 2u
#define PM_F_BEGIN    1u
#define PM_F_END      2u
#define PM_F_FILE     1u
#define PM_F_REST     2u

typedef struct pm_op {
    uint8_t  kind;       /* pm_kind_t */
    uint8_t  flags;
    uint8_t  arm, dtype;
    uint32_t stack;
    uint32_t owner;      /* KV request slot (dense, recycled once the request is over) */
    uint32_t pool;       /* pool and KV ops: index into pm_pools() */
    uint64_t key;
    uint64_t bytes;
    uint64_t req;
    uint64_t n;
} pm_op_t;

/* What one event did. ops are valid until the next pm_event. */
typedef struct pm_step {
    int call;            /* PM_F_* of a hooked call, -1 for any other event */
    uint64_t call_bytes; /* the bytes the call asked for (0 for frees, mappings, overflow) */
    unsigned moved;      /* PM_MOVED_*: which gauges changed */
    size_t n_ops;
    const pm_op_t *ops;
} pm_step_t;

#define PM_MOVED_HEAP 1u
#define PM_MOVED_MAP  2u
#define PM_MOVED_POOL 4u
#define PM_MOVED_KV   8u
#define PM_MOVED_RSS  16u

/* A buffer pool or a KV block pool, as the events describe it. */
typedef struct pm_pool {
    uint64_t id;
    char name[64];
    int kv;                       /* 1: a KV block pool */
    /* buffer pool */
    uint64_t cap;                 /* cap on cached bytes (POOL_CREATE) */
    uint64_t acquires, hits;      /* while counting */
    uint64_t req_bytes, granted_bytes;   /* summed over the acquires counted */
    uint64_t oversized;           /* acquires counted whose buffer is > 2x the request */
    uint64_t outstanding, cached, peak_out, peak_cached;
    /* KV pool */
    uint64_t block_size, n_blocks, block_bytes;
    uint64_t blocks, tokens;      /* held now (all streams) */
} pm_pool_t;

/* Mapped memory: anonymous / file-backed, and of the anonymous memory what
 * is only reserved (mapped PROT_NONE, not yet made accessible). */
typedef struct pm_maps {
    uint64_t anon, file, reserved;             /* now */
    uint64_t peak_anon, peak_file, peak_total, peak_reserved, peak_committed;
    uint64_t arena, peak_arena;                /* an allocator's reserve (PST_PYMALLOC_ARENA_NAME):
                                                  its objects are heap events, so it is in no
                                                  figure above */
    uint64_t n_live;                           /* mappings now */
} pm_maps_t;

typedef struct pm_model pm_model_t;

pm_model_t *pm_create(int *err);
void pm_destroy(pm_model_t *m);                     /* accepts NULL */

/* Take one event (in the reader's order). 0, or PSC_ENOMEM (the event is
 * then partly applied; the model stays usable). */
int pm_event(pm_model_t *m, const pst_event_t *ev, pm_step_t *st);

/* Peaks count only while on (default on). Turning it on takes what is held
 * then as a candidate peak. */
void pm_set_counting(pm_model_t *m, int on);

const pm_pool_t *pm_pools(const pm_model_t *m, size_t *n);
const pm_maps_t *pm_maps(const pm_model_t *m);
/* Bytes the buffer pools have out (granted) and cached now. */
void pm_pool_totals(const pm_model_t *m, uint64_t *outstanding, uint64_t *cached);
/* KV totals over every KV pool: blocks and tokens held now, and the
 * capacity of those blocks in tokens. */
void pm_kv_totals(const pm_model_t *m, uint64_t *blocks, uint64_t *tokens, uint64_t *capacity);
/* The tokens block `block` of KV pool `pool_id` holds now: 1 with *n_used
 * while the block is held, 0 otherwise. */
int pm_kv_used(const pm_model_t *m, uint64_t pool_id, uint64_t block, uint32_t *n_used);
/* KV events of pools the trace never created (ignored: no block size). */
uint64_t pm_kv_orphans(const pm_model_t *m);
/* RSS: latest sample, peak while counting (and its time), samples seen. */
void pm_rss(const pm_model_t *m, uint64_t *now, uint64_t *peak, uint64_t *peak_t, uint64_t *samples);
/* The named file mappings live now or seen (up to cap), largest first:
 * name string ids and bytes at their peak. */
typedef struct pm_file_map { uint32_t name; uint64_t bytes, peak; } pm_file_map_t;
size_t pm_file_maps(const pm_model_t *m, pm_file_map_t *out, size_t cap);

#endif
