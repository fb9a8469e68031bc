/* attn translate: source lines on stdin, greedy translations on stdout, one line each. */
#include "attn/attn.h"
#include "cli/commands.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { DEFAULT_BATCH = 32 };

static void print_help(void)
{
    printf("usage: attn translate --model MODEL.safetensors [--max-len N] [--batch N] "
           "[--threads N] < input > output\n\n"
           "Translates each line of stdin (UTF-8) with greedy decoding and writes one line per\n"
           "input line to stdout; an empty line gives an empty line. MODEL is a file 'attn "
           "train'\nwrote (the model or its checkpoint).\n\noptions:\n"
           "  --model FILE   the model: weights, config and tokenizers\n"
           "  --max-len N    longest output in tokens [2 x source + 10, within the model's "
           "max_len]\n"
           "  --batch N      sentences decoded together [%d]\n"
           "  --threads N    threads (0: ATTN_NUM_THREADS or all cores) [0]\n"
           "  --help         this text\n",
           DEFAULT_BATCH);
}

static int parse_count(const char *name, const char *text, int64_t min, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < min) {
        fprintf(stderr, "attn translate: %s expects an integer >= %lld, got '%s'\n", name,
                (long long)min, text);
        return 0;
    }
    *out = value;
    return 1;
}

/* All of stdin; *size bytes, NUL-terminated. */
static char *read_stdin(size_t *size)
{
    size_t capacity = 1 << 16, n = 0;
    char *text = malloc(capacity);
    while (text != NULL) {
        n += fread(text + n, 1, capacity - n - 1, stdin);
        if (n < capacity - 1)
            break;
        capacity *= 2;
        char *grown = realloc(text, capacity);
        if (grown == NULL)
            free(text);
        text = grown;
    }
    if (text != NULL)
        text[n] = '\0';
    *size = n;
    return text;
}

typedef struct translator {
    attn_model *model;
    attn_graph *graph;
    attn_tokenizer *source, *target;
    int64_t max_len;    /* --max-len, 0: by source length */
    int64_t model_max;  /* the model's max_len */
} translator;

/* Translates lines [first, first + n) and prints them. Returns the exit code. */
static int translate_batch(translator *t, char **lines, int64_t first, int64_t n)
{
    int exit_code = 1;
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int64_t *counts = calloc((size_t)n, sizeof *counts);
    int32_t *src = NULL, *src_lengths = NULL, *out = NULL;
    int64_t *out_lengths = NULL, *rows = NULL;
    if (ids == NULL || counts == NULL)
        goto out_of_memory;
    int64_t longest = 0, size = 0;
    for (int64_t i = 0; i < n; i++) {
        attn_status status = attn_tokenizer_encode(t->source, lines[first + i], &ids[i],
                                                   &counts[i]);
        if (status != ATTN_OK) {
            fprintf(stderr, "attn translate: stdin:%lld: %s\n", (long long)(first + i + 1),
                    attn_last_error());
            goto done;
        }
        if (counts[i] > t->model_max) {
            fprintf(stderr, "attn translate: stdin:%lld: %lld tokens, above the model's max_len "
                            "%lld\n", (long long)(first + i + 1), (long long)counts[i],
                    (long long)t->model_max);
            goto done;
        }
        longest = counts[i] > longest ? counts[i] : longest;
        size += counts[i] > 0;
    }
    int64_t max_len = t->max_len > 0 ? t->max_len : 2 * longest + 10;
    max_len = max_len < t->model_max ? max_len : t->model_max;
    if (size > 0) {
        src = calloc((size_t)(size * longest), sizeof *src);
        src_lengths = calloc((size_t)size, sizeof *src_lengths);
        out = calloc((size_t)(size * max_len), sizeof *out);
        out_lengths = calloc((size_t)size, sizeof *out_lengths);
        rows = calloc((size_t)n, sizeof *rows);
        if (src == NULL || src_lengths == NULL || out == NULL || out_lengths == NULL ||
            rows == NULL)
            goto out_of_memory;
        /* Empty lines are not decoded: they print as empty lines. */
        int64_t row = 0;
        for (int64_t i = 0; i < n; i++) {
            rows[i] = counts[i] > 0 ? row : -1;
            if (counts[i] == 0)
                continue;
            memcpy(src + row * longest, ids[i], (size_t)counts[i] * sizeof *src);
            src_lengths[row++] = (int32_t)counts[i];
        }
        attn_status status = attn_greedy_decode(t->model, t->graph, size, longest, src,
                                                src_lengths, max_len, out, out_lengths);
        if (status != ATTN_OK) {
            fprintf(stderr, "attn translate: %s\n", attn_last_error());
            goto done;
        }
    }
    for (int64_t i = 0; i < n; i++) {
        char *text = NULL;
        if (counts[i] > 0) {
            attn_status status = attn_tokenizer_decode(t->target, out + rows[i] * max_len,
                                                       out_lengths[rows[i]], &text);
            if (status != ATTN_OK) {
                fprintf(stderr, "attn translate: %s\n", attn_last_error());
                goto done;
            }
        }
        printf("%s\n", text != NULL ? text : "");
        free(text);
    }
    exit_code = 0;
    goto done;
out_of_memory:
    fprintf(stderr, "attn translate: out of memory\n");
done:
    for (int64_t i = 0; ids != NULL && i < n; i++)
        free(ids[i]);
    free(ids);
    free(counts);
    free(src);
    free(src_lengths);
    free(out);
    free(out_lengths);
    free(rows);
    return exit_code;
}

