/* AVX2 MLP score v . tanh(q + k) and its backward: the float tanh of classic_internal.h,
 * 8 lanes at a time, with masked loads and stores for the tail. */
#include "attention/classic_tanh_simd.h"

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
        __m256 t = attn_tanh8_avx2(_mm256_add_ps(_mm256_maskload_ps(q + d, m), _mm256_maskload_ps(k + d, m)));
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
        __m256 t = attn_tanh8_avx2(_mm256_add_ps(_mm256_maskload_ps(q + d, m), _mm256_maskload_ps(k + d, m)));
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
