/* truth_ticks.c — known instants against the trace's timestamps.
 *
 *   truth_ticks [K [PAIRS_PER_WAKE]]        defaults 10 16
 *
 * A churn thread makes malloc/free pairs (16..2047 bytes) continuously:
 * PAIRS_PER_WAKE pairs, then a 100 us nanosleep, until the main thread is
 * done (so other streams are busy while the main thread is mostly quiet).
 * The main thread makes K mallocs of exactly 1 MiB (1048576 bytes: no other
 * call of this program asks for that size), 20 ms apart (nanosleep), each
 * between two clock_gettime(CLOCK_MONOTONIC) reads, and frees each one
 * right after the second read.
 *
 * Prints, through write(2) after the churn thread is joined:
 *   mono0_ns=      CLOCK_MONOTONIC just before the first 1 MiB malloc
 *   t<i>_ns=       just before malloc i, minus mono0_ns (t0_ns is 0)
 *   t<i>_end_ns=   just after malloc i returned, minus mono0_ns
 *   count=K  churn_pairs=
 * So malloc i happened in [mono0 + t<i>_ns, mono0 + t<i>_end_ns] of
 * CLOCK_MONOTONIC, the clock of the trace header's START_MONO.
 * Exit 0; 1 on allocation failure; 2 bad usage.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "truth_util.h"

#define BIG ((size_t)1 << 20)
#define MAX_K 1000

static void *(*volatile f_malloc)(size_t) = malloc;
static void (*volatile f_free)(void *) = free;
static atomic_int stop;
static atomic_uint_fast64_t pairs;
static long per_wake = 16;



static uint64_t mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap(long ns)
{
    struct timespec ts = { ns / 1000000000L, ns % 1000000000L };
    while (nanosleep(&ts, &ts) != 0) { }
}

static void *churn(void *arg)
{
    (void)arg;
    uint64_t s = 0x9E3779B97F4A7C15ull;
    while (!atomic_load(&stop)) {
        for (long i = 0; i < per_wake; i++) {
            s ^= s << 13; s ^= s >> 7; s ^= s << 17;
            void *p = f_malloc(16 + (size_t)(s % 2032));
            if (!p) die("truth_ticks: out of memory\n");
            *(volatile char *)p = 1;
            f_free(p);
        }
        atomic_fetch_add(&pairs, (uint64_t)per_wake);
        nap(100000);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    long k = argc > 1 ? strtol(argv[1], NULL, 10) : 10;
    if (argc > 2) per_wake = strtol(argv[2], NULL, 10);
    if (k < 1 || k > MAX_K || per_wake < 0 || argc > 3) die("usage: truth_ticks [K [PAIRS_PER_WAKE]]\n");
    static uint64_t before[MAX_K], after[MAX_K];
    pthread_t th;
    if (pthread_create(&th, NULL, churn, NULL)) die("truth_ticks: pthread_create failed\n");
    nap(20000000L);
    for (long i = 0; i < k; i++) {
        before[i] = mono();
        void *p = f_malloc(BIG);
        after[i] = mono();
        if (!p) die("truth_ticks: out of memory\n");
        f_free(p);
        nap(20000000L);
    }
    atomic_store(&stop, 1);
    pthread_join(th, NULL);
    put("mono0_ns", before[0]);
    for (long i = 0; i < k; i++) {
        char key[32];
        snprintf(key, sizeof key, "t%ld_ns", i);
        put(key, before[i] - before[0]);
        snprintf(key, sizeof key, "t%ld_end_ns", i);
        put(key, after[i] - before[0]);
    }
    put("count", (uint64_t)k);
    put("churn_pairs", atomic_load(&pairs));
    return 0;
}
