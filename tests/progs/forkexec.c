/* forkexec.c — process shapes the tracer must follow, each image doing a
 * little allocation of its own:
 *
 *   forkexec fork        fork; parent and child each allocate        (2 images)
 *   forkexec forkexec    fork, the child execs `forkexec leaf`        (3 images:
 *                        parent, child before exec, the exec'd leaf)
 *   forkexec spawn       posix_spawn of `forkexec leaf`               (2 images)
 *   forkexec chain N     exec itself N times, `chain N-1` .. `chain 0` (N+1 images,
 *                        one pid)
 *   forkexec leaf        allocate and exit
 *   forkexec nofile N    lower RLIMIT_NOFILE to 3 (0-2 open: no descriptor
 *                        left), then fork N children that allocate and exit:
 *                        none can open a trace (1 image traced); prints
 *                        "child=PID" for each
 *
 * Prints "images=K" (the number of process images the mode makes) from the
 * first image only, and exits non-zero if a child failed.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static void *volatile sink;

static void allocate(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = malloc(32 + (size_t)i);
        sink = p;
        free(p);
    }
}

static int wait_ok(pid_t pid)
{
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return 0;
    return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static const char *self(void)
{
    static char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    if (n <= 0) return "/proc/self/exe";
    buf[n] = 0;
    return buf;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    allocate(100);
    if (!strcmp(mode, "leaf")) {
        return 0;
    }
    if (!strcmp(mode, "fork")) {
        printf("images=2\n");
        fflush(stdout);
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) { allocate(50); _exit(0); }
        allocate(50);
        return wait_ok(pid) ? 0 : 1;
    }
    if (!strcmp(mode, "forkexec")) {
        printf("images=3\n");
        fflush(stdout);
        const char *exe = self();
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            allocate(10);
            execl(exe, exe, "leaf", (char *)NULL);
            _exit(127);
        }
        return wait_ok(pid) ? 0 : 1;
    }
    if (!strcmp(mode, "spawn")) {
        printf("images=2\n");
        fflush(stdout);
        const char *exe = self();
        char *args[] = { (char *)exe, (char *)"leaf", NULL };
        pid_t pid;
        int rc = posix_spawn(&pid, exe, NULL, NULL, args, environ);
        if (rc) { fprintf(stderr, "posix_spawn: %s\n", strerror(rc)); return 1; }
        return wait_ok(pid) ? 0 : 1;
    }
    if (!strcmp(mode, "chain") && argc > 2) {
        int n = atoi(argv[2]);
        if (argc == 3) {   /* the first image: argv has no marker yet */
            printf("images=%d\n", n + 1);
            fflush(stdout);
        }
        if (n <= 0) return 0;
        char next[16];
        snprintf(next, sizeof next, "%d", n - 1);
        const char *exe = self();
        execl(exe, exe, "chain", next, "more", (char *)NULL);
        perror("execl");
        return 1;
    }
    if (!strcmp(mode, "nofile") && argc > 2) {
        int n = atoi(argv[2]);
        printf("images=1\n");
        /* 0, 1 and 2 taken, so that no open can succeed under the limit */
        for (int fd = 0; fd < 3; fd++)
            if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDWR) != fd) { perror("open"); return 1; }
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0) { perror("getrlimit"); return 1; }
        rl.rlim_cur = 3;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0) { perror("setrlimit"); return 1; }
        fflush(stdout);
        int ok = 1;
        for (int i = 0; i < n; i++) {
            pid_t pid = fork();
            if (pid < 0) { perror("fork"); return 1; }
            if (pid == 0) { allocate(20); _exit(0); }
            ok &= wait_ok(pid);
            printf("child=%d\n", (int)pid);
        }
        allocate(10);
        return ok ? 0 : 1;
    }
    fprintf(stderr, "usage: forkexec fork|forkexec|spawn|chain N|leaf|nofile N\n");
    return 2;
}
