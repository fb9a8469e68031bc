/* Transformer blocks: the position-wise feed-forward and the encoder and decoder layers, in
 * post-norm (the paper) or pre-norm order, named as PyTorch's nn.TransformerEncoderLayer and
 * nn.TransformerDecoderLayer. */
#include "core/internal.h"
#include "nn/nn_internal.h"

#include <math.h>
#include <string.h>

static attn_status check_config(const char *fn, const attn_nn_block_config *c)
{
    ATTN_CHECK_ARG(c != NULL, "%s: config must not be NULL", fn);
    ATTN_CHECK_ARG(c->d_model >= 1 && c->ffn_dim >= 1,
                   "%s: d_model and ffn_dim must be positive (got %lld and %lld)", fn,
                   (long long)c->d_model, (long long)c->ffn_dim);
    ATTN_CHECK_ARG(c->num_heads >= 1 && c->d_model % c->num_heads == 0,
                   "%s: num_heads %lld must be positive and divide d_model %lld", fn,
                   (long long)c->num_heads, (long long)c->d_model);
    ATTN_CHECK_ARG(c->dropout >= 0.0f && c->dropout < 1.0f, "%s: dropout must be in [0, 1), got %g",
                   fn, (double)c->dropout);
    ATTN_CHECK_ARG((int)c->activation >= ATTN_ACT_RELU && (int)c->activation <= ATTN_ACT_SILU,
                   "%s: unknown activation %d", fn, (int)c->activation);
    ATTN_CHECK_ARG(c->norm_first == 0 || c->norm_first == 1,
                   "%s: norm_first must be 0 or 1, got %d", fn, c->norm_first);
    ATTN_CHECK_ARG(isfinite(c->layer_norm_eps) && c->layer_norm_eps >= 0.0f,
                   "%s: layer_norm_eps must be finite and >= 0, got %g", fn,
                   (double)c->layer_norm_eps);
    ATTN_CHECK_ARG(c->norm == ATTN_NORM_LAYER || c->norm == ATTN_NORM_RMS,
                   "%s: unknown norm kind %d", fn, (int)c->norm);
    ATTN_CHECK_ARG(c->ffn == ATTN_FFN_MLP || c->ffn == ATTN_FFN_SWIGLU,
                   "%s: unknown feed-forward kind %d", fn, (int)c->ffn);
    ATTN_CHECK_ARG(c->bias_free == 0 || c->bias_free == 1, "%s: bias_free must be 0 or 1, got %d",
                   fn, c->bias_free);
    ATTN_CHECK_ARG(c->rope_base == 0.0 || (isfinite(c->rope_base) && c->rope_base > 0.0),
                   "%s: rope_base must be 0 (none) or finite and > 0, got %g", fn, c->rope_base);
    ATTN_CHECK_ARG(c->rope_base == 0.0 || (c->d_model / c->num_heads) % 2 == 0,
                   "%s: rotary positions need an even head size, d_model / num_heads = %lld", fn,
                   (long long)(c->d_model / c->num_heads));
    return ATTN_OK;
}

/* A norm of the layer: its kind, a LayerNorm's bias unless the block is bias-free. */
static attn_status register_norm(const char *fn, attn_nn_layer_norm *norm, attn_params *store,
                                 const char *prefix, const char *suffix,
                                 const attn_nn_block_config *config)
{
    char name[ATTN_NN_MAX_NAME];
    ATTN_TRY(attn_nn_name(fn, name, prefix, suffix));
    return attn_nn_norm_register(norm, store, name, config->norm, config->d_model,
                                 config->layer_norm_eps,
                                 config->norm == ATTN_NORM_LAYER && !config->bias_free);
}

/* ---- feed-forward ------------------------------------------------------------------------ */

