/* Every operation's tape backward against finite differences, every instruction set against
 * the reference, bit-identical reruns, and argument checks.
 *
 * Why finite differences of the float forward (and not of a double one): the kernels under
 * the tape already have double-precision references checked against double finite
 * differences in tests/kernels and tests/attention. What this file must prove is the tape's
 * wiring: that each node hands the right inputs, saved buffers, shapes and scales to the
 * kernels' backward and accumulates into the right gradients (fan-out, aliasing, tied
 * inputs). A wiring mistake gives errors of order one. With ATTN_ISA_REFERENCE (kernels
 * compute in double and round once) and a step of 1e-2 on O(1) values, the rounding noise
 * of a float central difference is ~1e-5 and its truncation error ~1e-5 for these smooth
 * functions, so a tolerance of a few 1e-3 catches every wiring mistake with a wide margin
 * and never trips on noise. */
#include "autodiff_testing.h"

#include <math.h>
#include <string.h>

#define MAX_LEAVES 8

typedef struct op_case {
    const char *name;
    ad_build_fn build;
    void *ctx;
    int n_leaves;
    ad_leaf_spec leaves[MAX_LEAVES];
    int training;
} op_case;

/* Fills every leaf with U(-1, 1); with away_from_zero, values also keep |x| >= 0.1 so that
 * ReLU's kink is never inside a finite-difference step. */
static void fill_leaves(op_case *c, uint64_t seed, int away_from_zero)
{
    for (int i = 0; i < c->n_leaves; i++) {
        int64_t n = ad_numel(&c->leaves[i]);
        c->leaves[i].data = test_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        test_fill_uniform(c->leaves[i].data, (size_t)n, -1.0f, 1.0f, seed + (uint64_t)i);
        if (away_from_zero)
            for (int64_t j = 0; j < n; j++)
                if (fabsf(c->leaves[i].data[j]) < 0.1f)
                    c->leaves[i].data[j] += c->leaves[i].data[j] < 0 ? -0.1f : 0.1f;
    }
}

static void free_leaves(op_case *c)
{
    for (int i = 0; i < c->n_leaves; i++)
        free(c->leaves[i].data);
}

static ad_leaf_spec spec(int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    ad_leaf_spec s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    s.shape[0] = d0;
    s.shape[1] = d1;
    s.shape[2] = d2;
    return s;
}

/* ---- builders ------------------------------------------------------------------------- */

#define TRY_OP(expr)                                                                         \
    do {                                                                                     \
        if ((expr) != ATTN_OK)                                                               \
            return NULL;                                                                     \
    } while (0)

static attn_var *build_linear(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    TRY_OP(attn_op_linear(g, x[0], x[1], ctx ? x[2] : NULL, &y));
    return y;
}

typedef struct embedding_args {
    int64_t rows, cols, stride;
    const int32_t *ids;
    float scale;
} embedding_args;

static attn_var *build_embedding(attn_graph *g, attn_var **x, void *ctx)
{
    const embedding_args *a = ctx;
    attn_var *y;
    TRY_OP(attn_op_embedding(g, x[0], a->rows, a->cols, a->ids, a->stride, a->scale, &y));
    return y;
}

static attn_var *build_add(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y, *z;
    TRY_OP(attn_op_add(g, x[0], x[1], &y));
    TRY_OP(attn_op_add(g, y, x[0], &z)); /* x[0] feeds two nodes */
    return z;
}

static attn_var *build_position(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    TRY_OP(attn_op_add_position_table(g, x[0], ctx, 5, &y));
    return y;
}

static attn_var *build_layer_norm(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y;
    TRY_OP(attn_op_layer_norm(g, x[0], x[1], x[2], 1e-5f, &y));
    return y;
}

static attn_var *build_layer_norm_plain(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y;
    TRY_OP(attn_op_layer_norm(g, x[0], NULL, NULL, 1e-5f, &y));
    return y;
}

static attn_var *build_add_layer_norm(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    /* ctx != NULL: x is its own residual (both gradients land in one buffer). */
    TRY_OP(attn_op_add_layer_norm(g, x[0], ctx ? x[0] : x[3], x[1], x[2], 1e-5f, &y));
    return y;
}

static attn_var *build_activation(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    TRY_OP(attn_op_activation(g, x[0], *(const attn_activation *)ctx, &y));
    return y;
}

