/* marks.c — BEGIN/END pairing of marker events (see marks.h).
 *
 * The events are sorted by (name, instance, time, arrival) so each
 * instance's events are one run in time order; a depth counter per run
 * turns them into spans. The arrival order breaks ties so a BEGIN and an
 * END at the same tick keep the order the program wrote them in.
 */
#include "marks.h"

#include <stdlib.h>

typedef struct mk {              /* a marker event, sortable by (name, instance, time) */
    uint64_t t, inst;
    uint32_t name, seq;
    uint8_t kind;
} mk_t;

static int mk_cmp(const void *a, const void *b)
{
    const mk_t *x = a, *y = b;
    if (x->name != y->name) return x->name < y->name ? -1 : 1;
    if (x->inst != y->inst) return x->inst < y->inst ? -1 : 1;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

long az_marks_pair(const az_scan_t *s, az_mark_span_t **out)
{
    size_t n = s->n_markers;
    *out = NULL;
    if (!n) return 0;
    mk_t *m = malloc(n * sizeof *m);
    az_mark_span_t *sp = malloc(n * sizeof *sp);   /* at most one span per event */
    if (!m || !sp) { free(m); free(sp); return -1; }
    for (size_t i = 0; i < n; i++)
        m[i] = (mk_t){ s->markers[i].t, s->markers[i].instance, s->markers[i].name, (uint32_t)i, s->markers[i].kind };
    qsort(m, n, sizeof *m, mk_cmp);
    size_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint64_t depth = 0, start = 0;
        for (; j < n && m[j].name == m[i].name && m[j].inst == m[i].inst; j++) {
            if (m[j].kind == AZ_MARK_POINT) { sp[ns++] = (az_mark_span_t){ m[j].t, m[j].t, 0, m[j].name, 1 }; continue; }
            if (m[j].kind == AZ_MARK_BEGIN) { if (!depth++) start = m[j].t; continue; }
            if (depth && !--depth) sp[ns++] = (az_mark_span_t){ start, m[j].t, m[i].inst, m[i].name, 0 };
        }
        if (depth) sp[ns++] = (az_mark_span_t){ start, s->t_last, m[i].inst, m[i].name, 0 };
        i = j;
    }
    free(m);
    *out = sp;
    return (long)ns;
}
