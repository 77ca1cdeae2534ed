/* leaks_named.c — leaks from named functions, for --suppress
 * (tests/integration/suppress.sh): leak_a leaks 3 objects of 100 bytes,
 * leak_b 2 of 1000, helper_alloc 50 bytes called from caller_x and 70
 * from caller_y. It prints with write(2), not stdio, so glibc makes no
 * stdout buffer: these are all its leaks. Each allocation's result is
 * stored after the call, so no call is a tail call and every caller keeps
 * its frame.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *volatile keep[16];
static int nkeep;

__attribute__((noinline)) static void *helper_alloc(size_t n)
{
    void *p = malloc(n);
    if (p) memset(p, 1, n);
    keep[nkeep++] = p;
    return p;
}

__attribute__((noinline)) void caller_x(void) { keep[nkeep++] = helper_alloc(50); }
__attribute__((noinline)) void caller_y(void) { keep[nkeep++] = helper_alloc(70); }

__attribute__((noinline)) void leak_a(void)
{
    for (int i = 0; i < 3; i++) keep[nkeep++] = malloc(100);
}

__attribute__((noinline)) void leak_b(void)
{
    for (int i = 0; i < 2; i++) keep[nkeep++] = malloc(1000);
}

int main(void)
{
    leak_a();
    leak_b();
    caller_x();
    caller_y();
    static const char msg[] = "leaked_objects=7\nleaked_bytes=2420\n";
    return write(1, msg, sizeof msg - 1) == (ssize_t)(sizeof msg - 1) ? 0 : 1;
}
