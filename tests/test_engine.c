/* test_engine.c — the reference engine against an independent forward pass,
 * bit-exactness across batching/block size/threads/alloc modes/preemption,
 * checkpoints, sampling, workloads, and allocation-free steady-state decode;
 * user prompts: the tokenizer's encoder against hand-worked merges, id
 * lists, the stop token, and seeded sampling whatever the batching.
 *
 * The reference forward here shares no code with reference-engine/: its own
 * loops in double precision, one sequence, a contiguous KV cache, no pool.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine.h"
#include "kernels.h"
#include "model.h"
#include "poolscope/error.h"
#include "prompt.h"
#include "sampler.h"
#include "threadpool.h"
#include "tokenizer.h"
#include "workload.h"

/* ---- the independent reference ---------------------------------------------- */

typedef struct {
    const re_model_t *m;
    int pos;
    double *kc, *vc;    /* (n_layers, seq_len, kv_dim) contiguous */
} ref_t;

static void ref_init(ref_t *r, const re_model_t *m)
{
    const re_shape_t *s = &m->shape;
    int kvd = s->n_kv_heads * (s->dim / s->n_heads);
    r->m = m;
    r->pos = 0;
    r->kc = calloc((size_t)s->n_layers * s->seq_len * kvd, sizeof(double));
    r->vc = calloc((size_t)s->n_layers * s->seq_len * kvd, sizeof(double));
}

static void ref_free(ref_t *r) { free(r->kc); free(r->vc); }

static void ref_rms(double *o, const double *x, const float *w, int n)
{
    double ss = 0;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    double k = 1.0 / sqrt(ss / n + 1e-5);
    for (int i = 0; i < n; i++) o[i] = w[i] * x[i] * k;
}

/* o (rows) = W (rows, cols) x (cols) */
static void ref_mv(double *o, const float *W, const double *x, int rows, int cols)
{
    for (int i = 0; i < rows; i++) {
        double a = 0;
        for (int j = 0; j < cols; j++) a += (double)W[(size_t)i * cols + j] * x[j];
        o[i] = a;
    }
}

/* feed one token at r->pos; logits (vocab) out as double */
static void ref_step(ref_t *r, int token, double *logits)
{
    const re_shape_t *s = &r->m->shape;
    const re_weights_t *w = &r->m->w;
    int D = s->dim, H = s->hidden_dim, hs = D / s->n_heads, kvd = s->n_kv_heads * hs;
    int p = r->pos;
    double *x = calloc(D, sizeof *x), *xb = calloc(D, sizeof *xb), *q = calloc(D, sizeof *q);
    double *k = calloc(kvd, sizeof *k), *v = calloc(kvd, sizeof *v), *o = calloc(D, sizeof *o);
    double *a = calloc(D, sizeof *a), *h1 = calloc(H, sizeof *h1), *h3 = calloc(H, sizeof *h3);
    double *sc = calloc(s->seq_len, sizeof *sc);
    for (int i = 0; i < D; i++) x[i] = w->token_embedding[(size_t)token * D + i];
    for (int l = 0; l < s->n_layers; l++) {
        ref_rms(xb, x, w->rms_att + (size_t)l * D, D);
        ref_mv(q, w->wq + (size_t)l * D * D, xb, D, D);
        ref_mv(k, w->wk + (size_t)l * kvd * D, xb, kvd, D);
        ref_mv(v, w->wv + (size_t)l * kvd * D, xb, kvd, D);
        /* rotary embedding, pair by pair */
        for (int i = 0; i < D; i += 2) {
            int j = i % hs;
            double th = p / pow(10000.0, (double)j / hs);
            double c = cos(th), sn = sin(th);
            double q0 = q[i], q1 = q[i + 1];
            q[i] = q0 * c - q1 * sn;
            q[i + 1] = q0 * sn + q1 * c;
            if (i < kvd) {
                double k0 = k[i], k1 = k[i + 1];
                k[i] = k0 * c - k1 * sn;
                k[i + 1] = k0 * sn + k1 * c;
            }
        }
        double *kl = r->kc + (size_t)l * s->seq_len * kvd, *vl = r->vc + (size_t)l * s->seq_len * kvd;
        memcpy(kl + (size_t)p * kvd, k, kvd * sizeof(double));
        memcpy(vl + (size_t)p * kvd, v, kvd * sizeof(double));
        for (int h = 0; h < s->n_heads; h++) {
            int kh = h / (s->n_heads / s->n_kv_heads);
            double mx = -1e300, sum = 0;
            for (int t = 0; t <= p; t++) {
                double d = 0;
                for (int i = 0; i < hs; i++) d += q[h * hs + i] * kl[(size_t)t * kvd + kh * hs + i];
                sc[t] = d / sqrt((double)hs);
                if (sc[t] > mx) mx = sc[t];
            }
            for (int t = 0; t <= p; t++) { sc[t] = exp(sc[t] - mx); sum += sc[t]; }
            for (int i = 0; i < hs; i++) {
                double acc = 0;
                for (int t = 0; t <= p; t++) acc += sc[t] / sum * vl[(size_t)t * kvd + kh * hs + i];
                a[h * hs + i] = acc;
            }
        }
        ref_mv(o, w->wo + (size_t)l * D * D, a, D, D);
        for (int i = 0; i < D; i++) x[i] += o[i];
        ref_rms(xb, x, w->rms_ffn + (size_t)l * D, D);
        ref_mv(h1, w->w1 + (size_t)l * H * D, xb, H, D);
        ref_mv(h3, w->w3 + (size_t)l * H * D, xb, H, D);
        for (int i = 0; i < H; i++) h1[i] = h1[i] / (1.0 + exp(-h1[i])) * h3[i];
        ref_mv(o, w->w2 + (size_t)l * D * H, h1, D, H);
        for (int i = 0; i < D; i++) x[i] += o[i];
    }
    ref_rms(xb, x, w->rms_final, D);
    ref_mv(logits, w->wcls, xb, s->vocab_size, D);
    r->pos++;
    free(x); free(xb); free(q); free(k); free(v); free(o); free(a); free(h1); free(h3); free(sc);
}

/* ---- capturing the engine's logits -------------------------------------------- */

#define MAXREC 4096
typedef struct {
    int n, vocab;
    int64_t req[MAXREC];
    int pos[MAXREC];
    float *logits[MAXREC];
} rec_t;

static void rec_cb(void *ctx, int64_t req, int pos, const float *lg, int vocab)
{
    rec_t *r = ctx;
    assert_true(r->n < MAXREC);
    r->req[r->n] = req;
    r->pos[r->n] = pos;
    r->vocab = vocab;
    r->logits[r->n] = malloc((size_t)vocab * sizeof(float));
    memcpy(r->logits[r->n], lg, (size_t)vocab * sizeof(float));
    r->n++;
}

static void rec_free(rec_t *r)
{
    for (int i = 0; i < r->n; i++) free(r->logits[i]);
    r->n = 0;
}

static const float *rec_find(const rec_t *r, int64_t req, int pos)
{
    for (int i = r->n - 1; i >= 0; i--)
        if (r->req[i] == req && r->pos[i] == pos) return r->logits[i];
    return NULL;
}

static re_shape_t small_shape(void)
{
    /* dims not multiples of 8 on purpose: kernel tails */
    re_shape_t s = { .dim = 72, .hidden_dim = 100, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                     .vocab_size = 300, .seq_len = 96, .shared_classifier = 1 };
    return s;
}

