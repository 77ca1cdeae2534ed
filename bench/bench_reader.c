/* bench_reader.c — the streaming reader (pst_open + pst_next over every
 * event) on synthetic traces written with the writer.
 *
 * Workload: malloc/free churn as an interposed multi-threaded program
 * produces it. Each thread has its own arena (a region of addresses) with
 * per-size-class LIFO free lists, so addresses are reused the way glibc's
 * tcache reuses them; sizes follow a skewed mix (mostly 16..256 B, some up
 * to 4 KiB, a few up to 64 KiB); about 2% of the objects are handed to
 * another thread and freed there (their address then comes back from that
 * thread's free list, so the merge sees cross-thread reuse); a few calloc
 * and realloc. About 100 objects are live per thread. The synthetic clock
 * (tick_ns) gives TS records every 64 events per stream, as the interposer
 * writes them; 64 KiB chunks.
 *
 * Traces: 4 streams and 1 stream at N events (10 M; 1 M with --quick), read
 * with the default 1 s window and with a 20 ms window, plus the 4-stream
 * trace at 10x the length to show that peak memory does not grow with it,
 * and that trace as a minor-1 writer would have written it (times not
 * causal across streams: the merge waits for frees it cannot place).
 * Every measurement runs in a forked child: its wall time and its own peak
 * RSS (wait4's ru_maxrss). Rates are medians of 5 runs (the 10x row: of 1).
 *
 *   bench_reader [--quick] [--events N] [--runs R] [--no-10x] [--keep]
 * Prints a markdown `## reader` section. --keep leaves the trace files in
 * $TMPDIR (or /tmp) and names them on stderr.
 *
 *   bench_reader --read FILE [--window NS]
 *   bench_reader --hash FILE [--window NS]
 *   bench_reader --write FILE --events N [--streams S] [--minor M]
 * Tools for changing the reader. --read: pst_next over every event of one
 * trace and nothing else (what callgrind measures per event). --hash: the
 * order hash, one line: events, a 64-bit hash over every field of every
 * event in the order pst_next hands them out (type, stream, tid, seq, ts,
 * stack, the layout's fields, ids, payload, string, versions), and the
 * merge's counts (unordered, late, unknown_frees, ...): a reader change that
 * must keep the order prints the same line before and after. --write: the
 * synthetic trace of the benchmark, alone.
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

#include "poolscope/reader.h"
#include "poolscope/writer.h"

/* ---- workload ------------------------------------------------------------- */

static uint64_t rs = 0x243F6A8885A308D3ull;
static uint64_t rnd(void)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return rs;
}

enum { MAXT = 8, CLASSES = 64, LIVE_TARGET = 100, LIVE_MAX = 256, FREE_MAX = 4096 };

typedef struct obj { uint64_t addr, size; } obj_t;

typedef struct arena {
    uint64_t bump;                          /* next fresh address */
    uint64_t fl[CLASSES][64];               /* per-class LIFO of free addresses */
    uint32_t nfl[CLASSES];
    obj_t    live[LIVE_MAX];
    uint32_t nlive;
} arena_t;

static unsigned size_class(uint64_t size)
{
    /* 16-byte classes up to 512, then powers of two */
    if (size <= 512) return (unsigned)((size + 15) / 16);                 /* 1..32 */
    unsigned c = 32;
    uint64_t s = 512;
    while (s < size && c < CLASSES - 1) { s *= 2; c++; }
    return c;
}

static uint64_t class_bytes(unsigned c)
{
    return c <= 32 ? (uint64_t)c * 16 : (uint64_t)512 << (c - 32);
}

static uint64_t pick_size(void)
{
    uint64_t r = rnd() % 1000;
    if (r < 700) return 16 + rnd() % 241;          /* 16..256 */
    if (r < 960) return 257 + rnd() % 3840;        /* ..4 KiB */
    return 4097 + rnd() % 61440;                   /* ..64 KiB */
}

static uint64_t arena_get(arena_t *a, uint64_t size)
{
    unsigned c = size_class(size);
    if (a->nfl[c]) return a->fl[c][--a->nfl[c]];
    uint64_t addr = a->bump;
    a->bump += class_bytes(c) + 16;                 /* chunk header */
    return addr;
}

static void arena_put(arena_t *a, uint64_t addr, uint64_t size)
{
    unsigned c = size_class(size);
    if (a->nfl[c] < 64) a->fl[c][a->nfl[c]++] = addr;
}

