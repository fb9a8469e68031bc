/* Beam search with per-hypothesis back-pointers (see attn_decode.h for the rules).
 *
 * Bookkeeping. The rows fed to step t form "layout" t: each row's input token and the row of
 * layout t - 1 it extends, and, after the step, its cross maps. A hypothesis is never copied
 * while searching: one that leaves the beam is remembered as (layout, row, last token), and
 * its tokens and maps are read back through the parents at the end, so the alignment of a
 * returned hypothesis is exactly the maps of the rows that produced it, however the beam
 * reordered them. */
#include "decode/decode_internal.h"

#include "attn/attn_data.h"
#include "attn/attn_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct layout {
    int64_t rows;
    int32_t *tokens;  /* [rows] each row's input token at this step */
    int64_t *parents; /* [rows] the row of the previous layout it extends (-1 at step 0) */
    float *cross;     /* [rows, cross_maps, src_len] once the step ran; NULL without maps */
} layout;

/* A hypothesis that left the beam: finished (</s>) or cut at the maximum length. */
typedef struct ending {
    int64_t step;   /* the layout whose row produced the last token (or </s>) */
    int64_t row;
    int32_t token;  /* that last token; ATTN_EOS_ID when finished */
    double log_prob, score;
} ending;

typedef struct candidate {
    double log_prob;
    int64_t row; /* within the sentence's rows */
    int32_t token;
} candidate;

typedef struct sentence_state {
    int active;
    int64_t first_row, rows; /* in the current layout */
    ending *kept;            /* [nbest] best first */
    int64_t kept_count;
} sentence_state;

typedef struct search {
    attn_step_decoder *decoder;
    const attn_decode_options *options;
    int64_t size, beam, nbest, vocab, map_floats;
    layout *layouts;
    int64_t layout_count;
    sentence_state *sentences;
    double *row_log_prob, *next_log_prob; /* [size * beam] */
    int32_t *next_tokens;
    int64_t *next_parents;
    float *logits;         /* [size * beam, vocab] */
    candidate *candidates; /* [2 * beam] */
} search;

double attn_decode_length_penalty(int64_t length, double alpha)
{
    return pow((5.0 + (double)length) / 6.0, alpha);
}

/* Keeps the best nbest endings, best score first; an ending that ties one already kept ranks
 * after it (the earlier one wins). */
static void keep_ending(search *s, sentence_state *sentence, const ending *e)
{
    int64_t n = sentence->kept_count;
    if (n == s->nbest && !(e->score > sentence->kept[n - 1].score))
        return;
    int64_t at = n < s->nbest ? n : n - 1;
    while (at > 0 && e->score > sentence->kept[at - 1].score) {
        sentence->kept[at] = sentence->kept[at - 1];
        at--;
    }
    sentence->kept[at] = *e;
    if (n < s->nbest)
        sentence->kept_count = n + 1;
}

/* The best `limit` candidates of a sentence's rows (log-softmaxed logits in s->logits), best
 * first; ties go to the lower row, then the lower token, since those are seen first and only a
 * strictly better candidate moves ahead. <pad> and <s> are never proposed; -inf and NaN are
 * skipped. Returns how many were found. */
static int64_t best_candidates(search *s, const sentence_state *sentence, int64_t limit)
{
    int64_t found = 0;
    candidate *best = s->candidates;
    for (int64_t r = 0; r < sentence->rows; r++) {
        const int64_t row = sentence->first_row + r;
        const float *log_p = s->logits + row * s->vocab;
        const double base = s->row_log_prob[row];
        for (int64_t v = 0; v < s->vocab; v++) {
            if (v == ATTN_PAD_ID || v == ATTN_BOS_ID)
                continue;
            double value = base + (double)log_p[v];
            if (!(value > -INFINITY))
                continue;
            if (found == limit && !(value > best[limit - 1].log_prob))
                continue;
            int64_t at = found < limit ? found++ : limit - 1;
            while (at > 0 && value > best[at - 1].log_prob) {
                best[at] = best[at - 1];
                at--;
            }
            best[at] = (candidate){value, r, (int32_t)v};
        }
    }
    return found;
}

/* Walks one sentence's ranked candidates: finished hypotheses to its kept list, live ones to
 * the next layout (appended at *next_rows), and decides whether the sentence goes on. */
