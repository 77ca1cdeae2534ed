/* gate.h — metric comparison for `poolscope gate` and `poolscope diff`
 * (prefix az_gate_, az_diff_).
 *
 * Both work on report JSON (DESIGN.md keys): a trace is first turned into
 * its `report --json` document (az_metrics_doc), so the gate compares
 * exactly what a person sees in the report. Metrics are numeric leaves named
 * by their dotted path ("pool.hit_rate", "phases.decode.heap_calls");
 * arrays and the `sites` object are not metrics.
 *
 * Direction (DESIGN.md): rates and utilizations — any path whose last part
 * is hit_rate, same_address_reuse, kv_utilization or kv_utilization_at_peak —
 * are higher-is-better; everything else (bytes, counts, ratios of waste)
 * lower-is-better.
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
 * "REGRESSED ..."). Returns 0 all hold, 1 a regression, 2 bad input (a
 * metric missing; the message in msg). With no rules, the headline metrics
 * present in the baseline are checked with `default_tol` percent. */
int az_gate_check(const az_jv_t *cur, const az_jv_t *base, const az_gate_rule_t *rules,
                  size_t n_rules, double default_tol, FILE *out, char *msg, size_t msglen);

/* Metric-by-metric differences of two report documents, written as text
 * (or JSON with json = 1). Returns the number of metrics that differ. */
size_t az_diff_docs(const az_jv_t *a, const az_jv_t *b, int json, FILE *out);

#endif
