/* stream.c — a trace's events as a request stream for the policies.
 *
 * Objects. The tensor stream takes TENSOR_ACQUIRE / TENSOR_RELEASE (keyed by
 * tensor id); the heap stream takes the malloc family (keyed by address;
 * realloc = free + allocate, a failed call changes nothing). Each live
 * object gets a dense slot (recycled), so policies keep per-object state in
 * flat arrays indexed by slot instead of hashing again.
 *
 * Resets. The end of each outermost scope of the reset marker (nesting
 * counted over begin/end of that name) becomes one RQ_RESET.
 *
 * KV. KVB events keep a table block -> (request, tokens in it) and a table of
 * KV requests (tokens stored, blocks held, prompt + max tokens from the
 * "request" marker's payload). Every change of a request's tokens or of
 * whether it holds blocks becomes one RQ_KV carrying the new state. With
 * kv_objects, each KV block is also an object (RQ_F_KV) the size of a block,
 * for the arena's --with-kv.
 *
 * Memory: the live objects, the live KV blocks and the live KV requests.
 */
#include <stdlib.h>
#include <string.h>

#include "poolscope/blockpool.h"
#include "rp_internal.h"

#define RP_KV_KEY(pool, id) ((1ull << 63) | ((uint64_t)(pool) << 32) | (uint32_t)(id))
#define RP_MAX_KV_POOLS 16

typedef struct rp_kvblock {
    uint32_t owner;       /* KV request slot */
    uint32_t n_used;      /* tokens in it */
    uint8_t  counts;      /* K or KV stream: its tokens count (V duplicates K) */
} rp_kvblock_t;

typedef struct rp_kvreq {
    uint64_t tokens;      /* stored, K/KV blocks */
    uint64_t blocks;      /* held, all streams */
    uint64_t reserve;     /* prompt + max tokens, 0 unknown */
    uint64_t id;          /* owner / request id */
    uint8_t  has_marker, ended, resident;
} rp_kvreq_t;

typedef struct rp_kvpool {
    uint64_t id;
    uint32_t block_size;
    uint64_t block_bytes;
} rp_kvpool_t;

struct rp_rstream {
    rp_stream_cfg_t cfg;
    rp_map_t objs;            /* key -> object slot */
    rp_slots_t obj_slots;
    uint32_t reset_depth;
    /* KV */
    rp_kvpool_t pools[RP_MAX_KV_POOLS];
    size_t n_pools;
    uint64_t kv_pools_seen;
    rp_map_t blocks;          /* RP_KV_KEY -> index into blk */
    rp_slots_t blk_slots;
    rp_kvblock_t *blk;
    size_t blk_cap;
    rp_map_t owners;          /* owner id -> KV request slot */
    rp_slots_t own_slots;
    rp_kvreq_t *own;
    size_t own_cap;
    /* counts */
    uint64_t allocs, frees, unmatched;
};

rp_rstream_t *rp_stream_create(const rp_stream_cfg_t *cfg, int *err)
{
    rp_rstream_t *s = calloc(1, sizeof *s);
    int rc = PSC_ENOMEM;
    if (!s) goto fail;
    s->cfg = *cfg;
    if ((rc = rp_map_init(&s->objs, 1024)) || (rc = rp_map_init(&s->blocks, 64)) ||
        (rc = rp_map_init(&s->owners, 64)))
        goto fail;
    return s;
fail:
    rp_stream_destroy(s);
    if (err) *err = rc;
    return NULL;
}

void rp_stream_destroy(rp_rstream_t *s)
{
    if (!s) return;
    if (s->objs.cap) rp_map_free(&s->objs);
    if (s->blocks.cap) rp_map_free(&s->blocks);
    if (s->owners.cap) rp_map_free(&s->owners);
    rp_slots_free(&s->obj_slots);
    rp_slots_free(&s->blk_slots);
    rp_slots_free(&s->own_slots);
    free(s->blk);
    free(s->own);
    free(s);
}

void rp_stream_counts(const rp_rstream_t *s, uint64_t *allocs, uint64_t *frees,
                      uint64_t *unmatched, uint64_t *kv_pools)
{
    *allocs = s->allocs;
    *frees = s->frees;
    *unmatched = s->unmatched;
    *kv_pools = s->kv_pools_seen;
}

