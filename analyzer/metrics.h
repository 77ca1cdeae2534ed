/* metrics.h — the one metrics library of poolscope (prefix az_).
 *
 * Streaming accumulators over an allocation-level stream, independent of
 * where the stream comes from: `poolscope report` feeds heap events of a
 * trace (and, in a second accumulator, the pool's acquire/reclaim events);
 * `poolscope replay` feeds the simulated streams of each policy. Every
 * metric is computed exactly as docs/DESIGN.md ("Metrics") defines it,
 * so the report's peak_live_bytes and replay's `ideal` row agree.
 *
 *   az_metrics_t *m = az_create(NULL, &err);        // defaults
 *   az_alloc(m, t, addr, req, rnd, size_key, stack); // one per allocation
 *   az_calls(m, 1, req);                             // one per heap call (phases)
 *   az_free(m, t, addr);
 *   az_mark(m, t, AZ_MARK_BEGIN, "decode", 7);
 *   ...
 *   az_finish(m, t_end);
 *   az_result_t r; az_result(m, &r);
 *   az_destroy(m);
 *
 * Times are ns (any origin, non-decreasing; an earlier time is taken as the
 * latest one seen). `addr` is whatever names a live object and its place:
 * a heap address, a pool buffer address, a simulated offset. A realloc is
 * az_free(old) + az_alloc(new). Heap calls (az_calls) are counted apart from
 * allocations because one call may be a free and an allocation (realloc) or
 * neither (mmap).
 *
 * Memory is bounded by the live set, the distinct stack ids, the distinct
 * marker names, and the reuse tracker (at most cfg.reuse_cap distinct
 * addresses and size keys; beyond that reuse metrics cover the first
 * reuse_cap addresses only and r.reuse_capped says so; az_finish frees it).
 * Never by the length of the stream. All updates are O(1) except the reuse
 * distance, O(log D) with D the distinct addresses tracked.
 *
 * Errors follow include/poolscope/error.h: az_alloc returns PSC_ENOMEM when a table
 * cannot grow (the accumulator stays usable; that allocation is not
 * counted).
 */
#ifndef POOLSCOPE_METRICS_H
#define POOLSCOPE_METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "json.h"             /* az_json_t, which scan.h takes from here; the
                               * result's JSON members are metrics_json.h's */

typedef struct az_metrics az_metrics_t;

/* The default reuse_cap: 3/4 of 2^20, the most addresses a table of 2^20
 * 12-byte slots holds (it doubles beyond 3/4 full). At 1 << 20, the cap
 * before, the last quarter-million addresses doubled the table to 24 MiB;
 * now a capped accumulator holds 12 MiB of table, and any stream with at
 * most this many distinct addresses gets the same figures as before. */
#define AZ_REUSE_CAP_DEFAULT (3u << 18)

typedef struct az_cfg {
    uint32_t reuse_cap;      /* distinct addresses tracked for reuse metrics; 0: AZ_REUSE_CAP_DEFAULT */
    int      no_reuse;       /* 1: skip reuse distance / fresh / same-address tracking */
    int      no_sites;       /* 1: skip per-stack-id accounting */
    uint32_t steady_after;   /* decode steps skipped before steady state; 0: 4 */
    const char *step_marker; /* marker whose scopes/points are decode steps; NULL: "decode" */
} az_cfg_t;

/* NULL cfg = defaults. NULL on failure with *err (PSC_ENOMEM, PSC_EINVAL). */
az_metrics_t *az_create(const az_cfg_t *cfg, int *err);
void az_destroy(az_metrics_t *m);                 /* accepts NULL */

/* ---- the stream ------------------------------------------------------------ */

/* An allocation of `req` requested bytes granted as `rnd` (>= req; pass req
 * when unknown) at `addr`. size_key groups allocations "of the same size"
 * for same_address_reuse (heap: req; pool: granted length). stack: a site id
 * (trace stack id), 0 none. An allocation at an address already live first
 * frees the old object (counted in r.double_allocs). */
/* More than any address space holds (2^57 bytes, 5-level paging). */
#define AZ_MAX_LIVE_BYTES (1ull << 57)

