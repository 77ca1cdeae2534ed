/* test_analyzer.c — golden traces written with the writer API, scanned by
 * the analyzer, checked against hand-computed answers; SQLite row counts and
 * schema; exports parse; gate rules at their edges.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "export.h"
#include "gate.h"
#include "json.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "sqlite.h"
#include "poolscope/writer.h"

static char dir[256];

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static void at(pst_writer_t *w, uint64_t t) { pst_writer_time(w, t); }

/* The golden trace (times in ns; answers worked out in the comments):
 *   heap  A=100 @1000, B=50 @2000, realloc A->C 300 (moves) @3000: live 350 = peak,
 *         free B @4000 (300), realloc C->C 200 in place @5000 (200), calloc D 10x10 @6000 (300),
 *         free D @7000 (200), malloc E 64 @8000 (264): leaks C + E = 264 bytes in 2 objects;
 *         total allocated 100+50+300+200+100+64 = 814
 *   mmap  anon 8 KiB @2500, file 4 KiB @2600, munmap anon @2700: peaks 8 KiB / 4 KiB
 *   rss   1 MiB @2600, 2 MiB @6500
 *   marks prefill [900, 3500): malloc, malloc, mmap, mmap, munmap, realloc = 6 hooked
 *         calls, 450 bytes requested from the malloc family
 *         decode [4500, 5500): realloc = 1 call, 200 bytes; decode [5800, 7500): calloc,
 *         free = 2 calls, 100 bytes -> decode count 2, 3 calls, 300 bytes
 *   pool  miss buf 1 req 100 granted 128; reclaim cached; hit buf 1 req 120: hit rate 0.5,
 *         peak cached 128, peak outstanding 128, internal frag at the live peak (120 of 128) = 1/16
 *   kv    as the pool adapter emits it: an ALLOC carries n_tokens, which the pool
 *         spreads over its blocks (16 per block, the last partial); TOKENS only
 *         when a count changes afterwards. Block size 16:
 *           9000  ALLOC owner 7, 24 tokens, ids {0,1}: 16 + 8     24/32 for 400 ns
 *           9400  TOKENS block 1 -> 9 (a decode step)             25/32 for 200 ns
 *           9600  ALLOC owner 8, 5 tokens, id {2}                 30/48 for 200 ns
 *           9800  FREE {2} (owner 8 preempted)                    25/32 for 200 ns
 *          10000  FREE {0,1}
 *         time-weighted utilization (300 + 156.25 + 125 + 156.25) / 1000 = 0.7375;
 *         peak 3 blocks at 9600, 30/48 = 0.625 there
 */
static int write_golden(const char *path, int abandon)
{
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 4242, .exe = "/golden/prog", .stacks = PST_STACKS_FP, .depth = 8 };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    if (!w) return err;
    uint64_t f1[] = { 0x401000, 0x402000 }, f2[] = { 0x401100, 0x402000 };
    uint32_t s1 = pst_writer_stack(w, f1, 2), s2 = pst_writer_stack(w, f2, 2);
    uint32_t prefill = pst_writer_string(w, "prefill"), decode = pst_writer_string(w, "decode");
    pst_event_t ev;

    at(w, 900);  PST_EMIT(w, 1, PST_EV_MARK_BEGIN, prefill, 1, 0);
    at(w, 1000);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_MALLOC; ev.stack = s1; ev.f[0] = 0x1000; ev.f[1] = 100;
    pst_writer_event(w, 1, &ev);
    at(w, 2000);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_MALLOC; ev.stack = s2; ev.f[0] = 0x2000; ev.f[1] = 50;
    pst_writer_event(w, 1, &ev);
    at(w, 2500); PST_EMIT(w, 1, PST_EV_MMAP, 0x7000000, 8192, 3, 0x22, (uint64_t)-1, 0);
    at(w, 2600); PST_EMIT(w, 1, PST_EV_MMAP, 0x7100000, 4096, 1, 0x02, 3, 0);
    PST_EMIT(w, 1, PST_EV_RSS, 1 << 20, 1 << 19, 1 << 19);
    at(w, 2700); PST_EMIT(w, 1, PST_EV_MUNMAP, 0x7000000, 8192);
    at(w, 3000);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_REALLOC; ev.stack = s1; ev.f[0] = 0x1000; ev.f[1] = 0x3000; ev.f[2] = 300;
    pst_writer_event(w, 1, &ev);
    at(w, 3500); PST_EMIT(w, 1, PST_EV_MARK_END, prefill, 1);
    at(w, 4000); PST_EMIT(w, 1, PST_EV_FREE, 0x2000);
    at(w, 4500); PST_EMIT(w, 1, PST_EV_MARK_BEGIN, decode, 1, 0);
    at(w, 5000); PST_EMIT(w, 1, PST_EV_REALLOC, 0x3000, 0x3000, 200);
    at(w, 5500); PST_EMIT(w, 1, PST_EV_MARK_END, decode, 1);
    at(w, 5800); PST_EMIT(w, 1, PST_EV_MARK_BEGIN, decode, 2, 0);
    at(w, 6000); PST_EMIT(w, 1, PST_EV_CALLOC, 0x4000, 10, 10);
    at(w, 6500); PST_EMIT(w, 1, PST_EV_RSS, 2 << 20, 1 << 20, 1 << 20);
    at(w, 7000); PST_EMIT(w, 1, PST_EV_FREE, 0x4000);
    at(w, 7500); PST_EMIT(w, 1, PST_EV_MARK_END, decode, 2);
    at(w, 8000);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_MALLOC; ev.stack = s2; ev.f[0] = 0x5000; ev.f[1] = 64;
    pst_writer_event(w, 1, &ev);

    /* pool, on a second thread */
    uint32_t acts = pst_writer_string(w, "acts");
    at(w, 8100); PST_EMIT(w, 2, PST_EV_POOL_CREATE, 1, acts, 3, 1 << 20);
    PST_EMIT(w, 2, PST_EV_POOL_BACKING_ALLOC, 1, 1, 0x9000000, 128);
    at(w, 8200); PST_EMIT(w, 2, PST_EV_POOL_ACQUIRE, 1, 2, 0, 1, 25, 32, 100, 128, 0);
    at(w, 8300); PST_EMIT(w, 2, PST_EV_POOL_RECLAIM, 1, 3, 0, 1, 128, 1);
    at(w, 8400); PST_EMIT(w, 2, PST_EV_POOL_ACQUIRE, 1, 4, 0, 1, 30, 32, 120, 128, 1);

    /* KV */
    uint32_t kvn = pst_writer_string(w, "kv");
    at(w, 8500); PST_EMIT(w, 2, PST_EV_KVB_CREATE, 1, kvn, 16, 64, 1, 0, 64, 4096);
    at(w, 9000);
    uint32_t ids[2] = { 0, 1 }, id2[1] = { 2 };
    /* "uuuzuuL" pool id, pool_seq, stream, owner, format, n_tokens, ids */
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_KVB_ALLOC;
    ev.f[0] = 1; ev.f[1] = 1; ev.f[2] = 0; ev.f[3] = 7; ev.f[4] = 0; ev.f[5] = 24;
    ev.ids = ids; ev.n_ids = 2;
    pst_writer_event(w, 2, &ev);
    at(w, 9400); PST_EMIT(w, 2, PST_EV_KVB_TOKENS, 1, 2, 1, 9);
    at(w, 9600);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_KVB_ALLOC;
    ev.f[0] = 1; ev.f[1] = 3; ev.f[2] = 0; ev.f[3] = 8; ev.f[4] = 0; ev.f[5] = 5;
    ev.ids = id2; ev.n_ids = 1;
    pst_writer_event(w, 2, &ev);
    at(w, 9800);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_KVB_FREE; ev.f[0] = 1; ev.f[1] = 4;
    ev.ids = id2; ev.n_ids = 1;
    pst_writer_event(w, 2, &ev);
    at(w, 10000);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_KVB_FREE; ev.f[0] = 1; ev.f[1] = 5;
    ev.ids = ids; ev.n_ids = 2;
    pst_writer_event(w, 2, &ev);
    at(w, 10100); PST_EMIT(w, 1, PST_EV_MARK_POINT, pst_writer_string(w, "done"), 0);
    return abandon ? pst_writer_abandon(w) : pst_writer_close(w);
}

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/test_analyzer.XXXXXX");
    if (!mkdtemp(dir)) return -1;
    char p[512];
    path_in(p, sizeof p, "golden.pst");
    if (write_golden(p, 0)) return -1;
    path_in(p, sizeof p, "cut.pst");
    return write_golden(p, 1) ? -1 : 0;
}

static int teardown(void **st)
{
    (void)st;
    if (getenv("KEEP")) return 0;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static az_scan_t *scan(const char *name)
{
    char p[512], msg[256];
    path_in(p, sizeof p, name);
    az_scan_t *s = NULL;
    int rc = az_scan_file(p, NULL, &s, msg, sizeof msg);
    if (rc) fprintf(stderr, "scan %s: %s\n", p, msg);
    assert_int_equal(rc, 0);
    return s;
}

static void test_golden_heap_peak_with_moving_realloc(void **st)
{
    (void)st;
    az_scan_t *s = scan("golden.pst");
    const az_result_t *h = &s->heap_r;
    assert_int_equal(h->peak_live_bytes, 350);
    assert_int_equal(h->peak_live_t, 3000);
    assert_int_equal(h->total_allocated_bytes, 814);
    assert_int_equal(h->leaked_bytes, 264);
    assert_int_equal(h->leaked_count, 2);
    assert_int_equal(s->calls[AZ_F_MALLOC], 3);
    assert_int_equal(s->calls[AZ_F_REALLOC], 2);
    assert_int_equal(s->calls[AZ_F_CALLOC], 1);
    assert_int_equal(s->calls[AZ_F_FREE], 2);
    assert_int_equal(s->calls[AZ_F_MMAP], 2);
    assert_int_equal(s->calls[AZ_F_MUNMAP], 1);
    assert_int_equal(s->peak_mmap_anon, 8192);
    assert_int_equal(s->peak_mmap_file, 4096);
    assert_int_equal(s->mmap_anon, 0);
    assert_int_equal(s->peak_rss, 2 << 20);
    assert_true(s->status->end_seen);
    /* sites: s1 (A, then C) holds 300 at the peak, s2 (B) 50 */
    size_t n;
    const az_site_t *si = az_sites(s->heap, &n);
    int seen = 0;
    for (size_t i = 0; i < n; i++) {
        if (si[i].stack == 1) { assert_int_equal(si[i].peak_bytes, 300); seen++; }
        if (si[i].stack == 2) { assert_int_equal(si[i].peak_bytes, 50); assert_int_equal(si[i].live_bytes, 64); seen++; }
    }
    assert_int_equal(seen, 2);
    az_scan_free(s);
}

static void test_golden_phases_pool_kv(void **st)
{
    (void)st;
    az_scan_t *s = scan("golden.pst");
    const az_result_t *h = &s->heap_r, *p = &s->pool_r;
    assert_int_equal(h->n_phases, 3);
    assert_string_equal(h->phases[0].name, "prefill");
    assert_int_equal(h->phases[0].count, 1);
    assert_int_equal(h->phases[0].heap_calls, 6);
    assert_int_equal(h->phases[0].heap_bytes, 450);
    assert_string_equal(h->phases[1].name, "decode");
    assert_int_equal(h->phases[1].count, 2);
    assert_int_equal(h->phases[1].heap_calls, 3);
    assert_int_equal(h->phases[1].heap_bytes, 300);
    /* 2 steps (< 5): mean over all; allocation calls (realloc; calloc) 2,
     * heap calls (with the free) 3 */
    assert_true(h->has_decode_steps);
    assert_true(h->allocs_per_decode_step == 1.0);
    assert_true(h->heap_calls_per_decode_step == 1.5);
    assert_int_equal(p->acquires, 2);
    assert_int_equal(p->hits, 1);
    assert_true(p->hit_rate == 0.5);
    assert_int_equal(p->backing_allocs, 1);
    assert_int_equal(p->peak_cached_bytes, 128);
    assert_int_equal(p->peak_outstanding_bytes, 128);
    assert_true(p->internal_frag == 8.0 / 128);
    assert_true(h->has_kv);
    assert_int_equal(h->peak_kv_blocks, 3);
    assert_int_equal(h->peak_kv_t, 9600);
    assert_true(fabs(h->kv_utilization - 0.7375) < 1e-12);
    assert_true(fabs(h->kv_waste_ratio - 0.2625) < 1e-12);
    assert_true(fabs(h->kv_utilization_at_peak - 0.625) < 1e-12);
    az_scan_free(s);
}

static void test_phase_and_window_restrict_counts(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "golden.pst");
    az_scan_t *s;
    az_scan_opts_t o = { .phase = "decode" };
    assert_int_equal(az_scan_file(p, &o, &s, msg, sizeof msg), 0);
    assert_int_equal(s->calls[AZ_F_REALLOC], 1);
    assert_int_equal(s->calls[AZ_F_CALLOC], 1);
    assert_int_equal(s->calls[AZ_F_MALLOC], 0);
    assert_int_equal(s->heap_r.total_allocated_bytes, 300);
    az_scan_free(s);
    az_scan_opts_t w = { .window = 1, .from = 2500, .to = 6000 };
    assert_int_equal(az_scan_file(p, &w, &s, msg, sizeof msg), 0);
    assert_int_equal(s->heap_r.allocs, 3);           /* realloc @3000, realloc @5000, calloc @6000 */
    assert_int_equal(s->heap_r.peak_live_bytes, 350);
    az_scan_free(s);
}

