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
 *
 * The heap stream. A buffer pool is for tensors, and a program's heap is
 * mostly not: a Python or C++ process makes hundreds of thousands of 16 to
 * 256 byte objects, and the pool's slab arm would give each a 4 KiB slab.
 * So on the heap stream the pool gets only what a tensor pool would be
 * asked for:
 *   - an allocation of at least pool_min bytes (default RP_POOL_MIN_DEFAULT,
 *     128 KiB: replay.h says why), or
 *   - one whose site matches a --pool-sites pattern: the pattern is a
 *     substring of the function name of a frame from the innermost one up
 *     to the allocation site (the first frame that is not an allocation
 *     wrapper, as `report` names sites: analyzer/sites.h), so both
 *     "empty_cpu" (a site) and "alloc_cpu" (a wrapper it went through)
 *     select PyTorch's tensors; in a Python stack, up to its innermost
 *     Python frame ("Block.forward", "model.py:17"). Each distinct stack id is symbolized once
 *     (its first few frames, analyzer/symbolize.h) and the answer cached.
 * Everything else goes to a glibc chunk model: while live, an object holds
 * its glibc chunk — the request plus the 8-byte size field, rounded up to
 * 16 bytes, at least 32 (page-rounded plus 16 from 128 KiB, where glibc
 * maps it) — and no more: the model keeps no free lists, so what glibc
 * would lose to fragmentation and to free chunks it keeps is not counted.
 * It is the least a real malloc would hold for those objects, so the row's
 * reserved bytes are the pool's decisions plus an optimistic malloc; the
 * output says how many calls and bytes went each way.
 *
 * The model's objects are named by their stream slot (dense, recycled
 * most recently freed first) in a range of their own for the reuse
 * metrics; reserved = pool outstanding + model chunks, cached = the pool's.
 */
#include <stdlib.h>
#include <string.h>

#include "poolscope/bufpool.h"
#include "rp_internal.h"
#include "scan.h"
#include "sites.h"
#include "symbolize.h"

/* ---- the heap stream's split (rp_internal.h) ------------------------------- */

struct rp_split {
    const rp_ctx_t *ctx;
    int on;                    /* heap stream: threshold and sites apply */
    uint64_t *small;           /* per object slot: chunk bytes in the model, 0 = not there */
    size_t small_cap;
    uint64_t small_held, peak_small_held;
    /* sites */
    rp_map_t site_memo;        /* stack id -> 1 match, 0 not */
    az_scan_t scan;            /* only .r: what az_sv_create needs of a scan */
    az_sv_t *sv;               /* wrapper patterns (az_sv_skipped) */
    az_frame_t *fr;
    size_t fr_cap;
    uint64_t taken_calls, taken_bytes, site_calls, site_bytes, site_stacks;
    uint64_t small_calls, small_bytes;
};

#define RP_SMALL_BASE (1ull << 46)     /* the chunk model's objects: slot * 64 KiB above it */

/* glibc's chunk for malloc(req) on 64-bit: usable bytes plus the size
 * field (8 bytes in the heap, 16 for a mapped chunk). */
static uint64_t glibc_chunk(uint64_t req)
{
    uint64_t u = az_glibc_usable(req);
    return u + (req >= 128 * 1024 ? 16 : 8);
}

static int name_has(const char *name, const rp_config_t *c)
{
    for (size_t i = 0; i < c->n_pool_sites && i < RP_MAX_POOL_SITES; i++)
        if (c->pool_sites[i] && c->pool_sites[i][0] && strstr(name, c->pool_sites[i])) return 1;
    return 0;
}

/* Does stack `stack` match a pattern? Frames from the innermost one to the
 * first that is not a wrapper (the site), the tracer's own skipped. The
 * first 8 recorded frames are looked at, then all of them if every one of
 * those was a wrapper. A frame with no function name is matched by its
 * "module+0xoffset" form. A stack that runs Python is named by its
 * innermost Python frame (sites.c): the native frames up to that one are
 * looked at, and it, by its qualified name or "name (file.py:line)". */