typedef struct {
    int n_req, prompt, gen;
    int varied;        /* prompt/gen lengths vary per request */
} wl_t;

static void req_lengths(const wl_t *w, int i, int *p, int *g)
{
    *p = w->prompt + (w->varied ? (i * 7) % 13 : 0);
    *g = w->gen + (w->varied ? (i * 5) % 9 : 0);
}

/* Run a workload; fills rec and returns the engine (caller destroys). */
static re_engine_t *run_engine(const re_model_t *m, re_engine_config_t cfg, const wl_t *w, rec_t *rec)
{
    cfg.on_logits = rec ? rec_cb : NULL;
    cfg.on_logits_ctx = rec;
    int err = 0;
    char msg[256];
    re_engine_t *e = re_engine_create(m, &cfg, &err, msg, sizeof msg);
    if (!e) fprintf(stderr, "create: %s\n", msg);
    assert_non_null(e);
    int32_t prompt[256];
    for (int i = 0; i < w->n_req; i++) {
        int p, g;
        req_lengths(w, i, &p, &g);
        re_workload_prompt(7, i, m->shape.vocab_size, prompt, p);
        int rc = re_engine_add(e, 100 + i, prompt, p, g, msg, sizeof msg);
        if (rc < 0) fprintf(stderr, "add: %s\n", msg);
        assert_true(rc >= 0);
    }
    assert_int_equal(re_engine_run(e), 0);
    return e;
}

static void check_against_reference(const re_model_t *m, re_engine_config_t cfg)
{
    wl_t w = { .n_req = 2, .prompt = 5, .gen = 6 };
    rec_t rec = { 0 };
    re_engine_t *e = run_engine(m, cfg, &w, &rec);
    const re_shape_t *s = &m->shape;
    double *lg = malloc((size_t)s->vocab_size * sizeof *lg);
    int checked = 0;
    for (int i = 0; i < w.n_req; i++) {
        int n;
        const int32_t *gen = re_engine_tokens(e, i, &n);
        int p = re_engine_prompt_len(e, i);
        int32_t prompt[64];
        re_workload_prompt(7, i, s->vocab_size, prompt, p);
        ref_t r;
        ref_init(&r, m);
        for (int pos = 0; pos < p + n - 1; pos++) {
            int tok = pos < p ? prompt[pos] : gen[pos - p];
            ref_step(&r, tok, lg);
            if (pos < p - 1) continue;
            const float *got = rec_find(&rec, 100 + i, pos);
            assert_non_null(got);
            double mx = 0, err = 0;
            for (int v = 0; v < s->vocab_size; v++) {
                if (fabs(lg[v]) > mx) mx = fabs(lg[v]);
                if (fabs(lg[v] - got[v]) > err) err = fabs(lg[v] - got[v]);
            }
            if (err > 1e-4 * mx) fprintf(stderr, "req %d pos %d: err %g max %g\n", i, pos, err, mx);
            assert_true(err <= 1e-4 * mx);
            /* greedy: the engine's token is the argmax of its own logits */
            assert_int_equal(gen[pos - p + 1], re_argmax(got, s->vocab_size));
            checked++;
        }
        ref_free(&r);
    }
    assert_int_equal(checked, 2 * 6);
    free(lg);
    rec_free(&rec);
    re_engine_destroy(e);
}

/* ---- tests ---------------------------------------------------------------------- */

static void test_logits_match_reference_on_synthetic_model(void **state)
{
    (void)state;
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 1, msg, sizeof msg), 0);
    re_engine_config_t cfg = re_engine_config_default();
    check_against_reference(&m, cfg);
    cfg.block_size = 3;
    cfg.threads = 2;
    cfg.strict_threads = 1;
    check_against_reference(&m, cfg);
    re_model_free(&m);
}

static void test_logits_match_reference_on_written_checkpoint(void **state)
{
    (void)state;
    re_model_t src, m;
    re_shape_t s = small_shape();
    s.shared_classifier = 0;       /* exercise the separate classifier */
    s.n_kv_heads = 1;              /* and multi-query attention */
    char msg[256], path[] = "/tmp/test_engine_ckpt_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(re_model_synthetic(&src, &s, 2, msg, sizeof msg), 0);
    assert_int_equal(re_model_save(&src, path), 0);
    assert_int_equal(re_model_load(&m, path, msg, sizeof msg), 0);
    assert_int_equal(m.shape.shared_classifier, 0);
    assert_int_equal(m.shape.n_kv_heads, 1);
    assert_memory_equal(m.w.wcls, src.w.wcls, (size_t)s.vocab_size * s.dim * sizeof(float));
    assert_memory_equal(m.w.w2, src.w.w2, (size_t)s.n_layers * s.dim * s.hidden_dim * sizeof(float));
    check_against_reference(&m, re_engine_config_default());
    re_model_free(&m);
    re_model_free(&src);
    unlink(path);
}

/* A checkpoint read into 2 MiB-page memory, into 4 KiB pages and mapped as
 * a file holds the same weights, and gives the same logits bit for bit (the
 * anonymous copies start 2 MiB aligned, the file mapping 28 bytes past a
 * page: alignment must not change a sum). */
static void test_checkpoint_in_every_weight_memory_gives_the_same_logits(void **state)
{
    (void)state;
    re_model_t src, m[3];
    re_shape_t s = small_shape();
    char msg[256], path[] = "/tmp/test_engine_mem_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(re_model_synthetic_mem(&src, &s, 4, RE_MEM_SMALL, msg, sizeof msg), 0);
    assert_int_equal(src.mem_kind, RE_MEM_SMALL);
    assert_int_equal(re_model_save(&src, path), 0);
    const re_mem_t kinds[3] = { RE_MEM_HUGE, RE_MEM_SMALL, RE_MEM_FILE };
    rec_t rec[3] = { { 0 } };
    wl_t w = { .n_req = 3, .prompt = 4, .gen = 7, .varied = 1 };
    re_engine_config_t cfg = re_engine_config_default();
    cfg.max_batch = 2;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(re_model_load_mem(&m[i], path, kinds[i], msg, sizeof msg), 0);
        assert_int_equal(m[i].mem_kind, kinds[i]);
        assert_string_equal(re_mem_name(kinds[i]), i == 0 ? "huge" : i == 1 ? "small" : "mmap");
        assert_int_equal(re_mem_parse(re_mem_name(kinds[i])), (int)kinds[i]);
        if (kinds[i] != RE_MEM_FILE)
            assert_int_equal((uintptr_t)m[i].w.token_embedding % ((uintptr_t)2 << 20), 0);
        assert_memory_equal(m[i].w.token_embedding, src.w.token_embedding, re_weight_bytes(&s));
        long long hb = re_model_huge_bytes(&m[i]);   /* whatever the kernel granted */
        assert_true(hb >= 0 && hb <= (long long)m[i].mem_bytes);
        if (kinds[i] == RE_MEM_SMALL) assert_int_equal(hb, 0);
        re_engine_destroy(run_engine(&m[i], cfg, &w, &rec[i]));
    }
    assert_int_equal(re_mem_parse("giant"), -1);
    assert_true(rec[0].n > 0);
    for (int i = 1; i < 3; i++) {
        assert_int_equal(rec[i].n, rec[0].n);
        for (int k = 0; k < rec[0].n; k++) {
            const float *a = rec_find(&rec[i], rec[0].req[k], rec[0].pos[k]);
            assert_non_null(a);
            assert_memory_equal(a, rec[0].logits[k], (size_t)s.vocab_size * sizeof(float));
        }
    }
    /* synthetic weights cannot be a file mapping */
    re_model_t bad;
    assert_int_equal(re_model_synthetic_mem(&bad, &s, 4, RE_MEM_FILE, msg, sizeof msg), PSC_EINVAL);
    for (int i = 0; i < 3; i++) { rec_free(&rec[i]); re_model_free(&m[i]); }
    re_model_free(&src);
    unlink(path);
}

