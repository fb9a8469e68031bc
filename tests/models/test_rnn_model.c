/* The RNN encoder-decoders (arch "rnn"): config JSON, parameter names, whole-model gradients
 * against finite differences for every attention variant, every instruction set against the
 * reference with identical reruns, padding, step-by-step decoding against teacher forcing,
 * beam reordering, reversed sources, save/load, arena reuse, and argument checks. The
 * copy/reverse/sort learnability tests are in test_rnn_learn.c. */
#include "../autodiff/autodiff_testing.h"
#include "models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BOS = 1, EOS = 2 };

static attn_model_config tiny_config(attn_rnn_attention attention)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.src_vocab = 9;
    c.tgt_vocab = 11;
    c.hidden = 3;
    c.embedding_dim = 4;
    c.attention_dim = 5;
    c.layers = 1;
    c.dropout = 0.0;
    c.label_smoothing = 0.1;
    c.max_len = 16;
    c.attention = attention;
    c.bidirectional = attention != ATTN_RNN_LUONG_DOT;
    return c;
}

/* 3 sentences with padding in source and target; one source is empty. */
enum { BATCH = 3, SRC_LEN = 5, TGT_LEN = 6 };
static const int32_t batch_src[BATCH * SRC_LEN] = {4,      5, 6, 7, 8, /**/ 5, 3, 0, 0, 0,
                                                   /**/ 0, 0, 0, 0, 0};
static const int32_t batch_src_lengths[BATCH] = {5, 2, 0};
static const int32_t batch_tgt[BATCH * TGT_LEN] = {1,      4, 9, 10, 5, 2, /**/ 1, 6, 2, 0, 0, 0,
                                                   /**/ 1, 7, 7, 8,  2, 0};
static const int32_t batch_tgt_lengths[BATCH] = {6, 3, 5};

static attn_model_batch fixed_batch(void)
{
    attn_model_batch b = {
        BATCH, SRC_LEN, batch_src, batch_src_lengths, TGT_LEN, batch_tgt, batch_tgt_lengths, NULL,
        NULL,  0,       0.0,     NULL};
    return b;
}

/* ---- config ------------------------------------------------------------------------------ */

static void test_config_json(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    CHECK(c.arch == ATTN_ARCH_RNN && c.attention == ATTN_RNN_BAHDANAU && c.bidirectional == 1 &&
              c.d_model == 0 && c.num_heads == 0 && c.hidden == 256,
          "rnn defaults");
    c.src_vocab = 20;
    c.tgt_vocab = 30;
    c.cell = ATTN_RNN_LSTM;
    c.layers = 2;
    c.attention = ATTN_RNN_LUONG_CONCAT;
    c.local = ATTN_RNN_LOCAL_P;
    c.window = 3;
    c.input_feeding = 1;
    c.reverse_source = 1;
    char *json = NULL;
    CHECK_OK(attn_model_config_to_json(&c, &json));
    CHECK(json != NULL && strstr(json, "\"arch\":\"rnn\"") && strstr(json, "\"cell\":\"lstm\"") &&
              strstr(json, "\"attention\":\"luong-concat\"") && strstr(json, "\"local\":\"p\"") &&
              strstr(json, "\"input_feeding\":true") && !strstr(json, "d_model") &&
              !strstr(json, "layer_norm_eps") && !strstr(json, "num_heads"),
          "rnn fields only: %s", json ? json : "(null)");
    attn_model_config back;
    CHECK_OK(attn_model_config_from_json(json, &back));
    CHECK(memcmp(&back, &c, sizeof c) == 0, "every field survives JSON");
    free(json);

    CHECK_OK(attn_model_config_from_json(
        "{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":6,\"attention\":\"none\","
        "\"reverse_source\":true,\"bidirectional\":false}",
        &back));
    CHECK(back.attention == ATTN_RNN_NO_ATTENTION && back.reverse_source && back.hidden == 256,
          "missing fields take the defaults");

    const struct {
        const char *json;
        attn_status status;
        const char *mentions;
    } bad[] = {
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"d_model\":8}",
         ATTN_ERR_FORMAT, "d_model"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,\"hidden\":8}",
         ATTN_ERR_FORMAT, "hidden"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"cell\":\"rnn\"}",
         ATTN_ERR_FORMAT, "\"gru\" or \"lstm\""},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"attention\":\"luong\"}",
         ATTN_ERR_FORMAT, "luong-general"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"local\":\"q\"}",
         ATTN_ERR_FORMAT, "local"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"attention\":\"luong-dot\"}",
         ATTN_ERR_INVALID_ARGUMENT, "luong-dot"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"local\":\"m\"}",
         ATTN_ERR_INVALID_ARGUMENT, "Luong"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"attention\":\"none\","
         "\"input_feeding\":true}",
         ATTN_ERR_INVALID_ARGUMENT, "input_feeding"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"window\":0}",
         ATTN_ERR_INVALID_ARGUMENT, "window"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"layers\":2000}",
         ATTN_ERR_INVALID_ARGUMENT, "layers"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"hidden\":0}",
         ATTN_ERR_INVALID_ARGUMENT, "hidden"},
        {"{\"version\":1,\"arch\":\"rnn\",\"tgt_vocab\":5}", ATTN_ERR_INVALID_ARGUMENT,
         "src_vocab"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"dropout\":-0.1}",
         ATTN_ERR_INVALID_ARGUMENT, "dropout"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_FAILS(attn_model_config_from_json(bad[i].json, &back), bad[i].status);
        CHECK(strstr(attn_last_error(), bad[i].mentions) != NULL,
              "case %zu: message mentions '%s': %s", i, bad[i].mentions, attn_last_error());
    }
    c = tiny_config(ATTN_RNN_BAHDANAU);
    c.d_model = 8;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.src_vocab = c.tgt_vocab = 5;
    c.bidirectional = 1;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "bidirectional") != NULL, "%s", attn_last_error());
}

