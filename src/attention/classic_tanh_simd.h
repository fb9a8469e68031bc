/* The float tanh of classic_internal.h for AVX2 and AVX-512, inline so that every kernel
 * that needs it (MLP attention scores, GRU and LSTM gates) runs the same approximation.
 * Include only from *_avx2.c / *_avx512.c files, which are compiled for those sets. */
#ifndef ATTN_CLASSIC_TANH_SIMD_H
#define ATTN_CLASSIC_TANH_SIMD_H

#include "attention/classic_internal.h"

#include <immintrin.h>

#ifdef __AVX2__
static inline __m256 attn_tanh8_avx2(__m256 x)
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
#endif

#ifdef __AVX512F__
static inline __m512 attn_tanh16_avx512(__m512 x)
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
#endif

#endif /* ATTN_CLASSIC_TANH_SIMD_H */
