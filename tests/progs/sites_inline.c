/* sites_inline.c — allocation sites the symbolizer must name exactly as
 * `addr2line -f -i -C` does (tests/integration/sites.sh).
 *
 * Built -O2 like every test program. `outer` inlines two helpers, the inner
 * one calling malloc (the line marked SITE_INLINE); `lines` makes calls on
 * consecutive lines (SITE_LINE_A, _B, _C: a frame looked up at its return
 * address instead of return address - 1 lands on the next line); `last`
 * ends in a call that does not return to its own function's code (the
 * return address is past the function's end). The test finds the lines by
 * their markers, never by number.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink[64];
static unsigned n_sink;

static void keep(void *p) { sink[n_sink++ % 64] = p; }

static inline __attribute__((always_inline)) void *helper_inner(size_t n)
{
    void *p = malloc(n);   /* SITE_INLINE */
    if (p) memset(p, 1, n);
    return p;
}

static inline __attribute__((always_inline)) void *helper_outer(size_t n)
{
    void *p = helper_inner(n + 8);   /* SITE_INLINE_CALL */
    return p;
}

__attribute__((noinline)) void *outer(size_t n)
{
    void *p = helper_outer(n * 2);   /* SITE_OUTER_CALL */
    keep(p);
    return p;
}

__attribute__((noinline)) void lines(size_t n)
{
    keep(malloc(n + 1));   /* SITE_LINE_A */
    keep(calloc(n + 2, 1));   /* SITE_LINE_B */
    keep(realloc(NULL, n + 3));   /* SITE_LINE_C */
}

__attribute__((noinline, noreturn)) void last(size_t n)
{
    keep(outer(n));
    exit(0);   /* SITE_NORETURN */
}

__attribute__((noinline)) void caller(size_t n)
{
    lines(n);   /* SITE_CALLER_1 */
    lines(n + 1);   /* SITE_CALLER_2 */
    outer(n);   /* SITE_CALLER_3 */
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)atoi(argv[1]) : 40;
    for (int i = 0; i < 3; i++) caller(n + (size_t)i);
    printf("sink=%u\n", n_sink);
    fflush(stdout);
    last(n);
}