static int write_trace(const char *path, uint64_t n_events, unsigned n_streams, unsigned minor)
{
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 2000, .exe = "/bench/churn", .tick_ns = 200, .minor = minor };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    if (!w) return err;
    arena_t *ar = calloc(n_streams, sizeof *ar);
    if (!ar) { pst_writer_abandon(w); return -1; }
    for (unsigned t = 0; t < n_streams; t++)
        ar[t].bump = (t == 0 ? 0x55d0c0de0000ull : 0x7f3a00000000ull + (uint64_t)t * 0x4000000ull) + 16;
    rs = 0x243F6A8885A308D3ull ^ n_streams;
    uint64_t n = 0;
    n_events -= n_streams;                                  /* each stream's THREAD_START */
    uint64_t flushed_at = 0;
    while (n < n_events) {
        /* Like the interposer: every stream out plus a SYNC watermark every
         * 50 ms of trace time (250 k events at 200 ns each). */
        if (n - flushed_at >= 250000) {
            if (pst_writer_flush(w)) break;
            flushed_at = n;
        }
        unsigned t = (unsigned)(rnd() % n_streams);
        arena_t *a = &ar[t];
        uint64_t r = rnd() % 1000;
        int do_alloc = a->nlive < LIVE_TARGET / 2 || (a->nlive < LIVE_MAX && r < 500);
        if (do_alloc) {
            uint64_t size = pick_size(), addr = arena_get(a, size);
            if (r < 30) PST_EMIT(w, t + 1, PST_EV_CALLOC, addr, 1, size);
            else PST_EMIT(w, t + 1, PST_EV_MALLOC, addr, size);
            a->live[a->nlive++] = (obj_t){ addr, size };
            n++;
            continue;
        }
        uint32_t i = (uint32_t)(rnd() % a->nlive);
        obj_t o = a->live[i];
        if (r < 530) {                                      /* realloc in place or moved */
            uint64_t ns = pick_size(), na = size_class(ns) == size_class(o.size) ? o.addr : arena_get(a, ns);
            if (na != o.addr) arena_put(a, o.addr, o.size);
            PST_EMIT(w, t + 1, PST_EV_REALLOC, o.addr, na, ns);
            a->live[i] = (obj_t){ na, ns };
            n++;
            continue;
        }
        a->live[i] = a->live[--a->nlive];
        if (n_streams > 1 && r > 980) {                     /* hand it to another thread */
            arena_t *b = &ar[(t + 1 + rnd() % (n_streams - 1)) % n_streams];
            if (b->nlive < LIVE_MAX) { b->live[b->nlive++] = o; continue; }
        }
        PST_EMIT(w, t + 1, PST_EV_FREE, o.addr);
        arena_put(a, o.addr, o.size);
        n++;
    }
    free(ar);
    return pst_writer_close(w);
}

/* ---- measurement ---------------------------------------------------------- */

