/* strkeep.c — owned string copies freed together (strkeep.h). The one
 * implementation of what the symbolizer and the site view each used to
 * carry as their own keep(). */
#include "strkeep.h"

#include <stdlib.h>
#include <string.h>

const char *psc_strs_keep(psc_strs_t *k, const char *str)
{
    if (!str) return NULL;
    if (k->n == k->cap) {
        size_t n = k->cap ? k->cap * 2 : 256;
        char **a = realloc(k->v, n * sizeof *a);
        if (!a) return NULL;
        k->v = a; k->cap = n;
    }
    char *c = strdup(str);
    if (c) k->v[k->n++] = c;
    return c;
}

void psc_strs_free(psc_strs_t *k)
{
    for (size_t i = 0; i < k->n; i++) free(k->v[i]);
    free(k->v);
    k->v = NULL; k->n = k->cap = 0;
}
