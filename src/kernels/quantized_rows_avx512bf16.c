/* The bf16 tile of quantized_rows.h on AVX512_BF16 (this file name selects -mavx512bf16):
 * vdpbf16ps adds two products of a row's bf16 pair and a weight's into each fp32 lane,
 * sixteen outputs per vector. */
#include "kernels/quantized_rows.h"

#include <immintrin.h>

/* The tile's four vectors of outputs, as in the int8 tile: 4n accumulators for n rows. */
enum { VECTORS = QUANTIZED_TILE / 16 };

static inline __attribute__((always_inline)) void bf16_rows(const attn_quantized_matrix *w,
                                                            const quantized_rows *x, int64_t r0,
                                                            const int n, int64_t tile,
                                                            const float *b, float *y, int64_t ldy)
{
    const uint32_t *packed = w->packed + tile * w->groups * QUANTIZED_TILE;
    __m512 acc[QUANTIZED_ROWS_PER_PASS][VECTORS];
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
        _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++) acc[r][v] = _mm512_setzero_ps();
    const uint32_t *rows = x->x + r0 * w->groups;
    for (int64_t g = 0; g < w->groups; g++) {
        __m512bh wv[VECTORS];
        _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++) wv[v] =
            (__m512bh)_mm512_load_si512((const void *)(packed + g * QUANTIZED_TILE + 16 * v));
        _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
        {
            const __m512bh xr = (__m512bh)_mm512_set1_epi32((int)rows[r * w->groups + g]);
            _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++) acc[r][v] =
                _mm512_dpbf16_ps(acc[r][v], xr, wv[v]);
        }
    }
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
    {
        float sums[QUANTIZED_TILE];
        _Pragma("GCC unroll 4") for (int v = 0; v < VECTORS; v++)
            _mm512_storeu_ps(sums + 16 * v, acc[r][v]);
        attn_bf16_finish(sums, b, o0, width, y + (r0 + r) * ldy);
    }
}

void attn_bf16_tile_avx512bf16(const attn_quantized_matrix *w, const quantized_rows *x,
                               int64_t rows, int64_t tile, const float *b, float *y, int64_t ldy)
{
    QUANTIZED_ROW_PASSES(bf16_rows, w, x, rows, tile, b, y, ldy);
}
