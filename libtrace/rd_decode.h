/* rd_decode.h — the second stage of the reader (rd_decode.c;
 * rd_internal.h has the order): EVENTS chunks validated and their bytes
 * queued per stream, what an event frees and allocates, and the record
 * decoder. The decoder's fast paths are inline here because the later
 * stages decode every head again through them (rd_head_next) and a call per
 * event would show in bench_reader.
 */
#ifndef RD_DECODE_H
#define RD_DECODE_H

#include "rd_chunk.h"

/* ---- event semantics, shared by the validating pass and the merge ---------- */

static inline int rd_is_pool_seq_event(unsigned t)
{
    return (t >= PST_EV_POOL_ACQUIRE && t <= PST_EV_POOL_BACKING_FREE) ||
           (t >= PST_EV_KVB_ALLOC && t <= PST_EV_KVB_OWNER);
}

/* The address an event frees (1, with space), if it frees one. */
static inline int rd_frees_addr(const rd_hev_t *e, int *space, uint64_t *addr)
{
    switch (e->type) {
    case PST_EV_FREE:
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_REALLOC:          /* old, ret, size */
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] && e->f[1] != e->f[0] && (e->f[1] || e->f[2] == 0);
    case PST_EV_REALLOCARRAY:     /* old, ret, nmemb, size */
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] && e->f[1] != e->f[0] && (e->f[1] || e->f[2] == 0 || e->f[3] == 0);
    case PST_EV_MUNMAP:
        *space = RD_SP_MMAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_MREMAP:           /* old, old_len, ret, new_len, flags */
        *space = RD_SP_MMAP; *addr = e->f[0];
        return e->f[0] && e->f[2] && e->f[2] != e->f[0];
    default:
        return 0;
    }
}

/* Is e's free (if it frees) in the pending-free index? Versioned frees
 * (explicitly, or implicitly in a stream that has had versions) are ordered
 * by their versions instead. */
static inline int rd_pend_indexed(const rd_stream_t *s, const rd_hev_t *e) { return !e->n_ver && !s->dvers; }

/* The address an event needs live without changing it (1, with space): a
 * realloc that kept its block in place. */
static inline int rd_uses_addr(const rd_hev_t *e, int *space, uint64_t *addr)
{
    if ((e->type == PST_EV_REALLOC || e->type == PST_EV_REALLOCARRAY) && e->f[0] && e->f[1] == e->f[0]) {
        *space = RD_SP_HEAP; *addr = e->f[0];
        return 1;
    }
    return 0;
}

/* The address an event allocates (1, with space), if it allocates one. */
static inline int rd_allocs_addr(const rd_hev_t *e, int *space, uint64_t *addr)
{
    switch (e->type) {
    case PST_EV_MALLOC: case PST_EV_CALLOC: case PST_EV_POSIX_MEMALIGN:
    case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN: case PST_EV_VALLOC: case PST_EV_PVALLOC:
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_REALLOC: case PST_EV_REALLOCARRAY:
        *space = RD_SP_HEAP; *addr = e->f[1];
        return e->f[1] && e->f[1] != e->f[0];
    case PST_EV_MMAP:
        *space = RD_SP_MMAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_MREMAP:
        *space = RD_SP_MMAP; *addr = e->f[2];
        return e->f[2] && e->f[2] != e->f[0];
    default:
        return 0;
    }
}

/* ---- the record decoder (fast paths inline; rd_decode.c has the rest) ------ */

/* pst_decode_event into an rd_hev_t (any type, TS included); rd_decode.c. */
const uint8_t *rd_dec_generic(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                              const uint8_t *end, rd_hev_t *e, uint32_t *idbuf);

/* pst_get_varint / pst_get_addr with codes of up to 3 bytes decoded inline
 * and without branches on their length (one 8-byte load when 8 bytes are
 * readable); longer codes, and the last bytes of a buffer, go to them. The
 * same values and the same failures either way. */
/* `q` (a constant at every call): p is inside a stream's byte queue, which
 * has RD_QPAD readable bytes after its end (rd_squeue_append) and holds
 * only validated records, so the 8-byte load needs no check of the end. */
