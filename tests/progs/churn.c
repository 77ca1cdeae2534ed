/* churn.c — a transformer-like malloc/free mix for measuring tracer
 * overhead: deterministic, a few million calls, every call made at the same
 * call depth (so stack capture costs the same for each event).
 *
 *   churn [CALLS]        default 3000000 (malloc + free calls, approximately)
 *   churn CALLS thread   the same with an idle second thread started first:
 *                        what a process pays for being multi-threaded
 *                        (glibc's malloc leaves its single-thread fast
 *                        paths), which the tracer's own thread makes it
 *
 * Per layer of a decode step it allocates what a layer's activations would
 * need — residual, q, k, v, scores and probabilities over the growing
 * sequence, attention output, two MLP buffers, the layer output (freed by
 * the next layer), a small metadata block — and frees them in the
 * interleaved order a graph executor would: 11 mallocs and 11 frees per
 * layer. Sizes stay under glibc's mmap threshold, so the heap is the fast
 * path (this is a benchmark of the tracer, not of mmap). Prints
 * "mallocs=M frees=F" at the end. Uses only malloc and free.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#define HIDDEN 256          /* model width, f32 elements */
#define HEADS  8
#define LAYERS 12
#define DEPTH  12           /* frames between main and the allocating function */

static unsigned long n_malloc, n_free;
static void *carry;         /* the previous layer's output */

static void *xmalloc(size_t n)
{
    void *p = malloc(n);
    if (!p) { fputs("churn: out of memory\n", stderr); exit(1); }
    *(volatile char *)p = 1;   /* touch it, as a kernel would */
    n_malloc++;
    return p;
}
#define XFREE(p) (free(p), n_free++)

/* One layer of one decode step at sequence length seq. */
__attribute__((noinline)) static void layer(unsigned seq)
{
    const size_t h = HIDDEN * sizeof(float);
    void *x = xmalloc(h);
    void *q = xmalloc(h), *k = xmalloc(h), *v = xmalloc(h);
    void *scores = xmalloc((size_t)HEADS * seq * sizeof(float));
    void *probs = xmalloc((size_t)HEADS * seq * sizeof(float));
    XFREE(scores);
    void *attn = xmalloc(h);
    XFREE(q); XFREE(k); XFREE(v); XFREE(probs);
    void *h1 = xmalloc(4 * h), *h2 = xmalloc(4 * h);
    XFREE(h1);
    void *out = xmalloc(h);
    XFREE(h2); XFREE(attn); XFREE(x);
    void *meta = xmalloc(48);
    XFREE(meta);
    if (carry) XFREE(carry);
    carry = out;
}

/* Recurse to a fixed depth, then run `iters` layers there. The asm keeps
 * the compiler from turning the recursion into a loop or a tail call. */
__attribute__((noinline)) static void at_depth(int depth, unsigned long iters)
{
    if (depth > 0) {
        at_depth(depth - 1, iters);
        __asm__ volatile("" ::: "memory");
        return;
    }
    for (unsigned long i = 0; i < iters; i++) {
        unsigned step = (unsigned)(i / LAYERS);
        layer(1 + step % 512);
    }
}

static void *idle(void *arg)
{
    (void)arg;
    for (;;) pause();
    return NULL;
}

int main(int argc, char **argv)
{
    unsigned long calls = argc > 1 ? strtoul(argv[1], NULL, 10) : 3000000ul;
    pthread_t t;
    if (argc > 2 && !strcmp(argv[2], "thread") && pthread_create(&t, NULL, idle, NULL) != 0) return 1;
    unsigned long iters = calls / 22;
    at_depth(DEPTH, iters);
    if (carry) XFREE(carry);
    /* No stdio: its buffer would be the one allocation the program never
     * frees, and heaptrack frees it at exit (__libc_freeres) where a plain
     * run does not — the two tools would disagree by one free. */
    char line[64];
    int n = snprintf(line, sizeof line, "mallocs=%lu frees=%lu\n", n_malloc, n_free);
    if (write(1, line, (size_t)n) != n) return 1;
    return 0;
}
