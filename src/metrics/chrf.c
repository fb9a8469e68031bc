/* chrF (Popović 2015) as sacreBLEU 2.x computes it: character n-gram precision and recall,
 * the best-scoring reference per segment, statistics summed over the corpus, one F-beta score.
 * Floating-point operations follow sacreBLEU's order. */
#include "metrics/metrics_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void attn_chrf_config_default(attn_chrf_config *config)
{
    if (config == NULL)
        return;
    config->char_order = 6;
    config->beta = 2;
    config->whitespace = 0;
    config->eps_smoothing = 0;
}

/* One order's statistics: hypothesis n-grams, reference n-grams, matches. */
typedef struct chrf_stats {
    int64_t hyp, ref, match;
} chrf_stats;

/* sacreBLEU's CHRF._compute_f_score over `order` orders, in percent. */
static double f_score(const attn_chrf_config *config, const chrf_stats *stats)
{
    const double eps = 1e-16;
    double factor = (double)config->beta * (double)config->beta;
    double eps_score = 0.0, avg_precision = 0.0, avg_recall = 0.0;
    int effective_order = 0;
    for (int i = 0; i < config->char_order; i++) {
        const chrf_stats *s = &stats[i];
        double precision = s->hyp > 0 ? (double)s->match / (double)s->hyp : eps;
        double recall = s->ref > 0 ? (double)s->match / (double)s->ref : eps;
        double denominator = factor * precision + recall;
        eps_score += denominator > 0.0
                         ? (1.0 + factor) * precision * recall / denominator
                         : eps;
        if (s->hyp > 0 && s->ref > 0) {
            avg_precision += precision;
            avg_recall += recall;
            effective_order++;
        }
    }
    if (config->eps_smoothing)
        return 100.0 * eps_score / config->char_order;
    if (effective_order == 0)
        return 0.0;
    avg_precision /= effective_order;
    avg_recall /= effective_order;
    if (avg_precision + avg_recall == 0.0)
        return 0.0;
    double score = (1.0 + factor) * avg_precision * avg_recall;
    score /= factor * avg_precision + avg_recall;
    return 100.0 * score;
}

typedef struct chrf_counter {
    const attn_chrf_config *config;
    symbol_seq symbols; /* code points: the hypothesis, then each present reference */
    int64_t *seq_start; /* [n_refs + 2] */
    uint32_t *gram;
    int64_t gram_capacity;
    ngram_ids ids;
    int32_t *hyp_count, *ref_count; /* per n-gram id, kept zero between uses */
    int64_t count_capacity;
    chrf_stats *ref_stats; /* [n_refs][char_order] this segment's statistics per reference */
    chrf_stats totals[ATTN_CHRF_MAX_ORDER];
} chrf_counter;

static void chrf_counter_free(chrf_counter *c)
{
    symbol_seq_free(&c->symbols);
    free(c->seq_start);
    free(c->gram);
    ngram_ids_free(&c->ids);
    free(c->hyp_count);
    free(c->ref_count);
    free(c->ref_stats);
}

/* Appends text's code points, without whitespace unless the config keeps it. */
static attn_status add_characters(chrf_counter *c, const char *text)
{
    size_t size = strlen(text);
    for (size_t i = 0; i < size;) {
        uint32_t code;
        i += utf8_decode(text + i, size - i, &code);
        if (c->config->whitespace || !is_python_space(code))
            ATTN_TRY(symbol_seq_push(&c->symbols, code));
    }
    return ATTN_OK;
}

static attn_status grow_counts(chrf_counter *c, int64_t needed)
{
    if (needed <= c->count_capacity)
        return ATTN_OK;
    int64_t capacity = c->count_capacity;
    ATTN_TRY(grow_array((void **)&c->hyp_count, &capacity, needed, sizeof *c->hyp_count));
    capacity = c->count_capacity;
    ATTN_TRY(grow_array((void **)&c->ref_count, &capacity, needed, sizeof *c->ref_count));
    size_t old = (size_t)c->count_capacity, added = (size_t)(capacity - c->count_capacity);
    memset(c->hyp_count + old, 0, added * sizeof *c->hyp_count);
    memset(c->ref_count + old, 0, added * sizeof *c->ref_count);
    c->count_capacity = capacity;
    return ATTN_OK;
}

