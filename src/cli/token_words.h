/* Tokens back to the words of the text they came from, for outputs that speak of words
 * (Moses alignments) and for labels a reader sees (pictures). The tokenizers mark words in
 * their own ways (attn_data.h): a BPE piece that ends a word ends with "</w>", a character
 * tokenizer has a token for each space, a word tokenizer's tokens are words. */
#ifndef ATTN_CLI_TOKEN_WORDS_H
#define ATTN_CLI_TOKEN_WORDS_H

#include "attn/attn.h"

/* Sets word_of[i] to the index, from 0, of the word tokens[i] belongs to (labels as
 * attn_bundle_labels gives them), or -1 for a token in no word (a space of a character
 * tokenizer). A special token (<unk>, ...) of a BPE tokenizer ends its word, as the marker it
 * hides cannot be known. Returns the number of words. */
int64_t cli_token_words(attn_tokenizer_kind kind, const char *const *labels, int64_t count,
                        int64_t *word_of);

#endif
