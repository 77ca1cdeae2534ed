/* test_kvcache.c — the KV cache on the block pool: block-sized growth, the
 * block table, per-block token counts, release, rollback and failure. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "poolscope/blockpool.h"

enum { ROW = 8 };   /* elements per token row in these tests */

struct counting {
    long calls, live, fail_at;
};

static void *c_alloc(void *ctx, size_t n)
{
    struct counting *c = ctx;
    if (++c->calls == c->fail_at)
        return NULL;
    void *p = malloc(n);
    if (p)
        c->live++;
    return p;
}

static void c_free(void *ctx, void *p)
{
    struct counting *c = ctx;
    c->live--;
    free(p);
}

static kvb_pool_t *mkpool(int32_t bs, int32_t n, bool sep, size_t row, struct counting *cnt)
{
    kvb_config_t c = kvb_config_default();
    c.block_size = bs;
    c.n_blocks = n;
    c.separate_kv = sep;
    c.row_elems = row;
    if (cnt)
        c.alloc = (kvb_alloc_t){ c_alloc, c_free, cnt };
    kvb_pool_t *p = kvb_create(&c, NULL);
    assert_non_null(p);
    return p;
}

static kvb_stats_t stats(kvb_pool_t *p)
{
    kvb_stats_t s;
    assert_int_equal(kvb_stats(p, &s), 0);
    return s;
}

/* Token t of stream s has row elements t*100 + s*10000 + e. */
static void fill_rows(float *rows, int64_t t0, int n, int s)
{
    for (int i = 0; i < n; i++)
        for (int e = 0; e < ROW; e++)
            rows[i * ROW + e] = (float)((t0 + i) * 100 + s * 10000 + e);
}

static int append_tokens(kvb_cache_t *c, int64_t t0, int n)
{
    static float k[256 * ROW], v[256 * ROW];
    fill_rows(k, t0, n, 0);
    fill_rows(v, t0, n, 1);
    return kvb_cache_append(c, k, v, n);
}

static void test_cache_takes_a_new_block_only_when_the_last_is_full(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(4, 64, true, ROW, NULL);
    kvb_cache_t *c = kvb_cache_create(p, 1, KVB_FMT_F32, NULL);
    assert_non_null(c);
    int32_t want_blocks[] = { 1, 1, 1, 1, 2, 2, 2, 2, 3 };
    for (int t = 0; t < 9; t++) {
        assert_int_equal(append_tokens(c, t, 1), 0);
        assert_int_equal(kvb_cache_len(c), t + 1);
        assert_int_equal(kvb_cache_n_blocks(c), want_blocks[t]);
        assert_int_equal(stats(p).n_allocations, 2 * want_blocks[t]);
    }
    assert_int_equal(kvb_blocks_for(p, 1, NULL, 0), 6);
    assert_int_equal(kvb_check(p), 0);
    kvb_cache_destroy(c);
    assert_int_equal(stats(p).blocks_in_use, 0);
    kvb_destroy(p);
}

static void test_cache_rows_are_readable_through_the_block_table(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 64, true, ROW, NULL);
    kvb_cache_t *c = kvb_cache_create(p, 9, KVB_FMT_F32, NULL);
    assert_int_equal(append_tokens(c, 0, 40), 0);        /* prefill */
    for (int t = 40; t < 70; t++)                        /* decode */
        assert_int_equal(append_tokens(c, t, 1), 0);
    assert_int_equal(kvb_cache_n_blocks(c), 5);
    const int32_t *kb = kvb_cache_blocks(c, KVB_STREAM_K);
    void *const *ks = kvb_cache_slots(c, KVB_STREAM_K);
    void *const *vs = kvb_cache_slots(c, KVB_STREAM_V);
    assert_non_null(kb);
    assert_null(kvb_cache_blocks(c, KVB_STREAM_KV));
    for (int64_t t = 0; t < 70; t++) {
        const float *k = (const float *)ks[t / 16] + (t % 16) * ROW;
        const float *v = (const float *)vs[t / 16] + (t % 16) * ROW;
        assert_true(k[3] == (float)(t * 100 + 3));
        assert_true(v[5] == (float)(t * 100 + 10000 + 5));
        assert_ptr_equal(kvb_cache_row(c, KVB_STREAM_K, t), k);
    }
    assert_null(kvb_cache_row(c, KVB_STREAM_K, 70));
    /* the table agrees with the pool, in token order */
    int32_t ids[16];
    assert_int_equal(kvb_blocks_for(p, 9, ids, 16), 10);
    for (int i = 0; i < 5; i++) {
        assert_ptr_equal(kvb_slot(p, kb[i]), ks[i]);
        const void *r;
        int32_t n;
        assert_int_equal(kvb_read(p, kb[i], &r, &n), 0);
        assert_int_equal(n, i < 4 ? 16 : 6);
    }
    kvb_cache_destroy(c);
    kvb_destroy(p);
}

