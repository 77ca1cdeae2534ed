/* input.c — checks on a file before a command reads it (input.h).
 *
 * Nothing here blocks: a path is stat()ed before it is opened, so a device
 * is never opened at all (opening some has effects), and a named FIFO is
 * opened with O_NONBLOCK and probed with tee(2), which copies from it to a
 * private pipe and leaves its bytes where they were.
 */
#include "input.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "poolscope/error.h"

#define PEEK_MAX 4096              /* bytes looked at for a kind (blanks before JSON included) */
#define FIFO_WAIT_MS 3000          /* how long a named FIFO may go without a writer */
#define PIPEFS_MAGIC_ 0x50495045   /* statfs f_type of a pipe made by pipe(2) */

static int blank(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

/* Does b[0..n) start as kind k, as far as it goes? 1 yes (n may be short
 * of the whole prefix: a file cut short is the reader's to name), 0 no. */
static int starts_as(const char *b, size_t n, const psc_input_kind_t *k)
{
    size_t i = 0;
    if (k->skip_blank)
        while (i < n && blank(b[i])) i++;
    if (k->skip_blank && i == n && n == PEEK_MAX) return 0;   /* only blanks as far as we look */
    size_t m = n - i < k->len ? n - i : k->len;
    return memcmp(b + i, k->prefix, m) == 0;
}

/* "not A", "neither A nor B" */
static int kinds_msg(const psc_input_kind_t *kinds, size_t n, char *msg, size_t msglen)
{
    if (n == 2) snprintf(msg, msglen, "neither %s nor %s", kinds[0].what, kinds[1].what);
    else snprintf(msg, msglen, "not %s", n ? kinds[0].what : "readable");
    return PSC_ECORRUPT;
}

/* The kind of b[0..n), or NULL with msg. */
static const psc_input_kind_t *which_kind(const char *b, size_t n, const psc_input_kind_t *kinds, size_t nk,
                                          char *msg, size_t msglen)
{
    for (size_t i = 0; i < nk; i++)
        if (starts_as(b, n, &kinds[i])) return &kinds[i];
    kinds_msg(kinds, nk, msg, msglen);
    return NULL;
}

static long ms_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* A named FIFO opened without blocking: wait (FIFO_WAIT_MS at most) until
 * a writer has come (it may be blocked in its own open until we open) or
 * has written. tee(2) into a private pipe tells the three cases apart
 * without taking a byte from the FIFO: data (> 0), a writer and no data
 * yet (EAGAIN), no writer and no data (0, as at the end of a pipe).
 * Returns 0, or -1 when no writer came. */
static int fifo_wait_writer(int fd)
{
    int probe[2];
    if (pipe2(probe, O_NONBLOCK | O_CLOEXEC) != 0) return 0;   /* cannot look: let the reader go */
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = -1;
    for (;;) {
        ssize_t r = tee(fd, probe[1], 1, SPLICE_F_NONBLOCK);
        if (r > 0 || (r < 0 && errno != EINTR)) { rc = 0; break; }   /* data, a writer, or not a pipe */
        if (ms_since(&t0) >= FIFO_WAIT_MS) break;
        struct timespec nap = { 0, 10 * 1000 * 1000 };
        nanosleep(&nap, NULL);
    }
    close(probe[0]);
    close(probe[1]);
    return rc;
}

int psc_input_fifo_open(const char *path, char *msg, size_t msglen)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) { snprintf(msg, msglen, "cannot read: %s", strerror(errno)); return -1; }
    struct stat st;
    struct statfs sf;
    /* only a named FIFO: a pipe(2) pipe with no writer is at its end, and
     * that is the reader's to say ("ends inside the trace header") */
    if (fstat(fd, &st) == 0 && S_ISFIFO(st.st_mode) && fstatfs(fd, &sf) == 0 && sf.f_type != PIPEFS_MAGIC_) {
        if (fifo_wait_writer(fd) < 0) {
            close(fd);
            snprintf(msg, msglen, "a FIFO that nothing writes to (no writer within %d s)", FIFO_WAIT_MS / 1000);
            errno = ENXIO;
            return -1;
        }
    }
    /* from here on reads wait for the writer, as on any pipe */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

