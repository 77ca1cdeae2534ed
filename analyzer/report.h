/* report.h — `poolscope report` output from a scanned trace (prefix az_).
 *
 * Text for people (units, aligned tables, symbolized sites) and JSON for
 * CI with the keys DESIGN.md promises. Both read an az_scan_t; neither
 * touches the trace again except for strings, stacks and modules.
 */
#ifndef POOLSCOPE_REPORT_H
#define POOLSCOPE_REPORT_H

#include <stdint.h>
#include <stdio.h>

#include "scan.h"
#include "symbolize.h"

typedef struct az_report_opts {
    unsigned top;                /* sites per table; 0: 10 */
    int no_symbols;              /* 1: addresses only (faster, for tests) */
} az_report_opts_t;

void az_report_text(const az_scan_t *s, const az_report_opts_t *o, FILE *out);
void az_report_json(const az_scan_t *s, const az_report_opts_t *o, FILE *out);

/* "12.3 MiB", "512 B" — binary units, 3 significant digits. Returns buf. */
const char *az_fmt_bytes(uint64_t v, char *buf, size_t len);
/* "1.234 s", "12.5 ms", "830 ns". Returns buf. */
const char *az_fmt_ns(uint64_t ns, char *buf, size_t len);
/* "1,234,567". Returns buf. */
const char *az_fmt_count(uint64_t v, char *buf, size_t len);

/* The name of an allocation site: its first frame outside the allocator,
 * "fn (file:line) < caller" when a caller is known. "(no stack)" for 0. */
const char *az_site_name(const az_scan_t *s, az_sym_t *sym, uint32_t stack, char *buf, size_t len);

#endif
