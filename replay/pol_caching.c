/* pol_caching.c — the `caching` policy: a caching tensor allocator in the
 * manner of PyTorch's CUDACachingAllocator (c10/cuda/CUDACachingAllocator.cpp,
 * whose rules the CPU caching allocators copy), over simulated memory.
 *
 * The rules (README.md, "replay", keeps them in step):
 *
 *   1. Rounding: a request of n bytes takes max(512, n rounded up to a
 *      multiple of 512) bytes.
 *   2. Two pools: rounded sizes up to 1 MiB are the small pool's, larger
 *      ones the large pool's. A block never moves between pools.
 *   3. Best fit: the free block of the request's pool with the smallest
 *      size that holds it (ties: the lowest address).
 *   4. None fits: a new segment — 2 MiB for the small pool; for the large
 *      pool 20 MiB when the rounded size is under 10 MiB, else the size
 *      rounded up to a multiple of 2 MiB. The block is the whole segment.
 *   5. Split: the block handed out is cut to the rounded size when what is
 *      left is at least 512 bytes (small pool) or more than 1 MiB (large
 *      pool); the rest becomes a free block right after it. Otherwise the
 *      whole block is handed out (its extra bytes count as internal
 *      fragmentation).
 *   6. Free: the block is merged with its free neighbours in its segment
 *      (the one before and the one after).
 *   7. Cap (--cache-cap, default unlimited): when the bytes of wholly free
 *      segments exceed it, wholly free segments are released, the largest
 *      first (ties: the lowest address), until they no longer do. A
 *      segment partly in use is never released. (PyTorch releases its
 *      cache when a device allocation fails or on empty_cache(); a cap on
 *      the cache is the simulator's stand-in for both.)
 *
 * Reserved = the segments' bytes (outstanding = the blocks in use, cached =
 * the free blocks); the analyzer's peak_reserved_bytes is PyTorch's
 * max_memory_reserved and peak_outstanding_bytes its max_memory_allocated.
 * The row's fragmentation is the analyzer's internal_frag (the table's
 * i_frag, as for every policy): at the live peak, the blocks' bytes the
 * requests did not ask for, over the blocks' bytes. The allocator's own
 * 1 - peak allocated / peak reserved stays in rp_result_t.fragmentation
 * (the tests read it) but is not shown as a second fragmentation figure:
 * the output gives the two peaks instead.
 *
 * The heap stream. The same split as the pool's (rp_internal.h, rp_split):
 * the allocator takes the allocations of at least --pool-min bytes and
 * those whose site matches --pool-sites; the rest are glibc chunks, held
 * while live. Without it the row rounded every small object of an
 * interpreter up to 512 B while the pool row took none of them, and the
 * two rows did not compare. Outstanding = blocks in use + chunks.
 *
 * Segments get fresh simulated ranges (2 MiB aligned, never reused), so
 * the reuse metrics show blocks coming back at the same offsets. Free
 * blocks of the large pool are kept in a treap ordered by (size, address):
 * best fit, insert and remove in O(log n). The small pool's free blocks
 * are multiples of 512 bytes no larger than its 2 MiB segment, so they
 * are binned by exact size instead (4096 bins, each a min-heap on the
 * address, and a two-level bitmap of the bins that hold any): best fit is
 * the lowest block of the first non-empty bin from the request's size on,
 * the same block the treap would give, found in a few instructions rather
 * than a walk of some 30 tree levels (the treap was half of the policy's
 * time on a heap trace, where nearly every block is small). Memory: the
 * live blocks and the free blocks between them.
 */
#include <stdlib.h>
#include <string.h>

#include "rp_internal.h"

#define CA_ROUND      512ull
#define CA_SMALL_MAX  ((uint64_t)1 << 20)          /* small pool: rounded sizes <= 1 MiB */
#define CA_SMALL_SEG  ((uint64_t)2 << 20)          /* small pool segment */
#define CA_LARGE_MIN  ((uint64_t)10 << 20)         /* below it: a 20 MiB segment */
#define CA_LARGE_SEG  ((uint64_t)20 << 20)
#define CA_ROUND_SEG  ((uint64_t)2 << 20)          /* larger segments: multiples of 2 MiB */
#define CA_MAX_BYTES  (1ull << 52)                 /* past any address space: refused */
#define CA_BASE       0x300000000ull
#define NONE          UINT32_MAX

enum { SMALL = 0, LARGE = 1 };

