/* eng_prompt.c — one prompt through the engine's C API, for
 * tests/integration/engine.sh to compare with `refengine --prompt-ids`.
 *
 *   eng_prompt SHAPE SEED TEMPERATURE TOP_P SAMPLE_SEED THREADS MAX_BATCH
 *              REQUESTS MAX_TOKENS ID [ID...]
 *
 * Synthetic weights from SHAPE and SEED (as --synthetic SHAPE --seed SEED),
 * REQUESTS copies of the prompt (request ids 0..REQUESTS-1), stopping at BOS
 * as refengine does with a prompt. The ids are plain argv words, read here
 * with strtol: none of refengine's option or list parsing is used. Prints
 * one line per request: "ID: T T T ..." (its generated tokens).
 * Exit 0, or 2 on a bad argument or engine error (one line on stderr).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "engine.h"
#include "model.h"

static long num(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end) {
        fprintf(stderr, "eng_prompt: bad number '%s'\n", s);
        exit(2);
    }
    return v;
}

int main(int argc, char **argv)
{
    if (argc < 11) {
        fprintf(stderr, "usage: eng_prompt SHAPE SEED TEMPERATURE TOP_P SAMPLE_SEED THREADS "
                        "MAX_BATCH REQUESTS MAX_TOKENS ID...\n");
        return 2;
    }
    char msg[512];
    re_shape_t s = re_shape_default();
    if (re_shape_parse(argv[1], &s, msg, sizeof msg)) { fprintf(stderr, "eng_prompt: %s\n", msg); return 2; }
    re_model_t m;
    if (re_model_synthetic(&m, &s, (uint64_t)num(argv[2]), msg, sizeof msg)) {
        fprintf(stderr, "eng_prompt: %s\n", msg);
        return 2;
    }
    re_engine_config_t c = re_engine_config_default();
    c.temperature = strtof(argv[3], NULL);
    c.top_p = strtof(argv[4], NULL);
    c.seed = (uint64_t)num(argv[5]);
    c.threads = (int)num(argv[6]);
    c.max_batch = (int)num(argv[7]);
    c.stop_token = 1;
    int n_req = (int)num(argv[8]), max_tokens = (int)num(argv[9]), n = argc - 10;
    int32_t *prompt = malloc((size_t)n * sizeof *prompt);
    if (!prompt) return 2;
    for (int i = 0; i < n; i++) prompt[i] = (int32_t)num(argv[10 + i]);
    int err = 0;
    re_engine_t *e = re_engine_create(&m, &c, &err, msg, sizeof msg);
    if (!e) { fprintf(stderr, "eng_prompt: %s\n", msg); return 2; }
    for (int i = 0; i < n_req; i++)
        if (re_engine_add(e, i, prompt, n, max_tokens, msg, sizeof msg) < 0) {
            fprintf(stderr, "eng_prompt: %s\n", msg);
            return 2;
        }
    if (re_engine_run(e) < 0) { fprintf(stderr, "eng_prompt: engine failed\n"); return 2; }
    for (int i = 0; i < re_engine_n_requests(e); i++) {
        int nt;
        const int32_t *t = re_engine_tokens(e, i, &nt);
        printf("%lld:", (long long)re_engine_request_id(e, i));
        for (int k = 0; k < nt; k++) printf(" %d", t[k]);
        printf("\n");
    }
    free(prompt);
    re_engine_destroy(e);
    re_model_free(&m);
    return 0;
}
