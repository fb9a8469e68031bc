/* Low-precision linear layers for inference (quantized_rows.h): packing, the conversion of
 * the activations, the scalar reference, the portable emulation and the dispatch. */
#include "kernels/quantized_rows.h"

#include <math.h>
#include <stdlib.h>

static int64_t inputs_per_group(attn_precision precision)
{
    return precision == ATTN_PRECISION_INT8 ? 4 : 2;
}

/* The packed word holding input i of output o, and the input's place in it. */
static uint32_t *packed_word(const attn_quantized_matrix *m, int64_t o, int64_t i)
{
    const int64_t g = i / inputs_per_group(m->precision);
    return m->packed + ((o / QUANTIZED_TILE) * m->groups + g) * QUANTIZED_TILE + o % QUANTIZED_TILE;
}

static attn_status allocate(const char *fn, attn_precision precision, int64_t out, int64_t in,
                            attn_quantized_matrix *m)
{
    memset(m, 0, sizeof *m);
    m->precision = precision;
    m->out = out;
    m->in = in;
    const int64_t per = inputs_per_group(precision);
    m->groups = (in + per - 1) / per;
    m->tiles = (out + QUANTIZED_TILE - 1) / QUANTIZED_TILE;
    const size_t words = (size_t)(m->tiles * m->groups * QUANTIZED_TILE);
    m->packed = attn_aligned_alloc(words * sizeof(uint32_t));
    int ok = m->packed != NULL;
    if (ok)
        memset(m->packed, 0, words * sizeof(uint32_t));
    if (precision == ATTN_PRECISION_INT8) {
        m->scale = malloc((size_t)out * sizeof(float));
        m->row_sum = malloc((size_t)out * sizeof(int32_t));
        ok = ok && m->scale != NULL && m->row_sum != NULL;
    }
    if (!ok) {
        attn_quantized_matrix_free(m);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for a %lld x %lld %s matrix",
                         fn, (long long)out, (long long)in, attn_precision_name(precision));
    }
    return ATTN_OK;
}

static void put_int8(attn_quantized_matrix *m, int64_t o, int64_t i, int8_t q)
{
    uint32_t *word = packed_word(m, o, i);
    const int shift = (int)(i % 4) * 8;
    *word = (*word & ~(0xffu << shift)) | ((uint32_t)(uint8_t)q << shift);
}

static int8_t get_int8(const attn_quantized_matrix *m, int64_t o, int64_t i)
{
    return (int8_t)(uint8_t)(*packed_word(m, o, i) >> ((i % 4) * 8));
}

static void put_bf16(attn_quantized_matrix *m, int64_t o, int64_t i, uint16_t h)
{
    uint32_t *word = packed_word(m, o, i);
    const int shift = (int)(i % 2) * 16;
    *word = (*word & ~(0xffffu << shift)) | ((uint32_t)h << shift);
}

static uint16_t get_bf16(const attn_quantized_matrix *m, int64_t o, int64_t i)
{
    return (uint16_t)(*packed_word(m, o, i) >> ((i % 2) * 16));
}

static void sum_rows(attn_quantized_matrix *m)
{
    for (int64_t o = 0; o < m->out; o++) {
        int32_t sum = 0;
        for (int64_t i = 0; i < m->in; i++)
            sum += get_int8(m, o, i);
        m->row_sum[o] = sum;
    }
}

attn_status attn_quantized_matrix_create(const char *fn, attn_precision precision, int64_t out,
                                         int64_t in, const float *w, attn_quantized_matrix *m)
{
    ATTN_CHECK_ARG(precision == ATTN_PRECISION_INT8 || precision == ATTN_PRECISION_BF16,
                   "%s: weights are stored in int8 or bf16, not %s", fn,
                   attn_precision_name(precision));
    ATTN_TRY(allocate(fn, precision, out, in, m));
    for (int64_t o = 0; o < out; o++) {
        const float *row = w + o * in;
        if (precision == ATTN_PRECISION_BF16) {
            for (int64_t i = 0; i < in; i++)
                put_bf16(m, o, i, attn_bf16_from_float(row[i]));
            continue;
        }
        float largest = 0.0f;
        for (int64_t i = 0; i < in; i++)
            largest = fmaxf(largest, fabsf(row[i]));
        const float scale = largest > 0.0f ? largest / 127.0f : 1.0f;
        m->scale[o] = scale;
        for (int64_t i = 0; i < in; i++) {
            const float q = nearbyintf(row[i] / scale);
            put_int8(m, o, i, (int8_t)fmaxf(-127.0f, fminf(127.0f, q)));
        }
    }
    if (precision == ATTN_PRECISION_INT8)
        sum_rows(m);
    return ATTN_OK;
}

