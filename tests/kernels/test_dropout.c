/* Dropout: the mask follows the contract on every instruction set, keep-rate statistics,
 * seeds and offsets, the backward regenerates the mask, thread-count independence,
 * accumulation and argument checks. */
#include "kernel_testing.h"

static void test_mask_and_values_follow_the_contract(void)
{
    const int64_t n = 10007;
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f, 0.999f};
    float *x = test_floats((size_t)n), *y = test_floats((size_t)n);
    uint8_t *mask = test_alloc((size_t)n);
    test_fill_uniform(x, (size_t)n, -3.0f, 3.0f, 101);
    for (size_t t = 0; t < sizeof ps / sizeof ps[0]; t++) {
        const float p = ps[t];
        const uint64_t seed = 1234 + t, offset = 77777;
        for (int k = 0; k < TEST_ISA_COUNT; k++) {
            if (!test_use_isa(test_isas[k]))
                continue;
            memset(mask, 0xAA, (size_t)n);
            CHECK_OK(attn_dropout_forward(n, p, seed, offset, x, y, mask));
            int mask_ok = 1, values_ok = 1;
            for (int64_t i = 0; i < n; i++) {
                int keep = attn_hash_uniform(seed, offset + (uint64_t)i) >= p;
                mask_ok &= mask[i] == keep;
                double expected = keep ? (double)x[i] / (1.0 - (double)p) : 0.0;
                /* the scale 1/(1-p) is rounded to float before the product: two
                 * roundings of half an ulp each (observed 1.25 ulp) */
                values_ok &= keep ? test_ulp_error(y[i], expected) <= 1.5 : y[i] == 0.0f;
            }
            CHECK(mask_ok, "%s p=%g: mask[i] = hash_uniform(seed, offset + i) >= p",
                  attn_isa_name(test_isas[k]), (double)p);
            CHECK(values_ok, "%s p=%g: y = x / (1 - p) where kept, 0 elsewhere",
                  attn_isa_name(test_isas[k]), (double)p);
            if (p == 0.0f)
                CHECK(test_same_bits(x, y, (size_t)n), "%s: p = 0 copies",
                      attn_isa_name(test_isas[k]));
        }
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(y), free(mask);
}

/* p equal to an element's own uniform keeps it (u >= p); the next float up drops it. */
static void test_keep_boundary_is_exact(void)
{
    enum { N = 67 };
    float x[N], y[N];
    uint8_t mask[N];
    for (int i = 0; i < N; i++)
        x[i] = 1.0f;
    const uint64_t seed = 2024, offset = 5;
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        int exact = 1;
        for (int i = 0; i < N; i += 5) {
            float u = attn_hash_uniform(seed, offset + (uint64_t)i);
            if (u == 0.0f)
                continue;
            CHECK_OK(attn_dropout_forward(N, u, seed, offset, x, y, mask));
            exact &= mask[i] == 1 && y[i] != 0.0f;
            CHECK_OK(attn_dropout_forward(N, nextafterf(u, 1.0f), seed, offset, x, y, mask));
            exact &= mask[i] == 0 && y[i] == 0.0f;
            float dx[N] = {0};
            CHECK_OK(attn_dropout_backward(N, u, seed, offset, x, dx));
            exact &= dx[i] != 0.0f;
        }
        CHECK(exact, "%s: kept iff uniform >= p, at equality too", attn_isa_name(test_isas[k]));
    }
    attn_set_isa(ATTN_ISA_AUTO);
}

static void test_keep_rate_statistics(void)
{
    const int64_t n = 200000;
    const float ps[] = {0.1f, 0.5f, 0.9f};
    float *x = test_floats((size_t)n), *y = test_floats((size_t)n);
    uint8_t *mask = test_alloc((size_t)n);
    for (int64_t i = 0; i < n; i++)
        x[i] = 1.0f;
    for (size_t t = 0; t < 3; t++) {
        const double p = ps[t];
        CHECK_OK(attn_dropout_forward(n, ps[t], 99 + t, 0, x, y, mask));
        double kept = 0.0, both = 0.0, sum = 0.0;
        for (int64_t i = 0; i < n; i++) {
            kept += mask[i];
            sum += y[i];
            if (i + 1 < n)
                both += mask[i] & mask[i + 1];
        }
        /* binomial counts: within 5 standard deviations */
        double q = 1.0 - p, sigma = sqrt(p * q / (double)n);
        CHECK(fabs(kept / (double)n - q) <= 5.0 * sigma, "p=%g: keep rate %.5f, expected %.5f", p,
              kept / (double)n, q);
        /* E[y] = x: the scaling keeps the expectation */
        CHECK(fabs(sum / (double)n - 1.0) <= 5.0 * sqrt(p / q / (double)n),
              "p=%g: mean of y %.5f, expected 1", p, sum / (double)n);
        /* neighbours are independent: both kept with probability q^2 */
        double pair_sigma = sqrt(q * q * (1.0 - q * q) / (double)n);
        CHECK(fabs(both / (double)(n - 1) - q * q) <= 6.0 * pair_sigma,
              "p=%g: neighbours both kept %.5f, expected %.5f", p, both / (double)(n - 1), q * q);
    }
    free(x), free(y), free(mask);
}

