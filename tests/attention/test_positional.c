/* Sinusoidal positional encoding: both layouts against the paper's formula, odd sizes,
 * bad input. */
#include "classic_test_util.h"

/* PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(pos / 10000^(2i/d)). */
static double paper_value(int64_t pos, int64_t feature, int64_t d)
{
    int64_t i = feature / 2;
    double angle = (double)pos / pow(10000.0, (double)(2 * i) / (double)d);
    return feature % 2 == 0 ? sin(angle) : cos(angle);
}

static void test_interleaved_matches_paper(void)
{
    const int64_t dims[] = {1, 2, 7, 64, 80};
    const int64_t length = 129;
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        int64_t d = dims[k];
        float *out = new_floats((size_t)(length * d));
        double *expected = new_doubles((size_t)(length * d));
        for (int64_t pos = 0; pos < length; pos++)
            for (int64_t f = 0; f < d; f++)
                expected[pos * d + f] = paper_value(pos, f, d);
        CHECK_OK(attn_positional_encoding(length, d, ATTN_PE_INTERLEAVED, out));
        char what[64];
        snprintf(what, sizeof what, "interleaved d=%lld", (long long)d);
        /* One rounding of a value in [-1, 1]: within 6e-8. */
        CHECK_ARRAYS_CLOSE(what, out, expected, (size_t)(length * d), 1e-7, 0);
        CHECK(out[0] == 0.0f && (d == 1 || out[1] == 1.0f), "position 0: sin 0, cos 1");
        free(out);
        free(expected);
    }
}

/* The concatenated layout holds the same values: sines first, cosines after, and for an odd
 * d_model the extra sine last, in both layouts. */
static void test_concatenated_is_a_permutation(void)
{
    const int64_t dims[] = {1, 2, 7, 64, 81};
    const int64_t length = 33;
    for (size_t k = 0; k < sizeof dims / sizeof dims[0]; k++) {
        int64_t d = dims[k], half = d / 2;
        float *inter = new_floats((size_t)(length * d)), *concat = new_floats((size_t)(length * d));
        CHECK_OK(attn_positional_encoding(length, d, ATTN_PE_INTERLEAVED, inter));
        CHECK_OK(attn_positional_encoding(length, d, ATTN_PE_CONCATENATED, concat));
        int same = 1;
        for (int64_t pos = 0; pos < length; pos++) {
            const float *a = inter + pos * d, *c = concat + pos * d;
            for (int64_t i = 0; i < half; i++)
                same &= c[i] == a[2 * i] && c[half + i] == a[2 * i + 1];
            if (d % 2 == 1)
                same &= c[d - 1] == a[d - 1] &&
                        test_close(a[d - 1], sin((double)pos * pow(10000.0, -(double)(2 * half) / (double)d)), 1e-7, 0);
        }
        CHECK(same, "d=%lld: concatenated = interleaved reordered", (long long)d);
        free(inter);
        free(concat);
    }
}

static void test_bad_input(void)
{
    float out[16];
    CHECK_FAILS(attn_positional_encoding(-1, 4, ATTN_PE_INTERLEAVED, out),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "length") != NULL, "names length: %s", attn_last_error());
    CHECK_FAILS(attn_positional_encoding(2, 0, ATTN_PE_INTERLEAVED, out),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "d_model") != NULL, "names d_model: %s", attn_last_error());
    CHECK_FAILS(attn_positional_encoding(2, 4, (attn_pe_layout)2, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_positional_encoding(2, 4, ATTN_PE_CONCATENATED, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_positional_encoding((int64_t)1 << 40, (int64_t)1 << 40,
                                         ATTN_PE_INTERLEAVED, out),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "overflows") != NULL, "size overflow: %s",
          attn_last_error());
    CHECK_OK(attn_positional_encoding(0, 4, ATTN_PE_INTERLEAVED, NULL));
}

int main(void)
{
    RUN_TEST(test_interleaved_matches_paper);
    RUN_TEST(test_concatenated_is_a_permutation);
    RUN_TEST(test_bad_input);
    return test_summary();
}
