/* Linear layers in low precision for inference, y [rows, out] = x [rows, in] W^T + b, with W
 * stored once in int8 or bfloat16 and x converted at every call. Not part of the public API.
 *
 * int8: W per output row, symmetric: scale = max |w| / 127, q = round(w / scale) in
 * [-127, 127]. x per row at run time, as unsigned bytes u = round(x / s) + zero with
 *   - zero 0 and s = max x / 255 when the row has no negative value (ReLU outputs: the whole
 *     byte for the one sign there is),
 *   - zero 128 and s = max |x| / 127 otherwise (symmetric, so 0 stays exact),
 * because vpdpbusd multiplies unsigned by signed bytes. Then sum u q = sum (x / s) q +
 * zero * sum q, so y = s * scale * (sum u q - zero * row_sum) + b with row_sum = sum q
 * computed once. Each product u q is at most 255 * 127 and four of them fit an int32 lane
 * without saturation (vpdpbusd, not vpdpbusds), so the integer sums are exact and every path
 * (the scalar reference, the portable emulation, AVX512_VNNI) gives the same bits.
 *
 * bf16: W and x rounded to bfloat16 (round to nearest even), products accumulated in fp32
 * (vdpbf16ps: two products per lane, exact in fp32, added odd then even).
 *
 * Layout: W is packed in tiles of 64 outputs, each [groups][64 outputs][one 32-bit group of
 * four int8 or two bf16 consecutive inputs], zero past out and in, so a 64-byte vector holds
 * one group of sixteen outputs and a row's group is one broadcast 32-bit word. */
#ifndef ATTN_KERNELS_QUANTIZED_ROWS_H
#define ATTN_KERNELS_QUANTIZED_ROWS_H

#include "core/internal.h"
#include "kernels/bf16.h"

#include <string.h>

enum { QUANTIZED_TILE = 64 };

typedef struct attn_quantized_matrix {
    attn_precision precision; /* ATTN_PRECISION_INT8 or ATTN_PRECISION_BF16 */
    int64_t out, in;
    int64_t groups;   /* 32-bit groups per output: in / 4 (int8) or in / 2 (bf16), rounded up */
    int64_t tiles;    /* out / 64 rounded up */
    uint32_t *packed; /* [tiles][groups][64] */
    float *scale;     /* int8: [out], the dequantized weight is q * scale; NULL for bf16 */
    int32_t *row_sum; /* int8: [out], sum of the row's q; NULL for bf16 */
} attn_quantized_matrix;

/* Quantizes (int8) or rounds (bf16) w [out, in] into m, whose buffers it allocates (free
 * them with attn_quantized_matrix_free). fn names the caller in messages. */
ATTN_INTERNAL attn_status attn_quantized_matrix_create(const char *fn, attn_precision precision,
                                                       int64_t out, int64_t in, const float *w,
                                                       attn_quantized_matrix *m);
/* int8 from stored values: q [out, in] and scale [out] (a quantized model file). */
ATTN_INTERNAL attn_status attn_quantized_matrix_from_int8(const char *fn, int64_t out, int64_t in,
                                                          const int8_t *q, const float *scale,
                                                          attn_quantized_matrix *m);
ATTN_INTERNAL void attn_quantized_matrix_free(attn_quantized_matrix *m);
/* Stored values of row o: int8 q[in] (m int8) or bf16 bits[in] (m bf16). */
ATTN_INTERNAL void attn_quantized_matrix_int8_row(const attn_quantized_matrix *m, int64_t o,
                                                  int8_t *q);
ATTN_INTERNAL void attn_quantized_matrix_bf16_row(const attn_quantized_matrix *m, int64_t o,
                                                  uint16_t *bits);
/* Row o as the float values the products use (q * scale, or the bf16 value). */
ATTN_INTERNAL void attn_quantized_matrix_float_row(const attn_quantized_matrix *m, int64_t o,
                                                   float *w);

typedef struct quantized_linear_args {
    int64_t rows;
    const float *x; /* [rows, in], row stride ldx */
    int64_t ldx;
    const attn_quantized_matrix *w;
    const float *b; /* [out] or NULL */
    float *y;       /* [rows, out], row stride ldy */
    int64_t ldy;
    void *scratch; /* attn_quantized_linear_scratch_bytes(rows, w), 64-byte aligned */
} quantized_linear_args;

