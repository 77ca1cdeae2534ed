/* test_hygiene.c — no byte of a trace's names acts on whoever reads the
 * outputs (issue 25 item 8, issue 27's argv JSON).
 *
 * The traces are written with the writer API, every name hostile: ESC
 * sequences, BEL, DEL, C1 CSI as UTF-8, bytes that are not UTF-8, quotes
 * and backslashes. The outputs are checked with this file's own UTF-8
 * validator and byte scans (not the escaper under test): text has no
 * control byte but newline, JSON is strict UTF-8 and parses, OpenMetrics
 * label values use only the format's escapes. A SYNC record claiming a
 * tick gap of 2^63 ns or more is read without an undefined shift (run this
 * suite under SAN=undefined) and is not stated as a resolution.
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

#include "escape.h"
#include "export.h"
#include "gate.h"
#include "json.h"
#include "poolscope/writer.h"
#include "report.h"
#include "scan.h"

static char dir[256];

#define PROG "/opt/\033]0;owned\007prog\377"
#define MARK "\033[2J\033[31mclear\303\050"   /* ESC sequences, then a broken 2-byte sequence */

static void path_in(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

/* A trace with hostile names everywhere a name goes: program, argv, module,
 * markers, a thread and a pool. gap: a SYNC chunk claiming a tick gap of
 * 2^63 + 5 ns; big: larger allocations (so diff has rows). */
static int write_hostile(const char *path, int gap, int big)
{
    const char *argv[] = { PROG, "\377\376argv", "a\033[31mred", "del\177c1\302\233", NULL };
    pst_writer_cfg_t cfg = { .pid = 5, .exe = PROG, .argv = argv, .stacks = PST_STACKS_FP, .depth = 8 };
    int err = 0;
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    if (!w) return err;
    pst_writer_module(w, 1, 0x400000, 0x100000, "/nonexistent/\033[31mevil\377.so", NULL, 0);
    uint64_t fr[] = { 0x401000, 0x402000 };
    uint32_t st = pst_writer_stack(w, fr, 2);
    uint32_t n1 = pst_writer_string(w, MARK), n2 = pst_writer_string(w, "q'\"\\\t\n\001\302\233x");
    uint32_t tn = pst_writer_string(w, "\033]2;thread\007"), pn = pst_writer_string(w, "\033[5mpool\377");
    uint64_t t = 1000;
    pst_writer_time(w, t);
    PST_EMIT(w, 1, PST_EV_THREAD_NAME, tn);
    PST_EMIT(w, 1, PST_EV_POOL_CREATE, 1, pn, 3, 1 << 20);
    PST_EMIT(w, 1, PST_EV_POOL_BACKING_ALLOC, 1, 1, 0x9000000, 128);
    for (uint64_t i = 0; i < 20; i++) {
        uint32_t nm = i % 2 ? n2 : n1;
        pst_writer_time(w, t += 1000);
        PST_EMIT(w, 1, PST_EV_MARK_BEGIN, nm, i, 0);
        pst_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.type = PST_EV_MALLOC; ev.stack = st; ev.f[0] = 0x10000 + 64 * i; ev.f[1] = (big ? 300 : 100) + i;
        pst_writer_event(w, 1, &ev);
        pst_writer_time(w, t += 500 + 100 * i);
        PST_EMIT(w, 1, PST_EV_FREE, 0x10000 + 64 * i);
        PST_EMIT(w, 1, PST_EV_MARK_END, nm, i);
        PST_EMIT(w, 1, PST_EV_POOL_ACQUIRE, 1, 2 + 2 * i, 0, 1, 25, 32, 100, 128, i > 0);
        PST_EMIT(w, 1, PST_EV_POOL_RECLAIM, 1, 3 + 2 * i, 0, 1, 128, 1);
        if (gap && i == 10) {
            uint8_t p[40], *q = p;           /* SYNC: watermark, tick gap, tracer bytes, tracer stream */
            q = pst_put_varint(q, t);
            q = pst_put_varint(q, (1ull << 63) + 5);
            q = pst_put_varint(q, 0);
            q = pst_put_varint(q, 0);
            pst_writer_flush(w);
            pst_writer_raw_chunk(w, PST_CHUNK_SYNC, 0, p, (uint32_t)(q - p));
        }
    }
    return pst_writer_close(w);
}

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/test_hygiene.XXXXXX");
    if (!mkdtemp(dir)) return -1;
    char p[512];
    path_in(p, sizeof p, "h.pst");
    if (write_hostile(p, 0, 0)) return -1;
    path_in(p, sizeof p, "b.pst");
    if (write_hostile(p, 0, 1)) return -1;
    path_in(p, sizeof p, "gap.pst");
    return write_hostile(p, 1, 0) ? -1 : 0;
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

/* ---- independent checks ------------------------------------------------------- */

/* Strict UTF-8 (RFC 3629), written apart from common/escape.c: the offset
 * of the first bad byte, or -1. */
static long bad_utf8(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (!k || i + k > n) return (long)i;
        uint32_t v = k == 1 ? c : k == 2 ? (c & 0x1f) : k == 3 ? (c & 0x0f) : (c & 0x07);
        for (size_t j = 1; j < k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return (long)i;
            v = v << 6 | (s[i + j] & 0x3f);
        }
        static const uint32_t min[5] = { 0, 0, 0x80, 0x800, 0x10000 };
        if (v < min[k] || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) return (long)i;
        i += k;
    }
    return -1;
}

