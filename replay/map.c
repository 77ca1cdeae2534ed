/* map.c — the small containers of replay: a u64 -> u32 hash map and a dense
 * slot allocator.
 *
 * The map is the common one (common/hashmap.h: linear probing, backward-shift
 * deletion, no tombstones), so a long trace with millions of short-lived
 * objects keeps the table at the size of the live set; on top of it the
 * table halves when it is less than 1/8 full, so memory follows the live set
 * after a burst too.
 */
#include <stdlib.h>
#include <string.h>

#include "rp_internal.h"

int rp_map_init(rp_map_t *m, size_t cap_hint)
{
    size_t cap = 64;
    while (cap < cap_hint * 2) cap *= 2;
    memset(m, 0, sizeof *m);
    int rc = psc_map_init(&m->m, sizeof(uint32_t), cap / 4 * 3, 75, NULL);   /* cap slots */
    if (rc) return rc;
    m->cap = psc_map_capacity(&m->m);
    return 0;
}

void rp_map_free(rp_map_t *m)
{
    psc_map_free(&m->m);
    memset(m, 0, sizeof *m);
}

uint32_t rp_map_get(const rp_map_t *m, uint64_t key)
{
    const uint32_t *v = psc_map_get_sz(&m->m, key, sizeof(uint32_t));
    return v ? *v : UINT32_MAX;
}

int rp_map_put(rp_map_t *m, uint64_t key, uint32_t val)
{
    uint32_t *v = psc_map_put_sz(&m->m, key, NULL, sizeof(uint32_t));
    if (!v) return PSC_ENOMEM;
    *v = val;
    m->cap = psc_map_capacity(&m->m);
    return 0;
}

uint32_t *rp_map_slot(rp_map_t *m, uint64_t key, int *is_new)
{
    uint32_t *v = psc_map_put_sz(&m->m, key, is_new, sizeof(uint32_t));
    if (!v) return NULL;
    if (*is_new) *v = UINT32_MAX;
    m->cap = psc_map_capacity(&m->m);
    return v;
}

uint32_t rp_map_del(rp_map_t *m, uint64_t key)
{
    uint32_t *v = psc_map_get_sz(&m->m, key, sizeof(uint32_t));
    if (!v) return UINT32_MAX;
    uint32_t val = *v;
    psc_map_erase_sz(&m->m, v, sizeof(uint32_t));
    /* Shrink when a burst of live objects is gone, so memory follows the live set. */
    if (m->cap > 1024 && psc_map_count(&m->m) * 8 < m->cap) {
        (void)psc_map_resize(&m->m, m->cap / 2);
        m->cap = psc_map_capacity(&m->m);
    }
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
    if (psc_grow((void **)&s->free, &s->cap_free, s->n_free, sizeof *s->free, 256)) return PSC_ENOMEM;
    s->free[s->n_free++] = slot;
    return 0;
}

void rp_slots_free(rp_slots_t *s)
{
    free(s->free);
    memset(s, 0, sizeof *s);
}
