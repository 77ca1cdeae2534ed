/* core.c — the interposer's engine: state, trace file, rings, flusher.
 *
 * Data path. Each thread encodes its events into its own ring (ps_thr_t,
 * 256 KiB, mapped with a raw mmap on the thread's first event) and publishes
 * the new head with a release store: no lock, no atomic RMW per event. A
 * consumer (the flusher thread every 50 ms, or the thread itself when its
 * ring is half full, at thread exit, exit, _exit and exec) takes the ring's
 * consumer lock, reads [tail, head) and writes it as one EVENTS chunk:
 * writev(header + stream offset, up to two ring segments). Every file write
 * holds the writer lock and first writes the pending META bytes, so a
 * definition always precedes its first use in the file.
 *
 * Nothing is lost silently: a write that fails is truncated away and its
 * bytes stay in the ring (the stream stays decodable); when a ring cannot
 * drain, new events are counted (not encoded) and a LOST record is written
 * into the stream as soon as there is room. Totals go into the END chunk.
 *
 * Compression (format 1.5). The flusher thread drains every ring that is
 * half full at each tick (100 us) and at each flush round, and writes its
 * chunks compressed with zstd (version-2 chunks, PST_CHUNK_ZSTD), META too;
 * a thread whose ring reaches 7/8 (the flusher has not kept up: on a loaded
 * machine it goes unscheduled for tens of milliseconds) doubles its ring,
 * up to PS_RING_MAX, while the program has one thread; a ring at that size,
 * or any ring of a program with several threads (ps_make_room says why), is
 * drained by the thread itself, uncompressed, so no hook ever compresses. A thread's exit leaves
 * its ring to the flusher. Fatal signals write uncompressed; exit and exec
 * compress what is left. Every frame stands alone: the crash and recovery
 * guarantees do not change.
 *
 * Lock order: tlock (thread list) < a ring's clock < z.lock (compressor) <
 * wlock (file) < table locks (stacks.c) < mlock (META buffer).
 */
#include "preload.h"
#include "enc_inline.h"
#include "columns.h"   /* EVENTS in column form before zstd (z_compress) */

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <link.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include <linux/membarrier.h>

#define ZSTD_STATIC_LINKING_ONLY   /* ZSTD_createCCtx_advanced: our own allocator */
#include <zstd.h>

__thread ps_tls_t ps_tls __attribute__((tls_model("initial-exec")));
ps_global_t ps_g = {
    .wlock = PTHREAD_MUTEX_INITIALIZER,
    .tlock = PTHREAD_MUTEX_INITIALIZER,
    .mlock = PTHREAD_MUTEX_INITIALIZER,
    .z = { .lock = PTHREAD_MUTEX_INITIALIZER },
    .child_lock = PTHREAD_MUTEX_INITIALIZER,
    .late_lock = PTHREAD_MUTEX_INITIALIZER,
    .stk = {
        .stab = { .lock = PTHREAD_MUTEX_INITIALIZER, .bits = 20 },
        .strtab = { .lock = PTHREAD_MUTEX_INITIALIZER, .bits = 16 },
        .modlock = PTHREAD_MUTEX_INITIALIZER,
        .seen_adds = ~0ull, .seen_subs = ~0ull,
    },
    .page_size = 4096,
    .fd = -1,
    .cnt = &ps_g.cnt_local,
    .ctl_fd = -1,
};

extern void *__libc_stack_end;
void ps_resolve_real(void);     /* hooks_alloc.c */
void ps_install_signal(void);   /* hooks_proc.c */

/* ---- small system helpers (no libc allocation, never our own hooks) ----- */

/* Every mapping the tracer makes for itself goes through these two, so
 * tracer_bytes is what the tracer adds to the process (reported in SYNC). */
void *ps_sys_mmap(size_t len)
{
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    __atomic_add_fetch(&ps_g.tracer_bytes, len, __ATOMIC_RELAXED);
    return p;
}

void ps_sys_munmap(void *p, size_t len)
{
    if (!p) return;
    syscall(SYS_munmap, p, len);
    __atomic_sub_fetch(&ps_g.tracer_bytes, len, __ATOMIC_RELAXED);
}

int ps_real_close(int fd) { return (int)syscall(SYS_close, fd); }

static pid_t ps_gettid(void) { return (pid_t)syscall(SYS_gettid); }

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t ps_now(void) { return mono_ns() - ps_g.start_mono; }

/* Moves the tick forward to the clock's time, never back (the flusher and
 * busy threads both advance it), then notes the cycle count read before
 * the clock as the tick's (ps_tick_stale); returns the tick after the
 * move (*clock: the clock's time, when asked for). tick_cyc may be stored out of order by two advancing threads: an
 * older count only makes events read the clock sooner. */
