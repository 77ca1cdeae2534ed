/* test_reader.c — the writer and the streaming reader together: round trips
 * of synthetic multi-stream traces, damaged input (truncation at every byte,
 * every byte flipped, random bytes, wrong magic/version), unknown chunk
 * kinds, the merge order (time, causality, pool_seq), bounded memory, and
 * the golden trace in tests/golden/.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <malloc.h>
#include <cmocka.h>

#include "poolscope/format.h"
#include "poolscope/error.h"
#include "poolscope/reader.h"
#include "poolscope/writer.h"

/* ---- helpers ------------------------------------------------------------- */

#include "trace_listing.h"

static char *listing(const void *buf, size_t len, pst_status_t *st) { return trace_listing(buf, len, st, 0); }

static const pst_writer_cfg_t base_cfg = {
    .pid = 4242, .ppid = 1, .start_real_ns = 1700000000000000000ull, .start_mono_ns = 123456789,
    .stacks = PST_STACKS_FP, .depth = 32, .page_size = 4096, .exe = "/usr/bin/demo",
    .argv = (const char *const[]){ "demo", "--x", "", "y", NULL }, .tool = "test_reader", .host = "h",
    .minor = 1,   /* these tests craft times as minor-1 writers made them (not causal across streams) */
};

/* ---- round trip ---------------------------------------------------------- */

static void build_multi(membuf_t *m, uint32_t chunk_bytes)
{
    pst_writer_cfg_t cfg = base_cfg;
    cfg.chunk_bytes = chunk_bytes;
    pst_writer_t *w = mem_writer(m, &cfg);
    const uint64_t fr[3] = { 0x401234, 0x401000, 0x7f1234567890 };
    uint32_t st = pst_writer_stack(w, fr, 3);
    assert_int_equal(st, 1);
    assert_int_equal(pst_writer_stack(w, fr, 3), 1);          /* deduplicated */
    assert_int_equal(pst_writer_stack(w, fr, 2), 2);
    assert_int_equal(pst_writer_module(w, 1, 0x400000, 0x2000, "/usr/bin/demo",
                                       (const uint8_t *)"\x01\x02\x03", 3), 0);
    assert_int_equal(pst_writer_thread(w, 2, 5000, 1), 0);
    pst_writer_time(w, 1000);
    pst_event_t ev = { .type = PST_EV_MALLOC, .stack = st, .f = { 0x7f0000001000, 64 } };
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
    pst_writer_time(w, 1500);
    PST_EMIT(w, 2, PST_EV_CALLOC, 0x7f0000002000, 4, 8);
    pst_writer_time(w, 2000);
    uint32_t nm = pst_writer_string(w, "request");
    assert_int_equal(pst_writer_string(w, "request"), nm);
    int64_t pl[2] = { 128, -7 };
    pst_event_t mb = { .type = PST_EV_MARK_BEGIN, .f = { nm, 9 }, .payload = { 128, -7 }, .n_payload = 2 };
    (void)pl;
    assert_int_equal(pst_writer_event(w, 1, &mb), 0);
    pst_writer_time(w, 2500);
    uint32_t ids[3] = { 7, 8, 3 };
    pst_event_t ka = { .type = PST_EV_KVB_ALLOC, .f = { 1, 1, 0, (uint64_t)-1, 2, 48 }, .ids = ids, .n_ids = 3 };
    assert_int_equal(pst_writer_event(w, 2, &ka), 0);
    pst_writer_time(w, 3000);
    PST_EMIT(w, 1, PST_EV_FREE, 0x7f0000001000);
    pst_event_t tn = { .type = PST_EV_THREAD_NAME, .str = "worker" };   /* S from ev->str */
    assert_int_equal(pst_writer_event(w, 2, &tn), 0);
    PST_EMIT(w, 3, PST_EV_MMAP, 0x7f5000000000, 1 << 20, 3, 0x22, (uint64_t)-1, 0);
    PST_EMIT(w, 1, PST_EV_LOST, 5, PST_LOST_NOBUF);
    pst_writer_time(w, 4000);
    PST_EMIT(w, 1, PST_EV_MARK_END, nm, 9);
    PST_EMIT0(w, 2, PST_EV_THREAD_END);
    pst_writer_add_lost(w, 2);
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(m);
}

static const char multi_expected[] =
    "1 4242 0 1000 thread_start 4242 0\n"
    "1 4242 1 1000 malloc stack=1 0x7f0000001000 64\n"
    "2 5000 0 1500 thread_start 5000 1\n"
    "2 5000 1 1500 calloc 0x7f0000002000 4 8\n"
    "1 4242 2 2000 mark_begin \"request\" 9 (128,-7)\n"
    "2 5000 2 2500 kvb_alloc 1 1 0 -1 2 48 [7,8,3]\n"
    "1 4242 3 3000 free 0x7f0000001000\n"
    "1 4242 4 3000 lost 5 2\n"
    "2 5000 3 3000 thread_name \"worker\"\n"
    "3 4244 0 3000 thread_start 4244 0\n"
    "3 4244 1 3000 mmap 0x7f5000000000 1048576 3 34 -1 0\n"
    "1 4242 5 4000 mark_end \"request\" 9\n"
    "2 5000 4 4000 thread_end\n";

static void test_multi_stream_round_trip_gives_exact_events(void **state)
{
    (void)state;
    uint32_t sizes[] = { 0, 1, 24 };   /* one chunk per stream at close; a chunk per event; in between */
    for (size_t i = 0; i < 3; i++) {
        membuf_t m;
        build_multi(&m, sizes[i]);
        pst_status_t st;
        char *got = listing(m.p, m.len, &st);
        assert_string_equal(got, multi_expected);
        assert_true(st.complete);
        assert_int_equal(st.events, 13);
        assert_int_equal(st.end_events, 13);
        assert_int_equal(st.lost, 7);
        assert_int_equal(st.streams, 3);
        assert_int_equal(st.end_streams, 3);
        assert_int_equal(st.unordered + st.causal_reordered + st.pool_reordered + st.late, 0);
        assert_int_equal(st.queued, 0);
        free(got);
        free(m.p);
    }
}

static void test_header_strings_stacks_modules_are_readable(void **state)
{
    (void)state;
    membuf_t m;
    build_multi(&m, 0);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    const pst_header_t *h = pst_header(r);
    assert_int_equal(h->major, PST_MAJOR);
    assert_int_equal(h->pid, 4242);
    assert_int_equal(h->ppid, 1);
    assert_int_equal(h->start_real_ns, 1700000000000000000ull);
    assert_int_equal(h->start_mono_ns, 123456789);
    assert_int_equal(h->stacks, PST_STACKS_FP);
    assert_int_equal(h->depth, 32);
    assert_int_equal(h->parent_pid, 0);
    assert_int_equal(h->exec_gen, 0);
    assert_string_equal(h->exe, "/usr/bin/demo");
    assert_string_equal(h->tool, "test_reader");
    assert_int_equal(h->argc, 4);
    assert_string_equal(h->argv[0], "demo");
    assert_string_equal(h->argv[1], "--x");
    assert_string_equal(h->argv[2], "");
    assert_string_equal(h->argv[3], "y");
    assert_null(h->argv[4]);
    pst_event_t ev;
    while (pst_next(r, &ev) > 0) {}
    assert_string_equal(pst_string(r, 1), "request");
    assert_string_equal(pst_string(r, 2), "worker");
    assert_null(pst_string(r, 3));
    uint32_t depth = 0;
    const uint64_t *f = pst_stack(r, 1, &depth);
    assert_int_equal(depth, 3);
    assert_int_equal(f[0], 0x401234);
    assert_int_equal(f[2], 0x7f1234567890);
    assert_non_null(pst_stack(r, 2, &depth));
    assert_int_equal(depth, 2);
    assert_null(pst_stack(r, 9, &depth));
    size_t nm = 0;
    const pst_module_t *mods = pst_modules(r, &nm);
    assert_int_equal(nm, 1);
    assert_string_equal(mods[0].path, "/usr/bin/demo");
    assert_int_equal(mods[0].base, 0x400000);
    assert_int_equal(mods[0].size, 0x2000);
    assert_int_equal(mods[0].build_id_len, 3);
    assert_memory_equal(mods[0].build_id, "\x01\x02\x03", 3);
    assert_int_equal(mods[0].unload_ts, UINT64_MAX);
    pst_close(r);
    free(m.p);
}

/* Stacks that share their outer frames are kept once per distinct frame
 * path (a prefix tree, rd_chunk.c), not as one array each: 16,000 stacks of
 * 128 frames that differ only in the innermost one would hold 16 MB as
 * arrays; the reader's heap grows by less than 4 MB while reading them
 * (mallinfo2), and every stack reads back as written, alternating ids
 * (pst_stack's answer is rebuilt per call). */
static void test_shared_outer_frames_are_kept_once(void **state)
{
    (void)state;
    enum { N = 16000, D = PST_MAX_DEPTH };
    pst_writer_cfg_t cfg = base_cfg;
    cfg.depth = PST_MAX_DEPTH;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &cfg);
    static uint64_t fr[D];
    for (int k = 1; k < D; k++) fr[k] = 0x400000 + 16 * (uint64_t)k;
    for (int i = 0; i < N; i++) {
        fr[0] = 0x7f0000000000ull + 32 * (uint64_t)i;
        assert_int_equal(pst_writer_stack(w, fr, D), (uint32_t)i + 1);
    }
    pst_event_t ev = { .type = PST_EV_MALLOC, .stack = N, .f = { 0x7f0000001000, 8 } };
    pst_writer_time(w, 1000);
    assert_int_equal(pst_writer_event(w, 1, &ev), 0);
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    size_t before = mallinfo2().uordblks;
    while (pst_next(r, &ev) > 0) {}
    size_t grew = mallinfo2().uordblks - before;
    print_message("reader heap grew by %zu bytes for %d stacks of %d frames\n", grew, N, D);
    assert_true(grew < (4u << 20));
    assert_int_equal(pst_stack_count(r), N);
    for (int i = 0; i < N; i++) {
        uint32_t id = (uint32_t)(i % 2 ? i + 1 : N - i), depth = 0;   /* ids from both ends in turn */
        const uint64_t *f = pst_stack(r, id, &depth);
        assert_non_null(f);
        assert_int_equal(depth, D);
        assert_int_equal(f[0], 0x7f0000000000ull + 32 * (uint64_t)(id - 1));
        for (int k = 1; k < D; k++) assert_int_equal(f[k], 0x400000 + 16 * (uint64_t)k);
    }
    pst_close(r);
    free(m.p);
}

/* Minor 9: a stack that shares two or more outer frames with the stack
 * defined before it is written as its new inner frames and that stack's
 * id (STACK_TAIL). Stacks made from the one before (an outer part kept,
 * new inner frames; some wholly new, some a shorter outer part only, some
 * defined again), written at minor 9 and at minor 8 (every stack whole):
 * each id reads back as the frames given, in both files, and the minor-9
 * file is the smaller by the frames shared (a quarter or more here). */
static uint64_t rnd_state = 88172645463325252ull;
static uint64_t rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return rnd_state;
}

