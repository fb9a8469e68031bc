/* The basic modules: linear, embedding, layer norm, positional encoding, multi-head
 * attention. Each registers named parameters and runs the matching tape operation. */
#include "core/internal.h"
#include "nn/nn_internal.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

attn_status attn_nn_name(const char *fn, char *out, const char *prefix, const char *suffix)
{
    ATTN_CHECK_ARG(prefix != NULL, "%s: prefix must not be NULL", fn);
    int n = prefix[0] == '\0' ? snprintf(out, ATTN_NN_MAX_NAME, "%s", suffix)
                              : snprintf(out, ATTN_NN_MAX_NAME, "%s.%s", prefix, suffix);
    ATTN_CHECK_ARG(n >= 0 && n < ATTN_NN_MAX_NAME,
                   "%s: parameter name '%s.%s' is longer than %d bytes", fn, prefix, suffix,
                   ATTN_NN_MAX_NAME - 1);
    return ATTN_OK;
}

attn_status attn_nn_add_param(const char *fn, attn_params *store, const char *prefix,
                              const char *suffix, int ndim, int64_t d0, int64_t d1, attn_init init,
                              attn_param_id *id)
{
    char name[ATTN_NN_MAX_NAME];
    ATTN_CHECK_ARG(store != NULL, "%s: store must not be NULL", fn);
    ATTN_TRY(attn_nn_name(fn, name, prefix, suffix));
    const int64_t shape[2] = {d0, d1};
    return attn_params_add(store, name, ndim, shape, init, id);
}

/* ---- linear ------------------------------------------------------------------------------ */

attn_status attn_nn_linear_register(attn_nn_linear *m, attn_params *store, const char *prefix,
                                    int64_t in_features, int64_t out_features, int with_bias)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_ARG(in_features >= 1 && out_features >= 1,
                   "%s: sizes must be positive (in_features=%lld, out_features=%lld)", fn,
                   (long long)in_features, (long long)out_features);
    ATTN_CHECK_ARG(with_bias == 0 || with_bias == 1, "%s: with_bias must be 0 or 1, got %d", fn,
                   with_bias);
    m->in_features = in_features;
    m->out_features = out_features;
    m->bias = -1;
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "weight", 2, out_features, in_features,
                               attn_init_xavier_uniform(1.0f), &m->weight));
    if (with_bias)
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "bias", 1, out_features, 0, attn_init_zeros(),
                                   &m->bias));
    return ATTN_OK;
}

attn_status attn_nn_linear_register_tied(attn_nn_linear *m, attn_params *store, const char *prefix,
                                         attn_param_id weight, int with_bias)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_NOT_NULL(store);
    ATTN_CHECK_ARG(with_bias == 0 || with_bias == 1, "%s: with_bias must be 0 or 1, got %d", fn,
                   with_bias);
    attn_param_info info;
    ATTN_TRY(attn_params_info(store, weight, &info));
    ATTN_CHECK_ARG(info.ndim == 2, "%s: the tied weight '%s' must have 2 dimensions, has %d", fn,
                   info.name, info.ndim);
    m->weight = weight;
    m->out_features = info.shape[0];
    m->in_features = info.shape[1];
    m->bias = -1;
    if (with_bias)
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "bias", 1, m->out_features, 0,
                                   attn_init_zeros(), &m->bias));
    return ATTN_OK;
}

attn_status attn_nn_linear_forward(const attn_nn_linear *m, attn_graph *graph, attn_var *x,
                                   attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_var *w, *b = NULL;
    ATTN_TRY(attn_graph_param(graph, m->weight, &w));
    if (m->bias >= 0)
        ATTN_TRY(attn_graph_param(graph, m->bias, &b));
    return attn_op_linear(graph, x, w, b, out);
}

/* ---- embedding --------------------------------------------------------------------------- */

attn_status attn_nn_embedding_register(attn_nn_embedding *m, attn_params *store, const char *prefix,
                                       int64_t vocab, int64_t dim)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_ARG(vocab >= 1 && dim >= 1, "%s: sizes must be positive (vocab=%lld, dim=%lld)", fn,
                   (long long)vocab, (long long)dim);
    m->vocab = vocab;
    m->dim = dim;
    return attn_nn_add_param(fn, store, prefix, "weight", 2, vocab, dim,
                             attn_init_normal((float)(1.0 / sqrt((double)dim))), &m->weight);
}

