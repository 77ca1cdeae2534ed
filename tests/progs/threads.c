/* threads.c — threads started and stopped in a loop while they allocate.
 *
 *   threads [ROUNDS [THREADS [ALLOCS]]]     defaults 50 4 2000
 *
 * Each round starts THREADS threads; each names itself, makes ALLOCS
 * malloc/free pairs with a few blocks kept across to be freed by another
 * thread (cross-thread frees), and exits. Prints "threads=R*T mallocs=M" so
 * a test can check the trace holds at least that many.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "poolscope/poolscope.h"

static int allocs = 2000;
static void *volatile handoff[64];

static void *work(void *arg)
{
    intptr_t id = (intptr_t)arg;
    char name[32];
    snprintf(name, sizeof name, "worker-%ld", (long)id);
    ps_thread_name(name);
    for (int i = 0; i < allocs; i++) {
        void *p = malloc(16 + (size_t)((i * 7 + id) % 1000));
        if (i % 100 == 0) {
            /* leave it for the next thread on this slot to free */
            void *old = __atomic_exchange_n(&handoff[id % 64], p, __ATOMIC_ACQ_REL);
            free(old);
        } else {
            free(p);
        }
    }
    return NULL;
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    int nthreads = argc > 2 ? atoi(argv[2]) : 4;
    if (argc > 3) allocs = atoi(argv[3]);
    if (rounds < 1 || nthreads < 1 || nthreads > 64 || allocs < 1) return 2;
    pthread_t t[64];
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < nthreads; i++)
            if (pthread_create(&t[i], NULL, work, (void *)(intptr_t)(r * nthreads + i))) return 1;
        for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    }
    for (int i = 0; i < 64; i++) free(handoff[i]);
    printf("threads=%d mallocs=%ld\n", rounds * nthreads, (long)rounds * nthreads * allocs);
    return 0;
}
