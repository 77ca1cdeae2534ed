/* test_blockpool.c — the block pool: bookkeeping, stats, history, Prometheus
 * text, observer, block storage, allocation failure and threads.
 * The KV cache on the pool is in test_kvcache.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "poolscope/blockpool.h"
#include "blockpool_int.h"   /* to corrupt a pool on purpose (the walker tests) */
#if PS_DEBUG
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#endif

/* ---- helpers ------------------------------------------------------------------ */

static kvb_pool_t *mkpool(int32_t bs, int32_t n, bool sep, bool grow, int32_t max)
{
    kvb_config_t c = kvb_config_default();
    c.block_size = bs;
    c.n_blocks = n;
    c.separate_kv = sep;
    c.grow_on_exhaustion = grow;
    c.max_blocks = max;
    int err = 1;
    kvb_pool_t *p = kvb_create(&c, &err);
    assert_non_null(p);
    assert_int_equal(err, 0);
    return p;
}

static kvb_stats_t stats(kvb_pool_t *p)
{
    kvb_stats_t s;
    assert_int_equal(kvb_stats(p, &s), 0);
    return s;
}

static int hist_len(kvb_pool_t *p)
{
    static kvb_stats_t h[KVB_HISTORY_LEN];
    return kvb_history(p, h, KVB_HISTORY_LEN);
}

/* Counting meta allocator that fails its fail_at-th call (0 = never). */
struct counting {
    long calls, frees, live, fail_at;
};

static void *c_alloc(void *ctx, size_t n)
{
    struct counting *c = ctx;
    c->calls++;
    if (c->fail_at && c->calls == c->fail_at)
        return NULL;
    void *p = malloc(n);
    if (p)
        c->live++;
    return p;
}

static void c_free(void *ctx, void *p)
{
    struct counting *c = ctx;
    c->frees++;
    c->live--;
    free(p);
}

/* ---- the example and defaults of docs/DESIGN.md ("KV block pool") --------------- */

static void test_seed_example_40_tokens_take_three_of_64_blocks(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 64, true, false, 0);
    int32_t ids[8];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 40, 1, KVB_FMT_F16, ids, 8), 3);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.blocks_in_use, 3);
    assert_int_equal(s.n_blocks, 64);
    assert_int_equal(s.n_allocations, 3);
    assert_int_equal(s.n_frees, 0);
    assert_int_equal(s.n_reused, 0);
    assert_int_equal(s.n_exhausted, 0);
    assert_int_equal(s.n_grown, 0);
    assert_int_equal(s.n_retired, 0);
    assert_int_equal(s.peak_blocks_in_use, 3);
    assert_true(s.fragmentation == 1.0 / 64.0);
    int32_t want[3] = { 16, 16, 8 };
    for (int i = 0; i < 3; i++) {
        kvb_block_t b;
        assert_int_equal(kvb_block_get(p, ids[i], &b), 0);
        assert_int_equal(b.n_used, want[i]);
        assert_int_equal(b.owner, 1);
        assert_int_equal(b.stream, KVB_STREAM_K);
        assert_int_equal(b.format, KVB_FMT_F16);
        assert_true(b.ever_allocated);
    }
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_config_default_matches_seed(void **st)
{
    (void)st;
    kvb_config_t c = kvb_config_default();
    assert_int_equal(c.block_size, 16);
    assert_int_equal(c.n_blocks, 1024);
    assert_true(c.separate_kv);
    assert_false(c.grow_on_exhaustion);
    assert_int_equal(c.max_blocks, 0);
    assert_null(c.observe);
    assert_null(c.alloc.alloc);
    kvb_destroy(NULL);
}

static void test_invalid_config_is_rejected(void **st)
{
    (void)st;
    struct { int32_t bs, n, max; } bad[] = {
        { 0, 8, 0 }, { -1, 8, 0 }, { 16, 0, 0 }, { 16, -3, 0 }, { 16, 8, 7 }, { 16, 8, -1 },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        kvb_config_t c = kvb_config_default();
        c.block_size = bad[i].bs;
        c.n_blocks = bad[i].n;
        c.max_blocks = bad[i].max;
        int err = 0;
        assert_null(kvb_create(&c, &err));
        assert_int_equal(err, PSC_EINVAL);
    }
    int err = 0;
    assert_null(kvb_create(NULL, &err));
    assert_int_equal(err, PSC_EINVAL);
    kvb_config_t c = kvb_config_default();
    c.max_blocks = c.n_blocks;                 /* equal is fine */
    kvb_pool_t *p = kvb_create(&c, NULL);
    assert_non_null(p);
    kvb_destroy(p);
}

static void test_formats_have_bits_and_names(void **st)
{
    (void)st;
    const char *names[] = { "f32", "f16", "bf16", "int8", "int4", "int2", "int1" };
    int bits[] = { 32, 16, 16, 8, 4, 2, 1 };
    for (int f = 0; f < KVB_FMT_COUNT; f++) {
        assert_string_equal(kvb_format_name((kvb_format_t)f), names[f]);
        assert_int_equal(kvb_format_bits((kvb_format_t)f), bits[f]);
        assert_int_equal(kvb_format_parse(names[f]), f);
    }
    assert_int_equal(kvb_format_bits(KVB_FMT_COUNT), PSC_EINVAL);
    assert_int_equal(kvb_format_parse("fp8"), PSC_EINVAL);
    assert_string_equal(kvb_stream_name(KVB_STREAM_KV), "kv");
}

/* ---- allocate / free --------------------------------------------------------------- */

static void test_bad_allocate_arguments_change_nothing(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 8, true, false, 0);
    int32_t ids[8];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 0, 1, KVB_FMT_F16, ids, 8), PSC_EINVAL);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, -5, 1, KVB_FMT_F16, ids, 8), PSC_EINVAL);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 4, -1, KVB_FMT_F16, ids, 8), PSC_EINVAL);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 4, 1, KVB_FMT_COUNT, ids, 8), PSC_EINVAL);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_KV, 4, 1, KVB_FMT_F16, ids, 8), PSC_EINVAL);
    assert_int_equal(kvb_allocate(p, (kvb_stream_t)7, 4, 1, KVB_FMT_F16, ids, 8), PSC_EINVAL);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 40, 1, KVB_FMT_F16, ids, 2), PSC_ERANGE);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.n_allocations, 0);
    assert_int_equal(s.n_exhausted, 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 4);
    assert_int_equal(hist_len(p), 0);
    assert_int_equal(kvb_blocks_for(p, 1, NULL, 0), 0);
    kvb_destroy(p);
}