/* Exports scan with no_reuse: every figure they read (sites, peaks, leaks)
 * must come out as with the reuse bookkeeping on, and the bookkeeping
 * must really be off (no reuse sample taken). */
static void test_scan_without_reuse_keeps_other_figures(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "golden.pst");
    az_scan_t *a, *b;
    az_scan_opts_t full = { 0 }, lean = { .no_reuse = 1 };
    assert_int_equal(az_scan_file(p, &full, &a, msg, sizeof msg), 0);
    assert_int_equal(az_scan_file(p, &lean, &b, msg, sizeof msg), 0);
    assert_true(a->heap_r.fresh_addresses > 0);
    assert_int_equal(b->heap_r.reuse_samples, 0);
    assert_int_equal(b->heap_r.fresh_addresses, 0);
    assert_int_equal(a->heap_r.peak_live_bytes, b->heap_r.peak_live_bytes);
    assert_int_equal(a->heap_r.peak_live_t, b->heap_r.peak_live_t);
    assert_int_equal(a->heap_r.total_allocated_bytes, b->heap_r.total_allocated_bytes);
    assert_int_equal(a->heap_r.leaked_bytes, b->heap_r.leaked_bytes);
    assert_int_equal(a->heap_r.allocs, b->heap_r.allocs);
    assert_int_equal(a->heap_r.frees, b->heap_r.frees);
    assert_int_equal(a->heap_r.temporary, b->heap_r.temporary);
    size_t na = 0, nb = 0;
    const az_site_t *sa = az_sites(a->heap, &na), *sb = az_sites(b->heap, &nb);
    assert_true(na > 0);
    assert_int_equal(na, nb);
    assert_memory_equal(sa, sb, na * sizeof *sa);
    az_scan_free(a);
    az_scan_free(b);
}

static void test_report_json_has_design_keys(void **st)
{
    (void)st;
    az_scan_t *s = scan("golden.pst");
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    az_report_opts_t o = { .no_symbols = 1 };
    az_report_json(s, &o, f);
    fclose(f);
    int err;
    az_jdoc_t *d = az_json_parse(buf, len, &err, NULL, 0);
    assert_non_null(d);
    const az_jv_t *r = az_json_root(d);
    static const char *const keys[] = {
        "events", "calls.malloc", "calls.calloc", "calls.realloc", "calls.reallocarray", "calls.free",
        "calls.posix_memalign", "calls.aligned_alloc", "calls.memalign", "calls.valloc", "calls.pvalloc",
        "calls.mmap", "calls.munmap", "calls.mremap", "peak_live_bytes", "peak_rss_bytes",
        "total_allocated_bytes", "leaked_bytes", "lost_events", "pool.acquires", "pool.hits",
        "pool.misses", "pool.hit_rate", "pool.backing_allocs", "pool.peak_cached_bytes",
        "pool.peak_outstanding_bytes", "pool.internal_frag", "reuse.same_address_reuse",
        "reuse.fresh_address_ratio", "reuse.distance_p50", "reuse.distance_p90",
        "kv.peak_blocks_in_use", "kv.kv_utilization", "kv.kv_waste_ratio",
        "phases.decode.count", "phases.decode.heap_calls", "phases.decode.heap_bytes",
        "allocs_per_decode_step", "heap_calls_per_decode_step", "decode_steps",
        "kv.kv_utilization_per_step", "program", "argv",
    };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        if (!az_json_path(r, keys[i])) fprintf(stderr, "missing %s\n", keys[i]);
        assert_non_null(az_json_path(r, keys[i]));
    }
    assert_int_equal(az_json_path(r, "peak_live_bytes")->u, 350);
    assert_int_equal(az_json_path(r, "events")->u, s->events);
    assert_string_equal(az_json_path(r, "program")->str, "/golden/prog");
    /* the golden decode steps hold no KV blocks: the per-step KV figure
     * does not apply (null), the time-weighted one does */
    assert_int_equal(az_json_path(r, "kv.kv_utilization_per_step")->type, AZ_JV_NULL);
    assert_int_equal(az_json_path(r, "kv.kv_utilization")->type, AZ_JV_NUM);
    az_json_free(d);
    free(buf);
    /* the text report runs too */
    f = fopen("/dev/null", "w");
    az_report_text(s, &o, f);
    fclose(f);
    az_scan_free(s);
}

static void test_truncated_trace_still_scans_with_warning(void **st)
{
    (void)st;
    az_scan_t *s = scan("cut.pst");
    char wb[256];
    assert_non_null(az_scan_warning(s, wb, sizeof wb));
    assert_int_equal(s->heap_r.peak_live_bytes, 350);
    az_scan_free(s);
    char p[512], msg[256];
    path_in(p, sizeof p, "not-a-trace");
    FILE *f = fopen(p, "w");
    fputs("hello, world, this is not a trace at all\n", f);
    fclose(f);
    assert_int_not_equal(az_scan_file(p, NULL, &s, msg, sizeof msg), 0);
    assert_non_null(strstr(msg, "not a poolscope trace"));
}

static int count_rows(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    int n = sqlite3_column_int(q, 0);
    sqlite3_finalize(q);
    return n;
}

static void test_sqlite_rows_equal_events_and_schema(void **st)
{
    (void)st;
    char p[512], db[512], msg[256];
    path_in(p, sizeof p, "golden.pst");
    path_in(db, sizeof db, "golden.db");
    az_sql_stats_t ss;
    int warn;
    assert_int_equal(az_sql_write(p, db, &ss, &warn, msg, sizeof msg), 0);
    assert_int_equal(warn, 0);
    az_scan_t *s = scan("golden.pst");
    sqlite3 *d;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events"), (int)s->events);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE type = 1"), 3);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM markers"), 7);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM pools WHERE kind = 'acquire'"), 2);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM blocks WHERE kind = 'alloc'"), 3);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM rss"), 2);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM stacks"), 2);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM frames"), 4);
    /* the two stacks share their outer frame (0x402000): one node for it */
    assert_int_equal(count_rows(d, "SELECT count(*) FROM stack_nodes"), 3);
    assert_int_equal(count_rows(d, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'schema_version'"), 5);
    assert_int_equal(count_rows(d, "SELECT value FROM metrics WHERE name = 'peak_live_bytes'"), 350);
    static const char *const tables[] = { "threads", "stack_rows", "stack_nodes", "site_labels", "names",
                                          "frame_defs", "modules", "markers", "scopes", "pools", "blocks", "rss",
                                          "metrics", "meta", "event_types" };
    for (size_t i = 0; i < sizeof tables / sizeof tables[0]; i++) {
        char q[200];
        snprintf(q, sizeof q, "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='%s'", tables[i]);
        assert_int_equal(count_rows(d, q), 1);
    }
    /* frames: schema 4; stacks and stack_frames: schema 5 */
    static const char *const views[] = { "allocations", "events", "sites", "frames", "stacks", "stack_frames" };
    for (size_t i = 0; i < sizeof views / sizeof views[0]; i++) {
        char q[200];
        snprintf(q, sizeof q, "SELECT count(*) FROM sqlite_master WHERE type='view' AND name='%s'", views[i]);
        assert_int_equal(count_rows(d, q), 1);
    }
    /* the golden heap (see its comment): 6 objects, C and E leaked (264 bytes) */
    assert_int_equal(count_rows(d, "SELECT count(*) FROM allocations"), 6);
    assert_int_equal(count_rows(d, "SELECT sum(size_bytes) FROM allocations WHERE free_ts_ns IS NULL"), 264);
    assert_int_equal(count_rows(d, "SELECT sum(size_bytes) FROM allocations a, (SELECT CAST(value AS INTEGER) AS p"
                                   " FROM meta WHERE key = 'peak_live_event_id') WHERE a.id <= p"
                                   " AND (a.free_id IS NULL OR a.free_id > p)"), 350);
    assert_true(count_rows(d, "SELECT count(*) FROM sqlite_master WHERE type='index'") >= 5);
    sqlite3_close(d);
    az_scan_free(s);
}

/* More events than one insert batch and not a multiple of it: every event
 * is one row, ids follow the merged order from 1, and the columns and the
 * detail tables' event ids agree with what was written. */
/* Two threads within one tick, where the trace holds no order: the range
 * the peak could have had, by hand. Live 600 before the tick (thread 1
 * holds 500, thread 2 100). In the tick thread 1 frees its 500 and takes
 * 50; thread 2 takes 1000. Between ticks: 600 before, 1150 after (the
 * least peak: min 1150). Any order: 600 + 0 (thread 1's highest climb,
 * before its free) + 1000 = 1600 (the most). */
static void test_scan_peak_range_of_a_tick(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "tick.pst");
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 7, .exe = "/tick" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    at(w, 1000);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0xb000, 500);
    PST_EMIT(w, 2, PST_EV_MALLOC, 0xa000, 100);
    at(w, 2000);
    PST_EMIT(w, 1, PST_EV_FREE, 0xb000);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0xc000, 50);
    PST_EMIT(w, 2, PST_EV_MALLOC, 0xd000, 1000);
    assert_int_equal(pst_writer_close(w), 0);
    az_scan_t *s = NULL;
    assert_int_equal(az_scan_file(p, NULL, &s, msg, sizeof msg), 0);
    assert_int_equal(s->peak_tick_lo, 1150);
    assert_int_equal(s->peak_tick_hi, 1600);
    assert_true(s->heap_r.peak_live_bytes >= s->peak_tick_lo && s->heap_r.peak_live_bytes <= s->peak_tick_hi);
    az_scan_free(s);
}

