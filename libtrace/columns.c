/* columns.c — the column form of a compressed EVENTS payload (columns.h,
 * FORMAT.md "Columns").
 *
 * Why. A busy thread gets a TS record every 64 or 128 events, and its value
 * (ns since the previous one) is clock noise: three bytes that zstd cannot
 * predict, in the middle of event bytes that repeat. Each one cuts a match,
 * and the stack ids do the same on programs with many call sites. Moved
 * out into columns of their own, the events compress as if they had no
 * time, the counts ("records since the previous TS": mostly 64 or 128)
 * almost vanish, and the values, stored as byte planes (all low bytes, then
 * all second bytes, ...), keep only their noise. Nothing is rounded: the
 * payload comes back byte for byte.
 *
 * Both directions walk records with the format's own layout table
 * (pst_event_layout), field by field as the decoder does, but without
 * interpreting values, so a record is cut at the same byte here as in the
 * decoder. The walk only needs the A fields' recent coding (minor 5: a
 * code 0 has a second varint), which is all compressed chunks can hold.
 * What the walk cannot parse stays in place: the splitter stops at the
 * first such record and keeps it and the rest as a verbatim tail, so even a
 * damaged payload round-trips.
 *
 * Runs in the interposer's flusher: no allocation, no locks, no errno.
 */
#include "columns.h"

#include <string.h>

#include "poolscope/error.h"
#include "poolscope/format.h"

/* Varints are mostly one byte: that case inline, the rest in a loop. */
static inline const uint8_t *skip_varint(const uint8_t *p, const uint8_t *end)
{
    if (p < end && *p < 0x80) return p + 1;
    for (unsigned i = 0; i < PST_VARINT_MAX && p < end; i++)
        if (!(*p++ & 0x80)) return p;
    return NULL;
}

/* The end of the fields of a record with layout `lay` that start at p
 * (after the type byte and the stack id), or NULL. */
static const uint8_t *skip_fields(const char *lay, const uint8_t *p, const uint8_t *end)
{
    for (; *lay; lay++) {
        uint64_t v;
        switch (*lay) {
        case 'A':   /* recent coding: code 0 has the delta in a second varint */
            if (!(p = pst_get_varint(p, end, &v))) return NULL;
            if (v == 0 && !(p = skip_varint(p, end))) return NULL;
            break;
        case 'u': case 'S': case 'z':
            if (!(p = skip_varint(p, end))) return NULL;
            break;
        case 'L': case 'P':   /* n, then n varints (L: the first id, then n-1 deltas) */
            if (!(p = pst_get_varint(p, end, &v))) return NULL;
            for (; v; v--)
                if (!(p = skip_varint(p, end))) return NULL;
            break;
        case 'v':
            if (end - p < 2) return NULL;
            p += 2;
            break;
        default:
            return NULL;
        }
    }
    return p;
}

/* The layout table in the form the walk wants, made once per payload (128
 * look-ups, nothing next to the records): most types are up to 8 varint
 * fields, some of them A fields, and take the fast path. */
typedef struct rdesc {
    const char *lay;      /* NULL: unknown type */
    uint8_t simple;       /* only A u S z fields, at most 8 */
    uint8_t nf;           /* simple: number of fields */
    uint8_t amask;        /* simple: bit i, field i is an A field */
} rdesc_t;

static void make_descs(rdesc_t d[PST_EV_TYPE_MASK + 1])
{
    for (unsigned t = 0; t <= PST_EV_TYPE_MASK; t++) {
        const char *lay = pst_event_layout(t);
        rdesc_t r = { lay, lay != NULL, 0, 0 };
        for (unsigned i = 0; lay && lay[i]; i++) {
            if (i >= 8 || !strchr("AuSz", lay[i])) { r.simple = 0; break; }
            if (lay[i] == 'A') r.amask |= (uint8_t)(1u << i);
            r.nf = (uint8_t)(i + 1);
        }
        d[t] = r;
    }
}

static inline const uint8_t *skip_rec(const rdesc_t *d, const uint8_t *p, const uint8_t *end)
{
    if (!d->simple) return d->lay ? skip_fields(d->lay, p, end) : NULL;
    unsigned am = d->amask;
    for (unsigned i = 0; i < d->nf; i++, am >>= 1) {
        uint64_t v;
        if (p < end && *p < 0x80) v = *p++;
        else if (!(p = pst_get_varint(p, end, &v))) return NULL;
        if (v == 0 && (am & 1) && !(p = skip_varint(p, end))) return NULL;   /* A code 0: the delta follows */
    }
    return p;
}

