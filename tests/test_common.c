/* test_common.c — common/: the hash map, the formatters, checked arithmetic,
 * outputs that never harm inputs. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checked.h"
#include "fmt.h"
#include "hashmap.h"
#include "outfile.h"
#include "poolscope/error.h"
#include "strkeep.h"

/* ---- helpers ----------------------------------------------------------------- */

/* An allocator that fails its fail_at-th call (1-based; 0 = never) and
 * keeps count of what is outstanding. */
typedef struct counting {
    unsigned calls, fail_at;
    size_t outstanding_bytes;
    long outstanding_blocks;
} counting_t;

static void *c_alloc(void *ctx, size_t bytes)
{
    counting_t *c = ctx;
    if (++c->calls == c->fail_at) return NULL;
    void *p = malloc(bytes);
    if (p) { c->outstanding_bytes += bytes; c->outstanding_blocks++; }
    return p;
}

static void c_free(void *ctx, void *p, size_t bytes)
{
    counting_t *c = ctx;
    c->outstanding_bytes -= bytes;
    c->outstanding_blocks--;
    free(p);
}

/* A key whose home slot in a table of cap slots is `home`, the n-th such
 * key counting from 1 upward (excluding any in skip). */
static uint64_t key_with_home(const psc_map_t *m, size_t home, int n)
{
    for (uint64_t k = 1;; k++) {
        if (psc_map__home(m, k) == home && n-- == 0) return k;
    }
}

static uint64_t rng_next(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    return *s = x;
}

typedef struct val { uint64_t a; uint32_t b; } val_t;   /* 12 bytes: padded to 16 */

/* ---- hash map ---------------------------------------------------------------- */

static void test_map_insert_find_delete(void **st)
{
    (void)st;
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, sizeof(val_t), 0, 0, NULL), 0);
    assert_int_equal(psc_map_count(&m), 0);
    assert_null(psc_map_get(&m, 42));
    int is_new = -1;
    val_t *v = psc_map_put(&m, 42, &is_new);
    assert_non_null(v);
    assert_int_equal(is_new, 1);
    assert_int_equal(v->a, 0);                 /* new values are zero-filled */
    v->a = 7; v->b = 9;
    v = psc_map_put(&m, 42, &is_new);
    assert_int_equal(is_new, 0);
    assert_int_equal(v->a, 7);
    assert_int_equal(psc_map_key_of(v), 42);
    assert_int_equal(psc_map_count(&m), 1);
    assert_ptr_equal(psc_map_get(&m, 42), v);
    assert_int_equal(psc_map_del(&m, 42), 0);
    assert_int_equal(psc_map_del(&m, 42), PSC_ENOENT);
    assert_null(psc_map_get(&m, 42));
    assert_int_equal(psc_map_count(&m), 0);
    psc_map_free(&m);
    psc_map_free(&m);                          /* twice is harmless */
}

/* A run that wraps from the last slot to the first: deleting its head shifts
 * every member back across the wrap, and one already at its home stays. */
static void test_map_delete_shifts_back_across_wraparound(void **st)
{
    (void)st;
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, sizeof(uint64_t), 0, 0, NULL), 0);
    size_t cap = psc_map_capacity(&m), last = cap - 1;
    assert_int_equal(cap, PSC_MAP_MIN_CAP);
    uint64_t a = key_with_home(&m, last, 0), b = key_with_home(&m, last, 1),
             c = key_with_home(&m, last, 2), d = key_with_home(&m, 0, 0),
             e = key_with_home(&m, 3, 0);
    uint64_t keys[] = { a, b, c, d, e };
    for (int i = 0; i < 5; i++) *(uint64_t *)psc_map_put(&m, keys[i], NULL) = keys[i] * 3;
    /* a at last, b at 0, c at 1, d (home 0) at 2, e (home 3) at 3 */
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, a)), last);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, b)), 0);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, c)), 1);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, d)), 2);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, e)), 3);
    assert_int_equal(psc_map_del(&m, a), 0);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, b)), last);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, c)), 0);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, d)), 1);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, e)), 3);   /* at home: stays */
    /* deleting d at 1 now: nothing behind it may move into it except what
     * hashes at or before 1 cyclically; e stays */
    assert_int_equal(psc_map_del(&m, d), 0);
    assert_int_equal(psc_map_index(&m, psc_map_get(&m, e)), 3);
    assert_null(psc_map_get(&m, a));
    assert_null(psc_map_get(&m, d));
    assert_int_equal(*(uint64_t *)psc_map_get(&m, b), b * 3);
    assert_int_equal(*(uint64_t *)psc_map_get(&m, c), c * 3);
    assert_int_equal(*(uint64_t *)psc_map_get(&m, e), e * 3);
    assert_int_equal(psc_map_count(&m), 3);
    psc_map_free(&m);
}

