/* attn generate: text from a language model. --prompt streams one continuation as it is
 * sampled (several lines: </s> ends a line); --input continues each line of a file, one output
 * line per prompt, decoded in batches. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/options.h"
#include "cli/precision.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_BATCH = 32, DEFAULT_MAX_NEW_TOKENS = 200 };

typedef struct generate_args {
    const char *model, *prompt, *input, *output, *precision;
    int64_t max_new_tokens, top_k, seed, batch, threads;
    double temperature, top_p;
    int greedy, truncate_prompt;
} generate_args;

#define FIELD(name) offsetof(generate_args, name)

static const cli_option generate_options[] = {
    {CLI_OPTION("--model", CLI_STRING, FIELD(model), "FILE",
                "a language model (arch transformer_lm) with its tokenizer, as 'attn train "
                "--task lm' writes it")},
    {CLI_OPTION("--prompt", CLI_STRING, FIELD(prompt), "TEXT",
                "continue TEXT, printing the continuation as it is made; the model's end of line "
                "prints as a newline, so it may write several lines")},
    {CLI_OPTION("--input", CLI_STRING, FIELD(input), "FILE",
                "continue each line of FILE instead: one output line per input line, ending at "
                "the model's end of line or after --max-new-tokens")},
    {CLI_OPTION("--output", CLI_STRING, FIELD(output), "FILE", "write to FILE [stdout]")},
    {CLI_OPTION("--max-new-tokens", CLI_INT, FIELD(max_new_tokens), "N",
                "new tokens per prompt, at most (fewer when the model's context of max_len "
                "tokens is full)"),
     .min = 1, .max = INT32_MAX, .show_default = 1},
    {CLI_OPTION("--temperature", CLI_NUMBER, FIELD(temperature), "T",
                "divide the logits by T > 0: below 1 sharper, above 1 flatter"),
     .min = 0, .max = 1e6, .show_default = 1},
    {CLI_OPTION("--top-k", CLI_INT, FIELD(top_k), "K",
                "sample among the K most probable tokens only; 0: all"),
     .min = 0, .max = INT32_MAX, .show_default = 1},
    {CLI_OPTION("--top-p", CLI_NUMBER, FIELD(top_p), "P",
                "nucleus sampling: among the fewest most probable tokens whose probability "
                "reaches P; 1: all"),
     .min = 0, .max = 1, .show_default = 1},
    {CLI_OPTION("--seed", CLI_INT, FIELD(seed), "S",
                "the random seed: the same seed, model and options give the same text"),
     .min = 0, .max = (double)INT64_MAX, .show_default = 1},
    {CLI_OPTION("--greedy", CLI_FLAG, FIELD(greedy), NULL,
                "take the most probable token each step (no sampling)")},
    {CLI_OPTION("--truncate-prompt", CLI_FLAG, FIELD(truncate_prompt), NULL,
                "cut a prompt too long for the model's context to its last tokens instead of "
                "refusing it")},
    {CLI_OPTION("--batch", CLI_INT, FIELD(batch), "N", "--input lines decoded together, at most"),
     .min = 1, .max = 1 << 20, .show_default = 1},
    {CLI_OPTION("--threads", CLI_INT, FIELD(threads), "N",
                "threads (0: ATTN_NUM_THREADS or all cores)"),
     .min = 0, .max = 1 << 16, .show_default = 1},
    {CLI_OPTION("--precision", CLI_STRING, FIELD(precision), "auto|fp32|bf16|int8",
                CLI_INFERENCE_PRECISION_HELP)},
};
#define N_GENERATE_OPTIONS (sizeof generate_options / sizeof generate_options[0])

static const cli_command generate_command = {
    "generate",
    "attn generate --model LM.safetensors --prompt TEXT [options]\n"
    "       attn generate --model LM.safetensors --input PROMPTS.txt [--output FILE] [options]",
    "Samples text from a language model. A prompt starts a new line of text (the model reads\n"
    "the end of line, then the prompt's tokens) and the continuation follows it. Each prompt\n"
    "draws from its own random stream, seeded by --seed and its line number, so its text does\n"
    "not depend on --batch or the other lines. A prompt must leave room for one new token in\n"
    "the model's context (max_len tokens): a longer one is an error unless --truncate-prompt.\n"
    "A token outside the model's vocabulary is read as <unk> (a warning says how many).\n",
    generate_options,
    N_GENERATE_OPTIONS,
    NULL};

/* Returns CLI_GO_ON, or the exit code. */
static int parse_args(int argc, char **argv, generate_args *a)
{
    memset(a, 0, sizeof *a);
    const attn_sample_options defaults = attn_sample_default_options();
    a->max_new_tokens = DEFAULT_MAX_NEW_TOKENS;
    a->temperature = defaults.temperature;
    a->top_p = defaults.top_p;
    a->batch = DEFAULT_BATCH;
    a->precision = "auto";
    int given[N_GENERATE_OPTIONS] = {0};
    const int code = cli_parse(&generate_command, argc, argv, a, given);
    if (code != CLI_GO_ON)
        return code;
    if (a->model == NULL)
        return cli_usage_error(&generate_command, "--model LM.safetensors is required");
    if ((a->prompt == NULL) == (a->input == NULL))
        return cli_usage_error(&generate_command, "give either --prompt TEXT or --input FILE");
    if (a->temperature <= 0)
        return cli_usage_error(&generate_command,
                               "--temperature %g must be above 0 (--greedy takes the most "
                               "probable token)",
                               a->temperature);
    if (a->top_p <= 0)
        return cli_usage_error(&generate_command, "--top-p %g must be above 0", a->top_p);
    return CLI_GO_ON;
}

