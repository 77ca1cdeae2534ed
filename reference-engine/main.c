/* main.c — refengine: the reference workload's command line.
 *
 * Parses options, builds the model, the engine and the requests (a synthetic
 * workload, or the user's --prompt / --prompt-ids), runs them and prints the
 * tokens (plain or --json) and the pools' statistics. Bad options or input:
 * one line on stderr, exit 2. Runtime failure: exit 1.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "kernels.h"
#include "model.h"
#include "poolscope/error.h"
#include "prompt.h"
#include "tokenizer.h"
#include "workload.h"

static const char usage[] =
    "usage: refengine [model] [workload] [engine] [output]\n"
    "model:\n"
    "  --synthetic SPEC        synthetic weights, SPEC = dim=288,layers=6,heads=6,kv_heads=6,\n"
    "                          hidden=768,vocab=32000,seq=256 (any subset; shared=0 for a\n"
    "                          separate classifier). The default model.\n"
    "  --checkpoint FILE.bin   a llama2.c checkpoint, read into memory backed by huge pages\n"
    "  --weights-memory M      huge (default): anonymous memory asked for 2 MiB pages;\n"
    "                          small: anonymous 4 KiB pages; mmap: map the checkpoint file\n"
    "                          itself (page-cache pages shared with other processes)\n"
    "  --save-checkpoint FILE  write the model (e.g. --synthetic) as a llama2.c checkpoint\n"
    "                          and exit\n"
    "  --tokenizer FILE        a llama2.c tokenizer: print text too (and read --prompt)\n"
    "  --seed N                synthetic weights, prompts and lengths, and sampling\n"
    "                          (default 42)\n"
    "workload (synthetic requests):\n"
    "  --workload W            fixed:P,G | sharegpt | alpaca (default fixed:16,16)\n"
    "  --requests N            number of requests (default 8; with a prompt 1)\n"
    "prompt (instead of --workload):\n"
    "  --prompt TEXT           encoded with --tokenizer as llama2.c's run.c does (BOS first)\n"
    "  --prompt-ids 1,2,3      token ids, taken as given (no BOS added)\n"
    "  --max-tokens N          tokens to generate (default: the rest of the context);\n"
    "                          generation also ends at a BOS (id 1), as in run.c.\n"
    "                          One request, or --requests N copies (ids 0..N-1)\n"
    "engine:\n"
    "  --max-batch B           running requests at once (default 8)\n"
    "  --max-batch-tokens N    prompt tokens per prefill step (default 2048)\n"
    "  --block-size N          tokens per KV block (default 16)\n"
    "  --kv-blocks N           KV blocks (K and V of block-size tokens, all layers);\n"
    "                          default: max-batch full contexts\n"
    "  --threads T             matmul/attention threads (default 1)\n"
    "  --alloc pool|malloc|arena   where transient tensors come from (default pool)\n"
    "  --pool-cap BYTES        buffer pool cap on cached bytes (KiB/MiB/GiB accepted)\n"
    "sampling:\n"
    "  --temperature X         0 = greedy (default); logits are divided by X\n"
    "  --top-p X               nucleus sampling threshold in (0,1] (default 1 = off)\n"
    "  --sample-seed N         the sampler's seed (default: --seed); a draw depends only\n"
    "                          on (seed, request id, position), not on batching or threads\n"
    "output:\n"
    "  --json                  tokens and statistics as JSON\n"
    "  --metrics FILE          the block pool's Prometheus text\n"
    "  --quiet                 no per-request output (statistics only)\n";

__attribute__((format(printf, 1, 2), noreturn)) static void die2(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "refengine: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(2);
}

static long long parse_int(const char *opt, const char *v, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        char range[96];
        snprintf(range, sizeof range, "an integer in %lld..%lld", lo, hi);
        fprintf(stderr, "refengine: bad value for %s: '%s' (want %s)\n", opt, v, range);
        exit(2);
    }
    return x;
}

static double parse_float(const char *opt, const char *v)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end) die2("bad value for %s: '%s' (want a number)", opt, v);
    return x;
}

static size_t parse_bytes(const char *opt, const char *v)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || v[0] == '-') die2("bad value for %s: '%s' (want bytes, e.g. 64MiB)", opt, v);
    unsigned long long mul = 1;
    if (!strcmp(end, "") || !strcmp(end, "B")) mul = 1;
    else if (!strcmp(end, "KiB") || !strcmp(end, "K")) mul = 1ull << 10;
    else if (!strcmp(end, "MiB") || !strcmp(end, "M")) mul = 1ull << 20;
    else if (!strcmp(end, "GiB") || !strcmp(end, "G")) mul = 1ull << 30;
    else die2("bad value for %s: '%s' (want bytes, e.g. 64MiB)", opt, v);
    if (x > (1ull << 50) / mul) die2("bad value for %s: '%s' (too large)", opt, v);
    return (size_t)(x * mul);
}

static void json_bufpool(FILE *o, bp_pool_t *bp)
{
    if (!bp) { fprintf(o, "null"); return; }
    bp_stats_t s;
    bp_stats(bp, &s);
    fprintf(o, "{\"acquires\": %" PRIu64 ", \"hits\": %" PRIu64 ", \"misses\": %" PRIu64
            ", \"hit_rate\": %.6f, \"backing_allocs\": %" PRIu64 ", \"backing_frees\": %" PRIu64
            ", \"reclaims_cached\": %" PRIu64 ", \"destroyed_over_cap\": %" PRIu64
            ", \"peak_cached_bytes\": %zu, \"peak_outstanding_bytes\": %zu"
            ", \"peak_reserved_bytes\": %zu, \"cached_bytes\": %zu, \"internal_frag\": %.6f"
            ", \"internal_frag_at_peak\": %.6f, \"max_cached_bytes\": %zu}",
            s.acquires, s.hits, s.misses, s.acquires ? (double)s.hits / (double)s.acquires : 0.0,
            s.backing_allocs, s.backing_frees, s.reclaims_cached, s.destroyed_over_cap,
            s.peak_cached_bytes, s.peak_outstanding_bytes, s.peak_reserved_bytes, s.cached_bytes,
            s.internal_frag, s.internal_frag_at_peak, s.max_cached_bytes);
}

static void json_blockpool(FILE *o, kvb_pool_t *kv)
{
    kvb_stats_t s;
    kvb_stats(kv, &s);
    fprintf(o, "{\"block_size\": %d, \"n_blocks\": %" PRId64 ", \"n_allocations\": %" PRId64
            ", \"n_frees\": %" PRId64 ", \"n_reused\": %" PRId64 ", \"n_exhausted\": %" PRId64
            ", \"n_grown\": %" PRId64 ", \"n_retired\": %" PRId64 ", \"peak_blocks_in_use\": %" PRId64
            ", \"blocks_in_use\": %" PRId64 ", \"fragmentation\": %.6f}",
            kvb_block_size(kv), s.n_blocks, s.n_allocations, s.n_frees, s.n_reused, s.n_exhausted,
            s.n_grown, s.n_retired, s.peak_blocks_in_use, s.blocks_in_use, s.fragmentation);
}

/* The text of n ids following `prev` (see re_tok_decode), malloc'd; NULL when
 * out of memory. */
