/* The attention operations: multi-head attention as one node (attn_mha_forward /
 * attn_mha_backward), and the classic decoder-step attentions of RNN encoder-decoders,
 * additive (Bahdanau) and Luong with its key projection. The arithmetic is in the kernels
 * (attn_mha_*, attn_additive_*, attn_luong_*), which dispatch on the instruction set
 * themselves and keep their double references; saved buffers, padding masks and backward
 * scratch live in the graph's arena.
 *
 * An attention step's two outputs (context and weights) make one node
 * (attn_graph_record_outputs), whose backward reads both gradients from its context: the
 * weights' is NULL when nothing reached them. */
#include "autodiff/autodiff_internal.h"
#include "attention/classic_internal.h"
#include "attention/mha_internal.h"

#include <math.h>
#include <string.h>

/* Padding mask [B, S] (1 = padding) from key_lengths in [0, S] (NULL: no padding); what
 * names key_lengths in messages. */
/* The precision of attention's own products under the graph's precision: int8 quantizes
 * weights, and attention multiplies activations, which stay float there. */
static attn_precision products_precision(const attn_graph *graph)
{
    return attn_graph_precision(graph) == ATTN_PRECISION_BF16 ? ATTN_PRECISION_BF16
                                                              : ATTN_PRECISION_FP32;
}

static attn_status padding_mask(const char *fn, const char *what, attn_graph *graph, int64_t batch,
                                int64_t len, const int32_t *key_lengths, uint8_t **mask)
{
    *mask = NULL;
    if (key_lengths == NULL)
        return ATTN_OK;
    uint8_t *m = attn_graph_alloc(graph, (size_t)(batch * len));
    if (m == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < batch; b++) {
        ATTN_CHECK_ARG(key_lengths[b] >= 0 && key_lengths[b] <= len,
                       "%s: %s[%lld] = %d is outside [0, %lld]", fn, what, (long long)b,
                       (int)key_lengths[b], (long long)len);
        for (int64_t j = 0; j < len; j++)
            m[b * len + j] = j >= key_lengths[b];
    }
    *mask = m;
    return ATTN_OK;
}

/* ---- multi-head attention ----------------------------------------------------------------- */

typedef struct mha_ctx {
    attn_mha_vars params;
    attn_var *query, *key, *value;
    attn_mha_dims dims;
    attn_sdpa_options options;
    float *saved;
} mha_ctx;

static attn_mha_params raw_mha(const attn_mha_vars *p)
{
    attn_mha_params raw;
    memset(&raw, 0, sizeof raw);
    raw.in_proj_weight = p->in_proj_weight->value.data;
    raw.in_proj_bias = attn_ad_optional_data(p->in_proj_bias);
    raw.out_proj_weight = p->out_proj_weight->value.data;
    raw.out_proj_bias = attn_ad_optional_data(p->out_proj_bias);
    return raw;
}

/* In bf16, the weights of the store packed once per update (attn_ad_packed_weight): the
 * output projection's always, the input projection's for self-attention, the one case that
 * multiplies by the whole of it. The forward multiplies by W^T (ATTN_TRANS), the backward by W
 * (ATTN_NO_TRANS), so each asks only for its own layout: inference never packs the second. */
static attn_status packed_mha_weights(attn_graph *graph, const attn_mha_vars *p, int self_attention,
                                      attn_transpose layout, attn_mha_packed_weights *packed)
{
    memset(packed, 0, sizeof *packed);
    if (products_precision(graph) != ATTN_PRECISION_BF16)
        return ATTN_OK;
    attn_params *store = attn_graph_params(graph);
    const int forward = layout == ATTN_TRANS;
    if (self_attention)
        ATTN_TRY(attn_ad_packed_weight(store, p->in_proj_weight, layout,
                                       forward ? &packed->in_proj_t : &packed->in_proj));
    return attn_ad_packed_weight(store, p->out_proj_weight, layout,
                                 forward ? &packed->out_proj_t : &packed->out_proj);
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
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->params.in_proj_weight, &grads.in_proj_weight));
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->params.in_proj_bias, &grads.in_proj_bias));
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->params.out_proj_weight, &grads.out_proj_weight));
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->params.out_proj_bias, &grads.out_proj_bias));
    attn_mha_params params = raw_mha(&ctx->params);
    attn_mha_packed_weights packed;
    ATTN_TRY(packed_mha_weights(graph, &ctx->params,
                                ctx->query == ctx->key && ctx->key == ctx->value, ATTN_NO_TRANS,
                                &packed));
    return attn_mha_backward_packed(&ctx->dims, &params, &packed, ctx->query->value.data,
                                    ctx->key->value.data, ctx->value->value.data, &ctx->options,
                                    ctx->saved, output->grad, scratch, dq, dk, dv, &grads);
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

