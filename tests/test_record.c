/* test_record.c — the closing summary of `poolscope record`, as the trace
 * library makes it (libtrace/launch.c: pl_manifest_line, pl_trace_info,
 * pl_summary_*): manifest lines, and what it says about complete, cut-short
 * and unreadable traces. The launcher's other half (target checks, PATH,
 * running, signals) is tests/test_launch.c; record end to end is
 * tests/integration/record_*.sh.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "launch.h"
#include "poolscope/error.h"
#include "poolscope/reader.h"
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

/* Read the manifest and print the summary into o; the number listed. */
static size_t summary(const char *manifest, const pl_summary_opts_t *opts, const char *expected,
                      FILE *o)
{
    int err = 1;
    pl_summary_t *s = pl_summary_read(manifest, opts, &err);
    assert_non_null(s);
    assert_int_equal(err, 0);
    size_t n = pl_summary_print(s, expected, o);
    pl_summary_free(s);
    return n;
}

static void test_manifest_line_parses_pid_and_path(void **state)
{
    (void)state;
    char line[] = "1234\t/tmp/x y.pst\n";
    long pid = 0;
    char *path = NULL;
    assert_int_equal(pl_manifest_line(line, &pid, &path), 0);
    assert_int_equal(pid, 1234);
    assert_string_equal(path, "/tmp/x y.pst");
}

static void test_manifest_line_rejects_malformed(void **state)
{
    (void)state;
    long pid;
    char *path;
    char a[] = "no tab here\n", b[] = "\t/p\n", c[] = "12x\t/p\n", d[] = "12\t\n", e[] = "-3\t/p\n";
    assert_int_equal(pl_manifest_line(a, &pid, &path), -1);
    assert_int_equal(pl_manifest_line(b, &pid, &path), -1);
    assert_int_equal(pl_manifest_line(c, &pid, &path), -1);
    assert_int_equal(pl_manifest_line(d, &pid, &path), -1);
    assert_int_equal(pl_manifest_line(e, &pid, &path), -1);
}

static void test_complete_trace_counts_events(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/ok.pst", dir);
    write_trace(p, 100, 1, 0);
    pl_trace_info_t in;
    assert_int_equal(pl_trace_info(p, NULL, &in), 0);
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
    pl_trace_info_t in;
    assert_int_equal(pl_trace_info(p, NULL, &in), 0);
    assert_int_equal(in.truncated, 1);
    assert_in_range(in.events, 100, 101);
}

static void test_lost_events_are_reported(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/lost.pst", dir);
    write_trace(p, 5, 1, 7);
    pl_trace_info_t in;
    assert_int_equal(pl_trace_info(p, NULL, &in), 0);
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
    pl_trace_info_t in;
    assert_int_equal(pl_trace_info(p, NULL, &in), PSC_ECORRUPT);
    snprintf(p, sizeof p, "%s/missing.pst", dir);
    assert_int_equal(pl_trace_info(p, NULL, &in), PSC_EIO);
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
    assert_int_equal(summary(m, NULL, NULL, o), 2);
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
    assert_int_equal(summary(m, NULL, "/x/t.pst", o), 0);
    fclose(o);
    assert_non_null(strstr(out, "no trace was written to /x/t.pst"));
}

/* Fork children that could not open their traces leave "<pid>.<k>.untraced"
 * -> "<errno>" links in the counters directory (hooks_proc.c): one note per
 * errno, pids in order; anything else there is not taken for one. */
