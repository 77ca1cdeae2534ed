/* bench_engine.c — reference engine throughput, printed as markdown.
 *
 *   bench_engine [--quick]
 *
 * 1. The bandwidth limit: batch-1 decode, one thread, on a llama2.c
 *    checkpoint of the 1B shape (dim 1024, 16 layers: 953 MB of weights,
 *    beyond the last-level cache) that this program writes with the
 *    engine's own writer and loads three ways (2 MiB pages, 4 KiB pages,
 *    the file mapped). Each round runs, for each of the three, a read loop
 *    over the very bytes a decode step streams and then a decode run; the
 *    headline is decode tokens per wall-clock second, as a median over the
 *    rounds, and its effective GB/s against the read loop's (target 80%).
 * 2. Decode tokens/s at batch 1 and batch 8 on the 15M and 42M shapes (in
 *    cache here), with a read pass next to each run (target: batch 8 >= 3x).
 * 3. --alloc pool vs malloc vs arena on the same workload, interleaved.
 * Wall-clock time everywhere (per CPU-second figures overstate throughput on
 * a loaded machine); medians with (min-max); configurations compared in one
 * table are interleaved round by round, so drift on a shared machine hits
 * them alike.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine.h"
#include "kernels.h"
#include "model.h"
#include "workload.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
/* ---- memory bandwidth --------------------------------------------------------- */

static volatile float sink;

#if defined(__x86_64__)
#include <immintrin.h>
#define BW_AVX __attribute__((target("avx2")))
/* The read loops, over [a, a + n) floats (any alignment). Three ways to read,
 * because which one the machine streams fastest varies: hardware prefetch
 * alone with 4 independent sums; one dependent sum with a software prefetch
 * 2 KiB ahead; the same paced by a multiply. The bandwidth is the best of
 * the three in each round: the figure the engine is held to. */
BW_AVX static float read_plain(const float *a, size_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_add_ps(s0, _mm256_loadu_ps(a + i));
        s1 = _mm256_add_ps(s1, _mm256_loadu_ps(a + i + 8));
        s2 = _mm256_add_ps(s2, _mm256_loadu_ps(a + i + 16));
        s3 = _mm256_add_ps(s3, _mm256_loadu_ps(a + i + 24));
    }
    float l[8];
    _mm256_storeu_ps(l, _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
    for (; i < n; i++) l[0] += a[i];
    return l[0] + l[7];
}
/* One dependent sum with a multiply in the chain: fewer loads in flight,
 * and on this VM the fastest way to read memory (demand loads that run
 * ahead of the prefetches compete with them for the line fill buffers). */
BW_AVX static float read_paced(const float *a, size_t n)
{
    __m256 s = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(a + i + 512), _MM_HINT_T0);
        s = _mm256_add_ps(s, _mm256_loadu_ps(a + i));
        s = _mm256_add_ps(s, _mm256_loadu_ps(a + i + 8));
        s = _mm256_mul_ps(s, s);
    }
    float l[8];
    _mm256_storeu_ps(l, s);
    for (; i < n; i++) l[0] += a[i];
    return l[0] + l[7];
}
BW_AVX static float read_prefetch1(const float *a, size_t n)
{
    __m256 s = _mm256_setzero_ps();
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        _mm_prefetch((const char *)(a + i + 512), _MM_HINT_T0);
        s = _mm256_add_ps(s, _mm256_loadu_ps(a + i));
        s = _mm256_add_ps(s, _mm256_loadu_ps(a + i + 8));
    }
    float l[8];
    _mm256_storeu_ps(l, s);
    for (; i < n; i++) l[0] += a[i];
    return l[0] + l[7];
}
#endif

static float read_scalar(const float *a, size_t n)
{
    float s = 0;
    for (size_t i = 0; i < n; i += 16) s += a[i];
    return s;
}

#define N_READ 3
static const char *const read_names[N_READ] = { "4 sums", "1 sum + prefetch", "paced" };