/* dim 2, one head, hidden 2, vocab 2, one layer; weights chosen so that every
 * value can be followed by hand. Tokens: 0 then 1. */
static void test_tiny_model_logits_computed_by_hand(void **state)
{
    (void)state;
    re_shape_t s = { .dim = 2, .hidden_dim = 2, .n_layers = 1, .n_heads = 1, .n_kv_heads = 1,
                     .vocab_size = 2, .seq_len = 4, .shared_classifier = 1 };
    re_model_t m;
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 3, msg, sizeof msg), 0);
    float *emb = (float *)m.w.token_embedding;
    emb[0] = 1; emb[1] = 1;      /* token 0 = (1, 1) */
    emb[2] = 1; emb[3] = -1;     /* token 1 = (1, -1) */
    float *ra = (float *)m.w.rms_att, *rf = (float *)m.w.rms_ffn, *rn = (float *)m.w.rms_final;
    ra[0] = ra[1] = rf[0] = rf[1] = rn[0] = rn[1] = 1;
    float *wq = (float *)m.w.wq, *wk = (float *)m.w.wk, *wv = (float *)m.w.wv, *wo = (float *)m.w.wo;
    float *w1 = (float *)m.w.w1, *w2 = (float *)m.w.w2, *w3 = (float *)m.w.w3;
    memset(wq, 0, 4 * sizeof(float));              /* q = 0: every score 0, uniform attention */
    memset(wk, 0, 4 * sizeof(float));
    wv[0] = 1; wv[1] = 0; wv[2] = 0; wv[3] = 1;    /* v = identity */
    wo[0] = 1; wo[1] = 0; wo[2] = 0; wo[3] = 1;    /* o = identity */
    w1[0] = 1; w1[1] = 0; w1[2] = 0; w1[3] = 1;    /* gate = identity */
    w3[0] = 2; w3[1] = 0; w3[2] = 0; w3[3] = 0;    /* up = (2 x0, 0) */
    w2[0] = 1; w2[1] = 0; w2[2] = 0; w2[3] = 1;    /* down = identity */

    /* By hand, eps = 1e-5, rms(v) = v / sqrt(mean(v^2) + eps), silu(z) = z / (1 + e^-z):
     * pos 0, token 0 = (1, 1):
     *   xb = (1,1) / sqrt(1 + eps) = (a, a), a = 0.99999500;
     *   one position: attention = v0 = xb; x = (1 + a, 1 + a) = (1.99999500, 1.99999500)
     *   xb = x / sqrt(x0^2 + eps) = (0.99999875, 0.99999875)
     *   h0 = silu(0.99999875) * 2 * 0.99999875 = 0.73105742 * 1.9999975 = 1.46211301, h1 = 0
     *   x = (1.99999500 + 1.46211301, 1.99999500) = (3.46210801, 1.99999500)
     *   final norm: mean sq = (11.98619 + 3.99998) / 2 = 7.99309 -> xn = (1.22456855, 0.70741033)
     *   logits = (xn0 + xn1, xn0 - xn1) = (1.93197888, 0.51715822)
     * pos 1, token 1 = (1, -1):
     *   xb = (a, -a) = v1; q = 0 so both scores are 0: attention = (v0 + v1) / 2 = (a, 0)
     *   x = (1 + a, -1) = (1.99999500, -1); mean sq = 2.49999 -> xb = (1.26490790, -0.63245553)
     *   h0 = silu(1.26490790) * 2 * 1.26490790 = 0.98646350 * 2.52981580 = 2.49557094
     *   x = (4.49556594, -1); mean sq = 10.6050 -> xn = (1.38047222, -0.30707418)
     *   logits = (1.07339804, 1.68754640) */
    const double want[2][2] = { { 1.93197888, 0.51715822 }, { 1.07339804, 1.68754640 } };
    rec_t rec = { 0 };
    re_engine_config_t cfg = re_engine_config_default();
    cfg.on_logits = rec_cb;
    cfg.on_logits_ctx = &rec;
    int err;
    re_engine_t *e = re_engine_create(&m, &cfg, &err, msg, sizeof msg);
    assert_non_null(e);
    int32_t p0[1] = { 0 }, p01[2] = { 0, 1 };
    assert_true(re_engine_add(e, 0, p0, 1, 1, msg, sizeof msg) >= 0);
    assert_true(re_engine_add(e, 1, p01, 2, 1, msg, sizeof msg) >= 0);
    assert_int_equal(re_engine_run(e), 0);
    const float *l0 = rec_find(&rec, 0, 0), *l1 = rec_find(&rec, 1, 1);
    assert_non_null(l0);
    assert_non_null(l1);
    for (int v = 0; v < 2; v++) {
        if (fabs(l0[v] - want[0][v]) > 2e-4 || fabs(l1[v] - want[1][v]) > 2e-4)
            fprintf(stderr, "tiny: got (%.6f %.6f) (%.6f %.6f)\n", l0[0], l0[1], l1[0], l1[1]);
        assert_true(fabs(l0[v] - want[0][v]) <= 2e-4);
        assert_true(fabs(l1[v] - want[1][v]) <= 2e-4);
    }
    rec_free(&rec);
    re_engine_destroy(e);
    re_model_free(&m);
}

/* Every (request, position) of `b` has logits bit-identical to those in `a`. */
static void assert_same_logits(const rec_t *a, const rec_t *b)
{
    assert_true(b->n > 0);
    int distinct = 0;
    for (int i = 0; i < b->n; i++) {
        const float *x = rec_find(a, b->req[i], b->pos[i]);
        assert_non_null(x);
        if (memcmp(x, b->logits[i], (size_t)b->vocab * sizeof(float)) != 0)
            fprintf(stderr, "logits differ: req %lld pos %d\n", (long long)b->req[i], b->pos[i]);
        assert_memory_equal(x, b->logits[i], (size_t)b->vocab * sizeof(float));
        distinct++;
    }
    assert_true(distinct > 0);
}

static void test_logits_bit_identical_across_batch_block_threads_alloc(void **state)
{
    (void)state;
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 4, msg, sizeof msg), 0);
    wl_t w = { .n_req = 7, .prompt = 6, .gen = 10, .varied = 1 };

    re_engine_config_t base = re_engine_config_default();
    base.max_batch = 1;               /* each request alone */
    rec_t ra = { 0 };
    re_engine_t *e = run_engine(&m, base, &w, &ra);
    re_engine_destroy(e);

    struct { int batch, bs, threads, mode, batch_tokens; } v[] = {
        { 4, 16, 1, RE_ALLOC_POOL, 2048 },
        { 8, 1, 1, RE_ALLOC_MALLOC, 2048 },
        { 7, 5, 2, RE_ALLOC_ARENA, 2048 },
        { 3, 64, 3, RE_ALLOC_POOL, 8 },
        { 8, 7, 2, RE_ALLOC_MALLOC, 20 },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        re_engine_config_t c = re_engine_config_default();
        c.max_batch = v[i].batch;
        c.block_size = v[i].bs;
        c.threads = v[i].threads;
        c.alloc.mode = (re_alloc_mode_t)v[i].mode;
        c.max_batch_tokens = v[i].batch_tokens;
        c.strict_threads = 1;       /* every thread really computes its share */
        rec_t rb = { 0 };
        e = run_engine(&m, c, &w, &rb);
        re_engine_stats_t st;
        re_engine_stats(e, &st);
        if (v[i].batch > 1) assert_true(st.max_running > 1);   /* really batched */
        for (int t = 0; v[i].threads > 1 && t < v[i].threads; t++)
            assert_true(re_engine_thread_chunks(e, t) > 0);
        assert_same_logits(&ra, &rb);
        assert_int_equal(rb.n, ra.n);
        rec_free(&rb);
        re_engine_destroy(e);
    }
    rec_free(&ra);
    re_model_free(&m);
}

