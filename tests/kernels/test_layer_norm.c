/* Layer norm: every instruction set against the double reference (with and without the
 * affine parameters), the reference backward against finite differences, large means and
 * constant rows, accumulation, determinism and argument checks. */
#include "kernel_testing.h"
#include "kernels/elementwise.h"
#include "kernels/ref_elementwise.h"

#define EPS 1e-5f

typedef struct {
    int64_t rows, dim;
    double *y, *mean, *rstd;     /* forward */
    float *mean_f, *rstd_f;      /* mean and rstd rounded to float */
    double *dx, *dgamma, *dbeta; /* backward from zero */
    double *y_bound, *dx_bound, *dgamma_bound, *dbeta_bound;
} reference_result;

/* The reference forward and backward of float data, and per-element error bounds for a
 * float implementation: a few float roundings of each term of the formulas (32 eps;
 * observed within 4), which for sums means 32 eps times the sum of magnitudes. The
 * backward runs from the forward's mean and rstd rounded to float, as a float forward
 * would hand them over. */
static reference_result reference(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                  const float *beta, const float *dy)
{
    const size_t n = (size_t)(rows * dim);
    reference_result ref = {rows,
                            dim,
                            test_doubles(n),
                            test_doubles((size_t)rows),
                            test_doubles((size_t)rows),
                            test_floats((size_t)rows),
                            test_floats((size_t)rows),
                            test_doubles(n),
                            test_doubles((size_t)dim),
                            test_doubles((size_t)dim),
                            test_doubles(n),
                            test_doubles(n),
                            test_doubles((size_t)dim),
                            test_doubles((size_t)dim)};
    double *xd = test_to_double(x, n), *dyd = test_to_double(dy, n);
    double *gd = gamma ? test_to_double(gamma, (size_t)dim) : NULL;
    double *bd = beta ? test_to_double(beta, (size_t)dim) : NULL;
    const double k = 32.0 * TEST_FLOAT_EPS;
    for (int64_t j = 0; j < dim; j++) {
        ref.dgamma[j] = ref.dbeta[j] = 0.0;
        ref.dgamma_bound[j] = ref.dbeta_bound[j] = 1e-30;
    }
    for (int64_t r = 0; r < rows; r++) {
        const double *xr = xd + r * dim, *dyr = dyd + r * dim;
        attn_ref_layer_norm_row(dim, xr, gd, bd, EPS, ref.y + r * dim, &ref.mean[r], &ref.rstd[r]);
        ref.mean_f[r] = (float)ref.mean[r];
        ref.rstd_f[r] = (float)ref.rstd[r];
        double mean = ref.mean_f[r], rstd = ref.rstd_f[r];
        double *dxr = ref.dx + r * dim;
        double sum_g = 0.0, sum_gx = 0.0, centre = 0.0;
        for (int64_t j = 0; j < dim; j++) {
            dxr[j] = 0.0;
            double xhat = (xr[j] - mean) * rstd, g = dyr[j] * (gd ? gd[j] : 1.0);
            sum_g += fabs(g);
            sum_gx += fabs(g * xhat);
            centre += fabs(xr[j]) * rstd;
        }
        attn_ref_layer_norm_backward_row(dim, xr, gd, mean, rstd, dyr, dxr, ref.dgamma, ref.dbeta);
        for (int64_t j = 0; j < dim; j++) {
            size_t i = (size_t)(r * dim + j);
            double xhat = (xr[j] - mean) * rstd, g = dyr[j] * (gd ? gd[j] : 1.0);
            double gamma_j = gd ? fabs(gd[j]) : 1.0;
            /* y: the terms, plus the mean's rounding (a sum of |x|) scaled by rstd gamma */
            ref.y_bound[i] = k * (fabs(xhat) * gamma_j + (bd ? fabs(bd[j]) : 0.0) +
                                  gamma_j * centre / (double)dim) +
                             1e-30;
            ref.dx_bound[i] =
                k * rstd * (fabs(g) + (sum_g + fabs(xhat) * sum_gx) / (double)dim) + 1e-30;
            ref.dgamma_bound[j] += k * fabs(dyr[j] * xhat);
            ref.dbeta_bound[j] += k * fabs(dyr[j]);
        }
    }
    free(xd), free(dyd), free(gd), free(bd);
    return ref;
}

