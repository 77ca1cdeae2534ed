/* test_filters.c — `report --phase` and `--from/--to` restrict every
 * section (issue 12, item 4), or the section says it is whole-run.
 *
 * One hand-made trace (times in ns; stacks s1..s4):
 *   100 BEGIN prefill     110 RSS 10 MiB
 *   120 malloc A 1000 @0x1000 (s1)        150 malloc E 7 @0x5000 (s4), never freed
 *   160 POOL_CREATE 1
 *   200 BEGIN decode      <- the phase opens: live A + E = 1007
 *   250 mmap anon 4 KiB   300 malloc B 100 (s2)
 *   320 acquire buf 1 (miss, 100 of 128)  330 reclaim it (cached)
 *   350 RSS 20 MiB        360 END prefill (prefill open 200..360 in the phase)
 *   400 malloc C 50 (s2)  <- live 1157: the phase's peak
 *   500 free B            600 END decode
 *   650 mmap anon 1 MiB   690 acquire buf 1 (hit)
 *   700 malloc D 5000 (s3) <- live 6057: the whole run's peak
 *   720 RSS 90 MiB        750 munmap the 1 MiB
 *   800 free A, free D    900 POINT done
 * Whole run: peak 6057 at 700, leaks C + E = 57 bytes in 2, peak mmap
 * 4 KiB + 1 MiB, peak RSS 90 MiB, 2 acquires 1 hit, prefill open 260 ns.
 * --phase decode: peak 1157 at 400 of which s1 1000, s2 150, s4 7 (s1 and
 * s4 made no call in the phase but hold most of its peak); leaks: C alone
 * (E was allocated before the phase); peak mmap 4 KiB; peak RSS 20 MiB;
 * 1 acquire, 0 hits; the pool's own row 1 acquire; prefill open 160 ns,
 * decode 400 ns; the timeline is whole-run and says so.
 * --from 250 --to 550: the same peak, leaks and mmap; the timeline starts
 * at 250 and never shows the 6057 at 700.
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

#include "poolscope/error.h"
#include "poolscope/writer.h"
#include "report.h"
#include "scan.h"

static char dir[256], trace[512];

static void at(pst_writer_t *w, uint64_t t) { pst_writer_time(w, t); }

static void heap(pst_writer_t *w, int type, uint64_t a, uint64_t b, uint32_t stack)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = (uint8_t)type;
    ev.stack = stack;
    ev.f[0] = a;
    ev.f[1] = b;
    pst_writer_event(w, 1, &ev);
}

static int write_trace(const char *path)
{
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 77, .exe = "/filters/prog", .stacks = PST_STACKS_FP, .depth = 8 };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    if (!w) return err;
    uint64_t f1[] = { 0x401000 }, f2[] = { 0x402000 }, f3[] = { 0x403000 }, f4[] = { 0x404000 };
    uint32_t s1 = pst_writer_stack(w, f1, 1), s2 = pst_writer_stack(w, f2, 1);
    uint32_t s3 = pst_writer_stack(w, f3, 1), s4 = pst_writer_stack(w, f4, 1);
    uint32_t prefill = pst_writer_string(w, "prefill"), decode = pst_writer_string(w, "decode");
    uint32_t acts = pst_writer_string(w, "acts");
    at(w, 100); PST_EMIT(w, 1, PST_EV_MARK_BEGIN, prefill, 1, 0);
    at(w, 110); PST_EMIT(w, 1, PST_EV_RSS, 10u << 20, 10u << 20, 0);
    at(w, 120); heap(w, PST_EV_MALLOC, 0x1000, 1000, s1);
    at(w, 150); heap(w, PST_EV_MALLOC, 0x5000, 7, s4);
    at(w, 160); PST_EMIT(w, 1, PST_EV_POOL_CREATE, 1, acts, 1, 1 << 20);
    at(w, 200); PST_EMIT(w, 1, PST_EV_MARK_BEGIN, decode, 1, 0);
    at(w, 250); PST_EMIT(w, 1, PST_EV_MMAP, 0x7000000, 4096, 3, 0x22, (uint64_t)-1, 0);
    at(w, 300); heap(w, PST_EV_MALLOC, 0x2000, 100, s2);
    at(w, 320); PST_EMIT(w, 1, PST_EV_POOL_ACQUIRE, 1, 2, 0, 1, 25, 32, 100, 128, 0);
    at(w, 330); PST_EMIT(w, 1, PST_EV_POOL_RECLAIM, 1, 3, 0, 1, 128, 1);
    at(w, 350); PST_EMIT(w, 1, PST_EV_RSS, 20u << 20, 20u << 20, 0);
    at(w, 360); PST_EMIT(w, 1, PST_EV_MARK_END, prefill, 1);
    at(w, 400); heap(w, PST_EV_MALLOC, 0x3000, 50, s2);
    at(w, 500); heap(w, PST_EV_FREE, 0x2000, 0, 0);
    at(w, 600); PST_EMIT(w, 1, PST_EV_MARK_END, decode, 1);
    at(w, 650); PST_EMIT(w, 1, PST_EV_MMAP, 0x8000000, 1 << 20, 3, 0x22, (uint64_t)-1, 0);
    at(w, 690); PST_EMIT(w, 1, PST_EV_POOL_ACQUIRE, 1, 4, 0, 1, 30, 32, 120, 128, 1);
    at(w, 700); heap(w, PST_EV_MALLOC, 0x4000, 5000, s3);
    at(w, 720); PST_EMIT(w, 1, PST_EV_RSS, 90u << 20, 90u << 20, 0);
    at(w, 750); PST_EMIT(w, 1, PST_EV_MUNMAP, 0x8000000, 1 << 20);
    at(w, 800); heap(w, PST_EV_FREE, 0x1000, 0, 0); heap(w, PST_EV_FREE, 0x4000, 0, 0);
    at(w, 900); PST_EMIT(w, 1, PST_EV_MARK_POINT, pst_writer_string(w, "done"), 0);
    return pst_writer_close(w);
}

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/test_filters.XXXXXX");
    if (!mkdtemp(dir)) return -1;
    snprintf(trace, sizeof trace, "%s/f.pst", dir);
    return write_trace(trace) ? -1 : 0;
}

static int teardown(void **st)
{
    (void)st;
    unlink(trace);
    rmdir(dir);
    return 0;
}

static az_scan_t *scan_with(const az_scan_opts_t *o)
{
    az_scan_t *s = NULL;
    char msg[256];
    int rc = az_scan_file(trace, o, &s, msg, sizeof msg);
    if (rc) fprintf(stderr, "scan: %s\n", msg);
    assert_int_equal(rc, 0);
    return s;
}

static const az_phase_t *phase(const az_scan_t *s, const char *name)
{
    for (size_t i = 0; i < s->heap_r.n_phases; i++)
        if (!strcmp(s->heap_r.phases[i].name, name)) return &s->heap_r.phases[i];
    fail_msg("no phase %s", name);
    return NULL;
}

/* per stack id: calls, peak bytes, leaked bytes (after the scan) */
static void site_of(const az_scan_t *s, uint32_t stack, uint64_t *calls, uint64_t *peak, uint64_t *leaked)
{
    size_t n = 0;
    const az_site_t *a = az_sites(s->heap, &n);
    *calls = *peak = *leaked = 0;
    for (size_t i = 0; i < n; i++)
        if (a[i].stack == stack) { *calls = a[i].calls; *peak = a[i].peak_bytes; *leaked = a[i].live_bytes; return; }
}

