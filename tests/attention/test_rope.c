/* Rotary position embeddings: against RoFormer's formula written as a complex product, the
 * inverse undoing the rotation, positions that continue across calls (the step decoder's
 * one row at a time), strided rows left alone past their heads, bad input. */
#include "classic_test_util.h"

/* Pair i of a head, (x[i], x[i + h]) read as the complex number x[i] + j x[i + h], times
 * e^(j p theta_i), theta_i = base^(-2i / head_dim). */
static void expected_rotation(const float *x, int64_t heads, int64_t head_dim, int64_t position,
                              double base, double *out)
{
    const int64_t half = head_dim / 2;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < half; i++) {
            const double theta = (double)position * pow(base, -(double)(2 * i) / (double)head_dim);
            const double re = x[h * head_dim + i], im = x[h * head_dim + i + half];
            out[h * head_dim + i] = re * cos(theta) - im * sin(theta);
            out[h * head_dim + i + half] = re * sin(theta) + im * cos(theta);
        }
}

static void fill(float *x, size_t n, uint64_t seed)
{
    uint64_t state = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        state = state * 6364136223846793005u + 1442695040888963407u;
        x[i] = (float)((double)(state >> 40) / (double)(1 << 24) * 4.0 - 2.0);
    }
}

static void test_matches_the_complex_product(void)
{
    const int64_t batch = 2, len = 37, heads = 3, head_dim = 8, stride = heads * head_dim;
    const double bases[] = {10000.0, 500.0, 3.0};
    for (size_t k = 0; k < sizeof bases / sizeof bases[0]; k++) {
        const size_t n = (size_t)(batch * len * stride);
        float *x = new_floats(n), *original = new_floats(n);
        double *expected = new_doubles(n);
        fill(x, n, 7 + k);
        memcpy(original, x, n * sizeof(float));
        for (int64_t b = 0; b < batch; b++)
            for (int64_t t = 0; t < len; t++)
                expected_rotation(original + (b * len + t) * stride, heads, head_dim, 5 + t,
                                  bases[k], expected + (b * len + t) * stride);
        CHECK_OK(attn_rope_rotate(x, batch, len, 5, stride, heads, head_dim, bases[k], 0));
        char what[64];
        snprintf(what, sizeof what, "base %g", bases[k]);
        CHECK_ARRAYS_CLOSE(what, x, expected, n, 1e-6, 1e-6);
        CHECK_OK(attn_rope_rotate(x, batch, len, 5, stride, heads, head_dim, bases[k], 1));
        double worst = 0.0;
        for (size_t i = 0; i < n; i++)
            worst = fmax(worst, fabs((double)x[i] - original[i]));
        CHECK(worst <= 1e-6, "%s: the inverse turns back (%g)", what, worst);
        free(x), free(original), free(expected);
    }
}

/* Position 0 is the identity; a row rotated alone at position p equals row p of a sequence,
 * which is how the step decoder turns one new query at a time. */
static void test_positions_continue_across_calls(void)
{
    const int64_t len = 9, heads = 2, head_dim = 6, stride = heads * head_dim;
    float *sequence = new_floats((size_t)(len * stride)), *row = new_floats((size_t)stride);
    fill(sequence, (size_t)(len * stride), 3);
    float first[12];
    memcpy(first, sequence, sizeof first);
    int same = 1;
    for (int64_t t = 0; t < len; t++) {
        memcpy(row, sequence + t * stride, (size_t)stride * sizeof(float));
        CHECK_OK(attn_rope_rotate(row, 1, 1, t, stride, heads, head_dim, 10000.0, 0));
        if (t == 0)
            same &= memcmp(row, first, sizeof first) == 0;
        memcpy(sequence + t * stride, row, (size_t)stride * sizeof(float));
    }
    float *whole = new_floats((size_t)(len * stride));
    fill(whole, (size_t)(len * stride), 3);
    CHECK_OK(attn_rope_rotate(whole, 1, len, 0, stride, heads, head_dim, 10000.0, 0));
    same &= memcmp(whole, sequence, (size_t)(len * stride) * sizeof(float)) == 0;
    CHECK(same, "one row at a time gives the sequence's bits, position 0 unchanged");
    free(sequence), free(row), free(whole);
}

/* Q of a fused [Q | K | V] row: a stride of three heads' widths, only the first turned. */
static void test_strided_rows_keep_the_rest(void)
{
    const int64_t rows = 4, heads = 2, head_dim = 4, width = heads * head_dim, stride = 3 * width;
    float *x = new_floats((size_t)(rows * stride)), *before = new_floats((size_t)(rows * stride));
    fill(x, (size_t)(rows * stride), 11);
    memcpy(before, x, (size_t)(rows * stride) * sizeof(float));
    CHECK_OK(attn_rope_rotate(x, 2, 2, 1, stride, heads, head_dim, 10000.0, 0));
    int kept = 1, turned = 0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < stride; j++) {
            const int same = x[r * stride + j] == before[r * stride + j];
            if (j >= width)
                kept &= same;
            else
                turned |= !same;
        }
    CHECK(kept && turned, "K and V untouched, Q turned");
    free(x), free(before);
}

static void test_bad_input(void)
{
    float x[24] = {0};
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    CHECK_FAILS(attn_rope_rotate(x, 1, 2, 0, 12, 2, 5, 10000.0, 0), bad);
    CHECK(strstr(attn_last_error(), "head_dim even") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_rope_rotate(x, 1, 2, 0, 6, 2, 4, 10000.0, 0), bad);
    CHECK(strstr(attn_last_error(), "row_stride") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_rope_rotate(x, 1, 2, 0, 8, 2, 4, 0.0, 0), bad);
    CHECK_FAILS(attn_rope_rotate(x, 1, 2, 0, 8, 2, 4, NAN, 0), bad);
    CHECK(strstr(attn_last_error(), "base") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_rope_rotate(x, 1, 2, -1, 8, 2, 4, 10000.0, 0), bad);
    CHECK_FAILS(attn_rope_rotate(x, 1, 2, 0, 8, 2, 4, 10000.0, 2), bad);
    CHECK_FAILS(attn_rope_rotate(NULL, 1, 2, 0, 8, 2, 4, 10000.0, 0), bad);
    CHECK_OK(attn_rope_rotate(NULL, 0, 2, 0, 8, 2, 4, 10000.0, 0));
}

int main(void)
{
    RUN_TEST(test_matches_the_complex_product);
    RUN_TEST(test_positions_continue_across_calls);
    RUN_TEST(test_strided_rows_keep_the_rest);
    RUN_TEST(test_bad_input);
    return test_summary();
}
