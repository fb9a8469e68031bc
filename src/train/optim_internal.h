/* The per-instruction-set pieces behind attn_adam_step and the gradient norm. */
#ifndef ATTN_OPTIM_INTERNAL_H
#define ATTN_OPTIM_INTERNAL_H

#include "attn/attn_optim.h"
#include "core/internal.h"

/* The scalars of one Adam step, rounded to float from double values formed as PyTorch 1.13
 * forms them (1 - beta1 in double, then rounded; not 1 - (float)beta1). */
typedef struct attn_adam_coeffs {
    float beta1, one_minus_beta1;
    float beta2, one_minus_beta2;
    float neg_step_size;         /* -lr / (1 - beta1^t) */
    float bias_correction2_sqrt; /* sqrt(1 - beta2^t) */
    float eps;
    float l2_decay;     /* Adam: g += l2_decay * p when nonzero */
    float decay_factor; /* AdamW: p *= decay_factor when not 1 */
} attn_adam_coeffs;

/* Update count elements, rounding as PyTorch's vectorised CPU kernels:
 *   p = p * decay_factor                      (AdamW; skipped when decay_factor == 1)
 *   g = fma(l2_decay, p, g)                   (Adam; skipped when l2_decay == 0)
 *   m = fma(one_minus_beta1, g, m * beta1)
 *   v = fma(one_minus_beta2 * g, g, v * beta2)
 *   p = p + (neg_step_size * m) / (sqrt(v) / bias_correction2_sqrt + eps) */
typedef void (*attn_adam_kernel_fn)(const attn_adam_coeffs *c, int64_t count, float *p,
                                    const float *g, float *m, float *v);
ATTN_INTERNAL void attn_adam_kernel_portable(const attn_adam_coeffs *c, int64_t count, float *p,
                                             const float *g, float *m, float *v);
ATTN_INTERNAL void attn_adam_kernel_avx2(const attn_adam_coeffs *c, int64_t count, float *p,
                                         const float *g, float *m, float *v);
ATTN_INTERNAL void attn_adam_kernel_avx512(const attn_adam_coeffs *c, int64_t count, float *p,
                                           const float *g, float *m, float *v);
ATTN_INTERNAL void attn_adam_kernel_neon(const attn_adam_coeffs *c, int64_t count, float *p,
                                         const float *g, float *m, float *v);

/* Sums of squares in one fixed order shared by every instruction set, so the gradient norm
 * has the same bits whichever runs: element i of a block goes to accumulator i % 16 (each
 * square is exact in double), and the 16 accumulators are added pairwise by
 * attn_sum_squares_combine. A kernel adds the squares of count elements (a multiple of
 * ATTN_SQUARES_LANES) into acc[]; the caller handles the tail. */
#define ATTN_SQUARES_LANES 16
typedef void (*attn_sum_squares_fn)(const float *x, int64_t count,
                                    double acc[ATTN_SQUARES_LANES]);
ATTN_INTERNAL void attn_sum_squares_portable(const float *x, int64_t count,
                                             double acc[ATTN_SQUARES_LANES]);
ATTN_INTERNAL void attn_sum_squares_avx2(const float *x, int64_t count,
                                         double acc[ATTN_SQUARES_LANES]);
ATTN_INTERNAL void attn_sum_squares_avx512(const float *x, int64_t count,
                                           double acc[ATTN_SQUARES_LANES]);
ATTN_INTERNAL void attn_sum_squares_neon(const float *x, int64_t count,
                                         double acc[ATTN_SQUARES_LANES]);

/* ((a0 + a8) + (a4 + a12)) + ... : halves added lane by lane, as a SIMD reduction does. */
static inline double attn_sum_squares_combine(const double acc[ATTN_SQUARES_LANES])
{
    double s8[8], s4[4], s2[2];
    for (int j = 0; j < 8; j++)
        s8[j] = acc[j] + acc[j + 8];
    for (int j = 0; j < 4; j++)
        s4[j] = s8[j] + s8[j + 4];
    for (int j = 0; j < 2; j++)
        s2[j] = s4[j] + s4[j + 2];
    return s2[0] + s2[1];
}

#endif /* ATTN_OPTIM_INTERNAL_H */
