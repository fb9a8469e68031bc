/* AVX512_BF16 products of the tiled attention: vdpbf16ps multiplies a broadcast pair of A by
 * 16 pairs of B and adds both products into 16 float accumulators, a 6 x 4-vector register
 * block as in sdpa_avx512.c; vcvtne2ps2bf16 rounds to nearest even while packing (it treats
 * float denormals as zero, the one place it differs from the emulation's rounding). Entered
 * only through attn_precision_native(ATTN_PRECISION_BF16). */
#include "attention/sdpa_internal.h"

#ifdef ATTN_SDPA_HAVE_X86
#include <immintrin.h>
#include <math.h>

#define BF16_ALWAYS_INLINE static inline __attribute__((always_inline))

enum { VLEN = 16, MR = 6, NV = 4 };

static __mmask16 first_lanes(int64_t n)
{
    const unsigned bits = n >= VLEN ? 0xffffu : (1u << (unsigned)n) - 1u;
    return (__mmask16)bits;
}

BF16_ALWAYS_INLINE __m512bh as_pairs(__m512i x)
{
    return (__m512bh)x;
}

BF16_ALWAYS_INLINE void bf16_block(const int rows, const int vecs, int64_t pairs,
                                   const sdpa_bf16_pair *a, int64_t a_row_stride,
                                   int64_t a_inner_stride, const sdpa_bf16_pair *b, int64_t ldb,
                                   float *c, int64_t ldc, float alpha, sdpa_gemm_mode mode,
                                   const float *row_scale, __mmask16 tail)
{
    __m512 acc[MR][NV];
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++)
#pragma GCC unroll 8
        for (int v = 0; v < vecs; v++)
            acc[r][v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        __m512bh b_vec[NV];
#pragma GCC unroll 8
        for (int v = 0; v < vecs; v++)
            b_vec[v] = as_pairs(v == vecs - 1 ? _mm512_maskz_loadu_epi32(tail, b + v * VLEN)
                                              : _mm512_loadu_si512(b + v * VLEN));
        const sdpa_bf16_pair *a_column = a + p * a_inner_stride;
#pragma GCC unroll 8
        for (int r = 0; r < rows; r++) {
            __m512bh a_pair = as_pairs(_mm512_set1_epi32((int)a_column[r * a_row_stride]));
#pragma GCC unroll 8
            for (int v = 0; v < vecs; v++)
                acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a_pair, b_vec[v]);
        }
        b += ldb;
    }
    const __m512 alpha_vec = _mm512_set1_ps(alpha);
#pragma GCC unroll 8
    for (int r = 0; r < rows; r++) {
        float *c_row = c + r * ldc;
        const __m512 scale =
            mode == SDPA_GEMM_SCALE_ROWS ? _mm512_set1_ps(row_scale[r]) : _mm512_setzero_ps();
#pragma GCC unroll 8
        for (int v = 0; v < vecs; v++) {
            const __mmask16 lanes = (__mmask16)(v == vecs - 1 ? tail : 0xffffu);
            __m512 result = _mm512_mul_ps(acc[r][v], alpha_vec);
            if (mode != SDPA_GEMM_STORE) {
                __m512 old = _mm512_maskz_loadu_ps(lanes, c_row + v * VLEN);
                result = mode == SDPA_GEMM_ADD ? _mm512_add_ps(old, result)
                                               : _mm512_fmadd_ps(old, scale, result);
            }
            _mm512_mask_storeu_ps(c_row + v * VLEN, lanes, result);
        }
    }
}