static attn_status multi_head_attention(const char *fn, attn_graph *graph,
                                        const attn_mha_vars *params, int64_t num_heads,
                                        double rope_base, attn_var *query, attn_var *key,
                                        attn_var *value, const attn_attention_mask *mask,
                                        attn_var **out)
{
    char a[96], b[96];
    ATTN_CHECK_ARG(out != NULL, "%s: out must not be NULL", fn);
    *out = NULL;
    ATTN_CHECK_ARG(graph != NULL, "%s: graph must not be NULL", fn);
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
    options.precision = products_precision(graph);
    if (mask != NULL) {
        ATTN_CHECK_ARG(mask->causal == 0 || mask->causal == 1,
                       "%s: mask->causal must be 0 or 1, got %d", fn, mask->causal);
        options.causal = mask->causal;
        uint8_t *padding;
        ATTN_TRY(padding_mask(fn, "mask->key_lengths", graph, batch, len_k, mask->key_lengths,
                              &padding));
        options.key_padding_mask = padding;
    }

    attn_mha_dims dims = {batch, len_q, len_k, embed, num_heads, 0, 0, rope_base};
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
    attn_mha_params raw = raw_mha(params);
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
    attn_mha_packed_weights packed;
    ATTN_TRY(packed_mha_weights(graph, params, query == key && key == value, ATTN_TRANS, &packed));
    ATTN_TRY(attn_mha_forward_packed(&dims, &raw, &packed, query->value.data, key->value.data,
                                     value->value.data, &options, y->value.data, weights, 0, saved,
                                     NULL));
    if (observer != NULL) {
        attn_status said = observer(observer_ctx, index, weights, batch, num_heads, len_q, len_k);
        if (said != ATTN_OK)
            return attn_fail(said, "%s: the attention observer stopped at operation %lld (%s)", fn,
                             (long long)index, attn_status_name(said));
    }
    if (wants) {
        mha_ctx ctx = {*params, query, key, value, dims, options, saved};
        ATTN_TRY(
            attn_ad_record(graph, 1, &y, mha_backward, &ctx, sizeof ctx, "multi_head_attention"));
    }
    *out = y;
    return ATTN_OK;
}

attn_status attn_op_multi_head_attention(attn_graph *graph, const attn_mha_vars *params,
                                         int64_t num_heads, attn_var *query, attn_var *key,
                                         attn_var *value, const attn_attention_mask *mask,
                                         attn_var **out)
{
    return multi_head_attention(__func__, graph, params, num_heads, 0.0, query, key, value, mask,
                                out);
}

attn_status attn_op_multi_head_attention_rotary(attn_graph *graph, const attn_mha_vars *params,
                                                int64_t num_heads, double rope_base,
                                                attn_var *query, attn_var *key, attn_var *value,
                                                const attn_attention_mask *mask, attn_var **out)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(isfinite(rope_base) && rope_base > 0.0,
                   "%s: rope_base must be finite and > 0, got %g (attn_op_multi_head_attention "
                   "has no rotary positions)",
                   fn, rope_base);
    return multi_head_attention(fn, graph, params, num_heads, rope_base, query, key, value, mask,
                                out);
}

/* ---- attention steps: shared checks --------------------------------------------------------- */

/* query [..., ds] with B rows, keys [B, S, dk], values [B, S, dv]. */
static attn_status check_attention_inputs(const char *fn, const attn_var *query,
                                          const attn_var *keys, const attn_var *values)
{
    char a[96], b[96];
    ATTN_TRY(attn_ad_check_var(fn, "query", query));
    ATTN_TRY(attn_ad_check_var(fn, "keys", keys));
    ATTN_TRY(attn_ad_check_var(fn, "values", values));
    ATTN_CHECK_ARG(keys->value.ndim == 3, "%s: keys must be [batch, src_len, dim], got %s", fn,
                   attn_ad_shape_text(keys, a, sizeof a));
    ATTN_CHECK_ARG(values->value.ndim == 3 && values->value.shape[0] == keys->value.shape[0] &&
                       values->value.shape[1] == keys->value.shape[1],
                   "%s: values %s do not fit keys %s", fn, attn_ad_shape_text(values, a, sizeof a),
                   attn_ad_shape_text(keys, b, sizeof b));
    ATTN_CHECK_ARG(query->value.ndim >= 1 && attn_ad_rows(query) == keys->value.shape[0],
                   "%s: query %s must have one row per sentence of keys %s", fn,
                   attn_ad_shape_text(query, a, sizeof a), attn_ad_shape_text(keys, b, sizeof b));
    return ATTN_OK;
}

