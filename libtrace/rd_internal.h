/* rd_internal.h — what the parts of the streaming .pst reader share (see
 * include/poolscope/reader.h for the API, FORMAT.md "Reading: the merge
 * order" for the algorithm). Internal to libtrace: nothing outside
 * libtrace/reader.c and libtrace/rd_*.c includes it.
 *
 * Pipeline and files:
 *   rd_chunk.c   source (read() blocks into one buffer, or memory) -> file
 *                header -> chunks (framing, CRC, validation; META
 *                definitions stored; END counts checked; SYNC watermark)
 *   rd_decode.c  EVENTS chunks: validated by one decoding pass that notes
 *                pending frees and pool events, then their raw event bytes
 *                appended to the stream's byte queue
 *   rd_merge.c   pst_next: pick the queued head with the smallest
 *                (ts, stream) once it is safe (older than the SYNC
 *                watermark or the newest time read minus the window, or the
 *                input has ended); before handing it out, let a pool event
 *                with a smaller pool_seq, an event of the same address with
 *                an earlier version (1.3), or a queued free of the address
 *                it allocates (older traces) go first -> pst_event_t
 *   reader.c     pst_open / pst_close, status
 *
 * Queued events are kept as the stream's raw event bytes (a few bytes per
 * event), not as decoded records: each stream keeps a second decoder state
 * at the head of its byte queue and decodes its head event again when the
 * one before it is handed out. Validation happens once, when the chunk is
 * read, so the second decode cannot fail. A stream's byte queue is one
 * buffer reused in place (compacted when the queued bytes fill at most half
 * of it, grown only when they need it), so steady reading allocates nothing
 * per event or per chunk.
 *
 * Fast paths: the common records (malloc, free, calloc, realloc, with or
 * without a stack id, and TS) are decoded inline with short varints (one
 * byte first, two or three without branches; the head decoder without end
 * checks, each byte queue having RD_QPAD zeroed bytes after its end); the
 * validating pass of a stream that has had versions checks its A codes
 * without resolving them (nothing it decides needs them any more); when
 * nothing is forced and the top head is safe and alone at its time,
 * pst_next hands out a malloc, calloc, free or realloc whose implicit
 * versions are next with one live-set probe per address, decision and
 * effect in one (rd_fast_heap, rd_merge.c), and the stream stays on top of
 * the heap without sifting while its next head is below both children (a
 * run). With a single stream there is
 * no other stream whose free could be waited for, so frees are not indexed
 * until a second stream appears (then the first one's queued frees are
 * indexed in order, which gives the chains the order they would have had).
 *
 * What is here, and why: the struct definitions all three parts touch; the
 * id maps' accessors over common/hashmap.h (used by every part); the event semantics
 * (rd_frees_addr, rd_allocs_addr, rd_is_pool_seq_event) the validating pass
 * and the merge both apply; and the record decoder (rd_dec_rec) with
 * rd_head_next, static inline because the merge decodes every head again
 * through them and a call per event would show in bench_reader. The tables
 * the merge alone works on (live sets, pending-free chains, pool heaps,
 * stream heap) keep their code in rd_merge.c.
 *
 * Structures (all bounded by what is live or queued, never by file length):
 *   streams    id -> rd_stream_t (byte queue, two decoder states, decoded
 *              head, heap position, the runs of its queued frees in order)
 *   hq         binary heap of the streams with queued events, keyed by
 *              (head ts, stream id)
 *   live[2]    heap / mmap addresses live in the reader's view (a set that
 *              keeps freed slots as dead until its next rebuild)
 *   pend[2]    queued frees by address: address -> chain of (seq, ts) nodes
 *              in the order they were read, cut into runs of one stream
 *   vexp, vlast  per version slot (1.3): the version expected next, and the
 *              last one out with its stream; `ahead`: versions that went out
 *              early (their wait was on another address sharing the slot)
 *   pools      pool id -> last pool_seq out and a min-heap of queued
 *              (pool_seq, stream, seq), stale entries dropped lazily
 */
#ifndef RD_INTERNAL_H
#define RD_INTERNAL_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "poolscope/reader.h"
#include "hashmap.h"

#define RD_MAP_FIXED_FLAG  0x10    /* Linux MAP_FIXED: replaces, not an allocation to order */

