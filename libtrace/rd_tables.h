/* rd_tables.h — the merge's tables (rd_tables.c), the third stage of the
 * reader (rd_internal.h has the order): the live-address sets, the
 * address maps, the heap of streams, the pending frees and the pools.
 * Plain data structures over the types of rd_types.h: they call no other
 * stage. The probes the merge makes for nearly every event are inline
 * here, so that pst_next (rd_merge.c) inlines them as it did when they
 * shared its file.
 */
#ifndef RD_TABLES_H
#define RD_TABLES_H

#include "rd_types.h"

/* The address maps, address -> u64 (pending-free heads, a stream's runs per
 * address), are psc_map_t (common/hashmap.h); their accessors (rd_amap_*)
 * are below. */
static inline int rd_amap_init(psc_map_t *m) { return psc_map_init(m, sizeof(uint64_t), 16, 50, NULL); }

/* ---- address tables: the live set and the pending-free heads ---------------- */
/* The live set: keyed by addresses, never 0 (rd_types.h). Linear probing
 * at load <= 1/2, dead slots instead of deletion, everything inline. */
#define RD_AHASH(k, shift) ((uint32_t)(((k) * 0x9E3779B97F4A7C15ull) >> (shift)))

/* Rebuild without the dead slots, twice as large when the live keys alone
 * fill more than a quarter. 0 or PSC_ENOMEM. */
int rd_aset_rebuild(rd_aset_t *s);

/* The live set keeps a freed address's slot, marked dead, so the churn of
 * a program (an address freed, then allocated again) costs one probe each
 * way and no moves. Dead slots go at the next rebuild, which happens when
 * live + dead would pass half the table: the table stays within four times
 * the live addresses (plus the dead ones since the last rebuild, at most as
 * many again). */
static inline int rd_aset_has(const rd_aset_t *s, uint64_t k)
{
    if (!s->n) return 0;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) return s->live[i];
        if (!x) return 0;
    }
}

/* Add k (no-op when live), allocated by stream index who. 0 or PSC_ENOMEM. */
static inline int rd_aset_add(rd_aset_t *s, uint64_t k, uint32_t who)
{
    if (!s->k && rd_aset_rebuild(s)) return PSC_ENOMEM;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) {
            if (!s->live[i]) { s->live[i] = 1; s->dead--; s->n++; }
            s->own[i] = who;
            return 0;
        }
        if (!x) {
            if ((s->n + s->dead + 1) * 2 > s->mask + 1) {
                if (rd_aset_rebuild(s)) return PSC_ENOMEM;
                return rd_aset_add(s, k, who);
            }
            s->k[i] = k;
            s->live[i] = 1;
            s->own[i] = who;
            s->n++;
            return 0;
        }
    }
}

/* 1 if k was live (and is not any more: freed by stream index who), 0 if
 * it was not live. */
static inline int rd_aset_del(rd_aset_t *s, uint64_t k, uint32_t who)
{
    if (!s->n) return 0;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) {
            if (!s->live[i]) return 0;
            s->live[i] = 0; s->n--; s->dead++;
            s->own[i] = who;
            return 1;
        }
        if (!x) return 0;
    }
}

/* The stream that last allocated (live) or freed (dead, until the next
 * rebuild) k; UINT32_MAX when not known. */
static inline uint32_t rd_aset_owner(const rd_aset_t *s, uint64_t k)
{
    if (!s->k) return UINT32_MAX;
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k) return s->own[i];
        if (!x) return UINT32_MAX;
    }
}

/* Where k is (1), or the empty slot where looking for it stopped (0), in
 * *at. The table exists (s->k). For the fast path of pst_next, which looks
 * once and then changes that slot in place (rd_fast_heap). */
/* (always_inline: the scan budget's few lines made GCC call it out of line
 * from rd_fast_heap, +0.7% instructions per event on bench_reader --read) */
static inline __attribute__((always_inline)) int rd_aset_slot(const rd_aset_t *s, uint64_t k, uint32_t *at)
{
    for (uint32_t i = RD_AHASH(k, s->shift);; i = (i + 1) & s->mask) {
        uint64_t x = s->k[i];
        if (x == k || !x) { *at = i; return x == k; }
    }
}

