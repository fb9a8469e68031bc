/* RMSNorm: every instruction set against the double reference (with and without gamma), the
 * reference backward against finite differences, accumulation and writing, determinism
 * across thread counts, and argument checks. */
#include "kernel_testing.h"
#include "kernels/elementwise.h"
#include "kernels/ref_elementwise.h"

#define EPS 1e-5f

/* rows x dim of x, dy and gamma from seed; the reference forward and backward in double,
 * the backward from the forward's rstd rounded to float, as a float forward hands it on. */
static void check_against_reference(int64_t rows, int64_t dim, int with_gamma)
{
    const size_t n = (size_t)(rows * dim);
    const uint64_t seed = (uint64_t)(rows * 131 + dim * 7 + with_gamma);
    float *x = test_floats(n), *dy = test_floats(n), *y = test_floats(n), *dx = test_floats(n);
    float *gamma = test_floats((size_t)dim), *dgamma = test_floats((size_t)dim);
    float *rstd = test_floats((size_t)rows), *rstd_f = test_floats((size_t)rows);
    double *y_ref = test_doubles(n), *dx_ref = test_doubles(n),
           *dgamma_ref = test_doubles((size_t)dim);
    double *rstd_ref = test_doubles((size_t)rows);
    test_fill_uniform(x, n, -4.0f, 4.0f, seed);
    test_fill_uniform(dy, n, -1.0f, 1.0f, seed + 1);
    test_fill_uniform(gamma, (size_t)dim, 0.5f, 1.5f, seed + 2);
    const float *g = with_gamma ? gamma : NULL;
    double *xd = test_to_double(x, n), *dyd = test_to_double(dy, n);
    double *gd = test_to_double(gamma, (size_t)dim);
    for (size_t i = 0; i < n; i++)
        dx_ref[i] = 0.0;
    for (int64_t j = 0; j < dim; j++)
        dgamma_ref[j] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        attn_ref_rms_norm_row(dim, xd + r * dim, with_gamma ? gd : NULL, EPS, y_ref + r * dim,
                              &rstd_ref[r]);
        rstd_f[r] = (float)rstd_ref[r];
        attn_ref_rms_norm_backward_row(dim, xd + r * dim, with_gamma ? gd : NULL, rstd_f[r],
                                       dyd + r * dim, dx_ref + r * dim, dgamma_ref);
    }
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        char what[128];
        snprintf(what, sizeof what, "%s %lldx%lld gamma %d", attn_isa_name(test_isas[k]),
                 (long long)rows, (long long)dim, with_gamma);
        CHECK_OK(attn_rms_norm_forward(rows, dim, x, g, EPS, y, rstd));
        CHECK_NEAR_REFERENCE(what, y, y_ref, n, 1e-6, 2e-6);
        CHECK_NEAR_REFERENCE(what, rstd, rstd_ref, (size_t)rows, 0, 1e-6);
        memset(dx, 0, n * sizeof(float));
        memset(dgamma, 0, (size_t)dim * sizeof(float));
        CHECK_OK(
            attn_rms_norm_backward(rows, dim, x, g, rstd_f, dy, dx, with_gamma ? dgamma : NULL));
        CHECK_NEAR_REFERENCE(what, dx, dx_ref, n, 2e-6, 1e-5);
        if (with_gamma)
            CHECK_NEAR_REFERENCE(what, dgamma, dgamma_ref, (size_t)dim, 1e-5 * (double)rows, 1e-5);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(y), free(dx), free(gamma), free(dgamma), free(rstd), free(rstd_f);
    free(y_ref), free(dx_ref), free(dgamma_ref), free(rstd_ref), free(xd), free(dyd), free(gd);
}

static void test_every_isa_matches_reference(void)
{
    for (int i = 0; i < TEST_ROW_COUNTS; i++)
        for (int j = 0; j < TEST_COL_COUNTS; j++)
            for (int with_gamma = 0; with_gamma <= 1; with_gamma++)
                check_against_reference(test_row_counts[i], test_col_counts[j], with_gamma);
    check_against_reference(1000, 64, 1); /* several rows per dgamma block */
}

/* sum(weights * y) of rows of x followed by gamma, for finite differences. */
typedef struct {
    int64_t rows, dim;
    const double *weights;
    double *y;
} objective_ctx;

static double weighted_output(void *raw, const double *params)
{
    objective_ctx *c = raw;
    const double *gamma = params + c->rows * c->dim;
    double total = 0.0, rstd;
    for (int64_t r = 0; r < c->rows; r++) {
        attn_ref_rms_norm_row(c->dim, params + r * c->dim, gamma, EPS, c->y, &rstd);
        for (int64_t j = 0; j < c->dim; j++)
            total += c->weights[r * c->dim + j] * c->y[j];
    }
    return total;
}

static void test_reference_backward_matches_finite_differences(void)
{
    const int64_t dims[] = {1, 2, 7, 64};
    const int64_t rows = 3;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        const int64_t dim = dims[d];
        const size_t count = (size_t)((rows + 1) * dim);
        double *params = test_doubles(count), *weights = test_doubles((size_t)(rows * dim));
        double *analytic = test_doubles(count), *numeric = test_doubles(count);
        double *y = test_doubles((size_t)dim);
        test_fill_uniform_double(params, count, -2.0, 2.0, (uint64_t)(71 + dim));
        test_fill_uniform_double(weights, (size_t)(rows * dim), -1.0, 1.0, (uint64_t)(81 + dim));
        double *gamma = params + rows * dim;
        for (size_t i = 0; i < count; i++)
            analytic[i] = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            double rstd;
            attn_ref_rms_norm_row(dim, params + r * dim, gamma, EPS, y, &rstd);
            attn_ref_rms_norm_backward_row(dim, params + r * dim, gamma, rstd, weights + r * dim,
                                           analytic + r * dim, analytic + rows * dim);
        }
        objective_ctx ctx = {rows, dim, weights, y};
        test_numeric_gradient(weighted_output, &ctx, params, count, 1e-6, numeric);
        CHECK(test_doubles_close("rms norm grad", analytic, numeric, count, 1e-7, 1e-6),
              "rms norm backward (x, gamma) vs finite differences, dim=%lld", (long long)dim);
        free(params), free(weights), free(analytic), free(numeric), free(y);
    }
}