ATTN_INTERNAL size_t attn_quantized_linear_scratch_bytes(int64_t rows,
                                                         const attn_quantized_matrix *w);
/* Checked by the caller: rows >= 1, the pointers valid. Threads split the tiles of outputs;
 * a row's results never depend on the other rows or the thread count. */
ATTN_INTERNAL void attn_quantized_linear(const quantized_linear_args *a);
/* 1 when the active instruction set runs m's products in hardware (AVX512_VNNI for int8,
 * AVX512_BF16 for bf16; on AArch64 SDOT under neon-dotprod and neon-bf16, BFDOT under
 * neon-bf16), 0 when they are emulated. */
ATTN_INTERNAL int attn_quantized_native(attn_precision precision);

/* The converted activations handed to a tile kernel: packed rows of groups. */
typedef struct quantized_rows {
    const uint32_t *x;     /* [rows][groups] */
    const float *x_scale;  /* int8: [rows] */
    const int32_t *x_zero; /* int8: [rows], 0 or 128 */
} quantized_rows;

/* Outputs [o0, o0 + count) of one row from its exact integer sums: every path ends here,
 * so they agree to the bit. One loop with and one without a bias: a single loop testing b
 * for each output became a masked load of b, which at b NULL (GPT-2's tied output layer)
 * addresses no memory under a zero mask, and AMD's Zen takes a slow assist for each (two
 * thirds of that layer's time). */
static inline void attn_int8_finish(const attn_quantized_matrix *w, const int32_t *sums,
                                    float x_scale, int32_t x_zero, const float *b, int64_t o0,
                                    int64_t count, float *y)
{
    if (b != NULL)
        for (int64_t j = 0; j < count; j++) {
            const int32_t exact = sums[j] - x_zero * w->row_sum[o0 + j];
            y[o0 + j] = (float)exact * (x_scale * w->scale[o0 + j]) + b[o0 + j];
        }
    else
        for (int64_t j = 0; j < count; j++) {
            const int32_t exact = sums[j] - x_zero * w->row_sum[o0 + j];
            y[o0 + j] = (float)exact * (x_scale * w->scale[o0 + j]) + 0.0f;
        }
}

static inline void attn_bf16_finish(const float *sums, const float *b, int64_t o0, int64_t count,
                                    float *y)
{
    if (b != NULL)
        for (int64_t j = 0; j < count; j++)
            y[o0 + j] = sums[j] + b[o0 + j];
    else
        for (int64_t j = 0; j < count; j++)
            y[o0 + j] = sums[j] + 0.0f;
}

/* The activation encoding of a row from its smallest value (<= 0) and largest magnitude:
 * returns the zero point and sets the scale. */
static inline int32_t attn_int8_row_scale(float lowest, float largest, float *scale)
{
    const int unsigned_row = lowest >= 0.0f;
    *scale = largest > 0.0f ? largest / (unsigned_row ? 255.0f : 127.0f) : 1.0f;
    return unsigned_row ? 0 : 128;
}

/* Outputs of tile `tile` that exist: QUANTIZED_TILE, or fewer in the last tile. */
static inline int64_t attn_quantized_tile_width(const attn_quantized_matrix *w, int64_t tile)
{
    const int64_t left = w->out - tile * QUANTIZED_TILE;
    return left < QUANTIZED_TILE ? left : QUANTIZED_TILE;
}

/* The passes of a tile kernel over its rows (AVX2, AVX-512, NEON): QUANTIZED_ROWS_PER_PASS
 * rows at a time, then the remainder with a constant row count for each size, so the loops
 * over rows in rows_fn (the including file's always-inline (w, x, r0, n, tile, b, y, ldy))
 * unroll. */
enum { QUANTIZED_ROWS_PER_PASS = 4 };
#define QUANTIZED_ROW_PASSES(rows_fn, w, x, rows, tile, b, y, ldy)                                \
    do {                                                                                          \
        int64_t pass_row = 0;                                                                     \
        for (; pass_row + QUANTIZED_ROWS_PER_PASS <= (rows); pass_row += QUANTIZED_ROWS_PER_PASS) \
            rows_fn(w, x, pass_row, QUANTIZED_ROWS_PER_PASS, tile, b, y, ldy);                    \
        switch ((rows) - pass_row) {                                                              \
        case 3:                                                                                   \
            rows_fn(w, x, pass_row, 3, tile, b, y, ldy);                                          \
            break;                                                                                \
        case 2:                                                                                   \
            rows_fn(w, x, pass_row, 2, tile, b, y, ldy);                                          \
            break;                                                                                \
        case 1:                                                                                   \
            rows_fn(w, x, pass_row, 1, tile, b, y, ldy);                                          \
            break;                                                                                \
        default:                                                                                  \
            break;                                                                                \
        }                                                                                         \
    } while (0)

