/* output.c — a replay report as a readable table or as JSON.
 *
 * The JSON is {"trace": {...}, "policies": [{"name": ..., metrics...}],
 * "skipped": [{"policy": ..., "reason": ...}], "warnings": [...]}
 * (skipped: the optional policies that did not apply; warnings: what the
 * figures do not say themselves; empty arrays when none): the
 * metric members of each policy are written by the analyzer
 * (az_result_json), so replay and report spell and compute them the same
 * way; replay adds what only a simulation knows (events_per_s, lifetime
 * violations, the pool's cap decisions, the allocator's timing, KV policy
 * parameters).
 *
 * Names in the table come from the trace (marker names, in the arena's
 * reset marker and in warnings) or from the environment (library paths):
 * written through psc_esc_text (common/escape.h), so no control byte of
 * theirs reaches a terminal; the JSON escapes them itself.
 */
#include <inttypes.h>
#include <string.h>

#include "escape.h"
#include "metrics_json.h"
#include "fmt.h"
#include "rp_internal.h"

/* The heap stream's split (rp_internal.h), the same words for the pool and
 * the caching rows, which take the same requests: "WHO: heap stream split
 * at X: N calls (B) to the ALLOCATOR[, sites] (ALONE); M calls (B) to the
 * glibc chunk model, peak P in chunks (...)". */
static void split_line(FILE *o, const rp_result_t *x, const char *who, const char *alloc, const char *alone)
{
    char a[32], b[32], d[32], e[32], f[32];
    fprintf(o, "%s: heap stream split at %s: %" PRIu64 " calls (%s) to %s", who,
            psc_fmt_bytes(x->pool_min, a, sizeof a), x->pooled_calls,
            psc_fmt_bytes(x->pooled_bytes, b, sizeof b), alloc);
    if (x->site_calls || x->site_stacks)
        fprintf(o, ", %" PRIu64 " of them (%s) smaller, from %" PRIu64 " stacks matching "
                "--pool-sites", x->site_calls, psc_fmt_bytes(x->site_bytes, d, sizeof d), x->site_stacks);
    fprintf(o, " (%s); %" PRIu64 " calls (%s) to the glibc chunk model, peak %s in chunks (no free-list "
            "fragmentation counted)\n", alone, x->small_calls,
            psc_fmt_bytes(x->small_bytes, e, sizeof e), psc_fmt_bytes(x->peak_small_held, f, sizeof f));
}

static int is_kv(rp_policy_t p) { return ((1u << p) & RP_KV_MASK) != 0; }
static int is_malloc(rp_policy_t p) { return ((1u << p) & RP_MALLOC_MASK) != 0; }
static int has_addresses(rp_policy_t p)
{
    return is_malloc(p) || p == RP_ARENA || p == RP_POOL || p == RP_CACHING;
}

