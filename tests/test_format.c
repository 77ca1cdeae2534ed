/* test_format.c — the encoding primitives and the event table of format.c:
 * varint/zigzag/address round trips at their edges, every event type
 * through encode -> decode, CRC-32C vectors on both code paths, the
 * malloc-free header/chunk/META helpers, and FORMAT.md naming every type.
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

uint32_t pst__crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t pst__crc32c_hw(uint32_t crc, const void *buf, size_t len, int *used);

/* ---- varint / zigzag ---------------------------------------------------- */

static void test_varint_round_trips_at_edges(void **state)
{
    (void)state;
    const uint64_t vals[] = { 0, 1, 127, 128, 16383, 16384, UINT32_MAX, (uint64_t)1 << 56,
                              ((uint64_t)1 << 63) - 1, (uint64_t)1 << 63, UINT64_MAX };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        uint8_t buf[PST_VARINT_MAX + 1];
        uint8_t *e = pst_put_varint(buf, vals[i]);
        assert_true(e - buf <= PST_VARINT_MAX);
        uint64_t v = 12345;
        const uint8_t *q = pst_get_varint(buf, e, &v);
        assert_ptr_equal(q, e);
        assert_int_equal(v, vals[i]);
        /* every strict prefix is a truncation */
        for (uint8_t *cut = buf; cut < e; cut++)
            assert_null(pst_get_varint(buf, cut, &v));
    }
}

static void test_varint_longer_than_ten_bytes_is_corrupt(void **state)
{
    (void)state;
    uint8_t buf[12];
    memset(buf, 0x80, sizeof buf);
    uint64_t v = 0;
    assert_null(pst_get_varint(buf, buf + sizeof buf, &v));
}

static void test_zigzag_round_trips_at_edges(void **state)
{
    (void)state;
    const int64_t vals[] = { 0, 1, -1, 63, -64, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN };
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        assert_int_equal(pst_unzigzag(pst_zigzag(vals[i])), vals[i]);
        uint8_t buf[PST_VARINT_MAX];
        uint8_t *e = pst_put_zigzag(buf, vals[i]);
        uint64_t v = 0;
        assert_ptr_equal(pst_get_varint(buf, e, &v), e);
        assert_int_equal(pst_unzigzag(v), vals[i]);
    }
    assert_int_equal(pst_zigzag(-1), 1);
    assert_int_equal(pst_zigzag(1), 2);
}

/* A sequence of addresses through one encoder and one decoder. */
static void addr_sequence(const uint64_t *addrs, size_t n)
{
    uint8_t buf[64 * PST_VARINT_MAX];
    uint8_t *p = buf;
    uint64_t base = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t *q = pst_put_addr(p, &base, addrs[i]);
        assert_true(q - p <= PST_VARINT_MAX);
        p = q;
    }
    const uint8_t *r = buf;
    uint64_t dbase = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t a = 0;
        r = pst_get_addr(r, p, &dbase, &a);
        assert_non_null(r);
        assert_int_equal(a, addrs[i]);
    }
    assert_ptr_equal(r, p);
}

static void test_addr_round_trips_at_edges(void **state)
{
    (void)state;
    const uint64_t a[] = {
        0, 0x7f0000001000, 0x7f0000001010, 0x7f0000000ff0,   /* aligned, +-16 */
        0x7f0000000ff3, 0x7f0000000ff0, 1, 0,                   /* unaligned, negative deltas */
        (uint64_t)1 << 63, 0, ((uint64_t)1 << 63) + 1, 1,       /* 2^63 aligned and not */
        UINT64_MAX, 0, UINT64_MAX, 0x10, UINT64_MAX - 15, 0x8000000000000010ull,
        ((uint64_t)1 << 62) + 3, 0, (uint64_t)1 << 62, 0xfffffffffffffff0ull, 7,
    };
    addr_sequence(a, sizeof a / sizeof a[0]);
}

static void test_addr_aligned_small_delta_takes_one_byte(void **state)
{
    (void)state;
    uint8_t buf[PST_VARINT_MAX];
    uint64_t base = 0x7f0000001000;
    assert_int_equal(pst_put_addr(buf, &base, 0x7f0000001040) - buf, 1);
    assert_int_equal(buf[0] & 1, 1);
    assert_int_equal(pst_put_addr(buf, &base, 0x7f0000001043) - buf, 1);
    assert_int_equal(buf[0] & 1, 0);
}

static void test_addr_code_is_a_plain_varint_below_2_pow_64(void **state)
{
    (void)state;
    /* unaligned delta 2^62 - 1: zigzag < 2^63, plain 9-byte varint, as before the 65-bit fix */
    uint8_t buf[PST_VARINT_MAX];
    uint64_t base = 1;
    uint8_t *e = pst_put_addr(buf, &base, ((uint64_t)1 << 62));
    uint64_t code;
    assert_ptr_equal(pst_get_varint(buf, e, &code), e);
    assert_int_equal(code, pst_zigzag(((int64_t)1 << 62) - 1) << 1);
}

