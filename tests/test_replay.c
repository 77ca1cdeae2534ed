/* test_replay.c — replay's policies on hand-built traces with hand-computed
 * answers (replay/replay.h).
 *
 * Every trace here is written with the writer API (libtrace/writer.h) into a
 * temporary file, replayed, and each number compared with what the policy's
 * definition gives by hand (worked out in the comments). The 16-op chain
 * (docs/DESIGN.md, "Buffer pool"), ideal against the analyzer's own scan,
 * determinism, streaming memory and damaged input are here too; the
 * engine-based exactness sweep is tests/integration/replay.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <link.h>
#include <unistd.h>
#include <cmocka.h>

#include "poolscope/bufpool.h"
#include "replay.h"
#include "rp_internal.h"
#include "scan.h"
#include "poolscope/writer.h"
#include "poolscope/error.h"

/* This cmocka has no assert_double_equal. */
#define assert_double_equal(a, b, eps) near_((double)(a), (double)(b), (eps), #a, __FILE__, __LINE__)
static void near_(double a, double b, double eps, const char *what, const char *file, int line)
{
    if (!(a - b <= eps && b - a <= eps)) {
        fprintf(stderr, "%s:%d: %s = %.12g, want %.12g\n", file, line, what, a, b);
        fail();
    }
}

/* ---- building traces ------------------------------------------------------ */

typedef struct tb {
    char path[64];
    pst_writer_t *w;
    uint64_t t;
} tb_t;

static void tb_open(tb_t *b)
{
    strcpy(b->path, "/tmp/test_replay.XXXXXX");
    int fd = mkstemp(b->path);
    assert_true(fd >= 0);
    close(fd);
    pst_writer_cfg_t cfg = { .pid = 100, .exe = "/bin/test" };
    int err = 0;
    b->w = pst_writer_open(b->path, &cfg, &err);
    assert_non_null(b->w);
    b->t = 0;
}

static void tick(tb_t *b)
{
    b->t += 10;
    pst_writer_time(b->w, b->t);
}

static void tb_close(tb_t *b) { assert_int_equal(pst_writer_close(b->w), 0); }

static void acq(tb_t *b, uint64_t id, uint64_t n)
{
    tick(b);
    assert_int_equal(PST_EMIT(b->w, 1, PST_EV_TENSOR_ACQUIRE, id, 0, 0, n, 4 * n), 0);
}

static void acq_stack(tb_t *b, uint64_t id, uint64_t n, uint32_t stack)
{
    tick(b);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_TENSOR_ACQUIRE;
    ev.stack = stack;
    ev.f[0] = id; ev.f[1] = 0; ev.f[2] = 0; ev.f[3] = n; ev.f[4] = 4 * n;
    assert_int_equal(pst_writer_event(b->w, 1, &ev), 0);
}

static void rel(tb_t *b, uint64_t id)
{
    tick(b);
    assert_int_equal(PST_EMIT(b->w, 1, PST_EV_TENSOR_RELEASE, id), 0);
}

static void mark(tb_t *b, int begin, const char *name, uint64_t inst, int64_t p0, int64_t p1)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = begin ? PST_EV_MARK_BEGIN : PST_EV_MARK_END;
    ev.str = name;
    ev.f[1] = inst;
    if (begin && (p0 || p1)) {
        ev.payload[0] = p0;
        ev.payload[1] = p1;
        ev.n_payload = 2;
    }
    assert_int_equal(pst_writer_event(b->w, 1, &ev), 0);
}

static void kvb_ids(tb_t *b, unsigned type, uint64_t pool, uint64_t seq, int64_t owner,
                    uint64_t n_tokens, const uint32_t *ids, uint32_t n)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = (uint8_t)type;
    ev.f[0] = pool;
    ev.f[1] = seq;
    if (type == PST_EV_KVB_ALLOC) {
        ev.f[2] = 2;                    /* KVB_STREAM_KV */
        ev.f[3] = (uint64_t)owner;
        ev.f[4] = 0;
        ev.f[5] = n_tokens;
    }
    ev.ids = ids;
    ev.n_ids = n;
    assert_int_equal(pst_writer_event(b->w, 1, &ev), 0);
}

static rp_report_t *replay(const char *path, const char *policies, rp_config_t *cfg_in)
{
    rp_config_t cfg = cfg_in ? *cfg_in : rp_config_default();
    char msg[256];
    if (policies) assert_int_equal(rp_policy_parse(policies, &cfg.policies, msg, sizeof msg), 0);
    rp_report_t *rep = NULL;
    int rc = rp_run(path, &cfg, &rep, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run: %s\n", msg);
    assert_int_equal(rc, 0);
    assert_non_null(rep);
    return rep;
}

static const rp_result_t *get(const rp_report_t *r, rp_policy_t p)
{
    const rp_result_t *x = rp_report_find(r, p);
    assert_non_null(x);
    return x;
}

#define MIB ((uint64_t)1 << 20)

static char *report_text(const rp_report_t *r, int json);
static int replay_sel_fails(const char *path, const char *policies, rp_config_t *cfg_in, char *msg,
                            size_t cap);

/* The malloc variants of a report: each either ran on its allocator or
 * was skipped because its library is not installed. How many ran. */
static size_t variants_ran(const rp_report_t *r)
{
    size_t n = 0;
    const rp_policy_t v[2] = { RP_MALLOC_JEMALLOC, RP_MALLOC_MIMALLOC };
    for (int i = 0; i < 2; i++) {
        if (rp_report_find(r, v[i])) { n++; continue; }
        int skipped = 0;
        for (size_t k = 0; k < rp_report_skipped_count(r); k++)
            if (rp_report_skipped(r, k)->policy == v[i]) {
                skipped = 1;
                assert_non_null(strstr(rp_report_skipped(r, k)->reason, "not found"));
            }
        assert_true(skipped);
    }
    return n;
}

/* ---- policy names ------------------------------------------------------- */

static void test_policy_list_parses_names_and_refuses_unknown(void **st)
{
    (void)st;
    unsigned m = 0;
    char msg[200];
    assert_int_equal(rp_policy_parse("pool,arena", &m, msg, sizeof msg), 0);
    assert_int_equal(m, (1u << RP_POOL) | (1u << RP_ARENA));
    assert_int_equal(rp_policy_parse("kv", &m, msg, sizeof msg), 0);
    assert_int_equal(m, RP_KV_MASK);
    assert_int_equal(rp_policy_parse("all", &m, msg, sizeof msg), 0);
    assert_int_equal(m, RP_ALL_MASK);
    assert_int_equal(rp_policy_parse("allocators,caching", &m, msg, sizeof msg), 0);
    assert_int_equal(m, (1u << RP_MALLOC) | (1u << RP_MALLOC_JEMALLOC) | (1u << RP_MALLOC_MIMALLOC) |
                        (1u << RP_CACHING));
    assert_int_equal(rp_policy_parse("malloc-mimalloc", &m, msg, sizeof msg), 0);
    assert_int_equal(m, 1u << RP_MALLOC_MIMALLOC);
    assert_int_equal(rp_policy_parse("pool,bogus", &m, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "bogus"));
    assert_int_equal(rp_policy_parse("pool,", &m, msg, sizeof msg), PSC_EINVAL);
    assert_int_equal(rp_policy_parse("", &m, msg, sizeof msg), PSC_EINVAL);
    assert_string_equal(rp_policy_name(RP_KV_PAGED), "kv-paged");
}

/* A set's members are optional (skipped when they do not apply), a name is
 * required; a name also given inside a set stays required. */
static void test_policy_select_sets_are_optional_names_required(void **st)
{
    (void)st;
    unsigned m = 0, opt = 0;
    char msg[200];
    assert_int_equal(rp_policy_select("all", &m, &opt, msg, sizeof msg), 0);
    assert_int_equal(m, RP_ALL_MASK);
    assert_int_equal(opt, RP_ALL_MASK);
    assert_int_equal(rp_policy_select("pool,kv", &m, &opt, msg, sizeof msg), 0);
    assert_int_equal(m, (1u << RP_POOL) | RP_KV_MASK);
    assert_int_equal(opt, RP_KV_MASK);
    assert_int_equal(rp_policy_select("all,kv-paged", &m, &opt, msg, sizeof msg), 0);
    assert_int_equal(m, RP_ALL_MASK);
    assert_int_equal(opt, RP_ALL_MASK & ~(1u << RP_KV_PAGED));
    assert_int_equal(rp_policy_select("kv-step,kv", &m, &opt, msg, sizeof msg), 0);
    assert_int_equal(opt, RP_KV_MASK & ~(1u << RP_KV_STEP));
    assert_int_equal(rp_policy_select("arena,pool", &m, &opt, msg, sizeof msg), 0);
    assert_int_equal(opt, 0);
    assert_int_equal(rp_policy_select("all,lru", &m, &opt, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "lru"));
}

/* ---- pool ------------------------------------------------------------------ */

/* acquire 1 (1000 f32 -> 1024 granted, 4096 B), release 1, acquire 2 (the
 * same length: a hit on 1's buffer), acquire 3 (3000 -> 3072, 12288 B: a
 * miss), release both. */
static void test_pool_small_sequence_exact(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    acq(&b, 1, 1000);
    rel(&b, 1);
    acq(&b, 2, 1000);
    acq(&b, 3, 3000);
    rel(&b, 2);
    rel(&b, 3);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "pool,ideal,arena,malloc", NULL);
    const rp_result_t *p = get(r, RP_POOL);
    assert_int_equal(p->m.acquires, 3);
    assert_int_equal(p->m.hits, 1);
    assert_int_equal(p->m.misses, 2);
    assert_int_equal(p->m.backing_allocs, 2);
    assert_int_equal(p->m.backing_frees, 0);
    assert_int_equal(p->m.peak_outstanding_bytes, 16384);
    assert_int_equal(p->m.peak_cached_bytes, 16384);
    assert_int_equal(p->m.peak_reserved_bytes, 16384);
    assert_int_equal(p->m.peak_live_bytes, 16000);
    assert_int_equal(p->peak_outstanding_buffers, 2);
    assert_int_equal(p->destroyed_over_cap, 0);
    assert_int_equal(p->pool_cap, BP_DEFAULT_MAX_CACHED_BYTES);   /* no POOL_CREATE: 1 GiB */
    assert_double_equal(p->m.internal_frag, 384.0 / 16384.0, 1e-12);
    assert_double_equal(p->m.hit_rate, 1.0 / 3.0, 1e-12);
    assert_double_equal(p->m.fresh_address_ratio, 2.0 / 3.0, 1e-12);
    assert_double_equal(p->m.same_address_reuse, 1.0 / 3.0, 1e-12);
    assert_int_equal(p->m.reuse_samples, 1);
    assert_int_equal(p->m.distance_p50, 0);
    /* ideal: exactly the live bytes */
    const rp_result_t *i = get(r, RP_IDEAL);
    assert_int_equal(i->m.peak_reserved_bytes, 16000);
    assert_int_equal(i->m.peak_live_bytes, 16000);
    assert_double_equal(i->m.reserved_over_live, 1.0, 1e-12);
    /* arena without reset markers: 4032 + 4032 + 12032 bytes bumped into one
     * 1 MiB chunk, never rewound (the end of the trace is the only reset) */
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->m.peak_reserved_bytes, MIB);
    assert_int_equal(a->m.backing_allocs, 1);
    assert_int_equal(a->resets, 0);
    assert_int_equal(a->lifetime_violations, 0);
    assert_int_equal(a->peak_outstanding_buffers, 3);
    assert_double_equal(a->m.fresh_address_ratio, 1.0, 1e-12);
    /* malloc: the same stream through the real allocator */
    const rp_result_t *m = get(r, RP_MALLOC);
    assert_int_equal(m->m.allocs, 3);
    assert_int_equal(m->m.frees, 3);
    assert_int_equal(m->m.peak_live_bytes, 16000);
    assert_true(m->m.peak_live_rnd_bytes >= 16000);
    rp_report_free(r);
    unlink(b.path);
}

/* cap 8192: two 8192-byte buffers out; the first released is cached
 * (8192 <= cap), the second destroyed (16384 > cap); a third acquire hits
 * the cached one. */
static void test_pool_cap_destroys_over_the_cap(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    acq(&b, 1, 2048);
    acq(&b, 2, 2048);
    rel(&b, 1);
    rel(&b, 2);
    acq(&b, 3, 2048);
    rel(&b, 3);
    tb_close(&b);
    rp_config_t cfg = rp_config_default();
    cfg.pool_cap = 8192;
    cfg.pool_cap_set = 1;
    rp_report_t *r = replay(b.path, "pool", &cfg);
    const rp_result_t *p = get(r, RP_POOL);
    assert_int_equal(p->m.hits, 1);
    assert_int_equal(p->m.misses, 2);
    assert_int_equal(p->destroyed_over_cap, 1);
    assert_int_equal(p->m.backing_frees, 1);
    assert_int_equal(p->m.peak_cached_bytes, 8192);
    assert_int_equal(p->m.peak_outstanding_bytes, 16384);
    assert_int_equal(p->m.peak_reserved_bytes, 16384);
    assert_int_equal(p->pool_cap, 8192);
    assert_int_equal(rp_report_warning_count(r), 0);
    rp_report_free(r);
    /* --pool-min on the tensor stream: nothing changes, and it is said */
    cfg.pool_min = 1u << 30;
    cfg.pool_min_set = 1;
    r = replay(b.path, "pool", &cfg);
    assert_int_equal(get(r, RP_POOL)->m.hits, 1);
    assert_false(get(r, RP_POOL)->heap_split);
    assert_int_equal(rp_report_warning_count(r), 1);
    assert_non_null(strstr(rp_report_warning(r, 0), "apply to the heap stream"));
    rp_report_free(r);
    unlink(b.path);
}

/* The cap recorded by POOL_CREATE is used when --pool-cap is not given. */
static void test_pool_takes_cap_from_trace(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_POOL_CREATE;
    ev.str = "acts";
    ev.f[0] = 1; ev.f[2] = 3; ev.f[3] = 8192;
    assert_int_equal(pst_writer_event(b.w, 1, &ev), 0);
    acq(&b, 1, 2048);
    acq(&b, 2, 2048);
    rel(&b, 1);
    rel(&b, 2);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "pool", NULL);
    assert_int_equal(get(r, RP_POOL)->pool_cap, 8192);
    assert_int_equal(get(r, RP_POOL)->destroyed_over_cap, 1);
    rp_report_free(r);
    unlink(b.path);
}