enum { RD_SP_HEAP = 0, RD_SP_MMAP = 1 };   /* address spaces: live[], pend[] */

/* Grow arr (n used of cap) by doubling when full; returns PSC_ENOMEM from
 * the enclosing function on failure. */
#define RD_GROW(arr, n, cap, init)                                                   \
    do {                                                                          \
        if ((n) == (cap)) {                                                       \
            size_t ncap_ = (cap) ? (size_t)(cap) * 2 : (init);                    \
            void *na_ = realloc((arr), ncap_ * sizeof *(arr));                    \
            if (!na_) return PSC_ENOMEM;                                           \
            (arr) = na_;                                                          \
            (cap) = ncap_;                                                        \
        }                                                                         \
    } while (0)

/* ---- id maps: strings, stacks, streams, pools -> index ----------------------- */
/* The project's map (common/hashmap.h) with u64 values (the index into
 * r->strings, r->stacks, r->sv, r->pools); nothing is ever deleted (ids stay
 * defined). Any u64 id is a key, 0 and UINT64_MAX included. Free them with
 * psc_map_free. */
static inline int rd_map_init(psc_map_t *m) { return psc_map_init(m, sizeof(uint64_t), 64, 75, NULL); }

/* 1 with *v (v may be NULL) if id k is defined, else 0. */
static inline int rd_map_get(const psc_map_t *m, uint64_t k, uint64_t *v)
{
    const uint64_t *p = (const uint64_t *)psc_map_get_sz(m, k, sizeof(uint64_t));
    if (p && v) *v = *p;
    return p != NULL;
}

/* Define (or redefine) k as v. 0 or PSC_ENOMEM (the map unchanged). */
static inline int rd_map_put(psc_map_t *m, uint64_t k, uint64_t v)
{
    int is_new;
    uint64_t *p = (uint64_t *)psc_map_put_sz(m, k, &is_new, sizeof(uint64_t));
    if (!p) return PSC_ENOMEM;
    *p = v;
    return 0;
}

/* ---- address tables (code in rd_merge.c) ------------------------------------ */
/* The live set is the one table kept specialised: on the project's map it
 * was clearly slower, measured with bench_reader's traces (CPU seconds):
 * +40% reading the 1-stream 10 M-event trace (0.453 -> 0.629), +8-10% on
 * the 4-stream ones. It keeps a freed
 * address's slot as dead (one probe for the free, none to move, one for the
 * reuse) where the general map shifts entries back on every free. The
 * merge only ever keys it by addresses it orders, and those are never 0
 * (rd_frees_addr/rd_allocs_addr exclude it), so 0 marks an empty slot. */
typedef struct rd_aset {
    uint64_t *k;               /* 0 = empty */
    uint8_t  *live;            /* per slot: 1 live, 0 dead */
    uint32_t *own;             /* per slot: the stream (index) that allocated it (live) or freed it (dead) */
    uint32_t mask, n, dead, shift;   /* n: live keys */
} rd_aset_t;

/* The address maps, address -> u64 (pending-free heads, a stream's runs per
 * address), are psc_map_t (common/hashmap.h); their accessors (rd_amap_*)
 * are in rd_merge.c. */
static inline int rd_amap_init(psc_map_t *m) { return psc_map_init(m, sizeof(uint64_t), 16, 50, NULL); }

/* ---- streams ------------------------------------------------------------------ */

/* A decoded event: the head of a stream's queue, or one being validated. */
typedef struct rd_hev {
    uint64_t ts, seq;
    uint64_t f[PST_MAX_FIELDS];
    int64_t  payload[PST_MAX_PAYLOAD];
    uint32_t stack, n_ids, n_payload;
    uint8_t  type;
    uint8_t  n_ver;            /* VER records before it (minor 3): versions of its ordered addresses */
    uint16_t ver[2];
} rd_hev_t;

/* A stream's indexed frees of one address space, oldest first: the run each
 * was appended to (rd_merge.c, "pending frees"). A ring of cap entries (a
 * power of two, or 0). */
typedef struct rd_pfifo { uint32_t *a; uint32_t h, n, cap; } rd_pfifo_t;

