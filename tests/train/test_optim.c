/* Adam / AdamW, gradient norm, clipping, scaling and learning-rate schedules against
 * double-precision references written here, on every instruction set the CPU supports. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const attn_isa all_isas[] = {ATTN_ISA_REFERENCE, ATTN_ISA_PORTABLE, ATTN_ISA_AVX2,
                                    ATTN_ISA_AVX512, ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
#define NUM_ISAS (sizeof all_isas / sizeof all_isas[0])

static const int64_t sizes[] = {1, 3, 17, 129, 1000, 40007};
#define NUM_SIZES (sizeof sizes / sizeof sizes[0])

/* Values of magnitudes spread over 10^-5 .. 10^0 with both signs, so that eps matters for
 * some elements and not for others. */
static void fill_spread(float *x, int64_t n, uint64_t seed)
{
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    for (int64_t i = 0; i < n; i++) {
        float sign = attn_rng_uniform(&rng) < 0.5f ? -1.0f : 1.0f;
        x[i] = sign * powf(10.0f, -5.0f * attn_rng_uniform(&rng)) * (0.5f + attn_rng_uniform(&rng));
    }
}

/* ---- the double-precision Adam reference ------------------------------------------------ */

typedef struct adam_state {
    int64_t n;
    float *p, *m, *v;       /* the library's buffers */
    double *pd, *md, *vd;   /* the reference's */
    double *m_scale;        /* m's recurrence on |g|: the size of the terms m sums */
    uint8_t *decayed;       /* per element: 1 = weight decay applies */
} adam_state;

static adam_state adam_state_new(int64_t n, uint64_t seed)
{
    adam_state s;
    s.n = n;
    s.p = test_alloc((size_t)n * sizeof(float));
    s.m = test_alloc((size_t)n * sizeof(float));
    s.v = test_alloc((size_t)n * sizeof(float));
    s.pd = test_alloc((size_t)n * sizeof(double));
    s.md = test_alloc((size_t)n * sizeof(double));
    s.vd = test_alloc((size_t)n * sizeof(double));
    s.m_scale = test_alloc((size_t)n * sizeof(double));
    s.decayed = test_alloc((size_t)n);
    test_fill_uniform(s.p, (size_t)n, -1.0f, 1.0f, seed);
    for (int64_t i = 0; i < n; i++) {
        s.m[i] = s.v[i] = 0.0f;
        s.pd[i] = s.p[i];
        s.md[i] = s.vd[i] = s.m_scale[i] = 0.0;
        s.decayed[i] = 1;
    }
    return s;
}

static void adam_state_free(adam_state *s)
{
    free(s->p);
    free(s->m);
    free(s->v);
    free(s->pd);
    free(s->md);
    free(s->vd);
    free(s->m_scale);
    free(s->decayed);
}

static void mark_exempt(adam_state *s, const attn_param_range *ranges, int64_t count)
{
    for (int64_t r = 0; r < count; r++)
        for (int64_t i = ranges[r].offset; i < ranges[r].offset + ranges[r].count; i++)
            s->decayed[i] = 0;
}

/* Adam (Kingma & Ba, algorithm 1) with L2 decay in the gradient, or AdamW (Loshchilov &
 * Hutter) with the decay applied to the weights, step t counted from 1. */
static void adam_double(const attn_adam_options *o, int64_t t, const float *grads, adam_state *s)
{
    for (int64_t i = 0; i < s->n; i++) {
        double wd = s->decayed[i] ? o->weight_decay : 0.0;
        double g = grads[i];
        if (o->variant == ATTN_ADAMW)
            s->pd[i] -= o->lr * wd * s->pd[i];
        else
            g += wd * s->pd[i];
        s->md[i] = o->beta1 * s->md[i] + (1 - o->beta1) * g;
        s->m_scale[i] = o->beta1 * s->m_scale[i] + (1 - o->beta1) * fabs(g);
        s->vd[i] = o->beta2 * s->vd[i] + (1 - o->beta2) * g * g;
        double m_hat = s->md[i] / (1 - pow(o->beta1, (double)t));
        double v_hat = s->vd[i] / (1 - pow(o->beta2, (double)t));
        s->pd[i] -= o->lr * m_hat / (sqrt(v_hat) + o->eps);
    }
}

static attn_adam_options options_for(attn_adam_variant variant, double weight_decay)
{
    attn_adam_options o = attn_adam_default_options(variant);
    o.lr = 0.01;
    o.beta1 = 0.9;
    o.beta2 = 0.98;
    o.eps = 1e-6;
    o.weight_decay = weight_decay;
    return o;
}

/* Exempt ranges spread over the buffer: the first element, a block in the middle, the end. */
static int64_t exempt_ranges_for(int64_t n, attn_param_range ranges[3])
{
    if (n < 10) {
        ranges[0] = (attn_param_range){0, 1};
        return 1;
    }
    ranges[0] = (attn_param_range){0, 1};
    ranges[1] = (attn_param_range){n / 3, n / 5};
    ranges[2] = (attn_param_range){n - 7, 7};
    return 3;
}