typedef struct ca_block {
    uint64_t addr, size;
    uint32_t prev, next;       /* neighbours in the segment, in address order */
    uint32_t left, right;      /* treap children (free blocks of the same pool) */
    uint32_t prio;
    uint32_t wf;               /* position in wfree[] while a wholly free segment */
    uint32_t hpos;             /* small pool, free: position in its bin's heap */
    uint8_t  used, pool;
} ca_block_t;

/* The small pool's free blocks of one size (bin = size / 512 - 1), a
 * min-heap on the address. */
#define CA_BINS (CA_SMALL_SEG / CA_ROUND)           /* 4096: sizes 512 .. 2 MiB */
typedef struct ca_bin {
    uint32_t *h;
    uint32_t n, cap;
} ca_bin_t;

typedef struct pol_caching {
    rp_pol_t base;
    ca_block_t *b;
    size_t b_cap;
    uint32_t n_b;              /* entries ever used */
    uint32_t *b_free;          /* recycled entries */
    size_t n_b_free, b_free_cap;
    uint32_t root[2];          /* the treap of the large pool (root[LARGE]) */
    ca_bin_t *bins;            /* CA_BINS of them */
    uint64_t bin_bits[CA_BINS / 64];   /* bin i holds a block */
    uint64_t bin_sum;          /* bit w: bin_bits[w] != 0 */
    uint32_t *obj;             /* per object slot: block + 1, 0 = none */
    size_t obj_cap;
    uint32_t *wfree;           /* wholly free segments (their one block) */
    size_t n_wfree, wfree_cap;
    uint64_t wfree_bytes, cap;
    uint64_t next_addr, rng;
    uint64_t reserved, allocated, peak_reserved, peak_allocated;
    uint64_t segments, peak_segments, seg_allocs, seg_released, splits, merges;
    rp_split_t *split;         /* the heap stream's split (every request taken on the tensor stream) */
} pol_caching_t;

/* ---- the treap ------------------------------------------------------------- */

/* (size, addr) of block x is below (s, a) */
static int below(const ca_block_t *x, uint64_t s, uint64_t a)
{
    return x->size < s || (x->size == s && x->addr < a);
}

/* t into l (keys below (s, a)) and r (the rest) */
static void split(ca_block_t *B, uint32_t t, uint64_t s, uint64_t a, uint32_t *l, uint32_t *r)
{
    if (t == NONE) { *l = *r = NONE; return; }
    if (below(&B[t], s, a)) {
        split(B, B[t].right, s, a, &B[t].right, r);
        *l = t;
    } else {
        split(B, B[t].left, s, a, l, &B[t].left);
        *r = t;
    }
}

static uint32_t merge(ca_block_t *B, uint32_t l, uint32_t r)
{
    if (l == NONE) return r;
    if (r == NONE) return l;
    if (B[l].prio > B[r].prio) {
        B[l].right = merge(B, B[l].right, r);
        return l;
    }
    B[r].left = merge(B, l, B[r].left);
    return r;
}

static void treap_insert(pol_caching_t *c, uint32_t x)
{
    ca_block_t *B = c->b;
    uint32_t l, r, *root = &c->root[B[x].pool];
    B[x].left = B[x].right = NONE;
    split(B, *root, B[x].size, B[x].addr, &l, &r);
    *root = merge(B, merge(B, l, x), r);
}

static void treap_remove(pol_caching_t *c, uint32_t x)
{
    ca_block_t *B = c->b;
    uint32_t l, m, r, *root = &c->root[B[x].pool];
    split(B, *root, B[x].size, B[x].addr, &l, &r);
    split(B, r, B[x].size, B[x].addr + 1, &m, &r);   /* m is x alone */
    *root = merge(B, l, r);
}

/* ---- the small pool's bins ------------------------------------------------- */

static void heap_put(ca_block_t *B, uint32_t *h, uint32_t k, uint32_t x)
{
    h[k] = x;
    B[x].hpos = k;
}

static void heap_up(ca_block_t *B, uint32_t *h, uint32_t k)
{
    uint32_t x = h[k];
    while (k > 0) {
        uint32_t up = (k - 1) / 2;
        if (B[h[up]].addr <= B[x].addr) break;
        heap_put(B, h, k, h[up]);
        k = up;
    }
    heap_put(B, h, k, x);
}

static void heap_down(ca_block_t *B, uint32_t *h, uint32_t n, uint32_t k)
{
    uint32_t x = h[k];
    for (;;) {
        uint32_t l = 2 * k + 1, m = l;
        if (l >= n) break;
        if (l + 1 < n && B[h[l + 1]].addr < B[h[l]].addr) m = l + 1;
        if (B[h[m]].addr >= B[x].addr) break;
        heap_put(B, h, k, h[m]);
        k = m;
    }
    heap_put(B, h, k, x);
}

