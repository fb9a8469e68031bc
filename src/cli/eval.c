/* attn eval: scores system output against references (BLEU, chrF, WER, G2P WER/PER), and a
 * language model on a text (perplexity). */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/label_files.h"
#include "cli/library_error.h"
#include "cli/options.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    EXIT_BAD_DATA = 1,
    EXIT_USAGE = CLI_EXIT_USAGE,
    MAX_REFS = CLI_MAX_REPEATS,
    LINE_SIZE = 512
};

typedef enum {
    METRIC_BLEU,
    METRIC_CHRF,
    METRIC_WER,
    METRIC_PER,
    METRIC_PERPLEXITY,
    METRIC_ACCURACY,
    METRIC_F1,
    METRIC_COUNT
} metric;
static const char *const metric_names[METRIC_COUNT] = {"bleu",       "chrf",     "wer", "per",
                                                       "perplexity", "accuracy", "f1"};

/* Perplexity's decimals unless --width says otherwise: two would hide most differences. */
enum { PERPLEXITY_WIDTH = 4, DEFAULT_PERPLEXITY_BATCH = 16, EVAL_MASK_SEED = 1 };

typedef enum { FORMAT_AUTO, FORMAT_TEXT, FORMAT_TSV } input_format;

typedef struct eval_options {
    metric metrics[16];
    int n_metrics;
    cli_strings metric_lists; /* each "bleu,chrf" as given */
    cli_strings refs;
    const char *hyp;   /* NULL or "-": standard input */
    const char *model; /* perplexity: the language model */
    int64_t batch;     /* perplexity: windows scored together */
    int format;        /* input_format */
    int64_t width;
    int score_only;
} eval_options;

#define FIELD(name) offsetof(eval_options, name)

static const char *const format_names[] = {"auto", "text", "tsv", NULL};

static const cli_option eval_options_table[] = {
    {CLI_OPTION("--metric", CLI_STRINGS, FIELD(metric_lists), "M",
                "one or more of bleu, chrf, wer, per, comma-separated (repeatable); or "
                "perplexity alone; or accuracy, f1 (a classifier's labels)")},
    {CLI_OPTION("--ref", CLI_STRINGS, FIELD(refs), "FILE",
                "reference file (repeatable for translation)")},
    {CLI_OPTION("--hyp", CLI_STRING, FIELD(hyp), "FILE",
                "system output; '-' or omitted: read standard input")},
    {CLI_OPTION("--format", CLI_CHOICE, FIELD(format), "F",
                "auto (default: TSV if REF's first line has a TAB), text or tsv"),
     .choices = format_names},
    {CLI_OPTION("--width", CLI_INT, FIELD(width), "N", "decimals of the score"), .min = 0,
     .max = 17, .show_default = 1},
    {CLI_OPTION("--score-only", CLI_FLAG, FIELD(score_only), NULL, "print only the score")},
    {CLI_OPTION("--model", CLI_STRING, FIELD(model), "FILE",
                "perplexity: the language model (arch transformer_lm or transformer_mlm) scored "
                "on REF")},
    {CLI_OPTION("--batch", CLI_INT, FIELD(batch), "N",
                "perplexity: windows of max_len + 1 tokens (a masked language model: lines) "
                "scored together"),
     .min = 1, .max = 1 << 16, .show_default = 1},
};
#define N_EVAL_OPTIONS (sizeof eval_options_table / sizeof eval_options_table[0])

