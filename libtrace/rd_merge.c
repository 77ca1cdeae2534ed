/* rd_merge.c — the reader's merge: one order over all streams, and pst_next.
 *
 * The rules (FORMAT.md, "Reading: the merge order"): the next event is the
 * queued head with the smallest (ts, stream id) — a binary heap of the
 * streams with queued events; pool events of one pool come out in pool_seq
 * order (a min-heap of queued (pool_seq, stream, seq) per pool); and an
 * allocation of an address still live in the reader's view follows the
 * queued free of that address in another stream (live-address sets, and
 * the pending frees chained per address); since format 1.3 the events of
 * one address instead come out in the order of their versions (VER
 * records, or implicit ones: rd_ver_of), which makes that order exact
 * across threads. When a head must wait for another stream's event, that
 * stream is drained up to it first (a stack of force targets, which may
 * recurse); cycles and frees that never come are handed out anyway and
 * counted.
 *
 * A head goes out only when it is safe: stamped before the latest SYNC
 * watermark, or older than the newest time read minus the window, or the
 * input has ended; until then pst_next pulls another chunk through the
 * decode stage (rd_pull: rd_decode_chunk, which reads it with rd_chunk.c's
 * rd_read_chunk), and indexes what it queued in the tables (rd_tables.c):
 * its frees, its pool events, its stream in the heap. Heads are decoded
 * again by rd_head_next (rd_decode.h). The last stage of the reader:
 * it calls the earlier ones (rd_internal.h has the order), never the
 * reverse.
 *
 * The address tables are touched for nearly every event: the live set is a
 * specialised inline table (rd_types.h says why, with its figures); the
 * pending-free heads and the per-stream runs are common/hashmap.h maps used
 * through its inline _sz fast paths (rd_tables.h). Versions and the scans
 * of other streams' queues are in rd_version.c.
 */
#include "rd_merge.h"

#define RD_MAP_FIXED_FLAG  0x10    /* Linux MAP_FIXED: replaces, not an allocation to order */

/* ---- feeding the merge --------------------------------------------------------- */

/* Index the frees queued in s (the head included), in order: done for the
 * only stream when a second one appears, which gives the chains the order
 * they would have had if indexed when read. */
static int rd_index_queued(pst_reader_t *r, rd_stream_t *s)
{
    if (!s->qlen) return 0;
    int sp;
    uint64_t a, seq = s->emit_seq;
    /* versioned frees are ordered by their versions, not by this index
     * (but for realloc's: rd_merge.c) */
    if (rd_pend_indexed(s, &s->head) && rd_frees_addr(&s->head, &sp, &a) && rd_pend_add(&r->pend[sp], a, s, sp, seq, s->head.ts))
        return PSC_ENOMEM;
    pst_enc_t d = s->hdec;
    const uint8_t *p = s->b + s->bhead, *end = s->b + s->btail;
    rd_hev_t e;
    while (p < end && (p = rd_dec_rec(r, &d, p, end, &e, r->idbuf))) {
        if (pst_is_record(e.type)) continue;
        seq++;
        if (rd_pend_indexed(s, &e) && rd_frees_addr(&e, &sp, &a) && rd_pend_add(&r->pend[sp], a, s, sp, seq, d.last_ts))
            return PSC_ENOMEM;
    }
    return 0;
}

/* Pull one chunk through the decode stage and index what it queued: its
 * frees and pool events, its stream in the heap once it has a head. When a
 * second stream appears the first one's queued frees are indexed, before
 * the new stream's (with one stream there was no other stream's free to
 * wait for). 1 read one, 0 no more, negative error. */
static int rd_pull(pst_reader_t *r)
{
    uint32_t n_sv = r->n_sv;   /* a chunk creates at most one stream */
    rd_queued_t q;
    int rc = rd_decode_chunk(r, &q), xr;
    if (n_sv == 1 && r->n_sv > 1 && (xr = rd_index_queued(r, r->sv[0]))) return xr;
    if (rc < 0 || !q.s) return rc;
    rd_stream_t *s = q.s;
    for (uint32_t i = 0; i < r->n_fops; i++) {
        const rd_free_op_t *op = &r->fops[i];
        if (rd_pend_add(&r->pend[op->sp], op->addr, s, (int)op->sp, op->seq, op->ts)) return PSC_ENOMEM;
    }
    for (uint32_t i = 0; i < r->n_pops; i++) {
        const rd_pool_op_t *op = &r->pops[i];
        if (rd_pool_add(r, s, op->pool, op->pseq, op->seq)) return PSC_ENOMEM;
    }
    if (q.head && rd_sheap_push(&r->hq, s)) return PSC_ENOMEM;
    return rc;
}