attn_status attn_quantized_matrix_from_int8(const char *fn, int64_t out, int64_t in,
                                            const int8_t *q, const float *scale,
                                            attn_quantized_matrix *m)
{
    for (int64_t o = 0; o < out; o++)
        ATTN_CHECK_ARG(isfinite(scale[o]) && scale[o] > 0.0f,
                       "%s: row %lld has the scale %g (a scale must be finite and positive)", fn,
                       (long long)o, (double)scale[o]);
    ATTN_TRY(allocate(fn, ATTN_PRECISION_INT8, out, in, m));
    for (int64_t o = 0; o < out; o++) {
        m->scale[o] = scale[o];
        for (int64_t i = 0; i < in; i++)
            put_int8(m, o, i, q[o * in + i]);
    }
    sum_rows(m);
    return ATTN_OK;
}

void attn_quantized_matrix_free(attn_quantized_matrix *m)
{
    if (m == NULL)
        return;
    attn_aligned_free(m->packed);
    free(m->scale);
    free(m->row_sum);
    m->packed = NULL;
    m->scale = NULL;
    m->row_sum = NULL;
}

void attn_quantized_matrix_int8_row(const attn_quantized_matrix *m, int64_t o, int8_t *q)
{
    for (int64_t i = 0; i < m->in; i++)
        q[i] = get_int8(m, o, i);
}

void attn_quantized_matrix_bf16_row(const attn_quantized_matrix *m, int64_t o, uint16_t *bits)
{
    for (int64_t i = 0; i < m->in; i++)
        bits[i] = get_bf16(m, o, i);
}

void attn_quantized_matrix_float_row(const attn_quantized_matrix *m, int64_t o, float *w)
{
    for (int64_t i = 0; i < m->in; i++)
        w[i] = m->precision == ATTN_PRECISION_INT8 ? (float)get_int8(m, o, i) * m->scale[o]
                                                   : attn_bf16_to_float(get_bf16(m, o, i));
}

/* ---- activations --------------------------------------------------------------------------- */

typedef struct scratch_layout {
    uint32_t *x;
    float *x_scale;
    int32_t *x_zero;
} scratch_layout;

size_t attn_quantized_linear_scratch_bytes(int64_t rows, const attn_quantized_matrix *w)
{
    return (size_t)(rows * w->groups) * sizeof(uint32_t) + (size_t)rows * sizeof(float) +
           (size_t)rows * sizeof(int32_t);
}

static scratch_layout layout_of(void *scratch, int64_t rows, const attn_quantized_matrix *w)
{
    scratch_layout s;
    s.x = scratch;
    s.x_scale = (float *)(void *)(s.x + rows * w->groups);
    s.x_zero = (int32_t *)(void *)(s.x_scale + rows);
    return s;
}

/* Row r of x as bytes (see quantized_rows.h for the choice of zero and scale); the AVX-512,
 * AVX2 and NEON versions (attn_int8_quantize_row_avx512vnni, _avx2, _neon) give the same
 * bytes: the extremes are exact in any order and the rest is element-wise. */
static void quantize_row(const float *x, int64_t in, int64_t groups, uint32_t *packed, float *scale,
                         int32_t *zero)
{
    float lowest = 0.0f, largest = 0.0f;
    for (int64_t i = 0; i < in; i++) {
        lowest = x[i] < lowest ? x[i] : lowest;
        largest = fabsf(x[i]) > largest ? fabsf(x[i]) : largest;
    }
    *zero = attn_int8_row_scale(lowest, largest, scale);
    const float levels = *zero ? 127.0f : 255.0f, inverse = 1.0f / *scale;
    uint8_t *bytes = (uint8_t *)packed;
    for (int64_t i = 0; i < in; i++) {
        float q = nearbyintf(x[i] * inverse);
        q = q > levels ? levels : q < -levels ? -levels : q;
        bytes[i] = (uint8_t)((int32_t)q + *zero);
    }
    memset(bytes + in, 0, (size_t)(groups * 4 - in));
}

static void round_row(const float *x, int64_t in, int64_t groups, uint32_t *packed)
{
    uint16_t *halves = (uint16_t *)packed;
    for (int64_t i = 0; i < in; i++)
        halves[i] = attn_bf16_from_float(x[i]);
    memset(halves + in, 0, (size_t)(groups * 2 - in) * sizeof(uint16_t));
}

/* ---- reference and emulation --------------------------------------------------------------- */

