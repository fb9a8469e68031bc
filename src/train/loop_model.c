/* The Transformer family and the RNN encoder-decoders behind the trainer's model interface,
 * and greedy decoding. */
#include "core/internal.h"
#include "attn/attn_trainer.h"
#include "attn/attn_decode.h"

#include <string.h>

static attn_params *model_params(void *self) { return attn_model_params(self); }

static attn_status model_config_json(void *self, char **json)
{
    return attn_model_config_to_json(attn_model_get_config(self), json);
}

static attn_status model_forward_loss(void *self, attn_graph *graph, const attn_model_batch *batch,
                                      int smoothed, attn_var **loss, int64_t *tokens,
                                      int64_t *correct)
{
    return attn_model_forward_loss_counted(self, graph, batch, smoothed, loss, tokens, correct);
}

attn_status attn_trainable_from_model(attn_model *model, attn_trainable *out)
{
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(model);
    attn_model_arch arch = attn_model_get_config(model)->arch;
    ATTN_CHECK_ARG(arch == ATTN_ARCH_TRANSFORMER || arch == ATTN_ARCH_TRANSFORMER_LM ||
                       arch == ATTN_ARCH_RNN,
                   "attn_trainable_from_model: the trainer takes sequence-to-sequence models "
                   "and language models, not the classifier");
    out->self = model;
    out->params = model_params;
    out->forward_loss = model_forward_loss;
    out->config_json = model_config_json;
    return ATTN_OK;
}

/* ---- greedy decoding --------------------------------------------------------------------- */

attn_status attn_greedy_decode(attn_model *model, attn_graph *graph, int64_t size,
                               int64_t src_len, const int32_t *src, const int32_t *src_lengths,
                               int64_t max_len, int32_t *out, int64_t *out_lengths)
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
                       "%s: src_lengths[%lld] = %d is outside [1, src_len %lld]", fn,
                       (long long)b, (int)src_lengths[b], (long long)src_len);

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
