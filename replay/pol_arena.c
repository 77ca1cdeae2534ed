/* pol_arena.c — the `arena` policy: bump allocation reset per scope.
 *
 * The model (docs/DESIGN.md, "Replay policies"; the engine's --alloc arena
 * is the same machine, so its arena_capacity can be checked against this):
 *
 *   - objects are bumped 64-byte aligned in the newest chunk; when one does
 *     not fit, a new chunk twice the newest one's size (1 MiB for the first)
 *     is taken, doubled further until the object fits;
 *   - freeing an object gives nothing back;
 *   - at the end of each outermost scope of the reset marker the arena
 *     rewinds. A chunk that still holds a live object cannot be rewound: each
 *     such object is a lifetime violation (counted once per object, with its
 *     size and stack) and its chunk is pinned — kept, unusable, until its
 *     last object dies, then given back. The chunks without live objects are
 *     merged into one chunk of their total size (several chunks) or rewound
 *     (one), so after warm-up a scope touches no allocator. When every chunk
 *     was pinned, the next chunk gets the size the merge would have had;
 *   - an object made while no scope of the marker is open (before the
 *     first one, between two) is long-lived: it is bumped in a region of
 *     its own — chunks doubling from 1 MiB as above, never rewound — so it
 *     is no lifetime violation and pins no scoped chunk. A long-lived chunk
 *     other than the newest goes back when its last object dies. What a
 *     program sets up before its first forward or decode (weights, the
 *     interpreter's objects) is what ends up there; without it, each such
 *     object live at the first reset would pin a chunk of the scoped cycle
 *     for the whole run, and the chunks after it would double on top.
 *
 * Whether a scope is open comes as RQ_SCOPE requests from replay.c (the
 * count of open scopes of the marker, as the model keeps it); without
 * any, every object is long-lived and the arena is a bump allocator that
 * never rewinds — replay.c then warns that the marker never occurs.
 *
 * Reserved bytes = capacity of all chunks, pinned and long-lived ones
 * included (the output gives the long-lived region's peak apart).
 * Addresses are simulated (each chunk a fresh range), so the reuse metrics
 * show the arena handing out the same offsets scope after scope.
 */
#include <stdlib.h>
#include <string.h>

#include "rp_internal.h"

#define AR_FIRST ((uint64_t)1 << 20)
#define AR_ALIGN 64u
/* Larger than any address space (2^52 bytes): a request this big is not a
 * real allocation but a damaged or crafted trace; refused (PSC_ERANGE)
 * before it can overflow the chunk arithmetic (cap doubling to 0). */
#define AR_MAX_BYTES (1ull << 52)
#define AR_CAP_MAX   (1ull << 60)   /* largest chunk */
#define AR_BASE  0x200000000ull

typedef struct ar_chunk {
    uint64_t base, cap, used;
    uint64_t live;             /* live objects in it */
    uint64_t objs;             /* objects bumped into it (long-lived region) */
    int pinned;
    int in_use;                /* slot of chunks[] taken */
    int ll;                    /* a chunk of the long-lived region */
} ar_chunk_t;

typedef struct ar_obj {
    uint64_t addr, bytes;
    uint32_t chunk, stack;
    uint32_t live_idx;         /* position in live[] (scoped objects) */
    uint8_t  live, violated, since_reset, ll;
} ar_obj_t;

typedef struct pol_arena {
    rp_pol_t base;
    ar_obj_t *obj;             /* per object slot */
    size_t obj_cap;
    ar_chunk_t *ch;            /* chunks (recycled entries) */
    size_t ch_cap, ch_n;
    uint32_t *active;          /* chunk indices of the current cycle, oldest first */
    size_t n_active, active_cap;
    uint32_t *live;            /* live scoped object slots (dense) */
    size_t n_live, live_cap;
    uint64_t next_addr, next_cap;
    uint64_t capacity, pinned_bytes, peak_pinned_bytes, pinned_chunks;
    uint64_t held, peak_held, pinned_live;   /* objects whose memory is held */
    uint64_t resets, violations, violation_bytes, chunks_allocated;
    /* the long-lived region */
    int in_scope;              /* a scope of the reset marker is open */
    uint64_t scopes;           /* RQ_SCOPE openings */
    uint32_t ll_cur;           /* its newest chunk, UINT32_MAX none */
    uint64_t ll_capacity, peak_ll, peak_scoped, ll_held, ll_objects, ll_bytes, ll_chunks;
    /* violations per stack */
    rp_map_t vmap;             /* stack id -> index */
    rp_vstack_t *vs;
    size_t n_vs, vs_cap;
    int vs_handed;             /* the report owns vs (and its frames) */
} pol_arena_t;

