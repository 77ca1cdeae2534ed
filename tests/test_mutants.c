/* test_mutants.c — one test per mutation issue 12 lists (and a few more
 * of the same kind); each passes on the tree and fails under its mutant.
 *
 * Each test pins one documented rule to numbers worked out by hand in its
 * comment (never copied from the code's output). A mutant that breaks the
 * rule fails the test named after the rule:
 *
 *   - the arena policy bumps in 64-byte steps (replay.h, pol_arena.c);
 *   - kv_utilization and kv_utilization_per_step are higher-is-better for
 *     gate and diff (gate.h, docs/DESIGN.md "Gate and diff");
 *   - a freed KV block takes its tokens with it, and an ALLOC's n_tokens
 *     fill its blocks, in the report's figures (az_scan_file);
 *   - a freed KV block takes its tokens with it out of its request in
 *     replay's KV policies (rp_run).
 *
 * KV behaviour is checked only through what az_scan_file and rp_run hand
 * back (s->heap_r, rp_result_t), never through the scan's or the request
 * stream's internal tables, so the tests hold whichever module interprets
 * KV events.
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

#include "gate.h"
#include "json.h"
#include "poolscope/error.h"
#include "poolscope/writer.h"
#include "replay.h"
#include "scan.h"

#define MIB ((uint64_t)1 << 20)

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
    snprintf(dir, sizeof dir, "/tmp/test_mutants.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static pst_writer_t *open_trace(char *path, size_t len, const char *name)
{
    snprintf(path, len, "%s/%s", dir, name);
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 12, .exe = "/mutants" };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    return w;
}

/* ---- arena: 64-byte bumps ------------------------------------------------------- */

/* n mallocs of `size` bytes at distinct addresses, all live at once, then
 * all freed. */
static void write_live_together(const char *name, char *path, size_t len, uint64_t size, uint64_t n)
{
    pst_writer_t *w = open_trace(path, len, name);
    for (uint64_t i = 0; i < n; i++) {
        pst_writer_time(w, 1000 + i);
        assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x10000000ull + 0x100ull * i, size), 0);
    }
    for (uint64_t i = 0; i < n; i++) {
        pst_writer_time(w, 1000 + n + i);
        assert_int_equal(PST_EMIT(w, 1, PST_EV_FREE, 0x10000000ull + 0x100ull * i), 0);
    }
    assert_int_equal(pst_writer_close(w), 0);
}

