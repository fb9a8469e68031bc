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
 *  - causal (0 or 1): excludes j > i (aligned at the top left, like PyTorch's is_causal).
 *  - window >= 0: excludes |i - j| > window (local attention); window < 0 = no window.
 *  - attn_mask: additive floats, contiguous [Lq, Lk] or, with attn_mask_per_head = 1,
 *    [B, H, Lq, Lk]; -INFINITY excludes a position. Values are not scanned: a NaN or
 *    +INFINITY in it propagates to the output.
 * A query row with every key excluded produces zeros (not NaN), a log-sum-exp of -INFINITY
 * and zero gradients.
 *
 * Memory: no workspace argument. Each call allocates its own scratch, O(tile) per thread
 * (about 64 (d + dv + 67) floats per thread in the forward, 64 (2 d + 2 dv + 128) + Lq in
 * the backward, which also keeps per-thread partial dq sums, up to threads * B * H * Lq * d
 * floats, when fewer than 4 heads per thread do not divide evenly among the threads),
 * never anything proportional to Lq * Lk. In bf16 each thread also keeps the head it works on
 * packed as bf16: about (Lk + 1) (d + dv + 1) / 2 floats in the forward and Lq (d + dv + 2)
 * in the backward (4 and 8 MiB per thread at n = 16384, d = dv = 64). Tiles of K and V
 * stream past a tile of Q with an online softmax, and tiles that the causal or window mask
 * excludes entirely are skipped. ATTN_ERR_OUT_OF_MEMORY if that small allocation fails.
 * Outputs must not overlap the inputs or each other: threads write them concurrently.
 * Results are bit-identical from run to run at a fixed thread count. */
typedef struct attn_sdpa_options {
    float scale;                     /* finite; 0 means 1 / sqrt(d) */
    int causal;                      /* 0 or 1 */
    int64_t window;                  /* < 0: none */
    const uint8_t *key_padding_mask; /* [B, Lk] or NULL */
    const float *attn_mask;          /* [Lq, Lk], or [B, H, Lq, Lk], or NULL */
    int attn_mask_per_head;          /* 0 or 1; 1 requires attn_mask */
    /* Operands of the products. FP32 (0, the default). BF16: Q, K, V, dO, the probabilities
     * and the score gradients are rounded to bfloat16 (to nearest even) as operands of Q K^T,
     * P V and the backward's dO V^T, P^T dO, dS^T Q, dS K; products accumulate in float32,
     * and the softmax statistics (running max, sum, lse) stay float32. AVX512_BF16's
     * vdpbf16ps runs them where attn_precision_native(ATTN_PRECISION_BF16); other
     * instruction sets emulate the same rounding. INT8 is rejected. */
    attn_precision precision;
} attn_sdpa_options;

/* Options with no mask and the default scale. Passing options = NULL means the same. */
ATTN_API attn_sdpa_options attn_sdpa_default_options(void);

/* lse [B, H, Lq] (contiguous) receives each row's log-sum-exp of the scaled, masked scores;
 * the backward needs it. weights [B, H, Lq, Lk] (contiguous) receives the attention
 * probabilities exp(score - lse), recomputed tile by tile from lse after the pass (the only
 * O(Lq * Lk) work in memory, and only when asked for). Either may be NULL. */
ATTN_API attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k,
                                       const attn_tensor *v, const attn_sdpa_options *options,
                                       attn_tensor *out, float *lse, float *weights);

/* Recomputes probabilities tile by tile from q, k and the forward's lse (O(n) extra memory),
 * with the same options as the forward. dq, dk, dv have the shapes (not necessarily the
 * strides) of q, k, v and accumulate; out (the forward's output), lse and grad_out are
 * required. */
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
    /* Rotary positions (attn_rope_rotate): 0 for none; else the base, and the projected Q
     * and K of every head turn by their row's position (query row t and key row t at
     * position t) before the attention, so E / H must be even. For self-attention. */
    double rope_base;
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
                                      const attn_sdpa_options *options, float *out, float *weights,
                                      int average_attn_weights, float *saved, float *scratch);

/* Given grad_out [B, Lq, E], accumulates the gradients of the inputs (each may be NULL) and
 * of the parameters. Call with the same dims, params, inputs, options and saved buffer as
 * the forward. When inputs alias (self-attention: pass one gradient pointer for all three)
 * the gradients add up, as PyTorch's x.grad. */
ATTN_API attn_status attn_mha_backward(const attn_mha_dims *dims, const attn_mha_params *params,
                                       const float *query, const float *key, const float *value,
                                       const attn_sdpa_options *options, const float *saved,
                                       const float *grad_out, float *scratch, float *grad_query,
                                       float *grad_key, float *grad_value,
                                       const attn_mha_grads *grads);

/* ---- attention for RNN encoder-decoders: shared conventions ------------------------- */

