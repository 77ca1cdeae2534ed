/* reader.c — the streaming .pst reader and its merge (see reader.h; the
 * algorithm is described for people in FORMAT.md, "Merge order").
 *
 * Pipeline: source (read() blocks into one buffer, or memory) -> chunks
 * (CRC-checked, META definitions stored, EVENTS decoded into the stream's
 * FIFO queue, END counts kept) -> merge (pick the queued head with the
 * smallest (ts, stream) once it is older than the newest time read minus
 * the window, or the input has ended; before handing it out, let a pool
 * event with a smaller pool_seq or a queued free of the address it
 * allocates go first) -> pst_event_t.
 *
 * Structures (all bounded by what is live or queued, never by file length):
 *   streams    id -> rstream (queue ring, decoder state, heap positions)
 *   hq         binary heap of the streams with queued events, keyed by
 *              (head ts, stream id)
 *   live[2]    heap / mmap addresses live in the reader's view
 *   pend[2]    queued frees by address: address -> chain of (stream, seq)
 *   pools      pool id -> last pool_seq out and a min-heap of queued
 *              (pool_seq, stream, seq), stale entries dropped lazily
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pserr.h"
#include "reader.h"

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
    if (!t) return PS_ENOMEM;
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
    if ((m->n + 1) * 4 > m->cap * 3 && map_grow(m)) return PS_ENOMEM;   /* load <= 3/4 */
    uint32_t mask = m->cap - 1, i = map_slot(m, k);
    while (m->t[i].k != EMPTY_KEY) i = (i + 1) & mask;
    m->t[i] = (kv_t){ k, v };
    m->n++;
    return 0;
}

static int map_del(u64map_t *m, uint64_t k)
{
    if (k == EMPTY_KEY) { int had = m->has_max; m->has_max = 0; return had; }
    kv_t *e = map_find(m, k);
    if (!e) return 0;
    uint32_t mask = m->cap - 1, i = (uint32_t)(e - m->t);
    for (uint32_t j = (i + 1) & mask;; j = (j + 1) & mask) {
        if (m->t[j].k == EMPTY_KEY) break;
        uint32_t h = map_slot(m, m->t[j].k);
        /* move j back to i unless its home lies cyclically in (i, j] */
        if (((j - h) & mask) >= ((j - i) & mask)) { m->t[i] = m->t[j]; i = j; }
    }
    m->t[i].k = EMPTY_KEY;
    m->n--;
    return 1;
}

static size_t map_count(const u64map_t *m) { return m->n + (m->has_max ? 1 : 0); }
static void map_free(u64map_t *m) { free(m->t); memset(m, 0, sizeof *m); }

/* ---- queued events and streams ---------------------------------------------- */
typedef struct qev {
    uint64_t ts, seq;
    uint64_t f[PST_MAX_FIELDS];
    void    *ext;              /* L: uint32_t ids; P: int64_t payload */
    uint32_t stack, n_ext;
    uint8_t  type;
} qev_t;

typedef struct rstream {
    uint32_t id, tid;
    pst_enc_t dec;
    uint64_t offset;           /* stream bytes consumed */
    uint64_t decode_seq;       /* seq of the next decoded event */
    uint64_t emit_seq;         /* seq of the queue head */
    qev_t   *q;
    uint32_t qcap, qhead, qlen;
    int      finished;         /* THREAD_END decoded */
    int      hq_pos;           /* -1 when not in the heap */
    int      on_force;
} rstream_t;

static inline qev_t *qat(rstream_t *s, uint32_t i) { return &s->q[(s->qhead + i) & (s->qcap - 1)]; }

/* ---- heaps of streams ------------------------------------------------------ */
typedef struct sheap { rstream_t **a; uint32_t n, cap; } sheap_t;