/* ---- names ------------------------------------------------------------------------------- */

static int shape_is(attn_model *m, const char *name, int ndim, int64_t d0, int64_t d1)
{
    attn_params *store = attn_model_params(m);
    attn_param_id id;
    attn_param_info info;
    if (attn_params_find(store, name, &id) != ATTN_OK ||
        attn_params_info(store, id, &info) != ATTN_OK) {
        attn_clear_error();
        return 0;
    }
    return info.ndim == ndim && info.shape[0] == d0 && (ndim == 1 || info.shape[1] == d1);
}

static void test_parameter_names(void)
{
    /* Bahdanau: H = 3, E = 4, A = 6, da = 5, 2 layers. */
    attn_model_config c = tiny_config(ATTN_RNN_BAHDANAU);
    c.layers = 2;
    attn_model *m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(shape_is(m, "src_embed.weight", 2, 9, 4) && shape_is(m, "tgt_embed.weight", 2, 11, 4) &&
              shape_is(m, "encoder.weight_ih_l0", 2, 9, 4) &&
              shape_is(m, "encoder.weight_ih_l1_reverse", 2, 9, 6) &&
              shape_is(m, "encoder.bias_hh_l1_reverse", 1, 9, 0) &&
              shape_is(m, "bridge.1.weight", 2, 3, 3) && shape_is(m, "bridge.0.bias", 1, 3, 0) &&
              shape_is(m, "decoder.0.weight_ih", 2, 9, 4 + 6) &&
              shape_is(m, "decoder.1.weight_ih", 2, 9, 3) &&
              shape_is(m, "attention.query_proj.weight", 2, 5, 3) &&
              shape_is(m, "attention.key_proj.weight", 2, 5, 6) &&
              shape_is(m, "attention.v", 1, 5, 0) &&
              shape_is(m, "generator.weight", 2, 11, 3 + 4 + 6) &&
              shape_is(m, "generator.bias", 1, 11, 0),
          "Bahdanau model names and shapes");
    /* 2 embeddings + 16 encoder + 4 bridge + 8 decoder + 4 attention + 2 generator */
    CHECK(attn_params_count(attn_model_params(m)) == 36, "count %zu",
          attn_params_count(attn_model_params(m)));
    attn_model_destroy(m);

    c = tiny_config(ATTN_RNN_LUONG_CONCAT);
    c.cell = ATTN_RNN_LSTM;
    c.local = ATTN_RNN_LOCAL_P;
    c.input_feeding = 1;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(shape_is(m, "decoder.0.weight_ih", 2, 12, 4 + 3) &&
              shape_is(m, "attention.weight", 2, 5, 3 + 6) && shape_is(m, "attention.v", 1, 5, 0) &&
              shape_is(m, "attention.predict_weight", 2, 5, 3) &&
              shape_is(m, "attention.predict_v", 1, 5, 0) &&
              shape_is(m, "combine.weight", 2, 3, 6 + 3) &&
              shape_is(m, "generator.weight", 2, 11, 3),
          "Luong model names and shapes");
    CHECK(attn_params_count(attn_model_params(m)) == 2 + 8 + 2 + 4 + 4 + 1 + 2, "count %zu",
          attn_params_count(attn_model_params(m)));
    attn_model_destroy(m);

    c = tiny_config(ATTN_RNN_NO_ATTENTION);
    c.bidirectional = 0;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(shape_is(m, "decoder.0.weight_ih", 2, 9, 4 + 3) &&
              shape_is(m, "generator.weight", 2, 11, 3 + 4 + 3) &&
              !shape_is(m, "bridge.0.weight", 2, 3, 3),
          "the attention-less model has no bridge and reads [y; u]");
    CHECK(attn_params_count(attn_model_params(m)) == 2 + 4 + 4 + 2, "count %zu",
          attn_params_count(attn_model_params(m)));
    attn_model_destroy(m);
}