static attn_var *build_dropout(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *a, *b, *y;
    attn_graph_set_dropout_seed(g, 3, 1);
    TRY_OP(attn_op_dropout(g, x[0], 0.3f, &a));
    TRY_OP(attn_op_dropout(g, x[0], 0.6f, &b));
    TRY_OP(attn_op_add(g, a, b, &y));
    return y;
}

typedef struct mha_args {
    int64_t heads;
    int self, cross;
    attn_attention_mask mask;
} mha_args;

static attn_var *build_mha(attn_graph *g, attn_var **x, void *ctx)
{
    const mha_args *a = ctx;
    attn_mha_vars p = {x[0], x[1], x[2], x[3]};
    attn_var *q = x[4], *k = a->self ? x[4] : x[5], *v = a->self ? x[4] : a->cross ? x[5] : x[6];
    attn_var *y;
    TRY_OP(attn_op_multi_head_attention(g, &p, a->heads, q, k, v, &a->mask, &y));
    return y;
}

typedef struct loss_args {
    const int32_t *targets;
    float smoothing;
} loss_args;

static attn_var *build_cross_entropy(attn_graph *g, attn_var **x, void *ctx)
{
    const loss_args *a = ctx;
    attn_var *y;
    TRY_OP(attn_op_cross_entropy(g, x[0], a->targets, -1, a->smoothing, &y));
    return y;
}

static attn_var *build_mean_pool(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    TRY_OP(attn_op_mean_pool(g, x[0], ctx, &y));
    return y;
}

/* ---- the cases ------------------------------------------------------------------------ */

static const int32_t embedding_ids[] = {1, 4, 1, 9, 6, 0, 6, 9, 2, 2, 2, 9};
static embedding_args embedding_ctx = {3, 3, 4, embedding_ids, 1.7f};
static float position_table[5 * 4];
static const attn_activation activations[] = {ATTN_ACT_RELU, ATTN_ACT_GELU, ATTN_ACT_GELU_TANH,
                                              ATTN_ACT_TANH, ATTN_ACT_SIGMOID};
static const int32_t lengths_self[] = {4, 2};
static const int32_t lengths_cross[] = {1, 5};
static mha_args mha_self = {2, 1, 0, {lengths_self, 0}};
static mha_args mha_causal = {4, 1, 0, {lengths_self, 1}};
static mha_args mha_cross = {2, 0, 1, {lengths_cross, 0}};
static mha_args mha_separate = {1, 0, 0, {NULL, 0}};
static const int32_t ce_targets[] = {0, 4, -1, 2, 3, 1};
static loss_args ce_plain = {ce_targets, 0.0f};
static loss_args ce_smooth = {ce_targets, 0.1f};
static const int32_t pool_lengths[] = {4, 1, 0};