static void test_preemption_recomputes_with_identical_logits_and_tokens(void **state)
{
    (void)state;
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 5, msg, sizeof msg), 0);
    wl_t w = { .n_req = 6, .prompt = 8, .gen = 30, .varied = 1 };
    for (int sampled = 0; sampled < 2; sampled++) {
        re_engine_config_t base = re_engine_config_default();
        base.max_batch = 1;
        if (sampled) { base.temperature = 0.9f; base.top_p = 0.9f; base.seed = 11; }
        rec_t ra = { 0 };
        re_engine_t *ea = run_engine(&m, base, &w, &ra);

        re_engine_config_t c = base;
        c.max_batch = 6;
        c.block_size = 4;
        c.kv_blocks = 14;     /* 56 positions for 6 requests of up to ~55: must preempt */
        rec_t rb = { 0 };
        re_engine_t *eb = run_engine(&m, c, &w, &rb);
        re_engine_stats_t st;
        re_engine_stats(eb, &st);
        assert_true(st.preemptions > 0);
        assert_same_logits(&ra, &rb);
        for (int i = 0; i < w.n_req; i++) {
            int na, nb;
            const int32_t *ta = re_engine_tokens(ea, i, &na), *tb = re_engine_tokens(eb, i, &nb);
            assert_int_equal(na, nb);
            assert_memory_equal(ta, tb, (size_t)na * sizeof(int32_t));
        }
        kvb_stats_t ks;
        kvb_stats(re_engine_blockpool(eb), &ks);
        assert_int_equal(ks.blocks_in_use, 0);     /* finished requests gave everything back */
        assert_true(ks.n_exhausted > 0);
        rec_free(&ra);
        rec_free(&rb);
        re_engine_destroy(ea);
        re_engine_destroy(eb);
    }
    re_model_free(&m);
}

static void test_different_prompts_give_different_tokens(void **state)
{
    (void)state;
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 6, msg, sizeof msg), 0);
    wl_t w = { .n_req = 4, .prompt = 6, .gen = 12 };
    re_engine_t *e = run_engine(&m, re_engine_config_default(), &w, NULL);
    int differ = 0;
    for (int i = 1; i < w.n_req; i++) {
        int n0, n1;
        const int32_t *t0 = re_engine_tokens(e, 0, &n0), *t1 = re_engine_tokens(e, i, &n1);
        assert_int_equal(n0, 12);
        assert_int_equal(n1, 12);
        if (memcmp(t0, t1, 12 * sizeof(int32_t)) != 0) differ++;
    }
    assert_int_equal(differ, w.n_req - 1);
    re_engine_destroy(e);
    re_model_free(&m);
}

/* Counting allocators: the backing store of the buffer pool and the block
 * pool's bookkeeping. */
static long n_backing, n_meta;
static void *count_alloc(void *ctx, size_t bytes, size_t align)
{
    (void)ctx;
    n_backing++;
    void *p = NULL;
    return posix_memalign(&p, align, bytes) == 0 ? p : NULL;
}
static void count_free(void *ctx, void *p, size_t bytes) { (void)ctx; (void)bytes; n_backing++; free(p); }
static void *meta_alloc(void *ctx, size_t n) { (void)ctx; n_meta++; return malloc(n); }
static void meta_free(void *ctx, void *p) { (void)ctx; n_meta++; free(p); }

static void test_steady_state_decode_makes_no_allocations_in_pool_mode(void **state)
{
    (void)state;
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 8, msg, sizeof msg), 0);
    re_engine_config_t c = re_engine_config_default();
    c.max_batch = 4;
    c.block_size = 4;    /* new blocks during decode, too */
    c.alloc.backing = (bp_allocator_t){ count_alloc, count_free, NULL };
    c.kv_meta = (kvb_alloc_t){ meta_alloc, meta_free, NULL };
    int err;
    re_engine_t *e = re_engine_create(&m, &c, &err, msg, sizeof msg);
    assert_non_null(e);
    int32_t prompt[16];
    for (int i = 0; i < 4; i++) {
        re_workload_prompt(9, i, s.vocab_size, prompt, 10);
        assert_true(re_engine_add(e, i, prompt, 10, 40, msg, sizeof msg) >= 0);
    }
    /* prefill + 4 warm-up decode steps */
    for (int i = 0; i < 5; i++) assert_int_equal(re_engine_step(e), 1);
    re_engine_stats_t st;
    re_engine_stats(e, &st);
    assert_int_equal(st.prefill_steps, 1);
    long b0 = n_backing, m0 = n_meta;
    bp_stats_t bs0, bs1;
    bp_stats(re_engine_bufpool(e), &bs0);
    for (int i = 0; i < 30; i++) assert_int_equal(re_engine_step(e), 1);
    re_engine_stats(e, &st);
    assert_int_equal(st.decode_steps, 34);
    assert_int_equal(n_backing, b0);
    assert_int_equal(n_meta, m0);
    bp_stats(re_engine_bufpool(e), &bs1);
    assert_int_equal(bs1.misses, bs0.misses);
    assert_true(bs1.hits > bs0.hits);
    assert_int_equal(bp_check(re_engine_bufpool(e)), 0);
    /* block fill is reported: each request's blocks hold exactly its positions */
    for (int i = 0; i < 4; i++) {
        int32_t ids[64];
        int nb = kvb_blocks_for(re_engine_blockpool(e), i, ids, 64);
        int n, used = 0;
        re_engine_tokens(e, i, &n);
        for (int b = 0; b < nb; b++) {
            kvb_block_t blk;
            assert_int_equal(kvb_block_get(re_engine_blockpool(e), ids[b], &blk), 0);
            used += blk.n_used;
        }
        assert_int_equal(used, 10 + n - 1);
    }
    assert_int_equal(re_engine_run(e), 0);
    re_engine_stats(e, &st);
    assert_true(fabs(st.weight_passes_per_step - 1.0) < 1e-12);
    re_engine_destroy(e);
    re_model_free(&m);
}

static void test_alloc_modes_make_the_same_logical_acquires(void **state)
{
    (void)state;
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 10, msg, sizeof msg), 0);
    wl_t w = { .n_req = 3, .prompt = 5, .gen = 5 };
    re_alloc_stats_t as[3];
    for (int mode = 0; mode < 3; mode++) {
        re_engine_config_t c = re_engine_config_default();
        c.alloc.mode = (re_alloc_mode_t)mode;
        re_engine_t *e = run_engine(&m, c, &w, NULL);
        re_engine_stats_t st;
        re_engine_stats(e, &st);
        as[mode] = st.alloc;
        assert_int_equal(st.alloc.acquires, st.alloc.releases);
        assert_true(st.alloc.acquires > 0);
        if (mode == RE_ALLOC_POOL) assert_non_null(re_engine_bufpool(e));
        else assert_null(re_engine_bufpool(e));
        re_engine_destroy(e);
    }
    assert_int_equal(as[0].acquires, as[1].acquires);
    assert_int_equal(as[0].acquires, as[2].acquires);
    assert_int_equal(as[0].peak_live_bytes, as[1].peak_live_bytes);
    assert_int_equal(as[0].peak_live_bytes, as[2].peak_live_bytes);
    re_model_free(&m);
}