static void ar_peaks(pol_arena_t *a)
{
    if (a->ll_capacity > a->peak_ll) a->peak_ll = a->ll_capacity;
    if (a->capacity - a->ll_capacity > a->peak_scoped) a->peak_scoped = a->capacity - a->ll_capacity;
    if (a->held + a->ll_held > a->peak_held) a->peak_held = a->held + a->ll_held;
}

static int ar_new_chunk(pol_arena_t *a, uint64_t cap, uint32_t *out)
{
    uint32_t i;
    for (i = 0; i < a->ch_n; i++)
        if (!a->ch[i].in_use) break;
    if (i == a->ch_n) {
        int rc = rp_grow((void **)&a->ch, &a->ch_cap, i, sizeof *a->ch);
        if (rc) return rc;
        a->ch_n++;
    }
    int rc = rp_grow((void **)&a->active, &a->active_cap, a->n_active, sizeof *a->active);
    if (rc) return rc;
    ar_chunk_t *c = &a->ch[i];
    memset(c, 0, sizeof *c);
    c->in_use = 1;
    c->cap = cap;
    c->base = a->next_addr;
    a->next_addr += cap + 4096;        /* a gap: no two chunks touch */
    a->active[a->n_active++] = i;
    a->capacity += cap;
    a->chunks_allocated++;
    az_backing(a->base.m, 1, 0);
    *out = i;
    return 0;
}

static void ar_drop_chunk(pol_arena_t *a, uint32_t i)
{
    a->capacity -= a->ch[i].cap;
    if (a->ch[i].ll) {
        a->ll_capacity -= a->ch[i].cap;
        a->ll_held -= a->ch[i].objs;
    }
    a->ch[i].in_use = 0;
    az_backing(a->base.m, 0, 1);
}

/* A long-lived object: bumped in the newest long-lived chunk, or in a
 * new one twice its size (1 MiB the first), doubled until it fits. */
static int ar_alloc_ll(pol_arena_t *a, const rp_req_t *r, uint64_t need)
{
    ar_chunk_t *c = a->ll_cur != UINT32_MAX ? &a->ch[a->ll_cur] : NULL;
    uint32_t ci = a->ll_cur;
    if (!c || c->cap - c->used < need) {
        uint64_t cap = c ? (c->cap >= AR_CAP_MAX / 2 ? AR_CAP_MAX : c->cap * 2) : AR_FIRST;
        while (cap < need) cap *= 2;
        uint32_t old = a->ll_cur;
        /* not in the scoped cycle: taken off active[] again */
        int rc = ar_new_chunk(a, cap, &ci);
        if (rc) return rc;
        a->n_active--;
        a->ch[ci].ll = 1;
        a->ll_capacity += cap;
        a->ll_chunks++;
        a->ll_cur = ci;
        if (old != UINT32_MAX && a->ch[old].live == 0) ar_drop_chunk(a, old);   /* all dead already */
        c = &a->ch[ci];
    }
    ar_obj_t *o = &a->obj[r->slot];
    o->addr = c->base + c->used;
    o->bytes = r->bytes;
    o->chunk = ci;
    o->stack = r->stack;
    o->live = 1;
    o->violated = 0;
    o->since_reset = 0;
    o->ll = 1;
    c->used += need;
    c->live++;
    c->objs++;
    a->ll_held++;
    a->ll_objects++;
    a->ll_bytes += r->bytes;
    ar_peaks(a);
    az_reserved(a->base.m, r->t, a->capacity, 0);
    return az_alloc_obj(a->base.m, r->slot, r->t, o->addr, r->bytes, need, r->bytes, r->stack);
}