static void test_exhausted_allocate_hands_out_nothing(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 8, true, false, 0);   /* K 4, V 4 */
    int32_t ids[8];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 48, 1, KVB_FMT_F16, ids, 8), 3);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 17, 2, KVB_FMT_F16, ids, 8), PSC_EEXHAUSTED);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 1);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_V), 4);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.n_exhausted, 1);
    assert_int_equal(s.n_allocations, 3);
    assert_int_equal(s.blocks_in_use, 3);
    assert_int_equal(kvb_blocks_for(p, 2, ids, 8), 0);
    /* the owner of a failed attempt is not left active */
    assert_int_equal(kvb_register_owner(p, 2), 0);
    /* one block still fits */
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16, 2, KVB_FMT_F16, ids, 8), 1);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_just_freed_block_is_handed_out_first(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 16, true, false, 0);
    int32_t a[4], b[1];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 64, 1, KVB_FMT_F16, a, 4), 4);
    assert_int_equal(kvb_free(p, &a[1], 1), 1);
    assert_int_equal(kvb_free(p, &a[3], 1), 1);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 2, KVB_FMT_F16, b, 1), 1);
    assert_int_equal(b[0], a[3]);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 2, KVB_FMT_F16, b, 1), 1);
    assert_int_equal(b[0], a[1]);
    kvb_destroy(p);
}

static void test_reuse_counts_only_blocks_handed_out_before(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 8, true, false, 0);
    int32_t a[4];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 32, 1, KVB_FMT_F16, a, 4), 2);
    assert_int_equal(kvb_free(p, a, 1), 1);
    /* 3 blocks: the freed one (reused) + 2 never handed out */
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 48, 2, KVB_FMT_INT4, a, 4), 3);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.n_reused, 1);
    assert_int_equal(s.n_allocations, 5);
    assert_int_equal(s.n_frees, 1);
    assert_int_equal(s.peak_blocks_in_use, 4);
    kvb_destroy(p);
}

static void test_growth_adds_just_enough_and_stops_at_max_blocks(void **st)
{
    (void)st;
    /* whole pool 4 (K 2, V 2), cap 8 (K 4, V 4) */
    kvb_pool_t *p = mkpool(16, 4, true, true, 8);
    int32_t ids[8];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 48, 1, KVB_FMT_F16, ids, 8), 3);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.n_grown, 1);
    assert_int_equal(s.n_blocks, 5);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 0);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 1, KVB_FMT_F16, ids, 8), 1);
    assert_int_equal(stats(p).n_blocks, 6);
    /* K is at its cap of 4: one more block would pass it */
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 1, KVB_FMT_F16, ids, 8), PSC_EEXHAUSTED);
    s = stats(p);
    assert_int_equal(s.n_blocks, 6);
    assert_int_equal(s.n_grown, 2);
    assert_int_equal(s.n_exhausted, 1);
    /* V grows up to its own half: 2 + 2 */
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 64, 2, KVB_FMT_F16, ids, 8), 4);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 1, 2, KVB_FMT_F16, ids, 8), PSC_EEXHAUSTED);
    s = stats(p);
    assert_int_equal(s.n_blocks, 8);
    assert_int_equal(s.n_exhausted, 2);
    /* a request bigger than the cap fails without growing */
    kvb_destroy(p);
    p = mkpool(16, 4, false, true, 6);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_KV, 16 * 7, 1, KVB_FMT_F16, ids, 8), PSC_EEXHAUSTED);
    assert_int_equal(stats(p).n_blocks, 4);
    assert_int_equal(stats(p).n_grown, 0);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_KV, 16 * 6, 1, KVB_FMT_F16, ids, 8), 6);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_unbounded_growth_and_new_ids_are_fresh(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(4, 2, false, true, 0);
    int32_t ids[100];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_KV, 400, 1, KVB_FMT_F16, ids, 100), 100);
    for (int i = 0; i < 100; i++)
        for (int j = 0; j < i; j++)
            assert_int_not_equal(ids[i], ids[j]);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.n_grown, 98);
    assert_int_equal(s.n_reused, 0);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_shrink_retires_only_free_blocks_and_returns_count(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 8, true, false, 0);   /* K 4 */
    int32_t live[2], ids[8];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 32, 1, KVB_FMT_F16, live, 2), 2);
    assert_int_equal(kvb_shrink(p, KVB_STREAM_K, 1), 1);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 1);
    assert_int_equal(kvb_shrink(p, KVB_STREAM_K, 5), 0);
    assert_int_equal(kvb_shrink(p, KVB_STREAM_K, -1), PSC_EINVAL);
    assert_int_equal(kvb_shrink(p, KVB_STREAM_KV, 0), PSC_EINVAL);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.n_retired, 1);
    assert_int_equal(s.n_blocks, 7);
    assert_int_equal(s.blocks_in_use, 2);
    for (int i = 0; i < 2; i++) {
        kvb_block_t b;
        assert_int_equal(kvb_block_get(p, live[i], &b), 0);
        assert_int_equal(b.owner, 1);
    }
    /* shrink to 0 retires the last free K block; V untouched */
    assert_int_equal(kvb_shrink(p, KVB_STREAM_K, 0), 1);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_V), 4);
    int retired = 0;
    kvb_block_t b;
    for (int32_t id = 0; id < 8; id++)
        if (kvb_block_get(p, id, &b) == PSC_ENOENT)
            retired++;
    assert_int_equal(retired, 2);
    /* retired ids are never handed out again; live blocks still free normally */
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 2, KVB_FMT_F16, ids, 8), PSC_EEXHAUSTED);
    assert_int_equal(kvb_free_all(p, 1), 2);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 32, 2, KVB_FMT_F16, ids, 8), 2);
    assert_true((ids[0] == live[0] || ids[0] == live[1]) && (ids[1] == live[0] || ids[1] == live[1]));
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_free_is_idempotent(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 8, true, false, 0);
    int32_t ids[2];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 20, 1, KVB_FMT_F16, ids, 2), 2);
    assert_int_equal(kvb_free(p, ids, 2), 2);
    assert_int_equal(kvb_free(p, ids, 2), 0);
    int32_t dup[3] = { 0, 0, 0 };
    assert_int_equal(kvb_free(p, dup, 3), 0);
    kvb_stats_t s = stats(p);
    assert_int_equal(s.n_frees, 2);
    assert_int_equal(s.blocks_in_use, 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 4);
    int32_t bad[2] = { ids[0], 99 };
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 1, KVB_FMT_F16, ids, 2), 1);
    bad[0] = ids[0];
    assert_int_equal(kvb_free(p, bad, 2), PSC_EINVAL);   /* nothing freed */
    assert_int_equal(stats(p).blocks_in_use, 1);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_free_all_returns_every_block_and_releases_owner(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 16, true, false, 0);
    int32_t ids[8];
    assert_int_equal(kvb_register_owner(p, 7), 0);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 40, 7, KVB_FMT_F16, ids, 8), 3);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 40, 7, KVB_FMT_F16, ids, 8), 3);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 16, 8, KVB_FMT_F16, ids, 8), 1);
    assert_int_equal(kvb_free_all(p, 7), 6);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 8);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_V), 7);
    assert_int_equal(kvb_blocks_for(p, 7, ids, 8), 0);
    assert_int_equal(kvb_blocks_for(p, 8, ids, 8), 1);
    assert_int_equal(kvb_register_owner(p, 7), 0);      /* released */
    assert_int_equal(kvb_free_all(p, 12345), 0);        /* unknown: no-op */
    assert_int_equal(stats(p).n_frees, 6);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_blocks_for_lists_blocks_in_allocation_order(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 32, true, false, 0);
    int32_t a[3], b[2], c[2], x[2], got[16];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 48, 1, KVB_FMT_F16, a, 3), 3);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 32, 2, KVB_FMT_F16, x, 2), 2);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 32, 1, KVB_FMT_F16, b, 2), 2);
    assert_int_equal(kvb_free(p, &a[1], 1), 1);
    assert_int_equal(kvb_free(p, x, 2), 2);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 32, 1, KVB_FMT_F16, c, 2), 2);
    int32_t want[] = { a[0], a[2], b[0], b[1], c[0], c[1] };
    assert_int_equal(kvb_blocks_for(p, 1, got, 16), 6);
    assert_memory_equal(got, want, sizeof want);
    /* snprintf-style: the full count even when cap is short */
    assert_int_equal(kvb_blocks_for(p, 1, got, 2), 6);
    assert_memory_equal(got, want, 2 * sizeof want[0]);
    kvb_destroy(p);
}

