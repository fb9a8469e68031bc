/* Embedding lookup: forward and backward against direct loops on every instruction set,
 * repeated ids summing in a fixed order whatever the thread count, out-of-range ids and
 * other bad arguments. */
#include "kernel_testing.h"

static int32_t *make_ids(int64_t tokens, int64_t vocab, uint64_t seed)
{
    int32_t *ids = test_alloc((size_t)tokens * sizeof(int32_t));
    float *u = test_floats((size_t)tokens);
    test_fill_uniform(u, (size_t)tokens, 0.0f, 1.0f, seed);
    for (int64_t t = 0; t < tokens; t++) {
        int64_t id = (int64_t)(u[t] * (float)vocab);
        ids[t] = (int32_t)(id < vocab ? id : vocab - 1);
    }
    free(u);
    return ids;
}

static void check_sizes(int64_t tokens, int64_t dim)
{
    const int64_t vocab = 50; /* fewer ids than tokens: many repeats */
    const float scale = 1.7f;
    const size_t table_n = (size_t)(vocab * dim), out_n = (size_t)(tokens * dim);
    float *table = test_floats(table_n), *out = test_floats(out_n), *dout = test_floats(out_n);
    float *dtable = test_floats(table_n), *expected_out = test_floats(out_n);
    float *expected_dtable = test_floats(table_n), *dtable_start = test_floats(table_n);
    double *exact = test_doubles(table_n), *bound = test_doubles(table_n);
    int32_t *ids = make_ids(tokens, vocab, (uint64_t)(tokens * 31 + dim));
    test_fill_uniform(table, table_n, -1.0f, 1.0f, 111);
    test_fill_uniform(dout, out_n, -1.0f, 1.0f, 112);
    test_fill_uniform(dtable_start, table_n, -1.0f, 1.0f, 113);

    /* The contract, as direct loops: rows copied and scaled; gradients added token by
     * token, each addition rounded once. */
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t j = 0; j < dim; j++)
            expected_out[t * dim + j] = table[ids[t] * dim + j] * scale;
    memcpy(expected_dtable, dtable_start, table_n * sizeof(float));
    for (size_t i = 0; i < table_n; i++) {
        exact[i] = dtable_start[i];
        bound[i] = 0.0;
    }
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t j = 0; j < dim; j++) {
            size_t i = (size_t)(ids[t] * dim + j);
            double g = (double)scale * dout[t * dim + j];
            expected_dtable[i] = (float)((double)expected_dtable[i] + g);
            exact[i] += g;
            bound[i] += TEST_FLOAT_EPS * fabs(exact[i]); /* one rounding per addition */
        }
    for (size_t i = 0; i < table_n; i++)
        bound[i] += 1e-30;

    for (int k = 0; k < TEST_ISA_COUNT; k++) {
        if (!test_use_isa(test_isas[k]))
            continue;
        const char *isa = attn_isa_name(test_isas[k]);
        for (int threads = 1; threads <= 2; threads++) {
            CHECK_OK(attn_set_num_threads(threads));
            CHECK_OK(attn_embedding_forward(tokens, vocab, dim, table, ids, scale, out));
            CHECK(test_same_bits(out, expected_out, out_n),
                  "%s %d threads %lldx%lld: out[t] = table[ids[t]] * scale", isa, threads,
                  (long long)tokens, (long long)dim);
            memcpy(dtable, dtable_start, table_n * sizeof(float));
            CHECK_OK(attn_embedding_backward(tokens, vocab, dim, ids, scale, dout, dtable));
            CHECK(test_same_bits(dtable, expected_dtable, table_n),
                  "%s %d threads %lldx%lld: gradients summed in token order", isa, threads,
                  (long long)tokens, (long long)dim);
            CHECK_WITHIN_BOUNDS(isa, dtable, exact, bound, table_n);
        }
    }
    CHECK_OK(attn_set_num_threads(0));
    attn_set_isa(ATTN_ISA_AUTO);
    free(table), free(out), free(dout), free(dtable), free(expected_out);
    free(expected_dtable), free(dtable_start), free(exact), free(bound), free(ids);
}

static void test_forward_and_backward(void)
{
    const int64_t token_counts[] = {1, 3, 17, 129, 1000};
    for (size_t i = 0; i < sizeof token_counts / sizeof token_counts[0]; i++)
        for (int j = 0; j < TEST_COL_COUNTS; j++)
            check_sizes(token_counts[i], test_col_counts[j]);
}

static void test_out_of_range_ids_are_errors(void)
{
    float table[4 * 3] = {0}, out[3 * 3], dout[3 * 3] = {0}, dtable[4 * 3] = {0};
    const int32_t bad[] = {4, -1, 1000000};
    for (int b = 0; b < 3; b++) {
        int32_t ids[3] = {0, 3, bad[b]};
        char expected[40];
        snprintf(expected, sizeof expected, "ids[2] = %d", (int)bad[b]);
        CHECK_FAILS(attn_embedding_forward(3, 4, 3, table, ids, 1.0f, out),
                    ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), expected) != NULL, "message '%s' names '%s'",
              attn_last_error(), expected);
        CHECK_FAILS(attn_embedding_backward(3, 4, 3, ids, 1.0f, dout, dtable),
                    ATTN_ERR_INVALID_ARGUMENT);
        CHECK(strstr(attn_last_error(), expected) != NULL, "message '%s' names '%s'",
              attn_last_error(), expected);
    }
    int zero = 1;
    for (int i = 0; i < 12; i++)
        zero &= dtable[i] == 0.0f;
    CHECK(zero, "a rejected backward writes nothing");
}

static void test_rejects_bad_arguments(void)
{
    float table[6] = {0}, out[6], dtable[6] = {0};
    int32_t ids[2] = {0, 1};
    CHECK_FAILS(attn_embedding_forward(2, 0, 3, table, ids, 1.0f, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "vocab") != NULL, "names vocab: %s", attn_last_error());
    CHECK_FAILS(attn_embedding_forward(-2, 2, 3, table, ids, 1.0f, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_forward(2, 2, -3, table, ids, 1.0f, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_forward(2, 2, 3, NULL, ids, 1.0f, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_forward(2, 2, 3, table, NULL, 1.0f, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_forward(2, 2, 3, table, ids, 1.0f, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_backward(2, 0, 3, ids, 1.0f, out, dtable),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_backward(2, 2, 3, NULL, 1.0f, out, dtable),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_backward(2, 2, 3, ids, 1.0f, NULL, dtable),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_embedding_backward(2, 2, 3, ids, 1.0f, out, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_embedding_forward(0, 2, 3, NULL, NULL, 1.0f, NULL));
    CHECK_OK(attn_embedding_backward(0, 2, 3, NULL, 1.0f, NULL, NULL));
    CHECK_OK(attn_embedding_forward(2, 2, 0, NULL, ids, 1.0f, NULL));
}

int main(void)
{
    RUN_TEST(test_forward_and_backward);
    RUN_TEST(test_out_of_range_ids_are_errors);
    RUN_TEST(test_rejects_bad_arguments);
    return test_summary();
}
