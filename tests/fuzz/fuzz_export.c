/* fuzz_export.c — libFuzzer harness for `poolscope export`, one format per
 * binary: FUZZ_FORMAT names it ("chrome", "folded", "pprof"; tests/fuzz/
 * run.sh builds export-chrome, export-folded and export-pprof), so each
 * writer gets its own coverage and its own ten minutes instead of a third of
 * one run. Any bytes (as a memfd path) are exported to a file in /dev/shm,
 * which is then removed. The last byte picks the weight, the line option,
 * --allocations and a --phase / --from-to selection.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "export.h"
#include "fuzz_util.h"

#ifndef FUZZ_FORMAT
#define FUZZ_FORMAT "chrome"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[64], out[64], msg[256];
    uint8_t k = size ? data[size - 1] : 0;
    if (fuzz_input_path(data, size, in, sizeof in)) return 0;
    snprintf(out, sizeof out, "/dev/shm/poolscope-fuzz-export.%d.out", (int)getpid());
    az_export_opts_t eo = { .lines = (k & 4) != 0, .allocations = (k & 8) != 0 };
    if (k & 16) eo.phase = k & 32 ? "forward" : "decode";
    if (k & 64) { eo.window = 1; eo.from = (uint64_t)(k >> 5) * 1000; eo.to = eo.from + 100000; }
    int fmt = !strcmp(FUZZ_FORMAT, "pprof") ? AZ_EXPORT_PPROF
            : !strcmp(FUZZ_FORMAT, "folded") ? AZ_EXPORT_FOLDED : AZ_EXPORT_CHROME;
    int warn = 0;
    (void)az_export_ex(in, fmt, k & 2 ? AZ_WEIGHT_CALLS : AZ_WEIGHT_BYTES, &eo, out, &warn, msg, sizeof msg);
    unlink(out);
    return 0;
}
