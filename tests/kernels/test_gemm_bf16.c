/* attn_gemm_precision in bf16 on every instruction set: the rounding rule (nearest, ties to
 * even, NaN stays NaN), the emulated path bit-identical to the float GEMM of operands rounded
 * beforehand, FlashAttention's accuracy rule against float64 (error at most twice that of a
 * plain float loop over the same rounded operands) for every transpose combination, odd
 * shapes, several k-blocks and alpha/beta, the sums within the float bound of the exact
 * product of the rounded operands, and the GEMM's determinism guarantees. */
#include "harness.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const attn_isa all_isas[] = {ATTN_ISA_REFERENCE, ATTN_ISA_PORTABLE, ATTN_ISA_AVX2,
                                    ATTN_ISA_AVX512, ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
#define ISA_COUNT (sizeof all_isas / sizeof all_isas[0])

/* The rounding written out independently of the library: nearest bf16 by comparing the two
 * neighbours' distances in double, ties to the even mantissa. */
static float round_bf16_by_distance(float x)
{
    if (isnan(x) || isinf(x))
        return x;
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint32_t down_bits = bits & 0xFFFF0000u, up_bits = down_bits + 0x10000u;
    float down, up;
    memcpy(&down, &down_bits, sizeof down);
    memcpy(&up, &up_bits, sizeof up);
    /* Past the largest bf16, infinity stands where the next value would be (2^128). */
    double up_value = isinf(up) ? copysign(ldexp(1.0, 128), (double)x) : (double)up;
    double to_down = fabs((double)x - (double)down), to_up = fabs(up_value - (double)x);
    if (to_down < to_up)
        return down;
    if (to_up < to_down)
        return up;
    return (down_bits & 0x10000u) == 0 ? down : up;
}

typedef struct shape {
    attn_transpose ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
} shape;

static shape make_shape(int combo, int64_t m, int64_t n, int64_t k, int64_t pad)
{
    shape s = {(attn_transpose)(combo >> 1), (attn_transpose)(combo & 1), m, n, k, 0, 0, n + pad};
    s.lda = (s.ta == ATTN_NO_TRANS ? k : m) + pad;
    s.ldb = (s.tb == ATTN_NO_TRANS ? n : k) + pad;
    return s;
}

static size_t a_count(const shape *s)
{
    return (size_t)((s->ta == ATTN_NO_TRANS ? s->m : s->k) * s->lda);
}
static size_t b_count(const shape *s)
{
    return (size_t)((s->tb == ATTN_NO_TRANS ? s->k : s->n) * s->ldb);
}
static size_t c_count(const shape *s)
{
    return (size_t)(s->m * s->ldc);
}
static float a_at(const shape *s, const float *a, int64_t i, int64_t p)
{
    return s->ta == ATTN_NO_TRANS ? a[i * s->lda + p] : a[p * s->lda + i];
}
static float b_at(const shape *s, const float *b, int64_t p, int64_t j)
{
    return s->tb == ATTN_NO_TRANS ? b[p * s->ldb + j] : b[j * s->ldb + p];
}

static void test_rounding_rule_on_every_isa(void)
{
    /* Each value times 1: C is the rounded value (k = 1, so no sum can hide it). */
    const float values[] = {1.0f,
                            1.00390625f /* 1 + 2^-8: tie, to 1 */,
                            1.01171875f /* 1 + 3 * 2^-8: tie, to 1 + 2^-6 */,
                            1.0f + 0x1.1p-8f,
                            3.14159265f,
                            -2.71828183f,
                            1e-30f,
                            -7.5e20f,
                            0x1.fffffep127f /* rounds up to infinity */,
                            INFINITY,
                            -INFINITY,
                            NAN,
                            0x1.0p-140f /* subnormal */};
    const size_t count = sizeof values / sizeof values[0];
    float one = 1.0f;
    for (size_t i = 0; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[i]));
        for (size_t v = 0; v < count; v++) {
            /* Subnormal operands are flushed by vdpbf16ps; only the emulation keeps them. */
            if (fpclassify(values[v]) == FP_SUBNORMAL && attn_precision_native(ATTN_PRECISION_BF16))
                continue;
            float c = 0;
            CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, ATTN_NO_TRANS, ATTN_NO_TRANS, 1, 1, 1,
                                         1.0f, &values[v], 1, &one, 1, 0.0f, &c, 1));
            float want = round_bf16_by_distance(values[v]);
            CHECK(isnan(want) ? isnan(c) : memcmp(&c, &want, sizeof c) == 0,
                  "%s: bf16(%a) = %a, expected %a", attn_isa_name(all_isas[i]), (double)values[v],
                  (double)c, (double)want);
        }
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Without vdpbf16ps (here: every instruction set but avx512 on a CPU that has it), bf16 is
 * the float GEMM of operands rounded beforehand, bit for bit. */
