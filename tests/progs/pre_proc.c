/* pre_proc — process-level scenarios for the interposer.
 *
 *   pre_proc fork          parent and child allocate; child exits
 *   pre_proc forkexec      child execs `pre_proc leaf`
 *   pre_proc vfork         vfork + exec (vfork is a fork under the tracer)
 *   pre_proc spawn         posix_spawn of `pre_proc leaf`, parent keeps allocating
 *   pre_proc system        system("pre_proc leaf") (glibc's internal spawn)
 *   pre_proc chain N       exec itself N times (an exec chain)
 *   pre_proc execfail      exec of a missing file, then keep allocating
 *   pre_proc closeall      close_range(3, ~0U), a raw close syscall loop, then
 *                          open files and write them; checks they hold only our bytes
 *   pre_proc sleep MS      allocate for MS ms, printing the count every 50 ms (SIGKILL test)
 *   pre_proc leaf          allocate a little and exit
 * Every mode allocates a known number of 4242-byte blocks per image.
 */
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;
static char self[4096];

static void *volatile sink;   /* keeps gcc from removing malloc/free pairs */

static void churn(int n)
{
    for (int i = 0; i < n; i++) {
        sink = malloc(4242);
        free(sink);
    }
}

static int wait_ok(pid_t pid)
{
    int st = 0;
    if (waitpid(pid, &st, 0) < 0) return 1;
    return !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(int argc, char **argv)
{
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    self[n > 0 ? n : 0] = 0;
    const char *m = argc > 1 ? argv[1] : "leaf";
    churn(100);
    if (!strcmp(m, "leaf")) return 0;
    if (!strcmp(m, "fork")) {
        pid_t p = fork();
        if (p == 0) { churn(50); exit(0); }
        churn(100);
        return wait_ok(p);
    }
    if (!strcmp(m, "forkexec") || !strcmp(m, "vfork")) {
        pid_t p = !strcmp(m, "vfork") ? vfork() : fork();
        if (p == 0) { execl(self, self, "leaf", (char *)NULL); _exit(127); }
        churn(100);
        return wait_ok(p);
    }
    if (!strcmp(m, "spawn")) {
        pid_t p;
        char *av[] = { self, "leaf", NULL };
        if (posix_spawn(&p, self, NULL, NULL, av, environ) != 0) return 1;
        churn(100);
        return wait_ok(p);
    }
    if (!strcmp(m, "system")) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "%s leaf", self);
        return system(cmd) != 0;
    }
    if (!strcmp(m, "chain")) {
        int left = argc > 2 ? atoi(argv[2]) : 0;
        if (left <= 0) return 0;
        char num[16];
        snprintf(num, sizeof num, "%d", left - 1);
        execl(self, self, "chain", num, (char *)NULL);
        return 1;
    }
    if (!strcmp(m, "execfail")) {
        execl("/nonexistent/prog", "x", (char *)NULL);
        churn(100);
        return 0;
    }
    if (!strcmp(m, "closeall")) {
        close_range(3, ~0U, 0);
        for (int fd = 3; fd < 4096; fd++) syscall(SYS_close, fd);
        churn(1000);
        char path[64];
        int bad = 0;
        for (int k = 0; k < 20; k++) {
            snprintf(path, sizeof path, "/tmp/pre_proc_%d_%d", (int)getpid(), k);
            int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
            if (fd < 0) return 1;
            churn(5000);
            struct timespec d = { 0, 60 * 1000 * 1000 };
            if (k == 0) nanosleep(&d, NULL);   /* let the flusher write */
            if (write(fd, "program", 7) != 7) bad = 1;
            close(fd);
            fd = open(path, O_RDONLY);
            char buf[64];
            ssize_t r = read(fd, buf, sizeof buf);
            if (r != 7 || memcmp(buf, "program", 7)) bad = 1;
            close(fd);
            unlink(path);
        }
        return bad;
    }
    if (!strcmp(m, "sleep")) {
        long ms = argc > 2 ? atol(argv[2]) : 1000;
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        long count = 100, last = 0;
        for (;;) {
            churn(100);
            count += 100;
            clock_gettime(CLOCK_MONOTONIC, &b);
            long el = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
            if (el / 50 != last) {
                last = el / 50;
                printf("%ld\n", count);
                fflush(stdout);
            }
            if (el > ms) break;
            struct timespec d = { 0, 1000 * 1000 };
            nanosleep(&d, NULL);
        }
        return 0;
    }
    return 2;
}
