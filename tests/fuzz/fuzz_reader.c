/* fuzz_reader.c — libFuzzer harness for the .pst reader: any bytes go
 * through pst_open_mem and a full iteration with every accessor touched.
 * Build and run with scripts/fuzz.sh (clang -fsanitize=fuzzer,address,undefined).
 * The seed corpus is tests/golden/.
 */
#include <stddef.h>
#include <stdint.h>

#include "poolscope/reader.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int err = 0;
    pst_reader_t *r = pst_open_mem(data, size, &err);
    if (!r) return 0;
    /* a small window exercises the merge's early hand-out as well */
    pst_reader_set_window(r, size & 1 ? 1000 : PST_DEFAULT_WINDOW_NS);
    const pst_header_t *h = pst_header(r);
    volatile size_t sink = h->argc;
    for (uint32_t i = 0; i < h->argc; i++) sink += h->argv[i][0];
    pst_event_t ev;
    uint64_t n = 0;
    while (pst_next(r, &ev) > 0) {
        sink += ev.type + ev.n_ids + ev.n_payload;
        for (uint32_t i = 0; i < ev.n_ids; i++) sink += ev.ids[i];
        if (ev.str) sink += (size_t)ev.str[0];
        uint32_t depth = 0;
        const uint64_t *f = pst_stack(r, ev.stack, &depth);
        for (uint32_t i = 0; f && i < depth; i++) sink += f[i];
        if (++n > 10000000) break;
    }
    size_t nm = 0;
    const pst_module_t *m = pst_modules(r, &nm);
    for (size_t i = 0; i < nm; i++) sink += m[i].path[0] + m[i].build_id_len;
    const pst_status_t *st = pst_status(r);
    sink += st->events + (st->corrupt_reason ? 1 : 0);
    (void)sink;
    pst_close(r);
    return 0;
}