#define RD_QPAD 8
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline __attribute__((always_inline)) unsigned rd_vshort_(const uint8_t *p, const uint8_t *end, uint64_t *v, const int q)
{
    if (!q && end - p < 8) return 0;
    uint64_t x;
    memcpy(&x, p, sizeof x);
    if (!(x & 0x80)) { *v = x & 0x7f; return 1; }
    uint64_t stop = ~x & 0x808080u;                /* terminating bytes among the first 3 */
    if (!stop) return 0;
    unsigned len = ((unsigned)__builtin_ctzll(stop) >> 3) + 1;
    uint64_t val = (x & 0x7f) | ((x >> 1) & 0x3f80) | ((x >> 2) & 0x1fc000);
    *v = val & ((1ull << (7 * len)) - 1);
    return len;
}
#else
static inline unsigned rd_vshort_(const uint8_t *p, const uint8_t *end, uint64_t *v, const int q)
{
    (void)p; (void)end; (void)v; (void)q;
    return 0;
}
#endif

static inline __attribute__((always_inline)) const uint8_t *rd_varint_(const uint8_t *p, const uint8_t *end, uint64_t *v, const int q)
{
    unsigned n = rd_vshort_(p, end, v, q);
    return n ? p + n : pst_get_varint(p, end, v);
}
static inline __attribute__((always_inline)) const uint8_t *rd_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    return rd_varint_(p, end, v, 0);
}

/* An A field in the stream's coding (pst_get_addr, or pst_get_addr5 for
 * minor 5: a hit in the recent list or an aligned delta in up to 3 bytes
 * inline, the rest through format.h). */
static inline __attribute__((always_inline)) const uint8_t *rd_addr_(pst_enc_t *dc, const uint8_t *p, const uint8_t *end, uint64_t *addr,
                                                                     const int q)
{
    uint64_t code;
    unsigned n = rd_vshort_(p, end, &code, q);
    if (dc->coding == PST_CODING_RECENT) {
        if (!n || !(code & 3)) return pst_get_addr5(dc, p, end, addr);
        uint32_t k = dc->nrec;
        uint64_t a;
        if (code & 1) {
            a = dc->last_addr + ((uint64_t)pst_unzigzag(code >> 1) << 4);
        } else {
            if (!q && (code >> 2) >= PST_RECENT) return NULL;   /* queued: checked when read */
            a = dc->recent[(k - 1 - (uint32_t)(code >> 2)) & (PST_RECENT - 1)];
        }
        dc->recent[k & (PST_RECENT - 1)] = a;
        dc->nrec = k + 1;
        dc->last_addr = a;
        *addr = a;
        return p + n;
    }
    if (!n) return pst_get_addr(p, end, &dc->last_addr, addr);
    int64_t d = pst_unzigzag(code >> 1);
    *addr = dc->last_addr + ((code & 1) ? (uint64_t)d << 4 : (uint64_t)d);
    dc->last_addr = *addr;
    return p + n;
}
static inline __attribute__((always_inline)) const uint8_t *rd_addr(pst_enc_t *dc, const uint8_t *p, const uint8_t *end, uint64_t *addr)
{
    return rd_addr_(dc, p, end, addr, 0);
}

/* The end of an A field in the minor-5 coding, checked as pst_get_addr5
 * checks it (the same failures) but not resolved: for the validating pass
 * of a stream whose addresses it no longer needs (rd_process_events). */
static inline __attribute__((always_inline)) const uint8_t *rd_askip5(const uint8_t *p, const uint8_t *end)
{
    uint64_t code;
    if (!(p = rd_varint(p, end, &code))) return NULL;
    if (code & 1) return p;
    if (code & 2) return (code >> 2) < PST_RECENT ? p : NULL;
    if (code) return NULL;
    return rd_varint(p, end, &code);   /* code 0: the delta follows */
}

#define RD_GETV(v) do { if (!(p = rd_varint_(p, end, &(v), q))) return NULL; } while (0)
#define RD_GETA(v) do { if (!(p = rd_addr_(d, p, end, &(v), q))) return NULL; } while (0)
/* a stack id: a varint of at most 32 bits (pst_decode_event's rule) */
#define RD_GETSTK(v)                                              \
    do {                                                          \
        uint64_t sv_;                                             \
        RD_GETV(sv_);                                             \
        if (sv_ > UINT32_MAX) return NULL;                        \
        (v) = (uint32_t)sv_;                                      \
    } while (0)

/* Decode one record from [p, end) with decoder state d into e: the same
 * values and the same failures as pst_decode_event, with the common heap
 * records and TS decoded inline. L ids go to idbuf (PST_MAX_IDS entries;
 * may be NULL when the record is not an L event). Returns the position
 * after the record, or NULL on corrupt input. q: p is in a byte queue
 * (rd_vshort_), before its end. */