/* Fills c->ref_stats for the n_seqs - 1 references of the segment in c->symbols. */
static attn_status count_segment(chrf_counter *c, int n_seqs)
{
    int64_t size = c->symbols.size;
    if (size > c->gram_capacity)
        ATTN_TRY(grow_array((void **)&c->gram, &c->gram_capacity, size, sizeof *c->gram));
    for (int64_t i = 0; i < size; i++)
        c->gram[i] = NGRAM_ROOT;
    const int64_t *start = c->seq_start;
    int orders = c->config->char_order;
    for (int order = 1; order <= orders; order++) {
        ATTN_TRY(ngram_ids_begin_order(&c->ids, size));
        for (int s = 0; s < n_seqs; s++)
            ATTN_TRY(ngram_ids_next_order(&c->ids, c->symbols.data + start[s],
                                          start[s + 1] - start[s], order, c->gram + start[s]));
        ATTN_TRY(grow_counts(c, c->ids.count));
        const uint32_t *hyp = c->gram + start[0];
        int64_t hyp_grams = start[1] - start[0] - order + 1;
        if (hyp_grams < 0)
            hyp_grams = 0;
        for (int64_t i = 0; i < hyp_grams; i++)
            c->hyp_count[hyp[i]]++;
        for (int s = 1; s < n_seqs; s++) {
            const uint32_t *ref = c->gram + start[s];
            int64_t ref_grams = start[s + 1] - start[s] - order + 1;
            if (ref_grams < 0)
                ref_grams = 0;
            for (int64_t i = 0; i < ref_grams; i++)
                c->ref_count[ref[i]]++;
            int64_t matched = 0;
            for (int64_t i = 0; i < ref_grams; i++) {
                uint32_t g = ref[i];
                if (c->ref_count[g] > 0)
                    matched += c->hyp_count[g] < c->ref_count[g] ? c->hyp_count[g]
                                                                 : c->ref_count[g];
                c->ref_count[g] = 0;
            }
            chrf_stats *stats = &c->ref_stats[(size_t)(s - 1) * (size_t)orders + (size_t)(order - 1)];
            /* sacreBLEU counts no hypothesis n-grams of an order the reference lacks. */
            stats->hyp = ref_grams > 0 ? hyp_grams : 0;
            stats->ref = ref_grams;
            stats->match = matched;
        }
        for (int64_t i = 0; i < hyp_grams; i++)
            c->hyp_count[hyp[i]] = 0;
    }
    return ATTN_OK;
}

/* Puts segment i's hypothesis and its present references into c->symbols, *n_seqs in all. */
static attn_status load_segment(const char *fn, chrf_counter *c, const char *const *hypotheses,
                                const char *const *const *references, int64_t n_refs, int64_t i,
                                int *n_seqs)
{
    ATTN_TRY(check_segment(fn, "hypothesis", i, hypotheses[i]));
    c->symbols.size = 0;
    c->seq_start[0] = 0;
    ATTN_TRY(add_characters(c, hypotheses[i]));
    int count = 1;
    c->seq_start[1] = c->symbols.size;
    for (int64_t r = 0; r < n_refs; r++) {
        const char *ref = references[r][i];
        if (reference_absent(ref))
            continue;
        ATTN_TRY(check_segment(fn, "reference", i, ref));
        ATTN_TRY(add_characters(c, ref));
        c->seq_start[++count] = c->symbols.size;
    }
    if (count == 1)
        return attn_fail(ATTN_ERR_FORMAT, "%s: segment %lld has no reference (all empty)", fn,
                         (long long)(i + 1));
    *n_seqs = count;
    return ATTN_OK;
}

