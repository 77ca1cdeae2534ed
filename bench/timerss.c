/* timerss.c — run a command and write what it cost: wall-clock time, CPU
 * time (user, sys) and peak RSS, from wait4(2). The benchmark scripts use it
 * where GNU time would do, since GNU time is not among the project's
 * dependencies.
 *
 *   timerss -o FILE CMD [ARGS...]
 *
 * FILE gets one line "wall_s user_s sys_s maxrss_kib status" (appended, so
 * one file can collect the rounds; seconds with 6 decimals). The command's
 * stdin, stdout and stderr are this program's own, so its output can be
 * redirected apart from the figures. CPU time and peak RSS are the kernel's
 * for the child and every descendant it waited for (a helper process the
 * command runs counts); peak RSS is the largest of them, not a sum.
 *
 * Exit: the command's status (128+N if signal N killed it), 127 if it could
 * not be run, 2 for bad usage.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double tv_s(struct timeval tv)
{
    return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
    if (argc < 4 || strcmp(argv[1], "-o") != 0) {
        fprintf(stderr, "usage: timerss -o FILE CMD [ARGS...]\n");
        return 2;
    }
    /* Opened before the fork so that a bad path fails before the command
     * runs, not after a minute of it. */
    FILE *out = fopen(argv[2], "a");
    if (!out) {
        fprintf(stderr, "timerss: %s: %s\n", argv[2], strerror(errno));
        return 2;
    }
    double t0 = now_s();
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "timerss: fork: %s\n", strerror(errno));
        return 2;
    }
    if (pid == 0) {
        execvp(argv[3], argv + 3);
        fprintf(stderr, "timerss: %s: %s\n", argv[3], strerror(errno));
        _exit(127);
    }
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &st, 0, &ru) < 0) {
        if (errno != EINTR) {
            fprintf(stderr, "timerss: wait4: %s\n", strerror(errno));
            return 2;
        }
    }
    double wall = now_s() - t0;
    int status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    fprintf(out, "%.6f %.6f %.6f %ld %d\n", wall, tv_s(ru.ru_utime), tv_s(ru.ru_stime),
            ru.ru_maxrss, status);
    if (fclose(out) != 0) {
        fprintf(stderr, "timerss: %s: %s\n", argv[2], strerror(errno));
        return 2;
    }
    return status;
}