/* The same two threads with cycle counts (minor 8): the order within the
 * tick is known, so the peak is the one that order had and the range
 * closes on it. Thread 2's 1000 before thread 1's free: 600 + 1000 = 1600;
 * after it: 600 - 500 + 1000 = 1100, then + 50 = 1150. Written in the
 * same stream order both times: only the counts differ. */
static uint64_t scan_peak_with_counts(uint64_t free_cyc, uint64_t *lo, uint64_t *hi)
{
    char p[512], msg[256];
    path_in(p, sizeof p, "cyc.pst");
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 7, .exe = "/cyc" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    const struct { uint32_t stream; uint64_t ts; pst_event_t ev; } evs[] = {
        { 1, 1000, { .type = PST_EV_MALLOC, .f = { 0xb000, 500 }, .cyc = 1 } },
        { 2, 1000, { .type = PST_EV_MALLOC, .f = { 0xa000, 100 }, .cyc = 2 } },
        { 1, 2000, { .type = PST_EV_FREE, .f = { 0xb000 }, .cyc = free_cyc } },
        { 1, 2000, { .type = PST_EV_MALLOC, .f = { 0xc000, 50 }, .cyc = 30 } },
        { 2, 2000, { .type = PST_EV_MALLOC, .f = { 0xd000, 1000 }, .cyc = 10 } },
    };
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
        at(w, evs[i].ts);
        assert_int_equal(pst_writer_event(w, evs[i].stream, &evs[i].ev), 0);
    }
    assert_int_equal(pst_writer_close(w), 0);
    az_scan_t *s = NULL;
    assert_int_equal(az_scan_file(p, NULL, &s, msg, sizeof msg), 0);
    uint64_t peak = s->heap_r.peak_live_bytes;
    *lo = s->peak_tick_lo;
    *hi = s->peak_tick_hi;
    az_scan_free(s);
    return peak;
}

static void test_scan_peak_of_a_tick_ordered_by_cycle_counts(void **st)
{
    (void)st;
    uint64_t lo, hi;
    assert_int_equal(scan_peak_with_counts(20, &lo, &hi), 1600);   /* the free after thread 2's 1000 */
    assert_int_equal(lo, 1600);
    assert_int_equal(hi, 1600);
    assert_int_equal(scan_peak_with_counts(5, &lo, &hi), 1150);    /* the free before it */
    assert_int_equal(lo, 1150);
    assert_int_equal(hi, 1150);
}

static void test_sqlite_batched_rows_match_events(void **st)
{
    (void)st;
    char p[512], db[512], msg[256];
    path_in(p, sizeof p, "many.pst");
    path_in(db, sizeof db, "many.db");
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 7, .exe = "/many" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    uint64_t fr[] = { 0x401000 };
    uint32_t stk = pst_writer_stack(w, fr, 1), mark = pst_writer_string(w, "step");
    enum { N = 1037 };
    uint64_t bytes = 0, n_alloc = 0, n_stack = 0, n_free = 0, n_realloc = 0, n_calloc = 0, n_mark = 0, n_rss = 0;
    pst_event_t ev;
    for (uint64_t i = 0; i < N; i++) {
        at(w, 1000 + i * 10);
        uint32_t tid = (uint32_t)(i % 3) + 1;
        memset(&ev, 0, sizeof ev);
        switch (i % 7) {
        case 0: case 1:
            ev.type = PST_EV_MALLOC; ev.f[0] = 0x10000 + i * 64; ev.f[1] = 16 + i; ev.stack = i % 2 ? stk : 0;
            bytes += 16 + i; n_alloc++; n_stack += ev.stack != 0;
            pst_writer_event(w, tid, &ev);
            break;
        case 2:
            ev.type = PST_EV_FREE; ev.f[0] = 0x10000 + (i - 2) * 64; n_free++;
            pst_writer_event(w, tid, &ev);
            break;
        case 3:
            ev.type = PST_EV_CALLOC; ev.f[0] = 0x90000 + i * 64; ev.f[1] = 3; ev.f[2] = 8; n_calloc++;
            pst_writer_event(w, tid, &ev);
            break;
        case 4:
            ev.type = PST_EV_REALLOC; ev.f[0] = 0x10000 + (i - 3) * 64; ev.f[1] = 0x50000 + i * 64; ev.f[2] = 40;
            n_realloc++;
            pst_writer_event(w, tid, &ev);
            break;
        case 5:
            if (i % 2) PST_EMIT(w, tid, PST_EV_MARK_BEGIN, mark, i, 0);
            else PST_EMIT(w, tid, PST_EV_MARK_POINT, mark, 0);
            n_mark++;
            break;
        default:
            PST_EMIT(w, tid, PST_EV_RSS, 1000 + i, 10, 20); n_rss++;
            break;
        }
    }
    assert_int_equal(pst_writer_close(w), 0);
    az_sql_stats_t ss;
    int warn;
    assert_int_equal(az_sql_write(p, db, &ss, &warn, msg, sizeof msg), 0);
    az_scan_t *s = scan("many.pst");
    assert_true(s->events >= N);        /* + the THREAD_START of each stream */
    sqlite3 *d;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    int n = count_rows(d, "SELECT count(*) FROM events");
    assert_int_equal(n, (int)s->events);
    assert_int_equal(ss.events, s->events);
    assert_int_equal(count_rows(d, "SELECT min(id) FROM events"), 1);
    assert_int_equal(count_rows(d, "SELECT max(id) FROM events"), n);
    assert_int_equal(count_rows(d, "SELECT count(DISTINCT id) FROM events"), n);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events a JOIN events b ON b.id = a.id + 1 WHERE b.ts_ns < a.ts_ns"), 0);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE type = 1"), (int)n_alloc);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE type_name = 'malloc'"), (int)n_alloc);
    assert_int_equal(count_rows(d, "SELECT sum(size_bytes) FROM events WHERE type = 1"), (int)bytes);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE type = 1 AND stack IS NULL"), (int)(n_alloc - n_stack));
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE old_addr IS NOT NULL"), (int)n_realloc);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE arg = 3 AND size_bytes = 24"), (int)n_calloc);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE size_bytes IS NULL AND addr IS NOT NULL"), (int)n_free);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM markers m JOIN events e ON e.id = m.event_id AND e.ts_ns = m.ts_ns"), (int)n_mark);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM rss r JOIN events e ON e.id = r.event_id AND e.ts_ns = r.ts_ns"), (int)n_rss);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE typeof(id) != 'integer' OR typeof(ts_ns) != 'integer' OR typeof(type) != 'integer'"), 0);
    /* each object once: mallocs and callocs, the reallocs' new blocks */
    assert_int_equal(count_rows(d, "SELECT count(*) FROM allocations"), (int)(n_alloc + n_calloc + n_realloc));
    assert_int_equal(count_rows(d, "SELECT count(*) FROM allocations WHERE freed_by = 'free'"), (int)n_free);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM allocations WHERE freed_by = 'realloc'"), (int)n_realloc);
    assert_int_equal(count_rows(d, "SELECT count(DISTINCT tid) FROM allocations"), 3);
    sqlite3_close(d);
    az_scan_free(s);
}

/* One value of a query: INT64_MIN for NULL or no row. */
static int64_t q64(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    int64_t v = INT64_MIN;
    if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL) v = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    return v;
}

/* The allocation at addr allocated at time t: one row, as a string of
 * its columns, compared with what the trace below says of it. */
static void expect_object(sqlite3 *db, uint64_t addr, uint64_t t, const char *want)
{
    char sql[900], got[400] = "";
    snprintf(sql, sizeof sql,
             "SELECT call || ' ' || size_bytes || ' ' || granted_bytes || ' ' || tid || ' ' || "
             "ifnull(lifetime_ns, 'NULL') || ' ' || ifnull(freed_by, 'NULL') || ' ' || ifnull(free_tid, 'NULL') || ' ' || "
             "ifnull(cross_thread, 'NULL') || ' ' || CASE WHEN old_addr IS NULL THEN 'NULL' ELSE printf('%%x', old_addr) END"
             " || ' ' || "
             "ifnull(stack, 'NULL') || ' ' || "
             "(free_id IS NULL OR (free_id > id AND (SELECT e.ts_ns FROM events e WHERE e.id = free_id) = free_ts_ns)) "
             "FROM allocations WHERE addr = %llu AND ts_ns = %llu", (unsigned long long)addr, (unsigned long long)t);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        snprintf(got, sizeof got, "%s", (const char *)sqlite3_column_text(q, 0));
        rows++;
    }
    sqlite3_finalize(q);
    if (rows != 1 || strcmp(got, want) != 0)
        fprintf(stderr, "object %#llx @%llu: %d rows, got '%s', want '%s'\n", (unsigned long long)addr,
                (unsigned long long)t, rows, got, want);
    assert_int_equal(rows, 1);
    assert_string_equal(got, want);
}

/* `allocations` pairs every heap object with its free as report does,
 * checked row by row against a trace whose objects are known: a same-
 * thread and a cross-thread free, a realloc that moves and one in place,
 * realloc(p, 0), an address allocated twice with no free between (the
 * second allocation closes the first), an unmatched free, a failed
 * malloc, a reallocarray, a free with a stack, leaks, and one object
 * that outlives more allocations than the loader keeps waiting (written
 * open, completed when freed). The events view gives every event back
 * once, and the sums agree with the scan's figures. */
