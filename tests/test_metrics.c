/* test_metrics.c — the metrics library against hand-computed answers. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "json.h"
#include "metrics.h"
#include "metrics_json.h"
#include "poolscope/error.h"
#include "units.h"

static az_metrics_t *mk(void)
{
    int err = 0;
    az_metrics_t *m = az_create(NULL, &err);
    assert_non_null(m);
    return m;
}

/* "a b c b d d a": the second a has distance 3, the second b 1, the second d 0 */
static void test_reuse_distance_abcbdda(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    const char *seq = "abcbdda";
    int64_t want[] = { -1, -1, -1, 1, -1, 0, 3 };
    for (int i = 0; seq[i]; i++) {
        uint64_t addr = 0x1000 + (uint64_t)(seq[i] - 'a') * 0x100;
        assert_int_equal(az_alloc(m, (uint64_t)i * 10, addr, 32, 32, 32, 0), 0);
        assert_int_equal(az_state(m)->last_reuse_distance, want[i]);
        assert_int_equal(az_free(m, (uint64_t)i * 10 + 5, addr), 0);
    }
    az_finish(m, 100);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.reuse_samples, 3);
    assert_int_equal(r.distance_p50, 1);
    assert_int_equal(r.distance_p90, 3);
    assert_int_equal(r.fresh_addresses, 4);
    assert_true(r.fresh_address_ratio > 4.0 / 7 - 1e-9 && r.fresh_address_ratio < 4.0 / 7 + 1e-9);
    /* same size everywhere: reuse of the last freed address happens for d d only */
    assert_int_equal(r.same_address_hits, 1);
    assert_int_equal(r.distance_hist[0], 1);    /* 0 */
    assert_int_equal(r.distance_hist[1], 1);    /* 1 */
    assert_int_equal(r.distance_hist[2], 1);    /* 2..3 */
    az_destroy(m);
}

/* Random sequences, checked against a quadratic brute force, across several
 * renumberings of the Fenwick tree's stamps. */
static void test_reuse_distance_matches_brute_force(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    enum { N = 30000, A = 700 };
    uint64_t *hist = malloc(N * sizeof *hist);
    assert_non_null(hist);
    srand(7);
    for (int i = 0; i < N; i++) {
        uint64_t a = (uint64_t)(rand() % A) * 16;
        hist[i] = a;
        az_alloc(m, (uint64_t)i, a, 8, 8, 8, 0);
        az_free(m, (uint64_t)i, a);
        /* brute force: distinct addresses since the previous use of a */
        int64_t want = -1;
        for (int k = i - 1; k >= 0; k--)
            if (hist[k] == a) {
                uint8_t seen[A] = { 0 };
                int64_t d = 0;
                for (int q = k + 1; q < i; q++)
                    if (!seen[hist[q] / 16]) { seen[hist[q] / 16] = 1; d++; }
                want = d;
                break;
            }
        if (i % 97 == 0 || i > N - 50) assert_int_equal(az_state(m)->last_reuse_distance, want);
        if (want < 0 && az_state(m)->last_reuse_distance != -1) fail();
    }
    free(hist);
    az_destroy(m);
}

/* Exact Mattson distances at every allocation of a long stream over many
 * distinct addresses (table growth, several renumberings with the stamp
 * range growing, recent re-uses counted by popcount and old ones through
 * the tree), against a brute force over the last-use times; then the
 * sample count, maximum and histogram. */
static void test_reuse_distance_every_event_many_addresses(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    enum { N = 50000, A = 6000, RECENT = 48, HELD = 400 };
    int64_t *last = malloc(A * sizeof *last);
    uint64_t *recent = calloc(RECENT, sizeof *recent), held[HELD] = { 0 };
    uint64_t hist[AZ_HIST_BUCKETS] = { 0 }, samples = 0, dmax = 0;
    assert_non_null(last);
    assert_non_null(recent);
    for (int a = 0; a < A; a++) last[a] = -1;
    uint64_t x = 12345, limit = 64;          /* addresses come into use gradually */
    for (int i = 0; i < N; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint64_t a;
        if (x % 3 == 0) a = recent[(x >> 8) % RECENT];            /* temporal locality */
        else a = (x >> 16) % limit;
        if (limit < A && i % 8 == 0) limit++;
        int64_t want = -1;
        if (last[a] >= 0) {
            want = 0;
            for (int b = 0; b < A; b++) if (last[b] > last[a]) want++;
        }
        uint64_t addr = 0x7f0000000000ull + a * 48;
        /* some objects stay live for a while (the live table grows and shrinks) */
        uint64_t *h = &held[(x >> 24) % HELD];
        int keep = (x >> 40) % 4 == 0 && !*h;
        int live_already = 0;
        for (int k = 0; k < HELD; k++) if (held[k] == addr + 1) live_already = 1;
        if (live_already) continue;           /* a double allocation is another test */
        assert_int_equal(az_alloc(m, (uint64_t)i, addr, 16, 16, 16, 0), 0);
        last[a] = i;
        recent[i % RECENT] = a;
        assert_int_equal(az_state(m)->last_reuse_distance, want);
        if (want >= 0) {
            samples++;
            hist[az_log2_bucket((uint64_t)want)]++;
            if ((uint64_t)want > dmax) dmax = (uint64_t)want;
        }
        if (keep) *h = addr + 1;
        else az_free(m, (uint64_t)i, addr);
        if ((x >> 50) % 5 == 0) {             /* release one held object */
            uint64_t *r = &held[(x >> 30) % HELD];
            if (*r) { assert_int_equal(az_free(m, (uint64_t)i, *r - 1), 0); *r = 0; }
        }
    }
    az_finish(m, N);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.reuse_samples, samples);
    assert_int_equal(r.distance_max, dmax);
    for (int b = 0; b < AZ_HIST_BUCKETS; b++) assert_int_equal(r.distance_hist[b], hist[b]);
    assert_int_equal(r.reuse_capped, 0);
    assert_true(r.reuse_tracked > 4096);
    free(last);
    free(recent);
    az_destroy(m);
}

