/* attn eval: scores system output against references (BLEU, chrF, WER, G2P WER/PER). */
#include "attn/attn.h"
#include "cli/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EXIT_BAD_DATA = 1, EXIT_USAGE = 2, MAX_REFS = 64, LINE_SIZE = 512 };

typedef enum { METRIC_BLEU, METRIC_CHRF, METRIC_WER, METRIC_PER, METRIC_COUNT } metric;
static const char *const metric_names[METRIC_COUNT] = {"bleu", "chrf", "wer", "per"};

typedef enum { FORMAT_AUTO, FORMAT_TEXT, FORMAT_TSV } input_format;

typedef struct eval_options {
    metric metrics[16];
    int n_metrics;
    const char *refs[MAX_REFS];
    int n_refs;
    const char *hyp; /* NULL or "-": standard input */
    input_format format;
    int width;
    int score_only;
} eval_options;

static void print_help(FILE *out)
{
    fprintf(out,
            "usage: attn eval --metric METRIC[,METRIC...] --ref REF [--ref REF2 ...] [--hyp HYP]\n"
            "                 [--format auto|text|tsv] [--width N] [--score-only]\n"
            "\n"
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
            "options:\n"
            "  --metric M     one or more of bleu, chrf, wer, per, comma-separated\n"
            "  --ref FILE     reference file (repeatable for translation)\n"
            "  --hyp FILE     system output; '-' or omitted: read standard input\n"
            "  --format F     auto (default: TSV if REF's first line has a TAB), text or tsv\n"
            "  --width N      decimals of the score (default 2)\n"
            "  --score-only   print only the score\n"
            "\n"
            "Exit status: 0 scored, 1 bad data (unreadable file, different line counts,\n"
            "malformed TSV, invalid UTF-8), 2 bad usage.\n");
}

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "attn eval: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (see 'attn eval --help')\n");
    return EXIT_USAGE;
}

static int parse_metrics(const char *list, eval_options *opt)
{
    const char *p = list;
    for (;;) {
        size_t length = strcspn(p, ",");
        int found = -1;
        for (int m = 0; m < METRIC_COUNT; m++)
            if (strlen(metric_names[m]) == length && strncmp(p, metric_names[m], length) == 0)
                found = m;
        if (found < 0) {
            fprintf(stderr, "attn eval: unknown metric '%.*s' (bleu, chrf, wer or per)\n",
                    (int)length, p);
            return EXIT_USAGE;
        }
        if (opt->n_metrics == (int)(sizeof opt->metrics / sizeof *opt->metrics))
            return usage_error("too many metrics in '%s'", list);
        opt->metrics[opt->n_metrics++] = (metric)found;
        if (p[length] == '\0')
            return 0;
        p += length + 1;
    }
}

static int parse_options(int argc, char **argv, eval_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->width = 2;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        int has_value = i + 1 < argc;
        if (strcmp(arg, "--score-only") == 0) {
            opt->score_only = 1;
        } else if (strcmp(arg, "--metric") == 0 || strcmp(arg, "--ref") == 0 ||
                   strcmp(arg, "--hyp") == 0 || strcmp(arg, "--format") == 0 ||
                   strcmp(arg, "--width") == 0) {
            if (!has_value)
                return usage_error("%s needs a value", arg);
            const char *value = argv[++i];
            if (strcmp(arg, "--metric") == 0) {
                int status = parse_metrics(value, opt);
                if (status != 0)
                    return status;
            } else if (strcmp(arg, "--ref") == 0) {
                if (opt->n_refs == MAX_REFS)
                    return usage_error("more than %s --ref files", "64");
                opt->refs[opt->n_refs++] = value;
            } else if (strcmp(arg, "--hyp") == 0) {
                if (opt->hyp != NULL)
                    return usage_error("--hyp given twice (second: '%s')", value);
                opt->hyp = value;
            } else if (strcmp(arg, "--format") == 0) {
                if (strcmp(value, "auto") == 0)
                    opt->format = FORMAT_AUTO;
                else if (strcmp(value, "text") == 0)
                    opt->format = FORMAT_TEXT;
                else if (strcmp(value, "tsv") == 0)
                    opt->format = FORMAT_TSV;
                else
                    return usage_error("unknown --format '%s' (auto, text or tsv)", value);
            } else {
                char *end;
                long width = strtol(value, &end, 10);
                if (*value == '\0' || *end != '\0' || width < 0 || width > 17)
                    return usage_error("--width must be an integer in 0..17, got '%s'", value);
                opt->width = (int)width;
            }
        } else {
            return usage_error("unexpected argument '%s'", arg);
        }
    }
    if (opt->n_metrics == 0)
        return usage_error("%s", "--metric is required");
    if (opt->n_refs == 0)
        return usage_error("%s", "--ref is required");
    return 0;
}

/* The library's last message without the name of the function that failed: "attn_lines_read:
 * f.txt:3: ..." reads "f.txt:3: ..." on the command line. */
static const char *library_message(void)
{
    const char *message = attn_last_error();
    if (strncmp(message, "attn_", 5) == 0) {
        size_t name = 5 + strspn(message + 5, "abcdefghijklmnopqrstuvwxyz0123456789_");
        if (strncmp(message + name, ": ", 2) == 0)
            return message + name + 2;
    }
    return message;
}

