/* The general-purpose, normalisation and loss operations (ops_basic.c, ops_norm.c,
 * ops_loss.c): tape gradients against finite differences, every instruction set against the
 * reference with identical reruns, and argument checks.
 *
 * Why finite differences of the float forward (and not of a double one): the kernels under
 * the tape already have double-precision references checked against double finite
 * differences in tests/kernels and tests/attention. What these tests must prove is
 * the tape's wiring: that each node hands the right inputs, saved buffers, shapes and scales
 * to the kernels' backward and accumulates into the right gradients (fan-out, aliasing,
 * second outputs). A wiring mistake gives errors of order one. With ATTN_ISA_REFERENCE
 * (kernels compute in double and round once) and a step of 1e-2 on O(1) values, the rounding
 * noise of a float central difference is ~1e-5 and its truncation error ~1e-5 for these
 * smooth functions, so a tolerance of a few 1e-3 catches every wiring mistake with a wide
 * margin and never trips on noise. The same holds for the other operation tests
 * (test_ops_attention.c, test_ops_rnn.c), which share these checks (autodiff_testing.h). */
#include "autodiff_testing.h"

#include <math.h>
#include <string.h>

/* ---- builders ------------------------------------------------------------------------- */

static attn_var *build_linear(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    AD_TRY_OP(attn_op_linear(g, x[0], x[1], ctx ? x[2] : NULL, &y));
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
    AD_TRY_OP(attn_op_embedding(g, x[0], a->rows, a->cols, a->ids, a->stride, a->scale, &y));
    return y;
}

static attn_var *build_add(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y, *z;
    AD_TRY_OP(attn_op_add(g, x[0], x[1], &y));
    AD_TRY_OP(attn_op_add(g, y, x[0], &z)); /* x[0] feeds two nodes */
    return z;
}

static attn_var *build_position(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    AD_TRY_OP(attn_op_add_position_table(g, x[0], ctx, 5, &y));
    return y;
}

static attn_var *build_layer_norm(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y;
    AD_TRY_OP(attn_op_layer_norm(g, x[0], x[1], x[2], 1e-5f, &y));
    return y;
}

static attn_var *build_layer_norm_plain(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y;
    AD_TRY_OP(attn_op_layer_norm(g, x[0], NULL, NULL, 1e-5f, &y));
    return y;
}

static attn_var *build_add_layer_norm(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    /* ctx != NULL: x is its own residual (both gradients land in one buffer). */
    AD_TRY_OP(attn_op_add_layer_norm(g, x[0], ctx ? x[0] : x[3], x[1], x[2], 1e-5f, &y));
    return y;
}

static attn_var *build_layer_norm_without_bias(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y;
    AD_TRY_OP(attn_op_layer_norm(g, x[0], x[1], NULL, 1e-5f, &y));
    return y;
}

static attn_var *build_rms_norm(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    /* ctx != NULL: no gamma */
    AD_TRY_OP(attn_op_rms_norm(g, x[0], ctx ? NULL : x[1], 1e-5f, &y));
    return y;
}

static attn_var *build_mul(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *y;
    AD_TRY_OP(attn_op_mul(g, x[0], x[1], &y));
    return y;
}

static attn_var *build_activation(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    AD_TRY_OP(attn_op_activation(g, x[0], *(const attn_activation *)ctx, &y));
    return y;
}

static attn_var *build_dropout(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *a, *b, *y;
    attn_graph_set_dropout_seed(g, 3, 1);
    AD_TRY_OP(attn_op_dropout(g, x[0], 0.3f, &a));
    AD_TRY_OP(attn_op_dropout(g, x[0], 0.6f, &b));
    AD_TRY_OP(attn_op_add(g, a, b, &y));
    return y;
}

/* x feeds five nodes. The backward reaches x first through the dropout, which writes its
 * gradient (nothing has reached it yet), and then through two layer norms, the activation and
 * the linear layer, which add to it; the fused layer norm writes its residual's gradient (the
 * linear output's) and adds to x's, the plain one adds to x's directly. */