/* ---- merge ------------------------------------------------------------------ */

enum { RD_WHY_CAUSAL = 1, RD_WHY_POOL = 2 };

/* realloc, reallocarray and mremap are stamped before their call
 * (FORMAT.md "Time"): the block they acquire may have been freed by another
 * thread up to a tick or so later by the clock. */
#define RD_ACQUIRE_SLACK (4 * (uint64_t)PST_TICK_NS)
static inline int rd_acquires_inside(unsigned t)
{
    return t == PST_EV_REALLOC || t == PST_EV_REALLOCARRAY || t == PST_EV_MREMAP;
}

/* Versions say e may go (its own are next in their slots, or behind them):
 * does the live set agree? The counters are plain loads and stores, so two
 * threads on one slot can both take its next version (a duplicate), and a
 * thread preempted between its load and its store puts the counter back
 * (versions already seen are handed out again). Duplicates are "behind" and
 * go by time alone, and an implicit version after another stream's
 * duplicate reads as the slot's next (rd_ver_of): either can let a free and
 * the re-allocation of its address come out the wrong way round when their
 * times tie. So a versioned free of an address not live, or allocation of
 * one live, still looks for the queued allocation (free) of that address in
 * another stream, and that stream goes first up to it (rules 3 and 4). The
 * free is stamped no later than e, except the old block of a realloc handed
 * to another thread inside the call (FORMAT.md "Time"), looked for last.
 * Inline: every versioned head passes here (its two live-set probes cost
 * less than a call with this many arguments); the scans stay calls. */
static inline __attribute__((always_inline))
int rd_ver_live_check(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_stream_t **t, uint64_t *tseq)
{
    int sp;
    uint64_t a;
    if ((rd_frees_addr(e, &sp, &a) || rd_uses_addr(e, &sp, &a)) && !rd_aset_has(&r->live[sp], a) &&
        rd_addr_scan(r, s, sp, a, 0, e->ts, t, tseq))
        return RD_C_FORCE;
    if (rd_allocs_addr(e, &sp, &a) && rd_aset_has(&r->live[sp], a) &&
        !(e->type == PST_EV_MMAP && (e->f[3] & RD_MAP_FIXED_FLAG)) &&
        (rd_addr_scan(r, s, sp, a, 1, e->ts, t, tseq) || rd_addr_scan(r, s, sp, a, 1, UINT64_MAX, t, tseq)))
        return RD_C_FORCE;
    return RD_C_NONE;
}

