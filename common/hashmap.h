/* hashmap.h — the one open-addressing hash map of poolscope (internal).
 *
 * Keys are uint64_t; values are fixed-size byte records chosen at init (the
 * map hands out pointers to them, 8-byte aligned). Every u64 key is allowed.
 *
 * Layout: one array of `cap` slots (cap a power of two), each slot a u64 key
 * followed by the value, padded to a multiple of 8 bytes. Key 0 marks an
 * empty slot, so the real key 0 is kept aside in one extra slot past the end
 * of the array (`has_zero`). The home slot of a key is the top log2(cap)
 * bits of key * 2^64/phi (Fibonacci hashing: heap addresses share their low
 * bits, which the top bits of the product do not depend on alone).
 * Collisions probe linearly; deletion shifts the following entries back
 * (no tombstones, so a churny stream never degrades the table). The table
 * doubles when an insert would exceed the load factor given at init.
 *
 * Pointers returned by get/put stay valid until the next put that grows the
 * table, psc_map_reserve or psc_map_resize, del/erase (which move entries),
 * clear or free.
 *
 * Memory comes from an injected allocator (NULL = malloc/free); a failed
 * allocation returns PSC_ENOMEM / NULL and leaves the map as it was. Nothing
 * here aborts. Not thread-safe: one map, one owner (or an external lock).
 * A map must be set up by psc_map_init before any other call except
 * psc_map_free / psc_map_count / psc_map_capacity, which also accept an
 * all-zero psc_map_t (so a struct can be calloc'ed and torn down early).
 *
 * Hot paths (get, put without growth, erase) are static inline so a map is
 * as fast as a table written by hand for one value type.
 */
#ifndef PSC_HASHMAP_H
#define PSC_HASHMAP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "poolscope/error.h"

/* An injected allocator: alloc returns NULL on failure; free gets the byte
 * count that was passed to alloc. */
typedef struct psc_alloc {
    void *(*alloc)(void *ctx, size_t bytes);
    void  (*free)(void *ctx, void *p, size_t bytes);
    void   *ctx;
} psc_alloc_t;

/* The fields are private; read them only through the functions below. */
typedef struct psc_map {
    unsigned char *slots;   /* (mask + 2) slots: mask + 1 in the table, then the key-0 slot */
    size_t   mask;          /* cap - 1 */
    size_t   n;             /* entries in the table (the key-0 entry not counted) */
    size_t   grow_at;       /* the table doubles before n would exceed this */
    size_t   stride;        /* bytes per slot: 8 + vsize rounded up to 8 */
    size_t   vsize;         /* value bytes */
    uint64_t stride_inv;    /* slot byte offset -> index: (off >> stride_tz) * stride_inv, */
    unsigned stride_tz;     /*   exact since offsets are multiples of stride (no division) */
    unsigned shift;         /* 64 - log2(cap) */
    unsigned load_pct;      /* max load factor in percent */
    int      has_zero;      /* key 0 is present (in the slot past the end) */
    psc_alloc_t al;
} psc_map_t;

#define PSC_MAP_MIN_CAP 8u
#define PSC_MAP_HMUL    0x9E3779B97F4A7C15ull

/* Set up an empty map of values of vsize bytes (0 allowed: a set) with room
 * for at least `expect` entries before the first growth, growing beyond
 * load_pct percent full (0 = 75; clamped to 10..90). al may be NULL.
 * 0, PSC_EINVAL (vsize over 1 MiB, or al with only one of alloc/free) or
 * PSC_ENOMEM. On failure *m is left so
 * that psc_map_free(m) is harmless. */
int  psc_map_init(psc_map_t *m, size_t vsize, size_t expect, unsigned load_pct,
                  const psc_alloc_t *al);
/* Release the table; m may be all zero or already freed. */
void psc_map_free(psc_map_t *m);
/* Remove every entry, keep the capacity. */
void psc_map_clear(psc_map_t *m);
/* Make room for `total` entries so that the next puts up to that count
 * neither grow nor fail. 0 or PSC_ENOMEM (the map unchanged). */
int  psc_map_reserve(psc_map_t *m, size_t total);
/* Rehash into exactly cap slots (a power of two >= PSC_MAP_MIN_CAP holding
 * the entries under the load factor), e.g. to shrink after a burst.
 * 0, PSC_EINVAL (cap unsuitable) or PSC_ENOMEM (the map unchanged). */
int  psc_map_resize(psc_map_t *m, size_t cap);
/* Find or insert (out of line; psc_map_put inlines the common case). */
void *psc_map_put_slow(psc_map_t *m, uint64_t key, int *is_new);
/* Remove key: 0, or PSC_ENOENT. */
int  psc_map_del(psc_map_t *m, uint64_t key);

/* Iterate: `size_t it = 0; while (psc_map_next(m, &it, &key, &val)) ...`
 * visits every entry once, in slot order (not insertion order). The map must
 * not be changed during a walk except by writing through val. key or val
 * may be NULL. */
int  psc_map_next(const psc_map_t *m, size_t *it, uint64_t *key, void **val);

/* ---- inline ---------------------------------------------------------------- */

static inline size_t psc_map_count(const psc_map_t *m) { return m->n + (size_t)(m->has_zero != 0); }
static inline size_t psc_map_capacity(const psc_map_t *m) { return m->slots ? m->mask + 1 : 0; }

/* The slot stride for values of vsize bytes. */
#define PSC_MAP_STRIDE(vsize) ((size_t)8 + (((size_t)(vsize) + 7) & ~(size_t)7))
#define PSC_MAP_INLINE static inline __attribute__((always_inline))

