/* Softmax and log-softmax: the fast exp behind them, every instruction set against the
 * double reference, the reference backward against finite differences, fully masked and
 * extreme rows, accumulation, determinism and argument checks. */
#include "kernel_testing.h"
#include "kernels/fast_math.h"
#include "kernels/ref_elementwise.h"

typedef enum { SOFTMAX, LOG_SOFTMAX } which_softmax;

static attn_status forward(which_softmax which, int64_t rows, int64_t cols, const float *x,
                           float *y)
{
    return which == SOFTMAX ? attn_softmax_forward(rows, cols, x, y)
                            : attn_log_softmax_forward(rows, cols, x, y);
}

static attn_status backward(which_softmax which, int64_t rows, int64_t cols, const float *y,
                            const float *dy, float *dx)
{
    return which == SOFTMAX ? attn_softmax_backward(rows, cols, y, dy, dx)
                            : attn_log_softmax_backward(rows, cols, y, dy, dx);
}

static void reference_forward(which_softmax which, int64_t rows, int64_t cols, const double *x,
                              double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        if (which == SOFTMAX)
            attn_ref_softmax_row(cols, x + r * cols, y + r * cols);
        else
            attn_ref_log_softmax_row(cols, x + r * cols, y + r * cols);
    }
}

static void reference_backward(which_softmax which, int64_t rows, int64_t cols, const double *y,
                               const double *dy, double *dx)
{
    for (int64_t r = 0; r < rows; r++) {
        if (which == SOFTMAX)
            attn_ref_softmax_backward_row(cols, y + r * cols, dy + r * cols, dx + r * cols);
        else
            attn_ref_log_softmax_backward_row(cols, y + r * cols, dy + r * cols, dx + r * cols);
    }
}

/* ---- the fast exp ------------------------------------------------------------------------- */

static void test_scalar_exp_is_within_one_ulp(void)
{
    /* Every 997th float bit pattern (4.3 million values) over the whole finite-result range;
     * an exhaustive run of all 2.2e9 floats in [-104, 89] measured 0.98 ulp at most. */
    double worst = 0.0;
    float worst_x = 0.0f;
    int64_t checked = 0;
    for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 997) {
        float x = attn_bits_float((uint32_t)bits);
        if (!(x >= ATTN_EXP_MIN_ARG && x <= ATTN_EXP_MAX_ARG))
            continue;
        double err = test_ulp_error(attn_fast_exp(x), exp((double)x));
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
        checked++;
    }
    CHECK(checked > 2000000, "sampled %lld values", (long long)checked);
    CHECK(worst <= 1.0, "attn_fast_exp: %.3f ulp at x = %.9g", worst, (double)worst_x);

    CHECK(attn_fast_exp(-INFINITY) == 0.0f, "exp(-inf) = 0");
    CHECK(attn_fast_exp(-1000.0f) == 0.0f, "exp(-1000) = 0");
    CHECK(isnan(attn_fast_exp(NAN)), "exp(NaN) is NaN");
    CHECK(attn_fast_exp(0.0f) == 1.0f, "exp(0) = 1");
    CHECK(attn_fast_exp(88.8f) == INFINITY && attn_fast_exp(INFINITY) == INFINITY,
          "overflow gives +inf");
    CHECK(attn_fast_exp(88.7f) < INFINITY, "exp(88.7) is finite");
    float tiny = attn_fast_exp(-100.0f); /* 3.7e-44, a subnormal */
    CHECK(tiny > 0.0f && test_ulp_error(tiny, exp(-100.0)) <= 1.0, "subnormal result %g",
          (double)tiny);
}

/* log_softmax_backward computes dx += dy - exp(y) * sum(dy); with dy = (0, -1) that is
 * dx[0] += exp(y[0]) exactly, which exposes each instruction set's vector exp. */
