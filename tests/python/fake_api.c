/* fake_api.c — a stand-in tracer for the layout test of the Python package
 * (tests/integration/python.sh): a shared library exporting a
 * "poolscope_api" table built from include/poolscope/poolscope.h itself, so
 * the package's ctypes mirror of ps_api_t and ps_event_t is checked against
 * the C compiler's layout. It interposes nothing.
 *
 *   cc -shared -fPIC -I include [-DFAKE_VERSION=N] [-DFAKE_SIZE=N]
 *      [-DFAKE_NULL_EMIT] -o fake.so tests/python/fake_api.c
 *
 * Each emit appends one line to the file named by $FAKE_PS_LOG: type,
 * n_fields, f[1], name, ids and payload as the C side reads them; enable
 * appends "enable ON". enabled() returns 1 until enable(0).
 */
#include <stdio.h>
#include <stdlib.h>

#include "poolscope/poolscope.h"

#ifndef FAKE_VERSION
#define FAKE_VERSION PS_API_VERSION
#endif
#ifndef FAKE_SIZE
#define FAKE_SIZE sizeof(ps_api_t)
#endif

static int on = 1;

static FILE *log_file(void)
{
    const char *p = getenv("FAKE_PS_LOG");
    return p ? fopen(p, "a") : NULL;
}

__attribute__((unused)) static void fake_emit(const ps_event_t *ev)
{
    FILE *f = log_file();
    if (!f) return;
    fprintf(f, "type=%u n_fields=%u f1=%llu name=%s n_ids=%u n_payload=%u payload=", ev->type,
            ev->n_fields, (unsigned long long)ev->f[1], ev->name ? ev->name : "(null)", ev->n_ids,
            ev->n_payload);
    for (uint32_t i = 0; i < ev->n_payload && ev->payload; i++)
        fprintf(f, "%s%lld", i ? "," : "", (long long)ev->payload[i]);
    fputc('\n', f);
    fclose(f);
}

static void fake_enable(int v)
{
    FILE *f = log_file();
    on = v;
    if (!f) return;
    fprintf(f, "enable %d\n", v);
    fclose(f);
}

static int fake_enabled(void) { return on; }

static int fake_flush(void)
{
    FILE *f = log_file();
    if (!f) return 0;
    fputs("flush\n", f);
    fclose(f);
    return 0;
}

__attribute__((visibility("default"))) const ps_api_t poolscope_api = {
    FAKE_VERSION, FAKE_SIZE,
#ifdef FAKE_NULL_EMIT
    NULL,
#else
    fake_emit,
#endif
    fake_enable, fake_enabled, fake_flush,
    NULL,   /* session: the package does not read it (pools only) */
};
