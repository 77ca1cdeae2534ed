/* gate.c — gate and diff over report JSON (see gate.h).
 *
 * Leaves are collected by walking the document and joining keys with '.';
 * the two documents are matched by path (a metric on one side only is
 * reported as added/removed by diff, and is bad input for the gate).
 */
#include "gate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "escape.h"
#include "grow.h"
#include "input.h"
#include "phase_frame.h"
#include "poolscope/format.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "units.h"

/* The first bytes of a stream: a report JSON ('{' after blanks) or a
 * trace (PST_MAGIC). Checked as soon as they are in, so /dev/zero or a
 * pipe of garbage is refused at once instead of after being read whole
 * (issue 25, item 6). *(int *)ctx is set to 1 for JSON. */
static int stream_kind(const char *b, size_t n, void *ctx)
{
    size_t i = 0;
    while (i < n && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r')) i++;
    if (i < n && b[i] == '{') { *(int *)ctx = 1; return 0; }
    if (i == n && n < 4096) return 0;            /* blanks only, so far: the parser says what is wrong */
    size_t m = n < sizeof PST_MAGIC ? n : sizeof PST_MAGIC;
    return memcmp(b, PST_MAGIC, m) ? PSC_ECORRUPT : 0;
}


/* The scan's "phase_frame_notes" (phase_frame.h) put into a report JSON
 * text that lacks them, before its closing brace. 0, or PSC_ENOMEM. */
static int add_pf_notes(const az_scan_t *s, char **buf, size_t *len)
{
    char *nb = NULL;
    size_t nl = 0;
    FILE *m = open_memstream(&nb, &nl);
    if (!m) return PSC_ENOMEM;
    az_json_t j;
    az_json_init(&j, m, 0);
    az_json_begin(&j, NULL, '{');
    az_pf_notes_json(s, &j);
    az_json_end(&j);
    if (fclose(m) || !nb) { free(nb); return PSC_ENOMEM; }
    size_t e = *len, f = 0;
    while (e && (*buf)[e - 1] != '}') e--;        /* the report's closing brace */
    while (f < nl && nb[f] != '{') f++;           /* the notes' opening one */
    char *out = e && f < nl ? malloc(e + nl - f + 2) : NULL;
    if (out) {
        memcpy(out, *buf, e - 1);
        size_t k = e - 1;
        out[k++] = ',';
        memcpy(out + k, nb + f + 1, nl - f - 1);
        k += nl - f - 1;
        out[k] = 0;
        free(*buf);
        *buf = out;
        *len = k;
    }
    free(nb);
    return out ? 0 : PSC_ENOMEM;
}

/* The report JSON of a scanned trace, as a parsed document. The gate
 * reads phase_frame_notes from it (a --phase-frame phase whose calls may
 * have merged): added here when the report does not write them. */
static az_jdoc_t *scan_doc(az_scan_t *s, int *err, char *msg, size_t msglen)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    if (!m) { *err = PSC_ENOMEM; snprintf(msg, msglen, "out of memory"); return NULL; }
    az_report_opts_t o = { .top = 1000000 };
    az_report_json(s, &o, m);
    fclose(m);
    char eb[200];
    az_jdoc_t *d = az_json_parse(buf, len, err, eb, sizeof eb);
    int notes = 0;
    for (size_t i = 0; i < AZ_PF_MAX; i++) notes |= strcmp(az_scan_string(s, AZ_PF_NOTE_BASE + (uint32_t)i), "?") != 0;
    if (d && notes && !az_json_get(az_json_root(d), "phase_frame_notes")) {
        az_json_free(d);
        d = NULL;
        if (add_pf_notes(s, &buf, &len)) { *err = PSC_ENOMEM; snprintf(eb, sizeof eb, "out of memory"); }
        else d = az_json_parse(buf, len, err, eb, sizeof eb);
    }
    if (!d) snprintf(msg, msglen, "internal: report JSON does not parse: %s", eb);
    free(buf);
    return d;
}

az_jdoc_t *az_metrics_doc(const char *path, int *err, char *msg, size_t msglen)
{
    return az_metrics_doc_opts(path, NULL, err, msg, msglen);
}

