/* metrics_json.h — an accumulator's result as JSON members (prefix az_result_).
 *
 * The metrics (metrics.h) only count; the keys they are written under live
 * here, beside the other outputs (json.h's writer, report.c, replay's
 * output.c), so the names a gate or a dashboard reads are in one place.
 */
#ifndef POOLSCOPE_METRICS_JSON_H
#define POOLSCOPE_METRICS_JSON_H

#include "json.h"
#include "metrics.h"

/* Write the metric keys of one stream as members of the current JSON
 * object (peak_live_bytes, peak_reserved_bytes, reserved_over_live,
 * internal_frag, internal_frag_avg, total_allocated_bytes, leaked_bytes,
 * hits, misses, hit_rate, backing_allocs, peak_cached_bytes,
 * peak_outstanding_bytes, kv_utilization, kv_waste_ratio, ...) — for
 * replay's `policies` entries. */
void az_result_json(const az_result_t *r, az_json_t *j);

/* The report's "kv" members (inside an open object) and its decode-step
 * keys (decode_steps, allocs_per_decode_step, heap_calls_per_decode_step):
 * a figure that does not apply (no KV blocks, no decode step) is null,
 * never 0 — a gate must not read it as perfect. */
void az_result_kv_json(const az_result_t *r, az_json_t *j);
void az_result_steps_json(const az_result_t *r, az_json_t *j);

#endif