/* What must happen before e (the head of s) goes out. */
static inline __attribute__((always_inline))
int rd_constraint(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_stream_t **t, uint64_t *tseq,
                  int *why)
{
    if (rd_is_pool_seq_event(e->type)) {
        uint64_t pi;
        if (rd_map_get(&r->pool_ids, e->f[0], &pi)) {
            rd_pent_t *top = rd_pool_top(&r->pools[pi]);
            if (top && top->pseq < e->f[1] && top->s != s) {
                *t = top->s; *tseq = top->seq; *why = RD_WHY_POOL;
                return RD_C_FORCE;
            }
        }
    }
    int sp;
    uint64_t a;
    /* versions (minor 3) order the events of an address exactly: rules 3
     * and 4 below are for events without them */
    const rd_vinfo_t *vi;
    rd_vinfo_t vtmp;
    int vs = e->n_ver || s->vers ? rd_ver_state(r, s, e, &vi, &vtmp) : -1;
    if (vs >= 0) {
        *why = RD_WHY_CAUSAL;
        if (vs) return RD_C_VWAIT;
        return r->n_sv > 1 ? rd_ver_live_check(r, s, e, t, tseq) : RD_C_NONE;
    }
    /* rule 3: a free of an address not live is blocked: in a causal trace
     * its allocation can only be in another stream's events of the same
     * time (pst_next lets those go first); otherwise it is an unknown free */
    if (r->n_sv > 1 && (rd_frees_addr(e, &sp, &a) || rd_uses_addr(e, &sp, &a)) && !rd_aset_has(&r->live[sp], a)) {
        *why = RD_WHY_CAUSAL;
        return RD_C_BLOCKED;
    }
    if (rd_allocs_addr(e, &sp, &a) && rd_aset_has(&r->live[sp], a)) {
        if (e->type == PST_EV_MMAP && (e->f[3] & RD_MAP_FIXED_FLAG)) return RD_C_NONE;
        int in_self;
        uint64_t fts;
        *why = RD_WHY_CAUSAL;
        if (rd_pend_find(&r->pend[sp], r->sv, a, s, &in_self, r->ts_wrapped, t, tseq, &fts)) {
            /* Times of a minor-2 trace are causal: the free this allocation
             * waits for is stamped no later. One stamped later is not it
             * (it frees a later use of the address): draining a stream up
             * to it would put events out of time order. Older writers'
             * times were not causal, so there the free is looked for
             * wherever it is. */
            if (r->causal_times && fts > e->ts &&
                !(rd_acquires_inside(e->type) && fts - e->ts <= RD_ACQUIRE_SLACK))
                return in_self ? RD_C_UNORDERED : RD_C_WAIT;
            return RD_C_FORCE;
        }
        return in_self ? RD_C_UNORDERED : RD_C_WAIT;
    }
    return RD_C_NONE;
}

static inline int rd_window_passed(const pst_reader_t *r, const rd_hev_t *e)
{
    return r->newest_ts >= r->window && e->ts <= r->newest_ts - r->window;
}

/* No stream can still deliver an event ordered before e. Streams are not
 * announced: a thread's first chunk may appear in the file long after its
 * first event, so any stream — quiet, or not seen yet — may still deliver
 * an earlier event until the writer's SYNC watermark has passed it, or the
 * window has (for writers without SYNC chunks), or the input has ended.
 *
 * Once a trace has shown exact watermarks (minor >= 2), the window is only
 * a memory guard: a writer whose flush rounds were starved (64 threads on
 * a loaded machine: six SYNC chunks in 2.5 s, a thread's events left in
 * its ring for over a second while busy threads drained theirs) writes
 * chunks that come later than the window, and an event let out by the
 * window went ahead of its address's earlier events still unread: a free
 * came out before its allocation (unknown free, and a leak when the
 * allocation came), and each such event scanned every queue for what it
 * waited for. So the window applies there only when sync_guard events are
 * queued (each counted in guard_early). */
static inline int rd_safe(pst_reader_t *r, const rd_hev_t *e)
{
    if (r->eof || e->ts < r->sync_ts) return 1;
    if (!rd_window_passed(r, e)) return 0;
    if (!r->sync_exact) return 1;
    if (r->st.queued < r->sync_guard) return 0;
    r->guard_early++;
    return 1;
}

static inline int rd_apply_effects(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e)
{
    int sp;
    uint64_t a;
    if (rd_frees_addr(e, &sp, &a)) {
        rd_pend_del(&r->pend[sp], a, s, sp, e->seq);
        if (!rd_aset_del(&r->live[sp], a, s->idx)) r->st.unknown_frees++;
    }
    if (rd_allocs_addr(e, &sp, &a)) {
        if (rd_aset_add(&r->live[sp], a, s->idx)) return PSC_ENOMEM;
    }
    if (rd_is_pool_seq_event(e->type)) {
        uint64_t pi;
        if (rd_map_get(&r->pool_ids, e->f[0], &pi)) {
            rd_pool_t *p = &r->pools[pi];
            if (p->have_last && e->f[1] < p->last_seq) r->st.pool_unordered++;
            if (!p->have_last || e->f[1] > p->last_seq) p->last_seq = e->f[1];
            p->have_last = 1;
            rd_pool_top(p);    /* drop what has gone out */
        }
    }
    return 0;
}

static inline __attribute__((always_inline)) int rd_emit_out(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev, int rc);

/* Hand out the head of s into ev, then decode the next one: any head
 * (rd_emit tries rd_fast_heap first). */