static void test_stacks_coded_as_tails_read_back_as_written(void **state)
{
    (void)state;
    enum { N = 3000, D = PST_MAX_DEPTH };
    static uint64_t given[N + 1][D];
    static uint32_t given_n[N + 1];
    size_t len[2];
    for (int pass = 0; pass < 2; pass++) {
        rnd_state = 88172645463325252ull;
        pst_writer_cfg_t cfg = base_cfg;
        cfg.depth = D;
        cfg.minor = pass ? 8 : PST_MINOR;
        membuf_t m;
        pst_writer_t *w = mem_writer(&m, &cfg);
        uint64_t cur[D];
        uint32_t n = 0, ids = 0, tails = 0;
        for (int i = 0; i < N; i++) {
            uint64_t how = rnd() % 10;
            uint32_t keep = how == 0 ? 0 : n ? (uint32_t)(rnd() % (n + 1)) : 0;   /* outer frames kept */
            uint32_t add = how == 1 ? 0 : (uint32_t)(rnd() % 24);
            if (keep + add == 0) add = 1;
            if (keep + add > D) add = D - keep;
            uint64_t next[D];
            for (uint32_t k = 0; k < add; k++) next[k] = 0x400000 + (rnd() % 4096) * 16;
            memcpy(next + add, cur + n - keep, keep * sizeof *cur);
            if (how == 2 && i > 10) {        /* a stack defined before, again */
                uint32_t again = 1 + (uint32_t)(rnd() % ids);
                assert_int_equal(pst_writer_stack(w, given[again], given_n[again]), again);
                continue;
            }
            n = keep + add;
            memcpy(cur, next, n * sizeof *cur);
            uint32_t id = pst_writer_stack(w, cur, n);
            assert_true(id >= 1 && id <= ids + 1);
            if (id == ids + 1) {
                ids++;
                memcpy(given[id], cur, n * sizeof *cur);
                given_n[id] = n;
                tails += keep >= PST_TAIL_MIN;
            }
        }
        assert_true(tails > N / 2);
        PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 8);
        assert_int_equal(pst_writer_close(w), 0);
        mem_done(&m);
        len[pass] = m.len;
        int err = 0;
        pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
        assert_non_null(r);
        pst_event_t ev;
        while (pst_next(r, &ev) > 0) {}
        assert_false(pst_status(r)->corrupt);
        assert_int_equal(pst_stack_count(r), ids);
        for (uint32_t id = 1; id <= ids; id++) {
            uint32_t depth = 0;
            const uint64_t *f = pst_stack(r, id, &depth);
            assert_non_null(f);
            assert_int_equal(depth, given_n[id]);
            for (uint32_t k = 0; k < depth; k++)
                if (f[k] != given[id][k]) fail_msg("minor %u: stack %u frame %u: %#llx, want %#llx", cfg.minor, id, k,
                                                   (unsigned long long)f[k], (unsigned long long)given[id][k]);
        }
        pst_close(r);
        free(m.p);
    }
    print_message("%d stacks: %zu bytes at minor 9, %zu at minor 8\n", N, len[0], len[1]);
    assert_true(len[0] * 4 < len[1] * 3);   /* here 94 KB against 149 KB */
}

/* A STACK_TAIL that names no stack defined before, or more shared frames
 * than that stack has, is damage: the reader reports the META chunk
 * corrupt instead of guessing the outer frames. */
static void test_stack_tail_without_its_stack_is_corrupt(void **state)
{
    (void)state;
    const uint64_t ref[3] = { 0x401000, 0x402000, 0x403000 }, fr[3] = { 0x409000, 0x402000, 0x403000 };
    for (int how = 0; how < 3; how++) {
        membuf_t m;
        pst_writer_cfg_t cfg = base_cfg;
        cfg.minor = PST_MINOR;
        pst_writer_t *w = mem_writer(&m, &cfg);
        assert_int_equal(pst_writer_stack(w, ref, 3), 1);
        pst_writer_flush(w);
        uint8_t rec[64], *e = rec;
        if (how == 0) {                  /* names stack 1: fine */
            e = pst_put_meta_stack_near(rec, 2, fr, 3, 1, ref, 3);
        } else if (how == 1) {           /* names stack 5, never defined */
            e = pst_put_meta_stack_near(rec, 2, fr, 3, 5, ref, 3);
        } else {                         /* stack 1 has 3 frames, 4 claimed */
            *e++ = PST_META_STACK_TAIL;
            e = pst_put_varint(e, 2);
            e = pst_put_varint(e, 5);
            e = pst_put_zigzag(e, 1);
            e = pst_put_varint(e, 4);
            e = pst_put_varint(e, 0x409000);
        }
        assert_int_equal(rec[0], PST_META_STACK_TAIL);
        assert_int_equal(pst_writer_raw_chunk(w, PST_CHUNK_META, 0, rec, (size_t)(e - rec)), 0);
        pst_writer_close(w);
        mem_done(&m);
        int err = 0;
        pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
        assert_non_null(r);
        pst_event_t ev;
        while (pst_next(r, &ev) > 0) {}
        const pst_status_t *st = pst_status(r);
        if (how == 0) {
            assert_false(st->corrupt);
            uint32_t depth = 0;
            const uint64_t *f = pst_stack(r, 2, &depth);
            assert_non_null(f);
            assert_int_equal(depth, 3);
            assert_memory_equal(f, fr, sizeof fr);
        } else {
            assert_true(st->corrupt);
            assert_string_equal(st->corrupt_reason, "malformed meta record");
            uint32_t depth = 0;
            assert_null(pst_stack(r, 2, &depth));
        }
        pst_close(r);
        free(m.p);
    }
}

static void test_file_reader_matches_memory_reader_across_read_blocks(void **state)
{
    (void)state;
    char path[] = "/tmp/pst_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    int err = 0;
    pst_writer_cfg_t cfg = base_cfg;
    cfg.chunk_bytes = 100000;   /* chunks straddle the reader's 1 MiB read blocks */
    pst_writer_t *w = pst_writer_open(path, &cfg, &err);
    assert_non_null(w);
    for (uint64_t i = 0; i < 400000; i++) {
        pst_writer_time(w, i * 100);
        uint32_t s = (uint32_t)(i % 3) + 1;
        PST_EMIT(w, s, PST_EV_MALLOC, 0x10000000 + i * 16 + (i & 1) * 3, i);
        PST_EMIT(w, s, PST_EV_FREE, 0x10000000 + i * 16 + (i & 1) * 3);
    }
    assert_int_equal(pst_writer_close(w), 0);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)len);
    assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    assert_true(len > 3 * (1 << 20));
    pst_reader_t *a = pst_open(path, &err), *b = pst_open_mem(buf, (size_t)len, &err);
    assert_non_null(a);
    assert_non_null(b);
    pst_event_t ea, eb;
    uint64_t n = 0;
    for (;;) {
        int ra = pst_next(a, &ea), rb = pst_next(b, &eb);
        assert_int_equal(ra, rb);
        if (ra <= 0) break;
        assert_int_equal(ea.type, eb.type);
        assert_int_equal(ea.stream, eb.stream);
        assert_int_equal(ea.seq, eb.seq);
        assert_int_equal(ea.ts, eb.ts);
        assert_int_equal(ea.f[0], eb.f[0]);
        n++;
    }
    assert_int_equal(n, 800003);
    assert_true(pst_status(a)->end_seen && !pst_status(a)->truncated && !pst_status(a)->corrupt);
    assert_int_equal(pst_status(a)->unordered, 0);
    pst_close(a);
    pst_close(b);
    free(buf);
    unlink(path);
    assert_null(pst_open("/nonexistent/x.pst", &err));
    assert_int_equal(err, PSC_EIO);
}

/* ---- damaged input --------------------------------------------------------- */

typedef struct chunk_pos { size_t start, end; } chunk_pos_t;

/* Offsets of the chunks of a well-formed trace. */
static size_t walk_chunks(const uint8_t *b, size_t len, chunk_pos_t *out, size_t max, size_t *hdr_end)
{
    uint32_t tlv = (uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 | (uint32_t)b[15] << 24;
    size_t p = PST_FILE_HDR_FIXED + tlv, n = 0;
    *hdr_end = p;
    while (p < len && n < max) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + p, &h);
        out[n].start = p;
        out[n].end = p + PST_CHUNK_HDR + h.len;
        p = out[n++].end;
    }
    assert_int_equal(p, len);
    return n;
}

static void test_truncation_at_every_offset_keeps_complete_chunks(void **state)
{
    (void)state;
    membuf_t m;
    build_multi(&m, 24);
    const uint8_t *b = (const uint8_t *)m.p;
    chunk_pos_t ch[64];
    size_t hdr_end, nch = walk_chunks(b, m.len, ch, 64, &hdr_end);
    assert_true(nch > 8);
    char *full = listing(m.p, m.len, NULL);
    for (size_t len = 0; len < m.len; len++) {
        uint8_t *copy = malloc(len ? len : 1);   /* exact size: ASan sees any overread */
        memcpy(copy, b, len);
        int err = 0;
        pst_reader_t *r = pst_open_mem(copy, len, &err);
        if (len < hdr_end) {
            assert_null(r);
            assert_int_equal(err, PSC_ETRUNC);
            free(copy);
            continue;
        }
        assert_non_null(r);
        pst_event_t ev;
        int rc;
        uint64_t n = 0;
        while ((rc = pst_next(r, &ev)) > 0) {
            char line[1024];
            format_event(line, sizeof line, &ev, 0);
            assert_non_null(strstr(full, line));     /* every event is one of the full trace's */
            n++;
        }
        assert_int_equal(rc, 0);
        const pst_status_t *st = pst_status(r);
        size_t complete_end = hdr_end;
        for (size_t i = 0; i < nch; i++) if (ch[i].end <= len) complete_end = ch[i].end;
        assert_true(st->truncated);
        assert_false(st->corrupt);
        assert_int_equal(st->error, PSC_ETRUNC);
        assert_int_equal(st->unread_bytes, len - complete_end);
        assert_int_equal(st->bytes, complete_end);
        assert_int_equal(st->queued, 0);
        pst_close(r);
        free(copy);
    }
    free(full);
    free(m.p);
}

static void test_every_flipped_byte_is_caught_or_harmless(void **state)
{
    (void)state;
    membuf_t m;
    build_multi(&m, 24);
    uint8_t *b = (uint8_t *)m.p;
    chunk_pos_t ch[64];
    size_t hdr_end, nch = walk_chunks(b, m.len, ch, 64, &hdr_end);
    char *full = listing(m.p, m.len, NULL);
    size_t undetected_hdr = 0;
    for (size_t i = 0; i < m.len; i++) {
        b[i] ^= 0xff;
        int err = 0;
        pst_reader_t *r = pst_open_mem(b, m.len, &err);
        if (i < 10) {                        /* magic, major: a clear refusal */
            assert_null(r);
            assert_int_equal(err, i < 8 ? PSC_ECORRUPT : PSC_EVERSION);
        }
        if (r) {
            pst_event_t ev;
            int rc;
            while ((rc = pst_next(r, &ev)) > 0) {}
            assert_int_equal(rc, 0);
            const pst_status_t *st = pst_status(r);
            size_t c = 0;
            while (c < nch && !(ch[c].start <= i && i < ch[c].end)) c++;
            if (c < nch && i >= ch[c].start + PST_CHUNK_HDR) {
                /* payload byte: the CRC catches it, at that chunk */
                assert_true(st->corrupt);
                assert_string_equal(st->corrupt_reason, "crc mismatch");
                assert_int_equal(st->corrupt_offset, ch[c].start);
            } else if (c < nch) {
                size_t o = i - ch[c].start;
                uint8_t kind = o == 0 ? (uint8_t)(b[i] ^ 0xff) : b[ch[c].start];
                if (o == 2 || o == 3 || (o == 0 && kind == PST_CHUNK_SYNC)) {
                    /* flags: unknown bits are ignored by design; a SYNC chunk
                     * whose kind is damaged is skipped as unknown, which only
                     * makes the merge wait longer: nothing changes */
                    pst_close(r);
                    r = NULL;
                    b[i] ^= 0xff;
                    char *l = listing(b, m.len, NULL);
                    assert_string_equal(l, full);
                    free(l);
                    b[i] ^= 0xff;
                } else if (!(st->corrupt || st->truncated)) {
                    print_message("undetected flip at chunk %zu offset %zu\n", c, o);
                    undetected_hdr++;
                }
            }
        }
        pst_close(r);
        b[i] ^= 0xff;
    }
    /* kind, version, stream, len, crc flips all end in a reported problem here */
    assert_int_equal(undetected_hdr, 0);
    free(full);
    free(m.p);
}

static void test_random_bytes_never_crash(void **state)
{
    (void)state;
    membuf_t m;
    build_multi(&m, 24);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    uint8_t *buf = malloc(m.len);
    for (int round = 0; round < 3000; round++) {
        size_t len = (size_t)(x % m.len) + 1;
        /* keep a valid header half the time so the chunk layer sees the noise */
        size_t keep = (round & 1) ? (size_t)(x >> 20) % m.len : 0;
        if (keep > len) keep = len;
        memcpy(buf, m.p, keep);
        for (size_t i = keep; i < len; i++) {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            buf[i] = (round & 2) ? (uint8_t)x : (uint8_t)(m.p[i] ^ ((x & 15) == 0 ? (uint8_t)x : 0));
        }
        int err = 0;
        pst_reader_t *r = pst_open_mem(buf, len, &err);
        if (!r) { assert_true(err < 0); continue; }
        pst_event_t ev;
        int rc;
        while ((rc = pst_next(r, &ev)) > 0) {}
        assert_int_equal(rc, 0);
        pst_close(r);
    }
    free(buf);
    free(m.p);
}

