/* tokenizer.c — llama2.c tokenizer files: load, encode, decode.
 *
 * Encoding follows the algorithm of llama2.c's run.c (encode()), written
 * out here on its own: pieces are looked up by exact string in an index
 * sorted once at load (ties by id, so a duplicated piece resolves to its
 * lowest id); merging rescans all adjacent pairs each round and takes the
 * best score, leftmost first, so the result is the same ids run.c produces
 * for the same file and text.
 */
#include "tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"

typedef struct re_tok_index {
    const char *piece;
    int32_t id;
} re_tok_index_t;

struct re_tok {
    int vocab_size;
    int max_len;            /* the file's max_token_length */
    char **piece;           /* (vocab_size) NUL-terminated */
    float *score;           /* (vocab_size) merge priority */
    re_tok_index_t *sorted; /* (vocab_size) by (piece, id) */
    char *bytes;            /* storage of all pieces */
};

static int re_tok_index_cmp(const void *a, const void *b)
{
    const re_tok_index_t *x = a, *y = b;
    int c = strcmp(x->piece, y->piece);
    return c ? c : (x->id > y->id) - (x->id < y->id);
}

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
    t->max_len = maxlen;
    t->piece = calloc((size_t)vocab_size, sizeof(char *));
    t->score = calloc((size_t)vocab_size, sizeof(float));
    t->sorted = calloc((size_t)vocab_size, sizeof *t->sorted);
    t->bytes = malloc((size_t)total + (size_t)vocab_size);
    if (!t->piece || !t->score || !t->sorted || !t->bytes) {
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
        t->score[i] = score;
        t->bytes[used + (size_t)len] = 0;
        used += (size_t)len + 1;
        t->sorted[i].piece = t->piece[i];
        t->sorted[i].id = i;
    }
    fclose(f);
    qsort(t->sorted, (size_t)vocab_size, sizeof *t->sorted, re_tok_index_cmp);
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
    free(t->score);
    free(t->sorted);
    free(t->bytes);
    free(t);
}

int re_tok_lookup(const re_tok_t *t, const char *piece)
{
    /* the first index whose piece is >= `piece`: the lowest id among equals */
    size_t lo = 0, hi = (size_t)t->vocab_size;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(t->sorted[mid].piece, piece) < 0) lo = mid + 1;
        else hi = mid;
    }
    if (lo < (size_t)t->vocab_size && !strcmp(t->sorted[lo].piece, piece)) return t->sorted[lo].id;
    return -1;
}

size_t re_tok_encode_cap(const char *text) { return strlen(text) + 3; }

int re_tok_encode(const re_tok_t *t, const char *text, int bos, int eos, int32_t *out,
                  size_t cap, int *n, char *msg, size_t mcap)
{
    *n = 0;
    if (cap < re_tok_encode_cap(text)) return PSC_ERANGE;
    size_t k = 0;
    if (bos) out[k++] = RE_TOK_BOS;
    if (text[0] != '\0') {
        int sp = re_tok_lookup(t, " ");
        if (sp >= 0) out[k++] = sp;
    }
    /* code points: a lead byte and up to 3 continuation bytes (10xxxxxx) */
    char cp[5];
    const unsigned char *c = (const unsigned char *)text;
    while (*c) {
        size_t len = 1;
        while (len < 4 && (c[len] & 0xC0) == 0x80) len++;
        memcpy(cp, c, len);
        cp[len] = 0;
        int id = re_tok_lookup(t, cp);
        if (id >= 0) {
            out[k++] = id;
        } else {
            for (size_t i = 0; i < len; i++) {
                int b = c[i] + 3;
                if (b >= t->vocab_size) {
                    if (msg) snprintf(msg, mcap, "byte 0x%02X at offset %zu of the text has no token "
                                      "(vocab %d has no <0x%02X>)", c[i],
                                      (size_t)((const char *)c + i - text), t->vocab_size, c[i]);
                    return PSC_EINVAL;
                }
                out[k++] = b;
            }
        }
        c += len;
    }
    /* merges: the best-scoring pair, leftmost on ties, until none is a piece */
    char *buf = malloc((size_t)t->max_len * 2 + 1);
    if (!buf) return PSC_ENOMEM;
    for (;;) {
        float best = -1e10f;   /* run.c's floor: a lower score never merges */
        int best_id = -1;
        size_t best_at = 0;
        for (size_t i = 0; i + 1 < k; i++) {
            const char *a = t->piece[out[i]], *b = t->piece[out[i + 1]];
            size_t la = strlen(a), lb = strlen(b);
            memcpy(buf, a, la);
            memcpy(buf + la, b, lb + 1);
            int id = re_tok_lookup(t, buf);
            if (id >= 0 && t->score[id] > best) {
                best = t->score[id];
                best_id = id;
                best_at = i;
            }
        }
        if (best_id < 0) break;
        out[best_at] = best_id;
        memmove(out + best_at + 1, out + best_at + 2, (k - best_at - 2) * sizeof *out);
        k--;
    }
    free(buf);
    if (eos) out[k++] = RE_TOK_EOS;
    *n = (int)k;
    return 0;
}