/* ---- gradients --------------------------------------------------------------------------- */

/* Values U(-0.5, 0.5) everywhere (nonzero biases) for gradient checks. */
static void randomise(attn_model *m, uint64_t seed)
{
    attn_params *store = attn_model_params(m);
    test_fill_uniform(attn_params_buffer(store, ATTN_PARAM_VALUES),
                      attn_params_buffer_floats(store), -0.5f, 0.5f, seed);
}

typedef struct variant {
    const char *name;
    attn_model_config config;
} variant;

static int make_variants(variant *v)
{
    int n = 0;
    attn_model_config c = tiny_config(ATTN_RNN_BAHDANAU);
    c.layers = 2;
    v[n++] = (variant){"Bahdanau, GRU, 2 bidirectional layers", c};
    c = tiny_config(ATTN_RNN_LUONG_GENERAL);
    c.cell = ATTN_RNN_LSTM;
    c.layers = 2;
    c.bidirectional = 0;
    c.local = ATTN_RNN_LOCAL_M;
    c.window = 1;
    c.input_feeding = 1;
    v[n++] = (variant){"Luong general, LSTM, local-m, input feeding", c};
    c = tiny_config(ATTN_RNN_LUONG_CONCAT);
    c.local = ATTN_RNN_LOCAL_P;
    c.window = 2;
    v[n++] = (variant){"Luong concat, GRU, bidirectional, local-p", c};
    c = tiny_config(ATTN_RNN_LUONG_DOT);
    c.cell = ATTN_RNN_LSTM;
    c.input_feeding = 1;
    v[n++] = (variant){"Luong dot, LSTM, global", c};
    c = tiny_config(ATTN_RNN_NO_ATTENTION);
    c.cell = ATTN_RNN_LSTM;
    c.layers = 2;
    c.bidirectional = 0;
    c.reverse_source = 1;
    v[n++] = (variant){"no attention, LSTM, 2 layers, reversed source", c};
    c = tiny_config(ATTN_RNN_NO_ATTENTION);
    v[n++] = (variant){"no attention, GRU, bidirectional", c};
    return n;
}

static void check_model_gradients(const char *what, attn_model_config c, int training)
{
    attn_model *m = new_model(&c, 2, MODEL_OWN_INIT);
    randomise(m, 3);
    model_ctx ctx = {m, fixed_batch()};
    ad_problem p = {what, 0, NULL, attn_model_params(m), build_loss, &ctx, training, 6};
    CHECK(ad_check_problem(&p, 1e-2, 1e-3, 1e-2), "%s: loss gradients match finite differences",
          what);
    attn_model_destroy(m);
}

static void test_model_gradients_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    variant v[8];
    int n = make_variants(v);
    for (int i = 0; i < n; i++)
        check_model_gradients(v[i].name, v[i].config, 0);
    attn_model_config c = v[0].config;
    c.dropout = 0.3;
    check_model_gradients("Bahdanau with dropout, training", c, 1);
    c = v[1].config;
    c.dropout = 0.3;
    check_model_gradients("Luong with dropout, training", c, 1);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

