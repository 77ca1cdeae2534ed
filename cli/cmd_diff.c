/* cmd_diff.c — `poolscope diff A B [--json]`: metric-by-metric deltas of
 * two traces (or report --json files) and the allocation sites that changed
 * most. Exit 0 when nothing differs, 1 when something does, 2 bad input.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "escape.h"
#include "gate.h"
#include "scan.h"

void cmd_diff_help(FILE *out)
{
    fputs("usage: poolscope diff A B [--json] [--timing] [--allow-incomplete]\n\n"
          "Compare two traces (or two `report --json` files): every metric that\n"
          "differs, A -> B with the change in percent and whether it got better or\n"
          "worse (bytes and counts lower-is-better; hit_rate, same_address_reuse,\n"
          "kv_utilization higher-is-better), then the allocation sites whose bytes\n"
          "changed most (matched by symbolized name). Timing figures (times,\n"
          "time-weighted means, timer-driven samples such as RSS and event counts)\n"
          "differ between identical runs: they are shown as \"timing\" and do not\n"
          "count as differences unless --timing is given.\n\n"
          "  --json     the differences as JSON: {\"metrics\": [...], \"sites\": [...]}\n"
          "  --timing   timing differences count too (exit 1)\n"
          "  --allow-incomplete  compare traces that are cut short, have no END record\n"
          "             or a corrupt chunk, have no events, or whose process was killed\n", out);
    fputs(cli_frames_help, out);
    fputs(cli_symbols_help, out);
    fputs(cli_suppress_help, out);
    fputs("\nExit: 0 no differences, 1 differences, 2 bad usage or input.\n", out);
}

static int take(void *ctx, const char *opt, const char *v)
{
    (void)opt;
    return cli_frames_take(ctx, "diff", v);
}

int cmd_diff(int argc, char **argv)
{
    cli_frames_t frames = { { 0 }, 0 };
    const char *f[2] = { NULL, NULL };
    int json = 0, timing = 0, allow_incomplete = 0;
    const cli_opt_t opts[] = {
        { "--json", &json, NULL, NULL }, { "--timing", &timing, NULL, NULL },
        { "--allow-incomplete", &allow_incomplete, NULL, NULL }, { "--phase-frame", NULL, NULL, take },
        { NULL, NULL, NULL, NULL },
    };
    cli_args_t args = { "diff", cmd_diff_help, opts, &frames, f, 2, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (args.n_files != 2) { cli_cmd_err("diff", "usage: poolscope diff A B [--json]"); return CLI_USAGE; }
    az_jdoc_t *d[2] = { NULL, NULL };
    char msg[512], em[sizeof msg * 4];   /* em: msg as text, it may quote a trace (common/escape.h) */
    int err;
    for (int k = 0; k < 2; k++) {
        az_scan_opts_t so = { .phase_frames = frames.specs, .n_phase_frames = frames.n };
        cli_progress_t pg;
        if (cli_progress_start(&pg, "diff", f[k])) { so.progress = cli_progress; so.progress_ctx = &pg; }
        d[k] = az_metrics_doc_opts(f[k], &so, &err, msg, sizeof msg);
        cli_progress_done(&pg);
        if (!d[k]) {
            az_json_free(d[0]);
            return cli_file_err("diff", f[k], psc_esc_text(msg, em, sizeof em));
        }
        char why[200];
        if (!allow_incomplete && az_doc_incomplete(az_json_root(d[k]), why, sizeof why)) {
            snprintf(msg, sizeof msg, "%s; not comparing it (--allow-incomplete to compare anyway)", why);
            az_json_free(d[0]);
            if (k) az_json_free(d[1]);
            return cli_file_err("diff", f[k], psc_esc_text(msg, em, sizeof em));
        }
    }
    if (!json) printf("diff %s -> %s\n", f[0], f[1]);
    size_t n = az_diff_docs(az_json_root(d[0]), az_json_root(d[1]),
                            (json ? AZ_DIFF_JSON : 0) | (timing ? AZ_DIFF_TIMING : 0), stdout);
    if (!json && n == 0) printf("  no differences%s\n", timing ? "" : " (timing aside)");
    az_json_free(d[0]);
    az_json_free(d[1]);
    return cli_stdout_done("diff", n ? CLI_REGRESSION : CLI_OK);
}
