/* test_bufpool.c — behaviour of the buffer pool (include/poolscope/bufpool.h).
 *
 * The selection and cap rules are checked against a tiny independent model
 * (a plain array scanned linearly), allocation failure is injected through a
 * counting test allocator, and the observer's events are replayed to rebuild
 * every counter of bp_stats().
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#if PS_DEBUG
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "poolscope/bufpool.h"
#include "bufpool_int.h"   /* to corrupt a pool on purpose (the walker tests) */

/* --- a counting allocator that can fail the Nth call ----------------------- */

typedef struct talloc {
    atomic_long calls;      /* alloc calls so far */
    atomic_long live;       /* allocations not yet freed */
    atomic_long live_bytes;
    long fail_at;           /* 1-based call number to fail; 0 = never */
    int fail_all;           /* fail every call while set */
    int fake;               /* hand out fake addresses, no memory */
    atomic_ulong next_fake;
} talloc_t;

static void *t_alloc(void *ctx, size_t bytes, size_t align)
{
    talloc_t *t = ctx;
    long n = atomic_fetch_add(&t->calls, 1) + 1;
    if (t->fail_all || n == t->fail_at)
        return NULL;
    void *p;
    if (t->fake) {
        /* Never dereferenced by the pool: any aligned, distinct value will do. */
        unsigned long a = atomic_fetch_add(&t->next_fake, 1) + 1;
        p = (void *)(uintptr_t)(a * 4096u);
    } else if (posix_memalign(&p, align < sizeof(void *) ? sizeof(void *) : align,
                              bytes ? bytes : 1) != 0) {
        return NULL;
    }
    atomic_fetch_add(&t->live, 1);
    atomic_fetch_add(&t->live_bytes, (long)bytes);
    return p;
}

static void t_free(void *ctx, void *p, size_t bytes)
{
    talloc_t *t = ctx;
    atomic_fetch_sub(&t->live, 1);
    atomic_fetch_sub(&t->live_bytes, (long)bytes);
    if (!t->fake)
        free(p);
}

static bp_allocator_t allocator_of(talloc_t *t)
{
    bp_allocator_t a = {t_alloc, t_free, t};
    return a;
}

static uint64_t rng_next(uint64_t *s)
{
    /* xorshift64* */
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static bp_pool_t *make_pool(size_t cap, talloc_t *backing, talloc_t *meta)
{
    bp_config_t cfg = bp_config_default();
    cfg.name = "test";
    cfg.max_cached_bytes = cap;
    if (backing)
        cfg.backing = allocator_of(backing);
    if (meta)
        cfg.meta = allocator_of(meta);
    int err = 1;
    bp_pool_t *p = bp_create(&cfg, &err);
    assert_non_null(p);
    assert_int_equal(err, 0);
    return p;
}

/* The debug build walks a pool after every operation, O(buffers + size
 * classes) each: a test that makes many thousands of operations on one pool
 * asks for every k-th walk of the pool it creates next (PS_DEBUG_EVERY,
 * read at bp_create), then NULL to go back to every one. */
static void debug_walk_every(const char *k)
{
#if PS_DEBUG
    if (k)
        setenv("PS_DEBUG_EVERY", k, 1);
    else
        unsetenv("PS_DEBUG_EVERY");
#else
    (void)k;
#endif
}

static bp_stats_t stats_of(const bp_pool_t *p)
{
    bp_stats_t s;
    assert_int_equal(bp_stats(p, &s), 0);
    return s;
}

/* --- the independent model ------------------------------------------------- */

typedef struct mbuf {
    int arm;
    size_t len, bytes;
    uint64_t id, stamp;
} mbuf_t;

typedef struct model {
    mbuf_t *c;          /* cached buffers, unordered */
    size_t n, room;
    size_t cap, cached_bytes;
    uint64_t next_id, clock, hits, misses, destroyed, reclaimed;
} model_t;

static void model_init(model_t *m, size_t cap)
{
    memset(m, 0, sizeof *m);
    m->cap = cap;
}

/* The pool's rule (docs/DESIGN.md, "Buffer pool"): smallest length >= len,
 * newest among equals. */
static mbuf_t model_acquire(model_t *m, int arm, size_t len, int *hit)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < m->n; i++) {
        const mbuf_t *b = &m->c[i];
        if (b->arm != arm || b->len < len)
            continue;
        if (best == SIZE_MAX || b->len < m->c[best].len ||
            (b->len == m->c[best].len && b->stamp > m->c[best].stamp))
            best = i;
    }
    mbuf_t r;
    if (best != SIZE_MAX) {
        r = m->c[best];
        m->c[best] = m->c[--m->n];
        m->cached_bytes -= r.bytes;
        m->hits++;
        *hit = 1;
        return r;
    }
    r.arm = arm;
    r.len = len;
    r.bytes = arm == BP_ARM_F32 ? len * 4 : len;
    r.id = ++m->next_id;
    r.stamp = 0;
    m->misses++;
    *hit = 0;
    return r;
}

static void model_release(model_t *m, mbuf_t b)
{
    if (b.bytes > m->cap || m->cached_bytes + b.bytes > m->cap) {
        m->destroyed++;
        return;
    }
    if (m->n == m->room) {
        m->room = m->room ? 2 * m->room : 64;
        m->c = realloc(m->c, m->room * sizeof *m->c);
        assert_non_null(m->c);
    }
    b.stamp = ++m->clock;
    m->c[m->n++] = b;
    m->cached_bytes += b.bytes;
    m->reclaimed++;
}

/* --- basic behaviour --------------------------------------------------------- */

static void test_release_then_acquire_returns_same_buffer(void **state)
{
    (void)state;
    bp_pool_t *p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, NULL, NULL);
    bp_buf_t *a = bp_acquire(p, 1000, NULL);
    assert_non_null(a);
    assert_int_equal(bp_refcount(a), 1);
    void *data = bp_data(a);
    uint64_t id = bp_id(a);
    bp_f32(a)[999] = 1.0f;
    assert_int_equal(bp_release(a), 1);
    bp_buf_t *b = bp_acquire(p, 1000, NULL);
    assert_ptr_equal(bp_data(b), data);
    assert_int_equal(bp_id(b), id);
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.misses, 1);
    assert_int_equal(s.backing_allocs, 1);
    assert_int_equal(bp_release(b), 1);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
}

