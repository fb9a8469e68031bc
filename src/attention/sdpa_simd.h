/* The SIMD kernels of the tiled attention, written once over a small vector vocabulary and
 * included by sdpa_avx2.c and sdpa_avx512.c, which define it with their intrinsics first:
 *
 *   vfloat, vmask          a vector of VLEN floats, a lane mask
 *   V_ZERO() V_SET1(x)     constants
 *   V_LOAD(p) V_STORE(p, x)            whole vectors, unaligned
 *   V_LOADM(m, p) V_STOREM(m, p, x)    only the lanes of mask m (others load as 0)
 *   V_MASK_FIRST(n)        mask of the first n lanes, 1 <= n <= VLEN
 *   V_ADD V_SUB V_MUL V_MAX V_MIN V_FMA(a, b, c) = a * b + c, V_FNMA(a, b, c) = c - a * b
 *   V_ROUND(x)             to the nearest integer, as a float
 *   V_EXP_SCALE(y, n, x)   y * 2^n (n integer-valued), exactly 0 where x < EXP_INPUT_MIN
 *   V_WHERE_EQ(x, c, r)    lanes of x equal to c replaced by r
 *   vint, V_LANE_OFFSETS(s)   32-bit integers lane * s
 *   V_GATHERM(m, p, o)     p[o[lane]] in the lanes of mask m, 0 elsewhere
 *   EXP_INPUT_MIN          inputs below it give exactly 0 (so exp(-inf) = 0)
 *   EXP_INPUT_MAX          inputs above it are clamped to it
 *   SDPA_MR, SDPA_NV       GEMM register block: rows x vectors of accumulators
 *   SDPA_KERNELS_NAME      the sdpa_kernels table to define
 */
#include <math.h>
#include <stdint.h>

#define SDPA_ALWAYS_INLINE static inline __attribute__((always_inline))

/* ---- exp ------------------------------------------------------------------------------- */

/* exp(x) = 2^n * e^r with n = round(x / ln 2), r = x - n ln 2 in [-ln2/2, ln2/2], and
 * e^r = 1 + r + r^2 P(r). P is a degree-4 fit of (e^r - 1 - r) / r^2 for minimal relative
 * error on that interval (fitted for this file: fit error 3e-9, about 0.8 ulp once
 * evaluated in float; a degree lower would reach 2 ulp).
 * ln 2 is split in two so that n ln 2 is subtracted without rounding. */
SDPA_ALWAYS_INLINE vfloat v_exp(vfloat x)
{
    const vfloat log2e = V_SET1(1.44269504088896341f);
    const vfloat ln2_hi = V_SET1(0.693145751953125f);
    const vfloat ln2_lo = V_SET1(1.42860682030941723e-6f);
    /* Clamping keeps n in range; operand order keeps a NaN input NaN. */
    vfloat clamped = V_MIN(V_SET1(EXP_INPUT_MAX), V_MAX(V_SET1(EXP_INPUT_MIN), x));
    vfloat n = V_ROUND(V_MUL(clamped, log2e));
    vfloat r = V_FNMA(n, ln2_hi, clamped);
    r = V_FNMA(n, ln2_lo, r);
    vfloat poly = V_SET1(1.381461275741458e-3f);
    poly = V_FMA(poly, r, V_SET1(8.368710055947304e-3f));
    poly = V_FMA(poly, r, V_SET1(4.166838899254799e-2f));
    poly = V_FMA(poly, r, V_SET1(1.666652113199234e-1f));
    poly = V_FMA(poly, r, V_SET1(4.999999403953552e-1f));
    vfloat e_r = V_ADD(V_FMA(poly, V_MUL(r, r), r), V_SET1(1.0f));
    return V_EXP_SCALE(e_r, n, x);
}

/* ---- GEMM ------------------------------------------------------------------------------ */

/* One register block: rows x vecs accumulators held across the whole inner dimension.
 * rows and vecs are constants at every call site, so the loops unroll into registers. */
