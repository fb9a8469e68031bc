/* The attn program: one binary, one subcommand per job. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/options.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"average", attn_cmd_average, "average the weights of model files or checkpoints"},
    {"bench", attn_cmd_bench, "measure kernels against references (attn bench attention)"},
    {"classify", attn_cmd_classify, "label lines of text with a classifier, with probabilities"},
    {"convert", attn_cmd_convert, "convert GPT-2 models between llm.c checkpoints and attn"},
    {"eval", attn_cmd_eval, "score output against references: BLEU, chrF, WER, G2P PER"},
    {"generate", attn_cmd_generate, "continue prompts with a language model (sampling or greedy)"},
    {"info", attn_cmd_info, "print the build: version, threading, instruction sets"},
    {"quantize", attn_cmd_quantize, "write a bf16 or int8 model file for faster inference"},
    {"serve", attn_cmd_serve, "serve a model over HTTP: JSON API, batched across clients"},
    {"tokenize", attn_cmd_tokenize, "turn text into an llm.c token file for attn train --task lm"},
    {"train", attn_cmd_train, "train a translation model, language model or text classifier"},
    {"translate", attn_cmd_translate, "translate lines with a trained model or an ensemble (beam search)"},
    {"viz", attn_cmd_viz, "draw attention heat maps and loss curves (SVG, PNG, terminal)"},
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: attn [--help] [--version] <command> [options]\n\n"
                 "attn: attention and attention-based sequence-to-sequence models.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'attn <command> --help' describes a command's options.\n"
                 "Environment: ATTN_NUM_THREADS (threads), ATTN_ISA "
                 "(reference|portable|avx2|avx512; on ARM\n"
                 "reference|portable|neon|neon-dotprod|neon-bf16).\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return CLI_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("attn %s\n", attn_version());
        return 0;
    }
    enum { N_COMMANDS = sizeof commands / sizeof commands[0] };
    const char *names[N_COMMANDS];
    for (size_t i = 0; i < N_COMMANDS; i++) {
        names[i] = commands[i].name;
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        if (attn_check_environment() != ATTN_OK) {
            fprintf(stderr, "attn %s: %s\n", argv[1], attn_last_error());
            return CLI_EXIT_USAGE;
        }
        return commands[i].run(argc - 1, argv + 1);
    }
    const char *nearest = cli_nearest(argv[1], strlen(argv[1]), names, N_COMMANDS);
    if (nearest != NULL)
        fprintf(stderr, "attn: unknown command '%s' (did you mean %s?)\n", argv[1], nearest);
    else
        fprintf(stderr, "attn: unknown command '%s' (see 'attn --help')\n", argv[1]);
    return CLI_EXIT_USAGE;
}
