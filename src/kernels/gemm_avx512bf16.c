/* AVX512_BF16 GEMM micro-kernel: C += op(A) op(B) with both operands rounded to bf16 and the
 * products summed in float by vdpbf16ps, which multiplies two k steps per 32-bit lane. The
 * register tile is the float kernel's, 14 x 32 in 28 zmm accumulators, but each step of the
 * loop covers a pair of k: two B vectors hold 32 columns x 2 steps, and each A row
 * broadcasts one 32-bit word (its two steps). Twice the float kernel's products for the
 * same instructions, and half the bytes of packed panels.
 *
 * The packers round (vcvtne2ps2bf16, kernels/bf16.h's rounding but for subnormals, see
 * below) and lay pairs of steps into words (gemm_internal.h, gemm_pack_pairs); the driver
 * always packs for this kernel.
 * vdpbf16ps treats bf16 subnormal operands as zero and flushes subnormal sums, which the
 * emulated path does not; both are far below anything a network computes. */
#include "kernels/gemm_internal.h"

#include "kernels/gemm_avx512_shared.h"

#include <immintrin.h>

#define BF16_MR 14
#define BF16_NR 32
/* k-block length in steps: 256 words per row, the same bytes in L1 as the float kernel's
 * 256 floats (A panel 14 KiB, B panel 32 KiB). */
#define BF16_MAX_DEPTH 512
/* The B panel comes from L2; fetch it this many pair steps (of 128 bytes) ahead. */
#define B_PREFETCH_DISTANCE 16

#define FOR_EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)

static inline __m512bh as_bf16_pairs(__m512 words)
{
    return (__m512bh)words;
}

/* As the float kernel, for tiles of up to row_count rows, so a product with few rows does
 * not pay for 14. A and B are packed: a[q * MR + r] and b[q * NR + j] are pair words. */
static inline __attribute__((always_inline)) void bf16_tile(const int row_count, int64_t pairs,
                                                            const float *a, const float *b,
                                                            float *c, int64_t ldc, float alpha,
                                                            float beta, int rows, int cols)
{
#define PREFETCH_ROW(r)                                                                            \
    if (r < row_count && r < rows) {                                                               \
        _mm_prefetch((const char *)(c + r * ldc), _MM_HINT_T0);                                    \
        _mm_prefetch((const char *)(c + r * ldc + cols - 1), _MM_HINT_T0);                         \
    }
    FOR_EACH_ROW(PREFETCH_ROW)

#define DECLARE_ROW(r) __m512 sum##r##_lo = _mm512_setzero_ps(), sum##r##_hi = _mm512_setzero_ps();
    FOR_EACH_ROW(DECLARE_ROW)

    for (int64_t q = 0; q < pairs; q++) {
        __m512bh b_lo = as_bf16_pairs(_mm512_loadu_ps(b));
        __m512bh b_hi = as_bf16_pairs(_mm512_loadu_ps(b + 16));
        _mm_prefetch((const char *)(b + B_PREFETCH_DISTANCE * BF16_NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + B_PREFETCH_DISTANCE * BF16_NR + 16), _MM_HINT_T0);
#define STEP_ROW(r)                                                                                \
    if (r < row_count) {                                                                           \
        __m512bh a_r = as_bf16_pairs(_mm512_set1_ps(a[r]));                                        \
        sum##r##_lo = _mm512_dpbf16_ps(sum##r##_lo, a_r, b_lo);                                    \
        sum##r##_hi = _mm512_dpbf16_ps(sum##r##_hi, a_r, b_hi);                                    \
    }
        FOR_EACH_ROW(STEP_ROW)
        a += BF16_MR;
        b += BF16_NR;
    }

    const __mmask16 mask_lo = lane_mask(cols), mask_hi = lane_mask(cols - 16);
    const __m512 alpha_v = _mm512_set1_ps(alpha), beta_v = _mm512_set1_ps(beta);
    const int read_c = beta != 0.0f;
#define STORE_ROW(r)                                                                               \
    if (r < row_count && r < rows)                                                                 \
        store_row(c + r * ldc, sum##r##_lo, sum##r##_hi, alpha_v, beta_v, read_c, mask_lo, mask_hi);
    FOR_EACH_ROW(STORE_ROW)
}

#define BF16_TILE(row_count)                                                                       \
    bf16_tile(row_count, pairs, t->a, t->b, t->c, t->ldc, alpha, beta, t->rows, t->cols)

static void bf16_micro_kernel(int64_t depth, const gemm_tile *t, float alpha, float beta)
{
    const int64_t pairs = (depth + 1) / 2;
    if (t->rows <= 1)
        BF16_TILE(1);
    else if (t->rows <= 2)
        BF16_TILE(2);
    else if (t->rows <= 4)
        BF16_TILE(4);
    else if (t->rows <= 8)
        BF16_TILE(8);
    else
        BF16_TILE(BF16_MR);
}

/* ---- packing: rounding to bf16 and pairing steps ----------------------------------------- */

/* vcvtne2ps2bf16 rounds 32 floats as kernels/bf16.h does (to nearest even, a NaN made quiet)
 * except that it reads subnormal floats as zero, which vdpbf16ps would do with their bf16
 * anyway: the products are the same. One instruction where the integer rounding took a
 * dozen, which counts because activations are packed at every product. */

/* Words of 32 consecutive steps of one row: word j holds steps 2j and 2j + 1. */
static inline __m512 row_pair_words(__m512 steps_0_15, __m512 steps_16_31)
{
    return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(steps_16_31, steps_0_15));
}