/* ---- arena ------------------------------------------------------------------ */

/* forward 1: 600 KiB fits the first 1 MiB chunk; the second 600 KiB does not
 * (434176 bytes left), so a 2 MiB chunk is taken: 3 MiB held. The reset
 * merges both into one 3 MiB chunk (2 frees, 1 alloc). forwards 2 and 3 fit
 * in it: no allocator calls. */
static void test_arena_chunks_double_and_merge(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    const uint64_t n = 600 * 1024 / 4;
    uint64_t id = 1;
    for (int f = 0; f < 3; f++) {
        mark(&b, 1, "forward", (uint64_t)f, 0, 0);
        acq(&b, id, n);
        acq(&b, id + 1, n);
        rel(&b, id);
        rel(&b, id + 1);
        mark(&b, 0, "forward", (uint64_t)f, 0, 0);
        id += 2;
    }
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena", NULL);
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->m.peak_reserved_bytes, 3 * MIB);
    assert_int_equal(a->chunks_allocated, 3);
    assert_int_equal(a->m.backing_allocs, 3);
    assert_int_equal(a->m.backing_frees, 2);
    assert_int_equal(a->resets, 3);
    assert_int_equal(a->lifetime_violations, 0);
    assert_int_equal(a->peak_outstanding_buffers, 2);
    assert_int_equal(a->m.peak_live_bytes, 2 * 600 * 1024);
    /* addresses: c1+0, c2+0, m+0, m+600K, m+0, m+600K: 4 fresh of 6 */
    assert_double_equal(a->m.fresh_address_ratio, 4.0 / 6.0, 1e-12);
    rp_report_free(r);
    unlink(b.path);
}

/* Object 1 (stack S), made inside the first forward, outlives both: one
 * violation of 4000 bytes at S; its chunk is pinned, forward 2 needs a
 * fresh 1 MiB chunk (2 MiB held); when 1 dies the pinned chunk goes back
 * (1 MiB held). */
static void test_arena_lifetime_violation_pins_chunk(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    const uint64_t frames[2] = { 0x1111, 0x2222 };
    uint32_t s = pst_writer_stack(b.w, frames, 2);
    assert_true(s > 0);
    for (int f = 0; f < 2; f++) {
        mark(&b, 1, "forward", (uint64_t)f, 0, 0);
        if (f == 0) acq_stack(&b, 1, 1000, s);
        mark(&b, 1, "forward", 100 + (uint64_t)f, 0, 0);   /* nested: only the outermost resets */
        acq(&b, 10 + (uint64_t)f, 1000);
        rel(&b, 10 + (uint64_t)f);
        mark(&b, 0, "forward", 100 + (uint64_t)f, 0, 0);
        mark(&b, 0, "forward", (uint64_t)f, 0, 0);
    }
    rel(&b, 1);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena", NULL);
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->lifetime_violations, 1);
    assert_int_equal(a->violation_bytes, 4000);
    assert_int_equal(a->n_vstacks, 1);
    assert_int_equal(a->vstacks[0].stack, s);
    assert_int_equal(a->vstacks[0].count, 1);
    assert_int_equal(a->vstacks[0].depth, 2);
    assert_int_equal(a->vstacks[0].frames[0], 0x1111);
    assert_int_equal(a->pinned_chunks, 1);
    assert_int_equal(a->peak_pinned_bytes, MIB);
    assert_int_equal(a->m.peak_reserved_bytes, 2 * MIB);
    assert_int_equal(a->m.backing_allocs, 2);
    assert_int_equal(a->m.backing_frees, 1);
    assert_int_equal(a->longlived_objects, 0);
    assert_int_equal(a->reset_scopes, 2);
    assert_int_equal(rp_report_warning_count(r), 0);
    rp_report_free(r);
    unlink(b.path);
}

/* The issue-14 case: what is made before the first scope (weights, the
 * interpreter's objects) and lives on is long-lived, not a violation.
 * W (1000 f32 = 4000 B, 4032 bumped) before any forward, live to the end:
 * the long-lived region takes one 1 MiB chunk. Each forward bumps 4032 B
 * into the scoped 1 MiB chunk, rewound (kept) at each reset. Nothing is
 * pinned; reserved 1 + 1 = 2 MiB, each region's peak 1 MiB; 2 chunks, both
 * still held at the end. Object X, made between the two forwards, is
 * long-lived too (it lives through no reset here, but it was made while no
 * scope was open). */
static void test_arena_objects_outside_scopes_are_long_lived(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    acq(&b, 1, 1000);                                   /* W */
    for (int f = 0; f < 2; f++) {
        mark(&b, 1, "forward", (uint64_t)f, 0, 0);
        acq(&b, 10 + (uint64_t)f, 1000);
        rel(&b, 10 + (uint64_t)f);
        mark(&b, 0, "forward", (uint64_t)f, 0, 0);
        if (f == 0) { acq(&b, 2, 250); rel(&b, 2); }    /* X, 1000 B */
    }
    rel(&b, 1);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena", NULL);
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->reset_scopes, 2);
    assert_int_equal(a->lifetime_violations, 0);
    assert_int_equal(a->pinned_chunks, 0);
    assert_int_equal(a->longlived_objects, 2);
    assert_int_equal(a->longlived_bytes, 4000 + 1000);
    assert_int_equal(a->longlived_chunks, 1);
    assert_int_equal(a->peak_longlived_bytes, MIB);
    assert_int_equal(a->peak_scoped_bytes, MIB);
    assert_int_equal(a->m.peak_reserved_bytes, 2 * MIB);
    assert_int_equal(a->chunks_allocated, 2);
    assert_int_equal(a->m.backing_frees, 0);
    assert_string_equal(a->reset_marker, "forward");
    assert_int_equal(rp_report_warning_count(r), 0);
    char *t = report_text(r, 0);
    assert_non_null(strstr(t, "long-lived, made outside every scope: 2 objects"));
    free(t);
    rp_report_free(r);
    unlink(b.path);
}

/* A long-lived chunk other than the newest goes back when its last object
 * dies: 17 objects of 64 KiB (65536 B: exact 64-byte steps) outside any
 * scope fill the first 1 MiB chunk with 16; the 17th opens a 2 MiB chunk.
 * Freeing the 16 gives the first chunk back (1 free), the second stays
 * (newest). Peak 3 MiB. */
static void test_arena_long_lived_chunk_goes_back_when_dead(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    mark(&b, 1, "forward", 0, 0, 0);        /* a scope exists, so no warning */
    mark(&b, 0, "forward", 0, 0, 0);
    for (uint64_t i = 1; i <= 17; i++) acq(&b, i, 16384);
    for (uint64_t i = 1; i <= 16; i++) rel(&b, i);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena", NULL);
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->longlived_objects, 17);
    assert_int_equal(a->longlived_chunks, 2);
    assert_int_equal(a->peak_longlived_bytes, 3 * MIB);
    assert_int_equal(a->m.peak_reserved_bytes, 3 * MIB);
    assert_int_equal(a->m.backing_allocs, 2);
    assert_int_equal(a->m.backing_frees, 1);
    assert_int_equal(a->peak_outstanding_buffers, 17);
    rp_report_free(r);
    unlink(b.path);
}

/* The reset marker missing: the default (forward) is a warning naming the
 * markers the trace has; one given with --arena-reset is an error, and so
 * is one that occurs only as points. The right one resets. */
static void test_arena_reset_marker_missing_warns_or_fails(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    for (uint64_t s = 0; s < 3; s++) {
        mark(&b, 1, "decode", s, 0, 0);
        acq(&b, 1 + s, 100);
        rel(&b, 1 + s);
        mark(&b, 0, "decode", s, 0, 0);
        pst_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.type = PST_EV_MARK_POINT;
        ev.str = "step";
        assert_int_equal(pst_writer_event(b.w, 1, &ev), 0);
    }
    tb_close(&b);
    rp_report_t *r = replay(b.path, "arena", NULL);
    assert_int_equal(get(r, RP_ARENA)->resets, 0);
    assert_int_equal(get(r, RP_ARENA)->longlived_objects, 3);
    assert_int_equal(rp_report_warning_count(r), 1);
    const char *w = rp_report_warning(r, 0);
    assert_non_null(strstr(w, "the reset marker 'forward' never occurs in the trace"));
    assert_non_null(strstr(w, "markers in it: decode (scopes), step (points)"));
    assert_non_null(strstr(w, "--arena-reset"));
    char *t = report_text(r, 0);
    assert_non_null(strstr(t, "\nwarning: arena: the reset marker 'forward' never occurs"));
    free(t);
    t = report_text(r, 1);
    assert_non_null(strstr(t, "\"warnings\": ["));
    assert_non_null(strstr(t, "never occurs in the trace"));
    free(t);
    rp_report_free(r);

    char msg[512];
    rp_config_t cfg = rp_config_default();
    cfg.arena_reset = "decod";
    assert_int_equal(replay_sel_fails(b.path, "arena", &cfg, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "arena: the reset marker 'decod' never occurs in the trace"));
    assert_non_null(strstr(msg, "decode (scopes), step (points)"));
    cfg.arena_reset = "step";
    assert_int_equal(replay_sel_fails(b.path, "all", &cfg, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "'step' occurs only as 3 points, never as a scope"));

    cfg.arena_reset = "decode";
    r = replay(b.path, "arena", &cfg);
    assert_int_equal(get(r, RP_ARENA)->resets, 3);
    assert_int_equal(get(r, RP_ARENA)->longlived_objects, 0);
    assert_string_equal(get(r, RP_ARENA)->reset_marker, "decode");
    assert_int_equal(rp_report_warning_count(r), 0);
    rp_report_free(r);
    /* no arena: no warning */
    r = replay(b.path, "ideal", NULL);
    assert_int_equal(rp_report_warning_count(r), 0);
    rp_report_free(r);
    unlink(b.path);
}

/* --with-kv: KV blocks (block bytes from KVB_CREATE) become arena objects;
 * a block made in a forward that outlives it is a violation, one made
 * outside every forward is long-lived. */
static void test_arena_with_kv_blocks_are_violations(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = 1; ev.f[2] = 16; ev.f[3] = 64; ev.f[7] = 16 * 100;
    assert_int_equal(pst_writer_event(b.w, 1, &ev), 0);
    const uint32_t ids[2] = { 0, 1 }, ids2[2] = { 2, 3 };
    tick(&b);
    kvb_ids(&b, PST_EV_KVB_ALLOC, 1, 1, 7, 20, ids2, 2);   /* outside: long-lived */
    mark(&b, 1, "forward", 0, 0, 0);
    tick(&b);
    kvb_ids(&b, PST_EV_KVB_ALLOC, 1, 2, 8, 20, ids, 2);
    acq(&b, 1, 100);
    rel(&b, 1);
    mark(&b, 0, "forward", 0, 0, 0);
    tick(&b);
    kvb_ids(&b, PST_EV_KVB_FREE, 1, 3, 0, 0, ids, 2);
    kvb_ids(&b, PST_EV_KVB_FREE, 1, 4, 0, 0, ids2, 2);
    tb_close(&b);
    rp_config_t cfg = rp_config_default();
    rp_report_t *r = replay(b.path, "arena", &cfg);
    assert_int_equal(get(r, RP_ARENA)->lifetime_violations, 0);   /* without --with-kv */
    rp_report_free(r);
    cfg.with_kv = 1;
    r = replay(b.path, "arena", &cfg);
    const rp_result_t *a = get(r, RP_ARENA);
    assert_int_equal(a->lifetime_violations, 2);
    assert_int_equal(a->violation_bytes, 2 * 1600);
    assert_int_equal(a->pinned_chunks, 1);
    assert_int_equal(a->longlived_objects, 2);
    assert_int_equal(a->longlived_bytes, 2 * 1600);
    rp_report_free(r);
    unlink(b.path);
}

/* ---- the 16-op chain (docs/DESIGN.md, "Buffer pool") ----------------------- */

/* y1 = op(); y_i = op(y_{i-1}), releasing y_{i-1} as soon as y_i exists:
 * the pool holds at most 2 buffers; an arena that resets only at the end
 * holds all 16. */
static void write_chain(tb_t *b, int with_forward)
{
    tb_open(b);
    if (with_forward) mark(b, 1, "forward", 0, 0, 0);
    acq(b, 1, 1024);
    for (uint64_t i = 2; i <= 16; i++) {
        acq(b, i, 1024);
        rel(b, i - 1);
    }
    rel(b, 16);
    if (with_forward) mark(b, 0, "forward", 0, 0, 0);
    tb_close(b);
}

static void test_seed_chain_pool_two_arena_sixteen(void **st)
{
    (void)st;
    for (int fw = 0; fw < 2; fw++) {
        tb_t b;
        write_chain(&b, fw);
        rp_report_t *r = replay(b.path, "pool,arena,ideal", NULL);
        const rp_result_t *p = get(r, RP_POOL), *a = get(r, RP_ARENA), *i = get(r, RP_IDEAL);
        assert_int_equal(p->peak_outstanding_buffers, 2);
        assert_int_equal(p->m.misses, 2);
        assert_int_equal(p->m.hits, 14);
        assert_int_equal(p->m.peak_reserved_bytes, 2 * 4096);
        assert_int_equal(a->peak_outstanding_buffers, 16);
        assert_int_equal(a->resets, (uint64_t)fw);
        assert_int_equal(a->lifetime_violations, 0);
        assert_int_equal(i->m.peak_live_bytes, 2 * 4096);
        assert_int_equal(i->m.peak_reserved_bytes, 2 * 4096);
        rp_report_free(r);
        unlink(b.path);
    }
}

/* ---- KV policies ----------------------------------------------------------- */

/* One request (owner 7, prompt 10, max 30) in a block-size-16 pool with 100
 * bytes per token: 10 tokens on [100,200), 16 on [200,300), 17 on
 * [300,400) (a second block). Utilization is the accumulator's time-weighted
 * mean of tokens / reserved slots. */
static void write_kv_trace(tb_t *b)
{
    tb_open(b);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = 1; ev.f[2] = 16; ev.f[3] = 64; ev.f[7] = 16 * 100;
    assert_int_equal(pst_writer_event(b->w, 1, &ev), 0);
    const uint32_t id0[1] = { 0 }, id1[1] = { 1 }, both[2] = { 0, 1 };
    pst_writer_time(b->w, 100);
    kvb_ids(b, PST_EV_KVB_ALLOC, 1, 1, 7, 10, id0, 1);
    mark(b, 1, "request", 7, 10, 30);            /* after its first blocks, as the engine does */
    pst_writer_time(b->w, 200);
    assert_int_equal(PST_EMIT(b->w, 1, PST_EV_KVB_TOKENS, 1, 2, 0, 16), 0);
    pst_writer_time(b->w, 300);
    kvb_ids(b, PST_EV_KVB_ALLOC, 1, 3, 7, 1, id1, 1);
    pst_writer_time(b->w, 400);
    kvb_ids(b, PST_EV_KVB_FREE, 1, 4, 0, 0, both, 2);
    mark(b, 0, "request", 7, 0, 0);
    tb_close(b);
}

