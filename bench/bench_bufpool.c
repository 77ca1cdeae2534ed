/* bench_bufpool.c — buffer pool acquire+release against glibc malloc+free.
 *
 * The workload is a scripted decode step of a small llama (per layer:
 * rmsnorm, q/k/v, attention scores over the current position, attention
 * output, wo, residual, ffn w1/w3, silu*mul, w2, residual; then the final
 * norm and the logits), sizes in f32 elements, batch 1..8, a deterministic
 * pseudo-random position per step. Several buffers are live at once and are
 * released in non-LIFO order, partly shuffled. The script is generated once;
 * then the same script runs over the pool and over malloc in one process,
 * alternating, and each side writes one float into every buffer it gets and
 * reads it back before releasing it, so both touch the same bytes.
 *
 * Output: markdown (a "## buffer pool" heading and a table) on stdout.
 * Usage: bench_bufpool [--quick]
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "poolscope/bufpool.h"

typedef struct model_shape {
    const char *name;
    size_t dim, hidden, n_heads, n_kv_heads, seq, vocab, n_layers;
} model_shape_t;

typedef struct op {
    uint32_t slot;     /* which live slot */
    uint32_t n;        /* elements to acquire; 0 = release the slot */
} op_t;

typedef struct script {
    op_t *ops;
    size_t n, room, pairs;
    uint32_t nslots;
    /* slot allocator used while generating */
    uint32_t *free_slots;
    size_t nfree;
} script_t;