static void test_every_isa_exp_is_within_one_ulp(void)
{
    const int64_t n = 60000;
    float *y = test_floats(2 * (size_t)n), *dy = test_floats(2 * (size_t)n);
    float *dx = test_floats(2 * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        y[2 * i] = ATTN_EXP_MIN_ARG + (ATTN_EXP_MAX_ARG - ATTN_EXP_MIN_ARG) * (float)i / (float)n;
        y[2 * i + 1] = 0.0f;
        dy[2 * i] = 0.0f;
        dy[2 * i + 1] = -1.0f;
    }
    y[0] = -INFINITY;
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        memset(dx, 0, 2 * (size_t)n * sizeof(float));
        CHECK_OK(attn_log_softmax_backward(n, 2, y, dy, dx));
        double worst = 0.0;
        for (int64_t i = 0; i < n; i++) {
            double err = test_ulp_error(dx[2 * i], exp((double)y[2 * i]));
            worst = err > worst ? err : worst;
        }
        CHECK(worst <= 1.0, "%s exp: %.3f ulp", attn_isa_name(test_isas[k]), worst);
        CHECK(dx[0] == 0.0f, "%s exp(-inf) = %g", attn_isa_name(test_isas[k]), (double)dx[0]);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(y);
    free(dy);
    free(dx);
}

/* ---- every instruction set against the double reference ------------------------------------ */

static void check_against_reference(which_softmax which, int64_t rows, int64_t cols)
{
    const size_t n = (size_t)(rows * cols);
    const char *name = which == SOFTMAX ? "softmax" : "log_softmax";
    uint64_t seed = (uint64_t)(rows * 1000 + cols);
    float *x = test_floats(n), *dy = test_floats(n);
    float *y_in = test_floats(n), *y = test_floats(n), *dx = test_floats(n);
    test_fill_uniform(x, n, -8.0f, 8.0f, seed);
    test_fill_uniform(dy, n, -1.0f, 1.0f, seed + 1);

    double *xd = test_to_double(x, n), *y_ref = test_doubles(n);
    reference_forward(which, rows, cols, xd, y_ref);
    /* The backward is checked on its own, from the reference forward rounded to float.
     * (Accumulation into existing values is test_backward_accumulates' job.) */
    for (size_t i = 0; i < n; i++)
        y_in[i] = (float)y_ref[i];
    double *y_in_d = test_to_double(y_in, n), *dyd = test_to_double(dy, n);
    double *dx_ref = test_doubles(n), *dx_bound = test_doubles(n);
    reference_backward(which, rows, cols, y_in_d, dyd, dx_ref);
    /* Backward error bound per element, from the float roundings of the formula: softmax
     * dx = y (dy - sum(dy y)) errs by a few eps * y (|dy| + sum|dy y|); log-softmax
     * dx = dy - p sum(dy), p = exp(y), by a few eps * (|dy| + p sum|dy|). 16 eps leaves
     * room for the exp and the row sums' rounding (observed up to ~3 eps). */
    for (int64_t r = 0; r < rows; r++) {
        double total = 0.0;
        for (int64_t j = 0; j < cols; j++) {
            size_t i = (size_t)(r * cols + j);
            total += which == SOFTMAX ? fabs(dyd[i] * y_in_d[i]) : fabs(dyd[i]);
        }
        for (int64_t j = 0; j < cols; j++) {
            size_t i = (size_t)(r * cols + j);
            double scale = which == SOFTMAX ? y_in_d[i] * (fabs(dyd[i]) + total)
                                            : fabs(dyd[i]) + exp(y_in_d[i]) * total;
            dx_bound[i] = 16.0 * TEST_FLOAT_EPS * scale + 1e-30;
        }
    }

    /* Forward: x - max is rounded to float before the exp, up to 1/2 ulp of 16 = 1e-6
     * absolute, so softmax values carry up to ~1e-6 relative error (observed 7e-7), and
     * log-softmax values, up to ~25 in magnitude, a few ulp (observed 1.8e-6 absolute). */
    const double fwd_atol = which == SOFTMAX ? 1e-30 : 4e-6, fwd_rtol = 4e-6;
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        char what[96];
        snprintf(what, sizeof what, "%s forward %s %lldx%lld", name, attn_isa_name(test_isas[k]),
                 (long long)rows, (long long)cols);
        CHECK_OK(forward(which, rows, cols, x, y));
        CHECK_NEAR_REFERENCE(what, y, y_ref, n, fwd_atol, fwd_rtol);

        memset(dx, 0, n * sizeof(float));
        CHECK_OK(backward(which, rows, cols, y_in, dy, dx));
        snprintf(what, sizeof what, "%s backward %s %lldx%lld", name, attn_isa_name(test_isas[k]),
                 (long long)rows, (long long)cols);
        CHECK_WITHIN_BOUNDS(what, dx, dx_ref, dx_bound, n);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(y_in), free(y), free(dx);
    free(xd), free(y_ref), free(y_in_d), free(dyd), free(dx_ref), free(dx_bound);
}

