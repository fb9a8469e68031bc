/* attn_argmax against the plain scan it replaces (the first of the largest), on random rows of
 * every length around its block of sixteen and GPT-2's vocabulary, with the largest at each
 * place of a block, ties, NaNs, infinities, and the empty row. */
#include "kernel_testing.h"

static int64_t plain_argmax(int64_t n, const float *x)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static void test_random_rows_of_every_length(void)
{
    enum { LONGEST = 50257 };
    float *x = test_floats(LONGEST);
    for (int64_t n = 1; n <= 80; n++) {
        test_fill_uniform(x, (size_t)n, -3.0f, 3.0f, (uint64_t)n);
        CHECK(attn_argmax(n, x) == plain_argmax(n, x), "n %lld", (long long)n);
    }
    test_fill_uniform(x, LONGEST, -3.0f, 3.0f, 7);
    CHECK(attn_argmax(LONGEST, x) == plain_argmax(LONGEST, x), "n %d", LONGEST);
    /* Rising values: every block beats the last, so each is looked into. */
    for (int64_t i = 0; i < LONGEST; i++)
        x[i] = (float)i;
    CHECK(attn_argmax(LONGEST, x) == LONGEST - 1, "a rising row ends on its last");
    free(x);
}

static void test_the_largest_at_every_place(void)
{
    enum { N = 53 };
    float x[N];
    for (int64_t at = 0; at < N; at++) {
        for (int64_t i = 0; i < N; i++)
            x[i] = -(float)((i * 7) % 11);
        x[at] = 1.0f;
        CHECK(attn_argmax(N, x) == at, "the largest at %lld", (long long)at);
    }
}

static void test_ties_take_the_first(void)
{
    enum { N = 40 };
    float x[N];
    for (int64_t first = 0; first < N; first++) {
        for (int64_t i = 0; i < N; i++)
            x[i] = i >= first ? 2.0f : 0.5f;
        CHECK(attn_argmax(N, x) == first, "a tie from %lld", (long long)first);
    }
}

static void test_nan_infinity_and_empty(void)
{
    enum { N = 37 };
    float x[N];
    for (int64_t i = 0; i < N; i++)
        x[i] = (float)i;
    x[20] = NAN;
    CHECK(attn_argmax(N, x) == N - 1, "a NaN inside never wins");
    x[0] = NAN;
    CHECK(attn_argmax(N, x) == 0, "a NaN first is kept, as the plain scan keeps it");
    for (int64_t i = 0; i < N; i++)
        x[i] = -INFINITY;
    CHECK(attn_argmax(N, x) == 0, "all -inf: the first");
    x[30] = INFINITY;
    CHECK(attn_argmax(N, x) == 30, "+inf wins");
    CHECK(attn_argmax(0, x) == -1 && attn_argmax(-3, x) == -1 && attn_argmax(5, NULL) == -1,
          "no elements: -1");
}

int main(void)
{
    RUN_TEST(test_random_rows_of_every_length);
    RUN_TEST(test_the_largest_at_every_place);
    RUN_TEST(test_ties_take_the_first);
    RUN_TEST(test_nan_infinity_and_empty);
    return test_summary();
}
