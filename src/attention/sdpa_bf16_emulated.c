/* The bf16 products of the tiled attention in plain C, for CPUs (or instruction sets) without
 * AVX512_BF16: operands are rounded to bfloat16 exactly as the native kernels round them,
 * each product of two bf16 values is exact in float, and the sums accumulate in float. */
#include "attention/sdpa_internal.h"

/* Register block of C, as in sdpa_portable.c: 4 rows x 8 columns. */
enum { BLOCK_ROWS = 4, BLOCK_COLS = 8 };

static float low_half(sdpa_bf16_pair pair)
{
    return sdpa_bf16_to_float(pair & 0xffffu);
}

static float high_half(sdpa_bf16_pair pair)
{
    return sdpa_bf16_to_float(pair >> 16);
}

static void emulated_block(int64_t rows, int64_t width, int64_t pairs, const sdpa_bf16_pair *a,
                           int64_t a_row_stride, int64_t a_inner_stride, const sdpa_bf16_pair *b,
                           int64_t ldb, float *c, int64_t ldc, float alpha, sdpa_gemm_mode mode,
                           const float *row_scale)
{
    float acc[BLOCK_ROWS][BLOCK_COLS] = {{0}};
    for (int64_t p = 0; p < pairs; p++) {
        float b_low[BLOCK_COLS], b_high[BLOCK_COLS];
        for (int64_t x = 0; x < width; x++) {
            b_low[x] = low_half(b[p * ldb + x]);
            b_high[x] = high_half(b[p * ldb + x]);
        }
        for (int64_t r = 0; r < rows; r++) {
            const sdpa_bf16_pair a_pair = a[r * a_row_stride + p * a_inner_stride];
            const float a_low = low_half(a_pair), a_high = high_half(a_pair);
            for (int64_t x = 0; x < width; x++)
                acc[r][x] += a_low * b_low[x] + a_high * b_high[x];
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        float *c_row = c + r * ldc;
        for (int64_t x = 0; x < width; x++) {
            const float product = alpha * acc[r][x];
            c_row[x] = mode == SDPA_GEMM_STORE ? product
                       : mode == SDPA_GEMM_ADD ? c_row[x] + product
                                               : c_row[x] * row_scale[r] + product;
        }
    }
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

static void emulated_pack(const float *src, int64_t row_stride, int64_t col_stride, int64_t rows,
                          int64_t cols, sdpa_bf16_pair *dst, int64_t dst_row_stride,
                          int64_t dst_pair_stride)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t x = 0; x < cols; x += 2) {
            const float *first = src + r * row_stride + x * col_stride;
            const uint32_t low = sdpa_bf16_bits(first[0]);
            const uint32_t high = x + 1 < cols ? sdpa_bf16_bits(first[col_stride]) : 0u;
            dst[r * dst_row_stride + x / 2 * dst_pair_stride] = low | high << 16;
        }
}

const sdpa_bf16_kernels attn_sdpa_bf16_kernels_emulated = {emulated_gemm, emulated_pack};
