/* test_reader_wait.c — how long the reader reads on for the free an
 * allocation waits for, in a trace whose times are not causal (minor 1):
 * the SYNC chunks bound it (FORMAT.md, "Reading: the merge order",
 * "Memory"); without them the window does, as before. And a free that
 * comes within that bound still goes first.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "poolscope/format.h"
#include "poolscope/error.h"
#include "poolscope/reader.h"
#include "poolscope/writer.h"

#include "trace_listing.h"
#include "rd_internal.h"   /* the merge's scan counters and limits (struct pst_reader) */

#define ROUNDS 200          /* flush rounds of 500 event pairs, 1 us apart: 0.2 s of trace */
#define LOST   0x900000     /* allocated by stream 2 while live from stream 1: its free never comes */

/* Stream 1 allocates LOST; stream 2 allocates it again early on (the free
 * between them was lost); then both churn their own addresses, flushed
 * with a SYNC (with_sync) or without, every 500 pairs. free_late_pairs > 0:
 * the free does come, from stream 1, that many pairs after the allocation
 * (stamped before it, as a non-causal clock may). Returns the peak queue;
 * *free_first says whether the free came out before stream 2's allocation. */
static uint64_t lost_free_peak_queue(int with_sync, uint64_t free_late_pairs, int *free_first, uint64_t *unordered)
{
    membuf_t m;
    pst_writer_cfg_t cfg = { .pid = 7, .minor = 1 };
    pst_writer_t *w = mem_writer(&m, &cfg);
    pst_writer_time(w, 10);
    PST_EMIT(w, 1, PST_EV_MALLOC, LOST, 32);
    pst_writer_time(w, 20);
    PST_EMIT(w, 2, PST_EV_MALLOC, 0x500000, 16);
    pst_writer_flush(w);
    pst_writer_time(w, 1000);
    PST_EMIT(w, 2, PST_EV_MALLOC, LOST, 32);
    for (uint64_t i = 0; i < (uint64_t)ROUNDS * 500; i++) {
        if (free_late_pairs && i == free_late_pairs) {
            pst_writer_time(w, 900);
            PST_EMIT(w, 1, PST_EV_FREE, LOST);
        }
        pst_writer_time(w, 2000 + i * 1000);
        PST_EMIT(w, 1 + (unsigned)(i & 1), PST_EV_MALLOC, 0x100000 + (i & 1) * 0x10000 + (i % 64) * 64, 48);
        PST_EMIT(w, 1 + (unsigned)(i & 1), PST_EV_FREE, 0x100000 + (i & 1) * 0x10000 + (i % 64) * 64);
        if (i % 500 == 499) {
            if (with_sync) pst_writer_flush(w);
            else { pst_writer_flush_stream(w, 1); pst_writer_flush_stream(w, 2); }
        }
    }
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(&m);
    int err;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    pst_reader_set_window(r, 1000000000);      /* the default: 1 s, longer than the trace */
    pst_event_t ev;
    uint64_t n = 0;
    int seen_free = 0;
    *free_first = -1;
    while (pst_next(r, &ev) > 0) {
        if (ev.type == PST_EV_FREE && ev.f[0] == LOST) seen_free = 1;
        if (ev.type == PST_EV_MALLOC && ev.f[0] == LOST && ev.stream == 2) *free_first = seen_free;
        n++;
    }
    const pst_status_t *st = pst_status(r);
    assert_true(st->complete);
    assert_int_equal(n, 2 + 3 + (uint64_t)ROUNDS * 1000 + (free_late_pairs ? 1 : 0));   /* + THREAD_STARTs */
    *unordered = st->unordered;
    uint64_t peak = st->peak_queued;
    pst_close(r);
    free(m.p);
    return peak;
}

static void test_sync_chunks_end_the_wait_for_a_free_that_never_comes(void **state)
{
    (void)state;
    int ff;
    uint64_t un;
    uint64_t without = lost_free_peak_queue(0, 0, &ff, &un);
    assert_true(without >= (uint64_t)ROUNDS * 1000 - 2000);   /* control: the window alone, so the whole trace */
    assert_int_equal(ff, 0);
    assert_int_equal(un, 1);
    uint64_t with = lost_free_peak_queue(1, 0, &ff, &un);
    assert_true(with <= 4000);          /* the allocation's round and two more (1000 events each) */
    assert_int_equal(ff, 0);
    assert_int_equal(un, 1);
}

static void test_a_free_within_the_next_round_still_goes_first(void **state)
{
    (void)state;
    int ff;
    uint64_t un;
    lost_free_peak_queue(1, 300, &ff, &un);   /* the same round */
    assert_int_equal(ff, 1);
    assert_int_equal(un, 0);
    lost_free_peak_queue(1, 800, &ff, &un);   /* the round after */
    assert_int_equal(ff, 1);
    assert_int_equal(un, 0);
}

