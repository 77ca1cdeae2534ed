/* map.c — the small containers of replay: a u64 -> u32 hash map and a dense
 * slot allocator.
 *
 * The map is open addressing with linear probing and backward-shift deletion
 * (no tombstones), so a long trace with millions of short-lived objects keeps
 * the table at the size of the live set. Keys are mixed with a 64-bit
 * finalizer: heap addresses and tensor ids are both badly distributed in
 * their low bits.
 */
#include <stdlib.h>
#include <string.h>

#include "rp_internal.h"

static inline size_t rp_hash(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (size_t)k;
}

int rp_map_init(rp_map_t *m, size_t cap_hint)
{
    size_t cap = 64;
    while (cap < cap_hint * 2) cap *= 2;
    memset(m, 0, sizeof *m);
    m->keys = malloc(cap * sizeof *m->keys);
    m->vals = malloc(cap * sizeof *m->vals);
    m->used = calloc(cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        rp_map_free(m);
        return PSC_ENOMEM;
    }
    m->cap = cap;
    return 0;
}

void rp_map_free(rp_map_t *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

uint32_t rp_map_get(const rp_map_t *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    for (size_t i = rp_hash(key) & mask;; i = (i + 1) & mask) {
        if (!m->used[i]) return UINT32_MAX;
        if (m->keys[i] == key) return m->vals[i];
    }
}

static int rp_map_rehash(rp_map_t *m, size_t cap)
{
    rp_map_t n;
    n.keys = malloc(cap * sizeof *n.keys);
    n.vals = malloc(cap * sizeof *n.vals);
    n.used = calloc(cap, 1);
    if (!n.keys || !n.vals || !n.used) {
        free(n.keys);
        free(n.vals);
        free(n.used);
        return PSC_ENOMEM;
    }
    n.cap = cap;
    n.n = m->n;
    size_t mask = cap - 1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        size_t j = rp_hash(m->keys[i]) & mask;
        while (n.used[j]) j = (j + 1) & mask;
        n.used[j] = 1;
        n.keys[j] = m->keys[i];
        n.vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    free(m->used);
    *m = n;
    return 0;
}

int rp_map_put(rp_map_t *m, uint64_t key, uint32_t val)
{
    if ((m->n + 1) * 4 > m->cap * 3) {   /* load <= 3/4 */
        int rc = rp_map_rehash(m, m->cap * 2);
        if (rc) return rc;
    }
    size_t mask = m->cap - 1;
    size_t i = rp_hash(key) & mask;
    while (m->used[i]) {
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
        i = (i + 1) & mask;
    }
    m->used[i] = 1;
    m->keys[i] = key;
    m->vals[i] = val;
    m->n++;
    return 0;
}

uint32_t rp_map_del(rp_map_t *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    size_t i = rp_hash(key) & mask;
    for (;; i = (i + 1) & mask) {
        if (!m->used[i]) return UINT32_MAX;
        if (m->keys[i] == key) break;
    }
    uint32_t val = m->vals[i];
    /* Backward shift: move later entries of the cluster into the hole when
     * their home position is not in (hole, entry]. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; m->used[j]; j = (j + 1) & mask) {
        size_t home = rp_hash(m->keys[j]) & mask;
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays) continue;
        m->keys[hole] = m->keys[j];
        m->vals[hole] = m->vals[j];
        hole = j;
    }
    m->used[hole] = 0;
    m->n--;
    /* Shrink when a burst of live objects is gone, so memory follows the live set. */
    if (m->cap > 1024 && m->n * 8 < m->cap) (void)rp_map_rehash(m, m->cap / 2);
    return val;
}

int rp_slots_get(rp_slots_t *s, uint32_t *slot)
{
    if (s->n_free) {
        *slot = s->free[--s->n_free];
        return 0;
    }
    if (s->next == UINT32_MAX) return PSC_ENOMEM;
    *slot = s->next++;
    return 0;
}

int rp_slots_put(rp_slots_t *s, uint32_t slot)
{
    if (s->n_free == s->cap_free) {
        size_t cap = s->cap_free ? s->cap_free * 2 : 256;
        uint32_t *f = realloc(s->free, cap * sizeof *f);
        if (!f) return PSC_ENOMEM;
        s->free = f;
        s->cap_free = cap;
    }
    s->free[s->n_free++] = slot;
    return 0;
}

void rp_slots_free(rp_slots_t *s)
{
    free(s->free);
    memset(s, 0, sizeof *s);
}

int rp_grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need < *cap) return 0;
    size_t n = *cap ? *cap : 256;
    while (n <= need) n *= 2;
    unsigned char *p = realloc(*arr, n * elem);
    if (!p) return PSC_ENOMEM;
    memset(p + *cap * elem, 0, (n - *cap) * elem);
    *arr = p;
    *cap = n;
    return 0;
}