static int write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(p, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static void test_bad_checkpoints_are_rejected_with_a_reason(void **state)
{
    (void)state;
    char path[] = "/tmp/test_engine_bad_XXXXXX", msg[512];
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    re_model_t m;
    /* shorter than the header */
    assert_int_equal(write_file(path, "abc", 3), 0);
    assert_int_equal(re_model_load(&m, path, msg, sizeof msg), PSC_ETRUNC);
    assert_non_null(strstr(msg, path));
    assert_non_null(strstr(msg, "header"));
    /* impossible shapes */
    int32_t h[7] = { 10, 20, 1, 3, 1, 50, 8 };          /* dim 10 not a multiple of 3 heads */
    assert_int_equal(write_file(path, h, sizeof h), 0);
    assert_int_equal(re_model_load(&m, path, msg, sizeof msg), PSC_ECORRUPT);
    assert_non_null(strstr(msg, "heads"));
    int32_t h2[7] = { 8, 20, 1, 2, 4, 50, 8 };          /* kv_heads > heads */
    assert_int_equal(write_file(path, h2, sizeof h2), 0);
    assert_int_equal(re_model_load(&m, path, msg, sizeof msg), PSC_ECORRUPT);
    int32_t h3[7] = { 8, 20, 0, 2, 2, 50, 8 };          /* zero layers */
    assert_int_equal(write_file(path, h3, sizeof h3), 0);
    assert_int_equal(re_model_load(&m, path, msg, sizeof msg), PSC_ECORRUPT);
    /* a good header with the weights cut short */
    int32_t h4[7] = { 8, 20, 1, 2, 2, 50, 8 };
    char buf[28 + 400];
    memset(buf, 0, sizeof buf);
    memcpy(buf, h4, sizeof h4);
    assert_int_equal(write_file(path, buf, sizeof buf), 0);
    assert_int_equal(re_model_load(&m, path, msg, sizeof msg), PSC_ETRUNC);
    assert_non_null(strstr(msg, "truncated"));
    /* missing file */
    assert_int_equal(re_model_load(&m, "/nonexistent/x.bin", msg, sizeof msg), PSC_EIO);
    unlink(path);
}

static void test_bad_shapes_and_configs_are_rejected(void **state)
{
    (void)state;
    char msg[256];
    re_shape_t s = re_shape_default();
    assert_int_equal(re_shape_parse("dim=100,heads=3", &s, msg, sizeof msg), PSC_EINVAL);
    s = re_shape_default();
    assert_int_equal(re_shape_parse("dim=288,kv_heads=4", &s, msg, sizeof msg), PSC_EINVAL);
    s = re_shape_default();
    assert_int_equal(re_shape_parse("bogus=1", &s, msg, sizeof msg), PSC_EINVAL);
    assert_non_null(strstr(msg, "bogus"));
    s = re_shape_default();
    assert_int_equal(re_shape_parse("dim=abc", &s, msg, sizeof msg), PSC_EINVAL);
    s = re_shape_default();
    assert_int_equal(re_shape_parse("dim=256,layers=4,heads=8,kv_heads=4,hidden=768,vocab=8000,seq=1024",
                                    &s, msg, sizeof msg), 0);
    assert_int_equal(s.seq_len, 1024);
    assert_int_equal(s.n_kv_heads, 4);

    re_model_t m;
    s = small_shape();
    assert_int_equal(re_model_synthetic(&m, &s, 1, msg, sizeof msg), 0);
    re_engine_config_t c = re_engine_config_default();
    int err = 0;
    c.max_batch = 0;
    assert_null(re_engine_create(&m, &c, &err, msg, sizeof msg));
    assert_int_equal(err, PSC_EINVAL);
    c = re_engine_config_default();
    c.block_size = 0;
    assert_null(re_engine_create(&m, &c, &err, msg, sizeof msg));
    c = re_engine_config_default();
    c.kv_blocks = 2;
    c.block_size = 4;
    re_engine_t *e = re_engine_create(&m, &c, &err, msg, sizeof msg);
    assert_non_null(e);
    int32_t p[100] = { 0 };
    assert_int_equal(re_engine_add(e, 1, p, 5, 10, msg, sizeof msg), PSC_EINVAL);   /* 14 positions > 8 */
    assert_non_null(strstr(msg, "KV blocks"));
    assert_int_equal(re_engine_add(e, 1, p, 90, 10, msg, sizeof msg), PSC_EINVAL);  /* > context */
    assert_int_equal(re_engine_add(e, 1, p, 3, 2, msg, sizeof msg), 0);
    assert_int_equal(re_engine_add(e, 1, p, 3, 2, msg, sizeof msg), PSC_EINVAL);    /* same id */
    p[0] = 5000;
    assert_int_equal(re_engine_add(e, 2, p, 3, 2, msg, sizeof msg), PSC_EINVAL);    /* bad token */
    re_engine_destroy(e);
    re_model_free(&m);
}

static void test_sampler_is_keyed_by_request_and_position(void **state)
{
    (void)state;
    re_sampler_t a;
    float lg[50];
    for (int i = 0; i < 50; i++) lg[i] = (float)((i * 37) % 11) * 0.3f;
    assert_int_equal(re_sampler_init(&a, 50, 1.0f, 0.9f, 3), 0);
    int t1 = re_sample(&a, lg, 5, 17), t2 = re_sample(&a, lg, 9, 17);
    assert_int_equal(re_sample(&a, lg, 5, 17), t1);   /* same key, same token */
    assert_int_equal(re_sample(&a, lg, 9, 17), t2);
    int seen[50] = { 0 }, distinct = 0;
    for (int pos = 0; pos < 200; pos++) {
        int t = re_sample(&a, lg, 1, pos);
        assert_true(t >= 0 && t < 50);
        if (!seen[t]++) distinct++;
    }
    assert_true(distinct > 3);                        /* it does sample */
    re_sampler_free(&a);
    assert_int_equal(re_sampler_init(&a, 50, 0.0f, 1.0f, 3), 0);
    assert_int_equal(re_sample(&a, lg, 1, 1), re_argmax(lg, 50));
    re_sampler_free(&a);
}

/* ---- user prompts ----------------------------------------------------------------- */

/* A llama2.c tokenizer file: max_token_length, then (score, length, bytes)
 * per token. */
static void write_tokenizer(const char *path, const char *const *pieces, const float *scores, int n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    int32_t maxlen = 0;
    for (int i = 0; i < n; i++)
        if ((int32_t)strlen(pieces[i]) > maxlen) maxlen = (int32_t)strlen(pieces[i]);
    fwrite(&maxlen, sizeof maxlen, 1, f);
    for (int i = 0; i < n; i++) {
        int32_t len = (int32_t)strlen(pieces[i]);
        fwrite(&scores[i], sizeof scores[i], 1, f);
        fwrite(&len, sizeof len, 1, f);
        fwrite(pieces[i], 1, (size_t)len, f);
    }
    fclose(f);
}

/* llama2.c's layout: unk, BOS, EOS, the 256 byte tokens at byte + 3, then
 * the pieces below with their merge scores. */
enum { TOK_SP = 259, TOK_A, TOK_B, TOK_C, TOK_AB, TOK_SPA, TOK_BC, TOK_ABC, TOK_E_ACUTE,
       TOK_SPAB, TOK_AA, TOK_V };
static const struct { const char *piece; float score; } tok_extra[] = {
    { " ", -1 }, { "a", -2 }, { "b", -3 }, { "c", -4 }, { "ab", -5 }, { " a", -6 },
    { "bc", -1 }, { "abc", -7 }, { "\xC3\xA9", -8 }, { " ab", -9 }, { "aa", -2 },
};

static re_tok_t *load_test_tokenizer(char *path)
{
    static char bytes[256][8];
    const char *pieces[TOK_V];
    float scores[TOK_V];
    pieces[0] = "<unk>"; pieces[1] = "\n<s>\n"; pieces[2] = "\n</s>\n";
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof bytes[b], "<0x%02X>", b);
        pieces[3 + b] = bytes[b];
    }
    for (int i = 0; i < 3 + 256; i++) scores[i] = 0.0f;
    for (int i = 0; i < TOK_V - TOK_SP; i++) {
        pieces[TOK_SP + i] = tok_extra[i].piece;
        scores[TOK_SP + i] = tok_extra[i].score;
    }
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    write_tokenizer(path, pieces, scores, TOK_V);
    char msg[256];
    re_tok_t *t = re_tok_load(path, TOK_V, msg, sizeof msg);
    if (!t) fprintf(stderr, "%s\n", msg);
    assert_non_null(t);
    return t;
}

