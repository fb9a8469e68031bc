/* attn evaluation metrics: corpus BLEU and chrF exactly as sacreBLEU 2.x computes them, word
 * error rate, the G2P word and phoneme error rates against several pronunciations, and a
 * classifier's accuracy, per-class precision, recall and F1, macro-F1 and confusion matrix.
 *
 * Conventions:
 *  - Text is UTF-8; a segment that is not valid UTF-8 fails with ATTN_ERR_FORMAT naming it.
 *  - Segments are numbered from 1 in messages, like lines.
 *  - Scores are percentages (0..100), computed in double precision. The result structs keep
 *    the sufficient statistics too, so a score can be checked by hand.
 *  - references[r][i] is reference stream r's version of segment i (n_refs streams of n
 *    segments, like sacreBLEU's list of reference files). An entry that is NULL or only
 *    whitespace is absent, so segments may have different numbers of references; a segment
 *    whose references are all absent fails with ATTN_ERR_FORMAT. (sacreBLEU drops empty
 *    references the same way; its command line strips trailing whitespace first, which makes
 *    a whitespace-only line absent there too.)
 *  - "Whitespace" is what Python's str.split() splits on, so that tokens are sacreBLEU's: the
 *    ASCII controls \t \n \v \f \r and U+001C..U+001F, the space, U+0085, U+00A0, U+1680,
 *    U+2000..U+200A, U+2028, U+2029, U+202F, U+205F and U+3000.
 */
#ifndef ATTN_METRICS_H
#define ATTN_METRICS_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- BLEU ------------------------------------------------------------------------------- */

/* Highest n-gram order attn_bleu_corpus accepts (sacreBLEU's default is 4). */
#define ATTN_BLEU_MAX_ORDER 9

typedef enum attn_bleu_tokenize {
    /* mteval-v13a's rules, sacreBLEU's default: a few XML entities are decoded ("&quot;",
     * "&amp;", "&lt;", "&gt;"), "<skipped>" is dropped, the ASCII symbols { | } ~ [ \ ] ^ _ `
     * space ! " # $ % & ( ) * + : ; < = > ? @ / become tokens of their own, a period or comma
     * is split off unless a digit precedes it, and split off unless a digit follows it, and a
     * dash after a digit is split off. Then whitespace separates the tokens. */
    ATTN_BLEU_TOKENIZE_13A = 0,
    /* Whitespace alone separates the tokens (sacreBLEU's "none"), for pre-tokenized text. */
    ATTN_BLEU_TOKENIZE_NONE = 1
} attn_bleu_tokenize;

/* How an n-gram order with no match is scored (Chen and Cherry 2014, as in sacreBLEU). */
typedef enum attn_bleu_smooth {
    ATTN_BLEU_SMOOTH_EXP = 0,   /* the k-th such order gets precision 1 / (2^k * total) */
    ATTN_BLEU_SMOOTH_NONE = 1,  /* precision 0, so the score is 0 */
    ATTN_BLEU_SMOOTH_FLOOR = 2, /* precision smooth_value / total */
    ATTN_BLEU_SMOOTH_ADD_K = 3  /* smooth_value is added to matches and totals of orders >= 2 */
} attn_bleu_smooth;

typedef struct attn_bleu_config {
    attn_bleu_tokenize tokenize;
    attn_bleu_smooth smooth;
    /* floor and add-k: the value; < 0 takes sacreBLEU's default (0.1 for floor, 1 for add-k).
     * Ignored by exp and none. */
    double smooth_value;
    int max_order; /* 1..ATTN_BLEU_MAX_ORDER */
    /* Nonzero: orders the hypotheses have no n-gram of are left out of the geometric mean
     * (sacreBLEU's effective_order, meant for single sentences). */
    int effective_order;
} attn_bleu_config;

/* sacreBLEU's defaults: 13a, exp smoothing, order 4, no effective order. Case-sensitive, as
 * sacreBLEU is by default (attn has no lowercase option). */
ATTN_API void attn_bleu_config_default(attn_bleu_config *config);