/* One pass of read loop `k` over the regions (pointer, floats); seconds. */
static double read_pass(int k, const float *const *reg, const size_t *len, int nreg)
{
    double t0 = now();
    for (int r = 0; r < nreg; r++) {
#if defined(__x86_64__)
        if (re_k_simd()) {
            sink = k == 0 ? read_plain(reg[r], len[r]) : k == 1 ? read_prefetch1(reg[r], len[r])
                                                                 : read_paced(reg[r], len[r]);
            continue;
        }
#endif
        sink = read_scalar(reg[r], len[r]);
    }
    return now() - t0;
}

/* The memory a batch-1 decode step streams, as regions of m's own weight
 * memory: the layers with their norms (contiguous), and the classifier. */
static int stream_regions(const re_model_t *m, const float **reg, size_t *len)
{
    const re_shape_t *s = &m->shape;
    size_t V = (size_t)s->vocab_size, D = (size_t)s->dim;
    reg[0] = m->w.rms_att;
    len[0] = (size_t)(m->w.rms_final + D - m->w.rms_att);
    reg[1] = m->w.wcls;
    len[1] = V * D;
    return 2;
}

/* Best read bandwidth over the regions, GB/s (bytes / wall seconds): each
 * loop once, the fastest kept; *which names it. */
static double read_gbs(const float *const *reg, const size_t *len, int nreg, int *which)
{
    double bytes = 0, best_gbs = 0;
    for (int r = 0; r < nreg; r++) bytes += (double)len[r] * sizeof(float);
    for (int k = 0; k < N_READ; k++) {
        double g = bytes / read_pass(k, reg, len, nreg) / 1e9;
        if (g > best_gbs) { best_gbs = g; *which = k; }
    }
    return best_gbs;
}

/* ---- engine runs ---------------------------------------------------------------- */

typedef struct {
    double decode_wall_tps, prefill_tps;      /* tokens per wall-clock second */
    double seconds;                           /* the whole run, wall clock */
    uint64_t decode_steps;
} run_t;

static int run(const re_model_t *m, int batch, int n_req, int prompt, int gen, re_alloc_mode_t mode,
               int threads, run_t *out)
{
    re_engine_config_t c = re_engine_config_default();
    c.max_batch = batch;
    c.alloc.mode = mode;
    c.threads = threads;
    int err;
    char msg[256];
    re_engine_t *e = re_engine_create(m, &c, &err, msg, sizeof msg);
    if (!e) { fprintf(stderr, "bench_engine: %s\n", msg); return -1; }
    int32_t *p = malloc((size_t)prompt * sizeof *p);
    for (int i = 0; i < n_req; i++) {
        re_workload_prompt(1, i, m->shape.vocab_size, p, prompt);
        if (re_engine_add(e, i, p, prompt, gen, msg, sizeof msg) < 0) {
            fprintf(stderr, "bench_engine: %s\n", msg);
            free(p);
            re_engine_destroy(e);
            return -1;
        }
    }
    free(p);
    double t0 = now();
    int rc = re_engine_run(e);
    double t1 = now();
    re_engine_stats_t st;
    re_engine_stats(e, &st);
    out->prefill_tps = st.prefill_seconds > 0 ? (double)st.prefill_tokens / st.prefill_seconds : 0;
    out->decode_wall_tps = st.decode_seconds > 0 ? (double)st.decode_tokens / st.decode_seconds : 0;
    out->seconds = t1 - t0;
    out->decode_steps = st.decode_steps;
    re_engine_destroy(e);
    return rc;
}

typedef struct {
    const char *name;
    const char *spec;
} shape_t;

static void spread(double *v, int n, double *med, double *lo, double *hi)
{
    *med = median(v, n);   /* sorts v */
    *lo = v[0];
    *hi = v[n - 1];
}

/* ---- 1. batch-1 decode against the read loop, a checkpoint beyond the cache -------- */

#define N_MEM 3