static void test_kv_policies_exact(void **st)
{
    (void)st;
    tb_t b;
    write_kv_trace(&b);
    rp_config_t cfg = rp_config_default();
    cfg.kv_context = 128;
    rp_report_t *r = replay(b.path, "kv", &cfg);
    const rp_result_t *c = get(r, RP_KV_CONTIGUOUS), *rs = get(r, RP_KV_RESERVE),
                      *sp = get(r, RP_KV_STEP), *pg = get(r, RP_KV_PAGED);
    /* contiguous: 128 slots throughout */
    assert_int_equal(c->peak_kv_reserved_tokens, 128);
    assert_int_equal(c->peak_kv_tokens, 17);
    assert_int_equal(c->m.peak_reserved_bytes, 12800);
    assert_int_equal(c->m.peak_live_bytes, 1700);
    assert_double_equal(c->m.kv_utilization, (10.0 + 16 + 17) / 3 / 128, 1e-9);
    assert_double_equal(c->m.kv_waste_ratio, 1 - (10.0 + 16 + 17) / 3 / 128, 1e-9);
    assert_int_equal(c->kv_requests, 1);
    assert_int_equal(c->kv_overflows, 0);
    /* reserve: prompt + max = 40 */
    assert_int_equal(rs->peak_kv_reserved_tokens, 40);
    assert_double_equal(rs->m.kv_utilization, (10.0 + 16 + 17) / 3 / 40, 1e-9);
    /* step: 256 */
    assert_int_equal(sp->peak_kv_reserved_tokens, 256);
    assert_double_equal(sp->m.kv_utilization, (10.0 + 16 + 17) / 3 / 256, 1e-9);
    /* paged, the trace's 16: 16, 16, 32 slots */
    assert_int_equal(pg->peak_kv_reserved_tokens, 32);
    assert_int_equal(pg->kv_block_size, 16);
    assert_double_equal(pg->m.kv_utilization, (10.0 / 16 + 16.0 / 16 + 17.0 / 32) / 3, 1e-9);
    assert_int_equal(pg->m.peak_reserved_bytes, 3200);
    rp_report_free(r);

    /* paged with --block-size 8: 16, 16, 24 slots */
    cfg.block_size = 8;
    r = replay(b.path, "kv-paged", &cfg);
    pg = get(r, RP_KV_PAGED);
    assert_int_equal(pg->peak_kv_reserved_tokens, 24);
    assert_double_equal(pg->m.kv_utilization, (10.0 / 16 + 16.0 / 16 + 17.0 / 24) / 3, 1e-9);
    rp_report_free(r);

    /* kv-context from the trace: the largest prompt + max = 40 */
    cfg = rp_config_default();
    r = replay(b.path, "kv-contiguous", &cfg);
    assert_int_equal(get(r, RP_KV_CONTIGUOUS)->kv_context, 40);
    rp_report_free(r);
    unlink(b.path);
}

/* --kv-step N (rp_config_t.kv_step): kv-step reserves the tokens rounded
 * up to a multiple of N and never gives slots back while the request is
 * resident. write_kv_trace's 10, 16, 17 tokens with N = 12: 12, then 24
 * (16 rounds up to 24), then 24 (17 still fits): peak 24 slots, 2400
 * bytes at 100 bytes per token; the default step (256) is asserted in
 * test_kv_policies_exact. */
static void test_kv_step_grows_in_steps_of_kv_step(void **st)
{
    (void)st;
    tb_t b;
    write_kv_trace(&b);
    rp_config_t cfg = rp_config_default();
    cfg.kv_step = 12;
    rp_report_t *r = replay(b.path, "kv-step", &cfg);
    const rp_result_t *sp = get(r, RP_KV_STEP);
    assert_int_equal(sp->peak_kv_reserved_tokens, 24);
    assert_int_equal(sp->m.peak_reserved_bytes, 2400);
    assert_int_equal(sp->kv_block_size, 12);     /* what --json prints as kv_step */
    assert_double_equal(sp->m.kv_utilization, (10.0 / 12 + 16.0 / 24 + 17.0 / 24) / 3, 1e-9);
    assert_int_equal(sp->kv_overflows, 0);
    rp_report_free(r);
    unlink(b.path);
}

/* The KV policies' runs are skipped for batches without KV requests
 * (replay.c): with one request per batch nearly every batch is such, and
 * the KV events sit between runs of tensor traffic. The figures must be
 * those of test_kv_policies_exact whatever the batch size, and every
 * policy must still count every request. */
static void test_kv_policies_same_with_batches_of_one(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    for (uint64_t id = 1; id <= 40; id++) { acq(&b, id, 8); rel(&b, id); }
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = 1; ev.f[2] = 16; ev.f[3] = 64; ev.f[7] = 16 * 100;
    assert_int_equal(pst_writer_event(b.w, 1, &ev), 0);
    const uint32_t id0[1] = { 0 }, id1[1] = { 1 }, both[2] = { 0, 1 };
    pst_writer_time(b.w, 1000);
    kvb_ids(&b, PST_EV_KVB_ALLOC, 1, 1, 7, 10, id0, 1);
    mark(&b, 1, "request", 7, 10, 30);
    b.t = 1000;
    for (uint64_t id = 100; id < 110; id++) { acq(&b, id, 8); rel(&b, id); }   /* to 1200 */
    pst_writer_time(b.w, 1300);
    kvb_ids(&b, PST_EV_KVB_ALLOC, 1, 3, 7, 1, id1, 1);
    b.t = 1300;
    for (uint64_t id = 200; id < 210; id++) { acq(&b, id, 8); rel(&b, id); }   /* to 1500 */
    pst_writer_time(b.w, 1600);
    kvb_ids(&b, PST_EV_KVB_FREE, 1, 4, 0, 0, both, 2);
    mark(&b, 0, "request", 7, 0, 0);
    b.t = 1600;
    for (uint64_t id = 300; id < 310; id++) { acq(&b, id, 8); rel(&b, id); }
    tb_close(&b);
    for (int k = 0; k < 2; k++) {
        rp_config_t cfg = rp_config_default();
        cfg.kv_context = 128;
        cfg.batch = k ? 1 : 0;
        rp_report_t *r = replay(b.path, "kv,ideal", &cfg);
        const rp_result_t *c = get(r, RP_KV_CONTIGUOUS), *rs = get(r, RP_KV_RESERVE),
                          *pg = get(r, RP_KV_PAGED), *id = get(r, RP_IDEAL);
        /* 10 tokens on [1000,1300), 11 on [1300,1600); paged: 16 slots */
        assert_int_equal(c->peak_kv_tokens, 11);
        assert_int_equal(c->kv_requests, 1);
        assert_double_equal(c->m.kv_utilization, (10.0 * 300 + 11 * 300) / 600 / 128, 1e-9);
        assert_int_equal(rs->peak_kv_reserved_tokens, 40);
        assert_int_equal(pg->peak_kv_reserved_tokens, 16);
        assert_double_equal(pg->m.kv_utilization, (10.0 / 16 * 300 + 11.0 / 16 * 300) / 600, 1e-9);
        assert_int_equal(id->m.allocs, 70);
        assert_int_equal(c->requests, id->requests);
        assert_int_equal(pg->requests, id->requests);
        assert_int_equal(rp_report_info(r)->requests, id->requests);
        rp_report_free(r);
    }
    unlink(b.path);
}

/* A tensor acquired again while live (its release never recorded): the
 * stream frees the old object first, so its slot comes back at once. */
static void test_acquire_again_frees_the_old_object(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    acq(&b, 1, 10);     /* 40 bytes */
    acq(&b, 2, 5);      /* 20 */
    acq(&b, 1, 30);     /* 120: the 40 are freed first */
    rel(&b, 1);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "ideal,arena,caching", NULL);
    for (int p = 0; p < 3; p++) {
        const rp_result_t *x = get(r, p == 0 ? RP_IDEAL : p == 1 ? RP_ARENA : RP_CACHING);
        assert_int_equal(x->m.allocs, 3);
        assert_int_equal(x->m.frees, 2);
        assert_int_equal(x->m.unmatched_frees, 0);
        assert_int_equal(x->m.peak_live_bytes, 140);
        assert_int_equal(x->m.leaked_bytes, 20);
    }
    assert_int_equal(rp_report_info(r)->allocs, 3);
    assert_int_equal(rp_report_info(r)->frees, 2);
    rp_report_free(r);
    unlink(b.path);
}

/* ---- heap stream, ideal against the analyzer's report ---------------------- */

static void test_heap_stream_and_ideal_matches_report(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x1000, 100);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_CALLOC, 0x2000, 10, 30);             /* 300 */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_REALLOC, 0x1000, 0x3000, 1000);      /* 100 -> 1000 */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_POSIX_MEMALIGN, 0x4000, 64, 500);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_FREE, 0x2000);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0, 1u << 30);                /* failed: nothing */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_FREE, 0x9999);                        /* never allocated */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_REALLOC, 0x3000, 0, 0);              /* realloc(p, 0): free */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_FREE, 0x4000);
    tb_close(&b);
    rp_config_t cfg = rp_config_default();
    cfg.pool_min_set = 1;               /* 0: every allocation to the pool */
    rp_report_t *r = replay(b.path, "ideal,pool,arena", &cfg);
    const rp_trace_info_t *in = rp_report_info(r);
    assert_string_equal(in->stream, "heap");
    assert_int_equal(in->allocs, 4);
    assert_int_equal(in->frees, 4);
    assert_int_equal(in->unmatched_frees, 1);
    const rp_result_t *i = get(r, RP_IDEAL);
    /* live: 100; 400; 1300 (realloc); 1800 (memalign) = peak */
    assert_int_equal(i->m.peak_live_bytes, 1800);
    assert_int_equal(i->m.peak_reserved_bytes, 1800);
    /* pool on heap events, --pool-min 0: slab arm, 4096-byte quanta */
    const rp_result_t *p = get(r, RP_POOL);
    assert_int_equal(p->m.acquires, 4);
    assert_int_equal(p->m.peak_outstanding_bytes, 3 * 4096);
    assert_int_equal(p->pooled_calls, 4);
    assert_int_equal(p->small_calls, 0);

    /* the analyzer's scan of the same trace: the same peak */
    az_scan_t *s = NULL;
    char msg[256];
    assert_int_equal(az_scan_file(b.path, NULL, &s, msg, sizeof msg), 0);
    assert_int_equal(s->heap_r.peak_live_bytes, i->m.peak_live_bytes);
    az_scan_free(s);
    rp_report_free(r);
    unlink(b.path);
}

/* ---- determinism ------------------------------------------------------------ */

static void test_same_trace_same_numbers(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    uint64_t x = 12345;
    for (uint64_t id = 1; id <= 3000; id++) {   /* a pseudo-random live set */
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        acq(&b, id, 1 + (x >> 33) % 5000);
        if (id > 8 && (x >> 20) % 3) rel(&b, id - 8 + (x >> 40) % 3);
        if (id % 100 == 0) { mark(&b, 1, "forward", id, 0, 0); mark(&b, 0, "forward", id, 0, 0); }
    }
    tb_close(&b);
    rp_report_t *r1 = replay(b.path, "pool,arena,ideal,malloc", NULL);
    rp_report_t *r2 = replay(b.path, "pool,arena,ideal,malloc", NULL);
    assert_int_equal(rp_report_count(r1), 4);
    for (size_t k = 0; k < rp_report_count(r1); k++) {
        const rp_result_t *a = rp_report_result(r1, k), *c = rp_report_result(r2, k);
        assert_int_equal(a->policy, c->policy);
        assert_int_equal(a->m.peak_live_bytes, c->m.peak_live_bytes);
        assert_int_equal(a->m.allocs, c->m.allocs);
        if (a->policy == RP_MALLOC) continue;   /* real addresses and sampled figures */
        assert_int_equal(a->m.peak_reserved_bytes, c->m.peak_reserved_bytes);
        assert_int_equal(a->m.hits, c->m.hits);
        assert_int_equal(a->m.backing_allocs, c->m.backing_allocs);
        assert_int_equal(a->m.distance_p50, c->m.distance_p50);
        assert_int_equal(a->m.distance_p90, c->m.distance_p90);
        assert_true(a->m.fresh_address_ratio == c->m.fresh_address_ratio);
        assert_true(a->m.same_address_reuse == c->m.same_address_reuse);
        assert_int_equal(a->lifetime_violations, c->lifetime_violations);
        assert_int_equal(a->peak_outstanding_buffers, c->peak_outstanding_buffers);
    }
    /* JSON of the two runs differs only in timings: compare with them blanked */
    rp_report_free(r1);
    rp_report_free(r2);
    unlink(b.path);
}

/* ---- streaming: memory follows the live set ------------------------------- */

static void test_stream_slots_follow_live_set(void **st)
{
    (void)st;
    rp_stream_cfg_t cfg = { .heap = 0, .reset_marker = "forward" };
    int err = 0;
    rp_rstream_t *s = rp_stream_create(&cfg, &err);
    assert_non_null(s);
    rp_req_t out[RP_STREAM_MAX_OUT];
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    for (uint64_t id = 1; id <= 200000; id++) {
        size_t n = 0;
        ev.type = PST_EV_TENSOR_ACQUIRE;
        ev.f[0] = id; ev.f[3] = 10; ev.f[4] = 40;
        assert_int_equal(rp_stream_event(s, &ev, out, &n), 0);
        if (id > 3) {
            ev.type = PST_EV_TENSOR_RELEASE;
            ev.f[0] = id - 3;
            assert_int_equal(rp_stream_event(s, &ev, out, &n), 0);
        }
    }
    assert_true(rp_stream_slots(s) <= 4);
    rp_stream_destroy(s);
}

/* ---- bad input ------------------------------------------------------------------ */

