/* pre_edges — two interposer calls whose recording no other program pins
 * down by its own count (issue 27, item 11).
 *
 *   pre_edges N
 *
 * While recording: N mallocs (64 + i % 100 bytes) and one calloc(3, 1000)
 * (nmemb * size = 3000 differs from size * size and nmemb * nmemb, so a
 * tracer recording either argument twice is seen). Then tracing is paused
 * through the event API (ps_trace_enable(0)) and each of the N blocks is
 * released with realloc(p, 0) (glibc frees it and returns NULL); tracing
 * resumes, the calloc block and the pointer array are freed.
 *
 * The trace must hold every block allocated while recording as freed: the
 * release made by realloc(p, 0) while paused is recorded as the other
 * paused frees are (libtrace/preload/README.md). Prints the program's own
 * count on stdout, with write() (stdio's buffer would be an allocation of
 * its own, never freed):
 *
 *   allocations=N+2 requested=BYTES calloc_nmemb=3 calloc_size=1000 paused_realloc0=N
 *
 * where BYTES sums every requested size (the array, the N blocks, 3000).
 * Exit status 1 if realloc(p, 0) returned a block (glibc's rule changed).
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 100;
    if (n < 1) return 2;
    unsigned long long requested = (unsigned long long)n * sizeof(void *);
    void **v = malloc((size_t)n * sizeof *v);
    if (!v) return 1;
    for (int i = 0; i < n; i++) {
        size_t s = 64 + (size_t)(i % 100);
        v[i] = malloc(s);
        if (!v[i]) return 1;
        requested += s;
    }
    void *c = calloc(3, 1000);
    if (!c) return 1;
    requested += 3000;
    int bad = 0;
    ps_trace_enable(0);
    for (int i = 0; i < n; i++)
        if (realloc(v[i], 0) != NULL) bad = 1;
    ps_trace_enable(1);
    free(c);
    free(v);
    char line[160];
    int len = snprintf(line, sizeof line,
                       "allocations=%d requested=%llu calloc_nmemb=3 calloc_size=1000 paused_realloc0=%d\n",
                       n + 2, requested, n);
    if (write(1, line, (size_t)len) != len) return 1;
    return bad;
}
