/* Tape mechanics: accumulation when a value feeds several operations, parameter gradients
 * in the store, lazy gradients, recording off, one backward per step, arena reuse, dropout
 * seeding, and argument checks of the graph functions. */
#include "autodiff_testing.h"

#include <math.h>
#include <string.h>

static attn_var *leaf(attn_graph *g, int64_t n, const float *data, int requires_grad)
{
    attn_var *v = NULL;
    CHECK_OK(attn_graph_input(g, 1, &n, data, requires_grad, &v));
    return v;
}

static void test_fan_out_accumulates(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    const float x_data[3] = {1, 2, 3}, dy[3] = {0.5f, -1.0f, 2.0f};
    attn_var *x = leaf(g, 3, x_data, 1);
    attn_var *y, *z;
    CHECK_OK(attn_op_add(g, x, x, &y)); /* y = 2x */
    CHECK_OK(attn_op_add(g, y, x, &z)); /* z = 3x */
    CHECK(z->value.data[2] == 9.0f, "forward 3x");
    CHECK(attn_graph_node_count(g) == 2, "two nodes");
    CHECK(x->grad == NULL, "no gradient before backward");
    CHECK_OK(attn_graph_backward_from(g, z, dy));
    int ok = 1;
    for (int i = 0; i < 3; i++)
        ok &= x->grad[i] == 3.0f * dy[i];
    CHECK(ok, "x feeds three additions: dx = 3 dy");
    CHECK_FAILS(attn_graph_backward_from(g, z, dy), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "reset") != NULL, "second backward refused: %s",
          attn_last_error());
    attn_var *late;
    CHECK_FAILS(attn_op_add(g, x, x, &late), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);
}

static void test_unreached_and_constant_inputs(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    const float data[2] = {1, -2}, one[1] = {1};
    attn_var *a = leaf(g, 2, data, 1), *c = leaf(g, 2, data, 0), *side = leaf(g, 2, data, 1);
    attn_var *sum, *unused, *out;
    CHECK_OK(attn_op_add(g, a, c, &sum));
    CHECK_OK(attn_op_add(g, side, side, &unused));
    int64_t shape[2] = {1, 2};
    attn_var *w = NULL;
    CHECK_OK(attn_graph_input(g, 2, shape, data, 0, &w));
    CHECK_OK(attn_op_linear(g, sum, w, NULL, &out)); /* [1] */
    CHECK(out->value.ndim == 1 && out->value.shape[0] == 1, "linear of a vector");
    CHECK_OK(attn_graph_backward_from(g, out, one));
    CHECK(a->grad != NULL && a->grad[0] == 1.0f && a->grad[1] == -2.0f, "a gets w");
    CHECK(c->grad == NULL && !c->requires_grad, "a constant gets no gradient");
    CHECK(side->grad == NULL && unused->grad == NULL,
          "a branch the output does not use is skipped");
    CHECK(w->grad == NULL, "constant weight untouched");
    attn_graph_destroy(g);
}

static void test_recording_off_is_inference(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_graph_set_recording(g, 0);
    CHECK(!attn_graph_is_recording(g), "off");
    const float data[4] = {1, 2, 3, 4};
    attn_var *x = leaf(g, 4, data, 1), *y;
    CHECK(!x->requires_grad, "no leaf requires a gradient while not recording");
    CHECK_OK(attn_op_add(g, x, x, &y));
    CHECK(attn_graph_node_count(g) == 0 && !y->requires_grad, "nothing recorded");
    CHECK(y->value.data[3] == 8.0f, "still computes");
    CHECK_FAILS(attn_graph_backward_from(g, y, data), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "recording") != NULL, "%s", attn_last_error());
    attn_graph_destroy(g);
}

