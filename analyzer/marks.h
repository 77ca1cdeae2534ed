/* marks.h — a trace's marker events as scopes and points (prefix az_marks).
 *
 * The memory figure's lane (plot.c) and the page's lanes (html.c) draw the
 * same pairing of BEGIN/END events; it lives here once so the two cannot
 * come to disagree on what a scope is.
 */
#ifndef POOLSCOPE_MARKS_H
#define POOLSCOPE_MARKS_H

#include <stddef.h>
#include <stdint.h>

#include "scan.h"

typedef struct az_mark_span {
    uint64_t t0, t1;             /* a scope's begin and end; a point: both its time */
    uint64_t inst;               /* a scope's instance; 0 for a point */
    uint32_t name;               /* string id (az_scan_string) */
    uint8_t  point;              /* 1 point, 0 scope */
} az_mark_span_t;

/* The markers s kept, paired by (name, instance): nested scopes of one
 * instance count as the outermost, an END with no open BEGIN is dropped, a
 * scope still open at the end runs to s->t_last. The spans come grouped by
 * name, then instance, each group in time order. *out is malloc'd (NULL
 * when there are none); returns how many, or -1 out of memory. */
long az_marks_pair(const az_scan_t *s, az_mark_span_t **out);

#endif
