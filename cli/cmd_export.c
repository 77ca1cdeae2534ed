/* cmd_export.c — `poolscope export FILE --format chrome|folded|pprof -o OUT
 * [--weight bytes|calls] [--phase NAME] [--from T --to T]`: argument
 * parsing; the work is analyzer/export.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "export.h"
#include "scan.h"
#include "site_args.h"
#include "units.h"

void cmd_export_help(FILE *out)
{
    fputs("usage: poolscope export FILE --format chrome|folded|pprof -o OUT [--weight bytes|calls]\n"
          "                        [--phase NAME] [--from T --to T]\n\n"
          "  chrome   Chrome trace-event JSON for Perfetto (ui.perfetto.dev) or\n"
          "           chrome://tracing: counter tracks for live heap bytes, mmap'd\n"
          "           bytes, RSS, each pool's outstanding/cached bytes and KV blocks;\n"
          "           instant events for point markers; scopes as slices (\"X\") on\n"
          "           their thread, nested, and as async tracks where they overlap\n"
          "           (requests); allocations of 64 KiB and more as instants named\n"
          "           by their site\n"
          "  --allocations  chrome: every allocation an instant (up to 2 M)\n"
          "  folded   folded stacks for flamegraph.pl, speedscope or inferno: one\n"
          "           line per displayed stack (stacks that read the same summed),\n"
          "           \"outer;...;inner WEIGHT\", demangled, inlined frames marked _[i].\n"
          "  -o, --output OUT\n"
          "           the file to write; - for standard output (a pipe into\n"
          "           flamegraph.pl or speedscope)\n"
          "  pprof    the allocation sites as a gzipped pprof profile (go tool pprof,\n"
          "           Pyroscope, Parca, Grafana): sample types alloc_objects,\n"
          "           alloc_space (default), inuse_objects, inuse_space (live at exit);\n"
          "           a Python frame is a function of its .py file at its line\n"
          "  --weight bytes (default: requested bytes allocated at the stack) or calls\n"
          "           (allocation calls): the unit of a folded line's WEIGHT\n"
          "  --lines  folded frames as \"function (file:line)\" (default: function);\n"
          "           a Python frame as \"qualname (file.py:LINE)\"\n"
          "  --no-skip, --skip-frame PAT: which wrapper frames a folded stack drops at\n"
          "           its inner end and chrome's site names skip (as in report)\n"
          "  --depth N  frames in a site's name (chrome's allocation instants), as in report\n"
          "  --phase NAME    only while a scope of marker NAME is open (as in report)\n"
          "  --from T --to T only events in [T, T'] since trace start; T like 1.5s,\n"
          "                  200ms, 30us, 100ns (plain number: seconds)\n"
          "           With a selection, folded weighs only the allocations made in it;\n"
          "           chrome has only its samples, allocations, markers and scopes\n"
          "           (each counter's value where the selection opens, scopes crossing\n"
          "           its edges cut there, args {\"cut\": \"begin\"|\"end\"|\"both\"}; thread names and\n"
          "           the selection, in otherData, whatever it is). Times stay trace\n"
          "           times.\n", out);
    fputs(cli_symbols_help, out);
    fputs("\n"
          "Exit: 0, or 2 for bad usage, an unreadable trace or a phase the trace does\n"
          "not have (the message lists those it has; no output is left).\n", out);
}

typedef struct export_args {
    cli_sites_t cs;
    az_export_opts_t *eo;
    int given;                   /* --from 1, --to 2 */
} export_args_t;

/* --skip-frame, --depth, --from T, --to T */
static int take(void *ctx, const char *opt, const char *v)
{
    export_args_t *ea = ctx;
    if (strcmp(opt, "--from") && strcmp(opt, "--to")) return cli_sites_take(&ea->cs, "export", opt, v);
    return cli_time_take("export", opt, v, &ea->eo->from, &ea->eo->to, &ea->given);
}

int cmd_export(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *fmt = NULL, *weight = "bytes";
    az_export_opts_t eo = { .lines = 0 };
    export_args_t ea = { .cs = { .o = &eo.sites }, .eo = &eo };
    const cli_opt_t opts[] = {
        { "-o --output", NULL, &out, NULL }, { "--format", NULL, &fmt, NULL }, { "--weight", NULL, &weight, NULL },
        { "--lines", &eo.lines, NULL, NULL }, { "--allocations", &eo.allocations, NULL, NULL }, { "--no-skip", &eo.sites.no_skip, NULL, NULL },
        { "--phase", NULL, &eo.phase, NULL },
        { "--skip-frame --depth --from --to", NULL, NULL, take },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "export", cmd_export_help, opts, &ea, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file || !out || !fmt) { cli_cmd_err("export", "usage: poolscope export FILE --format chrome|folded|pprof -o OUT"); return CLI_USAGE; }
    int f = !strcmp(fmt, "chrome") ? AZ_EXPORT_CHROME : !strcmp(fmt, "folded") ? AZ_EXPORT_FOLDED :
            !strcmp(fmt, "pprof") ? AZ_EXPORT_PPROF : -1;
    if (f < 0) { cli_cmd_err("export", "--format must be chrome, folded or pprof, not '%s'", fmt); return CLI_USAGE; }
    int w = !strcmp(weight, "bytes") ? AZ_WEIGHT_BYTES : !strcmp(weight, "calls") ? AZ_WEIGHT_CALLS : -1;
    if (w < 0) { cli_cmd_err("export", "--weight must be bytes or calls, not '%s'", weight); return CLI_USAGE; }
    if (eo.phase && !*eo.phase) { cli_cmd_err("export", "--phase needs a marker name"); return CLI_USAGE; }
    if (cli_window_done("export", ea.given, &eo.window, eo.from, &eo.to)) return CLI_USAGE;
    int warn;
    char msg[512];
    /* export's options carry no progress callback: the scan's default */
    cli_progress_t pg;
    if (cli_progress_start(&pg, "export", file)) az_scan_set_progress(cli_progress, &pg);
    rc = az_export_ex(file, f, w, &eo, out, &warn, msg, sizeof msg);
    az_scan_set_progress(NULL, NULL);
    cli_progress_done(&pg);
    if (rc) return cli_file_err("export", file, msg);
    if (warn) cli_warn_damaged("export", file, "exported");
    return cli_stdout_done("export", CLI_OK);
}
