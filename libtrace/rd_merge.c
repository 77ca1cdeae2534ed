/* rd_merge.c — the reader's merge: one order over all streams, and pst_next.
 *
 * The rules (FORMAT.md, "Reading: the merge order"): the next event is the
 * queued head with the smallest (ts, stream id) — a binary heap of the
 * streams with queued events; pool events of one pool come out in pool_seq
 * order (a min-heap of queued (pool_seq, stream, seq) per pool); and an
 * allocation of an address still live in the reader's view follows the
 * queued free of that address in another stream (live-address sets, and
 * the pending frees chained per address); since format 1.3 the events of
 * one address instead come out in the order of their versions (VER
 * records, or implicit ones: rd_ver_of), which makes that order exact
 * across threads. When a head must wait for another stream's event, that
 * stream is drained up to it first (a stack of force targets, which may
 * recurse); cycles and frees that never come are handed out anyway and
 * counted.
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

/* Where k is (1), or the empty slot where looking for it stopped (0), in
 * *at. The table exists (s->k). For the fast path of pst_next, which looks
 * once and then changes that slot in place (rd_fast_heap). */
/* (always_inline: the scan budget's few lines made GCC call it out of line
 * from rd_fast_heap, +0.7% instructions per event on bench_reader --read) */
static inline __attribute__((always_inline)) int rd_aset_slot(const rd_aset_t *s, uint64_t k, uint32_t *at)
{
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k || !x) { *at = i; return x == k; }
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

/* q is full: twice the room, the entries moved to the front. 0 or PSC_ENOMEM. */
static __attribute__((noinline)) int rd_pfifo_grow(rd_pfifo_t *q)
{
    if (q->cap > (UINT32_MAX >> 2)) return PSC_ENOMEM;
    uint32_t cap = q->cap ? q->cap * 2 : 64;
    uint32_t *a = malloc(cap * sizeof *a);
    if (!a) return PSC_ENOMEM;
    for (uint32_t i = 0; i < q->n; i++) a[i] = q->a[(q->h + i) & (q->cap - 1)];
    free(q->a);
    q->a = a;
    q->cap = cap;
    q->h = 0;
    return 0;
}

int rd_pend_add(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq, uint64_t ts)
{
    rd_pfifo_t *q = &s->pq[sp];
    if (q->n == q->cap && rd_pfifo_grow(q)) return PSC_ENOMEM;
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
        ri = (uint32_t)(*v >> 32);
        rd_prun_t *last = &t->runs[ri - 1];                  /* extend the stream's run */
        t->nodes[last->tail - 1].next = me;
        last->tail = me;
        last->len++;
        q->a[(q->h + q->n++) & (q->cap - 1)] = ri;
        return 0;
    }
    /* room in the map first, so nothing below fails half-way (growing
     * moves the entries: look v up again) */
    if ((!v && rd_amap_reserve(&t->head)) || rd_pend_new_run(t, &ri)) goto nomem;
    v = rd_amap_ref(&t->head, addr);
    if (v) {
        uint32_t li = (uint32_t)(*v >> 32);
        rd_prun_t *last = &t->runs[li - 1];
        t->nodes[last->tail - 1].next = me;
        last->next = ri;
        t->runs[ri - 1] = (rd_prun_t){ me, me, 1, li, 0, s->idx };
        *v = (*v & 0xffffffffu) | (uint64_t)ri << 32;
    } else {
        t->runs[ri - 1] = (rd_prun_t){ me, me, 1, 0, 0, s->idx };
        rd_amap_insert(&t->head, addr, (uint64_t)ri | (uint64_t)ri << 32);
    }
    q->a[(q->h + q->n++) & (q->cap - 1)] = ri;
    return 0;
nomem:
    rd_pend_free_node(t, me);
    return PSC_ENOMEM;
}

/* The free (s, seq) of addr goes out. If it is indexed, it is the oldest of
 * s's indexed frees (they go out in s's order): the front of s's FIFO, the
 * head node of the run there. Otherwise (a versioned free, or one from
 * before a second stream appeared) that node is another event's. */