static void test_every_isa_matches_the_reference(void)
{
    CHECK_OK(attn_set_num_threads(2));
    variant v[8];
    int n = make_variants(v);
    for (int i = 0; i < n; i++) {
        attn_model_config c = v[i].config;
        c.hidden = 17; /* odd sizes: vector tails */
        c.embedding_dim = 7;
        c.attention_dim = 9;
        attn_model *m = new_model(&c, 4, MODEL_OWN_INIT);
        const attn_model_batch batch = fixed_batch();
        size_t count;
        float *reference = logits_and_grads(m, &batch, ATTN_ISA_REFERENCE, &count);
        double *as_double = test_alloc(count * sizeof(double));
        for (size_t j = 0; j < count; j++)
            as_double[j] = reference[j];
        const attn_isa isas[] = {ATTN_ISA_PORTABLE, ATTN_ISA_AVX2, ATTN_ISA_AVX512,
                                 ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
        for (int k = 0; k < (int)(sizeof isas / sizeof isas[0]); k++) {
            if (!attn_isa_supported(isas[k]))
                continue;
            size_t n1, n2;
            float *first = logits_and_grads(m, &batch, isas[k], &n1);
            float *second = logits_and_grads(m, &batch, isas[k], &n2);
            char what[160];
            snprintf(what, sizeof what, "%s at %s", v[i].name, attn_isa_name(isas[k]));
            CHECK_ARRAYS_CLOSE(what, first, as_double, count, 2e-5, 1e-3);
            CHECK(n1 == count && n2 == count && memcmp(first, second, count * sizeof(float)) == 0,
                  "%s: identical bits twice", what);
            free(first);
            free(second);
        }
        free(as_double);
        free(reference);
        attn_model_destroy(m);
    }
    CHECK_OK(attn_set_num_threads(0));
}

/* ---- padding, steps, reordering, reversal -----------------------------------------------------
 */

static float *logits_of(attn_model *m, const attn_model_batch *batch, size_t *count)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, 0);
    attn_var *logits = NULL;
    CHECK_OK(attn_model_forward_logits(m, g, batch, &logits));
    *count = logits ? (size_t)attn_tensor_numel(&logits->value) : 0;
    float *copy = test_alloc(*count * sizeof(float) + 1);
    if (logits != NULL)
        memcpy(copy, logits->value.data, *count * sizeof(float));
    CHECK(attn_graph_node_count(g) == 0, "inference records nothing");
    attn_graph_destroy(g);
    return copy;
}

/* Largest difference over the rows that predict real target tokens. */
static double real_rows_diff(const float *a, const float *b, const int32_t *tgt_lengths,
                             int64_t size, int64_t steps, int64_t vocab)
{
    double worst = 0.0;
    for (int64_t r = 0; r < size; r++)
        for (int64_t t = 0; t + 1 < tgt_lengths[r]; t++)
            for (int64_t v = 0; v < vocab; v++) {
                int64_t i = (r * steps + t) * vocab + v;
                worst = fmax(worst, fabs((double)a[i] - (double)b[i]));
            }
    return worst;
}

static void test_padding_and_neighbours_are_invisible(void)
{
    variant v[8];
    int n = make_variants(v);
    for (int i = 0; i < n; i++) {
        attn_model *m = new_model(&v[i].config, 5, MODEL_OWN_INIT);
        attn_model_batch batch = fixed_batch();
        size_t count;
        float *base = logits_of(m, &batch, &count);

        /* Other values at every padding position of source and target. */
        int32_t src[BATCH * SRC_LEN], tgt[BATCH * TGT_LEN];
        memcpy(src, batch_src, sizeof src);
        memcpy(tgt, batch_tgt, sizeof tgt);
        for (int b = 0; b < BATCH; b++) {
            for (int t = batch_src_lengths[b]; t < SRC_LEN; t++)
                src[b * SRC_LEN + t] = 8 - t;
            for (int t = batch_tgt_lengths[b]; t < TGT_LEN; t++)
                tgt[b * TGT_LEN + t] = 3 + t;
        }
        attn_model_batch other = batch;
        other.src = src;
        other.tgt = tgt;
        size_t n2;
        float *padded = logits_of(m, &other, &n2);
        CHECK(n2 == count &&
                  real_rows_diff(base, padded, batch_tgt_lengths, BATCH, TGT_LEN - 1, 11) == 0.0,
              "%s: padding values change nothing", v[i].name);

        /* A longer padded source. */
        enum { LONGER = SRC_LEN + 3 };
        int32_t wide[BATCH * LONGER];
        memset(wide, 0, sizeof wide);
        for (int b = 0; b < BATCH; b++)
            memcpy(wide + b * LONGER, batch_src + b * SRC_LEN, SRC_LEN * sizeof(int32_t));
        other = batch;
        other.src = wide;
        other.src_len = LONGER;
        float *longer = logits_of(m, &other, &n2);
        CHECK(n2 == count &&
                  real_rows_diff(base, longer, batch_tgt_lengths, BATCH, TGT_LEN - 1, 11) < 1e-6,
              "%s: more source padding changes nothing", v[i].name);

        /* Sentence 1 alone gives its logits in the batch. */
        other = batch;
        other.size = 1;
        other.src = batch_src + SRC_LEN;
        other.src_lengths = batch_src_lengths + 1;
        other.tgt = batch_tgt + TGT_LEN;
        other.tgt_lengths = batch_tgt_lengths + 1;
        float *alone = logits_of(m, &other, &n2);
        CHECK(real_rows_diff(base + (TGT_LEN - 1) * 11, alone, batch_tgt_lengths + 1, 1,
                             TGT_LEN - 1, 11) < 1e-6,
              "%s: a sentence's logits do not depend on its neighbours", v[i].name);
        free(base);
        free(padded);
        free(longer);
        free(alone);
        attn_model_destroy(m);
    }
}

