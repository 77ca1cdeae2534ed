/* metrics.c — streaming accumulators for the metrics of docs/DESIGN.md
 * ("Metrics").
 *
 * State, all bounded by what is live or distinct, never by stream length:
 *   live    open-addressing table addr -> object (req, rnd, time, stack and
 *           flags: 32 bytes, the size key being req or rnd nearly always,
 *           else in a side table), linear probing with backward-shift deletion (no
 *           tombstones, so a churny stream never degrades the table); one
 *           probe per az_alloc finds the address or the slot it goes to;
 *           az_alloc_obj (callers that number their objects densely, as
 *           replay's policies) keeps the same entries in an array indexed by
 *           that number instead, the address beside each: no hash at all;
 *   reuse   table addr -> time stamp of its last allocation (no deletion),
 *           a bitmap over stamps with a 1 at each address's latest stamp,
 *           and a Fenwick tree over the popcounts of the bitmap's 64-bit
 *           words: 16 to 32 bytes per distinct address (12-byte slots, 3/8
 *           to 3/4 full) and under a byte of bitmap and tree. Mattson's stack
 *           distance of an allocation at a is the number of ones after a's
 *           previous stamp: a popcount of the few words in between when that
 *           stamp is among the latest NEAR_WORDS words (kept out of the
 *           tree, so such a reuse touches no tree node), else a Fenwick
 *           prefix over the words, O(log D).
 *           When the clock reaches the end of the bitmap the stamps are
 *           renumbered 1..D in order by one walk over the table (a stamp's
 *           new number is its rank among the ones of the bitmap: a prefix
 *           count per word, no sort, no stamp -> owner array to keep), and
 *           the bitmap is sized to 4 D, so everything stays within a
 *           constant times the distinct addresses; at most reuse_cap of
 *           them (default 3/4 of 2^20: a 12 MiB table at the cap, where
 *           1 << 20 doubled it to 24 MiB), and all of it is freed by
 *           az_finish, before whatever the caller does next;
 *   lastfree table size key -> the address most recently freed with that key
 *           (same_address_reuse);
 *   sites   array indexed by stack id; the live bytes of each site at the
 *           moment of the global peak are kept lazily: a site not touched
 *           since the latest peak still has its value at the peak, so it is
 *           copied the next time the site changes (O(1) per event instead of
 *           a snapshot per new peak);
 *   phases  one entry per marker name, with the cumulative call counters at
 *           the moment its phase opened.
 *
 * live and lastfree are the common hash map (common/hashmap.h: Fibonacci
 * hashing, linear probing, backward-shift deletion, inline lookups); the
 * reuse table is the same scheme with smaller slots (rtab_t below).
 */
#include "metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "grow.h"
#include "hashmap.h"
#include "poolscope/error.h"

/* ---- tables ------------------------------------------------------------------ */

/* live: addr -> the object; grows beyond 1/2 full (short probes, short shifts).
 * 32 bytes (a 40-byte slot): the size key is req (heap, most replay
 * policies) or rnd (pools) in every stream poolscope makes, so which one
 * is two bits of flags; any other key is kept apart in live_keys. */
typedef struct live_obj {
    uint64_t req, rnd, t;
    uint32_t stack;
    uint32_t flags;     /* LIVE_COUNTED, and the size key's LIVE_KEY_* */
} live_obj_t;
#define LIVE_COUNTED  1u   /* allocated while counting: a leak of the window if never freed */
#define LIVE_KEY_REQ  0u   /* size key = req */
#define LIVE_KEY_RND  2u   /* size key = rnd */
#define LIVE_KEY_MAP  4u   /* size key in live_keys */
#define LIVE_KEY_MASK 6u

/* reuse: addr -> the stamp of its latest allocation (0 while being added);
 * grows beyond 3/4 full; never deleted from */
/* lastfree: size key -> the address most recently freed with it; 3/4 */

/* The reuse table is its own small map rather than the common one: it holds
 * every distinct address (up to reuse_cap), so its slot size is most of
 * the tracker's memory, and the common map pads a u64 key + u32 value to 16
 * bytes. Here a slot is 12 bytes, the key (read with memcpy, as slots are
 * only 4-byte aligned) then the stamp: a quarter less memory and cache
 * footprint. Same scheme as common/hashmap.h otherwise: Fibonacci hashing,
 * linear probing, key 0 kept aside, doubling beyond 3/4 full; no deletion
 * (the tracker never forgets an address), so no shifting either. */
#define RT_STRIDE 12
typedef struct rtab {
    unsigned char *slots;     /* (mask + 1) slots of RT_STRIDE bytes; key 0 = empty */
    size_t   mask, n, grow_at;
    unsigned shift;           /* 64 - log2(mask + 1) */
    int      has_zero;        /* key 0 is present, its stamp in zero_stamp */
    uint32_t zero_stamp;
} rtab_t;

static inline uint64_t rt_key(const unsigned char *slot) { uint64_t k; memcpy(&k, slot, sizeof k); return k; }
static inline size_t rt_home(const rtab_t *t, uint64_t key) { return (size_t)((key * PSC_MAP_HMUL) >> t->shift); }
static inline size_t rt_count(const rtab_t *t) { return t->n + (size_t)(t->has_zero != 0); }

/* The slots live in their own mapping so that doubling can extend it in
 * place (mremap moves pages, it copies nothing): old and new tables never
 * coexist, and at the 1 M-address cap that transient was 12 MiB on top of
 * the 24 MiB table. Elsewhere realloc does the same job, or copies. */
#if defined(__linux__) && defined(MREMAP_MAYMOVE)
#define RT_MMAP 1
#endif

static unsigned char *rt_map(unsigned char *old, size_t old_bytes, size_t bytes)
{
#ifdef RT_MMAP
    void *p = old ? mremap(old, old_bytes, bytes, MREMAP_MAYMOVE)
                  : mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;                    /* new pages read as zero */
#else
    unsigned char *p = realloc(old, bytes);
    if (p) memset(p + old_bytes, 0, bytes - old_bytes);
    return p;
#endif
}

static void rt_set_cap(rtab_t *t, size_t cap)         /* cap: a power of two */
{
    t->mask = cap - 1;
    t->grow_at = cap / 4 * 3;
    t->shift = 64u - (unsigned)__builtin_ctzll((unsigned long long)cap);
}

static int rt_init(rtab_t *t, size_t cap)
{
    memset(t, 0, sizeof *t);
    t->slots = rt_map(NULL, 0, cap * RT_STRIDE);
    if (!t->slots) return PSC_ENOMEM;
    rt_set_cap(t, cap);
    return 0;
}

