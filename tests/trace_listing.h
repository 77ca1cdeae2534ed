/* trace_listing.h — the reader tests' shared helpers (static, one copy per
 * suite): a writer into memory, and a trace read back as one line per
 * event in the form of the tests/golden listings, so two traces compare
 * as strings. Include after cmocka.h. */
#ifndef PS_TEST_TRACE_LISTING_H
#define PS_TEST_TRACE_LISTING_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/format.h"
#include "poolscope/reader.h"
#include "poolscope/writer.h"

typedef struct membuf { char *p; size_t len; FILE *fp; } membuf_t;

static pst_writer_t *mem_writer(membuf_t *m, const pst_writer_cfg_t *cfg)
{
    m->p = NULL;
    m->len = 0;
    m->fp = open_memstream(&m->p, &m->len);
    assert_non_null(m->fp);
    int err = 0;
    pst_writer_t *w = pst_writer_open_fp(m->fp, cfg, &err);
    assert_non_null(w);
    return w;
}

static void mem_done(membuf_t *m) { fclose(m->fp); }   /* p/len final after this */

/* One line per event; with_ver adds the VER records' versions. */
static void format_event(char *out, size_t cap, const pst_event_t *ev, int with_ver)
{
    const char *lay = pst_event_layout(ev->type);
    int n = snprintf(out, cap, "%u %u %llu %llu %s", ev->stream, ev->tid,
                     (unsigned long long)ev->seq, (unsigned long long)ev->ts, pst_event_name(ev->type));
    if (ev->stack) n += snprintf(out + n, cap - (size_t)n, " stack=%u", ev->stack);
    for (unsigned i = 0; lay[i] && (size_t)n < cap; i++) {
        if (lay[i] == 'A') n += snprintf(out + n, cap - (size_t)n, " 0x%llx", (unsigned long long)ev->f[i]);
        else if (lay[i] == 'z') n += snprintf(out + n, cap - (size_t)n, " %lld", (long long)ev->f[i]);
        else if (lay[i] == 'S') n += snprintf(out + n, cap - (size_t)n, " \"%s\"", ev->str ? ev->str : "?");
        else if (lay[i] == 'L') {
            n += snprintf(out + n, cap - (size_t)n, " [");
            for (uint32_t k = 0; k < ev->n_ids && (size_t)n < cap; k++)
                n += snprintf(out + n, cap - (size_t)n, k ? ",%u" : "%u", ev->ids[k]);
            if ((size_t)n < cap) n += snprintf(out + n, cap - (size_t)n, "]");
        } else if (lay[i] == 'P') {
            n += snprintf(out + n, cap - (size_t)n, " (");
            for (uint32_t k = 0; k < ev->n_payload && (size_t)n < cap; k++)
                n += snprintf(out + n, cap - (size_t)n, k ? ",%lld" : "%lld", (long long)ev->payload[k]);
            if ((size_t)n < cap) n += snprintf(out + n, cap - (size_t)n, ")");
        } else n += snprintf(out + n, cap - (size_t)n, " %llu", (unsigned long long)ev->f[i]);
    }
    if (with_ver && (size_t)n < cap && ev->n_ver)
        snprintf(out + n, cap - (size_t)n, " ver=%u,%u", ev->ver[0], ev->n_ver > 1 ? ev->ver[1] : 0);
}

/* Every event of a trace in memory, one line each (malloc'd). */
static char *trace_listing(const void *buf, size_t len, pst_status_t *st_out, int with_ver)
{
    int err = 0;
    pst_reader_t *r = pst_open_mem(buf, len, &err);
    assert_non_null(r);
    size_t cap = 1 << 16, used = 0;
    char *out = malloc(cap);
    out[0] = 0;
    pst_event_t ev;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {
        char line[4096];
        format_event(line, sizeof line, &ev, with_ver);
        size_t l = strlen(line);
        while (used + l + 2 > cap) out = realloc(out, cap *= 2);
        memcpy(out + used, line, l);
        used += l;
        out[used++] = '\n';
        out[used] = 0;
    }
    assert_int_equal(rc, 0);
    if (st_out) *st_out = *pst_status(r);
    pst_close(r);
    return out;
}

#endif
