/* The low-precision linear layers of inference (src/kernels/quantized_rows.h): int8 gives the
 * same bits on every instruction set (reference, emulation in C or AVX2, AVX512_VNNI, SDOT,
 * SMMLA; the row counts give SMMLA's pairs an odd row and in counts an odd group) and stays
 * within the quantization bound of the float64 product; bf16 meets FlashAttention's rule
 * (error against float64 at most twice that of a naive fp32 sum of the same bf16 operands) on
 * every instruction set, and its AVX2 and NEON emulations give the C emulation's bits; rows and
 * threads do not change a row's bits. */
#include "kernel_testing.h"
#include "kernels/quantized_rows.h"

typedef struct problem {
    int64_t rows, in, out, ldx, ldy;
    float *x, *w, *b, *y;
} problem;

/* Rows alternate between signed values and ReLU-like non-negative ones (the two activation
 * encodings), and the last row of three or more is all zero. */
static problem make_problem(int64_t rows, int64_t in, int64_t out, int with_bias, uint64_t seed)
{
    problem p = {rows, in, out, in + 3, out + 2, NULL, NULL, NULL, NULL};
    p.x = test_floats((size_t)(rows * p.ldx));
    p.w = test_floats((size_t)(out * in));
    p.b = with_bias ? test_floats((size_t)out) : NULL;
    p.y = test_floats((size_t)(rows * p.ldy));
    memset(p.y, 0, sizeof(float) * (size_t)(rows * p.ldy));
    test_fill_uniform(p.x, (size_t)(rows * p.ldx), -1.0f, 1.0f, seed);
    for (int64_t r = 1; r < rows; r += 2)
        for (int64_t i = 0; i < in; i++)
            p.x[r * p.ldx + i] = fabsf(p.x[r * p.ldx + i]);
    if (rows >= 3)
        memset(p.x + (rows - 1) * p.ldx, 0, sizeof(float) * (size_t)in);
    test_fill_uniform(p.w, (size_t)(out * in), -0.5f, 0.5f, seed + 1);
    if (p.b != NULL)
        test_fill_uniform(p.b, (size_t)out, -1.0f, 1.0f, seed + 2);
    return p;
}

static void free_problem(problem *p)
{
    free(p->x);
    free(p->w);
    free(p->b);
    free(p->y);
}

static void run(const problem *p, const attn_quantized_matrix *m)
{
    void *scratch = attn_aligned_alloc(attn_quantized_linear_scratch_bytes(p->rows, m));
    const quantized_linear_args a = {p->rows, p->x, p->ldx, m, p->b, p->y, p->ldy, scratch};
    attn_quantized_linear(&a);
    attn_aligned_free(scratch);
}

static double exact_output(const problem *p, int64_t r, int64_t o)
{
    double sum = p->b != NULL ? (double)p->b[o] : 0.0;
    for (int64_t i = 0; i < p->in; i++)
        sum += (double)p->x[r * p->ldx + i] * (double)p->w[o * p->in + i];
    return sum;
}

static const int64_t row_counts[] = {1, 3, 4, 5, 9};
static const int64_t in_counts[] = {1, 5, 64, 259};
static const int64_t out_counts[] = {1, 17, 64, 65, 200};
#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* The reference's bits on every instruction set, and the error of each output within
 * sum_i (|x_i| ds_w / 2 + |w_i| ds_x / 2 + ds_x ds_w / 4) plus float rounding, ds_* being
 * the quantization steps. */