static int make_cases(op_case *cases)
{
    int n = 0;
    int one = 1;
    cases[n++] = (op_case){"linear", build_linear, &one, 3,
                           {spec(3, 2, 3, 5), spec(2, 4, 5, 0), spec(1, 4, 0, 0)}, 0};
    cases[n++] = (op_case){"linear without bias", build_linear, NULL, 2,
                           {spec(2, 3, 6, 0), spec(2, 1, 6, 0)}, 0};
    cases[n++] = (op_case){"embedding", build_embedding, &embedding_ctx, 1, {spec(2, 10, 6, 0)}, 0};
    cases[n++] = (op_case){"add (fan-out)", build_add, NULL, 2, {spec(2, 3, 4, 0), spec(2, 3, 4, 0)}, 0};
    cases[n++] = (op_case){"position table", build_position, position_table, 1, {spec(3, 2, 3, 4)}, 0};
    cases[n++] = (op_case){"layer norm", build_layer_norm, NULL, 3,
                           {spec(3, 2, 3, 7), spec(1, 7, 0, 0), spec(1, 7, 0, 0)}, 0};
    cases[n++] = (op_case){"layer norm, no affine", build_layer_norm_plain, NULL, 1, {spec(2, 4, 5, 0)}, 0};
    cases[n++] = (op_case){"add + layer norm", build_add_layer_norm, NULL, 4,
                           {spec(2, 5, 6, 0), spec(1, 6, 0, 0), spec(1, 6, 0, 0), spec(2, 5, 6, 0)}, 0};
    cases[n++] = (op_case){"add + layer norm, x is the residual", build_add_layer_norm, &one, 3,
                           {spec(2, 5, 6, 0), spec(1, 6, 0, 0), spec(1, 6, 0, 0)}, 0};
    for (int i = 0; i < 5; i++)
        cases[n++] = (op_case){"activation", build_activation, (void *)&activations[i], 1,
                               {spec(2, 3, 7, 0)}, 0};
    cases[n++] = (op_case){"dropout (two masks)", build_dropout, NULL, 1, {spec(2, 6, 7, 0)}, 1};
    cases[n++] = (op_case){"self-attention, padding", build_mha, &mha_self, 5,
                           {spec(2, 24, 8, 0), spec(1, 24, 0, 0), spec(2, 8, 8, 0),
                            spec(1, 8, 0, 0), spec(3, 2, 4, 8)}, 0};
    cases[n++] = (op_case){"causal self-attention, padding", build_mha, &mha_causal, 5,
                           {spec(2, 24, 8, 0), spec(1, 24, 0, 0), spec(2, 8, 8, 0),
                            spec(1, 8, 0, 0), spec(3, 2, 4, 8)}, 0};
    cases[n++] = (op_case){"cross-attention, key = value", build_mha, &mha_cross, 6,
                           {spec(2, 24, 8, 0), spec(1, 24, 0, 0), spec(2, 8, 8, 0),
                            spec(1, 8, 0, 0), spec(3, 2, 3, 8), spec(3, 2, 5, 8)}, 0};
    cases[n++] = (op_case){"attention, separate query, key, value", build_mha, &mha_separate, 7,
                           {spec(2, 12, 4, 0), spec(1, 12, 0, 0), spec(2, 4, 4, 0),
                            spec(1, 4, 0, 0), spec(3, 1, 2, 4), spec(3, 1, 3, 4),
                            spec(3, 1, 3, 4)}, 0};
    cases[n++] = (op_case){"cross-entropy", build_cross_entropy, &ce_plain, 1, {spec(3, 2, 3, 5)}, 0};
    cases[n++] = (op_case){"cross-entropy, smoothing", build_cross_entropy, &ce_smooth, 1,
                           {spec(2, 6, 5, 0)}, 0};
    cases[n++] = (op_case){"mean pool", build_mean_pool, (void *)pool_lengths, 1, {spec(3, 3, 4, 5)}, 0};
    return n;
}

