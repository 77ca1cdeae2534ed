/* ring.c — per-thread rings. Each thread encodes its events into its own
 * ring (ps_thr_t, 256 KiB, raw mmap on the thread's first event) and
 * publishes the new head with a release store: no lock, no atomic RMW per
 * event. A consumer (the flusher every 50 ms or when a ring is half full,
 * or the thread itself, see ps_make_room) takes the ring's consumer lock,
 * reads [tail, head) and writes it as one EVENTS chunk: writev(header +
 * stream offset, up to two ring segments).
 *
 * Nothing is lost silently: a write that fails leaves its bytes in the
 * ring (the stream stays decodable); when a ring cannot drain, new events
 * are counted (not encoded) and a LOST record is written into the stream
 * as soon as there is room. */
#include "preload.h"
#include "enc_inline.h"

#include <string.h>
#include <sys/uio.h>

/* Write [tail, head) of t's ring as one EVENTS chunk; z: compressed (the
 * payload is compressed before the file lock is taken), else as it is.
 * t->clock held. */
static int flush_thr_locked(ps_thr_t *t, int z)
{
    uint64_t h = __atomic_load_n(&t->head, __ATOMIC_ACQUIRE);
    uint64_t nev = __atomic_load_n(&t->c.nev, __ATOMIC_RELAXED);
    uint64_t tl = t->tail;
    if (h == tl) return 0;
    uint8_t off[PST_VARINT_MAX];
    uint64_t size = t->rmask + 1, start = tl & t->rmask, len = h - tl;
    uint64_t seg1 = len < size - start ? len : size - start;
    struct iovec iov[4] = {
        { 0, 0 },
        { off, (size_t)(pst_put_varint(off, tl) - off) },
        { t->ring + start, (size_t)seg1 },
        { t->ring, (size_t)(len - seg1) },
    };
    int n = len > seg1 ? 4 : 3;
    int zh = ps_z_take(z);
    unsigned flags = 0;
    if (zh) {
        size_t raw = iov[1].iov_len + (size_t)len;
        size_t zl = ps_z_compress(iov + 1, n - 1, raw, &ps_g.z.eout, &ps_g.z.eout_cap);
        if (zl) {
            iov[1].iov_base = ps_g.z.eout;
            iov[1].iov_len = zl;
            n = 2;
            flags = PST_CHUNK_ZSTD;
        }
    }
    int rc = -1;
    if (ps_lock_c(&ps_g.wlock) == 0) {
        rc = ps_meta_flush_locked(zh);
        if (rc == 0) rc = ps_write_chunk_raw_locked(PST_CHUNK_EVENTS, flags, t->c.stream, iov, n);
        if (rc == 0) ps_g.ev_written += nev - t->nev_done;
        pthread_mutex_unlock(&ps_g.wlock);
    }
    ps_z_give(zh);
    if (rc == 0) {
        t->nev_done = nev;
        __atomic_store_n(&t->tail, h, __ATOMIC_RELEASE);
    }
    return rc;
}

void ps_flush_thr(ps_thr_t *t, int z)
{
    if (ps_lock_c(&t->clock) != 0) return;
    flush_thr_locked(t, z);
    pthread_mutex_unlock(&t->clock);
}

void ps_put_lost(ps_thr_t *t, uint64_t n, unsigned reason)
{
    uint8_t *p = t->ring + (t->head & t->rmask);
    t->inflight = 1;
    PS_SIGFENCE();
    uint64_t now = ps_g.tick;
    if (now > t->enc.last_ts) p = pst_put_ts(&t->enc, p, now);
    t->enc.since_ts++;
    __atomic_add_fetch(&ps_g.cnt->lost_reported, n, __ATOMIC_RELAXED);
    *p++ = PST_EV_LOST;
    p = pst_put_varint(p, n);
    p = pst_put_varint(p, reason);
    ps_rec_end(t, p);
}

/* The ring of t doubled: its unwritten bytes [tail, head) copied to their
 * places under the new mask, then the new ring swapped in. t->clock held
 * (the flusher reads the ring only under it). The copy is the cost a raw
 * write of the same bytes would have had, without the syscall, the CRC and
 * the uncompressed bytes in the file. 0: grown. */
static int ring_grow_locked(ps_thr_t *t)
{
    uint64_t size = t->rmask + 1, nsize = size * 2;
    if (nsize > PS_RING_MAX || ps_g.fatal || ps_g.stopping) return -1;
    uint8_t *nr = ps_sys_mmap(nsize + PS_RING_SLACK);
    if (!nr) return -1;
    uint8_t *old = t->ring;
    for (uint64_t x = t->tail, h = t->head; x < h;) {
        uint64_t so = x & (size - 1), sn = x & (nsize - 1), n = h - x;
        if (n > size - so) n = size - so;
        if (n > nsize - sn) n = nsize - sn;
        memcpy(nr + sn, old + so, n);
        x += n;
    }
    t->ring = nr;
    t->rmask = nsize - 1;
    ps_sys_munmap(old, size + PS_RING_SLACK);
    return 0;
}

