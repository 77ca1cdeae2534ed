/* ctl_stop.c — ask every traced image of a run to stop recording (ctl.h,
 * pst_ctl_stop): `record --duration` and `record --until-signal`.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ctl.h"

int pst_ctl_stop(const char *ctl_dir)
{
    if (!ctl_dir || !*ctl_dir) return -1;
    char path[4200];
    /* first the stop file, then the scan: an image either made its
     * counters file before the scan (it gets stop_req) or looks for the
     * stop file after making it (ctl.h) */
    snprintf(path, sizeof path, "%s/%s", ctl_dir, PST_CTL_STOP);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0) return -1;
    close(fd);
    DIR *d = opendir(ctl_dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t l = strlen(e->d_name);
        if (l < 5 || strcmp(e->d_name + l - 4, ".ctl")) continue;
        snprintf(path, sizeof path, "%s/%s", ctl_dir, e->d_name);
        /* as rd_recover.c: never through a link, never waiting on a FIFO,
         * only a regular file of ours with our magic */
        fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
        if (fd < 0) continue;
        struct stat st;
        pst_ctl_hdr_t h;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
            st.st_size >= (off_t)PST_CTL_HDR && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
            !memcmp(h.magic, PST_CTL_MAGIC, 8)) {
            uint64_t one = 1;
            /* the interposer has this page mapped shared: it sees the store */
            if (pwrite(fd, &one, sizeof one, (off_t)offsetof(pst_ctl_hdr_t, stop_req)) == (ssize_t)sizeof one) n++;
        }
        close(fd);
    }
    closedir(d);
    return n;
}
