/* The emulated tiles of quantized_rows.h on AArch64's base Advanced SIMD, for processors
 * without the dot product (int8 on the Cortex-A53 and A72 of the Raspberry Pi 3 and 4) or
 * without BF16 (bf16 on the dot product's level: the Cortex-A76 of the Pi 5, Neoverse N1): the
 * portable emulation's bits, four outputs a vector, as quantized_rows_avx2.c gives them on x86.
 *
 * int8: vld4q de-interleaves sixteen outputs' groups by input position, so one vector holds
 * input k of sixteen outputs. Widened to int16, it is multiplied by the row's input k as a
 * lane (vmlal_lane_s16) into int32 lanes: each product is exact (255 * 127 fits), and integer
 * sums do not depend on their order.
 * bf16: a bf16 value is the top half of a float, so a mask or a shift makes it one. Multiply,
 * then add, in the emulation's order (the odd input, then the even one): the C standard mode
 * the library is built in leaves vmulq and vaddq unfused, and an FMA would round a product
 * below fp32's normal range differently from the emulation.
 *
 * A pass takes up to four rows by sixteen outputs: 16 accumulators, the one input position's
 * (int8) or one vector's (bf16) weights and the rows' inputs stay within the 32 vector
 * registers, and each weight vector loaded serves every row of the pass. */
#include "kernels/quantized_rows.h"

#include <arm_neon.h>
#include <string.h>

enum { PASS_OUTPUTS = 16, VECTOR_OUTPUTS = 4 };

/* The four unsigned bytes of a row's group as int16 lanes 0-3. */
static inline int16x4_t widen_group(uint32_t word)
{
    return vreinterpret_s16_u16(vget_low_u16(vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(word)))));
}

static inline __attribute__((always_inline)) void int8_rows(const attn_quantized_matrix *w,
                                                            const quantized_rows *x, int64_t r0,
                                                            const int n, int64_t tile,
                                                            const float *b, float *y, int64_t ldy)
{
    const int64_t groups = w->groups;
    const uint32_t *packed = w->packed + tile * groups * QUANTIZED_TILE;
    const uint32_t *rows = x->x + r0 * groups;
    int32_t sums[QUANTIZED_ROWS_PER_PASS][QUANTIZED_TILE];
    for (int c = 0; c < QUANTIZED_TILE; c += PASS_OUTPUTS) {
        int32x4_t acc[QUANTIZED_ROWS_PER_PASS][PASS_OUTPUTS / VECTOR_OUTPUTS];
        _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            _Pragma("GCC unroll 4") for (int v = 0; v < PASS_OUTPUTS / VECTOR_OUTPUTS; v++)
                acc[r][v] = vdupq_n_s32(0);
        for (int64_t g = 0; g < groups; g++) {
            const uint8x16x4_t by_input =
                vld4q_u8((const uint8_t *)(packed + g * QUANTIZED_TILE + c));
            int16x4_t xr[QUANTIZED_ROWS_PER_PASS];
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++) xr[r] =
                widen_group(rows[r * groups + g]);
/* input k: its weights for outputs 0-7 and 8-15 of the pass, times the row's input k */
#define INPUT_POSITION(k)                                                                         \
    {                                                                                             \
        const int8x16_t wk = vreinterpretq_s8_u8(by_input.val[k]);                                \
        const int16x8_t low = vmovl_s8(vget_low_s8(wk)), high = vmovl_high_s8(wk);               \
        _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)                                       \
        {                                                                                         \
            acc[r][0] = vmlal_lane_s16(acc[r][0], vget_low_s16(low), xr[r], k);                  \
            acc[r][1] = vmlal_high_lane_s16(acc[r][1], low, xr[r], k);                           \
            acc[r][2] = vmlal_lane_s16(acc[r][2], vget_low_s16(high), xr[r], k);                 \
            acc[r][3] = vmlal_high_lane_s16(acc[r][3], high, xr[r], k);                          \
        }                                                                                         \
    }
            INPUT_POSITION(0)
            INPUT_POSITION(1)
            INPUT_POSITION(2)
            INPUT_POSITION(3)
#undef INPUT_POSITION
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            _Pragma("GCC unroll 4") for (int v = 0; v < PASS_OUTPUTS / VECTOR_OUTPUTS; v++)
                vst1q_s32(sums[r] + c + v * VECTOR_OUTPUTS, acc[r][v]);
    }
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
        attn_int8_finish(w, sums[r], x->x_scale[r0 + r], x->x_zero[r0 + r], b, o0, width,
                         y + (r0 + r) * ldy);
}

