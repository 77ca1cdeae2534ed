/* rd_merge.c — the reader's merge: one order over all streams, and pst_next.
 *
 * The rules (FORMAT.md, "Reading: the merge order"): the next event is the
 * queued head with the smallest (ts, stream id) — a binary heap of the
 * streams with queued events; pool events of one pool come out in pool_seq
 * order (a min-heap of queued (pool_seq, stream, seq) per pool); and an
 * allocation of an address still live in the reader's view follows the
 * queued free of that address in another stream (live-address sets, and
 * the pending frees chained per address). When a head must wait for
 * another stream's event, that stream is drained up to it first (a stack
 * of force targets, which may recurse); cycles and frees that never come
 * are handed out anyway and counted.
 *
 * A head goes out only when it is safe: stamped before the latest SYNC
 * watermark, or older than the newest time read minus the window, or the
 * input has ended; until then pst_next reads another chunk (rd_chunk.c).
 * The validating pass (rd_decode.c) feeds the tables here through
 * rd_pend_add, rd_pool_add and rd_sheap_push; heads are decoded again by
 * rd_head_next (rd_internal.h).
 *
 * The address tables are touched for nearly every event: the live set is a
 * specialised inline table (rd_internal.h says why, with its figures); the
 * pending-free heads and the per-stream runs are common/hashmap.h maps used
 * through its inline _sz fast paths.
 */
#include "rd_internal.h"

/* ---- address tables: the live set and the pending-free heads ---------------- */
/* The live set: keyed by addresses, never 0 (rd_internal.h). Linear probing
 * at load <= 1/2, dead slots instead of deletion, everything inline. */
#define RD_AHASH(k, shift) ((uint32_t)(((k) * 0x9E3779B97F4A7C15ull) >> (shift)))

/* The live set keeps a freed address's slot, marked dead, so the churn of
 * a program (an address freed, then allocated again) costs one probe each
 * way and no moves. Dead slots go at the next rebuild, which happens when
 * live + dead would pass half the table: the table stays within four times
 * the live addresses (plus the dead ones since the last rebuild, at most as
 * many again). */
static inline int rd_aset_has(const rd_aset_t *s, uint64_t k)
{
    if (!s->n) return 0;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) return s->live[i];
        if (!x) return 0;
    }
}

/* Rebuild without the dead slots, twice as large when the live keys alone
 * fill more than a quarter. */
static int rd_aset_rebuild(rd_aset_t *s)
{
    uint32_t cap = s->k ? s->mask + 1 : 64;
    while ((s->n + 1) * 4 > cap) cap *= 2;
    if (cap > (1u << 31)) return PSC_ENOMEM;
    uint64_t *k = calloc(cap, sizeof *k);
    uint8_t *lv = malloc(cap);
    uint32_t *ow = malloc(cap * sizeof *ow);
    if (!k || !lv || !ow) { free(k); free(lv); free(ow); return PSC_ENOMEM; }
    uint32_t shift = 64 - (uint32_t)__builtin_ctz(cap), mask = cap - 1;
    for (uint32_t i = 0; s->k && i <= s->mask; i++) {
        if (!s->k[i] || !s->live[i]) continue;
        uint32_t j = RD_AHASH(s->k[i], shift);
        while (k[j]) j = (j + 1) & mask;
        k[j] = s->k[i];
        lv[j] = 1;
        ow[j] = s->own[i];
    }
    free(s->k);
    free(s->live);
    free(s->own);
    s->k = k;
    s->live = lv;
    s->own = ow;
    s->mask = mask;
    s->shift = shift;
    s->dead = 0;
    return 0;
}

/* Add k (no-op when live), allocated by stream index who. 0 or PSC_ENOMEM. */
static inline int rd_aset_add(rd_aset_t *s, uint64_t k, uint32_t who)
{
    if (!s->k && rd_aset_rebuild(s)) return PSC_ENOMEM;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) {
            if (!s->live[i]) { s->live[i] = 1; s->dead--; s->n++; }
            s->own[i] = who;
            return 0;
        }
        if (!x) {
            if ((s->n + s->dead + 1) * 2 > s->mask + 1) {
                if (rd_aset_rebuild(s)) return PSC_ENOMEM;
                return rd_aset_add(s, k, who);
            }
            s->k[i] = k;
            s->live[i] = 1;
            s->own[i] = who;
            s->n++;
            return 0;
        }
    }
}

/* 1 if k was live (and is not any more: freed by stream index who), 0 if
 * it was not live. */
static inline int rd_aset_del(rd_aset_t *s, uint64_t k, uint32_t who)
{
    if (!s->n) return 0;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) {
            if (!s->live[i]) return 0;
            s->live[i] = 0; s->n--; s->dead++;
            s->own[i] = who;
            return 1;
        }
        if (!x) return 0;
    }
}

/* The stream that last allocated (live) or freed (dead, until the next
 * rebuild) k; UINT32_MAX when not known. */
static inline uint32_t rd_aset_owner(const rd_aset_t *s, uint64_t k)
{
    if (!s->k) return UINT32_MAX;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) return s->own[i];
        if (!x) return UINT32_MAX;
    }
}

/* The address maps (pending-free heads, a stream's runs per address) are
 * the project's map with u64 values, through its inline _sz paths (see
 * rd_internal.h for the measurements). The value of k, or NULL; the pointer
 * holds until the next reserve, insert or del on that map. */
static inline uint64_t *rd_amap_ref(const psc_map_t *m, uint64_t k)
{
    return (uint64_t *)psc_map_get_sz(m, k, sizeof(uint64_t));
}

/* Room for one more key: the next insert neither fails nor moves entries.
 * 0 or PSC_ENOMEM. */
static inline int rd_amap_reserve(psc_map_t *m)
{
    return psc_map_full(m) ? psc_map_reserve(m, psc_map_count(m) + 1) : 0;
}

/* Insert k, which is not present. 0 or PSC_ENOMEM. */
static inline int rd_amap_insert(psc_map_t *m, uint64_t k, uint64_t v)
{
    int is_new;
    uint64_t *p = (uint64_t *)psc_map_put_sz(m, k, &is_new, sizeof(uint64_t));
    if (!p) return PSC_ENOMEM;
    *p = v;
    return 0;
}

/* Remove k if present (inline: a free that goes out removes up to two keys). */
static inline void rd_amap_del(psc_map_t *m, uint64_t k)
{
    uint64_t *p = (uint64_t *)psc_map_get_sz(m, k, sizeof(uint64_t));
    if (p) psc_map_erase_sz(m, p, sizeof(uint64_t));
}