static void test_every_isa_matches_reference(void)
{
    for (int i = 0; i < TEST_ROW_COUNTS; i++)
        for (int j = 0; j < TEST_COL_COUNTS; j++) {
            check_against_reference(SOFTMAX, test_row_counts[i], test_col_counts[j]);
            check_against_reference(LOG_SOFTMAX, test_row_counts[i], test_col_counts[j]);
        }
}

/* ---- the double reference backward against finite differences -------------------------------- */

typedef struct {
    which_softmax which;
    int64_t cols;
    const double *weights;
    double *y;
} objective_ctx;

/* sum(weights * f(x)): its gradient is the backward with dy = weights */
static double weighted_output(void *ctx_ptr, const double *x)
{
    objective_ctx *ctx = ctx_ptr;
    reference_forward(ctx->which, 1, ctx->cols, x, ctx->y);
    double total = 0.0;
    for (int64_t j = 0; j < ctx->cols; j++)
        total += ctx->weights[j] * ctx->y[j];
    return total;
}

static void test_reference_backward_matches_finite_differences(void)
{
    const int64_t sizes[] = {1, 2, 7, 80};
    for (int w = 0; w < 2; w++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            which_softmax which = w == 0 ? SOFTMAX : LOG_SOFTMAX;
            int64_t n = sizes[s];
            double *x = test_doubles((size_t)n), *weights = test_doubles((size_t)n);
            double *y = test_doubles((size_t)n), *analytic = test_doubles((size_t)n);
            double *numeric = test_doubles((size_t)n);
            test_fill_uniform_double(x, (size_t)n, -3.0, 3.0, (uint64_t)(17 + n));
            test_fill_uniform_double(weights, (size_t)n, -1.0, 1.0, (uint64_t)(31 + n));
            objective_ctx ctx = {which, n, weights, y};
            reference_forward(which, 1, n, x, y);
            reference_backward(which, 1, n, y, weights, analytic); /* analytic starts at 0 */
            test_numeric_gradient(weighted_output, &ctx, x, (size_t)n, 1e-6, numeric);
            CHECK(test_doubles_close(which == SOFTMAX ? "softmax grad" : "log_softmax grad",
                                     analytic, numeric, (size_t)n, 1e-8, 1e-6),
                  "%s backward vs finite differences, cols=%lld",
                  which == SOFTMAX ? "softmax" : "log_softmax", (long long)n);
            free(x), free(weights), free(y), free(analytic), free(numeric);
        }
}

/* ---- masked and extreme rows ---------------------------------------------------------------- */

