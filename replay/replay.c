/* replay.c — the driver of `poolscope replay`: one streaming pass over a
 * trace, every selected policy fed the same requests in batches.
 *
 * 1. What must be known before the first request (whether the trace has
 *    tensor events, the pool cap its POOL_CREATE records, the largest
 *    prompt + max tokens for kv-contiguous) is gathered by the pass itself:
 *    it starts on the likely answers and restarts from the beginning when
 *    one turns out otherwise (run() says when). There is no pre-scan: it
 *    read the whole trace a second time for the default policy set.
 * 2. The pass: events -> requests (stream.c) into a batch; each full batch
 *    goes to each policy in turn, timed per policy (two clock reads per
 *    batch and policy, not per event). Memory: one batch, the stream's live
 *    tables and the policies' live state.
 * 3. A damaged trace (cut short, corrupt chunk) is refused after the pass:
 *    numbers from part of a run would be read as the run's.
 *
 * A policy the trace cannot drive (KV policies without KV block events,
 * kv-contiguous without a context, malloc without its helper, a malloc
 * variant without its library) is found out when it starts, else after
 * the pass. One asked for only through a set ("all",
 * "kv", "allocators", the default) is skipped and listed with its reason;
 * one asked for by name fails the run: the user wanted that figure, and a
 * row of zeros or a silent omission would mislead.
 *
 * The arena's reset marker. The stream turns the end of each outermost
 * scope of it into RQ_RESET; the arena also needs to know when no scope is
 * open (what is made then is long-lived, pol_arena.c), so this file feeds
 * the marker's own events to a model of its own (model/model.h counts the
 * nesting, as for the stream) and adds an RQ_SCOPE wherever the count of
 * open scopes leaves 0 or comes back to it. It also notes every marker name
 * the trace holds: a --arena-reset that never opens a scope is an error
 * naming the markers there are; the default ("forward") missing is a
 * warning in the report, since the arena's figure is then a bump
 * allocator's that never rewinds.
 *
 * --pool-sites: before the pass the trace is read once to its end for its
 * module maps (a library mapped late is in none of the maps read so far),
 * and a symbolizer made of them (analyzer/symbolize.h) serves the pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "input.h"
#include "model.h"
#include "phase_frame.h"
#include "poolscope/bufpool.h"
#include "rp_internal.h"
#include "symbolize.h"

/* The reader's own window (1 s), as report uses: a shorter one hands out
 * a quiet thread's events late, and replay then read a multi-threaded
 * trace in another order than report (a node run: 5 frees of unknown
 * addresses and a peak 128 B off). Memory still follows the live set. */
#define RP_WINDOW_NS PST_DEFAULT_WINDOW_NS

static const rp_pol_ops_t *const rp_ops[RP_POLICY_COUNT] = {
    [RP_MALLOC] = &rp_pol_malloc,
    [RP_MALLOC_JEMALLOC] = &rp_pol_malloc_jemalloc,
    [RP_MALLOC_MIMALLOC] = &rp_pol_malloc_mimalloc,
    [RP_ARENA] = &rp_pol_arena,
    [RP_POOL] = &rp_pol_pool,
    [RP_CACHING] = &rp_pol_caching,
    [RP_IDEAL] = &rp_pol_ideal,
    [RP_KV_CONTIGUOUS] = &rp_pol_kv_contiguous,
    [RP_KV_RESERVE] = &rp_pol_kv_reserve,
    [RP_KV_STEP] = &rp_pol_kv_step,
    [RP_KV_PAGED] = &rp_pol_kv_paged,
};

static const char *const rp_names[RP_POLICY_COUNT] = {
    "malloc", "malloc-jemalloc", "malloc-mimalloc", "arena", "pool", "caching", "ideal",
    "kv-contiguous", "kv-reserve", "kv-step", "kv-paged",
};

const char *rp_policy_name(rp_policy_t p)
{
    return (unsigned)p < RP_POLICY_COUNT ? rp_names[p] : "?";
}

int rp_policy_parse(const char *list, unsigned *mask, char *msg, size_t cap)
{
    unsigned optional;
    return rp_policy_select(list, mask, &optional, msg, cap);
}

/* A set ("all", "kv", "allocators") asks for what applies; a name asks for
 * that policy whatever the trace holds, so only a set's members may be
 * skipped. */
int rp_policy_select(const char *list, unsigned *mask, unsigned *optional, char *msg, size_t cap)
{
    unsigned m = 0, named = 0;
    const char *p = list ? list : "";
    if (!*p) {
        snprintf(msg, cap, "empty policy list");
        return PSC_EINVAL;
    }
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        unsigned bit = 0;
        if (len == 3 && !strncmp(p, "all", 3)) bit = RP_ALL_MASK;
        else if (len == 2 && !strncmp(p, "kv", 2)) bit = RP_KV_MASK;
        else if (len == 10 && !strncmp(p, "allocators", 10)) bit = RP_MALLOC_MASK;
        for (int i = 0; i < RP_POLICY_COUNT && !bit; i++)
            if (strlen(rp_names[i]) == len && !strncmp(p, rp_names[i], len)) named |= bit = 1u << i;
        if (!bit) {
            snprintf(msg, cap, "unknown policy '%.*s' (known: malloc, malloc-jemalloc, malloc-mimalloc, "
                     "arena, pool, caching, ideal, kv-contiguous, kv-reserve, kv-step, kv-paged; sets "
                     "allocators, kv, all)", (int)(len > 64 ? 64 : len), p);
            return PSC_EINVAL;
        }
        m |= bit;
        if (!e) break;
        p = e + 1;
    }
    *mask = m;
    *optional = m & ~named;
    return 0;
}

