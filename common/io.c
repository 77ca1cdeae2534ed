/* io.c — whole-buffer reads and writes (io.h). */
#include "io.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include "poolscope/error.h"

int psc_read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r == 0 ? PSC_ETRUNC : PSC_EIO;
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

static int out_all(int fd, const void *buf, size_t len, int sock)
{
    const char *p = buf;
    while (len) {
        ssize_t w = sock ? send(fd, p, len, MSG_NOSIGNAL) : write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return PSC_EIO;
        p += w;
        len -= (size_t)w;
    }
    return 0;
}

int psc_write_all(int fd, const void *buf, size_t len) { return out_all(fd, buf, len, 0); }
int psc_send_all(int fd, const void *buf, size_t len) { return out_all(fd, buf, len, 1); }
