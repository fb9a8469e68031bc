/* attn_decode: options, results, and the search run on a model's step decoder; greedy decoding
 * into plain arrays. */
#include "decode/decode_internal.h"

#include "attn/attn_data.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Beyond these the search is not what anyone means (and the row count would overflow). */
static const double MAX_ALPHA = 100.0, MAX_RATIO = 1e6;

attn_decode_options attn_decode_default_options(void)
{
    attn_decode_options options;
    memset(&options, 0, sizeof options);
    options.beam_size = 1;
    options.nbest = 1;
    options.length_penalty = 0.6;
    options.max_len_ratio = 1.5;
    options.max_len_offset = 10;
    return options;
}

attn_status attn_decode_options_validate(const attn_decode_options *options)
{
    static const char fn[] = "attn_decode";
    ATTN_CHECK_NOT_NULL(options);
    ATTN_CHECK_ARG(options->beam_size >= 1 && options->beam_size <= ATTN_DECODE_MAX_BEAM,
                   "%s: beam_size %lld is outside [1, %d]", fn, (long long)options->beam_size,
                   ATTN_DECODE_MAX_BEAM);
    ATTN_CHECK_ARG(options->nbest >= 1 && options->nbest <= options->beam_size,
                   "%s: nbest %lld is outside [1, beam_size %lld]", fn, (long long)options->nbest,
                   (long long)options->beam_size);
    ATTN_CHECK_ARG(options->length_penalty >= 0.0 && options->length_penalty <= MAX_ALPHA,
                   "%s: length_penalty (alpha) %g is outside [0, %g]", fn, options->length_penalty,
                   MAX_ALPHA);
    ATTN_CHECK_ARG(options->max_len_ratio >= 0.0 && options->max_len_ratio <= MAX_RATIO,
                   "%s: max_len_ratio %g is outside [0, %g]", fn, options->max_len_ratio,
                   MAX_RATIO);
    ATTN_CHECK_ARG(options->max_len_offset >= 0, "%s: max_len_offset %lld is negative", fn,
                   (long long)options->max_len_offset);
    ATTN_CHECK_ARG(options->max_len >= 0, "%s: max_len %lld is negative", fn,
                   (long long)options->max_len);
    return ATTN_OK;
}

int64_t attn_decode_max_output_length(const attn_decode_options *options, int64_t src_length,
                                      int64_t model_max_len)
{
    double length = options->max_len > 0 ? (double)options->max_len
                                         : floor(options->max_len_ratio * (double)src_length) +
                                               (double)options->max_len_offset;
    if (length > (double)model_max_len)
        length = (double)model_max_len;
    return length < 1.0 ? 1 : (int64_t)length;
}

void attn_decode_free_sentences(attn_decode_result *result)
{
    for (int64_t i = 0; result->sentences != NULL && i < result->size; i++) {
        attn_decode_sentence *sentence = &result->sentences[i];
        for (int64_t j = 0; sentence->hypotheses != NULL && j < sentence->count; j++) {
            free(sentence->hypotheses[j].tokens);
            free(sentence->hypotheses[j].cross);
        }
        free(sentence->hypotheses);
    }
    free(result->sentences);
    result->sentences = NULL;
}

void attn_decode_result_destroy(attn_decode_result *result)
{
    if (result == NULL)
        return;
    attn_decode_free_sentences(result);
    free(result);
}

