/* The Transformer encoder of a bf16 or int8 model at inference (models_internal.h): the layers
 * of attn_nn_encoder_layer_forward straight on the kernels, with the products on the stored
 * matrices (attn_quantized_linear). The graph's operations would multiply the fp32 copies
 * with attn_gemm, which repacks every weight at every call: for the few tokens of one
 * sentence that packing cost more than the products (perf, batch 1). Used when nothing is
 * recorded, no dropout applies and no attention map is being watched. */
#include "models/models_internal.h"

#include "attn/attn_attention.h"

#include <string.h>

int attn_quantized_encoder_applies(const attn_model *m, const attn_graph *graph)
{
    return m->precision != ATTN_PRECISION_FP32 && m->rnn == NULL && !m->watched &&
           !attn_graph_is_recording(graph) && !attn_graph_is_training(graph);
}

typedef struct encoder_run {
    const attn_model *m;
    int64_t size, len, tokens, d_model;
    float *x, *normed, *qkv, *ctx, *sub, *hidden;
    float *up; /* SwiGLU's up projection, [tokens, ffn_dim]; NULL for the MLP */
    void *scratch;
    uint8_t *padding; /* [size, len], 1 past each sentence's length */
} encoder_run;

static const float *values(const attn_model *m, attn_param_id id)
{
    return id < 0 ? NULL : attn_params_data(m->params, id, ATTN_PARAM_VALUES);
}

static void linear(const encoder_run *r, attn_param_id weight, attn_param_id bias, const float *x,
                   float *y)
{
    const attn_quantized_matrix *w = attn_model_quantized(r->m, weight);
    const quantized_linear_args args = {r->tokens,          x, w->in,  w,
                                        values(r->m, bias), y, w->out, r->scratch};
    attn_quantized_linear(&args);
}

static attn_status norm(const encoder_run *r, const attn_nn_layer_norm *n, const float *x, float *y)
{
    return attn_model_norm_rows(r->m, n, r->tokens, x, y);
}

/* x + sublayer(x) as attn_nn_encoder_layer_forward closes it: x += sub (pre-norm) or
 * x = norm(x + sub) (post-norm). */
static attn_status close_sublayer(encoder_run *r, int norm_first, const attn_nn_layer_norm *n)
{
    const int64_t count = r->tokens * r->d_model;
    if (norm_first) {
        for (int64_t i = 0; i < count; i++)
            r->x[i] += r->sub[i];
        return ATTN_OK;
    }
    for (int64_t i = 0; i < count; i++)
        r->sub[i] += r->x[i];
    return norm(r, n, r->sub, r->x);
}

static attn_tensor head_view(float *base, int64_t size, int64_t heads, int64_t len,
                             int64_t head_dim, int64_t ld)
{
    attn_tensor t;
    memset(&t, 0, sizeof t);
    t.data = base;
    t.ndim = 4;
    t.shape[0] = size;
    t.shape[1] = heads;
    t.shape[2] = len;
    t.shape[3] = head_dim;
    t.stride[0] = len * ld;
    t.stride[1] = head_dim;
    t.stride[2] = ld;
    t.stride[3] = 1;
    return t;
}

static attn_status layer(encoder_run *r, const attn_nn_encoder_layer *block)
{
    const attn_nn_block_config *c = &block->config;
    const int64_t E = r->d_model, H = c->num_heads, dh = E / H;
    const float *in = r->x;
    if (c->norm_first) {
        ATTN_TRY(norm(r, &block->norm1, r->x, r->normed));
        in = r->normed;
    }
    linear(r, block->self_attn.in_proj_weight, block->self_attn.in_proj_bias, in, r->qkv);
    if (c->rope_base > 0.0) { /* q and k turn by position, as the graph's attention does */
        ATTN_TRY(attn_rope_rotate(r->qkv, r->size, r->len, 0, 3 * E, H, dh, c->rope_base, 0));
        ATTN_TRY(attn_rope_rotate(r->qkv + E, r->size, r->len, 0, 3 * E, H, dh, c->rope_base, 0));
    }
    attn_tensor q = head_view(r->qkv, r->size, H, r->len, dh, 3 * E);
    attn_tensor k = head_view(r->qkv + E, r->size, H, r->len, dh, 3 * E);
    attn_tensor v = head_view(r->qkv + 2 * E, r->size, H, r->len, dh, 3 * E);
    attn_tensor a = head_view(r->ctx, r->size, H, r->len, dh, E);
    attn_sdpa_options options = attn_sdpa_default_options();
    options.key_padding_mask = r->padding;
    ATTN_TRY(attn_sdpa_forward(&q, &k, &v, &options, &a, NULL, NULL));
    linear(r, block->self_attn.out_proj_weight, block->self_attn.out_proj_bias, r->ctx, r->sub);
    ATTN_TRY(close_sublayer(r, c->norm_first, &block->norm1));
    in = r->x;
    if (c->norm_first) {
        ATTN_TRY(norm(r, &block->norm2, r->x, r->normed));
        in = r->normed;
    }
    linear(r, block->ff.linear1.weight, block->ff.linear1.bias, in, r->hidden);
    const int64_t hidden_count = r->tokens * c->ffn_dim;
    ATTN_TRY(attn_activation_forward(block->ff.activation, hidden_count, r->hidden, r->hidden));
    if (block->ff.kind == ATTN_FFN_SWIGLU) {
        linear(r, block->ff.linear3.weight, block->ff.linear3.bias, in, r->up);
        for (int64_t i = 0; i < hidden_count; i++)
            r->hidden[i] *= r->up[i];
    }
    linear(r, block->ff.linear2.weight, block->ff.linear2.bias, r->hidden, r->sub);
    return close_sublayer(r, c->norm_first, &block->norm2);
}

