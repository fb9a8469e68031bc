/* The RNN modules: PyTorch's parameter names and shapes, PyTorch's initial ranges, stacked
 * bidirectional layers and decoder steps through the store against finite differences, the
 * attention modules' keys, and argument checks. */
#include "../autodiff/autodiff_testing.h"

#include <math.h>
#include <string.h>

static attn_params *new_store(void)
{
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    return store;
}

static int shape_is(attn_params *store, const char *name, int ndim, int64_t d0, int64_t d1)
{
    attn_param_id id;
    attn_param_info info;
    if (attn_params_find(store, name, &id) != ATTN_OK ||
        attn_params_info(store, id, &info) != ATTN_OK) {
        attn_clear_error();
        return 0;
    }
    return info.ndim == ndim && info.shape[0] == d0 && (ndim == 1 || info.shape[1] == d1);
}

static void test_names_and_shapes_follow_pytorch(void)
{
    attn_params *store = new_store();
    attn_nn_rnn_layer l0, l1;
    attn_nn_rnn_cell cell;
    attn_nn_additive_attention additive;
    attn_nn_luong_attention concat, general;
    CHECK_OK(attn_nn_rnn_layer_register(&l0, store, "encoder", ATTN_RNN_LSTM, 0, 5, 3, 1));
    CHECK_OK(attn_nn_rnn_layer_register(&l1, store, "encoder", ATTN_RNN_LSTM, 1, 6, 3, 1));
    CHECK_OK(attn_nn_rnn_cell_register(&cell, store, "decoder.0", ATTN_RNN_GRU, 7, 4));
    CHECK_OK(attn_nn_additive_attention_register(&additive, store, "additive", 4, 6, 9));
    CHECK_OK(attn_nn_luong_attention_register(&concat, store, "concat", ATTN_LUONG_CONCAT,
                                              ATTN_LUONG_LOCAL_P, 2, 4, 6, 8));
    CHECK_OK(attn_nn_luong_attention_register(&general, store, "general", ATTN_LUONG_GENERAL,
                                              ATTN_LUONG_GLOBAL, 0, 4, 6, 0));
    CHECK(shape_is(store, "encoder.weight_ih_l0", 2, 12, 5) &&
              shape_is(store, "encoder.weight_hh_l0", 2, 12, 3) &&
              shape_is(store, "encoder.bias_ih_l0", 1, 12, 0) &&
              shape_is(store, "encoder.bias_hh_l0_reverse", 1, 12, 0) &&
              shape_is(store, "encoder.weight_ih_l0_reverse", 2, 12, 5) &&
              shape_is(store, "encoder.weight_ih_l1", 2, 12, 6) &&
              shape_is(store, "encoder.weight_hh_l1_reverse", 2, 12, 3),
          "nn.LSTM(5, 3, num_layers=2, bidirectional=True) names and shapes");
    CHECK(shape_is(store, "decoder.0.weight_ih", 2, 12, 7) &&
              shape_is(store, "decoder.0.weight_hh", 2, 12, 4) &&
              shape_is(store, "decoder.0.bias_ih", 1, 12, 0) &&
              shape_is(store, "decoder.0.bias_hh", 1, 12, 0),
          "nn.GRUCell(7, 4) names and shapes");
    CHECK(shape_is(store, "additive.query_proj.weight", 2, 9, 4) &&
              shape_is(store, "additive.query_proj.bias", 1, 9, 0) &&
              shape_is(store, "additive.key_proj.weight", 2, 9, 6) &&
              shape_is(store, "additive.v", 1, 9, 0),
          "additive attention names and shapes");
    CHECK(shape_is(store, "concat.weight", 2, 8, 10) && shape_is(store, "concat.v", 1, 8, 0) &&
              shape_is(store, "concat.predict_weight", 2, 8, 4) &&
              shape_is(store, "concat.predict_v", 1, 8, 0) &&
              shape_is(store, "general.weight", 2, 4, 6),
          "Luong attention names and shapes");
    CHECK(attn_params_count(store) == 8 + 8 + 4 + 4 + 4 + 1, "no other parameter (%zu)",
          attn_params_count(store));
    CHECK(general.v == -1 && general.predict_weight == -1 && general.attn_dim == 0,
          "global general attention has only W");

    CHECK_OK(attn_params_finalize(store));
    CHECK_OK(attn_params_init(store, 5));
    /* PyTorch's recurrent init: U(-1/sqrt(H), 1/sqrt(H)), biases too. */
    const float *w = attn_params_data(store, l1.weight_hh[1], ATTN_PARAM_VALUES);
    const float *b = attn_params_data(store, cell.bias_hh, ATTN_PARAM_VALUES);
    double bound3 = 1.0 / sqrt(3.0), bound4 = 0.5, largest_w = 0.0, largest_b = 0.0;
    for (int i = 0; i < 36; i++)
        largest_w = fmax(largest_w, fabs((double)w[i]));
    for (int i = 0; i < 12; i++)
        largest_b = fmax(largest_b, fabs((double)b[i]));
    CHECK(largest_w <= bound3 && largest_w > 0.6 * bound3, "LSTM weights within 1/sqrt(3): %g",
          largest_w);
    CHECK(largest_b <= bound4 && largest_b > 0.3 * bound4, "GRU biases within 1/sqrt(4): %g",
          largest_b);
    attn_params_destroy(store);
}