static int load(const char *path, translator *t)
{
    attn_tensor_file *file = NULL;
    const char *json = NULL;
    attn_status status = attn_model_load(path, &t->model);
    if (status == ATTN_OK)
        status = attn_tensor_file_open(path, &file);
    if (status == ATTN_OK && attn_model_get_config(t->model)->arch != ATTN_ARCH_TRANSFORMER &&
        attn_model_get_config(t->model)->arch != ATTN_ARCH_RNN) {
        fprintf(stderr, "attn translate: %s is not an encoder-decoder model\n", path);
        attn_tensor_file_close(file);
        return 1;
    }
    if (status == ATTN_OK &&
        attn_tensor_file_metadata(file, ATTN_SRC_TOKENIZER_KEY, &json) != ATTN_OK) {
        fprintf(stderr, "attn translate: %s has no tokenizers (\"%s\" metadata); use a model "
                        "written by 'attn train'\n", path, ATTN_SRC_TOKENIZER_KEY);
        attn_tensor_file_close(file);
        return 1;
    }
    if (status == ATTN_OK)
        status = attn_tokenizer_from_json(json, &t->source);
    if (status == ATTN_OK)
        status = attn_tensor_file_metadata(file, ATTN_TGT_TOKENIZER_KEY, &json);
    if (status == ATTN_OK)
        status = attn_tokenizer_from_json(json, &t->target);
    attn_tensor_file_close(file);
    if (status == ATTN_OK)
        status = attn_graph_create(attn_model_params(t->model), &t->graph);
    if (status != ATTN_OK) {
        fprintf(stderr, "attn translate: %s\n", attn_last_error());
        return 1;
    }
    t->model_max = attn_model_get_config(t->model)->max_len;
    if (t->max_len > t->model_max) {
        fprintf(stderr, "attn translate: --max-len %lld is above the model's max_len %lld\n",
                (long long)t->max_len, (long long)t->model_max);
        return 2;
    }
    return 0;
}

int attn_cmd_translate(int argc, char **argv)
{
    const char *model_path = NULL;
    int64_t max_len = 0, batch = DEFAULT_BATCH, threads = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help();
            return 0;
        }
        int known = strcmp(arg, "--model") == 0 || strcmp(arg, "--max-len") == 0 ||
                    strcmp(arg, "--batch") == 0 || strcmp(arg, "--threads") == 0;
        if (!known) {
            fprintf(stderr, "attn translate: unknown option '%s' (see 'attn translate --help')\n",
                    arg);
            return 2;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "attn translate: %s needs a value\n", arg);
            return 2;
        }
        const char *value = argv[++i];
        int64_t *count = strcmp(arg, "--max-len") == 0 ? &max_len
                         : strcmp(arg, "--batch") == 0 ? &batch
                                                         : &threads;
        if (strcmp(arg, "--model") == 0)
            model_path = value;
        else if (!parse_count(arg, value, count == &threads ? 0 : 1, count))
            return 2;
    }
    if (model_path == NULL) {
        fprintf(stderr, "attn translate: --model MODEL.safetensors is required (see 'attn "
                        "translate --help')\n");
        return 2;
    }
    if (threads > 0 && attn_set_num_threads((int)threads) != ATTN_OK) {
        fprintf(stderr, "attn translate: %s\n", attn_last_error());
        return 2;
    }
    translator t = {NULL, NULL, NULL, NULL, max_len, 0};
    attn_lines lines = {0, NULL, NULL};
    char *text = NULL;
    int exit_code = load(model_path, &t);
    if (exit_code == 0) {
        size_t size = 0;
        text = read_stdin(&size);
        if (text == NULL) {
            fprintf(stderr, "attn translate: out of memory reading stdin\n");
            exit_code = 1;
        } else if (size > 0 && attn_lines_parse("stdin", text, size, &lines) != ATTN_OK) {
            fprintf(stderr, "attn translate: %s\n", attn_last_error());
            exit_code = 1;
        }
    }
    for (int64_t first = 0; exit_code == 0 && first < lines.count; first += batch) {
        int64_t n = lines.count - first < batch ? lines.count - first : batch;
        exit_code = translate_batch(&t, lines.line, first, n);
    }
    if (fflush(stdout) != 0 && exit_code == 0) {
        fprintf(stderr, "attn translate: writing stdout: %s\n", strerror(errno));
        exit_code = 1;
    }
    attn_lines_free(&lines);
    free(text);
    attn_graph_destroy(t.graph);
    attn_model_destroy(t.model);
    attn_tokenizer_destroy(t.source);
    attn_tokenizer_destroy(t.target);
    return exit_code;
}