/* Room for the activations of the widest product of tokens rows. */
static size_t scratch_bytes(const attn_model *m, int64_t tokens)
{
    size_t bytes = 0;
    for (int64_t l = 0; l < m->n_blocks; l++) {
        const attn_nn_encoder_layer *b = &m->blocks[l];
        const attn_param_id ids[5] = {b->self_attn.in_proj_weight, b->self_attn.out_proj_weight,
                                      b->ff.linear1.weight, b->ff.linear2.weight,
                                      b->ff.linear3.weight};
        for (int i = 0; i < 5; i++) {
            if (ids[i] < 0) /* no linear3 in an MLP */
                continue;
            const size_t need =
                attn_quantized_linear_scratch_bytes(tokens, attn_model_quantized(m, ids[i]));
            bytes = need > bytes ? need : bytes;
        }
    }
    return bytes;
}

attn_status attn_quantized_encode(const char *fn, attn_model *m, attn_graph *graph, int64_t size,
                                  int64_t len, const int32_t *src, const int32_t *src_lengths,
                                  attn_var **memory)
{
    const attn_model_config *c = &m->config;
    const int64_t E = c->d_model, T = size * len;
    const int64_t shape[3] = {size, len, E};
    ATTN_TRY(attn_graph_new_var(graph, 3, shape, 0, memory));
    if (T == 0)
        return ATTN_OK;
    encoder_run r = {m, size, len, T, E, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    r.x = attn_graph_alloc_floats(graph, (size_t)(T * E));
    r.normed = attn_graph_alloc_floats(graph, (size_t)(T * E));
    r.qkv = attn_graph_alloc_floats(graph, (size_t)(T * 3 * E));
    r.ctx = attn_graph_alloc_floats(graph, (size_t)(T * E));
    r.sub = attn_graph_alloc_floats(graph, (size_t)(T * E));
    r.hidden = attn_graph_alloc_floats(graph, (size_t)(T * c->ffn_dim));
    if (c->ffn == ATTN_FFN_SWIGLU &&
        (r.up = attn_graph_alloc_floats(graph, (size_t)(T * c->ffn_dim))) == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld source tokens", fn,
                         (long long)T);
    r.scratch = attn_graph_alloc(graph, scratch_bytes(m, T));
    r.padding = attn_graph_alloc(graph, (size_t)T);
    if (r.x == NULL || r.normed == NULL || r.qkv == NULL || r.ctx == NULL || r.sub == NULL ||
        r.hidden == NULL || r.scratch == NULL || r.padding == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld source tokens", fn,
                         (long long)T);
    for (int64_t b = 0; b < size; b++)
        for (int64_t j = 0; j < len; j++)
            r.padding[b * len + j] = src_lengths != NULL && j >= src_lengths[b];
    ATTN_TRY(attn_embedding_forward(T, m->src_embed.vocab, E, values(m, m->src_embed.weight), src,
                                    attn_model_embedding_scale(c), r.x));
    const float *positions = attn_model_position_rows(m, 1);
    for (int64_t t = 0; positions != NULL && t < T; t++) {
        const float *position = positions + (t % len) * E;
        for (int64_t i = 0; i < E; i++)
            r.x[t * E + i] += position[i];
    }
    for (int64_t l = 0; l < m->n_blocks; l++)
        ATTN_TRY(layer(&r, &m->blocks[l]));
    float *out = (*memory)->value.data;
    if (m->has_encoder_norm)
        return norm(&r, &m->encoder_norm, r.x, out);
    memcpy(out, r.x, (size_t)(T * E) * sizeof(float));
    return ATTN_OK;
}
