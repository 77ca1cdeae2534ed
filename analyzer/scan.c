/* scan.c — one pass over a trace into the metrics library (see scan.h).
 *
 * Per event: a switch on the type, O(1) table work, and a timeline update
 * for the events that move a gauge. Tables here are bounded by live
 * mappings, pools and KV block ids; the accumulators bound the rest.
 */
#include "scan.h"
#include "suppress.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checked.h"
#include "fmt.h"
#include "hashmap.h"
#include "phase_frame.h"
#include "poolscope/error.h"

typedef struct priv {
    char *path;                  /* s->path: our copy of the name given */
    az_pf_t *pf;                 /* --phase-frame scopes, NULL without */
    uint64_t phase_open;         /* open scopes of opts.phase */
    int phase_point;             /* the step marker came as points: on from the first */
    int phase_scoped;            /* a scope of opts.phase was read (not only points) */
    int phase_seen;              /* a scope or point of opts.phase was read */
    int counting;
    int plain;                   /* no --phase, no --from/--to: every event is counted */
    az_scan_opts_t opts;
    az_tl_bucket_t last;         /* gauges after the latest timeline update */
    psc_map_t stacks;            /* starts of the thread-stack mappings live now (a set) */
    /* the tick being read, for peak_tick_lo/hi (scan.h): with cycle
     * counts (minor 8), the events of one tick and one count */
    uint64_t tk_ts, tk_cyc, tk_live0, tk_n;   /* its time and count, the heap's live bytes at its start, ticks read */
    struct tk_climb { uint64_t tick; int64_t cum, max; } *tk;   /* by stream id */
    uint32_t tk_cap, *tk_touched, n_touched;
    int tk_any, tk_off;          /* a tick begun; 1: out of memory, the range is not known */
} priv_t;

/* az_scan_set_progress: the callback of scans whose options name none */
static struct {
    void (*fn)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes);
    void *ctx;
} default_progress;

void az_scan_set_progress(void (*fn)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes),
                          void *ctx)
{
    default_progress.fn = fn;
    default_progress.ctx = ctx;
}

/* ---- timeline ------------------------------------------------------------------ */

static void tl_merge(az_tl_bucket_t *a, const az_tl_bucket_t *b)
{
#define MX(f) if (b->f > a->f) a->f = b->f
    MX(heap); MX(mmap_anon); MX(mmap_file); MX(rss); MX(pool_out); MX(pool_reserved); MX(mmap_reserved);
    if (b->kv_blocks >= a->kv_blocks && b->set) {
        a->kv_blocks = b->kv_blocks; a->kv_tokens = b->kv_tokens; a->kv_capacity = b->kv_capacity;
    }
#undef MX
    a->set |= b->set;
}

static void tl_update(az_scan_t *s, uint64_t t)
{
    if (!s->tl_n) return;
    if (t < s->tl_t0) t = s->tl_t0;
    size_t i;
    while ((i = (size_t)((t - s->tl_t0) >> s->tl_shift)) >= s->tl_n) {
        /* halve: merge pairs, double the width */
        for (size_t k = 0; k < s->tl_n / 2; k++) {
            az_tl_bucket_t b = s->tl[2 * k];
            tl_merge(&b, &s->tl[2 * k + 1]);
            s->tl[k] = b;
        }
        memset(&s->tl[s->tl_n / 2], 0, (s->tl_n - s->tl_n / 2) * sizeof *s->tl);
        s->tl_shift++;
        s->tl_used = (s->tl_used + 1) / 2;
    }
    const az_state_t *hs = az_state(s->heap);
    az_tl_bucket_t now = {
        .heap = hs->live_bytes, .mmap_file = s->mmap_file, .mmap_reserved = s->mmap_reserved,
        .mmap_anon = s->mmap_anon - (s->mmap_reserved < s->mmap_anon ? s->mmap_reserved : s->mmap_anon),
        .rss = s->rss, .pool_out = s->pool_out, .pool_reserved = az_reserved_now(s->pool),
        .kv_blocks = hs->kv_blocks, .kv_tokens = hs->kv_tokens,
        .kv_capacity = hs->kv_capacity, .set = 1 };
    priv_t *p = s->priv;
    if (i >= s->tl_used) {
        /* buckets with no event since the last update hold the state of then */
        for (size_t k = s->tl_used; k <= i; k++)
            if (p->last.set) tl_merge(&s->tl[k], &p->last);
        s->tl_used = i + 1;
    }
    tl_merge(&s->tl[i], &now);
    p->last = now;
}

