/* fuzz_replay.c — libFuzzer harness for `poolscope replay`, one policy per
 * binary: FUZZ_POLICY names it ("arena", "pool", "ideal", "kv-contiguous",
 * "kv-reserve", "kv-step", "kv-paged"; the malloc policy runs its calls in
 * a helper process and is not fuzzed here). Any bytes go through
 * rp_run_mem (pre-scan, request stream, the policy) and both outputs. The
 * last byte varies the options: the stream (auto/heap), --with-kv, a small
 * batch, a block size and context for the KV policies.
 * Built and run by tests/fuzz/run.sh.
 */
#include <stddef.h>
#include <stdint.h>

#include "fuzz_util.h"
#include "replay.h"

#ifndef FUZZ_POLICY
#define FUZZ_POLICY "arena"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t k = size ? data[size - 1] : 0;
    rp_config_t cfg = rp_config_default();
    char msg[256];
    if (rp_policy_parse(FUZZ_POLICY, &cfg.policies, msg, sizeof msg)) __builtin_trap();
    cfg.stream = k & 1 ? RP_STREAM_HEAP : RP_STREAM_AUTO;
    cfg.with_kv = (k & 2) != 0;
    cfg.batch = k & 4 ? 3 : 0;
    cfg.block_size = k & 8 ? 1u + (k >> 4) : 0;
    cfg.kv_context = k & 16 ? 1u + (k >> 5) * 7u : 0;
    cfg.window_ns = k & 32 ? 1000 : 0;
    if (k & 64) { cfg.pool_cap = (uint64_t)k << 10; cfg.pool_cap_set = 1; }
    rp_report_t *rep = NULL;
    if (rp_run_mem(data, size, &cfg, &rep, msg, sizeof msg) == 0) {
        rp_report_table(rep, fuzz_null());
        rp_report_json(rep, fuzz_null());
    }
    rp_report_free(rep);
    return 0;
}
