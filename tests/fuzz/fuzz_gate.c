/* fuzz_gate.c — libFuzzer harness for `poolscope gate`: any bytes (as a
 * memfd path; a trace or a `report --json` document, told apart by the
 * first byte as the CLI does) become a metrics document through
 * az_metrics_doc_opts, which is then gated in both roles against a
 * reference report (fuzz_util.h): as the current run with the default
 * tolerances and as the baseline, with --max/--min rules from the last
 * byte. The incomplete and other-program checks run as the CLI runs them.
 * Built and run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FUZZ_WANT_REFDOC
#include "fuzz_util.h"
#include "gate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[64], msg[512], why[200];
    uint8_t k = size ? data[size - 1] : 0;
    const az_jv_t *ref = fuzz_ref_doc();
    if (!ref || fuzz_input_path(data, size, in, sizeof in)) return 0;
    int err = 0;
    az_jdoc_t *d = az_metrics_doc(in, &err, msg, sizeof msg);
    if (!d) return 0;
    const az_jv_t *doc = az_json_root(d);
    (void)az_doc_incomplete(doc, why, sizeof why);
    (void)az_doc_other_program(doc, ref, msg, sizeof msg);
    static const char *const rules[] = { "peak_live_bytes=64MiB", "pool.hit_rate=0.5", "leaked_bytes=0",
                                         "phases.decode.heap_calls=10", "kv.kv_utilization=0.9", "events=1" };
    az_gate_rule_t r[3];
    size_t n = 0;
    if (k & 1 && !az_gate_rule_parse(AZ_RULE_MAX, rules[(k >> 1) % 6], &r[n], msg, sizeof msg)) n++;
    if (k & 16 && !az_gate_rule_parse(AZ_RULE_MIN, rules[(k >> 5) % 6], &r[n], msg, sizeof msg)) n++;
    if (k & 128 && !az_gate_rule_parse(AZ_RULE_TOL, "peak_live_bytes=5%", &r[n], msg, sizeof msg)) n++;
    double tol = (double)(k & 7);
    (void)az_gate_check_named(doc, ref, "ref.json", r, n, tol, fuzz_null(), msg, sizeof msg);
    (void)az_gate_check_named(ref, doc, "fuzz.json", r, n, tol, fuzz_null(), msg, sizeof msg);
    (void)az_gate_check_named(doc, NULL, NULL, r, n, tol, fuzz_null(), msg, sizeof msg);
    az_json_free(d);
    return 0;
}