/* After a heap event only the heap gauge moved: within the bucket of the
 * previous update, merging the other gauges again changes nothing, so only
 * the heap maximum is kept up (the common case: buckets span many events). */
static inline void tl_heap(az_scan_t *s, uint64_t t)
{
    priv_t *p = s->priv;
    if (t >= s->tl_t0 && s->tl_used && p->last.set &&
        (t - s->tl_t0) >> s->tl_shift == s->tl_used - 1) {
        uint64_t h = az_state(s->heap)->live_bytes;
        az_tl_bucket_t *b = &s->tl[s->tl_used - 1];
        p->last.heap = h;
        if (h > b->heap) b->heap = h;
        return;
    }
    tl_update(s, t);
}

/* ---- events ------------------------------------------------------------------ */

/* The window (--phase, --from/--to) opens or closes at time t. On opening,
 * what is held then counts toward the window's peaks (the model takes care
 * of mappings, pools and RSS; RSS is only known at samples). */
static void set_counting(az_scan_t *s, int on, uint64_t t)
{
    priv_t *p = s->priv;
    if (on == p->counting) return;
    p->counting = on;
    az_set_counting_at(s->heap, t, on);
    az_set_counting_at(s->pool, t, on);
    az_ks_counting(s->kinds, on);
    pm_set_counting(s->model, on);
}

/* The model's gauges into the scan's fields. */
static void copy_maps(az_scan_t *s)
{
    const pm_maps_t *mt = pm_maps(s->model);
    s->mmap_anon = mt->anon;
    s->mmap_file = mt->file;
    s->mmap_reserved = mt->reserved;
    s->peak_mmap_anon = mt->peak_anon;
    s->peak_mmap_file = mt->peak_file;
    s->peak_mmap_total = mt->peak_total;
    s->peak_mmap_reserved = mt->peak_reserved;
    s->peak_mmap_committed = mt->peak_committed;
    s->peak_arena = mt->peak_arena;
}

static void copy_pools(az_scan_t *s)
{
    s->pools = pm_pools(s->model, &s->n_pools);
    pm_pool_totals(s->model, &s->pool_out, &s->pool_cached);
}

static void kv_publish(az_scan_t *s, uint64_t t)
{
    uint64_t blocks, tokens, capacity;
    pm_kv_totals(s->model, &blocks, &tokens, &capacity);
    /* az_kv takes a block size: with pools of different sizes pass the mean */
    uint64_t bs = blocks ? capacity / blocks : 0;
    if (!blocks)
        for (size_t i = 0; i < s->n_pools && !bs; i++) if (s->pools[i].kv) bs = s->pools[i].block_size;
    az_kv(s->heap, t, tokens, blocks, bs);
}

/* 1 when ev maps or unmaps a thread's stack (scan.h): a mapping, not a
 * call. Its MMAPs carry the flag; its MUNMAPs are known by their start. */
static int thread_stack(az_scan_t *s, const pst_event_t *ev)
{
    priv_t *p = s->priv;
    if (ev->type == PST_EV_MMAP && (ev->f[3] & AZ_MMAP_THREAD_STACK)) {
        if (!ev->f[0] || ev->f[0] == UINT64_MAX) return 1;
        int is_new = 0;
        (void)psc_map_put(&p->stacks, ev->f[0], &is_new);   /* out of memory: its munmap is counted */
        if (is_new && ev->f[2]) s->thread_stacks++;
        return 1;
    }
    return ev->type == PST_EV_MUNMAP && psc_map_count(&p->stacks) && psc_map_del(&p->stacks, ev->f[0]) == 0;
}

