/* The portable GEMM micro-kernel: plain C written so that the compiler keeps the tile of
 * sums in vector registers (fixed trip counts, unrolled, contiguous inner loop over the
 * tile's columns). It serves ATTN_ISA_PORTABLE through the shared blocked driver. */
#include "kernels/gemm_internal.h"

#define PORTABLE_MR 4
#define PORTABLE_NR 16

static void portable_micro_kernel(int64_t depth, const float *restrict a_panel,
                                  const float *restrict b_panel, float *restrict c, int64_t ldc,
                                  float alpha, float beta, int rows, int cols)
{
    float sum[PORTABLE_MR][PORTABLE_NR] = {{0}};
    for (int64_t p = 0; p < depth; p++) {
        const float *a_step = a_panel + p * PORTABLE_MR;
        const float *b_step = b_panel + p * PORTABLE_NR;
#pragma GCC unroll 16
        for (int r = 0; r < PORTABLE_MR; r++)
#pragma GCC unroll 16
            for (int j = 0; j < PORTABLE_NR; j++)
                sum[r][j] += a_step[r] * b_step[j];
    }
    for (int r = 0; r < rows; r++) {
        float *c_row = c + r * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < cols; j++)
                c_row[j] = alpha * sum[r][j];
        else
            for (int j = 0; j < cols; j++)
                c_row[j] = alpha * sum[r][j] + beta * c_row[j];
    }
}

const gemm_kernel_info attn_gemm_portable_kernel = {
    .mr = PORTABLE_MR, .nr = PORTABLE_NR, .max_depth = 256, .kernel = portable_micro_kernel};