/* The reuse table doubles in place (entries moved within one mapping):
 * after many doublings every address must still be found. A addresses
 * (address 0, a run 16 apart, then random ones) allocated once, then again
 * in the same order: each second allocation is a reuse at distance A - 1;
 * an entry lost or misplaced by a doubling would be fresh (-1). */
static void test_reuse_table_keeps_every_address_across_doublings(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    enum { A = 150000 };
    uint64_t *addr = malloc(A * sizeof *addr), x = 88172645463325252ull;
    assert_non_null(addr);
    for (int i = 0; i < A; i++) {
        if (i < A / 2) addr[i] = (uint64_t)i * 16;          /* includes address 0 */
        else { x ^= x << 13; x ^= x >> 7; x ^= x << 17; addr[i] = x | 1; }
    }
    for (int i = 0; i < A; i++) {
        assert_int_equal(az_alloc(m, (uint64_t)i, addr[i], 8, 8, 8, 0), 0);
        assert_int_equal(az_state(m)->last_reuse_distance, -1);
        az_free(m, (uint64_t)i, addr[i]);
    }
    for (int i = 0; i < A; i++) {
        assert_int_equal(az_alloc(m, (uint64_t)(A + i), addr[i], 8, 8, 8, 0), 0);
        assert_int_equal(az_state(m)->last_reuse_distance, A - 1);
        az_free(m, (uint64_t)(A + i), addr[i]);
    }
    az_finish(m, 2 * A);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.reuse_tracked, A);
    assert_int_equal(r.reuse_samples, A);
    free(addr);
    az_destroy(m);
}

/* With a cap, only the first reuse_cap addresses are tracked: their
 * distances count tracked addresses only, the others report -2, and this
 * holds across renumberings. */
static void test_reuse_cap_distances_over_tracked_addresses(void **st)
{
    (void)st;
    enum { N = 40000, A = 900, CAP = 300 };
    az_cfg_t cfg = { .reuse_cap = CAP };
    int err;
    az_metrics_t *m = az_create(&cfg, &err);
    assert_non_null(m);
    int64_t last[A];
    int tracked[A], n_tracked = 0;
    for (int a = 0; a < A; a++) { last[a] = -1; tracked[a] = 0; }
    uint64_t x = 777;
    for (int i = 0; i < N; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint64_t a = (x >> 20) % A;
        if (!tracked[a] && last[a] < 0 && n_tracked < CAP) { tracked[a] = 1; n_tracked++; }
        int64_t want = -2;
        if (tracked[a]) {
            want = -1;
            if (last[a] >= 0) {
                want = 0;
                for (int b = 0; b < A; b++) if (tracked[b] && last[b] > last[a]) want++;
            }
        }
        az_alloc(m, (uint64_t)i, a * 64, 8, 8, 8, 0);
        az_free(m, (uint64_t)i, a * 64);
        if (tracked[a]) last[a] = i;
        assert_int_equal(az_state(m)->last_reuse_distance, want);
    }
    az_result_t r;
    az_finish(m, N);
    az_result(m, &r);
    assert_true(r.reuse_capped);
    assert_int_equal(r.reuse_tracked, CAP);
    az_destroy(m);
}

static void test_reuse_cap_is_reported(void **st)
{
    (void)st;
    az_cfg_t cfg = { .reuse_cap = 100 };
    int err;
    az_metrics_t *m = az_create(&cfg, &err);
    for (uint64_t i = 0; i < 1000; i++) { az_alloc(m, i, i * 64, 8, 8, 8, 0); az_free(m, i, i * 64); }
    az_finish(m, 2000);
    az_result_t r;
    az_result(m, &r);
    assert_true(r.reuse_capped);
    assert_int_equal(r.reuse_tracked, 100);
    az_destroy(m);
}

