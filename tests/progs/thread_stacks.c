/* thread_stacks.c — thread stacks as mappings of their threads (issue 27,
 * item 9): glibc maps a thread's stack inside pthread_create, where no
 * hook sees it, so the tracer records it from the thread's attributes.
 *
 *   thread_stacks FACTS
 *
 * Phase 1: 7 threads, each created with its own pthread_attr_setstacksize
 * (256 KiB, 512 KiB, ... 1792 KiB), are alive together at a barrier. Each
 * writes down what pthread_getattr_np says of its stack (address, size,
 * guard size); at the barrier the main thread reads /proc/self/maps and,
 * for each thread, adds up the mappings that overlap its block (guard and
 * stack: [addr - guard, addr + size)), accessible ones as committed,
 * PROT_NONE ones as reserved. Thread 5 ends with pthread_exit, the others
 * return; all are joined.
 *
 * Phase 2 (after the joins): an anonymous read-write mapping of half the
 * stacks' summed size and a PROT_NONE one of half their guards' sum, both
 * unmapped again: with the stacks gone at their threads' ends, the peaks
 * stay the stacks' sums; had they stayed, the peaks would be 1.5 times.
 *
 * Phase 3: a thread on a stack the program mapped itself
 * (pthread_attr_setstack: the program's memory, one mmap call, never a
 * thread stack of the tracer's) and a detached thread with a 64 KiB stack,
 * both smaller than phase 1's total, both finished before exit.
 *
 * FACTS gets key=value lines: tN_addr, tN_size, tN_guard (hex address,
 * decimal bytes), maps_committed, maps_reserved (the /proc figures
 * summed), sum_size, sum_guard, user_stack (the address of phase 3's own
 * mapping), user_len, detached_addr/size/guard. stdout: the sizes asked
 * for and their sum (no addresses). Exit 0, 1 when a call failed.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define NT 7

typedef struct info {
    int idx;
    uintptr_t addr;      /* pthread_attr_getstack: the stack's lowest address */
    size_t size, guard;
} info_t;

static pthread_barrier_t bar;
static info_t inf[NT];
static info_t det;
static volatile int det_done;

static int own_stack(info_t *in)
{
    pthread_attr_t a;
    void *addr;
    if (pthread_getattr_np(pthread_self(), &a) != 0) return -1;
    int rc = pthread_attr_getstack(&a, &addr, &in->size) | pthread_attr_getguardsize(&a, &in->guard);
    pthread_attr_destroy(&a);
    in->addr = (uintptr_t)addr;
    return rc;
}

static void *worker(void *p)
{
    info_t *in = p;
    if (own_stack(in) != 0) in->size = 0;
    pthread_barrier_wait(&bar);   /* all alive: the main thread reads /proc/self/maps */
    pthread_barrier_wait(&bar);   /* it has */
    if (in->idx == 5) pthread_exit(NULL);
    return NULL;
}

static void *detached(void *p)
{
    (void)p;
    if (own_stack(&det) != 0) det.size = 0;
    __atomic_store_n(&det_done, 1, __ATOMIC_RELEASE);
    return NULL;
}

static void *on_user_stack(void *p)
{
    *(volatile int *)p = 1;
    return NULL;
}

