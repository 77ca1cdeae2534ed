/* bench_report.c — `poolscope report`'s engine (scan + metrics) on a
 * synthetic trace: events/s and peak memory at 1x and 10x the length.
 *
 * The trace is written with the writer (synthetic clock): 4 threads of
 * malloc/free churn over a bounded working set (sizes 16 B .. 64 KiB, stacks
 * from a set of 64), decode-step markers, and RSS samples. Each measurement
 * runs in a forked child so its peak RSS (wait4's ru_maxrss) is its own;
 * the median of 3 runs is reported. Memory must not grow with length.
 *
 * Besides the end-to-end figure, the analyzer's own part is measured apart
 * from the reader (whose speed is its own concern):
 *   - the reader alone on the same trace (pst_next until the end), so
 *     "analyzer" = events / (end-to-end seconds - reader seconds);
 *   - the metrics library alone: az_calls/az_alloc/az_free as scan.c makes
 *     them, over the trace's heap events decoded beforehand into memory,
 *     and over a synthetic churn, with the configurations report (reuse and
 *     sites), replay (reuse, no sites) and no reuse tracking use;
 *   - with --sql, `poolscope sql`'s load (az_sql_write) of the 1x trace:
 *     events/s, split into reader time and the rest (metrics + inserts).
 *
 *   bench_report [--quick] [--events N] [--keep DIR] [--sql]
 * N (default 10 M; --quick: 100 k, so the 10x trace has 1 M events and the
 * whole run takes seconds) is the 1x length. Prints markdown `## report`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "poolscope/reader.h"
#include "report.h"
#include "scan.h"
#include "sqlite.h"
#include "poolscope/writer.h"

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

static int write_trace(const char *path, uint64_t n_events)
{
    int err;
    pst_writer_cfg_t cfg = { .pid = 1000, .exe = "/bench/synthetic", .tick_ns = 50, .chunk_bytes = 1 << 20 };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    if (!w) return err;
    enum { THREADS = 4, SET = 4096 };
    uint64_t live[THREADS][SET] = { { 0 } };
    uint32_t stacks[64];
    for (int i = 0; i < 64; i++) {
        uint64_t fr[4] = { 0x400000 + (uint64_t)i * 64, 0x401000 + (uint64_t)(i % 8) * 32, 0x402000, 0x403000 };
        stacks[i] = pst_writer_stack(w, fr, 4);
    }
    uint32_t decode = pst_writer_string(w, "decode");
    uint64_t next_addr = 0x10000000;
    pst_event_t ev;
    for (uint64_t e = 0; e < n_events; e++) {
        uint32_t t = (uint32_t)(e & (THREADS - 1)) + 1;
        if (e % 10000 == 0) {
            PST_EMIT(w, t, (e / 10000) % 2 ? PST_EV_MARK_END : PST_EV_MARK_BEGIN, decode, e / 20000, 0);
            continue;
        }
        if (e % 100000 == 1) { PST_EMIT(w, t, PST_EV_RSS, 100 << 20, 90 << 20, 10 << 20); continue; }
        uint64_t r = rnd();
        uint64_t *slot = &live[t - 1][r % SET];
        memset(&ev, 0, sizeof ev);
        if (*slot) {
            ev.type = PST_EV_FREE;
            ev.f[0] = *slot;
            *slot = 0;
        } else {
            ev.type = PST_EV_MALLOC;
            ev.f[1] = 16u << (r >> 20) % 12;
            /* one address per slot and generation (4 of them): unique while
             * live, recycled as an allocator's would be */
            uint64_t k = (uint64_t)(slot - live[t - 1]);
            ev.f[0] = *slot = next_addr + ((uint64_t)t << 32) + k * 1024 + ((r >> 32) % 4) * 256;
            ev.stack = stacks[(r >> 40) % 64];
        }
        if (pst_writer_event(w, t, &ev)) break;
        /* The interposer writes every stream and a SYNC watermark every
         * 50 ms; at 50 ns per event that is every 1 M events. */
        if (e % 1000000 == 999999 && pst_writer_flush(w)) break;
    }
    return pst_writer_close(w);
}