/* Append n bytes to out (cap bytes, kept NUL-terminated); the new length. */
static size_t re_put(char *out, size_t cap, size_t len, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, len++)
        if (len + 1 < cap) out[len] = s[i];
    if (cap) out[len < cap ? len : cap - 1] = 0;
    return len;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 if none:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t re_utf8_len(const unsigned char *s, size_t n)
{
    unsigned char c = s[0];
    size_t k;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) k = 2;
    else if (c >= 0xE0 && c <= 0xEF) { k = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c <= 0xF4) { k = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 0;
    if (n < k || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    return k;
}

/* JSON string body of raw bytes: quotes, backslashes and control bytes
 * escaped, a byte that is not part of well-formed UTF-8 replaced by U+FFFD
 * (byte tokens can be sampled in any order; the document stays valid). */
static size_t re_put_json(char *out, size_t cap, const char *raw, size_t n)
{
    size_t len = 0;
    if (cap) out[0] = 0;
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)raw[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\'; esc[1] = (char)c;
            len = re_put(out, cap, len, esc, 2);
            i++;
        } else if (c < 0x20) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            len = re_put(out, cap, len, esc, 6);
            i++;
        } else {
            size_t k = re_utf8_len((const unsigned char *)raw + i, n - i);
            if (k) len = re_put(out, cap, len, raw + i, k);
            else len = re_put(out, cap, len, "\xEF\xBF\xBD", 3);
            i += k ? k : 1;
        }
    }
    return len;
}

/* The raw bytes of the pieces (no escaping). */
static size_t re_tok_raw(const re_tok_t *t, int32_t prev, const int32_t *tokens, int n, char *out,
                         size_t cap)
{
    size_t len = 0;
    if (cap) out[0] = 0;
    for (int i = 0; i < n; i++) {
        int32_t id = tokens[i];
        if (id < 0 || id >= t->vocab_size) continue;
        const char *p = t->piece[id];
        if (prev == RE_TOK_BOS && p[0] == ' ') p++;
        unsigned int byte;
        char one;
        if (sscanf(p, "<0x%02X>", &byte) == 1 && strlen(p) == 6) {
            one = (char)byte;
            len = re_put(out, cap, len, &one, 1);
        } else {
            len = re_put(out, cap, len, p, strlen(p));
        }
        prev = id;
    }
    return len;
}

size_t re_tok_decode(const re_tok_t *t, int32_t prev, const int32_t *tokens, int n, int json,
                     char *out, size_t cap)
{
    if (!json) return re_tok_raw(t, prev, tokens, n, out, cap);
    size_t rawlen = re_tok_raw(t, prev, tokens, n, NULL, 0);
    char *raw = malloc(rawlen + 1);
    if (!raw) {
        if (cap) out[0] = 0;
        return 0;
    }
    re_tok_raw(t, prev, tokens, n, raw, rawlen + 1);
    size_t len = re_put_json(out, cap, raw, rawlen);
    free(raw);
    return len;
}