static void test_addr_corrupt_code_is_defined(void **state)
{
    (void)state;
    /* all-ones 10-byte code: must not trip UBSan's signed overflow checks */
    uint8_t buf[10];
    memset(buf, 0xff, 9);
    buf[9] = 0x03;
    uint64_t base = 0, a;
    assert_non_null(pst_get_addr(buf, buf + 10, &base, &a));
    buf[9] = 0x83;
    assert_null(pst_get_addr(buf, buf + 10, &base, &a));
}

/* ---- CRC ----------------------------------------------------------------- */

static void test_crc32c_known_vectors_software(void **state)
{
    (void)state;
    assert_int_equal(pst__crc32c_sw(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(pst__crc32c_sw(0, "", 0), 0);
    uint8_t z[32] = {0}, f[32];
    memset(f, 0xff, sizeof f);
    assert_int_equal(pst__crc32c_sw(0, z, 32), 0x8A9136AAu);   /* RFC 3720 B.4 */
    assert_int_equal(pst__crc32c_sw(0, f, 32), 0x62A8AB43u);
    uint8_t inc[32];
    for (int i = 0; i < 32; i++) inc[i] = (uint8_t)i;
    assert_int_equal(pst__crc32c_sw(0, inc, 32), 0x46DD794Eu);
}

static void test_crc32c_hardware_matches_software_at_every_length(void **state)
{
    (void)state;
    int used = 0;
    assert_int_equal(pst__crc32c_hw(0, "123456789", 9, &used), 0xE3069283u);
    if (!used) print_message("note: CPU without SSE4.2, hardware path not exercised\n");
    uint8_t buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (uint8_t)(i * 131 + 7);
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len + off <= 300; len += 7)
            assert_int_equal(pst__crc32c_hw(0, buf + off, len, &used),
                             pst__crc32c_sw(0, buf + off, len));
    assert_int_equal(pst_crc32c(0, "123456789", 9), 0xE3069283u);
}

static void test_crc32c_continues_over_split_buffers(void **state)
{
    (void)state;
    uint32_t c = pst_crc32c(0, "1234", 4);
    assert_int_equal(pst_crc32c(c, "56789", 5), 0xE3069283u);
    c = pst__crc32c_sw(0, "12345", 5);
    assert_int_equal(pst__crc32c_sw(c, "6789", 4), 0xE3069283u);
}

/* ---- the table ------------------------------------------------------------ */

static void test_layout_table_is_well_formed(void **state)
{
    (void)state;
    int n = 0;
    for (unsigned t = 0; t < 256; t++) {
        const char *lay = pst_event_layout(t), *name = pst_event_name(t);
        assert_true((lay == NULL) == (name == NULL));
        if (!lay) continue;
        assert_true(t > 0 && t < PST_EV_MAX);
        n++;
        assert_true(strlen(lay) <= PST_MAX_FIELDS);
        int nl = 0, np = 0;
        for (const char *c = lay; *c; c++) {
            assert_non_null(strchr("AuzSLPv", *c));
            assert_true(*c != 'v' || t == PST_EV_VER);   /* a record's field, no event's */
            nl += *c == 'L';
            np += *c == 'P';
        }
        assert_true(nl <= 1 && np <= 1);
        for (const char *c = name; *c; c++)
            assert_true((*c >= 'a' && *c <= 'z') || *c == '_' || (*c >= '0' && *c <= '9'));
        for (unsigned u = 0; u < t; u++)
            if (pst_event_name(u)) assert_string_not_equal(pst_event_name(u), name);
    }
    assert_int_equal(n, 50);   /* 47 through 1.3; 1.4 added mprotect (22) and mmap_name (23), 1.8 cyc (30) */
    assert_string_equal(pst_event_name(PST_EV_MALLOC), "malloc");
    assert_string_equal(pst_event_name(PST_EV_TENSOR_ACQUIRE), "tensor_acquire");
    assert_string_equal(pst_event_name(PST_EV_POOL_ACQUIRE), "pool_acquire");
    assert_string_equal(pst_event_name(PST_EV_KVB_ALLOC), "kvb_alloc");
    assert_string_equal(pst_event_name(PST_EV_MARK_BEGIN), "mark_begin");
    assert_string_equal(pst_event_layout(PST_EV_MMAP), "Auuuzu");
    assert_string_equal(pst_event_layout(PST_EV_POOL_ACQUIRE), "uuuuuuuuu");
    assert_string_equal(pst_event_layout(PST_EV_VER), "v");
    assert_int_equal(PST_EV_MPROTECT, 22);
    assert_int_equal(PST_EV_MMAP_NAME, 23);
    assert_string_equal(pst_event_layout(PST_EV_MPROTECT), "Auu");
    assert_string_equal(pst_event_layout(PST_EV_MMAP_NAME), "AS");
    assert_string_equal(pst_event_name(PST_EV_MPROTECT), "mprotect");
    assert_string_equal(pst_event_name(PST_EV_MMAP_NAME), "mmap_name");
    assert_int_equal(PST_EV_CYC, 30);
    assert_string_equal(pst_event_layout(PST_EV_CYC), "u");
    assert_string_equal(pst_event_name(PST_EV_CYC), "cyc");
    assert_null(pst_event_layout(31));
    assert_null(pst_event_name(31));
    assert_null(pst_event_layout(PST_EV_MAX));
}

static void fill_event(pst_event_t *ev, unsigned type, uint64_t seed, uint32_t *ids, int64_t *pl)
{
    memset(ev, 0, sizeof *ev);
    ev->type = (uint8_t)type;
    ev->stack = (seed & 1) ? (uint32_t)(seed * 7 + 1) : 0;
    const char *lay = pst_event_layout(type);
    for (unsigned i = 0; lay[i]; i++) {
        switch (lay[i]) {
        case 'A': ev->f[i] = (seed & 2) ? 0x7f0000000000ull + seed * 48 + i * 16 : seed * 977 + i; break;
        case 'u': ev->f[i] = (seed & 4) ? UINT64_MAX - i : seed + i; break;
        case 'z': ev->f[i] = (uint64_t)((seed & 4) ? INT64_MIN + (int64_t)i : -(int64_t)seed - 1); break;
        case 'S': ev->f[i] = seed + 1; break;
        case 'L':
            ev->n_ids = (uint32_t)(seed % 5) * 3;
            for (uint32_t k = 0; k < ev->n_ids; k++)
                ids[k] = (k & 1) ? (uint32_t)(k * 1000) : UINT32_MAX - k;
            ev->ids = ids;
            ev->f[i] = ev->n_ids;
            break;
        case 'P':
            ev->n_payload = (uint32_t)(seed % (PST_MAX_PAYLOAD + 1));
            for (uint32_t k = 0; k < ev->n_payload; k++)
                pl[k] = (k & 1) ? INT64_MIN + (int64_t)k : (int64_t)(seed * 1000 + k);
            memcpy(ev->payload, pl, sizeof(int64_t) * ev->n_payload);
            ev->f[i] = ev->n_payload;
            break;
        }
    }
}

static void assert_same_event(const pst_event_t *a, const pst_event_t *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->stack, b->stack);
    const char *lay = pst_event_layout(a->type);
    for (unsigned i = 0; lay[i]; i++) assert_int_equal(a->f[i], b->f[i]);
    if (strchr(lay, 'L')) {
        assert_int_equal(a->n_ids, b->n_ids);
        for (uint32_t k = 0; k < a->n_ids; k++) assert_int_equal(a->ids[k], b->ids[k]);
    }
    if (strchr(lay, 'P')) {
        assert_int_equal(a->n_payload, b->n_payload);
        for (uint32_t k = 0; k < a->n_payload; k++) assert_int_equal(a->payload[k], b->payload[k]);
    }
}

