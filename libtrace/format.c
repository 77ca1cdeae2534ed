/* format.c — the one copy of the event layout table, CRC-32C, and the
 * table-driven event encoder/decoder of the .pst format (format.h).
 *
 * This file is also compiled into the LD_PRELOAD interposer and runs inside
 * malloc: it does pure computation only — no allocation, no stdio, no locks,
 * no errno. The only static state is the lazily detected CPU feature flag
 * for the CRC instruction (an idempotent value; racing initialisations store
 * the same thing).
 *
 * Decoding speed matters (the reader decodes tens of millions of events per
 * second): the layout strings are walked one character per field, every
 * varint is bounds-checked against `end`, and nothing beyond what the layout
 * names is written into the event.
 */
#include "poolscope/format.h"
#include "poolscope/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define PST_HAVE_X86_CRC 1
#endif

/* ---- the layout table --------------------------------------------------- */

static const char *const layout_tab[PST_EV_MAX] = {
    [PST_EV_MALLOC]             = "Au",
    [PST_EV_CALLOC]             = "Auu",
    [PST_EV_REALLOC]            = "AAu",
    [PST_EV_REALLOCARRAY]       = "AAuu",
    [PST_EV_FREE]               = "A",
    [PST_EV_POSIX_MEMALIGN]     = "Auu",
    [PST_EV_ALIGNED_ALLOC]      = "Auu",
    [PST_EV_MEMALIGN]           = "Auu",
    [PST_EV_VALLOC]             = "Au",
    [PST_EV_PVALLOC]            = "Au",
    [PST_EV_MMAP]               = "Auuuzu",
    [PST_EV_MUNMAP]             = "Au",
    [PST_EV_MREMAP]             = "AuAuu",
    [PST_EV_MADVISE]            = "Auu",
    [PST_EV_BRK]                = "Az",
    [PST_EV_SBRK]               = "zA",
    [PST_EV_TS]                 = "u",
    [PST_EV_RSS]                = "uuu",
    [PST_EV_VER]                = "v",
    [PST_EV_CYC]                = "u",
    [PST_EV_TENSOR_ACQUIRE]     = "uuuuu",
    [PST_EV_TENSOR_RELEASE]     = "u",
    [PST_EV_MPROTECT]           = "Auu",
    [PST_EV_MMAP_NAME]          = "AS",
    [PST_EV_POOL_CREATE]        = "uSuu",
    [PST_EV_POOL_ACQUIRE]       = "uuuuuuuuu",
    [PST_EV_POOL_RECLAIM]       = "uuuuuu",
    [PST_EV_POOL_BACKING_ALLOC] = "uuAu",
    [PST_EV_POOL_BACKING_FREE]  = "uuAu",
    [PST_EV_POOL_DESTROY]       = "u",
    [PST_EV_KVB_CREATE]         = "uSuuuuuu",
    [PST_EV_KVB_ALLOC]          = "uuuzuuL",
    [PST_EV_KVB_TOKENS]         = "uuuu",
    [PST_EV_KVB_FREE]           = "uuL",
    [PST_EV_KVB_GROW]           = "uuuu",
    [PST_EV_KVB_SHRINK]         = "uuuL",
    [PST_EV_KVB_EXHAUSTED]      = "uuuzu",
    [PST_EV_KVB_OWNER]          = "uuzu",
    [PST_EV_KVB_DESTROY]        = "u",
    [PST_EV_MARK_POINT]         = "SP",
    [PST_EV_MARK_BEGIN]         = "SuP",
    [PST_EV_MARK_END]           = "Su",
    [PST_EV_THREAD_START]       = "uu",
    [PST_EV_THREAD_END]         = "",
    [PST_EV_THREAD_NAME]        = "S",
    [PST_EV_FORK]               = "u",
    [PST_EV_EXEC]               = "S",
    [PST_EV_LOST]               = "uu",
    [PST_EV_TRACE_ON]           = "",
    [PST_EV_TRACE_OFF]          = "",
};

