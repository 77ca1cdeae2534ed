/* pre_encode.c — the interposer's hand-coded encoders (libtrace/preload/
 * enc_inline.h) against the table-driven pst_encode_event (format.c).
 *
 *   pre_encode [N [SEED]]    default N = 2000000 events, SEED = 1
 *
 * Runs N random events through both, each side with its own encoder state
 * carried from event to event (as a thread's stream does), and checks that
 * the bytes, their length and the resulting state (last address, events
 * since TS) are identical, then decodes the table-driven bytes and checks
 * the event comes back. Both encoders use the format-1.5 coding (recent
 * addresses, pst_put_addr5). Values are drawn per magnitude class so every
 * varint length (1..10 bytes), aligned and unaligned address deltas,
 * deltas of 2^62 and more, addresses given out 1 to 400 fields before (in
 * and past the recent list), stack id 0 and large stack ids all occur. Exits 1 with a message on the first mismatch, 0 after
 * printing "pre_encode: N events ok".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../libtrace/preload/enc_inline.h"

static uint64_t rng = 1;

static uint64_t rnd(void)
{
    rng ^= rng >> 12; rng ^= rng << 25; rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

/* A value of a random bit length, sometimes an edge value. */
static uint64_t value(void)
{
    uint64_t r = rnd();
    switch (r & 15) {
    case 0: return 0;
    case 1: return UINT64_MAX - (rnd() & 3);
    case 2: { unsigned k = (unsigned)(rnd() % 64); return (1ull << k) - (rnd() & 1); }  /* at a varint boundary */
    default: {
        unsigned bits = 1 + (unsigned)(rnd() % 64);
        uint64_t v = rnd();
        return bits == 64 ? v : v & ((1ull << bits) - 1);
    }
    }
}

/* An address: usually a heap-like one near the previous (small delta,
 * often 16-aligned), sometimes anywhere. */
static uint64_t hist[512];   /* addresses given out, for reuse (the recent list's hits) */
static unsigned nhist;

static uint64_t address_new(uint64_t prev);
static uint64_t address(uint64_t prev)
{
    uint64_t r = rnd();
    uint64_t a = r % 3 == 0 && nhist ? hist[(nhist - 1 - (r >> 8) % (r & 16 ? 400 : 24)) % 512]
                                     : address_new(prev);
    hist[nhist++ % 512] = a;
    return a;
}

static uint64_t address_new(uint64_t prev)
{
    uint64_t r = rnd();
    switch (r % 8) {
    case 0: return value();
    case 1: return value() & ~15ull;
    case 2: return prev + (value() & 0xfffff);
    case 3: return (prev - (rnd() & 0xffff)) & ~15ull;
    default: {
        uint64_t d = (rnd() & 0x3ffff) << 4;
        return ((rnd() & 1) ? prev + d : prev - d) & ((rnd() & 7) ? ~15ull : ~0ull);
    }
    }
}

static uint32_t stack_id(void)
{
    uint64_t r = rnd();
    if (r % 3 == 0) return 0;
    return (uint32_t)(value() & (r & 8 ? 0xffffffffu : 0x3fff));
}

static void dump(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %02x", p[i]);
    fputc('\n', stderr);
}