/* ---- heap of streams ----------------------------------------------------------- */

static inline uint64_t rd_sheap_key(const rd_sheap_t *h, const rd_stream_t *s)
{
    (void)h;
    return s->head.ts;
}
static inline int rd_sheap_less(const rd_sheap_t *h, const rd_stream_t *a, const rd_stream_t *b)
{
    uint64_t ka = rd_sheap_key(h, a), kb = rd_sheap_key(h, b);
    return ka < kb || (ka == kb && a->id < b->id);
}
static inline int *rd_sheap_pos(const rd_sheap_t *h, rd_stream_t *s) { (void)h; return &s->hq_pos; }

static void rd_sheap_set(rd_sheap_t *h, uint32_t i, rd_stream_t *s) { h->a[i] = s; *rd_sheap_pos(h, s) = (int)i; }

static void rd_sheap_up(rd_sheap_t *h, uint32_t i)
{
    rd_stream_t *s = h->a[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!rd_sheap_less(h, s, h->a[p])) break;
        rd_sheap_set(h, i, h->a[p]);
        i = p;
    }
    rd_sheap_set(h, i, s);
}

static void rd_sheap_down(rd_sheap_t *h, uint32_t i)
{
    rd_stream_t *s = h->a[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && rd_sheap_less(h, h->a[c + 1], h->a[c])) c++;
        if (!rd_sheap_less(h, h->a[c], s)) break;
        rd_sheap_set(h, i, h->a[c]);
        i = c;
    }
    rd_sheap_set(h, i, s);
}

int rd_sheap_push(rd_sheap_t *h, rd_stream_t *s)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 16;
        rd_stream_t **a = realloc(h->a, cap * sizeof *a);
        if (!a) return PSC_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    h->a[h->n] = s;
    rd_sheap_up(h, h->n++);
    return 0;
}

static void rd_sheap_remove(rd_sheap_t *h, rd_stream_t *s)
{
    int *pp = rd_sheap_pos(h, s);
    if (*pp < 0) return;
    uint32_t i = (uint32_t)*pp;
    *pp = -1;
    rd_stream_t *last = h->a[--h->n];
    if (i == h->n) return;
    rd_sheap_set(h, i, last);
    rd_sheap_up(h, i);
    rd_sheap_down(h, (uint32_t)*rd_sheap_pos(h, last));
}

static void rd_sheap_fix(rd_sheap_t *h, rd_stream_t *s)
{
    int p = *rd_sheap_pos(h, s);
    if (p < 0) return;
    rd_sheap_up(h, (uint32_t)p);
    rd_sheap_down(h, (uint32_t)*rd_sheap_pos(h, s));
}
/* ---- pending frees: address -> chain of queued free-like events ------------- */
/* (the layout is described with the types, in rd_internal.h) */

static int rd_pend_new_run(rd_pendtab_t *t, uint32_t *out)
{
    uint32_t idx;
    if (t->rfree) {
        idx = t->rfree - 1;
        t->rfree = t->runs[idx].next;
    } else {
        if (t->rn == t->rcap) {
            if (t->rcap > (UINT32_MAX >> 2)) return PSC_ENOMEM;
            uint32_t cap = t->rcap ? t->rcap * 2 : 64;
            rd_prun_t *a = realloc(t->runs, cap * sizeof *a);
            if (!a) return PSC_ENOMEM;
            t->runs = a;
            t->rcap = cap;
        }
        idx = t->rn++;
    }
    *out = idx + 1;
    return 0;
}

static inline void rd_pend_free_run(rd_pendtab_t *t, uint32_t ri)
{
    t->runs[ri - 1].next = t->rfree;
    t->rfree = ri;
}

static inline void rd_pend_free_node(rd_pendtab_t *t, uint32_t me)
{
    t->nodes[me - 1].next = 0;
    if (t->free_tail) t->nodes[t->free_tail - 1].next = me;
    else t->free_head = me;
    t->free_tail = me;
}

int rd_pend_add(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq, uint64_t ts)
{
    uint32_t idx;
    if (t->free_head) {
        idx = t->free_head - 1;
        t->free_head = t->nodes[idx].next;
        if (!t->free_head) t->free_tail = 0;
    } else {
        if (t->n == t->cap) {
            if (t->cap > (UINT32_MAX >> 2)) return PSC_ENOMEM;
            uint32_t cap = t->cap ? t->cap * 2 : 256;
            rd_pnode_t *a = realloc(t->nodes, cap * sizeof *a);
            if (!a) return PSC_ENOMEM;
            t->nodes = a;
            t->cap = cap;
        }
        idx = t->n++;
    }
    uint32_t me = idx + 1, ri;
    t->nodes[idx] = (rd_pnode_t){ seq, ts, 0, 0 };
    uint64_t *v = rd_amap_ref(&t->head, addr);
    if (v && t->runs[(*v >> 32) - 1].sidx == s->idx) {
        rd_prun_t *last = &t->runs[(*v >> 32) - 1];          /* extend the stream's run */
        t->nodes[last->tail - 1].next = me;
        last->tail = me;
        last->len++;
        return 0;
    }
    /* room in both maps first, so nothing below fails half-way (growing
     * moves the entries: look v up again) */
    if ((!v && rd_amap_reserve(&t->head)) || rd_amap_reserve(&s->runs_of[sp]) || rd_pend_new_run(t, &ri)) goto nomem;
    v = rd_amap_ref(&t->head, addr);
    uint64_t *w = rd_amap_ref(&s->runs_of[sp], addr);
    if (w) {
        t->runs[(*w >> 32) - 1].next_same = ri;
        *w = (*w & 0xffffffffu) | (uint64_t)ri << 32;
    } else {
        rd_amap_insert(&s->runs_of[sp], addr, (uint64_t)ri | (uint64_t)ri << 32);
    }
    if (v) {
        uint32_t li = (uint32_t)(*v >> 32);
        rd_prun_t *last = &t->runs[li - 1];
        t->nodes[last->tail - 1].next = me;
        last->next = ri;
        t->runs[ri - 1] = (rd_prun_t){ me, me, 1, li, 0, s->idx, 0 };
        *v = (*v & 0xffffffffu) | (uint64_t)ri << 32;
    } else {
        t->runs[ri - 1] = (rd_prun_t){ me, me, 1, 0, 0, s->idx, 0 };
        rd_amap_insert(&t->head, addr, (uint64_t)ri | (uint64_t)ri << 32);
    }
    return 0;
nomem:
    rd_pend_free_node(t, me);
    return PSC_ENOMEM;
}