static int bin_insert(pol_caching_t *c, uint32_t x)
{
    uint32_t i = (uint32_t)(c->b[x].size / CA_ROUND - 1);
    ca_bin_t *bn = &c->bins[i];
    if (bn->n == bn->cap) {
        uint32_t cap = bn->cap ? bn->cap * 2 : 8;
        uint32_t *h = realloc(bn->h, cap * sizeof *h);
        if (!h) return PSC_ENOMEM;
        bn->h = h;
        bn->cap = cap;
    }
    bn->n++;
    heap_put(c->b, bn->h, bn->n - 1, x);
    heap_up(c->b, bn->h, bn->n - 1);
    c->bin_bits[i / 64] |= 1ull << (i % 64);
    c->bin_sum |= 1ull << (i / 64);
    return 0;
}

static void bin_remove(pol_caching_t *c, uint32_t x)
{
    uint32_t i = (uint32_t)(c->b[x].size / CA_ROUND - 1);
    ca_bin_t *bn = &c->bins[i];
    uint32_t k = c->b[x].hpos, last = bn->h[--bn->n];
    if (k < bn->n) {
        heap_put(c->b, bn->h, k, last);
        heap_up(c->b, bn->h, k);
        heap_down(c->b, bn->h, bn->n, c->b[last].hpos);
    }
    if (!bn->n) {
        c->bin_bits[i / 64] &= ~(1ull << (i % 64));
        if (!c->bin_bits[i / 64]) c->bin_sum &= ~(1ull << (i / 64));
    }
}

/* The lowest block of the first non-empty bin from size s on, or NONE. */
static uint32_t bin_best(const pol_caching_t *c, uint64_t s)
{
    uint32_t i = (uint32_t)(s / CA_ROUND - 1), w = i / 64;
    uint64_t m = c->bin_bits[w] & (~0ull << (i % 64));
    if (!m) {
        uint64_t sm = w + 1 < 64 ? c->bin_sum & (~0ull << (w + 1)) : 0;
        if (!sm) return NONE;
        w = (uint32_t)__builtin_ctzll(sm);
        m = c->bin_bits[w];
    }
    return c->bins[w * 64 + (uint32_t)__builtin_ctzll(m)].h[0];
}

/* ---- free blocks of either pool ------------------------------------------------ */

static int tree_insert(pol_caching_t *c, uint32_t x)
{
    if (c->b[x].pool == SMALL) return bin_insert(c, x);
    treap_insert(c, x);
    return 0;
}

static void tree_remove(pol_caching_t *c, uint32_t x)
{
    if (c->b[x].pool == SMALL) bin_remove(c, x);
    else treap_remove(c, x);
}

/* The free block with the smallest (size, addr) of size >= s, or NONE. */
static uint32_t best_fit(const pol_caching_t *c, int pool, uint64_t s)
{
    if (pool == SMALL) return bin_best(c, s);
    uint32_t t = c->root[pool], best = NONE;
    while (t != NONE) {
        if (c->b[t].size >= s) {
            best = t;
            t = c->b[t].left;
        } else {
            t = c->b[t].right;
        }
    }
    return best;
}

/* ---- blocks and segments ------------------------------------------------------ */

static int block_new(pol_caching_t *c, uint32_t *out)
{
    uint32_t x;
    if (c->n_b_free) {
        x = c->b_free[--c->n_b_free];
    } else {
        if (c->n_b == NONE) return PSC_ENOMEM;
        int rc = rp_grow((void **)&c->b, &c->b_cap, c->n_b, sizeof *c->b);
        if (rc) return rc;
        x = c->n_b++;
    }
    memset(&c->b[x], 0, sizeof c->b[x]);
    c->rng ^= c->rng << 13;
    c->rng ^= c->rng >> 7;
    c->rng ^= c->rng << 17;
    c->b[x].prio = (uint32_t)(c->rng >> 32);
    c->b[x].prev = c->b[x].next = c->b[x].left = c->b[x].right = NONE;
    c->b[x].wf = NONE;
    *out = x;
    return 0;
}

static int block_drop(pol_caching_t *c, uint32_t x)
{
    int rc = rp_grow((void **)&c->b_free, &c->b_free_cap, c->n_b_free, sizeof *c->b_free);
    if (rc) return rc;
    c->b_free[c->n_b_free++] = x;
    return 0;
}