static void test_sqlite_allocations_pair_each_object(void **st)
{
    (void)st;
    char p[512], db[512], msg[256];
    path_in(p, sizeof p, "pairs.pst");
    path_in(db, sizeof db, "pairs.db");
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 7, .exe = "/pairs" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    assert_int_equal(pst_writer_thread(w, 1, 101, 0), 0);
    assert_int_equal(pst_writer_thread(w, 2, 202, 1), 0);
    uint64_t fr[] = { 0x401000 };
    uint32_t stk = pst_writer_stack(w, fr, 1);
    pst_event_t ev;
    enum { CHURN = 70000 };     /* more than the loader's ring of waiting objects */
    at(w, 5); PST_EMIT(w, 1, PST_EV_MALLOC, 0x900000, 4000);              /* long-lived: freed at 100000 */
    at(w, 10); memset(&ev, 0, sizeof ev); ev.type = PST_EV_MALLOC; ev.f[0] = 0x1000; ev.f[1] = 100; ev.stack = stk;
    pst_writer_event(w, 1, &ev);
    at(w, 30); PST_EMIT(w, 1, PST_EV_FREE, 0x1000);                        /* same thread, 20 ns */
    at(w, 40); PST_EMIT(w, 1, PST_EV_MALLOC, 0x2000, 200);
    at(w, 50); PST_EMIT(w, 2, PST_EV_FREE, 0x2000);                        /* freed by the other thread */
    at(w, 60); PST_EMIT(w, 1, PST_EV_MALLOC, 0x3000, 300);
    at(w, 70); PST_EMIT(w, 1, PST_EV_REALLOC, 0x3000, 0x4000, 400);        /* moves */
    at(w, 80); PST_EMIT(w, 1, PST_EV_REALLOC, 0x4000, 0x4000, 500);        /* in place */
    at(w, 90); PST_EMIT(w, 1, PST_EV_MALLOC, 0x5000, 50);
    at(w, 100); PST_EMIT(w, 2, PST_EV_MALLOC, 0x5000, 60);                 /* again, no free: closes the first */
    at(w, 110); PST_EMIT(w, 1, PST_EV_FREE, 0x99990);                      /* never allocated */
    at(w, 120); PST_EMIT(w, 1, PST_EV_REALLOC, 0x4000, 0, 0);              /* realloc(p, 0) frees */
    at(w, 130); PST_EMIT(w, 1, PST_EV_CALLOC, 0x6000, 3, 8);               /* leaked */
    at(w, 140); PST_EMIT(w, 1, PST_EV_MALLOC, 0x7000, 10);
    at(w, 150); PST_EMIT(w, 2, PST_EV_REALLOCARRAY, 0x7000, 0x8000, 4, 5); /* 20 bytes, leaked */
    at(w, 160); PST_EMIT(w, 1, PST_EV_MALLOC, 0x9000, 70);
    at(w, 170); memset(&ev, 0, sizeof ev); ev.type = PST_EV_FREE; ev.f[0] = 0x9000; ev.stack = stk;
    pst_writer_event(w, 1, &ev);                                          /* a free with a stack */
    at(w, 180); PST_EMIT(w, 1, PST_EV_MALLOC, 0, 1000);                    /* failed */
    at(w, 190); PST_EMIT(w, 2, PST_EV_POSIX_MEMALIGN, 0xa000, 64, 128);    /* leaked */
    at(w, 200); PST_EMIT(w, 1, PST_EV_MALLOC, 0x200000, 200000);           /* mmap-sized, leaked */
    for (int i = 0; i < CHURN; i++) {
        at(w, 1000 + 2 * (uint64_t)i); PST_EMIT(w, 1, PST_EV_MALLOC, 0x100000 + 16 * (uint64_t)(i % 7), 16);
        at(w, 1001 + 2 * (uint64_t)i); PST_EMIT(w, 1, PST_EV_FREE, 0x100000 + 16 * (uint64_t)(i % 7));
    }
    at(w, 200000); PST_EMIT(w, 2, PST_EV_FREE, 0x900000);
    assert_int_equal(pst_writer_close(w), 0);

    az_sql_stats_t ss;
    int warn;
    assert_int_equal(az_sql_write(p, db, &ss, &warn, msg, sizeof msg), 0);
    assert_true(ss.heap_updates >= 1);                                     /* the long-lived one */
    az_scan_t *s = scan("pairs.pst");
    sqlite3 *d;
    assert_int_equal(sqlite3_open(db, &d), SQLITE_OK);
    /* call size granted tid lifetime freed_by free_tid cross old stack, and the free event's time */
    expect_object(d, 0x900000, 5, "malloc 4000 4008 101 199995 free 202 1 NULL NULL 1");
    char want[200];
    snprintf(want, sizeof want, "malloc 100 104 101 20 free 101 0 NULL %u 1", stk);
    expect_object(d, 0x1000, 10, want);
    expect_object(d, 0x2000, 40, "malloc 200 200 101 10 free 202 1 NULL NULL 1");
    expect_object(d, 0x3000, 60, "malloc 300 312 101 10 realloc 101 0 NULL NULL 1");
    expect_object(d, 0x4000, 70, "realloc 400 408 101 10 realloc 101 0 3000 NULL 1");
    expect_object(d, 0x4000, 80, "realloc 500 504 101 40 realloc 101 0 4000 NULL 1");
    expect_object(d, 0x5000, 90, "malloc 50 56 101 10 reused 202 1 NULL NULL 1");
    expect_object(d, 0x5000, 100, "malloc 60 72 202 NULL NULL NULL NULL NULL NULL 1");
    expect_object(d, 0x6000, 130, "calloc 24 24 101 NULL NULL NULL NULL NULL NULL 1");
    expect_object(d, 0x7000, 140, "malloc 10 24 101 10 reallocarray 202 1 NULL NULL 1");
    expect_object(d, 0x8000, 150, "reallocarray 20 24 202 NULL NULL NULL NULL 7000 NULL 1");
    expect_object(d, 0x9000, 160, "malloc 70 72 101 10 free 101 0 NULL NULL 1");
    expect_object(d, 0xa000, 190, "posix_memalign 128 136 202 NULL NULL NULL NULL NULL NULL 1");
    expect_object(d, 0x200000, 200, "malloc 200000 200688 101 NULL NULL NULL NULL NULL NULL 1");
    /* no row for the failed malloc or the unknown free; the churn's objects */
    assert_int_equal(count_rows(d, "SELECT count(*) FROM allocations WHERE addr = 0 OR addr = 629136"), 0);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM allocations WHERE size_bytes = 16 AND lifetime_ns = 1"
                                   " AND freed_by = 'free' AND free_id = id + 1"), CHURN);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM allocations"), CHURN + 14);
    assert_int_equal(count_rows(d, "SELECT arg FROM allocations a JOIN events e ON e.id = a.id WHERE a.addr = 24576"), 3);
    assert_int_equal(count_rows(d, "SELECT arg FROM events WHERE type = 4"), 4);
    assert_int_equal(count_rows(d, "SELECT arg FROM events WHERE type = 6"), 64);
    assert_int_equal(count_rows(d, "SELECT count(*) FROM events WHERE type = 5 AND stack IS NOT NULL"), 1);
    /* the scan's figures: leaks, peak, counts */
    assert_int_equal(q64(d, "SELECT sum(size_bytes) FROM allocations WHERE free_ts_ns IS NULL"),
                     (int64_t)s->heap_r.leaked_bytes);
    assert_int_equal(q64(d, "SELECT count(*) FROM allocations WHERE free_ts_ns IS NULL"), (int64_t)s->heap_r.leaked_count);
    assert_int_equal(q64(d, "SELECT sum(size_bytes) FROM allocations a, (SELECT CAST(value AS INTEGER) AS p FROM meta"
                            " WHERE key = 'peak_live_event_id') WHERE a.id <= p AND (a.free_id IS NULL OR a.free_id > p)"),
                     (int64_t)s->heap_r.peak_live_bytes);
    assert_int_equal(q64(d, "SELECT count(*) FROM allocations"), (int64_t)s->heap_r.allocs);
    assert_int_equal(q64(d, "SELECT count(*) FROM allocations WHERE freed_by IS NOT NULL AND freed_by != 'reused'"),
                     (int64_t)s->heap_r.frees - (int64_t)s->heap_r.double_allocs);
    /* every event once, in its merged order, and the threads' totals */
    assert_int_equal(q64(d, "SELECT count(*) FROM events"), (int64_t)s->events);
    assert_int_equal(q64(d, "SELECT count(DISTINCT id) FROM events"), (int64_t)s->events);
    assert_int_equal(q64(d, "SELECT max(id) FROM events"), (int64_t)s->events);
    assert_int_equal(q64(d, "SELECT count(*) FROM events WHERE type = 3"), 3);
    assert_int_equal(q64(d, "SELECT count(*) FROM events WHERE type = 5"), CHURN + 5);
    assert_int_equal(q64(d, "SELECT count(*) FROM events WHERE type = 1"), CHURN + 10);
    assert_int_equal(q64(d, "SELECT cross_thread_frees FROM threads WHERE tid = 202"), 4);
    assert_int_equal(q64(d, "SELECT sum(cross_thread_frees) FROM threads"),
                     q64(d, "SELECT count(*) FROM allocations WHERE cross_thread"));
    assert_int_equal(q64(d, "SELECT leaked_bytes FROM threads WHERE tid = 202"), 60 + 20 + 128);
    assert_int_equal(q64(d, "SELECT sum(leaked_bytes) FROM sites"), (int64_t)s->heap_r.leaked_bytes);
    sqlite3_close(d);
    az_scan_free(s);
}

/* One object of the raw-address test below, by its allocating event's
 * time: its columns as one string. */
static void expect_raw(sqlite3 *db, uint64_t t, const char *want)
{
    char sql[900], got[400] = "";
    snprintf(sql, sizeof sql,
             "SELECT call || ' ' || size_bytes || ' ' || tid || ' ' || printf('%%x', addr) || ' ' || "
             "ifnull(lifetime_ns, 'NULL') || ' ' || ifnull(freed_by, 'NULL') || ' ' || ifnull(free_tid, 'NULL') || ' ' || "
             "ifnull(cross_thread, 'NULL') || ' ' || CASE WHEN old_addr IS NULL THEN 'NULL' ELSE printf('%%x', old_addr) END"
             " || ' ' || in_window || ' ' || ifnull(free_in_window, 'NULL') || ' ' || "
             "(free_id IS NULL OR (SELECT e.ts_ns FROM events e WHERE e.id = free_id) = free_ts_ns) "
             "FROM allocations WHERE ts_ns = %llu", (unsigned long long)t);
    sqlite3_stmt *q;
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    int rows = 0;
    while (sqlite3_step(q) == SQLITE_ROW) {
        snprintf(got, sizeof got, "%s", (const char *)sqlite3_column_text(q, 0));
        rows++;
    }
    sqlite3_finalize(q);
    if (rows != 1 || strcmp(got, want) != 0)
        fprintf(stderr, "object @%llu: %d rows, got '%s', want '%s'\n", (unsigned long long)t, rows, got, want);
    assert_int_equal(rows, 1);
    assert_string_equal(got, want);
}

/* Addresses the packed rows cannot store as offsets (not 16-byte aligned,
 * a realloc whose source is more than 2^63 away) are stored as they are,
 * told by the row's kind (heap_rows.kind < 0): each reads back through
 * `allocations` and `events` with the call, threads, how it was freed and
 * the selection flags (all kept in heap_kinds) as the trace below says,
 * also one written open (it outlives the loader's ring) and completed by
 * a free on the other thread, whose kind is then replaced; and the
 * address index of `sql --indexes` finds them. */