static attn_var *build_mixed_fan_out(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *lin, *act, *fused, *plain, *drop, *sum, *sum2, *y;
    attn_graph_set_dropout_seed(g, 5, 1);
    AD_TRY_OP(attn_op_linear(g, x[0], x[1], NULL, &lin));
    AD_TRY_OP(attn_op_activation(g, x[0], ATTN_ACT_TANH, &act));
    AD_TRY_OP(attn_op_add_layer_norm(g, x[0], lin, NULL, NULL, 1e-5f, &fused));
    AD_TRY_OP(attn_op_layer_norm(g, x[0], NULL, NULL, 1e-5f, &plain));
    AD_TRY_OP(attn_op_dropout(g, x[0], 0.3f, &drop));
    AD_TRY_OP(attn_op_add(g, fused, act, &sum));
    AD_TRY_OP(attn_op_add(g, sum, plain, &sum2));
    AD_TRY_OP(attn_op_add(g, sum2, drop, &y));
    return y;
}

typedef struct loss_args {
    const int32_t *targets;
    float smoothing;
    const float *teacher; /* NULL: attn_op_cross_entropy */
    float teacher_weight;
} loss_args;

static attn_var *build_cross_entropy(attn_graph *g, attn_var **x, void *ctx)
{
    const loss_args *a = ctx;
    attn_var *y;
    if (a->teacher != NULL)
        AD_TRY_OP(attn_op_cross_entropy_with_teacher(g, x[0], a->targets, -1, a->smoothing,
                                                     a->teacher, a->teacher_weight, &y));
    else
        AD_TRY_OP(attn_op_cross_entropy(g, x[0], a->targets, -1, a->smoothing, &y));
    return y;
}

static attn_var *build_mean_pool(attn_graph *g, attn_var **x, void *ctx)
{
    attn_var *y;
    AD_TRY_OP(attn_op_mean_pool(g, x[0], ctx, &y));
    return y;
}

/* concat(a, b, a) and stack(a, c, a): an input used twice gets both slices. */
static attn_var *build_concat(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *pieces[3] = {x[0], x[1], x[0]}, *y;
    AD_TRY_OP(attn_op_concat(g, 3, pieces, &y));
    return y;
}

static attn_var *build_stack(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *steps[3] = {x[0], x[1], x[0]}, *y;
    AD_TRY_OP(attn_op_stack(g, 3, steps, &y));
    return y;
}

static const int32_t gather_positions[3] = {2, -1, 0};