typedef struct { double secs; long maxrss_kib; uint64_t events; long db_kib; } run_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

enum { RUN_REPORT, RUN_READER, RUN_SQL };

/* One measurement in a forked child (its own peak RSS). */
static int measure(int what, const char *path, run_t *out)
{
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        run_t r = { 0, 0, 0, 0 };
        double a = now_s();
        if (what == RUN_REPORT) {
            az_scan_t *s;
            char msg[256];
            if (az_scan_file(path, NULL, &s, msg, sizeof msg)) _exit(1);
            FILE *devnull = fopen("/dev/null", "w");
            az_report_opts_t o = { .no_symbols = 1 };
            az_report_text(s, &o, devnull);
            fclose(devnull);
            r.events = s->events;
            r.secs = now_s() - a;
            az_scan_free(s);
        } else if (what == RUN_READER) {
            int err;
            pst_reader_t *rd = pst_open(path, &err);
            if (!rd) _exit(1);
            pst_event_t ev;
            while (pst_next(rd, &ev) > 0) r.events++;
            r.secs = now_s() - a;
            pst_close(rd);
        } else {
            char db[600], msg[256];
            snprintf(db, sizeof db, "%s.db", path);
            az_sql_stats_t st;
            int warn;
            if (az_sql_write(path, db, &st, &warn, msg, sizeof msg)) { fprintf(stderr, "sql: %s\n", msg); _exit(1); }
            r.events = st.events;
            r.secs = st.seconds;
            struct stat sb;
            if (stat(db, &sb) == 0) r.db_kib = (long)(sb.st_size / 1024);
            unlink(db);
        }
        if (write(fd[1], &r, sizeof r) != (ssize_t)sizeof r) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    run_t r;
    ssize_t n = read(fd[0], &r, sizeof r);
    close(fd[0]);
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) || n != (ssize_t)sizeof r) return -1;
    r.maxrss_kib = ru.ru_maxrss;
    *out = r;
    return 0;
}

static int cmp_d(const void *a, const void *b)
{
    const run_t *x = a, *y = b;
    return (x->secs > y->secs) - (x->secs < y->secs);
}

/* median of 3 runs */
static int median3(int what, const char *path, run_t *out)
{
    run_t runs[3];
    for (int k = 0; k < 3; k++) if (measure(what, path, &runs[k])) return -1;
    qsort(runs, 3, sizeof runs[0], cmp_d);
    *out = runs[1];
    return 0;
}

/* ---- the metrics library alone ------------------------------------------- */

typedef struct { uint8_t type; uint32_t stack; uint64_t ts, addr, size; } hev_t;   /* type: 0 alloc, 1 free, 2 call only */

/* The 1x trace's heap events, decoded once (at most max of them). */
static hev_t *load_heap_events(const char *path, size_t max, size_t *n)
{
    int err;
    *n = 0;
    pst_reader_t *rd = pst_open(path, &err);
    if (!rd) return NULL;
    hev_t *a = malloc(max * sizeof *a);
    if (!a) { pst_close(rd); return NULL; }
    pst_event_t ev;
    size_t k = 0;
    while (k < max && pst_next(rd, &ev) > 0) {
        if (ev.type == PST_EV_MALLOC) a[k++] = (hev_t){ 0, ev.stack, ev.ts, ev.f[0], ev.f[1] };
        else if (ev.type == PST_EV_FREE) a[k++] = (hev_t){ 1, 0, ev.ts, ev.f[0], 0 };
    }
    pst_close(rd);
    *n = k;
    return a;
}