static void free_reference(reference_result *ref)
{
    free(ref->y), free(ref->mean), free(ref->rstd), free(ref->mean_f), free(ref->rstd_f);
    free(ref->dx), free(ref->dgamma);
    free(ref->dbeta), free(ref->y_bound), free(ref->dx_bound), free(ref->dgamma_bound);
    free(ref->dbeta_bound);
}

/* ---- every instruction set against the double reference ------------------------------------ */

enum { AFFINE_NONE, AFFINE_GAMMA, AFFINE_BOTH };

static void check_against_reference(int64_t rows, int64_t dim, int affine, float offset)
{
    const size_t n = (size_t)(rows * dim);
    uint64_t seed = (uint64_t)(rows * 131 + dim * 7 + affine);
    float *x = test_floats(n), *dy = test_floats(n), *y = test_floats(n), *dx = test_floats(n);
    float *gamma = test_floats((size_t)dim), *beta = test_floats((size_t)dim);
    float *dgamma = test_floats((size_t)dim), *dbeta = test_floats((size_t)dim);
    float *mean = test_floats((size_t)rows), *rstd = test_floats((size_t)rows);
    test_fill_uniform(x, n, offset - 4.0f, offset + 4.0f, seed);
    test_fill_uniform(dy, n, -1.0f, 1.0f, seed + 1);
    test_fill_uniform(gamma, (size_t)dim, 0.5f, 1.5f, seed + 2);
    test_fill_uniform(beta, (size_t)dim, -1.0f, 1.0f, seed + 3);
    const float *g = affine != AFFINE_NONE ? gamma : NULL;
    const float *b = affine == AFFINE_BOTH ? beta : NULL;
    reference_result ref = reference(rows, dim, x, g, b, dy);

    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        char what[128];
        snprintf(what, sizeof what, "%s %lldx%lld affine %d offset %g", attn_isa_name(test_isas[k]),
                 (long long)rows, (long long)dim, affine, (double)offset);
        CHECK_OK(attn_layer_norm_forward(rows, dim, x, g, b, EPS, y, mean, rstd));
        CHECK_WITHIN_BOUNDS(what, y, ref.y, ref.y_bound, n);
        CHECK_NEAR_REFERENCE(what, mean, ref.mean, (size_t)rows, 1e-6 * (fabs(offset) + 4), 0);
        CHECK_NEAR_REFERENCE(what, rstd, ref.rstd, (size_t)rows, 0, 1e-6);

        memset(dx, 0, n * sizeof(float));
        memset(dgamma, 0, (size_t)dim * sizeof(float));
        memset(dbeta, 0, (size_t)dim * sizeof(float));
        CHECK_OK(attn_layer_norm_backward(rows, dim, x, g, ref.mean_f, ref.rstd_f, dy, dx, dgamma,
                                          dbeta));
        CHECK_WITHIN_BOUNDS(what, dx, ref.dx, ref.dx_bound, n);
        CHECK_WITHIN_BOUNDS(what, dgamma, ref.dgamma, ref.dgamma_bound, (size_t)dim);
        CHECK_WITHIN_BOUNDS(what, dbeta, ref.dbeta, ref.dbeta_bound, (size_t)dim);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free_reference(&ref);
    free(x), free(dy), free(y), free(dx), free(gamma), free(beta), free(dgamma), free(dbeta);
    free(mean), free(rstd);
}

static void test_every_isa_matches_reference(void)
{
    for (int i = 0; i < TEST_ROW_COUNTS; i++)
        for (int j = 0; j < TEST_COL_COUNTS; j++)
            for (int affine = AFFINE_NONE; affine <= AFFINE_BOTH; affine++)
                check_against_reference(test_row_counts[i], test_col_counts[j], affine, 0.0f);
    /* many rows: several rows per dgamma block */
    check_against_reference(1000, 64, AFFINE_BOTH, 0.0f);
}

/* A mean far from zero: the two-pass variance keeps it (E[x^2] - E[x]^2 would not). */
static void test_large_mean(void)
{
    check_against_reference(17, 80, AFFINE_BOTH, 1000.0f);
    check_against_reference(3, 1037, AFFINE_NONE, -300.0f);
}

