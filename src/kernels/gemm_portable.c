/* The portable GEMM micro-kernel: plain C written so that the compiler keeps the tile of
 * sums in vector registers: fixed trip counts, the rows unrolled and the innermost loop
 * over the tile's contiguous columns, which the compiler vectorises. (Unrolling the
 * column loop too leaves the k loop innermost, and GCC then vectorises across k with an
 * in-order reduction that runs at a fifth of the speed.) It serves ATTN_ISA_PORTABLE
 * through the shared blocked driver. */
#include "kernels/gemm_internal.h"

/* 4 x 8: eight 4-float accumulators fit the 16 SSE registers of baseline x86-64 beside the
 * B vectors and the broadcast (4 x 16 spilled and ran at half the speed). */
#define PORTABLE_MR 4
#define PORTABLE_NR 8

static void portable_micro_kernel(int64_t depth, const gemm_tile *t, float alpha,
                                  float beta)
{
    float sum[PORTABLE_MR][PORTABLE_NR] = {{0}};
    const float *a = t->a, *b = t->b;
    const int64_t a_row_stride = t->a_row_stride;
    for (int64_t p = 0; p < depth; p++) {
        /* Gather this step's A values first: the arithmetic below is then a plain
         * outer product over contiguous columns. */
        float a_step[PORTABLE_MR];
#pragma GCC unroll 16
        for (int r = 0; r < PORTABLE_MR; r++)
            a_step[r] = a[r * a_row_stride];
#pragma GCC unroll 16
        for (int r = 0; r < PORTABLE_MR; r++)
            for (int j = 0; j < PORTABLE_NR; j++)
                sum[r][j] += a_step[r] * b[j];
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