static void test_masked_and_extreme_rows(void)
{
    enum { COLS = 37, ROWS = 5 };
    float x[ROWS * COLS], y[ROWS * COLS], logy[ROWS * COLS];
    test_fill_uniform(x, ROWS * COLS, -3.0f, 3.0f, 5);
    for (int j = 0; j < COLS; j++) {
        x[0 * COLS + j] = -INFINITY; /* fully masked */
        if (j % 3 != 1)
            x[1 * COLS + j] = -INFINITY;                   /* partly masked */
        x[2 * COLS + j] = (j % 2 ? 1.0f : -1.0f) * 1.0e4f; /* huge spread */
        x[3 * COLS + j] = 3.0e38f - (float)j * 1.0e31f;    /* near FLT_MAX */
    }
    double xd[ROWS * COLS], y_ref[ROWS * COLS], logy_ref[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        xd[i] = x[i];
    reference_forward(SOFTMAX, ROWS, COLS, xd, y_ref);
    reference_forward(LOG_SOFTMAX, ROWS, COLS, xd, logy_ref);

    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        const char *isa = attn_isa_name(test_isas[k]);
        CHECK_OK(attn_softmax_forward(ROWS, COLS, x, y));
        CHECK_OK(attn_log_softmax_forward(ROWS, COLS, x, logy));
        int masked_ok = 1, finite = 1;
        for (int j = 0; j < COLS; j++) {
            masked_ok &= y[j] == 0.0f && logy[j] == -INFINITY;
            if (j % 3 != 1)
                masked_ok &= y[COLS + j] == 0.0f && logy[COLS + j] == -INFINITY;
        }
        for (int i = COLS; i < ROWS * COLS; i++)
            finite &= isfinite(y[i]);
        CHECK(masked_ok, "%s: masked entries give exactly 0 / -inf", isa);
        CHECK(finite, "%s: no NaN or inf from large magnitudes", isa);
        CHECK_NEAR_REFERENCE(isa, y, y_ref, ROWS * COLS, 1e-30, 4e-6);
        CHECK_NEAR_REFERENCE(isa, logy + COLS, logy_ref + COLS, (ROWS - 1) * COLS, 4e-6, 4e-6);

        /* a fully masked row gets no gradient through softmax */
        float dy[COLS], dx[COLS] = {0};
        test_fill_uniform(dy, COLS, -1.0f, 1.0f, 6);
        CHECK_OK(attn_softmax_backward(1, COLS, y, dy, dx));
        int zero = 1;
        for (int j = 0; j < COLS; j++)
            zero &= dx[j] == 0.0f;
        CHECK(zero, "%s: no gradient into a fully masked softmax row", isa);
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

static void test_forward_in_place(void)
{
    enum { ROWS = 5, COLS = 203 };
    float x[ROWS * COLS], y[ROWS * COLS], inplace[ROWS * COLS];
    test_fill_uniform(x, ROWS * COLS, -6.0f, 6.0f, 11);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < TEST_ISA_COUNT; k++) {
            if (!test_use_isa(test_isas[k]))
                continue;
            memcpy(inplace, x, sizeof x);
            CHECK_OK(forward((which_softmax)w, ROWS, COLS, x, y));
            CHECK_OK(forward((which_softmax)w, ROWS, COLS, inplace, inplace));
            CHECK(test_same_bits(y, inplace, ROWS * COLS), "%s: y may alias x",
                  attn_isa_name(test_isas[k]));
        }
    attn_set_isa(ATTN_ISA_AUTO);
}

/* ---- accumulation, determinism, argument checks ------------------------------------------------
 */

static void test_backward_accumulates(void)
{
    enum { ROWS = 9, COLS = 50 };
    float y[ROWS * COLS], dy[ROWS * COLS], once[ROWS * COLS], twice[ROWS * COLS];
    double doubled[ROWS * COLS];
    test_fill_uniform(y, ROWS * COLS, 0.0f, 0.1f, 7);
    test_fill_uniform(dy, ROWS * COLS, -1.0f, 1.0f, 8);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < TEST_ISA_COUNT; k++) {
            if (!test_use_isa(test_isas[k]))
                continue;
            memset(once, 0, sizeof once);
            memset(twice, 0, sizeof twice);
            CHECK_OK(backward((which_softmax)w, ROWS, COLS, y, dy, once));
            CHECK_OK(backward((which_softmax)w, ROWS, COLS, y, dy, twice));
            CHECK_OK(backward((which_softmax)w, ROWS, COLS, y, dy, twice));
            for (int i = 0; i < ROWS * COLS; i++)
                doubled[i] = 2.0 * once[i];
            CHECK_NEAR_REFERENCE(attn_isa_name(test_isas[k]), twice, doubled, ROWS * COLS, 1e-7,
                                 1e-6);
        }
    attn_set_isa(ATTN_ISA_AUTO);
}

