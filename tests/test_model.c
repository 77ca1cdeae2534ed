/* test_model.c — model/: what each event means, on events built by hand
 * (no writer, no reader), with every expectation computed in the comments.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "invariant.h"
#include "model.h"
#include "poolscope/blockpool.h"
#include "poolscope/format.h"
#if PS_DEBUG
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#endif


static pst_event_t ev_of(int type, uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = (uint8_t)type;
    ev.f[0] = a; ev.f[1] = b; ev.f[2] = c; ev.f[3] = d; ev.f[4] = e; ev.f[5] = f;
    return ev;
}

static pm_step_t feed(pm_model_t *m, pst_event_t ev)
{
    pm_step_t st;
    assert_int_equal(pm_event(m, &ev, &st), 0);
    return st;
}

static void kv_create(pm_model_t *m, uint64_t id, uint64_t block_size)
{
    /* "uSuuuuuu" pool id, name, block_size, n_blocks, separate_kv, grow, max_blocks, slot bytes */
    pst_event_t ev = ev_of(PST_EV_KVB_CREATE, id, 0, block_size, 64, 1, 0);
    ev.f[6] = 64;
    ev.f[7] = 4096;
    feed(m, ev);
}

static pm_step_t kv_alloc(pm_model_t *m, uint64_t pool, uint64_t stream, uint64_t owner, uint64_t tokens,
                          uint32_t *ids, uint32_t n)
{
    pst_event_t ev = ev_of(PST_EV_KVB_ALLOC, pool, 1, stream, owner, 0, tokens);
    ev.ids = ids;
    ev.n_ids = n;
    return feed(m, ev);
}

static pm_step_t kv_free(pm_model_t *m, uint64_t pool, uint32_t *ids, uint32_t n)
{
    pst_event_t ev = ev_of(PST_EV_KVB_FREE, pool, 2, 0, 0, 0, 0);
    ev.ids = ids;
    ev.n_ids = n;
    return feed(m, ev);
}

static void totals(pm_model_t *m, uint64_t blocks, uint64_t tokens, uint64_t capacity)
{
    uint64_t b, t, c;
    pm_kv_totals(m, &b, &t, &c);
    assert_int_equal(b, blocks);
    assert_int_equal(t, tokens);
    assert_int_equal(c, capacity);
}

static uint32_t used(pm_model_t *m, uint64_t pool, uint64_t block)
{
    uint32_t n = 0;
    assert_int_equal(pm_kv_used(m, pool, block, &n), 1);
    return n;
}

/* ---- KV ------------------------------------------------------------------------ */

static void test_kv_allocation_spreads_tokens_and_carries_over_a_split_list(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    kv_create(m, 1, 16);
    /* 40 tokens over a list split in two events: [0, 1] carries n_tokens,
     * [2] carries 0 -> 16, 16, then the 8 left over */
    uint32_t a[2] = { 0, 1 }, b[1] = { 2 };
    pm_step_t s = kv_alloc(m, 1, KVB_STREAM_KV, 7, 40, a, 2);
    assert_int_equal(s.n_ops, 3);               /* 2 blocks + the request's state */
    assert_int_equal(s.ops[0].kind, PM_KV_BLOCK_ALLOC);
    assert_int_equal(s.ops[0].n, 16);
    assert_int_equal(s.ops[2].kind, PM_KV_REQUEST);
    assert_int_equal(s.ops[2].n, 32);
    kv_alloc(m, 1, KVB_STREAM_KV, 7, 0, b, 1);
    assert_int_equal(used(m, 1, 2), 8);
    totals(m, 3, 40, 48);
    /* an id already held is not allocated again and takes no tokens */
    s = kv_alloc(m, 1, KVB_STREAM_KV, 7, 5, b, 1);
    totals(m, 3, 40, 48);
    pm_destroy(m);
}

