/* attn kernels: matrix multiply and the element-wise and row-wise operations that models
 * are built from, each with its backward.
 *
 * All arrays are float32, row-major and contiguous unless a leading dimension says
 * otherwise. Backward functions ACCUMULATE into their gradient outputs (see attn_core.h).
 * Every kernel runs the instruction set chosen by attn_set_isa(); ATTN_ISA_REFERENCE runs
 * the plain scalar version that the tests treat as ground truth.
 */
#ifndef ATTN_KERNELS_H
#define ATTN_KERNELS_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- matrix multiply ------------------------------------------------------------------ */

typedef enum attn_transpose { ATTN_NO_TRANS = 0, ATTN_TRANS = 1 } attn_transpose;

/* C[m,n] = alpha * op(A)[m,k] * op(B)[k,n] + beta * C, row-major with leading dimensions
 * (as CBLAS with CblasRowMajor). op(X) = X or X^T. beta = 0 overwrites C (C may hold NaN).
 * m, n or k may be 0 (k = 0: C = beta * C; A and B may then be NULL). Each leading
 * dimension must be at least the length of a stored row (lda >= k, or m if A is
 * transposed; ldb >= n, or k; ldc >= n) and at least 1. C must not overlap A or B.
 * The built-in versions give bit-identical results for any thread count, and a row of C
 * does not depend on the other rows: each element is summed over k in the same order
 * however C is split between threads or tiles. */
ATTN_API attn_status attn_gemm(attn_transpose trans_a, attn_transpose trans_b, int64_t m,
                               int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                               const float *b, int64_t ldb, float beta, float *c, int64_t ldc);

/* attn_gemm with the operands in the given precision, the sums in float32 whatever it is:
 *  - ATTN_PRECISION_FP32: attn_gemm.
 *  - ATTN_PRECISION_BF16: A and B are rounded to bfloat16 (to nearest, ties to even; NaN
 *    stays NaN) as they are read, and the products summed in float32. With AVX512_BF16
 *    (attn_precision_native) this runs vdpbf16ps at about twice the float32 rate; elsewhere
 *    the float kernels multiply the rounded operands (same rounding, float speed). The
 *    reference instruction set sums the rounded operands in double.
 * The same arguments, checks and guarantees as attn_gemm (bit-identical for any thread count
 * on one instruction set, a row of C independent of the others). Other precisions fail
 * with ATTN_ERR_INVALID_ARGUMENT. */
ATTN_API attn_status attn_gemm_precision(attn_precision precision, attn_transpose trans_a,
                                         attn_transpose trans_b, int64_t m, int64_t n, int64_t k,
                                         float alpha, const float *a, int64_t lda,
                                         const float *b, int64_t ldb, float beta, float *c,
                                         int64_t ldc);

/* op(B) rounded (bf16) and packed once for many products: a weight between two optimizer
 * steps, multiplied by every batch's activations (forward op(B) = W^T, backward op(B) = W).
 * attn_gemm_with_packed_b(ta, m, alpha, a, lda, packed, beta, c, ldc) gives exactly the bits
 * of attn_gemm_precision(precision, ta, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c,
 * ldc) without converting or packing B again. The panels are for the instruction set active
 * at create or refresh; under another one the product reads b itself, so b must stay valid
 * (and unchanged, or refreshed) for the handle's life. Refresh after b's values change: it
 * repacks in place (no allocation unless the instruction set changed the size). */
typedef struct attn_gemm_packed_b attn_gemm_packed_b;
ATTN_API attn_status attn_gemm_packed_b_create(attn_precision precision, attn_transpose trans_b,
                                               int64_t k, int64_t n, const float *b, int64_t ldb,
                                               attn_gemm_packed_b **out);
ATTN_API attn_status attn_gemm_packed_b_refresh(attn_gemm_packed_b *packed);
/* NULL is ignored. */
ATTN_API void attn_gemm_packed_b_destroy(attn_gemm_packed_b *packed);
ATTN_API attn_status attn_gemm_with_packed_b(attn_transpose trans_a, int64_t m, float alpha,
                                             const float *a, int64_t lda,
                                             const attn_gemm_packed_b *b, float beta, float *c,
                                             int64_t ldc);

/* The GEMM implementation in use: "built-in <isa>" for the instruction set attn_set_isa()
 * selects, or "cblas" when the library was built with ATTN_BLAS=ON (the reference ISA
 * still runs the built-in reference). */
ATTN_API const char *attn_gemm_backend(void);

/* attn_gemm keeps its packing buffers (a few MiB per thread) between calls so that
 * repeated multiplies do not fault in fresh memory. This frees the idle ones; the next
 * call allocates again. Safe to call at any time. */
ATTN_API void attn_gemm_release_buffers(void);

/* ---- softmax over the last dimension ------------------------------------------------ */