/* Adds the statistics of the segment's reference with the best F-score (the first on a tie)
 * to the corpus totals. */
static void add_best_reference(chrf_counter *c, int n_refs_present)
{
    int orders = c->config->char_order;
    int best = 0;
    double best_score = -1.0;
    for (int s = 0; s < n_refs_present; s++) {
        double score = f_score(c->config, &c->ref_stats[(size_t)s * (size_t)orders]);
        if (score > best_score) {
            best_score = score;
            best = s;
        }
    }
    for (int k = 0; k < orders; k++) {
        const chrf_stats *s = &c->ref_stats[(size_t)best * (size_t)orders + (size_t)k];
        c->totals[k].hyp += s->hyp;
        c->totals[k].ref += s->ref;
        c->totals[k].match += s->match;
    }
}

attn_status attn_chrf_corpus(const attn_chrf_config *config, const char *const *hypotheses,
                             int64_t n, const char *const *const *references, int64_t n_refs,
                             attn_chrf_result *out)
{
    static const char fn[] = "attn_chrf_corpus";
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    attn_chrf_config resolved;
    attn_chrf_config_default(&resolved);
    if (config != NULL) {
        resolved = *config;
        ATTN_CHECK_ARG(resolved.char_order >= 1 && resolved.char_order <= ATTN_CHRF_MAX_ORDER,
                       "%s: char_order must be in 1..%d, got %d", fn, ATTN_CHRF_MAX_ORDER,
                       resolved.char_order);
        ATTN_CHECK_ARG(resolved.beta >= 0 && resolved.beta <= 1000,
                       "%s: beta must be in 0..1000, got %d", fn, resolved.beta);
    }
    ATTN_TRY(check_corpus_args(fn, hypotheses, n, references, n_refs));
    ATTN_CHECK_ARG(n_refs <= INT32_MAX - 2, "%s: too many reference streams (%lld)", fn,
                   (long long)n_refs);

    chrf_counter c;
    memset(&c, 0, sizeof c);
    c.config = &resolved;
    int orders = resolved.char_order;
    size_t stats_bytes;
    attn_status status = ATTN_OK;
    c.seq_start = malloc((size_t)(n_refs + 2) * sizeof *c.seq_start);
    if (c.seq_start == NULL ||
        !attn_mul_size((size_t)n_refs * (size_t)orders, sizeof *c.ref_stats, &stats_bytes) ||
        (c.ref_stats = malloc(stats_bytes)) == NULL)
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t i = 0; status == ATTN_OK && i < n; i++) {
        int n_seqs = 0;
        status = load_segment(fn, &c, hypotheses, references, n_refs, i, &n_seqs);
        if (status == ATTN_OK)
            status = count_segment(&c, n_seqs);
        if (status == ATTN_OK)
            add_best_reference(&c, n_seqs - 1);
    }
    if (status == ATTN_OK) {
        out->score = f_score(&resolved, c.totals);
        out->char_order = orders;
        out->beta = resolved.beta;
        for (int k = 0; k < orders; k++) {
            out->hyp_ngrams[k] = c.totals[k].hyp;
            out->ref_ngrams[k] = c.totals[k].ref;
            out->matches[k] = c.totals[k].match;
        }
    }
    chrf_counter_free(&c);
    return status;
}

attn_status attn_chrf_format(const attn_chrf_result *result, int width, char *buffer,
                             size_t size)
{
    static const char fn[] = "attn_chrf_format";
    ATTN_CHECK_NOT_NULL(result);
    ATTN_CHECK_NOT_NULL(buffer);
    ATTN_CHECK_ARG(width >= 0 && width <= 17, "%s: width must be in 0..17, got %d", fn, width);
    int written = snprintf(buffer, size, "chrF%d = %.*f", result->beta, width, result->score);
    if (written < 0 || (size_t)written >= size)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the line needs %d bytes, size is %zu",
                         fn, written + 1, size);
    return ATTN_OK;
}