/* A constant row has variance 0: the output is beta (up to the mean's last-bit rounding
 * amplified by 1/sqrt(eps)), never NaN. */
static void test_constant_row(void)
{
    enum { DIM = 50 };
    float x[DIM], y[DIM], beta[DIM], mean, rstd;
    test_fill_uniform(beta, DIM, -1.0f, 1.0f, 41);
    for (int j = 0; j < DIM; j++)
        x[j] = 0.7f;
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        CHECK_OK(attn_layer_norm_forward(1, DIM, x, NULL, beta, EPS, y, &mean, &rstd));
        double worst = 0.0;
        for (int j = 0; j < DIM; j++)
            worst = fmax(worst, fabs((double)y[j] - beta[j]));
        CHECK(worst <= 1e-4, "%s: constant row gives beta (off by %g)", attn_isa_name(test_isas[k]),
              worst);
        CHECK_CLOSE(rstd, 1.0 / sqrt((double)EPS), 0, 1e-5);
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

/* ---- the double reference backward against finite differences -------------------------------- */

typedef struct {
    int64_t rows, dim;
    const double *weights; /* [rows, dim] */
    double *y;
} objective_ctx;

/* sum(weights * layer_norm(x; gamma, beta)) over params = [x (rows*dim), gamma, beta] */
static double weighted_output(void *ctx_ptr, const double *params)
{
    objective_ctx *ctx = ctx_ptr;
    const int64_t dim = ctx->dim;
    const double *gamma = params + ctx->rows * dim, *beta = gamma + dim;
    double total = 0.0, mean, rstd;
    for (int64_t r = 0; r < ctx->rows; r++) {
        attn_ref_layer_norm_row(dim, params + r * dim, gamma, beta, EPS, ctx->y, &mean, &rstd);
        for (int64_t j = 0; j < dim; j++)
            total += ctx->weights[r * dim + j] * ctx->y[j];
    }
    return total;
}

static void test_reference_backward_matches_finite_differences(void)
{
    const int64_t dims[] = {1, 2, 7, 64};
    const int64_t rows = 3;
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        const int64_t dim = dims[d];
        const size_t count = (size_t)((rows + 2) * dim);
        double *params = test_doubles(count), *weights = test_doubles((size_t)(rows * dim));
        double *analytic = test_doubles(count), *numeric = test_doubles(count);
        double *y = test_doubles((size_t)dim);
        test_fill_uniform_double(params, count, -2.0, 2.0, (uint64_t)(51 + dim));
        test_fill_uniform_double(weights, (size_t)(rows * dim), -1.0, 1.0, (uint64_t)(61 + dim));
        double *gamma = params + rows * dim, *beta = gamma + dim;
        for (size_t i = 0; i < count; i++)
            analytic[i] = 0.0;
        for (int64_t r = 0; r < rows; r++) {
            double mean, rstd;
            attn_ref_layer_norm_row(dim, params + r * dim, gamma, beta, EPS, y, &mean, &rstd);
            attn_ref_layer_norm_backward_row(dim, params + r * dim, gamma, mean, rstd,
                                             weights + r * dim, analytic + r * dim,
                                             analytic + rows * dim, analytic + (rows + 1) * dim);
        }
        objective_ctx ctx = {rows, dim, weights, y};
        test_numeric_gradient(weighted_output, &ctx, params, count, 1e-6, numeric);
        CHECK(test_doubles_close("layer norm grad", analytic, numeric, count, 1e-7, 1e-6),
              "layer norm backward (x, gamma, beta) vs finite differences, dim=%lld",
              (long long)dim);
        free(params), free(weights), free(analytic), free(numeric), free(y);
    }
}

/* ---- accumulation, determinism, argument checks ------------------------------------------------
 */

