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

int main(void)
{
    (void)trace_listing;   /* the shared helpers' listing is not needed here */
    (void)format_event;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_chunks_end_the_wait_for_a_free_that_never_comes),
        cmocka_unit_test(test_a_free_within_the_next_round_still_goes_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
