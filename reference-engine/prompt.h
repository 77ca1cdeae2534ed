/* prompt.h — a user's prompt as token ids (re_prompt_).
 *
 *   re_prompt_parse_ids("1,2,3", vocab, ...)   a comma-separated id list,
 *                                              taken literally (no BOS added)
 *   re_prompt_from_text(tok, "Once upon", ...) text through the tokenizer,
 *                                              BOS first and no EOS, as
 *                                              llama2.c's run.c prompts
 *
 * Both return 0 and a malloc'd array in *ids (caller frees) with its length
 * in *n (>= 1), or PSC_EINVAL with a one-line reason in msg, or PSC_ENOMEM.
 */
#ifndef RE_PROMPT_H
#define RE_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

/* Items are decimal integers in [0, vocab_size), separated by single commas,
 * spaces around an item allowed. The message names the first bad item and
 * its position (1-based). */
int re_prompt_parse_ids(const char *list, int vocab_size, int32_t **ids, int *n,
                        char *msg, size_t cap);

int re_prompt_from_text(const re_tok_t *tok, const char *text, int32_t **ids, int *n,
                        char *msg, size_t cap);

#endif