SDPA_ALWAYS_INLINE void gemm_block(const int rows, const int vecs, int64_t k, const float *a,
                                   int64_t a_row_stride, int64_t a_inner_stride, const float *b,
                                   int64_t ldb, float *c, int64_t ldc, sdpa_gemm_mode mode,
                                   const float *column_scale, vmask tail)
{
    vfloat acc[SDPA_MR][SDPA_NV];
    const float *a_rows[SDPA_MR];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) {
        a_rows[r] = a + r * a_row_stride;
#pragma GCC unroll 8
        for (int v = 0; v < vecs; v++)
            acc[r][v] = V_ZERO();
    }
    for (int64_t p = 0; p < k; p++) {
        vfloat b_vec[SDPA_NV];
#pragma GCC unroll 8
        for (int v = 0; v < vecs; v++)
            b_vec[v] = v == vecs - 1 ? V_LOADM(tail, b + v * VLEN) : V_LOAD(b + v * VLEN);
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            vfloat a_elem = V_SET1(a_rows[r][p * a_inner_stride]);
#pragma GCC unroll 8
            for (int v = 0; v < vecs; v++)
                acc[r][v] = V_FMA(a_elem, b_vec[v], acc[r][v]);
        }
        b += ldb;
    }
    vfloat scale[SDPA_NV];
#pragma GCC unroll 8
    for (int v = 0; v < vecs; v++)
        scale[v] = mode != SDPA_GEMM_SCALE_COLUMNS ? V_ZERO()
                   : v == vecs - 1                 ? V_LOADM(tail, column_scale + v * VLEN)
                                                   : V_LOAD(column_scale + v * VLEN);
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) {
        float *c_row = c + r * ldc;
#pragma GCC unroll 8
        for (int v = 0; v < vecs; v++) {
            const int last = v == vecs - 1;
            vfloat result = acc[r][v];
            if (mode != SDPA_GEMM_STORE) {
                vfloat old = last ? V_LOADM(tail, c_row + v * VLEN) : V_LOAD(c_row + v * VLEN);
                result = mode == SDPA_GEMM_ADD ? V_ADD(old, result) : V_FMA(old, scale[v], result);
            }
            if (last)
                V_STOREM(tail, c_row + v * VLEN, result);
            else
                V_STORE(c_row + v * VLEN, result);
        }
    }
}

/* All row blocks of one column panel of vecs vectors (the last one masked by tail). */
#define SDPA_DEFINE_PANEL(VECS)                                                                    \
    static void gemm_panel_##VECS(int64_t m, int64_t k, const float *a, int64_t a_row_stride,      \
                                  int64_t a_inner_stride, const float *b, int64_t ldb, float *c,   \
                                  int64_t ldc, sdpa_gemm_mode mode, const float *column_scale,     \
                                  vmask tail)                                                      \
    {                                                                                              \
        int64_t r0 = 0;                                                                            \
        for (; r0 + SDPA_MR <= m; r0 += SDPA_MR)                                                   \
            gemm_block(SDPA_MR, VECS, k, a + r0 * a_row_stride, a_row_stride, a_inner_stride, b,   \
                       ldb, c + r0 * ldc, ldc, mode, column_scale, tail);                          \
        const float *a_rest = a + r0 * a_row_stride;                                               \
        float *c_rest = c + r0 * ldc;                                                              \
        switch (m - r0) {                                                                          \
        case 1:                                                                                    \
            gemm_block(1, VECS, k, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,      \
                       mode, column_scale, tail);                                                  \
            break;                                                                                 \
        case 2:                                                                                    \
            gemm_block(2, VECS, k, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,      \
                       mode, column_scale, tail);                                                  \
            break;                                                                                 \
        case 3:                                                                                    \
            gemm_block(3, VECS, k, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,      \
                       mode, column_scale, tail);                                                  \
            break;                                                                                 \
        case 4:                                                                                    \
            gemm_block(4, VECS, k, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,      \
                       mode, column_scale, tail);                                                  \
            break;                                                                                 \
        case 5:                                                                                    \
            gemm_block(5, VECS, k, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,      \
                       mode, column_scale, tail);                                                  \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }

_Static_assert(SDPA_MR == 6, "gemm_panel_* handles remainders of up to 5 rows");
SDPA_DEFINE_PANEL(1)
SDPA_DEFINE_PANEL(2)
#if SDPA_NV >= 4
SDPA_DEFINE_PANEL(3)
SDPA_DEFINE_PANEL(4)
#endif

static void simd_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row_stride,
                      int64_t a_inner_stride, const float *b, int64_t ldb, float *c, int64_t ldc,
                      sdpa_gemm_mode mode, const float *column_scale)
{
    const int64_t panel = SDPA_NV * VLEN;
    for (int64_t n0 = 0; n0 < n; n0 += panel) {
        int64_t width = n - n0 < panel ? n - n0 : panel;
        int vecs = (int)((width + VLEN - 1) / VLEN);
        vmask tail = V_MASK_FIRST((int)(width - (vecs - 1) * VLEN));
        const float *scale = column_scale != NULL ? column_scale + n0 : NULL;
        switch (vecs) {
        case 1:
            gemm_panel_1(m, k, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, mode,
                         scale, tail);
            break;
        case 2:
            gemm_panel_2(m, k, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, mode,
                         scale, tail);
            break;
#if SDPA_NV >= 4
        case 3:
            gemm_panel_3(m, k, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, mode,
                         scale, tail);
            break;
        case 4:
            gemm_panel_4(m, k, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, mode,
                         scale, tail);
            break;
#endif
        default:
            break;
        }
    }
}

