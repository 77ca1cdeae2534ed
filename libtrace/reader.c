/* reader.c — the streaming .pst reader and its merge (see reader.h; the
 * algorithm is described for people in FORMAT.md, "Merge order").
 *
 * Pipeline: source (read() blocks into one buffer, or memory) -> chunks
 * (CRC-checked, META definitions stored, EVENTS validated by one decoding
 * pass that indexes pending frees and pool events, then their raw event
 * bytes appended to the stream's byte queue, END counts kept) -> merge
 * (pick the queued head with the smallest (ts, stream) once it is older
 * than the newest time read minus the window, or the input has ended;
 * before handing it out, let a pool event with a smaller pool_seq or a
 * queued free of the address it allocates go first) -> pst_event_t.
 *
 * Queued events are kept as the stream's raw event bytes (a few bytes per
 * event), not as decoded records: each stream keeps a second decoder state
 * at the head of its byte queue and decodes its head event again when the
 * one before it is handed out. Validation happens once, when the chunk is
 * read, so the second decode cannot fail. A stream's byte queue is one
 * buffer reused in place (compacted when the queued bytes fill at most half
 * of it, grown only when they need it), so steady reading allocates nothing
 * per event or per chunk.
 *
 * Fast paths: the common records (malloc, free, calloc, realloc, TS) are
 * decoded inline with branch-free short varints; when nothing is forced and
 * the top head is safe and unconstrained, pst_next hands it out straight
 * away, and the stream stays on top of the heap without sifting while its
 * next head is below both children (a run). With a single stream there is
 * no other stream whose free could be waited for, so frees are not indexed
 * until a second stream appears (then the first one's queued frees are
 * indexed in order, which gives the chains the order they would have had).
 *
 * Structures (all bounded by what is live or queued, never by file length):
 *   streams    id -> rstream (byte queue, two decoder states, decoded head,
 *              heap position, per address its runs of queued frees)
 *   hq         binary heap of the streams with queued events, keyed by
 *              (head ts, stream id)
 *   live[2]    heap / mmap addresses live in the reader's view (a set that
 *              keeps freed slots as dead until its next rebuild)
 *   pend[2]    queued frees by address: address -> chain of (seq, ts) nodes
 *              in the order they were read, cut into runs of one stream
 *   pools      pool id -> last pool_seq out and a min-heap of queued
 *              (pool_seq, stream, seq), stale entries dropped lazily
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "poolscope/error.h"
#include "poolscope/reader.h"

#define READ_BLOCK      (1u << 20)
#define MAX_HDR_TLV     (16u << 20)
#define MAX_STACK_DEPTH 4096
#define MAP_FIXED_FLAG  0x10       /* Linux MAP_FIXED: replaces, not an allocation to order */

enum { SP_HEAP = 0, SP_MMAP = 1 };

/* ---- u64 -> u64 hash map: linear probing, backward-shift deletion ------- */
/* Key UINT64_MAX marks an empty slot; that key itself is kept aside. */
typedef struct kv { uint64_t k, v; } kv_t;
typedef struct u64map {
    kv_t *t;
    uint32_t cap, n, shift;
    int has_max;
    uint64_t max_v;
} u64map_t;

#define EMPTY_KEY UINT64_MAX

static inline uint32_t map_slot(const u64map_t *m, uint64_t k)
{
    return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> m->shift);
}

static kv_t *map_find(const u64map_t *m, uint64_t k)
{
    if (!m->n) return NULL;
    uint32_t mask = m->cap - 1;
    for (uint32_t i = map_slot(m, k);; i = (i + 1) & mask) {
        if (m->t[i].k == k) return &m->t[i];
        if (m->t[i].k == EMPTY_KEY) return NULL;
    }
}

static int map_get(const u64map_t *m, uint64_t k, uint64_t *v)
{
    if (k == EMPTY_KEY) { if (m->has_max && v) *v = m->max_v; return m->has_max; }
    kv_t *e = map_find(m, k);
    if (e && v) *v = e->v;
    return e != NULL;
}

static int map_grow(u64map_t *m)
{
    uint32_t cap = m->cap ? m->cap * 2 : 64;
    kv_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return PSC_ENOMEM;
    for (uint32_t i = 0; i < cap; i++) t[i].k = EMPTY_KEY;
    u64map_t nm = { t, cap, 0, 64 - (uint32_t)__builtin_ctz(cap), 0, 0 };
    for (uint32_t i = 0; i < m->cap; i++) {
        if (m->t[i].k == EMPTY_KEY) continue;
        uint32_t j = map_slot(&nm, m->t[i].k);
        while (t[j].k != EMPTY_KEY) j = (j + 1) & (cap - 1);
        t[j] = m->t[i];
    }
    free(m->t);
    m->t = t;
    m->cap = cap;
    m->shift = nm.shift;
    return 0;
}

static int map_put(u64map_t *m, uint64_t k, uint64_t v)
{
    if (k == EMPTY_KEY) { m->has_max = 1; m->max_v = v; return 0; }
    kv_t *e = map_find(m, k);
    if (e) { e->v = v; return 0; }
    if ((m->n + 1) * 4 > m->cap * 3 && map_grow(m)) return PSC_ENOMEM;   /* load <= 3/4 */
    uint32_t mask = m->cap - 1, i = map_slot(m, k);
    while (m->t[i].k != EMPTY_KEY) i = (i + 1) & mask;
    m->t[i] = (kv_t){ k, v };
    m->n++;
    return 0;
}

static void map_free(u64map_t *m) { free(m->t); memset(m, 0, sizeof *m); }

/* ---- address tables: the live set and the pending-free heads ---------------- */
/* The merge only ever keys these by addresses it orders, and those are never
 * 0 (frees_addr/allocs_addr exclude it), so 0 marks an empty slot. Linear
 * probing at load <= 1/2, backward-shift deletion, everything inline: they
 * are touched for nearly every event. */
#define AHASH(k, shift) ((uint32_t)(((k) * 0x9E3779B97F4A7C15ull) >> (shift)))

/* The live set keeps a freed address's slot, marked dead, so the churn of
 * a program (an address freed, then allocated again) costs one probe each
 * way and no moves. Dead slots go at the next rebuild, which happens when
 * live + dead would pass half the table: the table stays within four times
 * the live addresses (plus the dead ones since the last rebuild, at most as
 * many again). */
typedef struct aset {
    uint64_t *k;               /* 0 = empty */
    uint8_t  *live;            /* per slot: 1 live, 0 dead */
    uint32_t mask, n, dead, shift;   /* n: live keys */
} aset_t;

static inline int aset_has(const aset_t *s, uint64_t k)
{
    if (!s->n) return 0;
    for (uint32_t i = AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) return s->live[i];
        if (!x) return 0;
    }
}

/* Rebuild without the dead slots, twice as large when the live keys alone
 * fill more than a quarter. */
static int aset_rebuild(aset_t *s)
{
    uint32_t cap = s->k ? s->mask + 1 : 64;
    while ((s->n + 1) * 4 > cap) cap *= 2;
    if (cap > (1u << 31)) return PSC_ENOMEM;
    uint64_t *k = calloc(cap, sizeof *k);
    uint8_t *lv = malloc(cap);
    if (!k || !lv) { free(k); free(lv); return PSC_ENOMEM; }
    uint32_t shift = 64 - (uint32_t)__builtin_ctz(cap), mask = cap - 1;
    for (uint32_t i = 0; s->k && i <= s->mask; i++) {
        if (!s->k[i] || !s->live[i]) continue;
        uint32_t j = AHASH(s->k[i], shift);
        while (k[j]) j = (j + 1) & mask;
        k[j] = s->k[i];
        lv[j] = 1;
    }
    free(s->k);
    free(s->live);
    s->k = k;
    s->live = lv;
    s->mask = mask;
    s->shift = shift;
    s->dead = 0;
    return 0;
}

/* Add k (no-op when live). 0 or PSC_ENOMEM. */
static inline int aset_add(aset_t *s, uint64_t k)
{
    if (!s->k && aset_rebuild(s)) return PSC_ENOMEM;
    for (uint32_t i = AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) {
            if (!s->live[i]) { s->live[i] = 1; s->dead--; s->n++; }
            return 0;
        }
        if (!x) {
            if ((s->n + s->dead + 1) * 2 > s->mask + 1) {
                if (aset_rebuild(s)) return PSC_ENOMEM;
                return aset_add(s, k);
            }
            s->k[i] = k;
            s->live[i] = 1;
            s->n++;
            return 0;
        }
    }
}

static inline void aset_del(aset_t *s, uint64_t k)
{
    if (!s->n) return;
    for (uint32_t i = AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) {
            if (s->live[i]) { s->live[i] = 0; s->n--; s->dead++; }
            return;
        }
        if (!x) return;
    }
}

typedef struct amap { kv_t *t; uint32_t mask, n, shift; } amap_t;     /* address -> value */