/* An event's versions (rd_merge.c, rd_ver_of): its n ordered addresses a[],
 * their version slots sl[] (pst_vslot) and their versions v[]. */
typedef struct rd_vinfo {
    uint64_t a[2];
    uint32_t sl[2];
    uint16_t v[2];
    unsigned n;
} rd_vinfo_t;

typedef struct rd_stream {
    uint32_t id, tid;
    uint32_t idx;              /* position in r->sv */
    pst_enc_t dec;             /* decoder state at the end of the queued bytes */
    pst_enc_t hdec;            /* decoder state after the head event */
    uint64_t offset;           /* stream bytes consumed */
    uint64_t decode_seq;       /* seq of the next decoded event */
    uint64_t emit_seq;         /* seq of the queue head */
    uint8_t *b;                /* byte queue: [bhead, btail) follow the head event */
    size_t   bcap, bhead, btail;
    uint64_t qlen;             /* events queued, the head included */
    rd_hev_t head;             /* valid when qlen > 0 */
    rd_pfifo_t pq[2];          /* per address space: the runs of its indexed frees, oldest first */
    uint32_t *ids;             /* the head's L ids (PST_MAX_IDS), allocated with the first chunk that has an L event */
    int      finished;         /* THREAD_END decoded */
    int      vers;             /* a VER record came at or before the head: its other ordered
                                  events have implicit versions (FORMAT.md, "Versions") */
    int      dvers;            /* the same, for the validating pass (at the end of the queue) */
    /* Blocks: the runs of events sharing one time. The merge orders events
     * of one time across streams by their position in their block
     * (rd_tie_pick), so it needs each block's length: the validating pass
     * counts them (vblk: the newest, still open block; blk: a FIFO of the
     * closed blocks the head has not reached), the head keeps its place. */
    uint32_t *blk;
    uint32_t blk_h, blk_n, blk_cap;
    uint32_t vblk;
    uint32_t hblk_idx, hblk_len;
    int      hblk_open;        /* the head is in the open block: its length is vblk */
    uint64_t hblk_ts;
    int      hblk_any;
    int      hq_pos;           /* -1 when not in the heap */
    /* the head's versions (rd_merge.c, rd_ver_of), valid while vc_valid,
     * vc_seq is the head's seq and vc_gen the reader's vgen */
    rd_vinfo_t vc;
    uint64_t vc_seq, vc_gen;
    int      vc_valid;
    int      on_force;
} rd_stream_t;

/* ---- heap of streams (code in rd_merge.c) ----------------------------------- */
typedef struct rd_sheap { rd_stream_t **a; uint32_t n, cap; } rd_sheap_t;

/* ---- pending frees (code in rd_merge.c) ------------------------------------- */
/* A chain holds the queued frees of one address in the order they were read
 * (appended at the tail), cut into runs: consecutive nodes of one stream.
 * A stream's times never decrease, so the earliest node of a run is its
 * first, and looking for the earliest queued free of another stream among
 * the first RD_PEND_SCAN_MAX nodes of a chain visits one node per run, not
 * every node. (If a stream's time ever wrapped around 2^64 — only damaged
 * input does that — the lookup walks the nodes, as the rule reads.)
 *
 * The free handed out is its stream's first queued one, hence the first
 * node of that stream in its chain: the head of the chain's first run of
 * that stream. Each stream keeps the runs of its indexed frees in the order
 * it queued them (rd_pfifo_t, one entry per free), so the free going out
 * finds its run at the front without a look-up by address: its run cannot
 * have gone (its earlier nodes are the stream's earlier frees), nor can it
 * have lost the node. (A per-address map of each stream's runs did this
 * before: a hash probe for every free queued and every free handed out.)
 * Indices are node / run index + 1, 0 = none. A node is 24 bytes and a
 * FIFO entry 4; there is one of each per queued free. */
typedef struct rd_pnode {
    uint64_t seq, ts;
    uint32_t next;             /* next node of the chain; of the free list once freed */
    uint32_t pad_;
} rd_pnode_t;
typedef struct rd_prun {
    uint32_t head, tail, len;  /* nodes */
    uint32_t prev, next;       /* runs of the chain; next: of the free list once freed */
    uint32_t sidx;             /* the stream: r->sv[sidx] */
} rd_prun_t;

