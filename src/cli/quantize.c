/* attn quantize: a model file in bf16 or int8 for inference, which attn translate, attn viz,
 * attn serve and Python's attn.Bundle load directly. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/options.h"
#include "cli/translator.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct quantize_args {
    const char *model, *out, *precision;
} quantize_args;

static const cli_option quantize_options[] = {
    {CLI_OPTION("--model", CLI_STRING, offsetof(quantize_args, model), "FILE",
                "the fp32 model file (attn train's output)")},
    {CLI_OPTION("--out", CLI_STRING, offsetof(quantize_args, out), "FILE",
                "the smaller model file to write")},
    {CLI_OPTION("--precision", CLI_STRING, offsetof(quantize_args, precision), "bf16|int8",
                "bf16: matrices rounded to bfloat16; int8: quantized per output row with an "
                "fp32 scale")},
};

static long long file_bytes(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long long)st.st_size : -1;
}

/* The source file's metadata but the config and precision, which attn_model_save writes. */
static attn_metadata_entry *kept_metadata(const attn_tensor_file *file, size_t *count)
{
    const size_t n = attn_tensor_file_metadata_count(file);
    attn_metadata_entry *kept = calloc(n + 1, sizeof *kept);
    *count = 0;
    for (size_t i = 0; kept != NULL && i < n; i++) {
        const char *key, *value;
        if (attn_tensor_file_metadata_at(file, i, &key, &value) != ATTN_OK)
            continue;
        if (strcmp(key, ATTN_MODEL_CONFIG_KEY) != 0 && strcmp(key, ATTN_MODEL_PRECISION_KEY) != 0)
            kept[(*count)++] = (attn_metadata_entry){key, value};
    }
    return kept;
}

int attn_cmd_quantize(int argc, char **argv)
{
    static const cli_command command = {
        "quantize",
        "attn quantize --model FILE --out FILE --precision bf16|int8",
        "Writes a model file for inference whose matrices (projections, embeddings, output\n"
        "layer) are bfloat16 or int8 with one fp32 scale per output row; biases and layer\n"
        "norms stay fp32. attn translate, viz and serve and Python's attn.Bundle load it and\n"
        "run at its precision; training refuses it (fine-tune from the fp32 file).\n",
        quantize_options,
        sizeof quantize_options / sizeof *quantize_options,
        NULL};
    quantize_args a = {NULL, NULL, NULL};
    int given[sizeof quantize_options / sizeof *quantize_options] = {0};
    const int code = cli_parse(&command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    if (a.model == NULL || a.out == NULL || a.precision == NULL) {
        fprintf(stderr, "attn quantize: --model, --out and --precision are required\n");
        return 2;
    }
    attn_precision precision;
    /* A file's precision is the user's choice: auto, which depends on the processor, is not. */
    if (attn_precision_parse(a.precision, &precision) != ATTN_OK ||
        (precision != ATTN_PRECISION_BF16 && precision != ATTN_PRECISION_INT8)) {
        fprintf(stderr, "attn quantize: --precision %s: choose bf16 or int8\n", a.precision);
        return 2;
    }
    attn_tensor_file *file = NULL;
    attn_model *model = NULL;
    attn_metadata_entry *metadata = NULL;
    size_t n_metadata = 0;
    int ok = attn_tensor_file_open(a.model, &file) == ATTN_OK &&
             attn_model_from_file(file, a.model, &model) == ATTN_OK &&
             attn_model_set_precision(model, precision) == ATTN_OK;
    if (ok && (metadata = kept_metadata(file, &n_metadata)) == NULL) {
        fprintf(stderr, "attn quantize: out of memory\n");
        ok = 0;
    } else if (ok) {
        ok = attn_model_save(model, a.out, metadata, n_metadata) == ATTN_OK;
    }
    if (!ok && metadata != NULL)
        cli_library_error("quantize");
    else if (!ok && (file == NULL || model == NULL || attn_model_precision(model) != precision))
        cli_library_error("quantize");
    if (ok)
        printf("attn quantize: %s (%lld bytes) -> %s (%lld bytes, %s)\n", a.model,
               file_bytes(a.model), a.out, file_bytes(a.out), a.precision);
    free(metadata);
    attn_model_destroy(model);
    attn_tensor_file_close(file);
    return ok ? 0 : 1;
}
