/* cmd_export.c — `poolscope export FILE --format chrome|folded -o OUT
 * [--weight bytes|calls]`: argument parsing; the work is analyzer/export.c.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "export.h"
#include "site_args.h"

void cmd_export_help(FILE *out)
{
    fputs("usage: poolscope export FILE --format chrome|folded -o OUT [--weight bytes|calls]\n\n"
          "  chrome   Chrome trace-event JSON for Perfetto (ui.perfetto.dev) or\n"
          "           chrome://tracing: counter tracks for live heap bytes, mmap'd\n"
          "           bytes, RSS, each pool's outstanding/cached bytes and KV blocks;\n"
          "           instant events for point markers; async slices for scopes.\n"
          "  folded   folded stacks for flamegraph.pl, speedscope or inferno: one\n"
          "           line per displayed stack (stacks that read the same summed),\n"
          "           \"outer;...;inner WEIGHT\", demangled, inlined frames marked _[i].\n"
          "  --weight bytes (default) or calls: what a folded line's weight counts\n"
          "  --lines  folded frames as \"function (file:line)\" (default: function)\n"
          "  --no-skip, --skip-frame PAT: which wrapper frames a folded stack drops at\n"
          "           its inner end and chrome's site names skip (as in report)\n\n"
          "Exit: 0, or 2 for bad usage or an unreadable trace.\n", out);
}

static int take_site(void *ctx, const char *opt, const char *v)
{
    return cli_sites_take(ctx, "export", opt, v);
}

int cmd_export(int argc, char **argv)
{
    const char *file = NULL, *out = NULL, *fmt = NULL, *weight = "bytes";
    az_export_opts_t eo = { .lines = 0 };
    cli_sites_t cs = { .o = &eo.sites };
    const cli_opt_t opts[] = {
        { "-o", NULL, &out, NULL }, { "--format", NULL, &fmt, NULL }, { "--weight", NULL, &weight, NULL },
        { "--lines", &eo.lines, NULL, NULL }, { "--no-skip", &eo.sites.no_skip, NULL, NULL },
        { "--skip-frame --depth", NULL, NULL, take_site },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "export", cmd_export_help, opts, &cs, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file || !out || !fmt) { cli_cmd_err("export", "usage: poolscope export FILE --format chrome|folded -o OUT"); return CLI_USAGE; }
    int f = !strcmp(fmt, "chrome") ? AZ_EXPORT_CHROME : !strcmp(fmt, "folded") ? AZ_EXPORT_FOLDED : -1;
    if (f < 0) { cli_cmd_err("export", "--format must be chrome or folded, not '%s'", fmt); return CLI_USAGE; }
    int w = !strcmp(weight, "bytes") ? AZ_WEIGHT_BYTES : !strcmp(weight, "calls") ? AZ_WEIGHT_CALLS : -1;
    if (w < 0) { cli_cmd_err("export", "--weight must be bytes or calls, not '%s'", weight); return CLI_USAGE; }
    int warn;
    char msg[512];
    if (az_export_ex(file, f, w, &eo, out, &warn, msg, sizeof msg)) return cli_file_err("export", file, msg);
    if (warn) cli_warn_damaged("export", file, "exported");
    return CLI_OK;
}
