/* test_mutants27.c — one test per mutation issue 27 (item 11) lists as
 * surviving every test; each passes on the tree and fails under its
 * mutant. The interposer's two (calloc recorded as (a, a), realloc(p, 0)
 * dropped while paused) are tests/integration/pre_progs.sh's.
 *
 * Each test pins one documented rule to numbers worked out by hand in its
 * comment (never copied from the code's output):
 *
 *   - the heap peak's time is the first time the peak is reached
 *     (analyzer/REPORT.md, peak_live_t_ns), in the scan, report --json and
 *     sql's meta and metrics;
 *   - caching's segment for a large-pool block: 20 MiB under 10 MiB, the
 *     size rounded up to 2 MiB from 10 MiB on (pol_caching.c, rule 4);
 *   - the arena's reset when every chunk is pinned (the next chunk takes
 *     the cycle's total), when every chunk past the first is (the first is
 *     rewound and kept), and when only the first is (the rest are merged)
 *     (pol_arena.c, docs/DESIGN.md "Replay policies").
 *
 * Traces are written with the writer API into a temporary directory.
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
#include <sqlite3.h>

#include "json.h"
#include "poolscope/writer.h"
#include "replay.h"
#include "report.h"
#include "scan.h"
#include "sqlite.h"

#define MIB ((uint64_t)1 << 20)
#define KIB ((uint64_t)1 << 10)

/* This cmocka has no assert_double_equal. */
#define assert_near(a, b) near_((double)(a), (double)(b), #a, __FILE__, __LINE__)
static void near_(double a, double b, const char *what, const char *file, int line)
{
    if (!(a - b <= 1e-9 && b - a <= 1e-9)) {
        fprintf(stderr, "%s:%d: %s = %.12g, want %.12g\n", file, line, what, a, b);
        fail();
    }
}

static char dir[256];

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/test_mutants27.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- building traces ------------------------------------------------------ */

typedef struct tb {
    char path[512];
    pst_writer_t *w;
    uint64_t t;
} tb_t;

static void tb_open(tb_t *b, const char *name)
{
    snprintf(b->path, sizeof b->path, "%s/%s", dir, name);
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 27, .exe = "/mutants27" };
    b->w = pst_writer_open(b->path, &cfg, &err);
    assert_non_null(b->w);
    b->t = 0;
}

static void tb_close(tb_t *b) { assert_int_equal(pst_writer_close(b->w), 0); }

static void tick(tb_t *b)
{
    b->t += 10;
    pst_writer_time(b->w, b->t);
}

/* a tensor of `bytes` bytes (a multiple of 4: f32 elements) */
static void acq(tb_t *b, uint64_t id, uint64_t bytes)
{
    assert_int_equal(bytes % 4, 0);
    tick(b);
    assert_int_equal(PST_EMIT(b->w, 1, PST_EV_TENSOR_ACQUIRE, id, 0, 0, bytes / 4, bytes), 0);
}

static void rel(tb_t *b, uint64_t id)
{
    tick(b);
    assert_int_equal(PST_EMIT(b->w, 1, PST_EV_TENSOR_RELEASE, id), 0);
}

static void mark(tb_t *b, int begin, const char *name, uint64_t inst)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = begin ? PST_EV_MARK_BEGIN : PST_EV_MARK_END;
    ev.str = name;
    ev.f[1] = inst;
    tick(b);
    assert_int_equal(pst_writer_event(b->w, 1, &ev), 0);
}

static rp_report_t *replay(const char *path, const char *policies)
{
    rp_config_t cfg = rp_config_default();
    char msg[256];
    assert_int_equal(rp_policy_parse(policies, &cfg.policies, msg, sizeof msg), 0);
    rp_report_t *rep = NULL;
    int rc = rp_run(path, &cfg, &rep, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run %s: %s\n", path, msg);
    assert_int_equal(rc, 0);
    assert_non_null(rep);
    return rep;
}

static const rp_result_t *get(const rp_report_t *r, rp_policy_t p)
{
    const rp_result_t *x = rp_report_find(r, p);
    assert_non_null(x);
    return x;
}

/* ---- the peak's time: the first time it is reached -------------------------- */

/* One thread, heap calls:
 *
 *   t=1000  malloc X 0x1000, 10 B     live 10
 *   t=2000  malloc A 0x2000, 100 B    live 110   the peak, first reached
 *   t=3000  free A                    live 10
 *   t=4000  malloc B 0x3000, 100 B    live 110   the same peak again
 *   t=5000  free B                    live 10
 *   t=6000  free X                    live 0
 *
 * REPORT.md: peak_live_bytes 110, peak_live_t_ns "when (first time)": A's
 * allocation, 2000 - 1000 (the first event) = 1000 ns; taken at its last
 * time it would be 3000. sql takes the peak as the metrics do (SCHEMA.md):
 * meta's peak_live_event_id is A's allocation and peak_live_ts_ns its time
 * (sql's clock: events.ts_ns); metrics.peak_live_t_ns is report's 1000. */
static void write_peak_twice(char *path, size_t len)
{
    tb_t b;
    tb_open(&b, "peak_twice.pst");
    pst_writer_time(b.w, 1000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x1000, 10), 0);
    pst_writer_time(b.w, 2000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x2000, 100), 0);
    pst_writer_time(b.w, 3000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_FREE, 0x2000), 0);
    pst_writer_time(b.w, 4000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x3000, 100), 0);
    pst_writer_time(b.w, 5000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_FREE, 0x3000), 0);
    pst_writer_time(b.w, 6000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_FREE, 0x1000), 0);
    tb_close(&b);
    snprintf(path, len, "%s", b.path);
}