static void test_cache_updates_per_block_token_counts(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 16, true, 0, NULL);       /* accounting only */
    kvb_cache_t *c = kvb_cache_create(p, 2, KVB_FMT_INT4, NULL);
    assert_int_equal(kvb_cache_append(c, NULL, NULL, 40), 0);
    const int32_t *vb = kvb_cache_blocks(c, KVB_STREAM_V);
    int32_t want[] = { 16, 16, 8 };
    for (int i = 0; i < 3; i++) {
        kvb_block_t b;
        assert_int_equal(kvb_block_get(p, vb[i], &b), 0);
        assert_int_equal(b.n_used, want[i]);
        assert_int_equal(b.format, KVB_FMT_INT4);
        assert_int_equal(b.stream, KVB_STREAM_V);
    }
    assert_true(stats(p).fragmentation == 2.0 / 16.0);
    assert_int_equal(kvb_cache_append(c, NULL, NULL, 3), 0);
    kvb_block_t b;
    assert_int_equal(kvb_block_get(p, vb[2], &b), 0);
    assert_int_equal(b.n_used, 11);
    assert_int_equal(kvb_cache_append(c, NULL, NULL, 5), 0);   /* fills, no new block */
    assert_int_equal(kvb_cache_n_blocks(c), 3);
    assert_true(stats(p).fragmentation == 0.0);
    static float rows[ROW];
    assert_int_equal(kvb_cache_append(c, rows, rows, 1), PSC_EINVAL);  /* no storage */
    assert_int_equal(kvb_cache_append(c, rows, NULL, 1), PSC_EINVAL);
    assert_int_equal(kvb_cache_append(c, NULL, NULL, -1), PSC_EINVAL);
    assert_null(kvb_cache_row(c, KVB_STREAM_K, 0));
    assert_int_equal(kvb_check(p), 0);
    kvb_cache_destroy(c);
    kvb_destroy(p);
}

static void test_cache_release_returns_every_block_at_once(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 32, true, ROW, NULL);
    kvb_cache_t *a = kvb_cache_create(p, 1, KVB_FMT_F32, NULL);
    kvb_cache_t *b = kvb_cache_create(p, 2, KVB_FMT_F32, NULL);
    assert_int_equal(append_tokens(a, 0, 100), 0);
    assert_int_equal(append_tokens(b, 0, 20), 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 16 - 7 - 2);
    int64_t frees = stats(p).n_frees;
    assert_int_equal(kvb_cache_release(a), 14);
    assert_int_equal(stats(p).n_frees, frees + 14);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 14);
    assert_int_equal(kvb_blocks_for(p, 1, NULL, 0), 0);
    assert_int_equal(kvb_cache_len(a), 0);
    assert_int_equal(kvb_blocks_for(p, 2, NULL, 0), 4);   /* other cache untouched */
    /* the next request draws the blocks just released: reuse */
    assert_int_equal(append_tokens(b, 20, 32), 0);
    assert_true(stats(p).n_reused >= 4);
    /* the released cache can be used again */
    assert_int_equal(append_tokens(a, 0, 3), 0);
    assert_int_equal(kvb_cache_n_blocks(a), 1);
    assert_int_equal(kvb_cache_release(a), 2);
    assert_int_equal(kvb_cache_release(a), 0);
    kvb_cache_destroy(a);
    kvb_cache_destroy(b);
    assert_int_equal(stats(p).blocks_in_use, 0);
    assert_int_equal(kvb_check(p), 0);
    kvb_destroy(p);
}

static void test_cache_create_rejects_an_active_owner(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(16, 8, true, 0, NULL);
    int err = 0;
    kvb_cache_t *a = kvb_cache_create(p, 4, KVB_FMT_F16, &err);
    assert_non_null(a);
    assert_int_equal(err, 0);
    assert_null(kvb_cache_create(p, 4, KVB_FMT_F16, &err));
    assert_int_equal(err, PSC_EOWNER);
    assert_null(kvb_cache_create(p, -1, KVB_FMT_F16, &err));
    assert_int_equal(err, PSC_EINVAL);
    assert_null(kvb_cache_create(p, 5, KVB_FMT_COUNT, &err));
    assert_int_equal(err, PSC_EINVAL);
    kvb_cache_destroy(a);
    kvb_cache_t *b = kvb_cache_create(p, 4, KVB_FMT_F16, &err);  /* destroy released it */
    assert_non_null(b);
    kvb_cache_destroy(b);
    kvb_cache_destroy(NULL);
    kvb_destroy(p);
}