static void test_round_f32_table(void **state)
{
    (void)state;
    static const size_t t[][2] = {
        {0, 1}, {1, 1}, {2, 2}, {3, 4}, {5, 8}, {8, 8}, {9, 16}, {100, 128},
        {511, 512}, {512, 512}, {513, 1024}, {1000, 1024}, {1023, 1024},
        {1024, 1024}, {1025, 2048}, {1500, 2048}, {2047, 2048}, {2048, 2048},
        {2049, 3072}, {3072, 3072}, {3073, 4096}, {32000, 32768}, {32769, 33792},
        {1000001, 1000448},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        assert_int_equal(bp_round_f32(t[i][0]), t[i][1]);
    assert_int_equal(bp_round_f32(SIZE_MAX), 0);
    assert_int_equal(bp_round_f32(SIZE_MAX - 1022), 0);
}

static void test_round_slab_table(void **state)
{
    (void)state;
    static const size_t t[][2] = {
        {0, 4096}, {1, 4096}, {64, 4096}, {4095, 4096}, {4096, 4096},
        {4097, 8192}, {8192, 8192}, {8193, 12288}, {100000, 102400},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        assert_int_equal(bp_round_slab(t[i][0]), t[i][1]);
    assert_int_equal(bp_round_slab(SIZE_MAX), 0);
}

static void test_dtype_sizes(void **state)
{
    (void)state;
    assert_int_equal(bp_dtype_bytes(BP_DT_F32, 3), 12);
    assert_int_equal(bp_dtype_bytes(BP_DT_F16, 3), 6);
    assert_int_equal(bp_dtype_bytes(BP_DT_BF16, 5), 10);
    assert_int_equal(bp_dtype_bytes(BP_DT_I8, 7), 7);
    assert_int_equal(bp_dtype_bytes(BP_DT_I32, 7), 28);
    assert_int_equal(bp_dtype_bytes(BP_DT_Q8_0, 32), 34);
    assert_int_equal(bp_dtype_bytes(BP_DT_Q8_0, 33), 68);
    assert_int_equal(bp_dtype_bytes(BP_DT_RAW, 9), 9);
    assert_int_equal(bp_dtype_bytes(BP_DT_COUNT, 9), 0);
    assert_int_equal(bp_dtype_bytes(BP_DT_I32, SIZE_MAX / 2), 0);
    assert_string_equal(bp_dtype_name(BP_DT_Q8_0), "q8_0");
    assert_string_equal(bp_arm_name(BP_ARM_SLAB), "slab");
}

static void test_acquire_takes_smallest_fit(void **state)
{
    (void)state;
    bp_pool_t *p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, NULL, NULL);
    bp_buf_t *b8k = bp_acquire(p, 8192, NULL);
    bp_buf_t *b2k = bp_acquire(p, 2048, NULL);
    bp_buf_t *b4k = bp_acquire(p, 4096, NULL);
    uint64_t i8k = bp_id(b8k), i2k = bp_id(b2k), i4k = bp_id(b4k);
    bp_release(b4k);
    bp_release(b8k);
    bp_release(b2k);
    bp_buf_t *x = bp_acquire(p, 3000, NULL);     /* rounds to 3072 -> 4096 */
    assert_int_equal(bp_id(x), i4k);
    assert_int_equal(bp_len(x), 4096);
    bp_buf_t *y = bp_acquire(p, 100, NULL);      /* 128 -> 2048 */
    assert_int_equal(bp_id(y), i2k);
    assert_int_equal(bp_requested_bytes(y), 400);
    bp_buf_t *z = bp_acquire(p, 9000, NULL);     /* 9216: nothing fits */
    assert_int_not_equal(bp_id(z), i8k);
    assert_int_equal(bp_len(z), 9216);
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.hits, 2);
    assert_int_equal(s.misses, 4);
    assert_int_equal(s.cached_buffers, 1);
    bp_release(x);
    bp_release(y);
    bp_release(z);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
}

static void test_equal_lengths_come_back_lifo(void **state)
{
    (void)state;
    bp_pool_t *p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, NULL, NULL);
    /* Once in the class array, once in the tree (> 16 MiB of f32). */
    const size_t sizes[2] = {700, 5u << 20};
    for (int k = 0; k < 2; k++) {
        bp_buf_t *b[4];
        uint64_t id[4];
        for (int i = 0; i < 4; i++) {
            b[i] = bp_acquire(p, sizes[k], NULL);
            assert_non_null(b[i]);
            id[i] = bp_id(b[i]);
        }
        bp_release(b[2]);
        bp_release(b[0]);
        bp_release(b[3]);
        bp_release(b[1]);
        assert_int_equal(bp_check(p), 0);
        const int order[4] = {1, 3, 0, 2};
        for (int i = 0; i < 4; i++) {
            b[i] = bp_acquire(p, sizes[k], NULL);
            assert_int_equal(bp_id(b[i]), id[order[i]]);
            assert_int_equal(bp_check(p), 0);
        }
        for (int i = 0; i < 4; i++)
            bp_release(b[i]);
    }
    assert_int_equal(bp_destroy(p), 0);
}

/* --- the cap ------------------------------------------------------------------ */

static void test_buffer_alone_over_cap_is_destroyed(void **state)
{
    (void)state;
    talloc_t ta = {0};
    bp_pool_t *p = make_pool(4096, &ta, NULL);
    bp_buf_t *big = bp_acquire(p, 1025, NULL);       /* 2048 elems = 8 KiB */
    bp_buf_t *fits = bp_acquire(p, 1024, NULL);      /* exactly 4 KiB */
    assert_int_equal(atomic_load(&ta.live), 2);
    assert_int_equal(bp_release(big), 1);
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.destroyed_over_cap, 1);
    assert_int_equal(s.cached_bytes, 0);
    assert_int_equal(atomic_load(&ta.live), 1);
    bp_release(fits);                                 /* == cap: cached */
    s = stats_of(p);
    assert_int_equal(s.cached_bytes, 4096);
    assert_int_equal(s.reclaims_cached, 1);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
    assert_int_equal(atomic_load(&ta.live), 0);
}

static void test_buffer_that_would_exceed_cap_is_destroyed(void **state)
{
    (void)state;
    talloc_t ta = {0};
    bp_pool_t *p = make_pool(3 * 4096, &ta, NULL);
    bp_buf_t *b[4];
    for (int i = 0; i < 4; i++)
        b[i] = bp_acquire(p, 1024, NULL);
    for (int i = 0; i < 4; i++)
        bp_release(b[i]);
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.reclaims_cached, 3);
    assert_int_equal(s.destroyed_over_cap, 1);
    assert_int_equal(s.cached_bytes, 3 * 4096);
    assert_int_equal(s.peak_cached_bytes, 3 * 4096);
    assert_int_equal(s.backing_frees, 1);
    assert_int_equal(atomic_load(&ta.live), 3);
    /* Hitting makes room again. */
    bp_buf_t *x = bp_acquire(p, 512, NULL);
    assert_int_equal(stats_of(p).cached_bytes, 2 * 4096);
    bp_release(x);
    assert_int_equal(stats_of(p).cached_bytes, 3 * 4096);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
    assert_int_equal(atomic_load(&ta.live), 0);
}