static __attribute__((noinline)) int rd_emit_any(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    rd_hev_t *e = &s->head;
    unsigned t = e->type;
    if (e->n_ver || s->vers) rd_ver_apply(r, s, e);
    s->emit_seq++;
    s->qlen--;
    r->st.queued--;
    int rc = 0;
    switch (t) {       /* rd_apply_effects, the common cases inline */
    case PST_EV_MALLOC: case PST_EV_CALLOC:
        if (e->f[0]) {
            rc = rd_aset_add(&r->live[RD_SP_HEAP], e->f[0], s->idx);
        }
        break;
    case PST_EV_FREE:
        if (e->f[0]) {
            if (s->pq[RD_SP_HEAP].n)   /* else it has no indexed free */
                rd_pend_del(&r->pend[RD_SP_HEAP], e->f[0], s, RD_SP_HEAP, e->seq);
            if (!rd_aset_del(&r->live[RD_SP_HEAP], e->f[0], s->idx)) r->st.unknown_frees++;
        }
        break;
    default:
        rc = rd_apply_effects(r, s, e);
        break;
    }
    return rd_emit_out(r, s, ev, rc);
}

/* The head of s has gone out of its queue (emit_seq, qlen) and had its
 * effects on the merge's tables: the event into ev, the counts, the next
 * head, the heap. rc: the effects' answer. */
static inline __attribute__((always_inline)) int rd_emit_out(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev, int rc)
{
    rd_hev_t *e = &s->head;
    unsigned t = e->type;
    ev->type = e->type;
    ev->stream = s->id;
    ev->tid = s->tid;
    ev->seq = e->seq;
    ev->ts = e->ts;
    ev->stack = e->stack;
    ev->n_ver = e->n_ver;
    ev->ver[0] = e->ver[0];
    ev->ver[1] = e->ver[1];
    ev->cyc = e->cyc;
    /* the layout's fields only (the rest of ev->f is left as it was); up
     * to 4, as many as any heap record has, without a loop */
    switch (r->nf[t]) {
    default:
        for (unsigned i = 4; i < r->nf[t]; i++) ev->f[i] = e->f[i];
        /* fall through */
    case 4: ev->f[3] = e->f[3]; /* fall through */
    case 3: ev->f[2] = e->f[2]; /* fall through */
    case 2: ev->f[1] = e->f[1]; /* fall through */
    case 1: ev->f[0] = e->f[0]; /* fall through */
    case 0: break;
    }
    ev->ids = NULL;
    ev->n_ids = 0;
    ev->n_payload = 0;
    ev->str = NULL;
    if (r->s_idx[t] >= 0 && e->f[r->s_idx[t]] <= UINT32_MAX)
        ev->str = pst_string(r, (uint32_t)e->f[r->s_idx[t]]);
    if (e->n_ids) {
        /* the ids stay valid until the next pst_next: swap buffers with s */
        uint32_t *ids = s->ids;
        s->ids = r->out_ids;
        r->out_ids = ids;
        ev->ids = ids;
        ev->n_ids = e->n_ids;
    } else if (e->n_payload) {
        memcpy(ev->payload, e->payload, e->n_payload * sizeof(int64_t));
        ev->n_payload = e->n_payload;
    }
    /* last_out_ts starts at 0, below every time: the first event is never late */
    if (e->ts < r->last_out_ts) r->st.late++;
    else r->last_out_ts = e->ts;
    r->st.events++;
    r->st.live = (uint64_t)r->live[0].n + r->live[1].n;

    if (s->qlen) {
        int hr = rd_head_next(r, s);
        if (hr) return hr;
        /* a run: s stays on top while its head is below both children */
        rd_sheap_t *h = &r->hq;
        if (h->n > 1 && !(s->hq_pos == 0 && rd_sheap_less(h, s, h->a[1]) && (h->n < 3 || rd_sheap_less(h, s, h->a[2]))))
            rd_sheap_fix(h, s);
    } else {
        rd_sheap_remove(&r->hq, s);
        if (s->bhead == s->btail) s->bhead = s->btail = 0;
    }
    return rc ? rc : 1;
}

/* rd_fast_heap's realloc (old, ret, size), a call of its own (it is
 * rarer, and has two addresses): old and ret not 0, old live, and ret
 * either old (in place: only the versions change) or not live (old is
 * freed, ret allocated). Versions as rd_ver_of_ gives them (one slot per
 * ordered address, the second one's version after the first's when both
 * share a slot), each exactly the one its slot expects, then applied as
 * rd_ver_apply does. */