static rp_report_t *replay_heap(const char *path, const char *policies)
{
    rp_config_t cfg = rp_config_default();
    char msg[256];
    assert_int_equal(rp_policy_parse(policies, &cfg.policies, msg, sizeof msg), 0);
    cfg.stream = RP_STREAM_HEAP;
    rp_report_t *rep = NULL;
    int rc = rp_run(path, &cfg, &rep, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run %s: %s\n", path, msg);
    assert_int_equal(rc, 0);
    assert_non_null(rep);
    return rep;
}

/* Three 10-byte objects live together: each bumps 64 bytes (10 rounded up
 * to 64), so the arena hands out 3 x 64 = 192 bytes for 30 requested — not
 * 3 x 16 = 48. At the live peak: rnd 192, req 30, internal fragmentation
 * (192 - 30) / 192 = 162 / 192 = 0.84375. All of it fits the first 1 MiB
 * chunk: reserved 1 MiB, one chunk. */
static void test_arena_bumps_small_objects_in_64_byte_steps(void **st)
{
    (void)st;
    char p[512];
    write_live_together("arena3.pst", p, sizeof p, 10, 3);
    rp_report_t *r = replay_heap(p, "arena");
    const rp_result_t *a = rp_report_find(r, RP_ARENA);
    assert_non_null(a);
    assert_int_equal(a->m.allocs, 3);
    assert_int_equal(a->m.peak_live_bytes, 30);
    assert_int_equal(a->m.peak_live_rnd_bytes, 192);
    assert_near(a->m.internal_frag, 162.0 / 192.0);
    assert_int_equal(a->m.peak_reserved_bytes, MIB);
    assert_int_equal(a->chunks_allocated, 1);
    rp_report_free(r);
}

/* 1-byte objects each take a 64-byte step, so the first 1 MiB chunk holds
 * exactly 2^20 / 64 = 16384 of them. 16384 live objects: one chunk, 1 MiB
 * reserved. One more (16385): the first chunk has 0 bytes left, so a chunk
 * of twice its size (2 MiB) is taken: 2 chunks, 3 MiB reserved, 2 backing
 * allocations. (With 16-byte steps 65536 would fit in 1 MiB.) */
static void test_arena_first_chunk_holds_16384_one_byte_objects(void **st)
{
    (void)st;
    char p[512];
    write_live_together("arena16384.pst", p, sizeof p, 1, 16384);
    rp_report_t *r = replay_heap(p, "arena");
    const rp_result_t *a = rp_report_find(r, RP_ARENA);
    assert_non_null(a);
    assert_int_equal(a->m.allocs, 16384);
    assert_int_equal(a->chunks_allocated, 1);
    assert_int_equal(a->m.peak_reserved_bytes, MIB);
    assert_int_equal(a->m.peak_live_rnd_bytes, 16384 * 64);
    rp_report_free(r);

    write_live_together("arena16385.pst", p, sizeof p, 1, 16385);
    r = replay_heap(p, "arena");
    a = rp_report_find(r, RP_ARENA);
    assert_non_null(a);
    assert_int_equal(a->m.allocs, 16385);
    assert_int_equal(a->chunks_allocated, 2);
    assert_int_equal(a->m.backing_allocs, 2);
    assert_int_equal(a->m.peak_reserved_bytes, 3 * MIB);
    rp_report_free(r);
}

/* ---- gate and diff: utilizations are higher-is-better --------------------------- */

static az_jdoc_t *doc(const char *text)
{
    int err = 0;
    az_jdoc_t *d = az_json_parse(text, strlen(text), &err, NULL, 0);
    assert_non_null(d);
    return d;
}

/* az_gate_check of one --tol rule (or the default rules when rule is NULL);
 * the gate's lines go to *lines (malloc'ed, the caller frees). */
static int gate_lines(const char *cur, const char *base, const char *rule, double dflt_tol, char **lines)
{
    az_jdoc_t *c = doc(cur), *b = doc(base);
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

static int gate(const char *cur, const char *base, const char *rule)
{
    char *lines = NULL;
    int rc = gate_lines(cur, base, rule, 0, &lines);
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
    assert_int_equal(gate("{\"kv\": {\"kv_utilization\": 0.5}}", base, "kv.kv_utilization=10"), 1);
    assert_int_equal(gate("{\"kv\": {\"kv_utilization\": 0.95}}", base, "kv.kv_utilization=0"), 0);
    /* 0.85 is worse by 0.05, within 10% (0.09) */
    assert_int_equal(gate("{\"kv\": {\"kv_utilization\": 0.85}}", base, "kv.kv_utilization=10"), 0);
    char *lines = NULL;
    assert_int_equal(gate_lines("{\"kv\": {\"kv_utilization\": 0.5}}", base, "kv.kv_utilization=10", 0, &lines), 1);
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
    assert_int_equal(gate(lo, hi, "kv.kv_utilization_per_step=10"), 1);
    assert_int_equal(gate(hi, lo, "kv.kv_utilization_per_step=0"), 0);
    char *lines = NULL;
    assert_int_equal(gate_lines(lo, hi, NULL, 10, &lines), 1);      /* defaults, 10% */
    assert_non_null(strstr(lines, "REGRESSED kv.kv_utilization_per_step"));
    free(lines);
    lines = NULL;
    assert_int_equal(gate_lines(hi, lo, NULL, 0, &lines), 0);       /* defaults, 0%: a rise passes */
    assert_null(strstr(lines, "REGRESSED"));
    free(lines);
}

/* diff calls a rise in the per-step utilization (not a timing figure)
 * "better" and a drop "worse". */
static void test_diff_calls_a_rise_in_utilization_better(void **st)
{
    (void)st;
    az_jdoc_t *lo = doc("{\"kv\": {\"kv_utilization_per_step\": 0.4}}");
    az_jdoc_t *hi = doc("{\"kv\": {\"kv_utilization_per_step\": 0.8}}");
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

static void kv_create(pst_writer_t *w, uint64_t pool, uint64_t block_size, uint64_t n_blocks,
                      uint64_t slot_bytes)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = pool; ev.f[2] = block_size; ev.f[3] = n_blocks; ev.f[7] = slot_bytes;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void kv_alloc(pst_writer_t *w, uint64_t pool, uint64_t seq, uint64_t owner, uint64_t n_tokens,
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

static void kv_free(pst_writer_t *w, uint64_t pool, uint64_t seq, const uint32_t *ids, uint32_t n)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_FREE;
    ev.f[0] = pool; ev.f[1] = seq;
    ev.ids = ids; ev.n_ids = n;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void mark(pst_writer_t *w, int begin, const char *name, uint64_t inst, int64_t p0, int64_t p1)
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
    pst_writer_t *w = open_trace(p, sizeof p, "kvscan.pst");
    kv_create(w, 1, 16, 8, 16 * 64);
    const uint32_t first[2] = { 0, 1 }, second[3] = { 2, 3, 4 };
    pst_writer_time(w, 100); kv_alloc(w, 1, 1, 1, 32, first, 2);
    pst_writer_time(w, 150); mark(w, 1, "decode", 1, 0, 0);
    pst_writer_time(w, 160); mark(w, 0, "decode", 1, 0, 0);
    pst_writer_time(w, 200); kv_free(w, 1, 2, first, 2);
    pst_writer_time(w, 300); kv_alloc(w, 1, 3, 1, 40, second, 3);
    pst_writer_time(w, 350); mark(w, 1, "decode", 2, 0, 0);
    pst_writer_time(w, 360); mark(w, 0, "decode", 2, 0, 0);
    pst_writer_time(w, 400); kv_free(w, 1, 4, second, 3);
    assert_int_equal(pst_writer_close(w), 0);

    az_scan_t *s = NULL;
    int rc = az_scan_file(p, NULL, &s, msg, sizeof msg);
    if (rc) fprintf(stderr, "scan: %s\n", msg);
    assert_int_equal(rc, 0);
    const az_result_t *h = &s->heap_r;
    assert_true(h->has_kv);
    assert_int_equal(h->peak_kv_blocks, 3);
    assert_int_equal(h->peak_kv_t, 300);
    assert_near(h->kv_utilization_at_peak, 40.0 / 48.0);
    assert_near(h->kv_utilization, 11.0 / 12.0);
    assert_near(h->kv_waste_ratio, 1.0 / 12.0);
    assert_int_equal(h->kv_step_samples, 2);
    assert_near(h->kv_utilization_per_step, 11.0 / 12.0);
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
    pst_writer_t *w = open_trace(p, sizeof p, "kvreuse.pst");
    kv_create(w, 1, 16, 4, 16 * 64);
    const uint32_t one[1] = { 0 }, two[2] = { 0, 1 };
    pst_writer_time(w, 100); kv_alloc(w, 1, 1, 1, 16, one, 1);
    pst_writer_time(w, 200); kv_free(w, 1, 2, one, 1);
    pst_writer_time(w, 300); kv_alloc(w, 1, 3, 1, 20, two, 2);
    pst_writer_time(w, 400); kv_free(w, 1, 4, two, 2);
    assert_int_equal(pst_writer_close(w), 0);

    az_scan_t *s = NULL;
    int rc = az_scan_file(p, NULL, &s, msg, sizeof msg);
    if (rc) fprintf(stderr, "scan: %s\n", msg);
    assert_int_equal(rc, 0);
    const az_result_t *h = &s->heap_r;
    assert_int_equal(h->peak_kv_blocks, 2);
    assert_near(h->kv_utilization_at_peak, 20.0 / 32.0);
    assert_near(h->kv_utilization, (1.0 + 20.0 / 32.0) / 2);
    az_scan_free(s);
}

/* ---- KV in replay (rp_run) ------------------------------------------------------- */

/* One request (owner 7, marker payload prompt 20 + max 20 = 40) in a pool
 * of 16-token blocks of 1600 bytes (100 bytes per token):
 *
 *   t=100  ALLOC {0,1}, 32 tokens   request: 32 tokens, 2 blocks
 *          "request" begins         reserve known: 40
 *   t=200  FREE {0}                 16 tokens (block 0 took its 16 away), 1 block
 *   t=300  ALLOC {2}, 16 tokens     32 tokens, 2 blocks
 *   t=400  FREE {1,2}; "request" ends
 *
 * The request never holds more than 32 tokens:
 *   kv-paged (16):  slots 32, 16, 32: peak 32 reserved, 32 stored (3200 B);
 *                   full throughout: utilization 1
 *   kv-reserve:     40 slots (32 at the very first update, before the
 *                   marker, at t=100 too): peak 40; 32 <= 40, no overflow;
 *                   utilization (32 + 16 + 32) / 3 / 40 = 2/3
 *   kv-contiguous:  context 40 (the largest prompt + max): no overflow,
 *                   peak 32 stored
 * Had the free left the 16 tokens in the request, it would reach 48 at
 * t=300: a 48-token peak and an overflow of kv-reserve's 40. */
static void test_replay_kv_free_takes_tokens_out_of_the_request(void **st)
{
    (void)st;
    char p[512], msg[256];
    pst_writer_t *w = open_trace(p, sizeof p, "kvreplay.pst");
    kv_create(w, 1, 16, 64, 16 * 100);
    const uint32_t b01[2] = { 0, 1 }, b0[1] = { 0 }, b2[1] = { 2 }, b12[2] = { 1, 2 };
    pst_writer_time(w, 100);
    kv_alloc(w, 1, 1, 7, 32, b01, 2);
    mark(w, 1, "request", 7, 20, 20);
    pst_writer_time(w, 200); kv_free(w, 1, 2, b0, 1);
    pst_writer_time(w, 300); kv_alloc(w, 1, 3, 7, 16, b2, 1);
    pst_writer_time(w, 400);
    kv_free(w, 1, 4, b12, 2);
    mark(w, 0, "request", 7, 0, 0);
    assert_int_equal(pst_writer_close(w), 0);

    rp_config_t cfg = rp_config_default();
    assert_int_equal(rp_policy_parse("kv", &cfg.policies, msg, sizeof msg), 0);
    rp_report_t *r = NULL;
    int rc = rp_run(p, &cfg, &r, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run: %s\n", msg);
    assert_int_equal(rc, 0);
    const rp_result_t *pg = rp_report_find(r, RP_KV_PAGED), *rs = rp_report_find(r, RP_KV_RESERVE),
                      *c = rp_report_find(r, RP_KV_CONTIGUOUS);
    assert_non_null(pg);
    assert_non_null(rs);
    assert_non_null(c);
    assert_int_equal(pg->kv_token_bytes, 100);
    assert_int_equal(pg->peak_kv_tokens, 32);
    assert_int_equal(pg->peak_kv_reserved_tokens, 32);
    assert_int_equal(pg->m.peak_live_bytes, 3200);
    assert_int_equal(pg->kv_overflows, 0);
    assert_near(pg->m.kv_utilization, 1.0);
    assert_int_equal(rs->kv_requests, 1);
    assert_int_equal(rs->peak_kv_tokens, 32);
    assert_int_equal(rs->peak_kv_reserved_tokens, 40);
    assert_int_equal(rs->kv_overflows, 0);
    assert_near(rs->m.kv_utilization, 2.0 / 3.0);
    assert_int_equal(c->kv_context, 40);
    assert_int_equal(c->peak_kv_tokens, 32);
    assert_int_equal(c->kv_overflows, 0);
    rp_report_free(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_bumps_small_objects_in_64_byte_steps),
        cmocka_unit_test(test_arena_first_chunk_holds_16384_one_byte_objects),
        cmocka_unit_test(test_gate_utilizations_are_higher_is_better),
        cmocka_unit_test(test_gate_fails_a_drop_in_kv_utilization),
        cmocka_unit_test(test_gate_fails_a_drop_in_kv_utilization_per_step),
        cmocka_unit_test(test_diff_calls_a_rise_in_utilization_better),
        cmocka_unit_test(test_report_kv_freed_blocks_take_their_tokens),
        cmocka_unit_test(test_report_kv_reused_block_id_starts_from_its_new_tokens),
        cmocka_unit_test(test_replay_kv_free_takes_tokens_out_of_the_request),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
