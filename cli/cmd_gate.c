/* cmd_gate.c — `poolscope gate FILE --baseline BASE.json [--tol M=PCT]...
 * [--max M=VALUE]... [--min M=VALUE]...`: argument parsing; the work is
 * analyzer/gate.c. Exit 0 all hold, 1 a regression, 2 bad input.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "gate.h"
#include "input.h"
#include "json.h"
#include "poolscope/error.h"
#include "scan.h"
#include "units.h"

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
          "                 pool.hit_rate, ..., kv.kv_utilization_per_step,\n"
          "                 allocs_per_decode_step, heap_calls_per_decode_step) are\n"
          "                 checked with this tolerance (default 0). Time-weighted\n"
          "                 figures (kv.kv_utilization) are not defaults: they vary\n"
          "                 between identical runs.\n"
          "  --allow-incomplete  compare a trace (or baseline) that is cut short, has no\n"
          "                 END record or a corrupt chunk, has no events, or whose\n"
          "                 process was killed (refused by default)\n"
          "  --accept-program  compare with a baseline recorded from another program\n"
          "                 (refused by default; report --json has \"program\", \"argv\")\n", out);
    fputs(cli_frames_help, out);
    fputs(cli_symbols_help, out);
    fputs(cli_suppress_help, out);
    fputs("\nA metric that does not apply is null in the report (no KV cache, no decode\n"
          "step): null on both sides passes a --tol as n/a; null on one side, under\n"
          "--max/--min, missing, not a number or not finite is exit 2 naming it.\n\n"
          "Exit: 0 every check holds, 1 a regression (listed as REGRESSED lines, then\n"
          "the allocation sites whose bytes changed most from the baseline, or those\n"
          "holding most at the heap peak; a Python program's as Python lines),\n"
          "2 bad usage or input. --baseline is optional when only --max/--min are given.\n", out);
}

/* The baseline document. A regular file was checked for size before
 * (cli_parse_args); a pipe (--baseline /dev/stdin) is read here within the
 * same bound, so a stream of bytes without end cannot fill the memory. */
static az_jdoc_t *read_baseline(const char *base, char *eb, size_t eblen)
{
    int err;
    int fd = open(base, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || S_ISREG(st.st_mode)) {
        if (fd >= 0) close(fd);
        return az_json_parse_file(base, &err, eb, eblen);
    }
    size_t len = 0;
    char *b = psc_read_capped(fd, PSC_JSON_MAX, &len, &err, NULL, 0, NULL);
    int e = errno;
    close(fd);
    if (!b) {
        if (err == PSC_EINVAL)
            snprintf(eb, eblen, "more than %llu MiB: not a report --json document", (unsigned long long)(PSC_JSON_MAX >> 20));
        else snprintf(eb, eblen, "%s", err == PSC_EIO ? strerror(e) : "out of memory");
        return NULL;
    }
    az_jdoc_t *d = az_json_parse(b, len, &err, eb, eblen);
    free(b);
    return d;
}

/* The rules as the options give them (at most one per argument). */
typedef struct gate_args {
    az_gate_rule_t *rules;
    size_t n;
    double dtol;
    int need_base;               /* a --tol was given */
    cli_frames_t frames;
} gate_args_t;

/* --tol, --max, --min (repeatable) and --default-tol */
static int take(void *ctx, const char *opt, const char *v)
{
    gate_args_t *ga = ctx;
    char msg[512];
    if (!strcmp(opt, "--phase-frame")) return cli_frames_take(&ga->frames, "gate", v);
    if (!strcmp(opt, "--default-tol")) {
        if (az_parse_bytes(v, &ga->dtol) || ga->dtol < 0) {
            cli_cmd_err("gate", "--default-tol: '%s' is not a percentage", v);
            return CLI_USAGE;
        }
        return 0;
    }
    int kind = !strcmp(opt, "--tol") ? AZ_RULE_TOL : !strcmp(opt, "--max") ? AZ_RULE_MAX : AZ_RULE_MIN;
    if (kind == AZ_RULE_TOL) ga->need_base = 1;
    if (az_gate_rule_parse(kind, v, &ga->rules[ga->n], msg, sizeof msg)) { cli_cmd_err("gate", "%s", msg); return CLI_USAGE; }
    ga->n++;
    return 0;
}

