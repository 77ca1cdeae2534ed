/* pol_ideal.c — the `ideal` policy: the peak-live lower bound.
 *
 * An allocator that holds exactly the requested bytes of the live set and
 * nothing else. Its peak_reserved_bytes is the analyzer's peak_live_bytes of
 * the same stream (no az_reserved call: reserved defaults to the live rnd
 * bytes, and rnd = req here), so it equals `poolscope report`'s figure for
 * the same trace. Objects are named by their slot; reuse metrics are off
 * (an ideal allocator has no addresses).
 */
#include "rp_internal.h"

static int ideal_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    (void)pp; (void)ctx;
    return 0;
}

static int ideal_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        if (r->flags & RQ_F_KV) continue;
        if (r->op == RQ_ALLOC) {
            int rc = az_alloc_obj(pp->m, r->slot, r->t, r->slot, r->bytes, r->bytes, r->bytes, r->stack);
            if (rc) return rc;
        } else if (r->op == RQ_FREE) {
            az_free_obj(pp->m, r->slot, r->t, r->slot);
        }
    }
    return 0;
}

static int ideal_finish(rp_pol_t *pp, uint64_t t_end, rp_result_t *res)
{
    (void)res;
    az_finish(pp->m, t_end);
    return 0;
}

static void ideal_fini(rp_pol_t *pp) { (void)pp; }

const rp_pol_ops_t rp_pol_ideal = { RP_IDEAL, sizeof(rp_pol_t), ideal_init, ideal_run, ideal_finish,
                                    ideal_fini, NULL };