/* All row blocks of one column panel of VECS vectors (the last one masked by tail). */
#define BF16_DEFINE_PANEL(VECS)                                                                    \
    static void bf16_panel_##VECS(                                                                 \
        int64_t m, int64_t pairs, const sdpa_bf16_pair *a, int64_t a_row_stride,                   \
        int64_t a_inner_stride, const sdpa_bf16_pair *b, int64_t ldb, float *c, int64_t ldc,       \
        float alpha, sdpa_gemm_mode mode, const float *row_scale, __mmask16 tail)                  \
    {                                                                                              \
        int64_t r0 = 0;                                                                            \
        for (; r0 + MR <= m; r0 += MR)                                                             \
            bf16_block(MR, VECS, pairs, a + r0 * a_row_stride, a_row_stride, a_inner_stride, b,    \
                       ldb, c + r0 * ldc, ldc, alpha, mode,                                        \
                       row_scale != NULL ? row_scale + r0 : NULL, tail);                           \
        const sdpa_bf16_pair *a_rest = a + r0 * a_row_stride;                                      \
        float *c_rest = c + r0 * ldc;                                                              \
        const float *scale_rest = row_scale != NULL ? row_scale + r0 : NULL;                       \
        switch (m - r0) {                                                                          \
        case 1:                                                                                    \
            bf16_block(1, VECS, pairs, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,  \
                       alpha, mode, scale_rest, tail);                                             \
            break;                                                                                 \
        case 2:                                                                                    \
            bf16_block(2, VECS, pairs, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,  \
                       alpha, mode, scale_rest, tail);                                             \
            break;                                                                                 \
        case 3:                                                                                    \
            bf16_block(3, VECS, pairs, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,  \
                       alpha, mode, scale_rest, tail);                                             \
            break;                                                                                 \
        case 4:                                                                                    \
            bf16_block(4, VECS, pairs, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,  \
                       alpha, mode, scale_rest, tail);                                             \
            break;                                                                                 \
        case 5:                                                                                    \
            bf16_block(5, VECS, pairs, a_rest, a_row_stride, a_inner_stride, b, ldb, c_rest, ldc,  \
                       alpha, mode, scale_rest, tail);                                             \
            break;                                                                                 \
        default:                                                                                   \
            break;                                                                                 \
        }                                                                                          \
    }

_Static_assert(MR == 6, "bf16_panel_* handles remainders of up to 5 rows");
BF16_DEFINE_PANEL(1)
BF16_DEFINE_PANEL(2)
BF16_DEFINE_PANEL(3)
BF16_DEFINE_PANEL(4)

static void bf16_gemm(int64_t m, int64_t n, int64_t pairs, const sdpa_bf16_pair *a,
                      int64_t a_row_stride, int64_t a_inner_stride, const sdpa_bf16_pair *b,
                      int64_t ldb, float *c, int64_t ldc, float alpha, sdpa_gemm_mode mode,
                      const float *row_scale)
{
    const int64_t panel = NV * VLEN;
    for (int64_t n0 = 0; n0 < n; n0 += panel) {
        const int64_t width = n - n0 < panel ? n - n0 : panel;
        const int vecs = (int)((width + VLEN - 1) / VLEN);
        const __mmask16 tail = first_lanes(width - (vecs - 1) * VLEN);
        switch (vecs) {
        case 1:
            bf16_panel_1(m, pairs, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, alpha,
                         mode, row_scale, tail);
            break;
        case 2:
            bf16_panel_2(m, pairs, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, alpha,
                         mode, row_scale, tail);
            break;
        case 3:
            bf16_panel_3(m, pairs, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, alpha,
                         mode, row_scale, tail);
            break;
        case 4:
            bf16_panel_4(m, pairs, a, a_row_stride, a_inner_stride, b + n0, ldb, c + n0, ldc, alpha,
                         mode, row_scale, tail);
            break;
        default:
            break;
        }
    }
}

/* ---- packing --------------------------------------------------------------------------- */

/* 16 pairs (low[lane], high[lane]), rounded to nearest even. */
BF16_ALWAYS_INLINE __m512i interleave_pairs(__m512 low, __m512 high)
{
    /* 16-bit index pairs (k, 16 + k): word k takes low[k], then high[k]. */
    const __m512i order = _mm512_add_epi32(
        _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                           _mm512_set1_epi32(0x10001)),
        _mm512_set1_epi32(16 << 16));
    return _mm512_permutexvar_epi16(order, (__m512i)_mm512_cvtne2ps_pbh(high, low));
}