static void test_every_event_type_round_trips(void **state)
{
    (void)state;
    static uint8_t buf[64 * 1024];
    static uint32_t ids[PST_MAX_IDS], idbuf[PST_MAX_IDS];
    int64_t pl[PST_MAX_PAYLOAD];
    for (uint64_t seed = 0; seed < 16; seed++) {
        for (unsigned t = 1; t < PST_EV_MAX; t++) {
            if (!pst_event_layout(t) || pst_is_record(t)) continue;
            pst_event_t in, out;
            fill_event(&in, t, seed, ids, pl);
            pst_enc_t enc = { .last_addr = seed * 16 }, dec = enc;
            uint8_t *e = pst_encode_event(&enc, buf, &in);
            assert_non_null(e);
            assert_true((size_t)(e - buf) <= PST_EVENT_MAX + (size_t)in.n_ids * PST_VARINT_MAX);
            assert_int_equal(enc.since_ts, 1);
            memset(&out, 0xa5, sizeof out);
            const uint8_t *r = pst_decode_event(&dec, buf, e, &out, idbuf);
            assert_ptr_equal(r, e);
            assert_same_event(&in, &out);
            assert_int_equal(dec.last_addr, enc.last_addr);
            /* every strict prefix is rejected, never read past */
            for (uint8_t *cut = buf; cut < e; cut++) {
                pst_enc_t d2 = { .last_addr = seed * 16 };
                uint8_t *copy = malloc((size_t)(cut - buf) + 1);
                memcpy(copy, buf, (size_t)(cut - buf));
                assert_null(pst_decode_event(&d2, copy, copy + (cut - buf), &out, idbuf));
                free(copy);
            }
        }
    }
}