static void rt_free(rtab_t *t)
{
    if (!t->slots) return;
#ifdef RT_MMAP
    munmap(t->slots, (t->mask + 1) * RT_STRIDE);
#else
    free(t->slots);
#endif
    t->slots = NULL;
}

/* The slot of key (not 0), or the empty slot where it would go. */
static inline unsigned char *rt_probe(const rtab_t *t, uint64_t key)
{
    for (size_t i = rt_home(t, key);; i = (i + 1) & t->mask) {
        unsigned char *sl = t->slots + i * RT_STRIDE;
        uint64_t k = rt_key(sl);
        if (k == key || k == 0) return sl;
    }
}

static inline uint32_t *rt_get(rtab_t *t, uint64_t key)
{
    if (__builtin_expect(key == 0, 0)) return t->has_zero ? &t->zero_stamp : NULL;
    unsigned char *sl = rt_probe(t, key);
    return rt_key(sl) ? (uint32_t *)(void *)(sl + 8) : NULL;
}

/* Double the table in place: the mapping is extended (the new half empty),
 * then every entry of the old half is put where the new hash sends it. An
 * entry is "placed" once it sits where a lookup in the new table finds it;
 * placed entries never move again, so an entry goes to the first slot from
 * its new home that is empty or still holds an unplaced entry: the slots
 * before it are all placed, hence occupied for good, which is what linear
 * probing needs. When that slot holds an unplaced entry the two are swapped
 * and the one brought back is handled next; each step places one entry,
 * O(n) steps in all. The placed marks are a bitmap of a bit per slot. */
static int rt_grow(rtab_t *t)
{
    size_t cap = t->mask + 1, ncap = cap * 2;
    uint64_t *placed = calloc(ncap / 64, sizeof *placed);
    if (!placed) return PSC_ENOMEM;
    unsigned char *sl = rt_map(t->slots, cap * RT_STRIDE, ncap * RT_STRIDE);
    if (!sl) { free(placed); return PSC_ENOMEM; }        /* the old table is untouched */
    t->slots = sl;
    rt_set_cap(t, ncap);
#define RT_PLACED(j) ((placed[(j) >> 6] >> ((j) & 63)) & 1)
    for (size_t i = 0; i < cap; i++) {
        unsigned char *si = sl + i * RT_STRIDE;
        while (rt_key(si) && !RT_PLACED(i)) {
            size_t j = rt_home(t, rt_key(si));
            while (rt_key(sl + j * RT_STRIDE) && RT_PLACED(j)) j = (j + 1) & t->mask;
            placed[j >> 6] |= 1ull << (j & 63);
            if (j == i) break;
            unsigned char *sj = sl + j * RT_STRIDE, tmp[RT_STRIDE];
            memcpy(tmp, sj, RT_STRIDE);                    /* empty, or an unplaced entry to do next */
            memcpy(sj, si, RT_STRIDE);
            memcpy(si, tmp, RT_STRIDE);
        }
    }
#undef RT_PLACED
    free(placed);
    return 0;
}

/* Find or add key; a new entry has stamp 0 and *is_new = 1. NULL when the
 * table could not grow (unchanged). */
static inline uint32_t *rt_put(rtab_t *t, uint64_t key, int *is_new)
{
    *is_new = 0;
    if (__builtin_expect(key == 0, 0)) {
        if (!t->has_zero) { t->has_zero = 1; t->zero_stamp = 0; *is_new = 1; }
        return &t->zero_stamp;
    }
    unsigned char *sl = rt_probe(t, key);
    if (rt_key(sl)) return (uint32_t *)(void *)(sl + 8);
    if (__builtin_expect(t->n + 1 > t->grow_at, 0)) {
        if (rt_grow(t)) return NULL;
        sl = rt_probe(t, key);
    }
    memcpy(sl, &key, sizeof key);
    memset(sl + 8, 0, 4);
    t->n++;
    *is_new = 1;
    return (uint32_t *)(void *)(sl + 8);
}

/* ---- the accumulator ---------------------------------------------------------- */

typedef struct site {
    az_site_t s;
    uint64_t stamp;     /* peak_id when s.peak_bytes was last brought up to date */
    uint64_t wlive_bytes, wlive_count;   /* live objects allocated while counting */
    int suppressed;                      /* its leaks are suppressed (az_site_suppress) */
} site_t;

typedef struct phase {
    az_phase_t p;
    uint64_t open;          /* open instances (scopes) */
    int      point_open;    /* a point phase is running */
    uint64_t c0, b0, t0;    /* calls, bytes, counted time (ctime) when it opened */
    uint64_t a0;            /* allocation calls when it opened */
} phase_t;

#define EXACT_DIST 4096
#define STAMP_MIN_CAP 4096          /* stamps (bits) at least; a multiple of 64 */
#define REUSE_MAX_CAP (1u << 30)    /* stamps and slots stay within uint32 */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define HAVE_POPCNT_VARIANT 1       /* reuse_alloc also built for the popcnt instruction */
#endif
#define NEAR_WORDS 8                /* words after the tree, counted by popcounts */

struct az_metrics {
    az_cfg_t cfg;
    char *step_marker;
    int counting;
    int finished;
    az_state_t st;
    az_result_t r;

    psc_map_t live;           /* addr -> live_obj_t */
    psc_map_t live_keys;      /* addr -> size key, of the live objects with LIVE_KEY_MAP */

    /* reuse */
    rtab_t   reuse;           /* addr -> latest stamp */
    uint64_t *bits;           /* stamp_cap bits: 1 at each address's latest stamp */
    uint32_t *fw;             /* Fenwick tree over popcount(bits[w]), 1-based, stamp_cap/64 entries */
    uint64_t stamp_cap;       /* stamps are 1 .. stamp_cap - 1 */
    uint64_t clock;           /* latest stamp handed out */
    uint64_t sealed;          /* words below this are in the tree; the rest are counted directly */
    int      popcnt;          /* the CPU has the popcnt instruction */
    psc_map_t lastfree;       /* size key -> uint64_t addr */
    uint64_t dist_exact[EXACT_DIST];
    uint64_t dist_fine[64][16];

    /* last allocation, for "temporary" */
    uint64_t last_alloc_addr;
    int      last_alloc_valid;

    /* live objects allocated while counting (leaks of a --phase/--from window) */
    uint64_t wlive_bytes, wlive_count;

    /* time integrals */
    uint64_t t_prev;
    uint64_t ctime;           /* ns elapsed while counting (phases' time_ns) */
    double   frag_int, frag_w;
    double   kv_int, kv_w;
    int      has_reserved;