static const char *const name_tab[PST_EV_MAX] = {
    [PST_EV_MALLOC]             = "malloc",
    [PST_EV_CALLOC]             = "calloc",
    [PST_EV_REALLOC]            = "realloc",
    [PST_EV_REALLOCARRAY]       = "reallocarray",
    [PST_EV_FREE]               = "free",
    [PST_EV_POSIX_MEMALIGN]     = "posix_memalign",
    [PST_EV_ALIGNED_ALLOC]      = "aligned_alloc",
    [PST_EV_MEMALIGN]           = "memalign",
    [PST_EV_VALLOC]             = "valloc",
    [PST_EV_PVALLOC]            = "pvalloc",
    [PST_EV_MMAP]               = "mmap",
    [PST_EV_MUNMAP]             = "munmap",
    [PST_EV_MREMAP]             = "mremap",
    [PST_EV_MADVISE]            = "madvise",
    [PST_EV_BRK]                = "brk",
    [PST_EV_SBRK]               = "sbrk",
    [PST_EV_TS]                 = "ts",
    [PST_EV_RSS]                = "rss",
    [PST_EV_VER]                = "ver",
    [PST_EV_CYC]                = "cyc",
    [PST_EV_TENSOR_ACQUIRE]     = "tensor_acquire",
    [PST_EV_TENSOR_RELEASE]     = "tensor_release",
    [PST_EV_MPROTECT]           = "mprotect",
    [PST_EV_MMAP_NAME]          = "mmap_name",
    [PST_EV_POOL_CREATE]        = "pool_create",
    [PST_EV_POOL_ACQUIRE]       = "pool_acquire",
    [PST_EV_POOL_RECLAIM]       = "pool_reclaim",
    [PST_EV_POOL_BACKING_ALLOC] = "pool_backing_alloc",
    [PST_EV_POOL_BACKING_FREE]  = "pool_backing_free",
    [PST_EV_POOL_DESTROY]       = "pool_destroy",
    [PST_EV_KVB_CREATE]         = "kvb_create",
    [PST_EV_KVB_ALLOC]          = "kvb_alloc",
    [PST_EV_KVB_TOKENS]         = "kvb_tokens",
    [PST_EV_KVB_FREE]           = "kvb_free",
    [PST_EV_KVB_GROW]           = "kvb_grow",
    [PST_EV_KVB_SHRINK]         = "kvb_shrink",
    [PST_EV_KVB_EXHAUSTED]      = "kvb_exhausted",
    [PST_EV_KVB_OWNER]          = "kvb_owner",
    [PST_EV_KVB_DESTROY]        = "kvb_destroy",
    [PST_EV_MARK_POINT]         = "mark_point",
    [PST_EV_MARK_BEGIN]         = "mark_begin",
    [PST_EV_MARK_END]           = "mark_end",
    [PST_EV_THREAD_START]       = "thread_start",
    [PST_EV_THREAD_END]         = "thread_end",
    [PST_EV_THREAD_NAME]        = "thread_name",
    [PST_EV_FORK]               = "fork",
    [PST_EV_EXEC]               = "exec",
    [PST_EV_LOST]               = "lost",
    [PST_EV_TRACE_ON]           = "trace_on",
    [PST_EV_TRACE_OFF]          = "trace_off",
};

const char *pst_event_layout(unsigned type)
{
    return type < PST_EV_MAX ? layout_tab[type] : NULL;
}

const char *pst_event_name(unsigned type)
{
    return type < PST_EV_MAX ? name_tab[type] : NULL;
}

/* ---- CRC-32C ------------------------------------------------------------- */