static void test_ts_record_round_trips_and_moves_time(void **state)
{
    (void)state;
    uint8_t buf[64];
    pst_enc_t enc = {0}, dec = {0};
    enc.since_ts = 9;
    uint8_t *p = pst_put_ts(&enc, buf, 1000);
    assert_int_equal(enc.since_ts, 0);
    p = pst_put_ts(&enc, p, 1500);
    pst_event_t ev;
    uint32_t idbuf[4];
    const uint8_t *r = pst_decode_event(&dec, buf, p, &ev, idbuf);
    assert_int_equal(ev.type, PST_EV_TS);
    assert_int_equal(ev.f[0], 1000);
    assert_int_equal(ev.ts, 1000);
    r = pst_decode_event(&dec, r, p, &ev, idbuf);
    assert_ptr_equal(r, p);
    assert_int_equal(ev.f[0], 500);
    assert_int_equal(dec.last_ts, 1500);
    pst_event_t ts = { .type = PST_EV_TS };
    assert_null(pst_encode_event(&enc, buf, &ts));    /* TS goes through pst_put_ts */
}

static void test_encode_rejects_unknown_types_and_over_limit_counts(void **state)
{
    (void)state;
    static uint8_t buf[PST_MAX_IDS * PST_VARINT_MAX + PST_EVENT_MAX];
    static uint32_t ids[PST_MAX_IDS + 1];
    pst_enc_t enc = {0};
    pst_event_t ev = { .type = 19 };
    assert_null(pst_encode_event(&enc, buf, &ev));
    ev.type = PST_EV_MAX;
    assert_null(pst_encode_event(&enc, buf, &ev));
    ev.type = 0;
    assert_null(pst_encode_event(&enc, buf, &ev));
    ev.type = PST_EV_KVB_FREE;
    ev.ids = ids;
    ev.n_ids = PST_MAX_IDS + 1;
    assert_null(pst_encode_event(&enc, buf, &ev));
    ev.n_ids = PST_MAX_IDS;
    assert_non_null(pst_encode_event(&enc, buf, &ev));
    pst_event_t m = { .type = PST_EV_MARK_POINT, .n_payload = PST_MAX_PAYLOAD + 1 };
    assert_null(pst_encode_event(&enc, buf, &m));
}

static void test_decode_rejects_unknown_types_and_over_limit_counts(void **state)
{
    (void)state;
    static uint32_t idbuf[PST_MAX_IDS];
    pst_event_t ev;
    pst_enc_t dec = {0};
    uint8_t b[32];
    for (unsigned t = 0; t < 256; t++) {
        b[0] = (uint8_t)t;
        memset(b + 1, 0, sizeof b - 1);
        const uint8_t *r = pst_decode_event(&dec, b, b + sizeof b, &ev, idbuf);
        /* a VER or CYC record carries no stack */
        if (!pst_event_layout(t & PST_EV_TYPE_MASK) || t == (PST_EV_VER | PST_EV_HAS_STACK) ||
            t == (PST_EV_CYC | PST_EV_HAS_STACK))
            assert_null(r);
        else assert_non_null(r);
    }
    /* KVB_FREE with n = PST_MAX_IDS + 1 */
    uint8_t *p = b;
    *p++ = PST_EV_KVB_FREE;
    p = pst_put_varint(p, 1);
    p = pst_put_varint(p, 2);
    p = pst_put_varint(p, PST_MAX_IDS + 1);
    assert_null(pst_decode_event(&dec, b, p + 8, &ev, idbuf));
    /* MARK_POINT with 9 payload values */
    p = b;
    *p++ = PST_EV_MARK_POINT;
    p = pst_put_varint(p, 1);
    p = pst_put_varint(p, PST_MAX_PAYLOAD + 1);
    memset(p, 0, 9);
    assert_null(pst_decode_event(&dec, b, p + 9, &ev, idbuf));
    /* an id beyond 32 bits */
    p = b;
    *p++ = PST_EV_KVB_FREE;
    p = pst_put_varint(p, 1);
    p = pst_put_varint(p, 2);
    p = pst_put_varint(p, 1);
    p = pst_put_varint(p, (uint64_t)UINT32_MAX + 1);
    assert_null(pst_decode_event(&dec, b, p, &ev, idbuf));
    /* a delta that walks below 0 */
    p = b;
    *p++ = PST_EV_KVB_FREE;
    p = pst_put_varint(p, 1);
    p = pst_put_varint(p, 2);
    p = pst_put_varint(p, 2);
    p = pst_put_varint(p, 5);
    p = pst_put_zigzag(p, -6);
    assert_null(pst_decode_event(&dec, b, p, &ev, idbuf));
    /* an empty input */
    assert_null(pst_decode_event(&dec, b, b, &ev, idbuf));
}

