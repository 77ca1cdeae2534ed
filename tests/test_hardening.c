/* test_hardening.c — figures from crafted traces stay finite and honest
 * (issue 12, items 6 and 7).
 *
 *   - replay --policy arena with one allocation near 2^63 bytes: refused
 *     (PSC_ERANGE, "arena: ..."), where the chunk size used to double past
 *     2^63 to 0 and loop for ever; and many allocations of 2^52 bytes (the
 *     largest taken) end, chunk doubling capped.
 *   - the report's pool hit rate with misses never prints 100.0%: 2,000
 *     acquires with 1 miss is 99.9% in the summary and the pool's row.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "export.h"
#include "poolscope/error.h"
#include "poolscope/writer.h"
#include "replay.h"
#include "report.h"
#include "scan.h"

static char dir[256];

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/test_hardening.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* n mallocs of `size` bytes at distinct addresses, each freed after the next */
static void write_big(const char *path, uint64_t size, int n)
{
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 9, .exe = "/big" };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    for (int i = 0; i < n; i++) {
        pst_writer_time(w, 1000 + 100 * (uint64_t)i);
        PST_EMIT(w, 1, PST_EV_MALLOC, 0x10000000ull + 0x1000ull * (uint64_t)i, size);
    }
    pst_writer_time(w, 1000 + 100 * (uint64_t)n);
    for (int i = 0; i < n; i++) PST_EMIT(w, 1, PST_EV_FREE, 0x10000000ull + 0x1000ull * (uint64_t)i);
    assert_int_equal(pst_writer_close(w), 0);
}

static int replay_arena(const char *path, char *msg, size_t cap, rp_report_t **rep)
{
    rp_config_t cfg = rp_config_default();
    assert_int_equal(rp_policy_parse("arena", &cfg.policies, msg, cap), 0);
    cfg.stream = RP_STREAM_HEAP;
    return rp_run(path, &cfg, rep, msg, cap);
}

static void test_arena_refuses_an_allocation_past_any_address_space(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "huge.pst");
    write_big(p, (1ull << 63) + 1, 1);
    rp_report_t *rep = NULL;
    assert_int_equal(replay_arena(p, msg, sizeof msg, &rep), PSC_ERANGE);
    assert_non_null(strstr(msg, "too large for any address space"));
    assert_null(rep);
    assert_non_null(strstr(msg, "arena"));
}

static void test_arena_chunks_stop_doubling(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "many.pst");
    /* 4096 x 2^52 = 2^64 bytes live: chunk doubling would pass 2^63. The
     * arena takes all 4096; its metrics hold the first 32 (2^57 bytes,
     * more than any address space) and count the rest as implausible. */
    write_big(p, 1ull << 52, 4096);
    rp_report_t *rep = NULL;
    int rc = replay_arena(p, msg, sizeof msg, &rep);
    if (rc) fprintf(stderr, "replay: %s\n", msg);
    assert_int_equal(rc, 0);
    const rp_result_t *a = rp_report_find(rep, RP_ARENA);
    assert_non_null(a);
    assert_int_equal(a->requests, 4096 * 2);
    assert_int_equal(a->m.allocs, 32);
    assert_int_equal(a->m.implausible_allocs, 4096 - 32);
    rp_report_free(rep);
}

static void test_report_hit_rate_with_a_miss_is_not_100(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "pool.pst");
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 10, .exe = "/pool" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    PST_EMIT(w, 1, PST_EV_POOL_CREATE, 1, pst_writer_string(w, "acts"), 1, 1 << 20);
    uint64_t seq = 1;
    for (uint64_t i = 0; i < 2000; i++) {   /* "pool id, pool_seq, arm, buf id, requested, granted, req bytes, granted bytes, hit" */
        pst_writer_time(w, 100 + 10 * i);
        PST_EMIT(w, 1, PST_EV_POOL_ACQUIRE, 1, seq++, 0, 1, 16, 16, 64, 64, i > 0);
        PST_EMIT(w, 1, PST_EV_POOL_RECLAIM, 1, seq++, 0, 1, 64, 1);
    }
    assert_int_equal(pst_writer_close(w), 0);
    az_scan_t *s = NULL;
    assert_int_equal(az_scan_file(p, NULL, &s, msg, sizeof msg), 0);
    assert_int_equal(s->pool_r.misses, 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    az_report_opts_t ro = { .no_symbols = 1 };
    az_report_text(s, &ro, f);
    fclose(f);
    assert_non_null(strstr(buf, "hit rate 99.9%"));
    assert_null(strstr(buf, "100.0%"));
    free(buf);
    az_scan_free(s);
}

/* Sizes no address space holds: five mallocs of 2^62 bytes used to wrap
 * total allocated to 4 EiB and the peak to 12 EiB. Each would take the
 * live heap past 2^57 bytes, so each is left out and counted; of three
 * mallocs of 2^56 the first fits, the next two (glibc's usable size is a
 * little more than 2^56) would pass 2^57 and are left out. */
static void test_report_sums_never_wrap(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "wrap.pst");
    write_big(p, 1ull << 62, 5);
    az_scan_t *s = NULL;
    assert_int_equal(az_scan_file(p, NULL, &s, msg, sizeof msg), 0);
    assert_int_equal(s->heap_r.implausible_allocs, 5);
    assert_int_equal(s->heap_r.total_allocated_bytes, 0);
    assert_int_equal(s->heap_r.peak_live_bytes, 0);
    az_scan_free(s);
    path_in(p, sizeof p, "wrap56.pst");
    write_big(p, 1ull << 56, 3);
    assert_int_equal(az_scan_file(p, NULL, &s, msg, sizeof msg), 0);
    assert_int_equal(s->heap_r.implausible_allocs, 2);
    assert_int_equal(s->heap_r.total_allocated_bytes, 1ull << 56);
    assert_int_equal(s->heap_r.peak_live_bytes, 1ull << 56);
    az_scan_free(s);
}

/* An input the export fuzzer found: a trace whose pprof profile has an
 * empty piece (no buffer behind it), which memcpy'd from NULL. Under
 * UBSan (make asan) the old code aborted here. */
static void test_pprof_export_of_fuzzed_trace(void **st)
{
    (void)st;
    char out[512], msg[256];
    path_in(out, sizeof out, "fuzzed.pb.gz");
    az_export_opts_t eo = { .lines = 0 };
    int warn = 0;
    int rc = az_export_ex("tests/fuzz/regress/export-pprof-empty-piece", AZ_EXPORT_PPROF, AZ_WEIGHT_BYTES, &eo, out,
                          &warn, msg, sizeof msg);
    /* a damaged trace is either exported up to the damage or refused with
     * a message; neither may be undefined behaviour */
    assert_true(rc == 0 || msg[0]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_refuses_an_allocation_past_any_address_space),
        cmocka_unit_test(test_arena_chunks_stop_doubling),
        cmocka_unit_test(test_report_hit_rate_with_a_miss_is_not_100),
        cmocka_unit_test(test_report_sums_never_wrap),
        cmocka_unit_test(test_pprof_export_of_fuzzed_trace),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
