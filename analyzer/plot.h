/* plot.h — gnuplot figures of a trace (prefix az_plot).
 *
 * Writes data files (*.dat) and gnuplot scripts (*.gp) into a directory and
 * runs gnuplot on each script, giving a PNG (pngcairo) and an SVG per figure:
 *   memory      live heap, mmap'd (anonymous / file-backed), RSS and pool
 *               bytes over time, marker ticks along the bottom
 *   sizes       histogram of requested sizes (log2 buckets)
 *   lifetimes   histogram of allocation lifetimes (log2 buckets)
 *   reuse_cdf   CDF of the reuse distance
 *   kv          KV blocks in use and utilization over time (with KV events)
 *   policies    per-policy peak reserved vs peak live from replay --json
 * The scripts stay in the directory so a figure can be restyled and re-run.
 */
#ifndef POOLSCOPE_PLOT_H
#define POOLSCOPE_PLOT_H

#include <stddef.h>

/* trace may be NULL when only replay_json is plotted. On success returns 0
 * and lists the images written, one path per line, in `made` (may be NULL).
 * Negative PS_E* with a message on failure (bad input, gnuplot missing). */
int az_plot(const char *trace, const char *dir, const char *replay_json, int *warning,
            char *made, size_t made_len, char *msg, size_t msglen);

#endif