/* The free (s, seq) of addr goes out. */
static void rd_pend_del(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq)
{
    uint64_t *w = rd_amap_ref(&s->runs_of[sp], addr);
    if (!w) return;                                     /* not indexed (one stream so far) */
    uint32_t ri = (uint32_t)*w;
    rd_prun_t *ru = &t->runs[ri - 1];
    uint32_t cur = ru->head;
    if (t->nodes[cur - 1].seq != seq) return;           /* every queued free is indexed: not reached */
    uint32_t next = t->nodes[cur - 1].next;
    if (ru->prev) t->nodes[t->runs[ru->prev - 1].tail - 1].next = next;
    if (ru->len > 1) {
        ru->head = next;                                /* the run's next node heads it now */
        ru->len--;
    } else {
        if (ru->next_same) *w = (*w & ~(uint64_t)0xffffffffu) | ru->next_same;
        else rd_amap_del(&s->runs_of[sp], addr);
        uint32_t pr = ru->prev, nx = ru->next;
        if (pr) t->runs[pr - 1].next = nx;
        if (nx) t->runs[nx - 1].prev = pr;
        if (!pr && !nx) {
            rd_amap_del(&t->head, addr);
        } else if (!pr || !nx) {
            uint64_t *v = rd_amap_ref(&t->head, addr);     /* the key exists */
            if (v && !pr) *v = (*v & ~(uint64_t)0xffffffffu) | nx;
            if (v && !nx) *v = (*v & 0xffffffffu) | (uint64_t)pr << 32;
        }
        rd_pend_free_run(t, ri);
    }
    rd_pend_free_node(t, cur);
}

/* The queued free of addr in a stream other than `not`, earliest by ts
 * (then stream id) among the first RD_PEND_SCAN_MAX nodes of the chain:
 * 1 with its stream and seq. *in_self = 1 when `not` itself has one there. */
static int rd_pend_find(const rd_pendtab_t *t, rd_stream_t *const *sv, uint64_t addr, const rd_stream_t *not,
                        int *in_self, int by_node, rd_stream_t **bs, uint64_t *bseq, uint64_t *bts)
{
    *in_self = 0;
    uint64_t *v = rd_amap_ref(&t->head, addr);
    if (!v) return 0;
    const rd_pnode_t *best = NULL;
    uint32_t bsidx = 0;
    uint64_t pos = 0;
    for (uint32_t ri = (uint32_t)*v; ri && pos < RD_PEND_SCAN_MAX; ri = t->runs[ri - 1].next) {
        const rd_prun_t *ru = &t->runs[ri - 1];
        if (ru->sidx == not->idx) { *in_self = 1; pos += ru->len; continue; }
        /* by_node: every node of the run within the first RD_PEND_SCAN_MAX;
         * otherwise the run's first node, its earliest */
        uint32_t cur = ru->head, lim = by_node ? ru->len : 1;
        for (uint32_t j = 0; j < lim && pos + j < RD_PEND_SCAN_MAX; j++, cur = t->nodes[cur - 1].next) {
            const rd_pnode_t *nd = &t->nodes[cur - 1];
            if (!best || nd->ts < best->ts || (nd->ts == best->ts && sv[ru->sidx]->id < sv[bsidx]->id)) {
                best = nd;
                bsidx = ru->sidx;
            }
        }
        pos += ru->len;
    }
    if (!best) return 0;
    *bs = sv[bsidx];
    *bseq = best->seq;
    *bts = best->ts;
    return 1;
}

/* ---- pools ------------------------------------------------------------------ */

static inline int rd_pent_less(const rd_pent_t *a, const rd_pent_t *b)
{
    return a->pseq < b->pseq || (a->pseq == b->pseq && a->s->id < b->s->id) ||
           (a->pseq == b->pseq && a->s == b->s && a->seq < b->seq);
}

static int rd_pool_push(rd_pool_t *p, rd_pent_t e)
{
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 64;
        rd_pent_t *a = realloc(p->h, cap * sizeof *a);
        if (!a) return PSC_ENOMEM;
        p->h = a;
        p->cap = cap;
    }
    uint32_t i = p->n++;
    while (i > 0 && rd_pent_less(&e, &p->h[(i - 1) / 2])) { p->h[i] = p->h[(i - 1) / 2]; i = (i - 1) / 2; }
    p->h[i] = e;
    return 0;
}

static void rd_pool_pop(rd_pool_t *p)
{
    rd_pent_t e = p->h[--p->n];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= p->n) break;
        if (c + 1 < p->n && rd_pent_less(&p->h[c + 1], &p->h[c])) c++;
        if (!rd_pent_less(&p->h[c], &e)) break;
        p->h[i] = p->h[c];
        i = c;
    }
    if (p->n) p->h[i] = e;
}

/* The smallest still-queued entry, dropping those already handed out. */
static rd_pent_t *rd_pool_top(rd_pool_t *p)
{
    while (p->n && p->h[0].seq < p->h[0].s->emit_seq) rd_pool_pop(p);
    return p->n ? &p->h[0] : NULL;
}

int rd_pool_add(pst_reader_t *r, rd_stream_t *s, uint64_t pool, uint64_t pseq, uint64_t seq)
{
    uint64_t pi;
    if (!rd_map_get(&r->pool_ids, pool, &pi)) {
        RD_GROW(r->pools, r->n_pools, r->cap_pools, 8);
        pi = r->n_pools;
        if (rd_map_put(&r->pool_ids, pool, pi)) return PSC_ENOMEM;
        memset(&r->pools[r->n_pools++], 0, sizeof(rd_pool_t));
    }
    return rd_pool_push(&r->pools[pi], (rd_pent_t){ pseq, s, seq });
}

/* ---- merge ------------------------------------------------------------------ */

enum { RD_C_NONE, RD_C_FORCE, RD_C_WAIT, RD_C_UNORDERED, RD_C_BLOCKED };
enum { RD_WHY_CAUSAL = 1, RD_WHY_POOL = 2 };

/* realloc, reallocarray and mremap are stamped before their call
 * (FORMAT.md "Time"): the block they acquire may have been freed by another
 * thread up to a tick or so later by the clock. */
#define RD_ACQUIRE_SLACK (4 * (uint64_t)PST_TICK_NS)
static inline int rd_acquires_inside(unsigned t)
{
    return t == PST_EV_REALLOC || t == PST_EV_REALLOCARRAY || t == PST_EV_MREMAP;
}

