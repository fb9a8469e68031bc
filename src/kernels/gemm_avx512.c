/* AVX-512 GEMM micro-kernel: a 14 x 32 tile of C held in 28 zmm accumulators. Each step
 * of k loads two vectors of the B panel and broadcasts 14 values of the A panel: 28 FMAs
 * against 16 loads, which keeps both FMA ports busy. Edge tiles use masked loads and
 * stores on the column side and skip rows past the edge. */
#include "kernels/gemm_internal.h"

#include "kernels/gemm_avx512_shared.h"

#include <immintrin.h>

#define AVX512_MR 14
#define AVX512_NR 32
/* k-block length: the A panel (14 x 256 floats, 14 KiB) and the B panel streaming past it
 * (32 KiB) together about fill the 48 KiB L1d; longer blocks measured no faster. */
#define AVX512_MAX_DEPTH 256
/* The B panel comes from L2; fetch it this many k-steps (of 128 bytes) ahead. */
#define B_PREFETCH_DISTANCE 16

#define FOR_EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

/* One body, instantiated for A with contiguous rows (packed panels, or op(A) = A^T read in
 * place) or contiguous steps (op(A) = A read in place), and for tiles of up to row_count
 * rows, so that a product with few rows (a decoder's single query, a small batch) does
 * not pay for 14. */
static inline __attribute__((always_inline)) void
avx512_tile(const int row_count, int64_t depth, const float *a, int64_t a_row_stride,
            int64_t a_step_stride, const float *b, int64_t b_step_stride, float *c, int64_t ldc,
            float alpha, float beta, int rows, int cols)
{
    /* Start fetching the C tile now: it is needed only after the k loop. */
#define PREFETCH_ROW(r)                                                                            \
    if (r < row_count && r < rows) {                                                               \
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);                                    \
        _mm_prefetch((const char *)(c + r * ldc + cols - 1), _MM_HINT_T0);                         \
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
#define STEP_ROW(r)                                                                                \
    if (r < row_count) {                                                                           \
        __m512 a_r =                                                                               \
            _mm512_set1_ps(r < 7 ? a[r * a_row_stride] : a_upper[(r - 7) * a_row_stride]);         \
        sum##r##_lo = _mm512_fmadd_ps(a_r, b_lo, sum##r##_lo);                                     \
        sum##r##_hi = _mm512_fmadd_ps(a_r, b_hi, sum##r##_hi);                                     \
    }
        FOR_EACH_ROW(STEP_ROW)
        a += a_step_stride;
        a_upper += a_step_stride;
        b += b_step_stride;
    }

    const __mmask16 mask_lo = lane_mask(cols), mask_hi = lane_mask(cols - 16);
    const __m512 alpha_v = _mm512_set1_ps(alpha), beta_v = _mm512_set1_ps(beta);
    const int read_c = beta != 0.0f;
#define STORE_ROW(r)                                                                               \
    if (r < row_count && r < rows)                                                                 \
        store_row(c + r * ldc, sum##r##_lo, sum##r##_hi, alpha_v, beta_v, read_c, mask_lo, mask_hi);
    FOR_EACH_ROW(STORE_ROW)
}

#define AVX512_TILE(row_count, row_stride, step_stride)                                            \
    avx512_tile(row_count, depth, t->a, row_stride, step_stride, t->b, t->b_step_stride, t->c,     \
                t->ldc, alpha, beta, t->rows, t->cols)

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

/* ---- packing rows stored along k: 16 x 16 transposes in registers ---------------------- */

/* The scalar transposing copy costs about 3 cycles a float, as much as the multiply
 * itself when k is small (attention scores, k = 64); this does 16 x 16 blocks. */
static void avx512_pack_transposed(const float *src, int64_t row_stride, int64_t width,
                                   int64_t depth, int panel, float *dst)
{
    for (int64_t w0 = 0; w0 < width; w0 += panel, dst += (int64_t)panel * depth) {
        /* Up to 16 rows of the panel at a time; rows past `width` are zero padding. */
        for (int g = 0; g < panel; g += 16) {
            int group = panel - g < 16 ? panel - g : 16;
            int64_t live = width - w0 - g < group ? width - w0 - g : group;
            const float *rows = src + (w0 + g) * row_stride;
            const __mmask16 group_mask = lane_mask(group);
            for (int64_t p0 = 0; p0 < depth; p0 += 16) {
                int steps = depth - p0 < 16 ? (int)(depth - p0) : 16;
                const __mmask16 step_mask = lane_mask(steps);
                __m512 r[16];
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++)
                    r[i] = i < live ? _mm512_maskz_loadu_ps(step_mask, rows + i * row_stride + p0)
                                    : _mm512_setzero_ps();
                transpose_16x16(r);
#pragma GCC unroll 16
                for (int s = 0; s < 16; s++)
                    if (s < steps)
                        _mm512_mask_storeu_ps(dst + (p0 + s) * panel + g, group_mask, r[s]);
            }
        }
    }
}

const gemm_kernel_info attn_gemm_avx512_kernel = {.mr = AVX512_MR,
                                                  .nr = AVX512_NR,
                                                  .max_depth = AVX512_MAX_DEPTH,
                                                  .kernel = avx512_micro_kernel,
                                                  .pack_transposed = avx512_pack_transposed};
