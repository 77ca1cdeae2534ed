/* cmd_report.c — `poolscope report FILE [--json] [--top N] [--phase NAME]
 * [--from T --to T]`: argument parsing; the work is analyzer/scan.c and
 * analyzer/report.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "escape.h"
#include "phase_frame.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "site_args.h"
#include "units.h"

void cmd_report_help(FILE *out)
{
    fputs("usage: poolscope report FILE [--json] [--top N] [--phase NAME] [--from T --to T]\n\n"
          "Summarize a trace: duration, threads, events by kind, lost events; peak live\n"
          "heap and when, RSS and mmap'd memory (anonymous and file-backed) over time,\n"
          "total allocated, temporary allocations, leaks at exit; size and lifetime\n"
          "histograms; pool hit rate, cached/outstanding peaks, internal fragmentation;\n"
          "address reuse (same address, fresh addresses, reuse distance); KV cache\n"
          "utilization and waste; per-marker phase counts and allocs per decode step;\n"
          "top allocation sites by peak contribution, calls and bytes, symbolized with\n"
          "libdw where debug info exists.\n\n"
          "  --json          the metrics as JSON (keys: REPORT.md; what `gate` reads)\n"
          "  --format text|json|openmetrics\n"
          "                  openmetrics: the JSON's numbers as OpenMetrics gauges\n"
          "                  (poolscope_<key>, labels program and trace; calls by\n"
          "                  function, phase figures by phase) for a Pushgateway\n"
          "  --top N         sites per table (default 10)\n"
          "  --phase NAME    count only while a scope of marker NAME is open\n"
          "  --from T --to T count only events in [T, T'] since trace start;\n"
          "                  T like 1.5s, 200ms, 30us, 100ns (plain number: seconds)\n"
          "  --no-symbols    addresses instead of symbol names (faster)\n"
          "  --full          every frame of each site's stack under its row, and names\n"
          "                  whole (without it C++ template arguments show as <…>)\n", out);
    fputs(cli_frames_help, out);
    fputs(cli_symbols_help, out);
    fputs(cli_suppress_help, out);
    fputs(cli_sites_help, out);
    fputs("\nDocuments: share/doc/poolscope/REPORT.md under the install prefix (the JSON\n"
          "keys), analyzer/REPORT.md in the source.\n", out);
    fputs("\nExit: 0, or 2 for bad usage or an unreadable trace. A trace cut short is\n"
          "reported up to the damage with a warning on stderr.\n", out);
}

typedef struct report_args {
    az_report_opts_t ro;
    cli_sites_t sites;
    az_scan_opts_t so;
    cli_frames_t frames;
    int given;                   /* --from 1, --to 2 */
} report_args_t;

/* --top N, --from T, --to T */
static int take(void *ctx, const char *opt, const char *v)
{
    report_args_t *ra = ctx;
    if (!strcmp(opt, "--skip-frame") || !strcmp(opt, "--depth")) return cli_sites_take(&ra->sites, "report", opt, v);
    if (!strcmp(opt, "--phase-frame")) return cli_frames_take(&ra->frames, "report", v);
    if (!strcmp(opt, "--top")) {
        char *end;
        long n = strtol(v, &end, 10);
        if (*end || n < 1 || n > 100000) { cli_cmd_err("report", "--top: '%s' is not a count", v); return CLI_USAGE; }
        ra->ro.top = (unsigned)n;
        return 0;
    }
    return cli_time_take("report", opt, v, &ra->so.from, &ra->so.to, &ra->given);
}

int cmd_report(int argc, char **argv)
{
    const char *file = NULL, *format = NULL;
    int json = 0;
    report_args_t ra = { 0 };
    ra.sites.o = &ra.ro.sites;
    const cli_opt_t opts[] = {
        { "--json", &json, NULL, NULL }, { "--format", NULL, &format, NULL }, { "--no-symbols", &ra.ro.no_symbols, NULL, NULL },
        { "--full", &ra.ro.full_stacks, NULL, NULL }, { "--no-skip", &ra.ro.sites.no_skip, NULL, NULL },
        { "--phase", NULL, &ra.so.phase, NULL }, { "--top --from --to --skip-frame --depth --phase-frame", NULL, NULL, take },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "report", cmd_report_help, opts, &ra, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (!file) { cli_cmd_err("report", "no trace file (usage: poolscope report FILE [--json])"); return CLI_USAGE; }
    int om = 0;
    if (format) {
        if (!strcmp(format, "json")) json = 1;
        else if (!strcmp(format, "openmetrics")) om = 1;
        else if (strcmp(format, "text")) { cli_cmd_err("report", "--format must be text, json or openmetrics, not '%s'", format); return CLI_USAGE; }
    }
    az_report_opts_t ro = ra.ro;
    az_scan_opts_t so = ra.so;
    so.phase_frames = ra.frames.specs;
    so.n_phase_frames = ra.frames.n;
    if (cli_window_done("report", ra.given, &so.window, so.from, &so.to)) return CLI_USAGE;
    az_scan_t *s;
    char msg[256];
    cli_progress_t pg;
    if (cli_progress_start(&pg, "report", file)) { so.progress = cli_progress; so.progress_ctx = &pg; }
    int scan_rc = az_scan_file(file, &so, &s, msg, sizeof msg);
    cli_progress_done(&pg);
    /* a message may quote the trace (its phase names): text (common/escape.h) */
    char em[sizeof msg * 4];
    if (scan_rc) return cli_file_err("report", file, psc_esc_text(msg, em, sizeof em));
    char wb[256];
    const char *w = az_scan_warning(s, wb, sizeof wb);
    if (w) fprintf(stderr, "poolscope report: %s: warning: %s\n", file, psc_esc_text(w, em, sizeof em));
    /* --phase-frame calls that may have merged (phase_frame.h): said on
     * stderr whatever the format, as a cut trace is */
    for (size_t i = 0; i < so.n_phase_frames; i++) {
        const char *note = az_scan_string(s, AZ_PF_NOTE_BASE + (uint32_t)i);
        if (strcmp(note, "?")) fprintf(stderr, "poolscope report: %s: warning: %s\n", file, psc_esc_text(note, em, sizeof em));
    }
    if (om && az_report_openmetrics(s, &ro, stdout)) { az_scan_free(s); return cli_file_err("report", file, "out of memory"); }
    else if (om) {}
    else if (json) az_report_json(s, &ro, stdout);
    else az_report_text(s, &ro, stdout);
    az_scan_free(s);
    return cli_stdout_done("report", CLI_OK);
}
