/* strkeep.h — a set of owned string copies (internal, prefix psc_strs_).
 *
 * Labels, file names and module names that must outlive the buffer they
 * were formatted in are copied here and freed together when their owner
 * (a symbolizer, a site view) is destroyed. Copies are not shared: the
 * same text kept twice is two strings (callers that look names up keep
 * each once behind their own cache).
 */
#ifndef PSC_STRKEEP_H
#define PSC_STRKEEP_H

#include <stddef.h>

typedef struct psc_strs {
    char **v;
    size_t n, cap;
} psc_strs_t;

/* A copy of str owned by k; NULL when str is NULL or memory ran out. */
const char *psc_strs_keep(psc_strs_t *k, const char *str);

/* Frees every copy and the table; k is empty (and reusable) after. */
void psc_strs_free(psc_strs_t *k);

#endif