static attn_var *build_gather(attn_graph *g, attn_var **x, void *ctx)
{
    (void)ctx;
    attn_var *a, *b, *y;
    AD_TRY_OP(attn_op_gather_positions(g, x[0], gather_positions, 1, 3, &a));
    AD_TRY_OP(attn_op_gather_positions(g, x[0], gather_positions, 0, 2, &b));
    attn_var *both[2] = {a, b};
    AD_TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

/* ---- the cases ------------------------------------------------------------------------ */

static const int32_t embedding_ids[] = {1, 4, 1, 9, 6, 0, 6, 9, 2, 2, 2, 9};
static embedding_args embedding_ctx = {3, 3, 4, embedding_ids, 1.7f};
static float position_table[5 * 4];
static const attn_activation activations[] = {ATTN_ACT_RELU, ATTN_ACT_GELU,    ATTN_ACT_GELU_TANH,
                                              ATTN_ACT_TANH, ATTN_ACT_SIGMOID, ATTN_ACT_SILU};
static const int32_t ce_targets[] = {0, 4, -1, 2, 3, 1};
static loss_args ce_plain = {ce_targets, 0.0f, NULL, 0.0f};
static loss_args ce_smooth = {ce_targets, 0.1f, NULL, 0.0f};
/* Six rows of five classes: the third row is ignored (its values are never read), some
 * classes have probability 0, the last row is one-hot on a class that is not the target. */
static const float ce_teacher[6 * 5] = {0.5f, 0.25f, 0.125f, 0.125f, 0.0f, 0.1f, 0.2f, 0.3f,
                                        0.0f, 0.4f,  -9.0f,  NAN,    0.0f, 0.0f, 0.0f, 0.0f,
                                        0.0f, 0.9f,  0.05f,  0.05f,  0.2f, 0.2f, 0.2f, 0.2f,
                                        0.2f, 0.0f,  0.0f,   0.0f,   1.0f, 0.0f};
static loss_args ce_taught = {ce_targets, 0.1f, ce_teacher, 0.7f};
static loss_args ce_teacher_only = {ce_targets, 0.0f, ce_teacher, 1.0f};
static const int32_t pool_lengths[] = {4, 1, 0};

static int make_cases(ad_op_case *cases)
{
    int n = 0;
    int one = 1;
    cases[n++] = (ad_op_case){"linear",
                              build_linear,
                              &one,
                              3,
                              {ad_spec(3, 2, 3, 5), ad_spec(2, 4, 5, 0), ad_spec(1, 4, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){"linear without bias",
                              build_linear,
                              NULL,
                              2,
                              {ad_spec(2, 3, 6, 0), ad_spec(2, 1, 6, 0)},
                              0};
    cases[n++] =
        (ad_op_case){"embedding", build_embedding, &embedding_ctx, 1, {ad_spec(2, 10, 6, 0)}, 0};
    cases[n++] = (ad_op_case){
        "add (fan-out)", build_add, NULL, 2, {ad_spec(2, 3, 4, 0), ad_spec(2, 3, 4, 0)}, 0};
    cases[n++] =
        (ad_op_case){"position table", build_position, position_table, 1, {ad_spec(3, 2, 3, 4)}, 0};
    cases[n++] = (ad_op_case){"layer norm",
                              build_layer_norm,
                              NULL,
                              3,
                              {ad_spec(3, 2, 3, 7), ad_spec(1, 7, 0, 0), ad_spec(1, 7, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){
        "layer norm, no affine", build_layer_norm_plain, NULL, 1, {ad_spec(2, 4, 5, 0)}, 0};
    cases[n++] = (ad_op_case){"layer norm without bias",
                              build_layer_norm_without_bias,
                              NULL,
                              2,
                              {ad_spec(2, 4, 5, 0), ad_spec(1, 5, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){
        "rms norm", build_rms_norm, NULL, 2, {ad_spec(3, 2, 3, 7), ad_spec(1, 7, 0, 0)}, 0};
    cases[n++] =
        (ad_op_case){"rms norm, no gamma", build_rms_norm, &one, 1, {ad_spec(2, 4, 5, 0)}, 0};
    cases[n++] =
        (ad_op_case){"mul", build_mul, NULL, 2, {ad_spec(2, 3, 5, 0), ad_spec(2, 3, 5, 0)}, 0};
    cases[n++] = (ad_op_case){
        "add + layer norm",
        build_add_layer_norm,
        NULL,
        4,
        {ad_spec(2, 5, 6, 0), ad_spec(1, 6, 0, 0), ad_spec(1, 6, 0, 0), ad_spec(2, 5, 6, 0)},
        0};
    cases[n++] = (ad_op_case){"add + layer norm, x is the residual",
                              build_add_layer_norm,
                              &one,
                              3,
                              {ad_spec(2, 5, 6, 0), ad_spec(1, 6, 0, 0), ad_spec(1, 6, 0, 0)},
                              0};
    for (int i = 0; i < 6; i++)
        cases[n++] = (ad_op_case){
            "activation", build_activation, (void *)&activations[i], 1, {ad_spec(2, 3, 7, 0)}, 0};
    cases[n++] =
        (ad_op_case){"dropout (two masks)", build_dropout, NULL, 1, {ad_spec(2, 6, 7, 0)}, 1};
    cases[n++] = (ad_op_case){"one input into dropout, two layer norms, activation and linear",
                              build_mixed_fan_out,
                              NULL,
                              2,
                              {ad_spec(3, 2, 3, 4), ad_spec(2, 4, 4, 0)},
                              1};
    cases[n++] =
        (ad_op_case){"cross-entropy", build_cross_entropy, &ce_plain, 1, {ad_spec(3, 2, 3, 5)}, 0};
    cases[n++] = (ad_op_case){
        "cross-entropy, smoothing", build_cross_entropy, &ce_smooth, 1, {ad_spec(2, 6, 5, 0)}, 0};
    cases[n++] = (ad_op_case){"cross-entropy, smoothing, teacher weight 0.7",
                              build_cross_entropy,
                              &ce_taught,
                              1,
                              {ad_spec(3, 2, 3, 5)},
                              0};
    cases[n++] = (ad_op_case){"cross-entropy, the teacher alone",
                              build_cross_entropy,
                              &ce_teacher_only,
                              1,
                              {ad_spec(2, 6, 5, 0)},
                              0};
    cases[n++] = (ad_op_case){"mean pool", build_mean_pool,       (void *)pool_lengths,
                              1,           {ad_spec(3, 3, 4, 5)}, 0};
    cases[n++] = (ad_op_case){"concat with fan-out",
                              build_concat,
                              NULL,
                              2,
                              {ad_spec(3, 3, 1, 4), ad_spec(2, 3, 2, 0)},
                              0};
    cases[n++] = (ad_op_case){
        "stack with fan-out", build_stack, NULL, 2, {ad_spec(2, 3, 4, 0), ad_spec(3, 3, 1, 4)}, 0};
    cases[n++] = (ad_op_case){
        "gather positions (one empty)", build_gather, NULL, 1, {ad_spec(3, 3, 4, 5)}, 0};
    return n;
}

enum { MAX_CASES = 32 };

static void test_gradients_match_finite_differences(void)
{
    ad_op_case cases[MAX_CASES];
    ad_check_case_gradients(cases, make_cases(cases), 100);
}

static void test_every_isa_matches_the_reference_and_repeats_exactly(void)
{
    ad_op_case cases[MAX_CASES];
    ad_check_cases_across_isas(cases, make_cases(cases), 300, 1e-5);
}

/* ---- argument checks ------------------------------------------------------------------ */

static void test_bad_arguments_are_rejected(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_var *x = ad_var_of(g, 3, 2, 3, 4), *w = ad_var_of(g, 2, 5, 4, 0),
             *b = ad_var_of(g, 1, 5, 0, 0);
    attn_var *y = NULL;
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;

    CHECK_FAILS(attn_op_linear(g, x, ad_var_of(g, 2, 5, 3, 0), b, &y), bad);
    CHECK(strstr(attn_last_error(), "attn_op_linear") && strstr(attn_last_error(), "[5, 3]"),
          "message names the op and the shape: %s", attn_last_error());
    CHECK_FAILS(attn_op_linear(g, x, w, ad_var_of(g, 1, 4, 0, 0), &y), bad);
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

    attn_var *gamma = ad_var_of(g, 1, 4, 0, 0), *beta = ad_var_of(g, 1, 4, 0, 0);
    CHECK_FAILS(attn_op_layer_norm(g, x, NULL, beta, 1e-5f, &y), bad);
    CHECK(strstr(attn_last_error(), "beta needs gamma") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_layer_norm(g, x, b, b, 1e-5f, &y), bad);
    CHECK_FAILS(attn_op_layer_norm(g, x, gamma, beta, -1.0f, &y), bad);
    CHECK_FAILS(attn_op_add_layer_norm(g, x, NULL, gamma, beta, 1e-5f, &y), bad);
    CHECK_FAILS(attn_op_add_layer_norm(g, x, w, gamma, beta, 1e-5f, &y), bad);
    CHECK_FAILS(attn_op_activation(g, x, (attn_activation)17, &y), bad);

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

    x = ad_var_of(g, 3, 2, 3, 4);
    const int32_t lengths[2] = {3, 4};
    CHECK_FAILS(attn_op_mean_pool(g, x, lengths, &y), bad);
    CHECK_FAILS(attn_op_mean_pool(g, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_mean_pool(g, ad_var_of(g, 2, 2, 3, 0), lengths, &y), bad);

    attn_var *h = ad_var_of(g, 2, 2, 3, 0), *step = ad_var_of(g, 2, 2, 4, 0);
    attn_var *pieces[2] = {x, ad_var_of(g, 2, 2, 5, 0)};
    CHECK_FAILS(attn_op_concat(g, 2, pieces, &y), bad);
    CHECK(strstr(attn_last_error(), "rows") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_concat(g, 0, pieces, &y), bad);
    CHECK_FAILS(attn_op_concat(g, 1, NULL, &y), bad);
    attn_var *with_null[2] = {x, NULL};
    CHECK_FAILS(attn_op_concat(g, 2, with_null, &y), bad);
    attn_var *steps[2] = {h, step};
    CHECK_FAILS(attn_op_stack(g, 2, steps, &y), bad);
    CHECK(strstr(attn_last_error(), "last dimension") != NULL, "%s", attn_last_error());
    CHECK_OK(attn_op_stack(g, 1, steps, &y));
    CHECK(y->value.ndim == 3 && y->value.shape[1] == 1, "one step stacks to [B, 1, D]");

    const int32_t positions[2] = {0, 3}, early[2] = {-2, 0};
    CHECK_FAILS(attn_op_gather_positions(g, x, positions, 0, 4, &y), bad);
    CHECK(strstr(attn_last_error(), "positions[1] = 3") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_gather_positions(g, x, early, 0, 4, &y), bad);
    const int32_t fine[2] = {0, 2};
    CHECK_FAILS(attn_op_gather_positions(g, x, fine, 2, 3, &y), bad);
    CHECK_FAILS(attn_op_gather_positions(g, x, NULL, 0, 1, &y), bad);
    CHECK_FAILS(attn_op_gather_positions(g, h, fine, 0, 1, &y), bad);
    attn_graph_destroy(g);
}

/* The value of the distillation loss against the formula in double, and the two ways of
 * asking for no teacher, which must give attn_op_cross_entropy's loss to the bit. */
static void test_teacher_loss_is_the_mixture(void)
{
    enum { ROWS = 6, VOCAB = 5 };
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_var *x = ad_var_of(g, 2, ROWS, VOCAB, 0), *y = NULL;
    for (int i = 0; i < ROWS * VOCAB; i++)
        x->value.data[i] = 3.0f * sinf(1.7f * (float)i);
    const double eps = 0.1, w = 0.7;
    double sum = 0.0;
    int counted = 0;
    for (int r = 0; r < ROWS; r++) {
        if (ce_targets[r] == -1)
            continue;
        const float *row = x->value.data + r * VOCAB;
        double z = 0.0, mean_logit = 0.0, teacher = 0.0;
        for (int c = 0; c < VOCAB; c++) {
            z += exp((double)row[c]);
            mean_logit += row[c] / (double)VOCAB;
        }
        const double lse = log(z);
        for (int c = 0; c < VOCAB; c++)
            teacher += ce_teacher[r * VOCAB + c] * (lse - row[c]);
        const double gold = (1.0 - eps) * (lse - row[ce_targets[r]]) + eps * (lse - mean_logit);
        sum += (1.0 - w) * gold + w * teacher;
        counted++;
    }
    CHECK_OK(attn_op_cross_entropy_with_teacher(g, x, ce_targets, -1, (float)eps, ce_teacher,
                                                (float)w, &y));
    const double want = sum / counted;
    CHECK(fabs(y->value.data[0] - want) <= 1e-6 * fabs(want), "loss %.9g, formula %.9g",
          (double)y->value.data[0], want);

    attn_var *plain, *no_teacher, *no_weight;
    CHECK_OK(attn_op_cross_entropy(g, x, ce_targets, -1, 0.1f, &plain));
    CHECK_OK(
        attn_op_cross_entropy_with_teacher(g, x, ce_targets, -1, 0.1f, NULL, 0.5f, &no_teacher));
    CHECK_OK(attn_op_cross_entropy_with_teacher(g, x, ce_targets, -1, 0.1f, ce_teacher, 0.0f,
                                                &no_weight));
    CHECK(no_teacher->value.data[0] == plain->value.data[0] &&
              no_weight->value.data[0] == plain->value.data[0],
          "no teacher and weight 0 are the plain loss: %.9g %.9g %.9g",
          (double)no_teacher->value.data[0], (double)no_weight->value.data[0],
          (double)plain->value.data[0]);

    const float negative[ROWS * VOCAB] = {[7] = -0.25f};
    CHECK_FAILS(attn_op_cross_entropy_with_teacher(g, x, ce_targets, -1, 0.1f, negative, 0.5f, &y),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "probs[1, 2]") != NULL, "the bad entry is named: %s",
          attn_last_error());
    CHECK_FAILS(
        attn_op_cross_entropy_with_teacher(g, x, ce_targets, -1, 0.1f, ce_teacher, 1.5f, &y),
        ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);
}

int main(void)
{
    CHECK_OK(attn_positional_encoding(5, 4, ATTN_PE_INTERLEAVED, position_table));
    RUN_TEST(test_gradients_match_finite_differences);
    RUN_TEST(test_every_isa_matches_the_reference_and_repeats_exactly);
    RUN_TEST(test_bad_arguments_are_rejected);
    RUN_TEST(test_teacher_loss_is_the_mixture);
    return test_summary();
}