static void advance_sentence(search *s, sentence_state *sentence, int64_t step,
                             int64_t max_length, int64_t *next_rows)
{
    const double alpha = s->options->length_penalty;
    const int64_t found = best_candidates(s, sentence, 2 * s->beam);
    const int64_t new_length = step + 1; /* tokens in a live hypothesis after this step */
    const int64_t first_live = *next_rows;
    int64_t live = 0;
    for (int64_t i = 0; i < found && live < s->beam; i++) {
        const candidate *c = &s->candidates[i];
        const int64_t parent = sentence->first_row + c->row;
        if (c->token == ATTN_EOS_ID) {
            if (i < s->beam) {
                ending e = {step, parent, c->token, c->log_prob,
                            c->log_prob / attn_decode_length_penalty(step, alpha)};
                keep_ending(s, sentence, &e);
            }
            continue;
        }
        const int64_t at = first_live + live++;
        s->next_tokens[at] = c->token;
        s->next_parents[at] = parent;
        s->next_log_prob[at] = c->log_prob;
    }
    int go_on, cut = 0;
    if (s->beam == 1 && sentence->kept_count > 0) {
        go_on = 0; /* greedy: the arg-max was </s> */
    } else if (live == 0) {
        go_on = 0;
    } else if (new_length >= max_length) {
        go_on = 0;
        cut = 1;
    } else if (sentence->kept_count < s->nbest) {
        go_on = 1;
    } else {
        /* The live hypotheses are in rank order: the first has the best log P. */
        double bound = s->next_log_prob[first_live] /
                       attn_decode_length_penalty(max_length, alpha);
        go_on = sentence->kept[s->nbest - 1].score < bound;
    }
    if (cut) {
        /* Cut at the maximum length: the live hypotheses end here, without </s>. */
        for (int64_t r = 0; r < live; r++) {
            const int64_t at = first_live + r;
            ending e = {step, s->next_parents[at], s->next_tokens[at], s->next_log_prob[at],
                        s->next_log_prob[at] / attn_decode_length_penalty(new_length, alpha)};
            keep_ending(s, sentence, &e);
        }
    }
    sentence->active = go_on;
    if (go_on) {
        sentence->first_row = first_live;
        sentence->rows = live;
        *next_rows += live;
    }
}

static attn_status push_layout(search *s, int64_t rows, const int32_t *tokens,
                               const int64_t *parents)
{
    layout *l = &s->layouts[s->layout_count];
    memset(l, 0, sizeof *l);
    l->rows = rows;
    l->tokens = malloc((size_t)rows * sizeof *l->tokens);
    l->parents = malloc((size_t)rows * sizeof *l->parents);
    if (s->map_floats > 0)
        l->cross = malloc((size_t)(rows * s->map_floats) * sizeof *l->cross);
    s->layout_count++;
    if (l->tokens == NULL || l->parents == NULL || (s->map_floats > 0 && l->cross == NULL))
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decode: out of memory for step %lld",
                         (long long)(s->layout_count - 1));
    memcpy(l->tokens, tokens, (size_t)rows * sizeof *tokens);
    memcpy(l->parents, parents, (size_t)rows * sizeof *parents);
    return ATTN_OK;
}

/* Reads an ending back through the parents into a hypothesis. */
static attn_status build_hypothesis(const search *s, const ending *e, int64_t src_length,
                                    attn_hypothesis *h)
{
    const int finished = e->token == ATTN_EOS_ID;
    memset(h, 0, sizeof *h);
    h->finished = finished;
    h->length = e->step + (finished ? 0 : 1);
    h->steps = e->step + 1;
    h->log_prob = e->log_prob;
    h->score = e->score;
    h->tokens = malloc((size_t)(h->length > 0 ? h->length : 1) * sizeof *h->tokens);
    const int64_t maps = s->decoder->cross_maps, src_len = s->decoder->src_len;
    if (s->map_floats > 0)
        h->cross = malloc((size_t)(h->steps * maps * src_length) * sizeof *h->cross);
    if (h->tokens == NULL || (s->map_floats > 0 && h->cross == NULL))
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decode: out of memory for a result");
    if (!finished)
        h->tokens[e->step] = e->token;
    int64_t row = e->row;
    for (int64_t t = e->step; t >= 0; t--) {
        const layout *l = &s->layouts[t];
        if (h->cross != NULL)
            for (int64_t m = 0; m < maps; m++)
                memcpy(h->cross + (t * maps + m) * src_length,
                       l->cross + (row * maps + m) * src_len,
                       (size_t)src_length * sizeof *h->cross);
        if (t > 0) {
            h->tokens[t - 1] = l->tokens[row];
            row = l->parents[row];
        }
    }
    return ATTN_OK;
}

static void free_search(search *s)
{
    for (int64_t t = 0; s->layouts != NULL && t < s->layout_count; t++) {
        free(s->layouts[t].tokens);
        free(s->layouts[t].parents);
        free(s->layouts[t].cross);
    }
    free(s->layouts);
    for (int64_t i = 0; s->sentences != NULL && i < s->size; i++)
        free(s->sentences[i].kept);
    free(s->sentences);
    free(s->row_log_prob);
    free(s->next_log_prob);
    free(s->next_tokens);
    free(s->next_parents);
    free(s->logits);
    free(s->candidates);
}