static int ar_alloc(pol_arena_t *a, const rp_req_t *r)
{
    int rc = rp_grow((void **)&a->obj, &a->obj_cap, r->slot, sizeof *a->obj);
    if (rc) return rc;
    if ((rc = rp_grow((void **)&a->live, &a->live_cap, a->n_live, sizeof *a->live))) return rc;
    if (r->bytes > AR_MAX_BYTES) return PSC_ERANGE;
    uint64_t need = (r->bytes + AR_ALIGN - 1) & ~(uint64_t)(AR_ALIGN - 1);
    if (need == 0) need = AR_ALIGN;
    if (!a->in_scope) return ar_alloc_ll(a, r, need);
    ar_chunk_t *c = a->n_active ? &a->ch[a->active[a->n_active - 1]] : NULL;
    uint32_t ci = c ? a->active[a->n_active - 1] : 0;
    if (!c || c->cap - c->used < need) {
        /* doubling stops at AR_CAP_MAX; need <= AR_MAX_BYTES + AR_ALIGN,
         * so the loop ends well before the product could wrap */
        uint64_t cap = c ? (c->cap >= AR_CAP_MAX / 2 ? AR_CAP_MAX : c->cap * 2) : a->next_cap;
        if (cap > AR_CAP_MAX) cap = AR_CAP_MAX;
        if (cap == 0) cap = AR_FIRST;
        while (cap < need) cap *= 2;
        if ((rc = ar_new_chunk(a, cap, &ci))) return rc;
        c = &a->ch[ci];
        az_reserved(a->base.m, r->t, a->capacity, 0);
    }
    ar_obj_t *o = &a->obj[r->slot];
    o->addr = c->base + c->used;
    o->bytes = r->bytes;
    o->chunk = ci;
    o->stack = r->stack;
    o->live = 1;
    o->violated = 0;
    o->since_reset = 1;
    o->ll = 0;
    o->live_idx = (uint32_t)a->n_live;
    a->live[a->n_live++] = r->slot;
    c->used += need;
    c->live++;
    a->held++;
    ar_peaks(a);
    return az_alloc_obj(a->base.m, r->slot, r->t, o->addr, r->bytes, need, r->bytes, r->stack);
}

static void ar_free(pol_arena_t *a, const rp_req_t *r)
{
    if (r->slot >= a->obj_cap || !a->obj[r->slot].live) return;
    ar_obj_t *o = &a->obj[r->slot];
    o->live = 0;
    if (o->ll) {
        az_free_obj(a->base.m, r->slot, r->t, o->addr);
        ar_chunk_t *c = &a->ch[o->chunk];
        if (--c->live == 0 && o->chunk != a->ll_cur) {   /* an older long-lived chunk, all dead */
            ar_drop_chunk(a, o->chunk);
            az_reserved(a->base.m, r->t, a->capacity, 0);
        }
        return;
    }
    uint32_t last = a->live[--a->n_live];      /* swap-remove from the live list */
    a->live[o->live_idx] = last;
    a->obj[last].live_idx = o->live_idx;
    az_free_obj(a->base.m, r->slot, r->t, o->addr);
    ar_chunk_t *c = &a->ch[o->chunk];
    c->live--;
    if (c->pinned) {
        a->pinned_live--;
        a->held--;
        if (c->live == 0) {                    /* the last object of a pinned chunk */
            a->pinned_bytes -= c->cap;
            ar_drop_chunk(a, o->chunk);
            az_reserved(a->base.m, r->t, a->capacity, 0);
        }
    }
}

static int ar_violation(pol_arena_t *a, ar_obj_t *o)
{
    o->violated = 1;
    a->violations++;
    a->violation_bytes += o->bytes;
    uint32_t i = rp_map_get(&a->vmap, o->stack);
    if (i == UINT32_MAX) {
        int rc = rp_grow((void **)&a->vs, &a->vs_cap, a->n_vs, sizeof *a->vs);
        if (rc) return rc;
        i = (uint32_t)a->n_vs++;
        if ((rc = rp_map_put(&a->vmap, o->stack, i))) return rc;
        memset(&a->vs[i], 0, sizeof a->vs[i]);
        a->vs[i].stack = o->stack;
    }
    a->vs[i].count++;
    a->vs[i].bytes += o->bytes;
    return 0;
}

static int ar_reset(pol_arena_t *a, uint64_t t)
{
    a->resets++;
    /* Live objects: violations, and their chunks are pinned. */
    for (size_t k = 0; k < a->n_live; k++) {
        ar_obj_t *o = &a->obj[a->live[k]];
        if (!o->violated) {
            int rc = ar_violation(a, o);
            if (rc) return rc;
        }
        ar_chunk_t *c = &a->ch[o->chunk];
        if (!c->pinned) {
            c->pinned = 1;
            a->pinned_chunks++;
            a->pinned_bytes += c->cap;
            a->pinned_live += c->live;
        }
    }
    if (a->pinned_bytes > a->peak_pinned_bytes) a->peak_pinned_bytes = a->pinned_bytes;
    /* The rest are rewound: one chunk kept as is, several merged. */
    uint64_t total = 0, n_free = 0, cycle = 0;
    uint32_t keep = UINT32_MAX;
    for (size_t k = 0; k < a->n_active; k++) {
        ar_chunk_t *c = &a->ch[a->active[k]];
        cycle += c->cap;
        if (c->pinned) continue;
        total += c->cap;
        n_free++;
        keep = a->active[k];
    }
    if (n_free > 1) {
        for (size_t k = 0; k < a->n_active; k++)
            if (!a->ch[a->active[k]].pinned) ar_drop_chunk(a, a->active[k]);
        a->n_active = 0;
        uint32_t ci;
        int rc = ar_new_chunk(a, total, &ci);
        if (rc) return rc;
    } else {
        a->n_active = 0;
        if (n_free == 1) {
            a->ch[keep].used = 0;
            a->active[a->n_active++] = keep;
        } else if (cycle > 0) {
            a->next_cap = cycle;              /* all pinned: start at what the merge would be */
        }
    }
    a->held = a->pinned_live;
    a->in_scope = 0;                          /* the end of an outermost scope */
    ar_peaks(a);
    az_reserved(a->base.m, t, a->capacity, 0);
    return 0;
}