/* A tiny store with w [2, 3] and b [2]. */
static attn_params *small_store(attn_param_id *w, attn_param_id *b)
{
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    const int64_t ws[2] = {2, 3}, bs[1] = {2};
    CHECK_OK(attn_params_add(store, "w", 2, ws, attn_init_normal(1.0f), w));
    CHECK_OK(attn_params_add(store, "b", 1, bs, attn_init_normal(1.0f), b));
    CHECK_OK(attn_params_finalize(store));
    CHECK_OK(attn_params_init(store, 5));
    return store;
}

static double one_step(attn_graph *g, attn_param_id w_id, attn_param_id b_id)
{
    attn_graph_reset(g);
    const float x_data[6] = {0.5f, -1.0f, 2.0f, 1.0f, 0.0f, -0.5f};
    const int32_t targets[2] = {1, 0};
    const int64_t shape[2] = {2, 3};
    attn_var *x, *w, *b, *logits, *loss;
    CHECK_OK(attn_graph_input(g, 2, shape, x_data, 0, &x));
    CHECK_OK(attn_graph_param(g, w_id, &w));
    CHECK_OK(attn_graph_param(g, b_id, &b));
    CHECK_OK(attn_op_linear(g, x, w, b, &logits));
    CHECK_OK(attn_op_cross_entropy(g, logits, targets, -1, 0.0f, &loss));
    CHECK(loss->value.ndim == 0 && attn_tensor_numel(&loss->value) == 1, "scalar loss");
    CHECK_OK(attn_graph_backward(g, loss));
    return loss->value.data[0];
}

static void test_parameter_gradients_live_in_the_store(void)
{
    attn_param_id w_id, b_id;
    attn_params *store = small_store(&w_id, &b_id);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    one_step(g, w_id, b_id);
    float first[8];
    memcpy(first, attn_params_data(store, w_id, ATTN_PARAM_GRADS), 6 * sizeof(float));
    memcpy(first + 6, attn_params_data(store, b_id, ATTN_PARAM_GRADS), 2 * sizeof(float));
    double norm = 0;
    for (int i = 0; i < 8; i++)
        norm += fabs(first[i]);
    CHECK(norm > 0.1, "gradients reached the store (|g|_1 = %g)", norm);
    /* Bias gradient of a mean cross-entropy: the columns of (softmax - onehot) / rows sum to 0. */
    CHECK(fabs((double)first[6] + first[7]) < 1e-6, "bias gradients sum to zero");

    one_step(g, w_id, b_id);
    const float *gw = attn_params_data(store, w_id, ATTN_PARAM_GRADS);
    int doubled = 1;
    for (int i = 0; i < 6; i++)
        doubled &= gw[i] == 2.0f * first[i];
    CHECK(doubled, "a second backward adds to the store's gradients");
    attn_params_zero_grad(store);
    one_step(g, w_id, b_id);
    CHECK(memcmp(gw, first, 6 * sizeof(float)) == 0, "after zero_grad, the same gradients");

    attn_graph_set_recording(g, 0);
    attn_graph_reset(g);
    attn_var *w;
    CHECK_OK(attn_graph_param(g, w_id, &w));
    CHECK(!w->requires_grad && w->grad == NULL, "a parameter without recording has no gradient");
    CHECK(w->value.data == attn_params_data(store, w_id, ATTN_PARAM_VALUES),
          "value is the store's");
    CHECK_FAILS(attn_graph_param(g, 7, &w), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);

    attn_graph *bare = NULL;
    CHECK_OK(attn_graph_create(NULL, &bare));
    CHECK_FAILS(attn_graph_param(bare, 0, &w), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "store") != NULL, "%s", attn_last_error());
    attn_graph_destroy(bare);
    attn_params_destroy(store);
}