/* End the tick being read: its bounds into peak_tick_lo/hi (scan.h). */
static void tick_end(az_scan_t *s, uint64_t live)
{
    priv_t *p = s->priv;
    if (!p->tk_any) return;
    uint64_t hi = p->tk_live0;
    for (uint32_t i = 0; i < p->n_touched; i++) hi += (uint64_t)p->tk[p->tk_touched[i]].max;
    if (hi > s->peak_tick_hi) s->peak_tick_hi = hi;
    if (live > s->peak_tick_lo) s->peak_tick_lo = live;
    if (p->tk_live0 > s->peak_tick_lo) s->peak_tick_lo = p->tk_live0;
    p->n_touched = 0;
    p->tk_any = 0;
}

/* A heap event of stream id moved the live bytes from before to after. */
static void tick_step(az_scan_t *s, const pst_event_t *ev, uint64_t before, uint64_t after)
{
    priv_t *p = s->priv;
    if (p->tk_off) return;
    /* a late event stays in the tick */
    if (p->tk_any && (ev->ts > p->tk_ts || (ev->ts == p->tk_ts && ev->cyc > p->tk_cyc))) tick_end(s, before);
    if (!p->tk_any) { p->tk_any = 1; p->tk_ts = ev->ts; p->tk_cyc = ev->cyc; p->tk_live0 = before; p->tk_n++; }
    uint32_t id = ev->stream;
    if (id >= p->tk_cap) {
        uint32_t cap = p->tk_cap ? p->tk_cap : 64;
        while (cap <= id && cap < (1u << 24)) cap *= 2;
        void *a = cap > id ? realloc(p->tk, cap * sizeof *p->tk) : NULL;
        void *b = a ? realloc(p->tk_touched, cap * sizeof *p->tk_touched) : NULL;
        if (a) p->tk = a;
        if (!b) { p->tk_off = 1; return; }
        p->tk_touched = b;
        memset(p->tk + p->tk_cap, 0, (cap - p->tk_cap) * sizeof *p->tk);
        p->tk_cap = cap;
    }
    struct tk_climb *c = &p->tk[id];
    if (c->tick != p->tk_n) { c->tick = p->tk_n; c->cum = c->max = 0; p->tk_touched[p->n_touched++] = id; }
    c->cum += (int64_t)(after - before);
    if (c->cum > c->max) c->max = c->cum;
}

