/* Corpus BLEU (Papineni et al. 2002) with sacreBLEU 2.x's tokenization, clipping, brevity
 * penalty and smoothing, step for step, so that scores agree with it to the last digit shown.
 * Floating-point operations follow sacreBLEU's order (it runs in Python doubles). */
#include "metrics/metrics_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void attn_bleu_config_default(attn_bleu_config *config)
{
    if (config == NULL)
        return;
    config->tokenize = ATTN_BLEU_TOKENIZE_13A;
    config->smooth = ATTN_BLEU_SMOOTH_EXP;
    config->smooth_value = -1.0;
    config->max_order = 4;
    config->effective_order = 0;
}

static attn_status resolve_config(const char *fn, const attn_bleu_config *given,
                                  attn_bleu_config *config)
{
    attn_bleu_config_default(config);
    if (given == NULL)
        return ATTN_OK;
    *config = *given;
    ATTN_CHECK_ARG(config->tokenize == ATTN_BLEU_TOKENIZE_13A ||
                       config->tokenize == ATTN_BLEU_TOKENIZE_NONE,
                   "%s: unknown tokenize %d", fn, (int)config->tokenize);
    ATTN_CHECK_ARG(config->smooth >= ATTN_BLEU_SMOOTH_EXP && config->smooth <= ATTN_BLEU_SMOOTH_ADD_K,
                   "%s: unknown smooth %d", fn, (int)config->smooth);
    ATTN_CHECK_ARG(config->max_order >= 1 && config->max_order <= ATTN_BLEU_MAX_ORDER,
                   "%s: max_order must be in 1..%d, got %d", fn, ATTN_BLEU_MAX_ORDER,
                   config->max_order);
    ATTN_CHECK_ARG(isfinite(config->smooth_value), "%s: smooth_value must be finite", fn);
    if (config->smooth_value < 0.0)
        config->smooth_value = config->smooth == ATTN_BLEU_SMOOTH_ADD_K ? 1.0 : 0.1;
    return ATTN_OK;
}

/* sacreBLEU's my_log: log, with 0 standing for a very large negative number. */
static double floored_log(double x)
{
    return x == 0.0 ? -9999999999.0 : log(x);
}

/* sacreBLEU's BLEU.compute_bleu. */
static void compute_bleu(const attn_bleu_config *config, const int64_t *matches,
                         const int64_t *totals, int64_t hyp_len, int64_t ref_len,
                         attn_bleu_result *out)
{
    int max_order = config->max_order;
    memset(out, 0, sizeof *out);
    out->max_order = max_order;
    memcpy(out->matches, matches, (size_t)max_order * sizeof *matches);
    memcpy(out->totals, totals, (size_t)max_order * sizeof *totals);
    out->hyp_len = hyp_len;
    out->ref_len = ref_len;
    out->ratio = ref_len != 0 ? (double)hyp_len / (double)ref_len : 0.0;
    if (hyp_len < ref_len)
        out->brevity_penalty = hyp_len > 0 ? exp(1.0 - (double)ref_len / (double)hyp_len) : 0.0;
    else
        out->brevity_penalty = 1.0;

    int any_match = 0;
    for (int n = 0; n < max_order; n++)
        any_match |= matches[n] != 0;
    if (!any_match)
        return; /* score and precisions 0, as sacreBLEU returns early (its issue #141) */

    double smooth_mteval = 1.0;
    int effective_order = max_order;
    for (int n = 1; n <= max_order; n++) {
        double correct = (double)matches[n - 1], total = (double)totals[n - 1];
        if (config->smooth == ATTN_BLEU_SMOOTH_ADD_K && n > 1) {
            correct += config->smooth_value;
            total += config->smooth_value;
        }
        if (total == 0.0)
            break;
        if (config->effective_order)
            effective_order = n;
        if (correct == 0.0) {
            if (config->smooth == ATTN_BLEU_SMOOTH_EXP) {
                smooth_mteval *= 2.0;
                out->precisions[n - 1] = 100.0 / (smooth_mteval * total);
            } else if (config->smooth == ATTN_BLEU_SMOOTH_FLOOR) {
                out->precisions[n - 1] = 100.0 * config->smooth_value / total;
            }
        } else {
            out->precisions[n - 1] = 100.0 * correct / total;
        }
    }
    double log_sum = 0.0;
    for (int n = 0; n < effective_order; n++)
        log_sum += floored_log(out->precisions[n]);
    out->score = out->brevity_penalty * exp(log_sum / effective_order);
}

