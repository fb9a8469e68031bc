/* The emulated tiles of quantized_rows.h on AVX2 (this file name selects -mavx2 -mfma), for
 * processors without AVX512_VNNI or AVX512_BF16: the same sums as the portable emulation, to
 * the bit, eight lanes at a time.
 *
 * int8: vpmaddubsw would multiply the unsigned bytes by the signed ones directly, but it
 * saturates the sum of two products at int16 (2 * 255 * 127 > 32767). So both sides are
 * widened to int16 and vpmaddwd adds pairs of products into int32 lanes, which is exact;
 * integer sums do not depend on their order, so the bits are the emulation's.
 * bf16: a bf16 value is the top half of a float, so a shift or a mask makes it one. The
 * products go through vmulps and then vaddps, not an FMA, in the emulation's order (the odd
 * input, then the even one): a product of two bf16 values is exact in fp32 only while it stays
 * in fp32's normal range, and outside it an FMA would round differently from the emulation.
 *
 * A pass takes four rows over the 64 outputs of a tile, eight outputs at a time for int8 and
 * sixteen to sixty-four for bf16, so each weight vector loaded serves four rows. The rows' groups are first widened into a small
 * buffer, a chunk of groups at a time, so the inner loop only broadcasts. */
#include "kernels/quantized_rows.h"

#include <immintrin.h>

enum { CHUNK_GROUPS = 128 };

/* The four bytes of a group as four int16 lanes, little-endian in 64 bits. */
static inline uint64_t widen_group(uint32_t word)
{
    return (uint64_t)(word & 0xffu) | (uint64_t)((word >> 8) & 0xffu) << 16 |
           (uint64_t)((word >> 16) & 0xffu) << 32 | (uint64_t)(word >> 24) << 48;
}

static inline int64_t chunk_of(int64_t groups, int64_t g0)
{
    return groups - g0 < CHUNK_GROUPS ? groups - g0 : CHUNK_GROUPS;
}

static inline __attribute__((always_inline)) void int8_rows(const attn_quantized_matrix *w,
                                                            const quantized_rows *x, int64_t r0,
                                                            const int n, int64_t tile,
                                                            const float *b, float *y, int64_t ldy)
{
    const uint32_t *packed = w->packed + tile * w->groups * QUANTIZED_TILE;
    const uint32_t *rows = x->x + r0 * w->groups;
    /* Each output's sum in two halves (inputs 0-1 and 2-3 of its groups), as vpmaddwd leaves
     * them; carried from one chunk to the next and added at the end. */
    int32_t halves[QUANTIZED_ROWS_PER_PASS][2 * QUANTIZED_TILE];
    uint64_t widened[CHUNK_GROUPS][QUANTIZED_ROWS_PER_PASS];
    /* at least one chunk, so a layer without inputs sums to zero */
    for (int64_t g0 = 0; g0 == 0 || g0 < w->groups; g0 += CHUNK_GROUPS) {
        const int64_t count = chunk_of(w->groups, g0);
        for (int64_t g = 0; g < count; g++)
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++) widened[g][r] =
                widen_group(rows[r * w->groups + g0 + g]);
        /* eight outputs: two vectors of four outputs by their group's four inputs */
        for (int o = 0; o < QUANTIZED_TILE; o += 8) {
            __m256i acc[QUANTIZED_ROWS_PER_PASS][2];
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            {
                acc[r][0] = g0 == 0 ? _mm256_setzero_si256()
                                    : _mm256_loadu_si256((const __m256i *)(halves[r] + 2 * o));
                acc[r][1] = g0 == 0
                                ? _mm256_setzero_si256()
                                : _mm256_loadu_si256((const __m256i *)(halves[r] + 2 * o + 8));
            }
            const uint32_t *wg = packed + g0 * QUANTIZED_TILE + o;
            for (int64_t g = 0; g < count; g++, wg += QUANTIZED_TILE) {
                const __m256i w0 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)wg));
                const __m256i w1 =
                    _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wg + 4)));
                _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
                {
                    const __m256i xr = _mm256_set1_epi64x((long long)widened[g][r]);
                    acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(xr, w0));
                    acc[r][1] = _mm256_add_epi32(acc[r][1], _mm256_madd_epi16(xr, w1));
                }
            }
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            {
                _mm256_storeu_si256((__m256i *)(halves[r] + 2 * o), acc[r][0]);
                _mm256_storeu_si256((__m256i *)(halves[r] + 2 * o + 8), acc[r][1]);
            }
        }
    }
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
    {
        int32_t sums[QUANTIZED_TILE];
        for (int j = 0; j < QUANTIZED_TILE; j++)
            sums[j] = halves[r][2 * j] + halves[r][2 * j + 1];
        attn_int8_finish(w, sums, x->x_scale[r0 + r], x->x_zero[r0 + r], b, o0, width,
                         y + (r0 + r) * ldy);
    }
}

