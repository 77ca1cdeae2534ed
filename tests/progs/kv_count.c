/* kv_count.c — an independent count of a trace's KV-cache utilization over
 * the reader API, for tests/integration/kvutil.sh (it shares no code with
 * analyzer/scan.c or replay/).
 *
 *   kv_count FILE
 *   kv_count --blocks FILE
 *
 * The block pool's contract (pool/blockpool.c, libtrace/pool_adapter.c): a
 * block's token count is set when it is allocated — the ALLOC event's
 * n_tokens filled into its ids in order, block_size each, the last one
 * partial; a list longer than one event carries n_tokens on its first piece
 * only — and a TOKENS event says when the count changes later. A freed
 * block holds nothing.
 *
 * Printed (key=value):
 *   kv_utilization   time-weighted tokens stored / (blocks held x block size)
 *                    over the time some block is held, up to the last event
 *   peak_blocks      most blocks held at once (first time reached)
 *   tokens_at_peak   tokens stored then, capacity_at_peak the slots then:
 *                    the state at the end of that instant (an event at the
 *                    same time stamp, e.g. a TOKENS right after the ALLOC,
 *                    is simultaneous at the trace's resolution)
 *   allocs frees tokens_events  KV events seen
 * With --blocks, instead: one line per block id of every ALLOC event, in
 * trace order, "POOL_ID POOL_SEQ BLOCK_ID N_USED" (the tokens the block
 * holds once the event is taken), for the `blocks` rows of `poolscope sql`.
 * Exit 0, or 2 if the file cannot be read.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "poolscope/format.h"
#include "poolscope/reader.h"

#define MAX_POOLS 16
#define MAX_BLOCK (1u << 24)

typedef struct kpool {
    uint64_t id, bs;
    int32_t *used;               /* per block id: -1 not held, else tokens */
    uint32_t cap;
    uint64_t carry;              /* tokens of a split list still to hand out */
} kpool_t;

static kpool_t pools[MAX_POOLS];
static int n_pools;

static kpool_t *pool_of(uint64_t id)
{
    for (int i = 0; i < n_pools; i++) if (pools[i].id == id) return &pools[i];
    if (n_pools == MAX_POOLS) return NULL;
    kpool_t *p = &pools[n_pools++];
    memset(p, 0, sizeof *p);
    p->id = id;
    p->bs = 16;
    return p;
}

static int32_t *slot(kpool_t *p, uint32_t b)
{
    if (b >= MAX_BLOCK) return NULL;
    if (b >= p->cap) {
        uint32_t n = p->cap ? p->cap : 64;
        while (n <= b) n *= 2;
        int32_t *u = realloc(p->used, n * sizeof *u);
        if (!u) return NULL;
        for (uint32_t i = p->cap; i < n; i++) u[i] = -1;
        p->used = u;
        p->cap = n;
    }
    return &p->used[b];
}

int main(int argc, char **argv)
{
    int list = argc == 3 && !strcmp(argv[1], "--blocks");
    if (argc != 2 && !list) { fprintf(stderr, "usage: kv_count [--blocks] FILE\n"); return 2; }
    const char *path = argv[argc - 1];
    int err;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) { fprintf(stderr, "kv_count: %s: %s\n", path, psc_strerror(err)); return 2; }
    pst_event_t ev;
    int rc;
    uint64_t tokens = 0, blocks = 0, slots = 0;     /* now, over every pool */
    uint64_t peak = 0, tok_peak = 0, slots_peak = 0, peak_t = 0;
    uint64_t n_alloc = 0, n_free = 0, n_tok = 0;
    double area = 0, weight = 0;
    uint64_t t = 0;
    int started = 0;
    while ((rc = pst_next(r, &ev)) > 0) {
        uint64_t now = started && ev.ts < t ? t : ev.ts;
        if (started && slots) {
            area += (double)(now - t) * (double)tokens / (double)slots;
            weight += (double)(now - t);
        }
        t = now;
        started = 1;
        kpool_t *p;
        switch (ev.type) {
        case PST_EV_KVB_CREATE:      /* pool id, name, block_size, ... */
            if ((p = pool_of(ev.f[0])) && ev.f[2]) p->bs = ev.f[2];
            break;
        case PST_EV_KVB_ALLOC: {     /* pool id, pool_seq, stream, owner, format, n_tokens, ids */
            if (!(p = pool_of(ev.f[0]))) break;
            n_alloc++;
            int have = ev.f[5] > 0 || p->carry > 0;
            uint64_t left = ev.f[5] > 0 ? ev.f[5] : p->carry;
            for (uint32_t i = 0; i < ev.n_ids; i++) {
                int32_t *u = slot(p, ev.ids[i]);
                if (!u || *u >= 0) continue;
                uint64_t fill = p->bs;
                if (have) { fill = left < p->bs ? left : p->bs; left -= fill; }
                *u = (int32_t)fill;
                tokens += fill;
                blocks++;
                slots += p->bs;
            }
            p->carry = left;
            for (uint32_t i = 0; list && i < ev.n_ids; i++) {
                int32_t *u = slot(p, ev.ids[i]);
                if (u) printf("%llu %llu %u %d\n", (unsigned long long)ev.f[0], (unsigned long long)ev.f[1],
                              ev.ids[i], *u);
            }
            if (blocks > peak) { peak = blocks; peak_t = t; }
            break;
        }
        case PST_EV_KVB_TOKENS: {    /* pool id, pool_seq, block id, n_used */
            if (!(p = pool_of(ev.f[0]))) break;
            n_tok++;
            int32_t *u = slot(p, (uint32_t)ev.f[2]);
            if (!u || *u < 0) break;
            tokens = tokens - (uint64_t)*u + ev.f[3];
            *u = (int32_t)ev.f[3];
            break;
        }
        case PST_EV_KVB_FREE: {      /* pool id, pool_seq, ids */
            if (!(p = pool_of(ev.f[0]))) break;
            n_free++;
            for (uint32_t i = 0; i < ev.n_ids; i++) {
                int32_t *u = slot(p, ev.ids[i]);
                if (!u || *u < 0) continue;
                tokens -= (uint64_t)*u;
                *u = -1;
                blocks--;
                slots -= p->bs;
            }
            break;
        }
        default: break;
        }
        if (peak && blocks == peak && t == peak_t) { tok_peak = tokens; slots_peak = slots; }
    }
    if (rc < 0) { fprintf(stderr, "kv_count: %s: %s\n", path, psc_strerror(rc)); pst_close(r); return 2; }
    if (list) {
        for (int i = 0; i < n_pools; i++) free(pools[i].used);
        pst_close(r);
        return 0;
    }
    printf("kv_utilization=%.6f\n", weight > 0 ? area / weight : 0.0);
    printf("peak_blocks=%llu\ntokens_at_peak=%llu\ncapacity_at_peak=%llu\n", (unsigned long long)peak,
           (unsigned long long)tok_peak, (unsigned long long)slots_peak);
    printf("allocs=%llu\nfrees=%llu\ntokens_events=%llu\n", (unsigned long long)n_alloc,
           (unsigned long long)n_free, (unsigned long long)n_tok);
    for (int i = 0; i < n_pools; i++) free(pools[i].used);
    pst_close(r);
    return 0;
}
