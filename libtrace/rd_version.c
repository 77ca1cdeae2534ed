/* rd_version.c — versions (format 1.3) and the bounded scans of other
 * streams' queued events.
 *
 * A head whose version is ahead of its slot (RD_C_VWAIT) looks for the
 * event of its own address it waits for (rd_vwait_resolve); a versioned head
 * the live set disagrees with looks for the queued allocation or free of its
 * address (rd_addr_scan, for rd_merge.c's rd_ver_live_check). Both walk the
 * other streams' byte queues with the head decoder (rd_dec_rec), within
 * one budget for the whole read. The inline parts (the versions of a head,
 * their state, applying them) are in rd_version.h.
 */
#include "rd_version.h"

/* The versions of e, the head of s, into v (the number of its ordered
 * addresses a[], or 0 when it has none that count). An event without VER
 * records in a stream that has had them has implicit versions: the slot's
 * previous version was its own thread's, so it is the one after that
 * (vlast); if another stream's came out since (only when an event went
 * ahead), the slot's expected one. */
__attribute__((noinline)) unsigned rd_ver_of_(const pst_reader_t *r, const rd_stream_t *s, const rd_hev_t *e, rd_vinfo_t *o)
{
    unsigned n = rd_ver_addrs(e, o->a);
    o->n = 0;
    if (!r->vexp || !n) return 0;
    if (e->n_ver) {
        if (n != e->n_ver) return 0;
        o->v[0] = e->ver[0];
        o->v[1] = e->ver[1];
        for (unsigned i = 0; i < n; i++) o->sl[i] = pst_vslot(o->a[i]);
        return o->n = n;
    }
    if (!s->vers) return 0;
    for (unsigned i = 0; i < n; i++) {
        uint32_t sl = o->sl[i] = pst_vslot(o->a[i]);
        uint64_t l = r->vlast[sl];
        o->v[i] = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
        if (i == 1 && sl == o->sl[0]) o->v[1] = pst_vnext(o->v[0]);
    }
    return o->n = n;
}

/* ---- scans of other streams' queues ---------------------------------------- */

/* The scans below look through other streams' queued bytes. Together they
 * decode at most RD_SCAN_BASE + scan_per_event records per event read
 * (rd_version.h): the records one scan may still decode end at this
 * count of scan_steps. */
static inline uint64_t rd_scan_budget(const pst_reader_t *r)
{
    return r->scan_base + r->scan_per_event * r->decoded;
}

/* A scan has used up the budget: it answers "nothing found", so the event
 * goes without the order the scan would have found; that is counted
 * (scans_cut, and st.unordered, which pst_status shows). */
static __attribute__((noinline, cold)) int rd_scan_cut(pst_reader_t *r)
{
    r->scans_cut++;
    r->st.unordered++;
    return 0;
}

/* The queued event of another stream than s, stamped up to lim, that frees
 * (want_free) or allocates address a of space sp, the earliest stamped of
 * the first one in each stream: 1 with its stream and seq. */
__attribute__((noinline)) int rd_addr_scan(pst_reader_t *r, const rd_stream_t *s, int sp, uint64_t a, int want_free, uint64_t lim,
                                            rd_stream_t **t, uint64_t *tseq)
{
    int found = 0;
    uint64_t best_ts = 0, budget = rd_scan_budget(r);
    r->scans++;
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rd_stream_t *o = r->sv[i];
        if (o == s || !o->qlen || o->head.ts > lim || (found && o->head.ts >= best_ts)) continue;
        if (r->scan_steps >= budget) return rd_scan_cut(r);
        pst_enc_t d = o->hdec;
        const uint8_t *p = o->b + o->bhead, *end = o->b + o->btail;
        rd_hev_t x = o->head;
        uint64_t seq = o->emit_seq, ts = o->head.ts;
        for (;;) {
            if (!pst_is_record(x.type)) {
                int xsp;
                uint64_t xa;
                if ((want_free ? rd_frees_addr(&x, &xsp, &xa) : rd_allocs_addr(&x, &xsp, &xa)) && xsp == sp && xa == a) {
                    if (!found || ts < best_ts) { found = 1; best_ts = ts; *t = o; *tseq = seq; }
                    break;
                }
                seq++;
            }
            if (p >= end || !(p = rd_dec_rec(r, &d, p, end, &x, r->idbuf))) break;
            if (++r->scan_steps >= budget) return rd_scan_cut(r);
            ts = d.last_ts;
            if (ts > lim || (found && ts >= best_ts)) break;
        }
    }
    return found;
}

/* ---- waits on a version ------------------------------------------------------ */

/* A head waits on a version (RD_C_VWAIT): which event is it waiting for?
 * The counter of a slot is shared by every address that maps to it, so the
 * event with the version it lacks may belong to another address; then
 * there is nothing to wait for. Only an event of its own address with a
 * version in the gap is a real wait, and that one is stamped no later than
 * e (the address passed from it to e's thread: FORMAT.md "Time"), so it is
 * queued already, behind some stream's head: that stream is drained up to
 * it (RD_C_FORCE). The one exception: another thread may be handed the old
 * block of a realloc (reallocarray, mremap) inside that call, which is
 * stamped when it returns, however long that took; so an allocation of an
 * address still live looks through everything queued. (That realloc is
 * queued: its thread was in flight from its version on, so no watermark
 * passed before it was published.) Otherwise e goes ahead of its slot's
 * count (RD_C_NONE, noted in the ahead set): a wait on another address, or
 * on a lost event (the count jumps when the slot is RD_VER_LOST behind,
 * counted in ver_gaps). */
