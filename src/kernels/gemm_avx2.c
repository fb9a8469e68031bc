/* AVX2 GEMM micro-kernel: a 6 x 16 tile of C in 12 ymm accumulators, leaving registers
 * for two B vectors and one broadcast A value (16 ymm in all). Edge tiles are computed in
 * full and written through a small temporary tile. */
#include "kernels/gemm_internal.h"

#include <immintrin.h>
#include <math.h>

#define AVX2_MR 6
#define AVX2_NR 16

/* The B panel streams from L2; fetch it this many k-steps (of 64 bytes) ahead. */
#define B_PREFETCH_DISTANCE 16

#define FOR_EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5)

/* One body, instantiated for A with contiguous rows (packed panels, or op(A) = A^T read in
 * place) and for A with contiguous steps (op(A) = A read in place). */
static inline __attribute__((always_inline)) void
avx2_tile(int64_t depth, const float *a, int64_t a_row_stride, int64_t a_step_stride,
          const float *b, int64_t b_step_stride, float *c, int64_t ldc, float alpha, float beta,
          int rows, int cols)
{
#define DECLARE_ROW(r) __m256 sum##r##_lo = _mm256_setzero_ps(), sum##r##_hi = _mm256_setzero_ps();
    FOR_EACH_ROW(DECLARE_ROW)

    for (int64_t p = 0; p < depth; p++) {
        __m256 b_lo = _mm256_loadu_ps(b), b_hi = _mm256_loadu_ps(b + 8);
        _mm_prefetch((const char *)(b + B_PREFETCH_DISTANCE * b_step_stride), _MM_HINT_T0);
#define STEP_ROW(r)                                                                       \
    {                                                                                     \
        __m256 a_r = _mm256_broadcast_ss(a + r * a_row_stride);                           \
        sum##r##_lo = _mm256_fmadd_ps(a_r, b_lo, sum##r##_lo);                            \
        sum##r##_hi = _mm256_fmadd_ps(a_r, b_hi, sum##r##_hi);                            \
    }
        FOR_EACH_ROW(STEP_ROW)
        a += a_step_stride;
        b += b_step_stride;
    }

    const __m256 alpha_v = _mm256_set1_ps(alpha), beta_v = _mm256_set1_ps(beta);
    const int read_c = beta != 0.0f;
    if (rows == AVX2_MR && cols == AVX2_NR) {
#define STORE_ROW(r)                                                                      \
    {                                                                                     \
        float *c_row = c + r * ldc;                                                       \
        __m256 lo = _mm256_mul_ps(alpha_v, sum##r##_lo);                                  \
        __m256 hi = _mm256_mul_ps(alpha_v, sum##r##_hi);                                  \
        if (read_c) {                                                                     \
            lo = _mm256_fmadd_ps(beta_v, _mm256_loadu_ps(c_row), lo);                     \
            hi = _mm256_fmadd_ps(beta_v, _mm256_loadu_ps(c_row + 8), hi);                 \
        }                                                                                 \
        _mm256_storeu_ps(c_row, lo);                                                      \
        _mm256_storeu_ps(c_row + 8, hi);                                                  \
    }
        FOR_EACH_ROW(STORE_ROW)
        return;
    }
    /* Edge tile: the same operations per element (alpha*sum, then one fused beta*C add),
     * so edge and interior elements round identically. */
    float tile[AVX2_MR][AVX2_NR];
#define SPILL_ROW(r)                                                                      \
    _mm256_storeu_ps(tile[r], _mm256_mul_ps(alpha_v, sum##r##_lo));                       \
    _mm256_storeu_ps(tile[r] + 8, _mm256_mul_ps(alpha_v, sum##r##_hi));
    FOR_EACH_ROW(SPILL_ROW)
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++)
            c[r * ldc + j] = read_c ? fmaf(beta, c[r * ldc + j], tile[r][j]) : tile[r][j];
}

static void avx2_micro_kernel(int64_t depth, const gemm_tile *t, float alpha, float beta)
{
    if (t->a_row_stride == 1)
        avx2_tile(depth, t->a, 1, t->a_step_stride, t->b, t->b_step_stride, t->c, t->ldc,
                  alpha, beta, t->rows, t->cols);
    else
        avx2_tile(depth, t->a, t->a_row_stride, 1, t->b, t->b_step_stride, t->c, t->ldc,
                  alpha, beta, t->rows, t->cols);
}

const gemm_kernel_info attn_gemm_avx2_kernel = {
    .mr = AVX2_MR, .nr = AVX2_NR, .max_depth = 256, .kernel = avx2_micro_kernel};
