/* cmd_report.c — `poolscope report FILE [--json] [--top N] [--phase NAME]
 * [--from T --to T]`: argument parsing; the work is analyzer/scan.c and
 * analyzer/report.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "poolscope/error.h"
#include "report.h"
#include "scan.h"
#include "units.h"

int  cmd_report(int argc, char **argv);
void cmd_report_help(FILE *out);

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
          "  --json          the metrics as JSON (keys in DESIGN.md; what `gate` reads)\n"
          "  --top N         sites per table (default 10)\n"
          "  --phase NAME    count only while a scope of marker NAME is open\n"
          "  --from T --to T count only events in [T, T'] since trace start;\n"
          "                  T like 1.5s, 200ms, 30us, 100ns (plain number: seconds)\n"
          "  --no-symbols    addresses instead of symbol names (faster)\n\n"
          "Exit: 0, or 2 for bad usage or an unreadable trace. A trace cut short is\n"
          "reported up to the damage with a warning on stderr.\n", out);
}

int cmd_report(int argc, char **argv)
{
    const char *file = NULL;
    int json = 0;
    az_report_opts_t ro = { 0 };
    az_scan_opts_t so = { 0 };
    int have_from = 0, have_to = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--no-symbols")) ro.no_symbols = 1;
        else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cmd_report_help(stdout); return CLI_OK; }
        else if (!strcmp(a, "--top") || !strcmp(a, "--phase") || !strcmp(a, "--from") || !strcmp(a, "--to")) {
            if (i + 1 >= argc) { cli_err("report: %s needs a value", a); return CLI_USAGE; }
            const char *v = argv[++i];
            if (!strcmp(a, "--top")) {
                char *end;
                long n = strtol(v, &end, 10);
                if (*end || n < 1 || n > 100000) { cli_err("report: --top: '%s' is not a count", v); return CLI_USAGE; }
                ro.top = (unsigned)n;
            } else if (!strcmp(a, "--phase")) {
                so.phase = v;
            } else {
                uint64_t t;
                if (az_parse_time_ns(v, &t)) { cli_err("report: %s: '%s' is not a time (e.g. 1.5s, 200ms)", a, v); return CLI_USAGE; }
                if (!strcmp(a, "--from")) { so.from = t; have_from = 1; } else { so.to = t; have_to = 1; }
            }
        } else if (a[0] == '-' && a[1]) {
            cli_err("report: unknown option '%s' (see poolscope help report)", a);
            return CLI_USAGE;
        } else if (!file) {
            file = a;
        } else {
            cli_err("report: one trace file only ('%s' is extra)", a);
            return CLI_USAGE;
        }
    }
    if (!file) { cli_err("report: no trace file (usage: poolscope report FILE [--json])"); return CLI_USAGE; }
    if (have_from || have_to) {
        so.window = 1;
        if (!have_to) so.to = UINT64_MAX;
        if (so.from > so.to) { cli_err("report: --from is after --to"); return CLI_USAGE; }
    }
    az_scan_t *s;
    char msg[256];
    cli_progress_t pg = { "report", file, 0 };
    if (cli_progress_wanted()) { so.progress = cli_progress; so.progress_ctx = &pg; }
    int scan_rc = az_scan_file(file, &so, &s, msg, sizeof msg);
    cli_progress_done(&pg);
    if (scan_rc) {
        fprintf(stderr, "poolscope report: %s: %s\n", file, msg);
        return CLI_USAGE;
    }
    char wb[256];
    const char *w = az_scan_warning(s, wb, sizeof wb);
    if (w) fprintf(stderr, "poolscope report: %s: warning: %s\n", file, w);
    if (json) az_report_json(s, &ro, stdout);
    else az_report_text(s, &ro, stdout);
    az_scan_free(s);
    return fflush(stdout) ? CLI_USAGE : CLI_OK;
}
