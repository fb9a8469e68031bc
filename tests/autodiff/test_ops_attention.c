/* The attention operations (ops_attention.c): multi-head attention, additive and Luong
 * attention steps and Luong's key projection. Tape gradients against finite differences
 * (both outputs of an attention step, alone and together), every instruction set against the
 * reference with identical reruns, and argument checks. Why float finite differences suffice:
 * autodiff_testing.h. */
#include "autodiff_testing.h"

#include <string.h>

/* ---- builders ------------------------------------------------------------------------- */

typedef struct mha_args {
    int64_t heads;
    int self, cross;
    attn_attention_mask mask;
    double rope_base; /* > 0: attn_op_multi_head_attention_rotary */
} mha_args;

/* leaves: in_proj_weight, in_proj_bias, out_proj_weight, out_proj_bias, query (, key
 * (, value)). */
static attn_var *build_mha(attn_graph *g, attn_var **x, void *ctx)
{
    const mha_args *a = ctx;
    attn_mha_vars p = {x[0], x[1], x[2], x[3]};
    attn_var *q = x[4], *k = a->self ? x[4] : x[5], *v = a->self ? x[4] : a->cross ? x[5] : x[6];
    attn_var *y;
    if (a->rope_base > 0.0)
        AD_TRY_OP(attn_op_multi_head_attention_rotary(g, &p, a->heads, a->rope_base, q, k, v,
                                                      &a->mask, &y));
    else
        AD_TRY_OP(attn_op_multi_head_attention(g, &p, a->heads, q, k, v, &a->mask, &y));
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
    AD_TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

/* leaves: query, annotations, w_key, w_query, bias, v (, values). The keys are projected
 * with attn_op_linear, as the models do. */
static attn_var *build_additive(attn_graph *g, attn_var **x, void *raw)
{
    const attention_args *a = raw;
    attn_var *keys, *context, *weights;
    AD_TRY_OP(attn_op_linear(g, x[1], x[2], NULL, &keys));
    attn_additive_vars p = {x[3], x[4], x[5]};
    attn_var *values = a->keys_are_values ? keys : x[6];
    AD_TRY_OP(attn_op_additive_attention(g, &p, x[0], keys, values, a->lengths, &context,
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
        AD_TRY_OP(attn_op_luong_project_keys(g, x[1], p.w, &keys));
    AD_TRY_OP(attn_op_luong_attention(g, a->score, a->align, a->window, &p, a->position, x[0], keys,
                                      x[1], a->lengths, &context,
                                      a->outputs == 1 ? NULL : &weights));
    return attention_result(g, a, context, a->outputs == 1 ? NULL : weights);
}

/* ---- the cases ------------------------------------------------------------------------ */

static const int32_t lengths_self[] = {4, 2};
static const int32_t lengths_cross[] = {1, 5};
static mha_args mha_self = {2, 1, 0, {lengths_self, 0}, 0.0};
static mha_args mha_causal = {4, 1, 0, {lengths_self, 1}, 0.0};
static mha_args mha_cross = {2, 0, 1, {lengths_cross, 0}, 0.0};
static mha_args mha_separate = {1, 0, 0, {NULL, 0}, 0.0};
static mha_args mha_rotary = {2, 1, 0, {lengths_self, 1}, 10000.0};
static mha_args mha_rotary_small_base = {4, 1, 0, {NULL, 1}, 3.0};
static const int32_t lengths_2[2] = {5, 3};
static attention_args additive_both = {lengths_2, 3, 0, 0, 0, 0, 0};
static attention_args additive_weights = {lengths_2, 2, 1, 0, 0, 0, 0};
static attention_args additive_context = {NULL, 1, 1, 0, 0, 0, 0};
static attention_args dot_global = {lengths_2, 3, 1, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, 0};
static attention_args general_local_m = {lengths_2,          3, 1, ATTN_LUONG_GENERAL,
                                         ATTN_LUONG_LOCAL_M, 1, 3};
static attention_args concat_global = {lengths_2, 1, 1, ATTN_LUONG_CONCAT, ATTN_LUONG_GLOBAL, 0, 0};
static attention_args general_local_p = {lengths_2,          3, 1, ATTN_LUONG_GENERAL,
                                         ATTN_LUONG_LOCAL_P, 2, 0};

static int make_cases(ad_op_case *cases)
{
    int n = 0;
    cases[n++] = (ad_op_case){"self-attention, padding",
                              build_mha,
                              &mha_self,
                              5,
                              {ad_spec(2, 24, 8, 0), ad_spec(1, 24, 0, 0), ad_spec(2, 8, 8, 0),
                               ad_spec(1, 8, 0, 0), ad_spec(3, 2, 4, 8)},
                              0};
    cases[n++] = (ad_op_case){"causal self-attention, padding",
                              build_mha,
                              &mha_causal,
                              5,
                              {ad_spec(2, 24, 8, 0), ad_spec(1, 24, 0, 0), ad_spec(2, 8, 8, 0),
                               ad_spec(1, 8, 0, 0), ad_spec(3, 2, 4, 8)},
                              0};
    cases[n++] = (ad_op_case){"causal self-attention, rotary positions, padding",
                              build_mha,
                              &mha_rotary,
                              5,
                              {ad_spec(2, 24, 8, 0), ad_spec(1, 24, 0, 0), ad_spec(2, 8, 8, 0),
                               ad_spec(1, 8, 0, 0), ad_spec(3, 2, 4, 8)},
                              0};
    /* base 3 turns by large angles */
    cases[n++] = (ad_op_case){"causal self-attention, rotary positions base 3",
                              build_mha,
                              &mha_rotary_small_base,
                              5,
                              {ad_spec(2, 24, 8, 0), ad_spec(1, 24, 0, 0), ad_spec(2, 8, 8, 0),
                               ad_spec(1, 8, 0, 0), ad_spec(3, 2, 5, 8)},
                              0};
    cases[n++] = (ad_op_case){"cross-attention, key = value",
                              build_mha,
                              &mha_cross,
                              6,
                              {ad_spec(2, 24, 8, 0), ad_spec(1, 24, 0, 0), ad_spec(2, 8, 8, 0),
                               ad_spec(1, 8, 0, 0), ad_spec(3, 2, 3, 8), ad_spec(3, 2, 5, 8)},
                              0};
    cases[n++] = (ad_op_case){"attention, separate query, key, value",
                              build_mha,
                              &mha_separate,
                              7,
                              {ad_spec(2, 12, 4, 0), ad_spec(1, 12, 0, 0), ad_spec(2, 4, 4, 0),
                               ad_spec(1, 4, 0, 0), ad_spec(3, 1, 2, 4), ad_spec(3, 1, 3, 4),
                               ad_spec(3, 1, 3, 4)},
                              0};
    /* Additive: B = 2, S = 5, ds = 3, dh = 4, da = 6, dv = 2. */
    cases[n++] = (ad_op_case){"additive attention, context and weights",
                              build_additive,
                              &additive_both,
                              7,
                              {ad_spec(2, 2, 3, 0), ad_spec(3, 2, 5, 4), ad_spec(2, 6, 4, 0),
                               ad_spec(2, 6, 3, 0), ad_spec(1, 6, 0, 0), ad_spec(1, 6, 0, 0),
                               ad_spec(3, 2, 5, 2)},
                              0};
    cases[n++] = (ad_op_case){"additive attention, weights only, keys are values",
                              build_additive,
                              &additive_weights,
                              6,
                              {ad_spec(2, 2, 3, 0), ad_spec(3, 2, 5, 4), ad_spec(2, 6, 4, 0),
                               ad_spec(2, 6, 3, 0), ad_spec(1, 6, 0, 0), ad_spec(1, 6, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){"additive attention, no padding",
                              build_additive,
                              &additive_context,
                              6,
                              {ad_spec(2, 2, 3, 0), ad_spec(3, 2, 5, 4), ad_spec(2, 6, 4, 0),
                               ad_spec(2, 6, 3, 0), ad_spec(1, 6, 0, 0), ad_spec(1, 6, 0, 0)},
                              0};
    /* Luong: B = 2, S = 5, ds = dk = 4 (dot), dk = 3 otherwise. */
    cases[n++] = (ad_op_case){"Luong dot, global",
                              build_luong,
                              &dot_global,
                              2,
                              {ad_spec(2, 2, 4, 0), ad_spec(3, 2, 5, 4)},
                              0};
    cases[n++] = (ad_op_case){"Luong general, local-m",
                              build_luong,
                              &general_local_m,
                              3,
                              {ad_spec(2, 2, 4, 0), ad_spec(3, 2, 5, 3), ad_spec(2, 4, 3, 0)},
                              0};
    cases[n++] = (ad_op_case){
        "Luong concat (projected keys), global",
        build_luong,
        &concat_global,
        4,
        {ad_spec(2, 2, 4, 0), ad_spec(3, 2, 5, 3), ad_spec(2, 6, 7, 0), ad_spec(1, 6, 0, 0)},
        0};
    cases[n++] = (ad_op_case){"Luong general, local-p",
                              build_luong,
                              &general_local_p,
                              5,
                              {ad_spec(2, 2, 4, 0), ad_spec(3, 2, 5, 3), ad_spec(2, 4, 3, 0),
                               ad_spec(2, 5, 4, 0), ad_spec(1, 5, 0, 0)},
                              0};
    return n;
}

/* Larger, odd sizes for the instruction-set comparison only (the vector loops' tails and
 * threaded batches): B = 17, S = 129, features 7, 64 and 80. They sum over 129 positions,
 * and local-p scales p_t by S = 129: there the kernels promise what tests/attention does,
 * atol 5e-5. */
static const int32_t lengths_129[17] = {129, 1,  0,   64, 100, 7,  129, 33, 2,
                                        90,  17, 128, 5,  60,  80, 3,   129};
static attention_args additive_129 = {lengths_129, 3, 0, 0, 0, 0, 0};
static attention_args concat_local_p_129 = {lengths_129,        3, 1, ATTN_LUONG_CONCAT,
                                            ATTN_LUONG_LOCAL_P, 5, 0};
static attention_args general_local_m_129 = {lengths_129,        3, 1, ATTN_LUONG_GENERAL,
                                             ATTN_LUONG_LOCAL_M, 4, 9};

static int make_large_cases(ad_op_case *cases)
{
    int n = 0;
    cases[n++] = (ad_op_case){"additive attention, B 17, S 129, ds 64, da 80",
                              build_additive,
                              &additive_129,
                              7,
                              {ad_spec(2, 17, 64, 0), ad_spec(3, 17, 129, 7), ad_spec(2, 80, 7, 0),
                               ad_spec(2, 80, 64, 0), ad_spec(1, 80, 0, 0), ad_spec(1, 80, 0, 0),
                               ad_spec(3, 17, 129, 7)},
                              0};
    cases[n++] = (ad_op_case){"Luong concat, local-p, B 17, S 129",
                              build_luong,
                              &concat_local_p_129,
                              6,
                              {ad_spec(2, 17, 64, 0), ad_spec(3, 17, 129, 7), ad_spec(2, 80, 71, 0),
                               ad_spec(1, 80, 0, 0), ad_spec(2, 80, 64, 0), ad_spec(1, 80, 0, 0)},
                              0};
    cases[n++] =
        (ad_op_case){"Luong general, local-m, B 17, S 129",
                     build_luong,
                     &general_local_m_129,
                     3,
                     {ad_spec(2, 17, 64, 0), ad_spec(3, 17, 129, 80), ad_spec(2, 64, 80, 0)},
                     0};
    return n;
}

enum { MAX_CASES = 24 };

static void test_gradients_match_finite_differences(void)
{
    ad_op_case cases[MAX_CASES];
    ad_check_case_gradients(cases, make_cases(cases), 700);
}

static void test_every_isa_matches_the_reference_and_repeats_exactly(void)
{
    ad_op_case cases[MAX_CASES];
    ad_check_cases_across_isas(cases, make_cases(cases), 800, 1e-5);
    ad_check_cases_across_isas(cases, make_large_cases(cases), 850, 5e-5);
}

/* ---- precision ------------------------------------------------------------------------ */

/* Multi-head attention forward and backward (gradient of the query) on a graph of the given
 * precision; returns the output followed by the gradient, 2 * count floats. */
static float *mha_in_precision(attn_precision precision, const float *x_data, const float *in_w,
                               const float *out_w, int64_t count)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_graph_set_precision(g, precision);
    const int64_t x_shape[3] = {2, 70, 16}, in_shape[2] = {48, 16}, out_shape[2] = {16, 16};
    attn_var *x = NULL, *w_in = NULL, *w_out = NULL, *y = NULL;
    CHECK_OK(attn_graph_input(g, 3, x_shape, x_data, 1, &x));
    CHECK_OK(attn_graph_input(g, 2, in_shape, in_w, 0, &w_in));
    CHECK_OK(attn_graph_input(g, 2, out_shape, out_w, 0, &w_out));
    const int32_t lengths[2] = {70, 41};
    attn_attention_mask mask = {lengths, 1};
    attn_mha_vars p = {w_in, NULL, w_out, NULL};
    float *result = test_alloc(2 * (size_t)count * sizeof(float));
    CHECK_OK(attn_op_multi_head_attention(g, &p, 2, x, x, x, &mask, &y));
    memcpy(result, y->value.data, (size_t)count * sizeof(float));
    CHECK_OK(attn_graph_backward_from(g, y, x_data)); /* any fixed upstream gradient */
    memcpy(result + count, x->grad, (size_t)count * sizeof(float));
    attn_graph_destroy(g);
    return result;
}

/* A graph in bf16 runs its attention with bf16 operands: output and gradients move by
 * about bf16's rounding, not more. */
static void test_graph_precision_reaches_attention(void)
{
    enum { COUNT = 2 * 70 * 16 };
    static float x[COUNT], in_w[48 * 16], out_w[16 * 16];
    test_fill_uniform(x, COUNT, -1.0f, 1.0f, 31);
    test_fill_uniform(in_w, 48 * 16, -0.5f, 0.5f, 32);
    test_fill_uniform(out_w, 16 * 16, -0.5f, 0.5f, 33);
    float *fp32 = mha_in_precision(ATTN_PRECISION_FP32, x, in_w, out_w, COUNT);
    float *bf16 = mha_in_precision(ATTN_PRECISION_BF16, x, in_w, out_w, COUNT);
    double out_diff = test_max_abs_diff(fp32, bf16, COUNT);
    double grad_diff = test_max_abs_diff(fp32 + COUNT, bf16 + COUNT, COUNT);
    CHECK(out_diff > 0 && out_diff < 2e-2 * (1 + test_max_abs(fp32, COUNT)),
          "bf16 output differs from fp32 by %.3g", out_diff);
    CHECK(grad_diff > 0 && grad_diff < 2e-2 * (1 + test_max_abs(fp32 + COUNT, COUNT)),
          "bf16 query gradient differs from fp32 by %.3g", grad_diff);
    free(fp32);
    free(bf16);
}

/* In bf16, multi-head attention on a store's parameters multiplies by weights packed once per
 * update (the output projection's, and the input projection's in self-attention): output,
 * input and parameter gradients equal the public kernel's plain bf16 products bit for bit,
 * for self- and cross-attention, and after an update changes the values (and
 * attn_params_values_changed says so) they follow the new weights. */
static void test_bf16_attention_reads_its_weights_packed_once_per_update(void)
{
    enum { B = 2, LQ = 9, LK = 7, E = 16, H = 2 };
    static const char *const names[] = {"in_w", "in_b", "out_w", "out_b"};
    const int64_t shapes[][2] = {{3 * E, E}, {3 * E, 0}, {E, E}, {E, 0}};
    const int ndims[] = {2, 1, 2, 1};
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    for (int i = 0; i < 4; i++)
        CHECK_OK(
            attn_params_add(store, names[i], ndims[i], shapes[i], attn_init_uniform(0.5f), NULL));
    CHECK_OK(attn_params_finalize(store));
    CHECK_OK(attn_params_init(store, 7));
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(store, &graph));
    attn_graph_set_precision(graph, ATTN_PRECISION_BF16);
    static float q[B * LQ * E], kv[B * LK * E], dy[B * LQ * E];
    test_fill_uniform(q, B * LQ * E, -1.0f, 1.0f, 41);
    test_fill_uniform(kv, B * LK * E, -1.0f, 1.0f, 42);
    test_fill_uniform(dy, B * LQ * E, -1.0f, 1.0f, 43);
    attn_sdpa_options options = attn_sdpa_default_options();
    options.precision = ATTN_PRECISION_BF16;
    const attn_mha_params raw = {attn_params_data(store, 0, ATTN_PARAM_VALUES),
                                 NULL,
                                 NULL,
                                 NULL,
                                 attn_params_data(store, 1, ATTN_PARAM_VALUES),
                                 attn_params_data(store, 2, ATTN_PARAM_VALUES),
                                 attn_params_data(store, 3, ATTN_PARAM_VALUES)};
    float *values = attn_params_buffer(store, ATTN_PARAM_VALUES);
    const int64_t numel = attn_params_numel(store);
    for (int update = 0; update < 2; update++) {
        if (update == 1) {
            for (int i = 0; i < 3 * E * E; i++)
                ((float *)raw.in_proj_weight)[i] *= -1.5f;
            for (int i = 0; i < E * E; i++)
                ((float *)raw.out_proj_weight)[i] += 0.25f;
            attn_params_values_changed(store);
        }
        for (int cross = 0; cross <= 1; cross++) {
            const int64_t len_k = cross ? LK : LQ;
            attn_params_zero_grad(store);
            attn_graph_reset(graph);
            attn_mha_vars p;
            CHECK_OK(attn_graph_param(graph, 0, &p.in_proj_weight));
            CHECK_OK(attn_graph_param(graph, 1, &p.in_proj_bias));
            CHECK_OK(attn_graph_param(graph, 2, &p.out_proj_weight));
            CHECK_OK(attn_graph_param(graph, 3, &p.out_proj_bias));
            const int64_t q_shape[3] = {B, LQ, E}, kv_shape[3] = {B, LK, E};
            attn_var *query = NULL, *memory = NULL, *y = NULL;
            CHECK_OK(attn_graph_input(graph, 3, q_shape, q, 1, &query));
            if (cross)
                CHECK_OK(attn_graph_input(graph, 3, kv_shape, kv, 1, &memory));
            else
                memory = query;
            CHECK_OK(attn_op_multi_head_attention(graph, &p, H, query, memory, memory, NULL, &y));
            CHECK_OK(attn_graph_backward_from(graph, y, dy));

            const attn_mha_dims dims = {B, LQ, len_k, E, H, 0, 0, 0.0};
            attn_mha_buffer_sizes sizes;
            CHECK_OK(attn_mha_sizes(&dims, &sizes));
            float *saved = test_alloc(sizes.saved_floats * sizeof(float));
            float *scratch = test_alloc(sizes.backward_scratch_floats * sizeof(float));
            float *out = test_alloc(B * LQ * E * sizeof(float));
            float *grads = calloc((size_t)numel, sizeof(float));
            float *grad_q = calloc(B * LQ * E, sizeof(float));
            float *grad_kv = calloc(B * LK * E, sizeof(float));
            const float *memory_data = cross ? kv : q;
            CHECK_OK(attn_mha_forward(&dims, &raw, q, memory_data, memory_data, &options, out, NULL,
                                      0, saved, NULL));
            attn_mha_grads g = {grads + (raw.in_proj_weight - values),
                                NULL,
                                NULL,
                                NULL,
                                grads + (raw.in_proj_bias - values),
                                grads + (raw.out_proj_weight - values),
                                grads + (raw.out_proj_bias - values)};
            float *grad_memory = cross ? grad_kv : grad_q;
            CHECK_OK(attn_mha_backward(&dims, &raw, q, memory_data, memory_data, &options, saved,
                                       dy, scratch, grad_q, grad_memory, grad_memory, &g));
            const int same_out = memcmp(out, y->value.data, B * LQ * E * sizeof(float)) == 0;
            const int same_dq = memcmp(grad_q, query->grad, B * LQ * E * sizeof(float)) == 0;
            const int same_dkv =
                !cross || memcmp(grad_kv, memory->grad, B * LK * E * sizeof(float)) == 0;
            const int same_params = memcmp(grads, attn_params_buffer(store, ATTN_PARAM_GRADS),
                                           (size_t)numel * sizeof(float)) == 0;
            CHECK(same_out && same_dq && same_dkv && same_params,
                  "update %d, %s: the plain bf16 kernel's output (%d), query gradient (%d), "
                  "memory gradient (%d), parameter gradients (%d)",
                  update, cross ? "cross-attention" : "self-attention", same_out, same_dq, same_dkv,
                  same_params);
            free(saved), free(scratch), free(out), free(grads), free(grad_q), free(grad_kv);
        }
    }
    attn_graph_destroy(graph);
    attn_params_destroy(store);
}

/* ---- argument checks ------------------------------------------------------------------ */

static void test_bad_multi_head_attention_arguments_are_rejected(void)
{
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_var *x = ad_var_of(g, 3, 2, 3, 4), *b = ad_var_of(g, 1, 5, 0, 0), *y = NULL;
    attn_var *in_w = ad_var_of(g, 2, 12, 4, 0), *out_w = ad_var_of(g, 2, 4, 4, 0);
    attn_mha_vars p = {in_w, NULL, out_w, NULL};
    CHECK_OK(attn_op_multi_head_attention(g, &p, 2, x, x, x, NULL, &y));
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 3, x, x, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "num_heads 3") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_multi_head_attention(g, NULL, 2, x, x, x, NULL, &y), bad);
    CHECK_OK(attn_op_multi_head_attention_rotary(g, &p, 2, 10000.0, x, x, x, NULL, &y));
    CHECK_FAILS(attn_op_multi_head_attention_rotary(g, &p, 4, 10000.0, x, x, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "must be even") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_multi_head_attention_rotary(g, &p, 2, 0.0, x, x, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "rope_base") != NULL, "%s", attn_last_error());
    attn_mha_vars wrong = {out_w, NULL, out_w, NULL};
    CHECK_FAILS(attn_op_multi_head_attention(g, &wrong, 2, x, x, x, NULL, &y), bad);
    attn_mha_vars wrong_bias = {in_w, b, out_w, NULL};
    CHECK_FAILS(attn_op_multi_head_attention(g, &wrong_bias, 2, x, x, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, ad_var_of(g, 3, 2, 3, 5), x, NULL, &y),
                bad);
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, ad_var_of(g, 3, 2, 2, 4), NULL, &y),
                bad);
    const int32_t too_long[2] = {3, 4}, negative[2] = {-1, 0};
    attn_attention_mask m = {too_long, 0};
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, x, &m, &y), bad);
    CHECK(strstr(attn_last_error(), "mask->key_lengths[1] = 4") != NULL, "%s", attn_last_error());
    m.key_lengths = negative;
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, x, &m, &y), bad);
    m = (attn_attention_mask){NULL, 2};
    CHECK_FAILS(attn_op_multi_head_attention(g, &p, 2, x, x, x, &m, &y), bad);
    attn_graph_destroy(g);
}

