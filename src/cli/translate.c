/* attn translate: source lines on stdin (or --input), translations on stdout (or --output), one
 * line (or n-best lines) per input line in the --format, in order, as soon as each batch is
 * decoded; alignments beside them as JSON or Moses pairs. */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/precision.h"
#include "cli/token_words.h"
#include "cli/translator.h"
#include "cli/library_error.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { DEFAULT_BATCH = 32 };

/* How each input line's translation is written. */
typedef enum output_format {
    FORMAT_TEXT,   /* the text */
    FORMAT_TSV,    /* source<TAB>text */
    FORMAT_NBEST,  /* LINE<TAB>SCORE<TAB>TEXT */
    FORMAT_MARIAN, /* I ||| TEXT ||| SCORE, I from 0 */
} output_format;

static const char *const format_names[] = {"text", "tsv", "nbest", "marian", NULL};

typedef enum alignment_format { ALIGNMENT_JSON, ALIGNMENT_MOSES } alignment_format;

static const char *const alignment_format_names[] = {"json", "moses", NULL};

typedef struct translate_args {
    const char *model, *alignment, *input, *output, *precision;
    int64_t batch, threads, alignment_layer, alignment_head;
    int format, alignment_format;
    attn_decode_options decode;
} translate_args;

#define FIELD(name) offsetof(translate_args, name)

static const cli_option translate_options[] = {
    {CLI_OPTION("--model", CLI_STRING, FIELD(model), "FILE[,FILE...]",
                "the model: weights, config and tokenizers; several, comma-separated, decode as "
                "an ensemble: each step's log-probabilities are the mean of the models' "
                "(renormalised), alignments are the first model's. The models may differ in "
                "architecture but must share their tokenizers")},
    {CLI_OPTION("--input", CLI_STRING, FIELD(input), "FILE", "read the lines from FILE [stdin]")},
    {CLI_OPTION("--output", CLI_STRING, FIELD(output), "FILE",
                "write the translations to FILE [stdout]")},
    {CLI_OPTION("--format", CLI_CHOICE, FIELD(format), "FORM",
                "text: the translation; tsv: 'SOURCE<TAB>TRANSLATION' (a G2P lexicon); nbest: "
                "'LINE<TAB>SCORE<TAB>TEXT' (LINE counts input lines from 1); marian: 'I ||| TEXT "
                "||| SCORE' as Marian and Moses write n-best lists (I counts from 0). tsv, nbest "
                "and marian write --nbest lines per input line; an empty input line gives lines "
                "with score 0 and no text [text, or nbest with --nbest above 1]"),
     .choices = format_names},
    {CLI_OPTION("--beam", CLI_INT, FIELD(decode.beam_size), "K",
                "hypotheses kept per sentence; 1: greedy"),
     .min = 1, .max = ATTN_DECODE_MAX_BEAM, .show_default = 1},
    {CLI_OPTION("--nbest", CLI_INT, FIELD(decode.nbest), "N",
                "write the N best hypotheses per line, N <= K, as N lines in the --format [1]"),
     .min = 1, .max = ATTN_DECODE_MAX_BEAM},
    {CLI_OPTION("--alpha", CLI_NUMBER, FIELD(decode.length_penalty), "A",
                "length penalty: score = log P / ((5 + |Y|) / 6)^A"),
     .min = 0, .max = 100, .show_default = 1},
    {CLI_OPTION("--max-len-ratio", CLI_NUMBER, FIELD(decode.max_len_ratio), "R",
                "longest output: R x source tokens + O ..."),
     .min = 0, .max = 1e6, .show_default = 1},
    {CLI_OPTION("--max-len-offset", CLI_INT, FIELD(decode.max_len_offset), "O",
                "... within the model's max_len"),
     .min = 0, .max = INT32_MAX, .show_default = 1},
    {CLI_OPTION("--max-len", CLI_INT, FIELD(decode.max_len), "N",
                "longest output: N tokens, whatever the source length"),
     .min = 1, .max = INT32_MAX},
    {CLI_OPTION("--batch", CLI_INT, FIELD(batch), "N", "sentences decoded together, at most"),
     .min = 1, .max = 1 << 20, .show_default = 1},
    {CLI_OPTION("--alignment", CLI_STRING, FIELD(alignment), "FILE",
                "write the cross-attention of each line's best hypothesis to FILE in the "
                "--alignment-format")},
    {CLI_OPTION(
         "--alignment-format", CLI_CHOICE, FIELD(alignment_format), "FORM",
         "json: one line per non-empty input line: {\"line\" (its number), \"score\", "
         "\"layer\", \"source\": source tokens, \"target\": output tokens then \"</s>\" when "
         "the model ended the sentence, \"weights\": [target][source]}; 'attn viz --matrix FILE "
         "--index I' draws record I. moses: one line per input line of 'I-J' pairs, source word "
         "I (from 0) aligned to output word J, each output token aligned to the source token it "
         "attends to most, subword pieces merged into their words"),
     .choices = alignment_format_names, .show_default = 1},
    {CLI_OPTION("--alignment-layer", CLI_INT, FIELD(alignment_layer), "L",
                "the decoder layer drawn, from 0 (default: the last); its heads are averaged ..."),
     .min = 0, .max = 1 << 20},
    {CLI_OPTION("--alignment-head", CLI_INT, FIELD(alignment_head), "H",
                "... unless one head H is asked for (then \"head\": H)"),
     .min = 0, .max = 1 << 20},
    {CLI_OPTION("--threads", CLI_INT, FIELD(threads), "N",
                "threads (0: ATTN_NUM_THREADS or all cores)"),
     .min = 0, .max = 1 << 16, .show_default = 1},
    {CLI_OPTION("--precision", CLI_STRING, FIELD(precision), "auto|fp32|bf16|int8",
                CLI_INFERENCE_PRECISION_HELP)},
};
#define N_TRANSLATE_OPTIONS (sizeof translate_options / sizeof translate_options[0])

