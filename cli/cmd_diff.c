/* cmd_diff.c — `poolscope diff A B [--json]`: metric-by-metric deltas of
 * two traces (or report --json files) and the allocation sites that changed
 * most. Exit 0 when nothing differs, 1 when something does, 2 bad input.
 */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "gate.h"

void cmd_diff_help(FILE *out)
{
    fputs("usage: poolscope diff A B [--json]\n\n"
          "Compare two traces (or two `report --json` files): every metric that\n"
          "differs, A -> B with the change in percent and whether it got better or\n"
          "worse (bytes and counts lower-is-better; hit_rate, same_address_reuse,\n"
          "kv_utilization higher-is-better), then the allocation sites whose bytes\n"
          "changed most (matched by symbolized name).\n\n"
          "  --json   the differences as JSON: {\"metrics\": [...], \"sites\": [...]}\n\n"
          "Exit: 0 no differences, 1 differences, 2 bad usage or input.\n", out);
}

int cmd_diff(int argc, char **argv)
{
    const char *f[2] = { NULL, NULL };
    int json = 0;
    const cli_opt_t opts[] = { { "--json", &json, NULL, NULL }, { NULL, NULL, NULL, NULL } };
    cli_args_t args = { "diff", cmd_diff_help, opts, NULL, f, 2, 0 };
    int rc = cli_parse_args(&args, argc, argv);
    if (rc != CLI_CONTINUE) return rc;
    if (args.n_files != 2) { cli_cmd_err("diff", "usage: poolscope diff A B [--json]"); return CLI_USAGE; }
    az_jdoc_t *d[2] = { NULL, NULL };
    char msg[512];
    int err;
    for (int k = 0; k < 2; k++) {
        d[k] = az_metrics_doc(f[k], &err, msg, sizeof msg);
        if (!d[k]) {
            az_json_free(d[0]);
            return cli_file_err("diff", f[k], msg);
        }
    }
    if (!json) printf("diff %s -> %s\n", f[0], f[1]);
    size_t n = az_diff_docs(az_json_root(d[0]), az_json_root(d[1]), json, stdout);
    if (!json && n == 0) printf("  no differences\n");
    az_json_free(d[0]);
    az_json_free(d[1]);
    return n ? CLI_REGRESSION : CLI_OK;
}