static void test_peak_time_is_the_first_time_reached_in_report(void **st)
{
    (void)st;
    char p[512], msg[256];
    write_peak_twice(p, sizeof p);
    az_scan_t *s = NULL;
    int rc = az_scan_file(p, NULL, &s, msg, sizeof msg);
    if (rc) fprintf(stderr, "scan: %s\n", msg);
    assert_int_equal(rc, 0);
    assert_int_equal(s->t_first, 1000);
    assert_int_equal(s->heap_r.peak_live_bytes, 110);
    assert_int_equal(s->heap_r.peak_live_t, 2000);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    az_report_opts_t o = { .no_symbols = 1 };
    az_report_json(s, &o, f);
    fclose(f);
    int err = 0;
    az_jdoc_t *d = az_json_parse(buf, len, &err, NULL, 0);
    assert_non_null(d);
    const az_jv_t *r = az_json_root(d);
    assert_non_null(az_json_path(r, "peak_live_bytes"));
    assert_int_equal(az_json_path(r, "peak_live_bytes")->u, 110);
    assert_non_null(az_json_path(r, "peak_live_t_ns"));
    assert_int_equal(az_json_path(r, "peak_live_t_ns")->u, 1000);
    az_json_free(d);
    free(buf);
    az_scan_free(s);
}

static int64_t q_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *q = NULL;
    if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK) {
        fprintf(stderr, "%s: %s\n", sql, sqlite3_errmsg(db));
        fail();
    }
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    assert_int_not_equal(sqlite3_column_type(q, 0), SQLITE_NULL);
    int64_t v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