static void test_backward_accumulates(void)
{
    enum { ROWS = 11, DIM = 40 };
    float x[ROWS * DIM], dy[ROWS * DIM], gamma[DIM], y[ROWS * DIM], mean[ROWS], rstd[ROWS];
    test_fill_uniform(x, ROWS * DIM, -2.0f, 2.0f, 71);
    test_fill_uniform(dy, ROWS * DIM, -1.0f, 1.0f, 72);
    test_fill_uniform(gamma, DIM, 0.5f, 1.5f, 73);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        float once[ROWS * DIM + 2 * DIM] = {0}, twice[ROWS * DIM + 2 * DIM] = {0};
        double doubled[ROWS * DIM + 2 * DIM];
        CHECK_OK(attn_layer_norm_forward(ROWS, DIM, x, gamma, NULL, EPS, y, mean, rstd));
        CHECK_OK(attn_layer_norm_backward(ROWS, DIM, x, gamma, mean, rstd, dy, once,
                                          once + ROWS * DIM, once + ROWS * DIM + DIM));
        for (int rep = 0; rep < 2; rep++)
            CHECK_OK(attn_layer_norm_backward(ROWS, DIM, x, gamma, mean, rstd, dy, twice,
                                              twice + ROWS * DIM, twice + ROWS * DIM + DIM));
        for (int i = 0; i < ROWS * DIM + 2 * DIM; i++)
            doubled[i] = 2.0 * once[i];
        CHECK_NEAR_REFERENCE(attn_isa_name(test_isas[k]), twice, doubled, ROWS * DIM + 2 * DIM,
                             1e-6, 1e-6);
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

/* The graph's first contribution to a gradient writes dx (accumulate 0) into memory that holds
 * anything: the bits of adding to zeros; accumulate 1 is the public entry point. */
static void test_backward_can_write_instead_of_adding(void)
{
    enum { ROWS = 37, DIM = 80 };
    float x[ROWS * DIM], dy[ROWS * DIM], gamma[DIM], y[ROWS * DIM], mean[ROWS], rstd[ROWS];
    float from_zeros[ROWS * DIM], written[ROWS * DIM], start[ROWS * DIM];
    float added[ROWS * DIM], public_added[ROWS * DIM];
    float dgamma[2][DIM], dbeta[2][DIM];
    test_fill_uniform(x, ROWS * DIM, -2.0f, 2.0f, 74);
    test_fill_uniform(dy, ROWS * DIM, -1.0f, 1.0f, 75);
    test_fill_uniform(gamma, DIM, 0.5f, 1.5f, 76);
    test_fill_uniform(start, ROWS * DIM, -1.0f, 1.0f, 77);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int affine = 0; affine <= 1; affine++) {
            const float *g = affine ? gamma : NULL;
            for (int i = 0; i < ROWS * DIM; i++) {
                from_zeros[i] = 0.0f;
                written[i] = NAN;
            }
            memset(dgamma, 0, sizeof dgamma);
            memset(dbeta, 0, sizeof dbeta);
            memcpy(added, start, sizeof added);
            memcpy(public_added, start, sizeof public_added);
            CHECK_OK(attn_layer_norm_forward(ROWS, DIM, x, g, NULL, EPS, y, mean, rstd));
            CHECK_OK(attn_layer_norm_backward(ROWS, DIM, x, g, mean, rstd, dy, from_zeros,
                                              affine ? dgamma[0] : NULL, affine ? dbeta[0] : NULL));
            CHECK_OK(attn_layer_norm_backward_to(ROWS, DIM, x, g, mean, rstd, dy, written,
                                                 affine ? dgamma[1] : NULL,
                                                 affine ? dbeta[1] : NULL, 0));
            CHECK_OK(attn_layer_norm_backward(ROWS, DIM, x, g, mean, rstd, dy, public_added, NULL,
                                              NULL));
            CHECK_OK(
                attn_layer_norm_backward_to(ROWS, DIM, x, g, mean, rstd, dy, added, NULL, NULL, 1));
            const int same_dx = test_same_bits(written, from_zeros, ROWS * DIM);
            const int same_params = test_same_bits(dgamma[0], dgamma[1], DIM) &&
                                    test_same_bits(dbeta[0], dbeta[1], DIM);
            const int same_added = test_same_bits(added, public_added, ROWS * DIM);
            CHECK(same_dx && same_params && same_added,
                  "%s, affine %d: written dx = dx added to zeros (%d), same dgamma and dbeta "
                  "(%d), adding = the public backward (%d)",
                  attn_isa_name(test_isas[k]), affine, same_dx, same_params, same_added);
        }
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

static void test_deterministic_across_runs_and_thread_counts(void)
{
    const int64_t rows = 300, dim = 1037;
    const size_t n = (size_t)(rows * dim);
    float *x = test_floats(n), *dy = test_floats(n), *gamma = test_floats((size_t)dim);
    float *beta = test_floats((size_t)dim), *mean = test_floats((size_t)rows);
    float *rstd = test_floats((size_t)rows);
    const size_t outputs = n + n + 2 * (size_t)dim; /* y, dx, dgamma, dbeta */
    float *runs[2] = {test_floats(outputs), test_floats(outputs)};
    test_fill_uniform(x, n, -3.0f, 3.0f, 81);
    test_fill_uniform(dy, n, -1.0f, 1.0f, 82);
    test_fill_uniform(gamma, (size_t)dim, 0.5f, 1.5f, 83);
    test_fill_uniform(beta, (size_t)dim, -1.0f, 1.0f, 84);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        int same = 1;
        for (int run = 0; run < 3; run++) {
            float *out = runs[run == 0 ? 0 : 1];
            memset(out, 0, outputs * sizeof(float));
            CHECK_OK(attn_set_num_threads(run == 1 ? 1 : 2));
            CHECK_OK(attn_layer_norm_forward(rows, dim, x, gamma, beta, EPS, out, mean, rstd));
            CHECK_OK(attn_layer_norm_backward(rows, dim, x, gamma, mean, rstd, dy, out + n,
                                              out + 2 * n, out + 2 * n + dim));
            if (run > 0)
                same &= test_same_bits(runs[0], runs[1], outputs);
        }
        CHECK(same,
              "%s: same bits (dgamma and dbeta included) for 1 and 2 threads and across "
              "runs",
              attn_isa_name(test_isas[k]));
    }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(gamma), free(beta), free(mean), free(rstd), free(runs[0]);
    free(runs[1]);
}