/* The records both walks (split and join) skip in a tight loop of their
 * own that keeps little live: no stack id, not a TS, a simple layout of 1
 * to 4 fields, every field a one- or two-byte varint, no A field whose
 * value is 0 (a code 0: its delta follows). fast[type byte] is 0 for
 * every other type byte, else nf | A mask << 4. Such a record ends where
 * skip_rec would end it; anything else goes to the general walk, so both
 * cut every record at the same byte as before. */
static void make_fast(const rdesc_t d[PST_EV_TYPE_MASK + 1], uint8_t fast[256])
{
    for (unsigned i = 0; i < 256; i++) {
        const rdesc_t *r = &d[i & PST_EV_TYPE_MASK];
        fast[i] = i != PST_EV_TS && i != PST_EV_CYC && !(i & PST_EV_HAS_STACK) && r->simple && r->nf && r->nf <= 4
                  ? (uint8_t)(r->nf | (r->amask & 15) << 4) : 0;
    }
}

#define FAST_MIN (1 + 2 * 4)   /* bytes a record of the fast loop reads at most */

/* The end of the fast record at p (at least FAST_MIN bytes before the
 * end), or NULL: the general walk takes it. */
static inline const uint8_t *skip_fast(const uint8_t fast[256], const uint8_t *p)
{
    unsigned k = fast[*p];
    if (!k) return NULL;
    const uint8_t *q = p + 1;
    unsigned am = k >> 4, nf = k & 15;
    for (unsigned i = 0; i < nf; i++, am >>= 1) {
        unsigned b0 = q[0];
        if (b0 < 0x80) {
            if (b0 == 0 && (am & 1)) return NULL;
            q += 1;
        } else if (q[1] < 0x80) {
            if (b0 == 0x80 && q[1] == 0 && (am & 1)) return NULL;
            q += 2;
        } else {
            return NULL;
        }
    }
    return q;
}

/* n bytes from s to o; short runs (the common case: a record or two) as
 * one 16-byte move when both sides have the room, no call. */
static inline uint8_t *copy_run(uint8_t *o, const uint8_t *oend, const uint8_t *s, const uint8_t *send, size_t n)
{
    if (n <= 16 && oend - o >= 16 && send - s >= 16) memcpy(o, s, 16);
    else memcpy(o, s, n);
    return o + n;
}

static unsigned bytes_of(uint64_t v)
{
    unsigned n = 1;
    while (v >>= 8) n++;
    return n;
}

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) { v >>= 7; n++; }
    return n;
}

/* A TS record taken out, kept in the caller's scratch until the counts are
 * known: where its value's varint is in the input, and the records before
 * it since the previous one (both below 2^32: a payload is at most 16 MiB). */
typedef struct ts_ent { uint32_t at, since; } ts_ent_t;

#define HDR_MAX (1 + 5 * PST_VARINT_MAX)   /* mark and five varints */