/* Reflected Castagnoli polynomial 0x82F63B78, one byte per step. */
static const uint32_t crc_tab[256] = {
    0x00000000, 0xf26b8303, 0xe13b70f7, 0x1350f3f4, 0xc79a971f, 0x35f1141c,
    0x26a1e7e8, 0xd4ca64eb, 0x8ad958cf, 0x78b2dbcc, 0x6be22838, 0x9989ab3b,
    0x4d43cfd0, 0xbf284cd3, 0xac78bf27, 0x5e133c24, 0x105ec76f, 0xe235446c,
    0xf165b798, 0x030e349b, 0xd7c45070, 0x25afd373, 0x36ff2087, 0xc494a384,
    0x9a879fa0, 0x68ec1ca3, 0x7bbcef57, 0x89d76c54, 0x5d1d08bf, 0xaf768bbc,
    0xbc267848, 0x4e4dfb4b, 0x20bd8ede, 0xd2d60ddd, 0xc186fe29, 0x33ed7d2a,
    0xe72719c1, 0x154c9ac2, 0x061c6936, 0xf477ea35, 0xaa64d611, 0x580f5512,
    0x4b5fa6e6, 0xb93425e5, 0x6dfe410e, 0x9f95c20d, 0x8cc531f9, 0x7eaeb2fa,
    0x30e349b1, 0xc288cab2, 0xd1d83946, 0x23b3ba45, 0xf779deae, 0x05125dad,
    0x1642ae59, 0xe4292d5a, 0xba3a117e, 0x4851927d, 0x5b016189, 0xa96ae28a,
    0x7da08661, 0x8fcb0562, 0x9c9bf696, 0x6ef07595, 0x417b1dbc, 0xb3109ebf,
    0xa0406d4b, 0x522bee48, 0x86e18aa3, 0x748a09a0, 0x67dafa54, 0x95b17957,
    0xcba24573, 0x39c9c670, 0x2a993584, 0xd8f2b687, 0x0c38d26c, 0xfe53516f,
    0xed03a29b, 0x1f682198, 0x5125dad3, 0xa34e59d0, 0xb01eaa24, 0x42752927,
    0x96bf4dcc, 0x64d4cecf, 0x77843d3b, 0x85efbe38, 0xdbfc821c, 0x2997011f,
    0x3ac7f2eb, 0xc8ac71e8, 0x1c661503, 0xee0d9600, 0xfd5d65f4, 0x0f36e6f7,
    0x61c69362, 0x93ad1061, 0x80fde395, 0x72966096, 0xa65c047d, 0x5437877e,
    0x4767748a, 0xb50cf789, 0xeb1fcbad, 0x197448ae, 0x0a24bb5a, 0xf84f3859,
    0x2c855cb2, 0xdeeedfb1, 0xcdbe2c45, 0x3fd5af46, 0x7198540d, 0x83f3d70e,
    0x90a324fa, 0x62c8a7f9, 0xb602c312, 0x44694011, 0x5739b3e5, 0xa55230e6,
    0xfb410cc2, 0x092a8fc1, 0x1a7a7c35, 0xe811ff36, 0x3cdb9bdd, 0xceb018de,
    0xdde0eb2a, 0x2f8b6829, 0x82f63b78, 0x709db87b, 0x63cd4b8f, 0x91a6c88c,
    0x456cac67, 0xb7072f64, 0xa457dc90, 0x563c5f93, 0x082f63b7, 0xfa44e0b4,
    0xe9141340, 0x1b7f9043, 0xcfb5f4a8, 0x3dde77ab, 0x2e8e845f, 0xdce5075c,
    0x92a8fc17, 0x60c37f14, 0x73938ce0, 0x81f80fe3, 0x55326b08, 0xa759e80b,
    0xb4091bff, 0x466298fc, 0x1871a4d8, 0xea1a27db, 0xf94ad42f, 0x0b21572c,
    0xdfeb33c7, 0x2d80b0c4, 0x3ed04330, 0xccbbc033, 0xa24bb5a6, 0x502036a5,
    0x4370c551, 0xb11b4652, 0x65d122b9, 0x97baa1ba, 0x84ea524e, 0x7681d14d,
    0x2892ed69, 0xdaf96e6a, 0xc9a99d9e, 0x3bc21e9d, 0xef087a76, 0x1d63f975,
    0x0e330a81, 0xfc588982, 0xb21572c9, 0x407ef1ca, 0x532e023e, 0xa145813d,
    0x758fe5d6, 0x87e466d5, 0x94b49521, 0x66df1622, 0x38cc2a06, 0xcaa7a905,
    0xd9f75af1, 0x2b9cd9f2, 0xff56bd19, 0x0d3d3e1a, 0x1e6dcdee, 0xec064eed,
    0xc38d26c4, 0x31e6a5c7, 0x22b65633, 0xd0ddd530, 0x0417b1db, 0xf67c32d8,
    0xe52cc12c, 0x1747422f, 0x49547e0b, 0xbb3ffd08, 0xa86f0efc, 0x5a048dff,
    0x8ecee914, 0x7ca56a17, 0x6ff599e3, 0x9d9e1ae0, 0xd3d3e1ab, 0x21b862a8,
    0x32e8915c, 0xc083125f, 0x144976b4, 0xe622f5b7, 0xf5720643, 0x07198540,
    0x590ab964, 0xab613a67, 0xb831c993, 0x4a5a4a90, 0x9e902e7b, 0x6cfbad78,
    0x7fab5e8c, 0x8dc0dd8f, 0xe330a81a, 0x115b2b19, 0x020bd8ed, 0xf0605bee,
    0x24aa3f05, 0xd6c1bc06, 0xc5914ff2, 0x37faccf1, 0x69e9f0d5, 0x9b8273d6,
    0x88d28022, 0x7ab90321, 0xae7367ca, 0x5c18e4c9, 0x4f48173d, 0xbd23943e,
    0xf36e6f75, 0x0105ec76, 0x12551f82, 0xe03e9c81, 0x34f4f86a, 0xc69f7b69,
    0xd5cf889d, 0x27a40b9e, 0x79b737ba, 0x8bdcb4b9, 0x988c474d, 0x6ae7c44e,
    0xbe2da0a5, 0x4c4623a6, 0x5f16d052, 0xad7d5351,
};

