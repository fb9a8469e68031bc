/* The RNN text classifier (arch "rnn_classifier", Yang et al. 2016's word encoder and word
 * attention): config JSON, parameter names, loss gradients against finite differences (GRU and
 * LSTM, bidirectional, padded batches, both poolings, dropout), the pooling weights and logits
 * against a double recomputation from the encoder's states, a saved and loaded model giving the
 * same logits, bf16 and int8 inference, and the calls a recurrent classifier refuses.
 * Learnability is in tests/train/test_rnn_classifier_learn.c, PyTorch parity in
 * tests/python/test_rnn_classifier_torch.py. */
#include "../autodiff/autodiff_testing.h"
#include "models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { CLASSES = 3 };

static attn_model_config tiny_config(attn_rnn_cell cell, attn_pooling pooling)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN_CLASSIFIER);
    c.src_vocab = 9;
    c.num_classes = CLASSES;
    c.hidden = 3;
    c.embedding_dim = 4;
    c.layers = 2;
    c.dropout = 0.0;
    c.label_smoothing = 0.1;
    c.max_len = 16;
    c.cell = cell;
    c.pooling = pooling;
    return c;
}

/* Three texts of 5, 2 and 1 tokens, padded to 5 (the padding holds ids a mistake would read). */
enum { BATCH = 3, SRC_LEN = 5 };
static const int32_t batch_src[BATCH * SRC_LEN] = {4,      5, 6, 7, 8, /**/ 5, 3, 8, 8, 8,
                                                   /**/ 7, 6, 6, 6, 6};
static const int32_t batch_src_lengths[BATCH] = {5, 2, 1};
static const int32_t batch_labels[BATCH] = {2, 0, 1};

static attn_model_batch fixed_batch(void)
{
    attn_model_batch b;
    memset(&b, 0, sizeof b);
    b.size = BATCH;
    b.src_len = SRC_LEN;
    b.src = batch_src;
    b.src_lengths = batch_src_lengths;
    b.labels = batch_labels;
    return b;
}

static float *param(attn_model *m, const char *name, attn_param_info *info)
{
    attn_params *store = attn_model_params(m);
    attn_param_id id;
    CHECK_OK(attn_params_find(store, name, &id));
    CHECK_OK(attn_params_info(store, id, info));
    return attn_params_data(store, id, ATTN_PARAM_VALUES);
}

/* ---- config ------------------------------------------------------------------------------ */