int main(int argc, char **argv)
{
    unsigned long n = argc > 1 ? strtoul(argv[1], NULL, 10) : 2000000ul;
    rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 1;
    if (!rng) rng = 1;
    static const unsigned au[] = { PST_EV_MALLOC, PST_EV_VALLOC, PST_EV_PVALLOC };
    static const unsigned auu[] = { PST_EV_CALLOC, PST_EV_POSIX_MEMALIGN, PST_EV_ALIGNED_ALLOC, PST_EV_MEMALIGN };
    static pst_enc_t ei, er, dc;   /* inline, table-driven, and a decoder of the latter's bytes */
    static uint16_t ii[PST_RECENT_IDX], ir[PST_RECENT_IDX];
    static uint32_t idbuf[PST_MAX_IDS];
    pst_enc_init(&ei, PST_CODING_RECENT, ii);
    pst_enc_init(&er, PST_CODING_RECENT, ir);
    pst_enc_init(&dc, PST_CODING_RECENT, NULL);
    uint64_t prev = 0x7f0000001000ull;
    for (unsigned long k = 0; k < n; k++) {
        /* Scratch bytes past the end are allowed on the inline side; fill
         * both buffers with different garbage so a length error shows. */
        uint8_t bi[PST_EVENT_MAX + 16], br[PST_EVENT_MAX + 16];
        memset(bi, 0xa5, sizeof bi);
        memset(br, 0x5a, sizeof br);
        pst_event_t ev;
        memset(&ev, 0, sizeof ev);
        ev.stack = stack_id();
        uint8_t *ei_end;
        unsigned kind = (unsigned)(rnd() % 4);
        uint64_t a1 = address(prev), a2 = address(a1);
        uint64_t u1 = value(), u2 = value();
        switch (kind) {
        case 0:
            ev.type = (uint8_t)au[rnd() % 3];
            ev.f[0] = a1; ev.f[1] = u1;
            ei_end = ps_enc_Au(&ei, bi, ev.type, ev.stack, a1, u1);
            prev = a1;
            break;
        case 1:
            ev.type = PST_EV_FREE;
            ev.f[0] = a1;
            ei_end = ps_enc_A(&ei, bi, ev.type, ev.stack, a1);
            prev = a1;
            break;
        case 2:
            ev.type = (uint8_t)auu[rnd() % 4];
            ev.f[0] = a1; ev.f[1] = u1; ev.f[2] = u2;
            ei_end = ps_enc_Auu(&ei, bi, ev.type, ev.stack, a1, u1, u2);
            prev = a1;
            break;
        default:
            ev.type = PST_EV_REALLOC;
            ev.f[0] = a1; ev.f[1] = a2; ev.f[2] = u1;
            ei_end = ps_enc_AAu(&ei, bi, ev.type, ev.stack, a1, a2, u1);
            prev = a2;
            break;
        }
        uint8_t *er_end = pst_encode_event(&er, br, &ev);
        size_t li = (size_t)(ei_end - bi), lr = er_end ? (size_t)(er_end - br) : 0;
        if (!er_end || li != lr || memcmp(bi, br, lr) || ps_enc_last(&ei) != er.last_addr
            || ei.since_ts != er.since_ts || li > PST_EVENT_MAX) {
            fprintf(stderr, "pre_encode: mismatch at event %lu: type %u stack %u f = %#llx %#llx %#llx\n",
                    k, ev.type, ev.stack, (unsigned long long)ev.f[0], (unsigned long long)ev.f[1],
                    (unsigned long long)ev.f[2]);
            dump("inline", bi, li);
            dump("pst_encode_event", br, lr);
            fprintf(stderr, "  last_addr %#llx vs %#llx, since_ts %u vs %u\n",
                    (unsigned long long)ps_enc_last(&ei), (unsigned long long)er.last_addr,
                    ei.since_ts, er.since_ts);
            return 1;
        }
        /* and back: the same addresses, the whole record read */
        pst_event_t out;
        memset(&out, 0, sizeof out);
        const uint8_t *de = pst_decode_event(&dc, br, er_end, &out, idbuf);
        unsigned nf = (unsigned)strlen(pst_event_layout(ev.type));
        if (de != er_end || out.type != ev.type || out.stack != ev.stack ||
            memcmp(out.f, ev.f, nf * sizeof *out.f)) {
            fprintf(stderr, "pre_encode: event %lu does not decode back: f = %#llx %#llx -> %#llx %#llx\n", k,
                    (unsigned long long)ev.f[0], (unsigned long long)ev.f[1],
                    (unsigned long long)out.f[0], (unsigned long long)out.f[1]);
            dump("pst_encode_event", br, lr);
            return 1;
        }
        /* a TS record now and then, as the ring does: it resets since_ts
           on both sides and must not disturb the address base */
        if (ei.since_ts >= PST_TS_EVERY) {
            uint64_t now = k * 1000;
            pst_put_ts(&ei, bi, now);
            uint8_t *te = pst_put_ts(&er, br, now);
            memset(&out, 0, sizeof out);
            if (pst_decode_event(&dc, br, te, &out, idbuf) != te) { fprintf(stderr, "pre_encode: TS\n"); return 1; }
        }
    }
    printf("pre_encode: %lu events ok\n", n);
    return 0;
}