/* The text report, in a malloc'ed string (the memstream's buffer lives in
 * statics: gcc takes a local's address given to open_memstream for a
 * pointer that dangles once returned). */
static char *text_buf;
static size_t text_len;
static char *text_of(const az_scan_t *s)
{
    text_buf = NULL;
    FILE *f = open_memstream(&text_buf, &text_len);
    az_report_opts_t o = { .no_symbols = 1, .top = 20 };
    az_report_text(s, &o, f);
    fclose(f);
    return text_buf;
}

static uint64_t timeline_max_heap(const az_scan_t *s)
{
    uint64_t m = 0;
    for (size_t i = 0; i < s->tl_used; i++) if (s->tl[i].heap > m) m = s->tl[i].heap;
    return m;
}

static void test_whole_run_figures(void **st)
{
    (void)st;
    az_scan_t *s = scan_with(NULL);
    assert_int_equal(s->heap_r.peak_live_bytes, 6057);
    assert_int_equal(s->heap_r.peak_live_t, 700);
    assert_int_equal(s->heap_r.leaked_bytes, 57);
    assert_int_equal(s->heap_r.leaked_count, 2);
    assert_int_equal(s->peak_mmap_total, 4096 + (1 << 20));
    assert_int_equal(s->peak_rss, 90u << 20);
    assert_int_equal(s->pool_r.acquires, 2);
    assert_int_equal(s->pool_r.hits, 1);
    assert_int_equal(s->n_pools, 1);
    assert_int_equal(s->pools[0].acquires, 2);
    assert_int_equal(phase(s, "prefill")->time_ns, 260);
    assert_int_equal(timeline_max_heap(s), 6057);
    char *t = text_of(s);
    assert_null(strstr(t, "selected"));
    assert_null(strstr(t, "whole run"));
    free(t);
    az_scan_free(s);
}

