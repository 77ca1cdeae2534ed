/* att_rate THREADS PACE STOPFILE RATEFILE: a server with its own rate
 * counter, for scripts/bench-attach.sh (the program's throughput before,
 * during and after `poolscope attach`).
 *
 * Each of THREADS workers replaces 256 blocks in turn (free, then malloc
 * of 16 to 1,024 bytes: sizes glibc serves from its per-thread cache; up
 * to 4 KiB the run timed the heap top's trims, not the calls) and sleeps
 * 1 ms after every PACE replacements (a server waiting on I/O; PACE 0:
 * never, the allocator's worst case). Every
 * 100 ms the main thread appends "REALTIME_NS TOTAL_OPS" to RATEFILE, so
 * the rate over any stretch of wall time is read off the file with the
 * same clock `date +%s%N` gives a script. Runs until STOPFILE exists, then
 * prints "ops=N checked=ok|BAD" (every live block read back).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 256

static int pace;
static const char *stopfile;
static volatile int stop;
static uint64_t n_ops[64];   /* each worker's own; summed by main (relaxed) */
static unsigned long bad[64];

static void nap(long ns)
{
    struct timespec d = { 0, ns };
    nanosleep(&d, NULL);
}

static void *worker(void *arg)
{
    int w = (int)(intptr_t)arg;
    unsigned char *keep[SLOTS] = { 0 };
    for (uint64_t k = 0; !stop; k++) {
        int s = (int)(k % SLOTS);
        if (keep[s] && keep[s][0] != (unsigned char)(s + w)) bad[w]++;
        free(keep[s]);
        keep[s] = malloc(16 + (size_t)(k * 7 % 1009));
        if (!keep[s]) abort();
        keep[s][0] = (unsigned char)(s + w);
        __atomic_store_n(&n_ops[w], k + 1, __ATOMIC_RELAXED);
        if (pace && k % (uint64_t)pace == 0) nap(1000 * 1000);
    }
    for (int s = 0; s < SLOTS; s++) free(keep[s]);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 5) { fprintf(stderr, "usage: att_rate THREADS PACE STOPFILE RATEFILE\n"); return 2; }
    int n = atoi(argv[1]);
    pace = atoi(argv[2]);
    stopfile = argv[3];
    if (n < 1 || n > 64 || pace < 0) return 2;
    FILE *rate = fopen(argv[4], "w");
    if (!rate) { perror(argv[4]); return 2; }
    pthread_t t[64];
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    fprintf(stderr, "ready pid=%d\n", (int)getpid());
    while (access(stopfile, F_OK) != 0) {
        nap(100 * 1000 * 1000);
        uint64_t total = 0;
        for (int i = 0; i < n; i++) total += __atomic_load_n(&n_ops[i], __ATOMIC_RELAXED);
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        fprintf(rate, "%lld %llu\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec, (unsigned long long)total);
        fflush(rate);
    }
    stop = 1;
    uint64_t total = 0;
    unsigned long b = 0;
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        total += n_ops[i];
        b += bad[i];
    }
    fclose(rate);
    printf("ops=%llu checked=%s\n", (unsigned long long)total, b ? "BAD" : "ok");
    return 0;
}