typedef struct live {
    bp_buf_t *h;
    mbuf_t m;
} live_t;

/* Random acquires (both arms) and releases, checked step by step against
 * the model, for one cap. */
static void run_against_model(size_t cap, uint64_t seed, int steps)
{
    talloc_t ta = {0};
    bp_pool_t *p = make_pool(cap, &ta, NULL);
    model_t m;
    model_init(&m, cap);
    live_t lv[64];
    size_t nl = 0;
    static const size_t f32_sizes[] = {1, 3, 100, 700, 1024, 1025, 3000, 5000, 16384};
    static const size_t slab_sizes[] = {1, 4000, 4097, 10000, 30000, 70000};
    for (int step = 0; step < steps; step++) {
        uint64_t r = rng_next(&seed);
        if (nl == 64 || (nl > 0 && r % 5 < 2)) {
            size_t i = (size_t)(r >> 8) % nl;
            assert_int_equal(bp_release(lv[i].h), 1);
            model_release(&m, lv[i].m);
            lv[i] = lv[--nl];
        } else {
            int arm = (int)((r >> 4) & 1);
            size_t n, len;
            bp_buf_t *h;
            if (arm == BP_ARM_F32) {
                n = f32_sizes[(r >> 8) % (sizeof f32_sizes / sizeof f32_sizes[0])];
                len = bp_round_f32(n);
                h = bp_acquire(p, n, NULL);
            } else {
                n = slab_sizes[(r >> 8) % (sizeof slab_sizes / sizeof slab_sizes[0])];
                len = bp_round_slab(n);
                h = (r >> 20) & 1 ? bp_acquire_scratch(p, n, NULL)
                                  : bp_acquire_typed(p, BP_DT_U8, n, NULL);
            }
            assert_non_null(h);
            int hit;
            mbuf_t mb = model_acquire(&m, arm, len, &hit);
            assert_int_equal(bp_id(h), mb.id);
            assert_int_equal(bp_len(h), mb.len);
            assert_int_equal(bp_arm(h), arm);
            lv[nl].h = h;
            lv[nl].m = mb;
            nl++;
        }
        bp_stats_t s = stats_of(p);
        assert_int_equal(s.cached_bytes, m.cached_bytes);
        assert_int_equal(s.cached_buffers, m.n);
        assert_int_equal(s.hits, m.hits);
        assert_int_equal(s.misses, m.misses);
        assert_int_equal(s.destroyed_over_cap, m.destroyed);
        assert_int_equal(s.reclaims_cached, m.reclaimed);
        assert_int_equal(s.outstanding_buffers, nl);
        assert_true(s.cached_bytes <= cap);
        if (step % 64 == 0)
            assert_int_equal(bp_check(p), 0);
    }
    while (nl > 0)
        bp_release(lv[--nl].h);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
    assert_int_equal(atomic_load(&ta.live), 0);
    free(m.c);
}

static void test_cap_sweep_matches_model(void **state)
{
    (void)state;
    static const size_t caps[] = {
        0, 1, 4, 4095, 4096, 8192, 12288, 20000, 65536, 100000, 262144,
        1u << 20, BP_DEFAULT_MAX_CACHED_BYTES,
    };
    for (size_t i = 0; i < sizeof caps / sizeof caps[0]; i++)
        run_against_model(caps[i], 0x9E3779B97F4A7C15ULL + i, 1500);
}

static void test_arms_share_one_budget(void **state)
{
    (void)state;
    bp_pool_t *p = make_pool(8192, NULL, NULL);
    bp_buf_t *f = bp_acquire(p, 1024, NULL);              /* 4096 bytes */
    bp_buf_t *s1 = bp_acquire_typed(p, BP_DT_F16, 2048, NULL);  /* 4096 bytes */
    bp_buf_t *s2 = bp_acquire_scratch(p, 100, NULL);      /* 4096 bytes */
    assert_int_equal(bp_arm(f), BP_ARM_F32);
    assert_int_equal(bp_arm(s1), BP_ARM_SLAB);
    bp_release(f);
    bp_release(s1);
    bp_release(s2);                                       /* 12 KiB > cap */
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.cached_bytes, 8192);
    assert_int_equal(s.arm[BP_ARM_F32].cached_bytes, 4096);
    assert_int_equal(s.arm[BP_ARM_SLAB].cached_bytes, 4096);
    assert_int_equal(s.arm[BP_ARM_SLAB].destroyed_over_cap, 1);
    assert_int_equal(s.arm[BP_ARM_F32].destroyed_over_cap, 0);
    /* Arms do not serve each other: a slab request misses despite the f32 buffer. */
    bp_buf_t *s3 = bp_acquire_scratch(p, 4096, NULL);
    bp_buf_t *s4 = bp_acquire_scratch(p, 4096, NULL);
    s = stats_of(p);
    assert_int_equal(s.arm[BP_ARM_SLAB].hits, 1);
    assert_int_equal(s.arm[BP_ARM_SLAB].misses, 3);
    assert_int_equal(s.arm[BP_ARM_F32].cached_buffers, 1);
    bp_release(s3);
    bp_release(s4);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
}

static void test_slab_reused_across_types(void **state)
{
    (void)state;
    bp_pool_t *p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, NULL, NULL);
    bp_buf_t *h = bp_acquire_typed(p, BP_DT_F16, 1000, NULL);   /* 2000 B */
    assert_non_null(h);
    assert_int_equal(bp_len(h), 4096);
    assert_int_equal(bp_bytes(h), 4096);
    assert_int_equal(bp_elems(h), 2048);
    assert_int_equal(bp_dtype(h), BP_DT_F16);
    assert_null(bp_f32(h));
    assert_int_equal((uintptr_t)bp_data(h) % BP_ALIGN, 0);
    uint64_t id = bp_id(h);
    bp_release(h);
    h = bp_acquire_scratch(p, 3000, NULL);
    assert_int_equal(bp_id(h), id);
    assert_int_equal(bp_dtype(h), BP_DT_RAW);
    assert_int_equal(bp_requested_bytes(h), 3000);
    memset(bp_data(h), 0xab, bp_bytes(h));
    bp_release(h);
    h = bp_acquire_typed(p, BP_DT_Q8_0, 64, NULL);              /* 68 B */
    assert_int_equal(bp_id(h), id);
    assert_int_equal(bp_elems(h), 4096 / 34 * 32);
    bp_release(h);
    h = bp_acquire_typed(p, BP_DT_I8, 4096, NULL);
    assert_int_equal(bp_id(h), id);
    bp_release(h);
    /* The f32 dtype goes to the f32 arm and does not take the slab. */
    h = bp_acquire_typed(p, BP_DT_F32, 1024, NULL);
    assert_int_equal(bp_arm(h), BP_ARM_F32);
    assert_int_not_equal(bp_id(h), id);
    bp_release(h);
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.arm[BP_ARM_SLAB].backing_allocs, 1);
    assert_int_equal(s.arm[BP_ARM_SLAB].hits, 3);
    assert_int_equal(bp_destroy(p), 0);
}