static inline __attribute__((always_inline)) void bf16_rows(const attn_quantized_matrix *w,
                                                            const quantized_rows *x, int64_t r0,
                                                            const int n, int64_t tile,
                                                            const float *b, float *y, int64_t ldy)
{
    const uint32_t *packed = w->packed + tile * w->groups * QUANTIZED_TILE;
    const uint32_t *rows = x->x + r0 * w->groups;
    float sums[QUANTIZED_ROWS_PER_PASS][QUANTIZED_TILE];
    /* a group's odd input, then its even one: the order of the sums */
    float widened[CHUNK_GROUPS][QUANTIZED_ROWS_PER_PASS][2];
    const __m256i high_half = _mm256_set1_epi32((int)0xffff0000u);
    /* at least one chunk, so a layer without inputs sums to zero */
    for (int64_t g0 = 0; g0 == 0 || g0 < w->groups; g0 += CHUNK_GROUPS) {
        const int64_t count = chunk_of(w->groups, g0);
        for (int64_t g = 0; g < count; g++)
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
            {
                const uint32_t word = rows[r * w->groups + g0 + g];
                widened[g][r][0] = attn_bf16_to_float((uint16_t)(word >> 16));
                widened[g][r][1] = attn_bf16_to_float((uint16_t)word);
            }
        /* Each output's sum is a chain of dependent adds, so a pass keeps eight chains in
         * flight whatever its row count: sixty-four outputs for one row, thirty-two for two,
         * sixteen for three or four. */
        const int vectors = n == 1 ? 8 : n == 2 ? 4 : 2;
        for (int o = 0; o < QUANTIZED_TILE; o += 8 * vectors) {
            __m256 acc[QUANTIZED_ROWS_PER_PASS][8];
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
                _Pragma("GCC unroll 8") for (int v = 0; v < vectors; v++) acc[r][v] =
                    g0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(sums[r] + o + 8 * v);
            const uint32_t *wg = packed + g0 * QUANTIZED_TILE + o;
            for (int64_t g = 0; g < count; g++, wg += QUANTIZED_TILE)
                _Pragma("GCC unroll 8") for (int v = 0; v < vectors; v++)
                {
                    const __m256i wv = _mm256_loadu_si256((const __m256i *)(wg + 8 * v));
                    const __m256 odd = _mm256_castsi256_ps(_mm256_and_si256(wv, high_half));
                    const __m256 even = _mm256_castsi256_ps(_mm256_slli_epi32(wv, 16));
                    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
                    {
                        acc[r][v] = _mm256_add_ps(
                            acc[r][v], _mm256_mul_ps(_mm256_broadcast_ss(&widened[g][r][0]), odd));
                        acc[r][v] = _mm256_add_ps(
                            acc[r][v], _mm256_mul_ps(_mm256_broadcast_ss(&widened[g][r][1]), even));
                    }
                }
            _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
                _Pragma("GCC unroll 8") for (int v = 0; v < vectors; v++)
                    _mm256_storeu_ps(sums[r] + o + 8 * v, acc[r][v]);
        }
    }
    const int64_t o0 = tile * QUANTIZED_TILE;
    const int64_t width = attn_quantized_tile_width(w, tile);
    _Pragma("GCC unroll 4") for (int r = 0; r < n; r++)
        attn_bf16_finish(sums[r], b, o0, width, y + (r0 + r) * ldy);
}