static void test_wrong_magic_and_version_are_refused(void **state)
{
    (void)state;
    membuf_t m;
    build_multi(&m, 0);
    uint8_t *b = (uint8_t *)m.p;
    int err = 0;
    b[0] = 'X';
    assert_null(pst_open_mem(b, m.len, &err));
    assert_int_equal(err, PSC_ECORRUPT);
    b[0] = 'P';
    b[8] = PST_MAJOR + 1;
    assert_null(pst_open_mem(b, m.len, &err));
    assert_int_equal(err, PSC_EVERSION);
    b[8] = PST_MAJOR;
    b[10] = 7;                 /* a newer minor version is read */
    pst_reader_t *r = pst_open_mem(b, m.len, &err);
    assert_non_null(r);
    assert_int_equal(pst_header(r)->minor, 7);
    pst_close(r);
    assert_null(pst_open_mem("PSTR", 4, &err));
    assert_int_equal(err, PSC_ETRUNC);
    assert_null(pst_open_mem("", 0, &err));
    assert_int_equal(err, PSC_ETRUNC);
    assert_null(pst_open_mem("#!/bin/sh\necho hello\n", 21, &err));
    assert_int_equal(err, PSC_ECORRUPT);
    free(m.p);
}

static void test_unknown_header_tag_is_skipped(void **state)
{
    (void)state;
    membuf_t m;
    build_multi(&m, 0);
    uint8_t *b = (uint8_t *)m.p;
    uint32_t tlv = (uint32_t)b[12] | (uint32_t)b[13] << 8;
    /* insert tag 99 with 3 bytes at the end of the TLVs */
    size_t at = PST_FILE_HDR_FIXED + tlv;
    uint8_t *nb = malloc(m.len + 5);
    memcpy(nb, b, at);
    memcpy(nb + at, "\x63\x03xyz", 5);
    memcpy(nb + at + 5, b + at, m.len - at);
    nb[12] = (uint8_t)(tlv + 5);
    nb[13] = (uint8_t)((tlv + 5) >> 8);
    pst_status_t st;
    char *l = listing(nb, m.len + 5, &st);
    assert_string_equal(l, multi_expected);
    assert_true(st.end_seen);
    free(l);
    free(nb);
    free(m.p);
}

static void test_unknown_chunk_kind_is_skipped(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    pst_writer_time(w, 10);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 1);
    pst_writer_flush(w);
    assert_int_equal(pst_writer_raw_chunk(w, 9, 0, "future stuff", 12), 0);
    assert_int_equal(pst_writer_raw_chunk(w, 200, 7, "", 0), 0);
    pst_writer_time(w, 20);
    PST_EMIT(w, 1, PST_EV_FREE, 0x1000);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l, "1 4242 0 10 thread_start 4242 0\n"
                           "1 4242 1 10 malloc 0x1000 1\n"
                           "1 4242 2 20 free 0x1000\n");
    assert_int_equal(st.skipped_chunks, 2);
    assert_true(st.end_seen && !st.corrupt && !st.truncated);
    free(l);
    free(m.p);
}

static void test_missing_end_chunk_is_reported_as_truncated(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 1);
    assert_int_equal(pst_writer_abandon(w), 0);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l, "1 4242 0 0 thread_start 4242 0\n1 4242 1 0 malloc 0x1000 1\n");
    assert_true(st.truncated);
    assert_false(st.end_seen);
    assert_int_equal(st.unread_bytes, 0);
    assert_int_equal(st.error, PSC_ETRUNC);
    free(l);
    free(m.p);
}

static void test_stream_offset_gap_stops_at_that_chunk(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_cfg_t cfg = base_cfg;
    pst_writer_t *w = mem_writer(&m, &cfg);
    for (int i = 0; i < 3; i++) {
        pst_writer_time(w, (uint64_t)i * 10);
        PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000 + (uint64_t)i * 16, 1);
        pst_writer_flush_stream(w, 1);
    }
    pst_writer_close(w);
    mem_done(&m);
    chunk_pos_t ch[16];
    size_t hdr_end, n = walk_chunks((uint8_t *)m.p, m.len, ch, 16, &hdr_end);
    assert_int_equal(n, 5);   /* 3 EVENTS + SYNC (close flushes every stream) + END */
    /* drop the second chunk */
    size_t l1 = ch[1].end - ch[1].start;
    memmove(m.p + ch[1].start, m.p + ch[1].end, m.len - ch[1].end);
    pst_status_t st;
    char *l = listing(m.p, m.len - l1, &st);
    assert_string_equal(l, "1 4242 0 0 thread_start 4242 0\n1 4242 1 0 malloc 0x1000 1\n");
    assert_true(st.corrupt);
    assert_string_equal(st.corrupt_reason, "stream offset gap");
    assert_int_equal(st.corrupt_offset, ch[1].start);
    assert_int_equal(st.error, PSC_ECORRUPT);
    free(l);
    free(m.p);
}

static void test_unknown_event_type_makes_the_chunk_corrupt(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 1);
    pst_writer_flush(w);
    uint8_t payload[4] = { 0, 30, 0, 0 };   /* offset 0 (new stream 2), type 30 is not defined */
    pst_writer_raw_chunk(w, PST_CHUNK_EVENTS, 2, payload, 4);
    PST_EMIT(w, 1, PST_EV_FREE, 0x1000);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l, "1 4242 0 0 thread_start 4242 0\n1 4242 1 0 malloc 0x1000 1\n");
    assert_true(st.corrupt);
    assert_string_equal(st.corrupt_reason, "undecodable event");
    free(l);
    free(m.p);
}

/* ---- mappings (format 1.4) ---------------------------------------------------- */

/* A 1.4 file: a PROT_NONE reservation, its name-less sibling, a file
 * mapping with its name, a commit; read back with the path resolved. */
static void test_mapping_events_of_minor_4_read_back(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_cfg_t cfg = base_cfg;
    cfg.minor = 4;   /* as minor-4 writers wrote them (today's is 5: tests of their own below) */
    pst_writer_t *w = mem_writer(&m, &cfg);
    PST_EMIT(w, 1, PST_EV_MMAP, 0x7f0000000000, 64 << 20, 0, 0x4022, (uint64_t)-1, 0);
    PST_EMIT(w, 1, PST_EV_MMAP, 0x7f1000000000, 1 << 16, 1, 0x2, 3, 0);
    pst_event_t nm = { .type = PST_EV_MMAP_NAME, .f = { 0x7f1000000000 }, .str = "/data/w.bin" };
    assert_int_equal(pst_writer_event(w, 1, &nm), 0);
    PST_EMIT(w, 1, PST_EV_MPROTECT, 0x7f0000800000, 4 << 20, 3);
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    assert_int_equal(pst_header(r)->minor, 4);
    pst_close(r);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l, "1 4242 0 0 thread_start 4242 0\n"
                           "1 4242 1 0 mmap 0x7f0000000000 67108864 0 16418 -1 0\n"
                           "1 4242 2 0 mmap 0x7f1000000000 65536 1 2 3 0\n"
                           "1 4242 3 0 mmap_name 0x7f1000000000 \"/data/w.bin\"\n"
                           "1 4242 4 0 mprotect 0x7f0000800000 4194304 3\n");
    assert_true(st.complete);
    assert_int_equal(st.unordered, 0);
    free(l);
    free(m.p);
}

/* A 1.3 trace still reads (the writer writes one when asked, and refuses
 * it the types 1.3 does not define), and an MMAP_NAME naming an undefined
 * string is corrupt like any S field. */
static void test_minor_3_trace_reads_and_cannot_hold_minor_4_events(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_cfg_t cfg = base_cfg;
    cfg.minor = 3;
    pst_writer_t *w = mem_writer(&m, &cfg);
    pst_event_t ma = { .type = PST_EV_MALLOC, .f = { 0x1000, 8 }, .n_ver = 1, .ver = { 1 } };
    assert_int_equal(pst_writer_event(w, 1, &ma), 0);
    uint64_t f[3] = { 0x10000, 4096, 3 };
    assert_int_equal(pst_writer_emitv(w, 1, PST_EV_MPROTECT, f, 3), PSC_EINVAL);
    pst_event_t nm = { .type = PST_EV_MMAP_NAME, .f = { 0x10000 }, .str = "/x" };
    assert_int_equal(pst_writer_event(w, 1, &nm), PSC_EINVAL);
    PST_EMIT(w, 1, PST_EV_FREE, 0x1000);
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    assert_int_equal(pst_header(r)->minor, 3);
    pst_close(r);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l, "1 4242 0 0 thread_start 4242 0\n1 4242 1 0 malloc 0x1000 8\n1 4242 2 0 free 0x1000\n");
    assert_true(st.complete);
    free(l);
    free(m.p);

    w = mem_writer(&m, &base_cfg);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 1);
    pst_writer_flush(w);
    uint8_t payload[4] = { 0, PST_EV_MMAP_NAME, 0, 99 };   /* offset 0 (stream 2), addr 0, string 99 */
    pst_writer_raw_chunk(w, PST_CHUNK_EVENTS, 2, payload, 4);
    pst_writer_close(w);
    mem_done(&m);
    l = listing(m.p, m.len, &st);
    assert_true(st.corrupt);
    assert_string_equal(st.corrupt_reason, "undefined string id");
    free(l);
    free(m.p);
}

/* ---- merge order ------------------------------------------------------------- */

static void test_two_streams_with_interleaved_times_come_out_by_time(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    /* stream 1 at 10, 30, 50; stream 2 at 20, 40, 60 (and a tie at 50) */
    uint64_t t1[] = { 10, 30, 50 }, t2[] = { 20, 40, 50, 60 };
    for (int i = 0; i < 3; i++) { pst_writer_time(w, t1[i]); PST_EMIT(w, 1, PST_EV_TENSOR_RELEASE, (uint64_t)i); }
    for (int i = 0; i < 4; i++) { pst_writer_time(w, t2[i]); PST_EMIT(w, 2, PST_EV_TENSOR_RELEASE, 10 + (uint64_t)i); }
    pst_writer_flush_stream(w, 2);           /* stream 2's chunk first in the file */
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l,
        "1 4242 0 10 thread_start 4242 0\n"
        "1 4242 1 10 tensor_release 0\n"
        "2 4243 0 20 thread_start 4243 0\n"
        "2 4243 1 20 tensor_release 10\n"
        "1 4242 2 30 tensor_release 1\n"
        "2 4243 2 40 tensor_release 11\n"
        "1 4242 3 50 tensor_release 2\n"
        "2 4243 3 50 tensor_release 12\n"
        "2 4243 4 60 tensor_release 13\n");
    assert_int_equal(st.late, 0);
    free(l);
    free(m.p);
}

static void test_free_in_other_stream_comes_before_reuse_of_its_address(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    const uint64_t a = 0x7f00000a0000;
    pst_writer_time(w, 50);
    PST_EMIT(w, 2, PST_EV_MALLOC, a, 32);          /* stream 2 owns a */
    pst_writer_flush_stream(w, 2);
    pst_writer_time(w, 60);
    PST_EMIT(w, 1, PST_EV_TENSOR_RELEASE, 1);      /* stream 1 is known, at 60 */
    pst_writer_flush_stream(w, 1);
    pst_writer_time(w, 100);
    PST_EMIT(w, 1, PST_EV_MALLOC, a, 32);          /* stream 1 reuses a at 100 ... */
    pst_writer_flush_stream(w, 1);                 /* ... and its chunk comes first */
    PST_EMIT(w, 2, PST_EV_FREE, a);                /* stream 2 frees a at 100 */
    pst_writer_flush_stream(w, 2);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    /* by (ts, stream) the malloc of stream 1 would go first: causality puts the free first */
    assert_string_equal(l,
        "2 4243 0 50 thread_start 4243 0\n"
        "2 4243 1 50 malloc 0x7f00000a0000 32\n"
        "1 4242 0 60 thread_start 4242 0\n"
        "1 4242 1 60 tensor_release 1\n"
        "2 4243 2 100 free 0x7f00000a0000\n"
        "1 4242 2 100 malloc 0x7f00000a0000 32\n");
    assert_int_equal(st.causal_reordered, 1);
    assert_int_equal(st.unordered, 0);
    free(l);
    free(m.p);
}