static void test_view_keeps_buffer_alive(void **state)
{
    (void)state;
    bp_pool_t *p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, NULL, NULL);
    bp_buf_t *kv = bp_acquire_typed(p, BP_DT_F16, 4096, NULL);
    uint64_t id = bp_id(kv);
    bp_buf_t *view = kv;                   /* the narrow: an alias + a reference */
    assert_int_equal(bp_retain(view), 0);
    assert_int_equal(bp_refcount(kv), 2);
    assert_int_equal(bp_release(kv), 0);  /* the owner goes first */
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.outstanding_buffers, 1);
    assert_int_equal(s.cached_buffers, 0);
    assert_int_equal(bp_outstanding(p), 1);
    /* Still live: a same-size acquire must not get it. */
    bp_buf_t *other = bp_acquire_typed(p, BP_DT_F16, 4096, NULL);
    assert_int_not_equal(bp_id(other), id);
    ((unsigned char *)bp_data(view))[10] = 7;   /* still valid memory */
    assert_int_equal(bp_release(view), 1);
    s = stats_of(p);
    assert_int_equal(s.cached_buffers, 1);
    assert_int_equal(bp_release(other), 1);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
}

#if !PS_DEBUG   /* the debug build asserts instead: test_debug_build_asserts_on_destroy_busy */
static void test_destroy_with_outstanding_reports_busy(void **state)
{
    (void)state;
    talloc_t ta = {0}, tm = {0};
    bp_pool_t *p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, &ta, &tm);
    bp_buf_t *a = bp_acquire(p, 100, NULL);
    bp_buf_t *b = bp_acquire_scratch(p, 100, NULL);
    bp_buf_t *c = bp_acquire(p, 5000, NULL);
    bp_release(c);                              /* cached */
    assert_int_equal(bp_retain(b), 0);
    assert_int_equal(bp_destroy(p), PSC_EBUSY);
    /* Cached buffers are gone; the two outstanding ones remain. */
    assert_int_equal(atomic_load(&ta.live), 2);
    assert_int_equal(bp_release(a), 1);
    assert_int_equal(atomic_load(&ta.live), 1);
    assert_int_equal(bp_release(b), 0);
    assert_int_equal(bp_release(b), 1);         /* the last: pool memory goes too */
    assert_int_equal(atomic_load(&ta.live), 0);
    assert_int_equal(atomic_load(&tm.live), 0);
}
#endif

static void test_invalid_arguments_are_rejected(void **state)
{
    (void)state;
    int err = 0;
    assert_int_equal(bp_destroy(NULL), 0);
    assert_null(bp_acquire(NULL, 10, &err));
    assert_int_equal(err, PSC_EINVAL);
    assert_int_equal(bp_release(NULL), PSC_EINVAL);
    assert_int_equal(bp_retain(NULL), PSC_EINVAL);
    assert_int_equal(bp_stats(NULL, NULL), PSC_EINVAL);
    assert_int_equal(bp_check(NULL), PSC_EINVAL);

    bp_config_t cfg = bp_config_default();
    cfg.backing.alloc = t_alloc;          /* alloc without free */
    assert_null(bp_create(&cfg, &err));
    assert_int_equal(err, PSC_EINVAL);

    bp_pool_t *p = bp_create(NULL, &err);
    assert_non_null(p);
    assert_int_equal(bp_max_cached_bytes(p), BP_DEFAULT_MAX_CACHED_BYTES);
    assert_string_equal(bp_name(p), "");
    assert_null(bp_acquire(p, SIZE_MAX, &err));
    assert_int_equal(err, PSC_EINVAL);
    assert_null(bp_acquire(p, SIZE_MAX / 2, &err));
    assert_int_equal(err, PSC_EINVAL);
    assert_null(bp_acquire_scratch(p, SIZE_MAX, &err));
    assert_int_equal(err, PSC_EINVAL);
    assert_null(bp_acquire_typed(p, BP_DT_COUNT, 4, &err));
    assert_int_equal(err, PSC_EINVAL);
    assert_null(bp_acquire_typed(p, BP_DT_I32, SIZE_MAX / 2, &err));
    assert_int_equal(err, PSC_EINVAL);
    bp_buf_t *h = bp_acquire(p, 0, &err);        /* empty tensors get one element */
    assert_non_null(h);
    assert_int_equal(bp_len(h), 1);
    assert_int_equal(bp_release(h), 1);
#if !PS_DEBUG
    assert_int_equal(bp_release(h), PSC_EINVAL);  /* over-release is caught */
    assert_int_equal(bp_retain(h), PSC_EINVAL);
#endif
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
}

static void test_stats_report_internal_fragmentation(void **state)
{
    (void)state;
    bp_pool_t *p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, NULL, NULL);
    bp_buf_t *a = bp_acquire(p, 1025, NULL);          /* 4100 of 8192 bytes */
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.requested_bytes, 4100);
    assert_int_equal(s.outstanding_bytes, 8192);
    assert_true(s.internal_frag > (8192.0 - 4100) / 8192 - 1e-12 &&
                s.internal_frag < (8192.0 - 4100) / 8192 + 1e-12);
    bp_buf_t *b = bp_acquire(p, 1024, NULL);          /* exact: 4096 */
    s = stats_of(p);
    double at_peak = (12288.0 - 8196) / 12288;
    assert_true(s.internal_frag_at_peak > at_peak - 1e-12 &&
                s.internal_frag_at_peak < at_peak + 1e-12);
    bp_release(a);
    s = stats_of(p);
    assert_true(s.internal_frag < 1e-12);
    assert_int_equal(s.peak_outstanding_bytes, 12288);
    assert_int_equal(s.peak_outstanding_buffers, 2);
    assert_int_equal(s.reserved_bytes, 12288);
    bp_release(b);
    s = stats_of(p);
    assert_true(s.internal_frag_at_peak > at_peak - 1e-12 &&
                s.internal_frag_at_peak < at_peak + 1e-12);
    assert_int_equal(s.outstanding_bytes, 0);
    assert_int_equal(s.requested_bytes, 0);
    assert_int_equal(bp_destroy(p), 0);
}

/* --- allocation failure ------------------------------------------------------- */

/* Acquire with failure allowed: NULL must come with PSC_ENOMEM and leave the
 * pool consistent. */
