/* sampler.c — greedy, temperature and top-p sampling without allocation.
 *
 * Top-p keeps the most probable tokens whose cumulative probability first
 * exceeds p. Candidates below (1 - p) / (V - 1) cannot be part of that set
 * (a standard pruning), so only the survivors are sorted, with an in-place
 * heap sort (qsort may call malloc, and must not run in a decode step).
 * Ties are broken by token id, so the order is fully determined.
 */
#include "sampler.h"

#include <math.h>
#include <stdlib.h>

#include "kernels.h"
#include "model.h"
#include "poolscope/error.h"

int re_sampler_init(re_sampler_t *s, int vocab_size, float temperature, float top_p, uint64_t seed)
{
    s->probs = NULL;
    s->idx = NULL;
    if (vocab_size < 1 || !(temperature >= 0.0f) || !isfinite(temperature) || !(top_p >= 0.0f) ||
        !isfinite(top_p))
        return PSC_EINVAL;
    s->temperature = temperature;
    s->top_p = top_p;
    s->seed = seed;
    s->vocab_size = vocab_size;
    s->probs = malloc((size_t)vocab_size * sizeof *s->probs);
    s->idx = malloc((size_t)vocab_size * sizeof *s->idx);
    if (!s->probs || !s->idx) {
        re_sampler_free(s);
        return PSC_ENOMEM;
    }
    return 0;
}

void re_sampler_free(re_sampler_t *s)
{
    if (!s) return;
    free(s->probs);
    free(s->idx);
    s->probs = NULL;
    s->idx = NULL;
}

int re_argmax(const float *x, int n) { return re_k_argmax(x, n); }

/* "a comes before b": higher probability first, then lower id. */
static int re_before(const float *p, int32_t a, int32_t b)
{
    return p[a] > p[b] || (p[a] == p[b] && a < b);
}

/* Heap sort idx[0..n) into "before" order (a max-heap of "after"). */
static void re_sift(const float *p, int32_t *idx, int i, int n)
{
    for (;;) {
        int c = 2 * i + 1;
        if (c >= n) return;
        if (c + 1 < n && re_before(p, idx[c], idx[c + 1])) c++;   /* the later one */
        if (!re_before(p, idx[i], idx[c])) return;
        int32_t t = idx[i]; idx[i] = idx[c]; idx[c] = t;
        i = c;
    }
}

static void re_heapsort(const float *p, int32_t *idx, int n)
{
    for (int i = n / 2 - 1; i >= 0; i--) re_sift(p, idx, i, n);
    for (int end = n - 1; end > 0; end--) {
        int32_t t = idx[0]; idx[0] = idx[end]; idx[end] = t;
        re_sift(p, idx, 0, end);
    }
}

int re_sample(re_sampler_t *s, const float *logits, int64_t req, int64_t pos)
{
    int V = s->vocab_size;
    if (s->temperature == 0.0f) return re_argmax(logits, V);
    float *p = s->probs;
    for (int i = 0; i < V; i++) p[i] = logits[i] / s->temperature;
    re_k_softmax(p, V);
    float u = re_uniform(re_hash64(s->seed, (uint64_t)req, (uint64_t)pos));
    if (!(s->top_p > 0.0f && s->top_p < 1.0f)) {
        float cdf = 0.0f;
        for (int i = 0; i < V; i++) {
            cdf += p[i];
            if (u < cdf) return i;
        }
        return V - 1;
    }
    float cutoff = V > 1 ? (1.0f - s->top_p) / (float)(V - 1) : 0.0f;
    int n = 0;
    for (int i = 0; i < V; i++)
        if (p[i] >= cutoff) s->idx[n++] = i;
    if (n == 0) return re_argmax(logits, V);
    re_heapsort(p, s->idx, n);
    float cum = 0.0f;
    int last = n - 1;
    for (int i = 0; i < n; i++) {
        cum += p[s->idx[i]];
        if (cum > s->top_p) { last = i; break; }
    }
    float r = u * cum, cdf = 0.0f;
    for (int i = 0; i <= last; i++) {
        cdf += p[s->idx[i]];
        if (r < cdf) return s->idx[i];
    }
    return s->idx[last];
}