attn_status attn_decode_alignment(const attn_decode_result *result,
                                  const attn_hypothesis *hypothesis, int64_t src_length,
                                  int64_t layer, int64_t head, float *out)
{
    static const char fn[] = "attn_decode_alignment";
    ATTN_CHECK_NOT_NULL(result);
    ATTN_CHECK_NOT_NULL(hypothesis);
    ATTN_CHECK_NOT_NULL(out);
    ATTN_CHECK_ARG(hypothesis->cross != NULL && result->cross_maps > 0,
                   "%s: the result has no alignments (decode with options.alignments set)", fn);
    ATTN_CHECK_ARG(src_length >= 1, "%s: src_length %lld must be >= 1", fn, (long long)src_length);
    const int64_t layers = result->cross_layers, heads = result->cross_heads;
    ATTN_CHECK_ARG(layer >= -1 && layer < layers, "%s: layer %lld is outside [-1, %lld)", fn,
                   (long long)layer, (long long)layers);
    ATTN_CHECK_ARG(head >= -1 && head < heads, "%s: head %lld is outside [-1, %lld)", fn,
                   (long long)head, (long long)heads);
    const int64_t l = layer < 0 ? layers - 1 : layer;
    const int64_t first = head < 0 ? 0 : head, count = head < 0 ? heads : 1;
    for (int64_t t = 0; t < hypothesis->steps; t++)
        for (int64_t j = 0; j < src_length; j++) {
            double sum = 0.0;
            for (int64_t h = first; h < first + count; h++)
                sum +=
                    hypothesis->cross[((t * result->cross_maps) + l * heads + h) * src_length + j];
            out[t * src_length + j] = (float)(sum / (double)count);
        }
    return ATTN_OK;
}

static attn_status check_batch(const attn_model_config *config, int64_t size, int64_t src_len,
                               const int32_t *src, const int32_t *src_lengths)
{
    static const char fn[] = "attn_decode";
    ATTN_CHECK_NOT_NULL(src);
    ATTN_CHECK_NOT_NULL(src_lengths);
    ATTN_CHECK_ARG(src_len >= 1, "%s: src_len %lld must be >= 1", fn, (long long)src_len);
    ATTN_CHECK_ARG(src_len <= config->max_len, "%s: src_len %lld is above the model's max_len %lld",
                   fn, (long long)src_len, (long long)config->max_len);
    for (int64_t b = 0; b < size; b++) {
        ATTN_CHECK_ARG(src_lengths[b] >= 1 && src_lengths[b] <= src_len,
                       "%s: src_lengths[%lld] = %d is outside [1, src_len %lld]", fn, (long long)b,
                       (int)src_lengths[b], (long long)src_len);
        for (int64_t j = 0; j < src_lengths[b]; j++) {
            int32_t id = src[b * src_len + j];
            ATTN_CHECK_ARG(id >= 0 && id < config->src_vocab,
                           "%s: src[%lld, %lld] = %d is outside the source vocabulary [0, %lld)",
                           fn, (long long)b, (long long)j, (int)id, (long long)config->src_vocab);
        }
    }
    return ATTN_OK;
}

/* Encodes the batch with each model and starts its step decoder; several models are joined
 * into one ensemble decoder (attn_model_step_ensemble), one is used as it is. */
