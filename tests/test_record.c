/* test_record.c — the closing summary of `poolscope record`
 * (cli/record_summary.c): manifest lines, and what it says about complete,
 * cut-short and unreadable traces. The fork/exec side of record is tested
 * end to end by tests/integration/record_*.sh.
 *
 * cli/ is not a library, so the file under test is compiled in here.
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

#include "../cli/record_summary.c"
#include "poolscope/writer.h"

static char dir[] = "/tmp/test_record.XXXXXX";

static int make_dir(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}
static int remove_dir(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A trace with n mallocs and n frees on one stream; closed cleanly or not. */
static void write_trace(const char *path, int n, int clean, uint64_t lost)
{
    pst_writer_cfg_t cfg = { .pid = 4242, .exe = "/bin/demo" };
    int err = 0;
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    for (int i = 0; i < n; i++) {
        pst_writer_time(w, (uint64_t)i * 10);
        assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000 + (uint64_t)i * 64, 48), 0);
        assert_int_equal(PST_EMIT(w, 1, PST_EV_FREE, 0x1000 + (uint64_t)i * 64), 0);
    }
    if (lost) pst_writer_add_lost(w, lost);
    if (clean) assert_int_equal(pst_writer_close(w), 0);
    else pst_writer_abandon(w);
}

static void test_manifest_line_parses_pid_and_path(void **state)
{
    (void)state;
    char line[] = "1234\t/tmp/x y.pst\n";
    long pid = 0;
    char *path = NULL;
    assert_int_equal(record_manifest_line(line, &pid, &path), 0);
    assert_int_equal(pid, 1234);
    assert_string_equal(path, "/tmp/x y.pst");
}

static void test_manifest_line_rejects_malformed(void **state)
{
    (void)state;
    long pid;
    char *path;
    char a[] = "no tab here\n", b[] = "\t/p\n", c[] = "12x\t/p\n", d[] = "12\t\n", e[] = "-3\t/p\n";
    assert_int_equal(record_manifest_line(a, &pid, &path), -1);
    assert_int_equal(record_manifest_line(b, &pid, &path), -1);
    assert_int_equal(record_manifest_line(c, &pid, &path), -1);
    assert_int_equal(record_manifest_line(d, &pid, &path), -1);
    assert_int_equal(record_manifest_line(e, &pid, &path), -1);
}

static void test_complete_trace_counts_events(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/ok.pst", dir);
    write_trace(p, 100, 1, 0);
    rec_trace_info_t in;
    assert_int_equal(record_trace_info(p, &in), 0);
    /* 200 heap events + the THREAD_START the writer puts first */
    assert_in_range(in.events, 200, 201);
    assert_int_equal(in.truncated, 0);
    assert_int_equal(in.lost, 0);
}

static void test_cut_short_trace_is_reported_truncated(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/cut.pst", dir);
    write_trace(p, 50, 0, 0);
    rec_trace_info_t in;
    assert_int_equal(record_trace_info(p, &in), 0);
    assert_int_equal(in.truncated, 1);
    assert_in_range(in.events, 100, 101);
}

static void test_lost_events_are_reported(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/lost.pst", dir);
    write_trace(p, 5, 1, 7);
    rec_trace_info_t in;
    assert_int_equal(record_trace_info(p, &in), 0);
    assert_int_equal(in.lost, 7);
}

static void test_not_a_trace_is_an_error(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/junk.pst", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("this is not a trace, just text long enough for a header\n", f);
    fclose(f);
    rec_trace_info_t in;
    assert_int_equal(record_trace_info(p, &in), PSC_ECORRUPT);
    snprintf(p, sizeof p, "%s/missing.pst", dir);
    assert_int_equal(record_trace_info(p, &in), PSC_EIO);
}

static void test_summary_lists_each_manifest_line(void **state)
{
    (void)state;
    char m[128], a[128], b[128], out[4096];
    snprintf(m, sizeof m, "%s/manifest", dir);
    snprintf(a, sizeof a, "%s/a.pst", dir);
    snprintf(b, sizeof b, "%s/b.pst", dir);
    write_trace(a, 10, 1, 0);
    write_trace(b, 10, 0, 0);
    FILE *f = fopen(m, "w");
    assert_non_null(f);
    fprintf(f, "100\t%s\ngarbage line\n101\t%s\n", a, b);
    fclose(f);
    FILE *o = fmemopen(out, sizeof out, "w");
    assert_non_null(o);
    assert_int_equal(record_summary(m, NULL, o), 2);
    fclose(o);
    assert_non_null(strstr(out, "pid 100: "));
    assert_non_null(strstr(out, "a.pst: "));
    assert_non_null(strstr(out, " events [demo]\n"));
    assert_non_null(strstr(out, "pid 101: "));
    assert_non_null(strstr(out, "truncated"));
}

static void test_summary_warns_when_nothing_was_written(void **state)
{
    (void)state;
    char m[128], out[1024];
    snprintf(m, sizeof m, "%s/empty-manifest", dir);
    FILE *f = fopen(m, "w");
    assert_non_null(f);
    fclose(f);
    FILE *o = fmemopen(out, sizeof out, "w");
    assert_int_equal(record_summary(m, "/x/t.pst", o), 0);
    fclose(o);
    assert_non_null(strstr(out, "no trace was written to /x/t.pst"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_manifest_line_parses_pid_and_path),
        cmocka_unit_test(test_manifest_line_rejects_malformed),
        cmocka_unit_test(test_complete_trace_counts_events),
        cmocka_unit_test(test_cut_short_trace_is_reported_truncated),
        cmocka_unit_test(test_lost_events_are_reported),
        cmocka_unit_test(test_not_a_trace_is_an_error),
        cmocka_unit_test(test_summary_lists_each_manifest_line),
        cmocka_unit_test(test_summary_warns_when_nothing_was_written),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