/* The address maps (pending-free heads, a stream's runs per address) are
 * the project's map with u64 values, through its inline _sz paths (see
 * rd_types.h for the measurements). The value of k, or NULL; the pointer
 * holds until the next reserve, insert or del on that map. */
static inline uint64_t *rd_amap_ref(const psc_map_t *m, uint64_t k)
{
    return (uint64_t *)psc_map_get_sz(m, k, sizeof(uint64_t));
}

/* Room for one more key: the next insert neither fails nor moves entries.
 * 0 or PSC_ENOMEM. */
static inline int rd_amap_reserve(psc_map_t *m)
{
    return psc_map_full(m) ? psc_map_reserve(m, psc_map_count(m) + 1) : 0;
}

/* Insert k, which is not present. 0 or PSC_ENOMEM. */
static inline int rd_amap_insert(psc_map_t *m, uint64_t k, uint64_t v)
{
    int is_new;
    uint64_t *p = (uint64_t *)psc_map_put_sz(m, k, &is_new, sizeof(uint64_t));
    if (!p) return PSC_ENOMEM;
    *p = v;
    return 0;
}

/* Remove k if present (inline: a free that goes out removes up to two keys). */
static inline void rd_amap_del(psc_map_t *m, uint64_t k)
{
    uint64_t *p = (uint64_t *)psc_map_get_sz(m, k, sizeof(uint64_t));
    if (p) psc_map_erase_sz(m, p, sizeof(uint64_t));
}

/* ---- heap of streams ----------------------------------------------------------- */

static inline uint64_t rd_sheap_key(const rd_sheap_t *h, const rd_stream_t *s)
{
    (void)h;
    return s->head.ts;
}
/* (time, cycle count, stream id): heads of one time with counts (minor 8)
 * come out at the top in the order they happened, so the merge's tie rule
 * (rd_merge.c, "Ties") needs no scan when the top may go; heads without
 * counts (0) sort first in their time, as by (time, stream id) before. */
static inline int rd_sheap_less(const rd_sheap_t *h, const rd_stream_t *a, const rd_stream_t *b)
{
    uint64_t ka = rd_sheap_key(h, a), kb = rd_sheap_key(h, b);
    if (ka != kb) return ka < kb;
    if (a->head.cyc != b->head.cyc) return a->head.cyc < b->head.cyc;
    return a->id < b->id;
}
static inline int *rd_sheap_pos(const rd_sheap_t *h, rd_stream_t *s) { (void)h; return &s->hq_pos; }

int  rd_sheap_push(rd_sheap_t *h, rd_stream_t *s);   /* 0 or PSC_ENOMEM */
void rd_sheap_remove(rd_sheap_t *h, rd_stream_t *s);   /* no-op when not in the heap */
void rd_sheap_fix(rd_sheap_t *h, rd_stream_t *s);      /* s's key changed */

/* ---- pending frees (the layout is described with the types, in rd_types.h) -- */
/* Index the queued free (s, seq, ts) of addr in space sp. 0 or PSC_ENOMEM. */
int  rd_pend_add(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq, uint64_t ts);
/* The free (s, seq) of addr goes out (a no-op if it was not indexed). */
void rd_pend_del(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq);
/* The earliest queued free of addr in a stream other than `not` (rd_tables.c). */
int  rd_pend_find(const rd_pendtab_t *t, rd_stream_t *const *sv, uint64_t addr, const rd_stream_t *not,
                  int *in_self, int by_node, rd_stream_t **bs, uint64_t *bseq, uint64_t *bts);

/* ---- pools --------------------------------------------------------------------- */
/* Queue pool event (s, seq) with pool_seq pseq of pool `pool`. 0 or PSC_ENOMEM. */
int  rd_pool_add(pst_reader_t *r, rd_stream_t *s, uint64_t pool, uint64_t pseq, uint64_t seq);
/* The smallest still-queued entry of p, dropping those already handed out. */
rd_pent_t *rd_pool_top(rd_pool_t *p);

#endif
