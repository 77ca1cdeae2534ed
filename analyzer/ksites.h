/* ksites.h — allocation sites of the memory that is not the heap's: KV
 * blocks and mappings (prefix az_ks_).
 *
 * The heap and the pools have their sites in their metrics accumulators
 * (metrics.h, az_sites of scan's `heap` and `pool`). KV blocks and
 * mappings have no accumulator of their own — their figures are the
 * model's — so this keeps, per kind and per stack id, what the model's
 * operations say was handed out there:
 *   kv         PM_KV_BLOCK_ALLOC / FREE: a block's bytes (bytes per block)
 *   mmap_anon  PM_MAP_ADD / DEL of anonymous mappings: committed bytes
 *   mmap_file  the same for file-backed mappings
 * A mapping's PM_F_REST part (what a munmap of its start left, an
 * mremap's new place) stays its site's without counting a call or bytes
 * again. Figures are az_site_t's: calls and bytes while counting (a
 * window or phase, as the accumulators), live now (after the scan: at the
 * trace's end), and peak_bytes, what the site held when the kind's own
 * live total peaked while counting. Memory: the live objects and the
 * stacks seen, never the trace's length.
 */
#ifndef POOLSCOPE_KSITES_H
#define POOLSCOPE_KSITES_H

#include <stddef.h>
#include <stdint.h>

#include "metrics.h"
#include "model.h"

enum { AZ_KS_KV, AZ_KS_MMAP_ANON, AZ_KS_MMAP_FILE, AZ_KS_N };

typedef struct az_ks az_ks_t;

az_ks_t *az_ks_create(void);                    /* NULL: out of memory */
void az_ks_destroy(az_ks_t *k);                 /* accepts NULL */

/* Count calls, bytes and peaks only while on (the default). */
void az_ks_counting(az_ks_t *k, int on);

/* One model operation; those of other kinds are ignored. 0, or PSC_ENOMEM
 * (that object is then not attributed). */
int az_ks_op(az_ks_t *k, const pm_op_t *o);

/* The kind's sites (a stack with no call counted, nothing live and no
 * part of the peak is left out), unordered; valid until the next op. */
const az_site_t *az_ks_sites(az_ks_t *k, int kind, size_t *n);

/* The kind's peak of live bytes while counting. */
uint64_t az_ks_peak(const az_ks_t *k, int kind);

#endif