/* The first control byte a terminal would act on (C0 but newline, DEL, C1
 * as UTF-8), or -1. tab_ok: a tab is layout. */
static long control_at(const unsigned char *s, size_t n, int tab_ok)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\n' || (tab_ok && s[i] == '\t')) continue;
        if (s[i] < 0x20 || s[i] == 0x7f) return (long)i;
        if (s[i] == 0xc2 && i + 1 < n && s[i + 1] >= 0x80 && s[i + 1] <= 0x9f) return (long)i;
    }
    return -1;
}

static void expect_clean(const char *what, const char *buf, size_t len, int need_utf8)
{
    long c = control_at((const unsigned char *)buf, len, 1), u = need_utf8 ? bad_utf8((const unsigned char *)buf, len) : -1;
    if (c >= 0) fprintf(stderr, "%s: control byte 0x%02x at %ld: ...%.40s\n", what, (unsigned char)buf[c], c, buf + (c > 40 ? c - 40 : 0));
    if (u >= 0) fprintf(stderr, "%s: not UTF-8 at %ld: ...%.40s\n", what, u, buf + (u > 40 ? u - 40 : 0));
    assert_true(c < 0);
    assert_true(u < 0);
}

typedef struct mem { char *buf; size_t len; FILE *f; } mem_t;
static FILE *mem_open(mem_t *m) { m->buf = NULL; m->len = 0; return m->f = open_memstream(&m->buf, &m->len); }
static void mem_close(mem_t *m) { fclose(m->f); }

/* ---- the outputs ---------------------------------------------------------------- */

static void test_report_text_shows_control_bytes_escaped(void **st)
{
    (void)st;
    az_scan_t *s = scan("h.pst");
    mem_t m;
    assert_non_null(mem_open(&m));
    az_report_opts_t o = { 0 };
    o.full_stacks = 1;
    az_report_text(s, &o, m.f);
    mem_close(&m);
    expect_clean("report text", m.buf, m.len, 1);
    assert_non_null(strstr(m.buf, "\\x1b[2J\\x1b[31mclear\\xc3("));   /* the marker, readable */
    assert_non_null(strstr(m.buf, "\\x1b]0;owned\\x07prog\\xff"));     /* the program */
    assert_non_null(strstr(m.buf, "\\x1b[5mpool\\xff"));                /* the pool */
    assert_non_null(strstr(m.buf, "\\x1b[31mevil\\xff.so"));            /* the module in a site */
    free(m.buf);
    az_scan_free(s);
}