/* Teacher-forced logits through the step-by-step decoder (with the attention weights) equal
 * attn_model_decode's. */
static void test_step_decoding_matches_teacher_forcing(void)
{
    variant v[8];
    int n = make_variants(v);
    const int64_t steps = TGT_LEN - 1, vocab = 11;
    for (int i = 0; i < n; i++) {
        attn_model *m = new_model(&v[i].config, 6, MODEL_OWN_INIT);
        attn_graph *g = NULL;
        CHECK_OK(attn_graph_create(attn_model_params(m), &g));
        attn_graph_set_recording(g, 0);
        attn_graph_set_training(g, 0);
        attn_var *memory = NULL, *all = NULL;
        CHECK_OK(attn_model_encode(m, g, BATCH, SRC_LEN, batch_src, batch_src_lengths, &memory));
        CHECK_OK(attn_model_decode(m, g, memory, batch_src_lengths, BATCH, steps, batch_tgt,
                                   TGT_LEN, NULL, &all));
        attn_step_decoder *d = NULL;
        CHECK_OK(attn_model_step_start(m, g, memory, batch_src_lengths, BATCH, steps, &d));
        double worst = 0.0, worst_sum = 0.0, worst_padding = 0.0;
        int weights_seen = 1;
        for (int64_t t = 0; t < steps && d != NULL && all != NULL; t++) {
            int32_t ids[BATCH];
            for (int b = 0; b < BATCH; b++)
                ids[b] = batch_tgt[b * TGT_LEN + t];
            float logits[BATCH * 11], weights[BATCH * SRC_LEN];
            memset(weights, 0xff, sizeof weights); /* NaN: every weight must be written */
            CHECK_OK(attn_model_step(d, ids, logits, weights));
            for (int b = 0; b < BATCH; b++)
                for (int64_t k = 0; k < vocab; k++)
                    worst = fmax(worst, fabs((double)logits[b * vocab + k] -
                                             (double)all->value.data[(b * steps + t) * vocab + k]));
            if (v[i].config.attention == ATTN_RNN_NO_ATTENTION) {
                for (int j = 0; j < BATCH * SRC_LEN; j++)
                    weights_seen &= weights[j] == 0.0f;
                continue;
            }
            for (int b = 0; b < BATCH; b++) {
                double sum = 0.0;
                for (int j = 0; j < SRC_LEN; j++) {
                    double w = weights[b * SRC_LEN + j];
                    weights_seen &= w == w;
                    if (j >= batch_src_lengths[b])
                        worst_padding = fmax(worst_padding, fabs(w));
                    sum += w;
                }
                /* Nothing to attend: an empty source, or local-m's window [t - D, t + D]
                 * past the sentence's end. local-p scales its window by a Gaussian: its
                 * weights do not sum to 1. */
                int empty =
                    batch_src_lengths[b] == 0 || (v[i].config.local == ATTN_RNN_LOCAL_M &&
                                                  t - v[i].config.window >= batch_src_lengths[b]);
                if (empty)
                    worst_sum = fmax(worst_sum, fabs(sum));
                else if (v[i].config.local != ATTN_RNN_LOCAL_P)
                    worst_sum = fmax(worst_sum, fabs(sum - 1.0));
            }
        }
        attn_model_step_destroy(d);
        CHECK(worst < 1e-5, "%s: stepping gives the teacher-forced logits (%g)", v[i].name, worst);
        CHECK(weights_seen, "%s: weights written at every step, all zero without attention",
              v[i].name);
        CHECK(worst_sum < 1e-5 && worst_padding == 0.0,
              "%s: weights sum to 1 (0 for an empty source), none on padding", v[i].name);
        attn_graph_destroy(g);
        attn_model_destroy(m);
    }
}

