/* The search behind attn_decode, written against a small stepping interface so that tests can
 * drive it with scripted models whose best hypotheses are known. */
#ifndef ATTN_DECODE_INTERNAL_H
#define ATTN_DECODE_INTERNAL_H

#include "attn/attn_decode.h"
#include "core/internal.h"

/* What the search needs from a model: rows decoded in lockstep, one token per step. It
 * starts with one row per sentence, each fed <s> first. */
typedef struct attn_search_model {
    void *self;
    int64_t vocab;      /* logits per row */
    int64_t src_len;    /* columns of a cross map */
    int64_t cross_maps; /* cross maps per row and step */
    /* ids [rows] -> logits [rows, vocab], cross (NULL: not wanted) [rows, cross_maps,
     * src_len]; rows is the size after the last select (at first: the batch size). */
    attn_status (*step)(void *self, const int32_t *ids, float *logits, float *cross);
    /* new row r = old row rows[r], r < new_size (repeats allowed). */
    attn_status (*select)(void *self, const int64_t *rows, int64_t new_size);
} attn_search_model;

/* Searches for every sentence of the batch (size sentences, row s starting as sentence s)
 * and fills result->sentences (allocated here; result->size, cross_* set by the caller).
 * max_lengths [size] >= 1: each sentence's maximum output length; src_lengths [size]: the
 * columns of its cross maps kept in the result. The model must allow size * beam_size rows
 * and max(max_lengths) steps. On failure result->sentences is freed and NULL. */
ATTN_INTERNAL attn_status attn_search_run(const attn_search_model *model, int64_t size,
                                          const int32_t *src_lengths,
                                          const int64_t *max_lengths,
                                          const attn_decode_options *options,
                                          attn_decode_result *result);

/* Frees result->sentences and everything in them, and sets it to NULL. */
ATTN_INTERNAL void attn_decode_free_sentences(attn_decode_result *result);

#endif /* ATTN_DECODE_INTERNAL_H */