az_jdoc_t *az_metrics_doc_opts(const char *path, const az_scan_opts_t *so, int *err, char *msg, size_t msglen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) { *err = PSC_EIO; snprintf(msg, msglen, "cannot open: %s", strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fd, &st) != 0) { close(fd); *err = PSC_EIO; snprintf(msg, msglen, "cannot read: %s", strerror(errno)); return NULL; }
    if (S_ISDIR(st.st_mode) || S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        close(fd);
        *err = PSC_EINVAL;
        snprintf(msg, msglen, "%s", S_ISDIR(st.st_mode) ? "is a directory" : "is a device, not a regular file or a pipe");
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        /* a pipe can be read once: take it all (within bounds), then look at it */
        size_t len = 0;
        int json = 0;
        uint64_t max = psc_input_stream_max();
        char *b = psc_read_capped(fd, max, &len, err, stream_kind, 4096, &json);
        close(fd);
        if (!b) {
            if (*err == PSC_ECORRUPT) snprintf(msg, msglen, "neither a poolscope trace nor a report --json document");
            else if (*err == PSC_EINVAL) snprintf(msg, msglen, "more than %llu MiB from a pipe", (unsigned long long)(max >> 20));
            else if (*err == PSC_ENOMEM) snprintf(msg, msglen, "out of memory");
            else snprintf(msg, msglen, "read failed");
            return NULL;
        }
        az_jdoc_t *d = NULL;
        if (json && len > PSC_JSON_MAX) {
            *err = PSC_EINVAL;
            snprintf(msg, msglen, "more than %llu MiB of JSON: not a report --json document",
                     (unsigned long long)(PSC_JSON_MAX >> 20));
        } else if (json) {
            char eb[200];
            d = az_json_parse(b, len, err, eb, sizeof eb);
            if (!d) snprintf(msg, msglen, "not valid JSON: %s", eb);
        } else {
            az_scan_t *s;
            int rc = az_scan_mem(b, len, path, so, &s, msg, msglen);
            if (rc) *err = rc;
            else { d = scan_doc(s, err, msg, msglen); az_scan_free(s); }
        }
        free(b);
        return d;
    }
    /* a regular file: look at its first bytes; JSON is read whole, so
     * bounded by size first, a trace is streamed */
    char head[4096];
    ssize_t got;
    while ((got = pread(fd, head, sizeof head, 0)) < 0 && errno == EINTR) {}
    close(fd);
    size_t i = 0;
    while (got > 0 && i < (size_t)got && (head[i] == ' ' || head[i] == '\n' || head[i] == '\t' || head[i] == '\r')) i++;
    int c = got > 0 && i < (size_t)got ? (unsigned char)head[i] : EOF;
    if (c == '{' && (uint64_t)st.st_size > PSC_JSON_MAX) {
        *err = PSC_EINVAL;
        snprintf(msg, msglen, "%llu bytes: too large for a report --json document (at most %llu MiB)",
                 (unsigned long long)st.st_size, (unsigned long long)(PSC_JSON_MAX >> 20));
        return NULL;
    }
    if (c == '{') {
        char eb[200];
        az_jdoc_t *d = az_json_parse_file(path, err, eb, sizeof eb);
        if (!d) snprintf(msg, msglen, "not valid JSON: %s", eb);
        return d;
    }
    az_scan_t *s;
    int rc = az_scan_file(path, so, &s, msg, msglen);
    if (rc) { *err = rc; return NULL; }
    az_jdoc_t *d = scan_doc(s, err, msg, msglen);
    az_scan_free(s);
    return d;
}

int az_gate_higher_is_better(const char *path)
{
    const char *last = strrchr(path, '.');
    last = last ? last + 1 : path;
    return !strcmp(last, "hit_rate") || !strcmp(last, "same_address_reuse") ||
           !strcmp(last, "kv_utilization") || !strcmp(last, "kv_utilization_at_peak") ||
           !strcmp(last, "kv_utilization_per_step");
}

