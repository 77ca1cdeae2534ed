/* pre_hazards.c — programs that once broke the interposer, one per mode:
 *
 *   pre_hazards bigids    4 threads emit KVB_FREE events of 4096 block ids
 *                         through the event API (a record longer than the
 *                         ring's slack wrote past its end)
 *   pre_hazards xfork N   N children made with _Fork(), which runs no atfork
 *                         handlers, while another thread allocates (children
 *                         inherited the tracer's locks and the parent's file)
 *   pre_hazards errno     unlinks its own trace and closes every fd with a
 *                         raw syscall, then checks that free() leaves errno
 *                         alone while the tracer cannot write
 *   pre_hazards fsize     sets RLIMIT_FSIZE to 1 MiB and allocates enough for
 *                         a larger trace (the tracer's writes raised SIGXFSZ)
 *   pre_hazards execfail  two threads exec a missing file 500 times each,
 *                         then fork (a shared "exec holds the locks" flag
 *                         leaked the locks)
 *
 * Each prints one line and exits 0 when the program saw nothing wrong; the
 * integration script checks the exit, a time limit, and the trace.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

extern pid_t _Fork(void);

static void *volatile sink;
static const ps_api_t *api;
static uint32_t ids[4096];

/* The block is freed through a local, never by reading sink back: sink is
 * shared, and execfail runs churn in two threads at once (the tracer's
 * exec lock releases them together), so a thread that read it back could
 * free the other thread's block: a double free of the program's own
 * (glibc: "double free or corruption (fasttop)" at thread exit). */
static void churn(int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        void *p = malloc(size);
        sink = p;               /* a used pointer: the pair cannot be elided */
        free(p);
    }
}

static void *emit_ids(void *arg)
{
    (void)arg;
    for (int k = 0; k < 50; k++) {
        ps_event_t ev = { .type = PS_KVB_FREE, .n_fields = 3, .f = { 1, (uint64_t)k, 0 },
                          .ids = ids, .n_ids = 4096 };
        api->emit(&ev);
    }
    return NULL;
}

/* malloc+free pairs; how many frees changed errno (a hook must not).
 * spread: sizes drawn at random up to 64 KiB, so the trace does not
 * compress to nothing (format 1.5 compresses chunks). */
static long frees_changing_errno(long n, int spread)
{
    long changed = 0;
    uint64_t x = 88172645463325252ull;
    for (long i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        void *p = malloc(spread ? 1 + (size_t)(x & 0xffff) : 100);
        sink = p;               /* a used pointer: the pair cannot be elided */
        errno = 0;
        free(p);
        if (errno) changed++;
    }
    return changed;
}

static volatile int stop;
static void *allocate(void *arg)
{
    (void)arg;
    while (!stop) churn(1000, 64);
    return NULL;
}

static void *exec_missing(void *arg)
{
    (void)arg;
    char *argv[] = { "x", NULL };
    for (int i = 0; i < 500; i++) {
        execv("/nonexistent/pre_hazards", argv);
        churn(2, 10);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (!strcmp(mode, "bigids")) {
        api = dlsym(RTLD_DEFAULT, "poolscope_api");
        if (!api) { puts("bigids: no tracer"); return 1; }
        for (int i = 0; i < 4096; i++) ids[i] = (i & 1) ? 0xffffffffu : (uint32_t)i;
        pthread_t t[4];
        for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, emit_ids, NULL);
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        churn(10000, 48);
        puts("bigids: ok");
        return 0;
    }
    if (!strcmp(mode, "xfork")) {
        int n = argc > 2 ? atoi(argv[2]) : 50;
        pthread_t t;
        pthread_create(&t, NULL, allocate, NULL);
        for (int k = 0; k < n; k++) {
            usleep(500);
            pid_t c = _Fork();
            if (c == 0) { churn(2000, 32); _exit(0); }
            int st;
            if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st)) {
                printf("xfork: child %d failed at %d\n", (int)c, k);
                return 1;
            }
        }
        stop = 1;
        pthread_join(t, NULL);
        puts("xfork: ok");
        return 0;
    }
    if (!strcmp(mode, "errno")) {
        const char *out = getenv("POOLSCOPE_OUT");
        if (out) unlink(out);
        syscall(SYS_close_range, 3u, ~0u, 0u);
        long changed = frees_changing_errno(200000, 0);
        printf("errno: changed %ld times\n", changed);
        return changed != 0;
    }
    if (!strcmp(mode, "fsize")) {
        struct rlimit rl = { 1 << 20, 1 << 20 };
        setrlimit(RLIMIT_FSIZE, &rl);
        long changed = frees_changing_errno(1000000, 1);   /* ~4 MB of trace, > 2 MB compressed */
        printf("fsize: errno changed %ld times\n", changed);
        return changed != 0;
    }
    if (!strcmp(mode, "execfail")) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, exec_missing, NULL);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        pid_t c = fork();
        if (c == 0) _exit(0);
        int st;
        waitpid(c, &st, 0);
        puts("execfail: ok");
        return 0;
    }
    fprintf(stderr, "usage: pre_hazards bigids|xfork N|errno|fsize|execfail\n");
    return 2;
}