static void test_summary_names_untraced_children(void **state)
{
    (void)state;
    char ctl[128], m[160], p[200], out[4096];
    snprintf(ctl, sizeof ctl, "%s/ctl", dir);
    assert_int_equal(mkdir(ctl, 0700), 0);
    snprintf(m, sizeof m, "%s/untraced-manifest", dir);
    FILE *f = fopen(m, "w");
    assert_non_null(f);
    fclose(f);
    static const struct { const char *name, *target; } links[] = {
        { "300.0.untraced", "24" }, { "200.0.untraced", "24" }, { "400.1.untraced", "28" },
        { "junk.untraced", "24" }, { "12.untraced", "24" }, { "13.0.untraced.x", "24" },
    };
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", ctl, links[i].name);
        assert_int_equal(symlink(links[i].target, p), 0);
    }
    snprintf(p, sizeof p, "%s/500.0.untraced", ctl);   /* not a link */
    f = fopen(p, "w");
    assert_non_null(f);
    fclose(f);
    pl_summary_opts_t so = { .ctl_dir = ctl };
    int err = 1;
    pl_summary_t *s = pl_summary_read(m, &so, &err);
    assert_non_null(s);
    assert_int_equal(s->n_untraced, 3);
    assert_int_equal(s->untraced[0].pid, 200);
    assert_int_equal(s->untraced[0].err, EMFILE);
    assert_int_equal(s->untraced[1].pid, 300);
    assert_int_equal(s->untraced[2].pid, 400);
    assert_int_equal(s->untraced[2].err, ENOSPC);
    FILE *o = fmemopen(out, sizeof out, "w");
    assert_non_null(o);
    assert_int_equal(pl_summary_print(s, NULL, o), 0);
    fclose(o);
    pl_summary_free(s);
    assert_non_null(strstr(out, "poolscope: record: 2 child processes (pids 200, 300) were not traced: "
                                "could not open their traces (too many open files)\n"));
    assert_non_null(strstr(out, "poolscope: record: 1 child process (pid 400) was not traced: "
                                "could not open its trace (no space left on device)\n"));
    /* record's clean-up takes the links too, so the directory goes */
    pl_ctl_dir_remove(ctl);
    struct stat st;
    assert_int_equal(lstat(ctl, &st), 0);   /* a name of neither kind is not record's to remove */
    snprintf(p, sizeof p, "%s/13.0.untraced.x", ctl);
    assert_int_equal(unlink(p), 0);
    pl_ctl_dir_remove(ctl);
    assert_int_not_equal(lstat(ctl, &st), 0);
}

/* ---- pst_read_end: the header and the END chunk alone ---------------------- */

static long file_size(const char *p)
{
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

static void patch_byte(const char *p, long off, int xor_with)
{
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    if (off < 0) { fseek(f, 0, SEEK_END); off += ftell(f); }
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ xor_with, f);
    fclose(f);
}

static void test_read_end_gives_the_end_chunk_counts_and_header(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/end.pst", dir);
    write_trace(p, 100, 1, 3);
    pst_end_info_t e;
    assert_int_equal(pst_read_end(p, &e), 0);
    assert_int_equal(e.events, 201);   /* 200 heap events + THREAD_START */
    assert_int_equal(e.lost, 3);
    assert_int_equal(e.streams, 1);
    assert_int_equal(e.pid, 4242);
    assert_string_equal(e.exe, "/bin/demo");
    assert_int_equal(e.file_bytes, file_size(p));
    /* the END chunk is the file's last 16 + 3..30 bytes, after the header */
    assert_in_range(e.file_bytes - e.end_offset, PST_CHUNK_HDR + 3, PST_CHUNK_HDR + 30);
    assert_true(e.end_offset > e.header_bytes && e.header_bytes > PST_FILE_HDR_FIXED);
    /* the same numbers the reader finds at the end */
    int err;
    pst_reader_t *r = pst_open(p, &err);
    assert_non_null(r);
    pst_event_t ev;
    while (pst_next(r, &ev) > 0) {}
    assert_int_equal(pst_status(r)->end_events, e.events);
    assert_int_equal(pst_status(r)->end_lost, e.lost);
    assert_int_equal(pst_status(r)->end_streams, e.streams);
    pst_close(r);
}

static void test_read_end_without_end_chunk_keeps_the_header(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/noend.pst", dir);
    write_trace(p, 50, 0, 0);
    pst_end_info_t e;
    assert_int_equal(pst_read_end(p, &e), PSC_ENOENT);
    assert_int_equal(e.pid, 4242);
    assert_string_equal(e.exe, "/bin/demo");
    assert_int_equal(e.events, 0);
    assert_int_equal(e.end_offset, 0);
}

