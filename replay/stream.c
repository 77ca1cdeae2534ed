/* stream.c — a trace's events as a request stream for the policies.
 *
 * What an event means is the model's (model/model.h), as for the report:
 * this file only turns the model's operations into requests.
 *
 * Objects. The tensor stream takes the model's tensor objects (keyed by
 * tensor id); the heap stream its heap allocations and frees (keyed by
 * address). Each live object gets a dense slot (recycled), so policies keep
 * per-object state in flat arrays indexed by slot instead of hashing again.
 *
 * Resets. The end of each outermost scope of the reset marker (the model
 * counts the nesting) becomes one RQ_RESET.
 *
 * KV. Every state the model gives for a KV request (tokens stored, whether
 * it holds blocks, prompt + max tokens) becomes one RQ_KV; the model's slot
 * of the request is the request's slot. With kv_objects, each KV block is
 * also an object (RQ_F_KV) the size of a block, for the arena's --with-kv.
 *
 * Memory: the live objects, and the model's live KV blocks and requests.
 */
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "rp_internal.h"

/* KV blocks as objects: the model's block key, apart from tensor ids and
 * heap addresses (user space never has bit 63 set). */
#define RP_KV_KEY(k) ((1ull << 63) | (k))

struct rp_rstream {
    rp_stream_cfg_t cfg;
    pm_model_t *model;
    rp_map_t objs;            /* key -> object slot */
    rp_slots_t obj_slots;
    /* counts */
    uint64_t allocs, frees, unmatched, kv_pools_seen;
    uint64_t kv_out;          /* RQ_KV and RQ_KV_CONFIG emitted */
};

rp_rstream_t *rp_stream_create(const rp_stream_cfg_t *cfg, int *err)
{
    rp_rstream_t *s = calloc(1, sizeof *s);
    int rc = PSC_ENOMEM;
    if (!s) goto fail;
    s->cfg = *cfg;
    if (!(s->model = pm_create(&rc))) goto fail;
    if ((rc = rp_map_init(&s->objs, 1024))) goto fail;
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
    rp_slots_free(&s->obj_slots);
    pm_destroy(s->model);
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

uint64_t rp_stream_kv_out(const rp_rstream_t *s) { return s->kv_out; }

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
    int rc, is_new;
    uint32_t *v = rp_map_slot(&s->objs, key, &is_new);   /* one probe: found or added */
    if (!v) return PSC_ENOMEM;
    if (!is_new) {                                    /* a free we never saw */
        if ((rc = obj_free(s, key, t, flags, out, n))) return rc;
        if (!(v = rp_map_slot(&s->objs, key, &is_new))) return PSC_ENOMEM;
    }
    uint32_t slot;
    if ((rc = rp_slots_get(&s->obj_slots, &slot))) {
        rp_map_del(&s->objs, key);
        return rc;
    }
    *v = slot;
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

/* ---- one event ----------------------------------------------------------- */

static rp_req_t *req(rp_req_t *out, size_t *n, int op, uint64_t t)
{
    rp_req_t *r = &out[(*n)++];
    memset(r, 0, sizeof *r);
    r->op = (uint8_t)op;
    r->t = t;
    return r;
}

int rp_stream_event(rp_rstream_t *s, const pst_event_t *ev, rp_req_t *out, size_t *n)
{
    const int heap = s->cfg.heap;
    const uint64_t t = ev->ts;
    pm_step_t st;
    int rc = pm_event(s->model, ev, &st);
    if (rc) return rc;
    if (ev->type == PST_EV_KVB_CREATE) s->kv_pools_seen++;
    for (size_t i = 0; i < st.n_ops; i++) {
        const pm_op_t *o = &st.ops[i];
        rp_req_t *r;
        switch ((pm_kind_t)o->kind) {
        case PM_TENSOR_ALLOC:
            if (!heap && (rc = obj_alloc(s, o->key, o->bytes, o->n, o->arm, o->dtype, o->stack, t, 0, out, n)))
                return rc;
            break;
        case PM_TENSOR_FREE:
            if (!heap && (rc = obj_free(s, o->key, t, 0, out, n))) return rc;
            break;
        case PM_HEAP_ALLOC:
            if (heap && (rc = obj_alloc(s, o->key, o->bytes, o->bytes, 1, 0, o->stack, t, 0, out, n))) return rc;
            break;
        case PM_HEAP_FREE:
            if (heap && (rc = obj_free(s, o->key, t, 0, out, n))) return rc;
            break;
        case PM_MARK:
            /* the end of an outermost scope of the reset marker */
            if ((o->flags & PM_F_END) && o->req > 0 && o->n == 0 && ev->str &&
                !strcmp(ev->str, s->cfg.reset_marker))
                req(out, n, RQ_RESET, t);
            break;
        case PM_KV_CONFIG:
            r = req(out, n, RQ_KV_CONFIG, t);
            s->kv_out++;
            r->n = o->n;
            r->bytes = o->bytes;
            break;
        case PM_KV_BLOCK_ALLOC:
            if (s->cfg.kv_objects &&
                (rc = obj_alloc(s, RP_KV_KEY(o->key), o->bytes, o->req, 1, 0, o->stack, t, RQ_F_KV, out, n)))
                return rc;
            break;
        case PM_KV_BLOCK_FREE:
            if (s->cfg.kv_objects && (rc = obj_free(s, RP_KV_KEY(o->key), t, RQ_F_KV, out, n))) return rc;
            break;
        case PM_KV_REQUEST:
            if (!s->cfg.kv_requests) break;
            r = req(out, n, RQ_KV, t);
            s->kv_out++;
            r->flags = (o->flags & PM_F_RESIDENT) ? RQ_F_RESIDENT : 0;
            r->slot = o->owner;
            r->n = o->n;
            r->bytes = o->bytes;
            break;
        default:
            break;
        }
    }
    return 0;
}