/* The textbook sums over the stored values: int64 for int8, double over the bf16 values. */
static void reference_tile(const attn_quantized_matrix *w, const quantized_rows *x, int64_t rows,
                           int64_t tile, const float *b, float *y, int64_t ldy)
{
    const int64_t o0 = tile * QUANTIZED_TILE, width = attn_quantized_tile_width(w, tile);
    for (int64_t r = 0; r < rows; r++) {
        const uint32_t *row = x->x + r * w->groups;
        if (w->precision == ATTN_PRECISION_INT8) {
            const uint8_t *u = (const uint8_t *)row;
            int32_t sums[QUANTIZED_TILE];
            for (int64_t j = 0; j < width; j++) {
                int64_t sum = 0;
                for (int64_t i = 0; i < w->in; i++)
                    sum += (int64_t)u[i] * get_int8(w, o0 + j, i);
                sums[j] = (int32_t)sum;
            }
            attn_int8_finish(w, sums, x->x_scale[r], x->x_zero[r], b, o0, width, y + r * ldy);
        } else {
            const uint16_t *h = (const uint16_t *)row;
            for (int64_t j = 0; j < width; j++) {
                double sum = b != NULL ? (double)b[o0 + j] : 0.0;
                for (int64_t i = 0; i < w->in; i++)
                    sum += (double)attn_bf16_to_float(h[i]) *
                           (double)attn_bf16_to_float(get_bf16(w, o0 + j, i));
                y[r * ldy + o0 + j] = (float)sum;
            }
        }
    }
}

/* The hardware's arithmetic in plain C: the same integer sums as vpdpbusd; fp32 sums in
 * vdpbf16ps's order (the odd product, then the even one, each exact in fp32). */
static void emulated_tile(const attn_quantized_matrix *w, const quantized_rows *x, int64_t rows,
                          int64_t tile, const float *b, float *y, int64_t ldy)
{
    const int64_t o0 = tile * QUANTIZED_TILE, width = attn_quantized_tile_width(w, tile);
    const uint32_t *packed = w->packed + tile * w->groups * QUANTIZED_TILE;
    for (int64_t r = 0; r < rows; r++) {
        const uint32_t *row = x->x + r * w->groups;
        if (w->precision == ATTN_PRECISION_INT8) {
            int32_t sums[QUANTIZED_TILE] = {0};
            for (int64_t g = 0; g < w->groups; g++) {
                const uint32_t xg = row[g];
                const uint32_t *wg = packed + g * QUANTIZED_TILE;
                for (int j = 0; j < QUANTIZED_TILE; j++)
                    for (int k = 0; k < 4; k++)
                        sums[j] += (int32_t)(uint8_t)(xg >> (8 * k)) *
                                   (int32_t)(int8_t)(uint8_t)(wg[j] >> (8 * k));
            }
            attn_int8_finish(w, sums, x->x_scale[r], x->x_zero[r], b, o0, width, y + r * ldy);
        } else {
            float sums[QUANTIZED_TILE] = {0};
            for (int64_t g = 0; g < w->groups; g++) {
                const float x0 = attn_bf16_to_float((uint16_t)row[g]);
                const float x1 = attn_bf16_to_float((uint16_t)(row[g] >> 16));
                const uint32_t *wg = packed + g * QUANTIZED_TILE;
                for (int j = 0; j < QUANTIZED_TILE; j++) {
                    sums[j] += x1 * attn_bf16_to_float((uint16_t)(wg[j] >> 16));
                    sums[j] += x0 * attn_bf16_to_float((uint16_t)wg[j]);
                }
            }
            attn_bf16_finish(sums, b, o0, width, y + r * ldy);
        }
    }
}

/* ---- dispatch ------------------------------------------------------------------------------ */

int attn_quantized_native(attn_precision precision)
{
#if defined(__x86_64__)
    if (attn_active_isa() != ATTN_ISA_AVX512)
        return 0;
    if (precision == ATTN_PRECISION_INT8)
        return __builtin_cpu_supports("avx512vnni");
    if (precision == ATTN_PRECISION_BF16)
        return __builtin_cpu_supports("avx512bf16");
#elif defined(__aarch64__)
    /* The ARM paths are levels of ATTN_ISA: selected only where the CPU has them. */
    if (precision == ATTN_PRECISION_INT8 || precision == ATTN_PRECISION_BF16)
        return attn_precision_native(precision);
#else
    (void)precision;
#endif
    return 0;
}

/* Products the path lacks natively run in vectors (quantized_rows_avx2.c, quantized_rows_neon.c)
 * on every path but reference and portable: the one choice of the emulation for the tiles and
 * the rows' conversion. */
