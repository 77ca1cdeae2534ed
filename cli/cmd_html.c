/* cmd_html.c — `poolscope html FILE [-o OUT.html] [--replay REPLAY.json]`:
 * argument parsing; the work is analyzer/html.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "html.h"
#include "site_args.h"

void cmd_html_help(FILE *out)
{
    fputs("usage: poolscope html FILE [-o OUT.html] [--replay REPLAY.json]\n\n"
          "Write one self-contained HTML page of a trace, to open in a browser with no\n"
          "network (everything is inlined; the page forbids external loads):\n"
          "  timeline     heap live, mmap committed and reserved, RSS, pool outstanding\n"
          "               and reserved, KV blocks and utilization; the markers in lanes\n"
          "               below (overlapping scopes stacked). Wheel zooms, drag selects\n"
          "               a range, shift+drag or the axis strip pans, a click places\n"
          "               the cursor, a click on a marker scope selects it\n"
          "  flame graph  bytes allocated in the selection by call stack (heap, pool\n"
          "               acquires, KV blocks), and what is live at the cursor; buttons\n"
          "               jump to the peak of heap and of RSS\n"
          "  sites        sortable, searchable table: calls, bytes, at the heap peak,\n"
          "               live at exit, temporary; leaks at exit; full stacks\n"
          "  pools, KV    hit rate, misses over time, requested vs granted bytes; KV\n"
          "               blocks and utilization; with --replay the policies table\n"
          "The page holds aggregates (a 2048-bucket timeline, sites per time bucket),\n"
          "not events, so its size is bounded whatever the trace's length.\n\n"
          "  -o, --output OUT  the page (default: FILE with .pst replaced by .html;\n"
          "                  '-' for standard output)\n"
          "  --replay FILE   add the policies of FILE (poolscope replay --json)\n"
          "  --quiet         do not print the path written\n", out);
    fputs(cli_frames_help, out);
    fputs(cli_symbols_help, out);
    fputs(cli_suppress_help, out);
    fputs(cli_sites_help, out);
    fputs("\nExit: 0, or 2 for bad usage, an unreadable trace or replay file, an output\n"
          "that is an input, or a write that failed (nothing is left half-written).\n", out);
}

typedef struct html_args {
    az_html_opts_t ho;
    cli_sites_t sites;
    cli_frames_t frames;
} html_args_t;

static int take(void *ctx, const char *opt, const char *v)
{
    html_args_t *ha = ctx;
    if (!strcmp(opt, "--phase-frame")) return cli_frames_take(&ha->frames, "html", v);
    return cli_sites_take(&ha->sites, "html", opt, v);
}

int cmd_html(int argc, char **argv)
{
    const char *file = NULL;
    int quiet = 0;
    html_args_t ha = { 0 };
    ha.sites.o = &ha.ho.sites;
    const cli_opt_t opts[] = {
        { "-o --output", NULL, &ha.ho.out, NULL }, { "--replay", NULL, &ha.ho.replay_json, NULL },
        { "--quiet", &quiet, NULL, NULL }, { "--no-skip", &ha.ho.sites.no_skip, NULL, NULL },
        { "--skip-frame --depth --phase-frame", NULL, NULL, take },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "html", cmd_html_help, opts, &ha, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file) { cli_cmd_err("html", "no trace file (usage: poolscope html FILE [-o OUT.html])"); return CLI_USAGE; }
    char def[4096];
    if (!ha.ho.out) {
        size_t n = strlen(file);
        if (n > 4 && !strcmp(file + n - 4, ".pst")) n -= 4;
        if (!strcmp(file, "/dev/stdin") || n + 6 > sizeof def) {
            cli_cmd_err("html", "give the page's name with -o");
            return CLI_USAGE;
        }
        snprintf(def, sizeof def, "%.*s.html", (int)n, file);
        ha.ho.out = def;
    }
    int to_stdout = !strcmp(ha.ho.out, "-");
    if (to_stdout) { ha.ho.out = "/dev/stdout"; ha.ho.out_special = 1; quiet = 1; }
    ha.ho.trace = file;
    ha.ho.phase_frames = ha.frames.specs;
    ha.ho.n_phase_frames = ha.frames.n;
    cli_progress_t pg;
    if (cli_progress_start(&pg, "html", file)) { ha.ho.progress = cli_progress; ha.ho.progress_ctx = &pg; }
    az_html_out_t out;
    char msg[512];
    rc = az_html(&ha.ho, &out, msg, sizeof msg);
    cli_progress_done(&pg);
    if (rc) return cli_file_err("html", file, msg);
    if (out.live[0]) fprintf(stderr, "poolscope html: %s: %s\n", file, out.live);   /* not damage */
    else if (out.warning) cli_warn_damaged("html", file, "showed");
    if (!quiet) printf("%s\n", ha.ho.out);
    return to_stdout ? CLI_OK : cli_stdout_done("html", CLI_OK);
}