attn_status attn_nn_embedding_forward(const attn_nn_embedding *m, attn_graph *graph, int64_t rows,
                                      int64_t cols, const int32_t *ids, int64_t ids_stride,
                                      float scale, attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_var *table;
    ATTN_TRY(attn_graph_param(graph, m->weight, &table));
    return attn_op_embedding(graph, table, rows, cols, ids, ids_stride, scale, out);
}

/* ---- layer norm -------------------------------------------------------------------------- */

attn_status attn_nn_norm_register(attn_nn_layer_norm *m, attn_params *store, const char *prefix,
                                  attn_norm_kind kind, int64_t dim, float eps, int with_bias)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_ARG(kind == ATTN_NORM_LAYER || kind == ATTN_NORM_RMS, "%s: unknown norm kind %d", fn,
                   (int)kind);
    ATTN_CHECK_ARG(dim >= 1, "%s: dim must be positive, got %lld", fn, (long long)dim);
    ATTN_CHECK_ARG(isfinite(eps) && eps >= 0.0f, "%s: eps must be finite and >= 0, got %g", fn,
                   (double)eps);
    ATTN_CHECK_ARG(with_bias == 0 || (with_bias == 1 && kind == ATTN_NORM_LAYER),
                   "%s: with_bias must be 0 or 1, and 0 for an RMSNorm (it has no bias), got %d",
                   fn, with_bias);
    m->dim = dim;
    m->eps = eps;
    m->kind = kind;
    m->bias = -1;
    ATTN_TRY(
        attn_nn_add_param(fn, store, prefix, "weight", 1, dim, 0, attn_init_ones(), &m->weight));
    if (with_bias)
        ATTN_TRY(
            attn_nn_add_param(fn, store, prefix, "bias", 1, dim, 0, attn_init_zeros(), &m->bias));
    return ATTN_OK;
}

attn_status attn_nn_layer_norm_register(attn_nn_layer_norm *m, attn_params *store,
                                        const char *prefix, int64_t dim, float eps)
{
    return attn_nn_norm_register(m, store, prefix, ATTN_NORM_LAYER, dim, eps, 1);
}

static attn_status layer_norm_params(const attn_nn_layer_norm *m, attn_graph *graph,
                                     attn_var **gamma, attn_var **beta)
{
    *beta = NULL;
    ATTN_TRY(attn_graph_param(graph, m->weight, gamma));
    return m->bias >= 0 ? attn_graph_param(graph, m->bias, beta) : ATTN_OK;
}

attn_status attn_nn_layer_norm_forward(const attn_nn_layer_norm *m, attn_graph *graph, attn_var *x,
                                       attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_var *gamma, *beta;
    ATTN_TRY(layer_norm_params(m, graph, &gamma, &beta));
    if (m->kind == ATTN_NORM_RMS)
        return attn_op_rms_norm(graph, x, gamma, m->eps, out);
    return attn_op_layer_norm(graph, x, gamma, beta, m->eps, out);
}

attn_status attn_nn_layer_norm_forward_residual(const attn_nn_layer_norm *m, attn_graph *graph,
                                                attn_var *x, attn_var *residual, attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_var *gamma, *beta;
    ATTN_TRY(layer_norm_params(m, graph, &gamma, &beta));
    if (m->kind == ATTN_NORM_RMS) {
        attn_var *sum;
        ATTN_TRY(attn_op_add(graph, x, residual, &sum));
        return attn_op_rms_norm(graph, sum, gamma, m->eps, out);
    }
    return attn_op_add_layer_norm(graph, x, residual, gamma, beta, m->eps, out);
}

/* ---- positional encoding ----------------------------------------------------------------- */

