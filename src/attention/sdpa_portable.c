/* Portable kernels of the tiled attention: plain C whose inner loops run along contiguous
 * rows so the compiler can vectorise them for whatever the target offers. */
#include "attention/sdpa_internal.h"

#include <math.h>
#include <string.h>

/* Register block of C: 4 rows x 8 columns of accumulators fit the 16 registers of the
 * baseline x86-64 vector unit (SSE2) along with a row of B. */
enum { BLOCK_ROWS = 4, BLOCK_COLS = 8 };

/* A block of up to BLOCK_ROWS x BLOCK_COLS of C; full blocks take the fixed-size loops the
 * compiler unrolls and vectorises. */
static void gemm_block(int64_t rows, int64_t width, int64_t k, const float *a, int64_t a_row_stride,
                       int64_t a_inner_stride, const float *b, int64_t ldb, float *c, int64_t ldc,
                       sdpa_gemm_mode mode, const float *column_scale)
{
    float acc[BLOCK_ROWS][BLOCK_COLS] = {{0}};
    if (rows == BLOCK_ROWS && width == BLOCK_COLS) {
        for (int64_t p = 0; p < k; p++) {
            const float *b_row = b + p * ldb;
            for (int r = 0; r < BLOCK_ROWS; r++) {
                const float a_elem = a[r * a_row_stride + p * a_inner_stride];
                for (int x = 0; x < BLOCK_COLS; x++)
                    acc[r][x] += a_elem * b_row[x];
            }
        }
    } else {
        for (int64_t p = 0; p < k; p++) {
            const float *b_row = b + p * ldb;
            for (int64_t r = 0; r < rows; r++) {
                const float a_elem = a[r * a_row_stride + p * a_inner_stride];
                for (int64_t x = 0; x < width; x++)
                    acc[r][x] += a_elem * b_row[x];
            }
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        float *c_row = c + r * ldc;
        for (int64_t x = 0; x < width; x++)
            c_row[x] = mode == SDPA_GEMM_STORE ? acc[r][x]
                       : mode == SDPA_GEMM_ADD ? c_row[x] + acc[r][x]
                                               : c_row[x] * column_scale[x] + acc[r][x];
    }
}

static void portable_gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t a_row_stride,
                          int64_t a_inner_stride, const float *b, int64_t ldb, float *c,
                          int64_t ldc, sdpa_gemm_mode mode, const float *column_scale)
{
    for (int64_t n0 = 0; n0 < n; n0 += BLOCK_COLS) {
        const int64_t width = n - n0 < BLOCK_COLS ? n - n0 : BLOCK_COLS;
        for (int64_t r0 = 0; r0 < m; r0 += BLOCK_ROWS)
            gemm_block(m - r0 < BLOCK_ROWS ? m - r0 : BLOCK_ROWS, width, k, a + r0 * a_row_stride,
                       a_row_stride, a_inner_stride, b + n0, ldb, c + r0 * ldc + n0, ldc, mode,
                       column_scale != NULL ? column_scale + n0 : NULL);
    }
}

static void portable_transpose(const float *src, int64_t src_stride, int64_t rows, int64_t cols,
                               float *dst, int64_t dst_stride, const float *column_scale,
                               float scale)
{
    for (int64_t c = 0; c < cols; c++) {
        const float factor = column_scale != NULL ? column_scale[c] : scale;
        for (int64_t r = 0; r < rows; r++)
            dst[c * dst_stride + r] = src[r * src_stride + c] * factor;
    }
}

/* The same range reduction and polynomial as the SIMD kernels (sdpa_simd.h), in scalar C.
 * Rounding to an integer adds and subtracts 1.5 * 2^23, exact for |t| < 2^22 in the default
 * rounding mode. Results below FLT_MIN flush to 0; a NaN stays NaN. */
static inline float portable_exp(float x)
{
    const float input_min = -87.33654f, input_max = 88.37f, round_magic = 12582912.0f;
    if (!(x >= input_min))
        return x < input_min ? 0.0f : x;
    if (x > input_max)
        x = input_max;
    float t = x * 1.44269504088896341f;
    float n = (t + round_magic) - round_magic;
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723e-6f;
    float poly = 1.381461275741458e-3f;
    poly = poly * r + 8.368710055947304e-3f;
    poly = poly * r + 4.166838899254799e-2f;
    poly = poly * r + 1.666652113199234e-1f;
    poly = poly * r + 4.999999403953552e-1f;
    float e_r = (poly * (r * r) + r) + 1.0f;
    uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
    float two_n;
    memcpy(&two_n, &bits, sizeof two_n);
    return e_r * two_n;
}

static void portable_softmax_columns(float *scores, int64_t rows, int64_t cols, int64_t ld,
                                     float *running_max, float *running_sum, float *rescale)
{
    for (int64_t c = 0; c < cols; c++)
        rescale[c] = -INFINITY; /* the tile's column maxima, for now */
    for (int64_t r = 0; r < rows; r++) {
        const float *row = scores + r * ld;
        for (int64_t c = 0; c < cols; c++)
            rescale[c] = row[c] > rescale[c] ? row[c] : rescale[c];
    }
    for (int64_t c = 0; c < cols; c++) {
        float new_max = running_max[c] > rescale[c] ? running_max[c] : rescale[c];
        float shift = new_max == -INFINITY ? 0.0f : new_max;
        rescale[c] = portable_exp(running_max[c] - shift);
        running_sum[c] *= rescale[c];
        running_max[c] = new_max;
    }
    for (int64_t r = 0; r < rows; r++) {
        float *row = scores + r * ld;
        for (int64_t c = 0; c < cols; c++) {
            float shift = running_max[c] == -INFINITY ? 0.0f : running_max[c];
            row[c] = portable_exp(row[c] - shift);
            running_sum[c] += row[c];
        }
    }
}

static void portable_exp_columns(float *scores, int64_t rows, int64_t cols, int64_t ld,
                                 const float *shift)
{
    for (int64_t r = 0; r < rows; r++) {
        float *row = scores + r * ld;
        for (int64_t c = 0; c < cols; c++)
            row[c] = shift[c] == -INFINITY ? 0.0f : portable_exp(row[c] - shift[c]);
    }
}

static void portable_softmax_grad_rows(float *scores, float *grad, int64_t rows, int64_t cols,
                                       int64_t ld, const float *lse, const float *delta,
                                       float scale)
{
    for (int64_t r = 0; r < rows; r++) {
        float *s_row = scores + r * ld, *g_row = grad + r * ld;
        if (lse[r] == -INFINITY) {
            for (int64_t c = 0; c < cols; c++)
                s_row[c] = g_row[c] = 0.0f;
            continue;
        }
        for (int64_t c = 0; c < cols; c++) {
            float prob = portable_exp(s_row[c] - lse[r]);
            s_row[c] = prob;
            g_row[c] = prob * (g_row[c] - delta[r]) * scale;
        }
    }
}

const sdpa_kernels attn_sdpa_kernels_portable = {
    portable_gemm,        portable_transpose,         portable_softmax_columns,
    portable_exp_columns, portable_softmax_grad_rows,
};