static void test_causality_drains_the_freeing_stream_up_to_the_free(void **state)
{
    (void)state;
    /* coarse times: stream 2's free of a carries ts 120 (its last TS), stream
     * 1's malloc of a carries 90 — later in reality, earlier by the clock. */
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    const uint64_t a = 0x5000, b = 0x6000;
    pst_writer_time(w, 10);
    PST_EMIT(w, 2, PST_EV_MALLOC, a, 8);
    PST_EMIT(w, 1, PST_EV_MALLOC, b, 8);
    pst_writer_flush(w);
    pst_writer_time(w, 120);
    PST_EMIT(w, 2, PST_EV_TENSOR_RELEASE, 7);
    PST_EMIT(w, 2, PST_EV_FREE, a);
    PST_EMIT(w, 2, PST_EV_TENSOR_RELEASE, 8);
    pst_writer_time(w, 90);
    PST_EMIT(w, 1, PST_EV_MALLOC, a, 16);
    pst_writer_time(w, 95);
    PST_EMIT(w, 1, PST_EV_MALLOC, b, 16);          /* b is live, nobody frees it: unordered */
    pst_writer_flush_stream(w, 1);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l,
        "1 4242 0 10 thread_start 4242 0\n"
        "1 4242 1 10 malloc 0x6000 8\n"
        "2 4243 0 10 thread_start 4243 0\n"
        "2 4243 1 10 malloc 0x5000 8\n"
        "2 4243 2 120 tensor_release 7\n"
        "2 4243 3 120 free 0x5000\n"
        "1 4242 2 90 malloc 0x5000 16\n"
        "1 4242 3 95 malloc 0x6000 16\n"
        "2 4243 4 120 tensor_release 8\n");
    assert_int_equal(st.causal_reordered, 1);
    assert_int_equal(st.unordered, 1);
    assert_int_equal(st.late, 2);
    free(l);
    free(m.p);
}

static void test_pool_events_come_out_in_pool_seq_order_across_streams(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    /* pool 1: seq 1 on stream 2 (stamped 150), seq 2 on stream 1 (stamped 100),
     * seq 3 on stream 2 (150). Pool 2 is independent. */
    pst_writer_time(w, 100);
    PST_EMIT(w, 1, PST_EV_POOL_ACQUIRE, 1, 2, 0, 11, 4, 4, 16, 16, 1);
    PST_EMIT(w, 1, PST_EV_POOL_RECLAIM, 2, 5, 0, 12, 16, 1);
    pst_writer_time(w, 150);
    PST_EMIT(w, 2, PST_EV_TENSOR_ACQUIRE, 1, 0, 0, 4, 16);
    PST_EMIT(w, 2, PST_EV_POOL_ACQUIRE, 1, 1, 0, 10, 4, 4, 16, 16, 0);
    PST_EMIT(w, 2, PST_EV_POOL_RECLAIM, 1, 3, 0, 10, 16, 1);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l,
        "1 4242 0 100 thread_start 4242 0\n"
        "2 4243 0 150 thread_start 4243 0\n"
        "2 4243 1 150 tensor_acquire 1 0 0 4 16\n"
        "2 4243 2 150 pool_acquire 1 1 0 10 4 4 16 16 0\n"
        "1 4242 1 100 pool_acquire 1 2 0 11 4 4 16 16 1\n"
        "1 4242 2 100 pool_reclaim 2 5 0 12 16 1\n"
        "2 4243 3 150 pool_reclaim 1 3 0 10 16 1\n");
    assert_int_equal(st.pool_reordered, 1);
    assert_int_equal(st.pool_unordered, 0);
    free(l);
    free(m.p);
}

static void test_long_trace_with_few_live_objects_keeps_the_queue_small(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_cfg_t cfg = base_cfg;
    cfg.chunk_bytes = 16384;
    pst_writer_t *w = mem_writer(&m, &cfg);
    const uint64_t n = 1000000;
    PST_EMIT(w, 3, PST_EV_THREAD_NAME, 0);          /* a stream that goes quiet for good */
    for (uint64_t i = 0; i < n; i++) {
        pst_writer_time(w, i * 10000);            /* 10 us apart: 10 s in all */
        uint32_t s = 1 + (uint32_t)(i & 1);
        uint64_t a = 0x7f0000000000 + ((i * 7) % 32) * 64;
        if ((i / 2) % 2) PST_EMIT(w, s, PST_EV_FREE, a);
        else PST_EMIT(w, s, PST_EV_MALLOC, a, 64);
    }
    pst_writer_close(w);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    pst_reader_set_window(r, 100000000);             /* 100 ms */
    pst_event_t ev;
    uint64_t k = 0, peak_live = 0;
    while (pst_next(r, &ev) > 0) {
        k++;
        if (pst_status(r)->live > peak_live) peak_live = pst_status(r)->live;
    }
    const pst_status_t *st = pst_status(r);
    assert_int_equal(k, n + 4);
    /* 100 ms of 10 us events is 10000; chunks add at most a few thousand */
    print_message("peak queued %llu, peak live %llu\n", (unsigned long long)st->peak_queued,
                  (unsigned long long)peak_live);
    assert_true(st->peak_queued < 20000);
    assert_true(peak_live <= 64);
    pst_close(r);
    free(m.p);
}

/* The heap bytes in use (glibc's count: arena blocks plus mmapped ones). */
static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

/* Once the last event is out, the streams' byte queues are given back
 * (rd_drop_queues) rather than held until pst_close: the tools' peak comes
 * after the scan. Two streams whose events all fall in one window stay
 * queued until the input ends, about 3 bytes each; glibc's count of the
 * heap in use must drop by at least the queued bytes at the end. */
static void test_queues_are_given_back_when_the_last_event_is_out(void **state)
{
    (void)state;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    skip();   /* the sanitizers' allocators keep no mallinfo2 count */
#endif
    membuf_t m;
    pst_writer_cfg_t cfg = base_cfg;
    cfg.chunk_bytes = 65536;
    pst_writer_t *w = mem_writer(&m, &cfg);
    const uint64_t n = 600000;
    for (uint64_t i = 0; i < n; i++) {
        pst_writer_time(w, i * 1000);            /* 1 us apart: 0.6 s, within the 1 s window */
        uint32_t s = 1 + (uint32_t)(i & 1);
        uint64_t a = 0x7f0000000000 + (i / 2) * 48;   /* all distinct: never a free to wait for */
        PST_EMIT(w, s, PST_EV_MALLOC, a, 40);
    }
    pst_writer_close(w);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    pst_event_t ev;
    uint64_t k = 0;
    size_t before = 0;
    for (;;) {
        int rc = pst_next(r, &ev);
        if (rc <= 0) { assert_int_equal(rc, 0); break; }
        k++;
        before = heap_in_use();                   /* after the newest event out */
    }
    size_t after = heap_in_use();
    const pst_status_t *st = pst_status(r);
    assert_int_equal(k, n + 2);                  /* and the two thread starts */
    assert_true(st->peak_queued >= n);           /* everything was queued at once */
    print_message("heap in use %zu -> %zu bytes after the end\n", before, after);
    assert_true(before > after && before - after >= 2 * n);
    pst_close(r);
    free(m.p);
}

/* ---- queue of raw chunk bytes: fast paths, chunk boundaries, recycling ---- */

/* Every event of a trace decoded straight, stream by stream, in the order
 * of its stream (what the merge must hand out, in some order). */
typedef struct sev { pst_event_t ev; uint32_t ids[8]; } sev_t;
typedef struct sstream { sev_t *e; size_t n, cap; pst_enc_t dec; } sstream_t;

static sstream_t *straight_decode(const uint8_t *b, size_t len, uint32_t max_stream)
{
    sstream_t *ss = calloc(max_stream + 1, sizeof *ss);
    uint32_t tlv = (uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 | (uint32_t)b[15] << 24;
    size_t p = PST_FILE_HDR_FIXED + tlv;
    uint32_t *idbuf = malloc(PST_MAX_IDS * sizeof *idbuf);
    while (p + PST_CHUNK_HDR <= len) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + p, &h);
        const uint8_t *q = b + p + PST_CHUNK_HDR, *end = q + h.len;
        if (h.kind == PST_CHUNK_EVENTS) {
            assert_true(h.stream >= 1 && h.stream <= max_stream);
            sstream_t *s = &ss[h.stream];
            uint64_t off;
            q = pst_get_varint(q, end, &off);
            while (q < end) {
                pst_event_t ev;
                memset(&ev, 0, sizeof ev);
                q = pst_decode_event(&s->dec, q, end, &ev, idbuf);
                assert_non_null(q);
                if (ev.type == PST_EV_TS) continue;
                if (s->n == s->cap) s->e = realloc(s->e, (s->cap = s->cap ? s->cap * 2 : 256) * sizeof *s->e);
                sev_t *d = &s->e[s->n++];
                d->ev = ev;
                d->ev.ts = s->dec.last_ts;
                assert_true(ev.n_ids <= 8);
                if (ev.n_ids) memcpy(d->ids, ev.ids, ev.n_ids * sizeof *idbuf);
            }
        }
        p += PST_CHUNK_HDR + h.len;
    }
    free(idbuf);
    return ss;
}

/* Read the whole trace; every event must be the next one of its stream, as
 * decoded straight. Returns the events read. */
static uint64_t check_against_straight(pst_reader_t *r, sstream_t *ss, uint32_t max_stream)
{
    size_t *next = calloc(max_stream + 1, sizeof *next);
    pst_event_t ev;
    uint64_t n = 0;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {
        assert_true(ev.stream >= 1 && ev.stream <= max_stream);
        sstream_t *s = &ss[ev.stream];
        assert_int_equal(ev.seq, next[ev.stream]);
        assert_true(next[ev.stream] < s->n);
        const sev_t *d = &s->e[next[ev.stream]++];
        assert_int_equal(ev.type, d->ev.type);
        assert_int_equal(ev.ts, d->ev.ts);
        assert_int_equal(ev.stack, d->ev.stack);
        const char *lay = pst_event_layout(ev.type);
        for (unsigned i = 0; lay[i]; i++) assert_int_equal(ev.f[i], d->ev.f[i]);
        assert_int_equal(ev.n_ids, d->ev.n_ids);
        if (ev.n_ids) assert_memory_equal(ev.ids, d->ids, ev.n_ids * sizeof(uint32_t));
        assert_int_equal(ev.n_payload, d->ev.n_payload);
        if (ev.n_payload) assert_memory_equal(ev.payload, d->ev.payload, ev.n_payload * sizeof(int64_t));
        n++;
    }
    assert_int_equal(rc, 0);
    for (uint32_t i = 1; i <= max_stream; i++) assert_int_equal(next[i], ss[i].n);
    free(next);
    return n;
}

static void free_straight(sstream_t *ss, uint32_t max_stream)
{
    for (uint32_t i = 0; i <= max_stream; i++) free(ss[i].e);
    free(ss);
}

/* malloc/free churn over a few addresses per stream, plus the odd event with
 * a stack, a string, ids or a payload, and TS records every 64 events. */
static void build_churn(membuf_t *m, uint32_t streams, uint64_t n, uint32_t chunk_bytes, uint64_t tick)
{
    pst_writer_cfg_t cfg = base_cfg;
    cfg.chunk_bytes = chunk_bytes;
    cfg.tick_ns = tick;
    pst_writer_t *w = mem_writer(m, &cfg);
    const uint64_t fr[2] = { 0x401000, 0x402000 };
    uint32_t stk = pst_writer_stack(w, fr, 2), nm = pst_writer_string(w, "step");
    uint64_t x = 12345, k[9] = { 0 };
    assert_true(streams <= 8);
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint32_t s = 1 + (uint32_t)(x % streams);
        uint64_t j = k[s];                           /* the stream's malloc(a), free(a), malloc(a'), ... */
        uint64_t a = 0x7f0000000000 + (uint64_t)s * 0x100000 + ((j / 2) % 16) * 48;
        if (i % 997 != 0 && i % 991 != 0) k[s]++;
        if (i % 997 == 0) {
            uint32_t ids[3] = { (uint32_t)i, 7, (uint32_t)(i >> 3) };
            pst_event_t ka = { .type = PST_EV_KVB_ALLOC, .f = { 1, i, s, 0, 0, 3 }, .ids = ids, .n_ids = 3 };
            assert_int_equal(pst_writer_event(w, s, &ka), 0);
        } else if (i % 991 == 0) {
            pst_event_t mb = { .type = PST_EV_MARK_BEGIN, .f = { nm, i }, .payload = { (int64_t)i, -1 }, .n_payload = 2 };
            assert_int_equal(pst_writer_event(w, s, &mb), 0);
        } else if (j % 2 == 0) {
            pst_event_t ev = { .type = PST_EV_MALLOC, .stack = (i % 13 == 0) ? stk : 0, .f = { a, 16 + i % 200 } };
            assert_int_equal(pst_writer_event(w, s, &ev), 0);
        } else {
            PST_EMIT(w, s, PST_EV_FREE, a);
        }
    }
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(m);
}