/* A parameter of exactly [d0] (ndim 1) or [d0, d1]. */
static attn_status check_param_shape(const char *fn, const char *what, const attn_var *p, int ndim,
                                     int64_t d0, int64_t d1)
{
    char a[96];
    ATTN_TRY(attn_ad_check_var(fn, what, p));
    int ok =
        p->value.ndim == ndim && p->value.shape[0] == d0 && (ndim == 1 || p->value.shape[1] == d1);
    if (ndim == 1)
        ATTN_CHECK_ARG(ok, "%s: %s %s must be [%lld]", fn, what, attn_ad_shape_text(p, a, sizeof a),
                       (long long)d0);
    ATTN_CHECK_ARG(ok, "%s: %s %s must be [%lld, %lld]", fn, what,
                   attn_ad_shape_text(p, a, sizeof a), (long long)d0, (long long)d1);
    return ATTN_OK;
}

/* The two outputs of an attention step: context [B, dv] and weights [B, S]. The weights
 * buffer is made even when the caller does not want it, as the backward reads it. */
static attn_status attention_outputs(attn_graph *graph, int wants, int64_t batch, int64_t len,
                                     int64_t value_dim, attn_var **context, attn_var **weights)
{
    const int64_t context_shape[2] = {batch, value_dim}, weights_shape[2] = {batch, len};
    ATTN_TRY(attn_graph_new_var(graph, 2, context_shape, wants, context));
    return attn_graph_new_var(graph, 2, weights_shape, wants, weights);
}

/* The weights are an output of the node only when the caller has them. */
static attn_status record_attention(attn_graph *graph, attn_var *context, attn_var *weights,
                                    int weights_wanted, attn_backward_fn backward, const void *ctx,
                                    size_t n_ctx_bytes, const char *name)
{
    attn_var *outputs[2] = {context, weights};
    return attn_ad_record(graph, weights_wanted ? 2 : 1, outputs, backward, ctx, n_ctx_bytes, name);
}

/* ---- additive attention --------------------------------------------------------------------- */

typedef struct additive_ctx {
    attn_additive_dims dims;
    attn_additive_vars params;
    attn_var *query, *keys, *values, *context, *weights;
    int weights_wanted;
    const uint8_t *mask;
    float *saved;
} additive_ctx;

static attn_additive_params raw_additive(const attn_additive_vars *p)
{
    attn_additive_params raw = {p->w_query->value.data, attn_ad_optional_data(p->bias),
                                p->v->value.data};
    return raw;
}

static attn_status additive_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    (void)output;
    additive_ctx *ctx = raw;
    float *dcontext; /* zeros when only the weights received a gradient */
    ATTN_TRY(attn_graph_grad(graph, ctx->context, &dcontext));
    float *workspace = attn_graph_alloc_floats(graph, attn_additive_workspace_floats(&ctx->dims));
    if (workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    float *dq, *dk, *dv;
    ATTN_TRY(attn_graph_grad(graph, ctx->query, &dq));
    ATTN_TRY(attn_graph_grad(graph, ctx->keys, &dk));
    ATTN_TRY(attn_graph_grad(graph, ctx->values, &dv));
    attn_additive_grads grads;
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->params.w_query, &grads.w_query));
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->params.bias, &grads.bias));
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->params.v, &grads.v));
    attn_additive_params params = raw_additive(&ctx->params);
    return attn_additive_backward(
        &ctx->dims, &params, ctx->query->value.data, ctx->keys->value.data, ctx->values->value.data,
        ctx->mask, ctx->weights->value.data, ctx->saved, dcontext,
        ctx->weights_wanted ? ctx->weights->grad : NULL, dq, dk, dv, &grads, workspace);
}