attn_status attn_nn_feed_forward_register(attn_nn_feed_forward *m, attn_params *store,
                                          const char *prefix, const attn_nn_block_config *config)
{
    const char *fn = __func__;
    char name[ATTN_NN_MAX_NAME];
    ATTN_CHECK_NOT_NULL(m);
    ATTN_TRY(check_config(fn, config));
    const int with_bias = !config->bias_free;
    m->kind = config->ffn;
    m->activation = config->ffn == ATTN_FFN_SWIGLU ? ATTN_ACT_SILU : config->activation;
    m->dropout = config->dropout;
    ATTN_TRY(attn_nn_name(fn, name, prefix, "linear1"));
    ATTN_TRY(attn_nn_linear_register(&m->linear1, store, name, config->d_model, config->ffn_dim,
                                     with_bias));
    ATTN_TRY(attn_nn_name(fn, name, prefix, "linear2"));
    ATTN_TRY(attn_nn_linear_register(&m->linear2, store, name, config->ffn_dim, config->d_model,
                                     with_bias));
    memset(&m->linear3, 0, sizeof m->linear3);
    m->linear3.weight = m->linear3.bias = -1;
    if (config->ffn == ATTN_FFN_SWIGLU) {
        ATTN_TRY(attn_nn_name(fn, name, prefix, "linear3"));
        ATTN_TRY(attn_nn_linear_register(&m->linear3, store, name, config->d_model, config->ffn_dim,
                                         with_bias));
    }
    return ATTN_OK;
}

attn_status attn_nn_feed_forward_forward(const attn_nn_feed_forward *m, attn_graph *graph,
                                         attn_var *x, attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_var *h;
    ATTN_TRY(attn_nn_linear_forward(&m->linear1, graph, x, &h));
    ATTN_TRY(attn_op_activation(graph, h, m->activation, &h));
    if (m->kind == ATTN_FFN_SWIGLU) {
        attn_var *up;
        ATTN_TRY(attn_nn_linear_forward(&m->linear3, graph, x, &up));
        ATTN_TRY(attn_op_mul(graph, h, up, &h));
    }
    ATTN_TRY(attn_op_dropout(graph, h, m->dropout, &h));
    return attn_nn_linear_forward(&m->linear2, graph, h, out);
}

/* ---- one residual sublayer --------------------------------------------------------------- */

/* Post-norm: norm(x + dropout(sublayer)). Pre-norm: x + dropout(sublayer), where the caller
 * fed the sublayer norm(x). */
static attn_status close_sublayer(const attn_nn_block_config *config,
                                  const attn_nn_layer_norm *norm, attn_graph *graph, attn_var *x,
                                  attn_var *sublayer, attn_var **out)
{
    ATTN_TRY(attn_op_dropout(graph, sublayer, config->dropout, &sublayer));
    if (config->norm_first)
        return attn_op_add(graph, x, sublayer, out);
    return attn_nn_layer_norm_forward_residual(norm, graph, sublayer, x, out);
}

/* The sublayer's input: norm(x) before a pre-norm sublayer, x itself after a post-norm one. */
static attn_status open_sublayer(const attn_nn_block_config *config, const attn_nn_layer_norm *norm,
                                 attn_graph *graph, attn_var *x, attn_var **in)
{
    if (!config->norm_first) {
        *in = x;
        return ATTN_OK;
    }
    return attn_nn_layer_norm_forward(norm, graph, x, in);
}

/* ---- encoder layer ----------------------------------------------------------------------- */

attn_status attn_nn_encoder_layer_register(attn_nn_encoder_layer *m, attn_params *store,
                                           const char *prefix, const attn_nn_block_config *config)
{
    const char *fn = __func__;
    char name[ATTN_NN_MAX_NAME];
    ATTN_CHECK_NOT_NULL(m);
    ATTN_TRY(check_config(fn, config));
    m->config = *config;
    ATTN_TRY(attn_nn_name(fn, name, prefix, "self_attn"));
    ATTN_TRY(attn_nn_mha_register(&m->self_attn, store, name, config->d_model, config->num_heads,
                                  !config->bias_free));
    m->self_attn.rope_base = config->rope_base;
    ATTN_TRY(attn_nn_feed_forward_register(&m->ff, store, prefix, config));
    ATTN_TRY(register_norm(fn, &m->norm1, store, prefix, "norm1", config));
    return register_norm(fn, &m->norm2, store, prefix, "norm2", config);
}