static void test_register_owner_rejects_active_owner_only(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 16, true, false, 0);
    int32_t ids[4];
    assert_int_equal(kvb_register_owner(p, 5), 0);
    assert_int_equal(kvb_register_owner(p, 5), PSC_EOWNER);
    assert_int_equal(kvb_register_owner(p, -1), PSC_EINVAL);
    /* the same request growing is never an error */
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16, 5, KVB_FMT_F16, ids, 4), 1);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16, 5, KVB_FMT_F16, ids, 4), 1);
    /* an owner made active by allocate collides too */
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16, 6, KVB_FMT_F16, ids, 4), 1);
    assert_int_equal(kvb_register_owner(p, 6), PSC_EOWNER);
    /* release keeps the blocks but frees the id */
    assert_int_equal(kvb_release_owner(p, 5), 0);
    assert_int_equal(kvb_blocks_for(p, 5, ids, 4), 2);
    assert_int_equal(stats(p).blocks_in_use, 3);
    assert_int_equal(kvb_register_owner(p, 5), 0);
    assert_int_equal(kvb_release_owner(p, 5), 0);
    assert_int_equal(kvb_release_owner(p, 999), 0);     /* unknown: no-op */
    assert_int_equal(kvb_check(p), 0);
    /* free of the last block of a released owner forgets it */
    assert_int_equal(kvb_blocks_for(p, 5, ids, 4), 2);
    assert_int_equal(kvb_free(p, ids, 2), 2);
    assert_int_equal(kvb_blocks_for(p, 5, ids, 4), 0);
    assert_int_equal(kvb_check(p), 0);
    /* free of every block of an active owner keeps it active */
    assert_int_equal(kvb_blocks_for(p, 6, ids, 4), 1);
    assert_int_equal(kvb_free(p, ids, 1), 1);
    assert_int_equal(kvb_register_owner(p, 6), PSC_EOWNER);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_many_owners_survive_table_growth_and_deletes(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(1, 2000, true, false, 0);
    int32_t id;
    for (int64_t o = 0; o < 900; o++)
        assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, o * 7919, KVB_FMT_F16, &id, 1), 1);
    for (int64_t o = 0; o < 900; o += 3)
        assert_int_equal(kvb_free_all(p, o * 7919), 1);
    assert_int_equal(kvb_check(p), 0);
    for (int64_t o = 0; o < 900; o++)
        assert_int_equal(kvb_blocks_for(p, o * 7919, NULL, 0), o % 3 ? 1 : 0);
    kvb_destroy(p);
}

static void test_separate_kv_on_uses_two_free_lists_and_odd_count_favours_k(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 5, true, false, 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 3);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_V), 2);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_KV), PSC_EINVAL);
    int32_t ids[4];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 32, 1, KVB_FMT_F16, ids, 4), 2);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 1, 1, KVB_FMT_F16, ids, 4), PSC_EEXHAUSTED);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 3);   /* V pressure does not touch K */
    kvb_block_t b;
    assert_int_equal(kvb_block_get(p, ids[0], &b), 0);
    assert_int_equal(b.stream, KVB_STREAM_V);
    kvb_destroy(p);
    p = mkpool(16, 1, true, false, 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 1);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_V), 0);
    kvb_destroy(p);
}

static void test_separate_kv_off_treats_k_and_v_as_kv(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 5, false, false, 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_KV), 5);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 5);
    int32_t ids[4];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 32, 1, KVB_FMT_F16, ids, 4), 2);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_V, 32, 1, KVB_FMT_F16, ids + 2, 2), 2);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_V), 1);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_KV), 1);
    kvb_block_t b;
    assert_int_equal(kvb_block_get(p, ids[3], &b), 0);
    assert_int_equal(b.stream, KVB_STREAM_KV);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_KV, 1, 2, KVB_FMT_F16, ids, 4), 1);
    assert_int_equal(kvb_allocate(p, (kvb_stream_t)3, 1, 2, KVB_FMT_F16, ids, 4), PSC_EINVAL);
    kvb_destroy(p);
}

static void test_set_used_moves_fragmentation(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 10, true, false, 0);
    int32_t ids[2];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 17, 1, KVB_FMT_F16, ids, 2), 2);
    assert_true(stats(p).fragmentation == 1.0 / 10.0);
    assert_int_equal(kvb_set_used(p, ids[1], 16), 0);
    assert_true(stats(p).fragmentation == 0.0);
    assert_int_equal(kvb_set_used(p, ids[0], 3), 0);
    assert_int_equal(kvb_set_used(p, ids[1], 0), 0);
    assert_true(stats(p).fragmentation == 2.0 / 10.0);
    assert_int_equal(kvb_set_used(p, ids[0], 17), PSC_EINVAL);
    assert_int_equal(kvb_set_used(p, ids[0], -1), PSC_EINVAL);
    assert_int_equal(kvb_set_used(p, 4242, 1), PSC_ENOENT);
    assert_int_equal(kvb_free(p, ids, 2), 2);
    assert_int_equal(kvb_set_used(p, ids[0], 1), PSC_EINVAL);   /* free block */
    assert_true(stats(p).fragmentation == 0.0);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

/* ---- history and Prometheus ---------------------------------------------------- */

