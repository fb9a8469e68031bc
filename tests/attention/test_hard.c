/* Hard attention: argmax and seeded sampling, masks, determinism, bad input. */
#include "classic_test_util.h"

/* The first highest unmasked, finite score, or -1. */
static int64_t reference_argmax(const float *scores, const uint8_t *mask, int64_t lk)
{
    int64_t best = -1;
    for (int64_t j = 0; j < lk; j++) {
        if ((mask != NULL && mask[j]) || scores[j] == -INFINITY)
            continue;
        if (best < 0 || scores[j] > scores[best])
            best = j;
    }
    return best;
}

static int output_consistent(int64_t batch, int64_t lk, int64_t dv, const float *values,
                             const int64_t *chosen, const float *weights, const float *context)
{
    for (int64_t b = 0; b < batch; b++) {
        for (int64_t j = 0; j < lk; j++)
            if (weights[b * lk + j] != (j == chosen[b] ? 1.0f : 0.0f))
                return 0;
        for (int64_t d = 0; d < dv; d++) {
            float expected = chosen[b] < 0 ? 0.0f : values[(b * lk + chosen[b]) * dv + d];
            if (context[b * dv + d] != expected)
                return 0;
        }
    }
    return 1;
}

static void test_argmax(void)
{
    const int64_t B = 17, lk = 13, dv = 7;
    float *scores = new_floats(B * lk), *values = new_floats(B * lk * dv);
    test_fill_uniform(scores, B * lk, -3, 3, 1);
    test_fill_uniform(values, B * lk * dv, -1, 1, 2);
    uint8_t *mask = random_mask(B, lk, 3);
    /* Row 0: a tie between positions 4 and 9 goes to 4; row 2: a masked position holds
     * the highest score; row 3: -inf scores are skipped. */
    scores[4] = scores[9] = 10.0f;
    mask[4] = mask[9] = 0;
    mask[2 * lk + 1] = 1;
    scores[2 * lk + 1] = 100.0f;
    for (int64_t j = 0; j < lk; j++)
        scores[3 * lk + j] = j == lk - 1 ? -5.0f : -INFINITY;
    mask[3 * lk + lk - 1] = 0;
    /* Row 4: nothing left but -inf. */
    for (int64_t j = 0; j < lk; j++)
        scores[4 * lk + j] = -INFINITY;

    int64_t chosen[17], first[17];
    float *weights = new_floats(B * lk), *context = new_floats(B * dv);
    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_OK(attn_set_isa(isas[i]));
        memset(context, 0xff, (size_t)(B * dv) * sizeof(float));
        CHECK_OK(attn_hard_attention(B, lk, dv, scores, mask, values, ATTN_HARD_ARGMAX, NULL,
                                     chosen, weights, context));
        int ok = 1;
        for (int64_t b = 0; b < B; b++)
            ok &= chosen[b] == reference_argmax(scores + b * lk, mask + b * lk, lk);
        CHECK(ok, "%s: argmax of unmasked finite scores", attn_isa_name(isas[i]));
        CHECK(chosen[0] == 4, "tie goes to the lowest index (got %lld)", (long long)chosen[0]);
        CHECK(chosen[1] == -1, "fully masked row gives -1");
        CHECK(chosen[2] != 1, "masked position never chosen");
        CHECK(chosen[3] == lk - 1, "-inf scores are skipped");
        CHECK(chosen[4] == -1, "all -inf gives -1");
        CHECK(output_consistent(B, lk, dv, values, chosen, weights, context),
              "%s: one-hot weights, context = chosen value, zeros for -1",
              attn_isa_name(isas[i]));
        if (i == 0)
            memcpy(first, chosen, sizeof first);
        else
            CHECK(memcmp(first, chosen, sizeof first) == 0, "%s agrees with reference",
                  attn_isa_name(isas[i]));
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    CHECK_OK(attn_hard_attention(B, lk, dv, scores, NULL, values, ATTN_HARD_ARGMAX, NULL, chosen,
                                 NULL, context));
    CHECK(chosen[2] == 1, "without the mask the highest score wins; weights may be NULL");
    free(scores);
    free(values);
    free(mask);
    free(weights);
    free(context);
}

/* Many rows with the same scores: the frequencies follow the softmax, masked and underflowing
 * positions never come up, and a seed fixes every draw at any thread count and ISA. */