/* Stepping, reordering the rows, stepping again equals stepping a permuted batch. */
static void test_reorder_follows_the_rows(void)
{
    variant v[8];
    int n = make_variants(v);
    static const int64_t rows[BATCH] = {2, 0, 0};
    for (int i = 0; i < n; i++) {
        attn_model *m = new_model(&v[i].config, 7, MODEL_OWN_INIT);
        float results[2][BATCH * 11] = {{0}};
        for (int pass = 0; pass < 2; pass++) {
            /* pass 0: the batch, reordered after two steps; pass 1: the permuted batch */
            int32_t src[BATCH * SRC_LEN], lengths[BATCH], history[BATCH * 3];
            for (int b = 0; b < BATCH; b++) {
                int from = pass == 0 ? b : (int)rows[b];
                memcpy(src + b * SRC_LEN, batch_src + from * SRC_LEN, SRC_LEN * sizeof(int32_t));
                lengths[b] = batch_src_lengths[from];
                for (int t = 0; t < 3; t++)
                    history[b * 3 + t] = batch_tgt[from * TGT_LEN + t];
            }
            attn_graph *g = NULL;
            CHECK_OK(attn_graph_create(attn_model_params(m), &g));
            attn_graph_set_recording(g, 0);
            attn_graph_set_training(g, 0);
            attn_var *memory = NULL;
            attn_step_decoder *d = NULL;
            CHECK_OK(attn_model_encode(m, g, BATCH, SRC_LEN, src, lengths, &memory));
            CHECK_OK(attn_model_step_start(m, g, memory, lengths, BATCH, 3, &d));
            for (int t = 0; t < 3 && d != NULL; t++) {
                int32_t ids[BATCH];
                for (int b = 0; b < BATCH; b++)
                    ids[b] = history[b * 3 + t];
                if (pass == 0 && t == 2) {
                    CHECK_OK(attn_model_step_select(d, rows, BATCH));
                    for (int b = 0; b < BATCH; b++)
                        ids[b] = history[rows[b] * 3 + t];
                }
                CHECK_OK(attn_model_step(d, ids, results[pass], NULL));
            }
            attn_model_step_destroy(d);
            attn_graph_destroy(g);
        }
        CHECK(memcmp(results[0], results[1], sizeof results[0]) == 0,
              "%s: reordered decoder continues as the permuted batch", v[i].name);
        attn_model_destroy(m);
    }
}

static void test_reversed_source_reads_the_sentence_backwards(void)
{
    attn_model_config c = tiny_config(ATTN_RNN_NO_ATTENTION);
    c.bidirectional = 0;
    c.reverse_source = 1;
    attn_model *reversing = new_model(&c, 8, MODEL_OWN_INIT);
    c.reverse_source = 0;
    attn_model *plain = new_model(&c, 9, MODEL_OWN_INIT);
    attn_params *a = attn_model_params(reversing), *b = attn_model_params(plain);
    memcpy(attn_params_buffer(b, ATTN_PARAM_VALUES), attn_params_buffer(a, ATTN_PARAM_VALUES),
           attn_params_buffer_floats(a) * sizeof(float));
    int32_t backwards[BATCH * SRC_LEN];
    memcpy(backwards, batch_src, sizeof backwards);
    for (int r = 0; r < BATCH; r++)
        for (int t = 0; t < batch_src_lengths[r]; t++)
            backwards[r * SRC_LEN + t] = batch_src[r * SRC_LEN + batch_src_lengths[r] - 1 - t];
    attn_model_batch batch = fixed_batch();
    size_t n1, n2;
    float *first = logits_of(reversing, &batch, &n1);
    batch.src = backwards;
    float *second = logits_of(plain, &batch, &n2);
    CHECK(n1 == n2 && memcmp(first, second, n1 * sizeof(float)) == 0,
          "reverse_source reads each sentence's tokens in reverse");
    batch.src = batch_src;
    float *third = logits_of(plain, &batch, &n2);
    CHECK(real_rows_diff(first, third, batch_tgt_lengths, BATCH, TGT_LEN - 1, 11) > 1e-4,
          "and that differs from reading it forwards");
    free(first);
    free(second);
    free(third);
    attn_model_destroy(reversing);
    attn_model_destroy(plain);
}

