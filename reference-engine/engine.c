/* engine.c — forward pass, paged KV cache and continuous batching.
 *
 * Forward (one per step, over every row of the step's batch):
 *   the residual stream x (rows, dim) is acquired once and carried through
 *   the layers (updated in place); every other activation is acquired from
 *   re_alloc where it is produced and released as soon as its last reader is
 *   done (the forward discipline of docs/DESIGN.md, "Buffer pool"). Logits
 *   are copied out of the forward into the engine's own buffer before the
 *   final reset, so the arena mode can rewind.
 *
 * Batching: each weight matrix is multiplied against all rows of the step in
 * one call (re_k_matmul_rows keeps 4 weight rows in L1 while it walks the
 * batch), so it is streamed from memory once per step. Threads split output
 * rows. Each row's arithmetic is the same whatever else is in the batch.
 *
 * KV cache: one block-pool block holds K and V of `block_size` consecutive
 * positions for every layer, laid out (layer, k|v, token, kv_dim). A running
 * sequence has a block table (ids and storage pointers); attention walks it
 * in position order 0..pos, reading keys and values in place, so the sums
 * are in one flat order whatever the block size.
 *
 * Scheduling (state only, never the clock): if a request waits, a free batch
 * slot exists and the block pool has room for its tokens, the step is a
 * prefill of every request that can be admitted (FIFO, up to
 * max_batch_tokens prompt tokens). Otherwise it is a decode step for every
 * running request; a request that needs a new block and finds none preempts
 * the newest running request (which may be itself): its blocks are freed and
 * it goes back to the head of the queue, to be recomputed from its prompt
 * and the tokens it already generated. A request finishes after max_tokens,
 * or as soon as it samples the configured stop token (kept out of its
 * tokens), and its blocks go back to the pool at once.
 */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels.h"
#include "poolscope/pool_adapter.h"
#include "poolscope/poolscope.h"
#include "poolscope/error.h"
#include "sampler.h"
#include "threadpool.h"

enum { RQ_WAITING = 0, RQ_RUNNING, RQ_DONE };

typedef struct re_req {
    int64_t id;
    int prompt_len, max_tokens;
    int32_t *tokens;      /* (prompt_len + max_tokens): prompt then generated */
    int n_gen;
    int state;
    int slot;             /* batch slot while running, else -1 */
    int n_kv;             /* positions whose K/V are stored */
    int preemptions;
    int begun;            /* request marker opened */
    int stopped;          /* sampled the stop token */
} re_req_t;

typedef struct re_slot {
    int req;              /* request index, -1 when free */
    int n_blocks;
    int32_t *ids;         /* (max_blocks_per_seq) block ids in position order */
    float **base;         /* (max_blocks_per_seq) their storage */
} re_slot_t;

struct re_engine {
    const re_model_t *m;
    re_shape_t s;
    re_engine_config_t cfg;
    int hs, kv_dim, max_blocks_per_seq, max_rows;

    re_alloc_t *alloc;
    re_tp_t *tp;
    kvb_pool_t *kv;
    kvb_config_t kv_cfg;
    re_sampler_t sampler;

    float *rope_cos, *rope_sin;   /* (seq_len, head_size / 2) */

    re_req_t *reqs;
    int n_reqs, cap_reqs;
    int64_t max_id;               /* largest request id added */
    int *wq;                      /* waiting queue: a ring of request indices */
    int wq_head, wq_n, wq_cap;
    re_slot_t *slots;             /* (max_batch) */
    int *running;                 /* (max_batch) request indices, admission order */
    int n_running;

    /* the current step's rows */
    int n_rows;
    int32_t *row_tok, *row_pos, *row_slot;   /* (max_rows) */
    int n_logit;
    int32_t *logit_row, *logit_req;          /* (max_batch) */
    float *logits_out;                       /* (max_batch, vocab) */

    uint64_t step_no;
    re_engine_stats_t st;
};

re_engine_config_t re_engine_config_default(void)
{
    re_engine_config_t c;
    memset(&c, 0, sizeof c);
    c.max_batch = 8;
    c.max_batch_tokens = 2048;
    c.block_size = 16;
    c.threads = 1;
    c.alloc.mode = RE_ALLOC_POOL;
    c.alloc.pool_cap = RE_POOL_CAP_DEFAULT;
    c.top_p = 1.0f;
    c.stop_token = -1;
    return c;
}