static void test_kv_tokens_change_and_a_freed_block_holds_nothing(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    kv_create(m, 1, 16);
    uint32_t a[1] = { 5 };
    kv_alloc(m, 1, KVB_STREAM_KV, 1, 10, a, 1);
    feed(m, ev_of(PST_EV_KVB_TOKENS, 1, 2, 5, 13, 0, 0));   /* block 5 now holds 13 */
    totals(m, 1, 13, 16);
    pm_step_t s = kv_free(m, 1, a, 1);
    assert_int_equal(s.ops[0].kind, PM_KV_BLOCK_FREE);
    assert_int_equal(s.ops[0].n, 13);
    totals(m, 0, 0, 0);
    uint32_t n;
    assert_int_equal(pm_kv_used(m, 1, 5, &n), 0);
    /* the same id again: 3 tokens, not the 13 it held before */
    kv_alloc(m, 1, KVB_STREAM_KV, 1, 3, a, 1);
    assert_int_equal(used(m, 1, 5), 3);
    totals(m, 1, 3, 16);
    pm_destroy(m);
}

static void test_kv_v_blocks_fill_the_pool_but_not_the_request(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    kv_create(m, 1, 16);
    uint32_t k[1] = { 0 }, v[1] = { 1 };
    pm_step_t s = kv_alloc(m, 1, KVB_STREAM_K, 3, 9, k, 1);
    assert_int_equal(s.ops[s.n_ops - 1].n, 9);
    s = kv_alloc(m, 1, KVB_STREAM_V, 3, 9, v, 1);
    /* the request stores 9 tokens (V duplicates K); the pool holds 18 in 32 slots */
    assert_int_equal(s.ops[s.n_ops - 1].kind, PM_KV_REQUEST);
    assert_int_equal(s.ops[s.n_ops - 1].n, 9);
    totals(m, 2, 18, 32);
    pm_destroy(m);
}

static void test_kv_events_of_an_unknown_pool_are_orphans(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    uint32_t a[1] = { 0 };
    pm_step_t s = kv_alloc(m, 9, KVB_STREAM_KV, 1, 4, a, 1);
    assert_int_equal(s.n_ops, 0);
    assert_int_equal(pm_kv_orphans(m), 1);
    totals(m, 0, 0, 0);
    pm_destroy(m);
}

static void test_kv_huge_block_ids_size_nothing(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    kv_create(m, 1, 16);
    /* ids near 2^32: a table indexed by id would need tens of GiB */
    uint32_t a[2] = { 0xfffffff0u, 0xffffffffu };
    kv_alloc(m, 1, KVB_STREAM_KV, 1, 20, a, 2);
    assert_int_equal(used(m, 1, 0xffffffffu), 4);
    totals(m, 2, 20, 32);
    pm_destroy(m);
}

static void test_kv_request_marker_gives_the_reservation_and_ends_the_request(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    kv_create(m, 1, 16);
    int64_t pay[2] = { 10, 20 };               /* prompt 10, max 20 -> reserve 30 */
    pst_event_t beg = ev_of(PST_EV_MARK_BEGIN, 1, 42, 0, 0, 0, 0);
    beg.str = "request";
    memcpy(beg.payload, pay, sizeof pay);
    beg.n_payload = 2;
    feed(m, beg);
    uint32_t a[1] = { 0 };
    pm_step_t s = kv_alloc(m, 1, KVB_STREAM_KV, 42, 12, a, 1);
    const pm_op_t *q = &s.ops[s.n_ops - 1];
    assert_int_equal(q->kind, PM_KV_REQUEST);
    assert_int_equal(q->bytes, 30);
    assert_int_equal(q->n, 12);
    assert_true(q->flags & PM_F_RESIDENT);
    uint32_t slot = q->owner;
    s = kv_free(m, 1, a, 1);
    q = &s.ops[s.n_ops - 1];
    assert_int_equal(q->kind, PM_KV_REQUEST);
    assert_false(q->flags & PM_F_RESIDENT);
    /* the request is not over until its marker ends: the slot is kept */
    s = kv_alloc(m, 1, KVB_STREAM_KV, 43, 1, a, 1);
    uint32_t slot43 = s.ops[s.n_ops - 1].owner;
    assert_int_not_equal(slot43, slot);
    pst_event_t end = ev_of(PST_EV_MARK_END, 1, 42, 0, 0, 0, 0);
    end.str = "request";
    feed(m, end);
    kv_free(m, 1, a, 1);                          /* 43 had no marker: over when it holds nothing */
    s = kv_alloc(m, 1, KVB_STREAM_KV, 44, 1, a, 1);
    /* both slots came back (42 at its END, 43 at its free); the newest first */
    assert_int_equal(s.ops[s.n_ops - 1].owner, slot43);
    s = kv_alloc(m, 1, KVB_STREAM_KV, 45, 1, (uint32_t[]){ 1 }, 1);
    assert_int_equal(s.ops[s.n_ops - 1].owner, slot);
    pm_destroy(m);
}

