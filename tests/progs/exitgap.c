/* exitgap.c — how long a command goes on after its program said goodbye.
 *
 *   exitgap CMD [ARGS...]
 *
 * Runs CMD with its stdout on a pipe. The first bytes on the pipe mark the
 * moment the program is exiting (tests/progs/churn writes its one line just
 * before it returns from main); EOF, when CMD and everything it started have
 * closed the pipe, and CMD's exit mark the end. What CMD wrote is copied to
 * our stdout, then one line "exit_gap_ms=X" (milliseconds, one decimal).
 * Exits with CMD's status (128+N if signal N killed it).
 *
 * One process takes both times, so no process start sits between them:
 * `poolscope record -- churn` under exitgap measures what record does after
 * the program's exit (waiting, the summary) and nothing else.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: exitgap CMD [ARGS...]\n");
        return 2;
    }
    int fd[2];
    if (pipe(fd)) { perror("exitgap: pipe"); return 2; }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) { perror("exitgap: fork"); return 2; }
    if (pid == 0) {
        close(fd[0]);
        if (dup2(fd[1], 1) < 0) _exit(126);
        close(fd[1]);
        execvp(argv[1], argv + 1);
        perror("exitgap: exec");
        _exit(127);
    }
    close(fd[1]);
    char buf[65536];
    double t0 = 0;
    for (;;) {
        ssize_t n = read(fd[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        if (t0 == 0) t0 = now_ms();
        if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n) break;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    double t1 = now_ms();
    close(fd[0]);
    if (t0 == 0) t0 = t1;   /* it wrote nothing: no gap to speak of */
    printf("exit_gap_ms=%.1f\n", t1 - t0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 1;
}