    /* sites */
    site_t  *sites;
    size_t   n_sites;         /* array length (max stack id + 1) */
    uint64_t peak_id;
    az_site_t *site_out;

    /* phases */
    phase_t *phases;
    az_phase_t *phase_out;
    size_t   n_phases, cap_phases;
    phase_t *last_phase;
    phase_t *step;            /* the decode-step phase, once seen */
    uint64_t steady_calls, steady_steps, steady_c0;
    uint64_t steady_allocs, steady_a0;   /* allocation calls, as steady_calls */
    int      steady_open;
    double   kv_step_sum;     /* tokens / capacity at each decode step's start */
    uint64_t kv_step_n;

    /* az_alloc_obj's live set, indexed by object number */
    struct obj_ent *objs;
    size_t n_objs;
};

/* The tree covers the words below the clock's word minus NEAR_WORDS. */
static inline uint64_t sealed_for(uint64_t clock)
{
    uint64_t cw = clock >> 6;
    return cw > NEAR_WORDS ? cw - NEAR_WORDS : 0;
}

/* Size the stamp structures to cap stamps (a multiple of 64, >= the current
 * one). Contents are rebuilt by the caller. */
static int stamps_resize(az_metrics_t *m, uint64_t cap)
{
    if (cap <= m->stamp_cap && m->bits) return 0;
    uint64_t *bits = realloc(m->bits, cap / 64 * sizeof *bits);
    if (!bits) return PSC_ENOMEM;
    m->bits = bits;
    uint32_t *fw = realloc(m->fw, (cap / 64 + 1) * sizeof *fw);
    if (!fw) return PSC_ENOMEM;
    m->fw = fw;
    m->stamp_cap = cap;
    return 0;
}

/* Bitmap = ones at stamps 1..k (k = m->clock), the tree rebuilt over the
 * words below the near window. */
static void stamps_rebuild(az_metrics_t *m, uint64_t k)
{
    uint64_t nw = m->stamp_cap / 64;
    memset(m->bits, 0, nw * sizeof *m->bits);
    for (uint64_t w = 0; w <= k / 64 && w < nw; w++) {
        uint64_t lo = w * 64, hi = lo + 63;            /* stamps in this word */
        uint64_t a = lo < 1 ? 1 : lo, b = hi < k ? hi : k;
        if (a > b) continue;
        uint64_t n = b - a + 1;
        m->bits[w] = n == 64 ? ~0ull : ((1ull << n) - 1) << (a - lo);
    }
    m->sealed = sealed_for(k);
    /* linear Fenwick build over words 0..sealed-1 */
    m->fw[0] = 0;
    for (uint64_t i = 1; i <= nw; i++)
        m->fw[i] = i - 1 < m->sealed ? (uint32_t)__builtin_popcountll(m->bits[i - 1]) : 0;
    for (uint64_t i = 1; i <= nw; i++) {
        uint64_t j = i + (i & (~i + 1));
        if (j <= nw) m->fw[j] += m->fw[i];
    }
}

az_metrics_t *az_create(const az_cfg_t *cfg, int *err)
{
    int e = PSC_ENOMEM;
    az_metrics_t *m = calloc(1, sizeof *m);
    if (!m) goto fail;
    if (cfg) m->cfg = *cfg;
    if (!m->cfg.reuse_cap) m->cfg.reuse_cap = AZ_REUSE_CAP_DEFAULT;
    if (m->cfg.reuse_cap > REUSE_MAX_CAP) m->cfg.reuse_cap = REUSE_MAX_CAP;
    if (!m->cfg.steady_after) m->cfg.steady_after = 4;
    m->step_marker = strdup(m->cfg.step_marker ? m->cfg.step_marker : "decode");
    m->cfg.step_marker = m->step_marker;
    if (!m->step_marker) goto fail;
    m->counting = 1;
    m->st.last_reuse_distance = -2;
    /* 1024 slots each for live and reuse, 256 for lastfree, as before */
    if (psc_map_init(&m->live, sizeof(live_obj_t), 512, 50, NULL) ||
        psc_map_init(&m->live_keys, sizeof(uint64_t), 8, 75, NULL)) goto fail;
    if (!m->cfg.no_reuse) {
        if (rt_init(&m->reuse, 1024) ||
            psc_map_init(&m->lastfree, sizeof(uint64_t), 192, 75, NULL)) goto fail;
        if (stamps_resize(m, STAMP_MIN_CAP)) goto fail;
        stamps_rebuild(m, 0);
#ifdef HAVE_POPCNT_VARIANT
        __builtin_cpu_init();
        m->popcnt = __builtin_cpu_supports("popcnt") != 0;
#endif
    }
    m->r.t_first = UINT64_MAX;
    return m;
fail:
    az_destroy(m);
    if (err) *err = e;
    return NULL;
}

void az_destroy(az_metrics_t *m)
{
    if (!m) return;
    psc_map_free(&m->live);
    psc_map_free(&m->live_keys);
    free(m->objs);
    rt_free(&m->reuse);
    free(m->bits);
    free(m->fw);
    psc_map_free(&m->lastfree);
    free(m->sites);
    free(m->site_out);
    for (size_t i = 0; i < m->n_phases; i++) free((char *)m->phases[i].p.name);
    free(m->phases);
    free(m->phase_out);
    free(m->step_marker);
    free(m);
}

/* Advance time to t: integrate the time-weighted means over [t_prev, t). */
static inline void advance(az_metrics_t *m, uint64_t t)
{
    if (t < m->st.t) t = m->st.t;                  /* never go back */
    if (__builtin_expect(m->r.t_first == UINT64_MAX, 0)) { m->r.t_first = t; m->t_prev = t; }
    if (t > m->t_prev && m->counting) {
        m->ctime += t - m->t_prev;
        double dt = (double)(t - m->t_prev);
        if (m->st.live_rnd_bytes) {
            m->frag_int += dt * (double)(m->st.live_rnd_bytes - m->st.live_bytes) /
                           (double)m->st.live_rnd_bytes;
            m->frag_w += dt;
        }
        if (m->st.kv_capacity) {
            m->kv_int += dt * (double)m->st.kv_tokens / (double)m->st.kv_capacity;
            m->kv_w += dt;
        }
    }
    m->t_prev = t;
    m->st.t = t;
    m->r.t_last = t;
}

static site_t *site_grow(az_metrics_t *m, uint32_t stack)
{
    size_t old = m->n_sites;
    if (psc_grow((void **)&m->sites, &m->n_sites, stack, sizeof *m->sites, 64)) return NULL;
    for (size_t i = old; i < m->n_sites; i++) m->sites[i].s.stack = (uint32_t)i;
    return m->sites;
}

