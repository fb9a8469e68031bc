/* A model file with its tokenizers, for attn translate and attn viz --model. */
#include "cli/translator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_translator_load(cli_translator *t, const char *command, const char *path)
{
    memset(t, 0, sizeof *t);
    t->command = command;
    attn_tensor_file *file = NULL;
    const char *json = NULL;
    attn_status status = attn_model_load(path, &t->model);
    if (status == ATTN_OK)
        status = attn_tensor_file_open(path, &file);
    if (status != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", command, attn_last_error());
        return 1;
    }
    attn_model_arch arch = attn_model_get_config(t->model)->arch;
    if (arch != ATTN_ARCH_TRANSFORMER && arch != ATTN_ARCH_RNN) {
        fprintf(stderr, "attn %s: %s is not an encoder-decoder model (arch transformer or rnn)\n",
                command, path);
        attn_tensor_file_close(file);
        return 1;
    }
    if (attn_tensor_file_metadata(file, ATTN_SRC_TOKENIZER_KEY, &json) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s has no tokenizers (\"%s\" metadata); use a model written by "
                        "'attn train'\n", command, path, ATTN_SRC_TOKENIZER_KEY);
        attn_tensor_file_close(file);
        return 1;
    }
    status = attn_tokenizer_from_json(json, &t->source);
    if (status == ATTN_OK)
        status = attn_tensor_file_metadata(file, ATTN_TGT_TOKENIZER_KEY, &json);
    if (status == ATTN_OK)
        status = attn_tokenizer_from_json(json, &t->target);
    attn_tensor_file_close(file);
    if (status == ATTN_OK)
        status = attn_graph_create(attn_model_params(t->model), &t->graph);
    if (status != ATTN_OK) {
        fprintf(stderr, "attn %s: %s: %s\n", command, path, attn_last_error());
        return 1;
    }
    t->model_max_len = attn_model_get_config(t->model)->max_len;
    return 0;
}

void cli_translator_free(cli_translator *t)
{
    attn_graph_destroy(t->graph);
    attn_model_destroy(t->model);
    attn_tokenizer_destroy(t->source);
    attn_tokenizer_destroy(t->target);
    memset(t, 0, sizeof *t);
}

int cli_translator_encode(cli_translator *t, const char *where, const char *text, int32_t **ids,
                          int64_t *count)
{
    if (attn_tokenizer_encode(t->source, text, ids, count) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s: %s\n", t->command, where, attn_last_error());
        return 1;
    }
    if (*count > t->model_max_len) {
        fprintf(stderr, "attn %s: %s: %lld tokens, above the model's max_len %lld\n",
                t->command, where, (long long)*count, (long long)t->model_max_len);
        free(*ids);
        *ids = NULL;
        return 1;
    }
    for (int64_t i = 0; i < *count && !t->warned_unknown; i++)
        if ((*ids)[i] == ATTN_UNK_ID) {
            fprintf(stderr, "attn %s: warning: %s: a token outside the model's source "
                            "vocabulary is read as <unk> (warned once)\n", t->command, where);
            t->warned_unknown = 1;
        }
    return 0;
}

int cli_translator_decode(cli_translator *t, int64_t n, int32_t *const *ids,
                          const int64_t *counts, const attn_decode_options *options,
                          attn_decode_result **result)
{
    int64_t longest = 1;
    for (int64_t i = 0; i < n; i++)
        longest = counts[i] > longest ? counts[i] : longest;
    const size_t rows = n > 0 ? (size_t)n : 1;
    int32_t *src = calloc(rows * (size_t)longest, sizeof *src);
    int32_t *lengths = calloc(rows, sizeof *lengths);
    const int no_memory = src == NULL || lengths == NULL;
    attn_status status = ATTN_ERR_OUT_OF_MEMORY;
    if (!no_memory) {
        for (int64_t i = 0; i < n; i++) {
            memcpy(src + i * longest, ids[i], (size_t)counts[i] * sizeof *src);
            lengths[i] = (int32_t)counts[i];
        }
        status = attn_decode(t->model, t->graph, n, longest, src, lengths, options, result);
    }
    free(src);
    free(lengths);
    if (status != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", t->command,
                no_memory ? "out of memory" : attn_last_error());
        return 1;
    }
    return 0;
}

char *cli_translator_text(cli_translator *t, const attn_hypothesis *h)
{
    char *text = NULL;
    if (attn_tokenizer_decode(t->target, h->tokens, h->length, &text) != ATTN_OK) {
        fprintf(stderr, "attn %s: %s\n", t->command, attn_last_error());
        return NULL;
    }
    return text;
}

void cli_token_labels(const attn_tokenizer *tokenizer, const int32_t *ids, int64_t count,
                      const char **labels)
{
    const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
    for (int64_t i = 0; i < count; i++) {
        const char *token = attn_vocab_token(vocab, ids[i]);
        labels[i] = token != NULL ? token : "?";
    }
}
