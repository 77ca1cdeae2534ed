/* pool_adapter.c — bufpool and blockpool observer events to trace events.
 * See pool_adapter.h for the contract.
 *
 * Global state: one atomic counter handing out pool ids, and a table of
 * what each pool's CREATE event says, so that a pool made before the trace
 * began (an attach, a fork child's own file, a pause) is named at its first
 * event in that trace. Ids only have to be unique within a process image; a
 * counter is the simplest thing that is, and it is touched once per pool.
 *
 * The observers run under the pool's lock, so they only fill a ps_event_t on
 * the stack and hand it to the tracer; the tracer stamps it into the calling
 * thread's stream and the pool_seq restores the pool's order across threads.
 * The same lock makes a pool's table entry single-writer: only its own
 * observer touches it once the pool exists.
 */
#include "poolscope/pool_adapter.h"

#include <stdatomic.h>
#include <stdio.h>
#include <unistd.h>

#include "poolscope/format.h"
#include "poolscope/poolscope.h"

static _Atomic uint64_t psa_next_id = 1;

static uint64_t psa_new_id(void)
{
    return atomic_fetch_add_explicit(&psa_next_id, 1, memory_order_relaxed);
}

static uint64_t ctx_id(void *ctx) { return (uint64_t)(uintptr_t)ctx; }

/* A pool's CREATE event as it would be emitted now, and the trace file it
 * last went to. Pools past the table (a program making pools in a loop) are
 * named only when made while recording, as before the table. */
#define PSA_NAMED 256
typedef struct {
    ps_event_t create;     /* type 0: no entry */
    uint64_t trace;        /* poolscope_api.session when CREATE was emitted */
    int sent;              /* CREATE was emitted (in trace `trace`) */
    char name[96];
} psa_named_t;
static psa_named_t psa_named[PSA_NAMED];

static psa_named_t *named(uint64_t id) { return id < PSA_NAMED ? &psa_named[id] : NULL; }

/* The tracer's current trace file; 0 for a tracer without the entry. */
static uint64_t trace_now(void) { return ps__api->session ? ps__api->session() : 0; }

/* Emit the pool's CREATE unless this trace has it. Not while paused: the
 * event would be dropped, and the pool must be named when recording
 * resumes. */
static void announce(psa_named_t *n)
{
    if (!n || !n->create.type) return;
    uint64_t t = trace_now();
    if (n->sent && n->trace == t) return;   /* every event but a trace's first: one call */
    if (!ps__api->enabled()) return;
    n->sent = 1;
    n->trace = t;
    ps__api->emit(&n->create);
}

/* Keep the CREATE event for id; returns its entry (NULL past the table). */
static psa_named_t *remember(uint64_t id, const ps_event_t *e, const char *name)
{
    psa_named_t *n = named(id);
    if (!n) return NULL;
    n->create = *e;
    snprintf(n->name, sizeof n->name, "%s", name);
    n->create.name = n->name;
    n->sent = 0;
    return n;
}

/* The pool is gone: DESTROY if this trace named it. */
static void destroyed(uint64_t id, uint32_t type)
{
    psa_named_t *n = named(id);
    int in_trace = ps_active() && (!n || (n->sent && n->trace == trace_now()));
    if (n) n->create.type = 0;
    if (!in_trace) return;
    ps_event_t e = { .type = type, .n_fields = 1, .f = { id } };
    ps__api->emit(&e);
}

/* ---- buffer pool ------------------------------------------------------- */

void psa_bufpool_observe(void *ctx, const bp_event_t *ev)
{
    if (!ps_active() || !ev) return;
    uint64_t id = ctx_id(ctx);
    announce(named(id));
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
    uint64_t id = psa_new_id();
    ps_event_t e = { .type = PS_POOL_CREATE, .n_fields = 4,
                     .f = { id, 0, (1u << BP_ARM_F32) | (1u << BP_ARM_SLAB), out.max_cached_bytes },
                     .name = out.name ? out.name : "bufpool" };
    psa_named_t *n = remember(id, &e, e.name);
    /* past the table a pool made unrecorded stays unobserved (no cost) */
    if (!n && !ps_active()) return out;
    out.observe = psa_bufpool_observe;
    out.observe_ctx = (void *)(uintptr_t)id;
    if (!ps_active()) return out;
    if (n) announce(n);
    else ps__api->emit(&e);
    return out;
}

uint64_t psa_bufpool_id(const bp_config_t *cfg)
{
    return cfg && cfg->observe == psa_bufpool_observe ? ctx_id(cfg->observe_ctx) : 0;
}

void psa_bufpool_destroyed(const bp_config_t *cfg)
{
    uint64_t id = psa_bufpool_id(cfg);
    if (id) destroyed(id, PS_POOL_DESTROY);
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
    if (!ev) return;
    uint64_t id = ctx_id(ctx);
    psa_named_t *n = named(id);
    /* a CREATE emitted later must give the blocks the pool has then */
    if (n && ev->n_ids > 0 && (ev->kind == KVB_EV_GROW || ev->kind == KVB_EV_SHRINK)) {
        uint64_t *nb = &n->create.f[3];
        uint64_t k = (uint64_t)ev->n_ids;
        *nb = ev->kind == KVB_EV_GROW ? *nb + k : *nb > k ? *nb - k : 0;
    }
    if (!ps_active()) return;
    announce(n);
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
    uint64_t id = psa_new_id();
    /* "uSuuuuuu" pool id, name, block_size, n_blocks, separate_kv, grow, max_blocks, slot bytes */
    ps_event_t e = { .type = PS_KVB_CREATE, .n_fields = 8,
                     .f = { id, 0, (uint64_t)out.block_size, (uint64_t)out.n_blocks,
                            out.separate_kv ? 1 : 0, out.grow_on_exhaustion ? 1 : 0,
                            (uint64_t)out.max_blocks, slot_bytes(&out) },
                     .name = name ? name : "kvb" };
    psa_named_t *n = remember(id, &e, e.name);
    if (!n && !ps_active()) return out;
    out.observe = psa_blockpool_observe;
    out.observe_ctx = (void *)(uintptr_t)id;
    if (!ps_active()) return out;
    if (n) announce(n);
    else ps__api->emit(&e);
    return out;
}

uint64_t psa_blockpool_id(const kvb_config_t *cfg)
{
    return cfg && cfg->observe == psa_blockpool_observe ? ctx_id(cfg->observe_ctx) : 0;
}

void psa_blockpool_destroyed(const kvb_config_t *cfg)
{
    uint64_t id = psa_blockpool_id(cfg);
    if (id) destroyed(id, PS_KVB_DESTROY);
}