/* The default cap is the most addresses a 2^20-slot table holds: up to it
 * nothing is capped and the table stays at 12 MiB (at 1 << 20 the last
 * addresses doubled it to 24 MiB); one more address is capped. az_finish
 * frees the tracker and keeps its figures; an update after it counts no
 * reuse and touches no freed table. */
static void test_reuse_default_cap_fits_2p20_slots_and_finish_frees_it(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    const uint64_t cap = AZ_REUSE_CAP_DEFAULT;
    assert_true(az_reuse_bytes(m) > 0);
    for (uint64_t i = 0; i < cap; i++) {
        assert_int_equal(az_alloc(m, i, (i + 1) * 16, 8, 8, 8, 0), 0);
        assert_int_equal(az_state(m)->last_reuse_distance, -1);
        az_free(m, i, (i + 1) * 16);
    }
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.reuse_capped, 0);
    assert_int_equal(r.reuse_tracked, cap);
    size_t table = ((size_t)1 << 20) * 12;
    assert_true(az_reuse_bytes(m) >= table);
    assert_true(az_reuse_bytes(m) < table + table / 4);    /* + bitmap, tree, last-freed map */
    /* the first address again: every other one came since */
    assert_int_equal(az_alloc(m, cap, 16, 8, 8, 8, 0), 0);
    assert_int_equal(az_state(m)->last_reuse_distance, (int64_t)cap - 1);
    az_free(m, cap, 16);
    /* one address more than the cap: untracked, and said so */
    assert_int_equal(az_alloc(m, cap + 1, (cap + 1) * 16, 8, 8, 8, 0), 0);
    assert_int_equal(az_state(m)->last_reuse_distance, -2);
    az_free(m, cap + 1, (cap + 1) * 16);
    assert_true(az_reuse_bytes(m) < table + table / 4);
    az_finish(m, cap + 2);
    assert_int_equal(az_reuse_bytes(m), 0);
    az_result(m, &r);
    assert_int_equal(r.reuse_capped, 1);
    assert_int_equal(r.reuse_tracked, cap);
    assert_int_equal(r.reuse_samples, 1);
    assert_int_equal(r.distance_max, cap - 1);
    assert_int_equal(r.fresh_addresses, cap + 1);
    assert_int_equal(r.same_address_hits, 0);            /* never at the address freed just before */
    assert_int_equal(r.allocs, cap + 2);
    /* after az_finish: counted as an allocation, no reuse figure moves */
    assert_int_equal(az_alloc(m, cap + 3, (cap + 1) * 16, 8, 8, 8, 0), 0);   /* the last freed */
    assert_int_equal(az_free(m, cap + 3, (cap + 1) * 16), 0);
    az_result(m, &r);
    assert_int_equal(r.allocs, cap + 3);
    assert_int_equal(r.reuse_samples, 1);
    assert_int_equal(r.fresh_addresses, cap + 1);
    assert_int_equal(r.same_address_hits, 0);
    assert_int_equal(az_reuse_bytes(m), 0);
    az_destroy(m);
}

static void test_peak_live_and_internal_frag(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_alloc(m, 10, 0xa0, 10, 16, 10, 1);
    az_alloc(m, 20, 0xb0, 20, 32, 20, 2);     /* live req 30, rnd 48: the peak */
    az_free(m, 30, 0xa0);
    az_alloc(m, 40, 0xc0, 5, 16, 5, 1);       /* 25 */
    az_finish(m, 50);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.peak_live_bytes, 30);
    assert_int_equal(r.peak_live_t, 20);
    assert_int_equal(r.peak_live_count, 2);
    assert_true(r.internal_frag > 0.375 - 1e-12 && r.internal_frag < 0.375 + 1e-12);
    /* time-weighted: [10,20) 6/16, [20,30) 18/48, [30,40) 12/32, [40,50) 23/48 */
    double want = (6.0 / 16 + 18.0 / 48 + 12.0 / 32 + 23.0 / 48) / 4;
    assert_true(r.internal_frag_avg > want - 1e-9 && r.internal_frag_avg < want + 1e-9);
    assert_int_equal(r.total_allocated_bytes, 35);
    assert_int_equal(r.leaked_bytes, 25);
    assert_int_equal(r.leaked_count, 2);
    assert_int_equal(r.peak_reserved_bytes, 48);    /* no policy figure: live rnd */
    assert_int_equal(r.temporary, 0);
    size_t n;
    const az_site_t *s = az_sites(m, &n);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        if (s[i].stack == 1) { assert_int_equal(s[i].peak_bytes, 10); assert_int_equal(s[i].live_bytes, 5); }
        else { assert_int_equal(s[i].peak_bytes, 20); assert_int_equal(s[i].live_bytes, 20); }
    }
    az_destroy(m);
}

/* The per-site peak is kept lazily: a site untouched since the peak keeps
 * its value at the peak; a later, lower state does not overwrite it. */
