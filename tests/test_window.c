/* test_window.c — bounded recording windows and traces still being written
 * (issue 28, items 2 and 3), below the CLI:
 *
 *   - END's PST_END_STOPPED bit reads as end_stopped, the trace stays
 *     complete, and report calls its live set "live at stop" (text) and
 *     "stopped": true (JSON), where an END without the bit keeps "leaked
 *     at exit";
 *   - pst_being_written says 1 only while the given pid holds the file
 *     open (this process), 0 after the close, for another file, for a pid
 *     that does not exist;
 *   - pst_ctl_stop creates the stop file and sets stop_req in a counters
 *     file of ours, never through a symbolic link, never blocked by a
 *     FIFO, never in a file without the magic.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "ctl.h"
#include "poolscope/format.h"
#include "poolscope/reader.h"
#include "poolscope/writer.h"
#include "report.h"
#include "scan.h"

static char dir[256];

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/test_window.XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A trace with two mallocs and one free (one block live at END). */
static void small_trace(const char *path)
{
    pst_writer_cfg_t cfg;
    memset(&cfg, 0, sizeof cfg);
    int err = 0;
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    pst_writer_time(w, 1000);
    assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x10000, 100), 0);
    pst_writer_time(w, 2000);
    assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x20000, 300), 0);
    pst_writer_time(w, 3000);
    assert_int_equal(PST_EMIT(w, 1, PST_EV_FREE, 0x10000), 0);
    assert_int_equal(pst_writer_close(w), 0);
}

/* END's payload again with a flags varint: the length and CRC follow. */
static void set_end_flags(const char *path, uint64_t flags)
{
    pst_end_info_t ei;
    assert_int_equal(pst_read_end(path, &ei), 0);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t hdr[PST_CHUNK_HDR], pl[64];
    assert_int_equal(pread(fd, hdr, sizeof hdr, (off_t)ei.end_offset), (ssize_t)sizeof hdr);
    uint8_t *p = pst_put_end(pl, ei.events, ei.lost, ei.streams);
    p = pst_put_varint(p, flags);
    uint32_t len = (uint32_t)(p - pl), crc = pst_crc32c(0, pl, len);
    for (int i = 0; i < 4; i++) { hdr[8 + i] = (uint8_t)(len >> (8 * i)); hdr[12 + i] = (uint8_t)(crc >> (8 * i)); }
    assert_int_equal(pwrite(fd, hdr, sizeof hdr, (off_t)ei.end_offset), (ssize_t)sizeof hdr);
    assert_int_equal(pwrite(fd, pl, len, (off_t)(ei.end_offset + sizeof hdr)), (ssize_t)len);
    assert_int_equal(ftruncate(fd, (off_t)(ei.end_offset + sizeof hdr + len)), 0);
    close(fd);
}

static char *report_of(const char *path, int json)
{
    az_scan_t *s = NULL;
    char msg[256];
    az_scan_opts_t so;
    memset(&so, 0, sizeof so);
    assert_int_equal(az_scan_file(path, &so, &s, msg, sizeof msg), 0);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    az_report_opts_t ro;
    memset(&ro, 0, sizeof ro);
    ro.no_symbols = 1;
    if (json) az_report_json(s, &ro, f); else az_report_text(s, &ro, f);
    fclose(f);
    az_scan_free(s);
    return buf;
}

