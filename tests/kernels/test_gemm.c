/* attn_gemm: every instruction set against an exact (double) product, all transpose
 * combinations, odd sizes and padded leading dimensions, alpha/beta, beta = 0 over NaN,
 * k = 0, determinism across runs and thread counts, and bad arguments.
 *
 * The guarantee tested: for a given instruction set, results are bit-identical across
 * runs AND across thread counts, and a row (or column) of C has the same bits whatever
 * batch of rows (columns) it is computed in: the k-summation order of each element
 * depends only on k and the micro-kernel, never on how C is split between threads or
 * tiles. */
#include "harness.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct gemm_case {
    attn_transpose ta, tb;
    int64_t m, n, k;
    int64_t pad; /* extra elements at the end of each row of A, B and C */
    float alpha, beta;
} gemm_case;

typedef struct gemm_data {
    int64_t lda, ldb, ldc;
    float *a, *b, *c_init;
    double *exact; /* alpha * op(A) op(B) + beta * C, in double */
    double *bound; /* a rigorous bound on float rounding error for each element */
} gemm_data;

static int64_t a_rows(const gemm_case *t) { return t->ta == ATTN_NO_TRANS ? t->m : t->k; }
static int64_t a_cols(const gemm_case *t) { return t->ta == ATTN_NO_TRANS ? t->k : t->m; }
static int64_t b_rows(const gemm_case *t) { return t->tb == ATTN_NO_TRANS ? t->k : t->n; }
static int64_t b_cols(const gemm_case *t) { return t->tb == ATTN_NO_TRANS ? t->n : t->k; }

static size_t c_size(const gemm_case *t, const gemm_data *d)
{
    return (size_t)(t->m * d->ldc);
}

/* Sentinel for the padding of C: must survive every call untouched. */
static const float c_padding = -12345.0f;

static void make_data(const gemm_case *t, uint64_t seed, gemm_data *d)
{
    d->lda = a_cols(t) + t->pad;
    d->ldb = b_cols(t) + t->pad;
    d->ldc = t->n + t->pad;
    if (d->lda < 1)
        d->lda = 1;
    if (d->ldb < 1)
        d->ldb = 1;
    size_t a_count = (size_t)(a_rows(t) * d->lda), b_count = (size_t)(b_rows(t) * d->ldb);
    d->a = test_alloc((a_count ? a_count : 1) * sizeof(float));
    d->b = test_alloc((b_count ? b_count : 1) * sizeof(float));
    d->c_init = test_alloc(c_size(t, d) * sizeof(float));
    d->exact = test_alloc((size_t)(t->m * t->n) * sizeof(double));
    d->bound = test_alloc((size_t)(t->m * t->n) * sizeof(double));
    test_fill_uniform(d->a, a_count, -1.0f, 1.0f, seed);
    test_fill_uniform(d->b, b_count, -1.0f, 1.0f, seed + 1);
    test_fill_uniform(d->c_init, c_size(t, d), -1.0f, 1.0f, seed + 2);
    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = 0; j < d->ldc; j++)
            if (j >= t->n)
                d->c_init[i * d->ldc + j] = c_padding;
            else if (t->beta == 0.0f)
                d->c_init[i * d->ldc + j] = NAN; /* beta = 0 must overwrite, not scale */

    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = 0; j < t->n; j++) {
            double sum = 0, abs_sum = 0;
            for (int64_t p = 0; p < t->k; p++) {
                double x = t->ta == ATTN_NO_TRANS ? d->a[i * d->lda + p] : d->a[p * d->lda + i];
                double y = t->tb == ATTN_NO_TRANS ? d->b[p * d->ldb + j] : d->b[j * d->ldb + p];
                sum += x * y;
                abs_sum += fabs(x * y);
            }
            double c0 = t->beta == 0.0f ? 0.0 : d->c_init[i * d->ldc + j];
            d->exact[i * t->n + j] = t->alpha * sum + t->beta * c0;
            /* Float summation of k products (each split at k-block boundaries, then scaled
             * and added to beta*C) errs by at most about (k + 3) * eps * the sum of the
             * magnitudes; twice that leaves room for how the terms are grouped. */
            double magnitude = fabs(t->alpha) * abs_sum + fabs(t->beta * c0);
            d->bound[i * t->n + j] = 2.0 * (double)(t->k + 3) * FLT_EPSILON * magnitude + 1e-30;
        }
}