static void test_arena_is_reused_across_steps(void)
{
    attn_param_id w_id, b_id;
    attn_params *store = small_store(&w_id, &b_id);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    double loss1 = one_step(g, w_id, b_id);
    size_t peak1 = attn_graph_memory_peak(g), used1 = attn_graph_memory_used(g);
    double loss2 = one_step(g, w_id, b_id);
    double loss3 = one_step(g, w_id, b_id);
    CHECK(attn_graph_memory_peak(g) == peak1 && attn_graph_memory_used(g) == used1,
          "peak %zu and use %zu unchanged after more steps", attn_graph_memory_peak(g),
          attn_graph_memory_used(g));
    CHECK(loss1 == loss2 && loss2 == loss3, "same step, same loss");
    attn_graph_reset(g);
    CHECK(attn_graph_memory_used(g) == 0 && attn_graph_node_count(g) == 0, "reset empties");
    attn_graph_destroy(g);
    attn_params_destroy(store);
}

/* The address of the first allocation of a step: the start of the arena's first block, which
 * changes only when the graph replaces its arena. */
static void *first_block(attn_graph *g)
{
    attn_graph_reset(g);
    return attn_graph_alloc(g, 64);
}

static attn_var *big_step(attn_graph *g, int64_t n)
{
    attn_var *x = NULL, *y = NULL;
    CHECK_OK(attn_graph_input(g, 1, &n, NULL, 1, &x));
    CHECK_OK(attn_op_add(g, x, x, &y));
    return y;
}

static void test_arena_settles_after_the_largest_step(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    void *initial = first_block(g);
    big_step(g, 3 << 20); /* 24 MB over several blocks */
    size_t largest = attn_graph_memory_peak(g);
    void *settled = first_block(g);
    CHECK(settled != initial, "the reset after an outgrown step replaces the arena");
    CHECK(attn_graph_memory_used(g) == 64, "and starts it empty");
    const int64_t sizes[4] = {3 << 20, 1 << 20, 5, 2 << 20};
    int stable = 1;
    for (int i = 0; i < 4; i++) {
        CHECK(first_block(g) == settled, "step %d: same arena", i);
        big_step(g, sizes[i]);
        stable &= attn_graph_memory_peak(g) <= largest + 64;
    }
    CHECK(first_block(g) == settled && stable, "smaller or equal steps never grow it");
    attn_graph_destroy(g);
}

static void dropout_once(attn_graph *g, const float *x_data, int64_t n, float *first, float *second)
{
    attn_graph_reset(g);
    attn_var *x = leaf(g, n, x_data, 1), *a, *b;
    CHECK_OK(attn_op_dropout(g, x, 0.5f, &a));
    CHECK_OK(attn_op_dropout(g, x, 0.5f, &b));
    memcpy(first, a->value.data, (size_t)n * sizeof(float));
    memcpy(second, b->value.data, (size_t)n * sizeof(float));
}

static void test_dropout_follows_seed_step_and_order(void)
{
    enum { N = 256 };
    float x[N], a1[N], b1[N], a2[N], b2[N];
    for (int i = 0; i < N; i++)
        x[i] = 1.0f + (float)i / N;
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    CHECK(attn_graph_is_training(g), "training by default");
    attn_graph_set_dropout_seed(g, 42, 7);
    dropout_once(g, x, N, a1, b1);
    dropout_once(g, x, N, a2, b2);
    CHECK(memcmp(a1, a2, sizeof a1) == 0 && memcmp(b1, b2, sizeof b1) == 0,
          "same (seed, step) after a reset: same masks (resumable)");
    CHECK(memcmp(a1, b1, sizeof a1) != 0, "the second dropout of a step has its own mask");
    int dropped = 0, scaled = 1;
    for (int i = 0; i < N; i++) {
        dropped += a1[i] == 0.0f;
        scaled &= a1[i] == 0.0f || a1[i] == x[i] * 2.0f;
    }
    CHECK(dropped > N / 4 && dropped < 3 * N / 4 && scaled, "about half dropped (%d), rest x2",
          dropped);
    attn_graph_set_dropout_seed(g, 42, 8);
    dropout_once(g, x, N, a2, b2);
    CHECK(memcmp(a1, a2, sizeof a1) != 0, "another step: another mask");
    attn_graph_set_dropout_seed(g, 43, 7);
    dropout_once(g, x, N, a2, b2);
    CHECK(memcmp(a1, a2, sizeof a1) != 0, "another seed: another mask");

    /* The backward uses the forward's mask. */
    attn_graph_set_dropout_seed(g, 42, 7);
    attn_graph_reset(g);
    float ones[N];
    for (int i = 0; i < N; i++)
        ones[i] = 1.0f;
    attn_var *v = leaf(g, N, x, 1), *y;
    CHECK_OK(attn_op_dropout(g, v, 0.5f, &y));
    CHECK_OK(attn_graph_backward_from(g, y, ones));
    int same_mask = 1;
    for (int i = 0; i < N; i++)
        same_mask &= v->grad[i] == (y->value.data[i] == 0.0f ? 0.0f : 2.0f);
    CHECK(same_mask, "gradient passes exactly where the forward kept");

    attn_graph_set_training(g, 0);
    attn_graph_reset(g);
    v = leaf(g, N, x, 1);
    CHECK_OK(attn_op_dropout(g, v, 0.5f, &y));
    CHECK(y == v && attn_graph_node_count(g) == 0, "evaluation: dropout is the identity");
    CHECK_FAILS(attn_op_dropout(g, v, 1.0f, &y), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_op_dropout(g, v, -0.1f, &y), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);
}