typedef struct result {
    double   secs;
    uint64_t events;
    long     maxrss_kib;
    uint64_t causal, pool, unordered, late, peak_queued;
    int      ok;
} result_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* One pst_open + pst_next loop in a forked child. */
static result_t measure(const char *path, uint64_t window_ns)
{
    result_t res = { 0 };
    int pfd[2];
    if (pipe(pfd)) return res;
    pid_t pid = fork();
    if (pid < 0) { close(pfd[0]); close(pfd[1]); return res; }
    if (pid == 0) {
        close(pfd[0]);
        result_t c = { 0 };
        int err = 0;
        double t0 = now_s();
        pst_reader_t *r = pst_open(path, &err);
        if (r) {
            pst_reader_set_window(r, window_ns);
            pst_event_t ev;
            uint64_t n = 0, sink = 0;
            int rc;
            while ((rc = pst_next(r, &ev)) > 0) { n++; sink += ev.f[0]; }
            c.secs = now_s() - t0;
            const pst_status_t *st = pst_status(r);
            c.events = n;
            c.causal = st->causal_reordered;
            c.pool = st->pool_reordered;
            c.unordered = st->unordered;
            c.late = st->late;
            c.peak_queued = st->peak_queued;
            c.ok = rc == 0 && st->end_seen && !st->corrupt && !st->truncated && sink != 1;
            pst_close(r);
        }
        ssize_t k = write(pfd[1], &c, sizeof c);
        _exit(k == (ssize_t)sizeof c ? 0 : 1);
    }
    close(pfd[1]);
    ssize_t k = read(pfd[0], &res, sizeof res);
    close(pfd[0]);
    int status = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    wait4(pid, &status, 0, &ru);
    if (k != (ssize_t)sizeof res || !WIFEXITED(status) || WEXITSTATUS(status) != 0) res.ok = 0;
    res.maxrss_kib = ru.ru_maxrss;
    return res;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static int cmp_l(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return x < y ? -1 : x > y;
}

typedef struct row {
    char     name[96];
    uint64_t events;
    double   meps;            /* median M events/s */
    double   lo, hi;          /* min, max */
    long     rss_kib;         /* median peak RSS */
    result_t last;
    int      ok;
} row_t;

static row_t run(const char *name, const char *path, uint64_t window_ns, int runs)
{
    row_t row;
    memset(&row, 0, sizeof row);
    snprintf(row.name, sizeof row.name, "%s", name);
    double rate[16];
    long rss[16];
    row.ok = 1;
    for (int i = 0; i < runs; i++) {
        result_t r = measure(path, window_ns);
        if (!r.ok || r.secs <= 0) { row.ok = 0; break; }
        rate[i] = (double)r.events / r.secs / 1e6;
        rss[i] = r.maxrss_kib;
        row.events = r.events;
        row.last = r;
    }
    if (!row.ok) return row;
    qsort(rate, (size_t)runs, sizeof *rate, cmp_d);
    qsort(rss, (size_t)runs, sizeof *rss, cmp_l);
    row.meps = rate[runs / 2];
    row.lo = rate[0];
    row.hi = rate[runs - 1];
    row.rss_kib = rss[runs / 2];
    return row;
}

/* ---- order hash --------------------------------------------------------------- */

/* FNV-1a over 64-bit words: order-sensitive, every bit of every word counts. */
static uint64_t h64(uint64_t h, uint64_t v)
{
    for (int i = 0; i < 8; i++) { h ^= (v >> (8 * i)) & 0xff; h *= 0x100000001b3ull; }
    return h;
}

static int read_one(const char *path, uint64_t window_ns, int hash)
{
    int err = 0;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) { fprintf(stderr, "bench_reader: cannot open %s (%d)\n", path, err); return 1; }
    if (window_ns) pst_reader_set_window(r, window_ns);
    pst_event_t ev;
    uint64_t n = 0, h = 0xcbf29ce484222325ull, sink = 0;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {
        n++;
        if (!hash) { sink += ev.f[0]; continue; }
        h = h64(h, ev.type);
        h = h64(h, (uint64_t)ev.stream << 32 | ev.tid);
        h = h64(h, ev.seq);
        h = h64(h, ev.ts);
        h = h64(h, ev.stack);
        const char *lay = pst_event_layout(ev.type);
        size_t nf = lay ? strlen(lay) : 0;
        for (size_t i = 0; i < nf; i++) h = h64(h, ev.f[i]);
        h = h64(h, ev.n_ids);
        for (uint32_t i = 0; i < ev.n_ids; i++) h = h64(h, ev.ids[i]);
        h = h64(h, ev.n_payload);
        for (uint32_t i = 0; i < ev.n_payload; i++) h = h64(h, (uint64_t)ev.payload[i]);
        if (ev.str) for (const char *c = ev.str; *c; c++) h = h64(h, (uint8_t)*c);
        h = h64(h, ev.str != NULL);
        h = h64(h, ev.n_ver);
        for (uint32_t i = 0; i < ev.n_ver && i < 2; i++) h = h64(h, ev.ver[i]);
    }
    const pst_status_t *st = pst_status(r);
    if (hash)
        printf("events %llu hash %016llx rc %d unordered %llu late %llu unknown_frees %llu causal_reordered %llu "
               "pool_reordered %llu pool_unordered %llu ver_gaps %llu peak_queued %llu lost %llu corrupt %d truncated %d\n",
               (unsigned long long)n, (unsigned long long)h, rc, (unsigned long long)st->unordered,
               (unsigned long long)st->late, (unsigned long long)st->unknown_frees,
               (unsigned long long)st->causal_reordered, (unsigned long long)st->pool_reordered,
               (unsigned long long)st->pool_unordered, (unsigned long long)st->ver_gaps,
               (unsigned long long)st->peak_queued, (unsigned long long)st->lost, st->corrupt, st->truncated);
    else
        printf("events %llu rc %d (%llu)\n", (unsigned long long)n, rc, (unsigned long long)(sink & 1));
    pst_close(r);
    return rc < 0;
}

static long self_rss_kib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

