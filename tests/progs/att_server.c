/* att_server THREADS LIVE OPS [STOPFILE]: a server that `poolscope
 * attach` finds already running (tests/integration/attach.sh).
 *
 * Each of THREADS workers keeps LIVE blocks: op k frees the block of slot
 * k % LIVE and mallocs a new one of size 16 * (1 + (worker * 4096 + k %
 * 4096) % 65536) bytes, so a trace tells which worker made each malloc and
 * its op number modulo 4096: a window's calls of a worker are consecutive
 * op numbers, none missing. A worker sleeps 1 ms every 16 ops (about
 * 12,000 to 16,000 ops a second each, so a window of 2 s holds tens of thousands
 * of calls) and stops after OPS ops; then main frees everything and prints
 * the totals, which depend only on the arguments (the same output attached
 * or not). Started, it prints "ready pid=N" on stderr once every worker
 * has its live set.
 *
 * With OPS 0 the workers run until STOPFILE exists (a server up for as
 * long as a test attaches and detaches); the output is then what does not
 * depend on how long that was: every live block checked to still hold its
 * worker's bytes, and every op's size, summed, checked against the same
 * sum computed from the op count alone (a call answered wrongly, a block
 * overwritten, would show).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int n_thr, live, ops;
static const char *stopfile;
static volatile int stop;
static void **blocks;
static volatile int started;
static uint64_t sum_bytes[64], n_ops[64];

static size_t size_of(int w, long k) { return 16u * (1u + (unsigned)((w * 4096 + k % 4096) % 65536)); }

static void *worker(void *arg)
{
    int w = (int)(intptr_t)arg;
    void **mine = blocks + (size_t)w * (size_t)live;
    for (int i = 0; i < live; i++) {
        mine[i] = malloc(size_of(w, i));
        memset(mine[i], w, 16);
    }
    __atomic_add_fetch(&started, 1, __ATOMIC_ACQ_REL);
    for (long k = live; ops ? k < (long)ops + live : !stop; k++) {
        int s = (int)(k % live);
        free(mine[s]);
        size_t n = size_of(w, k);
        mine[s] = malloc(n);
        if (!mine[s]) abort();
        memset(mine[s], w, 16);
        sum_bytes[w] += n;
        n_ops[w]++;
        if (k % 16 == 0) {
            struct timespec d = { 0, 1000 * 1000 };
            nanosleep(&d, NULL);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: att_server THREADS LIVE OPS [STOPFILE]\n"); return 2; }
    n_thr = atoi(argv[1]); live = atoi(argv[2]); ops = atoi(argv[3]);
    stopfile = argc == 5 ? argv[4] : NULL;
    if (n_thr < 1 || n_thr > 64 || live < 1 || ops < 0 || (!ops && !stopfile)) return 2;
    blocks = calloc((size_t)n_thr * (size_t)live, sizeof *blocks);
    pthread_t t[64];
    for (int i = 0; i < n_thr; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    while (__atomic_load_n(&started, __ATOMIC_ACQUIRE) < n_thr) {
        struct timespec d = { 0, 1000 * 1000 };
        nanosleep(&d, NULL);
    }
    fprintf(stderr, "ready pid=%d\n", (int)getpid());
    while (!ops && access(stopfile, F_OK) != 0) {
        struct timespec d = { 0, 20 * 1000 * 1000 };
        nanosleep(&d, NULL);
    }
    stop = 1;
    uint64_t total = 0, bytes = 0;
    int bad = 0;
    for (int i = 0; i < n_thr; i++) {
        pthread_join(t[i], NULL);
        total += n_ops[i];
        bytes += sum_bytes[i];
        uint64_t want = 0;
        for (long k = live; k < (long)n_ops[i] + live; k++) want += size_of(i, k);
        bad += want != sum_bytes[i];
        for (int j = 0; j < live; j++)
            for (int b = 0; b < 16; b++) bad += ((unsigned char *)blocks[(size_t)i * (size_t)live + (size_t)j])[b] != i;
    }
    for (size_t i = 0; i < (size_t)n_thr * (size_t)live; i++) free(blocks[i]);
    free(blocks);
    if (ops)
        printf("threads=%d live=%d ops=%llu bytes=%llu\n", n_thr, live, (unsigned long long)total,
               (unsigned long long)bytes);
    else
        printf("threads=%d live=%d checked=%s\n", n_thr, live, bad ? "BAD" : "ok");
    return 0;
}