attn_status attn_op_additive_attention(attn_graph *graph, const attn_additive_vars *params,
                                       attn_var *query, attn_var *keys, attn_var *values,
                                       const int32_t *key_lengths, attn_var **context,
                                       attn_var **weights)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(context);
    *context = NULL;
    if (weights != NULL)
        *weights = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_NOT_NULL(params);
    ATTN_TRY(check_attention_inputs(fn, query, keys, values));
    const int64_t batch = keys->value.shape[0], len = keys->value.shape[1];
    const int64_t attn_dim = keys->value.shape[2], query_dim = attn_ad_last_dim(query);
    const int64_t value_dim = values->value.shape[2];
    ATTN_CHECK_ARG(attn_dim >= 1 && value_dim >= 1 && query_dim >= 1,
                   "%s: feature sizes must be >= 1", fn);
    ATTN_TRY(check_param_shape(fn, "params->w_query", params->w_query, 2, attn_dim, query_dim));
    ATTN_TRY(check_param_shape(fn, "params->v", params->v, 1, attn_dim, 0));
    if (params->bias != NULL)
        ATTN_TRY(check_param_shape(fn, "params->bias", params->bias, 1, attn_dim, 0));
    uint8_t *mask;
    ATTN_TRY(padding_mask(fn, "key_lengths", graph, batch, len, key_lengths, &mask));

    attn_additive_dims dims = {
        batch, len, query_dim, attn_dim, value_dim, attn_dim, products_precision(graph)};
    attn_var *inputs[6] = {query, keys, values, params->w_query, params->bias, params->v};
    const int wants = attn_graph_wants_grad(graph, 6, inputs);
    attn_var *ctx_out, *w_out;
    ATTN_TRY(attention_outputs(graph, wants, batch, len, value_dim, &ctx_out, &w_out));
    float *saved = attn_graph_alloc_floats(graph, attn_additive_saved_floats(&dims));
    if (saved == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_additive_params raw = raw_additive(params);
    if (!wants && batch > 0 && attn_ad_stored_weight(graph, params->w_query) != NULL) {
        /* The query's projection on the stored matrix (a model decoding in bf16 or int8). */
        ATTN_TRY(attn_ad_linear_rows(graph, batch, query->value.data, query_dim, params->w_query,
                                     raw.bias, saved, attn_dim));
        ATTN_TRY(attn_additive_forward_projected(&dims, &raw, keys->value.data, values->value.data,
                                                 mask, ctx_out->value.data, w_out->value.data,
                                                 saved));
    } else {
        ATTN_TRY(attn_additive_forward(&dims, &raw, query->value.data, keys->value.data,
                                       values->value.data, mask, ctx_out->value.data,
                                       w_out->value.data, saved));
    }
    if (wants) {
        additive_ctx ctx = {dims,    *params, query,           keys, values,
                            ctx_out, w_out,   weights != NULL, mask, saved};
        ATTN_TRY(record_attention(graph, ctx_out, w_out, weights != NULL, additive_backward, &ctx,
                                  sizeof ctx, "additive_attention"));
    }
    *context = ctx_out;
    if (weights != NULL)
        *weights = w_out;
    return ATTN_OK;
}

/* ---- Luong attention ------------------------------------------------------------------------ */

static attn_luong_params raw_luong(const attn_luong_vars *p)
{
    attn_luong_params raw = {attn_ad_optional_data(p->w), attn_ad_optional_data(p->v),
                             attn_ad_optional_data(p->w_p), attn_ad_optional_data(p->v_p)};
    return raw;
}

static attn_status luong_grads(attn_graph *graph, const attn_luong_vars *p, attn_luong_grads *g)
{
    ATTN_TRY(attn_ad_optional_grad(graph, p->w, &g->w));
    ATTN_TRY(attn_ad_optional_grad(graph, p->v, &g->v));
    ATTN_TRY(attn_ad_optional_grad(graph, p->w_p, &g->w_p));
    return attn_ad_optional_grad(graph, p->v_p, &g->v_p);
}

typedef struct project_ctx {
    attn_luong_config config;
    attn_var *annotations, *w;
} project_ctx;

static attn_status project_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    project_ctx *ctx = raw;
    float *dannotations, *dw;
    ATTN_TRY(attn_graph_grad(graph, ctx->annotations, &dannotations));
    ATTN_TRY(attn_graph_grad(graph, ctx->w, &dw));
    return attn_luong_project_keys_backward(&ctx->config, ctx->annotations->value.data,
                                            ctx->w->value.data, output->grad, dannotations, dw);
}

