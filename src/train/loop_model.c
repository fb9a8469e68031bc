/* The Transformer family (the classifier included) and the RNN encoder-decoders behind the
 * trainer's model interface, and the batcher's batches in the models' layout. */
#include "core/internal.h"
#include "attn/attn_trainer.h"

#include <string.h>

/* The models layer cannot see the data layer's ids; the classification token must be <s>. */
_Static_assert(ATTN_MODEL_CLS_ID == ATTN_BOS_ID, "the cls pooling's token is <s>");

static attn_params *model_params(void *self)
{
    return attn_model_params(self);
}

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
    ATTN_CHECK_ARG(attn_model_precision(model) == ATTN_PRECISION_FP32,
                   "attn_trainable_from_model: the model holds %s weights (attn quantize's "
                   "output), which are for inference only: train or fine-tune from the fp32 "
                   "model file",
                   attn_precision_name(attn_model_precision(model)));
    out->self = model;
    out->params = model_params;
    out->forward_loss = model_forward_loss;
    out->config_json = model_config_json;
    return ATTN_OK;
}

attn_model_batch attn_model_batch_of(const attn_batch *b)
{
    attn_model_batch m;
    memset(&m, 0, sizeof m);
    m.size = b->size;
    m.src_len = b->source_len;
    m.src = b->source;
    m.src_lengths = b->source_lengths;
    m.tgt_len = b->target_len;
    m.tgt = b->target;
    m.tgt_lengths = b->target_lengths;
    m.labels = b->labels;
    m.mlm_targets = b->mlm_targets;
    return m;
}