static void on_event(az_scan_t *s, const pst_event_t *ev)
{
    priv_t *p = s->priv;
    const uint64_t *f = ev->f;
    uint64_t t = ev->ts;

    /* a --phase-frame scope is read as a marker but is not one of the trace's events */
    const int synthetic = (ev->type == PST_EV_MARK_BEGIN || ev->type == PST_EV_MARK_END) &&
                          f[0] >= AZ_PF_STRING_BASE;
    if (!synthetic) {
        if (ev->type < PST_EV_MAX) s->by_type[ev->type]++;
        if (s->events == 0) s->t_first = t;
        s->events++;
    }
    if (t > s->t_last) s->t_last = t;

    /* the window and the phase decide whether this event is counted;
     * without either (p->plain) every event is, and counting never moves */
    int on = 1;
    if (!p->plain) {
        if (p->opts.window) on = t >= p->opts.from && t <= p->opts.to;
        if (p->opts.phase && (ev->type == PST_EV_MARK_BEGIN || ev->type == PST_EV_MARK_POINT) &&
            ev->str && !strcmp(ev->str, p->opts.phase)) {
            /* a point has no extent: only the step marker's points bound spans
             * (a step runs to the next one) */
            if (ev->type == PST_EV_MARK_BEGIN) { p->phase_open++; p->phase_scoped = 1; }
            else if (!strcmp(p->opts.phase, "decode")) { p->phase_point = 1; p->phase_scoped = 1; }
            p->phase_seen = 1;
        }
        if (p->opts.phase) on = on && (p->phase_open > 0 || p->phase_point);
        set_counting(s, on, t);
    }
    if (on && !synthetic) s->events_counted++;

    pm_step_t st;
    pm_event(s->model, ev, &st);     /* PSC_ENOMEM: the model went on with what it could */
    int gauge = 0;               /* 1: a gauge moved; 2: only the heap gauge */
    s->step_is_call = st.call >= 0 && (st.call < PM_F_MMAP || !thread_stack(s, ev));
    if (s->step_is_call) {
        /* one hooked call: the JSON `calls` count (when counted) and the phases */
        if (on) s->calls[st.call]++;
        az_heap_call(s->heap, st.call_bytes, st.call != PM_F_FREE && st.call < PM_F_MMAP);
    }
    const uint64_t heap_before = az_state(s->heap)->live_bytes;
    for (size_t i = 0; i < st.n_ops; i++) {
        const pm_op_t *o = &st.ops[i];
        switch ((pm_kind_t)o->kind) {
        case PM_HEAP_ALLOC:
            az_alloc(s->heap, t, o->key, o->bytes, az_glibc_usable(o->bytes), o->bytes, o->stack);
            break;
        case PM_HEAP_FREE: az_free(s->heap, t, o->key); break;
        case PM_HEAP_FAILED: s->failed_allocs++; break;
        case PM_POOL_ACQUIRE:
            az_acquire(s->pool, (o->flags & PM_F_HIT) != 0);
            az_alloc(s->pool, t, o->key, o->req, o->bytes, o->bytes, o->stack);
            break;
        case PM_POOL_RECLAIM: az_free(s->pool, t, o->key); break;
        case PM_POOL_BACKING:
            if (o->flags & PM_F_FREED) az_backing(s->pool, 0, 1); else az_backing(s->pool, 1, 0);
            break;
        case PM_MARK: {
            int kind = (o->flags & PM_F_BEGIN) ? AZ_MARK_BEGIN : (o->flags & PM_F_END) ? AZ_MARK_END : AZ_MARK_POINT;
            az_mark(s->heap, t, kind, ev->str ? ev->str : "?", o->key);
            if (s->n_markers < p->opts.keep_markers)
                s->markers[s->n_markers++] = (az_marker_rec_t){ t, o->key, (uint32_t)f[0], (uint8_t)kind };
            else if (p->opts.keep_markers)
                s->markers_dropped++;
            if (p->opts.phase && kind == AZ_MARK_END && ev->str && !strcmp(ev->str, p->opts.phase) &&
                p->phase_open > 0)
                p->phase_open--;
            break;
        }
        case PM_KV_BLOCK_ALLOC: case PM_KV_BLOCK_FREE: case PM_MAP_ADD: case PM_MAP_DEL:
            az_ks_op(s->kinds, o);   /* their sites (ksites.h); out of memory: one not attributed */
            break;
        default: break;          /* tensors and KV requests: replay's */
        }
    }
    if (p->plain && !synthetic && (st.moved & PM_MOVED_HEAP)) tick_step(s, ev, heap_before, az_state(s->heap)->live_bytes);
    if (st.moved & PM_MOVED_HEAP) gauge = 2;
    if (st.moved & PM_MOVED_MAP) { copy_maps(s); gauge = 1; }
    if (st.moved & PM_MOVED_POOL) {
        copy_pools(s);
        az_reserved(s->pool, t, s->pool_out, s->pool_cached);
        gauge = 1;
    }
    if (st.moved & PM_MOVED_KV) { kv_publish(s, t); gauge = 1; }
    if (st.moved & PM_MOVED_RSS) {
        pm_rss(s->model, &s->rss, &s->peak_rss, &s->peak_rss_t, &s->rss_samples);
        gauge = 1;
    }
    if (ev->type > PST_EV_FREE) switch (ev->type) {   /* the malloc family is none of these */
    case PST_EV_POOL_CREATE: case PST_EV_KVB_CREATE: copy_pools(s); break;
    case PST_EV_THREAD_START: s->threads++; break;
    case PST_EV_THREAD_NAME:   /* the interposer's stream for exiting threads is not a thread */
        if (ev->str && !strcmp(ev->str, PST_EXIT_STREAM_NAME) && s->threads) s->threads--;
        break;
    case PST_EV_FORK: s->forks++; break;
    case PST_EV_EXEC: s->execs++; break;
    case PST_EV_LOST: s->lost += f[0]; break;
    default: break;
    }
    /* the timeline covers --from/--to only (a --phase is not a time span:
     * the timeline is whole-run then, and the report says so) */
    if (!p->plain && p->opts.window && (t < p->opts.from || t > p->opts.to)) gauge = 0;
    if (gauge == 2) tl_heap(s, t);
    else if (gauge) tl_update(s, t);
    if (p->opts.hook && !synthetic) {
        s->step = &st;           /* hooks read the operations, never interpret again */
        p->opts.hook(p->opts.hook_ctx, ev, s);
        s->step = NULL;
    }
}

