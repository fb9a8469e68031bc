/* int8 rows on AArch64's dot product (FEAT_DotProd, SDOT; entered under neon-dotprod and
 * neon-bf16 only). quantized_rows.h's encoding multiplies unsigned activation bytes u by
 * signed weights q, as x86's vpdpbusd does; SDOT multiplies signed by signed. Flipping the top
 * bit of u gives the signed byte u - 128, so
 *   sum u q = sum (u - 128) q + 128 row_sum,
 * where row_sum = sum q is stored with the matrix. Both sums are exact in int32 (wrapping, as
 * the vector lanes do, cannot change a total that fits), so every path gives the reference's
 * integers and, through attn_int8_finish, its bits.
 *
 * W's tile is [groups][64 outputs] words of four consecutive inputs: four outputs of one group
 * are one 16-byte vector, the a operand of SDOT, and a row's four groups are one vector whose
 * 32-bit lanes SDOT's by-element form reads in turn. A block of four rows by sixteen outputs
 * keeps 16 accumulators, 4 weight vectors and 4 activation vectors in 24 of AArch64's 32
 * vector registers: 16 SDOTs per 4 loads of weights, each weight vector used by four rows.
 * A row alone (a decoder's batch of one) runs all 64 outputs at once instead, 16
 * independent accumulators, so SDOT's latency is hidden by the other outputs. */
#include "kernels/quantized_rows.h"

#include <arm_neon.h>

enum { BLOCK_ROWS = 4, BLOCK_OUTPUTS = 16, VECTOR_OUTPUTS = 4 };

static inline int8x16_t as_signed_bytes(uint32x4_t unsigned_bytes)
{
    return vreinterpretq_s8_u8(veorq_u8(vreinterpretq_u8_u32(unsigned_bytes), vdupq_n_u8(0x80)));
}

/* The sums of u q from those of (u - 128) q, in the wrapping arithmetic of the lanes. */
static void unflip_and_finish(const attn_quantized_matrix *w, int32_t *sums, int64_t o,
                              int64_t count, float x_scale, int32_t x_zero, const float *b,
                              float *y_row)
{
    for (int64_t j = 0; j < count; j++)
        sums[j] = (int32_t)((uint32_t)sums[j] + 128u * (uint32_t)w->row_sum[o + j]);
    attn_int8_finish(w, sums, x_scale, x_zero, b, o, count, y_row);
}

/* row_count rows (from x_rows) by vectors * 4 outputs starting at column `first` of the tile. */
static inline __attribute__((always_inline)) void
dot_block(const int row_count, const int vectors, const attn_quantized_matrix *w,
          const uint32_t *tile_words, const quantized_rows *x, int64_t row0, int64_t first,
          int64_t o0, int64_t width, const float *b, float *y, int64_t ldy)
{
    const int64_t groups = w->groups;
    int32x4_t acc[BLOCK_ROWS][QUANTIZED_TILE / VECTOR_OUTPUTS];
#pragma GCC unroll 4
    for (int r = 0; r < row_count; r++)
#pragma GCC unroll 16
        for (int v = 0; v < vectors; v++)
            acc[r][v] = vdupq_n_s32(0);
    const uint32_t *weights = tile_words + first;
    int64_t g = 0;
    for (; g + 4 <= groups; g += 4) {
        int8x16_t xv[BLOCK_ROWS];
#pragma GCC unroll 4
        for (int r = 0; r < row_count; r++)
            xv[r] = as_signed_bytes(vld1q_u32(x->x + (row0 + r) * groups + g));
#define DOT_LANE(lane)                                                                            \
    _Pragma("GCC unroll 16") for (int v = 0; v < vectors; v++)                                    \
    {                                                                                             \
        const int8x16_t wv = vreinterpretq_s8_u32(                                                \
            vld1q_u32(weights + (g + lane) * QUANTIZED_TILE + v * VECTOR_OUTPUTS));               \
        _Pragma("GCC unroll 4") for (int r = 0; r < row_count; r++) acc[r][v] =                   \
            vdotq_laneq_s32(acc[r][v], wv, xv[r], lane);                                          \
    }
        DOT_LANE(0)
        DOT_LANE(1)
        DOT_LANE(2)
        DOT_LANE(3)
#undef DOT_LANE
    }
    for (; g < groups; g++) {
#pragma GCC unroll 16
        for (int v = 0; v < vectors; v++) {
            const int8x16_t wv = vreinterpretq_s8_u32(
                vld1q_u32(weights + g * QUANTIZED_TILE + v * VECTOR_OUTPUTS));
#pragma GCC unroll 4
            for (int r = 0; r < row_count; r++)
                acc[r][v] = vdotq_s32(acc[r][v], wv,
                                      as_signed_bytes(vdupq_n_u32(x->x[(row0 + r) * groups + g])));
        }
    }
    const int64_t count =
        width - first < vectors * VECTOR_OUTPUTS ? width - first : vectors * VECTOR_OUTPUTS;
#pragma GCC unroll 4
    for (int r = 0; r < row_count; r++) {
        const int64_t row = row0 + r;
        int32_t sums[QUANTIZED_TILE];
#pragma GCC unroll 16
        for (int v = 0; v < vectors; v++)
            vst1q_s32(sums + v * VECTOR_OUTPUTS, acc[r][v]);
        unflip_and_finish(w, sums, o0 + first, count, x->x_scale[row], x->x_zero[row], b,
                          y + row * ldy);
    }
}

void attn_int8_rows_neondot(const attn_quantized_matrix *w, const quantized_rows *x,
                            int64_t row_begin, int64_t row_end, int64_t tile, const float *b,
                            float *y, int64_t ldy)
{
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    const uint32_t *tile_words = w->packed + tile * w->groups * QUANTIZED_TILE;
    int64_t r = row_begin;
    for (; r + BLOCK_ROWS <= row_end; r += BLOCK_ROWS)
        for (int64_t first = 0; first < width; first += BLOCK_OUTPUTS)
            dot_block(BLOCK_ROWS, BLOCK_OUTPUTS / VECTOR_OUTPUTS, w, tile_words, x, r, first, o0,
                      width, b, y, ldy);
    for (; r < row_end; r++)
        dot_block(1, QUANTIZED_TILE / VECTOR_OUTPUTS, w, tile_words, x, r, 0, o0, width, b, y,
                  ldy);
}

void attn_int8_tile_neondot(const attn_quantized_matrix *w, const quantized_rows *x,
                            int64_t rows, int64_t tile, const float *b, float *y, int64_t ldy)
{
    attn_int8_rows_neondot(w, x, 0, rows, tile, b, y, ldy);
}