static uint64_t tick_advance(uint64_t *clock)
{
    uint64_t c = ps_cycles(), v = ps_now();
    if (clock) *clock = v;
    uint64_t cur = __atomic_load_n(&ps_g.tick, __ATOMIC_RELAXED);
    while (cur < v && !__atomic_compare_exchange_n(&ps_g.tick, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    __atomic_store_n(&ps_g.tick_cyc, c, __ATOMIC_RELEASE);
    return cur < v ? v : cur;
}

/* An event found the tick older than PS_TICK_STALE_NS (the flusher is not
 * being scheduled): its thread moves the shared tick to the clock's time
 * rather than stamping its own, so times stay causal: whatever another
 * thread does after this event (a free of what it allocated) reads a tick
 * at least as late. */
uint64_t ps_stale_tick(void)
{
    return tick_advance(NULL);
}

/* A thread about to start another (pthread_create): the tick moves to the
 * clock's time, so every event of the new thread is stamped after every
 * event its creator recorded before; events of threads that share no
 * address are ordered by time alone, and a stale tick would let the new
 * thread's first events tie with them. */
void ps_tick_now(void)
{
    tick_advance(NULL);
}

/* Cycles to ns at the rate measured since start (cyc0, mono0): rounded up,
 * as a resolution must not be understated. */
static uint64_t cyc_to_ns(uint64_t cyc)
{
    uint64_t dc = ps_cycles() - ps_g.cyc0, dn = mono_ns() - ps_g.mono0;
    if (!dc || !dn) return cyc;
    return (uint64_t)(((unsigned __int128)cyc * dn + dc - 1) / dc);
}

/* PS_TICK_STALE_NS in cycles at the measured rate. Before a rate is known
 * (the first millisecond) one cycle per ns: every counter here runs at
 * 1 GHz or faster, so that errs towards reading the clock sooner. */
static void calibrate(void)
{
    uint64_t dc = ps_cycles() - ps_g.cyc0, dn = mono_ns() - ps_g.mono0;
    ps_g.stale_cyc = dn < 1000000 ? PS_TICK_STALE_NS
                                  : (uint64_t)((unsigned __int128)PS_TICK_STALE_NS * dc / dn);
}

void ps_recompute_on(void)
{
    /* ps_real_ready: the hooks' fast paths call the real functions on `on` alone */
    ps_g.on = ps_real_ready && ps_g.active && !ps_g.paused && !ps_g.closed && !ps_g.child_pending && !ps_g.stopping;
    ps_g.fast = ps_g.on && ps_real.glibc;
    ps_g.fast_ns = ps_g.fast && ps_g.stacks == PST_STACKS_NONE;
    /* fast1 also says no block came from the bootstrap arena (dlsym's
     * allocations, none on today's glibc): free's fast path then skips in_boot */
    ps_g.fast1 = ps_g.fast_ns && !ps_g.multi && !ps_g.boot.used;
    /* against a pthread_create in another thread (multi = 1, fence,
     * fast1 = 0) between our read of multi and our store: one of the two
     * sees the other's store */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (ps_g.multi) ps_g.fast1 = 0;
}

static void add_lost(uint64_t n) { __atomic_add_fetch(&ps_g.cnt->lost_total, n, __ATOMIC_RELAXED); }

/* Locks on the closing paths. Normally a plain lock; while a fatal signal
 * closes the trace (ps_g.fatal), a try until the deadline: the signal may
 * have interrupted this very thread inside the tracer, holding the lock. */
static int lock_c(pthread_mutex_t *m)
{
    if (PS_LIKELY(!ps_g.fatal)) return pthread_mutex_lock(m);
    while (pthread_mutex_trylock(m) != 0) {
        if (mono_ns() > ps_g.fatal_deadline) return -1;
        struct timespec d = { 0, 100 * 1000 };
        nanosleep(&d, NULL);
    }
    return 0;
}

/* ---- writing the file ----------------------------------------------------- */

static int move_fd_high(int fd, int avoid_lo, int avoid_hi)
{
    struct rlimit rl;
    long base = 1000;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (long)rl.rlim_cur < 1100)
        base = (long)rl.rlim_cur - 24;
    if (base < 10) base = 10;
    if (base >= avoid_lo && base <= avoid_hi) base = (long)avoid_hi + 1;
    int nfd = fcntl(fd, F_DUPFD_CLOEXEC, (int)base);
    if (nfd < 0 && (avoid_lo > 0 || avoid_hi < 0))
        nfd = -1;
    if (nfd < 0) return fd;
    if (nfd >= avoid_lo && nfd <= avoid_hi) { ps_real_close(nfd); return fd; }
    ps_real_close(fd);
    return nfd;
}

/* Is the trace fd still our file? Re-open it by path if not. wlock held. */
static int check_fd_locked(void)
{
    struct stat st;
    if (ps_g.fd >= 0 && fstat(ps_g.fd, &st) == 0 && st.st_dev == ps_g.dev && st.st_ino == ps_g.ino)
        return 0;
    /* Closed under us (raw syscall) or the number now belongs to the
     * program: never touch that number again, open our file anew. */
    int fd = open(ps_g.path, O_WRONLY | O_APPEND | O_CLOEXEC);
    if (fd < 0) { ps_g.fd = -1; return -1; }
    if (fstat(fd, &st) != 0 || st.st_dev != ps_g.dev || st.st_ino != ps_g.ino) {
        ps_real_close(fd);
        ps_g.fd = -1;
        ps_g.write_broken = 1;
        return -1;
    }
    ps_g.fd = move_fd_high(fd, 0, -1);
    return 0;
}

/* May the file be written now? Checked before a chunk's CRC is computed,
 * so a file that refuses writes costs one comparison per flush. */
static int writable_locked(void)
{
    if (ps_g.write_broken || ps_g.closed) return 0;
    return !(ps_g.retry_after && ps_now() < ps_g.retry_after);
}

/* Write all of iov or nothing (a partial write is truncated away). A
 * failure is retried after 100 ms; the callers count what it cost. errno is
 * the program's: it is left as it was. */
static int write_all_locked(struct iovec *iov, int n, size_t total)
{
    if (!writable_locked()) return -1;
    int saved_errno = errno;
    if (check_fd_locked() != 0) {
        ps_g.retry_after = ps_now() + 100000000u;
        errno = saved_errno;
        return -1;
    }
    /* Never cross the program's RLIMIT_FSIZE: the kernel would send it
     * SIGXFSZ, which kills a program that did not ask for trace files. */
    struct rlimit fsz;
    if (getrlimit(RLIMIT_FSIZE, &fsz) == 0 && fsz.rlim_cur != RLIM_INFINITY &&
        ps_g.file_off + total > (uint64_t)fsz.rlim_cur) {
        ps_g.retry_after = ps_now() + 100000000u;
        errno = saved_errno;
        return -1;
    }
    size_t done = 0;
    while (done < total) {
        ssize_t w = writev(ps_g.fd, iov, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            goto fail;
        }
        if (w == 0) goto fail;
        done += (size_t)w;
        while (n > 0 && (size_t)w >= iov->iov_len) { w -= (ssize_t)iov->iov_len; iov++; n--; }
        if (n > 0) { iov->iov_base = (char *)iov->iov_base + w; iov->iov_len -= (size_t)w; }
    }
    ps_g.file_off += total;
    ps_g.retry_after = 0;
    errno = saved_errno;
    return 0;
fail:
    if (done && ftruncate(ps_g.fd, (off_t)ps_g.file_off) != 0) ps_g.write_broken = 1;
    ps_g.retry_after = ps_now() + 100000000u;
    errno = saved_errno;
    return -1;
}


/* One chunk: header + payload pieces iov[1..n-1] (iov[0] is filled here).
 * META and EVENTS chunks are version 2 (format 1.5: older readers stop
 * there), compressed or not (flags). */
static int write_chunk_raw_locked(uint8_t kind, unsigned flags, uint32_t stream, struct iovec *iov, int n)
{
    if (!writable_locked()) return -1;
    uint8_t hdr[PST_CHUNK_HDR];
    size_t len = 0;
    uint32_t crc = 0;
    for (int i = 1; i < n; i++) {
        len += iov[i].iov_len;
        crc = pst_crc32c(crc, iov[i].iov_base, iov[i].iov_len);
    }
    unsigned ver = kind == PST_CHUNK_META || kind == PST_CHUNK_EVENTS ? PST_CHUNK_V2 : PST_CHUNK_V1;
    pst_put_chunk_hdr_v(hdr, kind, ver, flags, stream, (uint32_t)len, crc);
    iov[0].iov_base = hdr;
    iov[0].iov_len = PST_CHUNK_HDR;
    return write_all_locked(iov, n, len + PST_CHUNK_HDR);
}

/* ---- compression (format 1.5) ------------------------------------------------ */

/* zstd's memory comes from raw mmap (tracer_bytes counts it), never from
 * the program's allocator: the program's heap stays what it would be
 * without us, and nothing zstd does can enter our hooks. */
static void *z_alloc(void *opaque, size_t size)
{
    (void)opaque;
    uint8_t *p = ps_sys_mmap(size + 16);
    if (!p) return NULL;
    *(size_t *)p = size + 16;
    return p + 16;
}

static void z_free(void *opaque, void *addr)
{
    (void)opaque;
    if (!addr) return;
    uint8_t *p = (uint8_t *)addr - 16;
    ps_sys_munmap(p, *(size_t *)p);
}

/* A buffer of at least n bytes at *b (raw mmap, kept for later chunks). */
static int z_room(uint8_t **b, size_t *cap, size_t n)
{
    if (*cap >= n) return 0;
    size_t c = *cap ? *cap : (512u << 10);
    while (c < n) c *= 2;
    uint8_t *nb = ps_sys_mmap(c);
    if (!nb) return -1;
    ps_sys_munmap(*b, *cap);
    *b = nb;
    *cap = c;
    return 0;
}

#define PS_Z_LEVEL 3      /* zstd level: ~ 15x on dwarf stacks, the flusher keeps up with >100 MB/s */
#define PS_Z_MIN   256    /* payloads below this are written as they are */

/* The pieces iov[0..n) (len bytes together) as a compressed payload into
 * *out (varint raw_len, one zstd frame): its length, or 0 when that fails
 * or saves nothing (then the chunk goes uncompressed). z.lock held. */
static size_t z_compress(const struct iovec *iov, int n, size_t len, uint8_t **out, size_t *cap)
{
    ps_z_t *z = &ps_g.z;
    if (z->broken || len < PS_Z_MIN || len > PST_MAX_CHUNK) return 0;
    if (!z->cctx) {
        ZSTD_customMem mem = { z_alloc, z_free, NULL };
        if (!(z->cctx = ZSTD_createCCtx_advanced(mem)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_compressionLevel, PS_Z_LEVEL)) ||
            ZSTD_isError(ZSTD_CCtx_setParameter(z->cctx, ZSTD_c_checksumFlag, 1))) {   /* FORMAT.md */
            z->broken = 1;
            return 0;
        }
    }
    /* EVENTS (the only chunks compressed into eout) go in column form
     * (columns.c): the pieces gathered, then split, in buffers of our own
     * kept for later chunks (z.lock held); plain when that fails */
    struct iovec col[2];
    size_t slen = len;
    int split = 0;
    if (out == &z->eout) {
        static uint8_t *gather, *cols, *tmp;
        static size_t gather_cap, cols_cap, tmp_cap;
        if (z_room(&gather, &gather_cap, len) == 0 && z_room(&cols, &cols_cap, PST_COLS_BOUND(len)) == 0 &&
            z_room(&tmp, &tmp_cap, PST_COLS_TMP(len)) == 0) {
            size_t at = 0;
            for (int i = 0; i < n; i++) {
                memcpy(gather + at, iov[i].iov_base, iov[i].iov_len);
                at += iov[i].iov_len;
            }
            size_t cut, cl = pst_cols_split(gather, len, cols, cols_cap, tmp, tmp_cap, &cut);
            if (cl) {   /* two pieces: a new block at the stack column */
                col[0] = (struct iovec){ cols, cut };
                col[1] = (struct iovec){ cols + cut, cl - cut };
                iov = col;
                n = 2;
                slen = cl;
                split = 1;
            }
        }
    }
    size_t bound = PST_VARINT_MAX + ZSTD_compressBound(slen);
    if (z_room(out, cap, bound) != 0) return 0;
    ZSTD_CCtx *cc = z->cctx;
    ZSTD_CCtx_reset(cc, ZSTD_reset_session_only);
    if (ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(cc, slen))) return 0;
    uint8_t *o = pst_put_varint(*out, slen);
    ZSTD_outBuffer ob = { o, bound - (size_t)(o - *out), 0 };
    for (int i = 0; i < n; i++) {
        ZSTD_inBuffer ib = { iov[i].iov_base, iov[i].iov_len, 0 };
        ZSTD_EndDirective d = i == n - 1 ? ZSTD_e_end : split ? ZSTD_e_flush : ZSTD_e_continue;
        for (;;) {
            size_t r = ZSTD_compressStream2(cc, &ob, &ib, d);
            if (ZSTD_isError(r)) { ZSTD_CCtx_reset(cc, ZSTD_reset_session_only); return 0; }
            if (d == ZSTD_e_continue ? ib.pos == ib.size : r == 0) break;
            if (ob.pos == ob.size) { ZSTD_CCtx_reset(cc, ZSTD_reset_session_only); return 0; }
        }
    }
    size_t total = (size_t)(o - *out) + ob.pos;
    /* a large chunk takes milliseconds: the tick must not stand still meanwhile
     * (moving it forward is what busy threads do too) */
    tick_advance(NULL);
    return total < len ? total : 0;
}

/* Take the compressor for a chunk write: 1 taken (z.lock held), 0 write
 * uncompressed. Never while a fatal signal closes the trace. */
static int z_take(int want)
{
    if (!want || ps_g.fatal || ps_g.z.broken) return 0;
    return pthread_mutex_lock(&ps_g.z.lock) == 0;
}

static void z_give(int held)
{
    if (held) pthread_mutex_unlock(&ps_g.z.lock);
}

/* Write pending META bytes as one chunk. wlock held; z: z.lock held too,
 * the bytes go compressed (copied out under mlock, so threads defining new
 * stacks wait only for the copy, and consumed once written). */
static int meta_flush_locked(int z)
{
    int rc = 0;
    if (z && ps_g.meta_len >= PS_Z_MIN) {
        if (lock_c(&ps_g.mlock) != 0) return -1;
        size_t n = ps_g.meta_len;
        if (z_room(&ps_g.z.min, &ps_g.z.min_cap, n) != 0) {
            pthread_mutex_unlock(&ps_g.mlock);
            goto plain;
        }
        memcpy(ps_g.z.min, ps_g.meta, n);
        pthread_mutex_unlock(&ps_g.mlock);
        struct iovec src = { ps_g.z.min, n };
        size_t zl = z_compress(&src, 1, n, &ps_g.z.mout, &ps_g.z.mout_cap);
        struct iovec iov[2] = { { 0, 0 }, { zl ? ps_g.z.mout : ps_g.z.min, zl ? zl : n } };
        rc = write_chunk_raw_locked(PST_CHUNK_META, zl ? PST_CHUNK_ZSTD : 0, 0, iov, 2);
        if (rc == 0) {
            if (lock_c(&ps_g.mlock) != 0) return -1;   /* fatal only: then nothing follows anyway */
            memmove(ps_g.meta, ps_g.meta + n, ps_g.meta_len - n);
            ps_g.meta_len -= n;
            pthread_mutex_unlock(&ps_g.mlock);
        }
        return rc;
    }
plain:
    if (lock_c(&ps_g.mlock) != 0) return -1;
    if (ps_g.meta_len) {
        struct iovec iov[2] = { { 0, 0 }, { ps_g.meta, ps_g.meta_len } };
        rc = write_chunk_raw_locked(PST_CHUNK_META, 0, 0, iov, 2);
        if (rc == 0) ps_g.meta_len = 0;
    }
    pthread_mutex_unlock(&ps_g.mlock);
    return rc;
}