static char *tok_text(const re_tok_t *tok, int32_t prev, const int32_t *ids, int n, int json)
{
    size_t need = re_tok_decode(tok, prev, ids, n, json, NULL, 0) + 1;
    char *text = malloc(need);
    if (text) re_tok_decode(tok, prev, ids, n, json, text, need);
    return text;
}

/* The prompt's text as run.c shows it: a leading BOS is not printed. */
static char *prompt_text(const re_tok_t *tok, const int32_t *ids, int n, int json)
{
    if (n > 0 && ids[0] == RE_TOK_BOS) return tok_text(tok, RE_TOK_BOS, ids + 1, n - 1, json);
    return tok_text(tok, -1, ids, n, json);
}

int main(int argc, char **argv)
{
    re_shape_t shape = re_shape_default();
    const char *checkpoint = NULL, *tokenizer = NULL, *metrics = NULL;
    const char *synthetic = NULL, *workload = "fixed:16,16", *save = NULL;
    re_mem_t wmem = RE_MEM_HUGE;
    const char *prompt_arg = NULL, *prompt_ids_arg = NULL;
    uint64_t seed = 42, sample_seed = 0;
    long long n_requests = 8, max_tokens = 0;
    int json = 0, quiet = 0, have_workload = 0, have_requests = 0, have_sample_seed = 0;
    re_engine_config_t cfg = re_engine_config_default();
    char msg[512];

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(usage, stdout); return 0; }
        if (!strcmp(a, "--json")) { json = 1; continue; }
        if (!strcmp(a, "--quiet")) { quiet = 1; continue; }
        if (strncmp(a, "--", 2) != 0)
            die2("unexpected argument '%s' (see --help)", a);
        if (i + 1 >= argc) die2("option %s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--synthetic")) synthetic = v;
        else if (!strcmp(a, "--checkpoint")) checkpoint = v;
        else if (!strcmp(a, "--save-checkpoint")) save = v;
        else if (!strcmp(a, "--weights-memory")) {
            int k = re_mem_parse(v);
            if (k < 0) die2("bad value for %s: '%s' (want huge, small or mmap)", a, v);
            wmem = (re_mem_t)k;
        }
        else if (!strcmp(a, "--tokenizer")) tokenizer = v;
        else if (!strcmp(a, "--seed")) seed = (uint64_t)parse_int(a, v, 0, LLONG_MAX);
        else if (!strcmp(a, "--sample-seed")) {
            sample_seed = (uint64_t)parse_int(a, v, 0, LLONG_MAX);
            have_sample_seed = 1;
        } else if (!strcmp(a, "--workload")) { workload = v; have_workload = 1; }
        else if (!strcmp(a, "--requests")) { n_requests = parse_int(a, v, 1, 1000000); have_requests = 1; }
        else if (!strcmp(a, "--prompt")) prompt_arg = v;
        else if (!strcmp(a, "--prompt-ids")) prompt_ids_arg = v;
        else if (!strcmp(a, "--max-tokens")) max_tokens = parse_int(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--max-batch")) cfg.max_batch = (int)parse_int(a, v, 1, 4096);
        else if (!strcmp(a, "--max-batch-tokens")) cfg.max_batch_tokens = (int)parse_int(a, v, 1, 1 << 20);
        else if (!strcmp(a, "--block-size")) cfg.block_size = (int)parse_int(a, v, 1, 65536);
        else if (!strcmp(a, "--kv-blocks")) cfg.kv_blocks = (int)parse_int(a, v, 1, 1 << 24);
        else if (!strcmp(a, "--threads")) cfg.threads = (int)parse_int(a, v, 1, 256);
        else if (!strcmp(a, "--pool-cap")) cfg.alloc.pool_cap = parse_bytes(a, v);
        else if (!strcmp(a, "--temperature")) {
            double t = parse_float(a, v);
            if (!(t >= 0.0) || t > 1e6) die2("bad value for %s: '%s' (want >= 0)", a, v);
            cfg.temperature = (float)t;
        } else if (!strcmp(a, "--top-p")) {
            double p = parse_float(a, v);
            if (!(p > 0.0 && p <= 1.0)) die2("bad value for %s: '%s' (want a number in (0, 1])", a, v);
            cfg.top_p = (float)p;
        } else if (!strcmp(a, "--alloc")) {
            int m = re_alloc_mode_parse(v);
            if (m < 0) die2("bad value for %s: '%s' (want pool, malloc or arena)", a, v);
            cfg.alloc.mode = (re_alloc_mode_t)m;
        } else if (!strcmp(a, "--metrics")) metrics = v;
        else die2("unknown option '%s' (see --help)", a);
    }
    if (checkpoint && synthetic) die2("--checkpoint and --synthetic are exclusive");
    if (wmem == RE_MEM_FILE && !checkpoint) die2("--weights-memory mmap needs --checkpoint");
    if (prompt_arg && prompt_ids_arg) die2("--prompt and --prompt-ids are exclusive");
    int prompted = prompt_arg || prompt_ids_arg;
    if (prompted && have_workload)
        die2("--workload and %s are exclusive (--max-tokens sets the length)",
             prompt_arg ? "--prompt" : "--prompt-ids");
    if (!prompted && max_tokens)
        die2("--max-tokens needs --prompt or --prompt-ids (--workload sets the lengths)");
    if (prompt_arg && !tokenizer) die2("--prompt needs --tokenizer (or give --prompt-ids)");
    if (prompted) {
        workload = "prompt";
        if (!have_requests) n_requests = 1;
        cfg.stop_token = RE_TOK_BOS;   /* run.c: BOS delimits sequences */
    }
    cfg.seed = have_sample_seed ? sample_seed : seed;

    re_workload_t wl;
    if (!prompted && re_workload_parse(workload, &wl, msg, sizeof msg)) die2("%s", msg);

    re_model_t model;
    int rc;
    if (checkpoint) {
        rc = re_model_load_mem(&model, checkpoint, wmem, msg, sizeof msg);
        if (rc == PSC_ENOMEM) { fprintf(stderr, "refengine: %s\n", msg); return 1; }
        if (rc) die2("%s", msg);
    } else {
        if (synthetic && re_shape_parse(synthetic, &shape, msg, sizeof msg)) die2("--synthetic: %s", msg);
        rc = re_model_synthetic_mem(&model, &shape, seed, wmem, msg, sizeof msg);
        if (rc == PSC_EINVAL) die2("%s", msg);
        if (rc) { fprintf(stderr, "refengine: %s\n", msg); return 1; }
    }
    if (save) {
        rc = re_model_save(&model, save);
        re_model_free(&model);
        if (rc) { fprintf(stderr, "refengine: %s: cannot write the checkpoint\n", save); return 1; }
        return 0;
    }
    const re_shape_t *s = &model.shape;
    if (s->seq_len < 2) die2("the model's context (seq=%d) is too short", s->seq_len);

    re_tok_t *tok = NULL;
    if (tokenizer) {
        tok = re_tok_load(tokenizer, s->vocab_size, msg, sizeof msg);
        if (!tok) die2("%s", msg);
    }
    if (cfg.stop_token >= s->vocab_size) cfg.stop_token = -1;   /* a vocab without a BOS */

    /* the user's prompt, checked before any work */
    int32_t *user = NULL;
    int n_user = 0;
    if (prompted) {
        rc = prompt_arg ? re_prompt_from_text(tok, prompt_arg, &user, &n_user, msg, sizeof msg)
                        : re_prompt_parse_ids(prompt_ids_arg, s->vocab_size, &user, &n_user, msg,
                                              sizeof msg);
        if (rc == PSC_ENOMEM) { fprintf(stderr, "refengine: out of memory\n"); return 1; }
        if (rc) die2("%s: %s", prompt_arg ? "--prompt" : "--prompt-ids", msg);
        if (n_user >= s->seq_len)
            die2("the prompt has %d tokens: no room to generate in the context (seq=%d)", n_user,
                 s->seq_len);
        if (!max_tokens) max_tokens = s->seq_len - n_user;
        else if (n_user + max_tokens > s->seq_len)
            die2("--max-tokens %lld: the prompt's %d tokens + %lld exceed the context (seq=%d); "
                 "at most %d", max_tokens, n_user, max_tokens, s->seq_len, s->seq_len - n_user);
    }

    int err = 0;
    re_engine_t *eng = re_engine_create(&model, &cfg, &err, msg, sizeof msg);
    if (!eng) {
        fprintf(stderr, "refengine: %s\n", msg);
        return err == PSC_EINVAL ? 2 : 1;
    }
    int32_t *prompt = malloc((size_t)s->seq_len * sizeof *prompt);
    if (!prompt) { fprintf(stderr, "refengine: out of memory\n"); return 1; }
    for (long long i = 0; i < n_requests; i++) {
        if (prompted) {
            rc = re_engine_add(eng, i, user, n_user, (int)max_tokens, msg, sizeof msg);
        } else {
            int p, g;
            re_workload_lengths(&wl, seed, i, s->seq_len, &p, &g);
            re_workload_prompt(seed, i, s->vocab_size, prompt, p);
            rc = re_engine_add(eng, i, prompt, p, g, msg, sizeof msg);
        }
        if (rc < 0) {
            fprintf(stderr, "refengine: %s\n", msg);
            free(prompt);
            free(user);
            re_engine_destroy(eng);
            re_tok_free(tok);
            re_model_free(&model);
            return rc == PSC_EINVAL ? 2 : 1;
        }
    }
    free(prompt);
    free(user);

    rc = re_engine_run(eng);
    if (rc < 0) {
        fprintf(stderr, "refengine: engine failed: %s\n", psc_strerror(rc));
        return 1;
    }

    re_engine_stats_t st;
    re_engine_stats(eng, &st);
    double ptps = st.prefill_seconds > 0 ? (double)st.prefill_tokens / st.prefill_seconds : 0.0;
    double dtps = st.decode_seconds > 0 ? (double)st.decode_tokens / st.decode_seconds : 0.0;
    int n = re_engine_n_requests(eng);
    int np0 = 0;
    const int32_t *p0 = n > 0 ? re_engine_prompt(eng, 0, &np0) : NULL;

    if (json) {
        printf("{\n  \"model\": {\"dim\": %d, \"hidden_dim\": %d, \"n_layers\": %d, \"n_heads\": %d, "
               "\"n_kv_heads\": %d, \"vocab_size\": %d, \"seq_len\": %d, \"weight_bytes\": %zu, "
               "\"weights_memory\": \"%s\", \"weights_hugetlb\": %s, \"weights_huge_page_bytes\": %lld},\n",
               s->dim, s->hidden_dim, s->n_layers, s->n_heads, s->n_kv_heads, s->vocab_size,
               s->seq_len, re_weight_bytes(s), re_mem_name(model.mem_kind),
               model.hugetlb ? "true" : "false", re_model_huge_bytes(&model));
        printf("  \"config\": {\"alloc\": \"%s\", \"max_batch\": %d, \"block_size\": %d, "
               "\"threads\": %d, \"workload\": \"%s\", \"seed\": %" PRIu64 ", \"simd\": %d, "
               "\"temperature\": %g, \"top_p\": %g, \"sample_seed\": %" PRIu64
               ", \"stop_token\": %d},\n",
               re_alloc_mode_name(cfg.alloc.mode), cfg.max_batch, cfg.block_size, cfg.threads,
               workload, seed, re_k_simd(), (double)cfg.temperature, (double)cfg.top_p, cfg.seed,
               (int)cfg.stop_token);
        if (prompted && p0) {
            printf("  \"prompt\": {\"tokens\": [");
            for (int k = 0; k < np0; k++) printf("%s%d", k ? ", " : "", p0[k]);
            printf("]");
            char *pt = tok ? prompt_text(tok, p0, np0, 1) : NULL;
            if (pt) printf(", \"text\": \"%s\"", pt);
            free(pt);
            printf("},\n");
        }
        printf("  \"requests\": [");
        for (int i = 0; i < n; i++) {
            int nt, np;
            const int32_t *t = re_engine_tokens(eng, i, &nt), *pr = re_engine_prompt(eng, i, &np);
            printf("%s\n    {\"id\": %" PRId64 ", \"prompt_len\": %d, \"max_tokens\": %d, "
                   "\"preemptions\": %d, \"stopped\": %s, \"tokens\": [", i ? "," : "",
                   re_engine_request_id(eng, i), re_engine_prompt_len(eng, i),
                   re_engine_max_tokens(eng, i), re_engine_preemptions(eng, i),
                   re_engine_stopped(eng, i) ? "true" : "false");
            for (int k = 0; k < nt; k++) printf("%s%d", k ? ", " : "", t[k]);
            printf("]");
            char *text = tok ? tok_text(tok, pr[np - 1], t, nt, 1) : NULL;
            if (text) printf(", \"text\": \"%s\"", text);
            free(text);
            printf("}");
        }
        printf("\n  ],\n  \"stats\": {\"prefill_tok_per_s\": %.3f, \"decode_tok_per_s\": %.3f, "
               "\"weight_passes_per_step\": %.6f, \"steps\": %" PRIu64 ", \"prefill_steps\": %" PRIu64
               ", \"decode_steps\": %" PRIu64 ", \"prefill_tokens\": %" PRIu64
               ", \"decode_tokens\": %" PRIu64 ", \"generated_tokens\": %" PRIu64
               ", \"preemptions\": %" PRIu64 ", \"max_running\": %d,\n",
               ptps, dtps, st.weight_passes_per_step, st.steps, st.prefill_steps, st.decode_steps,
               st.prefill_tokens, st.decode_tokens, st.generated_tokens, st.preemptions,
               st.max_running);
        printf("    \"alloc\": {\"mode\": \"%s\", \"acquires\": %" PRIu64 ", \"releases\": %" PRIu64
               ", \"peak_live_bytes\": %zu, \"arena_capacity\": %zu, \"arena_chunks_allocated\": %" PRIu64 "},\n",
               re_alloc_mode_name(cfg.alloc.mode), st.alloc.acquires, st.alloc.releases,
               st.alloc.peak_live_bytes, st.alloc.arena_capacity, st.alloc.arena_chunks_allocated);
        printf("    \"bufpool\": ");
        json_bufpool(stdout, re_engine_bufpool(eng));
        printf(",\n    \"blockpool\": ");
        json_blockpool(stdout, re_engine_blockpool(eng));
        printf("\n  }\n}\n");
    } else {
        if (!quiet && prompted && p0) {
            printf("prompt (%d tokens):", np0);
            for (int k = 0; k < np0; k++) printf(" %d", p0[k]);
            printf("\n");
            char *pt = tok ? prompt_text(tok, p0, np0, 0) : NULL;
            if (pt) printf("  text: %s\n", pt);
            free(pt);
        }
        if (!quiet)
            for (int i = 0; i < n; i++) {
                int nt, np;
                const int32_t *t = re_engine_tokens(eng, i, &nt), *pr = re_engine_prompt(eng, i, &np);
                printf("request %" PRId64 " (prompt %d, max %d%s):", re_engine_request_id(eng, i),
                       re_engine_prompt_len(eng, i), re_engine_max_tokens(eng, i),
                       re_engine_stopped(eng, i) ? ", stopped at BOS" : "");
                for (int k = 0; k < nt; k++) printf(" %d", t[k]);
                printf("\n");
                char *text = tok ? tok_text(tok, pr[np - 1], t, nt, 0) : NULL;
                if (text) printf("  text: %s\n", text);
                free(text);
            }
        printf("steps %" PRIu64 " (prefill %" PRIu64 ", decode %" PRIu64 "), preemptions %" PRIu64
               ", prefill %.1f tok/s, decode %.1f tok/s, weight passes/step %.3f, alloc %s\n",
               st.steps, st.prefill_steps, st.decode_steps, st.preemptions, ptps, dtps,
               st.weight_passes_per_step, re_alloc_mode_name(cfg.alloc.mode));
    }
    if (metrics) {
        kvb_stats_t ks;
        kvb_stats(re_engine_blockpool(eng), &ks);
        int need = kvb_stats_prometheus(&ks, NULL, NULL, 0);
        char *buf = need > 0 ? malloc((size_t)need + 1) : NULL;
        FILE *f = fopen(metrics, "w");
        if (!buf || !f) {
            fprintf(stderr, "refengine: %s: cannot write metrics\n", metrics);
            return 1;
        }
        kvb_stats_prometheus(&ks, NULL, buf, (size_t)need + 1);
        fputs(buf, f);
        fclose(f);
        free(buf);
    }
    re_tok_free(tok);
    re_engine_destroy(eng);
    re_model_free(&model);
    return 0;
}