/* the bytes of /proc/self/maps lines overlapping [lo, hi), accessible and PROT_NONE apart */
static int maps_bytes(uintptr_t lo, uintptr_t hi, uint64_t *committed, uint64_t *reserved)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return -1;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        unsigned long a, b;
        char perm[8];
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perm) != 3) continue;
        uintptr_t s = a > lo ? a : lo, e = b < hi ? b : hi;
        if (s >= e) continue;
        if (!strncmp(perm, "---", 3)) *reserved += e - s;
        else *committed += e - s;
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) { fprintf(stderr, "usage: thread_stacks FACTS\n"); return 2; }
    FILE *facts = fopen(argv[1], "w");
    if (!facts) { perror(argv[1]); return 1; }
    long pg = sysconf(_SC_PAGESIZE);
    pthread_t th[NT];
    pthread_barrier_init(&bar, NULL, NT + 1);
    size_t asked = 0;
    for (int i = 0; i < NT; i++) {
        pthread_attr_t a;
        size_t sz = (size_t)(i + 1) * (256u << 10);
        pthread_attr_init(&a);
        if (pthread_attr_setstacksize(&a, sz) != 0) { printf("FAIL setstacksize %zu\n", sz); return 1; }
        inf[i].idx = i;
        if (pthread_create(&th[i], &a, worker, &inf[i]) != 0) { printf("FAIL pthread_create\n"); return 1; }
        pthread_attr_destroy(&a);
        printf("thread %d: stack size %zu\n", i, sz);
        asked += sz;
    }
    printf("asked in all: %zu\n", asked);
    pthread_barrier_wait(&bar);
    uint64_t mc = 0, mr = 0, ss = 0, sg = 0;
    for (int i = 0; i < NT; i++) {
        if (!inf[i].size) { printf("FAIL pthread_getattr_np\n"); return 1; }
        if (maps_bytes(inf[i].addr - inf[i].guard, inf[i].addr + inf[i].size, &mc, &mr) != 0) {
            printf("FAIL /proc/self/maps\n");
            return 1;
        }
        ss += inf[i].size;
        sg += inf[i].guard;
        fprintf(facts, "t%d_addr=0x%lx\nt%d_size=%zu\nt%d_guard=%zu\n", i, (unsigned long)inf[i].addr,
                i, inf[i].size, i, inf[i].guard);
    }
    pthread_barrier_wait(&bar);
    for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
    fprintf(facts, "maps_committed=%llu\nmaps_reserved=%llu\nsum_size=%llu\nsum_guard=%llu\n",
            (unsigned long long)mc, (unsigned long long)mr, (unsigned long long)ss, (unsigned long long)sg);

    /* phase 2: half the sums, mapped by the program after the joins */
    size_t half_c = (size_t)(ss / 2 + (uint64_t)pg - 1) & ~((size_t)pg - 1);
    size_t half_r = (size_t)(sg / 2 + (uint64_t)pg - 1) & ~((size_t)pg - 1);
    void *c = mmap(NULL, half_c, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *r = half_r ? mmap(NULL, half_r, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : NULL;
    if (c == MAP_FAILED || r == MAP_FAILED) { printf("FAIL mmap\n"); return 1; }
    munmap(c, half_c);
    if (r) munmap(r, half_r);
    fprintf(facts, "half_committed=%zu\nhalf_reserved=%zu\n", half_c, half_r);

    /* phase 3: the program's own stack for a thread, and a detached thread */
    size_t ulen = 128u << 10;
    void *us = mmap(NULL, ulen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (us == MAP_FAILED) { printf("FAIL mmap user stack\n"); return 1; }
    pthread_attr_t ua;
    pthread_attr_init(&ua);
    pthread_attr_setstack(&ua, us, ulen);
    volatile int ran = 0;
    pthread_t ut;
    if (pthread_create(&ut, &ua, on_user_stack, (void *)&ran) != 0) { printf("FAIL user-stack thread\n"); return 1; }
    pthread_attr_destroy(&ua);
    pthread_join(ut, NULL);
    munmap(us, ulen);
    fprintf(facts, "user_stack=0x%lx\nuser_len=%zu\n", (unsigned long)(uintptr_t)us, ulen);

    pthread_attr_t da;
    pthread_attr_init(&da);
    pthread_attr_setstacksize(&da, 64u << 10);
    pthread_attr_setdetachstate(&da, PTHREAD_CREATE_DETACHED);
    pthread_t dt;
    if (pthread_create(&dt, &da, detached, NULL) != 0) { printf("FAIL detached thread\n"); return 1; }
    pthread_attr_destroy(&da);
    while (!__atomic_load_n(&det_done, __ATOMIC_ACQUIRE)) usleep(1000);
    usleep(20000);   /* past its return: its end is recorded before exit */
    fprintf(facts, "detached_addr=0x%lx\ndetached_size=%zu\ndetached_guard=%zu\n",
            (unsigned long)det.addr, det.size, det.guard);
    fclose(facts);
    printf("user-stack thread ran: %d\n", ran);
    return 0;
}