static void free_data(gemm_data *d)
{
    free(d->a);
    free(d->b);
    free(d->c_init);
    free(d->exact);
    free(d->bound);
}

static attn_status run(const gemm_case *t, const gemm_data *d, float *c)
{
    memcpy(c, d->c_init, c_size(t, d) * sizeof(float));
    return attn_gemm(t->ta, t->tb, t->m, t->n, t->k, t->alpha, d->a, d->lda, d->b, d->ldb,
                     t->beta, c, d->ldc);
}

/* Every element within its error bound and the padding of C untouched. */
static int matches_exact(const gemm_case *t, const gemm_data *d, const float *c,
                         const char *isa)
{
    for (int64_t i = 0; i < t->m; i++)
        for (int64_t j = 0; j < d->ldc; j++) {
            float got = c[i * d->ldc + j];
            if (j >= t->n) {
                if (got != c_padding) {
                    fprintf(stderr, "  %s: padding of C at [%lld,%lld] overwritten\n", isa,
                            (long long)i, (long long)j);
                    return 0;
                }
                continue;
            }
            double want = d->exact[i * t->n + j];
            if (!(fabs((double)got - want) <= d->bound[i * t->n + j])) {
                fprintf(stderr, "  %s: C[%lld,%lld] = %.9g, expected %.9g (bound %.3g)\n", isa,
                        (long long)i, (long long)j, (double)got, want, d->bound[i * t->n + j]);
                return 0;
            }
        }
    return 1;
}

static const attn_isa all_isas[] = {ATTN_ISA_REFERENCE, ATTN_ISA_PORTABLE, ATTN_ISA_AVX2,
                                    ATTN_ISA_AVX512, ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
#define ISA_COUNT (sizeof all_isas / sizeof all_isas[0])

static void check_case_on_every_isa(const gemm_case *t, uint64_t seed)
{
    gemm_data d;
    make_data(t, seed, &d);
    float *c = test_alloc(c_size(t, &d) * sizeof(float) + sizeof(float));
    for (size_t i = 0; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[i]));
        CHECK_OK(run(t, &d, c));
        CHECK(matches_exact(t, &d, c, attn_isa_name(all_isas[i])),
              "%s: %c%c m=%lld n=%lld k=%lld pad=%lld alpha=%g beta=%g",
              attn_isa_name(all_isas[i]), t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', (long long)t->m,
              (long long)t->n, (long long)t->k, (long long)t->pad, (double)t->alpha,
              (double)t->beta);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(c);
    free_data(&d);
}

static void test_every_isa_matches_exact_product(void)
{
    /* Odd sizes around the register tiles (4x8, 6x16, 14x32); k beyond one k-block (256)
     * so later blocks accumulate into C; panels read in place (few rows or columns) and
     * packed; enough work to split between threads. */
    static const int64_t sizes[][3] = {
        {1, 1, 1},     {3, 17, 5},   {17, 3, 129},  {14, 32, 64},   {15, 33, 385},
        {129, 31, 17}, {31, 255, 3}, {5, 1, 255},   {1, 129, 800},  {45, 70, 520},
        {2100, 3, 256}, {5, 1100, 256}, {150, 97, 300},
    };
    static const float alpha_beta[][2] = {{1.0f, 0.0f}, {0.5f, 2.0f}, {-1.5f, 1.0f}, {2.0f, -0.25f}};
    uint64_t seed = 100;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 4; combo++) {
            gemm_case t = {.ta = (attn_transpose)(combo >> 1), .tb = (attn_transpose)(combo & 1),
                           .m = sizes[s][0], .n = sizes[s][1], .k = sizes[s][2],
                           .pad = (int64_t)((s + (size_t)combo) % 3) * 3,
                           .alpha = alpha_beta[(s + (size_t)combo) % 4][0],
                           .beta = alpha_beta[(s + (size_t)combo) % 4][1]};
            check_case_on_every_isa(&t, seed++);
        }
}

/* Every optimized instruction set the CPU has against the exact product (the scalar
 * reference is left out of the larger cases to keep them fast; it is checked above). */
static void check_optimized_isas(const gemm_case *t, const gemm_data *d, float *c)
{
    for (size_t i = 1; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[i]));
        CHECK_OK(run(t, d, c));
        CHECK(matches_exact(t, d, c, attn_isa_name(all_isas[i])),
              "%s, %d threads: %c%c m=%lld n=%lld k=%lld", attn_isa_name(all_isas[i]),
              attn_get_num_threads(), t->ta ? 'T' : 'N', t->tb ? 'T' : 'N', (long long)t->m,
              (long long)t->n, (long long)t->k);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* At k = 256, m and n beyond one cache block of packed A (2048 rows) or packed B (1024
 * columns). Two transpose combinations cover both packing paths of each operand; the
 * scalar reference is left out to keep the test fast (it is checked above). */