static attn_status bad_backward(attn_graph *graph, const attn_var *output, void *ctx)
{
    (void)graph, (void)output, (void)ctx;
    return attn_gemm(ATTN_NO_TRANS, ATTN_NO_TRANS, -1, 1, 1, 1.0f, NULL, 1, NULL, 1, 0.0f, NULL, 1);
}

/* A two-output operation: y1 = 2 x, y2 = 3 x. */
typedef struct two_outputs {
    attn_var *x, *y1, *y2;
} two_outputs;

static attn_status two_outputs_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    two_outputs *c = raw;
    float *dx;
    CHECK(output == c->y1, "the backward gets the first output");
    attn_status status = attn_graph_grad(graph, c->x, &dx);
    if (status != ATTN_OK)
        return status;
    for (int i = 0; i < 2; i++)
        dx[i] += 2.0f * (c->y1->grad ? c->y1->grad[i] : 0.0f) +
                 3.0f * (c->y2->grad ? c->y2->grad[i] : 0.0f);
    return ATTN_OK;
}

static void test_operation_with_two_outputs(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    const float data[2] = {1, 2}, ones[2] = {1, 1};
    const int64_t n = 2;
    for (int which = 1; which <= 2; which++) {
        attn_graph_reset(g);
        two_outputs *c = attn_graph_alloc(g, sizeof *c);
        c->x = leaf(g, 2, data, 1);
        CHECK_OK(attn_graph_new_var(g, 1, &n, 1, &c->y1));
        CHECK_OK(attn_graph_new_var(g, 1, &n, 1, &c->y2));
        for (int i = 0; i < 2; i++) {
            c->y1->value.data[i] = 2.0f * data[i];
            c->y2->value.data[i] = 3.0f * data[i];
        }
        attn_var *outputs[2] = {c->y1, c->y2}, *sum;
        CHECK_OK(attn_graph_record_outputs(g, 2, outputs, two_outputs_backward, c, "two"));
        attn_var *used = which == 1 ? c->y1 : c->y2;
        CHECK_OK(attn_op_add(g, used, used, &sum));
        CHECK_OK(attn_graph_backward_from(g, sum, ones));
        float expected = which == 1 ? 4.0f : 6.0f;
        CHECK(c->x->grad && c->x->grad[0] == expected && c->x->grad[1] == expected,
              "only y%d used: dx = %g", which, (double)expected);
    }
    attn_var *outputs[1] = {NULL};
    CHECK_FAILS(attn_graph_record_outputs(g, 1, outputs, two_outputs_backward, NULL, "x"),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_record_outputs(g, 0, outputs, two_outputs_backward, NULL, "x"),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);
}