static const cli_command translate_command = {
    "translate",
    "attn translate --model MODEL.safetensors [options] < input > output\n"
    "       attn translate --model MODEL.safetensors --input FILE --output FILE [options]\n"
    "       attn translate --model A.safetensors,B.safetensors [options] (an ensemble)",
    "Translates each line of stdin or --input (UTF-8) with beam search and writes one line\n"
    "per input line to stdout or --output, in order. Lines are read in batches of up to\n"
    "--batch, or fewer when no more input is waiting, and each batch is written (and\n"
    "flushed) as soon as it is decoded, so translate works in a pipe that stays open. An\n"
    "empty line gives an empty line. A token outside the model's source vocabulary is read\n"
    "as <unk> (one warning on stderr). MODEL is a file 'attn train' wrote (the model or its\n"
    "checkpoint); several, comma-separated, translate as one ensemble.\n",
    translate_options,
    N_TRANSLATE_OPTIONS,
    NULL};

/* Returns CLI_GO_ON, or the exit code. */
static int parse_args(int argc, char **argv, translate_args *a)
{
    memset(a, 0, sizeof *a);
    a->batch = DEFAULT_BATCH;
    a->alignment_layer = -1;
    a->alignment_head = -1;
    a->decode = attn_decode_default_options();
    a->decode.beam_size = CLI_DEFAULT_BEAM;
    a->precision = "auto";
    int given[N_TRANSLATE_OPTIONS] = {0};
    const int code = cli_parse(&translate_command, argc, argv, a, given);
    if (code != CLI_GO_ON)
        return code;
    if (a->model == NULL)
        return cli_usage_error(&translate_command, "--model MODEL.safetensors is required");
    if (a->decode.nbest > a->decode.beam_size)
        return cli_usage_error(&translate_command, "--nbest %lld is above --beam %lld",
                               (long long)a->decode.nbest, (long long)a->decode.beam_size);
    if (!cli_was_given(&translate_command, given, "--format"))
        a->format = a->decode.nbest > 1 ? FORMAT_NBEST : FORMAT_TEXT;
    else if (a->format == FORMAT_TEXT && a->decode.nbest > 1)
        return cli_usage_error(&translate_command,
                               "--format text writes one line per input line: with --nbest %lld "
                               "use --format nbest, marian or tsv",
                               (long long)a->decode.nbest);
    if (cli_was_given(&translate_command, given, "--alignment-format") && a->alignment == NULL)
        return cli_usage_error(&translate_command, "--alignment-format needs --alignment FILE");
    a->decode.alignments = a->alignment != NULL;
    return CLI_GO_ON;
}

/* ---- reading the input in batches --------------------------------------------------------- */

typedef struct line_reader {
    int fd;
    const char *name; /* "stdin" or the --input path, for messages */
    char *buffer;
    size_t start, end, capacity;
    int eof;
    int64_t lines; /* lines handed out */
} line_reader;

