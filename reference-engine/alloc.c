/* alloc.c — the engine's transient-tensor layer: pool | malloc | arena.
 *
 * The logical events (ps_tensor_acquire/release) are emitted here, once, for
 * every mode; only the pool mode adds pool internals, through the trace
 * adapter's observer installed in the pool's config. The arena follows the
 * replay tool's model: 64-byte aligned bumps in chunks that double from
 * 1 MiB; at a reset that finds more than one chunk the chunks are merged
 * into one of their total size, so after warm-up a forward touches no
 * allocator.
 */
#include "alloc.h"

#include <stdlib.h>
#include <string.h>

#include "poolscope/pool_adapter.h"
#include "poolscope/poolscope.h"
#include "poolscope/error.h"

#define RE_ARENA_FIRST ((size_t)1 << 20)
#define RE_ARENA_ALIGN 64u

typedef struct re_chunk {
    struct re_chunk *next;
    size_t cap, used;      /* bytes after the header */
    unsigned char *base;   /* aligned start */
} re_chunk_t;

struct re_alloc {
    re_alloc_mode_t mode;
    bp_pool_t *pool;
    bp_config_t pool_cfg;     /* as given to bp_create (adapter state inside) */
    re_chunk_t *chunks;       /* arena: newest first */
    size_t arena_outstanding; /* arena: tensors not yet released */
    uint64_t next_id;
    re_alloc_stats_t st;
};

const char *re_alloc_mode_name(re_alloc_mode_t m)
{
    switch (m) {
    case RE_ALLOC_POOL: return "pool";
    case RE_ALLOC_MALLOC: return "malloc";
    case RE_ALLOC_ARENA: return "arena";
    }
    return "?";
}

int re_alloc_mode_parse(const char *s)
{
    if (!strcmp(s, "pool")) return RE_ALLOC_POOL;
    if (!strcmp(s, "malloc")) return RE_ALLOC_MALLOC;
    if (!strcmp(s, "arena")) return RE_ALLOC_ARENA;
    return PSC_EINVAL;
}

static re_chunk_t *re_chunk_new(size_t cap)
{
    re_chunk_t *c = malloc(sizeof *c + cap + RE_ARENA_ALIGN);
    if (!c) return NULL;
    uintptr_t p = (uintptr_t)(c + 1);
    p = (p + RE_ARENA_ALIGN - 1) & ~(uintptr_t)(RE_ARENA_ALIGN - 1);
    c->base = (unsigned char *)p;
    c->cap = cap;
    c->used = 0;
    c->next = NULL;
    return c;
}

re_alloc_t *re_alloc_create(const re_alloc_config_t *cfg, int *err)
{
    if (!cfg || (cfg->mode != RE_ALLOC_POOL && cfg->mode != RE_ALLOC_MALLOC &&
                 cfg->mode != RE_ALLOC_ARENA)) {
        if (err) *err = PSC_EINVAL;
        return NULL;
    }
    re_alloc_t *a = calloc(1, sizeof *a);
    if (!a) {
        if (err) *err = PSC_ENOMEM;
        return NULL;
    }
    a->mode = cfg->mode;
    a->next_id = 1;
    if (a->mode == RE_ALLOC_POOL) {
        bp_config_t c = bp_config_default();
        c.name = "refengine.transient";
        if (cfg->pool_cap != RE_POOL_CAP_DEFAULT) c.max_cached_bytes = cfg->pool_cap;
        c.backing = cfg->backing;
        a->pool_cfg = psa_bufpool_config(&c);
        int e = 0;
        a->pool = bp_create(&a->pool_cfg, &e);
        if (!a->pool) {
            psa_bufpool_destroyed(&a->pool_cfg);
            free(a);
            if (err) *err = e ? e : PSC_ENOMEM;
            return NULL;
        }
    }
    return a;
}