#define ADAM_STEPS 6

/* m sums gradients of either sign, so its float rounding is relative to the terms
 * (m_scale), not to m itself, which can cancel to near zero. */
static int first_moment_close(const char *what, const adam_state *s)
{
    int64_t worst = -1;
    double worst_excess = 0;
    for (int64_t i = 0; i < s->n; i++) {
        double excess = fabs(s->m[i] - s->md[i]) - 1e-6 * s->m_scale[i];
        if (excess > worst_excess || isnan(excess)) {
            worst_excess = isnan(excess) ? INFINITY : excess;
            worst = i;
        }
    }
    if (worst >= 0)
        fprintf(stderr, "  %s: m[%lld] = %.9g, expected %.9g (terms of size %.3g)\n", what,
                (long long)worst, (double)s->m[worst], s->md[worst], s->m_scale[worst]);
    return worst < 0;
}

/* Runs ADAM_STEPS steps of the library (on the current ISA) and of the reference. */
static void run_adam_against_reference(const attn_adam_options *o, adam_state *s,
                                       uint64_t seed)
{
    float *grads = test_alloc((size_t)s->n * sizeof(float));
    int64_t step = 0;
    for (int k = 0; k < ADAM_STEPS; k++) {
        fill_spread(grads, s->n, seed + (uint64_t)k);
        CHECK_OK(attn_adam_step(o, &step, s->n, s->p, grads, s->m, s->v));
        adam_double(o, step, grads, s);
    }
    CHECK(step == ADAM_STEPS, "step counter %lld after %d steps", (long long)step, ADAM_STEPS);
    free(grads);
}