/* ---- late chunks in a trace with exact watermarks (issue 25, item 4) ----
 * A 64-thread program recorded on a loaded machine: the flush rounds (and
 * their SYNC chunks) came seconds apart, and a thread whose ring was not
 * full kept its events for over a second while busy threads drained
 * theirs. A busy thread's free of a block a starved thread allocated was
 * then older than the window before the allocation's chunk was read: the
 * 1.6 reader let it out (an unknown free, and a leak when the allocation
 * came), and every such event scanned all queues for what it waited for:
 * 172,338 leaked objects, 226,956 unknown frees, 865 s to read. */

#define LS_STREAMS 32
#define LS_SLOTS   8             /* blocks a stream holds */
#define LS_ADDRS   64            /* addresses a stream cycles through (its own 1 MiB region) */
#define LS_STEP_NS 20000         /* one operation every 20 us of trace time */
#define LS_STEPS   150000        /* 3 s of trace */
#define LS_ROUND_NS 1500000000ull   /* flush rounds (SYNC) 1.5 s apart: longer than the 1 s window */

typedef struct lsim {
    pst_writer_t *w;
    uint16_t ctr[1 << 16];       /* the writer's version counters (pst_vslot) */
    uint32_t lastw[1 << 16];     /* the stream that bumped each last */
    uint64_t mallocs, frees;
} lsim_t;

/* An event of one ordered address with the version the interposer would
 * give it: a VER record when another stream bumped the counter last. */
static void ls_emit(lsim_t *m, uint32_t stream, unsigned type, uint64_t addr, uint64_t size)
{
    uint32_t sl = pst_vslot(addr);
    uint16_t v = m->ctr[sl] = pst_vnext(m->ctr[sl]);
    pst_event_t ev = { .type = (uint8_t)type, .f = { addr, size }, .n_ver = m->lastw[sl] != stream, .ver = { v } };
    m->lastw[sl] = stream;
    assert_int_equal(pst_writer_event(m->w, stream, &ev), 0);
    if (type == PST_EV_FREE) m->frees++;
    else m->mallocs++;
}

/* Streams 1, 5, 9, ... are starved: their chunks come only with the flush
 * rounds (one at 50 ms, then every 1.5 s, as a starved flusher wrote
 * them); the others drain their own buffers every 10 ms. Every stream
 * allocates in its own region and hands a third of its blocks to the next
 * stream, which frees them (cross-stream frees, with VER records); at the
 * end everything is freed. */
static void late_chunk_trace(membuf_t *mb, uint64_t *mallocs, uint64_t *frees)
{
    lsim_t *m = calloc(1, sizeof *m);
    assert_non_null(m);
    pst_writer_cfg_t cfg = { .pid = 25, .tool = "test_reader_wait", .chunk_bytes = 1u << 20 };
    m->w = mem_writer(mb, &cfg);
    uint64_t slot[LS_STREAMS + 1][LS_SLOTS] = { { 0 } }, mbox[LS_STREAMS + 1] = { 0 };
    uint32_t gen[LS_STREAMS + 1] = { 0 }, ops[LS_STREAMS + 1] = { 0 };
    uint8_t live[LS_STREAMS + 1][LS_ADDRS] = { { 0 } };
    uint64_t next_round = 50000000;
    for (uint64_t i = 0; i < LS_STEPS; i++) {
        uint64_t now = 1000 + i * LS_STEP_NS;
        pst_writer_time(m->w, now);
        uint32_t s = (uint32_t)(i % LS_STREAMS) + 1, nx = s % LS_STREAMS + 1;
        if (mbox[s]) {                                  /* a block another stream handed over */
            uint64_t a = mbox[s];
            ls_emit(m, s, PST_EV_FREE, a, 0);
            uint32_t owner = (uint32_t)((a - 0x10000000) >> 20);
            live[owner][(a & 0xfffff) / 64] = 0;
            mbox[s] = 0;
        }
        unsigned j = ops[s]++ % LS_SLOTS;
        if (slot[s][j]) {
            uint64_t a = slot[s][j];
            if (ops[s] % 3 == 0 && !mbox[nx]) {
                mbox[nx] = a;                           /* handed over: nx frees it */
            } else {
                ls_emit(m, s, PST_EV_FREE, a, 0);
                live[s][(a & 0xfffff) / 64] = 0;
            }
        }
        unsigned k;
        do k = gen[s]++ % LS_ADDRS; while (live[s][k]);
        uint64_t a = 0x10000000 + (uint64_t)s * 0x100000 + (uint64_t)k * 64;
        live[s][k] = 1;
        slot[s][j] = a;
        ls_emit(m, s, PST_EV_MALLOC, a, 32 + (i % 7) * 16);
        if (i % 500 == 499)                             /* 10 ms: the busy streams drain themselves */
            for (uint32_t b = 1; b <= LS_STREAMS; b++)
                if (b % 4 != 1) pst_writer_flush_stream(m->w, b);
        if (now >= next_round) {                        /* a flush round: every stream, then SYNC */
            pst_writer_flush(m->w);
            next_round = (next_round == 50000000 ? 0 : next_round) + LS_ROUND_NS;
        }
    }
    pst_writer_time(m->w, 1000 + (uint64_t)LS_STEPS * LS_STEP_NS);
    for (uint32_t s = 1; s <= LS_STREAMS; s++) {        /* the end: everything freed */
        if (mbox[s]) ls_emit(m, s, PST_EV_FREE, mbox[s], 0);
        for (unsigned j = 0; j < LS_SLOTS; j++)
            if (slot[s][j]) ls_emit(m, s, PST_EV_FREE, slot[s][j], 0);
    }
    assert_int_equal(pst_writer_close(m->w), 0);
    mem_done(mb);
    *mallocs = m->mallocs;
    *frees = m->frees;
    free(m);
}