static inline site_t *site_get(az_metrics_t *m, uint32_t stack)
{
    if (m->cfg.no_sites) return NULL;
    if (__builtin_expect(stack >= m->n_sites, 0) && !site_grow(m, stack)) return NULL;
    site_t *s = &m->sites[stack];
    if (s->stamp != m->peak_id) {          /* untouched since the latest peak */
        s->s.peak_bytes = s->s.live_bytes;
        s->stamp = m->peak_id;
    }
    return s;
}

static inline void check_live_peak(az_metrics_t *m)
{
    if (!m->counting) return;
    if (m->st.live_bytes > m->r.peak_live_bytes ||
        (m->r.peak_live_bytes == 0 && m->st.live_count && m->r.peak_live_count == 0)) {
        m->r.peak_live_bytes = m->st.live_bytes;
        m->r.peak_live_t = m->st.t;
        m->r.peak_live_count = m->st.live_count;
        m->r.peak_live_rnd_bytes = m->st.live_rnd_bytes;
        m->peak_id++;
    }
    if (!m->has_reserved && m->st.live_rnd_bytes > m->r.peak_reserved_bytes) {
        m->r.peak_reserved_bytes = m->st.live_rnd_bytes;
        m->r.peak_reserved_t = m->st.t;
        if (m->st.live_rnd_bytes > m->r.peak_outstanding_bytes)
            m->r.peak_outstanding_bytes = m->st.live_rnd_bytes;
    }
}

static inline void dist_record(az_metrics_t *m, uint64_t d)
{
    m->r.reuse_samples++;
    m->r.distance_hist[az_log2_bucket(d)]++;
    if (d > m->r.distance_max) m->r.distance_max = d;
    if (d < EXACT_DIST) {
        m->dist_exact[d]++;
    } else {
        unsigned o = 63u - (unsigned)__builtin_clzll(d);      /* >= 12 */
        m->dist_fine[o][(d >> (o - 4)) & 15]++;
    }
}

/* ---- reuse distance --------------------------------------------------------- */

/* The Fenwick tree covers the words below m->sealed, which trails the word
 * of the clock by NEAR_WORDS: a reuse whose previous stamp is in the words
 * after it is counted with popcounts only and clears its bit without
 * touching the tree; older stamps use the tree. */

static inline void fw_add(az_metrics_t *m, uint64_t w, uint32_t d)   /* word w, d = +1 or -1 (wrapping) */
{
    uint64_t nw = m->stamp_cap >> 6;
    for (uint64_t i = w + 1; i <= nw; i += i & (~i + 1)) m->fw[i] += d;
}

/* Renumber the stamps 1..D keeping their order and size the stamp
 * structures to 4 D (at least STAMP_MIN_CAP). Every tracked address has a
 * one at its latest stamp and no other, so its new stamp is the rank of that
 * one: the ones in the words before its word (a prefix count, kept in fw[],
 * which is rebuilt next anyway) plus those at or below it in its word. One
 * walk over the table, amortized O(1) per allocation: it runs after at
 * least 3 D stamps were handed out, and the table holds at most 8/3 D slots. */
static int stamps_compact(az_metrics_t *m)
{
    uint64_t nw = (m->clock >> 6) + 1, k = 0;
    for (uint64_t w = 0; w < nw; w++) {        /* fw[w] = ones in words 0..w-1 */
        m->fw[w] = (uint32_t)k;
        k += (uint64_t)__builtin_popcountll(m->bits[w]);
    }
    rtab_t *t = &m->reuse;
    for (size_t i = 0; i <= t->mask + 1; i++) {           /* the slots, then key 0's stamp */
        uint32_t *e;
        if (i <= t->mask) {
            unsigned char *sl = t->slots + i * RT_STRIDE;
            if (!rt_key(sl)) continue;
            e = (uint32_t *)(void *)(sl + 8);
        } else {
            if (!t->has_zero) break;
            e = &t->zero_stamp;
        }
        uint32_t s = *e;
        uint64_t upto = ~0ull >> (63 - (s & 63));            /* stamps <= s in its word */
        *e = m->fw[s >> 6] + (uint32_t)__builtin_popcountll(m->bits[s >> 6] & upto);
    }
    uint64_t want = (k * 4 + 63) & ~(uint64_t)63;
    if (want < STAMP_MIN_CAP) want = STAMP_MIN_CAP;
    int rc = stamps_resize(m, want);
    /* on failure the old size still holds the renumbered stamps */
    m->clock = k;
    stamps_rebuild(m, k);
    return rc && k + 1 >= m->stamp_cap ? rc : 0;
}

/* Reuse bookkeeping for an allocation at addr. Compiled twice (with and
 * without the popcnt instruction, chosen once at az_create) since the
 * baseline x86-64 target has no popcount instruction. */
static inline __attribute__((always_inline)) void reuse_alloc_body(az_metrics_t *m, uint64_t addr, uint64_t key)
{
    int is_new = 0;
    if (__builtin_expect(m->clock + 1 >= m->stamp_cap, 0) && stamps_compact(m)) {
        m->st.last_reuse_distance = -2;
        return;
    }
    uint32_t *e;
    size_t tracked = rt_count(&m->reuse);
    if (__builtin_expect(tracked >= m->cfg.reuse_cap, 0)) {
        e = rt_get(&m->reuse, addr);                                      /* full: only known addresses */
        if (!e) m->r.reuse_capped = 1;
    } else {
        e = rt_put(&m->reuse, addr, &is_new);                             /* NULL: could not grow */
    }
    if (m->counting) {
        const uint64_t *lf = psc_map_get_sz(&m->lastfree, key, sizeof(uint64_t));
        if (lf && *lf == addr) m->r.same_address_hits++;
    }
    if (!e) {                         /* untracked (cap or ENOMEM): count as fresh */
        if (m->counting) m->r.fresh_addresses++;
        m->st.last_reuse_distance = -2;
        return;
    }
    if (is_new) {
        if (m->counting) m->r.fresh_addresses++;
        m->st.last_reuse_distance = -1;
    } else {
        /* every tracked address has one 1, at its latest stamp: the ones
         * after a's previous stamp are the distinct addresses since */
        uint64_t prev = *e, pw = prev >> 6, d;
        uint64_t upto = ~0ull >> (63 - (prev & 63));            /* stamps <= prev in its word */
        if (pw >= m->sealed) {
            uint64_t cw = m->clock >> 6;
            d = (uint64_t)__builtin_popcountll(m->bits[pw] & ~upto);
            for (uint64_t w = pw + 1; w <= cw; w++) d += (uint64_t)__builtin_popcountll(m->bits[w]);
        } else {
            uint64_t c = 0;
            for (uint64_t i = pw; i > 0; i &= i - 1) c += m->fw[i];   /* words 0..pw-1 */
            c += (uint64_t)__builtin_popcountll(m->bits[pw] & upto);
            d = rt_count(&m->reuse) - c;
            fw_add(m, pw, (uint32_t)-1);
        }
        m->bits[pw] &= ~(1ull << (prev & 63));
        if (m->counting) dist_record(m, d);
        m->st.last_reuse_distance = (int64_t)d;
    }
    uint64_t now = ++m->clock;
    uint64_t seal = sealed_for(now);
    while (m->sealed < seal) {        /* a word leaves the near window: into the tree */
        fw_add(m, m->sealed, (uint32_t)__builtin_popcountll(m->bits[m->sealed]));
        m->sealed++;
    }
    m->bits[now >> 6] |= 1ull << (now & 63);
    *e = (uint32_t)now;
}

