/* attn attention: scaled dot-product attention (flash-style), multi-head attention,
 * additive (Bahdanau) and multiplicative (Luong) attention, hard attention and the
 * sinusoidal positional encoding, each differentiable one with its backward.
 *
 * Backward functions ACCUMULATE into their gradient outputs (see attn_core.h).
 */
#ifndef ATTN_ATTENTION_H
#define ATTN_ATTENTION_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- scaled dot-product attention --------------------------------------------------- */

/* out = softmax(q k^T * scale + mask) v, over 4-D views [batch, heads, len, dim]:
 *   q [B, H, Lq, d], k [B, H, Lk, d], v [B, H, Lk, dv], out [B, H, Lq, dv].
 * Views may be strided in their first three dimensions (so a batch-first [B, L, H*d]
 * projection can be read in place) but the last dimension must be contiguous (stride 1).
 * Lq may differ from Lk (cross attention).
 *
 * Masks combine: a position (i, j) takes part only if no mask excludes it.
 *  - key_padding_mask [B, Lk]: nonzero = ignore key j (PyTorch's True).
 *  - causal: excludes j > i (aligned at the top left, like PyTorch's is_causal).
 *  - window >= 0: excludes |i - j| > window (local attention); window < 0 = no window.
 *  - attn_mask: additive floats, [Lq, Lk] or, with attn_mask_per_head, [B, H, Lq, Lk];
 *    -INFINITY excludes a position.
 * A query row with every key excluded produces zeros (not NaN), a log-sum-exp of -INFINITY
 * and zero gradients.
 *
 * The forward keeps only O(tile) extra memory per thread: tiles of K and V stream past a
 * tile of Q with an online softmax, and tiles that the causal or window mask excludes
 * entirely are skipped. */
typedef struct attn_sdpa_options {
    float scale;                     /* 0 means 1 / sqrt(d) */
    int causal;
    int64_t window;                  /* < 0: none */
    const uint8_t *key_padding_mask; /* [B, Lk] or NULL */
    const float *attn_mask;          /* [Lq, Lk], or [B, H, Lq, Lk], or NULL */
    int attn_mask_per_head;
} attn_sdpa_options;

/* Options with no mask and the default scale. Passing options = NULL means the same. */
ATTN_API attn_sdpa_options attn_sdpa_default_options(void);

/* lse [B, H, Lq] (contiguous) receives each row's log-sum-exp of the scaled, masked scores;
 * the backward needs it. weights [B, H, Lq, Lk] (contiguous) receives the attention
 * probabilities, recomputed exactly from lse without leaving the fast path. Either may be
 * NULL. */
ATTN_API attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                                       const attn_tensor *v, const attn_sdpa_options *options,
                                       attn_tensor *out, float *lse, float *weights);

/* Recomputes probabilities tile by tile from q, k and the saved lse (O(n) extra memory).
 * dq, dk, dv have the shapes of q, k, v and accumulate; out, lse and grad_out are required. */
ATTN_API attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k,
                                        const attn_tensor *v, const attn_sdpa_options *options,
                                        const attn_tensor *out, const float *lse,
                                        const attn_tensor *grad_out, attn_tensor *dq,
                                        attn_tensor *dk, attn_tensor *dv);

/* ---- multi-head attention ----------------------------------------------------------- */

/* Multi-head attention with PyTorch's parameters (torch.nn.MultiheadAttention), batch-first:
 *   query [B, Lq, E], key [B, Lk, kdim], value [B, Lk, vdim]  ->  out [B, Lq, E]
 *   Q = query W_q^T + b_q,  K = key W_k^T + b_k,  V = value W_v^T + b_v     (each [B, L, E])
 *   A = attention of Q, K, V split into num_heads heads of E / num_heads features each
 *       (attn_sdpa_forward, read in place through strided views)
 *   out = A W_out^T + b_out
 * Self-attention (query, key and value the same pointer, with in_proj_weight) projects with
 * one GEMM against the packed [3E, E] weight; cross-attention with key == value projects K
 * and V with one GEMM. Dropout is not applied. */
typedef struct attn_mha_dims {
    int64_t batch;     /* B */
    int64_t len_q;     /* Lq */
    int64_t len_k;     /* Lk */
    int64_t embed_dim; /* E */
    int64_t num_heads; /* H, divides E */
    int64_t kdim;      /* features of key; 0 means E */
    int64_t vdim;      /* features of value; 0 means E */
} attn_mha_dims;

