/* What attn translate and attn viz --model share: the model bundle (attn_bundle.h) of a file
 * written by attn train, with the CLI's messages. Failures print one message
 * "attn COMMAND: ..." on stderr. */
#ifndef ATTN_CLI_TRANSLATOR_H
#define ATTN_CLI_TRANSLATOR_H

#include "attn/attn.h"

/* The beam of attn translate and of attn viz --model, so that a picture shows the translation
 * translate gives. */
enum { CLI_DEFAULT_BEAM = 5 };

typedef struct cli_translator {
    const char *command;   /* "translate", "viz": prefixes messages */
    attn_bundle *bundle;   /* the first model: tokenizers, texts, labels */
    attn_bundle **bundles; /* [count]: the ensemble, bundle first; count 1 for one model */
    int64_t count;
    int warned_unknown; /* the <unk> warning is given once */
} cli_translator;

/* Loads an encoder-decoder model (arch transformer or rnn) with its tokenizers, or an ensemble
 * of them from a comma-separated list of paths ("a.safetensors,b.safetensors"), checked to
 * share their tokenizers. Returns 0 on success, else 1 after printing the message. */
int cli_translator_load(cli_translator *t, const char *command, const char *paths);
/* The longest source or output the models all take: the smallest max_len. */
int64_t cli_translator_max_len(const cli_translator *t);
void cli_translator_free(cli_translator *t);

/* cli_set_model_precision for every model of t's ensemble. */
int cli_translator_set_precision(cli_translator *t, const char *precision);

/* Source ids of text (malloc'ed in *ids, *count of them). where names the text in messages
 * ("stdin:3"). Warns once on stderr when a token is outside the source vocabulary. Fails
 * (message printed, returns 1) when the text has more tokens than the model's max_len. */
int cli_translator_encode(cli_translator *t, const char *where, const char *text, int32_t **ids,
                          int64_t *count);

/* Decodes n sentences (ids[i] of counts[i] >= 1 tokens) with the model or the ensemble. Returns 0
 * and the result, or 1 after printing the message. */
int cli_translator_decode(cli_translator *t, int64_t n, int32_t *const *ids, const int64_t *counts,
                          const attn_decode_options *options, attn_decode_result **result);

/* The text of a hypothesis (malloc'ed), or NULL after printing a message. */
char *cli_translator_text(cli_translator *t, const attn_hypothesis *h);

#endif
