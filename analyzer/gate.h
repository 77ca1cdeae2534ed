/* gate.h — metric comparison for `poolscope gate` and `poolscope diff`
 * (prefix az_gate_, az_diff_).
 *
 * Both work on report JSON (docs/DESIGN.md, "JSON contract"): a trace is
 * first turned into its `report --json` document (az_metrics_doc), so the
 * gate compares exactly what a person sees in the report. Metrics are
 * numeric leaves named by their dotted path ("pool.hit_rate",
 * "phases.decode.heap_calls"); arrays and the `sites` object are not metrics.
 *
 * Direction (docs/DESIGN.md, "Gate and diff"): rates and utilizations —
 * any path whose last part is hit_rate, same_address_reuse, kv_utilization,
 * kv_utilization_at_peak or kv_utilization_per_step — are higher-is-better;
 * everything else (bytes, counts, ratios of waste) lower-is-better.
 *
 * Tolerance: --tol M=PCT allows M to get worse by PCT percent of the
 * baseline (exactly PCT passes); against a baseline of 0 the tolerance is
 * absolute, in M's own unit (so `--tol leaked_bytes=4KiB` reads as 4096
 * when the baseline leaked nothing). --max M=V fails when M > V; --min M=V
 * when M < V. Values take KiB/MiB/GiB.
 */
#ifndef POOLSCOPE_GATE_H
#define POOLSCOPE_GATE_H

#include <stdio.h>

#include "json.h"

/* Scan a trace and return its report JSON document; or parse `path` as a
 * JSON report when it starts with '{'. NULL with a message on failure
 * (*err PS_E*). */
az_jdoc_t *az_metrics_doc(const char *path, int *err, char *msg, size_t msglen);
/* The same with scan options for a trace (--phase-frame); so may be NULL. */
struct az_scan_opts;
az_jdoc_t *az_metrics_doc_opts(const char *path, const struct az_scan_opts *so, int *err, char *msg, size_t msglen);

/* 1 if the metric at this dotted path is higher-is-better. */
int az_gate_higher_is_better(const char *path);

enum { AZ_RULE_TOL, AZ_RULE_MAX, AZ_RULE_MIN };
typedef struct az_gate_rule {
    int kind;
    char metric[256];            /* dotted path */
    double value;                /* percent (TOL) or limit (MAX/MIN) */
} az_gate_rule_t;

/* Parse "METRIC=VALUE" into a rule; PSC_EINVAL with a message. */
int az_gate_rule_parse(int kind, const char *arg, az_gate_rule_t *rule, char *msg, size_t msglen);

/* Check rules against the current document and (for TOL) the baseline.
 * Writes one line per rule to `out` (passes as "ok", failures as
 * "REGRESSED ...", a --tol metric null on both sides as "n/a"). Returns 0
 * all hold, 1 a regression, 2 bad input with the message in msg: a metric
 * missing, null on one side (or under --max/--min), not a number, or not
 * finite (1e999), named with the document (base_name: the baseline's file,
 * may be NULL). With no rules, the headline metrics — the deterministic
 * ones: no time-weighted mean — in either document are checked with
 * `default_tol` percent. */
int az_gate_check(const az_jv_t *cur, const az_jv_t *base, const az_gate_rule_t *rules,
                  size_t n_rules, double default_tol, FILE *out, char *msg, size_t msglen);
int az_gate_check_named(const az_jv_t *cur, const az_jv_t *base, const char *base_name,
                        const az_gate_rule_t *rules, size_t n_rules, double default_tol,
                        FILE *out, char *msg, size_t msglen);

/* After a regression: the allocation sites behind it, as text — those
 * whose bytes changed most from the baseline (matched by their label; for
 * a stack that ran Python code, its Python line), or without a baseline
 * (or no site changed) the sites holding most at the heap peak. Returns
 * how many lines it wrote (0: the documents have no sites). */
size_t az_gate_sites(const az_jv_t *cur, const az_jv_t *base, FILE *out);

/* 1 with a reason when a report document describes a trace whose figures
 * cannot be trusted for a comparison: the process was killed, the trace is
 * incomplete (cut short, no END, a corrupt chunk) or has no events. */
int az_doc_incomplete(const az_jv_t *doc, char *why, size_t len);
/* 1 with a message when both documents name their program ("program",
 * compared by file name) and the names differ. */
int az_doc_other_program(const az_jv_t *cur, const az_jv_t *base, char *msg, size_t msglen);

/* 1 for a metric that measures timing rather than behaviour: times
 * (*time_ns, *_t_ns, duration_ns), time-weighted means (kv_utilization,
 * kv_waste_ratio, internal_frag_avg), and the timer-driven counts (events,
 * events_total, peak_rss_bytes, tracer_bytes, time_resolution_ns). */
int az_diff_is_timing(const char *path);

/* Metric-by-metric differences of two report documents, written as text
 * (or JSON with AZ_DIFF_JSON). Timing metrics that differ are shown (verdict
 * "timing") but counted only with AZ_DIFF_TIMING. Returns the number of
 * differences that count (metrics and allocation sites). */
enum { AZ_DIFF_JSON = 1, AZ_DIFF_TIMING = 2 };
size_t az_diff_docs(const az_jv_t *a, const az_jv_t *b, int flags, FILE *out);

#endif
