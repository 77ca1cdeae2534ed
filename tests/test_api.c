/* test_api.c — the client side of the event API (libtrace/api.c) and the
 * pool adapter (libtrace/pool_adapter.c).
 *
 * Without the preload library ps__api must be NULL and every helper a
 * no-op. With a table installed (here a fake one that records what it is
 * given) the helpers and the adapter must hand the tracer events whose
 * fields follow the layouts of format.h. Finding the real table in PIE and
 * non-PIE programs is tested under the preload by record_api.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "poolscope/blockpool.h"
#include "poolscope/bufpool.h"
#include "poolscope/format.h"
#include "poolscope/pool_adapter.h"
#include "poolscope/poolscope.h"

int ps__api_usable(const ps_api_t *t);
int ps__api_resolve(void);

/* ---- a fake tracer ------------------------------------------------------ */

#define MAX_SEEN 4096
typedef struct seen {
    ps_event_t ev;
    char name[64];
    uint32_t ids[64];
    int64_t payload[PST_MAX_PAYLOAD];
} seen_t;
static seen_t seen[MAX_SEEN];
static int n_seen;
static int enabled_flag = 1;

static void fake_emit(const ps_event_t *ev)
{
    if (n_seen >= MAX_SEEN) return;
    seen_t *s = &seen[n_seen++];
    s->ev = *ev;
    s->name[0] = 0;
    if (ev->name) snprintf(s->name, sizeof s->name, "%s", ev->name);
    for (uint32_t i = 0; i < ev->n_ids && i < 64; i++) s->ids[i] = ev->ids[i];
    for (uint32_t i = 0; i < ev->n_payload && i < PST_MAX_PAYLOAD; i++) s->payload[i] = ev->payload[i];
}
static void fake_enable(int on) { enabled_flag = on; }
static int fake_enabled(void) { return enabled_flag; }
static int flushes;
static int fake_flush(void) { flushes++; return 0; }

static const ps_api_t fake = { PS_API_VERSION, sizeof(ps_api_t), fake_emit, fake_enable, fake_enabled, fake_flush, NULL };

static int install_fake(void **state)
{
    (void)state;
    ps__api = &fake;
    n_seen = 0;
    return 0;
}
static int remove_fake(void **state)
{
    (void)state;
    ps__api = NULL;
    return 0;
}

static int count_type(uint32_t type)
{
    int n = 0;
    for (int i = 0; i < n_seen; i++) n += seen[i].ev.type == type;
    return n;
}

/* ---- without a tracer ---------------------------------------------------- */

static void test_without_preload_api_is_null_and_helpers_do_nothing(void **state)
{
    (void)state;
    assert_null(ps__api);            /* set by the constructor: no preload here */
    assert_int_equal(ps__api_resolve(), 0);
    assert_null(ps__api);
    assert_int_equal(ps_active(), 0);
    int64_t p[2] = { 1, 2 };
    n_seen = 0;
    ps_mark("x", p, 2);
    ps_begin("x", 1, p, 2);
    ps_end("x", 1);
    ps_tensor_acquire(1, 0, 0, 10, 40);
    ps_tensor_release(1);
    ps_thread_name("t");
    ps_trace_enable(0);
    assert_int_equal(ps_trace_flush(), -1);
    ps_event_t ev = { .type = PS_MARK_POINT, .name = "y" };
    ps_emit(&ev);
    assert_int_equal(n_seen, 0);
    assert_int_equal(enabled_flag, 1);
    assert_int_equal(flushes, 0);
}

/* A tracer that says which trace file it writes (poolscope_api.session). */
static uint64_t fake_trace = 1;
static uint64_t fake_session(void) { return fake_trace; }
static const ps_api_t fake_s = { PS_API_VERSION, sizeof(ps_api_t), fake_emit, fake_enable, fake_enabled,
                                 fake_flush, fake_session };

static int first_of(uint32_t type)
{
    for (int i = 0; i < n_seen; i++)
        if (seen[i].ev.type == type) return i;
    return -1;
}

/* Pools made before a tracer came (poolscope attach): silent until it
 * comes, then named at their first event in its trace, once per trace, a
 * pool of blocks with the blocks it has then; a pool the trace never named
 * gets no DESTROY. */