int main(int argc, char **argv)
{
    uint64_t n = 10000000;
    int runs = 5, ten = 1, keep = 0, mode = 0;
    unsigned streams = 4, minor = 0;
    const char *file = NULL;
    uint64_t window = 0;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "--read") || !strcmp(argv[i], "--hash") || !strcmp(argv[i], "--write")) && i + 1 < argc) {
            mode = argv[i][2];
            file = argv[++i];
        }
        else if (!strcmp(argv[i], "--window") && i + 1 < argc) window = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--streams") && i + 1 < argc) streams = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--minor") && i + 1 < argc) minor = (unsigned)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--quick")) n = 1000000;
        else if (!strcmp(argv[i], "--events") && i + 1 < argc) n = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--runs") && i + 1 < argc) runs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-10x")) ten = 0;
        else if (!strcmp(argv[i], "--keep")) keep = 1;
        else {
            fprintf(stderr, "usage: bench_reader [--quick] [--events N] [--runs R] [--no-10x] [--keep]\n"
                            "       bench_reader --read|--hash FILE [--window NS]\n"
                            "       bench_reader --write FILE --events N [--streams S] [--minor M]\n");
            return 2;
        }
    }
    if (mode == 'r' || mode == 'h') return read_one(file, window, mode == 'h');
    if (mode == 'w') {
        if (streams < 1 || streams > MAXT) return 2;
        return write_trace(file, n, streams, minor) ? 1 : 0;
    }
    if (runs < 1) runs = 1;
    if (runs > 15) runs = 15;
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    char p4[512], p1[512], p40[512], p41[512];
    snprintf(p4, sizeof p4, "%s/bench_reader_4_XXXXXX", tmp);
    snprintf(p1, sizeof p1, "%s/bench_reader_1_XXXXXX", tmp);
    snprintf(p40, sizeof p40, "%s/bench_reader_40_XXXXXX", tmp);
    snprintf(p41, sizeof p41, "%s/bench_reader_41_XXXXXX", tmp);
    int fds[4] = { mkstemp(p4), mkstemp(p1), ten ? mkstemp(p40) : -1, ten ? mkstemp(p41) : -1 };
    for (int i = 0; i < 4; i++) {
        if (i >= 2 && !ten) break;
        if (fds[i] < 0) { perror("bench_reader: mkstemp"); return 1; }
        close(fds[i]);
    }
    int rc = 0;
    if (write_trace(p4, n, 4, 0) || write_trace(p1, n, 1, 0) ||
        (ten && (write_trace(p40, n * 10, 4, 0) || write_trace(p41, n * 10, 4, 1)))) {
        fprintf(stderr, "bench_reader: writing the traces failed\n");
        rc = 1;
        goto out;
    }
    row_t rows[7];
    int nr = 0;
    rows[nr++] = run("4 streams, 1 s window", p4, PST_DEFAULT_WINDOW_NS, runs);
    rows[nr++] = run("4 streams, 20 ms window", p4, 20000000, runs);
    rows[nr++] = run("1 stream, 1 s window", p1, PST_DEFAULT_WINDOW_NS, runs);
    rows[nr++] = run("1 stream, 20 ms window", p1, 20000000, runs);
    if (ten) {
        rows[nr++] = run("4 streams, 1 s window, 10x length", p40, PST_DEFAULT_WINDOW_NS, 1);
        rows[nr++] = run("4 streams, 20 ms window, 10x length", p40, 20000000, 1);
        /* times not causal (as minor-1 writers made them): allocations whose
         * free never comes wait for it, bounded by the SYNC rounds */
        rows[nr++] = run("4 streams, 1 s window, 10x length, format 1.1", p41, PST_DEFAULT_WINDOW_NS, 1);
    }

    printf("## reader\n\n");
    printf("`pst_open` + `pst_next` over every event of a synthetic trace (writer, synthetic clock "
           "200 ns/event, TS every 64 events per stream, 64 KiB chunks): malloc/free/realloc/calloc "
           "churn, ~100 live objects per stream, ~2%% of objects freed by another stream. "
           "Each run in a forked child; median of %d runs (10x rows: 1 run); peak RSS is the child's "
           "ru_maxrss (the parent, %ld KiB at fork, is included).\n\n",
           runs, self_rss_kib());
    printf("| trace | events | M events/s | peak RSS MiB |\n|---|---:|---:|---:|\n");
    for (int i = 0; i < nr; i++) {
        if (!rows[i].ok) { printf("| %s | failed | | |\n", rows[i].name); rc = 1; continue; }
        printf("| %s | %llu | %.1f | %.1f |\n", rows[i].name, (unsigned long long)rows[i].events,
               rows[i].meps, (double)rows[i].rss_kib / 1024.0);
    }
    printf("\n");
    for (int i = 0; i < nr; i++) {
        if (!rows[i].ok) continue;
        const result_t *r = &rows[i].last;
        printf("- %s: min %.1f, max %.1f M events/s; peak queued %llu, causal_reordered %llu, "
               "unordered %llu, late %llu\n",
               rows[i].name, rows[i].lo, rows[i].hi, (unsigned long long)r->peak_queued,
               (unsigned long long)r->causal, (unsigned long long)r->unordered,
               (unsigned long long)r->late);
    }
out:
    if (keep) {
        fprintf(stderr, "bench_reader: kept %s %s %s %s\n", p4, p1, ten ? p40 : "", ten ? p41 : "");
        return rc;
    }
    unlink(p4);
    unlink(p1);
    if (ten) { unlink(p40); unlink(p41); }
    return rc;
}
