/* metrics_json.c — az_result_t as JSON members (see metrics_json.h). */
#include "metrics_json.h"

void az_result_json(const az_result_t *r, az_json_t *j)
{
    az_json_u64(j, "peak_live_bytes", r->peak_live_bytes);
    az_json_u64(j, "peak_reserved_bytes", r->peak_reserved_bytes);
    az_json_f64(j, "reserved_over_live", r->reserved_over_live);
    az_json_f64(j, "internal_frag", r->internal_frag);
    az_json_f64(j, "internal_frag_avg", r->internal_frag_avg);
    az_json_u64(j, "total_allocated_bytes", r->total_allocated_bytes);
    az_json_u64(j, "leaked_bytes", r->leaked_bytes);
    az_json_u64(j, "allocs", r->allocs);
    az_json_u64(j, "frees", r->frees);
    az_json_u64(j, "hits", r->hits);
    az_json_u64(j, "misses", r->misses);
    az_json_f64(j, "hit_rate", r->hit_rate);
    az_json_u64(j, "backing_allocs", r->backing_allocs);
    az_json_u64(j, "peak_cached_bytes", r->peak_cached_bytes);
    az_json_u64(j, "peak_outstanding_bytes", r->peak_outstanding_bytes);
    az_json_f64(j, "same_address_reuse", r->same_address_reuse);
    az_json_f64(j, "fresh_address_ratio", r->fresh_address_ratio);
    az_json_u64(j, "distance_p50", r->distance_p50);
    az_json_u64(j, "distance_p90", r->distance_p90);
    /* replay's KV policies give az_kv token slots (block size 1): their peak
     * is peak_kv_reserved_tokens in replay's own keys, not a block count */
    if (r->has_kv) {
        az_json_f64(j, "kv_utilization", r->kv_utilization);
        az_json_f64(j, "kv_waste_ratio", r->kv_waste_ratio);
    }
}

void az_result_kv_json(const az_result_t *r, az_json_t *j)
{
    if (r->has_kv) {
        az_json_u64(j, "peak_blocks_in_use", r->peak_kv_blocks);
        az_json_f64(j, "kv_utilization", r->kv_utilization);
        az_json_f64(j, "kv_utilization_at_peak", r->kv_utilization_at_peak);
        az_json_f64(j, "kv_waste_ratio", r->kv_waste_ratio);
    } else {
        az_json_u64(j, "peak_blocks_in_use", 0);
        az_json_null(j, "kv_utilization");
        az_json_null(j, "kv_utilization_at_peak");
        az_json_null(j, "kv_waste_ratio");
    }
    if (r->has_kv && r->kv_step_samples) az_json_f64(j, "kv_utilization_per_step", r->kv_utilization_per_step);
    else az_json_null(j, "kv_utilization_per_step");
    az_json_u64(j, "step_samples", r->kv_step_samples);
}

void az_result_steps_json(const az_result_t *r, az_json_t *j)
{
    az_json_u64(j, "decode_steps", r->decode_steps);
    if (r->has_decode_steps) {
        az_json_f64(j, "allocs_per_decode_step", r->allocs_per_decode_step);
        az_json_f64(j, "heap_calls_per_decode_step", r->heap_calls_per_decode_step);
    } else {
        az_json_null(j, "allocs_per_decode_step");
        az_json_null(j, "heap_calls_per_decode_step");
    }
}
