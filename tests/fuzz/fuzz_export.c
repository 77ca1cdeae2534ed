/* fuzz_export.c — libFuzzer harness for `poolscope export`: any bytes (as
 * a memfd path) exported as chrome JSON, folded stacks or pprof (the last
 * byte picks the format, the weight, the line option and --allocations) to a file in /dev/shm,
 * which is then removed. Built and run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "export.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[64], out[64], msg[256];
    uint8_t k = size ? data[size - 1] : 0;
    if (fuzz_input_path(data, size, in, sizeof in)) return 0;
    snprintf(out, sizeof out, "/dev/shm/poolscope-fuzz-export.%d.out", (int)getpid());
    az_export_opts_t eo = { .lines = (k & 4) != 0, .allocations = (k & 8) != 0 };
    int warn = 0;
    int fmt = (k >> 4) % 3 == 2 ? AZ_EXPORT_PPROF : k & 1 ? AZ_EXPORT_FOLDED : AZ_EXPORT_CHROME;
    (void)az_export_ex(in, fmt, k & 2 ? AZ_WEIGHT_CALLS : AZ_WEIGHT_BYTES,
                       &eo, out, &warn, msg, sizeof msg);
    unlink(out);
    return 0;
}