typedef struct attn_bleu_result {
    double score;                             /* BLEU, 0..100 */
    double precisions[ATTN_BLEU_MAX_ORDER];   /* smoothed n-gram precisions, percent */
    int64_t matches[ATTN_BLEU_MAX_ORDER];     /* clipped n-gram matches, summed over segments */
    int64_t totals[ATTN_BLEU_MAX_ORDER];      /* hypothesis n-grams, summed over segments */
    double brevity_penalty;                   /* exp(1 - ref_len / hyp_len) if shorter, else 1 */
    double ratio;                             /* hyp_len / ref_len (0 if ref_len is 0) */
    int64_t hyp_len;                          /* hypothesis tokens */
    int64_t ref_len;                          /* per segment the reference length closest to
                                                 the hypothesis's (the shorter on a tie) */
    int max_order;
} attn_bleu_result;

/* Corpus BLEU of n hypotheses against n_refs (>= 1) reference streams, as sacreBLEU's
 * BLEU(...).corpus_score: n-gram matches are clipped by each n-gram's largest count in any
 * one reference, and all statistics are summed over the corpus before the score is formed.
 * config NULL means the defaults. n = 0 gives a score of 0. */
ATTN_API attn_status attn_bleu_corpus(const attn_bleu_config *config,
                                      const char *const *hypotheses, int64_t n,
                                      const char *const *const *references, int64_t n_refs,
                                      attn_bleu_result *out);

/* The score from statistics already summed (sacreBLEU's BLEU.compute_bleu): matches and
 * totals have config->max_order entries. */
ATTN_API attn_status attn_bleu_from_statistics(const attn_bleu_config *config,
                                               const int64_t *matches, const int64_t *totals,
                                               int64_t hyp_len, int64_t ref_len,
                                               attn_bleu_result *out);

/* The line sacreBLEU prints, with the score to `width` decimals (sacreBLEU's default is 2):
 * "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)".
 * width in 0..17; fails if size bytes cannot hold the line and its NUL. */
ATTN_API attn_status attn_bleu_format(const attn_bleu_result *result, int width, char *buffer,
                                      size_t size);

/* A segment as BLEU sees it: trailing whitespace removed, then tokenized, the tokens joined by
 * single spaces. *tokens is malloc'ed. */
ATTN_API attn_status attn_bleu_tokenize_text(attn_bleu_tokenize tokenize, const char *text,
                                             char **tokens);

/* ---- chrF ------------------------------------------------------------------------------- */

/* Highest character n-gram order attn_chrf_corpus accepts (sacreBLEU's default is 6). */
#define ATTN_CHRF_MAX_ORDER 16

typedef struct attn_chrf_config {
    int char_order; /* 1..ATTN_CHRF_MAX_ORDER */
    int beta;       /* recall weighs beta times as much as precision, 0..1000 */
    /* Nonzero: whitespace is part of the character n-grams. Zero (the default): every
     * whitespace character is removed first. */
    int whitespace;
    /* Zero (the default, sacreBLEU >= 2.0's "effective order"): precision and recall are
     * averaged over the orders that both hypothesis and reference have n-grams of, then
     * combined into one F-score. Nonzero: chrF++.py's epsilon smoothing, the mean of the
     * per-order F-scores with 1e-16 standing in for undefined ones. */
    int eps_smoothing;
} attn_chrf_config;

/* sacreBLEU's defaults: chrF2 with character 6-grams, no word n-grams, whitespace removed. */
ATTN_API void attn_chrf_config_default(attn_chrf_config *config);

typedef struct attn_chrf_result {
    double score;                                  /* 0..100 */
    int64_t hyp_ngrams[ATTN_CHRF_MAX_ORDER];       /* summed over segments, each against the */
    int64_t ref_ngrams[ATTN_CHRF_MAX_ORDER];       /* reference that gave it the best F-score */
    int64_t matches[ATTN_CHRF_MAX_ORDER];
    int char_order, beta;
} attn_chrf_result;

/* Corpus chrF as sacreBLEU's CHRF(...).corpus_score: code-point n-grams of orders
 * 1..char_order; per segment the statistics of the reference with the best segment F-score
 * (the first on a tie); those summed over the corpus and turned into one score. A hypothesis
 * order counts 0 n-grams when the chosen reference has none of that order. config NULL means
 * the defaults; n = 0 gives a score of 0. */
ATTN_API attn_status attn_chrf_corpus(const attn_chrf_config *config,
                                      const char *const *hypotheses, int64_t n,
                                      const char *const *const *references, int64_t n_refs,
                                      attn_chrf_result *out);

/* "chrF2 = 59.73" (the score to `width` decimals, 0..17), as sacreBLEU prints it. */
ATTN_API attn_status attn_chrf_format(const attn_chrf_result *result, int width, char *buffer,
                                      size_t size);

