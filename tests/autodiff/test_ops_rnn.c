/* The RNN encoder-decoder operations: tape gradients against finite differences (both
 * outputs of two-output operations, alone and together), every instruction set against the
 * reference with identical reruns, and argument checks.
 *
 * As in test_ops.c, the finite differences are of the float forward at ATTN_ISA_REFERENCE,
 * whose kernels compute in double and round once: the kernels' own tests check their
 * backward against double finite differences, and what is proved here is the tape's wiring
 * (which inputs, saved buffers, strides and second outputs reach each kernel's backward),
 * where a mistake gives errors of order one. */
#include "autodiff_testing.h"

#include <math.h>
#include <string.h>

#define MAX_LEAVES 12

typedef struct op_case {
    const char *name;
    ad_build_fn build;
    const void *ctx;
    int n_leaves;
    ad_leaf_spec leaves[MAX_LEAVES];
} op_case;

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

static void fill_leaves(op_case *c, uint64_t seed)
{
    for (int i = 0; i < c->n_leaves; i++) {
        int64_t n = ad_numel(&c->leaves[i]);
        c->leaves[i].data = test_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        test_fill_uniform(c->leaves[i].data, (size_t)n, -1.0f, 1.0f, seed + (uint64_t)i);
    }
}

static void free_leaves(op_case *c)
{
    for (int i = 0; i < c->n_leaves; i++)
        free(c->leaves[i].data);
}

#define TRY_OP(expr)                                                                               \
    do {                                                                                           \
        if ((expr) != ATTN_OK)                                                                     \
            return NULL;                                                                           \
    } while (0)

/* ---- builders ------------------------------------------------------------------------- */

typedef struct layer_args {
    attn_rnn_cell cell;
    int bidirectional, with_bias;
    const int32_t *lengths;
} layer_args;

/* leaves: x, then per direction weight_ih, weight_hh (, bias_ih, bias_hh). */
static attn_var *build_rnn_layer(attn_graph *g, attn_var **x, void *raw)
{
    const layer_args *a = raw;
    int per = a->with_bias ? 4 : 2;
    attn_rnn_vars fwd = {x[1], x[2], a->with_bias ? x[3] : NULL, a->with_bias ? x[4] : NULL};
    attn_rnn_vars rev = {x[1 + per], x[2 + per], a->with_bias ? x[3 + per] : NULL,
                         a->with_bias ? x[4 + per] : NULL};
    attn_var *y;
    TRY_OP(
        attn_op_rnn_layer(g, a->cell, &fwd, a->bidirectional ? &rev : NULL, x[0], a->lengths, &y));
    return y;
}

typedef struct cell_args {
    attn_rnn_cell cell;
    int with_state; /* h (and c) given */
    int outputs;    /* 1: h' only, 2: c' only, 3: both (LSTM) */
} cell_args;