/* Rows of consecutive elements: each row's pairs are its elements in order. */
static void pack_rows(const float *src, int64_t row_stride, int64_t rows, int64_t cols,
                      sdpa_bf16_pair *dst, int64_t dst_row_stride)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *row = src + r * row_stride;
        sdpa_bf16_pair *out = dst + r * dst_row_stride;
        for (int64_t x0 = 0; x0 < cols; x0 += 2 * VLEN) {
            const __m512 low = _mm512_maskz_loadu_ps(first_lanes(cols - x0), row + x0);
            const __m512 high =
                x0 + VLEN < cols
                    ? _mm512_maskz_loadu_ps(first_lanes(cols - x0 - VLEN), row + x0 + VLEN)
                    : _mm512_setzero_ps();
            const __m512i words = (__m512i)_mm512_cvtne2ps_pbh(high, low);
            _mm512_mask_storeu_epi32(out + x0 / 2, first_lanes((cols - x0 + 1) / 2), words);
        }
    }
}

/* Pairs along the columns of a source whose rows are contiguous (row_stride 1): two columns
 * load as vectors and interleave. */
static void pack_columns(const float *src, int64_t col_stride, int64_t rows, int64_t cols,
                         sdpa_bf16_pair *dst, int64_t dst_pair_stride)
{
    for (int64_t x = 0; x < cols; x += 2) {
        const float *low_column = src + x * col_stride;
        for (int64_t r0 = 0; r0 < rows; r0 += VLEN) {
            const __mmask16 lanes = first_lanes(rows - r0);
            const __m512 low = _mm512_maskz_loadu_ps(lanes, low_column + r0);
            const __m512 high = x + 1 < cols
                                    ? _mm512_maskz_loadu_ps(lanes, low_column + col_stride + r0)
                                    : _mm512_setzero_ps();
            _mm512_mask_storeu_epi32(dst + x / 2 * dst_pair_stride + r0, lanes,
                                     interleave_pairs(low, high));
        }
    }
}

/* Rows of consecutive elements packed into columns of pairs (dst_row_stride 1): blocks of 16
 * rows x 16 pairs are packed as rows, then transposed through a small buffer (cheaper than
 * gathering the columns, which this CPU does slowly). */
static void pack_rows_transposed(const float *src, int64_t row_stride, int64_t rows, int64_t cols,
                                 sdpa_bf16_pair *dst, int64_t dst_pair_stride)
{
    sdpa_bf16_pair block[VLEN][VLEN];
    const int64_t pairs = (cols + 1) / 2;
    for (int64_t r0 = 0; r0 < rows; r0 += VLEN) {
        const int64_t block_rows = rows - r0 < VLEN ? rows - r0 : VLEN;
        for (int64_t p0 = 0; p0 < pairs; p0 += VLEN) {
            const int64_t block_pairs = pairs - p0 < VLEN ? pairs - p0 : VLEN;
            pack_rows(src + r0 * row_stride + 2 * p0, row_stride, block_rows,
                      cols - 2 * p0 < 2 * VLEN ? cols - 2 * p0 : 2 * VLEN, &block[0][0], VLEN);
            for (int64_t p = 0; p < block_pairs; p++)
                for (int64_t r = 0; r < block_rows; r++)
                    dst[(p0 + p) * dst_pair_stride + r0 + r] = block[r][p];
        }
    }
}