static bp_buf_t *try_acquire(bp_pool_t *p, int kind, size_t n)
{
    int err = 1;
    bp_buf_t *h = kind == 0 ? bp_acquire(p, n, &err)
                : kind == 1 ? bp_acquire_typed(p, BP_DT_BF16, n, &err)
                            : bp_acquire_scratch(p, n, &err);
    if (h)
        assert_int_equal(err, 0);
    else
        assert_int_equal(err, PSC_ENOMEM);
    assert_int_equal(bp_check(p), 0);
    return h;
}

static void test_allocation_failure_at_every_entry_point(void **state)
{
    (void)state;
    talloc_t ta = {0}, tm = {0};
    bp_config_t cfg = bp_config_default();
    cfg.backing = allocator_of(&ta);
    cfg.meta = allocator_of(&tm);
    int err = 0;

    tm.fail_all = 1;                           /* bp_create */
    assert_null(bp_create(&cfg, &err));
    assert_int_equal(err, PSC_ENOMEM);
    tm.fail_all = 0;
    bp_pool_t *p = bp_create(&cfg, &err);
    assert_non_null(p);

    for (int which = 0; which < 2; which++) {  /* backing, then meta */
        talloc_t *t = which ? &tm : &ta;
        for (int kind = 0; kind < 3; kind++) {
            /* Each round asks for more than anything cached: it must miss. */
            size_t n = (size_t)10000 << (2 * (3 * which + kind));
            t->fail_all = 1;
            assert_null(try_acquire(p, kind, n));
            t->fail_all = 0;
            bp_stats_t s = stats_of(p);
            assert_int_equal(s.outstanding_buffers, 0);
            assert_int_equal(bp_outstanding(p), 0);
            bp_buf_t *h = try_acquire(p, kind, n);
            assert_non_null(h);
            bp_release(h);
            /* A hit needs neither allocator. */
            t->fail_all = 1;
            h = try_acquire(p, kind, n);
            assert_non_null(h);
            t->fail_all = 0;
            bp_release(h);
        }
    }
    bp_stats_t s = stats_of(p);
    assert_int_equal(s.failed_acquires, 6);
    assert_int_equal(s.acquires, 12);
    assert_int_equal(bp_destroy(p), 0);
    assert_int_equal(atomic_load(&ta.live), 0);
    assert_int_equal(atomic_load(&tm.live), 0);
}

/* A fixed workload where any create or acquire may fail; every failure must
 * be clean and leave the pool consistent. */
static void failing_workload(talloc_t *ta, talloc_t *tm, size_t cap)
{
    bp_config_t cfg = bp_config_default();
    cfg.max_cached_bytes = cap;
    cfg.backing = allocator_of(ta);
    cfg.meta = allocator_of(tm);
    int err = 0;
    bp_pool_t *p = bp_create(&cfg, &err);
    if (!p) {
        assert_int_equal(err, PSC_ENOMEM);
        return;
    }
    bp_buf_t *live[16] = {0};
    uint64_t seed = 42;
    for (int i = 0; i < 300; i++) {
        uint64_t r = rng_next(&seed);
        size_t slot = (size_t)(r % 16);
        if (live[slot]) {
            if ((r >> 10) % 4 == 0) {
                assert_int_equal(bp_retain(live[slot]), 0);
                assert_int_equal(bp_release(live[slot]), 0);
            }
            bp_release(live[slot]);
            live[slot] = NULL;
        } else {
            static const size_t n[] = {10, 1000, 1500, 3000, 9000, 20000};
            live[slot] = try_acquire(p, (int)((r >> 5) % 3), n[(r >> 12) % 6]);
        }
        assert_int_equal(bp_check(p), 0);
    }
    for (int i = 0; i < 16; i++)
        if (live[i])
            bp_release(live[i]);
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
}

static void test_allocation_failure_every_nth_call_leaks_nothing(void **state)
{
    (void)state;
    static const size_t caps[] = {20000, BP_DEFAULT_MAX_CACHED_BYTES};
    for (size_t c = 0; c < 2; c++) {
        /* How many calls does a clean run make? */
        talloc_t ta = {0}, tm = {0};
        failing_workload(&ta, &tm, caps[c]);
        long nb = atomic_load(&ta.calls), nm = atomic_load(&tm.calls);
        assert_true(nb > 5 && nm > 5);
        for (int which = 0; which < 2; which++) {
            long total = which ? nm : nb;
            for (long nth = 1; nth <= total + 1; nth++) {
                talloc_t a = {0}, m = {0};
                (which ? &m : &a)->fail_at = nth;
                failing_workload(&a, &m, caps[c]);
                assert_int_equal(atomic_load(&a.live), 0);
                assert_int_equal(atomic_load(&a.live_bytes), 0);
                assert_int_equal(atomic_load(&m.live), 0);
            }
        }
    }
}

/* --- the observer ------------------------------------------------------------- */

typedef struct rebuilt {
    uint64_t last_seq, events;
    int seq_ok;
    bp_stats_t s;          /* rebuilt from events only */
    size_t backing_live;
} rebuilt_t;

static void rebuild_observe(void *ctx, const bp_event_t *ev)
{
    rebuilt_t *r = ctx;
    bp_stats_t *s = &r->s;
    bp_arm_stats_t *a = &s->arm[ev->arm];
    if (ev->seq <= r->last_seq)
        r->seq_ok = 0;
    r->last_seq = ev->seq;
    r->events++;
    switch (ev->kind) {
    case BP_EV_ACQUIRE:
        s->acquires++;
        a->acquires++;
        if (ev->hit) {
            s->hits++, a->hits++;
            s->cached_bytes -= ev->granted_bytes;
            a->cached_bytes -= ev->granted_bytes;
            s->cached_buffers--, a->cached_buffers--;
        } else {
            s->misses++, a->misses++;
        }
        s->outstanding_buffers++, a->outstanding_buffers++;
        s->outstanding_bytes += ev->granted_bytes;
        a->outstanding_bytes += ev->granted_bytes;
        s->requested_bytes += ev->req_bytes;
        a->requested_bytes += ev->req_bytes;
        if (s->outstanding_buffers > s->peak_outstanding_buffers)
            s->peak_outstanding_buffers = s->outstanding_buffers;
        if (s->outstanding_bytes > s->peak_outstanding_bytes) {
            s->peak_outstanding_bytes = s->outstanding_bytes;
            s->internal_frag_at_peak =
                (double)(s->outstanding_bytes - s->requested_bytes) / (double)s->outstanding_bytes;
        }
        if (a->outstanding_bytes > a->peak_outstanding_bytes)
            a->peak_outstanding_bytes = a->outstanding_bytes;
        break;
    case BP_EV_RECLAIM:
        s->outstanding_buffers--, a->outstanding_buffers--;
        s->outstanding_bytes -= ev->granted_bytes;
        a->outstanding_bytes -= ev->granted_bytes;
        s->requested_bytes -= ev->req_bytes;
        a->requested_bytes -= ev->req_bytes;
        if (ev->cached) {
            s->reclaims_cached++, a->reclaims_cached++;
            s->cached_bytes += ev->granted_bytes;
            a->cached_bytes += ev->granted_bytes;
            s->cached_buffers++, a->cached_buffers++;
            if (s->cached_bytes > s->peak_cached_bytes)
                s->peak_cached_bytes = s->cached_bytes;
            if (a->cached_bytes > a->peak_cached_bytes)
                a->peak_cached_bytes = a->cached_bytes;
        } else {
            s->destroyed_over_cap++, a->destroyed_over_cap++;
        }
        break;
    case BP_EV_BACKING_ALLOC:
        s->backing_allocs++, a->backing_allocs++;
        r->backing_live++;
        break;
    case BP_EV_BACKING_FREE:
        s->backing_frees++, a->backing_frees++;
        r->backing_live--;
        break;
    default:
        r->seq_ok = 0;
    }
    if (s->outstanding_bytes + s->cached_bytes > s->peak_reserved_bytes)
        s->peak_reserved_bytes = s->outstanding_bytes + s->cached_bytes;
}