static void test_history_keeps_last_256_snapshots_oldest_first(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(1, 400, false, false, 0);
    int32_t id;
    for (int i = 0; i < 300; i++)
        assert_int_equal(kvb_allocate(p, KVB_STREAM_KV, 1, 1, KVB_FMT_F16, &id, 1), 1);
    static kvb_stats_t h[300];
    assert_int_equal(kvb_history(p, h, 300), KVB_HISTORY_LEN);
    for (int i = 0; i < KVB_HISTORY_LEN; i++)
        assert_int_equal(h[i].n_allocations, 300 - KVB_HISTORY_LEN + 1 + i);
    /* a short buffer gets the most recent ones */
    assert_int_equal(kvb_history(p, h, 2), 2);
    assert_int_equal(h[0].n_allocations, 299);
    assert_int_equal(h[1].n_allocations, 300);
    /* snapshots are detached copies */
    assert_int_equal(kvb_free_all(p, 1), 300);
    assert_int_equal(kvb_history(p, h, 2), 2);
    assert_int_equal(h[0].n_allocations, 300);
    assert_int_equal(h[0].n_frees, 0);
    assert_int_equal(h[1].n_frees, 300);
    kvb_destroy(p);
}

static void test_every_mutating_call_appends_one_snapshot(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 4, true, false, 0);
    int32_t ids[4];
    int n = 0;
    assert_int_equal(kvb_register_owner(p, 1), 0);                      n++;
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16, 1, 0, ids, 4), 1); n++;
    assert_int_equal(kvb_set_used(p, ids[0], 3), 0);                    n++;
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 48, 1, 0, ids + 1, 3), PSC_EEXHAUSTED); n++;
    assert_int_equal(kvb_free(p, ids, 1), 1);                           n++;
    assert_int_equal(kvb_free_all(p, 1), 0);                            n++;
    assert_int_equal(kvb_release_owner(p, 1), 0);                       n++;
    assert_int_equal(kvb_shrink(p, KVB_STREAM_V, 1), 1);                n++;
    assert_int_equal(hist_len(p), n);
    /* rejected calls and reads append nothing */
    assert_int_equal(kvb_register_owner(p, -4), PSC_EINVAL);
    assert_int_equal(kvb_shrink(p, KVB_STREAM_V, -1), PSC_EINVAL);
    assert_int_equal(kvb_set_used(p, ids[0], 3), PSC_EINVAL);
    (void)kvb_n_free(p, KVB_STREAM_K);
    (void)stats(p);
    assert_int_equal(hist_len(p), n);
    kvb_destroy(p);
}

static const char *find_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *s = text; (s = strstr(s, line)) != NULL; s++)
        if ((s == text || s[-1] == '\n') && s[n] == '\n')
            return s;
    return NULL;
}

static void test_prometheus_text_has_help_type_and_values(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 64, true, false, 0);
    int32_t ids[4];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 40, 1, KVB_FMT_F16, ids, 4), 3);
    assert_int_equal(kvb_free(p, ids, 1), 1);
    kvb_stats_t s = stats(p);
    char buf[4096];
    int n = kvb_stats_prometheus(&s, NULL, buf, sizeof buf);
    assert_true(n > 0 && (size_t)n < sizeof buf);
    assert_int_equal((int)strlen(buf), n);
    assert_int_equal(buf[n - 1], '\n');
    const char *want[] = {
        "# TYPE poolscope_block_pool_blocks_in_use gauge",
        "poolscope_block_pool_blocks_in_use 2",
        "# TYPE poolscope_block_pool_blocks_managed gauge",
        "poolscope_block_pool_blocks_managed 64",
        "# TYPE poolscope_block_pool_fragmentation gauge",
        "poolscope_block_pool_fragmentation 0.015625",
        "# TYPE poolscope_block_pool_peak_blocks_in_use gauge",
        "poolscope_block_pool_peak_blocks_in_use 3",
        "# TYPE poolscope_block_pool_allocations_total counter",
        "poolscope_block_pool_allocations_total 3",
        "# TYPE poolscope_block_pool_frees_total counter",
        "poolscope_block_pool_frees_total 1",
        "# TYPE poolscope_block_pool_reused_total counter",
        "poolscope_block_pool_reused_total 0",
        "# TYPE poolscope_block_pool_exhausted_total counter",
        "poolscope_block_pool_exhausted_total 0",
        "# TYPE poolscope_block_pool_grown_total counter",
        "poolscope_block_pool_grown_total 0",
        "# TYPE poolscope_block_pool_retired_total counter",
        "poolscope_block_pool_retired_total 0",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        assert_non_null(find_line(buf, want[i]));
    int help = 0;
    for (const char *q = buf; (q = strstr(q, "# HELP poolscope_block_pool_")) != NULL; q++)
        help++;
    assert_int_equal(help, 10);
    /* snprintf-style truncation */
    char small[32];
    assert_int_equal(kvb_stats_prometheus(&s, NULL, small, sizeof small), n);
    assert_int_equal((int)strlen(small), (int)sizeof small - 1);
    assert_int_equal(kvb_stats_prometheus(&s, NULL, NULL, 0), n);
    /* prefixes */
    assert_true(kvb_stats_prometheus(&s, "vq", buf, sizeof buf) > 0);
    assert_non_null(find_line(buf, "vq_allocations_total 3"));
    assert_int_equal(kvb_stats_prometheus(&s, "9bad", buf, sizeof buf), PSC_EINVAL);
    assert_int_equal(kvb_stats_prometheus(&s, "a b", buf, sizeof buf), PSC_EINVAL);
    assert_int_equal(kvb_stats_prometheus(&s, "", buf, sizeof buf), PSC_EINVAL);
    kvb_destroy(p);
}

/* ---- observer -------------------------------------------------------------------- */

#define RB_MAX (1 << 16)

struct rebuild {
    int32_t bs;
    int64_t n_blocks, alloc, frees, reused, exh, grown, retired, peak;
    uint64_t next_seq;
    int      seq_ok;
    int      kinds[16];
    int      id_overflow;
    int32_t  n_used[RB_MAX];
    uint8_t  owned[RB_MAX], ever[RB_MAX];
};

