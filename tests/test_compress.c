/* test_compress.c — format 1.5: the recent-address coding of A fields and
 * zstd-compressed chunks, through the encoder/decoder kit (format.h), the
 * writer and the reader.
 *
 * The same events are written as minor 4 (delta coding, version-1 chunks),
 * minor 5 uncompressed and minor 5 compressed, and must read back as the
 * same listing event for event; a compressed trace cut anywhere reads as
 * the complete chunks before the cut; a damaged compressed chunk (CRC
 * fixed up, so only the frame is wrong) is reported as corrupt at its
 * offset, after every event of the chunks before it.
 *
 * The column form of compressed EVENTS (columns.c): split and join give
 * back every payload byte for byte, the writer's and made-up ones (no TS,
 * only TS, a record cut at the end, an unknown type, TS records a writer
 * would not write); a damaged column is an error, never a read or write
 * outside the buffers, and in a trace the chunk's damage at its offset;
 * chunks compressed without columns (1.5 writers) read as before.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zstd.h>

#include "columns.h"
#include "poolscope/error.h"
#include "poolscope/format.h"
#include "poolscope/reader.h"
#include "poolscope/writer.h"

/* ---- helpers ------------------------------------------------------------------ */

#include "trace_listing.h"

/* with the versions: the codings must carry them alike */
static char *listing(const void *buf, size_t len, pst_status_t *st) { return trace_listing(buf, len, st, 1); }

static uint64_t rng;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* A program-like trace: 3 streams, heap calls that reuse freed blocks (of
 * their own and of other threads, as a producer/consumer does), realloc in
 * place and away, mmap/munmap, failed calls, an unaligned brk, pool and KV
 * events with id lists, markers with payloads, stacks and strings. */
static void write_program(membuf_t *m, uint16_t minor, int zlevel, uint32_t chunk_bytes)
{
    pst_writer_cfg_t cfg = { .pid = 77, .ppid = 1, .stacks = PST_STACKS_FP, .depth = 8, .tool = "test_compress",
                             .chunk_bytes = chunk_bytes, .tick_ns = 1000, .minor = minor, .zstd_level = zlevel };
    pst_writer_t *w = mem_writer(m, &cfg);
    rng = 0x9e3779b97f4a7c15ull;
    uint64_t live[3][64] = { { 0 } };
    uint64_t top = 0x55550000a000ull;
    uint64_t fr[4] = { 0x401000, 0x402000, 0x403000, 0x404000 };
    uint32_t stk[4];
    for (int i = 0; i < 4; i++) { fr[0] += 0x10; stk[i] = pst_writer_stack(w, fr, 4); }
    uint32_t ids[300];
    for (int i = 0; i < 300; i++) ids[i] = (uint32_t)(i * 7 % 1000);
    for (int k = 0; k < 20000; k++) {
        uint32_t s = 1 + (uint32_t)(rnd() % 3);
        uint64_t r = rnd();
        uint64_t *slot = &live[s - 1][r % 64];
        pst_event_t ev = { .stack = stk[r % 4] };
        switch ((r >> 8) % 16) {
        case 0: case 1: case 2: case 3: case 4:
            if (*slot) {
                ev.type = PST_EV_FREE; ev.f[0] = *slot; ev.stack = 0;
                /* handed to another thread half the time: its free there */
                pst_writer_event(w, (r >> 20) & 1 ? s : 1 + s % 3, &ev);
                *slot = 0;
                break;
            }
            /* fall through */
        case 5: case 6: case 7: case 8: {
            uint64_t a = (r >> 30) % 3 == 0 && live[s - 1][(r >> 40) % 64] == 0 ? top - 16 * ((r >> 12) % 40)
                                                                             : (top += 16 * (1 + (r >> 16) % 30));
            ev.type = PST_EV_MALLOC; ev.f[0] = a; ev.f[1] = (r >> 24) % 500;
            pst_writer_event(w, s, &ev);
            if (!*slot) *slot = a;
            break;
        }
        case 9:
            if (*slot) {   /* in place, then away */
                ev.type = PST_EV_REALLOC; ev.f[0] = *slot; ev.f[1] = *slot; ev.f[2] = 64;
                pst_writer_event(w, s, &ev);
                ev.f[1] = top += 256; ev.f[0] = *slot; ev.f[2] = 200;
                pst_writer_event(w, s, &ev);
                *slot = ev.f[1];
            }
            break;
        case 10:
            PST_EMIT(w, s, PST_EV_MMAP, 0x7f0000000000ull + ((r >> 20) % 64) * 0x100000, 1 << 20, 3, 0x22, (uint64_t)-1, 0);
            PST_EMIT(w, s, PST_EV_MUNMAP, 0x7f0000000000ull + ((r >> 26) % 64) * 0x100000, 1 << 20);
            break;
        case 11:
            PST_EMIT(w, s, PST_EV_MALLOC, 0, (uint64_t)1 << 40);   /* failed */
            PST_EMIT(w, s, PST_EV_BRK, 0x5555000123ull + (r % 1000), 0);
            PST_EMIT(w, s, PST_EV_SBRK, (uint64_t)(int64_t)-4096, (uint64_t)-1);
            break;
        case 12: {
            pst_event_t kv = { .type = PST_EV_KVB_ALLOC, .f = { 1, (uint64_t)k, s, 3, 0, 16 },
                               .ids = ids + r % 10, .n_ids = 1 + (uint32_t)(r % 290) };
            pst_writer_event(w, s, &kv);
            break;
        }
        case 13: {
            pst_event_t mk = { .type = PST_EV_MARK_BEGIN, .f = { 0, (uint64_t)k }, .str = (r & 1) ? "forward" : "decode",
                               .n_payload = 3, .payload = { -1, (int64_t)k, INT64_MIN } };
            pst_writer_event(w, s, &mk);
            break;
        }
        case 14: {
            pst_event_t ve = { .type = PST_EV_MALLOC, .f = { top += 32, 24 }, .n_ver = 1, .ver = { (uint16_t)(k + 1) } };
            pst_writer_event(w, s, &ve);
            break;
        }
        default:
            PST_EMIT(w, s, PST_EV_POOL_ACQUIRE, 1, (uint64_t)k, 0, r % 100, 64, 64, 256, 256, 1);
            break;
        }
        if (k % 3000 == 2999) pst_writer_flush(w);
    }
    assert_int_equal(pst_writer_close(w), 0);
    mem_done(m);
}

