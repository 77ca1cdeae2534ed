/* workload.h — synthetic request streams (re_workload_).
 *
 *   fixed:P,G   every request has a P-token prompt and G max tokens;
 *   sharegpt    lengths drawn from log-normal distributions with the means of
 *               the ShareGPT mix in the vLLM paper (prompt ~161, output ~338);
 *   alpaca      the same for the Alpaca mix (prompt ~19, output ~58).
 *
 * Everything is a function of (seed, request index): the same seed gives the
 * same requests. Lengths are clipped to the model's context so that
 * prompt + max_tokens <= seq_len. Prompt token ids are synthetic, drawn from
 * [3, vocab) (ids 0-2 are llama2.c's unk/bos/eos) with a BOS first.
 */
#ifndef RE_WORKLOAD_H
#define RE_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

typedef enum { RE_WL_FIXED = 0, RE_WL_SHAREGPT, RE_WL_ALPACA } re_workload_kind_t;

typedef struct re_workload {
    re_workload_kind_t kind;
    int prompt_len, gen_len;    /* fixed */
} re_workload_t;

/* Parse "fixed:P,G" | "sharegpt" | "alpaca". 0 or PSC_EINVAL with msg. */
int re_workload_parse(const char *spec, re_workload_t *w, char *msg, size_t cap);

/* Lengths of request i. seq_len >= 2. */
void re_workload_lengths(const re_workload_t *w, uint64_t seed, int64_t i, int seq_len,
                         int *prompt_len, int *max_tokens);

/* Fill the prompt of request i (n tokens). */
void re_workload_prompt(uint64_t seed, int64_t i, int vocab_size, int32_t *tokens, int n);

#endif