/* Timing is for the statistics only, never for scheduling. */
static double re_clock(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
static double re_now(void) { return re_clock(CLOCK_MONOTONIC); }
static double re_cpu(void) { return re_clock(CLOCK_THREAD_CPUTIME_ID); }

/* ---- creation ---------------------------------------------------------------- */

void re_engine_destroy(re_engine_t *e)
{
    if (!e) return;
    re_tp_destroy(e->tp);
    if (e->kv) {
        kvb_destroy(e->kv);
        psa_blockpool_destroyed(&e->kv_cfg);
    }
    re_alloc_destroy(e->alloc);
    re_sampler_free(&e->sampler);
    for (int i = 0; i < e->n_reqs; i++) free(e->reqs[i].tokens);
    free(e->reqs);
    free(e->wq);
    if (e->slots)
        for (int i = 0; i < e->cfg.max_batch; i++) {
            free(e->slots[i].ids);
            free(e->slots[i].base);
        }
    free(e->slots);
    free(e->running);
    free(e->row_tok);
    free(e->row_pos);
    free(e->row_slot);
    free(e->logit_row);
    free(e->logit_req);
    free(e->logits_out);
    free(e->rope_cos);
    free(e->rope_sin);
    free(e);
}

#define RE_FAIL(code, ...) do { rc = (code); if (msg) snprintf(msg, cap, __VA_ARGS__); goto fail; } while (0)

re_engine_t *re_engine_create(const re_model_t *model, const re_engine_config_t *cfgp,
                              int *err, char *msg, size_t cap)
{
    int rc = 0;
    re_engine_t *e = NULL;
    re_engine_config_t cfg = cfgp ? *cfgp : re_engine_config_default();
    if (!model || !model->mem) RE_FAIL(PSC_EINVAL, "no model");
    if (re_shape_check(&model->shape, msg, cap)) { rc = PSC_EINVAL; goto fail; }
    if (cfg.max_batch < 1 || cfg.max_batch > 4096)
        RE_FAIL(PSC_EINVAL, "--max-batch must be in 1..4096 (got %d)", cfg.max_batch);
    if (cfg.max_batch_tokens < 1)
        RE_FAIL(PSC_EINVAL, "--max-batch-tokens must be >= 1 (got %d)", cfg.max_batch_tokens);
    if (cfg.block_size < 1 || cfg.block_size > 65536)
        RE_FAIL(PSC_EINVAL, "--block-size must be in 1..65536 (got %d)", cfg.block_size);
    if (cfg.threads < 1 || cfg.threads > 256)
        RE_FAIL(PSC_EINVAL, "--threads must be in 1..256 (got %d)", cfg.threads);
    if (cfg.kv_blocks < 0) RE_FAIL(PSC_EINVAL, "--kv-blocks must be >= 0 (got %d)", cfg.kv_blocks);
    if (!(cfg.temperature >= 0.0f) || !isfinite(cfg.temperature))
        RE_FAIL(PSC_EINVAL, "--temperature must be >= 0");
    if (!(cfg.top_p > 0.0f) || !(cfg.top_p <= 1.0f))
        RE_FAIL(PSC_EINVAL, "--top-p must be in (0, 1]");
    if (cfg.stop_token < -1 || cfg.stop_token >= model->shape.vocab_size)
        RE_FAIL(PSC_EINVAL, "stop token %d is not -1 or an id in 0..%d", (int)cfg.stop_token,
                model->shape.vocab_size - 1);

    e = calloc(1, sizeof *e);
    if (!e) RE_FAIL(PSC_ENOMEM, "out of memory");
    e->m = model;
    e->s = model->shape;
    e->cfg = cfg;
    const re_shape_t *s = &e->s;
    e->hs = re_head_size(s);
    e->kv_dim = re_kv_dim(s);
    e->max_blocks_per_seq = (s->seq_len + cfg.block_size - 1) / cfg.block_size;
    if (cfg.kv_blocks == 0) {
        long long n = (long long)cfg.max_batch * e->max_blocks_per_seq;
        if (n > (1 << 24)) n = 1 << 24;
        e->cfg.kv_blocks = (int)n;
    }
    e->max_rows = cfg.max_batch_tokens > s->seq_len ? cfg.max_batch_tokens : s->seq_len;
    if (e->max_rows < cfg.max_batch) e->max_rows = cfg.max_batch;

    int B = cfg.max_batch;
    e->slots = calloc((size_t)B, sizeof *e->slots);
    e->running = calloc((size_t)B, sizeof *e->running);
    e->row_tok = calloc((size_t)e->max_rows, sizeof(int32_t));
    e->row_pos = calloc((size_t)e->max_rows, sizeof(int32_t));
    e->row_slot = calloc((size_t)e->max_rows, sizeof(int32_t));
    e->logit_row = calloc((size_t)B, sizeof(int32_t));
    e->logit_req = calloc((size_t)B, sizeof(int32_t));
    e->logits_out = calloc((size_t)B * (size_t)s->vocab_size, sizeof(float));
    size_t half = (size_t)e->hs / 2;
    e->rope_cos = calloc((size_t)s->seq_len * half, sizeof(float));
    e->rope_sin = calloc((size_t)s->seq_len * half, sizeof(float));
    if (!e->slots || !e->running || !e->row_tok || !e->row_pos || !e->row_slot ||
        !e->logit_row || !e->logit_req || !e->logits_out || !e->rope_cos || !e->rope_sin)
        RE_FAIL(PSC_ENOMEM, "out of memory");
    for (int i = 0; i < B; i++) {
        e->slots[i].req = -1;
        e->slots[i].ids = calloc((size_t)e->max_blocks_per_seq, sizeof(int32_t));
        e->slots[i].base = calloc((size_t)e->max_blocks_per_seq, sizeof(float *));
        if (!e->slots[i].ids || !e->slots[i].base) RE_FAIL(PSC_ENOMEM, "out of memory");
    }
    /* RoPE: pair j of a head turns by pos / 10000^(2j / head_size) */
    for (int p = 0; p < s->seq_len; p++)
        for (size_t j = 0; j < half; j++) {
            float freq = 1.0f / powf(10000.0f, (float)(2 * j) / (float)e->hs);
            float a = (float)p * freq;
            e->rope_cos[(size_t)p * half + j] = cosf(a);
            e->rope_sin[(size_t)p * half + j] = sinf(a);
        }

    rc = re_sampler_init(&e->sampler, s->vocab_size, cfg.temperature, cfg.top_p, cfg.seed);
    if (rc) RE_FAIL(rc, "cannot set up the sampler: %s", psc_strerror(rc));

    int e2 = 0;
    e->alloc = re_alloc_create(&cfg.alloc, &e2);
    if (!e->alloc) RE_FAIL(e2 ? e2 : PSC_ENOMEM, "cannot create the %s allocator: %s",
                           re_alloc_mode_name(cfg.alloc.mode), psc_strerror(e2));

    kvb_config_t kc = kvb_config_default();
    kc.block_size = cfg.block_size;
    kc.n_blocks = e->cfg.kv_blocks;
    kc.separate_kv = false;
    kc.grow_on_exhaustion = false;
    kc.row_elems = (size_t)2 * (size_t)s->n_layers * (size_t)e->kv_dim;
    kc.alloc = cfg.kv_meta;
    e->kv_cfg = psa_blockpool_config(&kc, "refengine.kv");
    e->kv = kvb_create(&e->kv_cfg, &e2);
    if (!e->kv) {
        psa_blockpool_destroyed(&e->kv_cfg);
        RE_FAIL(e2 ? e2 : PSC_ENOMEM, "cannot create the KV block pool (%d blocks of %d tokens): %s",
                e->cfg.kv_blocks, cfg.block_size, psc_strerror(e2));
    }

    e->tp = re_tp_create(cfg.threads, &e2);
    if (!e->tp) RE_FAIL(e2 ? e2 : PSC_ENOMEM, "cannot start %d threads", cfg.threads);
    re_tp_set_strict(e->tp, cfg.strict_threads);
    return e;
fail:
    re_engine_destroy(e);
    if (err) *err = rc;
    return NULL;
}

/* ---- requests ----------------------------------------------------------------- */

static int re_wq_push(re_engine_t *e, int r, int front)
{
    if (e->wq_n == e->wq_cap) {
        int ncap = e->wq_cap ? e->wq_cap * 2 : 64;
        int *n = malloc((size_t)ncap * sizeof *n);
        if (!n) return PSC_ENOMEM;
        for (int i = 0; i < e->wq_n; i++) n[i] = e->wq[(e->wq_head + i) % e->wq_cap];
        free(e->wq);
        e->wq = n;
        e->wq_cap = ncap;
        e->wq_head = 0;
    }
    if (front) {
        e->wq_head = (e->wq_head + e->wq_cap - 1) % e->wq_cap;
        e->wq[e->wq_head] = r;
    } else {
        e->wq[(e->wq_head + e->wq_n) % e->wq_cap] = r;
    }
    e->wq_n++;
    return 0;
}

static int re_wq_front(const re_engine_t *e) { return e->wq[e->wq_head]; }
static void re_wq_pop(re_engine_t *e)
{
    e->wq_head = (e->wq_head + 1) % e->wq_cap;
    e->wq_n--;
}

int re_engine_add(re_engine_t *e, int64_t id, const int32_t *prompt, int n, int max_tokens,
                  char *msg, size_t cap)
{
    const re_shape_t *s = &e->s;
    if (id < 0) { if (msg) snprintf(msg, cap, "request id must be >= 0"); return PSC_EINVAL; }
    if (n < 1 || max_tokens < 1) {
        if (msg) snprintf(msg, cap, "request %lld: prompt length and max tokens must be >= 1",
                          (long long)id);
        return PSC_EINVAL;
    }
    if ((long long)n + max_tokens > s->seq_len) {
        if (msg) snprintf(msg, cap, "request %lld: prompt %d + max tokens %d exceeds the context (%d)",
                          (long long)id, n, max_tokens, s->seq_len);
        return PSC_EINVAL;
    }
    /* the longest it can get: n + max_tokens - 1 positions stored */
    int need = (n + max_tokens - 1 + e->cfg.block_size - 1) / e->cfg.block_size;
    if (need > e->cfg.kv_blocks) {
        if (msg) snprintf(msg, cap, "request %lld needs %d KV blocks of %d tokens, the pool has %d",
                          (long long)id, need, e->cfg.block_size, e->cfg.kv_blocks);
        return PSC_EINVAL;
    }
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= s->vocab_size) {
            if (msg) snprintf(msg, cap, "request %lld: prompt token %d out of range", (long long)id,
                              prompt[i]);
            return PSC_EINVAL;
        }
    /* ids must be unique (they are the block pool's owners); ids added in
     * increasing order, the usual case, need no scan */
    for (int i = 0; e->n_reqs > 0 && id <= e->max_id && i < e->n_reqs; i++)
        if (e->reqs[i].id == id) {
            if (msg) snprintf(msg, cap, "request id %lld used twice", (long long)id);
            return PSC_EINVAL;
        }
    if (e->n_reqs == e->cap_reqs) {
        int ncap = e->cap_reqs ? e->cap_reqs * 2 : 16;
        re_req_t *nr = realloc(e->reqs, (size_t)ncap * sizeof *nr);
        if (!nr) return PSC_ENOMEM;
        e->reqs = nr;
        e->cap_reqs = ncap;
    }
    re_req_t *r = &e->reqs[e->n_reqs];
    memset(r, 0, sizeof *r);
    r->tokens = malloc(((size_t)n + (size_t)max_tokens) * sizeof(int32_t));
    if (!r->tokens) return PSC_ENOMEM;
    memcpy(r->tokens, prompt, (size_t)n * sizeof(int32_t));
    r->id = id;
    r->prompt_len = n;
    r->max_tokens = max_tokens;
    r->slot = -1;
    r->state = RQ_WAITING;
    int rc = re_wq_push(e, e->n_reqs, 0);
    if (rc) { free(r->tokens); return rc; }
    if (e->n_reqs == 0 || id > e->max_id) e->max_id = id;
    return e->n_reqs++;
}