static uint32_t crc32c_sw(uint32_t crc, const uint8_t *p, size_t len)
{
    while (len--)
        crc = crc_tab[(crc ^ *p++) & 0xff] ^ (crc >> 8);
    return crc;
}

#ifdef PST_HAVE_X86_CRC
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const uint8_t *p, size_t len)
{
#if defined(__x86_64__)
    uint64_t c = crc;
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = _mm_crc32_u64(c, w);
        p += 8; len -= 8;
    }
    crc = (uint32_t)c;
#endif
    while (len--)
        crc = _mm_crc32_u8(crc, *p++);
    return crc;
}

/* 0 unknown, 1 software, 2 hardware. Relaxed atomics: every thread that
 * races here computes and stores the same value. */
static int crc_impl;

static int crc_detect(void)
{
    __builtin_cpu_init();   /* may run before libgcc's constructor (inside malloc) */
    int v = __builtin_cpu_supports("sse4.2") ? 2 : 1;
    __atomic_store_n(&crc_impl, v, __ATOMIC_RELAXED);
    return v;
}
#endif

/* Exposed for tests (not in format.h: declared where tested). */
uint32_t pst__crc32c_sw(uint32_t crc, const void *buf, size_t len);
uint32_t pst__crc32c_hw(uint32_t crc, const void *buf, size_t len, int *used);

uint32_t pst__crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    return ~crc32c_sw(~crc, buf, len);
}

/* The hardware path if the CPU has it (*used = 1), else software (*used = 0). */
uint32_t pst__crc32c_hw(uint32_t crc, const void *buf, size_t len, int *used)
{
#ifdef PST_HAVE_X86_CRC
    int impl = __atomic_load_n(&crc_impl, __ATOMIC_RELAXED);
    if (!impl) impl = crc_detect();
    if (impl == 2) { *used = 1; return ~crc32c_hw(~crc, buf, len); }
#endif
    *used = 0;
    return ~crc32c_sw(~crc, buf, len);
}

/* crc is the running CRC of earlier bytes (0 to start); pass the result back
 * in to continue over a split buffer. */
uint32_t pst_crc32c(uint32_t crc, const void *buf, size_t len)
{
#ifdef PST_HAVE_X86_CRC
    int impl = __atomic_load_n(&crc_impl, __ATOMIC_RELAXED);
    if (__builtin_expect(!impl, 0)) impl = crc_detect();
    if (impl == 2) return ~crc32c_hw(~crc, buf, len);
#endif
    return ~crc32c_sw(~crc, buf, len);
}

/* ---- events -------------------------------------------------------------- */

