/* attn_model_step_* (attn_models.h): the checks every architecture shares, and the calls
 * through the step decoder's table (step_decoder.h). */
#include "models/step_decoder.h"

#include <stdlib.h>

attn_status attn_model_step_start(attn_model *model, attn_graph *graph, attn_var *memory,
                                  const int32_t *src_lengths, int64_t max_rows, int64_t max_steps,
                                  attn_step_decoder **out)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(graph);
    const attn_model_config *c = attn_model_get_config(model);
    ATTN_CHECK_ARG(attn_graph_params(graph) == attn_model_params(model),
                   "%s: the graph was not created for this model's parameters", fn);
    ATTN_CHECK_ARG(!attn_graph_is_recording(graph),
                   "%s: step decoding is inference; turn the graph's recording off", fn);
    ATTN_CHECK_ARG(!attn_model_arch_is_classifier(c->arch) && c->arch != ATTN_ARCH_TRANSFORMER_MLM,
                   "%s: a classifier or masked language model has no decoder", fn);
    ATTN_CHECK_ARG(max_rows >= 0, "%s: max_rows must be >= 0, got %lld", fn, (long long)max_rows);
    ATTN_CHECK_ARG(max_steps >= 1, "%s: max_steps must be >= 1, got %lld", fn,
                   (long long)max_steps);
    /* The one place that knows which implementation an architecture has. */
    if (c->arch == ATTN_ARCH_RNN)
        return attn_rnn_step_start(fn, model, graph, memory, src_lengths, max_rows, max_steps, out);
    return attn_transformer_step_start(fn, model, memory, src_lengths, max_rows, max_steps, out);
}

attn_status attn_model_step(attn_step_decoder *decoder, const int32_t *ids, float *logits,
                            float *cross)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(decoder);
    attn_step_decoder *d = decoder;
    ATTN_CHECK_ARG(d->steps < d->max_steps, "%s: the decoder has taken its max_steps = %lld steps",
                   fn, (long long)d->max_steps);
    if (d->size > 0) {
        ATTN_CHECK_ARG(ids != NULL, "%s: ids must not be NULL", fn);
        ATTN_CHECK_ARG(logits != NULL, "%s: logits must not be NULL", fn);
    }
    for (int64_t r = 0; r < d->size; r++)
        ATTN_CHECK_ARG(ids[r] >= 0 && ids[r] < d->vocab,
                       "%s: ids[%lld] = %d is outside [0, tgt_vocab %lld)", fn, (long long)r,
                       (int)ids[r], (long long)d->vocab);
    /* No row can come back once none is left: an empty step has nothing to do. */
    if (d->size > 0)
        ATTN_TRY(d->ops->step(d, ids, logits, cross));
    d->steps++;
    return ATTN_OK;
}

attn_status attn_model_step_prefill(attn_step_decoder *decoder, const int32_t *ids,
                                    int64_t count, float *logits)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(decoder);
    attn_step_decoder *d = decoder;
    ATTN_CHECK_ARG(count >= 1 && count <= d->max_steps - d->steps,
                   "%s: count %lld is outside [1, %lld], the steps left of max_steps %lld", fn,
                   (long long)count, (long long)(d->max_steps - d->steps),
                   (long long)d->max_steps);
    ATTN_CHECK_ARG(d->cross_maps == 0,
                   "%s: a decoder with cross-attention steps one token at a time (its maps are "
                   "wanted per step)",
                   fn);
    if (d->size > 0) {
        ATTN_CHECK_ARG(ids != NULL, "%s: ids must not be NULL", fn);
        ATTN_CHECK_ARG(logits != NULL, "%s: logits must not be NULL", fn);
    }
    for (int64_t i = 0; i < d->size * count; i++)
        ATTN_CHECK_ARG(ids[i] >= 0 && ids[i] < d->vocab,
                       "%s: ids[%lld][%lld] = %d is outside [0, tgt_vocab %lld)", fn,
                       (long long)(i / count), (long long)(i % count), (int)ids[i],
                       (long long)d->vocab);
    if (d->size > 0 && d->ops->prefill != NULL) {
        ATTN_TRY(d->ops->prefill(d, ids, count, logits));
        d->steps += count;
        return ATTN_OK;
    }
    int32_t *column = malloc((size_t)(d->size > 0 ? d->size : 1) * sizeof *column);
    if (column == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = ATTN_OK;
    for (int64_t t = 0; t < count && status == ATTN_OK; t++) {
        for (int64_t r = 0; r < d->size; r++)
            column[r] = ids[r * count + t];
        status = attn_model_step(d, column, logits, NULL);
    }
    free(column);
    return status;
}

attn_status attn_model_step_select(attn_step_decoder *decoder, const int64_t *rows,
                                   int64_t new_size)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(decoder);
    attn_step_decoder *d = decoder;
    ATTN_CHECK_ARG(new_size >= 0 && new_size <= d->max_rows,
                   "%s: new_size %lld is outside [0, max_rows %lld]", fn, (long long)new_size,
                   (long long)d->max_rows);
    ATTN_CHECK_ARG(new_size == 0 || rows != NULL, "%s: rows must not be NULL", fn);
    for (int64_t r = 0; r < new_size; r++)
        ATTN_CHECK_ARG(rows[r] >= 0 && rows[r] < d->size,
                       "%s: rows[%lld] = %lld is outside [0, size %lld)", fn, (long long)r,
                       (long long)rows[r], (long long)d->size);
    ATTN_TRY(d->ops->select(d, rows, new_size));
    d->size = new_size;
    return ATTN_OK;
}

int64_t attn_model_step_size(const attn_step_decoder *decoder)
{
    return decoder != NULL ? decoder->size : 0;
}

int64_t attn_model_step_count(const attn_step_decoder *decoder)
{
    return decoder != NULL ? decoder->steps : 0;
}

int64_t attn_model_step_src_len(const attn_step_decoder *decoder)
{
    return decoder != NULL ? decoder->src_len : 0;
}

int64_t attn_model_step_cross_maps(const attn_step_decoder *decoder)
{
    return decoder != NULL ? decoder->cross_maps : 0;
}

void attn_model_step_destroy(attn_step_decoder *decoder)
{
    if (decoder != NULL)
        decoder->ops->destroy(decoder);
}
