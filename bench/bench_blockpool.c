/* bench_blockpool.c — block pool allocate+free cost per block.
 *
 * Cases (default pool: 1024 blocks of 16 tokens, K/V separate, no observer,
 * no storage; one thread, so the mutex is uncontended):
 *   - single block: allocate 1 token then free that block, repeated;
 *   - decode growth: per request a 128-token prefill (8 blocks per stream),
 *     then one allocate of one block per stream every 16 decode tokens up to
 *     640 tokens, then free_all — the pattern of a paged KV cache;
 *   - batched: one allocate of 64 blocks, then free_all;
 *   - kv cache decode: kvb_cache_append of one token at a time (accounting
 *     only), counted per block of K (so it includes 16 appends per block).
 * Each case runs `reps` times; the median is reported, in ns per block.
 *
 * Output: markdown on stdout (a "## block pool" heading and a table).
 * Usage: bench_blockpool [--quick]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "poolscope/blockpool.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void fail(const char *what, int rc)
{
    fprintf(stderr, "bench_blockpool: %s: %s\n", what, psc_strerror(rc));
    exit(1);
}

static kvb_pool_t *mkpool(void)
{
    kvb_config_t c = kvb_config_default();
    int err;
    kvb_pool_t *p = kvb_create(&c, &err);
    if (!p)
        fail("create", err);
    return p;
}

/* Each function runs one repetition and returns ns per block. */

static double run_single(kvb_pool_t *p, long iters)
{
    int32_t id;
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        int rc = kvb_allocate(p, KVB_STREAM_K, 1, 1, KVB_FMT_F16, &id, 1);
        if (rc != 1)
            fail("allocate", rc);
        if ((rc = kvb_free(p, &id, 1)) != 1)
            fail("free", rc);
    }
    return (now_ns() - t0) / (double)iters;
}

static double run_decode(kvb_pool_t *p, long requests)
{
    int32_t ids[16];
    long blocks = 0;
    double t0 = now_ns();
    for (long r = 0; r < requests; r++) {
        int64_t owner = r & 7;
        for (int s = 0; s < 2; s++) {
            int rc = kvb_allocate(p, (kvb_stream_t)s, 128, owner, KVB_FMT_INT4, ids, 16);
            if (rc != 8)
                fail("prefill", rc);
        }
        blocks += 16;
        for (int t = 128; t < 640; t += 16) {
            for (int s = 0; s < 2; s++) {
                int rc = kvb_allocate(p, (kvb_stream_t)s, 1, owner, KVB_FMT_INT4, ids, 16);
                if (rc != 1)
                    fail("decode", rc);
            }
            blocks += 2;
        }
        int rc = kvb_free_all(p, owner);
        if (rc != 80)
            fail("free_all", rc);
    }
    return (now_ns() - t0) / (double)blocks;
}

static double run_batched(kvb_pool_t *p, long iters)
{
    int32_t ids[64];
    double t0 = now_ns();
    for (long i = 0; i < iters; i++) {
        int rc = kvb_allocate(p, KVB_STREAM_V, 64 * 16, 3, KVB_FMT_F16, ids, 64);
        if (rc != 64)
            fail("allocate", rc);
        if ((rc = kvb_free_all(p, 3)) != 64)
            fail("free_all", rc);
    }
    return (now_ns() - t0) / (double)(iters * 64);
}

static double run_cache(kvb_pool_t *p, long requests)
{
    long blocks = 0;
    double t0 = now_ns();
    for (long r = 0; r < requests; r++) {
        int err;
        kvb_cache_t *c = kvb_cache_create(p, 100 + r, KVB_FMT_INT4, &err);
        if (!c)
            fail("cache", err);
        for (int t = 0; t < 512; t++) {
            int rc = kvb_cache_append(c, NULL, NULL, 1);
            if (rc)
                fail("append", rc);
        }
        blocks += kvb_cache_n_blocks(c);
        kvb_cache_destroy(c);
    }
    return (now_ns() - t0) / (double)blocks;
}

struct bcase {
    const char *name;
    double (*fn)(kvb_pool_t *, long);
    long n;             /* iterations or requests per repetition */
};

int main(int argc, char **argv)
{
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int reps = quick ? 3 : 11;
    long scale = quick ? 10 : 1;
    struct bcase cases[] = {
        { "single block allocate+free", run_single, 2000000 },
        { "decode growth (prefill 8 + 32 single blocks per stream, free_all)", run_decode, 40000 },
        { "batched 64 blocks + free_all", run_batched, 40000 },
        { "kv cache decode, 16 appends per block (K+V)", run_cache, 4000 },
    };
    printf("## block pool\n\n");
    printf("%d repetitions per case, median; default pool (1024 blocks of 16 tokens, K/V separate), one thread.\n\n",
           reps);
    printf("| case | ns/block |\n|---|---|\n");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kvb_pool_t *p = mkpool();
        double v[16];
        (void)cases[c].fn(p, cases[c].n / scale / 10 + 1);   /* warm-up */
        for (int r = 0; r < reps; r++)
            v[r] = cases[c].fn(p, cases[c].n / scale);
        qsort(v, (size_t)reps, sizeof v[0], cmp_double);
        printf("| %s | %.1f |\n", cases[c].name, v[reps / 2]);
        kvb_destroy(p);
    }
    return 0;
}