int az_gate_rule_parse(int kind, const char *arg, az_gate_rule_t *rule, char *msg, size_t msglen)
{
    const char *eq = strrchr(arg, '=');
    const char *opt = kind == AZ_RULE_TOL ? "--tol" : kind == AZ_RULE_MAX ? "--max" : "--min";
    if (!eq || eq == arg || (size_t)(eq - arg) >= sizeof rule->metric) {
        snprintf(msg, msglen, "%s '%s': expected METRIC=VALUE", opt, arg);
        return PSC_EINVAL;
    }
    memset(rule, 0, sizeof *rule);
    rule->kind = kind;
    memcpy(rule->metric, arg, (size_t)(eq - arg));
    char val[64];
    snprintf(val, sizeof val, "%s", eq + 1);
    size_t n = strlen(val);
    if (kind == AZ_RULE_TOL && n && val[n - 1] == '%') val[n - 1] = 0;
    if (az_parse_bytes(val, &rule->value) || rule->value < 0) {
        snprintf(msg, msglen, "%s '%s': '%s' is not a %s", opt, arg, eq + 1,
                 kind == AZ_RULE_TOL ? "percentage" : "value (e.g. 64MiB, 0.9, 0)");
        return PSC_EINVAL;
    }
    return 0;
}

/* ---- leaves --------------------------------------------------------------------- */

typedef struct leaf { char path[256]; double v; } leaf_t;
typedef struct leaves { leaf_t *a; size_t n, cap; } leaves_t;

static void collect(const az_jv_t *v, const char *prefix, leaves_t *out)
{
    for (const az_jv_t *c = v->child; c; c = c->next) {
        if (!c->key) continue;
        char p[256];
        snprintf(p, sizeof p, "%s%s%s", prefix, *prefix ? "." : "", c->key);
        if (c->type == AZ_JV_OBJ) {
            if (!*prefix && !strcmp(c->key, "sites")) continue;
            collect(c, p, out);
        } else if (c->type == AZ_JV_NUM || c->type == AZ_JV_BOOL) {
            if (psc_grow((void **)&out->a, &out->cap, out->n, sizeof *out->a, 64)) return;
            snprintf(out->a[out->n].path, sizeof out->a[out->n].path, "%s", p);
            out->a[out->n].v = c->num;
            out->n++;
        }
    }
}

/* What stands at a metric's path. */
enum { V_MISSING, V_NULL, V_NOT_NUMBER, V_NOT_FINITE, V_NUM };

static int value_at(const az_jv_t *doc, const char *path, double *out)
{
    const az_jv_t *v = doc ? az_json_path(doc, path) : NULL;
    if (!v) return V_MISSING;
    if (v->type == AZ_JV_NULL) return V_NULL;
    if (v->type != AZ_JV_NUM && v->type != AZ_JV_BOOL) return V_NOT_NUMBER;
    if (!isfinite(v->num)) return V_NOT_FINITE;
    *out = v->num;
    return V_NUM;
}

/* The message for a metric that cannot be compared; `where` names the
 * document ("the trace's report", "the baseline BASE"). */
static void bad_value(int kind, const char *metric, const char *where, char *msg, size_t msglen)
{
    if (kind == V_MISSING)
        snprintf(msg, msglen, "no metric '%s' in %s (see report --json for names)", metric, where);
    else if (kind == V_NULL)
        snprintf(msg, msglen, "metric '%s' does not apply to %s (null)", metric, where);
    else if (kind == V_NOT_NUMBER)
        snprintf(msg, msglen, "metric '%s' in %s is not a number", metric, where);
    else
        snprintf(msg, msglen, "metric '%s' in %s is not a finite number", metric, where);
}

int az_doc_incomplete(const az_jv_t *doc, char *why, size_t len)
{
    const az_jv_t *k = az_json_get(doc, "killed"), *c = az_json_get(doc, "complete"),
                  *e = az_json_get(doc, "events_total");
    if (k && k->type == AZ_JV_BOOL && k->num)
        snprintf(why, len, "the traced process was killed (SIGKILL or out of memory): its figures stop early");
    else if (c && c->type == AZ_JV_BOOL && !c->num)
        snprintf(why, len, "the trace is incomplete (cut short, no END record, or a corrupt chunk)");
    else if (e && e->type == AZ_JV_NUM && e->num == 0)
        snprintf(why, len, "the trace has no events");
    else
        return 0;
    return 1;
}