/* Slow part of ps_rec_begin: the ring is half full, or a LOST record is due. */
/* The flusher drains a ring from PS_SOFT_FILL (compressed). While the
 * program has one thread, at 7/8 of its ring the thread doubles the ring
 * (up to PS_RING_MAX), so the flusher, once it runs again, still compresses
 * everything. Once it has a second thread (ps_g.multi), rings do not grow
 * and every ring is used as PS_RING_SIZE bytes, whatever its size: a
 * stream's chunk that comes late holds at most that much, as the reader's
 * merge of several streams wants (a version wait scans what the other
 * streams have queued: with 4 MiB late chunks of 8 threads, reading took
 * minutes instead of seconds). A ring that cannot grow the thread drains
 * itself at 7/8 (uncompressed: a hook never compresses). While the flusher
 * holds the ring (it is draining it) the thread goes on until the next
 * record would not fit, then waits for it and looks again: the flusher has
 * usually made room by then, so nothing is written raw. */
int ps_make_room(ps_thr_t *t)
{
    uint64_t tail = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
    uint64_t size = t->rmask + 1, use = ps_g.multi ? PS_RING_SIZE : size;
    if (t->head - tail >= PS_SELF_FILL(use)) {
        int hard = t->head - tail > use - PS_REC_MAX;
        if (ps_g.fatal) {
            ps_flush_thr(t, 0);
        } else if (hard ? ps_lock_c(&t->clock) == 0 : pthread_mutex_trylock(&t->clock) == 0) {
            if (t->head - t->tail >= PS_SELF_FILL(use) && (ps_g.multi || ring_grow_locked(t) != 0))
                flush_thr_locked(t, 0);
            pthread_mutex_unlock(&t->clock);
        }
        tail = __atomic_load_n(&t->tail, __ATOMIC_ACQUIRE);
        size = t->rmask + 1;
        use = ps_g.multi ? PS_RING_SIZE : size;
    }
    if (t->head - tail > size - PS_REC_MAX) {
        /* Cannot drain (the file does not take our writes): count it. */
        t->lost++;
        ps_add_lost(1);
        t->soft = t->head;
        return -1;
    }
    if (t->head - tail < PS_SELF_FILL(use)) {
        t->soft = tail + PS_SELF_FILL(use);
    } else {   /* the flusher holds the ring: look again in a few records, in time to wait for it */
        uint64_t lim = tail + (t->head - tail < use - PS_REC_MAX ? use : size) - PS_REC_MAX;
        t->soft = t->head + 1024 < lim ? t->head + 1024 : lim;
    }
    /* the hooks' fast paths write up to PS_FAST_MAX bytes without the wrap
     * copy: they stop at soft, which stays that far before the ring's end
     * (while head is closer than that, every event comes here) */
    uint64_t edge = (t->head | t->rmask) + 1 - PS_FAST_MAX;
    if (t->soft > edge) t->soft = t->head < edge ? edge : t->head;
    if (t->lost) {
        uint64_t n = t->lost;
        t->lost = 0;
        ps_put_lost(t, n, PST_LOST_WRITE);
    }
    return 0;
}

/* Events of other types than the hand-coded ones. */
int ps_emit_generic(ps_thr_t *t, const pst_event_t *ev)
{
    uint8_t *p = ps_rec_begin(t);
    if (!p) { t->inflight = 0; return 0; }   /* dropped (ps_call_begin may have set it) */
    /* the inline encoders leave enc.last_addr alone (enc_inline.h: the base
     * of a delta is the recent list's newest entry); the table encoder reads it */
    t->enc.last_addr = ps_enc_last(&t->enc);
    /* versions taken now (a free-like event is emitted before its call);
     * realloc-like calls take theirs around the call themselves */
    pst_event_t vev;
    uint64_t a[2];
    unsigned nv;
    if (ps_g.multi && !ev->n_ver && ev->type != PST_EV_REALLOC && ev->type != PST_EV_REALLOCARRAY &&
        ev->type != PST_EV_MREMAP && (nv = pst_ver_addrs(ev->type, ev->f, a))) {
        uint32_t x[2] = { 0, 0 }, need = 0;
        for (unsigned i = 0; i < nv; i++) need |= (x[i] = ps_vtake(t, a[i])) >> 16;
        if (need) {
            vev = *ev;
            vev.n_ver = nv;
            for (unsigned i = 0; i < nv; i++) vev.ver[i] = (uint16_t)x[i];
            ev = &vev;
        }
    }
    uint8_t *e = pst_encode_event(&t->enc, p, ev);
    if (!e) {   /* invalid event (the API checks first): keep a TS record written */
        if (p != t->ring + (t->head & t->rmask)) {
            ps_rec_end(t, p);
            __atomic_store_n(&t->c.nev, t->c.nev - 1, __ATOMIC_RELAXED);
        }
        t->inflight = 0;
        return 0;
    }
    ps_rec_end(t, e);
    return 1;
}
