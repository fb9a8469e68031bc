/* Scaled dot-product attention: the checked problem description shared by the entry points
 * (sdpa.c), the double-precision reference and the optimized kernels. */
#ifndef ATTN_SDPA_INTERNAL_H
#define ATTN_SDPA_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_attention.h"
#include "kernels/bf16.h"

#include <string.h>

/* A [B, H, L, x] view with a contiguous last dimension: element (b, h, l, x) lives at
 * data[b * batch_stride + h * head_stride + l * row_stride + x]. */
typedef struct sdpa_view {
    float *data;
    int64_t batch_stride, head_stride, row_stride;
} sdpa_view;

/* Everything a kernel needs, validated by the entry point. scale is already resolved
 * (never 0), window < 0 means none, lengths and dims may be 0. */
typedef struct sdpa_problem {
    int64_t batch, heads, len_q, len_k, dim, dim_v;
    float scale;
    int causal;
    int64_t window;
    const uint8_t *key_padding_mask; /* [B, Lk] or NULL */
    const float *attn_mask;          /* [Lq, Lk], [B, H, Lq, Lk] or NULL */
    int attn_mask_per_head;
    attn_precision precision; /* FP32 or BF16 */
    sdpa_view q, k, v, out;
    /* forward outputs (may be NULL); the backward reads lse */
    float *lse, *weights;
    /* backward only */
    const float *saved_lse;
    sdpa_view grad_out, dq, dk, dv;
} sdpa_problem;

/* The additive mask row of query i in head (b, h), or NULL when there is none. */
static inline const float *sdpa_attn_mask_row(const sdpa_problem *p, int64_t b, int64_t h,
                                              int64_t i)
{
    if (p->attn_mask == NULL)
        return NULL;
    int64_t plane = p->attn_mask_per_head ? (b * p->heads + h) : 0;
    return p->attn_mask + (plane * p->len_q + i) * p->len_k;
}

/* Whether the boolean masks (padding, causal, window) keep key j for query i. The additive
 * mask is applied separately: a -INFINITY there also excludes the pair. */
static inline int sdpa_pair_allowed(const sdpa_problem *p, const uint8_t *padding_row, int64_t i,
                                    int64_t j)
{
    if (padding_row != NULL && padding_row[j])
        return 0;
    if (p->causal && j > i)
        return 0;
    if (p->window >= 0 && (j - i > p->window || i - j > p->window))
        return 0;
    return 1;
}

/* ---- optimized kernels ------------------------------------------------------------------ */

/* How a tile product combines with what C already holds. */
typedef enum sdpa_gemm_mode {
    SDPA_GEMM_STORE,         /* C = A B */
    SDPA_GEMM_ADD,           /* C += A B */
    SDPA_GEMM_SCALE_COLUMNS, /* C = C * column_scale[n] + A B (the online-softmax rescale) */
    SDPA_GEMM_SCALE_ROWS     /* C = C * row_scale[m] + A B (bf16 kernels only) */
} sdpa_gemm_mode;

/* The instruction-set specific pieces of the tiled algorithm (sdpa_tiled.c drives them).
 * Tiles are row-major with a row stride ld; vectors run along a row, so every per-row or
 * per-column statistic the softmax needs is an element-wise vector operation. */
typedef struct sdpa_kernels {
    /* C [m x n] (ldc) combined per mode with sum_p A(r, p) B [p, :], where A(r, p) is
     * a[r * a_row_stride + p * a_inner_stride] (any strides: A is read by broadcasting
     * elements) and B [k x n] has row stride ldb. */
    void (*gemm)(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row_stride,
                 int64_t a_inner_stride, const float *b, int64_t ldb, float *c, int64_t ldc,
                 sdpa_gemm_mode mode, const float *column_scale);
    /* dst [c * dst_stride + r] = src [r * src_stride + c] * (column_scale ? column_scale[c]
     * : scale) for r < rows, c < cols: moves queries or keys between the row layout of the
     * views and the lane layout of the tiles. */
    void (*transpose)(const float *src, int64_t src_stride, int64_t rows, int64_t cols, float *dst,
                      int64_t dst_stride, const float *column_scale, float scale);
    /* One online-softmax step over a tile of scores laid out [keys x queries]: per column
     * (query), update the running max and sum with this tile, replace the scores by
     * exp(score - new max) and write the factor that rescales the column's earlier output.
     * Columns that have seen no unmasked score keep max = -INFINITY, sum = 0. */
    void (*softmax_columns)(float *scores, int64_t rows, int64_t cols, int64_t ld,
                            float *running_max, float *running_sum, float *rescale);
    /* scores [r, c] = exp(scores [r, c] - shift[c]); a shift of -INFINITY (a fully masked
     * query) gives 0. The exponential is exact to ~1 ulp for results above FLT_MIN and
     * exp(-INFINITY) = 0 exactly. */
    void (*exp_columns)(float *scores, int64_t rows, int64_t cols, int64_t ld, const float *shift);
    /* Backward, tiles laid out [queries x keys]: probs = exp(scores - lse[r]) (0 where lse
     * is -INFINITY), stored over scores; grad = probs * (grad - delta[r]) * scale, stored
     * over grad (the score gradient, with the softmax scale folded in). */
    void (*softmax_grad_rows)(float *scores, float *grad, int64_t rows, int64_t cols, int64_t ld,
                              const float *lse, const float *delta, float scale);
} sdpa_kernels;