int az_doc_other_program(const az_jv_t *cur, const az_jv_t *base, char *msg, size_t msglen)
{
    const az_jv_t *a = az_json_get(cur, "program"), *b = az_json_get(base, "program");
    if (!a || !b || a->type != AZ_JV_STR || b->type != AZ_JV_STR) return 0;   /* unknown: cannot tell */
    const char *sa = strrchr(a->str, '/'), *sb = strrchr(b->str, '/');
    sa = sa ? sa + 1 : a->str;
    sb = sb ? sb + 1 : b->str;
    if (!strcmp(sa, sb)) return 0;             /* same program, perhaps another build directory */
    /* the paths are the traces': a message for a terminal (common/escape.h) */
    char eb[600], ea[600];
    snprintf(msg, msglen, "the baseline was recorded from %s, the trace from %s", psc_esc_text(b->str, eb, sizeof eb),
             psc_esc_text(a->str, ea, sizeof ea));
    return 1;
}

static int is_bytes(const char *path)
{
    return strstr(path, "bytes") != NULL;
}

static void fmt_val(const char *path, double v, char *buf, size_t len)
{
    if (is_bytes(path) && v >= 0 && v == floor(v)) psc_fmt_bytes((uint64_t)v, buf, len);
    else if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, len, "%.0f", v);
    else snprintf(buf, len, "%.4g", v);
}

/* The default checks: figures a deterministic workload reproduces exactly.
 * Time-weighted ones (kv.kv_utilization, internal_frag_avg) stay in the
 * report as information; kv.kv_utilization_per_step is their gate. */
/* Does metric come from a phase of doc's phase_frame_notes (phase_frame.h:
 * a --phase-frame phase whose calls may have merged)? phases.NAME.*, and
 * for the step marker (decode) the step figures; a figure that is there
 * (not null, which is said as before). 1 with the message. */
static int merged_phase(const az_jv_t *doc, const char *metric, const char *where, char *msg, size_t msglen)
{
    static const char *const step[] = { "decode_steps", "allocs_per_decode_step", "heap_calls_per_decode_step",
                                        "kv.kv_utilization_per_step", "kv.step_samples" };
    double x;
    const az_jv_t *a = value_at(doc, metric, &x) == V_NUM ? az_json_get(doc, "phase_frame_notes") : NULL;
    for (const az_jv_t *c = a && a->type == AZ_JV_ARR ? a->child : NULL; c; c = c->next) {
        const az_jv_t *ph = az_json_get(c, "phase"), *note = az_json_get(c, "note");
        if (!ph || ph->type != AZ_JV_STR) continue;
        size_t pl = strlen(ph->str);
        int dep = !strncmp(metric, "phases.", 7) && !strncmp(metric + 7, ph->str, pl) && metric[7 + pl] == '.';
        for (size_t k = 0; !dep && !strcmp(ph->str, "decode") && k < sizeof step / sizeof step[0]; k++)
            dep = !strcmp(metric, step[k]);
        if (!dep) continue;
        char em[1100], ep[1100], en[4000];
        snprintf(msg, msglen, "not gating on '%s': it reads --phase-frame phase '%s' (%s), and %s",
                 psc_esc_text(metric, em, sizeof em), psc_esc_text(ph->str, ep, sizeof ep), where,
                 note && note->type == AZ_JV_STR ? psc_esc_text(note->str, en, sizeof en) : "its calls may have merged");
        return 1;
    }
    return 0;
}

static const char *const headline[] = {
    "peak_live_bytes", "total_allocated_bytes", "leaked_bytes", "lost_events",
    "pool.hit_rate", "pool.peak_cached_bytes", "pool.peak_outstanding_bytes", "pool.backing_allocs",
    "reuse.same_address_reuse", "kv.kv_utilization_per_step", "allocs_per_decode_step",
    "heap_calls_per_decode_step",
};

