/* The int8 tile of quantized_rows.h on AVX512_VNNI (this file name selects -mavx512vnni):
 * vpdpbusd adds four products of a row's unsigned bytes and a weight's signed bytes into
 * each int32 lane, sixteen outputs per vector. */
#include "kernels/quantized_rows.h"

#include <immintrin.h>

/* The tile's four vectors of outputs: a pass of n rows keeps 4n
 * accumulators, 16 of the 32 registers at four rows. */
enum { VECTORS = QUANTIZED_TILE / 16 };

static inline __attribute__((always_inline)) void int8_rows(const attn_quantized_matrix *w,
                                                            const quantized_rows *x, int64_t r0,
                                                            const int n, int64_t tile,
                                                            const float *b, float *y, int64_t ldy)
{
    const uint32_t *packed = w->packed + tile * w->groups * QUANTIZED_TILE;
    __m512i acc[QUANTIZED_ROWS_PER_PASS][VECTORS];
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
        _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++) acc[r][v] =
            _mm512_setzero_si512();
    const uint32_t *rows = x->x + r0 * w->groups;
    for (int64_t g = 0; g < w->groups; g++) {
        __m512i wv[VECTORS];
        _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++) wv[v] =
            _mm512_load_si512((const void *)(packed + g * QUANTIZED_TILE + 16 * v));
        _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
        {
            const __m512i xr = _mm512_set1_epi32((int)rows[r * w->groups + g]);
            _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++) acc[r][v] =
                _mm512_dpbusd_epi32(acc[r][v], xr, wv[v]);
        }
    }
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
    {
        int32_t sums[QUANTIZED_TILE];
        _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++)
            _mm512_storeu_si512((void *)(sums + 16 * v), acc[r][v]);
        attn_int8_finish(w, sums, x->x_scale[r0 + r], x->x_zero[r0 + r], b, o0, width,
                         y + (r0 + r) * ldy);
    }
}

void attn_int8_quantize_row_avx512vnni(const float *x, int64_t in, int64_t groups, uint32_t *packed,
                                       float *scale, int32_t *zero)
{
    __m512 lowest = _mm512_setzero_ps(), largest = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= in; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        lowest = _mm512_min_ps(lowest, v);
        largest = _mm512_max_ps(largest, _mm512_abs_ps(v));
    }
    if (i < in) {
        const __mmask16 m = (__mmask16)((1u << (in - i)) - 1u);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        lowest = _mm512_min_ps(lowest, v);
        largest = _mm512_max_ps(largest, _mm512_abs_ps(v));
    }
    *zero = attn_int8_row_scale(_mm512_reduce_min_ps(lowest), _mm512_reduce_max_ps(largest), scale);
    const float levels = *zero ? 127.0f : 255.0f;
    const __m512 inverse = _mm512_set1_ps(1.0f / *scale), high = _mm512_set1_ps(levels),
                 low = _mm512_set1_ps(-levels);
    const __m512i shift = _mm512_set1_epi32(*zero);
    uint8_t *bytes = (uint8_t *)packed;
    for (i = 0; i < in; i += 16) {
        const __mmask16 m = (__mmask16)(in - i >= 16 ? 0xffffu : (1u << (in - i)) - 1u);
        __m512 q = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), inverse),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm512_min_ps(_mm512_max_ps(q, low), high);
        _mm_mask_storeu_epi8(bytes + i, m,
                             _mm512_cvtepi32_epi8(_mm512_add_epi32(_mm512_cvtps_epi32(q), shift)));
    }
    memset(bytes + in, 0, (size_t)(groups * 4 - in));
}

void attn_int8_tile_avx512vnni(const attn_quantized_matrix *w, const quantized_rows *x,
                               int64_t rows, int64_t tile, const float *b, float *y, int64_t ldy)
{
    QUANTIZED_ROW_PASSES(int8_rows, w, x, rows, tile, b, y, ldy);
}
