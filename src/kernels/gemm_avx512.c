/* AVX-512 GEMM micro-kernel: a 14 x 32 tile of C held in 28 zmm accumulators. Each step
 * of k loads two vectors of the B panel and broadcasts 14 values of the A panel: 28 FMAs
 * against 16 loads, which keeps both FMA ports busy. Edge tiles use masked loads and
 * stores on the column side and skip rows past the edge. */
#include "kernels/gemm_internal.h"

#include <immintrin.h>

#define AVX512_MR 14
#define AVX512_NR 32
/* k-block length: the A panel (14 x 256 floats, 14 KiB) and the B panel streaming past it
 * (32 KiB) together about fill the 48 KiB L1d; longer blocks measured no faster. */
#define AVX512_MAX_DEPTH 256
/* The B panel comes from L2; fetch it this many k-steps (of 128 bytes) ahead. */
#define B_PREFETCH_DISTANCE 16

#define FOR_EACH_ROW(X)                                                                   \
    X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

/* The first `live` of 16 lanes. */
static inline __mmask16 lane_mask(int live)
{
    if (live <= 0)
        return 0;
    if (live >= 16)
        return 0xFFFF;
    return (__mmask16)((1u << live) - 1u);
}

static inline void store_row(float *c_row, __m512 sum_lo, __m512 sum_hi, __m512 alpha,
                             __m512 beta, int read_c, __mmask16 mask_lo, __mmask16 mask_hi)
{
    __m512 lo = _mm512_mul_ps(alpha, sum_lo);
    __m512 hi = _mm512_mul_ps(alpha, sum_hi);
    if (read_c) {
        lo = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask_lo, c_row), lo);
        hi = _mm512_fmadd_ps(beta, _mm512_maskz_loadu_ps(mask_hi, c_row + 16), hi);
    }
    _mm512_mask_storeu_ps(c_row, mask_lo, lo);
    _mm512_mask_storeu_ps(c_row + 16, mask_hi, hi);
}

/* One body, instantiated for A with contiguous rows (packed panels, or op(A) = A^T read in
 * place) or contiguous steps (op(A) = A read in place), and for tiles of up to row_count
 * rows, so that a product with few rows (a decoder's single query, a small batch) does
 * not pay for 14. */
static inline __attribute__((always_inline)) void
avx512_tile(const int row_count, int64_t depth, const float *a, int64_t a_row_stride,
            int64_t a_step_stride, const float *b, int64_t b_step_stride, float *c,
            int64_t ldc, float alpha, float beta, int rows, int cols)
{
    /* Start fetching the C tile now: it is needed only after the k loop. */
#define PREFETCH_ROW(r)                                                                   \
    if (r < row_count && r < rows) {                                                     \
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);                           \
        _mm_prefetch((const char *)(c + r * ldc + cols - 1), _MM_HINT_T0);                \
    }
    FOR_EACH_ROW(PREFETCH_ROW)

#define DECLARE_ROW(r) __m512 sum##r##_lo = _mm512_setzero_ps(), sum##r##_hi = _mm512_setzero_ps();
    FOR_EACH_ROW(DECLARE_ROW)

    const int64_t b_prefetch = B_PREFETCH_DISTANCE * b_step_stride;
    /* Rows 7..13 are addressed from a second pointer so that strided rows need only the
     * offsets 0..6 x a_row_stride, few enough to stay in registers. */
    const float *a_upper = a + 7 * a_row_stride;
    for (int64_t p = 0; p < depth; p++) {
        __m512 b_lo = _mm512_loadu_ps(b), b_hi = _mm512_loadu_ps(b + 16);
        _mm_prefetch((const char *)(b + b_prefetch), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + b_prefetch + 16), _MM_HINT_T0);
#define STEP_ROW(r)                                                                       \
    if (r < row_count) {                                                                  \
        __m512 a_r = _mm512_set1_ps(r < 7 ? a[r * a_row_stride]                          \
                                          : a_upper[(r - 7) * a_row_stride]);             \
        sum##r##_lo = _mm512_fmadd_ps(a_r, b_lo, sum##r##_lo);                            \
        sum##r##_hi = _mm512_fmadd_ps(a_r, b_hi, sum##r##_hi);                            \
    }
        FOR_EACH_ROW(STEP_ROW)
        a += a_step_stride;
        a_upper += a_step_stride;
        b += b_step_stride;
    }

    const __mmask16 mask_lo = lane_mask(cols), mask_hi = lane_mask(cols - 16);
    const __m512 alpha_v = _mm512_set1_ps(alpha), beta_v = _mm512_set1_ps(beta);
    const int read_c = beta != 0.0f;
#define STORE_ROW(r)                                                                      \
    if (r < row_count && r < rows)                                                       \
        store_row(c + r * ldc, sum##r##_lo, sum##r##_hi, alpha_v, beta_v, read_c, mask_lo,  \
                  mask_hi);
    FOR_EACH_ROW(STORE_ROW)
}

#define AVX512_TILE(row_count, row_stride, step_stride)                                   \
    avx512_tile(row_count, depth, t->a, row_stride, step_stride, t->b, t->b_step_stride,    \
                t->c, t->ldc, alpha, beta, t->rows, t->cols)

static void avx512_micro_kernel(int64_t depth, const gemm_tile *t, float alpha, float beta)
{
    if (t->a_row_stride == 1) {
        if (t->rows <= 1)
            AVX512_TILE(1, 1, t->a_step_stride);
        else if (t->rows <= 2)
            AVX512_TILE(2, 1, t->a_step_stride);
        else if (t->rows <= 4)
            AVX512_TILE(4, 1, t->a_step_stride);
        else if (t->rows <= 8)
            AVX512_TILE(8, 1, t->a_step_stride);
        else
            AVX512_TILE(AVX512_MR, 1, t->a_step_stride);
    } else {
        /* In place with strided rows: the driver passes full tiles only. */
        AVX512_TILE(AVX512_MR, t->a_row_stride, 1);
    }
}

const gemm_kernel_info attn_gemm_avx512_kernel = {
    .mr = AVX512_MR, .nr = AVX512_NR, .max_depth = AVX512_MAX_DEPTH, .kernel = avx512_micro_kernel};