static void test_bad_attention_step_arguments_are_rejected(void)
{
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    /* B = 2, S = 3, ds = 3 (h), keys and values x [2, 3, 4]. */
    attn_var *x = ad_var_of(g, 3, 2, 3, 4), *h = ad_var_of(g, 2, 2, 3, 0), *y = NULL, *y2 = NULL;
    attn_var *wq = ad_var_of(g, 2, 4, 3, 0), *v = ad_var_of(g, 1, 4, 0, 0);
    attn_additive_vars ap = {wq, NULL, v};
    const int32_t key_lengths[2] = {3, 4};
    CHECK_OK(attn_op_additive_attention(g, &ap, h, x, x, NULL, &y, &y2));
    CHECK(y2 != NULL && y2->value.shape[1] == 3, "weights [B, S]");
    CHECK_FAILS(attn_op_additive_attention(g, &ap, h, x, x, key_lengths, &y, NULL), bad);
    CHECK(strstr(attn_last_error(), "key_lengths[1] = 4") != NULL, "%s", attn_last_error());
    attn_additive_vars wrong_v = {wq, NULL, ad_var_of(g, 1, 3, 0, 0)};
    CHECK_FAILS(attn_op_additive_attention(g, &wrong_v, h, x, x, NULL, &y, NULL), bad);
    CHECK(strstr(attn_last_error(), "params->v") != NULL, "%s", attn_last_error());
    attn_additive_vars wrong_bias = {wq, ad_var_of(g, 1, 5, 0, 0), v};
    CHECK_FAILS(attn_op_additive_attention(g, &wrong_bias, h, x, x, NULL, &y, NULL), bad);
    CHECK_FAILS(attn_op_additive_attention(g, &ap, ad_var_of(g, 2, 3, 3, 0), x, x, NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_additive_attention(g, &ap, h, x, ad_var_of(g, 3, 2, 2, 4), NULL, &y, NULL),
                bad);
    CHECK_FAILS(attn_op_additive_attention(g, NULL, h, x, x, NULL, &y, NULL), bad);
    CHECK_FAILS(attn_op_additive_attention(g, &ap, h, x, x, NULL, NULL, NULL), bad);

    attn_var *q4 = ad_var_of(g, 2, 2, 4, 0);
    attn_luong_vars none = {NULL, NULL, NULL, NULL};
    CHECK_OK(attn_op_luong_attention(g, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, &none, 0, q4, x, x,
                                     NULL, &y, NULL));
    CHECK_FAILS(attn_op_luong_attention(g, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, &none, 0, h, x, x,
                                        NULL, &y, NULL),
                bad);
    CHECK(strstr(attn_last_error(), "one size") != NULL, "%s", attn_last_error());
    attn_luong_vars general = {ad_var_of(g, 2, 3, 4, 0), NULL, NULL, NULL};
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
    attn_var *wc = ad_var_of(g, 2, 5, 7, 0);
    CHECK_OK(attn_op_luong_project_keys(g, x, wc, &y));
    CHECK(y->value.shape[2] == 5, "projected keys [B, S, da]");
    CHECK_FAILS(attn_op_luong_project_keys(g, x, ad_var_of(g, 2, 5, 4, 0), &y), bad);
    CHECK_FAILS(attn_op_luong_project_keys(g, h, wc, &y), bad);
    CHECK_FAILS(attn_op_luong_project_keys(g, x, NULL, &y), bad);
    attn_graph_destroy(g);
}

int main(void)
{
    RUN_TEST(test_gradients_match_finite_differences);
    RUN_TEST(test_every_isa_matches_the_reference_and_repeats_exactly);
    RUN_TEST(test_graph_precision_reaches_attention);
    RUN_TEST(test_bf16_attention_reads_its_weights_packed_once_per_update);
    RUN_TEST(test_bad_multi_head_attention_arguments_are_rejected);
    RUN_TEST(test_bad_attention_step_arguments_are_rejected);
    return test_summary();
}
