/* fuzz_html.c — libFuzzer harness for `poolscope html`: any bytes (as a
 * memfd path) become the self-contained page through az_html (scan, sites,
 * flame graphs, timeline lanes, the page's data) written to a file in
 * /dev/shm, which is then removed. The last byte picks wrapper skipping,
 * the stack depth and a --phase-frame. Built and run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "fuzz_util.h"
#include "html.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char in[64], out[64], msg[512];
    uint8_t k = size ? data[size - 1] : 0;
    if (fuzz_input_path(data, size, in, sizeof in)) return 0;
    snprintf(out, sizeof out, "/dev/shm/poolscope-fuzz-html.%d.html", (int)getpid());
    static const char *const frames[] = { "forward=decode" };
    az_html_opts_t o = { .trace = in, .out = out };
    o.sites.no_skip = (k & 1) != 0;
    o.sites.depth = (k >> 2) & 7;
    if (k & 2) { o.phase_frames = frames; o.n_phase_frames = 1; }
    az_html_out_t ho;
    (void)az_html(&o, &ho, msg, sizeof msg);
    unlink(out);
    return 0;
}
