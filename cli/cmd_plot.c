/* cmd_plot.c — `poolscope plot FILE -o DIR [--replay REPLAY.json]`:
 * argument parsing; the work is analyzer/plot.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "plot.h"

void cmd_plot_help(FILE *out)
{
    fputs("usage: poolscope plot FILE -o DIR [--replay REPLAY.json]\n"
          "       poolscope plot --replay REPLAY.json -o DIR\n\n"
          "Draw a trace with gnuplot into DIR (created if needed), PNG and SVG each:\n"
          "  memory     live heap, mmap'd (anonymous, file-backed), RSS and pool bytes\n"
          "             over time, with marker ticks\n"
          "  sizes      requested-size histogram     lifetimes  lifetime histogram\n"
          "  reuse_cdf  reuse-distance CDF           kv         KV blocks and utilization\n"
          "  policies   peak reserved vs peak live per policy (from replay --json)\n"
          "The data files (*.dat) and gnuplot scripts (*.gp) stay in DIR.\n\n"
          "Exit: 0, or 2 for bad usage, an unreadable input or gnuplot failing.\n", out);
}

int cmd_plot(int argc, char **argv)
{
    const char *file = NULL, *dir = NULL, *replay = NULL;
    int quiet = 0;
    const cli_opt_t opts[] = {
        { "-o", NULL, &dir, NULL }, { "--replay", NULL, &replay, NULL }, { "--quiet", &quiet, NULL, NULL },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "plot", cmd_plot_help, opts, NULL, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if ((!file && !replay) || !dir) { cli_cmd_err("plot", "usage: poolscope plot FILE -o DIR [--replay REPLAY.json]"); return CLI_USAGE; }
    char made[8192], msg[512];
    int warn;
    if (az_plot(file, dir, replay, &warn, made, sizeof made, msg, sizeof msg))
        return cli_file_err("plot", file ? file : replay, msg);
    if (warn) cli_warn_damaged("plot", file, "plotted");
    if (!quiet) fputs(made, stdout);
    return CLI_OK;
}