int az_gate_check(const az_jv_t *cur, const az_jv_t *base, const az_gate_rule_t *rules,
                  size_t n_rules, double default_tol, FILE *out, char *msg, size_t msglen)
{
    return az_gate_check_named(cur, base, NULL, rules, n_rules, default_tol, out, msg, msglen);
}

int az_gate_check_named(const az_jv_t *cur, const az_jv_t *base, const char *base_name,
                        const az_gate_rule_t *rules, size_t n_rules, double default_tol,
                        FILE *out, char *msg, size_t msglen)
{
    char bwhere[300];
    snprintf(bwhere, sizeof bwhere, "the baseline%s%s", base_name ? " " : "", base_name ? base_name : "");
    const char *cwhere = "the trace's report";
    az_gate_rule_t *dflt = NULL;
    double x;
    if (!n_rules) {
        size_t n = sizeof headline / sizeof headline[0], k = 0;
        dflt = calloc(n, sizeof *dflt);
        if (!dflt) { snprintf(msg, msglen, "out of memory"); return 2; }
        /* a headline metric that neither side has (an older report) is not
         * checked; one side only is bad input, named below */
        for (size_t i = 0; i < n; i++)
            if (base && (value_at(base, headline[i], &x) != V_MISSING || value_at(cur, headline[i], &x) != V_MISSING)) {
                dflt[k].kind = AZ_RULE_TOL;
                snprintf(dflt[k].metric, sizeof dflt[k].metric, "%s", headline[i]);
                dflt[k].value = default_tol;
                k++;
            }
        rules = dflt;
        n_rules = k;
    }
    /* a figure read from a --phase-frame phase whose calls may have merged
     * is not one to pass or fail on */
    for (size_t i = 0; i < n_rules; i++)
        if (merged_phase(cur, rules[i].metric, cwhere, msg, msglen) ||
            (base && merged_phase(base, rules[i].metric, bwhere, msg, msglen))) {
            free(dflt);
            return 2;
        }
    int failed = 0;
    char em[sizeof rules[0].metric * 4];   /* the metric as text: it may name a trace's phase */
    for (size_t i = 0; i < n_rules; i++) {
        const az_gate_rule_t *r = &rules[i];
        double cv = 0, bv = 0;
        int ck = value_at(cur, r->metric, &cv);
        int bk = r->kind == AZ_RULE_TOL ? value_at(base, r->metric, &bv) : V_NUM;
        if (r->kind == AZ_RULE_TOL && ck == V_NULL && bk == V_NULL) {
            /* does not apply to either run (no KV cache, no decode step) */
            fprintf(out, "%-9s %s: does not apply (null in both)\n", "n/a", psc_esc_text(r->metric, em, sizeof em));
            continue;
        }
        if (ck != V_NUM || bk != V_NUM) {
            if (ck != V_NUM) bad_value(ck, r->metric, cwhere, msg, msglen);
            else bad_value(bk, r->metric, bwhere, msg, msglen);
            free(dflt);
            return 2;
        }
        char cb[64], bb[64], lb[64];
        fmt_val(r->metric, cv, cb, sizeof cb);
        if (r->kind == AZ_RULE_MAX || r->kind == AZ_RULE_MIN) {
            int bad = r->kind == AZ_RULE_MAX ? cv > r->value : cv < r->value;
            fmt_val(r->metric, r->value, lb, sizeof lb);
            fprintf(out, "%-9s %s = %s (limit %s %s)\n", bad ? "REGRESSED" : "ok", psc_esc_text(r->metric, em, sizeof em), cb,
                    r->kind == AZ_RULE_MAX ? "<=" : ">=", lb);
            failed |= bad;
            continue;
        }
        fmt_val(r->metric, bv, bb, sizeof bb);
        int higher = az_gate_higher_is_better(r->metric);
        double worse = higher ? bv - cv : cv - bv;   /* > 0: worse */
        double allowed = bv != 0 ? fabs(bv) * r->value / 100.0 : r->value;
        int bad = worse > allowed * (1 + 1e-12);
        char delta[64];
        if (bv != 0) snprintf(delta, sizeof delta, "%+.2f%%", 100.0 * (cv - bv) / fabs(bv));
        else snprintf(delta, sizeof delta, "baseline 0, absolute");
        if (bv != 0) snprintf(lb, sizeof lb, "%g%%", r->value);
        else fmt_val(r->metric, r->value, lb, sizeof lb);
        fprintf(out, "%-9s %s: %s -> %s (%s; %s allowed, %s is better)\n", bad ? "REGRESSED" : "ok",
                psc_esc_text(r->metric, em, sizeof em), bb, cb, delta, lb, higher ? "higher" : "lower");
        failed |= bad;
    }
    free(dflt);
    return failed ? 1 : 0;
}

