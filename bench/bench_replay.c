/* bench_replay.c — how fast replay simulates, and that its memory does not
 * grow with the trace.
 *
 * A synthetic engine-like trace (forwards of 8 layers, each layer a chain of
 * tensors acquired and released as a decoder block does, sizes varying with
 * a batch that changes per forward) is written with the writer API, flushed
 * with a SYNC every 50 ms of trace time as the interposer does: N events
 * (10 M by default, 1 M with --quick) and 10 N. Each policy replays the N
 * trace alone, in a child process (so its peak RSS is its own): requests/s
 * inside the policy (events_per_s of the report) and end to end (trace
 * events / wall time, decoding included). Then pool+arena+ideal replay the N
 * and 10 N traces and their peak RSS is compared. Each trace is written in
 * a child too, whose peak RSS (the writer's) is printed apart. Markdown on
 * stdout.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "replay.h"
#include "poolscope/writer.h"

static int write_trace(const char *path, uint64_t n_events)
{
    pst_writer_cfg_t cfg = { .pid = 1, .exe = "/bench", .tick_ns = 200 }   /* 5 M events/s: a busy program */;
    int err = 0;
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    if (!w) return err;
    uint64_t ev = 0, id = 1, fwd = 0, x = 88172645463325252ull, next_sync = 250000;
    static const uint64_t dims[6] = { 1, 1, 1, 1, 3, 3 };   /* xb q k v h1 h3 in units of dim */
    while (ev < n_events) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint64_t batch = 1 + x % 8, dim = 512;
        pst_event_t m;
        memset(&m, 0, sizeof m);
        m.type = PST_EV_MARK_BEGIN;
        m.str = "forward";
        m.f[1] = fwd;
        pst_writer_event(w, 1, &m);
        uint64_t resid = id++;
        PST_EMIT(w, 1, PST_EV_TENSOR_ACQUIRE, resid, 0, 0, batch * dim, 4 * batch * dim);
        ev += 2;
        for (int l = 0; l < 8; l++) {
            uint64_t prev = 0;
            for (int t = 0; t < 6; t++) {
                uint64_t n = batch * dim * dims[t];
                PST_EMIT(w, 1, PST_EV_TENSOR_ACQUIRE, id, 0, 0, n, 4 * n);
                if (prev) PST_EMIT(w, 1, PST_EV_TENSOR_RELEASE, prev);
                prev = id++;
                ev += 2;
            }
            PST_EMIT(w, 1, PST_EV_TENSOR_RELEASE, prev);
            ev++;
        }
        PST_EMIT(w, 1, PST_EV_TENSOR_RELEASE, resid);
        m.type = PST_EV_MARK_END;
        pst_writer_event(w, 1, &m);
        ev += 2;
        fwd++;
        /* every stream out and a SYNC every 50 ms of trace time, as the
         * interposer's flush rounds do: without SYNC chunks the reader
         * must hold a whole window (1 s of trace time, 5 M events here) */
        if (ev >= next_sync) {
            pst_writer_flush(w);
            next_sync = ev + 250000;
        }
    }
    return pst_writer_close(w);
}

typedef struct out {
    double eps, e2e;
    long maxrss_kib;
    int ok;
} out_t;

/* The trace written in a child, so that the writer's memory is not in the
 * replay children's peak RSS (a child forked from a parent that wrote a
 * 100 M-event trace starts with that parent's pages resident). *rss_kib:
 * the writer's own peak. */
static int write_in_child(const char *path, uint64_t n_events, long *rss_kib)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) _exit(write_trace(path, n_events) ? 1 : 0);
    int st = 0;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *rss_kib = ru.ru_maxrss;
    return 0;
}

/* Replay in a child; results come back through a pipe. */
static out_t run_child(const char *path, const char *policies)
{
    out_t o;
    memset(&o, 0, sizeof o);
    int fd[2];
    if (pipe(fd)) return o;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        rp_config_t cfg = rp_config_default();
        char msg[256];
        rp_policy_parse(policies, &cfg.policies, msg, sizeof msg);
        rp_report_t *r = NULL;
        out_t c;
        memset(&c, 0, sizeof c);
        if (rp_run(path, &cfg, &r, msg, sizeof msg) == 0) {
            const rp_trace_info_t *in = rp_report_info(r);
            c.eps = rp_report_result(r, 0)->events_per_s;
            c.e2e = (double)in->events / in->seconds;
            c.ok = 1;
        } else {
            fprintf(stderr, "bench_replay: %s\n", msg);
        }
        if (write(fd[1], &c, sizeof c) != (ssize_t)sizeof c) _exit(1);
        _exit(0);
    }
    close(fd[1]);
    if (read(fd[0], &o, sizeof o) != (ssize_t)sizeof o) o.ok = 0;
    close(fd[0]);
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) == pid) o.maxrss_kib = ru.ru_maxrss;
    return o;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    uint64_t n = quick ? 1000000 : 10000000;
    char p1[] = "/tmp/bench_replay1.XXXXXX", p10[] = "/tmp/bench_replay10.XXXXXX";
    int f1 = mkstemp(p1), f10 = mkstemp(p10);
    if (f1 < 0 || f10 < 0) return 1;
    close(f1);
    close(f10);
    long w1 = -1, w10 = -1;
    if (write_in_child(p1, n, &w1) || write_in_child(p10, 10 * n, &w10)) {
        fprintf(stderr, "bench_replay: cannot write the traces\n");
        unlink(p1);
        unlink(p10);
        return 1;
    }
    printf("## replay\n\n");
    printf("Synthetic tensor trace of %.0f M events (forwards of 8 layers, 6-tensor chains), "
           "one policy per run, one core.\n\n", (double)n / 1e6);
    printf("| policy | M requests/s in the policy | M events/s end to end | peak RSS |\n");
    printf("|---|---:|---:|---:|\n");
    static const char *const pols[] = { "pool", "arena", "ideal", "malloc" };
    int rc = 0;
    for (size_t i = 0; i < sizeof pols / sizeof pols[0]; i++) {
        out_t o = run_child(p1, pols[i]);
        if (!o.ok) { rc = 1; continue; }
        printf("| %s | %.1f | %.1f | %.1f MiB |\n", pols[i], o.eps / 1e6, o.e2e / 1e6,
               (double)o.maxrss_kib / 1024);
    }
    out_t a = run_child(p1, "pool,arena,ideal"), b = run_child(p10, "pool,arena,ideal");
    printf("\nReplay memory (pool,arena,ideal together): %.0f M events %.1f MiB peak RSS, "
           "%.0f M events %.1f MiB (ratio %.2f).\n\n", (double)n / 1e6,
           (double)a.maxrss_kib / 1024, 10 * (double)n / 1e6, (double)b.maxrss_kib / 1024,
           a.maxrss_kib ? (double)b.maxrss_kib / (double)a.maxrss_kib : 0);
    printf("The writer's own peak RSS (each trace written in a child of its own): "
           "%.0f M events %.1f MiB, %.0f M events %.1f MiB.\n\n", (double)n / 1e6,
           (double)w1 / 1024, 10 * (double)n / 1e6, (double)w10 / 1024);
    if (!a.ok || !b.ok) rc = 1;
    unlink(p1);
    unlink(p10);
    return rc;
}