static void test_several_cache_blocks(void)
{
    static const int64_t sizes[][3] = {{120, 1100, 256}, {2100, 140, 256}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 4; combo += 3) {
            gemm_case t = {(attn_transpose)(combo >> 1), (attn_transpose)(combo & 1),
                           sizes[s][0], sizes[s][1], sizes[s][2], 1, 1.0f, 0.5f};
            gemm_data d;
            make_data(&t, 600 + s, &d);
            float *c = test_alloc(c_size(&t, &d) * sizeof(float));
            check_optimized_isas(&t, &d, c);
            free(c);
            free_data(&d);
        }
}

static void test_alpha_beta_variations(void)
{
    static const float alpha_beta[][2] = {{1.0f, 0.0f}, {1.0f, 1.0f}, {0.0f, 1.0f},
                                          {-2.0f, 0.0f}, {0.125f, -3.0f}, {3.0f, 0.5f}};
    for (size_t i = 0; i < sizeof alpha_beta / sizeof alpha_beta[0]; i++) {
        gemm_case t = {ATTN_NO_TRANS, ATTN_TRANS, 37, 50, 400, 1, alpha_beta[i][0],
                       alpha_beta[i][1]};
        check_case_on_every_isa(&t, 200 + i);
    }
}

static void test_beta_zero_overwrites_nan(void)
{
    gemm_case t = {ATTN_NO_TRANS, ATTN_NO_TRANS, 20, 40, 9, 0, 1.0f, 0.0f};
    gemm_data d;
    make_data(&t, 300, &d); /* C starts as NaN everywhere */
    float *c = test_alloc(c_size(&t, &d) * sizeof(float));
    for (size_t i = 0; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[i]));
        CHECK_OK(run(&t, &d, c));
        int finite = 1;
        for (size_t e = 0; e < c_size(&t, &d); e++)
            finite &= isfinite(c[e]);
        CHECK(finite, "%s: beta = 0 left NaN in C", attn_isa_name(all_isas[i]));
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(c);
    free_data(&d);
}

static void test_empty_product_scales_c(void)
{
    for (size_t i = 0; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[i]));
        float c[6] = {1, 2, 3, 4, 5, 6};
        /* k = 0: A and B are never read, so NULL is allowed. */
        CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 0, 1.0f, NULL, 1, NULL, 3, 0.5f,
                           c, 3));
        CHECK(c[0] == 0.5f && c[4] == 2.5f && c[5] == 3.0f, "%s: k = 0 gives beta * C",
              attn_isa_name(all_isas[i]));
        float nan_c[4] = {NAN, NAN, NAN, NAN};
        CHECK_OK(attn_gemm(ATTN_TRANS, ATTN_TRANS, 2, 2, 0, 1.0f, NULL, 2, NULL, 1, 0.0f, nan_c,
                           2));
        CHECK(nan_c[0] == 0.0f && nan_c[3] == 0.0f, "%s: k = 0, beta = 0 clears NaN",
              attn_isa_name(all_isas[i]));
        /* m = 0 or n = 0: nothing to do, C may be NULL. */
        CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 0, 3, 4, 1.0f, NULL, 4, NULL, 3, 0.0f,
                           NULL, 3));
        CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 3, 0, 4, 1.0f, NULL, 4, NULL, 1, 0.0f,
                           NULL, 1));
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

static int same_bits(const float *x, const float *y, size_t n)
{
    return memcmp(x, y, n * sizeof(float)) == 0;
}

/* Row bands that share one packed op(B) (see gemm_blocked.c): several k-blocks, a column
 * count that leaves the last group of panels and the last panel ragged, and thread counts
 * that leave some threads a band of their own and others none of the packing. Checked
 * against the exact product for both layouts of B (packed by rows and transposed). */