static void test_site_peak_contribution_after_later_changes(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_alloc(m, 1, 0x10, 100, 100, 100, 1);
    az_alloc(m, 2, 0x20, 50, 50, 50, 2);       /* peak 150: s1 100, s2 50 */
    az_free(m, 3, 0x10);
    az_alloc(m, 4, 0x30, 60, 60, 60, 2);       /* 110 */
    az_alloc(m, 5, 0x40, 30, 30, 30, 1);       /* 140 */
    size_t n;
    const az_site_t *s = az_sites(m, &n);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(s[i].peak_bytes, s[i].stack == 1 ? 100 : 50);
    az_destroy(m);
}

static void test_same_address_reuse_by_size_key(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_alloc(m, 1, 0x100, 32, 32, 32, 0);
    az_free(m, 2, 0x100);
    az_alloc(m, 3, 0x100, 32, 32, 32, 0);      /* same size, last freed: hit */
    az_free(m, 4, 0x100);
    az_alloc(m, 5, 0x100, 64, 64, 64, 0);      /* other size: no */
    az_alloc(m, 6, 0x200, 32, 32, 32, 0);      /* last freed 32 was 0x100: no */
    az_finish(m, 7);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.same_address_hits, 1);
    assert_true(r.same_address_reuse > 0.25 - 1e-12 && r.same_address_reuse < 0.25 + 1e-12);
    assert_int_equal(r.temporary, 2);          /* freed before another allocation */
    az_destroy(m);
}

/* A size key that is neither the requested nor the granted size (kept
 * apart from the live entry) still decides same_address_reuse, and is
 * forgotten with its object. */
static void test_same_address_reuse_by_a_key_of_its_own(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_alloc(m, 1, 0x100, 10, 16, 99, 0);
    az_alloc(m, 2, 0x200, 10, 16, 16, 0);      /* key = rnd */
    az_free(m, 3, 0x100);                      /* the latest freed of key 99 */
    az_free(m, 4, 0x200);                      /* ... and of key 16 */
    az_alloc(m, 5, 0x100, 10, 16, 99, 0);      /* hit */
    az_alloc(m, 6, 0x200, 10, 16, 98, 0);      /* no freed address of key 98: no */
    az_free(m, 7, 0x200);
    az_alloc(m, 8, 0x200, 10, 16, 98, 0);      /* hit: its key came back with the free */
    az_alloc(m, 9, 0x300, 10, 16, 99, 0);
    az_free(m, 10, 0x300);                     /* the latest freed of key 99 is 0x300 ... */
    az_alloc(m, 11, 0x100, 10, 16, 10, 0);     /* ... until this double alloc frees the key-99 object at 0x100 */
    az_free(m, 12, 0x100);
    az_alloc(m, 13, 0x100, 10, 16, 99, 0);     /* hit, only if that free knew its key was 99 */
    az_finish(m, 14);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.same_address_hits, 3);
    assert_int_equal(r.double_allocs, 1);
    assert_int_equal(r.allocs, 8);
    az_destroy(m);
}

static void test_phases_and_allocs_per_decode_step(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    uint64_t t = 0;
    az_calls(m, 5, 500);                        /* outside any phase */
    az_mark(m, t++, AZ_MARK_BEGIN, "prefill", 1);
    az_calls(m, 7, 700);
    az_mark(m, t++, AZ_MARK_END, "prefill", 1);
    int per_step[] = { 10, 10, 10, 10, 2, 4 };  /* steady state: steps 5 and 6 -> 3 */
    for (int i = 0; i < 6; i++) {
        az_mark(m, t++, AZ_MARK_BEGIN, "decode", (uint64_t)i);
        az_calls(m, (uint64_t)per_step[i], 16);
        az_alloc_calls(m, (uint64_t)per_step[i] / 2);   /* half of them allocate */
        az_mark(m, t++, AZ_MARK_END, "decode", (uint64_t)i);
        az_calls(m, 100, 0);                    /* between steps: not a step's */
    }
    az_mark(m, t++, AZ_MARK_POINT, "tick", 0);
    az_calls(m, 3, 30);
    az_mark(m, t++, AZ_MARK_POINT, "tick", 0);
    az_calls(m, 4, 40);
    az_finish(m, t);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.n_phases, 3);
    assert_string_equal(r.phases[0].name, "prefill");
    assert_int_equal(r.phases[0].count, 1);
    assert_int_equal(r.phases[0].heap_calls, 7);
    assert_int_equal(r.phases[0].heap_bytes, 700);
    assert_string_equal(r.phases[1].name, "decode");
    assert_int_equal(r.phases[1].count, 6);
    assert_int_equal(r.phases[1].heap_calls, 46);
    assert_int_equal(r.phases[1].heap_bytes, 6 * 16);
    assert_string_equal(r.phases[2].name, "tick");
    assert_int_equal(r.phases[2].count, 2);
    /* a point marker is an instant: no span, no calls of its own (it used
     * to run from the first point to the end of the trace) */
    assert_false(r.phases[2].spans);
    assert_int_equal(r.phases[2].heap_calls, 0);
    assert_true(r.phases[1].spans);
    assert_int_equal(r.decode_steps, 6);
    assert_int_equal(r.phases[1].alloc_calls, 5 * 4 + 1 + 2);
    /* steady steps 5 and 6: 2 and 4 heap calls, 1 and 2 of them allocations */
    assert_true(r.has_decode_steps);
    assert_true(r.heap_calls_per_decode_step > 3 - 1e-12 && r.heap_calls_per_decode_step < 3 + 1e-12);
    assert_true(r.allocs_per_decode_step > 1.5 - 1e-12 && r.allocs_per_decode_step < 1.5 + 1e-12);
    az_destroy(m);
}