static void rd_pend_del(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq)
{
    rd_pfifo_t *q = &s->pq[sp];
    if (!q->n) return;
    uint32_t ri = q->a[q->h];
    rd_prun_t *ru = &t->runs[ri - 1];
    uint32_t cur = ru->head;
    if (t->nodes[cur - 1].seq != seq) return;           /* not indexed */
    q->h = (q->h + 1) & (q->cap - 1);
    q->n--;
    uint32_t next = t->nodes[cur - 1].next;
    if (ru->prev) t->nodes[t->runs[ru->prev - 1].tail - 1].next = next;
    if (ru->len > 1) {
        ru->head = next;                                /* the run's next node heads it now */
        ru->len--;
    } else {
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

/* ---- versions (minor 3) ------------------------------------------------------ */
/* An event's VER records give the versions of its ordered addresses in field
 * order (format.h, pst_vslot). vexp[slot] is the version the slot's next
 * event must carry: an event whose version is ahead of it waits for the
 * events of that slot before it, wherever they are queued. One behind it
 * (two threads that raced for one counter, colliding addresses only) is a
 * duplicate and goes. */

/* The ordered addresses of e, in field order: what its versions belong to. */
static inline unsigned rd_ver_addrs(const rd_hev_t *e, uint64_t a[2]) { return pst_ver_addrs(e->type, e->f, a); }

static inline int rd_vahead(uint16_t v, uint16_t x)
{
    uint16_t d = (uint16_t)(v - x);
    return d != 0 && d < 0x8000;
}

/* The versions of e, the head of s, into v (the number of its ordered
 * addresses a[], or 0 when it has none that count). An event without VER
 * records in a stream that has had them has implicit versions: the slot's
 * previous version was its own thread's, so it is the one after that
 * (vlast); if another stream's came out since (only when an event went
 * ahead), the slot's expected one. */
static __attribute__((noinline)) unsigned rd_ver_of_(const pst_reader_t *r, const rd_stream_t *s, const rd_hev_t *e, rd_vinfo_t *o)
{
    unsigned n = rd_ver_addrs(e, o->a);
    o->n = 0;
    if (!r->vexp || !n) return 0;
    if (e->n_ver) {
        if (n != e->n_ver) return 0;
        o->v[0] = e->ver[0];
        o->v[1] = e->ver[1];
        for (unsigned i = 0; i < n; i++) o->sl[i] = pst_vslot(o->a[i]);
        return o->n = n;
    }
    if (!s->vers) return 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t sl = o->sl[i] = pst_vslot(o->a[i]);
        uint64_t l = r->vlast[sl];
        o->v[i] = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
        if (i == 1 && sl == o->sl[0]) o->v[1] = pst_vnext(o->v[0]);
    }
    return o->n = n;
}

/* rd_ver_of_ of s's head, computed once per head: the merge asks for it when
 * it checks the head (rd_constraint) and again when the head goes out
 * (rd_ver_apply). The answer depends on the head and on the counters
 * (vexp, vlast), so it is kept until the head changes (seq) or a counter
 * is written (r->vgen). Other events (e not the head) are computed into
 * tmp. The answer holds until the next rd_ver_of of s. */
static inline __attribute__((always_inline)) const rd_vinfo_t *rd_ver_of(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_vinfo_t *tmp)
{
    if (e != &s->head) {
        rd_ver_of_(r, s, e, tmp);
        return tmp;
    }
    if (!(s->vc_valid && s->vc_gen == r->vgen && s->vc_seq == e->seq)) {
        unsigned t = e->type;
        if ((t == PST_EV_MALLOC || t == PST_EV_FREE || t == PST_EV_CALLOC) && !e->n_ver && s->vers && r->vexp && e->f[0]) {
            /* rd_ver_of_'s answer for the common heads, inline: one ordered
             * address (f[0]) with an implicit version */
            rd_vinfo_t *o = &s->vc;
            uint32_t sl = pst_vslot(e->f[0]);
            uint64_t l = r->vlast[sl];
            o->a[0] = e->f[0];
            o->sl[0] = sl;
            o->v[0] = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
            o->n = 1;
        } else {
            rd_ver_of_(r, s, e, &s->vc);
        }
        s->vc_gen = r->vgen;
        s->vc_seq = e->seq;
        s->vc_valid = 1;
    }
    return &s->vc;
}

/* -1: e carries no versions that apply (an older trace, one thread, a
 * count that does not match its addresses); 0: its versions (rd_ver_of,
 * into *vip) are next in their slots; otherwise the addresses it must wait
 * for, bit i for a[i]. */
static inline __attribute__((always_inline)) int rd_ver_state(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, const rd_vinfo_t **vip,
                               rd_vinfo_t *tmp)
{
    const rd_vinfo_t *vi = *vip = rd_ver_of(r, s, e, tmp);
    if (!vi->n) return -1;
    uint32_t s0 = vi->sl[0];
    int m = rd_vahead(vi->v[0], r->vexp[s0]);
    if (vi->n == 2) {
        uint32_t s1 = vi->sl[1];
        if (rd_vahead(vi->v[1], s1 == s0 ? pst_vnext(vi->v[0]) : r->vexp[s1])) m |= 2;
    }
    return m;
}

/* Events handed out ahead of their slot's next version, because what they
 * waited for was another address's (rd_vwait_resolve): (slot << 16 |
 * version) -> 1 until the slot's count reaches them. */
static inline uint64_t rd_ahead_key(uint32_t sl, uint16_t v) { return (uint64_t)sl << 16 | v; }

/* The version slot sl expects next what follows v, past the versions that
 * already went ahead (each taken off `ahead` as the count reaches it). */
static inline uint16_t rd_vexp_after(pst_reader_t *r, uint32_t sl, uint16_t v)
{
    v = pst_vnext(v);
    uint64_t *p;
    while (psc_map_count(&r->ahead) && (p = psc_map_get_sz(&r->ahead, rd_ahead_key(sl, v), sizeof(uint64_t)))) {
        psc_map_erase_sz(&r->ahead, p, sizeof(uint64_t));
        v = pst_vnext(v);
    }
    return v;
}

/* e goes out: its slots expect the versions after its own, and after any
 * that went ahead. An event ahead of its slot that is not in the ahead set
 * jumps the slot's count (an event of that slot was lost) and is counted
 * in ver_gaps. */
static inline __attribute__((always_inline)) void rd_ver_apply_vi(pst_reader_t *r, const rd_stream_t *s, const rd_vinfo_t *vi)
{
    for (unsigned i = 0; i < vi->n; i++) {
        uint32_t sl = vi->sl[i];
        uint16_t x = r->vexp[sl], v = vi->v[i];
        r->vlast[sl] = (uint64_t)(s->idx + 1) << 16 | v;
        r->vgen++;
        if ((uint16_t)(v - x) >= 0x8000) continue;        /* behind: a duplicate */
        if (v != x) {
            if (psc_map_count(&r->ahead) && psc_map_get_sz(&r->ahead, rd_ahead_key(sl, v), sizeof(uint64_t)))
                continue;                                   /* went ahead: the count reaches it later */
            r->st.ver_gaps++;
        }
        r->vexp[sl] = rd_vexp_after(r, sl, v);
    }
}

static void rd_ver_apply(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e)
{
    rd_vinfo_t tmp;
    rd_ver_apply_vi(r, s, rd_ver_of(r, s, e, &tmp));
}

/* ---- merge ------------------------------------------------------------------ */

enum { RD_C_NONE, RD_C_FORCE, RD_C_WAIT, RD_C_UNORDERED, RD_C_BLOCKED, RD_C_VWAIT };
enum { RD_WHY_CAUSAL = 1, RD_WHY_POOL = 2 };

/* realloc, reallocarray and mremap are stamped before their call
 * (FORMAT.md "Time"): the block they acquire may have been freed by another
 * thread up to a tick or so later by the clock. */
#define RD_ACQUIRE_SLACK (4 * (uint64_t)PST_TICK_NS)
static inline int rd_acquires_inside(unsigned t)
{
    return t == PST_EV_REALLOC || t == PST_EV_REALLOCARRAY || t == PST_EV_MREMAP;
}

/* The scans below look through other streams' queued bytes. Together they
 * decode at most RD_SCAN_BASE + scan_per_event records per event read
 * (rd_internal.h): the records one scan may still decode end at this
 * count of scan_steps. */
static inline uint64_t rd_scan_budget(const pst_reader_t *r)
{
    return r->scan_base + r->scan_per_event * r->decoded;
}

/* A scan has used up the budget: it answers "nothing found", so the event
 * goes without the order the scan would have found; that is counted
 * (scans_cut, and st.unordered, which pst_status shows). */
static __attribute__((noinline, cold)) int rd_scan_cut(pst_reader_t *r)
{
    r->scans_cut++;
    r->st.unordered++;
    return 0;
}

/* The queued event of another stream than s, stamped up to lim, that frees
 * (want_free) or allocates address a of space sp, the earliest stamped of
 * the first one in each stream: 1 with its stream and seq. */
static __attribute__((noinline)) int rd_addr_scan(pst_reader_t *r, const rd_stream_t *s, int sp, uint64_t a, int want_free, uint64_t lim,
                        rd_stream_t **t, uint64_t *tseq)
{
    int found = 0;
    uint64_t best_ts = 0, budget = rd_scan_budget(r);
    r->scans++;
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rd_stream_t *o = r->sv[i];
        if (o == s || !o->qlen || o->head.ts > lim || (found && o->head.ts >= best_ts)) continue;
        if (r->scan_steps >= budget) return rd_scan_cut(r);
        pst_enc_t d = o->hdec;
        const uint8_t *p = o->b + o->bhead, *end = o->b + o->btail;
        rd_hev_t x = o->head;
        uint64_t seq = o->emit_seq, ts = o->head.ts;
        for (;;) {
            if (x.type != PST_EV_TS && x.type != PST_EV_VER) {
                int xsp;
                uint64_t xa;
                if ((want_free ? rd_frees_addr(&x, &xsp, &xa) : rd_allocs_addr(&x, &xsp, &xa)) && xsp == sp && xa == a) {
                    if (!found || ts < best_ts) { found = 1; best_ts = ts; *t = o; *tseq = seq; }
                    break;
                }
                seq++;
            }
            if (p >= end || !(p = rd_dec_rec(r, &d, p, end, &x, r->idbuf))) break;
            if (++r->scan_steps >= budget) return rd_scan_cut(r);
            ts = d.last_ts;
            if (ts > lim || (found && ts >= best_ts)) break;
        }
    }
    return found;
}

