/* Activations: the fast erf, tanh and sigmoid behind them, every instruction set against
 * the double reference, the reference derivatives against finite differences, extreme and
 * special inputs, in-place use, accumulation, determinism and argument checks. */
#include "kernel_testing.h"
#include "kernels/elementwise.h"
#include "kernels/fast_math.h"
#include "kernels/ref_elementwise.h"

static const attn_activation all_activations[] = {ATTN_ACT_RELU,      ATTN_ACT_GELU,
                                                  ATTN_ACT_GELU_TANH, ATTN_ACT_TANH,
                                                  ATTN_ACT_SIGMOID,   ATTN_ACT_SILU};
#define ACTIVATION_COUNT 6
static const char *const activation_names[] = {"relu", "gelu",    "gelu_tanh",
                                               "tanh", "sigmoid", "silu"};

/* ---- the scalar approximations --------------------------------------------------------------- */

static void test_fast_erf_accuracy(void)
{
    double worst = 0.0, worst_x = 0.0;
    for (int i = -600000; i <= 600000; i++) {
        float x = (float)i * 1e-5f; /* [-6, 6] */
        double err = fabs((double)attn_fast_erf(x) - erf((double)x));
        if (err > worst) {
            worst = err;
            worst_x = x;
        }
    }
    /* fit: 6e-8; one more ulp of values near 1 for the final rounding */
    CHECK(worst <= 1.2e-7, "erf: %.3g absolute at x = %.9g", worst, worst_x);
    int odd = 1;
    for (int i = 1; i < 5000; i++) {
        float x = (float)i * 1.3e-3f;
        odd &= attn_fast_erf(-x) == -attn_fast_erf(x);
    }
    CHECK(odd, "erf(-x) = -erf(x) exactly");
    CHECK(attn_fast_erf(0.0f) == 0.0f, "erf(0) = 0");
    CHECK(test_ulp_error(attn_fast_erf(1e-20f), erf(1e-20)) <= 2.0, "erf keeps relative "
                                                                    "accuracy for tiny x");
    CHECK(attn_fast_erf(INFINITY) == 1.0f && attn_fast_erf(-INFINITY) == -1.0f, "erf(+-inf)");
    CHECK(isnan(attn_fast_erf(NAN)), "erf(NaN) is NaN");
}

static void test_fast_tanh_and_sigmoid_ulps(void)
{
    double worst_tanh = 0.0, worst_sigmoid = 0.0, worst_dtanh = 0.0, worst_dsigmoid = 0.0;
    for (int i = -400000; i <= 400000; i++) {
        float x = (float)i * 1e-4f; /* [-40, 40] */
        double t = tanh((double)x), s = 1.0 / (1.0 + exp(-(double)x));
        worst_tanh = fmax(worst_tanh, test_ulp_error(attn_fast_tanh(x), t));
        worst_sigmoid = fmax(worst_sigmoid, test_ulp_error(attn_fast_sigmoid(x), s));
        /* derivatives against the cancellation-free exact forms */
        double e = exp(-2.0 * fabs((double)x)), f = exp(-fabs((double)x));
        worst_dtanh = fmax(worst_dtanh, test_ulp_error(attn_fast_tanh_derivative(x),
                                                       4.0 * e / ((1.0 + e) * (1.0 + e))));
        worst_dsigmoid = fmax(worst_dsigmoid, test_ulp_error(attn_fast_sigmoid_derivative(x),
                                                             f / ((1.0 + f) * (1.0 + f))));
    }
    CHECK(worst_tanh <= 3.0, "tanh: %.3f ulp", worst_tanh);
    CHECK(worst_sigmoid <= 3.0, "sigmoid: %.3f ulp", worst_sigmoid);
    /* e / (1 + e)^2: exp's ulp, twice the rounding of 1 + e, the square and the division */
    CHECK(worst_dtanh <= 5.0, "tanh': %.3f ulp", worst_dtanh);
    CHECK(worst_dsigmoid <= 5.0, "sigmoid': %.3f ulp", worst_dsigmoid);
    CHECK(test_ulp_error(attn_fast_tanh(1e-30f), 1e-30) <= 1.0, "tanh(tiny) = tiny");
    CHECK(attn_fast_tanh(INFINITY) == 1.0f && attn_fast_tanh(-INFINITY) == -1.0f, "tanh(+-inf)");
    CHECK(attn_fast_sigmoid(INFINITY) == 1.0f && attn_fast_sigmoid(-INFINITY) == 0.0f,
          "sigmoid(+-inf)");
    CHECK(isnan(attn_fast_tanh(NAN)) && isnan(attn_fast_sigmoid(NAN)), "NaN stays NaN");
}