static void test_row_bands_share_packed_b(void)
{
    /* Kept small: under valgrind this program runs about 45 times slower (2 s against 90 s). */
    static const int64_t sizes[][3] = {{280, 200, 520}, {90, 45, 257}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int combo = 0; combo < 4; combo++) {
            gemm_case t = {(attn_transpose)(combo >> 1), (attn_transpose)(combo & 1),
                           sizes[s][0], sizes[s][1], sizes[s][2], 2, 1.0f, -0.5f};
            gemm_data d;
            make_data(&t, 700 + s * 4 + (size_t)combo, &d);
            float *c = test_alloc(c_size(&t, &d) * sizeof(float));
            static const int thread_counts[] = {2, 3, 5};
            for (size_t i = 0; i < sizeof thread_counts / sizeof thread_counts[0]; i++) {
                CHECK_OK(attn_set_num_threads(thread_counts[i]));
                check_optimized_isas(&t, &d, c);
            }
            CHECK_OK(attn_set_num_threads(0));
            free(c);
            free_data(&d);
        }
}

/* Large enough that the optimized versions split C between threads. */
static void test_deterministic_across_runs_and_threads(void)
{
    const int64_t m = 201, n = 333, k = 517;
    float *a = test_alloc((size_t)(m * k) * sizeof(float));
    float *b = test_alloc((size_t)(n * k) * sizeof(float));
    float *c1 = test_alloc((size_t)(m * n) * sizeof(float));
    float *c2 = test_alloc((size_t)(m * n) * sizeof(float));
    test_fill_uniform(a, (size_t)(m * k), -1.0f, 1.0f, 400);
    test_fill_uniform(b, (size_t)(n * k), -1.0f, 1.0f, 401);
    const int built_in = strncmp(attn_gemm_backend(), "built-in", 8) == 0;
    for (size_t i = 1; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        const char *name = attn_isa_name(all_isas[i]);
        CHECK_OK(attn_set_isa(all_isas[i]));
        for (int combo = 0; combo < 4; combo++) {
            attn_transpose ta = (attn_transpose)(combo >> 1), tb = (attn_transpose)(combo & 1);
            int64_t lda = ta == ATTN_NO_TRANS ? k : m, ldb = tb == ATTN_NO_TRANS ? n : k;
            CHECK_OK(attn_set_num_threads(2));
            CHECK_OK(attn_gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c1, n));
            CHECK_OK(attn_gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c2, n));
            CHECK(same_bits(c1, c2, (size_t)(m * n)), "%s: two runs differ", name);
            if (!built_in)
                continue; /* an external BLAS promises nothing across thread counts */
            for (int threads = 1; threads <= 3; threads += 2) {
                CHECK_OK(attn_set_num_threads(threads));
                CHECK_OK(attn_gemm(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c2, n));
                CHECK(same_bits(c1, c2, (size_t)(m * n)), "%s: %d threads differ from 2", name,
                      threads);
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

/* A row of C computed alone (a decoder's single query) or in any batch of rows, and a
 * column in any block of columns, has the same bits as in the full product. */
static void test_rows_and_columns_do_not_depend_on_the_batch(void)
{
    if (strncmp(attn_gemm_backend(), "built-in", 8) != 0)
        return; /* an external BLAS promises nothing of the kind */
    const int64_t m = 45, n = 77, k = 300;
    float *a = test_alloc((size_t)(m * k) * sizeof(float));
    float *b = test_alloc((size_t)(k * n) * sizeof(float));
    float *full = test_alloc((size_t)(m * n) * sizeof(float));
    float *part = test_alloc((size_t)(m * n) * sizeof(float));
    test_fill_uniform(a, (size_t)(m * k), -1.0f, 1.0f, 700);
    test_fill_uniform(b, (size_t)(k * n), -1.0f, 1.0f, 701);
    for (size_t i = 1; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        const char *name = attn_isa_name(all_isas[i]);
        CHECK_OK(attn_set_isa(all_isas[i]));
        CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, m, n, k, 1.0f, a, k, b, n, 0.0f, full, n));
        /* Rows one at a time, then in batches of 3 starting at an odd offset. */
        for (int64_t r = 0; r < m; r++)
            CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 1, n, k, 1.0f, a + r * k, k, b, n,
                               0.0f, part + r * n, n));
        CHECK(same_bits(full, part, (size_t)(m * n)), "%s: single rows differ", name);
        for (int64_t r = 1; r < m; r += 3) {
            int64_t rows = m - r < 3 ? m - r : 3;
            CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, rows, n, k, 1.0f, a + r * k, k, b,
                               n, 0.0f, part + r * n, n));
        }
        CHECK(same_bits(full, part, (size_t)(m * n)), "%s: batches of rows differ", name);
        /* Columns in blocks of 5: B and C addressed at an offset, same leading dimension. */
        for (int64_t j = 0; j < n; j += 5) {
            int64_t cols = n - j < 5 ? n - j : 5;
            CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, m, cols, k, 1.0f, a, k, b + j, n,
                               0.0f, part + j, n));
        }
        CHECK(same_bits(full, part, (size_t)(m * n)), "%s: blocks of columns differ", name);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(a);
    free(b);
    free(full);
    free(part);
}

