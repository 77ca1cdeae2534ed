/* pool_adapter.c — bufpool and blockpool observer events to trace events.
 * See pool_adapter.h for the contract.
 *
 * Global state: one atomic counter handing out pool ids. Ids only have to
 * be unique within a process image; a counter is the simplest thing that
 * is, and it is touched once per pool, never per event.
 *
 * The observers run under the pool's lock, so they only fill a ps_event_t on
 * the stack and hand it to the tracer; the tracer stamps it into the calling
 * thread's stream and the pool_seq restores the pool's order across threads.
 */
#include "poolscope/pool_adapter.h"

#include <stdatomic.h>
#include <unistd.h>

#include "poolscope/format.h"
#include "poolscope/poolscope.h"

static _Atomic uint64_t psa_next_id = 1;

static uint64_t psa_new_id(void)
{
    return atomic_fetch_add_explicit(&psa_next_id, 1, memory_order_relaxed);
}

static uint64_t ctx_id(void *ctx) { return (uint64_t)(uintptr_t)ctx; }

/* ---- buffer pool ------------------------------------------------------- */

void psa_bufpool_observe(void *ctx, const bp_event_t *ev)
{
    if (!ps_active() || !ev) return;
    uint64_t id = ctx_id(ctx);
    ps_event_t e = { 0 };
    switch (ev->kind) {
    case BP_EV_ACQUIRE:
        e.type = PS_POOL_ACQUIRE;
        e.n_fields = 9;
        e.f[0] = id; e.f[1] = ev->seq; e.f[2] = (uint64_t)ev->arm; e.f[3] = ev->buf_id;
        e.f[4] = ev->req_len; e.f[5] = ev->granted_len;
        e.f[6] = ev->req_bytes; e.f[7] = ev->granted_bytes; e.f[8] = ev->hit ? 1 : 0;
        break;
    case BP_EV_RECLAIM:
        e.type = PS_POOL_RECLAIM;
        e.n_fields = 6;
        e.f[0] = id; e.f[1] = ev->seq; e.f[2] = (uint64_t)ev->arm; e.f[3] = ev->buf_id;
        e.f[4] = ev->granted_bytes; e.f[5] = ev->cached ? 1 : 0;
        break;
    case BP_EV_BACKING_ALLOC:
    case BP_EV_BACKING_FREE:
        e.type = ev->kind == BP_EV_BACKING_ALLOC ? PS_POOL_BACKING_ALLOC : PS_POOL_BACKING_FREE;
        e.n_fields = 4;
        e.f[0] = id; e.f[1] = ev->seq; e.f[2] = (uint64_t)(uintptr_t)ev->data; e.f[3] = ev->bytes;
        break;
    default:
        return;   /* a kind this build does not know: nothing to say */
    }
    ps__api->emit(&e);
}

bp_config_t psa_bufpool_config(const bp_config_t *cfg)
{
    bp_config_t out = cfg ? *cfg : bp_config_default();
    if (!ps_active()) return out;
    uint64_t id = psa_new_id();
    out.observe = psa_bufpool_observe;
    out.observe_ctx = (void *)(uintptr_t)id;
    ps_event_t e = { .type = PS_POOL_CREATE, .n_fields = 4,
                     .f = { id, 0, (1u << BP_ARM_F32) | (1u << BP_ARM_SLAB), out.max_cached_bytes },
                     .name = out.name ? out.name : "bufpool" };
    ps__api->emit(&e);
    return out;
}

uint64_t psa_bufpool_id(const bp_config_t *cfg)
{
    return cfg && cfg->observe == psa_bufpool_observe ? ctx_id(cfg->observe_ctx) : 0;
}

void psa_bufpool_destroyed(const bp_config_t *cfg)
{
    uint64_t id = psa_bufpool_id(cfg);
    if (!id || !ps_active()) return;
    ps_event_t e = { .type = PS_POOL_DESTROY, .n_fields = 1, .f = { id } };
    ps__api->emit(&e);
}

/* ---- block pool -------------------------------------------------------- */

/* Emit an event whose last field is an id list, in pieces of at most
 * PST_MAX_IDS ids. `tokens_field` >= 0 names a field kept only on the first
 * piece. */
static void emit_with_ids(ps_event_t *e, const int32_t *ids, int32_t n, int tokens_field)
{
    uint32_t left = n > 0 ? (uint32_t)n : 0;
    const uint32_t *p = (const uint32_t *)(const void *)ids;
    do {
        uint32_t k = left > PST_MAX_IDS ? PST_MAX_IDS : left;
        e->ids = p;
        e->n_ids = k;
        ps__api->emit(e);
        p += k;
        left -= k;
        if (tokens_field >= 0) e->f[tokens_field] = 0;
    } while (left > 0);
}