static int write_chunk_locked(uint8_t kind, uint32_t stream, struct iovec *iov, int n)
{
    if (meta_flush_locked(0) != 0) return -1;
    return write_chunk_raw_locked(kind, 0, stream, iov, n);
}

void ps_meta_lock(void) { pthread_mutex_lock(&ps_g.mlock); }
void ps_meta_unlock(void) { pthread_mutex_unlock(&ps_g.mlock); }

void ps_meta_append(const void *p, size_t n)
{
    if (ps_g.meta_len + n > ps_g.meta_cap) {
        size_t cap = ps_g.meta_cap ? ps_g.meta_cap * 2 : (256u << 10);
        while (cap < ps_g.meta_len + n) cap *= 2;
        uint8_t *m = ps_sys_mmap(cap);
        if (!m) return;   /* definitions cannot be lost silently: see below */
        if (ps_g.meta_len) memcpy(m, ps_g.meta, ps_g.meta_len);
        ps_sys_munmap(ps_g.meta, ps_g.meta_cap);
        ps_g.meta = m;
        ps_g.meta_cap = cap;
    }
    memcpy(ps_g.meta + ps_g.meta_len, p, n);
    ps_g.meta_len += n;
}

uint64_t ps_file_off_locked(void) { return ps_g.file_off; }

void ps_truncate_locked(uint64_t off)
{
    if (ps_g.fd >= 0 && ftruncate(ps_g.fd, (off_t)off) == 0) ps_g.file_off = off;
}

int ps_write_end_locked(void)
{
    uint8_t buf[4 * PST_VARINT_MAX];
    /* END's lost count: what no LOST record in a stream reports (readers
     * add both). */
    uint64_t lost = __atomic_load_n(&ps_g.cnt->lost_total, __ATOMIC_RELAXED);
    uint64_t rep = __atomic_load_n(&ps_g.cnt->lost_reported, __ATOMIC_RELAXED);
    uint8_t *p = pst_put_end(buf, ps_g.ev_written, lost > rep ? lost - rep : 0,
                             __atomic_load_n(&ps_g.next_stream, __ATOMIC_RELAXED));
    /* the flags varint only when there is one: an END without it reads as
     * 0, as before */
    if (ps_g.stopped) p = pst_put_varint(p, PST_END_STOPPED);
    struct iovec iov[2] = { { 0, 0 }, { buf, (size_t)(p - buf) } };
    return write_chunk_locked(PST_CHUNK_END, 0, iov, 2);
}

/* ---- rings ----------------------------------------------------------------- */

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
    int zh = z_take(z);
    unsigned flags = 0;
    if (zh) {
        size_t raw = iov[1].iov_len + (size_t)len;
        size_t zl = z_compress(iov + 1, n - 1, raw, &ps_g.z.eout, &ps_g.z.eout_cap);
        if (zl) {
            iov[1].iov_base = ps_g.z.eout;
            iov[1].iov_len = zl;
            n = 2;
            flags = PST_CHUNK_ZSTD;
        }
    }
    int rc = -1;
    if (lock_c(&ps_g.wlock) == 0) {
        rc = meta_flush_locked(zh);
        if (rc == 0) rc = write_chunk_raw_locked(PST_CHUNK_EVENTS, flags, t->c.stream, iov, n);
        if (rc == 0) ps_g.ev_written += nev - t->nev_done;
        pthread_mutex_unlock(&ps_g.wlock);
    }
    z_give(zh);
    if (rc == 0) {
        t->nev_done = nev;
        __atomic_store_n(&t->tail, h, __ATOMIC_RELEASE);
    }
    return rc;
}

void ps_flush_thr(ps_thr_t *t, int z)
{
    if (lock_c(&t->clock) != 0) return;
    flush_thr_locked(t, z);
    pthread_mutex_unlock(&t->clock);
}

static void put_lost(ps_thr_t *t, uint64_t n, unsigned reason)
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
        } else if (hard ? lock_c(&t->clock) == 0 : pthread_mutex_trylock(&t->clock) == 0) {
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
        add_lost(1);
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
        put_lost(t, n, PST_LOST_WRITE);
    }
    return 0;
}

static void thr_start_stream(ps_thr_t *t, uint32_t parent)
{
    t->c.stream = __atomic_add_fetch(&ps_g.next_stream, 1, __ATOMIC_RELAXED);
    t->vtag = (uint16_t)t->c.stream ? (uint16_t)t->c.stream : 0xffff;
    t->tid = ps_gettid();
    pst_event_t ev = { .type = PST_EV_THREAD_START, .f = { (uint64_t)t->tid, parent } };
    ps_emit_generic(t, &ev);
    if (ps_tls.nobuf) {
        add_lost(0);
        put_lost(t, ps_tls.nobuf, PST_LOST_NOBUF);
        ps_tls.nobuf = 0;
    }
}

/* Bounds for the fp walk. A walk reads only inside [sp, hi) and only when
 * the stack pointer lies in [lo, hi): then every byte read is on the
 * thread's own, mapped stack, whatever garbage a frame-pointer-less frame
 * left in rbp. On another stack (sigaltstack, coroutines) we record no
 * frames rather than guess. */
static void stack_bounds(ps_thr_t *t, pid_t tid)
{
    if (tid == ps_g.pid) {
        struct rlimit rl;
        uintptr_t max = 8u << 20;
        if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < max)
            max = rl.rlim_cur;
        t->stk_hi = ps_g.main_stk_hi;
        t->stk_lo = t->stk_hi > max ? t->stk_hi - max : 0;
        return;
    }
    /* pthread_getattr_np may allocate (the cpuset): we are inside the
     * reentrancy guard, so those calls are the tracer's own and pass
     * through unrecorded, paired. Once per thread, in fp and dwarf modes. */
    pthread_attr_t a;
    void *addr; size_t size;
    if (pthread_getattr_np(pthread_self(), &a) == 0) {
        if (pthread_attr_getstack(&a, &addr, &size) == 0) {
            t->stk_lo = (uintptr_t)addr;
            t->stk_hi = (uintptr_t)addr + size;
        }
        pthread_attr_destroy(&a);
    }
}

/* ---- the counters file (ctl.h) ------------------------------------------- */

#define REC_BYTES ((sizeof(ps_thr_t) + 4095) & ~(size_t)4095)

static void *map_shared(int fd, size_t len, uint64_t off)
{
    void *p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)off);
    if (p == MAP_FAILED) return NULL;
    __atomic_add_fetch(&ps_g.tracer_bytes, len, __ATOMIC_RELAXED);
    return p;
}

/* Is ctl_fd still the counters file? (The program may have closed or
 * reused the number.) Re-open by path if not; -1: no file any more. */
static int ctl_fd_ok(void)
{
    struct stat st;
    if (ps_g.ctl_fd >= 0 && fstat(ps_g.ctl_fd, &st) == 0 && st.st_dev == ps_g.ctl_dev && st.st_ino == ps_g.ctl_ino)
        return 0;
    ps_g.ctl_fd = -1;
    if (!ps_g.ctl_path[0]) return -1;
    int fd = open(ps_g.ctl_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || st.st_dev != ps_g.ctl_dev || st.st_ino != ps_g.ctl_ino) { ps_real_close(fd); return -1; }
    ps_g.ctl_fd = move_fd_high(fd, 0, -1);
    return 0;
}

/* POOLSCOPE_CTL_DIR (ctl.h) when it is a directory of this user that no
 * one else may enter or write: record's mkdtemp directory. */
static void ctl_dir_take(const char *dir)
{
    struct stat st;
    ps_g.ctl_dir[0] = 0;
    if (!dir || strlen(dir) >= sizeof ps_g.ctl_dir || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid() || (st.st_mode & 077))
        return;
    strcpy(ps_g.ctl_dir, dir);
}

/* Has `record` stopped the run's recording (ctl.h, PST_CTL_STOP)? */
static int run_stopped(void)
{
    char p[sizeof ps_g.ctl_dir + 8];
    struct stat st;
    if (!ps_g.ctl_dir[0]) return 0;
    strcpy(p, ps_g.ctl_dir);
    strcat(p, "/" PST_CTL_STOP);
    return lstat(p, &st) == 0;
}

/* After the trace file is open: create its counters file and move the
 * counters there. Without a counters directory (ctl.h) the counters stay
 * in memory and a SIGKILL leaves the trace without END. */