static uint64_t rng(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static void push(script_t *sc, uint32_t slot, uint32_t n)
{
    if (sc->n == sc->room) {
        sc->room = sc->room ? 2 * sc->room : 4096;
        sc->ops = realloc(sc->ops, sc->room * sizeof *sc->ops);
        if (!sc->ops) {
            fprintf(stderr, "bench_bufpool: out of memory\n");
            exit(1);
        }
    }
    sc->ops[sc->n].slot = slot;
    sc->ops[sc->n].n = n;
    sc->n++;
}

static uint32_t A(script_t *sc, size_t n)
{
    uint32_t slot;
    if (sc->nfree)
        slot = sc->free_slots[--sc->nfree];
    else
        slot = sc->nslots++;
    push(sc, slot, (uint32_t)n);
    sc->pairs++;
    return slot;
}

static void F(script_t *sc, uint32_t slot)
{
    push(sc, slot, 0);
    sc->free_slots[sc->nfree++] = slot;
}

/* Release a group in a shuffled order. */
static void F_shuffled(script_t *sc, uint32_t *slots, int k, uint64_t *seed)
{
    for (int i = k - 1; i > 0; i--) {
        int j = (int)(rng(seed) % (uint64_t)(i + 1));
        uint32_t t = slots[i];
        slots[i] = slots[j];
        slots[j] = t;
    }
    for (int i = 0; i < k; i++)
        F(sc, slots[i]);
}

static void gen_step(script_t *sc, const model_shape_t *m, size_t B, size_t pos, uint64_t *seed)
{
    size_t kv_dim = m->dim / m->n_heads * m->n_kv_heads;
    uint32_t x = A(sc, B * m->dim);                     /* embedding rows */
    for (size_t l = 0; l < m->n_layers; l++) {
        uint32_t xb = A(sc, B * m->dim);                /* rmsnorm */
        uint32_t q = A(sc, B * m->dim);
        uint32_t k = A(sc, B * kv_dim);
        uint32_t v = A(sc, B * kv_dim);
        F(sc, xb);
        uint32_t att = A(sc, B * m->n_heads * pos);     /* (B, n_heads, pos) scores */
        uint32_t xb2 = A(sc, B * m->dim);               /* attention output */
        uint32_t g1[4] = {att, k, v, q};                /* k, v went to the cache */
        F_shuffled(sc, g1, 4, seed);
        uint32_t o = A(sc, B * m->dim);                 /* wo */
        F(sc, xb2);
        uint32_t x2 = A(sc, B * m->dim);                /* residual */
        uint32_t g2[2] = {o, x};
        F_shuffled(sc, g2, 2, seed);
        x = x2;
        xb = A(sc, B * m->dim);                         /* ffn norm */
        uint32_t h1 = A(sc, B * m->hidden);
        uint32_t h3 = A(sc, B * m->hidden);
        F(sc, xb);
        uint32_t h = A(sc, B * m->hidden);              /* silu(h1) * h3 */
        uint32_t g3[2] = {h1, h3};
        F_shuffled(sc, g3, 2, seed);
        uint32_t d = A(sc, B * m->dim);                 /* w2 */
        F(sc, h);
        x2 = A(sc, B * m->dim);
        uint32_t g4[2] = {d, x};
        F_shuffled(sc, g4, 2, seed);
        x = x2;
    }
    uint32_t xn = A(sc, B * m->dim);
    uint32_t logits = A(sc, B * m->vocab);
    F(sc, xn);
    F(sc, x);
    F(sc, logits);                                      /* after sampling */
}

/* batch_max == 0: batch 1; otherwise a pseudo-random batch in 1..batch_max
 * per step. */
static void gen_script(script_t *sc, const model_shape_t *m, size_t batch_max, size_t min_pairs,
                       uint64_t seed)
{
    memset(sc, 0, sizeof *sc);
    sc->free_slots = malloc(4096 * sizeof *sc->free_slots);
    if (!sc->free_slots) {
        fprintf(stderr, "bench_bufpool: out of memory\n");
        exit(1);
    }
    while (sc->pairs < min_pairs) {
        size_t B = batch_max ? 1 + rng(&seed) % batch_max : 1;
        size_t pos = 1 + rng(&seed) % m->seq;
        gen_step(sc, m, B, pos, &seed);
    }
    free(sc->free_slots);
    sc->free_slots = NULL;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static volatile float sink;

static double run_malloc(const script_t *sc, void **slots)
{
    float acc = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < sc->n; i++) {
        const op_t *o = &sc->ops[i];
        if (o->n) {
            float *p = malloc((size_t)o->n * sizeof(float));
            if (!p)
                abort();
            p[0] = (float)i;
            slots[o->slot] = p;
        } else {
            float *p = slots[o->slot];
            acc += p[0];
            free(p);
        }
    }
    double t1 = now_ns();
    sink = acc;
    return (t1 - t0) / (double)sc->pairs;
}

static double run_pool(bp_pool_t *pool, const script_t *sc, void **slots)
{
    float acc = 0;
    double t0 = now_ns();
    for (size_t i = 0; i < sc->n; i++) {
        const op_t *o = &sc->ops[i];
        if (o->n) {
            bp_buf_t *b = bp_acquire(pool, o->n, NULL);
            if (!b)
                abort();
            bp_f32(b)[0] = (float)i;
            slots[o->slot] = b;
        } else {
            bp_buf_t *b = slots[o->slot];
            acc += bp_f32(b)[0];
            bp_release(b);
        }
    }
    double t1 = now_ns();
    sink = acc;
    return (t1 - t0) / (double)sc->pairs;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void count_event(void *ctx, const bp_event_t *ev)
{
    (void)ev;
    ++*(uint64_t *)ctx;
}

#define MAX_REPS 15

/* A thread that only waits: while it lives the process is multi-threaded,
 * so the pool takes its mutex (and malloc its arena lock) on every call. */
static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;
static int idle_stop;

static void *idle_thread(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&idle_mu);
    while (!idle_stop)
        pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
    return NULL;
}

int main(int argc, char **argv)
{
    int quick = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: %s [--quick]\n", argv[0]);
            return 2;
        }
    }
    const int reps = quick ? 3 : 11;
    const size_t min_pairs = quick ? 20000 : 300000;

    static const model_shape_t m15 = {"dim288", 288, 768, 6, 6, 256, 32000, 6};
    static const model_shape_t m42 = {"dim512", 512, 1376, 8, 8, 1024, 32000, 8};
    static const struct { const model_shape_t *m; size_t batch_max; const char *label; } cases[] = {
        {&m15, 0, "dim288 seq256 batch1"},
        {&m15, 8, "dim288 seq256 batch1-8"},
        {&m42, 0, "dim512 seq1024 batch1"},
        {&m42, 8, "dim512 seq1024 batch1-8"},
    };

    printf("## buffer pool\n\n");
    printf("Acquire+release pair vs glibc malloc+free on a llama decode-step size mix "
           "(f32 sizes, several buffers live, non-LIFO release, one float written and read "
           "per buffer on both sides); median of %d alternating runs of >= %zu pairs, "
           "default 1 GiB cap.\n\n",
           reps, min_pairs);
    printf("| case | ns/pair | ratio vs malloc |\n");
    printf("|---|---:|---:|\n");

    pthread_t idle;
    for (int mt = 0; mt < 2; mt++) {
    if (mt && pthread_create(&idle, NULL, idle_thread, NULL) != 0) {
        fprintf(stderr, "bench_bufpool: cannot start a thread\n");
        return 1;
    }
    const char *mode = mt ? ", 2nd thread alive" : "";
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        script_t sc;
        gen_script(&sc, cases[c].m, cases[c].batch_max, min_pairs, 0x5EED0000u + c);
        void **slots = calloc(sc.nslots ? sc.nslots : 1, sizeof *slots);
        uint64_t events = 0;
        bp_config_t cfg = bp_config_default();
        cfg.name = "bench";
        bp_pool_t *pool = bp_create(&cfg, NULL);
        cfg.observe = count_event;
        cfg.observe_ctx = &events;
        bp_pool_t *opool = bp_create(&cfg, NULL);
        if (!slots || !pool || !opool) {
            fprintf(stderr, "bench_bufpool: out of memory\n");
            return 1;
        }
        double tm[MAX_REPS], tp[MAX_REPS], to[MAX_REPS];
        /* Warm both sides once (the pool fills its cache, malloc its bins). */
        run_malloc(&sc, slots);
        run_pool(pool, &sc, slots);
        run_pool(opool, &sc, slots);
        for (int r = 0; r < reps; r++) {
            if (r % 2) {
                tm[r] = run_malloc(&sc, slots);
                tp[r] = run_pool(pool, &sc, slots);
                to[r] = run_pool(opool, &sc, slots);
            } else {
                to[r] = run_pool(opool, &sc, slots);
                tp[r] = run_pool(pool, &sc, slots);
                tm[r] = run_malloc(&sc, slots);
            }
        }
        double mm = median(tm, reps), mp = median(tp, reps), mo = median(to, reps);
        bp_stats_t st;
        bp_stats(pool, &st);
        printf("| %s%s, malloc+free | %.1f | 1.00 |\n", cases[c].label, mode, mm);
        printf("| %s%s, pool (hit rate %.4f) | %.1f | %.2f |\n", cases[c].label, mode,
               st.acquires ? (double)st.hits / (double)st.acquires : 0.0, mp, mp / mm);
        printf("| %s%s, pool + counting observer | %.1f | %.2f |\n", cases[c].label, mode,
               mo, mo / mm);
        bp_destroy(pool);
        bp_destroy(opool);
        free(slots);
        free(sc.ops);
    }
    }
    pthread_mutex_lock(&idle_mu);
    idle_stop = 1;
    pthread_cond_signal(&idle_cv);
    pthread_mutex_unlock(&idle_mu);
    pthread_join(idle, NULL);
    printf("\nWhile the process is single-threaded the pool skips its mutex (as glibc "
           "malloc skips its arena lock); the \"2nd thread alive\" rows show the locked "
           "path.\n\n");
    return 0;
}