static void wfree_del(pol_caching_t *c, uint32_t x)
{
    uint32_t k = c->b[x].wf, last = c->wfree[--c->n_wfree];
    c->wfree[k] = last;
    c->b[last].wf = k;
    c->b[x].wf = NONE;
    c->wfree_bytes -= c->b[x].size;
}

static void note(pol_caching_t *c, uint64_t t)
{
    if (c->reserved > c->peak_reserved) c->peak_reserved = c->reserved;
    if (c->allocated > c->peak_allocated) c->peak_allocated = c->allocated;
    if (c->segments > c->peak_segments) c->peak_segments = c->segments;
    az_reserved(c->base.m, t, c->allocated + rp_split_held(c->split), c->reserved - c->allocated);
}

/* Rule 7: release wholly free segments, largest first, while over the cap. */
static int enforce_cap(pol_caching_t *c)
{
    while (c->wfree_bytes > c->cap && c->n_wfree) {
        uint32_t w = c->wfree[0];
        for (size_t k = 1; k < c->n_wfree; k++) {
            const ca_block_t *x = &c->b[c->wfree[k]], *y = &c->b[w];
            if (x->size > y->size || (x->size == y->size && x->addr < y->addr)) w = c->wfree[k];
        }
        wfree_del(c, w);
        tree_remove(c, w);
        c->reserved -= c->b[w].size;
        c->segments--;
        c->seg_released++;
        az_backing(c->base.m, 0, 1);
        int rc = block_drop(c, w);
        if (rc) return rc;
    }
    return 0;
}

static int ca_alloc(pol_caching_t *c, const rp_req_t *r)
{
    if (r->bytes > CA_MAX_BYTES) return PSC_ERANGE;
    int rc = rp_grow((void **)&c->obj, &c->obj_cap, r->slot, sizeof *c->obj);
    if (rc) return rc;
    uint64_t size = (r->bytes + CA_ROUND - 1) / CA_ROUND * CA_ROUND;     /* rule 1 */
    if (size < CA_ROUND) size = CA_ROUND;
    int pool = size <= CA_SMALL_MAX ? SMALL : LARGE;                     /* rule 2 */
    uint32_t x = best_fit(c, pool, size);                                /* rule 3 */
    if (x != NONE) {
        tree_remove(c, x);
        if (c->b[x].wf != NONE) wfree_del(c, x);
    } else {                                                             /* rule 4 */
        uint64_t seg = pool == SMALL ? CA_SMALL_SEG
                     : size < CA_LARGE_MIN ? CA_LARGE_SEG
                     : (size + CA_ROUND_SEG - 1) / CA_ROUND_SEG * CA_ROUND_SEG;
        if ((rc = block_new(c, &x))) return rc;
        c->next_addr = (c->next_addr + CA_ROUND_SEG - 1) / CA_ROUND_SEG * CA_ROUND_SEG;
        c->b[x].addr = c->next_addr;
        c->b[x].size = seg;
        c->b[x].pool = (uint8_t)pool;
        c->next_addr += seg + CA_ROUND_SEG;     /* a gap: segments never touch */
        c->reserved += seg;
        c->segments++;
        c->seg_allocs++;
        az_backing(c->base.m, 1, 0);
    }
    uint64_t rest = c->b[x].size - size;                                 /* rule 5 */
    if (pool == SMALL ? rest >= CA_ROUND : rest > CA_SMALL_MAX) {
        uint32_t y;
        if ((rc = block_new(c, &y))) return rc;
        ca_block_t *B = c->b;                   /* block_new may have moved it */
        B[y].addr = B[x].addr + size;
        B[y].size = rest;
        B[y].pool = (uint8_t)pool;
        B[y].prev = x;
        B[y].next = B[x].next;
        if (B[x].next != NONE) B[B[x].next].prev = y;
        B[x].next = y;
        B[x].size = size;
        if ((rc = tree_insert(c, y))) return rc;
        c->splits++;
    }
    c->b[x].used = 1;
    c->allocated += c->b[x].size;
    c->obj[r->slot] = x + 1;
    note(c, r->t);
    return az_alloc_obj(c->base.m, r->slot, r->t, c->b[x].addr, r->bytes, c->b[x].size, c->b[x].size, r->stack);
}

