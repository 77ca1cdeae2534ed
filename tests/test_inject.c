/* test_inject.c — calling a function inside another process
 * (libtrace/inject.c), the way `poolscope attach` loads the tracer.
 *
 * Each test forks a child that does one kind of thing a real program does
 * when it is attached (sleeps in a system call, computes with values held
 * in vector registers, allocates without pause, waits on a semaphore and a
 * join, takes a signal) and checks itself; the parent calls one of the
 * child's functions (a fork: the same addresses) through pi_call and reads
 * the child's own verdict from shared memory after it exits.
 */
#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "inject.h"
#include "poolscope/error.h"

/* Under a sanitizer the child is another program: its malloc and its
 * waits are the runtime's interceptors, which has threads of its own, and
 * an instrumented function called at an arbitrary instruction can land
 * inside the runtime. The tests whose child is stopped at such a point are
 * skipped there; the injector's own code still runs under the sanitizer in
 * the others. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

typedef struct shared {
    volatile int ready, stop;
    volatile long called;        /* what the injected function left */
    volatile long sleeps, eintr; /* the sleeper's */
    volatile long rounds, bad;   /* the computing and allocating children's */
    volatile long sig_count, sig_in_call;
    sem_t sem;
} shared_t;

static shared_t *sh;
static volatile int in_call;
static pid_t child;   /* killed after a failed test, so it never outlives us */

static void pause_ms(int ms)
{
    struct timespec d = { ms / 1000, (long)(ms % 1000) * 1000000L };
    while (nanosleep(&d, &d) != 0 && errno == EINTR) {}
}

/* ---- functions the parent calls in the child ------------------------------ */

static long add3(long a, long b, long c)
{
    sh->called = a + b + c;
    return a + b + c;
}

/* Zero every vector register: what dlopen's string functions do to them
 * in a real attach. */
static long clobber_vectors(void)
{
    if (__builtin_cpu_supports("avx"))
        __asm__ volatile("vzeroall" ::: "memory");
    __asm__ volatile("pxor %%xmm8, %%xmm8\n\tpxor %%xmm9, %%xmm9\n\tpxor %%xmm15, %%xmm15"
                     ::: "xmm8", "xmm9", "xmm15");
    sh->called = 1;
    return 1;
}

static long raise_in_call(void)
{
    in_call = 1;
    raise(SIGUSR1);
    in_call = 0;
    sh->called = 2;
    return 2;
}

/* Spins until the child's main thread has made 3 more setresuid calls
 * (2 s at most); how many it made. */
static long wait_for_setxid(void)
{
    long from = sh->rounds;
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        sched_yield();
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while (sh->rounds - from < 3 && (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 2000);
    sh->called = sh->rounds - from;
    return sh->called;
}

/* Spins 4 ms of CPU time on each SIGPROF (every 10 ms of CPU time): a
 * thread stopped at an arbitrary instruction is inside this handler about
 * 40% of the time, loaded machine or not, and the handler has usually
 * interrupted malloc, holding its lock. */
static void on_alrm(int s)
{
    (void)s;
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 4000000L);
    sh->sig_count++;
}

static void on_usr1(int s)
{
    (void)s;
    sh->sig_count++;
    if (in_call) sh->sig_in_call++;
}

/* ---- children --------------------------------------------------------------- */

static void child_sleeper(void)
{
    sh->ready = 1;
    while (!sh->stop) {
        struct timespec d = { 0, 50 * 1000 * 1000 };
        if (nanosleep(&d, NULL) != 0) sh->eintr++;
        sh->sleeps++;
    }
}

/* Holds a pattern in xmm8/xmm9/xmm15 (and the upper halves of ymm8/ymm9
 * where there is AVX) across a spin of about a millisecond, then checks it:
 * an attach that stops it mid-spin must give the registers back. */