/* Read the trace; every free must find its address live and every malloc
 * its address free, in the reader's order. Returns the events read. */
static uint64_t read_checking_order(pst_reader_t *r, uint64_t *mallocs, uint64_t *frees, uint64_t *misordered)
{
    uint8_t *live = calloc(LS_STREAMS + 1, LS_ADDRS);
    assert_non_null(live);
    pst_event_t ev;
    uint64_t n = 0;
    *mallocs = *frees = *misordered = 0;
    while (pst_next(r, &ev) > 0) {
        n++;
        if (ev.type != PST_EV_MALLOC && ev.type != PST_EV_FREE) continue;
        uint64_t a = ev.f[0] - 0x10000000;
        uint8_t *l = &live[(a >> 20) * LS_ADDRS + (a & 0xfffff) / 64];
        if (ev.type == PST_EV_MALLOC) { *misordered += *l; *l = 1; (*mallocs)++; }
        else { *misordered += !*l; *l = 0; (*frees)++; }
    }
    free(live);
    return n;
}

static void test_late_chunks_of_starved_streams_read_in_order_with_bounded_work(void **state)
{
    (void)state;
    membuf_t mb;
    uint64_t want_m, want_f;
    late_chunk_trace(&mb, &want_m, &want_f);
    assert_int_equal(want_m, want_f);                   /* the program freed everything */
    int err = 0;
    pst_reader_t *r = pst_open_mem(mb.p, mb.len, &err);
    assert_non_null(r);                                 /* the default window: 1 s */
    uint64_t got_m, got_f, bad;
    uint64_t n = read_checking_order(r, &got_m, &got_f, &bad);
    const pst_status_t *st = pst_status(r);
    print_message("events %llu, queued at most %llu, scans %llu decoding %llu records (%.2f per event), "
                  "unknown frees %llu, live at the end %llu, misordered %llu\n",
                  (unsigned long long)n, (unsigned long long)st->peak_queued, (unsigned long long)r->scans,
                  (unsigned long long)r->scan_steps, (double)r->scan_steps / (double)n,
                  (unsigned long long)st->unknown_frees, (unsigned long long)st->live, (unsigned long long)bad);
    assert_true(st->complete);
    assert_int_equal(got_m, want_m);
    assert_int_equal(got_f, want_f);
    assert_int_equal(bad, 0);                           /* no free before its allocation, no double allocation */
    assert_int_equal(st->unknown_frees, 0);
    assert_int_equal(st->live, 0);                      /* nothing leaked */
    assert_int_equal(st->unordered, 0);
    assert_int_equal(st->ver_gaps, 0);
    assert_int_equal(r->guard_early, 0);                /* the memory guard was not needed */
    assert_int_equal(r->scans_cut, 0);
    /* the merge's look-ups in other queues: a few records per event (a
     * scan per waiting event through the whole queue was ~1,000) */
    assert_true(r->scan_steps <= 4 * n);
    pst_close(r);
    free(mb.p);
}

/* The memory guard: with sync_guard lowered below what the trace needs
 * queued, the window lets events out before the watermark again, and the
 * versions they then go ahead of are counted (unordered), not hidden. */
