/* Looking at attention: the graph's attention observer sees every multi-head attention
 * operation in order with the weights attn_mha_forward gives, and
 * attn_model_attention_weights returns the map of the kind and layer asked for. The
 * cross-attention equals what the step decoder used at each step of the same target; a
 * layer whose query projection is zeroed gives uniform weights (over the source, or causal
 * over the prefix) in exactly the map named by its kind and layer and in no other; every
 * row is a distribution over the positions it may see; bad requests fail with a message. */
#include "attn/attn.h"
#include "harness.h"
#include "models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BOS = 1, SRC_LEN = 6, TGT_LEN = 5, HEADS = 2, D_MODEL = 8 };

/* Values U(-1, 1) everywhere, so that no map is uniform by accident. */
static const float VALUE_RANGE = 1.0f;

static const int32_t src[SRC_LEN] = {4, 5, 6, 7, 8, 4};
static const int32_t tgt[TGT_LEN] = {BOS, 5, 9, 3, 7};

static attn_model_config config_of(attn_model_arch arch)
{
    attn_model_config c = attn_model_config_default(arch);
    c.d_model = D_MODEL;
    c.num_heads = HEADS;
    c.ffn_dim = 12;
    c.encoder_layers = arch == ATTN_ARCH_TRANSFORMER_LM ? 0 : 2;
    c.decoder_layers = arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER ? 0 : 3;
    c.src_vocab = arch == ATTN_ARCH_TRANSFORMER_LM ? 0 : 10;
    c.tgt_vocab = arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER ? 0 : 11;
    c.num_classes = arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER ? 3 : 0;
    c.max_len = 16;
    c.dropout = 0.3; /* must not apply: the maps are inference's */
    return c;
}

static attn_graph *new_graph(attn_model *m)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    return g;
}

/* Zeroes the query projection (weights and bias) of one attention module: every score is
 * then 0 and the weights are uniform over the keys a query may see. */
static void zero_queries(attn_model *m, const char *module)
{
    attn_params *store = attn_model_params(m);
    char name[128];
    attn_param_id id;
    snprintf(name, sizeof name, "%s.in_proj_weight", module);
    CHECK_OK(attn_params_find(store, name, &id));
    memset(attn_params_data(store, id, ATTN_PARAM_VALUES), 0,
           sizeof(float) * (size_t)(D_MODEL * D_MODEL));
    snprintf(name, sizeof name, "%s.in_proj_bias", module);
    CHECK_OK(attn_params_find(store, name, &id));
    memset(attn_params_data(store, id, ATTN_PARAM_VALUES), 0, sizeof(float) * (size_t)D_MODEL);
}

/* Largest distance of the maps [HEADS, len_q, len_k] from uniform weights over the keys
 * each query may see (all, or j <= i when causal). */
static double distance_from_uniform(const float *w, int64_t len_q, int64_t len_k, int causal)
{
    double worst = 0.0;
    for (int64_t h = 0; h < HEADS; h++)
        for (int64_t i = 0; i < len_q; i++)
            for (int64_t j = 0; j < len_k; j++) {
                const int64_t seen = causal ? i + 1 : len_k;
                const double expected = j < seen ? 1.0 / (double)seen : 0.0;
                worst = fmax(worst, fabs((double)w[(h * len_q + i) * len_k + j] - expected));
            }
    return worst;
}

/* Every row sums to 1 and, when causal, is zero right of the diagonal. */
static int rows_are_distributions(const float *w, int64_t len_q, int64_t len_k, int causal)
{
    for (int64_t r = 0; r < HEADS * len_q; r++) {
        const int64_t i = r % len_q;
        double sum = 0.0;
        for (int64_t j = 0; j < len_k; j++) {
            const float x = w[r * len_k + j];
            if (!(x >= 0.0f) || (causal && j > i && x != 0.0f))
                return 0;
            sum += (double)x;
        }
        if (fabs(sum - 1.0) > 1e-5)
            return 0;
    }
    return 1;
}

/* ---- the observer ------------------------------------------------------------------------ */