static void test_read_end_rejects_a_damaged_or_followed_end(void **state)
{
    (void)state;
    char p[128];
    pst_end_info_t e;
    snprintf(p, sizeof p, "%s/badcrc.pst", dir);
    write_trace(p, 20, 1, 0);
    patch_byte(p, -1, 0x01);                   /* last payload byte: CRC no longer matches */
    assert_int_equal(pst_read_end(p, &e), PSC_ENOENT);
    snprintf(p, sizeof p, "%s/badkind.pst", dir);
    write_trace(p, 20, 1, 0);
    assert_int_equal(pst_read_end(p, &e), 0);
    patch_byte(p, (long)e.end_offset, 0x07);   /* kind 3 -> 4 */
    assert_int_equal(pst_read_end(p, &e), PSC_ENOENT);
    snprintf(p, sizeof p, "%s/trail.pst", dir);
    write_trace(p, 20, 1, 0);
    FILE *f = fopen(p, "ab");
    assert_non_null(f);
    fputs("x", f);                             /* a byte after END */
    fclose(f);
    assert_int_equal(pst_read_end(p, &e), PSC_ENOENT);
}

static void test_read_end_header_errors(void **state)
{
    (void)state;
    char p[128];
    pst_end_info_t e;
    snprintf(p, sizeof p, "%s/nottrace.pst", dir);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs("this is not a trace, just text long enough for a header\n", f);
    fclose(f);
    assert_int_equal(pst_read_end(p, &e), PSC_ECORRUPT);
    snprintf(p, sizeof p, "%s/short.pst", dir);
    f = fopen(p, "wb");
    assert_non_null(f);
    fwrite("PSTRACE\0\1\0", 1, 10, f);
    fclose(f);
    assert_int_equal(pst_read_end(p, &e), PSC_ETRUNC);
    snprintf(p, sizeof p, "%s/major2.pst", dir);
    write_trace(p, 5, 1, 0);
    patch_byte(p, 8, 0x03);                    /* major 1 -> 2 */
    assert_int_equal(pst_read_end(p, &e), PSC_EVERSION);
    snprintf(p, sizeof p, "%s/absent.pst", dir);
    assert_int_equal(pst_read_end(p, &e), PSC_EIO);
}

static void test_trace_info_reads_events_only_without_end(void **state)
{
    (void)state;
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/info-end.pst", dir);
    snprintf(b, sizeof b, "%s/info-cut.pst", dir);
    write_trace(a, 300, 1, 0);
    write_trace(b, 300, 0, 0);
    pl_trace_info_t in;
    assert_int_equal(pl_trace_info(a, NULL, &in), 0);
    assert_int_equal(in.from_end, 1);
    assert_int_equal(in.scanned_bytes, 0);
    assert_int_equal(in.events, 601);
    assert_int_equal(pl_trace_info(b, NULL, &in), 0);
    assert_int_equal(in.from_end, 0);
    assert_int_equal(in.truncated, 1);
    assert_true(in.scanned_bytes > 600);       /* the events were read: > 1 byte each */
    assert_in_range(in.events, 600, 601);
    /* a damaged END: read as far as it goes, like a cut-short one */
    write_trace(a, 30, 1, 0);
    patch_byte(a, -1, 0x01);
    assert_int_equal(pl_trace_info(a, NULL, &in), 0);
    assert_int_equal(in.from_end, 0);
    assert_true(in.scanned_bytes > 0);
}

/* ---- untraced children: an image whose last record is EXEC ------------------- */

/* pid/gen/exe as a process image; its stream 1 ends with EXEC(exec_path)
 * (then one more malloc if `more`: the exec failed and it went on); a
 * second stream with a malloc when `two`. */
static void write_exec_trace(const char *path, uint64_t pid, uint64_t gen, const char *exe,
                             const char *exec_path, int more, int two)
{
    pst_writer_cfg_t cfg = { .pid = pid, .exec_gen = gen, .exe = exe,
                             .argv = (const char *const[]){ exe, NULL } };
    int err = 0;
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    pst_writer_time(w, 10);
    assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 48), 0);
    if (two) assert_int_equal(PST_EMIT(w, 2, PST_EV_MALLOC, 0x2000, 48), 0);
    uint32_t s = pst_writer_string(w, exec_path);
    assert_true(s > 0);
    pst_writer_time(w, 20);
    assert_int_equal(PST_EMIT(w, 1, PST_EV_EXEC, s), 0);
    if (more) assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x3000, 16), 0);
    if (two) assert_int_equal(PST_EMIT(w, 2, PST_EV_FREE, 0x2000), 0);
    assert_int_equal(pst_writer_close(w), 0);
}