static void test_pools_made_before_the_tracer_are_named_at_their_first_event(void **state)
{
    (void)state;
    bp_config_t c = bp_config_default();
    c.name = "early";
    c = psa_bufpool_config(&c);
    uint64_t id = psa_bufpool_id(&c);
    assert_true(id > 0);
    bp_config_t q = bp_config_default();
    q.name = "quiet";
    q = psa_bufpool_config(&q);
    kvb_config_t k = kvb_config_default();
    k.block_size = 4;
    k.n_blocks = 4;
    k.separate_kv = false;
    k.grow_on_exhaustion = true;
    k.max_blocks = 64;
    k = psa_blockpool_config(&k, "earlykv");
    uint64_t kid = psa_blockpool_id(&k);
    int err = 0;
    bp_pool_t *p = bp_create(&c, &err), *pq = bp_create(&q, &err);
    kvb_pool_t *kp = kvb_create(&k, &err);
    assert_non_null(p);
    assert_non_null(pq);
    assert_non_null(kp);
    bp_buf_t *held = bp_acquire(p, 1000, &err);          /* before the tracer */
    int32_t ids[32];
    assert_int_equal(kvb_allocate(kp, KVB_STREAM_KV, 40, 7, KVB_FMT_F32, ids, 32), 10);   /* grows past 4 */
    kvb_stats_t ks;
    assert_int_equal(kvb_stats(kp, &ks), 0);
    assert_true(ks.n_blocks > 4);

    n_seen = 0;
    fake_trace = 1;
    ps__api = &fake_s;                                    /* the attach */
    assert_int_equal(bp_release(held), 1);
    bp_buf_t *b = bp_acquire(p, 1000, &err);
    assert_int_equal(bp_release(b), 1);
    assert_int_equal(count_type(PST_EV_POOL_CREATE), 1);
    assert_int_equal(first_of(PST_EV_POOL_CREATE), 0);   /* before the pool's first event */
    assert_string_equal(seen[0].name, "early");
    assert_int_equal(seen[0].ev.f[0], id);
    assert_int_equal(count_type(PST_EV_POOL_ACQUIRE), 1);
    assert_int_equal(kvb_free_all(kp, 7), 10);
    int kc = first_of(PST_EV_KVB_CREATE);
    assert_true(kc >= 0 && kc < first_of(PST_EV_KVB_FREE));
    assert_string_equal(seen[kc].name, "earlykv");
    assert_int_equal(seen[kc].ev.f[0], kid);
    assert_int_equal(seen[kc].ev.f[3], (uint64_t)ks.n_blocks);   /* the blocks it has now */

    fake_trace = 2;                                       /* a second attach: a new file */
    int before = n_seen;
    b = bp_acquire(p, 1000, &err);
    assert_int_equal(bp_release(b), 1);
    assert_int_equal(seen[before].ev.type, PST_EV_POOL_CREATE);
    assert_int_equal(count_type(PST_EV_POOL_CREATE), 2);

    enabled_flag = 0;                                     /* paused: named when it resumes */
    fake_trace = 3;
    before = n_seen;
    b = bp_acquire(p, 1000, &err);
    assert_int_equal(bp_release(b), 1);
    enabled_flag = 1;
    int32_t one[1];
    assert_int_equal(kvb_allocate(kp, KVB_STREAM_KV, 4, 1, KVB_FMT_F32, one, 1), 1);
    b = bp_acquire(p, 1000, &err);
    assert_int_equal(bp_release(b), 1);
    assert_int_equal(count_type(PST_EV_POOL_CREATE), 3);
    assert_int_equal(count_type(PST_EV_KVB_CREATE), 2);
    (void)before;

    assert_int_equal(bp_destroy(p), 0);
    psa_bufpool_destroyed(&c);
    assert_int_equal(bp_destroy(pq), 0);
    psa_bufpool_destroyed(&q);                            /* never named in this trace */
    kvb_destroy(kp);
    psa_blockpool_destroyed(&k);
    assert_int_equal(count_type(PST_EV_POOL_DESTROY), 1);
    assert_int_equal(seen[first_of(PST_EV_POOL_DESTROY)].ev.f[0], id);
    assert_int_equal(count_type(PST_EV_KVB_DESTROY), 1);
    ps__api = NULL;
}

static void test_table_with_wrong_version_or_size_is_refused(void **state)
{
    (void)state;
    ps_api_t t = fake;
    assert_true(ps__api_usable(&t));
    t.version = PS_API_VERSION + 1;
    assert_false(ps__api_usable(&t));
    t = fake;
    t.size = sizeof(ps_api_t) - 1;
    assert_false(ps__api_usable(&t));
    t = fake;
    t.size = sizeof(ps_api_t) + 64;  /* a newer, larger tracer table is fine */
    assert_true(ps__api_usable(&t));
    t = fake;
    t.emit = NULL;
    assert_false(ps__api_usable(&t));
    assert_false(ps__api_usable(NULL));
}

/* ---- helpers with a tracer ---------------------------------------------- */