static inline uint64_t *amap_ref(const amap_t *m, uint64_t k)
{
    if (!m->n) return NULL;
    for (uint32_t i = AHASH(k, m->shift);; i = (i + 1) & m->mask) {
        kv_t *e = &m->t[i];
        if (e->k == k) return &e->v;
        if (!e->k) return NULL;
    }
}

static int amap_grow(amap_t *m)
{
    uint32_t cap = m->t ? (m->mask + 1) * 2 : 64;
    if (cap == 0 || cap > (1u << 30)) return PSC_ENOMEM;
    kv_t *t = calloc(cap, sizeof *t);
    if (!t) return PSC_ENOMEM;
    uint32_t shift = 64 - (uint32_t)__builtin_ctz(cap), mask = cap - 1;
    for (uint32_t i = 0; m->t && i <= m->mask; i++) {
        if (!m->t[i].k) continue;
        uint32_t j = AHASH(m->t[i].k, shift);
        while (t[j].k) j = (j + 1) & mask;
        t[j] = m->t[i];
    }
    free(m->t);
    m->t = t;
    m->mask = mask;
    m->shift = shift;
    return 0;
}

/* Room for one more key. 0 or PSC_ENOMEM. */
static inline int amap_reserve(amap_t *m)
{
    return (!m->t || (m->n + 1) * 2 > m->mask + 1) ? amap_grow(m) : 0;
}

/* Insert k, which is not present. 0 or PSC_ENOMEM. */
static inline int amap_insert(amap_t *m, uint64_t k, uint64_t v)
{
    if ((!m->t || (m->n + 1) * 2 > m->mask + 1) && amap_grow(m)) return PSC_ENOMEM;
    uint32_t i = AHASH(k, m->shift);
    while (m->t[i].k) i = (i + 1) & m->mask;
    m->t[i] = (kv_t){ k, v };
    m->n++;
    return 0;
}

static inline void amap_del(amap_t *m, uint64_t k)
{
    if (!m->n) return;
    uint32_t mask = m->mask, i = AHASH(k, m->shift);
    for (;; i = (i + 1) & mask) {
        if (m->t[i].k == k) break;
        if (!m->t[i].k) return;
    }
    for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (!m->t[j].k) break;
        uint32_t h = AHASH(m->t[j].k, m->shift);
        if (((j - h) & mask) >= ((j - i) & mask)) { m->t[i] = m->t[j]; i = j; }
    }
    m->t[i].k = 0;
    m->n--;
}

/* ---- streams ------------------------------------------------------------------ */

/* A decoded event: the head of a stream's queue, or one being validated. */
typedef struct hev {
    uint64_t ts, seq;
    uint64_t f[PST_MAX_FIELDS];
    int64_t  payload[PST_MAX_PAYLOAD];
    uint32_t stack, n_ids, n_payload;
    uint8_t  type;
} hev_t;

typedef struct rstream {
    uint32_t id, tid;
    uint32_t idx;              /* position in r->sv */
    pst_enc_t dec;             /* decoder state at the end of the queued bytes */
    pst_enc_t hdec;            /* decoder state after the head event */
    uint64_t offset;           /* stream bytes consumed */
    uint64_t decode_seq;       /* seq of the next decoded event */
    uint64_t emit_seq;         /* seq of the queue head */
    uint8_t *b;                /* byte queue: [bhead, btail) follow the head event */
    size_t   bcap, bhead, btail;
    uint64_t qlen;             /* events queued, the head included */
    hev_t    head;             /* valid when qlen > 0 */
    amap_t   runs_of[2];       /* address -> this stream's first | last run in the pending-free chain */
    uint32_t *ids;             /* the head's L ids (PST_MAX_IDS), allocated on first use */
    int      finished;         /* THREAD_END decoded */
    int      hq_pos;           /* -1 when not in the heap */
    int      on_force;
} rstream_t;

/* ---- heaps of streams ------------------------------------------------------ */
typedef struct sheap { rstream_t **a; uint32_t n, cap; } sheap_t;

static inline uint64_t skey(const sheap_t *h, const rstream_t *s)
{
    (void)h;
    return s->head.ts;
}
static inline int sless(const sheap_t *h, const rstream_t *a, const rstream_t *b)
{
    uint64_t ka = skey(h, a), kb = skey(h, b);
    return ka < kb || (ka == kb && a->id < b->id);
}
static inline int *spos(const sheap_t *h, rstream_t *s) { (void)h; return &s->hq_pos; }

static void sheap_set(sheap_t *h, uint32_t i, rstream_t *s) { h->a[i] = s; *spos(h, s) = (int)i; }

static void sheap_up(sheap_t *h, uint32_t i)
{
    rstream_t *s = h->a[i];
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!sless(h, s, h->a[p])) break;
        sheap_set(h, i, h->a[p]);
        i = p;
    }
    sheap_set(h, i, s);
}

static void sheap_down(sheap_t *h, uint32_t i)
{
    rstream_t *s = h->a[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && sless(h, h->a[c + 1], h->a[c])) c++;
        if (!sless(h, h->a[c], s)) break;
        sheap_set(h, i, h->a[c]);
        i = c;
    }
    sheap_set(h, i, s);
}

static int sheap_push(sheap_t *h, rstream_t *s)
{
    if (h->n == h->cap) {
        uint32_t cap = h->cap ? h->cap * 2 : 16;
        rstream_t **a = realloc(h->a, cap * sizeof *a);
        if (!a) return PSC_ENOMEM;
        h->a = a;
        h->cap = cap;
    }
    h->a[h->n] = s;
    sheap_up(h, h->n++);
    return 0;
}

static void sheap_remove(sheap_t *h, rstream_t *s)
{
    int *pp = spos(h, s);
    if (*pp < 0) return;
    uint32_t i = (uint32_t)*pp;
    *pp = -1;
    rstream_t *last = h->a[--h->n];
    if (i == h->n) return;
    sheap_set(h, i, last);
    sheap_up(h, i);
    sheap_down(h, (uint32_t)*spos(h, last));
}

static void sheap_fix(sheap_t *h, rstream_t *s)
{
    int p = *spos(h, s);
    if (p < 0) return;
    sheap_up(h, (uint32_t)p);
    sheap_down(h, (uint32_t)*spos(h, s));
}


/* ---- pending frees: address -> chain of queued free-like events ------------- */
/* A chain holds the queued frees of one address in the order they were read
 * (appended at the tail), cut into runs: consecutive nodes of one stream.
 * A stream's times never decrease, so the earliest node of a run is its
 * first, and looking for the earliest queued free of another stream among
 * the first PEND_SCAN_MAX nodes of a chain visits one node per run, not
 * every node. (If a stream's time ever wrapped around 2^64 — only damaged
 * input does that — the lookup walks the nodes, as the rule reads.)
 *
 * The free handed out is its stream's first queued one, hence the first
 * node of that stream in its chain: the head of the chain's first run of
 * that stream. Each stream keeps, per address, its first and last run in
 * the chain (the runs of one stream in a chain are linked by next_same), so
 * finding that run needs no walk. Indices are node / run index + 1, 0 =
 * none. A node is 24 bytes; there is one per queued free. */
typedef struct pnode {
    uint64_t seq, ts;
    uint32_t next;             /* next node of the chain; of the free list once freed */
    uint32_t pad_;
} pnode_t;
typedef struct prun {
    uint32_t head, tail, len;  /* nodes */
    uint32_t prev, next;       /* runs of the chain; next: of the free list once freed */
    uint32_t sidx;             /* the stream: r->sv[sidx] */
    uint32_t next_same;        /* the stream's next run in this chain */
} prun_t;
/* Freed nodes are reused oldest first. Frees go out roughly in the order
 * they were read, so nodes stay laid out in read order and the nodes a free
 * touches (its chain neighbours, a few hundred frees away) stay close in
 * memory; a LIFO reuse would scatter them. */
typedef struct pendtab {
    amap_t   head;             /* address -> first run | last run << 32 */
    pnode_t *nodes;
    uint32_t n, cap;
    uint32_t free_head, free_tail;
    prun_t  *runs;
    uint32_t rn, rcap, rfree;
} pendtab_t;

#define PEND_SCAN_MAX 256      /* nodes of a chain looked at when looking for another stream's free */

static int pend_new_run(pendtab_t *t, uint32_t *out)
{
    uint32_t idx;
    if (t->rfree) {
        idx = t->rfree - 1;
        t->rfree = t->runs[idx].next;
    } else {
        if (t->rn == t->rcap) {
            if (t->rcap > (UINT32_MAX >> 2)) return PSC_ENOMEM;
            uint32_t cap = t->rcap ? t->rcap * 2 : 64;
            prun_t *a = realloc(t->runs, cap * sizeof *a);
            if (!a) return PSC_ENOMEM;
            t->runs = a;
            t->rcap = cap;
        }
        idx = t->rn++;
    }
    *out = idx + 1;
    return 0;
}

static inline void pend_free_run(pendtab_t *t, uint32_t ri)
{
    t->runs[ri - 1].next = t->rfree;
    t->rfree = ri;
}

