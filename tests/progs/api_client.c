/* api_client.c — a small program written the way a user of the installed
 * package would write it: it includes the installed headers and links with
 * `pkg-config --cflags --libs poolscope` (tests/integration/install.sh), and
 * it is also built by the Makefile with the project's flags (both put the
 * header directory on the include path, hence the quotes).
 *
 *   api_client [STEPS]           annotate and allocate, default 8 steps
 *   api_client --read FILE       read a trace with the installed reader
 *
 * Annotating: one "request" scope around STEPS "step" scopes; each step
 * acquires and releases two tensors (ps_tensor_acquire/release) and
 * mallocs/frees their buffers. Prints the same lines traced or not: the
 * counts it emitted in pstdump's names (mark.request, mark.step,
 * tensor_acquire, tensor_release) and a checksum of what it computed.
 *
 * Reading: prints "events=N end_seen=0|1 truncated=0|1 corrupt=0|1" for
 * FILE (exit 2 if it cannot be opened), so the installed reader and library
 * are exercised too.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/poolscope.h"
#include "poolscope/reader.h"

static int read_trace(const char *path)
{
    int err = 0;
    pst_reader_t *r = pst_open(path, &err);
    if (!r) {
        fprintf(stderr, "api_client: %s: cannot open (error %d)\n", path, err);
        return 2;
    }
    pst_event_t ev;
    int rc;
    while ((rc = pst_next(r, &ev)) > 0) {}
    const pst_status_t *st = pst_status(r);
    printf("events=%llu end_seen=%d truncated=%d corrupt=%d\n", (unsigned long long)st->events,
           st->end_seen, st->truncated, st->corrupt);
    pst_close(r);
    return rc < 0 ? 2 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && !strcmp(argv[1], "--read")) return read_trace(argv[2]);
    int steps = argc > 1 ? atoi(argv[1]) : 8;
    if (steps < 1 || steps > 100000) {
        fprintf(stderr, "usage: api_client [STEPS] | --read FILE\n");
        return 2;
    }
    unsigned long begins = 0, acquires = 0, releases = 0;
    uint64_t sum = 0;

    int64_t payload[2] = { 16, steps };
    ps_begin("request", 1, payload, 2);
    for (int s = 0; s < steps; s++) {
        ps_begin("step", (uint64_t)s, NULL, 0);
        begins++;
        size_t n = 256 + (size_t)s * 32;
        uint64_t a = 2 * (uint64_t)s + 1, b = a + 1;
        ps_tensor_acquire(a, 0, 0, n, n * sizeof(float));
        float *x = malloc(n * sizeof(float));
        ps_tensor_acquire(b, 0, 0, n, n * sizeof(float));
        float *y = malloc(n * sizeof(float));
        acquires += 2;
        if (!x || !y) { fprintf(stderr, "api_client: out of memory\n"); return 1; }
        for (size_t i = 0; i < n; i++) x[i] = (float)(i % 7);
        for (size_t i = 0; i < n; i++) y[i] = x[i] * 2.0f + (float)s;
        for (size_t i = 0; i < n; i++) sum = sum * 31 + (uint64_t)y[i];
        free(x);
        ps_tensor_release(a);
        free(y);
        ps_tensor_release(b);
        releases += 2;
        ps_end("step", (uint64_t)s);
    }
    ps_end("request", 1);

    printf("mark.request=1\nmark.step=%lu\ntensor_acquire=%lu\ntensor_release=%lu\n", begins,
           acquires, releases);
    printf("checksum=%016llx\n", (unsigned long long)sum);
    return 0;
}