static void test_emulated_path_is_the_float_product_of_rounded_operands(void)
{
    static const int64_t sizes[][3] = {{3, 17, 5}, {17, 3, 129}, {45, 70, 520}, {150, 97, 300}};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (int combo = 0; combo < 4; combo++) {
            shape s = make_shape(combo, sizes[z][0], sizes[z][1], sizes[z][2], (int64_t)z % 3);
            float *a = test_alloc(a_count(&s) * sizeof(float));
            float *b = test_alloc(b_count(&s) * sizeof(float));
            float *ar = test_alloc(a_count(&s) * sizeof(float));
            float *br = test_alloc(b_count(&s) * sizeof(float));
            float *c0 = test_alloc(c_count(&s) * sizeof(float));
            float *c1 = test_alloc(c_count(&s) * sizeof(float));
            float *c2 = test_alloc(c_count(&s) * sizeof(float));
            test_fill_uniform(a, a_count(&s), -2.0f, 2.0f, 10 + z);
            test_fill_uniform(b, b_count(&s), -2.0f, 2.0f, 20 + z);
            test_fill_uniform(c0, c_count(&s), -1.0f, 1.0f, 30 + z);
            for (size_t e = 0; e < a_count(&s); e++)
                ar[e] = round_bf16_by_distance(a[e]);
            for (size_t e = 0; e < b_count(&s); e++)
                br[e] = round_bf16_by_distance(b[e]);
            for (size_t i = 0; i < ISA_COUNT; i++) {
                if (!test_isa_wanted(all_isas[i]))
                    continue;
                CHECK_OK(attn_set_isa(all_isas[i]));
                if (attn_precision_native(ATTN_PRECISION_BF16))
                    continue;
                memcpy(c1, c0, c_count(&s) * sizeof(float));
                memcpy(c2, c0, c_count(&s) * sizeof(float));
                CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, s.ta, s.tb, s.m, s.n, s.k, 0.5f,
                                             a, s.lda, b, s.ldb, 1.5f, c1, s.ldc));
                CHECK_OK(attn_gemm(s.ta, s.tb, s.m, s.n, s.k, 0.5f, ar, s.lda, br, s.ldb, 1.5f, c2,
                                   s.ldc));
                CHECK(memcmp(c1, c2, c_count(&s) * sizeof(float)) == 0,
                      "%s: bf16 differs from the float product of rounded operands, %c%c "
                      "%lldx%lldx%lld",
                      attn_isa_name(all_isas[i]), s.ta ? 'T' : 'N', s.tb ? 'T' : 'N',
                      (long long)s.m, (long long)s.n, (long long)s.k);
            }
            CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
            free(a);
            free(b);
            free(ar);
            free(br);
            free(c0);
            free(c1);
            free(c2);
        }
}

/* For one shape on every instruction set (the native kernel included): (1) each element
 * within the float summation bound of the exact product of the rounded operands; (2) the
 * largest error against the float64 product of the unrounded operands at most twice that of
 * a plain float loop over the rounded operands (FlashAttention's rule). */