static void child_vectors(void)
{
    int avx = __builtin_cpu_supports("avx");
    sh->ready = 1;
    while (!sh->stop) {
        uint64_t in[4] = { 0x0123456789abcdefULL, 0xfedcba9876543210ULL, 0x1111222233334444ULL,
                           0x5555666677778888ULL }, o8[4] = { 0 }, o9[4] = { 0 }, o15[2] = { 0 };
        if (avx) {
            __asm__ volatile("vmovdqu (%3), %%ymm8\n\t"
                             "vmovdqu (%3), %%ymm9\n\t"
                             "movdqu (%3), %%xmm15\n\t"
                             "mov $2000000, %%rcx\n"
                             "1: dec %%rcx\n\t"
                             "jnz 1b\n\t"
                             "vmovdqu %%ymm8, (%0)\n\t"
                             "vmovdqu %%ymm9, (%1)\n\t"
                             "movdqu %%xmm15, (%2)\n\t"
                             "vzeroupper"
                             :: "r"(o8), "r"(o9), "r"(o15), "r"(in)
                             : "rcx", "xmm8", "xmm9", "xmm15", "memory");
        } else {
            __asm__ volatile("movdqu (%3), %%xmm8\n\t"
                             "movdqu (%3), %%xmm9\n\t"
                             "movdqu (%3), %%xmm15\n\t"
                             "mov $2000000, %%rcx\n"
                             "1: dec %%rcx\n\t"
                             "jnz 1b\n\t"
                             "movdqu %%xmm8, (%0)\n\t"
                             "movdqu %%xmm9, (%1)\n\t"
                             "movdqu %%xmm15, (%2)"
                             :: "r"(o8), "r"(o9), "r"(o15), "r"(in)
                             : "rcx", "xmm8", "xmm9", "xmm15", "memory");
            o8[2] = in[2], o8[3] = in[3], o9[2] = in[2], o9[3] = in[3];
        }
        for (int i = 0; i < 4; i++)
            if (o8[i] != in[i] || o9[i] != in[i] || (i < 2 && o15[i] != in[i])) { sh->bad++; break; }
        sh->rounds++;
    }
}

static void *nothing(void *arg) { return arg; }

/* Nothing but malloc and free (as tests/progs/att_tight.c): stopped, it is
 * inside the allocator nearly every time. A thread started and joined
 * first makes glibc's malloc take its arena lock from then on, as in any
 * threaded program: a call made inside malloc would wait for ever. */
static void child_allocator(void)
{
    unsigned char *keep[64] = { 0 };
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0) _exit(3);
    sh->ready = 1;
    for (unsigned long i = 0; !sh->stop; i++) {
        int s = (int)(i & 63);
        if (keep[s] && keep[s][0] != (unsigned char)s) sh->bad++;
        free(keep[s]);
        keep[s] = malloc(2048 + (i & 4095));   /* past the tcache: under the arena's lock */
        if (!keep[s]) abort();
        keep[s][0] = (unsigned char)s;
        sh->rounds++;
    }
    for (int s = 0; s < 64; s++) free(keep[s]);
}

static void *sem_waiter(void *arg)
{
    (void)arg;
    while (sem_wait(&sh->sem) != 0) sh->eintr++;
    return NULL;
}

/* Every thread asleep in futex: one in sem_wait, the main one in
 * pthread_join. */
static void child_futex(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, sem_waiter, NULL) != 0) _exit(3);
    sh->ready = 1;
    pthread_join(t, NULL);
}

static void *setxid_thread(void *arg)
{
    (void)arg;
    while (!sh->stop) {
        if (setresuid((uid_t)-1, (uid_t)-1, (uid_t)-1) != 0) sh->bad++;
        sh->rounds++;
    }
    return NULL;
}

/* The main thread asleep, another calling setresuid without pause: glibc
 * makes every thread run its SIGSETXID handler for each call, and the
 * caller waits for all of them (holding the loader's stack-cache lock).
 * The main thread is the one taken (the first, and asleep). */
static void child_setxid(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, setxid_thread, NULL) != 0) _exit(3);
    child_sleeper();
    pthread_join(t, NULL);
}

static void child_handler(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alrm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGPROF, &sa, NULL);
    struct itimerval it = { { 0, 10000 }, { 0, 10000 } };
    setitimer(ITIMER_PROF, &it, NULL);
    child_allocator();
}

/* A thread in recv on a socket with a receive timeout: stopped, the kernel
 * ends that recv with EINTR (a timed socket sleep is not restarted). */
static int sock[2];
static void *receiver(void *arg)
{
    (void)arg;
    struct timeval tv = { 30, 0 };
    setsockopt(sock[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char b;
    sh->ready = 1;
    ssize_t n = recv(sock[0], &b, 1, 0);
    if (n != 1) sh->eintr = n < 0 ? errno : 1000;
    sh->rounds = n;
    return NULL;
}

static void child_recv(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, receiver, NULL) != 0) _exit(3);
    pthread_join(t, NULL);
}

/* Ignores SIGSEGV; says at the end whether it still does. */
static void child_ignores_segv(void)
{
    signal(SIGSEGV, SIG_IGN);
    child_sleeper();
    struct sigaction now;
    sigaction(SIGSEGV, NULL, &now);
    sh->bad = now.sa_handler != SIG_IGN;
}

static void child_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, NULL);
    child_sleeper();
}

