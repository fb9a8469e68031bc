/* Models in bf16 and int8 (attn_model_set_precision, quantized model files): the step
 * decoder's low-precision products stay close to the whole-prefix decoder over the same
 * stored weights, every matrix holds its stored values, a saved file reloads to the same bits,
 * precision only goes down, and the trainer refuses a quantized model. */
#include "../autodiff/autodiff_testing.h"
#include "models_testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BOS = 1, BATCH = 3, SRC_LEN = 5, STEPS = 12 };

static const int32_t batch_src[BATCH * SRC_LEN] = {4,      5, 6, 7, 8, /**/ 5, 3, 0, 0, 0,
                                                   /**/ 0, 0, 0, 0, 0};
static const int32_t batch_src_lengths[BATCH] = {5, 2, 0};

static attn_model_config transformer(int64_t d_model, int64_t heads, int norm_first)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = d_model;
    c.num_heads = heads;
    c.ffn_dim = 2 * d_model + 3;
    c.encoder_layers = 2;
    c.decoder_layers = 2;
    c.src_vocab = 9;
    c.tgt_vocab = 70;
    c.max_len = 32;
    c.norm_first = norm_first;
    return c;
}

static attn_graph *inference_graph(attn_model *m)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    if (g != NULL) {
        attn_graph_set_recording(g, 0);
        attn_graph_set_training(g, 0);
    }
    return g;
}

static int32_t token(int64_t row, int64_t t, int64_t vocab)
{
    return t == 0 ? BOS
                  : (int32_t)(attn_hash_uniform(3, (uint64_t)(row * 1000 + t)) * (float)vocab);
}

/* The step decoder's logits over STEPS steps of fixed tokens, [BATCH, STEPS, V]
 * (test_alloc'ed); also the whole-prefix decoder's in *whole when whole is not NULL. */
static float *step_logits(attn_model *m, int64_t max_rows, float **whole)
{
    const int64_t V = attn_model_get_config(m)->tgt_vocab;
    const int lm = attn_model_get_config(m)->arch == ATTN_ARCH_TRANSFORMER_LM;
    attn_graph *g = inference_graph(m);
    int32_t tgt[BATCH * STEPS];
    for (int b = 0; b < BATCH; b++)
        for (int t = 0; t < STEPS; t++)
            tgt[b * STEPS + t] = token(b, t, V);
    const int32_t *lengths = lm ? NULL : batch_src_lengths;
    attn_var *memory = NULL, *all = NULL;
    if (!lm)
        CHECK_OK(attn_model_encode(m, g, BATCH, SRC_LEN, batch_src, lengths, &memory));
    float *out = test_alloc((size_t)(BATCH * STEPS * V) * sizeof(float));
    if (whole != NULL) {
        *whole = test_alloc((size_t)(BATCH * STEPS * V) * sizeof(float));
        CHECK_OK(attn_model_decode(m, g, memory, lengths, BATCH, STEPS, tgt, STEPS, NULL, &all));
        if (all != NULL)
            memcpy(*whole, all->value.data, (size_t)(BATCH * STEPS * V) * sizeof(float));
    }
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_model_step_start(m, g, memory, lengths, max_rows, STEPS, &d));
    if (lm && d != NULL) {
        const int64_t first[BATCH] = {0, 1, 2};
        CHECK_OK(attn_model_step_select(d, first, BATCH));
    }
    float *logits = test_alloc((size_t)(BATCH * V) * sizeof(float));
    for (int64_t t = 0; t < STEPS && d != NULL; t++) {
        int32_t ids[BATCH];
        for (int b = 0; b < BATCH; b++)
            ids[b] = tgt[b * STEPS + t];
        CHECK_OK(attn_model_step(d, ids, logits, NULL));
        for (int b = 0; b < BATCH; b++)
            memcpy(out + (b * STEPS + t) * V, logits + b * V, (size_t)V * sizeof(float));
    }
    free(logits);
    attn_model_step_destroy(d);
    attn_graph_destroy(g);
    return out;
}

static double worst_error(const float *a, const float *b, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i])));
    return worst;
}