/* The report's keys for figures that may not apply: null, never 0. */
static void test_not_applicable_is_null_in_json(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_calls(m, 3, 30);
    az_finish(m, 10);
    az_result_t r;
    az_result(m, &r);
    assert_false(r.has_decode_steps);
    assert_false(r.has_kv);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    az_json_t j;
    az_json_init(&j, f, 0);
    az_json_begin(&j, NULL, '{');
    az_result_steps_json(&r, &j);
    az_json_begin(&j, "kv", '{');
    az_result_kv_json(&r, &j);
    az_json_end(&j);
    az_json_end(&j);
    fclose(f);
    int err;
    az_jdoc_t *d = az_json_parse(buf, len, &err, NULL, 0);
    assert_non_null(d);
    const char *nulls[] = { "allocs_per_decode_step", "heap_calls_per_decode_step", "kv.kv_utilization",
                            "kv.kv_utilization_per_step", "kv.kv_waste_ratio", "kv.kv_utilization_at_peak" };
    for (size_t i = 0; i < sizeof nulls / sizeof nulls[0]; i++) {
        const az_jv_t *v = az_json_path(az_json_root(d), nulls[i]);
        assert_non_null(v);
        assert_int_equal(v->type, AZ_JV_NULL);
    }
    assert_int_equal(az_json_path(az_json_root(d), "decode_steps")->type, AZ_JV_NUM);
    az_json_free(d);
    free(buf);
    az_destroy(m);
}

/* KV utilization per decode step: sampled as each step starts, so the
 * same steps give the same figure however long they took. */
static void test_kv_utilization_per_step_ignores_timing(void **st)
{
    (void)st;
    double got[2];
    for (int run = 0; run < 2; run++) {
        az_metrics_t *m = mk();
        uint64_t t = 0, gap = run ? 1000 : 7;       /* the second run is slower, unevenly */
        az_mark(m, t, AZ_MARK_BEGIN, "decode", 0); /* no KV yet: no sample */
        az_mark(m, t += gap, AZ_MARK_END, "decode", 0);
        az_kv(m, t += gap, 8, 1, 16);               /* 8/16 */
        az_mark(m, t += gap, AZ_MARK_BEGIN, "decode", 1);
        az_kv(m, t += 3 * gap, 16, 1, 16);          /* 16/16 */
        az_mark(m, t += gap, AZ_MARK_END, "decode", 1);
        az_mark(m, t += gap * (run ? 50 : 1), AZ_MARK_BEGIN, "decode", 2);
        az_kv(m, t += gap, 17, 2, 16);              /* 17/32 */
        az_mark(m, t += gap, AZ_MARK_END, "decode", 2);
        az_mark(m, t += gap, AZ_MARK_BEGIN, "decode", 3);
        az_mark(m, t += gap, AZ_MARK_END, "decode", 3);
        az_kv(m, t += gap, 0, 0, 16);
        az_finish(m, t += gap);
        az_result_t r;
        az_result(m, &r);
        assert_int_equal(r.kv_step_samples, 3);
        got[run] = r.kv_utilization_per_step;
        az_destroy(m);
    }
    double want = (0.5 + 1.0 + 17.0 / 32) / 3;
    assert_true(fabs(got[0] - want) < 1e-12);
    assert_true(got[0] == got[1]);
}

static void test_kv_waste(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_kv(m, 100, 0, 2, 16);                    /* 2 blocks, empty: 0 for 100 ns */
    az_kv(m, 200, 24, 2, 16);                   /* 24/32 = 0.75 for 100 ns */
    az_kv(m, 300, 40, 3, 16);                   /* 40/48 for 100 ns: the peak of blocks */
    az_kv(m, 400, 0, 0, 16);
    az_finish(m, 500);
    az_result_t r;
    az_result(m, &r);
    assert_true(r.has_kv);
    assert_int_equal(r.peak_kv_blocks, 3);
    double util = (0 + 0.75 + 40.0 / 48) / 3;
    assert_true(r.kv_utilization > util - 1e-9 && r.kv_utilization < util + 1e-9);
    assert_true(r.kv_waste_ratio > 1 - util - 1e-9 && r.kv_waste_ratio < 1 - util + 1e-9);
    assert_true(r.kv_utilization_at_peak > 40.0 / 48 - 1e-9 && r.kv_utilization_at_peak < 40.0 / 48 + 1e-9);
    az_destroy(m);
}

