/* hashmap.c — the out-of-line half of the common hash map (hashmap.h):
 * allocation, growth (rehash into a table twice the size), the key-0 slot,
 * deletion by key, iteration. Lookups and plain inserts are inline in the
 * header. */
#include "hashmap.h"

#include <stdlib.h>

#define MAX_VSIZE ((size_t)1 << 20)

static void *def_alloc(void *ctx, size_t bytes) { (void)ctx; return malloc(bytes); }
static void def_free(void *ctx, void *p, size_t bytes) { (void)ctx; (void)bytes; free(p); }

static size_t table_bytes(size_t cap, size_t stride) { return (cap + 1) * stride; }

static size_t grow_at_for(size_t cap, unsigned load_pct)
{
    size_t g = cap / 100 * load_pct + cap % 100 * load_pct / 100;
    return g ? g : 1;
}

/* A zeroed table of cap slots plus the key-0 slot; NULL on failure or if
 * the size does not fit. */
static unsigned char *table_new(const psc_map_t *m, size_t cap)
{
    if (cap > (SIZE_MAX / m->stride) - 1) return NULL;
    size_t bytes = table_bytes(cap, m->stride);
    unsigned char *t = m->al.alloc(m->al.ctx, bytes);
    if (t) memset(t, 0, bytes);
    return t;
}

static void set_cap(psc_map_t *m, size_t cap)
{
    m->mask = cap - 1;
    m->shift = 64u - (unsigned)__builtin_ctzll((unsigned long long)cap);
    m->grow_at = grow_at_for(cap, m->load_pct);
}

/* The smallest power-of-two capacity holding `total` entries under the
 * load factor; 0 if none fits. */
static size_t cap_for(size_t total, unsigned load_pct)
{
    size_t cap = PSC_MAP_MIN_CAP;
    while (grow_at_for(cap, load_pct) < total) {
        if (cap > SIZE_MAX / 4) return 0;
        cap *= 2;
    }
    return cap;
}

int psc_map_init(psc_map_t *m, size_t vsize, size_t expect, unsigned load_pct,
                 const psc_alloc_t *al)
{
    memset(m, 0, sizeof *m);
    if (vsize > MAX_VSIZE) return PSC_EINVAL;
    if (al && (!al->alloc != !al->free)) return PSC_EINVAL;
    if (al && al->alloc) m->al = *al;
    else m->al = (psc_alloc_t){ def_alloc, def_free, NULL };
    if (!load_pct) load_pct = 75;
    if (load_pct < 10) load_pct = 10;
    if (load_pct > 90) load_pct = 90;
    m->load_pct = load_pct;
    m->vsize = vsize;
    m->stride = PSC_MAP_STRIDE(vsize);
    /* index = offset / stride as a shift and a multiply by the inverse of
     * stride's odd part modulo 2^64 (Newton's iteration doubles the correct
     * low bits each step: 3 -> 6 -> 12 -> 24 -> 48 -> 96) */
    m->stride_tz = (unsigned)__builtin_ctzll((unsigned long long)m->stride);
    uint64_t odd = (uint64_t)m->stride >> m->stride_tz, inv = odd;
    for (int i = 0; i < 5; i++) inv *= 2 - odd * inv;
    m->stride_inv = inv;
    size_t cap = cap_for(expect, load_pct);
    if (!cap) return PSC_ENOMEM;
    m->slots = table_new(m, cap);
    if (!m->slots) return PSC_ENOMEM;
    set_cap(m, cap);
    return 0;
}

void psc_map_free(psc_map_t *m)
{
    if (!m->slots) return;
    m->al.free(m->al.ctx, m->slots, table_bytes(m->mask + 1, m->stride));
    m->slots = NULL;
    m->n = 0;
    m->has_zero = 0;
}

void psc_map_clear(psc_map_t *m)
{
    if (!m->slots) return;
    memset(m->slots, 0, table_bytes(m->mask + 1, m->stride));
    m->n = 0;
    m->has_zero = 0;
}

/* Rehash every entry into a new table of cap slots (cap holds them all). */
static int rehash(psc_map_t *m, size_t cap)
{
    unsigned char *t = table_new(m, cap);
    if (!t) return PSC_ENOMEM;
    psc_map_t o = *m;
    m->slots = t;
    set_cap(m, cap);
    for (size_t i = 0; i <= o.mask; i++) {
        const unsigned char *s = psc_map__slot(&o, i, o.stride);
        uint64_t k = psc_map__key(s);
        if (!k) continue;
        size_t j = psc_map__home(m, k);
        while (psc_map__key(psc_map__slot(m, j, m->stride))) j = (j + 1) & m->mask;
        memcpy(psc_map__slot(m, j, m->stride), s, m->stride);
    }
    if (o.has_zero) memcpy(psc_map__slot(m, cap, m->stride), psc_map__slot(&o, o.mask + 1, o.stride), m->stride);
    o.al.free(o.al.ctx, o.slots, table_bytes(o.mask + 1, o.stride));
    return 0;
}

int psc_map_reserve(psc_map_t *m, size_t total)
{
    if (total <= m->grow_at) return 0;
    size_t cap = cap_for(total, m->load_pct);
    return cap ? rehash(m, cap) : PSC_ENOMEM;
}

int psc_map_resize(psc_map_t *m, size_t cap)
{
    if (cap < PSC_MAP_MIN_CAP || (cap & (cap - 1)) || grow_at_for(cap, m->load_pct) < m->n)
        return PSC_EINVAL;
    if (cap == m->mask + 1) return 0;
    return rehash(m, cap);
}

void *psc_map_put_slow(psc_map_t *m, uint64_t key, int *is_new)
{
    if (key == 0) {
        unsigned char *s = psc_map__slot(m, m->mask + 1, m->stride);
        if (is_new) *is_new = !m->has_zero;
        if (!m->has_zero) {
            memset(s, 0, m->stride);
            m->has_zero = 1;
        }
        return s + 8;
    }
    void *v = psc_map_get(m, key);
    if (v) { if (is_new) *is_new = 0; return v; }
    if (m->n + 1 > m->grow_at) {
        if (m->mask + 1 > SIZE_MAX / 4 || rehash(m, (m->mask + 1) * 2)) return NULL;
    }
    size_t i = psc_map__home(m, key);
    while (psc_map__key(psc_map__slot(m, i, m->stride))) i = (i + 1) & m->mask;
    unsigned char *s = psc_map__slot(m, i, m->stride);
    memcpy(s, &key, sizeof key);
    memset(s + 8, 0, m->stride - 8);
    m->n++;
    if (is_new) *is_new = 1;
    return s + 8;
}

int psc_map_del(psc_map_t *m, uint64_t key)
{
    void *v = psc_map_get(m, key);
    if (!v) return PSC_ENOENT;
    psc_map_erase(m, v);
    return 0;
}

int psc_map_next(const psc_map_t *m, size_t *it, uint64_t *key, void **val)
{
    if (!m->slots) return 0;
    size_t i = *it;
    for (; i <= m->mask; i++) {
        unsigned char *s = psc_map__slot(m, i, m->stride);
        uint64_t k = psc_map__key(s);
        if (!k) continue;
        if (key) *key = k;
        if (val) *val = s + 8;
        *it = i + 1;
        return 1;
    }
    if (i == m->mask + 1 && m->has_zero) {
        if (key) *key = 0;
        if (val) *val = psc_map__slot(m, i, m->stride) + 8;
        *it = i + 1;
        return 1;
    }
    *it = m->mask + 2;
    return 0;
}