static void test_sqlite_raw_addresses_and_kinds_read_back(void **st)
{
    (void)st;
    char p[512], db[512], dbi[512], msg[256];
    path_in(p, sizeof p, "raw.pst");
    path_in(db, sizeof db, "raw.db");
    path_in(dbi, sizeof dbi, "raw_idx.db");
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 7, .exe = "/raw" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    assert_int_equal(pst_writer_thread(w, 1, 101, 0), 0);
    assert_int_equal(pst_writer_thread(w, 2, 202, 1), 0);
    enum { CHURN = 70000 };     /* more than the loader's ring of waiting objects */
    at(w, 10); PST_EMIT(w, 1, PST_EV_MALLOC, 0x2005, 5);                   /* raw, long-lived */
    at(w, 20); PST_EMIT(w, 1, PST_EV_MALLOC, 0x10000000, 32);
    at(w, 30); PST_EMIT(w, 1, PST_EV_FREE, 0x10000000);
    at(w, 40); PST_EMIT(w, 1, PST_EV_MALLOC, 0x1003, 7);                   /* raw */
    at(w, 50); PST_EMIT(w, 2, PST_EV_FREE, 0x1003);                        /* by the other thread */
    at(w, 60); PST_EMIT(w, 1, PST_EV_MALLOC, 0x7ff0000000000000ull, 8);
    at(w, 70); PST_EMIT(w, 1, PST_EV_REALLOC, 0x7ff0000000000000ull, 0x8000000000001000ull, 24); /* source 2^63 away */
    at(w, 80); PST_EMIT(w, 2, PST_EV_FREE, 0x8000000000001000ull);
    for (int i = 0; i < CHURN; i++) {
        at(w, 1000 + 2 * (uint64_t)i); PST_EMIT(w, 1, PST_EV_MALLOC, 0x10000000 + 16 * (uint64_t)(i % 7), 16);
        at(w, 1001 + 2 * (uint64_t)i); PST_EMIT(w, 1, PST_EV_FREE, 0x10000000 + 16 * (uint64_t)(i % 7));
    }
    at(w, 300000); PST_EMIT(w, 2, PST_EV_FREE, 0x2005);
    assert_int_equal(pst_writer_close(w), 0);

    /* the selection: 25 <= ts <= 60 */
    az_sql_opts_t o = { .window = 1, .from = 25, .to = 60 };
    az_sql_stats_t ss;
    int warn;
    assert_int_equal(az_sql_write_opts(p, db, &o, &ss, &warn, msg, sizeof msg), 0);
    assert_true(ss.heap_updates >= 1);                                     /* the long-lived one */
    o.indexes = 1;
    assert_int_equal(az_sql_write_opts(p, dbi, &o, &ss, &warn, msg, sizeof msg), 0);
    const char *dbs[] = { db, dbi };
    for (int k = 0; k < 2; k++) {
        sqlite3 *d;
        assert_int_equal(sqlite3_open(dbs[k], &d), SQLITE_OK);
        /* call size tid addr lifetime freed_by free_tid cross old in_window free_in_window, free event's time */
        expect_raw(d, 10, "malloc 5 101 2005 299990 free 202 1 NULL 0 0 1");
        expect_raw(d, 20, "malloc 32 101 10000000 10 free 101 0 NULL 0 1 1");
        expect_raw(d, 40, "malloc 7 101 1003 10 free 202 1 NULL 1 1 1");
        expect_raw(d, 60, "malloc 8 101 7ff0000000000000 10 realloc 101 0 NULL 1 0 1");
        expect_raw(d, 70, "realloc 24 101 8000000000001000 10 free 202 1 7ff0000000000000 0 0 1");
        /* the rows stored as they are: their kinds are negative, and every
         * row's kind is in heap_kinds */
        assert_int_equal(q64(d, "SELECT count(*) FROM heap_rows WHERE kind < 0"), 3);
        assert_int_equal(q64(d, "SELECT count(*) FROM heap_rows h LEFT JOIN heap_kinds k USING (kind) WHERE k.kind IS NULL"), 0);
        /* the frees as events, by address and thread */
        assert_int_equal(q64(d, "SELECT count(*) FROM events WHERE type = 5 AND addr = 8197 AND tid = 202 AND ts_ns = 300000"), 1);
        assert_int_equal(q64(d, "SELECT count(*) FROM events WHERE type = 5 AND addr = 4099 AND tid = 202 AND in_window = 1"), 1);
        assert_int_equal(q64(d, "SELECT count(*) FROM events WHERE type = 3 AND old_addr = 9218868437227405312"
                                " AND addr = -9223372036854771712 AND in_window = 0"), 1);
        assert_int_equal(q64(d, "SELECT count(*) FROM allocations WHERE in_window"), 2);
        assert_int_equal(q64(d, "SELECT count(*) FROM events WHERE in_window"),
                         q64(d, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'events_in_window'"));
        assert_int_equal(q64(d, "SELECT cross_thread_frees FROM sites"), 3);
        assert_int_equal(q64(d, "SELECT cross_thread_frees FROM threads WHERE tid = 202"), 3);
        assert_int_equal(q64(d, "SELECT count(*) FROM allocations WHERE addr = 8197"), 1);
        assert_int_equal(q64(d, "SELECT count(*) FROM allocations WHERE addr = 268435456"), 1 + CHURN / 7 + (CHURN % 7 > 0));
        if (k == 1) {            /* the index of the address expression answers the lookup */
            sqlite3_stmt *q;
            assert_int_equal(sqlite3_prepare_v2(d, "EXPLAIN QUERY PLAN SELECT * FROM allocations WHERE addr = 8197",
                                                -1, &q, NULL), SQLITE_OK);
            int used = 0;
            while (sqlite3_step(q) == SQLITE_ROW) used |= strstr((const char *)sqlite3_column_text(q, 3), "heap_rows_addr") != NULL;
            sqlite3_finalize(q);
            assert_true(used);
        }
        sqlite3_close(d);
    }
}

static void test_exports_parse(void **st)
{
    (void)st;
    char p[512], out[512], msg[256];
    int warn, err;
    path_in(p, sizeof p, "golden.pst");
    path_in(out, sizeof out, "golden.chrome.json");
    assert_int_equal(az_export(p, AZ_EXPORT_CHROME, AZ_WEIGHT_BYTES, out, &warn, msg, sizeof msg), 0);
    az_jdoc_t *d = az_json_parse_file(out, &err, msg, sizeof msg);
    if (!d) fprintf(stderr, "chrome export: %s\n", msg);
    assert_non_null(d);
    const az_jv_t *evs = az_json_get(az_json_root(d), "traceEvents");
    assert_non_null(evs);
    int b = 0, e = 0, i = 0, c = 0, X = 0;
    for (const az_jv_t *x = evs->child; x; x = x->next) {
        const az_jv_t *ph = az_json_get(x, "ph");
        assert_non_null(ph);
        b += !strcmp(ph->str, "b"); e += !strcmp(ph->str, "e");
        i += !strcmp(ph->str, "i"); c += !strcmp(ph->str, "C");
        X += !strcmp(ph->str, "X");
    }
    /* the three scopes (prefill, decode twice) follow each other on one
     * thread: X slices, no async pair */
    assert_int_equal(X, 3);
    assert_int_equal(b, 0);
    assert_int_equal(e, 0);
    assert_int_equal(i, 1);
    assert_true(c > 5);
    az_json_free(d);
    path_in(out, sizeof out, "golden.folded");
    assert_int_equal(az_export(p, AZ_EXPORT_FOLDED, AZ_WEIGHT_CALLS, out, &warn, msg, sizeof msg), 0);
    FILE *f = fopen(out, "r");
    char line[1024];
    unsigned long total = 0;
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        char *sp = strrchr(line, ' ');
        assert_non_null(sp);
        total += strtoul(sp + 1, NULL, 10);
        lines++;
    }
    fclose(f);
    assert_int_equal(lines, 3);       /* stacks 1 and 2, and "[no stack]" */
    assert_int_equal(total, 6);       /* every allocation */
}

static az_jdoc_t *doc(const char *text)
{
    int err;
    az_jdoc_t *d = az_json_parse(text, strlen(text), &err, NULL, 0);
    assert_non_null(d);
    return d;
}

static int gate(const char *cur, const char *base, int kind, const char *rule)
{
    az_jdoc_t *c = doc(cur), *b = doc(base);
    az_gate_rule_t r;
    char msg[256];
    assert_int_equal(az_gate_rule_parse(kind, rule, &r, msg, sizeof msg), 0);
    FILE *devnull = fopen("/dev/null", "w");
    int rc = az_gate_check(az_json_root(c), az_json_root(b), &r, 1, 0, devnull, msg, sizeof msg);
    fclose(devnull);
    az_json_free(c);
    az_json_free(b);
    return rc;
}

static void test_gate_tolerance_edges(void **st)
{
    (void)st;
    const char *base = "{\"peak_live_bytes\": 1000, \"leaked_bytes\": 0, \"pool\": {\"hit_rate\": 0.8},"
                       " \"phases\": {\"decode\": {\"heap_calls\": 100}}}";
    /* lower is better: +10% passes at 10, fails at 9.99 */
    assert_int_equal(gate("{\"peak_live_bytes\": 1100}", base, AZ_RULE_TOL, "peak_live_bytes=10"), 0);
    assert_int_equal(gate("{\"peak_live_bytes\": 1100}", base, AZ_RULE_TOL, "peak_live_bytes=9.99"), 1);
    assert_int_equal(gate("{\"peak_live_bytes\": 500}", base, AZ_RULE_TOL, "peak_live_bytes=0"), 0);
    /* higher is better */
    assert_int_equal(gate("{\"pool\": {\"hit_rate\": 0.72}}", base, AZ_RULE_TOL, "pool.hit_rate=10"), 0);
    assert_int_equal(gate("{\"pool\": {\"hit_rate\": 0.71}}", base, AZ_RULE_TOL, "pool.hit_rate=10"), 1);
    assert_int_equal(gate("{\"pool\": {\"hit_rate\": 0.99}}", base, AZ_RULE_TOL, "pool.hit_rate=0"), 0);
    /* zero baseline: absolute, with units */
    assert_int_equal(gate("{\"leaked_bytes\": 4096}", base, AZ_RULE_TOL, "leaked_bytes=4KiB"), 0);
    assert_int_equal(gate("{\"leaked_bytes\": 4097}", base, AZ_RULE_TOL, "leaked_bytes=4KiB"), 1);
    assert_int_equal(gate("{\"leaked_bytes\": 1}", base, AZ_RULE_TOL, "leaked_bytes=0"), 1);
    /* per-phase path, max with units, missing metric */
    assert_int_equal(gate("{\"phases\": {\"decode\": {\"heap_calls\": 101}}}", base, AZ_RULE_TOL, "phases.decode.heap_calls=1"), 0);
    assert_int_equal(gate("{\"phases\": {\"decode\": {\"heap_calls\": 102}}}", base, AZ_RULE_TOL, "phases.decode.heap_calls=1"), 1);
    assert_int_equal(gate("{\"peak_live_bytes\": 67108864}", base, AZ_RULE_MAX, "peak_live_bytes=64MiB"), 0);
    assert_int_equal(gate("{\"peak_live_bytes\": 67108865}", base, AZ_RULE_MAX, "peak_live_bytes=64MiB"), 1);
    assert_int_equal(gate("{\"peak_live_bytes\": 1}", base, AZ_RULE_TOL, "no.such.metric=5"), 2);
    /* not a number, not finite, null: never a pass */
    assert_int_equal(gate("{\"peak_live_bytes\": \"900\"}", base, AZ_RULE_TOL, "peak_live_bytes=50"), 2);
    assert_int_equal(gate("{\"peak_live_bytes\": 900}", "{\"peak_live_bytes\": \"1000\"}", AZ_RULE_TOL, "peak_live_bytes=50"), 2);
    assert_int_equal(gate("{\"peak_live_bytes\": 1e999}", base, AZ_RULE_MAX, "peak_live_bytes=64MiB"), 2);
    assert_int_equal(gate("{\"peak_live_bytes\": 900}", "{\"peak_live_bytes\": 1e999}", AZ_RULE_TOL, "peak_live_bytes=50"), 2);
    assert_int_equal(gate("{\"allocs_per_decode_step\": null}", base, AZ_RULE_MAX, "allocs_per_decode_step=5"), 2);
    assert_int_equal(gate("{\"a\": null}", "{\"a\": null}", AZ_RULE_TOL, "a=5"), 0);       /* n/a on both sides */
    assert_int_equal(gate("{\"a\": null}", "{\"a\": 3}", AZ_RULE_TOL, "a=5"), 2);
    assert_int_equal(gate("{\"a\": 3}", "{\"a\": null}", AZ_RULE_TOL, "a=5"), 2);
    /* kv_utilization_per_step is higher-is-better */
    assert_int_equal(gate("{\"kv\": {\"kv_utilization_per_step\": 0.5}}", "{\"kv\": {\"kv_utilization_per_step\": 0.9}}",
                          AZ_RULE_TOL, "kv.kv_utilization_per_step=10"), 1);
    assert_int_equal(gate("{\"kv\": {\"kv_utilization\": 0.95}}", "{\"kv\": {\"kv_utilization\": 0.9}}",
                          AZ_RULE_TOL, "kv.kv_utilization=0"), 0);
    az_gate_rule_t r;
    char msg[128];
    assert_int_equal(az_gate_rule_parse(AZ_RULE_TOL, "peak_live_bytes", &r, msg, sizeof msg), PSC_EINVAL);
    assert_int_equal(az_gate_rule_parse(AZ_RULE_MAX, "x=lots", &r, msg, sizeof msg), PSC_EINVAL);
}

/* Defaults are the deterministic figures: a time-weighted mean that moved
 * does not fail them; a missing-on-one-side headline metric is bad input. */
static void test_gate_defaults_skip_time_weighted(void **st)
{
    (void)st;
    char msg[256];
    FILE *devnull = fopen("/dev/null", "w");
    az_jdoc_t *b = doc("{\"peak_live_bytes\": 10, \"kv\": {\"kv_utilization\": 0.9, \"kv_utilization_per_step\": 0.8}}");
    az_jdoc_t *c = doc("{\"peak_live_bytes\": 10, \"kv\": {\"kv_utilization\": 0.7, \"kv_utilization_per_step\": 0.8}}");
    az_jdoc_t *w = doc("{\"peak_live_bytes\": 10, \"kv\": {\"kv_utilization\": 0.9, \"kv_utilization_per_step\": 0.79}}");
    az_jdoc_t *m = doc("{\"kv\": {\"kv_utilization\": 0.9, \"kv_utilization_per_step\": 0.8}}");
    assert_int_equal(az_gate_check(az_json_root(c), az_json_root(b), NULL, 0, 0, devnull, msg, sizeof msg), 0);
    assert_int_equal(az_gate_check(az_json_root(w), az_json_root(b), NULL, 0, 0, devnull, msg, sizeof msg), 1);
    assert_int_equal(az_gate_check_named(az_json_root(m), az_json_root(b), "base.json", NULL, 0, 0, devnull,
                                         msg, sizeof msg), 2);
    assert_non_null(strstr(msg, "peak_live_bytes"));
    /* the diff shows the time-weighted change as timing, and counts it only when asked */
    assert_int_equal(az_diff_docs(az_json_root(b), az_json_root(c), 0, devnull), 0);
    assert_int_equal(az_diff_docs(az_json_root(b), az_json_root(c), AZ_DIFF_TIMING, devnull), 1);
    assert_int_equal(az_diff_docs(az_json_root(b), az_json_root(w), 0, devnull), 1);
    assert_true(az_diff_is_timing("phases.decode.time_ns") && az_diff_is_timing("duration_ns") &&
                az_diff_is_timing("pool.internal_frag_avg") && !az_diff_is_timing("peak_live_bytes") &&
                !az_diff_is_timing("phases.events.count") && !az_diff_is_timing("kv.kv_utilization_per_step"));
    fclose(devnull);
    az_json_free(b);
    az_json_free(c);
    az_json_free(w);
    az_json_free(m);
}

/* A trace whose figures stop early is no basis for a gate. */
static void test_incomplete_traces_are_named(void **st)
{
    (void)st;
    char p[512], msg[256], why[200];
    int err;
    path_in(p, sizeof p, "golden.pst");
    az_jdoc_t *d = az_metrics_doc(p, &err, msg, sizeof msg);
    assert_int_equal(az_doc_incomplete(az_json_root(d), why, sizeof why), 0);
    az_json_free(d);
    path_in(p, sizeof p, "cut.pst");                 /* abandoned: no END */
    d = az_metrics_doc(p, &err, msg, sizeof msg);
    assert_non_null(d);
    assert_int_equal(az_doc_incomplete(az_json_root(d), why, sizeof why), 1);
    assert_non_null(strstr(why, "incomplete"));
    az_json_free(d);
    /* complete, and no event at all */
    path_in(p, sizeof p, "empty.pst");
    pst_writer_cfg_t cfg = { .pid = 1, .exe = "/empty" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    assert_int_equal(pst_writer_close(w), 0);
    d = az_metrics_doc(p, &err, msg, sizeof msg);
    assert_non_null(d);
    assert_int_equal(az_doc_incomplete(az_json_root(d), why, sizeof why), 1);
    assert_non_null(strstr(why, "no events"));
    az_json_free(d);
    d = doc("{\"killed\": true, \"complete\": true}");
    assert_int_equal(az_doc_incomplete(az_json_root(d), why, sizeof why), 1);
    assert_non_null(strstr(why, "killed"));
    az_json_free(d);
    /* another program: compared by file name */
    az_jdoc_t *a = doc("{\"program\": \"/a/build/refengine\"}"), *b = doc("{\"program\": \"/b/refengine\"}"),
              *c = doc("{\"program\": \"/usr/bin/python3\"}"), *n = doc("{}");
    assert_int_equal(az_doc_other_program(az_json_root(a), az_json_root(b), msg, sizeof msg), 0);
    assert_int_equal(az_doc_other_program(az_json_root(a), az_json_root(c), msg, sizeof msg), 1);
    assert_non_null(strstr(msg, "python3"));
    assert_int_equal(az_doc_other_program(az_json_root(a), az_json_root(n), msg, sizeof msg), 0);
    az_json_free(a); az_json_free(b); az_json_free(c); az_json_free(n);
}

/* --phase NAME that never occurs is an error naming the phases there are. */
static void test_unknown_phase_is_an_error(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "golden.pst");
    az_scan_opts_t so = { .phase = "nosuch" };
    az_scan_t *s = (az_scan_t *)&s;
    assert_int_equal(az_scan_file(p, &so, &s, msg, sizeof msg), PSC_ENOENT);
    assert_null(s);
    assert_non_null(strstr(msg, "nosuch"));
    assert_non_null(strstr(msg, "prefill, decode, done"));
    so.phase = "decode";
    assert_int_equal(az_scan_file(p, &so, &s, msg, sizeof msg), 0);
    az_scan_free(s);
}

/* A split ALLOC list: n_tokens rides on the first piece only; the next
 * piece continues the spread (the last block partial), and a piece without
 * a count before it counts its blocks full. */
static void test_kv_split_allocation_spreads_tokens(void **st)
{
    (void)st;
    char p[512], msg[256];
    path_in(p, sizeof p, "split.pst");
    int err;
    pst_writer_cfg_t cfg = { .pid = 2, .exe = "/split" };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    static uint32_t ids[PST_MAX_IDS + 2];
    for (uint32_t i = 0; i < PST_MAX_IDS + 2; i++) ids[i] = i;
    pst_event_t ev;
    at(w, 100); PST_EMIT(w, 1, PST_EV_KVB_CREATE, 1, pst_writer_string(w, "kv"), 4, PST_MAX_IDS + 2, 1, 0, PST_MAX_IDS + 2, 64);
    at(w, 200);
    /* 4 * (PST_MAX_IDS + 1) + 1 tokens over PST_MAX_IDS + 2 blocks of 4 */
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_KVB_ALLOC;
    ev.f[0] = 1; ev.f[1] = 1; ev.f[3] = 1; ev.f[5] = 4 * (PST_MAX_IDS + 1) + 1;
    ev.ids = ids; ev.n_ids = PST_MAX_IDS;
    pst_writer_event(w, 1, &ev);
    ev.f[1] = 2; ev.f[5] = 0; ev.ids = ids + PST_MAX_IDS; ev.n_ids = 2;
    pst_writer_event(w, 1, &ev);
    at(w, 300);
    memset(&ev, 0, sizeof ev); ev.type = PST_EV_KVB_FREE; ev.f[0] = 1; ev.f[1] = 3;
    ev.ids = ids; ev.n_ids = PST_MAX_IDS;
    pst_writer_event(w, 1, &ev);
    ev.f[1] = 4; ev.ids = ids + PST_MAX_IDS; ev.n_ids = 2;
    pst_writer_event(w, 1, &ev);
    assert_int_equal(pst_writer_close(w), 0);
    az_scan_t *s = NULL;
    assert_int_equal(az_scan_file(p, NULL, &s, msg, sizeof msg), 0);
    const az_result_t *h = &s->heap_r;
    assert_int_equal(h->peak_kv_blocks, PST_MAX_IDS + 2);
    double want = (4.0 * (PST_MAX_IDS + 1) + 1) / (4.0 * (PST_MAX_IDS + 2));
    assert_true(fabs(h->kv_utilization_at_peak - want) < 1e-12);
    assert_true(fabs(h->kv_utilization - want) < 1e-12);
    az_scan_free(s);
}

static void test_diff_of_a_trace_with_itself_is_empty(void **st)
{
    (void)st;
    char p[512], msg[256];
    int err;
    path_in(p, sizeof p, "golden.pst");
    az_jdoc_t *a = az_metrics_doc(p, &err, msg, sizeof msg), *b = az_metrics_doc(p, &err, msg, sizeof msg);
    assert_non_null(a);
    assert_non_null(b);
    FILE *devnull = fopen("/dev/null", "w");
    assert_int_equal(az_diff_docs(az_json_root(a), az_json_root(b), 0, devnull), 0);
    az_jdoc_t *c = doc("{\"peak_live_bytes\": 351}");
    assert_true(az_diff_docs(az_json_root(a), az_json_root(c), 1, devnull) > 0);
    fclose(devnull);
    az_json_free(a);
    az_json_free(b);
    az_json_free(c);
}

/* ---- mutation tests (issue 12) ---------------------------------------------------
 *
 * Each pins one documented rule to numbers worked out by hand in its
 * comment and fails under the mutant that breaks it (once test_mutants.c,
 * folded into the suites by module). KV behaviour is checked only through
 * what az_scan_file and rp_run hand back, never through internal tables.
 * Their helpers keep their own names under the mu_ prefix; each test makes
 * and removes its own temporary directory (mu_setup, mu_teardown). */

/* This cmocka has no assert_double_equal. */
#define mu_assert_near(a, b) mu_near_((double)(a), (double)(b), #a, __FILE__, __LINE__)
static void mu_near_(double a, double b, const char *what, const char *file, int line)
{
    if (!(a - b <= 1e-9 && b - a <= 1e-9)) {
        fprintf(stderr, "%s:%d: %s = %.12g, want %.12g\n", file, line, what, a, b);
        fail();
    }
}

static char mu_dir[256];

static int mu_setup(void **st)
{
    (void)st;
    snprintf(mu_dir, sizeof mu_dir, "/tmp/test_analyzer.mu.XXXXXX");
    return mkdtemp(mu_dir) ? 0 : -1;
}

static int mu_teardown(void **st)
{
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", mu_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static pst_writer_t *mu_open_trace(char *path, size_t len, const char *name)
{
    snprintf(path, len, "%s/%s", mu_dir, name);
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 12, .exe = "/mutants" };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    return w;
}

/* ---- gate and diff: utilizations are higher-is-better --------------------------- */

static az_jdoc_t *mu_doc(const char *text)
{
    int err = 0;
    az_jdoc_t *d = az_json_parse(text, strlen(text), &err, NULL, 0);
    assert_non_null(d);
    return d;
}

/* az_gate_check of one --tol rule (or the default rules when rule is NULL);
 * the gate's lines go to *lines (malloc'ed, the caller frees). */
static int mu_gate_lines(const char *cur, const char *base, const char *rule, double dflt_tol, char **lines)
{
    az_jdoc_t *c = mu_doc(cur), *b = mu_doc(base);
    az_gate_rule_t r;
    char msg[256] = "";
    if (rule) assert_int_equal(az_gate_rule_parse(AZ_RULE_TOL, rule, &r, msg, sizeof msg), 0);
    size_t len = 0;
    FILE *out = open_memstream(lines, &len);
    assert_non_null(out);
    int rc = az_gate_check(az_json_root(c), az_json_root(b), rule ? &r : NULL, rule ? 1 : 0, dflt_tol,
                           out, msg, sizeof msg);
    fclose(out);
    if (rc == 2) fprintf(stderr, "gate: %s\n", msg);
    az_json_free(c);
    az_json_free(b);
    return rc;
}

static int mu_gate(const char *cur, const char *base, const char *rule)
{
    char *lines = NULL;
    int rc = mu_gate_lines(cur, base, rule, 0, &lines);
    free(lines);
    return rc;
}

static void test_gate_utilizations_are_higher_is_better(void **st)
{
    (void)st;
    assert_int_equal(az_gate_higher_is_better("kv.kv_utilization"), 1);
    assert_int_equal(az_gate_higher_is_better("kv.kv_utilization_per_step"), 1);
    assert_int_equal(az_gate_higher_is_better("kv.kv_utilization_at_peak"), 1);
    assert_int_equal(az_gate_higher_is_better("kv_utilization"), 1);     /* the last part decides */
    assert_int_equal(az_gate_higher_is_better("kv.kv_waste_ratio"), 0);  /* waste: lower is better */
    assert_int_equal(az_gate_higher_is_better("kv.peak_blocks_in_use"), 0);
}

/* Baseline 0.9. A drop to 0.5 is worse by 0.4, more than 10% of 0.9 (0.09):
 * regressed. A rise to 0.95 is better: passes even with 0% allowed. */
static void test_gate_fails_a_drop_in_kv_utilization(void **st)
{
    (void)st;
    const char *base = "{\"kv\": {\"kv_utilization\": 0.9}}";
    assert_int_equal(mu_gate("{\"kv\": {\"kv_utilization\": 0.5}}", base, "kv.kv_utilization=10"), 1);
    assert_int_equal(mu_gate("{\"kv\": {\"kv_utilization\": 0.95}}", base, "kv.kv_utilization=0"), 0);
    /* 0.85 is worse by 0.05, within 10% (0.09) */
    assert_int_equal(mu_gate("{\"kv\": {\"kv_utilization\": 0.85}}", base, "kv.kv_utilization=10"), 0);
    char *lines = NULL;
    assert_int_equal(mu_gate_lines("{\"kv\": {\"kv_utilization\": 0.5}}", base, "kv.kv_utilization=10", 0, &lines), 1);
    assert_non_null(strstr(lines, "REGRESSED"));
    assert_non_null(strstr(lines, "higher is better"));
    free(lines);
}

/* The same for the per-step figure, with an explicit rule and with the
 * default rules (kv.kv_utilization_per_step is a headline metric): 0.8 ->
 * 0.4 is worse by 0.4 > 0.08 (10%); 0.4 -> 0.8 is better. */
static void test_gate_fails_a_drop_in_kv_utilization_per_step(void **st)
{
    (void)st;
    const char *hi = "{\"kv\": {\"kv_utilization_per_step\": 0.8}}";
    const char *lo = "{\"kv\": {\"kv_utilization_per_step\": 0.4}}";
    assert_int_equal(mu_gate(lo, hi, "kv.kv_utilization_per_step=10"), 1);
    assert_int_equal(mu_gate(hi, lo, "kv.kv_utilization_per_step=0"), 0);
    char *lines = NULL;
    assert_int_equal(mu_gate_lines(lo, hi, NULL, 10, &lines), 1);      /* defaults, 10% */
    assert_non_null(strstr(lines, "REGRESSED kv.kv_utilization_per_step"));
    free(lines);
    lines = NULL;
    assert_int_equal(mu_gate_lines(hi, lo, NULL, 0, &lines), 0);       /* defaults, 0%: a rise passes */
    assert_null(strstr(lines, "REGRESSED"));
    free(lines);
}

/* diff calls a rise in the per-step utilization (not a timing figure)
 * "better" and a drop "worse". */
static void test_diff_calls_a_rise_in_utilization_better(void **st)
{
    (void)st;
    az_jdoc_t *lo = mu_doc("{\"kv\": {\"kv_utilization_per_step\": 0.4}}");
    az_jdoc_t *hi = mu_doc("{\"kv\": {\"kv_utilization_per_step\": 0.8}}");
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(az_diff_docs(az_json_root(lo), az_json_root(hi), 0, out), 1);
    fclose(out);
    assert_non_null(strstr(buf, "better"));
    assert_null(strstr(buf, "worse"));
    free(buf);
    buf = NULL;
    out = open_memstream(&buf, &len);
    assert_non_null(out);
    assert_int_equal(az_diff_docs(az_json_root(hi), az_json_root(lo), 0, out), 1);
    fclose(out);
    assert_non_null(strstr(buf, "worse"));
    assert_null(strstr(buf, "better"));
    free(buf);
    az_json_free(lo);
    az_json_free(hi);
}

/* ---- KV in the report (az_scan_file) --------------------------------------------- */

static void mu_kv_create(pst_writer_t *w, uint64_t pool, uint64_t block_size, uint64_t n_blocks,
                      uint64_t slot_bytes)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = pool; ev.f[2] = block_size; ev.f[3] = n_blocks; ev.f[7] = slot_bytes;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void mu_kv_alloc(pst_writer_t *w, uint64_t pool, uint64_t seq, uint64_t owner, uint64_t n_tokens,
                     const uint32_t *ids, uint32_t n)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_ALLOC;
    ev.f[0] = pool; ev.f[1] = seq;
    ev.f[2] = 2;                        /* KVB_STREAM_KV: its tokens count */
    ev.f[3] = owner; ev.f[5] = n_tokens;
    ev.ids = ids; ev.n_ids = n;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void mu_kv_free(pst_writer_t *w, uint64_t pool, uint64_t seq, const uint32_t *ids, uint32_t n)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_FREE;
    ev.f[0] = pool; ev.f[1] = seq;
    ev.ids = ids; ev.n_ids = n;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void mu_mark(pst_writer_t *w, int begin, const char *name, uint64_t inst, int64_t p0, int64_t p1)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = begin ? PST_EV_MARK_BEGIN : PST_EV_MARK_END;
    ev.str = name;
    ev.f[1] = inst;
    if (begin && (p0 || p1)) {
        ev.payload[0] = p0;
        ev.payload[1] = p1;
        ev.n_payload = 2;
    }
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

/* One pool of 16-token blocks:
 *
 *   t=100  ALLOC {0,1}, 32 tokens     blocks 16 + 16: tokens 32, capacity 32
 *   t=150  decode step 1 starts       sample 32/32 = 1
 *   t=200  FREE {0,1}                 tokens 0, capacity 0
 *   t=300  ALLOC {2,3,4}, 40 tokens   16 + 16 + 8: tokens 40, capacity 48 (the peak: 3 blocks)
 *   t=350  decode step 2 starts       sample 40/48 = 5/6
 *   t=400  FREE {2,3,4}               tokens 0, capacity 0
 *
 * kv_utilization_at_peak = 40/48 = 5/6. kv_utilization is the time-weighted
 * mean while capacity > 0: [100,200) at 1, [300,400) at 5/6: (1 + 5/6) / 2
 * = 11/12. kv_utilization_per_step = (1 + 5/6) / 2 = 11/12.
 * If the freed blocks kept their 32 tokens, the peak would read 72/48 = 1.5;
 * if blocks started empty (n_tokens ignored), 0/48 = 0. */
static void test_report_kv_freed_blocks_take_their_tokens(void **st)
{
    (void)st;
    char p[512], msg[256];
    pst_writer_t *w = mu_open_trace(p, sizeof p, "kvscan.pst");
    mu_kv_create(w, 1, 16, 8, 16 * 64);
    const uint32_t first[2] = { 0, 1 }, second[3] = { 2, 3, 4 };
    pst_writer_time(w, 100); mu_kv_alloc(w, 1, 1, 1, 32, first, 2);
    pst_writer_time(w, 150); mu_mark(w, 1, "decode", 1, 0, 0);
    pst_writer_time(w, 160); mu_mark(w, 0, "decode", 1, 0, 0);
    pst_writer_time(w, 200); mu_kv_free(w, 1, 2, first, 2);
    pst_writer_time(w, 300); mu_kv_alloc(w, 1, 3, 1, 40, second, 3);
    pst_writer_time(w, 350); mu_mark(w, 1, "decode", 2, 0, 0);
    pst_writer_time(w, 360); mu_mark(w, 0, "decode", 2, 0, 0);
    pst_writer_time(w, 400); mu_kv_free(w, 1, 4, second, 3);
    assert_int_equal(pst_writer_close(w), 0);

    az_scan_t *s = NULL;
    int rc = az_scan_file(p, NULL, &s, msg, sizeof msg);
    if (rc) fprintf(stderr, "scan: %s\n", msg);
    assert_int_equal(rc, 0);
    const az_result_t *h = &s->heap_r;
    assert_true(h->has_kv);
    assert_int_equal(h->peak_kv_blocks, 3);
    assert_int_equal(h->peak_kv_t, 300);
    mu_assert_near(h->kv_utilization_at_peak, 40.0 / 48.0);
    mu_assert_near(h->kv_utilization, 11.0 / 12.0);
    mu_assert_near(h->kv_waste_ratio, 1.0 / 12.0);
    assert_int_equal(h->kv_step_samples, 2);
    mu_assert_near(h->kv_utilization_per_step, 11.0 / 12.0);
    az_scan_free(s);
}

/* A block freed and taken again (same id) starts from the new ALLOC's
 * tokens, not from what it held before:
 *
 *   t=100  ALLOC {0}, 16 tokens   tokens 16, capacity 16
 *   t=200  FREE {0}               tokens 0, capacity 0
 *   t=300  ALLOC {0,1}, 20 tokens 16 + 4: tokens 20, capacity 32 (the peak)
 *   t=400  FREE {0,1}
 *
 * at the peak 20/32 = 0.625; time-weighted (16/16 + 20/32) / 2 = 0.8125.
 * (Keeping the freed 16 would read 36/32 at the peak.) */
static void test_report_kv_reused_block_id_starts_from_its_new_tokens(void **st)
{
    (void)st;
    char p[512], msg[256];
    pst_writer_t *w = mu_open_trace(p, sizeof p, "kvreuse.pst");
    mu_kv_create(w, 1, 16, 4, 16 * 64);
    const uint32_t one[1] = { 0 }, two[2] = { 0, 1 };
    pst_writer_time(w, 100); mu_kv_alloc(w, 1, 1, 1, 16, one, 1);
    pst_writer_time(w, 200); mu_kv_free(w, 1, 2, one, 1);
    pst_writer_time(w, 300); mu_kv_alloc(w, 1, 3, 1, 20, two, 2);
    pst_writer_time(w, 400); mu_kv_free(w, 1, 4, two, 2);
    assert_int_equal(pst_writer_close(w), 0);

    az_scan_t *s = NULL;
    int rc = az_scan_file(p, NULL, &s, msg, sizeof msg);
    if (rc) fprintf(stderr, "scan: %s\n", msg);
    assert_int_equal(rc, 0);
    const az_result_t *h = &s->heap_r;
    assert_int_equal(h->peak_kv_blocks, 2);
    mu_assert_near(h->kv_utilization_at_peak, 20.0 / 32.0);
    mu_assert_near(h->kv_utilization, (1.0 + 20.0 / 32.0) / 2);
    az_scan_free(s);
}

/* ---- mutation tests (issue 27, item 11) -------------------------------------------
 *
 * One test per mutation that survived every other test; numbers worked out
 * by hand in each comment. Helpers under the mu27_ prefix; each test makes
 * and removes its own temporary directory (mu27_setup, mu27_teardown). */

static char mu27_dir[256];

static int mu27_setup(void **st)
{
    (void)st;
    snprintf(mu27_dir, sizeof mu27_dir, "/tmp/test_analyzer.mu27.XXXXXX");
    return mkdtemp(mu27_dir) ? 0 : -1;
}

static int mu27_teardown(void **st)
{
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", mu27_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- building traces ------------------------------------------------------ */

typedef struct mu27_tb {
    char path[512];
    pst_writer_t *w;
    uint64_t t;
} mu27_tb_t;

static void mu27_tb_open(mu27_tb_t *b, const char *name)
{
    snprintf(b->path, sizeof b->path, "%s/%s", mu27_dir, name);
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 27, .exe = "/mutants27" };
    b->w = pst_writer_open(b->path, &cfg, &err);
    assert_non_null(b->w);
    b->t = 0;
}

static void mu27_tb_close(mu27_tb_t *b) { assert_int_equal(pst_writer_close(b->w), 0); }

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
static void mu27_write_peak_twice(char *path, size_t len)
{
    mu27_tb_t b;
    mu27_tb_open(&b, "peak_twice.pst");
    pst_writer_time(b.w, 1000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x1000, 10), 0);
    pst_writer_time(b.w, 2000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x2000, 100), 0);
    pst_writer_time(b.w, 3000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_FREE, 0x2000), 0);
    pst_writer_time(b.w, 4000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x3000, 100), 0);
    pst_writer_time(b.w, 5000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_FREE, 0x3000), 0);
    pst_writer_time(b.w, 6000); assert_int_equal(PST_EMIT(b.w, 1, PST_EV_FREE, 0x1000), 0);
    mu27_tb_close(&b);
    snprintf(path, len, "%s", b.path);
}

