/* The model bundle with the CLI's messages, for attn translate and attn viz --model. */
#include "cli/translator.h"
#include "cli/library_error.h"
#include "cli/precision.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_translator_load(cli_translator *t, const char *command, const char *paths)
{
    memset(t, 0, sizeof *t);
    t->command = command;
    int64_t count = 1;
    for (const char *p = paths; *p != '\0'; p++)
        count += *p == ',';
    t->bundles = calloc((size_t)count, sizeof *t->bundles);
    char *list = malloc(strlen(paths) + 1);
    if (t->bundles == NULL || list == NULL) {
        free(list);
        fprintf(stderr, "attn %s: out of memory\n", command);
        return 1;
    }
    strcpy(list, paths);
    int code = 0;
    char *path = list;
    for (int64_t m = 0; m < count && code == 0; m++) {
        char *comma = strchr(path, ',');
        if (comma != NULL)
            *comma = '\0';
        if (*path == '\0') {
            fprintf(stderr, "attn %s: model %lld of the list %s is empty\n", command,
                    (long long)(m + 1), paths);
            code = 1;
        } else if (attn_bundle_load(path, &t->bundles[m]) != ATTN_OK) {
            cli_library_error(command);
            code = 1;
        } else {
            t->count = m + 1;
        }
        path = comma != NULL ? comma + 1 : path;
    }
    free(list);
    t->bundle = t->bundles[0];
    for (int64_t m = 0; code == 0 && m < t->count; m++)
        if (attn_bundle_check_encoder_decoder(t->bundles[m]) != ATTN_OK)
            code = cli_library_error(command);
    if (code == 0 && t->count > 1 && attn_bundle_check_ensemble(t->bundles, t->count) != ATTN_OK)
        code = cli_library_error_in(command,
                                    "%s (the models of an ensemble share their "
                                    "tokenizers: train them on the same data with the "
                                    "same --src-tokens and --tgt-tokens)",
                                    paths);
    return code;
}

int64_t cli_translator_max_len(const cli_translator *t)
{
    int64_t max_len = attn_bundle_config(t->bundle)->max_len;
    for (int64_t m = 1; m < t->count; m++) {
        const int64_t other = attn_bundle_config(t->bundles[m])->max_len;
        max_len = other < max_len ? other : max_len;
    }
    return max_len;
}

int cli_translator_set_precision(cli_translator *t, const char *name)
{
    for (int64_t i = 0; i < t->count; i++)
        if (cli_set_model_precision(t->command, attn_bundle_model(t->bundles[i]), name) != 0)
            return 1;
    return 0;
}

void cli_translator_free(cli_translator *t)
{
    for (int64_t m = 0; m < t->count; m++)
        attn_bundle_destroy(t->bundles[m]);
    free(t->bundles);
    memset(t, 0, sizeof *t);
}

int cli_translator_encode(cli_translator *t, const char *where, const char *text, int32_t **ids,
                          int64_t *count)
{
    int64_t unknown = 0;
    if (attn_bundle_encode(t->bundle, text, ids, count, &unknown) != ATTN_OK) {
        cli_library_error_in(t->command, "%s", where);
        return 1;
    }
    const int64_t max_len = cli_translator_max_len(t);
    if (*count > max_len) {
        fprintf(stderr, "attn %s: %s: %lld tokens, above the ensemble's smallest max_len %lld\n",
                t->command, where, (long long)*count, (long long)max_len);
        free(*ids);
        *ids = NULL;
        *count = 0;
        return 1;
    }
    if (unknown > 0 && !t->warned_unknown) {
        fprintf(stderr,
                "attn %s: warning: %s: a token outside the model's source "
                "vocabulary is read as <unk> (warned once)\n",
                t->command, where);
        t->warned_unknown = 1;
    }
    return 0;
}

int cli_translator_decode(cli_translator *t, int64_t n, int32_t *const *ids, const int64_t *counts,
                          const attn_decode_options *options, attn_decode_result **result)
{
    if (attn_bundle_decode_ensemble(t->bundles, t->count, n, (const int32_t *const *)ids, counts,
                                    options, result) != ATTN_OK) {
        cli_library_error(t->command);
        return 1;
    }
    return 0;
}

char *cli_translator_text(cli_translator *t, const attn_hypothesis *h)
{
    char *text = NULL;
    if (attn_bundle_text(t->bundle, h, &text) != ATTN_OK) {
        cli_library_error(t->command);
        return NULL;
    }
    return text;
}
