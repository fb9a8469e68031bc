/* attn average: the element-wise mean of several model files' weights, as one model file. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct average_args {
    const char *out;
} average_args;

static const cli_option average_options[] = {
    {CLI_OPTION("--out", CLI_STRING, offsetof(average_args, out), "FILE",
                "the averaged model (written atomically; may be one of the inputs)")},
};

static const cli_command average_command = {
    "average",
    "attn average --out MODEL.safetensors A.safetensors B.safetensors [...]",
    "Writes the element-wise mean of the weights of model files or checkpoints that 'attn\n"
    "train' wrote (fairseq's average_checkpoints), summed in double, with the first file's\n"
    "config and tokenizers: a model file for 'attn translate'. The files must have the same\n"
    "model config and tokenizers; a checkpoint's optimizer state is not carried over.\n"
    "Averaging the last few checkpoints of one run usually scores a little better than the\n"
    "last alone.\n",
    average_options,
    sizeof average_options / sizeof average_options[0],
    NULL};

int attn_cmd_average(int argc, char **argv)
{
    /* Options go to the one parser; the other arguments are the files, in order. Every
     * option of this command takes a value, so "--out M" keeps M with it. */
    char **option_argv = malloc((size_t)argc * sizeof *option_argv);
    const char **files = malloc((size_t)argc * sizeof *files);
    if (option_argv == NULL || files == NULL) {
        free(option_argv);
        free(files);
        fprintf(stderr, "attn average: out of memory\n");
        return 1;
    }
    int option_argc = 0, file_count = 0;
    option_argv[option_argc++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const int is_option = arg[0] == '-' && arg[1] != '\0';
        if (!is_option) {
            files[file_count++] = arg;
            continue;
        }
        option_argv[option_argc++] = argv[i];
        const int is_help = strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0;
        if (!is_help && strchr(arg, '=') == NULL && i + 1 < argc)
            option_argv[option_argc++] = argv[++i];
    }
    average_args a = {NULL};
    int given[sizeof average_options / sizeof average_options[0]] = {0};
    int code = cli_parse(&average_command, option_argc, option_argv, &a, given);
    if (code == CLI_GO_ON && a.out == NULL)
        code = cli_usage_error(&average_command, "--out MODEL.safetensors is required");
    if (code == CLI_GO_ON && file_count < 1)
        code = cli_usage_error(&average_command, "give the model files to average");
    if (code == CLI_GO_ON) {
        code = 0;
        if (attn_bundle_average(files, file_count, a.out) != ATTN_OK)
            code = cli_library_error("average");
        else
            fprintf(stderr, "attn average: wrote %s, the mean of %d file%s\n", a.out, file_count,
                    file_count == 1 ? "" : "s");
    }
    free(option_argv);
    free(files);
    return code;
}
