/* Dropout: the mask follows the contract on every instruction set, keep-rate statistics,
 * seeds and offsets, the backward regenerates the mask, thread-count independence,
 * accumulation, the backward from the forward's stored bits equals the re-hashing one, and
 * argument checks. */
#include "kernel_testing.h"
#include "kernels/elementwise.h"

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

/* The backward from the bits the forward stored (what attn_op_dropout runs) gives dx bit for
 * bit as the backward that re-hashes the mask, on every instruction set and thread count, for
 * sizes that end inside a byte, a SIMD step and a thread's range; dx starts with -0.0 in places,
 * which a dropped element's + 0 must turn into what the re-hashing backward makes of it. The
 * bits are the byte mask packed, and the last byte's unused bits are 0. */
static void test_backward_from_bits_equals_rehashing(void)
{
    const int64_t sizes[] = {1, 7, 8, 9, 13, 16, 25, 63, 64, 65, 1000, 300007};
    const int64_t largest = 300007;
    const float ps[] = {0.1f, 0.5f};
    float *x = test_floats((size_t)largest), *dy = test_floats((size_t)largest);
    float *dx_start = test_floats((size_t)largest), *from_hash = test_floats((size_t)largest);
    float *from_bits = test_floats((size_t)largest), *y = test_floats((size_t)largest);
    float *y_bits = test_floats((size_t)largest);
    uint8_t *mask = test_alloc((size_t)largest), *bits = test_alloc((size_t)(largest + 7) / 8);
    test_fill_uniform(x, (size_t)largest, -2.0f, 2.0f, 105);
    test_fill_uniform(dy, (size_t)largest, -2.0f, 2.0f, 106);
    test_fill_uniform(dx_start, (size_t)largest, -1.0f, 1.0f, 107);
    for (int64_t i = 0; i < largest; i += 5)
        dx_start[i] = -0.0f;
    for (int threads = 1; threads <= 2; threads++) {
        CHECK_OK(attn_set_num_threads(threads));
        for (int k = 0; k < TEST_ISA_COUNT; k++) {
            if (!test_use_isa(test_isas[k]))
                continue;
            for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
                const int64_t n = sizes[s];
                const size_t bytes = (size_t)(n + 7) / 8;
                int same_y = 1, packed = 1, same_dx = 1;
                for (size_t t = 0; t < sizeof ps / sizeof *ps; t++) {
                    const uint64_t seed = 31 + t, offset = 1000003;
                    memset(bits, 0xA5, bytes);
                    CHECK_OK(attn_dropout_forward(n, ps[t], seed, offset, x, y, mask));
                    CHECK_OK(attn_dropout_forward_bits(n, ps[t], seed, offset, x, y_bits, bits));
                    same_y &= test_same_bits(y, y_bits, (size_t)n);
                    for (int64_t i = 0; i < 8 * (int64_t)bytes; i++)
                        packed &= ((bits[i / 8] >> (i % 8)) & 1) == (i < n ? mask[i] : 0);
                    memcpy(from_hash, dx_start, (size_t)n * sizeof(float));
                    memcpy(from_bits, dx_start, (size_t)n * sizeof(float));
                    CHECK_OK(attn_dropout_backward(n, ps[t], seed, offset, dy, from_hash));
                    CHECK_OK(attn_dropout_backward_bits(n, ps[t], bits, dy, from_bits));
                    same_dx &= test_same_bits(from_hash, from_bits, (size_t)n);
                }
                CHECK(same_y && packed && same_dx,
                      "%s, %d threads, n=%lld: same y (%d), bits = mask packed (%d), same dx (%d)",
                      attn_isa_name(test_isas[k]), threads, (long long)n, same_y, packed, same_dx);
            }
        }
    }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(dy), free(dx_start), free(from_hash), free(from_bits), free(y), free(y_bits);
    free(mask), free(bits);
}