static inline __attribute__((always_inline)) const uint8_t *rd_dec_rec_(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                                        const uint8_t *end, rd_hev_t *e, uint32_t *idbuf, const int q)
{
    if (!q && p >= end) return NULL;
    unsigned tb = *p;
    uint32_t stk = 0;
    switch (tb) {
    /* with a stack id (bit 7: the varint right after the type byte): what
     * every allocation of a trace recorded with stacks carries */
    case PST_EV_MALLOC: case PST_EV_MALLOC | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
        RD_GETA(e->f[0]);
        RD_GETV(e->f[1]);
        break;
    case PST_EV_FREE: case PST_EV_FREE | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
        RD_GETA(e->f[0]);
        break;
    case PST_EV_CALLOC: case PST_EV_CALLOC | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
        RD_GETA(e->f[0]);
        RD_GETV(e->f[1]);
        RD_GETV(e->f[2]);
        break;
    case PST_EV_REALLOC: case PST_EV_REALLOC | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
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
    case PST_EV_CYC: {
        uint64_t v;
        p++;
        RD_GETV(v);
        e->type = PST_EV_CYC;
        e->stack = 0;
        d->last_cyc += v;
        return p;
    }
    case PST_EV_VER:
        if (end - p < 3 || d->nver >= 2) return NULL;
        d->ver[d->nver++] = (uint16_t)(p[1] | p[2] << 8);
        e->type = PST_EV_VER;
        e->stack = 0;
        return p + 3;
    default:
        return rd_dec_generic(r, d, p, end, e, idbuf);
    }
    e->type = (uint8_t)(tb & PST_EV_TYPE_MASK);
    e->stack = stk;
    e->n_ids = 0;
    e->n_payload = 0;
    e->n_ver = (uint8_t)d->nver;
    e->ver[0] = d->ver[0];
    e->ver[1] = d->ver[1];
    d->nver = 0;
    d->since_ts++;
    return p;
}
static inline __attribute__((always_inline)) const uint8_t *rd_dec_rec(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                                        const uint8_t *end, rd_hev_t *e, uint32_t *idbuf)
{
    return rd_dec_rec_(r, d, p, end, e, idbuf, 0);
}

/* Decode s's next queued event (after any TS records) into s->head. The
 * bytes were validated when their chunk was read, with the same decoder
 * state, so this does not fail. */
static inline __attribute__((always_inline)) int rd_head_next(pst_reader_t *r, rd_stream_t *s)
{
    const uint8_t *p = s->b + s->bhead, *end = s->b + s->btail;
    for (;;) {
        /* s->ids exists once an L event has been queued (rd_process_events) */
        p = rd_dec_rec_(r, &s->hdec, p, end, &s->head, s->ids, 1);
        if (!p) return PSC_ECORRUPT;   /* not reached: validated when read */
        if (!pst_is_record(s->head.type)) break;
    }
    s->bhead = (size_t)(p - s->b);
    s->head.ts = s->hdec.last_ts;
    s->head.cyc = s->hdec.last_cyc;
    s->head.seq = s->emit_seq;
    if (s->head.n_ver) s->vers = 1;
    if (!s->hblk_any || s->head.ts != s->hblk_ts) {   /* the head enters a new block */
        s->hblk_any = 1;
        s->hblk_ts = s->head.ts;
        s->hblk_idx = 0;
        if (s->blk_n) {
            s->hblk_len = s->blk[s->blk_h];
            s->blk_h = (s->blk_h + 1) % s->blk_cap;
            s->blk_n--;
            s->hblk_open = 0;
        } else {
            s->hblk_open = 1;
        }
    } else {
        s->hblk_idx++;
    }
    return 0;
}

/* ---- what the next stage calls ----------------------------------------------- */

void rd_decode_init(pst_reader_t *r);             /* the per-type layout tables */

/* What one rd_decode_chunk queued: the stream of an EVENTS chunk that
 * proved good (NULL for any other chunk, a damaged one, or none), and
 * whether its queue was empty before (head: it has a head now, decoded,
 * for the merge's heap). The chunk's frees (by address) and pool events
 * (by pool_seq), which the merge indexes, are in r->fops and r->pops until
 * the next call. */
typedef struct rd_queued { rd_stream_t *s; int head; } rd_queued_t;
/* Read one chunk (rd_read_chunk); if it holds events, validate them and
 * queue their bytes. 1 read one, 0 no more, negative error. */
int  rd_decode_chunk(pst_reader_t *r, rd_queued_t *q);

#endif