/* The trace is the file `path`, or the len bytes at mem when mem is set. */
static int scan_any(const char *path, const void *mem, size_t mem_len, const az_scan_opts_t *opts,
                    az_scan_t **out, char *msg, size_t msglen)
{
    int err = 0;
    *out = NULL;
    az_scan_t *s = calloc(1, sizeof *s);
    priv_t *p = calloc(1, sizeof *p);
    if (!s || !p) { free(s); free(p); snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM; }
    s->priv = p;
    /* a copy: callers pass a buffer of their own (the test suites' paths
     * on their stack), and the scan outlives the call */
    if (path && !(s->path = p->path = strdup(path))) {
        free(s); free(p); snprintf(msg, msglen, "out of memory"); return PSC_ENOMEM;
    }
    if (opts) p->opts = *opts;
    if (!p->opts.progress) { p->opts.progress = default_progress.fn; p->opts.progress_ctx = default_progress.ctx; }
    p->counting = 1;
    p->plain = !p->opts.window && !p->opts.phase;
    s->tl_n = p->opts.timeline_buckets ? p->opts.timeline_buckets : 64;
    s->tl_n = (s->tl_n + 1) & ~(size_t)1;
    s->tl = calloc(s->tl_n, sizeof *s->tl);
    if (p->opts.keep_markers) s->markers = malloc(p->opts.keep_markers * sizeof *s->markers);
    az_cfg_t cfg = { .no_reuse = p->opts.no_reuse };
    s->heap = az_create(&cfg, &err);
    s->pool = az_create(&cfg, &err);
    s->model = pm_create(&err);
    s->kinds = az_ks_create();
    int map_err = psc_map_init(&p->stacks, 0, 8, 0, NULL);
    if (map_err || !s->tl || !s->heap || !s->pool || !s->model || !s->kinds ||
        (p->opts.keep_markers && !s->markers)) {
        az_scan_free(s);
        snprintf(msg, msglen, "out of memory");
        return PSC_ENOMEM;
    }
    s->r = mem ? pst_open_mem(mem, mem_len, &err) : pst_open(path, &err);
    if (!s->r) {
        if (err == PSC_EIO) snprintf(msg, msglen, "%s", strerror(errno));
        else if (err == PSC_ECORRUPT) snprintf(msg, msglen, "not a poolscope trace (bad header)");
        else if (err == PSC_ETRUNC) snprintf(msg, msglen, "cut short inside the file header");
        else if (err == PSC_EVERSION) snprintf(msg, msglen, "trace format version not supported by this build");
        else snprintf(msg, msglen, "%s", psc_strerror(err));
        az_scan_free(s);
        return err;
    }
    s->hdr = pst_header(s->r);
    if (opts) { s->phase = opts->phase; s->window = opts->window; s->from = opts->from; s->to = opts->to; }
    /* first bucket width: 1 us; doubled as needed */
    s->tl_shift = 10;
    pst_event_t ev;
    int rc;
    int started = 0;
    uint64_t file_bytes = 0, n_read = 0;
    struct stat fst;
    if (mem) file_bytes = mem_len;
    else if (p->opts.progress && stat(path, &fst) == 0) file_bytes = (uint64_t)fst.st_size;
    if (p->opts.n_phase_frames &&
        !(p->pf = az_pf_create(s->r, p->opts.phase_frames, p->opts.n_phase_frames, msg, msglen))) {
        az_scan_free(s);
        return PSC_EINVAL;
    }
    pst_event_t syn[2 * AZ_PF_MAX];
    while ((rc = pst_next(s->r, &ev)) > 0) {
        if (!started && (!p->opts.window || ev.ts >= p->opts.from)) { s->tl_t0 = ev.ts; started = 1; }
        if (p->pf && az_pf_wants(&ev))
            for (size_t i = 0, n = az_pf_before(p->pf, &ev, syn); i < n; i++) on_event(s, &syn[i]);
        on_event(s, &ev);
        /* often enough for a line that moves (the callback limits its
         * redraws), and once at the end: a complete trace's last call says
         * END's count, so the line ends at 100% */
        if (p->opts.progress && (++n_read & 0xffff) == 0)
            p->opts.progress(p->opts.progress_ctx, n_read, pst_status(s->r)->bytes, file_bytes);
    }
    if (p->opts.progress && rc >= 0)
        p->opts.progress(p->opts.progress_ctx, n_read, pst_status(s->r)->bytes, file_bytes);
    for (size_t n; p->pf && rc >= 0 && (n = az_pf_finish(p->pf, s->t_last, syn)) > 0;)
        for (size_t i = 0; i < n; i++) on_event(s, &syn[i]);
    tick_end(s, az_state(s->heap)->live_bytes);
    if (p->tk_off || !p->plain) s->peak_tick_lo = s->peak_tick_hi = 0;
    s->status = pst_status(s->r);
    if (rc < 0) {
        snprintf(msg, msglen, "read failed: %s", psc_strerror(rc));
        az_scan_free(s);
        return rc;
    }
    if (s->status->lost > s->lost) s->lost = s->status->lost;
    s->kv_orphans = pm_kv_orphans(s->model);
    /* The tracer's own thread (it samples RSS) is not one of the program's;
     * its mappings are reported apart from the program's memory. */
    if (s->status->tracer_stream && s->threads) s->threads--;
    s->tracer_bytes = s->status->tracer_bytes_peak;
    if (s->status->sync_fields)
        s->resolution_ns = s->status->tick_gap_max_ns > PST_TICK_NS ? s->status->tick_gap_max_ns : PST_TICK_NS;
    /* the window ends the count at `to` even if events go on */
    az_finish(s->heap, s->t_last);
    az_finish(s->pool, s->t_last);
    az_result(s->heap, &s->heap_r);
    az_result(s->pool, &s->pool_r);
    for (size_t i = 0; i < az_pf_count(p->pf); i++) {
        const char *func;
        if (az_pf_seen(p->pf, i, &func)) continue;   /* a typo, or no stacks: say so */
        snprintf(msg, msglen, "--phase-frame: no recorded stack holds '%s'%s", func,
                 s->hdr && s->hdr->stacks == PST_STACKS_NONE ? " (the trace was recorded with --stacks none)" : "");
        az_scan_free(s);
        return PSC_ENOENT;
    }
    if (p->opts.phase && p->phase_seen && !p->phase_scoped) {
        snprintf(msg, msglen, "--phase %s: '%s' comes only as point markers, which have no extent; "
                 "--phase needs a marker with scopes (begin/end)", p->opts.phase, p->opts.phase);
        az_scan_free(s);
        return PSC_EINVAL;
    }
    if (p->opts.phase && !p->phase_seen) {         /* a typo would count nothing, silently */
        size_t k = (size_t)snprintf(msg, msglen, "no phase '%s' in this trace; its phases: ", p->opts.phase);
        if (!s->heap_r.n_phases && k < msglen) snprintf(msg + k, msglen - k, "none (no markers)");
        for (size_t i = 0; i < s->heap_r.n_phases && k < msglen; i++)
            k += (size_t)snprintf(msg + k, msglen - k, "%s%s", i ? ", " : "", s->heap_r.phases[i].name);
        az_scan_free(s);
        return PSC_ENOENT;
    }
    /* leaks a suppression names leave the leak figures (suppress.h) */
    if (az_supp_apply(s)) { snprintf(msg, msglen, "out of memory"); az_scan_free(s); return PSC_ENOMEM; }
    *out = s;
    return 0;
}