static void test_config_json(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN_CLASSIFIER);
    CHECK(c.arch == ATTN_ARCH_RNN_CLASSIFIER && c.pooling == ATTN_POOLING_ATTENTION &&
              c.bidirectional == 1 && c.cell == ATTN_RNN_GRU && c.hidden == 256 && c.layers == 1 &&
              c.d_model == 0 && c.attention_dim == 0 && c.window == 0 && c.tgt_vocab == 0,
          "rnn_classifier defaults: attention pooling over one bidirectional GRU layer");
    CHECK(attn_model_arch_is_classifier(ATTN_ARCH_RNN_CLASSIFIER) &&
              attn_model_arch_is_classifier(ATTN_ARCH_TRANSFORMER_CLASSIFIER) &&
              !attn_model_arch_is_classifier(ATTN_ARCH_RNN) &&
              !attn_model_arch_is_classifier(ATTN_ARCH_TRANSFORMER_MLM),
          "which architectures are classifiers");
    c.src_vocab = 20;
    c.num_classes = 4;
    c.cell = ATTN_RNN_LSTM;
    c.layers = 2;
    c.bidirectional = 0;
    c.pooling = ATTN_POOLING_MEAN;
    char *json = NULL;
    CHECK_OK(attn_model_config_to_json(&c, &json));
    CHECK(json != NULL && strstr(json, "\"arch\":\"rnn_classifier\"") &&
              strstr(json, "\"pooling\":\"mean\"") && strstr(json, "\"num_classes\":4") &&
              strstr(json, "\"cell\":\"lstm\"") && !strstr(json, "attention") &&
              !strstr(json, "tgt_vocab") && !strstr(json, "d_model") && !strstr(json, "window"),
          "the classifier's fields only: %s", json ? json : "(null)");
    attn_model_config back;
    CHECK_OK(attn_model_config_from_json(json, &back));
    CHECK(memcmp(&back, &c, sizeof c) == 0, "every field survives JSON");
    free(json);

    CHECK_OK(attn_model_config_from_json(
        "{\"version\":1,\"arch\":\"rnn_classifier\",\"src_vocab\":5,\"num_classes\":2}", &back));
    CHECK(back.pooling == ATTN_POOLING_ATTENTION && back.bidirectional && back.hidden == 256,
          "missing fields take the defaults");

    const struct {
        const char *json;
        attn_status status;
        const char *mentions;
    } bad[] = {
        {"{\"version\":1,\"arch\":\"rnn_classifier\",\"src_vocab\":5,\"num_classes\":2,"
         "\"pooling\":\"cls\"}",
         ATTN_ERR_INVALID_ARGUMENT, "cls"},
        {"{\"version\":1,\"arch\":\"rnn_classifier\",\"src_vocab\":5,\"num_classes\":2,"
         "\"attention_dim\":8}",
         ATTN_ERR_FORMAT, "attention_dim"},
        {"{\"version\":1,\"arch\":\"rnn_classifier\",\"src_vocab\":5,\"num_classes\":2,"
         "\"reverse_source\":true}",
         ATTN_ERR_FORMAT, "reverse_source"},
        {"{\"version\":1,\"arch\":\"rnn_classifier\",\"src_vocab\":5,\"num_classes\":2,"
         "\"tgt_vocab\":5}",
         ATTN_ERR_FORMAT, "tgt_vocab"},
        {"{\"version\":1,\"arch\":\"rnn_classifier\",\"src_vocab\":5,\"num_classes\":2,"
         "\"num_heads\":2}",
         ATTN_ERR_FORMAT, "num_heads"},
        {"{\"version\":1,\"arch\":\"rnn_classifier\",\"src_vocab\":5}", ATTN_ERR_INVALID_ARGUMENT,
         "num_classes"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"pooling\":\"mean\"}",
         ATTN_ERR_FORMAT, "pooling"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK_FAILS(attn_model_config_from_json(bad[i].json, &back), bad[i].status);
        CHECK(strstr(attn_last_error(), bad[i].mentions) != NULL, "%s: message names %s: %s",
              bad[i].json, bad[i].mentions, attn_last_error());
    }
}

static void test_parameter_names(void)
{
    attn_model_config c = tiny_config(ATTN_RNN_GRU, ATTN_POOLING_ATTENTION);
    attn_model *m = new_model(&c, 1, MODEL_OWN_INIT);
    attn_params *store = attn_model_params(m);
    const struct {
        const char *name;
        int64_t rows, cols;
    } expected[] = {{"src_embed.weight", 9, 4},
                    {"encoder.weight_ih_l0", 9, 4},
                    {"encoder.weight_hh_l0_reverse", 9, 3},
                    {"encoder.weight_ih_l1", 9, 6},
                    {"pooling.proj.weight", 6, 6},
                    {"pooling.query", 1, 6},
                    {"classifier.weight", CLASSES, 6}};
    for (size_t i = 0; i < sizeof expected / sizeof *expected; i++) {
        attn_param_info info;
        param(m, expected[i].name, &info);
        CHECK(info.ndim == 2 && info.shape[0] == expected[i].rows &&
                  info.shape[1] == expected[i].cols,
              "%s is [%lld, %lld]", expected[i].name, (long long)expected[i].rows,
              (long long)expected[i].cols);
    }
    attn_param_info info;
    param(m, "classifier.bias", &info);
    CHECK(info.ndim == 1 && info.shape[0] == CLASSES, "classifier.bias is [classes]");
    const char *absent[] = {"tgt_embed.weight", "generator.weight", "bridge.0.weight",
                            "decoder.0.weight_ih", "embed.weight"};
    for (size_t i = 0; i < sizeof absent / sizeof *absent; i++) {
        attn_param_id id;
        CHECK(attn_params_find(store, absent[i], &id) != ATTN_OK, "no %s", absent[i]);
        attn_clear_error();
    }
    attn_model_destroy(m);

    c.pooling = ATTN_POOLING_MEAN;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    attn_param_id id;
    CHECK(attn_params_find(attn_model_params(m), "pooling.query", &id) != ATTN_OK,
          "mean pooling learns nothing");
    attn_clear_error();
    attn_model_destroy(m);
}

