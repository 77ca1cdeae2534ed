/* storm.c — process, thread and signal shapes the tracer must survive and
 * count exactly. Each mode counts its own allocations of one marked size
 * (STORM_SIZE, or STORM_SIG_SIZE in a signal handler) so a test can compare
 * them with the trace: pstdump --size N prints how many the trace holds.
 *
 *   storm fork T C A     T threads each fork C children, one at a time; a
 *                        child makes A marked malloc/free pairs and _exits;
 *                        each thread makes A pairs of its own too. Beside
 *                        them one thread starts and joins short-lived
 *                        threads that allocate (the tracer registers and
 *                        retires their records while children are born),
 *                        and STORM_IDLE threads (default 0) sit registered
 *                        and asleep, so each child has that many more
 *                        records to drop. Prints children= killed= failed=
 *                        parent_marked=
 *   storm exec T C A     the same, but each child execs `storm leaf A`
 *   storm leaf A         A marked pairs, exit 0 (an exec'd child)
 *   storm signal N US    the main thread maps and unmaps 64 KiB N times
 *                        while a timer sends it a signal every US
 *                        microseconds; the handler makes one marked pair
 *                        (malloc in a handler interrupting mmap/munmap is
 *                        safe: no allocator lock is held there). Prints
 *                        handler_marked= and signals=
 *   storm dlopen T N     T threads each dlopen/dlclose libm N times and
 *                        make one marked pair per round. Prints
 *                        parent_marked=
 *
 * Exit 0 unless a child failed or was killed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STORM_SIZE     4242
#define STORM_SIG_SIZE 4243

static void *volatile sink;
static int n_child, n_allocs, n_rounds;
static const char *self_path;
static int exec_mode;
static unsigned long killed, failed, children, marked;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void pairs(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = malloc(STORM_SIZE);
        sink = p;
        free(p);
    }
}

static void *forker(void *arg)
{
    (void)arg;
    unsigned long k = 0, f = 0, c = 0;
    for (int i = 0; i < n_child; i++) {
        pid_t pid = fork();
        if (pid < 0) { f++; continue; }
        if (pid == 0) {
            if (exec_mode) {
                char a[16];
                snprintf(a, sizeof a, "%d", n_allocs);
                execl(self_path, self_path, "leaf", a, (char *)NULL);
                _exit(127);
            }
            pairs(n_allocs);
            _exit(0);
        }
        c++;
        int st;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        if (WIFSIGNALED(st)) k++;
        else if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) f++;
    }
    pairs(n_allocs);
    pthread_mutex_lock(&mu);
    killed += k; failed += f; children += c; marked += (unsigned long)n_allocs;
    pthread_mutex_unlock(&mu);
    return NULL;
}

static void *opener(void *arg)
{
    (void)arg;
    for (int i = 0; i < n_rounds; i++) {
        void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
        pairs(1);
        if (h) dlclose(h);
    }
    pthread_mutex_lock(&mu);
    marked += (unsigned long)n_rounds;
    pthread_mutex_unlock(&mu);
    return NULL;
}

static volatile int forking_done;

static void *short_lived(void *arg)
{
    (void)arg;
    void *p = malloc(16);   /* freed through the local: sink is shared (pairs()) */
    sink = p;
    free(p);
    return NULL;
}

static void *churner(void *arg)
{
    (void)arg;
    while (!forking_done) {
        pthread_t th;
        if (pthread_create(&th, NULL, short_lived, NULL) == 0) pthread_join(th, NULL);
    }
    return NULL;
}

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER;

static void *idler(void *arg)
{
    (void)arg;
    void *p = malloc(16);   /* registered with the tracer; freed through the local, */
    sink = p;               /* since idlers start together and sink is shared */
    free(p);
    pthread_mutex_lock(&idle_mu);
    while (!forking_done) pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
    return NULL;
}

static int run_threads(int nt, void *(*fn)(void *))
{
    pthread_t th[256], ch, idle[1024];
    if (nt > 256) nt = 256;
    int n_idle = 0, want_idle = fn == forker && getenv("STORM_IDLE") ? atoi(getenv("STORM_IDLE")) : 0;
    while (n_idle < want_idle && n_idle < 1024 && pthread_create(&idle[n_idle], NULL, idler, NULL) == 0) n_idle++;
    int churn = fn == forker && pthread_create(&ch, NULL, churner, NULL) == 0;
    for (int i = 0; i < nt; i++)
        if (pthread_create(&th[i], NULL, fn, NULL) != 0) return -1;
    for (int i = 0; i < nt; i++) pthread_join(th[i], NULL);
    pthread_mutex_lock(&idle_mu);
    forking_done = 1;
    pthread_cond_broadcast(&idle_cv);
    pthread_mutex_unlock(&idle_mu);
    if (churn) pthread_join(ch, NULL);
    for (int i = 0; i < n_idle; i++) pthread_join(idle[i], NULL);
    return 0;
}

static volatile sig_atomic_t sig_marked, sig_count;

static void on_signal(int s)
{
    (void)s;
    int e = errno;
    void *p = malloc(STORM_SIG_SIZE);
    sink = p;
    free(p);
    sig_marked++;
    sig_count++;
    errno = e;
}

static int signal_mode(long n, long us)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, NULL);
    /* a timer aimed at this thread alone (not at the tracer's) */
    struct sigevent sev;
    memset(&sev, 0, sizeof sev);
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = SIGUSR1;
    sev._sigev_un._tid = (pid_t)syscall(SYS_gettid);
    timer_t tm;
    if (timer_create(CLOCK_MONOTONIC, &sev, &tm) != 0) { perror("timer_create"); return 1; }
    struct itimerspec its = { { 0, us * 1000 }, { 0, us * 1000 } };
    timer_settime(tm, 0, &its, NULL);
    for (long i = 0; i < n; i++) {
        void *m = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (m == MAP_FAILED) return 1;
        ((volatile char *)m)[0] = 1;
        munmap(m, 64 << 10);
    }
    timer_delete(tm);
    signal(SIGUSR1, SIG_IGN);
    printf("handler_marked=%ld\nsignals=%ld\n", (long)sig_marked, (long)sig_count);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    self_path = argv[0];
    if (!strcmp(mode, "leaf") && argc > 2) { pairs(atoi(argv[2])); return 0; }
    if (!strcmp(mode, "signal") && argc > 3) return signal_mode(atol(argv[2]), atol(argv[3]));
    if (!strcmp(mode, "dlopen") && argc > 3) {
        n_rounds = atoi(argv[3]);
        if (run_threads(atoi(argv[2]), opener) != 0) return 1;
        printf("parent_marked=%lu\n", marked);
        return 0;
    }
    if ((!strcmp(mode, "fork") || !strcmp(mode, "exec")) && argc > 4) {
        exec_mode = !strcmp(mode, "exec");
        n_child = atoi(argv[3]);
        n_allocs = atoi(argv[4]);
        if (run_threads(atoi(argv[2]), forker) != 0) return 1;
        printf("children=%lu\nkilled=%lu\nfailed=%lu\nparent_marked=%lu\n", children, killed, failed, marked);
        fflush(stdout);
        return killed || failed ? 1 : 0;
    }
    fprintf(stderr, "usage: storm fork|exec T C A | leaf A | signal N US | dlopen T N\n");
    return 2;
}