static int traced(pid_t pid)
{
    char fn[64], line[256];
    snprintf(fn, sizeof fn, "/proc/%d/status", (int)pid);
    FILE *f = fopen(fn, "r");
    int t = 0;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "TracerPid:", 10)) t = atoi(line + 10);
    if (f) fclose(f);
    return t;
}

static pid_t start(void (*fn)(void))
{
    memset((void *)sh, 0, offsetof(shared_t, sem));
    sem_init(&sh->sem, 1, 0);
    pid_t c = fork();
    if (c == 0) {
        fn();
        _exit(0);
    }
    assert_true(c > 0);
    child = c;
    for (int i = 0; i < 5000 && !sh->ready; i++) pause_ms(1);
    assert_true(sh->ready);
    pause_ms(30);
    return c;
}

static void finish(pid_t c)
{
    sh->stop = 1;
    sem_post(&sh->sem);
    int st;
    assert_int_equal(waitpid(c, &st, 0), c);
    child = 0;
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static pi_proc_t *open_child(pid_t c)
{
    char msg[PI_MSG_MAX] = "";
    pi_proc_t *p = NULL;
    int rc = pi_open(c, 5000, &p, msg, sizeof msg);
    if (rc != 0) fprintf(stderr, "pi_open: %s\n", msg);
    assert_int_equal(rc, 0);
    return p;
}

static uint64_t call(pi_proc_t *p, void *fn, const uint64_t *args, int n)
{
    char msg[PI_MSG_MAX] = "";
    uint64_t r = 0;
    int rc = pi_call(p, (uint64_t)(uintptr_t)fn, args, n, 10000, &r, msg, sizeof msg);
    if (rc != 0) fprintf(stderr, "pi_call: %s\n", msg);
    assert_int_equal(rc, 0);
    return r;
}

/* ---- tests -------------------------------------------------------------------- */

/* A thread asleep in nanosleep: the call runs, and the sleep goes on as if
 * nothing happened (restarted by the kernel, never EINTR). */
static void test_sleeping_thread_sleep_restarted(void **state)
{
    (void)state;
    pid_t c = start(child_sleeper);
    pi_proc_t *p = open_child(c);
    assert_int_equal(pi_how(p), PI_AT_SYSCALL);
    assert_int_equal(pi_tid(p), c);
    assert_int_equal(call(p, (void *)add3, (uint64_t[]){ 1, 20, 300 }, 3), 321);
    pi_close(p);
    pause_ms(120);
    finish(c);
    assert_int_equal(sh->called, 321);
    assert_true(sh->sleeps >= 2);
    assert_int_equal(sh->eintr, 0);
}

/* Stopped in the middle of a spin that holds values in vector registers,
 * a call that zeroes them: the program sees its values (the whole XSAVE
 * area is put back). */
static void test_vector_registers_given_back(void **state)
{
    (void)state;
    if (SANITIZED) skip();
    pid_t c = start(child_vectors);
    for (int i = 0; i < 5; i++) {
        pi_proc_t *p = open_child(c);
        assert_int_equal(pi_how(p), PI_AT_USER);
        assert_int_equal(call(p, (void *)clobber_vectors, NULL, 0), 1);
        pi_close(p);
        pause_ms(20);
    }
    finish(c);
    assert_int_equal(sh->called, 1);
    assert_true(sh->rounds > 5);
    assert_int_equal(sh->bad, 0);
}

/* A thread that only allocates is let leave malloc before the call, and
 * the call itself allocates: no deadlock (without the step out, the call
 * waits for the lock its own thread holds), no corrupted heap. */
static void test_allocating_thread_stepped_out_of_malloc(void **state)
{
    (void)state;
    if (SANITIZED) skip();
    pid_t c = start(child_allocator);
    for (int i = 0; i < 5; i++) {
        pi_proc_t *p = open_child(c);
        assert_int_equal(pi_how(p), PI_AT_USER);
        uint64_t m = pi_libc_sym(p, "malloc"), f = pi_libc_sym(p, "free");
        assert_true(m && f);
        uint64_t blk = 0;
        char msg[PI_MSG_MAX];
        assert_int_equal(pi_call(p, m, (uint64_t[]){ 100000 }, 1, 10000, &blk, msg, sizeof msg), 0);
        assert_true(blk != 0);
        uint64_t ignored;
        assert_int_equal(pi_call(p, f, (uint64_t[]){ blk }, 1, 10000, &ignored, msg, sizeof msg), 0);
        pi_close(p);
        pause_ms(10);
    }
    finish(c);
    assert_true(sh->rounds > 1000);
    assert_int_equal(sh->bad, 0);
}

/* Every thread in a futex wait (sem_wait, pthread_join): one of them is
 * taken, since waiting for a lock is not holding one. */
static void test_threads_waiting_in_futex(void **state)
{
    (void)state;
    if (SANITIZED) skip();
    pid_t c = start(child_futex);
    pi_proc_t *p = open_child(c);
    assert_int_equal(pi_how(p), PI_AT_SYSCALL);
    assert_int_equal(call(p, (void *)add3, (uint64_t[]){ 4, 5, 6 }, 3), 15);
    pi_close(p);
    finish(c);
    assert_int_equal(sh->called, 15);
    assert_int_equal(sh->eintr, 0);
}

/* A signal that reaches the thread during the call is held and given back
 * after it: its handler runs once, outside the call. */
static void test_signal_during_call_given_back_after(void **state)
{
    (void)state;
    pid_t c = start(child_signal);
    pi_proc_t *p = open_child(c);
    assert_int_equal(call(p, (void *)raise_in_call, NULL, 0), 2);
    pi_close(p);
    pause_ms(150);
    finish(c);
    assert_int_equal(sh->called, 2);
    assert_int_equal(sh->sig_count, 1);
    assert_int_equal(sh->sig_in_call, 0);
}

/* A call in the sleeping thread while the other thread calls setresuid:
 * glibc's SIGSETXID must reach the thread during the call, or the
 * setresuid waits for the call and a call that needs the loader's
 * stack-cache lock (dlopen of a library with TLS) waits for it. */
static void test_setxid_signal_reaches_the_thread_during_a_call(void **state)
{
    (void)state;
    if (SANITIZED) skip();
    pid_t c = start(child_setxid);
    int in_sleeper = 0;
    for (int i = 0; i < 40 && in_sleeper < 3; i++) {   /* (on a busy machine the sleeper is often awake) */
        pi_proc_t *p = open_child(c);
        if (pi_tid(p) == c) {   /* the sleeper (the other one may be taken too) */
            long n = (long)call(p, (void *)wait_for_setxid, NULL, 0);
            pi_close(p);
            assert_true(n >= 3);
            in_sleeper++;
        } else {
            /* the looping thread sleeps only in setresuid's own futex wait,
             * holding the stack-cache lock: never to be taken there */
            int how = pi_how(p);
            pi_close(p);
            assert_int_equal(how, PI_AT_USER);
        }
    }
    finish(c);
    assert_true(in_sleeper > 0);
    assert_int_equal(sh->bad, 0);   /* (its sleeps see EINTR: SIGSETXID's handler, not us) */
}

/* A thread that spends most of its time in a signal handler run over a
 * loop of malloc and free (so over malloc, holding its lock, nearly every
 * time): never taken inside such a handler, so a call that allocates
 * returns. */
static void test_never_inside_a_handler_over_malloc(void **state)
{
    (void)state;
    if (SANITIZED) skip();
    pid_t c = start(child_handler);
    for (int i = 0; i < 12; i++) {
        /* the handler has run since the last attach: it is at work (how
         * soon depends on the CPU the child gets, so wait, up to 10 s) */
        long seen = sh->sig_count;
        for (int k = 0; k < 10000 && sh->sig_count == seen; k++) pause_ms(1);
        assert_true(sh->sig_count > seen);
        pi_proc_t *p = open_child(c);
        uint64_t m = pi_libc_sym(p, "malloc"), f = pi_libc_sym(p, "free"), blk = 0, ignored;
        char msg[PI_MSG_MAX];
        int rc = pi_call(p, m, (uint64_t[]){ 100000 }, 1, 5000, &blk, msg, sizeof msg);
        if (rc != 0) fprintf(stderr, "pi_call: %s\n", msg);
        assert_int_equal(rc, 0);
        assert_int_equal(pi_call(p, f, (uint64_t[]){ blk }, 1, 5000, &ignored, msg, sizeof msg), 0);
        pi_close(p);
    }
    finish(c);
    assert_int_equal(sh->bad, 0);
}

/* Every thread asleep, one in a timed recv: whichever is taken, the recv
 * returns the byte sent after the attach, never EINTR (a sleep our stop
 * cut short is issued again). */
static void test_timed_recv_not_cut_short(void **state)
{
    (void)state;
    if (SANITIZED) skip();
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sock), 0);
    pid_t c = start(child_recv);
    pause_ms(50);
    pi_proc_t *p = open_child(c);
    assert_int_equal(pi_how(p), PI_AT_SYSCALL);
    assert_int_equal(call(p, (void *)add3, (uint64_t[]){ 1, 1, 1 }, 3), 3);
    pi_close(p);
    pause_ms(50);
    assert_int_equal(write(sock[1], "x", 1), 1);
    finish(c);
    close(sock[0]);
    close(sock[1]);
    assert_int_equal(sh->eintr, 0);
    assert_int_equal(sh->rounds, 1);
}