/* The summary of a manifest listing `n` traces (pid path pairs). */
static pl_summary_t *read_manifest(const pl_summary_opts_t *o, int n, ...)
{
    char m[128];
    snprintf(m, sizeof m, "%s/exec-manifest", dir);
    FILE *f = fopen(m, "w");
    assert_non_null(f);
    va_list ap;
    va_start(ap, n);
    for (int i = 0; i < n; i++) {
        long pid = va_arg(ap, long);
        const char *p = va_arg(ap, const char *);
        fprintf(f, "%ld\t%s\n", pid, p);
    }
    va_end(ap);
    fclose(f);
    int err = 1;
    pl_summary_t *s = pl_summary_read(m, o, &err);
    assert_non_null(s);
    assert_int_equal(err, 0);
    return s;
}

static void test_exec_without_successor_is_noted(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/ex1.pst", dir);
    write_exec_trace(p, 500, 0, "/usr/bin/env", "/bin/sh", 0, 0);
    pl_summary_t *s = read_manifest(NULL, 1, 500L, p);
    assert_int_equal(s->n_notes, 1);
    assert_string_equal(s->notes[0], "pid 500: child exec'd /bin/sh without the tracer "
                                     "(its environment dropped LD_PRELOAD)");
    assert_true(s->entries[0].info.scanned_bytes > 0);   /* the look is counted */
    char out[2048];
    FILE *o = fmemopen(out, sizeof out, "w");
    assert_int_equal(pl_summary_print(s, NULL, o), 1);
    fclose(o);
    assert_non_null(strstr(out, "ex1.pst: 3 events [env]\n"
                                "poolscope: pid 500: child exec'd /bin/sh without the tracer"));
    pl_summary_free(s);
}

static void test_exec_with_traced_successor_is_not_noted(void **state)
{
    (void)state;
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/ex2a.pst", dir);
    snprintf(b, sizeof b, "%s/ex2b.pst", dir);
    write_exec_trace(a, 501, 0, "/usr/bin/env", "/bin/sh", 0, 0);
    pst_writer_cfg_t cfg = { .pid = 501, .exec_gen = 1, .exe = "/bin/sh" };
    int err;
    pst_writer_t *w = pst_writer_open(b, &cfg, &err);
    assert_non_null(w);
    assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 8), 0);
    assert_int_equal(pst_writer_close(w), 0);
    pl_summary_t *s = read_manifest(NULL, 2, 501L, a, 501L, b);
    assert_int_equal(s->n_notes, 0);
    assert_int_equal(s->entries[0].info.scanned_bytes, 0);   /* not even looked at */
    pl_summary_free(s);
}

static void test_exec_that_failed_is_not_noted(void **state)
{
    (void)state;
    char a[128], b[128];
    snprintf(a, sizeof a, "%s/ex3a.pst", dir);
    snprintf(b, sizeof b, "%s/ex3b.pst", dir);
    write_exec_trace(a, 502, 0, "/usr/bin/env", "/bin/sh", 1, 0);            /* went on after */
    write_exec_trace(b, 503, 0, "/usr/bin/env", "/no/such/program", 0, 0);   /* nothing to run */
    pl_summary_t *s = read_manifest(NULL, 2, 502L, a, 503L, b);
    assert_int_equal(s->n_notes, 0);
    pl_summary_free(s);
}

static void test_exec_in_another_thread_and_bare_name(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/ex4.pst", dir);
    /* stream 2's last record is a free; stream 1's is EXEC "sh" (execvp's name) */
    write_exec_trace(p, 504, 0, "/usr/bin/env", "sh", 0, 1);
    pl_summary_t *s = read_manifest(NULL, 1, 504L, p);
    assert_int_equal(s->n_notes, 1);
    assert_non_null(strstr(s->notes[0], "pid 504: child exec'd /"));   /* resolved through PATH */
    assert_non_null(strstr(s->notes[0], "/sh without the tracer"));
    pl_summary_free(s);
}