static int run_expect_fail(const char *path, const char *policies, rp_config_t *cfg_in, char *msg,
                           size_t cap)
{
    rp_config_t cfg = cfg_in ? *cfg_in : rp_config_default();
    if (policies) assert_int_equal(rp_policy_parse(policies, &cfg.policies, msg, cap), 0);
    rp_report_t *rep = (rp_report_t *)0x1;
    int rc = rp_run(path, &cfg, &rep, msg, cap);
    assert_true(rc < 0);
    assert_null(rep);
    assert_true(msg[0] != 0);
    return rc;
}

static void test_bad_input_is_refused_with_a_reason(void **st)
{
    (void)st;
    char msg[256];
    /* missing file */
    run_expect_fail("/nonexistent/x.pst", NULL, NULL, msg, sizeof msg);
    /* not a trace */
    char path[64] = "/tmp/test_replay.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "hello, world, this is not a trace\n", 34), 34);
    close(fd);
    assert_int_equal(run_expect_fail(path, NULL, NULL, msg, sizeof msg), PSC_ECORRUPT);
    /* empty */
    fd = open(path, O_WRONLY | O_TRUNC);
    close(fd);
    run_expect_fail(path, NULL, NULL, msg, sizeof msg);
    unlink(path);

    /* truncated: no END chunk */
    tb_t b;
    tb_open(&b);
    acq(&b, 1, 100);
    rel(&b, 1);
    assert_int_equal(pst_writer_abandon(b.w), 0);
    assert_int_equal(run_expect_fail(b.path, "pool", NULL, msg, sizeof msg), PSC_ETRUNC);
    assert_non_null(strstr(msg, "truncated"));
    unlink(b.path);

    /* cut inside a chunk, and corrupt payload bytes */
    tb_open(&b);
    for (uint64_t id = 1; id <= 200; id++) { acq(&b, id, 100); rel(&b, id); }
    tb_close(&b);
    FILE *f = fopen(b.path, "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 16];
    size_t len = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(len > 200);
    f = fopen(b.path, "wb");
    fwrite(buf, 1, len - 40, f);
    fclose(f);
    assert_int_equal(run_expect_fail(b.path, "pool,arena", NULL, msg, sizeof msg), PSC_ETRUNC);
    buf[len / 2] ^= 0x5a;
    f = fopen(b.path, "wb");
    fwrite(buf, 1, len, f);
    fclose(f);
    assert_int_equal(run_expect_fail(b.path, "pool,arena", NULL, msg, sizeof msg), PSC_ECORRUPT);
    assert_non_null(strstr(msg, "corrupt"));
    unlink(b.path);

    /* kv-contiguous asked for on a trace without request markers */
    tb_open(&b);
    acq(&b, 1, 100);
    tb_close(&b);
    assert_int_equal(run_expect_fail(b.path, "kv-contiguous", NULL, msg, sizeof msg), PSC_EINVAL);
    unlink(b.path);
}

/* ---- policies that do not apply ------------------------------------------- */

static rp_report_t *replay_sel(const char *path, const char *policies, rp_config_t *cfg_in)
{
    rp_config_t cfg = cfg_in ? *cfg_in : rp_config_default();
    char msg[512];
    if (policies)
        assert_int_equal(rp_policy_select(policies, &cfg.policies, &cfg.optional, msg, sizeof msg), 0);
    rp_report_t *rep = NULL;
    int rc = rp_run(path, &cfg, &rep, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run: %s\n", msg);
    assert_int_equal(rc, 0);
    return rep;
}

/* rc of a run expected to fail, its message in msg */
static int replay_sel_fails(const char *path, const char *policies, rp_config_t *cfg_in, char *msg,
                            size_t cap)
{
    rp_config_t cfg = cfg_in ? *cfg_in : rp_config_default();
    assert_int_equal(rp_policy_select(policies, &cfg.policies, &cfg.optional, msg, cap), 0);
    rp_report_t *rep = (rp_report_t *)0x1;
    int rc = rp_run(path, &cfg, &rep, msg, cap);
    assert_true(rc < 0);
    assert_null(rep);
    return rc;
}

/* What a report prints, table or JSON, into a malloc'ed string. */
static char *report_text(const rp_report_t *r, int json)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    if (json) rp_report_json(r, f);
    else rp_report_table(r, f);
    fclose(f);
    return buf;
}

static void write_heap_only(tb_t *b)
{
    tb_open(b);
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x1000, 100);
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x2000, 200);
    tick(b); PST_EMIT(b->w, 1, PST_EV_FREE, 0x1000);
    tb_close(b);
}

/* A heap-only trace (no KV events, no request markers) under "all" and
 * under no --policy: the four non-KV policies run, each KV one is listed
 * once with its reason, in the table and in the JSON. */
static void test_all_on_heap_trace_skips_each_kv_policy_with_reason(void **st)
{
    (void)st;
    tb_t b;
    write_heap_only(&b);
    for (int pass = 0; pass < 2; pass++) {
        rp_report_t *r = replay_sel(b.path, pass ? NULL : "all", NULL);
        size_t nv = variants_ran(r), sk0 = 2 - nv;   /* skipped variants come first */
        assert_int_equal(rp_report_count(r), 5 + nv);
        assert_non_null(rp_report_find(r, RP_MALLOC));
        assert_non_null(rp_report_find(r, RP_ARENA));
        assert_non_null(rp_report_find(r, RP_POOL));
        assert_non_null(rp_report_find(r, RP_CACHING));
        assert_non_null(rp_report_find(r, RP_IDEAL));
        assert_int_equal(get(r, RP_IDEAL)->m.peak_live_bytes, 300);
        assert_int_equal(rp_report_skipped_count(r), 4 + sk0);
        const rp_policy_t kv[4] = { RP_KV_CONTIGUOUS, RP_KV_RESERVE, RP_KV_STEP, RP_KV_PAGED };
        for (size_t i = 0; i < 4; i++) {
            const rp_skip_t *k = rp_report_skipped(r, sk0 + i);
            assert_non_null(k);
            assert_int_equal(k->policy, kv[i]);
            assert_string_equal(k->name, rp_policy_name(kv[i]));
            /* no KV events is the reason for kv-contiguous too: a
             * --kv-context would not make it run */
            assert_string_equal(k->reason, "the trace has no KV block events");
            assert_null(rp_report_find(r, kv[i]));
        }
        assert_null(rp_report_skipped(r, 4 + sk0));
        char *t = report_text(r, 0);
        for (size_t i = 0; i < 4; i++) {
            char line[128];
            snprintf(line, sizeof line, "\nskipped %s: the trace has no KV block events\n",
                     rp_policy_name(kv[i]));
            assert_non_null(strstr(t, line));
        }
        free(t);
        char *js = report_text(r, 1);
        int err = 0;
        az_jdoc_t *d = az_json_parse(js, strlen(js), &err, NULL, 0);
        assert_non_null(d);
        const az_jv_t *sk = az_json_get(az_json_root(d), "skipped");
        assert_non_null(sk);
        assert_int_equal(sk->type, AZ_JV_ARR);
        assert_int_equal(sk->n, 4 + sk0);
        size_t i = 0;
        for (const az_jv_t *e = sk->child; e; e = e->next, i++) {
            if (i < sk0) continue;
            assert_string_equal(az_json_get(e, "policy")->str, rp_policy_name(kv[i - sk0]));
            assert_string_equal(az_json_get(e, "reason")->str, "the trace has no KV block events");
        }
        assert_int_equal(az_json_get(az_json_root(d), "policies")->n, 5 + nv);
        /* no forward marker in it: the arena's warning, in the JSON too */
        const az_jv_t *wa = az_json_get(az_json_root(d), "warnings");
        assert_non_null(wa);
        assert_int_equal(wa->n, 1);
        az_json_free(d);
        free(js);
        rp_report_free(r);
    }
    unlink(b.path);
}

/* Named on its own, a policy that does not apply fails the run with the
 * reason; a set none of whose members applies fails naming them. */
static void test_named_policy_that_does_not_apply_is_an_error(void **st)
{
    (void)st;
    tb_t b;
    write_heap_only(&b);
    char msg[512];
    assert_int_equal(replay_sel_fails(b.path, "kv-contiguous", NULL, msg, sizeof msg), PSC_EINVAL);
    assert_string_equal(msg, "kv-contiguous needs --kv-context N: the trace has no request markers "
                             "to take the context from");
    assert_int_equal(replay_sel_fails(b.path, "pool,kv-paged", NULL, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "kv-paged: the trace has no KV block events"));
    /* named inside "all": still required */
    assert_int_equal(replay_sel_fails(b.path, "all,kv-step", NULL, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "kv-step: the trace has no KV block events"));
    /* with a context kv-contiguous still has no KV events to replay */
    rp_config_t cfg = rp_config_default();
    cfg.kv_context = 64;
    assert_int_equal(replay_sel_fails(b.path, "kv-contiguous", &cfg, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "kv-contiguous: the trace has no KV block events"));
    assert_int_equal(replay_sel_fails(b.path, "kv", NULL, msg, sizeof msg), PSC_EINVAL);
    assert_string_equal(msg, "no selected policy applies to this trace: kv-contiguous, kv-reserve, "
                             "kv-step, kv-paged: the trace has no KV block events");
    unlink(b.path);
}

/* KV blocks but no request marker: only kv-contiguous lacks something (a
 * context), and says how to give it; with --kv-context it runs. */
static void test_kv_without_request_markers_skips_only_kv_contiguous(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = 1; ev.f[2] = 16; ev.f[3] = 64; ev.f[7] = 16 * 100;
    assert_int_equal(pst_writer_event(b.w, 1, &ev), 0);
    const uint32_t id0[1] = { 0 };
    pst_writer_time(b.w, 100);
    kvb_ids(&b, PST_EV_KVB_ALLOC, 1, 1, 7, 10, id0, 1);
    pst_writer_time(b.w, 200);
    kvb_ids(&b, PST_EV_KVB_FREE, 1, 2, 0, 0, id0, 1);
    tb_close(&b);

    rp_report_t *r = replay_sel(b.path, "all", NULL);
    size_t nv = variants_ran(r), sk0 = 2 - nv;
    assert_int_equal(rp_report_skipped_count(r), 1 + sk0);
    assert_int_equal(rp_report_skipped(r, sk0)->policy, RP_KV_CONTIGUOUS);
    assert_string_equal(rp_report_skipped(r, sk0)->reason,
                        "the trace has no request markers; give --kv-context N");
    assert_int_equal(rp_report_count(r), RP_POLICY_COUNT - 1 - sk0);
    assert_int_equal(get(r, RP_KV_PAGED)->kv_requests, 1);
    assert_int_equal(get(r, RP_KV_PAGED)->peak_kv_tokens, 10);
    char *t = report_text(r, 0);
    assert_non_null(strstr(t, "\nskipped kv-contiguous: the trace has no request markers; give --kv-context N\n"));
    free(t);
    rp_report_free(r);

    rp_config_t cfg = rp_config_default();
    cfg.kv_context = 32;
    r = replay_sel(b.path, "kv", &cfg);
    assert_int_equal(rp_report_skipped_count(r), 0);
    assert_int_equal(rp_report_count(r), 4);
    assert_int_equal(get(r, RP_KV_CONTIGUOUS)->peak_kv_reserved_tokens, 32);
    rp_report_free(r);
    unlink(b.path);
}


/* ---- pool on the heap stream: the threshold and the sites ------------------- */

/* Default threshold 128 KiB. A 100 B, B 24 B and E 131071 B (one under it)
 * go to the glibc chunk model: chunks (req + 8 rounded up to 16, >= 32) of
 * 112, 32 and 131088 B. C 200000 B (-> 49 slabs = 200704), D 131072 B (at
 * the threshold: the pool) and, after C is freed, F 150000 B (151552: a
 * hit on C's 200704-byte buffer, first fit). Reserved (pool out + cached
 * + chunks): 112, 144, 200848, 331920, 463008 after E, and stays 463008
 * (C's buffer cached, then out again): the peak. */
static void test_pool_heap_stream_splits_at_the_threshold(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x1000, 100);      /* A */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x2000, 24);       /* B */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x100000, 200000); /* C */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x200000, 131072); /* D */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x300000, 131071); /* E */
    tick(&b); PST_EMIT(b.w, 1, PST_EV_FREE, 0x100000);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x400000, 150000); /* F */
    tb_close(&b);
    rp_config_t cfg = rp_config_default();
    cfg.stream = RP_STREAM_HEAP;
    rp_report_t *r = replay(b.path, "pool", &cfg);
    const rp_result_t *p = get(r, RP_POOL);
    assert_true(p->heap_split);
    assert_int_equal(p->pool_min, 128 * 1024);
    assert_int_equal(p->pooled_calls, 3);
    assert_int_equal(p->pooled_bytes, 200000 + 131072 + 150000);
    assert_int_equal(p->small_calls, 3);
    assert_int_equal(p->small_bytes, 100 + 24 + 131071);
    assert_int_equal(p->peak_small_held, 112 + 32 + 131088);
    assert_int_equal(p->site_calls, 0);
    assert_int_equal(p->m.acquires, 3);
    assert_int_equal(p->m.hits, 1);
    assert_int_equal(p->m.misses, 2);
    assert_int_equal(p->pool_peak_outstanding, 200704 + 131072);
    assert_int_equal(p->m.peak_reserved_bytes, 463008);
    char *t = report_text(r, 0);
    assert_non_null(strstr(t, "pool: heap stream split at 128 KiB: 3 calls"));
    free(t);
    rp_report_free(r);

    /* --pool-min 200000: only C goes to the pool. D and F become mapped
     * chunks (from 128 KiB: request + 16 rounded up to 4096): 135168 and
     * 151552. Reserved: 112, 144, 200848 (C), 336016, 467104, C cached
     * (still reserved), then F: 618656. */
    cfg.pool_min = 200000;
    cfg.pool_min_set = 1;
    r = replay(b.path, "pool", &cfg);
    p = get(r, RP_POOL);
    assert_int_equal(p->pooled_calls, 1);
    assert_int_equal(p->small_calls, 5);
    assert_int_equal(p->peak_small_held, 112 + 32 + 135168 + 131088 + 151552);
    assert_int_equal(p->m.peak_reserved_bytes, 200704 + 112 + 32 + 135168 + 131088 + 151552);
    rp_report_free(r);
    unlink(b.path);
}

/* ---- caching and pool on the heap stream: the same requests, one fragmentation -- */

