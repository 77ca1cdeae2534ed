/* pool_golden.c — a few pool operations small enough to compute by hand,
 * made through the real pools and the real pool adapter, so the analyzer's
 * pool and KV figures are checked against the events the pools emit (not
 * against a fixture our own writer made). tests/integration/pool_golden.sh
 * holds the hand-computed expectations; this program prints the pools' own
 * statistics beside them as a third count.
 *
 * Buffer pool "golden" (slab arm: requests rounded up to 4096 bytes):
 *   a = scratch(1000)   miss, granted 4096
 *   b = scratch(5000)   miss, granted 8192      outstanding 12288 (peak)
 *   release b           cached 8192
 *   c = scratch(100)    hit: the smallest cached buffer >= 4096 is b's 8192
 *   release a, c        cached 12288 (peak)
 * Block pool "kvg" (16 tokens a block, K and V in one stream, 8 blocks),
 * with three "decode" scopes:
 *   owner 1 takes 40 tokens: blocks of 16, 16, 8
 *   decode 1 opens      40 of 48 slots
 *   last block set to 9 tokens
 *   owner 2 takes 5 tokens: one block (peak: 4 blocks, 46 of 64)
 *   decode 2 opens      46 of 64
 *   owner 1 frees all
 *   decode 3 opens      5 of 16
 *   owner 2 frees all
 */
#include <stdio.h>
#include <stdlib.h>

#include "poolscope/blockpool.h"
#include "poolscope/bufpool.h"
#include "poolscope/pool_adapter.h"
#include "poolscope/poolscope.h"

static void need(int ok, const char *what)
{
    if (!ok) { fprintf(stderr, "pool_golden: %s failed\n", what); exit(1); }
}

static void step(uint64_t i)
{
    ps_begin("decode", i, NULL, 0);
    ps_end("decode", i);
}

int main(void)
{
    int err = 0;
    bp_config_t bc = bp_config_default();
    bc.name = "golden";
    bc = psa_bufpool_config(&bc);
    bp_pool_t *bp = bp_create(&bc, &err);
    need(bp != NULL, "bp_create");
    bp_buf_t *a = bp_acquire_scratch(bp, 1000, &err);
    bp_buf_t *b = bp_acquire_scratch(bp, 5000, &err);
    need(a && b, "acquire");
    need(bp_release(b) >= 0, "release b");
    bp_buf_t *c = bp_acquire_scratch(bp, 100, &err);
    need(c != NULL, "acquire c");
    need(bp_release(a) >= 0 && bp_release(c) >= 0, "release a, c");
    bp_stats_t s;
    need(bp_stats(bp, &s) == 0, "bp_stats");
    printf("acquires=%llu hits=%llu peak_outstanding_bytes=%zu peak_cached_bytes=%zu\n",
           (unsigned long long)s.acquires, (unsigned long long)s.hits, s.peak_outstanding_bytes,
           s.peak_cached_bytes);
    need(bp_destroy(bp) == 0, "bp_destroy");
    psa_bufpool_destroyed(&bc);

    kvb_config_t kc = kvb_config_default();
    kc.block_size = 16;
    kc.n_blocks = 8;
    kc.separate_kv = false;
    kc = psa_blockpool_config(&kc, "kvg");
    kvb_pool_t *kv = kvb_create(&kc, &err);
    need(kv != NULL, "kvb_create");
    int32_t ids[8];
    int n = kvb_allocate(kv, KVB_STREAM_KV, 40, 1, KVB_FMT_F32, ids, 8);
    need(n == 3, "allocate 40 tokens");
    step(1);
    need(kvb_set_used(kv, ids[2], 9) == 0, "set_used");
    need(kvb_allocate(kv, KVB_STREAM_KV, 5, 2, KVB_FMT_F32, ids, 8) == 1, "allocate 5 tokens");
    step(2);
    need(kvb_free_all(kv, 1) >= 0, "free_all 1");
    step(3);
    need(kvb_free_all(kv, 2) >= 0, "free_all 2");
    kvb_stats_t ks;
    need(kvb_stats(kv, &ks) == 0, "kvb_stats");
    printf("peak_blocks_in_use=%lld\n", (long long)ks.peak_blocks_in_use);
    kvb_destroy(kv);
    psa_blockpool_destroyed(&kc);
    return 0;
}
