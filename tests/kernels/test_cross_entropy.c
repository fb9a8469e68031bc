/* Cross-entropy with label smoothing and an ignore index: every instruction set against
 * the double reference, the reference backward against finite differences, ignored rows,
 * smoothing limits, extreme logits, accumulation, determinism and argument checks; and the
 * cross-entropy against a distribution (distillation) against the hard one. */
#include "kernel_testing.h"
#include "kernels/ref_elementwise.h"

#define IGNORE (-100)

/* Deterministic targets in [0, vocab), with every fifth row ignored. */
static int32_t *make_targets(int64_t rows, int64_t vocab, uint64_t seed)
{
    int32_t *t = test_alloc((size_t)rows * sizeof(int32_t));
    float *u = test_floats((size_t)rows);
    test_fill_uniform(u, (size_t)rows, 0.0f, 1.0f, seed);
    for (int64_t r = 0; r < rows; r++) {
        int64_t c = (int64_t)(u[r] * (float)vocab);
        t[r] = r % 5 == 4 ? IGNORE : (int32_t)(c < vocab ? c : vocab - 1);
    }
    free(u);
    return t;
}

typedef struct {
    double loss;
    int64_t counted;
    double *lse; /* [rows] */
} reference_result;

static reference_result reference_forward(int64_t rows, int64_t vocab, const float *logits,
                                          const int32_t *targets, double smoothing)
{
    reference_result result = {0.0, 0, test_doubles((size_t)rows)};
    double *x = test_doubles((size_t)vocab);
    for (int64_t r = 0; r < rows; r++) {
        result.lse[r] = 0.0;
        if (targets[r] == IGNORE)
            continue;
        for (int64_t c = 0; c < vocab; c++)
            x[c] = logits[r * vocab + c];
        result.loss += attn_ref_cross_entropy_row(vocab, x, targets[r], smoothing, &result.lse[r]);
        result.counted++;
    }
    free(x);
    return result;
}

/* ---- every instruction set against the double reference ------------------------------------- */

static void check_against_reference(int64_t rows, int64_t vocab, float smoothing)
{
    const size_t n = (size_t)(rows * vocab);
    uint64_t seed = (uint64_t)(rows * 7919 + vocab);
    float *logits = test_floats(n), *dlogits = test_floats(n), *lse = test_floats((size_t)rows);
    int32_t *targets = make_targets(rows, vocab, seed);
    test_fill_uniform(logits, n, -8.0f, 8.0f, seed + 1);
    reference_result ref = reference_forward(rows, vocab, logits, targets, smoothing);

    /* The backward is checked from the reference lse rounded to float, as the forward
     * would hand it over; its error bound per element comes from the float roundings:
     * exp(x - lse) inherits the rounding of x - lse (eps |x - lse| relative), plus a few
     * eps of the exp and the sums (16 eps; observed within 4). */
    float *lse_in = test_floats((size_t)rows);
    for (int64_t r = 0; r < rows; r++)
        lse_in[r] = (float)ref.lse[r];
    const float scale = ref.counted > 0 ? 1.0f / (float)ref.counted : 1.0f;
    double *dx_ref = test_doubles(n), *bound = test_doubles(n), *x = test_doubles((size_t)vocab);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < vocab; c++) {
            size_t i = (size_t)(r * vocab + c);
            dx_ref[i] = 0.0;
            x[c] = logits[i];
            double p = exp(x[c] - lse_in[r]);
            double onehot = c == targets[r] ? 1.0 : 0.0;
            bound[i] = scale * TEST_FLOAT_EPS *
                           (p * (16.0 + fabs(x[c] - lse_in[r])) +
                            16.0 * (smoothing / (double)vocab + onehot)) +
                       1e-30;
        }
        if (targets[r] != IGNORE)
            attn_ref_cross_entropy_backward_row(vocab, x, targets[r], smoothing, lse_in[r], scale,
                                                dx_ref + r * vocab);
    }

    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        const char *isa = attn_isa_name(test_isas[k]);
        double loss = -1.0;
        int64_t counted = -1;
        CHECK_OK(attn_cross_entropy_forward(rows, vocab, logits, targets, IGNORE, smoothing, &loss,
                                            &counted, lse));
        CHECK(counted == ref.counted, "%s: counted %lld, expected %lld", isa, (long long)counted,
              (long long)ref.counted);
        /* Each row loss is (max - x[t]) + log(sum) in double from a float sum of exps (a few
         * eps relative) and, with smoothing, a float sum of the logits (a few eps of their
         * magnitude 8): 1e-6 per row covers both (observed below 4e-7). */
        CHECK(fabs(loss - ref.loss) <= 1e-6 * (double)(ref.counted + 1),
              "%s %lldx%lld smoothing %g: loss %.9g, expected %.9g", isa, (long long)rows,
              (long long)vocab, (double)smoothing, loss, ref.loss);
        /* lse ~ max + log(vocab) <= 15: float rounding of it and of the sum, a few ulp */
        CHECK_NEAR_REFERENCE(isa, lse, ref.lse, (size_t)rows, 4e-6, 1e-6);

        memset(dlogits, 0, n * sizeof(float));
        CHECK_OK(attn_cross_entropy_backward(rows, vocab, logits, targets, IGNORE, smoothing,
                                             lse_in, scale, dlogits));
        char what[96];
        snprintf(what, sizeof what, "cross-entropy backward %s %lldx%lld smoothing %g", isa,
                 (long long)rows, (long long)vocab, (double)smoothing);
        CHECK_WITHIN_BOUNDS(what, dlogits, dx_ref, bound, n);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(logits), free(dlogits), free(lse), free(targets), free(ref.lse), free(lse_in);
    free(dx_ref), free(bound), free(x);
}