/* A program that ignores SIGSEGV still does after calls (they do not
 * return through a SIGSEGV there: the kernel would reset it to default). */
static void test_ignored_segv_stays_ignored(void **state)
{
    (void)state;
    pid_t c = start(child_ignores_segv);
    pi_proc_t *p = open_child(c);
    assert_int_equal(call(p, (void *)add3, (uint64_t[]){ 2, 2, 2 }, 3), 6);
    pi_close(p);
    finish(c);
    assert_int_equal(sh->called, 6);
    assert_int_equal(sh->bad, 0);
}

/* Symbols: the C library's, and a data symbol of the executable that is
 * not exported (as a program's ps__api). */
long inject_probe_global = 7;
static void test_symbols_of_the_process(void **state)
{
    (void)state;
    pid_t c = start(child_sleeper);
    pi_proc_t *p = open_child(c);
    assert_true(pi_libc_sym(p, "dlopen") != 0);
    assert_int_equal(pi_libc_sym(p, "no_such_function_here"), 0);
    assert_int_equal(pi_data_sym(p, "inject_probe_global"), (uint64_t)(uintptr_t)&inject_probe_global);
    long v = 99;
    assert_int_equal(pi_write(p, (uint64_t)(uintptr_t)&inject_probe_global, &v, sizeof v), 0);
    uint64_t s = pi_put_str(p, "a string for the child");
    assert_true(s != 0);
    char back[64];
    assert_int_equal(pi_read_str(p, s, back, sizeof back), 0);
    assert_string_equal(back, "a string for the child");
    pi_close(p);
    finish(c);
    assert_int_equal(inject_probe_global, 7);   /* the child's copy was written, not ours */
}

