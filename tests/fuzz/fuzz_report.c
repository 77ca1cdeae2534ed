/* fuzz_report.c — libFuzzer harness for `poolscope report`: any bytes go
 * through az_scan_mem (the scan driver, every accumulator) and then both
 * the text and the JSON report. The last byte picks the options, so the
 * --phase and --from/--to paths are fuzzed too: bit 0 a phase ("decode",
 * or "forward" with bit 1), bit 2 a window. Symbols stay off (the
 * symbolizer would open whatever module paths the input names).
 * Built and run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_util.h"
#include "report.h"
#include "scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t k = size ? data[size - 1] : 0;
    az_scan_opts_t so = { .timeline_buckets = 16, .keep_markers = 64 };
    if (k & 1) so.phase = k & 2 ? "forward" : "decode";
    if (k & 4) { so.window = 1; so.from = (uint64_t)(k >> 3) * 1000; so.to = so.from + 100000; }
    az_scan_t *s = NULL;
    char msg[256];
    if (az_scan_mem(data, size, "fuzz", &so, &s, msg, sizeof msg)) return 0;
    char wb[256];
    (void)az_scan_warning(s, wb, sizeof wb);
    az_report_opts_t ro = { .top = 5, .no_symbols = 1 };
    az_report_text(s, &ro, fuzz_null());
    az_report_json(s, &ro, fuzz_null());
    az_scan_free(s);
    return 0;
}
