/* scan.h — one pass over a trace into the metrics library (prefix az_scan_).
 *
 * The driver behind report, plot, export, diff and gate: it reads a .pst
 * with the streaming reader, lets the model (model/model.h) say what each
 * event means, and feeds the model's operations into the metrics:
 *   heap  the model's heap allocations and frees -> az_alloc/az_free of
 *         the `heap` accumulator (rnd = glibc's usable size), every hooked
 *         call -> az_calls, markers -> az_mark, the model's KV totals ->
 *         az_kv (tokens = sum of n_used over held blocks);
 *   pool  pool acquires and reclaims -> az_alloc/az_free of the `pool`
 *         accumulator (address = pool id, buffer id; rnd = granted bytes;
 *         size key = granted bytes), outstanding/cached bytes ->
 *         az_reserved, hits, backing allocations;
 *   mmap  the model's mapped bytes (anonymous, file-backed, reserved) and
 *         RSS samples, copied into the fields below. Thread stacks (MMAP
 *         events flagged AZ_MMAP_THREAD_STACK, their MUNMAPs) are mappings
 *         like any: in the mmap figures (stack committed, guard reserved),
 *         in no call count (`calls`, a phase's calls): no call made them.
 *   sites of KV blocks and mappings: the model's block and mapping
 *         operations -> `kinds` (ksites.h); the heap's and the pools' sites
 *         are their accumulators' (az_sites).
 * and keeps a timeline of fixed-width buckets (the width doubles as the
 * trace grows, so memory is bounded) for plots and the text report.
 *
 * --phase NAME / --from T --to T become az_set_counting() on both
 * accumulators: the live set stays exact, only the window is counted. A
 * --phase that never occurs is an error (PSC_ENOENT) naming the phases
 * that do. In a window: peaks (heap, mmap, RSS, pools, KV) are of what is
 * held while the window is open; leaks are the objects allocated in the
 * window and never freed; phase times are the time inside the window. The
 * timeline covers --from/--to only; with --phase it is whole-run (a phase
 * is not one span of time).
 */
#ifndef POOLSCOPE_SCAN_H
#define POOLSCOPE_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "ksites.h"
#include "metrics.h"
#include "model.h"
#include "poolscope/reader.h"

/* The hooked functions, in the order of the JSON `calls` object: the
 * model's (model/model.h). */
enum {
    AZ_F_MALLOC = PM_F_MALLOC, AZ_F_CALLOC = PM_F_CALLOC, AZ_F_REALLOC = PM_F_REALLOC,
    AZ_F_REALLOCARRAY = PM_F_REALLOCARRAY, AZ_F_FREE = PM_F_FREE,
    AZ_F_POSIX_MEMALIGN = PM_F_POSIX_MEMALIGN, AZ_F_ALIGNED_ALLOC = PM_F_ALIGNED_ALLOC,
    AZ_F_MEMALIGN = PM_F_MEMALIGN, AZ_F_VALLOC = PM_F_VALLOC, AZ_F_PVALLOC = PM_F_PVALLOC,
    AZ_F_MMAP = PM_F_MMAP, AZ_F_MUNMAP = PM_F_MUNMAP, AZ_F_MREMAP = PM_F_MREMAP,
    AZ_F_COUNT = PM_F_COUNT
};
#define az_func_names pm_func_names

#define AZ_MMAP_THREAD_STACK PST_MMAP_THREAD_STACK   /* format.h */

typedef struct az_scan az_scan_t;

typedef struct az_scan_opts {
    const char *phase;           /* count only while a scope of this marker is open */
    uint64_t from, to;           /* count only events with from <= ts <= to (ns) when window */
    int      window;
    size_t   timeline_buckets;   /* 0: 64 */
    size_t   keep_markers;       /* keep up to this many marker events (plots, exports) */
    /* --phase-frame FUNC[=NAME]: scopes from call stacks (phase_frame.h),
     * read as markers by every figure. A FUNC no stack holds is an error
     * (PSC_ENOENT) saying so. */
    const char *const *phase_frames;
    size_t   n_phase_frames;
    /* Called every 65,536 events and once at the end with the events read
     * (pst_next's count, which is END's count once the whole trace is
     * read), the bytes consumed and the file's size (NULL = the default
     * set by az_scan_set_progress, if any): progress for people. */
    void   (*progress)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes);
    void    *progress_ctx;
    /* Called for every event after the accumulators took it (NULL = none). */
    void   (*hook)(void *ctx, const pst_event_t *ev, const az_scan_t *s);
    void    *hook_ctx;
    /* 1: the caller reads no reuse figure (reuse distance, fresh and
     * same-address counts): the accumulators skip that bookkeeping, the
     * costliest per allocation and a table of every address ever seen.
     * Every other figure is the same either way. */
    int      no_reuse;
} az_scan_opts_t;

typedef struct az_tl_bucket {    /* maxima over the bucket's time span */
    /* mmap_anon: anonymous memory committed (mapped and accessible), the
     * reservations (PROT_NONE) apart in mmap_reserved */
    /* pool_reserved: az_reserved_now(pool) at each update, its maximum over
     * the bucket (not pool_out's maximum plus the cached bytes' maximum) */
    uint64_t heap, mmap_anon, mmap_file, rss, pool_out, pool_reserved, kv_blocks, kv_tokens, kv_capacity;
    uint64_t mmap_reserved;
    int      set;
} az_tl_bucket_t;

typedef struct az_marker_rec {
    uint64_t t, instance;
    uint32_t name;               /* string id (pst_string) */
    uint8_t  kind;               /* AZ_MARK_* */
} az_marker_rec_t;