static void test_pool_counters_and_reserved(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_acquire(m, 0); az_backing(m, 1, 0);
    az_alloc(m, 1, 1, 100, 128, 128, 0);
    az_reserved(m, 1, 128, 0);
    az_free(m, 2, 1);
    az_reserved(m, 2, 0, 128);
    az_acquire(m, 1);
    az_alloc(m, 3, 1, 120, 128, 128, 0);
    az_reserved(m, 3, 128, 0);
    az_finish(m, 4);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.acquires, 2);
    assert_int_equal(r.hits, 1);
    assert_true(r.hit_rate == 0.5);
    assert_int_equal(r.backing_allocs, 1);
    assert_int_equal(r.peak_reserved_bytes, 128);
    assert_int_equal(r.peak_cached_bytes, 128);
    assert_int_equal(r.peak_outstanding_bytes, 128);
    assert_int_equal(r.peak_live_bytes, 120);
    assert_true(r.same_address_reuse == 0.5);
    az_destroy(m);
}

static void test_counting_window(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_set_counting(m, 0);
    az_alloc(m, 1, 0x10, 1000, 1000, 1000, 0);  /* live, not counted */
    az_set_counting(m, 1);
    az_alloc(m, 2, 0x20, 10, 10, 10, 0);
    az_free(m, 3, 0x10);                        /* the free is still matched */
    az_finish(m, 4);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.allocs, 1);
    assert_int_equal(r.total_allocated_bytes, 10);
    assert_int_equal(r.peak_live_bytes, 1010);  /* the true live set in the window */
    assert_int_equal(r.peak_window_live_bytes, 10);   /* of it, allocated in the window */
    assert_int_equal(r.unmatched_frees, 0);
    az_destroy(m);
}

/* The window's own peak: objects allocated in the window, held at once;
 * what was live before and is freed inside does not lower it (a peak minus
 * the live set at the start would), a second window adds to what the first
 * left live. */
static void test_counting_window_own_peak(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    az_set_counting(m, 0);
    az_alloc(m, 1, 0x10, 1000, 1000, 1000, 0);
    az_set_counting(m, 1);
    az_free(m, 2, 0x10);                        /* the older object goes first */
    az_alloc(m, 3, 0x20, 600, 600, 600, 0);
    az_alloc(m, 4, 0x30, 300, 300, 300, 0);     /* 900 of the window's own */
    az_free(m, 5, 0x20);
    az_set_counting(m, 0);
    az_alloc(m, 6, 0x40, 5000, 5000, 5000, 0);  /* outside: not in it */
    az_set_counting(m, 1);
    az_alloc(m, 7, 0x50, 700, 700, 700, 0);     /* 300 left live + 700 */
    az_finish(m, 8);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.peak_window_live_bytes, 1000);
    assert_int_equal(r.peak_live_bytes, 6000);
    assert_int_equal(r.leaked_bytes, 1000);
    az_destroy(m);

    m = mk();                                   /* no window: the peak itself */
    az_alloc(m, 1, 0x10, 100, 100, 100, 0);
    az_alloc(m, 2, 0x20, 50, 50, 50, 0);
    az_free(m, 3, 0x10);
    az_finish(m, 4);
    az_result(m, &r);
    assert_int_equal(r.peak_window_live_bytes, r.peak_live_bytes);
    assert_int_equal(r.peak_window_live_bytes, 150);
    az_destroy(m);
}

static void test_unmatched_free_and_double_alloc(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    assert_int_equal(az_free(m, 1, 0x999), PSC_ENOENT);
    az_alloc(m, 2, 0x10, 8, 8, 8, 0);
    az_alloc(m, 3, 0x10, 16, 16, 16, 0);
    az_finish(m, 4);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.unmatched_frees, 1);
    assert_int_equal(r.double_allocs, 1);
    assert_int_equal(r.leaked_bytes, 16);
    az_destroy(m);
}

/* az_alloc_obj / az_free_obj (objects numbered by the caller, as replay's
 * stream slots) against az_alloc / az_free on the same stream: a live set of
 * up to 600 objects with numbers recycled most recently freed first, fresh
 * and reused addresses, three size keys (req, rnd, one of its own), sites
 * and reserved updates: every result the same, to the bit. */