static __attribute__((noinline)) int rd_fast_realloc(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    rd_hev_t *e = &s->head;
    uint64_t a0 = e->f[0], a1 = e->f[1];
    rd_aset_t *ls = &r->live[RD_SP_HEAP];
    if (!a0 || !a1 || e->n_ver || !ls->k) return 0;
    rd_vinfo_t vi;
    vi.n = 0;
    if (s->vers) {
        if (!r->vexp) return 0;
        vi.n = a1 != a0 ? 2 : 1;
        for (unsigned j = 0; j < vi.n; j++) {
            uint32_t sl = vi.sl[j] = pst_vslot(j ? a1 : a0);
            uint64_t l = r->vlast[sl];
            vi.v[j] = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
        }
        if (vi.v[0] != r->vexp[vi.sl[0]]) return 0;
        if (vi.n == 2) {
            if (vi.sl[1] == vi.sl[0]) vi.v[1] = pst_vnext(vi.v[0]);
            else if (vi.v[1] != r->vexp[vi.sl[1]]) return 0;
        }
    }
    uint32_t i0, i1 = 0;
    if (!rd_aset_slot(ls, a0, &i0) || !ls->live[i0]) return 0;        /* old not live: rule 3 / its scan */
    int found1 = 0;
    if (a1 != a0) {
        found1 = rd_aset_slot(ls, a1, &i1);
        if (found1 && ls->live[i1]) return 0;                           /* ret live: rule 4 / its scans */
        if (!found1 && (ls->n + ls->dead + 1) * 2 > ls->mask + 1) return 0;   /* rd_aset_add rebuilds */
    }
    if (vi.n) rd_ver_apply_vi(r, s, &vi);
    s->emit_seq++;
    s->qlen--;
    r->st.queued--;
    if (a1 != a0) {                 /* rd_apply_effects: old freed (it is live), ret allocated */
        if (s->pq[RD_SP_HEAP].n) rd_pend_del(&r->pend[RD_SP_HEAP], a0, s, RD_SP_HEAP, e->seq);
        ls->live[i0] = 0; ls->n--; ls->dead++;
        ls->own[i0] = s->idx;
        if (found1) {
            ls->live[i1] = 1; ls->dead--; ls->n++;
        } else {
            ls->k[i1] = a1;
            ls->live[i1] = 1;
            ls->n++;
        }
        ls->own[i1] = s->idx;
    }
    return rd_emit_out(r, s, ev, 0);
}

/* The usual head, decided and handed out in one go: a malloc, calloc,
 * free or realloc of addresses (not 0) without VER records, whose implicit
 * versions, if its stream has versions, are exactly the ones their slots
 * expect. What rd_constraint would answer for it needs only the live set,
 * so one probe per address decides, and the same slots then take the
 * effects that rd_emit_any would give them: a free of a live address, or
 * with one stream any free; an allocation of an address not live, when
 * the table need not be rebuilt for it; a realloc that keeps a live block
 * in place, or moves one to an address not live. Everything else (a
 * version ahead or behind, an address to look for in other streams, an
 * unknown free among several streams, a failed realloc) returns 0 before
 * anything has changed, for rd_constraint and rd_emit_any to decide; so a
 * caller that has decided that the head goes may call it first too (the
 * effects it gives are rd_emit_any's). Otherwise rd_emit_out's answer. */