#define RD_VER_LOST  1024u

/* The first queued event, stamped up to lim, of an address e waits for (bit
 * j of vs: a[j]) with a version in its gap [lo[j], ver[j]): 1 with its
 * stream and seq. Implicit versions are followed along each stream: from
 * the slot's last version out if that was the stream's, else unknown (the
 * stream's first event on the slot then counts as in the gap: its thread's
 * previous one on the slot has gone out, so e's came later). */
static int rd_vwait_scan(pst_reader_t *r, rd_stream_t *s, unsigned n, int vs, const uint64_t *a,
                         const uint16_t *v, const uint16_t *lo, uint64_t lim, rd_stream_t **t, uint64_t *tseq)
{
    uint32_t sl[2] = { pst_vslot(a[0]), n > 1 ? pst_vslot(a[1]) : UINT32_MAX };
    uint64_t budget = rd_scan_budget(r);
    r->scans++;
    for (uint32_t i = 0; i < r->n_sv; i++) {
        rd_stream_t *o = r->sv[i];
        if (o == s || !o->qlen || o->head.ts > lim) continue;
        if (r->scan_steps >= budget) return rd_scan_cut(r);
        pst_enc_t d = o->hdec;
        const uint8_t *p = o->b + o->bhead, *end = o->b + o->btail;
        rd_hev_t x = o->head;
        uint64_t seq = o->emit_seq;
        int vers = o->vers, known[2], past[2] = { 0, 0 };
        uint16_t cur[2];
        for (unsigned j = 0; j < 2; j++) {
            uint64_t l = sl[j] == UINT32_MAX ? 0 : r->vlast[sl[j]];
            known[j] = (l >> 16) == (uint64_t)o->idx + 1;
            cur[j] = (uint16_t)l;
        }
        for (;;) {
            uint64_t xa[2];
            unsigned nx;
            if (!pst_is_record(x.type) && (nx = rd_ver_addrs(&x, xa))) {
                if (x.n_ver) vers = 1;
                int expl = x.n_ver == nx;
                if (expl || (vers && !x.n_ver))
                    for (unsigned k = 0; k < nx; k++)
                        for (unsigned j = 0; j < n; j++) {
                            if (!(vs >> j & 1) || past[j] || pst_vslot(xa[k]) != sl[j]) continue;
                            if (expl) { cur[j] = x.ver[k]; known[j] = 1; }
                            else if (known[j]) cur[j] = pst_vnext(cur[j]);
                            int in_gap = !known[j] || (uint16_t)(cur[j] - lo[j]) < (uint16_t)(v[j] - lo[j]);
                            if (known[j] && !in_gap && (uint16_t)(cur[j] - lo[j]) < 0x8000) { past[j] = 1; continue; }
                            if (in_gap && xa[k] == a[j]) {
                                *t = o;
                                *tseq = seq;
                                return 1;
                            }
                        }
                seq++;
            } else if (!pst_is_record(x.type)) {
                seq++;
            }
            if (p >= end || !(p = rd_dec_rec(r, &d, p, end, &x, r->idbuf)) || d.last_ts > lim) break;
            if (++r->scan_steps >= budget) return rd_scan_cut(r);
        }
    }
    return 0;
}

int rd_vwait_resolve(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_stream_t **t, uint64_t *tseq)
{
    uint64_t a[2] = { 0, 0 }, la;
    uint16_t lo[2] = { 0, 0 }, v[2] = { 0, 0 };
    const rd_vinfo_t *vi;
    rd_vinfo_t vtmp;
    int vs = rd_ver_state(r, s, e, &vi, &vtmp), sp;
    if (vs <= 0) return RD_C_NONE;
    unsigned n = vi->n;
    for (unsigned j = 0; j < n; j++) { a[j] = vi->a[j]; v[j] = vi->v[j]; }
    uint32_t s0 = pst_vslot(a[0]);
    for (unsigned j = 0; j < n; j++) {
        uint32_t sl = pst_vslot(a[j]);
        lo[j] = j == 1 && sl == s0 ? pst_vnext(v[0]) : r->vexp[sl];
    }
    int live_alloc = rd_allocs_addr(e, &sp, &la) && rd_aset_has(&r->live[sp], la);
    if (rd_vwait_scan(r, s, n, vs, a, v, lo, live_alloc ? UINT64_MAX : e->ts, t, tseq)) return RD_C_FORCE;
    /* Nothing queued to wait for, but a trace with exact watermarks can
     * still deliver it: e was let out before the watermark passed it (the
     * memory guard, rd_safe). Going ahead may be wrong: counted. */
    if (r->guard_early && !r->eof && e->ts >= r->sync_ts) r->st.unordered++;
    for (unsigned j = 0; j < n; j++) {
        if (!(vs >> j & 1)) continue;
        uint32_t sl = pst_vslot(a[j]);
        if ((uint16_t)(v[j] - lo[j]) > RD_VER_LOST) {
            r->vexp[sl] = v[j];                /* lost: the count jumps */
            r->vgen++;
            r->st.ver_gaps++;
            continue;
        }
        int is_new;
        uint64_t *p = psc_map_put_sz(&r->ahead, rd_ahead_key(sl, v[j]), &is_new, sizeof(uint64_t));
        if (!p) return PSC_ENOMEM;
        *p = 1;
    }
    return RD_C_NONE;
}
