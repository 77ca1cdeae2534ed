/* tokenizer.h — decoding token ids to text with a llama2.c tokenizer file
 * (re_tok_). Only decoding: prompts are synthetic token ids.
 *
 * File format: int32 max_token_length, then per token: float score,
 * int32 length, `length` bytes (no terminator).
 */
#ifndef RE_TOKENIZER_H
#define RE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct re_tok re_tok_t;

/* NULL on failure with a one-line reason in msg (file named). */
re_tok_t *re_tok_load(const char *path, int vocab_size, char *msg, size_t cap);
void re_tok_free(re_tok_t *t);   /* NULL ok */

/* Append the text of `tokens` (n ids, following `prev`, the token before
 * them: a leading space after BOS is dropped, <0xXX> byte tokens become the
 * byte) to out, JSON-escaped when json != 0. Returns the length written
 * (snprintf-style: what it would need). */
size_t re_tok_decode(const re_tok_t *t, int32_t prev, const int32_t *tokens, int n,
                     int json, char *out, size_t cap);

#endif
