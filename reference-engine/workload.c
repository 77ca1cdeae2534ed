/* workload.c — deterministic request lengths and prompts.
 *
 * The log-normal parameters: sigma chosen for a long tail like the mixes'
 * histograms, mu = ln(mean) - sigma^2 / 2 so the (unclipped) mean is the
 * paper's. Normal variates come from Box-Muller over counter-based uniforms.
 */
#include "workload.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "poolscope/error.h"

int re_workload_parse(const char *spec, re_workload_t *w, char *msg, size_t cap)
{
    memset(w, 0, sizeof *w);
    if (!strcmp(spec, "sharegpt")) { w->kind = RE_WL_SHAREGPT; return 0; }
    if (!strcmp(spec, "alpaca")) { w->kind = RE_WL_ALPACA; return 0; }
    if (!strncmp(spec, "fixed:", 6)) {
        char *end;
        errno = 0;
        long p = strtol(spec + 6, &end, 10);
        if (!errno && *end == ',' && end != spec + 6) {
            char *end2;
            long g = strtol(end + 1, &end2, 10);
            if (!errno && !*end2 && end2 != end + 1 && p >= 1 && g >= 1 && p <= (1 << 20) &&
                g <= (1 << 20)) {
                w->kind = RE_WL_FIXED;
                w->prompt_len = (int)p;
                w->gen_len = (int)g;
                return 0;
            }
        }
    }
    snprintf(msg, cap, "bad --workload '%s' (want fixed:P,G with P,G >= 1, sharegpt or alpaca)", spec);
    return PSC_EINVAL;
}

static double re_normal(uint64_t seed, int64_t i, uint64_t which)
{
    double u1 = ((double)(re_hash64(seed, (uint64_t)i, which * 2) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(re_hash64(seed, (uint64_t)i, which * 2 + 1) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

static int re_lognormal(double mean, double sigma, double z)
{
    double mu = log(mean) - sigma * sigma / 2.0;
    double v = exp(mu + sigma * z);
    if (v < 1.0) v = 1.0;
    if (v > 1e6) v = 1e6;
    return (int)lround(v);
}

void re_workload_lengths(const re_workload_t *w, uint64_t seed, int64_t i, int seq_len,
                         int *prompt_len, int *max_tokens)
{
    int p, g;
    switch (w->kind) {
    case RE_WL_SHAREGPT:
        p = re_lognormal(161.0, 1.0, re_normal(seed, i, 101));
        g = re_lognormal(338.0, 0.9, re_normal(seed, i, 102));
        break;
    case RE_WL_ALPACA:
        p = re_lognormal(19.0, 0.6, re_normal(seed, i, 201));
        g = re_lognormal(58.0, 0.8, re_normal(seed, i, 202));
        break;
    default:
        p = w->prompt_len;
        g = w->gen_len;
        break;
    }
    /* clip to the context: prompt first keeps at least one generated token */
    if (p > seq_len - 1) p = seq_len - 1;
    if (g > seq_len - p) g = seq_len - p;
    if (p < 1) p = 1;
    if (g < 1) g = 1;
    *prompt_len = p;
    *max_tokens = g;
}

void re_workload_prompt(uint64_t seed, int64_t i, int vocab_size, int32_t *tokens, int n)
{
    for (int k = 0; k < n; k++) {
        if (k == 0 && vocab_size > 1) { tokens[k] = 1; continue; }   /* BOS */
        if (vocab_size <= 3) { tokens[k] = (int32_t)(re_hash64(seed, (uint64_t)i, 7000 + (uint64_t)k) % (uint64_t)vocab_size); continue; }
        tokens[k] = 3 + (int32_t)(re_hash64(seed ^ 0xABCDEFull, (uint64_t)i, (uint64_t)k) %
                                  (uint64_t)(vocab_size - 3));
    }
}