/* Freed nodes are reused oldest first. Frees go out roughly in the order
 * they were read, so nodes stay laid out in read order and the nodes a free
 * touches (its chain neighbours, a few hundred frees away) stay close in
 * memory; a LIFO reuse would scatter them. */
typedef struct rd_pendtab {
    psc_map_t head;            /* address -> first run | last run << 32 */
    rd_pnode_t *nodes;
    uint32_t n, cap;
    uint32_t free_head, free_tail;
    rd_prun_t *runs;
    uint32_t rn, rcap, rfree;
} rd_pendtab_t;

/* The merge's scans of other streams' queues (rd_merge.c): records they
 * may decode in all, RD_SCAN_BASE + RD_SCAN_PER_EVENT per event read.
 * Ordinary traces need a few per event (1-2.3 on 64-thread stress traces
 * read whole); the base covers a long queue scanned early in a trace. */
#define RD_SCAN_BASE      (1ull << 22)
#define RD_SCAN_PER_EVENT 64u
/* Queued events past which the window makes events safe again in a trace
 * with exact SYNC watermarks (rd_safe): memory stays bounded if a writer's
 * flush rounds stop. About 8 bytes per queued event on stress traces. */
#define RD_SYNC_GUARD     (1ull << 23)

#define RD_PEND_SCAN_MAX 256      /* nodes of a chain looked at when looking for another stream's free */

/* ---- pools (code in rd_merge.c) -------------------------------------------- */
typedef struct rd_pent { uint64_t pseq; rd_stream_t *s; uint64_t seq; } rd_pent_t;
typedef struct rd_pool {
    uint64_t last_seq;
    int      have_last;
    rd_pent_t *h;
    uint32_t n, cap;
} rd_pool_t;

/* ---- the reader ------------------------------------------------------------- */
typedef struct rd_string { char *s; } rd_string_t;
typedef struct rd_stack { uint64_t *f; uint32_t depth; } rd_stack_t;
typedef struct rd_pool_op { uint64_t pool, pseq, seq; } rd_pool_op_t;
typedef struct rd_free_op { uint64_t addr, ts, seq; uint32_t sp; } rd_free_op_t;

struct pst_reader {
    /* source */
    int      fd;               /* -1: memory */
    const uint8_t *mem;
    size_t   mem_len;
    uint8_t *buf;              /* fd: buffer; data in [bpos, blim) */
    size_t   bcap, bpos, blim;
    int      src_eof;
    uint64_t off;              /* file offset of the next unconsumed byte */
    int      eof;              /* no more chunks will be read */

    pst_header_t hdr;
    char   **argv;
    char    *exe, *tool, *host, *argv_raw, *scope_funcs;

    /* definitions */
    psc_map_t string_ids, stack_ids;   /* id -> index (rd_map_get) */
    uint32_t stk_ok[64];       /* stack ids found defined, direct-mapped by id (rd_decode.c); 0 empty */
    rd_string_t *strings; uint32_t n_strings, cap_strings;
    rd_stack_t  *stacks;  uint32_t n_stacks, cap_stacks;
    pst_module_t *mods; size_t n_mods, cap_mods;

