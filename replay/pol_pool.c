/* pol_pool.c — the `pool` policy: the real buffer pool (pool/bufpool.c) over
 * a simulated backing store.
 *
 * Nothing here re-implements the pool: every acquire and release goes to
 * bp_acquire_typed / bp_release of the same code the engine links, with a backing
 * allocator that hands out fake, increasing, 64-byte aligned addresses (the
 * pool never dereferences data pointers). So hits, misses, backing
 * allocations, buffers destroyed over the cap and the peaks are the pool's
 * own decisions for this request sequence: a trace recorded with plain
 * malloc predicts exactly what the pool would have done.
 *
 * The pool's observer tells us its outstanding and cached bytes as they
 * change; those and each handed-out buffer go into the analyzer's
 * accumulators (az_*), which compute every metric.
 */
#include <stdlib.h>
#include <string.h>

#include "poolscope/bufpool.h"
#include "rp_internal.h"

typedef struct pol_pool {
    rp_pol_t base;
    bp_pool_t *pool;
    bp_buf_t **buf;            /* per object slot; NULL = not ours / free */
    size_t cap;
    uint64_t next_addr;        /* simulated backing store */
    uint64_t outstanding, cached;
    uint64_t t;                /* time of the request being run (for the observer) */
    int closing;               /* fini: stop reporting */
} pol_pool_t;

#define RP_FAKE_BASE 0x100000000ull   /* 4 GiB: well away from 0 */

static void *sim_alloc(void *ctx, size_t bytes, size_t align)
{
    pol_pool_t *p = ctx;
    uint64_t a = (p->next_addr + align - 1) & ~(uint64_t)(align - 1);
    p->next_addr = a + (bytes ? bytes : 1);
    return (void *)(uintptr_t)a;
}

static void sim_free(void *ctx, void *ptr, size_t bytes)
{
    (void)ctx; (void)ptr; (void)bytes;   /* addresses are never handed out twice */
}

static void observe(void *ctx, const bp_event_t *ev)
{
    pol_pool_t *p = ctx;
    az_metrics_t *m = p->base.m;
    if (p->closing) return;
    switch (ev->kind) {
    case BP_EV_ACQUIRE:
        p->outstanding += ev->granted_bytes;
        if (ev->hit) p->cached -= ev->granted_bytes;
        az_acquire(m, ev->hit);
        az_reserved(m, p->t, p->outstanding, p->cached);
        break;
    case BP_EV_RECLAIM:
        p->outstanding -= ev->granted_bytes;
        if (ev->cached) p->cached += ev->granted_bytes;
        az_reserved(m, p->t, p->outstanding, p->cached);
        break;
    case BP_EV_BACKING_ALLOC: az_backing(m, 1, 0); break;
    case BP_EV_BACKING_FREE: az_backing(m, 0, 1); break;
    default: break;
    }
}

static int pool_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    pol_pool_t *p = (pol_pool_t *)pp;
    p->next_addr = RP_FAKE_BASE;
    bp_config_t c = bp_config_default();
    c.name = "replay";
    c.max_cached_bytes = (size_t)ctx->pool_cap;
    c.backing = (bp_allocator_t){ sim_alloc, sim_free, p };
    c.observe = observe;
    c.observe_ctx = p;
    int err = 0;
    p->pool = bp_create(&c, &err);
    return p->pool ? 0 : (err ? err : PSC_ENOMEM);
}

static int pool_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_pool_t *p = (pol_pool_t *)pp;
    const int heap = pp->ctx->heap;
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        if (r->flags & RQ_F_KV) continue;   /* KV blocks live in the block pool */
        p->t = r->t;
        if (r->op == RQ_ALLOC) {
            int rc = rp_grow((void **)&p->buf, &p->cap, r->slot, sizeof *p->buf);
            if (rc) return rc;
            int err = 0;
            bp_buf_t *b;
            if (heap || r->dtype >= BP_DT_COUNT)
                b = bp_acquire_scratch(p->pool, (size_t)r->bytes, &err);
            else
                b = bp_acquire_typed(p->pool, (bp_dtype_t)r->dtype, (size_t)r->n, &err);
            if (!b) return err ? err : PSC_ENOMEM;
            p->buf[r->slot] = b;
            rc = az_alloc(pp->m, r->t, (uint64_t)(uintptr_t)bp_data(b), r->bytes, bp_bytes(b),
                          (uint64_t)bp_len(b) << 1 | (uint64_t)bp_arm(b), r->stack);
            if (rc) return rc;
        } else if (r->op == RQ_FREE) {
            if (r->slot >= p->cap || !p->buf[r->slot]) continue;
            bp_buf_t *b = p->buf[r->slot];
            p->buf[r->slot] = NULL;
            az_free(pp->m, r->t, (uint64_t)(uintptr_t)bp_data(b));
            if (bp_release(b) < 0) return PSC_ECORRUPT;
        }
    }
    return 0;
}

static int pool_finish(rp_pol_t *pp, uint64_t t_end, rp_result_t *res)
{
    pol_pool_t *p = (pol_pool_t *)pp;
    bp_stats_t s;
    int rc = bp_stats(p->pool, &s);
    if (rc) return rc;
    res->peak_outstanding_buffers = s.peak_outstanding_buffers;
    res->destroyed_over_cap = s.destroyed_over_cap;
    res->reclaims_cached = s.reclaims_cached;
    res->pool_cap = s.max_cached_bytes;
    az_finish(pp->m, t_end);
    return 0;
}

static void pool_fini(rp_pol_t *pp)
{
    pol_pool_t *p = (pol_pool_t *)pp;
    p->closing = 1;
    for (size_t i = 0; i < p->cap; i++)
        if (p->buf[i]) bp_release(p->buf[i]);   /* leaked in the trace: give back */
    free(p->buf);
    bp_destroy(p->pool);
}

const rp_pol_ops_t rp_pol_pool = { RP_POOL, sizeof(pol_pool_t), pool_init, pool_run, pool_finish,
                                   pool_fini };
