/* sampler.h — choosing the next token from a row of logits (re_sample_).
 *
 * Greedy (temperature 0) by default. With a temperature, and optionally
 * top-p (nucleus) filtering, the one random number a draw needs comes from a
 * counter-based generator keyed by (seed, request id, position): the same
 * request samples the same token at the same position whatever it was
 * batched with, and after a preemption and recompute.
 */
#ifndef RE_SAMPLER_H
#define RE_SAMPLER_H

#include <stdint.h>

typedef struct re_sampler {
    float temperature;   /* 0 = greedy */
    float top_p;         /* in (0, 1); >= 1 or <= 0 = off */
    uint64_t seed;
    int vocab_size;
    float *probs;        /* (vocab_size) scratch */
    int32_t *idx;        /* (vocab_size) scratch */
} re_sampler_t;

/* 0, PSC_EINVAL (bad temperature/top_p/vocab) or PSC_ENOMEM. */
int re_sampler_init(re_sampler_t *s, int vocab_size, float temperature, float top_p, uint64_t seed);
void re_sampler_free(re_sampler_t *s);   /* NULL ok */

/* The token for `logits` (vocab_size) of request `req` at position `pos`
 * (the position whose logits these are). Never allocates. */
int re_sample(re_sampler_t *s, const float *logits, int64_t req, int64_t pos);

/* Index of the largest value (the lowest index among equals). */
int re_argmax(const float *x, int n);

#endif