/* ---- gradients --------------------------------------------------------------------------- */

static void check_gradients(const char *what, attn_model_config c, int training)
{
    attn_model *m = new_model(&c, 3, 0.5f);
    model_ctx ctx = {m, fixed_batch()};
    ad_problem p = {what, 0, NULL, attn_model_params(m), build_loss, &ctx, training, 6};
    CHECK(ad_check_problem(&p, 1e-2, 1e-3, 1e-2), "%s: loss gradients match finite differences",
          what);
    attn_model_destroy(m);
}

static void test_gradients_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    attn_model_config c = tiny_config(ATTN_RNN_GRU, ATTN_POOLING_ATTENTION);
    check_gradients("GRU, 2 bidirectional layers, attention pooling", c, 0);
    c = tiny_config(ATTN_RNN_LSTM, ATTN_POOLING_ATTENTION);
    check_gradients("LSTM, 2 bidirectional layers, attention pooling", c, 0);
    c = tiny_config(ATTN_RNN_LSTM, ATTN_POOLING_MEAN);
    c.layers = 1;
    c.bidirectional = 0;
    check_gradients("LSTM, one direction, mean pooling", c, 0);
    c = tiny_config(ATTN_RNN_GRU, ATTN_POOLING_ATTENTION);
    c.dropout = 0.3;
    check_gradients("GRU with dropout, training", c, 1);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* ---- the pooling and the head against doubles --------------------------------------------- */

/* For each text of the batch alone: its annotations h [n, A] from the encoder, then in double
 * u_t = tanh(W h_t + b), a_t = softmax(u_t . q), pooled = sum a_t h_t, logits = C pooled + c.
 * attn_model_pooling_weights must give a_t, and the padded batch's logits row the logits. */