static void check_accuracy(const shape *s, float alpha, float beta, uint64_t seed)
{
    float *a = test_alloc(a_count(s) * sizeof(float));
    float *b = test_alloc(b_count(s) * sizeof(float));
    float *c0 = test_alloc(c_count(s) * sizeof(float));
    float *c = test_alloc(c_count(s) * sizeof(float));
    size_t cells = (size_t)(s->m * s->n);
    double *exact = test_alloc(cells * sizeof(double));
    double *exact_rounded = test_alloc(cells * sizeof(double));
    double *bound = test_alloc(cells * sizeof(double));
    test_fill_uniform(a, a_count(s), -1.0f, 1.0f, seed);
    test_fill_uniform(b, b_count(s), -1.0f, 1.0f, seed + 1);
    test_fill_uniform(c0, c_count(s), -1.0f, 1.0f, seed + 2);
    double naive_error = 0;
    for (int64_t i = 0; i < s->m; i++)
        for (int64_t j = 0; j < s->n; j++) {
            double sum = 0, sum_rounded = 0, magnitude = 0;
            float naive = 0;
            for (int64_t p = 0; p < s->k; p++) {
                float x = a_at(s, a, i, p), y = b_at(s, b, p, j);
                float xr = round_bf16_by_distance(x), yr = round_bf16_by_distance(y);
                sum += (double)x * y;
                sum_rounded += (double)xr * yr;
                magnitude += fabs((double)xr * yr);
                naive += xr * yr;
            }
            double prior = beta == 0.0f ? 0.0 : (double)beta * c0[i * s->ldc + j];
            size_t e = (size_t)(i * s->n + j);
            exact[e] = alpha * sum + prior;
            exact_rounded[e] = alpha * sum_rounded + prior;
            bound[e] =
                2.0 * (double)(s->k + 3) * FLT_EPSILON * (fabs(alpha) * magnitude + fabs(prior)) +
                1e-30;
            float naive_c = alpha * naive + (float)prior;
            double err = fabs((double)naive_c - exact[e]);
            naive_error = err > naive_error ? err : naive_error;
        }
    for (size_t i = 0; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[i]));
        memcpy(c, c0, c_count(s) * sizeof(float));
        CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, s->ta, s->tb, s->m, s->n, s->k, alpha, a,
                                     s->lda, b, s->ldb, beta, c, s->ldc));
        double error = 0;
        int within = 1, padding_kept = 1;
        for (int64_t r = 0; r < s->m; r++)
            for (int64_t j = 0; j < s->ldc; j++) {
                float got = c[r * s->ldc + j];
                if (j >= s->n) {
                    padding_kept &= memcmp(&got, &c0[r * s->ldc + j], sizeof got) == 0;
                    continue;
                }
                size_t e = (size_t)(r * s->n + j);
                double err = fabs((double)got - exact[e]);
                error = err > error ? err : error;
                within &= fabs((double)got - exact_rounded[e]) <= bound[e];
            }
        const char *name = attn_isa_name(all_isas[i]);
        CHECK(within && padding_kept, "%s: %c%c %lldx%lldx%lld alpha=%g beta=%g: %s", name,
              s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', (long long)s->m, (long long)s->n,
              (long long)s->k, (double)alpha, (double)beta,
              within ? "padding of C overwritten" : "sum outside the float bound");
        CHECK(error <= 2.0 * naive_error + 1e-7, "%s: %c%c %lldx%lldx%lld: error %.3g > 2 x %.3g",
              name, s->ta ? 'T' : 'N', s->tb ? 'T' : 'N', (long long)s->m, (long long)s->n,
              (long long)s->k, error, naive_error);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(a);
    free(b);
    free(c0);
    free(c);
    free(exact);
    free(exact_rounded);
    free(bound);
}

static void test_accuracy_on_every_isa(void)
{
    /* Odd sizes around the tiles (4x8, 6x16, 14x32), odd k (a pair padded with zero), k
     * across several k-blocks (256 and 512 steps), few rows or columns, thread splits. */
    static const int64_t sizes[][3] = {{1, 1, 1},     {3, 17, 5},     {17, 3, 129},  {14, 32, 64},
                                       {15, 33, 385}, {129, 31, 17},  {31, 255, 3},  {5, 1, 255},
                                       {1, 129, 800}, {45, 70, 1031}, {300, 97, 300}};
    static const float alpha_beta[][2] = {
        {1.0f, 0.0f}, {0.5f, 2.0f}, {-1.5f, 1.0f}, {2.0f, -0.25f}};
    uint64_t seed = 1000;
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (int combo = 0; combo < 4; combo++) {
            shape s = make_shape(combo, sizes[z][0], sizes[z][1], sizes[z][2],
                                 (int64_t)((z + (size_t)combo) % 3) * 3);
            size_t ab = (z + (size_t)combo) % 4;
            check_accuracy(&s, alpha_beta[ab][0], alpha_beta[ab][1], seed);
            seed += 3;
        }
}

/* Bit-identical for any thread count (row bands sharing one packed B, or rectangles), and
 * a row of C computed alone equals the same row in the full product. */