attn_status attn_bleu_from_statistics(const attn_bleu_config *config, const int64_t *matches,
                                      const int64_t *totals, int64_t hyp_len, int64_t ref_len,
                                      attn_bleu_result *out)
{
    static const char fn[] = "attn_bleu_from_statistics";
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(matches);
    ATTN_CHECK_NOT_NULL(totals);
    attn_bleu_config resolved;
    ATTN_TRY(resolve_config(fn, config, &resolved));
    ATTN_CHECK_ARG(hyp_len >= 0 && ref_len >= 0, "%s: lengths must be >= 0, got %lld and %lld",
                   fn, (long long)hyp_len, (long long)ref_len);
    for (int n = 0; n < resolved.max_order; n++)
        ATTN_CHECK_ARG(matches[n] >= 0 && matches[n] <= totals[n],
                       "%s: order %d has %lld matches of %lld n-grams", fn, n + 1,
                       (long long)matches[n], (long long)totals[n]);
    compute_bleu(&resolved, matches, totals, hyp_len, ref_len, out);
    return ATTN_OK;
}

/* ---- statistics of a corpus -------------------------------------------------------------- */

typedef struct bleu_counter {
    const attn_bleu_config *config;
    strtab tokens;
    byte_buffer tokenized;
    symbol_seq symbols;  /* this segment's hypothesis, then its references, as token ids */
    int64_t *seq_start;  /* [n_refs + 2] where each sequence starts in symbols */
    uint32_t *gram;      /* n-gram id at each position of symbols */
    int64_t gram_capacity;
    ngram_ids ids;
    int32_t *hyp_count, *ref_count, *ref_max; /* per n-gram id */
    int64_t count_capacity;
    /* summed over the corpus */
    int64_t matches[ATTN_BLEU_MAX_ORDER], totals[ATTN_BLEU_MAX_ORDER];
    int64_t hyp_len, ref_len;
} bleu_counter;

static void bleu_counter_free(bleu_counter *c)
{
    strtab_free(&c->tokens);
    byte_buffer_free(&c->tokenized);
    symbol_seq_free(&c->symbols);
    free(c->seq_start);
    free(c->gram);
    ngram_ids_free(&c->ids);
    free(c->hyp_count);
    free(c->ref_count);
    free(c->ref_max);
}

/* Appends a segment's token ids to c->symbols. */
static attn_status add_tokens(bleu_counter *c, attn_bleu_tokenize tokenize, const char *text)
{
    size_t size = rstrip_length(text, strlen(text));
    if (tokenize == ATTN_BLEU_TOKENIZE_NONE)
        return split_tokens(text, size, &c->tokens, &c->symbols);
    ATTN_TRY(tokenize_13a(text, size, &c->tokenized));
    return split_tokens(c->tokenized.data, c->tokenized.size, &c->tokens, &c->symbols);
}

static attn_status grow_counts(bleu_counter *c, int64_t needed)
{
    if (needed <= c->count_capacity)
        return ATTN_OK;
    int64_t capacity = c->count_capacity;
    ATTN_TRY(grow_array((void **)&c->hyp_count, &capacity, needed, sizeof *c->hyp_count));
    capacity = c->count_capacity;
    ATTN_TRY(grow_array((void **)&c->ref_count, &capacity, needed, sizeof *c->ref_count));
    capacity = c->count_capacity;
    ATTN_TRY(grow_array((void **)&c->ref_max, &capacity, needed, sizeof *c->ref_max));
    /* Count arrays are kept zero between uses; only new entries need clearing. */
    size_t old = (size_t)c->count_capacity, added = (size_t)(capacity - c->count_capacity);
    memset(c->hyp_count + old, 0, added * sizeof *c->hyp_count);
    memset(c->ref_count + old, 0, added * sizeof *c->ref_count);
    memset(c->ref_max + old, 0, added * sizeof *c->ref_max);
    c->count_capacity = capacity;
    return ATTN_OK;
}