/* ---- markers --------------------------------------------------------------------- */

static void test_marker_nesting_is_counted_per_name(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    int kinds[5] = { PST_EV_MARK_BEGIN, PST_EV_MARK_BEGIN, PST_EV_MARK_END, PST_EV_MARK_END, PST_EV_MARK_END };
    uint64_t after[5] = { 1, 2, 1, 0, 0 }, before[5] = { 0, 1, 2, 1, 0 };
    for (int i = 0; i < 5; i++) {
        pst_event_t ev = ev_of(kinds[i], 3, (uint64_t)i, 0, 0, 0, 0);
        ev.str = "forward";
        pm_step_t s = feed(m, ev);
        assert_int_equal(s.n_ops, 1);
        assert_int_equal(s.ops[0].kind, PM_MARK);
        assert_int_equal(s.ops[0].n, after[i]);
        assert_int_equal(s.ops[0].req, before[i]);   /* the last END closed nothing */
    }
    pm_destroy(m);
}

/* ---- heap ------------------------------------------------------------------------- */

static void test_heap_calls_as_allocations_and_frees(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    /* calloc(2^33, 2^32) overflows: a failed call asking for nothing */
    pm_step_t s = feed(m, ev_of(PST_EV_CALLOC, 0x1000, 1ull << 33, 1ull << 32, 0, 0, 0));
    assert_int_equal(s.call, PM_F_CALLOC);
    assert_int_equal(s.call_bytes, 0);
    assert_int_equal(s.n_ops, 1);
    assert_int_equal(s.ops[0].kind, PM_HEAP_FAILED);
    s = feed(m, ev_of(PST_EV_CALLOC, 0x1000, 3, 8, 0, 0, 0));
    assert_int_equal(s.ops[0].kind, PM_HEAP_ALLOC);
    assert_int_equal(s.ops[0].bytes, 24);
    /* a moving realloc: free old, allocate new */
    s = feed(m, ev_of(PST_EV_REALLOC, 0x1000, 0x2000, 100, 0, 0, 0));
    assert_int_equal(s.n_ops, 2);
    assert_int_equal(s.ops[0].kind, PM_HEAP_FREE);
    assert_int_equal(s.ops[0].key, 0x1000);
    assert_int_equal(s.ops[1].kind, PM_HEAP_ALLOC);
    assert_int_equal(s.ops[1].key, 0x2000);
    /* a failed realloc keeps the old block */
    s = feed(m, ev_of(PST_EV_REALLOC, 0x2000, 0, 1ull << 40, 0, 0, 0));
    assert_int_equal(s.n_ops, 1);
    assert_int_equal(s.ops[0].kind, PM_HEAP_FAILED);
    /* realloc(p, 0) returning NULL frees */
    s = feed(m, ev_of(PST_EV_REALLOC, 0x2000, 0, 0, 0, 0, 0));
    assert_int_equal(s.ops[0].kind, PM_HEAP_FREE);
    /* reallocarray overflowing: failed, old kept */
    s = feed(m, ev_of(PST_EV_REALLOCARRAY, 0x3000, 0, UINT64_MAX, 2, 0, 0));
    assert_int_equal(s.n_ops, 1);
    assert_int_equal(s.ops[0].kind, PM_HEAP_FAILED);
    pm_destroy(m);
}

/* ---- pools ------------------------------------------------------------------------ */