/* ---- transpose ------------------------------------------------------------------------- */

/* Each destination row gathers one source column, VLEN rows at a time; strides too large
 * for 32-bit gather offsets take the scalar path. */
static void simd_transpose(const float *src, int64_t src_stride, int64_t rows, int64_t cols,
                           float *dst, int64_t dst_stride, const float *column_scale, float scale)
{
    if (src_stride > INT32_MAX / VLEN || src_stride < -(INT32_MAX / VLEN)) {
        for (int64_t c = 0; c < cols; c++) {
            const float factor = column_scale != NULL ? column_scale[c] : scale;
            for (int64_t r = 0; r < rows; r++)
                dst[c * dst_stride + r] = src[r * src_stride + c] * factor;
        }
        return;
    }
    const vint offsets = V_LANE_OFFSETS((int32_t)src_stride);
    for (int64_t c = 0; c < cols; c++) {
        const vfloat factor = V_SET1(column_scale != NULL ? column_scale[c] : scale);
        float *dst_row = dst + c * dst_stride;
        for (int64_t r0 = 0; r0 < rows; r0 += VLEN) {
            vmask lanes = V_MASK_FIRST(rows - r0 < VLEN ? (int)(rows - r0) : VLEN);
            vfloat column = V_GATHERM(lanes, src + r0 * src_stride + c, offsets);
            V_STOREM(lanes, dst_row + r0, V_MUL(column, factor));
        }
    }
}

/* ---- softmax pieces -------------------------------------------------------------------- */