static inline uint64_t skey(const sheap_t *h, const rstream_t *s)
{
    (void)h;
    return s->q[s->qhead].ts;
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
        if (!a) return PS_ENOMEM;
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
/* Chains are FIFO (appended at the tail, the head node knows the tail): the
 * free handed out is nearly always the oldest queued one, at the head. */
typedef struct pnode { rstream_t *s; uint64_t seq, ts; uint32_t next, tail; } pnode_t;
typedef struct pendtab {
    u64map_t head;             /* address -> node index + 1 */
    pnode_t *nodes;
    uint32_t n, cap, free_list; /* free_list: index + 1, 0 = none */
} pendtab_t;

#define PEND_SCAN_MAX 256      /* longest chain walked when looking for another stream's free */

static int pend_add(pendtab_t *t, uint64_t addr, rstream_t *s, uint64_t seq, uint64_t ts)
{
    uint32_t idx;
    if (t->free_list) {
        idx = t->free_list - 1;
        t->free_list = t->nodes[idx].next;
    } else {
        if (t->n == t->cap) {
            uint32_t cap = t->cap ? t->cap * 2 : 256;
            pnode_t *a = realloc(t->nodes, cap * sizeof *a);
            if (!a) return PS_ENOMEM;
            t->nodes = a;
            t->cap = cap;
        }
        idx = t->n++;
    }
    t->nodes[idx] = (pnode_t){ s, seq, ts, 0, idx + 1 };
    uint64_t head = 0;
    if (map_get(&t->head, addr, &head)) {
        pnode_t *h = &t->nodes[head - 1];
        t->nodes[h->tail - 1].next = idx + 1;
        h->tail = idx + 1;
        return 0;
    }
    if (map_put(&t->head, addr, idx + 1)) {
        t->nodes[idx].next = t->free_list;
        t->free_list = idx + 1;
        return PS_ENOMEM;
    }
    return 0;
}

static void pend_del(pendtab_t *t, uint64_t addr, const rstream_t *s, uint64_t seq)
{
    uint64_t head;
    if (!map_get(&t->head, addr, &head)) return;
    uint32_t prev = 0, cur = (uint32_t)head;
    while (cur) {
        pnode_t *nd = &t->nodes[cur - 1];
        if (nd->s == s && nd->seq == seq) {
            if (prev) {
                t->nodes[prev - 1].next = nd->next;
                pnode_t *h = &t->nodes[head - 1];
                if (h->tail == cur) h->tail = prev;
            } else if (nd->next) {
                t->nodes[nd->next - 1].tail = nd->tail;
                map_put(&t->head, addr, nd->next);   /* the key exists: cannot fail */
            } else {
                map_del(&t->head, addr);
            }
            nd->next = t->free_list;
            t->free_list = cur;
            return;
        }
        prev = cur;
        cur = nd->next;
    }
}

/* The queued free of addr in a stream other than `not`, earliest by ts
 * among the first PEND_SCAN_MAX of the chain. *in_self = 1 when `not`
 * itself has one. */
static pnode_t *pend_find(pendtab_t *t, uint64_t addr, const rstream_t *not, int *in_self)
{
    uint64_t head;
    *in_self = 0;
    if (!map_get(&t->head, addr, &head)) return NULL;
    pnode_t *best = NULL;
    unsigned walked = 0;
    for (uint32_t cur = (uint32_t)head; cur && walked < PEND_SCAN_MAX; cur = t->nodes[cur - 1].next, walked++) {
        pnode_t *nd = &t->nodes[cur - 1];
        if (nd->s == not) { *in_self = 1; continue; }
        if (!best || nd->ts < best->ts || (nd->ts == best->ts && nd->s->id < best->s->id)) best = nd;
    }
    return best;
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
        if (!a) return PS_ENOMEM;
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
    u64map_t live[2];
    pendtab_t pend[2];
    u64map_t pool_ids;
    rpool_t *pools; uint32_t n_pools, cap_pools;
    struct force { rstream_t *s; uint64_t target; } *force;
    uint32_t n_force, cap_force;
    uint64_t window, newest_ts, last_out_ts;
    uint64_t decoded;          /* events decoded (TS records not counted) */
    uint32_t max_stream;       /* highest stream id seen (ids are 1..streams) */
    int      out_any;

    uint8_t  nf[PST_EV_MAX];
    int8_t   s_idx[PST_EV_MAX], ext_idx[PST_EV_MAX];
    char     ext_kind[PST_EV_MAX];

    void    *out_ext;          /* ext of the event handed out last */
    uint32_t *idbuf;
    pst_status_t st;
};

/* ---- source ------------------------------------------------------------------ */

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
            if (!b) return PS_ENOMEM;
            r->buf = b;
            r->bcap = cap;
        }
        while (r->blim < n) {
            ssize_t k = read(r->fd, r->buf + r->blim, r->bcap - r->blim);
            if (k < 0 && errno == EINTR) continue;
            if (k < 0) return PS_EIO;
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
        r->st.error = PS_ECORRUPT;
    }
    r->eof = 1;
}