/* The chunks of a trace: offsets of their headers, n returned. */
static size_t chunk_offsets(const uint8_t *b, size_t len, size_t *off, size_t cap)
{
    size_t pos = PST_FILE_HDR_FIXED + (b[12] | b[13] << 8 | b[14] << 16 | (size_t)b[15] << 24), n = 0;
    while (pos + PST_CHUNK_HDR <= len && n < cap) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + pos, &h);
        off[n++] = pos;
        pos += PST_CHUNK_HDR + h.len;
    }
    return n;
}

/* ---- the coding ----------------------------------------------------------------- */

static size_t enc1(pst_enc_t *e, uint8_t *buf, unsigned type, uint64_t a, uint64_t b, uint64_t c)
{
    pst_event_t ev = { .type = (uint8_t)type, .f = { a, b, c } };
    uint8_t *q = pst_encode_event(e, buf, &ev);
    assert_non_null(q);
    return (size_t)(q - buf);
}

static void test_recent_coding_gives_reuse_one_byte_and_decodes_back(void **state)
{
    (void)state;
    static pst_enc_t e, d;
    static uint16_t idx[PST_RECENT_IDX];
    pst_enc_init(&e, PST_CODING_RECENT, idx);
    pst_enc_init(&d, PST_CODING_RECENT, NULL);
    uint8_t buf[4096];
    size_t n = 0, at[16];
    int k = 0;
    const uint64_t A = 0x7f00001000, B = 0x7f00001040;
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_MALLOC, A, 48, 0);
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_MALLOC, B, 48, 0);
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_FREE, A, 0, 0);      /* A is 1 field back */
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_MALLOC, A, 48, 0);   /* the block just freed: index 0 */
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_REALLOC, A, A, 96);  /* in place: old index 0, ret index 0 */
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_FREE, 0x7f00001003, 0, 0);   /* unaligned: 0 then zigzag */
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_MALLOC, (uint64_t)-1, 1, 0);  /* a delta of ~2^64 */
    at[k++] = n; n += enc1(&e, buf + n, PST_EV_MALLOC, 0, 1, 0);            /* a failed call */
    at[k] = n;
    assert_int_equal(buf[at[2] + 1], 1 << 2 | 2);
    assert_int_equal(buf[at[3] + 1], 0 << 2 | 2);
    assert_int_equal(at[4 + 1] - at[4], 4);              /* type, 2, 2, size */
    assert_int_equal(buf[at[4] + 1], 2);
    assert_int_equal(buf[at[4] + 2], 2);
    assert_int_equal(buf[at[5] + 1], 0);
    const uint64_t want[][2] = { { A, 48 }, { B, 48 }, { A, 0 }, { A, 48 }, { A, A }, { 0x7f00001003, 0 },
                                 { (uint64_t)-1, 1 }, { 0, 1 } };
    const uint8_t *p = buf;
    uint32_t idbuf[PST_MAX_IDS];
    for (int i = 0; i < k; i++) {
        pst_event_t ev;
        memset(&ev, 0, sizeof ev);
        p = pst_decode_event(&d, p, buf + n, &ev, idbuf);
        assert_non_null(p);
        assert_true(ev.f[0] == want[i][0]);
        if (ev.type != PST_EV_FREE) assert_true(ev.f[1] == want[i][1]);
    }
    assert_ptr_equal(p, buf + n);
    /* 256 other addresses later A is out of the list: a delta again */
    for (int i = 0; i < PST_RECENT; i++) n += enc1(&e, buf, PST_EV_FREE, 0x100000 + 16 * (uint64_t)i, 0, 0);
    size_t l = enc1(&e, buf, PST_EV_FREE, A, 0, 0);
    assert_int_equal(buf[1] & 3, 1);   /* an aligned delta */
    (void)l;
}