void rp_report_table(const rp_report_t *r, FILE *o)
{
    const rp_trace_info_t *in = &r->info;
    fprintf(o, "replay of %" PRIu64 " events: %s stream, %" PRIu64 " allocations, %" PRIu64
            " frees%s\n", in->events, in->stream, in->allocs, in->frees,
            in->lost ? " (the tracer lost events: figures are approximate)" : "");
    fprintf(o, "%-15s %12s %12s %8s %15s %7s %8s %6s %6s %11s %10s %8s %9s\n", "policy",
            "peak_reserved", "peak_live", "res/live", "backing a/f", "i_frag", "hit_rate",
            "fresh", "same", "dist 50/90", "violations", "kv_waste", "Mreq/s");
    for (size_t i = 0; i < r->n; i++) {
        const rp_result_t *x = &r->res[i];
        const az_result_t *m = &x->m;
        char a[32], b[32], c[40], d[16], e[16], f[16], g[32], h[16], k[16], v[16];
        psc_fmt_bytes(m->peak_reserved_bytes, a, sizeof a);
        psc_fmt_bytes(m->peak_live_bytes, b, sizeof b);
        if (x->policy == RP_IDEAL || is_kv(x->policy)) snprintf(c, sizeof c, "-");
        else snprintf(c, sizeof c, "%" PRIu64 "/%" PRIu64, m->backing_allocs, m->backing_frees);
        snprintf(d, sizeof d, "%.1f%%", 100 * m->internal_frag);
        if (m->acquires) psc_fmt_share(m->hits, m->acquires, 1, 4, e, sizeof e);   /* never 1.0000 with a miss */
        else snprintf(e, sizeof e, "-");
        if (has_addresses(x->policy)) {
            snprintf(f, sizeof f, "%.3f", m->fresh_address_ratio);
            snprintf(h, sizeof h, "%.3f", m->same_address_reuse);
            snprintf(g, sizeof g, "%" PRIu64 "/%" PRIu64, m->distance_p50, m->distance_p90);
        } else {
            snprintf(f, sizeof f, "-");
            snprintf(h, sizeof h, "-");
            snprintf(g, sizeof g, "-");
        }
        if (x->policy == RP_ARENA) snprintf(v, sizeof v, "%" PRIu64, x->lifetime_violations);
        else snprintf(v, sizeof v, "-");
        if (is_kv(x->policy)) snprintf(k, sizeof k, "%.1f%%", 100 * m->kv_waste_ratio);
        else snprintf(k, sizeof k, "-");
        fprintf(o, "%-15s %12s %12s %8.2f %15s %7s %8s %6s %6s %11s %10s %8s %9.1f\n", x->name, a, b,
                m->reserved_over_live, c, d, e, f, h, g, v, k, x->events_per_s / 1e6);
    }
    /* Details per policy. */
    for (size_t i = 0; i < r->n; i++) {
        const rp_result_t *x = &r->res[i];
        const az_result_t *m = &x->m;
        char a[32], b[32], c[32];
        switch (x->policy) {
        case RP_POOL:
            fprintf(o, "pool: cap %s; %" PRIu64 " acquires, %" PRIu64 " hits, %" PRIu64
                    " misses, %" PRIu64 " destroyed over the cap; peak cached %s, peak "
                    "outstanding %s (%" PRIu64 " buffers)\n",
                    psc_fmt_bytes(x->pool_cap, a, sizeof a), m->acquires, m->hits, m->misses,
                    x->destroyed_over_cap, psc_fmt_bytes(m->peak_cached_bytes, b, sizeof b),
                    psc_fmt_bytes(x->heap_split ? x->pool_peak_outstanding : m->peak_outstanding_bytes, c, sizeof c),
                    x->peak_outstanding_buffers);
            if (x->heap_split) {
                char alone[80];
                snprintf(alone, sizeof alone, "the pool alone: peak reserved %s",
                         psc_fmt_bytes(x->pool_peak_reserved, c, sizeof c));
                split_line(o, x, "pool", "the pool", alone);
            }
            break;
        case RP_CACHING:
            /* one fragmentation figure: the table's i_frag; the allocator's
             * reserved against allocated is said as the two peaks */
            fprintf(o, "caching: %" PRIu64 " segments allocated, %" PRIu64 " released (cache cap %s), "
                    "peak %" PRIu64 " segments; peak reserved %s, peak allocated %s; %" PRIu64 " splits, %"
                    PRIu64 " merges\n",
                    x->segments_allocated, x->segments_released,
                    x->cache_cap == UINT64_MAX ? "unlimited" : psc_fmt_bytes(x->cache_cap, a, sizeof a),
                    x->peak_segments, psc_fmt_bytes(m->peak_reserved_bytes, b, sizeof b),
                    psc_fmt_bytes(m->peak_outstanding_bytes, c, sizeof c), x->splits, x->merges);
            if (x->heap_split) {
                char alone[120], d[32];
                snprintf(alone, sizeof alone, "the caching allocator alone: peak reserved %s, peak allocated %s",
                         psc_fmt_bytes(x->pool_peak_reserved, c, sizeof c),
                         psc_fmt_bytes(x->pool_peak_outstanding, d, sizeof d));
                split_line(o, x, "caching", "the caching allocator", alone);
            }
            break;
        case RP_ARENA:
            fprintf(o, "arena: %" PRIu64 " resets, %" PRIu64 " chunks allocated, peak %" PRIu64
                    " objects held; %" PRIu64 " lifetime violations (%s), %" PRIu64
                    " chunks pinned, peak pinned %s\n",
                    x->resets, x->chunks_allocated, x->peak_outstanding_buffers,
                    x->lifetime_violations, psc_fmt_bytes(x->violation_bytes, a, sizeof a),
                    x->pinned_chunks, psc_fmt_bytes(x->peak_pinned_bytes, b, sizeof b));
            {
                char d[32], e[32];
                fputs("arena: resets at the end of each outermost '", o);
                psc_esc_text_put(o, x->reset_marker ? x->reset_marker : "forward");
                fprintf(o, "' scope (%" PRIu64 " opened); "
                        "long-lived, made outside every scope: %" PRIu64 " objects, %s requested, region "
                        "peak %s in %" PRIu64 " chunks; scoped chunks peak %s\n",
                        x->reset_scopes, x->longlived_objects,
                        psc_fmt_bytes(x->longlived_bytes, a, sizeof a),
                        psc_fmt_bytes(x->peak_longlived_bytes, d, sizeof d), x->longlived_chunks,
                        psc_fmt_bytes(x->peak_scoped_bytes, e, sizeof e));
            }
            for (size_t k = 0; k < x->n_vstacks && k < 5; k++) {
                const rp_vstack_t *s = &x->vstacks[k];
                fprintf(o, "  %" PRIu64 " objects, %s", s->count, psc_fmt_bytes(s->bytes, a, sizeof a));
                if (!s->stack) fprintf(o, " (no stacks recorded)");
                for (uint32_t fdx = 0; fdx < s->depth && fdx < 6; fdx++)
                    fprintf(o, "%s0x%" PRIx64, fdx ? " < " : " at ", s->frames[fdx]);
                fputc('\n', o);
            }
            break;
        case RP_MALLOC:
        case RP_MALLOC_JEMALLOC:
        case RP_MALLOC_MIMALLOC:
            fprintf(o, "%s: %s%s", x->name, x->allocator, x->library ? " preloaded from " : "");
            if (x->library) psc_esc_text_put(o, x->library);
            fprintf(o, ", held = %s: peak %s, peak RSS above start %s; %.1f ns per call "
                    "(touching pages; allocator figures sampled)\n",
                    x->held_source ? x->held_source : "?", psc_fmt_bytes(m->peak_reserved_bytes, b, sizeof b),
                    psc_fmt_bytes(x->peak_rss_bytes, a, sizeof a), x->ns_per_op);
            break;
        case RP_KV_CONTIGUOUS:
        case RP_KV_RESERVE:
        case RP_KV_STEP:
        case RP_KV_PAGED:
            fprintf(o, "%s: %" PRIu64 " requests, peak %" PRIu64 " tokens stored in %" PRIu64
                    " reserved slots, utilization %.1f%% (at the peak %.1f%%)",
                    x->name, x->kv_requests, x->peak_kv_tokens, x->peak_kv_reserved_tokens,
                    100 * m->kv_utilization, 100 * m->kv_utilization_at_peak);
            if (x->policy == RP_KV_CONTIGUOUS) fprintf(o, ", context %" PRIu64, x->kv_context);
            if (x->kv_block_size) fprintf(o, ", %s %" PRIu64,
                                          x->policy == RP_KV_STEP ? "step" : "block", x->kv_block_size);
            if (x->kv_overflows) fprintf(o, ", %" PRIu64 " requests over their reservation", x->kv_overflows);
            if (!x->kv_token_bytes) fprintf(o, " (no storage size in the trace: bytes are tokens)");
            fputc('\n', o);
            break;
        default:
            break;
        }
    }
    for (size_t i = 0; i < r->n_skipped; i++) {
        fprintf(o, "skipped %s: ", r->skipped[i].name);
        psc_esc_text_put(o, r->skipped[i].reason);
        fputc('\n', o);
    }
    for (size_t i = 0; i < r->n_warnings; i++) {   /* they quote the trace's marker names */
        fputs("warning: ", o);
        psc_esc_text_put(o, r->warnings[i]);
        fputc('\n', o);
    }
}