static void test_alloc_obj_same_results_as_by_address(void **st)
{
    (void)st;
    int err = 0;
    az_cfg_t cfg = { .reuse_cap = 0 };
    az_metrics_t *a = az_create(&cfg, &err), *b = az_create(&cfg, &err);
    assert_non_null(a);
    assert_non_null(b);
    enum { N = 600 };
    uint64_t addr[N], req[N], rnd[N], key[N];
    uint32_t free_nums[N], n_free = 0, next = 0, live[N], n_live = 0;
    uint64_t x = 99, t = 0, next_addr = 0x10000;
    for (int i = 0; i < 40000; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        t += (x >> 60) & 3;                       /* times repeat sometimes */
        if (n_live < N && (n_live == 0 || (x >> 33) % 5 < 3)) {
            int fresh = !n_free;
            uint32_t o = n_free ? free_nums[--n_free] : next++;
            /* a third of the time the address the number had before (each
             * address belongs to one number: no two live objects share one) */
            /* ... with the size it had there (as a pool's buffer comes back),
             * so that same_address_reuse hangs on each kind of size key */
            if (fresh || (x >> 20) % 3 != 0) {
                addr[o] = next_addr += 64 * (1 + (x >> 50) % 9);
                req[o] = 1 + (x >> 40) % 3000;
                rnd[o] = req[o] + (x >> 36) % 3 * 16;
                key[o] = (x >> 30) % 3 == 0 ? req[o] : (x >> 30) % 3 == 1 ? rnd[o] : req[o] | 1ull << 40;
            }
            uint32_t stack = (uint32_t)((x >> 44) % 7);
            assert_int_equal(az_alloc(a, t, addr[o], req[o], rnd[o], key[o], stack), 0);
            assert_int_equal(az_alloc_obj(b, o, t, addr[o], req[o], rnd[o], key[o], stack), 0);
            live[n_live++] = o;
        } else {
            uint32_t k = (uint32_t)((x >> 24) % n_live), o = live[k];
            live[k] = live[--n_live];
            assert_int_equal(az_free(a, t, addr[o]), 0);
            assert_int_equal(az_free_obj(b, o, t, addr[o]), 0);
            free_nums[n_free++] = o;
        }
        if (i % 97 == 0) {
            az_reserved(a, t, az_state(a)->live_rnd_bytes + 4096, (x >> 52) % 8192);
            az_reserved(b, t, az_state(b)->live_rnd_bytes + 4096, (x >> 52) % 8192);
        }
        assert_int_equal(az_state(a)->last_reuse_distance, az_state(b)->last_reuse_distance);
    }
    az_finish(a, t + 10);
    az_finish(b, t + 10);
    az_result_t ra, rb;
    az_result(a, &ra);
    az_result(b, &rb);
    assert_true(ra.reuse_samples > 1000 && ra.same_address_hits > 0 && ra.fresh_addresses > 0);
    assert_true(ra.leaked_count > 0);
    ra.phases = rb.phases = NULL;
    assert_int_equal(ra.n_phases, rb.n_phases);
    assert_memory_equal(&ra, &rb, sizeof ra);
    az_destroy(a);
    az_destroy(b);
}

/* A free that names a number not live, or live at another address, is an
 * unmatched free; an allocation at a live number frees the object first,
 * counted as a double allocation. */
static void test_alloc_obj_unmatched_and_double(void **st)
{
    (void)st;
    az_metrics_t *m = mk();
    assert_int_equal(az_alloc_obj(m, 3, 10, 0x1000, 100, 112, 100, 0), 0);
    assert_int_equal(az_free_obj(m, 3, 20, 0x2000), PSC_ENOENT);      /* another address */
    assert_int_equal(az_free_obj(m, 5000, 20, 0x1000), PSC_ENOENT);   /* never used */
    assert_int_equal(az_free_obj(m, 4, 20, 0x1000), PSC_ENOENT);      /* not live */
    assert_int_equal(az_alloc_obj(m, 3, 30, 0x3000, 50, 64, 50, 0), 0);   /* 3 still live */
    assert_int_equal(az_state(m)->live_bytes, 50);
    assert_int_equal(az_state(m)->live_count, 1);
    assert_int_equal(az_free_obj(m, 3, 40, 0x1000), PSC_ENOENT);      /* the old place is gone */
    assert_int_equal(az_free_obj(m, 3, 40, 0x3000), 0);
    assert_int_equal(az_free_obj(m, 3, 50, 0x3000), PSC_ENOENT);      /* twice */
    az_finish(m, 60);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.unmatched_frees, 5);
    assert_int_equal(r.double_allocs, 1);
    assert_int_equal(r.allocs, 2);
    assert_int_equal(r.frees, 2);
    assert_int_equal(r.peak_live_bytes, 100);
    assert_int_equal(r.leaked_bytes, 0);
    az_destroy(m);
}

static void test_glibc_usable(void **st)
{
    (void)st;
    assert_int_equal(az_glibc_usable(1), 24);
    assert_int_equal(az_glibc_usable(24), 24);
    assert_int_equal(az_glibc_usable(25), 40);
    assert_int_equal(az_glibc_usable(1000), 1000);
    assert_int_equal(az_glibc_usable(200000), 200688);
}

