/* sigkill.c — allocate, say so, then wait to be killed.
 *
 *   sigkill [N]
 *
 * Makes N (default 100000) malloc calls and N free calls, emits the marker
 * point "sync" (payload: N), prints "sync N" on stdout and sleeps for 30 s.
 * The test sends SIGKILL more than 300 ms after reading the line; every
 * event before the marker must be in the trace (the tracer flushes on a
 * timer), and the reader must call the trace truncated (no END chunk).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

static void *volatile sink;

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000;
    void *keep[256] = { 0 };
    for (long i = 0; i < n; i++) {
        int k = (int)(i & 255);
        if (keep[k]) free(keep[k]);
        keep[k] = malloc(16 + (size_t)(i % 300));
        sink = keep[k];
    }
    long frees = n - 256 > 0 ? n - 256 : 0;   /* frees so far */
    for (int k = 0; k < 256; k++)
        if (keep[k]) { free(keep[k]); frees++; }
    int64_t payload[1] = { n };
    ps_mark("sync", payload, 1);
    printf("sync %ld %ld\n", n, frees);
    fflush(stdout);
    sleep(30);
    return 0;
}
