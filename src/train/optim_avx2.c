/* AVX2 Adam update and sums of squares. The update rounds each operation as PyTorch 1.13's
 * vectorised CPU kernels do (see optim_internal.h); masked loads and stores take the tail. */
#include "train/optim_internal.h"

#include <immintrin.h>

static __m256i tail_mask(int64_t remaining)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int left = remaining >= 8 ? 8 : (int)remaining;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lanes);
}

void attn_adam_kernel_avx2(const attn_adam_coeffs *c, int64_t count, float *p, const float *g,
                           float *m, float *v)
{
    const int decoupled = c->decay_factor != 1.0f, coupled = c->l2_decay != 0.0f;
    const __m256 decay_factor = _mm256_set1_ps(c->decay_factor);
    const __m256 l2_decay = _mm256_set1_ps(c->l2_decay);
    const __m256 beta1 = _mm256_set1_ps(c->beta1);
    const __m256 one_minus_beta1 = _mm256_set1_ps(c->one_minus_beta1);
    const __m256 beta2 = _mm256_set1_ps(c->beta2);
    const __m256 one_minus_beta2 = _mm256_set1_ps(c->one_minus_beta2);
    const __m256 neg_step_size = _mm256_set1_ps(c->neg_step_size);
    const __m256 bias_correction2_sqrt = _mm256_set1_ps(c->bias_correction2_sqrt);
    const __m256 eps = _mm256_set1_ps(c->eps);
    for (int64_t i = 0; i < count; i += 8) {
        const int full = count - i >= 8;
        const __m256i k = tail_mask(count - i);
        __m256 param = full ? _mm256_loadu_ps(p + i) : _mm256_maskload_ps(p + i, k);
        __m256 grad = full ? _mm256_loadu_ps(g + i) : _mm256_maskload_ps(g + i, k);
        __m256 mold = full ? _mm256_loadu_ps(m + i) : _mm256_maskload_ps(m + i, k);
        __m256 vold = full ? _mm256_loadu_ps(v + i) : _mm256_maskload_ps(v + i, k);
        if (decoupled)
            param = _mm256_mul_ps(param, decay_factor);
        if (coupled)
            grad = _mm256_fmadd_ps(l2_decay, param, grad);
        __m256 mi = _mm256_fmadd_ps(one_minus_beta1, grad, _mm256_mul_ps(mold, beta1));
        __m256 vi = _mm256_fmadd_ps(_mm256_mul_ps(one_minus_beta2, grad), grad,
                                    _mm256_mul_ps(vold, beta2));
        __m256 denom = _mm256_add_ps(_mm256_div_ps(_mm256_sqrt_ps(vi), bias_correction2_sqrt),
                                     eps);
        param = _mm256_add_ps(param, _mm256_div_ps(_mm256_mul_ps(neg_step_size, mi), denom));
        if (full) {
            _mm256_storeu_ps(p + i, param);
            _mm256_storeu_ps(m + i, mi);
            _mm256_storeu_ps(v + i, vi);
        } else {
            _mm256_maskstore_ps(p + i, k, param);
            _mm256_maskstore_ps(m + i, k, mi);
            _mm256_maskstore_ps(v + i, k, vi);
        }
    }
}

/* The block's 16 accumulators as four vectors of 4 lanes: acc[0..3], [4..7], [8..11],
 * [12..15]. */
void attn_sum_squares_avx2(const float *x, int64_t count, double acc[ATTN_SQUARES_LANES])
{
    __m256d a0 = _mm256_loadu_pd(acc), a1 = _mm256_loadu_pd(acc + 4);
    __m256d a2 = _mm256_loadu_pd(acc + 8), a3 = _mm256_loadu_pd(acc + 12);
    for (int64_t i = 0; i < count; i += 16) {
        __m256d x0 = _mm256_cvtps_pd(_mm_loadu_ps(x + i));
        __m256d x1 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4));
        __m256d x2 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 8));
        __m256d x3 = _mm256_cvtps_pd(_mm_loadu_ps(x + i + 12));
        a0 = _mm256_fmadd_pd(x0, x0, a0);
        a1 = _mm256_fmadd_pd(x1, x1, a1);
        a2 = _mm256_fmadd_pd(x2, x2, a2);
        a3 = _mm256_fmadd_pd(x3, x3, a3);
    }
    _mm256_storeu_pd(acc, a0);
    _mm256_storeu_pd(acc + 4, a1);
    _mm256_storeu_pd(acc + 8, a2);
    _mm256_storeu_pd(acc + 12, a3);
}