static void test_seeds_and_offsets(void)
{
    const int64_t n = 4096, shift = 1000;
    float *x = test_floats((size_t)(n + shift)), *y = test_floats((size_t)(n + shift));
    uint8_t *a = test_alloc((size_t)(n + shift)), *b = test_alloc((size_t)(n + shift));
    test_fill_uniform(x, (size_t)(n + shift), -1.0f, 1.0f, 102);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        const char *isa = attn_isa_name(test_isas[k]);
        CHECK_OK(attn_dropout_forward(n, 0.5f, 7, 0, x, y, a));
        CHECK_OK(attn_dropout_forward(n, 0.5f, 7, 0, x, y, b));
        CHECK(memcmp(a, b, (size_t)n) == 0, "%s: same seed, same mask", isa);
        CHECK_OK(attn_dropout_forward(n, 0.5f, 8, 0, x, y, b));
        int differ = 0;
        for (int64_t i = 0; i < n; i++)
            differ += a[i] != b[i];
        CHECK(differ > n / 3, "%s: another seed, another mask (%d of %lld differ)", isa, differ,
              (long long)n);
        /* the mask depends on offset + i: a call at offset `shift` continues one at 0 */
        CHECK_OK(attn_dropout_forward(n + shift, 0.5f, 7, 0, x, y, a));
        CHECK_OK(attn_dropout_forward(n, 0.5f, 7, (uint64_t)shift, x + shift, y, b));
        CHECK(memcmp(a + shift, b, (size_t)n) == 0, "%s: offset shifts the mask", isa);
        differ = 0;
        for (int64_t i = 0; i < n; i++)
            differ += a[i] != b[i];
        CHECK(differ > n / 3, "%s: another offset, another mask", isa);
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(y), free(a), free(b);
}

static void test_backward_regenerates_the_mask(void)
{
    const int64_t n = 3001;
    const float p = 0.3f;
    float *dy = test_floats((size_t)n), *dx = test_floats((size_t)n), *y = test_floats((size_t)n);
    uint8_t *mask = test_alloc((size_t)n);
    test_fill_uniform(dy, (size_t)n, 0.5f, 1.5f, 103); /* never 0, so zeros mean dropped */
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        CHECK_OK(attn_dropout_forward(n, p, 5, 11, dy, y, mask));
        memset(dx, 0, (size_t)n * sizeof(float));
        CHECK_OK(attn_dropout_backward(n, p, 5, 11, dy, dx));
        int same = 1;
        for (int64_t i = 0; i < n; i++)
            same &= (dx[i] != 0.0f) == mask[i] && dx[i] == y[i];
        CHECK(same, "%s: dx = dy * keep / (1 - p) with the forward's mask",
              attn_isa_name(test_isas[k]));
        float twice[3001] = {0};
        CHECK_OK(attn_dropout_backward(n, p, 5, 11, dy, twice));
        CHECK_OK(attn_dropout_backward(n, p, 5, 11, dy, twice));
        int doubled = 1;
        for (int64_t i = 0; i < n; i++)
            doubled &= twice[i] == 2.0f * dx[i];
        CHECK(doubled, "%s: backward accumulates", attn_isa_name(test_isas[k]));
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(dy), free(dx), free(y), free(mask);
}

static void test_independent_of_thread_count(void)
{
    const int64_t n = 300007;
    float *x = test_floats((size_t)n), *y1 = test_floats((size_t)n), *y2 = test_floats((size_t)n);
    uint8_t *m1 = test_alloc((size_t)n), *m2 = test_alloc((size_t)n);
    test_fill_uniform(x, (size_t)n, -1.0f, 1.0f, 104);
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        CHECK_OK(attn_set_num_threads(1));
        CHECK_OK(attn_dropout_forward(n, 0.2f, 42, 9, x, y1, m1));
        CHECK_OK(attn_set_num_threads(2));
        CHECK_OK(attn_dropout_forward(n, 0.2f, 42, 9, x, y2, m2));
        CHECK(test_same_bits(y1, y2, (size_t)n) && memcmp(m1, m2, (size_t)n) == 0,
              "%s: same output and mask for 1 and 2 threads", attn_isa_name(test_isas[k]));
    }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(y1), free(y2), free(m1), free(m2);
}

static void test_rejects_bad_arguments(void)
{
    float x[4] = {0}, y[4];
    const float bad_p[] = {-0.1f, 1.0f, 1.5f, NAN};
    for (int i = 0; i < 4; i++) {
        CHECK_FAILS(attn_dropout_forward(4, bad_p[i], 1, 0, x, y, NULL), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(attn_dropout_backward(4, bad_p[i], 1, 0, x, y), ATTN_ERR_INVALID_ARGUMENT);
    }
    CHECK(strstr(attn_last_error(), "p must be in [0, 1)") != NULL, "message: %s",
          attn_last_error());
    CHECK_FAILS(attn_dropout_forward(-4, 0.1f, 1, 0, x, y, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_forward(4, 0.1f, 1, 0, NULL, y, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_forward(4, 0.1f, 1, 0, x, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward(4, 0.1f, 1, 0, NULL, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward(4, 0.1f, 1, 0, x, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward(-1, 0.1f, 1, 0, x, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_dropout_forward(0, 0.1f, 1, 0, NULL, NULL, NULL));
    CHECK_OK(attn_dropout_backward(0, 0.1f, 1, 0, NULL, NULL));
}

int main(void)
{
    RUN_TEST(test_mask_and_values_follow_the_contract);
    RUN_TEST(test_keep_boundary_is_exact);
    RUN_TEST(test_keep_rate_statistics);
    RUN_TEST(test_seeds_and_offsets);
    RUN_TEST(test_backward_regenerates_the_mask);
    RUN_TEST(test_independent_of_thread_count);
    RUN_TEST(test_rejects_bad_arguments);
    return test_summary();
}