static void test_single_stream_fast_path_hands_out_every_event_in_order(void **state)
{
    (void)state;
    uint32_t chunk[3] = { 0, 300, 4096 };
    for (int c = 0; c < 3; c++) {
        membuf_t m;
        build_churn(&m, 1, 200000, chunk[c], 50);
        sstream_t *ss = straight_decode((const uint8_t *)m.p, m.len, 1);
        uint64_t windows[3] = { PST_DEFAULT_WINDOW_NS, 100000, 0 };
        for (int wi = 0; wi < 3; wi++) {
            int err = 0;
            pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
            assert_non_null(r);
            pst_reader_set_window(r, windows[wi]);
            assert_int_equal(check_against_straight(r, ss, 1), ss[1].n);
            const pst_status_t *st = pst_status(r);
            assert_true(st->end_seen && !st->corrupt && !st->truncated);
            assert_int_equal(st->events, 200001);
            assert_int_equal(st->late + st->unordered + st->causal_reordered + st->pool_reordered, 0);
            assert_int_equal(st->queued, 0);
            assert_int_equal(st->streams, 1);
            pst_close(r);
        }
        free_straight(ss, 1);
        free(m.p);
    }
}

static void test_single_stream_counts_reuse_of_a_live_address(void **state)
{
    (void)state;
    /* one stream: a second malloc of a live address has nobody to wait for */
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    pst_writer_time(w, 10);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 8);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 8);       /* free lost */
    PST_EMIT(w, 1, PST_EV_FREE, 0x1000);
    PST_EMIT(w, 1, PST_EV_MALLOC, 0x1000, 8);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l, "1 4242 0 10 thread_start 4242 0\n"
                           "1 4242 1 10 malloc 0x1000 8\n"
                           "1 4242 2 10 malloc 0x1000 8\n"
                           "1 4242 3 10 free 0x1000\n"
                           "1 4242 4 10 malloc 0x1000 8\n");
    assert_int_equal(st.unordered, 1);
    assert_int_equal(st.live, 1);
    free(l);
    free(m.p);
}

/* Frees of a few addresses by two streams, each re-allocated by a third at
 * the same time (so by (ts, stream) the allocation would go first): many
 * frees of one stream queued at once (its FIFO of indexed frees grows and
 * wraps, as the reader consumes batches while it reads), chains of one
 * address alternating between the two freeing streams. Every free must come
 * out after the allocation it frees and before the next one. */
static void many_cross_stream_reuses(uint16_t minor)
{
    membuf_t m;
    pst_writer_cfg_t cfg = base_cfg;
    cfg.minor = minor;
    pst_writer_t *w = mem_writer(&m, &cfg);
    enum { ADDRS = 4, ROUNDS = 1200, BATCH = 200 };   /* ~100 frees per stream per batch: past the FIFO's first 64 */
    const uint64_t base = 0x7f00000c0000;
    for (unsigned i = 0; i < ROUNDS; i++) {
        uint64_t x = base + (uint64_t)(i % ADDRS) * 64;
        pst_writer_time(w, 1000 + 10 * (uint64_t)i);
        if (i >= ADDRS) PST_EMIT(w, 2 + (i / ADDRS) % 2, PST_EV_FREE, x);   /* streams 2 and 3 by turns */
        PST_EMIT(w, 1, PST_EV_MALLOC, x, 32);
        if ((i + 1) % BATCH == 0)
            for (uint32_t s = 1; s <= 3; s++) pst_writer_flush_stream(w, s);
    }
    pst_writer_close(w);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    pst_reader_set_window(r, 2 * BATCH * 10);   /* earlier batches go out while later ones are read */
    pst_event_t ev;
    int live[ADDRS] = { 0 };
    uint64_t frees = 0, mallocs = 0;
    while (pst_next(r, &ev) > 0) {
        if (ev.type != PST_EV_MALLOC && ev.type != PST_EV_FREE) continue;
        assert_true(ev.f[0] >= base && ev.f[0] < base + ADDRS * 64);
        unsigned k = (unsigned)((ev.f[0] - base) / 64);
        if (ev.type == PST_EV_MALLOC) { assert_false(live[k]); live[k] = 1; mallocs++; }
        else { assert_true(live[k]); live[k] = 0; frees++; }
    }
    const pst_status_t *st = pst_status(r);
    assert_int_equal(mallocs, ROUNDS);
    assert_int_equal(frees, ROUNDS - ADDRS);
    assert_true(st->causal_reordered >= ROUNDS - ADDRS);   /* every reuse needed its free first */
    assert_int_equal(st->unordered, 0);
    assert_int_equal(st->unknown_frees, 0);
    pst_close(r);
    free(m.p);
}

static void test_many_queued_cross_stream_frees_each_go_before_the_reuse(void **state)
{
    (void)state;
    many_cross_stream_reuses(1);   /* times not causal: the reuse drains the freeing stream */
    many_cross_stream_reuses(0);   /* the current minor: causal times, ties in one tick */
}

static void test_second_stream_after_a_long_single_stream_still_orders_frees(void **state)
{
    (void)state;
    /* stream 1 alone for many chunks (its frees are not indexed yet), then
     * stream 2 appears and reuses an address whose free stream 1 still has
     * queued: the free must go first */
    membuf_t m;
    pst_writer_cfg_t cfg = base_cfg;
    cfg.chunk_bytes = 64;
    pst_writer_t *w = mem_writer(&m, &cfg);
    const uint64_t a = 0x7f00000b0000;
    pst_writer_time(w, 10);
    PST_EMIT(w, 1, PST_EV_MALLOC, a, 32);
    for (uint64_t i = 0; i < 200; i++) {
        pst_writer_time(w, 20 + i);
        PST_EMIT(w, 1, PST_EV_MALLOC, 0x9000 + i * 16, 16);
        PST_EMIT(w, 1, PST_EV_FREE, 0x9000 + i * 16);
    }
    pst_writer_time(w, 300);
    PST_EMIT(w, 1, PST_EV_FREE, a);
    pst_writer_flush_stream(w, 1);
    pst_writer_time(w, 250);                          /* stream 2's clock is behind */
    PST_EMIT(w, 2, PST_EV_MALLOC, a, 64);
    pst_writer_close(w);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    pst_event_t ev;
    uint64_t n = 0, free_at = 0, malloc_at = 0;
    while (pst_next(r, &ev) > 0) {
        n++;
        if (ev.type == PST_EV_FREE && ev.f[0] == a) free_at = n;
        if (ev.type == PST_EV_MALLOC && ev.stream == 2) malloc_at = n;
    }
    assert_int_equal(n, 1 + 1 + 400 + 1 + 2);
    assert_true(free_at && malloc_at == free_at + 1);
    assert_int_equal(pst_status(r)->causal_reordered, 1);
    assert_int_equal(pst_status(r)->unordered, 0);
    pst_close(r);
    free(m.p);
}

static void test_queues_spanning_many_chunks_match_straight_decoding(void **state)
{
    (void)state;
    /* chunk sizes from one event per chunk to one chunk per stream: a
     * stream's queue holds many chunks, and chunks end anywhere */
    uint32_t chunk[4] = { 1, 24, 1000, 0 };
    char *first = NULL;
    for (int c = 0; c < 4; c++) {
        membuf_t m;
        build_churn(&m, 3, 30000, chunk[c], 7);
        sstream_t *ss = straight_decode((const uint8_t *)m.p, m.len, 3);
        int err = 0;
        pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
        assert_non_null(r);
        uint64_t n = check_against_straight(r, ss, 3);
        assert_int_equal(n, 30003);
        assert_int_equal(pst_status(r)->queued, 0);
        assert_true(pst_status(r)->peak_queued <= n);
        pst_close(r);
        /* the order does not depend on where the chunks were cut */
        char *l = listing(m.p, m.len, NULL);
        if (!first) first = l;
        else { assert_string_equal(l, first); free(l); }
        free_straight(ss, 3);
        free(m.p);
    }
    free(first);
}

/* One EVENTS chunk of raw event bytes for stream s at its offset. */
static void raw_events(pst_writer_t *w, uint32_t s, uint64_t *off, const uint8_t *ev, size_t n)
{
    uint8_t buf[256];
    uint8_t *p = pst_put_stream_offset(buf, *off);
    memcpy(p, ev, n);
    assert_int_equal(pst_writer_raw_chunk(w, PST_CHUNK_EVENTS, s, buf, (uint32_t)(p - buf + n)), 0);
    *off += n;
}

static void test_ts_records_at_chunk_ends_and_chunks_of_only_ts(void **state)
{
    (void)state;
    /* stream 1, by hand: chunk A ends with a TS record, chunk B holds only
     * TS records, chunk C has the event they time. Addresses are coded
     * against the stream's previous one across the chunks. */
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    uint64_t off = 0;
    pst_enc_t enc = { 0 };
    uint8_t b[64], *p = b;
    p = pst_put_ts(&enc, p, 100);
    pst_event_t ml = { .type = PST_EV_MALLOC, .f = { 0x5010, 24 } };
    p = pst_encode_event(&enc, p, &ml);
    p = pst_put_ts(&enc, p, 150);
    raw_events(w, 1, &off, b, (size_t)(p - b));
    p = b;
    p = pst_put_ts(&enc, p, 170);
    p = pst_put_ts(&enc, p, 200);
    raw_events(w, 1, &off, b, (size_t)(p - b));
    p = b;
    pst_event_t fr = { .type = PST_EV_FREE, .f = { 0x5010 } };
    p = pst_encode_event(&enc, p, &fr);
    pst_event_t ml2 = { .type = PST_EV_MALLOC, .f = { 0x5030, 8 } };
    p = pst_encode_event(&enc, p, &ml2);
    raw_events(w, 1, &off, b, (size_t)(p - b));
    pst_writer_abandon(w);
    mem_done(&m);
    pst_status_t st;
    char *l = listing(m.p, m.len, &st);
    assert_string_equal(l, "1 0 0 100 malloc 0x5010 24\n"
                           "1 0 1 200 free 0x5010\n"
                           "1 0 2 200 malloc 0x5030 8\n");
    assert_int_equal(st.live, 1);
    assert_int_equal(st.chunks, 3);
    free(l);
    free(m.p);
}

static void test_ids_stay_valid_until_the_next_call_across_streams(void **state)
{
    (void)state;
    /* several L events in a row in one stream and in two: each handed-out
     * list must hold its own ids until the next pst_next */
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &base_cfg);
    for (uint32_t i = 0; i < 6; i++) {
        pst_writer_time(w, 100 + i);
        uint32_t ids[4] = { i, i + 100, i + 200, i + 300 };
        pst_event_t kf = { .type = PST_EV_KVB_FREE, .f = { 1 + i % 2, i + 1 }, .ids = ids, .n_ids = 1 + i % 4 };
        assert_int_equal(pst_writer_event(w, 1 + (i / 3), &kf), 0);
    }
    pst_writer_close(w);
    mem_done(&m);
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    pst_event_t ev;
    uint32_t seen = 0;
    while (pst_next(r, &ev) > 0) {
        if (ev.type != PST_EV_KVB_FREE) continue;
        uint32_t i = (uint32_t)ev.f[1] - 1;
        assert_int_equal(ev.n_ids, 1 + i % 4);
        for (uint32_t k = 0; k < ev.n_ids; k++) assert_int_equal(ev.ids[k], i + 100 * k);
        seen++;
    }
    assert_int_equal(seen, 6);
    pst_close(r);
    free(m.p);
}

