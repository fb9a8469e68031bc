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
 * never anything proportional to Lq * Lk; tiles of K and V stream past a
 * tile of Q with an online softmax, and tiles that the causal or window mask excludes
 * entirely are skipped. ATTN_ERR_OUT_OF_MEMORY if that small allocation fails.
 * Outputs must not overlap the inputs or each other: threads write them concurrently.
 * Results are bit-identical from run to run at a fixed thread count. */
typedef struct attn_sdpa_options {
    float scale;                     /* finite; 0 means 1 / sqrt(d) */
    int causal;                      /* 0 or 1 */
    int64_t window;                  /* < 0: none */
    const uint8_t *key_padding_mask; /* [B, Lk] or NULL */
    const float *attn_mask;          /* [Lq, Lk], or [B, H, Lq, Lk], or NULL */
    int attn_mask_per_head;          /* 0 or 1; 1 requires attn_mask */
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