/* Feed the decoded events as scan.c does: az_calls, then az_alloc / az_free. */
static double run_decoded(const hev_t *a, size_t n, const az_cfg_t *cfg)
{
    int err;
    az_metrics_t *m = az_create(cfg, &err);
    if (!m) return -1;
    double t0 = now_s();
    for (size_t i = 0; i < n; i++) {
        const hev_t *e = &a[i];
        az_calls(m, 1, e->size);
        if (e->type == 0) az_alloc(m, e->ts, e->addr, e->size, az_glibc_usable(e->size), e->size, e->stack);
        else az_free(m, e->ts, e->addr);
    }
    az_finish(m, n ? a[n - 1].ts : 0);
    az_result_t r;
    az_result(m, &r);
    double secs = now_s() - t0;
    az_destroy(m);
    return secs;
}

/* The synthetic churn: 4096 slots, 4 address generations per slot. */
static double run_churn(uint64_t n, const az_cfg_t *cfg)
{
    int err;
    az_metrics_t *m = az_create(cfg, &err);
    if (!m) return -1;
    uint64_t x = 88172645463325252ull, slots[4096] = { 0 };
    double t0 = now_s();
    for (uint64_t e = 0; e < n; e++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint64_t r = x, k = r % 4096;
        if (slots[k]) { az_free(m, e * 50, slots[k]); slots[k] = 0; }
        else {
            slots[k] = 0x10000000 + k * 1024 + ((r >> 32) % 4) * 256;
            uint64_t sz = 16u << (r >> 20) % 12;
            az_alloc(m, e * 50, slots[k], sz, az_glibc_usable(sz), sz, (uint32_t)((r >> 40) % 64) + 1);
        }
        az_calls(m, 1, 0);
    }
    az_finish(m, n * 50);
    double secs = now_s() - t0;
    az_destroy(m);
    return secs;
}

