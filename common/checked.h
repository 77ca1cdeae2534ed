/* checked.h — overflow-checked unsigned arithmetic (internal, prefix psc_).
 *
 * Each returns 0 and stores the result, or nonzero when the exact result
 * does not fit (*r then holds the wrapped value). For sizes that come from
 * input: nmemb * size, header counts times record sizes.
 */
#ifndef PSC_CHECKED_H
#define PSC_CHECKED_H

#include <stddef.h>
#include <stdint.h>

static inline int psc_add_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_add_overflow(a, b, r); }
static inline int psc_mul_u64(uint64_t a, uint64_t b, uint64_t *r) { return __builtin_mul_overflow(a, b, r); }
static inline int psc_add_size(size_t a, size_t b, size_t *r) { return __builtin_add_overflow(a, b, r); }
static inline int psc_mul_size(size_t a, size_t b, size_t *r) { return __builtin_mul_overflow(a, b, r); }

#endif