static void test_recent_coding_rejects_reserved_and_out_of_range_codes(void **state)
{
    (void)state;
    static pst_enc_t d;
    pst_enc_init(&d, PST_CODING_RECENT, NULL);
    uint32_t idbuf[PST_MAX_IDS];
    pst_event_t ev;
    uint8_t reserved[] = { PST_EV_FREE, 4 };                 /* low bits 00, not 0 */
    assert_null(pst_decode_event(&d, reserved, reserved + 2, &ev, idbuf));
    uint8_t far[] = { PST_EV_FREE, 0x82, 0x08 };             /* index 256 */
    assert_null(pst_decode_event(&d, far, far + 3, &ev, idbuf));
    uint8_t cut[] = { PST_EV_FREE, 0 };                      /* unaligned with no delta */
    assert_null(pst_decode_event(&d, cut, cut + 2, &ev, idbuf));
    static pst_enc_t e;
    pst_enc_init(&e, PST_CODING_RECENT, NULL);                /* an encoder without its index */
    pst_event_t m = { .type = PST_EV_MALLOC, .f = { 16, 1 } };
    uint8_t out[64];
    assert_null(pst_encode_event(&e, out, &m));
}

/* ---- the writer and the reader ------------------------------------------------- */

/* Compressed EVENTS chunks of m whose payload is in column form. */
static size_t column_chunks(const membuf_t *m)
{
    const uint8_t *b = (const uint8_t *)m->p;
    static size_t off[8192];
    size_t n = chunk_offsets(b, m->len, off, 8192), k = 0;
    for (size_t i = 0; i < n; i++) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off[i], &h);
        if (h.kind != PST_CHUNK_EVENTS || !(h.flags & PST_CHUNK_ZSTD)) continue;
        const uint8_t *pl = b + off[i] + PST_CHUNK_HDR, *pend = pl + h.len;
        uint64_t raw = 0;
        const uint8_t *f = pst_get_varint(pl, pend, &raw);
        assert_non_null(f);
        uint8_t *c = malloc((size_t)raw + 1);
        assert_int_equal(ZSTD_decompress(c, (size_t)raw, f, (size_t)(pend - f)), raw);
        k += pst_cols_is_split(c, (size_t)raw) != 0;
        free(c);
    }
    return k;
}

static void test_compressed_trace_reads_event_for_event_as_minor_4_and_uncompressed(void **state)
{
    (void)state;
    membuf_t m4, m5, mz5, mz;
    write_program(&m4, 4, 0, 4096);
    write_program(&m5, 5, 0, 4096);
    write_program(&mz5, 5, 3, 4096);   /* as 1.5 writers compressed: no column form */
    write_program(&mz, 6, 3, 4096);
    pst_status_t s4, s5, sz5, sz;
    char *l4 = listing(m4.p, m4.len, &s4), *l5 = listing(m5.p, m5.len, &s5), *lz = listing(mz.p, mz.len, &sz);
    char *lz5 = listing(mz5.p, mz5.len, &sz5);
    assert_true(s4.complete && s5.complete && sz5.complete && sz.complete);
    assert_true(s4.events > 20000);
    assert_int_equal(s4.events, sz.events);
    assert_string_equal(l4, l5);
    assert_string_equal(l4, lz5);
    assert_string_equal(l4, lz);
    assert_int_equal(column_chunks(&mz5), 0);
    assert_true(column_chunks(&mz) > 10);
    free(lz5);
    free(mz5.p);
    /* compressed chunks are there, version 2, and save bytes */
    size_t off[4096];
    size_t n = chunk_offsets((const uint8_t *)mz.p, mz.len, off, 4096), nz = 0;
    for (size_t i = 0; i < n; i++) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr((const uint8_t *)mz.p + off[i], &h);
        if (h.kind == PST_CHUNK_EVENTS || h.kind == PST_CHUNK_META) assert_int_equal(h.version, PST_CHUNK_V2);
        nz += (h.flags & PST_CHUNK_ZSTD) != 0;
    }
    assert_true(nz > 10);
    assert_true(mz.len * 2 < m5.len);
    assert_true(m5.len < m4.len);   /* the coding alone already saves */
    free(l4); free(l5); free(lz);
    free(m4.p); free(m5.p); free(mz.p);
}

