/* replay.c — the driver of `poolscope replay`: one streaming pass over a
 * trace, every selected policy fed the same requests in batches.
 *
 * 1. Pre-scan (only when something must be known before the first request):
 *    whether the trace has tensor events (--stream auto; stops at the first
 *    one), the pool cap recorded by POOL_CREATE (before the first tensor
 *    event in any engine), and for kv-contiguous without --kv-context the
 *    largest prompt + max tokens of any request (a full pass).
 * 2. The pass: events -> requests (stream.c) into a batch; each full batch
 *    goes to each policy in turn, timed per policy (two clock reads per
 *    batch and policy, not per event). Memory: one batch, the stream's live
 *    tables and the policies' live state.
 * 3. A damaged trace (cut short, corrupt chunk) is refused after the pass:
 *    numbers from part of a run would be read as the run's.
 *
 * A policy the trace cannot drive (KV policies without KV block events,
 * kv-contiguous without a context, malloc without its helper) is found
 * out as early as the pre-scan allows, else after the pass. One asked for
 * only through a set ("all", "kv", the default) is skipped and listed with
 * its reason; one asked for by name fails the run: the user wanted that
 * figure, and a row of zeros or a silent omission would mislead.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "poolscope/bufpool.h"
#include "rp_internal.h"

#define RP_WINDOW_NS 20000000ull   /* 20 ms: see rp_config_t.window_ns */

static const rp_pol_ops_t *const rp_ops[RP_POLICY_COUNT] = {
    [RP_MALLOC] = &rp_pol_malloc,
    [RP_ARENA] = &rp_pol_arena,
    [RP_POOL] = &rp_pol_pool,
    [RP_IDEAL] = &rp_pol_ideal,
    [RP_KV_CONTIGUOUS] = &rp_pol_kv_contiguous,
    [RP_KV_RESERVE] = &rp_pol_kv_reserve,
    [RP_KV_STEP] = &rp_pol_kv_step,
    [RP_KV_PAGED] = &rp_pol_kv_paged,
};