static void ctl_open(void)
{
    pst_ctl_hdr_t local = *ps_g.cnt;
    ps_g.cnt = &ps_g.cnt_local;
    ps_g.ctl_fd = -1;
    ps_g.ctl_path[0] = 0;
    if (!ps_g.ctl_dir[0] ||
        pst_ctl_path(ps_g.ctl_path, sizeof ps_g.ctl_path, ps_g.ctl_dir, (uint64_t)ps_g.dev, (uint64_t)ps_g.ino) != 0) {
        ps_g.ctl_path[0] = 0;
        return;
    }
    unlink(ps_g.ctl_path);   /* a stale file of a dead inode number of this run: ours now */
    int fd = open(ps_g.ctl_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    struct stat st;
    pst_ctl_hdr_t *h = NULL;
    if (fd >= 0 && fstat(fd, &st) == 0 && ftruncate(fd, PST_CTL_HDR) == 0) {
        fd = move_fd_high(fd, 0, -1);
        h = map_shared(fd, PST_CTL_HDR, 0);
    }
    if (!h) {
        if (fd >= 0) { ps_real_close(fd); unlink(ps_g.ctl_path); }
        ps_g.ctl_path[0] = 0;
        return;
    }
    ps_g.ctl_dev = st.st_dev;
    ps_g.ctl_ino = st.st_ino;
    local.slot_bytes = (uint32_t)REC_BYTES;
    local.n_slots = 0;
    local.pid = (uint64_t)ps_g.pid;
    local.end_written = 0;
    *h = local;
    memcpy(h->magic, PST_CTL_MAGIC, 8);
    ps_g.ctl_fd = fd;
    ps_g.cnt = h;
}

/* END is in the trace: the counters file has served its purpose. */
static void ctl_done(void)
{
    ps_g.cnt->end_written = 1;
    if (ps_g.ctl_path[0]) unlink(ps_g.ctl_path);
    ps_g.ctl_path[0] = 0;
}

/* A thread record: a retired one, else a new slot of the counters file,
 * else anonymous memory; its ring is always anonymous. tlock held. */
static ps_thr_t *rec_alloc(void)
{
    ps_thr_t *t = ps_g.thr_free;
    if (t) {
        ps_g.thr_free = t->next;
        uint8_t *ring = t->ring;
        uint64_t rmask = t->rmask;   /* a ring that grew keeps its size */
        size_t len = t->map_len;
        int in_ctl = t->in_ctl;
        memset(t, 0, sizeof *t);
        t->ring = ring;
        t->rmask = rmask;
        t->map_len = len;
        t->in_ctl = in_ctl;
        pst_enc_init(&t->enc, PST_CODING_RECENT, t->enc_index);
        return t;
    }
    uint8_t *ring = ps_sys_mmap(PS_RING_SIZE + PS_RING_SLACK);
    if (!ring) return NULL;
    if (ps_g.cnt != &ps_g.cnt_local && ctl_fd_ok() == 0) {
        uint64_t off = PST_CTL_HDR + (uint64_t)ps_g.cnt->n_slots * REC_BYTES;
        if (ftruncate(ps_g.ctl_fd, (off_t)(off + REC_BYTES)) == 0 && (t = map_shared(ps_g.ctl_fd, REC_BYTES, off))) {
            t->in_ctl = 1;
            __atomic_store_n(&ps_g.cnt->n_slots, ps_g.cnt->n_slots + 1, __ATOMIC_RELEASE);
        }
    }
    if (!t && !(t = ps_sys_mmap(REC_BYTES))) { ps_sys_munmap(ring, PS_RING_SIZE + PS_RING_SLACK); return NULL; }
    t->ring = ring;
    t->rmask = PS_RING_SIZE - 1;
    t->map_len = REC_BYTES;
    pst_enc_init(&t->enc, PST_CODING_RECENT, t->enc_index);   /* format 1.5: recent addresses */
    return t;
}

static ps_thr_t *thr_register(void)
{
    pthread_mutex_lock(&ps_g.tlock);
    ps_thr_t *t = rec_alloc();
    pthread_mutex_unlock(&ps_g.tlock);
    if (!t) return NULL;
    t->soft = PS_SELF_FILL(t->rmask + 1);
    pthread_mutex_init(&t->clock, NULL);
    pid_t tid = ps_gettid();
    if (ps_g.stacks != PST_STACKS_NONE) stack_bounds(t, tid);   /* fp and dwarf walks stay inside */
    /* Id, list entry and THREAD_START under tlock: a final flush (which
     * holds tlock) sees every counted stream with its first event. */
    pthread_mutex_lock(&ps_g.tlock);
    t->next = ps_g.threads;
    __atomic_store_n(&ps_g.threads, t, __ATOMIC_RELEASE);
    ps_tls.thr = t;
    thr_start_stream(t, ps_tls.parent_stream);
    pthread_mutex_unlock(&ps_g.tlock);
    if (ps_g.key_ok) pthread_setspecific(ps_g.key, t);
    return t;
}

/* Thread exit (pthread key destructor): THREAD_END, then the ring goes to
 * the flusher, which writes it (compressed) at its next round and then
 * retires the record. Later calls of this thread go to the exit stream. */
void ps_thread_exit(ps_thr_t *t)
{
    if (!t || t == PS_THR_DEAD || ps_tls.thr != t) return;
    ps_tls.busy += PS_BUSY_OWN;
    PS_SIGFENCE();
    if (!ps_g.closed) {
        pst_event_t ev = { .type = PST_EV_THREAD_END };
        ps_emit_generic(t, &ev);
    }
    ps_tls.thr = PS_THR_DEAD;
    __atomic_store_n(&t->dead, 1, __ATOMIC_RELEASE);
    PS_SIGFENCE();
    ps_tls.busy -= PS_BUSY_OWN;
}

static void key_dtor(void *v) { ps_thread_exit(v); }

/* The exit stream. glibc frees what a thread's dynamic TLS holds (its DTV,
 * the TLS blocks of modules loaded with dlopen), and runs the destructors
 * of pthread keys made after ours, only after our key's destructor has
 * written the thread's THREAD_END and handed its ring to the flusher. Those
 * calls go to one record shared by all exiting threads, under a lock (a
 * thread's end is no hot path), so they are not lost; their order with
 * other threads' events comes from versions like any stream's. The stream
 * is named PST_EXIT_STREAM_NAME. Called with the guard taken; returns the
 * record with late_lock held (ps_late_leave lets go), or NULL. */
static ps_thr_t *late_enter(void)
{
    if (lock_c(&ps_g.late_lock) != 0) return NULL;
    ps_thr_t *t = ps_g.late;
    if (!t) {
        pthread_mutex_lock(&ps_g.tlock);
        t = rec_alloc();
        if (t) {
            t->soft = PS_SELF_FILL(t->rmask + 1);   /* no stack bounds: fp walks record nothing */
            pthread_mutex_init(&t->clock, NULL);
            t->next = ps_g.threads;
            __atomic_store_n(&ps_g.threads, t, __ATOMIC_RELEASE);
            thr_start_stream(t, 0);
        }
        pthread_mutex_unlock(&ps_g.tlock);
        if (!t) { pthread_mutex_unlock(&ps_g.late_lock); return NULL; }
        pst_event_t ev = { .type = PST_EV_THREAD_NAME, .f = { ps_string_id(PST_EXIT_STREAM_NAME) } };
        ps_emit_generic(t, &ev);
        ps_g.late = t;
    }
    ps_tls.late = 1;
    return t;
}

/* Called by a hook when the fast check failed. Returns the thread's record
 * with the guard taken, or NULL: pass the call through. */
static void ps_init(void);
static ps_thr_t *enter_slow(void);

/* errno is the program's: registering a thread, opening a fork child's file
 * or the first initialization must not change what the call left there. */
ps_thr_t *ps_enter_slow(void)
{
    int saved_errno = errno;
    ps_thr_t *t = enter_slow();
    errno = saved_errno;
    return t;
}

/* A hook that finds the guard taken by a hook of its own thread (busy
 * exactly 1: no PS_BUSY_OWN part, so not the tracer's own call) runs in a
 * signal handler that interrupted that hook: with glibc's allocator a hook
 * calls nothing interposable while it holds the guard (the mmap family
 * lets it go across the system call). The interrupted hook may be halfway
 * through a record in the thread's ring, so this call cannot be recorded:
 * it is counted, and END says so. (With another allocator a nested call is
 * usually that allocator's own mmap, not a program's call: not counted.) */
static void nested_lost(void)
{
    if (ps_tls.busy == 1 && ps_g.on && ps_real.glibc) add_lost(1);
}

static ps_thr_t *enter_slow(void)
{
    if (ps_tls.busy) { nested_lost(); return NULL; }
    if (PS_UNLIKELY(!ps_g.inited)) {
        /* A hook ran before our constructor: another preloaded library's
         * constructor (libstdc++'s emergency pool is the usual one) or the
         * loader. Initialize now so that call is recorded like any other;
         * only a second thread racing the first initialization is counted
         * as lost. */
        ps_init();
        if (!ps_g.inited) {
            __atomic_add_fetch(&ps_g.boot_lost, 1, __ATOMIC_RELAXED);
            return NULL;
        }
        if (!ps_g.on) return NULL;
    }
    if (ps_g.child_pending) ps_ensure_child();
    if (ps_g.closing && !ps_g.paused) {   /* an exec or the exit flush is closing the file */
        __atomic_add_fetch(&ps_g.cnt->closing_lost, 1, __ATOMIC_RELAXED);
        return NULL;
    }
    if (!ps_g.on) return NULL;
    ps_thr_t *t = ps_tls.thr;
    if (PS_LIKELY((uintptr_t)t > 1)) {
        ps_tls.busy = 1;
        PS_SIGFENCE();
        return t;
    }
    /* Registering calls functions that may allocate (pthread_getattr_np,
     * pthread_setspecific): the tracer's own calls, passed through. */
    ps_tls.busy = 1 + PS_BUSY_OWN;
    PS_SIGFENCE();
    if (t == PS_THR_DEAD) {   /* after the thread's THREAD_END */
        if (!(t = late_enter())) add_lost(1);
    } else if (!(t = thr_register())) {
        ps_tls.nobuf++;
        add_lost(1);
    }
    PS_SIGFENCE();
    ps_tls.busy = t ? 1 : 0;
    return t;
}

/* While tracing is paused, frees (free, realloc's old block, munmap) are
 * still recorded, so memory allocated while recording and released while
 * paused is not reported as leaked; the matching allocations of memory
 * allocated while paused are absent, and their frees are the trace's only
 * "unknown frees" (FORMAT.md). Called by those hooks when ps_enter said no. */
ps_thr_t *ps_enter_paused(void)
{
    if (!ps_g.paused || !ps_g.active || ps_g.closed || ps_g.stopping || ps_g.child_pending ||
        ps_g.closing || ps_tls.busy)
        return NULL;
    ps_thr_t *t = ps_tls.thr;
    if (t == PS_THR_DEAD) return NULL;
    ps_tls.busy = 1;
    PS_SIGFENCE();
    if (!t) {
        int saved_errno = errno;
        ps_tls.busy = 1 + PS_BUSY_OWN;   /* as enter_slow */
        t = thr_register();
        errno = saved_errno;
        PS_SIGFENCE();
        ps_tls.busy = t ? 1 : 0;
    }
    return t;
}

void ps_leave(void)
{
    ps_leave_inline();
}

void ps_late_leave(void)
{
    ps_tls.late = 0;
    PS_SIGFENCE();
    ps_tls.busy = 0;
    pthread_mutex_unlock(&ps_g.late_lock);
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

/* ---- flushing everything ---------------------------------------------------- */

/* At the end of an image, after the last flush: what the rings still hold
 * was not written (disk full, a file size limit, a thread that published
 * after the flush) and is counted as lost, so END says so; END itself gets
 * one more try past the retry pause. At exit (drop) the bytes go; before an
 * exec they stay, since a failed exec goes on with the same streams: the
 * count is returned so ps_exec_failed can take it back. tlock held. */
static uint64_t end_of_image_locked(int drop)
{
    uint64_t n = 0;
    for (ps_thr_t *t = ps_g.threads; t; t = t->next) {
        uint64_t head = __atomic_load_n(&t->head, __ATOMIC_ACQUIRE);
        uint64_t nev = __atomic_load_n(&t->c.nev, __ATOMIC_RELAXED);
        if (t->tail != head && nev > t->nev_done) {
            n += nev - t->nev_done;
            if (drop) {
                t->nev_done = nev;
                __atomic_store_n(&t->tail, head, __ATOMIC_RELEASE);
            }
        }
    }
    add_lost(n);
    ps_g.retry_after = 0;
    return n;
}

void ps_flush_all(int z)
{
    ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE);
    for (; t; t = t->next) ps_flush_thr(t, z);
    int zh = z_take(z);
    if (lock_c(&ps_g.wlock) == 0) {
        meta_flush_locked(zh);
        pthread_mutex_unlock(&ps_g.wlock);
    }
    z_give(zh);
}

/* Stop recording and give hooks already running in other threads a moment
 * to publish their event, so END counts exactly what the streams hold. */
static void ps_quiesce(void)
{
    ps_g.closing = 1;   /* from now on other threads' calls are counted */
    ps_g.stopping = 1;
    ps_recompute_on();
    int others = 0;
    /* Under tlock: the flusher unmaps dead threads' records (retire_dead). */
    if (lock_c(&ps_g.tlock) != 0) return;
    for (ps_thr_t *t = ps_g.threads; t; t = t->next)
        if (t != ps_tls.thr && !t->dead && !t->is_flusher) others = 1;
    pthread_mutex_unlock(&ps_g.tlock);
    if (others) {
        struct timespec d = { 0, 1000 * 1000 };
        nanosleep(&d, NULL);
    }
}

/* A toggle signal's marker, stamped with the signal's time (never before
 * the stream's previous time), into t's stream. The next event of t reads
 * the clock again. Caller holds tlock or is the last thread. */
void ps_emit_toggle(ps_thr_t *t)
{
    if (!t || (uintptr_t)t <= 1 || !ps_g.toggle_req) return;
    ps_g.toggle_req = 0;
    uint8_t *p = ps_rec_begin(t);
    if (!p) return;
    uint64_t ts = ps_g.toggle_ts > t->enc.last_ts ? ps_g.toggle_ts : t->enc.last_ts;
    p = pst_put_ts(&t->enc, p, ts);
    pst_event_t ev = { .type = ps_g.paused ? PST_EV_TRACE_OFF : PST_EV_TRACE_ON };
    t->enc.last_addr = ps_enc_last(&t->enc);   /* as ps_emit_generic (no A field here, though) */
    p = pst_encode_event(&t->enc, p, &ev);
    ps_rec_end(t, p);
}

static void write_sync_locked(uint64_t mark);

void ps_final(void)
{
    if (ps_g.child_pending) ps_ensure_child();
    if (!ps_g.active || ps_g.closed) return;
    ps_tls.busy += PS_BUSY_OWN;
    PS_SIGFENCE();
    ps_quiesce();
    int have_tlock = lock_c(&ps_g.tlock) == 0;   /* fails only from a signal */
    ps_emit_toggle(ps_tls.thr);   /* a toggle the flusher had no tick for */
    ps_g.retry_after = 0;              /* the last flush tries even a refused file */
    ps_flush_all(1);                   /* compressed, but from a fatal signal (z_take) */
    end_of_image_locked(1);
    add_lost(__atomic_exchange_n(&ps_g.cnt->closing_lost, 0, __ATOMIC_RELAXED));
    if (lock_c(&ps_g.wlock) == 0) {
        if (!ps_g.closed) {
            write_sync_locked(ps_now());   /* everything is out: nothing earlier can follow */
            ps_write_end_locked();
            ps_g.closed = 1;
            ps_recompute_on();
        }
        pthread_mutex_unlock(&ps_g.wlock);
    }
    ctl_done();   /* the process is ending on its own: nothing for a SIGKILL recovery to do */
    if (have_tlock) pthread_mutex_unlock(&ps_g.tlock);
    PS_SIGFENCE();
    ps_tls.busy -= PS_BUSY_OWN;
}

/* A fatal signal's handler (hooks_signal.c): ps_final with every lock
 * tried for at most 200 ms in all. Runs at most once. */
void ps_final_from_signal(void)
{
    if (__atomic_exchange_n(&ps_g.fatal, 1, __ATOMIC_ACQ_REL)) return;
    ps_g.fatal_deadline = mono_ns() + 200 * 1000 * 1000;
    ps_final();
}

/* ---- the flusher thread --------------------------------------------------- */

static void sample_rss(ps_thr_t *t)
{
    char buf[128];
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    ps_real_close(fd);
    if (n <= 0) return;
    buf[n] = 0;
    unsigned long long size, res, shared;
    char *q = buf;
    size = strtoull(q, &q, 10);
    res = strtoull(q, &q, 10);
    shared = strtoull(q, &q, 10);
    (void)size;
    pst_event_t ev = { .type = PST_EV_RSS, .f = { res * (uint64_t)ps_g.page_size,
        (res > shared ? res - shared : 0) * (uint64_t)ps_g.page_size, shared * (uint64_t)ps_g.page_size } };
    ps_emit_generic(t, &ev);
}

static void retire_dead(void)
{
    pthread_mutex_lock(&ps_g.tlock);
    ps_thr_t **pp = &ps_g.threads;
    while (*pp) {
        ps_thr_t *t = *pp;
        if (__atomic_load_n(&t->dead, __ATOMIC_ACQUIRE) && t->tail == t->head) {
            *pp = t->next;
            if (t->age_max > ps_g.age_dead) ps_g.age_dead = t->age_max;
            t->c.stream = 0;           /* a free slot: everything it published is in the file */
            t->next = ps_g.thr_free;
            ps_g.thr_free = t;
        } else {
            pp = &t->next;
        }
    }
    pthread_mutex_unlock(&ps_g.tlock);
}

/* record --duration / --until-signal asked this image to stop (ctl.h):
 * the counters file's stop_req, read at each tick. */
static int stop_asked(void)
{
    return ps_g.cnt != &ps_g.cnt_local && __atomic_load_n(&ps_g.cnt->stop_req, __ATOMIC_ACQUIRE) != 0;
}

/* Stop = pause for good, then the exit's final flush (ps_final), from the
 * tracer's thread while the program runs on. Paused first, so calls of
 * other threads from now on are neither recorded nor counted as lost (they
 * are after the window, not missing from it); then closing stops the
 * frees a pause still records (ps_enter_paused), and ps_final writes every
 * ring, a last SYNC and END (PST_END_STOPPED) and removes the counters
 * file. Every hook passes its call through from then on (closed). */
static void stop_recording(void)
{
    ps_g.stopped = 1;
    ps_g.paused = 1;
    ps_recompute_on();
    ps_g.closing = 1;
    /* an attach window: the program's own slots back before END
     * (attach.c). After closing, so that the frees made while the slots
     * are walked (a python3 process makes 75 in that time) are not
     * recorded without the allocations that replace them */
    if (ps_g.attach) ps_att_restore();
    ps_final();
    /* END is written and closed set: every hook now passes its call
     * through. Without closing and paused they do so on ps_enter's first
     * test (preload.h), as in an image that is not traced; with them every
     * call took the slow entry (tests/progs/churn 20000000 stopped after
     * 0.1 s: 0.84 s, where it runs in 0.18 s plain; now 60000000 take
     * 2.0 s, 1.8 s preloaded untraced, 1.1 s plain: what is left is the
     * hooks' pass-through and glibc's multi-threaded malloc, the tracer's
     * thread having made the process multi-threaded). The toggle signal
     * and ps_trace_enable cannot resume (stopped). */
    ps_g.closing = 0;
    ps_g.paused = 0;
}

/* Advance the time base. Every event reads ps_g.tick with one plain load,
 * so this store is the whole cost of "a time per event" (docs/DESIGN.md,
 * "Time and order"). */
static void store_tick(uint64_t *last)
{
    tick_advance(last);   /* the clock's time: what the watermark may promise */
    calibrate();
}

/* The oldest tick any event was stamped with, in ns: the trace's time
 * resolution, measured by the events themselves (ps_tick_stale), so a
 * thread that moved the tick itself or a flusher that slept long is
 * counted as the events saw it. */
static uint64_t age_max_ns(void)
{
    uint64_t m = ps_g.age_dead;
    for (ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE); t; t = t->next) {
        uint64_t a = __atomic_load_n(&t->age_max, __ATOMIC_RELAXED);
        if (a > m) m = a;
    }
    return cyc_to_ns(m);
}