static void test_helpers_emit_events_in_format_layouts(void **state)
{
    (void)state;
    int64_t p[3] = { 7, -8, 9 };
    ps_mark("decode", p, 3);
    ps_begin("request", 42, p, 2);
    ps_end("request", 42);
    ps_tensor_acquire(5, 1, 2, 100, 200);
    ps_tensor_release(5);
    ps_thread_name("worker");
    ps_trace_enable(0);
    assert_int_equal(enabled_flag, 0);
    ps_trace_enable(1);
    assert_int_equal(ps_trace_flush(), 0);
    assert_int_equal(flushes, 1);
    assert_int_equal(n_seen, 6);

    assert_int_equal(seen[0].ev.type, PST_EV_MARK_POINT);
    assert_string_equal(seen[0].name, "decode");
    assert_int_equal(seen[0].ev.n_payload, 3);
    assert_int_equal(seen[0].payload[1], -8);

    assert_int_equal(seen[1].ev.type, PST_EV_MARK_BEGIN);
    assert_string_equal(pst_event_layout(PST_EV_MARK_BEGIN), "SuP");
    assert_int_equal(seen[1].ev.f[1], 42);           /* instance id after the S field */
    assert_int_equal(seen[1].ev.n_payload, 2);

    assert_int_equal(seen[2].ev.type, PST_EV_MARK_END);
    assert_int_equal(seen[2].ev.f[1], 42);

    assert_int_equal(seen[3].ev.type, PST_EV_TENSOR_ACQUIRE);
    assert_int_equal(seen[3].ev.n_fields, strlen(pst_event_layout(PST_EV_TENSOR_ACQUIRE)));
    assert_int_equal(seen[3].ev.f[0], 5);
    assert_int_equal(seen[3].ev.f[4], 200);
    assert_int_equal(seen[4].ev.type, PST_EV_TENSOR_RELEASE);
    assert_int_equal(seen[5].ev.type, PST_EV_THREAD_NAME);
    assert_string_equal(seen[5].name, "worker");
}

/* ---- the pool adapter --------------------------------------------------- */

static void test_bufpool_events_rebuild_pool_stats(void **state)
{
    (void)state;
    bp_config_t c = bp_config_default();
    c.name = "acts";
    c.max_cached_bytes = 8192;
    c = psa_bufpool_config(&c);
    uint64_t id = psa_bufpool_id(&c);
    assert_true(id > 0);
    assert_int_equal(n_seen, 1);
    assert_int_equal(seen[0].ev.type, PST_EV_POOL_CREATE);
    assert_string_equal(seen[0].name, "acts");
    assert_int_equal(seen[0].ev.f[0], id);
    assert_int_equal(seen[0].ev.f[2], 3);            /* both arms */
    assert_int_equal(seen[0].ev.f[3], 8192);

    int err = 0;
    bp_pool_t *p = bp_create(&c, &err);
    assert_non_null(p);
    bp_buf_t *a = bp_acquire(p, 1000, &err);          /* miss */
    bp_buf_t *b = bp_acquire_scratch(p, 100000, &err); /* miss, over the cap on release */
    assert_int_equal(bp_release(a), 1);               /* cached */
    assert_int_equal(bp_release(b), 1);               /* destroyed */
    a = bp_acquire(p, 900, &err);                     /* hit */
    assert_int_equal(bp_release(a), 1);
    bp_stats_t st;
    assert_int_equal(bp_stats(p, &st), 0);
    assert_int_equal(bp_destroy(p), 0);
    psa_bufpool_destroyed(&c);

    assert_int_equal(count_type(PST_EV_POOL_ACQUIRE), (int)st.acquires);
    assert_int_equal(count_type(PST_EV_POOL_BACKING_ALLOC), (int)st.backing_allocs);
    assert_int_equal(count_type(PST_EV_POOL_RECLAIM), (int)(st.reclaims_cached + st.destroyed_over_cap));
    assert_int_equal(count_type(PST_EV_POOL_BACKING_FREE), (int)(st.backing_frees + st.cached_buffers));
    assert_int_equal(count_type(PST_EV_POOL_DESTROY), 1);
    assert_int_equal(seen[n_seen - 1].ev.type, PST_EV_POOL_DESTROY);
    assert_int_equal(seen[n_seen - 1].ev.f[0], id);

    uint64_t hits = 0, last_seq = 0;
    int first = 1;
    for (int i = 0; i < n_seen; i++) {
        const ps_event_t *e = &seen[i].ev;
        if (e->type == PST_EV_POOL_CREATE || e->type == PST_EV_POOL_DESTROY) continue;
        assert_int_equal(e->f[0], id);
        assert_int_equal(e->n_fields, strlen(pst_event_layout(e->type)));
        if (!first) assert_true(e->f[1] > last_seq); /* the pool's order */
        last_seq = e->f[1];
        first = 0;
        if (e->type == PST_EV_POOL_ACQUIRE) hits += e->f[8];
        if (e->type == PST_EV_POOL_BACKING_ALLOC) assert_true(e->f[2] != 0);
    }
    assert_int_equal(hits, st.hits);
}

