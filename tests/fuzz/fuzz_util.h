/* fuzz_util.h — what the libFuzzer harnesses of the analyzer share: the
 * input as a file (for the entry points that take a path: sql, export,
 * html, plot, diff, gate), kept in a memfd so nothing touches the disk,
 * /dev/null for text, and a second document to compare with (diff, gate).
 */
#ifndef POOLSCOPE_FUZZ_UTIL_H
#define POOLSCOPE_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

/* The bytes as a readable path ("/proc/self/fd/N"); -1 on failure. The fd
 * stays open (and is rewritten) from one input to the next. */
static inline int fuzz_input_path(const uint8_t *data, size_t size, char *path, size_t cap)
{
    static int fd = -1;
    if (fd < 0) fd = memfd_create("fuzz-input", 0);
    if (fd < 0) return -1;
    if (ftruncate(fd, 0) || pwrite(fd, data, size, 0) != (ssize_t)size) return -1;
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return 0;
}

static inline FILE *fuzz_null(void)
{
    static FILE *f;
    if (!f) f = fopen("/dev/null", "w");
    return f;
}

/* A report document to compare the input's with: the golden trace's
 * metrics when the harness runs from the top of the tree (tests/fuzz/run.sh
 * does), else a small fixed report. Made once; NULL only out of memory. */
#ifdef FUZZ_WANT_REFDOC
#include "gate.h"
#include "json.h"
static inline const az_jv_t *fuzz_ref_doc(void)
{
    static az_jdoc_t *d;
    if (d) return az_json_root(d);
    int err;
    char msg[256];
    d = az_metrics_doc("tests/golden/small_v1.pstg", &err, msg, sizeof msg);
    if (!d) {
        static const char fixed[] =
            "{\"program\": \"refengine\", \"events\": 10, \"peak_live_bytes\": 4096,"
            " \"total_allocated_bytes\": 8192, \"leaked_bytes\": 0, \"pool\": {\"hit_rate\": 0.5},"
            " \"phases\": {\"decode\": {\"heap_calls\": 3}}, \"kv\": null}";
        d = az_json_parse(fixed, sizeof fixed - 1, &err, msg, sizeof msg);
    }
    return az_json_root(d);
}
#endif

#endif