/* 0 is the empty marker inside the table, but it is an ordinary key. */
static void test_map_key_zero_and_all_ones_are_ordinary_keys(void **st)
{
    (void)st;
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, sizeof(uint64_t), 0, 0, NULL), 0);
    assert_null(psc_map_get(&m, 0));
    assert_int_equal(psc_map_del(&m, 0), PSC_ENOENT);
    int is_new = 0;
    uint64_t *z = psc_map_put(&m, 0, &is_new);
    assert_non_null(z);
    assert_int_equal(is_new, 1);
    assert_int_equal(*z, 0);
    *z = 11;
    *(uint64_t *)psc_map_put(&m, UINT64_MAX, NULL) = 22;
    assert_int_equal(psc_map_count(&m), 2);
    assert_int_equal(*(uint64_t *)psc_map_put(&m, 0, &is_new), 11);
    assert_int_equal(is_new, 0);
    assert_int_equal(psc_map_key_of(psc_map_get(&m, 0)), 0);
    /* survives growth */
    for (uint64_t k = 1; k <= 1000; k++) *(uint64_t *)psc_map_put(&m, k, NULL) = k;
    assert_int_equal(*(uint64_t *)psc_map_get(&m, 0), 11);
    assert_int_equal(*(uint64_t *)psc_map_get(&m, UINT64_MAX), 22);
    /* visited once by the walk */
    size_t it = 0, zeros = 0, n = 0;
    uint64_t k;
    while (psc_map_next(&m, &it, &k, NULL)) { n++; zeros += k == 0; }
    assert_int_equal(n, 1002);
    assert_int_equal(zeros, 1);
    assert_int_equal(psc_map_del(&m, 0), 0);
    assert_null(psc_map_get(&m, 0));
    assert_int_equal(psc_map_count(&m), 1001);
    psc_map_free(&m);
}

static void test_map_growth_keeps_every_entry(void **st)
{
    (void)st;
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, sizeof(val_t), 4, 50, NULL), 0);
    size_t cap0 = psc_map_capacity(&m);
    enum { N = 100000 };
    for (uint64_t i = 0; i < N; i++) {
        val_t *v = psc_map_put(&m, i * 4096 + 0x7f0000000000ull, NULL);  /* aligned, like addresses */
        assert_non_null(v);
        v->a = i; v->b = (uint32_t)(i ^ 0x5a5a);
        assert_true(psc_map_count(&m) * 2 <= psc_map_capacity(&m));   /* load 1/2 kept */
    }
    assert_true(psc_map_capacity(&m) > cap0);
    assert_int_equal(psc_map_count(&m), N);
    for (uint64_t i = 0; i < N; i++) {
        val_t *v = psc_map_get(&m, i * 4096 + 0x7f0000000000ull);
        assert_non_null(v);
        assert_int_equal(v->a, i);
        assert_int_equal(v->b, (uint32_t)(i ^ 0x5a5a));
    }
    assert_null(psc_map_get(&m, 4096 * N + 0x7f0000000000ull));
    psc_map_free(&m);
}

static void test_map_reserve_then_puts_never_fail(void **st)
{
    (void)st;
    counting_t c = { 0 };
    psc_alloc_t al = { c_alloc, c_free, &c };
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, 8, 0, 0, &al), 0);
    assert_int_equal(psc_map_reserve(&m, 500), 0);
    assert_false(psc_map_full(&m));
    c.fail_at = c.calls + 1;                   /* any allocation from here fails */
    for (uint64_t k = 0; k < 500; k++) assert_non_null(psc_map_put(&m, k + 1, NULL));
    assert_int_equal(psc_map_count(&m), 500);
    psc_map_free(&m);
    assert_int_equal(c.outstanding_blocks, 0);
    assert_int_equal(c.outstanding_bytes, 0);
}

/* Fail the Nth allocation for every N a workload makes: the failing call
 * reports ENOMEM, the map keeps what it had and stays usable, nothing leaks. */
