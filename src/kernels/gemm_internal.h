/* Shared by the GEMM driver (gemm_blocked.c) and its per-instruction-set micro-kernels.
 *
 * The driver packs op(A) and op(B) into zero-padded panels so that every transpose
 * combination and leading dimension reaches the same micro-kernel:
 *   an A panel holds MR rows of op(A) over `depth` steps:    a_panel[p * MR + r]
 *   a B panel holds NR columns of op(B) over `depth` steps:  b_panel[p * NR + c]
 * The micro-kernel forms the MR x NR product of one A panel and one B panel, summing over
 * p = 0 .. depth-1 in order from zero, and writes the top-left rows x cols corner of it to
 * C as   C = alpha * product + beta * C   (beta == 0: C is written without being read).
 * Every element of the tile goes through the same sequence of operations, so where an
 * element sits in a tile (interior or edge) never changes its bits.
 */
#ifndef ATTN_GEMM_INTERNAL_H
#define ATTN_GEMM_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_kernels.h"

typedef void (*gemm_micro_kernel)(int64_t depth, const float *a_panel, const float *b_panel,
                                  float *c, int64_t ldc, float alpha, float beta, int rows,
                                  int cols);

typedef struct gemm_kernel_info {
    int mr;              /* rows of op(A) per register tile */
    int nr;              /* columns of op(B) per register tile */
    int64_t max_depth;   /* longest k-block: an A panel (MR x depth) should sit in L1 */
    gemm_micro_kernel kernel;
} gemm_kernel_info;

ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_portable_kernel;
ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_avx2_kernel;
ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_avx512_kernel;

/* The blocked, packed, threaded GEMM around one micro-kernel. Arguments are already
 * checked (m, n, k > 0, valid pointers and leading dimensions). Fails only when packing
 * buffers cannot be allocated, before C is touched. */
ATTN_INTERNAL attn_status attn_gemm_blocked(const gemm_kernel_info *info, attn_transpose ta,
                                            attn_transpose tb, int64_t m, int64_t n, int64_t k,
                                            float alpha, const float *a, int64_t lda,
                                            const float *b, int64_t ldb, float beta, float *c,
                                            int64_t ldc);

#endif /* ATTN_GEMM_INTERNAL_H */