/* What must happen before e (the head of s) goes out. */
static inline __attribute__((always_inline))
int rd_constraint(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_stream_t **t, uint64_t *tseq,
                  int *why)
{
    if (rd_is_pool_seq_event(e->type)) {
        uint64_t pi;
        if (rd_map_get(&r->pool_ids, e->f[0], &pi)) {
            rd_pent_t *top = rd_pool_top(&r->pools[pi]);
            if (top && top->pseq < e->f[1] && top->s != s) {
                *t = top->s; *tseq = top->seq; *why = RD_WHY_POOL;
                return RD_C_FORCE;
            }
        }
    }
    int sp;
    uint64_t a;
    /* rule 3: a free of an address not live is blocked: in a causal trace
     * its allocation can only be in another stream's events of the same
     * time (pst_next lets those go first); otherwise it is an unknown free */
    if (r->n_sv > 1 && (rd_frees_addr(e, &sp, &a) || rd_uses_addr(e, &sp, &a)) && !rd_aset_has(&r->live[sp], a)) {
        *why = RD_WHY_CAUSAL;
        return RD_C_BLOCKED;
    }
    if (rd_allocs_addr(e, &sp, &a) && rd_aset_has(&r->live[sp], a)) {
        if (e->type == PST_EV_MMAP && (e->f[3] & RD_MAP_FIXED_FLAG)) return RD_C_NONE;
        int in_self;
        uint64_t fts;
        *why = RD_WHY_CAUSAL;
        if (rd_pend_find(&r->pend[sp], r->sv, a, s, &in_self, r->ts_wrapped, t, tseq, &fts)) {
            /* Times of a minor-2 trace are causal: the free this allocation
             * waits for is stamped no later. One stamped later is not it
             * (it frees a later use of the address): draining a stream up
             * to it would put events out of time order. Older writers'
             * times were not causal, so there the free is looked for
             * wherever it is. */
            if (r->causal_times && fts > e->ts &&
                !(rd_acquires_inside(e->type) && fts - e->ts <= RD_ACQUIRE_SLACK))
                return in_self ? RD_C_UNORDERED : RD_C_WAIT;
            return RD_C_FORCE;
        }
        return in_self ? RD_C_UNORDERED : RD_C_WAIT;
    }
    return RD_C_NONE;
}

static inline int rd_window_passed(const pst_reader_t *r, const rd_hev_t *e)
{
    return r->newest_ts >= r->window && e->ts <= r->newest_ts - r->window;
}

/* No stream can still deliver an event ordered before e. Streams are not
 * announced: a thread's first chunk may appear in the file long after its
 * first event, so any stream — quiet, or not seen yet — may still deliver
 * an earlier event until the writer's SYNC watermark has passed it, or the
 * window has (for writers without SYNC chunks), or the input has ended. */
static inline int rd_safe(const pst_reader_t *r, const rd_hev_t *e)
{
    return r->eof || e->ts < r->sync_ts || rd_window_passed(r, e);
}

static inline int rd_apply_effects(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e)
{
    int sp;
    uint64_t a;
    if (rd_frees_addr(e, &sp, &a)) {
        rd_pend_del(&r->pend[sp], a, s, sp, e->seq);
        if (!rd_aset_del(&r->live[sp], a, s->idx)) r->st.unknown_frees++;
    }
    if (rd_allocs_addr(e, &sp, &a)) {
        if (rd_aset_add(&r->live[sp], a, s->idx)) return PSC_ENOMEM;
    }
    if (rd_is_pool_seq_event(e->type)) {
        uint64_t pi;
        if (rd_map_get(&r->pool_ids, e->f[0], &pi)) {
            rd_pool_t *p = &r->pools[pi];
            if (p->have_last && e->f[1] < p->last_seq) r->st.pool_unordered++;
            if (!p->have_last || e->f[1] > p->last_seq) p->last_seq = e->f[1];
            p->have_last = 1;
            rd_pool_top(p);    /* drop what has gone out */
        }
    }
    return 0;
}

/* Hand out the head of s into ev, then decode the next one. */
static int rd_emit(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    rd_hev_t *e = &s->head;
    unsigned t = e->type;
    s->emit_seq++;
    s->qlen--;
    r->st.queued--;
    int rc = 0;
    switch (t) {       /* rd_apply_effects, the common cases inline */
    case PST_EV_MALLOC: case PST_EV_CALLOC:
        if (e->f[0]) {
            rc = rd_aset_add(&r->live[RD_SP_HEAP], e->f[0], s->idx);
        }
        break;
    case PST_EV_FREE:
        if (e->f[0]) {
            rd_pend_del(&r->pend[RD_SP_HEAP], e->f[0], s, RD_SP_HEAP, e->seq);
            if (!rd_aset_del(&r->live[RD_SP_HEAP], e->f[0], s->idx)) r->st.unknown_frees++;
        }
        break;
    default:
        rc = rd_apply_effects(r, s, e);
        break;
    }

    ev->type = e->type;
    ev->stream = s->id;
    ev->tid = s->tid;
    ev->seq = e->seq;
    ev->ts = e->ts;
    ev->stack = e->stack;
    for (unsigned i = 0; i < r->nf[t]; i++) ev->f[i] = e->f[i];
    ev->ids = NULL;
    ev->n_ids = 0;
    ev->n_payload = 0;
    ev->str = NULL;
    if (r->s_idx[t] >= 0 && e->f[r->s_idx[t]] <= UINT32_MAX)
        ev->str = pst_string(r, (uint32_t)e->f[r->s_idx[t]]);
    if (e->n_ids) {
        /* the ids stay valid until the next pst_next: swap buffers with s */
        uint32_t *ids = s->ids;
        s->ids = r->out_ids;
        r->out_ids = ids;
        ev->ids = ids;
        ev->n_ids = e->n_ids;
    } else if (e->n_payload) {
        memcpy(ev->payload, e->payload, e->n_payload * sizeof(int64_t));
        ev->n_payload = e->n_payload;
    }
    if (r->out_any && e->ts < r->last_out_ts) r->st.late++;
    if (!r->out_any || e->ts > r->last_out_ts) r->last_out_ts = e->ts;
    r->out_any = 1;
    r->st.events++;
    r->st.live = (uint64_t)r->live[0].n + r->live[1].n;

    if (s->qlen) {
        int hr = rd_head_next(r, s);
        if (hr) return hr;
        /* a run: s stays on top while its head is below both children */
        rd_sheap_t *h = &r->hq;
        if (h->n > 1 && !(s->hq_pos == 0 && rd_sheap_less(h, s, h->a[1]) && (h->n < 3 || rd_sheap_less(h, s, h->a[2]))))
            rd_sheap_fix(h, s);
    } else {
        rd_sheap_remove(&r->hq, s);
        if (s->bhead == s->btail) s->bhead = s->btail = 0;
    }
    return rc ? rc : 1;
}

