/* The recurrent operations (ops_rnn.c): a recurrent layer over padded sentences and one
 * cell step. Tape gradients against finite differences (both outputs of an LSTM step, alone
 * and together), every instruction set against the reference with identical reruns, and
 * argument checks. Why float finite differences suffice: test_ops.c. */
#include "autodiff_testing.h"

#include <string.h>

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
    AD_TRY_OP(
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
    AD_TRY_OP(attn_op_rnn_cell(g, a->cell, &p, x[0], h, c, &h_out, &c_out));
    if (a->outputs == 1)
        return h_out;
    if (a->outputs == 2)
        return c_out;
    attn_var *both[2] = {h_out, c_out}, *y;
    AD_TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

/* Two steps of a cell, the second fed by the first: the state's gradient flows between. */
static attn_var *build_two_steps(attn_graph *g, attn_var **x, void *raw)
{
    const cell_args *a = raw;
    attn_rnn_vars p = {x[1], x[2], x[3], x[4]};
    attn_var *h, *c = NULL, *h2, *c2 = NULL;
    AD_TRY_OP(attn_op_rnn_cell(g, a->cell, &p, x[0], NULL, NULL, &h, &c));
    AD_TRY_OP(attn_op_rnn_cell(g, a->cell, &p, x[5], h, c, &h2, &c2));
    attn_var *both[2] = {h, h2}, *y;
    AD_TRY_OP(attn_op_concat(g, 2, both, &y));
    return y;
}

/* ---- the cases ------------------------------------------------------------------------ */

static const int32_t lengths_3[3] = {4, 0, 2};
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

static int make_cases(ad_op_case *cases)
{
    int n = 0;
    /* GRU: G = 3; B = 3, T = 4, I = 3, H = 2. */
    cases[n++] = (ad_op_case){"GRU layer, one direction, lengths 4 0 2",
                              build_rnn_layer,
                              &gru_uni,
                              5,
                              {ad_spec(3, 3, 4, 3), ad_spec(2, 6, 3, 0), ad_spec(2, 6, 2, 0),
                               ad_spec(1, 6, 0, 0), ad_spec(1, 6, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){"LSTM layer, bidirectional, lengths 4 0 2",
                              build_rnn_layer,
                              &lstm_bi,
                              9,
                              {ad_spec(3, 3, 4, 3), ad_spec(2, 8, 3, 0), ad_spec(2, 8, 2, 0),
                               ad_spec(1, 8, 0, 0), ad_spec(1, 8, 0, 0), ad_spec(2, 8, 3, 0),
                               ad_spec(2, 8, 2, 0), ad_spec(1, 8, 0, 0), ad_spec(1, 8, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){"GRU layer, bidirectional, no bias, full length",
                              build_rnn_layer,
                              &gru_bi_nobias,
                              5,
                              {ad_spec(3, 2, 3, 2), ad_spec(2, 9, 2, 0), ad_spec(2, 9, 3, 0),
                               ad_spec(2, 9, 2, 0), ad_spec(2, 9, 3, 0)},
                              0};
    cases[n++] = (ad_op_case){"GRU cell",
                              build_rnn_cell,
                              &gru_cell,
                              6,
                              {ad_spec(2, 3, 4, 0), ad_spec(2, 9, 4, 0), ad_spec(2, 9, 3, 0),
                               ad_spec(1, 9, 0, 0), ad_spec(1, 9, 0, 0), ad_spec(2, 3, 3, 0)},
                              0};
    cases[n++] = (ad_op_case){"GRU cell from zeros, x [B, 1, I]",
                              build_rnn_cell,
                              &gru_cell_zero,
                              5,
                              {ad_spec(3, 2, 1, 4), ad_spec(2, 9, 4, 0), ad_spec(2, 9, 3, 0),
                               ad_spec(1, 9, 0, 0), ad_spec(1, 9, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){"LSTM cell, h' and c'",
                              build_rnn_cell,
                              &lstm_both,
                              7,
                              {ad_spec(2, 3, 4, 0), ad_spec(2, 12, 4, 0), ad_spec(2, 12, 3, 0),
                               ad_spec(1, 12, 0, 0), ad_spec(1, 12, 0, 0), ad_spec(2, 3, 3, 0),
                               ad_spec(2, 3, 3, 0)},
                              0};
    cases[n++] = (ad_op_case){"LSTM cell, c' only",
                              build_rnn_cell,
                              &lstm_c_only,
                              7,
                              {ad_spec(2, 3, 4, 0), ad_spec(2, 12, 4, 0), ad_spec(2, 12, 3, 0),
                               ad_spec(1, 12, 0, 0), ad_spec(1, 12, 0, 0), ad_spec(2, 3, 3, 0),
                               ad_spec(2, 3, 3, 0)},
                              0};
    cases[n++] = (ad_op_case){"LSTM cell from zeros, h' only",
                              build_rnn_cell,
                              &lstm_h_only,
                              5,
                              {ad_spec(2, 3, 4, 0), ad_spec(2, 12, 4, 0), ad_spec(2, 12, 3, 0),
                               ad_spec(1, 12, 0, 0), ad_spec(1, 12, 0, 0)},
                              0};
    cases[n++] = (ad_op_case){"GRU cell, two steps",
                              build_two_steps,
                              &gru_steps,
                              6,
                              {ad_spec(2, 2, 4, 0), ad_spec(2, 9, 4, 0), ad_spec(2, 9, 3, 0),
                               ad_spec(1, 9, 0, 0), ad_spec(1, 9, 0, 0), ad_spec(2, 2, 4, 0)},
                              0};
    cases[n++] = (ad_op_case){"LSTM cell, two steps (c flows between)",
                              build_two_steps,
                              &lstm_steps,
                              6,
                              {ad_spec(2, 2, 4, 0), ad_spec(2, 12, 4, 0), ad_spec(2, 12, 3, 0),
                               ad_spec(1, 12, 0, 0), ad_spec(1, 12, 0, 0), ad_spec(2, 2, 4, 0)},
                              0};
    return n;
}

/* Larger, odd sizes for the instruction-set comparison only (the vector loops' tails and
 * threaded batches): B = 17, T = 5, features 7, 64 and 80, compared at atol 5e-5 (their
 * sums are longer than the small cases'). */
static const int32_t lengths_17[17] = {5, 1, 0, 3, 5, 2, 4, 5, 1, 3, 5, 5, 0, 2, 4, 3, 5};
static layer_args gru_bi_17 = {ATTN_RNN_GRU, 1, 1, lengths_17};
static cell_args lstm_cell_80 = {ATTN_RNN_LSTM, 1, 3};

static int make_large_cases(ad_op_case *cases)
{
    int n = 0;
    cases[n++] =
        (ad_op_case){"GRU layer, bidirectional, B 17, H 80",
                     build_rnn_layer,
                     &gru_bi_17,
                     9,
                     {ad_spec(3, 17, 5, 7), ad_spec(2, 240, 7, 0), ad_spec(2, 240, 80, 0),
                      ad_spec(1, 240, 0, 0), ad_spec(1, 240, 0, 0), ad_spec(2, 240, 7, 0),
                      ad_spec(2, 240, 80, 0), ad_spec(1, 240, 0, 0), ad_spec(1, 240, 0, 0)},
                     0};
    cases[n++] = (ad_op_case){"LSTM cell, B 17, I 64, H 80",
                              build_rnn_cell,
                              &lstm_cell_80,
                              7,
                              {ad_spec(2, 17, 64, 0), ad_spec(2, 320, 64, 0),
                               ad_spec(2, 320, 80, 0), ad_spec(1, 320, 0, 0), ad_spec(1, 320, 0, 0),
                               ad_spec(2, 17, 80, 0), ad_spec(2, 17, 80, 0)},
                              0};
    return n;
}

enum { MAX_CASES = 16 };

static void test_gradients_match_finite_differences(void)
{
    ad_op_case cases[MAX_CASES];
    ad_check_case_gradients(cases, make_cases(cases), 500);
}

static void test_every_isa_matches_the_reference_and_repeats_exactly(void)
{
    ad_op_case cases[MAX_CASES];
    ad_check_cases_across_isas(cases, make_cases(cases), 900, 1e-5);
    ad_check_cases_across_isas(cases, make_large_cases(cases), 950, 5e-5);
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

static void test_bad_arguments_are_rejected(void)
{
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_var *x = ad_var_of(g, 3, 2, 3, 4), *y = NULL, *y2 = NULL;
    attn_var *wih = ad_var_of(g, 2, 9, 4, 0), *whh = ad_var_of(g, 2, 9, 3, 0),
             *b = ad_var_of(g, 1, 9, 0, 0);
    attn_rnn_vars p = {wih, whh, b, b};
    const int32_t lengths[2] = {3, 4};

    CHECK_OK(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, &p, x, NULL, &y));
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, NULL, x, lengths, &y), bad);
    CHECK(strstr(attn_last_error(), "lengths[1] = 4") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_LSTM, &p, NULL, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "weight_hh") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_op_rnn_layer(g, (attn_rnn_cell)7, &p, NULL, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, NULL, NULL, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, NULL, ad_var_of(g, 2, 3, 4, 0), NULL, &y),
                bad);
    attn_rnn_vars wrong_in = {ad_var_of(g, 2, 9, 5, 0), whh, NULL, NULL};
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &wrong_in, NULL, x, NULL, &y), bad);
    CHECK(strstr(attn_last_error(), "weight_ih") != NULL, "%s", attn_last_error());
    attn_rnn_vars wrong_bias = {wih, whh, ad_var_of(g, 1, 8, 0, 0), NULL};
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &wrong_bias, NULL, x, NULL, &y), bad);
    attn_rnn_vars other_hidden = {ad_var_of(g, 2, 6, 4, 0), ad_var_of(g, 2, 6, 2, 0), NULL, NULL};
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, &other_hidden, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(NULL, ATTN_RNN_GRU, &p, NULL, x, NULL, &y), bad);
    CHECK_FAILS(attn_op_rnn_layer(g, ATTN_RNN_GRU, &p, NULL, x, NULL, NULL), bad);

    attn_var *step = ad_var_of(g, 2, 2, 4, 0), *h = ad_var_of(g, 2, 2, 3, 0);
    CHECK_OK(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, h, NULL, &y, &y2));
    CHECK(y2 == NULL, "a GRU gives no cell state");
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, h, h, &y, &y2), bad);
    CHECK_FAILS(
        attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, ad_var_of(g, 2, 3, 3, 0), NULL, &y, NULL), bad);
    CHECK_FAILS(
        attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, ad_var_of(g, 2, 2, 2, 0), NULL, &y, NULL), bad);
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, NULL, h, NULL, &y, NULL), bad);
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_GRU, &p, step, h, NULL, NULL, NULL), bad);
    attn_rnn_vars lstm = {ad_var_of(g, 2, 12, 4, 0), ad_var_of(g, 2, 12, 3, 0), NULL, NULL};
    CHECK_FAILS(attn_op_rnn_cell(g, ATTN_RNN_LSTM, &lstm, step, h, h, &y, NULL), bad);
    CHECK(strstr(attn_last_error(), "c_out") != NULL, "%s", attn_last_error());
    CHECK_OK(attn_op_rnn_cell(g, ATTN_RNN_LSTM, &lstm, step, h, h, &y, &y2));

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