/* Either in_proj_weight (packed, needs kdim == vdim == E) or the three separate weights
 * (PyTorch's _qkv_same_embed_dim = False), not both. Biases may be NULL. */
typedef struct attn_mha_params {
    const float *in_proj_weight;  /* [3E, E]: rows of W_q, then W_k, then W_v */
    const float *q_proj_weight;   /* [E, E] */
    const float *k_proj_weight;   /* [E, kdim] */
    const float *v_proj_weight;   /* [E, vdim] */
    const float *in_proj_bias;    /* [3E]: b_q, b_k, b_v (used with either weight form) */
    const float *out_proj_weight; /* [E, E] */
    const float *out_proj_bias;   /* [E] */
} attn_mha_params;

/* Gradients with the layout of the parameters. Each accumulates; NULL skips it. Use the
 * fields of the weight form the parameters use (the others must be NULL). */
typedef struct attn_mha_grads {
    float *in_proj_weight;
    float *q_proj_weight;
    float *k_proj_weight;
    float *v_proj_weight;
    float *in_proj_bias;
    float *out_proj_weight;
    float *out_proj_bias;
} attn_mha_grads;

/* Buffers the caller owns, so that a training loop allocates them once:
 *  - saved: written by the forward (which also works in it), read by the backward: the
 *    projected Q, K, V, the attention output A before the output projection and each
 *    row's log-sum-exp. Always required.
 *  - forward scratch: only for head-averaged weights (weights != NULL and
 *    average_attn_weights); may be NULL otherwise.
 *  - backward scratch: gradients of A and of the projections; always required. */
typedef struct attn_mha_buffer_sizes {
    size_t saved_floats;
    size_t forward_scratch_floats;
    size_t backward_scratch_floats;
} attn_mha_buffer_sizes;

ATTN_API attn_status attn_mha_sizes(const attn_mha_dims *dims, attn_mha_buffer_sizes *sizes);

/* options (NULL = none) are those of attn_sdpa_forward: key_padding_mask [B, Lk] (nonzero =
 * ignore), causal, window, additive attn_mask [Lq, Lk] or, with attn_mask_per_head,
 * PyTorch's 3-D [B * H, Lq, Lk]; scale 0 means 1 / sqrt(E / H) as PyTorch.
 * weights (NULL = not wanted) receives the attention probabilities: [B, Lq, Lk] averaged
 * over heads if average_attn_weights, else [B, H, Lq, Lk]. A query row with every key
 * masked gets zero weights and an output of b_out (PyTorch gives NaN there).
 * out must not overlap the inputs or the buffers. */
ATTN_API attn_status attn_mha_forward(const attn_mha_dims *dims, const attn_mha_params *params,
                                      const float *query, const float *key, const float *value,
                                      const attn_sdpa_options *options, float *out,
                                      float *weights, int average_attn_weights, float *saved,
                                      float *scratch);

/* Given grad_out [B, Lq, E], accumulates the gradients of the inputs (each may be NULL) and
 * of the parameters. Call with the same dims, params, inputs, options and saved buffer as
 * the forward. When inputs alias (self-attention: pass one gradient pointer for all three)
 * the gradients add up, as PyTorch's x.grad. */
ATTN_API attn_status attn_mha_backward(const attn_mha_dims *dims, const attn_mha_params *params,
                                       const float *query, const float *key, const float *value,
                                       const attn_sdpa_options *options, const float *saved,
                                       const float *grad_out, float *scratch,
                                       float *grad_query, float *grad_key, float *grad_value,
                                       const attn_mha_grads *grads);

/* ---- sinusoidal positional encoding ------------------------------------------------- */

typedef enum attn_pe_layout {
    /* As in "Attention Is All You Need": PE[pos, 2i] = sin(pos / 10000^(2i/d)),
     * PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). */
    ATTN_PE_INTERLEAVED = 0,
    /* sin in the first half of the features, cos in the second (tensor2tensor, fairseq). */
    ATTN_PE_CONCATENATED = 1
} attn_pe_layout;

/* out [length, d_model]. An odd d_model is allowed: the last feature is a sine. */
ATTN_API attn_status attn_positional_encoding(int64_t length, int64_t d_model,
                                              attn_pe_layout layout, float *out);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ATTENTION_H */