static void test_threads_and_rows_do_not_change_bits(void)
{
    const int64_t m = 201, n = 333, k = 517;
    float *a = test_alloc((size_t)(m * k) * sizeof(float));
    float *b = test_alloc((size_t)(n * k) * sizeof(float));
    float *c1 = test_alloc((size_t)(m * n) * sizeof(float));
    float *c2 = test_alloc((size_t)(m * n) * sizeof(float));
    test_fill_uniform(a, (size_t)(m * k), -1.0f, 1.0f, 400);
    test_fill_uniform(b, (size_t)(n * k), -1.0f, 1.0f, 401);
    for (size_t i = 1; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        const char *name = attn_isa_name(all_isas[i]);
        CHECK_OK(attn_set_isa(all_isas[i]));
        for (int combo = 0; combo < 4; combo++) {
            attn_transpose ta = (attn_transpose)(combo >> 1), tb = (attn_transpose)(combo & 1);
            int64_t lda = ta == ATTN_NO_TRANS ? k : m, ldb = tb == ATTN_NO_TRANS ? n : k;
            CHECK_OK(attn_set_num_threads(2));
            CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, ta, tb, m, n, k, 1.0f, a, lda, b, ldb,
                                         0.0f, c1, n));
            for (int threads = 1; threads <= 5; threads += 2) {
                CHECK_OK(attn_set_num_threads(threads));
                CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, ta, tb, m, n, k, 1.0f, a, lda, b,
                                             ldb, 0.0f, c2, n));
                CHECK(memcmp(c1, c2, (size_t)(m * n) * sizeof(float)) == 0,
                      "%s: %d threads differ from 2", name, threads);
            }
            if (ta == ATTN_NO_TRANS) {
                for (int64_t r = 0; r < m; r += 7)
                    CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, ta, tb, 1, n, k, 1.0f,
                                                 a + r * k, k, b, ldb, 0.0f, c2 + r * n, n));
                int same = 1;
                for (int64_t r = 0; r < m; r += 7)
                    same &= memcmp(c1 + r * n, c2 + r * n, (size_t)n * sizeof(float)) == 0;
                CHECK(same, "%s: a row alone differs from the full product", name);
            }
        }
    }
    CHECK_OK(attn_set_num_threads(0));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(a);
    free(b);
    free(c1);
    free(c2);
}

/* A packed op(B) gives the bits of the plain product, in both precisions, for every
 * transpose, odd sizes, thread counts that cut C into bands or rectangles, and after a
 * refresh that follows a change of B; a handle packed under one instruction set still
 * multiplies right under another. */