    /* streams and merge */
    psc_map_t stream_ids;
    rd_stream_t **sv; uint32_t n_sv, cap_sv;
    rd_sheap_t  hq;
    rd_aset_t   live[2];
    rd_pendtab_t pend[2];
    psc_map_t pool_ids;
    rd_pool_t *pools; uint32_t n_pools, cap_pools;
    rd_pool_op_t *pops; uint32_t n_pops, cap_pops;   /* pool entries of the chunk being validated */
    rd_free_op_t *fops; uint32_t n_fops, cap_fops;   /* its frees */
    uint32_t *bclose; uint32_t n_bclose, cap_bclose;  /* its closed blocks' lengths */
    uint64_t vgen;             /* bumped at every write to vexp or vlast (rd_ver_of's cache) */
    uint16_t *vexp;            /* per version slot (pst_vslot): the next version expected; NULL until a VER */
    uint64_t *vlast;           /* per slot: the version handed out last | its stream's index + 1 << 16 */
    psc_map_t ahead;           /* versions handed out ahead of their slot (rd_merge.c, rd_ver_apply) */
    int      causal_times;     /* minor >= 2: times are causal across streams (FORMAT.md "Time") */
    int      ts_wrapped;       /* a stream's time wrapped around 2^64 (damage): rd_pend_find walks nodes */
    struct rd_force { rd_stream_t *s; uint64_t target; } *force;
    uint32_t n_force, cap_force;
    uint64_t window, newest_ts, last_out_ts;
    uint64_t sync_ts;   /* the latest SYNC watermark: every event stamped earlier has been read */
    uint64_t n_sync;           /* SYNC chunks read */
    /* The allocation waiting for its free in a trace without causal times
     * (pst_next, rd_wait_over): its stream and seq, and n_sync when the
     * watermark was first seen past it (UINT64_MAX: not yet). */
    const rd_stream_t *wait_s;
    uint64_t wait_seq, wait_sync0;
    uint64_t decoded;          /* events decoded (TS records not counted) */
    /* The merge's look-ups in other streams' queues (rd_merge.c,
     * rd_vwait_scan and rd_addr_scan): scans made and queued records they
     * decoded. Each scan walks what the other streams have queued, so
     * without a bound a trace with a long queue and many waits reads in
     * time quadratic in the queue (a 64-thread trace of a busy machine:
     * 865 s). The records decoded by all scans together stay within
     * scan_base + scan_per_event * decoded; a scan cut short by that
     * budget finds nothing, and is counted in scans_cut (and, the order it
     * would have established being unknown, in st.unordered).
     * Deterministic (they depend on the trace alone), so tests bound the
     * merge's work with them instead of timing it. */
    uint64_t scans, scan_steps, scans_cut;
    uint64_t scan_base, scan_per_event;   /* RD_SCAN_BASE, RD_SCAN_PER_EVENT; tests lower them */
    /* A trace with exact watermarks (minor >= 2 with a SYNC chunk read):
     * the window no longer makes an event safe (rd_safe) until sync_guard
     * events are queued; guard_early counts the heads it then let out
     * before the watermark. */
    int      sync_exact;
    uint64_t sync_guard;       /* RD_SYNC_GUARD; tests lower it */
    uint64_t guard_early;
    uint32_t max_stream;       /* highest stream id seen (ids are 1..streams) */

    uint8_t  nf[PST_EV_MAX];
    int8_t   s_idx[PST_EV_MAX], ext_idx[PST_EV_MAX];
    char     ext_kind[PST_EV_MAX];

    unsigned coding;           /* the streams' A coding: pst_coding_of_minor(hdr.minor) */
    pst_inflate_t z;           /* compressed chunks (minor 5): context and buffer, reused */
    uint64_t zchunks;          /* compressed chunks read */
    uint32_t *out_ids;         /* ids of the event handed out last (PST_MAX_IDS) */
    uint32_t *idbuf;           /* scratch for validation (PST_MAX_IDS) */
    pst_status_t st;
};


/* ---- event semantics, shared by the validating pass and the merge ---------- */

static inline int rd_is_pool_seq_event(unsigned t)
{
    return (t >= PST_EV_POOL_ACQUIRE && t <= PST_EV_POOL_BACKING_FREE) ||
           (t >= PST_EV_KVB_ALLOC && t <= PST_EV_KVB_OWNER);
}

/* The address an event frees (1, with space), if it frees one. */
static inline int rd_frees_addr(const rd_hev_t *e, int *space, uint64_t *addr)
{
    switch (e->type) {
    case PST_EV_FREE:
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_REALLOC:          /* old, ret, size */
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] && e->f[1] != e->f[0] && (e->f[1] || e->f[2] == 0);
    case PST_EV_REALLOCARRAY:     /* old, ret, nmemb, size */
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] && e->f[1] != e->f[0] && (e->f[1] || e->f[2] == 0 || e->f[3] == 0);
    case PST_EV_MUNMAP:
        *space = RD_SP_MMAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_MREMAP:           /* old, old_len, ret, new_len, flags */
        *space = RD_SP_MMAP; *addr = e->f[0];
        return e->f[0] && e->f[2] && e->f[2] != e->f[0];
    default:
        return 0;
    }
}

/* Is e's free (if it frees) in the pending-free index? Versioned frees
 * (explicitly, or implicitly in a stream that has had versions) are ordered
 * by their versions instead. */