int az_alloc(az_metrics_t *m, uint64_t t, uint64_t addr, uint64_t req, uint64_t rnd,
             uint64_t size_key, uint32_t stack);
/* Free of a live object. Returns 0, or PSC_ENOENT for an address not live
 * (counted in r.unmatched_frees, otherwise ignored). */
int az_free(az_metrics_t *m, uint64_t t, uint64_t addr);

/* The same for a caller that numbers its live objects densely (replay's
 * stream slots): `obj` names the object (a small integer, unique among the
 * live objects, reused once freed), and the live set is an array indexed by
 * it instead of the address table, so no hashing per allocation and free.
 * addr still names the place, for the reuse metrics. Every result is what
 * az_alloc / az_free give for the same stream, provided no two live
 * objects share an address (not checked here: az_alloc's double_allocs
 * counts an allocation at a live number instead). az_free_obj of a number
 * not live, or live at another address: PSC_ENOENT, an unmatched free. Use
 * one pair or the other on an accumulator, not both. */
int az_alloc_obj(az_metrics_t *m, uint32_t obj, uint64_t t, uint64_t addr, uint64_t req, uint64_t rnd,
                 uint64_t size_key, uint32_t stack);
int az_free_obj(az_metrics_t *m, uint32_t obj, uint64_t t, uint64_t addr);
/* Heap calls for phases and heap_calls_per_decode_step: n calls that
 * requested `bytes` (0 for frees). Also counted in r.calls / r.call_bytes. */
void az_calls(az_metrics_t *m, uint64_t n, uint64_t bytes);
/* Of those, n calls to an allocating function (malloc, calloc, realloc,
 * the aligned ones; not free or mmap): allocs_per_decode_step, r.alloc_calls. */
void az_alloc_calls(az_metrics_t *m, uint64_t n);
/* One heap call of `bytes`: az_calls(m, 1, bytes), and az_alloc_calls(m, 1)
 * when is_alloc (one call per event instead of two). */
void az_heap_call(az_metrics_t *m, uint64_t bytes, int is_alloc);

/* What the policy holds from its backing store, as of time t:
 * outstanding (handed out) + cached (kept for reuse). Pool: buffers out and
 * buffers on its free list; arena: chunk capacity as outstanding, 0 cached;
 * malloc: the allocator's figure. Peaks of each and of the sum
 * (peak_reserved_bytes). Without any call, reserved = the live rnd bytes. */
void az_reserved(az_metrics_t *m, uint64_t t, uint64_t outstanding, uint64_t cached);
/* Pool counters: one acquire served from the cache (hit = 1) or not; n
 * allocations from / frees to the backing store. */
void az_acquire(az_metrics_t *m, int hit);
void az_backing(az_metrics_t *m, uint64_t n_allocs, uint64_t n_frees);

/* KV block state as of time t, summed over block pools: tokens stored
 * (sum of n_used of held blocks), blocks held, block_size in tokens
 * (capacity = blocks_held * block_size). */
void az_kv(az_metrics_t *m, uint64_t t, uint64_t tokens, uint64_t blocks_held,
           uint64_t block_size);

/* Markers. BEGIN/END scopes of one name may overlap (instance ids); the
 * phase of a name is open while any of its instances is. A POINT marker
 * opens a phase of its name that lasts until the next point of that name
 * (or az_finish). Names are copied. */
enum { AZ_MARK_POINT = 0, AZ_MARK_BEGIN = 1, AZ_MARK_END = 2 };
int az_mark(az_metrics_t *m, uint64_t t, int kind, const char *name, uint64_t instance);

/* Counting switch for --phase / --from/--to: while off, the live set and
 * the trackers stay exact but nothing is counted (calls, allocations,
 * histograms, peaks, time integrals, phase times). The peak is of the whole
 * live set while counting (objects allocated before count too); leaks are
 * the objects allocated while counting that are never freed. Default on. */
void az_set_counting(az_metrics_t *m, int on);
/* The same at time t: switching on first moves the clock to t uncounted,
 * so time integrals and phase times start at t, not at the latest update. */
void az_set_counting_at(az_metrics_t *m, uint64_t t, int on);