static void test_packed_b_equals_the_plain_product(void)
{
    static const int64_t sizes[][3] = {
        {1, 1, 1}, {3, 17, 5}, {40, 33, 515}, {300, 97, 300}, {5, 1100, 64}};
    static const attn_precision precisions[] = {ATTN_PRECISION_FP32, ATTN_PRECISION_BF16};
    for (size_t z = 0; z < sizeof sizes / sizeof sizes[0]; z++)
        for (int combo = 0; combo < 4; combo++)
            for (size_t pi = 0; pi < 2; pi++) {
                attn_precision precision = precisions[pi];
                shape s = make_shape(combo, sizes[z][0], sizes[z][1], sizes[z][2], 1);
                float *a = test_alloc(a_count(&s) * sizeof(float));
                float *b = test_alloc(b_count(&s) * sizeof(float));
                float *c0 = test_alloc(c_count(&s) * sizeof(float));
                float *want = test_alloc(c_count(&s) * sizeof(float));
                float *got = test_alloc(c_count(&s) * sizeof(float));
                test_fill_uniform(a, a_count(&s), -1.0f, 1.0f, 50 + z);
                test_fill_uniform(b, b_count(&s), -1.0f, 1.0f, 60 + z);
                test_fill_uniform(c0, c_count(&s), -1.0f, 1.0f, 70 + z);
                for (size_t i = 0; i < ISA_COUNT; i++) {
                    if (!test_isa_wanted(all_isas[i]))
                        continue;
                    CHECK_OK(attn_set_isa(all_isas[i]));
                    attn_gemm_packed_b *packed = NULL;
                    CHECK_OK(
                        attn_gemm_packed_b_create(precision, s.tb, s.k, s.n, b, s.ldb, &packed));
                    for (int round = 0; round < 2; round++) {
                        if (round == 1) { /* B changes: an optimizer step */
                            for (size_t e = 0; e < b_count(&s); e++)
                                b[e] *= -0.75f;
                            CHECK_OK(attn_gemm_packed_b_refresh(packed));
                        }
                        for (int threads = 1; threads <= 3; threads++) {
                            CHECK_OK(attn_set_num_threads(threads));
                            memcpy(want, c0, c_count(&s) * sizeof(float));
                            memcpy(got, c0, c_count(&s) * sizeof(float));
                            CHECK_OK(attn_gemm_precision(precision, s.ta, s.tb, s.m, s.n, s.k, 0.5f,
                                                         a, s.lda, b, s.ldb, 1.5f, want, s.ldc));
                            CHECK_OK(attn_gemm_with_packed_b(s.ta, s.m, 0.5f, a, s.lda, packed,
                                                             1.5f, got, s.ldc));
                            CHECK(memcmp(want, got, c_count(&s) * sizeof(float)) == 0,
                                  "%s %s, %d threads, round %d: packed B differs, %c%c "
                                  "%lldx%lldx%lld",
                                  attn_isa_name(all_isas[i]), attn_precision_name(precision),
                                  threads, round, s.ta ? 'T' : 'N', s.tb ? 'T' : 'N',
                                  (long long)s.m, (long long)s.n, (long long)s.k);
                        }
                    }
                    /* Packed here, multiplied under the portable kernels. */
                    CHECK_OK(attn_set_isa(ATTN_ISA_PORTABLE));
                    memcpy(want, c0, c_count(&s) * sizeof(float));
                    memcpy(got, c0, c_count(&s) * sizeof(float));
                    CHECK_OK(attn_gemm_precision(precision, s.ta, s.tb, s.m, s.n, s.k, 0.5f, a,
                                                 s.lda, b, s.ldb, 1.5f, want, s.ldc));
                    CHECK_OK(attn_gemm_with_packed_b(s.ta, s.m, 0.5f, a, s.lda, packed, 1.5f, got,
                                                     s.ldc));
                    CHECK(memcmp(want, got, c_count(&s) * sizeof(float)) == 0,
                          "packed under %s, multiplied under portable", attn_isa_name(all_isas[i]));
                    attn_gemm_packed_b_destroy(packed);
                }
                CHECK_OK(attn_set_num_threads(0));
                CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
                free(a);
                free(b);
                free(c0);
                free(want);
                free(got);
            }
    attn_gemm_packed_b *packed = NULL;
    float b[4] = {0};
    CHECK_FAILS(attn_gemm_packed_b_create(ATTN_PRECISION_INT8, ATTN_NO_TRANS, 2, 2, b, 2, &packed),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_gemm_packed_b_create(ATTN_PRECISION_BF16, ATTN_NO_TRANS, 2, 2, b, 1, &packed),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(packed == NULL, "no handle after a failure");
    attn_gemm_packed_b_destroy(NULL);
}

static void test_arguments(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {0};
    CHECK_FAILS(attn_gemm_precision(ATTN_PRECISION_INT8, ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 2,
                                    1.0f, a, 2, b, 2, 0.0f, c, 2),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "int8") != NULL, "message names the precision: %s",
          attn_last_error());
    CHECK_FAILS(attn_gemm_precision(ATTN_PRECISION_BF16, ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 2,
                                    1.0f, a, 1, b, 2, 0.0f, c, 2),
                ATTN_ERR_INVALID_ARGUMENT);
    /* k = 0 scales C; fp32 is attn_gemm. */
    float d[2] = {2, 4};
    CHECK_OK(attn_gemm_precision(ATTN_PRECISION_BF16, ATTN_NO_TRANS, ATTN_NO_TRANS, 1, 2, 0, 1.0f,
                                 NULL, 1, NULL, 2, 0.5f, d, 2));
    CHECK(d[0] == 1.0f && d[1] == 2.0f, "k = 0 gives beta * C");
    CHECK_OK(attn_gemm_precision(ATTN_PRECISION_FP32, ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 2, 2, 1.0f,
                                 a, 2, b, 2, 0.0f, c, 2));
    CHECK(c[0] == 1 && c[1] == 2 && c[2] == 3 && c[3] == 4, "fp32: A times the identity");
}

int main(void)
{
    RUN_TEST(test_rounding_rule_on_every_isa);
    RUN_TEST(test_emulated_path_is_the_float_product_of_rounded_operands);
    RUN_TEST(test_accuracy_on_every_isa);
    RUN_TEST(test_threads_and_rows_do_not_change_bits);
    RUN_TEST(test_packed_b_equals_the_plain_product);
    RUN_TEST(test_arguments);
    return test_summary();
}