attn_status attn_op_luong_project_keys(attn_graph *graph, attn_var *annotations, attn_var *w,
                                       attn_var **keys)
{
    const char *fn = __func__;
    char a[96], b[96];
    ATTN_CHECK_NOT_NULL(keys);
    *keys = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "annotations", annotations));
    ATTN_TRY(attn_ad_check_var(fn, "w", w));
    ATTN_CHECK_ARG(annotations->value.ndim == 3 && annotations->value.shape[2] >= 1,
                   "%s: annotations must be [batch, src_len, dk >= 1], got %s", fn,
                   attn_ad_shape_text(annotations, a, sizeof a));
    const int64_t key_dim = annotations->value.shape[2];
    ATTN_CHECK_ARG(w->value.ndim == 2 && w->value.shape[0] >= 1 && w->value.shape[1] > key_dim,
                   "%s: w %s must be [da, ds + %lld] for annotations %s", fn,
                   attn_ad_shape_text(w, a, sizeof a), (long long)key_dim,
                   attn_ad_shape_text(annotations, b, sizeof b));
    attn_luong_config config = attn_luong_default_config(ATTN_LUONG_CONCAT, ATTN_LUONG_GLOBAL);
    config.batch = annotations->value.shape[0];
    config.src_len = annotations->value.shape[1];
    config.query_dim = w->value.shape[1] - key_dim;
    config.key_dim = key_dim;
    config.value_dim = key_dim;
    config.attn_dim = w->value.shape[0];
    config.precision = products_precision(graph);
    attn_var *inputs[2] = {annotations, w};
    const int wants = attn_graph_wants_grad(graph, 2, inputs);
    const int64_t shape[3] = {config.batch, config.src_len, config.attn_dim};
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 3, shape, wants, &y));
    ATTN_TRY(
        attn_luong_project_keys(&config, annotations->value.data, w->value.data, y->value.data));
    if (wants) {
        project_ctx ctx = {config, annotations, w};
        ATTN_TRY(
            attn_ad_record(graph, 1, &y, project_backward, &ctx, sizeof ctx, "luong_project_keys"));
    }
    *keys = y;
    return ATTN_OK;
}

typedef struct luong_ctx {
    attn_luong_config config;
    attn_luong_vars params;
    int64_t position;
    attn_var *query, *keys, *values, *context, *weights;
    int weights_wanted;
    const uint8_t *mask;
    float *saved;
} luong_ctx;

static attn_status luong_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    (void)output;
    luong_ctx *ctx = raw;
    float *dcontext; /* zeros when only the weights received a gradient */
    ATTN_TRY(attn_graph_grad(graph, ctx->context, &dcontext));
    float *workspace = attn_graph_alloc_floats(graph, attn_luong_workspace_floats(&ctx->config));
    if (workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    float *dq, *dk, *dv;
    ATTN_TRY(attn_graph_grad(graph, ctx->query, &dq));
    ATTN_TRY(attn_graph_grad(graph, ctx->keys, &dk));
    ATTN_TRY(attn_graph_grad(graph, ctx->values, &dv));
    attn_luong_grads grads;
    ATTN_TRY(luong_grads(graph, &ctx->params, &grads));
    attn_luong_params params = raw_luong(&ctx->params);
    return attn_luong_backward(
        &ctx->config, &params, ctx->position, ctx->query->value.data, ctx->keys->value.data,
        ctx->values->value.data, ctx->mask, ctx->weights->value.data, ctx->saved, dcontext,
        ctx->weights_wanted ? ctx->weights->grad : NULL, dq, dk, dv, &grads, workspace);
}

/* Checks the parameters the score and alignment use and fills the config's sizes from
 * them; the parameters they do not use must be NULL. */
