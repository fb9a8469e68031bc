/* attn nn: layers built from the tape's operations (layer 3).
 *
 * A module is a small struct of parameter ids and sizes. attn_nn_*_register adds its
 * parameters to a store under a prefix, with PyTorch's state_dict names wherever PyTorch has
 * the same layer ("<prefix>.weight", "<prefix>.in_proj_weight", ...), so weights trained in
 * PyTorch load by name. attn_nn_*_forward runs it on a graph created for that store (after
 * attn_params_finalize). Modules own no memory, except the positional encoding's table.
 *
 * Default initialisers: linear and attention weights xavier_uniform (as nn.Transformer
 * resets them), biases zero, layer norm weight 1 and bias 0, embeddings N(0, 1/dim) (so that
 * after the usual sqrt(dim) scale they have unit variance).
 *
 * Activations are batch-first: [batch, len, features].
 */
#ifndef ATTN_NN_H
#define ATTN_NN_H

#include "attn/attn_autodiff.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Longest parameter name a module builds (prefix included). */
#define ATTN_NN_MAX_NAME 256

/* ---- linear -------------------------------------------------------------------------- */

typedef struct attn_nn_linear {
    attn_param_id weight; /* [out_features, in_features] */
    attn_param_id bias;   /* [out_features], or -1 for none */
    int64_t in_features, out_features;
} attn_nn_linear;

/* "<prefix>.weight" and, if with_bias, "<prefix>.bias". */
ATTN_API attn_status attn_nn_linear_register(attn_nn_linear *m, attn_params *store,
                                             const char *prefix, int64_t in_features,
                                             int64_t out_features, int with_bias);
/* A linear layer that uses an existing [out, in] parameter as its weight (an output
 * projection tied to an embedding table); registers only "<prefix>.bias" if with_bias. */
ATTN_API attn_status attn_nn_linear_register_tied(attn_nn_linear *m, attn_params *store,
                                                  const char *prefix, attn_param_id weight,
                                                  int with_bias);
ATTN_API attn_status attn_nn_linear_forward(const attn_nn_linear *m, attn_graph *graph,
                                            attn_var *x, attn_var **out);

/* ---- embedding ----------------------------------------------------------------------- */

typedef struct attn_nn_embedding {
    attn_param_id weight; /* [vocab, dim] */
    int64_t vocab, dim;
} attn_nn_embedding;

/* "<prefix>.weight". */
ATTN_API attn_status attn_nn_embedding_register(attn_nn_embedding *m, attn_params *store,
                                                const char *prefix, int64_t vocab,
                                                int64_t dim);
/* out [rows, cols, dim] = weight[ids] * scale; ids [rows, cols] with row stride ids_stride
 * (see attn_op_embedding). */
ATTN_API attn_status attn_nn_embedding_forward(const attn_nn_embedding *m, attn_graph *graph,
                                               int64_t rows, int64_t cols, const int32_t *ids,
                                               int64_t ids_stride, float scale,
                                               attn_var **out);

/* ---- layer norm ---------------------------------------------------------------------- */

typedef struct attn_nn_layer_norm {
    attn_param_id weight, bias; /* [dim] each */
    int64_t dim;
    float eps;
} attn_nn_layer_norm;

/* "<prefix>.weight", "<prefix>.bias". */
ATTN_API attn_status attn_nn_layer_norm_register(attn_nn_layer_norm *m, attn_params *store,
                                                 const char *prefix, int64_t dim, float eps);
ATTN_API attn_status attn_nn_layer_norm_forward(const attn_nn_layer_norm *m, attn_graph *graph,
                                                attn_var *x, attn_var **out);
/* layer_norm(x + residual), one node. */
ATTN_API attn_status attn_nn_layer_norm_forward_residual(const attn_nn_layer_norm *m,
                                                         attn_graph *graph, attn_var *x,
                                                         attn_var *residual, attn_var **out);

/* ---- sinusoidal positional encoding -------------------------------------------------- */

/* A fixed table [max_len, dim] (no parameters), added to [batch, len <= max_len, dim]. */
typedef struct attn_nn_positional {
    float *table;
    int64_t max_len, dim;
    attn_pe_layout layout;
} attn_nn_positional;

/* Allocates and fills the table; release it with attn_nn_positional_free. */
ATTN_API attn_status attn_nn_positional_init(attn_nn_positional *m, int64_t max_len,
                                             int64_t dim, attn_pe_layout layout);
/* Safe on a zeroed or already freed struct. */
ATTN_API void attn_nn_positional_free(attn_nn_positional *m);
ATTN_API attn_status attn_nn_positional_forward(const attn_nn_positional *m, attn_graph *graph,
                                                attn_var *x, attn_var **out);

/* ---- multi-head attention ------------------------------------------------------------ */

/* PyTorch's nn.MultiheadAttention with a packed input projection and biases. */
typedef struct attn_nn_mha {
    attn_param_id in_proj_weight;  /* [3E, E] */
    attn_param_id in_proj_bias;    /* [3E] */
    attn_param_id out_proj_weight; /* [E, E] */
    attn_param_id out_proj_bias;   /* [E] */
    int64_t embed_dim, num_heads;
} attn_nn_mha;