static void check_against_doubles(attn_rnn_cell cell)
{
    attn_model_config c = tiny_config(cell, ATTN_POOLING_ATTENTION);
    c.hidden = 5;
    attn_model *m = new_model(&c, 5, 0.6f);
    const int64_t A = 2 * c.hidden;
    attn_param_info info;
    const float *W = param(m, "pooling.proj.weight", &info);
    const float *bias = param(m, "pooling.proj.bias", &info);
    const float *q = param(m, "pooling.query", &info);
    const float *C = param(m, "classifier.weight", &info);
    const float *cb = param(m, "classifier.bias", &info);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    const attn_model_batch batch = fixed_batch();
    attn_var *logits = NULL;
    CHECK_OK(attn_model_forward_logits(m, g, &batch, &logits));
    float *batch_logits = test_alloc(BATCH * CLASSES * sizeof(float));
    memcpy(batch_logits, logits->value.data, BATCH * CLASSES * sizeof(float));
    double worst_weight = 0.0, worst_logit = 0.0;
    for (int64_t b = 0; b < BATCH; b++) {
        const int64_t n = batch_src_lengths[b];
        const int32_t *text = batch_src + b * SRC_LEN;
        attn_graph_reset(g);
        attn_var *memory = NULL;
        const int32_t length = (int32_t)n;
        CHECK_OK(attn_model_encode(m, g, 1, n, text, &length, &memory));
        if (memory == NULL || memory->value.shape[2] != A) {
            CHECK(0, "annotations are 2 x hidden wide");
            break;
        }
        /* attn_model_pooling_weights below resets the graph: keep the states. */
        float states[SRC_LEN * 16];
        memcpy(states, memory->value.data, (size_t)(n * A) * sizeof *states);
        double scores[SRC_LEN], pooled[16] = {0}, sum = 0.0, top = -INFINITY;
        for (int64_t t = 0; t < n; t++) {
            const float *h = states + t * A;
            scores[t] = 0.0;
            for (int64_t i = 0; i < A; i++) {
                double u = bias[i];
                for (int64_t j = 0; j < A; j++)
                    u += (double)W[i * A + j] * h[j];
                scores[t] += tanh(u) * q[i];
            }
            top = fmax(top, scores[t]);
        }
        for (int64_t t = 0; t < n; t++)
            sum += exp(scores[t] - top);
        float weights[SRC_LEN];
        CHECK_OK(attn_model_pooling_weights(m, g, text, n, weights));
        for (int64_t t = 0; t < n; t++) {
            const double a = exp(scores[t] - top) / sum;
            worst_weight = fmax(worst_weight, fabs(a - weights[t]));
            for (int64_t i = 0; i < A; i++)
                pooled[i] += a * states[t * A + i];
        }
        for (int64_t k = 0; k < CLASSES; k++) {
            double logit = cb[k];
            for (int64_t i = 0; i < A; i++)
                logit += (double)C[k * A + i] * pooled[i];
            worst_logit = fmax(worst_logit, fabs(logit - batch_logits[b * CLASSES + k]));
        }
    }
    CHECK(worst_weight <= 1e-6, "%s: pooling weights within %.2g of the double recomputation",
          cell == ATTN_RNN_GRU ? "GRU" : "LSTM", worst_weight);
    CHECK(worst_logit <= 1e-5, "%s: the padded batch's logits within %.2g of each text alone's",
          cell == ATTN_RNN_GRU ? "GRU" : "LSTM", worst_logit);
    free(batch_logits);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_pooling_and_logits_match_doubles(void)
{
    check_against_doubles(ATTN_RNN_GRU);
    check_against_doubles(ATTN_RNN_LSTM);
}

static void test_mean_pooling_weights(void)
{
    attn_model_config c = tiny_config(ATTN_RNN_GRU, ATTN_POOLING_MEAN);
    attn_model *m = new_model(&c, 2, MODEL_OWN_INIT);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    float weights[4];
    CHECK_OK(attn_model_pooling_weights(m, g, batch_src, 4, weights));
    CHECK(weights[0] == 0.25f && weights[3] == 0.25f, "mean pooling: 1/n each");
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

/* ---- files and precision ------------------------------------------------------------------ */

static float *logits_of(attn_model *m, size_t *count)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    const attn_model_batch batch = fixed_batch();
    attn_var *logits = NULL;
    CHECK_OK(attn_model_forward_logits(m, g, &batch, &logits));
    *count = logits != NULL ? (size_t)attn_tensor_numel(&logits->value) : 0;
    float *out = test_alloc(*count * sizeof(float) + 1);
    if (logits != NULL)
        memcpy(out, logits->value.data, *count * sizeof(float));
    attn_graph_destroy(g);
    return out;
}

static void test_save_and_load_classify_identically(void)
{
    attn_model_config c = tiny_config(ATTN_RNN_LSTM, ATTN_POOLING_ATTENTION);
    attn_model *m = new_model(&c, 4, MODEL_OWN_INIT);
    const char *path = test_scratch_path("rnn_classifier.safetensors");
    CHECK_OK(attn_model_save(m, path, NULL, 0));
    attn_model *loaded = NULL;
    CHECK_OK(attn_model_load(path, &loaded));
    if (loaded == NULL) {
        attn_model_destroy(m);
        return;
    }
    CHECK(memcmp(attn_model_get_config(loaded), &c, sizeof c) == 0, "the config round-trips");
    size_t n1, n2;
    float *before = logits_of(m, &n1), *after = logits_of(loaded, &n2);
    CHECK(n1 == BATCH * CLASSES && n1 == n2 && memcmp(before, after, n1 * sizeof(float)) == 0,
          "the loaded model's logits are the saved one's, bit for bit");

    /* bf16 inference: the same classes, logits within bf16's rounding. */
    CHECK_OK(attn_model_set_precision(loaded, ATTN_PRECISION_BF16));
    float *low = logits_of(loaded, &n2);
    CHECK(test_max_abs_diff(before, low, n1) <= 0.05 * fmax(1.0, test_max_abs(before, n1)),
          "bf16 logits within %.3g of fp32's", test_max_abs_diff(before, low, n1));

    /* int8 (attn quantize): its file gives the model that wrote it, bit for bit. */
    CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_INT8));
    const char *int8_path = test_scratch_path("rnn_classifier_int8.safetensors");
    CHECK_OK(attn_model_save(m, int8_path, NULL, 0));
    attn_model *int8 = NULL;
    CHECK_OK(attn_model_load(int8_path, &int8));
    if (int8 != NULL) {
        size_t n3, n4;
        float *written = logits_of(m, &n3), *read = logits_of(int8, &n4);
        CHECK(attn_model_precision(int8) == ATTN_PRECISION_INT8 && n3 == n1 && n3 == n4 &&
                  memcmp(written, read, n3 * sizeof(float)) == 0,
              "an int8 file classifies as the model that wrote it");
        CHECK(test_max_abs_diff(before, read, n1) <= 0.1 * fmax(1.0, test_max_abs(before, n1)),
              "int8 logits within %.3g of fp32's", test_max_abs_diff(before, read, n1));
        free(written);
        free(read);
        attn_model_destroy(int8);
    }
    free(before);
    free(after);
    free(low);
    attn_model_destroy(loaded);
    attn_model_destroy(m);
}

