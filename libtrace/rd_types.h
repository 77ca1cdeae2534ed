/* rd_types.h — the types every stage of the streaming .pst reader shares
 * (rd_internal.h has the stages and their order): the reader itself
 * (struct pst_reader), a stream, a decoded event, the tables the merge
 * keeps inside the reader, and the id maps' accessors. Types and the
 * smallest helpers only: each stage's code and what it exports are in its
 * own header. Internal to libtrace.
 *
 * Every stage reads and writes the reader's fields; the order of the stages
 * is one of calls (no stage calls a later one). Three fields a later stage
 * keeps are read by an earlier one, as data: the END chunk's check
 * (rd_chunk.c) compares its counts with `decoded`, `n_sv` and `max_stream`,
 * which the decode stage counts.
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
#ifndef RD_TYPES_H
#define RD_TYPES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"
#include "poolscope/reader.h"
#include "hashmap.h"

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

/* ---- address tables (code in rd_tables.c) ---------------------------------- */
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
    uint64_t cyc;              /* minor 8: its stream's cycle count (0: none; FORMAT.md, "Cycles") */
} rd_hev_t;

/* A stream's indexed frees of one address space, oldest first: the run each
 * was appended to (rd_tables.c, "pending frees"). A ring of cap entries (a
 * power of two, or 0). */
typedef struct rd_pfifo { uint32_t *a; uint32_t h, n, cap; } rd_pfifo_t;

/* An event's versions (rd_version.c, rd_ver_of): its n ordered addresses a[],
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
    /* the head's versions (rd_version.c, rd_ver_of), valid while vc_valid,
     * vc_seq is the head's seq and vc_gen the reader's vgen */
    rd_vinfo_t vc;
    uint64_t vc_seq, vc_gen;
    int      vc_valid;
    int      on_force;
} rd_stream_t;

/* ---- heap of streams (code in rd_tables.c) ---------------------------------- */
typedef struct rd_sheap { rd_stream_t **a; uint32_t n, cap; } rd_sheap_t;

/* ---- pending frees (code in rd_tables.c) ----------------------------------- */
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

/* ---- pools (code in rd_tables.c) ------------------------------------------ */
typedef struct rd_pent { uint64_t pseq; rd_stream_t *s; uint64_t seq; } rd_pent_t;
typedef struct rd_pool {
    uint64_t last_seq;
    int      have_last;
    rd_pent_t *h;
    uint32_t n, cap;
} rd_pool_t;

/* ---- the reader ------------------------------------------------------------- */
typedef struct rd_string { char *s; } rd_string_t;
/* Stacks are kept as a prefix tree rooted at the outermost frame
 * (rd_chunk.c): the stacks of a run share their outer frames, so a PyTorch
 * trace's 1.4 M stacks of 77 frames (863 MB as arrays) are 5.3 M nodes. A
 * stack is its innermost node; pst_stack walks up into stk_out. */
#define RD_MAX_STACK_DEPTH 4096
typedef struct rd_node {
    uint64_t pc;
    uint32_t up;               /* 0: the root */
    uint32_t last;             /* the child found under it last, 0 none */
} rd_node_t;
typedef struct rd_stack { uint32_t leaf; uint32_t depth; } rd_stack_t;
typedef struct rd_stack_out {  /* pst_stack's answer, valid until its next call */
    uint64_t idx;              /* index + 1 of the stack in f, 0 none */
    uint64_t f[RD_MAX_STACK_DEPTH];
} rd_stack_out_t;
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
    rd_node_t   *nodes;   uint32_t n_nodes, cap_nodes;   /* nodes[0]: the root, no frame */
    uint32_t    *node_tab; size_t node_mask;    /* (up, pc) -> node id, linear probing; 0 empty */
    uint32_t    *path;    uint32_t n_path;      /* the last stack parsed, its nodes from the root */
    uint64_t    *parse_f;                       /* RD_MAX_STACK_DEPTH frames being parsed */
    rd_stack_out_t *stk_out;
    pst_module_t *mods; size_t n_mods, cap_mods;

    /* streams and merge */
    psc_map_t stream_ids;
    rd_stream_t **sv; uint32_t n_sv, cap_sv;
    rd_sheap_t  hq;
    rd_aset_t   live[2];
    rd_pendtab_t pend[2];
    psc_map_t pool_ids;
    rd_pool_t *pools; uint32_t n_pools, cap_pools;
    /* the chunk being validated (rd_decode.c): its pool entries and its
     * frees, which the merge indexes once the chunk is queued (rd_merge.c) */
    rd_pool_op_t *pops; uint32_t n_pops, cap_pops;
    rd_free_op_t *fops; uint32_t n_fops, cap_fops;
    uint32_t *bclose; uint32_t n_bclose, cap_bclose;  /* its closed blocks' lengths */
    uint64_t vgen;             /* bumped at every write to vexp or vlast (rd_ver_of's cache) */
    uint16_t *vexp;            /* per version slot (pst_vslot): the next version expected; NULL until a VER */
    uint64_t *vlast;           /* per slot: the version handed out last | its stream's index + 1 << 16 */
    psc_map_t ahead;           /* versions handed out ahead of their slot (rd_version.c, rd_ver_apply) */
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
    /* The merge's look-ups in other streams' queues (rd_version.c,
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


#endif
