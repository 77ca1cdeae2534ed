/* rd_decode.c — event decoding for the reader: the validating pass over an
 * EVENTS chunk, and what that pass builds.
 *
 * An EVENTS chunk is decoded once, when it is read, with a copy of its
 * stream's decoder state: every record must decode (type known, counts in
 * their limits, values inside the chunk), and the strings and stacks it
 * names must be defined already. The same pass notes the frees (by address)
 * and the pool events (by pool_seq) the merge needs to order against; only
 * when the whole chunk has proven good are its raw bytes appended to the
 * stream's byte queue and the notes handed on (rd_decode_chunk: the merge
 * indexes them), so a corrupt chunk leaves nothing behind. Queued bytes are
 * decoded a second time, one head at a time, by rd_head_next (rd_decode.h)
 * — that decode cannot fail.
 *
 * The decoder itself: malloc, free, calloc, realloc and TS are decoded
 * inline (rd_dec_rec, with branch-free short varints, in rd_decode.h so
 * the merge inlines it too; the validating loop below has its own inline
 * cases for malloc, with and without a stack id, free and TS); every other type goes through
 * rd_dec_generic here, i.e. pst_decode_event. Streams are created here as
 * their first chunk arrives (ids are not announced), and with them the
 * rule that a lone stream's frees need no index until a second one appears
 * (the merge then indexes the first one's queue: rd_merge.c, rd_pull).
 *
 * The second stage of the reader: it pulls chunks from the first
 * (rd_read_chunk) and calls no later stage.
 */
#include "rd_decode.h"

/* ---- decoding ------------------------------------------------------------------ */

/* The per-type layout facts the decoder and the merge look up per event. */
void rd_decode_init(pst_reader_t *r)
{
    for (unsigned t = 0; t < PST_EV_MAX; t++) {
        const char *lay = pst_event_layout(t);
        r->s_idx[t] = r->ext_idx[t] = -1;
        if (!lay) continue;
        r->nf[t] = (uint8_t)strlen(lay);
        for (unsigned i = 0; lay[i]; i++) {
            if (lay[i] == 'S' && r->s_idx[t] < 0) r->s_idx[t] = (int8_t)i;
            if (lay[i] == 'L' || lay[i] == 'P') { r->ext_idx[t] = (int8_t)i; r->ext_kind[t] = lay[i]; }
        }
    }
}

/* pst_decode_event into an rd_hev_t (any type, TS included). */
const uint8_t *rd_dec_generic(const pst_reader_t *r, pst_enc_t *d, const uint8_t *p,
                              const uint8_t *end, rd_hev_t *e, uint32_t *idbuf)
{
    pst_event_t ev;
    ev.n_ids = 0;
    ev.n_payload = 0;
    if (!(p = pst_decode_event(d, p, end, &ev, idbuf))) return NULL;
    e->type = ev.type;
    e->stack = ev.stack;
    e->cyc = ev.cyc;
    e->n_ver = (uint8_t)ev.n_ver;
    e->ver[0] = ev.ver[0];
    e->ver[1] = ev.ver[1];
    memcpy(e->f, ev.f, r->nf[ev.type] * sizeof(uint64_t));
    e->n_ids = r->ext_kind[ev.type] == 'L' ? ev.n_ids : 0;
    e->n_payload = r->ext_kind[ev.type] == 'P' ? ev.n_payload : 0;
    if (e->n_payload) memcpy(e->payload, ev.payload, e->n_payload * sizeof(int64_t));
    return p;
}

/* Is stack id (not 0) defined? Definitions are never removed, so an id
 * found once stays found: the few ids of a program's hot call sites answer
 * from the cache, without the map's probe per event. */
static inline int rd_stack_defined(pst_reader_t *r, uint32_t id)
{
    uint32_t *c = &r->stk_ok[id & 63];
    if (*c == id) return 1;
    if (!rd_map_get(&r->stack_ids, id, NULL)) return 0;
    *c = id;
    return 1;
}

/* ---- streams ------------------------------------------------------------------ */

static rd_stream_t *rd_stream_get(pst_reader_t *r, uint32_t id, int *err)
{
    uint64_t i;
    if (rd_map_get(&r->stream_ids, id, &i)) return r->sv[i];
    if (r->n_sv == r->cap_sv) {
        uint32_t cap = r->cap_sv ? r->cap_sv * 2 : 16;
        rd_stream_t **a = realloc(r->sv, cap * sizeof *a);
        if (!a) { *err = PSC_ENOMEM; return NULL; }
        r->sv = a;
        r->cap_sv = cap;
    }
    rd_stream_t *s = calloc(1, sizeof *s);
    if (!s || rd_map_put(&r->stream_ids, id, r->n_sv)) {
        free(s);
        *err = PSC_ENOMEM;
        return NULL;
    }
    s->id = id;
    s->idx = r->n_sv;
    pst_enc_init(&s->dec, r->coding, NULL);
    pst_enc_init(&s->hdec, r->coding, NULL);
    s->hq_pos = -1;
    if (id > r->max_stream) r->max_stream = id;
    r->sv[r->n_sv++] = s;
    r->st.streams++;
    return s;
}

