/* report.h — `poolscope report` output from a scanned trace (prefix az_).
 *
 * Text for people (units, aligned tables, symbolized sites) and JSON for
 * CI with the keys docs/DESIGN.md ("JSON contract") promises. Both read an
 * az_scan_t; neither touches the trace again except for strings, stacks and
 * modules.
 */
#ifndef POOLSCOPE_REPORT_H
#define POOLSCOPE_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "fmt.h"
#include "scan.h"
#include "sites.h"
#include "symbolize.h"

typedef struct az_report_opts {
    unsigned top;                /* sites per table; 0: 10 */
    int no_symbols;              /* 1: addresses only (faster, for tests) */
    az_sv_opts_t sites;          /* wrapper skipping and label depth (sites.h) */
    int full_stacks;             /* 1: every frame under each site row */
} az_report_opts_t;

void az_report_text(const az_scan_t *s, const az_report_opts_t *o, FILE *out);
void az_report_json(const az_scan_t *s, const az_report_opts_t *o, FILE *out);
/* The JSON's numbers as OpenMetrics text (gauges labelled program and
 * trace; calls by function, phase figures by phase), ending "# EOF".
 * 0 or PSC_ENOMEM. */
int az_report_openmetrics(const az_scan_t *s, const az_report_opts_t *o, FILE *out);

/* The number formatters (psc_fmt_bytes, psc_fmt_ns, psc_fmt_count) are in
 * common/fmt.h. */

/* The name of an allocation site with the default options (sites.h): its
 * first meaningful frame, "fn (file:line) < caller", and " via WRAPPER"
 * when wrappers were skipped. "(no stack)" for 0. */
const char *az_site_name(const az_scan_t *s, az_sym_t *sym, uint32_t stack, char *buf, size_t len);

#endif