static void test_map_allocation_failure_on_nth_allocation(void **st)
{
    (void)st;
    unsigned total = 0;
    {   /* how many allocations the workload makes */
        counting_t c = { 0 };
        psc_alloc_t al = { c_alloc, c_free, &c };
        psc_map_t m;
        assert_int_equal(psc_map_init(&m, 24, 0, 0, &al), 0);
        for (uint64_t k = 1; k <= 2000; k++) assert_non_null(psc_map_put(&m, k, NULL));
        psc_map_free(&m);
        total = c.calls;
        assert_true(total > 5);
    }
    for (unsigned n = 1; n <= total; n++) {
        counting_t c = { .fail_at = n };
        psc_alloc_t al = { c_alloc, c_free, &c };
        psc_map_t m;
        int rc = psc_map_init(&m, 24, 0, 0, &al);
        if (n == 1) {
            assert_int_equal(rc, PSC_ENOMEM);
            psc_map_free(&m);
            assert_int_equal(c.outstanding_blocks, 0);
            continue;
        }
        assert_int_equal(rc, 0);
        uint64_t failed_at = 0;
        for (uint64_t k = 1; k <= 2000; k++) {
            uint64_t *v = psc_map_put(&m, k, NULL);
            if (!v) { failed_at = k; break; }
            *v = k * 7;
        }
        assert_true(failed_at > 0);
        assert_int_equal(psc_map_count(&m), failed_at - 1);
        for (uint64_t k = 1; k < failed_at; k++) assert_int_equal(*(uint64_t *)psc_map_get(&m, k), k * 7);
        assert_null(psc_map_get(&m, failed_at));
        /* the next allocation succeeds: the map goes on */
        uint64_t *v = psc_map_put(&m, failed_at, NULL);
        assert_non_null(v);
        assert_int_equal(psc_map_count(&m), failed_at);
        psc_map_free(&m);
        assert_int_equal(c.outstanding_blocks, 0);
        assert_int_equal(c.outstanding_bytes, 0);
    }
}

static void test_map_iteration_visits_every_entry_once(void **st)
{
    (void)st;
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, sizeof(uint32_t), 0, 0, NULL), 0);
    enum { N = 5000 };
    static unsigned char seen[N];
    memset(seen, 0, sizeof seen);
    for (uint32_t i = 0; i < N; i++) *(uint32_t *)psc_map_put(&m, (uint64_t)i * 0x10001, NULL) = i;
    for (uint32_t i = 0; i < N; i += 3) assert_int_equal(psc_map_del(&m, (uint64_t)i * 0x10001), 0);
    size_t it = 0, n = 0;
    uint64_t k;
    void *vp;
    while (psc_map_next(&m, &it, &k, &vp)) {
        uint32_t i = *(uint32_t *)vp;
        assert_true(i < N);
        assert_int_equal(k, (uint64_t)i * 0x10001);
        assert_int_equal(i % 3 != 0, 1);
        assert_int_equal(seen[i], 0);
        seen[i] = 1;
        n++;
    }
    assert_int_equal(n, psc_map_count(&m));
    assert_int_equal(psc_map_next(&m, &it, &k, &vp), 0);     /* stays at the end */
    for (uint32_t i = 0; i < N; i++) assert_int_equal(seen[i], i % 3 != 0);
    psc_map_clear(&m);
    assert_int_equal(psc_map_count(&m), 0);
    it = 0;
    assert_int_equal(psc_map_next(&m, &it, NULL, NULL), 0);
    assert_null(psc_map_get(&m, 0x10001));
    *(uint32_t *)psc_map_put(&m, 5, NULL) = 1;                /* usable after clear */
    assert_int_equal(psc_map_count(&m), 1);
    psc_map_free(&m);
}

static void test_map_zero_size_values_make_a_set(void **st)
{
    (void)st;
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, 0, 0, 0, NULL), 0);
    for (uint64_t k = 0; k < 100; k++) assert_non_null(psc_map_put(&m, k * k, NULL));
    assert_int_equal(psc_map_count(&m), 100);
    for (uint64_t k = 0; k < 100; k++) assert_non_null(psc_map_get(&m, k * k));
    assert_null(psc_map_get(&m, 2));
    psc_map_free(&m);
    assert_int_equal(psc_map_init(&m, (size_t)1 << 30, 0, 0, NULL), PSC_EINVAL);
    psc_map_free(&m);
}