static void test_peak_time_is_the_first_time_reached_in_report(void **st)
{
    (void)st;
    char p[512], msg[256];
    mu27_write_peak_twice(p, sizeof p);
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

static int64_t mu27_q_int(sqlite3 *db, const char *sql)
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
    mu27_write_peak_twice(p, sizeof p);
    snprintf(dbp, sizeof dbp, "%s/peak_twice.sqlite", mu27_dir);
    az_sql_stats_t sst;
    int warning = 0;
    int rc = az_sql_write(p, dbp, &sst, &warning, msg, sizeof msg);
    if (rc) fprintf(stderr, "sql: %s\n", msg);
    assert_int_equal(rc, 0);
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open_v2(dbp, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    int64_t a_id = mu27_q_int(db, "SELECT id FROM allocations WHERE addr = 4096 * 2");
    int64_t a_ts = mu27_q_int(db, "SELECT ts_ns FROM allocations WHERE addr = 4096 * 2");
    int64_t b_ts = mu27_q_int(db, "SELECT ts_ns FROM allocations WHERE addr = 4096 * 3");
    assert_true(a_ts < b_ts);
    assert_int_equal(mu27_q_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'peak_live_bytes'"), 110);
    assert_int_equal(mu27_q_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'peak_live_event_id'"), a_id);
    assert_int_equal(mu27_q_int(db, "SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'peak_live_ts_ns'"), a_ts);
    assert_int_equal(mu27_q_int(db, "SELECT CAST(value AS INTEGER) FROM metrics WHERE name = 'peak_live_t_ns'"), 1000);
    sqlite3_close(db);
}

/* Stacks stored as paths in a tree of frames from the outermost inward
 * (schema 5): a frame shared by several stacks at the same place from the
 * outer end is one stack_nodes row, and the frames view gives each stack
 * its own recorded frames back, innermost first. Unsymbolized addresses
 * (no module) are one displayed frame each, their pc, so the expectation
 * is the stacks as written. By hand, outermost first:
 *   A  403 402 401      B  403 402 411      C  403 402
 *   D  403              E  403 401          F  401 403
 * distinct paths: 403, 403-402, 403-402-401, 403-402-411, 403-401, 401,
 * 401-403 = 7 nodes for 13 frames. E's 401 is not A's (another parent and
 * another place from the outer end), F's 403 not the others' root. */
static void test_sqlite_stacks_share_outer_nodes(void **st)
{
    (void)st;
    static const uint64_t stk[6][3] = {
        { 0x401000, 0x402000, 0x403000 }, { 0x411000, 0x402000, 0x403000 }, { 0x402000, 0x403000 },
        { 0x403000 }, { 0x401000, 0x403000 }, { 0x403000, 0x401000 },
    };
    static const uint32_t depth[6] = { 3, 3, 2, 1, 2, 2 };
    char p[512], db[2][512], msg[256];
    path_in(p, sizeof p, "prefix.pst");
    path_in(db[0], sizeof db[0], "prefix.db");
    path_in(db[1], sizeof db[1], "prefix_ix.db");
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 7, .exe = "/prefix", .stacks = PST_STACKS_FP, .depth = 8 };
    pst_writer_t *w = pst_writer_open(p, &cfg, &err);
    assert_non_null(w);
    uint32_t ids[6];
    for (int i = 0; i < 6; i++) ids[i] = pst_writer_stack(w, stk[i], depth[i]);
    pst_event_t ev;
    for (int i = 0; i < 6; i++) {
        at(w, 1000 + (uint64_t)i * 10);
        memset(&ev, 0, sizeof ev);
        ev.type = PST_EV_MALLOC; ev.f[0] = 0x10000 + (uint64_t)i * 64; ev.f[1] = 16; ev.stack = ids[i];
        pst_writer_event(w, 1, &ev);
    }
    assert_int_equal(pst_writer_close(w), 0);
    az_sql_stats_t ss;
    int warn;
    assert_int_equal(az_sql_write(p, db[0], &ss, &warn, msg, sizeof msg), 0);
    az_sql_opts_t o = { .indexes = 1 };
    assert_int_equal(az_sql_write_opts(p, db[1], &o, &ss, &warn, msg, sizeof msg), 0);
    for (int k = 0; k < 2; k++) {
        sqlite3 *d;
        assert_int_equal(sqlite3_open(db[k], &d), SQLITE_OK);
        assert_int_equal(count_rows(d, "SELECT count(*) FROM stack_nodes"), 7);
        assert_int_equal(count_rows(d, "SELECT count(*) FROM frames"), 13);
        assert_int_equal(count_rows(d, "SELECT count(*) FROM stacks"), 6);
        /* each stack's rows, by itself and from the whole view: the
         * written pcs innermost first, each its own recorded frame */
        char all[600] = "", got[600], q[400];
        for (int i = 0; i < 6; i++) {
            char want[200] = "";
            size_t o2 = 0;
            for (uint32_t f = 0; f < depth[i]; f++)
                o2 += (size_t)snprintf(want + o2, sizeof want - o2, "%s%d:%llx:%u", f ? " " : "", (int)f,
                                       (unsigned long long)stk[i][f], f);
            snprintf(all + strlen(all), sizeof all - strlen(all), "%s%s", i ? "|" : "", want);
            snprintf(q, sizeof q, "SELECT group_concat(level || ':' || printf('%%x', pc) || ':' || frame, ' ')"
                                  " FROM (SELECT * FROM frames WHERE stack_id = %u ORDER BY level)", ids[i]);
            sqlite3_stmt *s;
            assert_int_equal(sqlite3_prepare_v2(d, q, -1, &s, NULL), SQLITE_OK);
            assert_int_equal(sqlite3_step(s), SQLITE_ROW);
            snprintf(got, sizeof got, "%s", (const char *)sqlite3_column_text(s, 0));
            sqlite3_finalize(s);
            assert_string_equal(got, want);
            snprintf(q, sizeof q, "SELECT depth FROM stacks WHERE id = %u", ids[i]);
            assert_int_equal(count_rows(d, q), (int)depth[i]);
        }
        sqlite3_stmt *s;
        assert_int_equal(sqlite3_prepare_v2(d, "SELECT group_concat(r, '|') FROM (SELECT stack_id,"
                                               " group_concat(level || ':' || printf('%x', pc) || ':' || frame, ' ') AS r"
                                               " FROM (SELECT * FROM frames ORDER BY stack_id, level) GROUP BY stack_id"
                                               " ORDER BY stack_id)", -1, &s, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(s), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(s, 0), all);
        sqlite3_finalize(s);
        /* SCHEMA.md's stacks through a frame: A, B and C pass through
         * 0x402000; 0x401000 is in A, E and F */
        static const char *const through =
            "WITH RECURSIVE under(id) AS (\n"
            "  SELECT n.id FROM stack_nodes n JOIN frame_defs d ON d.id = n.frame_def WHERE d.pc = %d\n"
            "  UNION SELECT c.id FROM stack_nodes c JOIN under ON c.parent = under.id)\n"
            "SELECT group_concat(id, ' ') FROM (SELECT s.id FROM stacks s JOIN under ON s.node = under.id ORDER BY s.id)";
        int pcs[2] = { 0x402000, 0x401000 };
        const char *want_through[2] = { "1 2 3", "1 5 6" };
        for (int j = 0; j < 2; j++) {
            snprintf(q, sizeof q, through, pcs[j]);
            assert_int_equal(sqlite3_prepare_v2(d, q, -1, &s, NULL), SQLITE_OK);
            assert_int_equal(sqlite3_step(s), SQLITE_ROW);
            assert_string_equal((const char *)sqlite3_column_text(s, 0), want_through[j]);
            sqlite3_finalize(s);
        }
        sqlite3_close(d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_golden_heap_peak_with_moving_realloc),
        cmocka_unit_test(test_golden_phases_pool_kv),
        cmocka_unit_test(test_phase_and_window_restrict_counts),
        cmocka_unit_test(test_report_json_has_design_keys),
        cmocka_unit_test(test_truncated_trace_still_scans_with_warning),
        cmocka_unit_test(test_sqlite_rows_equal_events_and_schema),
        cmocka_unit_test(test_sqlite_batched_rows_match_events),
        cmocka_unit_test(test_scan_peak_range_of_a_tick),
        cmocka_unit_test(test_scan_peak_of_a_tick_ordered_by_cycle_counts),
        cmocka_unit_test(test_sqlite_allocations_pair_each_object),
        cmocka_unit_test(test_sqlite_raw_addresses_and_kinds_read_back),
        cmocka_unit_test(test_sqlite_stacks_share_outer_nodes),
        cmocka_unit_test(test_exports_parse),
        cmocka_unit_test(test_gate_tolerance_edges),
        cmocka_unit_test(test_diff_of_a_trace_with_itself_is_empty),
        cmocka_unit_test(test_gate_defaults_skip_time_weighted),
        cmocka_unit_test(test_incomplete_traces_are_named),
        cmocka_unit_test(test_unknown_phase_is_an_error),
        cmocka_unit_test(test_kv_split_allocation_spreads_tokens),
        cmocka_unit_test(test_scan_without_reuse_keeps_other_figures),
        cmocka_unit_test_setup_teardown(test_gate_utilizations_are_higher_is_better, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_gate_fails_a_drop_in_kv_utilization, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_gate_fails_a_drop_in_kv_utilization_per_step, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_diff_calls_a_rise_in_utilization_better, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_report_kv_freed_blocks_take_their_tokens, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_report_kv_reused_block_id_starts_from_its_new_tokens, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_peak_time_is_the_first_time_reached_in_report, mu27_setup, mu27_teardown),
        cmocka_unit_test_setup_teardown(test_peak_time_is_the_first_time_reached_in_sql, mu27_setup, mu27_teardown),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