static inline void pend_free_node(pendtab_t *t, uint32_t me)
{
    t->nodes[me - 1].next = 0;
    if (t->free_tail) t->nodes[t->free_tail - 1].next = me;
    else t->free_head = me;
    t->free_tail = me;
}

static int pend_add(pendtab_t *t, uint64_t addr, rstream_t *s, int sp, uint64_t seq, uint64_t ts)
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
            pnode_t *a = realloc(t->nodes, cap * sizeof *a);
            if (!a) return PSC_ENOMEM;
            t->nodes = a;
            t->cap = cap;
        }
        idx = t->n++;
    }
    uint32_t me = idx + 1, ri;
    t->nodes[idx] = (pnode_t){ seq, ts, 0, 0 };
    uint64_t *v = amap_ref(&t->head, addr);
    if (v && t->runs[(*v >> 32) - 1].sidx == s->idx) {
        prun_t *last = &t->runs[(*v >> 32) - 1];          /* extend the stream's run */
        t->nodes[last->tail - 1].next = me;
        last->tail = me;
        last->len++;
        return 0;
    }
    /* room in both maps first, so nothing below fails half-way (growing
     * moves the entries: look v up again) */
    if ((!v && amap_reserve(&t->head)) || amap_reserve(&s->runs_of[sp]) || pend_new_run(t, &ri)) goto nomem;
    v = amap_ref(&t->head, addr);
    uint64_t *w = amap_ref(&s->runs_of[sp], addr);
    if (w) {
        t->runs[(*w >> 32) - 1].next_same = ri;
        *w = (*w & 0xffffffffu) | (uint64_t)ri << 32;
    } else {
        amap_insert(&s->runs_of[sp], addr, (uint64_t)ri | (uint64_t)ri << 32);
    }
    if (v) {
        uint32_t li = (uint32_t)(*v >> 32);
        prun_t *last = &t->runs[li - 1];
        t->nodes[last->tail - 1].next = me;
        last->next = ri;
        t->runs[ri - 1] = (prun_t){ me, me, 1, li, 0, s->idx, 0 };
        *v = (*v & 0xffffffffu) | (uint64_t)ri << 32;
    } else {
        t->runs[ri - 1] = (prun_t){ me, me, 1, 0, 0, s->idx, 0 };
        amap_insert(&t->head, addr, (uint64_t)ri | (uint64_t)ri << 32);
    }
    return 0;
nomem:
    pend_free_node(t, me);
    return PSC_ENOMEM;
}

/* The free (s, seq) of addr goes out. */
static void pend_del(pendtab_t *t, uint64_t addr, rstream_t *s, int sp, uint64_t seq)
{
    uint64_t *w = amap_ref(&s->runs_of[sp], addr);
    if (!w) return;                                     /* not indexed (one stream so far) */
    uint32_t ri = (uint32_t)*w;
    prun_t *ru = &t->runs[ri - 1];
    uint32_t cur = ru->head;
    if (t->nodes[cur - 1].seq != seq) return;           /* every queued free is indexed: not reached */
    uint32_t next = t->nodes[cur - 1].next;
    if (ru->prev) t->nodes[t->runs[ru->prev - 1].tail - 1].next = next;
    if (ru->len > 1) {
        ru->head = next;                                /* the run's next node heads it now */
        ru->len--;
    } else {
        if (ru->next_same) *w = (*w & ~(uint64_t)0xffffffffu) | ru->next_same;
        else amap_del(&s->runs_of[sp], addr);
        uint32_t pr = ru->prev, nx = ru->next;
        if (pr) t->runs[pr - 1].next = nx;
        if (nx) t->runs[nx - 1].prev = pr;
        if (!pr && !nx) {
            amap_del(&t->head, addr);
        } else if (!pr || !nx) {
            uint64_t *v = amap_ref(&t->head, addr);     /* the key exists */
            if (v && !pr) *v = (*v & ~(uint64_t)0xffffffffu) | nx;
            if (v && !nx) *v = (*v & 0xffffffffu) | (uint64_t)pr << 32;
        }
        pend_free_run(t, ri);
    }
    pend_free_node(t, cur);
}

/* The queued free of addr in a stream other than `not`, earliest by ts
 * (then stream id) among the first PEND_SCAN_MAX nodes of the chain:
 * 1 with its stream and seq. *in_self = 1 when `not` itself has one there. */
static int pend_find(const pendtab_t *t, rstream_t *const *sv, uint64_t addr, const rstream_t *not,
                     int *in_self, int by_node, rstream_t **bs, uint64_t *bseq)
{
    *in_self = 0;
    uint64_t *v = amap_ref(&t->head, addr);
    if (!v) return 0;
    const pnode_t *best = NULL;
    uint32_t bsidx = 0;
    uint64_t pos = 0;
    for (uint32_t ri = (uint32_t)*v; ri && pos < PEND_SCAN_MAX; ri = t->runs[ri - 1].next) {
        const prun_t *ru = &t->runs[ri - 1];
        if (ru->sidx == not->idx) { *in_self = 1; pos += ru->len; continue; }
        /* by_node: every node of the run within the first PEND_SCAN_MAX;
         * otherwise the run's first node, its earliest */
        uint32_t cur = ru->head, lim = by_node ? ru->len : 1;
        for (uint32_t j = 0; j < lim && pos + j < PEND_SCAN_MAX; j++, cur = t->nodes[cur - 1].next) {
            const pnode_t *nd = &t->nodes[cur - 1];
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
    return 1;
}

/* ---- pools ------------------------------------------------------------------ */
typedef struct pent { uint64_t pseq; rstream_t *s; uint64_t seq; } pent_t;
typedef struct rpool {
    uint64_t last_seq;
    int      have_last;
    pent_t  *h;
    uint32_t n, cap;
} rpool_t;

static inline int pent_less(const pent_t *a, const pent_t *b)
{
    return a->pseq < b->pseq || (a->pseq == b->pseq && a->s->id < b->s->id) ||
           (a->pseq == b->pseq && a->s == b->s && a->seq < b->seq);
}

static int pool_push(rpool_t *p, pent_t e)
{
    if (p->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 64;
        pent_t *a = realloc(p->h, cap * sizeof *a);
        if (!a) return PSC_ENOMEM;
        p->h = a;
        p->cap = cap;
    }
    uint32_t i = p->n++;
    while (i > 0 && pent_less(&e, &p->h[(i - 1) / 2])) { p->h[i] = p->h[(i - 1) / 2]; i = (i - 1) / 2; }
    p->h[i] = e;
    return 0;
}

static void pool_pop(rpool_t *p)
{
    pent_t e = p->h[--p->n];
    uint32_t i = 0;
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= p->n) break;
        if (c + 1 < p->n && pent_less(&p->h[c + 1], &p->h[c])) c++;
        if (!pent_less(&p->h[c], &e)) break;
        p->h[i] = p->h[c];
        i = c;
    }
    if (p->n) p->h[i] = e;
}

/* The smallest still-queued entry, dropping those already handed out. */
static pent_t *pool_top(rpool_t *p)
{
    while (p->n && p->h[0].seq < p->h[0].s->emit_seq) pool_pop(p);
    return p->n ? &p->h[0] : NULL;
}

static inline int is_pool_seq_event(unsigned t)
{
    return (t >= PST_EV_POOL_ACQUIRE && t <= PST_EV_POOL_BACKING_FREE) ||
           (t >= PST_EV_KVB_ALLOC && t <= PST_EV_KVB_OWNER);
}


/* ---- the reader ------------------------------------------------------------- */
typedef struct rstring { char *s; } rstring_t;
typedef struct rstack { uint64_t *f; uint32_t depth; } rstack_t;
typedef struct pool_op { uint64_t pool, pseq, seq; } pool_op_t;
typedef struct free_op { uint64_t addr, ts, seq; uint32_t sp; } free_op_t;

struct pst_reader {
    /* source */
    int      fd;               /* -1: memory */
    const uint8_t *mem;
    size_t   mem_len;
    uint8_t *buf;              /* fd: buffer; data in [bpos, blim) */
    size_t   bcap, bpos, blim;
    int      src_eof;
    uint64_t off;              /* file offset of the next unconsumed byte */
    int      eof;              /* no more chunks will be read */

    pst_header_t hdr;
    char   **argv;
    char    *exe, *tool, *host, *argv_raw;

    /* definitions */
    u64map_t string_ids, stack_ids;
    rstring_t *strings; uint32_t n_strings, cap_strings;
    rstack_t  *stacks;  uint32_t n_stacks, cap_stacks;
    pst_module_t *mods; size_t n_mods, cap_mods;

    /* streams and merge */
    u64map_t stream_ids;
    rstream_t **sv; uint32_t n_sv, cap_sv;
    sheap_t  hq;
    aset_t   live[2];
    pendtab_t pend[2];
    u64map_t pool_ids;
    rpool_t *pools; uint32_t n_pools, cap_pools;
    pool_op_t *pops; uint32_t n_pops, cap_pops;   /* pool entries of the chunk being validated */
    free_op_t *fops; uint32_t n_fops, cap_fops;   /* its frees */
    int      ts_wrapped;       /* a stream's time wrapped around 2^64 (damage): pend_find walks nodes */
    struct force { rstream_t *s; uint64_t target; } *force;
    uint32_t n_force, cap_force;
    uint64_t window, newest_ts, last_out_ts;
    uint64_t sync_ts;   /* the latest SYNC watermark: every event stamped earlier has been read */
    uint64_t decoded;          /* events decoded (TS records not counted) */
    uint32_t max_stream;       /* highest stream id seen (ids are 1..streams) */
    int      out_any;