static void test_phase_restricts_peak(void **st)
{
    (void)st;
    az_scan_opts_t o = { .phase = "decode" };
    az_scan_t *s = scan_with(&o);
    assert_int_equal(s->heap_r.peak_live_bytes, 1157);
    assert_int_equal(s->heap_r.peak_live_t, 400);
    assert_int_equal(s->heap_r.peak_live_count, 4);   /* A, E, B, C */
    az_scan_free(s);
}

static void test_phase_restricts_leaks_to_allocations_in_it(void **st)
{
    (void)st;
    az_scan_opts_t o = { .phase = "decode" };
    az_scan_t *s = scan_with(&o);
    assert_int_equal(s->heap_r.leaked_bytes, 50);      /* C; E was allocated before */
    assert_int_equal(s->heap_r.leaked_count, 1);
    uint64_t calls, peak, leaked;
    site_of(s, 2, &calls, &peak, &leaked);
    assert_int_equal(leaked, 50);
    site_of(s, 4, &calls, &peak, &leaked);
    assert_int_equal(leaked, 0);
    char *t = text_of(s);
    assert_non_null(strstr(t, "(allocated in the selection, never freed)"));
    free(t);
    az_scan_free(s);
}

static void test_phase_sites_at_the_peak_add_up(void **st)
{
    (void)st;
    az_scan_opts_t o = { .phase = "decode" };
    az_scan_t *s = scan_with(&o);
    uint64_t calls, peak, leaked;
    site_of(s, 1, &calls, &peak, &leaked);       /* A: no call in the phase, 1000 of its peak */
    assert_int_equal(calls, 0);
    assert_int_equal(peak, 1000);
    site_of(s, 2, &calls, &peak, &leaked);
    assert_int_equal(calls, 2);
    assert_int_equal(peak, 150);
    site_of(s, 4, &calls, &peak, &leaked);
    assert_int_equal(peak, 7);
    site_of(s, 3, &calls, &peak, &leaked);       /* D: after the phase */
    assert_int_equal(calls, 0);
    assert_int_equal(peak, 0);
    /* the text: "Top sites by calls" has no row without a call */
    char *t = text_of(s);
    const char *top = strstr(t, "Top sites by calls");
    assert_non_null(top);
    const char *next = strstr(top, "Top sites by bytes");
    assert_non_null(next);
    assert_null(strstr(top, "0x401000"));          /* s1's only frame */
    assert_null(strstr(top, "0x403000"));
    assert_non_null(strstr(t, "share"));
    /* sites live at the peak: s1's row shows 86.4% (1000 of 1157) */
    const char *peak_tab = strstr(t, "Sites live at the selection's peak (calls: in the selection; 0 = allocated before it)");
    assert_non_null(peak_tab);
    assert_true(strstr(peak_tab, "86.4%") && strstr(peak_tab, "86.4%") < top);
    free(t);
    az_scan_free(s);
}