/* ---- forward ------------------------------------------------------------------ */

typedef struct re_mm_job {
    float *out;
    const float *x, *w;
    int B, n, d;
} re_mm_job_t;

static void re_mm_piece(void *ctx, size_t b, size_t end, int tid)
{
    (void)tid;
    re_mm_job_t *j = ctx;
    re_k_matmul_rows(j->out, j->x, j->w, j->B, j->n, j->d, (int)b, (int)end);
}

/* out (B, d) = x (B, n) · W (d, n)^T: one pass over W for the whole batch */
static void re_matmul(re_engine_t *e, float *out, const float *x, const float *w, int B, int n, int d)
{
    re_mm_job_t j = { out, x, w, B, n, d };
    re_tp_run(e->tp, re_mm_piece, &j, (size_t)d, 4);
    e->st.matmuls++;
}

typedef struct re_att_job {
    re_engine_t *e;
    const float *q;    /* (B, dim) rotated queries */
    float *out;        /* (B, dim) */
    float *scores;     /* (threads, seq_len) */
    int layer;
} re_att_job_t;

/* items = (row, head) pairs; each is computed start to end by one thread */
static void re_att_piece(void *ctx, size_t begin, size_t end, int tid)
{
    re_att_job_t *j = ctx;
    re_engine_t *e = j->e;
    const re_shape_t *s = &e->s;
    int D = s->dim, hs = e->hs, KVD = e->kv_dim, bs = e->cfg.block_size;
    int group = s->n_heads / s->n_kv_heads;
    float scale = 1.0f / sqrtf((float)hs);
    float *sc = j->scores + (size_t)tid * (size_t)s->seq_len;
    for (size_t it = begin; it < end; it++) {
        int b = (int)(it / (size_t)s->n_heads), h = (int)(it % (size_t)s->n_heads);
        int pos = e->row_pos[b];
        const re_slot_t *sl = &e->slots[e->row_slot[b]];
        const float *qh = j->q + (size_t)b * D + (size_t)h * hs;
        size_t koff = (size_t)(2 * j->layer) * bs * KVD + (size_t)(h / group) * hs;
        size_t voff = koff + (size_t)bs * KVD;
        /* scores for positions 0..pos, block by block (each dot has its own
         * fixed order; the block size only changes where keys are read) */
        for (int t = 0, bi = 0; t <= pos; bi++) {
            int nr = pos + 1 - t < bs ? pos + 1 - t : bs;
            re_k_dot_rows(sc + t, qh, sl->base[bi] + koff, (size_t)KVD, nr, hs, scale);
            t += nr;
        }
        re_k_softmax(sc, pos + 1);
        /* out = sum over t = 0..pos, in that order, of a_t * v_t */
        float *o = j->out + (size_t)b * D + (size_t)h * hs;
        for (int i = 0; i < hs; i++) o[i] = 0.0f;
        for (int t = 0, bi = 0; t <= pos; bi++) {
            int nr = pos + 1 - t < bs ? pos + 1 - t : bs;
            re_k_wsum(o, sc + t, sl->base[bi] + voff, (size_t)KVD, nr, hs);
            t += nr;
        }
    }
}