static void test_int8_exact_and_bounded(void)
{
    for (int ri = 0; ri < COUNT(row_counts); ri++)
        for (int ii = 0; ii < COUNT(in_counts); ii++)
            for (int oi = 0; oi < COUNT(out_counts); oi++) {
                problem p = make_problem(row_counts[ri], in_counts[ii], out_counts[oi], oi % 2,
                                         (uint64_t)(7 * ri + 3 * ii + oi));
                attn_quantized_matrix m;
                CHECK_OK(attn_quantized_matrix_create("test", ATTN_PRECISION_INT8, p.out, p.in, p.w,
                                                      &m));
                float *reference = test_floats((size_t)(p.rows * p.ldy));
                CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
                run(&p, &m);
                memcpy(reference, p.y, sizeof(float) * (size_t)(p.rows * p.ldy));
                for (int k = 1; k < TEST_ISA_COUNT; k++) {
                    if (!test_use_isa(test_isas[k]))
                        continue;
                    memset(p.y, 0, sizeof(float) * (size_t)(p.rows * p.ldy));
                    run(&p, &m);
                    int same = 1;
                    for (int64_t r = 0; r < p.rows; r++)
                        same &=
                            test_same_bits(reference + r * p.ldy, p.y + r * p.ldy, (size_t)p.out);
                    CHECK(same, "int8 %s rows %lld in %lld out %lld: the reference's bits",
                          attn_isa_name(test_isas[k]), (long long)p.rows, (long long)p.in,
                          (long long)p.out);
                }
                int bounded = 1;
                for (int64_t r = 0; r < p.rows && bounded; r++) {
                    double largest = 0.0, negative = 0.0;
                    for (int64_t i = 0; i < p.in; i++) {
                        largest = fmax(largest, fabs((double)p.x[r * p.ldx + i]));
                        negative = fmin(negative, (double)p.x[r * p.ldx + i]);
                    }
                    const double x_step = largest / (negative < 0.0 ? 127.0 : 255.0);
                    for (int64_t o = 0; o < p.out; o++) {
                        double bound = 0.0;
                        for (int64_t i = 0; i < p.in; i++)
                            bound += fabs((double)p.x[r * p.ldx + i]) * m.scale[o] / 2 +
                                     fabs((double)p.w[o * p.in + i]) * x_step / 2 +
                                     x_step * m.scale[o] / 4;
                        const double exact = exact_output(&p, r, o);
                        bound += 1e-6 * (1.0 + fabs(exact));
                        const double error = fabs((double)reference[r * p.ldy + o] - exact);
                        if (!(error <= bound)) {
                            CHECK(0,
                                  "int8 rows %lld in %lld out %lld: y[%lld, %lld] off by %g > %g",
                                  (long long)p.rows, (long long)p.in, (long long)p.out,
                                  (long long)r, (long long)o, error, bound);
                            bounded = 0;
                        }
                    }
                }
                CHECK(bounded, "int8 within the quantization bound");
                free(reference);
                attn_quantized_matrix_free(&m);
                free_problem(&p);
            }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* The error of a plain fp32 left-to-right sum of the bf16-rounded operands. */
static double naive_bf16_output(const problem *p, int64_t r, int64_t o)
{
    float sum = 0.0f;
    for (int64_t i = 0; i < p->in; i++)
        sum += attn_bf16_to_float(attn_bf16_from_float(p->x[r * p->ldx + i])) *
               attn_bf16_to_float(attn_bf16_from_float(p->w[o * p->in + i]));
    return (double)(sum + (p->b != NULL ? p->b[o] : 0.0f));
}

static void test_bf16_flash_attention_rule(void)
{
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int ri = 0; ri < COUNT(row_counts); ri++)
            for (int ii = 0; ii < COUNT(in_counts); ii++) {
                problem p = make_problem(row_counts[ri], in_counts[ii], 65, ii % 2,
                                         (uint64_t)(11 * ri + ii));
                attn_quantized_matrix m;
                CHECK_OK(attn_quantized_matrix_create("test", ATTN_PRECISION_BF16, p.out, p.in, p.w,
                                                      &m));
                run(&p, &m);
                double error = 0.0, naive = 0.0;
                for (int64_t r = 0; r < p.rows; r++)
                    for (int64_t o = 0; o < p.out; o++) {
                        const double exact = exact_output(&p, r, o);
                        error = fmax(error, fabs((double)p.y[r * p.ldy + o] - exact));
                        naive = fmax(naive, fabs(naive_bf16_output(&p, r, o) - exact));
                    }
                CHECK(error <= 2.0 * naive + 1e-7,
                      "bf16 %s rows %lld in %lld: error %g within twice the naive %g",
                      attn_isa_name(test_isas[k]), (long long)p.rows, (long long)p.in, error,
                      naive);
                attn_quantized_matrix_free(&m);
                free_problem(&p);
            }
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Stored values read back: int8 through attn_quantized_matrix_from_int8 gives the same
 * matrix, and the float rows are what the products use. */
static void test_stored_values_round_trip(void)
{
    problem p = make_problem(1, 37, 70, 0, 5);
    attn_quantized_matrix m, again;
    CHECK_OK(attn_quantized_matrix_create("test", ATTN_PRECISION_INT8, p.out, p.in, p.w, &m));
    int8_t *q = test_alloc((size_t)(p.out * p.in));
    float *row = test_floats((size_t)p.in);
    int within = 1;
    for (int64_t o = 0; o < p.out; o++) {
        attn_quantized_matrix_int8_row(&m, o, q + o * p.in);
        attn_quantized_matrix_float_row(&m, o, row);
        for (int64_t i = 0; i < p.in; i++)
            within &= fabsf(row[i] - p.w[o * p.in + i]) <= m.scale[o] * 0.5f * 1.0001f;
    }
    CHECK(within, "dequantized weights within half a step of the originals");
    CHECK_OK(attn_quantized_matrix_from_int8("test", p.out, p.in, q, m.scale, &again));
    CHECK(memcmp(m.packed, again.packed,
                 sizeof(uint32_t) * (size_t)(m.tiles * m.groups * QUANTIZED_TILE)) == 0 &&
              memcmp(m.row_sum, again.row_sum, sizeof(int32_t) * (size_t)p.out) == 0,
          "from_int8 rebuilds the same packed matrix and row sums");
    float bad_scale[70];
    for (int i = 0; i < 70; i++)
        bad_scale[i] = i == 3 ? 0.0f : 1.0f;
    attn_quantized_matrix refused;
    CHECK_FAILS(attn_quantized_matrix_from_int8("test", p.out, p.in, q, bad_scale, &refused),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_quantized_matrix_free(&again);
    attn_quantized_matrix bf;
    CHECK_OK(attn_quantized_matrix_create("test", ATTN_PRECISION_BF16, p.out, p.in, p.w, &bf));
    attn_quantized_matrix_float_row(&bf, 5, row);
    CHECK(row[7] == attn_bf16_to_float(attn_bf16_from_float(p.w[5 * p.in + 7])),
          "bf16 rows hold the rounded weights");
    CHECK(attn_bf16_from_float(1.00390625f) == 0x3f80 &&
              attn_bf16_from_float(1.01171875f) == 0x3f82,
          "bf16 rounds to nearest, ties to even");
    attn_quantized_matrix_free(&bf);
    attn_quantized_matrix_free(&m);
    free(q);
    free(row);
    free_problem(&p);
}

/* Row 6 of 7 equals the row alone, and 1 and 2 threads agree, for both precisions. */
static void test_rows_and_threads_independent(void)
{
    const int saved = attn_get_num_threads();
    static const attn_precision precisions[] = {ATTN_PRECISION_INT8, ATTN_PRECISION_BF16};
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        /* The ARM levels exist to run these products natively: one that fell back to the
         * emulation would pass every other check here. */
        if (test_isas[k] == ATTN_ISA_NEON_DOTPROD || test_isas[k] == ATTN_ISA_NEON_BF16)
            CHECK(attn_quantized_native(ATTN_PRECISION_INT8) &&
                      attn_quantized_native(ATTN_PRECISION_BF16) ==
                          (test_isas[k] == ATTN_ISA_NEON_BF16),
                  "%s runs int8 (and on neon-bf16 bf16) natively", attn_isa_name(test_isas[k]));
        for (int pi = 0; pi < 2; pi++) {
            problem many = make_problem(7, 300, 900, 1, 9);
            problem one = make_problem(1, 300, 900, 1, 9);
            memcpy(one.x, many.x + 6 * many.ldx, sizeof(float) * 300);
            attn_quantized_matrix m;
            CHECK_OK(attn_quantized_matrix_create("test", precisions[pi], 900, 300, many.w, &m));
            CHECK_OK(attn_set_num_threads(2));
            run(&many, &m);
            run(&one, &m);
            CHECK(test_same_bits(one.y, many.y + 6 * many.ldy, 900),
                  "%s %s: a row alone gives the bits it has among others",
                  attn_precision_name(precisions[pi]), attn_isa_name(test_isas[k]));
            float *two = test_floats((size_t)(7 * many.ldy));
            memcpy(two, many.y, sizeof(float) * (size_t)(7 * many.ldy));
            CHECK_OK(attn_set_num_threads(1));
            run(&many, &m);
            CHECK(test_same_bits(two, many.y, (size_t)(7 * many.ldy)),
                  "%s %s: 1 and 2 threads give the same bits", attn_precision_name(precisions[pi]),
                  attn_isa_name(test_isas[k]));
            free(two);
            attn_quantized_matrix_free(&m);
            free_problem(&many);
            free_problem(&one);
        }
    }
    CHECK_OK(attn_set_num_threads(saved));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Where the products are not native, AVX2, AVX-512 and the NEON levels run a vectorised
 * emulation: the portable emulation's bits, int8 and bf16, for every row count from 1 to 70
 * (the passes of four rows and each remainder), in counts off the groups, the vectors and the
 * chunks of groups, and a part of the tile. Row 5 and output 0 are scaled by 1e-20, so their bf16
 * products fall below fp32's normal range, where an FMA would round them differently. */
static void test_vectorised_emulation_bits(void)
{
    static const attn_precision precisions[] = {ATTN_PRECISION_INT8, ATTN_PRECISION_BF16};
    static const int64_t ins[] = {1, 3, 6, 129, 1031};
    static const int64_t outs[] = {1, 70, 130};
    static const attn_isa vectorised[] = {ATTN_ISA_AVX2, ATTN_ISA_AVX512, ATTN_ISA_NEON,
                                           ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
    enum { MOST_ROWS = 70 };
    for (int pi = 0; pi < 2; pi++)
        for (int ii = 0; ii < COUNT(ins); ii++)
            for (int oi = 0; oi < COUNT(outs); oi++) {
                problem p = make_problem(MOST_ROWS, ins[ii], outs[oi], (ii + oi) % 2,
                                         (uint64_t)(13 * ii + oi + 100 * pi));
                for (int64_t i = 0; i < p.in; i++) {
                    p.x[5 * p.ldx + i] *= 1e-20f;
                    p.w[i] *= 1e-20f;
                }
                attn_quantized_matrix m;
                CHECK_OK(attn_quantized_matrix_create("test", precisions[pi], p.out, p.in, p.w,
                                                      &m));
                CHECK_OK(attn_set_isa(ATTN_ISA_PORTABLE));
                run(&p, &m);
                float *emulated = test_floats((size_t)(p.rows * p.ldy));
                memcpy(emulated, p.y, sizeof(float) * (size_t)(p.rows * p.ldy));
                for (int k = 0; k < COUNT(vectorised); k++) {
                    if (!test_use_isa(vectorised[k]) ||
                        attn_quantized_native(precisions[pi]))
                        continue;
                    int same = 1;
                    for (p.rows = 1; p.rows <= MOST_ROWS && same; p.rows++) {
                        memset(p.y, 0, sizeof(float) * (size_t)(MOST_ROWS * p.ldy));
                        run(&p, &m);
                        same = test_same_bits(emulated, p.y, (size_t)(p.rows * p.ldy));
                    }
                    CHECK(same, "%s %s in %lld out %lld: the emulation's bits (first off at %lld rows)",
                          attn_precision_name(precisions[pi]), attn_isa_name(vectorised[k]),
                          (long long)p.in, (long long)p.out, (long long)(p.rows - 1));
                    p.rows = MOST_ROWS;
                }
                free(emulated);
                attn_quantized_matrix_free(&m);
                free_problem(&p);
            }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

int main(void)
{
    RUN_TEST(test_int8_exact_and_bounded);
    RUN_TEST(test_bf16_flash_attention_rule);
    RUN_TEST(test_stored_values_round_trip);
    RUN_TEST(test_rows_and_threads_independent);
    RUN_TEST(test_vectorised_emulation_bits);
    return test_summary();
}