static attn_sample_options sample_options(const generate_args *a, int32_t stop_token)
{
    attn_sample_options options = attn_sample_default_options();
    options.temperature = a->temperature;
    options.top_k = a->top_k;
    options.top_p = a->top_p;
    options.seed = (uint64_t)a->seed;
    options.greedy = a->greedy;
    options.max_new_tokens = a->max_new_tokens;
    options.stop_token = stop_token;
    return options;
}

/* A prompt's ids; where names it in messages. 0, or 1 after the message. */
static int encode_prompt(attn_bundle *bundle, const generate_args *a, const char *where,
                         const char *text, int32_t **ids, int64_t *count, int64_t *unknown)
{
    int64_t cut = 0;
    if (attn_bundle_encode_prompt(bundle, text, 1, ids, count, unknown, &cut) != ATTN_OK)
        return cli_library_error_in("generate", "%s", where);
    if (cut > 0 && !a->truncate_prompt) {
        const int64_t max_len = attn_bundle_config(bundle)->max_len;
        fprintf(stderr,
                "attn generate: %s: the prompt is %lld tokens (with the end of line before it), "
                "above the %lld that leave room for a new token in the model's context of "
                "%lld; shorten it, or pass --truncate-prompt to keep its last %lld tokens\n",
                where, (long long)(*count + cut), (long long)(max_len - 1), (long long)max_len,
                (long long)(max_len - 1));
        free(*ids);
        *ids = NULL;
        return 1;
    }
    if (cut > 0)
        fprintf(stderr, "attn generate: %s: the prompt was cut to its last %lld tokens\n", where,
                (long long)*count);
    return 0;
}

static void warn_unknown(const char *where, int64_t unknown)
{
    if (unknown > 0)
        fprintf(stderr,
                "attn generate: warning: %s: %lld token%s outside the model's vocabulary "
                "read as <unk>\n",
                where, (long long)unknown, unknown == 1 ? " is" : "s are");
}

/* ---- --prompt: streaming -------------------------------------------------------------------- */

/* Prints a continuation as its tokens come: the current line's ids are decoded whole after each
 * token (a word or BPE tokenizer puts spaces by context) and the new end of the text printed. */
typedef struct stream_printer {
    const attn_bundle *bundle;
    FILE *out;
    int32_t *line; /* the current line's ids: the prompt's, then the new ones */
    int64_t length, capacity;
    size_t printed; /* bytes of the line's text printed (or the prompt's, not printed) */
    int ended_line; /* the last thing printed was a newline (or nothing yet) */
    int failed;     /* the printer stopped the generation and said why */
} stream_printer;

/* Writes the bytes and flushes them; ATTN_ERR_IO after printing the message. */
static attn_status write_now(stream_printer *p, const char *bytes, size_t size)
{
    if (fwrite(bytes, 1, size, p->out) == size && fflush(p->out) == 0)
        return ATTN_OK;
    fprintf(stderr, "attn generate: writing the output: %s\n", strerror(errno));
    p->failed = 1;
    return ATTN_ERR_IO;
}