/* ---- bfloat16 operands ------------------------------------------------------------------ */

/* A bf16 pair: two bfloat16 values in one 32-bit word, the first in the low half. The bf16
 * products run over pairs along their inner dimension, as AVX512_BF16's vdpbf16ps does
 * (each float lane adds the two products of a pair), so every operand is packed with
 * consecutive inner indices in one word and an odd inner length is padded with a zero. */
typedef uint32_t sdpa_bf16_pair;

/* The products of the bf16 tiled algorithm. Operands are pairs; C is float. */
typedef struct sdpa_bf16_kernels {
    /* C [m x n] (ldc) combined per mode (STORE, ADD or SCALE_ROWS with row_scale) with
     * alpha * sum_p A(r, p) . B [p, :], where A(r, p) is the pair a[r * a_row_stride +
     * p * a_inner_stride], B holds `pairs` rows of n pairs with row stride ldb, and a . b is
     * lo(a) lo(b) + hi(a) hi(b), accumulated in float. */
    void (*gemm)(int64_t m, int64_t n, int64_t pairs, const sdpa_bf16_pair *a, int64_t a_row_stride,
                 int64_t a_inner_stride, const sdpa_bf16_pair *b, int64_t ldb, float *c,
                 int64_t ldc, float alpha, sdpa_gemm_mode mode, const float *row_scale);
    /* Rounds and packs: dst [r * dst_row_stride + p * dst_pair_stride] = the pair
     * (X(r, 2p), X(r, 2p + 1)) for r < rows, p < (cols + 1) / 2, where X(r, x) =
     * src[r * row_stride + x * col_stride] and X(r, cols) = 0 pads an odd cols. */
    void (*pack)(const float *src, int64_t row_stride, int64_t col_stride, int64_t rows,
                 int64_t cols, sdpa_bf16_pair *dst, int64_t dst_row_stride,
                 int64_t dst_pair_stride);
    /* sdpa_kernels.softmax_columns over scores in base 2 (2^s replaces e^s; running_max too),
     * writing the probabilities as pairs of rows, prob_pairs [(r / 2) * ld + c] = (P(r, c),
     * P(r + 1, c)) with P(rows, c) = 0, instead of over the scores. */
    void (*softmax_columns)(const float *scores, int64_t rows, int64_t cols, int64_t ld,
                            float *running_max, float *running_sum, float *rescale,
                            sdpa_bf16_pair *prob_pairs);
    /* sdpa_kernels.softmax_grad_rows over base-2 scores and a base-2 lse: P = 2^(S - lse),
     * dS = P (dP - delta) scale, written as pairs of rows (prob_pairs, grad_pairs, as above)
     * and as rows of pairs, grad_rows [r * grad_rows_stride + c / 2] = (dS(r, c),
     * dS(r, c + 1)) with dS(r, cols) = 0. cols <= 64 (one key tile). */
    void (*softmax_grad_rows)(const float *scores, const float *grad, int64_t rows, int64_t cols,
                              int64_t ld, const float *lse, const float *delta, float scale,
                              sdpa_bf16_pair *prob_pairs, sdpa_bf16_pair *grad_pairs,
                              sdpa_bf16_pair *grad_rows, int64_t grad_rows_stride);
} sdpa_bf16_kernels;

/* How the bf16 kernels without a vector epilogue combine a row of sums with C: alpha * sum,
 * stored, added, or added to C scaled by the row's row_scale (SDPA_GEMM_SCALE_ROWS). */
