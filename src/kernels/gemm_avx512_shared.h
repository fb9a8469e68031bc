/* What the AVX-512 GEMM files share (gemm_avx512.c for floats, gemm_avx512bf16.c for bf16
 * pairs): lane masks, the store of a row of C and the 16 x 16 transpose of 32-bit words in zmm
 * registers. Include only from files compiled for AVX-512. */
#ifndef ATTN_GEMM_AVX512_SHARED_H
#define ATTN_GEMM_AVX512_SHARED_H

#include <immintrin.h>

/* The first `live` of 16 lanes. */
static inline __mmask16 lane_mask(int live)
{
    if (live <= 0)
        return 0;
    if (live >= 16)
        return 0xFFFF;
    return (__mmask16)((1u << live) - 1u);
}

/* Writes one row of a 32-column tile: C = alpha * sum + beta * C (beta = 0: C is not read). */
static inline void store_row(float *c_row, __m512 sum_lo, __m512 sum_hi, __m512 alpha, __m512 beta,
                             int read_c, __mmask16 mask_lo, __mmask16 mask_hi)
{
    __m512 lo = _mm512_mul_ps(alpha, sum_lo);
    __m512 hi = _mm512_mul_ps(alpha, sum_hi);
    if (read_c) {
        lo = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask_lo, c_row), lo);
        hi = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask_hi, c_row + 16), hi);
    }
    _mm512_mask_storeu_ps(c_row, mask_lo, lo);
    _mm512_mask_storeu_ps(c_row + 16, mask_hi, hi);
}

/* Afterwards r[j] holds what was column j of the 16 rows r[0..15]. */
static inline __attribute__((always_inline)) void transpose_16x16(__m512 r[16])
{
    __m512 t[16];
    /* Interleave pairs of rows, then pairs of pairs: r[4g + j] then holds, in its 128-bit
     * lane L, column 4L + j of rows 4g .. 4g+3. */
#pragma GCC unroll 8
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < 16; i += 4) {
        __m512d lo_a = _mm512_castps_pd(t[i]), hi_a = _mm512_castps_pd(t[i + 1]);
        __m512d lo_b = _mm512_castps_pd(t[i + 2]), hi_b = _mm512_castps_pd(t[i + 3]);
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(lo_a, lo_b));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(lo_a, lo_b));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(hi_a, hi_b));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(hi_a, hi_b));
    }
    /* Column 4L + j is lane L of r[j], r[4 + j], r[8 + j], r[12 + j]. */
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        __m512 rows01_lo = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x44);
        __m512 rows01_hi = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xEE);
        __m512 rows23_lo = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x44);
        __m512 rows23_hi = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xEE);
        t[j] = _mm512_shuffle_f32x4(rows01_lo, rows23_lo, 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(rows01_lo, rows23_lo, 0xDD);
        t[8 + j] = _mm512_shuffle_f32x4(rows01_hi, rows23_hi, 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(rows01_hi, rows23_hi, 0xDD);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
        r[i] = t[i];
}

#endif /* ATTN_GEMM_AVX512_SHARED_H */