static inline __attribute__((always_inline)) int rd_fast_heap(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    rd_hev_t *e = &s->head;
    unsigned t = e->type;
    uint64_t a = e->f[0];
    rd_aset_t *ls = &r->live[RD_SP_HEAP];
    if (t == PST_EV_REALLOC) return rd_fast_realloc(r, s, ev);
    if ((t != PST_EV_MALLOC && t != PST_EV_CALLOC && t != PST_EV_FREE) || !a || e->n_ver || !ls->k) return 0;
    uint32_t sl = 0, i;
    uint16_t v = 0;
    if (s->vers) {                  /* rd_ver_of's implicit version (its inline case) */
        if (!r->vexp) return 0;
        sl = pst_vslot(a);
        uint64_t l = r->vlast[sl];
        v = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
        if (v != r->vexp[sl]) return 0;
    }
    int found = rd_aset_slot(ls, a, &i), live = found && ls->live[i];
    if (t == PST_EV_FREE) {
        if (!live && r->n_sv > 1) return 0;     /* rule 3, or rd_ver_live_check's scan */
    } else if (live || (!found && (ls->n + ls->dead + 1) * 2 > ls->mask + 1)) {
        return 0;                               /* rule 4 / its scans; or rd_aset_add rebuilds */
    }
    if (s->vers) {                  /* rd_ver_apply of a version that is next */
        r->vlast[sl] = (uint64_t)(s->idx + 1) << 16 | v;
        r->vgen++;
        r->vexp[sl] = rd_vexp_after(r, sl, v);
    }
    s->emit_seq++;
    s->qlen--;
    r->st.queued--;
    if (t == PST_EV_FREE) {         /* rd_aset_del at slot i */
        if (s->pq[RD_SP_HEAP].n) rd_pend_del(&r->pend[RD_SP_HEAP], a, s, RD_SP_HEAP, e->seq);
        if (live) {
            ls->live[i] = 0; ls->n--; ls->dead++;
            ls->own[i] = s->idx;
        } else {
            r->st.unknown_frees++;
        }
    } else if (found) {             /* rd_aset_add at slot i: a dead slot comes back */
        ls->live[i] = 1; ls->dead--; ls->n++;
        ls->own[i] = s->idx;
    } else {                        /* or an empty one is taken */
        ls->k[i] = a;
        ls->live[i] = 1;
        ls->own[i] = s->idx;
        ls->n++;
    }
    return rd_emit_out(r, s, ev, 0);
}

/* Any head: rd_fast_heap when it takes it, else the general effects. */
static inline __attribute__((always_inline)) int rd_emit(pst_reader_t *r, rd_stream_t *s, pst_event_t *ev)
{
    int fr = rd_fast_heap(r, s, ev);
    return fr ? fr : rd_emit_any(r, s, ev);
}

/* Ties. Events of one time (one tick of the writer's time base) carry no
 * order across streams, and any order that keeps each stream's own is as
 * true as another, but not every one is consistent (a free before the
 * allocation it frees). Each head's place in its stream's block of that
 * time estimates when, within the tick, it happened (events of a busy
 * thread spread evenly over the tick): the head whose estimate is earliest
 * among those that may go out now (rd_constraint) goes first. The streams
 * whose head has the top's time form a subtree at the root of the heap. */
static inline int rd_earlier_in_tick(const rd_stream_t *a, const rd_stream_t *b)
{
    uint64_t la = a->hblk_open ? a->vblk : a->hblk_len, lb = b->hblk_open ? b->vblk : b->hblk_len;
    if (!la) la = 1;
    if (!lb) lb = 1;
    uint64_t x = (2 * (uint64_t)a->hblk_idx + 1) * lb, y = (2 * (uint64_t)b->hblk_idx + 1) * la;
    return x < y || (x == y && a->id < b->id);
}

/* Affinity: a head that frees what its own stream allocated, or allocates
 * what its own stream freed last (the allocator's thread caches hand a
 * freed block back to the thread that freed it), goes before the others.
 * When two heads compete for one address (two frees of the live block, two
 * allocations of a freed one), the one of that stream is almost always
 * the right one; for heads that do not compete the order does not matter. */
static int rd_foreign(const pst_reader_t *r, const rd_stream_t *s)
{
    int sp;
    uint64_t a;
    if (!rd_frees_addr(&s->head, &sp, &a) && !rd_allocs_addr(&s->head, &sp, &a)) return 0;
    return rd_aset_owner(&r->live[sp], a) != s->idx;
}

static rd_stream_t *rd_tie_scan_(pst_reader_t *r, uint32_t i, uint64_t ts, rd_stream_t *best, int *best_f)
{
    rd_sheap_t *h = &r->hq;
    if (i >= h->n || h->a[i]->head.ts != ts) return best;
    rd_stream_t *s = h->a[i], *t;
    uint64_t tseq;
    int why;
    if (rd_constraint(r, s, &s->head, &t, &tseq, &why) == RD_C_NONE) {
        /* heads with cycle counts (minor 8) go in the order they happened;
         * the estimate below is for those without */
        uint64_t cs = s->head.cyc, cb = best ? best->head.cyc : 0;
        int f = cs ? 0 : rd_foreign(r, s);
        if (!best || (cs && cb ? rd_sheap_less(h, s, best)   /* (time, count, stream id) */
                               : f < *best_f || (f == *best_f && rd_earlier_in_tick(s, best)))) {
            best = s;
            *best_f = f;
        }
    }
    best = rd_tie_scan_(r, 2 * i + 1, ts, best, best_f);
    return rd_tie_scan_(r, 2 * i + 2, ts, best, best_f);
}