static attn_status print_token(void *user, int64_t prompt, int32_t token)
{
    (void)prompt;
    stream_printer *p = user;
    if (token == ATTN_EOS_ID) {
        p->length = 0;
        p->printed = 0;
        p->ended_line = 1;
        return write_now(p, "\n", 1);
    }
    if (p->length == p->capacity) {
        const int64_t grown = p->capacity > 0 ? 2 * p->capacity : 256;
        int32_t *larger = realloc(p->line, (size_t)grown * sizeof *larger);
        if (larger == NULL) {
            fprintf(stderr, "attn generate: out of memory\n");
            p->failed = 1;
            return ATTN_ERR_OUT_OF_MEMORY;
        }
        p->line = larger;
        p->capacity = grown;
    }
    p->line[p->length++] = token;
    char *text = NULL;
    const attn_status status = attn_bundle_generated_text(p->bundle, p->line, p->length, &text);
    if (status != ATTN_OK) {
        cli_library_error("generate");
        p->failed = 1;
        return status;
    }
    const size_t size = strlen(text);
    /* A text that rewrote what is printed (a tokenizer joining differently) waits for more. */
    attn_status written = ATTN_OK;
    if (size > p->printed) {
        written = write_now(p, text + p->printed, size - p->printed);
        p->printed = size;
        p->ended_line = 0;
    }
    free(text);
    return written;
}

static int generate_from_prompt(attn_bundle *bundle, const generate_args *a, FILE *out)
{
    int32_t *ids = NULL;
    int64_t count = 0, unknown = 0;
    if (encode_prompt(bundle, a, "--prompt", a->prompt, &ids, &count, &unknown) != 0)
        return 1;
    warn_unknown("--prompt", unknown);
    stream_printer printer = {bundle, out, NULL, 0, 0, 0, 1, 0};
    /* The prompt's own line is the start of the line the continuation extends. */
    int code = 0;
    int64_t line_start = count;
    while (line_start > 0 && ids[line_start - 1] != ATTN_EOS_ID)
        line_start--;
    char *prompt_text = NULL;
    printer.capacity = count - line_start + 256;
    printer.line = malloc((size_t)printer.capacity * sizeof *printer.line);
    if (printer.line == NULL) {
        fprintf(stderr, "attn generate: out of memory\n");
        code = 1;
    } else {
        printer.length = count - line_start;
        memcpy(printer.line, ids + line_start, (size_t)printer.length * sizeof *printer.line);
        if (attn_bundle_generated_text(bundle, printer.line, printer.length, &prompt_text) !=
            ATTN_OK)
            code = cli_library_error("generate");
        else
            printer.printed = strlen(prompt_text);
    }
    free(prompt_text);
    const attn_sample_options options = sample_options(a, -1);
    attn_generate_result *result = NULL;
    const int32_t *prompts[1] = {ids};
    if (code == 0 && attn_bundle_generate(bundle, 1, prompts, &count, NULL, &options, print_token,
                                          &printer, &result) != ATTN_OK)
        code = printer.failed ? 1 : cli_library_error("generate");
    if (code == 0 && !printer.ended_line && (fputc('\n', out) == EOF || fflush(out) != 0)) {
        fprintf(stderr, "attn generate: writing the output: %s\n", strerror(errno));
        code = 1;
    }
    if (code == 0 && result->generations[0].stop == ATTN_GENERATE_CONTEXT)
        fprintf(stderr,
                "attn generate: note: stopped after %lld tokens: the model's context of %lld "
                "tokens is full\n",
                (long long)result->generations[0].length,
                (long long)attn_bundle_config(bundle)->max_len);
    attn_generate_result_destroy(result);
    free(printer.line);
    free(ids);
    return code;
}

/* ---- --input: one line per prompt ----------------------------------------------------------- */