/* End of the stream at time t: closes time integrals and open phases,
 * takes the live set as leaked, and frees the reuse tracker (its figures
 * are kept; what a caller does after the scan, symbolizing, writing a
 * report, need not sit on top of a table of every address). Call once,
 * before az_result; updates after it count no reuse. */
void az_finish(az_metrics_t *m, uint64_t t);

/* Bytes the reuse tracker holds now (table, stamp bitmap and tree, the
 * last-freed map): what the tracker costs, for tests and benchmarks. */
size_t az_reuse_bytes(const az_metrics_t *m);

/* ---- what it knows now (cheap; for plots and exports) -------------------- */
typedef struct az_state {
    uint64_t t;                  /* latest time seen */
    uint64_t live_bytes;         /* sum req over the live set */
    uint64_t live_rnd_bytes;     /* sum rnd over the live set */
    uint64_t live_count;
    uint64_t outstanding, cached;/* last az_reserved (or live rnd, 0) */
    uint64_t kv_tokens, kv_blocks, kv_capacity;
    int64_t  last_reuse_distance;/* of the latest az_alloc: -1 first use (cold), -2 untracked */
    uint64_t last_lifetime;      /* ns, of the latest az_free */
} az_state_t;
const az_state_t *az_state(const az_metrics_t *m);
/* What the policy holds now: outstanding + cached as of the latest
 * az_reserved (the live rnd bytes before any). The one sum every reserved
 * figure is taken from: peak_reserved_bytes is its maximum, and the
 * timelines of plot and html sample it (a bucket's maximum of the sum, never
 * the sum of two bucket maxima, which can be more than the peak). */
uint64_t az_reserved_now(const az_metrics_t *m);

/* ---- results -------------------------------------------------------------- */
#define AZ_HIST_BUCKETS 65       /* log2 buckets: [0] value 0, [i] values in [2^(i-1), 2^i) */

typedef struct az_phase {
    const char *name;            /* valid until az_destroy */
    uint64_t count;              /* begins (scopes) or points */
    uint64_t heap_calls;         /* az_calls n while the phase was open */
    uint64_t heap_bytes;         /* az_calls bytes while the phase was open */
    uint64_t time_ns;            /* time the phase was open while counting */
    uint64_t alloc_calls;        /* az_alloc_calls n while the phase was open */
    int spans;                   /* 0: points only (not the step marker's): a point has no
                                  * extent, so the figures above but count do not apply */
} az_phase_t;

