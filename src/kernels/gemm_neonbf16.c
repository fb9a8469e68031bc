/* AArch64 BF16 GEMM micro-kernel (FEAT_BF16, entered only under neon-bf16): C += op(A) op(B)
 * with both operands rounded to bf16 and the products summed in float by BFDOT, which
 * multiplies two k steps per 32-bit lane (r[j] += b[2j] a[2l] + b[2j+1] a[2l+1]).
 *
 * The register tile is the float NEON kernel's, 8 x 12, for the same reason: AArch64 has 32
 * vector registers, and 24 accumulators (8 rows of three 4-float vectors), the three B vectors
 * of a pair step (12 columns x 2 steps) and the two vectors of the eight rows' pair words
 * (read by lane, bfdot v.4s, v.8h, v.2h[lane]) take 29 of them with none spilled. Each pair
 * step does 24 BFDOTs, 192 multiply-adds, for 5 vector loads: twice the float kernel's
 * products for the same instructions, from panels half the bytes.
 *
 * Panels are the driver's pairs layout (gemm_internal.h, gemm_pack_pairs: step 2q in a word's
 * low half, 2q + 1 in its high half), which is exactly what BFDOT reads, so the x86 kernel's
 * layout serves here unchanged; the packing below is plain C through kernels/bf16.h's one
 * rounding. BFMMLA (2 x 4 by 4 x 2 blocks) would want panels of four steps of two rows: not
 * used yet, which keeps the one packed format.
 *
 * BFDOT's own rounding is not IEEE's: without FEAT_EBF16 it rounds the pair's sum and the
 * accumulation to odd and flushes subnormals (Arm ARM, BFDotAdd), so results differ in the
 * last bits from the emulated path; the tests hold it to the accuracy rule against float64
 * (tests/kernels/test_gemm_bf16.c), as they hold vdpbf16ps. */
#include "kernels/gemm_internal.h"

#include "kernels/bf16.h"

#include <arm_neon.h>
#include <math.h>

#define BF16_MR 8
#define BF16_NR 12
/* k-block length in steps: 256 pair words per row, the float kernel's L1 footprint. */
#define BF16_MAX_DEPTH 512
/* The B panel streams from L2; fetch it this many pair steps (of 48 bytes) ahead. */
#define B_PREFETCH_DISTANCE 16

#define FOR_EACH_ROW(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

static inline bfloat16x8_t pair_words(const float *p)
{
    return vreinterpretq_bf16_f32(vld1q_f32(p));
}

static void bf16_micro_kernel(int64_t depth, const gemm_tile *t, float alpha, float beta)
{
    const int64_t pairs = (depth + 1) / 2;
    const float *a = t->a, *b = t->b;
#define DECLARE_ROW(r)                                                                    \
    float32x4_t sum##r##_0 = vdupq_n_f32(0.0f), sum##r##_1 = vdupq_n_f32(0.0f),           \
                sum##r##_2 = vdupq_n_f32(0.0f);
    FOR_EACH_ROW(DECLARE_ROW)

    for (int64_t q = 0; q < pairs; q++) {
        const bfloat16x8_t b0 = pair_words(b), b1 = pair_words(b + 4), b2 = pair_words(b + 8);
        __builtin_prefetch(b + B_PREFETCH_DISTANCE * BF16_NR);
        const bfloat16x8_t a_low = pair_words(a), a_high = pair_words(a + 4);
#define STEP_ROW_FROM(r, half, lane)                                                      \
    sum##r##_0 = vbfdotq_laneq_f32(sum##r##_0, b0, half, lane);                           \
    sum##r##_1 = vbfdotq_laneq_f32(sum##r##_1, b1, half, lane);                           \
    sum##r##_2 = vbfdotq_laneq_f32(sum##r##_2, b2, half, lane);
        STEP_ROW_FROM(0, a_low, 0)
        STEP_ROW_FROM(1, a_low, 1)
        STEP_ROW_FROM(2, a_low, 2)
        STEP_ROW_FROM(3, a_low, 3)
        STEP_ROW_FROM(4, a_high, 0)
        STEP_ROW_FROM(5, a_high, 1)
        STEP_ROW_FROM(6, a_high, 2)
        STEP_ROW_FROM(7, a_high, 3)
        a += BF16_MR;
        b += BF16_NR;
    }

    /* As the float kernel: alpha * sum, then one fused beta * C add, through a temporary
     * tile at the edges so edge and interior elements round alike. */
    const float32x4_t alpha_v = vdupq_n_f32(alpha);
    const int read_c = beta != 0.0f;
    float tile[BF16_MR][BF16_NR];
#define SPILL_ROW(r)                                                                      \
    vst1q_f32(tile[r], vmulq_f32(alpha_v, sum##r##_0));                                   \
    vst1q_f32(tile[r] + 4, vmulq_f32(alpha_v, sum##r##_1));                               \
    vst1q_f32(tile[r] + 8, vmulq_f32(alpha_v, sum##r##_2));
    FOR_EACH_ROW(SPILL_ROW)
    float *c = t->c;
    for (int r = 0; r < t->rows; r++)
        for (int j = 0; j < t->cols; j++)
            c[r * t->ldc + j] = read_c ? fmaf(beta, c[r * t->ldc + j], tile[r][j]) : tile[r][j];
}

/* ---- packing: rounding to bf16 and pairing steps ----------------------------------------- */

static uint32_t pair_word(float step0, float step1)
{
    return (uint32_t)attn_bf16_from_float(step0) | (uint32_t)attn_bf16_from_float(step1) << 16;
}

/* Element (w, p) at src[w * w_stride + p * p_stride]; dst as gemm_pack_pairs lays it out,
 * padded with zero words past width and an odd last step paired with zero. */
static void bf16_pack_pairs(const float *src, int64_t w_stride, int64_t p_stride, int64_t width,
                            int64_t depth, int panel, float *dst)
{
    const int64_t pairs = (depth + 1) / 2;
    uint32_t *words = (uint32_t *)(void *)dst;
    for (int64_t w0 = 0; w0 < width; w0 += panel, words += (int64_t)panel * pairs) {
        const int64_t live = width - w0 < panel ? width - w0 : panel;
        for (int64_t q = 0; q < pairs; q++) {
            uint32_t *d = words + q * panel;
            const int has_second = 2 * q + 1 < depth;
            for (int64_t w = 0; w < live; w++) {
                const float *x = src + (w0 + w) * w_stride + 2 * q * p_stride;
                d[w] = pair_word(x[0], has_second ? x[p_stride] : 0.0f);
            }
            for (int64_t w = live; w < panel; w++)
                d[w] = 0;
        }
    }
}

const gemm_kernel_info attn_gemm_neonbf16_kernel = {.mr = BF16_MR,
                                                    .nr = BF16_NR,
                                                    .max_depth = BF16_MAX_DEPTH,
                                                    .kernel = bf16_micro_kernel,
                                                    .pack_pairs = bf16_pack_pairs};