/* Continues lines [first, first + n) of the file and writes one line each. */
static int generate_batch(attn_bundle *bundle, const generate_args *a, const attn_lines *lines,
                          int64_t first, int64_t n, FILE *out, int64_t *unknown)
{
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int64_t *counts = calloc((size_t)n, sizeof *counts);
    uint64_t *streams = calloc((size_t)n, sizeof *streams);
    int code = 0;
    if (ids == NULL || counts == NULL || streams == NULL) {
        fprintf(stderr, "attn generate: out of memory\n");
        code = 1;
    }
    for (int64_t i = 0; i < n && code == 0; i++) {
        char where[1200];
        snprintf(where, sizeof where, "%s:%lld", a->input, (long long)(first + i + 1));
        int64_t line_unknown = 0;
        code = encode_prompt(bundle, a, where, lines->line[first + i], &ids[i], &counts[i],
                             &line_unknown);
        *unknown += line_unknown;
        streams[i] = (uint64_t)(first + i); /* the line, not its place in the batch */
    }
    const attn_sample_options options = sample_options(a, ATTN_EOS_ID);
    attn_generate_result *result = NULL;
    if (code == 0 && attn_bundle_generate(bundle, n, (const int32_t *const *)ids, counts, streams,
                                          &options, NULL, NULL, &result) != ATTN_OK)
        code = cli_library_error("generate");
    for (int64_t i = 0; i < n && code == 0; i++) {
        char *text = NULL;
        const attn_generation *g = &result->generations[i];
        if (attn_bundle_generated_text(bundle, g->tokens, g->length, &text) != ATTN_OK)
            code = cli_library_error("generate");
        else if (fprintf(out, "%s\n", text) < 0) {
            fprintf(stderr, "attn generate: writing the output: %s\n", strerror(errno));
            code = 1;
        }
        free(text);
    }
    if (code == 0 && fflush(out) != 0) {
        fprintf(stderr, "attn generate: writing the output: %s\n", strerror(errno));
        code = 1;
    }
    attn_generate_result_destroy(result);
    for (int64_t i = 0; ids != NULL && i < n; i++)
        free(ids[i]);
    free(ids);
    free(counts);
    free(streams);
    return code;
}

static int generate_from_file(attn_bundle *bundle, const generate_args *a, FILE *out)
{
    attn_lines lines = {0};
    if (attn_lines_read(a->input, &lines) != ATTN_OK)
        return cli_library_error_in("generate", "--input %s", a->input);
    int code = 0;
    int64_t unknown = 0;
    for (int64_t first = 0; first < lines.count && code == 0; first += a->batch) {
        const int64_t n = lines.count - first < a->batch ? lines.count - first : a->batch;
        code = generate_batch(bundle, a, &lines, first, n, out, &unknown);
    }
    if (code == 0 && unknown > 0)
        warn_unknown(a->input, unknown);
    attn_lines_free(&lines);
    return code;
}

int attn_cmd_generate(int argc, char **argv)
{
    generate_args a;
    int code = parse_args(argc, argv, &a);
    if (code != CLI_GO_ON)
        return code;
    if (a.threads > 0 && attn_set_num_threads((int)a.threads) != ATTN_OK) {
        cli_library_error("generate");
        return CLI_EXIT_USAGE;
    }
    attn_bundle *bundle = NULL;
    if (attn_bundle_load(a.model, &bundle) != ATTN_OK)
        return cli_library_error("generate");
    if (attn_bundle_check_language_model(bundle) != ATTN_OK) {
        const attn_model_arch arch = attn_bundle_config(bundle)->arch;
        if (arch == ATTN_ARCH_TRANSFORMER || arch == ATTN_ARCH_RNN)
            fprintf(stderr,
                    "attn generate: %s is an encoder-decoder (a translation model), not a "
                    "language model; translate with it: attn translate --model %s\n",
                    a.model, a.model);
        else
            cli_library_error("generate");
        attn_bundle_destroy(bundle);
        return 1;
    }
    if (cli_set_model_precision("generate", attn_bundle_model(bundle), a.precision) != 0) {
        attn_bundle_destroy(bundle);
        return 1;
    }
    FILE *out = stdout;
    if (a.output != NULL && (out = fopen(a.output, "w")) == NULL) {
        fprintf(stderr, "attn generate: --output %s: %s\n", a.output, strerror(errno));
        attn_bundle_destroy(bundle);
        return 1;
    }
    code = a.prompt != NULL ? generate_from_prompt(bundle, &a, out)
                            : generate_from_file(bundle, &a, out);
    if (out != stdout && fclose(out) != 0 && code == 0) {
        fprintf(stderr, "attn generate: --output %s: %s\n", a.output, strerror(errno));
        code = 1;
    }
    attn_bundle_destroy(bundle);
    return code;
}