static void test_truncated_compressed_trace_reads_its_complete_chunks(void **state)
{
    (void)state;
    membuf_t mz;
    write_program(&mz, 6, 3, 8192);
    const uint8_t *b = (const uint8_t *)mz.p;
    size_t off[4096];
    size_t n = chunk_offsets(b, mz.len, off, 4096);
    assert_true(n > 8);
    for (size_t i = 1; i < n; i += n / 8) {
        pst_status_t at_boundary, inside;
        char *want = listing(b, off[i], &at_boundary);
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off[i], &h);
        for (size_t cut = 1; cut < PST_CHUNK_HDR + h.len; cut += 1 + (PST_CHUNK_HDR + h.len) / 5) {
            char *got = listing(b, off[i] + cut, &inside);
            assert_true(inside.truncated);
            assert_false(inside.corrupt);
            assert_string_equal(got, want);
            free(got);
        }
        free(want);
    }
    free(mz.p);
}

/* Damage the payload of compressed chunk i in a copy and fix its CRC, so
 * only the zstd frame (or its length) is wrong. */
static uint8_t *damaged(const membuf_t *m, size_t at, size_t byte, uint8_t xor_with)
{
    uint8_t *c = malloc(m->len);
    memcpy(c, m->p, m->len);
    pst_chunk_hdr_t h;
    pst_get_chunk_hdr(c + at, &h);
    c[at + PST_CHUNK_HDR + byte % h.len] ^= xor_with;
    uint32_t crc = pst_crc32c(0, c + at + PST_CHUNK_HDR, h.len);
    pst_put_chunk_hdr_v(c + at, h.kind, h.version, h.flags, h.stream, h.len, crc);
    return c;
}

static void test_corrupt_compressed_chunk_is_damage_at_its_offset(void **state)
{
    (void)state;
    membuf_t mz;
    write_program(&mz, 6, 3, 8192);
    const uint8_t *b = (const uint8_t *)mz.p;
    size_t off[4096];
    size_t n = chunk_offsets(b, mz.len, off, 4096), tried = 0;
    for (size_t i = 0; i < n && tried < 6; i++) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off[i], &h);
        if (!(h.flags & PST_CHUNK_ZSTD) || h.kind != PST_CHUNK_EVENTS) continue;
        tried++;
        pst_status_t before;
        char *want = listing(b, off[i], &before);   /* everything before the damage */
        const size_t bytes[] = { 0, 1, 5, h.len / 2, h.len - 1 };   /* raw_len, frame magic, header, block, end */
        for (size_t k = 0; k < sizeof bytes / sizeof *bytes; k++) {
            uint8_t *c = damaged(&mz, off[i], bytes[k], k == 0 ? 0x7f : 0xa5);
            pst_status_t st;
            char *got = listing(c, mz.len, &st);
            /* the frame's checksum catches what the CRC (fixed up here) cannot */
            assert_true(st.corrupt);
            assert_int_equal(st.corrupt_offset, off[i]);
            assert_string_equal(st.corrupt_reason, "undecodable compressed chunk");
            assert_string_equal(got, want);   /* every event of the chunks before it */
            free(got);
            free(c);
        }
        free(want);
    }
    assert_true(tried > 0);
    /* the declared length past the limit: corrupt, at that chunk */
    for (size_t i = 0; i < n; i++) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off[i], &h);
        if (!(h.flags & PST_CHUNK_ZSTD)) continue;
        uint8_t *c = malloc(mz.len + 8);
        memcpy(c, b, off[i] + PST_CHUNK_HDR);
        uint64_t raw;
        const uint8_t *q = pst_get_varint(b + off[i] + PST_CHUNK_HDR, b + off[i] + PST_CHUNK_HDR + h.len, &raw);
        size_t vl = (size_t)(q - (b + off[i] + PST_CHUNK_HDR));
        uint8_t *w = pst_put_varint(c + off[i] + PST_CHUNK_HDR, (uint64_t)PST_MAX_CHUNK + 1);
        size_t nl = (size_t)(w - (c + off[i] + PST_CHUNK_HDR));
        memcpy(w, q, h.len - vl);
        uint32_t len = (uint32_t)(h.len - vl + nl);
        pst_put_chunk_hdr_v(c + off[i], h.kind, h.version, h.flags, h.stream, len,
                            pst_crc32c(0, c + off[i] + PST_CHUNK_HDR, len));
        pst_status_t st;
        char *got = listing(c, off[i] + PST_CHUNK_HDR + len, &st);
        assert_true(st.corrupt);
        assert_int_equal(st.corrupt_offset, off[i]);
        assert_string_equal(st.corrupt_reason, "undecodable compressed chunk");
        free(got);
        free(c);
        break;
    }
    free(mz.p);
}

static void test_version_2_chunk_in_a_minor_4_file_is_corrupt(void **state)
{
    (void)state;
    membuf_t mz;
    write_program(&mz, 6, 3, 8192);
    uint8_t *c = malloc(mz.len);
    memcpy(c, mz.p, mz.len);
    c[10] = 4;   /* the header claims minor 4 */
    pst_status_t st;
    char *got = listing(c, mz.len, &st);
    assert_true(st.corrupt);
    assert_string_equal(st.corrupt_reason, "unknown chunk version");
    assert_int_equal(st.events, 0);
    free(got);
    free(c);
    free(mz.p);
}