static void test_every_isa_matches_reference(void)
{
    const float smoothings[] = {0.0f, 0.1f, 1.0f};
    for (int i = 0; i < TEST_ROW_COUNTS; i++)
        for (int j = 0; j < TEST_COL_COUNTS; j++)
            for (int s = 0; s < 3; s++)
                check_against_reference(test_row_counts[i], test_col_counts[j], smoothings[s]);
}

/* ---- the double reference backward against finite differences ---------------------------------
 */

typedef struct {
    int64_t vocab, target;
    double smoothing;
} loss_ctx;

static double row_loss(void *ctx_ptr, const double *logits)
{
    loss_ctx *ctx = ctx_ptr;
    double lse;
    return attn_ref_cross_entropy_row(ctx->vocab, logits, ctx->target, ctx->smoothing, &lse);
}

static void test_reference_backward_matches_finite_differences(void)
{
    const int64_t vocabs[] = {1, 2, 7, 80};
    const double smoothings[] = {0.0, 0.1, 1.0};
    for (size_t v = 0; v < sizeof vocabs / sizeof vocabs[0]; v++)
        for (int s = 0; s < 3; s++) {
            int64_t n = vocabs[v];
            loss_ctx ctx = {n, n / 2, smoothings[s]};
            double *x = test_doubles((size_t)n), *analytic = test_doubles((size_t)n);
            double *numeric = test_doubles((size_t)n);
            test_fill_uniform_double(x, (size_t)n, -4.0, 4.0, (uint64_t)(100 + n + s));
            double lse;
            attn_ref_cross_entropy_row(n, x, ctx.target, ctx.smoothing, &lse);
            for (int64_t c = 0; c < n; c++)
                analytic[c] = 0.0;
            attn_ref_cross_entropy_backward_row(n, x, ctx.target, ctx.smoothing, lse, 1.0,
                                                analytic);
            test_numeric_gradient(row_loss, &ctx, x, (size_t)n, 1e-6, numeric);
            CHECK(
                test_doubles_close("cross-entropy grad", analytic, numeric, (size_t)n, 1e-8, 1e-6),
                "cross-entropy backward vs finite differences, vocab=%lld smoothing=%g",
                (long long)n, smoothings[s]);
            free(x), free(analytic), free(numeric);
        }
}

/* ---- semantics: ignored rows, smoothing limits ------------------------------------------------
 */

