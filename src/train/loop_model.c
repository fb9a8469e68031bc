/* The Transformer family and the RNN encoder-decoders behind the trainer's model interface,
 * and greedy decoding. */
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

/* ---- greedy decoding --------------------------------------------------------------------- */

/* Records the arg-max of row b's logits (logits + b * row_stride, vocab wide) as its token
 * number `position` (from 0) in tokens (row stride max_len), or ends the row at </s> or at
 * max_len tokens. Rows already ended (out_lengths >= 0) are skipped. Returns how many rows
 * ended. */
static int64_t take_greedy_step(const float *logits, int64_t row_stride, int64_t size,
                                int64_t vocab, int64_t position, int64_t max_len,
                                int32_t *tokens, int64_t *out_lengths)
{
    int64_t finished = 0;
    for (int64_t b = 0; b < size; b++) {
        if (out_lengths[b] >= 0)
            continue;
        int32_t next = argmax_row(logits + b * row_stride, vocab);
        if (next == ATTN_EOS_ID) {
            out_lengths[b] = position;
            finished++;
            continue;
        }
        tokens[b * max_len + position] = next;
        if (position + 1 == max_len) {
            out_lengths[b] = max_len;
            finished++;
        }
    }
    return finished;
}

/* The Transformer re-runs its decoder over the whole prefix <s> y1 .. yt at every step. */
static attn_status greedy_transformer(attn_model *model, attn_graph *graph, attn_var *memory,
                                      int64_t size, const int32_t *src_lengths, int64_t max_len,
                                      int32_t *out, int64_t *out_lengths)
{
    /* The decoder's input: <s> then the tokens chosen so far, one row per sentence; rows
     * that have finished keep being fed padding (any valid id), their outputs unread. */
    const int64_t stride = max_len + 1;
    int32_t *prefix = attn_graph_alloc(graph, (size_t)(size * stride) * sizeof *prefix);
    if (prefix == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t i = 0; i < size * stride; i++)
        prefix[i] = ATTN_PAD_ID;
    for (int64_t b = 0; b < size; b++)
        prefix[b * stride] = ATTN_BOS_ID;
    const int64_t vocab = attn_model_get_config(model)->tgt_vocab;
    int64_t unfinished = size;
    for (int64_t len = 1; len <= max_len && unfinished > 0; len++) {
        attn_var *logits;
        ATTN_TRY(attn_model_decode(model, graph, memory, src_lengths, size, len, prefix, stride,
                                   NULL, &logits));
        /* Only each row's last position predicts the next token. */
        unfinished -= take_greedy_step(logits->value.data + (len - 1) * vocab, len * vocab, size,
                                       vocab, len - 1, max_len, out, out_lengths);
        for (int64_t b = 0; b < size; b++)
            if (out_lengths[b] < 0)
                prefix[b * stride + len] = out[b * max_len + len - 1];
    }
    return ATTN_OK;
}

/* The RNN decoder carries its state: one step per token, never re-reading the prefix. */
static attn_status greedy_rnn(attn_model *model, attn_graph *graph, attn_var *memory,
                              int64_t size, const int32_t *src_lengths, int64_t max_len,
                              int32_t *out, int64_t *out_lengths)
{
    attn_rnn_decoder *decoder;
    ATTN_TRY(attn_model_rnn_decoder_start(model, graph, memory, src_lengths, &decoder));
    int32_t *previous = attn_graph_alloc(graph, (size_t)size * sizeof *previous);
    if (previous == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < size; b++)
        previous[b] = ATTN_BOS_ID;
    const int64_t vocab = attn_model_get_config(model)->tgt_vocab;
    int64_t unfinished = size;
    for (int64_t position = 0; position < max_len && unfinished > 0; position++) {
        attn_var *logits;
        ATTN_TRY(attn_model_rnn_decoder_step(decoder, previous, &logits, NULL));
        unfinished -= take_greedy_step(logits->value.data, vocab, size, vocab, position, max_len,
                                       out, out_lengths);
        /* Finished rows keep stepping on padding (any valid id); their outputs are unread. */
        for (int64_t b = 0; b < size; b++)
            previous[b] = out_lengths[b] < 0 ? out[b * max_len + position] : ATTN_PAD_ID;
    }
    return ATTN_OK;
}

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

    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    attn_var *memory;
    ATTN_TRY(attn_model_encode(model, graph, size, src_len, src, src_lengths, &memory));
    for (int64_t i = 0; i < size * max_len; i++)
        out[i] = ATTN_PAD_ID;
    for (int64_t b = 0; b < size; b++)
        out_lengths[b] = -1;
    if (config->arch == ATTN_ARCH_RNN)
        return greedy_rnn(model, graph, memory, size, src_lengths, max_len, out, out_lengths);
    return greedy_transformer(model, graph, memory, size, src_lengths, max_len, out,
                              out_lengths);
}