/* Rotate pairs of every head of rows (B, width) by their positions. */
static void re_rope(const re_engine_t *e, float *x, int B, int width)
{
    int hs = e->hs, half = hs / 2;
    for (int b = 0; b < B; b++) {
        const float *c = e->rope_cos + (size_t)e->row_pos[b] * half;
        const float *sn = e->rope_sin + (size_t)e->row_pos[b] * half;
        float *row = x + (size_t)b * width;
        for (int i = 0; i < width; i += 2) {
            int j = (i % hs) / 2;
            float x0 = row[i], x1 = row[i + 1];
            row[i] = x0 * c[j] - x1 * sn[j];
            row[i + 1] = x0 * sn[j] + x1 * c[j];
        }
    }
}

static int re_forward(re_engine_t *e)
{
    const re_shape_t *s = &e->s;
    const re_weights_t *w = &e->m->w;
    re_alloc_t *A = e->alloc;
    const int B = e->n_rows, R = e->n_logit, D = s->dim, KVD = e->kv_dim, H = s->hidden_dim;
    const int bs = e->cfg.block_size, T = re_tp_threads(e->tp);
    int rc = 0;
    re_tensor_t x = { 0 }, xb = { 0 }, q = { 0 }, k = { 0 }, v = { 0 }, att = { 0 }, sc = { 0 },
                o = { 0 }, h1 = { 0 }, h3 = { 0 }, logits = { 0 };
    int64_t fp[2] = { B, R };
    ps_begin("forward", e->step_no, fp, 2);

#define ACQ(t, n) do { if ((rc = re_tensor_acquire(A, (size_t)(n), &(t))) != 0) goto out; } while (0)
#define REL(t) re_tensor_release(A, &(t))

    ACQ(x, (size_t)B * D);                       /* x (B, dim) residual stream, carried */
    for (int b = 0; b < B; b++)
        memcpy(x.data + (size_t)b * D, w->token_embedding + (size_t)e->row_tok[b] * D,
               (size_t)D * sizeof(float));

    for (int l = 0; l < s->n_layers; l++) {
        ps_begin("layer", (uint64_t)l, NULL, 0);
        size_t lD = (size_t)l * D;
        /* attention block */
        ACQ(xb, (size_t)B * D);                  /* xb (B, dim) normed input */
        for (int b = 0; b < B; b++)
            re_k_rmsnorm(xb.data + (size_t)b * D, x.data + (size_t)b * D, w->rms_att + lD, D);
        ACQ(q, (size_t)B * D);                   /* q (B, n_heads * head_size) */
        ACQ(k, (size_t)B * KVD);                 /* k (B, kv_dim) */
        ACQ(v, (size_t)B * KVD);                 /* v (B, kv_dim) */
        re_matmul(e, q.data, xb.data, w->wq + (size_t)l * D * D, B, D, D);
        re_matmul(e, k.data, xb.data, w->wk + (size_t)l * KVD * D, B, D, KVD);
        re_matmul(e, v.data, xb.data, w->wv + (size_t)l * KVD * D, B, D, KVD);
        REL(xb);
        re_rope(e, q.data, B, D);
        re_rope(e, k.data, B, KVD);
        for (int b = 0; b < B; b++) {            /* store K/V in the rows' blocks */
            int p = e->row_pos[b];
            float *blk = e->slots[e->row_slot[b]].base[p / bs];
            size_t off = ((size_t)(2 * l) * bs + (size_t)(p % bs)) * KVD;
            memcpy(blk + off, k.data + (size_t)b * KVD, (size_t)KVD * sizeof(float));
            memcpy(blk + off + (size_t)bs * KVD, v.data + (size_t)b * KVD,
                   (size_t)KVD * sizeof(float));
        }
        REL(k);
        REL(v);
        ACQ(att, (size_t)B * D);                 /* att (B, dim) per-head attention output */
        ACQ(sc, (size_t)T * s->seq_len);         /* sc (threads, seq_len) scores */
        re_att_job_t aj = { e, q.data, att.data, sc.data, l };
        re_tp_run(e->tp, re_att_piece, &aj, (size_t)B * s->n_heads, 1);
        REL(sc);
        REL(q);
        ACQ(o, (size_t)B * D);                   /* o (B, dim) attention projection */
        re_matmul(e, o.data, att.data, w->wo + (size_t)l * D * D, B, D, D);
        REL(att);
        for (size_t i = 0; i < (size_t)B * D; i++) x.data[i] += o.data[i];
        REL(o);

        /* feed-forward block */
        ACQ(xb, (size_t)B * D);                  /* xb (B, dim) normed input */
        for (int b = 0; b < B; b++)
            re_k_rmsnorm(xb.data + (size_t)b * D, x.data + (size_t)b * D, w->rms_ffn + lD, D);
        ACQ(h1, (size_t)B * H);                  /* h1 (B, hidden) gate */
        ACQ(h3, (size_t)B * H);                  /* h3 (B, hidden) up */
        re_matmul(e, h1.data, xb.data, w->w1 + (size_t)l * H * D, B, D, H);
        re_matmul(e, h3.data, xb.data, w->w3 + (size_t)l * H * D, B, D, H);
        REL(xb);
        for (size_t i = 0; i < (size_t)B * H; i++) {   /* SwiGLU: silu(h1) * h3 */
            float g = h1.data[i];
            h1.data[i] = g / (1.0f + expf(-g)) * h3.data[i];
        }
        REL(h3);
        ACQ(o, (size_t)B * D);                   /* o (B, dim) down projection */
        re_matmul(e, o.data, h1.data, w->w2 + (size_t)l * D * H, B, H, D);
        REL(h1);
        for (size_t i = 0; i < (size_t)B * D; i++) x.data[i] += o.data[i];
        REL(o);
        ps_end("layer", (uint64_t)l);
    }

    /* classifier, only for the rows that sample */
    ACQ(xb, (size_t)R * D);                      /* xb (R, dim) final norm of sampling rows */
    for (int i = 0; i < R; i++)
        re_k_rmsnorm(xb.data + (size_t)i * D, x.data + (size_t)e->logit_row[i] * D, w->rms_final, D);
    ACQ(logits, (size_t)R * s->vocab_size);      /* logits (R, vocab) */
    re_matmul(e, logits.data, xb.data, w->wcls, R, D, s->vocab_size);
    REL(xb);
    memcpy(e->logits_out, logits.data, (size_t)R * s->vocab_size * sizeof(float));   /* copy out */
    REL(logits);
    REL(x);
#undef ACQ
#undef REL
out:
    re_tensor_release(A, &x); re_tensor_release(A, &xb); re_tensor_release(A, &q);
    re_tensor_release(A, &k); re_tensor_release(A, &v); re_tensor_release(A, &att);
    re_tensor_release(A, &sc); re_tensor_release(A, &o); re_tensor_release(A, &h1);
    re_tensor_release(A, &h3); re_tensor_release(A, &logits);
    int rr = re_alloc_reset(A);
    if (!rc) rc = rr;
    ps_end("forward", e->step_no);
    return rc;
}