static int bench_bandwidth_limit(int quick, int reps)
{
    const char *spec = quick ? "dim=512,layers=4,heads=8,kv_heads=8,hidden=1376,vocab=32000,seq=256"
                             : "dim=1024,layers=16,heads=16,kv_heads=16,hidden=2816,vocab=32000,seq=1024";
    int gen = quick ? 8 : 24;
    char msg[256];
    re_shape_t s = re_shape_default();
    if (re_shape_parse(spec, &s, msg, sizeof msg)) { fprintf(stderr, "bench_engine: %s\n", msg); return -1; }
    /* the checkpoint, written with the engine's own writer */
    const char *tmpdir = getenv("TMPDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/bench_engine_XXXXXX", tmpdir && *tmpdir ? tmpdir : "/tmp");
    int fd = mkstemp(path);
    if (fd < 0) { fprintf(stderr, "bench_engine: cannot create %s\n", path); return -1; }
    close(fd);
    re_model_t src;
    if (re_model_synthetic(&src, &s, 1, msg, sizeof msg) || re_model_save(&src, path)) {
        fprintf(stderr, "bench_engine: cannot write the checkpoint %s\n", path);
        re_model_free(&src);
        unlink(path);
        return -1;
    }
    re_model_free(&src);
    const re_mem_t kinds[N_MEM] = { RE_MEM_HUGE, RE_MEM_SMALL, RE_MEM_FILE };
    const char *what[N_MEM] = { "read into 2 MiB pages (the default)", "read into 4 KiB pages",
                                "the file mapped (`--weights-memory mmap`)" };
    re_model_t m[N_MEM];
    long long hb[N_MEM];
    double load_s[N_MEM];
    for (int i = 0; i < N_MEM; i++) {
        double t0 = now();
        if (re_model_load_mem(&m[i], path, kinds[i], msg, sizeof msg)) {
            fprintf(stderr, "bench_engine: %s\n", msg);
            for (int k = 0; k < i; k++) re_model_free(&m[k]);
            unlink(path);
            return -1;
        }
        load_s[i] = now() - t0;
    }
    unlink(path);   /* the mapping keeps the file's pages */
    double wb = (double)re_streamed_bytes(&s);
    double tps[N_MEM][16], rgs[N_MEM][16];
    int wins[N_MEM][N_READ] = { { 0 } };
    int fail = 0;
    for (int i = 0; i < N_MEM; i++) {   /* warm: weights paged in, engine code hot */
        run_t r;
        if (run(&m[i], 1, 1, 4, 2, RE_ALLOC_POOL, 1, &r)) fail = 1;
    }
    /* Rounds: in each, every memory kind has a read pass over its weights
     * and then an engine run, the kinds in a rotating order, so drift and
     * the other jobs on the machine hit them alike. */
    for (int k = 0; k < reps; k++)
        for (int j = 0; j < N_MEM; j++) {
            int i = (k + j) % N_MEM;
            const float *reg[2];
            size_t len[2];
            int nreg = stream_regions(&m[i], reg, len), which = 0;
            rgs[i][k] = read_gbs(reg, len, nreg, &which);
            wins[i][which]++;
            run_t r;
            if (run(&m[i], 1, 1, 4, gen, RE_ALLOC_POOL, 1, &r)) fail = 1;
            tps[i][k] = r.decode_wall_tps;
        }
    /* after the runs: a file mapping gets its (PMD) mappings as it faults */
    for (int i = 0; i < N_MEM; i++) hb[i] = re_model_huge_bytes(&m[i]);
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    printf("### Decode at the memory bandwidth limit: batch 1, one thread, a checkpoint beyond the cache\n\n");
    printf("Shape `%s` (%s), a llama2.c checkpoint written by the engine (synthetic weights) and "
           "loaded with `--checkpoint`: %.1f MB of weights streamed per token, %s the %ld MiB "
           "last-level cache this VM reports (%.1fx). %d rounds; in each, every row below has a "
           "read pass over its own weight memory and then a decode run of %d tokens (prompt 4), "
           "in a rotating order. Wall-clock time throughout; medians, (min-max) over the rounds.\n\n",
           spec, quick ? "--quick: a small shape, not for figures" : "the 1B shape: dim 1024, 16 layers",
           wb / 1e6, llc > 0 && wb > (double)llc ? "beyond" : "NOT beyond", llc > 0 ? llc >> 20 : -1L,
           llc > 0 ? wb / (double)llc : 0.0, reps, gen);
    printf("| weights | 2 MiB-mapped | load s | decode tok/s | effective GB/s | read GB/s, same memory "
           "| vs read, same memory | vs 2 MiB-page read |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    double huge_read = 0;
    for (int i = 0; i < N_MEM; i++) {
        double tm, tl, th, rm, rl, rh;
        spread(tps[i], reps, &tm, &tl, &th);
        spread(rgs[i], reps, &rm, &rl, &rh);
        if (i == 0) huge_read = rm;
        double eff = wb * tm / 1e9;
        printf("| %s | %.0f%% | %.2f | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.2f (%.2f-%.2f) | %.0f%% | %.0f%% |\n",
               what[i], hb[i] >= 0 ? 100.0 * (double)hb[i] / (double)m[i].mem_bytes : 0.0, load_s[i],
               tm, tl, th, eff, wb * tl / 1e9, wb * th / 1e9, rm, rl, rh, 100.0 * eff / rm,
               100.0 * eff / huge_read);
    }
    printf("\nEffective GB/s = weight bytes streamed per token (every matrix, the norms and the "
           "classifier) x decode tokens per wall-clock second. The read loop sums the same bytes "
           "of the same mapping; it is the best of three loops in each round (%s; rounds won:",
           "4 vector sums, hardware prefetch only; one dependent sum with a software prefetch "
           "2 KiB ahead; the same paced by a multiply in the chain");
    for (int k = 0; k < N_READ; k++) {
        int w = 0;
        for (int i = 0; i < N_MEM; i++) w += wins[i][k];
        printf("%s %s %d", k ? "," : "", read_names[k], w);
    }
    printf("). \"2 MiB-mapped\" is the share of the weight mapping backed by 2 MiB pages "
           "(/proc/self/smaps: AnonHugePages, or FilePmdMapped for the file). Target: decode "
           ">= 80%% of the read loop.\n\n");
    for (int i = 0; i < N_MEM; i++) re_model_free(&m[i]);
    return fail ? -1 : 0;
}

int main(int argc, char **argv)
{
    int quick = argc > 1 && !strcmp(argv[1], "--quick");
    int reps = quick ? 2 : 7;
    int gen = quick ? 16 : 64;
    char msg[256];

    printf("## engine\n\n");
    printf("Reference engine (`refengine`), fp32 weights, %s kernel, frame pointers on, "
           "the Makefile's -O2 flags. Tokens/s are per wall-clock second, medians of %d "
           "rounds with (min-max); configurations compared in one table are interleaved round "
           "by round. The machine is shared (other jobs on its cores): the spread shows how "
           "much.%s\n\n",
           re_k_simd() ? "AVX2+FMA" : "portable", reps, quick ? " **--quick: not for figures.**" : "");
    int fail = bench_bandwidth_limit(quick, reps) != 0;

    shape_t shapes[] = {
        { "15M", "dim=288,layers=6,heads=6,kv_heads=6,hidden=768,vocab=32000,seq=256" },
        { "42M", "dim=512,layers=8,heads=8,kv_heads=8,hidden=1376,vocab=32000,seq=1024" },
    };
    printf("### Decode, one thread: batch 1 and batch 8, small models\n\n");
    printf("| shape | weight bytes/token | batch 1 tok/s | effective GB/s | read GB/s, same memory "
           "| vs read | batch 8 tok/s | batch 8 / batch 1 |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        re_shape_t s = re_shape_default();
        if (re_shape_parse(shapes[si].spec, &s, msg, sizeof msg)) { fprintf(stderr, "%s\n", msg); return 2; }
        re_model_t m;
        if (re_model_synthetic(&m, &s, 1, msg, sizeof msg)) { fprintf(stderr, "%s\n", msg); return 1; }
        double b1[16], b8[16], rgs[16];
        double wb = (double)re_streamed_bytes(&s);
        const float *reg[2];
        size_t len[2];
        int nreg = stream_regions(&m, reg, len), which;
        run_t r;
        run(&m, 1, 1, 8, 8, RE_ALLOC_POOL, 1, &r);   /* warm the weights */
        for (int k = 0; k < reps; k++) {   /* a read pass next to each run */
            rgs[k] = read_gbs(reg, len, nreg, &which);
            if (run(&m, 1, 1, 8, gen, RE_ALLOC_POOL, 1, &r)) fail = 1;
            b1[k] = r.decode_wall_tps;
            if (run(&m, 8, 8, 8, gen, RE_ALLOC_POOL, 1, &r)) fail = 1;
            b8[k] = r.decode_wall_tps;
        }
        double t1, l1, h1, t8, l8, h8, rg, rl, rh;
        spread(b1, reps, &t1, &l1, &h1);
        spread(b8, reps, &t8, &l8, &h8);
        spread(rgs, reps, &rg, &rl, &rh);
        double eff = wb * t1 / 1e9;
        printf("| %s | %.1f MB | %.1f (%.1f-%.1f) | %.2f | %.2f (%.2f-%.2f) | %.0f%% | %.1f (%.1f-%.1f) | %.2fx |\n",
               shapes[si].name, wb / 1e6, t1, l1, h1, eff, rg, rl, rh, 100.0 * eff / rg, t8, l8, h8,
               t8 / t1);
        re_model_free(&m);
    }
    printf("\nSynthetic weights in 2 MiB pages. These models fit in this VM's last-level cache, "
           "so the read loop (the same bytes of the same memory, next to each batch-1 run) "
           "measures cache bandwidth here, not DRAM. Target: batch 8 >= 3x batch 1.\n\n");

    /* allocation modes, interleaved */
    printf("### Transient tensors: --alloc pool vs malloc vs arena\n\n");
    re_shape_t s = re_shape_default();
    re_model_t m;
    if (re_model_synthetic(&m, &s, 1, msg, sizeof msg)) { fprintf(stderr, "%s\n", msg); return 1; }
    const re_alloc_mode_t modes[3] = { RE_ALLOC_POOL, RE_ALLOC_MALLOC, RE_ALLOC_ARENA };
    double dt[3][16], wall[3][16], pt[3][16];
    int nreq = quick ? 4 : 16;
    for (int k = 0; k < reps; k++)
        for (int i = 0; i < 3; i++) {
            run_t r;
            if (run(&m, 4, nreq, 24, gen / 2, modes[i], 1, &r)) fail = 1;
            dt[i][k] = r.decode_wall_tps;
            pt[i][k] = r.prefill_tps;
            wall[i][k] = r.seconds;
        }
    double md[3], mw[3], mp[3];
    for (int i = 0; i < 3; i++) { md[i] = median(dt[i], reps); mw[i] = median(wall[i], reps); mp[i] = median(pt[i], reps); }
    printf("15M shape, %d requests of prompt 24 / %d tokens, max batch 4, one thread.\n\n", nreq, gen / 2);
    printf("| alloc | decode tok/s | prefill tok/s | wall s | decode vs pool |\n|---|---:|---:|---:|---:|\n");
    for (int i = 0; i < 3; i++)
        printf("| %s | %.1f | %.1f | %.3f | %.3f |\n", re_alloc_mode_name(modes[i]), md[i], mp[i], mw[i],
               md[i] / md[0]);
    printf("\nThe activations of this model are small next to its weights, so the allocation mode "
           "barely moves throughput; what it changes is the memory behaviour a trace shows "
           "(`poolscope record` + `report`).\n");
    re_model_free(&m);
    return fail;
}