static void bf16_pack(const float *src, int64_t row_stride, int64_t col_stride, int64_t rows,
                      int64_t cols, sdpa_bf16_pair *dst, int64_t dst_row_stride,
                      int64_t dst_pair_stride)
{
    if (col_stride == 1 && dst_pair_stride == 1)
        pack_rows(src, row_stride, rows, cols, dst, dst_row_stride);
    else if (row_stride == 1 && dst_row_stride == 1)
        pack_columns(src, col_stride, rows, cols, dst, dst_pair_stride);
    else if (col_stride == 1 && dst_row_stride == 1)
        pack_rows_transposed(src, row_stride, rows, cols, dst, dst_pair_stride);
    else
        attn_sdpa_bf16_kernels_emulated.pack(src, row_stride, col_stride, rows, cols, dst,
                                             dst_row_stride, dst_pair_stride);
}

/* ---- softmax in base 2 ------------------------------------------------------------------ */

/* 2^x = 2^n 2^f with n = round(x), f in [-1/2, 1/2] and 2^f a degree-5 polynomial fitted for
 * this file (relative error 2.3e-7 evaluated in float, about 2 ulp). Inputs below -200 give
 * exactly 0 (2^-200 is far below the denormals), so 2^-inf = 0; a NaN stays NaN. */
BF16_ALWAYS_INLINE __m512 v_exp2(__m512 x)
{
    const __m512 clamped = _mm512_max_ps(_mm512_set1_ps(-200.0f), x);
    const __m512 n = _mm512_roundscale_ps(clamped, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_sub_ps(clamped, n);
    __m512 poly = _mm512_set1_ps(1.3276353711262345e-3f);
    poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(9.675508365035057e-3f));
    poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(5.550713464617729e-2f));
    poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(2.4022120237350464e-1f));
    poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(6.931469440460205e-1f));
    poly = _mm512_fmadd_ps(poly, f, _mm512_set1_ps(1.0000001192092896f));
    return _mm512_scalef_ps(poly, n);
}

static void bf16_softmax_columns(const float *scores, int64_t rows, int64_t cols, int64_t ld,
                                 float *running_max, float *running_sum, float *rescale,
                                 sdpa_bf16_pair *prob_pairs)
{
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    for (int64_t c0 = 0; c0 < cols; c0 += VLEN) {
        const __mmask16 lanes = first_lanes(cols - c0);
        /* Four independent maxima hide the latency of the max chain. */
        __m512 max0 = neg_inf, max1 = neg_inf, max2 = neg_inf, max3 = neg_inf;
        int64_t r = 0;
        for (; r + 4 <= rows; r += 4) {
            max0 = _mm512_max_ps(max0, _mm512_maskz_loadu_ps(lanes, scores + r * ld + c0));
            max1 = _mm512_max_ps(max1, _mm512_maskz_loadu_ps(lanes, scores + (r + 1) * ld + c0));
            max2 = _mm512_max_ps(max2, _mm512_maskz_loadu_ps(lanes, scores + (r + 2) * ld + c0));
            max3 = _mm512_max_ps(max3, _mm512_maskz_loadu_ps(lanes, scores + (r + 3) * ld + c0));
        }
        for (; r < rows; r++)
            max0 = _mm512_max_ps(max0, _mm512_maskz_loadu_ps(lanes, scores + r * ld + c0));
        const __m512 old_max = _mm512_maskz_loadu_ps(lanes, running_max + c0);
        const __m512 new_max = _mm512_max_ps(
            old_max, _mm512_max_ps(_mm512_max_ps(max0, max1), _mm512_max_ps(max2, max3)));
        /* A column with nothing unmasked yet subtracts 0, so 2^(-inf - 0) = 0, not NaN. */
        const __m512 shift = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(new_max, neg_inf, _CMP_EQ_OQ),
                                                  new_max, _mm512_setzero_ps());
        const __m512 factor = v_exp2(_mm512_sub_ps(old_max, shift));
        __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
        for (r = 0; r < rows; r += 2) {
            const __m512 low =
                v_exp2(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, scores + r * ld + c0), shift));
            const __m512 high =
                r + 1 < rows ? v_exp2(_mm512_sub_ps(
                                   _mm512_maskz_loadu_ps(lanes, scores + (r + 1) * ld + c0), shift))
                             : _mm512_setzero_ps();
            sum0 = _mm512_add_ps(sum0, low);
            sum1 = _mm512_add_ps(sum1, high);
            _mm512_mask_storeu_epi32(prob_pairs + r / 2 * ld + c0, lanes,
                                     interleave_pairs(low, high));
        }
        const __m512 sum = _mm512_add_ps(sum0, sum1);
        _mm512_mask_storeu_ps(
            running_sum + c0, lanes,
            _mm512_fmadd_ps(_mm512_maskz_loadu_ps(lanes, running_sum + c0), factor, sum));
        _mm512_mask_storeu_ps(running_max + c0, lanes, new_max);
        _mm512_mask_storeu_ps(rescale + c0, lanes, factor);
    }
}

