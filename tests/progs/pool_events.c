/* pool_events.c — the buffer pool and the block pool, observed through the
 * pool adapter, so a test can rebuild the pools' own statistics from the
 * trace alone.
 *
 *   pool_events [ROUNDS]      default 200
 *
 * Buffer pool "acts" (cap 256 KiB, so some reclaims go over the cap): two
 * threads acquire f32, typed and scratch buffers of varying sizes, take and
 * drop views, and release. Block pool "kv" (block 16, 64 blocks, K/V
 * separate, growth to 128): allocations for several owners, token updates,
 * frees, free_all, an exhausted attempt on a second pool without growth,
 * owner register/release and a shrink.
 *
 * Prints, as key=value lines in pstdump's names (pool.<id>.<stat>):
 *   bufpool: acquires hits misses backing_allocs backing_frees
 *            reclaims_cached destroyed_over_cap peak_outstanding_bytes
 *            peak_cached_bytes (backing_frees counts the frees bp_destroy
 *            makes too: stats before destroy + cached buffers)
 *   blockpool: n_allocations n_frees n_reused n_exhausted n_grown n_retired
 *            peak_blocks_in_use blocks_in_use
 * and "tracer=1" when the adapter found a tracer (pool ids are 0 without).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "poolscope/blockpool.h"
#include "poolscope/bufpool.h"
#include "poolscope/pool_adapter.h"
#include "poolscope/poolscope.h"

static int rounds = 200;
static bp_pool_t *pool;

static void die(const char *what, int err)
{
    fprintf(stderr, "pool_events: %s: %s\n", what, psc_strerror(err));
    exit(1);
}

static void *bp_worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    bp_buf_t *held[8] = { 0 };
    for (int i = 0; i < rounds; i++) {
        int err = 0;
        seed = seed * 1103515245u + 12345u;
        int slot = (int)((seed >> 16) % 8);
        if (held[slot]) {
            if (bp_release(held[slot]) < 0) die("release", PSC_EINVAL);
            held[slot] = NULL;
        }
        size_t n = 16 + (seed >> 8) % 20000;
        bp_buf_t *b;
        switch (i % 3) {
        case 0: b = bp_acquire(pool, n, &err); break;
        case 1: b = bp_acquire_typed(pool, BP_DT_F16, n, &err); break;
        default: b = bp_acquire_scratch(pool, n, &err); break;
        }
        if (!b) die("acquire", err);
        if (i % 5 == 0) {             /* a view taken and dropped */
            bp_retain(b);
            bp_release(b);
        }
        held[slot] = b;
    }
    for (int s = 0; s < 8; s++)
        if (held[s]) bp_release(held[s]);
    return NULL;
}

static void run_bufpool(void)
{
    bp_config_t cfg = bp_config_default();
    cfg.name = "acts";
    cfg.max_cached_bytes = 256 * 1024;
    cfg = psa_bufpool_config(&cfg);
    int err = 0;
    pool = bp_create(&cfg, &err);
    if (!pool) die("bp_create", err);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        if (pthread_create(&t[i], NULL, bp_worker, (void *)(uintptr_t)(i + 1))) die("pthread_create", PSC_ENOMEM);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    bp_stats_t s;
    if ((err = bp_stats(pool, &s))) die("bp_stats", err);
    if ((err = bp_check(pool))) die("bp_check", err);
    unsigned long long id = (unsigned long long)psa_bufpool_id(&cfg);
    printf("pool.%llu.acquires=%llu\n", id, (unsigned long long)s.acquires);
    printf("pool.%llu.hits=%llu\n", id, (unsigned long long)s.hits);
    printf("pool.%llu.misses=%llu\n", id, (unsigned long long)s.misses);
    printf("pool.%llu.backing_allocs=%llu\n", id, (unsigned long long)s.backing_allocs);
    printf("pool.%llu.backing_frees=%llu\n", id, (unsigned long long)(s.backing_frees + s.cached_buffers));
    printf("pool.%llu.reclaims_cached=%llu\n", id, (unsigned long long)s.reclaims_cached);
    printf("pool.%llu.destroyed_over_cap=%llu\n", id, (unsigned long long)s.destroyed_over_cap);
    printf("pool.%llu.peak_outstanding_bytes=%zu\n", id, s.peak_outstanding_bytes);
    printf("pool.%llu.peak_cached_bytes=%zu\n", id, s.peak_cached_bytes);
    if ((err = bp_destroy(pool))) die("bp_destroy", err);
    psa_bufpool_destroyed(&cfg);
}