static void test_decode_writes_no_fields_beyond_the_layout(void **state)
{
    (void)state;
    uint8_t buf[64];
    uint32_t idbuf[8];
    pst_enc_t enc = {0}, dec = {0};
    pst_event_t in = { .type = PST_EV_FREE, .f = { 0x1000 } }, out;
    uint8_t *e = pst_encode_event(&enc, buf, &in);
    memset(&out, 0x5a, sizeof out);
    assert_ptr_equal(pst_decode_event(&dec, buf, e, &out, idbuf), e);
    assert_int_equal(out.f[0], 0x1000);
    for (int i = 1; i < PST_MAX_FIELDS; i++) assert_int_equal(out.f[i], 0x5a5a5a5a5a5a5a5aull);
    assert_int_equal(out.ts, 0x5a5a5a5a5a5a5a5aull);
}

/* ---- header and chunk helpers -------------------------------------------- */

static void test_file_header_has_magic_version_and_fields(void **state)
{
    (void)state;
    uint8_t buf[256];
    static const char argv[] = "prog\0-x\0";
    pst_file_info_t fi = { .pid = 42, .ppid = 1, .exec_gen = 2, .start_real_ns = 1700000000000000000ull,
                           .start_mono_ns = 5, .stacks = PST_STACKS_FP, .depth = 64, .page_size = 4096,
                           .exe = "/bin/prog", .argv = argv, .argv_len = sizeof argv - 1, .tool = "t" };
    int n = pst_put_file_header(buf, sizeof buf, &fi);
    assert_true(n > PST_FILE_HDR_FIXED);
    assert_memory_equal(buf, "PSTRACE\0", 8);
    assert_int_equal(buf[8] | buf[9] << 8, PST_MAJOR);
    assert_int_equal(buf[10] | buf[11] << 8, PST_MINOR);
    assert_int_equal(PST_MINOR, 9);   /* bumped on purpose with each format change (FORMAT.md, "Versioning") */
    uint32_t tlv = (uint32_t)(buf[12] | buf[13] << 8 | buf[14] << 16 | (uint32_t)buf[15] << 24);
    assert_int_equal(tlv + PST_FILE_HDR_FIXED, n);
    /* walk the TLVs: find EXE and ARGV, no PARENT_PID (0), no HOST (NULL) */
    const uint8_t *p = buf + 16, *end = buf + n;
    int seen_exe = 0, seen_argv = 0;
    while (p < end) {
        uint64_t tag = 0, len = 0;
        p = pst_get_varint(p, end, &tag);
        assert_non_null(p);
        p = pst_get_varint(p, end, &len);
        assert_non_null(p);
        assert_true(len <= (uint64_t)(end - p));
        assert_int_not_equal(tag, PST_HDR_PARENT_PID);
        assert_int_not_equal(tag, PST_HDR_HOST);
        if (tag == PST_HDR_EXE) { seen_exe = 1; assert_memory_equal(p, "/bin/prog", len); }
        if (tag == PST_HDR_ARGV) { seen_argv = 1; assert_int_equal(len, 8); }
        p += len;
    }
    assert_true(seen_exe && seen_argv);
    /* too small a buffer at every size */
    for (size_t cap = 0; cap < (size_t)n; cap++)
        assert_int_equal(pst_put_file_header(buf, cap, &fi), PSC_ERANGE);
}

static void test_chunk_header_round_trips_with_crc(void **state)
{
    (void)state;
    uint8_t buf[PST_CHUNK_HDR + 9];
    memcpy(buf + PST_CHUNK_HDR, "123456789", 9);
    pst_put_chunk_hdr(buf, PST_CHUNK_EVENTS, 0x01020304, buf + PST_CHUNK_HDR, 9);
    pst_chunk_hdr_t h;
    pst_get_chunk_hdr(buf, &h);
    assert_int_equal(h.kind, PST_CHUNK_EVENTS);
    assert_int_equal(h.version, 1);
    assert_int_equal(h.flags, 0);
    assert_int_equal(h.stream, 0x01020304);
    assert_int_equal(h.len, 9);
    assert_int_equal(h.crc, 0xE3069283u);
    assert_int_equal(buf[4], 0x04);   /* little-endian */
    assert_int_equal(buf[12], 0x83);
}

static void test_meta_records_have_documented_shape(void **state)
{
    (void)state;
    uint8_t buf[256];
    uint8_t *p = pst_put_meta_string(buf, 7, "abc", 3);
    assert_int_equal(p - buf, 6);
    assert_memory_equal(buf, "\x01\x07\x03" "abc", 6);
    const uint64_t fr[3] = { 0x401000, 0x400ff0, 0x7f0000000000 };
    p = pst_put_meta_stack(buf, 3, fr, 3);
    const uint8_t *q = buf + 1;
    uint64_t v = 0;
    q = pst_get_varint(q, p, &v); assert_int_equal(v, 3);
    q = pst_get_varint(q, p, &v); assert_int_equal(v, 3);
    q = pst_get_varint(q, p, &v); assert_int_equal(v, 0x401000);
    q = pst_get_varint(q, p, &v); assert_int_equal(pst_unzigzag(v), -16);
    q = pst_get_varint(q, p, &v); assert_int_equal(0x400ff0 + pst_unzigzag(v), 0x7f0000000000);
    assert_ptr_equal(q, p);
    const uint8_t bid[4] = { 0xde, 0xad, 0xbe, 0xef };
    p = pst_put_meta_module(buf, 1, 10, 0x400000, 0x1000, "/lib/x.so", 9, bid, 4);
    assert_int_equal(buf[0], PST_META_MODULE);
    assert_memory_equal(p - 4, bid, 4);
    p = pst_put_end(buf, 100, 2, 3);
    assert_memory_equal(buf, "\x64\x02\x03", 3);
}

