/* window.c — a long-running program for bounded recording windows
 * (tests/integration/record_window.sh) and the live view
 * (tests/integration/top.sh).
 *
 *   window [ITERATIONS [LIVE [SLEEP_US]]]     defaults 3000, 32, 1000
 *
 * Iteration i frees the block of iteration i - LIVE (from LIVE on) and
 * mallocs one of WINDOW_BASE + i bytes, then sleeps SLEEP_US: so after
 * the first LIVE iterations exactly LIVE blocks are live, and each size
 * names its iteration. A trace of any window that starts before main
 * therefore holds the mallocs of iterations 0..M-1 and no other of those
 * sizes, in that order, and the frees of iterations 0..M-1-LIVE (or one
 * fewer, if it stopped between a free and its malloc): the test reads the
 * window's counts from the sizes, not from timing. The sleep makes the
 * run last ITERATIONS * SLEEP_US at least, whatever the machine, so a
 * window of 1 s ends inside a run of 3 s.
 *
 * Output (stdout, the same traced or not): one line
 *   window: ITERATIONS iterations, LIVE live, mallocs M, frees F, checksum C
 * and exit 0 once every block is freed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WINDOW_BASE 20000   /* no libc-internal malloc has such a size (stdio: 1 KiB, 4 KiB) */

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 3000, live = argc > 2 ? atol(argv[2]) : 32;
    long us = argc > 3 ? atol(argv[3]) : 1000;
    if (n < 1 || n > 100000 || live < 1 || live > 4096 || us < 0) {   /* sizes stay below 128 KiB: heap, not mmap */
        fprintf(stderr, "usage: window [ITERATIONS<=100000 [LIVE<=4096 [SLEEP_US]]]\n");
        return 2;
    }
    char **ring = calloc((size_t)live, sizeof *ring);
    if (!ring) return 1;
    unsigned long mallocs = 0, frees = 0, sum = 0;
    struct timespec d = { us / 1000000, (us % 1000000) * 1000 };
    for (long i = 0; i < n; i++) {
        long k = i % live;
        if (ring[k]) { free(ring[k]); frees++; }
        size_t sz = WINDOW_BASE + (size_t)i;
        ring[k] = malloc(sz);
        if (!ring[k]) return 1;
        memset(ring[k], (int)(i & 0x7f), 64);   /* touched: the block is real memory */
        mallocs++;
        sum += sz ^ (unsigned long)(unsigned char)ring[k][63];
        if (us) nanosleep(&d, NULL);
    }
    for (long k = 0; k < live; k++)
        if (ring[k]) { free(ring[k]); frees++; }
    free(ring);
    printf("window: %ld iterations, %ld live, mallocs %lu, frees %lu, checksum %lu\n", n, live, mallocs, frees, sum);
    return 0;
}