static void test_report_json_valid_for_any_bytes(void **st)
{
    (void)st;
    az_scan_t *s = scan("h.pst");
    mem_t m;
    assert_non_null(mem_open(&m));
    az_report_json(s, NULL, m.f);
    mem_close(&m);
    /* JSON escapes control characters; strict UTF-8 everywhere */
    expect_clean("report json", m.buf, m.len, 1);
    int err;
    char eb[200];
    az_jdoc_t *d = az_json_parse(m.buf, m.len, &err, eb, sizeof eb);
    if (!d) fprintf(stderr, "parse: %s\n", eb);
    assert_non_null(d);
    const az_jv_t *argv = az_json_get(az_json_root(d), "argv");
    assert_non_null(argv);
    assert_int_equal(argv->n, 4);
    /* each byte that is not UTF-8 is one U+FFFD; ESC, DEL and C1 come back as they were */
    assert_string_equal(argv->child->next->str, "\xef\xbf\xbd\xef\xbf\xbd" "argv");
    assert_string_equal(argv->child->next->next->str, "a\033[31mred");
    assert_string_equal(argv->child->next->next->next->str, "del\177c1\302\233");
    assert_non_null(strstr(m.buf, "\"del\\u007fc1\\u009b\""));
    assert_non_null(az_json_get(az_json_get(az_json_root(d), "phases"), "\033[2J\033[31mclear\xef\xbf\xbd("));
    az_json_free(d);
    free(m.buf);
    az_scan_free(s);
}

static void test_openmetrics_label_values_escaped_and_utf8(void **st)
{
    (void)st;
    az_scan_t *s = scan("h.pst");
    mem_t m;
    assert_non_null(mem_open(&m));
    assert_int_equal(az_report_openmetrics(s, NULL, m.f), 0);
    mem_close(&m);
    expect_clean("openmetrics", m.buf, m.len, 1);
    /* every label value: only \\ \" \n after a backslash, no raw quote inside */
    size_t samples = 0;
    for (char *l = m.buf, *nl; l && *l; l = nl ? nl + 1 : NULL) {
        nl = strchr(l, '\n');
        if (*l == '#') continue;
        char *p = strchr(l, '{');
        assert_non_null(p);
        samples++;
        for (p++; *p != '}';) {
            while (*p != '=') p++;
            assert_int_equal(p[1], '"');
            for (p += 2; *p != '"'; p++) {
                assert_true(*p != '\n');
                if (*p == '\\') { p++; assert_non_null(strchr("\\\"n", *p)); }
            }
            p++;
            if (*p == ',') p++;
        }
    }
    assert_true(samples > 10);
    /* the phase label holds the marker's text form */
    assert_non_null(strstr(m.buf, "phase=\"\\\\x1b[2J\\\\x1b[31mclear"));
    free(m.buf);
    az_scan_free(s);
}

static void test_diff_text_shows_names_escaped(void **st)
{
    (void)st;
    char pa[512], pb[512], msg[256];
    path_in(pa, sizeof pa, "h.pst");
    path_in(pb, sizeof pb, "b.pst");
    int err;
    az_jdoc_t *a = az_metrics_doc(pa, &err, msg, sizeof msg), *b = az_metrics_doc(pb, &err, msg, sizeof msg);
    assert_non_null(a);
    assert_non_null(b);
    mem_t m;
    assert_non_null(mem_open(&m));
    size_t n = az_diff_docs(az_json_root(a), az_json_root(b), 0, m.f);
    mem_close(&m);
    assert_true(n > 0);
    expect_clean("diff text", m.buf, m.len, 1);
    assert_non_null(strstr(m.buf, "phases.\\x1b[2J\\x1b[31mclear"));
    assert_non_null(strstr(m.buf, "\\x1b[31mevil"));
    free(m.buf);
    assert_non_null(mem_open(&m));
    az_diff_docs(az_json_root(a), az_json_root(b), AZ_DIFF_JSON, m.f);
    mem_close(&m);
    expect_clean("diff json", m.buf, m.len, 1);
    az_jdoc_t *d = az_json_parse(m.buf, m.len, &err, msg, sizeof msg);
    assert_non_null(d);
    az_json_free(d);
    free(m.buf);
    az_json_free(a);
    az_json_free(b);
}

static void test_chrome_export_valid_for_any_bytes(void **st)
{
    (void)st;
    char in[512], out[512], msg[256];
    path_in(in, sizeof in, "h.pst");
    path_in(out, sizeof out, "h.chrome.json");
    int warn = 0;
    assert_int_equal(az_export(in, AZ_EXPORT_CHROME, AZ_WEIGHT_BYTES, out, &warn, msg, sizeof msg), 0);
    int err;
    FILE *f = fopen(out, "rb");
    assert_non_null(f);
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    expect_clean("chrome", buf, n, 1);
    az_jdoc_t *d = az_json_parse(buf, n, &err, msg, sizeof msg);
    assert_non_null(d);
    az_json_free(d);
}

