/* The bf16 products of the tiled attention in plain C, for CPUs (or instruction sets) without
 * AVX512_BF16: operands are rounded to bfloat16 exactly as the native kernels round them,
 * each product of two bf16 values is exact in float, and the sums accumulate in float.
 * Written once and compiled three times, for the baseline (sdpa_bf16_emulated.c), AVX2 and
 * AVX-512 (sdpa_bf16_emulated_avx2.c, _avx512.c), whose compilers vectorise the same loops
 * wider. They define first:
 *   BF16_EMULATED_NAME         the sdpa_bf16_kernels table to define
 *   BF16_EMULATED_BLOCK_COLS   columns of the register block (one or two vectors)
 * and may define BF16_NATIVE_GEMM, a gemm of the hardware's own (sdpa_neonbf16.c's BFDOT),
 * which then replaces the emulated one while the rounding, packing and softmax stay these. */
#include "attention/sdpa_internal.h"

#include <math.h>

#ifndef BF16_NATIVE_GEMM
static float low_half(sdpa_bf16_pair pair)
{
    return attn_bf16_to_float((uint16_t)(pair & 0xffffu));
}

static float high_half(sdpa_bf16_pair pair)
{
    return attn_bf16_to_float((uint16_t)(pair >> 16));
}

enum { BLOCK_ROWS = 4, BLOCK_COLS = BF16_EMULATED_BLOCK_COLS };

static void emulated_block(int64_t rows, int64_t width, int64_t pairs, const sdpa_bf16_pair *a,
                           int64_t a_row_stride, int64_t a_inner_stride, const sdpa_bf16_pair *b,
                           int64_t ldb, float *c, int64_t ldc, float alpha, sdpa_gemm_mode mode,
                           const float *row_scale)
{
    float acc[BLOCK_ROWS][BLOCK_COLS] = {{0}};
    /* Full blocks take fixed-size loops the compiler unrolls and vectorises; B's lanes past
     * width are zero (not read from memory) in partial blocks. */
    const int64_t block_rows = rows == BLOCK_ROWS && width == BLOCK_COLS ? BLOCK_ROWS : rows;
    for (int64_t p = 0; p < pairs; p++) {
        float b_low[BLOCK_COLS] = {0}, b_high[BLOCK_COLS] = {0};
        for (int64_t x = 0; x < width; x++) {
            b_low[x] = low_half(b[p * ldb + x]);
            b_high[x] = high_half(b[p * ldb + x]);
        }
        for (int64_t r = 0; r < block_rows; r++) {
            const sdpa_bf16_pair a_pair = a[r * a_row_stride + p * a_inner_stride];
            const float a_low = low_half(a_pair), a_high = high_half(a_pair);
            for (int x = 0; x < BLOCK_COLS; x++)
                acc[r][x] += a_low * b_low[x] + a_high * b_high[x];
        }
    }
    for (int64_t r = 0; r < rows; r++)
        sdpa_bf16_combine_row(c + r * ldc, acc[r], width, alpha, mode,
                              row_scale != NULL ? row_scale[r] : 0.0f);
}

static void emulated_gemm(int64_t m, int64_t n, int64_t pairs, const sdpa_bf16_pair *a,
                          int64_t a_row_stride, int64_t a_inner_stride, const sdpa_bf16_pair *b,
                          int64_t ldb, float *c, int64_t ldc, float alpha, sdpa_gemm_mode mode,
                          const float *row_scale)
{
    for (int64_t n0 = 0; n0 < n; n0 += BLOCK_COLS) {
        const int64_t width = n - n0 < BLOCK_COLS ? n - n0 : BLOCK_COLS;
        for (int64_t r0 = 0; r0 < m; r0 += BLOCK_ROWS)
            emulated_block(m - r0 < BLOCK_ROWS ? m - r0 : BLOCK_ROWS, width, pairs,
                           a + r0 * a_row_stride, a_row_stride, a_inner_stride, b + n0, ldb,
                           c + r0 * ldc + n0, ldc, alpha, mode,
                           row_scale != NULL ? row_scale + r0 : NULL);
    }
}
#define BF16_NATIVE_GEMM emulated_gemm
#endif

