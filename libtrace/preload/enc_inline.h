/* enc_inline.h — hand-coded encoders for the hottest events.
 *
 * They must produce byte for byte what pst_encode_event (format.c) produces
 * for the same pst_event_t: tests/progs/pre_encode.c checks it. Inline
 * primitives from format.h only; no table lookup, no loop over a layout.
 */
#ifndef PS_ENC_INLINE_H
#define PS_ENC_INLINE_H

#include "format.h"

static inline uint8_t *ps_enc_type(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack)
{
    e->since_ts++;   /* as pst_encode_event does */
    if (stack) {
        *p++ = (uint8_t)(type | PST_EV_HAS_STACK);
        return pst_put_varint(p, stack);
    }
    *p++ = (uint8_t)type;
    return p;
}

/* "Au": malloc, valloc, pvalloc */
static inline uint8_t *ps_enc_Au(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                 uint64_t a, uint64_t u)
{
    p = ps_enc_type(e, p, type, stack);
    p = pst_put_addr(p, &e->last_addr, a);
    return pst_put_varint(p, u);
}

/* "A": free */
static inline uint8_t *ps_enc_A(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack, uint64_t a)
{
    p = ps_enc_type(e, p, type, stack);
    return pst_put_addr(p, &e->last_addr, a);
}

/* "Auu": calloc, posix_memalign, aligned_alloc, memalign */
static inline uint8_t *ps_enc_Auu(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                  uint64_t a, uint64_t u1, uint64_t u2)
{
    p = ps_enc_type(e, p, type, stack);
    p = pst_put_addr(p, &e->last_addr, a);
    p = pst_put_varint(p, u1);
    return pst_put_varint(p, u2);
}

/* "AAu": realloc */
static inline uint8_t *ps_enc_AAu(pst_enc_t *e, uint8_t *p, unsigned type, uint32_t stack,
                                  uint64_t a1, uint64_t a2, uint64_t u)
{
    p = ps_enc_type(e, p, type, stack);
    p = pst_put_addr(p, &e->last_addr, a1);
    p = pst_put_addr(p, &e->last_addr, a2);
    return pst_put_varint(p, u);
}

#endif