size_t pst_cols_split(const uint8_t *in, size_t len, uint8_t *out, size_t cap,
                      uint8_t *tmp, size_t tmp_cap, size_t *cut)
{
    uint64_t off;
    const uint8_t *end = in + len, *p = pst_get_varint(in, end, &off);
    if (!p) return 0;
    size_t so = (size_t)(p - in);
    if (cap < so + HDR_MAX + len || len > PST_MAX_CHUNK) return 0;
    /* One walk. The events column goes straight into out, behind room for
     * the longest header (moved down once the header's length is known);
     * the stack column grows from the bottom of tmp, the TS entries down
     * from its top. Events are copied in runs: a run ends only where a TS
     * record or a stack id comes out. A record is parsed whole before
     * anything of it moves, so the walk can stop anywhere. */
    uint8_t *ev0 = out + so + HDR_MAX, *ev = ev0, *stk = tmp, *ts_top = tmp + tmp_cap, *ts = ts_top;
    const uint8_t *run = p, *oend = out + cap;
    uint64_t since = 0;
    size_t n_cnt = 0;
    unsigned w = 0;
    rdesc_t d[PST_EV_TYPE_MASK + 1];
    uint8_t fast[256];
    make_descs(d);
    make_fast(d, fast);
    while (p < end) {
        const uint8_t *fq;
        while (end - p > FAST_MIN && (fq = skip_fast(fast, p))) {   /* the common record: skipped */
            since++;
            p = fq;
        }
        if (p >= end) break;
        unsigned tb = *p;
        if (tb == PST_EV_TS) {
            /* only a TS whose value comes back as the same bytes moves out
             * (a writer's are; a longer varint than needed stays a record) */
            uint64_t v;
            uint8_t re[PST_VARINT_MAX];
            const uint8_t *q = pst_get_varint(p + 1, end, &v);
            if (q && (size_t)(pst_put_varint(re, v) - re) == (size_t)(q - p - 1) &&
                !memcmp(re, p + 1, (size_t)(q - p - 1))) {
                if ((size_t)(ts - stk) < sizeof(ts_ent_t)) return 0;   /* scratch full: the payload stays */
                ev = copy_run(ev, oend, run, end, (size_t)(p - run));
                ts -= sizeof(ts_ent_t);
                memcpy(ts, &(ts_ent_t){ (uint32_t)(p + 1 - in), (uint32_t)since }, sizeof(ts_ent_t));
                n_cnt += varint_len(since);
                if (bytes_of(v) > w) w = bytes_of(v);
                since = 0;
                p = run = q;
                continue;
            }
        }
        const uint8_t *s = p + 1, *f = s, *q;
        if (tb == PST_EV_CYC) {   /* its value (clock noise, like a TS's) goes with the stack ids */
            if (!(q = f = skip_varint(s, end))) break;
        } else {
            if ((tb & PST_EV_HAS_STACK) && !(f = skip_varint(s, end))) break;
            if (!(q = skip_rec(&d[tb & PST_EV_TYPE_MASK], f, end))) break;
        }
        if (f > s) {   /* the stack id to its column; the run goes on after it */
            if ((size_t)(ts - stk) < (size_t)(f - s)) return 0;
            ev = copy_run(ev, oend, run, end, (size_t)(s - run));
            if ((size_t)(ts - stk) >= 8 && end - s >= 8) memcpy(stk, s, 8);   /* ids are short: one move */
            else memcpy(stk, s, (size_t)(f - s));
            stk += f - s;
            run = f;
        }
        since++;
        p = q;
    }
    memcpy(ev, run, (size_t)(p - run));
    ev += p - run;
    size_t n_ev = (size_t)(ev - ev0), n_stk = (size_t)(stk - tmp), n_ts = (size_t)(ts_top - ts) / sizeof(ts_ent_t);
    size_t tail = (size_t)(end - p);
    if (!n_ts && !n_stk) return 0;   /* nothing moved: the plain payload */
    uint8_t hdr[HDR_MAX], *h = hdr;
    *h++ = PST_COLS_MARK;
    h = pst_put_varint(h, n_ev);
    h = pst_put_varint(h, n_ts);
    h = pst_put_varint(h, w);
    h = pst_put_varint(h, n_cnt);
    h = pst_put_varint(h, n_stk);
    size_t hl = (size_t)(h - hdr);
    size_t total = so + hl + n_ev + n_cnt + (size_t)w * n_ts + n_stk + tail;
    if (total > cap || total > PST_COLS_BOUND(len)) return 0;
    memmove(out + so + hl, ev0, n_ev);
    memcpy(out, in, so);
    memcpy(out + so, hdr, hl);
    uint8_t *o = out + so + hl + n_ev, *plane = o + n_cnt;
    for (size_t i = 0; i < n_ts; i++) {   /* entry i is the i-th from the top */
        ts_ent_t e;
        uint64_t v = 0;
        memcpy(&e, ts_top - (i + 1) * sizeof(ts_ent_t), sizeof e);
        o = pst_put_varint(o, e.since);
        pst_get_varint(in + e.at, end, &v);   /* read whole once already */
        for (unsigned b = 0; b < w; b++) plane[(size_t)b * n_ts + i] = (uint8_t)(v >> (8 * b));
    }
    o = plane + (size_t)w * n_ts;
    *cut = (size_t)(o - out);
    memcpy(o, tmp, n_stk);
    memcpy(o + n_stk, p, tail);
    return total;
}

int pst_cols_is_split(const uint8_t *in, size_t len)
{
    uint64_t off;
    const uint8_t *end = in + len, *p = pst_get_varint(in, end, &off);
    return p && p < end && *p == PST_COLS_MARK;
}

/* The header of the column form: where each column starts and ends. */
typedef struct chdr {
    size_t so;                        /* stream offset bytes */
    const uint8_t *ev, *cnt, *plane, *stk, *tail, *end;
    size_t n_ts;
    unsigned w;
} chdr_t;

static int read_hdr(const uint8_t *in, size_t len, chdr_t *h)
{
    uint64_t v[6];
    const uint8_t *end = in + len, *p = pst_get_varint(in, end, &v[0]);
    if (!p || p >= end || *p != PST_COLS_MARK) return PSC_ECORRUPT;
    h->so = (size_t)(p - in);
    p++;
    for (int i = 1; i < 6; i++)   /* ev_len, n_ts, w, cnt_len, stk_len */
        if (!(p = pst_get_varint(p, end, &v[i])) || v[i] > len) return PSC_ECORRUPT;
    uint64_t n_ts = v[2], w = v[3];
    if (w > 8 || (n_ts == 0) != (w == 0) || v[4] < n_ts) return PSC_ECORRUPT;
    /* every term is at most len, so the sum cannot overflow */
    if (v[1] + v[4] + w * n_ts + v[5] > (uint64_t)(end - p)) return PSC_ECORRUPT;
    h->ev = p;
    h->cnt = h->ev + v[1];
    h->plane = h->cnt + v[4];
    h->stk = h->plane + w * n_ts;
    h->tail = h->stk + v[5];
    h->end = end;
    h->n_ts = (size_t)n_ts;
    h->w = (unsigned)w;
    return 0;
}

