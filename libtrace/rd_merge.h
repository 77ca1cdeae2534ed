/* rd_merge.h — the last stage of the reader (rd_merge.c: the merge order
 * and pst_next; rd_internal.h has the order). pst_next is the public
 * API (reader.h); what is here is for pst_open (reader.c): the defaults
 * it gives the merge's limits.
 */
#ifndef RD_MERGE_H
#define RD_MERGE_H

#include "rd_version.h"

/* Queued events past which the window makes events safe again in a trace
 * with exact SYNC watermarks (rd_safe): memory stays bounded if a writer's
 * flush rounds stop. About 8 bytes per queued event on stress traces. */
#define RD_SYNC_GUARD     (1ull << 23)

#endif
