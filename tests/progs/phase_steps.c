/* phase_steps.c — an engine loop without markers, for --phase-frame:
 * engine_step() is called N times and allocates K objects per call; the
 * loop allocates a small header outside the call before each step (the
 * evidence that one call ended: frees carry no stack), and frees it all
 * after.
 *
 *   phase_steps N K        prints steps=N allocs_per_step=K and the
 *                          allocations made outside the steps
 */
#include <stdio.h>
#include <stdlib.h>

/* noinline: the step is a frame of its own in every stack, whatever -O */
__attribute__((noinline)) void engine_step(int step, void **out, int k)
{
    for (int i = 0; i < k; i++) {
        out[i] = malloc(64 + (size_t)i + (size_t)step);
        if (!out[i]) exit(1);
        ((volatile char *)out[i])[0] = (char)i;
    }
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 10, k = argc > 2 ? atoi(argv[2]) : 4;
    if (n < 1 || k < 1 || k > 1024) return 2;
    void **objs = malloc((size_t)k * sizeof *objs);      /* outside: 1 */
    if (!objs) return 1;
    for (int s = 0; s < n; s++) {
        char *hdr = malloc(32);                          /* outside: one per step */
        if (!hdr) return 1;
        engine_step(s, objs, k);
        for (int i = 0; i < k; i++) free(objs[i]);
        free(hdr);
    }
    free(objs);
    printf("steps=%d allocs_per_step=%d outside=%d\n", n, k, n + 1);
    return 0;
}
