/* writer.c — writing the trace file: the fd kept high and checked before
 * each write, whole chunks or nothing (a partial write is truncated away,
 * a failed one retried after 100 ms), the META buffer written before every
 * chunk so a definition precedes its first use, END.
 *
 * Every file write holds wlock. Lock order (whole library): tlock (thread
 * list) < a ring's clock < z.lock (compressor) < wlock (file) < table
 * locks (stacks.c) < mlock (META buffer). */
#include "preload.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

void ps_add_lost(uint64_t n) { __atomic_add_fetch(&ps_g.cnt->lost_total, n, __ATOMIC_RELAXED); }

/* Locks on the closing paths. Normally a plain lock; while a fatal signal
 * closes the trace (ps_g.fatal), a try until the deadline: the signal may
 * have interrupted this very thread inside the tracer, holding the lock. */
int ps_lock_c(pthread_mutex_t *m)
{
    if (PS_LIKELY(!ps_g.fatal)) return pthread_mutex_lock(m);
    while (pthread_mutex_trylock(m) != 0) {
        if (ps_mono_ns() > ps_g.fatal_deadline) return -1;
        struct timespec d = { 0, 100 * 1000 };
        nanosleep(&d, NULL);
    }
    return 0;
}

/* ---- writing the file ----------------------------------------------------- */

int ps_move_fd_high(int fd, int avoid_lo, int avoid_hi)
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
    ps_g.fd = ps_move_fd_high(fd, 0, -1);
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
int ps_write_chunk_raw_locked(uint8_t kind, unsigned flags, uint32_t stream, struct iovec *iov, int n)
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


/* Write pending META bytes as one chunk. wlock held; z: z.lock held too,
 * the bytes go compressed (copied out under mlock, so threads defining new
 * stacks wait only for the copy, and consumed once written). */
int ps_meta_flush_locked(int z)
{
    int rc = 0;
    if (z && ps_g.meta_len >= PS_Z_MIN) {
        if (ps_lock_c(&ps_g.mlock) != 0) return -1;
        size_t n = ps_g.meta_len;
        if (ps_z_room(&ps_g.z.min, &ps_g.z.min_cap, n) != 0) {
            pthread_mutex_unlock(&ps_g.mlock);
            goto plain;
        }
        memcpy(ps_g.z.min, ps_g.meta, n);
        pthread_mutex_unlock(&ps_g.mlock);
        struct iovec src = { ps_g.z.min, n };
        size_t zl = ps_z_compress(&src, 1, n, &ps_g.z.mout, &ps_g.z.mout_cap);
        struct iovec iov[2] = { { 0, 0 }, { zl ? ps_g.z.mout : ps_g.z.min, zl ? zl : n } };
        rc = ps_write_chunk_raw_locked(PST_CHUNK_META, zl ? PST_CHUNK_ZSTD : 0, 0, iov, 2);
        if (rc == 0) {
            if (ps_lock_c(&ps_g.mlock) != 0) return -1;   /* fatal only: then nothing follows anyway */
            memmove(ps_g.meta, ps_g.meta + n, ps_g.meta_len - n);
            ps_g.meta_len -= n;
            pthread_mutex_unlock(&ps_g.mlock);
        }
        return rc;
    }
plain:
    if (ps_lock_c(&ps_g.mlock) != 0) return -1;
    if (ps_g.meta_len) {
        struct iovec iov[2] = { { 0, 0 }, { ps_g.meta, ps_g.meta_len } };
        rc = ps_write_chunk_raw_locked(PST_CHUNK_META, 0, 0, iov, 2);
        if (rc == 0) ps_g.meta_len = 0;
    }
    pthread_mutex_unlock(&ps_g.mlock);
    return rc;
}

int ps_write_chunk_locked(uint8_t kind, uint32_t stream, struct iovec *iov, int n)
{
    if (ps_meta_flush_locked(0) != 0) return -1;
    return ps_write_chunk_raw_locked(kind, 0, stream, iov, n);
}

void ps_meta_lock(void) { pthread_mutex_lock(&ps_g.mlock); }
void ps_meta_unlock(void) { pthread_mutex_unlock(&ps_g.mlock); }

int ps_meta_append(const void *p, size_t n)
{
    if (ps_g.meta_len + n > ps_g.meta_cap) {
        size_t cap = ps_g.meta_cap ? ps_g.meta_cap * 2 : (256u << 10);
        while (cap < ps_g.meta_len + n) cap *= 2;
        uint8_t *m = ps_sys_mmap(cap);
        if (!m) return -1;   /* definitions cannot be lost silently: see below */
        if (ps_g.meta_len) memcpy(m, ps_g.meta, ps_g.meta_len);
        ps_sys_munmap(ps_g.meta, ps_g.meta_cap);
        ps_g.meta = m;
        ps_g.meta_cap = cap;
    }
    memcpy(ps_g.meta + ps_g.meta_len, p, n);
    ps_g.meta_len += n;
    return 0;
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
    return ps_write_chunk_locked(PST_CHUNK_END, 0, iov, 2);
}