/* A SYNC chunk (format 1.2 fields: the tick's worst age, the tracer's
 * mapped bytes, the tracer's own stream). wlock held. Also written by the
 * final flush, so a program that ends before the first flush round still
 * says which stream is the tracer's and what the tracer cost. */
static void write_sync_locked(uint64_t mark)
{
    uint32_t fl = 0;
    for (ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
        if (t->is_flusher) fl = t->c.stream;
    uint8_t sync[4 * PST_VARINT_MAX];
    uint8_t *q = pst_put_sync(sync, mark);
    q = pst_put_varint(q, age_max_ns());
    q = pst_put_varint(q, __atomic_load_n(&ps_g.tracer_bytes, __ATOMIC_RELAXED));
    q = pst_put_varint(q, fl);
    struct iovec iov[2] = { { 0, 0 }, { sync, (size_t)(q - sync) } };
    write_chunk_locked(PST_CHUNK_SYNC, 0, iov, 2);
}

/* One flush round: every ring out, then a SYNC chunk whose watermark W
 * promises that no later chunk holds an event stamped before W.
 *
 * W is the tick just stored. A thread that read an older tick and has not
 * published its event yet is caught by its `inflight` flag: the tick store
 * and each thread's flag store are ordered by a process-wide barrier
 * (membarrier, or failing that a pause far longer than a store buffer takes
 * to drain), so a thread whose flag we read as 0 either published already
 * or reads W or later. For a thread caught in flight the watermark stays at
 * its stream's previous stamp, which its pending event cannot undercut. */
static void flush_round(uint64_t *last_tick)
{
    ps_modules_poll();
    store_tick(last_tick);
    uint64_t mark = *last_tick;   /* what we stored; the tick may be later already */
    if (!ps_g.membarrier_ok ||
        syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
        struct timespec d = { 0, 50 * 1000 };
        nanosleep(&d, NULL);
    }
    ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE);
    for (; t; t = t->next) {
        if (t->inflight) {
            uint64_t prev = t->enc.last_ts;
            if (prev < mark) mark = prev;
        }
        if (__atomic_load_n(&t->head, __ATOMIC_ACQUIRE) != t->tail) ps_flush_thr(t, 1);
    }
    int zh = z_take(1);
    pthread_mutex_lock(&ps_g.wlock);
    meta_flush_locked(zh);   /* definitions no event has needed yet (module maps), compressed */
    write_sync_locked(mark);
    pthread_mutex_unlock(&ps_g.wlock);
    z_give(zh);
    retire_dead();
}