/* The whole-prefix decoder runs in fp32 over the stored weights, so the steps differ from it
 * only by the rounding of the activations: bf16's 2^-9 and int8's 1/254 of a row's largest
 * value, accumulated over a few layers. Wrong weights, scales or zero points give errors of
 * the logits' own size (about 1 here). */
static void test_steps_close_to_whole_prefix(void)
{
    attn_model_config configs[6] = {transformer(24, 3, 0), transformer(80, 2, 1),
                                    attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM)};
    configs[1].tie_output = 0;
    configs[1].activation = ATTN_ACT_GELU;
    configs[2].d_model = 16;
    configs[2].num_heads = 2;
    configs[2].ffn_dim = 20;
    configs[2].decoder_layers = 2;
    configs[2].tgt_vocab = 70;
    configs[2].max_len = 32;
    /* GPT-2's choices: learned positions (stored in the lower precision, as a matrix), no
     * output bias, gelu_tanh, pre-norm, unscaled embeddings. */
    configs[3] = configs[2];
    configs[3].positions = ATTN_POSITIONS_LEARNED;
    configs[3].output_bias = 0;
    configs[3].activation = ATTN_ACT_GELU_TANH;
    configs[3].norm_first = 1;
    configs[3].scale_embeddings = 0;
    /* LLaMA's: rotary positions, RMSNorm, SwiGLU (linear3 stored too), no bias anywhere; and
     * an encoder-decoder with them (the encoder's own path, the unrotated cross-attention). */
    configs[4] = configs[2];
    configs[4].positions = ATTN_POSITIONS_ROPE;
    configs[4].norm = ATTN_NORM_RMS;
    configs[4].ffn = ATTN_FFN_SWIGLU;
    configs[4].bias = 0;
    configs[4].output_bias = 0;
    configs[4].norm_first = 1;
    configs[4].tie_output = 0;
    configs[5] = transformer(24, 3, 1);
    configs[5].positions = ATTN_POSITIONS_ROPE;
    configs[5].norm = ATTN_NORM_RMS;
    configs[5].ffn = ATTN_FFN_SWIGLU;
    configs[5].bias = 0;
    static const attn_precision precisions[2] = {ATTN_PRECISION_BF16, ATTN_PRECISION_INT8};
    static const double tolerance[2] = {0.01, 0.03};
    for (int c = 0; c < 6; c++)
        for (int p = 0; p < 2; p++)
            for (int64_t max_rows = 3; max_rows <= 16; max_rows += 13) {
                attn_model *m = new_model(&configs[c], 7, 0.3f);
                CHECK_OK(attn_model_set_precision(m, precisions[p]));
                float *whole = NULL;
                float *steps = step_logits(m, max_rows, &whole);
                const int64_t n = BATCH * STEPS * configs[c].tgt_vocab;
                const double error = worst_error(steps, whole, n);
                CHECK(error < tolerance[p], "config %d %s max_rows %lld: steps within %g (%g)", c,
                      attn_precision_name(precisions[p]), (long long)max_rows, tolerance[p], error);
                CHECK(error > 0.0, "config %d %s: the steps use the low-precision products", c,
                      attn_precision_name(precisions[p]));
                free(whole);
                free(steps);
                attn_model_destroy(m);
            }
}

/* The encoder's own inference path (products on the stored matrices) against the graph's
 * operations over the same weights in fp32, which a recording graph takes. */
