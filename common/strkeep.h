/* strkeep.h — a set of owned string copies (internal, prefix psc_strs_).
 *
 * Labels, file names and module names that must outlive the buffer they
 * were formatted in are copied here and freed together when their owner
 * (a symbolizer, a site view) is destroyed. Copies are not shared: the
 * same text kept twice is two strings. A psc_strset keeps each distinct
 * text once and numbers it (site labels, folded frame texts, sql's names).
 */
#ifndef PSC_STRKEEP_H
#define PSC_STRKEEP_H

#include <stddef.h>
#include <stdint.h>

#include "hashmap.h"

typedef struct psc_strs {
    char **v;
    size_t n, cap;
} psc_strs_t;

/* A copy of str owned by k; NULL when str is NULL or memory ran out. */
const char *psc_strs_keep(psc_strs_t *k, const char *str);

/* Frees every copy and the table; k is empty (and reusable) after. */
void psc_strs_free(psc_strs_t *k);

/* Distinct texts, each kept once and numbered from 1 in the order first
 * seen. Two texts never share a number: a clash of their hashes probes
 * the next key. */
typedef struct psc_strset {
    psc_strs_t strs;             /* the copies: number n is strs.v[n - 1] */
    psc_map_t ids;               /* hash of a text (probed on a clash) -> its number */
} psc_strset_t;

int psc_strset_init(psc_strset_t *s);            /* 0 or PSC_ENOMEM */
/* str's number, its copy made when new (*is_new 1 then, if is_new is not
 * NULL); 0 when str is NULL or memory ran out. */
uint32_t psc_strset_id(psc_strset_t *s, const char *str, int *is_new);
static inline const char *psc_strset_text(const psc_strset_t *s, uint32_t id) { return s->strs.v[id - 1]; }
void psc_strset_free(psc_strset_t *s);           /* accepts a set zeroed and never set up */

#endif