/* Words of two steps from two vectors of the same 16 positions: step0 low, step1 high. */
static inline __m512 pair_words(__m512 step0, __m512 step1)
{
    /* bf16 of step0 in lanes 0..15, of step1 in 16..31: interleave them pairwise. */
    const __m512i interleave =
        _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                         21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    __m512i both = (__m512i)_mm512_cvtne2ps_pbh(step1, step0);
    return _mm512_castsi512_ps(_mm512_permutexvar_epi16(interleave, both));
}

/* The panel width is contiguous: steps 2q and 2q + 1 are two source rows, combined 16
 * positions at a time. */
static void pack_pairs_across(const float *src, int64_t p_stride, int64_t width, int64_t depth,
                              int panel, float *dst)
{
    const int64_t pairs = (depth + 1) / 2, panel_words = (int64_t)panel * pairs;
    for (int64_t q = 0; q < pairs; q++) {
        const float *step0 = src + 2 * q * p_stride;
        const float *step1 = 2 * q + 1 < depth ? step0 + p_stride : NULL;
        float *d = dst + q * panel;
        for (int64_t w0 = 0; w0 < width; w0 += panel, d += panel_words)
            for (int g = 0; g < panel; g += 16) {
                int64_t left = width - w0 - g;
                const __mmask16 live = lane_mask(left > 16 ? 16 : (int)left);
                __m512 x0 = _mm512_maskz_loadu_ps(live, step0 + w0 + g);
                __m512 x1 = step1 != NULL ? _mm512_maskz_loadu_ps(live, step1 + w0 + g)
                                          : _mm512_setzero_ps();
                _mm512_mask_storeu_ps(d + g, lane_mask(panel - g), pair_words(x0, x1));
            }
    }
}

/* Steps are contiguous (rows stored along k): each row gives 16 words per 32 steps, and
 * 16 rows of them are transposed in registers into 16 pair steps of the panel. */
static void pack_pairs_transposed(const float *src, int64_t row_stride, int64_t width,
                                  int64_t depth, int panel, float *dst)
{
    const int64_t pairs = (depth + 1) / 2;
    for (int64_t w0 = 0; w0 < width; w0 += panel, dst += (int64_t)panel * pairs) {
        for (int g = 0; g < panel; g += 16) {
            int group = panel - g < 16 ? panel - g : 16;
            int64_t live = width - w0 - g < group ? width - w0 - g : group;
            const float *rows = src + (w0 + g) * row_stride;
            const __mmask16 group_mask = lane_mask(group);
            for (int64_t p0 = 0; p0 < depth; p0 += 32) {
                int steps = depth - p0 < 32 ? (int)(depth - p0) : 32;
                const __mmask16 mask_lo = lane_mask(steps), mask_hi = lane_mask(steps - 16);
                __m512 r[16];
#pragma GCC unroll 16
                for (int i = 0; i < 16; i++) {
                    const float *row = rows + i * row_stride + p0;
                    r[i] = i < live ? row_pair_words(_mm512_maskz_loadu_ps(mask_lo, row),
                                                     _mm512_maskz_loadu_ps(mask_hi, row + 16))
                                    : _mm512_setzero_ps();
                }
                transpose_16x16(r);
                const int words = (steps + 1) / 2;
#pragma GCC unroll 16
                for (int s = 0; s < 16; s++)
                    if (s < words)
                        _mm512_mask_storeu_ps(dst + (p0 / 2 + s) * panel + g, group_mask, r[s]);
            }
        }
    }
}

/* The driver reads op(A) and op(B) with one of the two strides equal to 1. */
static void bf16_pack_pairs(const float *src, int64_t w_stride, int64_t p_stride, int64_t width,
                            int64_t depth, int panel, float *dst)
{
    if (w_stride == 1)
        pack_pairs_across(src, p_stride, width, depth, panel, dst);
    else
        pack_pairs_transposed(src, w_stride, width, depth, panel, dst);
}

const gemm_kernel_info attn_gemm_avx512bf16_kernel = {.mr = BF16_MR,
                                                      .nr = BF16_NR,
                                                      .max_depth = BF16_MAX_DEPTH,
                                                      .kernel = bf16_micro_kernel,
                                                      .pack_pairs = bf16_pack_pairs};