/* ---- every instruction set against the double reference ---------------------------------------
 */

/* Error bound of a float evaluation of f at x (or of f' for the backward): 16 eps of the
 * value plus 16 eps of its sensitivity to a relative change of x, |x g'(x)|, which covers
 * the rounding of intermediate arguments (g' by central differences of the reference).
 * Exact GELU adds erf's absolute error (~1 eps) times its weight |x| / 2 (|dy| / 2 in the
 * backward), as in every float x (1 + erf) / 2. SiLU adds the subnormal sigmoid's error. */
static double error_bound(attn_activation act, int derivative, double x, double dy)
{
    double (*g)(attn_activation, double) =
        derivative ? attn_ref_activation_derivative : attn_ref_activation;
    double h = fmax(fabs(x), 1e-30) * 1e-6;
    double sensitivity = fabs(x * (g(act, x + h) - g(act, x - h)) / (2.0 * h));
    double bound = 16.0 * TEST_FLOAT_EPS * (fabs(g(act, x)) + sensitivity);
    if (act == ATTN_ACT_GELU)
        bound += 2.0 * TEST_FLOAT_EPS * (derivative ? 1.0 : fabs(x));
    /* SiLU's sigmoid(x) and sigmoid'(x) are subnormal floats for x below -87: x times their
     * absolute error (a few of the smallest subnormal, 1.4e-45) */
    if (act == ATTN_ACT_SILU)
        bound += 4.0 * 1.4e-45 * fabs(x);
    return (bound + 1e-44) * (derivative ? fabs(dy) : 1.0); /* 1e-44: subnormal results */
}

static void check_against_reference(attn_activation act, const float *x, const float *dy, size_t n,
                                    const char *what)
{
    float *y = test_floats(n), *dx = test_floats(n);
    double *y_ref = test_doubles(n), *dx_ref = test_doubles(n);
    double *y_bound = test_doubles(n), *dx_bound = test_doubles(n);
    for (size_t i = 0; i < n; i++) {
        y_ref[i] = attn_ref_activation(act, x[i]);
        dx_ref[i] = attn_ref_activation_derivative(act, x[i]) * dy[i];
        y_bound[i] = error_bound(act, 0, x[i], 1.0);
        dx_bound[i] = error_bound(act, 1, x[i], dy[i]);
    }
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        char label[128];
        snprintf(label, sizeof label, "%s %s forward %s (n=%zu)", activation_names[act],
                 attn_isa_name(test_isas[k]), what, n);
        CHECK_OK(attn_activation_forward(act, (int64_t)n, x, y));
        CHECK_WITHIN_BOUNDS(label, y, y_ref, y_bound, n);
        memset(dx, 0, n * sizeof(float));
        CHECK_OK(attn_activation_backward(act, (int64_t)n, x, dy, dx));
        snprintf(label, sizeof label, "%s %s backward %s (n=%zu)", activation_names[act],
                 attn_isa_name(test_isas[k]), what, n);
        CHECK_WITHIN_BOUNDS(label, dx, dx_ref, dx_bound, n);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(y), free(dx), free(y_ref), free(dx_ref), free(y_bound), free(dx_bound);
}

static void test_every_isa_matches_reference(void)
{
    const size_t sizes[] = {1, 7, 64, 80, 1037, 100003};
    for (int a = 0; a < ACTIVATION_COUNT; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            size_t n = sizes[s];
            float *x = test_floats(n), *dy = test_floats(n);
            test_fill_uniform(x, n, -10.0f, 10.0f, 91 + n);
            test_fill_uniform(dy, n, -1.0f, 1.0f, 92 + n);
            check_against_reference(all_activations[a], x, dy, n, "uniform [-10, 10]");
            free(x), free(dy);
        }
}