static int emulated_in_vectors(void)
{
    const attn_isa isa = attn_active_isa();
#if defined(__x86_64__)
    return isa == ATTN_ISA_AVX2 || isa == ATTN_ISA_AVX512;
#elif defined(__aarch64__)
    return isa == ATTN_ISA_NEON || isa == ATTN_ISA_NEON_DOTPROD || isa == ATTN_ISA_NEON_BF16;
#else
    (void)isa;
    return 0;
#endif
}

static quantized_tile_fn tile_kernel(attn_precision precision)
{
    if (attn_active_isa() == ATTN_ISA_REFERENCE)
        return reference_tile;
#if defined(__x86_64__)
    if (attn_quantized_native(precision))
        return precision == ATTN_PRECISION_INT8 ? attn_int8_tile_avx512vnni
                                                : attn_bf16_tile_avx512bf16;
    if (emulated_in_vectors())
        return precision == ATTN_PRECISION_INT8 ? attn_int8_tile_avx2 : attn_bf16_tile_avx2;
#elif defined(__aarch64__)
    if (attn_quantized_native(precision)) {
        if (precision == ATTN_PRECISION_BF16)
            return attn_bf16_tile_neonbf16;
        return attn_cpu_has_arm_i8mm() ? attn_int8_tile_neoni8mm : attn_int8_tile_neondot;
    }
    if (emulated_in_vectors())
        return precision == ATTN_PRECISION_INT8 ? attn_int8_tile_neon : attn_bf16_tile_neon;
#else
    (void)precision;
#endif
    return emulated_tile;
}

typedef void (*quantize_row_fn)(const float *x, int64_t in, int64_t groups, uint32_t *packed,
                                float *scale, int32_t *zero);

/* The same bytes on every path (see quantize_row). */
static quantize_row_fn row_quantizer(void)
{
#if defined(__x86_64__)
    if (attn_quantized_native(ATTN_PRECISION_INT8))
        return attn_int8_quantize_row_avx512vnni;
    if (emulated_in_vectors())
        return attn_int8_quantize_row_avx2;
#elif defined(__aarch64__)
    if (emulated_in_vectors())
        return attn_int8_quantize_row_neon;
#endif
    return quantize_row;
}

typedef struct convert_job {
    const quantized_linear_args *args;
    const scratch_layout *s;
    quantize_row_fn quantize;
} convert_job;

static void convert_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const convert_job *job = ctx;
    const quantized_linear_args *a = job->args;
    const attn_quantized_matrix *w = a->w;
    for (int64_t r = begin; r < end; r++) {
        const float *x = a->x + r * a->ldx;
        uint32_t *packed = job->s->x + r * w->groups;
        if (w->precision == ATTN_PRECISION_BF16)
            round_row(x, w->in, w->groups, packed);
        else
            job->quantize(x, w->in, w->groups, packed, &job->s->x_scale[r], &job->s->x_zero[r]);
    }
}

typedef struct tile_job {
    const quantized_linear_args *args;
    const quantized_rows *rows;
    quantized_tile_fn fn;
} tile_job;

static void tile_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const tile_job *job = ctx;
    const quantized_linear_args *a = job->args;
    for (int64_t tile = begin; tile < end; tile++)
        job->fn(a->w, job->rows, a->rows, tile, a->b, a->y, a->ldy);
}

/* Below this many multiply-adds per thread, waking a thread costs more than it saves. */
#define QUANTIZED_MIN_WORK_PER_THREAD 262144
#define QUANTIZED_MIN_CONVERT_PER_THREAD 32768

void attn_quantized_linear(const quantized_linear_args *a)
{
    const attn_quantized_matrix *w = a->w;
    const scratch_layout s = layout_of(a->scratch, a->rows, w);
    const convert_job convert = {a, &s, row_quantizer()};
    attn_parallel_for(a->rows, QUANTIZED_MIN_CONVERT_PER_THREAD / w->in + 1, convert_range,
                      (void *)&convert);
    const quantized_rows rows = {s.x, s.x_scale, s.x_zero};
    const tile_job job = {a, &rows, tile_kernel(w->precision)};
    const int64_t per_tile = a->rows * w->in * QUANTIZED_TILE;
    const int64_t min_chunk =
        per_tile >= QUANTIZED_MIN_WORK_PER_THREAD ? 1 : QUANTIZED_MIN_WORK_PER_THREAD / per_tile;
    attn_parallel_for(w->tiles, min_chunk, tile_range, (void *)&job);
}