static int cmp_f(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double med3(double v[3]) { qsort(v, 3, sizeof v[0], cmp_f); return v[1]; }

int main(int argc, char **argv)
{
    uint64_t base = 10000000;
    const char *keep = NULL;
    int sql = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) base = 100000;
        else if (!strcmp(argv[i], "--events") && i + 1 < argc) base = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--keep") && i + 1 < argc) keep = argv[++i];
        else if (!strcmp(argv[i], "--sql")) sql = 1;
        else { fprintf(stderr, "usage: bench_report [--quick] [--events N] [--keep DIR] [--sql]\n"); return 2; }
    }
    char dir[256];
    if (keep) snprintf(dir, sizeof dir, "%s", keep);
    else { snprintf(dir, sizeof dir, "/tmp/bench_report.XXXXXX"); if (!mkdtemp(dir)) return 1; }
    printf("## report\n\n`poolscope report` engine (reader + metrics + text report, no symbolization) on a synthetic\n"
           "4-thread malloc/free churn trace written with the writer; median of 3 runs, each in a fresh process\n"
           "(peak RSS from wait4). Target: >= 10 M events/s, memory independent of trace length.\n"
           "`reader` is the reader alone on the same trace (pst_next to the end); `analyzer` is the rest:\n"
           "events / (end-to-end s - reader s).\n\n"
           "| length | events | file MiB | seconds | M events/s | reader s | analyzer M events/s | peak RSS MiB | reader peak RSS MiB |\n"
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    char path1[512] = "";
    for (int mult = 1; mult <= 10; mult *= 10) {
        char path[512];
        snprintf(path, sizeof path, "%s/synthetic-%dx.pst", dir, mult);
        if (mult == 1) snprintf(path1, sizeof path1, "%s", path);
        if (access(path, R_OK) != 0 && write_trace(path, base * (uint64_t)mult)) { fprintf(stderr, "bench_report: writing %s failed\n", path); return 1; }
        run_t rep, rd;
        if (median3(RUN_REPORT, path, &rep) || median3(RUN_READER, path, &rd)) { fprintf(stderr, "bench_report: scan failed\n"); rc = 1; break; }
        FILE *f = fopen(path, "rb");
        double mib = 0;
        if (f) { fseek(f, 0, SEEK_END); mib = (double)ftell(f) / 1048576.0; fclose(f); }
        double own = rep.secs - rd.secs;
        char ownb[32];
        if (own > 0.005 * rep.secs) snprintf(ownb, sizeof ownb, "%.1f", (double)rep.events / own / 1e6);
        else snprintf(ownb, sizeof ownb, "(reader dominates)");
        printf("| %dx | %llu | %.0f | %.2f | %.1f | %.2f | %s | %.1f | %.1f |\n", mult, (unsigned long long)rep.events, mib,
               rep.secs, (double)rep.events / rep.secs / 1e6, rd.secs, ownb, (double)rep.maxrss_kib / 1024.0,
               (double)rd.maxrss_kib / 1024.0);
        fflush(stdout);
    }

    if (!rc && sql) {
        run_t s, rd;
        if (median3(RUN_SQL, path1, &s) || median3(RUN_READER, path1, &rd)) {
            fprintf(stderr, "bench_report: sql failed\n");
            rc = 1;
        } else {
            printf("\n## sql\n\n`poolscope sql` load (az_sql_write: scan + metrics + one row per event and detail rows,\n"
                   "stacks, indexes) of the 1x trace; median of 3, fresh process each. Target: >= 1 M events/s.\n\n"
                   "| events | seconds | M events/s | reader s | rest (metrics + SQLite) M events/s | db MiB | peak RSS MiB |\n"
                   "|---:|---:|---:|---:|---:|---:|---:|\n");
            double rest = s.secs - rd.secs;
            printf("| %llu | %.2f | %.2f | %.2f | %.2f | %.0f | %.1f |\n", (unsigned long long)s.events, s.secs,
                   (double)s.events / s.secs / 1e6, rd.secs, rest > 0 ? (double)s.events / rest / 1e6 : 0.0,
                   (double)s.db_kib / 1024.0, (double)s.maxrss_kib / 1024.0);
        }
        fflush(stdout);
    }

    /* the metrics library alone (no reader) */
    if (!rc) {
        static const char *const names[3] = { "report (reuse + sites)", "replay (reuse, no sites)", "no reuse, no sites" };
        az_cfg_t cfgs[3] = { { 0 }, { .no_sites = 1 }, { .no_reuse = 1, .no_sites = 1 } };
        size_t nd = 0;
        hev_t *dec = load_heap_events(path1, base < 4000000 ? base : 4000000, &nd);
        printf("\n## metrics library alone\n\naz_calls + az_alloc/az_free (no reader, no scan), median of 3 runs:\n"
               "`trace` = the 1x trace's first %zu heap events decoded into memory beforehand, fed as scan.c does;\n"
               "`churn` = %llu events of a synthetic 4096-slot churn (the pre-existing figure).\n\n"
               "| configuration | trace M events/s | ns/event | churn M events/s | ns/event |\n|---|---:|---:|---:|---:|\n",
               nd, (unsigned long long)base);
        for (int c = 0; c < 3; c++) {
            double a[3], b[3];
            for (int k = 0; k < 3; k++) { a[k] = dec ? run_decoded(dec, nd, &cfgs[c]) : -1; b[k] = run_churn(base, &cfgs[c]); }
            double ta = med3(a), tb = med3(b);
            printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", names[c], ta > 0 ? (double)nd / ta / 1e6 : 0.0,
                   ta > 0 ? ta * 1e9 / (double)nd : 0.0, (double)base / tb / 1e6, tb * 1e9 / (double)base);
        }
        free(dec);
    }
    if (!keep) {
        for (int mult = 1; mult <= 10; mult *= 10) {
            char path[512];
            snprintf(path, sizeof path, "%s/synthetic-%dx.pst", dir, mult);
            unlink(path);
        }
        rmdir(dir);
    }
    return rc;
}