static void test_deterministic_across_runs_and_thread_counts(void)
{
    const int64_t rows = 129, cols = 1037;
    const size_t n = (size_t)(rows * cols);
    float *x = test_floats(n), *dy = test_floats(n);
    float *first = test_floats(n), *again = test_floats(n);
    test_fill_uniform(x, n, -5.0f, 5.0f, 9);
    test_fill_uniform(dy, n, -1.0f, 1.0f, 10);
    for (int w = 0; w < 2; w++)
        for (int k = 0; k < TEST_ISA_COUNT; k++) {
            if (!test_use_isa(test_isas[k]))
                continue;
            int same = 1;
            for (int threads = 2; threads >= 1; threads--) {
                CHECK_OK(attn_set_num_threads(threads));
                /* the forward's output, plus the backward's gradient on top of it */
                float *out = threads == 2 ? first : again;
                CHECK_OK(forward((which_softmax)w, rows, cols, x, out));
                CHECK_OK(backward((which_softmax)w, rows, cols, x, dy, out));
            }
            same &= test_same_bits(first, again, n);
            CHECK_OK(attn_set_num_threads(2));
            CHECK_OK(forward((which_softmax)w, rows, cols, x, again));
            CHECK_OK(backward((which_softmax)w, rows, cols, x, dy, again));
            same &= test_same_bits(first, again, n);
            CHECK(same, "%s: same bits for 1 and 2 threads and across runs",
                  attn_isa_name(test_isas[k]));
        }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(first), free(again);
}

static void test_rejects_bad_arguments(void)
{
    float x[6] = {0}, y[6] = {0}, dx[6] = {0};
    for (int w = 0; w < 2; w++) {
        which_softmax which = (which_softmax)w;
        CHECK_FAILS(forward(which, 2, 3, NULL, y), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), "softmax_forward") && strstr(attn_last_error(), "x"),
              "message names the function and argument: %s", attn_last_error());
        CHECK_FAILS(forward(which, 2, 3, x, NULL), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(forward(which, -1, 3, x, y), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), "-1") != NULL, "message names the value: %s",
              attn_last_error());
        CHECK_FAILS(forward(which, 2, -3, x, y), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(backward(which, 2, 3, NULL, x, dx), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(backward(which, 2, 3, y, NULL, dx), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(backward(which, 2, 3, y, x, NULL), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(backward(which, 2, -3, y, x, dx), ATTN_ERR_INVALID_ARGUMENT);
        /* empty shapes are valid and touch nothing */
        CHECK_OK(forward(which, 0, 3, NULL, NULL));
        CHECK_OK(forward(which, 4, 0, NULL, NULL));
        CHECK_OK(backward(which, 0, 3, NULL, NULL, NULL));
    }
}

int main(void)
{
    RUN_TEST(test_scalar_exp_is_within_one_ulp);
    RUN_TEST(test_every_isa_exp_is_within_one_ulp);
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_reference_backward_matches_finite_differences);
    RUN_TEST(test_masked_and_extreme_rows);
    RUN_TEST(test_forward_in_place);
    RUN_TEST(test_backward_accumulates);
    RUN_TEST(test_deterministic_across_runs_and_thread_counts);
    RUN_TEST(test_rejects_bad_arguments);
    return test_summary();
}