rp_config_t rp_config_default(void)
{
    rp_config_t c;
    memset(&c, 0, sizeof c);   /* arena_reset NULL: "forward", and not given */
    return c;
}

/* ---- sources -------------------------------------------------------------- */

typedef struct rp_src {
    const char *path;
    const void *buf;
    size_t len;
} rp_src_t;

static pst_reader_t *src_open(const rp_src_t *s, int *err)
{
    return s->path ? pst_open(s->path, err) : pst_open_mem(s->buf, s->len, err);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int open_error(int err, char *msg, size_t cap)
{
    switch (err) {
    case PSC_EIO: snprintf(msg, cap, "cannot read: %s", psc_strerror(err)); break;
    case PSC_ETRUNC: snprintf(msg, cap, "truncated: the file ends inside the trace header"); break;
    case PSC_ECORRUPT: snprintf(msg, cap, "not a poolscope trace (bad magic or header)"); break;
    case PSC_EVERSION: snprintf(msg, cap, "trace version not supported by this build"); break;
    default: snprintf(msg, cap, "%s", psc_strerror(err)); break;
    }
    return err;
}

static int damaged(const pst_status_t *st, char *msg, size_t cap)
{
    if (st->corrupt) {
        snprintf(msg, cap, "corrupt trace: %s at byte %llu",
                 st->corrupt_reason ? st->corrupt_reason : "bad chunk",
                 (unsigned long long)st->corrupt_offset);
        return PSC_ECORRUPT;
    }
    if (st->truncated) {
        if (st->unread_bytes)
            snprintf(msg, cap, "truncated: the file ends inside a chunk (%llu bytes after the "
                     "last complete one)", (unsigned long long)st->unread_bytes);
        else
            snprintf(msg, cap, "truncated: no end record (the traced process died or the "
                     "disk filled)");
        return PSC_ETRUNC;
    }
    return 0;
}

/* ---- what applies ------------------------------------------------------------ */

/* Why a policy cannot run on this trace: the skip note of an optional one
 * ("skipped NAME: REASON") and the error of a required one. */
static const char RS_NO_KV[] = "the trace has no KV block events";
static const char RS_NO_CONTEXT[] = "the trace has no request markers; give --kv-context N";
static const char RS_NO_HELPER[] = "poolscope-malloc-helper not found beside poolscope "
                                   "(POOLSCOPE_MALLOC_HELPER names another)";

/* Policy i does not apply: an optional one is taken out of *mask and
 * listed in the report (0); a required one fails the run (PSC_EINVAL, msg). */
static int not_applicable(rp_report_t *rep, unsigned *mask, unsigned optional, int i,
                          const char *reason, char *msg, size_t cap)
{
    unsigned bit = 1u << i;
    *mask &= ~bit;
    if (!(optional & bit)) {
        if (reason == RS_NO_CONTEXT)   /* the message callers have matched on since 0.1 */
            snprintf(msg, cap, "kv-contiguous needs --kv-context N: the trace has no request "
                     "markers to take the context from");
        else
            snprintf(msg, cap, "%s: %s (--policy all skips what does not apply)", rp_names[i], reason);
        return PSC_EINVAL;
    }
    /* in policy order, whichever stage found it */
    size_t k = rep->n_skipped++;
    for (; k > 0 && rep->skipped[k - 1].policy > (rp_policy_t)i; k--) rep->skipped[k] = rep->skipped[k - 1];
    rep->skipped[k] = (rp_skip_t){ (rp_policy_t)i, rp_names[i], reason };
    return 0;
}

/* Every selected policy was skipped: one line naming them, grouped by
 * reason ("kv-contiguous, kv-reserve: the trace has no KV block events"). */
static int none_applies(const rp_report_t *rep, char *msg, size_t cap)
{
    size_t k = (size_t)snprintf(msg, cap, "no selected policy applies to this trace:");
    for (size_t i = 0; i < rep->n_skipped && k < cap; i++) {
        const char *why = rep->skipped[i].reason;
        size_t first = 0;
        while (rep->skipped[first].reason != why) first++;
        if (first < i) continue;                      /* already named with its reason */
        k += (size_t)snprintf(msg + k, cap - k, "%s ", i ? ";" : "");
        for (size_t j = i, n = 0; j < rep->n_skipped && k < cap; j++)
            if (rep->skipped[j].reason == why)
                k += (size_t)snprintf(msg + k, cap - k, "%s%s", n++ ? ", " : "", rep->skipped[j].name);
        if (k < cap) k += (size_t)snprintf(msg + k, cap - k, ": %s", why);
    }
    return PSC_EINVAL;
}

/* ---- markers ---------------------------------------------------------------- */

/* The marker names of the trace, for the arena's note on its reset marker. */
#define RP_MAX_MARKERS 64
typedef struct rp_markers {
    struct { char *name; uint64_t begins, points; } m[RP_MAX_MARKERS];
    size_t n;
    uint64_t more;              /* marker events of names past the table */
} rp_markers_t;

static void markers_note(rp_markers_t *k, const pst_event_t *ev)
{
    if (!ev->str) return;
    size_t i = 0;
    while (i < k->n && strcmp(k->m[i].name, ev->str)) i++;
    if (i == k->n) {
        if (k->n == RP_MAX_MARKERS || !(k->m[i].name = strdup(ev->str))) { k->more++; return; }
        k->n++;
    }
    if (ev->type == PST_EV_MARK_BEGIN) k->m[i].begins++;
    else if (ev->type == PST_EV_MARK_POINT) k->m[i].points++;
}

static void markers_free(rp_markers_t *k)
{
    for (size_t i = 0; i < k->n; i++) free(k->m[i].name);
    k->n = 0;
}

/* "forward (scopes), step (points), ..." or "none" */
static void markers_list(const rp_markers_t *k, char *out, size_t cap)
{
    size_t o = 0;
    out[0] = 0;
    if (!k->n) snprintf(out, cap, "none");
    for (size_t i = 0; i < k->n && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%s (%s)", i ? ", " : "", k->m[i].name,
                              k->m[i].begins ? "scopes" : "points");
    if (k->more && o < cap) snprintf(out + o, cap - o, ", and more");
}

static void warn(rp_report_t *rep, const char *text)
{
    if (rep->n_warnings < RP_MAX_WARNINGS && (rep->warnings[rep->n_warnings] = strdup(text)))
        rep->n_warnings++;
}

/* After the pass: the arena's reset marker never opened a scope. Given by
 * --arena-reset: an error naming the markers there are (PSC_EINVAL, msg);
 * the default: a warning. */
static int arena_marker_check(rp_report_t *rep, const rp_markers_t *k, const char *marker, int given,
                              char *msg, size_t cap)
{
    size_t i = 0;
    while (i < k->n && strcmp(k->m[i].name, marker)) i++;
    uint64_t begins = i < k->n ? k->m[i].begins : 0, points = i < k->n ? k->m[i].points : 0;
    if (begins) return 0;
    char list[512], what[160];
    markers_list(k, list, sizeof list);
    if (points)
        snprintf(what, sizeof what, "the marker '%s' occurs only as %" PRIu64 " point%s, never as a scope",
                 marker, points, points == 1 ? "" : "s");
    else
        snprintf(what, sizeof what, "the reset marker '%s' never occurs in the trace", marker);
    if (given) {
        snprintf(msg, cap, "arena: %s (markers in the trace: %s); --arena-reset takes a marker whose "
                 "scopes end a cycle", what, list);
        return PSC_EINVAL;
    }
    char text[900];
    snprintf(text, sizeof text, "arena: %s (markers in it: %s): the arena never reset, and served "
             "every allocation from its long-lived region, a bump allocator that frees nothing; "
             "give --arena-reset NAME", what, list);
    warn(rep, text);
    return 0;
}

/* --pool-sites: the trace's module maps, all of them (read to the end),
 * as a symbolizer. 0 or an error with msg. */
static int sites_symbolizer(const rp_src_t *src, az_sym_t **out, char *msg, size_t cap)
{
    int err = 0, rc;
    pst_reader_t *r = src_open(src, &err);
    if (!r) return open_error(err, msg, cap);
    if (pst_header(r)->stacks == PST_STACKS_NONE) {
        pst_close(r);
        snprintf(msg, cap, "--pool-sites needs call stacks: the trace was recorded with --stacks none");
        return PSC_EINVAL;
    }
    pst_event_t ev;
    while ((rc = pst_next(r, &ev)) > 0) {}
    if (rc < 0) {
        snprintf(msg, cap, "read error: %s", psc_strerror(rc));
        pst_close(r);
        return rc;
    }
    *out = az_sym_open(r);
    if (!*out) { pst_close(r); return PSC_ENOMEM; }
    az_sym_adopt(*out, r);   /* its strings name the Python frames */
    return 0;
}

/* --stream auto with --pool-sites: whether the trace has a tensor event
 * (reading up to the first), since the symbolizer, and its demands on the
 * trace, are for the heap stream only. 0 or an error with msg. */
static int tensor_scan(const rp_src_t *src, uint64_t window, int *has_tensor, char *msg, size_t cap)
{
    int err = 0, rc;
    pst_reader_t *r = src_open(src, &err);
    if (!r) return open_error(err, msg, cap);
    pst_reader_set_window(r, window);
    pst_event_t ev;
    *has_tensor = 0;
    while ((rc = pst_next(r, &ev)) > 0)
        if (ev.type == PST_EV_TENSOR_ACQUIRE) {
            *has_tensor = 1;
            break;
        }
    if (rc < 0) snprintf(msg, cap, "read error: %s", psc_strerror(rc));
    else rc = *has_tensor ? 0 : damaged(pst_status(r), msg, cap);
    pst_close(r);
    return rc;
}

/* ---- the run ---------------------------------------------------------------- */

static void report_drop_all(rp_report_t *rep)
{
    for (size_t i = 0; i < rep->n; i++) {
        for (size_t k = 0; k < rep->res[i].n_vstacks; k++) free((void *)rep->res[i].vstacks[k].frames);
        free((void *)rep->res[i].vstacks);
        free((void *)rep->res[i].library);
    }
    for (int i = 0; i < RP_POLICY_COUNT; i++) az_destroy(rep->ms[i]);
    for (size_t i = 0; i < rep->n_warnings; i++) free(rep->warnings[i]);
}

void rp_report_free(rp_report_t *r)
{
    if (!r) return;
    report_drop_all(r);
    free(r);
}

/* One pass over the trace: events -> requests -> every policy in pol[].
 * It also gathers what a policy would have needed before its first
 * request (the facts below), and stops early with restart set when one of
 * them turns out other than run() assumed. */
typedef struct rp_pass {
    /* in */
    const rp_src_t *src;
    const rp_config_t *cfg;
    unsigned mask;              /* the run's policies: the stream's and the marker model's config */
    int heap;
    size_t batch;
    int watch_tensor;           /* heap assumed (--stream auto): a tensor event restarts */
    int watch_cap;              /* the pool's cap assumed: a POOL_CREATE with another restarts */
    int cap_anywhere;           /* the cap is the first POOL_CREATE anywhere, not only before
                                   the first tensor event (the old full pre-scan's rule) */
    uint64_t cap_assumed;
    int progress;
    /* out */
    int restart;
    int saw_tensor, has_cap;
    uint64_t cap, max_reserve;
    uint64_t events, requests, t_last;
    uint64_t allocs, frees, unmatched, kv_pools;
    double policy_seconds;
    rp_markers_t markers;
} rp_pass_t;

/* What the event tells about the trace as a whole. 1: stop, restart. */
static int pass_facts(rp_pass_t *ps, const pst_event_t *ev)
{
    switch (ev->type) {
    case PST_EV_TENSOR_ACQUIRE:
        if (!ps->saw_tensor) {
            ps->saw_tensor = 1;
            if (ps->watch_tensor) return 1;
        }
        break;
    case PST_EV_POOL_CREATE:
        if (!ps->has_cap && (ps->cap_anywhere || !ps->saw_tensor)) {
            ps->has_cap = 1;
            ps->cap = ev->f[3];
            if (ps->watch_cap && ps->cap != ps->cap_assumed) return 1;
        }
        break;
    case PST_EV_MARK_BEGIN:
        if (ev->str && !strcmp(ev->str, "request") && ev->n_payload >= 2 && ev->payload[0] >= 0 &&
            ev->payload[1] >= 0) {
            uint64_t v = (uint64_t)ev->payload[0] + (uint64_t)ev->payload[1];
            if (v > ps->max_reserve) ps->max_reserve = v;
        }
        break;
    default:
        break;
    }
    return 0;
}

/* One batch to every policy. The malloc policies' helpers get it first,
 * so their calls overlap the runs of the policies in this process; theirs
 * are finished last. Every policy runs (the helpers must be answered), and
 * a failure is reported for the first policy in the usual order. */
static int pols_run(rp_pass_t *ps, rp_pol_t *const *pol, const rp_req_t *buf, size_t n, int has_kv,
                    char *msg, size_t cap)
{
    static const int order[RP_POLICY_COUNT] = { RP_ARENA, RP_POOL, RP_CACHING, RP_IDEAL,
        RP_KV_CONTIGUOUS, RP_KV_RESERVE, RP_KV_STEP, RP_KV_PAGED, RP_MALLOC, RP_MALLOC_JEMALLOC,
        RP_MALLOC_MIMALLOC };
    int rcs[RP_POLICY_COUNT] = { 0 };
    for (int i = 0; i < RP_POLICY_COUNT; i++) {
        if (!pol[i] || !pol[i]->ops->submit) continue;
        double t0 = now_s();
        rcs[i] = pol[i]->ops->submit(pol[i], buf, n);
        double dt = now_s() - t0;
        pol[i]->seconds += dt;
        ps->policy_seconds += dt;
    }
    for (int k = 0; k < RP_POLICY_COUNT; k++) {
        int i = order[k];
        if (!pol[i] || rcs[i]) continue;
        /* a KV policy acts on RQ_KV and RQ_KV_CONFIG only: without any in
         * the batch its run would only walk it (the batch still counts) */
        if (!has_kv && ((1u << i) & RP_KV_MASK)) {
            pol[i]->requests += n;
            continue;
        }
        double t0 = now_s();
        rcs[i] = pol[i]->ops->run(pol[i], buf, n);
        double dt = now_s() - t0;
        pol[i]->seconds += dt;
        pol[i]->requests += n;
        ps->policy_seconds += dt;
    }
    for (int i = 0; i < RP_POLICY_COUNT; i++) {
        int rc = rcs[i];
        if (!rc) continue;
        if (rc == PSC_ERANGE)       /* a size no address space holds */
            snprintf(msg, cap, "%s: an allocation too large for any address space (a damaged "
                     "or crafted trace)", rp_names[i]);
        else snprintf(msg, cap, "%s: %s", rp_names[i], psc_strerror(rc));
        return rc;
    }
    return 0;
}

static int pass(rp_pass_t *ps, pst_reader_t *r, rp_pol_t *const *pol, char *msg, size_t cap)
{
    const rp_config_t *cfg = ps->cfg;
    int err = 0, rc = 0;
    rp_stream_cfg_t scfg = {
        .heap = ps->heap,
        .reset_marker = cfg->arena_reset,
        .kv_objects = cfg->with_kv && (ps->mask & (1u << RP_ARENA)),
        .kv_requests = (ps->mask & RP_KV_MASK) != 0,
    };
    rp_rstream_t *st = rp_stream_create(&scfg, &err);
    size_t batch = ps->batch;
    /* --phase-frame: scopes from the stacks, fed as markers (phase_frame.h) */
    az_pf_t *pf = NULL;
    pst_event_t syn[2 * AZ_PF_MAX + 1];
    if (cfg->n_phase_frames && !(pf = az_pf_create(r, cfg->phase_frames, cfg->n_phase_frames, msg, cap))) {
        rp_stream_destroy(st);
        return PSC_EINVAL;
    }
    /* room past a full batch: one event's requests, an RQ_SCOPE, and the
     * requests of its --phase-frame scopes (a reset and a scope each) */
    rp_req_t *buf = malloc((batch + RP_STREAM_MAX_OUT + 1 + 4 * AZ_PF_MAX) * sizeof *buf);
    /* the reset marker's open scopes, counted by a model of its own */
    pm_model_t *mk = (ps->mask & (1u << RP_ARENA)) ? pm_create(&err) : NULL;
    rp_markers_t *markers = &ps->markers;
    rc = st && buf && (mk || !(ps->mask & (1u << RP_ARENA))) ? 0 : PSC_ENOMEM;

    uint64_t file_bytes = ps->src->len;
    if (ps->src->path) {
        struct stat sb;
        if (stat(ps->src->path, &sb) == 0) file_bytes = (uint64_t)sb.st_size;
    }
    double next_progress = now_s() + 0.5;
    uint64_t events = 0, t_last = 0;
    uint64_t kv_mark = 0;       /* rp_stream_kv_out at the start of the batch */
    size_t n = 0;
    pst_event_t ev;
    int more = 1;
    while (!rc && more) {
        int got = pst_next(r, &ev);
        if (got < 0) {
            snprintf(msg, cap, "read error: %s", psc_strerror(got));
            rc = got;
            break;
        }
        more = got > 0;
        if (more && pass_facts(ps, &ev)) {
            ps->restart = 1;
            break;
        }
        /* the --phase-frame scopes before the event that opens or closes
         * them (at the end: every scope still open), then the event */
        size_t ns = 0;
        const pst_event_t *evs = syn;
        if (pf && more && az_pf_wants(&ev)) ns = az_pf_before(pf, &ev, syn);
        else if (pf && !more) ns = az_pf_finish(pf, t_last, syn);
        /* without --phase-frame the event alone, read where it is (the
         * copy into syn[] was some 30 instructions an event) */
        if (more && !pf) { evs = &ev; ns = 1; events++; }
        else if (more) { syn[ns++] = ev; events++; }
        if (!more && ns) more = 1;           /* more scopes to end: go round again */
        for (size_t e = 0; e < ns && !rc; e++) {
            const pst_event_t *x = &evs[e];
            if (x->ts > t_last) t_last = x->ts;
            if ((rc = rp_stream_event(st, x, buf, &n))) break;
            if (x->type == PST_EV_MARK_BEGIN || x->type == PST_EV_MARK_END || x->type == PST_EV_MARK_POINT) {
                markers_note(markers, x);
                if (mk && x->type != PST_EV_MARK_POINT && x->str && !strcmp(x->str, cfg->arena_reset)) {
                    pm_step_t pstep;
                    if ((rc = pm_event(mk, x, &pstep))) break;
                    for (size_t k = 0; k < pstep.n_ops; k++) {
                        const pm_op_t *o = &pstep.ops[k];
                        if (o->kind != PM_MARK || (o->n > 0) == (o->req > 0)) continue;
                        rp_req_t *q = &buf[n++];
                        memset(q, 0, sizeof *q);
                        q->op = RQ_SCOPE;
                        q->n = o->n;
                        q->t = x->ts;
                    }
                }
            }
        }
        if (rc) break;
        if (n >= batch || (!more && n > 0)) {
            uint64_t kv_now = rp_stream_kv_out(st);
            if ((rc = pols_run(ps, pol, buf, n, kv_now != kv_mark, msg, cap))) break;
            kv_mark = kv_now;
            ps->requests += n;
            n = 0;
        }
        if (ps->progress && cfg->progress && ((events & 0xffff) == 0 || !more)) {
            double now = now_s();
            if (now >= next_progress || !more) {
                next_progress = now + 0.5;
                cfg->progress(cfg->progress_ctx, events, pst_status(r)->bytes, file_bytes);
            }
        }
    }
    if (!rc && !ps->restart) rc = damaged(pst_status(r), msg, cap);
    for (size_t i = 0; !rc && !ps->restart && i < az_pf_count(pf); i++) {
        const char *func;
        if (az_pf_seen(pf, i, &func)) continue;     /* a typo, or no stacks: say so */
        snprintf(msg, cap, "--phase-frame: no recorded stack holds '%s'%s", func,
                 pst_header(r)->stacks == PST_STACKS_NONE ? " (the trace was recorded with --stacks none)" : "");
        rc = PSC_ENOENT;
    }
    ps->events = events;
    ps->t_last = t_last;
    if (st) rp_stream_counts(st, &ps->allocs, &ps->frees, &ps->unmatched, &ps->kv_pools);
    free(buf);
    rp_stream_destroy(st);
    az_pf_destroy(pf);
    pm_destroy(mk);
    return rc;
}

static void pols_drop(rp_pol_t **pol)
{
    for (int i = 0; i < RP_POLICY_COUNT; i++) {
        if (!pol[i]) continue;
        pol[i]->ops->fini(pol[i]);
        free(pol[i]);
        pol[i] = NULL;
    }
}

/* Start policy i into pol[i] (its accumulator into rep->ms[i]). A policy
 * that cannot start here is skipped when optional (0, pol[i] NULL). */
static int pol_start(rp_report_t *rep, rp_pol_t **pol, int i, unsigned *mask, unsigned optional,
                     const rp_ctx_t *ctx, char *msg, size_t cap)
{
    const rp_pol_ops_t *ops = rp_ops[i];
    int err = 0, rc;
    az_cfg_t acfg = { .no_sites = 1, .no_reuse = (i == RP_IDEAL || (1u << i) & RP_KV_MASK) };
    pol[i] = calloc(1, ops->size);
    if (!pol[i] || !(rep->ms[i] = az_create(&acfg, &err))) return PSC_ENOMEM;
    pol[i]->ops = ops;
    pol[i]->ctx = ctx;
    pol[i]->m = rep->ms[i];
    if (!(rc = ops->init(pol[i], ctx))) return 0;
    const char *why = pol[i]->skip_reason;
    ops->fini(pol[i]);
    free(pol[i]);
    pol[i] = NULL;
    /* no helper program, no allocator library: an installation
     * matter, not the trace's, but the other policies can still
     * say what they have to say */
    if (!why && ((1u << i) & RP_MALLOC_MASK)) why = RS_NO_HELPER;
    if (rc == PSC_ENOENT && why && (optional & (1u << i)))
        rc = not_applicable(rep, mask, optional, i, why, msg, cap);
    else if (rc == PSC_ENOENT && why) {
        snprintf(msg, cap, "%s: cannot start: %s", rp_names[i], why);
        rc = PSC_EINVAL;            /* named, and it does not apply here */
    }
    else
        snprintf(msg, cap, "%s: cannot start: %s", rp_names[i], psc_strerror(rc));
    return rc;
}

/* A report emptied for another attempt (what the policies left in it). */
static void report_reset(rp_report_t *rep)
{
    report_drop_all(rep);
    memset(rep, 0, sizeof *rep);
}

static int run(const rp_src_t *src, const rp_config_t *ucfg, rp_report_t **out, char *msg,
               size_t cap)
{
    double t_start = now_s();
    rp_config_t cfg = ucfg ? *ucfg : rp_config_default();
    const int reset_given = cfg.arena_reset != NULL;
    if (!cfg.arena_reset) cfg.arena_reset = "forward";
    char dummy[8];
    if (!msg || !cap) { msg = dummy; cap = sizeof dummy; }
    msg[0] = 0;
    *out = NULL;
    /* no selection: every policy, each skipped when it does not apply */
    const unsigned mask0 = cfg.policies ? cfg.policies & RP_ALL_MASK : RP_ALL_MASK;
    const unsigned optional = cfg.policies ? cfg.optional & mask0 : RP_ALL_MASK;

    /* 1. What must be known before the first request, taken from one pass:
     * whether the trace has tensor events (--stream auto), the pool cap of
     * its first POOL_CREATE (before its first tensor event, or anywhere
     * when kv-contiguous needs a context), and for kv-contiguous without
     * --kv-context the largest prompt + max tokens of any request (only
     * the whole trace tells). The pass starts on the likely answers (the
     * heap stream, the default cap) and gathers the facts as it goes; one
     * that turns out otherwise restarts it from the beginning, which costs
     * what the old pre-scan read up to there, at most twice. kv-contiguous
     * runs after the pass, alone over a second one, when it needs the
     * context and the trace has KV block events to drive it. */
    const int need_kvctx = (mask0 & (1u << RP_KV_CONTIGUOUS)) && cfg.kv_context == 0;
    const int need_cap = (mask0 & (1u << RP_POOL)) && !cfg.pool_cap_set;
    int heap = cfg.stream != RP_STREAM_TENSOR;          /* auto: a guess until a tensor event */
    int heap_known = cfg.stream != RP_STREAM_AUTO;
    uint64_t pool_cap = cfg.pool_cap_set ? cfg.pool_cap : BP_DEFAULT_MAX_CACHED_BYTES;
    int cap_known = !need_cap;
    int rc;
    rp_ctx_t ctx = {
        .cfg = &cfg,
        .kv_context = cfg.kv_context,
        .pool_min = cfg.pool_min_set ? cfg.pool_min : RP_POOL_MIN_DEFAULT,
    };
    if (cfg.n_pool_sites > RP_MAX_POOL_SITES) {
        snprintf(msg, cap, "at most %d --pool-sites patterns", RP_MAX_POOL_SITES);
        return PSC_EINVAL;
    }
    const unsigned split_mask = 1u << RP_POOL | 1u << RP_CACHING;   /* the heap stream's split (rp_split) */
    if (!heap_known && (mask0 & split_mask) && cfg.n_pool_sites) {
        int has_tensor = 0;
        if ((rc = tensor_scan(src, cfg.window_ns ? cfg.window_ns : RP_WINDOW_NS, &has_tensor, msg, cap)))
            return rc;
        heap = !has_tensor;
        heap_known = 1;
    }
    rp_report_t *rep = calloc(1, sizeof *rep);
    if (!rep) return PSC_ENOMEM;
    rp_pol_t *pol[RP_POLICY_COUNT] = { 0 };
    rp_pass_t ps;
    pst_reader_t *r = NULL;
    unsigned mask;
    for (;;) {
        memset(&ps, 0, sizeof ps);
        ps.src = src;
        ps.cfg = &cfg;
        ps.batch = cfg.batch ? cfg.batch : 4096;
        ps.watch_tensor = !heap_known;
        ps.watch_cap = !cap_known;
        ps.cap_anywhere = need_kvctx;
        ps.cap_assumed = pool_cap;
        ps.progress = 1;
        ctx.heap = heap;
        ctx.pool_cap = pool_cap;
        mask = mask0;
        ps.mask = mask0;
        ps.heap = heap;
        if (heap && (mask & split_mask) && cfg.n_pool_sites && !ctx.sym &&
            (rc = sites_symbolizer(src, &ctx.sym, msg, cap)))
            break;
        int err = 0;
        if (!(r = src_open(src, &err))) {
            rc = open_error(err, msg, cap);
            break;
        }
        ctx.reader = r;
        pst_reader_set_window(r, cfg.window_ns ? cfg.window_ns : RP_WINDOW_NS);
        rc = 0;
        for (int i = 0; i < RP_POLICY_COUNT && !rc; i++)
            if ((mask & (1u << i)) && !(i == RP_KV_CONTIGUOUS && need_kvctx))
                rc = pol_start(rep, pol, i, &mask, optional, &ctx, msg, cap);
        /* 2. the pass */
        if (!rc) rc = pass(&ps, r, pol, msg, cap);
        if (rc || !ps.restart) break;
        /* a fact the policies started without: start again knowing it */
        if (ps.saw_tensor && !heap_known) {
            heap = 0;
            heap_known = 1;
        }
        if (ps.has_cap) pool_cap = ps.cap;
        cap_known = ps.has_cap || (!need_kvctx && ps.saw_tensor);
        pols_drop(pol);
        markers_free(&ps.markers);
        pst_close(r);
        r = NULL;
        report_reset(rep);
    }
    /* a --kv-context would not make kv-contiguous run on a trace with no
     * KV events: that is the reason given for it then */
    rp_ctx_t kctx = ctx;
    kctx.kv_context = ps.max_reserve;
    if (!rc && need_kvctx && (mask & (1u << RP_KV_CONTIGUOUS))) {
        if (!ps.kv_pools && (optional & (1u << RP_KV_CONTIGUOUS)))
            rc = not_applicable(rep, &mask, optional, RP_KV_CONTIGUOUS, RS_NO_KV, msg, cap);
        else if (kctx.kv_context == 0)
            rc = not_applicable(rep, &mask, optional, RP_KV_CONTIGUOUS, RS_NO_CONTEXT, msg, cap);
        else if (!(rc = pol_start(rep, pol, RP_KV_CONTIGUOUS, &mask, optional, &kctx, msg, cap)) &&
                 pol[RP_KV_CONTIGUOUS] && ps.kv_pools) {
            /* the second pass: kv-contiguous alone, on the same requests */
            rp_pol_t *one[RP_POLICY_COUNT] = { 0 };
            one[RP_KV_CONTIGUOUS] = pol[RP_KV_CONTIGUOUS];
            rp_pass_t p2;
            memset(&p2, 0, sizeof p2);
            p2.src = src;
            p2.cfg = &cfg;
            p2.mask = ps.mask;
            p2.heap = heap;
            p2.batch = ps.batch;
            int err = 0;
            pst_reader_t *r2 = src_open(src, &err);
            if (!r2) rc = open_error(err, msg, cap);
            else {
                kctx.reader = r2;
                pst_reader_set_window(r2, cfg.window_ns ? cfg.window_ns : RP_WINDOW_NS);
                rc = pass(&p2, r2, one, msg, cap);
                ps.policy_seconds += p2.policy_seconds;
                kctx.reader = r;
                pst_close(r2);
            }
            markers_free(&p2.markers);
        }
    }
    if (!rc && pol[RP_ARENA])
        rc = arena_marker_check(rep, &ps.markers, cfg.arena_reset, reset_given, msg, cap);
    if (!rc && (pol[RP_POOL] || pol[RP_CACHING]) && !heap && (cfg.pool_min_set || cfg.n_pool_sites))
        warn(rep, pol[RP_POOL] && pol[RP_CACHING]
                  ? "pool, caching: --pool-min and --pool-sites apply to the heap stream; on the tensor "
                    "stream every tensor went to the pool and to the caching allocator"
                  : pol[RP_POOL]
                  ? "pool: --pool-min and --pool-sites apply to the heap stream; on the tensor "
                    "stream every tensor went to the pool"
                  : "caching: --pool-min and --pool-sites apply to the heap stream; on the tensor "
                    "stream every tensor went to the caching allocator");

    /* 3. results */
    if (!rc) {
        const pst_status_t *pst = pst_status(r);
        rep->info.stream = heap ? "heap" : "tensor";
        rep->info.events = ps.events;
        rep->info.requests = ps.requests;
        rep->info.lost = pst->lost;
        rep->info.allocs = ps.allocs;
        rep->info.frees = ps.frees;
        rep->info.unmatched_frees = ps.unmatched;
        rep->info.kv_pools = ps.kv_pools;
        for (int i = 0; i < RP_POLICY_COUNT && !rc; i++) {
            if (!pol[i]) continue;
            /* the KV policies ran on nothing: their zeros would read as a
             * perfect cache */
            if (((1u << i) & RP_KV_MASK) && !rep->info.kv_pools) {
                rc = not_applicable(rep, &mask, optional, i, RS_NO_KV, msg, cap);
                continue;
            }
            rp_result_t *res = &rep->res[rep->n];
            res->policy = (rp_policy_t)i;
            res->name = rp_names[i];
            if ((rc = pol[i]->ops->finish(pol[i], ps.t_last, res))) {
                snprintf(msg, cap, "%s: %s", rp_names[i], psc_strerror(rc));
                break;
            }
            rep->n++;
            az_result(rep->ms[i], &res->m);
            res->requests = pol[i]->requests;
            res->seconds = pol[i]->seconds;
            res->events_per_s = res->seconds > 0 ? (double)res->requests / res->seconds : 0;
        }
        rep->info.seconds = now_s() - t_start;
        rep->info.read_seconds = rep->info.seconds - ps.policy_seconds;
        if (!rc && rep->n == 0 && rep->n_skipped) rc = none_applies(rep, msg, cap);
    }

    pols_drop(pol);
    markers_free(&ps.markers);
    az_sym_destroy(ctx.sym);
    pst_close(r);
    if (rc) {
        if (!msg[0]) snprintf(msg, cap, "%s", psc_strerror(rc));
        rp_report_free(rep);
        return rc;
    }
    *out = rep;
    return 0;
}

/* A stream is checked as soon as its first bytes are in: a trace starts
 * with PST_MAGIC. /dev/zero, `yes |` or a JSON file piped in are refused
 * then, instead of after they have been read whole (issue 25, item 6). */
static int stream_is_trace(const char *b, size_t n, void *ctx)
{
    (void)ctx;
    size_t m = n < sizeof PST_MAGIC ? n : sizeof PST_MAGIC;
    return memcmp(b, PST_MAGIC, m) ? PSC_ECORRUPT : 0;
}

int rp_run(const char *path, const rp_config_t *cfg, rp_report_t **out, char *msg, size_t cap)
{
    rp_src_t s = { .path = path };
    if (!path || !out) return PSC_EINVAL;
    /* A regular file is opened once per pass; anything else (a pipe,
     * /dev/stdin, a FIFO) is read into memory first, within a bound and
     * with its first bytes checked. A named FIFO is opened without
     * waiting for ever for a writer (common/input.h). */
    struct stat sb;
    char om[200];
    int fd = psc_input_fifo_open(path, om, sizeof om);
    if (fd < 0) {
        if (msg && cap) snprintf(msg, cap, "%s", om);
        *out = NULL;
        return PSC_EIO;
    }
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        close(fd);
        return run(&s, cfg, out, msg, cap);
    }
    if (fstat(fd, &sb) == 0 && (S_ISDIR(sb.st_mode) || S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode))) {
        close(fd);
        if (msg && cap) snprintf(msg, cap, "%s", S_ISDIR(sb.st_mode) ? "is a directory"
                                                 : "is a device, not a regular file or a pipe");
        *out = NULL;
        return PSC_EINVAL;
    }
    int err = 0;
    size_t len = 0;
    uint64_t max = psc_input_stream_max();
    char *buf = psc_read_capped(fd, max, &len, &err, stream_is_trace, sizeof PST_MAGIC, NULL);
    int e = errno;
    close(fd);
    if (!buf) {
        if (msg && cap) {
            if (err == PSC_EIO) snprintf(msg, cap, "cannot read: %s", strerror(e));
            else if (err == PSC_ECORRUPT) snprintf(msg, cap, "not a poolscope trace (bad header)");
            else if (err == PSC_EINVAL)
                snprintf(msg, cap, "more than %llu MiB from a pipe: write it to a file and replay that",
                         (unsigned long long)(max >> 20));
            else snprintf(msg, cap, "out of memory reading the input into memory");
        }
        *out = NULL;
        return err;
    }
    s.path = NULL;
    s.buf = buf;
    s.len = len;
    int rc = run(&s, cfg, out, msg, cap);
    free(buf);   /* the report keeps no pointer into the trace */
    return rc;
}