/* After the stream: the table, the stamps and the last-freed map go. The
 * counters az_result reads stay (the distance histograms, the table's
 * count of addresses: rt_free keeps n and has_zero), and no_reuse keeps
 * any later update away from the freed tables. A tracker capped at the
 * default holds 12 MiB of table, replay six of them: freed here, that
 * memory is not under whatever the caller does next. */
static void reuse_release(az_metrics_t *m)
{
    if (m->cfg.no_reuse) return;
    rt_free(&m->reuse);
    free(m->bits); m->bits = NULL;
    free(m->fw); m->fw = NULL;
    m->stamp_cap = 0;
    psc_map_free(&m->lastfree);
    m->cfg.no_reuse = 1;
}

size_t az_reuse_bytes(const az_metrics_t *m)
{
    size_t b = 0;
    if (m->reuse.slots) b += (m->reuse.mask + 1) * RT_STRIDE;
    if (m->bits) b += m->stamp_cap / 64 * sizeof *m->bits + (m->stamp_cap / 64 + 1) * sizeof *m->fw;
    if (m->lastfree.slots) b += (m->lastfree.mask + 2) * m->lastfree.stride;
    return b;
}

static void reuse_alloc_plain(az_metrics_t *m, uint64_t addr, uint64_t key)
{
    reuse_alloc_body(m, addr, key);
}

#ifdef HAVE_POPCNT_VARIANT
__attribute__((target("popcnt")))
static void reuse_alloc_popcnt(az_metrics_t *m, uint64_t addr, uint64_t key)
{
    reuse_alloc_body(m, addr, key);
}
#endif

static inline void reuse_alloc(az_metrics_t *m, uint64_t addr, uint64_t key)
{
#ifdef HAVE_POPCNT_VARIANT
    if (m->popcnt) { reuse_alloc_popcnt(m, addr, key); return; }
#endif
    reuse_alloc_plain(m, addr, key);
}

/* Sums over a whole trace (total allocated) stop at 2^64 - 1 instead of
 * wrapping: only a crafted trace gets there (16 EiB). */
static inline uint64_t sat_add(uint64_t a, uint64_t b) { uint64_t r; return __builtin_add_overflow(a, b, &r) ? UINT64_MAX : r; }

/* The accounting of one allocation, once its live entry o is in place
 * (az_alloc: in the address table; az_alloc_obj: in the caller's slot). */
static inline __attribute__((always_inline)) void alloc_account(az_metrics_t *m, live_obj_t *o, uint64_t addr,
                                                                uint64_t req, uint64_t rnd, uint64_t size_key,
                                                                uint32_t stack, uint32_t kmode)
{
    o->req = req; o->rnd = rnd; o->t = m->st.t; o->stack = stack;
    o->flags = kmode | (m->counting ? LIVE_COUNTED : 0u);
    m->st.live_bytes += req;
    m->st.live_rnd_bytes += rnd;
    m->st.live_count++;
    if (m->counting) {
        m->wlive_bytes += req;
        m->wlive_count++;
        if (m->wlive_bytes > m->r.peak_window_live_bytes) m->r.peak_window_live_bytes = m->wlive_bytes;
        m->r.allocs++;
        m->r.total_allocated_bytes = sat_add(m->r.total_allocated_bytes, req);
        m->r.size_hist[az_log2_bucket(req)]++;
    }
    if (!m->cfg.no_reuse) reuse_alloc(m, addr, size_key);
    site_t *s = site_get(m, stack);
    if (s) {
        s->s.live_bytes += req;
        s->s.live_count++;
        if (m->counting) { s->s.calls++; s->s.bytes = sat_add(s->s.bytes, req); s->wlive_bytes += req; s->wlive_count++; }
    }
    m->last_alloc_addr = addr;
    m->last_alloc_valid = 1;
    check_live_peak(m);
}

/* The accounting of one free, from a copy of the entry taken before it
 * was removed; key is the size key (live_keys already looked up). */
static inline __attribute__((always_inline)) void free_account(az_metrics_t *m, const live_obj_t *o, uint64_t addr,
                                                               uint64_t key)
{
    uint64_t req = o->req, rnd = o->rnd, t0 = o->t;
    uint32_t stack = o->stack, counted = o->flags & LIVE_COUNTED;
    if (counted) { m->wlive_bytes -= req; m->wlive_count--; }
    m->st.live_bytes -= req;
    m->st.live_rnd_bytes -= rnd;
    m->st.live_count--;
    m->st.last_lifetime = m->st.t - t0;
    int temp = m->last_alloc_valid && m->last_alloc_addr == addr;
    m->last_alloc_valid = 0;
    if (m->counting) {
        m->r.frees++;
        m->r.lifetime_hist[az_log2_bucket(m->st.last_lifetime)]++;
        if (temp) m->r.temporary++;
    }
    if (!m->cfg.no_reuse) {
        uint64_t *lf = psc_map_count(&m->lastfree) < m->cfg.reuse_cap ? psc_map_put_sz(&m->lastfree, key, NULL, sizeof(uint64_t))
                                                                        : psc_map_get_sz(&m->lastfree, key, sizeof(uint64_t));
        if (lf) *lf = addr;
    }
    site_t *s = site_get(m, stack);
    if (s) {
        s->s.live_bytes -= req;
        s->s.live_count--;
        if (counted) { s->wlive_bytes -= req; s->wlive_count--; }
        if (temp && m->counting) s->s.temporary++;
    }
}

/* The size key mode of an allocation: two bits, or LIVE_KEY_MAP with the
 * key put in live_keys (PSC_ENOMEM when it cannot be). */
