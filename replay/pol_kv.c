/* pol_kv.c — KV-cache reservation policies over the trace's KV requests.
 *
 * The request stream carries, for every KV request (a "request" marker's
 * instance id = the block pool owner), the tokens it has stored and whether
 * it holds KV memory right now (stream.c). Each policy turns that into the
 * token slots it would have reserved:
 *
 *   kv-contiguous  the model's whole context per resident request (as
 *                  servers did before paging)
 *   kv-reserve     prompt + max tokens (from the marker's payload)
 *   kv-step        grows in steps of 256 tokens, never shrinks while resident
 *                  (mlx_lm's KVCache)
 *   kv-paged       blocks of --block-size tokens (the trace's block size by
 *                  default: then it reproduces the block pool's holdings)
 *
 * A request that stores more than its policy would reserve (a context or a
 * max-tokens figure smaller than what it used) is given what it stored and
 * counted in kv_overflows. The analyzer's accumulator gets, at every change,
 * tokens stored and slots reserved (az_kv with block_size 1, so capacity =
 * slots): kv_utilization and kv_waste_ratio are its figures. Bytes = slots x
 * bytes per token (block bytes / block size from KVB_CREATE; 1 if the trace
 * has no storage size, so bytes read as tokens then). Each request is one
 * live object of (tokens stored x bytes per token) requested and (slots x
 * bytes per token) granted, so peak_live_bytes is the KV actually stored.
 */
#include <stdlib.h>

#include "rp_internal.h"

typedef struct kv_req {
    uint64_t tokens, slots;
    uint8_t resident;
} kv_req_t;

typedef struct pol_kv {
    rp_pol_t base;
    kv_req_t *rq;
    size_t cap;
    uint64_t block_size;       /* trace's */
    uint64_t paged_bs;         /* kv-paged */
    uint64_t step;             /* kv-step */
    uint64_t token_bytes;
    uint64_t tokens, slots;
    uint64_t requests, overflows;
    int configured;
} pol_kv_t;

static uint64_t round_up(uint64_t v, uint64_t q) { return q ? (v + q - 1) / q * q : v; }

static int kv_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    pol_kv_t *k = (pol_kv_t *)pp;
    k->step = ctx->cfg->kv_step ? ctx->cfg->kv_step : 256;
    k->paged_bs = ctx->cfg->block_size;
    k->token_bytes = 1;
    return 0;
}

/* Slots the policy reserves for a resident request in state r. */
static uint64_t kv_slots(pol_kv_t *k, const kv_req_t *old, const rp_req_t *r)
{
    uint64_t t = r->n, want;
    switch (k->base.ops->id) {
    case RP_KV_CONTIGUOUS: want = k->base.ctx->kv_context; break;
    case RP_KV_RESERVE: want = r->bytes ? r->bytes : t; break;   /* marker not seen yet */
    case RP_KV_STEP: {
        want = round_up(t ? t : 1, k->step);
        if (old->resident && old->slots > want) want = old->slots;
        break;
    }
    default: want = round_up(t ? t : 1, k->paged_bs ? k->paged_bs : (k->block_size ? k->block_size : 16)); break;
    }
    if (want < t) {
        if (!old->resident || old->slots < t) k->overflows++;
        want = t;
    }
    return want;
}

static int kv_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_kv_t *k = (pol_kv_t *)pp;
    az_metrics_t *m = pp->m;
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        if (r->op == RQ_KV_CONFIG) {
            if (!k->configured) {
                k->block_size = r->n;
                if (r->n && r->bytes) k->token_bytes = r->bytes / r->n;
                k->configured = 1;
            }
            continue;
        }
        if (r->op != RQ_KV) continue;
        int rc = rp_grow((void **)&k->rq, &k->cap, r->slot, sizeof *k->rq);
        if (rc) return rc;
        kv_req_t *q = &k->rq[r->slot];
        kv_req_t nq = { 0, 0, 0 };
        if (r->flags & RQ_F_RESIDENT) {
            nq.resident = 1;
            nq.tokens = r->n;
            nq.slots = kv_slots(k, q, r);
            if (!q->resident) k->requests++;
        }
        k->tokens = k->tokens - q->tokens + nq.tokens;
        k->slots = k->slots - q->slots + nq.slots;
        if (q->resident) az_free(m, r->t, r->slot);
        if (nq.resident &&
            (rc = az_alloc(m, r->t, r->slot, nq.tokens * k->token_bytes, nq.slots * k->token_bytes,
                           0, 0)))
            return rc;
        *q = nq;
        az_kv(m, r->t, k->tokens, k->slots, 1);
        az_reserved(m, r->t, k->slots * k->token_bytes, 0);
    }
    return 0;
}

static int kv_finish(rp_pol_t *pp, uint64_t t_end, rp_result_t *res)
{
    pol_kv_t *k = (pol_kv_t *)pp;
    res->kv_context = pp->ops->id == RP_KV_CONTIGUOUS ? pp->ctx->kv_context : 0;
    res->kv_block_size = pp->ops->id == RP_KV_PAGED ? (k->paged_bs ? k->paged_bs : k->block_size)
                       : pp->ops->id == RP_KV_STEP ? k->step : 0;
    res->kv_token_bytes = k->configured && k->token_bytes ? k->token_bytes : 0;
    res->kv_requests = k->requests;
    res->kv_overflows = k->overflows;
    az_finish(pp->m, t_end);
    /* Peaks in tokens, from the accumulator's figures (blocks of 1 token). */
    az_result_t r;
    az_result(pp->m, &r);
    res->peak_kv_reserved_tokens = r.peak_kv_blocks;
    res->peak_kv_tokens = k->token_bytes ? r.peak_live_bytes / k->token_bytes : 0;
    return 0;
}

static void kv_fini(rp_pol_t *pp)
{
    free(((pol_kv_t *)pp)->rq);
}

#define KV_OPS(name, id) \
    const rp_pol_ops_t name = { id, sizeof(pol_kv_t), kv_init, kv_run, kv_finish, kv_fini, NULL }
KV_OPS(rp_pol_kv_contiguous, RP_KV_CONTIGUOUS);
KV_OPS(rp_pol_kv_reserve, RP_KV_RESERVE);
KV_OPS(rp_pol_kv_step, RP_KV_STEP);
KV_OPS(rp_pol_kv_paged, RP_KV_PAGED);