int rp_run_mem(const void *buf, size_t len, const rp_config_t *cfg, rp_report_t **out, char *msg,
               size_t cap)
{
    rp_src_t s = { .buf = buf, .len = len };
    if (!buf || !out) return PSC_EINVAL;
    return run(&s, cfg, out, msg, cap);
}

size_t rp_report_count(const rp_report_t *r) { return r ? r->n : 0; }

const rp_result_t *rp_report_result(const rp_report_t *r, size_t i)
{
    return r && i < r->n ? &r->res[i] : NULL;
}

const rp_result_t *rp_report_find(const rp_report_t *r, rp_policy_t p)
{
    for (size_t i = 0; r && i < r->n; i++)
        if (r->res[i].policy == p) return &r->res[i];
    return NULL;
}

const rp_trace_info_t *rp_report_info(const rp_report_t *r) { return r ? &r->info : NULL; }

size_t rp_report_skipped_count(const rp_report_t *r) { return r ? r->n_skipped : 0; }

size_t rp_report_warning_count(const rp_report_t *r) { return r ? r->n_warnings : 0; }

const char *rp_report_warning(const rp_report_t *r, size_t i)
{
    return r && i < r->n_warnings ? r->warnings[i] : NULL;
}

const rp_skip_t *rp_report_skipped(const rp_report_t *r, size_t i)
{
    return r && i < r->n_skipped ? &r->skipped[i] : NULL;
}