static void assert_arm_equal(const bp_arm_stats_t *x, const bp_arm_stats_t *y)
{
    assert_int_equal(x->acquires, y->acquires);
    assert_int_equal(x->hits, y->hits);
    assert_int_equal(x->misses, y->misses);
    assert_int_equal(x->backing_allocs, y->backing_allocs);
    assert_int_equal(x->backing_frees, y->backing_frees);
    assert_int_equal(x->reclaims_cached, y->reclaims_cached);
    assert_int_equal(x->destroyed_over_cap, y->destroyed_over_cap);
    assert_int_equal(x->cached_bytes, y->cached_bytes);
    assert_int_equal(x->peak_cached_bytes, y->peak_cached_bytes);
    assert_int_equal(x->cached_buffers, y->cached_buffers);
    assert_int_equal(x->outstanding_buffers, y->outstanding_buffers);
    assert_int_equal(x->outstanding_bytes, y->outstanding_bytes);
    assert_int_equal(x->peak_outstanding_bytes, y->peak_outstanding_bytes);
    assert_int_equal(x->requested_bytes, y->requested_bytes);
}

static void assert_stats_rebuilt(const bp_stats_t *got, const rebuilt_t *r)
{
    const bp_stats_t *s = &r->s;
    assert_true(r->seq_ok);
    assert_int_equal(got->acquires, s->acquires);
    assert_int_equal(got->hits, s->hits);
    assert_int_equal(got->misses, s->misses);
    assert_int_equal(got->backing_allocs, s->backing_allocs);
    assert_int_equal(got->backing_frees, s->backing_frees);
    assert_int_equal(got->reclaims_cached, s->reclaims_cached);
    assert_int_equal(got->destroyed_over_cap, s->destroyed_over_cap);
    assert_int_equal(got->cached_bytes, s->cached_bytes);
    assert_int_equal(got->peak_cached_bytes, s->peak_cached_bytes);
    assert_int_equal(got->cached_buffers, s->cached_buffers);
    assert_int_equal(got->outstanding_buffers, s->outstanding_buffers);
    assert_int_equal(got->peak_outstanding_buffers, s->peak_outstanding_buffers);
    assert_int_equal(got->outstanding_bytes, s->outstanding_bytes);
    assert_int_equal(got->peak_outstanding_bytes, s->peak_outstanding_bytes);
    assert_int_equal(got->requested_bytes, s->requested_bytes);
    assert_int_equal(got->peak_reserved_bytes, s->peak_reserved_bytes);
    assert_int_equal(got->reserved_bytes, s->outstanding_bytes + s->cached_bytes);
    assert_true(got->internal_frag_at_peak == s->internal_frag_at_peak);
    for (int a = 0; a < BP_ARM_COUNT; a++)
        assert_arm_equal(&got->arm[a], &s->arm[a]);
}

static void test_observer_events_rebuild_every_stat(void **state)
{
    (void)state;
    static const size_t caps[] = {0, 30000, 200000, BP_DEFAULT_MAX_CACHED_BYTES};
    for (size_t c = 0; c < 4; c++) {
        rebuilt_t r;
        memset(&r, 0, sizeof r);
        r.seq_ok = 1;
        talloc_t ta = {0};
        bp_config_t cfg = bp_config_default();
        cfg.max_cached_bytes = caps[c];
        cfg.backing = allocator_of(&ta);
        cfg.observe = rebuild_observe;
        cfg.observe_ctx = &r;
        bp_pool_t *p = bp_create(&cfg, NULL);
        assert_non_null(p);
        bp_buf_t *live[32] = {0};
        uint64_t seed = 7 + c;
        for (int i = 0; i < 4000; i++) {
            uint64_t x = rng_next(&seed);
            size_t slot = (size_t)(x % 32);
            if (live[slot]) {
                bp_release(live[slot]);
                live[slot] = NULL;
            } else {
                size_t n = 1 + (size_t)((x >> 8) % 6000);
                switch ((x >> 30) % 3) {
                case 0: live[slot] = bp_acquire(p, n, NULL); break;
                case 1: live[slot] = bp_acquire_typed(p, BP_DT_F16, n, NULL); break;
                default: live[slot] = bp_acquire_scratch(p, n * 3, NULL); break;
                }
                assert_non_null(live[slot]);
            }
            if (i % 100 == 0) {
                bp_stats_t got = stats_of(p);
                assert_stats_rebuilt(&got, &r);
            }
        }
        bp_stats_t got = stats_of(p);
        assert_stats_rebuilt(&got, &r);
        assert_int_equal(r.backing_live, (size_t)atomic_load(&ta.live));
        for (int i = 0; i < 32; i++)
            if (live[i])
                bp_release(live[i]);
        got = stats_of(p);
        assert_stats_rebuilt(&got, &r);
        uint64_t before = r.events;
        assert_int_equal(bp_destroy(p), 0);
        /* Destroy frees the cache and says so. */
        assert_int_equal(r.events - before, got.cached_buffers);
        assert_int_equal(r.backing_live, 0);
        assert_true(r.seq_ok);
    }
}

/* --- the index at scale ------------------------------------------------------- */