static void test_peak_time_is_the_first_time_reached_in_sql(void **st)
{
    (void)st;
    char p[512], dbp[600], msg[256];
    write_peak_twice(p, sizeof p);
    snprintf(dbp, sizeof dbp, "%s/peak_twice.sqlite", dir);
    az_sql_stats_t sst;
    int warning = 0;
    int rc = az_sql_write(p, dbp, &sst, &warning, msg, sizeof msg);
    if (rc) fprintf(stderr, "sql: %s\n", msg);
    assert_int_equal(rc, 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(dbp, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    int64_t a_id = q_int(db, "SELECT id FROM allocations WHERE addr = 4096 * 2");
    int64_t a_ts = q_int(db, "SELECT ts_ns FROM allocations WHERE addr = 4096 * 2");
    int64_t b_ts = q_int(db, "SELECT ts_ns FROM allocations WHERE addr = 4096 * 3");
    assert_true(a_ts < b_ts);
    assert_int_equal(q_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'peak_live_bytes'"), 110);
    assert_int_equal(q_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'peak_live_event_id'"), a_id);
    assert_int_equal(q_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'peak_live_ts_ns'"), a_ts);
    assert_int_equal(q_int(db, "SELECT CAST(value AS INTEGER) FROM metrics WHERE name = 'peak_live_t_ns'"), 1000);
    sqlite3_close(db);
}

/* ---- caching: the 10 MiB boundary of the large pool's segments -------------- */

/* One tensor each (rule 1: rounded up to 512 B; all above 1 MiB: the large
 * pool; rule 4: a new segment, 20 MiB when the rounded size is under
 * 10 MiB, else the size rounded up to a multiple of 2 MiB; rule 5: split
 * when more than 1 MiB would be left):
 *
 *   10 MiB - 512 = 10485248 B: rounded 10485248 < 10 MiB: a 20971520
 *     segment; 10486272 left > 1 MiB: split. Reserved 20 MiB, outstanding
 *     10485248, 1 split, fragmentation 1 - 10485248 / 20971520.
 *   10 MiB = 10485760 B: rounded 10485760, not under 10 MiB: a segment of
 *     10485760 (already a multiple of 2 MiB); nothing left: no split.
 *     Reserved = outstanding = 10 MiB, fragmentation 0.
 *   10 MiB + 4 = 10485764 B: rounded 10486272: a 12582912 segment (6 x
 *     2 MiB); 2096640 left > 1 MiB: split. Reserved 12 MiB, outstanding
 *     10486272.
 * With "<= 10 MiB" for "< 10 MiB" the 10 MiB tensor would take 20 MiB;
 * with the boundary at 11 MiB it would too, at 9 MiB the first would take
 * 10 MiB. */
static void caching_one(const char *name, uint64_t bytes, uint64_t reserved, uint64_t outstanding,
                        uint64_t splits)
{
    tb_t b;
    tb_open(&b, name);
    acq(&b, 1, bytes);
    rel(&b, 1);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "caching");
    const rp_result_t *c = get(r, RP_CACHING);
    if (c->m.peak_reserved_bytes != reserved)
        fprintf(stderr, "%llu B: reserved %llu, want %llu\n", (unsigned long long)bytes,
                (unsigned long long)c->m.peak_reserved_bytes, (unsigned long long)reserved);
    assert_int_equal(c->m.allocs, 1);
    assert_int_equal(c->m.peak_live_bytes, bytes);
    assert_int_equal(c->m.peak_reserved_bytes, reserved);
    assert_int_equal(c->m.peak_outstanding_bytes, outstanding);
    assert_int_equal(c->segments_allocated, 1);
    assert_int_equal(c->splits, splits);
    assert_near(c->fragmentation, 1.0 - (double)outstanding / (double)reserved);
    rp_report_free(r);
}

static void test_caching_segment_below_10_mib_is_20_mib(void **st)
{
    (void)st;
    caching_one("ca_below.pst", 10 * MIB - 512, 20 * MIB, 10 * MIB - 512, 1);
}

static void test_caching_segment_at_10_mib_is_its_size(void **st)
{
    (void)st;
    caching_one("ca_at.pst", 10 * MIB, 10 * MIB, 10 * MIB, 0);
}

static void test_caching_segment_above_10_mib_rounds_to_2_mib(void **st)
{
    (void)st;
    caching_one("ca_above.pst", 10 * MIB + 4, 12 * MIB, 10 * MIB + 512, 1);
}

/* ---- arena: resets with pinned chunks ---------------------------------------- */

/* Every chunk pinned. 600 KiB = 614400 B (a multiple of 64).
 *   forward 0: A 600 KiB in chunk c1 (1 MiB, 434176 left); B 600 KiB does
 *     not fit: c2, twice c1, 2 MiB. A and B outlive the forward: at the
 *     reset both are violations (1228800 B), both chunks pinned (3 MiB
 *     pinned at once), none is free: the next chunk gets the size the
 *     merge would have had, 1 + 2 = 3 MiB.
 *   forward 1: C 600 KiB: a new chunk c3 of 3 MiB; reserved 1 + 2 + 3 =
 *     6 MiB (the peak). C dies inside; the reset rewinds c3.
 *   A dies: c1 goes back; B dies: c2 goes back (3 MiB left).
 * Chunks 3, backing allocs 3, frees 2, pinned 2, peak pinned 3 MiB.
 * Were the cycle's size not kept for the next chunk (or only the first
 * chunk's counted), c3 would be 1 MiB and the peak 4 MiB. */
static void test_arena_every_chunk_pinned_next_chunk_takes_the_cycle(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b, "arena_all_pinned.pst");
    mark(&b, 1, "forward", 0);
    acq(&b, 1, 600 * KIB);    /* A */
    acq(&b, 2, 600 * KIB);    /* B */
    mark(&b, 0, "forward", 0);
    mark(&b, 1, "forward", 1);
    acq(&b, 3, 600 * KIB);    /* C */
    rel(&b, 3);
    mark(&b, 0, "forward", 1);
    rel(&b, 1);
    rel(&b, 2);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena");
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->lifetime_violations, 2);
    assert_int_equal(a->violation_bytes, 2 * 600 * KIB);
    assert_int_equal(a->pinned_chunks, 2);
    assert_int_equal(a->peak_pinned_bytes, 3 * MIB);
    assert_int_equal(a->chunks_allocated, 3);
    assert_int_equal(a->m.backing_allocs, 3);
    assert_int_equal(a->m.backing_frees, 2);
    assert_int_equal(a->m.peak_reserved_bytes, 6 * MIB);
    assert_int_equal(a->longlived_objects, 0);
    rp_report_free(r);
}

/* Every chunk past the first pinned.
 *   forward 0: A 600 KiB in c1 (1 MiB); B 600 KiB: c2 (2 MiB, 1482752
 *     left); C 1.5 MiB = 1572864 B does not fit: c3 (4 MiB). A dies inside.
 *     At the reset B and C are violations (614400 + 1572864 = 2187264 B),
 *     c2 and c3 pinned (6 MiB at once); c1, the only free chunk, is
 *     rewound and kept.
 *   forward 1: D 600 KiB in c1 at offset 0 (A's address): no new chunk.
 *   B dies: c2 goes back; C dies: c3 goes back.
 * Reserved peak 1 + 2 + 4 = 7 MiB; 3 chunks, 2 given back; addresses
 * A, B, C fresh, D A's: fresh ratio 3/4; held at once: A, B, C = 3. */
static void test_arena_chunks_past_the_first_pinned_first_is_rewound(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b, "arena_past_first_pinned.pst");
    mark(&b, 1, "forward", 0);
    acq(&b, 1, 600 * KIB);    /* A */
    acq(&b, 2, 600 * KIB);    /* B */
    acq(&b, 3, 1536 * KIB);   /* C */
    rel(&b, 1);
    mark(&b, 0, "forward", 0);
    mark(&b, 1, "forward", 1);
    acq(&b, 4, 600 * KIB);    /* D */
    rel(&b, 4);
    mark(&b, 0, "forward", 1);
    rel(&b, 2);
    rel(&b, 3);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena");
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->lifetime_violations, 2);
    assert_int_equal(a->violation_bytes, 600 * KIB + 1536 * KIB);
    assert_int_equal(a->pinned_chunks, 2);
    assert_int_equal(a->peak_pinned_bytes, 6 * MIB);
    assert_int_equal(a->chunks_allocated, 3);
    assert_int_equal(a->m.backing_allocs, 3);
    assert_int_equal(a->m.backing_frees, 2);
    assert_int_equal(a->m.peak_reserved_bytes, 7 * MIB);
    assert_int_equal(a->peak_outstanding_buffers, 3);
    assert_near(a->m.fresh_address_ratio, 3.0 / 4.0);
    rp_report_free(r);
}