int az_diff_is_timing(const char *path)
{
    static const char *const top[] = {     /* the whole run's timer-driven facts */
        "duration_ns", "time_resolution_ns", "tracer_bytes", "events", "events_total", "peak_rss_bytes",
        "peak_live_tick_min_bytes", "peak_live_tick_max_bytes",   /* which events share a tick */
    };
    static const char *const any[] = { "kv_utilization", "kv_waste_ratio", "internal_frag_avg" };
    const char *last = strrchr(path, '.');
    for (size_t i = 0; !last && i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(path, top[i])) return 1;
    last = last ? last + 1 : path;
    for (size_t i = 0; i < sizeof any / sizeof any[0]; i++)
        if (!strcmp(last, any[i])) return 1;
    size_t n = strlen(last);
    return (n >= 7 && !strcmp(last + n - 7, "time_ns")) || (n >= 5 && !strcmp(last + n - 5, "_t_ns"));
}

/* Is a document's site list whole? report --json lists its top N rows
 * (10 by default; a trace read here, all of them): whole when its rows'
 * bytes add up to total_allocated_bytes (the sites partition the
 * allocations). A cut list's floor: the fewest bytes it lists. */
static int sites_whole(const az_jv_t *doc, const az_jv_t *arr, double *floor)
{
    double sum = 0, lo = -1;
    for (const az_jv_t *e = arr ? arr->child : NULL; e; e = e->next) {
        const az_jv_t *by = az_json_get(e, "bytes");
        if (!by || by->type != AZ_JV_NUM) continue;
        sum += by->num;
        if (lo < 0 || by->num < lo) lo = by->num;
    }
    const az_jv_t *t = az_json_get(doc, "total_allocated_bytes");
    *floor = lo < 0 ? 0 : lo;
    return !t || t->type != AZ_JV_NUM || !arr || sum == t->num;
}

/* The allocation sites whose bytes changed most from a to b (report's
 * sites.by_bytes, matched by name: the symbolized label, a Python line for
 * a stack that ran Python code), at most 10, as text under a title or as
 * objects of an open JSON array (j). A site one side's cut list does not
 * name (a baseline written by report --json lists its top 10) is compared
 * only when its bytes on the other side reach that list's floor (else it
 * may be in the unlisted tail), and that side reads "-" (null): below the
 * floor, not known. Returns how many. */