/* The heap stream's split, the same keys for the pool and caching rows. */
static void split_json(az_json_t *j, const rp_result_t *x)
{
    az_json_u64(j, "pool_min", x->pool_min);
    az_json_u64(j, "pooled_calls", x->pooled_calls);
    az_json_u64(j, "pooled_bytes", x->pooled_bytes);
    az_json_u64(j, "site_calls", x->site_calls);
    az_json_u64(j, "site_bytes", x->site_bytes);
    az_json_u64(j, "site_stacks", x->site_stacks);
    az_json_u64(j, "small_calls", x->small_calls);
    az_json_u64(j, "small_bytes", x->small_bytes);
    az_json_u64(j, "peak_small_held_bytes", x->peak_small_held);
}

void rp_report_json(const rp_report_t *r, FILE *o)
{
    az_json_t j;
    az_json_init(&j, o, 1);
    az_json_begin(&j, NULL, '{');
    az_json_begin(&j, "trace", '{');
    az_json_str(&j, "stream", r->info.stream);
    az_json_u64(&j, "events", r->info.events);
    az_json_u64(&j, "requests", r->info.requests);
    az_json_u64(&j, "allocs", r->info.allocs);
    az_json_u64(&j, "frees", r->info.frees);
    az_json_u64(&j, "unmatched_frees", r->info.unmatched_frees);
    az_json_u64(&j, "lost_events", r->info.lost);
    az_json_f64(&j, "read_seconds", r->info.read_seconds);
    az_json_f64(&j, "seconds", r->info.seconds);
    az_json_end(&j);
    az_json_begin(&j, "policies", '[');
    for (size_t i = 0; i < r->n; i++) {
        const rp_result_t *x = &r->res[i];
        az_json_begin(&j, NULL, '{');
        az_json_str(&j, "name", x->name);
        az_result_json(&x->m, &j);
        az_json_u64(&j, "backing_frees", x->m.backing_frees);
        az_json_u64(&j, "requests", x->requests);
        az_json_f64(&j, "seconds", x->seconds);
        az_json_f64(&j, "events_per_s", x->events_per_s);
        switch (x->policy) {
        case RP_POOL:
            az_json_u64(&j, "pool_cap", x->pool_cap);
            az_json_u64(&j, "destroyed_over_cap", x->destroyed_over_cap);
            az_json_u64(&j, "reclaims_cached", x->reclaims_cached);
            az_json_u64(&j, "peak_outstanding_buffers", x->peak_outstanding_buffers);
            if (x->heap_split) {
                split_json(&j, x);
                az_json_u64(&j, "pool_peak_outstanding_bytes", x->pool_peak_outstanding);
                az_json_u64(&j, "pool_peak_reserved_bytes", x->pool_peak_reserved);
            }
            break;
        case RP_CACHING:
            if (x->cache_cap == UINT64_MAX) az_json_null(&j, "cache_cap");
            else az_json_u64(&j, "cache_cap", x->cache_cap);
            az_json_u64(&j, "segments_allocated", x->segments_allocated);
            az_json_u64(&j, "segments_released", x->segments_released);
            az_json_u64(&j, "peak_segments", x->peak_segments);
            az_json_u64(&j, "splits", x->splits);
            az_json_u64(&j, "merges", x->merges);
            if (x->heap_split) {
                split_json(&j, x);
                az_json_u64(&j, "caching_peak_allocated_bytes", x->pool_peak_outstanding);
                az_json_u64(&j, "caching_peak_reserved_bytes", x->pool_peak_reserved);
            }
            break;
        case RP_ARENA:
            az_json_u64(&j, "lifetime_violations", x->lifetime_violations);
            az_json_u64(&j, "violation_bytes", x->violation_bytes);
            az_json_u64(&j, "resets", x->resets);
            az_json_u64(&j, "chunks_allocated", x->chunks_allocated);
            az_json_u64(&j, "pinned_chunks", x->pinned_chunks);
            az_json_u64(&j, "peak_pinned_bytes", x->peak_pinned_bytes);
            az_json_u64(&j, "peak_outstanding_buffers", x->peak_outstanding_buffers);
            az_json_str(&j, "reset_marker", x->reset_marker ? x->reset_marker : "forward");
            az_json_u64(&j, "reset_scopes", x->reset_scopes);
            az_json_u64(&j, "longlived_objects", x->longlived_objects);
            az_json_u64(&j, "longlived_bytes", x->longlived_bytes);
            az_json_u64(&j, "peak_longlived_bytes", x->peak_longlived_bytes);
            az_json_u64(&j, "longlived_chunks", x->longlived_chunks);
            az_json_u64(&j, "peak_scoped_bytes", x->peak_scoped_bytes);
            az_json_begin(&j, "violation_stacks", '[');
            for (size_t k = 0; k < x->n_vstacks; k++) {
                const rp_vstack_t *s = &x->vstacks[k];
                az_json_begin(&j, NULL, '{');
                az_json_u64(&j, "stack", s->stack);
                az_json_u64(&j, "count", s->count);
                az_json_u64(&j, "bytes", s->bytes);
                az_json_begin(&j, "frames", '[');
                for (uint32_t fdx = 0; fdx < s->depth; fdx++) {
                    char hex[24];
                    snprintf(hex, sizeof hex, "0x%" PRIx64, s->frames[fdx]);
                    az_json_str(&j, NULL, hex);
                }
                az_json_end(&j);
                az_json_end(&j);
            }
            az_json_end(&j);
            break;
        case RP_MALLOC:
        case RP_MALLOC_JEMALLOC:
        case RP_MALLOC_MIMALLOC:
            az_json_str(&j, "allocator", x->allocator);
            az_json_str(&j, "held_source", x->held_source ? x->held_source : "");
            if (x->library) az_json_str(&j, "library", x->library);
            else az_json_null(&j, "library");
            az_json_f64(&j, "ns_per_op", x->ns_per_op);
            az_json_u64(&j, "peak_rss_bytes", x->peak_rss_bytes);
            break;
        case RP_KV_CONTIGUOUS:
        case RP_KV_RESERVE:
        case RP_KV_STEP:
        case RP_KV_PAGED:
            az_json_u64(&j, "kv_requests", x->kv_requests);
            az_json_u64(&j, "peak_kv_tokens", x->peak_kv_tokens);
            az_json_u64(&j, "peak_kv_reserved_tokens", x->peak_kv_reserved_tokens);
            az_json_f64(&j, "kv_utilization_at_peak", x->m.kv_utilization_at_peak);
            az_json_u64(&j, "kv_token_bytes", x->kv_token_bytes);
            az_json_u64(&j, "kv_overflows", x->kv_overflows);
            if (x->policy == RP_KV_CONTIGUOUS) az_json_u64(&j, "kv_context", x->kv_context);
            if (x->kv_block_size) az_json_u64(&j, x->policy == RP_KV_STEP ? "kv_step" : "kv_block_size",
                                              x->kv_block_size);
            break;
        default:
            break;
        }
        az_json_end(&j);
    }
    az_json_end(&j);
    az_json_begin(&j, "skipped", '[');
    for (size_t i = 0; i < r->n_skipped; i++) {
        az_json_begin(&j, NULL, '{');
        az_json_str(&j, "policy", r->skipped[i].name);
        az_json_str(&j, "reason", r->skipped[i].reason);
        az_json_end(&j);
    }
    az_json_end(&j);
    az_json_begin(&j, "warnings", '[');
    for (size_t i = 0; i < r->n_warnings; i++) az_json_str(&j, NULL, r->warnings[i]);
    az_json_end(&j);
    az_json_end(&j);
}