static void test_long_file_trace_recycles_queue_bytes_and_matches_memory(void **state)
{
    (void)state;
    /* a trace long enough that every stream's byte queue is compacted and
     * reused many times (and, read from a file, chunks straddle read
     * blocks): the file reader, the memory reader and a straight decoding
     * agree on every event */
    char path[] = "/tmp/pst_test_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    membuf_t m;
    build_churn(&m, 4, 600000, 20000, 100);
    assert_int_equal(write(fd, m.p, m.len), (ssize_t)m.len);
    close(fd);
    sstream_t *ss = straight_decode((const uint8_t *)m.p, m.len, 4);
    int err = 0;
    pst_reader_t *a = pst_open(path, &err), *b = pst_open_mem(m.p, m.len, &err);
    assert_non_null(a);
    assert_non_null(b);
    pst_reader_set_window(a, 2000000);                 /* 2 ms: 20000 events */
    pst_reader_set_window(b, 2000000);
    assert_int_equal(check_against_straight(a, ss, 4), 600004);
    assert_true(pst_status(a)->peak_queued < 120000);
    pst_event_t ea, eb;
    pst_close(a);
    a = pst_open(path, &err);
    pst_reader_set_window(a, 2000000);
    uint64_t n = 0;
    for (;;) {
        int ra = pst_next(a, &ea), rb = pst_next(b, &eb);
        assert_int_equal(ra, rb);
        if (ra <= 0) break;
        assert_int_equal(ea.stream, eb.stream);
        assert_int_equal(ea.seq, eb.seq);
        assert_int_equal(ea.f[0], eb.f[0]);
        n++;
    }
    assert_int_equal(n, 600004);
    assert_int_equal(pst_status(a)->late, pst_status(b)->late);
    assert_int_equal(pst_status(a)->live, pst_status(b)->live);
    pst_close(a);
    pst_close(b);
    free_straight(ss, 4);
    free(m.p);
    unlink(path);
}

/* ---- golden ------------------------------------------------------------------- */

/* The deterministic program that made tests/golden/small_v1.pstg. Changing
 * it changes the golden bytes: do so only with a format change, and rerun
 * with PST_GOLDEN_UPDATE=1 (see tests/golden/README.md). */
static void make_golden(membuf_t *m)
{
    pst_writer_cfg_t cfg = {
        .pid = 1000, .ppid = 999, .exec_gen = 0, .start_real_ns = 1700000000123456789ull,
        .start_mono_ns = 5000000000ull, .stacks = PST_STACKS_FP, .depth = 16, .page_size = 4096,
        .exe = "/opt/golden/app", .argv = (const char *const[]){ "app", "--steps", "2", NULL },
        .tool = "poolscope-golden 1", .host = "golden", .chunk_bytes = 96, .minor = 1,
    };
    pst_writer_t *w = mem_writer(m, &cfg);
    const uint64_t st1[] = { 0x401a20, 0x401900, 0x402000 };
    uint32_t s1 = pst_writer_stack(w, st1, 3);
    pst_writer_module(w, 1, 0x400000, 0x10000, "/opt/golden/app", (const uint8_t *)"\xab\xcd\xef\x01", 4);
    pst_writer_time(w, 1000);
    PST_EMIT(w, 1, PST_EV_MMAP, 0x7f0000000000, 1 << 21, 3, 0x22, (uint64_t)-1, 0);
    pst_event_t ev = { .type = PST_EV_MALLOC, .stack = s1, .f = { 0x55550000a010, 100 } };
    pst_writer_event(w, 1, &ev);
    uint32_t acts = pst_writer_string(w, "acts");
    PST_EMIT(w, 1, PST_EV_POOL_CREATE, 1, acts, 3, 1 << 20);
    uint32_t kv = pst_writer_string(w, "kv");
    PST_EMIT(w, 1, PST_EV_KVB_CREATE, 2, kv, 16, 64, 1, 0, 64, 4096);
    pst_writer_thread(w, 2, 1001, 1);
    pst_writer_time(w, 2000);
    PST_EMIT(w, 2, PST_EV_THREAD_NAME, pst_writer_string(w, "decoder"));
    uint32_t req = pst_writer_string(w, "request");
    pst_event_t rb = { .type = PST_EV_MARK_BEGIN, .f = { req, 1 }, .payload = { 12, 32 }, .n_payload = 2 };
    pst_writer_event(w, 2, &rb);
    PST_EMIT(w, 2, PST_EV_TENSOR_ACQUIRE, 1, 0, 0, 256, 1024);
    PST_EMIT(w, 2, PST_EV_POOL_ACQUIRE, 1, 1, 0, 1, 256, 256, 1024, 1024, 0);
    uint32_t ids[4] = { 0, 1, 2, 5 };
    pst_event_t ka = { .type = PST_EV_KVB_ALLOC, .f = { 2, 1, 0, 1, 0, 12 }, .ids = ids, .n_ids = 4 };
    pst_writer_event(w, 2, &ka);
    pst_writer_time(w, 2500);
    PST_EMIT(w, 1, PST_EV_REALLOC, 0x55550000a010, 0x55550000b020, 200);
    PST_EMIT(w, 1, PST_EV_RSS, 3 << 20, 2 << 20, 1 << 20);
    pst_writer_time(w, 3000);
    PST_EMIT(w, 2, PST_EV_KVB_TOKENS, 2, 2, 5, 7);
    PST_EMIT(w, 2, PST_EV_POOL_RECLAIM, 1, 2, 0, 1, 1024, 1);
    PST_EMIT(w, 2, PST_EV_TENSOR_RELEASE, 1);
    pst_event_t kf = { .type = PST_EV_KVB_FREE, .f = { 2, 3 }, .ids = ids, .n_ids = 4 };
    pst_writer_event(w, 2, &kf);
    PST_EMIT(w, 2, PST_EV_MARK_END, req, 1);
    PST_EMIT0(w, 2, PST_EV_THREAD_END);
    pst_writer_time(w, 4000);
    PST_EMIT(w, 1, PST_EV_FREE, 0x55550000b020);
    PST_EMIT(w, 1, PST_EV_MUNMAP, 0x7f0000000000, 1 << 21);
    PST_EMIT(w, 1, PST_EV_LOST, 3, PST_LOST_NOBUF);
    pst_writer_module(w, 0, 0x400000, 0x10000, NULL, NULL, 0);
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(m);
}

static char *read_file(const char *name, size_t *len)
{
    const char *dirs[] = { "tests/golden/", "../tests/golden/", "../../tests/golden/" };
    for (size_t i = 0; i < 3; i++) {
        char path[256];
        snprintf(path, sizeof path, "%s%s", dirs[i], name);
        FILE *f = fopen(path, "rb");
        if (!f) continue;
        fseek(f, 0, SEEK_END);
        long n = ftell(f);
        fseek(f, 0, SEEK_SET);
        char *b = malloc((size_t)n + 1);
        size_t got = fread(b, 1, (size_t)n, f);
        fclose(f);
        b[got] = 0;
        *len = got;
        return b;
    }
    return NULL;
}

/* ---- versions (format 1.3) ---------------------------------------------- */

static const pst_writer_cfg_t ver_cfg = { .pid = 4242, .ppid = 1, .tool = "test_reader" };  /* today's minor (>= 3) */

static void put_ver(pst_writer_t *w, uint32_t stream, unsigned type, uint64_t addr, uint64_t size, uint16_t v)
{
    pst_event_t ev = { .type = (uint8_t)type, .f = { addr, size }, .n_ver = v ? 1 : 0, .ver = { v } };
    assert_int_equal(pst_writer_event(w, stream, &ev), 0);
}

/* "stream:type:addr" of every heap event, in the order read */
static char *heap_order(const void *buf, size_t len, pst_status_t *st)
{
    int err = 0;
    pst_reader_t *r = pst_open_mem(buf, len, &err);
    assert_non_null(r);
    char *out = calloc(1, 4096);
    size_t n = 0;
    pst_event_t ev;
    while (pst_next(r, &ev) > 0)
        if (ev.type == PST_EV_MALLOC || ev.type == PST_EV_FREE)
            n += (size_t)snprintf(out + n, 4096 - n, "%s%u:%s:%llx", n ? " " : "", ev.stream,
                                  ev.type == PST_EV_MALLOC ? "m" : "f", (unsigned long long)ev.f[0]);
    *st = *pst_status(r);
    pst_close(r);
    return out;
}

/* One address passed between two threads within one tick. Times tie, and
 * stream 1 freeing what it allocated looks the likelier order; only the
 * versions (written as an interposer numbers them) say that stream 2 freed
 * and re-allocated it first. Expected order written by hand. */
static void test_versions_order_one_address_across_streams(void **state)
{
    (void)state;
    for (int with_versions = 1; with_versions >= 0; with_versions--) {
        membuf_t m;
        pst_writer_t *w = mem_writer(&m, &ver_cfg);
        uint16_t v = with_versions ? 1 : 0, inc = with_versions ? 1 : 0;
        pst_writer_time(w, 1000);
        put_ver(w, 1, PST_EV_MALLOC, 0xa000, 32, v);
        pst_writer_time(w, 2000);
        put_ver(w, 1, PST_EV_FREE, 0xa000, 0, (uint16_t)(v + 3 * inc));   /* the last of the four */
        put_ver(w, 2, PST_EV_FREE, 0xa000, 0, (uint16_t)(v + 1 * inc));
        put_ver(w, 2, PST_EV_MALLOC, 0xa000, 32, (uint16_t)(v + 2 * inc));
        pst_writer_close(w);
        mem_done(&m);
        pst_status_t st;
        char *o = heap_order(m.p, m.len, &st);
        if (with_versions) {
            assert_string_equal(o, "1:m:a000 2:f:a000 2:m:a000 1:f:a000");
            assert_int_equal(st.unknown_frees, 0);
            assert_int_equal(st.live, 0);
            assert_int_equal(st.ver_gaps, 0);
        } else {
            /* without them the same events read as a reuse by stream 1:
             * the case versions exist for */
            assert_string_not_equal(o, "1:m:a000 2:f:a000 2:m:a000 1:f:a000");
        }
        free(o);
        free(m.p);
    }
}

/* Two addresses that share a version counter: the event of one waits for
 * nothing the other does, even when the other is stamped much later. */
static void test_versions_of_another_address_do_not_hold_an_event(void **state)
{
    (void)state;
    uint64_t a = 0x7f0000001000ull, b = a + 16;
    while (pst_vslot(b) != pst_vslot(a)) b += 16;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &ver_cfg);
    pst_writer_time(w, 1000);
    put_ver(w, 1, PST_EV_MALLOC, b, 8, 2);        /* the counter's second use */
    pst_writer_time(w, 900000);
    put_ver(w, 2, PST_EV_MALLOC, a, 8, 1);        /* its first, stamped later */
    put_ver(w, 1, PST_EV_FREE, b, 0, 3);
    put_ver(w, 2, PST_EV_FREE, a, 0, 4);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *o = heap_order(m.p, m.len, &st);
    char want[256];
    snprintf(want, sizeof want, "1:m:%llx 2:m:%llx 1:f:%llx 2:f:%llx", (unsigned long long)b,
             (unsigned long long)a, (unsigned long long)b, (unsigned long long)a);
    assert_string_equal(o, want);
    assert_int_equal(st.unknown_frees, 0);
    assert_int_equal(st.ver_gaps, 0);
    assert_int_equal(st.live, 0);
    free(o);
    free(m.p);
}

/* A version that never comes (a lost event): far behind, the counter jumps
 * (counted); near, the event goes ahead. Neither holds the trace. */
static void test_versions_lost_do_not_hold_the_trace(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &ver_cfg);
    pst_writer_time(w, 1000);
    put_ver(w, 1, PST_EV_MALLOC, 0xb000, 8, 1);
    put_ver(w, 1, PST_EV_MALLOC, 0xc000, 8, 1);
    pst_writer_time(w, 2000);
    put_ver(w, 2, PST_EV_FREE, 0xb000, 0, 3000);  /* 2 .. 2999 lost */
    put_ver(w, 2, PST_EV_FREE, 0xc000, 0, 5);     /* 2 .. 4 lost */
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *o = heap_order(m.p, m.len, &st);
    assert_string_equal(o, "1:m:b000 1:m:c000 2:f:b000 2:f:c000");
    assert_int_equal(st.ver_gaps, 1);
    assert_int_equal(st.unknown_frees, 0);
    free(o);
    free(m.p);
}

/* The old block of a realloc, handed to another thread inside the call:
 * that thread's allocation is stamped long before the realloc (stamped
 * when the call returns, here 50 ms later) and has the later version of
 * the block; the realloc still goes first. */