static int arena_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    (void)ctx;
    pol_arena_t *a = (pol_arena_t *)pp;
    a->next_addr = AR_BASE;
    a->next_cap = AR_FIRST;
    a->ll_cur = UINT32_MAX;
    return rp_map_init(&a->vmap, 16);
}

static int arena_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_arena_t *a = (pol_arena_t *)pp;
    int rc;
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        switch (r->op) {
        case RQ_ALLOC:
            if ((rc = ar_alloc(a, r))) return rc;
            break;
        case RQ_FREE:
            ar_free(a, r);
            break;
        case RQ_RESET:
            if ((rc = ar_reset(a, r->t))) return rc;
            break;
        case RQ_SCOPE:
            if (r->n && !a->in_scope) a->scopes++;
            a->in_scope = r->n > 0;
            break;
        default:
            break;
        }
    }
    return 0;
}

static int vs_cmp(const void *x, const void *y)
{
    const rp_vstack_t *a = x, *b = y;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    return a->stack < b->stack ? -1 : a->stack > b->stack;
}

static int arena_finish(rp_pol_t *pp, uint64_t t_end, rp_result_t *res)
{
    pol_arena_t *a = (pol_arena_t *)pp;
    if (a->n_vs) qsort(a->vs, a->n_vs, sizeof *a->vs, vs_cmp);   /* vs is NULL when empty */
    /* Frames are copied: the reader goes away before the report does. */
    for (size_t i = 0; i < a->n_vs; i++) {
        uint32_t depth = 0;
        const uint64_t *f = a->vs[i].stack && pp->ctx->reader
                                ? pst_stack(pp->ctx->reader, a->vs[i].stack, &depth) : NULL;
        if (!f || !depth) continue;
        uint64_t *copy = malloc(depth * sizeof *copy);
        if (!copy) return PSC_ENOMEM;
        memcpy(copy, f, depth * sizeof *copy);
        a->vs[i].frames = copy;
        a->vs[i].depth = depth;
    }
    res->peak_outstanding_buffers = a->peak_held;
    res->resets = a->resets;
    res->lifetime_violations = a->violations;
    res->violation_bytes = a->violation_bytes;
    res->pinned_chunks = a->pinned_chunks;
    res->peak_pinned_bytes = a->peak_pinned_bytes;
    res->chunks_allocated = a->chunks_allocated;
    res->reset_marker = pp->ctx->cfg->arena_reset ? pp->ctx->cfg->arena_reset : "forward";
    res->reset_scopes = a->scopes;
    res->longlived_objects = a->ll_objects;
    res->longlived_bytes = a->ll_bytes;
    res->peak_longlived_bytes = a->peak_ll;
    res->peak_scoped_bytes = a->peak_scoped;
    res->longlived_chunks = a->ll_chunks;
    res->vstacks = a->vs;
    res->n_vstacks = a->n_vs;
    a->vs_handed = 1;
    az_finish(pp->m, t_end);
    return 0;
}

static void arena_fini(rp_pol_t *pp)
{
    pol_arena_t *a = (pol_arena_t *)pp;
    free(a->obj);
    free(a->ch);
    free(a->active);
    free(a->live);
    if (a->vmap.cap) rp_map_free(&a->vmap);
    if (!a->vs_handed) {
        for (size_t i = 0; i < a->n_vs; i++) free((void *)a->vs[i].frames);
        free(a->vs);
    }
}

const rp_pol_ops_t rp_pol_arena = { RP_ARENA, sizeof(pol_arena_t), arena_init, arena_run,
                                    arena_finish, arena_fini, NULL };
