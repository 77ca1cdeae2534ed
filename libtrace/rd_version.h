/* rd_version.h — the fourth stage of the reader (rd_internal.h has the
 * order): versions (format 1.3) and the scans of other streams' queues
 * (rd_version.c). The merge asks here whether a head's versions are next in
 * their slots and applies them as events go out; the look-ups inline, as
 * pst_next (rd_merge.c) inlined them when they shared its file.
 */
#ifndef RD_VERSION_H
#define RD_VERSION_H

#include "rd_decode.h"
#include "rd_tables.h"

/* What must happen before a head goes out (rd_merge.c, rd_constraint);
 * rd_vwait_resolve answers with RD_C_NONE or RD_C_FORCE. */
enum { RD_C_NONE, RD_C_FORCE, RD_C_WAIT, RD_C_UNORDERED, RD_C_BLOCKED, RD_C_VWAIT };

/* The merge's scans of other streams' queues (rd_version.c): records they
 * may decode in all, RD_SCAN_BASE + RD_SCAN_PER_EVENT per event read.
 * Ordinary traces need a few per event (1-2.3 on 64-thread stress traces
 * read whole); the base covers a long queue scanned early in a trace. */
#define RD_SCAN_BASE      (1ull << 22)
#define RD_SCAN_PER_EVENT 64u

/* ---- versions (minor 3) ------------------------------------------------------ */
/* An event's VER records give the versions of its ordered addresses in field
 * order (format.h, pst_vslot). vexp[slot] is the version the slot's next
 * event must carry: an event whose version is ahead of it waits for the
 * events of that slot before it, wherever they are queued. One behind it
 * (two threads that raced for one counter, colliding addresses only) is a
 * duplicate and goes. */

/* The ordered addresses of e, in field order: what its versions belong to. */
static inline unsigned rd_ver_addrs(const rd_hev_t *e, uint64_t a[2]) { return pst_ver_addrs(e->type, e->f, a); }

static inline int rd_vahead(uint16_t v, uint16_t x)
{
    uint16_t d = (uint16_t)(v - x);
    return d != 0 && d < 0x8000;
}

/* The versions of e, the head of s, into o: the number of its ordered
 * addresses, 0 when none count (rd_version.c says how). */
unsigned rd_ver_of_(const pst_reader_t *r, const rd_stream_t *s, const rd_hev_t *e, rd_vinfo_t *o);

/* rd_ver_of_ of s's head, computed once per head: the merge asks for it when
 * it checks the head (rd_constraint) and again when the head goes out
 * (rd_ver_apply). The answer depends on the head and on the counters
 * (vexp, vlast), so it is kept until the head changes (seq) or a counter
 * is written (r->vgen). Other events (e not the head) are computed into
 * tmp. The answer holds until the next rd_ver_of of s. */
static inline __attribute__((always_inline)) const rd_vinfo_t *rd_ver_of(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_vinfo_t *tmp)
{
    if (e != &s->head) {
        rd_ver_of_(r, s, e, tmp);
        return tmp;
    }
    if (!(s->vc_valid && s->vc_gen == r->vgen && s->vc_seq == e->seq)) {
        unsigned t = e->type;
        if ((t == PST_EV_MALLOC || t == PST_EV_FREE || t == PST_EV_CALLOC) && !e->n_ver && s->vers && r->vexp && e->f[0]) {
            /* rd_ver_of_'s answer for the common heads, inline: one ordered
             * address (f[0]) with an implicit version */
            rd_vinfo_t *o = &s->vc;
            uint32_t sl = pst_vslot(e->f[0]);
            uint64_t l = r->vlast[sl];
            o->a[0] = e->f[0];
            o->sl[0] = sl;
            o->v[0] = (l >> 16) == (uint64_t)s->idx + 1 ? pst_vnext((uint16_t)l) : r->vexp[sl];
            o->n = 1;
        } else {
            rd_ver_of_(r, s, e, &s->vc);
        }
        s->vc_gen = r->vgen;
        s->vc_seq = e->seq;
        s->vc_valid = 1;
    }
    return &s->vc;
}