/* Ties. Events of one time (one tick of the writer's time base) carry no
 * order across streams, and any order that keeps each stream's own is as
 * true as another, but not every one is consistent (a free before the
 * allocation it frees). Each head's place in its stream's block of that
 * time estimates when, within the tick, it happened (events of a busy
 * thread spread evenly over the tick): the head whose estimate is earliest
 * among those that may go out now (rd_constraint) goes first. The streams
 * whose head has the top's time form a subtree at the root of the heap. */
static inline int rd_earlier_in_tick(const rd_stream_t *a, const rd_stream_t *b)
{
    uint64_t la = a->hblk_open ? a->vblk : a->hblk_len, lb = b->hblk_open ? b->vblk : b->hblk_len;
    if (!la) la = 1;
    if (!lb) lb = 1;
    uint64_t x = (2 * (uint64_t)a->hblk_idx + 1) * lb, y = (2 * (uint64_t)b->hblk_idx + 1) * la;
    return x < y || (x == y && a->id < b->id);
}

/* Affinity: a head that frees what its own stream allocated, or allocates
 * what its own stream freed last (the allocator's thread caches hand a
 * freed block back to the thread that freed it), goes before the others.
 * When two heads compete for one address (two frees of the live block, two
 * allocations of a freed one), the one of that stream is almost always
 * the right one; for heads that do not compete the order does not matter. */
static int rd_foreign(const pst_reader_t *r, const rd_stream_t *s)
{
    int sp;
    uint64_t a;
    if (!rd_frees_addr(&s->head, &sp, &a) && !rd_allocs_addr(&s->head, &sp, &a)) return 0;
    return rd_aset_owner(&r->live[sp], a) != s->idx;
}

static rd_stream_t *rd_tie_scan_(pst_reader_t *r, uint32_t i, uint64_t ts, rd_stream_t *best, int *best_f)
{
    rd_sheap_t *h = &r->hq;
    if (i >= h->n || h->a[i]->head.ts != ts) return best;
    rd_stream_t *s = h->a[i], *t;
    uint64_t tseq;
    int why;
    if (rd_constraint(r, s, &s->head, &t, &tseq, &why) == RD_C_NONE) {
        int f = rd_foreign(r, s);
        if (!best || f < *best_f || (f == *best_f && rd_earlier_in_tick(s, best))) { best = s; *best_f = f; }
    }
    best = rd_tie_scan_(r, 2 * i + 1, ts, best, best_f);
    return rd_tie_scan_(r, 2 * i + 2, ts, best, best_f);
}

static rd_stream_t *rd_tie_scan(pst_reader_t *r, uint32_t i, uint64_t ts, rd_stream_t *best)
{
    int f = 2;
    return rd_tie_scan_(r, i, ts, best, &f);
}

/* Is another head within the plan's window of the top's time? */
static inline int rd_top_tied(const pst_reader_t *r)
{
    const rd_sheap_t *h = &r->hq;
    uint64_t ts = h->a[0]->head.ts + PST_TICK_NS;
    return (h->n > 1 && h->a[1]->head.ts <= ts) || (h->n > 2 && h->a[2]->head.ts <= ts);
}


/* ---- ties, exactly: a plan for one tick ------------------------------------ */
/* When several streams' heads share the top's time (minor 2), every event
 * of that time is queued (the time is below the watermark), so the order
 * of the whole tick can be chosen at once: a depth-first search over
 * interleavings that keep each stream's order, in which an event may go
 * when it frees a live address, allocates a free one, or comes next in its
 * pool's pool_seq order. Candidates are tried affinity first, then by their
 * place in their stream's part of the tick (rd_tie_scan's order), and a
 * dead end backtracks to the last choice. The search takes the order the
 * greedy choice would have taken unless that runs into a dead end, so it
 * costs about one pass over the tick; RD_PLAN_STEPS bounds it, and beyond
 * that (or a tick too large) the greedy order of rd_tie_scan stands.
 *
 * An address freed in the tick that is neither live nor allocated in it,
 * or allocated while live and never freed in it, constrains nothing (an
 * unknown free, a lost event): the plan does not wait for what cannot come. */
#define RD_PLAN_MAX_EVENTS 65536u
#define RD_PLAN_SLACK      ((uint64_t)PST_TICK_NS)   /* the window: a realloc's two sides may fall in two ticks */
#define RD_PLAN_STEPS      (1u << 20)

typedef struct rd_gev {
    uint64_t fa, aa;           /* address freed / allocated (0: none) */
    uint32_t fslot, aslot;     /* their overlay slots */
    uint32_t pool, rank;       /* pool events: group pool index + 1 and rank in pool_seq order (pool 0: none) */
    uint32_t own_a, own_f;     /* allocations of fa / frees of aa later in the same stream's part of the tick */
    uint64_t ts;
    uint64_t ua;               /* address it needs live without changing it (in-place realloc), 0 none */
    uint32_t uslot, own_u;     /* its overlay slot; allocations of it later in the same stream */
} rd_gev_t;
typedef struct rd_gstr { uint32_t sidx, first, n, pos; } rd_gstr_t;
typedef struct rd_ochoice { uint32_t step, cands, ncand, tried; } rd_ochoice_t;

struct rd_plan {
    rd_gev_t *ev; uint32_t cap_ev;
    rd_gstr_t *st; uint32_t cap_st;
    /* overlay: (address, space) -> state; state = live bit | owner << 1 | 1u << 31 (known) */
    uint64_t *ok; uint32_t *ost; uint32_t *oalloc, *ofree; uint32_t omask, ocap;
    uint32_t *pnext; uint64_t *pids; uint32_t n_pools, cap_pools, cap_pnext;
    uint64_t *psort; uint32_t cap_psort;
    uint32_t *step_s; uint32_t *step_prev; uint32_t cap_steps;   /* per step: stream, prev states of fa and aa */
    rd_ochoice_t *ch; uint32_t n_ch, cap_ch;
    uint32_t *cands; uint32_t n_cands, cap_cands;
};