static void test_cache_gives_k_blocks_back_when_v_is_exhausted(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(4, 3, true, ROW, NULL);         /* K 2, V 1 */
    kvb_cache_t *c = kvb_cache_create(p, 1, KVB_FMT_F32, NULL);
    assert_int_equal(append_tokens(c, 0, 5), PSC_EEXHAUSTED);
    assert_int_equal(kvb_cache_len(c), 0);
    assert_int_equal(kvb_cache_n_blocks(c), 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_K), 2);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_V), 1);
    assert_int_equal(stats(p).blocks_in_use, 0);
    assert_int_equal(append_tokens(c, 0, 4), 0);
    assert_int_equal(kvb_check(p), 0);
    kvb_cache_destroy(c);
    kvb_destroy(p);
}

static void test_cache_on_a_shared_kv_stream(void **st)
{
    (void)st;
    kvb_pool_t *p = mkpool(8, 6, false, ROW, NULL);
    kvb_cache_t *c = kvb_cache_create(p, 1, KVB_FMT_F32, NULL);
    assert_int_equal(append_tokens(c, 0, 24), 0);
    assert_int_equal(kvb_n_free(p, KVB_STREAM_KV), 0);
    assert_int_equal(append_tokens(c, 24, 1), PSC_EEXHAUSTED);
    const float *v = kvb_cache_row(c, KVB_STREAM_V, 23);
    assert_true(v[0] == (float)(2300 + 10000));
    kvb_cache_destroy(c);
    kvb_destroy(p);
}

/* Every table and pool allocation of a cache workload fails once in turn. */
static int cache_failure_scenario(long fail_at)
{
    struct counting cnt = { 0, 0, fail_at };
    kvb_config_t cfg = kvb_config_default();
    cfg.block_size = 2;
    cfg.n_blocks = 4;
    cfg.grow_on_exhaustion = true;
    cfg.row_elems = ROW;
    cfg.alloc = (kvb_alloc_t){ c_alloc, c_free, &cnt };
    kvb_pool_t *p = kvb_create(&cfg, NULL);
    if (!p) {
        assert_int_equal(cnt.live, 0);
        return 1;
    }
    int hit = 0;
    kvb_cache_t *cs[3] = { NULL, NULL, NULL };
    for (int i = 0; i < 3; i++) {
        int err = 0;
        cs[i] = kvb_cache_create(p, i, KVB_FMT_F32, &err);
        if (!cs[i]) {
            assert_int_equal(err, PSC_ENOMEM);
            hit = 1;
        }
    }
    for (int t = 0; t < 40; t++) {
        for (int i = 0; i < 3; i++) {
            if (!cs[i])
                continue;
            int64_t len = kvb_cache_len(cs[i]);
            int rc = append_tokens(cs[i], len, 1 + (t + i) % 3);
            if (rc == PSC_ENOMEM) {
                hit = 1;
                assert_int_equal(kvb_cache_len(cs[i]), len);
                assert_int_equal(kvb_blocks_for(p, i, NULL, 0), 2 * kvb_cache_n_blocks(cs[i]));
            } else {
                assert_int_equal(rc, 0);
            }
            assert_int_equal(kvb_check(p), 0);
        }
        if (t % 13 == 0 && cs[t % 3])
            assert_true(kvb_cache_release(cs[t % 3]) >= 0);
    }
    for (int i = 0; i < 3; i++) {
        if (!cs[i])
            continue;
        for (int64_t t = 0; t < kvb_cache_len(cs[i]); t++) {
            const float *k = kvb_cache_row(cs[i], KVB_STREAM_K, t);
            assert_true(k[1] == (float)(t * 100 + 1));
        }
        kvb_cache_destroy(cs[i]);
    }
    assert_int_equal(stats(p).blocks_in_use, 0);
    kvb_destroy(p);
    assert_int_equal(cnt.live, 0);
    return hit || (fail_at && cnt.calls >= fail_at);
}

static void test_cache_every_allocation_failure_is_clean(void **st)
{
    (void)st;
    long n;
    for (n = 1; n < 10000; n++)
        if (!cache_failure_scenario(n))
            break;
    assert_true(n > 5);
    assert_true(n < 10000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cache_takes_a_new_block_only_when_the_last_is_full),
        cmocka_unit_test(test_cache_rows_are_readable_through_the_block_table),
        cmocka_unit_test(test_cache_updates_per_block_token_counts),
        cmocka_unit_test(test_cache_release_returns_every_block_at_once),
        cmocka_unit_test(test_cache_create_rejects_an_active_owner),
        cmocka_unit_test(test_cache_gives_k_blocks_back_when_v_is_exhausted),
        cmocka_unit_test(test_cache_on_a_shared_kv_stream),
        cmocka_unit_test(test_cache_every_allocation_failure_is_clean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