static int site_matches(rp_split_t *p, uint32_t stack)
{
    uint32_t depth = 0;
    const uint64_t *pcs = stack ? pst_stack(p->ctx->reader, stack, &depth) : NULL;
    if (!pcs || !depth || !p->ctx->sym) return 0;
    const rp_config_t *c = p->ctx->cfg;
    uint32_t py = 0;
    while (py < depth && !PST_IS_PYFRAME(pcs[py])) py++;
    if (py < depth) {
        size_t n = az_sym_stack(p->ctx->sym, pcs, py + 1, p->fr, p->fr_cap);
        if (n > p->fr_cap) n = p->fr_cap;
        for (size_t i = 0; i < n; i++) {
            const az_frame_t *f = &p->fr[i];
            char buf[1400];
            if (az_sym_is_tracer(f)) continue;
            if (f->function && name_has(f->function, c)) return 1;
            if ((!f->function || f->python) && name_has(az_sym_format(f, f->pc, buf, sizeof buf), c)) return 1;
        }
        return 0;
    }
    for (uint32_t look = depth < 8 ? depth : 8;; look = depth) {
        size_t n = az_sym_stack(p->ctx->sym, pcs, look, p->fr, p->fr_cap);
        if (n > p->fr_cap) n = p->fr_cap;
        int site_seen = 0;
        for (size_t i = 0; i < n && !site_seen; i++) {
            const az_frame_t *f = &p->fr[i];
            if (az_sym_is_tracer(f)) continue;
            char buf[512];
            const char *name = f->function ? f->function : az_sym_format(f, f->pc, buf, sizeof buf);
            if (name_has(name, c)) return 1;
            site_seen = !az_sv_skipped(p->sv, f);
        }
        if (site_seen || look == depth) return 0;
    }
}

rp_split_t *rp_split_create(const rp_ctx_t *ctx, int *err)
{
    rp_split_t *p = calloc(1, sizeof *p);
    if (!p) { *err = PSC_ENOMEM; return NULL; }
    p->ctx = ctx;
    p->on = ctx->heap;
    if (p->on && ctx->cfg->n_pool_sites) {
        int rc = rp_map_init(&p->site_memo, 1024);
        if (rc) { *err = rc; rp_split_destroy(p); return NULL; }
        p->fr_cap = 256;
        p->fr = malloc(p->fr_cap * sizeof *p->fr);
        p->scan.r = ctx->reader;
        p->sv = az_sv_create(&p->scan, ctx->sym, NULL);   /* only its wrapper patterns are used */
        if (!p->fr || !p->sv) { *err = PSC_ENOMEM; rp_split_destroy(p); return NULL; }
    }
    return p;
}

void rp_split_destroy(rp_split_t *p)
{
    if (!p) return;
    free(p->small);
    free(p->fr);
    az_sv_destroy(p->sv);
    if (p->site_memo.cap) rp_map_free(&p->site_memo);
    free(p);
}

int rp_split_alloc(rp_split_t *p, az_metrics_t *m, const rp_req_t *r)
{
    int by_site = 0;
    if (p->on && r->bytes < p->ctx->pool_min) {
        uint32_t v = 0;
        if (p->ctx->cfg->n_pool_sites && r->stack) {
            v = rp_map_get(&p->site_memo, r->stack);
            if (v == UINT32_MAX) {
                v = (uint32_t)site_matches(p, r->stack);
                int rc = rp_map_put(&p->site_memo, r->stack, v);
                if (rc) return rc;
                p->site_stacks += v;
            }
        }
        if (!v) {                          /* the glibc chunk model */
            int rc = rp_grow((void **)&p->small, &p->small_cap, r->slot, sizeof *p->small);
            if (rc) return rc;
            uint64_t chunk = glibc_chunk(r->bytes);
            p->small[r->slot] = chunk;
            p->small_held += chunk;
            if (p->small_held > p->peak_small_held) p->peak_small_held = p->small_held;
            p->small_calls++;
            p->small_bytes += r->bytes;
            rc = az_alloc_obj(m, r->slot, r->t, RP_SMALL_BASE + ((uint64_t)r->slot << 16), r->bytes,
                              chunk - (r->bytes >= 128 * 1024 ? 16 : 8), r->bytes, r->stack);
            return rc ? rc : 0;
        }
        by_site = 1;
    }
    p->taken_calls++;
    p->taken_bytes += r->bytes;
    if (by_site) {
        p->site_calls++;
        p->site_bytes += r->bytes;
    }
    return 1;
}

int rp_split_free(rp_split_t *p, az_metrics_t *m, const rp_req_t *r)
{
    if (r->slot >= p->small_cap || !p->small[r->slot]) return 0;
    p->small_held -= p->small[r->slot];
    p->small[r->slot] = 0;
    az_free_obj(m, r->slot, r->t, RP_SMALL_BASE + ((uint64_t)r->slot << 16));
    return 1;
}