static void bf16_softmax_grad_rows(const float *scores, const float *grad, int64_t rows,
                                   int64_t cols, int64_t ld, const float *lse, const float *delta,
                                   float scale, sdpa_bf16_pair *prob_pairs,
                                   sdpa_bf16_pair *grad_pairs, sdpa_bf16_pair *grad_rows,
                                   int64_t grad_rows_stride)
{
    const __m512 scale_vec = _mm512_set1_ps(scale);
    for (int64_t r = 0; r < rows; r += 2) {
        const int has_second = r + 1 < rows;
        /* A fully masked query (lse -inf) subtracts +inf: every probability is 2^-inf = 0. */
        const __m512 shift[2] = {
            _mm512_set1_ps(lse[r] == -INFINITY ? INFINITY : lse[r]),
            _mm512_set1_ps(!has_second || lse[r + 1] == -INFINITY ? INFINITY : lse[r + 1])};
        const __m512 row_delta[2] = {_mm512_set1_ps(delta[r]),
                                     _mm512_set1_ps(has_second ? delta[r + 1] : 0.0f)};
        for (int64_t c0 = 0; c0 < cols; c0 += 2 * VLEN) {
            __m512 probs[2][2], grads[2][2];
            for (int k = 0; k < 2; k++)
                for (int half = 0; half < 2; half++) {
                    const int64_t c = c0 + half * VLEN;
                    const __mmask16 lanes =
                        (__mmask16)(c < cols && (k == 0 || has_second) ? first_lanes(cols - c)
                                                                       : 0u);
                    const int64_t offset = (r + k) * ld + c;
                    const __m512 prob = v_exp2(
                        _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, scores + offset), shift[k]));
                    const __m512 g =
                        _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes, grad + offset), row_delta[k]);
                    probs[k][half] = _mm512_maskz_mov_ps(lanes, prob);
                    grads[k][half] = _mm512_maskz_mov_ps(
                        lanes, _mm512_mul_ps(_mm512_mul_ps(prob, g), scale_vec));
                }
            for (int half = 0; half < 2 && c0 + half * VLEN < cols; half++) {
                const int64_t c = c0 + half * VLEN;
                const __mmask16 lanes = first_lanes(cols - c);
                _mm512_mask_storeu_epi32(prob_pairs + r / 2 * ld + c, lanes,
                                         interleave_pairs(probs[0][half], probs[1][half]));
                _mm512_mask_storeu_epi32(grad_pairs + r / 2 * ld + c, lanes,
                                         interleave_pairs(grads[0][half], grads[1][half]));
            }
            const __mmask16 words = first_lanes((cols - c0 + 1) / 2);
            for (int k = 0; k < 1 + has_second; k++)
                _mm512_mask_storeu_epi32(grad_rows + (r + k) * grad_rows_stride + c0 / 2, words,
                                         (__m512i)_mm512_cvtne2ps_pbh(grads[k][1], grads[k][0]));
        }
    }
}

const sdpa_bf16_kernels attn_sdpa_bf16_kernels_avx512bf16 = {
    bf16_gemm, bf16_pack, bf16_softmax_columns, bf16_softmax_grad_rows};

#endif