/* ---- files and memory --------------------------------------------------------------------- */

static void test_save_and_load_give_identical_logits(void)
{
    attn_model_config c = tiny_config(ATTN_RNN_LUONG_CONCAT);
    c.cell = ATTN_RNN_LSTM;
    c.local = ATTN_RNN_LOCAL_P;
    c.input_feeding = 1;
    c.layers = 2;
    attn_model *m = new_model(&c, 10, MODEL_OWN_INIT);
    const char *path = test_scratch_path("rnn.safetensors");
    const attn_metadata_entry extra = {"note", "rnn test"};
    CHECK_OK(attn_model_save(m, path, &extra, 1));
    attn_model *loaded = NULL;
    CHECK_OK(attn_model_load(path, &loaded));
    if (loaded != NULL) {
        CHECK(memcmp(attn_model_get_config(loaded), &c, sizeof c) == 0,
              "the file's config is the model's");
        attn_model_batch batch = fixed_batch();
        size_t n1, n2;
        float *a = logits_of(m, &batch, &n1), *b = logits_of(loaded, &batch, &n2);
        CHECK(n1 == n2 && memcmp(a, b, n1 * sizeof(float)) == 0, "identical logits");
        free(a);
        free(b);
    }
    attn_model_destroy(loaded);
    attn_model_destroy(m);
}