static inline void sdpa_bf16_combine_row(float *c_row, const float *sums, int64_t width,
                                         float alpha, sdpa_gemm_mode mode, float row_scale)
{
    for (int64_t x = 0; x < width; x++) {
        const float product = alpha * sums[x];
        c_row[x] = mode == SDPA_GEMM_STORE ? product
                   : mode == SDPA_GEMM_ADD ? c_row[x] + product
                                           : c_row[x] * row_scale + product;
    }
}

/* log2(e) and ln(2) in float: the bf16 kernels' scores are in base 2. */
#define SDPA_LOG2E 1.44269504088896341f
#define SDPA_LN2 0.693147180559945309f

/* The same rounding in plain C (correct on every CPU; also compiled for AVX2 and AVX-512),
 * with AVX512_BF16, and with BFDOT's products (neon-bf16). */
ATTN_INTERNAL extern const sdpa_bf16_kernels attn_sdpa_bf16_kernels_emulated;
#if defined(__x86_64__) || defined(__i386__)
ATTN_INTERNAL extern const sdpa_bf16_kernels attn_sdpa_bf16_kernels_emulated_avx2;
ATTN_INTERNAL extern const sdpa_bf16_kernels attn_sdpa_bf16_kernels_emulated_avx512;
ATTN_INTERNAL extern const sdpa_bf16_kernels attn_sdpa_bf16_kernels_avx512bf16;
#elif defined(__aarch64__)
ATTN_INTERNAL extern const sdpa_bf16_kernels attn_sdpa_bf16_kernels_neonbf16;
#endif

/* The bf16 kernels the tiled algorithm runs on the selected instruction set: vdpbf16ps or
 * BFDOT where attn_precision_native(ATTN_PRECISION_BF16), the emulation compiled for the
 * instruction set otherwise. */
ATTN_INTERNAL const sdpa_bf16_kernels *attn_sdpa_bf16_kernels_for(attn_isa isa);

ATTN_INTERNAL extern const sdpa_kernels attn_sdpa_kernels_portable;
#if defined(__x86_64__) || defined(__i386__)
#define ATTN_SDPA_HAVE_X86 1
ATTN_INTERNAL extern const sdpa_kernels attn_sdpa_kernels_avx2;
ATTN_INTERNAL extern const sdpa_kernels attn_sdpa_kernels_avx512;
#elif defined(__aarch64__)
ATTN_INTERNAL extern const sdpa_kernels attn_sdpa_kernels_neon;
#endif

/* The kernels for an instruction set, NULL for ATTN_ISA_REFERENCE. */
ATTN_INTERNAL const sdpa_kernels *attn_sdpa_kernels_for(attn_isa isa);

/* The tiled flash-attention algorithm over any kernel set (sdpa_tiled.c). */
ATTN_INTERNAL attn_status attn_sdpa_tiled_forward(const sdpa_problem *p, const sdpa_kernels *kern);
ATTN_INTERNAL attn_status attn_sdpa_tiled_backward(const sdpa_problem *p, const sdpa_kernels *kern);

/* Bytes of scratch the tiled forward (backward = 0) or backward allocates for p when run on
 * the given number of threads; 0 with a message if the size overflows. The benchmark
 * reports it as the library's own extra memory. */
ATTN_INTERNAL int attn_sdpa_scratch_bytes(const sdpa_problem *p, int backward, int threads,
                                          size_t *bytes);

/* ---- double-precision reference ------------------------------------------------------- */

/* Contiguous double arrays: q [B,H,Lq,d], k [B,H,Lk,d], v [B,H,Lk,dv], out [B,H,Lq,dv],
 * lse [B,H,Lq], weights [B,H,Lq,Lk]. The masks and scale come from p (its views are
 * ignored). Textbook formulas, one row of scores at a time. lse and weights may be NULL. */
ATTN_INTERNAL attn_status attn_sdpa_reference_forward_f64(const sdpa_problem *p, const double *q,
                                                          const double *k, const double *v,
                                                          double *out, double *lse,
                                                          double *weights);
/* Accumulates dq, dk, dv (same layouts as q, k, v) for grad_out [B,H,Lq,dv]. Recomputes each
 * row's softmax in double rather than trusting a saved lse. */
ATTN_INTERNAL attn_status attn_sdpa_reference_backward_f64(const sdpa_problem *p, const double *q,
                                                           const double *k, const double *v,
                                                           const double *grad_out, double *dq,
                                                           double *dk, double *dv);

#endif /* ATTN_SDPA_INTERNAL_H */