int az_scan_file(const char *path, const az_scan_opts_t *opts, az_scan_t **out,
                 char *msg, size_t msglen)
{
    int rc = scan_any(path, NULL, 0, opts, out, msg, msglen);
    /* no END: cut short, or its program is still writing it (reader.h) */
    az_scan_t *s = rc == 0 ? *out : NULL;
    if (s && s->status && !s->status->end_seen && s->hdr && pst_being_written(path, s->hdr->pid))
        s->writing_pid = s->hdr->pid;
    return rc;
}

int az_scan_mem(const void *buf, size_t len, const char *name, const az_scan_opts_t *opts,
                az_scan_t **out, char *msg, size_t msglen)
{
    return scan_any(name, buf, len, opts, out, msg, msglen);
}

void az_scan_free(az_scan_t *s)
{
    if (!s) return;
    az_supp_free(s->supp);
    priv_t *p = s->priv;
    if (p) {
        az_pf_destroy(p->pf);
        free(p->path);
        psc_map_free(&p->stacks);
        free(p->tk);
        free(p->tk_touched);
        free(p);
    }
    pst_close(s->r);
    az_destroy(s->heap);
    az_destroy(s->pool);
    az_ks_destroy(s->kinds);
    free(s->tl);
    free(s->markers);
    pm_destroy(s->model);
    free(s);
}