static inline int rd_pend_indexed(const rd_stream_t *s, const rd_hev_t *e) { return !e->n_ver && !s->dvers; }

/* The address an event needs live without changing it (1, with space): a
 * realloc that kept its block in place. */
static inline int rd_uses_addr(const rd_hev_t *e, int *space, uint64_t *addr)
{
    if ((e->type == PST_EV_REALLOC || e->type == PST_EV_REALLOCARRAY) && e->f[0] && e->f[1] == e->f[0]) {
        *space = RD_SP_HEAP; *addr = e->f[0];
        return 1;
    }
    return 0;
}

/* The address an event allocates (1, with space), if it allocates one. */
static inline int rd_allocs_addr(const rd_hev_t *e, int *space, uint64_t *addr)
{
    switch (e->type) {
    case PST_EV_MALLOC: case PST_EV_CALLOC: case PST_EV_POSIX_MEMALIGN:
    case PST_EV_ALIGNED_ALLOC: case PST_EV_MEMALIGN: case PST_EV_VALLOC: case PST_EV_PVALLOC:
        *space = RD_SP_HEAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_REALLOC: case PST_EV_REALLOCARRAY:
        *space = RD_SP_HEAP; *addr = e->f[1];
        return e->f[1] && e->f[1] != e->f[0];
    case PST_EV_MMAP:
        *space = RD_SP_MMAP; *addr = e->f[0];
        return e->f[0] != 0;
    case PST_EV_MREMAP:
        *space = RD_SP_MMAP; *addr = e->f[2];
        return e->f[2] && e->f[2] != e->f[0];
    default:
        return 0;
    }
}

/* ---- the record decoder (fast paths inline; rd_decode.c has the rest) ------ */

/* pst_decode_event into an rd_hev_t (any type, TS included); rd_decode.c. */
const uint8_t *rd_dec_generic(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                              const uint8_t *end, rd_hev_t *e, uint32_t *idbuf);

/* pst_get_varint / pst_get_addr with codes of up to 3 bytes decoded inline
 * and without branches on their length (one 8-byte load when 8 bytes are
 * readable); longer codes, and the last bytes of a buffer, go to them. The
 * same values and the same failures either way. */
/* `q` (a constant at every call): p is inside a stream's byte queue, which
 * has RD_QPAD readable bytes after its end (rd_squeue_append) and holds
 * only validated records, so the 8-byte load needs no check of the end. */
#define RD_QPAD 8
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
static inline __attribute__((always_inline)) unsigned rd_vshort_(const uint8_t *p, const uint8_t *end, uint64_t *v, const int q)
{
    if (!q && end - p < 8) return 0;
    uint64_t x;
    memcpy(&x, p, sizeof x);
    if (!(x & 0x80)) { *v = x & 0x7f; return 1; }
    uint64_t stop = ~x & 0x808080u;                /* terminating bytes among the first 3 */
    if (!stop) return 0;
    unsigned len = ((unsigned)__builtin_ctzll(stop) >> 3) + 1;
    uint64_t val = (x & 0x7f) | ((x >> 1) & 0x3f80) | ((x >> 2) & 0x1fc000);
    *v = val & ((1ull << (7 * len)) - 1);
    return len;
}
#else
static inline unsigned rd_vshort_(const uint8_t *p, const uint8_t *end, uint64_t *v, const int q)
{
    (void)p; (void)end; (void)v; (void)q;
    return 0;
}
#endif

static inline __attribute__((always_inline)) const uint8_t *rd_varint_(const uint8_t *p, const uint8_t *end, uint64_t *v, const int q)
{
    unsigned n = rd_vshort_(p, end, v, q);
    return n ? p + n : pst_get_varint(p, end, v);
}
static inline __attribute__((always_inline)) const uint8_t *rd_varint(const uint8_t *p, const uint8_t *end, uint64_t *v)
{
    return rd_varint_(p, end, v, 0);
}

/* An A field in the stream's coding (pst_get_addr, or pst_get_addr5 for
 * minor 5: a hit in the recent list or an aligned delta in up to 3 bytes
 * inline, the rest through format.h). */