static size_t sites_changed(const az_jv_t *a, const az_jv_t *b, az_json_t *j, FILE *out)
{
    const az_jv_t *sa = az_json_path(a, "sites.by_bytes"), *sb = az_json_path(b, "sites.by_bytes");
    double floor[2];
    int whole[2] = { sites_whole(a, sa, &floor[0]), sites_whole(b, sb, &floor[1]) };
    size_t nsite = 0;
    typedef struct { const char *name; double v[2], c[2]; int seen[2]; } sd_t;
    size_t cap = (sa ? sa->n : 0) + (sb ? sb->n : 0);
    sd_t *sd = cap ? calloc(cap, sizeof *sd) : NULL;
    for (int side = 0; side < 2 && sd; side++) {
        const az_jv_t *arr = side ? sb : sa;
        if (!arr) continue;
        for (const az_jv_t *e = arr->child; e; e = e->next) {
            const az_jv_t *nm = az_json_get(e, "site"), *by = az_json_get(e, "bytes"), *ca = az_json_get(e, "calls");
            if (!nm || !nm->str || !by) continue;
            sd_t *x = NULL;
            for (size_t k = 0; k < nsite; k++) if (!strcmp(sd[k].name, nm->str)) { x = &sd[k]; break; }
            if (!x) { x = &sd[nsite++]; x->name = nm->str; }
            x->v[side] += by->num;
            x->c[side] += ca ? ca->num : 0;
            x->seen[side] = 1;
        }
    }
    /* unknown on a cut side: dropped below its floor; else compared with the floor */
    size_t k = 0;
    for (size_t i = 0; i < nsite; i++) {
        sd_t x = sd[i];
        int drop = 0;
        for (int side = 0; side < 2; side++)
            if (!x.seen[side] && !whole[side] && x.v[!side] < floor[side]) drop = 1;
        if (!drop) sd[k++] = x;
    }
    nsite = k;
#define KNOWN(x, side) ((x).seen[side] || whole[side])
#define DELTA(x) fabs((KNOWN(x, 1) ? (x).v[1] : floor[1]) - (KNOWN(x, 0) ? (x).v[0] : floor[0]))
    /* order by |delta bytes| */
    for (size_t i = 0; i < nsite; i++)
        for (size_t m = i + 1; m < nsite; m++)
            if (DELTA(sd[m]) > DELTA(sd[i])) { sd_t t = sd[i]; sd[i] = sd[m]; sd[m] = t; }
    size_t shown = 0;
    int unknown = 0;
    for (size_t i = 0; i < nsite && shown < 10; i++) {
        const sd_t *x = &sd[i];
        if (KNOWN(*x, 0) && KNOWN(*x, 1) && x->v[0] == x->v[1] && x->c[0] == x->c[1]) continue;
        if (!shown && !j) fputs("\nAllocation sites that changed most (bytes allocated)\n", out);
        shown++;
        if (j) {
            az_json_begin(j, NULL, '{');
            az_json_str(j, "site", x->name);
            static const char *const kb[2] = { "bytes_a", "bytes_b" }, *const kc[2] = { "calls_a", "calls_b" };
            for (int side = 0; side < 2; side++)
                if (KNOWN(*x, side)) az_json_f64(j, kb[side], x->v[side]); else az_json_null(j, kb[side]);
            for (int side = 0; side < 2; side++)
                if (KNOWN(*x, side)) az_json_f64(j, kc[side], x->c[side]); else az_json_null(j, kc[side]);
            az_json_end(j);
        } else {
            char x1[32] = "-", x2[32] = "-", c1[32] = "-", c2[32] = "-";
            if (KNOWN(*x, 0)) { psc_fmt_bytes((uint64_t)x->v[0], x1, sizeof x1); snprintf(c1, sizeof c1, "%.0f", x->c[0]); }
            if (KNOWN(*x, 1)) { psc_fmt_bytes((uint64_t)x->v[1], x2, sizeof x2); snprintf(c2, sizeof c2, "%.0f", x->c[1]); }
            unknown |= !KNOWN(*x, 0) || !KNOWN(*x, 1);
            fprintf(out, "  %12s -> %-12s calls %s -> %s  ", x1, x2, c1, c2);
            psc_esc_text_put(out, x->name);   /* a site of the trace: text (common/escape.h) */
            fputc('\n', out);
        }
    }
#undef DELTA
#undef KNOWN
    if (unknown)
        fputs("  (-: not among the sites that side lists, below its smallest; report --json --top N lists N)\n", out);
    free(sd);
    return shown;
}

size_t az_gate_sites(const az_jv_t *cur, const az_jv_t *base, FILE *out)
{
    size_t shown = base ? sites_changed(base, cur, NULL, out) : 0;
    if (shown) return shown;
    /* no baseline, or no site changed: what the trace held at its heap peak */
    const az_jv_t *sp = az_json_path(cur, "sites.by_peak");
    for (const az_jv_t *e = sp ? sp->child : NULL; e && shown < 5; e = e->next) {
        const az_jv_t *nm = az_json_get(e, "site"), *pk = az_json_get(e, "peak_bytes");
        if (!nm || !nm->str || !pk || !(pk->num > 0)) continue;
        if (!shown++) fputs("\nAllocation sites at the heap peak (bytes held then)\n", out);
        char x1[32];
        fprintf(out, "  %12s  ", psc_fmt_bytes((uint64_t)pk->num, x1, sizeof x1));
        psc_esc_text_put(out, nm->str);
        fputc('\n', out);
    }
    return shown;
}

