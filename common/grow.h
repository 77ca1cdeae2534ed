/* grow.h — make room in a growable array (internal, prefix psc_grow).
 *
 * Every table that grows by doubling (sites, frames, notes, patterns,
 * policy slots, ...) goes through here, so the doubling, the overflow check
 * and the zeroing of new entries are written once.
 */
#ifndef PSC_GROW_H
#define PSC_GROW_H

#include <stddef.h>

/* Make *arr (of *cap elements of elem bytes) hold index need: doubles
 * *cap, from first when it is 0, until it exceeds need; new elements are
 * zeroed. 0, or PSC_ENOMEM with *arr and *cap unchanged. */
int psc_grow_slow(void **arr, size_t *cap, size_t need, size_t elem, size_t first);

/* Inline for the common case (it holds it already). */
static inline int psc_grow(void **arr, size_t *cap, size_t need, size_t elem, size_t first)
{
    return need < *cap ? 0 : psc_grow_slow(arr, cap, need, elem, first);
}

#endif
