/* The tiled attention's bf16 products by BFDOT (FEAT_BF16; entered only under neon-bf16). The
 * rounding to bf16, the packing and the softmax are the emulation's (sdpa_bf16_emulated.h),
 * compiled here once more; only the products, three quarters of the emulated attention's time
 * (perf on the x86 emulation, which runs the same loops), are the hardware's.
 *
 * A pair word holds two consecutive steps, low then high, which is what BFDOT multiplies per
 * 32-bit lane: r[x] += lo(b[x]) lo(a) + hi(b[x]) hi(a). With A's pair broadcast to every lane,
 * a row of B's pairs is read as it lies, four columns a vector. The register block is 8 rows
 * by 8 columns: 16 accumulators of AArch64's 32 vector registers, two B vectors and a
 * broadcast, none spilled.
 *
 * BFDOT's own rounding is not IEEE's (without FEAT_EBF16 it rounds the pair's sum and the
 * accumulation to odd and flushes subnormals), so results differ in the last bits from the
 * emulation's; the attention tests hold both to the accuracy rule against float64, as they
 * hold AVX512_BF16's vdpbf16ps. */
#include "attention/sdpa_internal.h"

#include <arm_neon.h>
#include <string.h>

enum { NEON_BF16_ROWS = 8, NEON_BF16_COLS = 8 };

static inline bfloat16x8_t pair_vector(const uint32_t *words)
{
    return vreinterpretq_bf16_u32(vld1q_u32(words));
}

/* rows <= NEON_BF16_ROWS, width <= NEON_BF16_COLS; inlined with the constant NEON_BF16_ROWS for
 * full blocks, so that the accumulators stay in registers. */
static inline __attribute__((always_inline)) void
bfdot_block(int64_t rows, int64_t width, int64_t pairs, const sdpa_bf16_pair *a,
            int64_t a_row_stride, int64_t a_inner_stride, const sdpa_bf16_pair *b, int64_t ldb,
            float *c, int64_t ldc, float alpha, sdpa_gemm_mode mode, const float *row_scale)
{
    float32x4_t acc[NEON_BF16_ROWS][2];
    for (int64_t r = 0; r < rows; r++)
        acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
    for (int64_t p = 0; p < pairs; p++) {
        const sdpa_bf16_pair *b_row = b + p * ldb;
        uint32_t padded[NEON_BF16_COLS] = {0};
        if (width < NEON_BF16_COLS) {
            /* Lanes past width are zero, not read from memory. */
            memcpy(padded, b_row, (size_t)width * sizeof *padded);
            b_row = padded;
        }
        const bfloat16x8_t b_low = pair_vector(b_row), b_high = pair_vector(b_row + 4);
        for (int64_t r = 0; r < rows; r++) {
            const bfloat16x8_t a_pair =
                vreinterpretq_bf16_u32(vdupq_n_u32(a[r * a_row_stride + p * a_inner_stride]));
            acc[r][0] = vbfdotq_f32(acc[r][0], b_low, a_pair);
            acc[r][1] = vbfdotq_f32(acc[r][1], b_high, a_pair);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        float sums[NEON_BF16_COLS];
        vst1q_f32(sums, acc[r][0]);
        vst1q_f32(sums + 4, acc[r][1]);
        sdpa_bf16_combine_row(c + r * ldc, sums, width, alpha, mode,
                              row_scale != NULL ? row_scale[r] : 0.0f);
    }
}

static void bfdot_gemm(int64_t m, int64_t n, int64_t pairs, const sdpa_bf16_pair *a,
                       int64_t a_row_stride, int64_t a_inner_stride, const sdpa_bf16_pair *b,
                       int64_t ldb, float *c, int64_t ldc, float alpha, sdpa_gemm_mode mode,
                       const float *row_scale)
{
    for (int64_t n0 = 0; n0 < n; n0 += NEON_BF16_COLS) {
        const int64_t width = n - n0 < NEON_BF16_COLS ? n - n0 : NEON_BF16_COLS;
        for (int64_t r0 = 0; r0 < m; r0 += NEON_BF16_ROWS) {
            const sdpa_bf16_pair *a_block = a + r0 * a_row_stride;
            float *c_block = c + r0 * ldc + n0;
            const float *scale = row_scale != NULL ? row_scale + r0 : NULL;
            if (m - r0 >= NEON_BF16_ROWS)
                bfdot_block(NEON_BF16_ROWS, width, pairs, a_block, a_row_stride, a_inner_stride,
                            b + n0, ldb, c_block, ldc, alpha, mode, scale);
            else
                bfdot_block(m - r0, width, pairs, a_block, a_row_stride, a_inner_stride, b + n0,
                            ldb, c_block, ldc, alpha, mode, scale);
        }
    }
}

#define BF16_EMULATED_NAME attn_sdpa_bf16_kernels_neonbf16
#define BF16_EMULATED_BLOCK_COLS 8
#define BF16_NATIVE_GEMM bfdot_gemm
#include "attention/sdpa_bf16_emulated.h"