static void rb_observe(void *ctx, const kvb_event_t *ev)
{
    struct rebuild *r = ctx;
    if (ev->seq != r->next_seq)
        r->seq_ok = 0;
    r->next_seq = ev->seq + 1;
    r->kinds[ev->kind]++;
    switch (ev->kind) {
    case KVB_EV_CREATE:
        r->bs = ev->config->block_size;
        r->n_blocks = ev->config->n_blocks;
        break;
    case KVB_EV_ALLOCATE: {
        int64_t left = ev->n_tokens;
        for (int32_t i = 0; i < ev->n_ids; i++) {
            int32_t id = ev->ids[i];
            if (id >= RB_MAX) {
                r->id_overflow = 1;
                continue;
            }
            r->n_used[id] = left >= r->bs ? r->bs : (int32_t)left;
            left -= r->n_used[id];
            r->owned[id] = 1;
            if (r->ever[id])
                r->reused++;
            r->ever[id] = 1;
        }
        r->alloc += ev->n_ids;
        if (r->alloc - r->frees > r->peak)
            r->peak = r->alloc - r->frees;
        break;
    }
    case KVB_EV_TOKENS:
        if (ev->block >= RB_MAX)
            r->id_overflow = 1;
        else
            r->n_used[ev->block] = ev->n_used;
        break;
    case KVB_EV_FREE:
        for (int32_t i = 0; i < ev->n_ids; i++) {
            if (ev->ids[i] >= RB_MAX) {
                r->id_overflow = 1;
                continue;
            }
            r->owned[ev->ids[i]] = 0;
            r->n_used[ev->ids[i]] = 0;
        }
        r->frees += ev->n_ids;
        break;
    case KVB_EV_GROW:
        r->n_blocks += ev->n_ids;
        r->grown += ev->n_ids;
        break;
    case KVB_EV_SHRINK:
        r->n_blocks -= ev->n_ids;
        r->retired += ev->n_ids;
        break;
    case KVB_EV_EXHAUSTED:
        r->exh++;
        break;
    case KVB_EV_OWNER_REGISTER:
    case KVB_EV_OWNER_RELEASE:
        break;
    }
}

static void test_observer_events_rebuild_the_stats_exactly(void **st)
{
    (void)st;
    static struct rebuild r;
    memset(&r, 0, sizeof r);
    r.seq_ok = 1;
    kvb_config_t c = kvb_config_default();
    c.block_size = 8;
    c.n_blocks = 40;
    c.grow_on_exhaustion = true;
    c.max_blocks = 600;
    c.observe = rb_observe;
    c.observe_ctx = &r;
    kvb_pool_t *p = kvb_create(&c, NULL);
    assert_non_null(p);
    srand(7);
    int32_t ids[64];
    for (int step = 0; step < 3000; step++) {
        int64_t owner = rand() % 12;
        int op = rand() % 10;
        if (op < 5) {
            int rc = kvb_allocate(p, rand() % 2 ? KVB_STREAM_K : KVB_STREAM_V,
                                  1 + rand() % 100, owner, KVB_FMT_INT4, ids, 64);
            assert_true(rc > 0 || rc == PSC_EEXHAUSTED);
        } else if (op < 7) {
            int n = kvb_blocks_for(p, owner, ids, 64);
            if (n > 0)
                assert_int_equal(kvb_free(p, &ids[rand() % (n < 64 ? n : 64)], 1), 1);
        } else if (op < 8) {
            assert_true(kvb_free_all(p, owner) >= 0);
        } else if (op < 9) {
            int n = kvb_blocks_for(p, owner, ids, 64);
            if (n > 0)
                assert_int_equal(kvb_set_used(p, ids[rand() % (n < 64 ? n : 64)], rand() % 9), 0);
        } else {
            assert_true(kvb_shrink(p, rand() % 2 ? KVB_STREAM_K : KVB_STREAM_V, rand() % 20) >= 0);
        }
        if (step % 100 == 0)
            assert_int_equal(kvb_check(p), 0);
    }
    kvb_stats_t s = stats(p);
    int64_t partial = 0;
    for (int i = 0; i < RB_MAX; i++)
        partial += r.owned[i] && r.n_used[i] < r.bs;
    assert_true(r.seq_ok);
    assert_false(r.id_overflow);
    assert_int_equal(r.kinds[KVB_EV_CREATE], 1);
    assert_true(r.kinds[KVB_EV_GROW] > 0 && r.kinds[KVB_EV_SHRINK] > 0 && r.kinds[KVB_EV_EXHAUSTED] > 0);
    assert_int_equal(s.n_blocks, r.n_blocks);
    assert_int_equal(s.n_allocations, r.alloc);
    assert_int_equal(s.n_frees, r.frees);
    assert_int_equal(s.n_reused, r.reused);
    assert_int_equal(s.n_exhausted, r.exh);
    assert_int_equal(s.n_grown, r.grown);
    assert_int_equal(s.n_retired, r.retired);
    assert_int_equal(s.peak_blocks_in_use, r.peak);
    assert_int_equal(s.blocks_partial, partial);
    assert_true(s.fragmentation == (double)partial / (double)r.n_blocks);
    kvb_destroy(p);
}

static void test_observer_sees_owner_and_exhaustion_events_in_order(void **st)
{
    (void)st;
    static struct rebuild r;
    memset(&r, 0, sizeof r);
    r.seq_ok = 1;
    kvb_config_t c = kvb_config_default();
    c.n_blocks = 2;
    c.observe = rb_observe;
    c.observe_ctx = &r;
    kvb_pool_t *p = kvb_create(&c, NULL);
    int32_t ids[4];
    assert_int_equal(kvb_register_owner(p, 3), 0);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 10, 3, KVB_FMT_F16, ids, 4), 1);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 10, 4, KVB_FMT_F16, ids, 4), PSC_EEXHAUSTED);
    assert_int_equal(kvb_free_all(p, 3), 1);
    assert_true(r.seq_ok);
    assert_int_equal(r.next_seq, 6);   /* create, register, allocate, exhausted, free, release */
    assert_int_equal(r.kinds[KVB_EV_OWNER_REGISTER], 1);
    assert_int_equal(r.kinds[KVB_EV_OWNER_RELEASE], 1);
    assert_int_equal(r.kinds[KVB_EV_EXHAUSTED], 1);
    kvb_destroy(p);
}

/* ---- storage -------------------------------------------------------------------- */

static kvb_pool_t *mkstore(int32_t bs, int32_t n, size_t row_elems, bool grow,
                           struct counting *cnt)
{
    kvb_config_t c = kvb_config_default();
    c.block_size = bs;
    c.n_blocks = n;
    c.row_elems = row_elems;
    c.grow_on_exhaustion = grow;
    if (cnt)
        c.alloc = (kvb_alloc_t){ c_alloc, c_free, cnt };
    kvb_pool_t *p = kvb_create(&c, NULL);
    assert_non_null(p);
    return p;
}

static void test_zero_allocator_calls_when_writing_blocks(void **st)
{
    (void)st;
    struct counting cnt = { 0, 0, 0, 0 };
    kvb_pool_t *p = mkstore(16, 64, 128, false, &cnt);
    int32_t ids[32];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16 * 32, 1, KVB_FMT_F32, ids, 32), 32);
    long calls = cnt.calls;
    int maps = kvb_storage_mappings(p);
    assert_int_equal(maps, 1);
    static float row[16 * 128];
    for (int i = 0; i < 16 * 128; i++)
        row[i] = (float)i;
    for (int rep = 0; rep < 3; rep++)
        for (int i = 0; i < 32; i++) {
            assert_int_equal(kvb_write(p, ids[i], 0, row, 16), 0);
            float *s = kvb_slot(p, ids[i]);
            assert_non_null(s);
            s[5] = 1.0f;
        }
    assert_int_equal(cnt.calls, calls);
    assert_int_equal(kvb_storage_mappings(p), maps);
    kvb_destroy(p);
    assert_int_equal(cnt.live, 0);
}