/* STACK_TAIL (minor 9): a stack sharing at least two outer frames with
 * stack ref is its id, depth, zigzag(id - ref), the count shared, then
 * only its own inner frames, coded as STACK codes them; sharing fewer, it
 * is a STACK record. */
static void test_stack_tail_records_have_documented_shape(void **state)
{
    (void)state;
    uint8_t buf[256];
    const uint64_t ref[4] = { 0x401100, 0x402200, 0x403300, 0x404400 };   /* innermost first */
    const uint64_t fr[5] = { 0x405500, 0x405400, 0x402250, 0x403300, 0x404400 };
    uint8_t *p = pst_put_meta_stack_near(buf, 9, fr, 5, 8, ref, 4);
    assert_int_equal(buf[0], PST_META_STACK_TAIL);
    assert_int_equal(PST_META_STACK_TAIL, 4);
    const uint8_t *q = buf + 1;
    uint64_t v = 0;
    q = pst_get_varint(q, p, &v); assert_int_equal(v, 9);                /* id */
    q = pst_get_varint(q, p, &v); assert_int_equal(v, 5);                /* depth */
    q = pst_get_varint(q, p, &v); assert_int_equal(pst_unzigzag(v), 1);  /* id - ref */
    q = pst_get_varint(q, p, &v); assert_int_equal(v, 2);                /* the two outer frames shared */
    q = pst_get_varint(q, p, &v); assert_int_equal(v, 0x405500);
    q = pst_get_varint(q, p, &v); assert_int_equal(pst_unzigzag(v), -0x100);
    q = pst_get_varint(q, p, &v); assert_int_equal(0x405400 + pst_unzigzag(v), 0x402250);
    assert_ptr_equal(q, p);
    /* one outer frame in common, or no ref: the whole stack */
    const uint64_t one[3] = { 0x401100, 0x402200, 0x404400 };
    uint8_t full[256];
    p = pst_put_meta_stack_near(buf, 10, one, 3, 9, fr, 5);
    uint8_t *e = pst_put_meta_stack(full, 10, one, 3);
    assert_int_equal(p - buf, e - full);
    assert_memory_equal(buf, full, (size_t)(e - full));
    p = pst_put_meta_stack_near(buf, 9, fr, 5, 0, ref, 4);
    e = pst_put_meta_stack(full, 9, fr, 5);
    assert_int_equal(p - buf, e - full);
    assert_memory_equal(buf, full, (size_t)(e - full));
}

/* ---- the documentation ---------------------------------------------------- */

static void test_format_md_names_every_event_type(void **state)
{
    (void)state;
    const char *paths[] = { "libtrace/FORMAT.md", "../libtrace/FORMAT.md", "../../libtrace/FORMAT.md" };
    FILE *f = NULL;
    for (size_t i = 0; i < 3 && !f; i++) f = fopen(paths[i], "r");
    assert_non_null(f);
    static char text[256 * 1024];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    for (unsigned t = 0; t < PST_EV_MAX; t++) {
        if (!pst_event_name(t)) continue;
        /* a table row: "| name | number | layout |" */
        char row[128];
        snprintf(row, sizeof row, "| `%s` | %u | `%s` |", pst_event_name(t), t, pst_event_layout(t));
        if (!strstr(text, row)) fail_msg("FORMAT.md lacks the row %s", row);
    }
}

/* The mapping events of 1.4, byte by byte as FORMAT.md spells them:
 * mprotect(0x10000, 4096, PROT_READ|PROT_WRITE) in a fresh stream, then the
 * name (string 5) of the mapping at the same address. */