/* ---- scheduling ----------------------------------------------------------------- */

static void re_slot_clear(re_engine_t *e, int slot)
{
    e->slots[slot].req = -1;
    e->slots[slot].n_blocks = 0;
}

static void re_running_remove(re_engine_t *e, int ridx)
{
    int k = 0;
    for (int i = 0; i < e->n_running; i++)
        if (e->running[i] != ridx) e->running[k++] = e->running[i];
    e->n_running = k;
}

/* Free a running request's blocks and queue it again at the head. */
static int re_preempt(re_engine_t *e, int ridx)
{
    re_req_t *r = &e->reqs[ridx];
    kvb_free_all(e->kv, r->id);
    re_slot_clear(e, r->slot);
    r->slot = -1;
    r->n_kv = 0;
    r->state = RQ_WAITING;
    r->preemptions++;
    e->st.preemptions++;
    re_running_remove(e, ridx);
    int64_t pl[2] = { r->prompt_len + r->n_gen, r->n_gen };
    ps_mark("preempt", pl, 2);
    return re_wq_push(e, ridx, 1);
}

static void re_finish(re_engine_t *e, int ridx)
{
    re_req_t *r = &e->reqs[ridx];
    kvb_free_all(e->kv, r->id);
    re_slot_clear(e, r->slot);
    r->slot = -1;
    r->state = RQ_DONE;
    re_running_remove(e, ridx);
    ps_end("request", (uint64_t)r->id);
}

