/* pre_churn — malloc/free churn for overhead measurement.
 *
 *   pre_churn [CALLS]     CALLS malloc+free calls in total (default 3000000)
 *
 * A mix of sizes with a small live window (like a tokenizer or an engine's
 * temporaries). Prints ns per call on stderr (stdout stays empty).
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define WIN 64

static __attribute__((noinline)) void *leaf_alloc(size_t n) { return malloc(n); }
static __attribute__((noinline)) void *mid_alloc(size_t n, int k) { return k & 1 ? leaf_alloc(n) : malloc(n); }

int main(int argc, char **argv)
{
    long calls = argc > 1 ? atol(argv[1]) : 3000000;
    void *win[WIN] = { 0 };
    unsigned x = 12345;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < calls / 2; i++) {
        x = x * 1103515245u + 12345u;
        unsigned k = (x >> 8) % WIN;
        free(win[k]);
        win[k] = mid_alloc(16 + (x >> 20) % 512, (int)(x >> 3));
    }
    for (int k = 0; k < WIN; k++) free(win[k]);
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
    fprintf(stderr, "pre_churn: %ld calls %.1f ns/call\n", calls, ns / (double)calls);
    return 0;
}