static void test_adam_matches_double_reference_on_every_isa(void)
{
    const attn_adam_variant variants[] = {ATTN_ADAM, ATTN_ADAMW};
    const double decays[] = {0.0, 0.1};
    char what[160];
    for (size_t ii = 0; ii < NUM_ISAS; ii++) {
        if (!attn_isa_supported(all_isas[ii]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[ii]));
        for (size_t vi = 0; vi < 2; vi++)
            for (size_t di = 0; di < 2; di++)
                for (int exempt = 0; exempt < 2; exempt++)
                    for (size_t si = 0; si < NUM_SIZES; si++) {
                        const int64_t n = sizes[si];
                        attn_adam_options o = options_for(variants[vi], decays[di]);
                        attn_param_range ranges[3];
                        adam_state s = adam_state_new(n, 11 + (uint64_t)n);
                        if (exempt) {
                            o.no_decay_count = exempt_ranges_for(n, ranges);
                            o.no_decay = ranges;
                            mark_exempt(&s, ranges, o.no_decay_count);
                        }
                        run_adam_against_reference(&o, &s, 100 + (uint64_t)n);
                        snprintf(what, sizeof what, "%s %s wd=%g exempt=%d n=%lld",
                                 attn_isa_name(all_isas[ii]),
                                 variants[vi] == ATTN_ADAM ? "Adam" : "AdamW", decays[di],
                                 exempt, (long long)n);
                        /* Float rounding: p gains up to half an ulp per step, plus the
                         * update's relative error times lr; v sums positive terms. */
                        CHECK_ARRAYS_CLOSE(what, s.p, s.pd, (size_t)n, 1e-5 * o.lr, 4e-7);
                        CHECK(first_moment_close(what, &s), "%s: m differs", what);
                        CHECK_ARRAYS_CLOSE(what, s.v, s.vd, (size_t)n, 0, 2e-6);
                        adam_state_free(&s);
                    }
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Properties that do not lean on a formula written twice: Adam's first step moves every
 * parameter by lr * g / (|g| + eps) against its gradient, and eps sits outside the root. */
static void test_adam_first_step_is_lr_times_sign(void)
{
    for (size_t ii = 0; ii < NUM_ISAS; ii++) {
        if (!attn_isa_supported(all_isas[ii]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[ii]));
        float p[4] = {0.5f, -0.25f, 2.0f, 1.0f}, g[4] = {3.0f, -0.01f, 1e-4f, 0.0f};
        float m[4] = {0}, v[4] = {0};
        const float before[4] = {0.5f, -0.25f, 2.0f, 1.0f};
        attn_adam_options o = attn_adam_default_options(ATTN_ADAM);
        o.lr = 0.125;
        o.eps = 1e-4;
        int64_t step = 0;
        CHECK_OK(attn_adam_step(&o, &step, 4, p, g, m, v));
        CHECK_CLOSE(p[0], before[0] - 0.125 * 3.0 / (3.0 + 1e-4), 0, 1e-6);
        CHECK_CLOSE(p[1], before[1] + 0.125 * 0.01 / (0.01 + 1e-4), 0, 1e-6);
        /* |g| = eps: half a step, which eps inside the root would make ~1/100 of a step */
        CHECK_CLOSE(p[2], before[2] - 0.125 / 2, 0, 1e-6);
        CHECK(p[3] == before[3], "zero gradient, no move: %.9g", (double)p[3]);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* The decay is p *= 1 - lr * wd for AdamW, independent of the gradient, and exempt ranges
 * keep their parameters when the gradient is zero; Adam with a zero gradient moves the
 * decayed parameters by about lr * sign(p). */
static void test_weight_decay_and_exempt_ranges(void)
{
    for (size_t ii = 0; ii < NUM_ISAS; ii++) {
        if (!attn_isa_supported(all_isas[ii]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[ii]));
        enum { N = 37 };
        float p[N], g[N] = {0}, m[N] = {0}, v[N] = {0}, before[N];
        test_fill_uniform(p, N, 0.5f, 2.0f, 5);
        memcpy(before, p, sizeof p);
        attn_param_range exempt[2] = {{3, 4}, {30, 7}};
        attn_adam_options o = attn_adam_default_options(ATTN_ADAMW);
        o.lr = 0.1;
        o.weight_decay = 0.5;
        o.no_decay = exempt;
        o.no_decay_count = 2;
        int64_t step = 0;
        CHECK_OK(attn_adam_step(&o, &step, N, p, g, m, v));
        int ok = 1;
        for (int i = 0; i < N; i++) {
            int is_exempt = (i >= 3 && i < 7) || i >= 30;
            double expected = is_exempt ? before[i] : before[i] * (1.0 - 0.1 * 0.5);
            ok &= test_close(p[i], expected, 0, 1e-6);
        }
        CHECK(ok, "%s: AdamW decays only outside the exempt ranges", attn_isa_name(all_isas[ii]));

        memcpy(p, before, sizeof p);
        memset(m, 0, sizeof m);
        memset(v, 0, sizeof v);
        o.variant = ATTN_ADAM;
        step = 0;
        CHECK_OK(attn_adam_step(&o, &step, N, p, g, m, v));
        ok = 1;
        for (int i = 0; i < N; i++) {
            int is_exempt = (i >= 3 && i < 7) || i >= 30;
            double expected = is_exempt ? before[i] : before[i] - 0.1;
            ok &= test_close(p[i], expected, 1e-6, 0);
        }
        CHECK(ok, "%s: Adam's L2 term acts only outside the exempt ranges",
              attn_isa_name(all_isas[ii]));
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Runs steps on a copy of fixed state and returns the parameters after them. */
static void adam_run(const attn_adam_options *o, int64_t n, int steps, float *p_out,
                     float *m_out, float *v_out)
{
    float *g = test_alloc((size_t)n * sizeof(float));
    test_fill_uniform(p_out, (size_t)n, -1.0f, 1.0f, 3);
    memset(m_out, 0, (size_t)n * sizeof(float));
    memset(v_out, 0, (size_t)n * sizeof(float));
    int64_t step = 0;
    for (int k = 0; k < steps; k++) {
        fill_spread(g, n, 70 + (uint64_t)k);
        CHECK_OK(attn_adam_step(o, &step, n, p_out, g, m_out, v_out));
    }
    free(g);
}

/* Same inputs, same bits: run twice, and with one and two threads (each element's update
 * does not depend on the split). The AVX2 and AVX-512 kernels round every operation alike,
 * so they agree to the bit; the portable one emulates their fused multiply-adds in double
 * and may differ by an ulp in rare cases. */
static void test_adam_is_deterministic_and_isas_agree(void)
{
    const int64_t n = 70001;
    const size_t bytes = (size_t)n * sizeof(float);
    float *p1 = test_alloc(bytes), *m1 = test_alloc(bytes), *v1 = test_alloc(bytes);
    float *p2 = test_alloc(bytes), *m2 = test_alloc(bytes), *v2 = test_alloc(bytes);
    float *p_avx2 = test_alloc(bytes);
    attn_adam_options o = options_for(ATTN_ADAMW, 0.1);
    attn_param_range exempt[3];
    o.no_decay_count = exempt_ranges_for(n, exempt);
    o.no_decay = exempt;
    int have_avx2 = 0;
    for (size_t ii = 0; ii < NUM_ISAS; ii++) {
        if (!attn_isa_supported(all_isas[ii]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[ii]));
        CHECK_OK(attn_set_num_threads(2));
        adam_run(&o, n, 3, p1, m1, v1);
        adam_run(&o, n, 3, p2, m2, v2);
        CHECK(memcmp(p1, p2, bytes) == 0 && memcmp(m1, m2, bytes) == 0 &&
                  memcmp(v1, v2, bytes) == 0,
              "%s: two runs differ", attn_isa_name(all_isas[ii]));
        CHECK_OK(attn_set_num_threads(1));
        adam_run(&o, n, 3, p2, m2, v2);
        CHECK(memcmp(p1, p2, bytes) == 0 && memcmp(m1, m2, bytes) == 0 &&
                  memcmp(v1, v2, bytes) == 0,
              "%s: one and two threads differ", attn_isa_name(all_isas[ii]));
        if (all_isas[ii] == ATTN_ISA_AVX2) {
            memcpy(p_avx2, p1, bytes);
            have_avx2 = 1;
        }
        if (all_isas[ii] == ATTN_ISA_AVX512 && have_avx2)
            CHECK(memcmp(p1, p_avx2, bytes) == 0, "AVX2 and AVX-512 updates differ");
    }
    if (have_avx2) {
        CHECK_OK(attn_set_isa(ATTN_ISA_PORTABLE));
        adam_run(&o, n, 3, p1, m1, v1);
        int64_t differing = 0;
        double worst_ulps = 0;
        for (int64_t i = 0; i < n; i++)
            if (p1[i] != p_avx2[i]) {
                differing++;
                double ulps = fabs((double)p1[i] - p_avx2[i]) /
                              (nextafterf(fabsf(p_avx2[i]), INFINITY) - fabsf(p_avx2[i]));
                worst_ulps = fmax(worst_ulps, ulps);
            }
        CHECK(worst_ulps <= 2 && differing <= n / 1000,
              "portable vs AVX2: %lld of %lld parameters differ, by up to %g ulp",
              (long long)differing, (long long)n, worst_ulps);
    }
    CHECK_OK(attn_set_num_threads(0));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(p1), free(m1), free(v1), free(p2), free(m2), free(v2), free(p_avx2);
}

/* The step counter is int64, incremented by each call (even with no parameters), and a
 * large count means bias corrections of 1. */
static void test_step_counter(void)
{
    float p[2] = {1.0f, -1.0f}, g[2] = {0.5f, 0.25f}, m[2] = {0}, v[2] = {0};
    attn_adam_options o = attn_adam_default_options(ATTN_ADAM);
    int64_t step = 0;
    CHECK_OK(attn_adam_step(&o, &step, 0, NULL, NULL, NULL, NULL));
    CHECK(step == 1, "n = 0 still counts the step: %lld", (long long)step);
    step = (int64_t)1 << 40;
    CHECK_OK(attn_adam_step(&o, &step, 2, p, g, m, v));
    CHECK(step == ((int64_t)1 << 40) + 1, "counter past 2^32: %lld", (long long)step);
    /* bias corrections are 1: m = 0.1 g, v = 0.001 g^2, update = lr * 0.1 g / (0.0316 |g|) */
    double expected = 1.0 - 1e-3 * 0.1 * 0.5 / (sqrt(0.001) * 0.5 + 1e-8);
    CHECK_CLOSE(p[0], expected, 0, 1e-6);
}

static void test_adam_rejects_bad_input(void)
{
    float p[4] = {0}, g[4] = {0}, m[4] = {0}, v[4] = {0};
    int64_t step = 0;
    const attn_adam_options good = attn_adam_default_options(ATTN_ADAMW);
    attn_adam_options o = good;
    CHECK_FAILS(attn_adam_step(NULL, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, NULL, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, &step, 4, NULL, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, NULL, m, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, NULL, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, &step, -1, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, m), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, p, m, v), ATTN_ERR_INVALID_ARGUMENT);
    step = -1;
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    step = INT64_MAX;
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    step = 0;

    const double bad_lr[] = {-1e-3, NAN, INFINITY};
    for (int i = 0; i < 3; i++) {
        o = good;
        o.lr = bad_lr[i];
        CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    }
    o = good;
    o.lr = -0.5;
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "lr") && strstr(attn_last_error(), "-0.5"),
          "message names lr and its value: %s", attn_last_error());
    const double bad_beta[] = {-0.1, 1.0, 1.5, NAN};
    for (int i = 0; i < 4; i++) {
        o = good;
        o.beta1 = bad_beta[i];
        CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
        o = good;
        o.beta2 = bad_beta[i];
        CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    }
    const double bad_eps[] = {0.0, -1e-8, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        o = good;
        o.eps = bad_eps[i];
        CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    }
    o = good;
    o.weight_decay = -0.01;
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    o = good;
    o.variant = (attn_adam_variant)7;
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);

    const attn_param_range out_of_bounds[] = {{2, 3}};
    const attn_param_range negative[] = {{-1, 2}};
    const attn_param_range negative_count[] = {{1, -1}};
    const attn_param_range unsorted[] = {{2, 1}, {0, 1}};
    const attn_param_range overlapping[] = {{0, 2}, {1, 2}};
    const attn_param_range *bad_ranges[] = {out_of_bounds, negative, negative_count, unsorted,
                                            overlapping};
    const int64_t bad_counts[] = {1, 1, 1, 2, 2};
    for (int i = 0; i < 5; i++) {
        o = good;
        o.no_decay = bad_ranges[i];
        o.no_decay_count = bad_counts[i];
        CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    }
    o = good;
    o.no_decay_count = 1;
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    o.no_decay_count = -1;
    CHECK_FAILS(attn_adam_step(&o, &step, 4, p, g, m, v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(step == 0, "failed calls leave the step counter alone: %lld", (long long)step);

    /* Touching and empty ranges are fine. */
    const attn_param_range touching[] = {{0, 2}, {2, 0}, {2, 2}};
    o = good;
    o.no_decay = touching;
    o.no_decay_count = 3;
    CHECK_OK(attn_adam_step(&o, &step, 4, p, g, m, v));
}

/* ---- gradient norm, clipping, scaling --------------------------------------------------- */

static double norm_double(const float *g, int64_t n)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += (double)g[i] * g[i];
    return sqrt(sum);
}

static void test_grad_norm_matches_reference_and_is_reproducible(void)
{
    const int64_t norm_sizes[] = {0, 1, 3, 17, 129, 4097, 300007};
    for (size_t si = 0; si < sizeof norm_sizes / sizeof norm_sizes[0]; si++) {
        const int64_t n = norm_sizes[si];
        float *g = test_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        fill_spread(g, n, 9 + (uint64_t)n);
        const double expected = norm_double(g, n);
        double first = -1;
        for (size_t ii = 0; ii < NUM_ISAS; ii++) {
            if (!attn_isa_supported(all_isas[ii]))
                continue;
            CHECK_OK(attn_set_isa(all_isas[ii]));
            for (int threads = 1; threads <= 2; threads++) {
                CHECK_OK(attn_set_num_threads(threads));
                double norm = -1;
                CHECK_OK(attn_grad_norm(n, g, &norm));
                CHECK_CLOSE(norm, expected, 0, 1e-13);
                if (all_isas[ii] == ATTN_ISA_REFERENCE)
                    continue;
                /* one summation order for every optimized ISA and thread count */
                if (first < 0)
                    first = norm;
                CHECK(norm == first, "n=%lld %s %d threads: %.17g differs from %.17g",
                      (long long)n, attn_isa_name(all_isas[ii]), threads, norm, first);
            }
        }
        free(g);
    }
    CHECK_OK(attn_set_num_threads(0));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

static void test_clip_grad_norm(void)
{
    const int64_t n = 5003;
    float *g = test_alloc((size_t)n * sizeof(float));
    float *original = test_alloc((size_t)n * sizeof(float));
    double *expected = test_alloc((size_t)n * sizeof(double));
    for (size_t ii = 0; ii < NUM_ISAS; ii++) {
        if (!attn_isa_supported(all_isas[ii]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[ii]));
        fill_spread(original, n, 21);
        const double total = norm_double(original, n);

        /* above the limit: every gradient scaled by max_norm / (norm + 1e-6) */
        memcpy(g, original, (size_t)n * sizeof(float));
        const double max_norm = total / 4;
        double norm = 0;
        CHECK_OK(attn_clip_grad_norm(n, g, max_norm, &norm));
        CHECK_CLOSE(norm, total, 0, 1e-13);
        for (int64_t i = 0; i < n; i++)
            expected[i] = original[i] * (max_norm / (total + 1e-6));
        CHECK_ARRAYS_CLOSE("clipped gradients", g, expected, (size_t)n, 0, 1.2e-7);
        CHECK_CLOSE(norm_double(g, n), max_norm, 0, 1e-6);

        /* at or below the limit: untouched, to the bit */
        memcpy(g, original, (size_t)n * sizeof(float));
        CHECK_OK(attn_clip_grad_norm(n, g, total * 2, NULL));
        CHECK(memcmp(g, original, (size_t)n * sizeof(float)) == 0, "below the limit: unchanged");

        /* non-finite norm: reported, gradients untouched */
        memcpy(g, original, (size_t)n * sizeof(float));
        g[n / 2] = INFINITY;
        CHECK_OK(attn_clip_grad_norm(n, g, 1.0, &norm));
        CHECK(isinf(norm), "an infinite gradient gives an infinite norm: %g", norm);
        CHECK(g[0] == original[0] && g[n - 1] == original[n - 1], "left alone");
        g[n / 2] = NAN;
        CHECK_OK(attn_clip_grad_norm(n, g, 1.0, &norm));
        CHECK(isnan(norm), "a NaN gradient gives a NaN norm: %g", norm);
        CHECK(g[0] == original[0], "left alone");
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));

    CHECK_OK(attn_clip_grad_norm(0, NULL, 1.0, NULL));
    CHECK_FAILS(attn_clip_grad_norm(n, NULL, 1.0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_clip_grad_norm(-1, g, 1.0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_clip_grad_norm(n, g, 0.0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_clip_grad_norm(n, g, -1.0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_clip_grad_norm(n, g, NAN, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_clip_grad_norm(n, g, INFINITY, NULL), ATTN_ERR_INVALID_ARGUMENT);
    double norm;
    CHECK_FAILS(attn_grad_norm(n, NULL, &norm), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_grad_norm(n, g, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_grad_norm(-2, g, &norm), ATTN_ERR_INVALID_ARGUMENT);
    free(g);
    free(original);
    free(expected);
}

static void test_scale_grads(void)
{
    const int64_t n = 70003;
    float *g = test_alloc((size_t)n * sizeof(float));
    double *expected = test_alloc((size_t)n * sizeof(double));
    for (size_t ii = 0; ii < NUM_ISAS; ii++) {
        if (!attn_isa_supported(all_isas[ii]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[ii]));
        fill_spread(g, n, 4);
        for (int64_t i = 0; i < n; i++)
            expected[i] = g[i] / 3.0;
        CHECK_OK(attn_scale_grads(n, g, 1.0f / 3.0f));
        CHECK_ARRAYS_CLOSE("grads / 3", g, expected, (size_t)n, 0, 1.2e-7);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    CHECK_OK(attn_scale_grads(0, NULL, 0.5f));
    CHECK_FAILS(attn_scale_grads(n, NULL, 0.5f), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_scale_grads(-1, g, 0.5f), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_scale_grads(n, g, NAN), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_scale_grads(n, g, INFINITY), ATTN_ERR_INVALID_ARGUMENT);
    free(g);
    free(expected);
}

/* ---- schedules -------------------------------------------------------------------------- */

static double lr_or_nan(const attn_lr_schedule *s, int64_t step)
{
    double lr = NAN;
    attn_status status = attn_lr_at(s, step, &lr);
    CHECK(status == ATTN_OK, "attn_lr_at(step %lld): %s", (long long)step, attn_last_error());
    return lr;
}

static void test_noam_and_inverse_sqrt(void)
{
    const attn_lr_schedule noam = {.kind = ATTN_LR_NOAM, .factor = 2.0, .d_model = 512,
                                   .warmup_steps = 4000};
    const double peak = 2.0 / sqrt(512.0) / sqrt(4000.0);
    const attn_lr_schedule inv = {.kind = ATTN_LR_INVERSE_SQRT, .lr = peak,
                                  .warmup_steps = 4000};
    CHECK(lr_or_nan(&noam, 0) == 0.0, "Noam at step 0 is 0");
    CHECK(lr_or_nan(&inv, 0) == 0.0, "inverse sqrt at step 0 is 0");
    const int64_t steps[] = {1, 2, 100, 3999, 4000, 4001, 10000, 1000000};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        const double t = (double)steps[i];
        const double formula = 2.0 * pow(512.0, -0.5) * fmin(pow(t, -0.5), t * pow(4000.0, -1.5));
        CHECK_CLOSE(lr_or_nan(&noam, steps[i]), formula, 0, 1e-14);
        /* the peak form is the same curve */
        CHECK_CLOSE(lr_or_nan(&inv, steps[i]), formula, 0, 1e-14);
    }
    CHECK_CLOSE(lr_or_nan(&noam, 4000), peak, 0, 1e-14);
    int rising = 1, falling = 1;
    for (int64_t t = 1; t + 37 <= 4000; t += 37)
        rising &= lr_or_nan(&noam, t) < lr_or_nan(&noam, t + 37);
    for (int64_t t = 4000; t < 20000; t += 37)
        falling &= lr_or_nan(&noam, t) > lr_or_nan(&noam, t + 37);
    CHECK(rising && falling, "Noam rises to its peak at warmup, then falls");
}

static void test_cosine_and_constant(void)
{
    const attn_lr_schedule cosine = {.kind = ATTN_LR_COSINE, .lr = 1e-3, .warmup_steps = 100,
                                     .total_steps = 1100, .min_lr = 1e-5};
    CHECK(lr_or_nan(&cosine, 0) == 0.0, "cosine starts at 0");
    CHECK_CLOSE(lr_or_nan(&cosine, 50), 0.5e-3, 0, 1e-14);
    CHECK_CLOSE(lr_or_nan(&cosine, 100), 1e-3, 0, 1e-14);
    CHECK_CLOSE(lr_or_nan(&cosine, 600), (1e-3 + 1e-5) / 2, 0, 1e-14);
    CHECK_CLOSE(lr_or_nan(&cosine, 1100), 1e-5, 0, 1e-14);
    CHECK_CLOSE(lr_or_nan(&cosine, 5000), 1e-5, 0, 1e-14);
    for (int64_t t = 100; t <= 1100; t += 73) {
        const double progress = (double)(t - 100) / 1000.0;
        const double formula = 1e-5 + (1e-3 - 1e-5) * 0.5 * (1 + cos(3.14159265358979323846 * progress));
        CHECK_CLOSE(lr_or_nan(&cosine, t), formula, 0, 1e-14);
    }
    const attn_lr_schedule no_warmup = {.kind = ATTN_LR_COSINE, .lr = 1.0, .warmup_steps = 0,
                                        .total_steps = 10, .min_lr = 0.0};
    CHECK(lr_or_nan(&no_warmup, 0) == 1.0, "no warm-up: the peak at step 0");
    const attn_lr_schedule constant = {.kind = ATTN_LR_CONSTANT, .lr = 3e-4};
    CHECK(lr_or_nan(&constant, 0) == 3e-4 && lr_or_nan(&constant, 123456) == 3e-4, "constant");
}

/* The time-annealed cosine against its formula, written out again here. */
static double time_cosine_formula(const attn_lr_schedule *s, int64_t step, double seconds)
{
    double warm = s->warmup_steps == 0 ? 1.0 : (double)step / (double)s->warmup_steps;
    if (warm > 1.0)
        warm = 1.0;
    double progress = seconds / s->total_seconds;
    if (progress > 1.0)
        progress = 1.0;
    return warm * (s->min_lr + (s->lr - s->min_lr) * (1.0 + cos(3.14159265358979323846 *
                                                                progress)) / 2.0);
}

static double lr_at_time_or_nan(const attn_lr_schedule *s, int64_t step, double seconds)
{
    double lr = NAN;
    attn_status status = attn_lr_at_time(s, step, seconds, &lr);
    CHECK(status == ATTN_OK, "attn_lr_at_time(step %lld, %g s): %s", (long long)step, seconds,
          attn_last_error());
    return lr;
}

static void test_cosine_over_a_time_budget(void)
{
    const attn_lr_schedule timed = {.kind = ATTN_LR_COSINE, .lr = 1e-3, .warmup_steps = 100,
                                    .min_lr = 1e-5, .total_seconds = 3600.0};
    /* The warm-up counts steps whatever the clock says; step 0 gives 0. */
    CHECK(lr_at_time_or_nan(&timed, 0, 0.0) == 0.0, "step 0 gives 0");
    CHECK(lr_at_time_or_nan(&timed, 0, 1800.0) == 0.0, "step 0 gives 0 at any time");
    CHECK_CLOSE(lr_at_time_or_nan(&timed, 50, 0.0), 0.5e-3, 0, 1e-14);
    CHECK_CLOSE(lr_at_time_or_nan(&timed, 50, 1800.0), 0.5 * (1e-3 + 1e-5) / 2, 0, 1e-14);
    /* After the warm-up: the peak at 0 s, half way between the rates at half the budget,
     * min_lr at the end and after it. */
    CHECK_CLOSE(lr_at_time_or_nan(&timed, 100, 0.0), 1e-3, 0, 1e-14);
    CHECK_CLOSE(lr_at_time_or_nan(&timed, 5000, 0.0), 1e-3, 0, 1e-14);
    CHECK_CLOSE(lr_at_time_or_nan(&timed, 100, 1800.0), (1e-3 + 1e-5) / 2, 0, 1e-14);
    CHECK(lr_at_time_or_nan(&timed, 100, 3600.0) == 1e-5, "min_lr when the budget is spent");
    CHECK(lr_at_time_or_nan(&timed, 100, 1e9) == 1e-5, "min_lr long after the budget");
    const int64_t steps[] = {1, 37, 99, 100, 101, 1000000};
    const double seconds[] = {0.0, 0.25, 17.0, 900.0, 2700.5, 3599.9, 3600.0, 7200.0};
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++)
        for (size_t j = 0; j < sizeof seconds / sizeof seconds[0]; j++)
            CHECK_CLOSE(lr_at_time_or_nan(&timed, steps[i], seconds[j]),
                        time_cosine_formula(&timed, steps[i], seconds[j]), 0, 1e-14);
    int falling = 1;
    for (double t = 0.0; t < 3600.0; t += 61.0)
        falling &= lr_at_time_or_nan(&timed, 200, t) > lr_at_time_or_nan(&timed, 200, t + 61.0);
    CHECK(falling, "after the warm-up the rate falls with the time");

    const attn_lr_schedule no_warmup = {.kind = ATTN_LR_COSINE, .lr = 2.0, .min_lr = 0.5,
                                        .total_seconds = 10.0};
    CHECK(lr_at_time_or_nan(&no_warmup, 0, 0.0) == 2.0, "no warm-up: the peak at step 0");
    CHECK_CLOSE(lr_at_time_or_nan(&no_warmup, 0, 5.0), 1.25, 0, 1e-14);
    CHECK(lr_at_time_or_nan(&no_warmup, 3, 10.0) == 0.5, "no warm-up: min_lr at the end");

    /* Every other schedule ignores the seconds: attn_lr_at_time is attn_lr_at. */
    const attn_lr_schedule others[] = {
        {.kind = ATTN_LR_COSINE, .lr = 1e-3, .warmup_steps = 100, .total_steps = 1100,
         .min_lr = 1e-5},
        {.kind = ATTN_LR_NOAM, .factor = 2.0, .d_model = 512, .warmup_steps = 4000},
        {.kind = ATTN_LR_INVERSE_SQRT, .lr = 1e-3, .warmup_steps = 40},
        {.kind = ATTN_LR_CONSTANT, .lr = 3e-4},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++)
        for (int64_t step = 0; step <= 1200; step += 50) {
            double by_step = lr_or_nan(&others[i], step);
            CHECK(lr_at_time_or_nan(&others[i], step, 0.0) == by_step &&
                      lr_at_time_or_nan(&others[i], step, 12345.0) == by_step,
                  "schedule %zu, step %lld: the seconds change nothing", i, (long long)step);
        }
}

static void check_fails_saying(attn_status status, const char *words, const char *what)
{
    CHECK(status == ATTN_ERR_INVALID_ARGUMENT && strstr(attn_last_error(), words) != NULL,
          "%s: fails saying \"%s\" (%s: %s)", what, words, attn_status_name(status),
          attn_last_error());
}

static void test_time_budget_rejects_bad_input(void)
{
    double lr;
    const attn_lr_schedule timed = {.kind = ATTN_LR_COSINE, .lr = 1.0, .warmup_steps = 10,
                                    .total_seconds = 60.0};
    check_fails_saying(attn_lr_at(&timed, 20, &lr), "use attn_lr_at_time",
                       "attn_lr_at on a time-annealed cosine");
    attn_lr_schedule s = timed;
    s.total_steps = 100;
    check_fails_saying(attn_lr_at_time(&s, 20, 1.0, &lr), "not both", "both totals");
    check_fails_saying(attn_lr_at(&s, 20, &lr), "not both", "both totals, by step");
    s = timed;
    s.total_seconds = 0.0;
    check_fails_saying(attn_lr_at_time(&s, 20, 1.0, &lr), "total_seconds", "neither total");
    check_fails_saying(attn_lr_at(&s, 20, &lr), "total_steps", "neither total, by step");
    const double bad_budgets[] = {-60.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad_budgets / sizeof bad_budgets[0]; i++) {
        s.total_seconds = bad_budgets[i];
        check_fails_saying(attn_lr_at_time(&s, 20, 1.0, &lr), "total_seconds",
                           "a negative, NaN or infinite budget");
    }
    const double bad_seconds[] = {-1.0, NAN, INFINITY};
    const attn_lr_schedule constant = {.kind = ATTN_LR_CONSTANT, .lr = 1.0};
    for (size_t i = 0; i < sizeof bad_seconds / sizeof bad_seconds[0]; i++) {
        check_fails_saying(attn_lr_at_time(&timed, 20, bad_seconds[i], &lr), "seconds",
                           "negative, NaN or infinite seconds");
        check_fails_saying(attn_lr_at_time(&constant, 20, bad_seconds[i], &lr), "seconds",
                           "bad seconds with a schedule that ignores them");
    }
    check_fails_saying(attn_lr_at_time(&timed, -1, 1.0, &lr), "step", "a negative step");
    CHECK_FAILS(attn_lr_at_time(NULL, 1, 1.0, &lr), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_lr_at_time(&timed, 1, 1.0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    s = timed;
    s.min_lr = 2.0;
    check_fails_saying(attn_lr_at_time(&s, 1, 1.0, &lr), "min_lr",
                       "the other cosine checks hold over time too");
}

static void test_schedules_reject_bad_input(void)
{
    double lr;
    const attn_lr_schedule good = {.kind = ATTN_LR_NOAM, .factor = 1.0, .d_model = 64,
                                   .warmup_steps = 10};
    attn_lr_schedule s = good;
    CHECK_FAILS(attn_lr_at(NULL, 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_lr_at(&s, 1, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_lr_at(&s, -1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    s.warmup_steps = 0;
    CHECK_FAILS(attn_lr_at(&s, 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    s = good;
    s.d_model = 0;
    CHECK_FAILS(attn_lr_at(&s, 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    s = good;
    s.factor = -1.0;
    CHECK_FAILS(attn_lr_at(&s, 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    s = good;
    s.kind = (attn_lr_kind)9;
    CHECK_FAILS(attn_lr_at(&s, 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    const attn_lr_schedule inv = {.kind = ATTN_LR_INVERSE_SQRT, .lr = 1.0, .warmup_steps = 0};
    CHECK_FAILS(attn_lr_at(&inv, 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    const attn_lr_schedule cosines[] = {
        {.kind = ATTN_LR_COSINE, .lr = 1.0, .warmup_steps = 10, .total_steps = 10},
        {.kind = ATTN_LR_COSINE, .lr = 1.0, .warmup_steps = -1, .total_steps = 10},
        {.kind = ATTN_LR_COSINE, .lr = 1.0, .warmup_steps = 1, .total_steps = 10, .min_lr = 2},
        {.kind = ATTN_LR_COSINE, .lr = -1.0, .warmup_steps = 1, .total_steps = 10},
        {.kind = ATTN_LR_COSINE, .lr = NAN, .warmup_steps = 1, .total_steps = 10},
    };
    for (size_t i = 0; i < sizeof cosines / sizeof cosines[0]; i++)
        CHECK_FAILS(attn_lr_at(&cosines[i], 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
    const attn_lr_schedule constant = {.kind = ATTN_LR_CONSTANT, .lr = INFINITY};
    CHECK_FAILS(attn_lr_at(&constant, 1, &lr), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_adam_matches_double_reference_on_every_isa);
    RUN_TEST(test_adam_first_step_is_lr_times_sign);
    RUN_TEST(test_weight_decay_and_exempt_ranges);
    RUN_TEST(test_adam_is_deterministic_and_isas_agree);
    RUN_TEST(test_step_counter);
    RUN_TEST(test_adam_rejects_bad_input);
    RUN_TEST(test_grad_norm_matches_reference_and_is_reproducible);
    RUN_TEST(test_clip_grad_norm);
    RUN_TEST(test_scale_grads);
    RUN_TEST(test_noam_and_inverse_sqrt);
    RUN_TEST(test_cosine_and_constant);
    RUN_TEST(test_schedules_reject_bad_input);
    RUN_TEST(test_cosine_over_a_time_budget);
    RUN_TEST(test_time_budget_rejects_bad_input);
    return test_summary();
}