static void test_versions_realloc_released_block_stamped_later(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &ver_cfg);
    pst_writer_time(w, 100);
    put_ver(w, 1, PST_EV_MALLOC, 0xa000, 32, 1);
    pst_writer_time(w, 1000000);
    put_ver(w, 2, PST_EV_MALLOC, 0xa000, 32, 3);               /* after the realloc's release (2) */
    pst_writer_time(w, 50000000);
    pst_event_t re = { .type = PST_EV_REALLOC, .f = { 0xa000, 0xb000, 64 }, .n_ver = 2, .ver = { 2, 1 } };
    assert_int_equal(pst_writer_event(w, 1, &re), 0);
    put_ver(w, 1, PST_EV_FREE, 0xb000, 0, 2);
    put_ver(w, 2, PST_EV_FREE, 0xa000, 0, 4);
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    int err = 0;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    char o[256] = "";
    size_t n = 0;
    pst_event_t ev;
    while (pst_next(r, &ev) > 0)
        if (ev.type == PST_EV_MALLOC || ev.type == PST_EV_FREE || ev.type == PST_EV_REALLOC)
            n += (size_t)snprintf(o + n, sizeof o - n, "%s%u:%s", n ? " " : "", ev.stream,
                                  ev.type == PST_EV_MALLOC ? "m" : ev.type == PST_EV_FREE ? "f" : "r");
    st = *pst_status(r);
    pst_close(r);
    /* the two last frees tie (one time, neither waits for the other): the
     * tie rule's estimate puts stream 2's, the first of its block of one,
     * before stream 1's, the second of its two */
    assert_string_equal(o, "1:m 1:r 2:m 2:f 1:f");
    assert_int_equal(st.unknown_frees, 0);
    assert_int_equal(st.live, 0);
    assert_int_equal(st.ver_gaps, 0);
    free(m.p);
}

/* Cycle counts (minor 8, FORMAT.md "Cycles"): the events of two streams in
 * one tick go out in the order of their counts, not by the tie rule's
 * estimate, which without counts keeps stream 1's free of its own block
 * ahead of stream 2's allocation (affinity), and the estimate's peak is
 * then one block instead of two. */
static char *cyc_order(int with_counts)
{
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &ver_cfg);
    pst_writer_time(w, 1000);
    const struct { uint32_t stream; pst_event_t ev; } evs[] = {
        { 1, { .type = PST_EV_MALLOC, .f = { 0xa000, 100 }, .cyc = 10 } },
        { 1, { .type = PST_EV_FREE, .f = { 0xa000 }, .cyc = 30 } },
        { 2, { .type = PST_EV_MALLOC, .f = { 0xb000, 100 }, .cyc = 20 } },
        { 2, { .type = PST_EV_FREE, .f = { 0xb000 }, .cyc = 40 } },
    };
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++) {
        pst_event_t ev = evs[i].ev;
        if (!with_counts) ev.cyc = 0;
        assert_int_equal(pst_writer_event(w, evs[i].stream, &ev), 0);
    }
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *o = heap_order(m.p, m.len, &st);
    assert_int_equal(st.unknown_frees, 0);
    assert_int_equal(st.live, 0);
    free(m.p);
    return o;
}

static void test_cycle_counts_order_one_tick_across_streams(void **state)
{
    (void)state;
    char *o = cyc_order(1);
    assert_string_equal(o, "1:m:a000 2:m:b000 1:f:a000 2:f:b000");
    free(o);
    o = cyc_order(0);
    assert_string_equal(o, "1:m:a000 1:f:a000 2:m:b000 2:f:b000");
    free(o);
}

/* The interposer writes a VER record only when the slot's previous version
 * was another thread's; a thread's next events on its own slot carry none
 * and count as the versions after (FORMAT.md, "Versions"). The tie of
 * test_versions_order_one_address_across_streams, written that way: stream
 * 2's re-allocation is implicit, and stream 1's free must still wait for
 * it. */
static void test_versions_implicit_follow_their_streams_explicit_one(void **state)
{
    (void)state;
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &ver_cfg);
    pst_writer_time(w, 1000);
    put_ver(w, 1, PST_EV_MALLOC, 0xa000, 32, 1);
    pst_writer_time(w, 2000);
    put_ver(w, 1, PST_EV_FREE, 0xa000, 0, 4);
    put_ver(w, 2, PST_EV_FREE, 0xa000, 0, 2);
    put_ver(w, 2, PST_EV_MALLOC, 0xa000, 32, 0);     /* implicit: 3 */
    pst_writer_time(w, 3000);
    put_ver(w, 2, PST_EV_MALLOC, 0xc000, 16, 0);     /* implicit, another slot: the first there */
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *o = heap_order(m.p, m.len, &st);
    assert_string_equal(o, "1:m:a000 2:f:a000 2:m:a000 1:f:a000 2:m:c000");
    assert_int_equal(st.unknown_frees, 0);
    assert_int_equal(st.live, 1);
    assert_int_equal(st.ver_gaps, 0);
    free(o);
    free(m.p);
}

/* Two addresses of one slot: x of streams 2 and 3, z of stream 1. */
static void colliding_pair(uint64_t *x, uint64_t *z)
{
    *x = 0x7f0000001000ull;
    *z = 0x7f0000900000ull;
    while (pst_vslot(*z) != pst_vslot(*x)) *z += 16;
}

/* The counters are plain loads and stores: two threads that take a slot at
 * once both get its next version, and the one whose next event is implicit
 * (stream 1 freeing z: its own version 2, a duplicate) does not know the
 * other's came in between. Read as "the slot's next" that free took version
 * 3, which was stream 3's free of x; stream 2's re-allocation of x (4) then
 * looked next and went first, tied with that free, as a reuse of a live
 * address. From tests/progs/stress -t 16 (one run in ~20): the address
 * must still come out freed before it is allocated again. */
static void test_versions_implicit_duplicate_does_not_reorder_a_handoff(void **state)
{
    (void)state;
    uint64_t x, z;
    colliding_pair(&x, &z);
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &ver_cfg);
    pst_writer_time(w, 1000);
    put_ver(w, 1, PST_EV_MALLOC, z, 8, 1);
    put_ver(w, 2, PST_EV_MALLOC, x, 8, 2);
    pst_writer_time(w, 1500);
    put_ver(w, 1, PST_EV_FREE, z, 0, 0);       /* implicit: 2 (raced with stream 2's) */
    pst_writer_time(w, 2000);
    put_ver(w, 3, PST_EV_FREE, x, 0, 3);       /* x handed to stream 3 */
    put_ver(w, 2, PST_EV_MALLOC, x, 8, 4);     /* and back to stream 2 */
    pst_writer_time(w, 3000);
    put_ver(w, 2, PST_EV_FREE, x, 0, 0);       /* implicit: 5 */
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *o = heap_order(m.p, m.len, &st);
    char want[256];
    snprintf(want, sizeof want, "1:m:%llx 2:m:%llx 1:f:%llx 3:f:%llx 2:m:%llx 2:f:%llx", (unsigned long long)z,
             (unsigned long long)x, (unsigned long long)z, (unsigned long long)x, (unsigned long long)x,
             (unsigned long long)x);
    assert_string_equal(o, want);
    assert_int_equal(st.unknown_frees, 0);
    assert_int_equal(st.live, 0);
    free(o);
    free(m.p);
}

/* A thread preempted between the load and the store of a counter stores a
 * stale version over the versions other threads took meanwhile: the
 * counter goes back and hands out versions already seen (stream 2's run on
 * z, then stream 1's store of 1). Every later version of x is behind the
 * reader's count, so only time orders x's handoff, and the tie went the
 * wrong way. From tests/progs/stress -t 16: the free still comes first. */
static void test_versions_counter_gone_back_does_not_reorder_a_handoff(void **state)
{
    (void)state;
    uint64_t x, z;
    colliding_pair(&x, &z);
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &ver_cfg);
    pst_writer_time(w, 1000);
    put_ver(w, 1, PST_EV_MALLOC, x, 8, 1);     /* loaded 0; its store of 1 lands last */
    pst_writer_time(w, 1100);
    put_ver(w, 2, PST_EV_MALLOC, z, 8, 1);     /* loaded 0 too */
    put_ver(w, 2, PST_EV_FREE, z, 0, 0);       /* 2 */
    put_ver(w, 2, PST_EV_MALLOC, z, 8, 0);     /* 3 */
    put_ver(w, 2, PST_EV_FREE, z, 0, 0);       /* 4; then stream 1 stores 1 */
    pst_writer_time(w, 2000);
    put_ver(w, 3, PST_EV_FREE, x, 0, 2);       /* x handed to stream 3: the counter said 1 */
    put_ver(w, 1, PST_EV_MALLOC, x, 8, 3);     /* and back to stream 1 */
    pst_writer_time(w, 3000);
    put_ver(w, 1, PST_EV_FREE, x, 0, 0);       /* implicit: 4 */
    pst_writer_close(w);
    mem_done(&m);
    pst_status_t st;
    char *o = heap_order(m.p, m.len, &st);
    char want[256];
    snprintf(want, sizeof want, "1:m:%llx 2:m:%llx 2:f:%llx 2:m:%llx 2:f:%llx 3:f:%llx 1:m:%llx 1:f:%llx",
             (unsigned long long)x, (unsigned long long)z, (unsigned long long)z, (unsigned long long)z,
             (unsigned long long)z, (unsigned long long)x, (unsigned long long)x, (unsigned long long)x);
    assert_string_equal(o, want);
    assert_int_equal(st.unknown_frees, 0);
    assert_int_equal(st.live, 0);
    free(o);
    free(m.p);
}

static void test_golden_trace_decodes_to_expected_listing_and_writer_reproduces_it(void **state)
{
    (void)state;
    membuf_t m;
    make_golden(&m);
    if (getenv("PST_GOLDEN_UPDATE")) {
        FILE *f = fopen("tests/golden/small_v1.pstg", "wb");
        assert_non_null(f);
        fwrite(m.p, 1, m.len, f);
        fclose(f);
        char *l = listing(m.p, m.len, NULL);
        f = fopen("tests/golden/small_v1.txt", "w");
        assert_non_null(f);
        fputs(l, f);
        fclose(f);
        free(l);
    }
    size_t glen = 0, tlen = 0;
    char *golden = read_file("small_v1.pstg", &glen);
    char *text = read_file("small_v1.txt", &tlen);
    assert_non_null(golden);
    assert_non_null(text);
    /* the reader decodes the committed bytes to the committed listing */
    pst_status_t st;
    char *l = listing(golden, glen, &st);
    assert_string_equal(l, text);
    assert_true(st.end_seen && !st.truncated && !st.corrupt);
    assert_int_equal(st.lost, 3);
    /* and today's writer produces the same bytes */
    assert_int_equal(m.len, glen);
    assert_memory_equal(m.p, golden, glen);
    free(l);
    free(golden);
    /* A file written before SYNC chunks (format 1.0) reads the same. */
    golden = read_file("small_v1_0.pstg", &glen);
    assert_non_null(golden);
    l = listing(golden, glen, &st);
    assert_string_equal(l, text);
    assert_true(st.complete);
    free(l);
    free(golden);
    free(text);
    free(m.p);
}

/* A quiet thread (stream 2: one event at the start, one at the end) would
 * hold every event of a busy one in the reader's queue until the window
 * passes. SYNC chunks (pst_writer_flush) release them: with a window longer
 * than the whole trace, only SYNC can keep the queue short. */
/* ---- versioned heap churn: the head decoder and the merge's fast path ---- */

/* What the generator wrote for one event of one stream. */
typedef struct wev { uint8_t type; uint32_t stack; uint64_t f[3]; } wev_t;
typedef struct wstream { wev_t *e; size_t n, cap; } wstream_t;

/* Versioned heap churn as an interposer writes it, at today's minor
 * (recent-address coding): 3 streams, each allocating in a region of its
 * own; ~3% of the blocks freed by another stream (that free and the
 * owner's next event on that counter carry VER records; every other event
 * has implicit versions, exactly as a writer omits them); reallocs in place
 * and moved, calloc, stacks on the allocations; sizes and addresses whose
 * varints take 1 to 10 bytes (far addresses: the long A form) so records
 * end at every position of a chunk and of a stream's byte queue; a few
 * frees of addresses never allocated. Small chunks, a SYNC every 300 events
 * (the queues drain and refill: their buffers are compacted and grown).
 * Returns what was written per stream and the unknown frees. */