/* ---- gradients through the store ----------------------------------------------------------- */

typedef struct stack_ctx {
    attn_nn_rnn_layer layers[2];
    const int32_t *lengths;
} stack_ctx;

/* A 2-layer bidirectional encoder over leaf x. */
static attn_var *build_stack(attn_graph *g, attn_var **leaves, void *raw)
{
    stack_ctx *c = raw;
    attn_var *x = leaves[0];
    for (int k = 0; k < 2; k++)
        if (attn_nn_rnn_layer_forward(&c->layers[k], g, x, c->lengths, &x) != ATTN_OK)
            return NULL;
    return x;
}

typedef struct decoder_ctx {
    attn_nn_rnn_cell cell;
    attn_nn_additive_attention additive;
    attn_nn_luong_attention luong;
    int use_luong;
    const int32_t *lengths;
} decoder_ctx;

/* Three decoder steps over leaf annotations [B, S, A] from leaf inputs [B, 3, I]: each
 * step's context feeds the next step's cell, as in the models. Returns [state; context] of
 * every step, stacked. */
static attn_var *build_decoder(attn_graph *g, attn_var **leaves, void *raw)
{
    decoder_ctx *c = raw;
    attn_var *annotations = leaves[0], *inputs = leaves[1], *keys, *h = NULL, *context;
    attn_var *steps[3];
    const int64_t batch = annotations->value.shape[0];
    int32_t at[8];
    attn_status status = c->use_luong
                             ? attn_nn_luong_attention_keys(&c->luong, g, annotations, &keys)
                             : attn_nn_additive_attention_keys(&c->additive, g, annotations, &keys);
    const int64_t zero_shape[2] = {batch, annotations->value.shape[2]};
    if (status != ATTN_OK || attn_graph_input(g, 2, zero_shape, NULL, 0, &context) != ATTN_OK)
        return NULL;
    for (int t = 0; t < 3; t++) {
        attn_var *y, *x;
        for (int64_t b = 0; b < batch; b++)
            at[b] = t;
        attn_var *pieces[2] = {NULL, context};
        if (attn_op_gather_positions(g, inputs, at, 0, inputs->value.shape[2], &y) != ATTN_OK)
            return NULL;
        pieces[0] = y;
        if (attn_op_concat(g, 2, pieces, &x) != ATTN_OK ||
            attn_nn_rnn_cell_forward(&c->cell, g, x, h, NULL, &h, NULL) != ATTN_OK)
            return NULL;
        status = c->use_luong
                     ? attn_nn_luong_attention_forward(&c->luong, g, t, h, keys, annotations,
                                                       c->lengths, &context, NULL)
                     : attn_nn_additive_attention_forward(&c->additive, g, h, keys, annotations,
                                                          c->lengths, &context, NULL);
        attn_var *both[2] = {h, context};
        if (status != ATTN_OK || attn_op_concat(g, 2, both, &steps[t]) != ATTN_OK)
            return NULL;
    }
    attn_var *stacked;
    return attn_op_stack(g, 3, steps, &stacked) == ATTN_OK ? stacked : NULL;
}

static void randomise(attn_params *store, uint64_t seed)
{
    test_fill_uniform(attn_params_buffer(store, ATTN_PARAM_VALUES),
                      attn_params_buffer_floats(store), -0.5f, 0.5f, seed);
}

static ad_leaf_spec leaf(int64_t d0, int64_t d1, int64_t d2, uint64_t seed)
{
    ad_leaf_spec s;
    memset(&s, 0, sizeof s);
    s.ndim = 3;
    s.shape[0] = d0;
    s.shape[1] = d1;
    s.shape[2] = d2;
    size_t n = (size_t)(d0 * d1 * d2);
    s.data = test_alloc(n * sizeof(float));
    test_fill_uniform(s.data, n, -1.0f, 1.0f, seed);
    return s;
}