static void test_json_roundtrip_and_paths(void **st)
{
    (void)st;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    az_json_t j;
    az_json_init(&j, f, 1);
    az_json_begin(&j, NULL, '{');
    az_json_u64(&j, "events", 123);
    az_json_begin(&j, "pool", '{');
    az_json_f64(&j, "hit_rate", 0.75);
    az_json_end(&j);
    az_json_begin(&j, "phases", '{');
    az_json_begin(&j, "decode", '{');
    az_json_u64(&j, "heap_calls", 18446744073709551615ull);
    az_json_end(&j);
    az_json_end(&j);
    az_json_str(&j, "s", "a\"b\\c\n");
    az_json_begin(&j, "arr", '[');
    az_json_u64(&j, NULL, 1);
    az_json_u64(&j, NULL, 2);
    az_json_end(&j);
    az_json_end(&j);
    fclose(f);
    int err;
    char eb[128];
    az_jdoc_t *d = az_json_parse(buf, len, &err, eb, sizeof eb);
    assert_non_null(d);
    const az_jv_t *r = az_json_root(d);
    assert_int_equal(az_json_path(r, "events")->u, 123);
    assert_true(az_json_path(r, "pool.hit_rate")->num == 0.75);
    assert_int_equal(az_json_path(r, "phases.decode.heap_calls")->u, 18446744073709551615ull);
    assert_string_equal(az_json_get(r, "s")->str, "a\"b\\c\n");
    assert_int_equal(az_json_get(r, "arr")->n, 2);
    assert_null(az_json_path(r, "pool.nope"));
    az_json_free(d);
    free(buf);
    const char *bad = "{\"a\": 1,\n \"b\" 2}";
    assert_null(az_json_parse(bad, strlen(bad), &err, eb, sizeof eb));
    assert_int_equal(err, PSC_ECORRUPT);
    assert_non_null(strstr(eb, "line 2"));
}

static void test_units(void **st)
{
    (void)st;
    double v;
    assert_int_equal(az_parse_bytes("64MiB", &v), 0); assert_true(v == 64.0 * 1048576);
    assert_int_equal(az_parse_bytes("1.5 GiB", &v), 0); assert_true(v == 1.5 * 1073741824.0);
    assert_int_equal(az_parse_bytes("0", &v), 0); assert_true(v == 0);
    assert_int_equal(az_parse_bytes("0.25", &v), 0); assert_true(v == 0.25);
    assert_int_equal(az_parse_bytes("12 parsecs", &v), PSC_EINVAL);
    uint64_t t;
    assert_int_equal(az_parse_time_ns("200ms", &t), 0); assert_int_equal(t, 200000000);
    assert_int_equal(az_parse_time_ns("1.5", &t), 0); assert_int_equal(t, 1500000000);
    assert_int_equal(az_parse_time_ns("-1s", &t), PSC_EINVAL);
}

/* The step marker's points bound steps: each runs to the next point, the
 * last to the end. 3 points with 2, 4, 6 calls after them: 12 calls. */
static void test_step_points_span_to_the_next(void **st)
{
    (void)st;
    int err;
    az_metrics_t *m = az_create(NULL, &err);
    assert_non_null(m);
    az_calls(m, 9, 0);                           /* before the first step */
    for (uint64_t i = 0; i < 3; i++) {
        az_mark(m, i, AZ_MARK_POINT, "decode", 0);
        az_calls(m, 2 * (i + 1), 8);
    }
    az_finish(m, 3);
    az_result_t r;
    az_result(m, &r);
    assert_int_equal(r.n_phases, 1);
    assert_true(r.phases[0].spans);
    assert_int_equal(r.phases[0].count, 3);
    assert_int_equal(r.phases[0].heap_calls, 12);
    assert_int_equal(r.decode_steps, 3);
    az_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reuse_distance_abcbdda),
        cmocka_unit_test(test_reuse_distance_matches_brute_force),
        cmocka_unit_test(test_reuse_table_keeps_every_address_across_doublings),
        cmocka_unit_test(test_reuse_cap_is_reported),
        cmocka_unit_test(test_reuse_default_cap_fits_2p20_slots_and_finish_frees_it),
        cmocka_unit_test(test_same_address_reuse_by_a_key_of_its_own),
        cmocka_unit_test(test_reuse_distance_every_event_many_addresses),
        cmocka_unit_test(test_reuse_cap_distances_over_tracked_addresses),
        cmocka_unit_test(test_peak_live_and_internal_frag),
        cmocka_unit_test(test_site_peak_contribution_after_later_changes),
        cmocka_unit_test(test_same_address_reuse_by_size_key),
        cmocka_unit_test(test_phases_and_allocs_per_decode_step),
        cmocka_unit_test(test_step_points_span_to_the_next),
        cmocka_unit_test(test_not_applicable_is_null_in_json),
        cmocka_unit_test(test_kv_utilization_per_step_ignores_timing),
        cmocka_unit_test(test_kv_waste),
        cmocka_unit_test(test_pool_counters_and_reserved),
        cmocka_unit_test(test_counting_window),
        cmocka_unit_test(test_counting_window_own_peak),
        cmocka_unit_test(test_unmatched_free_and_double_alloc),
        cmocka_unit_test(test_alloc_obj_same_results_as_by_address),
        cmocka_unit_test(test_alloc_obj_unmatched_and_double),
        cmocka_unit_test(test_glibc_usable),
        cmocka_unit_test(test_json_roundtrip_and_paths),
        cmocka_unit_test(test_units),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