static void test_encoder_close_to_graph_operations(void)
{
    static const attn_precision precisions[2] = {ATTN_PRECISION_BF16, ATTN_PRECISION_INT8};
    static const double tolerance[2] = {0.01, 0.03};
    /* post-norm; pre-norm; pre-norm with learned positions; pre-norm LLaMA-style (rotary
     * positions, RMSNorm, SwiGLU, no bias) */
    for (int variant = 0; variant < 4; variant++)
        for (int p = 0; p < 2; p++) {
            const int norm_first = variant > 0;
            attn_model_config c = transformer(24 + 8 * norm_first, 4, norm_first);
            if (variant == 2)
                c.positions = ATTN_POSITIONS_LEARNED;
            if (variant == 3) {
                c.positions = ATTN_POSITIONS_ROPE;
                c.norm = ATTN_NORM_RMS;
                c.ffn = ATTN_FFN_SWIGLU;
                c.bias = 0;
            }
            attn_model *m = new_model(&c, 5, 0.3f);
            CHECK_OK(attn_model_set_precision(m, precisions[p]));
            attn_graph *fast = inference_graph(m), *graph = NULL;
            CHECK_OK(attn_graph_create(attn_model_params(m), &graph));
            attn_graph_set_training(graph, 0);
            attn_var *a = NULL, *b = NULL;
            CHECK_OK(attn_model_encode(m, fast, BATCH, SRC_LEN, batch_src, batch_src_lengths, &a));
            CHECK_OK(attn_model_encode(m, graph, BATCH, SRC_LEN, batch_src, batch_src_lengths, &b));
            if (a != NULL && b != NULL) {
                /* the rows of the empty third sentence are never read */
                double error = 0.0;
                for (int64_t s = 0; s < 2; s++)
                    for (int64_t t = 0; t < batch_src_lengths[s]; t++) {
                        const int64_t at = (s * SRC_LEN + t) * c.d_model;
                        error = fmax(
                            error, worst_error(a->value.data + at, b->value.data + at, c.d_model));
                    }
                CHECK(error < tolerance[p] && error > 0.0,
                      "%s variant %d: the encoder within %g of the graph's (%g)",
                      attn_precision_name(precisions[p]), variant, tolerance[p], error);
            }
            attn_graph_destroy(fast);
            attn_graph_destroy(graph);
            attn_model_destroy(m);
        }
}

static void test_matrices_hold_stored_values(void)
{
    attn_model_config c = transformer(24, 3, 0);
    attn_model *m = new_model(&c, 7, 0.3f);
    attn_params *store = attn_model_params(m);
    attn_param_id weight, bias;
    CHECK_OK(attn_params_find(store, "decoder.layers.1.linear1.weight", &weight));
    CHECK_OK(attn_params_find(store, "decoder.layers.1.linear1.bias", &bias));
    const float *w = attn_params_data(store, weight, ATTN_PARAM_VALUES);
    const float *b = attn_params_data(store, bias, ATTN_PARAM_VALUES);
    float before_w[24], before_b[4];
    memcpy(before_w, w, sizeof before_w);
    memcpy(before_b, b, sizeof before_b);
    CHECK(attn_model_precision(m) == ATTN_PRECISION_FP32, "a new model is fp32");
    CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_INT8));
    CHECK(attn_model_precision(m) == ATTN_PRECISION_INT8, "the model is int8");
    float largest = 0.0f;
    for (int i = 0; i < 24; i++)
        largest = fmaxf(largest, fabsf(before_w[i]));
    const float step = largest / 127.0f;
    int on_grid = 1, close = 1;
    for (int i = 0; i < 24; i++) {
        const float q = w[i] / step;
        on_grid &= fabsf(q - nearbyintf(q)) < 1e-3f;
        close &= fabsf(w[i] - before_w[i]) <= 0.5001f * step;
    }
    CHECK(on_grid && close, "a weight row holds multiples of its scale, within half a step");
    CHECK(memcmp(before_b, b, sizeof before_b) == 0, "biases stay fp32");
    attn_model_destroy(m);

    m = new_model(&c, 7, 0.3f);
    store = attn_model_params(m);
    CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_BF16));
    w = attn_params_data(store, weight, ATTN_PARAM_VALUES);
    int rounded = 1;
    for (int i = 0; i < 24; i++) {
        uint32_t bits;
        memcpy(&bits, &w[i], sizeof bits);
        rounded &= (bits & 0xffffu) == 0;
    }
    CHECK(rounded, "bf16 weights hold bf16 values");
    CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_BF16));
    CHECK_FAILS(attn_model_set_precision(m, ATTN_PRECISION_FP32), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "bf16") != NULL, "the message names the model's precision");
    CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_AUTO));
    CHECK(attn_model_precision(m) == ATTN_PRECISION_BF16, "auto keeps a bf16 model's own");
    CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_INT8));
    CHECK_FAILS(attn_model_set_precision(m, ATTN_PRECISION_BF16), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_AUTO));
    CHECK(attn_model_precision(m) == ATTN_PRECISION_INT8, "auto keeps an int8 model's own");
    attn_trainable trainable;
    CHECK_FAILS(attn_trainable_from_model(m, &trainable), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "fp32") != NULL, "training asks for the fp32 model");
    attn_model_destroy(m);

    /* An fp32 model takes auto's choice: bf16 where native, fp32 on the portable path. */
    const attn_isa isa = attn_get_isa();
    for (int portable = 0; portable <= 1; portable++) {
        if (portable)
            CHECK_OK(attn_set_isa(ATTN_ISA_PORTABLE));
        m = new_model(&c, 7, 0.3f);
        CHECK_OK(attn_model_set_precision(m, ATTN_PRECISION_AUTO));
        CHECK(attn_model_precision(m) == attn_precision_resolve(ATTN_PRECISION_AUTO),
              "%s: an fp32 model runs at auto's choice, %s", attn_isa_name(attn_get_isa()),
              attn_precision_name(attn_model_precision(m)));
        attn_model_destroy(m);
    }
    CHECK_OK(attn_set_isa(isa));
}