static int report_failure(void)
{
    fprintf(stderr, "attn eval: %s\n", library_message());
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
static void print_score(const eval_options *opt, const char *name, double score,
                        const char *detail)
{
    if (opt->score_only)
        printf("%.*f\n", opt->width, score);
    else
        printf("%s = %.*f %s\n", name, opt->width, score, detail);
}

static int score_translation(const eval_options *opt, attn_lines *refs, const char *hyp_name,
                             const attn_lines *hyp)
{
    const char *const *ref_streams[MAX_REFS];
    for (int r = 0; r < opt->n_refs; r++) {
        if (refs[r].count != hyp->count) {
            fprintf(stderr, "attn eval: %s has %lld lines but %s has %lld\n", hyp_name,
                    (long long)hyp->count, opt->refs[r], (long long)refs[r].count);
            return EXIT_BAD_DATA;
        }
        ref_streams[r] = (const char *const *)refs[r].line;
    }
    for (int64_t i = 0; i < hyp->count; i++) {
        int present = 0;
        for (int r = 0; r < opt->n_refs; r++)
            present += !is_blank(refs[r].line[i]);
        if (present == 0) {
            fprintf(stderr, "attn eval: %s:%lld: empty reference%s\n", opt->refs[0],
                    (long long)(i + 1), opt->n_refs > 1 ? " (in every --ref file)" : "");
            return EXIT_BAD_DATA;
        }
    }
    const char *const *hyps = (const char *const *)hyp->line;
    char line[LINE_SIZE];
    for (int k = 0; k < opt->n_metrics; k++) {
        if (opt->metrics[k] == METRIC_BLEU) {
            attn_bleu_result bleu;
            if (attn_bleu_corpus(NULL, hyps, hyp->count, ref_streams, opt->n_refs, &bleu) !=
                    ATTN_OK ||
                attn_bleu_format(&bleu, opt->width, line, sizeof line) != ATTN_OK)
                return report_failure();
            if (opt->score_only)
                printf("%.*f\n", opt->width, bleu.score);
            else
                printf("%s\n", line);
        } else if (opt->metrics[k] == METRIC_CHRF) {
            attn_chrf_result chrf;
            if (attn_chrf_corpus(NULL, hyps, hyp->count, ref_streams, opt->n_refs, &chrf) !=
                    ATTN_OK ||
                attn_chrf_format(&chrf, opt->width, line, sizeof line) != ATTN_OK)
                return report_failure();
            if (opt->score_only)
                printf("%.*f\n", opt->width, chrf.score);
            else
                printf("%s\n", line);
        } else {
            attn_wer_result wer;
            if (attn_wer_corpus(hyps, hyp->count, ref_streams, opt->n_refs, &wer) != ATTN_OK)
                return report_failure();
            snprintf(line, sizeof line, "(%lld edits / %lld reference words)",
                     (long long)wer.edits, (long long)wer.reference_words);
            print_score(opt, "WER", wer.wer, line);
        }
    }
    return 0;
}

static int score_g2p(const eval_options *opt, const attn_lines *ref, const char *hyp_name,
                     const attn_lines *hyp)
{
    attn_g2p_result g2p;
    if (attn_g2p_score(opt->refs[0], (const char *const *)ref->line, ref->count, hyp_name,
                       (const char *const *)hyp->line, hyp->count, &g2p) != ATTN_OK)
        return report_failure();
    if (g2p.words_missing > 0)
        fprintf(stderr, "attn eval: note: %lld of the %lld words of %s are missing from %s "
                        "(counted wrong)\n",
                (long long)g2p.words_missing, (long long)g2p.words, opt->refs[0], hyp_name);
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

static int run(const eval_options *opt, attn_lines *refs, attn_lines *hyp)
{
    for (int r = 0; r < opt->n_refs; r++)
        if (attn_lines_read(opt->refs[r], &refs[r]) != ATTN_OK)
            return report_failure();
    int tsv = opt->format == FORMAT_TSV ||
              (opt->format == FORMAT_AUTO && strchr(refs[0].line[0], '\t') != NULL);
    for (int k = 0; k < opt->n_metrics; k++) {
        metric m = opt->metrics[k];
        if (tsv && (m == METRIC_BLEU || m == METRIC_CHRF)) {
            fprintf(stderr, "attn eval: %s scores sentences, but %s is read as a "
                            "word<TAB>phonemes TSV (--format text reads it as sentences)\n",
                    metric_names[m], opt->refs[0]);
            return EXIT_USAGE;
        }
        if (!tsv && m == METRIC_PER) {
            fprintf(stderr, "attn eval: per needs a word<TAB>phonemes TSV reference, but %s is "
                            "read as sentences (--format tsv reads it as a TSV)\n",
                    opt->refs[0]);
            return EXIT_USAGE;
        }
    }
    if (tsv && opt->n_refs > 1) {
        fprintf(stderr, "attn eval: a G2P reference is one TSV (several pronunciations of a "
                        "word go on several lines); got %d --ref files\n",
                opt->n_refs);
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
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_help(stdout);
            return 0;
        }
    eval_options opt;
    int status = parse_options(argc, argv, &opt);
    if (status != 0)
        return status;
    attn_lines refs[MAX_REFS], hyp;
    memset(refs, 0, sizeof refs);
    memset(&hyp, 0, sizeof hyp);
    status = run(&opt, refs, &hyp);
    for (int r = 0; r < opt.n_refs; r++)
        attn_lines_free(&refs[r]);
    attn_lines_free(&hyp);
    return status;
}