static void expect_encoding(const re_tok_t *t, const char *text, int bos, int eos,
                            const int32_t *want, int n_want)
{
    int32_t out[64];
    int n = -1;
    char msg[256];
    assert_true(re_tok_encode_cap(text) <= 64);
    assert_int_equal(re_tok_encode(t, text, bos, eos, out, 64, &n, msg, sizeof msg), 0);
    if (n != n_want || memcmp(out, want, (size_t)n * sizeof *out) != 0) {
        fprintf(stderr, "encode '%s':", text);
        for (int i = 0; i < n; i++) fprintf(stderr, " %d", out[i]);
        fprintf(stderr, "\n");
    }
    assert_int_equal(n, n_want);
    assert_memory_equal(out, want, (size_t)n * sizeof *out);
}

/* Each expectation worked by hand from run.c's rules (tokenizer.h). */
static void test_tokenizer_encodes_as_llama2c_run_c(void **state)
{
    (void)state;
    char path[] = "/tmp/test_engine_tok_XXXXXX";
    re_tok_t *t = load_test_tokenizer(path);
    assert_int_equal(re_tok_lookup(t, "ab"), TOK_AB);
    assert_int_equal(re_tok_lookup(t, "zz"), -1);
    /* BOS " " a b c: "bc" (-1) beats "ab" (-5) and " a" (-6); then " a" (-6)
     * beats "abc" (-7); " abc" is no piece */
    expect_encoding(t, "abc", 1, 0, (int32_t[]){ 1, TOK_SPA, TOK_BC }, 3);
    /* BOS " " a b: "ab" (-5) before " a" (-6), then " ab" */
    expect_encoding(t, "ab", 1, 0, (int32_t[]){ 1, TOK_SPAB }, 2);
    /* equal scores merge leftmost first: " " (a a) a, and " aa" / "aaa" are no pieces */
    expect_encoding(t, "aaa", 1, 0, (int32_t[]){ 1, TOK_SP, TOK_AA, TOK_A }, 4);
    /* a two-byte code point that is a piece */
    expect_encoding(t, "\xC3\xA9", 1, 0, (int32_t[]){ 1, TOK_SP, TOK_E_ACUTE }, 3);
    /* a four-byte one that is not: its bytes, each + 3 */
    expect_encoding(t, "\xF0\x9F\x98\x80", 1, 0,
                    (int32_t[]){ 1, TOK_SP, 0xF0 + 3, 0x9F + 3, 0x98 + 3, 0x80 + 3 }, 6);
    /* a byte outside the pieces ("d"), between pieces */
    expect_encoding(t, "adb", 1, 0, (int32_t[]){ 1, TOK_SPA, 'd' + 3, TOK_B }, 4);
    /* the empty text: BOS alone, no dummy prefix */
    expect_encoding(t, "", 1, 0, (int32_t[]){ 1 }, 1);
    expect_encoding(t, "ab", 0, 1, (int32_t[]){ TOK_SPAB, 2 }, 2);
    /* too small an output */
    int32_t out[4];
    int n;
    char msg[256];
    assert_int_equal(re_tok_encode(t, "abc", 1, 0, out, 4, &n, msg, sizeof msg), PSC_ERANGE);
    /* decode drops the dummy prefix's space after BOS, as run.c prints */
    char text[32];
    assert_int_equal(re_tok_decode(t, 1, (int32_t[]){ TOK_SPA, TOK_BC }, 2, 0, text, sizeof text), 3);
    assert_string_equal(text, "abc");
    /* JSON text stays valid UTF-8: byte tokens in order make "é", a lone
     * lead byte becomes U+FFFD; quotes and control bytes are escaped */
    int32_t bytes_ok[2] = { 0xC3 + 3, 0xA9 + 3 }, bytes_bad[3] = { 0xC3 + 3, TOK_A, '"' + 3 };
    assert_int_equal(re_tok_decode(t, 0, bytes_ok, 2, 1, text, sizeof text), 2);
    assert_string_equal(text, "\xC3\xA9");
    re_tok_decode(t, 0, bytes_bad, 3, 1, text, sizeof text);
    assert_string_equal(text, "\xEF\xBF\xBD" "a\\\"");
    assert_int_equal(re_tok_decode(t, 0, (int32_t[]){ '\n' + 3 }, 1, 1, text, sizeof text), 6);
    assert_string_equal(text, "\\u000a");
    assert_int_equal(re_tok_decode(t, 0, bytes_bad, 3, 0, NULL, 0), 3);   /* raw: 3 bytes */
    /* the prompt helper: BOS first, no EOS */
    int32_t *ids;
    assert_int_equal(re_prompt_from_text(t, "ab", &ids, &n, msg, sizeof msg), 0);
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 1);
    assert_int_equal(ids[1], TOK_SPAB);
    free(ids);
    re_tok_free(t);
    unlink(path);

    /* a vocab without byte tokens: a byte it cannot encode is named */
    const char *small[] = { "<unk>", "\n<s>\n", "\n</s>\n", " ", "a" };
    const float sc[] = { 0, 0, 0, -1, -2 };
    char p2[] = "/tmp/test_engine_tok_XXXXXX";
    int fd = mkstemp(p2);
    assert_true(fd >= 0);
    close(fd);
    write_tokenizer(p2, small, sc, 5);
    t = re_tok_load(p2, 5, msg, sizeof msg);
    assert_non_null(t);
    expect_encoding(t, "a", 1, 0, (int32_t[]){ 1, 3, 4 }, 3);
    assert_int_equal(re_prompt_from_text(t, "az", &ids, &n, msg, sizeof msg), PSC_EINVAL);
    assert_null(ids);
    assert_non_null(strstr(msg, "0x7A"));
    re_tok_free(t);
    unlink(p2);
}