/* Additive (Bahdanau), multiplicative (Luong) and hard attention are the building blocks of
 * RNN encoder-decoders: the decoder calls them once per output step for a batch of B
 * sentences, while the encoder's annotations stay fixed for the whole sentence. Shapes:
 *   query    [B, ds]      the decoder state s
 *   keys     [B, Lk, dk]  what the query is scored against: the annotations themselves for
 *                         Luong dot and general scores; for additive and Luong concat scores,
 *                         the annotations projected once per sentence by *_project_keys
 *   values   [B, Lk, dv]  what the context averages, usually the annotations (the same
 *                         pointer as keys is fine, and so is the same gradient buffer)
 *   mask     [B, Lk]      uint8 or NULL: nonzero = padding, never attended
 *   weights  [B, Lk]      the attention weights (forward output, backward input)
 *   context  [B, dv]      sum_j weights[b, j] values[b, j]
 * A row with no position left (all masked, or a local window outside the sentence) gets
 * zero weights, zero context and zero gradients, never NaN. B = 0 and Lk = 0 are allowed;
 * feature sizes must be >= 1.
 *
 * No step allocates: a forward writes what its backward needs into the caller's `saved`
 * buffer (attn_*_saved_floats floats; keep one per step for training) and a backward uses
 * the caller's scratch `workspace` (attn_*_workspace_floats floats, reusable across steps).
 * Gradient outputs may be NULL to skip them; the rest accumulate (+=).
 *
 * ATTN_ISA_REFERENCE runs scalar loops in double; every other instruction set runs a float
 * version threaded over the batch, whose MLP scores (additive, Luong concat) use a float
 * tanh within 1.5 ulp, vectorised for AVX2 and AVX-512. Dot scores, softmax and context
 * read each key and value once and are memory-bound: one portable loop serves all
 * instruction sets there. Projections use attn_gemm. */

/* ---- additive attention (Bahdanau, Cho and Bengio 2015) ---------------------------- */

/* score(s, h_j) = v . tanh(W_s s + W_h h_j + b); weights = masked softmax over j;
 * context = sum_j weights_j values_j. */
typedef struct attn_additive_dims {
    int64_t batch;     /* B */
    int64_t src_len;   /* Lk, the padded source length */
    int64_t query_dim; /* ds, the decoder state size */
    int64_t key_dim;   /* dh, the size of the annotations the keys are projected from */
    int64_t value_dim; /* dv */
    int64_t attn_dim;  /* da, the hidden size of the scoring network */
    attn_precision precision; /* the projections' operands: fp32 (0) or bf16 */
} attn_additive_dims;

typedef struct attn_additive_params {
    const float *w_query; /* W_s [da, ds] */
    const float *bias;    /* b [da], or NULL for none */
    const float *v;       /* v [da] */
} attn_additive_params;

/* Gradients of the parameters above; each may be NULL (not wanted). */
typedef struct attn_additive_grads {
    float *w_query;
    float *bias;
    float *v;
} attn_additive_grads;

/* B * da: the projected query W_s s + b. */
ATTN_API size_t attn_additive_saved_floats(const attn_additive_dims *dims);
/* B * (2 * da + Lk). */
ATTN_API size_t attn_additive_workspace_floats(const attn_additive_dims *dims);

/* Once per sentence: keys[b, j] = W_h annotations[b, j], annotations [B, Lk, dh],
 * w_key = W_h [da, dh], keys [B, Lk, da]. */
ATTN_API attn_status attn_additive_project_keys(const attn_additive_dims *dims,
                                                const float *annotations, const float *w_key,
                                                float *keys);
/* Turns the dkeys of the steps (summed over steps, or step by step) into
 * dannotations += dkeys W_h and dw_key += dkeys^T annotations; either may be NULL. */
ATTN_API attn_status attn_additive_project_keys_backward(const attn_additive_dims *dims,
                                                         const float *annotations,
                                                         const float *w_key, const float *dkeys,
                                                         float *dannotations, float *dw_key);

/* The raw scores [B, Lk] (no mask applied), e.g. for hard attention; saved is used as by
 * the forward. */
ATTN_API attn_status attn_additive_scores(const attn_additive_dims *dims,
                                          const attn_additive_params *params, const float *query,
                                          const float *keys, float *scores, float *saved);

/* One decoder step: context [B, dv] and weights [B, Lk], both required. */
ATTN_API attn_status attn_additive_forward(const attn_additive_dims *dims,
                                           const attn_additive_params *params, const float *query,
                                           const float *keys, const float *values,
                                           const uint8_t *mask, float *context, float *weights,
                                           float *saved);

/* Backward of one step from dcontext [B, dv] and, optionally, dweights [B, Lk] (a loss on
 * the weights themselves; NULL for none). Accumulates dquery [B, ds], dkeys [B, Lk, da]
 * (for attn_additive_project_keys_backward), dvalues [B, Lk, dv] and the parameter
 * gradients. weights and saved are the step's forward outputs. */