uint64_t rp_split_held(const rp_split_t *p) { return p->small_held; }

void rp_split_result(const rp_split_t *p, rp_result_t *res)
{
    res->heap_split = p->on;
    res->pool_min = p->on ? p->ctx->pool_min : 0;
    res->pooled_calls = p->taken_calls;
    res->pooled_bytes = p->taken_bytes;
    res->site_calls = p->site_calls;
    res->site_bytes = p->site_bytes;
    res->site_stacks = p->site_stacks;
    res->small_calls = p->small_calls;
    res->small_bytes = p->small_bytes;
    res->peak_small_held = p->peak_small_held;
}

/* ---- the pool over a simulated store -------------------------------------------- */

typedef struct pol_pool {
    rp_pol_t base;
    bp_pool_t *pool;
    bp_buf_t **buf;            /* per object slot; NULL = not ours / free */
    size_t cap;
    uint64_t next_addr;        /* simulated backing store */
    uint64_t outstanding, cached;
    uint64_t t;                /* time of the request being run (for the observer) */
    int closing;               /* fini: stop reporting */
    rp_split_t *split;         /* the heap stream's split (every request taken on the tensor stream) */
} pol_pool_t;

#define RP_FAKE_BASE  0x100000000ull   /* 4 GiB: well away from 0 */

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

static void reserved(pol_pool_t *p)
{
    az_reserved(p->base.m, p->t, p->outstanding + rp_split_held(p->split), p->cached);
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
        reserved(p);
        break;
    case BP_EV_RECLAIM:
        p->outstanding -= ev->granted_bytes;
        if (ev->cached) p->cached += ev->granted_bytes;
        reserved(p);
        break;
    case BP_EV_BACKING_ALLOC: az_backing(m, 1, 0); break;
    case BP_EV_BACKING_FREE: az_backing(m, 0, 1); break;
    default: break;
    }
}

/* ---- the policy ------------------------------------------------------------------ */

static int pool_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    pol_pool_t *p = (pol_pool_t *)pp;
    p->next_addr = RP_FAKE_BASE;
    int err = 0;
    if (!(p->split = rp_split_create(ctx, &err))) return err;
    bp_config_t c = bp_config_default();
    c.name = "replay";
    c.max_cached_bytes = (size_t)ctx->pool_cap;
    c.backing = (bp_allocator_t){ sim_alloc, sim_free, p };
    c.observe = observe;
    c.observe_ctx = p;
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
            if ((rc = rp_split_alloc(p->split, pp->m, r)) <= 0) {   /* the chunk model took it */
                if (rc) return rc;
                reserved(p);
                continue;
            }
            int err = 0;
            bp_buf_t *b;
            if (heap || r->dtype >= BP_DT_COUNT)
                b = bp_acquire_scratch(p->pool, (size_t)r->bytes, &err);
            else
                b = bp_acquire_typed(p->pool, (bp_dtype_t)r->dtype, (size_t)r->n, &err);
            if (!b) return err ? err : PSC_ENOMEM;
            p->buf[r->slot] = b;
            rc = az_alloc_obj(pp->m, r->slot, r->t, (uint64_t)(uintptr_t)bp_data(b), r->bytes, bp_bytes(b),
                          (uint64_t)bp_len(b) << 1 | (uint64_t)bp_arm(b), r->stack);
            if (rc) return rc;
        } else if (r->op == RQ_FREE) {
            if (rp_split_free(p->split, pp->m, r)) {
                reserved(p);
                continue;
            }
            if (r->slot >= p->cap || !p->buf[r->slot]) continue;
            bp_buf_t *b = p->buf[r->slot];
            p->buf[r->slot] = NULL;
            az_free_obj(pp->m, r->slot, r->t, (uint64_t)(uintptr_t)bp_data(b));
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
    rp_split_result(p->split, res);
    res->pool_peak_outstanding = s.peak_outstanding_bytes;
    res->pool_peak_reserved = s.peak_reserved_bytes;
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
    rp_split_destroy(p->split);
    bp_destroy(p->pool);
}

const rp_pol_ops_t rp_pol_pool = { RP_POOL, sizeof(pol_pool_t), pool_init, pool_run, pool_finish,
                                   pool_fini, NULL };