/* A process another tracer holds (a debugger): refused as such, at once. */
static void test_traced_by_another(void **state)
{
    (void)state;
    pid_t c = start(child_sleeper);
    pid_t t = fork();
    if (t == 0) {
        if (ptrace(PTRACE_SEIZE, c, NULL, NULL) != 0) _exit(1);
        pause();
        _exit(0);
    }
    for (int i = 0; i < 2000 && !traced(c); i++) pause_ms(1);
    char msg[PI_MSG_MAX] = "";
    pi_proc_t *p = NULL;
    int rc = pi_open(c, 5000, &p, msg, sizeof msg);
    kill(t, SIGKILL);
    waitpid(t, NULL, 0);
    assert_int_equal(rc, PSC_EIO);
    assert_non_null(strstr(msg, "traced already"));
    finish(c);
}

static void test_no_such_process(void **state)
{
    (void)state;
    pid_t c = fork();
    if (c == 0) _exit(0);
    waitpid(c, NULL, 0);
    char msg[PI_MSG_MAX] = "";
    pi_proc_t *p = (pi_proc_t *)1;
    assert_int_equal(pi_open(c, 200, &p, msg, sizeof msg), PSC_EIO);
    assert_null(p);
    assert_non_null(strstr(msg, "maps"));
}

static int kill_child(void **state)
{
    (void)state;
    if (child > 0) {
        /* __WALL: a thread a failed test left traced is ours to reap,
         * or the child's end never comes */
        kill(child, SIGKILL);
        while (waitpid(-1, NULL, __WALL) > 0) {}
        child = 0;
    }
    return 0;
}

int main(void)
{
    sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sleeping_thread_sleep_restarted, kill_child),
        cmocka_unit_test_teardown(test_vector_registers_given_back, kill_child),
        cmocka_unit_test_teardown(test_allocating_thread_stepped_out_of_malloc, kill_child),
        cmocka_unit_test_teardown(test_threads_waiting_in_futex, kill_child),
        cmocka_unit_test_teardown(test_signal_during_call_given_back_after, kill_child),
        cmocka_unit_test_teardown(test_setxid_signal_reaches_the_thread_during_a_call, kill_child),
        cmocka_unit_test_teardown(test_never_inside_a_handler_over_malloc, kill_child),
        cmocka_unit_test_teardown(test_timed_recv_not_cut_short, kill_child),
        cmocka_unit_test_teardown(test_ignored_segv_stays_ignored, kill_child),
        cmocka_unit_test_teardown(test_symbols_of_the_process, kill_child),
        cmocka_unit_test_teardown(test_traced_by_another, kill_child),
        cmocka_unit_test_teardown(test_no_such_process, kill_child),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