int re_alloc_destroy(re_alloc_t *a)
{
    if (!a) return 0;
    int rc = 0;
    if (a->mode == RE_ALLOC_POOL) {
        rc = bp_destroy(a->pool);
        psa_bufpool_destroyed(&a->pool_cfg);
    }
    if (a->arena_outstanding) rc = PSC_EBUSY;
    for (re_chunk_t *c = a->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(a);
    return rc;
}

static void *re_arena_bump(re_alloc_t *a, size_t bytes)
{
    bytes = (bytes + RE_ARENA_ALIGN - 1) & ~(size_t)(RE_ARENA_ALIGN - 1);
    re_chunk_t *c = a->chunks;
    if (!c || c->cap - c->used < bytes) {
        size_t cap = c ? c->cap * 2 : RE_ARENA_FIRST;
        while (cap < bytes) cap *= 2;
        re_chunk_t *n = re_chunk_new(cap);
        if (!n) return NULL;
        n->next = c;
        a->chunks = c = n;
        a->st.arena_capacity += cap;
        a->st.arena_chunks_allocated++;
    }
    void *p = c->base + c->used;
    c->used += bytes;
    return p;
}

int re_tensor_acquire(re_alloc_t *a, size_t n, re_tensor_t *t)
{
    memset(t, 0, sizeof *t);
    if (!a || n == 0 || n > ((size_t)1 << 40)) return PSC_EINVAL;
    size_t bytes = n * sizeof(float);
    switch (a->mode) {
    case RE_ALLOC_POOL: {
        int e = 0;
        bp_buf_t *b = bp_acquire(a->pool, n, &e);
        if (!b) return e ? e : PSC_ENOMEM;
        t->h = b;
        t->data = bp_f32(b);
        break;
    }
    case RE_ALLOC_MALLOC:
        t->data = malloc(bytes);
        if (!t->data) return PSC_ENOMEM;
        t->h = t->data;
        break;
    case RE_ALLOC_ARENA:
        t->data = re_arena_bump(a, bytes);
        if (!t->data) return PSC_ENOMEM;
        a->arena_outstanding++;
        break;
    }
    t->n = n;
    t->id = a->next_id++;
    a->st.acquires++;
    a->st.live_bytes += bytes;
    if (a->st.live_bytes > a->st.peak_live_bytes) a->st.peak_live_bytes = a->st.live_bytes;
    ps_tensor_acquire(t->id, BP_ARM_F32, BP_DT_F32, n, bytes);
    return 0;
}

void re_tensor_release(re_alloc_t *a, re_tensor_t *t)
{
    if (!a || !t || !t->id) return;
    ps_tensor_release(t->id);
    switch (a->mode) {
    case RE_ALLOC_POOL: bp_release((bp_buf_t *)t->h); break;
    case RE_ALLOC_MALLOC: free(t->h); break;
    case RE_ALLOC_ARENA: a->arena_outstanding--; break;
    }
    a->st.releases++;
    a->st.live_bytes -= t->n * sizeof(float);
    memset(t, 0, sizeof *t);
}

int re_alloc_reset(re_alloc_t *a)
{
    if (!a) return PSC_EINVAL;
    a->st.resets++;
    if (a->mode != RE_ALLOC_ARENA) return a->st.live_bytes ? PSC_EBUSY : 0;
    if (a->arena_outstanding) return PSC_EBUSY;
    re_chunk_t *c = a->chunks;
    if (c && c->next) {   /* merge: one chunk of the total size */
        size_t total = 0;
        for (re_chunk_t *k = c, *n; k; k = n) {
            n = k->next;
            total += k->cap;
            free(k);
        }
        a->chunks = re_chunk_new(total);
        a->st.arena_capacity = a->chunks ? total : 0;
        if (a->chunks) a->st.arena_chunks_allocated++;
        return a->chunks ? 0 : PSC_ENOMEM;
    }
    if (c) c->used = 0;
    return 0;
}

bp_pool_t *re_alloc_pool(const re_alloc_t *a) { return a ? a->pool : NULL; }

void re_alloc_stats(const re_alloc_t *a, re_alloc_stats_t *out)
{
    *out = a->st;
}
