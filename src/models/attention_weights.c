/* attn_model_attention_weights: one sentence through the model with an attention observer
 * on the graph, keeping the one map asked for. The models run their multi-head attention
 * operations in a fixed order, which is what turns (kind, layer) into the observer's index:
 * the encoder's layers first (one self-attention each), then each decoder layer's
 * self-attention followed by its cross-attention (the language model: one self-attention
 * per layer, no encoder). */
#include "attn/attn_models.h"
#include "core/internal.h"
#include "models/models_internal.h"

#include <string.h>

typedef struct wanted_map {
    int64_t index; /* the attention operation whose weights are kept */
    int64_t heads, len_q, len_k;
    float *weights;
    int64_t seen; /* attention operations observed */
    int found;
} wanted_map;

static attn_status keep_wanted(void *ctx, int64_t index, const float *weights, int64_t batch,
                               int64_t heads, int64_t len_q, int64_t len_k)
{
    wanted_map *w = ctx;
    w->seen++;
    if (index != w->index)
        return ATTN_OK;
    if (batch != 1 || heads != w->heads || len_q != w->len_q || len_k != w->len_k)
        return attn_fail(ATTN_ERR_INTERNAL,
                         "attn_model_attention_weights: attention %lld has shape [%lld, %lld, "
                         "%lld, %lld], not the expected [1, %lld, %lld, %lld]",
                         (long long)index, (long long)batch, (long long)heads, (long long)len_q,
                         (long long)len_k, (long long)w->heads, (long long)w->len_q,
                         (long long)w->len_k);
    memcpy(w->weights, weights, (size_t)(heads * len_q * len_k) * sizeof(float));
    w->found = 1;
    return ATTN_OK;
}

static const char *kind_name(attn_attention_kind kind)
{
    switch (kind) {
    case ATTN_ENCODER_SELF_ATTENTION:
        return "encoder self-attention";
    case ATTN_DECODER_SELF_ATTENTION:
        return "decoder self-attention";
    case ATTN_CROSS_ATTENTION:
        return "cross-attention";
    }
    return "?";
}

/* Checks that the architecture has the kind and the layer, and sets the index of its
 * operation and the map's shape. */
static attn_status locate(const char *fn, const attn_model_config *c, attn_attention_kind kind,
                          int64_t layer, int64_t src_len, int64_t tgt_len, wanted_map *w)
{
    ATTN_CHECK_ARG(kind == ATTN_ENCODER_SELF_ATTENTION || kind == ATTN_DECODER_SELF_ATTENTION ||
                       kind == ATTN_CROSS_ATTENTION,
                   "%s: unknown attention kind %d", fn, (int)kind);
    if (c->arch == ATTN_ARCH_RNN_CLASSIFIER)
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "%s: an rnn classifier has no self-attention: its recurrent encoder "
                         "reads the text in order, and only its pooling attends "
                         "(attn_model_pooling_weights)",
                         fn);
    if (c->arch == ATTN_ARCH_RNN)
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "%s: an rnn model has no multi-head attention (its alignments come "
                         "from attn_model_step's cross output)",
                         fn);
    const int has_encoder = c->arch != ATTN_ARCH_TRANSFORMER_LM;
    const int has_decoder =
        !attn_model_arch_is_classifier(c->arch) && c->arch != ATTN_ARCH_TRANSFORMER_MLM;
    const int has_cross = c->arch == ATTN_ARCH_TRANSFORMER;
    const int64_t encoder_layers = has_encoder ? c->encoder_layers : 0;
    ATTN_CHECK_ARG(kind != ATTN_ENCODER_SELF_ATTENTION || has_encoder,
                   "%s: a language model has no encoder self-attention", fn);
    ATTN_CHECK_ARG(kind != ATTN_DECODER_SELF_ATTENTION || has_decoder,
                   "%s: a classifier has no decoder self-attention", fn);
    ATTN_CHECK_ARG(kind != ATTN_CROSS_ATTENTION || has_cross,
                   "%s: only the encoder-decoder has cross-attention", fn);
    const int64_t layers = kind == ATTN_ENCODER_SELF_ATTENTION ? encoder_layers : c->decoder_layers;
    ATTN_CHECK_ARG(layer >= 0 && layer < layers, "%s: %s layer %lld: the model has %lld (from 0)",
                   fn, kind_name(kind), (long long)layer, (long long)layers);
    ATTN_CHECK_ARG(!has_encoder || src_len >= 1, "%s: the source needs at least one token", fn);
    ATTN_CHECK_ARG(kind == ATTN_ENCODER_SELF_ATTENTION || tgt_len >= 1,
                   "%s: the decoder input needs at least one token (<s>)", fn);
    w->heads = c->num_heads;
    switch (kind) {
    case ATTN_ENCODER_SELF_ATTENTION:
        w->index = layer;
        w->len_q = w->len_k = src_len;
        break;
    case ATTN_DECODER_SELF_ATTENTION:
        w->index = encoder_layers + (has_cross ? 2 * layer : layer);
        w->len_q = w->len_k = tgt_len;
        break;
    case ATTN_CROSS_ATTENTION:
        w->index = encoder_layers + 2 * layer + 1;
        w->len_q = tgt_len;
        w->len_k = src_len;
        break;
    }
    return ATTN_OK;
}