ATTN_INTERNAL void attn_int8_quantize_row_avx512vnni(const float *x, int64_t in, int64_t groups,
                                                     uint32_t *packed, float *scale, int32_t *zero);
ATTN_INTERNAL void attn_int8_quantize_row_avx2(const float *x, int64_t in, int64_t groups,
                                               uint32_t *packed, float *scale, int32_t *zero);
ATTN_INTERNAL void attn_int8_quantize_row_neon(const float *x, int64_t in, int64_t groups,
                                               uint32_t *packed, float *scale, int32_t *zero);

/* One tile of 64 outputs for every row, written to y [rows, out] (row stride ldy). */
typedef void (*quantized_tile_fn)(const attn_quantized_matrix *w, const quantized_rows *x,
                                  int64_t rows, int64_t tile, const float *b, float *y,
                                  int64_t ldy);
ATTN_INTERNAL void attn_int8_tile_avx512vnni(const attn_quantized_matrix *w,
                                             const quantized_rows *x, int64_t rows, int64_t tile,
                                             const float *b, float *y, int64_t ldy);
ATTN_INTERNAL void attn_bf16_tile_avx512bf16(const attn_quantized_matrix *w,
                                             const quantized_rows *x, int64_t rows, int64_t tile,
                                             const float *b, float *y, int64_t ldy);
/* The portable emulation's bits on AVX2 (quantized_rows_avx2.c), where neither is native. */
ATTN_INTERNAL void attn_int8_tile_avx2(const attn_quantized_matrix *w, const quantized_rows *x,
                                       int64_t rows, int64_t tile, const float *b, float *y,
                                       int64_t ldy);
ATTN_INTERNAL void attn_bf16_tile_avx2(const attn_quantized_matrix *w, const quantized_rows *x,
                                       int64_t rows, int64_t tile, const float *b, float *y,
                                       int64_t ldy);
/* The portable emulation's bits on AArch64's base Advanced SIMD (quantized_rows_neon.c), where
 * the level has neither the dot product nor BF16 (int8) or not BF16 (bf16). */
ATTN_INTERNAL void attn_int8_tile_neon(const attn_quantized_matrix *w, const quantized_rows *x,
                                       int64_t rows, int64_t tile, const float *b, float *y,
                                       int64_t ldy);
ATTN_INTERNAL void attn_bf16_tile_neon(const attn_quantized_matrix *w, const quantized_rows *x,
                                       int64_t rows, int64_t tile, const float *b, float *y,
                                       int64_t ldy);
/* AArch64: int8 by SDOT (quantized_rows_neondot.c; rows [row_begin, row_end) for the SMMLA
 * kernel's odd last row), by SMMLA for pairs of rows (quantized_rows_neoni8mm.c), bf16 by
 * BFDOT (quantized_rows_neonbf16.c). */
ATTN_INTERNAL void attn_int8_rows_neondot(const attn_quantized_matrix *w, const quantized_rows *x,
                                          int64_t row_begin, int64_t row_end, int64_t tile,
                                          const float *b, float *y, int64_t ldy);
ATTN_INTERNAL void attn_int8_tile_neondot(const attn_quantized_matrix *w, const quantized_rows *x,
                                          int64_t rows, int64_t tile, const float *b, float *y,
                                          int64_t ldy);
ATTN_INTERNAL void attn_int8_tile_neoni8mm(const attn_quantized_matrix *w,
                                           const quantized_rows *x, int64_t rows, int64_t tile,
                                           const float *b, float *y, int64_t ldy);
ATTN_INTERNAL void attn_bf16_tile_neonbf16(const attn_quantized_matrix *w,
                                           const quantized_rows *x, int64_t rows, int64_t tile,
                                           const float *b, float *y, int64_t ldy);

#endif /* ATTN_KERNELS_QUANTIZED_ROWS_H */
