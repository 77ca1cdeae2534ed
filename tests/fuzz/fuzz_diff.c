/* fuzz_diff.c — libFuzzer harness for `poolscope diff`: any bytes (as a
 * memfd path; a trace or a `report --json` document) become a metrics
 * document through az_metrics_doc_opts (with a --phase-frame from the last
 * byte), which is diffed against a reference report (fuzz_util.h) both
 * ways, text and JSON, with and without timing, and against itself.
 * Built and run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FUZZ_WANT_REFDOC
#include "fuzz_util.h"
#include "gate.h"
#include "scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[64], msg[512], why[200];
    uint8_t k = size ? data[size - 1] : 0;
    const az_jv_t *ref = fuzz_ref_doc();
    if (!ref || fuzz_input_path(data, size, in, sizeof in)) return 0;
    static const char *const frames[] = { "main", "forward=decode" };
    az_scan_opts_t so = { .phase_frames = frames, .n_phase_frames = k & 1 ? (k & 2 ? 2 : 1) : 0 };
    int err = 0;
    az_jdoc_t *d = az_metrics_doc_opts(in, &so, &err, msg, sizeof msg);
    if (!d) return 0;
    const az_jv_t *doc = az_json_root(d);
    (void)az_doc_incomplete(doc, why, sizeof why);
    int flags = (k & 4 ? AZ_DIFF_JSON : 0) | (k & 8 ? AZ_DIFF_TIMING : 0);
    (void)az_diff_docs(ref, doc, flags, fuzz_null());
    (void)az_diff_docs(doc, ref, flags, fuzz_null());
    (void)az_diff_docs(doc, doc, flags ^ AZ_DIFF_JSON, fuzz_null());
    az_json_free(d);
    return 0;
}