typedef struct observed {
    int64_t calls, next_index;
    int in_order;
    int64_t shapes[8][4];
    attn_status answer;
} observed;

static attn_status record(void *ctx, int64_t index, const float *weights, int64_t batch,
                          int64_t heads, int64_t len_q, int64_t len_k)
{
    observed *o = ctx;
    o->in_order = o->in_order && index == o->next_index && weights != NULL;
    o->next_index = index + 1;
    if (o->calls < 8) {
        const int64_t shape[4] = {batch, heads, len_q, len_k};
        memcpy(o->shapes[o->calls], shape, sizeof shape);
    }
    o->calls++;
    return o->answer;
}

static void test_observer_sees_every_attention_in_order(void)
{
    attn_model_config c = config_of(ATTN_ARCH_TRANSFORMER);
    attn_model *m = new_model(&c, 3, VALUE_RANGE);
    attn_graph *g = new_graph(m);
    if (m == NULL || g == NULL)
        return;
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, 0);
    const int32_t src_lengths[2] = {SRC_LEN, 3}, tgt_lengths[2] = {TGT_LEN, 2};
    int32_t src2[2 * SRC_LEN], tgt2[2 * TGT_LEN];
    memcpy(src2, src, sizeof src);
    memcpy(src2 + SRC_LEN, src, sizeof src);
    memcpy(tgt2, tgt, sizeof tgt);
    memcpy(tgt2 + TGT_LEN, tgt, sizeof tgt);
    for (int round = 0; round < 2; round++) {
        observed o = {0, 0, 1, {{0}}, ATTN_OK};
        attn_graph_reset(g);
        attn_graph_set_attention_observer(g, record, &o);
        attn_var *memory = NULL, *logits = NULL;
        CHECK_OK(attn_model_encode(m, g, 2, SRC_LEN, src2, src_lengths, &memory));
        CHECK_OK(attn_model_decode(m, g, memory, src_lengths, 2, TGT_LEN, tgt2, TGT_LEN,
                                   tgt_lengths, &logits));
        CHECK(o.calls == 2 + 2 * 3 && o.in_order,
              "round %d: %lld calls (expected 8: 2 encoder, 3 x 2 decoder), indices from 0 in "
              "order after each reset: %d",
              round, (long long)o.calls, o.in_order);
        /* Encoder layers [2, 2, 6, 6]; each decoder layer self [2, 2, 5, 5], cross
         * [2, 2, 5, 6]. */
        int shapes_ok = 1;
        for (int k = 0; k < 8; k++) {
            const int decoder = k >= 2, cross = decoder && (k - 2) % 2 == 1;
            const int64_t len_q = decoder ? TGT_LEN : SRC_LEN;
            const int64_t len_k = decoder && !cross ? TGT_LEN : SRC_LEN;
            shapes_ok = shapes_ok && o.shapes[k][0] == 2 && o.shapes[k][1] == HEADS &&
                        o.shapes[k][2] == len_q && o.shapes[k][3] == len_k;
        }
        CHECK(shapes_ok, "round %d: each call gets its operation's [batch, heads, Lq, Lk]", round);
    }

    /* An observer's failure fails the operation; without an observer nothing is called. */
    observed refuse = {0, 0, 1, {{0}}, ATTN_ERR_IO};
    attn_graph_reset(g);
    attn_graph_set_attention_observer(g, record, &refuse);
    attn_var *memory = NULL;
    CHECK_FAILS(attn_model_encode(m, g, 2, SRC_LEN, src2, src_lengths, &memory), ATTN_ERR_IO);
    observed none = {0, 0, 1, {{0}}, ATTN_OK};
    attn_graph_reset(g);
    attn_graph_set_attention_observer(g, record, &none);
    attn_graph_set_attention_observer(g, NULL, &none);
    CHECK_OK(attn_model_encode(m, g, 2, SRC_LEN, src2, src_lengths, &memory));
    CHECK(none.calls == 0, "a removed observer is not called (%lld calls)", (long long)none.calls);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

/* The observed weights are attn_mha_forward's, head by head. */
typedef struct copied {
    float weights[2 * 3 * 3 * 4];
    int64_t calls;
} copied;