static void test_growth_maps_new_storage_at_grow_time(void **st)
{
    (void)st;
    kvb_pool_t *p = mkstore(4, 2, 16, true, NULL);
    assert_int_equal(kvb_storage_mappings(p), 1);
    int32_t ids[8];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 4 * 5, 1, KVB_FMT_F32, ids, 8), 5);
    assert_int_equal(kvb_storage_mappings(p), 2);
    static float rows[4 * 16];
    for (int i = 0; i < 5; i++) {
        rows[0] = (float)(100 + i);
        assert_int_equal(kvb_write(p, ids[i], 0, rows, 4), 0);
    }
    assert_int_equal(kvb_storage_mappings(p), 2);
    for (int i = 0; i < 5; i++) {
        const void *r;
        int32_t n;
        assert_int_equal(kvb_read(p, ids[i], &r, &n), 0);
        assert_int_equal(n, 4);
        assert_true(((const float *)r)[0] == (float)(100 + i));
    }
    kvb_destroy(p);
}

static void test_write_past_block_size_is_a_range_error(void **st)
{
    (void)st;
    kvb_pool_t *p = mkstore(16, 8, 8, false, NULL);
    int32_t id;
    static float rows[17 * 8];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 1, KVB_FMT_F32, &id, 1), 1);
    assert_int_equal(kvb_write(p, id, 0, rows, 17), PSC_ERANGE);
    assert_int_equal(kvb_write(p, id, 10, rows, 7), PSC_ERANGE);
    assert_int_equal(kvb_write(p, id, 16, rows, 1), PSC_ERANGE);
    assert_int_equal(kvb_write(p, id, 10, rows, 6), 0);
    assert_int_equal(kvb_write(p, id, -1, rows, 1), PSC_EINVAL);
    assert_int_equal(kvb_write(p, 99, 0, rows, 1), PSC_ENOENT);
    kvb_block_t b;
    assert_int_equal(kvb_block_get(p, id, &b), 0);
    assert_int_equal(b.n_used, 16);
    assert_int_equal(kvb_free(p, &id, 1), 1);
    assert_int_equal(kvb_write(p, id, 0, rows, 1), PSC_EINVAL);   /* free block */
    kvb_destroy(p);
    /* no storage configured */
    p = mkpool(16, 8, true, false, 0);
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 1, 1, KVB_FMT_F32, &id, 1), 1);
    assert_int_equal(kvb_write(p, id, 0, rows, 1), PSC_EINVAL);
    assert_null(kvb_slot(p, id));
    assert_int_equal(kvb_slot_bytes(p), 0);
    kvb_destroy(p);
}

static void test_read_returns_the_used_slice_at_the_format_stride(void **st)
{
    (void)st;
    kvb_pool_t *p = mkstore(8, 4, 10, false, NULL);
    assert_int_equal(kvb_row_bytes(p, KVB_FMT_F32), 40);
    assert_int_equal(kvb_row_bytes(p, KVB_FMT_F16), 20);
    assert_int_equal(kvb_row_bytes(p, KVB_FMT_INT4), 5);
    assert_int_equal(kvb_row_bytes(p, KVB_FMT_INT1), 2);
    assert_true(kvb_slot_bytes(p) >= 8 * 40);
    assert_int_equal(kvb_slot_bytes(p) % (size_t)sysconf(_SC_PAGESIZE), 0);
    int32_t id;
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 2, 1, KVB_FMT_INT8, &id, 1), 1);
    unsigned char rows[3 * 10];
    for (int i = 0; i < 30; i++)
        rows[i] = (unsigned char)i;
    assert_int_equal(kvb_write(p, id, 2, rows, 3), 0);
    const unsigned char *r;
    int32_t n;
    assert_int_equal(kvb_read(p, id, (const void **)&r, &n), 0);
    assert_int_equal(n, 5);
    assert_memory_equal(r + 2 * 10, rows, 30);
    assert_ptr_equal(r, kvb_slot(p, id));
    kvb_destroy(p);
}

static void test_format_change_reuses_the_same_slot(void **st)
{
    (void)st;
    struct counting cnt = { 0, 0, 0, 0 };
    kvb_pool_t *p = mkstore(16, 2, 64, false, &cnt);
    int32_t a, b;
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16, 1, KVB_FMT_INT2, &a, 1), 1);
    void *sa = kvb_slot(p, a);
    static float rows[16 * 64];
    assert_int_equal(kvb_free(p, &a, 1), 1);
    long calls = cnt.calls;
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 16, 1, KVB_FMT_F32, &b, 1), 1);
    assert_int_equal(b, a);
    assert_ptr_equal(kvb_slot(p, b), sa);
    assert_int_equal(kvb_write(p, b, 0, rows, 16), 0);           /* full f32 block fits */
    assert_int_equal(cnt.calls, calls);
    kvb_destroy(p);
}

static int page_resident(const void *addr)
{
    unsigned char v = 0;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    void *base = (void *)((uintptr_t)addr & ~(uintptr_t)(pg - 1));
    assert_int_equal(mincore(base, pg, &v), 0);
    return v & 1;
}