/* ---- word error rate -------------------------------------------------------------------- */

typedef struct attn_wer_result {
    double wer;                /* 100 * edits / reference_words (0 for no segments) */
    int64_t edits;             /* insertions + deletions + substitutions */
    int64_t reference_words;   /* length of each segment's chosen reference, summed */
    int64_t hypothesis_words;
} attn_wer_result;

/* Corpus word error rate: tokens separated by whitespace, case-sensitive, no other
 * normalisation. Each segment is scored against its closest reference (fewest edits; on a tie
 * the longer one, then the first), and edits and that reference's length are summed over
 * the corpus: WER = sum of edits / sum of reference lengths. */
ATTN_API attn_status attn_wer_corpus(const char *const *hypotheses, int64_t n,
                                     const char *const *const *references, int64_t n_refs,
                                     attn_wer_result *out);

/* ---- G2P: word and phoneme error rates ------------------------------------------------- */

typedef struct attn_g2p_result {
    double wer;                 /* 100 * words_wrong / words */
    double per;                 /* 100 * phoneme_edits / reference_phonemes */
    int64_t words;              /* distinct words in the reference */
    int64_t words_wrong;        /* words whose hypothesis matches none of their references */
    int64_t words_missing;      /* reference words with no hypothesis (counted wrong) */
    int64_t phoneme_edits;      /* per word, edits to its closest reference, summed */
    int64_t reference_phonemes; /* per word, that reference's length, summed */
} attn_g2p_result;

/* Scores a G2P system's output. Each line (NUL-terminated, without its newline) is
 * "word<TAB>pronunciation", the pronunciation being phonemes separated by whitespace.
 * The reference may give a word several lines (several pronunciations), each non-empty;
 * the hypothesis gives each word at most once, and may leave its pronunciation empty.
 *  - A word is right if its hypothesis equals one of its references phoneme for phoneme.
 *  - Its closest reference is the one with the fewest phoneme edits (Levenshtein distance),
 *    on a tie the longer one (the lower error rate), then the first listed.
 *  - PER sums over words: sum of edits to each word's closest reference / sum of those
 *    references' lengths (a micro-average: long words weigh more than short ones).
 *  - A reference word missing from the hypothesis counts as wrong, with its closest reference
 *    for an empty hypothesis (the shortest) entirely deleted.
 * ATTN_ERR_FORMAT, naming "name:line", for an empty line, a line without exactly one TAB, an
 * empty word, an empty reference pronunciation, a hypothesis word given twice or absent from
 * the reference. ref_name and hyp_name stand for the files in messages. */
ATTN_API attn_status attn_g2p_score(const char *ref_name, const char *const *ref_lines,
                                    int64_t n_ref, const char *hyp_name,
                                    const char *const *hyp_lines, int64_t n_hyp,
                                    attn_g2p_result *out);

/* ---- classification: accuracy, per-class precision, recall and F1, confusion ------------- */

typedef struct attn_classification_report {
    int64_t lines;   /* lines scored */
    int64_t correct; /* lines whose predicted label is the gold one */
    double accuracy; /* 100 * correct / lines */
    /* The unweighted mean of the classes' F1 (scikit-learn's average="macro"), over every
     * class that is a gold or a predicted label; a class never predicted (or never gold) has
     * precision (recall) 0, hence F1 0. */
    double macro_f1;
    int64_t classes;  /* labels seen in either file */
    char **labels;    /* [classes], in bytewise order */
    int64_t *gold;    /* [classes] lines with that gold label (the support) */
    int64_t *predicted; /* [classes] lines with that predicted label */
    double *precision, *recall, *f1; /* [classes], percentages */
    int64_t *confusion; /* [classes * classes]: row gold class, column predicted class */
} attn_classification_report;

/* Scores n >= 1 predicted labels against the gold ones, compared as exact strings (each
 * non-empty UTF-8). ATTN_ERR_FORMAT, naming the 1-based line, for an empty or invalid label.
 * Free *out with attn_classification_report_destroy. */
ATTN_API attn_status attn_classification_score(const char *const *gold,
                                               const char *const *predicted, int64_t n,
                                               attn_classification_report **out);
/* NULL is ignored. */
ATTN_API void attn_classification_report_destroy(attn_classification_report *report);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_METRICS_H */