static void test_pool_requested_granted_and_oversized(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    /* "uuuuuuuuu" pool id, pool_seq, arm, buf id, requested, granted, req bytes, granted bytes, hit */
    pst_event_t a = ev_of(PST_EV_POOL_ACQUIRE, 1, 1, 1, 10, 1000, 4096);
    a.f[6] = 1000; a.f[7] = 4096; a.f[8] = 0;
    feed(m, a);
    pst_event_t b = a;
    b.f[3] = 11; b.f[6] = 5000; b.f[7] = 8192;
    feed(m, b);
    pst_event_t c = a;                           /* exactly twice: not over 2x */
    c.f[3] = 12; c.f[6] = 2048; c.f[7] = 4096; c.f[8] = 1;
    feed(m, c);
    size_t n;
    const pm_pool_t *p = pm_pools(m, &n);
    assert_int_equal(n, 1);
    assert_int_equal(p[0].acquires, 3);
    assert_int_equal(p[0].hits, 1);
    assert_int_equal(p[0].req_bytes, 8048);
    assert_int_equal(p[0].granted_bytes, 16384);
    assert_int_equal(p[0].oversized, 1);
    assert_int_equal(p[0].outstanding, 16384);
    /* "uuuuuu" pool id, pool_seq, arm, buf id, granted bytes, cached */
    feed(m, ev_of(PST_EV_POOL_RECLAIM, 1, 4, 1, 11, 8192, 1));
    p = pm_pools(m, &n);
    assert_int_equal(p[0].outstanding, 8192);
    assert_int_equal(p[0].cached, 8192);
    /* outside the window nothing is counted; the state stays exact */
    pm_set_counting(m, 0);
    feed(m, a);
    p = pm_pools(m, &n);
    assert_int_equal(p[0].acquires, 3);
    assert_int_equal(p[0].outstanding, 12288);
    assert_int_equal(p[0].peak_out, 16384);
    pm_destroy(m);
}

/* ---- mappings --------------------------------------------------------------------- */

static void test_reservations_are_apart_from_committed_memory(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    const uint64_t A = 0x7f0000000000ull, MiB = 1 << 20;
    /* "Auuuzu" ret, len, prot, flags, fd, offset: 1 MiB PROT_NONE, MAP_PRIVATE|MAP_ANONYMOUS */
    feed(m, ev_of(PST_EV_MMAP, A, MiB, 0, 0x22, UINT64_MAX, 0));
    const pm_maps_t *mt = pm_maps(m);
    assert_int_equal(mt->anon, MiB);
    assert_int_equal(mt->reserved, MiB);
    /* 64 KiB made read-write, twice (the second changes nothing) */
    feed(m, ev_of(PST_EV_MPROTECT, A + 4096, 65536, 3, 0, 0, 0));
    feed(m, ev_of(PST_EV_MPROTECT, A + 4096, 65536, 3, 0, 0, 0));
    assert_int_equal(mt->reserved, MiB - 65536);
    assert_int_equal(mt->peak_committed, 65536);
    /* 32 KiB of it back to PROT_NONE */
    feed(m, ev_of(PST_EV_MPROTECT, A + 4096, 32768, 0, 0, 0, 0));
    assert_int_equal(mt->reserved, MiB - 32768);
    /* a read-write mapping is committed from the start */
    feed(m, ev_of(PST_EV_MMAP, A + 2 * MiB, 8192, 3, 0x22, UINT64_MAX, 0));
    assert_int_equal(mt->anon, MiB + 8192);
    assert_int_equal(mt->peak_committed, 32768 + 8192 > 65536 ? 32768 + 8192 : 65536);
    feed(m, ev_of(PST_EV_MUNMAP, A, MiB, 0, 0, 0, 0));
    assert_int_equal(mt->reserved, 0);
    assert_int_equal(mt->anon, 8192);
    assert_int_equal(mt->peak_reserved, MiB);
    assert_int_equal(mt->peak_total, MiB + 8192);
    pm_destroy(m);
}

static void test_file_mappings_are_named(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    const uint64_t A = 0x7f1000000000ull;
    feed(m, ev_of(PST_EV_MMAP, A, 3 * 4096, 1, 0x2, 5, 0));        /* PROT_READ, MAP_PRIVATE, fd 5 */
    feed(m, ev_of(PST_EV_MMAP_NAME, A, 77, 0, 0, 0, 0));                /* string 77 names it */
    feed(m, ev_of(PST_EV_MMAP, A + 65536, 4096, 1, 0x2, 6, 0));
    feed(m, ev_of(PST_EV_MMAP_NAME, A + 65536, 78, 0, 0, 0, 0));
    feed(m, ev_of(PST_EV_MUNMAP, A, 3 * 4096, 0, 0, 0, 0));
    pm_file_map_t fm[4];
    size_t n = pm_file_maps(m, fm, 4);
    assert_int_equal(n, 2);
    assert_int_equal(fm[0].name, 77);                /* largest at its peak first */
    assert_int_equal(fm[0].peak, 3 * 4096);
    assert_int_equal(fm[0].bytes, 0);
    assert_int_equal(fm[1].name, 78);
    assert_int_equal(fm[1].bytes, 4096);
    assert_int_equal(pm_maps(m)->file, 4096);
    pm_destroy(m);
}

