/* prompt.c — token ids from a list or from text. */
#include "prompt.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "poolscope/error.h"

int re_prompt_parse_ids(const char *list, int vocab_size, int32_t **ids, int *n, char *msg,
                        size_t cap)
{
    *ids = NULL;
    *n = 0;
    size_t items = 1;
    for (const char *p = list; *p; p++) items += *p == ',';
    int32_t *out = malloc(items * sizeof *out);
    if (!out) return PSC_ENOMEM;
    const char *p = list;
    int k = 0;
    for (;;) {
        const char *item = p;
        size_t len = strcspn(p, ",");
        while (len && isspace((unsigned char)item[0])) { item++; len--; }
        while (len && isspace((unsigned char)item[len - 1])) len--;
        char *end = NULL;
        errno = 0;
        long long v = len ? strtoll(item, &end, 10) : 0;
        if (!len || errno || end != item + len) {
            if (len == 0 && items == 1)
                snprintf(msg, cap, "empty token id list (want e.g. 1,2,3)");
            else
                snprintf(msg, cap, "item %d '%.*s' is not a token id (want comma-separated "
                         "integers in 0..%d)", k + 1, (int)(len > 40 ? 40 : len), item,
                         vocab_size - 1);
            free(out);
            return PSC_EINVAL;
        }
        if (v < 0 || v >= vocab_size) {
            snprintf(msg, cap, "token id %lld (item %d) is out of range: the vocab has %d ids, "
                     "0..%d", v, k + 1, vocab_size, vocab_size - 1);
            free(out);
            return PSC_EINVAL;
        }
        out[k++] = (int32_t)v;
        p += strcspn(p, ",");
        if (!*p) break;
        p++;
    }
    *ids = out;
    *n = k;
    return 0;
}

int re_prompt_from_text(const re_tok_t *tok, const char *text, int32_t **ids, int *n, char *msg,
                        size_t cap)
{
    *ids = NULL;
    *n = 0;
    size_t need = re_tok_encode_cap(text);
    int32_t *out = malloc(need * sizeof *out);
    if (!out) return PSC_ENOMEM;
    int rc = re_tok_encode(tok, text, 1, 0, out, need, n, msg, cap);
    if (rc) {
        if (rc != PSC_EINVAL) snprintf(msg, cap, "cannot encode the prompt: %s", psc_strerror(rc));
        free(out);
        *n = 0;
        return rc;
    }
    *ids = out;
    return 0;
}