/* -1: e carries no versions that apply (an older trace, one thread, a
 * count that does not match its addresses); 0: its versions (rd_ver_of,
 * into *vip) are next in their slots; otherwise the addresses it must wait
 * for, bit i for a[i]. */
static inline __attribute__((always_inline)) int rd_ver_state(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, const rd_vinfo_t **vip,
                               rd_vinfo_t *tmp)
{
    const rd_vinfo_t *vi = *vip = rd_ver_of(r, s, e, tmp);
    if (!vi->n) return -1;
    uint32_t s0 = vi->sl[0];
    int m = rd_vahead(vi->v[0], r->vexp[s0]);
    if (vi->n == 2) {
        uint32_t s1 = vi->sl[1];
        if (rd_vahead(vi->v[1], s1 == s0 ? pst_vnext(vi->v[0]) : r->vexp[s1])) m |= 2;
    }
    return m;
}

/* Events handed out ahead of their slot's next version, because what they
 * waited for was another address's (rd_vwait_resolve): (slot << 16 |
 * version) -> 1 until the slot's count reaches them. */
static inline uint64_t rd_ahead_key(uint32_t sl, uint16_t v) { return (uint64_t)sl << 16 | v; }

/* The version slot sl expects next what follows v, past the versions that
 * already went ahead (each taken off `ahead` as the count reaches it). */
static inline uint16_t rd_vexp_after(pst_reader_t *r, uint32_t sl, uint16_t v)
{
    v = pst_vnext(v);
    uint64_t *p;
    while (psc_map_count(&r->ahead) && (p = psc_map_get_sz(&r->ahead, rd_ahead_key(sl, v), sizeof(uint64_t)))) {
        psc_map_erase_sz(&r->ahead, p, sizeof(uint64_t));
        v = pst_vnext(v);
    }
    return v;
}

/* e goes out: its slots expect the versions after its own, and after any
 * that went ahead. An event ahead of its slot that is not in the ahead set
 * jumps the slot's count (an event of that slot was lost) and is counted
 * in ver_gaps. */
static inline __attribute__((always_inline)) void rd_ver_apply_vi(pst_reader_t *r, const rd_stream_t *s, const rd_vinfo_t *vi)
{
    for (unsigned i = 0; i < vi->n; i++) {
        uint32_t sl = vi->sl[i];
        uint16_t x = r->vexp[sl], v = vi->v[i];
        r->vlast[sl] = (uint64_t)(s->idx + 1) << 16 | v;
        r->vgen++;
        if ((uint16_t)(v - x) >= 0x8000) continue;        /* behind: a duplicate */
        if (v != x) {
            if (psc_map_count(&r->ahead) && psc_map_get_sz(&r->ahead, rd_ahead_key(sl, v), sizeof(uint64_t)))
                continue;                                   /* went ahead: the count reaches it later */
            r->st.ver_gaps++;
        }
        r->vexp[sl] = rd_vexp_after(r, sl, v);
    }
}

static inline void rd_ver_apply(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e)
{
    rd_vinfo_t tmp;
    rd_ver_apply_vi(r, s, rd_ver_of(r, s, e, &tmp));
}

/* The queued event of another stream than s, stamped up to lim, that frees
 * (want_free) or allocates address a of space sp (rd_version.c). */
int rd_addr_scan(pst_reader_t *r, const rd_stream_t *s, int sp, uint64_t a, int want_free, uint64_t lim,
                 rd_stream_t **t, uint64_t *tseq);
/* A head waits on a version (RD_C_VWAIT): RD_C_FORCE with the event to
 * drain up to, RD_C_NONE when it goes ahead, or a negative error
 * (rd_version.c). */
int rd_vwait_resolve(pst_reader_t *r, rd_stream_t *s, const rd_hev_t *e, rd_stream_t **t, uint64_t *tseq);

#endif