/* Append n event bytes to s's byte queue. The consumed prefix is reused:
 * the queued bytes move down when they fill at most half the buffer (so at
 * least as many bytes were appended since the last move: each byte moves
 * O(1) times), otherwise the buffer grows to twice what is needed (and by
 * half at least, so growing stays geometric). Not to powers of two: the
 * buffer, which the tail sweeps whole, stays within about twice the stream's
 * largest queue. */
static int rd_squeue_append(rd_stream_t *s, const uint8_t *p, size_t n)
{
    if (!n) return 0;
    if (s->bcap - s->btail < n) {
        size_t live = s->btail - s->bhead;
        if (2 * (live + n) <= s->bcap) {
            memmove(s->b, s->b + s->bhead, live);
        } else {
            size_t cap = 2 * (live + n);
            if (cap < s->bcap + s->bcap / 2) cap = s->bcap + s->bcap / 2;
            cap = ((cap + RD_QPAD + 4095) & ~(size_t)4095) - RD_QPAD;
            /* RD_QPAD bytes after the end for the head decoder's loads
             * (rd_vshort_) */
            uint8_t *nb = malloc(cap + RD_QPAD);
            if (!nb) return PSC_ENOMEM;
            if (live) memcpy(nb, s->b + s->bhead, live);
            free(s->b);
            s->b = nb;
            s->bcap = cap;
        }
        s->bhead = 0;
        s->btail = live;
    }
    memcpy(s->b + s->btail, p, n);
    s->btail += n;
    memset(s->b + s->btail, 0, RD_QPAD);   /* what a load past the end reads: never uninitialised */
    return 0;
}

static int rd_fops_grow(pst_reader_t *r)
{
    if (r->cap_fops > (UINT32_MAX >> 2)) return PSC_ENOMEM;
    uint32_t cap = r->cap_fops ? r->cap_fops * 2 : 1024;
    rd_free_op_t *na = realloc(r->fops, cap * sizeof *na);
    if (!na) return PSC_ENOMEM;
    r->fops = na;
    r->cap_fops = cap;
    return 0;
}

/* A TS record with a new time ended a block of *cnt events (noted, and
 * committed with the chunk). */
static int rd_block_closed(pst_reader_t *r, uint32_t *cnt)
{
    if (r->n_bclose == r->cap_bclose) {
        uint32_t cap = r->cap_bclose ? r->cap_bclose * 2 : 64;
        uint32_t *na = realloc(r->bclose, cap * sizeof *na);
        if (!na) return PSC_ENOMEM;
        r->bclose = na;
        r->cap_bclose = cap;
    }
    r->bclose[r->n_bclose++] = *cnt;
    *cnt = 0;
    return 0;
}

static int rd_blk_push(rd_stream_t *s, uint32_t len)
{
    if (s->blk_n == s->blk_cap) {
        uint32_t cap = s->blk_cap ? s->blk_cap * 2 : 16;
        uint32_t *na = malloc(cap * sizeof *na);
        if (!na) return PSC_ENOMEM;
        for (uint32_t i = 0; i < s->blk_n; i++) na[i] = s->blk[(s->blk_h + i) % s->blk_cap];
        free(s->blk);
        s->blk = na;
        s->blk_cap = cap;
        s->blk_h = 0;
    }
    s->blk[(s->blk_h + s->blk_n++) % s->blk_cap] = len;
    return 0;
}

/* Validate one EVENTS chunk, note its frees and pool events (r->fops,
 * r->pops), and append its event bytes to the stream's queue: then *out says
 * what was queued (rd_queued_t). 0 ok (or corrupt, noted), negative error.
 * A corrupt chunk leaves nothing behind. */
