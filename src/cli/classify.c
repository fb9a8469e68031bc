/* attn classify: each line of text through a classifier (attn train --task classify), in
 * batches; the most probable classes and their probabilities per line, as text or JSON lines. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/options.h"
#include "cli/precision.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_BATCH = 64 };

typedef struct classify_args {
    const char *model, *input, *output, *precision;
    int64_t top_k, batch, threads;
    int format; /* 0 text, 1 json */
    int truncate;
} classify_args;

/* What the lines had that the output does not show, reported once at the end. */
typedef struct classify_counts {
    int64_t unknown; /* tokens read as <unk> */
    int64_t cut;     /* lines cut by --truncate */
} classify_counts;

#define FIELD(name) offsetof(classify_args, name)

static const char *const format_names[] = {"text", "json", NULL};
static const int format_values[] = {0, 1};

static const cli_option classify_options[] = {
    {CLI_OPTION("--model", CLI_STRING, FIELD(model), "FILE",
                "a classifier (arch transformer_classifier or rnn_classifier) with its tokenizer "
                "and class names, as 'attn train --task classify' writes it")},
    {CLI_OPTION("--input", CLI_STRING, FIELD(input), "FILE",
                "the texts, one per line [stdin]; a line 'label<TAB>text' (a training file) is "
                "read as its text")},
    {CLI_OPTION("--output", CLI_STRING, FIELD(output), "FILE", "write to FILE [stdout]")},
    {CLI_OPTION("--top-k", CLI_INT, FIELD(top_k), "K",
                "text: the K most probable classes per line, as label<TAB>probability pairs, "
                "most probable first"),
     .min = 1, .max = INT32_MAX, .show_default = 1},
    {CLI_OPTION("--format", CLI_CHOICE, FIELD(format), "text|json",
                "text: label<TAB>probability; json: one object per line with the label, its "
                "probability and every class's probability"),
     .choices = format_names, .choice_values = format_values, .show_default = 1},
    {CLI_OPTION("--truncate", CLI_FLAG, FIELD(truncate), NULL,
                "keep the first tokens of a line too long for the model instead of refusing it")},
    {CLI_OPTION("--batch", CLI_INT, FIELD(batch), "N", "lines classified together, at most"),
     .min = 1, .max = 1 << 20, .show_default = 1},
    {CLI_OPTION("--threads", CLI_INT, FIELD(threads), "N",
                "threads (0: ATTN_NUM_THREADS or all cores)"),
     .min = 0, .max = 1 << 16, .show_default = 1},
    {CLI_OPTION("--precision", CLI_STRING, FIELD(precision), "auto|fp32|bf16|int8",
                CLI_INFERENCE_PRECISION_HELP)},
};
#define N_CLASSIFY_OPTIONS (sizeof classify_options / sizeof classify_options[0])

static const cli_command classify_command = {
    "classify",
    "attn classify --model CLF.safetensors [--input FILE] [--output FILE] [--top-k K] "
    "[--format text|json]",
    "Classifies lines of text with a model 'attn train --task classify' wrote: one output line\n"
    "per input line, in order. Text lines are label<TAB>probability (with --top-k K, K such\n"
    "pairs on the line); --format json writes {\"label\": ..., \"probability\": ...,\n"
    "\"probabilities\": {class: probability, ...}} per line. An input line 'label<TAB>text'\n"
    "is read as its text, so a labelled file classifies as it is (attn eval --metric\n"
    "accuracy|f1 then compares the two). An empty line is an error naming the line, and so is\n"
    "one longer than the model reads (max_len tokens) unless --truncate keeps its first\n"
    "tokens; tokens outside the vocabulary are read as <unk> (counted).\n",
    classify_options,
    N_CLASSIFY_OPTIONS,
    NULL};

static int parse_args(int argc, char **argv, classify_args *a)
{
    memset(a, 0, sizeof *a);
    a->top_k = 1;
    a->batch = DEFAULT_BATCH;
    a->precision = "auto";
    int given[N_CLASSIFY_OPTIONS] = {0};
    const int code = cli_parse(&classify_command, argc, argv, a, given);
    if (code != CLI_GO_ON)
        return code;
    if (a->model == NULL)
        return cli_usage_error(&classify_command, "--model CLF.safetensors is required");
    if (a->format == 1 && cli_was_given(&classify_command, given, "--top-k"))
        return cli_usage_error(&classify_command,
                               "--top-k is for text output: --format json gives every class");
    return CLI_GO_ON;
}

/* The text of a line: after the first TAB when there is one (a labelled line). */
static const char *text_of(const char *line)
{
    const char *tab = strchr(line, '\t');
    return tab != NULL ? tab + 1 : line;
}