/* A tick gap of 2^63 ns or more: no shift by 64, no "within 584 years". */
static void test_sync_gap_of_2_63_is_not_a_resolution(void **st)
{
    (void)st;
    az_scan_t *s = scan("gap.pst");
    assert_true(s->resolution_ns >= 1ull << 63);
    mem_t m;
    assert_non_null(mem_open(&m));
    az_report_text(s, NULL, m.f);
    mem_close(&m);
    assert_null(strstr(m.buf, "18446744073"));
    assert_null(strstr(m.buf, "9223372036.855 s"));
    assert_null(strstr(m.buf, "below the trace's time resolution"));
    assert_non_null(strstr(m.buf, "resolution unknown"));
    /* the lifetimes are still there, bucket by bucket */
    assert_non_null(strstr(m.buf, "Lifetimes (allocation to free)\n      256 ns .. <512 ns"));
    free(m.buf);
    az_scan_free(s);
}

/* ---- the escapers themselves (common/escape.h) ------------------------------------- */

static void test_text_escape(void **st)
{
    (void)st;
    char b[64];
    assert_string_equal(psc_esc_text("a\033[1mb", b, sizeof b), "a\\x1b[1mb");
    assert_string_equal(psc_esc_text("\377x\303\050\302\233\177", b, sizeof b), "\\xffx\\xc3(\\xc2\\x9b\\x7f");
    assert_string_equal(psc_esc_text("caf\303\251 \360\237\230\200", b, sizeof b), "caf\303\251 \360\237\230\200");
    assert_string_equal(psc_esc_text("\355\240\200\300\257", b, sizeof b), "\\xed\\xa0\\x80\\xc0\\xaf");   /* surrogate, overlong */
    assert_string_equal(psc_esc_text(NULL, b, sizeof b), "");
    /* cut before an escape that does not fit, never inside it */
    assert_string_equal(psc_esc_text("ab\033", b, 6), "ab");
    assert_int_equal(psc_esc_text_needed("plain/name (x)"), 0);
    assert_int_equal(psc_esc_text_needed("caf\303\251"), 0);
    assert_int_equal(psc_esc_text_needed("a\tb"), 1);
}

static char *put_to_string(void (*fn)(FILE *, const char *), const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    fn(f, s);
    fclose(f);
    return buf;
}
static void json_plain(FILE *f, const char *s) { psc_esc_json(f, s, 0); }
static void json_html(FILE *f, const char *s) { psc_esc_json(f, s, PSC_ESC_HTML); }

static void test_json_om_gnuplot_escape(void **st)
{
    (void)st;
    char *x;
    x = put_to_string(json_plain, "a\"\\\n\033\377\302\233</");
    assert_string_equal(x, "\"a\\\"\\\\\\n\\u001b\\ufffd\\u009b</\"");
    free(x);
    x = put_to_string(json_html, "</script>&\342\200\250");
    assert_string_equal(x, "\"\\u003c/script\\u003e\\u0026\\u2028\"");
    free(x);
    x = put_to_string(psc_esc_om_label, "a\\b\"c\nd\033\377");
    assert_string_equal(x, "a\\\\b\\\"c\\nd\\\\x1b\\\\xff");
    free(x);
    x = put_to_string(psc_esc_gp, "`touch x` @m \"q\\ \n\033");
    assert_string_equal(x, "\"\\140touch x\\140 \\100m \\\"q\\\\ \\n\\\\x1b\"");
    free(x);
    x = put_to_string(psc_esc_gp_data, "a\"b`c");
    assert_string_equal(x, "\"a\\x22b`c\"");
    free(x);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_report_text_shows_control_bytes_escaped),
        cmocka_unit_test(test_report_json_valid_for_any_bytes),
        cmocka_unit_test(test_openmetrics_label_values_escaped_and_utf8),
        cmocka_unit_test(test_diff_text_shows_names_escaped),
        cmocka_unit_test(test_chrome_export_valid_for_any_bytes),
        cmocka_unit_test(test_sync_gap_of_2_63_is_not_a_resolution),
        cmocka_unit_test(test_text_escape),
        cmocka_unit_test(test_json_om_gnuplot_escape),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