#define RD_GROWP(arr, cap, need)                                           \
    do {                                                                   \
        if ((need) > (cap)) {                                              \
            size_t nc_ = (cap) ? (size_t)(cap) * 2 : 256;                  \
            while (nc_ < (need)) {                                         \
                nc_ *= 2;                                                  \
            }                                                              \
            void *na_ = realloc((arr), nc_ * sizeof *(arr));               \
            if (!na_) return -1;                                           \
            (arr) = na_;                                                   \
            (cap) = (uint32_t)nc_;                                         \
        }                                                                  \
    } while (0)

void rd_plan_free(pst_reader_t *r)
{
    struct rd_plan *p = r->plan;
    if (p) {
        free(p->ev); free(p->st); free(p->ok); free(p->ost); free(p->oalloc); free(p->ofree);
        free(p->pnext); free(p->pids); free(p->psort); free(p->step_s); free(p->step_prev);
        free(p->ch); free(p->cands);
        free(p);
    }
    free(r->plan_seq);
    r->plan = NULL;
    r->plan_seq = NULL;
}

/* The overlay slot of (a, sp), created from the reader's live set. */
static uint32_t rd_oslot(pst_reader_t *r, struct rd_plan *p, uint64_t a, int sp)
{
    uint64_t k = a * 2 + (uint64_t)sp;
    uint32_t i = RD_AHASH(k, 64 - (uint32_t)__builtin_ctz(p->omask + 1));
    for (;; i = (i + 1) & p->omask) {
        if (p->ok[i] == k) return i;
        if (!p->ok[i]) break;
    }
    p->ok[i] = k;
    uint32_t own = rd_aset_owner(&r->live[sp], a);
    p->ost[i] = (uint32_t)rd_aset_has(&r->live[sp], a) | ((own & 0x3fffffffu) << 1);
    p->oalloc[i] = p->ofree[i] = 0;
    return i;
}

static int rd_cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Gather the tick's events of the tied streams; 0, or -1 (too large, out of memory). */
static int rd_plan_gather(pst_reader_t *r, struct rd_plan *p, uint64_t ts, uint32_t *n_ev, uint32_t *n_st)
{
    rd_sheap_t *h = &r->hq;
    uint32_t ne = 0, ns = 0;
    /* the streams whose head lies in [ts, lim] and is safe: a subtree at the root */
    uint64_t lim = ts + RD_PLAN_SLACK;
    if (!r->eof && lim >= r->sync_ts) lim = r->sync_ts ? r->sync_ts - 1 : ts;
    if (lim < ts) lim = ts;
    uint32_t stack[256], sp = 0;
    stack[sp++] = 0;
    while (sp) {
        uint32_t i = stack[--sp];
        if (i >= h->n || h->a[i]->head.ts > lim) continue;
        if (sp + 2 > 256) return -1;
        stack[sp++] = 2 * i + 1;
        stack[sp++] = 2 * i + 2;
        rd_stream_t *s = h->a[i];
        RD_GROWP(p->st, p->cap_st, ns + 1);
        rd_gstr_t *g = &p->st[ns++];
        g->sidx = s->idx;
        g->first = ne;
        g->pos = 0;
        pst_enc_t d = s->hdec;
        const uint8_t *q = s->b + s->bhead, *end = s->b + s->btail;
        rd_hev_t e = s->head;
        for (;;) {
            if (ne >= RD_PLAN_MAX_EVENTS) return -1;
            RD_GROWP(p->ev, p->cap_ev, ne + 1);
            rd_gev_t *x = &p->ev[ne++];
            int fsp, asp;
            memset(x, 0, sizeof *x);
            x->ts = e.ts;
            if (rd_frees_addr(&e, &fsp, &x->fa)) x->fslot = (uint32_t)fsp; else x->fa = 0;
            if (!x->fa && rd_uses_addr(&e, &fsp, &x->ua)) x->uslot = (uint32_t)fsp; else x->ua = 0;
            if (rd_allocs_addr(&e, &asp, &x->aa)) {
                x->aslot = (uint32_t)asp;
                if (e.type == PST_EV_MMAP && (e.f[3] & RD_MAP_FIXED_FLAG)) x->aa = 0;
            } else {
                x->aa = 0;
            }
            if (rd_is_pool_seq_event(e.type)) {
                uint32_t k = 0;
                while (k < p->n_pools && p->pids[k] != e.f[0]) k++;
                if (k == p->n_pools) {
                    RD_GROWP(p->pids, p->cap_pools, k + 1);
                    p->pids[p->n_pools++] = e.f[0];
                }
                x->pool = k + 1;
                x->rank = (uint32_t)(e.f[1] & 0xffffffffu);   /* pool_seq for now: ranked below */
            }
            /* the next queued event of s, if it has the same time */
            rd_hev_t nx;
            const uint8_t *q2 = q;
            pst_enc_t d2 = d;
            do {
                q2 = q2 < end ? rd_dec_rec(r, &d2, q2, end, &nx, r->idbuf) : NULL;
            } while (q2 && nx.type == PST_EV_TS);
            if (!q2 || d2.last_ts > lim) break;
            q = q2;
            d = d2;
            e = nx;
            e.ts = d.last_ts;
        }
        g->n = ne - g->first;
    }
    *n_ev = ne;
    *n_st = ns;
    return 0;
}

/* Build the plan for the tied heads at time ts. 1 planned, 0 not (use the
 * greedy order), -1 out of memory. */