static void test_prompt_id_lists_are_parsed_and_checked_against_the_vocab(void **state)
{
    (void)state;
    int32_t *ids;
    int n;
    char msg[256];
    assert_int_equal(re_prompt_parse_ids("1,2, 3 ,299", 300, &ids, &n, msg, sizeof msg), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(ids, ((int32_t[]){ 1, 2, 3, 299 }), 4 * sizeof(int32_t));
    free(ids);
    assert_int_equal(re_prompt_parse_ids("7", 300, &ids, &n, msg, sizeof msg), 0);
    assert_int_equal(n, 1);
    assert_int_equal(ids[0], 7);
    free(ids);
    struct { const char *list, *named; } bad[] = {
        { "1,300", "300" }, { "1,2,-4", "-4" }, { "1,x,3", "'x'" }, { "", "empty" },
        { "1,,2", "item 2" }, { "1,2,", "item 3" }, { "5 6", "'5 6'" },
        { "99999999999999999999999", "item 1" }, { "3.5", "'3.5'" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        msg[0] = 0;
        assert_int_equal(re_prompt_parse_ids(bad[i].list, 300, &ids, &n, msg, sizeof msg), PSC_EINVAL);
        assert_null(ids);
        if (!strstr(msg, bad[i].named)) fprintf(stderr, "'%s': %s\n", bad[i].list, msg);
        assert_non_null(strstr(msg, bad[i].named));
        assert_null(strchr(msg, '\n'));
    }
}

/* Synthetic weights make greedy decoding repeat the prompt's last token
 * (its own logit dominates: README "refengine"), so a prompt ending in the
 * stop token stops at once, and one ending elsewhere runs to max_tokens. */
static void test_stop_token_ends_a_request_without_being_stored(void **state)
{
    (void)state;
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 12, msg, sizeof msg), 0);
    re_engine_config_t c = re_engine_config_default();
    c.stop_token = 1;
    c.block_size = 4;
    int err;
    re_engine_t *e = re_engine_create(&m, &c, &err, msg, sizeof msg);
    assert_non_null(e);
    int32_t p1[3] = { 1, 50, 1 }, p2[3] = { 1, 50, 60 };
    assert_int_equal(re_engine_add(e, 0, p1, 3, 10, msg, sizeof msg), 0);
    assert_int_equal(re_engine_add(e, 1, p2, 3, 10, msg, sizeof msg), 1);
    assert_int_equal(re_engine_run(e), 0);
    int n0, n1, np;
    re_engine_tokens(e, 0, &n0);
    const int32_t *t1 = re_engine_tokens(e, 1, &n1);
    assert_int_equal(n0, 0);
    assert_int_equal(re_engine_stopped(e, 0), 1);
    assert_int_equal(n1, 10);
    assert_int_equal(re_engine_stopped(e, 1), 0);
    for (int i = 0; i < n1; i++) assert_int_equal(t1[i], 60);
    const int32_t *pr = re_engine_prompt(e, 1, &np);
    assert_int_equal(np, 3);
    assert_memory_equal(pr, p2, sizeof p2);
    re_engine_stats_t st;
    re_engine_stats(e, &st);
    assert_int_equal(st.generated_tokens, 10);
    kvb_stats_t ks;
    kvb_stats(re_engine_blockpool(e), &ks);
    assert_int_equal(ks.blocks_in_use, 0);
    re_engine_destroy(e);
    c.stop_token = s.vocab_size;                   /* not an id */
    assert_null(re_engine_create(&m, &c, &err, msg, sizeof msg));
    assert_int_equal(err, PSC_EINVAL);
    re_model_free(&m);
}

/* Run copies of one prompt (ids 0..n-1) and return their tokens, n_req rows
 * of max_tokens (unused slots -1). */
static void run_copies(const re_model_t *m, re_engine_config_t c, const int32_t *prompt, int np,
                       int n_req, int max_tokens, int32_t *out)
{
    char msg[256];
    int err;
    c.strict_threads = 1;
    c.stop_token = 1;
    re_engine_t *e = re_engine_create(m, &c, &err, msg, sizeof msg);
    assert_non_null(e);
    for (int i = 0; i < n_req; i++) assert_int_equal(re_engine_add(e, i, prompt, np, max_tokens, msg, sizeof msg), i);
    assert_int_equal(re_engine_run(e), 0);
    for (int i = 0; i < n_req; i++) {
        int n;
        const int32_t *t = re_engine_tokens(e, i, &n);
        for (int k = 0; k < max_tokens; k++) out[i * max_tokens + k] = k < n ? t[k] : -1;
    }
    re_engine_destroy(e);
}

static void test_seeded_sampling_is_the_same_whatever_the_batching_and_threads(void **state)
{
    (void)state;
    enum { R = 5, G = 30 };
    re_model_t m;
    re_shape_t s = small_shape();
    char msg[256];
    assert_int_equal(re_model_synthetic(&m, &s, 13, msg, sizeof msg), 0);
    const int32_t prompt[4] = { 1, 40, 41, 42 };
    int32_t greedy[R * G], a[R * G], b[R * G], other[R * G];
    re_engine_config_t base = re_engine_config_default();
    run_copies(&m, base, prompt, 4, R, G, greedy);
    base.temperature = 8.0f;     /* synthetic logits are sharp: see the stop-token test */
    base.seed = 77;
    base.max_batch = 1;
    run_copies(&m, base, prompt, 4, R, G, a);
    struct { int batch, threads, bs, kv; float top_p; } v[] = {
        { 5, 2, 16, 0, 1.0f }, { 3, 1, 3, 0, 1.0f }, { 5, 3, 4, 14, 1.0f },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        re_engine_config_t c = base;
        c.max_batch = v[i].batch;
        c.threads = v[i].threads;
        c.block_size = v[i].bs;
        c.kv_blocks = v[i].kv;
        run_copies(&m, c, prompt, 4, R, G, b);
        assert_memory_equal(a, b, sizeof a);
    }
    /* it does sample: not greedy, the copies differ, many distinct tokens */
    assert_memory_not_equal(a, greedy, sizeof a);
    assert_memory_not_equal(a, a + G, G * sizeof(int32_t));
    int seen[300] = { 0 }, distinct = 0;
    for (int i = 0; i < R * G; i++)
        if (a[i] >= 0 && !seen[a[i]]++) distinct++;
    assert_true(distinct > 10);
    /* the same seed again gives the same tokens; another seed others */
    run_copies(&m, base, prompt, 4, R, G, b);
    assert_memory_equal(a, b, sizeof a);
    base.seed = 78;
    run_copies(&m, base, prompt, 4, R, G, other);
    assert_memory_not_equal(a, other, sizeof a);
    /* top-p too is batch-invariant */
    base.top_p = 0.8f;
    run_copies(&m, base, prompt, 4, R, G, a);
    base.max_batch = 5;
    base.threads = 2;
    run_copies(&m, base, prompt, 4, R, G, b);
    assert_memory_equal(a, b, sizeof a);
    re_model_free(&m);
}

