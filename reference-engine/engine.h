/* engine.h — the reference engine: a llama-style decoder serving many
 * requests at once (re_engine_).
 *
 *   re_engine_create(model, &cfg)      pools, workers, KV block pool
 *   re_engine_add(eng, id, prompt, n, max_tokens)   queue requests
 *   re_engine_run(eng)                 step until every request is done
 *   re_engine_tokens(eng, i, &n)       generated tokens of request i
 *   re_engine_destroy(eng)
 *
 * Memory: every transient tensor comes from re_alloc (pool | malloc |
 * arena) and is released at the end of its scope; the KV cache lives in
 * block-pool blocks (include/poolscope/blockpool.h), one block table per running
 * sequence. After warm-up a decode step calls no allocator.
 *
 * Scheduling is a pure function of the engine's state (never of the clock):
 * each step either admits waiting requests and prefills them together, or
 * decodes one token for every running request. See engine.c.
 */
#ifndef RE_ENGINE_H
#define RE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "alloc.h"
#include "poolscope/blockpool.h"
#include "poolscope/bufpool.h"
#include "model.h"

typedef struct re_engine re_engine_t;

/* Called once per logits row the engine produces, before sampling: request
 * id, the position the logits belong to (the last token fed), vocab floats.
 * Tests use it to compare logits bit for bit. Runs on the stepping thread. */
typedef void (*re_logits_fn)(void *ctx, int64_t req, int pos, const float *logits, int vocab);

typedef struct re_engine_config {
    int max_batch;           /* running requests at once; default 8 */
    int max_batch_tokens;    /* prompt tokens admitted per prefill step; default 2048 */
    int block_size;          /* tokens per KV block; default 16 */
    int kv_blocks;           /* KV blocks (each holds K and V of block_size tokens,
                                all layers); 0 = max_batch full contexts */
    int threads;             /* matmul/attention threads; default 1 */
    int strict_threads;      /* tests: every thread runs its fixed share of each
                                region (see re_tp_set_strict); default 0 */
    re_alloc_config_t alloc; /* transient tensors */
    float temperature;       /* 0 = greedy */
    float top_p;             /* 1 = off */
    uint64_t seed;           /* sampling seed: a draw is keyed by (seed, request id,
                                position), never by batching, threads or preemption */
    int32_t stop_token;      /* a request ends when it samples this id (not stored
                                among its tokens); -1 = never (the default) */
    re_logits_fn on_logits;  /* NULL = off */
    void *on_logits_ctx;
    kvb_alloc_t kv_meta;     /* the block pool's bookkeeping allocator ({0} = malloc) */
} re_engine_config_t;

re_engine_config_t re_engine_config_default(void);

typedef struct re_engine_stats {
    uint64_t steps, prefill_steps, decode_steps;
    uint64_t prefill_tokens, decode_tokens;      /* rows fed */
    uint64_t generated_tokens;
    double prefill_seconds, decode_seconds;          /* wall clock */
    double prefill_cpu_seconds, decode_cpu_seconds;  /* CPU time of the stepping thread */
    uint64_t matmuls;                 /* weight-matrix passes */
    double weight_passes_per_step;    /* matmuls / (steps * matrices per forward) */
    uint64_t preemptions;
    int max_running;
    re_alloc_stats_t alloc;
} re_engine_stats_t;

/* NULL on failure with *err set and a one-line reason in msg. The model must
 * outlive the engine. */
re_engine_t *re_engine_create(const re_model_t *model, const re_engine_config_t *cfg,
                              int *err, char *msg, size_t cap);
void re_engine_destroy(re_engine_t *eng);   /* NULL ok */

/* Queue a request (before or between steps). prompt: n >= 1 token ids in
 * [0, vocab). prompt + max_tokens must fit the context and the KV pool.
 * Returns the request's index (>= 0) or PSC_EINVAL / PSC_ENOMEM with msg. */
int re_engine_add(re_engine_t *eng, int64_t id, const int32_t *prompt, int n,
                  int max_tokens, char *msg, size_t cap);

/* One scheduling step. 1 = work done, 0 = nothing left, < 0 = error. */
int re_engine_step(re_engine_t *eng);
/* Step until done. 0 or a negative error. */
int re_engine_run(re_engine_t *eng);

int re_engine_n_requests(const re_engine_t *eng);
/* Generated tokens of request index i (not its prompt); *n their count. */
const int32_t *re_engine_tokens(const re_engine_t *eng, int i, int *n);
/* The prompt of request index i; *n its length. */
const int32_t *re_engine_prompt(const re_engine_t *eng, int i, int *n);
/* 1 if request i ended on the stop token (before max_tokens), else 0. */
int re_engine_stopped(const re_engine_t *eng, int i);
int64_t re_engine_request_id(const re_engine_t *eng, int i);
int re_engine_prompt_len(const re_engine_t *eng, int i);
int re_engine_max_tokens(const re_engine_t *eng, int i);
int re_engine_preemptions(const re_engine_t *eng, int i);

void re_engine_stats(const re_engine_t *eng, re_engine_stats_t *out);
/* Work pieces run by thread tid so far (tests: all threads took part). */
unsigned long re_engine_thread_chunks(const re_engine_t *eng, int tid);
bp_pool_t *re_engine_bufpool(const re_engine_t *eng);    /* NULL unless --alloc pool */
kvb_pool_t *re_engine_blockpool(const re_engine_t *eng);

#endif
