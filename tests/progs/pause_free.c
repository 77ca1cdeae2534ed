/* pause_free.c — memory allocated while recording, freed while paused.
 *
 *   pause_free N
 *
 * Allocates N blocks with tracing on, pauses tracing through the event API
 * (ps_trace_enable(0)), frees them, allocates and frees N more while
 * paused, resumes, and exits. The trace must report no leak: the frees made
 * while paused are recorded, and the N blocks allocated while paused show
 * only as frees of unknown addresses (their allocations were not traced).
 * Prints "allocated=N paused_pairs=N" on stdout, with write(): stdio's
 * buffer would be an allocation of its own, never freed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "poolscope/poolscope.h"

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    void **v = malloc((size_t)n * sizeof *v);
    if (!v) return 1;
    for (int i = 0; i < n; i++) v[i] = malloc(32 + (size_t)(i % 200));
    ps_trace_enable(0);
    for (int i = 0; i < n; i++) free(v[i]);
    for (int i = 0; i < n; i++) v[i] = malloc(48);
    for (int i = 0; i < n; i++) free(v[i]);
    free(v);   /* allocated while recording too */
    ps_trace_enable(1);
    char line[64];
    int len = snprintf(line, sizeof line, "allocated=%d paused_pairs=%d\n", n, n);
    return write(1, line, (size_t)len) == len ? 0 : 1;
}