/* Every tick: the rings that are half full are written now, compressed,
 * so a busy thread never reaches the 7/8 at which it would write its ring
 * itself (uncompressed). No SYNC: that needs every ring (flush_round). */
static void drain_half_full(void)
{
    if (ps_g.stopping) return;   /* the final flush or an exec has the file */
    for (ps_thr_t *t = __atomic_load_n(&ps_g.threads, __ATOMIC_ACQUIRE); t; t = t->next)
        if (__atomic_load_n(&t->head, __ATOMIC_ACQUIRE) - t->tail >= PS_SOFT_FILL) ps_flush_thr(t, 1);
}

/* Flushes asked for through poolscope_api.flush (atomics): rounds asked
 * for, and the latest request a finished round covers. */
static uint64_t flush_req, flush_done;

/* poolscope_api.flush: ask the flusher for a whole round at its next tick
 * (every ring, pending META, a SYNC) and wait for it, so that the file
 * holds every event published before the call (what a reader of the
 * unfinished trace sees: report reads it as cut short). 0 done; -1 no
 * trace file, the trace is closing, or no answer within 5 s. The caller
 * only sleeps: it holds no lock of ours and allocates nothing. */
int ps_flush_sync(void)
{
    if (!ps_g.active || !ps_g.flusher_on || ps_g.closed || ps_g.stopping) return -1;
    uint64_t want = __atomic_add_fetch(&flush_req, 1, __ATOMIC_ACQ_REL);
    uint64_t deadline = mono_ns() + 5000000000ull;
    while (__atomic_load_n(&flush_done, __ATOMIC_ACQUIRE) < want) {
        if (ps_g.closed || ps_g.stopping || mono_ns() > deadline) return -1;
        struct timespec d = { 0, 20 * 1000 };
        nanosleep(&d, NULL);
    }
    return 0;
}

/* The flusher: stores the tick every PS_TICK_NS, drains half-full rings
 * every tick, samples RSS every 10 ms, flushes every ring every 50 ms, and
 * at once when ps_flush_sync asks. */
void *ps_flusher_main(void *arg)
{
    (void)arg;
    ps_tls.busy = PS_BUSY_OWN;   /* everything this thread does is the tracer's own */
    ps_thr_t *self = thr_register();
    if (self) self->is_flusher = 1;
    uint64_t last_tick = 0, next_rss = 0, next_flush = 0;
    unsigned session = ps_g.session;
    for (;;) {
        struct timespec d = { 0, PS_TICK_NS };
        /* closed for good (stopped, or an exec under way): no tick to keep,
         * so no reason to wake 10,000 times a second while the program runs on */
        if (ps_g.closed && ps_g.stopped) d.tv_nsec = 100 * 1000 * 1000;
        clock_nanosleep(CLOCK_MONOTONIC, 0, &d, NULL);
        if (ps_g.closed || !ps_g.active) continue;
        if (PS_UNLIKELY(session != ps_g.session)) {   /* a new attach window: its clock starts at 0 */
            session = ps_g.session;
            last_tick = next_rss = next_flush = 0;
        }
        if (PS_UNLIKELY(stop_asked())) { stop_recording(); continue; }
        store_tick(&last_tick);
        drain_half_full();
        uint64_t asked = __atomic_load_n(&flush_req, __ATOMIC_ACQUIRE);
        int now = asked != __atomic_load_n(&flush_done, __ATOMIC_RELAXED);
        if (last_tick < next_rss && !now) continue;
        next_rss = last_tick + 10 * 1000 * 1000;
        pthread_mutex_lock(&ps_g.tlock);   /* not while a final flush runs */
        if (ps_g.closed || ps_g.stopping) { pthread_mutex_unlock(&ps_g.tlock); continue; }
        ps_emit_toggle(self);              /* the toggle signal arrived */
        if (self && ps_g.on) sample_rss(self);
        pthread_mutex_unlock(&ps_g.tlock);
        ps_fn_poll();                      /* not under tlock: it takes the loader's locks */
        ps_att_poll();
        if (last_tick < next_flush && !now) continue;
        next_flush = last_tick + 50 * 1000 * 1000;
        flush_round(&last_tick);
        if (now) __atomic_store_n(&flush_done, asked, __ATOMIC_RELEASE);
    }
    return NULL;
}