static void test_gradients_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    CHECK_OK(attn_positional_encoding(5, 4, ATTN_PE_INTERLEAVED, position_table));
    op_case cases[32];
    int n = make_cases(cases);
    for (int i = 0; i < n; i++) {
        fill_leaves(&cases[i], 100 + (uint64_t)i, 1);
        int ok = ad_check_gradients(cases[i].name, cases[i].n_leaves, cases[i].leaves,
                                    cases[i].build, cases[i].ctx, cases[i].training, 1e-2, 2e-3,
                                    5e-3);
        CHECK(ok, "%s: tape gradients match finite differences", cases[i].name);
        free_leaves(&cases[i]);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Output, then the gradient of every leaf, at one instruction set, as one flat array. */
static float *run_case(op_case *c, attn_isa isa, int64_t *count)
{
    CHECK_OK(attn_set_isa(isa));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_graph_set_training(g, c->training);
    ad_problem problem = {c->name, c->n_leaves, c->leaves, NULL, c->build, c->ctx, c->training, 0};
    attn_var *out = ad_forward(g, &problem);
    CHECK(out != NULL, "%s runs at %s", c->name, attn_isa_name(isa));
    int64_t n_out = out ? attn_tensor_numel(&out->value) : 0, total = n_out;
    for (int i = 0; i < c->n_leaves; i++)
        total += ad_numel(&c->leaves[i]);
    float *flat = test_alloc((size_t)total * sizeof(float) + 1);
    memset(flat, 0, (size_t)total * sizeof(float));
    if (out != NULL)
        memcpy(flat, out->value.data, (size_t)n_out * sizeof(float));

    float *weights = NULL;
    ad_array arrays[AD_MAX_LEAVES];
    int n_arrays = ad_tape_gradients(g, &problem, 5, &weights, arrays);
    CHECK(n_arrays == c->n_leaves, "%s backward runs at %s", c->name, attn_isa_name(isa));
    int64_t at = n_out;
    for (int i = 0; i < n_arrays; i++) {
        memcpy(flat + at, arrays[i].grad, (size_t)arrays[i].numel * sizeof(float));
        at += arrays[i].numel;
        free(arrays[i].grad);
    }
    free(weights);
    attn_graph_destroy(g);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    *count = total;
    return flat;
}

static void test_every_isa_matches_the_reference_and_repeats_exactly(void)
{
    CHECK_OK(attn_set_num_threads(2));
    op_case cases[32];
    int n = make_cases(cases);
    const attn_isa isas[] = {ATTN_ISA_PORTABLE, ATTN_ISA_AVX2, ATTN_ISA_AVX512};
    for (int i = 0; i < n; i++) {
        fill_leaves(&cases[i], 300 + (uint64_t)i, 1);
        int64_t count;
        float *reference = run_case(&cases[i], ATTN_ISA_REFERENCE, &count);
        double *as_double = test_alloc((size_t)count * sizeof(double) + 1);
        for (int64_t j = 0; j < count; j++)
            as_double[j] = reference[j];
        for (int k = 0; k < 3; k++) {
            if (!attn_isa_supported(isas[k]))
                continue;
            int64_t again;
            float *fast = run_case(&cases[i], isas[k], &again);
            float *twice = run_case(&cases[i], isas[k], &again);
            char what[128];
            snprintf(what, sizeof what, "%s at %s", cases[i].name, attn_isa_name(isas[k]));
            CHECK_ARRAYS_CLOSE(what, fast, as_double, (size_t)count, 1e-5, 1e-4);
            CHECK(memcmp(fast, twice, (size_t)count * sizeof(float)) == 0,
                  "%s: two runs give identical bits", what);
            free(fast);
            free(twice);
        }
        free(as_double);
        free(reference);
        free_leaves(&cases[i]);
    }
    CHECK_OK(attn_set_num_threads(0));
}

/* ---- argument checks ------------------------------------------------------------------ */

static attn_var *var_of(attn_graph *g, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    const int64_t shape[3] = {d0, d1, d2};
    attn_var *v = NULL;
    CHECK_OK(attn_graph_input(g, ndim, shape, NULL, 1, &v));
    return v;
}

static void test_bad_arguments_are_rejected(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_var *x = var_of(g, 3, 2, 3, 4), *w = var_of(g, 2, 5, 4, 0), *b = var_of(g, 1, 5, 0, 0);
    attn_var *y = NULL;
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;

    CHECK_FAILS(attn_op_linear(g, x, var_of(g, 2, 5, 3, 0), b, &y), bad);
    CHECK(strstr(attn_last_error(), "attn_op_linear") && strstr(attn_last_error(), "[5, 3]"),
          "message names the op and the shape: %s", attn_last_error());
    CHECK_FAILS(attn_op_linear(g, x, w, var_of(g, 1, 4, 0, 0), &y), bad);
    CHECK_FAILS(attn_op_linear(g, NULL, w, b, &y), bad);
    CHECK_FAILS(attn_op_linear(g, x, NULL, b, &y), bad);
    CHECK_FAILS(attn_op_linear(NULL, x, w, b, &y), bad);
    CHECK_FAILS(attn_op_linear(g, x, w, b, NULL), bad);

    const int32_t ids[4] = {0, 1, 5, 2};
    CHECK_FAILS(attn_op_embedding(g, w, 2, 2, ids, 2, 1.0f, &y), bad);
    CHECK(strstr(attn_last_error(), "= 5") != NULL, "bad id named: %s", attn_last_error());
    CHECK_FAILS(attn_op_embedding(g, w, 2, 2, ids, 1, 1.0f, &y), bad);
    CHECK_FAILS(attn_op_embedding(g, w, 2, 2, NULL, 2, 1.0f, &y), bad);
    CHECK_FAILS(attn_op_embedding(g, w, -1, 2, ids, 2, 1.0f, &y), bad);
    CHECK_FAILS(attn_op_embedding(g, b, 1, 1, ids, 1, 1.0f, &y), bad);
    CHECK_FAILS(attn_op_embedding(g, w, 1, 1, ids, 1, NAN, &y), bad);
    CHECK_OK(attn_op_embedding(g, w, 0, 3, NULL, 3, 1.0f, &y));
    CHECK(y->value.shape[0] == 0 && y->value.shape[2] == 4, "zero rows are fine");

    CHECK_FAILS(attn_op_add(g, x, w, &y), bad);
    float table[3 * 4] = {0};
    CHECK_FAILS(attn_op_add_position_table(g, x, table, 2, &y), bad);
    CHECK(strstr(attn_last_error(), "exceeds") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_add_position_table(g, w, table, 3, &y), bad);
    CHECK_FAILS(attn_op_add_position_table(g, x, NULL, 3, &y), bad);

    attn_var *gamma = var_of(g, 1, 4, 0, 0), *beta = var_of(g, 1, 4, 0, 0);
    CHECK_FAILS(attn_op_layer_norm(g, x, gamma, NULL, 1e-5f, &y), bad);
    CHECK_FAILS(attn_op_layer_norm(g, x, b, b, 1e-5f, &y), bad);
    CHECK_FAILS(attn_op_layer_norm(g, x, gamma, beta, -1.0f, &y), bad);
    CHECK_FAILS(attn_op_add_layer_norm(g, x, NULL, gamma, beta, 1e-5f, &y), bad);
    CHECK_FAILS(attn_op_add_layer_norm(g, x, w, gamma, beta, 1e-5f, &y), bad);
    CHECK_FAILS(attn_op_activation(g, x, (attn_activation)17, &y), bad);

    attn_var *in_w = var_of(g, 2, 12, 4, 0), *out_w = var_of(g, 2, 4, 4, 0);
    attn_mha_vars p = {in_w, NULL, out_w, NULL};
    CHECK_OK(attn_op_multi_head_attention(g, &p, 2, x, x, x, NULL, &y));
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 3, x, x, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "num_heads 3") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_multi_head_attention(g, NULL, 2, x, x, x, NULL, &y), bad);
    attn_mha_vars wrong = {out_w, NULL, out_w, NULL};
    CHECK_FAILS(attn_op_multi_head_attention(g, &wrong, 2, x, x, x, NULL, &y), bad);
    attn_mha_vars wrong_bias = {in_w, b, out_w, NULL};
    CHECK_FAILS(attn_op_multi_head_attention(g, &wrong_bias, 2, x, x, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, var_of(g, 3, 2, 3, 5), x, NULL, &y), bad);
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, var_of(g, 3, 2, 2, 4), NULL, &y), bad);
    const int32_t too_long[2] = {3, 4}, negative[2] = {-1, 0};
    attn_attention_mask m = {too_long, 0};
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, x, &m, &y), bad);
    CHECK(strstr(attn_last_error(), "key_lengths[1] = 4") != NULL, "%s", attn_last_error());
    m.key_lengths = negative;
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, x, &m, &y), bad);
    m = (attn_attention_mask){NULL, 2};
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, x, &m, &y), bad);

    const int32_t targets[6] = {0, 1, 2, 3, -1, 4};
    CHECK_FAILS(attn_op_cross_entropy(g, x, targets, -1, 0.0f, &y), bad);
    CHECK(strstr(attn_last_error(), "targets[5] = 4") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_cross_entropy(g, x, targets, -1, 1.5f, &y), bad);
    CHECK_FAILS(attn_op_cross_entropy(g, x, NULL, -1, 0.0f, &y), bad);
    const int32_t ignored[6] = {-1, -1, -1, -1, -1, -1};
    CHECK_OK(attn_op_cross_entropy(g, x, ignored, -1, 0.0f, &y));
    CHECK(y->value.data[0] == 0.0f, "nothing counted: loss 0");
    CHECK_OK(attn_graph_backward(g, y));
    int zero = 1;
    for (int i = 0; i < 24; i++)
        zero &= x->grad == NULL || x->grad[i] == 0.0f;
    CHECK(zero, "nothing counted: zero gradients");
    attn_graph_reset(g);

    x = var_of(g, 3, 2, 3, 4);
    const int32_t lengths[2] = {3, 4};
    CHECK_FAILS(attn_op_mean_pool(g, x, lengths, &y), bad);
    CHECK_FAILS(attn_op_mean_pool(g, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_mean_pool(g, var_of(g, 2, 2, 3, 0), lengths, &y), bad);
    attn_graph_destroy(g);
}

int main(void)
{
    RUN_TEST(test_gradients_match_finite_differences);
    RUN_TEST(test_every_isa_matches_the_reference_and_repeats_exactly);
    RUN_TEST(test_bad_arguments_are_rejected);
    return test_summary();
}
