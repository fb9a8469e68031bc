/* The Transformer family and the RNN encoder-decoders behind the trainer's model interface. */
#include "core/internal.h"
#include "attn/attn_trainer.h"

#include <string.h>

static attn_params *model_params(void *self) { return attn_model_params(self); }

static attn_status model_config_json(void *self, char **json)
{
    return attn_model_config_to_json(attn_model_get_config(self), json);
}

static int32_t argmax_row(const float *row, int64_t n)
{
    int64_t best = 0;
    for (int64_t v = 1; v < n; v++)
        if (row[v] > row[best])
            best = v;
    return (int32_t)best;
}

/* Row (b, t) of the logits predicts tgt[b, t + 1]; rows past a target's end are ignored. */
static attn_status model_forward_loss(void *self, attn_graph *graph, const attn_model_batch *batch,
                                      int smoothed, attn_var **loss, int64_t *tokens,
                                      int64_t *correct)
{
    attn_model *model = self;
    const attn_model_config *config = attn_model_get_config(model);
    attn_var *logits;
    ATTN_TRY(attn_model_forward_logits(model, graph, batch, &logits));
    const int64_t steps = batch->tgt_len - 1, vocab = logits->value.shape[2];
    int32_t *labels = attn_graph_alloc(graph, (size_t)(batch->size * steps) * sizeof *labels);
    if (labels == NULL && batch->size * steps > 0)
        return ATTN_ERR_OUT_OF_MEMORY;
    int64_t counted = 0, right = 0;
    for (int64_t b = 0; b < batch->size; b++)
        for (int64_t t = 0; t < steps; t++) {
            int32_t label = -1;
            if (t + 1 < batch->tgt_lengths[b]) {
                label = batch->tgt[b * batch->tgt_len + t + 1];
                const float *row = logits->value.data + (b * steps + t) * vocab;
                counted++;
                right += argmax_row(row, vocab) == label;
            }
            labels[b * steps + t] = label;
        }
    *tokens = counted;
    *correct = right;
    float smoothing = smoothed ? (float)config->label_smoothing : 0.0f;
    return attn_op_cross_entropy(graph, logits, labels, -1, smoothing, loss);
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