static void test_map_resize_shrinks_and_keeps_entries(void **st)
{
    (void)st;
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, sizeof(uint64_t), 0, 0, NULL), 0);
    for (uint64_t k = 1; k <= 4000; k++) *(uint64_t *)psc_map_put(&m, k, NULL) = k;
    size_t big = psc_map_capacity(&m);
    for (uint64_t k = 1; k <= 3990; k++) assert_int_equal(psc_map_del(&m, k), 0);
    assert_int_equal(psc_map_resize(&m, 8), PSC_EINVAL);     /* 10 entries do not fit 8 slots at 3/4 */
    assert_int_equal(psc_map_resize(&m, 100), PSC_EINVAL);   /* not a power of two */
    assert_int_equal(psc_map_resize(&m, 16), 0);
    assert_true(psc_map_capacity(&m) < big);
    for (uint64_t k = 3991; k <= 4000; k++) assert_int_equal(*(uint64_t *)psc_map_get(&m, k), k);
    assert_int_equal(psc_map_count(&m), 10);
    psc_map_free(&m);
}

/* Random inserts, overwrites, deletes and lookups against a plain array,
 * over a small key space (long runs, many shifts) with the edge keys in it. */
static void test_map_random_ops_match_reference_array(void **st)
{
    (void)st;
    enum { K = 512, OPS = 400000 };
    static uint64_t keys[K], ref_val[K];
    static unsigned char ref_has[K];
    uint64_t s = 0x243F6A8885A308D3ull;
    for (int i = 0; i < K; i++) keys[i] = rng_next(&s) & 0xffff0;    /* clustered, aligned */
    keys[0] = 0; keys[1] = UINT64_MAX; keys[2] = 1;
    for (int i = 3; i < K; i++)                                      /* distinct keys */
        for (int j = 0; j < i; j++)
            if (keys[j] == keys[i]) { keys[i] = rng_next(&s) | 1; j = -1; }
    memset(ref_has, 0, sizeof ref_has);
    psc_map_t m;
    assert_int_equal(psc_map_init(&m, sizeof(uint64_t), 0, 0, NULL), 0);
    size_t n = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rng_next(&s);
        int i = (int)(r % K);
        switch ((r >> 32) % 4) {
        case 0: case 1: {
            int is_new;
            uint64_t *v = op & 1 ? psc_map_put(&m, keys[i], &is_new)
                                 : psc_map_put_sz(&m, keys[i], &is_new, sizeof(uint64_t));
            assert_non_null(v);
            assert_int_equal(is_new, !ref_has[i]);
            if (!ref_has[i]) { ref_has[i] = 1; n++; assert_int_equal(*v, 0); }
            else assert_int_equal(*v, ref_val[i]);
            *v = ref_val[i] = r;
            break;
        }
        case 2:
            if (op & 1) {
                assert_int_equal(psc_map_del(&m, keys[i]), ref_has[i] ? 0 : PSC_ENOENT);
            } else {
                uint64_t *v = psc_map_get_sz(&m, keys[i], sizeof(uint64_t));
                assert_true((v != NULL) == ref_has[i]);
                if (v) {
                    assert_int_equal(psc_map_index_sz(&m, v, sizeof(uint64_t)), psc_map_index(&m, v));
                    psc_map_erase_sz(&m, v, sizeof(uint64_t));
                }
            }
            if (ref_has[i]) { ref_has[i] = 0; n--; }
            break;
        default: {
            uint64_t *v = op & 1 ? psc_map_get(&m, keys[i]) : psc_map_get_sz(&m, keys[i], sizeof(uint64_t));
            if (ref_has[i]) { assert_non_null(v); assert_int_equal(*v, ref_val[i]); }
            else assert_null(v);
        }
        }
        assert_int_equal(psc_map_count(&m), n);
        if (op % 50000 == 0) {
            size_t it = 0, walked = 0;
            uint64_t k;
            void *vp;
            while (psc_map_next(&m, &it, &k, &vp)) {
                int idx = -1;
                for (int j = 0; j < K; j++) if (keys[j] == k) { idx = j; break; }
                assert_true(idx >= 0);
                assert_true(ref_has[idx]);
                assert_int_equal(*(uint64_t *)vp, ref_val[idx]);
                walked++;
            }
            assert_int_equal(walked, n);
        }
    }
    psc_map_free(&m);
}

/* ---- formatting -------------------------------------------------------------- */