attn_status attn_nn_positional_init(attn_nn_positional *m, int64_t max_len, int64_t dim,
                                    attn_pe_layout layout)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    memset(m, 0, sizeof *m);
    ATTN_CHECK_ARG(max_len >= 1 && dim >= 1, "%s: sizes must be positive (max_len=%lld, dim=%lld)",
                   fn, (long long)max_len, (long long)dim);
    size_t count;
    ATTN_CHECK_ARG(
        attn_mul_size((size_t)max_len, (size_t)dim, &count) && count <= SIZE_MAX / sizeof(float),
        "%s: max_len %lld times dim %lld is too large", fn, (long long)max_len, (long long)dim);
    float *table = attn_aligned_alloc(count * sizeof(float));
    if (table == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_status status = attn_positional_encoding(max_len, dim, layout, table);
    if (status != ATTN_OK) {
        attn_aligned_free(table);
        return status;
    }
    m->table = table;
    m->max_len = max_len;
    m->dim = dim;
    m->layout = layout;
    return ATTN_OK;
}

void attn_nn_positional_free(attn_nn_positional *m)
{
    if (m == NULL)
        return;
    attn_aligned_free(m->table);
    m->table = NULL;
}

attn_status attn_nn_positional_forward(const attn_nn_positional *m, attn_graph *graph, attn_var *x,
                                       attn_var **out)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_ARG(m->table != NULL, "%s: the table is not initialised", fn);
    ATTN_CHECK_ARG(x == NULL || (x->value.ndim == 3 && x->value.shape[2] == m->dim),
                   "%s: x must be [batch, len, %lld]", fn, (long long)m->dim);
    return attn_op_add_position_table(graph, x, m->table, m->max_len, out);
}

/* ---- multi-head attention ---------------------------------------------------------------- */

attn_status attn_nn_mha_register(attn_nn_mha *m, attn_params *store, const char *prefix,
                                 int64_t embed_dim, int64_t num_heads, int with_bias)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(m);
    ATTN_CHECK_ARG(embed_dim >= 1 && num_heads >= 1 && embed_dim % num_heads == 0,
                   "%s: num_heads %lld must be positive and divide embed_dim %lld", fn,
                   (long long)num_heads, (long long)embed_dim);
    ATTN_CHECK_ARG(with_bias == 0 || with_bias == 1, "%s: with_bias must be 0 or 1, got %d", fn,
                   with_bias);
    m->embed_dim = embed_dim;
    m->num_heads = num_heads;
    m->rope_base = 0.0;
    m->in_proj_bias = m->out_proj_bias = -1;
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "in_proj_weight", 2, 3 * embed_dim, embed_dim,
                               attn_init_xavier_uniform(1.0f), &m->in_proj_weight));
    if (with_bias)
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "in_proj_bias", 1, 3 * embed_dim, 0,
                                   attn_init_zeros(), &m->in_proj_bias));
    ATTN_TRY(attn_nn_add_param(fn, store, prefix, "out_proj.weight", 2, embed_dim, embed_dim,
                               attn_init_xavier_uniform(1.0f), &m->out_proj_weight));
    if (with_bias)
        ATTN_TRY(attn_nn_add_param(fn, store, prefix, "out_proj.bias", 1, embed_dim, 0,
                                   attn_init_zeros(), &m->out_proj_bias));
    return ATTN_OK;
}

attn_status attn_nn_mha_forward(const attn_nn_mha *m, attn_graph *graph, attn_var *query,
                                attn_var *key, attn_var *value, const attn_attention_mask *mask,
                                attn_var **out)
{
    ATTN_CHECK_NOT_NULL(m);
    attn_mha_vars p = {NULL, NULL, NULL, NULL};
    ATTN_TRY(attn_graph_param(graph, m->in_proj_weight, &p.in_proj_weight));
    if (m->in_proj_bias >= 0)
        ATTN_TRY(attn_graph_param(graph, m->in_proj_bias, &p.in_proj_bias));
    ATTN_TRY(attn_graph_param(graph, m->out_proj_weight, &p.out_proj_weight));
    if (m->out_proj_bias >= 0)
        ATTN_TRY(attn_graph_param(graph, m->out_proj_bias, &p.out_proj_bias));
    if (m->rope_base > 0.0)
        return attn_op_multi_head_attention_rotary(graph, &p, m->num_heads, m->rope_base, query,
                                                   key, value, mask, out);
    return attn_op_multi_head_attention(graph, &p, m->num_heads, query, key, value, mask, out);
}