/* Default threshold 128 KiB, so both rows take C 200000, E 3000000 and F
 * 150000 (3 calls, 3350000 B) and give A 100, B 24 and D 1000 to the glibc
 * chunk model: chunks (req + 8 rounded up to 16, >= 32) of 112, 32 and
 * 1008 (3 calls, 1124 B; held at most 1152, before B is freed).
 *
 * caching: C -> 200192 (512 multiple) from a new 2 MiB small segment
 * (split); E -> 3000320 from a new 20 MiB large segment (split); free C:
 * the small segment is wholly free again; F -> 150016 from it. The
 * allocator alone: reserved peak 2097152 + 20971520 = 23068672, allocated
 * peak 200192 + 3000320 = 3200512. The row (allocator + chunks): reserved
 * 23068672 + 1152 = 23069824 after E; allocated 3200512 + 1152 = 3201664.
 *
 * pool (4 KiB slabs): C -> 200704, E -> 3002368, free C (cached), F 151552
 * is a hit on C's buffer. Reserved = out + cached + chunks: 200704 + 3002368
 * + 1152 = 3204224 after E, the peak; the pool alone 3203072.
 *
 * One fragmentation figure, the analyzer's internal_frag, at the live peak
 * (after E: 100 + 24 + 200000 + 1000 + 3000000 = 3201124 requested): the
 * chunks' usable bytes (chunk - 8: 104, 24, 1000) plus the blocks' —
 * caching 200192 + 3000320, so 3201640 and (3201640 - 3201124) / 3201640;
 * pool 200704 + 3002368, so 3204200 and (3204200 - 3201124) / 3204200. The
 * table's i_frag is that figure, and no text line gives another. */
static void write_mixed_heap_trace(tb_t *b)
{
    tb_open(b);
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x1000, 100);       /* A */
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x2000, 24);        /* B */
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x100000, 200000);  /* C */
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x3000, 1000);      /* D */
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x1000000, 3000000);/* E */
    tick(b); PST_EMIT(b->w, 1, PST_EV_FREE, 0x2000);               /* B */
    tick(b); PST_EMIT(b->w, 1, PST_EV_FREE, 0x100000);             /* C */
    tick(b); PST_EMIT(b->w, 1, PST_EV_MALLOC, 0x400000, 150000);  /* F */
    tb_close(b);
}

/* Token col (0: the name; a size is two tokens, "22.0 MiB") of a policy's
 * row in the table: 7 is i_frag, e.g. "0.0%". */
static void table_cell(const char *text, const char *policy, int col, char *out, size_t len)
{
    char pre[32];
    snprintf(pre, sizeof pre, "\n%s ", policy);
    const char *l = strstr(text, pre);
    assert_non_null(l);
    l++;
    char line[512];
    size_t n = strcspn(l, "\n");
    assert_true(n < sizeof line);
    memcpy(line, l, n);
    line[n] = 0;
    char *save = NULL, *tok = strtok_r(line, " ", &save);
    for (int i = 0; i < col && tok; i++) tok = strtok_r(NULL, " ", &save);
    assert_non_null(tok);
    snprintf(out, len, "%s", tok);
}

static void test_caching_and_pool_take_the_same_heap_requests(void **st)
{
    (void)st;
    tb_t b;
    write_mixed_heap_trace(&b);
    rp_config_t cfg = rp_config_default();
    cfg.stream = RP_STREAM_HEAP;
    rp_report_t *r = replay(b.path, "pool,caching", &cfg);
    const rp_result_t *c = get(r, RP_CACHING), *p = get(r, RP_POOL);
    const rp_result_t *x[2] = { c, p };
    for (int i = 0; i < 2; i++) {      /* the same split, said by both rows */
        assert_true(x[i]->heap_split);
        assert_int_equal(x[i]->pool_min, 128 * 1024);
        assert_int_equal(x[i]->pooled_calls, 3);
        assert_int_equal(x[i]->pooled_bytes, 200000 + 3000000 + 150000);
        assert_int_equal(x[i]->small_calls, 3);
        assert_int_equal(x[i]->small_bytes, 100 + 24 + 1000);
        assert_int_equal(x[i]->peak_small_held, 112 + 32 + 1008);
        assert_int_equal(x[i]->m.allocs, 6);
        assert_int_equal(x[i]->m.peak_live_bytes, 3201124);
    }
    /* caching */
    assert_int_equal(c->segments_allocated, 2);
    assert_int_equal(c->peak_segments, 2);
    assert_int_equal(c->pool_peak_reserved, 23068672);
    assert_int_equal(c->pool_peak_outstanding, 3200512);
    assert_int_equal(c->m.peak_reserved_bytes, 23069824);
    assert_int_equal(c->m.peak_outstanding_bytes, 3201664);
    assert_double_equal(c->m.internal_frag, (3201640.0 - 3201124.0) / 3201640.0, 1e-12);
    /* pool */
    assert_int_equal(p->m.acquires, 3);
    assert_int_equal(p->m.hits, 1);
    assert_int_equal(p->pool_peak_reserved, 3203072);
    assert_int_equal(p->m.peak_reserved_bytes, 3204224);
    assert_double_equal(p->m.internal_frag, (3204200.0 - 3201124.0) / 3204200.0, 1e-12);

    char *t = report_text(r, 0);
    assert_non_null(strstr(t, "caching: heap stream split at 128 KiB: 3 calls (3.19 MiB) to the caching "
                              "allocator (the caching allocator alone: peak reserved 22.0 MiB, peak "
                              "allocated 3.05 MiB); 3 calls (1.10 KiB) to the glibc chunk model"));
    assert_non_null(strstr(t, "pool: heap stream split at 128 KiB: 3 calls (3.19 MiB) to the pool"));
    /* one fragmentation figure: the table's i_frag, none in the text lines */
    char cell[32], want[32];
    table_cell(t, "caching", 7, cell, sizeof cell);
    snprintf(want, sizeof want, "%.1f%%", 100 * c->m.internal_frag);
    assert_string_equal(cell, want);
    table_cell(t, "pool", 7, cell, sizeof cell);
    snprintf(want, sizeof want, "%.1f%%", 100 * p->m.internal_frag);
    assert_string_equal(cell, want);
    assert_null(strstr(t, "fragmentation 0"));
    for (const char *q = t; (q = strstr(q, "fragmentation")); q++)
        assert_true(strncmp(q, "fragmentation counted", 21) == 0);   /* the chunk model's caveat only */
    free(t);
    /* JSON: the same split keys for both rows, no second fragmentation */
    char *js = report_text(r, 1);
    assert_null(strstr(js, "\"fragmentation\""));
    assert_non_null(strstr(js, "\"caching_peak_reserved_bytes\": 23068672"));
    int rows = 0;                       /* pool's and caching's */
    for (const char *q = js; (q = strstr(q, "\"small_calls\": 3,")); q++) rows++;
    assert_int_equal(rows, 2);
    free(js);
    rp_report_free(r);

    /* --pool-min 0: both rows take everything; caching rounds A, B and D
     * up to 512, 512 and 1024 in the small segment (no chunk model) */
    cfg.pool_min = 0;
    cfg.pool_min_set = 1;
    r = replay(b.path, "pool,caching", &cfg);
    c = get(r, RP_CACHING);
    assert_int_equal(c->pooled_calls, 6);
    assert_int_equal(c->small_calls, 0);
    assert_int_equal(c->pool_peak_outstanding, 512 + 512 + 200192 + 1024 + 3000320);
    assert_int_equal(get(r, RP_POOL)->pooled_calls, 6);
    rp_report_free(r);
    unlink(b.path);
}

/* Return addresses inside three functions of this program, for stacks the
 * symbolizer can name: tensor_site (a site), other_site (a site) and
 * xmalloc (one of the default allocation wrappers). */
static uint64_t g_ra;
static volatile int g_sink;
__attribute__((noinline, noclone)) static void grab_ra(void)
{
    g_ra = (uint64_t)(uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}
__attribute__((noinline, noclone)) static uint64_t tensor_site(void) { grab_ra(); g_sink = 1; return g_ra; }
__attribute__((noinline, noclone)) static uint64_t other_site(void) { grab_ra(); g_sink = 2; return g_ra; }
__attribute__((noinline, noclone)) static uint64_t xmalloc(void) { grab_ra(); g_sink = 3; return g_ra; }

static int self_module(struct dl_phdr_info *info, size_t size, void *ctx)
{
    (void)size;
    uint64_t *lohi = ctx;
    if (info->dlpi_name && info->dlpi_name[0]) return 0;   /* the executable has no name here */
    lohi[0] = UINT64_MAX;
    lohi[1] = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uint64_t a = info->dlpi_addr + ph->p_vaddr;
        if (a < lohi[0]) lohi[0] = a;
        if (a + ph->p_memsz > lohi[1]) lohi[1] = a + ph->p_memsz;
    }
    return 1;
}

static void heap_at(tb_t *b, uint64_t addr, uint64_t size, uint32_t stack)
{
    tick(b);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_MALLOC;
    ev.stack = stack;
    ev.f[0] = addr;
    ev.f[1] = size;
    assert_int_equal(pst_writer_event(b->w, 1, &ev), 0);
}

/* Small allocations from four stacks (innermost first):
 *   S1 100 B  tensor_site                      site tensor_site
 *   S2 300 B  xmalloc < tensor_site            site tensor_site, via xmalloc
 *   S3 500 B  xmalloc < other_site < tensor_site  site other_site, via xmalloc
 *   S4 700 B  other_site                       site other_site
 * "tensor_site" selects S1 and S2 (in S3 it is past the site); "xmalloc"
 * S2 and S3 (a wrapper they went through); neither S4. */
static void test_pool_sites_match_the_site_or_a_wrapper(void **st)
{
    (void)st;
    uint64_t ra_t = tensor_site(), ra_o = other_site(), ra_x = xmalloc();
    static char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(k > 0);
    exe[k] = 0;
    uint64_t lohi[2] = { 0, 0 };
    dl_iterate_phdr(self_module, lohi);
    assert_true(lohi[1] > lohi[0]);

    tb_t b;
    strcpy(b.path, "/tmp/test_replay.XXXXXX");
    int fd = mkstemp(b.path);
    assert_true(fd >= 0);
    close(fd);
    pst_writer_cfg_t wc = { .pid = 100, .exe = "/bin/test", .stacks = PST_STACKS_FP };
    int err = 0;
    b.w = pst_writer_open(b.path, &wc, &err);
    assert_non_null(b.w);
    b.t = 0;
    assert_int_equal(pst_writer_module(b.w, 1, lohi[0], lohi[1] - lohi[0], exe, NULL, 0), 0);
    const uint64_t f1[1] = { ra_t }, f2[2] = { ra_x, ra_t }, f3[3] = { ra_x, ra_o, ra_t }, f4[1] = { ra_o };
    uint32_t s1 = pst_writer_stack(b.w, f1, 1), s2 = pst_writer_stack(b.w, f2, 2);
    uint32_t s3 = pst_writer_stack(b.w, f3, 3), s4 = pst_writer_stack(b.w, f4, 1);
    heap_at(&b, 0x1000, 100, s1);
    heap_at(&b, 0x2000, 300, s2);
    heap_at(&b, 0x3000, 500, s3);
    heap_at(&b, 0x4000, 700, s4);
    heap_at(&b, 0x5000, 100, s1);            /* the same stack again: from the cache */
    tb_close(&b);

    const char *pat[1] = { "tensor_site" };
    rp_config_t cfg = rp_config_default();
    cfg.pool_sites = pat;
    cfg.n_pool_sites = 1;
    rp_report_t *r = replay(b.path, "pool", &cfg);
    const rp_result_t *p = get(r, RP_POOL);
    assert_int_equal(p->site_stacks, 2);
    assert_int_equal(p->site_calls, 3);
    assert_int_equal(p->site_bytes, 100 + 300 + 100);
    assert_int_equal(p->pooled_calls, 3);
    assert_int_equal(p->small_calls, 2);
    assert_int_equal(p->small_bytes, 500 + 700);
    rp_report_free(r);

    pat[0] = "xmalloc";
    r = replay(b.path, "pool", &cfg);
    p = get(r, RP_POOL);
    assert_int_equal(p->site_stacks, 2);
    assert_int_equal(p->site_bytes, 300 + 500);
    assert_int_equal(p->small_bytes, 100 + 700 + 100);
    rp_report_free(r);

    pat[0] = "no_such_function";
    r = replay(b.path, "pool", &cfg);
    assert_int_equal(get(r, RP_POOL)->site_calls, 0);
    assert_int_equal(get(r, RP_POOL)->small_calls, 5);
    rp_report_free(r);
    unlink(b.path);

    /* a trace without stacks cannot be matched: said so */
    tb_t h;
    write_heap_only(&h);
    char msg[512];
    pat[0] = "tensor_site";
    assert_int_equal(replay_sel_fails(h.path, "pool", &cfg, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "--pool-sites needs call stacks"));
    unlink(h.path);
}

/* ---- caching ---------------------------------------------------------------- */

/* The rules of pol_caching.c, by hand (f32 tensors: bytes = 4 n).
 * Small pool, one 2 MiB segment S:
 *   a 1048576 B at 0 (split: 1048576 left), b 8192 at 1048576, c 4096 at
 *   1056768, d 1036288 at 1060864 (exactly the rest: no split). S is full.
 *   free a, free c: holes of 1048576 (at 0) and 4096 (at 1056768).
 *   e 4096: best fit is c's hole (first fit would cut a's); f 1048576:
 *   a's hole. Still one small segment.
 * Large pool, one 20 MiB segment L (20971520):
 *   g 1200000 -> 1200128, split (19771392 left > 1 MiB); h 12000000 ->
 *   12000256, split (7771136 left); i 7246848: 524288 would be left, not
 *   more than 1 MiB, so i gets the whole 7771136 block.
 *   free g, free h: merged into 13200384 at 0 (1 merge).
 *   j 13000000 -> 13000192 fits only the merged block (12000256 would
 *   not), 200192 left: not split. Still one large segment.
 * Reserved peak 2 MiB + 20 MiB = 23068672 = the allocated peak (after i):
 * fragmentation 0. Live peak after i: 2097152 + 1200000 + 12000000 +
 * 7246848 = 22544000. Then everything is freed: b, d, e, f merge S back
 * into one block (3 merges), i and j L (1); k 4096 comes from S, cached
 * (split), and goes back (1 merge). Splits: a, b, c, g, h, k = 6; merges 6.
 * Segments: 2 allocated, none released without a cap. With --cache-cap
 * 2 MiB: when L is wholly free, 22 MiB of free segments > 2 MiB, so the
 * largest (L) goes: 1 released. With 0: S and L as they empty, and k needs
 * a segment of its own, released too: 3 allocated, 3 released. */