/* "<prefix>.in_proj_weight", "<prefix>.in_proj_bias", "<prefix>.out_proj.weight",
 * "<prefix>.out_proj.bias". num_heads must divide embed_dim. */
ATTN_API attn_status attn_nn_mha_register(attn_nn_mha *m, attn_params *store, const char *prefix,
                                          int64_t embed_dim, int64_t num_heads);
/* See attn_op_multi_head_attention: the same variable as query, key and value is
 * self-attention; as key and value, cross-attention. mask may be NULL. */
ATTN_API attn_status attn_nn_mha_forward(const attn_nn_mha *m, attn_graph *graph,
                                         attn_var *query, attn_var *key, attn_var *value,
                                         const attn_attention_mask *mask, attn_var **out);

/* ---- Transformer blocks -------------------------------------------------------------- */

typedef struct attn_nn_block_config {
    int64_t d_model, num_heads, ffn_dim;
    float dropout;             /* on each sublayer's output and inside the feed-forward */
    attn_activation activation; /* of the feed-forward: ReLU or GELU */
    int norm_first;            /* 0: post-norm as in the paper; 1: pre-norm */
    float layer_norm_eps;
} attn_nn_block_config;

/* Position-wise feed-forward: linear2(dropout(activation(linear1(x)))). The linears are
 * registered as "<prefix>.linear1" and "<prefix>.linear2", where prefix is the enclosing
 * layer's (PyTorch keeps them directly in the layer). */
typedef struct attn_nn_feed_forward {
    attn_nn_linear linear1, linear2;
    attn_activation activation;
    float dropout;
} attn_nn_feed_forward;

ATTN_API attn_status attn_nn_feed_forward_register(attn_nn_feed_forward *m, attn_params *store,
                                                   const char *prefix,
                                                   const attn_nn_block_config *config);
ATTN_API attn_status attn_nn_feed_forward_forward(const attn_nn_feed_forward *m,
                                                  attn_graph *graph, attn_var *x,
                                                  attn_var **out);

/* nn.TransformerEncoderLayer (batch_first):
 *   post-norm: x = norm1(x + dropout(self_attn(x))); x = norm2(x + dropout(ff(x)))
 *   pre-norm:  x = x + dropout(self_attn(norm1(x))); x = x + dropout(ff(norm2(x)))
 * Parameters "<prefix>.self_attn.*", "<prefix>.linear1.*", "<prefix>.linear2.*",
 * "<prefix>.norm1.*", "<prefix>.norm2.*". With a causal mask it is also the block of a
 * decoder-only language model. */
typedef struct attn_nn_encoder_layer {
    attn_nn_block_config config;
    attn_nn_mha self_attn;
    attn_nn_feed_forward ff;
    attn_nn_layer_norm norm1, norm2;
} attn_nn_encoder_layer;

ATTN_API attn_status attn_nn_encoder_layer_register(attn_nn_encoder_layer *m,
                                                    attn_params *store, const char *prefix,
                                                    const attn_nn_block_config *config);
/* x [B, L, d_model]; mask may be NULL. */
ATTN_API attn_status attn_nn_encoder_layer_forward(const attn_nn_encoder_layer *m,
                                                   attn_graph *graph, attn_var *x,
                                                   const attn_attention_mask *mask,
                                                   attn_var **out);

/* nn.TransformerDecoderLayer (batch_first):
 *   post-norm: x = norm1(x + dropout(self_attn(x)));
 *              x = norm2(x + dropout(multihead_attn(x, memory)));
 *              x = norm3(x + dropout(ff(x)))
 *   pre-norm:  x = x + dropout(self_attn(norm1(x))); x = x + dropout(multihead_attn(norm2(x),
 *              memory)); x = x + dropout(ff(norm3(x)))
 * Parameters "<prefix>.self_attn.*", "<prefix>.multihead_attn.*", "<prefix>.linear1.*",
 * "<prefix>.linear2.*", "<prefix>.norm1.*" .. "<prefix>.norm3.*". */
typedef struct attn_nn_decoder_layer {
    attn_nn_block_config config;
    attn_nn_mha self_attn, multihead_attn;
    attn_nn_feed_forward ff;
    attn_nn_layer_norm norm1, norm2, norm3;
} attn_nn_decoder_layer;

ATTN_API attn_status attn_nn_decoder_layer_register(attn_nn_decoder_layer *m,
                                                    attn_params *store, const char *prefix,
                                                    const attn_nn_block_config *config);
/* x [B, T, d_model], memory [B, S, d_model]. self_mask (usually causal with the target
 * lengths) and memory_mask (the source lengths) may be NULL. */
ATTN_API attn_status attn_nn_decoder_layer_forward(const attn_nn_decoder_layer *m,
                                                   attn_graph *graph, attn_var *x,
                                                   const attn_attention_mask *self_mask,
                                                   attn_var *memory,
                                                   const attn_attention_mask *memory_mask,
                                                   attn_var **out);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_NN_H */