    uint8_t  nf[PST_EV_MAX];
    int8_t   s_idx[PST_EV_MAX], ext_idx[PST_EV_MAX];
    char     ext_kind[PST_EV_MAX];

    uint32_t *out_ids;         /* ids of the event handed out last (PST_MAX_IDS) */
    uint32_t *idbuf;           /* scratch for validation (PST_MAX_IDS) */
    pst_status_t st;
};

/* Make n bytes available at *p; returns how many are (< n only at the end of
 * the input), or a negative error. */
static long src_ensure(pst_reader_t *r, size_t n, const uint8_t **p)
{
    if (r->fd < 0) {
        size_t pos = (size_t)r->off, avail = pos <= r->mem_len ? r->mem_len - pos : 0;
        *p = r->mem + pos;
        return (long)(avail < n ? avail : n);
    }
    if (r->blim - r->bpos < n && !r->src_eof) {
        if (r->bpos) {
            memmove(r->buf, r->buf + r->bpos, r->blim - r->bpos);
            r->blim -= r->bpos;
            r->bpos = 0;
        }
        if (r->bcap < n) {
            size_t cap = r->bcap;
            while (cap < n) cap *= 2;
            uint8_t *b = realloc(r->buf, cap);
            if (!b) return PSC_ENOMEM;
            r->buf = b;
            r->bcap = cap;
        }
        while (r->blim < n) {
            ssize_t k = read(r->fd, r->buf + r->blim, r->bcap - r->blim);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) return PSC_EIO;
            if (k == 0) { r->src_eof = 1; break; }
            r->blim += (size_t)k;
        }
    }
    *p = r->buf + r->bpos;
    size_t avail = r->blim - r->bpos;
    return (long)(avail < n ? avail : n);
}

static void src_consume(pst_reader_t *r, size_t n)
{
    r->off += n;
    if (r->fd >= 0) r->bpos += n;
    r->st.bytes += n;
}

/* Bytes left in the input (reads to the end for a file; used once, at a
 * truncation, to report the unread bytes). */
static uint64_t src_remaining(pst_reader_t *r)
{
    if (r->fd < 0) return r->off <= r->mem_len ? r->mem_len - r->off : 0;
    uint64_t n = r->blim - r->bpos;
    if (!r->src_eof) {
        off_t cur = lseek(r->fd, 0, SEEK_CUR), endp = lseek(r->fd, 0, SEEK_END);
        if (cur >= 0 && endp >= cur) n += (uint64_t)(endp - cur);
        r->src_eof = 1;
    }
    return n;
}

/* ---- status helpers -------------------------------------------------------- */

static void set_corrupt(pst_reader_t *r, uint64_t at, const char *why)
{
    if (!r->st.corrupt) {
        r->st.corrupt = 1;
        r->st.corrupt_offset = at;
        r->st.corrupt_reason = why;
        r->st.error = PSC_ECORRUPT;
    }
    r->eof = 1;
}

static void set_truncated(pst_reader_t *r, uint64_t unread)
{
    r->st.truncated = 1;
    r->st.unread_bytes = unread;
    if (!r->st.error) r->st.error = PSC_ETRUNC;
    r->eof = 1;
}

/* ---- definitions ------------------------------------------------------------ */

#define GROW(arr, n, cap, init)                                                   \
    do {                                                                          \
        if ((n) == (cap)) {                                                       \
            size_t ncap_ = (cap) ? (size_t)(cap) * 2 : (init);                    \
            void *na_ = realloc((arr), ncap_ * sizeof *(arr));                    \
            if (!na_) return PSC_ENOMEM;                                           \
            (arr) = na_;                                                          \
            (cap) = ncap_;                                                        \
        }                                                                         \
    } while (0)

static int def_string(pst_reader_t *r, uint64_t id, const uint8_t *b, size_t len)
{
    if (map_get(&r->string_ids, id, NULL)) return 0;     /* first definition wins */
    GROW(r->strings, r->n_strings, r->cap_strings, 64);
    char *s = malloc(len + 1);
    if (!s) return PSC_ENOMEM;
    memcpy(s, b, len);
    s[len] = 0;
    if (map_put(&r->string_ids, id, r->n_strings)) { free(s); return PSC_ENOMEM; }
    r->strings[r->n_strings++].s = s;
    return 0;
}

/* 1 ok, 0 malformed, negative error */
static int parse_meta(pst_reader_t *r, const uint8_t *p, const uint8_t *end)
{
    while (p < end) {
        unsigned kind = *p++;
        uint64_t id, n, v;
        if (kind == PST_META_STRING) {
            if (!(p = pst_get_varint(p, end, &id)) || !(p = pst_get_varint(p, end, &n))) return 0;
            if (n > (uint64_t)(end - p)) return 0;
            int rc = def_string(r, id, p, (size_t)n);
            if (rc) return rc;
            p += n;
        } else if (kind == PST_META_STACK) {
            if (!(p = pst_get_varint(p, end, &id)) || !(p = pst_get_varint(p, end, &n))) return 0;
            if (n > MAX_STACK_DEPTH || n > (uint64_t)(end - p)) return 0;
            uint64_t *f = malloc((n ? n : 1) * sizeof *f);
            if (!f) return PSC_ENOMEM;
            for (uint64_t i = 0; i < n; i++) {
                if (!(p = pst_get_varint(p, end, &v))) { free(f); return 0; }
                f[i] = i ? f[i - 1] + (uint64_t)pst_unzigzag(v) : v;
            }
            if (map_get(&r->stack_ids, id, NULL)) { free(f); continue; }
            if (r->n_stacks == r->cap_stacks) {
                size_t cap = r->cap_stacks ? r->cap_stacks * 2 : 64;
                rstack_t *a = realloc(r->stacks, cap * sizeof *a);
                if (!a) { free(f); return PSC_ENOMEM; }
                r->stacks = a;
                r->cap_stacks = (uint32_t)cap;
            }
            if (map_put(&r->stack_ids, id, r->n_stacks)) { free(f); return PSC_ENOMEM; }
            r->stacks[r->n_stacks++] = (rstack_t){ f, (uint32_t)n };
        } else if (kind == PST_META_MODULE) {
            uint64_t op, ts, base, size, plen, blen;
            if (!(p = pst_get_varint(p, end, &op)) || !(p = pst_get_varint(p, end, &ts)) ||
                !(p = pst_get_varint(p, end, &base)) || !(p = pst_get_varint(p, end, &size)) ||
                !(p = pst_get_varint(p, end, &plen)) || plen > (uint64_t)(end - p))
                return 0;
            const uint8_t *path = p;
            p += plen;
            if (!(p = pst_get_varint(p, end, &blen)) || blen > (uint64_t)(end - p) || blen > UINT32_MAX)
                return 0;
            const uint8_t *bid = p;
            p += blen;
            if (op == 0) {
                for (size_t i = r->n_mods; i-- > 0;)
                    if (r->mods[i].base == base && r->mods[i].unload_ts == UINT64_MAX) {
                        r->mods[i].unload_ts = ts;
                        break;
                    }
                continue;
            }
            GROW(r->mods, r->n_mods, r->cap_mods, 16);
            char *ps = malloc(plen + 1);
            uint8_t *bs = malloc(blen ? blen : 1);
            if (!ps || !bs) { free(ps); free(bs); return PSC_ENOMEM; }
            memcpy(ps, path, plen);
            ps[plen] = 0;
            if (blen) memcpy(bs, bid, blen);
            r->mods[r->n_mods++] = (pst_module_t){ ps, base, size, bs, (uint32_t)blen, ts, UINT64_MAX };
        } else {
            return 0;   /* records are not self-delimiting: an unknown one ends the chunk */
        }
    }
    return 1;
}

const char *pst_string(const pst_reader_t *r, uint32_t id)
{
    uint64_t i;
    return map_get(&r->string_ids, id, &i) ? r->strings[i].s : NULL;
}

const uint64_t *pst_stack(const pst_reader_t *r, uint32_t id, uint32_t *depth)
{
    uint64_t i;
    if (!map_get(&r->stack_ids, id, &i)) { if (depth) *depth = 0; return NULL; }
    if (depth) *depth = r->stacks[i].depth;
    return r->stacks[i].f;
}

const pst_module_t *pst_modules(const pst_reader_t *r, size_t *n)
{
    *n = r->n_mods;
    return r->mods;
}

const pst_header_t *pst_header(const pst_reader_t *r) { return &r->hdr; }
const pst_status_t *pst_status(const pst_reader_t *r) { return &r->st; }
void pst_reader_set_window(pst_reader_t *r, uint64_t ns) { r->window = ns; }