static void test_sampling(void)
{
    const int64_t B = 200000, lk = 5, dv = 1;
    const float row[5] = {0.5f, -1.0f, 1.5f, -1e4f, 2.0f}; /* position 3 underflows to 0 */
    float *scores = new_floats(B * lk), *values = new_floats(B * lk);
    uint8_t *mask = test_alloc((size_t)(B * lk));
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < lk; j++) {
            scores[b * lk + j] = row[j];
            values[b * lk + j] = (float)j;
            mask[b * lk + j] = j == 4; /* the highest score, masked */
        }
    int64_t *chosen = test_alloc((size_t)B * sizeof(int64_t));
    int64_t *again = test_alloc((size_t)B * sizeof(int64_t));
    float *context = new_floats(B * dv), *weights = new_floats(B * lk);
    attn_rng rng;
    attn_rng_seed(&rng, 42);
    CHECK_OK(attn_hard_attention(B, lk, dv, scores, mask, values, ATTN_HARD_SAMPLE, &rng, chosen,
                                 weights, context));
    CHECK(output_consistent(B, lk, dv, values, chosen, weights, context), "sample outputs");

    double z = exp(0.5) + exp(-1.0) + exp(1.5);
    double expected[5] = {exp(0.5) / z, exp(-1.0) / z, exp(1.5) / z, 0, 0};
    int64_t count[5] = {0};
    int in_range = 1;
    for (int64_t b = 0; b < B; b++) {
        in_range &= chosen[b] >= 0 && chosen[b] < lk;
        if (chosen[b] >= 0 && chosen[b] < lk)
            count[chosen[b]]++;
    }
    CHECK(in_range, "every row chooses a position");
    CHECK(count[3] == 0 && count[4] == 0, "never an underflowing or masked position");
    for (int j = 0; j < 3; j++) {
        double f = (double)count[j] / (double)B;
        double sd = sqrt(expected[j] * (1 - expected[j]) / (double)B);
        CHECK(fabs(f - expected[j]) < 4 * sd, "position %d: frequency %.4f, softmax %.4f", j, f,
              expected[j]);
    }

    /* Exactly one draw per row. */
    attn_rng fresh;
    attn_rng_seed(&fresh, 42);
    for (int64_t b = 0; b < B; b++)
        attn_rng_next_u64(&fresh);
    CHECK(memcmp(&fresh, &rng, sizeof rng) == 0, "one draw per row");

    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int threads = 1; threads <= 2; threads++)
        for (int i = 0; i < n_isas; i++) {
            CHECK_OK(attn_set_num_threads(threads));
            CHECK_OK(attn_set_isa(isas[i]));
            attn_rng_seed(&rng, 42);
            CHECK_OK(attn_hard_attention(B, lk, dv, scores, mask, values, ATTN_HARD_SAMPLE, &rng,
                                         again, NULL, context));
            CHECK(memcmp(chosen, again, (size_t)B * sizeof(int64_t)) == 0,
                  "same seed, same draws (%d threads, %s)", threads, attn_isa_name(isas[i]));
        }
    CHECK_OK(attn_set_num_threads(0));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    attn_rng_seed(&rng, 43);
    CHECK_OK(attn_hard_attention(B, lk, dv, scores, mask, values, ATTN_HARD_SAMPLE, &rng, again,
                                 NULL, context));
    CHECK(memcmp(chosen, again, (size_t)B * sizeof(int64_t)) != 0, "another seed, other draws");

    /* A fully masked row under sampling: -1 and zero context, still one draw. */
    memset(mask, 1, (size_t)lk);
    attn_rng_seed(&rng, 42);
    CHECK_OK(attn_hard_attention(2, lk, dv, scores, mask, values, ATTN_HARD_SAMPLE, &rng, again,
                                 weights, context));
    CHECK(again[0] == -1 && context[0] == 0.0f && again[1] == chosen[1],
          "fully masked row under sampling");
    free(scores);
    free(values);
    free(mask);
    free(chosen);
    free(again);
    free(context);
    free(weights);
}