static uint64_t value_of(const chdr_t *h, size_t i)
{
    uint64_t v = 0;
    for (unsigned b = 0; b < h->w; b++) v |= (uint64_t)h->plane[b * h->n_ts + i] << (8 * b);
    return v;
}

int pst_cols_joined_len(const uint8_t *in, size_t len, size_t *out_len)
{
    chdr_t h;
    if (read_hdr(in, len, &h)) return PSC_ECORRUPT;
    size_t n = h.so + (size_t)(h.cnt - h.ev) + (size_t)(h.tail - h.stk) + (size_t)(h.end - h.tail);
    for (size_t i = 0; i < h.n_ts; i++) n += 1 + varint_len(value_of(&h, i));
    if (n > PST_MAX_CHUNK) return PSC_ECORRUPT;   /* no writer makes a longer payload */
    *out_len = n;
    return 0;
}

int pst_cols_join(const uint8_t *in, size_t len, uint8_t *out, size_t cap, size_t *out_len)
{
    chdr_t h;
    if (read_hdr(in, len, &h)) return PSC_ECORRUPT;
    uint8_t *o = out, *oend = out + cap;
#define PUT(src, n) do { size_t n_ = (n); if ((size_t)(oend - o) < n_) return PSC_ECORRUPT; \
                         memcpy(o, (src), n_); o += n_; } while (0)
#define RUN(src, n) do { size_t n_ = (n); if ((size_t)(oend - o) < n_) return PSC_ECORRUPT; \
                         o = copy_run(o, oend, (src), h.end, n_); } while (0)
#define NEXT_COUNT() do { if (++ti < h.n_ts && !(cnt = pst_get_varint(cnt, h.plane, &left))) \
                              return PSC_ECORRUPT; } while (0)
#define PUT_TS() do { uint8_t t_[1 + PST_VARINT_MAX]; t_[0] = PST_EV_TS; \
                      PUT(t_, (size_t)(pst_put_varint(t_ + 1, value_of(&h, ti)) - t_)); } while (0)
    PUT(in, h.so);
    const uint8_t *cnt = h.cnt, *stk = h.stk, *run = h.ev, *q = h.ev;
    rdesc_t d[PST_EV_TYPE_MASK + 1];
    uint8_t fast[256];
    make_descs(d);
    make_fast(d, fast);
    size_t ti = 0;
    uint64_t left = 0;   /* records before TS number ti */
    if (h.n_ts && !(cnt = pst_get_varint(cnt, h.plane, &left))) return PSC_ECORRUPT;
    while (q < h.cnt) {
        while (ti < h.n_ts && left == 0) {
            RUN(run, (size_t)(q - run));
            run = q;
            PUT_TS();
            NEXT_COUNT();
        }
        /* the common records up to the next TS: skipped, the run goes on */
        const uint8_t *q0 = q, *fq;
        while ((ti >= h.n_ts || left) && h.cnt - q > FAST_MIN && (fq = skip_fast(fast, q))) {
            q = fq;
            if (ti < h.n_ts) left--;
        }
        if (q != q0) continue;
        unsigned tb = *q++;
        if ((tb & PST_EV_HAS_STACK) || tb == PST_EV_CYC) {   /* its id (a CYC: its value) comes back from the stack column */
            const uint8_t *s = skip_varint(stk, h.tail);
            if (!s) return PSC_ECORRUPT;
            RUN(run, (size_t)(q - run));
            RUN(stk, (size_t)(s - stk));
            stk = s;
            run = q;
        }
        if (tb != PST_EV_CYC && !(q = skip_rec(&d[tb & PST_EV_TYPE_MASK], q, h.cnt))) return PSC_ECORRUPT;
        if (ti < h.n_ts) left--;
    }
    PUT(run, (size_t)(q - run));
    while (ti < h.n_ts) {   /* TS records after the last record */
        if (left) return PSC_ECORRUPT;
        PUT_TS();
        NEXT_COUNT();
    }
    if (cnt != h.plane || stk != h.tail) return PSC_ECORRUPT;   /* a column not used up */
    PUT(h.tail, (size_t)(h.end - h.tail));
#undef PUT
#undef RUN
#undef NEXT_COUNT
#undef PUT_TS
    *out_len = (size_t)(o - out);
    return 0;
}