static void test_fmt_bytes_counts_and_times(void **st)
{
    (void)st;
    char b[32];
    assert_string_equal(psc_fmt_bytes(0, b, sizeof b), "0 B");
    assert_string_equal(psc_fmt_bytes(1023, b, sizeof b), "1023 B");
    assert_string_equal(psc_fmt_bytes(1024, b, sizeof b), "1.00 KiB");
    assert_string_equal(psc_fmt_bytes(1536, b, sizeof b), "1.50 KiB");
    assert_string_equal(psc_fmt_bytes(64ull << 20, b, sizeof b), "64.0 MiB");
    assert_string_equal(psc_fmt_count(0, b, sizeof b), "0");
    assert_string_equal(psc_fmt_count(999, b, sizeof b), "999");
    assert_string_equal(psc_fmt_count(1000, b, sizeof b), "1,000");
    assert_string_equal(psc_fmt_count(62040, b, sizeof b), "62,040");
    assert_string_equal(psc_fmt_count(UINT64_MAX, b, sizeof b), "18,446,744,073,709,551,615");
    assert_string_equal(psc_fmt_ns(0, b, sizeof b), "0 ns");
    assert_string_equal(psc_fmt_bytes(200ull << 30, b, sizeof b), "200 GiB");
    assert_string_equal(psc_fmt_bytes(2048ull << 40, b, sizeof b), "2.00 PiB");
    /* one formatter for every output: past PiB, and a value that rounds to
     * 1024 of a unit is 1.00 of the next */
    assert_string_equal(psc_fmt_bytes(1ull << 63, b, sizeof b), "8.00 EiB");
    assert_string_equal(psc_fmt_bytes(UINT64_MAX, b, sizeof b), "16.0 EiB");
    assert_string_equal(psc_fmt_bytes((1ull << 20) - 1, b, sizeof b), "1.00 MiB");
    assert_string_equal(psc_fmt_bytes(10239, b, sizeof b), "10.0 KiB");
    assert_string_equal(psc_fmt_ns(999, b, sizeof b), "999 ns");
    assert_string_equal(psc_fmt_ns(12500, b, sizeof b), "12.5 us");
    assert_string_equal(psc_fmt_ns(12500000, b, sizeof b), "12.5 ms");
    assert_string_equal(psc_fmt_ns(1234000000, b, sizeof b), "1.234 s");
    char small[4];
    assert_string_equal(psc_fmt_count(123456, small, sizeof small), "12");  /* truncated, terminated */
}

/* A share with something missing never prints as the whole: the README's
 * pool, 62,040 acquires with 7 misses, is 99.9%, not 100.0%. */
static void test_fmt_share_never_rounds_to_the_whole(void **st)
{
    (void)st;
    char b[32];
    assert_string_equal(psc_fmt_share(62033, 62040, 100, 1, b, sizeof b), "99.9");
    assert_string_equal(psc_fmt_share(62040, 62040, 100, 1, b, sizeof b), "100.0");
    assert_string_equal(psc_fmt_share(999999, 1000000, 1, 4, b, sizeof b), "0.9999");
    assert_string_equal(psc_fmt_share(1, 1, 1, 4, b, sizeof b), "1.0000");
    assert_string_equal(psc_fmt_share(1, 3, 100, 1, b, sizeof b), "33.3");
    assert_string_equal(psc_fmt_share(2, 3, 100, 1, b, sizeof b), "66.7");    /* ordinary rounding below */
    assert_string_equal(psc_fmt_share(0, 0, 100, 1, b, sizeof b), "0.0");
    assert_string_equal(psc_fmt_share(0, 5, 100, 0, b, sizeof b), "0");
    assert_string_equal(psc_fmt_share(UINT64_MAX - 1, UINT64_MAX, 100, 1, b, sizeof b), "99.9");
}

/* ---- checked arithmetic ------------------------------------------------------ */

static void test_checked_add_and_mul_report_overflow(void **st)
{
    (void)st;
    uint64_t r = 1;
    assert_int_equal(psc_add_u64(2, 3, &r), 0);
    assert_int_equal(r, 5);
    assert_int_not_equal(psc_add_u64(UINT64_MAX, 1, &r), 0);
    assert_int_equal(psc_mul_u64(1ull << 31, 1ull << 32, &r), 0);
    assert_int_equal(r, 1ull << 63);
    assert_int_not_equal(psc_mul_u64(1ull << 32, 1ull << 32, &r), 0);
    assert_int_equal(psc_mul_u64(0, UINT64_MAX, &r), 0);
    assert_int_equal(r, 0);
    size_t z = 0;
    assert_int_equal(psc_mul_size(7, 6, &z), 0);
    assert_int_equal(z, 42);
    assert_int_not_equal(psc_mul_size(SIZE_MAX / 2 + 1, 2, &z), 0);
    assert_int_not_equal(psc_add_size(SIZE_MAX, 1, &z), 0);
    assert_int_equal(psc_add_size(SIZE_MAX - 1, 1, &z), 0);
    assert_int_equal(z, SIZE_MAX);
}

/* ---- outputs (outfile.h) ------------------------------------------------------- */

