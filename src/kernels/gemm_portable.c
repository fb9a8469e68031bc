/* The portable GEMM micro-kernel: plain C written so that the compiler keeps the tile of
 * sums in vector registers (fixed trip counts, unrolled, contiguous inner loop over the
 * tile's columns). It serves ATTN_ISA_PORTABLE through the shared blocked driver. */
#include "kernels/gemm_internal.h"

#define PORTABLE_MR 4
#define PORTABLE_NR 16

static void portable_micro_kernel(int64_t depth, const gemm_tile *t, float alpha,
                                  float beta)
{
    float sum[PORTABLE_MR][PORTABLE_NR] = {{0}};
    const float *a = t->a, *b = t->b;
    const int64_t a_row_stride = t->a_row_stride;
    for (int64_t p = 0; p < depth; p++) {
#pragma GCC unroll 16
        for (int r = 0; r < PORTABLE_MR; r++)
#pragma GCC unroll 16
            for (int j = 0; j < PORTABLE_NR; j++)
                sum[r][j] += a[r * a_row_stride] * b[j];
        a += t->a_step_stride;
        b += t->b_step_stride;
    }
    for (int r = 0; r < t->rows; r++) {
        float *c_row = t->c + r * t->ldc;
        if (beta == 0.0f)
            for (int j = 0; j < t->cols; j++)
                c_row[j] = alpha * sum[r][j];
        else
            for (int j = 0; j < t->cols; j++)
                c_row[j] = alpha * sum[r][j] + beta * c_row[j];
    }
}

const gemm_kernel_info attn_gemm_portable_kernel = {
    .mr = PORTABLE_MR, .nr = PORTABLE_NR, .max_depth = 256, .kernel = portable_micro_kernel};