/* ---- the debug build's self-check ------------------------------------------------- */

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

/* The state the model shows through pm_pools / pm_maps, changed behind its
 * back; then any event: the check after it must notice. */
static void rss_event(pm_model_t *m)
{
    pst_event_t ev = ev_of(PST_EV_RSS, 1 << 20, 0, 0, 0, 0, 0);
    pm_step_t st;
    (void)pm_event(m, &ev, &st);
}

static pm_pool_t *pool_of(pm_model_t *m, int kv)
{
    size_t n;
    pm_pool_t *p = (pm_pool_t *)pm_pools(m, &n);
    for (size_t i = 0; i < n; i++)
        if (p[i].kv == kv) return &p[i];
    abort();                                      /* the fixture made both */
}

static void kv_tokens_behind_its_back(void *arg)
{
    pm_model_t *m = arg;
    pool_of(m, 1)->tokens += 1;
    rss_event(m);
}

static void pool_above_its_peak(void *arg)
{
    pm_model_t *m = arg;
    pool_of(m, 0)->outstanding += 4096;
    rss_event(m);
}

static void mapping_count_behind_its_back(void *arg)
{
    pm_model_t *m = arg;
    ((pm_maps_t *)pm_maps(m))->n_live += 1;
    rss_event(m);
}

static void test_debug_build_model_checks_itself_after_each_event(void **st)
{
    (void)st;
    pm_model_t *m = pm_create(NULL);
    kv_create(m, 7, 16);
    uint32_t ids[2] = { 3, 4 };
    kv_alloc(m, 7, KVB_STREAM_K, 1, 20, ids, 2);  /* 16 + 4 tokens */
    pst_event_t a = ev_of(PST_EV_POOL_ACQUIRE, 1, 1, 1, 10, 1000, 4096);
    a.f[6] = 1000; a.f[7] = 4096;
    feed(m, a);
    /* "Auuuzu" ret, len, prot, flags, fd, offset: a file mapping */
    feed(m, ev_of(PST_EV_MMAP, 0x10000, 8192, 1, 2, 3, 0));
    feed(m, ev_of(PST_EV_RSS, 1 << 20, 0, 0, 0, 0, 0));   /* sound: no abort */
    expect_invariant_abort(kv_tokens_behind_its_back, m,
                           "invariant broken in model: a KV pool's blocks or tokens differ from the sum over its blocks");
    expect_invariant_abort(pool_above_its_peak, m,
                           "invariant broken in model: a buffer pool holds more than its peak while counting");
    expect_invariant_abort(mapping_count_behind_its_back, m,
                           "invariant broken in model: the live-mapping count differs from the table");
    totals(m, 2, 20, 32);                         /* the parent's model is as it was */
    pm_destroy(m);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_allocation_spreads_tokens_and_carries_over_a_split_list),
        cmocka_unit_test(test_kv_tokens_change_and_a_freed_block_holds_nothing),
        cmocka_unit_test(test_kv_v_blocks_fill_the_pool_but_not_the_request),
        cmocka_unit_test(test_kv_events_of_an_unknown_pool_are_orphans),
        cmocka_unit_test(test_kv_huge_block_ids_size_nothing),
        cmocka_unit_test(test_kv_request_marker_gives_the_reservation_and_ends_the_request),
        cmocka_unit_test(test_marker_nesting_is_counted_per_name),
        cmocka_unit_test(test_heap_calls_as_allocations_and_frees),
        cmocka_unit_test(test_pool_requested_granted_and_oversized),
        cmocka_unit_test(test_reservations_are_apart_from_committed_memory),
        cmocka_unit_test(test_file_mappings_are_named),
#if PS_DEBUG
        cmocka_unit_test(test_debug_build_model_checks_itself_after_each_event),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
