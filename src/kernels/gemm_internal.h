/* Shared by the GEMM driver (gemm_blocked.c) and its per-instruction-set micro-kernels.
 *
 * The micro-kernel forms one MR x NR tile of op(A) op(B) over `depth` steps of k, summing
 * over p = 0 .. depth-1 in order from zero, and writes the top-left rows x cols corner of
 * it to C as   C = alpha * product + beta * C   (beta == 0: C is written without being
 * read). Every element of the tile goes through the same sequence of operations, so where
 * an element sits in a tile (interior or edge) never changes its bits.
 *
 * Its operands are usually panels packed by the driver (zero-padded to full tiles, so
 * every transpose combination and leading dimension reaches the same kernel):
 *   an A panel holds MR rows of op(A) step by step:     a[p * MR + r]
 *   a B panel holds NR columns of op(B) step by step:   b[p * NR + j]
 * When a panel would be used too few times to repay packing, the driver instead points
 * the kernel at the caller's matrix, always for a full MR x NR tile of it.
 */
#ifndef ATTN_GEMM_INTERNAL_H
#define ATTN_GEMM_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_kernels.h"

/* op(A)[r, p] = a[r * a_row_stride + p * a_step_stride] for r < MR, where one of the two
 * strides is 1 (a packed panel: 1 and MR); op(B)[p, j] = b[p * b_step_stride + j] for
 * j < NR (a packed panel: NR). */
typedef struct gemm_tile {
    const float *a;
    int64_t a_row_stride, a_step_stride;
    const float *b;
    int64_t b_step_stride;
    float *c;
    int64_t ldc;
    int rows, cols; /* the part of the tile inside C */
} gemm_tile;

typedef void (*gemm_micro_kernel)(int64_t depth, const gemm_tile *tile, float alpha, float beta);

/* Packs `width` rows stored along k (row w, step p at src[w * row_stride + p]) into
 * panels of `panel` rows, dst[panel_index * panel * depth + p * panel + w % panel], the
 * last panel padded with zeros: the transposing case of packing (op(A) = A, op(B) = B^T). */
typedef void (*gemm_pack_transposed)(const float *src, int64_t row_stride, int64_t width,
                                     int64_t depth, int panel, float *dst);

/* Packs like gemm_pack_transposed but for any strides (element (w, p) at src[w * w_stride +
 * p * p_stride]), rounding to bf16 and storing pairs of consecutive steps in one 32-bit word
 * (step 2q in the low half, 2q + 1 in the high half, an odd last step paired with zero):
 * dst word [panel_index * panel * ceil(depth / 2) + q * panel + w % panel]. This is the
 * layout vdpbf16ps multiplies; the words live in the driver's float buffers. */
typedef void (*gemm_pack_pairs)(const float *src, int64_t w_stride, int64_t p_stride, int64_t width,
                                int64_t depth, int panel, float *dst);

typedef struct gemm_kernel_info {
    int mr;            /* rows of op(A) per register tile */
    int nr;            /* columns of op(B) per register tile */
    int64_t max_depth; /* longest k-block: an A panel (MR x depth) should sit in L1 */
    gemm_micro_kernel kernel;
    gemm_pack_transposed pack_transposed; /* NULL: the driver's plain C version */
    /* Non-NULL for a kernel of bf16 pairs: a packed step is then a word of two k steps,
     * the panels are always packed (never read in place) and k-blocks have even lengths,
     * so no pair straddles two blocks. */
    gemm_pack_pairs pack_pairs;
} gemm_kernel_info;

ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_portable_kernel;
ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_avx2_kernel;
ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_avx512_kernel;
/* 8 x 12 tiles of AArch64 NEON (gemm_neon.c). */
ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_neon_kernel;
/* BFDOT on 8 x 12 tiles (gemm_neonbf16.c); only under neon-bf16. */
ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_neonbf16_kernel;
/* vdpbf16ps on 14 x 32 tiles (gemm_avx512bf16.c); only where the CPU has AVX512_BF16. */
ATTN_INTERNAL extern const gemm_kernel_info attn_gemm_avx512bf16_kernel;

/* The blocked, packed, threaded GEMM around one micro-kernel. Arguments are already
 * checked (m, n, k > 0, valid pointers and leading dimensions). Fails only when packing
 * buffers cannot be allocated, before C is touched.
 * precision ATTN_PRECISION_BF16 rounds both operands to bf16 while packing (every panel is
 * then packed): with a kernel of bf16 pairs that is its own packing; with a float kernel
 * the packed floats are rounded, which emulates the same products on any instruction set.
 * ATTN_PRECISION_FP32 needs a float kernel. prepacked_b (NULL: none) is op(B) packed by
 * attn_gemm_pack_b, read instead of b. */
ATTN_INTERNAL attn_status attn_gemm_blocked(const gemm_kernel_info *info, attn_precision precision,
                                            attn_transpose ta, attn_transpose tb, int64_t m,
                                            int64_t n, int64_t k, float alpha, const float *a,
                                            int64_t lda, const float *b, int64_t ldb,
                                            const float *prepacked_b, float beta, float *c,
                                            int64_t ldc);

/* op(B) packed whole ahead of the products that use it, in the layout the driver shares
 * between its threads (k-block by k-block, panel by panel): prepacked_b for
 * attn_gemm_blocked with the same kernel, precision, k and n, which then packs no B and
 * gives the bits it gives when it packs B itself. */
ATTN_INTERNAL size_t attn_gemm_packed_b_floats(const gemm_kernel_info *info,
                                               attn_precision precision, int64_t k, int64_t n);
ATTN_INTERNAL void attn_gemm_pack_b(const gemm_kernel_info *info, attn_precision precision,
                                    attn_transpose tb, int64_t k, int64_t n, const float *b,
                                    int64_t ldb, float *packed);

#endif /* ATTN_GEMM_INTERNAL_H */