static char scratch[64];

static void scratch_dir(void)
{
    snprintf(scratch, sizeof scratch, "/tmp/psc-outfile.XXXXXX");
    assert_non_null(mkdtemp(scratch));
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

static int has_text(const char *path, const char *text)
{
    char b[256] = { 0 };
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(b, 1, sizeof b - 1, f);
    fclose(f);
    return n == strlen(text) && !memcmp(b, text, n);
}

/* entries of dir, "." and ".." not counted */
static int n_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return n;
}

static void rm_scratch(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    assert_int_equal(system(cmd), 0);
}

static void test_outfile_old_file_stays_until_commit(void **state)
{
    (void)state;
    scratch_dir();
    char out[128], msg[256];
    snprintf(out, sizeof out, "%s/out.txt", scratch);
    write_text(out, "old");
    psc_out_t *o;
    assert_int_equal(psc_out_open(out, NULL, 0, 0, &o, msg, sizeof msg), 0);
    assert_string_not_equal(psc_out_path(o), out);
    fputs("new", psc_out_stream(o));
    fflush(psc_out_stream(o));
    assert_true(has_text(out, "old"));                 /* written beside, not over */
    assert_int_equal(n_entries(scratch), 2);
    assert_int_equal(psc_out_commit(o, msg, sizeof msg), 0);
    assert_true(has_text(out, "new"));
    assert_int_equal(n_entries(scratch), 1);           /* the temporary file became out */
    rm_scratch();
}

static void test_outfile_abort_leaves_old_file_and_no_temp(void **state)
{
    (void)state;
    scratch_dir();
    char out[128], fresh[128], msg[256];
    snprintf(out, sizeof out, "%s/out.txt", scratch);
    snprintf(fresh, sizeof fresh, "%s/fresh.txt", scratch);
    write_text(out, "old");
    psc_out_t *o, *o2;
    assert_int_equal(psc_out_open(out, NULL, 0, 0, &o, msg, sizeof msg), 0);
    assert_int_equal(psc_out_open(fresh, NULL, 0, 0, &o2, msg, sizeof msg), 0);
    fputs("half", psc_out_stream(o));
    fputs("half", psc_out_stream(o2));
    psc_out_abort(o);
    psc_out_abort(o2);
    psc_out_abort(NULL);
    assert_true(has_text(out, "old"));
    assert_int_equal(access(fresh, F_OK), -1);
    assert_int_equal(n_entries(scratch), 1);
    rm_scratch();
}

static void test_outfile_refuses_the_input_by_any_name(void **state)
{
    (void)state;
    scratch_dir();
    char in[128], sym[128], hard[128], other[128], msg[256];
    snprintf(in, sizeof in, "%s/in.pst", scratch);
    snprintf(sym, sizeof sym, "%s/sym.pst", scratch);
    snprintf(hard, sizeof hard, "%s/hard.pst", scratch);
    snprintf(other, sizeof other, "%s/other", scratch);
    write_text(in, "trace");
    assert_int_equal(symlink("in.pst", sym), 0);
    assert_int_equal(link(in, hard), 0);
    const char *inputs[2] = { NULL, in };
    const char *outs[3] = { in, sym, hard };
    for (int i = 0; i < 3; i++) {
        psc_out_t *o = (psc_out_t *)&o;
        assert_int_equal(psc_out_open(outs[i], inputs, 2, PSC_OUT_SPECIAL, &o, msg, sizeof msg), PSC_EINVAL);
        assert_null(o);
        assert_non_null(strstr(msg, "refusing"));
        psc_outdir_t *d;
        assert_int_equal(psc_outdir_open(outs[i], inputs, 2, &d, msg, sizeof msg), PSC_EINVAL);
    }
    /* the input named through the symlink, the output by its own name */
    const char *via_link[1] = { sym };
    psc_out_t *o;
    assert_int_equal(psc_out_open(in, via_link, 1, 0, &o, msg, sizeof msg), PSC_EINVAL);
    assert_true(psc_same_file(sym, hard));
    assert_false(psc_same_file(in, other));            /* a missing file is no file */
    assert_true(has_text(in, "trace"));
    assert_int_equal(n_entries(scratch), 3);
    rm_scratch();
}