uint32_t rp_stream_slots(const rp_rstream_t *s) { return s->obj_slots.next; }

/* ---- objects -------------------------------------------------------------- */

static int obj_free(rp_rstream_t *s, uint64_t key, uint64_t t, uint8_t flags, rp_req_t *out,
                    size_t *n)
{
    uint32_t slot = rp_map_del(&s->objs, key);
    if (slot == UINT32_MAX) {
        s->unmatched++;
        return 0;
    }
    rp_req_t *r = &out[(*n)++];
    memset(r, 0, sizeof *r);
    r->op = RQ_FREE;
    r->flags = flags;
    r->slot = slot;
    r->t = t;
    s->frees++;
    return rp_slots_put(&s->obj_slots, slot);
}

static int obj_alloc(rp_rstream_t *s, uint64_t key, uint64_t bytes, uint64_t n_elems,
                     unsigned arm, unsigned dtype, uint32_t stack, uint64_t t, uint8_t flags,
                     rp_req_t *out, size_t *n)
{
    int rc;
    if (rp_map_get(&s->objs, key) != UINT32_MAX) {   /* a free we never saw */
        if ((rc = obj_free(s, key, t, flags, out, n))) return rc;
    }
    uint32_t slot;
    if ((rc = rp_slots_get(&s->obj_slots, &slot))) return rc;
    if ((rc = rp_map_put(&s->objs, key, slot))) {
        rp_slots_put(&s->obj_slots, slot);
        return rc;
    }
    rp_req_t *r = &out[(*n)++];
    r->op = RQ_ALLOC;
    r->arm = (uint8_t)arm;
    r->dtype = (uint8_t)dtype;
    r->flags = flags;
    r->slot = slot;
    r->stack = stack;
    r->pad_ = 0;
    r->bytes = bytes;
    r->n = n_elems;
    r->t = t;
    s->allocs++;
    return 0;
}

/* ---- KV -------------------------------------------------------------------- */

static rp_kvpool_t *kv_pool(rp_rstream_t *s, uint64_t id)
{
    for (size_t i = 0; i < s->n_pools; i++)
        if (s->pools[i].id == id) return &s->pools[i];
    return NULL;
}

/* The KV request of an owner id, created on first sight. */
static int kv_owner(rp_rstream_t *s, uint64_t id, uint32_t *slot)
{
    uint32_t o = rp_map_get(&s->owners, id);
    if (o != UINT32_MAX) {
        *slot = o;
        return 0;
    }
    int rc;
    if ((rc = rp_slots_get(&s->own_slots, &o))) return rc;
    if ((rc = rp_grow((void **)&s->own, &s->own_cap, o, sizeof *s->own))) return rc;
    if ((rc = rp_map_put(&s->owners, id, o))) return rc;
    memset(&s->own[o], 0, sizeof s->own[o]);
    s->own[o].id = id;
    *slot = o;
    return 0;
}

/* Emit the request's state, and forget it once it is over. */
static int kv_emit(rp_rstream_t *s, uint32_t o, uint64_t t, rp_req_t *out, size_t *n)
{
    rp_kvreq_t *q = &s->own[o];
    int resident = q->blocks > 0;
    if (s->cfg.kv_requests && (resident || q->resident)) {
        rp_req_t *r = &out[(*n)++];
        memset(r, 0, sizeof *r);
        r->op = RQ_KV;
        r->flags = resident ? RQ_F_RESIDENT : 0;
        r->slot = o;
        r->n = q->tokens;
        r->bytes = q->reserve;
        r->t = t;
    }
    q->resident = (uint8_t)resident;
    if (!resident && (q->ended || !q->has_marker)) {
        rp_map_del(&s->owners, q->id);
        return rp_slots_put(&s->own_slots, o);
    }
    return 0;
}