static void test_inflate_passes_version_1_through_and_checks_frames(void **state)
{
    (void)state;
    pst_inflate_t z = { 0 };
    const uint8_t pl[] = { 1, 2, 3 };
    pst_chunk_hdr_t h = { .kind = PST_CHUNK_EVENTS, .version = PST_CHUNK_V1, .flags = PST_CHUNK_ZSTD, .len = 3 };
    const uint8_t *out;
    size_t len;
    assert_int_equal(pst_chunk_inflate(&z, &h, pl, &out, &len), 0);   /* version 1: flags mean nothing */
    assert_ptr_equal(out, pl);
    assert_int_equal(len, 3);
    h.version = PST_CHUNK_V2;
    assert_int_equal(pst_chunk_inflate(&z, &h, pl, &out, &len), PSC_ECORRUPT);   /* not a frame */
    const uint8_t empty[] = { 0 };
    h.len = 1;
    assert_int_equal(pst_chunk_inflate(&z, &h, empty, &out, &len), PSC_ECORRUPT);  /* no frame at all */
    pst_inflate_done(&z);
    pst_inflate_done(&z);
}


/* ---- the column form ---------------------------------------------------------- */

/* Split, then join: the payload back byte for byte. The split form's
 * length, 0 when the payload stays as it is. */
static size_t round_trip(const uint8_t *p, size_t len)
{
    size_t cap = PST_COLS_BOUND(len), cut = 0;
    uint8_t *s = malloc(cap + 1), *t = malloc(PST_COLS_TMP(len));
    size_t sl = pst_cols_split(p, len, s, cap, t, PST_COLS_TMP(len), &cut);
    free(t);
    if (sl) {
        assert_true(pst_cols_is_split(s, sl));
        assert_true(cut > 0 && cut <= sl);
        size_t jl = 0, got = 0;
        assert_int_equal(pst_cols_joined_len(s, sl, &jl), 0);
        assert_int_equal(jl, len);
        uint8_t *j = malloc(jl);
        assert_int_equal(pst_cols_join(s, sl, j, jl, &got), 0);
        assert_int_equal(got, len);
        assert_memory_equal(j, p, len);
        /* one byte short: an error, not a write past the end */
        assert_int_equal(pst_cols_join(s, sl, j, jl - 1, &got), PSC_ECORRUPT);
        free(j);
    }
    free(s);
    return sl;
}

/* The EVENTS payloads of a trace as version 1 holds them, one after the
 * other into cb (each as (len, bytes)). */
typedef void (*payload_fn)(const uint8_t *p, size_t len, void *ctx);
static size_t each_events_payload(const membuf_t *m, payload_fn fn, void *ctx)
{
    const uint8_t *b = (const uint8_t *)m->p;
    static size_t off[8192];
    size_t n = chunk_offsets(b, m->len, off, 8192), seen = 0;
    pst_inflate_t z = { 0 };
    for (size_t i = 0; i < n; i++) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off[i], &h);
        if (h.kind != PST_CHUNK_EVENTS) continue;
        const uint8_t *pl;
        size_t pn;
        assert_int_equal(pst_chunk_inflate(&z, &h, b + off[i] + PST_CHUNK_HDR, &pl, &pn), 0);
        fn(pl, pn, ctx);
        seen++;
    }
    pst_inflate_done(&z);
    return seen;
}

static void count_split(const uint8_t *p, size_t len, void *ctx) { *(size_t *)ctx += round_trip(p, len) != 0; }

static void test_columns_give_back_every_writer_payload_byte_for_byte(void **state)
{
    (void)state;
    for (uint32_t chunk = 512; chunk <= 65536; chunk *= 8) {
        membuf_t m;
        write_program(&m, 5, 0, chunk);
        size_t split = 0, n = each_events_payload(&m, count_split, &split);
        assert_true(n > 3);
        assert_true(split * 10 >= n * 9);   /* nearly every chunk has a TS or a stack to move */
        free(m.p);
    }
}

/* A payload made by hand: the stream offset, then the bytes. */
static size_t payload(uint8_t *out, uint64_t off, const uint8_t *bytes, size_t n)
{
    uint8_t *q = pst_put_varint(out, off);
    memcpy(q, bytes, n);
    return (size_t)(q - out) + n;
}