/* Hard attention on attn_additive_scores agrees with the soft weights' argmax. */
static void test_on_additive_scores(void)
{
    attn_additive_dims dims = {9, 11, 5, 6, 6, 8, ATTN_PRECISION_FP32};
    size_t nk = 9 * 11 * 8, nv = 9 * 11 * 6;
    float *s = new_floats(45), *keys = new_floats(nk), *values = new_floats(nv);
    float *ws = new_floats(40), *v = new_floats(8), *scores = new_floats(99);
    float *weights = new_floats(99), *context = new_floats(54), *hard_context = new_floats(54);
    float *saved = new_floats(attn_additive_saved_floats(&dims));
    test_fill_uniform(s, 45, -1, 1, 1);
    test_fill_uniform(keys, nk, -1, 1, 2);
    test_fill_uniform(values, nv, -1, 1, 3);
    test_fill_uniform(ws, 40, -1, 1, 4);
    test_fill_uniform(v, 8, -2, 2, 5);
    uint8_t *mask = random_mask(9, 11, 6);
    attn_additive_params params = {ws, NULL, v};
    CHECK_OK(attn_additive_scores(&dims, &params, s, keys, scores, saved));
    CHECK_OK(attn_additive_forward(&dims, &params, s, keys, values, mask, context, weights, saved));
    int64_t chosen[9];
    CHECK_OK(attn_hard_attention(9, 11, 6, scores, mask, values, ATTN_HARD_ARGMAX, NULL, chosen,
                                 NULL, hard_context));
    int ok = 1;
    for (int64_t b = 0; b < 9; b++) {
        int64_t best = -1;
        for (int64_t j = 0; j < 11; j++)
            if (weights[b * 11 + j] > 0 && (best < 0 || weights[b * 11 + j] > weights[b * 11 + best]))
                best = j;
        ok &= chosen[b] == best;
    }
    CHECK(ok, "hard argmax = argmax of the soft weights");
    float *all[] = {s, keys, values, ws, v, scores, weights, context, hard_context, saved};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    free(mask);
}

static void test_bad_input(void)
{
    float buf[64] = {0};
    int64_t chosen[4];
    attn_rng rng;
    attn_rng_seed(&rng, 1);
    CHECK_FAILS(attn_hard_attention(2, 3, 4, NULL, NULL, buf, ATTN_HARD_ARGMAX, NULL, chosen,
                                    NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "scores") != NULL, "names scores: %s", attn_last_error());
    CHECK_FAILS(attn_hard_attention(2, 3, 4, buf, NULL, NULL, ATTN_HARD_ARGMAX, NULL, chosen,
                                    NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_hard_attention(2, 3, 4, buf, NULL, buf, ATTN_HARD_ARGMAX, NULL, NULL, NULL,
                                    buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_hard_attention(2, 3, 4, buf, NULL, buf, ATTN_HARD_ARGMAX, NULL, chosen,
                                    NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_hard_attention(2, 3, 4, buf, NULL, buf, ATTN_HARD_SAMPLE, NULL, chosen,
                                    NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "rng") != NULL, "names rng: %s", attn_last_error());
    CHECK_FAILS(attn_hard_attention(2, 3, 4, buf, NULL, buf, (attn_hard_mode)2, &rng, chosen,
                                    NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_hard_attention(-1, 3, 4, buf, NULL, buf, ATTN_HARD_ARGMAX, NULL, chosen,
                                    NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_hard_attention(2, -3, 4, buf, NULL, buf, ATTN_HARD_ARGMAX, NULL, chosen,
                                    NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_hard_attention(2, 3, 0, buf, NULL, buf, ATTN_HARD_ARGMAX, NULL, chosen,
                                    NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_hard_attention((int64_t)1 << 31, (int64_t)1 << 31, 4, buf, NULL, buf,
                                    ATTN_HARD_ARGMAX, NULL, chosen, NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_hard_attention(0, 3, 4, NULL, NULL, NULL, ATTN_HARD_SAMPLE, NULL, NULL, NULL,
                                 NULL));
    /* No positions at all: -1 everywhere. */
    CHECK_OK(attn_hard_attention(2, 0, 4, buf, NULL, buf, ATTN_HARD_ARGMAX, NULL, chosen, NULL,
                                 buf + 32));
    CHECK(chosen[0] == -1 && chosen[1] == -1 && all_zero(buf + 32, 8), "src_len 0 gives -1");
}

int main(void)
{
    RUN_TEST(test_argmax);
    RUN_TEST(test_sampling);
    RUN_TEST(test_on_additive_scores);
    RUN_TEST(test_bad_input);
    return test_summary();
}