static void test_phase_restricts_mmap_rss_and_pools(void **st)
{
    (void)st;
    az_scan_opts_t o = { .phase = "decode" };
    az_scan_t *s = scan_with(&o);
    assert_int_equal(s->peak_mmap_total, 4096);
    assert_int_equal(s->peak_mmap_anon, 4096);
    assert_int_equal(s->peak_rss, 20u << 20);
    assert_int_equal(s->pool_r.acquires, 1);
    assert_int_equal(s->pool_r.hits, 0);
    assert_int_equal(s->pools[0].acquires, 1);
    assert_int_equal(s->pools[0].hits, 0);
    assert_int_equal(s->pools[0].peak_out, 128);
    assert_int_equal(s->pools[0].peak_cached, 128);
    az_scan_free(s);
}

static void test_phase_times_are_inside_the_phase(void **st)
{
    (void)st;
    az_scan_opts_t o = { .phase = "decode" };
    az_scan_t *s = scan_with(&o);
    assert_int_equal(phase(s, "decode")->time_ns, 400);
    assert_int_equal(phase(s, "prefill")->time_ns, 160);
    az_scan_free(s);
}

static void test_phase_timeline_says_whole_run(void **st)
{
    (void)st;
    az_scan_opts_t o = { .phase = "decode" };
    az_scan_t *s = scan_with(&o);
    char *t = text_of(s);
    assert_non_null(strstr(t, "selected    phase 'decode'"));
    const char *ot = strstr(t, "Over time");
    assert_non_null(ot);
    assert_true(strstr(ot, "whole run") && strstr(ot, "whole run") < strchr(ot, '\n'));
    free(t);
    az_scan_free(s);
}

static void test_window_restricts_every_section(void **st)
{
    (void)st;
    az_scan_opts_t o = { .window = 1, .from = 250, .to = 550 };
    az_scan_t *s = scan_with(&o);
    assert_int_equal(s->heap_r.peak_live_bytes, 1157);
    assert_int_equal(s->heap_r.leaked_bytes, 50);
    assert_int_equal(s->peak_mmap_total, 4096);
    assert_int_equal(s->peak_rss, 20u << 20);
    assert_int_equal(s->pools[0].acquires, 1);
    /* decode was open over the whole window: 250 .. 500 (the last counted event) */
    assert_int_equal(phase(s, "decode")->time_ns, 250);
    /* the timeline: the window only */
    assert_int_equal(s->tl_t0, 250);
    assert_int_equal(timeline_max_heap(s), 1157);
    char *t = text_of(s);
    assert_non_null(strstr(t, "selected    from 250 ns to 550 ns"));
    const char *ot = strstr(t, "Over time");
    assert_non_null(ot);
    assert_true(strstr(ot, "--from/--to window only") && strstr(ot, "--from/--to window only") < strchr(ot, '\n'));
    assert_null(strstr(t, "5.86 KiB"));           /* 6057 B, the whole run's peak, nowhere */
    free(t);
    az_scan_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_run_figures),
        cmocka_unit_test(test_phase_restricts_peak),
        cmocka_unit_test(test_phase_restricts_leaks_to_allocations_in_it),
        cmocka_unit_test(test_phase_sites_at_the_peak_add_up),
        cmocka_unit_test(test_phase_restricts_mmap_rss_and_pools),
        cmocka_unit_test(test_phase_times_are_inside_the_phase),
        cmocka_unit_test(test_phase_timeline_says_whole_run),
        cmocka_unit_test(test_window_restricts_every_section),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