ATTN_API attn_status attn_additive_backward(
    const attn_additive_dims *dims, const attn_additive_params *params, const float *query,
    const float *keys, const float *values, const uint8_t *mask, const float *weights,
    const float *saved, const float *dcontext, const float *dweights, float *dquery, float *dkeys,
    float *dvalues, const attn_additive_grads *grads, float *workspace);

/* ---- multiplicative attention (Luong, Pham and Manning 2015) ----------------------- */

typedef enum attn_luong_score {
    ATTN_LUONG_DOT = 0,     /* s . h_j (needs ds == dk) */
    ATTN_LUONG_GENERAL = 1, /* s . (W h_j), computed as (W^T s) . h_j; W [ds, dk] */
    /* v . tanh(W [s; h_j]) = v . tanh(W_1 s + W_2 h_j), W = [W_1 | W_2] [da, ds + dk], no
     * bias; the keys are W_2 h, projected once per sentence by attn_luong_project_keys. */
    ATTN_LUONG_CONCAT = 2
} attn_luong_score;

typedef enum attn_luong_align {
    ATTN_LUONG_GLOBAL = 0, /* softmax over every (unmasked) position */
    /* Softmax over the positions j in [t - D, t + D], t = the caller's target position,
     * clipped to the sentence. */
    ATTN_LUONG_LOCAL_M = 1,
    /* p_t = S * sigmoid(v_p . tanh(W_p s)), S the sentence's unpadded length (1 + its last
     * unmasked position). Softmax over [round(p_t) - D, round(p_t) + D] clipped to the
     * sentence, then each weight times exp(-(j - p_t)^2 / (2 sigma^2)), sigma = D / 2, not
     * renormalised (as in the paper). Gradients reach W_p and v_p through p_t (the choice
     * of the window itself is piecewise constant). round(x) = floor(x + 0.5). */
    ATTN_LUONG_LOCAL_P = 2
} attn_luong_align;

typedef struct attn_luong_config {
    attn_luong_score score;
    attn_luong_align align;
    int64_t batch;       /* B */
    int64_t src_len;     /* Lk */
    int64_t query_dim;   /* ds */
    int64_t key_dim;     /* dk: the annotations' size (for concat, before projection) */
    int64_t value_dim;   /* dv */
    int64_t attn_dim;    /* da: concat only (the keys passed to a step are [B, Lk, da]) */
    int64_t predict_dim; /* dp: local-p only, the hidden size of the position predictor */
    int64_t window;      /* D: local only; >= 0 for local-m, >= 1 for local-p */
    attn_precision precision; /* the projections' operands: fp32 (0) or bf16 */
} attn_luong_config;

/* A config for the given score and alignment with every size 0 (fill them in). */
ATTN_API attn_luong_config attn_luong_default_config(attn_luong_score score,
                                                     attn_luong_align align);

typedef struct attn_luong_params {
    const float *w;   /* general: [ds, dk]; concat: [da, ds + dk]; dot: unused */
    const float *v;   /* concat: [da] */
    const float *w_p; /* local-p: [dp, ds] */
    const float *v_p; /* local-p: [dp] */
} attn_luong_params;

/* Gradients of the parameters in use; each may be NULL (not wanted). */
typedef struct attn_luong_grads {
    float *w;
    float *v;
    float *w_p;
    float *v_p;
} attn_luong_grads;

/* B * (dk for general, da for concat, 0 for dot) + B * (dp + 1) for local-p. */
ATTN_API size_t attn_luong_saved_floats(const attn_luong_config *config);
/* B * Lk + B * (dk for dot and general, 2 * da for concat) + B * (dp + 1) for local-p. */
ATTN_API size_t attn_luong_workspace_floats(const attn_luong_config *config);

/* Concat only, once per sentence: keys[b, j] = W_2 annotations[b, j], annotations
 * [B, Lk, dk], keys [B, Lk, da], w the full [da, ds + dk] matrix. */
ATTN_API attn_status attn_luong_project_keys(const attn_luong_config *config,
                                             const float *annotations, const float *w, float *keys);
/* dannotations += dkeys W_2, dw[:, ds:] += dkeys^T annotations; either may be NULL. */
ATTN_API attn_status attn_luong_project_keys_backward(const attn_luong_config *config,
                                                      const float *annotations, const float *w,
                                                      const float *dkeys, float *dannotations,
                                                      float *dw);

/* The raw scores [B, Lk]: no mask, no window, no Gaussian (e.g. for hard attention);
 * saved is used as by the forward (NULL is fine when its size is 0). */
ATTN_API attn_status attn_luong_scores(const attn_luong_config *config,
                                       const attn_luong_params *params, const float *query,
                                       const float *keys, float *scores, float *saved);

