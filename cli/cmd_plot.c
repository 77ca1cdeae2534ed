/* cmd_plot.c — `poolscope plot FILE -o DIR [--replay REPLAY.json]
 * [--phase NAME] [--from T --to T]`: argument parsing; the work is
 * analyzer/plot.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "escape.h"
#include "plot.h"
#include "scan.h"
#include "units.h"

void cmd_plot_help(FILE *out)
{
    fputs("usage: poolscope plot FILE -o DIR [--replay REPLAY.json] [--phase NAME] [--from T --to T]\n"
          "       poolscope plot --replay REPLAY.json -o DIR\n\n"
          "Draw a trace with gnuplot into DIR (created if needed), PNG and SVG each:\n"
          "  memory     live heap, mmap'd (anonymous, file-backed), RSS and pool bytes\n"
          "             over time; the markers in a lane of their own below, on the same\n"
          "             time axis (scopes as bars, points as ticks; 8 names at most)\n"
          "  sizes      requested-size histogram, a panel for heap allocations (malloc\n"
          "             family) and one for pool acquires\n"
          "  lifetimes  lifetime histogram, the same two panels (pool: acquire to reclaim)\n"
          "  reuse_cdf  reuse-distance CDF, heap and pool acquires; a series with fewer\n"
          "             than 20 re-uses is not drawn (the title and a note say so)\n"
          "  kv         KV blocks and utilization over time (traces with KV events)\n"
          "  policies   peak reserved vs peak live per policy (from replay --json): a\n"
          "             panel for malloc/arena/pool/ideal and one for the kv-* policies,\n"
          "             each with its own scale; a group not in the file is left out\n"
          "The data files (*.dat) and gnuplot scripts (*.gp) stay in DIR.\n\n"
          "  -o, --output DIR  the directory to draw into\n"
          "  --replay FILE   also draw `policies` from FILE (poolscope replay --json)\n"
          "  --phase NAME    sizes, lifetimes and reuse_cdf count only while a scope of\n"
          "                  marker NAME is open; memory and kv stay whole-run (a phase\n"
          "                  is not one span of time) and their titles say so\n"
          "  --from T --to T every figure of the trace covers only [T, T'] since trace\n"
          "                  start; T like 1.5s, 200ms, 30us, 100ns (plain number: seconds)\n"
          "  --quiet         print neither the images written nor the notes\n\n"
          "Prints the images written, one per line, and on stderr a note for anything\n"
          "left out (a CDF of too few samples, marker names beyond 8).\n"
          "Exit: 0, or 2 for bad usage, an unreadable input, a phase the trace does not\n"
          "have (the message lists its phases) or gnuplot failing; DIR is then left as\n"
          "it was (not created when it did not exist).\n", out);
}

typedef struct plot_args {
    az_plot_opts_t po;
    int given;                   /* --from 1, --to 2 */
} plot_args_t;

/* --from T, --to T */
static int take(void *ctx, const char *opt, const char *v)
{
    plot_args_t *pa = ctx;
    return cli_time_take("plot", opt, v, &pa->po.from, &pa->po.to, &pa->given);
}

int cmd_plot(int argc, char **argv)
{
    const char *file = NULL;
    int quiet = 0;
    plot_args_t pa = { 0 };
    const cli_opt_t opts[] = {
        { "-o --output", NULL, &pa.po.dir, NULL }, { "--replay", NULL, &pa.po.replay_json, NULL },
        { "--phase", NULL, &pa.po.phase, NULL }, { "--from --to", NULL, NULL, take },
        { "--quiet", &quiet, NULL, NULL },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "plot", cmd_plot_help, opts, &pa, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if ((!file && !pa.po.replay_json) || !pa.po.dir) {
        cli_cmd_err("plot", "usage: poolscope plot FILE -o DIR [--replay REPLAY.json]");
        return CLI_USAGE;
    }
    if (cli_window_done("plot", pa.given, &pa.po.window, pa.po.from, &pa.po.to)) return CLI_USAGE;
    if ((pa.po.phase || pa.po.window) && !file) {
        cli_cmd_err("plot", "--phase and --from/--to select part of a trace: give one");
        return CLI_USAGE;
    }
    pa.po.trace = file;
    az_plot_out_t out;
    char msg[512];
    char em[sizeof msg * 4];   /* msg as text: it may quote the trace (its phase names; common/escape.h) */
    /* plot's options carry no progress callback: the scan's default */
    cli_progress_t pg;
    if (cli_progress_start(&pg, "plot", file)) az_scan_set_progress(cli_progress, &pg);
    rc = az_plot(&pa.po, &out, msg, sizeof msg);
    az_scan_set_progress(NULL, NULL);
    cli_progress_done(&pg);
    if (rc)
        return cli_file_err("plot", file ? file : pa.po.replay_json, psc_esc_text(msg, em, sizeof em));
    if (out.warning) cli_warn_damaged("plot", file, "plotted");
    if (!quiet) {
        for (char *l = out.notes, *nl; *l && (nl = strchr(l, '\n')); l = nl + 1)
            fprintf(stderr, "poolscope plot: note: %.*s\n", (int)(nl - l), l);
        fputs(out.made, stdout);
    }
    return cli_stdout_done("plot", CLI_OK);
}