static const cli_command eval_command = {
    "eval",
    "attn eval --metric METRIC[,METRIC...] --ref REF [--ref REF2 ...] [--hyp HYP]\n"
    "                 [--format auto|text|tsv] [--width N] [--score-only]",
    "Scores a system's output HYP against references REF.\n"
    "\n"
    "Translation (REF and HYP: one sentence per line, line i of each aligned):\n"
    "  bleu   corpus BLEU exactly as sacreBLEU 2.x's default: 13a tokenization, n-grams\n"
    "         up to 4, exp smoothing, case-sensitive; printed as sacreBLEU prints it.\n"
    "         Several --ref files give several references per sentence (an empty line\n"
    "         leaves that sentence one reference fewer).\n"
    "  chrf   sacreBLEU's chrF2: character 6-grams, whitespace removed, beta 2.\n"
    "  wer    word error rate: word edit distance to the closest reference over its\n"
    "         length, summed over the corpus.\n"
    "\n"
    "G2P (REF: a TSV of word<TAB>phonemes, several lines per word for several\n"
    "pronunciations; HYP: a TSV with one line per word, as the G2P recipe writes):\n"
    "  wer    share of words whose hypothesis matches none of their pronunciations.\n"
    "  per    phoneme edits to each word's closest pronunciation (fewest edits, the\n"
    "         longer on a tie) summed over words, over those pronunciations' lengths.\n"
    "         Words of REF missing from HYP count as wrong and fully deleted.\n"
    "\n"
    "Language model (attn eval --metric perplexity --model LM.safetensors --ref TEXT):\n"
    "  perplexity  the model reads TEXT as it was trained: each line's tokens, then the\n"
    "         end of line; the stream is cut into windows of max_len + 1 tokens that\n"
    "         overlap by one, so each token after the first is predicted once. Prints the\n"
    "         cross-entropy (nats per token), perplexity, bits per token and bits per\n"
    "         character (UTF-8 characters, each line's newline counted).\n"
    "         A masked language model (attn train --task mlm) reads each line as one text,\n"
    "         masked by BERT's rule with the fixed seed 1: prints the masked tokens'\n"
    "         cross-entropy, perplexity and share restored.\n"
    "\n"
    "Classifier (REF: gold labels, HYP: predicted labels, one per line, line i of each\n"
    "aligned; a line 'label<TAB>...' counts as its label, so a labelled file and the\n"
    "output of 'attn classify' compare as they are):\n"
    "  accuracy  the share of lines whose predicted label is the gold one.\n"
    "  f1        macro-F1: the mean over the classes (gold or predicted labels) of each\n"
    "         class's F1, the harmonic mean of its precision and recall.\n"
    "         Either prints both, then each class's precision, recall, F1 and support,\n"
    "         and the confusion matrix (rows gold, columns predicted).\n",
    eval_options_table,
    N_EVAL_OPTIONS,
    "Exit status: 0 scored, 1 bad data (unreadable file, different line counts,\n"
    "malformed TSV, invalid UTF-8), 2 bad usage.\n"};

/* Adds the metrics of one comma-separated --metric value. */
static int parse_metrics(const char *list, eval_options *opt)
{
    const char *p = list;
    for (;;) {
        size_t length = strcspn(p, ",");
        int found = -1;
        for (int m = 0; m < METRIC_COUNT; m++)
            if (strlen(metric_names[m]) == length && strncmp(p, metric_names[m], length) == 0)
                found = m;
        if (found < 0)
            return cli_usage_error(&eval_command,
                                   "unknown metric '%.*s' (bleu, chrf, wer, per, perplexity, "
                                   "accuracy or f1)",
                                   (int)length, p);
        if (opt->n_metrics == (int)(sizeof opt->metrics / sizeof *opt->metrics))
            return cli_usage_error(&eval_command, "too many metrics in '%s'", list);
        opt->metrics[opt->n_metrics++] = (metric)found;
        if (p[length] == '\0')
            return 0;
        p += length + 1;
    }
}