/* Versions say e may go (its own are next in their slots, or behind them):
 * does the live set agree? The counters are plain loads and stores, so two
 * threads on one slot can both take its next version (a duplicate), and a
 * thread preempted between its load and its store puts the counter back
 * (versions already seen are handed out again). Duplicates are "behind" and
 * go by time alone, and an implicit version after another stream's
 * duplicate reads as the slot's next (rd_ver_of): either can let a free and
 * the re-allocation of its address come out the wrong way round when their
 * times tie. So a versioned free of an address not live, or allocation of
 * one live, still looks for the queued allocation (free) of that address in
 * another stream, and that stream goes first up to it (rules 3 and 4). The
 * free is stamped no later than e, except the old block of a realloc handed
 * to another thread inside the call (FORMAT.md "Time"), looked for last.
 * Inline: every versioned head passes here (its two live-set probes cost
 * less than a call with this many arguments); the scans stay calls. */
static inline __attribute__((always_inline))
int rd_ver_live_check(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_stream_t **t, uint64_t *tseq)
{
    int sp;
    uint64_t a;
    if ((rd_frees_addr(e, &sp, &a) || rd_uses_addr(e, &sp, &a)) && !rd_aset_has(&r->live[sp], a) &&
        rd_addr_scan(r, s, sp, a, 0, e->ts, t, tseq))
        return RD_C_FORCE;
    if (rd_allocs_addr(e, &sp, &a) && rd_aset_has(&r->live[sp], a) &&
        !(e->type == PST_EV_MMAP && (e->f[3] & RD_MAP_FIXED_FLAG)) &&
        (rd_addr_scan(r, s, sp, a, 1, e->ts, t, tseq) || rd_addr_scan(r, s, sp, a, 1, UINT64_MAX, t, tseq)))
        return RD_C_FORCE;
    return RD_C_NONE;
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
    /* versions (minor 3) order the events of an address exactly: rules 3
     * and 4 below are for events without them */
    const rd_vinfo_t *vi;
    rd_vinfo_t vtmp;
    int vs = e->n_ver || s->vers ? rd_ver_state(r, s, e, &vi, &vtmp) : -1;
    if (vs >= 0) {
        *why = RD_WHY_CAUSAL;
        if (vs) return RD_C_VWAIT;
        return r->n_sv > 1 ? rd_ver_live_check(r, s, e, t, tseq) : RD_C_NONE;
    }
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
 * window has (for writers without SYNC chunks), or the input has ended.
 *
 * Once a trace has shown exact watermarks (minor >= 2), the window is only
 * a memory guard: a writer whose flush rounds were starved (64 threads on
 * a loaded machine: six SYNC chunks in 2.5 s, a thread's events left in
 * its ring for over a second while busy threads drained theirs) writes
 * chunks that come later than the window, and an event let out by the
 * window went ahead of its address's earlier events still unread: a free
 * came out before its allocation (unknown free, and a leak when the
 * allocation came), and each such event scanned every queue for what it
 * waited for. So the window applies there only when sync_guard events are
 * queued (each counted in guard_early). */
static inline int rd_safe(pst_reader_t *r, const rd_hev_t *e)
{
    if (r->eof || e->ts < r->sync_ts) return 1;
    if (!rd_window_passed(r, e)) return 0;
    if (!r->sync_exact) return 1;
    if (r->st.queued < r->sync_guard) return 0;
    r->guard_early++;
    return 1;
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

static inline __attribute__((always_inline)) int rd_emit_out(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev, int rc);

/* Hand out the head of s into ev, then decode the next one: any head
 * (rd_emit tries rd_fast_heap first). */
static __attribute__((noinline)) int rd_emit_any(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    rd_hev_t *e = &s->head;
    unsigned t = e->type;
    if (e->n_ver || s->vers) rd_ver_apply(r, s, e);
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
            if (s->pq[RD_SP_HEAP].n)   /* else it has no indexed free */
                rd_pend_del(&r->pend[RD_SP_HEAP], e->f[0], s, RD_SP_HEAP, e->seq);
            if (!rd_aset_del(&r->live[RD_SP_HEAP], e->f[0], s->idx)) r->st.unknown_frees++;
        }
        break;
    default:
        rc = rd_apply_effects(r, s, e);
        break;
    }
    return rd_emit_out(r, s, ev, rc);
}