void ps_start_flusher(void)
{
    if (ps_g.flusher_on || !ps_g.active) return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ps_tls.busy += PS_BUSY_OWN;
    if (pthread_create(&ps_g.flusher, NULL, ps_flusher_main, NULL) == 0) ps_g.flusher_on = 1;
    ps_tls.busy -= PS_BUSY_OWN;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ---- the file: name, header, manifest -------------------------------------- */

static ssize_t read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    size_t n = 0;
    while (n < cap) {
        ssize_t r = read(fd, buf + n, cap - n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        n += (size_t)r;
    }
    ps_real_close(fd);
    return (ssize_t)n;
}

static int write_header(int fd)
{
    size_t cap = 80u << 10;
    uint8_t *buf = ps_sys_mmap(cap);
    if (!buf) return -1;
    char *exe = (char *)buf + (40u << 10), *args = (char *)buf + (44u << 10);
    ssize_t n = readlink("/proc/self/exe", exe, 4095);
    exe[n > 0 ? n : 0] = 0;
    ssize_t an = read_file("/proc/self/cmdline", args, 32u << 10);
    if (an < 0 || an >= (ssize_t)(32u << 10)) an = 0;
    struct utsname u;
    int have_u = uname(&u) == 0;
    pst_file_info_t fi = {
        .pid = (uint64_t)ps_g.pid, .ppid = (uint64_t)getppid(),
        .parent_pid = (uint64_t)ps_g.parent_pid, .exec_gen = ps_g.gen,
        .start_real_ns = ps_g.start_real, .start_mono_ns = ps_g.start_mono,
        .stacks = (uint32_t)ps_g.stacks, .depth = (uint32_t)ps_g.depth,
        .page_size = (uint64_t)ps_g.page_size,
        .exe = exe, .argv = an ? args : NULL, .argv_len = (size_t)an,
        .tool = "poolscope-preload 1.0", .host = have_u ? u.nodename : NULL,
        .attach = ps_g.attach ? 1u : 0u,
    };
    char *fns = (char *)buf + (76u << 10);
    fi.scope_funcs_len = ps_fn_header(fns, 4u << 10);
    fi.scope_funcs = fi.scope_funcs_len ? fns : NULL;
    int len = pst_put_file_header(buf, 40u << 10, &fi);
    int rc = len > 0 ? 0 : -1;
    size_t done = 0;
    while (rc == 0 && done < (size_t)len) {
        ssize_t w = write(fd, buf + done, (size_t)len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) { rc = -1; break; }
        done += (size_t)w;
    }
    ps_sys_munmap(buf, cap);
    if (rc == 0) ps_g.file_off = (uint64_t)len;
    return rc;
}

static void fmt_u(char *p, unsigned long v)
{
    char t[24]; int n = 0;
    do { t[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = t[--n];
    *p = 0;
}

/* <dir>/<stem>.<pid>[.k]<ext> */
static void pid_name(char *out, size_t cap, unsigned k)
{
    const char *base = strrchr(ps_g.out, '/');
    base = base ? base + 1 : ps_g.out;
    const char *dot = strrchr(base, '.');
    if (!dot || dot == base) dot = base + strlen(base);
    size_t stem = (size_t)(dot - ps_g.out);
    char num[48];
    fmt_u(num, (unsigned long)ps_g.pid);
    if (k) { size_t l = strlen(num); num[l] = '.'; fmt_u(num + l + 1, k); }
    if (stem + strlen(num) + strlen(dot) + 2 > cap) { out[0] = 0; return; }
    memcpy(out, ps_g.out, stem);
    out[stem] = '.';
    strcpy(out + stem + 1, num);
    strcat(out, dot);
}

static int open_trace(int first_image)
{
    int fd = -1;
    const int fl = O_WRONLY | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC;
    if (first_image) {
        fd = open(ps_g.out, fl, 0600);
        if (fd >= 0) strcpy(ps_g.path, ps_g.out);
        else if (errno == EEXIST && ps_g.gen == 0) ps_g.gen = 1;  /* see README */
    }
    for (unsigned k = 0; fd < 0 && k < 1000; k++) {
        pid_name(ps_g.path, sizeof ps_g.path, k);
        if (!ps_g.path[0]) return -1;
        fd = open(ps_g.path, fl, 0600);
        if (fd < 0 && errno != EEXIST) return -1;
    }
    if (fd < 0) return -1;
    fd = move_fd_high(fd, 0, -1);
    struct stat st;
    if (fstat(fd, &st) != 0 || write_header(fd) != 0) {
        ps_real_close(fd);
        return -1;
    }
    ps_g.dev = st.st_dev;
    ps_g.ino = st.st_ino;
    ps_g.fd = fd;
    ps_g.write_broken = 0;
    if (ps_g.manifest[0]) {
        int m = open(ps_g.manifest, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
        if (m >= 0) {
            char line[4200];
            fmt_u(line, (unsigned long)ps_g.pid);
            size_t l = strlen(line);
            line[l++] = '\t';
            size_t pl = strlen(ps_g.path);
            if (l + pl + 1 < sizeof line) {
                memcpy(line + l, ps_g.path, pl);
                l += pl;
                line[l++] = '\n';
                if (write(m, line, l) < 0) { /* nothing to do */ }
            }
            ps_real_close(m);
        }
    }
    return 0;
}

int ps_is_trace_fd(int fd)
{
    if (!ps_g.active || fd < 0 || fd != ps_g.fd) return 0;
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == ps_g.dev && st.st_ino == ps_g.ino;
}

/* The program is about to close or overwrite the fds [lo, hi]: move ours. */
int ps_move_trace_fd_from(int lo, int hi)
{
    if (!ps_g.active) return 0;
    pthread_mutex_lock(&ps_g.wlock);
    if (ps_g.fd >= lo && ps_g.fd <= hi && ps_is_trace_fd(ps_g.fd)) {
        int nfd = move_fd_high(ps_g.fd, lo, hi);
        if (nfd >= lo && nfd <= hi) {   /* nowhere to go: the fd check re-opens */
            pthread_mutex_unlock(&ps_g.wlock);
            return -1;
        }
        ps_g.fd = nfd;
    }
    pthread_mutex_unlock(&ps_g.wlock);
    return 0;
}

/* ---- init -------------------------------------------------------------------- */

static const char *env(const char *k) { const char *v = getenv(k); return v && *v ? v : NULL; }

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static int follow_match(const char *pat, const char *path)
{
    if (!path || !*path) return 0;
    if (fnmatch(pat, path, 0) == 0) return 1;
    const char *b = strrchr(path, '/');
    return b && fnmatch(pat, b + 1, 0) == 0;
}

static int self_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    uintptr_t me = (uintptr_t)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD) continue;
        uintptr_t lo = info->dlpi_addr + ph->p_vaddr, hi = lo + ph->p_memsz;
        if (me >= lo && me < hi) {
            ps_g.self_lo = lo;
            ps_g.self_hi = hi;
            return 1;
        }
    }
    return 0;
}

static int common_open(int first_image)
{
    ps_g.cyc0 = ps_cycles();
    ps_g.mono0 = ps_g.start_mono = mono_ns();
    ps_g.tick = 0;
    ps_g.tick_cyc = ps_g.cyc0;
    ps_g.stale_cyc = PS_TICK_STALE_NS;
    ps_g.age_dead = 0;
    /* Per address space: a fork child registers again. */
    ps_g.membarrier_ok = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
    struct timespec rt;
    clock_gettime(CLOCK_REALTIME, &rt);
    ps_g.start_real = (uint64_t)rt.tv_sec * 1000000000u + (uint64_t)rt.tv_nsec;
    if (open_trace(first_image) != 0) return -1;
    ps_g.active = 1;
    ctl_open();
    /* the run's recording stopped while this image was starting (after
     * ps_init looked, before record saw this counters file): stop at the
     * first tick (ctl.h) */
    if (ps_g.cnt != &ps_g.cnt_local && run_stopped()) ps_g.cnt->stop_req = 1;
    ps_modules_scan(1);
    return 0;
}

/* Runs once: from the constructor, or from the first hooked call if that
 * comes earlier. */
static void ps_init(void)
{
    int expect = 0;
    if (!__atomic_compare_exchange_n(&ps_g.init_state, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
        return;
    ps_tls.busy += PS_BUSY_OWN;
    ps_resolve_real();
    ps_g.page_size = sysconf(_SC_PAGESIZE);
    ps_g.pid = getpid();
    const char *out = env("POOLSCOPE_OUT");
    if (!out) goto done;

    const char *s = env("POOLSCOPE_STACKS");
    ps_g.stacks = !s ? PST_STACKS_NONE : !strcmp(s, "fp") ? PST_STACKS_FP
                : !strcmp(s, "dwarf") ? PST_STACKS_DWARF : PST_STACKS_NONE;
    ps_g.depth = 32;
    if ((s = env("POOLSCOPE_DEPTH"))) ps_g.depth = atoi(s);
    if (ps_g.depth < 1) ps_g.depth = 1;
    if (ps_g.depth > PST_MAX_DEPTH) ps_g.depth = PST_MAX_DEPTH;
    if ((s = env("POOLSCOPE_MANIFEST"))) copy_str(ps_g.manifest, sizeof ps_g.manifest, s);
    if ((s = env("POOLSCOPE_FOLLOW_EXEC"))) copy_str(ps_g.follow, sizeof ps_g.follow, s);
    if ((s = env("POOLSCOPE_SIGNAL"))) ps_g.sig = atoi(s);
    if ((s = env("POOLSCOPE_PAUSED"))) ps_g.paused = s[0] == '1';
    ctl_dir_take(env(PST_CTL_DIR_ENV));
    if (run_stopped()) goto done;   /* record stopped the run's recording: an image after it records nothing */
    ps_fn_parse(env("POOLSCOPE_SCOPE_FUNCS"));

    int first_image = 1;
    if ((s = env("POOLSCOPE_GEN"))) {
        char *e;
        long gpid = strtol(s, &e, 10);
        first_image = 0;
        ps_g.gen = 1;
        if (*e == ':' && gpid == ps_g.pid) ps_g.gen = strtoull(e + 1, NULL, 10);
        if (ps_g.follow[0]) {
            char exe[4096];
            ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
            exe[n > 0 ? n : 0] = 0;
            if (!follow_match(ps_g.follow, env("POOLSCOPE_EXEC_PATH")) &&
                !follow_match(ps_g.follow, exe))
                goto done;   /* untraced image: pure pass-through */
        }
    }
    if (out[0] == '/') {
        copy_str(ps_g.out, sizeof ps_g.out, out);
    } else {
        if (!getcwd(ps_g.out, sizeof ps_g.out - 2)) goto done;
        size_t l = strlen(ps_g.out);
        if (l + strlen(out) + 2 > sizeof ps_g.out) goto done;
        ps_g.out[l] = '/';
        strcpy(ps_g.out + l + 1, out);
    }

    dl_iterate_phdr(self_cb, (void *)(uintptr_t)&ps_init);
    ps_g.main_stk_hi = (uintptr_t)__libc_stack_end;
    ps_stacks_init();
    s = env("POOLSCOPE_PYTHON_FRAMES");
    /* A Python stack is deep (106 frames in a plain script: the loader's
     * calls, the C calls between the Python ones): without a depth asked
     * for, a Python process gets the deepest, so its stacks reach _start
     * (two thirds of its stacks were cut at 32; the cost is in README.md, "Profile Python") */
    if (ps_py_init(!s || strcmp(s, "0"), 1) && !env("POOLSCOPE_DEPTH")) ps_g.depth = PST_MAX_DEPTH;
    ps_g.key_ok = pthread_key_create(&ps_g.key, key_dtor) == 0;
    if (common_open(first_image) != 0) goto done;
    pthread_atfork(ps_prepare_fork, ps_parent_after_fork, ps_child_after_fork);
    ps_thr_t *t = thr_register();
    uint64_t boot = __atomic_exchange_n(&ps_g.boot_lost, 0, __ATOMIC_RELAXED);
    if (t && boot) {
        add_lost(boot);
        put_lost(t, boot, PST_LOST_BOOTSTRAP);
    }
    if (ps_g.sig > 0) ps_install_signal();
    ps_signals_init();
    ps_recompute_on();
    ps_fn_install();
    ps_start_flusher();
done:
    ps_g.inited = 1;
    __atomic_store_n(&ps_g.init_state, 2, __ATOMIC_RELEASE);
    ps_tls.busy -= PS_BUSY_OWN;
}

__attribute__((constructor)) static void ps_ctor(void)
{
    ps_init();
}

/* For attach.c (`poolscope attach`): the pieces of ps_init a start in a
 * running process needs, from the statics they use. */
void ps_core_ctl_dir(const char *dir) { ctl_dir_take(dir); }
int ps_core_open(void) { return common_open(1); }
void ps_core_self(void) { dl_iterate_phdr(self_cb, (void *)(uintptr_t)&ps_init); }
int ps_core_key(void) { return pthread_key_create(&ps_g.key, key_dtor) == 0; }

/* At the end of a normal exit, the C++ runtime's emergency pool for
 * exceptions (72,704 bytes from libstdc++'s constructor, before main) is
 * still allocated: it is freed only by __gnu_cxx::__freeres, which glibc
 * calls under valgrind. Every C++ program would show it as a leak, which it
 * is not; heaptrack and valgrind call the function too. Called here, while
 * still recording, so its free is in the trace; later code that needs the
 * pool (an exception thrown when malloc fails, after our destructor) finds
 * it empty and falls back as when the pool is used up. */
static void cxx_freeres(void)
{
    ps_tls.busy += PS_BUSY_OWN;   /* dlsym's own allocations (its error buffer) are the tracer's */
    void (*fr)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "_ZN9__gnu_cxx9__freeresEv");
    ps_tls.busy -= PS_BUSY_OWN;
    if (fr) fr();
}

__attribute__((destructor)) static void ps_dtor(void)
{
    if (ps_g.active && !ps_g.closed && !ps_tls.busy) cxx_freeres();
    ps_final();
}

/* ---- exec ---------------------------------------------------------------------- */


/* Before an exec: record EXEC, flush every ring, write END, and keep the
 * thread list and the file locked so nothing is written after END. */
void ps_exec_begin(const char *path)
{
    if (ps_g.child_pending) ps_ensure_child();
    ps_tls.exec_locked = 0;
    if (!ps_g.active || ps_g.closed) return;
    ps_thr_t *t = ps_enter();
    if (t) {
        pst_event_t ev = { .type = PST_EV_EXEC };
        ev.f[0] = ps_string_id(path);
        ps_emit_generic(t, &ev);
        ps_leave();
    }
    ps_tls.busy += PS_BUSY_OWN;
    ps_quiesce();
    pthread_mutex_lock(&ps_g.tlock);
    ps_g.retry_after = 0;
    ps_flush_all(1);
    ps_g.exec_unflushed = end_of_image_locked(0);
    ps_g.exec_counted = __atomic_load_n(&ps_g.cnt->closing_lost, __ATOMIC_RELAXED);
    add_lost(ps_g.exec_counted);
    pthread_mutex_lock(&ps_g.wlock);
    ps_g.exec_end_off = ps_g.file_off;
    if (ps_write_end_locked() == 0) ctl_done();   /* a failed exec cannot SIGKILL-account any more */
    ps_g.closed = 1;
    ps_recompute_on();
    ps_tls.exec_locked = 1;
}

void ps_exec_failed(void)
{
    if (!ps_tls.exec_locked) return;
    ps_tls.exec_locked = 0;
    ps_truncate_locked(ps_g.exec_end_off);
    ps_g.cnt->end_written = 0;
    /* the END that counted them as lost is gone; they will be written */
    __atomic_sub_fetch(&ps_g.cnt->lost_total, ps_g.exec_unflushed + ps_g.exec_counted, __ATOMIC_RELAXED);
    ps_g.closed = 0;
    ps_g.stopping = 0;
    ps_g.closing = 0;
    ps_recompute_on();
    pthread_mutex_unlock(&ps_g.wlock);
    pthread_mutex_unlock(&ps_g.tlock);
    /* What other threads did while the file was closed is gone: say so. */
    uint64_t n = __atomic_exchange_n(&ps_g.cnt->closing_lost, 0, __ATOMIC_RELAXED);
    ps_thr_t *t = ps_tls.thr;
    if (n) {
        add_lost(n);
        if (t && (uintptr_t)t > 1) {
            pst_event_t ev = { .type = PST_EV_LOST, .f = { n, PST_LOST_EXEC } };
            ps_emit_generic(t, &ev);
            __atomic_add_fetch(&ps_g.cnt->lost_reported, n, __ATOMIC_RELAXED);
        }
    }
    ps_tls.busy -= PS_BUSY_OWN;
}

/* ---- fork ---------------------------------------------------------------------- */

void ps_tables_lock_all(void);    /* stacks.c */
void ps_tables_unlock_all(void);

/* The mappings of every thread record (live, retired, the exit stream's),
 * tlock held, into ps_g.fork_maps: the child must not walk the records
 * themselves. They are slots of the counters file, MAP_SHARED with the
 * parent, whose threads go on registering and retiring records (rewriting
 * `next`) while the child runs its atfork handler: a child that followed
 * `next` there reached records mapped after the fork, in the parent only
 * (SIGSEGV in 1-4 of 128 children of a 16-thread fork storm). */
static void fork_maps_take(void)
{
    size_t n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (ps_thr_t *t = pass ? ps_g.thr_free : ps_g.threads; t; t = t->next) n++;
    if (n > ps_g.fork_cap) {
        size_t cap = n * 2 + 16;
        struct ps_recmap *m = ps_sys_mmap(cap * sizeof *m);
        if (!m) { ps_g.fork_n = SIZE_MAX; return; }   /* the child leaves them mapped */
        if (ps_g.fork_maps) ps_sys_munmap(ps_g.fork_maps, ps_g.fork_cap * sizeof *m);
        ps_g.fork_maps = m;
        ps_g.fork_cap = cap;
    }
    n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (ps_thr_t *t = pass ? ps_g.thr_free : ps_g.threads; t; t = t->next)
            ps_g.fork_maps[n++] = (struct ps_recmap){ t, t->ring, t->map_len, t->rmask + 1 + PS_RING_SLACK };
    ps_g.fork_n = n;
}

void ps_prepare_fork(void)
{
    ps_tls.busy += PS_BUSY_OWN;
    ps_g.fork_n = 0;
    if (!ps_g.active) return;
    pthread_mutex_lock(&ps_g.child_lock);
    pthread_mutex_lock(&ps_g.tlock);
    fork_maps_take();
    pthread_mutex_lock(&ps_g.z.lock);   /* the child gets the compressor between two chunks */
    pthread_mutex_lock(&ps_g.wlock);
    ps_tables_lock_all();
    pthread_mutex_lock(&ps_g.mlock);
}

void ps_parent_after_fork(void)
{
    if (ps_g.active) {
        pthread_mutex_unlock(&ps_g.mlock);
        ps_tables_unlock_all();
        pthread_mutex_unlock(&ps_g.wlock);
        pthread_mutex_unlock(&ps_g.z.lock);
        pthread_mutex_unlock(&ps_g.tlock);
        pthread_mutex_unlock(&ps_g.child_lock);
    }
    ps_tls.busy -= PS_BUSY_OWN;
}

/* Child: everything of the parent's is dropped (its rings, its unflushed
 * bytes, its definitions: the child's file must define everything again);
 * the file is opened lazily by ps_ensure_child at the next event, exit, exec. */
void ps_child_after_fork(void)
{
    if (!ps_g.active && !ps_g.child_pending) { ps_tls.busy -= PS_BUSY_OWN; return; }
    pthread_mutex_t init = PTHREAD_MUTEX_INITIALIZER;
    ps_g.mlock = init; ps_g.wlock = init; ps_g.tlock = init; ps_g.child_lock = init;
    ps_g.z.lock = init;   /* its context and buffers are the parent's copies, idle: kept */
    ps_g.late_lock = init;
    ps_g.late = NULL;   /* unmapped below with the other records */
    ps_tables_reset();   /* re-inits the table locks too */
    /* Every thread record goes, this thread's too: they are slots of the
     * parent's counters file, shared with it. This thread registers again
     * at its next event, in the child's own file. Their mappings come from
     * the private copy made before the fork (fork_maps_take). */
    if (ps_g.fork_n != SIZE_MAX)
        for (size_t i = 0; i < ps_g.fork_n; i++) {
            ps_sys_munmap(ps_g.fork_maps[i].ring, ps_g.fork_maps[i].ring_len);
            ps_sys_munmap(ps_g.fork_maps[i].rec, ps_g.fork_maps[i].rec_len);
        }
    ps_g.fork_n = 0;
    ps_g.threads = NULL;
    ps_g.thr_free = NULL;
    /* the child's trace starts its versions afresh, with one thread */
    ps_g.multi = 0;
    memset(ps_g.vtab, 0, sizeof ps_g.vtab);
    if (ps_tls.thr != PS_THR_DEAD) ps_tls.thr = NULL;
    if (ps_g.cnt != &ps_g.cnt_local) {
        ps_sys_munmap(ps_g.cnt, PST_CTL_HDR);
        ps_g.cnt = &ps_g.cnt_local;
    }
    if (ps_g.ctl_fd >= 0) ps_real_close(ps_g.ctl_fd);
    ps_g.ctl_fd = -1;
    ps_g.ctl_path[0] = 0;
    memset(&ps_g.cnt_local, 0, sizeof ps_g.cnt_local);
    ps_g.meta_len = 0;
    if (ps_g.fd >= 0) ps_real_close(ps_g.fd);
    ps_g.fd = -1;
    ps_g.parent_pid = ps_g.pid;
    ps_g.pid = getpid();
    ps_g.gen = 0;
    ps_g.flusher_on = 0;
    ps_g.next_stream = 0;
    ps_g.ev_written = 0;
    ps_g.cnt->lost_total = 0;
    ps_g.file_off = 0;
    ps_g.closed = 0;
    ps_g.stopping = 0;
    ps_g.closing = 0;        /* a fork after the parent's exit flush records anew */
    ps_g.cnt->closing_lost = 0;
    ps_g.cnt->lost_reported = 0;
    ps_g.active = 0;
    ps_g.retry_after = 0;
    ps_g.child_pending = !ps_g.stopped;   /* a fork after the stop is not traced */
    ps_recompute_on();
    ps_tls.busy -= PS_BUSY_OWN;
}

void ps_note_untraced(int err);   /* hooks_proc.c: tells record this child is untraced */

void ps_ensure_child(void)
{
    if (!ps_g.child_pending) return;
    ps_tls.busy += PS_BUSY_OWN;
    PS_SIGFENCE();
    pthread_mutex_lock(&ps_g.child_lock);
    if (ps_g.child_pending) {
        if (common_open(0) == 0) {
            ps_g.child_pending = 0;
            ps_recompute_on();
            ps_start_flusher();
        } else {
            ps_note_untraced(errno);
            ps_g.child_pending = 0;   /* untraced from here on */
            ps_recompute_on();
        }
    }
    pthread_mutex_unlock(&ps_g.child_lock);
    PS_SIGFENCE();
    ps_tls.busy -= PS_BUSY_OWN;
}