size_t az_diff_docs(const az_jv_t *a, const az_jv_t *b, int flags, FILE *out)
{
    int json = (flags & AZ_DIFF_JSON) != 0;
    leaves_t la = { 0 }, lb = { 0 };
    collect(a, "", &la);
    collect(b, "", &lb);
    size_t ndiff = 0;
    int header = 0;
    az_json_t j;
    if (json) {
        az_json_init(&j, out, 1);
        az_json_begin(&j, NULL, '{');
        az_json_begin(&j, "metrics", '[');
    }
    /* metrics in A (changed or removed), then metrics only in B */
    for (int pass = 0; pass < 2; pass++) {
        leaves_t *x = pass ? &lb : &la, *y = pass ? &la : &lb;
        for (size_t i = 0; i < x->n; i++) {
            const char *p = x->a[i].path;
            /* timing (times, time-weighted means, timer-driven samples): shown,
             * a difference only when asked (identical runs differ in these) */
            int timing = az_diff_is_timing(p);
            const leaf_t *o = NULL;
            for (size_t k = 0; k < y->n; k++) if (!strcmp(y->a[k].path, p)) { o = &y->a[k]; break; }
            if (pass && o) continue;
            double va = pass ? NAN : x->a[i].v, vb = pass ? x->a[i].v : (o ? o->v : NAN);
            if (o && va == vb) continue;
            if (!timing || (flags & AZ_DIFF_TIMING)) ndiff++;
            char sa[64], sb[64];
            if (!isnan(va)) fmt_val(p, va, sa, sizeof sa); else snprintf(sa, sizeof sa, "-");
            if (!isnan(vb)) fmt_val(p, vb, sb, sizeof sb); else snprintf(sb, sizeof sb, "-");
            int higher = az_gate_higher_is_better(p);
            const char *verdict = isnan(va) ? "added" : isnan(vb) ? "removed" :
                                  (higher ? vb > va : vb < va) ? "better" : "worse";
            if (timing && !(flags & AZ_DIFF_TIMING) && !isnan(va) && !isnan(vb)) verdict = "timing";
            if (json) {
                az_json_begin(&j, NULL, '{');
                az_json_str(&j, "metric", p);
                if (isnan(va)) az_json_null(&j, "a"); else az_json_f64(&j, "a", va);
                if (isnan(vb)) az_json_null(&j, "b"); else az_json_f64(&j, "b", vb);
                if (!isnan(va) && !isnan(vb)) az_json_f64(&j, "delta", vb - va);
                az_json_str(&j, "verdict", verdict);
                az_json_bool(&j, "timing", timing);
                az_json_end(&j);
            } else {
                char pc[32] = "";
                if (!isnan(va) && !isnan(vb) && va != 0) snprintf(pc, sizeof pc, "%+.1f%%", 100 * (vb - va) / fabs(va));
                if (!header++) fprintf(out, "  %-40s %14s    %-14s %9s\n", "metric", "A", "B", "change");
                /* p holds the traces' phase names: text (common/escape.h) */
                char ep[sizeof x->a[i].path * 4];
                fprintf(out, "  %-40s %14s -> %-14s %9s  %s\n", psc_esc_text(p, ep, sizeof ep), sa, sb, pc, verdict);
            }
        }
    }
    if (json) az_json_end(&j);
    free(la.a);
    free(lb.a);
    /* sites that changed most: matched by name, compared by bytes */
    if (json) az_json_begin(&j, "sites", '[');
    ndiff += sites_changed(a, b, json ? &j : NULL, out);
    if (json) { az_json_end(&j); az_json_end(&j); }
    return ndiff;
}