static void test_mapping_events_encode_as_format_md_says(void **state)
{
    (void)state;
    static uint32_t idbuf[PST_MAX_IDS];
    uint8_t buf[64];
    pst_enc_t enc = { 0 }, dec = { 0 };
    pst_event_t mp = { .type = PST_EV_MPROTECT, .f = { 0x10000, 4096, 3 } };
    pst_event_t nm = { .type = PST_EV_MMAP_NAME, .f = { 0x10000, 5 } };
    uint8_t *e = pst_encode_event(&enc, buf, &mp);
    e = pst_encode_event(&enc, e, &nm);
    /* 22; addr: aligned, delta 0x10000 / 16 = 0x1000, zigzag 0x2000, code 0x4001; 4096; 3
     * 23; addr: delta 0, code 1; string id 5 */
    const uint8_t want[] = { 22, 0x81, 0x80, 0x01, 0x80, 0x20, 0x03, 23, 0x01, 0x05 };
    assert_int_equal(e - buf, sizeof want);
    assert_memory_equal(buf, want, sizeof want);
    pst_event_t out;
    const uint8_t *p = pst_decode_event(&dec, buf, e, &out, idbuf);
    assert_int_equal(out.type, PST_EV_MPROTECT);
    assert_int_equal(out.f[0], 0x10000);
    assert_int_equal(out.f[1], 4096);
    assert_int_equal(out.f[2], 3);
    p = pst_decode_event(&dec, p, e, &out, idbuf);
    assert_int_equal(out.type, PST_EV_MMAP_NAME);
    assert_int_equal(out.f[0], 0x10000);
    assert_int_equal(out.f[1], 5);
    assert_ptr_equal(p, e);
}

/* VER records: written before the event by pst_encode_event, handed to it
 * by pst_decode_event, at most two per event, no stack bit. The bytes are
 * spelled out here from FORMAT.md, not taken from the encoder. */
/* CYC records (minor 8): a delta of the stream's count, written only when
 * the count moved forward; every later event carries the sum. */
static void test_cyc_records_round_trip_and_carry_the_count(void **state)
{
    (void)state;
    static uint32_t idbuf[PST_MAX_IDS];
    uint8_t buf[64], *p = buf;
    pst_enc_t enc = { 0 }, dec = { 0 };
    pst_event_t m = { .type = PST_EV_MALLOC, .f = { 0x1000, 8 } }, f = { .type = PST_EV_FREE, .f = { 0x1000 } };
    p = pst_put_cyc(&enc, p, 300);
    p = pst_encode_event(&enc, p, &m);
    p = pst_put_cyc(&enc, p, 300);   /* not moved: nothing */
    p = pst_put_cyc(&enc, p, 200);   /* behind (another CPU's counter): nothing */
    p = pst_encode_event(&enc, p, &f);
    const uint8_t want[] = { PST_EV_CYC, 0xac, 0x02, PST_EV_MALLOC };   /* 300 = 0x12c */
    assert_memory_equal(buf, want, sizeof want);
    assert_int_equal(enc.since_ts, 2);   /* CYC is not an event */
    pst_event_t out;
    const uint8_t *q = pst_decode_event(&dec, buf, p, &out, idbuf);
    assert_int_equal(out.type, PST_EV_CYC);
    assert_int_equal(out.f[0], 300);
    q = pst_decode_event(&dec, q, p, &out, idbuf);
    assert_int_equal(out.type, PST_EV_MALLOC);
    assert_int_equal(out.cyc, 300);
    q = pst_decode_event(&dec, q, p, &out, idbuf);
    assert_ptr_equal(q, p);
    assert_int_equal(out.type, PST_EV_FREE);
    assert_int_equal(out.cyc, 300);
    /* a second record adds to the first */
    p = pst_put_cyc(&enc, buf, 1000);
    q = pst_decode_event(&dec, buf, p, &out, idbuf);
    assert_int_equal(out.f[0], 700);
    assert_int_equal(dec.last_cyc, 1000);
    /* a CYC "event" is refused by the encoder */
    pst_event_t c = { .type = PST_EV_CYC };
    assert_null(pst_encode_event(&enc, buf, &c));
}

