/* strkeep.c — owned string copies freed together (strkeep.h). The one
 * implementation of what the symbolizer and the site view each used to
 * carry as their own keep(). */
#include "strkeep.h"

#include <stdlib.h>
#include <string.h>

#include "grow.h"

const char *psc_strs_keep(psc_strs_t *k, const char *str)
{
    if (!str) return NULL;
    if (psc_grow((void **)&k->v, &k->cap, k->n, sizeof *k->v, 256)) return NULL;
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