static attn_status copy_weights(void *ctx, int64_t index, const float *weights, int64_t batch,
                                int64_t heads, int64_t len_q, int64_t len_k)
{
    (void)index;
    copied *c = ctx;
    const int64_t n = batch * heads * len_q * len_k;
    if (n <= (int64_t)(sizeof c->weights / sizeof c->weights[0]))
        memcpy(c->weights, weights, (size_t)n * sizeof(float));
    c->calls++;
    return ATTN_OK;
}

/* rope_base > 0: the rotary operation, whose maps are those of the turned q and k. */
static void check_observer_weights(double rope_base)
{
    enum { B = 2, LQ = 3, LK = 4, E = 6, H = 3 };
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    if (g == NULL)
        return;
    attn_graph_set_recording(g, 0);
    float w_in[3 * E * E], b_in[3 * E], w_out[E * E], b_out[E], q[B * LQ * E], kv[B * LK * E];
    test_fill_uniform(w_in, 3 * E * E, -1, 1, 1);
    test_fill_uniform(b_in, 3 * E, -1, 1, 2);
    test_fill_uniform(w_out, E * E, -1, 1, 3);
    test_fill_uniform(b_out, E, -1, 1, 4);
    test_fill_uniform(q, B * LQ * E, -1, 1, 5);
    test_fill_uniform(kv, B * LK * E, -1, 1, 6);
    const int64_t s_w_in[2] = {3 * E, E}, s_b_in[1] = {3 * E}, s_w_out[2] = {E, E};
    const int64_t s_b_out[1] = {E}, s_q[3] = {B, LQ, E}, s_kv[3] = {B, LK, E};
    attn_var *vw_in = NULL, *vb_in = NULL, *vw_out = NULL, *vb_out = NULL, *vq = NULL;
    attn_var *vkv = NULL, *out = NULL;
    CHECK_OK(attn_graph_input(g, 2, s_w_in, w_in, 0, &vw_in));
    CHECK_OK(attn_graph_input(g, 1, s_b_in, b_in, 0, &vb_in));
    CHECK_OK(attn_graph_input(g, 2, s_w_out, w_out, 0, &vw_out));
    CHECK_OK(attn_graph_input(g, 1, s_b_out, b_out, 0, &vb_out));
    CHECK_OK(attn_graph_input(g, 3, s_q, q, 0, &vq));
    CHECK_OK(attn_graph_input(g, 3, s_kv, kv, 0, &vkv));
    const int32_t key_lengths[B] = {4, 2};
    const attn_attention_mask mask = {key_lengths, 0};
    const attn_mha_vars params = {vw_in, vb_in, vw_out, vb_out};
    copied seen;
    memset(&seen, 0, sizeof seen);
    attn_graph_set_attention_observer(g, copy_weights, &seen);
    if (rope_base > 0.0)
        CHECK_OK(attn_op_multi_head_attention_rotary(g, &params, H, rope_base, vq, vkv, vkv, &mask,
                                                     &out));
    else
        CHECK_OK(attn_op_multi_head_attention(g, &params, H, vq, vkv, vkv, &mask, &out));

    /* The same attention straight from the kernel, weights per head. */
    uint8_t padding[B * LK];
    for (int b = 0; b < B; b++)
        for (int j = 0; j < LK; j++)
            padding[b * LK + j] = j >= key_lengths[b];
    attn_sdpa_options options = attn_sdpa_default_options();
    options.key_padding_mask = padding;
    const attn_mha_dims dims = {B, LQ, LK, E, H, 0, 0, rope_base};
    attn_mha_buffer_sizes sizes;
    CHECK_OK(attn_mha_sizes(&dims, &sizes));
    float *saved = test_alloc(sizeof(float) * (sizes.saved_floats + 1));
    float expected_out[B * LQ * E], expected[B * H * LQ * LK];
    const attn_mha_params raw = {.in_proj_weight = w_in,
                                 .in_proj_bias = b_in,
                                 .out_proj_weight = w_out,
                                 .out_proj_bias = b_out};
    CHECK_OK(
        attn_mha_forward(&dims, &raw, q, kv, kv, &options, expected_out, expected, 0, saved, NULL));
    CHECK(seen.calls == 1, "one call for one operation (%lld)", (long long)seen.calls);
    CHECK(test_max_abs_diff(seen.weights, expected, B * H * LQ * LK) == 0.0,
          "the observer sees attn_mha_forward's per-head weights (max diff %g)",
          test_max_abs_diff(seen.weights, expected, B * H * LQ * LK));
    CHECK(out != NULL && test_max_abs_diff(out->value.data, expected_out, B * LQ * E) == 0.0,
          "observing leaves the output as it is");
    free(saved);
    attn_graph_destroy(g);
}