static void test_ver_records_round_trip_and_are_bounded(void **state)
{
    (void)state;
    static uint32_t idbuf[PST_MAX_IDS];
    uint8_t buf[64];
    pst_event_t in = { .type = PST_EV_REALLOC, .f = { 0x1000, 0x2000, 64 }, .n_ver = 2, .ver = { 0x1234, 7 } };
    pst_enc_t enc = { 0 }, dec = { 0 };
    uint8_t *e = pst_encode_event(&enc, buf, &in);
    assert_non_null(e);
    const uint8_t want[] = { 19, 0x34, 0x12, 19, 7, 0, PST_EV_REALLOC };
    assert_memory_equal(buf, want, sizeof want);
    pst_event_t out;
    const uint8_t *p = pst_decode_event(&dec, buf, e, &out, idbuf);
    assert_int_equal(out.type, PST_EV_VER);
    assert_int_equal(out.f[0], 0x1234);
    p = pst_decode_event(&dec, p, e, &out, idbuf);
    assert_int_equal(out.type, PST_EV_VER);
    p = pst_decode_event(&dec, p, e, &out, idbuf);
    assert_ptr_equal(p, e);
    assert_int_equal(out.type, PST_EV_REALLOC);
    assert_int_equal(out.n_ver, 2);
    assert_int_equal(out.ver[0], 0x1234);
    assert_int_equal(out.ver[1], 7);
    assert_int_equal(dec.nver, 0);          /* consumed by the event */
    assert_int_equal(enc.since_ts, 1);      /* VER is not an event */
    /* a third VER before one event is corrupt; so is a cut one */
    const uint8_t three[] = { 19, 1, 0, 19, 2, 0, 19, 3, 0, PST_EV_FREE, 3 };
    pst_enc_t d3 = { 0 };
    p = three;
    for (int i = 0; i < 2; i++) assert_non_null(p = pst_decode_event(&d3, p, three + sizeof three, &out, idbuf));
    assert_null(pst_decode_event(&d3, p, three + sizeof three, &out, idbuf));
    pst_enc_t d4 = { 0 };
    assert_null(pst_decode_event(&d4, three, three + 2, &out, idbuf));
    /* more than two asked of the encoder is refused; a VER "event" too */
    in.n_ver = 3;
    assert_null(pst_encode_event(&enc, buf, &in));
    pst_event_t v = { .type = PST_EV_VER };
    assert_null(pst_encode_event(&enc, buf, &v));
    /* the ordered addresses the versions belong to */
    uint64_t a[2];
    assert_int_equal(pst_ver_addrs(PST_EV_REALLOC, (const uint64_t[]){ 0x1000, 0x2000, 8 }, a), 2);
    assert_int_equal(a[0], 0x1000);
    assert_int_equal(a[1], 0x2000);
    assert_int_equal(pst_ver_addrs(PST_EV_REALLOC, (const uint64_t[]){ 0x1000, 0x1000, 8 }, a), 1);
    assert_int_equal(pst_ver_addrs(PST_EV_REALLOC, (const uint64_t[]){ 0, 0x3000, 8 }, a), 1);
    assert_int_equal(a[0], 0x3000);
    assert_int_equal(pst_ver_addrs(PST_EV_MALLOC, (const uint64_t[]){ 0, 8 }, a), 0);
    assert_int_equal(pst_ver_addrs(PST_EV_MREMAP, (const uint64_t[]){ 0x10000, 4096, 0x20000, 8192, 1 }, a), 2);
    assert_int_equal(a[1], 0x20000);
    assert_int_equal(pst_ver_addrs(PST_EV_MADVISE, (const uint64_t[]){ 0x10000, 4096, 4 }, a), 0);
    /* 1.4's mapping events neither allocate nor free: no versions */
    assert_int_equal(pst_ver_addrs(PST_EV_MPROTECT, (const uint64_t[]){ 0x10000, 4096, 3 }, a), 0);
    assert_int_equal(pst_ver_addrs(PST_EV_MMAP_NAME, (const uint64_t[]){ 0x10000, 1 }, a), 0);
    /* the slot function, by hand for one address: (a >> 4) + region hash */
    uint64_t x = 0x7f0012345670ull;
    uint32_t region = (uint32_t)(((x >> 20) * 0x9E3779B97F4A7C15ull) >> 48);
    assert_int_equal(pst_vslot(x), (uint32_t)((x >> 4) + region) & 0xffff);
    assert_int_equal(pst_vslot(x + 16), (pst_vslot(x) + 1) & 0xffff);
    assert_int_equal(pst_vnext(65535), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_varint_round_trips_at_edges),
        cmocka_unit_test(test_varint_longer_than_ten_bytes_is_corrupt),
        cmocka_unit_test(test_zigzag_round_trips_at_edges),
        cmocka_unit_test(test_addr_round_trips_at_edges),
        cmocka_unit_test(test_addr_aligned_small_delta_takes_one_byte),
        cmocka_unit_test(test_addr_code_is_a_plain_varint_below_2_pow_64),
        cmocka_unit_test(test_addr_corrupt_code_is_defined),
        cmocka_unit_test(test_crc32c_known_vectors_software),
        cmocka_unit_test(test_crc32c_hardware_matches_software_at_every_length),
        cmocka_unit_test(test_crc32c_continues_over_split_buffers),
        cmocka_unit_test(test_layout_table_is_well_formed),
        cmocka_unit_test(test_ver_records_round_trip_and_are_bounded),
        cmocka_unit_test(test_cyc_records_round_trip_and_carry_the_count),
        cmocka_unit_test(test_every_event_type_round_trips),
        cmocka_unit_test(test_ts_record_round_trips_and_moves_time),
        cmocka_unit_test(test_encode_rejects_unknown_types_and_over_limit_counts),
        cmocka_unit_test(test_decode_rejects_unknown_types_and_over_limit_counts),
        cmocka_unit_test(test_decode_writes_no_fields_beyond_the_layout),
        cmocka_unit_test(test_mapping_events_encode_as_format_md_says),
        cmocka_unit_test(test_file_header_has_magic_version_and_fields),
        cmocka_unit_test(test_chunk_header_round_trips_with_crc),
        cmocka_unit_test(test_meta_records_have_documented_shape),
        cmocka_unit_test(test_stack_tail_records_have_documented_shape),
        cmocka_unit_test(test_format_md_names_every_event_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
