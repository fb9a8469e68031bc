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

/* ---- layer norm and RMSNorm ---------------------------------------------------------- */

/* Which normalisation a module computes. */
typedef enum attn_norm_kind {
    ATTN_NORM_LAYER = 0, /* LayerNorm: (x - mean) / sqrt(var + eps) * weight + bias */
    ATTN_NORM_RMS = 1    /* RMSNorm (Zhang and Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight */
} attn_norm_kind;

typedef struct attn_nn_layer_norm {
    attn_param_id weight; /* [dim] */
    attn_param_id bias;   /* [dim], or -1 for none (always none for RMSNorm) */
    int64_t dim;
    float eps;
    attn_norm_kind kind;
} attn_nn_layer_norm;

/* A LayerNorm with a bias: "<prefix>.weight", "<prefix>.bias". */
ATTN_API attn_status attn_nn_layer_norm_register(attn_nn_layer_norm *m, attn_params *store,
                                                 const char *prefix, int64_t dim, float eps);
/* Either kind: "<prefix>.weight" and, for a LayerNorm with_bias, "<prefix>.bias" (an RMSNorm
 * has no bias: with_bias must be 0). The forwards below compute the module's kind. */
ATTN_API attn_status attn_nn_norm_register(attn_nn_layer_norm *m, attn_params *store,
                                           const char *prefix, attn_norm_kind kind, int64_t dim,
                                           float eps, int with_bias);
ATTN_API attn_status attn_nn_layer_norm_forward(const attn_nn_layer_norm *m, attn_graph *graph,
                                                attn_var *x, attn_var **out);
/* norm(x + residual): one node for a LayerNorm, an addition and the norm for an RMSNorm. */
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

/* PyTorch's nn.MultiheadAttention with a packed input projection and biases (or, with
 * bias=False, none). */
typedef struct attn_nn_mha {
    attn_param_id in_proj_weight;  /* [3E, E] */
    attn_param_id in_proj_bias;    /* [3E], or -1 */
    attn_param_id out_proj_weight; /* [E, E] */
    attn_param_id out_proj_bias;   /* [E], or -1 */
    int64_t embed_dim, num_heads;
    /* 0 (as registered): no rotary positions; else the base, and q and k turn by position
     * (attn_op_multi_head_attention_rotary). The blocks set it for self-attention. */
    double rope_base;
} attn_nn_mha;

/* "<prefix>.in_proj_weight", "<prefix>.out_proj.weight" and, with_bias, "<prefix>.in_proj_bias"
 * and "<prefix>.out_proj.bias". num_heads must divide embed_dim. */
ATTN_API attn_status attn_nn_mha_register(attn_nn_mha *m, attn_params *store, const char *prefix,
                                          int64_t embed_dim, int64_t num_heads, int with_bias);
/* See attn_op_multi_head_attention: the same variable as query, key and value is
 * self-attention; as key and value, cross-attention. mask may be NULL. */
ATTN_API attn_status attn_nn_mha_forward(const attn_nn_mha *m, attn_graph *graph,
                                         attn_var *query, attn_var *key, attn_var *value,
                                         const attn_attention_mask *mask, attn_var **out);

/* ---- Transformer blocks -------------------------------------------------------------- */

/* The feed-forward of a block. */
typedef enum attn_ffn_kind {
    ATTN_FFN_MLP = 0,   /* linear2(dropout(activation(linear1(x)))) */
    ATTN_FFN_SWIGLU = 1 /* SwiGLU (Shazeer 2020): linear2(dropout(silu(linear1(x)) * linear3(x))),
                         * linear1 the gate, linear3 the up and linear2 the down projection
                         * (LLaMA's w1, w3, w2); the activation field is not used */
} attn_ffn_kind;

/* Zero-initialised fields beyond layer_norm_eps give PyTorch's nn.Transformer layers. */
typedef struct attn_nn_block_config {
    int64_t d_model, num_heads, ffn_dim;
    float dropout;             /* on each sublayer's output and inside the feed-forward */
    attn_activation activation; /* of the feed-forward: ReLU or GELU */
    int norm_first;            /* 0: post-norm as in the paper; 1: pre-norm */
    float layer_norm_eps;
    attn_norm_kind norm;       /* every norm of the layer */
    attn_ffn_kind ffn;
    int bias_free;             /* 1: no bias in the attention's projections, the feed-forward's
                                * linears and the LayerNorms */
    double rope_base;          /* 0: none; > 0: rotary positions in the self-attention */
} attn_nn_block_config;

/* Position-wise feed-forward (attn_ffn_kind). The linears are registered as
 * "<prefix>.linear1", "<prefix>.linear2" (and "<prefix>.linear3" for SwiGLU), where prefix
 * is the enclosing layer's (PyTorch keeps them directly in the layer). */
