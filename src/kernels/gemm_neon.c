/* AArch64 NEON GEMM micro-kernel: an 8 x 12 tile of C in 24 accumulators (8 rows of three
 * 4-float vectors). AArch64 has 32 vector registers, against x86's 16 ymm: the tile is sized
 * so that the 24 accumulators, the three B vectors of a k step and the two vectors holding its
 * eight A values (read by lane, fmla v.4s, v.4s, v.s[lane]) take 29 of them, with no spill,
 * and each step does 24 multiply-adds for 5 vector loads. (12 x 8 would use as many registers
 * but load three A vectors and two B vectors; 8 x 12 keeps the packed A panel, which stays in
 * L1 for a whole k-block, the smaller one.) Edge tiles are computed in full and written through
 * a small temporary tile. Packing is the driver's plain C (gemm_blocked.c). */
#include "kernels/gemm_internal.h"

#include <arm_neon.h>
#include <math.h>

#define NEON_MR 8
#define NEON_NR 12

/* The B panel streams from L2; fetch it this many k-steps (of 48 bytes) ahead. */
#define B_PREFETCH_DISTANCE 16

#define FOR_EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

/* One body, instantiated for A with contiguous rows (packed panels, or op(A) = A^T read in
 * place: the eight values of a step are two vector loads) and for A with contiguous steps
 * (op(A) = A read in place: the eight values are gathered lane by lane). */
static inline __attribute__((always_inline)) void
neon_tile(int64_t depth, const float *a, int64_t a_row_stride, int64_t a_step_stride,
          const float *b, int64_t b_step_stride, float *c, int64_t ldc, float alpha, float beta,
          int rows, int cols)
{
#define DECLARE_ROW(r)                                                                    \
    float32x4_t sum##r##_0 = vdupq_n_f32(0.0f), sum##r##_1 = vdupq_n_f32(0.0f),           \
                sum##r##_2 = vdupq_n_f32(0.0f);
    FOR_EACH_ROW(DECLARE_ROW)

    for (int64_t p = 0; p < depth; p++) {
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        __builtin_prefetch(b + B_PREFETCH_DISTANCE * b_step_stride);
        float32x4_t a_low, a_high;
        if (a_row_stride == 1) {
            a_low = vld1q_f32(a);
            a_high = vld1q_f32(a + 4);
        } else {
            a_low = vld1q_dup_f32(a);
            a_low = vld1q_lane_f32(a + a_row_stride, a_low, 1);
            a_low = vld1q_lane_f32(a + 2 * a_row_stride, a_low, 2);
            a_low = vld1q_lane_f32(a + 3 * a_row_stride, a_low, 3);
            a_high = vld1q_dup_f32(a + 4 * a_row_stride);
            a_high = vld1q_lane_f32(a + 5 * a_row_stride, a_high, 1);
            a_high = vld1q_lane_f32(a + 6 * a_row_stride, a_high, 2);
            a_high = vld1q_lane_f32(a + 7 * a_row_stride, a_high, 3);
        }
#define STEP_ROW_FROM(r, half, lane)                                                      \
    sum##r##_0 = vfmaq_laneq_f32(sum##r##_0, b0, half, lane);                             \
    sum##r##_1 = vfmaq_laneq_f32(sum##r##_1, b1, half, lane);                             \
    sum##r##_2 = vfmaq_laneq_f32(sum##r##_2, b2, half, lane);
        STEP_ROW_FROM(0, a_low, 0)
        STEP_ROW_FROM(1, a_low, 1)
        STEP_ROW_FROM(2, a_low, 2)
        STEP_ROW_FROM(3, a_low, 3)
        STEP_ROW_FROM(4, a_high, 0)
        STEP_ROW_FROM(5, a_high, 1)
        STEP_ROW_FROM(6, a_high, 2)
        STEP_ROW_FROM(7, a_high, 3)
        a += a_step_stride;
        b += b_step_stride;
    }

    const float32x4_t alpha_v = vdupq_n_f32(alpha), beta_v = vdupq_n_f32(beta);
    const int read_c = beta != 0.0f;
    if (rows == NEON_MR && cols == NEON_NR) {
#define STORE_ROW(r)                                                                      \
    {                                                                                     \
        float *c_row = c + r * ldc;                                                       \
        float32x4_t v0 = vmulq_f32(alpha_v, sum##r##_0);                                  \
        float32x4_t v1 = vmulq_f32(alpha_v, sum##r##_1);                                  \
        float32x4_t v2 = vmulq_f32(alpha_v, sum##r##_2);                                  \
        if (read_c) {                                                                     \
            v0 = vfmaq_f32(v0, beta_v, vld1q_f32(c_row));                                 \
            v1 = vfmaq_f32(v1, beta_v, vld1q_f32(c_row + 4));                             \
            v2 = vfmaq_f32(v2, beta_v, vld1q_f32(c_row + 8));                             \
        }                                                                                 \
        vst1q_f32(c_row, v0);                                                             \
        vst1q_f32(c_row + 4, v1);                                                         \
        vst1q_f32(c_row + 8, v2);                                                         \
    }
        FOR_EACH_ROW(STORE_ROW)
        return;
    }
    /* Edge tile: the same operations per element (alpha*sum, then one fused beta*C add),
     * so edge and interior elements round identically. */
    float tile[NEON_MR][NEON_NR];
#define SPILL_ROW(r)                                                                      \
    vst1q_f32(tile[r], vmulq_f32(alpha_v, sum##r##_0));                                   \
    vst1q_f32(tile[r] + 4, vmulq_f32(alpha_v, sum##r##_1));                               \
    vst1q_f32(tile[r] + 8, vmulq_f32(alpha_v, sum##r##_2));
    FOR_EACH_ROW(SPILL_ROW)
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++)
            c[r * ldc + j] = read_c ? fmaf(beta, c[r * ldc + j], tile[r][j]) : tile[r][j];
}

static void neon_micro_kernel(int64_t depth, const gemm_tile *t, float alpha, float beta)
{
    if (t->a_row_stride == 1)
        neon_tile(depth, t->a, 1, t->a_step_stride, t->b, t->b_step_stride, t->c, t->ldc,
                  alpha, beta, t->rows, t->cols);
    else
        neon_tile(depth, t->a, t->a_row_stride, 1, t->b, t->b_step_stride, t->c, t->ldc,
                  alpha, beta, t->rows, t->cols);
}

const gemm_kernel_info attn_gemm_neon_kernel = {
    .mr = NEON_MR, .nr = NEON_NR, .max_depth = 256, .kernel = neon_micro_kernel};