static inline int key_mode(az_metrics_t *m, uint64_t addr, uint64_t req, uint64_t rnd, uint64_t size_key,
                           uint32_t *kmode)
{
    *kmode = size_key == req ? LIVE_KEY_REQ : size_key == rnd ? LIVE_KEY_RND : LIVE_KEY_MAP;
    if (__builtin_expect(*kmode == LIVE_KEY_MAP, 0)) {
        uint64_t *k = psc_map_put_sz(&m->live_keys, addr, NULL, sizeof(uint64_t));
        if (!k) return PSC_ENOMEM;
        *k = size_key;
    }
    return 0;
}

/* The size key of a live entry being freed (its live_keys entry removed). */
static inline uint64_t key_take(az_metrics_t *m, const live_obj_t *o, uint64_t addr)
{
    uint32_t kmode = o->flags & LIVE_KEY_MASK;
    uint64_t key = kmode == LIVE_KEY_RND ? o->rnd : o->req;
    if (__builtin_expect(kmode == LIVE_KEY_MAP, 0)) {
        uint64_t *k = psc_map_get_sz(&m->live_keys, addr, sizeof(uint64_t));
        if (k) { key = *k; psc_map_erase_sz(&m->live_keys, k, sizeof(uint64_t)); }
    }
    return key;
}

int az_alloc(az_metrics_t *m, uint64_t t, uint64_t addr, uint64_t req, uint64_t rnd,
             uint64_t size_key, uint32_t stack)
{
    /* the reuse entry is looked up after the live table: start loading it
     * now so the two cache misses overlap */
    if (!m->cfg.no_reuse) __builtin_prefetch(m->reuse.slots + rt_home(&m->reuse, addr) * RT_STRIDE);
    advance(m, t);
    if (rnd < req) rnd = req;
    /* No address space holds more than 2^57 bytes (5-level paging): an
     * allocation that would take the live set past it is a damaged or
     * crafted trace, not memory, and is left out (counted) rather than
     * wrapping every sum. */
    if (rnd > AZ_MAX_LIVE_BYTES - m->st.live_rnd_bytes) { m->r.implausible_allocs++; return 0; }
    int is_new;
    live_obj_t *o = psc_map_put_sz(&m->live, addr, &is_new, sizeof(live_obj_t));
    if (__builtin_expect(o && !is_new, 0)) {
        m->r.double_allocs++;
        az_free(m, t, addr);
        o = psc_map_put_sz(&m->live, addr, NULL, sizeof(live_obj_t));
    }
    if (!o) return PSC_ENOMEM;
    uint32_t kmode;
    if (key_mode(m, addr, req, rnd, size_key, &kmode)) { psc_map_erase_sz(&m->live, o, sizeof(live_obj_t)); return PSC_ENOMEM; }
    alloc_account(m, o, addr, req, rnd, size_key, stack, kmode);
    return 0;
}

int az_free(az_metrics_t *m, uint64_t t, uint64_t addr)
{
    advance(m, t);
    live_obj_t *o = psc_map_get_sz(&m->live, addr, sizeof(live_obj_t));
    if (!o) {
        m->r.unmatched_frees++;
        return PSC_ENOENT;
    }
    live_obj_t copy = *o;
    psc_map_erase_sz(&m->live, o, sizeof(live_obj_t));
    free_account(m, &copy, addr, key_take(m, &copy, addr));
    return 0;
}

/* ---- objects named by the caller (az_alloc_obj) ------------------------------ */

/* The live set as an array indexed by the caller's object number instead
 * of the address table: replay's policies each fed the address table of
 * their own accumulator (a hash, a probe and a backward-shift deletion per
 * object and policy) for objects the pass had already numbered densely. An
 * entry is the table's object plus its address (a free must name it). */
typedef struct obj_ent {
    live_obj_t o;            /* flags: LIVE_ON while live */
    uint64_t addr;
} obj_ent_t;
#define LIVE_ON 8u

static int objs_grow(az_metrics_t *m, uint32_t obj)
{
    return psc_grow((void **)&m->objs, &m->n_objs, obj, sizeof *m->objs, 1024);
}

int az_alloc_obj(az_metrics_t *m, uint32_t obj, uint64_t t, uint64_t addr, uint64_t req, uint64_t rnd,
                 uint64_t size_key, uint32_t stack)
{
    if (!m->cfg.no_reuse) __builtin_prefetch(m->reuse.slots + rt_home(&m->reuse, addr) * RT_STRIDE);
    advance(m, t);
    if (rnd < req) rnd = req;
    if (rnd > AZ_MAX_LIVE_BYTES - m->st.live_rnd_bytes) { m->r.implausible_allocs++; return 0; }
    if (__builtin_expect(obj >= m->n_objs, 0) && objs_grow(m, obj)) return PSC_ENOMEM;
    obj_ent_t *e = &m->objs[obj];
    if (__builtin_expect(e->o.flags & LIVE_ON, 0)) {      /* the number is live: as a double alloc */
        m->r.double_allocs++;
        az_free_obj(m, obj, t, e->addr);
    }
    uint32_t kmode;
    if (key_mode(m, addr, req, rnd, size_key, &kmode)) return PSC_ENOMEM;
    alloc_account(m, &e->o, addr, req, rnd, size_key, stack, kmode);
    e->o.flags |= LIVE_ON;
    e->addr = addr;
    return 0;
}

int az_free_obj(az_metrics_t *m, uint32_t obj, uint64_t t, uint64_t addr)
{
    advance(m, t);
    obj_ent_t *e = obj < m->n_objs ? &m->objs[obj] : NULL;
    if (!e || !(e->o.flags & LIVE_ON) || e->addr != addr) {
        m->r.unmatched_frees++;
        return PSC_ENOENT;
    }
    e->o.flags &= ~LIVE_ON;
    free_account(m, &e->o, addr, key_take(m, &e->o, addr));
    return 0;
}

void az_calls(az_metrics_t *m, uint64_t n, uint64_t bytes)
{
    if (!m->counting) return;
    m->r.calls += n;
    m->r.call_bytes += bytes;
}

void az_alloc_calls(az_metrics_t *m, uint64_t n)
{
    if (!m->counting) return;
    m->r.alloc_calls += n;
}

void az_heap_call(az_metrics_t *m, uint64_t bytes, int is_alloc)
{
    if (!m->counting) return;
    m->r.calls++;
    m->r.call_bytes += bytes;
    m->r.alloc_calls += is_alloc != 0;
}

uint64_t az_reserved_now(const az_metrics_t *m)
{
    return m->has_reserved ? m->st.outstanding + m->st.cached : m->st.live_rnd_bytes;
}