static void test_ignored_rows_contribute_nothing(void)
{
    enum { ROWS = 12, VOCAB = 33 };
    float logits[ROWS * VOCAB], kept_logits[ROWS * VOCAB], lse[ROWS], kept_lse[ROWS];
    int32_t targets[ROWS], kept_targets[ROWS];
    test_fill_uniform(logits, ROWS * VOCAB, -5.0f, 5.0f, 21);
    /* ignore_index may be a valid class: rows whose target is 3 are ignored */
    const int32_t ignore_index = 3;
    int kept = 0;
    for (int r = 0; r < ROWS; r++) {
        targets[r] = r % 3 == 0 ? ignore_index : (int32_t)((r * 7) % VOCAB);
        if (targets[r] != ignore_index) {
            memcpy(kept_logits + kept * VOCAB, logits + r * VOCAB, VOCAB * sizeof(float));
            kept_targets[kept++] = targets[r];
        }
    }
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        const char *isa = attn_isa_name(test_isas[k]);
        double loss, kept_loss;
        int64_t counted, kept_counted;
        CHECK_OK(attn_cross_entropy_forward(ROWS, VOCAB, logits, targets, ignore_index, 0.2f, &loss,
                                            &counted, lse));
        CHECK_OK(attn_cross_entropy_forward(kept, VOCAB, kept_logits, kept_targets, ignore_index,
                                            0.2f, &kept_loss, &kept_counted, kept_lse));
        CHECK(counted == kept && kept_counted == kept, "%s: counted %lld of %d", isa,
              (long long)counted, kept);
        CHECK(loss == kept_loss, "%s: ignored rows add exactly nothing (%.17g vs %.17g)", isa, loss,
              kept_loss);

        float dlogits[ROWS * VOCAB];
        for (int i = 0; i < ROWS * VOCAB; i++)
            dlogits[i] = 7.0f;
        CHECK_OK(attn_cross_entropy_backward(ROWS, VOCAB, logits, targets, ignore_index, 0.2f, lse,
                                             0.5f, dlogits));
        int untouched = 1, touched = 0;
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < VOCAB; c++) {
                if (targets[r] == ignore_index)
                    untouched &= dlogits[r * VOCAB + c] == 7.0f;
                else
                    touched += dlogits[r * VOCAB + c] != 7.0f;
            }
        CHECK(untouched, "%s: ignored rows get no gradient", isa);
        CHECK(touched == kept * VOCAB, "%s: counted rows get a gradient everywhere", isa);

        /* every row ignored: zero loss, zero count */
        int32_t all_ignored[ROWS];
        for (int r = 0; r < ROWS; r++)
            all_ignored[r] = -1;
        CHECK_OK(attn_cross_entropy_forward(ROWS, VOCAB, logits, all_ignored, -1, 0.1f, &loss,
                                            &counted, NULL));
        CHECK(loss == 0.0 && counted == 0, "%s: all ignored gives 0 loss, 0 rows", isa);
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