typedef struct attn_nn_feed_forward {
    attn_nn_linear linear1, linear2, linear3; /* linear3: SwiGLU's up projection only */
    attn_ffn_kind kind;
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


/* ---- recurrent layers and classic attention (rnn.c) -------------------------------- */

/* Recurrent weights start as PyTorch's: every weight and bias U(-1/sqrt(H), 1/sqrt(H)). */

/* One layer of torch.nn.GRU / nn.LSTM (batch_first), one direction or both:
 * "<prefix>.weight_ih_l<k>", "<prefix>.weight_hh_l<k>", "<prefix>.bias_ih_l<k>",
 * "<prefix>.bias_hh_l<k>", and the same with the suffix "_reverse" for the reverse
 * direction, k = layer (so layers registered under one prefix read as one nn.GRU). */
typedef struct attn_nn_rnn_layer {
    attn_rnn_cell cell;
    int64_t input_size, hidden_size;
    int bidirectional;
    /* [0]: forward direction, [1]: reverse (bidirectional only) */
    attn_param_id weight_ih[2], weight_hh[2], bias_ih[2], bias_hh[2];
} attn_nn_rnn_layer;

ATTN_API attn_status attn_nn_rnn_layer_register(attn_nn_rnn_layer *m, attn_params *store,
                                                const char *prefix, attn_rnn_cell cell,
                                                int64_t layer, int64_t input_size,
                                                int64_t hidden_size, int bidirectional);
/* out [B, T, H] or [B, T, 2H] (attn_op_rnn_layer) for x [B, T, input_size]; lengths [B]
 * (NULL: all T). */
ATTN_API attn_status attn_nn_rnn_layer_forward(const attn_nn_rnn_layer *m, attn_graph *graph,
                                               attn_var *x, const int32_t *lengths,
                                               attn_var **out);

/* torch.nn.GRUCell / nn.LSTMCell: "<prefix>.weight_ih", "<prefix>.weight_hh",
 * "<prefix>.bias_ih", "<prefix>.bias_hh". */
typedef struct attn_nn_rnn_cell {
    attn_rnn_cell cell;
    int64_t input_size, hidden_size;
    attn_param_id weight_ih, weight_hh, bias_ih, bias_hh;
} attn_nn_rnn_cell;

ATTN_API attn_status attn_nn_rnn_cell_register(attn_nn_rnn_cell *m, attn_params *store,
                                               const char *prefix, attn_rnn_cell cell,
                                               int64_t input_size, int64_t hidden_size);
/* One step (attn_op_rnn_cell): h and c may be NULL (zeros); c and c_out are LSTM only. */
ATTN_API attn_status attn_nn_rnn_cell_forward(const attn_nn_rnn_cell *m, attn_graph *graph,
                                              attn_var *x, attn_var *h, attn_var *c,
                                              attn_var **h_out, attn_var **c_out);

/* Additive attention (Bahdanau et al. 2015), score(s, h_j) = v . tanh(W_s s + b + W_h h_j):
 * "<prefix>.query_proj.weight" W_s [da, ds], "<prefix>.query_proj.bias" b [da],
 * "<prefix>.key_proj.weight" W_h [da, dh] and "<prefix>.v" [da] (U(-1/sqrt(da), 1/sqrt(da));
 * the projections xavier_uniform, the bias zero). */
typedef struct attn_nn_additive_attention {
    attn_param_id query_weight, query_bias, key_weight, v;
    int64_t query_dim, key_dim, attn_dim;
} attn_nn_additive_attention;

ATTN_API attn_status attn_nn_additive_attention_register(attn_nn_additive_attention *m,
                                                         attn_params *store, const char *prefix,
                                                         int64_t query_dim, int64_t key_dim,
                                                         int64_t attn_dim);
/* Once per sentence: keys [B, S, da] = W_h annotations [B, S, dh]. */
ATTN_API attn_status attn_nn_additive_attention_keys(const attn_nn_additive_attention *m,
                                                     attn_graph *graph, attn_var *annotations,
                                                     attn_var **keys);
/* One decoder step (attn_op_additive_attention): context [B, dh] over the annotations;
 * weights [B, S] may be NULL. */
ATTN_API attn_status attn_nn_additive_attention_forward(const attn_nn_additive_attention *m,
                                                        attn_graph *graph, attn_var *query,
                                                        attn_var *keys, attn_var *annotations,
                                                        const int32_t *key_lengths,
                                                        attn_var **context, attn_var **weights);

/* Luong attention (Luong, Pham and Manning 2015), attn_luong_config's score, alignment and
 * window: "<prefix>.weight" (general: W [ds, dk]; concat: W [da, ds + dk]), "<prefix>.v"
 * (concat: [da]), "<prefix>.predict_weight" [da, ds] and "<prefix>.predict_v" [da]
 * (local-p's position predictor, of hidden size da). Matrices xavier_uniform, vectors
 * U(-1/sqrt(da), 1/sqrt(da)). */
typedef struct attn_nn_luong_attention {
    attn_luong_score score;
    attn_luong_align align;
    int64_t window; /* D */
    int64_t query_dim, key_dim, attn_dim;
    attn_param_id weight, v, predict_weight, predict_v; /* -1 where unused */
} attn_nn_luong_attention;

/* attn_dim (concat and local-p only; else ignored) must then be >= 1; window >= 0 for
 * local-m and >= 1 for local-p. */
ATTN_API attn_status attn_nn_luong_attention_register(attn_nn_luong_attention *m,
                                                      attn_params *store, const char *prefix,
                                                      attn_luong_score score,
                                                      attn_luong_align align, int64_t window,
                                                      int64_t query_dim, int64_t key_dim,
                                                      int64_t attn_dim);
/* Once per sentence: the keys steps score against: the annotations themselves (dot,
 * general) or their projection (concat, attn_op_luong_project_keys). */
ATTN_API attn_status attn_nn_luong_attention_keys(const attn_nn_luong_attention *m,
                                                  attn_graph *graph, attn_var *annotations,
                                                  attn_var **keys);
/* One decoder step at target position `position` (local-m; >= 0): context [B, dk] over the
 * annotations; weights [B, S] may be NULL. */
ATTN_API attn_status attn_nn_luong_attention_forward(const attn_nn_luong_attention *m,
                                                     attn_graph *graph, int64_t position,
                                                     attn_var *query, attn_var *keys,
                                                     attn_var *annotations,
                                                     const int32_t *key_lengths,
                                                     attn_var **context, attn_var **weights);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_NN_H */
