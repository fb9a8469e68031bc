/* AVX-512 MLP score v . tanh(q + k) and its backward: the float tanh of
 * classic_internal.h, 16 lanes at a time, with masked loads for the tail. */
#include "attention/classic_internal.h"

#include <immintrin.h>

static __m512 tanh16(__m512 x)
{
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 ax = _mm512_andnot_ps(sign, x);
    __m512 u = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(ATTN_TANH_P4);
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(ATTN_TANH_P3));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(ATTN_TANH_P2));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(ATTN_TANH_P1));
    p = _mm512_fmadd_ps(p, u, _mm512_set1_ps(ATTN_TANH_P0));
    __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(x, u), p, x);

    __m512 y = _mm512_min_ps(_mm512_add_ps(ax, ax), _mm512_set1_ps(ATTN_TANH_MAX_2X));
    __m512i n = _mm512_cvttps_epi32(
        _mm512_fmadd_ps(y, _mm512_set1_ps(ATTN_LOG2E), _mm512_set1_ps(0.5f)));
    __m512 nf = _mm512_cvtepi32_ps(n);
    __m512 r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(ATTN_LN2_HI), y);
    r = _mm512_fnmadd_ps(nf, _mm512_set1_ps(ATTN_LN2_LO), r);
    __m512 e = _mm512_set1_ps(1.0f / 5040.0f);
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 720.0f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 120.0f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 24.0f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.0f / 6.0f));
    e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(0.5f));
    e = _mm512_fmadd_ps(e, r, one);
    e = _mm512_fmadd_ps(e, r, one);
    __m512i exponent = _mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23);
    e = _mm512_mul_ps(e, _mm512_castsi512_ps(exponent));
    __m512 large = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    large = _mm512_or_ps(large, _mm512_and_ps(x, sign));
    /* NaN compares false and keeps the small branch, which propagates it. */
    __mmask16 big = _mm512_cmp_ps_mask(ax, _mm512_set1_ps(ATTN_TANH_SMALL), _CMP_GE_OQ);
    return _mm512_mask_blend_ps(big, small, large);
}

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
        __m512 t = tanh16(_mm512_add_ps(_mm512_maskz_loadu_ps(m, q + d),
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
        __m512 t = tanh16(_mm512_add_ps(_mm512_maskz_loadu_ps(m, q + d),
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