static int re_bind_blocks(re_engine_t *e, re_slot_t *sl, int first, int n)
{
    for (int i = first; i < first + n; i++) {
        sl->base[i] = kvb_slot(e->kv, sl->ids[i]);
        if (!sl->base[i]) return PSC_ECORRUPT;
    }
    sl->n_blocks = first + n;
    return 0;
}

/* Admit what fits and build the prefill rows. Returns requests admitted. */
static int re_admit(re_engine_t *e)
{
    int bs = e->cfg.block_size, n_adm = 0;
    e->n_rows = 0;
    e->n_logit = 0;
    while (e->wq_n > 0 && e->n_running < e->cfg.max_batch) {
        int ridx = re_wq_front(e);
        re_req_t *r = &e->reqs[ridx];
        int len = r->prompt_len + r->n_gen;     /* recompute everything it has */
        if (n_adm > 0 && e->n_rows + len > e->cfg.max_batch_tokens) break;
        int need = (len + bs - 1) / bs;
        int nfree = kvb_n_free(e->kv, KVB_STREAM_KV);
        if (nfree < need) break;
        int slot = 0;
        while (e->slots[slot].req >= 0) slot++;
        re_slot_t *sl = &e->slots[slot];
        int got = kvb_allocate(e->kv, KVB_STREAM_KV, len, r->id, KVB_FMT_F32, sl->ids,
                               e->max_blocks_per_seq);
        if (got == PSC_EEXHAUSTED) break;
        if (got < 0) return got;
        int rc = re_bind_blocks(e, sl, 0, got);
        if (rc) return rc;
        sl->req = ridx;
        r->slot = slot;
        r->state = RQ_RUNNING;
        re_wq_pop(e);
        e->running[e->n_running++] = ridx;
        if (!r->begun) {
            int64_t pl[2] = { r->prompt_len, r->max_tokens };
            ps_begin("request", (uint64_t)r->id, pl, 2);
            r->begun = 1;
        }
        for (int p = 0; p < len; p++) {
            e->row_tok[e->n_rows] = r->tokens[p];
            e->row_pos[e->n_rows] = p;
            e->row_slot[e->n_rows] = slot;
            e->n_rows++;
        }
        e->logit_row[e->n_logit] = e->n_rows - 1;
        e->logit_req[e->n_logit] = ridx;
        e->n_logit++;
        n_adm++;
    }
    return n_adm;
}

