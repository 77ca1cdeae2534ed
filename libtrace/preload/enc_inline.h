/* enc_inline.h — hand-coded encoders for the hottest events.
 *
 * They must produce byte for byte what pst_encode_event (format.c) produces
 * for the same pst_event_t: tests/progs/pre_encode.c checks it. Inline
 * primitives only; no table lookup, no loop over a layout.
 *
 * ps_put_varint / ps_put_addr are pst_put_varint / pst_put_addr5 (format.h,
 * the minor-5 coding the interposer writes) with the loop unrolled for one-
 * and two-byte varints (small sizes, stack ids, recent-list indices).
 */
#ifndef PS_ENC_INLINE_H
#define PS_ENC_INLINE_H

#include "poolscope/format.h"

static inline __attribute__((always_inline)) uint8_t *ps_put_varint(uint8_t *p, uint64_t v)
{
    if (__builtin_expect(v < 0x80, 1)) {
        *p = (uint8_t)v;
        return p + 1;
    }
    if (v < 0x4000) {
        p[0] = (uint8_t)(v | 0x80);
        p[1] = (uint8_t)(v >> 7);
        return p + 2;
    }
    return pst_put_varint(p, v);
}

/* pst_put_addr5 (format 1.5, the interposer's coding) with the short
 * varints unrolled: one hash probe of the stream's index ix (e->index, or
 * the same array at a known place), one load of its recent list, three
 * stores. The bytes are pst_put_addr5's; the state differs in one field:
 * e->last_addr is left alone, the base of a delta being the recent list's
 * newest entry (the previous A value, which pst_put_addr5 keeps in
 * last_addr too), so a hit stores nothing it does not need. Before the
 * table encoder runs on the same state, last_addr must be set from
 * ps_enc_last (the interposer does it in ps_rec_begin). */
static inline uint64_t ps_enc_last(const pst_enc_t *e)
{
    return e->recent[(e->nrec - 1) & (PST_RECENT - 1)];
}

static inline __attribute__((always_inline)) uint8_t *ps_put_addr_ix(pst_enc_t *e, uint16_t *ix, uint8_t *p,
                                                                    uint64_t addr)
{
    uint32_t n = e->nrec, h = pst_recent_hash(addr);
    uint32_t pos = ix[h], back = (uint16_t)(n - 1 - pos);
    ix[h] = (uint16_t)n;
    e->nrec = n + 1;
    /* compared before the store below: back 255 names the slot it overwrites */
    if (__builtin_expect(back < PST_RECENT && e->recent[pos & (PST_RECENT - 1)] == addr, 1)) {
        e->recent[n & (PST_RECENT - 1)] = addr;   /* repeating programs: the common case */
        return ps_put_varint(p, (uint64_t)back << 2 | 2);
    }
    uint64_t base = e->recent[(n - 1) & (PST_RECENT - 1)];
    e->recent[n & (PST_RECENT - 1)] = addr;
    if (__builtin_expect(((addr | base) & 15) == 0, 1)) {
        int64_t q = (int64_t)(addr - base) >> 4;         /* exact: a multiple of 16 */
        uint64_t zz = ((uint64_t)q << 1) ^ (uint64_t)(q >> 63);
        return ps_put_varint(p, zz << 1 | 1);            /* zz < 2^61 */
    }
    *p++ = 0;
    return pst_put_varint(p, pst_zigzag((int64_t)(addr - base)));
}

static inline __attribute__((always_inline)) uint8_t *ps_put_addr(pst_enc_t *e, uint8_t *p, uint64_t addr)
{
    return ps_put_addr_ix(e, e->index, p, addr);
}

static inline __attribute__((always_inline)) uint8_t *ps_enc_type(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack)
{
    e->since_ts++;   /* as pst_encode_event does */
    if (stack) {
        *p++ = (uint8_t)(type | PST_EV_HAS_STACK);
        return ps_put_varint(p, stack);
    }
    *p++ = (uint8_t)type;
    return p;
}

/* "Au": malloc, valloc, pvalloc */
static inline __attribute__((always_inline)) uint8_t *ps_enc_Au(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                 uint64_t a, uint64_t u)
{
    p = ps_enc_type(e, p, type, stack);
    p = ps_put_addr(e, p, a);
    return ps_put_varint(p, u);
}

/* "A": free */
static inline __attribute__((always_inline)) uint8_t *ps_enc_A(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack, uint64_t a)
{
    p = ps_enc_type(e, p, type, stack);
    return ps_put_addr(e, p, a);
}

/* "Auu": calloc, posix_memalign, aligned_alloc, memalign */
static inline __attribute__((always_inline)) uint8_t *ps_enc_Auu(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                  uint64_t a, uint64_t u1, uint64_t u2)
{
    p = ps_enc_type(e, p, type, stack);
    p = ps_put_addr(e, p, a);
    p = ps_put_varint(p, u1);
    return ps_put_varint(p, u2);
}

/* "AAu": realloc */
static inline __attribute__((always_inline)) uint8_t *ps_enc_AAu(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                  uint64_t a1, uint64_t a2, uint64_t u)
{
    p = ps_enc_type(e, p, type, stack);
    p = ps_put_addr(e, p, a1);
    p = ps_put_addr(e, p, a2);
    return ps_put_varint(p, u);
}

#endif
