/* cmd_gate.c — `poolscope gate FILE --baseline BASE.json [--tol M=PCT]...
 * [--max M=VALUE]... [--min M=VALUE]...`: argument parsing; the work is
 * analyzer/gate.c. Exit 0 all hold, 1 a regression, 2 bad input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "gate.h"
#include "units.h"

int  cmd_gate(int argc, char **argv);
void cmd_gate_help(FILE *out);

void cmd_gate_help(FILE *out)
{
    fputs("usage: poolscope gate FILE --baseline BASE.json [--tol METRIC=PCT]...\n"
          "                      [--max METRIC=VALUE]... [--min METRIC=VALUE]...\n\n"
          "Compare a trace's metrics (FILE: a .pst trace or a `report --json` file)\n"
          "with a baseline written by `poolscope report --json`. Metrics are named by\n"
          "their dotted path in that JSON: peak_live_bytes, pool.hit_rate,\n"
          "phases.decode.heap_calls, ...\n\n"
          "  --tol M=PCT    M may get worse than the baseline by PCT percent (exactly\n"
          "                 PCT passes). Bytes and counts are lower-is-better; hit_rate,\n"
          "                 same_address_reuse and kv_utilization higher-is-better.\n"
          "                 Against a baseline of 0 the tolerance is absolute, in M's\n"
          "                 unit (--tol leaked_bytes=4KiB).\n"
          "  --max M=VALUE  fail when M > VALUE (units: KiB MiB GiB; e.g. 64MiB, 0)\n"
          "  --min M=VALUE  fail when M < VALUE\n"
          "  --default-tol PCT  with no --tol/--max/--min, the headline metrics\n"
          "                 (peak_live_bytes, total_allocated_bytes, leaked_bytes,\n"
          "                 pool.hit_rate, ... allocs_per_decode_step) are checked with\n"
          "                 this tolerance (default 0)\n\n"
          "Exit: 0 every check holds, 1 a regression (listed as REGRESSED lines),\n"
          "2 bad usage or input. --baseline is optional when only --max/--min are given.\n", out);
}

int cmd_gate(int argc, char **argv)
{
    const char *file = NULL, *base = NULL;
    az_gate_rule_t *rules = calloc((size_t)argc, sizeof *rules);
    size_t n = 0;
    double dtol = 0;
    int rc = CLI_USAGE;
    char msg[512];
    az_jdoc_t *dc = NULL, *db = NULL;
    if (!rules) { cli_err("gate: out of memory"); return CLI_USAGE; }
    int need_base = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cmd_gate_help(stdout); rc = CLI_OK; goto out; }
        if (!strcmp(a, "--baseline") || !strcmp(a, "--tol") || !strcmp(a, "--max") ||
            !strcmp(a, "--min") || !strcmp(a, "--default-tol")) {
            if (i + 1 >= argc) { cli_err("gate: %s needs a value", a); goto out; }
            const char *v = argv[++i];
            if (!strcmp(a, "--baseline")) { base = v; continue; }
            if (!strcmp(a, "--default-tol")) {
                if (az_parse_bytes(v, &dtol) || dtol < 0) { cli_err("gate: --default-tol: '%s' is not a percentage", v); goto out; }
                continue;
            }
            int kind = !strcmp(a, "--tol") ? AZ_RULE_TOL : !strcmp(a, "--max") ? AZ_RULE_MAX : AZ_RULE_MIN;
            if (kind == AZ_RULE_TOL) need_base = 1;
            if (az_gate_rule_parse(kind, v, &rules[n], msg, sizeof msg)) { cli_err("gate: %s", msg); goto out; }
            n++;
        } else if (a[0] == '-' && a[1]) {
            cli_err("gate: unknown option '%s' (see poolscope help gate)", a); goto out;
        } else if (!file) {
            file = a;
        } else {
            cli_err("gate: one trace file only ('%s' is extra)", a); goto out;
        }
    }
    if (!file) { cli_err("gate: no trace file (usage: poolscope gate FILE --baseline BASE.json)"); goto out; }
    if (!base && (need_base || n == 0)) { cli_err("gate: --baseline BASE.json is required for tolerances"); goto out; }
    int err;
    if (base) {
        char eb[200];
        db = az_json_parse_file(base, &err, eb, sizeof eb);
        if (!db) { fprintf(stderr, "poolscope gate: %s: %s\n", base, eb); goto out; }
        if (az_json_root(db)->type != AZ_JV_OBJ) { fprintf(stderr, "poolscope gate: %s: not a report --json object\n", base); goto out; }
    }
    dc = az_metrics_doc(file, &err, msg, sizeof msg);
    if (!dc) { fprintf(stderr, "poolscope gate: %s: %s\n", file, msg); goto out; }
    rc = az_gate_check(az_json_root(dc), db ? az_json_root(db) : NULL, rules, n, dtol, stdout, msg, sizeof msg);
    if (rc == 2) fprintf(stderr, "poolscope gate: %s: %s\n", file, msg);
    else if (rc == 1) printf("gate: FAILED — the metrics marked REGRESSED got worse than allowed\n");
    else printf("gate: passed\n");
out:
    az_json_free(dc);
    az_json_free(db);
    free(rules);
    return rc;
}