uint8_t *pst_encode_event(pst_enc_t *enc, uint8_t *p, const pst_event_t *ev)
{
    unsigned type = ev->type;
    if (type >= PST_EV_MAX || pst_is_record(type)) return NULL;  /* pst_put_ts, n_ver, pst_put_cyc */
    const char *lay = layout_tab[type];
    if (!lay || ev->n_ver > 2) return NULL;
    for (unsigned i = 0; i < ev->n_ver; i++) p = pst_put_ver(p, ev->ver[i]);
    if (ev->stack) {
        *p++ = (uint8_t)(type | PST_EV_HAS_STACK);
        p = pst_put_varint(p, ev->stack);
    } else {
        *p++ = (uint8_t)type;
    }
    for (unsigned i = 0; lay[i]; i++) {
        switch (lay[i]) {
        case 'A':
            if (enc->coding == PST_CODING_RECENT) {
                if (!enc->index) return NULL;   /* an encoder needs its index */
                p = pst_put_addr5(enc, p, ev->f[i]);
            } else {
                p = pst_put_addr(p, &enc->last_addr, ev->f[i]);
            }
            break;
        case 'u': case 'S': p = pst_put_varint(p, ev->f[i]); break;
        case 'z': p = pst_put_zigzag(p, (int64_t)ev->f[i]); break;
        case 'L': {
            uint32_t n = ev->n_ids;
            if (n > PST_MAX_IDS || (n && !ev->ids)) return NULL;
            p = pst_put_varint(p, n);
            if (n) p = pst_put_varint(p, ev->ids[0]);
            for (uint32_t k = 1; k < n; k++)
                p = pst_put_zigzag(p, (int64_t)ev->ids[k] - (int64_t)ev->ids[k - 1]);
            break;
        }
        case 'P': {
            uint32_t n = ev->n_payload;
            if (n > PST_MAX_PAYLOAD) return NULL;
            p = pst_put_varint(p, n);
            for (uint32_t k = 0; k < n; k++) p = pst_put_zigzag(p, ev->payload[k]);
            break;
        }
        default: return NULL;   /* a bad table entry; caught by the tests */
        }
    }
    enc->since_ts++;
    return p;
}

/* Reading a varint inside the decoder: bounds-checked, at most 10 bytes. */
#define GETV(v) do { if (!(p = pst_get_varint(p, end, &(v)))) return NULL; } while (0)

const uint8_t *pst_decode_event(pst_enc_t *dec, const uint8_t *p, const uint8_t *end,
                                pst_event_t *ev, uint32_t *idbuf)
{
    if (p >= end) return NULL;
    unsigned tb = *p++;
    unsigned type = tb & PST_EV_TYPE_MASK;
    const char *lay;
    if (type >= PST_EV_MAX || !(lay = layout_tab[type])) return NULL;
    ev->type = (uint8_t)type;
    uint64_t v;
    if (tb & PST_EV_HAS_STACK) {
        GETV(v);
        if (v > UINT32_MAX) return NULL;
        ev->stack = (uint32_t)v;
    } else {
        ev->stack = 0;
    }
    if (type == PST_EV_TS) {
        GETV(v);
        ev->f[0] = v;
        dec->last_ts += v;
        dec->since_ts = 0;
        ev->ts = dec->last_ts;
        return p;
    }
    if (type == PST_EV_CYC) {   /* the count of this and the next events */
        if (tb != PST_EV_CYC) return NULL;
        GETV(v);
        ev->f[0] = v;
        dec->last_cyc += v;
        ev->cyc = dec->last_cyc;
        ev->n_ver = 0;
        return p;
    }
    if (type == PST_EV_VER) {   /* a record for the next event: at most two before it */
        if (tb != PST_EV_VER || end - p < 2 || dec->nver >= 2) return NULL;
        uint16_t x = (uint16_t)(p[0] | p[1] << 8);
        dec->ver[dec->nver++] = x;
        ev->f[0] = x;
        ev->n_ver = 0;
        return p + 2;
    }
    ev->cyc = dec->last_cyc;
    ev->n_ver = dec->nver;
    ev->ver[0] = dec->ver[0];
    ev->ver[1] = dec->ver[1];
    dec->nver = 0;
    for (unsigned i = 0; lay[i]; i++) {
        switch (lay[i]) {
        case 'A':
            if (dec->coding == PST_CODING_RECENT) {
                if (!(p = pst_get_addr5(dec, p, end, &ev->f[i]))) return NULL;
            } else if (!(p = pst_get_addr(p, end, &dec->last_addr, &ev->f[i]))) {
                return NULL;
            }
            break;
        case 'u': case 'S':
            GETV(ev->f[i]);
            break;
        case 'z':
            GETV(v);
            ev->f[i] = (uint64_t)pst_unzigzag(v);
            break;
        case 'L': {
            uint64_t n;
            GETV(n);
            if (n > PST_MAX_IDS) return NULL;
            if (n) {
                GETV(v);
                if (v > UINT32_MAX) return NULL;
                idbuf[0] = (uint32_t)v;
                for (uint64_t k = 1; k < n; k++) {
                    GETV(v);
                    if (v > ((uint64_t)1 << 34)) return NULL;   /* |delta| > 2^33: corrupt */
                    int64_t id = (int64_t)idbuf[k - 1] + pst_unzigzag(v);
                    if (id < 0 || id > (int64_t)UINT32_MAX) return NULL;
                    idbuf[k] = (uint32_t)id;
                }
            }
            ev->f[i] = n;
            ev->ids = idbuf;
            ev->n_ids = (uint32_t)n;
            break;
        }
        case 'P': {
            uint64_t n;
            GETV(n);
            if (n > PST_MAX_PAYLOAD) return NULL;
            for (uint64_t k = 0; k < n; k++) {
                GETV(v);
                ev->payload[k] = pst_unzigzag(v);
            }
            ev->f[i] = n;
            ev->n_payload = (uint32_t)n;
            break;
        }
        default:
            return NULL;
        }
    }
    dec->since_ts++;
    return p;
}

