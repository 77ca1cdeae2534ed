/* sites_wrap.c — allocations through a two-level wrapper from three call
 * sites (tests/integration/sites.sh): `app_alloc` calls `app_alloc_impl`,
 * which calls malloc; `load_model`, `build_graph` and `read_input` each
 * call app_alloc (the lines marked WRAP_SITE_1..3). With --skip-frame
 * 'app_alloc*' the report has three rows, one per real caller, each "via
 * app_alloc". `ps_user_buffer` is a function of the program that happens
 * to start with ps_: it must be named, not skipped as the tracer's own.
 * app_alloc reaches the allocator through app_alloc_impl (large requests)
 * or app_alloc_impl_small (calloc), and load_model asks for both at one
 * line: two stacks that, with the wrapper skipped, read the same — one
 * row, one folded line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink[256];
static unsigned n_sink;

__attribute__((noinline)) static void *app_alloc_impl(size_t n)
{
    void *p = malloc(n);
    if (!p) { fputs("sites_wrap: out of memory\n", stderr); exit(1); }
    memset(p, 0, n);
    return p;
}

__attribute__((noinline)) static void *app_alloc_impl_small(size_t n)
{
    void *p = calloc(1, n);
    if (!p) { fputs("sites_wrap: out of memory\n", stderr); exit(1); }
    return p;
}

__attribute__((noinline)) void *app_alloc(size_t n)
{
    void *p;
    if (n >= 1024) p = app_alloc_impl(n + 16);
    else p = app_alloc_impl_small(n + 32);
    sink[n_sink++ % 256] = p;
    return p;
}

__attribute__((noinline)) void load_model(int k)
{
    for (int i = 0; i < k; i++) app_alloc(i % 2 ? 4096 : 100);   /* WRAP_SITE_1 */
}

__attribute__((noinline)) void build_graph(int k)
{
    for (int i = 0; i < k; i++) app_alloc(512);   /* WRAP_SITE_2 */
}

__attribute__((noinline)) void read_input(int k)
{
    for (int i = 0; i < k; i++) app_alloc(64);   /* WRAP_SITE_3 */
}

__attribute__((noinline)) void *ps_user_buffer(size_t n)
{
    void *p = malloc(n);   /* PS_USER_SITE */
    sink[n_sink++ % 256] = p;
    return p;
}

int main(int argc, char **argv)
{
    int k = argc > 1 ? atoi(argv[1]) : 10;
    load_model(k);
    build_graph(2 * k);
    read_input(3 * k);
    for (int i = 0; i < k; i++) ps_user_buffer(100);
    printf("allocs=%d\n", 7 * k);
    return 0;
}