static void test_thousands_of_lengths_keep_exact_selection(void **state)
{
    (void)state;
    talloc_t ta = {0}, tm = {0};
    ta.fake = 1;                                   /* no real memory behind */
    debug_walk_every("64");                        /* 11,000 operations over 4,000 buffers */
    bp_pool_t *p = make_pool(SIZE_MAX, &ta, &tm);
    debug_walk_every(NULL);
    model_t m;
    model_init(&m, SIZE_MAX);
    enum { N = 4000 };
    live_t *lv = calloc(N + 64, sizeof *lv);
    assert_non_null(lv);
    uint64_t seed = 1234567;
    /* Lengths on both sides of the class/tree boundary (16 MiB). */
    size_t nl = 0;
    for (; nl < N; nl++) {
        uint64_t r = rng_next(&seed);
        int arm = (int)(r & 1);
        size_t n;
        if (arm == BP_ARM_F32)
            n = (r >> 4) % 4 == 0 ? 1 + (r >> 8) % 1024 : 1 + (r >> 8) % (1024u * 9000);
        else
            n = 1 + (r >> 8) % (4096u * 9000);
        bp_buf_t *h = arm == BP_ARM_F32 ? bp_acquire(p, n, NULL) : bp_acquire_scratch(p, n, NULL);
        assert_non_null(h);
        int hit;
        lv[nl].h = h;
        lv[nl].m = model_acquire(&m, arm, arm == BP_ARM_F32 ? bp_round_f32(n) : bp_round_slab(n), &hit);
        assert_int_equal(bp_id(h), lv[nl].m.id);
    }
    /* Release all in random order. */
    for (size_t i = nl; i > 1; i--) {
        size_t j = (size_t)(rng_next(&seed) % i);
        live_t t = lv[i - 1];
        lv[i - 1] = lv[j];
        lv[j] = t;
    }
    for (size_t i = 0; i < nl; i++) {
        bp_release(lv[i].h);
        model_release(&m, lv[i].m);
    }
    nl = 0;
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(stats_of(p).cached_buffers, N);

    /* Steady state: hits only touch the index, never the meta allocator. */
    long meta_calls = atomic_load(&tm.calls);
    for (int i = 0; i < 3000; i++) {
        uint64_t r = rng_next(&seed);
        int arm = (int)(r & 1);
        size_t n = arm == BP_ARM_F32 ? 1 + (r >> 8) % (1024u * 8000) : 1 + (r >> 8) % (4096u * 8000);
        size_t len = arm == BP_ARM_F32 ? bp_round_f32(n) : bp_round_slab(n);
        bp_buf_t *h = arm == BP_ARM_F32 ? bp_acquire(p, n, NULL) : bp_acquire_scratch(p, n, NULL);
        int hit;
        mbuf_t mb = model_acquire(&m, arm, len, &hit);
        assert_int_equal(bp_id(h), mb.id);
        assert_true(hit);                          /* larger ones are cached */
        lv[nl].h = h;
        lv[nl].m = mb;
        nl++;
        if (nl == 64 || (r >> 40) % 3 == 0) {
            size_t k = (size_t)((r >> 20) % nl);
            bp_release(lv[k].h);
            model_release(&m, lv[k].m);
            lv[k] = lv[--nl];
        }
    }
    assert_int_equal(atomic_load(&tm.calls), meta_calls);
    while (nl > 0) {
        nl--;
        bp_release(lv[nl].h);
    }
    assert_int_equal(bp_check(p), 0);
    assert_int_equal(bp_destroy(p), 0);
    assert_int_equal(atomic_load(&ta.live), 0);
    assert_int_equal(atomic_load(&tm.live), 0);
    free(lv);
    free(m.c);
}

/* --- threads ------------------------------------------------------------------- */

enum { NTHREADS = 4, NSLOTS = 16, ITERS = 20000 };

typedef struct shared {
    bp_pool_t *pool;
    _Atomic(bp_buf_t *) slots[NSLOTS];   /* buffers handed between threads */
    atomic_int failures;
    uint64_t events, last_seq;          /* written by the observer, under the pool lock */
    int seq_ok;
} shared_t;

static void count_observe(void *ctx, const bp_event_t *ev)
{
    shared_t *sh = ctx;
    if (ev->seq <= sh->last_seq)
        sh->seq_ok = 0;
    sh->last_seq = ev->seq;
    sh->events++;
}

static void *stress_thread(void *arg)
{
    shared_t *sh = ((void **)arg)[0];
    uint64_t seed = (uint64_t)(uintptr_t)((void **)arg)[1];
    for (int i = 0; i < ITERS; i++) {
        uint64_t r = rng_next(&seed);
        size_t n = 1 + (size_t)((r >> 8) % 5000);
        bp_buf_t *h = (r >> 4) & 1 ? bp_acquire(sh->pool, n, NULL)
                                   : bp_acquire_typed(sh->pool, BP_DT_I8, n * 2, NULL);
        if (!h) {
            atomic_fetch_add(&sh->failures, 1);
            continue;
        }
        ((unsigned char *)bp_data(h))[0] = (unsigned char)i;
        int views = (int)((r >> 40) % 3);
        for (int v = 0; v < views; v++)
            bp_retain(h);
        /* Hand the buffer (and its views) to whoever takes the slot next. */
        bp_buf_t *old = atomic_exchange(&sh->slots[(r >> 20) % NSLOTS], h);
        if (old) {
            while (bp_release(old) == 0)
                ;
        }
        if ((r >> 50) % 17 == 0)
            (void)bp_outstanding(sh->pool);
        if ((r >> 50) % 257 == 0)
            assert_int_equal(bp_check(sh->pool), 0);
    }
    return NULL;
}

static void test_threads_share_buffers_and_views(void **state)
{
    (void)state;
    talloc_t ta = {0}, tm = {0};
    shared_t *sh = calloc(1, sizeof *sh);
    assert_non_null(sh);
    sh->seq_ok = 1;
    bp_config_t cfg = bp_config_default();
    cfg.max_cached_bytes = 256 * 1024;          /* small: exercises destroy too */
    cfg.backing = allocator_of(&ta);
    cfg.meta = allocator_of(&tm);
    cfg.observe = count_observe;
    cfg.observe_ctx = sh;
    debug_walk_every("64");    /* 160,000 operations; the threads still overlap */
    sh->pool = bp_create(&cfg, NULL);
    debug_walk_every(NULL);
    assert_non_null(sh->pool);
    pthread_t th[NTHREADS];
    void *args[NTHREADS][2];
    for (int t = 0; t < NTHREADS; t++) {
        args[t][0] = sh;
        args[t][1] = (void *)(uintptr_t)(1000 + 77 * t);
        assert_int_equal(pthread_create(&th[t], NULL, stress_thread, args[t]), 0);
    }
    for (int t = 0; t < NTHREADS; t++)
        pthread_join(th[t], NULL);
    for (int s = 0; s < NSLOTS; s++) {
        bp_buf_t *h = atomic_exchange(&sh->slots[s], NULL);
        if (h)
            while (bp_release(h) == 0)
                ;
    }
    assert_int_equal(atomic_load(&sh->failures), 0);
    assert_int_equal(bp_check(sh->pool), 0);
    bp_stats_t s = stats_of(sh->pool);
    assert_int_equal(s.acquires, (uint64_t)NTHREADS * ITERS);
    assert_int_equal(s.hits + s.misses, s.acquires);
    assert_int_equal(s.outstanding_buffers, 0);
    assert_int_equal(s.reclaims_cached + s.destroyed_over_cap, s.acquires);
    assert_int_equal(s.backing_allocs - s.backing_frees, s.cached_buffers);
    assert_int_equal(sh->events, 2 * s.acquires + s.backing_allocs + s.backing_frees);
    assert_true(sh->seq_ok);
    assert_int_equal(bp_destroy(sh->pool), 0);
    assert_int_equal(atomic_load(&ta.live), 0);
    assert_int_equal(atomic_load(&tm.live), 0);
    free(sh);
}