static rd_stream_t *rd_tie_scan(pst_reader_t *r, uint32_t i, uint64_t ts, rd_stream_t *best)
{
    int f = 2;
    return rd_tie_scan_(r, i, ts, best, &f);
}

/* Does another head share the top's time? */
static inline int rd_top_tied(const pst_reader_t *r)
{
    const rd_sheap_t *h = &r->hq;
    uint64_t ts = h->a[0]->head.ts;
    return (h->n > 1 && h->a[1]->head.ts == ts) || (h->n > 2 && h->a[2]->head.ts == ts);
}

static int rd_force_push(pst_reader_t *r, rd_stream_t *t, uint64_t target)
{
    if (r->n_force == r->cap_force) {
        uint32_t cap = r->cap_force ? r->cap_force * 2 : 8;
        struct rd_force *a = realloc(r->force, cap * sizeof *a);
        if (!a) return PSC_ENOMEM;
        r->force = a;
        r->cap_force = cap;
    }
    r->force[r->n_force++] = (struct rd_force){ t, target };
    t->on_force = 1;
    return 0;
}

static void rd_force_pop(pst_reader_t *r)
{
    r->force[--r->n_force].s->on_force = 0;
}

/* An allocation of a live address whose free is not queued, in a trace
 * whose times are not causal (minor < 2): the free may be stamped later
 * than the allocation, so it may still be in a chunk not read yet, and the
 * reader reads on for it. Until when? The free happened before the
 * allocation, so it was in its thread's buffer before the allocation's
 * chunk was cut; the writer's next flush round wrote it, and the SYNC
 * chunk closing that round follows it in the file. A SYNC watermark past
 * the allocation's time says such a round has begun after it; one more
 * SYNC after that one covers the rare event a minor-1 writer left being
 * encoded during a round. Without SYNC chunks, only the window ends the
 * wait. Waiting longer only fills the queue: a trace of malloc churn,
 * read with the 1 s window, queued 1 s of events (4.9 M, 120 MiB) at each
 * such allocation whose free never came (a lost event). */
static int rd_wait_over(pst_reader_t *r, const rd_stream_t *s, const rd_hev_t *e)
{
    if (r->wait_s != s || r->wait_seq != e->seq) {
        r->wait_s = s;
        r->wait_seq = e->seq;
        r->wait_sync0 = UINT64_MAX;
    }
    if (r->wait_sync0 == UINT64_MAX && r->n_sync && r->sync_ts > e->ts) r->wait_sync0 = r->n_sync;
    return r->wait_sync0 != UINT64_MAX && r->n_sync > r->wait_sync0;
}

/* The input has ended and every queue is empty: the streams' byte queues
 * (together up to about twice the largest merge window's bytes, 10-15 MB on
 * a 4-thread churn) are given back now rather than at pst_close, so they do
 * not sit under what the caller does after the last event (report and
 * export symbolize then, sql builds its indexes). Nothing is appended after
 * the end; a queue that is needed again grows from empty as at the start. */
static void rd_drop_queues(pst_reader_t *r)
{
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rd_stream_t *s = r->sv[i];
        free(s->b);
        s->b = NULL;
        s->bcap = s->bhead = s->btail = 0;
    }
}