static void test_resident_bytes_follow_writes_and_release_gives_pages_back(void **st)
{
    (void)st;
    kvb_pool_t *p = mkstore(16, 8, 256, false, NULL);
    size_t slot = kvb_slot_bytes(p);
    assert_int_equal(kvb_resident_bytes(p), 0);
    int32_t ids[3];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 48, 1, KVB_FMT_F32, ids, 3), 3);
    assert_int_equal(kvb_resident_bytes(p), 0);     /* allocated, never written */
    static float rows[16 * 256];
    for (int i = 0; i < 16 * 256; i++)
        rows[i] = 1.0f;
    assert_int_equal(kvb_write(p, ids[0], 0, rows, 16), 0);
    assert_int_equal(kvb_write(p, ids[1], 0, rows, 1), 0);
    assert_int_equal(kvb_write(p, ids[1], 1, rows, 1), 0);
    assert_int_equal(kvb_resident_bytes(p), (int64_t)(2 * slot));
    const void *r;
    int32_t n;
    assert_int_equal(kvb_read(p, ids[0], &r, &n), 0);
    assert_true(page_resident(r));
    assert_int_equal(kvb_release(p, ids[0]), PSC_EBUSY);        /* still checked out */
    assert_int_equal(kvb_free(p, ids, 1), 1);
    assert_int_equal(kvb_resident_bytes(p), (int64_t)(2 * slot)); /* free keeps pages */
    assert_int_equal(kvb_release(p, ids[0]), 0);
    assert_int_equal(kvb_resident_bytes(p), (int64_t)slot);
    assert_false(page_resident(r));
    assert_true(((const float *)r)[0] == 0.0f);                /* reads as zero */
    assert_int_equal(kvb_release(p, 1000), PSC_ENOENT);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_shrink_gives_retired_storage_back(void **st)
{
    (void)st;
    kvb_pool_t *p = mkstore(16, 4, 256, false, NULL);   /* K 2 */
    int32_t ids[2];
    static float rows[16 * 256];
    assert_int_equal(kvb_allocate(p, KVB_STREAM_K, 32, 1, KVB_FMT_F32, ids, 2), 2);
    assert_int_equal(kvb_write(p, ids[0], 0, rows, 16), 0);
    assert_int_equal(kvb_write(p, ids[1], 0, rows, 16), 0);
    assert_int_equal(kvb_free_all(p, 1), 2);
    assert_int_equal(kvb_shrink(p, KVB_STREAM_K, 0), 2);
    assert_int_equal(kvb_resident_bytes(p), 0);
    assert_null(kvb_slot(p, ids[0]));
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

/* ---- allocation failure ------------------------------------------------------------ */

/* Runs a workload touching every entry point that allocates; every call must
 * either work or fail cleanly with PSC_ENOMEM leaving the pool unchanged.
 * Returns 1 if an injected failure was hit. */
static int failure_scenario(long fail_at)
{
    struct counting cnt = { 0, 0, 0, fail_at };
    kvb_config_t c = kvb_config_default();
    c.block_size = 4;
    c.n_blocks = 8;
    c.grow_on_exhaustion = true;
    c.row_elems = 8;
    c.alloc = (kvb_alloc_t){ c_alloc, c_free, &cnt };
    int err = 0;
    kvb_pool_t *p = kvb_create(&c, &err);
    if (!p) {
        assert_int_equal(err, PSC_ENOMEM);
        assert_int_equal(cnt.live, 0);
        return 1;
    }
    int hit = 0;
    int32_t ids[64];
    for (int64_t o = 0; o < 80; o++) {
        kvb_stats_t before = stats(p);
        int nf = kvb_n_free(p, KVB_STREAM_K);
        int rc = o % 2 ? kvb_register_owner(p, o)
                       : kvb_allocate(p, KVB_STREAM_K, 1 + o % 9, o, KVB_FMT_F16, ids, 64);
        if (rc == PSC_ENOMEM) {
            hit = 1;
            kvb_stats_t after = stats(p);
            assert_memory_equal(&before, &after, sizeof before);
            assert_int_equal(kvb_n_free(p, KVB_STREAM_K), nf);
            assert_int_equal(kvb_blocks_for(p, o, NULL, 0), 0);
        } else {
            assert_true(rc >= 0);
        }
        assert_int_equal(kvb_check(p), 0);
        if (o % 5 == 0)
            assert_true(kvb_free_all(p, o / 2) >= 0);
        if (o % 17 == 0)
            assert_true(kvb_shrink(p, KVB_STREAM_K, 2) >= 0);
    }
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
    assert_int_equal(cnt.live, 0);
    int failed = fail_at && cnt.calls >= fail_at;
    assert_int_equal(cnt.calls - failed, cnt.frees);
    return hit || failed;
}

static void test_every_meta_allocation_failure_is_clean(void **st)
{
    (void)st;
    long n;
    for (n = 1; n < 10000; n++)
        if (!failure_scenario(n))
            break;
    assert_true(n > 5);      /* create and the workload did allocate */
    assert_true(n < 10000);
}

/* ---- threads ------------------------------------------------------------------------ */

struct worker {
    kvb_pool_t *p;
    int         tid;
    int         errors;
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    unsigned seed = (unsigned)w->tid * 2654435761u + 1;
    int32_t ids[64];
    static const float rows[8 * 4];
    for (int i = 0; i < 4000; i++) {
        int64_t owner = w->tid * 1000 + (int64_t)(rand_r(&seed) % 4);
        int op = (int)(rand_r(&seed) % 8);
        int rc;
        if (op < 4) {
            rc = kvb_allocate(w->p, rand_r(&seed) % 2 ? KVB_STREAM_K : KVB_STREAM_V,
                              1 + rand_r(&seed) % 40, owner, KVB_FMT_F32, ids, 64);
            if (rc > 0 && kvb_write(w->p, ids[0], 0, rows, 1) != 0)
                w->errors++;
            else if (rc < 0 && rc != PSC_EEXHAUSTED)
                w->errors++;
        } else if (op < 6) {
            int n = kvb_blocks_for(w->p, owner, ids, 64);
            if (n > 0 && kvb_free(w->p, ids, n < 64 ? n : 64) < 1)
                w->errors++;
        } else if (op < 7) {
            if (kvb_free_all(w->p, owner) < 0)
                w->errors++;
        } else {
            kvb_stats_t s;
            if (kvb_stats(w->p, &s) != 0 || s.blocks_in_use > s.n_blocks)
                w->errors++;
            if (i % 200 == 0 && kvb_check(w->p) != 0)
                w->errors++;
        }
    }
    for (int64_t o = 0; o < 4; o++)
        if (kvb_free_all(w->p, w->tid * 1000 + o) < 0)
            w->errors++;
    return NULL;
}

static void count_events(void *ctx, const kvb_event_t *ev)
{
    (void)ev;
    (*(long *)ctx)++;
}

static void test_threads_allocating_for_their_own_owners_keep_the_pool_consistent(void **st)
{
    (void)st;
    long events = 0;
    kvb_config_t c = kvb_config_default();
    c.block_size = 8;
    c.n_blocks = 64;
    c.grow_on_exhaustion = true;
    c.max_blocks = 256;
    c.row_elems = 4;
    c.observe = count_events;
    c.observe_ctx = &events;
    kvb_pool_t *p = kvb_create(&c, NULL);
    assert_non_null(p);
    enum { NT = 4 };
    pthread_t th[NT];
    struct worker w[NT];
    for (int i = 0; i < NT; i++) {
        w[i] = (struct worker){ p, i + 1, 0 };
        assert_int_equal(pthread_create(&th[i], NULL, worker_run, &w[i]), 0);
    }
    for (int i = 0; i < NT; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].errors, 0);
    }
    kvb_stats_t s = stats(p);
    assert_int_equal(s.blocks_in_use, 0);
    assert_int_equal(s.n_allocations, s.n_frees);
    assert_true(s.n_blocks <= 256);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K) + kvb_n_free(p, KVB_STREAM_V), s.n_blocks);
    assert_true(events > 0);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