static void test_workloads_are_deterministic_and_shaped_like_the_mixes(void **state)
{
    (void)state;
    re_workload_t w;
    char msg[256];
    assert_int_equal(re_workload_parse("sharegpt", &w, msg, sizeof msg), 0);
    double sp = 0, sg = 0;
    int N = 4000;
    for (int i = 0; i < N; i++) {
        int p, g, p2, g2;
        re_workload_lengths(&w, 1, i, 1 << 20, &p, &g);
        re_workload_lengths(&w, 1, i, 1 << 20, &p2, &g2);
        assert_int_equal(p, p2);
        assert_int_equal(g, g2);
        sp += p;
        sg += g;
    }
    assert_true(fabs(sp / N - 161) < 161 * 0.15);
    assert_true(fabs(sg / N - 338) < 338 * 0.15);
    assert_int_equal(re_workload_parse("alpaca", &w, msg, sizeof msg), 0);
    sp = sg = 0;
    for (int i = 0; i < N; i++) {
        int p, g;
        re_workload_lengths(&w, 1, i, 1 << 20, &p, &g);
        sp += p;
        sg += g;
    }
    assert_true(fabs(sp / N - 19) < 19 * 0.15);
    assert_true(fabs(sg / N - 58) < 58 * 0.15);
    /* clipped to the context */
    assert_int_equal(re_workload_parse("sharegpt", &w, msg, sizeof msg), 0);
    for (int i = 0; i < 500; i++) {
        int p, g;
        re_workload_lengths(&w, 2, i, 64, &p, &g);
        assert_true(p >= 1 && g >= 1 && p + g <= 64);
    }
    assert_int_equal(re_workload_parse("fixed:7,9", &w, msg, sizeof msg), 0);
    int p, g;
    re_workload_lengths(&w, 2, 0, 64, &p, &g);
    assert_int_equal(p, 7);
    assert_int_equal(g, 9);
    assert_int_equal(re_workload_parse("fixed:0,9", &w, msg, sizeof msg), PSC_EINVAL);
    assert_int_equal(re_workload_parse("fixed:7", &w, msg, sizeof msg), PSC_EINVAL);
    assert_int_equal(re_workload_parse("lmsys", &w, msg, sizeof msg), PSC_EINVAL);
}

/* The recipe kernels.c documents, written out plainly: 8 lanes, lane l sums
 * j = l (mod 8) with fused multiply-adds, lanes summed as
 * ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then the tail with fmaf. */
static float recipe_dot(const float *w, const float *x, int n)
{
    float l[8] = { 0 };
    int j = 0;
    for (; j + 8 <= n; j += 8)
        for (int k = 0; k < 8; k++) l[k] = fmaf(w[j + k], x[j + k], l[k]);
    float s = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    for (; j < n; j++) s = fmaf(w[j], x[j], s);
    return s;
}

static void test_kernels_follow_the_documented_reduction_order(void **state)
{
    (void)state;
    enum { D = 11, N = 77, B = 7 };
    float w[D * N], x[B * N], out[B * D];
    for (int i = 0; i < D * N; i++) w[i] = re_uniform(re_hash64(1, i, 0)) - 0.5f;
    for (int i = 0; i < B * N; i++) x[i] = re_uniform(re_hash64(2, i, 0)) * 3.0f - 1.0f;
    for (int n = 1; n <= N; n++) {
        float a = re_k_dot(w, x, n), b = recipe_dot(w, x, n);
        assert_memory_equal(&a, &b, sizeof a);
    }
    /* every batch size and row range gives each element the same bits */
    for (int bsz = 1; bsz <= B; bsz++)
        for (int r0 = 0; r0 < D; r0 += 3) {
            memset(out, 0, sizeof out);
            re_k_matmul_rows(out, x, w, bsz, N, D, r0, D);
            for (int b = 0; b < bsz; b++)
                for (int i = r0; i < D; i++) {
                    float want = recipe_dot(w + i * N, x + b * N, N);
                    assert_memory_equal(&out[b * D + i], &want, sizeof want);
                }
        }
    float sc[9];
    re_k_dot_rows(sc, x, w, N, 9, N, 0.5f);
    for (int r = 0; r < 9; r++) {
        float want = recipe_dot(w + r * N, x, N) * 0.5f;
        assert_memory_equal(&sc[r], &want, sizeof want);
    }
}

typedef struct { int *hits; size_t n; int max_tid; } tp_ctx_t;
static void tp_piece(void *ctx, size_t b, size_t e, int tid)
{
    tp_ctx_t *c = ctx;
    assert_true(b < e && e <= c->n);
    assert_true(tid >= 0 && tid <= c->max_tid);
    for (size_t i = b; i < e; i++) c->hits[i]++;
}

static void test_thread_pool_runs_every_item_exactly_once(void **state)
{
    (void)state;
    int err;
    re_tp_t *tp = re_tp_create(3, &err);
    assert_non_null(tp);
    assert_int_equal(re_tp_threads(tp), 3);
    int hits[1000];
    for (int round = 0; round < 2000; round++) {   /* many back-to-back regions */
        size_t n = 1 + (size_t)(round * 37) % 1000, grain = 1 + (size_t)round % 5;
        memset(hits, 0, sizeof hits);
        tp_ctx_t c = { hits, n, 2 };
        re_tp_run(tp, tp_piece, &c, n, grain);
        for (size_t i = 0; i < n; i++) assert_int_equal(hits[i], 1);
    }
    /* strict: chunk k on thread k % 3, whatever the load */
    re_tp_set_strict(tp, 1);
    unsigned long before[3];
    for (int t = 0; t < 3; t++) before[t] = re_tp_chunks_run(tp, t);
    for (int round = 0; round < 200; round++) {
        memset(hits, 0, sizeof hits);
        tp_ctx_t c = { hits, 999, 2 };
        re_tp_run(tp, tp_piece, &c, 999, 4);
        for (size_t i = 0; i < 999; i++) assert_int_equal(hits[i], 1);
    }
    for (int t = 0; t < 3; t++) assert_int_equal(re_tp_chunks_run(tp, t) - before[t], 200 * 4);
    re_tp_destroy(tp);
    assert_null(re_tp_create(0, &err));
    assert_int_equal(err, PSC_EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_logits_match_reference_on_synthetic_model),
        cmocka_unit_test(test_logits_match_reference_on_written_checkpoint),
        cmocka_unit_test(test_checkpoint_in_every_weight_memory_gives_the_same_logits),
        cmocka_unit_test(test_tiny_model_logits_computed_by_hand),
        cmocka_unit_test(test_logits_bit_identical_across_batch_block_threads_alloc),
        cmocka_unit_test(test_preemption_recomputes_with_identical_logits_and_tokens),
        cmocka_unit_test(test_different_prompts_give_different_tokens),
        cmocka_unit_test(test_steady_state_decode_makes_no_allocations_in_pool_mode),
        cmocka_unit_test(test_alloc_modes_make_the_same_logical_acquires),
        cmocka_unit_test(test_bad_checkpoints_are_rejected_with_a_reason),
        cmocka_unit_test(test_bad_shapes_and_configs_are_rejected),
        cmocka_unit_test(test_sampler_is_keyed_by_request_and_position),
        cmocka_unit_test(test_tokenizer_encodes_as_llama2c_run_c),
        cmocka_unit_test(test_prompt_id_lists_are_parsed_and_checked_against_the_vocab),
        cmocka_unit_test(test_stop_token_ends_a_request_without_being_stored),
        cmocka_unit_test(test_seeded_sampling_is_the_same_whatever_the_batching_and_threads),
        cmocka_unit_test(test_workloads_are_deterministic_and_shaped_like_the_mixes),
        cmocka_unit_test(test_thread_pool_runs_every_item_exactly_once),
        cmocka_unit_test(test_kernels_follow_the_documented_reduction_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