void psa_blockpool_observe(void *ctx, const kvb_event_t *ev)
{
    if (!ps_active() || !ev) return;
    uint64_t id = ctx_id(ctx);
    ps_event_t e = { 0 };
    e.f[0] = id;
    e.f[1] = ev->seq;
    switch (ev->kind) {
    case KVB_EV_CREATE:
        return;   /* emitted by psa_blockpool_config, with the pool's name */
    case KVB_EV_ALLOCATE:   /* "uuuzuuL" */
        e.type = PS_KVB_ALLOC;
        e.n_fields = 7;
        e.f[2] = (uint64_t)ev->stream; e.f[3] = (uint64_t)ev->owner;
        e.f[4] = (uint64_t)ev->format; e.f[5] = (uint64_t)ev->n_tokens;
        emit_with_ids(&e, ev->ids, ev->n_ids, 5);
        return;
    case KVB_EV_TOKENS:     /* "uuuu" */
        e.type = PS_KVB_TOKENS;
        e.n_fields = 4;
        e.f[2] = (uint64_t)ev->block; e.f[3] = (uint64_t)ev->n_used;
        break;
    case KVB_EV_FREE:       /* "uuL" */
        e.type = PS_KVB_FREE;
        e.n_fields = 3;
        emit_with_ids(&e, ev->ids, ev->n_ids, -1);
        return;
    case KVB_EV_GROW:       /* "uuuu" */
        e.type = PS_KVB_GROW;
        e.n_fields = 4;
        e.f[2] = (uint64_t)ev->stream; e.f[3] = (uint64_t)(ev->n_ids > 0 ? ev->n_ids : 0);
        break;
    case KVB_EV_SHRINK:     /* "uuuL" */
        e.type = PS_KVB_SHRINK;
        e.n_fields = 4;
        e.f[2] = (uint64_t)ev->stream;
        emit_with_ids(&e, ev->ids, ev->n_ids, -1);
        return;
    case KVB_EV_EXHAUSTED:  /* "uuuzu" */
        e.type = PS_KVB_EXHAUSTED;
        e.n_fields = 5;
        e.f[2] = (uint64_t)ev->stream; e.f[3] = (uint64_t)ev->owner;
        e.f[4] = (uint64_t)ev->n_tokens;
        break;
    case KVB_EV_OWNER_REGISTER:
    case KVB_EV_OWNER_RELEASE:  /* "uuzu" */
        e.type = PS_KVB_OWNER;
        e.n_fields = 4;
        e.f[2] = (uint64_t)ev->owner;
        e.f[3] = ev->kind == KVB_EV_OWNER_REGISTER ? 1 : 0;
        break;
    default:
        return;
    }
    ps__api->emit(&e);
}

/* Bytes reserved per block, as the block pool computes them: block_size
 * f32 rows, rounded up to a page. 0 without storage. */
static uint64_t slot_bytes(const kvb_config_t *c)
{
    if (c->row_elems == 0 || c->block_size <= 0) return 0;
    uint64_t b = (uint64_t)c->block_size * (uint64_t)c->row_elems * sizeof(float);
    long pg = sysconf(_SC_PAGESIZE);
    uint64_t page = pg > 0 ? (uint64_t)pg : 4096;
    return (b + page - 1) / page * page;
}

kvb_config_t psa_blockpool_config(const kvb_config_t *cfg, const char *name)
{
    kvb_config_t out = cfg ? *cfg : kvb_config_default();
    if (!ps_active()) return out;
    uint64_t id = psa_new_id();
    out.observe = psa_blockpool_observe;
    out.observe_ctx = (void *)(uintptr_t)id;
    /* "uSuuuuuu" pool id, name, block_size, n_blocks, separate_kv, grow, max_blocks, slot bytes */
    ps_event_t e = { .type = PS_KVB_CREATE, .n_fields = 8,
                     .f = { id, 0, (uint64_t)out.block_size, (uint64_t)out.n_blocks,
                            out.separate_kv ? 1 : 0, out.grow_on_exhaustion ? 1 : 0,
                            (uint64_t)out.max_blocks, slot_bytes(&out) },
                     .name = name ? name : "kvb" };
    ps__api->emit(&e);
    return out;
}

uint64_t psa_blockpool_id(const kvb_config_t *cfg)
{
    return cfg && cfg->observe == psa_blockpool_observe ? ctx_id(cfg->observe_ctx) : 0;
}

void psa_blockpool_destroyed(const kvb_config_t *cfg)
{
    uint64_t id = psa_blockpool_id(cfg);
    if (!id || !ps_active()) return;
    ps_event_t e = { .type = PS_KVB_DESTROY, .n_fields = 1, .f = { id } };
    ps__api->emit(&e);
}