/* One decoder step; position is the target position t for local-m (>= 0; ignored
 * otherwise). context [B, dv] and weights [B, Lk] are required; saved may be NULL when
 * attn_luong_saved_floats is 0 (dot scores with no local-p). */
ATTN_API attn_status attn_luong_forward(const attn_luong_config *config,
                                        const attn_luong_params *params, int64_t position,
                                        const float *query, const float *keys, const float *values,
                                        const uint8_t *mask, float *context, float *weights,
                                        float *saved);

/* As attn_additive_backward; for dot and general scores dkeys has the keys' shape
 * [B, Lk, dk], for concat [B, Lk, da] (see attn_luong_project_keys_backward). */
ATTN_API attn_status attn_luong_backward(
    const attn_luong_config *config, const attn_luong_params *params, int64_t position,
    const float *query, const float *keys, const float *values, const uint8_t *mask,
    const float *weights, const float *saved, const float *dcontext, const float *dweights,
    float *dquery, float *dkeys, float *dvalues, const attn_luong_grads *grads, float *workspace);

/* ---- hard attention ---------------------------------------------------------------- */

typedef enum attn_hard_mode {
    ATTN_HARD_ARGMAX = 0, /* the highest score; ties go to the lowest index */
    ATTN_HARD_SAMPLE = 1  /* a draw from the softmax of the scores */
} attn_hard_mode;

/* Chooses one position per row from scores [B, Lk] (attn_additive_scores,
 * attn_luong_scores or any other): masked positions and scores of -INFINITY or NaN are
 * never chosen. chosen [B] receives the index, or -1 for a row with nothing to choose;
 * context [B, dv] = values[b, chosen] (zeros for -1); weights [B, Lk] (may be NULL) is
 * one-hot (all zero for -1). ATTN_HARD_SAMPLE needs rng and takes exactly one draw per row,
 * in row order, so a seed fixes the result at any thread count; argmax ignores rng.
 * Not differentiable, so there is no backward: training a hard-attention model needs
 * REINFORCE-style estimators, which are out of scope here. */
ATTN_API attn_status attn_hard_attention(int64_t batch, int64_t src_len, int64_t value_dim,
                                         const float *scores, const uint8_t *mask,
                                         const float *values, attn_hard_mode mode, attn_rng *rng,
                                         int64_t *chosen, float *weights, float *context);

/* ---- sinusoidal positional encoding ------------------------------------------------- */

typedef enum attn_pe_layout {
    /* As in "Attention Is All You Need": PE[pos, 2i] = sin(pos / 10000^(2i/d)),
     * PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). */
    ATTN_PE_INTERLEAVED = 0,
    /* The same features with sin in the first half, cos in the second:
     * PE[pos, i] = sin(pos * w_i), PE[pos, d/2 + i] = cos(pos * w_i), w_i = 10000^(-2i/d)
     * (as Hugging Face's Marian and BART). tensor2tensor and fairseq also concatenate
     * but space the frequencies as 10000^(-i/(d/2 - 1)): a different encoding. */
    ATTN_PE_CONCATENATED = 1
} attn_pe_layout;

/* out [length, d_model], computed in double and rounded once. An odd d_model is allowed:
 * the last feature is a sine, sin(pos * w_h) with h = d_model / 2 (rounded down), in both
 * layouts, so the two layouts always hold the same values in a different order. */
ATTN_API attn_status attn_positional_encoding(int64_t length, int64_t d_model,
                                              attn_pe_layout layout, float *out);

/* ---- rotary position embeddings ------------------------------------------------------ */

/* Rotary position embeddings (RoPE; Su et al. 2021, RoFormer) in the "rotate half" layout of
 * GPT-NeoX and LLaMA (Hugging Face's rotate_half): within each head of head_dim (even)
 * features, feature i < h = head_dim / 2 pairs with feature i + h, and the pair of a row at
 * position p turns by the angle p * base^(-2i / head_dim):
 *   x'[i]     = x[i] cos - x[i + h] sin
 *   x'[i + h] = x[i + h] cos + x[i] sin
 * In place on batch * len rows: row (b, t) holds heads * head_dim features starting at
 * x + (b * len + t) * row_stride and sits at position first_position + t. inverse turns
 * by minus the angle: the inverse rotation, which is also the backward of the rotation
 * (gradients rotate back). Angles, sines and cosines are computed in double; one scalar
 * version serves every instruction set (it is a pass over memory the projections just
 * wrote). base > 0 and finite (10000 in RoFormer and LLaMA). */
ATTN_API attn_status attn_rope_rotate(float *x, int64_t batch, int64_t len,
                                      int64_t first_position, int64_t row_stride, int64_t heads,
                                      int64_t head_dim, double base, int inverse);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_ATTENTION_H */