static void test_extreme_inputs(void)
{
    const float specials[] = {0.0f,   -0.0f,   1e-30f,  -1e-30f,    1e-40f, -1e-40f, 0.5f,
                              -0.5f,  0.625f,  -0.625f, 3.9999998f, 4.0f,   -4.0f,   9.0f,
                              -9.0f,  20.0f,   -20.0f,  43.0f,      -43.0f, 88.0f,   -88.0f,
                              100.0f, -100.0f, 1e4f,    -1e4f,      1e12f,  -1e12f};
    const size_t n = sizeof specials / sizeof specials[0];
    float dy[sizeof specials / sizeof specials[0]];
    for (size_t i = 0; i < n; i++)
        dy[i] = i % 2 ? 0.75f : -1.25f;
    for (int a = 0; a < ACTIVATION_COUNT; a++)
        check_against_reference(all_activations[a], specials, dy, n, "extreme inputs");

    /* NaN propagates through the forward, as in PyTorch */
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int a = 0; a < ACTIVATION_COUNT; a++) {
            float x[19], y[19];
            for (int i = 0; i < 19; i++)
                x[i] = i == 11 ? NAN : 1.0f;
            CHECK_OK(attn_activation_forward(all_activations[a], 19, x, y));
            CHECK(isnan(y[11]) && y[10] == y[12], "%s %s: NaN in, NaN out", activation_names[a],
                  attn_isa_name(test_isas[k]));
        }
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

/* ---- the double reference derivative against finite differences -------------------------------
 */

static void test_reference_derivative_matches_finite_differences(void)
{
    for (int a = 0; a < ACTIVATION_COUNT; a++) {
        attn_activation act = all_activations[a];
        double worst = 0.0;
        for (int i = -400; i <= 400; i++) {
            double x = i * 0.0137 + 0.001; /* [-5.5, 5.5], never exactly 0 (ReLU's kink) */
            double h = 1e-6;
            double numeric =
                (attn_ref_activation(act, x + h) - attn_ref_activation(act, x - h)) / (2.0 * h);
            double analytic = attn_ref_activation_derivative(act, x);
            worst = fmax(worst, fabs(numeric - analytic) / (1.0 + fabs(analytic)));
        }
        CHECK(worst <= 1e-8, "%s: derivative vs finite differences off by %.3g",
              activation_names[a], worst);
    }
}

/* ---- in place, accumulation, determinism, argument checks
 * ---------------------------------------- */

static void test_forward_in_place(void)
{
    enum { N = 333 };
    float x[N], y[N], inplace[N];
    test_fill_uniform(x, N, -6.0f, 6.0f, 93);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int a = 0; a < ACTIVATION_COUNT; a++) {
            memcpy(inplace, x, sizeof x);
            CHECK_OK(attn_activation_forward(all_activations[a], N, x, y));
            CHECK_OK(attn_activation_forward(all_activations[a], N, inplace, inplace));
            CHECK(test_same_bits(y, inplace, N), "%s %s: y may alias x", activation_names[a],
                  attn_isa_name(test_isas[k]));
        }
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

static void test_backward_accumulates(void)
{
    enum { N = 257 };
    float x[N], dy[N];
    test_fill_uniform(x, N, -6.0f, 6.0f, 94);
    test_fill_uniform(dy, N, -1.0f, 1.0f, 95);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int a = 0; a < ACTIVATION_COUNT; a++) {
            float once[N] = {0}, twice[N] = {0};
            double doubled[N];
            CHECK_OK(attn_activation_backward(all_activations[a], N, x, dy, once));
            CHECK_OK(attn_activation_backward(all_activations[a], N, x, dy, twice));
            CHECK_OK(attn_activation_backward(all_activations[a], N, x, dy, twice));
            for (int i = 0; i < N; i++)
                doubled[i] = 2.0 * once[i];
            CHECK_NEAR_REFERENCE(activation_names[a], twice, doubled, N, 1e-30, 1e-6);
        }
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

/* The graph's first contribution to a gradient writes it (accumulate 0) into memory that holds
 * anything: the result must be the bits of adding to zeros, -0 included, whatever was there,
 * and accumulate 1 must be the public entry point's. */