/* ---- the invariant walker sees corruption ------------------------------------------ */

/* 8 blocks, K and V lists of 4; owner 1 holds two K blocks (16 and 4 tokens). */
typedef struct corrupt_fix {
    kvb_pool_t *p;
    int32_t ids[2];
} corrupt_fix_t;

static corrupt_fix_t corrupt_fix(void)
{
    corrupt_fix_t f;
    f.p = mkpool(16, 8, true, false, 0);
    assert_int_equal(kvb_allocate(f.p, KVB_STREAM_K, 20, 1, KVB_FMT_F16, f.ids, 2), 2);
    assert_int_equal(kvb_check(f.p), 0);
    return f;
}

/* kvb_check is what the debug build runs after every change: it must see a
 * count that disagrees with the lists, a cycle in a free list, and a
 * partial-block count that disagrees with the records. */
static void test_walker_catches_corrupt_counts_and_free_list(void **st)
{
    (void)st;
    corrupt_fix_t f = corrupt_fix();
    f.p->n_free[0]--;
    assert_int_equal(kvb_check(f.p), PSC_ECORRUPT);
    f.p->n_free[0]++;
    assert_int_equal(kvb_check(f.p), 0);
    int32_t top = f.p->top[0], next = f.p->blk[top].next;
    f.p->blk[top].next = top;
    assert_int_equal(kvb_check(f.p), PSC_ECORRUPT);
    f.p->blk[top].next = next;
    f.p->n_partial++;
    assert_int_equal(kvb_check(f.p), PSC_ECORRUPT);
    f.p->n_partial--;
    assert_int_equal(kvb_check(f.p), 0);
    assert_int_equal(kvb_free_all(f.p, 1), 2);
    assert_int_equal(kvb_check(f.p), 0);
    kvb_destroy(f.p);
}

#if PS_DEBUG
/* Runs fn(arg) in a child process, which must abort with `want` in its
 * stderr: the debug build's check fired and named the invariant. The
 * child calls no cmocka assertion (a failing one would go on running the
 * suite in the child). */
static void expect_invariant_abort(void (*fn)(void *), void *arg, const char *want)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct rlimit no_core = {0, 0};
        setrlimit(RLIMIT_CORE, &no_core);
        dup2(fd[1], 2);
        close(fd[0]);
        fn(arg);
        _exit(0);                                 /* no abort: the parent fails */
    }
    close(fd[1]);
    char msg[1024];
    size_t n = 0;
    ssize_t k;
    while (n < sizeof msg - 1 && (k = read(fd[0], msg + n, sizeof msg - 1 - n)) > 0)
        n += (size_t)k;
    msg[n] = '\0';
    close(fd[0]);
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT || !strstr(msg, want))
        fail_msg("expected an abort naming \"%s\"; status %#x, stderr: %s", want, status, msg);
}

static void fill_after_count_corruption(void *arg)
{
    corrupt_fix_t *f = arg;
    f->p->n_partial++;
    (void)kvb_set_used(f->p, f->ids[1], 16);     /* the partial block fills: the walk at its unlock */
}

static void free_after_free_list_corruption(void *arg)
{
    corrupt_fix_t *f = arg;
    int32_t top = f->p->top[0];
    f->p->blk[top].next = top;
    (void)kvb_free(f->p, f->ids, 2);
}

/* The debug build: the change after the corruption aborts, naming it. */
static void test_debug_build_aborts_at_the_change_after_corruption(void **st)
{
    (void)st;
    corrupt_fix_t f = corrupt_fix();
    expect_invariant_abort(fill_after_count_corruption, &f,
                           "invariant broken in KV block pool: the partial-block count differs from the records");
    expect_invariant_abort(free_after_free_list_corruption, &f,
                           "invariant broken in KV block pool: a free list is longer than its free count");
    assert_int_equal(kvb_check(f.p), 0);          /* the children's corruption stayed there */
    assert_int_equal(kvb_free(f.p, f.ids, 2), 2);
    kvb_destroy(f.p);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_example_40_tokens_take_three_of_64_blocks),
        cmocka_unit_test(test_walker_catches_corrupt_counts_and_free_list),
#if PS_DEBUG
        cmocka_unit_test(test_debug_build_aborts_at_the_change_after_corruption),
#endif
        cmocka_unit_test(test_config_default_matches_seed),
        cmocka_unit_test(test_invalid_config_is_rejected),
        cmocka_unit_test(test_formats_have_bits_and_names),
        cmocka_unit_test(test_bad_allocate_arguments_change_nothing),
        cmocka_unit_test(test_exhausted_allocate_hands_out_nothing),
        cmocka_unit_test(test_just_freed_block_is_handed_out_first),
        cmocka_unit_test(test_reuse_counts_only_blocks_handed_out_before),
        cmocka_unit_test(test_growth_adds_just_enough_and_stops_at_max_blocks),
        cmocka_unit_test(test_unbounded_growth_and_new_ids_are_fresh),
        cmocka_unit_test(test_shrink_retires_only_free_blocks_and_returns_count),
        cmocka_unit_test(test_free_is_idempotent),
        cmocka_unit_test(test_free_all_returns_every_block_and_releases_owner),
        cmocka_unit_test(test_blocks_for_lists_blocks_in_allocation_order),
        cmocka_unit_test(test_register_owner_rejects_active_owner_only),
        cmocka_unit_test(test_many_owners_survive_table_growth_and_deletes),
        cmocka_unit_test(test_separate_kv_on_uses_two_free_lists_and_odd_count_favours_k),
        cmocka_unit_test(test_separate_kv_off_treats_k_and_v_as_kv),
        cmocka_unit_test(test_set_used_moves_fragmentation),
        cmocka_unit_test(test_history_keeps_last_256_snapshots_oldest_first),
        cmocka_unit_test(test_every_mutating_call_appends_one_snapshot),
        cmocka_unit_test(test_prometheus_text_has_help_type_and_values),
        cmocka_unit_test(test_observer_events_rebuild_the_stats_exactly),
        cmocka_unit_test(test_observer_sees_owner_and_exhaustion_events_in_order),
        cmocka_unit_test(test_zero_allocator_calls_when_writing_blocks),
        cmocka_unit_test(test_growth_maps_new_storage_at_grow_time),
        cmocka_unit_test(test_write_past_block_size_is_a_range_error),
        cmocka_unit_test(test_read_returns_the_used_slice_at_the_format_stride),
        cmocka_unit_test(test_format_change_reuses_the_same_slot),
        cmocka_unit_test(test_resident_bytes_follow_writes_and_release_gives_pages_back),
        cmocka_unit_test(test_shrink_gives_retired_storage_back),
        cmocka_unit_test(test_every_meta_allocation_failure_is_clean),
        cmocka_unit_test(test_threads_allocating_for_their_own_owners_keep_the_pool_consistent),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