static void write_caching_trace(tb_t *b)
{
    tb_open(b);
    acq(b, 1, 262144);     /* a */
    acq(b, 2, 2048);       /* b */
    acq(b, 3, 1024);       /* c */
    acq(b, 4, 259072);     /* d */
    rel(b, 1);
    rel(b, 3);
    acq(b, 5, 1024);       /* e */
    acq(b, 6, 262144);     /* f */
    acq(b, 7, 300000);     /* g */
    acq(b, 8, 3000000);    /* h */
    acq(b, 9, 1811712);    /* i */
    rel(b, 7);
    rel(b, 8);
    acq(b, 10, 3250000);   /* j */
    rel(b, 2);
    rel(b, 4);
    rel(b, 5);
    rel(b, 6);
    rel(b, 9);
    rel(b, 10);
    acq(b, 11, 1024);      /* k */
    rel(b, 11);
    tb_close(b);
}

static void test_caching_rules_by_hand(void **st)
{
    (void)st;
    tb_t b;
    write_caching_trace(&b);
    rp_report_t *r = replay(b.path, "caching", NULL);
    const rp_result_t *c = get(r, RP_CACHING);
    assert_int_equal(c->m.allocs, 11);
    assert_int_equal(c->m.peak_reserved_bytes, 23068672);
    assert_int_equal(c->m.peak_outstanding_bytes, 23068672);
    assert_int_equal(c->m.peak_live_bytes, 22544000);
    assert_int_equal(c->segments_allocated, 2);
    assert_int_equal(c->segments_released, 0);
    assert_int_equal(c->peak_segments, 2);
    assert_int_equal(c->splits, 6);
    assert_int_equal(c->merges, 6);
    assert_int_equal(c->cache_cap, UINT64_MAX);
    assert_double_equal(c->fragmentation, 0.0, 1e-12);
    assert_int_equal(c->m.backing_allocs, 2);
    assert_int_equal(c->m.backing_frees, 0);
    char *t = report_text(r, 0);
    assert_non_null(strstr(t, "caching: 2 segments allocated, 0 released (cache cap unlimited)"));
    free(t);
    rp_report_free(r);

    rp_config_t cfg = rp_config_default();
    cfg.cache_cap = 2 * MIB;
    cfg.cache_cap_set = 1;
    r = replay(b.path, "caching", &cfg);
    c = get(r, RP_CACHING);
    assert_int_equal(c->segments_allocated, 2);
    assert_int_equal(c->segments_released, 1);
    assert_int_equal(c->m.backing_frees, 1);
    assert_int_equal(c->m.peak_reserved_bytes, 23068672);
    rp_report_free(r);

    cfg.cache_cap = 0;
    r = replay(b.path, "caching", &cfg);
    c = get(r, RP_CACHING);
    assert_int_equal(c->segments_allocated, 3);
    assert_int_equal(c->segments_released, 3);
    assert_int_equal(c->peak_segments, 2);
    rp_report_free(r);
    unlink(b.path);
}

/* One 1000-f32 tensor (4000 B -> 4096): a 2 MiB small segment reserved for
 * 4096 allocated: fragmentation 1 - 4096 / 2097152; internal 96 / 4096.
 * One 11 MiB tensor (n = 2883584, 11534336 B): 10 MiB or more, so its
 * segment is its size rounded up to 2 MiB, 12582912; the 1048576 left is
 * not more than 1 MiB: not split, the block is the whole segment. */
static void test_caching_segment_sizes(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    acq(&b, 1, 1000);
    rel(&b, 1);
    tb_close(&b);
    rp_report_t *r = replay(b.path, "caching", NULL);
    const rp_result_t *c = get(r, RP_CACHING);
    assert_int_equal(c->m.peak_reserved_bytes, 2 * MIB);
    assert_int_equal(c->m.peak_outstanding_bytes, 4096);
    assert_double_equal(c->fragmentation, 1.0 - 4096.0 / (2.0 * MIB), 1e-12);
    assert_double_equal(c->m.internal_frag, 96.0 / 4096.0, 1e-12);
    rp_report_free(r);
    unlink(b.path);

    tb_open(&b);
    acq(&b, 1, 2883584);
    tb_close(&b);
    r = replay(b.path, "caching", NULL);
    c = get(r, RP_CACHING);
    assert_int_equal(c->m.peak_reserved_bytes, 12582912);
    assert_int_equal(c->m.peak_outstanding_bytes, 12582912);
    assert_int_equal(c->splits, 0);
    rp_report_free(r);
    unlink(b.path);
}

/* ---- malloc, jemalloc, mimalloc side by side ------------------------------------ */

static int lib_module(struct dl_phdr_info *info, size_t size, void *ctx)
{
    (void)size;
    char *out = ctx;
    if (!info->dlpi_name || !strstr(info->dlpi_name, "libcmocka")) return 0;
    snprintf(out, 4096, "%s", info->dlpi_name);
    return 1;
}

static const char *first_file(const char *const *paths)
{
    for (; *paths; paths++)
        if (access(*paths, R_OK) == 0) return *paths;
    return NULL;
}

/* An 8 MiB block, its pages touched: each allocator holds at least that,
 * and the helper's RSS grows by at least that. The variants preload the
 * library they are told (POOLSCOPE_JEMALLOC / POOLSCOPE_MIMALLOC); one not
 * there is skipped from a set and fails by name; a library that is no
 * allocator leaves the helper on glibc: skipped as well. */
static void test_malloc_variants_side_by_side(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x1000000, 8 * MIB);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_MALLOC, 0x2000, 100);
    tick(&b); PST_EMIT(b.w, 1, PST_EV_FREE, 0x1000000);
    tb_close(&b);
    static const char *const je[] = { "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2",
        "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2", "/usr/lib64/libjemalloc.so.2",
        "/usr/lib/libjemalloc.so.2", NULL };
    static const char *const mi[] = { "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2",
        "/usr/lib/aarch64-linux-gnu/libmimalloc.so.2", "/usr/lib64/libmimalloc.so.2",
        "/usr/lib/libmimalloc.so.2", NULL };
    const char *lib[2] = { first_file(je), first_file(mi) };
    const char *env[2] = { "POOLSCOPE_JEMALLOC", "POOLSCOPE_MIMALLOC" };
    const char *name[2] = { "jemalloc", "mimalloc" }, *src[2] = { "stats.resident", "mi_process_info commit" };
    const rp_policy_t pol[2] = { RP_MALLOC_JEMALLOC, RP_MALLOC_MIMALLOC };
    for (int i = 0; i < 2; i++) setenv(env[i], lib[i] ? lib[i] : "/nonexistent/lib.so", 1);
    rp_report_t *r = replay_sel(b.path, "allocators", NULL);
    const rp_result_t *g = get(r, RP_MALLOC);
    assert_string_equal(g->allocator, "glibc");
    assert_string_equal(g->held_source, "mallinfo2 arena+hblkhd");
    assert_null(g->library);
    assert_true(g->m.peak_reserved_bytes >= 8 * MIB);
    assert_true(g->peak_rss_bytes >= 8 * MIB);
    size_t skipped = 0;
    for (int i = 0; i < 2; i++) {
        const rp_result_t *x = rp_report_find(r, pol[i]);
        if (!lib[i]) {
            fprintf(stderr, "# %s not installed: its skip is tested\n", name[i]);
            assert_null(x);
            assert_non_null(strstr(rp_report_skipped(r, skipped++)->reason, "not found"));
            continue;
        }
        assert_non_null(x);
        assert_string_equal(x->allocator, name[i]);
        assert_string_equal(x->held_source, src[i]);
        assert_string_equal(x->library, lib[i]);
        assert_int_equal(x->m.allocs, 2);
        assert_int_equal(x->m.peak_live_bytes, 8 * MIB + 100);
        assert_true(x->m.peak_reserved_bytes >= 8 * MIB);
        assert_true(x->peak_rss_bytes >= 8 * MIB);
    }
    assert_int_equal(rp_report_skipped_count(r), skipped);
    rp_report_free(r);

    /* missing: skipped from a set with the reason, an error by name */
    setenv("POOLSCOPE_JEMALLOC", "/nonexistent/libjemalloc.so.2", 1);
    r = replay_sel(b.path, "allocators,ideal", NULL);
    assert_null(rp_report_find(r, RP_MALLOC_JEMALLOC));
    assert_int_equal(rp_report_skipped(r, 0)->policy, RP_MALLOC_JEMALLOC);
    assert_string_equal(rp_report_skipped(r, 0)->reason,
                        "libjemalloc.so.2 not found (Debian: libjemalloc2; POOLSCOPE_JEMALLOC names another)");
    char *t = report_text(r, 0);
    assert_non_null(strstr(t, "\nskipped malloc-jemalloc: libjemalloc.so.2 not found"));
    free(t);
    rp_report_free(r);
    char msg[512];
    assert_int_equal(replay_sel_fails(b.path, "malloc-jemalloc", NULL, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "malloc-jemalloc: cannot start: libjemalloc.so.2 not found"));

    /* a library that does not replace malloc: the helper stays on glibc */
    static char cm[4096];
    cm[0] = 0;
    dl_iterate_phdr(lib_module, cm);
    if (cm[0]) {
        setenv("POOLSCOPE_MIMALLOC", cm, 1);
        r = replay_sel(b.path, "allocators", NULL);
        assert_null(rp_report_find(r, RP_MALLOC_MIMALLOC));
        assert_int_equal(rp_report_skipped(r, 1)->policy, RP_MALLOC_MIMALLOC);
        assert_string_equal(rp_report_skipped(r, 1)->reason,
                            "the helper did not run on mimalloc with libmimalloc preloaded");
        rp_report_free(r);
        assert_int_equal(replay_sel_fails(b.path, "malloc-mimalloc", NULL, msg, sizeof msg), PSC_EINVAL);
        assert_non_null(strstr(msg, "the helper did not run on mimalloc"));
    }
    unsetenv("POOLSCOPE_JEMALLOC");
    unsetenv("POOLSCOPE_MIMALLOC");
    unlink(b.path);
}

/* Without its helper program the malloc policy is skipped from a set
 * (the others still run) and an error when named. */
static void test_malloc_without_helper_skipped_from_all(void **st)
{
    (void)st;
    tb_t b;
    write_heap_only(&b);
    const char *was = getenv("POOLSCOPE_MALLOC_HELPER");
    char *keep = was ? strdup(was) : NULL;
    setenv("POOLSCOPE_MALLOC_HELPER", "/nonexistent/poolscope-malloc-helper", 1);
    rp_report_t *r = replay_sel(b.path, "all", NULL);
    assert_null(rp_report_find(r, RP_MALLOC));
    assert_null(rp_report_find(r, RP_MALLOC_JEMALLOC));
    assert_null(rp_report_find(r, RP_MALLOC_MIMALLOC));
    assert_non_null(rp_report_find(r, RP_ARENA));
    assert_int_equal(rp_report_skipped_count(r), 7);
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(rp_report_skipped(r, i)->policy, (rp_policy_t)(RP_MALLOC + i));
        assert_non_null(strstr(rp_report_skipped(r, i)->reason, "poolscope-malloc-helper not found"));
    }
    rp_report_free(r);
    char msg[512];
    assert_true(replay_sel_fails(b.path, "malloc,arena", NULL, msg, sizeof msg) < 0);
    assert_non_null(strstr(msg, "malloc: cannot start"));
    if (keep) setenv("POOLSCOPE_MALLOC_HELPER", keep, 1);
    else unsetenv("POOLSCOPE_MALLOC_HELPER");
    free(keep);
    unlink(b.path);
}

/* A trace with everything (tensors, KV blocks, request markers): "all"
 * runs every policy and skips none (but a malloc variant whose library is
 * not installed). */
static void test_all_on_full_trace_runs_every_policy(void **st)
{
    (void)st;
    tb_t b;
    tb_open(&b);
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = 1; ev.f[2] = 16; ev.f[3] = 64; ev.f[7] = 16 * 100;
    assert_int_equal(pst_writer_event(b.w, 1, &ev), 0);
    const uint32_t id0[1] = { 0 };
    mark(&b, 1, "forward", 0, 0, 0);
    acq(&b, 1, 1000);
    pst_writer_time(b.w, 500);
    kvb_ids(&b, PST_EV_KVB_ALLOC, 1, 1, 7, 10, id0, 1);
    mark(&b, 1, "request", 7, 10, 30);
    rel(&b, 1);
    mark(&b, 0, "forward", 0, 0, 0);
    tick(&b);
    kvb_ids(&b, PST_EV_KVB_FREE, 1, 2, 0, 0, id0, 1);
    mark(&b, 0, "request", 7, 0, 0);
    tb_close(&b);
    rp_report_t *r = replay_sel(b.path, "all", NULL);
    size_t nv = variants_ran(r);
    assert_int_equal(rp_report_count(r), RP_POLICY_COUNT - 2 + nv);
    assert_int_equal(rp_report_skipped_count(r), 2 - nv);
    for (int i = 0; i < RP_POLICY_COUNT; i++)
        if (i != RP_MALLOC_JEMALLOC && i != RP_MALLOC_MIMALLOC) assert_non_null(rp_report_find(r, (rp_policy_t)i));
    assert_int_equal(get(r, RP_KV_CONTIGUOUS)->kv_context, 40);
    char *t = report_text(r, 0);
    if (nv == 2) assert_null(strstr(t, "skipped"));
    assert_null(strstr(t, "warning"));        /* it has forward scopes */
    free(t);
    rp_report_free(r);
    unlink(b.path);
}

/* The malloc policy runs its calls in build/bin/poolscope-malloc-helper,
 * which it looks for next to the running binary; this one is in
 * build/tests/, so point the override at the helper unless already set. */
static void use_built_malloc_helper(void)
{
    const char *env = getenv("POOLSCOPE_MALLOC_HELPER");
    if (env && *env) return;
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 64);
    if (n <= 0) return;
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    strcpy(slash, "/../bin/poolscope-malloc-helper");
    setenv("POOLSCOPE_MALLOC_HELPER", exe, 1);
}

/* ---- mutation tests (issue 12) ---------------------------------------------------
 *
 * Each pins one documented rule to numbers worked out by hand in its
 * comment and fails under the mutant that breaks it (once test_mutants.c,
 * folded into the suites by module). KV behaviour is checked only through
 * what az_scan_file and rp_run hand back, never through internal tables.
 * Their helpers keep their own names under the mu_ prefix; each test makes
 * and removes its own temporary directory (mu_setup, mu_teardown). */