static int ca_free(pol_caching_t *c, const rp_req_t *r)
{
    if (r->slot >= c->obj_cap || !c->obj[r->slot]) return 0;
    uint32_t x = c->obj[r->slot] - 1;
    c->obj[r->slot] = 0;
    ca_block_t *B = c->b;
    az_free_obj(c->base.m, r->slot, r->t, B[x].addr);
    B[x].used = 0;
    c->allocated -= B[x].size;
    int rc;
    uint32_t p = B[x].prev;                                              /* rule 6 */
    if (p != NONE && !B[p].used) {
        tree_remove(c, p);
        B[p].size += B[x].size;
        B[p].next = B[x].next;
        if (B[x].next != NONE) B[B[x].next].prev = p;
        if ((rc = block_drop(c, x))) return rc;
        x = p;
        c->merges++;
    }
    uint32_t n = B[x].next;
    if (n != NONE && !B[n].used) {
        tree_remove(c, n);
        B[x].size += B[n].size;
        B[x].next = B[n].next;
        if (B[n].next != NONE) B[B[n].next].prev = x;
        if ((rc = block_drop(c, n))) return rc;
        c->merges++;
    }
    if ((rc = tree_insert(c, x))) return rc;
    if (B[x].prev == NONE && B[x].next == NONE) {                        /* wholly free */
        if ((rc = rp_grow((void **)&c->wfree, &c->wfree_cap, c->n_wfree, sizeof *c->wfree))) return rc;
        B[x].wf = (uint32_t)c->n_wfree;
        c->wfree[c->n_wfree++] = x;
        c->wfree_bytes += B[x].size;
        if ((rc = enforce_cap(c))) return rc;                            /* rule 7 */
    }
    note(c, r->t);
    return 0;
}

/* ---- the policy ------------------------------------------------------------------ */

static int caching_init(rp_pol_t *pp, const rp_ctx_t *ctx)
{
    pol_caching_t *c = (pol_caching_t *)pp;
    c->root[SMALL] = c->root[LARGE] = NONE;
    if (!(c->bins = calloc(CA_BINS, sizeof *c->bins))) return PSC_ENOMEM;
    c->cap = ctx->cfg->cache_cap_set ? ctx->cfg->cache_cap : UINT64_MAX;
    c->next_addr = CA_BASE;
    c->rng = 0x9e3779b97f4a7c15ull;
    int err = 0;
    return (c->split = rp_split_create(ctx, &err)) ? 0 : err;
}

static int caching_run(rp_pol_t *pp, const rp_req_t *rq, size_t n)
{
    pol_caching_t *c = (pol_caching_t *)pp;
    for (size_t i = 0; i < n; i++) {
        const rp_req_t *r = &rq[i];
        if (r->flags & RQ_F_KV) continue;
        int rc = 0;
        if (r->op == RQ_ALLOC) {
            rc = rp_split_alloc(c->split, pp->m, r);
            if (rc > 0) rc = ca_alloc(c, r);
            else if (rc == 0) note(c, r->t);              /* a glibc chunk */
        } else if (r->op == RQ_FREE) {
            if (rp_split_free(c->split, pp->m, r)) note(c, r->t);
            else rc = ca_free(c, r);
        }
        if (rc) return rc;
    }
    return 0;
}

static int caching_finish(rp_pol_t *pp, uint64_t t_end, rp_result_t *res)
{
    pol_caching_t *c = (pol_caching_t *)pp;
    res->cache_cap = c->cap;
    res->segments_allocated = c->seg_allocs;
    res->segments_released = c->seg_released;
    res->released_over_cap = c->seg_released;
    res->peak_segments = c->peak_segments;
    res->splits = c->splits;
    res->merges = c->merges;
    res->fragmentation = c->peak_reserved ? 1.0 - (double)c->peak_allocated / (double)c->peak_reserved : 0;
    rp_split_result(c->split, res);
    /* the allocator alone (its segments and blocks, no glibc chunk), in the
     * fields the pool fills with its own: output.c names them for each */
    res->pool_peak_reserved = c->peak_reserved;
    res->pool_peak_outstanding = c->peak_allocated;
    az_finish(pp->m, t_end);
    return 0;
}

static void caching_fini(rp_pol_t *pp)
{
    pol_caching_t *c = (pol_caching_t *)pp;
    free(c->b);
    free(c->b_free);
    free(c->obj);
    free(c->wfree);
    for (size_t i = 0; c->bins && i < CA_BINS; i++) free(c->bins[i].h);
    free(c->bins);
    rp_split_destroy(c->split);
}

const rp_pol_ops_t rp_pol_caching = { RP_CACHING, sizeof(pol_caching_t), caching_init, caching_run,
                                      caching_finish, caching_fini, NULL };