static void print_kvb(uint64_t id, const kvb_stats_t *s)
{
    unsigned long long i = (unsigned long long)id;
    printf("pool.%llu.n_allocations=%lld\n", i, (long long)s->n_allocations);
    printf("pool.%llu.n_frees=%lld\n", i, (long long)s->n_frees);
    printf("pool.%llu.n_reused=%lld\n", i, (long long)s->n_reused);
    printf("pool.%llu.n_exhausted=%lld\n", i, (long long)s->n_exhausted);
    printf("pool.%llu.n_grown=%lld\n", i, (long long)s->n_grown);
    printf("pool.%llu.n_retired=%lld\n", i, (long long)s->n_retired);
    printf("pool.%llu.peak_blocks_in_use=%lld\n", i, (long long)s->peak_blocks_in_use);
    printf("pool.%llu.blocks_in_use=%lld\n", i, (long long)s->blocks_in_use);
}

static void run_blockpool(void)
{
    kvb_config_t cfg = kvb_config_default();
    cfg.block_size = 16;
    cfg.n_blocks = 64;
    cfg.separate_kv = true;
    cfg.grow_on_exhaustion = true;
    cfg.max_blocks = 128;
    cfg = psa_blockpool_config(&cfg, "kv");
    int err = 0;
    kvb_pool_t *kv = kvb_create(&cfg, &err);
    if (!kv) die("kvb_create", err);

    int32_t ids[256];
    for (int r = 0; r < rounds / 10 + 1; r++) {
        for (int64_t owner = 0; owner < 4; owner++) {
            int64_t tokens = 1 + (r * 37 + owner * 11) % 120;
            int n = kvb_allocate(kv, KVB_STREAM_K, tokens, owner, KVB_FMT_F16, ids, 256);
            if (n < 0 && n != PSC_EEXHAUSTED) die("kvb_allocate", n);
            if (n > 0) kvb_set_used(kv, ids[n - 1], (int32_t)(1 + tokens % 16));
            n = kvb_allocate(kv, KVB_STREAM_V, tokens, owner, KVB_FMT_F16, ids, 256);
            if (n < 0 && n != PSC_EEXHAUSTED) die("kvb_allocate", n);
            if (n > 1) kvb_free(kv, ids, 1);   /* give one back early */
        }
        for (int64_t owner = 0; owner < 4; owner += (r % 2) + 1)
            kvb_free_all(kv, owner);
    }
    for (int64_t owner = 0; owner < 4; owner++) kvb_free_all(kv, owner);
    if (kvb_register_owner(kv, 99) == 0) kvb_release_owner(kv, 99);
    kvb_shrink(kv, KVB_STREAM_K, 8);
    int n = kvb_allocate(kv, KVB_STREAM_K, 40, 7, KVB_FMT_INT8, ids, 256);
    if (n < 0) die("kvb_allocate", n);

    kvb_stats_t s;
    if ((err = kvb_stats(kv, &s))) die("kvb_stats", err);
    if ((err = kvb_check(kv))) die("kvb_check", err);
    print_kvb(psa_blockpool_id(&cfg), &s);
    kvb_destroy(kv);
    psa_blockpool_destroyed(&cfg);

    /* A pool that may not grow: one exhausted attempt. */
    kvb_config_t small = kvb_config_default();
    small.block_size = 16;
    small.n_blocks = 4;
    small.separate_kv = false;
    small = psa_blockpool_config(&small, "kv-small");
    kvb_pool_t *sp = kvb_create(&small, &err);
    if (!sp) die("kvb_create", err);
    if (kvb_allocate(sp, KVB_STREAM_KV, 48, 1, KVB_FMT_F32, ids, 256) < 0) die("kvb_allocate", PSC_EINVAL);
    if (kvb_allocate(sp, KVB_STREAM_KV, 48, 2, KVB_FMT_F32, ids, 256) != PSC_EEXHAUSTED) die("expected exhaustion", PSC_EINVAL);
    kvb_free_all(sp, 1);
    if ((err = kvb_stats(sp, &s))) die("kvb_stats", err);
    print_kvb(psa_blockpool_id(&small), &s);
    kvb_destroy(sp);
    psa_blockpool_destroyed(&small);
}

int main(int argc, char **argv)
{
    if (argc > 1) rounds = atoi(argv[1]);
    if (rounds < 1) return 2;
    run_bufpool();
    run_blockpool();
    printf("tracer=%d\n", ps_active() ? 1 : 0);
    return 0;
}