attn_status attn_nn_encoder_layer_forward(const attn_nn_encoder_layer *m, attn_graph *graph,
                                          attn_var *x, const attn_attention_mask *mask,
                                          attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    const attn_nn_block_config *c = &m->config;
    attn_var *in, *sub;
    ATTN_TRY(open_sublayer(c, &m->norm1, graph, x, &in));
    ATTN_TRY(attn_nn_mha_forward(&m->self_attn, graph, in, in, in, mask, &sub));
    ATTN_TRY(close_sublayer(c, &m->norm1, graph, x, sub, &x));
    ATTN_TRY(open_sublayer(c, &m->norm2, graph, x, &in));
    ATTN_TRY(attn_nn_feed_forward_forward(&m->ff, graph, in, &sub));
    return close_sublayer(c, &m->norm2, graph, x, sub, out);
}

/* ---- decoder layer ----------------------------------------------------------------------- */

attn_status attn_nn_decoder_layer_register(attn_nn_decoder_layer *m, attn_params *store,
                                           const char *prefix, const attn_nn_block_config *config)
{
    const char *fn = __func__;
    char name[ATTN_NN_MAX_NAME];
    ATTN_CHECK_NOT_NULL(m);
    ATTN_TRY(check_config(fn, config));
    m->config = *config;
    ATTN_TRY(attn_nn_name(fn, name, prefix, "self_attn"));
    ATTN_TRY(attn_nn_mha_register(&m->self_attn, store, name, config->d_model, config->num_heads,
                                  !config->bias_free));
    m->self_attn.rope_base = config->rope_base;
    /* The cross-attention gets no rotation: a target position and a source position are on
     * different axes, so their difference means nothing. */
    ATTN_TRY(attn_nn_name(fn, name, prefix, "multihead_attn"));
    ATTN_TRY(attn_nn_mha_register(&m->multihead_attn, store, name, config->d_model,
                                  config->num_heads, !config->bias_free));
    ATTN_TRY(attn_nn_feed_forward_register(&m->ff, store, prefix, config));
    attn_nn_layer_norm *norms[3] = {&m->norm1, &m->norm2, &m->norm3};
    const char *names[3] = {"norm1", "norm2", "norm3"};
    for (int i = 0; i < 3; i++)
        ATTN_TRY(register_norm(fn, norms[i], store, prefix, names[i], config));
    return ATTN_OK;
}

attn_status attn_nn_decoder_layer_forward(const attn_nn_decoder_layer *m, attn_graph *graph,
                                          attn_var *x, const attn_attention_mask *self_mask,
                                          attn_var *memory, const attn_attention_mask *memory_mask,
                                          attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    const attn_nn_block_config *c = &m->config;
    attn_var *in, *sub;
    ATTN_TRY(open_sublayer(c, &m->norm1, graph, x, &in));
    ATTN_TRY(attn_nn_mha_forward(&m->self_attn, graph, in, in, in, self_mask, &sub));
    ATTN_TRY(close_sublayer(c, &m->norm1, graph, x, sub, &x));
    ATTN_TRY(open_sublayer(c, &m->norm2, graph, x, &in));
    ATTN_TRY(attn_nn_mha_forward(&m->multihead_attn, graph, in, memory, memory, memory_mask, &sub));
    ATTN_TRY(close_sublayer(c, &m->norm2, graph, x, sub, &x));
    ATTN_TRY(open_sublayer(c, &m->norm3, graph, x, &in));
    ATTN_TRY(attn_nn_feed_forward_forward(&m->ff, graph, in, &sub));
    return close_sublayer(c, &m->norm3, graph, x, sub, out);
}