/* Make room for one more position in every running request, preempting the
 * newest when the pool is out of blocks; build the decode rows. */
static int re_prepare_decode(re_engine_t *e)
{
    int bs = e->cfg.block_size;
    for (int i = 0; i < e->n_running;) {
        int ridx = e->running[i];
        re_req_t *r = &e->reqs[ridx];
        re_slot_t *sl = &e->slots[r->slot];
        if (r->n_kv / bs < sl->n_blocks) { i++; continue; }
        int got = kvb_allocate(e->kv, KVB_STREAM_KV, 1, r->id, KVB_FMT_F32,
                               sl->ids + sl->n_blocks, 1);
        if (got == PSC_EEXHAUSTED) {
            int victim = e->running[e->n_running - 1];
            int rc = re_preempt(e, victim);
            if (rc) return rc;
            continue;   /* retry this request (or stop if it was the victim) */
        }
        if (got < 0) return got;
        int rc = re_bind_blocks(e, sl, sl->n_blocks, 1);
        if (rc) return rc;
        i++;
    }
    e->n_rows = 0;
    e->n_logit = 0;
    for (int i = 0; i < e->n_running; i++) {
        int ridx = e->running[i];
        re_req_t *r = &e->reqs[ridx];
        e->row_tok[e->n_rows] = r->tokens[r->prompt_len + r->n_gen - 1];
        e->row_pos[e->n_rows] = r->n_kv;
        e->row_slot[e->n_rows] = r->slot;
        e->logit_row[e->n_logit] = e->n_rows;
        e->logit_req[e->n_logit] = ridx;
        e->n_rows++;
        e->n_logit++;
    }
    return 0;
}

