/* ctl.c — the counters file (libtrace/ctl.h): the image's counters and its
 * thread records live in a shared mapping of a file in record's private
 * directory, so a SIGKILL loses only the rings' unflushed events and
 * `poolscope record` knows how many; the stop file that ends a
 * --duration / --until-signal window. */
#include "preload.h"
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Is ctl_fd still the counters file? (The program may have closed or
 * reused the number.) Re-open by path if not; -1: no file any more. */
int ps_ctl_fd_ok(void)
{
    struct stat st;
    if (ps_g.ctl_fd >= 0 && fstat(ps_g.ctl_fd, &st) == 0 && st.st_dev == ps_g.ctl_dev && st.st_ino == ps_g.ctl_ino)
        return 0;
    ps_g.ctl_fd = -1;
    if (!ps_g.ctl_path[0]) return -1;
    int fd = open(ps_g.ctl_path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return -1;
    if (fstat(fd, &st) != 0 || st.st_dev != ps_g.ctl_dev || st.st_ino != ps_g.ctl_ino) { ps_real_close(fd); return -1; }
    ps_g.ctl_fd = ps_move_fd_high(fd, 0, -1);
    return 0;
}

/* POOLSCOPE_CTL_DIR (ctl.h) when it is a directory of this user that no
 * one else may enter or write: record's mkdtemp directory. */
void ps_ctl_dir_take(const char *dir)
{
    struct stat st;
    ps_g.ctl_dir[0] = 0;
    if (!dir || strlen(dir) >= sizeof ps_g.ctl_dir || lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != geteuid() || (st.st_mode & 077))
        return;
    strcpy(ps_g.ctl_dir, dir);
}

/* Has `record` stopped the run's recording (ctl.h, PST_CTL_STOP)? */
int ps_run_stopped(void)
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
void ps_ctl_open(void)
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
        fd = ps_move_fd_high(fd, 0, -1);
        h = ps_map_shared(fd, PST_CTL_HDR, 0);
    }
    if (!h) {
        if (fd >= 0) { ps_real_close(fd); unlink(ps_g.ctl_path); }
        ps_g.ctl_path[0] = 0;
        return;
    }
    ps_g.ctl_dev = st.st_dev;
    ps_g.ctl_ino = st.st_ino;
    local.slot_bytes = (uint32_t)PS_REC_BYTES;
    local.n_slots = 0;
    local.pid = (uint64_t)ps_g.pid;
    local.end_written = 0;
    *h = local;
    memcpy(h->magic, PST_CTL_MAGIC, 8);
    ps_g.ctl_fd = fd;
    ps_g.cnt = h;
}

/* END is in the trace: the counters file has served its purpose. */
void ps_ctl_done(void)
{
    ps_g.cnt->end_written = 1;
    if (ps_g.ctl_path[0]) unlink(ps_g.ctl_path);
    ps_g.ctl_path[0] = 0;
}