/* What data-parallel training relies on to start summing a gradient during the backward: the
 * tape's length when a parameter was first read, and an observer told how many nodes are left
 * after each one; a gradient is final once no more than its first node are left. */
typedef struct backward_watch {
    attn_params *store;
    attn_param_id ids[2];
    size_t calls, remaining[8];
    float grads[8][2][9]; /* per call, per parameter: its gradient then */
    attn_status answer;
} backward_watch;

static attn_status watch_backward(void *ctx, size_t remaining)
{
    backward_watch *w = ctx;
    if (w->calls < 8) {
        w->remaining[w->calls] = remaining;
        for (int p = 0; p < 2; p++) {
            attn_param_info info;
            attn_params_info(w->store, w->ids[p], &info);
            memcpy(w->grads[w->calls][p], attn_params_data(w->store, w->ids[p], ATTN_PARAM_GRADS),
                   (size_t)info.numel * sizeof(float));
        }
    }
    w->calls++;
    return remaining == 1 ? w->answer : ATTN_OK;
}

static void test_backward_observer_and_first_reads(void)
{
    attn_params *store = NULL;
    attn_param_id first, second, unused;
    const int64_t square[2] = {3, 3}, wide[2] = {2, 3}, small[1] = {2};
    CHECK_OK(attn_params_create(&store));
    CHECK_OK(attn_params_add(store, "first", 2, square, attn_init_normal(1.0f), &first));
    CHECK_OK(attn_params_add(store, "second", 2, wide, attn_init_normal(1.0f), &second));
    CHECK_OK(attn_params_add(store, "unused", 1, small, attn_init_normal(1.0f), &unused));
    CHECK_OK(attn_params_finalize(store));
    CHECK_OK(attn_params_init(store, 9));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    backward_watch watch;
    memset(&watch, 0, sizeof watch);
    watch.store = store;
    watch.ids[0] = first;
    watch.ids[1] = second;
    attn_graph_set_backward_observer(g, watch_backward, &watch);

    const float x_data[6] = {0.5f, -1.0f, 2.0f, 1.0f, 0.0f, -0.5f};
    const int32_t targets[2] = {1, 0};
    const int64_t shape[2] = {2, 3};
    attn_var *x, *w1, *w2, *h, *t, *logits, *loss;
    CHECK_OK(attn_graph_input(g, 2, shape, x_data, 0, &x));
    CHECK_OK(attn_graph_param(g, first, &w1));
    CHECK_OK(attn_op_linear(g, x, w1, NULL, &h));          /* node 0 */
    CHECK_OK(attn_op_activation(g, h, ATTN_ACT_TANH, &t)); /* node 1 */
    CHECK_OK(attn_graph_param(g, second, &w2));
    CHECK_OK(attn_op_linear(g, t, w2, NULL, &logits));                    /* node 2 */
    CHECK_OK(attn_op_cross_entropy(g, logits, targets, -1, 0.0f, &loss)); /* node 3 */
    CHECK(attn_graph_param_first_node(g, first) == 0 &&
              attn_graph_param_first_node(g, second) == 2 &&
              attn_graph_param_first_node(g, unused) == SIZE_MAX,
          "first reads at nodes 0 and 2, none for the unused parameter (%zu, %zu)",
          attn_graph_param_first_node(g, first), attn_graph_param_first_node(g, second));
    CHECK_OK(attn_graph_backward(g, loss));
    CHECK(watch.calls == 5 && watch.remaining[0] == 4 && watch.remaining[4] == 0,
          "the observer is called before the first node and after each (%zu calls)", watch.calls);
    for (size_t call = 0; call < 5 && call < watch.calls; call++)
        for (int p = 0; p < 2; p++) {
            const size_t numel = p == 0 ? 9 : 6;
            const int final_now = memcmp(watch.grads[call][p],
                                         attn_params_data(store, watch.ids[p], ATTN_PARAM_GRADS),
                                         numel * sizeof(float)) == 0;
            const int promised =
                watch.remaining[call] <= attn_graph_param_first_node(g, watch.ids[p]);
            CHECK(final_now == promised,
                  "parameter %d with %zu nodes left: final %d, as its first read says %d", p,
                  watch.remaining[call], final_now, promised);
        }

    attn_graph_reset(g);
    CHECK(attn_graph_param_first_node(g, first) == SIZE_MAX, "a reset forgets the reads");
    watch.answer = ATTN_ERR_IO;
    CHECK_OK(attn_graph_input(g, 2, shape, x_data, 0, &x));
    CHECK_OK(attn_graph_param(g, first, &w1));
    CHECK_OK(attn_op_linear(g, x, w1, NULL, &h));
    CHECK_OK(attn_op_activation(g, h, ATTN_ACT_TANH, &t));
    attn_var *sum;
    CHECK_OK(attn_op_add(g, t, t, &sum));
    const float ones[6] = {1, 1, 1, 1, 1, 1};
    CHECK_FAILS(attn_graph_backward_from(g, sum, ones), ATTN_ERR_IO);
    attn_graph_destroy(g);
    attn_params_destroy(store);
}