static void test_backward_can_write_instead_of_adding(void)
{
    enum { N = 1037 };
    float x[N], dy[N], from_zeros[N], written[N], start[N], added[N], public_added[N];
    test_fill_uniform(x, N, -6.0f, 6.0f, 96);
    test_fill_uniform(dy, N, -1.0f, 1.0f, 97);
    test_fill_uniform(start, N, -1.0f, 1.0f, 98);
    for (int i = 0; i < N; i += 7)
        dy[i] = -0.0f; /* products of -0 */
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int a = 0; a < ACTIVATION_COUNT; a++) {
            for (int i = 0; i < N; i++) {
                from_zeros[i] = 0.0f;
                written[i] = NAN;
            }
            memcpy(added, start, sizeof added);
            memcpy(public_added, start, sizeof public_added);
            CHECK_OK(attn_activation_backward(all_activations[a], N, x, dy, from_zeros));
            CHECK_OK(attn_activation_backward_to(all_activations[a], N, x, dy, written, 0));
            CHECK_OK(attn_activation_backward(all_activations[a], N, x, dy, public_added));
            CHECK_OK(attn_activation_backward_to(all_activations[a], N, x, dy, added, 1));
            CHECK(test_same_bits(written, from_zeros, N) && test_same_bits(added, public_added, N),
                  "%s %s: writing gives the bits of adding to zeros (%d), adding those of the "
                  "public backward (%d)",
                  attn_isa_name(test_isas[k]), activation_names[a],
                  test_same_bits(written, from_zeros, N), test_same_bits(added, public_added, N));
        }
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

static void test_deterministic_across_runs_and_thread_counts(void)
{
    const size_t n = 200003;
    float *x = test_floats(n), *dy = test_floats(n);
    float *runs[2] = {test_floats(2 * n), test_floats(2 * n)};
    test_fill_uniform(x, n, -8.0f, 8.0f, 96);
    test_fill_uniform(dy, n, -1.0f, 1.0f, 97);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        for (int a = 0; a < ACTIVATION_COUNT; a++) {
            int same = 1;
            for (int run = 0; run < 3; run++) {
                float *out = runs[run == 0 ? 0 : 1];
                memset(out, 0, 2 * n * sizeof(float));
                CHECK_OK(attn_set_num_threads(run == 1 ? 1 : 2));
                CHECK_OK(attn_activation_forward(all_activations[a], (int64_t)n, x, out));
                CHECK_OK(attn_activation_backward(all_activations[a], (int64_t)n, x, dy, out + n));
                if (run > 0)
                    same &= test_same_bits(runs[0], runs[1], 2 * n);
            }
            CHECK(same, "%s %s: same bits for 1 and 2 threads and across runs", activation_names[a],
                  attn_isa_name(test_isas[k]));
        }
    }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(runs[0]), free(runs[1]);
}

static void test_rejects_bad_arguments(void)
{
    float x[4] = {0}, y[4], dx[4] = {0};
    CHECK_FAILS(attn_activation_forward((attn_activation)99, 4, x, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "99") != NULL, "names the value: %s", attn_last_error());
    CHECK_FAILS(attn_activation_forward((attn_activation)-1, 4, x, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_backward((attn_activation)6, 4, x, x, dx),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_forward(ATTN_ACT_GELU, -4, x, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_forward(ATTN_ACT_GELU, 4, NULL, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_forward(ATTN_ACT_GELU, 4, x, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_backward(ATTN_ACT_TANH, 4, NULL, x, dx), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_backward(ATTN_ACT_TANH, 4, x, NULL, dx), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_backward(ATTN_ACT_TANH, 4, x, x, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_activation_backward(ATTN_ACT_TANH, -1, x, x, dx), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_activation_forward(ATTN_ACT_RELU, 0, NULL, NULL));
    CHECK_OK(attn_activation_backward(ATTN_ACT_RELU, 0, NULL, NULL, NULL));
}

int main(void)
{
    RUN_TEST(test_fast_erf_accuracy);
    RUN_TEST(test_fast_tanh_and_sigmoid_ulps);
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_extreme_inputs);
    RUN_TEST(test_reference_derivative_matches_finite_differences);
    RUN_TEST(test_forward_in_place);
    RUN_TEST(test_backward_accumulates);
    RUN_TEST(test_backward_can_write_instead_of_adding);
    RUN_TEST(test_deterministic_across_runs_and_thread_counts);
    RUN_TEST(test_rejects_bad_arguments);
    return test_summary();
}
