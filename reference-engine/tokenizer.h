/* tokenizer.h — a llama2.c tokenizer file, both directions (re_tok_).
 *
 *   re_tok_load(path, vocab, ...)    read the pieces and their merge scores
 *   re_tok_encode(t, text, bos, ...) text -> ids, as llama2.c's run.c does
 *   re_tok_decode(t, prev, ids, ...) ids -> text
 *
 * File format: int32 max_token_length, then per token: float score,
 * int32 length, `length` bytes (no terminator).
 */
#ifndef RE_TOKENIZER_H
#define RE_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

typedef struct re_tok re_tok_t;

/* llama2.c's special ids. */
enum { RE_TOK_BOS = 1, RE_TOK_EOS = 2 };

/* NULL on failure with a one-line reason in msg (file named). */
re_tok_t *re_tok_load(const char *path, int vocab_size, char *msg, size_t cap);
void re_tok_free(re_tok_t *t);   /* NULL ok */

/* The id whose piece is exactly `piece` (the lowest such id), or -1. */
int re_tok_lookup(const re_tok_t *t, const char *piece);

/* The most ids re_tok_encode can produce for `text`: one per byte, plus
 * BOS, the dummy prefix and EOS. */
size_t re_tok_encode_cap(const char *text);

/* Encode `text` (NUL-terminated) as run.c's encode() does with the same
 * flags: BOS (1) first when bos != 0; then, unless the text is empty, the
 * dummy prefix " " (skipped when the vocab has no " " piece); then each
 * UTF-8 code point (at most 4 bytes) as its piece, or, when the vocab has
 * none, each of its bytes as id byte + 3 (the <0xXX> tokens); then the
 * adjacent pair whose concatenation is a piece with the highest score
 * (above -1e10; leftmost among equal scores) is merged, repeatedly, until no pair
 * merges; EOS (2) last when eos != 0. Writes at most cap ids to out and
 * their count to *n. Returns 0, PSC_ERANGE (cap too small) or PSC_EINVAL
 * (a byte with no token in this vocab: msg says which). */
int re_tok_encode(const re_tok_t *t, const char *text, int bos, int eos, int32_t *out,
                  size_t cap, int *n, char *msg, size_t mcap);

/* Write the text of `tokens` (n ids, following `prev`, the token before
 * them: a leading space after BOS is dropped, <0xXX> byte tokens become the
 * byte) to out (cap bytes, NUL-terminated). With json != 0 it is a JSON
 * string body: escaped, and any byte not in well-formed UTF-8 (byte tokens
 * out of order) becomes U+FFFD. Returns the length of the whole text
 * (snprintf-style: cap 0 and out NULL ask for it); 0 if out of memory. */
size_t re_tok_decode(const re_tok_t *t, int32_t prev, const int32_t *tokens, int n,
                     int json, char *out, size_t cap);

#endif