static void test_bad_arguments_fail(void)
{
    float a[12] = {0}, b[12] = {0}, c[12] = {0};
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, NULL, 4, b, 3, 0, c, 3), bad);
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 4, NULL, 3, 0, c, 3), bad);
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, NULL, 3), bad);
    CHECK(strstr(attn_last_error(), "attn_gemm") != NULL, "message names the function: %s",
          attn_last_error());
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, -1, 3, 4, 1, a, 4, b, 3, 0, c, 3), bad);
    CHECK(strstr(attn_last_error(), "-1") != NULL, "message names the value: %s",
          attn_last_error());
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, -3, 4, 1, a, 4, b, 3, 0, c, 3), bad);
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, -4, 1, a, 4, b, 3, 0, c, 3), bad);
    /* Leading dimensions shorter than a stored row. */
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 3, b, 3, 0, c, 3), bad);
    CHECK(strstr(attn_last_error(), "lda") != NULL, "message names lda: %s", attn_last_error());
    CHECK_FAILS(attn_gemm(ATTN_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 1, b, 3, 0, c, 3), bad);
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 2, 0, c, 3), bad);
    CHECK(strstr(attn_last_error(), "ldb") != NULL, "message names ldb: %s", attn_last_error());
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3), bad);
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, c, 2), bad);
    CHECK(strstr(attn_last_error(), "ldc") != NULL, "message names ldc: %s", attn_last_error());
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 0, b, 3, 0, c, 3), bad);
    CHECK_FAILS(attn_gemm((attn_transpose)2, ATTN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3), bad);
    CHECK_FAILS(attn_gemm(ATTN_NO_TRANS, (attn_transpose)-1, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3), bad);
    /* The same calls with valid arguments succeed (the failures above are not spurious). */
    CHECK_OK(attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, 2, 3, 4, 1, a, 4, b, 3, 0, c, 3));
    CHECK_OK(attn_gemm(ATTN_TRANS, ATTN_TRANS, 2, 3, 4, 1, a, 2, b, 4, 0, c, 3));
}

static void test_backend_names_the_isa(void)
{
    for (size_t i = 0; i < ISA_COUNT; i++) {
        if (!test_isa_wanted(all_isas[i]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[i]));
        const char *backend = attn_gemm_backend();
        CHECK(strcmp(backend, "cblas") == 0 ||
                  (strncmp(backend, "built-in ", 9) == 0 &&
                   strcmp(backend + 9, attn_isa_name(all_isas[i])) == 0),
              "backend '%s' for %s", backend, attn_isa_name(all_isas[i]));
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

static void test_buffers_can_be_released(void)
{
    gemm_case t = {ATTN_TRANS, ATTN_NO_TRANS, 70, 90, 300, 0, 1.0f, 0.0f};
    gemm_data d;
    make_data(&t, 500, &d);
    float *c = test_alloc(c_size(&t, &d) * sizeof(float));
    CHECK_OK(run(&t, &d, c));
    attn_gemm_release_buffers();
    attn_gemm_release_buffers(); /* idempotent */
    CHECK_OK(run(&t, &d, c));
    CHECK(matches_exact(&t, &d, c, attn_isa_name(attn_get_isa())), "works after a release");
    free(c);
    free_data(&d);
}

int main(void)
{
    RUN_TEST(test_every_isa_matches_exact_product);
    RUN_TEST(test_several_cache_blocks);
    RUN_TEST(test_alpha_beta_variations);
    RUN_TEST(test_beta_zero_overwrites_nan);
    RUN_TEST(test_empty_product_scales_c);
    RUN_TEST(test_row_bands_share_packed_b);
    RUN_TEST(test_deterministic_across_runs_and_threads);
    RUN_TEST(test_rows_and_columns_do_not_depend_on_the_batch);
    RUN_TEST(test_bad_arguments_fail);
    RUN_TEST(test_backend_names_the_isa);
    RUN_TEST(test_buffers_can_be_released);
    return test_summary();
}
