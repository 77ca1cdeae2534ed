/* libeng.so for scope_function.sh: engine_step is called through the PLT
 * and takes arguments in every place the ABI has (registers, a struct and
 * three integers on the stack, a double in xmm0), sets errno and returns
 * a double; ld_step returns a long double on the x87 stack. Each step
 * makes K allocations and frees K - 1: the last one is handed back. */
#include <errno.h>
#include <stdlib.h>

typedef struct big { long a[9]; } big_t;

void *engine_step(int k, big_t b, double x, double *out, long r4, long r5, long r6, long r7, long r8, long r9)
{
    void *p[16];
    long sum = 0;
    for (int i = 0; i < k && i < 16; i++) {
        p[i] = malloc(64 + (size_t)i);
        *(volatile char *)p[i] = 1;
    }
    for (int i = 0; i < 9; i++) sum += b.a[i];
    for (int i = 0; i + 1 < k && i < 16; i++) free(p[i]);
    *out = x * 2 + (double)(sum + r4 + r5 + r6 + r7 + r8 + r9);
    errno = 42;
    return k > 0 ? p[k - 1] : NULL;
}

long double ld_step(long double v) { return v * 3; }