static void test_exec_of_a_setuid_program_says_why(void **state)
{
    (void)state;
    char p[128], prog[128], cmd[512];
    snprintf(prog, sizeof prog, "%s/suid-sh", dir);
    snprintf(cmd, sizeof cmd, "cp /bin/sh '%s' && chmod 4755 '%s'", prog, prog);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p, "%s/ex7.pst", dir);
    write_exec_trace(p, 507, 0, "/usr/bin/env", prog, 0, 0);
    pl_summary_t *s = read_manifest(NULL, 1, 507L, p);
    assert_int_equal(s->n_notes, 1);
    assert_non_null(strstr(s->notes[0], "suid-sh without the tracer (it is setuid or setgid: "
                                        "the loader ignores LD_PRELOAD)"));
    pl_summary_free(s);
}

static void test_follow_exec_pattern_left_out_on_purpose(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/ex5.pst", dir);
    write_exec_trace(p, 505, 0, "/usr/bin/env", "/bin/sh", 0, 0);
    pl_summary_opts_t o = { .follow_exec = "*python*" };
    pl_summary_t *s = read_manifest(&o, 1, 505L, p);
    assert_int_equal(s->n_notes, 0);           /* not matched: untraced as asked */
    pl_summary_free(s);
    o.follow_exec = "sh";
    s = read_manifest(&o, 1, 505L, p);
    assert_int_equal(s->n_notes, 1);           /* matched, yet untraced */
    pl_summary_free(s);
}

static void test_first_child_is_looked_at_only_when_its_name_changed(void **state)
{
    (void)state;
    char p[128];
    snprintf(p, sizeof p, "%s/ex6.pst", dir);
    write_exec_trace(p, 506, 0, "/usr/bin/env", "/bin/sh", 0, 0);
    /* its final image still had the traced image's name: nothing is read */
    pl_summary_opts_t o = { .first_pid = 506, .first_comm = "env" };
    pl_summary_t *s = read_manifest(&o, 1, 506L, p);
    assert_int_equal(s->n_notes, 0);
    assert_int_equal(s->entries[0].info.scanned_bytes, 0);
    pl_summary_free(s);
    /* unknown name: not looked at either */
    o.first_comm = "";
    s = read_manifest(&o, 1, 506L, p);
    assert_int_equal(s->n_notes, 0);
    assert_int_equal(s->entries[0].info.scanned_bytes, 0);
    pl_summary_free(s);
    /* the kernel says it ended as "sh": looked at, exec found */
    o.first_comm = "sh";
    s = read_manifest(&o, 1, 506L, p);
    assert_int_equal(s->n_notes, 1);
    assert_true(s->entries[0].info.scanned_bytes > 0);
    pl_summary_free(s);
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
        cmocka_unit_test(test_summary_names_untraced_children),
        cmocka_unit_test(test_read_end_gives_the_end_chunk_counts_and_header),
        cmocka_unit_test(test_read_end_without_end_chunk_keeps_the_header),
        cmocka_unit_test(test_read_end_rejects_a_damaged_or_followed_end),
        cmocka_unit_test(test_read_end_header_errors),
        cmocka_unit_test(test_trace_info_reads_events_only_without_end),
        cmocka_unit_test(test_exec_without_successor_is_noted),
        cmocka_unit_test(test_exec_with_traced_successor_is_not_noted),
        cmocka_unit_test(test_exec_that_failed_is_not_noted),
        cmocka_unit_test(test_exec_in_another_thread_and_bare_name),
        cmocka_unit_test(test_exec_of_a_setuid_program_says_why),
        cmocka_unit_test(test_follow_exec_pattern_left_out_on_purpose),
        cmocka_unit_test(test_first_child_is_looked_at_only_when_its_name_changed),
    };
    return cmocka_run_group_tests(tests, make_dir, remove_dir);
}