static void test_observer_weights_are_the_operations(void)
{
    check_observer_weights(0.0);
    check_observer_weights(10000.0);
}

/* ---- attn_model_attention_weights ------------------------------------------------------- */

/* The step decoder's cross-attention at each step of tgt, for every layer and head, against
 * the teacher-forced maps. */
static void test_cross_attention_is_the_step_decoders(void)
{
    attn_model_config c = config_of(ATTN_ARCH_TRANSFORMER);
    attn_model *m = new_model(&c, 5, VALUE_RANGE);
    attn_graph *g = new_graph(m);
    if (m == NULL || g == NULL)
        return;
    const int64_t layers = c.decoder_layers, maps = layers * HEADS;
    float steps[TGT_LEN][3 * HEADS][SRC_LEN], logits[11];
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, 0);
    attn_var *memory = NULL;
    const int32_t src_length = SRC_LEN;
    CHECK_OK(attn_model_encode(m, g, 1, SRC_LEN, src, &src_length, &memory));
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_model_step_start(m, g, memory, &src_length, 1, TGT_LEN, &d));
    for (int t = 0; t < TGT_LEN && d != NULL; t++)
        CHECK_OK(attn_model_step(d, &tgt[t], logits, &steps[t][0][0]));
    attn_model_step_destroy(d);
    CHECK(maps == 3 * HEADS, "maps");

    attn_graph_set_recording(g, 1);
    attn_graph_set_training(g, 1);
    double worst = 0.0;
    for (int64_t l = 0; l < layers; l++) {
        float w[HEADS * TGT_LEN * SRC_LEN];
        CHECK_OK(attn_model_attention_weights(m, g, src, SRC_LEN, tgt, TGT_LEN,
                                              ATTN_CROSS_ATTENTION, l, w));
        for (int64_t h = 0; h < HEADS; h++)
            for (int t = 0; t < TGT_LEN; t++)
                for (int j = 0; j < SRC_LEN; j++)
                    worst = fmax(worst, fabs((double)w[(h * TGT_LEN + t) * SRC_LEN + j] -
                                             (double)steps[t][l * HEADS + h][j]));
    }
    CHECK(worst < 1e-5, "teacher-forced cross-attention equals the step decoder's (%g)", worst);
    CHECK(attn_graph_is_recording(g) && attn_graph_is_training(g),
          "the graph's modes are given back");
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

/* With one layer's query projection zeroed, exactly the map of that kind and layer is
 * uniform: the index of the operation is the one the kind and layer name. */