static void test_outfile_symlink_output_replaces_its_target(void **state)
{
    (void)state;
    scratch_dir();
    char target[128], sym[128], dangling[128], msg[256];
    snprintf(target, sizeof target, "%s/target.txt", scratch);
    snprintf(sym, sizeof sym, "%s/sym.txt", scratch);
    snprintf(dangling, sizeof dangling, "%s/dangling.txt", scratch);
    write_text(target, "old");
    assert_int_equal(symlink("target.txt", sym), 0);
    assert_int_equal(symlink("nowhere", dangling), 0);
    psc_out_t *o;
    assert_int_equal(psc_out_open(sym, NULL, 0, 0, &o, msg, sizeof msg), 0);
    fputs("new", psc_out_stream(o));
    assert_int_equal(psc_out_commit(o, msg, sizeof msg), 0);
    struct stat st;
    assert_int_equal(lstat(sym, &st), 0);
    assert_true(S_ISLNK(st.st_mode));                  /* still a symlink */
    assert_true(has_text(target, "new"));
    assert_int_equal(psc_out_open(dangling, NULL, 0, 0, &o, msg, sizeof msg), PSC_EINVAL);
    assert_int_equal(psc_out_open(scratch, NULL, 0, 0, &o, msg, sizeof msg), PSC_EINVAL);   /* a directory */
    assert_int_equal(n_entries(scratch), 3);
    rm_scratch();
}

static void test_outfile_device_is_written_in_place_or_refused(void **state)
{
    (void)state;
    char msg[256];
    struct stat before, after;
    assert_int_equal(stat("/dev/null", &before), 0);
    psc_out_t *o;
    assert_int_equal(psc_out_open("/dev/null", NULL, 0, 0, &o, msg, sizeof msg), PSC_EUNSUP);
    assert_int_equal(psc_out_open("/dev/null", NULL, 0, PSC_OUT_SPECIAL, &o, msg, sizeof msg), 0);
    assert_true(psc_out_in_place(o));
    assert_string_equal(psc_out_path(o), "/dev/null");
    fputs("discarded", psc_out_stream(o));
    assert_int_equal(psc_out_commit(o, msg, sizeof msg), 0);
    if (access("/dev/full", W_OK) == 0) {              /* a write error is reported */
        assert_int_equal(psc_out_open("/dev/full", NULL, 0, PSC_OUT_SPECIAL, &o, msg, sizeof msg), 0);
        fputs("lost", psc_out_stream(o));
        assert_int_equal(psc_out_commit(o, msg, sizeof msg), PSC_EIO);
        assert_non_null(strstr(msg, "/dev/full"));
    }
    assert_int_equal(stat("/dev/null", &after), 0);
    assert_true(S_ISCHR(after.st_mode));
    assert_int_equal(after.st_ino, before.st_ino);
}

static void test_outdir_new_directory_appears_only_on_commit(void **state)
{
    (void)state;
    scratch_dir();
    char dir[128], path[256], msg[256];
    snprintf(dir, sizeof dir, "%s/plots", scratch);
    psc_outdir_t *d;
    assert_int_equal(psc_outdir_open(dir, NULL, 0, &d, msg, sizeof msg), 0);
    snprintf(path, sizeof path, "%s/a.dat", psc_outdir_path(d));
    write_text(path, "a");
    assert_int_equal(access(dir, F_OK), -1);
    assert_int_equal(psc_outdir_commit(d, msg, sizeof msg), 0);
    snprintf(path, sizeof path, "%s/a.dat", dir);
    assert_true(has_text(path, "a"));
    assert_int_equal(n_entries(scratch), 1);
    /* and an aborted one leaves nothing */
    snprintf(dir, sizeof dir, "%s/other", scratch);
    assert_int_equal(psc_outdir_open(dir, NULL, 0, &d, msg, sizeof msg), 0);
    snprintf(path, sizeof path, "%s/b.dat", psc_outdir_path(d));
    write_text(path, "b");
    psc_outdir_abort(d);
    assert_int_equal(n_entries(scratch), 1);
    rm_scratch();
}