static inline __attribute__((always_inline)) void bf16_rows(const attn_quantized_matrix *w,
                                                            const quantized_rows *x, int64_t r0,
                                                            const int n, int64_t tile,
                                                            const float *b, float *y, int64_t ldy)
{
    const int64_t groups = w->groups;
    const uint32_t *packed = w->packed + tile * groups * QUANTIZED_TILE;
    const uint32_t *rows = x->x + r0 * groups;
    const uint32x4_t high_half = vdupq_n_u32(0xffff0000u);
    float sums[QUANTIZED_ROWS_PER_PASS][QUANTIZED_TILE];
    for (int c = 0; c < QUANTIZED_TILE; c += PASS_OUTPUTS) {
        float32x4_t acc[QUANTIZED_ROWS_PER_PASS][PASS_OUTPUTS / VECTOR_OUTPUTS];
        _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            _Pragma("GCC unroll 4") for (int v = 0; v < PASS_OUTPUTS / VECTOR_OUTPUTS; v++)
                acc[r][v] = vdupq_n_f32(0.0f);
        for (int64_t g = 0; g < groups; g++) {
            /* lane 0 the row's odd input, lane 1 its even one: the order of the sums */
            float32x2_t xr[QUANTIZED_ROWS_PER_PASS];
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            {
                const uint32_t word = rows[r * groups + g];
                xr[r] = vreinterpret_f32_u32(
                    vset_lane_u32(word << 16, vdup_n_u32(word & 0xffff0000u), 1));
            }
            const uint32_t *wg = packed + g * QUANTIZED_TILE + c;
            _Pragma("GCC unroll 4") for (int v = 0; v < PASS_OUTPUTS / VECTOR_OUTPUTS; v++)
            {
                const uint32x4_t wv = vld1q_u32(wg + v * VECTOR_OUTPUTS);
                const float32x4_t odd = vreinterpretq_f32_u32(vandq_u32(wv, high_half));
                const float32x4_t even = vreinterpretq_f32_u32(vshlq_n_u32(wv, 16));
                _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
                {
                    acc[r][v] = vaddq_f32(acc[r][v], vmulq_lane_f32(odd, xr[r], 0));
                    acc[r][v] = vaddq_f32(acc[r][v], vmulq_lane_f32(even, xr[r], 1));
                }
            }
        }
        _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            _Pragma("GCC unroll 4") for (int v = 0; v < PASS_OUTPUTS / VECTOR_OUTPUTS; v++)
                vst1q_f32(sums[r] + c + v * VECTOR_OUTPUTS, acc[r][v]);
    }
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
        attn_bf16_finish(sums[r], b, o0, width, y + (r0 + r) * ldy);
}

void attn_int8_tile_neon(const attn_quantized_matrix *w, const quantized_rows *x, int64_t rows,
                         int64_t tile, const float *b, float *y, int64_t ldy)
{
    QUANTIZED_ROW_PASSES(int8_rows, w, x, rows, tile, b, y, ldy);
}

void attn_bf16_tile_neon(const attn_quantized_matrix *w, const quantized_rows *x, int64_t rows,
                         int64_t tile, const float *b, float *y, int64_t ldy)
{
    QUANTIZED_ROW_PASSES(bf16_rows, w, x, rows, tile, b, y, ldy);
}

/* The first n (0 to 4) of x's floats, zero past them (nothing past x[n - 1] is read). */
static inline float32x4_t load_first(const float *x, int64_t n)
{
    float lanes[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t l = 0; l < n; l++)
        lanes[l] = x[l];
    return vld1q_f32(lanes);
}

static inline float32x4_t load_upto(const float *x, int64_t n)
{
    return n >= 4 ? vld1q_f32(x) : load_first(x, n);
}

/* x < y ? x : y and the like as the scalar conditional gives them, NaN operands included
 * (a compare with a NaN is false), where vminq and vmaxq would return the NaN. */
static inline float32x4_t select_less(float32x4_t x, float32x4_t y)
{
    return vbslq_f32(vcltq_f32(x, y), x, y);
}

static inline float32x4_t select_greater(float32x4_t x, float32x4_t y)
{
    return vbslq_f32(vcgtq_f32(x, y), x, y);
}

/* quantize_row of quantized_rows.c, eight floats at a time, with the same bytes: the extremes
 * are exact in any order (the zeros past the row's end change neither, as both start at
 * zero), every comparison is the scalar one, vrndnq rounds to nearest even as nearbyintf does
 * by default, and vcvtq then keeps the low byte of the same int32 (a NaN converts to 0 in
 * both). */
void attn_int8_quantize_row_neon(const float *x, int64_t in, int64_t groups, uint32_t *packed,
                                 float *scale, int32_t *zero)
{
    float32x4_t lowest = vdupq_n_f32(0.0f), largest = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < in; i += 4) {
        const float32x4_t v = load_upto(x + i, in - i);
        lowest = select_less(v, lowest);
        largest = select_greater(vabsq_f32(v), largest);
    }
    float lanes_lowest[4], lanes_largest[4];
    vst1q_f32(lanes_lowest, lowest);
    vst1q_f32(lanes_largest, largest);
    float row_lowest = 0.0f, row_largest = 0.0f;
    for (int k = 0; k < 4; k++) {
        row_lowest = lanes_lowest[k] < row_lowest ? lanes_lowest[k] : row_lowest;
        row_largest = lanes_largest[k] > row_largest ? lanes_largest[k] : row_largest;
    }
    *zero = attn_int8_row_scale(row_lowest, row_largest, scale);
    const float levels = *zero ? 127.0f : 255.0f;
    const float32x4_t inverse = vdupq_n_f32(1.0f / *scale), high = vdupq_n_f32(levels),
                      low = vdupq_n_f32(-levels);
    const int32x4_t shift = vdupq_n_s32(*zero);
    uint8_t *bytes = (uint8_t *)packed;
    for (int64_t i = 0; i < in; i += 8) {
        int32x4_t q[2];
        for (int h = 0; h < 2; h++) {
            const float32x4_t v = load_upto(x + i + 4 * h, in - i - 4 * h);
            float32x4_t r = vrndnq_f32(vmulq_f32(v, inverse));
            r = vbslq_f32(vcgtq_f32(r, high), high, r);
            r = vbslq_f32(vcltq_f32(r, low), low, r);
            q[h] = vaddq_s32(vcvtq_s32_f32(r), shift);
        }
        const uint16x8_t halves = vcombine_u16(vmovn_u32(vreinterpretq_u32_s32(q[0])),
                                               vmovn_u32(vreinterpretq_u32_s32(q[1])));
        uint8_t eight[8];
        vst1_u8(eight, vmovn_u16(halves));
        memcpy(bytes + i, eight, (size_t)(in - i >= 8 ? 8 : in - i));
    }
    memset(bytes + in, 0, (size_t)(groups * 4 - in));
}
