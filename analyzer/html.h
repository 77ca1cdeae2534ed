/* html.h — one self-contained HTML page of a trace (prefix az_html).
 *
 * `poolscope html` writes a single file that a browser opens with no
 * network: the page's script and style are inlined (analyzer/html_app.js,
 * analyzer/html_app.css, embedded in the binary at build time) and a
 * Content-Security-Policy forbids every external load. The data is
 * aggregated, never the raw events, as one JSON document in a
 * <script type="application/json">:
 *   - a timeline of AZ_HTML_TL_BUCKETS buckets (maxima of heap live, mmap
 *     anonymous / file-backed / committed / reserved, RSS, pool outstanding
 *     and reserved, KV blocks with their tokens and capacity; counts of heap
 *     allocations and, per buffer pool, acquires, misses, requested and
 *     granted bytes);
 *   - the marker lanes (scopes paired by name and instance, points), at
 *     most AZ_HTML_LANE_ITEMS items a lane (closer ones merged beyond that);
 *   - allocation sites: a row per (heap | pool | KV, pool, stack) with its
 *     displayed frames (outermost first, wrappers at the inner end dropped
 *     as the report's labels do), totals (calls, bytes, live at exit,
 *     temporary), what it held at the peaks of heap, RSS, pool outstanding
 *     and KV blocks (the moments of those peaks are peaks.pk_t: the page
 *     opens its cursor on one), and per site bucket (AZ_HTML_TL_BUCKETS / 2 of them)
 *     the bytes allocated, the allocations and the bytes freed, from which
 *     the page derives what is live at each bucket's end. While reading,
 *     4096 stacks have rows at once: when more allocate, the quarter that
 *     allocated least so far is summed into one "(small stacks, merged
 *     while reading)" row per kind, and a stack of those that allocates
 *     again starts a row afresh (a Python program has thousands of stacks
 *     before its script runs: its script's lines keep their rows). At most
 *     AZ_HTML_ROWS rows are written, the rest summed into one "(other stacks)" row per
 *     kind; when the rows' non-empty site buckets would pass 300,000 they
 *     are written over buckets twice (four times...) as wide. So the file's
 *     size is bounded whatever the trace's length;
 *   - the pools, the KV figures and, with a replay file, its policies.
 *
 * The figures come from the scan (analyzer/scan.h) and its model: the peaks
 * and their times are the report's. The per-site rows are taken in the
 * scan's hook from a second instance of the same model (model/model.h),
 * whose operations name each object's stack.
 */
#ifndef POOLSCOPE_HTML_H
#define POOLSCOPE_HTML_H

#include <stddef.h>
#include <stdint.h>

#include "sites.h"

#define AZ_HTML_TL_BUCKETS 2048
#define AZ_HTML_ROWS       1500
#define AZ_HTML_LANE_ITEMS 8000

typedef struct az_html_opts {
    const char *trace;           /* the .pst */
    const char *replay_json;     /* replay --json output for the policies table; NULL none */
    const char *out;             /* the HTML file (written through common/outfile.h) */
    int out_special;             /* 1: a device or FIFO output is written in place */
    const char *const *phase_frames;   /* --phase-frame FUNC[=NAME] as in scan.h */
    size_t n_phase_frames;
    az_sv_opts_t sites;          /* wrapper skipping (sites.h) */
    void (*progress)(void *ctx, uint64_t events, uint64_t bytes, uint64_t file_bytes);
    void *progress_ctx;
} az_html_opts_t;

typedef struct az_html_out {
    int warning;                 /* 1: the trace is damaged; what was readable is shown */
    uint64_t bytes;              /* size of the page written */
    uint64_t events;             /* events read */
    uint64_t rows, rows_merged;  /* site rows written; rows summed into "(other stacks)" */
    char live[160];              /* "" or, for a trace still being written (scan.h writing_pid),
                                    az_scan_warning's line: the page was made up to its last chunk */
} az_html_out_t;

/* Scan o->trace and write the page to o->out. 0, or a negative PSC_E*
 * code with a message for the user (an unreadable trace or replay file,
 * an output that is one of the inputs, a write that failed: PSC_EIO);
 * nothing is left at o->out on failure (its old content stays). */
int az_html(const az_html_opts_t *o, az_html_out_t *out, char *msg, size_t msglen);

#endif
