/* Multi-head attention as one node: attn_mha_forward / attn_mha_backward, with the saved
 * buffer, the key padding mask and the backward scratch all in the graph's arena. */
#include "autodiff/autodiff_internal.h"

#include <string.h>

typedef struct mha_ctx {
    attn_mha_vars params;
    attn_var *query, *key, *value;
    attn_mha_dims dims;
    attn_sdpa_options options;
    float *saved;
} mha_ctx;

static attn_mha_params raw_params(const attn_mha_vars *p)
{
    attn_mha_params raw;
    memset(&raw, 0, sizeof raw);
    raw.in_proj_weight = p->in_proj_weight->value.data;
    raw.in_proj_bias = p->in_proj_bias ? p->in_proj_bias->value.data : NULL;
    raw.out_proj_weight = p->out_proj_weight->value.data;
    raw.out_proj_bias = p->out_proj_bias ? p->out_proj_bias->value.data : NULL;
    return raw;
}

static attn_status grad_or_null(attn_graph *graph, attn_var *v, float **grad)
{
    *grad = NULL;
    return v == NULL ? ATTN_OK : attn_graph_grad(graph, v, grad);
}

static attn_status mha_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    mha_ctx *ctx = raw;
    attn_mha_buffer_sizes sizes;
    ATTN_TRY(attn_mha_sizes(&ctx->dims, &sizes));
    float *scratch = attn_graph_alloc_floats(graph, sizes.backward_scratch_floats);
    if (scratch == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    /* Aliased inputs (self-attention, or key == value) are one variable, so they get one
     * gradient pointer and attn_mha_backward fuses their projections' backward too. */
    float *dq, *dk, *dv;
    ATTN_TRY(attn_graph_grad(graph, ctx->query, &dq));
    ATTN_TRY(attn_graph_grad(graph, ctx->key, &dk));
    ATTN_TRY(attn_graph_grad(graph, ctx->value, &dv));
    attn_mha_grads grads;
    memset(&grads, 0, sizeof grads);
    ATTN_TRY(grad_or_null(graph, ctx->params.in_proj_weight, &grads.in_proj_weight));
    ATTN_TRY(grad_or_null(graph, ctx->params.in_proj_bias, &grads.in_proj_bias));
    ATTN_TRY(grad_or_null(graph, ctx->params.out_proj_weight, &grads.out_proj_weight));
    ATTN_TRY(grad_or_null(graph, ctx->params.out_proj_bias, &grads.out_proj_bias));
    attn_mha_params params = raw_params(&ctx->params);
    return attn_mha_backward(&ctx->dims, &params, ctx->query->value.data, ctx->key->value.data,
                             ctx->value->value.data, &ctx->options, ctx->saved, output->grad,
                             scratch, dq, dk, dv, &grads);
}

static attn_status check_params(const char *fn, const attn_mha_vars *p, int64_t embed)
{
    char a[96];
    ATTN_CHECK_ARG(p != NULL, "%s: params must not be NULL", fn);
    ATTN_TRY(attn_ad_check_var(fn, "params->in_proj_weight", p->in_proj_weight));
    ATTN_TRY(attn_ad_check_var(fn, "params->out_proj_weight", p->out_proj_weight));
    const attn_tensor *w = &p->in_proj_weight->value, *o = &p->out_proj_weight->value;
    ATTN_CHECK_ARG(w->ndim == 2 && w->shape[0] == 3 * embed && w->shape[1] == embed,
                   "%s: params->in_proj_weight %s must be [%lld, %lld]", fn,
                   attn_ad_shape_text(p->in_proj_weight, a, sizeof a), (long long)(3 * embed),
                   (long long)embed);
    ATTN_CHECK_ARG(o->ndim == 2 && o->shape[0] == embed && o->shape[1] == embed,
                   "%s: params->out_proj_weight %s must be [%lld, %lld]", fn,
                   attn_ad_shape_text(p->out_proj_weight, a, sizeof a), (long long)embed,
                   (long long)embed);
    if (p->in_proj_bias != NULL) {
        ATTN_TRY(attn_ad_check_var(fn, "params->in_proj_bias", p->in_proj_bias));
        ATTN_CHECK_ARG(p->in_proj_bias->value.ndim == 1 &&
                           p->in_proj_bias->value.shape[0] == 3 * embed,
                       "%s: params->in_proj_bias %s must be [%lld]", fn,
                       attn_ad_shape_text(p->in_proj_bias, a, sizeof a), (long long)(3 * embed));
    }
    if (p->out_proj_bias != NULL) {
        ATTN_TRY(attn_ad_check_var(fn, "params->out_proj_bias", p->out_proj_bias));
        ATTN_CHECK_ARG(p->out_proj_bias->value.ndim == 1 &&
                           p->out_proj_bias->value.shape[0] == embed,
                       "%s: params->out_proj_bias %s must be [%lld]", fn,
                       attn_ad_shape_text(p->out_proj_bias, a, sizeof a), (long long)embed);
    }
    return ATTN_OK;
}