static int rd_plan_build(pst_reader_t *r, uint64_t ts, int affinity_first)
{
    if (!r->plan && !(r->plan = calloc(1, sizeof *r->plan))) return -1;
    struct rd_plan *p = r->plan;
    p->n_pools = 0;
    uint32_t ne, ns;
    if (rd_plan_gather(r, p, ts, &ne, &ns)) return 0;
    /* overlay sized for two addresses per event at load <= 1/2 */
    uint32_t cap = 64;
    while (cap < 4 * ne) cap *= 2;
    if (cap > p->ocap) {
        free(p->ok); free(p->ost); free(p->oalloc); free(p->ofree);
        p->ok = malloc(cap * sizeof *p->ok);
        p->ost = malloc(cap * sizeof *p->ost);
        p->oalloc = malloc(cap * sizeof *p->oalloc);
        p->ofree = malloc(cap * sizeof *p->ofree);
        if (!p->ok || !p->ost || !p->oalloc || !p->ofree) { p->ocap = 0; return -1; }
        p->ocap = cap;
    }
    p->omask = cap - 1;
    memset(p->ok, 0, cap * sizeof *p->ok);
    for (uint32_t i = 0; i < ne; i++) {
        rd_gev_t *x = &p->ev[i];
        if (x->fa) x->fslot = rd_oslot(r, p, x->fa, (int)x->fslot);
        if (x->ua) x->uslot = rd_oslot(r, p, x->ua, (int)x->uslot);
        if (x->aa) x->aslot = rd_oslot(r, p, x->aa, (int)x->aslot);
    }
    /* pool ranks: each pool's events of the tick in pool_seq order */
    if (p->n_pools) {
        RD_GROWP(p->psort, p->cap_psort, ne);
        RD_GROWP(p->pnext, p->cap_pnext, p->n_pools);
        for (uint32_t k = 0; k < p->n_pools; k++) {
            uint32_t m = 0;
            for (uint32_t i = 0; i < ne; i++)
                if (p->ev[i].pool == k + 1) p->psort[m++] = (uint64_t)p->ev[i].rank << 32 | i;
            qsort(p->psort, m, sizeof *p->psort, rd_cmp_u64);
            for (uint32_t j = 0, rk = 0; j < m; j++) {
                if (j && (p->psort[j] >> 32) != (p->psort[j - 1] >> 32)) rk = j;
                p->ev[(uint32_t)p->psort[j]].rank = rk;
            }
            p->pnext[k] = 0;
        }
    }
    /* what each stream does later to the address its event touches: a free
     * is not waiting for its own stream's later allocation of the address */
    for (uint32_t k = 0; k < ns; k++) {
        const rd_gstr_t *g = &p->st[k];
        for (uint32_t i = g->first + g->n; i-- > g->first;) {
            rd_gev_t *x = &p->ev[i];
            x->own_a = x->fa ? p->oalloc[x->fslot] : 0;   /* oalloc/ofree: counters of this stream so far */
            x->own_u = x->ua ? p->oalloc[x->uslot] : 0;
            x->own_f = x->aa ? p->ofree[x->aslot] : 0;
            if (x->aa) p->oalloc[x->aslot]++;
            if (x->fa) p->ofree[x->fslot]++;
        }
        for (uint32_t i = g->first; i < g->first + g->n; i++) {
            const rd_gev_t *x = &p->ev[i];
            if (x->aa) p->oalloc[x->aslot] = 0;
            if (x->fa) p->ofree[x->fslot] = 0;
        }
    }
    for (uint32_t i = 0; i < ne; i++) {
        rd_gev_t *x = &p->ev[i];
        if (x->fa) p->ofree[x->fslot]++;
        if (x->aa) p->oalloc[x->aslot]++;
    }
    RD_GROWP(p->step_s, p->cap_steps, ne);
    if (p->cap_steps > 0) {
        uint32_t c2 = p->cap_steps;
        void *na = realloc(p->step_prev, (size_t)c2 * 2 * sizeof *p->step_prev);
        if (!na) return -1;
        p->step_prev = na;
    }
    p->n_ch = p->n_cands = 0;
    uint32_t step = 0, budget = ne < RD_PLAN_STEPS / 256 ? 256 * ne + 4096 : RD_PLAN_STEPS;
    while (step < ne) {
        if (!budget--) return 0;
        /* candidates: streams whose next event may go now */
        uint32_t c0 = p->n_cands;
        for (uint32_t k = 0; k < ns; k++) {
            rd_gstr_t *g = &p->st[k];
            if (g->pos >= g->n) continue;
            const rd_gev_t *x = &p->ev[g->first + g->pos];
            if (x->fa && !(p->ost[x->fslot] & 1) && p->oalloc[x->fslot] > x->own_a) continue;
            if (x->ua && !(p->ost[x->uslot] & 1) && p->oalloc[x->uslot] > x->own_u) continue;
            if (x->aa && (p->ost[x->aslot] & 1) && p->ofree[x->aslot] > x->own_f) continue;
            if (x->pool && x->rank != p->pnext[x->pool - 1]) continue;
            RD_GROWP(p->cands, p->cap_cands, p->n_cands + 1);
            p->cands[p->n_cands++] = k;
        }
        uint32_t nc = p->n_cands - c0;
        /* order: time, affinity, then place in the window, or affinity first
     * (insertion sort: few streams) */
        for (uint32_t i = c0 + 1; i < p->n_cands; i++) {
            uint32_t v = p->cands[i], j = i;
            const rd_gstr_t *gv = &p->st[v];
            const rd_gev_t *xv = &p->ev[gv->first + gv->pos];
            uint32_t slv = xv->fa ? xv->fslot : xv->aa ? xv->aslot : UINT32_MAX;
            int fv = slv != UINT32_MAX && (p->ost[slv] >> 1) != (gv->sidx & 0x3fffffffu);
            while (j > c0) {
                uint32_t u = p->cands[j - 1];
                const rd_gstr_t *gu = &p->st[u];
                const rd_gev_t *xu = &p->ev[gu->first + gu->pos];
                uint32_t slu = xu->fa ? xu->fslot : xu->aa ? xu->aslot : UINT32_MAX;
                int fu = slu != UINT32_MAX && (p->ost[slu] >> 1) != (gu->sidx & 0x3fffffffu);
                uint64_t a = (2 * (uint64_t)gv->pos + 1) * gu->n, b = (2 * (uint64_t)gu->pos + 1) * gv->n;
                int before = affinity_first
                    ? fu < fv || (fu == fv && (xu->ts < xv->ts || (xu->ts == xv->ts && (b < a || (b == a && gu->sidx < gv->sidx)))))
                    : xu->ts < xv->ts || (xu->ts == xv->ts && (fu < fv || (fu == fv && (b < a || (b == a && gu->sidx < gv->sidx)))));
                if (before) break;
                p->cands[j] = u;
                j--;
            }
            p->cands[j] = v;
        }
        uint32_t pick;
        if (nc) {
            RD_GROWP(p->ch, p->cap_ch, p->n_ch + 1);
            p->ch[p->n_ch++] = (rd_ochoice_t){ step, c0, nc, 0 };
            pick = p->cands[c0];
        } else {
            /* dead end: back to the latest choice with an untried candidate */
            p->n_cands = c0;
            for (;;) {
                if (!p->n_ch) return 0;
                rd_ochoice_t *c = &p->ch[p->n_ch - 1];
                while (step > c->step) {   /* undo */
                    step--;
                    rd_gstr_t *g = &p->st[p->step_s[step]];
                    g->pos--;
                    const rd_gev_t *x = &p->ev[g->first + g->pos];
                    if (x->aa) { p->ost[x->aslot] = p->step_prev[2 * step + 1]; p->oalloc[x->aslot]++; }
                    if (x->fa) { p->ost[x->fslot] = p->step_prev[2 * step]; p->ofree[x->fslot]++; }
                    if (x->pool) p->pnext[x->pool - 1] = x->rank;
                }
                if (++c->tried < c->ncand) { pick = p->cands[c->cands + c->tried]; break; }
                p->n_cands = c->cands;
                p->n_ch--;
            }
        }
        /* apply */
        rd_gstr_t *g = &p->st[pick];
        const rd_gev_t *x = &p->ev[g->first + g->pos];
        uint32_t own = (g->sidx & 0x3fffffffu) << 1;
        p->step_s[step] = pick;
        if (x->fa) { p->step_prev[2 * step] = p->ost[x->fslot]; p->ost[x->fslot] = own; p->ofree[x->fslot]--; }
        if (x->aa) { p->step_prev[2 * step + 1] = p->ost[x->aslot]; p->ost[x->aslot] = own | 1; p->oalloc[x->aslot]--; }
        if (x->pool) p->pnext[x->pool - 1] = x->rank + 1;
        g->pos++;
        step++;
    }
    if (ne > r->plan_cap) {
        uint32_t *na = realloc(r->plan_seq, ne * sizeof *na);
        if (!na) return -1;
        r->plan_seq = na;
        r->plan_cap = ne;
    }
    for (uint32_t i = 0; i < ne; i++) r->plan_seq[i] = p->st[p->step_s[i]].sidx;
    r->plan_n = ne;
    r->plan_pos = 0;
    r->plan_ts = ts;
    r->plan_active = 1;
    return 1;
}