/* --- the invariant walker sees corruption ----------------------------------- */

/* A pool with one buffer out (a: 100 f32) and one cached (b: 5000 f32, a
 * length of its own class), as both corruption tests start. */
typedef struct corrupt_fix {
    bp_pool_t *p;
    bp_buf_t *a, *b;
} corrupt_fix_t;

static corrupt_fix_t corrupt_fix(void)
{
    corrupt_fix_t f;
    f.p = make_pool(BP_DEFAULT_MAX_CACHED_BYTES, NULL, NULL);
    f.a = bp_acquire(f.p, 100, NULL);
    f.b = bp_acquire(f.p, 5000, NULL);
    assert_non_null(f.a);
    assert_non_null(f.b);
    assert_int_equal(bp_release(f.b), 1);       /* cached */
    assert_int_equal(bp_check(f.p), 0);
    return f;
}

/* bp_check is what the debug build runs after every operation: it must
 * see a counter that disagrees with the buffers, and a free list that
 * holds a buffer twice (here a cycle). */
static void test_walker_catches_corrupt_counters_and_free_list(void **state)
{
    (void)state;
    corrupt_fix_t f = corrupt_fix();
    f.p->cached_bytes += 4096;
    assert_int_equal(bp_check(f.p), PSC_ECORRUPT);
    f.p->cached_bytes -= 4096;
    assert_int_equal(bp_check(f.p), 0);
    f.p->out_bytes -= 1;
    assert_int_equal(bp_check(f.p), PSC_ECORRUPT);
    f.p->out_bytes += 1;
    f.b->below = f.b;                            /* b's stack: b, b, b, ... */
    assert_int_equal(bp_check(f.p), PSC_ECORRUPT);
    f.b->below = NULL;
    assert_int_equal(bp_check(f.p), 0);
#if !PS_DEBUG
    /* A release build never walks on its own: the corrupt pool goes on. */
    f.p->cached_bytes += 4096;
    bp_buf_t *c = bp_acquire(f.p, 100, NULL);
    assert_non_null(c);
    assert_int_equal(bp_release(c), 1);
    f.p->cached_bytes -= 4096;
#endif
    assert_int_equal(bp_release(f.a), 1);
    assert_int_equal(bp_check(f.p), 0);
    assert_int_equal(bp_destroy(f.p), 0);
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
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT || !strstr(msg, want))
        fail_msg("expected an abort naming \"%s\"; status %#x, stderr: %s", want, st, msg);
}

static void acquire_after_counter_corruption(void *arg)
{
    corrupt_fix_t *f = arg;
    f->p->cached_bytes += 4096;
    (void)bp_acquire(f->p, 100, NULL);           /* takes b: the walk at its unlock */
}

static void release_after_free_list_corruption(void *arg)
{
    corrupt_fix_t *f = arg;
    f->b->below = f->b;
    (void)bp_release(f->a);                      /* a goes to another class: b's stack untouched */
}

static void destroy_busy(void *arg)
{
    corrupt_fix_t *f = arg;
    (void)bp_destroy(f->p);                      /* a is still out */
}

/* The debug build: the operation after the corruption aborts, naming the
 * invariant; and the misuse bufpool.h promises to assert on does. */
static void test_debug_build_aborts_at_the_operation_after_corruption(void **state)
{
    (void)state;
    corrupt_fix_t f = corrupt_fix();
    expect_invariant_abort(acquire_after_counter_corruption, &f,
                           "invariant broken in buffer pool 'test': cached bytes differ from the sum of the cached buffers");
    expect_invariant_abort(release_after_free_list_corruption, &f,
                           "invariant broken in buffer pool 'test': a cached buffer is twice in the free lists");
    assert_int_equal(bp_check(f.p), 0);          /* the children's corruption stayed there */
    assert_int_equal(bp_release(f.a), 1);
    assert_int_equal(bp_destroy(f.p), 0);
}

static void test_debug_build_asserts_on_destroy_busy(void **state)
{
    (void)state;
    corrupt_fix_t f = corrupt_fix();
    expect_invariant_abort(destroy_busy, &f, "bp_destroy: buffers still outstanding");
    assert_int_equal(bp_release(f.a), 1);
    assert_int_equal(bp_destroy(f.p), 0);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_release_then_acquire_returns_same_buffer),
        cmocka_unit_test(test_round_f32_table),
        cmocka_unit_test(test_round_slab_table),
        cmocka_unit_test(test_dtype_sizes),
        cmocka_unit_test(test_acquire_takes_smallest_fit),
        cmocka_unit_test(test_equal_lengths_come_back_lifo),
        cmocka_unit_test(test_buffer_alone_over_cap_is_destroyed),
        cmocka_unit_test(test_buffer_that_would_exceed_cap_is_destroyed),
        cmocka_unit_test(test_cap_sweep_matches_model),
        cmocka_unit_test(test_arms_share_one_budget),
        cmocka_unit_test(test_slab_reused_across_types),
        cmocka_unit_test(test_view_keeps_buffer_alive),
#if !PS_DEBUG
        cmocka_unit_test(test_destroy_with_outstanding_reports_busy),
#else
        cmocka_unit_test(test_debug_build_aborts_at_the_operation_after_corruption),
        cmocka_unit_test(test_debug_build_asserts_on_destroy_busy),
#endif
        cmocka_unit_test(test_walker_catches_corrupt_counters_and_free_list),
        cmocka_unit_test(test_invalid_arguments_are_rejected),
        cmocka_unit_test(test_stats_report_internal_fragmentation),
        cmocka_unit_test(test_allocation_failure_at_every_entry_point),
        cmocka_unit_test(test_allocation_failure_every_nth_call_leaks_nothing),
        cmocka_unit_test(test_observer_events_rebuild_every_stat),
        cmocka_unit_test(test_thousands_of_lengths_keep_exact_selection),
        cmocka_unit_test(test_threads_share_buffers_and_views),
    };
    return cmocka_run_group_tests_name("bufpool", tests, NULL, NULL);
}