void az_reserved(az_metrics_t *m, uint64_t t, uint64_t outstanding, uint64_t cached)
{
    advance(m, t);
    m->has_reserved = 1;
    m->st.outstanding = outstanding;
    m->st.cached = cached;
    if (!m->counting) return;
    if (outstanding + cached > m->r.peak_reserved_bytes) {
        m->r.peak_reserved_bytes = outstanding + cached;
        m->r.peak_reserved_t = m->st.t;
    }
    if (outstanding > m->r.peak_outstanding_bytes) m->r.peak_outstanding_bytes = outstanding;
    if (cached > m->r.peak_cached_bytes) m->r.peak_cached_bytes = cached;
}

void az_acquire(az_metrics_t *m, int hit)
{
    if (!m->counting) return;
    m->r.acquires++;
    if (hit) m->r.hits++; else m->r.misses++;
}

void az_backing(az_metrics_t *m, uint64_t n_allocs, uint64_t n_frees)
{
    if (!m->counting) return;
    m->r.backing_allocs += n_allocs;
    m->r.backing_frees += n_frees;
}

void az_kv(az_metrics_t *m, uint64_t t, uint64_t tokens, uint64_t blocks_held,
           uint64_t block_size)
{
    advance(m, t);
    m->st.kv_tokens = tokens;
    m->st.kv_blocks = blocks_held;
    m->st.kv_capacity = blocks_held * block_size;
    if (!m->counting) return;
    m->r.has_kv = 1;
    if (blocks_held > m->r.peak_kv_blocks) {
        m->r.peak_kv_blocks = blocks_held;
        m->r.peak_kv_t = m->st.t;
        m->r.kv_utilization_at_peak = m->st.kv_capacity ?
            (double)tokens / (double)m->st.kv_capacity : 0;
    } else if (blocks_held == m->r.peak_kv_blocks && m->r.peak_kv_t == m->st.t && m->st.kv_capacity) {
        /* same instant as the peak: the last state of that instant wins */
        m->r.kv_utilization_at_peak = (double)tokens / (double)m->st.kv_capacity;
    }
}

/* ---- phases ----------------------------------------------------------------- */

static phase_t *phase_get(az_metrics_t *m, const char *name)
{
    if (m->last_phase && strcmp(m->last_phase->p.name, name) == 0) return m->last_phase;
    for (size_t i = 0; i < m->n_phases; i++)
        if (strcmp(m->phases[i].p.name, name) == 0) return m->last_phase = &m->phases[i];
    if (m->n_phases == m->cap_phases) {
        /* pointers into the array move: re-aim them */
        int step_idx = m->step ? (int)(m->step - m->phases) : -1;
        if (psc_grow((void **)&m->phases, &m->cap_phases, m->n_phases, sizeof *m->phases, 16)) return NULL;
        m->step = step_idx >= 0 ? &m->phases[step_idx] : NULL;
    }
    char *copy = strdup(name);
    if (!copy) return NULL;
    phase_t *p = &m->phases[m->n_phases++];
    memset(p, 0, sizeof *p);
    p->p.name = copy;
    if (strcmp(name, m->step_marker) == 0) m->step = p;
    return m->last_phase = p;
}

static void phase_open(az_metrics_t *m, phase_t *p)
{
    p->c0 = m->r.calls; p->b0 = m->r.call_bytes; p->t0 = m->ctime; p->a0 = m->r.alloc_calls;
    if (p == m->step) {
        m->steady_open = p->p.count > m->cfg.steady_after;   /* count already includes this step */
        if (m->steady_open) { m->steady_c0 = m->r.calls; m->steady_a0 = m->r.alloc_calls; m->steady_steps++; }
    }
}

static void phase_close(az_metrics_t *m, phase_t *p)
{
    p->p.heap_calls += m->r.calls - p->c0;
    p->p.heap_bytes += m->r.call_bytes - p->b0;
    p->p.alloc_calls += m->r.alloc_calls - p->a0;
    p->p.time_ns += m->ctime - p->t0;      /* time open while counting */
    if (p == m->step && m->steady_open) {
        m->steady_calls += m->r.calls - m->steady_c0;
        m->steady_allocs += m->r.alloc_calls - m->steady_a0;
        m->steady_open = 0;
    }
}

int az_mark(az_metrics_t *m, uint64_t t, int kind, const char *name, uint64_t instance)
{
    (void)instance;
    advance(m, t);
    if (!name) return PSC_EINVAL;
    phase_t *p = phase_get(m, name);
    if (!p) return PSC_ENOMEM;
    /* KV utilization as each decode step starts: the same steps give the
     * same figure whatever their timing (a gate can hold it exactly) */
    if (p == m->step && kind != AZ_MARK_END && m->counting && m->st.kv_capacity) {
        m->kv_step_sum += (double)m->st.kv_tokens / (double)m->st.kv_capacity;
        m->kv_step_n++;
    }
    switch (kind) {
    case AZ_MARK_POINT:
        if (m->counting) p->p.count++;
        /* the step marker's points bound steps (one step to the next);
         * any other point is an instant, not a span */
        if (p != m->step) break;
        if (p->point_open) phase_close(m, p);
        p->p.spans = 1;
        p->point_open = 1;
        phase_open(m, p);
        break;
    case AZ_MARK_BEGIN:
        if (m->counting) p->p.count++;
        p->p.spans = 1;
        if (p->open++ == 0) {
            phase_open(m, p);
        } else if (p == m->step && p->p.count > m->cfg.steady_after) {
            /* overlapping steps: another steady step while the phase is open */
            if (!m->steady_open) { m->steady_open = 1; m->steady_c0 = m->r.calls; m->steady_a0 = m->r.alloc_calls; }
            m->steady_steps++;
        }
        break;
    case AZ_MARK_END:
        if (p->open == 0) return PSC_ENOENT;           /* end without begin: ignored */
        if (--p->open == 0) phase_close(m, p);
        break;
    default:
        return PSC_EINVAL;
    }
    return 0;
}

void az_set_counting_at(az_metrics_t *m, uint64_t t, int on)
{
    /* the time up to t was not in the window: pass over it uncounted */
    if (on && !m->counting) advance(m, t);
    az_set_counting(m, on);
}

void az_set_counting(az_metrics_t *m, int on)
{
    on = !!on;
    if (on == m->counting) return;
    m->counting = on;
    if (on) {
        m->t_prev = m->st.t;
        check_live_peak(m);
        if (m->has_reserved) az_reserved(m, m->st.t, m->st.outstanding, m->st.cached);
        if (m->st.kv_blocks) az_kv(m, m->st.t, m->st.kv_tokens, m->st.kv_blocks,
                                   m->st.kv_blocks ? m->st.kv_capacity / m->st.kv_blocks : 0);
    }
}