/* Only the first chunk pinned.
 *   forward 0: A, B, C as above in c1, c2, c3 (7 MiB); B and C die
 *     inside. At the reset A is the one violation (614400 B), c1 pinned
 *     (1 MiB); c2 and c3 are free and merged into one chunk c4 of 6 MiB
 *     (2 frees, 1 alloc): 1 + 6 = 7 MiB.
 *   forward 1: D 600 KiB in c4: no new chunk.
 *   A dies: c1 goes back (6 MiB left).
 * Reserved peak 7 MiB; 4 chunks allocated, 3 given back; every address
 * fresh (c1, c2, c3, c4 at offset 0). Had the walk over the cycle stopped
 * at the pinned chunk, c2 and c3 would be neither merged nor given back
 * and D would take a chunk of its own (8 MiB). */
static void test_arena_only_first_chunk_pinned_rest_merged(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b, "arena_first_pinned.pst");
    mark(&b, 1, "forward", 0);
    acq(&b, 1, 600 * KIB);    /* A */
    acq(&b, 2, 600 * KIB);    /* B */
    acq(&b, 3, 1536 * KIB);   /* C */
    rel(&b, 2);
    rel(&b, 3);
    mark(&b, 0, "forward", 0);
    mark(&b, 1, "forward", 1);
    acq(&b, 4, 600 * KIB);    /* D */
    rel(&b, 4);
    mark(&b, 0, "forward", 1);
    rel(&b, 1);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena");
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->lifetime_violations, 1);
    assert_int_equal(a->violation_bytes, 600 * KIB);
    assert_int_equal(a->pinned_chunks, 1);
    assert_int_equal(a->peak_pinned_bytes, MIB);
    assert_int_equal(a->chunks_allocated, 4);
    assert_int_equal(a->m.backing_allocs, 4);
    assert_int_equal(a->m.backing_frees, 3);
    assert_int_equal(a->m.peak_reserved_bytes, 7 * MIB);
    assert_near(a->m.fresh_address_ratio, 1.0);
    rp_report_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_peak_time_is_the_first_time_reached_in_report),
        cmocka_unit_test(test_peak_time_is_the_first_time_reached_in_sql),
        cmocka_unit_test(test_caching_segment_below_10_mib_is_20_mib),
        cmocka_unit_test(test_caching_segment_at_10_mib_is_its_size),
        cmocka_unit_test(test_caching_segment_above_10_mib_rounds_to_2_mib),
        cmocka_unit_test(test_arena_every_chunk_pinned_next_chunk_takes_the_cycle),
        cmocka_unit_test(test_arena_chunks_past_the_first_pinned_first_is_rewound),
        cmocka_unit_test(test_arena_only_first_chunk_pinned_rest_merged),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