/* Returns CLI_GO_ON, or the exit code. */
static int parse_options(int argc, char **argv, eval_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->width = 2;
    opt->format = FORMAT_AUTO;
    opt->batch = DEFAULT_PERPLEXITY_BATCH;
    int given[N_EVAL_OPTIONS] = {0};
    const int code = cli_parse(&eval_command, argc, argv, opt, given);
    if (code != CLI_GO_ON)
        return code;
    for (int i = 0; i < opt->metric_lists.count; i++)
        if (parse_metrics(opt->metric_lists.items[i], opt) != 0)
            return EXIT_USAGE;
    if (opt->n_metrics == 0)
        return cli_usage_error(&eval_command, "--metric is required");
    if (opt->refs.count == 0)
        return cli_usage_error(&eval_command, "--ref is required");
    int perplexity = 0, labels = 0;
    for (int k = 0; k < opt->n_metrics; k++) {
        perplexity |= opt->metrics[k] == METRIC_PERPLEXITY;
        labels += opt->metrics[k] == METRIC_ACCURACY || opt->metrics[k] == METRIC_F1;
    }
    if (labels > 0 && labels < opt->n_metrics)
        return cli_usage_error(&eval_command, "accuracy and f1 score labels, not sentences: give "
                                              "them without the other metrics");
    if (labels > 0 && opt->refs.count > 1)
        return cli_usage_error(&eval_command, "accuracy and f1 read one --ref file of gold "
                                              "labels");
    if (perplexity && opt->n_metrics > 1)
        return cli_usage_error(&eval_command, "perplexity scores a model, not output: give it "
                                              "as the only --metric");
    if (perplexity && opt->model == NULL)
        return cli_usage_error(&eval_command, "perplexity needs --model LM.safetensors");
    if (perplexity && (opt->refs.count > 1 || opt->hyp != NULL))
        return cli_usage_error(&eval_command,
                               "perplexity reads one text, --ref TEXT, and no --hyp");
    if (!perplexity && opt->model != NULL)
        return cli_usage_error(&eval_command, "--model is for --metric perplexity");
    if (perplexity && !cli_was_given(&eval_command, given, "--width"))
        opt->width = PERPLEXITY_WIDTH;
    return CLI_GO_ON;
}

static int report_failure(void)
{
    fprintf(stderr, "attn eval: %s\n", cli_library_message());
    return EXIT_BAD_DATA;
}

/* Reads standard input whole into lines named "<stdin>". */
static attn_status read_stdin(attn_lines *out)
{
    size_t size = 0, capacity = 1 << 16;
    char *text = malloc(capacity);
    if (text == NULL) {
        fprintf(stderr, "attn eval: out of memory reading standard input\n");
        return ATTN_ERR_OUT_OF_MEMORY;
    }
    for (;;) {
        size_t got = fread(text + size, 1, capacity - size, stdin);
        size += got;
        if (size < capacity) {
            if (ferror(stdin)) {
                free(text);
                fprintf(stderr, "attn eval: cannot read standard input\n");
                return ATTN_ERR_IO;
            }
            if (feof(stdin))
                break;
            continue;
        }
        char *grown = capacity <= SIZE_MAX / 2 ? realloc(text, capacity * 2) : NULL;
        if (grown == NULL) {
            free(text);
            fprintf(stderr, "attn eval: out of memory reading standard input\n");
            return ATTN_ERR_OUT_OF_MEMORY;
        }
        text = grown;
        capacity *= 2;
    }
    attn_status status = attn_lines_parse("<stdin>", text, size, out);
    free(text);
    if (status != ATTN_OK)
        report_failure();
    return status;
}

static int is_blank(const char *s)
{
    return s[strspn(s, " \t\n\v\f\r")] == '\0';
}

/* Prints "NAME = score detail" or, with --score-only, the score alone. */
static void print_score(const eval_options *opt, const char *name, double score, const char *detail)
{
    if (opt->score_only)
        printf("%.*f\n", (int)opt->width, score);
    else
        printf("%s = %.*f %s\n", name, (int)opt->width, score, detail);
}