void az_finish(az_metrics_t *m, uint64_t t)
{
    if (m->finished) return;
    advance(m, t);
    for (size_t i = 0; i < m->n_phases; i++) {
        phase_t *p = &m->phases[i];
        if (p->open || p->point_open) { phase_close(m, p); p->open = 0; p->point_open = 0; }
    }
    /* what was allocated while counting and never freed (without a
     * window: the whole live set) */
    m->r.leaked_bytes = m->wlive_bytes;
    m->r.leaked_count = m->wlive_count;
    reuse_release(m);
    m->finished = 1;
}

const az_state_t *az_state(const az_metrics_t *m) { return &m->st; }

uint64_t az_reuse_percentile(const az_metrics_t *m, double q)
{
    uint64_t n = m->r.reuse_samples;
    if (!n) return 0;
    /* the smallest d with at least ceil(q * n) samples <= d (nearest rank) */
    uint64_t rank = (uint64_t)ceil(q * (double)n);
    if (rank < 1) rank = 1;
    uint64_t c = 0;
    for (uint64_t d = 0; d < EXACT_DIST; d++) {
        c += m->dist_exact[d];
        if (c >= rank) return d;
    }
    for (unsigned o = 12; o < 64; o++)
        for (unsigned s = 0; s < 16; s++) {
            c += m->dist_fine[o][s];
            if (c >= rank) {
                uint64_t hi = ((uint64_t)(16 + s + 1) << (o - 4)) - 1;
                return hi > m->r.distance_max ? m->r.distance_max : hi;
            }
        }
    return m->r.distance_max;
}

void az_result(const az_metrics_t *m, az_result_t *r)
{
    *r = m->r;
    if (r->t_first == UINT64_MAX) r->t_first = 0;
    r->reserved_over_live = r->peak_live_bytes ?
        (double)r->peak_reserved_bytes / (double)r->peak_live_bytes : 0;
    r->internal_frag = r->peak_live_rnd_bytes ?
        (double)(r->peak_live_rnd_bytes - r->peak_live_bytes) / (double)r->peak_live_rnd_bytes : 0;
    r->internal_frag_avg = m->frag_w > 0 ? m->frag_int / m->frag_w : r->internal_frag;
    r->hit_rate = r->acquires ? (double)r->hits / (double)r->acquires : 0;
    r->fresh_address_ratio = r->allocs ? (double)r->fresh_addresses / (double)r->allocs : 0;
    r->same_address_reuse = r->allocs ? (double)r->same_address_hits / (double)r->allocs : 0;
    r->distance_p50 = az_reuse_percentile(m, 0.5);
    r->distance_p90 = az_reuse_percentile(m, 0.9);
    r->reuse_tracked = rt_count(&m->reuse);
    if (r->has_kv) {
        r->kv_utilization = m->kv_w > 0 ? m->kv_int / m->kv_w : r->kv_utilization_at_peak;
        r->kv_waste_ratio = r->peak_kv_blocks ? 1.0 - r->kv_utilization : 0;
    }
    r->phases = m->phase_out;
    r->n_phases = 0;
    if (m->n_phases) {
        /* phase_out mirrors phases[].p; refreshed here (const m: the buffer is ours) */
        az_metrics_t *mm = (az_metrics_t *)m;
        az_phase_t *out = realloc(mm->phase_out, m->n_phases * sizeof *out);
        if (out) {
            mm->phase_out = out;
            for (size_t i = 0; i < m->n_phases; i++) out[i] = m->phases[i].p;
            r->phases = out;
            r->n_phases = m->n_phases;
        }
    }
    if (m->step) {
        r->decode_steps = m->step->p.count;
        if (m->steady_steps) {
            r->allocs_per_decode_step = (double)m->steady_allocs / (double)m->steady_steps;
            r->heap_calls_per_decode_step = (double)m->steady_calls / (double)m->steady_steps;
            r->has_decode_steps = 1;
        } else if (m->step->p.count) {   /* too few steps for a steady state: all of them */
            r->allocs_per_decode_step = (double)m->step->p.alloc_calls / (double)m->step->p.count;
            r->heap_calls_per_decode_step = (double)m->step->p.heap_calls / (double)m->step->p.count;
            r->has_decode_steps = 1;
        }
    }
    r->kv_step_samples = m->kv_step_n;
    r->kv_utilization_per_step = m->kv_step_n ? m->kv_step_sum / (double)m->kv_step_n : 0;
}

const az_site_t *az_sites(az_metrics_t *m, size_t *n)
{
    size_t k = 0;
    *n = 0;
    if (!m->n_sites) return NULL;
    az_site_t *out = realloc(m->site_out, m->n_sites * sizeof *out);
    if (!out) return NULL;
    m->site_out = out;
    for (size_t i = 0; i < m->n_sites; i++) {
        site_t *s = &m->sites[i];
        if (s->stamp != m->peak_id) { s->s.peak_bytes = s->s.live_bytes; s->stamp = m->peak_id; }
        /* a site with no counted call may still hold part of the peak
         * (allocated before a --phase/--from window) */
        if (!s->s.calls && !s->s.live_bytes && !s->s.peak_bytes) continue;
        out[k] = s->s;
        if (m->finished) {         /* leaked: allocated while counting, never freed */
            out[k].live_bytes = s->suppressed ? 0 : s->wlive_bytes;
            out[k].live_count = s->suppressed ? 0 : s->wlive_count;
        }
        k++;
    }
    *n = k;
    return out;
}

int az_site_suppress(az_metrics_t *m, az_result_t *r, uint32_t stack, uint64_t *bytes, uint64_t *count)
{
    *bytes = *count = 0;
    if (!m->finished || stack >= m->n_sites || m->sites[stack].suppressed) return 0;
    site_t *s = &m->sites[stack];
    if (!s->wlive_count) return 0;
    s->suppressed = 1;
    *bytes = s->wlive_bytes;
    *count = s->wlive_count;
    /* the leak figures are this accumulator's sums over its sites' leaks */
    r->leaked_bytes -= *bytes < r->leaked_bytes ? *bytes : r->leaked_bytes;
    r->leaked_count -= *count < r->leaked_count ? *count : r->leaked_count;
    return 1;
}

uint64_t az_glibc_usable(uint64_t req)
{
    if (req >= 128 * 1024) {                       /* mmap'd chunk: 16-byte header, page rounding */
        uint64_t c = (req + 16 + 4095) & ~(uint64_t)4095;
        return c - 16;
    }
    uint64_t c = (req + 8 + 15) & ~(uint64_t)15;   /* size field + 16-byte alignment */
    if (c < 32) c = 32;
    return c - 8;
}
