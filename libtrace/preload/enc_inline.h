/* enc_inline.h — hand-coded encoders for the hottest events.
 *
 * They must produce byte for byte what pst_encode_event (format.c) produces
 * for the same pst_event_t: tests/progs/pre_encode.c checks it. Inline
 * primitives only; no table lookup, no loop over a layout.
 *
 * ps_put_varint / ps_put_addr are pst_put_varint / pst_put_addr (format.h)
 * with the loop unrolled for one- and two-byte varints (small sizes, stack
 * ids), and, for an address delta between 16-byte aligned addresses (an
 * exact multiple of 16), an arithmetic shift instead of the signed
 * division; that code stays below 2^62 (never the 65-bit case).
 */
#ifndef PS_ENC_INLINE_H
#define PS_ENC_INLINE_H

#include "poolscope/format.h"

static inline uint8_t *ps_put_varint(uint8_t *p, uint64_t v)
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

static inline uint8_t *ps_put_addr(uint8_t *p, uint64_t *base, uint64_t addr)
{
    uint64_t b = *base;
    if (__builtin_expect(((addr | b) & 15) == 0, 1)) {
        int64_t q = (int64_t)(addr - b) >> 4;            /* exact: a multiple of 16 */
        uint64_t zz = ((uint64_t)q << 1) ^ (uint64_t)(q >> 63);
        *base = addr;
        return ps_put_varint(p, zz << 1 | 1);            /* zz < 2^61 */
    }
    return pst_put_addr(p, base, addr);
}

static inline uint8_t *ps_enc_type(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack)
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
static inline uint8_t *ps_enc_Au(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                 uint64_t a, uint64_t u)
{
    p = ps_enc_type(e, p, type, stack);
    p = ps_put_addr(p, &e->last_addr, a);
    return ps_put_varint(p, u);
}

/* "A": free */
static inline uint8_t *ps_enc_A(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack, uint64_t a)
{
    p = ps_enc_type(e, p, type, stack);
    return ps_put_addr(p, &e->last_addr, a);
}

/* "Auu": calloc, posix_memalign, aligned_alloc, memalign */
static inline uint8_t *ps_enc_Auu(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                  uint64_t a, uint64_t u1, uint64_t u2)
{
    p = ps_enc_type(e, p, type, stack);
    p = ps_put_addr(p, &e->last_addr, a);
    p = ps_put_varint(p, u1);
    return ps_put_varint(p, u2);
}

/* "AAu": realloc */
static inline uint8_t *ps_enc_AAu(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                  uint64_t a1, uint64_t a2, uint64_t u)
{
    p = ps_enc_type(e, p, type, stack);
    p = ps_put_addr(p, &e->last_addr, a1);
    p = ps_put_addr(p, &e->last_addr, a2);
    return ps_put_varint(p, u);
}

#endif