PSC_MAP_INLINE size_t psc_map__home(const psc_map_t *m, uint64_t key)
{
    return (size_t)((key * PSC_MAP_HMUL) >> m->shift);
}
PSC_MAP_INLINE unsigned char *psc_map__slot(const psc_map_t *m, size_t i, size_t stride)
{
    return m->slots + i * stride;
}
PSC_MAP_INLINE uint64_t psc_map__key(const unsigned char *s)
{
    uint64_t k;
    memcpy(&k, s, sizeof k);
    return k;
}

/* Every operation below comes in two forms: psc_map_get(m, key) and
 * psc_map_get_sz(m, key, vsize), where vsize is the value size given at
 * init, passed as a constant (sizeof the value type). The _sz form lets the
 * compiler specialise the probe loop (constant stride, inlined copies): use
 * it on hot paths. */

/* The address of the home slot of key, for __builtin_prefetch ahead of a
 * lookup. */
static inline const void *psc_map_prefetch_addr(const psc_map_t *m, uint64_t key)
{
    return psc_map__slot(m, psc_map__home(m, key), m->stride);
}

/* The value of key, or NULL. */
PSC_MAP_INLINE void *psc_map__get(const psc_map_t *m, uint64_t key, size_t stride)
{
    if (__builtin_expect(key == 0, 0))
        return m->has_zero ? psc_map__slot(m, m->mask + 1, stride) + 8 : NULL;
    for (size_t i = psc_map__home(m, key);; i = (i + 1) & m->mask) {
        unsigned char *s = psc_map__slot(m, i, stride);
        uint64_t k = psc_map__key(s);
        if (k == key) return s + 8;
        if (k == 0) return NULL;
    }
}
PSC_MAP_INLINE void *psc_map_get_sz(const psc_map_t *m, uint64_t key, size_t vsize)
{
    return psc_map__get(m, key, PSC_MAP_STRIDE(vsize));
}
static inline void *psc_map_get(const psc_map_t *m, uint64_t key)
{
    return psc_map__get(m, key, m->stride);
}

/* The value of key, inserting it (value zero-filled, *is_new = 1) if absent.
 * NULL only if the table had to grow and could not (PSC_ENOMEM); never NULL
 * after psc_map_reserve made room. is_new may be NULL. */
PSC_MAP_INLINE void *psc_map__put(psc_map_t *m, uint64_t key, int *is_new, size_t stride)
{
    if (__builtin_expect(key != 0, 1)) {
        for (size_t i = psc_map__home(m, key);; i = (i + 1) & m->mask) {
            unsigned char *s = psc_map__slot(m, i, stride);
            uint64_t k = psc_map__key(s);
            if (k == key) { if (is_new) *is_new = 0; return s + 8; }
            if (k == 0) {
                if (__builtin_expect(m->n + 1 > m->grow_at, 0)) break;
                memcpy(s, &key, sizeof key);
                memset(s + 8, 0, stride - 8);
                m->n++;
                if (is_new) *is_new = 1;
                return s + 8;
            }
        }
    }
    return psc_map_put_slow(m, key, is_new);
}
PSC_MAP_INLINE void *psc_map_put_sz(psc_map_t *m, uint64_t key, int *is_new, size_t vsize)
{
    return psc_map__put(m, key, is_new, PSC_MAP_STRIDE(vsize));
}
static inline void *psc_map_put(psc_map_t *m, uint64_t key, int *is_new)
{
    return psc_map__put(m, key, is_new, m->stride);
}

/* Slot index of a value pointer returned by get/put (the key-0 entry has
 * index capacity), and back. Indices change when the table grows. */
static inline size_t psc_map_index(const psc_map_t *m, const void *val)
{
    uint64_t off = (uint64_t)((const unsigned char *)val - 8 - m->slots);
    return (size_t)((off >> m->stride_tz) * m->stride_inv);
}
PSC_MAP_INLINE size_t psc_map_index_sz(const psc_map_t *m, const void *val, size_t vsize)
{
    return (size_t)((const unsigned char *)val - 8 - m->slots) / PSC_MAP_STRIDE(vsize);
}
static inline void *psc_map_at(const psc_map_t *m, size_t index)
{
    return psc_map__slot(m, index, m->stride) + 8;
}
/* The key of a value pointer returned by get/put. */
static inline uint64_t psc_map_key_of(const void *val)
{
    return psc_map__key((const unsigned char *)val - 8);
}

/* Remove the entry whose value pointer get/put returned (backward shift:
 * each following entry of the run moves back unless its home lies
 * cyclically in (hole, its slot]). */
PSC_MAP_INLINE void psc_map__erase(psc_map_t *m, size_t i, size_t stride)
{
    if (__builtin_expect(i > m->mask, 0)) { m->has_zero = 0; return; }
    for (size_t j = (i + 1) & m->mask;; j = (j + 1) & m->mask) {
        unsigned char *sj = psc_map__slot(m, j, stride);
        uint64_t k = psc_map__key(sj);
        if (k == 0) break;
        size_t h = psc_map__home(m, k);
        if (((j - h) & m->mask) >= ((j - i) & m->mask)) {
            memcpy(psc_map__slot(m, i, stride), sj, stride);
            i = j;
        }
    }
    memset(psc_map__slot(m, i, stride), 0, 8);
    m->n--;
}
PSC_MAP_INLINE void psc_map_erase_sz(psc_map_t *m, void *val, size_t vsize)
{
    psc_map__erase(m, psc_map_index_sz(m, val, vsize), PSC_MAP_STRIDE(vsize));
}
static inline void psc_map_erase(psc_map_t *m, void *val)
{
    psc_map__erase(m, psc_map_index(m, val), m->stride);
}

/* The table would grow on the next insert of a new key (callers that keep
 * slot indices use it to re-index after psc_map_reserve). */
static inline int psc_map_full(const psc_map_t *m) { return m->n + 1 > m->grow_at; }

#endif
