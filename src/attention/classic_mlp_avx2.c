/* AVX2 MLP score v . tanh(q + k) and its backward: the float tanh of classic_internal.h,
 * 8 lanes at a time, with masked loads and stores for the tail. */
#include "attention/classic_internal.h"

#include <immintrin.h>

static __m256 tanh8(__m256 x)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 one = _mm256_set1_ps(1.0f);
    __m256 ax = _mm256_andnot_ps(sign, x);
    __m256 u = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(ATTN_TANH_P4);
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(ATTN_TANH_P3));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(ATTN_TANH_P2));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(ATTN_TANH_P1));
    p = _mm256_fmadd_ps(p, u, _mm256_set1_ps(ATTN_TANH_P0));
    __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(x, u), p, x);

    __m256 y = _mm256_min_ps(_mm256_add_ps(ax, ax), _mm256_set1_ps(ATTN_TANH_MAX_2X));
    __m256i n = _mm256_cvttps_epi32(
        _mm256_fmadd_ps(y, _mm256_set1_ps(ATTN_LOG2E), _mm256_set1_ps(0.5f)));
    __m256 nf = _mm256_cvtepi32_ps(n);
    __m256 r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(ATTN_LN2_HI), y);
    r = _mm256_fnmadd_ps(nf, _mm256_set1_ps(ATTN_LN2_LO), r);
    __m256 e = _mm256_set1_ps(1.0f / 5040.0f);
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 720.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 120.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 24.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(1.0f / 6.0f));
    e = _mm256_fmadd_ps(e, r, _mm256_set1_ps(0.5f));
    e = _mm256_fmadd_ps(e, r, one);
    e = _mm256_fmadd_ps(e, r, one);
    __m256i exponent = _mm256_slli_epi32(_mm256_add_epi32(n, _mm256_set1_epi32(127)), 23);
    e = _mm256_mul_ps(e, _mm256_castsi256_ps(exponent));
    __m256 large = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    large = _mm256_or_ps(large, _mm256_and_ps(x, sign));
    /* NaN compares false and keeps the small branch, which propagates it. */
    __m256 big = _mm256_cmp_ps(ax, _mm256_set1_ps(ATTN_TANH_SMALL), _CMP_GE_OQ);
    return _mm256_blendv_ps(small, large, big);
}

/* Lanes [0, remaining) on, the rest off, for masked loads and stores. */
static __m256i tail_mask(int64_t remaining)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int32_t count = remaining >= 8 ? 8 : (int32_t)remaining;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lanes);
}

static float horizontal_sum(__m256 x)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

float attn_classic_mlp_score_avx2(const float *q, const float *k, const float *v, int64_t n)
{
    __m256 sum = _mm256_setzero_ps();
    for (int64_t d = 0; d < n; d += 8) {
        __m256i m = tail_mask(n - d);
        __m256 t = tanh8(_mm256_add_ps(_mm256_maskload_ps(q + d, m), _mm256_maskload_ps(k + d, m)));
        sum = _mm256_fmadd_ps(_mm256_maskload_ps(v + d, m), t, sum);
    }
    return horizontal_sum(sum);
}

void attn_classic_mlp_backward_avx2(const float *q, const float *k, const float *v, float de,
                                    int64_t n, float *dq, float *dk, float *dv_row)
{
    const __m256 vde = _mm256_set1_ps(de);
    for (int64_t d = 0; d < n; d += 8) {
        __m256i m = tail_mask(n - d);
        __m256 t = tanh8(_mm256_add_ps(_mm256_maskload_ps(q + d, m), _mm256_maskload_ps(k + d, m)));
        __m256 slope = _mm256_fnmadd_ps(t, t, _mm256_set1_ps(1.0f));
        __m256 g = _mm256_mul_ps(_mm256_mul_ps(vde, _mm256_maskload_ps(v + d, m)), slope);
        _mm256_maskstore_ps(dq + d, m, _mm256_add_ps(_mm256_maskload_ps(dq + d, m), g));
        if (dk != NULL)
            _mm256_maskstore_ps(dk + d, m, _mm256_add_ps(_mm256_maskload_ps(dk + d, m), g));
        if (dv_row != NULL)
            _mm256_maskstore_ps(dv_row + d, m,
                                _mm256_fmadd_ps(vde, t, _mm256_maskload_ps(dv_row + d, m)));
    }
}
