/* alloc.h — where the engine's transient tensors come from (re_alloc_).
 *
 * Three interchangeable modes behind one interface:
 *
 *   pool    the project's buffer pool (include/poolscope/bufpool.h), observed by the trace
 *           adapter so its internals (hits, misses, backing allocations)
 *           appear in a trace;
 *   malloc  plain malloc/free per tensor;
 *   arena   a bump arena, reset by re_alloc_reset() after each forward.
 *
 * Every mode emits the same logical events for the same forward: one
 * ps_tensor_acquire(id, arm 0, f32, n, 4n) per acquire and one
 * ps_tensor_release(id) per release, ids counting up from 1 per allocator.
 * So a trace of one mode can be replayed against the others.
 */
#ifndef RE_ALLOC_H
#define RE_ALLOC_H

#include <stddef.h>
#include <stdint.h>

#include "poolscope/bufpool.h"

typedef enum re_alloc_mode {
    RE_ALLOC_POOL = 0,
    RE_ALLOC_MALLOC,
    RE_ALLOC_ARENA,
} re_alloc_mode_t;

/* "pool", "malloc", "arena"; parse returns the mode or PSC_EINVAL. */
const char *re_alloc_mode_name(re_alloc_mode_t m);
int re_alloc_mode_parse(const char *s);

typedef struct re_alloc re_alloc_t;

/* One transient f32 tensor. Zero-initialised = empty (release is a no-op). */
typedef struct re_tensor {
    float *data;      /* n floats, 64-byte aligned in pool and arena modes */
    size_t n;         /* requested elements */
    uint64_t id;      /* logical id (the trace's tensor id); 0 = empty */
    void *h;          /* mode handle: bp_buf_t* in pool mode, else the block */
} re_tensor_t;

#define RE_POOL_CAP_DEFAULT ((size_t)-1)

typedef struct re_alloc_config {
    re_alloc_mode_t mode;
    size_t pool_cap;           /* pool: max cached bytes, taken literally (0 caches
                                  nothing); RE_POOL_CAP_DEFAULT = the pool's default */
    bp_allocator_t backing;    /* pool: injected backing allocator ({0} = default) */
} re_alloc_config_t;

typedef struct re_alloc_stats {
    uint64_t acquires, releases;
    size_t live_bytes, peak_live_bytes;    /* requested bytes, all modes */
    size_t arena_capacity;                 /* arena: bytes held in chunks */
    uint64_t arena_chunks_allocated;       /* arena: chunk mallocs so far */
    uint64_t resets;
} re_alloc_stats_t;

re_alloc_t *re_alloc_create(const re_alloc_config_t *cfg, int *err);
/* NULL ok. Returns 0, or PSC_EBUSY if tensors are still held (they leak). */
int re_alloc_destroy(re_alloc_t *a);

/* Acquire n floats (n >= 1). 0 or PSC_ENOMEM / PSC_EINVAL; *t is set to empty
 * on failure. Contents are undefined. */
int re_tensor_acquire(re_alloc_t *a, size_t n, re_tensor_t *t);
/* Release (last reference); empty tensors are ignored. *t becomes empty. */
void re_tensor_release(re_alloc_t *a, re_tensor_t *t);

/* End of a forward: the arena rewinds (every tensor must be released;
 * PSC_EBUSY otherwise); other modes only check. */
int re_alloc_reset(re_alloc_t *a);

void re_alloc_stats(const re_alloc_t *a, re_alloc_stats_t *out);
/* The buffer pool in pool mode, else NULL. */
bp_pool_t *re_alloc_pool(const re_alloc_t *a);

#endif
