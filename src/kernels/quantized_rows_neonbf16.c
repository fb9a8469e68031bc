/* bf16 rows by BFDOT (FEAT_BF16; entered under neon-bf16 only). A group is two consecutive
 * inputs in one 32-bit word, the pair BFDOT multiplies per lane, so the weights' tile
 * ([groups][64 outputs], quantized_rows.h) gives four outputs of a group per vector and a
 * row's four groups one vector, read lane by lane, as in the int8 SDOT file
 * (quantized_rows_neondot.c), whose register blocking this one shares: four rows by sixteen
 * outputs in 16 accumulators, 4 weight and 4 activation vectors, 24 of AArch64's 32 vector
 * registers; a row alone takes all 64 outputs in 16 accumulators.
 *
 * Every row goes through the same operations in the same order whichever block it is in, so
 * a row alone gives the bits it has among others. BFDOT rounds its pair sums and
 * accumulation to odd and flushes subnormals (without FEAT_EBF16), so its bits are not the
 * emulation's; tests/kernels/test_quantized_rows.c holds it to the accuracy rule against
 * float64, as it holds vdpbf16ps. BFMMLA, two rows by two outputs over four inputs, would need
 * the weights regrouped by four inputs; not used yet. */
#include "kernels/quantized_rows.h"

#include <arm_neon.h>

enum { BLOCK_ROWS = 4, BLOCK_OUTPUTS = 16, VECTOR_OUTPUTS = 4 };

static inline bfloat16x8_t as_pairs(uint32x4_t words)
{
    return vreinterpretq_bf16_u32(words);
}

static inline __attribute__((always_inline)) void
bfdot_block(const int row_count, const int vectors, const attn_quantized_matrix *w,
            const uint32_t *tile_words, const quantized_rows *x, int64_t row0, int64_t first,
            int64_t o0, int64_t width, const float *b, float *y, int64_t ldy)
{
    const int64_t groups = w->groups;
    float32x4_t acc[BLOCK_ROWS][QUANTIZED_TILE / VECTOR_OUTPUTS];
#pragma GCC unroll 4
    for (int r = 0; r < row_count; r++)
#pragma GCC unroll 16
        for (int v = 0; v < vectors; v++)
            acc[r][v] = vdupq_n_f32(0.0f);
    const uint32_t *weights = tile_words + first;
    int64_t g = 0;
    for (; g + 4 <= groups; g += 4) {
        bfloat16x8_t xv[BLOCK_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < row_count; r++)
            xv[r] = as_pairs(vld1q_u32(x->x + (row0 + r) * groups + g));
#define BFDOT_LANE(lane)                                                                          \
    _Pragma("GCC unroll 16") for (int v = 0; v < vectors; v++)                                    \
    {                                                                                             \
        const bfloat16x8_t wv =                                                                   \
            as_pairs(vld1q_u32(weights + (g + lane) * QUANTIZED_TILE + v * VECTOR_OUTPUTS));      \
        _Pragma("GCC unroll 4") for (int r = 0; r < row_count; r++) acc[r][v] =                   \
            vbfdotq_laneq_f32(acc[r][v], wv, xv[r], lane);                                        \
    }
        BFDOT_LANE(0)
        BFDOT_LANE(1)
        BFDOT_LANE(2)
        BFDOT_LANE(3)
#undef BFDOT_LANE
    }
    for (; g < groups; g++) {
#pragma GCC unroll 16
        for (int v = 0; v < vectors; v++) {
            const bfloat16x8_t wv =
                as_pairs(vld1q_u32(weights + g * QUANTIZED_TILE + v * VECTOR_OUTPUTS));
#pragma GCC unroll 4
            for (int r = 0; r < row_count; r++)
                acc[r][v] = vbfdotq_f32(acc[r][v], wv,
                                        as_pairs(vdupq_n_u32(x->x[(row0 + r) * groups + g])));
        }
    }
    const int64_t count =
        width - first < vectors * VECTOR_OUTPUTS ? width - first : vectors * VECTOR_OUTPUTS;
#pragma GCC unroll 4
    for (int r = 0; r < row_count; r++) {
        float sums[QUANTIZED_TILE];
#pragma GCC unroll 16
        for (int v = 0; v < vectors; v++)
            vst1q_f32(sums + v * VECTOR_OUTPUTS, acc[r][v]);
        attn_bf16_finish(sums, b, o0 + first, count, y + (row0 + r) * ldy);
    }
}

void attn_bf16_tile_neonbf16(const attn_quantized_matrix *w, const quantized_rows *x,
                             int64_t rows, int64_t tile, const float *b, float *y, int64_t ldy)
{
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    const uint32_t *tile_words = w->packed + tile * w->groups * QUANTIZED_TILE;
    int64_t r = 0;
    for (; r + BLOCK_ROWS <= rows; r += BLOCK_ROWS)
        for (int64_t first = 0; first < width; first += BLOCK_OUTPUTS)
            bfdot_block(BLOCK_ROWS, BLOCK_OUTPUTS / VECTOR_OUTPUTS, w, tile_words, x, r, first, o0,
                        width, b, y, ldy);
    for (; r < rows; r++)
        bfdot_block(1, QUANTIZED_TILE / VECTOR_OUTPUTS, w, tile_words, x, r, 0, o0, width, b, y,
                    ldy);
}