/* The head of s has gone out of its queue (emit_seq, qlen) and had its
 * effects on the merge's tables: the event into ev, the counts, the next
 * head, the heap. rc: the effects' answer. */
static inline __attribute__((always_inline)) int rd_emit_out(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev, int rc)
{
    rd_hev_t *e = &s->head;
    unsigned t = e->type;
    ev->type = e->type;
    ev->stream = s->id;
    ev->tid = s->tid;
    ev->seq = e->seq;
    ev->ts = e->ts;
    ev->stack = e->stack;
    ev->n_ver = e->n_ver;
    ev->ver[0] = e->ver[0];
    ev->ver[1] = e->ver[1];
    /* the layout's fields only (the rest of ev->f is left as it was); up
     * to 4, as many as any heap record has, without a loop */
    switch (r->nf[t]) {
    default:
        for (unsigned i = 4; i < r->nf[t]; i++) ev->f[i] = e->f[i];
        /* fall through */
    case 4: ev->f[3] = e->f[3]; /* fall through */
    case 3: ev->f[2] = e->f[2]; /* fall through */
    case 2: ev->f[1] = e->f[1]; /* fall through */
    case 1: ev->f[0] = e->f[0]; /* fall through */
    case 0: break;
    }
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
    /* last_out_ts starts at 0, below every time: the first event is never late */
    if (e->ts < r->last_out_ts) r->st.late++;
    else r->last_out_ts = e->ts;
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

/* rd_fast_heap's realloc (old, ret, size), a call of its own (it is
 * rarer, and has two addresses): old and ret not 0, old live, and ret
 * either old (in place: only the versions change) or not live (old is
 * freed, ret allocated). Versions as rd_ver_of_ gives them (one slot per
 * ordered address, the second one's version after the first's when both
 * share a slot), each exactly the one its slot expects, then applied as
 * rd_ver_apply does. */
static __attribute__((noinline)) int rd_fast_realloc(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    rd_hev_t *e = &s->head;
    uint64_t a0 = e->f[0], a1 = e->f[1];
    rd_aset_t *ls = &r->live[RD_SP_HEAP];
    if (!a0 || !a1 || e->n_ver || !ls->k) return 0;
    rd_vinfo_t vi;
    vi.n = 0;
    if (s->vers) {
        if (!r->vexp) return 0;
        vi.n = a1 != a0 ? 2 : 1;
        for (unsigned j = 0; j < vi.n; j++) {
            uint32_t sl = vi.sl[j] = pst_vslot(j ? a1 : a0);
            uint64_t l = r->vlast[sl];
            vi.v[j] = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
        }
        if (vi.v[0] != r->vexp[vi.sl[0]]) return 0;
        if (vi.n == 2) {
            if (vi.sl[1] == vi.sl[0]) vi.v[1] = pst_vnext(vi.v[0]);
            else if (vi.v[1] != r->vexp[vi.sl[1]]) return 0;
        }
    }
    uint32_t i0, i1 = 0;
    if (!rd_aset_slot(ls, a0, &i0) || !ls->live[i0]) return 0;        /* old not live: rule 3 / its scan */
    int found1 = 0;
    if (a1 != a0) {
        found1 = rd_aset_slot(ls, a1, &i1);
        if (found1 && ls->live[i1]) return 0;                           /* ret live: rule 4 / its scans */
        if (!found1 && (ls->n + ls->dead + 1) * 2 > ls->mask + 1) return 0;   /* rd_aset_add rebuilds */
    }
    if (vi.n) rd_ver_apply_vi(r, s, &vi);
    s->emit_seq++;
    s->qlen--;
    r->st.queued--;
    if (a1 != a0) {                 /* rd_apply_effects: old freed (it is live), ret allocated */
        if (s->pq[RD_SP_HEAP].n) rd_pend_del(&r->pend[RD_SP_HEAP], a0, s, RD_SP_HEAP, e->seq);
        ls->live[i0] = 0; ls->n--; ls->dead++;
        ls->own[i0] = s->idx;
        if (found1) {
            ls->live[i1] = 1; ls->dead--; ls->n++;
        } else {
            ls->k[i1] = a1;
            ls->live[i1] = 1;
            ls->n++;
        }
        ls->own[i1] = s->idx;
    }
    return rd_emit_out(r, s, ev, 0);
}

/* The usual head, decided and handed out in one go: a malloc, calloc,
 * free or realloc of addresses (not 0) without VER records, whose implicit
 * versions, if its stream has versions, are exactly the ones their slots
 * expect. What rd_constraint would answer for it needs only the live set,
 * so one probe per address decides, and the same slots then take the
 * effects that rd_emit_any would give them: a free of a live address, or
 * with one stream any free; an allocation of an address not live, when
 * the table need not be rebuilt for it; a realloc that keeps a live block
 * in place, or moves one to an address not live. Everything else (a
 * version ahead or behind, an address to look for in other streams, an
 * unknown free among several streams, a failed realloc) returns 0 before
 * anything has changed, for rd_constraint and rd_emit_any to decide; so a
 * caller that has decided that the head goes may call it first too (the
 * effects it gives are rd_emit_any's). Otherwise rd_emit_out's answer. */
static inline __attribute__((always_inline)) int rd_fast_heap(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    rd_hev_t *e = &s->head;
    unsigned t = e->type;
    uint64_t a = e->f[0];
    rd_aset_t *ls = &r->live[RD_SP_HEAP];
    if (t == PST_EV_REALLOC) return rd_fast_realloc(r, s, ev);
    if ((t != PST_EV_MALLOC && t != PST_EV_CALLOC && t != PST_EV_FREE) || !a || e->n_ver || !ls->k) return 0;
    uint32_t sl = 0, i;
    uint16_t v = 0;
    if (s->vers) {                  /* rd_ver_of's implicit version (its inline case) */
        if (!r->vexp) return 0;
        sl = pst_vslot(a);
        uint64_t l = r->vlast[sl];
        v = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
        if (v != r->vexp[sl]) return 0;
    }
    int found = rd_aset_slot(ls, a, &i), live = found && ls->live[i];
    if (t == PST_EV_FREE) {
        if (!live && r->n_sv > 1) return 0;     /* rule 3, or rd_ver_live_check's scan */
    } else if (live || (!found && (ls->n + ls->dead + 1) * 2 > ls->mask + 1)) {
        return 0;                               /* rule 4 / its scans; or rd_aset_add rebuilds */
    }
    if (s->vers) {                  /* rd_ver_apply of a version that is next */
        r->vlast[sl] = (uint64_t)(s->idx + 1) << 16 | v;
        r->vgen++;
        r->vexp[sl] = rd_vexp_after(r, sl, v);
    }
    s->emit_seq++;
    s->qlen--;
    r->st.queued--;
    if (t == PST_EV_FREE) {         /* rd_aset_del at slot i */
        if (s->pq[RD_SP_HEAP].n) rd_pend_del(&r->pend[RD_SP_HEAP], a, s, RD_SP_HEAP, e->seq);
        if (live) {
            ls->live[i] = 0; ls->n--; ls->dead++;
            ls->own[i] = s->idx;
        } else {
            r->st.unknown_frees++;
        }
    } else if (found) {             /* rd_aset_add at slot i: a dead slot comes back */
        ls->live[i] = 1; ls->dead--; ls->n++;
        ls->own[i] = s->idx;
    } else {                        /* or an empty one is taken */
        ls->k[i] = a;
        ls->live[i] = 1;
        ls->own[i] = s->idx;
        ls->n++;
    }
    return rd_emit_out(r, s, ev, 0);
}

/* Any head: rd_fast_heap when it takes it, else the general effects. */
static inline __attribute__((always_inline)) int rd_emit(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    int fr = rd_fast_heap(r, s, ev);
    return fr ? fr : rd_emit_any(r, s, ev);
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

/* Does another head share the top's time? */
static inline int rd_top_tied(const pst_reader_t *r)
{
    const rd_sheap_t *h = &r->hq;
    uint64_t ts = h->a[0]->head.ts;
    return (h->n > 1 && h->a[1]->head.ts == ts) || (h->n > 2 && h->a[2]->head.ts == ts);
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

/* A head waits on a version (RD_C_VWAIT): which event is it waiting for?
 * The counter of a slot is shared by every address that maps to it, so the
 * event with the version it lacks may belong to another address; then
 * there is nothing to wait for. Only an event of its own address with a
 * version in the gap is a real wait, and that one is stamped no later than
 * e (the address passed from it to e's thread: FORMAT.md "Time"), so it is
 * queued already, behind some stream's head: that stream is drained up to
 * it (RD_C_FORCE). The one exception: another thread may be handed the old
 * block of a realloc (reallocarray, mremap) inside that call, which is
 * stamped when it returns, however long that took; so an allocation of an
 * address still live looks through everything queued. (That realloc is
 * queued: its thread was in flight from its version on, so no watermark
 * passed before it was published.) Otherwise e goes ahead of its slot's
 * count (RD_C_NONE, noted in the ahead set): a wait on another address, or
 * on a lost event (the count jumps when the slot is RD_VER_LOST behind,
 * counted in ver_gaps). */
#define RD_VER_LOST  1024u

/* The first queued event, stamped up to lim, of an address e waits for (bit
 * j of vs: a[j]) with a version in its gap [lo[j], ver[j]): 1 with its
 * stream and seq. Implicit versions are followed along each stream: from
 * the slot's last version out if that was the stream's, else unknown (the
 * stream's first event on the slot then counts as in the gap: its thread's
 * previous one on the slot has gone out, so e's came later). */
static int rd_vwait_scan(pst_reader_t *r, rd_stream_t *s, unsigned n, int vs, const uint64_t *a,
                         const uint16_t *v, const uint16_t *lo, uint64_t lim, rd_stream_t **t, uint64_t *tseq)
{
    uint32_t sl[2] = { pst_vslot(a[0]), n > 1 ? pst_vslot(a[1]) : UINT32_MAX };
    uint64_t budget = rd_scan_budget(r);
    r->scans++;
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rd_stream_t *o = r->sv[i];
        if (o == s || !o->qlen || o->head.ts > lim) continue;
        if (r->scan_steps >= budget) return rd_scan_cut(r);
        pst_enc_t d = o->hdec;
        const uint8_t *p = o->b + o->bhead, *end = o->b + o->btail;
        rd_hev_t x = o->head;
        uint64_t seq = o->emit_seq;
        int vers = o->vers, known[2], past[2] = { 0, 0 };
        uint16_t cur[2];
        for (unsigned j = 0; j < 2; j++) {
            uint64_t l = sl[j] == UINT32_MAX ? 0 : r->vlast[sl[j]];
            known[j] = (l >> 16) == (uint64_t)o->idx + 1;
            cur[j] = (uint16_t)l;
        }
        for (;;) {
            uint64_t xa[2];
            unsigned nx;
            if (x.type != PST_EV_TS && x.type != PST_EV_VER && (nx = rd_ver_addrs(&x, xa))) {
                if (x.n_ver) vers = 1;
                int expl = x.n_ver == nx;
                if (expl || (vers && !x.n_ver))
                    for (unsigned k = 0; k < nx; k++)
                        for (unsigned j = 0; j < n; j++) {
                            if (!(vs >> j & 1) || past[j] || pst_vslot(xa[k]) != sl[j]) continue;
                            if (expl) { cur[j] = x.ver[k]; known[j] = 1; }
                            else if (known[j]) cur[j] = pst_vnext(cur[j]);
                            int in_gap = !known[j] || (uint16_t)(cur[j] - lo[j]) < (uint16_t)(v[j] - lo[j]);
                            if (known[j] && !in_gap && (uint16_t)(cur[j] - lo[j]) < 0x8000) { past[j] = 1; continue; }
                            if (in_gap && xa[k] == a[j]) {
                                *t = o;
                                *tseq = seq;
                                return 1;
                            }
                        }
                seq++;
            } else if (x.type != PST_EV_TS && x.type != PST_EV_VER) {
                seq++;
            }
            if (p >= end || !(p = rd_dec_rec(r, &d, p, end, &x, r->idbuf)) || d.last_ts > lim) break;
            if (++r->scan_steps >= budget) return rd_scan_cut(r);
        }
    }
    return 0;
}

static int rd_vwait_resolve(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_stream_t **t, uint64_t *tseq)
{
    uint64_t a[2] = { 0, 0 }, la;
    uint16_t lo[2] = { 0, 0 }, v[2] = { 0, 0 };
    const rd_vinfo_t *vi;
    rd_vinfo_t vtmp;
    int vs = rd_ver_state(r, s, e, &vi, &vtmp), sp;
    if (vs <= 0) return RD_C_NONE;
    unsigned n = vi->n;
    for (unsigned j = 0; j < n; j++) { a[j] = vi->a[j]; v[j] = vi->v[j]; }
    uint32_t s0 = pst_vslot(a[0]);
    for (unsigned j = 0; j < n; j++) {
        uint32_t sl = pst_vslot(a[j]);
        lo[j] = j == 1 && sl == s0 ? pst_vnext(v[0]) : r->vexp[sl];
    }
    int live_alloc = rd_allocs_addr(e, &sp, &la) && rd_aset_has(&r->live[sp], la);
    if (rd_vwait_scan(r, s, n, vs, a, v, lo, live_alloc ? UINT64_MAX : e->ts, t, tseq)) return RD_C_FORCE;
    /* Nothing queued to wait for, but a trace with exact watermarks can
     * still deliver it: e was let out before the watermark passed it (the
     * memory guard, rd_safe). Going ahead may be wrong: counted. */
    if (r->guard_early && !r->eof && e->ts >= r->sync_ts) r->st.unordered++;
    for (unsigned j = 0; j < n; j++) {
        if (!(vs >> j & 1)) continue;
        uint32_t sl = pst_vslot(a[j]);
        if ((uint16_t)(v[j] - lo[j]) > RD_VER_LOST) {
            r->vexp[sl] = v[j];                /* lost: the count jumps */
            r->vgen++;
            r->st.ver_gaps++;
            continue;
        }
        int is_new;
        uint64_t *p = psc_map_put_sz(&r->ahead, rd_ahead_key(sl, v[j]), &is_new, sizeof(uint64_t));
        if (!p) return PSC_ENOMEM;
        *p = 1;
    }
    return RD_C_NONE;
}

/* An allocation of a live address whose free is not queued, in a trace
 * whose times are not causal (minor < 2): the free may be stamped later
 * than the allocation, so it may still be in a chunk not read yet, and the
 * reader reads on for it. Until when? The free happened before the
 * allocation, so it was in its thread's buffer before the allocation's
 * chunk was cut; the writer's next flush round wrote it, and the SYNC
 * chunk closing that round follows it in the file. A SYNC watermark past
 * the allocation's time says such a round has begun after it; one more
 * SYNC after that one covers the rare event a minor-1 writer left being
 * encoded during a round. Without SYNC chunks, only the window ends the
 * wait. Waiting longer only fills the queue: a trace of malloc churn,
 * read with the 1 s window, queued 1 s of events (4.9 M, 120 MiB) at each
 * such allocation whose free never came (a lost event). */
static int rd_wait_over(pst_reader_t *r, const rd_stream_t *s, const rd_hev_t *e)
{
    if (r->wait_s != s || r->wait_seq != e->seq) {
        r->wait_s = s;
        r->wait_seq = e->seq;
        r->wait_sync0 = UINT64_MAX;
    }
    if (r->wait_sync0 == UINT64_MAX && r->n_sync && r->sync_ts > e->ts) r->wait_sync0 = r->n_sync;
    return r->wait_sync0 != UINT64_MAX && r->n_sync > r->wait_sync0;
}

/* The input has ended and every queue is empty: the streams' byte queues
 * (together up to about twice the largest merge window's bytes, 10-15 MB on
 * a 4-thread churn) are given back now rather than at pst_close, so they do
 * not sit under what the caller does after the last event (report and
 * export symbolize then, sql builds its indexes). Nothing is appended after
 * the end; a queue that is needed again grows from empty as at the start. */
static void rd_drop_queues(pst_reader_t *r)
{
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rd_stream_t *s = r->sv[i];
        free(s->b);
        s->b = NULL;
        s->bcap = s->bhead = s->btail = 0;
    }
}

int pst_next(pst_reader_t *r, pst_event_t *ev)
{
    /* the usual case: nothing forced, the top head is safe and free to go
     * (or, tied with other heads, the earliest of them in the tick) */
    if (!r->n_force && r->hq.n) {
        rd_stream_t *s = r->hq.a[0], *t;
        uint64_t tseq;
        int why;
        if (rd_safe(r, &s->head)) {
            if (!r->causal_times || !rd_top_tied(r)) {
                int fr = rd_fast_heap(r, s, ev);
                if (fr) return fr;
                if (rd_constraint(r, s, &s->head, &t, &tseq, &why) == RD_C_NONE) return rd_emit_any(r, s, ev);
            } else if ((t = rd_tie_scan(r, 0, s->head.ts, NULL))) {
                /* s's constraint only counts the reordering: it changes
                 * nothing the tie scan's choice depends on */
                rd_stream_t *u;
                if (t != s && rd_constraint(r, s, &s->head, &u, &tseq, &why) != RD_C_NONE) r->st.causal_reordered++;
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
            if (c == RD_C_VWAIT) {      /* the event of its address before it goes first */
                c = rd_vwait_resolve(r, s, e, &t, &tseq);
                if (c < 0) return c;
                if (c == RD_C_FORCE && !t->on_force) {
                    if ((rc = rd_force_push(r, t, tseq))) return rc;
                    r->st.causal_reordered++;
                    continue;
                }
                if (c == RD_C_FORCE) r->st.unordered++;   /* a cycle */
            } else if (c != RD_C_NONE && c != RD_C_BLOCKED && why == RD_WHY_CAUSAL) {
                r->st.unordered++;      /* a cycle, or nothing to wait for */
            }
            uint64_t target = f->target;
            rc = rd_emit(r, s, ev);
            if (rc < 0) return rc;
            if (s->emit_seq > target && r->n_force && r->force[r->n_force - 1].s == s) rd_force_pop(r);
            return 1;
        }
        if (!r->hq.n) {
            if (r->eof) { rd_drop_queues(r); return 0; }
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
        if (c == RD_C_NONE && r->causal_times && rd_top_tied(r)) {
            /* safe only now (a chunk was read): the tie rule as above */
            rd_stream_t *o = rd_tie_scan(r, 0, e->ts, NULL);
            return rd_emit(r, o ? o : s, ev);
        }
        if (c != RD_C_NONE) {
            rd_stream_t *o = rd_tie_scan(r, 0, e->ts, NULL);
            if (o && o != s) {
                if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
                return rd_emit(r, o, ev);
            }
            if (c == RD_C_BLOCKED) return rd_emit(r, s, ev);   /* an unknown free (rd_apply_effects counts it) */
        }
        if (c == RD_C_VWAIT) {
            c = rd_vwait_resolve(r, s, e, &t, &tseq);
            if (c < 0) return c;
            if (c == RD_C_NONE) return rd_emit(r, s, ev);
        }
        if (c == RD_C_FORCE) {
            if ((rc = rd_force_push(r, t, tseq))) return rc;
            if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
            continue;
        }
        if (c == RD_C_WAIT && !r->causal_times && !r->eof && !rd_window_passed(r, e) && !rd_wait_over(r, s, e)) {
            if ((rc = rd_read_chunk(r)) < 0) return rc;
            continue;
        }
        if (c == RD_C_WAIT || c == RD_C_UNORDERED) r->st.unordered++;
        return rd_emit(r, s, ev);
    }
}
