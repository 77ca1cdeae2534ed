/* pf_merge.c — calls that --phase-frame cannot tell apart, and calls it
 * can (tests/integration/phase_frame_merge.sh):
 *
 *   pf_merge merged N K     step() called N times in a loop that allocates
 *                           nothing: its K blocks per call, freed before it
 *                           returns, are all the stacks show, so the calls
 *                           read as one
 *   pf_merge separated N K  the same, with a header allocated outside
 *                           step() before each call (the evidence that one
 *                           call ended)
 *   pf_merge layers N L     forward() loops over L layers, one block per
 *                           layer (its only allocations), called N times
 *                           with a header allocated outside between calls
 *
 * Each prints "calls=N allocs_per_call=K" (K = L for layers): the
 * program's own count of calls and of allocations made inside each call.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int n_calls, n_allocs;

/* noinline: the function is a frame of its own in every stack, whatever -O */
__attribute__((noinline)) void step(int k)
{
    void *b[64];
    n_calls++;
    for (int i = 0; i < k; i++) {
        b[i] = malloc(48 + (size_t)i);
        if (!b[i]) exit(1);
        ((volatile char *)b[i])[0] = (char)i;
        n_allocs++;
    }
    for (int i = 0; i < k; i++) free(b[i]);
}

__attribute__((noinline)) void forward(int layers)
{
    n_calls++;
    for (int l = 0; l < layers; l++) {          /* one activation per layer */
        char *act = malloc(256);
        if (!act) exit(1);
        ((volatile char *)act)[0] = (char)l;
        n_allocs++;
        free(act);
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "merged";
    int n = argc > 2 ? atoi(argv[2]) : 50, k = argc > 3 ? atoi(argv[3]) : 12;
    if (n < 1 || k < 1 || k > 64) return 2;
    if (!strcmp(mode, "merged")) {
        for (int s = 0; s < n; s++) step(k);
    } else if (!strcmp(mode, "separated") || !strcmp(mode, "layers")) {
        int layers = !strcmp(mode, "layers");
        for (int s = 0; s < n; s++) {
            char *hdr = malloc(32);                 /* outside the call */
            if (!hdr) return 1;
            ((volatile char *)hdr)[0] = (char)s;
            if (layers) forward(k);
            else step(k);
            free(hdr);
        }
    } else {
        return 2;
    }
    printf("calls=%d allocs_per_call=%d\n", n_calls, n_allocs / n_calls);
    return 0;
}