static void test_the_queue_guard_says_when_it_let_events_out_early(void **state)
{
    (void)state;
    membuf_t mb;
    uint64_t want_m, want_f;
    late_chunk_trace(&mb, &want_m, &want_f);
    int err = 0;
    pst_reader_t *r = pst_open_mem(mb.p, mb.len, &err);
    assert_non_null(r);
    r->sync_guard = 1000;
    uint64_t got_m, got_f, bad;
    uint64_t n = read_checking_order(r, &got_m, &got_f, &bad);
    const pst_status_t *st = pst_status(r);
    print_message("guard 1000: events %llu, early %llu, unordered %llu, unknown frees %llu, misordered %llu\n",
                  (unsigned long long)n, (unsigned long long)r->guard_early, (unsigned long long)st->unordered,
                  (unsigned long long)st->unknown_frees, (unsigned long long)bad);
    assert_int_equal(got_m, want_m);                    /* every event still comes out */
    assert_int_equal(got_f, want_f);
    assert_true(r->guard_early > 0);
    assert_true(st->unknown_frees > 0);                 /* the wrong figures it risks ... */
    assert_true(st->unordered >= st->unknown_frees);    /* ... each said */
    pst_close(r);
    free(mb.p);
}

/* Scans bounded: allocations of live addresses whose frees were lost, with
 * a version ahead of the slot, look through everything queued (the lost
 * free could be a realloc's old block, stamped late); with the whole trace
 * queued that is the queue per such event. Together the scans decode at
 * most scan_base + scan_per_event records per event read; a scan cut short
 * is counted. */
static void test_scans_of_other_queues_stay_within_their_budget(void **state)
{
    (void)state;
    enum { CHURN = 20000, LOSTN = 100 };
    membuf_t mb;
    pst_writer_cfg_t cfg = { .pid = 26, .tool = "test_reader_wait", .chunk_bytes = 1u << 20 };
    pst_writer_t *w = mem_writer(&mb, &cfg);
    lsim_t *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->w = w;
    uint64_t t = 1000;
    for (unsigned k = 0; k < LOSTN; k++) {              /* stream 1 allocates; the free is lost */
        pst_writer_time(w, t += 10);
        uint64_t a = 0x20000000 + (uint64_t)k * 64;
        ls_emit(m, 1, PST_EV_MALLOC, a, 32);
        m->ctr[pst_vslot(a)] = pst_vnext(m->ctr[pst_vslot(a)]);   /* its free's version, never written */
    }
    for (unsigned k = 0; k < LOSTN; k++) {              /* stream 2 allocates them again */
        pst_writer_time(w, t += 10);
        ls_emit(m, 2, PST_EV_MALLOC, 0x20000000 + (uint64_t)k * 64, 32);
    }
    for (unsigned i = 0; i < CHURN; i++) {              /* then streams 3 and 4 churn their own blocks: queued */
        pst_writer_time(w, t += 10);
        uint32_t s = 3 + (i & 1);
        uint64_t a = 0x30000000 + (uint64_t)s * 0x100000 + (i / 2 % 16) * 64;
        ls_emit(m, s, PST_EV_MALLOC, a, 48);
        ls_emit(m, s, PST_EV_FREE, a, 0);
    }
    assert_int_equal(pst_writer_close(w), 0);           /* one SYNC, at the end: all of it queued */
    mem_done(&mb);
    free(m);
    for (int budget = 0; budget < 2; budget++) {
        int err = 0;
        pst_reader_t *r = pst_open_mem(mb.p, mb.len, &err);
        assert_non_null(r);
        if (budget) { r->scan_base = 0; r->scan_per_event = 8; }
        pst_event_t ev;
        uint64_t n = 0;
        while (pst_next(r, &ev) > 0) n++;
        const pst_status_t *st = pst_status(r);
        print_message("budget %s: events %llu, scans %llu decoding %llu records, cut %llu, unordered %llu\n",
                      budget ? "8 per event" : "default", (unsigned long long)n, (unsigned long long)r->scans,
                      (unsigned long long)r->scan_steps, (unsigned long long)r->scans_cut,
                      (unsigned long long)st->unordered);
        assert_true(st->complete);
        assert_int_equal(n, 2 * LOSTN + 2 * CHURN + 4);   /* + THREAD_STARTs */
        assert_true(r->scan_steps <= r->scan_base + r->scan_per_event * r->decoded);
        if (budget) {
            assert_true(r->scans_cut > 0);
            assert_true(st->unordered >= r->scans_cut);
        }
        pst_close(r);
    }
    free(mb.p);
}

int main(void)
{
    (void)trace_listing;   /* the shared helpers' listing is not needed here */
    (void)format_event;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_chunks_end_the_wait_for_a_free_that_never_comes),
        cmocka_unit_test(test_a_free_within_the_next_round_still_goes_first),
        cmocka_unit_test(test_late_chunks_of_starved_streams_read_in_order_with_bounded_work),
        cmocka_unit_test(test_the_queue_guard_says_when_it_let_events_out_early),
        cmocka_unit_test(test_scans_of_other_queues_stay_within_their_budget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