/* Saved and loaded again: the same precision, parameter values and step logits, bit for
 * bit; an fp32 file says nothing of precision. */
static void test_files_reload_exactly(void)
{
    static const attn_precision precisions[2] = {ATTN_PRECISION_BF16, ATTN_PRECISION_INT8};
    attn_model_config c = transformer(24, 3, 1);
    const char *path = test_scratch_path("quantized.safetensors");
    for (int p = 0; p < 2; p++) {
        attn_model *m = new_model(&c, 9, 0.3f);
        CHECK_OK(attn_model_set_precision(m, precisions[p]));
        CHECK_OK(attn_model_save(m, path, NULL, 0));
        attn_model *again = NULL;
        CHECK_OK(attn_model_load(path, &again));
        if (again == NULL) {
            attn_model_destroy(m);
            continue;
        }
        CHECK(attn_model_precision(again) == precisions[p], "%s: the file keeps its precision",
              attn_precision_name(precisions[p]));
        /* parameter by parameter: new_model's values also fill the padding between them */
        attn_params *a = attn_model_params(m), *b = attn_model_params(again);
        int same = 1;
        for (size_t k = 0; k < attn_params_count(a); k++) {
            attn_param_info info;
            CHECK_OK(attn_params_info(a, (attn_param_id)k, &info));
            same &= memcmp(attn_params_data(a, (attn_param_id)k, ATTN_PARAM_VALUES),
                           attn_params_data(b, (attn_param_id)k, ATTN_PARAM_VALUES),
                           (size_t)info.numel * sizeof(float)) == 0;
        }
        CHECK(same, "%s: the same parameter values", attn_precision_name(precisions[p]));
        float *x = step_logits(m, 3, NULL), *y = step_logits(again, 3, NULL);
        CHECK(memcmp(x, y, (size_t)(BATCH * STEPS * c.tgt_vocab) * sizeof(float)) == 0,
              "%s: the same step logits", attn_precision_name(precisions[p]));
        free(x);
        free(y);
        attn_model_destroy(again);
        attn_model_destroy(m);
    }
    attn_model *m = new_model(&c, 9, 0.3f);
    CHECK_OK(attn_model_save(m, path, NULL, 0));
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    const char *value = NULL;
    CHECK(attn_tensor_file_metadata(file, ATTN_MODEL_PRECISION_KEY, &value) != ATTN_OK,
          "an fp32 file has no precision key");
    attn_tensor_file_close(file);
    attn_metadata_entry bad = {ATTN_MODEL_PRECISION_KEY, "int8"};
    CHECK_FAILS(attn_model_save(m, path, &bad, 1), ATTN_ERR_INVALID_ARGUMENT);
    attn_model_destroy(m);
    remove(path);
}

