/* tokenizer.c — llama2.c tokenizer files, decode direction only. */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct re_tok {
    int vocab_size;
    char **piece;       /* (vocab_size) NUL-terminated */
    char *bytes;        /* storage of all pieces */
};

re_tok_t *re_tok_load(const char *path, int vocab_size, char *msg, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(msg, cap, "%s: cannot open tokenizer", path);
        return NULL;
    }
    re_tok_t *t = calloc(1, sizeof *t);
    int32_t maxlen;
    long total = 0;
    if (!t || fread(&maxlen, sizeof maxlen, 1, f) != 1 || maxlen < 1 || maxlen > (1 << 16)) {
        snprintf(msg, cap, "%s: not a tokenizer file (bad header)", path);
        goto fail;
    }
    fseek(f, 0, SEEK_END);
    total = ftell(f);
    fseek(f, sizeof(int32_t), SEEK_SET);
    t->vocab_size = vocab_size;
    t->piece = calloc((size_t)vocab_size, sizeof(char *));
    t->bytes = malloc((size_t)total + (size_t)vocab_size);
    if (!t->piece || !t->bytes) {
        snprintf(msg, cap, "%s: out of memory", path);
        goto fail;
    }
    size_t used = 0;
    for (int i = 0; i < vocab_size; i++) {
        float score;
        int32_t len;
        if (fread(&score, sizeof score, 1, f) != 1 || fread(&len, sizeof len, 1, f) != 1 ||
            len < 0 || len > maxlen || used + (size_t)len + 1 > (size_t)total + (size_t)vocab_size ||
            fread(t->bytes + used, 1, (size_t)len, f) != (size_t)len) {
            snprintf(msg, cap, "%s: truncated or corrupt tokenizer at token %d of %d", path, i,
                     vocab_size);
            goto fail;
        }
        t->piece[i] = t->bytes + used;
        t->bytes[used + (size_t)len] = 0;
        used += (size_t)len + 1;
    }
    fclose(f);
    return t;
fail:
    fclose(f);
    re_tok_free(t);
    return NULL;
}

void re_tok_free(re_tok_t *t)
{
    if (!t) return;
    free(t->piece);
    free(t->bytes);
    free(t);
}

static size_t re_put(char *out, size_t cap, size_t len, const char *s, size_t n, int json)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        const char *p = esc;
        size_t k;
        if (json && (c == '"' || c == '\\')) { esc[0] = '\\'; esc[1] = (char)c; k = 2; }
        else if (json && c < 0x20) { snprintf(esc, sizeof esc, "\\u%04x", c); k = 6; }
        else { esc[0] = (char)c; k = 1; }
        for (size_t j = 0; j < k; j++, len++)
            if (len + 1 < cap) out[len] = p[j];
    }
    if (cap) out[len < cap ? len : cap - 1] = 0;
    return len;
}

size_t re_tok_decode(const re_tok_t *t, int32_t prev, const int32_t *tokens, int n, int json,
                     char *out, size_t cap)
{
    size_t len = 0;
    if (cap) out[0] = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = tokens[i];
        if (id < 0 || id >= t->vocab_size) continue;
        const char *p = t->piece[id];
        if (prev == 1 && p[0] == ' ') p++;
        unsigned int byte;
        char one;
        if (sscanf(p, "<0x%02X>", &byte) == 1 && strlen(p) == 6) {
            one = (char)byte;
            len = re_put(out, cap, len, &one, 1, json);
        } else {
            len = re_put(out, cap, len, p, strlen(p), json);
        }
        prev = id;
    }
    return len;
}