static size_t put_records(uint8_t *b, int what, int n)
{
    pst_enc_t e = { 0 };
    uint16_t idx[PST_RECENT_IDX] = { 0 };
    pst_enc_init(&e, PST_CODING_RECENT, idx);
    uint8_t *p = b;
    for (int i = 0; i < n; i++) {
        if (what & 1) p = pst_put_ts(&e, p, (uint64_t)i * 100003u + (i % 7) * 977u);
        if (what & 8) p = pst_put_cyc(&e, p, (uint64_t)i * 1000003u + (i % 5) * 131u);   /* minor 8 */
        if (what & 2) {
            pst_event_t ev = { .type = PST_EV_MALLOC, .f = { 0x5000 + 16 * (uint64_t)(i % 5), 24 },
                               .stack = (what & 4) ? 1 + (uint32_t)(i % 3) * 200 : 0 };
            p = pst_encode_event(&e, p, &ev);
            pst_event_t fr = { .type = PST_EV_FREE, .f = { 0x5000 + 16 * (uint64_t)(i % 5) }, .n_ver = (i & 1),
                               .ver = { (uint16_t)i } };
            p = pst_encode_event(&e, p, &fr);
        }
    }
    return (size_t)(p - b);
}

static void test_columns_round_trip_made_up_payloads(void **state)
{
    (void)state;
    uint8_t rec[1 << 16], pl[(1 << 16) + 16];
    size_t n, len;
    /* events without TS or stacks: nothing to move, the payload stays */
    n = put_records(rec, 2, 300);
    len = payload(pl, 12345, rec, n);
    assert_int_equal(round_trip(pl, len), 0);
    /* stacks but no TS; only TS; TS, events and stacks; CYC records (their
     * values go to the stack column) with any of them */
    for (int what = 1; what <= 15; what++) {
        n = put_records(rec, what, 300);
        len = payload(pl, 7, rec, n);
        size_t sl = round_trip(pl, len);
        assert_true(((what & 1) || (what & 6) == 6 || (what & 8)) ? sl > 0 : sl == 0);
        /* every cut, so a record cut at the end (the rest stays as it is) */
        for (size_t cut = 0; cut < len; cut += 1 + cut / 16) round_trip(pl, cut);
    }
    /* TS records after the last event, and a payload of one TS */
    n = put_records(rec, 7, 10);
    rec[n++] = PST_EV_TS; rec[n++] = 5;
    rec[n++] = PST_EV_TS; rec[n++] = 0;
    assert_true(round_trip(pl, payload(pl, 0, rec, n)) > 0);
    const uint8_t one_ts[] = { PST_EV_TS, 0x81, 0x01 };
    assert_true(round_trip(pl, payload(pl, 0, one_ts, sizeof one_ts)) > 0);
    /* TS records no writer makes: a longer varint than needed, a stack id on
     * one, a 64-bit value, and an unknown type with TS records after it */
    const uint8_t odd[] = { PST_EV_TS, 0x80, 0x00, PST_EV_TS | PST_EV_HAS_STACK, 3, 9,
                            PST_EV_TS, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                            PST_EV_MALLOC | PST_EV_HAS_STACK, 0x81, 0x01, 0x02, 24,
                            0x7e, PST_EV_TS, 4, PST_EV_FREE, 0x02 };
    assert_true(round_trip(pl, payload(pl, 99, odd, sizeof odd)) > 0);
    /* no stream offset, nothing at all */
    const uint8_t bad_off[] = { 0x80 };
    assert_int_equal(round_trip(bad_off, sizeof bad_off), 0);
    assert_int_equal(round_trip(pl, 0), 0);
    assert_int_equal(round_trip(pl, payload(pl, 3, rec, 0)), 0);
    /* random bytes after some records: whatever is split comes back */
    rng = 42;
    for (int k = 0; k < 3000; k++) {
        n = put_records(rec, 1 + (int)(rnd() % 15), 1 + (int)(rnd() % 40));
        size_t extra = rnd() % 64;
        for (size_t i = 0; i < extra; i++) rec[n++] = (uint8_t)(rnd() % 4 ? rnd() % 60 : rnd());
        n = rnd() % 2 ? n : put_records(rec + n, 3, 3) + n;
        round_trip(pl, payload(pl, rnd() % 100000, rec, n));
    }
}