static void test_end_stopped_flag_reads_as_live_at_stop(void **st)
{
    (void)st;
    char p[300];
    path_in(p, sizeof p, "stopped.pst");
    small_trace(p);
    char *plain = report_of(p, 0);
    assert_non_null(strstr(plain, "leaked at exit"));
    assert_null(strstr(plain, "live at stop"));
    free(plain);

    set_end_flags(p, PST_END_STOPPED);
    int err = 0;
    pst_reader_t *r = pst_open(p, &err);
    assert_non_null(r);
    pst_event_t ev;
    while (pst_next(r, &ev) > 0) {}
    const pst_status_t *s = pst_status(r);
    assert_true(s->complete);
    assert_true(s->end_stopped);
    assert_false(s->end_killed);
    pst_close(r);

    char *text = report_of(p, 0), *json = report_of(p, 1);
    assert_non_null(strstr(text, "live at stop "));
    assert_null(strstr(text, "leaked at exit"));
    assert_non_null(strstr(json, "\"stopped\": true"));
    assert_non_null(strstr(json, "\"leaked_bytes\": 300"));   /* the figure is the same: live at the end */
    free(text);
    free(json);
}

static void test_being_written_needs_the_writer_to_hold_it(void **st)
{
    (void)st;
    char p[300], q[300];
    path_in(p, sizeof p, "open.pst");
    path_in(q, sizeof q, "other.pst");
    int fd = open(p, O_WRONLY | O_CREAT, 0600);
    assert_true(fd >= 0);
    close(open(q, O_WRONLY | O_CREAT, 0600));
    assert_int_equal(pst_being_written(p, (uint64_t)getpid()), 1);
    assert_int_equal(pst_being_written(q, (uint64_t)getpid()), 0);   /* a file we do not hold */
    assert_int_equal(pst_being_written(p, 0), 0);
    assert_int_equal(pst_being_written(p, 0x7ffffffe), 0);              /* no such process */
    close(fd);
    assert_int_equal(pst_being_written(p, (uint64_t)getpid()), 0);
}

static void write_ctl(const char *path)
{
    uint8_t page[PST_CTL_HDR];
    memset(page, 0, sizeof page);
    memcpy(page, PST_CTL_MAGIC, 8);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, page, sizeof page), (ssize_t)sizeof page);
    close(fd);
}

static uint64_t stop_req_of(const char *path)
{
    pst_ctl_hdr_t h;
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(read(fd, &h, sizeof h), (ssize_t)sizeof h);
    close(fd);
    return h.stop_req;
}

static void test_ctl_stop_reaches_counters_files_only(void **st)
{
    (void)st;
    char d[300], a[400], tgt[400], ln[400], fifo[400], junk[400], stop[400];
    path_in(d, sizeof d, "ctl");
    assert_int_equal(mkdir(d, 0700), 0);
    snprintf(a, sizeof a, "%s/1.2.ctl", d);
    snprintf(tgt, sizeof tgt, "%s/target", dir);
    snprintf(ln, sizeof ln, "%s/3.4.ctl", d);
    snprintf(fifo, sizeof fifo, "%s/5.6.ctl", d);
    snprintf(junk, sizeof junk, "%s/7.8.ctl", d);
    snprintf(stop, sizeof stop, "%s/%s", d, PST_CTL_STOP);
    write_ctl(a);
    write_ctl(tgt);
    assert_int_equal(symlink(tgt, ln), 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    int fd = open(junk, O_WRONLY | O_CREAT, 0600);   /* no magic */
    char zeros[PST_CTL_HDR];
    memset(zeros, 0, sizeof zeros);
    assert_int_equal(write(fd, zeros, sizeof zeros), (ssize_t)sizeof zeros);
    close(fd);

    assert_int_equal(pst_ctl_stop(d), 1);
    struct stat sb;
    assert_int_equal(lstat(stop, &sb), 0);
    assert_int_equal(stop_req_of(a), 1);
    assert_int_equal(stop_req_of(tgt), 0);   /* not through the link */
    assert_int_equal(stop_req_of(junk), 0);
    assert_int_equal(pst_ctl_stop(NULL), -1);
    assert_int_equal(pst_ctl_stop(""), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_end_stopped_flag_reads_as_live_at_stop),
        cmocka_unit_test(test_being_written_needs_the_writer_to_hold_it),
        cmocka_unit_test(test_ctl_stop_reaches_counters_files_only),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
