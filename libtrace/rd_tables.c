/* rd_tables.c — the merge's tables: the live set's rebuild, the heap of
 * streams, the pending frees chained per address, the pools' heaps.
 *
 * The merge (rd_merge.c) fills them from what the decode stage queued
 * (rd_pull: rd_pend_add, rd_pool_add, rd_sheap_push) and consults and
 * updates them as events go out. Their inline probes are in rd_tables.h;
 * the layouts are described with the types, in rd_types.h.
 */
#include "rd_tables.h"

#define RD_PEND_SCAN_MAX 256      /* nodes of a chain looked at when looking for another stream's free */

/* ---- the live set ------------------------------------------------------------------ */

/* Rebuild without the dead slots, twice as large when the live keys alone
 * fill more than a quarter. */
int rd_aset_rebuild(rd_aset_t *s)
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

/* ---- heap of streams ----------------------------------------------------------- */

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

void rd_sheap_remove(rd_sheap_t *h, rd_stream_t *s)
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

void rd_sheap_fix(rd_sheap_t *h, rd_stream_t *s)
{
    int p = *rd_sheap_pos(h, s);
    if (p < 0) return;
    rd_sheap_up(h, (uint32_t)p);
    rd_sheap_down(h, (uint32_t)*rd_sheap_pos(h, s));
}
/* ---- pending frees: address -> chain of queued free-like events ------------- */
/* (the layout is described with the types, in rd_types.h) */

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
void rd_pend_del(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq)
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
int rd_pend_find(const rd_pendtab_t *t, rd_stream_t *const *sv, uint64_t addr, const rd_stream_t *not,
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
rd_pent_t *rd_pool_top(rd_pool_t *p)
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