static inline __attribute__((always_inline)) const uint8_t *rd_addr_(pst_enc_t *dc, const uint8_t *p, const uint8_t *end, uint64_t *addr,
                                                                     const int q)
{
    uint64_t code;
    unsigned n = rd_vshort_(p, end, &code, q);
    if (dc->coding == PST_CODING_RECENT) {
        if (!n || !(code & 3)) return pst_get_addr5(dc, p, end, addr);
        uint32_t k = dc->nrec;
        uint64_t a;
        if (code & 1) {
            a = dc->last_addr + ((uint64_t)pst_unzigzag(code >> 1) << 4);
        } else {
            if (!q && (code >> 2) >= PST_RECENT) return NULL;   /* queued: checked when read */
            a = dc->recent[(k - 1 - (uint32_t)(code >> 2)) & (PST_RECENT - 1)];
        }
        dc->recent[k & (PST_RECENT - 1)] = a;
        dc->nrec = k + 1;
        dc->last_addr = a;
        *addr = a;
        return p + n;
    }
    if (!n) return pst_get_addr(p, end, &dc->last_addr, addr);
    int64_t d = pst_unzigzag(code >> 1);
    *addr = dc->last_addr + ((code & 1) ? (uint64_t)d << 4 : (uint64_t)d);
    dc->last_addr = *addr;
    return p + n;
}
static inline __attribute__((always_inline)) const uint8_t *rd_addr(pst_enc_t *dc, const uint8_t *p, const uint8_t *end, uint64_t *addr)
{
    return rd_addr_(dc, p, end, addr, 0);
}

/* The end of an A field in the minor-5 coding, checked as pst_get_addr5
 * checks it (the same failures) but not resolved: for the validating pass
 * of a stream whose addresses it no longer needs (rd_process_events). */
static inline __attribute__((always_inline)) const uint8_t *rd_askip5(const uint8_t *p, const uint8_t *end)
{
    uint64_t code;
    if (!(p = rd_varint(p, end, &code))) return NULL;
    if (code & 1) return p;
    if (code & 2) return (code >> 2) < PST_RECENT ? p : NULL;
    if (code) return NULL;
    return rd_varint(p, end, &code);   /* code 0: the delta follows */
}

#define RD_GETV(v) do { if (!(p = rd_varint_(p, end, &(v), q))) return NULL; } while (0)
#define RD_GETA(v) do { if (!(p = rd_addr_(d, p, end, &(v), q))) return NULL; } while (0)
/* a stack id: a varint of at most 32 bits (pst_decode_event's rule) */
#define RD_GETSTK(v)                                              \
    do {                                                          \
        uint64_t sv_;                                             \
        RD_GETV(sv_);                                             \
        if (sv_ > UINT32_MAX) return NULL;                        \
        (v) = (uint32_t)sv_;                                      \
    } while (0)

/* Decode one record from [p, end) with decoder state d into e: the same
 * values and the same failures as pst_decode_event, with the common heap
 * records and TS decoded inline. L ids go to idbuf (PST_MAX_IDS entries;
 * may be NULL when the record is not an L event). Returns the position
 * after the record, or NULL on corrupt input. q: p is in a byte queue
 * (rd_vshort_), before its end. */