int cmd_gate(int argc, char **argv)
{
    const char *file = NULL, *base = NULL;
    int allow_incomplete = 0, accept_program = 0;
    gate_args_t ga = { calloc((size_t)argc, sizeof *ga.rules), 0, 0, 0, { { 0 }, 0 } };
    char msg[2048];                         /* a phase-frame note is quoted whole (gate.c) */
    az_jdoc_t *dc = NULL, *db = NULL;
    if (!ga.rules) { cli_cmd_err("gate", "out of memory"); return CLI_USAGE; }
    const cli_opt_t opts[] = {
        { "--baseline", NULL, &base, NULL }, { "--tol --max --min --default-tol --phase-frame", NULL, NULL, take },
        { "--allow-incomplete", &allow_incomplete, NULL, NULL }, { "--accept-program", &accept_program, NULL, NULL },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "gate", cmd_gate_help, opts, &ga, &file, 1, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) goto out;
    rc = CLI_USAGE;
    if (!file) { cli_cmd_err("gate", "no trace file (usage: poolscope gate FILE --baseline BASE.json)"); goto out; }
    if (!base && (ga.need_base || ga.n == 0)) { cli_cmd_err("gate", "--baseline BASE.json is required for tolerances"); goto out; }
    int err;
    if (base) {
        char eb[200];
        db = read_baseline(base, eb, sizeof eb);
        if (!db) { cli_file_err("gate", base, eb); goto out; }
        if (az_json_root(db)->type != AZ_JV_OBJ) { cli_file_err("gate", base, "not a report --json object"); goto out; }
    }
    az_scan_opts_t so = { .phase_frames = ga.frames.specs, .n_phase_frames = ga.frames.n };
    cli_progress_t pg;
    if (cli_progress_start(&pg, "gate", file)) { so.progress = cli_progress; so.progress_ctx = &pg; }
    dc = az_metrics_doc_opts(file, &so, &err, msg, sizeof msg);
    cli_progress_done(&pg);
    if (!dc) { cli_file_err("gate", file, msg); goto out; }
    if (!allow_incomplete) {
        const char *which[2] = { file, base };
        az_jdoc_t *docs[2] = { dc, db };
        for (int k = 0; k < 2; k++) {
            char why[200];
            if (!docs[k] || !az_doc_incomplete(az_json_root(docs[k]), why, sizeof why)) continue;
            snprintf(msg, sizeof msg, "%s%s; not gating on it (--allow-incomplete to gate anyway)",
                     k ? "baseline: " : "", why);
            cli_file_err("gate", which[k], msg);
            goto out;
        }
    }
    if (db && !accept_program && az_doc_other_program(az_json_root(dc), az_json_root(db), msg, sizeof msg)) {
        size_t l = strlen(msg);
        snprintf(msg + l, sizeof msg - l, " (--accept-program to compare anyway)");
        cli_file_err("gate", base, msg);
        goto out;
    }
    if (base) printf("gate: %s against baseline %s\n", file, base);
    rc = az_gate_check_named(az_json_root(dc), db ? az_json_root(db) : NULL, base, ga.rules, ga.n, ga.dtol,
                             stdout, msg, sizeof msg);
    if (rc == 2) cli_file_err("gate", file, msg);
    else if (rc == 1) {
        /* where to look: the sites (Python lines for a Python program) that changed */
        az_gate_sites(az_json_root(dc), db ? az_json_root(db) : NULL, stdout);
        printf("gate: FAILED against %s — the metrics marked REGRESSED got worse than allowed\n",
               base ? base : "the limits");
    }
    else printf("gate: passed%s%s\n", base ? " against " : "", base ? base : "");
out:
    az_json_free(dc);
    az_json_free(db);
    free(ga.rules);
    return cli_stdout_done("gate", rc);
}
