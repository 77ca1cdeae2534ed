/* cmd_export.c — `poolscope export FILE --format chrome|folded -o OUT
 * [--weight bytes|calls]`: argument parsing; the work is analyzer/export.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "export.h"

int  cmd_export(int argc, char **argv);
void cmd_export_help(FILE *out);

void cmd_export_help(FILE *out)
{
    fputs("usage: poolscope export FILE --format chrome|folded -o OUT [--weight bytes|calls]\n\n"
          "  chrome   Chrome trace-event JSON for Perfetto (ui.perfetto.dev) or\n"
          "           chrome://tracing: counter tracks for live heap bytes, mmap'd\n"
          "           bytes, RSS, each pool's outstanding/cached bytes and KV blocks;\n"
          "           instant events for point markers; async slices for scopes.\n"
          "  folded   folded stacks for flamegraph.pl, speedscope or inferno: one\n"
          "           line per allocation stack, \"outer;...;inner WEIGHT\".\n"
          "  --weight bytes (default) or calls: what a folded line's weight counts\n\n"
          "Exit: 0, or 2 for bad usage or an unreadable trace.\n", out);
}

int cmd_export(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *fmt = NULL, *weight = "bytes";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") || !strcmp(a, "--format") || !strcmp(a, "--weight")) {
            if (i + 1 >= argc) { cli_err("export: %s needs a value", a); return CLI_USAGE; }
            const char *v = argv[++i];
            if (!strcmp(a, "-o")) out = v; else if (!strcmp(a, "--format")) fmt = v; else weight = v;
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cmd_export_help(stdout); return CLI_OK; }
        else if (a[0] == '-' && a[1]) { cli_err("export: unknown option '%s'", a); return CLI_USAGE; }
        else if (!file) file = a;
        else { cli_err("export: one trace file only ('%s' is extra)", a); return CLI_USAGE; }
    }
    if (!file || !out || !fmt) { cli_err("export: usage: poolscope export FILE --format chrome|folded -o OUT"); return CLI_USAGE; }
    int f = !strcmp(fmt, "chrome") ? AZ_EXPORT_CHROME : !strcmp(fmt, "folded") ? AZ_EXPORT_FOLDED : -1;
    if (f < 0) { cli_err("export: --format must be chrome or folded, not '%s'", fmt); return CLI_USAGE; }
    int w = !strcmp(weight, "bytes") ? AZ_WEIGHT_BYTES : !strcmp(weight, "calls") ? AZ_WEIGHT_CALLS : -1;
    if (w < 0) { cli_err("export: --weight must be bytes or calls, not '%s'", weight); return CLI_USAGE; }
    int warn;
    char msg[512];
    if (az_export(file, f, w, out, &warn, msg, sizeof msg)) {
        fprintf(stderr, "poolscope export: %s: %s\n", file, msg);
        return CLI_USAGE;
    }
    if (warn) fprintf(stderr, "poolscope export: %s: warning: trace is damaged or cut short; exported what was readable\n", file);
    return CLI_OK;
}