/* The public backward adds; the internal one may write instead, to the same bits as adding
 * to zeros. */
static void test_backward_accumulates_or_writes(void)
{
    const int64_t rows = 5, dim = 37;
    const size_t n = (size_t)(rows * dim);
    float *x = test_floats(n), *dy = test_floats(n), *gamma = test_floats((size_t)dim);
    float *y = test_floats(n), *rstd = test_floats((size_t)rows);
    float *once = test_floats(n), *twice = test_floats(n), *written = test_floats(n);
    test_fill_uniform(x, n, -2.0f, 2.0f, 5);
    test_fill_uniform(dy, n, -1.0f, 1.0f, 6);
    test_fill_uniform(gamma, (size_t)dim, 0.5f, 1.5f, 7);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        CHECK_OK(attn_rms_norm_forward(rows, dim, x, gamma, EPS, y, rstd));
        memset(once, 0, n * sizeof(float));
        CHECK_OK(attn_rms_norm_backward(rows, dim, x, gamma, rstd, dy, once, NULL));
        memcpy(twice, once, n * sizeof(float));
        CHECK_OK(attn_rms_norm_backward(rows, dim, x, gamma, rstd, dy, twice, NULL));
        int doubled = 1;
        for (size_t i = 0; i < n; i++)
            doubled &= twice[i] == once[i] + once[i];
        CHECK(doubled, "%s: a second backward adds", attn_isa_name(test_isas[k]));
        test_fill_uniform(written, n, 7.0f, 9.0f, 8);
        CHECK_OK(attn_rms_norm_backward_to(rows, dim, x, gamma, rstd, dy, written, NULL, 0));
        CHECK(test_same_bits(written, once, n), "%s: writing equals adding to zeros",
              attn_isa_name(test_isas[k]));
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(gamma), free(y), free(rstd), free(once), free(twice), free(written);
}

static void test_deterministic_across_thread_counts(void)
{
    const int64_t rows = 300, dim = 1037;
    const size_t n = (size_t)(rows * dim), outputs = 2 * n + (size_t)dim;
    float *x = test_floats(n), *dy = test_floats(n), *gamma = test_floats((size_t)dim);
    float *rstd = test_floats((size_t)rows);
    float *runs[2] = {test_floats(outputs), test_floats(outputs)};
    test_fill_uniform(x, n, -3.0f, 3.0f, 91);
    test_fill_uniform(dy, n, -1.0f, 1.0f, 92);
    test_fill_uniform(gamma, (size_t)dim, 0.5f, 1.5f, 93);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int run = 0; run < 2; run++) {
            float *out = runs[run];
            memset(out, 0, outputs * sizeof(float));
            CHECK_OK(attn_set_num_threads(run == 0 ? 1 : 2));
            CHECK_OK(attn_rms_norm_forward(rows, dim, x, gamma, EPS, out, rstd));
            CHECK_OK(attn_rms_norm_backward(rows, dim, x, gamma, rstd, dy, out + n, out + 2 * n));
        }
        CHECK(test_same_bits(runs[0], runs[1], outputs),
              "%s: same bits (dgamma included) for 1 and 2 threads", attn_isa_name(test_isas[k]));
    }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(gamma), free(rstd), free(runs[0]), free(runs[1]);
}

static void test_rejects_bad_arguments(void)
{
    float x[6] = {0}, y[6], rstd[2] = {1, 1}, dx[6] = {0};
    CHECK_FAILS(attn_rms_norm_forward(2, 3, NULL, NULL, EPS, y, rstd), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rms_norm_forward(2, 3, x, NULL, EPS, NULL, rstd), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rms_norm_forward(-2, 3, x, NULL, EPS, y, rstd), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rms_norm_forward(2, 0, x, NULL, EPS, y, rstd), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "dim") != NULL, "names dim: %s", attn_last_error());
    CHECK_FAILS(attn_rms_norm_forward(2, 3, x, NULL, NAN, y, rstd), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "eps") != NULL, "names eps: %s", attn_last_error());
    CHECK_FAILS(attn_rms_norm_backward(2, 3, x, NULL, NULL, x, dx, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_rms_norm_backward(2, 3, x, NULL, rstd, x, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_rms_norm_forward(2, 3, x, NULL, EPS, y, NULL));
    CHECK_OK(attn_rms_norm_forward(0, 3, NULL, NULL, EPS, NULL, NULL));
    CHECK_OK(attn_rms_norm_backward(0, 3, NULL, NULL, NULL, NULL, NULL, NULL));
}

int main(void)
{
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_reference_backward_matches_finite_differences);
    RUN_TEST(test_backward_accumulates_or_writes);
    RUN_TEST(test_deterministic_across_thread_counts);
    RUN_TEST(test_rejects_bad_arguments);
    return test_summary();
}