int psc_input_check(const char *path, const psc_input_kind_t *kinds, size_t n, unsigned flags, char *msg,
                    size_t msglen)
{
    struct stat st;
    if (stat(path, &st) != 0) return 0;          /* the command says why, in its words */
    if (S_ISDIR(st.st_mode)) { snprintf(msg, msglen, "is a directory"); return PSC_EINVAL; }
    if (S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode)) {
        snprintf(msg, msglen, "is a device, not a regular file or a pipe");
        return PSC_EINVAL;
    }
    if (S_ISSOCK(st.st_mode)) return 0;          /* standard input from a socket: a stream */
    if (S_ISFIFO(st.st_mode)) {
        struct statfs sf;
        /* pipe(2)'s pipes (standard input, /dev/fd/N) are open already:
         * opening them again never waits. The stream is the reader's. */
        if (statfs(path, &sf) == 0 && sf.f_type == PIPEFS_MAGIC_) return 0;
        if (!strcmp(path, "/dev/stdin")) return 0;   /* "-": a FIFO the shell has opened */
        if (!(flags & PSC_IN_FIFO)) {
            snprintf(msg, msglen, "is a FIFO: give it as standard input (- < FIFO), or a regular file");
            return PSC_EINVAL;
        }
        return 0;                                /* the command opens it with psc_input_fifo_open */
    }
    if (!S_ISREG(st.st_mode)) { snprintf(msg, msglen, "not a regular file"); return PSC_EINVAL; }

    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return 0;
    char b[PEEK_MAX];
    ssize_t got;
    while ((got = pread(fd, b, sizeof b, 0)) < 0 && errno == EINTR) {}
    close(fd);
    if (got <= 0) return 0;                      /* empty: the reader's "no header" */
    const psc_input_kind_t *k = which_kind(b, (size_t)got, kinds, n, msg, msglen);
    if (!k) return PSC_ECORRUPT;
    if (k->max_bytes && (uint64_t)st.st_size > k->max_bytes) {
        snprintf(msg, msglen, "%llu bytes: too large for %s (at most %llu MiB)", (unsigned long long)st.st_size,
                 k->what, (unsigned long long)(k->max_bytes >> 20));
        return PSC_EINVAL;
    }
    return 0;
}

char *psc_read_capped(int fd, uint64_t max, size_t *len, int *err,
                      int (*first)(const char *b, size_t n, void *ctx), size_t want, void *ctx)
{
    if (!max) max = UINT64_MAX;
    size_t cap = max < (1 << 16) ? (size_t)max : 1 << 16, n = 0;
    int called = first == NULL;
    char *b = malloc(cap + 1);
    if (!b) { *err = PSC_ENOMEM; return NULL; }
    for (;;) {
        if (n == cap) {
            if (n >= max) {               /* one byte more than allowed means too much */
                char c;
                ssize_t k;
                while ((k = read(fd, &c, 1)) < 0 && errno == EINTR) {}
                if (k > 0) { free(b); *err = PSC_EINVAL; return NULL; }
                if (k < 0) { free(b); *err = PSC_EIO; return NULL; }
                break;
            }
            size_t nc = cap > SIZE_MAX / 4 ? SIZE_MAX / 2 : cap * 2;
            if ((uint64_t)nc > max) nc = (size_t)max;
            char *nb = realloc(b, nc + 1);
            if (!nb) { free(b); *err = PSC_ENOMEM; return NULL; }
            b = nb;
            cap = nc;
        }
        ssize_t k = read(fd, b + n, cap - n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0) { int e = errno; free(b); errno = e; *err = PSC_EIO; return NULL; }
        if (k == 0) break;
        n += (size_t)k;
        if (!called && n >= want) {
            called = 1;
            int rc = first(b, n, ctx);
            if (rc) { free(b); *err = rc; return NULL; }
        }
    }
    if (!called) {
        int rc = first(b, n, ctx);
        if (rc) { free(b); *err = rc; return NULL; }
    }
    b[n] = 0;
    *len = n;
    return b;
}

uint64_t psc_input_stream_max(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || psz <= 0) return (uint64_t)1 << 32;
    return (uint64_t)pages * (uint64_t)psz / 2;
}