static void check_zeroed_module(attn_model_arch arch, const char *module,
                                attn_attention_kind zeroed_kind, int64_t zeroed_layer)
{
    attn_model_config c = config_of(arch);
    attn_model *m = new_model(&c, 7, VALUE_RANGE);
    attn_graph *g = new_graph(m);
    if (m == NULL || g == NULL)
        return;
    zero_queries(m, module);
    const attn_attention_kind kinds[3] = {ATTN_ENCODER_SELF_ATTENTION, ATTN_DECODER_SELF_ATTENTION,
                                          ATTN_CROSS_ATTENTION};
    for (int k = 0; k < 3; k++) {
        const attn_attention_kind kind = kinds[k];
        const int has = kind == ATTN_ENCODER_SELF_ATTENTION ? arch != ATTN_ARCH_TRANSFORMER_LM
                        : kind == ATTN_DECODER_SELF_ATTENTION
                            ? arch != ATTN_ARCH_TRANSFORMER_CLASSIFIER
                            : arch == ATTN_ARCH_TRANSFORMER;
        const int64_t layers =
            kind == ATTN_ENCODER_SELF_ATTENTION ? c.encoder_layers : c.decoder_layers;
        const int64_t len_q = kind == ATTN_ENCODER_SELF_ATTENTION ? SRC_LEN : TGT_LEN;
        const int64_t len_k = kind == ATTN_DECODER_SELF_ATTENTION ? TGT_LEN : SRC_LEN;
        const int causal = kind == ATTN_DECODER_SELF_ATTENTION;
        const int32_t *s = arch == ATTN_ARCH_TRANSFORMER_LM ? NULL : src;
        const int32_t *t = arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER ? NULL : tgt;
        float w[HEADS * TGT_LEN * TGT_LEN + HEADS * SRC_LEN * SRC_LEN];
        if (!has) {
            CHECK_FAILS(attn_model_attention_weights(m, g, s, SRC_LEN, t, TGT_LEN, kind, 0, w),
                        ATTN_ERR_INVALID_ARGUMENT);
            continue;
        }
        for (int64_t l = 0; l < layers; l++) {
            CHECK_OK(attn_model_attention_weights(m, g, s, SRC_LEN, t, TGT_LEN, kind, l, w));
            const double off = distance_from_uniform(w, len_q, len_k, causal);
            const int is_zeroed = kind == zeroed_kind && l == zeroed_layer;
            CHECK(rows_are_distributions(w, len_q, len_k, causal),
                  "%s zeroed, kind %d layer %lld: rows are distributions%s", module, (int)kind,
                  (long long)l, causal ? ", zero right of the diagonal" : "");
            CHECK(is_zeroed ? off < 1e-7 : off > 2e-5,
                  "%s zeroed, kind %d layer %lld: %s uniform (distance %g)", module, (int)kind,
                  (long long)l, is_zeroed ? "is" : "is not", off);
        }
        CHECK_FAILS(attn_model_attention_weights(m, g, s, SRC_LEN, t, TGT_LEN, kind, layers, w),
                    ATTN_ERR_INVALID_ARGUMENT);
    }
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_kind_and_layer_name_the_map(void)
{
    check_zeroed_module(ATTN_ARCH_TRANSFORMER, "encoder.layers.1.self_attn",
                        ATTN_ENCODER_SELF_ATTENTION, 1);
    check_zeroed_module(ATTN_ARCH_TRANSFORMER, "decoder.layers.0.self_attn",
                        ATTN_DECODER_SELF_ATTENTION, 0);
    check_zeroed_module(ATTN_ARCH_TRANSFORMER, "decoder.layers.2.self_attn",
                        ATTN_DECODER_SELF_ATTENTION, 2);
    check_zeroed_module(ATTN_ARCH_TRANSFORMER, "decoder.layers.1.multihead_attn",
                        ATTN_CROSS_ATTENTION, 1);
    check_zeroed_module(ATTN_ARCH_TRANSFORMER_CLASSIFIER, "encoder.layers.0.self_attn",
                        ATTN_ENCODER_SELF_ATTENTION, 0);
    check_zeroed_module(ATTN_ARCH_TRANSFORMER_LM, "decoder.layers.1.self_attn",
                        ATTN_DECODER_SELF_ATTENTION, 1);
}

static void test_bad_requests(void)
{
    attn_model_config c = config_of(ATTN_ARCH_TRANSFORMER);
    attn_model *m = new_model(&c, 9, VALUE_RANGE);
    attn_graph *g = new_graph(m);
    float w[HEADS * TGT_LEN * SRC_LEN];
    if (m == NULL || g == NULL)
        return;
    CHECK_FAILS(attn_model_attention_weights(m, g, src, SRC_LEN, tgt, TGT_LEN, ATTN_CROSS_ATTENTION,
                                             0, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_attention_weights(m, g, src, SRC_LEN, tgt, TGT_LEN,
                                             (attn_attention_kind)7, 0, w),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_attention_weights(m, g, src, SRC_LEN, tgt, TGT_LEN,
                                             ATTN_ENCODER_SELF_ATTENTION, -1, w),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(
        attn_model_attention_weights(m, g, src, SRC_LEN, tgt, 0, ATTN_CROSS_ATTENTION, 0, w),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(
        attn_model_attention_weights(m, g, src, SRC_LEN, NULL, TGT_LEN, ATTN_CROSS_ATTENTION, 0, w),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_attention_weights(m, g, src, 40, tgt, TGT_LEN,
                                             ATTN_ENCODER_SELF_ATTENTION, 0, w),
                ATTN_ERR_INVALID_ARGUMENT); /* past max_len */
    attn_graph *foreign = NULL;
    CHECK_OK(attn_graph_create(NULL, &foreign));
    CHECK_FAILS(attn_model_attention_weights(m, foreign, src, SRC_LEN, tgt, TGT_LEN,
                                             ATTN_CROSS_ATTENTION, 0, w),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(foreign);
    attn_graph_destroy(g);
    attn_model_destroy(m);

    attn_model_config r = attn_model_config_default(ATTN_ARCH_RNN);
    r.src_vocab = 10;
    r.tgt_vocab = 11;
    r.hidden = 4;
    r.embedding_dim = 4;
    r.attention_dim = 4;
    r.max_len = 16;
    m = new_model(&r, 11, VALUE_RANGE);
    g = new_graph(m);
    if (m != NULL && g != NULL)
        CHECK_FAILS(attn_model_attention_weights(m, g, src, SRC_LEN, tgt, TGT_LEN,
                                                 ATTN_CROSS_ATTENTION, 0, w),
                    ATTN_ERR_UNSUPPORTED);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static const float *param_values(attn_model *m, const char *name)
{
    attn_params *store = attn_model_params(m);
    attn_param_id id;
    CHECK_OK(attn_params_find(store, name, &id));
    return attn_params_data(store, id, ATTN_PARAM_VALUES);
}

/* Attention pooling's weights are softmax_t(tanh(W h_t + b) . q) over the encoder's states,
 * recomputed here in double from the parameters; mean pooling's are 1/n. */
static void test_pooling_weights_of_attention_and_mean(void)
{
    attn_model_config c = config_of(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.pooling = ATTN_POOLING_ATTENTION;
    attn_model *m = new_model(&c, 11, VALUE_RANGE);
    attn_graph *g = new_graph(m);
    if (m == NULL || g == NULL)
        return;
    float weights[SRC_LEN];
    CHECK_OK(attn_model_pooling_weights(m, g, src, SRC_LEN, weights));
    attn_var *memory = NULL;
    const int32_t length = SRC_LEN;
    attn_graph_set_training(g, 0);
    CHECK_OK(attn_model_encode(m, g, 1, SRC_LEN, src, &length, &memory));
    const float *w = param_values(m, "pooling.proj.weight");
    const float *b = param_values(m, "pooling.proj.bias");
    const float *q = param_values(m, "pooling.query");
    double scores[SRC_LEN], most = -INFINITY, total = 0.0;
    for (int t = 0; t < SRC_LEN; t++) {
        const float *h = memory->value.data + t * D_MODEL;
        scores[t] = 0.0;
        for (int o = 0; o < D_MODEL; o++) {
            double u = b[o];
            for (int i = 0; i < D_MODEL; i++)
                u += (double)w[o * D_MODEL + i] * h[i];
            scores[t] += tanh(u) * q[o];
        }
        most = fmax(most, scores[t]);
    }
    for (int t = 0; t < SRC_LEN; t++)
        total += exp(scores[t] - most);
    double worst = 0.0, sum = 0.0;
    for (int t = 0; t < SRC_LEN; t++) {
        worst = fmax(worst, fabs(weights[t] - exp(scores[t] - most) / total));
        sum += weights[t];
    }
    CHECK(worst < 1e-5, "attention pooling's weights are the learned query's softmax (%g)", worst);
    CHECK(fabs(sum - 1.0) < 1e-5, "they sum to 1 (%g)", sum);
    attn_graph_reset(g);
    attn_graph_destroy(g);
    attn_model_destroy(m);

    c.pooling = ATTN_POOLING_MEAN;
    m = new_model(&c, 12, VALUE_RANGE);
    g = new_graph(m);
    if (m == NULL || g == NULL)
        return;
    CHECK_OK(attn_model_pooling_weights(m, g, src, 4, weights));
    for (int t = 0; t < 4; t++)
        CHECK(weights[t] == 0.25f, "mean pooling weighs token %d 1/4 (%g)", t, weights[t]);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

/* "cls": with the last encoder layer's queries zeroed, the classification token attends
 * uniformly over itself and the text, so each text token has 1/(n + 1); with them as drawn,
 * the weights are a distribution short of the token's weight on itself. */
static void test_pooling_weights_of_the_classification_token(void)
{
    attn_model_config c = config_of(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.pooling = ATTN_POOLING_CLS;
    attn_model *m = new_model(&c, 13, VALUE_RANGE);
    attn_graph *g = new_graph(m);
    if (m == NULL || g == NULL)
        return;
    float weights[SRC_LEN];
    CHECK_OK(attn_model_pooling_weights(m, g, src, SRC_LEN, weights));
    double sum = 0.0;
    int in_range = 1;
    for (int t = 0; t < SRC_LEN; t++) {
        sum += weights[t];
        in_range &= weights[t] > 0.0f && weights[t] < 1.0f;
    }
    CHECK(in_range && sum < 1.0, "each weight in (0, 1), their sum below 1 (%g)", sum);
    /* They are the classification token's row (not another token's) of the last layer's map
     * over <s> and the text, its heads averaged, without its own column. */
    int32_t read[SRC_LEN + 1] = {ATTN_MODEL_CLS_ID};
    memcpy(read + 1, src, sizeof src);
    enum { LEN = SRC_LEN + 1 };
    float maps[HEADS * LEN * LEN];
    CHECK_OK(attn_model_attention_weights(m, g, read, LEN, NULL, 0, ATTN_ENCODER_SELF_ATTENTION,
                                          1, maps));
    double worst_row = 0.0;
    for (int t = 0; t < SRC_LEN; t++) {
        double mean = 0.0;
        for (int h = 0; h < HEADS; h++)
            mean += maps[h * LEN * LEN + 1 + t] / HEADS;
        worst_row = fmax(worst_row, fabs(weights[t] - mean));
    }
    CHECK(worst_row < 1e-6, "the classification token's row of the last layer (%g)", worst_row);
    zero_queries(m, "encoder.layers.1.self_attn");
    CHECK_OK(attn_model_pooling_weights(m, g, src, SRC_LEN, weights));
    double worst = 0.0;
    for (int t = 0; t < SRC_LEN; t++)
        worst = fmax(worst, fabs(weights[t] - 1.0 / (SRC_LEN + 1)));
    CHECK(worst < 1e-6, "zeroed queries weigh every token 1/(n + 1) (%g)", worst);
    CHECK(attn_model_pooling_weights(m, g, src, c.max_len, weights) == ATTN_ERR_INVALID_ARGUMENT,
          "a text leaving no room for the classification token is refused");
    attn_graph_destroy(g);
    attn_model_destroy(m);

    attn_model_config lm = config_of(ATTN_ARCH_TRANSFORMER_LM);
    m = new_model(&lm, 14, VALUE_RANGE);
    g = new_graph(m);
    if (m == NULL || g == NULL)
        return;
    CHECK(attn_model_pooling_weights(m, g, src, SRC_LEN, weights) == ATTN_ERR_INVALID_ARGUMENT &&
              strstr(attn_last_error(), "classifier") != NULL,
          "a language model has no pooling: %s", attn_last_error());
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

int main(void)
{
    RUN_TEST(test_observer_sees_every_attention_in_order);
    RUN_TEST(test_observer_weights_are_the_operations);
    RUN_TEST(test_cross_attention_is_the_step_decoders);
    RUN_TEST(test_kind_and_layer_name_the_map);
    RUN_TEST(test_bad_requests);
    RUN_TEST(test_pooling_weights_of_attention_and_mean);
    RUN_TEST(test_pooling_weights_of_the_classification_token);
    return test_summary();
}