static int score_translation(const eval_options *opt, attn_lines *refs, const char *hyp_name,
                             const attn_lines *hyp)
{
    const char *const *ref_streams[MAX_REFS];
    for (int r = 0; r < opt->refs.count; r++) {
        if (refs[r].count != hyp->count) {
            fprintf(stderr, "attn eval: %s has %lld lines but %s has %lld\n", hyp_name,
                    (long long)hyp->count, opt->refs.items[r], (long long)refs[r].count);
            return EXIT_BAD_DATA;
        }
        ref_streams[r] = (const char *const *)refs[r].line;
    }
    for (int64_t i = 0; i < hyp->count; i++) {
        int present = 0;
        for (int r = 0; r < opt->refs.count; r++)
            present += !is_blank(refs[r].line[i]);
        if (present == 0) {
            fprintf(stderr, "attn eval: %s:%lld: empty reference%s\n", opt->refs.items[0],
                    (long long)(i + 1), opt->refs.count > 1 ? " (in every --ref file)" : "");
            return EXIT_BAD_DATA;
        }
    }
    const char *const *hyps = (const char *const *)hyp->line;
    char line[LINE_SIZE];
    for (int k = 0; k < opt->n_metrics; k++) {
        if (opt->metrics[k] == METRIC_BLEU) {
            attn_bleu_result bleu;
            if (attn_bleu_corpus(NULL, hyps, hyp->count, ref_streams, opt->refs.count, &bleu) !=
                    ATTN_OK ||
                attn_bleu_format(&bleu, (int)opt->width, line, sizeof line) != ATTN_OK)
                return report_failure();
            if (opt->score_only)
                printf("%.*f\n", (int)opt->width, bleu.score);
            else
                printf("%s\n", line);
        } else if (opt->metrics[k] == METRIC_CHRF) {
            attn_chrf_result chrf;
            if (attn_chrf_corpus(NULL, hyps, hyp->count, ref_streams, opt->refs.count, &chrf) !=
                    ATTN_OK ||
                attn_chrf_format(&chrf, (int)opt->width, line, sizeof line) != ATTN_OK)
                return report_failure();
            if (opt->score_only)
                printf("%.*f\n", (int)opt->width, chrf.score);
            else
                printf("%s\n", line);
        } else {
            attn_wer_result wer;
            if (attn_wer_corpus(hyps, hyp->count, ref_streams, opt->refs.count, &wer) != ATTN_OK)
                return report_failure();
            snprintf(line, sizeof line, "(%lld edits / %lld reference words)", (long long)wer.edits,
                     (long long)wer.reference_words);
            print_score(opt, "WER", wer.wer, line);
        }
    }
    return 0;
}

static int score_g2p(const eval_options *opt, const attn_lines *ref, const char *hyp_name,
                     const attn_lines *hyp)
{
    attn_g2p_result g2p;
    if (attn_g2p_score(opt->refs.items[0], (const char *const *)ref->line, ref->count, hyp_name,
                       (const char *const *)hyp->line, hyp->count, &g2p) != ATTN_OK)
        return report_failure();
    if (g2p.words_missing > 0)
        fprintf(stderr,
                "attn eval: note: %lld of the %lld words of %s are missing from %s "
                "(counted wrong)\n",
                (long long)g2p.words_missing, (long long)g2p.words, opt->refs.items[0], hyp_name);
    char detail[LINE_SIZE];
    for (int k = 0; k < opt->n_metrics; k++) {
        if (opt->metrics[k] == METRIC_WER) {
            snprintf(detail, sizeof detail, "(%lld of %lld words wrong)",
                     (long long)g2p.words_wrong, (long long)g2p.words);
            print_score(opt, "WER", g2p.wer, detail);
        } else {
            snprintf(detail, sizeof detail, "(%lld edits / %lld reference phonemes)",
                     (long long)g2p.phoneme_edits, (long long)g2p.reference_phonemes);
            print_score(opt, "PER", g2p.per, detail);
        }
    }
    return 0;
}

/* A masked language model's masked-token loss on the text of refs[0], each line masked with
 * the fixed seed EVAL_MASK_SEED so that two models (or two runs) are scored on the same
 * masks. */
static int score_masked(const eval_options *opt, attn_bundle *bundle, const attn_lines *text)
{
    attn_masked_score score;
    const attn_status status = attn_bundle_score_masked(
        bundle, (const char *const *)text->line, text->count, EVAL_MASK_SEED, opt->batch, &score);
    attn_bundle_destroy(bundle);
    if (status != ATTN_OK)
        return report_failure();
    if (score.unknown > 0)
        fprintf(stderr,
                "attn eval: note: %lld tokens of %s are outside the model's vocabulary (<unk>, "
                "never masked)\n",
                (long long)score.unknown, opt->refs.items[0]);
    const int w = (int)opt->width;
    if (opt->score_only) {
        printf("%.*f\n", w, score.perplexity);
        return 0;
    }
    printf("masked language model: %lld of %lld tokens masked by BERT's rule with seed %d "
           "(fixed, so every run masks the same)\n",
           (long long)score.masked, (long long)score.tokens, EVAL_MASK_SEED);
    printf("masked-token cross-entropy = %.*f nats/token\n", w, score.cross_entropy);
    printf("perplexity = %.*f\n", w, score.perplexity);
    printf("restored = %.*f%% (%lld of %lld)\n", w, 100.0 * (double)score.correct /
           (double)score.masked, (long long)score.correct, (long long)score.masked);
    return 0;
}