static void test_no_arena_growth_after_the_first_step(void)
{
    attn_model_config c = tiny_config(ATTN_RNN_BAHDANAU);
    c.dropout = 0.1;
    attn_model *m = new_model(&c, 11, MODEL_OWN_INIT);
    attn_params *store = attn_model_params(m);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    attn_model_batch batch = fixed_batch();
    size_t peak = 0;
    int stable = 1;
    for (int step = 0; step < 4; step++) {
        attn_graph_reset(g);
        attn_graph_set_dropout_seed(g, 1, (uint64_t)step);
        attn_params_zero_grad(store);
        attn_var *loss = NULL;
        CHECK_OK(attn_model_forward_loss(m, g, &batch, &loss));
        if (loss != NULL)
            CHECK_OK(attn_graph_backward(g, loss));
        if (step == 0)
            peak = attn_graph_memory_peak(g);
        else
            stable &= attn_graph_memory_peak(g) == peak;
    }
    CHECK(stable, "steps 2..4 reuse step 1's arena exactly (peak %zu bytes)", peak);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

/* ---- argument checks ------------------------------------------------------------------------ */

static void test_bad_arguments_are_rejected(void)
{
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_model_config c = tiny_config(ATTN_RNN_BAHDANAU);
    attn_model *m = new_model(&c, 12, MODEL_OWN_INIT);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    attn_var *out = NULL, *memory = NULL;
    attn_model_batch batch = fixed_batch();

    int32_t lengths[BATCH] = {6, 3, 7};
    attn_model_batch wrong = batch;
    wrong.tgt_lengths = lengths;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    CHECK(strstr(attn_last_error(), "tgt_lengths[2] = 7") != NULL, "%s", attn_last_error());
    int32_t src_lengths[BATCH] = {5, 6, 1};
    wrong = batch;
    wrong.src_lengths = src_lengths;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    int32_t src[BATCH * SRC_LEN];
    memcpy(src, batch_src, sizeof src);
    src[SRC_LEN + 1] = 9; /* a vocabulary of 9 */
    wrong = batch;
    wrong.src = src;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    CHECK(strstr(attn_last_error(), "= 9") != NULL, "%s", attn_last_error());
    int32_t tgt[BATCH * TGT_LEN];
    memcpy(tgt, batch_tgt, sizeof tgt);
    tgt[2] = 11; /* a vocabulary of 11, at a real position */
    wrong = batch;
    wrong.tgt = tgt;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    wrong = batch;
    wrong.src = NULL;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);

    CHECK_OK(attn_model_encode(m, g, BATCH, SRC_LEN, batch_src, batch_src_lengths, &memory));
    CHECK_FAILS(attn_model_decode(m, g, NULL, NULL, BATCH, 2, batch_tgt, TGT_LEN, NULL, &out), bad);
    CHECK(strstr(attn_last_error(), "memory") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_model_decode(m, g, memory, NULL, 2, 2, batch_tgt, TGT_LEN, NULL, &out), bad);
    CHECK(strstr(attn_last_error(), "3 sentences") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_model_decode(m, g, memory, NULL, BATCH, 2, batch_tgt, 1, NULL, &out), bad);
    CHECK_FAILS(attn_model_decode(m, g, memory, NULL, BATCH, 2, NULL, TGT_LEN, NULL, &out), bad);
    int32_t too_long[BATCH] = {5, 6, 0};
    CHECK_FAILS(attn_model_decode(m, g, memory, too_long, BATCH, 2, batch_tgt, TGT_LEN, NULL, &out),
                bad);
    CHECK_OK(attn_model_decode(m, g, memory, NULL, BATCH, 0, batch_tgt, TGT_LEN, NULL, &out));
    CHECK(out != NULL && out->value.shape[1] == 0 && out->value.shape[2] == 11,
          "zero steps give [B, 0, V]");
    attn_graph_reset(g);
    attn_model_batch empty = {0, SRC_LEN, NULL, NULL, TGT_LEN, NULL, NULL, NULL, NULL, 0, 0.0, NULL};
    CHECK_OK(attn_model_forward_loss(m, g, &empty, &out));
    CHECK(out && out->value.data[0] == 0.0f, "an empty batch: loss 0");
    attn_graph_reset(g);
    CHECK_OK(attn_model_encode(m, g, BATCH, SRC_LEN, batch_src, batch_src_lengths, &memory));

    attn_step_decoder *d = NULL;
    CHECK_FAILS(attn_model_step_start(m, g, memory, batch_src_lengths, BATCH, 4, &d), bad);
    CHECK(strstr(attn_last_error(), "recording") != NULL, "%s", attn_last_error());
    attn_graph_set_recording(g, 0);
    CHECK_FAILS(attn_model_step_start(m, g, NULL, NULL, BATCH, 4, &d), bad);
    CHECK(strstr(attn_last_error(), "memory") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_model_step_start(NULL, g, memory, NULL, BATCH, 4, &d), bad);
    CHECK_FAILS(attn_model_step_start(m, g, memory, NULL, BATCH, 4, NULL), bad);
    CHECK_FAILS(attn_model_step_start(m, g, memory, NULL, BATCH - 1, 4, &d), bad);
    CHECK(strstr(attn_last_error(), "max_rows") != NULL, "%s", attn_last_error());
    attn_graph *foreign = NULL;
    CHECK_OK(attn_graph_create(NULL, &foreign));
    CHECK_FAILS(attn_model_step_start(m, foreign, memory, NULL, BATCH, 4, &d), bad);
    CHECK(d == NULL, "no decoder after a failed start");
    CHECK_OK(attn_model_step_start(m, g, memory, batch_src_lengths, BATCH, 4, &d));
    int32_t ids[BATCH] = {1, 1, 11};
    const int32_t fine_ids[BATCH] = {1, 1, 1};
    float logits[BATCH * 11];
    CHECK_FAILS(attn_model_step(d, ids, logits, NULL), bad);
    CHECK_FAILS(attn_model_step(d, NULL, logits, NULL), bad);
    CHECK_FAILS(attn_model_step(NULL, fine_ids, logits, NULL), bad);
    CHECK_FAILS(attn_model_step(d, fine_ids, NULL, NULL), bad);
    const int64_t rows[BATCH] = {0, 1, 3};
    CHECK_FAILS(attn_model_step_select(d, rows, BATCH), bad);
    CHECK(strstr(attn_last_error(), "rows[2] = 3") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_model_step_select(d, NULL, BATCH), bad);
    attn_model_step_destroy(d);
    attn_graph_destroy(foreign);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

int main(void)
{
    RUN_TEST(test_config_json);
    RUN_TEST(test_parameter_names);
    RUN_TEST(test_model_gradients_match_finite_differences);
    RUN_TEST(test_every_isa_matches_the_reference);
    RUN_TEST(test_padding_and_neighbours_are_invisible);
    RUN_TEST(test_step_decoding_matches_teacher_forcing);
    RUN_TEST(test_reorder_follows_the_rows);
    RUN_TEST(test_reversed_source_reads_the_sentence_backwards);
    RUN_TEST(test_save_and_load_give_identical_logits);
    RUN_TEST(test_no_arena_growth_after_the_first_step);
    RUN_TEST(test_bad_arguments_are_rejected);
    return test_summary();
}