/* The graph's first contribution to a gradient writes dx (accumulate 0) into memory that holds
 * anything: dropped elements become zeros and the rest the bits of adding to zeros;
 * accumulate 1 is the public entry point. */
static void test_backward_from_bits_can_write_instead_of_adding(void)
{
    const int64_t n = 1037;
    float *x = test_floats((size_t)n), *y = test_floats((size_t)n), *dy = test_floats((size_t)n);
    float *from_zeros = test_floats((size_t)n), *written = test_floats((size_t)n);
    float *start = test_floats((size_t)n), *added = test_floats((size_t)n);
    float *public_added = test_floats((size_t)n);
    uint8_t *bits = test_alloc((size_t)(n + 7) / 8);
    test_fill_uniform(x, (size_t)n, -2.0f, 2.0f, 108);
    test_fill_uniform(dy, (size_t)n, -2.0f, 2.0f, 109);
    test_fill_uniform(start, (size_t)n, -1.0f, 1.0f, 110);
    for (int64_t i = 0; i < n; i += 7)
        dy[i] = -0.0f;
    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        CHECK_OK(attn_dropout_forward_bits(n, 0.3f, 5, 77, x, y, bits));
        for (int64_t i = 0; i < n; i++) {
            from_zeros[i] = 0.0f;
            written[i] = NAN;
        }
        memcpy(added, start, (size_t)n * sizeof(float));
        memcpy(public_added, start, (size_t)n * sizeof(float));
        CHECK_OK(attn_dropout_backward_bits(n, 0.3f, bits, dy, from_zeros));
        CHECK_OK(attn_dropout_backward_bits_to(n, 0.3f, bits, dy, written, 0));
        CHECK_OK(attn_dropout_backward_bits(n, 0.3f, bits, dy, public_added));
        CHECK_OK(attn_dropout_backward_bits_to(n, 0.3f, bits, dy, added, 1));
        CHECK(test_same_bits(written, from_zeros, (size_t)n) &&
                  test_same_bits(added, public_added, (size_t)n),
              "%s: writing gives the bits of adding to zeros (%d), adding those of the public "
              "backward (%d)",
              attn_isa_name(test_isas[k]), test_same_bits(written, from_zeros, (size_t)n),
              test_same_bits(added, public_added, (size_t)n));
    }
    attn_set_isa(ATTN_ISA_AUTO);
    free(x), free(y), free(dy), free(from_zeros), free(written), free(start), free(added);
    free(public_added), free(bits);
}

static void test_bits_variants_reject_bad_arguments(void)
{
    float x[4] = {0}, y[4];
    uint8_t bits[1] = {0};
    CHECK_FAILS(attn_dropout_forward_bits(4, 1.0f, 1, 0, x, y, bits), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_forward_bits(4, 0.1f, 1, 0, x, y, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_dropout_forward_bits: keep_bits") != NULL, "message: %s",
          attn_last_error());
    CHECK_FAILS(attn_dropout_forward_bits(4, 0.1f, 1, 0, NULL, y, bits), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_dropout_forward_bits: x must not be NULL") != NULL,
          "message: %s", attn_last_error());
    CHECK_FAILS(attn_dropout_forward_bits(-4, 0.1f, 1, 0, x, y, bits), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward_bits(4, -0.1f, bits, x, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward_bits(4, 0.1f, NULL, x, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward_bits(4, 0.1f, bits, NULL, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward_bits(4, 0.1f, bits, x, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_dropout_backward_bits(-1, 0.1f, bits, x, y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_dropout_forward_bits(0, 0.1f, 1, 0, NULL, NULL, NULL));
    CHECK_OK(attn_dropout_backward_bits(0, 0.1f, NULL, NULL, NULL));
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
    RUN_TEST(test_backward_from_bits_equals_rehashing);
    RUN_TEST(test_bits_variants_reject_bad_arguments);
    RUN_TEST(test_backward_from_bits_can_write_instead_of_adding);
    return test_summary();
}