/* sacreBLEU's _get_closest_ref_len: the reference length nearest hyp_len, the shorter on a tie. */
static int64_t closest_ref_len(const bleu_counter *c, int n_seqs)
{
    int64_t hyp_len = c->seq_start[1] - c->seq_start[0];
    int64_t best = -1, best_diff = -1;
    for (int s = 1; s < n_seqs; s++) {
        int64_t len = c->seq_start[s + 1] - c->seq_start[s];
        int64_t diff = len > hyp_len ? len - hyp_len : hyp_len - len;
        if (best_diff < 0 || diff < best_diff || (diff == best_diff && len < best)) {
            best_diff = diff;
            best = len;
        }
    }
    return best;
}

/* Adds one segment's statistics: n_seqs sequences in c->symbols, the hypothesis first. */
static attn_status count_segment(bleu_counter *c, int n_seqs)
{
    int64_t size = c->symbols.size;
    if (size > c->gram_capacity)
        ATTN_TRY(grow_array((void **)&c->gram, &c->gram_capacity, size, sizeof *c->gram));
    for (int64_t i = 0; i < size; i++)
        c->gram[i] = NGRAM_ROOT;
    const int64_t *start = c->seq_start;
    int64_t hyp_len = start[1] - start[0];
    c->hyp_len += hyp_len;
    c->ref_len += closest_ref_len(c, n_seqs);

    for (int order = 1; order <= c->config->max_order; order++) {
        ATTN_TRY(ngram_ids_begin_order(&c->ids, size));
        for (int s = 0; s < n_seqs; s++)
            ATTN_TRY(ngram_ids_next_order(&c->ids, c->symbols.data + start[s],
                                          start[s + 1] - start[s], order, c->gram + start[s]));
        ATTN_TRY(grow_counts(c, c->ids.count));
        int64_t hyp_grams = hyp_len - order + 1;
        if (hyp_grams <= 0)
            break; /* no hypothesis n-grams of this order or any higher */
        const uint32_t *hyp = c->gram + start[0];
        for (int64_t i = 0; i < hyp_grams; i++)
            c->hyp_count[hyp[i]]++;
        /* Each n-gram's largest count in any one reference. */
        for (int s = 1; s < n_seqs; s++) {
            const uint32_t *ref = c->gram + start[s];
            int64_t ref_grams = start[s + 1] - start[s] - order + 1;
            for (int64_t i = 0; i < ref_grams; i++)
                c->ref_count[ref[i]]++;
            for (int64_t i = 0; i < ref_grams; i++) {
                uint32_t g = ref[i];
                if (c->ref_count[g] > c->ref_max[g])
                    c->ref_max[g] = c->ref_count[g];
            }
            for (int64_t i = 0; i < ref_grams; i++)
                c->ref_count[ref[i]] = 0;
        }
        /* Clipped matches, each distinct n-gram once; the counts are zeroed on the way. */
        int64_t matched = 0;
        for (int64_t i = 0; i < hyp_grams; i++) {
            uint32_t g = hyp[i];
            if (c->hyp_count[g] > 0)
                matched += c->hyp_count[g] < c->ref_max[g] ? c->hyp_count[g] : c->ref_max[g];
            c->hyp_count[g] = 0;
        }
        for (int s = 1; s < n_seqs; s++) {
            const uint32_t *ref = c->gram + start[s];
            for (int64_t i = 0; i + order <= start[s + 1] - start[s]; i++)
                c->ref_max[ref[i]] = 0;
        }
        c->matches[order - 1] += matched;
        c->totals[order - 1] += hyp_grams;
    }
    return ATTN_OK;
}