/* ---- event semantics for the merge ------------------------------------------ */

/* The address an event frees (1, with space), if it frees one. */
static inline int frees_addr(const hev_t *e, int *space, uint64_t *addr)
{
    switch (e->type) {
    case PST_EV_FREE:
        *space = SP_HEAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_REALLOC:          /* old, ret, size */
        *space = SP_HEAP; *addr = e->f[0];
        return e->f[0] && e->f[1] != e->f[0] && (e->f[1] || e->f[2] == 0);
    case PST_EV_REALLOCARRAY:     /* old, ret, nmemb, size */
        *space = SP_HEAP; *addr = e->f[0];
        return e->f[0] && e->f[1] != e->f[0] && (e->f[1] || e->f[2] == 0 || e->f[3] == 0);
    case PST_EV_MUNMAP:
        *space = SP_MMAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_MREMAP:           /* old, old_len, ret, new_len, flags */
        *space = SP_MMAP; *addr = e->f[0];
        return e->f[0] && e->f[2] && e->f[2] != e->f[0];
    default:
        return 0;
    }
}

/* The address an event allocates (1, with space), if it allocates one. */
static inline int allocs_addr(const hev_t *e, int *space, uint64_t *addr)
{
    switch (e->type) {
    case PST_EV_MALLOC: case PST_EV_CALLOC: case PST_EV_POSIX_MEMALIGN:
    case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN: case PST_EV_VALLOC: case PST_EV_PVALLOC:
        *space = SP_HEAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_REALLOC: case PST_EV_REALLOCARRAY:
        *space = SP_HEAP; *addr = e->f[1];
        return e->f[1] && e->f[1] != e->f[0];
    case PST_EV_MMAP:
        *space = SP_MMAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_MREMAP:
        *space = SP_MMAP; *addr = e->f[2];
        return e->f[2] && e->f[2] != e->f[0];
    default:
        return 0;
    }
}

/* ---- streams ---------------------------------------------------------------- */

/* ---- decoding ------------------------------------------------------------------ */

/* pst_decode_event into an hev_t (any type, TS included). */
static const uint8_t *dec_generic(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                                  const uint8_t *end, hev_t *e, uint32_t *idbuf)
{
    pst_event_t ev;
    ev.n_ids = 0;
    ev.n_payload = 0;
    if (!(p = pst_decode_event(d, p, end, &ev, idbuf))) return NULL;
    e->type = ev.type;
    e->stack = ev.stack;
    memcpy(e->f, ev.f, r->nf[ev.type] * sizeof(uint64_t));
    e->n_ids = r->ext_kind[ev.type] == 'L' ? ev.n_ids : 0;
    e->n_payload = r->ext_kind[ev.type] == 'P' ? ev.n_payload : 0;
    if (e->n_payload) memcpy(e->payload, ev.payload, e->n_payload * sizeof(int64_t));
    return p;
}

/* pst_get_varint / pst_get_addr with codes of up to 3 bytes decoded inline
 * and without branches on their length (one 8-byte load when 8 bytes are
 * readable); longer codes, and the last bytes of a buffer, go to them. The
 * same values and the same failures either way. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline unsigned vshort(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    if (end - p < 8) return 0;
    uint64_t x;
    memcpy(&x, p, sizeof x);
    uint64_t stop = ~x & 0x808080u;                /* terminating bytes among the first 3 */
    if (!stop) return 0;
    unsigned len = ((unsigned)__builtin_ctzll(stop) >> 3) + 1;
    uint64_t val = (x & 0x7f) | ((x >> 1) & 0x3f80) | ((x >> 2) & 0x1fc000);
    *v = val & ((1ull << (7 * len)) - 1);
    return len;
}
#else
static inline unsigned vshort(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    (void)p; (void)end; (void)v;
    return 0;
}
#endif

static inline const uint8_t *rd_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    unsigned n = vshort(p, end, v);
    return n ? p + n : pst_get_varint(p, end, v);
}

static inline const uint8_t *rd_addr(const uint8_t *p, const uint8_t *end, uint64_t *base, uint64_t *addr)
{
    uint64_t code;
    unsigned n = vshort(p, end, &code);
    if (!n) return pst_get_addr(p, end, base, addr);
    int64_t d = pst_unzigzag(code >> 1);
    *addr = *base + ((code & 1) ? (uint64_t)d << 4 : (uint64_t)d);
    *base = *addr;
    return p + n;
}

#define RD_GETV(v) do { if (!(p = rd_varint(p, end, &(v)))) return NULL; } while (0)
#define RD_GETA(v) do { if (!(p = rd_addr(p, end, &d->last_addr, &(v)))) return NULL; } while (0)

/* Decode one record from [p, end) with decoder state d into e: the same
 * values and the same failures as pst_decode_event, with the common heap
 * records and TS decoded inline. L ids go to idbuf (PST_MAX_IDS entries;
 * may be NULL when the record is not an L event). Returns the position
 * after the record, or NULL on corrupt input. */
static inline const uint8_t *dec_rec(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                                     const uint8_t *end, hev_t *e, uint32_t *idbuf)
{
    if (p >= end) return NULL;
    unsigned tb = *p;
    switch (tb) {
    case PST_EV_MALLOC:
        p++;
        RD_GETA(e->f[0]);
        RD_GETV(e->f[1]);
        break;
    case PST_EV_FREE:
        p++;
        RD_GETA(e->f[0]);
        break;
    case PST_EV_CALLOC:
        p++;
        RD_GETA(e->f[0]);
        RD_GETV(e->f[1]);
        RD_GETV(e->f[2]);
        break;
    case PST_EV_REALLOC:
        p++;
        RD_GETA(e->f[0]);
        RD_GETA(e->f[1]);
        RD_GETV(e->f[2]);
        break;
    case PST_EV_TS: {
        uint64_t v;
        p++;
        RD_GETV(v);
        e->type = PST_EV_TS;
        e->stack = 0;
        e->f[0] = v;
        d->last_ts += v;
        d->since_ts = 0;
        return p;
    }
    default:
        return dec_generic(r, d, p, end, e, idbuf);
    }
    e->type = (uint8_t)tb;
    e->stack = 0;
    e->n_ids = 0;
    e->n_payload = 0;
    d->since_ts++;
    return p;
}

/* ---- streams ---------------------------------------------------------------- */

/* Index the frees queued in s (the head included), in order: done for the
 * only stream when a second one appears, which gives the chains the order
 * they would have had if indexed when read. */
static int index_queued(pst_reader_t *r, rstream_t *s)
{
    if (!s->qlen) return 0;
    int sp;
    uint64_t a, seq = s->emit_seq;
    if (frees_addr(&s->head, &sp, &a) && pend_add(&r->pend[sp], a, s, sp, seq, s->head.ts)) return PSC_ENOMEM;
    pst_enc_t d = s->hdec;
    const uint8_t *p = s->b + s->bhead, *end = s->b + s->btail;
    hev_t e;
    while (p < end && (p = dec_rec(r, &d, p, end, &e, r->idbuf))) {
        if (e.type == PST_EV_TS) continue;
        seq++;
        if (frees_addr(&e, &sp, &a) && pend_add(&r->pend[sp], a, s, sp, seq, d.last_ts)) return PSC_ENOMEM;
    }
    return 0;
}

static rstream_t *stream_get(pst_reader_t *r, uint32_t id, int *err)
{
    uint64_t i;
    if (map_get(&r->stream_ids, id, &i)) return r->sv[i];
    if (r->n_sv == r->cap_sv) {
        uint32_t cap = r->cap_sv ? r->cap_sv * 2 : 16;
        rstream_t **a = realloc(r->sv, cap * sizeof *a);
        if (!a) { *err = PSC_ENOMEM; return NULL; }
        r->sv = a;
        r->cap_sv = cap;
    }
    /* a second stream: the first one's queued frees were not indexed */
    if (r->n_sv == 1 && (*err = index_queued(r, r->sv[0]))) return NULL;
    rstream_t *s = calloc(1, sizeof *s);
    if (!s || map_put(&r->stream_ids, id, r->n_sv)) { free(s); *err = PSC_ENOMEM; return NULL; }
    s->id = id;
    s->idx = r->n_sv;
    s->hq_pos = -1;
    if (id > r->max_stream) r->max_stream = id;
    r->sv[r->n_sv++] = s;
    r->st.streams++;
    return s;
}

/* Append n event bytes to s's byte queue. The consumed prefix is reused:
 * the queued bytes move down when they fill at most half the buffer (so at
 * least as many bytes were appended since the last move: each byte moves
 * O(1) times), otherwise the buffer grows to twice what is needed (and by
 * half at least, so growing stays geometric). Not to powers of two: the
 * buffer, which the tail sweeps whole, stays within about twice the stream's
 * largest queue. */
