/* grow.c — doubling growth of an array (see grow.h). */
#include "grow.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"

int psc_grow_slow(void **arr, size_t *cap, size_t need, size_t elem, size_t first)
{
    if (need < *cap) return 0;
    size_t n = *cap ? *cap : (first ? first : 1);
    while (n <= need) {
        if (n > SIZE_MAX / 2) return PSC_ENOMEM;
        n *= 2;
    }
    if (elem && n > SIZE_MAX / elem) return PSC_ENOMEM;
    unsigned char *p = realloc(*arr, n * elem);
    if (!p) return PSC_ENOMEM;
    memset(p + *cap * elem, 0, (n - *cap) * elem);
    *arr = p;
    *cap = n;
    return 0;
}
