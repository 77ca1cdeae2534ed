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

int psc_strset_init(psc_strset_t *s)
{
    memset(s, 0, sizeof *s);
    return psc_map_init(&s->ids, sizeof(uint32_t), 256, 50, NULL);
}

static uint64_t text_hash(const char *t)
{
    uint64_t h = 0xcbf29ce484222325ull;   /* FNV-1a */
    for (; *t; t++) h = (h ^ (unsigned char)*t) * 0x100000001b3ull;
    return h;
}

uint32_t psc_strset_id(psc_strset_t *s, const char *str, int *is_new)
{
    if (is_new) *is_new = 0;
    if (!str || s->strs.n >= UINT32_MAX) return 0;
    for (uint64_t key = text_hash(str);; key = key * 0x9E3779B97F4A7C15ull + 1) {
        int fresh;
        uint32_t *slot = psc_map_put_sz(&s->ids, key, &fresh, sizeof *slot);
        if (!slot) return 0;
        if (!fresh) {
            if (!strcmp(s->strs.v[*slot - 1], str)) return *slot;
            continue;            /* another text with this key: the next */
        }
        if (!psc_strs_keep(&s->strs, str)) {
            psc_map_del(&s->ids, key);
            return 0;
        }
        *slot = (uint32_t)s->strs.n;
        if (is_new) *is_new = 1;
        return *slot;
    }
}

void psc_strset_free(psc_strset_t *s)
{
    psc_strs_free(&s->strs);
    psc_map_free(&s->ids);
}