static void test_rejects_bad_arguments(void)
{
    float x[6] = {0}, y[6], mean[2] = {0}, rstd[2] = {1, 1}, dx[6] = {0};
    CHECK_FAILS(attn_layer_norm_forward(2, 3, NULL, NULL, NULL, EPS, y, mean, rstd),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_forward(2, 3, x, NULL, NULL, EPS, NULL, mean, rstd),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_forward(-2, 3, x, NULL, NULL, EPS, y, mean, rstd),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_forward(2, 0, x, NULL, NULL, EPS, y, mean, rstd),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "dim") != NULL, "names dim: %s", attn_last_error());
    const float bad_eps[] = {-1e-5f, NAN, INFINITY};
    for (int i = 0; i < 3; i++)
        CHECK_FAILS(attn_layer_norm_forward(2, 3, x, NULL, NULL, bad_eps[i], y, mean, rstd),
                    ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_backward(2, 3, NULL, NULL, mean, rstd, x, dx, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_backward(2, 3, x, NULL, NULL, rstd, x, dx, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_backward(2, 3, x, NULL, mean, NULL, x, dx, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_backward(2, 3, x, NULL, mean, rstd, NULL, dx, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_backward(2, 3, x, NULL, mean, rstd, x, NULL, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_layer_norm_backward(2, -3, x, NULL, mean, rstd, x, dx, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    /* optional outputs may be left out */
    CHECK_OK(attn_layer_norm_forward(2, 3, x, NULL, NULL, EPS, y, NULL, NULL));
    CHECK_OK(attn_layer_norm_backward(2, 3, x, NULL, mean, rstd, x, dx, NULL, NULL));
    CHECK_OK(attn_layer_norm_forward(0, 3, NULL, NULL, NULL, EPS, NULL, NULL, NULL));
    CHECK_OK(attn_layer_norm_backward(0, 3, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
}

int main(void)
{
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_large_mean);
    RUN_TEST(test_constant_row);
    RUN_TEST(test_reference_backward_matches_finite_differences);
    RUN_TEST(test_backward_accumulates);
    RUN_TEST(test_backward_can_write_instead_of_adding);
    RUN_TEST(test_deterministic_across_runs_and_thread_counts);
    RUN_TEST(test_rejects_bad_arguments);
    return test_summary();
}