static void test_smoothing_limits(void)
{
    enum { ROWS = 6, VOCAB = 40 };
    float logits[ROWS * VOCAB], log_p[ROWS * VOCAB];
    int32_t targets[ROWS];
    test_fill_uniform(logits, ROWS * VOCAB, -6.0f, 6.0f, 22);
    for (int r = 0; r < ROWS; r++)
        targets[r] = (int32_t)(r * 13 % VOCAB);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        const char *isa = attn_isa_name(test_isas[k]);
        CHECK_OK(attn_log_softmax_forward(ROWS, VOCAB, logits, log_p));
        double nll = 0.0, uniform = 0.0;
        for (int r = 0; r < ROWS; r++) {
            nll -= log_p[r * VOCAB + targets[r]];
            for (int c = 0; c < VOCAB; c++)
                uniform -= log_p[r * VOCAB + c] / VOCAB;
        }
        double loss;
        int64_t counted;
        CHECK_OK(attn_cross_entropy_forward(ROWS, VOCAB, logits, targets, IGNORE, 0.0f, &loss,
                                            &counted, NULL));
        CHECK(fabs(loss - nll) <= 1e-5 * nll, "%s: smoothing 0 is the NLL (%.9g vs %.9g)", isa,
              loss, nll);
        CHECK_OK(attn_cross_entropy_forward(ROWS, VOCAB, logits, targets, IGNORE, 1.0f, &loss,
                                            &counted, NULL));
        CHECK(fabs(loss - uniform) <= 1e-5 * uniform,
              "%s: smoothing 1 is the mean over classes (%.9g vs %.9g)", isa, loss, uniform);
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

/* ---- extreme logits
 * ------------------------------------------------------------------------------ */

static void test_extreme_logits(void)
{
    enum { ROWS = 4, VOCAB = 29 };
    float logits[ROWS * VOCAB], lse[ROWS], dlogits[ROWS * VOCAB];
    int32_t targets[ROWS] = {0, 5, 28, 11};
    test_fill_uniform(logits, ROWS * VOCAB, -3.0f, 3.0f, 23);
    for (int c = 0; c < VOCAB; c++) {
        logits[0 * VOCAB + c] = (c % 2 ? 1.0f : -1.0f) * 1.0e4f; /* target logit -1e4 */
        logits[1 * VOCAB + c] = 5.0e3f + (float)c;               /* large, close together */
        if (c % 4 == 0)
            logits[3 * VOCAB + c] = -INFINITY; /* masked vocabulary entries */
    }
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        const char *isa = attn_isa_name(test_isas[k]);
        double loss;
        int64_t counted;
        CHECK_OK(attn_cross_entropy_forward(ROWS, VOCAB, logits, targets, IGNORE, 0.0f, &loss,
                                            &counted, lse));
        reference_result ref = reference_forward(ROWS, VOCAB, logits, targets, 0.0);
        CHECK(isfinite(loss) && fabs(loss - ref.loss) <= 1e-5 * ref.loss,
              "%s: loss %.9g, expected %.9g", isa, loss, ref.loss);
        memset(dlogits, 0, sizeof dlogits);
        CHECK_OK(attn_cross_entropy_backward(ROWS, VOCAB, logits, targets, IGNORE, 0.0f, lse, 1.0f,
                                             dlogits));
        int finite = 1;
        for (int i = 0; i < ROWS * VOCAB; i++)
            finite &= isfinite(dlogits[i]);
        CHECK(finite, "%s: finite gradient", isa);
        CHECK(dlogits[3 * VOCAB + 4] == 0.0f, "%s: no gradient into a masked logit", isa);
        CHECK_CLOSE(dlogits[0], -1.0, 1e-6, 0); /* p[target] = 0: gradient -1 */
        free(ref.lse);
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

/* ---- accumulation, determinism, argument checks -------------------------------------------------
 */

static void test_backward_accumulates(void)
{
    enum { ROWS = 7, VOCAB = 45 };
    float logits[ROWS * VOCAB], lse[ROWS], once[ROWS * VOCAB], twice[ROWS * VOCAB];
    double doubled[ROWS * VOCAB], loss;
    int64_t counted;
    int32_t *targets = make_targets(ROWS, VOCAB, 24);
    test_fill_uniform(logits, ROWS * VOCAB, -4.0f, 4.0f, 25);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        CHECK_OK(attn_cross_entropy_forward(ROWS, VOCAB, logits, targets, IGNORE, 0.1f, &loss,
                                            &counted, lse));
        memset(once, 0, sizeof once);
        memset(twice, 0, sizeof twice);
        CHECK_OK(attn_cross_entropy_backward(ROWS, VOCAB, logits, targets, IGNORE, 0.1f, lse, 0.25f,
                                             once));
        for (int rep = 0; rep < 2; rep++)
            CHECK_OK(attn_cross_entropy_backward(ROWS, VOCAB, logits, targets, IGNORE, 0.1f, lse,
                                                 0.25f, twice));
        for (int i = 0; i < ROWS * VOCAB; i++)
            doubled[i] = 2.0 * once[i];
        CHECK_NEAR_REFERENCE(attn_isa_name(test_isas[k]), twice, doubled, ROWS * VOCAB, 1e-8, 1e-6);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(targets);
}

static void test_deterministic_across_runs_and_thread_counts(void)
{
    const int64_t rows = 129, vocab = 1037;
    const size_t n = (size_t)(rows * vocab);
    float *logits = test_floats(n), *grads[2] = {test_floats(n), test_floats(n)};
    float lse[2][129];
    double loss[2];
    int64_t counted;
    int32_t *targets = make_targets(rows, vocab, 26);
    test_fill_uniform(logits, n, -6.0f, 6.0f, 27);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        int same = 1;
        for (int run = 0; run < 3; run++) {
            int slot = run == 0 ? 0 : 1;
            CHECK_OK(attn_set_num_threads(run == 1 ? 1 : 2));
            CHECK_OK(attn_cross_entropy_forward(rows, vocab, logits, targets, IGNORE, 0.1f,
                                                &loss[slot], &counted, lse[slot]));
            memset(grads[slot], 0, n * sizeof(float));
            CHECK_OK(attn_cross_entropy_backward(rows, vocab, logits, targets, IGNORE, 0.1f,
                                                 lse[slot], 0.01f, grads[slot]));
            if (run > 0)
                same &= loss[0] == loss[1] && memcmp(lse[0], lse[1], sizeof lse[0]) == 0 &&
                        test_same_bits(grads[0], grads[1], n);
        }
        CHECK(same, "%s: same bits for 1 and 2 threads and across runs",
              attn_isa_name(test_isas[k]));
    }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(logits), free(grads[0]), free(grads[1]), free(targets);
}

static void test_rejects_bad_arguments(void)
{
    float logits[6] = {0}, lse[2] = {0}, dlogits[6] = {0};
    int32_t targets[2] = {0, 2};
    double loss;
    int64_t counted;
    CHECK_FAILS(attn_cross_entropy_forward(2, 3, NULL, targets, IGNORE, 0, &loss, &counted, lse),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_cross_entropy_forward(2, 3, logits, NULL, IGNORE, 0, &loss, &counted, lse),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_cross_entropy_forward(2, 3, logits, targets, IGNORE, 0, NULL, &counted, lse),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_cross_entropy_forward(2, 3, logits, targets, IGNORE, 0, &loss, NULL, lse),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_cross_entropy_forward(-2, 3, logits, targets, IGNORE, 0, &loss, &counted, lse),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_cross_entropy_forward(2, 0, logits, targets, IGNORE, 0, &loss, &counted, lse),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "vocab") != NULL, "names vocab: %s", attn_last_error());
    const float bad_smoothing[] = {-0.1f, 1.5f, NAN};
    for (int i = 0; i < 3; i++)
        CHECK_FAILS(attn_cross_entropy_forward(2, 3, logits, targets, IGNORE, bad_smoothing[i],
                                               &loss, &counted, lse),
                    ATTN_ERR_INVALID_ARGUMENT);

    /* out-of-range targets name the position and the value */
    const int32_t bad_targets[] = {3, -1, 1000};
    for (int i = 0; i < 3; i++) {
        int32_t t[2] = {1, bad_targets[i]};
        CHECK_FAILS(attn_cross_entropy_forward(2, 3, logits, t, IGNORE, 0, &loss, &counted, lse),
                    ATTN_ERR_INVALID_ARGUMENT);
        char expected[32];
        snprintf(expected, sizeof expected, "targets[1] = %d", (int)bad_targets[i]);
        CHECK(strstr(attn_last_error(), expected) != NULL, "message '%s' contains '%s'",
              attn_last_error(), expected);
        CHECK_FAILS(attn_cross_entropy_backward(2, 3, logits, t, IGNORE, 0, lse, 1, dlogits),
                    ATTN_ERR_INVALID_ARGUMENT);
    }
    CHECK_FAILS(attn_cross_entropy_backward(2, 3, logits, targets, IGNORE, 0, NULL, 1, dlogits),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_cross_entropy_backward(2, 3, logits, targets, IGNORE, 0, lse, 1, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_cross_entropy_backward(2, 3, NULL, targets, IGNORE, 0, lse, 1, dlogits),
                ATTN_ERR_INVALID_ARGUMENT);
    /* zero rows: nothing to do, but the outputs are still defined */
    loss = 5.0;
    counted = 5;
    CHECK_OK(attn_cross_entropy_forward(0, 3, NULL, NULL, IGNORE, 0, &loss, &counted, NULL));
    CHECK(loss == 0.0 && counted == 0, "zero rows give zero loss and count");
    CHECK_OK(attn_cross_entropy_backward(0, 3, NULL, NULL, IGNORE, 0, NULL, 1, NULL));
}

/* ---- against a distribution (distillation) ------------------------------------------------ */

/* One-hot distributions on the targets are the hard cross-entropy; the backward is that
 * kernel's gradient; masked classes (-inf logits) of probability 0 are fine; rows of other
 * mass scale the softmax term by it. */
static void test_soft_targets_match_the_hard_loss(void)
{
    enum { ROWS = 23, VOCAB = 37 };
    float *logits = test_floats(ROWS * VOCAB), *probs = test_floats(ROWS * VOCAB);
    test_fill_uniform(logits, ROWS * VOCAB, -6.0f, 6.0f, 11);
    int32_t *targets = make_targets(ROWS, VOCAB, 12);
    for (int64_t r = 0; r < ROWS; r++)
        for (int64_t c = 0; c < VOCAB; c++)
            probs[r * VOCAB + c] = targets[r] == c ? 1.0f : 0.0f;
    double soft = 0.0, hard = 0.0;
    int64_t soft_rows = 0, hard_rows = 0;
    CHECK_OK(attn_soft_cross_entropy_forward(ROWS, VOCAB, logits, probs, targets, IGNORE, &soft,
                                             &soft_rows));
    float *lse = test_floats(ROWS);
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    CHECK_OK(attn_cross_entropy_forward(ROWS, VOCAB, logits, targets, IGNORE, 0.0f, &hard,
                                        &hard_rows, lse));
    CHECK(soft_rows == hard_rows && fabs(soft - hard) <= 1e-12 * fabs(hard),
          "one-hot: %.15g over %lld rows, the hard loss %.15g over %lld", soft,
          (long long)soft_rows, hard, (long long)hard_rows);
    float *d_soft = test_floats(ROWS * VOCAB), *d_hard = test_floats(ROWS * VOCAB);
    memset(d_soft, 0, ROWS * VOCAB * sizeof(float));
    memset(d_hard, 0, ROWS * VOCAB * sizeof(float));
    CHECK_OK(attn_soft_cross_entropy_backward(ROWS, VOCAB, logits, probs, targets, IGNORE, 0.5f,
                                              d_soft));
    CHECK_OK(
        attn_cross_entropy_backward(ROWS, VOCAB, logits, targets, IGNORE, 0.0f, lse, 0.5f, d_hard));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    double worst = 0.0;
    for (int64_t i = 0; i < ROWS * VOCAB; i++)
        worst = fmax(worst, fabs(d_soft[i] - d_hard[i]));
    CHECK(worst <= 1e-7, "one-hot backward is the hard one (worst %g)", worst);

    /* A masked class of probability 0; a row of mass 2 (two halves' worth of teachers). */
    logits[3] = -INFINITY;
    probs[0 * VOCAB + 3] = 0.0f;
    for (int64_t c = 0; c < VOCAB; c++)
        probs[1 * VOCAB + c] = 2.0f / VOCAB;
    int32_t rows_kept[2] = {0, 0};
    double loss;
    int64_t counted;
    CHECK_OK(attn_soft_cross_entropy_forward(2, VOCAB, logits, probs, rows_kept, IGNORE, &loss,
                                             &counted));
    CHECK(isfinite(loss) && counted == 2, "a masked class of probability 0 is fine (%g)", loss);
    memset(d_soft, 0, 2 * VOCAB * sizeof(float));
    CHECK_OK(
        attn_soft_cross_entropy_backward(2, VOCAB, logits, probs, rows_kept, IGNORE, 1.0f, d_soft));
    double softmax_sum = 0.0;
    for (int64_t c = 0; c < VOCAB; c++)
        softmax_sum += d_soft[VOCAB + c] + probs[VOCAB + c];
    CHECK(d_soft[3] == 0.0f && fabs(softmax_sum - 2.0) <= 1e-5,
          "masked: no gradient (%g); mass 2 doubles the softmax term (%g)", (double)d_soft[3],
          softmax_sum);

    probs[5] = -0.5f;
    CHECK_FAILS(attn_soft_cross_entropy_forward(ROWS, VOCAB, logits, probs, targets, IGNORE, &loss,
                                                &counted),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "probs[0, 5]") != NULL, "%s", attn_last_error());
    probs[5] = NAN;
    CHECK_FAILS(
        attn_soft_cross_entropy_backward(ROWS, VOCAB, logits, probs, targets, IGNORE, 1.0f, d_soft),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_soft_cross_entropy_forward(ROWS, VOCAB, logits, NULL, targets, IGNORE, &loss,
                                                &counted),
                ATTN_ERR_INVALID_ARGUMENT);
    free(logits);
    free(probs);
    free(targets);
    free(lse);
    free(d_soft);
    free(d_hard);
}

int main(void)
{
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_reference_backward_matches_finite_differences);
    RUN_TEST(test_ignored_rows_contribute_nothing);
    RUN_TEST(test_smoothing_limits);
    RUN_TEST(test_extreme_logits);
    RUN_TEST(test_backward_accumulates);
    RUN_TEST(test_deterministic_across_runs_and_thread_counts);
    RUN_TEST(test_rejects_bad_arguments);
    RUN_TEST(test_soft_targets_match_the_hard_loss);
    return test_summary();
}