/* y = exp(x - max) / sum(exp(x - max)) per row of x [rows, cols]; y may alias x. A fully
 * masked row (all -inf) gives zeros, not NaN; -inf entries of other rows give exactly 0. */
ATTN_API attn_status attn_softmax_forward(int64_t rows, int64_t cols, const float *x, float *y);
/* dx += y * (dy - sum(dy * y)), from the forward's output y */
ATTN_API attn_status attn_softmax_backward(int64_t rows, int64_t cols, const float *y,
                                           const float *dy, float *dx);
/* y = x - max - log(sum(exp(x - max))) per row; y may alias x. A fully masked row gives
 * -inf everywhere (the log of the zeros softmax gives). */
ATTN_API attn_status attn_log_softmax_forward(int64_t rows, int64_t cols, const float *x,
                                              float *y);
/* dx += dy - exp(y) * sum(dy), from the forward's output y */
ATTN_API attn_status attn_log_softmax_backward(int64_t rows, int64_t cols, const float *y,
                                               const float *dy, float *dx);

/* The index of the largest of x[0, n), the lowest on ties; a NaN is never the largest unless
 * it is x[0]. -1 for n < 1. The one arg-max of greedy decoding, classifiers and benchmarks. */
ATTN_API int64_t attn_argmax(int64_t n, const float *x);

/* ---- cross-entropy from logits, with label smoothing and an ignore index --------------- */

/* As torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index,
 * label_smoothing=smoothing, reduction='sum'): per row,
 *   loss = (1 - smoothing) * (-log p[target]) + smoothing * mean_c(-log p[c]),
 * rows whose target equals ignore_index (any value, even a valid class) contribute
 * nothing. At smoothing 0 the smoothing term is left out, as in PyTorch, so -inf logits
 * (a masked vocabulary) are fine. Writes the summed loss (accumulated in double, in row
 * order) and the number of counted rows (divide for the mean), and each row's log-sum-exp
 * into row_lse[rows] for the backward (0 for ignored rows; row_lse may be NULL if no
 * backward follows). vocab > 0 and smoothing in [0, 1]; a target outside [0, vocab) that
 * is not ignore_index is an error naming its position and value. */
ATTN_API attn_status attn_cross_entropy_forward(int64_t rows, int64_t vocab,
                                                const float *logits, const int32_t *targets,
                                                int32_t ignore_index, float smoothing,
                                                double *loss_sum, int64_t *counted,
                                                float *row_lse);
/* dlogits += grad_scale * d(loss of each row)/dlogits; use grad_scale = 1/counted for the
 * mean reduction. Ignored rows get no gradient. */
ATTN_API attn_status attn_cross_entropy_backward(int64_t rows, int64_t vocab,
                                                 const float *logits, const int32_t *targets,
                                                 int32_t ignore_index, float smoothing,
                                                 const float *row_lse, float grad_scale,
                                                 float *dlogits);

/* The cross-entropy of each counted row against a distribution (a teacher's, for token-level
 * knowledge distillation): per row r whose target is not ignore_index,
 *   loss = -sum_c probs[r, c] * log softmax(logits[r])[c],
 * computed in double (classes whose probability is 0 are left out, so a masked class with a
 * -inf logit is fine). Writes the summed loss (in row order) and the number of counted rows;
 * targets only mark the rows (an ignored row's probs are not read). probs may be any
 * non-negative weights: the backward, dlogits += grad_scale * (sum(probs[r]) *
 * softmax(logits[r]) - probs[r]), is the gradient of the same formula. One double-precision
 * implementation serves every instruction set: a batch has few rows and a small vocabulary. */
ATTN_API attn_status attn_soft_cross_entropy_forward(int64_t rows, int64_t vocab,
                                                     const float *logits, const float *probs,
                                                     const int32_t *targets, int32_t ignore_index,
                                                     double *loss_sum, int64_t *counted);
ATTN_API attn_status attn_soft_cross_entropy_backward(int64_t rows, int64_t vocab,
                                                      const float *logits, const float *probs,
                                                      const int32_t *targets,
                                                      int32_t ignore_index, float grad_scale,
                                                      float *dlogits);

/* ---- layer norm over the last dimension --------------------------------------------- */

/* y = (x - mean) / sqrt(var + eps) * gamma + beta (biased variance, as PyTorch). gamma and
 * beta may be NULL (no affine). mean and rstd = 1/sqrt(var + eps) [rows] are saved for the
 * backward and may be NULL if no backward follows. dim > 0; eps finite and >= 0. */
ATTN_API attn_status attn_layer_norm_forward(int64_t rows, int64_t dim, const float *x,
                                             const float *gamma, const float *beta, float eps,
                                             float *y, float *mean, float *rstd);