static void test_each_pool_gets_its_own_id(void **state)
{
    (void)state;
    bp_config_t c = bp_config_default();
    bp_config_t a = psa_bufpool_config(&c), b = psa_bufpool_config(&c);
    kvb_config_t k = kvb_config_default();
    kvb_config_t ka = psa_blockpool_config(&k, NULL);
    assert_true(psa_bufpool_id(&a) != psa_bufpool_id(&b));
    assert_true(psa_blockpool_id(&ka) != psa_bufpool_id(&a));
    assert_true(psa_blockpool_id(&ka) != psa_bufpool_id(&b));
    assert_string_equal(seen[0].name, "bufpool");   /* default names */
    assert_string_equal(seen[2].name, "kvb");
}

static void test_blockpool_events_follow_layouts(void **state)
{
    (void)state;
    kvb_config_t k = kvb_config_default();
    k.block_size = 16;
    k.n_blocks = 8;
    k.separate_kv = false;
    k.grow_on_exhaustion = true;
    k.max_blocks = 16;
    k.row_elems = 64;
    k = psa_blockpool_config(&k, "kv");
    uint64_t id = psa_blockpool_id(&k);
    assert_int_equal(seen[0].ev.type, PST_EV_KVB_CREATE);
    assert_int_equal(seen[0].ev.n_fields, 8);
    assert_int_equal(seen[0].ev.f[2], 16);
    assert_int_equal(seen[0].ev.f[3], 8);
    assert_int_equal(seen[0].ev.f[4], 0);
    assert_int_equal(seen[0].ev.f[5], 1);
    assert_int_equal(seen[0].ev.f[6], 16);

    int err = 0;
    kvb_pool_t *p = kvb_create(&k, &err);
    assert_non_null(p);
    assert_int_equal(seen[0].ev.f[7], kvb_slot_bytes(p));
    int32_t ids[32];
    int n = kvb_allocate(p, KVB_STREAM_KV, 40, 3, KVB_FMT_F16, ids, 32);
    assert_int_equal(n, 3);
    assert_int_equal(kvb_set_used(p, ids[2], 5), 0);
    n = kvb_allocate(p, KVB_STREAM_KV, 100, 4, KVB_FMT_F32, ids, 32);   /* grows */
    assert_true(n > 0);
    assert_int_equal(kvb_free_all(p, 3), 3);
    kvb_stats_t st;
    assert_int_equal(kvb_stats(p, &st), 0);
    kvb_destroy(p);
    psa_blockpool_destroyed(&k);

    int64_t allocated = 0, freed = 0, grown = 0;
    int saw_tokens = 0, saw_owner = 0;
    for (int i = 0; i < n_seen; i++) {
        const ps_event_t *e = &seen[i].ev;
        assert_int_equal(e->f[0], id);
        if (e->type != PST_EV_KVB_CREATE && e->type != PST_EV_KVB_DESTROY)
            assert_int_equal(e->n_fields, strlen(pst_event_layout(e->type)));
        switch (e->type) {
        case PST_EV_KVB_ALLOC:
            allocated += e->n_ids;
            if (e->f[3] == 3) {
                assert_int_equal(e->f[4], KVB_FMT_F16);
                assert_int_equal(e->f[5], 40);
                assert_int_equal(e->n_ids, 3);
            }
            break;
        case PST_EV_KVB_FREE: freed += e->n_ids; break;
        case PST_EV_KVB_GROW: grown += (int64_t)e->f[3]; break;
        case PST_EV_KVB_TOKENS: saw_tokens += e->f[3] == 5; break;
        case PST_EV_KVB_OWNER: saw_owner++; break;
        default: break;
        }
    }
    assert_int_equal(allocated, st.n_allocations);
    assert_int_equal(freed, st.n_frees);
    assert_int_equal(grown, st.n_grown);
    assert_true(saw_tokens >= 1);
    assert_true(saw_owner >= 2);   /* register 3 and 4, release 3 */
    assert_int_equal(seen[n_seen - 1].ev.type, PST_EV_KVB_DESTROY);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_without_preload_api_is_null_and_helpers_do_nothing),
        cmocka_unit_test(test_pools_made_before_the_tracer_are_named_at_their_first_event),
        cmocka_unit_test(test_table_with_wrong_version_or_size_is_refused),
        cmocka_unit_test_setup_teardown(test_helpers_emit_events_in_format_layouts, install_fake, remove_fake),
        cmocka_unit_test_setup_teardown(test_bufpool_events_rebuild_pool_stats, install_fake, remove_fake),
        cmocka_unit_test_setup_teardown(test_each_pool_gets_its_own_id, install_fake, remove_fake),
        cmocka_unit_test_setup_teardown(test_blockpool_events_follow_layouts, install_fake, remove_fake),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
