/* plot.h — gnuplot figures of a trace (prefix az_plot).
 *
 * Writes data files (*.dat) and gnuplot scripts (*.gp) into a directory and
 * runs gnuplot on each script, giving a PNG (pngcairo) and an SVG per figure:
 *   memory      live heap, mmap'd (anonymous / file-backed), RSS and pool
 *               bytes over time; below it, in a lane of its own on the same
 *               time axis, the markers (scopes as bars, points as ticks)
 *   sizes       requested sizes (log2 buckets): a heap panel (malloc
 *               family) and a pool-acquire panel
 *   lifetimes   allocation to free / acquire to reclaim (log2 buckets),
 *               the same two panels
 *   reuse_cdf   CDF of the reuse distance, heap and pool acquires; a series
 *               with fewer than AZ_PLOT_MIN_CDF_SAMPLES re-uses is not
 *               drawn, and the title and a note say so
 *   kv          KV blocks in use and utilization over time (with KV events)
 *   policies    per-policy peak reserved vs peak live from replay --json:
 *               one panel for the tensor/heap policies, one for the KV ones
 *               (each with its own scale; a group not in the file is left out)
 * The scripts stay in the directory so a figure can be restyled and re-run.
 *
 * A selection (--phase, --from/--to) goes to the scan: the histograms and
 * the CDF count only it. The timelines (memory, kv) cover --from/--to only;
 * with --phase they are whole-run (a phase is not one span of time) and
 * their titles say so.
 */
#ifndef POOLSCOPE_PLOT_H
#define POOLSCOPE_PLOT_H

#include <stddef.h>
#include <stdint.h>

#define AZ_PLOT_MIN_CDF_SAMPLES 20

typedef struct az_plot_opts {
    const char *trace;           /* NULL when only replay_json is plotted */
    const char *replay_json;     /* NULL: no policies figure */
    const char *dir;             /* made if missing; see az_plot */
    const char *phase;           /* as az_scan_opts_t; need a trace */
    int window;
    uint64_t from, to;
} az_plot_opts_t;

typedef struct az_plot_out {
    int warning;                 /* 1: the trace is damaged; what was readable was drawn */
    char made[8192];             /* the images written, "DIR/NAME.png\n" each */
    char notes[2048];            /* what was left out and why, one line each, for people */
} az_plot_out_t;

/* 0 on success. Negative PS_E* with a message on failure (bad input, an
 * unknown phase — PSC_ENOENT naming the phases —, gnuplot missing or
 * failing); nothing is created or changed then. */
int az_plot(const az_plot_opts_t *o, az_plot_out_t *out, char *msg, size_t msglen);

#endif
