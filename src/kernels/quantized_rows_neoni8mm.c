/* int8 rows by SMMLA (FEAT_I8MM), for pairs of rows: neon-dotprod and neon-bf16 enter it
 * where the CPU also has I8MM. SMMLA multiplies a 2 x 8 block of signed bytes by the
 * transpose of another, adding a 2 x 2 block of int32: two rows by two outputs over eight
 * inputs, 32 multiply-adds where SDOT does 16, so two rows cost what one costs with SDOT. The
 * activation bytes are flipped to signed and corrected by 128 row_sum exactly as in
 * quantized_rows_neondot.c (whose reasoning this file shares); a last odd row goes there.
 *
 * Operands: a row pair's two groups g, g + 1 (8 bytes each) side by side are one vector;
 * the weights' tile holds, per group, four outputs in a vector, so two groups' vectors zipped
 * by 32-bit words give outputs o, o + 1 (zip1) and o + 2, o + 3 (zip2), each over 8 inputs.
 * A block of two row pairs by sixteen outputs keeps 16 accumulators (each 2 x 2), 8 zipped
 * weight vectors and 2 row-pair vectors in 26 of the 32 vector registers: 16 SMMLAs per
 * 8 weight loads and 8 zips. */
#include "kernels/quantized_rows.h"

#include <arm_neon.h>

enum { PAIRS_PER_BLOCK = 2, BLOCK_OUTPUTS = 16, VECTOR_OUTPUTS = 4 };

static inline int8x16_t as_signed_bytes(uint8x16_t unsigned_bytes)
{
    return vreinterpretq_s8_u8(veorq_u8(unsigned_bytes, vdupq_n_u8(0x80)));
}

/* Groups g and g + 1 of rows r and r + 1, or group g alone (next: 0) with zero weights
 * standing in for the missing group. */
static inline int8x16_t row_pair(const uint32_t *row, const uint32_t *next_row, int64_t g,
                                 int both)
{
    if (both)
        return as_signed_bytes(vreinterpretq_u8_u32(
            vcombine_u32(vld1_u32(row + g), vld1_u32(next_row + g))));
    const uint32_t words[4] = {row[g], 0, next_row[g], 0};
    return as_signed_bytes(vreinterpretq_u8_u32(vld1q_u32(words)));
}

static void pair_block(int pairs, const attn_quantized_matrix *w, const uint32_t *tile_words,
                       const quantized_rows *x, int64_t row0, int64_t first, int64_t o0,
                       int64_t width, const float *b, float *y, int64_t ldy)
{
    const int64_t groups = w->groups;
    /* acc[p][k]: rows row0 + 2p, + 1 by outputs first + 2k, + 1 */
    int32x4_t acc[PAIRS_PER_BLOCK][BLOCK_OUTPUTS / 2];
    for (int p = 0; p < PAIRS_PER_BLOCK; p++)
        for (int k = 0; k < BLOCK_OUTPUTS / 2; k++)
            acc[p][k] = vdupq_n_s32(0);
    const uint32_t *weights = tile_words + first;
    const uint32x4_t zero = vdupq_n_u32(0);
    for (int64_t g = 0; g < groups; g += 2) {
        const int both = g + 1 < groups;
        int8x16_t wv[BLOCK_OUTPUTS / 2];
#pragma GCC unroll 4
        for (int v = 0; v < BLOCK_OUTPUTS / VECTOR_OUTPUTS; v++) {
            const uint32x4_t w0 = vld1q_u32(weights + g * QUANTIZED_TILE + v * VECTOR_OUTPUTS);
            const uint32x4_t w1 =
                both ? vld1q_u32(weights + (g + 1) * QUANTIZED_TILE + v * VECTOR_OUTPUTS) : zero;
            wv[2 * v] = vreinterpretq_s8_u32(vzip1q_u32(w0, w1));
            wv[2 * v + 1] = vreinterpretq_s8_u32(vzip2q_u32(w0, w1));
        }
#pragma GCC unroll 2
        for (int p = 0; p < PAIRS_PER_BLOCK; p++) {
            if (p >= pairs)
                break;
            const uint32_t *row = x->x + (row0 + 2 * p) * groups;
            const int8x16_t xv = row_pair(row, row + groups, g, both);
#pragma GCC unroll 8
            for (int k = 0; k < BLOCK_OUTPUTS / 2; k++)
                acc[p][k] = vmmlaq_s32(acc[p][k], xv, wv[k]);
        }
    }
    for (int p = 0; p < pairs; p++) {
        int32_t sums[2][BLOCK_OUTPUTS];
        for (int k = 0; k < BLOCK_OUTPUTS / 4; k++) {
            /* [r o, r o+1, r+1 o, r+1 o+1] and the same for o + 2, o + 3: rows by 64-bit halves */
            const int64x2_t low = vreinterpretq_s64_s32(acc[p][2 * k]);
            const int64x2_t high = vreinterpretq_s64_s32(acc[p][2 * k + 1]);
            vst1q_s32(sums[0] + 4 * k, vreinterpretq_s32_s64(vzip1q_s64(low, high)));
            vst1q_s32(sums[1] + 4 * k, vreinterpretq_s32_s64(vzip2q_s64(low, high)));
        }
        const int64_t o = o0 + first;
        const int64_t count = width - first < BLOCK_OUTPUTS ? width - first : BLOCK_OUTPUTS;
        for (int half = 0; half < 2; half++) {
            const int64_t row = row0 + 2 * p + half;
            for (int64_t j = 0; j < count; j++)
                sums[half][j] = (int32_t)((uint32_t)sums[half][j] + 128u * (uint32_t)w->row_sum[o + j]);
            attn_int8_finish(w, sums[half], x->x_scale[row], x->x_zero[row], b, o, count,
                             y + row * ldy);
        }
    }
}

void attn_int8_tile_neoni8mm(const attn_quantized_matrix *w, const quantized_rows *x,
                             int64_t rows, int64_t tile, const float *b, float *y, int64_t ldy)
{
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    const uint32_t *tile_words = w->packed + tile * w->groups * QUANTIZED_TILE;
    const int64_t paired_rows = rows & ~(int64_t)1;
    for (int64_t r = 0; r < paired_rows; r += 2 * PAIRS_PER_BLOCK) {
        const int pairs = paired_rows - r >= 2 * PAIRS_PER_BLOCK ? PAIRS_PER_BLOCK : 1;
        for (int64_t first = 0; first < width; first += BLOCK_OUTPUTS)
            pair_block(pairs, w, tile_words, x, r, first, o0, width, b, y, ldy);
    }
    if (paired_rows < rows)
        attn_int8_rows_neondot(w, x, paired_rows, rows, tile, b, y, ldy);
}