/* dx, dgamma, dbeta accumulate; gamma, dgamma and dbeta may be NULL. dgamma and dbeta are
 * summed over rows in an order that does not depend on the thread count. */
ATTN_API attn_status attn_layer_norm_backward(int64_t rows, int64_t dim, const float *x,
                                              const float *gamma, const float *mean,
                                              const float *rstd, const float *dy, float *dx,
                                              float *dgamma, float *dbeta);

/* ---- RMSNorm over the last dimension (Zhang and Sennrich 2019) ------------------------ */

/* y = x / sqrt(mean(x^2) + eps) * gamma: no mean subtracted, no bias. gamma may be NULL (no
 * scale). rstd = 1/sqrt(mean(x^2) + eps) [rows] is saved for the backward and may be NULL if
 * no backward follows. dim > 0; eps finite and >= 0. */
ATTN_API attn_status attn_rms_norm_forward(int64_t rows, int64_t dim, const float *x,
                                           const float *gamma, float eps, float *y, float *rstd);
/* dx and dgamma accumulate; gamma and dgamma may be NULL. dgamma is summed over rows in an
 * order that does not depend on the thread count. */
ATTN_API attn_status attn_rms_norm_backward(int64_t rows, int64_t dim, const float *x,
                                            const float *gamma, const float *rstd,
                                            const float *dy, float *dx, float *dgamma);

/* ---- activations (element-wise over n values) ---------------------------------------- */

typedef enum attn_activation {
    ATTN_ACT_RELU = 0,
    ATTN_ACT_GELU = 1,      /* exact: x * Phi(x), with erf (PyTorch's default) */
    ATTN_ACT_GELU_TANH = 2, /* the tanh approximation */
    ATTN_ACT_TANH = 3,
    ATTN_ACT_SIGMOID = 4,
    ATTN_ACT_SILU = 5 /* x * sigmoid(x) (swish), the gate of a SwiGLU feed-forward */
} attn_activation;

/* y may alias x. NaN propagates. */
ATTN_API attn_status attn_activation_forward(attn_activation act, int64_t n, const float *x,
                                             float *y);
/* dx += f'(x) * dy, from the forward's input x for every activation (tanh and sigmoid
 * too: their derivatives are computed from x without the cancellation of 1 - y^2). */
ATTN_API attn_status attn_activation_backward(attn_activation act, int64_t n, const float *x,
                                              const float *dy, float *dx);

/* ---- dropout ------------------------------------------------------------------------- */

/* Inverted dropout: y = x * keep / (1 - p), keep = attn_hash_uniform(seed, offset + i) >= p.
 * The mask depends only on (seed, offset + i), never on threads, so consecutive calls
 * continue one stream when offset advances by n. p in [0, 1); p = 0 copies. As in
 * PyTorch, 1 / (1 - p) is rounded to float once and multiplies x.
 * mask [n] may be NULL; if given, receives 1 for kept and 0 for dropped elements. */
ATTN_API attn_status attn_dropout_forward(int64_t n, float p, uint64_t seed, uint64_t offset,
                                          const float *x, float *y, uint8_t *mask);
/* dx += dy * keep / (1 - p), regenerating the mask from (seed, offset): no memory between
 * the forward and the backward, three 64-bit multiplies per element again. */
ATTN_API attn_status attn_dropout_backward(int64_t n, float p, uint64_t seed, uint64_t offset,
                                           const float *dy, float *dx);
/* The backward that reads the mask instead (what attn_op_dropout does): the forward also packs
 * it 1 bit per element into keep_bits [(n + 7) / 8] (bit i % 8 of byte i / 8, 1 for kept), and
 * the backward from those bits gives dx bit for bit as attn_dropout_backward with the
 * forward's (seed, offset) does. */
ATTN_API attn_status attn_dropout_forward_bits(int64_t n, float p, uint64_t seed, uint64_t offset,
                                               const float *x, float *y, uint8_t *keep_bits);
ATTN_API attn_status attn_dropout_backward_bits(int64_t n, float p, const uint8_t *keep_bits,
                                                const float *dy, float *dx);

/* ---- embedding lookup --------------------------------------------------------------- */

/* out[t, :] = table[ids[t], :] * scale. vocab > 0; an id outside [0, vocab) is an error
 * naming its position and value. */
ATTN_API attn_status attn_embedding_forward(int64_t tokens, int64_t vocab, int64_t dim,
                                            const float *table, const int32_t *ids, float scale,
                                            float *out);
/* dtable[ids[t], :] += scale * dout[t, :], adding the tokens of a repeated id in token
 * order whatever the thread count (threads split the embedding columns). */
ATTN_API attn_status attn_embedding_backward(int64_t tokens, int64_t vocab, int64_t dim,
                                             const int32_t *ids, float scale,
                                             const float *dout, float *dtable);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_KERNELS_H */