static void test_outdir_existing_directory_keeps_other_files(void **state)
{
    (void)state;
    scratch_dir();
    char path[256], msg[256], in[128];
    snprintf(path, sizeof path, "%s/a.dat", scratch);
    write_text(path, "old a");
    snprintf(path, sizeof path, "%s/mine.txt", scratch);
    write_text(path, "mine");
    psc_outdir_t *d;
    assert_int_equal(psc_outdir_open(scratch, NULL, 0, &d, msg, sizeof msg), 0);
    snprintf(path, sizeof path, "%s/a.dat", psc_outdir_path(d));
    write_text(path, "new a");
    psc_outdir_abort(d);                               /* failure: nothing changes */
    snprintf(path, sizeof path, "%s/a.dat", scratch);
    assert_true(has_text(path, "old a"));
    assert_int_equal(n_entries(scratch), 2);
    assert_int_equal(psc_outdir_open(scratch, NULL, 0, &d, msg, sizeof msg), 0);
    snprintf(path, sizeof path, "%s/a.dat", psc_outdir_path(d));
    write_text(path, "new a");
    assert_int_equal(psc_outdir_commit(d, msg, sizeof msg), 0);
    snprintf(path, sizeof path, "%s/a.dat", scratch);
    assert_true(has_text(path, "new a"));
    snprintf(path, sizeof path, "%s/mine.txt", scratch);
    assert_true(has_text(path, "mine"));
    assert_int_equal(n_entries(scratch), 2);
    /* a file that would replace an input is refused at commit */
    snprintf(in, sizeof in, "%s/a.dat", scratch);
    const char *inputs[1] = { in };
    assert_int_equal(psc_outdir_open(scratch, inputs, 1, &d, msg, sizeof msg), 0);
    snprintf(path, sizeof path, "%s/a.dat", psc_outdir_path(d));
    write_text(path, "clobber");
    assert_int_equal(psc_outdir_commit(d, msg, sizeof msg), PSC_EINVAL);
    assert_true(has_text(in, "new a"));
    assert_int_equal(n_entries(scratch), 2);
    /* a file that exists and is not a directory is not a plot directory */
    assert_int_equal(psc_outdir_open(in, NULL, 0, &d, msg, sizeof msg), PSC_EINVAL);
    rm_scratch();
}

/* psc_strset: one copy and one number per distinct text, numbered from 1
 * in the order first seen, NULL never kept. */
static void test_strset_numbers_each_text_once(void **state)
{
    (void)state;
    psc_strset_t set;
    assert_int_equal(psc_strset_init(&set), 0);
    int fresh = -1;
    char a[] = "main", a2[] = "main";
    assert_int_equal(psc_strset_id(&set, a, &fresh), 1);
    assert_int_equal(fresh, 1);
    assert_int_equal(psc_strset_id(&set, "grow (x.c:3)", &fresh), 2);
    assert_int_equal(psc_strset_id(&set, a2, &fresh), 1);   /* the same text elsewhere */
    assert_int_equal(fresh, 0);
    assert_int_equal(psc_strset_id(&set, NULL, &fresh), 0);
    assert_string_equal(psc_strset_text(&set, 1), "main");
    assert_ptr_not_equal(psc_strset_text(&set, 1), a);      /* a copy of its own */
    char buf[16];
    for (int i = 0; i < 5000; i++) {   /* past a few growths of the map and the copies */
        snprintf(buf, sizeof buf, "t%d", i);
        assert_int_equal(psc_strset_id(&set, buf, NULL), (uint32_t)i + 3);
    }
    assert_int_equal(psc_strset_id(&set, "t4321", NULL), 4324);
    assert_string_equal(psc_strset_text(&set, 4324), "t4321");
    psc_strset_free(&set);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_insert_find_delete),
        cmocka_unit_test(test_map_delete_shifts_back_across_wraparound),
        cmocka_unit_test(test_map_key_zero_and_all_ones_are_ordinary_keys),
        cmocka_unit_test(test_map_growth_keeps_every_entry),
        cmocka_unit_test(test_map_reserve_then_puts_never_fail),
        cmocka_unit_test(test_map_allocation_failure_on_nth_allocation),
        cmocka_unit_test(test_map_iteration_visits_every_entry_once),
        cmocka_unit_test(test_map_zero_size_values_make_a_set),
        cmocka_unit_test(test_map_resize_shrinks_and_keeps_entries),
        cmocka_unit_test(test_map_random_ops_match_reference_array),
        cmocka_unit_test(test_fmt_bytes_counts_and_times),
        cmocka_unit_test(test_fmt_share_never_rounds_to_the_whole),
        cmocka_unit_test(test_checked_add_and_mul_report_overflow),
        cmocka_unit_test(test_outfile_old_file_stays_until_commit),
        cmocka_unit_test(test_outfile_abort_leaves_old_file_and_no_temp),
        cmocka_unit_test(test_outfile_refuses_the_input_by_any_name),
        cmocka_unit_test(test_outfile_symlink_output_replaces_its_target),
        cmocka_unit_test(test_outfile_device_is_written_in_place_or_refused),
        cmocka_unit_test(test_outdir_new_directory_appears_only_on_commit),
        cmocka_unit_test(test_outdir_existing_directory_keeps_other_files),
        cmocka_unit_test(test_strset_numbers_each_text_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
