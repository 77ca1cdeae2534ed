/* truth_die.c — a program that counts its own malloc calls and then dies,
 * so a test can check that a trace of a dying process still holds every
 * call it made, and that tracing does not change how it dies.
 *
 *   truth_die MODE [COUNT_FILE]
 *
 * Before dying it writes "allocs=N\n" (N = malloc calls made, the only
 * allocation function it calls) to fd 3 if fd 3 is open, else to
 * COUNT_FILE if given. It uses no stdio (stdio would malloc its buffer).
 *
 * MODE, after 1000 mallocs of 16..4095 bytes (every other one freed at
 * once, the rest kept):
 *   abort  abort()                           SIGABRT
 *   segv   store through a NULL pointer      SIGSEGV
 *   bus    touch a shared mapping of a file truncated under it   SIGBUS
 *   fpe    integer division by zero          SIGFPE
 *   ill    __builtin_trap()                  SIGILL
 *   term   raise(SIGTERM)  (disposition reset to default first)
 *   int    raise(SIGINT)   (likewise: a background shell ignores SIGINT)
 *   handler  installs its own SIGSEGV handler, which writes
 *            "own_handler=ran\n" to stdout, restores the default action and
 *            returns, so the store faults again and kills the process
 * other modes:
 *   early  3 mallocs right at the start of main, then raise(SIGSEGV): dies
 *          well within a millisecond of starting
 *   exit_thread  the main thread mallocs 24-byte blocks in a loop (each
 *          malloc and its count under one mutex); once it has made 20000,
 *          a second thread calls exit(3). The program's atexit handler takes
 *          the mutex for good (so the main thread makes no further call)
 *          and writes the count: every malloc counted happened before the
 *          process ended.
 * Exit status: that of the death (128+signal as a shell shows it), 3 for
 * exit_thread; 2 on bad usage; 99 if it failed to die.
 */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static void *(*volatile f_malloc)(size_t) = malloc;
static void (*volatile f_free)(void *) = free;

static atomic_uint_fast64_t n_malloc;
static int count_fd = -1;
static const char *count_path;

static void say(int fd, const char *s)
{
    if (fd >= 0 && write(fd, s, strlen(s)) < 0) { /* nothing to do */ }
}

static void report_count(void)
{
    char buf[64];
    int n = snprintf(buf, sizeof buf, "allocs=%llu\n", (unsigned long long)atomic_load(&n_malloc));
    int fd = count_fd;
    if (fd < 0 && count_path) fd = open(count_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && n > 0 && write(fd, buf, (size_t)n) != n) say(2, "truth_die: short write\n");
    if (fd >= 0) fsync(fd);
}

static void *counted_malloc(size_t n)
{
    void *p = f_malloc(n);
    if (!p) { say(2, "truth_die: out of memory\n"); _exit(1); }
    atomic_fetch_add(&n_malloc, 1);
    return p;
}

static void *kept_work[1000];      /* what work() keeps: never freed */
static void *kept_loop[1 << 20];   /* what exit_thread's loop makes */

static void work(void)
{
    uint64_t s = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < 1000; i++) {
        s ^= s << 13; s ^= s >> 7; s ^= s << 17;
        void *p = counted_malloc(16 + (size_t)(s % 4080));
        *(volatile char *)p = (char)i;
        if (i & 1) f_free(p);
        else kept_work[i] = p;
    }
}

static void raise_default(int sig)
{
    sigset_t set;
    signal(sig, SIG_DFL);
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    raise(sig);
}

static void own_handler(int sig)
{
    say(1, "own_handler=ran\n");
    signal(sig, SIG_DFL);      /* returning re-runs the store: the default action kills */
}

/* ---- exit_thread ---------------------------------------------------------- */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
#define EXIT_AFTER 20000
#define MAX_LOOP (1 << 20)

static void at_exit_count(void)
{
    pthread_mutex_lock(&mu);   /* never released: the main thread stops here */
    report_count();
}

static void *exiter(void *arg)
{
    (void)arg;
    struct timespec ts = { 0, 100000 };
    while (atomic_load(&n_malloc) < EXIT_AFTER) nanosleep(&ts, NULL);
    exit(3);
}

static void exit_thread(void)
{
    atexit(at_exit_count);
    pthread_t th;
    if (pthread_create(&th, NULL, exiter, NULL)) { say(2, "truth_die: pthread_create failed\n"); _exit(1); }
    for (int i = 0; i < MAX_LOOP; i++) {
        pthread_mutex_lock(&mu);
        kept_loop[i] = counted_malloc(24);
        pthread_mutex_unlock(&mu);
    }
    for (;;) pause();          /* the exiting thread ends the process */
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) { say(2, "usage: truth_die MODE [COUNT_FILE]\n"); return 2; }
    const char *mode = argv[1];
    if (fcntl(3, F_GETFD) != -1) count_fd = 3;
    if (argc > 2) count_path = argv[2];

    if (!strcmp(mode, "early")) {
        for (int i = 0; i < 3; i++) *(volatile char *)counted_malloc(32 + (size_t)i) = 1;
        report_count();
        raise_default(SIGSEGV);
        return 99;
    }
    if (!strcmp(mode, "exit_thread")) { exit_thread(); return 99; }

    static const char *const modes[] = { "abort", "segv", "bus", "fpe", "ill", "term", "int", "handler" };
    int known = 0;
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) known |= !strcmp(mode, modes[i]);
    if (!known) { say(2, "truth_die: unknown mode\n"); return 2; }

    if (!strcmp(mode, "handler")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = own_handler;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, NULL);
    }
    int bus_fd = -1;
    char *bus_map = NULL;
    long page = sysconf(_SC_PAGESIZE);
    if (!strcmp(mode, "bus")) {
        char path[4096];
        const char *dir = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/truth_die.XXXXXX", dir && *dir ? dir : "/tmp");
        bus_fd = mkstemp(path);
        if (bus_fd < 0 || unlink(path) || ftruncate(bus_fd, page)) { say(2, "truth_die: temp file\n"); return 1; }
        bus_map = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, bus_fd, 0);
        if (bus_map == MAP_FAILED) { say(2, "truth_die: mmap\n"); return 1; }
    }

    work();
    report_count();

    if (!strcmp(mode, "abort")) abort();
    if (!strcmp(mode, "segv") || !strcmp(mode, "handler")) {
        int *volatile bad = NULL;
        *bad = 1;
    }
    if (!strcmp(mode, "bus")) {
        if (ftruncate(bus_fd, 0)) { say(2, "truth_die: ftruncate\n"); return 1; }
        *(volatile char *)bus_map = 1;
    }
    if (!strcmp(mode, "fpe")) {
        volatile int zero = 0, one = 1;
        volatile int r = one / zero;
        (void)r;
    }
    if (!strcmp(mode, "ill")) __builtin_trap();
    if (!strcmp(mode, "term")) raise_default(SIGTERM);
    if (!strcmp(mode, "int")) raise_default(SIGINT);
    say(2, "truth_die: still alive\n");
    return 99;
}