static attn_status run(attn_model *model, attn_graph *graph, const attn_model_config *c,
                       const int32_t *src, int64_t src_len, const int32_t *tgt, int64_t tgt_len,
                       attn_attention_kind kind)
{
    attn_var *memory = NULL, *logits;
    const int32_t src_length = (int32_t)src_len, tgt_length = (int32_t)tgt_len;
    if (c->arch != ATTN_ARCH_TRANSFORMER_LM) {
        ATTN_CHECK_NOT_NULL(src);
        ATTN_TRY(attn_model_encode(model, graph, 1, src_len, src, &src_length, &memory));
    }
    if (kind == ATTN_ENCODER_SELF_ATTENTION)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(tgt);
    if (c->arch == ATTN_ARCH_TRANSFORMER_LM)
        return attn_model_decode(model, graph, NULL, NULL, 1, tgt_len, tgt, tgt_len, &tgt_length,
                                 &logits);
    return attn_model_decode(model, graph, memory, &src_length, 1, tgt_len, tgt, tgt_len,
                             &tgt_length, &logits);
}

attn_status attn_model_attention_weights(attn_model *model, attn_graph *graph, const int32_t *src,
                                         int64_t src_len, const int32_t *tgt, int64_t tgt_len,
                                         attn_attention_kind kind, int64_t layer, float *weights)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_NOT_NULL(weights);
    const attn_model_config *c = attn_model_get_config(model);
    ATTN_CHECK_ARG(src_len <= INT32_MAX && tgt_len <= INT32_MAX, "%s: sequence too long", fn);
    wanted_map w;
    memset(&w, 0, sizeof w);
    w.weights = weights;
    ATTN_TRY(locate(fn, c, kind, layer, src_len, tgt_len, &w));

    const int recording = attn_graph_is_recording(graph), training = attn_graph_is_training(graph);
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    attn_graph_set_attention_observer(graph, keep_wanted, &w);
    model->watched = 1; /* a bf16 or int8 encoder then runs the graph's operations too */
    attn_status status = run(model, graph, c, src, src_len, tgt, tgt_len, kind);
    model->watched = 0;
    attn_graph_set_attention_observer(graph, NULL, NULL);
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, recording);
    attn_graph_set_training(graph, training);
    if (status == ATTN_OK && !w.found)
        status = attn_fail(ATTN_ERR_INTERNAL,
                           "%s: the model ran %lld attention operations and never the %s of "
                           "layer %lld",
                           fn, (long long)w.seen, kind_name(kind), (long long)layer);
    return status;
}
