/* tracefile.c — the trace file of an image: its name (POOLSCOPE_OUT, or
 * <dir>/<stem>.<pid>[.k]<ext>, always O_EXCL), its header (pid, exe, argv,
 * stacks, scope functions), its line in the manifest, and the fd kept away
 * from the program's close/dup2 of it. */
#include "preload.h"
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

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

int ps_open_trace(int first_image)
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
    fd = ps_move_fd_high(fd, 0, -1);
    struct stat st;
    if (fstat(fd, &st) != 0 || write_header(fd) != 0) {
        ps_real_close(fd);
        return -1;
    }
    ps_g.dev = st.st_dev;
    ps_g.ino = st.st_ino;
    ps_g.fd = fd;
    ps_g.write_broken = 0;
    /* pools the program made before this file (an attach, a fork child)
     * are named again at their first event in it (pool_adapter.c) */
    __atomic_add_fetch(&ps_g.trace_files, 1, __ATOMIC_RELEASE);
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
        int nfd = ps_move_fd_high(ps_g.fd, lo, hi);
        if (nfd >= lo && nfd <= hi) {   /* nowhere to go: the fd check re-opens */
            pthread_mutex_unlock(&ps_g.wlock);
            return -1;
        }
        ps_g.fd = nfd;
    }
    pthread_mutex_unlock(&ps_g.wlock);
    return 0;
}