/* leaves: x, weight_ih, weight_hh, bias_ih, bias_hh (, h (, c)). */
static attn_var *build_rnn_cell(attn_graph *g, attn_var **x, void *raw)
{
    const cell_args *a = raw;
    attn_rnn_vars p = {x[1], x[2], x[3], x[4]};
    attn_var *h = a->with_state ? x[5] : NULL;
    attn_var *c = a->with_state && a->cell == ATTN_RNN_LSTM ? x[6] : NULL;
    attn_var *h_out, *c_out = NULL;
    TRY_OP(attn_op_rnn_cell(g, a->cell, &p, x[0], h, c, &h_out, &c_out));
    if (a->outputs == 1)
        return h_out;
    if (a->outputs == 2)
        return c_out;
    attn_var *both[2] = {h_out, c_out}, *y;
    TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

/* Two steps of a cell, the second fed by the first: the state's gradient flows between. */
static attn_var *build_two_steps(attn_graph *g, attn_var **x, void *raw)
{
    const cell_args *a = raw;
    attn_rnn_vars p = {x[1], x[2], x[3], x[4]};
    attn_var *h, *c = NULL, *h2, *c2 = NULL;
    TRY_OP(attn_op_rnn_cell(g, a->cell, &p, x[0], NULL, NULL, &h, &c));
    TRY_OP(attn_op_rnn_cell(g, a->cell, &p, x[5], h, c, &h2, &c2));
    attn_var *both[2] = {h, h2}, *y;
    TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

/* concat(a, b, a) and stack(a, c, a): an input used twice gets both slices. */
static attn_var *build_concat(attn_graph *g, attn_var **x, void *raw)
{
    (void)raw;
    attn_var *pieces[3] = {x[0], x[1], x[0]}, *y;
    TRY_OP(attn_op_concat(g, 3, pieces, &y));
    return y;
}

static attn_var *build_stack(attn_graph *g, attn_var **x, void *raw)
{
    (void)raw;
    attn_var *steps[3] = {x[0], x[1], x[0]}, *y;
    TRY_OP(attn_op_stack(g, 3, steps, &y));
    return y;
}

static const int32_t gather_positions[3] = {2, -1, 0};

static attn_var *build_gather(attn_graph *g, attn_var **x, void *raw)
{
    (void)raw;
    attn_var *a, *b, *y;
    TRY_OP(attn_op_gather_positions(g, x[0], gather_positions, 1, 3, &a));
    TRY_OP(attn_op_gather_positions(g, x[0], gather_positions, 0, 2, &b));
    attn_var *both[2] = {a, b};
    TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

typedef struct attention_args {
    const int32_t *lengths;
    int outputs; /* 1: context, 2: weights, 3: both */
    int keys_are_values;
    attn_luong_score score;
    attn_luong_align align;
    int64_t window, position;
} attention_args;

static attn_var *attention_result(attn_graph *g, const attention_args *a, attn_var *context,
                                  attn_var *weights)
{
    if (a->outputs == 1)
        return context;
    if (a->outputs == 2)
        return weights;
    attn_var *both[2] = {context, weights}, *y;
    TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

/* leaves: query, annotations, w_key, w_query, bias, v (, values). The keys are projected
 * with attn_op_linear, as the models do. */
static attn_var *build_additive(attn_graph *g, attn_var **x, void *raw)
{
    const attention_args *a = raw;
    attn_var *keys, *context, *weights;
    TRY_OP(attn_op_linear(g, x[1], x[2], NULL, &keys));
    attn_additive_vars p = {x[3], x[4], x[5]};
    attn_var *values = a->keys_are_values ? keys : x[6];
    TRY_OP(attn_op_additive_attention(g, &p, x[0], keys, values, a->lengths, &context,
                                      a->outputs == 1 ? NULL : &weights));
    return attention_result(g, a, context, a->outputs == 1 ? NULL : weights);
}

/* leaves: query, annotations (keys and values), then w (general, concat), v (concat), w_p,
 * v_p (local-p) in that order. */
static attn_var *build_luong(attn_graph *g, attn_var **x, void *raw)
{
    const attention_args *a = raw;
    int next = 2;
    attn_luong_vars p = {NULL, NULL, NULL, NULL};
    if (a->score != ATTN_LUONG_DOT)
        p.w = x[next++];
    if (a->score == ATTN_LUONG_CONCAT)
        p.v = x[next++];
    if (a->align == ATTN_LUONG_LOCAL_P) {
        p.w_p = x[next++];
        p.v_p = x[next++];
    }
    attn_var *keys = x[1], *context, *weights;
    if (a->score == ATTN_LUONG_CONCAT)
        TRY_OP(attn_op_luong_project_keys(g, x[1], p.w, &keys));
    TRY_OP(attn_op_luong_attention(g, a->score, a->align, a->window, &p, a->position, x[0], keys,
                                   x[1], a->lengths, &context, a->outputs == 1 ? NULL : &weights));
    return attention_result(g, a, context, a->outputs == 1 ? NULL : weights);
}

/* ---- the cases ------------------------------------------------------------------------ */

static const int32_t lengths_3[3] = {4, 0, 2};
static const int32_t lengths_2[2] = {5, 3};
static layer_args gru_uni = {ATTN_RNN_GRU, 0, 1, lengths_3};
static layer_args lstm_bi = {ATTN_RNN_LSTM, 1, 1, lengths_3};
static layer_args gru_bi_nobias = {ATTN_RNN_GRU, 1, 0, NULL};
static cell_args gru_cell = {ATTN_RNN_GRU, 1, 1};
static cell_args gru_cell_zero = {ATTN_RNN_GRU, 0, 1};
static cell_args lstm_both = {ATTN_RNN_LSTM, 1, 3};
static cell_args lstm_c_only = {ATTN_RNN_LSTM, 1, 2};
static cell_args lstm_h_only = {ATTN_RNN_LSTM, 0, 1};
static cell_args gru_steps = {ATTN_RNN_GRU, 0, 1};
static cell_args lstm_steps = {ATTN_RNN_LSTM, 0, 1};
static attention_args additive_both = {lengths_2, 3, 0, 0, 0, 0, 0};
static attention_args additive_weights = {lengths_2, 2, 1, 0, 0, 0, 0};
static attention_args additive_context = {NULL, 1, 1, 0, 0, 0, 0};
static attention_args dot_global = {lengths_2, 3, 1, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, 0};
static attention_args general_local_m = {lengths_2,          3, 1, ATTN_LUONG_GENERAL,
                                         ATTN_LUONG_LOCAL_M, 1, 3};
static attention_args concat_global = {lengths_2, 1, 1, ATTN_LUONG_CONCAT, ATTN_LUONG_GLOBAL, 0, 0};
static attention_args general_local_p = {lengths_2,          3, 1, ATTN_LUONG_GENERAL,
                                         ATTN_LUONG_LOCAL_P, 2, 0};

static int make_cases(op_case *cases)
{
    int n = 0;
    /* GRU: G = 3; B = 3, T = 4, I = 3, H = 2. */
    cases[n++] = (op_case){
        "GRU layer, one direction, lengths 4 0 2",
        build_rnn_layer,
        &gru_uni,
        5,
        {spec(3, 3, 4, 3), spec(2, 6, 3, 0), spec(2, 6, 2, 0), spec(1, 6, 0, 0), spec(1, 6, 0, 0)}};
    cases[n++] = (op_case){"LSTM layer, bidirectional, lengths 4 0 2",
                           build_rnn_layer,
                           &lstm_bi,
                           9,
                           {spec(3, 3, 4, 3), spec(2, 8, 3, 0), spec(2, 8, 2, 0), spec(1, 8, 0, 0),
                            spec(1, 8, 0, 0), spec(2, 8, 3, 0), spec(2, 8, 2, 0), spec(1, 8, 0, 0),
                            spec(1, 8, 0, 0)}};
    cases[n++] = (op_case){
        "GRU layer, bidirectional, no bias, full length",
        build_rnn_layer,
        &gru_bi_nobias,
        5,
        {spec(3, 2, 3, 2), spec(2, 9, 2, 0), spec(2, 9, 3, 0), spec(2, 9, 2, 0), spec(2, 9, 3, 0)}};
    cases[n++] = (op_case){"GRU cell",
                           build_rnn_cell,
                           &gru_cell,
                           6,
                           {spec(2, 3, 4, 0), spec(2, 9, 4, 0), spec(2, 9, 3, 0), spec(1, 9, 0, 0),
                            spec(1, 9, 0, 0), spec(2, 3, 3, 0)}};
    cases[n++] = (op_case){
        "GRU cell from zeros, x [B, 1, I]",
        build_rnn_cell,
        &gru_cell_zero,
        5,
        {spec(3, 2, 1, 4), spec(2, 9, 4, 0), spec(2, 9, 3, 0), spec(1, 9, 0, 0), spec(1, 9, 0, 0)}};
    cases[n++] =
        (op_case){"LSTM cell, h' and c'",
                  build_rnn_cell,
                  &lstm_both,
                  7,
                  {spec(2, 3, 4, 0), spec(2, 12, 4, 0), spec(2, 12, 3, 0), spec(1, 12, 0, 0),
                   spec(1, 12, 0, 0), spec(2, 3, 3, 0), spec(2, 3, 3, 0)}};
    cases[n++] =
        (op_case){"LSTM cell, c' only",
                  build_rnn_cell,
                  &lstm_c_only,
                  7,
                  {spec(2, 3, 4, 0), spec(2, 12, 4, 0), spec(2, 12, 3, 0), spec(1, 12, 0, 0),
                   spec(1, 12, 0, 0), spec(2, 3, 3, 0), spec(2, 3, 3, 0)}};
    cases[n++] = (op_case){"LSTM cell from zeros, h' only",
                           build_rnn_cell,
                           &lstm_h_only,
                           5,
                           {spec(2, 3, 4, 0), spec(2, 12, 4, 0), spec(2, 12, 3, 0),
                            spec(1, 12, 0, 0), spec(1, 12, 0, 0)}};
    cases[n++] = (op_case){"GRU cell, two steps",
                           build_two_steps,
                           &gru_steps,
                           6,
                           {spec(2, 2, 4, 0), spec(2, 9, 4, 0), spec(2, 9, 3, 0), spec(1, 9, 0, 0),
                            spec(1, 9, 0, 0), spec(2, 2, 4, 0)}};
    cases[n++] = (op_case){"LSTM cell, two steps (c flows between)",
                           build_two_steps,
                           &lstm_steps,
                           6,
                           {spec(2, 2, 4, 0), spec(2, 12, 4, 0), spec(2, 12, 3, 0),
                            spec(1, 12, 0, 0), spec(1, 12, 0, 0), spec(2, 2, 4, 0)}};
    cases[n++] = (op_case){
        "concat with fan-out", build_concat, NULL, 2, {spec(3, 3, 1, 4), spec(2, 3, 2, 0)}};
    cases[n++] =
        (op_case){"stack with fan-out", build_stack, NULL, 2, {spec(2, 3, 4, 0), spec(3, 3, 1, 4)}};
    cases[n++] =
        (op_case){"gather positions (one empty)", build_gather, NULL, 1, {spec(3, 3, 4, 5)}};
    /* Additive: B = 2, S = 5, ds = 3, dh = 4, da = 6, dv = 2. */
    cases[n++] = (op_case){"additive attention, context and weights",
                           build_additive,
                           &additive_both,
                           7,
                           {spec(2, 2, 3, 0), spec(3, 2, 5, 4), spec(2, 6, 4, 0), spec(2, 6, 3, 0),
                            spec(1, 6, 0, 0), spec(1, 6, 0, 0), spec(3, 2, 5, 2)}};
    cases[n++] = (op_case){"additive attention, weights only, keys are values",
                           build_additive,
                           &additive_weights,
                           6,
                           {spec(2, 2, 3, 0), spec(3, 2, 5, 4), spec(2, 6, 4, 0), spec(2, 6, 3, 0),
                            spec(1, 6, 0, 0), spec(1, 6, 0, 0)}};
    cases[n++] = (op_case){"additive attention, no padding",
                           build_additive,
                           &additive_context,
                           6,
                           {spec(2, 2, 3, 0), spec(3, 2, 5, 4), spec(2, 6, 4, 0), spec(2, 6, 3, 0),
                            spec(1, 6, 0, 0), spec(1, 6, 0, 0)}};
    /* Luong: B = 2, S = 5, ds = dk = 4 (dot), dk = 3 otherwise. */
    cases[n++] = (op_case){
        "Luong dot, global", build_luong, &dot_global, 2, {spec(2, 2, 4, 0), spec(3, 2, 5, 4)}};
    cases[n++] = (op_case){"Luong general, local-m",
                           build_luong,
                           &general_local_m,
                           3,
                           {spec(2, 2, 4, 0), spec(3, 2, 5, 3), spec(2, 4, 3, 0)}};
    cases[n++] =
        (op_case){"Luong concat (projected keys), global",
                  build_luong,
                  &concat_global,
                  4,
                  {spec(2, 2, 4, 0), spec(3, 2, 5, 3), spec(2, 6, 7, 0), spec(1, 6, 0, 0)}};
    cases[n++] = (op_case){
        "Luong general, local-p",
        build_luong,
        &general_local_p,
        5,
        {spec(2, 2, 4, 0), spec(3, 2, 5, 3), spec(2, 4, 3, 0), spec(2, 5, 4, 0), spec(1, 5, 0, 0)}};
    return n;
}

/* Larger, odd sizes for the instruction-set comparison only (the vector loops' tails and
 * threaded batches): B = 17, T = 5 or S = 129, features 7, 64 and 80. */
static const int32_t lengths_17[17] = {5, 1, 0, 3, 5, 2, 4, 5, 1, 3, 5, 5, 0, 2, 4, 3, 5};
static const int32_t lengths_129[17] = {129, 1,  0,   64, 100, 7,  129, 33, 2,
                                        90,  17, 128, 5,  60,  80, 3,   129};
static layer_args gru_bi_17 = {ATTN_RNN_GRU, 1, 1, lengths_17};
static cell_args lstm_cell_80 = {ATTN_RNN_LSTM, 1, 3};
static attention_args additive_129 = {lengths_129, 3, 0, 0, 0, 0, 0};
static attention_args concat_local_p_129 = {lengths_129,        3, 1, ATTN_LUONG_CONCAT,
                                            ATTN_LUONG_LOCAL_P, 5, 0};
static attention_args general_local_m_129 = {lengths_129,        3, 1, ATTN_LUONG_GENERAL,
                                             ATTN_LUONG_LOCAL_M, 4, 9};

static int make_large_cases(op_case *cases)
{
    int n = 0;
    cases[n++] = (op_case){"GRU layer, bidirectional, B 17, H 80",
                           build_rnn_layer,
                           &gru_bi_17,
                           9,
                           {spec(3, 17, 5, 7), spec(2, 240, 7, 0), spec(2, 240, 80, 0),
                            spec(1, 240, 0, 0), spec(1, 240, 0, 0), spec(2, 240, 7, 0),
                            spec(2, 240, 80, 0), spec(1, 240, 0, 0), spec(1, 240, 0, 0)}};
    cases[n++] =
        (op_case){"LSTM cell, B 17, I 64, H 80",
                  build_rnn_cell,
                  &lstm_cell_80,
                  7,
                  {spec(2, 17, 64, 0), spec(2, 320, 64, 0), spec(2, 320, 80, 0), spec(1, 320, 0, 0),
                   spec(1, 320, 0, 0), spec(2, 17, 80, 0), spec(2, 17, 80, 0)}};
    cases[n++] =
        (op_case){"additive attention, B 17, S 129, ds 64, da 80",
                  build_additive,
                  &additive_129,
                  7,
                  {spec(2, 17, 64, 0), spec(3, 17, 129, 7), spec(2, 80, 7, 0), spec(2, 80, 64, 0),
                   spec(1, 80, 0, 0), spec(1, 80, 0, 0), spec(3, 17, 129, 7)}};
    cases[n++] = (op_case){"Luong concat, local-p, B 17, S 129",
                           build_luong,
                           &concat_local_p_129,
                           6,
                           {spec(2, 17, 64, 0), spec(3, 17, 129, 7), spec(2, 80, 71, 0),
                            spec(1, 80, 0, 0), spec(2, 80, 64, 0), spec(1, 80, 0, 0)}};
    cases[n++] = (op_case){"Luong general, local-m, B 17, S 129",
                           build_luong,
                           &general_local_m_129,
                           3,
                           {spec(2, 17, 64, 0), spec(3, 17, 129, 80), spec(2, 64, 80, 0)}};
    return n;
}

enum { MAX_CASES = 40 };

static void test_gradients_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    op_case cases[MAX_CASES];
    int n = make_cases(cases);
    for (int i = 0; i < n; i++) {
        fill_leaves(&cases[i], 500 + 17 * (uint64_t)i);
        int ok = ad_check_gradients(cases[i].name, cases[i].n_leaves, cases[i].leaves,
                                    cases[i].build, (void *)cases[i].ctx, 0, 1e-2, 2e-3, 5e-3);
        CHECK(ok, "%s: tape gradients match finite differences", cases[i].name);
        free_leaves(&cases[i]);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Output, then every leaf's gradient, at one instruction set, as one flat array. */
static float *run_case(op_case *c, attn_isa isa, int64_t *count)
{
    CHECK_OK(attn_set_isa(isa));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    ad_problem problem = {c->name, c->n_leaves, c->leaves, NULL, c->build, (void *)c->ctx, 0, 0};
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
    op_case cases[MAX_CASES];
    const int n_small = make_cases(cases);
    const int n = n_small + make_large_cases(cases + n_small);
    const attn_isa isas[] = {ATTN_ISA_PORTABLE, ATTN_ISA_AVX2, ATTN_ISA_AVX512};
    for (int i = 0; i < n; i++) {
        fill_leaves(&cases[i], 900 + 13 * (uint64_t)i);
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
            char what[160];
            snprintf(what, sizeof what, "%s at %s", cases[i].name, attn_isa_name(isas[k]));
            /* The large cases sum over 129 positions, and local-p scales p_t by S = 129:
             * there the kernels promise what tests/attention does, atol 5e-5. */
            CHECK_ARRAYS_CLOSE(what, fast, as_double, (size_t)count, i < n_small ? 1e-5 : 5e-5,
                               1e-4);
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

/* A batch of 0 sentences runs and gives empty outputs. */
static void test_empty_batches(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    const int64_t x_shape[3] = {0, 4, 3}, wih[2] = {6, 3}, whh[2] = {6, 2};
    attn_var *x, *w_ih, *w_hh, *y = NULL;
    CHECK_OK(attn_graph_input(g, 3, x_shape, NULL, 1, &x));
    CHECK_OK(attn_graph_input(g, 2, wih, NULL, 1, &w_ih));
    CHECK_OK(attn_graph_input(g, 2, whh, NULL, 1, &w_hh));
    attn_rnn_vars p = {w_ih, w_hh, NULL, NULL};
    CHECK_OK(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, &p, x, NULL, &y));
    CHECK(y != NULL && y->value.shape[0] == 0 && y->value.shape[2] == 4, "empty layer output");
    attn_graph_destroy(g);
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
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_var *x = var_of(g, 3, 2, 3, 4), *y = NULL, *y2 = NULL;
    attn_var *wih = var_of(g, 2, 9, 4, 0), *whh = var_of(g, 2, 9, 3, 0), *b = var_of(g, 1, 9, 0, 0);
    attn_rnn_vars p = {wih, whh, b, b};
    const int32_t lengths[2] = {3, 4};

    CHECK_OK(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, &p, x, NULL, &y));
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, NULL, x, lengths, &y), bad);
    CHECK(strstr(attn_last_error(), "lengths[1] = 4") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_LSTM, &p, NULL, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "weight_hh") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_rnn_layer(g, (attn_rnn_cell)7, &p, NULL, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, NULL, NULL, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, NULL, var_of(g, 2, 3, 4, 0), NULL, &y), bad);
    attn_rnn_vars wrong_in = {var_of(g, 2, 9, 5, 0), whh, NULL, NULL};
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &wrong_in, NULL, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "weight_ih") != NULL, "%s", attn_last_error());
    attn_rnn_vars wrong_bias = {wih, whh, var_of(g, 1, 8, 0, 0), NULL};
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &wrong_bias, NULL, x, NULL, &y), bad);
    attn_rnn_vars other_hidden = {var_of(g, 2, 6, 4, 0), var_of(g, 2, 6, 2, 0), NULL, NULL};
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, &other_hidden, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(NULL, ATTN_RNN_GRU, &p, NULL, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, NULL, x, NULL, NULL), bad);

    attn_var *step = var_of(g, 2, 2, 4, 0), *h = var_of(g, 2, 2, 3, 0);
    CHECK_OK(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, h, NULL, &y, &y2));
    CHECK(y2 == NULL, "a GRU gives no cell state");
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, h, h, &y, &y2), bad);
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, var_of(g, 2, 3, 3, 0), NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, var_of(g, 2, 2, 2, 0), NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, NULL, h, NULL, &y, NULL), bad);
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, h, NULL, NULL, NULL), bad);
    attn_rnn_vars lstm = {var_of(g, 2, 12, 4, 0), var_of(g, 2, 12, 3, 0), NULL, NULL};
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_LSTM, &lstm, step, h, h, &y, NULL), bad);
    CHECK(strstr(attn_last_error(), "c_out") != NULL, "%s", attn_last_error());
    CHECK_OK(attn_op_rnn_cell(g, ATTN_RNN_LSTM, &lstm, step, h, h, &y, &y2));

    attn_var *pieces[2] = {x, var_of(g, 2, 2, 5, 0)};
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

    /* Attention: B = 2, S = 3, ds = 3 (h), keys and values x [2, 3, 4]. */
    attn_var *wq = var_of(g, 2, 4, 3, 0), *v = var_of(g, 1, 4, 0, 0);
    attn_additive_vars ap = {wq, NULL, v};
    const int32_t key_lengths[2] = {3, 4};
    CHECK_OK(attn_op_additive_attention(g, &ap, h, x, x, NULL, &y, &y2));
    CHECK(y2 != NULL && y2->value.shape[1] == 3, "weights [B, S]");
    CHECK_FAILS(attn_op_additive_attention(g, &ap, h, x, x, key_lengths, &y, NULL), bad);
    CHECK(strstr(attn_last_error(), "key_lengths[1] = 4") != NULL, "%s", attn_last_error());
    attn_additive_vars wrong_v = {wq, NULL, var_of(g, 1, 3, 0, 0)};
    CHECK_FAILS(attn_op_additive_attention(g, &wrong_v, h, x, x, NULL, &y, NULL), bad);
    CHECK(strstr(attn_last_error(), "params->v") != NULL, "%s", attn_last_error());
    attn_additive_vars wrong_bias2 = {wq, var_of(g, 1, 5, 0, 0), v};
    CHECK_FAILS(attn_op_additive_attention(g, &wrong_bias2, h, x, x, NULL, &y, NULL), bad);
    CHECK_FAILS(attn_op_additive_attention(g, &ap, var_of(g, 2, 3, 3, 0), x, x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_additive_attention(g, &ap, h, x, var_of(g, 3, 2, 2, 4), NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_additive_attention(g, NULL, h, x, x, NULL, &y, NULL), bad);
    CHECK_FAILS(attn_op_additive_attention(g, &ap, h, x, x, NULL, NULL, NULL), bad);

    attn_var *q4 = var_of(g, 2, 2, 4, 0);
    attn_luong_vars none = {NULL, NULL, NULL, NULL};
    CHECK_OK(attn_op_luong_attention(g, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, &none, 0, q4, x, x,
                                     NULL, &y, NULL));
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, &none, 0, h, x, x,
                                        NULL, &y, NULL),
                bad);
    CHECK(strstr(attn_last_error(), "one size") != NULL, "%s", attn_last_error());
    attn_luong_vars general = {var_of(g, 2, 3, 4, 0), NULL, NULL, NULL};
    CHECK_OK(attn_op_luong_attention(g, ATTN_LUONG_GENERAL, ATTN_LUONG_LOCAL_M, 1, &general, 2, h,
                                     x, x, NULL, &y, NULL));
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_GENERAL, ATTN_LUONG_LOCAL_M, 1, &general, -1,
                                        h, x, x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_GENERAL, ATTN_LUONG_LOCAL_M, -1, &general, 0,
                                        h, x, x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_GENERAL, ATTN_LUONG_GLOBAL, 0, &none, 0, h, x,
                                        x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, &general, 0, q4, x,
                                        x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_GENERAL, ATTN_LUONG_LOCAL_P, 2, &general, 0,
                                        h, x, x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_luong_attention(g, (attn_luong_score)5, ATTN_LUONG_GLOBAL, 0, &none, 0, q4,
                                        x, x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, NULL, 0, q4, x, x,
                                        NULL, &y, NULL),
                bad);
    attn_var *wc = var_of(g, 2, 5, 7, 0);
    CHECK_OK(attn_op_luong_project_keys(g, x, wc, &y));
    CHECK(y->value.shape[2] == 5, "projected keys [B, S, da]");
    CHECK_FAILS(attn_op_luong_project_keys(g, x, var_of(g, 2, 5, 4, 0), &y), bad);
    CHECK_FAILS(attn_op_luong_project_keys(g, h, wc, &y), bad);
    CHECK_FAILS(attn_op_luong_project_keys(g, x, NULL, &y), bad);
    attn_graph_destroy(g);
}

int main(void)
{
    RUN_TEST(test_gradients_match_finite_differences);
    RUN_TEST(test_every_isa_matches_the_reference_and_repeats_exactly);
    RUN_TEST(test_empty_batches);
    RUN_TEST(test_bad_arguments_are_rejected);
    return test_summary();
}
