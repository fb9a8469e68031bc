/* The model bundle with the CLI's messages, for attn translate and attn viz --model. */
#include "cli/translator.h"
#include "cli/library_error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_translator_load(cli_translator *t, const char *command, const char *path)
{
    memset(t, 0, sizeof *t);
    t->command = command;
    if (attn_bundle_load(path, &t->bundle) != ATTN_OK ||
        attn_bundle_check_encoder_decoder(t->bundle) != ATTN_OK) {
        cli_library_error(command);
        return 1;
    }
    return 0;
}

int cli_set_model_precision(const char *command, attn_model *model, const char *name)
{
    attn_precision precision = attn_model_precision(model);
    if ((name != NULL && attn_precision_parse(name, &precision) != ATTN_OK) ||
        attn_model_set_precision(model, precision) != ATTN_OK) {
        cli_library_error(command);
        return 1;
    }
    if (!attn_precision_native(precision))
        fprintf(stderr,
                "attn %s: note: this CPU has no %s instructions (or ATTN_ISA is not avx512): %s "
                "runs emulated, with the same results, slower\n",
                command, precision == ATTN_PRECISION_INT8 ? "AVX512_VNNI" : "AVX512_BF16",
                attn_precision_name(precision));
    return 0;
}

void cli_translator_free(cli_translator *t)
{
    attn_bundle_destroy(t->bundle);
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
    if (attn_bundle_decode(t->bundle, n, (const int32_t *const *)ids, counts, options, result) !=
        ATTN_OK) {
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