/* Nonzero when a read of the input would not block (data, end of file or an error waiting). */
static int input_ready(const line_reader *r)
{
    struct pollfd p = {r->fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

/* Reads once from the input (blocking). 0 on success or end of file, 1 after a message. */
static int fill(line_reader *r)
{
    if (r->start > 0) {
        memmove(r->buffer, r->buffer + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->capacity - r->end < 4096) {
        size_t capacity = r->capacity > 0 ? 2 * r->capacity : 1 << 16;
        char *grown = realloc(r->buffer, capacity);
        if (grown == NULL) {
            fprintf(stderr, "attn translate: out of memory reading %s\n", r->name);
            return 1;
        }
        r->buffer = grown;
        r->capacity = capacity;
    }
    for (;;) {
        ssize_t got = read(r->fd, r->buffer + r->end, r->capacity - r->end);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0) {
            fprintf(stderr, "attn translate: reading %s: %s\n", r->name, strerror(errno));
            return 1;
        }
        r->eof = got == 0;
        r->end += (size_t)got;
        return 0;
    }
}

/* Stands in the batch for a line that is not UTF-8: it is reported, gets an empty output line,
 * and does not stop the lines around it. */
static char bad_line[] = "";

/* The next complete line (the last one may lack its "\n" at end of file) as a malloc'ed string
 * in *line (bad_line when it is not UTF-8, after a message), or NULL when none is buffered.
 * 1 after a message (out of memory). */
static int take_line(line_reader *r, char **line)
{
    *line = NULL;
    char *begin = r->buffer + r->start;
    size_t available = r->end - r->start;
    char *newline = available > 0 ? memchr(begin, '\n', available) : NULL;
    if (newline == NULL && !(r->eof && available > 0))
        return 0;
    size_t length = newline != NULL ? (size_t)(newline - begin) : available;
    r->start += length + (newline != NULL);
    r->lines++;
    if (r->lines == 1 && length >= 3 && memcmp(begin, "\xEF\xBB\xBF", 3) == 0) {
        begin += 3;
        length -= 3;
    }
    if (length > 0 && begin[length - 1] == '\r')
        length--;
    if (!attn_utf8_valid(begin, length)) {
        fprintf(stderr,
                "attn translate: %s:%lld: not valid UTF-8 text; an empty line stands "
                "in its place\n",
                r->name, (long long)r->lines);
        *line = bad_line;
        return 0;
    }
    *line = malloc(length + 1);
    if (*line == NULL) {
        fprintf(stderr, "attn translate: out of memory reading %s\n", r->name);
        return 1;
    }
    memcpy(*line, begin, length);
    (*line)[length] = '\0';
    return 0;
}

/* Up to max lines: as many as are buffered or can be read without waiting, at least one unless
 * the input has ended. *n = 0 at the end. 1 after a message. */
static int next_batch(line_reader *r, int64_t max, char **lines, int64_t *n)
{
    *n = 0;
    for (;;) {
        while (*n < max) {
            char *line;
            if (take_line(r, &line) != 0)
                return 1;
            if (line == NULL)
                break;
            lines[(*n)++] = line;
        }
        if (*n == max || (r->eof && r->start == r->end))
            return 0;
        if (*n > 0 && !input_ready(r))
            return 0;
        if (fill(r) != 0)
            return 1;
    }
}

/* ---- writing -------------------------------------------------------------------------------- */

static void write_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

static void write_json_labels(FILE *out, const char *const *labels, int64_t count)
{
    fputc('[', out);
    for (int64_t i = 0; i < count; i++) {
        if (i > 0)
            fputs(", ", out);
        write_json_string(out, labels[i]);
    }
    fputc(']', out);
}

/* The cross-attention of the best hypothesis h of a sentence, [h->steps][src_length] (the
 * last row is </s>'s when the model ended the sentence), malloc'ed, or NULL after a message. */
static float *best_alignment(const translate_args *a, const attn_decode_result *result,
                             const attn_hypothesis *h, int64_t src_length, int64_t *layer)
{
    *layer = a->alignment_layer < 0 ? result->cross_layers - 1 : a->alignment_layer;
    if (*layer >= result->cross_layers || a->alignment_head >= result->cross_heads) {
        const int bad_layer = *layer >= result->cross_layers;
        fprintf(stderr, "attn translate: --alignment-%s %lld: the model has %lld %s\n",
                bad_layer ? "layer" : "head", (long long)(bad_layer ? *layer : a->alignment_head),
                (long long)(bad_layer ? result->cross_layers : result->cross_heads),
                bad_layer ? "decoder layers" : "heads per layer");
        return NULL;
    }
    float *weights = malloc((size_t)(h->steps * src_length) * sizeof *weights);
    if (weights == NULL) {
        fprintf(stderr, "attn translate: out of memory\n");
        return NULL;
    }
    attn_decode_alignment(result, h, src_length, *layer, a->alignment_head, weights);
    return weights;
}

/* One JSON alignment record. */
static void write_json_alignment(FILE *out, const translate_args *a, int64_t line_number,
                                 const attn_hypothesis *h, int64_t layer, const float *weights,
                                 const char *const *source, int64_t src_length,
                                 const char *const *target)
{
    fprintf(out, "{\"line\": %lld, \"score\": %.6f, \"layer\": %lld", (long long)line_number,
            h->score, (long long)layer);
    if (a->alignment_head >= 0)
        fprintf(out, ", \"head\": %lld", (long long)a->alignment_head);
    fputs(", \"source\": ", out);
    write_json_labels(out, source, src_length);
    fputs(", \"target\": ", out);
    write_json_labels(out, target, h->steps);
    fputs(", \"weights\": [", out);
    for (int64_t i = 0; i < h->steps; i++) {
        fputs(i > 0 ? ", [" : "[", out);
        for (int64_t j = 0; j < src_length; j++)
            fprintf(out, j > 0 ? ", %.6g" : "%.6g", (double)weights[i * src_length + j]);
        fputc(']', out);
    }
    fputs("]}\n", out);
}

/* One Moses alignment line without its newline: each output token points at the source token
 * it attends to most; those token pairs, read as the pairs of words the tokens belong to, are
 * written once each, by source word then output word. 1 after a message (out of memory). */
static int write_moses_alignment(FILE *out, cli_translator *t, const attn_hypothesis *h,
                                 const float *weights, const char *const *source,
                                 int64_t src_length, const char *const *target)
{
    int64_t *source_word = malloc((size_t)src_length * sizeof *source_word);
    int64_t *target_word = malloc((size_t)(h->length > 0 ? h->length : 1) * sizeof *target_word);
    unsigned char *linked = NULL;
    int64_t source_words = 0, target_words = 0;
    if (source_word != NULL && target_word != NULL) {
        source_words = cli_token_words(
            attn_tokenizer_get_kind(attn_bundle_tokenizer(t->bundle, ATTN_BUNDLE_SOURCE)), source,
            src_length, source_word);
        target_words = cli_token_words(
            attn_tokenizer_get_kind(attn_bundle_tokenizer(t->bundle, ATTN_BUNDLE_TARGET)), target,
            h->length, target_word);
        linked = calloc((size_t)(source_words * target_words) + 1, 1);
    }
    if (linked == NULL) {
        free(source_word);
        free(target_word);
        free(linked);
        fprintf(stderr, "attn translate: out of memory\n");
        return 1;
    }
    for (int64_t i = 0; i < h->length; i++) {
        int64_t best = -1;
        for (int64_t j = 0; j < src_length; j++)
            if (source_word[j] >= 0 &&
                (best < 0 || weights[i * src_length + j] > weights[i * src_length + best]))
                best = j;
        if (best >= 0 && target_word[i] >= 0)
            linked[source_word[best] * target_words + target_word[i]] = 1;
    }
    const char *separator = "";
    for (int64_t i = 0; i < source_words; i++)
        for (int64_t j = 0; j < target_words; j++)
            if (linked[i * target_words + j]) {
                fprintf(out, "%s%lld-%lld", separator, (long long)i, (long long)j);
                separator = " ";
            }
    free(source_word);
    free(target_word);
    free(linked);
    return 0;
}

/* The alignment of a sentence's best hypothesis h. 1 after a message. */
static int write_alignment(FILE *out, cli_translator *t, const translate_args *a,
                           int64_t line_number, const attn_decode_result *result,
                           const attn_hypothesis *h, const int32_t *src, int64_t src_length)
{
    int64_t layer = 0;
    float *weights = best_alignment(a, result, h, src_length, &layer);
    const char **source = malloc((size_t)src_length * sizeof *source);
    const char **target = malloc((size_t)h->steps * sizeof *target);
    int code = 1;
    if (weights == NULL || source == NULL || target == NULL) {
        if (weights != NULL)
            fprintf(stderr, "attn translate: out of memory\n");
        goto done;
    }
    attn_bundle_labels(t->bundle, ATTN_BUNDLE_SOURCE, src, src_length, source);
    attn_bundle_labels(t->bundle, ATTN_BUNDLE_TARGET, h->tokens, h->length, target);
    if (h->finished)
        target[h->length] = "</s>";
    if (a->alignment_format == ALIGNMENT_JSON) {
        write_json_alignment(out, a, line_number, h, layer, weights, source, src_length, target);
        code = 0;
    } else {
        code = write_moses_alignment(out, t, h, weights, source, src_length, target);
    }
done:
    free(weights);
    free(source);
    free(target);
    return code;
}

/* The lines of one hypothesis (h NULL: an input line that has none) in the --format. */
static void write_translation(FILE *out, const translate_args *a, int64_t line_number,
                              const char *source, const attn_hypothesis *h, const char *text)
{
    const double score = h != NULL ? h->score : 0.0;
    if (text == NULL)
        text = "";
    switch ((output_format)a->format) {
    case FORMAT_TEXT:
        fprintf(out, "%s\n", text);
        break;
    case FORMAT_TSV:
        fprintf(out, "%s\t%s\n", source, text);
        break;
    case FORMAT_NBEST:
        fprintf(out, "%lld\t%.6f\t%s\n", (long long)line_number, score, text);
        break;
    case FORMAT_MARIAN:
        fprintf(out, "%lld ||| %s ||| %.6f\n", (long long)line_number - 1, text, score);
        break;
    }
}

/* Translates lines[0, n), the first being input line first_number, and writes them to out; a
 * line that is not UTF-8 or cannot be encoded (too long for the model) gets an empty output
 * line and is counted in *bad. Returns the exit code. */
static int translate_lines(cli_translator *t, const translate_args *a, const char *input_name,
                           FILE *out, FILE *alignment, char **lines, int64_t n,
                           int64_t first_number, int64_t *bad)
{
    int code = 1;
    int32_t **ids = calloc((size_t)n, sizeof *ids);
    int32_t **decoded_ids = calloc((size_t)n, sizeof *decoded_ids);
    int64_t *counts = calloc((size_t)n, sizeof *counts);
    int64_t *decoded_counts = calloc((size_t)n, sizeof *decoded_counts);
    attn_decode_result *result = NULL;
    if (ids == NULL || decoded_ids == NULL || counts == NULL || decoded_counts == NULL) {
        fprintf(stderr, "attn translate: out of memory\n");
        goto done;
    }
    /* Empty lines are not decoded: they print as empty lines. */
    int64_t decoded = 0;
    for (int64_t i = 0; i < n; i++) {
        char where[1100];
        snprintf(where, sizeof where, "%s:%lld", input_name, (long long)(first_number + i));
        if (lines[i] == bad_line) {
            ++*bad;
            continue;
        }
        if (cli_translator_encode(t, where, lines[i], &ids[i], &counts[i]) != 0) {
            ++*bad;
            counts[i] = 0;
            continue;
        }
        if (counts[i] > 0) {
            decoded_ids[decoded] = ids[i];
            decoded_counts[decoded++] = counts[i];
        }
    }
    if (decoded > 0 &&
        cli_translator_decode(t, decoded, decoded_ids, decoded_counts, &a->decode, &result) != 0)
        goto done;
    for (int64_t i = 0, row = 0; i < n; i++) {
        const int64_t number = first_number + i;
        const attn_decode_sentence *s = counts[i] > 0 ? &result->sentences[row++] : NULL;
        for (int64_t j = 0; j < a->decode.nbest; j++) {
            const attn_hypothesis *h = s != NULL && j < s->count ? &s->hypotheses[j] : NULL;
            char *text = h != NULL ? cli_translator_text(t, h) : NULL;
            if (h != NULL && text == NULL)
                goto done;
            write_translation(out, a, number, lines[i], h, text);
            free(text);
        }
        if (alignment != NULL && s != NULL && s->count > 0 &&
            write_alignment(alignment, t, a, number, result, &s->hypotheses[0], ids[i],
                            counts[i]) != 0)
            goto done;
        /* Moses alignments keep one line per input line, so that they pair with the input. */
        if (alignment != NULL && a->alignment_format == ALIGNMENT_MOSES)
            fputc('\n', alignment);
    }
    code = 0;
done:
    for (int64_t i = 0; ids != NULL && i < n; i++)
        free(ids[i]);
    free(ids);
    free(decoded_ids);
    free(counts);
    free(decoded_counts);
    attn_decode_result_destroy(result);
    return code;
}

/* Opens what --input and --output name (stdin and stdout when not given). 1 after a message. */
static int open_files(const translate_args *a, line_reader *reader, FILE **out)
{
    reader->fd = STDIN_FILENO;
    reader->name = "stdin";
    *out = stdout;
    if (a->input != NULL) {
        reader->fd = open(a->input, O_RDONLY);
        reader->name = a->input;
        if (reader->fd < 0) {
            fprintf(stderr, "attn translate: --input %s: %s\n", a->input, strerror(errno));
            return 1;
        }
    }
    if (a->output != NULL && (*out = fopen(a->output, "w")) == NULL) {
        fprintf(stderr, "attn translate: --output %s: %s\n", a->output, strerror(errno));
        return 1;
    }
    return 0;
}

/* Flushes or closes (close) out; 1 after a message when writing failed. */
static int finish_output(FILE *out, const char *name, int close)
{
    if ((close ? fclose(out) : fflush(out)) == 0)
        return 0;
    fprintf(stderr, "attn translate: writing %s: %s\n", name, strerror(errno));
    return 1;
}

int attn_cmd_translate(int argc, char **argv)
{
    translate_args a;
    int code = parse_args(argc, argv, &a);
    if (code != CLI_GO_ON)
        return code;
    if (a.threads > 0 && attn_set_num_threads((int)a.threads) != ATTN_OK) {
        cli_library_error("translate");
        return 2;
    }
    cli_translator t;
    if (cli_translator_load(&t, "translate", a.model) != 0 ||
        cli_translator_set_precision(&t, a.precision) != 0) {
        cli_translator_free(&t);
        return 1;
    }
    const int64_t model_max_len = cli_translator_max_len(&t);
    if (a.decode.max_len > model_max_len) {
        fprintf(stderr, "attn translate: --max-len %lld is above the model's max_len %lld\n",
                (long long)a.decode.max_len, (long long)model_max_len);
        cli_translator_free(&t);
        return 2;
    }
    line_reader reader;
    memset(&reader, 0, sizeof reader);
    FILE *out = NULL, *alignment = NULL;
    const char *out_name = a.output != NULL ? a.output : "stdout";
    char **lines = NULL;
    code = open_files(&a, &reader, &out);
    if (code == 0 && a.alignment != NULL && (alignment = fopen(a.alignment, "w")) == NULL) {
        fprintf(stderr, "attn translate: --alignment %s: %s\n", a.alignment, strerror(errno));
        code = 1;
    }
    if (code == 0 && (lines = calloc((size_t)a.batch, sizeof *lines)) == NULL) {
        fprintf(stderr, "attn translate: out of memory\n");
        code = 1;
    }
    int64_t bad = 0;
    while (code == 0) {
        int64_t n = 0, first = reader.lines + 1;
        code = next_batch(&reader, a.batch, lines, &n);
        if (code == 0 && n == 0)
            break;
        if (code == 0)
            code = translate_lines(&t, &a, reader.name, out, alignment, lines, n, first, &bad);
        for (int64_t i = 0; i < n; i++)
            if (lines[i] != bad_line)
                free(lines[i]);
        if (finish_output(out, out_name, 0) != 0 && code == 0)
            code = 1;
        if (alignment != NULL && finish_output(alignment, a.alignment, 0) != 0 && code == 0)
            code = 1;
    }
    if (alignment != NULL && finish_output(alignment, a.alignment, 1) != 0 && code == 0)
        code = 1;
    if (out != NULL && out != stdout && finish_output(out, out_name, 1) != 0 && code == 0)
        code = 1;
    if (a.input != NULL && reader.fd >= 0)
        close(reader.fd);
    if (code == 0 && bad > 0) {
        /* Every good line is out; the status still tells a script that some were not. */
        fprintf(stderr,
                "attn translate: %lld of %lld lines could not be translated (see above); "
                "each has an empty line in its place\n",
                (long long)bad, (long long)reader.lines);
        code = 1;
    }
    free(lines);
    free(reader.buffer);
    cli_translator_free(&t);
    return code;
}
