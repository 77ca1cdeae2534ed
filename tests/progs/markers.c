/* markers.c — uses the event API (poolscope.h) the way an engine would:
 * a thread name, point markers with a payload, overlapping request scopes,
 * forward/layer scopes and tensor acquire/release.
 *
 *   markers [STEPS]        default 10
 *
 * Prints "api=1" when a tracer table was found (ps_active()), "api=0"
 * otherwise, then the counts it emitted as key=value lines in pstdump's
 * names: mark_point, mark_begin, mark_end, tensor_acquire, tensor_release,
 * thread_name. Built PIE by the Makefile and non-PIE by record_api.sh.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "poolscope/poolscope.h"

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 10;
    unsigned long points = 0, begins = 0, ends = 0, tacq = 0, trel = 0, names = 0;

    ps_thread_name("markers-main");
    names++;
    int64_t req_a[2] = { 17, 64 }, req_b[2] = { 5, 32 };
    ps_begin("request", 1, req_a, 2); begins++;
    ps_begin("request", 2, req_b, 2); begins++;   /* overlaps request 1 */
    uint64_t tensor = 1;
    for (int s = 0; s < steps; s++) {
        int64_t payload[3] = { s, -s, (int64_t)1 << 40 };
        ps_mark("decode", payload, 3); points++;
        ps_begin("forward", (uint64_t)s, NULL, 0); begins++;
        for (int layer = 0; layer < 4; layer++) {
            int64_t lp[1] = { layer };
            ps_begin("layer", (uint64_t)layer, lp, 1); begins++;
            uint64_t a = tensor++, b = tensor++;
            ps_tensor_acquire(a, 0, 0, 4096, 4096 * 4); tacq++;
            ps_tensor_acquire(b, 1, 1, 1000, 2000); tacq++;
            float *buf = malloc(4096 * sizeof(float));
            if (buf) buf[0] = (float)s;
            free(buf);
            ps_tensor_release(a); trel++;
            ps_tensor_release(b); trel++;
            ps_end("layer", (uint64_t)layer); ends++;
        }
        ps_end("forward", (uint64_t)s); ends++;
    }
    ps_end("request", 2); ends++;
    ps_end("request", 1); ends++;
    int64_t big[8] = { 1, 2, 3, 4, 5, 6, 7, INT64_MIN + 1 };
    ps_mark("done", big, 8); points++;

    printf("api=%d\n", ps_active() ? 1 : 0);
    printf("mark_begin=%lu\nmark_end=%lu\nmark_point=%lu\ntensor_acquire=%lu\n"
           "tensor_release=%lu\nthread_name=%lu\n", begins, ends, points, tacq, trel, names);
    return 0;
}