static attn_status bleu_statistics(const char *fn, bleu_counter *c,
                                   const char *const *hypotheses, int64_t n,
                                   const char *const *const *references, int64_t n_refs)
{
    ATTN_CHECK_ARG(n_refs <= INT32_MAX - 2, "%s: too many reference streams (%lld)", fn,
                   (long long)n_refs);
    c->seq_start = malloc((size_t)(n_refs + 2) * sizeof *c->seq_start);
    if (c->seq_start == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t i = 0; i < n; i++) {
        ATTN_TRY(check_segment(fn, "hypothesis", i, hypotheses[i]));
        c->symbols.size = 0;
        c->seq_start[0] = 0;
        ATTN_TRY(add_tokens(c, c->config->tokenize, hypotheses[i]));
        int n_seqs = 1;
        c->seq_start[1] = c->symbols.size;
        for (int64_t r = 0; r < n_refs; r++) {
            const char *ref = references[r][i];
            if (reference_absent(ref))
                continue;
            ATTN_TRY(check_segment(fn, "reference", i, ref));
            ATTN_TRY(add_tokens(c, c->config->tokenize, ref));
            c->seq_start[++n_seqs] = c->symbols.size;
        }
        if (n_seqs == 1)
            return attn_fail(ATTN_ERR_FORMAT, "%s: segment %lld has no reference (all empty)",
                             fn, (long long)(i + 1));
        ATTN_TRY(count_segment(c, n_seqs));
    }
    return ATTN_OK;
}

attn_status attn_bleu_corpus(const attn_bleu_config *config, const char *const *hypotheses,
                             int64_t n, const char *const *const *references, int64_t n_refs,
                             attn_bleu_result *out)
{
    static const char fn[] = "attn_bleu_corpus";
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    attn_bleu_config resolved;
    ATTN_TRY(resolve_config(fn, config, &resolved));
    ATTN_TRY(check_corpus_args(fn, hypotheses, n, references, n_refs));
    bleu_counter counter;
    memset(&counter, 0, sizeof counter);
    counter.config = &resolved;
    attn_status status = bleu_statistics(fn, &counter, hypotheses, n, references, n_refs);
    if (status == ATTN_OK)
        compute_bleu(&resolved, counter.matches, counter.totals, counter.hyp_len,
                     counter.ref_len, out);
    bleu_counter_free(&counter);
    return status;
}

/* ---- text -------------------------------------------------------------------------------- */

attn_status attn_bleu_format(const attn_bleu_result *result, int width, char *buffer,
                             size_t size)
{
    static const char fn[] = "attn_bleu_format";
    ATTN_CHECK_NOT_NULL(result);
    ATTN_CHECK_NOT_NULL(buffer);
    ATTN_CHECK_ARG(width >= 0 && width <= 17, "%s: width must be in 0..17, got %d", fn, width);
    ATTN_CHECK_ARG(result->max_order >= 1 && result->max_order <= ATTN_BLEU_MAX_ORDER,
                   "%s: result->max_order %d is out of range", fn, result->max_order);
    char precisions[ATTN_BLEU_MAX_ORDER * 32];
    size_t used = 0;
    for (int n = 0; n < result->max_order; n++) {
        int written = snprintf(precisions + used, sizeof precisions - used, "%s%.1f",
                               n > 0 ? "/" : "", result->precisions[n]);
        if (written < 0 || (size_t)written >= sizeof precisions - used)
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: precisions out of range", fn);
        used += (size_t)written;
    }
    int written = snprintf(buffer, size,
                           "BLEU = %.*f %s (BP = %.3f ratio = %.3f hyp_len = %lld ref_len = %lld)",
                           width, result->score, precisions, result->brevity_penalty,
                           result->ratio, (long long)result->hyp_len, (long long)result->ref_len);
    if (written < 0 || (size_t)written >= size)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: the line needs %d bytes, size is %zu",
                         fn, written + 1, size);
    return ATTN_OK;
}

attn_status attn_bleu_tokenize_text(attn_bleu_tokenize tokenize, const char *text, char **tokens)
{
    static const char fn[] = "attn_bleu_tokenize_text";
    ATTN_CHECK_NOT_NULL(tokens);
    *tokens = NULL;
    ATTN_CHECK_ARG(tokenize == ATTN_BLEU_TOKENIZE_13A || tokenize == ATTN_BLEU_TOKENIZE_NONE,
                   "%s: unknown tokenize %d", fn, (int)tokenize);
    ATTN_TRY(check_segment(fn, "text", 0, text));
    size_t size = rstrip_length(text, strlen(text));
    byte_buffer out = {0};
    attn_status status = tokenize == ATTN_BLEU_TOKENIZE_13A ? tokenize_13a(text, size, &out)
                                                            : join_tokens(text, size, &out);
    if (status != ATTN_OK) {
        byte_buffer_free(&out);
        return status;
    }
    *tokens = out.data;
    return ATTN_OK;
}