/* The language model's scores on the text of refs[0]. */
static int score_perplexity(const eval_options *opt, const attn_lines *text)
{
    attn_bundle *bundle = NULL;
    if (attn_bundle_load(opt->model, &bundle) != ATTN_OK)
        return report_failure();
    if (attn_bundle_config(bundle)->arch == ATTN_ARCH_TRANSFORMER_MLM)
        return score_masked(opt, bundle, text);
    attn_text_score score;
    if (attn_bundle_score_text(bundle, (const char *const *)text->line, text->count, opt->batch,
                               &score) != ATTN_OK) {
        attn_bundle_destroy(bundle);
        return report_failure();
    }
    attn_bundle_destroy(bundle);
    if (score.unknown > 0)
        fprintf(stderr,
                "attn eval: note: %lld tokens of %s are outside the model's vocabulary, scored "
                "as <unk>\n",
                (long long)score.unknown, opt->refs.items[0]);
    const int w = (int)opt->width;
    if (opt->score_only) {
        printf("%.*f\n", w, score.perplexity);
        return 0;
    }
    printf("cross-entropy = %.*f nats/token (%lld tokens)\n", w, score.cross_entropy,
           (long long)score.tokens);
    printf("perplexity = %.*f\n", w, score.perplexity);
    printf("bits/token = %.*f\n", w, score.bits_per_token);
    printf("bits/char = %.*f (%lld characters)\n", w, score.bits_per_character,
           (long long)score.characters);
    return 0;
}

static int score_labels(const eval_options *opt, attn_lines *gold, const char *hyp_name,
                        attn_lines *hyp)
{
    attn_classification_report *r = NULL;
    if (cli_score_labels("eval", opt->refs.items[0], gold, hyp_name, hyp, &r) != 0)
        return EXIT_BAD_DATA;
    const int w = (int)opt->width;
    if (opt->score_only) {
        for (int k = 0; k < opt->n_metrics; k++)
            printf("%.*f\n", w, opt->metrics[k] == METRIC_ACCURACY ? r->accuracy : r->macro_f1);
        attn_classification_report_destroy(r);
        return 0;
    }
    for (int k = 0; k < opt->n_metrics; k++)
        if (opt->metrics[k] == METRIC_ACCURACY)
            printf("accuracy = %.*f (%lld of %lld lines)\n", w, r->accuracy, (long long)r->correct,
                   (long long)r->lines);
        else
            printf("macro-F1 = %.*f (%lld classes)\n", w, r->macro_f1, (long long)r->classes);
    if (opt->n_metrics == 1)
        printf(opt->metrics[0] == METRIC_ACCURACY ? "macro-F1 = %.*f (%lld classes)\n"
                                                  : "accuracy = %.*f (%lld of %lld lines)\n",
               w, opt->metrics[0] == METRIC_ACCURACY ? r->macro_f1 : r->accuracy,
               opt->metrics[0] == METRIC_ACCURACY ? (long long)r->classes : (long long)r->correct,
               (long long)r->lines);
    /* Columns as wide as the longest label (in bytes: labels are usually ASCII). */
    int width = (int)strlen("class");
    for (int64_t c = 0; c < r->classes; c++)
        width = (int)strlen(r->labels[c]) > width ? (int)strlen(r->labels[c]) : width;
    printf("\n%-*s  %9s  %9s  %9s  %9s\n", width, "class", "precision", "recall", "F1", "support");
    for (int64_t c = 0; c < r->classes; c++)
        printf("%-*s  %9.*f  %9.*f  %9.*f  %9lld\n", width, r->labels[c], w, r->precision[c], w,
               r->recall[c], w, r->f1[c], (long long)r->gold[c]);
    printf("\nconfusion matrix (rows: gold, columns: predicted)\n%-*s", width, "");
    int cell = 7;
    for (int64_t c = 0; c < r->classes; c++)
        cell = (int)strlen(r->labels[c]) > cell ? (int)strlen(r->labels[c]) : cell;
    for (int64_t c = 0; c < r->classes; c++)
        printf("  %*s", cell, r->labels[c]);
    printf("\n");
    for (int64_t g = 0; g < r->classes; g++) {
        printf("%-*s", width, r->labels[g]);
        for (int64_t p = 0; p < r->classes; p++)
            printf("  %*lld", cell, (long long)r->confusion[g * r->classes + p]);
        printf("\n");
    }
    attn_classification_report_destroy(r);
    return 0;
}

