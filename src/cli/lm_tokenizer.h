/* A language model's tokenizer, got the same way by `attn train --task lm` and `attn tokenize`,
 * so that a token file tokenize writes holds the ids training on the text would read. */
#ifndef ATTN_CLI_LM_TOKENIZER_H
#define ATTN_CLI_LM_TOKENIZER_H

#include "attn/attn.h"

/* Learns the tokenizer that spec (char, word, bpe:N, spm:N or spm-bpe:N) names from n lines of
 * text: char, bpe and spm with the byte fallback, so nothing a language model reads is <unk> (a
 * word vocabulary cannot have one). Returns 0, or 1 after a message "attn COMMAND: ...". */
int lm_tokenizer_learn(const char *command, const char *spec, const char *const *lines, int64_t n,
                       attn_tokenizer **out);

/* The tokenizer a language model's file holds (arch transformer_lm; a model converted from
 * llm.c has none, and is refused naming the fix). flag is the option that named the file, for
 * messages. Returns 0, or 1 after a message. */
int lm_tokenizer_of_model(const char *command, const char *flag, const char *path,
                          attn_tokenizer **out);

/* A SentencePiece .model file, used unchanged. Returns 0, or 1 after a message. */
int lm_tokenizer_load_spm(const char *command, const char *flag, const char *path,
                          attn_tokenizer **out);

/* The tokenizer file at path (attn_tokenizer_save's JSON). Returns 0, or 1 after a message. */
int lm_tokenizer_load(const char *command, const char *flag, const char *path,
                      attn_tokenizer **out);

#endif