static int squeue_append(rstream_t *s, const uint8_t *p, size_t n)
{
    if (!n) return 0;
    if (s->bcap - s->btail < n) {
        size_t live = s->btail - s->bhead;
        if (2 * (live + n) <= s->bcap) {
            memmove(s->b, s->b + s->bhead, live);
        } else {
            size_t cap = 2 * (live + n);
            if (cap < s->bcap + s->bcap / 2) cap = s->bcap + s->bcap / 2;
            cap = (cap + 4095) & ~(size_t)4095;
            uint8_t *nb = malloc(cap);
            if (!nb) return PSC_ENOMEM;
            if (live) memcpy(nb, s->b + s->bhead, live);
            free(s->b);
            s->b = nb;
            s->bcap = cap;
        }
        s->bhead = 0;
        s->btail = live;
    }
    memcpy(s->b + s->btail, p, n);
    s->btail += n;
    return 0;
}

/* Decode s's next queued event (after any TS records) into s->head. The
 * bytes were validated when their chunk was read, with the same decoder
 * state, so this does not fail. */
static inline int head_next(pst_reader_t *r, rstream_t *s)
{
    const uint8_t *p = s->b + s->bhead, *end = s->b + s->btail;
    for (;;) {
        if (p < end && (*p & PST_EV_TYPE_MASK) < PST_EV_MAX && r->ext_kind[*p & PST_EV_TYPE_MASK] == 'L' &&
            !s->ids && !(s->ids = malloc(PST_MAX_IDS * sizeof *s->ids)))
            return PSC_ENOMEM;
        p = dec_rec(r, &s->hdec, p, end, &s->head, s->ids);
        if (!p) return PSC_ECORRUPT;   /* not reached: validated when read */
        if (s->head.type != PST_EV_TS) break;
    }
    s->bhead = (size_t)(p - s->b);
    s->head.ts = s->hdec.last_ts;
    s->head.seq = s->emit_seq;
    return 0;
}

static int fops_grow(pst_reader_t *r)
{
    if (r->cap_fops > (UINT32_MAX >> 2)) return PSC_ENOMEM;
    uint32_t cap = r->cap_fops ? r->cap_fops * 2 : 1024;
    free_op_t *na = realloc(r->fops, cap * sizeof *na);
    if (!na) return PSC_ENOMEM;
    r->fops = na;
    r->cap_fops = cap;
    return 0;
}

/* Validate one EVENTS chunk, index its frees and pool events, and append its
 * event bytes to the stream's queue. 0 ok (or corrupt, noted), negative
 * error. A corrupt chunk leaves nothing behind. */
static int process_events(pst_reader_t *r, const pst_chunk_hdr_t *h, const uint8_t *p,
                          const uint8_t *end, uint64_t at)
{
    int err = 0;
    if (h->stream == 0) { set_corrupt(r, at, "events chunk without a stream"); return 0; }
    rstream_t *s = stream_get(r, h->stream, &err);
    if (!s) return err;
    uint64_t off;
    if (!(p = pst_get_varint(p, end, &off))) { set_corrupt(r, at, "bad stream offset"); return 0; }
    if (off != s->offset) { set_corrupt(r, at, "stream offset gap"); return 0; }
    const uint8_t *body = p;
    pst_enc_t dec = s->dec;
    uint64_t k = 0, lost = 0, seq0 = s->decode_seq;
    uint32_t tid = s->tid;
    int finished = s->finished;
    const char *bad = NULL;
    hev_t e;
    int wrapped = 0;
    /* With one stream there is no other stream's free to wait for: its
     * frees are indexed only when a second stream appears (index_queued).
     * Frees and pool events are noted here and indexed once the chunk has
     * proven good, so a corrupt chunk leaves nothing behind. */
    const int index_frees = r->n_sv > 1;
    r->n_pops = 0;
    r->n_fops = 0;
    while (p < end) {
        /* the common records first: no stack, no string, no pool */
        uint64_t a, v;
        const uint8_t *n;
        switch (*p) {
        case PST_EV_MALLOC:
            if (!(n = rd_addr(p + 1, end, &dec.last_addr, &a)) || !(n = rd_varint(n, end, &v))) break;
            dec.since_ts++;
            p = n;
            k++;
            continue;
        case PST_EV_FREE:
            if (!(n = rd_addr(p + 1, end, &dec.last_addr, &a))) break;
            dec.since_ts++;
            p = n;
            if (a && index_frees) {
                if (r->n_fops == r->cap_fops && (err = fops_grow(r))) return err;
                r->fops[r->n_fops++] = (free_op_t){ a, dec.last_ts, seq0 + k, SP_HEAP };
            }
            k++;
            continue;
        case PST_EV_TS:
            if (!(n = rd_varint(p + 1, end, &v))) break;
            wrapped |= dec.last_ts + v < dec.last_ts;
            dec.last_ts += v;
            dec.since_ts = 0;
            p = n;
            continue;
        default:
            break;
        }
        uint64_t ts_before = dec.last_ts;
        if (!(n = dec_rec(r, &dec, p, end, &e, r->idbuf))) { bad = "undecodable event"; break; }
        p = n;
        unsigned t = e.type;
        if (t == PST_EV_TS) { wrapped |= dec.last_ts < ts_before; continue; }
        /* definitions precede their first use in file order */
        if (e.stack && !map_get(&r->stack_ids, e.stack, NULL)) { bad = "undefined stack id"; break; }
        if (r->s_idx[t] >= 0 && e.f[r->s_idx[t]] && !map_get(&r->string_ids, e.f[r->s_idx[t]], NULL)) {
            bad = "undefined string id";
            break;
        }
        int sp;
        if (frees_addr(&e, &sp, &a) && index_frees) {
            if (r->n_fops == r->cap_fops && (err = fops_grow(r))) return err;
            r->fops[r->n_fops++] = (free_op_t){ a, dec.last_ts, seq0 + k, (uint32_t)sp };
        }
        if (is_pool_seq_event(t)) {
            if (r->n_pops == r->cap_pops) {
                uint32_t cap = r->cap_pops ? r->cap_pops * 2 : 64;
                pool_op_t *na = realloc(r->pops, cap * sizeof *na);
                if (!na) return PSC_ENOMEM;
                r->pops = na;
                r->cap_pops = cap;
            }
            r->pops[r->n_pops++] = (pool_op_t){ e.f[0], e.f[1], seq0 + k };
        }
        if (t == PST_EV_LOST) lost += e.f[0];
        if (t == PST_EV_THREAD_START) tid = (uint32_t)e.f[0];
        if (t == PST_EV_THREAD_END) finished = 1;
        k++;
    }
    if (bad) { set_corrupt(r, at, bad); return 0; }
    if ((err = squeue_append(s, body, (size_t)(end - body)))) return err;
    /* commit */
    if (wrapped) r->ts_wrapped = 1;
    for (uint32_t i = 0; i < r->n_fops; i++) {
        const free_op_t *op = &r->fops[i];
        if (pend_add(&r->pend[op->sp], op->addr, s, (int)op->sp, op->seq, op->ts)) return PSC_ENOMEM;
    }
    for (uint32_t i = 0; i < r->n_pops; i++) {
        const pool_op_t *op = &r->pops[i];
        uint64_t pi;
        if (!map_get(&r->pool_ids, op->pool, &pi)) {
            GROW(r->pools, r->n_pools, r->cap_pools, 8);
            pi = r->n_pools;
            if (map_put(&r->pool_ids, op->pool, pi)) return PSC_ENOMEM;
            memset(&r->pools[r->n_pools++], 0, sizeof(rpool_t));
        }
        if (pool_push(&r->pools[pi], (pent_t){ op->pseq, s, op->seq })) return PSC_ENOMEM;
    }
    r->st.lost += lost;
    int was_empty = s->qlen == 0;
    s->qlen += k;
    s->decode_seq += k;
    r->decoded += k;
    s->dec = dec;
    s->offset += (uint64_t)(end - body);
    s->tid = tid;
    s->finished = finished;
    if (dec.last_ts > r->newest_ts) r->newest_ts = dec.last_ts;
    r->st.queued += k;
    if (r->st.queued > r->st.peak_queued) r->st.peak_queued = r->st.queued;
    if (was_empty && k) {
        if ((err = head_next(r, s))) return err;
        if (sheap_push(&r->hq, s)) return PSC_ENOMEM;
    }
    return 0;
}