/* ---- writer helpers ------------------------------------------------------ */

static void put_le16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); p[2] = (uint8_t)(v >> 16); p[3] = (uint8_t)(v >> 24);
}
static uint16_t get_le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t get_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static size_t str_len(const char *s)
{
    size_t n = 0;
    while (s[n]) n++;
    return n;
}

/* Appends one TLV field if it fits; tracks the space needed either way. */
typedef struct tlv_out { uint8_t *buf; size_t cap, pos; int over; } tlv_out_t;

static void tlv_bytes(tlv_out_t *o, unsigned tag, const void *data, size_t len)
{
    uint8_t tmp[2 * PST_VARINT_MAX];
    uint8_t *q = pst_put_varint(pst_put_varint(tmp, tag), len);
    size_t hl = (size_t)(q - tmp);
    if (o->over || o->cap - o->pos < hl || o->cap - o->pos - hl < len) { o->over = 1; return; }
    memcpy(o->buf + o->pos, tmp, hl);
    if (len) memcpy(o->buf + o->pos + hl, data, len);
    o->pos += hl + len;
}

static void tlv_uint(tlv_out_t *o, unsigned tag, uint64_t v)
{
    uint8_t tmp[PST_VARINT_MAX];
    size_t n = (size_t)(pst_put_varint(tmp, v) - tmp);
    tlv_bytes(o, tag, tmp, n);
}

int pst_put_file_header(uint8_t *buf, size_t cap, const pst_file_info_t *in)
{
    if (cap < PST_FILE_HDR_FIXED) return PSC_ERANGE;
    tlv_out_t o = { buf, cap, PST_FILE_HDR_FIXED, 0 };
    tlv_uint(&o, PST_HDR_PID, in->pid);
    tlv_uint(&o, PST_HDR_PPID, in->ppid);
    if (in->exe) tlv_bytes(&o, PST_HDR_EXE, in->exe, str_len(in->exe));
    if (in->argv) tlv_bytes(&o, PST_HDR_ARGV, in->argv, in->argv_len);
    tlv_uint(&o, PST_HDR_START_REAL, in->start_real_ns);
    tlv_uint(&o, PST_HDR_START_MONO, in->start_mono_ns);
    tlv_uint(&o, PST_HDR_STACKS, in->stacks);
    tlv_uint(&o, PST_HDR_DEPTH, in->depth);
    tlv_uint(&o, PST_HDR_PAGE_SIZE, in->page_size);
    if (in->parent_pid) tlv_uint(&o, PST_HDR_PARENT_PID, in->parent_pid);
    tlv_uint(&o, PST_HDR_EXEC_GEN, in->exec_gen);
    if (in->tool) tlv_bytes(&o, PST_HDR_TOOL, in->tool, str_len(in->tool));
    if (in->host) tlv_bytes(&o, PST_HDR_HOST, in->host, str_len(in->host));
    if (in->scope_funcs) tlv_bytes(&o, PST_HDR_SCOPE_FUNCS, in->scope_funcs, in->scope_funcs_len);
    if (in->attach) tlv_uint(&o, PST_HDR_ATTACH, in->attach);
    if (o.over || o.pos - PST_FILE_HDR_FIXED > UINT32_MAX || o.pos > 0x7fffffff) return PSC_ERANGE;
    memcpy(buf, PST_MAGIC, 8);
    put_le16(buf + 8, PST_MAJOR);
    put_le16(buf + 10, in->minor ? in->minor : PST_MINOR);
    put_le32(buf + 12, (uint32_t)(o.pos - PST_FILE_HDR_FIXED));
    return (int)o.pos;
}