const char *az_scan_warning(const az_scan_t *s, char *buf, size_t len)
{
    const pst_status_t *st = s->status;
    if (!st) return NULL;
    if (st->corrupt) {
        snprintf(buf, len, "corrupt chunk at byte %llu (%s); reporting the %llu events before it",
                 (unsigned long long)st->corrupt_offset, st->corrupt_reason ? st->corrupt_reason : "bad data",
                 (unsigned long long)st->events);
        return buf;
    }
    if (st->truncated && s->writing_pid) {
        char t[32];
        snprintf(buf, len, "trace still being written (pid %llu); read up to %s, its last complete chunk (%llu events)",
                 (unsigned long long)s->writing_pid, psc_fmt_ns(s->t_last, t, sizeof t), (unsigned long long)st->events);
        return buf;
    }
    if (st->truncated) {
        snprintf(buf, len, "trace is cut short (%s%llu unread bytes); reporting the %llu events read",
                 st->end_seen ? "" : "no end record, ",
                 (unsigned long long)st->unread_bytes, (unsigned long long)st->events);
        return buf;
    }
    return NULL;
}

void az_scan_program_json(const az_scan_t *s, az_json_t *j)
{
    const pst_header_t *h = s->hdr;
    az_json_str(j, "program", h && h->exe && h->exe[0] ? h->exe : NULL);
    az_json_begin(j, "argv", '[');
    for (uint32_t i = 0; h && h->argv && i < h->argc; i++) az_json_str(j, NULL, h->argv[i]);
    az_json_end(j);
}

int az_scan_kv_used(const az_scan_t *s, uint64_t pool, uint64_t block, uint32_t *n_used)
{
    return s && s->model ? pm_kv_used(s->model, pool, block, n_used) : 0;
}

const char *az_scan_string(const az_scan_t *s, uint32_t id)
{
    const char *n = az_pf_string(((const priv_t *)s->priv)->pf, id);
    if (!n && s->r) n = pst_string(s->r, id);
    return n ? n : "?";
}