static attn_status start_decoder(attn_model *const *models, attn_graph *const *graphs,
                                 int64_t count, int64_t size, int64_t src_len, const int32_t *src,
                                 const int32_t *src_lengths, int64_t max_rows, int64_t max_steps,
                                 attn_step_decoder **out)
{
    attn_step_decoder **members = calloc((size_t)count, sizeof *members);
    if (members == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_decode: out of memory");
    attn_status status = ATTN_OK;
    for (int64_t m = 0; m < count && status == ATTN_OK; m++) {
        attn_graph *graph = graphs[m];
        attn_graph_reset(graph);
        attn_graph_set_recording(graph, 0);
        attn_graph_set_training(graph, 0);
        attn_var *memory;
        status = attn_model_encode(models[m], graph, size, src_len, src, src_lengths, &memory);
        if (status == ATTN_OK)
            status = attn_model_step_start(models[m], graph, memory, src_lengths, max_rows,
                                           max_steps, &members[m]);
        /* The step decoder holds what it needs from the encoder. */
        attn_graph_reset(graph);
    }
    if (status == ATTN_OK && count == 1)
        *out = members[0];
    else if (status == ATTN_OK)
        status = attn_model_step_ensemble(members, count, out);
    if (status != ATTN_OK)
        for (int64_t m = 0; m < count; m++)
            attn_model_step_destroy(members[m]);
    free(members);
    return status;
}

static attn_status decode_batch(attn_model *const *models, attn_graph *const *graphs, int64_t count,
                                int64_t size, int64_t src_len, const int32_t *src,
                                const int32_t *src_lengths, const attn_decode_options *options,
                                const int64_t *max_lengths, attn_decode_result *result)
{
    int64_t longest = 1;
    for (int64_t b = 0; b < size; b++)
        longest = max_lengths[b] > longest ? max_lengths[b] : longest;
    attn_step_decoder *decoder = NULL;
    ATTN_TRY(start_decoder(models, graphs, count, size, src_len, src, src_lengths,
                           size * options->beam_size, longest, &decoder));
    if (options->alignments) {
        result->cross_maps = decoder->cross_maps;
        result->cross_layers = decoder->cross_layers;
        result->cross_heads = result->cross_maps / result->cross_layers;
    }
    attn_status status = attn_search_run(decoder, size, src_lengths, max_lengths, options, result);
    attn_model_step_destroy(decoder);
    return status;
}

/* Each model translates (an encoder-decoder on its own graph), reads the batch's source ids,
 * and agrees with the first on the target vocabulary. */
static attn_status check_models(attn_model *const *models, attn_graph *const *graphs, int64_t count,
                                int64_t size, int64_t src_len, const int32_t *src,
                                const int32_t *src_lengths)
{
    static const char fn[] = "attn_decode";
    ATTN_CHECK_NOT_NULL(models);
    ATTN_CHECK_NOT_NULL(graphs);
    ATTN_CHECK_ARG(count >= 1, "%s: %lld models, expected at least one", fn, (long long)count);
    for (int64_t m = 0; m < count; m++) {
        ATTN_CHECK_ARG(models[m] != NULL && graphs[m] != NULL,
                       "%s: models[%lld] or graphs[%lld] is NULL", fn, (long long)m, (long long)m);
        const attn_model_config *config = attn_model_get_config(models[m]);
        ATTN_CHECK_ARG(config->arch == ATTN_ARCH_TRANSFORMER || config->arch == ATTN_ARCH_RNN,
                       "%s: the model is not an encoder-decoder (arch transformer or rnn)", fn);
        ATTN_CHECK_ARG(attn_graph_params(graphs[m]) == attn_model_params(models[m]),
                       "%s: graph is not a graph of the model's parameters", fn);
        const int64_t first_vocab = attn_model_get_config(models[0])->tgt_vocab;
        ATTN_CHECK_ARG(config->tgt_vocab == first_vocab,
                       "%s: models[%lld] has a target vocabulary of %lld, models[0] of %lld", fn,
                       (long long)m, (long long)config->tgt_vocab, (long long)first_vocab);
        for (int64_t k = 0; k < m; k++)
            ATTN_CHECK_ARG(graphs[k] != graphs[m], "%s: models %lld and %lld share a graph", fn,
                           (long long)k, (long long)m);
        if (size > 0)
            ATTN_TRY(check_batch(config, size, src_len, src, src_lengths));
    }
    return ATTN_OK;
}

attn_status attn_decode(attn_model *model, attn_graph *graph, int64_t size, int64_t src_len,
                        const int32_t *src, const int32_t *src_lengths,
                        const attn_decode_options *options, attn_decode_result **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(graph);
    return attn_decode_ensemble(&model, &graph, 1, size, src_len, src, src_lengths, options, out);
}

attn_status attn_decode_ensemble(attn_model *const *models, attn_graph *const *graphs,
                                 int64_t count, int64_t size, int64_t src_len, const int32_t *src,
                                 const int32_t *src_lengths, const attn_decode_options *options,
                                 attn_decode_result **out)
{
    static const char fn[] = "attn_decode";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(options);
    ATTN_TRY(attn_decode_options_validate(options));
    ATTN_CHECK_ARG(size >= 0, "%s: negative batch size %lld", fn, (long long)size);
    ATTN_CHECK_ARG(size <= INT64_MAX / ATTN_DECODE_MAX_BEAM, "%s: batch size %lld is too large", fn,
                   (long long)size);
    ATTN_TRY(check_models(models, graphs, count, size, src_len, src, src_lengths));

    attn_decode_result *result = calloc(1, sizeof *result);
    int64_t *max_lengths = malloc((size_t)(size > 0 ? size : 1) * sizeof *max_lengths);
    if (result == NULL || max_lengths == NULL) {
        free(result);
        free(max_lengths);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    /* Every member must cover the output's positions. */
    int64_t model_max_len = attn_model_get_config(models[0])->max_len;
    for (int64_t m = 1; m < count; m++) {
        const int64_t max_len = attn_model_get_config(models[m])->max_len;
        model_max_len = max_len < model_max_len ? max_len : model_max_len;
    }
    result->size = size;
    for (int64_t b = 0; b < size; b++)
        max_lengths[b] = attn_decode_max_output_length(options, src_lengths[b], model_max_len);
    attn_status status = ATTN_OK;
    if (size > 0)
        status = decode_batch(models, graphs, count, size, src_len, src, src_lengths, options,
                              max_lengths, result);
    free(max_lengths);
    if (status != ATTN_OK) {
        attn_decode_result_destroy(result);
        return status;
    }
    *out = result;
    return ATTN_OK;
}

/* ---- greedy decoding into plain arrays ------------------------------------------------------ */

attn_status attn_greedy_decode(attn_model *model, attn_graph *graph, int64_t size, int64_t src_len,
                               const int32_t *src, const int32_t *src_lengths, int64_t max_len,
                               int32_t *out, int64_t *out_lengths)
{
    static const char fn[] = "attn_greedy_decode";
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(graph);
    const attn_model_config *config = attn_model_get_config(model);
    ATTN_CHECK_ARG(config->arch == ATTN_ARCH_TRANSFORMER || config->arch == ATTN_ARCH_RNN,
                   "%s: greedy decoding needs an encoder-decoder model (transformer or rnn)", fn);
    ATTN_CHECK_ARG(size >= 0, "%s: negative batch size %lld", fn, (long long)size);
    if (size == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(src);
    ATTN_CHECK_NOT_NULL(src_lengths);
    ATTN_CHECK_NOT_NULL(out);
    ATTN_CHECK_NOT_NULL(out_lengths);
    ATTN_CHECK_ARG(max_len >= 1 && max_len <= config->max_len,
                   "%s: max_len %lld is outside [1, the model's max_len %lld]", fn,
                   (long long)max_len, (long long)config->max_len);
    for (int64_t b = 0; b < size; b++)
        ATTN_CHECK_ARG(src_lengths[b] >= 1 && src_lengths[b] <= src_len,
                       "%s: src_lengths[%lld] = %d is outside [1, src_len %lld]", fn, (long long)b,
                       (int)src_lengths[b], (long long)src_len);

    /* The decoding layer's search with one hypothesis is greedy decoding; this keeps the
     * trainer's fixed-width output for the callers that want plain arrays. */
    attn_decode_options options = attn_decode_default_options();
    options.beam_size = 1;
    options.nbest = 1;
    options.max_len = max_len;
    attn_decode_result *result = NULL;
    ATTN_TRY(attn_decode(model, graph, size, src_len, src, src_lengths, &options, &result));
    for (int64_t b = 0; b < size; b++) {
        const attn_hypothesis *best = &result->sentences[b].hypotheses[0];
        for (int64_t i = 0; i < max_len; i++)
            out[b * max_len + i] = i < best->length ? best->tokens[i] : ATTN_PAD_ID;
        out_lengths[b] = best->length;
    }
    attn_decode_result_destroy(result);
    return ATTN_OK;
}