static inline __attribute__((always_inline)) const uint8_t *rd_dec_rec_(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                                        const uint8_t *end, rd_hev_t *e, uint32_t *idbuf, const int q)
{
    if (!q && p >= end) return NULL;
    unsigned tb = *p;
    uint32_t stk = 0;
    switch (tb) {
    /* with a stack id (bit 7: the varint right after the type byte): what
     * every allocation of a trace recorded with stacks carries */
    case PST_EV_MALLOC: case PST_EV_MALLOC | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
        RD_GETA(e->f[0]);
        RD_GETV(e->f[1]);
        break;
    case PST_EV_FREE: case PST_EV_FREE | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
        RD_GETA(e->f[0]);
        break;
    case PST_EV_CALLOC: case PST_EV_CALLOC | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
        RD_GETA(e->f[0]);
        RD_GETV(e->f[1]);
        RD_GETV(e->f[2]);
        break;
    case PST_EV_REALLOC: case PST_EV_REALLOC | PST_EV_HAS_STACK:
        p++;
        if (tb & PST_EV_HAS_STACK) RD_GETSTK(stk);
        RD_GETA(e->f[0]);
        RD_GETA(e->f[1]);
        RD_GETV(e->f[2]);
        break;
    case PST_EV_TS: {
        uint64_t v;
        p++;
        RD_GETV(v);
        e->type = PST_EV_TS;
        e->stack = 0;
        e->f[0] = v;
        d->last_ts += v;
        d->since_ts = 0;
        return p;
    }
    case PST_EV_VER:
        if (end - p < 3 || d->nver >= 2) return NULL;
        d->ver[d->nver++] = (uint16_t)(p[1] | p[2] << 8);
        e->type = PST_EV_VER;
        e->stack = 0;
        return p + 3;
    default:
        return rd_dec_generic(r, d, p, end, e, idbuf);
    }
    e->type = (uint8_t)(tb & PST_EV_TYPE_MASK);
    e->stack = stk;
    e->n_ids = 0;
    e->n_payload = 0;
    e->n_ver = (uint8_t)d->nver;
    e->ver[0] = d->ver[0];
    e->ver[1] = d->ver[1];
    d->nver = 0;
    d->since_ts++;
    return p;
}
static inline __attribute__((always_inline)) const uint8_t *rd_dec_rec(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                                        const uint8_t *end, rd_hev_t *e, uint32_t *idbuf)
{
    return rd_dec_rec_(r, d, p, end, e, idbuf, 0);
}

/* Decode s's next queued event (after any TS records) into s->head. The
 * bytes were validated when their chunk was read, with the same decoder
 * state, so this does not fail. */
static inline __attribute__((always_inline)) int rd_head_next(pst_reader_t *r, rd_stream_t *s)
{
    const uint8_t *p = s->b + s->bhead, *end = s->b + s->btail;
    for (;;) {
        /* s->ids exists once an L event has been queued (rd_process_events) */
        p = rd_dec_rec_(r, &s->hdec, p, end, &s->head, s->ids, 1);
        if (!p) return PSC_ECORRUPT;   /* not reached: validated when read */
        if (s->head.type != PST_EV_TS && s->head.type != PST_EV_VER) break;
    }
    s->bhead = (size_t)(p - s->b);
    s->head.ts = s->hdec.last_ts;
    s->head.seq = s->emit_seq;
    if (s->head.n_ver) s->vers = 1;
    if (!s->hblk_any || s->head.ts != s->hblk_ts) {   /* the head enters a new block */
        s->hblk_any = 1;
        s->hblk_ts = s->head.ts;
        s->hblk_idx = 0;
        if (s->blk_n) {
            s->hblk_len = s->blk[s->blk_h];
            s->blk_h = (s->blk_h + 1) % s->blk_cap;
            s->blk_n--;
            s->hblk_open = 0;
        } else {
            s->hblk_open = 1;
        }
    } else {
        s->hblk_idx++;
    }
    return 0;
}

/* ---- the functions the parts call in each other ---------------------------- */

/* rd_chunk.c */
int  rd_parse_header(pst_reader_t *r);            /* 0 or PSC_E* (pst_open's answer) */
int  rd_read_chunk(pst_reader_t *r);              /* 1 read one, 0 no more, negative error */
void rd_set_corrupt(pst_reader_t *r, uint64_t at, const char *why);

/* rd_decode.c */
void rd_decode_init(pst_reader_t *r);             /* the per-type layout tables */
/* Validate one EVENTS chunk (payload [p, end), file offset at), index its
 * frees and pool events, queue its bytes. 0 ok (or corrupt, noted),
 * negative error. */
int  rd_process_events(pst_reader_t *r, const pst_chunk_hdr_t *h, const uint8_t *p,
                       const uint8_t *end, uint64_t at);

/* rd_merge.c: what the validating pass hands to the merge */
int  rd_sheap_push(rd_sheap_t *h, rd_stream_t *s);
int  rd_pend_add(rd_pendtab_t *t, uint64_t addr, rd_stream_t *s, int sp, uint64_t seq, uint64_t ts);
/* Queue pool event (s, seq) with pool_seq pseq of pool `pool`. 0 or PSC_ENOMEM. */
int  rd_pool_add(pst_reader_t *r, rd_stream_t *s, uint64_t pool, uint64_t pseq, uint64_t seq);

#endif
