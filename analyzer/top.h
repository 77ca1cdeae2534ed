/* top.h — one frame of `poolscope top`: a scanned trace as a screenful
 * (prefix az_top_).
 *
 * Every figure is one the scan (scan.c), the metrics (metrics.c) and the
 * site view (sites.c) already computed for `report`: heap live is the
 * heap's live bytes at the trace's end (report's leaked_bytes, called
 * "live" here since the end is now), the sites are report's rows ordered
 * by live bytes (its "leaks" table), peaks and phases are report's. What
 * top adds is only the presentation: the last minute of the timeline as
 * min, max and a sparkline per series, rates per second of trace time.
 *
 * The frame is plain text, at most `cols` columns (longer labels are cut)
 * and `rows` lines (the site table takes the rows left); the terminal
 * handling (alternate screen, refresh, keys) is the CLI's (cli/cmd_top.c).
 */
#ifndef POOLSCOPE_TOP_H
#define POOLSCOPE_TOP_H

#include <stdio.h>

#include "scan.h"
#include "sites.h"
#include "symbolize.h"

typedef struct az_top_opts {
    unsigned cols, rows;         /* the terminal's size; 0: 80 x 24 */
    double interval_s;           /* the refresh interval, for the header; 0: --once */
    az_sv_opts_t sites;          /* as report's --depth, --skip-frame, --no-skip */
    int no_symbols;              /* 1: addresses only */
} az_top_opts_t;

/* Timeline buckets top asks the scan for: enough that the last minute of
 * an hour-long trace is some 70 of them (the width doubles as the trace
 * grows: scan.h). */
#define AZ_TOP_BUCKETS 4096

/* Write one frame of scan s to out: lines ending in '\n', none longer
 * than o->cols bytes of text. */
void az_top_frame(const az_scan_t *s, const az_top_opts_t *o, FILE *out);

#endif