/* Read and process one chunk. 1 done, 0 nothing more (eof), negative error. */
static int read_chunk(pst_reader_t *r)
{
    if (r->eof) return 0;
    const uint8_t *p;
    long n = src_ensure(r, PST_CHUNK_HDR, &p);
    if (n < 0) return (int)n;
    uint64_t at = r->off;
    if (n == 0) {
        if (!r->st.end_seen) set_truncated(r, 0);
        r->st.complete = r->st.end_seen && !r->st.truncated && !r->st.corrupt;
        r->eof = 1;
        return 0;
    }
    if (n < PST_CHUNK_HDR) { set_truncated(r, (uint64_t)n); return 0; }
    pst_chunk_hdr_t h;
    pst_get_chunk_hdr(p, &h);
    if (h.len > PST_MAX_CHUNK) { set_corrupt(r, at, "chunk longer than the limit"); return 0; }
    n = src_ensure(r, PST_CHUNK_HDR + (size_t)h.len, &p);
    if (n < 0) return (int)n;
    if ((size_t)n < PST_CHUNK_HDR + (size_t)h.len) { set_truncated(r, src_remaining(r)); return 0; }
    const uint8_t *pl = p + PST_CHUNK_HDR, *end = pl + h.len;
    if (pst_crc32c(0, pl, h.len) != h.crc) { set_corrupt(r, at, "crc mismatch"); return 0; }
    int known = h.kind == PST_CHUNK_META || h.kind == PST_CHUNK_EVENTS || h.kind == PST_CHUNK_END ||
                h.kind == PST_CHUNK_SYNC;
    if (known && h.version != 1) { set_corrupt(r, at, "unknown chunk version"); return 0; }
    if (known && h.kind != PST_CHUNK_EVENTS && h.stream != 0) {
        set_corrupt(r, at, "stream id on a chunk without a stream");
        return 0;
    }
    int rc = 0;
    switch (h.kind) {
    case PST_CHUNK_META:
        rc = parse_meta(r, pl, end);
        if (rc == 0) { set_corrupt(r, at, "malformed meta record"); return 0; }
        rc = rc < 0 ? rc : 0;
        break;
    case PST_CHUNK_EVENTS:
        rc = process_events(r, &h, pl, end, at);
        break;
    case PST_CHUNK_END: {
        uint64_t ev, lost, ns;
        const uint8_t *q = pl;
        if (!(q = pst_get_varint(q, end, &ev)) || !(q = pst_get_varint(q, end, &lost)) ||
            !(q = pst_get_varint(q, end, &ns))) {
            set_corrupt(r, at, "malformed end chunk");
            return 0;
        }
        r->st.end_seen = 1;
        r->st.end_events = ev;
        r->st.end_lost = lost;
        r->st.end_streams = ns;
        r->st.lost += lost;
        /* a chunk skipped for a damaged kind byte, or a stream id changed by
         * damage, shows here: the writer counted what it wrote */
        if (ev != r->decoded || ns != r->n_sv || r->max_stream > ns) {
            set_corrupt(r, at, "end chunk counts differ from what was read");
            return 0;
        }
        break;
    }
    case PST_CHUNK_SYNC: {
        uint64_t w;
        if (!pst_get_varint(pl, end, &w)) { set_corrupt(r, at, "malformed sync chunk"); return 0; }
        if (w > r->sync_ts) r->sync_ts = w;
        break;
    }
    default:
        r->st.skipped_chunks++;
        break;
    }
    if (rc < 0) return rc;
    if (r->st.corrupt) return 0;
    src_consume(r, PST_CHUNK_HDR + (size_t)h.len);
    r->st.chunks++;
    return 1;
}


/* ---- merge ------------------------------------------------------------------ */

enum { C_NONE, C_FORCE, C_WAIT, C_UNORDERED };
enum { WHY_CAUSAL = 1, WHY_POOL = 2 };

/* What must happen before e (the head of s) goes out. */
static inline __attribute__((always_inline)) int constraint(pst_reader_t *r, rstream_t *s, const hev_t *e,
                             rstream_t **t, uint64_t *tseq, int *why)
{
    if (is_pool_seq_event(e->type)) {
        uint64_t pi;
        if (map_get(&r->pool_ids, e->f[0], &pi)) {
            pent_t *top = pool_top(&r->pools[pi]);
            if (top && top->pseq < e->f[1] && top->s != s) {
                *t = top->s; *tseq = top->seq; *why = WHY_POOL;
                return C_FORCE;
            }
        }
    }
    int sp;
    uint64_t a;
    if (allocs_addr(e, &sp, &a) && aset_has(&r->live[sp], a)) {
        if (e->type == PST_EV_MMAP && (e->f[3] & MAP_FIXED_FLAG)) return C_NONE;
        int in_self;
        *why = WHY_CAUSAL;
        if (pend_find(&r->pend[sp], r->sv, a, s, &in_self, r->ts_wrapped, t, tseq)) return C_FORCE;
        return in_self ? C_UNORDERED : C_WAIT;
    }
    return C_NONE;
}

static inline int window_passed(const pst_reader_t *r, const hev_t *e)
{
    return r->newest_ts >= r->window && e->ts <= r->newest_ts - r->window;
}

/* No stream can still deliver an event ordered before e. Streams are not
 * announced: a thread's first chunk may appear in the file long after its
 * first event, so any stream — quiet, or not seen yet — may still deliver
 * an earlier event until the writer's SYNC watermark has passed it, or the
 * window has (for writers without SYNC chunks), or the input has ended. */
static inline int safe(const pst_reader_t *r, const hev_t *e)
{
    return r->eof || e->ts < r->sync_ts || window_passed(r, e);
}

static inline int apply_effects(pst_reader_t *r, rstream_t *s, const hev_t *e)
{
    int sp;
    uint64_t a;
    if (frees_addr(e, &sp, &a)) {
        pend_del(&r->pend[sp], a, s, sp, e->seq);
        aset_del(&r->live[sp], a);
    }
    if (allocs_addr(e, &sp, &a) && aset_add(&r->live[sp], a)) return PSC_ENOMEM;
    if (is_pool_seq_event(e->type)) {
        uint64_t pi;
        if (map_get(&r->pool_ids, e->f[0], &pi)) {
            rpool_t *p = &r->pools[pi];
            if (p->have_last && e->f[1] < p->last_seq) r->st.pool_unordered++;
            if (!p->have_last || e->f[1] > p->last_seq) p->last_seq = e->f[1];
            p->have_last = 1;
            pool_top(p);    /* drop what has gone out */
        }
    }
    return 0;
}

/* Hand out the head of s into ev, then decode the next one. */
static int emit(pst_reader_t *r, rstream_t *s, pst_event_t *ev)
{
    hev_t *e = &s->head;
    unsigned t = e->type;
    s->emit_seq++;
    s->qlen--;
    r->st.queued--;
    int rc = 0;
    switch (t) {       /* apply_effects, the common cases inline */
    case PST_EV_MALLOC: case PST_EV_CALLOC:
        if (e->f[0]) rc = aset_add(&r->live[SP_HEAP], e->f[0]);
        break;
    case PST_EV_FREE:
        if (e->f[0]) {
            pend_del(&r->pend[SP_HEAP], e->f[0], s, SP_HEAP, e->seq);
            aset_del(&r->live[SP_HEAP], e->f[0]);
        }
        break;
    default:
        rc = apply_effects(r, s, e);
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
        int hr = head_next(r, s);
        if (hr) return hr;
        /* a run: s stays on top while its head is below both children */
        sheap_t *h = &r->hq;
        if (h->n > 1 && !(s->hq_pos == 0 && sless(h, s, h->a[1]) && (h->n < 3 || sless(h, s, h->a[2]))))
            sheap_fix(h, s);
    } else {
        sheap_remove(&r->hq, s);
        if (s->bhead == s->btail) s->bhead = s->btail = 0;
    }
    return rc ? rc : 1;
}

static int force_push(pst_reader_t *r, rstream_t *t, uint64_t target)
{
    if (r->n_force == r->cap_force) {
        uint32_t cap = r->cap_force ? r->cap_force * 2 : 8;
        struct force *a = realloc(r->force, cap * sizeof *a);
        if (!a) return PSC_ENOMEM;
        r->force = a;
        r->cap_force = cap;
    }
    r->force[r->n_force++] = (struct force){ t, target };
    t->on_force = 1;
    return 0;
}

static void force_pop(pst_reader_t *r)
{
    r->force[--r->n_force].s->on_force = 0;
}