static void test_columns_damaged_is_an_error_never_a_crash(void **state)
{
    (void)state;
    uint8_t rec[1 << 14], pl[1 << 14], s[1 << 15], d[1 << 15], out[1 << 16];
    size_t n = put_records(rec, 7, 100), len = payload(pl, 5, rec, n), cut;
    static uint8_t t[PST_COLS_TMP(1 << 14)];
    size_t sl = pst_cols_split(pl, len, s, sizeof s, t, sizeof t, &cut);
    assert_true(sl > 0);
    size_t ok = 0, bad = 0;
    for (size_t i = 0; i < sl; i++) {
        for (int x = 0; x < 3; x++) {
            memcpy(d, s, sl);
            d[i] ^= (uint8_t)(x == 0 ? 0x01 : x == 1 ? 0x80 : 0xff);
            size_t jl, got;
            /* each damaged byte once with the room it asks for, once short by one */
            if (pst_cols_joined_len(d, sl, &jl) != 0) { bad++; continue; }
            int rc = pst_cols_join(d, sl, out, jl < sizeof out ? jl : sizeof out, &got);
            if (rc == 0) { ok++; assert_int_equal(got, jl); }
            else { bad++; assert_int_equal(rc, PSC_ECORRUPT); }
        }
        /* cut short anywhere */
        size_t jl, got;
        if (pst_cols_joined_len(s, i, &jl) == 0) pst_cols_join(s, i, out, jl < sizeof out ? jl : sizeof out, &got);
    }
    assert_true(bad > sl);   /* most damage is seen (a value's byte is not: it is just another time) */
    /* counts that ask for more records than there are, columns not used up */
    size_t got;
    assert_int_equal(pst_cols_join(s, sl - 1, out, sizeof out, &got), PSC_ECORRUPT);
    const uint8_t no_mark[] = { 5, 1, 2 };
    assert_false(pst_cols_is_split(no_mark, sizeof no_mark));
    assert_int_equal(pst_cols_joined_len(no_mark, sizeof no_mark, &got), PSC_ECORRUPT);
    /* header: mark, ev_len 1, n_ts 1, w 1, cnt_len 1, stk_len 0; a free of
     * recent[0], then a count of 2 records (there is 1) */
    const uint8_t over[] = { 0, PST_COLS_MARK, 2, 1, 1, 1, 0, PST_EV_FREE, 0x02, 2, 7 };
    assert_int_equal(pst_cols_joined_len(over, sizeof over, &got), 0);
    assert_int_equal(pst_cols_join(over, sizeof over, out, sizeof out, &got), PSC_ECORRUPT);
    const uint8_t fine[] = { 0, PST_COLS_MARK, 2, 1, 1, 1, 0, PST_EV_FREE, 0x02, 1, 7 };
    assert_int_equal(pst_cols_join(fine, sizeof fine, out, sizeof out, &got), 0);
    const uint8_t want[] = { 0, PST_EV_FREE, 0x02, PST_EV_TS, 7 };
    assert_int_equal(got, sizeof want);
    assert_memory_equal(out, want, sizeof want);
    (void)ok;
}

/* Chunk at of m with its frame's content changed by fn, compressed again
 * (CRC and lengths right): a new file in *len. */
typedef void (*content_fn)(uint8_t *c, size_t *n);
static uint8_t *recompressed(const membuf_t *m, size_t at, content_fn fn, size_t *len)
{
    const uint8_t *b = (const uint8_t *)m->p;
    pst_chunk_hdr_t h;
    pst_get_chunk_hdr(b + at, &h);
    const uint8_t *pl = b + at + PST_CHUNK_HDR, *pend = pl + h.len;
    uint64_t raw = 0;
    const uint8_t *f = pst_get_varint(pl, pend, &raw);
    assert_non_null(f);
    uint8_t *c = malloc((size_t)raw + 64);
    assert_int_equal(ZSTD_decompress(c, (size_t)raw, f, (size_t)(pend - f)), raw);
    size_t cn = (size_t)raw;
    fn(c, &cn);
    size_t bound = ZSTD_compressBound(cn) + PST_VARINT_MAX;
    uint8_t *out = malloc(m->len + bound + PST_CHUNK_HDR);
    memcpy(out, b, at);
    uint8_t *q = pst_put_varint(out + at + PST_CHUNK_HDR, cn);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    size_t zn = ZSTD_compress2(cc, q, bound, c, cn);
    assert_false(ZSTD_isError(zn));
    ZSTD_freeCCtx(cc);
    uint32_t nl = (uint32_t)((size_t)(q - (out + at + PST_CHUNK_HDR)) + zn);
    pst_put_chunk_hdr_v(out + at, h.kind, h.version, h.flags, h.stream, nl, pst_crc32c(0, out + at + PST_CHUNK_HDR, nl));
    size_t rest = m->len - (at + PST_CHUNK_HDR + h.len);
    memcpy(out + at + PST_CHUNK_HDR + nl, pend, rest);
    *len = at + PST_CHUNK_HDR + nl + rest;
    free(c);
    return out;
}

static void same(uint8_t *c, size_t *n) { (void)c; (void)n; }
static void drop_last(uint8_t *c, size_t *n) { (void)c; (*n)--; }        /* the tail, or the stack column, short */
static void ev_len_up(uint8_t *c, size_t *n)                              /* the events column says 1 byte more */
{
    uint64_t v;
    const uint8_t *p = pst_get_varint(c, c + *n, &v);
    assert_int_equal(p[0], PST_COLS_MARK);
    assert_true((p[1] & 0x7f) != 0x7f);   /* its low 7 bits + 1: no carry */
    c[p - c + 1]++;
}
static void no_mark(uint8_t *c, size_t *n)                                /* a type 0 nobody knows */
{
    uint64_t v;
    const uint8_t *p = pst_get_varint(c, c + *n, &v);
    c[p - c] = 0;
    c[p - c + 1] = 0x7f;
}