/* ---- what a recurrent classifier refuses ---------------------------------------------------- */

static void test_refusals(void)
{
    attn_model_config c = tiny_config(ATTN_RNN_GRU, ATTN_POOLING_ATTENTION);
    attn_model *m = new_model(&c, 1, MODEL_OWN_INIT);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    float maps[64];
    CHECK_FAILS(attn_model_attention_weights(m, g, batch_src, 3, NULL, 0,
                                             ATTN_ENCODER_SELF_ATTENTION, 0, maps),
                ATTN_ERR_UNSUPPORTED);
    CHECK(strstr(attn_last_error(), "no self-attention") != NULL, "the message says why: %s",
          attn_last_error());
    attn_var *memory = NULL, *logits = NULL;
    const int32_t length = 3;
    CHECK_OK(attn_model_encode(m, g, 1, 3, batch_src, &length, &memory));
    CHECK_FAILS(attn_model_decode(m, g, memory, &length, 1, 1, batch_src, 1, NULL, &logits),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_set_recording(g, 0);
    attn_step_decoder *decoder = NULL;
    CHECK_FAILS(attn_model_step_start(m, g, memory, &length, 1, 4, &decoder),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_model_batch batch = fixed_batch();
    batch.labels = NULL;
    attn_var *loss = NULL;
    CHECK_FAILS(attn_model_forward_loss(m, g, &batch, &loss), ATTN_ERR_INVALID_ARGUMENT);
    const int32_t wrong[BATCH] = {0, 3, 1};
    batch.labels = wrong;
    CHECK_FAILS(attn_model_forward_loss(m, g, &batch, &loss), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_pooling_weights(m, g, batch_src, 17, maps), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

int main(void)
{
    RUN_TEST(test_config_json);
    RUN_TEST(test_parameter_names);
    RUN_TEST(test_gradients_match_finite_differences);
    RUN_TEST(test_pooling_and_logits_match_doubles);
    RUN_TEST(test_mean_pooling_weights);
    RUN_TEST(test_save_and_load_classify_identically);
    RUN_TEST(test_refusals);
    return test_summary();
}
