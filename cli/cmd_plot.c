/* cmd_plot.c — `poolscope plot FILE -o DIR [--replay REPLAY.json]`:
 * argument parsing; the work is analyzer/plot.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "plot.h"

int  cmd_plot(int argc, char **argv);
void cmd_plot_help(FILE *out);

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
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--replay")) {
            if (i + 1 >= argc) { cli_err("plot: %s needs a value", a); return CLI_USAGE; }
            if (!strcmp(a, "-o")) dir = argv[++i]; else replay = argv[++i];
        } else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cmd_plot_help(stdout); return CLI_OK; }
        else if (a[0] == '-' && a[1]) { cli_err("plot: unknown option '%s'", a); return CLI_USAGE; }
        else if (!file) file = a;
        else { cli_err("plot: one trace file only ('%s' is extra)", a); return CLI_USAGE; }
    }
    if ((!file && !replay) || !dir) { cli_err("plot: usage: poolscope plot FILE -o DIR [--replay REPLAY.json]"); return CLI_USAGE; }
    char made[8192], msg[512];
    int warn;
    if (az_plot(file, dir, replay, &warn, made, sizeof made, msg, sizeof msg)) {
        fprintf(stderr, "poolscope plot: %s: %s\n", file ? file : replay, msg);
        return CLI_USAGE;
    }
    if (warn) fprintf(stderr, "poolscope plot: %s: warning: trace is damaged or cut short; plotted what was readable\n", file);
    if (!quiet) fputs(made, stdout);
    return CLI_OK;
}