static attn_model_config rnn(attn_rnn_cell cell, attn_rnn_attention attention, int64_t layers)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.cell = cell;
    c.attention = attention;
    c.layers = layers;
    c.input_feeding = attention != ATTN_RNN_BAHDANAU;
    c.bidirectional = attention != ATTN_RNN_LUONG_DOT; /* dot scores need equal sizes */
    c.src_vocab = 9;
    c.tgt_vocab = 70;
    c.hidden = 40;
    c.embedding_dim = 24;
    c.attention_dim = 32;
    c.max_len = 32;
    return c;
}

/* An fp32 model holding m's values: after attn_model_set_precision those are the stored
 * weights, so the two differ only in the products' arithmetic. */
static attn_model *fp32_copy(attn_model *m)
{
    attn_model *copy = new_model(attn_model_get_config(m), 1, 0.1f);
    if (copy == NULL)
        return NULL;
    attn_params *from = attn_model_params(m), *to = attn_model_params(copy);
    memcpy(attn_params_buffer(to, ATTN_PARAM_VALUES), attn_params_buffer(from, ATTN_PARAM_VALUES),
           attn_params_buffer_floats(from) * sizeof(float));
    attn_params_values_changed(to);
    return copy;
}

/* RNN models in bf16 and int8 multiply the stored matrices (the decoder cell's two
 * projections, the attention's keys, Luong's combination, the output layer) with rounded
 * activations. Against the fp32 products over the same stored weights, each product's
 * relative error is that of its rounded activations: bf16 2^-9, int8 1/254 of the row's
 * largest value; the gates' sigmoids and tanhs do not amplify it, so over 12 steps of two
 * layers the logits stay within the Transformer's tolerances above (0.01 and 0.03 relative to
 * 1 + |logit|). Products left in fp32 would give an error of 0; a wrong matrix, scale or
 * gate layout one of the logits' size (about 1). The whole-prefix decoder takes the same
 * products, so the steps still equal it. */
static void test_rnn_products_in_stored_precision(void)
{
    const attn_model_config configs[4] = {
        rnn(ATTN_RNN_GRU, ATTN_RNN_BAHDANAU, 1), rnn(ATTN_RNN_LSTM, ATTN_RNN_BAHDANAU, 2),
        rnn(ATTN_RNN_GRU, ATTN_RNN_LUONG_GENERAL, 2), rnn(ATTN_RNN_LSTM, ATTN_RNN_LUONG_DOT, 1)};
    static const attn_precision precisions[2] = {ATTN_PRECISION_BF16, ATTN_PRECISION_INT8};
    static const double tolerance[2] = {0.01, 0.03};
    for (int c = 0; c < 4; c++)
        for (int p = 0; p < 2; p++) {
            attn_model *m = new_model(&configs[c], 3, 0.3f);
            if (m == NULL)
                return;
            CHECK_OK(attn_model_set_precision(m, precisions[p]));
            attn_model *reference = fp32_copy(m);
            if (reference == NULL)
                return;
            float *whole = NULL;
            float *steps = step_logits(m, 16, &whole);
            float *exact = step_logits(reference, 3, NULL);
            const int64_t n = BATCH * STEPS * configs[c].tgt_vocab;
            const double error = worst_error(steps, exact, n);
            CHECK(error < tolerance[p] && error > 0.0,
                  "rnn config %d %s: within %g of the fp32 products, and not equal (%g)", c,
                  attn_precision_name(precisions[p]), tolerance[p], error);
            CHECK(worst_error(steps, whole, n) < 1e-5,
                  "rnn config %d %s: steps equal the whole-prefix decoder", c,
                  attn_precision_name(precisions[p]));
            free(whole);
            free(steps);
            free(exact);
            attn_model_destroy(reference);
            attn_model_destroy(m);
        }
}

int main(void)
{
    RUN_TEST(test_steps_close_to_whole_prefix);
    RUN_TEST(test_encoder_close_to_graph_operations);
    RUN_TEST(test_matrices_hold_stored_values);
    RUN_TEST(test_files_reload_exactly);
    RUN_TEST(test_rnn_products_in_stored_precision);
    return test_summary();
}