static void test_custom_operation_and_errors(void)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    const float data[2] = {1, 2};
    attn_var *x = leaf(g, 2, data, 1), *y = NULL;
    const int64_t n = 2;
    CHECK_OK(attn_graph_new_var(g, 1, &n, 1, &y));
    memcpy(y->value.data, data, sizeof data);
    attn_var *inputs[2] = {NULL, x};
    CHECK(attn_graph_wants_grad(g, 2, inputs), "wants a gradient for x");
    CHECK_OK(attn_graph_record(g, y, bad_backward, NULL, "broken_op"));
    CHECK_FAILS(attn_graph_backward_from(g, y, data), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "broken_op") != NULL && strstr(attn_last_error(), "gemm"),
          "a failing backward names the op and the cause: %s", attn_last_error());
    attn_graph_reset(g);

    attn_var *v;
    CHECK_FAILS(attn_graph_create(NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_input(NULL, 1, &n, NULL, 0, &v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_input(g, 1, &n, NULL, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_input(g, 7, &n, NULL, 0, &v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_input(g, 1, NULL, NULL, 0, &v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_input(g, 1, &(int64_t){-1}, NULL, 0, &v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_input(g, 1, &n, NULL, 2, &v), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_graph_input(g, 0, NULL, data, 1, &v));
    CHECK(attn_tensor_numel(&v->value) == 1 && v->value.data[0] == 1.0f, "a scalar input");
    CHECK_OK(attn_graph_input(g, 1, &(int64_t){0}, NULL, 1, &v));
    CHECK_FAILS(attn_graph_backward(g, v), ATTN_ERR_INVALID_ARGUMENT);
    attn_var *two = leaf(g, 2, data, 1);
    CHECK_FAILS(attn_graph_backward(g, two), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "one element") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_graph_backward(g, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_backward_from(g, two, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_graph_record(g, two, NULL, NULL, "x"), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_set_recording(g, 0);
    CHECK_FAILS(attn_graph_record(g, two, bad_backward, NULL, "x"), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_graph_alloc(NULL, 8) == NULL, "alloc without a graph");
    attn_graph_destroy(g);
    attn_graph_destroy(NULL);
    attn_graph_reset(NULL);
}

int main(void)
{
    RUN_TEST(test_fan_out_accumulates);
    RUN_TEST(test_unreached_and_constant_inputs);
    RUN_TEST(test_recording_off_is_inference);
    RUN_TEST(test_parameter_gradients_live_in_the_store);
    RUN_TEST(test_arena_is_reused_across_steps);
    RUN_TEST(test_arena_settles_after_the_largest_step);
    RUN_TEST(test_dropout_follows_seed_step_and_order);
    RUN_TEST(test_operation_with_two_outputs);
    RUN_TEST(test_custom_operation_and_errors);
    RUN_TEST(test_backward_observer_and_first_reads);
    return test_summary();
}