static void simd_softmax_columns(float *scores, int64_t rows, int64_t cols, int64_t ld,
                                 float *running_max, float *running_sum, float *rescale)
{
    const vfloat neg_inf = V_SET1(-INFINITY);
    for (int64_t c0 = 0; c0 < cols; c0 += VLEN) {
        vmask lanes = V_MASK_FIRST(cols - c0 < VLEN ? (int)(cols - c0) : VLEN);
        /* Four independent maxima hide the latency of the max chain. */
        vfloat max0 = neg_inf, max1 = neg_inf, max2 = neg_inf, max3 = neg_inf;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {
            max0 = V_MAX(max0, V_LOADM(lanes, scores + r * ld + c0));
            max1 = V_MAX(max1, V_LOADM(lanes, scores + (r + 1) * ld + c0));
            max2 = V_MAX(max2, V_LOADM(lanes, scores + (r + 2) * ld + c0));
            max3 = V_MAX(max3, V_LOADM(lanes, scores + (r + 3) * ld + c0));
        }
        for (; r < rows; r++)
            max0 = V_MAX(max0, V_LOADM(lanes, scores + r * ld + c0));
        vfloat tile_max = V_MAX(V_MAX(max0, max1), V_MAX(max2, max3));
        vfloat old_max = V_LOADM(lanes, running_max + c0);
        vfloat new_max = V_MAX(old_max, tile_max);
        /* A column with nothing unmasked yet subtracts 0, so exp(-inf - 0) = 0, not NaN. */
        vfloat shift = V_WHERE_EQ(new_max, neg_inf, V_ZERO());
        vfloat factor = v_exp(V_SUB(old_max, shift));
        vfloat sum0 = V_ZERO(), sum1 = V_ZERO();
        for (r = 0; r + 2 <= rows; r += 2) {
            float *row0 = scores + r * ld + c0, *row1 = row0 + ld;
            vfloat prob0 = v_exp(V_SUB(V_LOADM(lanes, row0), shift));
            vfloat prob1 = v_exp(V_SUB(V_LOADM(lanes, row1), shift));
            sum0 = V_ADD(sum0, prob0);
            sum1 = V_ADD(sum1, prob1);
            V_STOREM(lanes, row0, prob0);
            V_STOREM(lanes, row1, prob1);
        }
        if (r < rows) {
            float *row = scores + r * ld + c0;
            vfloat prob = v_exp(V_SUB(V_LOADM(lanes, row), shift));
            sum0 = V_ADD(sum0, prob);
            V_STOREM(lanes, row, prob);
        }
        vfloat sum = V_ADD(sum0, sum1);
        V_STOREM(lanes, running_sum + c0, V_FMA(V_LOADM(lanes, running_sum + c0), factor, sum));
        V_STOREM(lanes, running_max + c0, new_max);
        V_STOREM(lanes, rescale + c0, factor);
    }
}

static void simd_exp_columns(float *scores, int64_t rows, int64_t cols, int64_t ld,
                             const float *shift)
{
    for (int64_t c0 = 0; c0 < cols; c0 += VLEN) {
        vmask lanes = V_MASK_FIRST(cols - c0 < VLEN ? (int)(cols - c0) : VLEN);
        /* Subtracting +inf sends every score of a fully masked column to exp(-inf) = 0. */
        vfloat s = V_WHERE_EQ(V_LOADM(lanes, shift + c0), V_SET1(-INFINITY), V_SET1(INFINITY));
        for (int64_t r = 0; r < rows; r++) {
            float *row = scores + r * ld + c0;
            V_STOREM(lanes, row, v_exp(V_SUB(V_LOADM(lanes, row), s)));
        }
    }
}

static void simd_softmax_grad_rows(float *scores, float *grad, int64_t rows, int64_t cols,
                                   int64_t ld, const float *lse, const float *delta, float scale)
{
    const vfloat scale_vec = V_SET1(scale);
    for (int64_t r = 0; r < rows; r++) {
        vfloat shift = V_SET1(lse[r] == -INFINITY ? INFINITY : lse[r]);
        vfloat row_delta = V_SET1(delta[r]);
        float *s_row = scores + r * ld, *g_row = grad + r * ld;
        for (int64_t c0 = 0; c0 < cols; c0 += VLEN) {
            vmask lanes = V_MASK_FIRST(cols - c0 < VLEN ? (int)(cols - c0) : VLEN);
            vfloat prob = v_exp(V_SUB(V_LOADM(lanes, s_row + c0), shift));
            vfloat g = V_SUB(V_LOADM(lanes, g_row + c0), row_delta);
            V_STOREM(lanes, s_row + c0, prob);
            V_STOREM(lanes, g_row + c0, V_MUL(V_MUL(prob, g), scale_vec));
        }
    }
}

const sdpa_kernels SDPA_KERNELS_NAME = {
    simd_gemm, simd_transpose, simd_softmax_columns, simd_exp_columns, simd_softmax_grad_rows,
};