static int kv_alloc(rp_rstream_t *s, const pst_event_t *ev, rp_req_t *out, size_t *n)
{
    /* "uuuzuuL" pool id, pool_seq, stream, owner, format, n_tokens, ids */
    rp_kvpool_t *p = kv_pool(s, ev->f[0]);
    if (!p) return 0;                     /* a pool we never saw created */
    int counts = ev->f[2] != KVB_STREAM_V;   /* V blocks duplicate K's tokens */
    uint64_t left = ev->f[5];
    uint32_t o;
    int rc = kv_owner(s, ev->f[3], &o);
    if (rc) return rc;
    for (uint32_t i = 0; i < ev->n_ids; i++) {
        uint64_t key = RP_KV_KEY(p->id, ev->ids[i]);
        uint32_t bi = rp_map_get(&s->blocks, key);
        if (bi != UINT32_MAX) continue;   /* already out: nothing new */
        uint32_t fill = p->block_size;
        if (ev->f[5] > 0) {               /* 0: a later piece of a split list */
            fill = left < p->block_size ? (uint32_t)left : p->block_size;
            left -= fill;
        }
        if ((rc = rp_slots_get(&s->blk_slots, &bi))) return rc;
        if ((rc = rp_grow((void **)&s->blk, &s->blk_cap, bi, sizeof *s->blk))) return rc;
        if ((rc = rp_map_put(&s->blocks, key, bi))) return rc;
        s->blk[bi] = (rp_kvblock_t){ .owner = o, .n_used = fill, .counts = (uint8_t)counts };
        s->own[o].blocks++;
        if (counts) s->own[o].tokens += fill;
        if (s->cfg.kv_objects &&
            (rc = obj_alloc(s, key, p->block_bytes, p->block_size, 1, 0, ev->stack, ev->ts,
                            RQ_F_KV, out, n)))
            return rc;
    }
    return kv_emit(s, o, ev->ts, out, n);
}

static int kv_tokens(rp_rstream_t *s, const pst_event_t *ev, rp_req_t *out, size_t *n)
{
    /* "uuuu" pool id, pool_seq, block id, n_used */
    uint32_t bi = rp_map_get(&s->blocks, RP_KV_KEY(ev->f[0], ev->f[2]));
    if (bi == UINT32_MAX) return 0;
    rp_kvblock_t *b = &s->blk[bi];
    rp_kvreq_t *q = &s->own[b->owner];
    if (b->counts) q->tokens = q->tokens - b->n_used + ev->f[3];
    b->n_used = (uint32_t)ev->f[3];
    return kv_emit(s, b->owner, ev->ts, out, n);
}

static int kv_free(rp_rstream_t *s, const pst_event_t *ev, rp_req_t *out, size_t *n)
{
    /* "uuL" pool id, pool_seq, ids */
    uint32_t cur = UINT32_MAX;
    int rc;
    for (uint32_t i = 0; i < ev->n_ids; i++) {
        uint64_t key = RP_KV_KEY(ev->f[0], ev->ids[i]);
        uint32_t bi = rp_map_del(&s->blocks, key);
        if (bi == UINT32_MAX) continue;
        rp_kvblock_t b = s->blk[bi];
        if ((rc = rp_slots_put(&s->blk_slots, bi))) return rc;
        if (cur != UINT32_MAX && cur != b.owner && (rc = kv_emit(s, cur, ev->ts, out, n)))
            return rc;
        cur = b.owner;
        rp_kvreq_t *q = &s->own[b.owner];
        q->blocks--;
        if (b.counts) q->tokens -= b.n_used;
        if (s->cfg.kv_objects && (rc = obj_free(s, key, ev->ts, RQ_F_KV, out, n))) return rc;
    }
    return cur != UINT32_MAX ? kv_emit(s, cur, ev->ts, out, n) : 0;
}

static int kv_marker(rp_rstream_t *s, const pst_event_t *ev, rp_req_t *out, size_t *n)
{
    uint32_t o;
    int rc;
    if (ev->type == PST_EV_MARK_BEGIN) {
        if ((rc = kv_owner(s, ev->f[1], &o))) return rc;
        rp_kvreq_t *q = &s->own[o];
        q->has_marker = 1;
        q->ended = 0;
        if (ev->n_payload >= 2 && ev->payload[0] >= 0 && ev->payload[1] >= 0)
            q->reserve = (uint64_t)ev->payload[0] + (uint64_t)ev->payload[1];
        /* An engine may take the first blocks just before it opens the scope. */
        return q->blocks ? kv_emit(s, o, ev->ts, out, n) : 0;
    }
    o = rp_map_get(&s->owners, ev->f[1]);
    if (o == UINT32_MAX) return 0;
    s->own[o].ended = 1;
    return kv_emit(s, o, ev->ts, out, n);
}

/* ---- one event ----------------------------------------------------------- */