static wstream_t *build_versioned_churn(membuf_t *m, uint32_t chunk_bytes, int zstd_level, uint64_t n,
                                        uint64_t *unknown)
{
    enum { NS = 3, NA = 24 };
    pst_writer_cfg_t cfg = ver_cfg;
    cfg.chunk_bytes = chunk_bytes;
    cfg.zstd_level = zstd_level;
    pst_writer_t *w = mem_writer(m, &cfg);
    const uint64_t fr[2] = { 0x401000, 0x402000 };
    uint32_t stk = pst_writer_stack(w, fr, 2);
    static uint16_t vc[1u << PST_VSLOT_BITS];
    static uint32_t vby[1u << PST_VSLOT_BITS];
    memset(vc, 0, sizeof vc);
    memset(vby, 0, sizeof vby);
    wstream_t *ws = calloc(NS + 1, sizeof *ws);
    uint64_t live[NS + 1][NA];
    uint32_t nlive[NS + 1] = { 0 };
    uint64_t x = 0x9E3779B97F4A7C15ull, t = 1000, next_addr[NS + 1];
    for (uint32_t s = 1; s <= NS; s++) next_addr[s] = 0x7f0000000000ull + (uint64_t)s * 0x10000000ull;
    *unknown = 0;
    for (uint64_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        uint32_t s = 1 + (uint32_t)(x % NS), o = s;
        unsigned r = (unsigned)(x >> 8) % 100;
        uint64_t size = (x >> 20) % 200 + 1;
        if (r < 3) size = (uint64_t)1 << (7 * ((x >> 40) % 10));          /* 1..10-byte varints */
        pst_event_t ev = { .stack = (x >> 33) % 4 ? stk : 0 };
        uint64_t a[2] = { 0, 0 };
        unsigned na = 0;
        if (r < 2) {                                                      /* a free nobody allocated */
            ev.type = PST_EV_FREE;
            ev.stack = 0;
            ev.f[0] = a[na++] = 0x10000000ull + (x >> 36) * 16;
            (*unknown)++;
        } else if (nlive[s] < 4 || (nlive[s] < NA && r < 45)) {          /* malloc or calloc */
            uint64_t ad = next_addr[s];
            /* far (long varints), near, or 8 bytes off the 16-byte grid (the long A form) */
            next_addr[s] += (r % 7 == 0) ? ((x >> 24) | 1) << 16 : 16 * (1 + (x >> 50) % 8) + (r % 11 == 0 ? 8 : 0);
            ev.type = r % 5 == 0 ? PST_EV_CALLOC : PST_EV_MALLOC;
            ev.f[0] = a[na++] = ad;
            if (ev.type == PST_EV_CALLOC) { ev.f[1] = 1 + r % 3; ev.f[2] = size; } else ev.f[1] = size;
            live[s][nlive[s]++] = ad;
        } else {
            uint32_t k = (uint32_t)((x >> 12) % nlive[s]);
            uint64_t ad = live[s][k];
            if (r < 65) {                                                 /* realloc: in place or moved */
                uint64_t na2 = r % 2 ? ad : next_addr[s];
                if (na2 != ad) next_addr[s] += 16 * (1 + (x >> 52) % 8);
                ev.type = PST_EV_REALLOC;
                ev.f[0] = a[na++] = ad;
                ev.f[1] = na2;
                ev.f[2] = size;
                if (na2 != ad) a[na++] = na2;
                live[s][k] = na2;
            } else {                                                      /* free, maybe by another stream */
                if (r >= 97) o = 1 + (s + (uint32_t)(x >> 44) % (NS - 1)) % NS;
                ev.type = PST_EV_FREE;
                ev.stack = 0;
                ev.f[0] = a[na++] = ad;
                live[s][k] = live[s][--nlive[s]];
            }
        }
        /* versions as the interposer numbers them: VER records when a
         * counter was last bumped by another stream, else implicit */
        int expl = 0;
        for (unsigned j = 0; j < na; j++) {
            uint32_t sl = pst_vslot(a[j]);
            if (vby[sl] && vby[sl] != o) expl = 1;
            vc[sl] = (uint16_t)(vc[sl] == 65535 ? 1 : vc[sl] + 1);
            vby[sl] = o;
            ev.ver[j] = vc[sl];
        }
        if (i < NS) expl = 1;                  /* each stream's first event: its stream has versions */
        ev.n_ver = expl ? na : 0;
        pst_writer_time(w, t += 200);
        assert_int_equal(pst_writer_event(w, o, &ev), 0);
        wstream_t *q = &ws[o];
        if (q->n == q->cap) q->e = realloc(q->e, (q->cap = q->cap ? q->cap * 2 : 256) * sizeof *q->e);
        q->e[q->n++] = (wev_t){ ev.type, ev.stack, { ev.f[0], ev.f[1], ev.f[2] } };
        if (i % 300 == 299) assert_int_equal(pst_writer_flush(w), 0);
    }
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(m);
    return ws;
}

/* Every event of the versioned churn, by plain and by compressed (column
 * form) chunks, read back with the fields that were written, each stream in
 * its order; no event unordered or ahead of its version; the unknown frees
 * counted. */
static void test_versioned_churn_reads_back_the_fields_written(void **state)
{
    (void)state;
    const struct { uint32_t chunk; int zstd; } cases[] = { { 97, 0 }, { 301, 0 }, { 4096, 3 }, { 65536, 3 } };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        membuf_t m;
        uint64_t unknown, n = 20000;
        wstream_t *ws = build_versioned_churn(&m, cases[c].chunk, cases[c].zstd, n, &unknown);
        int err = 0;
        pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
        assert_non_null(r);
        size_t next[4] = { 0, 0, 0, 0 };
        pst_event_t ev;
        uint64_t k = 0;
        int rc;
        while ((rc = pst_next(r, &ev)) > 0) {
            if (ev.type == PST_EV_THREAD_START) continue;
            assert_true(ev.stream >= 1 && ev.stream <= 3);
            wstream_t *q = &ws[ev.stream];
            assert_true(next[ev.stream] < q->n);
            const wev_t *d = &q->e[next[ev.stream]++];
            assert_int_equal(ev.seq, next[ev.stream]);      /* seq 0: the stream's THREAD_START */
            assert_int_equal(ev.type, d->type);
            assert_int_equal(ev.stack, d->stack);
            const char *lay = pst_event_layout(ev.type);
            for (unsigned i = 0; lay[i]; i++) assert_int_equal(ev.f[i], d->f[i]);
            k++;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(k, n);
        for (int i = 1; i <= 3; i++) assert_int_equal(next[i], ws[i].n);
        const pst_status_t *st = pst_status(r);
        assert_true(st->complete);
        assert_int_equal(st->unknown_frees, unknown);
        assert_int_equal(st->unordered, 0);
        assert_int_equal(st->ver_gaps, 0);
        if (cases[c].zstd) {   /* compressed EVENTS chunks were read */
            const uint8_t *b = (const uint8_t *)m.p;
            uint32_t tlv = (uint32_t)b[12] | (uint32_t)b[13] << 8 | (uint32_t)b[14] << 16 | (uint32_t)b[15] << 24;
            size_t p = PST_FILE_HDR_FIXED + tlv, nz = 0;
            while (p + PST_CHUNK_HDR <= m.len) {
                pst_chunk_hdr_t h;
                pst_get_chunk_hdr(b + p, &h);
                nz += h.kind == PST_CHUNK_EVENTS && (h.flags & PST_CHUNK_ZSTD);
                p += PST_CHUNK_HDR + h.len;
            }
            assert_true(nz > 10);
        }
        pst_close(r);
        for (int i = 0; i <= 3; i++) free(ws[i].e);
        free(ws);
        free(m.p);
    }
}

static size_t quiet_thread_peak_queue(int with_sync)
{
    membuf_t m;
    pst_writer_t *w = mem_writer(&m, &(pst_writer_cfg_t){ .pid = 7 });
    pst_writer_time(w, 10);
    PST_EMIT(w, 2, PST_EV_MALLOC, 0x900000, 32);
    for (uint64_t i = 0; i < 20000; i++) {
        pst_writer_time(w, 100 + i * 1000);
        PST_EMIT(w, 1, PST_EV_MALLOC, 0x100000 + (i % 64) * 64, 48);
        PST_EMIT(w, 1, PST_EV_FREE, 0x100000 + (i % 64) * 64);
        if (i % 500 == 499) {
            if (with_sync) pst_writer_flush(w);
            else pst_writer_flush_stream(w, 1);
        }
    }
    PST_EMIT(w, 2, PST_EV_FREE, 0x900000);
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(&m);
    int err;
    pst_reader_t *r = pst_open_mem(m.p, m.len, &err);
    assert_non_null(r);
    pst_reader_set_window(r, UINT64_MAX / 4);
    pst_event_t ev;
    uint64_t n = 0, last = 0;
    while (pst_next(r, &ev) > 0) {
        assert_true(ev.ts >= last);     /* SYNC never hands an event out early */
        last = ev.ts;
        n++;
    }
    const pst_status_t *st = pst_status(r);
    assert_true(st->complete);
    assert_int_equal(n, 2 + 40000 + 2);   /* two THREAD_STARTs counted as events */
    assert_int_equal(st->late, 0);
    size_t peak = st->peak_queued;
    pst_close(r);
    free(m.p);
    return peak;
}

static void test_sync_chunks_bound_the_queue_behind_a_quiet_thread(void **state)
{
    (void)state;
    size_t with = quiet_thread_peak_queue(1), without = quiet_thread_peak_queue(0);
    assert_true(without >= 40000);      /* control: everything waited for the end */
    assert_true(with <= 2000);          /* about one flush (1000 events) */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_multi_stream_round_trip_gives_exact_events),
        cmocka_unit_test(test_header_strings_stacks_modules_are_readable),
        cmocka_unit_test(test_file_reader_matches_memory_reader_across_read_blocks),
        cmocka_unit_test(test_truncation_at_every_offset_keeps_complete_chunks),
        cmocka_unit_test(test_every_flipped_byte_is_caught_or_harmless),
        cmocka_unit_test(test_random_bytes_never_crash),
        cmocka_unit_test(test_wrong_magic_and_version_are_refused),
        cmocka_unit_test(test_unknown_header_tag_is_skipped),
        cmocka_unit_test(test_unknown_chunk_kind_is_skipped),
        cmocka_unit_test(test_missing_end_chunk_is_reported_as_truncated),
        cmocka_unit_test(test_stream_offset_gap_stops_at_that_chunk),
        cmocka_unit_test(test_unknown_event_type_makes_the_chunk_corrupt),
        cmocka_unit_test(test_mapping_events_of_minor_4_read_back),
        cmocka_unit_test(test_minor_3_trace_reads_and_cannot_hold_minor_4_events),
        cmocka_unit_test(test_versions_order_one_address_across_streams),
        cmocka_unit_test(test_versions_of_another_address_do_not_hold_an_event),
        cmocka_unit_test(test_versions_lost_do_not_hold_the_trace),
        cmocka_unit_test(test_versions_realloc_released_block_stamped_later),
        cmocka_unit_test(test_versions_implicit_follow_their_streams_explicit_one),
        cmocka_unit_test(test_versions_implicit_duplicate_does_not_reorder_a_handoff),
        cmocka_unit_test(test_versions_counter_gone_back_does_not_reorder_a_handoff),
        cmocka_unit_test(test_cycle_counts_order_one_tick_across_streams),
        cmocka_unit_test(test_two_streams_with_interleaved_times_come_out_by_time),
        cmocka_unit_test(test_free_in_other_stream_comes_before_reuse_of_its_address),
        cmocka_unit_test(test_causality_drains_the_freeing_stream_up_to_the_free),
        cmocka_unit_test(test_pool_events_come_out_in_pool_seq_order_across_streams),
        cmocka_unit_test(test_long_trace_with_few_live_objects_keeps_the_queue_small),
        cmocka_unit_test(test_queues_are_given_back_when_the_last_event_is_out),
        cmocka_unit_test(test_single_stream_fast_path_hands_out_every_event_in_order),
        cmocka_unit_test(test_single_stream_counts_reuse_of_a_live_address),
        cmocka_unit_test(test_second_stream_after_a_long_single_stream_still_orders_frees),
        cmocka_unit_test(test_many_queued_cross_stream_frees_each_go_before_the_reuse),
        cmocka_unit_test(test_queues_spanning_many_chunks_match_straight_decoding),
        cmocka_unit_test(test_ts_records_at_chunk_ends_and_chunks_of_only_ts),
        cmocka_unit_test(test_ids_stay_valid_until_the_next_call_across_streams),
        cmocka_unit_test(test_long_file_trace_recycles_queue_bytes_and_matches_memory),
        cmocka_unit_test(test_versioned_churn_reads_back_the_fields_written),
        cmocka_unit_test(test_sync_chunks_bound_the_queue_behind_a_quiet_thread),
        cmocka_unit_test(test_golden_trace_decodes_to_expected_listing_and_writer_reproduces_it),
        cmocka_unit_test(test_shared_outer_frames_are_kept_once),
        cmocka_unit_test(test_stacks_coded_as_tails_read_back_as_written),
        cmocka_unit_test(test_stack_tail_without_its_stack_is_corrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