static int rd_force_push(pst_reader_t *r, rd_stream_t *t, uint64_t target)
{
    if (r->n_force == r->cap_force) {
        uint32_t cap = r->cap_force ? r->cap_force * 2 : 8;
        struct rd_force *a = realloc(r->force, cap * sizeof *a);
        if (!a) return PSC_ENOMEM;
        r->force = a;
        r->cap_force = cap;
    }
    r->force[r->n_force++] = (struct rd_force){ t, target };
    t->on_force = 1;
    return 0;
}

static void rd_force_pop(pst_reader_t *r)
{
    r->force[--r->n_force].s->on_force = 0;
}

int pst_next(pst_reader_t *r, pst_event_t *ev)
{
    if (r->plan_active) {   /* a tick planned by rd_plan_build: its streams' heads, in order */
        if (r->plan_pos < r->plan_n) return rd_emit(r, r->sv[r->plan_seq[r->plan_pos++]], ev);
        r->plan_active = 0;
    }
    /* the usual case: nothing forced, the top head is safe and free to go
     * (or, tied with other heads, the earliest of them in the tick) */
    if (!r->n_force && r->hq.n) {
        rd_stream_t *s = r->hq.a[0], *t;
        uint64_t tseq;
        int why;
        if (rd_safe(r, &s->head)) {
            if (!r->causal_times || !rd_top_tied(r)) {
                if (rd_constraint(r, s, &s->head, &t, &tseq, &why) == RD_C_NONE) return rd_emit(r, s, ev);
            } else if (!r->plan_tried_ts_valid || r->plan_tried_ts != s->head.ts) {
                r->plan_tried_ts = s->head.ts;
                r->plan_tried_ts_valid = 1;
                /* time first; if that search gives up, affinity first (each
                 * finds orders the other misses within its budget) */
                int pr = rd_plan_build(r, s->head.ts, 0);
                if (pr == 0) pr = rd_plan_build(r, s->head.ts, 1);
                if (pr < 0) return PSC_ENOMEM;
                if (pr) return rd_emit(r, r->sv[r->plan_seq[r->plan_pos++]], ev);
                r->st.plan_failed++;
                return pst_next(r, ev);
            } else if ((t = rd_tie_scan(r, 0, s->head.ts, NULL))) {
                if (t != s && rd_constraint(r, s, &s->head, &t, &tseq, &why) != RD_C_NONE) {
                    t = rd_tie_scan(r, 0, s->head.ts, NULL);
                    r->st.causal_reordered++;
                }
                return rd_emit(r, t, ev);
            }
        }
    }
    for (;;) {
        rd_stream_t *s, *t;
        uint64_t tseq;
        int why = 0, c, rc;
        if (r->n_force) {
            /* a stream being drained up to a free / a pool event another one waits for */
            struct rd_force *f = &r->force[r->n_force - 1];
            s = f->s;
            if (!s->qlen || s->emit_seq > f->target) { rd_force_pop(r); continue; }
            rd_hev_t *e = &s->head;
            c = rd_constraint(r, s, e, &t, &tseq, &why);
            if (c == RD_C_FORCE && !t->on_force) {
                if ((rc = rd_force_push(r, t, tseq))) return rc;
                if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
                continue;
            }
            if (c != RD_C_NONE && c != RD_C_BLOCKED && why == RD_WHY_CAUSAL) r->st.unordered++;   /* a cycle, or nothing to wait for */
            uint64_t target = f->target;
            rc = rd_emit(r, s, ev);
            if (rc < 0) return rc;
            if (s->emit_seq > target && r->n_force && r->force[r->n_force - 1].s == s) rd_force_pop(r);
            return 1;
        }
        if (!r->hq.n) {
            if (r->eof) return 0;
            if ((rc = rd_read_chunk(r)) < 0) return rc;
            continue;
        }
        s = r->hq.a[0];
        rd_hev_t *e = &s->head;
        if (!rd_safe(r, e)) {
            if ((rc = rd_read_chunk(r)) < 0) return rc;
            continue;
        }
        c = rd_constraint(r, s, e, &t, &tseq, &why);
        if (c != RD_C_NONE) {
            rd_stream_t *o = rd_tie_scan(r, 0, e->ts, NULL);
            if (o && o != s) {
                if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
                return rd_emit(r, o, ev);
            }
            if (c == RD_C_BLOCKED) return rd_emit(r, s, ev);   /* an unknown free (rd_apply_effects counts it) */
        }
        if (c == RD_C_FORCE) {
            if ((rc = rd_force_push(r, t, tseq))) return rc;
            if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
            continue;
        }
        if (c == RD_C_WAIT && !r->causal_times && !r->eof && !rd_window_passed(r, e)) {
            if ((rc = rd_read_chunk(r)) < 0) return rc;
            continue;
        }
        if (c == RD_C_WAIT || c == RD_C_UNORDERED) r->st.unordered++;
        return rd_emit(r, s, ev);
    }
}