static int run(const eval_options *opt, attn_lines *refs, attn_lines *hyp)
{
    for (int r = 0; r < opt->refs.count; r++)
        if (attn_lines_read(opt->refs.items[r], &refs[r]) != ATTN_OK)
            return report_failure();
    if (opt->metrics[0] == METRIC_PERPLEXITY)
        return score_perplexity(opt, &refs[0]);
    if (opt->metrics[0] == METRIC_ACCURACY || opt->metrics[0] == METRIC_F1) {
        const int from_stdin = opt->hyp == NULL || strcmp(opt->hyp, "-") == 0;
        if (from_stdin ? read_stdin(hyp) != ATTN_OK : attn_lines_read(opt->hyp, hyp) != ATTN_OK)
            return from_stdin ? EXIT_BAD_DATA : report_failure();
        return score_labels(opt, &refs[0], from_stdin ? "<stdin>" : opt->hyp, hyp);
    }
    int tsv = opt->format == FORMAT_TSV ||
              (opt->format == FORMAT_AUTO && strchr(refs[0].line[0], '\t') != NULL);
    for (int k = 0; k < opt->n_metrics; k++) {
        metric m = opt->metrics[k];
        if (tsv && (m == METRIC_BLEU || m == METRIC_CHRF)) {
            fprintf(stderr,
                    "attn eval: %s scores sentences, but %s is read as a "
                    "word<TAB>phonemes TSV (--format text reads it as sentences)\n",
                    metric_names[m], opt->refs.items[0]);
            return EXIT_USAGE;
        }
        if (!tsv && m == METRIC_PER) {
            fprintf(stderr,
                    "attn eval: per needs a word<TAB>phonemes TSV reference, but %s is "
                    "read as sentences (--format tsv reads it as a TSV)\n",
                    opt->refs.items[0]);
            return EXIT_USAGE;
        }
    }
    if (tsv && opt->refs.count > 1) {
        fprintf(stderr,
                "attn eval: a G2P reference is one TSV (several pronunciations of a "
                "word go on several lines); got %d --ref files\n",
                opt->refs.count);
        return EXIT_USAGE;
    }
    /* Usage is settled before standard input is read, so a wrong command does not wait. */
    int from_stdin = opt->hyp == NULL || strcmp(opt->hyp, "-") == 0;
    const char *hyp_name = from_stdin ? "<stdin>" : opt->hyp;
    if (from_stdin) {
        if (read_stdin(hyp) != ATTN_OK)
            return EXIT_BAD_DATA; /* read_stdin said why */
    } else if (attn_lines_read(opt->hyp, hyp) != ATTN_OK) {
        return report_failure();
    }
    return tsv ? score_g2p(opt, &refs[0], hyp_name, hyp)
               : score_translation(opt, refs, hyp_name, hyp);
}

int attn_cmd_eval(int argc, char **argv)
{
    eval_options opt;
    int status = parse_options(argc, argv, &opt);
    if (status != CLI_GO_ON)
        return status;
    attn_lines refs[MAX_REFS], hyp;
    memset(refs, 0, sizeof refs);
    memset(&hyp, 0, sizeof hyp);
    status = run(&opt, refs, &hyp);
    for (int r = 0; r < opt.refs.count; r++)
        attn_lines_free(&refs[r]);
    attn_lines_free(&hyp);
    return status;
}