static attn_status run(search *s, const int32_t *src_lengths, const int64_t *max_lengths,
                       attn_decode_result *result)
{
    const int64_t rows_max = s->size * s->beam;
    /* attn_decode only searches non-empty batches; the bound keeps size arithmetic in range. */
    if (s->size < 1 || s->size > INT32_MAX)
        return attn_fail(ATTN_ERR_INTERNAL, "attn_decode: batch of %lld sentences",
                         (long long)s->size);
    const size_t sentences = (size_t)s->size;
    int64_t longest = 0;
    for (int64_t i = 0; i < s->size; i++)
        longest = max_lengths[i] > longest ? max_lengths[i] : longest;
    s->layouts = calloc((size_t)longest, sizeof *s->layouts);
    s->sentences = calloc(sentences, sizeof *s->sentences);
    s->row_log_prob = calloc((size_t)rows_max, sizeof *s->row_log_prob);
    s->next_log_prob = calloc((size_t)rows_max, sizeof *s->next_log_prob);
    s->next_tokens = calloc((size_t)rows_max, sizeof *s->next_tokens);
    s->next_parents = calloc((size_t)rows_max, sizeof *s->next_parents);
    s->candidates = calloc((size_t)(2 * s->beam), sizeof *s->candidates);
    size_t logit_floats;
    if (!attn_mul_size((size_t)rows_max, (size_t)s->vocab, &logit_floats))
        return ATTN_ERR_OUT_OF_MEMORY;
    s->logits = malloc(logit_floats * sizeof *s->logits);
    if (s->layouts == NULL || s->sentences == NULL || s->row_log_prob == NULL ||
        s->next_log_prob == NULL || s->next_tokens == NULL || s->next_parents == NULL ||
        s->candidates == NULL || s->logits == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decode: out of memory for %lld rows",
                         (long long)rows_max);
    for (int64_t i = 0; i < s->size; i++) {
        sentence_state *sentence = &s->sentences[i];
        sentence->kept = malloc((size_t)s->nbest * sizeof *sentence->kept);
        if (sentence->kept == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decode: out of memory");
        sentence->active = 1;
        sentence->first_row = i;
        sentence->rows = 1;
        s->next_tokens[i] = ATTN_BOS_ID;
        s->next_parents[i] = -1;
    }
    int64_t rows = s->size;
    for (int64_t step = 0; rows > 0; step++) {
        ATTN_TRY(push_layout(s, rows, s->next_tokens, s->next_parents));
        layout *l = &s->layouts[step];
        ATTN_TRY(attn_model_step(s->decoder, l->tokens, s->logits, l->cross));
        ATTN_TRY(attn_log_softmax_forward(rows, s->vocab, s->logits, s->logits));
        int64_t next_rows = 0;
        for (int64_t i = 0; i < s->size; i++)
            if (s->sentences[i].active)
                advance_sentence(s, &s->sentences[i], step, max_lengths[i], &next_rows);
        if (next_rows > 0)
            ATTN_TRY(attn_model_step_select(s->decoder, s->next_parents, next_rows));
        double *swap = s->row_log_prob;
        s->row_log_prob = s->next_log_prob;
        s->next_log_prob = swap;
        rows = next_rows;
    }

    result->sentences = calloc(sentences, sizeof *result->sentences);
    if (result->sentences == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decode: out of memory for the result");
    for (int64_t i = 0; i < s->size; i++) {
        const sentence_state *state = &s->sentences[i];
        attn_decode_sentence *sentence = &result->sentences[i];
        sentence->src_length = src_lengths[i];
        sentence->hypotheses = calloc((size_t)(state->kept_count > 0 ? state->kept_count : 1),
                                      sizeof *sentence->hypotheses);
        if (sentence->hypotheses == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decode: out of memory");
        for (int64_t j = 0; j < state->kept_count; j++) {
            sentence->count = j + 1;
            ATTN_TRY(build_hypothesis(s, &state->kept[j], src_lengths[i],
                                      &sentence->hypotheses[j]));
        }
    }
    return ATTN_OK;
}

attn_status attn_search_run(attn_step_decoder *decoder, int64_t size, const int32_t *src_lengths,
                            const int64_t *max_lengths, const attn_decode_options *options,
                            attn_decode_result *result)
{
    search s;
    memset(&s, 0, sizeof s);
    s.decoder = decoder;
    s.options = options;
    s.size = size;
    s.beam = options->beam_size;
    s.nbest = options->nbest;
    s.vocab = decoder->vocab;
    s.map_floats = options->alignments ? decoder->cross_maps * decoder->src_len : 0;
    result->sentences = NULL;
    attn_status status = run(&s, src_lengths, max_lengths, result);
    free_search(&s);
    if (status != ATTN_OK)
        attn_decode_free_sentences(result);
    return status;
}
