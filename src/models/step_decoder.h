/* The one interface behind attn_model_step_* (attn_models.h): a step decoder is a table of
 * functions and the sizes every caller reads. Each architecture fills the table in its own file
 * (transformer_step.c, rnn_step.c); step_decoder.c checks the public calls' arguments and keeps
 * the counts, then calls through the table, so no caller branches on the architecture. The
 * search (src/decode/) drives decoders through the public calls, and its tests plug scripted
 * models in behind the same table. Not part of the public API. */
#ifndef ATTN_MODELS_STEP_DECODER_H
#define ATTN_MODELS_STEP_DECODER_H

#include "core/internal.h"
#include "attn/attn_models.h"

typedef struct attn_step_decoder_ops {
    /* One step of the decoder's size >= 1 rows (attn_model_step, whose arguments are
     * checked): ids [size] -> logits [size, vocab], cross (NULL: not wanted) [size,
     * cross_maps, src_len]. */
    attn_status (*step)(attn_step_decoder *decoder, const int32_t *ids, float *logits,
                        float *cross);
    /* New row r = old row rows[r] for r < new_size (attn_model_step_select; checked:
     * new_size <= max_rows, every rows[r] in [0, size)). */
    attn_status (*select)(attn_step_decoder *decoder, const int64_t *rows, int64_t new_size);
    /* Frees everything the decoder holds, the decoder included. */
    void (*destroy)(attn_step_decoder *decoder);
    /* Optional (NULL: step_decoder.c takes count steps instead): count >= 1 steps at once
     * (attn_model_step_prefill, checked), ids [size, count] -> the last one's logits [size,
     * vocab]. Must equal the steps it replaces; leaves the steps count to the caller. */
    attn_status (*prefill)(attn_step_decoder *decoder, const int32_t *ids, int64_t count,
                           float *logits);
} attn_step_decoder_ops;

/* The first member of every implementation's own struct, so that the implementation's
 * functions cast the decoder they are given back to it. The implementation's start fills
 * every field; step_decoder.c then updates size and steps. */
struct attn_step_decoder {
    const attn_step_decoder_ops *ops;
    int64_t size; /* the current rows */
    int64_t max_rows, max_steps;
    int64_t steps;        /* taken so far */
    int64_t vocab;        /* logits per row */
    int64_t src_len;      /* columns of a cross map (0: decoding from no memory) */
    int64_t cross_maps;   /* cross maps per row and step: cross_layers * heads */
    int64_t cross_layers; /* decoder layers those maps come from (0 with no cross maps) */
};

/* attn_model_step_start for each architecture, after the checks every architecture shares
 * (model, graph, max_rows >= 0, max_steps >= 1); fn names the caller. *out is NULL on
 * failure. */
ATTN_INTERNAL attn_status attn_transformer_step_start(const char *fn, attn_model *model,
                                                      attn_var *memory, const int32_t *src_lengths,
                                                      int64_t max_rows, int64_t max_steps,
                                                      attn_step_decoder **out);
ATTN_INTERNAL attn_status attn_rnn_step_start(const char *fn, attn_model *model, attn_graph *graph,
                                              attn_var *memory, const int32_t *src_lengths,
                                              int64_t max_rows, int64_t max_steps,
                                              attn_step_decoder **out);

#endif /* ATTN_MODELS_STEP_DECODER_H */