static int write_failed(void)
{
    fprintf(stderr, "attn classify: writing the output: %s\n", strerror(errno));
    return 1;
}

/* One line of JSON for a row of probabilities. */
static int write_json(FILE *out, const attn_labels *labels, const float *p, int64_t best)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *all = cJSON_CreateObject();
    int ok = root != NULL && all != NULL &&
             cJSON_AddStringToObject(root, "label", attn_labels_name(labels, best)) != NULL &&
             cJSON_AddNumberToObject(root, "probability", (double)p[best]) != NULL;
    for (int64_t k = 0; ok && k < attn_labels_count(labels); k++)
        ok = cJSON_AddNumberToObject(all, attn_labels_name(labels, k), (double)p[k]) != NULL;
    if (ok && cJSON_AddItemToObject(root, "probabilities", all))
        all = NULL;
    else
        ok = 0;
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(all);
    cJSON_Delete(root);
    if (text == NULL) {
        fprintf(stderr, "attn classify: out of memory\n");
        return 1;
    }
    const int code = fprintf(out, "%s\n", text) < 0 ? write_failed() : 0;
    free(text);
    return code;
}

/* The K most probable classes, most probable first (the first class on ties). */
static int write_text(FILE *out, const attn_labels *labels, const float *p, int64_t k,
                      int64_t *order)
{
    const int64_t classes = attn_labels_count(labels);
    for (int64_t i = 0; i < classes; i++)
        order[i] = i;
    if (k > classes)
        k = classes;
    for (int64_t i = 0; i < k; i++) /* a partial selection sort: k is small */
        for (int64_t j = i + 1; j < classes; j++)
            if (p[order[j]] > p[order[i]] || (p[order[j]] == p[order[i]] && order[j] < order[i])) {
                const int64_t t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    for (int64_t i = 0; i < k; i++)
        if (fprintf(out, "%s%s\t%.6f", i == 0 ? "" : "\t", attn_labels_name(labels, order[i]),
                    (double)p[order[i]]) < 0)
            return write_failed();
    return fputc('\n', out) == EOF ? write_failed() : 0;
}

/* Classifies lines [first, first + n) and writes one output line each. */
static int classify_batch(attn_bundle *bundle, const classify_args *a, const char *name,
                          const attn_lines *lines, int64_t first, int64_t n, FILE *out,
                          classify_counts *seen)
{
    const attn_labels *labels = attn_bundle_classes(bundle);
    const int64_t classes = attn_labels_count(labels);
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int64_t *counts = calloc((size_t)n, sizeof *counts);
    float *probabilities = malloc((size_t)(n * classes) * sizeof *probabilities);
    int64_t *order = malloc((size_t)classes * sizeof *order);
    int code = 0;
    if (ids == NULL || counts == NULL || probabilities == NULL || order == NULL) {
        fprintf(stderr, "attn classify: out of memory\n");
        code = 1;
    }
    for (int64_t i = 0; i < n && code == 0; i++) {
        const long long line = (long long)(first + i + 1);
        int64_t line_unknown = 0, cut = 0;
        if (attn_bundle_encode_truncated(bundle, text_of(lines->line[first + i]), &ids[i],
                                         &counts[i], &line_unknown, &cut) != ATTN_OK)
            code = cli_library_error_in("classify", "%s:%lld", name, line);
        else if (cut > 0 && !a->truncate) {
            fprintf(stderr,
                    "attn classify: %s:%lld: the line is %lld tokens, above the %lld the model "
                    "reads; shorten it, or pass --truncate to keep its first %lld tokens\n",
                    name, line, (long long)(counts[i] + cut), (long long)counts[i],
                    (long long)counts[i]);
            code = 1;
        } else if (counts[i] == 0) {
            fprintf(stderr,
                    "attn classify: %s:%lld: the line has no text to classify (no tokens); "
                    "remove it or give it text\n",
                    name, line);
            code = 1;
        }
        seen->unknown += line_unknown;
        seen->cut += cut > 0;
    }
    if (code == 0 && attn_bundle_classify(bundle, n, (const int32_t *const *)ids, counts,
                                          probabilities) != ATTN_OK)
        code = cli_library_error("classify");
    for (int64_t i = 0; i < n && code == 0; i++) {
        const float *p = probabilities + i * classes;
        const int64_t best = attn_argmax(classes, p);
        code = a->format == 1 ? write_json(out, labels, p, best)
                              : write_text(out, labels, p, a->top_k, order);
    }
    for (int64_t i = 0; ids != NULL && i < n; i++)
        free(ids[i]);
    free(ids);
    free(counts);
    free(probabilities);
    free(order);
    return code;
}

/* The lines of --input, or of stdin. */
static int read_input(const classify_args *a, attn_lines *lines)
{
    if (a->input != NULL) {
        if (attn_lines_read(a->input, lines) != ATTN_OK)
            return cli_library_error_in("classify", "--input %s", a->input);
        return 0;
    }
    size_t size = 0, capacity = 1 << 16;
    char *text = malloc(capacity);
    for (;;) {
        if (text == NULL) {
            fprintf(stderr, "attn classify: out of memory reading stdin\n");
            return 1;
        }
        size += fread(text + size, 1, capacity - size, stdin);
        if (size < capacity)
            break;
        capacity *= 2;
        char *grown = realloc(text, capacity);
        if (grown == NULL)
            free(text);
        text = grown;
    }
    if (ferror(stdin)) {
        fprintf(stderr, "attn classify: reading stdin: %s\n", strerror(errno));
        free(text);
        return 1;
    }
    if (size == 0) { /* nothing to classify: no output, as an empty file would give */
        free(text);
        return 0;
    }
    const attn_status status = attn_lines_parse("stdin", text, size, lines);
    free(text);
    return status == ATTN_OK ? 0 : cli_library_error("classify");
}

int attn_cmd_classify(int argc, char **argv)
{
    classify_args a;
    int code = parse_args(argc, argv, &a);
    if (code != CLI_GO_ON)
        return code;
    if (a.threads > 0 && attn_set_num_threads((int)a.threads) != ATTN_OK) {
        cli_library_error("classify");
        return CLI_EXIT_USAGE;
    }
    attn_bundle *bundle = NULL;
    if (attn_bundle_load(a.model, &bundle) != ATTN_OK)
        return cli_library_error("classify");
    if (attn_bundle_check_classifier(bundle) != ATTN_OK) {
        const attn_model_arch arch = attn_bundle_config(bundle)->arch;
        fprintf(stderr,
                "attn classify: %s is not a text classifier (it is arch %s); train one with "
                "'attn train --task classify'%s\n",
                a.model,
                arch == ATTN_ARCH_TRANSFORMER_LM    ? "transformer_lm, a language model"
                : arch == ATTN_ARCH_TRANSFORMER_MLM ? "transformer_mlm, a pretrained encoder"
                                                    : "transformer or rnn, a translation model",
                arch == ATTN_ARCH_TRANSFORMER_LM ? ", or continue text with 'attn generate'"
                : arch == ATTN_ARCH_TRANSFORMER_MLM
                    ? " --init on it (fine-tuning the encoder with a new head)"
                    : ", or translate with 'attn translate'");
        attn_bundle_destroy(bundle);
        return 1;
    }
    if (cli_set_model_precision("classify", attn_bundle_model(bundle), a.precision) != 0) {
        attn_bundle_destroy(bundle);
        return 1;
    }
    attn_lines lines = {0};
    code = read_input(&a, &lines);
    FILE *out = stdout;
    if (code == 0 && a.output != NULL && (out = fopen(a.output, "w")) == NULL) {
        fprintf(stderr, "attn classify: --output %s: %s\n", a.output, strerror(errno));
        code = 1;
    }
    const char *name = a.input != NULL ? a.input : "stdin";
    classify_counts seen = {0, 0};
    for (int64_t first = 0; code == 0 && first < lines.count; first += a.batch) {
        const int64_t n = lines.count - first < a.batch ? lines.count - first : a.batch;
        code = classify_batch(bundle, &a, name, &lines, first, n, out, &seen);
    }
    if (code == 0 && fflush(out) != 0)
        code = write_failed();
    if (code == 0 && seen.unknown > 0)
        fprintf(stderr,
                "attn classify: warning: %lld token%s outside the model's vocabulary read as "
                "<unk>\n",
                (long long)seen.unknown, seen.unknown == 1 ? " was" : "s were");
    if (code == 0 && seen.cut > 0)
        fprintf(stderr, "attn classify: %lld line%s cut to the first %lld tokens (--truncate)\n",
                (long long)seen.cut, seen.cut == 1 ? " was" : "s were",
                (long long)attn_bundle_source_limit(bundle));
    if (out != NULL && out != stdout && fclose(out) != 0 && code == 0) {
        fprintf(stderr, "attn classify: --output %s: %s\n", a.output, strerror(errno));
        code = 1;
    }
    attn_lines_free(&lines);
    attn_bundle_destroy(bundle);
    return code;
}