typedef struct az_result {
    /* volume */
    uint64_t allocs, frees, calls, call_bytes;
    uint64_t alloc_calls;                /* az_alloc_calls: calls to allocating functions */
    uint64_t total_allocated_bytes;      /* sum req of all allocations */
    uint64_t unmatched_frees, double_allocs;
    uint64_t implausible_allocs;         /* left out (az_alloc returns 0): the live set would
                                          * pass AZ_MAX_LIVE_BYTES */
    uint64_t t_first, t_last;            /* times of the first and last update */

    /* peaks */
    uint64_t peak_live_bytes;            /* max_t sum req over L(t) */
    uint64_t peak_live_t;                /* when it happened (first time reached) */
    uint64_t peak_live_count;            /* objects live at that peak */
    uint64_t peak_live_rnd_bytes;        /* sum rnd at that peak */
    uint64_t peak_window_live_bytes;     /* most requested bytes live at once of the objects
                                          * allocated while counting (a --phase/--from window's
                                          * own peak, what was allocated before left out);
                                          * = peak_live_bytes without a window */
    uint64_t peak_reserved_bytes;        /* max outstanding + cached */
    uint64_t peak_reserved_t;
    uint64_t peak_outstanding_bytes, peak_cached_bytes;
    double   reserved_over_live;         /* peak_reserved / peak_live; 0 when no live */
    double   internal_frag;              /* (rnd - req) / rnd at the live peak */
    double   internal_frag_avg;          /* time-weighted over time with a non-empty live set */

    /* exit */
    uint64_t leaked_bytes, leaked_count; /* live at az_finish, of the objects allocated
                                          * while counting (all of them without a window) */

    /* pool counters */
    uint64_t acquires, hits, misses, backing_allocs, backing_frees;
    double   hit_rate;                   /* hits / acquires; 0 when none */

    /* address reuse */
    double   fresh_address_ratio;        /* allocations at a never-seen address / allocations */
    double   same_address_reuse;         /* at the latest freed address of its size key / allocations */
    uint64_t fresh_addresses, same_address_hits;
    uint64_t reuse_samples;              /* allocations with a distance (re-used, tracked) */
    uint64_t distance_p50, distance_p90; /* exact below 4096, else upper bound of a 1/16-octave bucket */
    uint64_t distance_max;
    uint64_t distance_hist[AZ_HIST_BUCKETS];   /* log2 of distance */
    int      reuse_capped;               /* 1: more distinct addresses than reuse_cap */
    uint64_t reuse_tracked;              /* distinct addresses tracked */

    /* histograms (log2) */
    uint64_t size_hist[AZ_HIST_BUCKETS];       /* req bytes of allocations */
    uint64_t lifetime_hist[AZ_HIST_BUCKETS];   /* ns from alloc to free */
    uint64_t temporary;                  /* freed before any other allocation happened */

    /* KV */
    uint64_t peak_kv_blocks;             /* blocks held at their peak */
    uint64_t peak_kv_t;
    double   kv_utilization;             /* time-weighted tokens / capacity while capacity > 0 */
    double   kv_utilization_at_peak;     /* at the peak of blocks held */
    double   kv_waste_ratio;             /* 1 - kv_utilization (0 with no KV data) */
    int      has_kv;
    double   kv_utilization_per_step;    /* mean of tokens / capacity as each decode step
                                          * starts (steps with KV held): timing-free */
    uint64_t kv_step_samples;            /* decode steps that gave a sample */

    /* phases */
    const az_phase_t *phases;            /* n_phases, in order of first appearance; valid until az_destroy */
    size_t   n_phases;
    double   allocs_per_decode_step;     /* allocation calls per step, mean over steps after
                                          * the first steady_after (all steps when fewer) */
    double   heap_calls_per_decode_step; /* heap calls (frees, mmap too) per step, same steps */
    uint64_t decode_steps;
    int      has_decode_steps;           /* 0: no decode step: the two above do not apply */
} az_result_t;

/* Fill *r (after az_finish; before it, a snapshot without leaks). */
void az_result(const az_metrics_t *m, az_result_t *r);

/* Percentile q in [0,1] of the reuse distances seen (same rule as p50/p90). */
uint64_t az_reuse_percentile(const az_metrics_t *m, double q);

/* ---- allocation sites (per stack id) ---------------------------------------- */
typedef struct az_site {
    uint32_t stack;              /* the id given to az_alloc */
    uint64_t calls;              /* allocations */
    uint64_t bytes;              /* sum req */
    uint64_t live_bytes;         /* now (after az_finish: leaked, as leaked_bytes) */
    uint64_t live_count;
    uint64_t peak_bytes;         /* live from this site at the moment of peak_live_bytes */
    uint64_t temporary;
} az_site_t;
/* Every site seen (entries with no counted call, nothing live and no part
 * of the peak skipped), unordered. *n set.
 * The array is owned by m and valid until the next update. */
const az_site_t *az_sites(az_metrics_t *m, size_t *n);
/* After az_finish: the objects a stack leaked are suppressed (a known
 * one-time buffer, or a --suppress pattern: analyzer/suppress.h). They
 * leave r's leak figures (leaked_bytes, leaked_count: r is this
 * accumulator's result) and the site's live figures in az_sites; *bytes
 * and *count say how much went. 1 when something was suppressed, 0 when
 * the stack leaked nothing or was suppressed already. */
int az_site_suppress(az_metrics_t *m, az_result_t *r, uint32_t stack, uint64_t *bytes, uint64_t *count);

/* glibc's malloc rounding on 64-bit: usable bytes of a malloc(req) chunk
 * (24 minimum, 16-byte steps, page-rounded mmap chunks from 128 KiB). Used
 * as rnd for heap allocations. */
uint64_t az_glibc_usable(uint64_t req);

/* log2 bucket of a value, as in the histograms above. */
static inline unsigned az_log2_bucket(uint64_t v) { return v ? 64u - (unsigned)__builtin_clzll(v) : 0u; }

#endif