static void set_truncated(pst_reader_t *r, uint64_t unread)
{
    r->st.truncated = 1;
    r->st.unread_bytes = unread;
    if (!r->st.error) r->st.error = PS_ETRUNC;
    r->eof = 1;
}

/* ---- definitions ------------------------------------------------------------ */

#define GROW(arr, n, cap, init)                                                   \
    do {                                                                          \
        if ((n) == (cap)) {                                                       \
            size_t ncap_ = (cap) ? (size_t)(cap) * 2 : (init);                    \
            void *na_ = realloc((arr), ncap_ * sizeof *(arr));                    \
            if (!na_) return PS_ENOMEM;                                           \
            (arr) = na_;                                                          \
            (cap) = ncap_;                                                        \
        }                                                                         \
    } while (0)

static int def_string(pst_reader_t *r, uint64_t id, const uint8_t *b, size_t len)
{
    if (map_get(&r->string_ids, id, NULL)) return 0;     /* first definition wins */
    GROW(r->strings, r->n_strings, r->cap_strings, 64);
    char *s = malloc(len + 1);
    if (!s) return PS_ENOMEM;
    memcpy(s, b, len);
    s[len] = 0;
    if (map_put(&r->string_ids, id, r->n_strings)) { free(s); return PS_ENOMEM; }
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
            if (!f) return PS_ENOMEM;
            for (uint64_t i = 0; i < n; i++) {
                if (!(p = pst_get_varint(p, end, &v))) { free(f); return 0; }
                f[i] = i ? f[i - 1] + (uint64_t)pst_unzigzag(v) : v;
            }
            if (map_get(&r->stack_ids, id, NULL)) { free(f); continue; }
            if (r->n_stacks == r->cap_stacks) {
                size_t cap = r->cap_stacks ? r->cap_stacks * 2 : 64;
                rstack_t *a = realloc(r->stacks, cap * sizeof *a);
                if (!a) { free(f); return PS_ENOMEM; }
                r->stacks = a;
                r->cap_stacks = (uint32_t)cap;
            }
            if (map_put(&r->stack_ids, id, r->n_stacks)) { free(f); return PS_ENOMEM; }
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
            if (!ps || !bs) { free(ps); free(bs); return PS_ENOMEM; }
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
static int frees_addr(const qev_t *e, int *space, uint64_t *addr)
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
static int allocs_addr(const qev_t *e, int *space, uint64_t *addr)
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

static rstream_t *stream_get(pst_reader_t *r, uint32_t id, int *err)
{
    uint64_t i;
    if (map_get(&r->stream_ids, id, &i)) return r->sv[i];
    if (r->n_sv == r->cap_sv) {
        uint32_t cap = r->cap_sv ? r->cap_sv * 2 : 16;
        rstream_t **a = realloc(r->sv, cap * sizeof *a);
        if (!a) { *err = PS_ENOMEM; return NULL; }
        r->sv = a;
        r->cap_sv = cap;
    }
    rstream_t *s = calloc(1, sizeof *s);
    if (!s || map_put(&r->stream_ids, id, r->n_sv)) { free(s); *err = PS_ENOMEM; return NULL; }
    s->id = id;
    s->hq_pos = -1;
    if (id > r->max_stream) r->max_stream = id;
    r->sv[r->n_sv++] = s;
    r->st.streams++;
    return s;
}

/* Room for `more` slots after the first `used` (queued plus being decoded). */
static int queue_reserve(rstream_t *s, uint32_t used, uint32_t more)
{
    if (s->qcap - used >= more) return 0;
    uint32_t cap = s->qcap ? s->qcap : 64;
    while (cap - used < more) {
        if (cap > (1u << 30)) return PS_ENOMEM;
        cap *= 2;
    }
    qev_t *q = malloc((size_t)cap * sizeof *q);
    if (!q) return PS_ENOMEM;
    for (uint32_t i = 0; i < used; i++) q[i] = *qat(s, i);
    free(s->q);
    s->q = q;
    s->qcap = cap;
    s->qhead = 0;
    return 0;
}

/* Index a newly queued event: pending frees, pool order, lost counts. */
static int index_event(pst_reader_t *r, rstream_t *s, const qev_t *e)
{
    int sp;
    uint64_t a;
    if (frees_addr(e, &sp, &a) && pend_add(&r->pend[sp], a, s, e->seq, e->ts)) return PS_ENOMEM;
    if (is_pool_seq_event(e->type)) {
        uint64_t pi;
        if (!map_get(&r->pool_ids, e->f[0], &pi)) {
            GROW(r->pools, r->n_pools, r->cap_pools, 8);
            pi = r->n_pools;
            if (map_put(&r->pool_ids, e->f[0], pi)) return PS_ENOMEM;
            memset(&r->pools[r->n_pools++], 0, sizeof(rpool_t));
        }
        if (pool_push(&r->pools[pi], (pent_t){ e->f[1], s, e->seq })) return PS_ENOMEM;
    }
    if (e->type == PST_EV_LOST) r->st.lost += e->f[0];
    return 0;
}

/* Decode one EVENTS chunk into its stream's queue. 0 ok (or corrupt, noted),
 * negative error. */
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
    uint32_t k = 0, tid = s->tid;
    int finished = s->finished;
    pst_event_t ev;
    while (p < end) {
        if ((k & 255) == 0 && queue_reserve(s, s->qlen + k, 256)) { err = PS_ENOMEM; goto undo; }
        const uint8_t *n = pst_decode_event(&dec, p, end, &ev, r->idbuf);
        if (!n) { set_corrupt(r, at, "undecodable event"); goto undo; }
        p = n;
        if (ev.type == PST_EV_TS) continue;
        qev_t *q = qat(s, s->qlen + k);
        q->ts = dec.last_ts;
        q->seq = s->decode_seq + k;
        q->type = ev.type;
        q->stack = ev.stack;
        memcpy(q->f, ev.f, r->nf[ev.type] * sizeof(uint64_t));
        q->ext = NULL;
        q->n_ext = 0;
        char ek = r->ext_kind[ev.type];
        if (ek == 'L' && ev.n_ids) {
            if (!(q->ext = malloc(ev.n_ids * sizeof(uint32_t)))) { err = PS_ENOMEM; goto undo; }
            memcpy(q->ext, ev.ids, ev.n_ids * sizeof(uint32_t));
            q->n_ext = ev.n_ids;
        } else if (ek == 'P' && ev.n_payload) {
            if (!(q->ext = malloc(ev.n_payload * sizeof(int64_t)))) { err = PS_ENOMEM; goto undo; }
            memcpy(q->ext, ev.payload, ev.n_payload * sizeof(int64_t));
            q->n_ext = ev.n_payload;
        }
        /* definitions precede their first use in file order */
        if (ev.stack && !map_get(&r->stack_ids, ev.stack, NULL)) {
            set_corrupt(r, at, "undefined stack id");
            k++;
            goto undo;
        }
        if (r->s_idx[ev.type] >= 0 && ev.f[r->s_idx[ev.type]] &&
            !map_get(&r->string_ids, ev.f[r->s_idx[ev.type]], NULL)) {
            set_corrupt(r, at, "undefined string id");
            k++;
            goto undo;
        }
        if (ev.type == PST_EV_THREAD_START) tid = (uint32_t)ev.f[0];
        if (ev.type == PST_EV_THREAD_END) finished = 1;
        k++;
    }
    /* commit */
    int was_empty = s->qlen == 0;
    for (uint32_t i = 0; i < k; i++)
        if ((err = index_event(r, s, qat(s, s->qlen + i)))) return err;
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
    if (was_empty && k && sheap_push(&r->hq, s)) return PS_ENOMEM;
    return 0;
undo:
    for (uint32_t i = 0; i < k; i++) free(qat(s, s->qlen + i)->ext);
    return err;
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
    int known = h.kind == PST_CHUNK_META || h.kind == PST_CHUNK_EVENTS || h.kind == PST_CHUNK_END;
    if (known && h.version != 1) { set_corrupt(r, at, "unknown chunk version"); return 0; }
    if ((h.kind == PST_CHUNK_META || h.kind == PST_CHUNK_END) && h.stream != 0) {
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
static int constraint(pst_reader_t *r, rstream_t *s, const qev_t *e,
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
    if (allocs_addr(e, &sp, &a) && map_get(&r->live[sp], a, NULL)) {
        if (e->type == PST_EV_MMAP && (e->f[3] & MAP_FIXED_FLAG)) return C_NONE;
        int in_self;
        pnode_t *nd = pend_find(&r->pend[sp], a, s, &in_self);
        *why = WHY_CAUSAL;
        if (nd) { *t = nd->s; *tseq = nd->seq; return C_FORCE; }
        return in_self ? C_UNORDERED : C_WAIT;
    }
    return C_NONE;
}

static int window_passed(const pst_reader_t *r, const qev_t *e)
{
    return r->newest_ts >= r->window && e->ts <= r->newest_ts - r->window;
}

/* No stream can still deliver an event ordered before e. Streams are not
 * announced: a thread's first chunk may appear in the file long after its
 * first event, so any stream — quiet, or not seen yet — may still deliver
 * an earlier event until the window has passed (or the input has ended). */
static int safe(const pst_reader_t *r, const qev_t *e)
{
    return r->eof || window_passed(r, e);
}

static int apply_effects(pst_reader_t *r, rstream_t *s, const qev_t *e)
{
    int sp;
    uint64_t a;
    if (frees_addr(e, &sp, &a)) {
        pend_del(&r->pend[sp], a, s, e->seq);
        map_del(&r->live[sp], a);
    }
    if (allocs_addr(e, &sp, &a) && map_put(&r->live[sp], a, 1)) return PS_ENOMEM;
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

/* Hand out the head of s into ev. */
static int emit(pst_reader_t *r, rstream_t *s, pst_event_t *ev)
{
    qev_t *e = qat(s, 0);
    s->qhead = (s->qhead + 1) & (s->qcap - 1);
    s->qlen--;
    s->emit_seq++;
    r->st.queued--;
    if (s->qlen) sheap_fix(&r->hq, s);
    else sheap_remove(&r->hq, s);
    int rc = apply_effects(r, s, e);
    if (rc) { free(e->ext); return rc; }

    unsigned t = e->type;
    ev->type = e->type;
    ev->stream = s->id;
    ev->tid = s->tid;
    ev->seq = e->seq;
    ev->ts = e->ts;
    ev->stack = e->stack;
    memcpy(ev->f, e->f, r->nf[t] * sizeof(uint64_t));
    ev->ids = NULL;
    ev->n_ids = 0;
    ev->n_payload = 0;
    ev->str = NULL;
    if (r->s_idx[t] >= 0 && e->f[r->s_idx[t]] <= UINT32_MAX)
        ev->str = pst_string(r, (uint32_t)e->f[r->s_idx[t]]);
    if (r->ext_kind[t] == 'L') {
        ev->ids = e->ext;
        ev->n_ids = e->n_ext;
        r->out_ext = e->ext;
    } else if (r->ext_kind[t] == 'P') {
        if (e->n_ext) memcpy(ev->payload, e->ext, e->n_ext * sizeof(int64_t));
        ev->n_payload = e->n_ext;
        free(e->ext);
    }
    if (r->out_any && e->ts < r->last_out_ts) r->st.late++;
    if (!r->out_any || e->ts > r->last_out_ts) r->last_out_ts = e->ts;
    r->out_any = 1;
    r->st.events++;
    r->st.live = map_count(&r->live[0]) + map_count(&r->live[1]);
    return 1;
}

static int force_push(pst_reader_t *r, rstream_t *t, uint64_t target)
{
    if (r->n_force == r->cap_force) {
        uint32_t cap = r->cap_force ? r->cap_force * 2 : 8;
        struct force *a = realloc(r->force, cap * sizeof *a);
        if (!a) return PS_ENOMEM;
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
    free(r->out_ext);
    r->out_ext = NULL;
    for (;;) {
        rstream_t *s, *t;
        uint64_t tseq;
        int why = 0, c, rc;
        if (r->n_force) {
            /* a stream being drained up to a free / a pool event another one waits for */
            struct force *f = &r->force[r->n_force - 1];
            s = f->s;
            if (!s->qlen || s->emit_seq > f->target) { force_pop(r); continue; }
            qev_t *e = qat(s, 0);
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
        qev_t *e = qat(s, 0);
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

/* ---- open / close -------------------------------------------------------------- */

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
    if (memcmp(p, PST_MAGIC, cmp) != 0) return PS_ECORRUPT;
    if (n < PST_FILE_HDR_FIXED) return PS_ETRUNC;
    r->hdr.major = (uint16_t)(p[8] | p[9] << 8);
    r->hdr.minor = (uint16_t)(p[10] | p[11] << 8);
    uint32_t tlv = (uint32_t)p[12] | (uint32_t)p[13] << 8 | (uint32_t)p[14] << 16 | (uint32_t)p[15] << 24;
    if (r->hdr.major != PST_MAJOR) return PS_EVERSION;
    if (tlv > MAX_HDR_TLV) return PS_ECORRUPT;
    n = src_ensure(r, PST_FILE_HDR_FIXED + (size_t)tlv, &p);
    if (n < 0) return (int)n;
    if ((size_t)n < PST_FILE_HDR_FIXED + (size_t)tlv) return PS_ETRUNC;
    const uint8_t *q = p + PST_FILE_HDR_FIXED, *end = q + tlv;
    while (q < end) {
        uint64_t tag, len, v = 0;
        if (!(q = pst_get_varint(q, end, &tag)) || !(q = pst_get_varint(q, end, &len))) return PS_ECORRUPT;
        if (len > (uint64_t)(end - q)) return PS_ECORRUPT;
        const uint8_t *val = q;
        q += len;
        switch (tag) {
        case PST_HDR_PID: case PST_HDR_PPID: case PST_HDR_START_REAL: case PST_HDR_START_MONO:
        case PST_HDR_STACKS: case PST_HDR_DEPTH: case PST_HDR_PAGE_SIZE: case PST_HDR_PARENT_PID:
        case PST_HDR_EXEC_GEN:
            if (pst_get_varint(val, q, &v) != q) return PS_ECORRUPT;
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
            if (!(*dst = dup_bytes(val, (size_t)len))) return PS_ENOMEM;
        }
    }
    /* split argv */
    size_t argc = 0;
    for (size_t i = 0; i < r->hdr.argv_len; i++)
        if (r->argv_raw[i] == 0 || i + 1 == r->hdr.argv_len) argc++;
    if (!(r->argv = calloc(argc + 1, sizeof *r->argv))) return PS_ENOMEM;
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
    if (!(r->idbuf = malloc(PST_MAX_IDS * sizeof *r->idbuf))) { free(r); return NULL; }
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
    if (!r) { if (err) *err = PS_ENOMEM; return NULL; }
    if (!(r->buf = malloc(READ_BLOCK))) { pst_close(r); if (err) *err = PS_ENOMEM; return NULL; }
    r->bcap = READ_BLOCK;
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0) {
        int e = errno;
        pst_close(r);
        errno = e;
        if (err) *err = PS_EIO;
        return NULL;
    }
    return finish_open(r, err);
}

pst_reader_t *pst_open_mem(const void *buf, size_t len, int *err)
{
    pst_reader_t *r = reader_new();
    if (!r) { if (err) *err = PS_ENOMEM; return NULL; }
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
        for (uint32_t k = 0; k < s->qlen; k++) free(qat(s, k)->ext);
        free(s->q);
        free(s);
    }
    free(r->sv);
    free(r->hq.a);
    for (int i = 0; i < 2; i++) {
        map_free(&r->live[i]);
        map_free(&r->pend[i].head);
        free(r->pend[i].nodes);
    }
    map_free(&r->pool_ids);
    for (uint32_t i = 0; i < r->n_pools; i++) free(r->pools[i].h);
    free(r->pools);
    free(r->force);
    free(r->out_ext);
    free(r->idbuf);
    free(r);
}