/* A pool as the model describes it (model.h: pm_pool_t). */
typedef pm_pool_t az_pool_info_t;

struct az_scan {
    const char *path;
    pst_reader_t *r;             /* kept open: strings, stacks and modules stay readable */
    struct az_supp_res *supp;    /* leaks suppressed (suppress.h), NULL: none */
    const pst_header_t *hdr;
    const pst_status_t *status;
    az_metrics_t *heap, *pool;
    az_ks_t *kinds;              /* sites of KV blocks and mappings (ksites.h) */
    az_result_t heap_r, pool_r;  /* after the scan */

    uint64_t events, events_counted;
    uint64_t by_type[PST_EV_MAX];
    uint64_t calls[AZ_F_COUNT];
    uint64_t t_first, t_last;
    uint64_t threads, forks, execs, lost;   /* threads: the program's (the tracer's own is not counted) */
    uint64_t tracer_bytes;       /* most memory the tracer itself had mapped (format 1.2), 0 unknown */
    uint64_t resolution_ns;      /* events' times are this close to the truth (format 1.2), 0 unknown */
    uint64_t failed_allocs;

    /* now and peaks, as the model has them (copied after each event that moves them) */
    uint64_t mmap_anon, mmap_file, peak_mmap_anon, peak_mmap_file, peak_mmap_total;
    uint64_t mmap_reserved, peak_mmap_reserved, peak_mmap_committed;
    uint64_t peak_arena;         /* pymalloc's arenas at most: its reserve (model.h, pm_maps_t.arena) */
    uint64_t thread_stacks;      /* threads' stacks mapped (AZ_MMAP_THREAD_STACK, the guard apart) */
    int step_is_call;            /* the event being scanned is one of the program's hooked calls
                                    (a thread stack's mapping is not): for the hooks */
    uint64_t rss, peak_rss, peak_rss_t, rss_samples;
    /* What the heap's peak could have been, whatever the order of the
     * threads' events within one tick (their times tie; FORMAT.md, "Ties"),
     * or, in a trace with cycle counts, within one tick and one count
     * (FORMAT.md, "Cycles"; the range then closes on the peak):
     * peak_tick_lo, the most live between two ticks (where every event
     * before is known to come first), and peak_tick_hi, the most any order
     * the ticks allow holds (the live bytes at a tick's start plus each
     * stream's highest climb over its events of that tick). The true peak
     * lies between (to the stamps' resolution); peak_live_bytes is the
     * merge's estimate. Whole run only: 0 with --phase or --from/--to. */
    uint64_t peak_tick_lo, peak_tick_hi;
    uint64_t pool_out, pool_cached;
    uint64_t kv_orphans;         /* KV events of pools never created (ignored) */

    const az_pool_info_t *pools; /* the model's; valid until az_scan_free */
    size_t n_pools;
    pm_model_t *model;           /* the one interpreter of the events (model/model.h) */
    const pm_step_t *step;       /* during a hook call: what the model made of that event */

    /* timeline: n buckets of 2^shift ns from t0 */
    az_tl_bucket_t *tl;
    size_t tl_n, tl_used;
    unsigned tl_shift;
    uint64_t tl_t0;

    az_marker_rec_t *markers;
    size_t n_markers, markers_dropped;

    /* the window counted (opts.phase, opts.window/from/to), for labels */
    const char *phase;
    int window;
    uint64_t from, to;

    uint64_t writing_pid;        /* no END and its writer has the file open (pst_being_written):
                                    read up to the last complete chunk; 0 otherwise */

    void *priv;                  /* scan.c's own tables */
};

/* Scan `path`. Returns 0 and *out, or a negative PS_E* code with a message
 * for the user in msg ("not a poolscope trace", "cut short: ..."). A trace
 * cut short or with a corrupt chunk is scanned up to the damage and
 * returns 0; s->status says what happened (az_scan_warning gives the line). */
int az_scan_file(const char *path, const az_scan_opts_t *opts, az_scan_t **out,
                 char *msg, size_t msglen);
/* The same over a trace in memory (kept alive by the caller until
 * az_scan_free); name is what s->path and messages call it. */
int az_scan_mem(const void *buf, size_t len, const char *name, const az_scan_opts_t *opts,
                az_scan_t **out, char *msg, size_t msglen);
void az_scan_free(az_scan_t *s);                    /* accepts NULL */

/* The progress callback of every scan whose options name none (NULL: no
 * default). Process-wide, like the symbolizer's warning hook: it is how
 * the CLI shows progress for outputs whose own options carry no callback
 * (export, plot), without one more field in each of them. */
void az_scan_set_progress(void (*fn)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes),
                          void *ctx);

/* A one-line warning about a damaged trace, or NULL when it is complete. */
const char *az_scan_warning(const az_scan_t *s, char *buf, size_t len);
/* "program" (the traced executable, null when unknown) and "argv" (its
 * arguments as recorded) as members of the open JSON object: what gate
 * compares to refuse a baseline of another program. */
void az_scan_program_json(const az_scan_t *s, az_json_t *j);
/* The tokens block `block` of KV pool `pool` holds now, as the model has
 * it (pm_kv_used): 1 with *n_used set while the block is held, 0
 * otherwise. For hooks (sqlite's `blocks` rows), which run after the scan
 * took the event. */
int az_scan_kv_used(const az_scan_t *s, uint64_t pool, uint64_t block, uint32_t *n_used);
/* Name of a marker string id, "?" when undefined. */
const char *az_scan_string(const az_scan_t *s, uint32_t id);

#endif
