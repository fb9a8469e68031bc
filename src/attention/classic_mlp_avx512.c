/* AVX-512 MLP score v . tanh(q + k) and its backward: the float tanh of
 * classic_internal.h, 16 lanes at a time, with masked loads for the tail. */
#include "attention/classic_tanh_simd.h"

static __mmask16 tail_mask(int64_t remaining)
{
    uint32_t bits = remaining >= 16 ? 0xFFFFu : (1u << remaining) - 1u;
    return (__mmask16)bits;
}

float attn_classic_mlp_score_avx512(const float *q, const float *k, const float *v, int64_t n)
{
    __m512 sum = _mm512_setzero_ps();
    for (int64_t d = 0; d < n; d += 16) {
        __mmask16 m = tail_mask(n - d);
        __m512 t = attn_tanh16_avx512(_mm512_add_ps(_mm512_maskz_loadu_ps(m, q + d),
                                        _mm512_maskz_loadu_ps(m, k + d)));
        sum = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, v + d), t, sum);
    }
    return _mm512_reduce_add_ps(sum);
}

void attn_classic_mlp_backward_avx512(const float *q, const float *k, const float *v, float de,
                                      int64_t n, float *dq, float *dk, float *dv_row)
{
    const __m512 vde = _mm512_set1_ps(de);
    for (int64_t d = 0; d < n; d += 16) {
        __mmask16 m = tail_mask(n - d);
        __m512 t = attn_tanh16_avx512(_mm512_add_ps(_mm512_maskz_loadu_ps(m, q + d),
                                        _mm512_maskz_loadu_ps(m, k + d)));
        __m512 slope = _mm512_fnmadd_ps(t, t, _mm512_set1_ps(1.0f));
        __m512 g = _mm512_mul_ps(_mm512_mul_ps(vde, _mm512_maskz_loadu_ps(m, v + d)), slope);
        _mm512_mask_storeu_ps(dq + d, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dq + d), g));
        if (dk != NULL)
            _mm512_mask_storeu_ps(dk + d, m, _mm512_add_ps(_mm512_maskz_loadu_ps(m, dk + d), g));
        if (dv_row != NULL)
            _mm512_mask_storeu_ps(dv_row + d, m,
                                  _mm512_fmadd_ps(vde, t, _mm512_maskz_loadu_ps(m, dv_row + d)));
    }
}
