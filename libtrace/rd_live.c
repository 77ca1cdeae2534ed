/* rd_live.c — is a trace still being written? (reader.h, pst_being_written)
 *
 * A trace without END is either cut short (its writer died: SIGKILL, a
 * power cut) or still being written (the program runs on: `report` and
 * `top` read it up to its last complete chunk). The file itself cannot
 * tell the two apart, and a lock would not either: the interposer moves
 * its descriptor when the program closes a range of fds (a dup and close
 * that drops a POSIX lock). So the writer is asked through /proc: the
 * header's pid holds a descriptor to this very file (device and inode).
 */
#include <dirent.h>
#include <stdio.h>
#include <sys/stat.h>

#include "poolscope/reader.h"

int pst_being_written(const char *path, uint64_t pid)
{
    struct stat want, st;
    if (!path || !pid || pid > 0x7fffffffu || stat(path, &want) != 0) return 0;
    char dir[64], fd[64 + 256];
    snprintf(dir, sizeof dir, "/proc/%llu/fd", (unsigned long long)pid);
    DIR *d = opendir(dir);
    if (!d) return 0;   /* gone, or not ours to look at */
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(fd, sizeof fd, "%s/%s", dir, e->d_name);
        found = stat(fd, &st) == 0 && st.st_dev == want.st_dev && st.st_ino == want.st_ino;
    }
    closedir(d);
    return found;
}
