/* closefds.c — a program that closes every file descriptor it has (the
 * tracer's included) and then opens files of its own, which take the lowest
 * numbers, the ones the tracer's descriptors had.
 *
 *   closefds DIR
 *
 * It closes fds 3.. with close_range(2), then 0..1023 with a raw close
 * syscall loop (so even a close() wrapper cannot see it), then repeatedly
 * allocates (enough to fill the tracer's buffers several times, with pauses
 * longer than its flush period) and writes
 * lines "closefds line N" to DIR/own.0 .. DIR/own.3, then dup2s own.0 onto
 * every descriptor from 64 to 1023. own.3 stays open until
 * exit, so the tracer's last flush happens while it is open. A tracer that
 * wrote through a stale descriptor would put its bytes into these files;
 * the test checks they hold only our lines (LINES_PER_FILE of them).
 * Exit 0 unless a system call of ours failed (stderr is gone: the exit code
 * says which step: 10+ open, 20+ write).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define LINES_PER_FILE 2000
#define N_FILES 4

static void *volatile sink;

static void churn(int n)
{
    void *keep[64] = { 0 };
    for (int i = 0; i < n; i++) {
        int k = i & 63;
        free(keep[k]);
        keep[k] = malloc(24 + (size_t)(i % 500));
        sink = keep[k];
    }
    for (int k = 0; k < 64; k++) free(keep[k]);
}

int main(int argc, char **argv)
{
    if (argc != 2) return 2;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", argv[1]);
    churn(1000);

#ifdef SYS_close_range
    syscall(SYS_close_range, 3u, ~0u, 0u);
#endif
    for (int fd = 0; fd < 1024; fd++) syscall(SYS_close, fd);

    int fds[N_FILES];
    for (int f = 0; f < N_FILES; f++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/own.%d", dir, f);
        fds[f] = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fds[f] < 0) return 10 + f;
    }
    for (int line = 0; line < LINES_PER_FILE; line++) {
        for (int f = 0; f < N_FILES; f++) {
            char buf[64];
            int n = snprintf(buf, sizeof buf, "closefds line %d\n", line);
            if (write(fds[f], buf, (size_t)n) != n) return 20 + f;
        }
        churn(50);    /* 100k heap events in all: several size-triggered flushes */
        if (line % 500 == 499) usleep(60000);   /* and timer flushes (every 50 ms) */
    }
    /* Then put our own file on every high descriptor number, where a tracer
     * keeps its fd: through libc's dup2 (which a tracer can see) for the
     * even numbers, through the raw syscall (which it cannot) for the odd.
     * A tracer writing through its old number would now write into own.0. */
    for (int fd = 64; fd < 1024; fd++) {
        if (fd == fds[0]) continue;
        if (fd & 1) syscall(SYS_dup2, fds[0], fd);
        else dup2(fds[0], fd);
    }
    churn(20000);
    usleep(60000);                            /* a timer flush after the dup2s */
    for (int f = 0; f < N_FILES - 1; f++) close(fds[f]);
    churn(10000);
    return 0;   /* own.3 still open: the tracer's exit flush happens now */
}
