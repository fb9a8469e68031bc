/* The Adam update and the sums of squares on SIMD vectors, compiled by optim_avx2.c and
 * optim_avx512.c. The update rounds each operation as PyTorch 1.13's vectorised CPU kernels
 * do (optim_internal.h); a zero-filled partial vector takes the tail. */
#include "kernels/simd.h"
#include "train/optim_internal.h"

void SIMD_NAME(attn_adam_kernel)(const attn_adam_coeffs *c, int64_t count, float *p, const float *g,
                                 float *m, float *v)
{
    const int decoupled = c->decay_factor != 1.0f, coupled = c->l2_decay != 0.0f;
    const vf decay_factor = vf_set(c->decay_factor);
    const vf l2_decay = vf_set(c->l2_decay);
    const vf beta1 = vf_set(c->beta1);
    const vf one_minus_beta1 = vf_set(c->one_minus_beta1);
    const vf beta2 = vf_set(c->beta2);
    const vf one_minus_beta2 = vf_set(c->one_minus_beta2);
    const vf neg_step_size = vf_set(c->neg_step_size);
    const vf bias_correction2_sqrt = vf_set(c->bias_correction2_sqrt);
    const vf eps = vf_set(c->eps);
    for (int64_t i = 0; i < count; i += SIMD_LANES) {
        const int64_t k = count - i < SIMD_LANES ? count - i : SIMD_LANES;
        vf param = vf_load_upto(p + i, k);
        vf grad = vf_load_upto(g + i, k);
        if (decoupled)
            param = vf_mul(param, decay_factor);
        if (coupled)
            grad = vf_fmadd(l2_decay, param, grad);
        vf moment1 = vf_fmadd(one_minus_beta1, grad, vf_mul(vf_load_upto(m + i, k), beta1));
        vf moment2 =
            vf_fmadd(vf_mul(one_minus_beta2, grad), grad, vf_mul(vf_load_upto(v + i, k), beta2));
        vf denom = vf_add(vf_div(vf_sqrt(moment2), bias_correction2_sqrt), eps);
        param = vf_add(param, vf_div(vf_mul(neg_step_size, moment1), denom));
        vf_store_upto(p + i, k, param);
        vf_store_upto(m + i, k, moment1);
        vf_store_upto(v + i, k, moment2);
    }
}

/* The block's ATTN_SQUARES_LANES accumulators as consecutive vectors of doubles, so element
 * i of a block always lands in accumulator i % ATTN_SQUARES_LANES. */
#define SQUARES_VECTORS (ATTN_SQUARES_LANES / SIMD_DOUBLE_LANES)

void SIMD_NAME(attn_sum_squares)(const float *x, int64_t count, double acc[ATTN_SQUARES_LANES])
{
    vd sums[SQUARES_VECTORS];
    for (int a = 0; a < SQUARES_VECTORS; a++)
        sums[a] = vd_load(acc + a * SIMD_DOUBLE_LANES);
    for (int64_t i = 0; i < count; i += ATTN_SQUARES_LANES)
        for (int a = 0; a < SQUARES_VECTORS; a++) {
            vd wide = vd_load_floats(x + i + a * SIMD_DOUBLE_LANES);
            sums[a] = vd_fmadd(wide, wide, sums[a]);
        }
    for (int a = 0; a < SQUARES_VECTORS; a++)
        vd_store(acc + a * SIMD_DOUBLE_LANES, sums[a]);
}
