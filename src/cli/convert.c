/* attn convert: GPT-2 checkpoints of llm.c to attn model files and back. The format is the
 * library's (attn_llmc_to_model_file, attn_model_file_to_llmc); this file parses and reports. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct convert_args {
    int from, to; /* the format: its index in formats */
    const char *out;
} convert_args;

static const char *const formats[] = {"llmc", NULL};

static const cli_option convert_options[] = {
    {CLI_OPTION("--from", CLI_CHOICE, offsetof(convert_args, from), "FORMAT",
                "read INPUT in this format (llmc: llm.c's train_gpt2 float32 checkpoint) and "
                "write an attn model file"),
     .choices = formats},
    {CLI_OPTION("--to", CLI_CHOICE, offsetof(convert_args, to), "FORMAT",
                "read the attn model file INPUT and write this format (llmc)"),
     .choices = formats},
    {CLI_OPTION("--out", CLI_STRING, offsetof(convert_args, out), "FILE",
                "the file to write (atomically: a failed run leaves no partial file)")},
};

static const cli_command convert_command = {
    "convert",
    "attn convert --from llmc CHECKPOINT.bin --out MODEL.safetensors\n"
    "       "
    "attn convert --to llmc MODEL.safetensors --out CHECKPOINT.bin",
    "Converts GPT-2 models between llm.c (github.com/karpathy/llm.c) and attn. An llm.c\n"
    "checkpoint becomes a \"transformer_lm\" with learned positions, pre-norm, gelu_tanh and a\n"
    "tied output without bias; the padding rows of llm.c's vocabulary ride along in the\n"
    "model file, so converting back gives the same bytes. --to llmc refuses a model llm.c\n"
    "cannot represent and names the config fields that differ.\n",
    convert_options,
    sizeof convert_options / sizeof convert_options[0],
    NULL};

int attn_cmd_convert(int argc, char **argv)
{
    /* Options go to the one parser; the other argument is the input file. Every option of
     * this command takes a value, so "--out M" keeps M with it. */
    char **option_argv = malloc((size_t)argc * sizeof *option_argv);
    if (option_argv == NULL) {
        fprintf(stderr, "attn convert: out of memory\n");
        return 1;
    }
    const char *input = NULL;
    int option_argc = 0, inputs = 0;
    option_argv[option_argc++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!(arg[0] == '-' && arg[1] != '\0')) {
            input = arg;
            inputs++;
            continue;
        }
        option_argv[option_argc++] = argv[i];
        const int is_help = strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
        if (!is_help && strchr(arg, '=') == NULL && i + 1 < argc)
            option_argv[option_argc++] = argv[++i];
    }
    convert_args a = {0, 0, NULL};
    int given[sizeof convert_options / sizeof convert_options[0]] = {0};
    int code = cli_parse(&convert_command, option_argc, option_argv, &a, given);
    free(option_argv);
    if (code != CLI_GO_ON)
        return code;
    const int from_llmc = cli_was_given(&convert_command, given, "--from");
    if (from_llmc == cli_was_given(&convert_command, given, "--to"))
        return cli_usage_error(&convert_command, "give one of --from llmc or --to llmc");
    if (inputs != 1)
        return cli_usage_error(&convert_command, "give one input file (got %d)", inputs);
    if (a.out == NULL)
        return cli_usage_error(&convert_command, "--out FILE is required");
    attn_model_config config;
    const attn_status status = from_llmc ? attn_llmc_to_model_file(input, a.out, &config)
                                         : attn_model_file_to_llmc(input, a.out, &config);
    if (status != ATTN_OK)
        return cli_library_error("convert");
    fprintf(stderr,
            "attn convert: wrote %s: GPT-2 of %lld layers, %lld heads, %lld channels, vocabulary "
            "%lld, %lld positions\n",
            a.out, (long long)config.decoder_layers, (long long)config.num_heads,
            (long long)config.d_model, (long long)config.tgt_vocab, (long long)config.max_len);
    return 0;
}