static const char *const rp_names[RP_POLICY_COUNT] = {
    "malloc", "arena", "pool", "ideal", "kv-contiguous", "kv-reserve", "kv-step", "kv-paged",
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

/* A set ("all", "kv") asks for what applies; a name asks for that policy
 * whatever the trace holds, so only a set's members may be skipped. */
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
        for (int i = 0; i < RP_POLICY_COUNT && !bit; i++)
            if (strlen(rp_names[i]) == len && !strncmp(p, rp_names[i], len)) named |= bit = 1u << i;
        if (!bit) {
            snprintf(msg, cap, "unknown policy '%.*s' (known: malloc, arena, pool, ideal, "
                     "kv-contiguous, kv-reserve, kv-step, kv-paged, kv, all)", (int)(len > 64 ? 64 : len), p);
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
    memset(&c, 0, sizeof c);
    c.arena_reset = "forward";
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

/* ---- pre-scan ------------------------------------------------------------- */

typedef struct rp_scan {
    int has_tensor, has_cap, has_kv;
    uint64_t cap, max_reserve;
} rp_scan_t;

static int prescan(const rp_src_t *src, int full, uint64_t window, rp_scan_t *sc, char *msg,
                   size_t cap)
{
    int err = 0, rc;
    pst_reader_t *r = src_open(src, &err);
    if (!r) return open_error(err, msg, cap);
    pst_reader_set_window(r, window);
    pst_event_t ev;
    while ((rc = pst_next(r, &ev)) > 0) {
        if (ev.type == PST_EV_TENSOR_ACQUIRE) {
            sc->has_tensor = 1;
            if (!full) break;
        } else if (ev.type == PST_EV_POOL_CREATE && !sc->has_cap) {
            sc->has_cap = 1;
            sc->cap = ev.f[3];
        } else if (ev.type == PST_EV_KVB_CREATE) {
            sc->has_kv = 1;
        } else if (ev.type == PST_EV_MARK_BEGIN && ev.str && !strcmp(ev.str, "request") &&
                   ev.n_payload >= 2 && ev.payload[0] >= 0 && ev.payload[1] >= 0) {
            uint64_t v = (uint64_t)ev.payload[0] + (uint64_t)ev.payload[1];
            if (v > sc->max_reserve) sc->max_reserve = v;
        }
    }
    if (rc < 0) {
        snprintf(msg, cap, "read error: %s", psc_strerror(rc));
        pst_close(r);
        return rc;
    }
    rc = 0;
    if (full || !sc->has_tensor) rc = damaged(pst_status(r), msg, cap);
    pst_close(r);
    return rc;
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

/* ---- the run ---------------------------------------------------------------- */

static void report_drop_all(rp_report_t *rep)
{
    for (size_t i = 0; i < rep->n; i++) {
        for (size_t k = 0; k < rep->res[i].n_vstacks; k++) free((void *)rep->res[i].vstacks[k].frames);
        free((void *)rep->res[i].vstacks);
    }
    for (int i = 0; i < RP_POLICY_COUNT; i++) az_destroy(rep->ms[i]);
}

void rp_report_free(rp_report_t *r)
{
    if (!r) return;
    report_drop_all(r);
    free(r);
}

static int run(const rp_src_t *src, const rp_config_t *ucfg, rp_report_t **out, char *msg,
               size_t cap)
{
    double t_start = now_s();
    rp_config_t cfg = ucfg ? *ucfg : rp_config_default();
    if (!cfg.arena_reset) cfg.arena_reset = "forward";
    char dummy[8];
    if (!msg || !cap) { msg = dummy; cap = sizeof dummy; }
    msg[0] = 0;
    *out = NULL;
    /* no selection: every policy, each skipped when it does not apply */
    unsigned mask = cfg.policies ? cfg.policies & RP_ALL_MASK : RP_ALL_MASK;
    unsigned optional = cfg.policies ? cfg.optional & mask : RP_ALL_MASK;

    /* 1. what must be known first */
    rp_scan_t sc;
    memset(&sc, 0, sizeof sc);
    int need_kvctx = (mask & (1u << RP_KV_CONTIGUOUS)) && cfg.kv_context == 0;
    int need_cap = (mask & (1u << RP_POOL)) && !cfg.pool_cap_set;
    int rc;
    if (cfg.stream == RP_STREAM_AUTO || need_kvctx || need_cap) {
        if ((rc = prescan(src, need_kvctx, cfg.window_ns ? cfg.window_ns : RP_WINDOW_NS, &sc, msg,
                          cap)))
            return rc;
    }
    int heap = cfg.stream == RP_STREAM_HEAP || (cfg.stream == RP_STREAM_AUTO && !sc.has_tensor);
    rp_ctx_t ctx = {
        .cfg = &cfg,
        .pool_cap = cfg.pool_cap_set ? cfg.pool_cap : sc.has_cap ? sc.cap : BP_DEFAULT_MAX_CACHED_BYTES,
        .kv_context = cfg.kv_context ? cfg.kv_context : sc.max_reserve,
        .heap = heap,
    };

    rp_report_t *rep = calloc(1, sizeof *rep);
    if (!rep) return PSC_ENOMEM;
    /* What the pre-scan already tells: a context for kv-contiguous, and
     * when it read the whole trace (it did for that context), whether there
     * are KV events at all. With none, that is the reason given for
     * kv-contiguous too: a --kv-context would not make it run. */
    rc = 0;
    if (need_kvctx && !sc.has_kv) {
        for (int i = 0; i < RP_POLICY_COUNT && !rc; i++)
            if ((mask & RP_KV_MASK & (1u << i)) && (optional & (1u << i)))
                rc = not_applicable(rep, &mask, optional, i, RS_NO_KV, msg, cap);
    }
    if (!rc && (mask & (1u << RP_KV_CONTIGUOUS)) && need_kvctx && ctx.kv_context == 0)
        rc = not_applicable(rep, &mask, optional, RP_KV_CONTIGUOUS, RS_NO_CONTEXT, msg, cap);
    if (rc) {
        free(rep);
        return rc;
    }
    int err = 0;
    pst_reader_t *r = src_open(src, &err);
    if (!r) {
        free(rep);
        return open_error(err, msg, cap);
    }
    ctx.reader = r;
    pst_reader_set_window(r, cfg.window_ns ? cfg.window_ns : RP_WINDOW_NS);
    rp_stream_cfg_t scfg = {
        .heap = heap,
        .reset_marker = cfg.arena_reset,
        .kv_objects = cfg.with_kv && (mask & (1u << RP_ARENA)),
        .kv_requests = (mask & RP_KV_MASK) != 0,
    };
    rp_rstream_t *st = rp_stream_create(&scfg, &err);
    rp_pol_t *pol[RP_POLICY_COUNT] = { 0 };
    size_t batch = cfg.batch ? cfg.batch : 4096;
    rp_req_t *buf = malloc((batch + RP_STREAM_MAX_OUT) * sizeof *buf);
    rc = st && buf ? 0 : PSC_ENOMEM;
    for (int i = 0; i < RP_POLICY_COUNT && !rc; i++) {
        if (!(mask & (1u << i))) continue;
        const rp_pol_ops_t *ops = rp_ops[i];
        az_cfg_t acfg = { .no_sites = 1, .no_reuse = (i == RP_IDEAL || (1u << i) & RP_KV_MASK) };
        pol[i] = calloc(1, ops->size);
        if (!pol[i] || !(rep->ms[i] = az_create(&acfg, &err))) {
            rc = PSC_ENOMEM;
            break;
        }
        pol[i]->ops = ops;
        pol[i]->ctx = &ctx;
        pol[i]->m = rep->ms[i];
        if ((rc = ops->init(pol[i], &ctx))) {
            ops->fini(pol[i]);
            free(pol[i]);
            pol[i] = NULL;
            /* no helper program: an installation matter, not the trace's,
             * but the other policies can still say what they have to say */
            if (i == RP_MALLOC && rc == PSC_ENOENT && (optional & (1u << i)))
                rc = not_applicable(rep, &mask, optional, i, RS_NO_HELPER, msg, cap);
            else
                snprintf(msg, cap, "%s: cannot start: %s", rp_names[i], psc_strerror(rc));
        }
    }

    /* 2. the pass */
    uint64_t file_bytes = src->len;
    if (src->path) {
        struct stat sb;
        if (stat(src->path, &sb) == 0) file_bytes = (uint64_t)sb.st_size;
    }
    double next_progress = now_s() + 0.5, policy_seconds = 0;
    uint64_t events = 0, requests = 0, t_last = 0;
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
        if (more) {
            events++;
            if (ev.ts > t_last) t_last = ev.ts;
            if ((rc = rp_stream_event(st, &ev, buf, &n))) break;
        }
        if (n >= batch || (!more && n > 0)) {
            for (int i = 0; i < RP_POLICY_COUNT && !rc; i++) {
                if (!pol[i]) continue;
                double t0 = now_s();
                rc = pol[i]->ops->run(pol[i], buf, n);
                double dt = now_s() - t0;
                pol[i]->seconds += dt;
                pol[i]->requests += n;
                policy_seconds += dt;
                if (rc) snprintf(msg, cap, "%s: %s", rp_names[i], psc_strerror(rc));
            }
            requests += n;
            n = 0;
        }
        if (cfg.progress && ((events & 0xffff) == 0 || !more)) {
            double now = now_s();
            if (now >= next_progress || !more) {
                next_progress = now + 0.5;
                cfg.progress(cfg.progress_ctx, events, pst_status(r)->bytes, file_bytes);
            }
        }
    }
    if (!rc) rc = damaged(pst_status(r), msg, cap);

    /* 3. results */
    if (!rc) {
        const pst_status_t *ps = pst_status(r);
        rep->info.stream = heap ? "heap" : "tensor";
        rep->info.events = events;
        rep->info.requests = requests;
        rep->info.lost = ps->lost;
        rp_stream_counts(st, &rep->info.allocs, &rep->info.frees, &rep->info.unmatched_frees,
                         &rep->info.kv_pools);
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
            if ((rc = pol[i]->ops->finish(pol[i], t_last, res))) {
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
        rep->info.read_seconds = rep->info.seconds - policy_seconds;
        if (!rc && rep->n == 0 && rep->n_skipped) rc = none_applies(rep, msg, cap);
    }

    for (int i = 0; i < RP_POLICY_COUNT; i++) {
        if (!pol[i]) continue;
        pol[i]->ops->fini(pol[i]);
        free(pol[i]);
    }
    free(buf);
    rp_stream_destroy(st);
    pst_close(r);
    if (rc) {
        if (!msg[0]) snprintf(msg, cap, "%s", psc_strerror(rc));
        rp_report_free(rep);
        return rc;
    }
    *out = rep;
    return 0;
}

/* All of fd into a malloc'ed buffer: a pipe can be read once, and replay
 * reads its input two or three times (pre-scan, pass). NULL with *err set. */
static char *slurp_fd(int fd, size_t *len, int *err)
{
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    if (!b) { *err = PSC_ENOMEM; return NULL; }
    for (;;) {
        if (n == cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(b, cap * 2);
            if (!nb) { free(b); *err = PSC_ENOMEM; return NULL; }
            b = nb;
            cap *= 2;
        }
        ssize_t k = read(fd, b + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { free(b); *err = PSC_EIO; return NULL; }
        if (k == 0) break;
        n += (size_t)k;
    }
    *len = n;
    return b;
}

int rp_run(const char *path, const rp_config_t *cfg, rp_report_t **out, char *msg, size_t cap)
{
    rp_src_t s = { .path = path };
    if (!path || !out) return PSC_EINVAL;
    /* A regular file is opened once per pass; anything else (a pipe,
     * /dev/stdin, a FIFO) is read into memory first. */
    struct stat sb;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (msg && cap) snprintf(msg, cap, "cannot read: %s", strerror(errno));
        *out = NULL;
        return PSC_EIO;
    }
    if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode)) {
        close(fd);
        return run(&s, cfg, out, msg, cap);
    }
    int err = 0;
    size_t len = 0;
    char *buf = slurp_fd(fd, &len, &err);
    int e = errno;
    close(fd);
    if (!buf) {
        if (msg && cap) {
            if (err == PSC_EIO) snprintf(msg, cap, "cannot read: %s", strerror(e));
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

const rp_skip_t *rp_report_skipped(const rp_report_t *r, size_t i)
{
    return r && i < r->n_skipped ? &r->skipped[i] : NULL;
}
