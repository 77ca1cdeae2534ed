/* test_html.c — `poolscope html`'s site rows: what they cost while reading
 * and what they say.
 *
 * The suite is linked with --wrap for malloc, calloc, realloc and free (the
 * Makefile's TEST_LDFLAGS_test_html): every allocation the tree's code makes
 * goes through the wrappers below, which keep the bytes requested and not
 * yet freed, and their highest value while counting. Frees of blocks they
 * did not see (from strdup and the like, inside libc) are ignored.
 *
 * The trace: N_STACKS stacks, stack i allocating 16 (i + 1) bytes once at
 * T0 + i * GAP ns, nothing freed but the first FREED objects, each at
 * T0 + (N_STACKS + k) * GAP. Long enough that the timeline's buckets double
 * in width a few times while reading. The site buckets expected are
 * computed here from the page's rules (html.h: 2048 timeline buckets, the
 * first 1024 ns wide, doubled while the trace outgrows them; a site bucket
 * is two of them), not from its code.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "html.h"
#include "json.h"
#include "poolscope/writer.h"

/* ---- counting allocations -------------------------------------------------- */

void *__real_malloc(size_t n);
void *__real_calloc(size_t m, size_t n);
void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_malloc(size_t n);
void *__wrap_calloc(size_t m, size_t n);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

#define TRACK_N (1u << 19)        /* open addressing, linear probing */
static struct { void *p; size_t n; } track[TRACK_N];
static pthread_mutex_t track_mu = PTHREAD_MUTEX_INITIALIZER;
static int counting, track_full;
static size_t track_used, live_bytes, peak_bytes;