static void test_corrupt_column_is_damage_at_its_chunk_offset(void **state)
{
    (void)state;
    membuf_t mz;
    write_program(&mz, 6, 3, 8192);
    const uint8_t *b = (const uint8_t *)mz.p;
    size_t off[4096];
    size_t n = chunk_offsets(b, mz.len, off, 4096), tried = 0;
    for (size_t i = 0; i < n && tried < 4; i++) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off[i], &h);
        if (!(h.flags & PST_CHUNK_ZSTD) || h.kind != PST_CHUNK_EVENTS) continue;
        tried++;
        pst_status_t before, all, st;
        char *want = listing(b, off[i], &before);
        char *whole = listing(b, mz.len, &all);
        size_t len;
        uint8_t *c = recompressed(&mz, off[i], same, &len);   /* the test's own frame: still reads */
        char *got = listing(c, len, &st);
        assert_true(st.complete);
        assert_string_equal(got, whole);
        free(got);
        free(c);
        const content_fn dmg[] = { drop_last, ev_len_up, no_mark };
        for (size_t k = 0; k < sizeof dmg / sizeof *dmg; k++) {
            c = recompressed(&mz, off[i], dmg[k], &len);
            got = listing(c, len, &st);
            assert_true(st.corrupt);
            assert_int_equal(st.corrupt_offset, off[i]);
            assert_string_equal(got, want);   /* every event of the chunks before it */
            free(got);
            free(c);
        }
        free(want);
        free(whole);
    }
    assert_true(tried > 0);
    free(mz.p);
}

/* 1.5 writers compressed the payload as it is: such chunks read
 * as before (here made from an uncompressed trace, chunk for chunk). */
static void test_chunks_compressed_without_columns_read_as_before(void **state)
{
    (void)state;
    membuf_t m5;
    write_program(&m5, 5, 0, 4096);
    const uint8_t *b = (const uint8_t *)m5.p;
    static size_t off[8192];
    size_t n = chunk_offsets(b, m5.len, off, 8192), nz = 0;
    assert_true(n > 1);
    uint8_t *c = malloc(m5.len + n * 64);
    size_t at = off[0];
    memcpy(c, b, at);
    ZSTD_CCtx *cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_checksumFlag, 1);
    for (size_t i = 0; i < n; i++) {
        pst_chunk_hdr_t h;
        pst_get_chunk_hdr(b + off[i], &h);
        const uint8_t *pl = b + off[i] + PST_CHUNK_HDR;
        uint8_t z[PST_VARINT_MAX + (1 << 15)];
        size_t zn = 0;
        if (h.version == PST_CHUNK_V2 && h.len > 16 && h.len < (1 << 14)) {
            uint8_t *q = pst_put_varint(z, h.len);
            zn = ZSTD_compress2(cc, q, sizeof z - PST_VARINT_MAX, pl, h.len);
            assert_false(ZSTD_isError(zn));
            zn += (size_t)(q - z);
        }
        if (zn && zn < h.len) {
            pst_put_chunk_hdr_v(c + at, h.kind, h.version, PST_CHUNK_ZSTD, h.stream, (uint32_t)zn, pst_crc32c(0, z, zn));
            memcpy(c + at + PST_CHUNK_HDR, z, zn);
            at += PST_CHUNK_HDR + zn;
            nz += h.kind == PST_CHUNK_EVENTS;
        } else {
            memcpy(c + at, b + off[i], PST_CHUNK_HDR + h.len);
            at += PST_CHUNK_HDR + h.len;
        }
    }
    ZSTD_freeCCtx(cc);
    assert_true(nz > 10);
    pst_status_t s5, sz;
    char *l5 = listing(m5.p, m5.len, &s5), *lz = listing(c, at, &sz);
    assert_true(s5.complete && sz.complete);
    assert_string_equal(l5, lz);
    free(l5); free(lz); free(c); free(m5.p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recent_coding_gives_reuse_one_byte_and_decodes_back),
        cmocka_unit_test(test_recent_coding_rejects_reserved_and_out_of_range_codes),
        cmocka_unit_test(test_compressed_trace_reads_event_for_event_as_minor_4_and_uncompressed),
        cmocka_unit_test(test_truncated_compressed_trace_reads_its_complete_chunks),
        cmocka_unit_test(test_corrupt_compressed_chunk_is_damage_at_its_offset),
        cmocka_unit_test(test_version_2_chunk_in_a_minor_4_file_is_corrupt),
        cmocka_unit_test(test_inflate_passes_version_1_through_and_checks_frames),
        cmocka_unit_test(test_columns_give_back_every_writer_payload_byte_for_byte),
        cmocka_unit_test(test_columns_round_trip_made_up_payloads),
        cmocka_unit_test(test_columns_damaged_is_an_error_never_a_crash),
        cmocka_unit_test(test_corrupt_column_is_damage_at_its_chunk_offset),
        cmocka_unit_test(test_chunks_compressed_without_columns_read_as_before),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