int rp_stream_event(rp_rstream_t *s, const pst_event_t *ev, rp_req_t *out, size_t *n)
{
    const uint64_t *f = ev->f;
    const int heap = s->cfg.heap;
    switch (ev->type) {
    case PST_EV_TENSOR_ACQUIRE:
        if (heap) return 0;
        return obj_alloc(s, f[0], f[4], f[3], (unsigned)f[1], (unsigned)f[2], ev->stack, ev->ts,
                         0, out, n);
    case PST_EV_TENSOR_RELEASE:
        if (heap) return 0;
        return obj_free(s, f[0], ev->ts, 0, out, n);

    case PST_EV_MALLOC:
    case PST_EV_VALLOC:
    case PST_EV_PVALLOC:
        if (!heap || !f[0]) return 0;
        return obj_alloc(s, f[0], f[1], f[1], 1, 0, ev->stack, ev->ts, 0, out, n);
    case PST_EV_CALLOC:
        if (!heap || !f[0]) return 0;
        return obj_alloc(s, f[0], f[1] * f[2], f[1] * f[2], 1, 0, ev->stack, ev->ts, 0, out, n);
    case PST_EV_POSIX_MEMALIGN:
    case PST_EV_ALIGNED_ALLOC:
    case PST_EV_MEMALIGN:
        if (!heap || !f[0]) return 0;
        return obj_alloc(s, f[0], f[2], f[2], 1, 0, ev->stack, ev->ts, 0, out, n);
    case PST_EV_FREE:
        if (!heap || !f[0]) return 0;
        return obj_free(s, f[0], ev->ts, 0, out, n);
    case PST_EV_REALLOC:
    case PST_EV_REALLOCARRAY: {
        if (!heap) return 0;
        uint64_t old = f[0], ret = f[1];
        uint64_t size = ev->type == PST_EV_REALLOC ? f[2] : f[2] * f[3];
        if (!ret) {                       /* failed (old kept), or realloc(p, 0) = free */
            if (size == 0 && old) return obj_free(s, old, ev->ts, 0, out, n);
            return 0;
        }
        int rc = 0;
        if (old && (rc = obj_free(s, old, ev->ts, 0, out, n))) return rc;
        return obj_alloc(s, ret, size, size, 1, 0, ev->stack, ev->ts, 0, out, n);
    }

    case PST_EV_MARK_BEGIN:
    case PST_EV_MARK_END:
        if (ev->str && !strcmp(ev->str, s->cfg.reset_marker)) {
            if (ev->type == PST_EV_MARK_BEGIN) {
                s->reset_depth++;
            } else if (s->reset_depth > 0 && --s->reset_depth == 0) {
                rp_req_t *r = &out[(*n)++];
                memset(r, 0, sizeof *r);
                r->op = RQ_RESET;
                r->t = ev->ts;
            }
        }
        if (s->cfg.kv_requests && ev->str && !strcmp(ev->str, "request"))
            return kv_marker(s, ev, out, n);
        return 0;

    case PST_EV_KVB_CREATE: {
        /* "uSuuuuuu" pool id, name, block_size, n_blocks, separate_kv, grow, max_blocks, slot bytes */
        s->kv_pools_seen++;
        if (s->n_pools == RP_MAX_KV_POOLS || kv_pool(s, f[0]) || f[2] == 0 || f[2] > UINT32_MAX)
            return 0;
        rp_kvpool_t *p = &s->pools[s->n_pools++];
        p->id = f[0];
        p->block_size = (uint32_t)f[2];
        p->block_bytes = f[7];
        if (s->n_pools == 1) {
            rp_req_t *r = &out[(*n)++];
            memset(r, 0, sizeof *r);
            r->op = RQ_KV_CONFIG;
            r->n = p->block_size;
            r->bytes = p->block_bytes;
            r->t = ev->ts;
        }
        return 0;
    }
    case PST_EV_KVB_ALLOC:
        if (!s->cfg.kv_objects && !s->cfg.kv_requests) return 0;
        return kv_alloc(s, ev, out, n);
    case PST_EV_KVB_TOKENS:
        if (!s->cfg.kv_requests) return 0;
        return kv_tokens(s, ev, out, n);
    case PST_EV_KVB_FREE:
        if (!s->cfg.kv_objects && !s->cfg.kv_requests) return 0;
        return kv_free(s, ev, out, n);
    default:
        return 0;
    }
}