static size_t slot_of(const void *p) { return (size_t)(((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull) & (TRACK_N - 1); }

static void track_add(void *p, size_t n)
{
    if (!p || !counting) return;
    if (track_used >= TRACK_N / 2) { track_full = 1; return; }
    size_t i = slot_of(p);
    while (track[i].p) i = (i + 1) & (TRACK_N - 1);
    track[i].p = p;
    track[i].n = n;
    track_used++;
    live_bytes += n;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
}

/* Backward-shift deletion: the entries after the gap that hash at or
 * before it move into it, so probing needs no tombstones. */
static void track_del(void *p)
{
    if (!p) return;
    size_t i = slot_of(p);
    while (track[i].p && track[i].p != p) i = (i + 1) & (TRACK_N - 1);
    if (!track[i].p) return;                /* not seen: ignored */
    live_bytes -= track[i].n;
    track_used--;
    for (size_t j = (i + 1) & (TRACK_N - 1); track[j].p; j = (j + 1) & (TRACK_N - 1)) {
        size_t h = slot_of(track[j].p);
        if (((j - h) & (TRACK_N - 1)) >= ((j - i) & (TRACK_N - 1))) {
            track[i] = track[j];
            i = j;
        }
    }
    track[i].p = NULL;
}

void *__wrap_malloc(size_t n)
{
    void *p = __real_malloc(n);
    pthread_mutex_lock(&track_mu);
    track_add(p, n);
    pthread_mutex_unlock(&track_mu);
    return p;
}

void *__wrap_calloc(size_t m, size_t n)
{
    void *p = __real_calloc(m, n);
    pthread_mutex_lock(&track_mu);
    track_add(p, m * n);
    pthread_mutex_unlock(&track_mu);
    return p;
}

void *__wrap_realloc(void *p, size_t n)
{
    pthread_mutex_lock(&track_mu);
    void *q = __real_realloc(p, n);
    if (q || !n) {
        track_del(p);
        track_add(q, n);
    }
    pthread_mutex_unlock(&track_mu);
    return q;
}

void __wrap_free(void *p)
{
    pthread_mutex_lock(&track_mu);
    track_del(p);
    __real_free(p);
    pthread_mutex_unlock(&track_mu);
}

static void count_start(void)
{
    pthread_mutex_lock(&track_mu);
    counting = 1;
    peak_bytes = live_bytes;
    pthread_mutex_unlock(&track_mu);
}

/* The most bytes held at once since count_start, over what was held then. */
static size_t count_stop(size_t *base)
{
    pthread_mutex_lock(&track_mu);
    counting = 0;
    size_t peak = peak_bytes;
    pthread_mutex_unlock(&track_mu);
    assert_false(track_full);
    return peak - *base;
}

/* ---- the trace -------------------------------------------------------------- */

#define N_STACKS 2000
#define FREED    50
#define T0       1000u
#define GAP      2500u            /* ns between allocations: 5.1 ms in all */

static char dir[256];

static int setup(void **st)
{
    (void)st;
    snprintf(dir, sizeof dir, "/tmp/ps_test_html_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint64_t t_alloc(int i) { return T0 + (uint64_t)i * GAP; }
static uint64_t t_free(int k) { return T0 + (uint64_t)(N_STACKS + k) * GAP; }
static uint64_t size_of(int i) { return 16 * (uint64_t)(i + 1); }

/* Allocation i (size_of(i) bytes at 0x10000000 + 0x1000 i) at time t,
 * from stack k (its innermost frame 0x401000 + 16 k). */
static void alloc_at(pst_writer_t *w, int k, int i, uint64_t t)
{
    uint64_t fr[2] = { 0x401000 + 16 * (uint64_t)k, 0x402000 };
    uint32_t s = pst_writer_stack(w, fr, 2);
    pst_writer_time(w, t);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_MALLOC;
    ev.stack = s;
    ev.f[0] = 0x10000000 + 0x1000 * (uint64_t)i;
    ev.f[1] = size_of(i);
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

/* one_stack: every allocation from the same stack (one row). */
static void write_trace(const char *path, int one_stack)
{
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 77, .exe = "/html/prog", .stacks = PST_STACKS_FP, .depth = 8 };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    for (int i = 0; i < N_STACKS; i++) alloc_at(w, one_stack ? 0 : i, i, t_alloc(i));
    for (int k = 0; k < FREED; k++) {
        pst_writer_time(w, t_free(k));
        PST_EMIT(w, 1, PST_EV_FREE, 0x10000000 + 0x1000 * (uint64_t)k);
    }
    assert_int_equal(pst_writer_close(w), 0);
}

static void html_of(const char *trace, const char *page)
{
    az_html_opts_t o = { .trace = trace, .out = page };
    az_html_out_t out;
    char msg[512] = "";
    int rc = az_html(&o, &out, msg, sizeof msg);
    if (rc) fail_msg("az_html: %d %s", rc, msg);
}

/* Peak bytes az_html holds on the trace, over what was held before. */
static size_t html_peak(const char *trace, const char *page)
{
    size_t base;
    pthread_mutex_lock(&track_mu);
    base = live_bytes;
    pthread_mutex_unlock(&track_mu);
    count_start();
    html_of(trace, page);
    return count_stop(&base);
}

/* A row that allocated in one site bucket holds that bucket's chunk, not
 * the whole timeline's 1024 site buckets (24 B each: 24 KiB a row, what
 * every row held before): the 2000 rows of one allocation each cost at
 * most a quarter of that more than one row of the same 2000 allocations. */
static void test_row_of_one_bucket_does_not_hold_the_timeline(void **st)
{
    (void)st;
    char many[300], one[300], page[300];
    snprintf(many, sizeof many, "%s/many.pst", dir);
    snprintf(one, sizeof one, "%s/one.pst", dir);
    snprintf(page, sizeof page, "%s/p.html", dir);
    write_trace(many, 0);
    write_trace(one, 1);
    html_of(one, page);                      /* once before counting: what stays allocated for good */
    size_t p_one = html_peak(one, page), p_many = html_peak(many, page);
    size_t whole_row = 1024 * 3 * sizeof(uint64_t);
    print_message("peak: one stack %zu B, %d stacks %zu B: %.0f B a row more\n", p_one, N_STACKS, p_many,
                  ((double)p_many - (double)p_one) / N_STACKS);
    assert_true(p_many > p_one);
    assert_true(p_many - p_one <= (size_t)N_STACKS * whole_row / 4);
}

/* ---- what the rows say ------------------------------------------------------ */

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return b;
}

static az_jdoc_t *page_data(const char *page)
{
    size_t n;
    char *text = read_all(page, &n);
    const char *open = "<script type=\"application/json\" id=\"ps-data\">";
    char *a = strstr(text, open);
    assert_non_null(a);
    a += strlen(open);
    char *e = strstr(a, "</script>");
    assert_non_null(e);
    int err = 0;
    char eb[200] = "";
    az_jdoc_t *d = az_json_parse(a, (size_t)(e - a), &err, eb, sizeof eb);
    if (!d) fail_msg("page data: %s", eb);
    free(text);
    return d;
}

/* The timeline's width when it ends: 1024 ns, doubled until the trace's
 * span fits in its 2048 buckets. */
static unsigned final_shift(void)
{
    uint64_t span = t_free(FREED - 1) - T0;
    unsigned s = 10;
    while ((span >> s) >= 2048) s++;
    return s;
}

typedef struct want { uint64_t ab, an, fb; } want_t;

/* A row's "b" against the buckets expected: [delta, allocated bytes,
 * allocations, freed bytes] for each bucket with something in it. */
static void expect_buckets(const az_jv_t *row, const want_t *w, size_t n, const char *what)
{
    const az_jv_t *b = az_json_get(row, "b");
    assert_non_null(b);
    const az_jv_t *x = b->child;
    size_t prev = 0, seen = 0;
    for (size_t k = 0; k < n; k++) {
        if (!w[k].ab && !w[k].an && !w[k].fb) continue;
        uint64_t v[4];
        for (int j = 0; j < 4; j++) {
            if (!x) fail_msg("%s: bucket %zu missing", what, k);
            v[j] = x->u;
            x = x->next;
        }
        if (v[0] != k - prev || v[1] != w[k].ab || v[2] != w[k].an || v[3] != w[k].fb)
            fail_msg("%s: bucket %zu: [%llu,%llu,%llu,%llu], want [%zu,%llu,%llu,%llu]", what, k,
                     (unsigned long long)v[0], (unsigned long long)v[1], (unsigned long long)v[2],
                     (unsigned long long)v[3], k - prev, (unsigned long long)w[k].ab,
                     (unsigned long long)w[k].an, (unsigned long long)w[k].fb);
        prev = k;
        seen++;
    }
    if (x) fail_msg("%s: more buckets than the %zu expected", what, seen);
}

/* Rows sorted by bytes, the largest first: the first AZ_HTML_ROWS stacks
 * written (the largest allocations) each in the one bucket of its
 * allocation (and of its free), the rest summed into "(500 smaller
 * stacks)" over their buckets. */
static void test_site_buckets_are_those_of_the_events(void **st)
{
    (void)st;
    char trace[300], page[300];
    snprintf(trace, sizeof trace, "%s/b.pst", dir);
    snprintf(page, sizeof page, "%s/b.html", dir);
    write_trace(trace, 0);
    html_of(trace, page);
    az_jdoc_t *d = page_data(page);
    const az_jv_t *root = az_json_root(d);
    unsigned s = final_shift();
    const az_jv_t *sb = az_json_get(root, "site_sb"), *w = az_json_path(root, "tl.w");
    assert_non_null(sb);
    assert_non_null(w);
    assert_int_equal(sb->u, 2);              /* one site bucket is two timeline buckets */
    assert_int_equal(w->u, 1ull << s);
    const size_t NB = 1024;
    want_t *one = calloc(NB, sizeof *one), *rest = calloc(NB, sizeof *rest);
    assert_non_null(one);
    assert_non_null(rest);
    int n_small = N_STACKS - AZ_HTML_ROWS;
    for (int i = 0; i < n_small; i++) {      /* the smallest: stacks 0 .. n_small - 1 */
        size_t b = (size_t)((t_alloc(i) - T0) >> (s + 1));
        rest[b].ab += size_of(i);
        rest[b].an++;
        if (i < FREED) rest[(t_free(i) - T0) >> (s + 1)].fb += size_of(i);
    }
    const az_jv_t *sites = az_json_get(root, "sites");
    assert_non_null(sites);
    assert_int_equal(sites->n, AZ_HTML_ROWS + 1);
    int i = N_STACKS - 1;
    for (const az_jv_t *r = sites->child; r; r = r->next, i--) {
        char what[64];
        if (i >= n_small) {
            assert_int_equal(az_json_get(r, "bytes")->u, size_of(i));
            memset(one, 0, NB * sizeof *one);
            one[(t_alloc(i) - T0) >> (s + 1)] = (want_t){ size_of(i), 1, 0 };
            snprintf(what, sizeof what, "stack %d", i);
            expect_buckets(r, one, NB, what);
        } else {
            char lb[64];
            snprintf(lb, sizeof lb, "(%d smaller stacks)", n_small);
            assert_string_equal(az_json_get(r, "label")->str, lb);
            expect_buckets(r, rest, NB, lb);
        }
    }
    free(one);
    free(rest);
    az_json_free(d);
}

/* Objects of 4 GiB and more (their sizes kept apart from the live table's
 * slots): one stack allocates 5 GiB and 16 B in the first site bucket
 * (2048 ns: the trace is too short for the buckets to widen), frees the
 * 5 GiB there, allocates 6 GiB in the second and frees the 16 B. */
static void test_objects_of_4_gib_and_more(void **st)
{
    (void)st;
    char trace[300], page[300];
    snprintf(trace, sizeof trace, "%s/big.pst", dir);
    snprintf(page, sizeof page, "%s/big.html", dir);
    const uint64_t G = 1ull << 30;
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 78, .exe = "/html/big", .stacks = PST_STACKS_FP, .depth = 8 };
    pst_writer_t *w = pst_writer_open(trace, &cfg, &err);
    assert_non_null(w);
    uint64_t fr[2] = { 0x401000, 0x402000 };
    uint32_t s = pst_writer_stack(w, fr, 2);
    struct { uint64_t t, addr, size; } ev_[] = {
        { 1000, 0x100000000, 5 * G }, { 2000, 0x10000, 16 }, { 3000, 0x100000000, 0 },
        { 4000, 0x300000000, 6 * G }, { 5000, 0x10000, 0 },
    };
    for (size_t i = 0; i < sizeof ev_ / sizeof ev_[0]; i++) {
        pst_writer_time(w, ev_[i].t);
        if (!ev_[i].size) { PST_EMIT(w, 1, PST_EV_FREE, ev_[i].addr); continue; }
        pst_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.type = PST_EV_MALLOC;
        ev.stack = s;
        ev.f[0] = ev_[i].addr;
        ev.f[1] = ev_[i].size;
        assert_int_equal(pst_writer_event(w, 1, &ev), 0);
    }
    assert_int_equal(pst_writer_close(w), 0);
    html_of(trace, page);
    az_jdoc_t *d = page_data(page);
    const az_jv_t *sites = az_json_get(az_json_root(d), "sites");
    assert_non_null(sites);
    assert_int_equal(sites->n, 1);
    const az_jv_t *r = sites->child;
    assert_int_equal(az_json_get(r, "calls")->u, 3);
    assert_int_equal(az_json_get(r, "bytes")->u, 11 * G + 16);
    assert_int_equal(az_json_get(r, "live")->u, 6 * G);
    assert_int_equal(az_json_get(r, "live_n")->u, 1);
    assert_int_equal(az_json_get(r, "max_live")->u, 6 * G + 16);
    want_t b[2] = { { 5 * G + 16, 2, 5 * G }, { 6 * G, 1, 16 } };
    expect_buckets(r, b, 2, "big");
    az_json_free(d);
}

/* ---- rows merged while reading ---------------------------------------------- */

/* Past MAX_ROWS rows (html.c: 4096) the page merges the quarter of its
 * rows that allocated least into "(small stacks, merged while reading)";
 * objects still live name their stack's row after that. The trace: n
 * stacks, stack i allocating size_of(i) bytes once at T0 + i ns, so each
 * merge takes the oldest rows left (the smallest). FREE_EVEN: then the
 * objects of the even stacks freed in order; FREE_AT_ONCE: each freed
 * right after it was allocated. */
#define MERGED_N 12000
enum { FREE_NONE, FREE_EVEN, FREE_AT_ONCE };
static void write_merging(const char *path, int n, int how)
{
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 79, .exe = "/html/merge", .stacks = PST_STACKS_FP, .depth = 8 };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    uint64_t t = T0;
    for (int i = 0; i < n; i++) {
        alloc_at(w, i, i, t++);
        if (how == FREE_AT_ONCE) PST_EMIT(w, 1, PST_EV_FREE, 0x10000000 + 0x1000 * (uint64_t)i);
    }
    for (int i = 0; how == FREE_EVEN && i < n; i += 2) {
        pst_writer_time(w, t++);
        PST_EMIT(w, 1, PST_EV_FREE, 0x10000000 + 0x1000 * (uint64_t)i);
    }
    assert_int_equal(pst_writer_close(w), 0);
}

/* Every object freed is taken off the row that counts it: its own row if
 * its stack still has one, else the merged row, which counts stacks
 * 0 .. m-1 (m its calls: the smallest were merged). Expected from that
 * rule and the trace, each row apart, with the sums over all rows. */
static void test_rows_merged_while_reading_count_their_objects(void **st)
{
    (void)st;
    char trace[300], page[300];
    snprintf(trace, sizeof trace, "%s/m.pst", dir);
    snprintf(page, sizeof page, "%s/m.html", dir);
    write_merging(trace, MERGED_N, FREE_EVEN);
    html_of(trace, page);
    az_jdoc_t *d = page_data(page);
    const az_jv_t *sites = az_json_get(az_json_root(d), "sites");
    assert_non_null(sites);
    uint64_t calls = 0, live = 0, live_n = 0, want_live = 0;
    int merged = 0, own = 0;
    for (int i = 1; i < MERGED_N; i += 2) want_live += size_of(i);
    for (const az_jv_t *r = sites->child; r; r = r->next) {
        const char *label = az_json_get(r, "label") ? az_json_get(r, "label")->str : "";
        uint64_t c = az_json_get(r, "calls")->u, b = az_json_get(r, "bytes")->u, l = az_json_get(r, "live")->u,
                 ln = az_json_get(r, "live_n")->u;
        calls += c;
        live += l;
        live_n += ln;
        if (!strcmp(label, "(small stacks, merged while reading)")) {
            uint64_t m = c, wb = 0, wl = 0;
            for (uint64_t i = 0; i < m; i++) {
                wb += size_of((int)i);
                if (i % 2) wl += size_of((int)i);
            }
            assert_true(m >= 1024);          /* at least one merge */
            assert_int_equal(b, wb);
            assert_int_equal(l, wl);
            assert_int_equal(ln, m / 2);
            merged++;
        } else if (c == 1) {                 /* a stack's own row: its size names it */
            int i = (int)(b / 16) - 1;
            assert_int_equal(b, size_of(i));
            assert_int_equal(l, i % 2 ? size_of(i) : 0);
            assert_int_equal(ln, i % 2);
            own++;
        }
    }
    assert_int_equal(merged, 1);
    assert_true(own > 1000);
    assert_int_equal(calls, MERGED_N);
    assert_int_equal(live, want_live);
    assert_int_equal(live_n, MERGED_N / 2);
    az_json_free(d);
}

/* A merged row whose objects are still live costs an id (8 bytes), not
 * a row (128 bytes: the counters and the buckets' chunk pointers). Two
 * traces of the same stacks and sizes, the objects of one all live to the
 * end, those of the other each freed at once: what the first costs more
 * is what a live object costs the reader's scan and the page (their
 * live tables, twice that while a table grows), and its merged row's
 * holder: 204 bytes an object with ids, 327 with rows (120 more: a row
 * less an id), the bound between. */
static void test_merged_rows_cost_no_row_each(void **st)
{
    (void)st;
    char a[300], b[300], page[300];
    snprintf(a, sizeof a, "%s/ma.pst", dir);
    snprintf(b, sizeof b, "%s/mb.pst", dir);
    snprintf(page, sizeof page, "%s/mp.html", dir);
    write_merging(a, MERGED_N * 2, FREE_AT_ONCE);
    write_merging(b, MERGED_N * 2, FREE_NONE);
    html_of(a, page);                        /* once before counting: what stays allocated for good */
    size_t pa = html_peak(a, page), pb = html_peak(b, page);
    double per = ((double)pb - (double)pa) / (MERGED_N * 2);
    print_message("peak: %d stacks, objects freed at once %zu B, all live %zu B: %.0f B a live object more\n",
                  MERGED_N * 2, pa, pb, per);
    assert_true(pb > pa);
    assert_true(per < 260);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row_of_one_bucket_does_not_hold_the_timeline),
        cmocka_unit_test(test_site_buckets_are_those_of_the_events),
        cmocka_unit_test(test_objects_of_4_gib_and_more),
        cmocka_unit_test(test_rows_merged_while_reading_count_their_objects),
        cmocka_unit_test(test_merged_rows_cost_no_row_each),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