#define mu_MIB ((uint64_t)1 << 20)

/* This cmocka has no assert_double_equal. */
#define mu_assert_near(a, b) mu_near_((double)(a), (double)(b), #a, __FILE__, __LINE__)
static void mu_near_(double a, double b, const char *what, const char *file, int line)
{
    if (!(a - b <= 1e-9 && b - a <= 1e-9)) {
        fprintf(stderr, "%s:%d: %s = %.12g, want %.12g\n", file, line, what, a, b);
        fail();
    }
}

static char mu_dir[256];

static int mu_setup(void **st)
{
    (void)st;
    snprintf(mu_dir, sizeof mu_dir, "/tmp/test_replay.mu.XXXXXX");
    return mkdtemp(mu_dir) ? 0 : -1;
}

static int mu_teardown(void **st)
{
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", mu_dir);
    return system(cmd) == 0 ? 0 : -1;
}

static pst_writer_t *mu_open_trace(char *path, size_t len, const char *name)
{
    snprintf(path, len, "%s/%s", mu_dir, name);
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 12, .exe = "/mutants" };
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    return w;
}

/* ---- arena: 64-byte bumps ------------------------------------------------------- */

/* n mallocs of `size` bytes at distinct addresses, all live at once, then
 * all freed. */
static void mu_write_live_together(const char *name, char *path, size_t len, uint64_t size, uint64_t n)
{
    pst_writer_t *w = mu_open_trace(path, len, name);
    for (uint64_t i = 0; i < n; i++) {
        pst_writer_time(w, 1000 + i);
        assert_int_equal(PST_EMIT(w, 1, PST_EV_MALLOC, 0x10000000ull + 0x100ull * i, size), 0);
    }
    for (uint64_t i = 0; i < n; i++) {
        pst_writer_time(w, 1000 + n + i);
        assert_int_equal(PST_EMIT(w, 1, PST_EV_FREE, 0x10000000ull + 0x100ull * i), 0);
    }
    assert_int_equal(pst_writer_close(w), 0);
}

static rp_report_t *mu_replay_heap(const char *path, const char *policies)
{
    rp_config_t cfg = rp_config_default();
    char msg[256];
    assert_int_equal(rp_policy_parse(policies, &cfg.policies, msg, sizeof msg), 0);
    cfg.stream = RP_STREAM_HEAP;
    rp_report_t *rep = NULL;
    int rc = rp_run(path, &cfg, &rep, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run %s: %s\n", path, msg);
    assert_int_equal(rc, 0);
    assert_non_null(rep);
    return rep;
}

/* Three 10-byte objects live together: each bumps 64 bytes (10 rounded up
 * to 64), so the arena hands out 3 x 64 = 192 bytes for 30 requested — not
 * 3 x 16 = 48. At the live peak: rnd 192, req 30, internal fragmentation
 * (192 - 30) / 192 = 162 / 192 = 0.84375. All of it fits the first 1 MiB
 * chunk: reserved 1 MiB, one chunk. */
static void test_arena_bumps_small_objects_in_64_byte_steps(void **st)
{
    (void)st;
    char p[512];
    mu_write_live_together("arena3.pst", p, sizeof p, 10, 3);
    rp_report_t *r = mu_replay_heap(p, "arena");
    const rp_result_t *a = rp_report_find(r, RP_ARENA);
    assert_non_null(a);
    assert_int_equal(a->m.allocs, 3);
    assert_int_equal(a->m.peak_live_bytes, 30);
    assert_int_equal(a->m.peak_live_rnd_bytes, 192);
    mu_assert_near(a->m.internal_frag, 162.0 / 192.0);
    assert_int_equal(a->m.peak_reserved_bytes, mu_MIB);
    assert_int_equal(a->chunks_allocated, 1);
    rp_report_free(r);
}

/* 1-byte objects each take a 64-byte step, so the first 1 MiB chunk holds
 * exactly 2^20 / 64 = 16384 of them. 16384 live objects: one chunk, 1 MiB
 * reserved. One more (16385): the first chunk has 0 bytes left, so a chunk
 * of twice its size (2 MiB) is taken: 2 chunks, 3 MiB reserved, 2 backing
 * allocations. (With 16-byte steps 65536 would fit in 1 MiB.) */
static void test_arena_first_chunk_holds_16384_one_byte_objects(void **st)
{
    (void)st;
    char p[512];
    mu_write_live_together("arena16384.pst", p, sizeof p, 1, 16384);
    rp_report_t *r = mu_replay_heap(p, "arena");
    const rp_result_t *a = rp_report_find(r, RP_ARENA);
    assert_non_null(a);
    assert_int_equal(a->m.allocs, 16384);
    assert_int_equal(a->chunks_allocated, 1);
    assert_int_equal(a->m.peak_reserved_bytes, mu_MIB);
    assert_int_equal(a->m.peak_live_rnd_bytes, 16384 * 64);
    rp_report_free(r);

    mu_write_live_together("arena16385.pst", p, sizeof p, 1, 16385);
    r = mu_replay_heap(p, "arena");
    a = rp_report_find(r, RP_ARENA);
    assert_non_null(a);
    assert_int_equal(a->m.allocs, 16385);
    assert_int_equal(a->chunks_allocated, 2);
    assert_int_equal(a->m.backing_allocs, 2);
    assert_int_equal(a->m.peak_reserved_bytes, 3 * mu_MIB);
    rp_report_free(r);
}

/* ---- KV in the report (az_scan_file) --------------------------------------------- */

static void mu_kv_create(pst_writer_t *w, uint64_t pool, uint64_t block_size, uint64_t n_blocks,
                      uint64_t slot_bytes)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_CREATE;
    ev.str = "kv";
    ev.f[0] = pool; ev.f[2] = block_size; ev.f[3] = n_blocks; ev.f[7] = slot_bytes;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void mu_kv_alloc(pst_writer_t *w, uint64_t pool, uint64_t seq, uint64_t owner, uint64_t n_tokens,
                     const uint32_t *ids, uint32_t n)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_ALLOC;
    ev.f[0] = pool; ev.f[1] = seq;
    ev.f[2] = 2;                        /* KVB_STREAM_KV: its tokens count */
    ev.f[3] = owner; ev.f[5] = n_tokens;
    ev.ids = ids; ev.n_ids = n;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void mu_kv_free(pst_writer_t *w, uint64_t pool, uint64_t seq, const uint32_t *ids, uint32_t n)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = PST_EV_KVB_FREE;
    ev.f[0] = pool; ev.f[1] = seq;
    ev.ids = ids; ev.n_ids = n;
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

static void mu_mark(pst_writer_t *w, int begin, const char *name, uint64_t inst, int64_t p0, int64_t p1)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = begin ? PST_EV_MARK_BEGIN : PST_EV_MARK_END;
    ev.str = name;
    ev.f[1] = inst;
    if (begin && (p0 || p1)) {
        ev.payload[0] = p0;
        ev.payload[1] = p1;
        ev.n_payload = 2;
    }
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
}

/* ---- KV in replay (rp_run) ------------------------------------------------------- */

/* One request (owner 7, marker payload prompt 20 + max 20 = 40) in a pool
 * of 16-token blocks of 1600 bytes (100 bytes per token):
 *
 *   t=100  ALLOC {0,1}, 32 tokens   request: 32 tokens, 2 blocks
 *          "request" begins         reserve known: 40
 *   t=200  FREE {0}                 16 tokens (block 0 took its 16 away), 1 block
 *   t=300  ALLOC {2}, 16 tokens     32 tokens, 2 blocks
 *   t=400  FREE {1,2}; "request" ends
 *
 * The request never holds more than 32 tokens:
 *   kv-paged (16):  slots 32, 16, 32: peak 32 reserved, 32 stored (3200 B);
 *                   full throughout: utilization 1
 *   kv-reserve:     40 slots (32 at the very first update, before the
 *                   marker, at t=100 too): peak 40; 32 <= 40, no overflow;
 *                   utilization (32 + 16 + 32) / 3 / 40 = 2/3
 *   kv-contiguous:  context 40 (the largest prompt + max): no overflow,
 *                   peak 32 stored
 * Had the free left the 16 tokens in the request, it would reach 48 at
 * t=300: a 48-token peak and an overflow of kv-reserve's 40. */