/* After a forward: count stored positions, report block fill, sample. */
static int re_after_forward(re_engine_t *e, int prefill)
{
    int bs = e->cfg.block_size;
    for (int i = 0; i < e->n_logit; i++) {
        int ridx = e->logit_req[i];
        re_req_t *r = &e->reqs[ridx];
        re_slot_t *sl = &e->slots[r->slot];
        int pos = e->row_pos[e->logit_row[i]];
        r->n_kv = pos + 1;
        if (!prefill) {   /* one new position: its block's fill grows by one */
            int rc = kvb_set_used(e->kv, sl->ids[pos / bs], pos % bs + 1);
            if (rc < 0) return rc;
        }
        const float *lg = e->logits_out + (size_t)i * e->s.vocab_size;
        if (e->cfg.on_logits) e->cfg.on_logits(e->cfg.on_logits_ctx, r->id, pos, lg, e->s.vocab_size);
        int tok = re_sample(&e->sampler, lg, r->id, pos);
        if (tok == e->cfg.stop_token) {
            r->stopped = 1;
            continue;
        }
        r->tokens[r->prompt_len + r->n_gen] = tok;
        r->n_gen++;
        e->st.generated_tokens++;
    }
    for (int i = 0; i < e->n_logit; i++) {
        int ridx = e->logit_req[i];
        if (e->reqs[ridx].n_gen == e->reqs[ridx].max_tokens || e->reqs[ridx].stopped)
            re_finish(e, ridx);
    }
    return 0;
}

int re_engine_step(re_engine_t *e)
{
    int rc;
    if (e->wq_n > 0 && e->n_running < e->cfg.max_batch) {
        double t0 = re_now(), c0 = re_cpu();
        int64_t pl[2] = { 0, 0 };
        int n = re_admit(e);
        if (n < 0) return n;
        if (n > 0) {
            pl[0] = e->n_rows;
            pl[1] = n;
            ps_begin("prefill", e->step_no, pl, 2);
            rc = re_forward(e);
            if (!rc) rc = re_after_forward(e, 1);
            ps_end("prefill", e->step_no);
            if (rc) return rc;
            e->st.prefill_steps++;
            e->st.prefill_tokens += (uint64_t)e->n_rows;
            e->st.prefill_seconds += re_now() - t0;
            e->st.prefill_cpu_seconds += re_cpu() - c0;
            e->st.steps++;
            e->step_no++;
            return 1;
        }
    }
    if (e->n_running > 0) {
        double t0 = re_now(), c0 = re_cpu();
        int64_t pl[1] = { e->n_running };
        ps_begin("decode", e->step_no, pl, 1);
        rc = re_prepare_decode(e);
        if (!rc && e->n_rows > 0) {
            rc = re_forward(e);
            if (!rc) rc = re_after_forward(e, 0);
        }
        ps_end("decode", e->step_no);
        if (rc) return rc;
        e->st.decode_steps++;
        e->st.decode_tokens += (uint64_t)e->n_rows;
        e->st.decode_seconds += re_now() - t0;
        e->st.decode_cpu_seconds += re_cpu() - c0;
        e->st.steps++;
        e->step_no++;
        if (e->n_running > e->st.max_running) e->st.max_running = e->n_running;
        return 1;
    }
    if (e->wq_n > 0) return PSC_EEXHAUSTED;   /* cannot happen: re_engine_add checks the fit */
    return 0;
}

int re_engine_run(re_engine_t *e)
{
    int rc;
    while ((rc = re_engine_step(e)) > 0) {}
    return rc;
}

/* ---- accessors ------------------------------------------------------------------- */

int re_engine_n_requests(const re_engine_t *e) { return e->n_reqs; }
const int32_t *re_engine_tokens(const re_engine_t *e, int i, int *n)
{
    *n = e->reqs[i].n_gen;
    return e->reqs[i].tokens + e->reqs[i].prompt_len;
}
const int32_t *re_engine_prompt(const re_engine_t *e, int i, int *n)
{
    *n = e->reqs[i].prompt_len;
    return e->reqs[i].tokens;
}
int re_engine_stopped(const re_engine_t *e, int i) { return e->reqs[i].stopped; }
int64_t re_engine_request_id(const re_engine_t *e, int i) { return e->reqs[i].id; }
int re_engine_prompt_len(const re_engine_t *e, int i) { return e->reqs[i].prompt_len; }
int re_engine_max_tokens(const re_engine_t *e, int i) { return e->reqs[i].max_tokens; }
int re_engine_preemptions(const re_engine_t *e, int i) { return e->reqs[i].preemptions; }
unsigned long re_engine_thread_chunks(const re_engine_t *e, int tid) { return re_tp_chunks_run(e->tp, tid); }
bp_pool_t *re_engine_bufpool(const re_engine_t *e) { return re_alloc_pool(e->alloc); }
kvb_pool_t *re_engine_blockpool(const re_engine_t *e) { return e->kv; }

void re_engine_stats(const re_engine_t *e, re_engine_stats_t *out)
{
    *out = e->st;
    uint64_t per_fwd = (uint64_t)7 * (uint64_t)e->s.n_layers + 1;
    out->weight_passes_per_step = e->st.steps ? (double)e->st.matmuls / ((double)e->st.steps * (double)per_fwd) : 0.0;
    re_alloc_stats(e->alloc, &out->alloc);
}