void pst_put_chunk_hdr(uint8_t out[PST_CHUNK_HDR], unsigned kind, uint32_t stream,
                       const void *payload, uint32_t len)
{
    pst_put_chunk_hdr_v(out, kind, PST_CHUNK_V1, 0, stream, len, pst_crc32c(0, payload, len));
}

void pst_put_chunk_hdr_v(uint8_t out[PST_CHUNK_HDR], unsigned kind, unsigned version, unsigned flags,
                         uint32_t stream, uint32_t len, uint32_t crc)
{
    out[0] = (uint8_t)kind;
    out[1] = (uint8_t)version;
    put_le16(out + 2, (uint16_t)flags);
    put_le32(out + 4, stream);
    put_le32(out + 8, len);
    put_le32(out + 12, crc);
}

void pst_get_chunk_hdr(const uint8_t in[PST_CHUNK_HDR], pst_chunk_hdr_t *h)
{
    h->kind = in[0];
    h->version = in[1];
    h->flags = get_le16(in + 2);
    h->stream = get_le32(in + 4);
    h->len = get_le32(in + 8);
    h->crc = get_le32(in + 12);
}

uint8_t *pst_put_meta_string(uint8_t *p, uint32_t id, const char *s, size_t len)
{
    *p++ = PST_META_STRING;
    p = pst_put_varint(p, id);
    p = pst_put_varint(p, len);
    if (len) memcpy(p, s, len);
    return p + len;
}

/* The inner frames of a STACK or STACK_TAIL record: the first as it is,
 * the rest as zigzag deltas from the one before. */
static uint8_t *put_frames(uint8_t *p, const uint64_t *frames, uint32_t n)
{
    if (n) p = pst_put_varint(p, frames[0]);
    for (uint32_t i = 1; i < n; i++)
        p = pst_put_zigzag(p, (int64_t)(frames[i] - frames[i - 1]));
    return p;
}

uint8_t *pst_put_meta_stack(uint8_t *p, uint32_t id, const uint64_t *frames, uint32_t depth)
{
    *p++ = PST_META_STACK;
    p = pst_put_varint(p, id);
    p = pst_put_varint(p, depth);
    return put_frames(p, frames, depth);
}

uint8_t *pst_put_meta_stack_near(uint8_t *p, uint32_t id, const uint64_t *frames, uint32_t depth, uint32_t ref,
                                 const uint64_t *ref_frames, uint32_t ref_depth)
{
    uint32_t k = 0;
    if (ref)
        while (k < depth && k < ref_depth && frames[depth - 1 - k] == ref_frames[ref_depth - 1 - k]) k++;
    if (k < PST_TAIL_MIN) return pst_put_meta_stack(p, id, frames, depth);
    *p++ = PST_META_STACK_TAIL;
    p = pst_put_varint(p, id);
    p = pst_put_varint(p, depth);
    p = pst_put_zigzag(p, (int64_t)id - (int64_t)ref);   /* mostly 1: the stack defined last */
    p = pst_put_varint(p, k);
    return put_frames(p, frames, depth - k);
}

uint8_t *pst_put_meta_module(uint8_t *p, int map, uint64_t ts, uint64_t base, uint64_t size,
                             const char *path, size_t path_len,
                             const uint8_t *build_id, size_t bid_len)
{
    *p++ = PST_META_MODULE;
    p = pst_put_varint(p, map ? 1 : 0);
    p = pst_put_varint(p, ts);
    p = pst_put_varint(p, base);
    p = pst_put_varint(p, size);
    p = pst_put_varint(p, path_len);
    if (path_len) memcpy(p, path, path_len);
    p += path_len;
    p = pst_put_varint(p, bid_len);
    if (bid_len) memcpy(p, build_id, bid_len);
    return p + bid_len;
}

uint8_t *pst_put_end(uint8_t *p, uint64_t events, uint64_t lost, uint64_t streams)
{
    p = pst_put_varint(p, events);
    p = pst_put_varint(p, lost);
    return pst_put_varint(p, streams);
}
