/* bench_report.c — `poolscope report`'s engine (scan + metrics) on a
 * synthetic trace: events/s and peak memory at 1x and 10x the length.
 *
 * The trace is written with the writer (synthetic clock): 4 threads of
 * malloc/free churn over a bounded working set (sizes 16 B .. 64 KiB, stacks
 * from a set of 64), decode-step markers, and RSS samples. Each measurement
 * runs in a forked child so its peak RSS (wait4's ru_maxrss) is its own;
 * the median of 3 runs is reported. Memory must not grow with length.
 *
 *   bench_report [--quick] [--events N] [--keep DIR]
 * Prints a markdown `## report` section.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "report.h"
#include "scan.h"
#include "writer.h"

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
    }
    return pst_writer_close(w);
}

typedef struct { double secs; long maxrss_kib; uint64_t events; } run_t;

static int measure(const char *path, run_t *out)
{
    int fd[2];
    if (pipe(fd)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        az_scan_t *s;
        char msg[256];
        if (az_scan_file(path, NULL, &s, msg, sizeof msg)) _exit(1);
        FILE *devnull = fopen("/dev/null", "w");
        az_report_opts_t o = { .no_symbols = 1 };
        az_report_text(s, &o, devnull);
        fclose(devnull);
        clock_gettime(CLOCK_MONOTONIC, &b);
        run_t r = { (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9, 0, s->events };
        az_scan_free(s);
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

int main(int argc, char **argv)
{
    uint64_t base = 10000000;
    const char *keep = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick")) base = 1000000;
        else if (!strcmp(argv[i], "--events") && i + 1 < argc) base = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--keep") && i + 1 < argc) keep = argv[++i];
    }
    char dir[256];
    if (keep) snprintf(dir, sizeof dir, "%s", keep);
    else { snprintf(dir, sizeof dir, "/tmp/bench_report.XXXXXX"); if (!mkdtemp(dir)) return 1; }
    printf("## report\n\n`poolscope report` engine (reader + metrics + text report, no symbolization) on a synthetic\n"
           "4-thread malloc/free churn trace written with the writer; median of 3 runs, each in a fresh process\n"
           "(peak RSS from wait4). Target: >= 10 M events/s, memory independent of trace length.\n\n"
           "| length | events | file MiB | seconds | M events/s | peak RSS MiB |\n|---|---:|---:|---:|---:|---:|\n");
    int rc = 0;
    for (int mult = 1; mult <= 10; mult *= 10) {
        char path[512];
        snprintf(path, sizeof path, "%s/synthetic-%dx.pst", dir, mult);
        if (access(path, R_OK) != 0 && write_trace(path, base * (uint64_t)mult)) { fprintf(stderr, "bench_report: writing %s failed\n", path); return 1; }
        run_t runs[3];
        for (int k = 0; k < 3; k++) if (measure(path, &runs[k])) { fprintf(stderr, "bench_report: scan failed\n"); rc = 1; }
        if (rc) break;
        qsort(runs, 3, sizeof runs[0], cmp_d);
        FILE *f = fopen(path, "rb");
        double mib = 0;
        if (f) { fseek(f, 0, SEEK_END); mib = (double)ftell(f) / 1048576.0; fclose(f); }
        printf("| %dx | %llu | %.0f | %.2f | %.1f | %.1f |\n", mult, (unsigned long long)runs[1].events, mib,
               runs[1].secs, (double)runs[1].events / runs[1].secs / 1e6, (double)runs[1].maxrss_kib / 1024.0);
        fflush(stdout);
        if (!keep) unlink(path);
    }
    if (!keep) rmdir(dir);

    /* the metrics library alone (no reader): the same churn fed to az_alloc/az_free */
    {
        int err;
        az_metrics_t *m = az_create(NULL, &err);
        uint64_t n = base, slots[4096] = { 0 };
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        for (uint64_t e = 0; e < n; e++) {
            uint64_t r = rnd(), k = r % 4096;
            if (slots[k]) { az_free(m, e * 50, slots[k]); slots[k] = 0; }
            else {
                slots[k] = 0x10000000 + k * 1024 + ((r >> 32) % 4) * 256;
                uint64_t sz = 16u << (r >> 20) % 12;
                az_alloc(m, e * 50, slots[k], sz, az_glibc_usable(sz), sz, (uint32_t)((r >> 40) % 64) + 1);
            }
            az_calls(m, 1, 0);
        }
        az_finish(m, n * 50);
        clock_gettime(CLOCK_MONOTONIC, &b);
        double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
        printf("\nThe metrics library alone (az_alloc/az_free/az_calls with reuse distance and sites, no reader):"
               " %llu events in %.2f s = **%.1f M events/s**.\n", (unsigned long long)n, secs, (double)n / secs / 1e6);
        az_destroy(m);
    }
    return rc;
}