int pst_next(pst_reader_t *r, pst_event_t *ev)
{
    /* the usual case: nothing forced, the top head is safe and free to go
     * (or, tied with other heads, the earliest of them in the tick) */
    if (!r->n_force && r->hq.n) {
        rd_stream_t *s = r->hq.a[0], *t;
        uint64_t tseq;
        int why;
        if (rd_safe(r, &s->head)) {
            /* a top with a cycle count is the earliest of its tied heads
             * (rd_sheap_less): the tie scan's choice when it may go */
            if (!r->causal_times || s->head.cyc || !rd_top_tied(r)) {
                int fr = rd_fast_heap(r, s, ev);
                if (fr) return fr;
                if (rd_constraint(r, s, &s->head, &t, &tseq, &why) == RD_C_NONE) return rd_emit_any(r, s, ev);
            } else if ((t = rd_tie_scan(r, 0, s->head.ts, NULL))) {
                /* s's constraint only counts the reordering: it changes
                 * nothing the tie scan's choice depends on */
                rd_stream_t *u;
                if (t != s && rd_constraint(r, s, &s->head, &u, &tseq, &why) != RD_C_NONE) r->st.causal_reordered++;
                return rd_emit(r, t, ev);
            }
        }
    }
    for (;;) {
        rd_stream_t *s, *t;
        uint64_t tseq;
        int why = 0, c, rc;
        if (r->n_force) {
            /* a stream being drained up to a free / a pool event another one waits for */
            struct rd_force *f = &r->force[r->n_force - 1];
            s = f->s;
            if (!s->qlen || s->emit_seq > f->target) { rd_force_pop(r); continue; }
            rd_hev_t *e = &s->head;
            c = rd_constraint(r, s, e, &t, &tseq, &why);
            if (c == RD_C_FORCE && !t->on_force) {
                if ((rc = rd_force_push(r, t, tseq))) return rc;
                if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
                continue;
            }
            if (c == RD_C_VWAIT) {      /* the event of its address before it goes first */
                c = rd_vwait_resolve(r, s, e, &t, &tseq);
                if (c < 0) return c;
                if (c == RD_C_FORCE && !t->on_force) {
                    if ((rc = rd_force_push(r, t, tseq))) return rc;
                    r->st.causal_reordered++;
                    continue;
                }
                if (c == RD_C_FORCE) r->st.unordered++;   /* a cycle */
            } else if (c != RD_C_NONE && c != RD_C_BLOCKED && why == RD_WHY_CAUSAL) {
                r->st.unordered++;      /* a cycle, or nothing to wait for */
            }
            uint64_t target = f->target;
            rc = rd_emit(r, s, ev);
            if (rc < 0) return rc;
            if (s->emit_seq > target && r->n_force && r->force[r->n_force - 1].s == s) rd_force_pop(r);
            return 1;
        }
        if (!r->hq.n) {
            if (r->eof) { rd_drop_queues(r); return 0; }
            if ((rc = rd_pull(r)) < 0) return rc;
            continue;
        }
        s = r->hq.a[0];
        rd_hev_t *e = &s->head;
        if (!rd_safe(r, e)) {
            if ((rc = rd_pull(r)) < 0) return rc;
            continue;
        }
        c = rd_constraint(r, s, e, &t, &tseq, &why);
        if (c == RD_C_NONE && r->causal_times && !e->cyc && rd_top_tied(r)) {
            /* safe only now (a chunk was read): the tie rule as above (a
             * top with a count is already its choice) */
            rd_stream_t *o = rd_tie_scan(r, 0, e->ts, NULL);
            return rd_emit(r, o ? o : s, ev);
        }
        if (c != RD_C_NONE) {
            rd_stream_t *o = rd_tie_scan(r, 0, e->ts, NULL);
            if (o && o != s) {
                if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
                return rd_emit(r, o, ev);
            }
            if (c == RD_C_BLOCKED) return rd_emit(r, s, ev);   /* an unknown free (rd_apply_effects counts it) */
        }
        if (c == RD_C_VWAIT) {
            c = rd_vwait_resolve(r, s, e, &t, &tseq);
            if (c < 0) return c;
            if (c == RD_C_NONE) return rd_emit(r, s, ev);
        }
        if (c == RD_C_FORCE) {
            if ((rc = rd_force_push(r, t, tseq))) return rc;
            if (why == RD_WHY_POOL) r->st.pool_reordered++; else r->st.causal_reordered++;
            continue;
        }
        if (c == RD_C_WAIT && !r->causal_times && !r->eof && !rd_window_passed(r, e) && !rd_wait_over(r, s, e)) {
            if ((rc = rd_pull(r)) < 0) return rc;
            continue;
        }
        if (c == RD_C_WAIT || c == RD_C_UNORDERED) r->st.unordered++;
        return rd_emit(r, s, ev);
    }
}
