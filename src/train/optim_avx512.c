/* AVX-512 Adam update and sums of squares. The update rounds each operation as PyTorch 1.13's
 * vectorised CPU kernels do (see optim_internal.h); masked loads and stores take the tail. */
#include "train/optim_internal.h"

#include <immintrin.h>

static __mmask16 tail_mask(int64_t remaining)
{
    return (__mmask16)(remaining >= 16 ? 0xFFFFu : (1u << remaining) - 1u);
}

void attn_adam_kernel_avx512(const attn_adam_coeffs *c, int64_t count, float *p,
                             const float *g, float *m, float *v)
{
    const int decoupled = c->decay_factor != 1.0f, coupled = c->l2_decay != 0.0f;
    const __m512 decay_factor = _mm512_set1_ps(c->decay_factor);
    const __m512 l2_decay = _mm512_set1_ps(c->l2_decay);
    const __m512 beta1 = _mm512_set1_ps(c->beta1);
    const __m512 one_minus_beta1 = _mm512_set1_ps(c->one_minus_beta1);
    const __m512 beta2 = _mm512_set1_ps(c->beta2);
    const __m512 one_minus_beta2 = _mm512_set1_ps(c->one_minus_beta2);
    const __m512 neg_step_size = _mm512_set1_ps(c->neg_step_size);
    const __m512 bias_correction2_sqrt = _mm512_set1_ps(c->bias_correction2_sqrt);
    const __m512 eps = _mm512_set1_ps(c->eps);
    for (int64_t i = 0; i < count; i += 16) {
        const __mmask16 k = tail_mask(count - i);
        __m512 param = _mm512_maskz_loadu_ps(k, p + i);
        __m512 grad = _mm512_maskz_loadu_ps(k, g + i);
        if (decoupled)
            param = _mm512_mul_ps(param, decay_factor);
        if (coupled)
            grad = _mm512_fmadd_ps(l2_decay, param, grad);
        __m512 mi = _mm512_fmadd_ps(one_minus_beta1, grad,
                                    _mm512_mul_ps(_mm512_maskz_loadu_ps(k, m + i), beta1));
        __m512 vi = _mm512_fmadd_ps(_mm512_mul_ps(one_minus_beta2, grad), grad,
                                    _mm512_mul_ps(_mm512_maskz_loadu_ps(k, v + i), beta2));
        __m512 denom = _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(vi), bias_correction2_sqrt),
                                     eps);
        param = _mm512_add_ps(param, _mm512_div_ps(_mm512_mul_ps(neg_step_size, mi), denom));
        _mm512_mask_storeu_ps(p + i, k, param);
        _mm512_mask_storeu_ps(m + i, k, mi);
        _mm512_mask_storeu_ps(v + i, k, vi);
    }
}

/* Lanes 0-7 of the block's 16 accumulators in lo, 8-15 in hi. */
void attn_sum_squares_avx512(const float *x, int64_t count, double acc[ATTN_SQUARES_LANES])
{
    __m512d lo = _mm512_loadu_pd(acc), hi = _mm512_loadu_pd(acc + 8);
    for (int64_t i = 0; i < count; i += 16) {
        __m512d a = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
        __m512d b = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
        lo = _mm512_fmadd_pd(a, a, lo);
        hi = _mm512_fmadd_pd(b, b, hi);
    }
    _mm512_storeu_pd(acc, lo);
    _mm512_storeu_pd(acc + 8, hi);
}