static attn_status luong_config_of(const char *fn, attn_luong_score score, attn_luong_align align,
                                   int64_t window, const attn_luong_vars *p, const attn_var *query,
                                   const attn_var *keys, const attn_var *values,
                                   attn_luong_config *config)
{
    ATTN_CHECK_ARG(p != NULL, "%s: params must not be NULL", fn);
    ATTN_CHECK_ARG((unsigned)score <= ATTN_LUONG_CONCAT, "%s: unknown score %d", fn, (int)score);
    ATTN_CHECK_ARG((unsigned)align <= ATTN_LUONG_LOCAL_P, "%s: unknown alignment %d", fn,
                   (int)align);
    *config = attn_luong_default_config(score, align);
    config->batch = keys->value.shape[0];
    config->src_len = keys->value.shape[1];
    config->query_dim = attn_ad_last_dim(query);
    config->value_dim = values->value.shape[2];
    config->window = window;
    const int64_t ds = config->query_dim, width = keys->value.shape[2];
    switch (score) {
    case ATTN_LUONG_DOT:
        config->key_dim = width;
        ATTN_CHECK_ARG(p->w == NULL && p->v == NULL, "%s: the dot score takes no w or v", fn);
        ATTN_CHECK_ARG(ds == width,
                       "%s: the dot score needs query and keys of one size, got %lld and %lld", fn,
                       (long long)ds, (long long)width);
        break;
    case ATTN_LUONG_GENERAL:
        config->key_dim = width;
        ATTN_TRY(check_param_shape(fn, "params->w", p->w, 2, ds, width));
        ATTN_CHECK_ARG(p->v == NULL, "%s: the general score takes no v", fn);
        break;
    case ATTN_LUONG_CONCAT:
        ATTN_TRY(attn_ad_check_var(fn, "params->w", p->w));
        ATTN_CHECK_ARG(p->w->value.ndim == 2 && p->w->value.shape[0] == width &&
                           p->w->value.shape[1] > ds,
                       "%s: params->w must be [da = %lld, ds + dk] with ds = %lld", fn,
                       (long long)width, (long long)ds);
        config->attn_dim = width;
        config->key_dim = p->w->value.shape[1] - ds;
        ATTN_TRY(check_param_shape(fn, "params->v", p->v, 1, width, 0));
        break;
    }
    if (align == ATTN_LUONG_LOCAL_P) {
        ATTN_TRY(attn_ad_check_var(fn, "params->w_p", p->w_p));
        ATTN_CHECK_ARG(p->w_p->value.ndim == 2 && p->w_p->value.shape[1] == ds,
                       "%s: params->w_p must be [dp, %lld]", fn, (long long)ds);
        config->predict_dim = p->w_p->value.shape[0];
        ATTN_TRY(check_param_shape(fn, "params->v_p", p->v_p, 1, config->predict_dim, 0));
    } else {
        ATTN_CHECK_ARG(p->w_p == NULL && p->v_p == NULL,
                       "%s: w_p and v_p belong to local-p alignment only", fn);
    }
    return ATTN_OK;
}

attn_status attn_op_luong_attention(attn_graph *graph, attn_luong_score score,
                                    attn_luong_align align, int64_t window,
                                    const attn_luong_vars *params, int64_t position,
                                    attn_var *query, attn_var *keys, attn_var *values,
                                    const int32_t *key_lengths, attn_var **context,
                                    attn_var **weights)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(context);
    *context = NULL;
    if (weights != NULL)
        *weights = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(check_attention_inputs(fn, query, keys, values));
    attn_luong_config config;
    ATTN_TRY(luong_config_of(fn, score, align, window, params, query, keys, values, &config));
    config.precision = products_precision(graph);
    ATTN_CHECK_ARG(align != ATTN_LUONG_LOCAL_M || position >= 0,
                   "%s: local-m needs a target position >= 0, got %lld", fn, (long long)position);
    uint8_t *mask;
    ATTN_TRY(
        padding_mask(fn, "key_lengths", graph, config.batch, config.src_len, key_lengths, &mask));

    attn_var *inputs[7] = {query, keys, values, params->w, params->v, params->w_p, params->v_p};
    const int wants = attn_graph_wants_grad(graph, 7, inputs);
    attn_var *ctx_out, *w_out;
    ATTN_TRY(attention_outputs(graph, wants, config.batch, config.src_len, config.value_dim,
                               &ctx_out, &w_out));
    float *saved = attn_graph_alloc_floats(graph, attn_luong_saved_floats(&config));
    if (saved == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_luong_params raw = raw_luong(params);
    ATTN_TRY(attn_luong_forward(&config, &raw, position, query->value.data, keys->value.data,
                                values->value.data, mask, ctx_out->value.data, w_out->value.data,
                                saved));
    if (wants) {
        luong_ctx ctx = {config,  *params, position,        query, keys, values,
                         ctx_out, w_out,   weights != NULL, mask,  saved};
        ATTN_TRY(record_attention(graph, ctx_out, w_out, weights != NULL, luong_backward, &ctx,
                                  sizeof ctx, "luong_attention"));
    }
    *context = ctx_out;
    if (weights != NULL)
        *weights = w_out;
    return ATTN_OK;
}