static int rd_process_events(pst_reader_t *r, const pst_chunk_hdr_t *h, const uint8_t *p,
                             const uint8_t *end, uint64_t at, rd_queued_t *out)
{
    int err = 0;
    if (h->stream == 0) { rd_set_corrupt(r, at, "events chunk without a stream"); return 0; }
    rd_stream_t *s = rd_stream_get(r, h->stream, &err);
    if (!s) return err;
    uint64_t off;
    if (!(p = pst_get_varint(p, end, &off))) { rd_set_corrupt(r, at, "bad stream offset"); return 0; }
    if (off != s->offset) { rd_set_corrupt(r, at, "stream offset gap"); return 0; }
    const uint8_t *body = p;
    pst_enc_t dec = s->dec;
    uint64_t k = 0, lost = 0, seq0 = s->decode_seq;
    uint32_t tid = s->tid;
    int finished = s->finished;
    const char *bad = NULL;
    rd_hev_t e;
    int wrapped = 0;
    /* With one stream there is no other stream's free to wait for: its
     * frees are indexed only when a second stream appears (rd_merge.c,
     * rd_index_queued).
     * Frees and pool events are noted here and indexed once the chunk has
     * proven good, so a corrupt chunk leaves nothing behind. */
    const int index_frees = r->n_sv > 1;
    r->n_pops = 0;
    r->n_fops = 0;
    r->n_bclose = 0;
    uint32_t bcnt = s->vblk;
    int had_ver = 0, dvers = s->dvers, has_l = 0;
    /* Once a stream has had a VER record its frees are ordered by versions,
     * never indexed here, and no other event's A value is looked at here
     * either (pool, LOST and THREAD_START fields are plain varints): from
     * then on this pass only checks the A codes of the common records
     * (rd_askip5) instead of resolving them, and the validating state's
     * A base and recent list (s->dec) go stale, read by nothing. The head
     * decoder keeps its own state (s->hdec). Minor-5 coding only. */
    const int recent = dec.coding == PST_CODING_RECENT;
    /* a short record checked (it ends at n): counted in its tick and block,
     * and it clears the VER records before it */
#define SHORT_DONE() { dec.since_ts++; dec.nver = 0; p = n; k++; bcnt++; continue; }
    while (p < end) {
        /* the common records first (malloc with or without a stack id, free,
         * VER, TS; calloc and realloc of a versioned stream): no string, no
         * pool */
        uint64_t a, v;
        const uint8_t *n, *q = p + 1;
        unsigned tb = *p;
        switch (tb) {
        case PST_EV_MALLOC | PST_EV_HAS_STACK: {
            /* the stack id is checked before the address is decoded, so an
             * undefined one leaves dec as it was for the general path below */
            uint64_t sid;
            if (!(q = rd_varint(q, end, &sid)) || sid > UINT32_MAX || (sid && !rd_stack_defined(r, (uint32_t)sid)))
                break;
        }   /* the rest is a malloc's */
            /* fall through */
        case PST_EV_MALLOC:
            if (dvers && recent) n = rd_askip5(q, end);
            else n = rd_addr(&dec, q, end, &a);
            if (!n || !(n = rd_varint(n, end, &v))) break;
            SHORT_DONE();
        case PST_EV_CALLOC | PST_EV_HAS_STACK: case PST_EV_REALLOC | PST_EV_HAS_STACK:
        case PST_EV_CALLOC: case PST_EV_REALLOC: {
            if (!(dvers && recent)) break;   /* a realloc's free may need indexing: the general path */
            uint64_t sid;
            if ((tb & PST_EV_HAS_STACK) &&
                (!(q = rd_varint(q, end, &sid)) || sid > UINT32_MAX || (sid && !rd_stack_defined(r, (uint32_t)sid))))
                break;
            if (!(n = rd_askip5(q, end))) break;
            if ((tb & PST_EV_TYPE_MASK) == PST_EV_REALLOC) n = rd_askip5(n, end);   /* old, ret, size */
            else n = rd_varint(n, end, &v);                                          /* ptr, nmemb, size */
            if (!n || !(n = rd_varint(n, end, &v))) break;
            SHORT_DONE();
        }
        case PST_EV_FREE:
            if (dvers && recent) {
                if (!(n = rd_askip5(p + 1, end))) break;
                SHORT_DONE();
            }
            if (!(n = rd_addr(&dec, p + 1, end, &a))) break;
            dec.since_ts++;
            p = n;
            if (a && index_frees && !dec.nver && !dvers) {   /* versioned frees are ordered by version */
                if (r->n_fops == r->cap_fops && (err = rd_fops_grow(r))) return err;
                r->fops[r->n_fops++] = (rd_free_op_t){ a, dec.last_ts, seq0 + k, RD_SP_HEAP };
            }
            dec.nver = 0;
            k++;
            bcnt++;
            continue;
        case PST_EV_VER:
            if (end - p < 3 || dec.nver >= 2) break;
            dec.ver[dec.nver++] = (uint16_t)(p[1] | p[2] << 8);
            p += 3;
            had_ver = dvers = 1;
            continue;
        case PST_EV_CYC:
            if (!(n = rd_varint(p + 1, end, &v))) break;
            dec.last_cyc += v;
            p = n;
            continue;
        case PST_EV_TS:
            if (!(n = rd_varint(p + 1, end, &v))) break;
            wrapped |= dec.last_ts + v < dec.last_ts;
            dec.last_ts += v;
            dec.since_ts = 0;
            p = n;
            if (v && bcnt && (err = rd_block_closed(r, &bcnt))) return err;
            continue;
        default:
            break;
        }
        uint64_t ts_before = dec.last_ts;
        if (!(n = rd_dec_rec(r, &dec, p, end, &e, r->idbuf))) { bad = "undecodable event"; break; }
        p = n;
        unsigned t = e.type;
        has_l |= r->ext_kind[t] == 'L';
        if (t == PST_EV_VER) { had_ver = dvers = 1; continue; }
        if (t == PST_EV_CYC) continue;
        if (t == PST_EV_TS) {
            wrapped |= dec.last_ts < ts_before;
            if (dec.last_ts != ts_before && bcnt && (err = rd_block_closed(r, &bcnt))) return err;
            continue;
        }
        /* definitions precede their first use in file order */
        if (e.stack && !rd_stack_defined(r, e.stack)) { bad = "undefined stack id"; break; }
        if (r->s_idx[t] >= 0 && e.f[r->s_idx[t]] && !rd_map_get(&r->string_ids, e.f[r->s_idx[t]], NULL)) {
            bad = "undefined string id";
            break;
        }
        int sp;
        if (!e.n_ver && !dvers && rd_frees_addr(&e, &sp, &a) && index_frees) {
            if (r->n_fops == r->cap_fops && (err = rd_fops_grow(r))) return err;
            r->fops[r->n_fops++] = (rd_free_op_t){ a, dec.last_ts, seq0 + k, (uint32_t)sp };
        }
        if (rd_is_pool_seq_event(t)) {
            if (r->n_pops == r->cap_pops) {
                uint32_t cap = r->cap_pops ? r->cap_pops * 2 : 64;
                rd_pool_op_t *na = realloc(r->pops, cap * sizeof *na);
                if (!na) return PSC_ENOMEM;
                r->pops = na;
                r->cap_pops = cap;
            }
            r->pops[r->n_pops++] = (rd_pool_op_t){ e.f[0], e.f[1], seq0 + k };
        }
        if (t == PST_EV_LOST) lost += e.f[0];
        if (t == PST_EV_THREAD_START) tid = (uint32_t)e.f[0];
        if (t == PST_EV_THREAD_END) finished = 1;
        k++;
        bcnt++;
    }
    if (bad) { rd_set_corrupt(r, at, bad); return 0; }
    if (had_ver && !r->vexp) {   /* the first versions: every slot expects 1 (pst_vslot) */
        if (!(r->vexp = malloc(sizeof(uint16_t) << PST_VSLOT_BITS)) ||
            !(r->vlast = calloc((size_t)1 << PST_VSLOT_BITS, sizeof(uint64_t)))) {
            free(r->vexp);
            r->vexp = NULL;
            return PSC_ENOMEM;
        }
        for (uint32_t i = 0; i < 1u << PST_VSLOT_BITS; i++) r->vexp[i] = 1;
        r->vgen++;
    }
    /* the head decoder puts L ids in s->ids (rd_head_next): it must exist
     * before such an event can become the head */
    if (has_l && !s->ids && !(s->ids = malloc(PST_MAX_IDS * sizeof *s->ids))) return PSC_ENOMEM;
    if ((err = rd_squeue_append(s, body, (size_t)(end - body)))) return err;
    /* commit (the frees and pool events noted: the merge's, rd_queued_t) */
    if (wrapped) r->ts_wrapped = 1;
    for (uint32_t i = 0; i < r->n_bclose; i++) {
        if (s->hblk_open) {            /* the head's block: its length is known now */
            s->hblk_len = r->bclose[i];
            s->hblk_open = 0;
        } else if ((err = rd_blk_push(s, r->bclose[i]))) {
            return err;
        }
    }
    s->vblk = bcnt;
    r->st.lost += lost;
    int was_empty = s->qlen == 0;
    s->qlen += k;
    s->decode_seq += k;
    r->decoded += k;
    s->dec = dec;
    s->offset += (uint64_t)(end - body);
    s->tid = tid;
    s->finished = finished;
    s->dvers = dvers;
    if (dec.last_ts > r->newest_ts) r->newest_ts = dec.last_ts;
    r->st.queued += k;
    if (r->st.queued > r->st.peak_queued) r->st.peak_queued = r->st.queued;
    out->s = s;
    if (was_empty && k) {
        if ((err = rd_head_next(r, s))) return err;
        out->head = 1;
    }
    return 0;
}
#undef SHORT_DONE

int rd_decode_chunk(pst_reader_t *r, rd_queued_t *q)
{
    rd_chunk_t c;
    q->s = NULL;
    q->head = 0;
    int rc = rd_read_chunk(r, &c);
    if (rc != RD_CHUNK_EVENTS) return rc;
    rc = rd_process_events(r, &c.h, c.p, c.end, c.at, q);
    return rd_chunk_done(r, &c, rc);
}