static void test_replay_kv_free_takes_tokens_out_of_the_request(void **st)
{
    (void)st;
    char p[512], msg[256];
    pst_writer_t *w = mu_open_trace(p, sizeof p, "kvreplay.pst");
    mu_kv_create(w, 1, 16, 64, 16 * 100);
    const uint32_t b01[2] = { 0, 1 }, b0[1] = { 0 }, b2[1] = { 2 }, b12[2] = { 1, 2 };
    pst_writer_time(w, 100);
    mu_kv_alloc(w, 1, 1, 7, 32, b01, 2);
    mu_mark(w, 1, "request", 7, 20, 20);
    pst_writer_time(w, 200); mu_kv_free(w, 1, 2, b0, 1);
    pst_writer_time(w, 300); mu_kv_alloc(w, 1, 3, 7, 16, b2, 1);
    pst_writer_time(w, 400);
    mu_kv_free(w, 1, 4, b12, 2);
    mu_mark(w, 0, "request", 7, 0, 0);
    assert_int_equal(pst_writer_close(w), 0);

    rp_config_t cfg = rp_config_default();
    assert_int_equal(rp_policy_parse("kv", &cfg.policies, msg, sizeof msg), 0);
    rp_report_t *r = NULL;
    int rc = rp_run(p, &cfg, &r, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run: %s\n", msg);
    assert_int_equal(rc, 0);
    const rp_result_t *pg = rp_report_find(r, RP_KV_PAGED), *rs = rp_report_find(r, RP_KV_RESERVE),
                      *c = rp_report_find(r, RP_KV_CONTIGUOUS);
    assert_non_null(pg);
    assert_non_null(rs);
    assert_non_null(c);
    assert_int_equal(pg->kv_token_bytes, 100);
    assert_int_equal(pg->peak_kv_tokens, 32);
    assert_int_equal(pg->peak_kv_reserved_tokens, 32);
    assert_int_equal(pg->m.peak_live_bytes, 3200);
    assert_int_equal(pg->kv_overflows, 0);
    mu_assert_near(pg->m.kv_utilization, 1.0);
    assert_int_equal(rs->kv_requests, 1);
    assert_int_equal(rs->peak_kv_tokens, 32);
    assert_int_equal(rs->peak_kv_reserved_tokens, 40);
    assert_int_equal(rs->kv_overflows, 0);
    mu_assert_near(rs->m.kv_utilization, 2.0 / 3.0);
    assert_int_equal(c->kv_context, 40);
    assert_int_equal(c->peak_kv_tokens, 32);
    assert_int_equal(c->kv_overflows, 0);
    rp_report_free(r);
}

/* ---- mutation tests (issue 27, item 11) -------------------------------------------
 *
 * One test per mutation that survived every other test; numbers worked out
 * by hand in each comment. Helpers under the mu27_ prefix; each test makes
 * and removes its own temporary directory (mu27_setup, mu27_teardown). */

#define mu27_MIB ((uint64_t)1 << 20)
#define mu27_KIB ((uint64_t)1 << 10)

/* This cmocka has no assert_double_equal. */
#define mu27_assert_near(a, b) mu27_near_((double)(a), (double)(b), #a, __FILE__, __LINE__)
static void mu27_near_(double a, double b, const char *what, const char *file, int line)
{
    if (!(a - b <= 1e-9 && b - a <= 1e-9)) {
        fprintf(stderr, "%s:%d: %s = %.12g, want %.12g\n", file, line, what, a, b);
        fail();
    }
}

static char mu27_dir[256];

static int mu27_setup(void **st)
{
    (void)st;
    snprintf(mu27_dir, sizeof mu27_dir, "/tmp/test_replay.mu27.XXXXXX");
    return mkdtemp(mu27_dir) ? 0 : -1;
}

static int mu27_teardown(void **st)
{
    (void)st;
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", mu27_dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* ---- building traces ------------------------------------------------------ */

typedef struct mu27_tb {
    char path[512];
    pst_writer_t *w;
    uint64_t t;
} mu27_tb_t;

static void mu27_tb_open(mu27_tb_t *b, const char *name)
{
    snprintf(b->path, sizeof b->path, "%s/%s", mu27_dir, name);
    int err = 0;
    pst_writer_cfg_t cfg = { .pid = 27, .exe = "/mutants27" };
    b->w = pst_writer_open(b->path, &cfg, &err);
    assert_non_null(b->w);
    b->t = 0;
}

static void mu27_tb_close(mu27_tb_t *b) { assert_int_equal(pst_writer_close(b->w), 0); }

static void mu27_tick(mu27_tb_t *b)
{
    b->t += 10;
    pst_writer_time(b->w, b->t);
}

/* a tensor of `bytes` bytes (a multiple of 4: f32 elements) */
static void mu27_acq(mu27_tb_t *b, uint64_t id, uint64_t bytes)
{
    assert_int_equal(bytes % 4, 0);
    mu27_tick(b);
    assert_int_equal(PST_EMIT(b->w, 1, PST_EV_TENSOR_ACQUIRE, id, 0, 0, bytes / 4, bytes), 0);
}

static void mu27_rel(mu27_tb_t *b, uint64_t id)
{
    mu27_tick(b);
    assert_int_equal(PST_EMIT(b->w, 1, PST_EV_TENSOR_RELEASE, id), 0);
}

static void mu27_mark(mu27_tb_t *b, int begin, const char *name, uint64_t inst)
{
    pst_event_t ev;
    memset(&ev, 0, sizeof ev);
    ev.type = begin ? PST_EV_MARK_BEGIN : PST_EV_MARK_END;
    ev.str = name;
    ev.f[1] = inst;
    mu27_tick(b);
    assert_int_equal(pst_writer_event(b->w, 1, &ev), 0);
}

static rp_report_t *mu27_replay(const char *path, const char *policies)
{
    rp_config_t cfg = rp_config_default();
    char msg[256];
    assert_int_equal(rp_policy_parse(policies, &cfg.policies, msg, sizeof msg), 0);
    rp_report_t *rep = NULL;
    int rc = rp_run(path, &cfg, &rep, msg, sizeof msg);
    if (rc) fprintf(stderr, "rp_run %s: %s\n", path, msg);
    assert_int_equal(rc, 0);
    assert_non_null(rep);
    return rep;
}

static const rp_result_t *mu27_get(const rp_report_t *r, rp_policy_t p)
{
    const rp_result_t *x = rp_report_find(r, p);
    assert_non_null(x);
    return x;
}

/* ---- caching: the 10 MiB boundary of the large pool's segments -------------- */

/* One tensor each (rule 1: rounded up to 512 B; all above 1 MiB: the large
 * pool; rule 4: a new segment, 20 MiB when the rounded size is under
 * 10 MiB, else the size rounded up to a multiple of 2 MiB; rule 5: split
 * when more than 1 MiB would be left):
 *
 *   10 MiB - 512 = 10485248 B: rounded 10485248 < 10 MiB: a 20971520
 *     segment; 10486272 left > 1 MiB: split. Reserved 20 MiB, outstanding
 *     10485248, 1 split, fragmentation 1 - 10485248 / 20971520.
 *   10 MiB = 10485760 B: rounded 10485760, not under 10 MiB: a segment of
 *     10485760 (already a multiple of 2 MiB); nothing left: no split.
 *     Reserved = outstanding = 10 MiB, fragmentation 0.
 *   10 MiB + 4 = 10485764 B: rounded 10486272: a 12582912 segment (6 x
 *     2 MiB); 2096640 left > 1 MiB: split. Reserved 12 MiB, outstanding
 *     10486272.
 * With "<= 10 MiB" for "< 10 MiB" the 10 MiB tensor would take 20 MiB;
 * with the boundary at 11 MiB it would too, at 9 MiB the first would take
 * 10 MiB. */
static void mu27_caching_one(const char *name, uint64_t bytes, uint64_t reserved, uint64_t outstanding,
                        uint64_t splits)
{
    mu27_tb_t b;
    mu27_tb_open(&b, name);
    mu27_acq(&b, 1, bytes);
    mu27_rel(&b, 1);
    mu27_tb_close(&b);
    rp_report_t *r = mu27_replay(b.path, "caching");
    const rp_result_t *c = mu27_get(r, RP_CACHING);
    if (c->m.peak_reserved_bytes != reserved)
        fprintf(stderr, "%llu B: reserved %llu, want %llu\n", (unsigned long long)bytes,
                (unsigned long long)c->m.peak_reserved_bytes, (unsigned long long)reserved);
    assert_int_equal(c->m.allocs, 1);
    assert_int_equal(c->m.peak_live_bytes, bytes);
    assert_int_equal(c->m.peak_reserved_bytes, reserved);
    assert_int_equal(c->m.peak_outstanding_bytes, outstanding);
    assert_int_equal(c->segments_allocated, 1);
    assert_int_equal(c->splits, splits);
    mu27_assert_near(c->fragmentation, 1.0 - (double)outstanding / (double)reserved);
    rp_report_free(r);
}

static void test_caching_segment_below_10_mib_is_20_mib(void **st)
{
    (void)st;
    mu27_caching_one("ca_below.pst", 10 * mu27_MIB - 512, 20 * mu27_MIB, 10 * mu27_MIB - 512, 1);
}

static void test_caching_segment_at_10_mib_is_its_size(void **st)
{
    (void)st;
    mu27_caching_one("ca_at.pst", 10 * mu27_MIB, 10 * mu27_MIB, 10 * mu27_MIB, 0);
}

static void test_caching_segment_above_10_mib_rounds_to_2_mib(void **st)
{
    (void)st;
    mu27_caching_one("ca_above.pst", 10 * mu27_MIB + 4, 12 * mu27_MIB, 10 * mu27_MIB + 512, 1);
}

/* ---- arena: resets with pinned chunks ---------------------------------------- */

/* Every chunk pinned. 600 KiB = 614400 B (a multiple of 64).
 *   forward 0: A 600 KiB in chunk c1 (1 MiB, 434176 left); B 600 KiB does
 *     not fit: c2, twice c1, 2 MiB. A and B outlive the forward: at the
 *     reset both are violations (1228800 B), both chunks pinned (3 MiB
 *     pinned at once), none is free: the next chunk gets the size the
 *     merge would have had, 1 + 2 = 3 MiB.
 *   forward 1: C 600 KiB: a new chunk c3 of 3 MiB; reserved 1 + 2 + 3 =
 *     6 MiB (the peak). C dies inside; the reset rewinds c3.
 *   A dies: c1 goes back; B dies: c2 goes back (3 MiB left).
 * Chunks 3, backing allocs 3, frees 2, pinned 2, peak pinned 3 MiB.
 * Were the cycle's size not kept for the next chunk (or only the first
 * chunk's counted), c3 would be 1 MiB and the peak 4 MiB. */
static void test_arena_every_chunk_pinned_next_chunk_takes_the_cycle(void **st)
{
    (void)st;
    mu27_tb_t b;
    mu27_tb_open(&b, "arena_all_pinned.pst");
    mu27_mark(&b, 1, "forward", 0);
    mu27_acq(&b, 1, 600 * mu27_KIB);    /* A */
    mu27_acq(&b, 2, 600 * mu27_KIB);    /* B */
    mu27_mark(&b, 0, "forward", 0);
    mu27_mark(&b, 1, "forward", 1);
    mu27_acq(&b, 3, 600 * mu27_KIB);    /* C */
    mu27_rel(&b, 3);
    mu27_mark(&b, 0, "forward", 1);
    mu27_rel(&b, 1);
    mu27_rel(&b, 2);
    mu27_tb_close(&b);
    rp_report_t *r = mu27_replay(b.path, "arena");
    const rp_result_t *a = mu27_get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->lifetime_violations, 2);
    assert_int_equal(a->violation_bytes, 2 * 600 * mu27_KIB);
    assert_int_equal(a->pinned_chunks, 2);
    assert_int_equal(a->peak_pinned_bytes, 3 * mu27_MIB);
    assert_int_equal(a->chunks_allocated, 3);
    assert_int_equal(a->m.backing_allocs, 3);
    assert_int_equal(a->m.backing_frees, 2);
    assert_int_equal(a->m.peak_reserved_bytes, 6 * mu27_MIB);
    assert_int_equal(a->longlived_objects, 0);
    rp_report_free(r);
}

/* Every chunk past the first pinned.
 *   forward 0: A 600 KiB in c1 (1 MiB); B 600 KiB: c2 (2 MiB, 1482752
 *     left); C 1.5 MiB = 1572864 B does not fit: c3 (4 MiB). A dies inside.
 *     At the reset B and C are violations (614400 + 1572864 = 2187264 B),
 *     c2 and c3 pinned (6 MiB at once); c1, the only free chunk, is
 *     rewound and kept.
 *   forward 1: D 600 KiB in c1 at offset 0 (A's address): no new chunk.
 *   B dies: c2 goes back; C dies: c3 goes back.
 * Reserved peak 1 + 2 + 4 = 7 MiB; 3 chunks, 2 given back; addresses
 * A, B, C fresh, D A's: fresh ratio 3/4; held at once: A, B, C = 3. */
static void test_arena_chunks_past_the_first_pinned_first_is_rewound(void **st)
{
    (void)st;
    mu27_tb_t b;
    mu27_tb_open(&b, "arena_past_first_pinned.pst");
    mu27_mark(&b, 1, "forward", 0);
    mu27_acq(&b, 1, 600 * mu27_KIB);    /* A */
    mu27_acq(&b, 2, 600 * mu27_KIB);    /* B */
    mu27_acq(&b, 3, 1536 * mu27_KIB);   /* C */
    mu27_rel(&b, 1);
    mu27_mark(&b, 0, "forward", 0);
    mu27_mark(&b, 1, "forward", 1);
    mu27_acq(&b, 4, 600 * mu27_KIB);    /* D */
    mu27_rel(&b, 4);
    mu27_mark(&b, 0, "forward", 1);
    mu27_rel(&b, 2);
    mu27_rel(&b, 3);
    mu27_tb_close(&b);
    rp_report_t *r = mu27_replay(b.path, "arena");
    const rp_result_t *a = mu27_get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->lifetime_violations, 2);
    assert_int_equal(a->violation_bytes, 600 * mu27_KIB + 1536 * mu27_KIB);
    assert_int_equal(a->pinned_chunks, 2);
    assert_int_equal(a->peak_pinned_bytes, 6 * mu27_MIB);
    assert_int_equal(a->chunks_allocated, 3);
    assert_int_equal(a->m.backing_allocs, 3);
    assert_int_equal(a->m.backing_frees, 2);
    assert_int_equal(a->m.peak_reserved_bytes, 7 * mu27_MIB);
    assert_int_equal(a->peak_outstanding_buffers, 3);
    mu27_assert_near(a->m.fresh_address_ratio, 3.0 / 4.0);
    rp_report_free(r);
}

/* Only the first chunk pinned.
 *   forward 0: A, B, C as above in c1, c2, c3 (7 MiB); B and C die
 *     inside. At the reset A is the one violation (614400 B), c1 pinned
 *     (1 MiB); c2 and c3 are free and merged into one chunk c4 of 6 MiB
 *     (2 frees, 1 alloc): 1 + 6 = 7 MiB.
 *   forward 1: D 600 KiB in c4: no new chunk.
 *   A dies: c1 goes back (6 MiB left).
 * Reserved peak 7 MiB; 4 chunks allocated, 3 given back; every address
 * fresh (c1, c2, c3, c4 at offset 0). Had the walk over the cycle stopped
 * at the pinned chunk, c2 and c3 would be neither merged nor given back
 * and D would take a chunk of its own (8 MiB). */
static void test_arena_only_first_chunk_pinned_rest_merged(void **st)
{
    (void)st;
    mu27_tb_t b;
    mu27_tb_open(&b, "arena_first_pinned.pst");
    mu27_mark(&b, 1, "forward", 0);
    mu27_acq(&b, 1, 600 * mu27_KIB);    /* A */
    mu27_acq(&b, 2, 600 * mu27_KIB);    /* B */
    mu27_acq(&b, 3, 1536 * mu27_KIB);   /* C */
    mu27_rel(&b, 2);
    mu27_rel(&b, 3);
    mu27_mark(&b, 0, "forward", 0);
    mu27_mark(&b, 1, "forward", 1);
    mu27_acq(&b, 4, 600 * mu27_KIB);    /* D */
    mu27_rel(&b, 4);
    mu27_mark(&b, 0, "forward", 1);
    mu27_rel(&b, 1);
    mu27_tb_close(&b);
    rp_report_t *r = mu27_replay(b.path, "arena");
    const rp_result_t *a = mu27_get(r, RP_ARENA);
    assert_int_equal(a->resets, 2);
    assert_int_equal(a->lifetime_violations, 1);
    assert_int_equal(a->violation_bytes, 600 * mu27_KIB);
    assert_int_equal(a->pinned_chunks, 1);
    assert_int_equal(a->peak_pinned_bytes, mu27_MIB);
    assert_int_equal(a->chunks_allocated, 4);
    assert_int_equal(a->m.backing_allocs, 4);
    assert_int_equal(a->m.backing_frees, 3);
    assert_int_equal(a->m.peak_reserved_bytes, 7 * mu27_MIB);
    mu27_assert_near(a->m.fresh_address_ratio, 1.0);
    rp_report_free(r);
}

int main(void)
{
    use_built_malloc_helper();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_list_parses_names_and_refuses_unknown),
        cmocka_unit_test(test_pool_small_sequence_exact),
        cmocka_unit_test(test_pool_cap_destroys_over_the_cap),
        cmocka_unit_test(test_pool_takes_cap_from_trace),
        cmocka_unit_test(test_arena_chunks_double_and_merge),
        cmocka_unit_test(test_arena_lifetime_violation_pins_chunk),
        cmocka_unit_test(test_arena_with_kv_blocks_are_violations),
        cmocka_unit_test(test_arena_objects_outside_scopes_are_long_lived),
        cmocka_unit_test(test_arena_long_lived_chunk_goes_back_when_dead),
        cmocka_unit_test(test_arena_reset_marker_missing_warns_or_fails),
        cmocka_unit_test(test_pool_heap_stream_splits_at_the_threshold),
        cmocka_unit_test(test_caching_and_pool_take_the_same_heap_requests),
        cmocka_unit_test(test_pool_sites_match_the_site_or_a_wrapper),
        cmocka_unit_test(test_caching_rules_by_hand),
        cmocka_unit_test(test_caching_segment_sizes),
        cmocka_unit_test(test_seed_chain_pool_two_arena_sixteen),
        cmocka_unit_test(test_kv_policies_exact),
        cmocka_unit_test(test_kv_step_grows_in_steps_of_kv_step),
        cmocka_unit_test(test_kv_policies_same_with_batches_of_one),
        cmocka_unit_test(test_acquire_again_frees_the_old_object),
        cmocka_unit_test(test_heap_stream_and_ideal_matches_report),
        cmocka_unit_test(test_same_trace_same_numbers),
        cmocka_unit_test(test_stream_slots_follow_live_set),
        cmocka_unit_test(test_bad_input_is_refused_with_a_reason),
        cmocka_unit_test(test_policy_select_sets_are_optional_names_required),
        cmocka_unit_test(test_all_on_heap_trace_skips_each_kv_policy_with_reason),
        cmocka_unit_test(test_named_policy_that_does_not_apply_is_an_error),
        cmocka_unit_test(test_kv_without_request_markers_skips_only_kv_contiguous),
        cmocka_unit_test(test_all_on_full_trace_runs_every_policy),
        cmocka_unit_test(test_malloc_variants_side_by_side),
        cmocka_unit_test(test_malloc_without_helper_skipped_from_all),   /* last: it changes the environment */
        cmocka_unit_test_setup_teardown(test_arena_bumps_small_objects_in_64_byte_steps, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_arena_first_chunk_holds_16384_one_byte_objects, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_replay_kv_free_takes_tokens_out_of_the_request, mu_setup, mu_teardown),
        cmocka_unit_test_setup_teardown(test_caching_segment_below_10_mib_is_20_mib, mu27_setup, mu27_teardown),
        cmocka_unit_test_setup_teardown(test_caching_segment_at_10_mib_is_its_size, mu27_setup, mu27_teardown),
        cmocka_unit_test_setup_teardown(test_caching_segment_above_10_mib_rounds_to_2_mib, mu27_setup, mu27_teardown),
        cmocka_unit_test_setup_teardown(test_arena_every_chunk_pinned_next_chunk_takes_the_cycle, mu27_setup, mu27_teardown),
        cmocka_unit_test_setup_teardown(test_arena_chunks_past_the_first_pinned_first_is_rewound, mu27_setup, mu27_teardown),
        cmocka_unit_test_setup_teardown(test_arena_only_first_chunk_pinned_rest_merged, mu27_setup, mu27_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