static void test_stacked_layers_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    const attn_rnn_cell cells[2] = {ATTN_RNN_GRU, ATTN_RNN_LSTM};
    static const int32_t lengths[3] = {3, 1, 0};
    for (int i = 0; i < 2; i++) {
        attn_params *store = new_store();
        stack_ctx ctx;
        ctx.lengths = lengths;
        CHECK_OK(attn_nn_rnn_layer_register(&ctx.layers[0], store, "rnn", cells[i], 0, 2, 3, 1));
        CHECK_OK(attn_nn_rnn_layer_register(&ctx.layers[1], store, "rnn", cells[i], 1, 6, 3, 1));
        CHECK_OK(attn_params_finalize(store));
        randomise(store, 10 + (uint64_t)i);
        ad_leaf_spec x = leaf(3, 4, 2, 20 + (uint64_t)i);
        ad_problem p = {cells[i] == ATTN_RNN_GRU ? "2-layer bidirectional GRU"
                                                 : "2-layer bidirectional LSTM",
                        1,
                        &x,
                        store,
                        build_stack,
                        &ctx,
                        0,
                        12};
        CHECK(ad_check_problem(&p, 1e-2, 2e-3, 5e-3), "%s: gradients match finite differences",
              p.what);
        free(x.data);
        attn_params_destroy(store);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

static void test_decoder_steps_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    static const int32_t lengths[2] = {4, 2};
    const char *names[3] = {"GRU decoder with additive attention",
                            "GRU decoder with Luong concat, local-p",
                            "GRU decoder with Luong "
                            "general, local-m"};
    for (int i = 0; i < 3; i++) {
        attn_params *store = new_store();
        decoder_ctx ctx;
        memset(&ctx, 0, sizeof ctx);
        ctx.lengths = lengths;
        ctx.use_luong = i > 0;
        /* B = 2, S = 4, annotations A = 5, inputs I = 2, hidden 3 */
        CHECK_OK(attn_nn_rnn_cell_register(&ctx.cell, store, "cell", ATTN_RNN_GRU, 2 + 5, 3));
        if (i == 0)
            CHECK_OK(attn_nn_additive_attention_register(&ctx.additive, store, "att", 3, 5, 4));
        else if (i == 1)
            CHECK_OK(attn_nn_luong_attention_register(&ctx.luong, store, "att", ATTN_LUONG_CONCAT,
                                                      ATTN_LUONG_LOCAL_P, 2, 3, 5, 4));
        else
            CHECK_OK(attn_nn_luong_attention_register(&ctx.luong, store, "att", ATTN_LUONG_GENERAL,
                                                      ATTN_LUONG_LOCAL_M, 1, 3, 5, 0));
        CHECK_OK(attn_params_finalize(store));
        randomise(store, 30 + (uint64_t)i);
        ad_leaf_spec leaves[2] = {leaf(2, 4, 5, 40 + (uint64_t)i), leaf(2, 3, 2, 50 + (uint64_t)i)};
        ad_problem p = {names[i], 2, leaves, store, build_decoder, &ctx, 0, 12};
        CHECK(ad_check_problem(&p, 1e-2, 2e-3, 5e-3), "%s: gradients match finite differences",
              names[i]);
        free(leaves[0].data);
        free(leaves[1].data);
        attn_params_destroy(store);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Dot and general scores read the annotations themselves; concat projects them. */
static void test_luong_keys(void)
{
    attn_params *store = new_store();
    attn_nn_luong_attention dot, concat;
    CHECK_OK(attn_nn_luong_attention_register(&dot, store, "dot", ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL,
                                              0, 4, 4, 0));
    CHECK_OK(attn_nn_luong_attention_register(&concat, store, "concat", ATTN_LUONG_CONCAT,
                                              ATTN_LUONG_GLOBAL, 0, 3, 4, 5));
    CHECK_OK(attn_params_finalize(store));
    CHECK_OK(attn_params_init(store, 1));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    const int64_t shape[3] = {2, 3, 4};
    attn_var *annotations = NULL, *keys = NULL;
    CHECK_OK(attn_graph_input(g, 3, shape, NULL, 1, &annotations));
    CHECK_OK(attn_nn_luong_attention_keys(&dot, g, annotations, &keys));
    CHECK(keys == annotations, "dot scores use the annotations as keys");
    CHECK_OK(attn_nn_luong_attention_keys(&concat, g, annotations, &keys));
    CHECK(keys != NULL && keys->value.shape[2] == 5, "concat keys are projected to da");
    attn_graph_destroy(g);
    attn_params_destroy(store);
}

static void test_bad_arguments_are_rejected(void)
{
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_params *store = new_store();
    attn_nn_rnn_layer layer;
    attn_nn_rnn_cell cell;
    attn_nn_additive_attention additive;
    attn_nn_luong_attention luong;
    CHECK_FAILS(attn_nn_rnn_layer_register(&layer, store, "a", (attn_rnn_cell)2, 0, 2, 2, 0), bad);
    CHECK_FAILS(attn_nn_rnn_layer_register(&layer, store, "a", ATTN_RNN_GRU, -1, 2, 2, 0), bad);
    CHECK_FAILS(attn_nn_rnn_layer_register(&layer, store, "a", ATTN_RNN_GRU, 0, 0, 2, 0), bad);
    CHECK_FAILS(attn_nn_rnn_layer_register(&layer, store, "a", ATTN_RNN_GRU, 0, 2, 2, 2), bad);
    CHECK_FAILS(attn_nn_rnn_layer_register(NULL, store, "a", ATTN_RNN_GRU, 0, 2, 2, 0), bad);
    CHECK_FAILS(attn_nn_rnn_layer_register(&layer, NULL, "a", ATTN_RNN_GRU, 0, 2, 2, 0), bad);
    CHECK_FAILS(attn_nn_rnn_cell_register(&cell, store, "c", ATTN_RNN_LSTM, 2, 0), bad);
    CHECK_FAILS(attn_nn_additive_attention_register(&additive, store, "d", 2, 2, 0), bad);
    CHECK_FAILS(attn_nn_luong_attention_register(&luong, store, "e", ATTN_LUONG_DOT,
                                                 ATTN_LUONG_GLOBAL, 0, 3, 4, 0),
                bad);
    CHECK(strstr(attn_last_error(), "query_dim == key_dim") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_nn_luong_attention_register(&luong, store, "e", ATTN_LUONG_CONCAT,
                                                 ATTN_LUONG_GLOBAL, 0, 3, 4, 0),
                bad);
    CHECK_FAILS(attn_nn_luong_attention_register(&luong, store, "e", ATTN_LUONG_GENERAL,
                                                 ATTN_LUONG_LOCAL_P, 0, 3, 4, 5),
                bad);
    CHECK(strstr(attn_last_error(), "window") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_nn_luong_attention_register(&luong, store, "e", ATTN_LUONG_GENERAL,
                                                 ATTN_LUONG_LOCAL_M, -1, 3, 4, 0),
                bad);
    CHECK_FAILS(attn_nn_luong_attention_register(&luong, store, "e", (attn_luong_score)3,
                                                 ATTN_LUONG_GLOBAL, 0, 3, 4, 5),
                bad);
    /* A name too long for ATTN_NN_MAX_NAME. */
    char prefix[ATTN_NN_MAX_NAME];
    memset(prefix, 'p', sizeof prefix - 1);
    prefix[sizeof prefix - 1] = '\0';
    CHECK_FAILS(attn_nn_rnn_cell_register(&cell, store, prefix, ATTN_RNN_GRU, 2, 2), bad);
    CHECK_OK(attn_nn_rnn_cell_register(&cell, store, "fine", ATTN_RNN_GRU, 2, 2));
    CHECK_OK(attn_params_finalize(store));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    attn_var *out = NULL;
    const int64_t shape[2] = {2, 3};
    attn_var *x = NULL;
    CHECK_OK(attn_graph_input(g, 2, shape, NULL, 0, &x));
    CHECK_FAILS(attn_nn_rnn_cell_forward(&cell, g, x, NULL, NULL, &out, NULL), bad);
    CHECK(strstr(attn_last_error(), "weight_ih") != NULL, "input size named: %s",
          attn_last_error());
    CHECK_FAILS(attn_nn_rnn_cell_forward(NULL, g, x, NULL, NULL, &out, NULL), bad);
    CHECK_FAILS(attn_nn_rnn_layer_forward(NULL, g, x, NULL, &out), bad);
    attn_graph_destroy(g);
    attn_params_destroy(store);
}

int main(void)
{
    RUN_TEST(test_names_and_shapes_follow_pytorch);
    RUN_TEST(test_stacked_layers_match_finite_differences);
    RUN_TEST(test_decoder_steps_match_finite_differences);
    RUN_TEST(test_luong_keys);
    RUN_TEST(test_bad_arguments_are_rejected);
    return test_summary();
}