void attn_int8_tile_avx2(const attn_quantized_matrix *w, const quantized_rows *x, int64_t rows,
                         int64_t tile, const float *b, float *y, int64_t ldy)
{
    QUANTIZED_ROW_PASSES(int8_rows, w, x, rows, tile, b, y, ldy);
}

void attn_bf16_tile_avx2(const attn_quantized_matrix *w, const quantized_rows *x, int64_t rows,
                         int64_t tile, const float *b, float *y, int64_t ldy)
{
    QUANTIZED_ROW_PASSES(bf16_rows, w, x, rows, tile, b, y, ldy);
}

/* The first n (1 to 8) of x's floats, zero past them. */
static inline __m256 load_first(const float *x, int64_t n)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_maskload_ps(x, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), lanes));
}

/* quantize_row of quantized_rows.c, eight floats at a time, with the same bytes: the extremes
 * are exact in any order (the zeros past the row's end change neither, as both start at
 * zero), and each min and max takes its operands in the order that gives the scalar
 * comparison's result for a NaN too. */
void attn_int8_quantize_row_avx2(const float *x, int64_t in, int64_t groups, uint32_t *packed,
                                 float *scale, int32_t *zero)
{
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 lowest = _mm256_setzero_ps(), largest = _mm256_setzero_ps();
    for (int64_t i = 0; i < in; i += 8) {
        const __m256 v = in - i >= 8 ? _mm256_loadu_ps(x + i) : load_first(x + i, in - i);
        lowest = _mm256_min_ps(v, lowest);
        largest = _mm256_max_ps(_mm256_and_ps(v, magnitude), largest);
    }
    float lanes_lowest[8], lanes_largest[8];
    _mm256_storeu_ps(lanes_lowest, lowest);
    _mm256_storeu_ps(lanes_largest, largest);
    float row_lowest = 0.0f, row_largest = 0.0f;
    for (int k = 0; k < 8; k++) {
        row_lowest = lanes_lowest[k] < row_lowest ? lanes_lowest[k] : row_lowest;
        row_largest = lanes_largest[k] > row_largest ? lanes_largest[k] : row_largest;
    }
    *zero = attn_int8_row_scale(row_lowest, row_largest, scale);
    const float levels = *zero ? 127.0f : 255.0f;
    const __m256 inverse = _mm256_set1_ps(1.0f / *scale), high = _mm256_set1_ps(levels),
                 low = _mm256_set1_ps(-levels);
    const __m256i shift = _mm256_set1_epi32(*zero);
    /* the low byte of each int32 lane (the scalar cast's), to the bottom of its 128-bit half */
    const __m256i low_bytes =
        _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12,
                         -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    uint8_t *bytes = (uint8_t *)packed;
    for (int64_t i = 0; i < in; i += 8) {
        const int64_t n = in - i >= 8 ? 8 : in - i;
        const __m256 v = n == 8 ? _mm256_loadu_ps(x + i) : load_first(x + i, n);
        __m256 q = _mm256_round_ps(_mm256_mul_ps(v, inverse),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        q = _mm256_max_ps(low, _mm256_min_ps(high, q));
        const __m256i eight = _mm256_shuffle_epi8(
            _mm256_add_epi32(_mm256_cvttps_epi32(q), shift), low_bytes);
        const uint32_t halves[2] = {(uint32_t)_mm256_extract_epi32(eight, 0),
                                    (uint32_t)_mm256_extract_epi32(eight, 4)};
        memcpy(bytes + i, halves, (size_t)n);
    }
    memset(bytes + in, 0, (size_t)(groups * 4 - in));
}