int pst_next(pst_reader_t *r, pst_event_t *ev)
{
    /* the usual case: nothing forced, the top head is safe and free to go */
    if (!r->n_force && r->hq.n) {
        rstream_t *s = r->hq.a[0], *t;
        uint64_t tseq;
        int why;
        if (safe(r, &s->head) && constraint(r, s, &s->head, &t, &tseq, &why) == C_NONE)
            return emit(r, s, ev);
    }
    for (;;) {
        rstream_t *s, *t;
        uint64_t tseq;
        int why = 0, c, rc;
        if (r->n_force) {
            /* a stream being drained up to a free / a pool event another one waits for */
            struct force *f = &r->force[r->n_force - 1];
            s = f->s;
            if (!s->qlen || s->emit_seq > f->target) { force_pop(r); continue; }
            hev_t *e = &s->head;
            c = constraint(r, s, e, &t, &tseq, &why);
            if (c == C_FORCE && !t->on_force) {
                if ((rc = force_push(r, t, tseq))) return rc;
                if (why == WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
                continue;
            }
            if (c != C_NONE && why == WHY_CAUSAL) r->st.unordered++;   /* a cycle, or nothing to wait for */
            uint64_t target = f->target;
            rc = emit(r, s, ev);
            if (rc < 0) return rc;
            if (s->emit_seq > target && r->n_force && r->force[r->n_force - 1].s == s) force_pop(r);
            return 1;
        }
        if (!r->hq.n) {
            if (r->eof) return 0;
            if ((rc = read_chunk(r)) < 0) return rc;
            continue;
        }
        s = r->hq.a[0];
        hev_t *e = &s->head;
        if (!safe(r, e)) {
            if ((rc = read_chunk(r)) < 0) return rc;
            continue;
        }
        c = constraint(r, s, e, &t, &tseq, &why);
        if (c == C_FORCE) {
            if ((rc = force_push(r, t, tseq))) return rc;
            if (why == WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
            continue;
        }
        if (c == C_WAIT && !r->eof && !window_passed(r, e)) {
            if ((rc = read_chunk(r)) < 0) return rc;
            continue;
        }
        if (c == C_WAIT || c == C_UNORDERED) r->st.unordered++;
        return emit(r, s, ev);
    }
}
static char *dup_bytes(const uint8_t *b, size_t n)
{
    char *s = malloc(n + 1);
    if (!s) return NULL;
    memcpy(s, b, n);
    s[n] = 0;
    return s;
}

static int parse_header(pst_reader_t *r)
{
    const uint8_t *p;
    long n = src_ensure(r, PST_FILE_HDR_FIXED, &p);
    if (n < 0) return (int)n;
    size_t cmp = (size_t)n < 8 ? (size_t)n : 8;
    if (memcmp(p, PST_MAGIC, cmp) != 0) return PSC_ECORRUPT;
    if (n < PST_FILE_HDR_FIXED) return PSC_ETRUNC;
    r->hdr.major = (uint16_t)(p[8] | p[9] << 8);
    r->hdr.minor = (uint16_t)(p[10] | p[11] << 8);
    uint32_t tlv = (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 | (uint32_t)p[15] << 24;
    if (r->hdr.major != PST_MAJOR) return PSC_EVERSION;
    if (tlv > MAX_HDR_TLV) return PSC_ECORRUPT;
    n = src_ensure(r, PST_FILE_HDR_FIXED + (size_t)tlv, &p);
    if (n < 0) return (int)n;
    if ((size_t)n < PST_FILE_HDR_FIXED + (size_t)tlv) return PSC_ETRUNC;
    const uint8_t *q = p + PST_FILE_HDR_FIXED, *end = q + tlv;
    while (q < end) {
        uint64_t tag, len, v = 0;
        if (!(q = pst_get_varint(q, end, &tag)) || !(q = pst_get_varint(q, end, &len))) return PSC_ECORRUPT;
        if (len > (uint64_t)(end - q)) return PSC_ECORRUPT;
        const uint8_t *val = q;
        q += len;
        switch (tag) {
        case PST_HDR_PID: case PST_HDR_PPID: case PST_HDR_START_REAL: case PST_HDR_START_MONO:
        case PST_HDR_STACKS: case PST_HDR_DEPTH: case PST_HDR_PAGE_SIZE: case PST_HDR_PARENT_PID:
        case PST_HDR_EXEC_GEN:
            if (pst_get_varint(val, q, &v) != q) return PSC_ECORRUPT;
            break;
        default:
            break;
        }
        char **dst = NULL;
        switch (tag) {
        case PST_HDR_PID:        r->hdr.pid = v; break;
        case PST_HDR_PPID:       r->hdr.ppid = v; break;
        case PST_HDR_START_REAL: r->hdr.start_real_ns = v; break;
        case PST_HDR_START_MONO: r->hdr.start_mono_ns = v; break;
        case PST_HDR_STACKS:     r->hdr.stacks = (uint32_t)v; break;
        case PST_HDR_DEPTH:      r->hdr.depth = (uint32_t)v; break;
        case PST_HDR_PAGE_SIZE:  r->hdr.page_size = v; break;
        case PST_HDR_PARENT_PID: r->hdr.parent_pid = v; break;
        case PST_HDR_EXEC_GEN:   r->hdr.exec_gen = v; break;
        case PST_HDR_EXE:        dst = &r->exe; break;
        case PST_HDR_TOOL:       dst = &r->tool; break;
        case PST_HDR_HOST:       dst = &r->host; break;
        case PST_HDR_ARGV:       dst = &r->argv_raw; r->hdr.argv_len = (size_t)len; break;
        default:                 break;   /* unknown tags are skipped */
        }
        if (dst) {
            free(*dst);
            if (!(*dst = dup_bytes(val, (size_t)len))) return PSC_ENOMEM;
        }
    }
    /* split argv */
    size_t argc = 0;
    for (size_t i = 0; i < r->hdr.argv_len; i++)
        if (r->argv_raw[i] == 0 || i + 1 == r->hdr.argv_len) argc++;
    if (!(r->argv = calloc(argc + 1, sizeof *r->argv))) return PSC_ENOMEM;
    size_t k = 0, startp = 0;
    for (size_t i = 0; i < r->hdr.argv_len; i++)
        if (r->argv_raw[i] == 0 || i + 1 == r->hdr.argv_len) {
            r->argv[k++] = r->argv_raw + startp;   /* the copy has a NUL after the last byte */
            startp = i + 1;
        }
    r->hdr.argc = (uint32_t)argc;
    r->hdr.argv = (const char *const *)r->argv;
    r->hdr.exe = r->exe ? r->exe : "";
    r->hdr.tool = r->tool ? r->tool : "";
    r->hdr.host = r->host ? r->host : "";
    r->hdr.argv_raw = r->argv_raw ? r->argv_raw : "";
    src_consume(r, PST_FILE_HDR_FIXED + (size_t)tlv);
    return 0;
}

static pst_reader_t *reader_new(void)
{
    pst_reader_t *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->fd = -1;
    r->window = PST_DEFAULT_WINDOW_NS;
    r->idbuf = malloc(PST_MAX_IDS * sizeof *r->idbuf);
    r->out_ids = malloc(PST_MAX_IDS * sizeof *r->out_ids);
    if (!r->idbuf || !r->out_ids) { free(r->idbuf); free(r->out_ids); free(r); return NULL; }
    for (unsigned t = 0; t < PST_EV_MAX; t++) {
        const char *lay = pst_event_layout(t);
        r->s_idx[t] = r->ext_idx[t] = -1;
        if (!lay) continue;
        r->nf[t] = (uint8_t)strlen(lay);
        for (unsigned i = 0; lay[i]; i++) {
            if (lay[i] == 'S' && r->s_idx[t] < 0) r->s_idx[t] = (int8_t)i;
            if (lay[i] == 'L' || lay[i] == 'P') { r->ext_idx[t] = (int8_t)i; r->ext_kind[t] = lay[i]; }
        }
    }
    return r;
}

static pst_reader_t *finish_open(pst_reader_t *r, int *err)
{
    int rc = parse_header(r);
    if (rc) {
        pst_close(r);
        if (err) *err = rc;
        return NULL;
    }
    return r;
}

pst_reader_t *pst_open(const char *path, int *err)
{
    pst_reader_t *r = reader_new();
    if (!r) { if (err) *err = PSC_ENOMEM; return NULL; }
    if (!(r->buf = malloc(READ_BLOCK))) { pst_close(r); if (err) *err = PSC_ENOMEM; return NULL; }
    r->bcap = READ_BLOCK;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        int e = errno;
        pst_close(r);
        errno = e;
        if (err) *err = PSC_EIO;
        return NULL;
    }
    return finish_open(r, err);
}

pst_reader_t *pst_open_mem(const void *buf, size_t len, int *err)
{
    pst_reader_t *r = reader_new();
    if (!r) { if (err) *err = PSC_ENOMEM; return NULL; }
    r->mem = buf;
    r->mem_len = len;
    return finish_open(r, err);
}

void pst_close(pst_reader_t *r)
{
    if (!r) return;
    if (r->fd >= 0) close(r->fd);
    free(r->buf);
    free(r->exe); free(r->tool); free(r->host); free(r->argv_raw); free(r->argv);
    for (uint32_t i = 0; i < r->n_strings; i++) free(r->strings[i].s);
    free(r->strings);
    for (uint32_t i = 0; i < r->n_stacks; i++) free(r->stacks[i].f);
    free(r->stacks);
    for (size_t i = 0; i < r->n_mods; i++) { free((void *)r->mods[i].path); free((void *)r->mods[i].build_id); }
    free(r->mods);
    map_free(&r->string_ids);
    map_free(&r->stack_ids);
    map_free(&r->stream_ids);
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rstream_t *s = r->sv[i];
        free(s->b);
        free(s->ids);
        free(s->runs_of[0].t);
        free(s->runs_of[1].t);
        free(s);
    }
    free(r->sv);
    free(r->hq.a);
    for (int i = 0; i < 2; i++) {
        free(r->live[i].k);
        free(r->live[i].live);
        free(r->pend[i].head.t);
        free(r->pend[i].nodes);
        free(r->pend[i].runs);
    }
    map_free(&r->pool_ids);
    for (uint32_t i = 0; i < r->n_pools; i++) free(r->pools[i].h);
    free(r->pools);
    free(r->force);
    free(r->pops);
    free(r->fops);
    free(r->out_ids);
    free(r->idbuf);
    free(r);
}
