/* eng_steps.c — per-step counts of a refengine trace, for
 * tests/integration/engine.sh.
 *
 *   eng_steps FILE [WARMUP]
 *
 * Walks the merged event order and counts heap calls (every hooked function:
 * the malloc family, mmap/munmap/mremap, madvise, brk/sbrk), in any thread,
 * that happen while a "decode" scope is open; a thread's stack mapped at its
 * start or unmapped at its end (MMAP flagged PST_MMAP_THREAD_STACK, and the
 * MUNMAP of that address) is a mapping the tracer records, not a call, as in
 * report's figures: a worker ending in the tick of the last decode's end
 * may come out inside it. Steps after the first WARMUP
 * (default 4) decode steps are the steady state (docs/DESIGN.md, "Metrics",
 * allocs_per_decode_step). Prints key=value lines:
 *   decode_steps decode_ends prefill forward layer request_begin request_end
 *   decode_heap_calls steady_heap_calls steady_steps
 *   tensor_acquire tensor_release pool_acquire kvb_alloc kvb_tokens kvb_free
 *   lost truncated
 * Exit 0, or 2 if the file cannot be opened.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/format.h"
#include "poolscope/error.h"
#include "poolscope/reader.h"

static int is_heap_call(unsigned t)
{
    return t >= PST_EV_MALLOC && t <= PST_EV_SBRK && t != PST_EV_TS;
}

/* Thread stacks mapped and not yet unmapped (a handful of threads). */
static uint64_t stacks[256];
static unsigned n_stacks;

static int thread_stack(const pst_event_t *ev, unsigned t)
{
    if (t == PST_EV_MMAP && (ev->f[3] & PST_MMAP_THREAD_STACK)) {
        if (n_stacks < sizeof stacks / sizeof stacks[0]) stacks[n_stacks++] = ev->f[0];
        return 1;
    }
    if (t != PST_EV_MUNMAP) return 0;
    for (unsigned i = 0; i < n_stacks; i++)
        if (stacks[i] == ev->f[0]) { stacks[i] = stacks[--n_stacks]; return 1; }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: eng_steps FILE [WARMUP]\n");
        return 2;
    }
    long warmup = argc > 2 ? strtol(argv[2], NULL, 10) : 4;
    int err = 0;
    pst_reader_t *r = pst_open(argv[1], &err);
    if (!r) {
        fprintf(stderr, "eng_steps: %s: %s\n", argv[1], psc_strerror(err));
        return 2;
    }
    uint64_t decode = 0, decode_end = 0, prefill = 0, forward = 0, layer = 0, req_b = 0, req_e = 0;
    uint64_t heap_in_decode = 0, heap_steady = 0, ta = 0, tr = 0, pa = 0, ka = 0, kt = 0, kf = 0;
    int open_decode = 0;
    pst_event_t ev;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {
        unsigned t = ev.type & PST_EV_TYPE_MASK;
        const char *name = ev.str ? ev.str : "";
        switch (t) {
        case PST_EV_MARK_BEGIN:
            if (!strcmp(name, "decode")) { decode++; open_decode = 1; }
            else if (!strcmp(name, "prefill")) prefill++;
            else if (!strcmp(name, "forward")) forward++;
            else if (!strcmp(name, "layer")) layer++;
            else if (!strcmp(name, "request")) req_b++;
            break;
        case PST_EV_MARK_END:
            if (!strcmp(name, "decode")) { decode_end++; open_decode = 0; }
            else if (!strcmp(name, "request")) req_e++;
            break;
        case PST_EV_TENSOR_ACQUIRE: ta++; break;
        case PST_EV_TENSOR_RELEASE: tr++; break;
        case PST_EV_POOL_ACQUIRE: pa++; break;
        case PST_EV_KVB_ALLOC: ka++; break;
        case PST_EV_KVB_TOKENS: kt++; break;
        case PST_EV_KVB_FREE: kf++; break;
        default:
            if (is_heap_call(t) && !thread_stack(&ev, t) && open_decode) {
                heap_in_decode++;
                if ((long)decode > warmup && heap_steady++ < 8)   /* name it: a failing check says what */
                    fprintf(stderr, "eng_steps: steady heap call: type %u, stream %u, ts %llu, f0 %#llx f1 %llu\n",
                            t, (unsigned)ev.stream, (unsigned long long)ev.ts,
                            (unsigned long long)ev.f[0], (unsigned long long)ev.f[1]);
            }
            break;
        }
    }
    const pst_status_t *st = pst_status(r);
    printf("decode_steps=%llu\ndecode_ends=%llu\nprefill=%llu\nforward=%llu\nlayer=%llu\n"
           "request_begin=%llu\nrequest_end=%llu\ndecode_heap_calls=%llu\nsteady_heap_calls=%llu\n"
           "steady_steps=%llu\ntensor_acquire=%llu\ntensor_release=%llu\npool_acquire=%llu\n"
           "kvb_alloc=%llu\nkvb_tokens=%llu\nkvb_free=%llu\nlost=%llu\ntruncated=%d\n",
           (unsigned long long)decode, (unsigned long long)decode_end, (unsigned long long)prefill,
           (unsigned long long)forward, (unsigned long long)layer, (unsigned long long)req_b,
           (unsigned long long)req_e, (unsigned long long)heap_in_decode,
           (unsigned long long)heap_steady,
           (unsigned long long)((long)decode > warmup ? decode - (uint64_t)warmup : 0),
           (unsigned long long)ta, (unsigned long long)tr, (unsigned long long)pa,
           (unsigned long long)ka, (unsigned long long)kt, (unsigned long long)kf,
           (unsigned long long)st->lost, st->truncated);
    pst_close(r);
    return rc < 0 ? 1 : 0;
}