attn_status attn_op_multi_head_attention(attn_graph *graph, const attn_mha_vars *params,
                                         int64_t num_heads, attn_var *query, attn_var *key,
                                         attn_var *value, const attn_attention_mask *mask,
                                         attn_var **out)
{
    const char *fn = __func__;
    char a[96], b[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "query", query));
    ATTN_TRY(attn_ad_check_var(fn, "key", key));
    ATTN_TRY(attn_ad_check_var(fn, "value", value));
    ATTN_CHECK_ARG(query->value.ndim == 3, "%s: query must be [batch, len, embed], got %s", fn,
                   attn_ad_shape_text(query, a, sizeof a));
    const int64_t batch = query->value.shape[0], len_q = query->value.shape[1];
    const int64_t embed = query->value.shape[2];
    ATTN_CHECK_ARG(key->value.ndim == 3 && key->value.shape[0] == batch &&
                       key->value.shape[2] == embed,
                   "%s: key %s does not fit query %s", fn, attn_ad_shape_text(key, a, sizeof a),
                   attn_ad_shape_text(query, b, sizeof b));
    ATTN_CHECK_ARG(attn_ad_same_shape(key, value), "%s: key %s and value %s differ", fn,
                   attn_ad_shape_text(key, a, sizeof a), attn_ad_shape_text(value, b, sizeof b));
    const int64_t len_k = key->value.shape[1];
    ATTN_CHECK_ARG(embed >= 1, "%s: embed dimension must be positive", fn);
    ATTN_CHECK_ARG(num_heads >= 1 && embed % num_heads == 0,
                   "%s: num_heads %lld must be positive and divide the embed dimension %lld", fn,
                   (long long)num_heads, (long long)embed);
    ATTN_TRY(check_params(fn, params, embed));

    attn_sdpa_options options = attn_sdpa_default_options();
    if (mask != NULL) {
        ATTN_CHECK_ARG(mask->causal == 0 || mask->causal == 1,
                       "%s: mask->causal must be 0 or 1, got %d", fn, mask->causal);
        options.causal = mask->causal;
        if (mask->key_lengths != NULL) {
            uint8_t *padding = attn_graph_alloc(graph, (size_t)(batch * len_k));
            if (padding == NULL && batch * len_k > 0)
                return ATTN_ERR_OUT_OF_MEMORY;
            for (int64_t r = 0; r < batch; r++) {
                int32_t length = mask->key_lengths[r];
                ATTN_CHECK_ARG(length >= 0 && length <= len_k,
                               "%s: mask->key_lengths[%lld] = %d is outside [0, %lld]", fn,
                               (long long)r, (int)length, (long long)len_k);
                for (int64_t j = 0; j < len_k; j++)
                    padding[r * len_k + j] = j >= length;
            }
            options.key_padding_mask = padding;
        }
    }

    attn_mha_dims dims = {batch, len_q, len_k, embed, num_heads, 0, 0};
    attn_mha_buffer_sizes sizes;
    ATTN_TRY(attn_mha_sizes(&dims, &sizes));
    attn_var *inputs[7] = {query,
                           key,
                           value,
                           params->in_proj_weight,
                           params->in_proj_bias,
                           params->out_proj_weight,
                           params->out_proj_bias};
    const int wants = attn_graph_wants_grad(graph, 7, inputs);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 3, query->value.shape, wants, &y));
    float *saved = attn_graph_alloc_floats(graph, sizes.saved_floats);
    if (saved == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_mha_params raw = raw_params(params);
    attn_attention_observer observer;
    void *observer_ctx;
    const int64_t index = attn_ad_next_attention_op(graph, &observer, &observer_ctx);
    float *weights = NULL;
    if (observer != NULL) {
        size_t count;
        if (!attn_mul_size((size_t)(batch * num_heads), (size_t)(len_q * len_k), &count) ||
            (weights = attn_graph_alloc_floats(graph, count > 0 ? count : 1)) == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                             "%s: out of memory for the observed attention weights", fn);
    }
    ATTN_TRY(attn_mha_forward(&dims, &raw, query->value.data, key->value.data,
                              value->value.data, &options, y->value.data, weights, 0, saved,
                              NULL));
    if (observer != NULL) {
        attn_status said = observer(observer_ctx, index, weights, batch, num_heads, len_q, len_k);
        if (said != ATTN_OK)
            return attn_fail(said, "%s: the attention observer stopped at operation %lld (%s)",
                             fn, (long long)index, attn_status_name(said));
    }
    if (wants) {
        mha_ctx *ctx = attn_graph_alloc(graph, sizeof *ctx);
        if (ctx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *ctx = (mha_ctx){*params, query, key, value, dims, options, saved};
        ATTN_TRY(attn_graph_record(graph, y, mha_backward, ctx, "multi_head_attention"));
    }
    *out = y;
    return ATTN_OK;
}