static void emulated_pack(const float *src, int64_t row_stride, int64_t col_stride, int64_t rows,
                          int64_t cols, sdpa_bf16_pair *dst, int64_t dst_row_stride,
                          int64_t dst_pair_stride)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t x = 0; x < cols; x += 2) {
            const float *first = src + r * row_stride + x * col_stride;
            const uint32_t low = attn_bf16_from_float(first[0]);
            const uint32_t high = x + 1 < cols ? attn_bf16_from_float(first[col_stride]) : 0u;
            dst[r * dst_row_stride + x / 2 * dst_pair_stride] = low | high << 16;
        }
}

static sdpa_bf16_pair pair_of(float low, float high)
{
    return (uint32_t)attn_bf16_from_float(low) | (uint32_t)attn_bf16_from_float(high) << 16;
}

static void emulated_softmax_columns(const float *scores, int64_t rows, int64_t cols, int64_t ld,
                                     float *running_max, float *running_sum, float *rescale,
                                     sdpa_bf16_pair *prob_pairs)
{
    for (int64_t c = 0; c < cols; c++) {
        float tile_max = -INFINITY;
        for (int64_t r = 0; r < rows; r++)
            tile_max = scores[r * ld + c] > tile_max ? scores[r * ld + c] : tile_max;
        const float new_max = running_max[c] > tile_max ? running_max[c] : tile_max;
        /* A column with nothing unmasked yet subtracts 0, so 2^(-inf - 0) = 0, not NaN. */
        const float shift = new_max == -INFINITY ? 0.0f : new_max;
        rescale[c] = exp2f(running_max[c] - shift);
        float sum = 0;
        for (int64_t r = 0; r < rows; r += 2) {
            const float low = exp2f(scores[r * ld + c] - shift);
            const float high = r + 1 < rows ? exp2f(scores[(r + 1) * ld + c] - shift) : 0.0f;
            sum += low + high;
            prob_pairs[r / 2 * ld + c] = pair_of(low, high);
        }
        running_sum[c] = running_sum[c] * rescale[c] + sum;
        running_max[c] = new_max;
    }
}

static void emulated_softmax_grad_rows(const float *scores, const float *grad, int64_t rows,
                                       int64_t cols, int64_t ld, const float *lse,
                                       const float *delta, float scale, sdpa_bf16_pair *prob_pairs,
                                       sdpa_bf16_pair *grad_pairs, sdpa_bf16_pair *grad_rows,
                                       int64_t grad_rows_stride)
{
    enum { MAX_COLS = 64 };
    for (int64_t r = 0; r < rows; r += 2) {
        float probs[2][MAX_COLS], grads[2][MAX_COLS];
        for (int64_t k = 0; k < 2; k++)
            for (int64_t c = 0; c < cols; c++) {
                const int64_t row = r + k;
                /* A fully masked query (lse -inf) and the padding row give zeros. */
                const int live = row < rows && lse[row] != -INFINITY;
                const float prob = live ? exp2f(scores[row * ld + c] - lse[row]) : 0.0f;
                probs[k][c] = prob;
                grads[k][c] = live ? prob * (grad[row * ld + c] - delta[row]) * scale : 0.0f;
            }
        for (int64_t c = 0; c < cols; c++) {
            prob_pairs[r / 2 * ld + c] = pair_of(probs[0][c], probs[1][c]);
            grad_pairs[r / 2 * ld + c] = pair_of(grads[0][c], grads[1][c]);
        }
        for (int64_t k = 0; k < 2 && r + k < rows; k++)
            for (int64_t c = 0; c < cols; c += 2)
                grad_rows[(r + k) * grad_rows_stride + c / 2] =
                    pair_of(grads[k][c], c + 1 < cols ? grads[k][c + 1] : 0.0f);
    }
}

const sdpa_bf16_kernels BF16_EMULATED_NAME = {BF16_NATIVE_GEMM, emulated_pack,
                                              emulated_softmax_columns, emulated_softmax_grad_rows};
