/* The Transformer models: parameter names, whole-model gradients against finite differences,
 * every instruction set against the reference with identical reruns, masks, save/load, no
 * arena growth after the first step, a copy task learned with a hand-written Adam loop and
 * greedy decoding through the encode/decode hooks, and argument checks. */
#include "../autodiff/autodiff_testing.h"
#include "models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { PAD = 0, BOS = 1, EOS = 2, FIRST_SYMBOL = 4 };

static attn_model_config tiny_config(attn_model_arch arch)
{
    attn_model_config c = attn_model_config_default(arch);
    c.d_model = 8;
    c.num_heads = 2;
    c.ffn_dim = 12;
    c.dropout = 0.0;
    c.max_len = 16;
    c.label_smoothing = 0.1;
    if (arch != ATTN_ARCH_TRANSFORMER_LM) {
        c.encoder_layers = 2;
        c.src_vocab = 9;
    }
    if (arch != ATTN_ARCH_TRANSFORMER_CLASSIFIER && arch != ATTN_ARCH_TRANSFORMER_MLM) {
        c.decoder_layers = 2;
        c.tgt_vocab = 11;
    }
    if (arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER)
        c.num_classes = 3;
    return c;
}

/* tiny_config with every LLaMA-style block option: pre-norm, rotary positions, RMSNorm,
 * SwiGLU, no bias anywhere (output included), untied. */
static attn_model_config llama_config(attn_model_arch arch)
{
    attn_model_config c = tiny_config(arch);
    c.norm_first = 1;
    c.positions = ATTN_POSITIONS_ROPE;
    c.norm = ATTN_NORM_RMS;
    c.ffn = ATTN_FFN_SWIGLU;
    c.bias = 0;
    c.output_bias = 0;
    c.scale_embeddings = 0;
    if (arch != ATTN_ARCH_TRANSFORMER_CLASSIFIER)
        c.tie_output = 0;
    return c;
}

/* A fixed batch of 3 sentences with padding in source and target. */
enum { BATCH = 3, SRC_LEN = 5, TGT_LEN = 6 };
static const int32_t batch_src[BATCH * SRC_LEN] = {4,      5, 6, 7, 8, /**/ 5, 5, 0, 0, 0,
                                                   /**/ 8, 7, 6, 0, 0};
static const int32_t batch_src_lengths[BATCH] = {5, 2, 3};
static const int32_t batch_tgt[BATCH * TGT_LEN] = {1,      4, 9, 10, 5, 2, /**/ 1, 6, 2, 0, 0, 0,
                                                   /**/ 1, 7, 7, 8,  2, 0};
static const int32_t batch_tgt_lengths[BATCH] = {6, 3, 5};
static const int32_t batch_labels[BATCH] = {2, 0, 1};
/* The masked language model's targets: the originals at the chosen positions (as if row 0
 * read 4 [MASK] 6 [MASK] 8), -1 at the others and at padding. */
static const int32_t batch_mlm_targets[BATCH * SRC_LEN] = {-1, 5,  -1, 7,  -1, /**/ 4,  -1, -1,
                                                           -1, -1, /**/ -1, -1, 6,  -1, -1};

static attn_model_batch fixed_batch(void)
{
    attn_model_batch b = {BATCH,
                          SRC_LEN,
                          batch_src,
                          batch_src_lengths,
                          TGT_LEN,
                          batch_tgt,
                          batch_tgt_lengths,
                          batch_labels,
                          NULL,
                          0,
                          0.0,
                          batch_mlm_targets};
    return b;
}

/* ---- names ------------------------------------------------------------------------------- */

static int has_param(attn_model *m, const char *name)
{
    attn_param_id id;
    int found = attn_params_find(attn_model_params(m), name, &id) == ATTN_OK;
    attn_clear_error();
    return found;
}

static void test_parameter_names(void)
{
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    attn_model *m = new_model(&c, 1, MODEL_OWN_INIT);
    /* 2 embeddings + 2 * 12 encoder + 2 * 18 decoder + 2 * 2 norms + generator.bias */
    CHECK(attn_params_count(attn_model_params(m)) == 2 + 24 + 36 + 4 + 1, "count %zu",
          attn_params_count(attn_model_params(m)));
    CHECK(has_param(m, "src_embed.weight") && has_param(m, "tgt_embed.weight") &&
              has_param(m, "encoder.layers.1.self_attn.in_proj_weight") &&
              has_param(m, "decoder.layers.1.multihead_attn.out_proj.bias") &&
              has_param(m, "encoder.norm.weight") && has_param(m, "decoder.norm.bias") &&
              has_param(m, "generator.bias") && !has_param(m, "generator.weight"),
          "transformer names");
    attn_model_destroy(m);

    c.share_embeddings = 1;
    c.src_vocab = c.tgt_vocab;
    c.tie_output = 0;
    c.encoder_final_norm = 0;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(has_param(m, "embed.weight") && !has_param(m, "src_embed.weight") &&
              has_param(m, "generator.weight") && !has_param(m, "encoder.norm.weight"),
          "shared, untied, no encoder norm");
    attn_model_destroy(m);

    c = tiny_config(ATTN_ARCH_TRANSFORMER_LM);
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(has_param(m, "embed.weight") && has_param(m, "decoder.layers.1.linear2.weight") &&
              !has_param(m, "decoder.layers.0.multihead_attn.in_proj_weight") &&
              has_param(m, "decoder.norm.weight") && !has_param(m, "encoder.norm.weight"),
          "language model names");
    attn_model_destroy(m);

    c = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(has_param(m, "embed.weight") && has_param(m, "classifier.weight") &&
              has_param(m, "encoder.layers.0.norm2.bias") && !has_param(m, "generator.bias"),
          "classifier names");
    attn_model_destroy(m);

    /* Learned positions and no output bias: one table per side, no generator at all when
     * tied. */
    c = tiny_config(ATTN_ARCH_TRANSFORMER);
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(attn_params_count(attn_model_params(m)) == 2 + 2 + 24 + 36 + 4, "count %zu",
          attn_params_count(attn_model_params(m)));
    CHECK(has_param(m, "src_pos_embed.weight") && has_param(m, "tgt_pos_embed.weight") &&
              !has_param(m, "generator.bias") && !has_param(m, "generator.weight"),
          "learned positions, tied output without bias");
    attn_model_destroy(m);
    c = tiny_config(ATTN_ARCH_TRANSFORMER_LM);
    c.positions = ATTN_POSITIONS_LEARNED;
    c.tie_output = 0;
    c.output_bias = 0;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    attn_param_id id;
    attn_param_info info;
    CHECK_OK(attn_params_find(attn_model_params(m), "pos_embed.weight", &id));
    CHECK_OK(attn_params_info(attn_model_params(m), id, &info));
    CHECK(info.ndim == 2 && info.shape[0] == c.max_len && info.shape[1] == c.d_model,
          "pos_embed.weight is [max_len, d_model]");
    CHECK(has_param(m, "generator.weight") && !has_param(m, "generator.bias"),
          "untied output without bias");
    attn_model_destroy(m);
    c = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(has_param(m, "pos_embed.weight") && has_param(m, "classifier.weight") &&
              !has_param(m, "classifier.bias"),
          "classifier with learned positions, no bias");
    attn_model_destroy(m);
    c = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.pooling = ATTN_POOLING_ATTENTION;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(has_param(m, "pooling.proj.weight") && has_param(m, "pooling.proj.bias") &&
              has_param(m, "pooling.query"),
          "attention pooling's parameters");
    attn_model_destroy(m);
    c.pooling = ATTN_POOLING_CLS;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(!has_param(m, "pooling.query"), "the cls pooling reads <s>'s embedding, no new parameter");
    attn_model_destroy(m);

    /* LLaMA-style blocks: per layer the attention's two weights, three feed-forward weights
     * and two norm weights; no position table, no bias. */
    c = llama_config(ATTN_ARCH_TRANSFORMER_LM);
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(attn_params_count(attn_model_params(m)) == 1 + 2 * 7 + 1 + 1, "count %zu",
          attn_params_count(attn_model_params(m)));
    CHECK(has_param(m, "decoder.layers.0.linear3.weight") &&
              has_param(m, "decoder.layers.1.norm2.weight") &&
              has_param(m, "decoder.norm.weight") && has_param(m, "generator.weight") &&
              !has_param(m, "decoder.layers.0.norm1.bias") && !has_param(m, "decoder.norm.bias") &&
              !has_param(m, "decoder.layers.0.self_attn.in_proj_bias") &&
              !has_param(m, "decoder.layers.0.self_attn.out_proj.bias") &&
              !has_param(m, "decoder.layers.0.linear1.bias") && !has_param(m, "pos_embed.weight"),
          "LLaMA-style language model names");
    attn_model_destroy(m);
    c = tiny_config(ATTN_ARCH_TRANSFORMER);
    c.bias = 0;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK(has_param(m, "encoder.layers.0.norm1.weight") &&
              !has_param(m, "encoder.layers.0.norm1.bias") && !has_param(m, "encoder.norm.bias") &&
              !has_param(m, "decoder.layers.0.multihead_attn.in_proj_bias") &&
              has_param(m, "generator.bias"),
          "bias false: LayerNorms without bias, the output bias kept");
    attn_model_destroy(m);
}

/* ---- gradients ----------------------------------------------------------------------------- */

/* Values U(-0.4, 0.4) everywhere (nonzero biases, uneven norms) for gradient checks. */
static void randomise(attn_model *m, uint64_t seed)
{
    attn_params *store = attn_model_params(m);
    test_fill_uniform(attn_params_buffer(store, ATTN_PARAM_VALUES),
                      attn_params_buffer_floats(store), -0.4f, 0.4f, seed);
}

static void check_model_gradients(const char *what, attn_model_config c)
{
    attn_model *m = new_model(&c, 2, MODEL_OWN_INIT);
    randomise(m, 3);
    model_ctx ctx = {m, fixed_batch()};
    ad_problem p = {what, 0, NULL, attn_model_params(m), build_loss, &ctx, 0, 5};
    CHECK(ad_check_problem(&p, 1e-2, 1e-3, 1e-2), "%s: loss gradients match finite differences",
          what);
    attn_model_destroy(m);
}

static void test_model_gradients_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    check_model_gradients("transformer, post-norm, tied", tiny_config(ATTN_ARCH_TRANSFORMER));
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    c.norm_first = 1;
    c.share_embeddings = 1;
    c.src_vocab = c.tgt_vocab;
    c.tie_output = 0;
    c.activation = ATTN_ACT_GELU;
    c.positional_encoding = ATTN_PE_CONCATENATED;
    check_model_gradients("transformer, pre-norm, shared, untied", c);
    c = tiny_config(ATTN_ARCH_TRANSFORMER_LM);
    c.norm_first = 1;
    check_model_gradients("language model", c);
    check_model_gradients("classifier", tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER));
    c = tiny_config(ATTN_ARCH_TRANSFORMER_LM);
    c.norm_first = 1;
    c.activation = ATTN_ACT_GELU_TANH;
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    c.scale_embeddings = 0;
    check_model_gradients("language model as GPT-2: learned positions, no output bias", c);
    c = tiny_config(ATTN_ARCH_TRANSFORMER);
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    c.tie_output = 0;
    check_model_gradients("transformer, learned positions, untied without bias", c);
    c = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    check_model_gradients("classifier, learned positions, no bias", c);
    /* The LLaMA-style block options, each path: pre-norm and post-norm (RMSNorm of a residual
     * sum), self-attention with rotary positions beside an unrotated cross-attention. */
    c = llama_config(ATTN_ARCH_TRANSFORMER_LM);
    check_model_gradients("language model as LLaMA: rope, rms_norm, swiglu, no bias", c);
    c.tie_output = 1;
    c.bias = 1;
    c.ffn = ATTN_FFN_MLP;
    c.activation = ATTN_ACT_GELU;
    check_model_gradients("language model: rope, rms_norm, biases, tied", c);
    c = llama_config(ATTN_ARCH_TRANSFORMER);
    c.norm_first = 0;
    check_model_gradients("transformer, post-norm: rope, rms_norm, swiglu, no bias", c);
    c = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.positions = ATTN_POSITIONS_ROPE;
    c.bias = 0;
    check_model_gradients("classifier: rope, LayerNorms without bias", c);
    c = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.pooling = ATTN_POOLING_CLS;
    check_model_gradients("classifier, pooling cls", c);
    c.pooling = ATTN_POOLING_ATTENTION;
    check_model_gradients("classifier, pooling attention", c);
    c.norm_first = 1;
    c.positions = ATTN_POSITIONS_LEARNED;
    check_model_gradients("classifier, pooling attention, pre-norm, learned positions", c);
    check_model_gradients("masked language model", tiny_config(ATTN_ARCH_TRANSFORMER_MLM));
    c = tiny_config(ATTN_ARCH_TRANSFORMER_MLM);
    c.norm_first = 1;
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    check_model_gradients("masked language model, pre-norm, learned positions, no bias", c);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

static void test_every_isa_matches_the_reference(void)
{
    CHECK_OK(attn_set_num_threads(2));
    for (int arch = 0; arch < 3; arch++) {
        attn_model_config c = tiny_config((attn_model_arch)arch);
        c.d_model = 16;
        c.ffn_dim = 20;
        attn_model *m = new_model(&c, 4, MODEL_OWN_INIT);
        const attn_model_batch batch = fixed_batch();
        size_t n;
        float *reference = logits_and_grads(m, &batch, ATTN_ISA_REFERENCE, &n);
        double *as_double = test_alloc(n * sizeof(double));
        for (size_t i = 0; i < n; i++)
            as_double[i] = reference[i];
        const attn_isa isas[] = {ATTN_ISA_PORTABLE, ATTN_ISA_AVX2, ATTN_ISA_AVX512,
                                 ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
        for (int k = 0; k < (int)(sizeof isas / sizeof isas[0]); k++) {
            if (!attn_isa_supported(isas[k]))
                continue;
            size_t n1, n2;
            float *first = logits_and_grads(m, &batch, isas[k], &n1);
            float *second = logits_and_grads(m, &batch, isas[k], &n2);
            char what[96];
            snprintf(what, sizeof what, "arch %d at %s", arch, attn_isa_name(isas[k]));
            CHECK_ARRAYS_CLOSE(what, first, as_double, n, 2e-5, 1e-3);
            CHECK(n1 == n && n2 == n && memcmp(first, second, n * sizeof(float)) == 0,
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

/* ---- masks ------------------------------------------------------------------------------- */

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

/* The masked language model's loss is the mean cross-entropy of the chosen positions alone:
 * recomputed in double from the logits of every position, with the unchosen rows' logits
 * made as wrong as can be (their arg-max anything but the token there), it is the same. */
static void test_mlm_loss_counts_only_chosen_positions(void)
{
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER_MLM);
    c.label_smoothing = 0.0;
    attn_model *m = new_model(&c, 5, MODEL_OWN_INIT);
    randomise(m, 6);
    const attn_model_batch batch = fixed_batch();
    size_t count = 0;
    float *logits = logits_of(m, &batch, &count);
    CHECK(count == (size_t)(BATCH * SRC_LEN * c.src_vocab), "logits [3, 5, 9]: %zu", count);
    double expected = 0.0;
    int64_t chosen = 0;
    for (int64_t r = 0; r < BATCH * SRC_LEN && count == (size_t)(BATCH * SRC_LEN * c.src_vocab);
         r++) {
        if (batch_mlm_targets[r] == -1)
            continue;
        const float *row = logits + r * c.src_vocab;
        double top = row[0], sum = 0.0;
        for (int64_t v = 1; v < c.src_vocab; v++)
            top = row[v] > top ? row[v] : top;
        for (int64_t v = 0; v < c.src_vocab; v++)
            sum += exp((double)row[v] - top);
        expected += top + log(sum) - (double)row[batch_mlm_targets[r]];
        chosen++;
    }
    expected /= (double)chosen;
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, 0);
    attn_var *loss = NULL;
    int64_t tokens = 0, correct = 0;
    CHECK_OK(attn_model_forward_loss_counted(m, g, &batch, 0, &loss, &tokens, &correct));
    CHECK(tokens == 4, "4 chosen positions scored, got %lld", (long long)tokens);
    CHECK(loss != NULL && fabs((double)loss->value.data[0] - expected) < 1e-5 * (1.0 + expected),
          "loss %.7f, the chosen positions' mean cross-entropy %.7f",
          loss ? (double)loss->value.data[0] : NAN, expected);
    const float chosen_loss = loss != NULL ? loss->value.data[0] : NAN;
    /* Unchosen targets marked as chosen change the loss: the -1s are what leaves them out. */
    int32_t all_chosen[BATCH * SRC_LEN];
    for (int64_t r = 0; r < BATCH * SRC_LEN; r++)
        all_chosen[r] = batch_src[r] != PAD ? batch_src[r] : -1;
    attn_model_batch every = batch;
    every.mlm_targets = all_chosen;
    attn_var *every_loss = NULL;
    attn_graph_reset(g);
    CHECK_OK(attn_model_forward_loss_counted(m, g, &every, 0, &every_loss, &tokens, &correct));
    CHECK(tokens == 10 && every_loss != NULL && every_loss->value.data[0] != chosen_loss,
          "every position scored: %lld tokens", (long long)tokens);
    attn_model_batch missing = batch;
    missing.mlm_targets = NULL;
    attn_graph_reset(g);
    CHECK_FAILS(attn_model_forward_loss(m, g, &missing, &loss), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);
    free(logits);
    attn_model_destroy(m);
}

/* A classifier made from a masked language model's config takes every encoder parameter bit
 * for bit and keeps its own head; where the encoder ends is where its head starts. */
static void test_classifier_takes_the_encoder(void)
{
    attn_model_config e = tiny_config(ATTN_ARCH_TRANSFORMER_MLM);
    e.positions = ATTN_POSITIONS_LEARNED;
    attn_model *encoder = new_model(&e, 7, MODEL_OWN_INIT);
    randomise(encoder, 8);
    attn_model_config c = e;
    c.arch = ATTN_ARCH_TRANSFORMER_CLASSIFIER;
    c.num_classes = 3;
    c.pooling = ATTN_POOLING_ATTENTION;
    attn_model *classifier = new_model(&c, 9, MODEL_OWN_INIT);
    attn_params *to = attn_model_params(classifier);
    const attn_params *from = attn_model_params(encoder);
    attn_param_id head;
    CHECK_OK(attn_params_find(to, "pooling.proj.weight", &head));
    attn_param_info head_info;
    CHECK_OK(attn_params_info(to, head, &head_info));
    float *before = test_alloc(attn_params_buffer_floats(to) * sizeof(float));
    memcpy(before, attn_params_buffer(to, ATTN_PARAM_VALUES),
           attn_params_buffer_floats(to) * sizeof(float));
    int64_t encoder_floats = -1;
    CHECK_OK(attn_model_copy_encoder(classifier, encoder, &encoder_floats));
    CHECK(encoder_floats == (int64_t)head_info.offset, "the encoder ends at the head: %lld, %zu",
          (long long)encoder_floats, head_info.offset);
    size_t copied = 0;
    for (size_t i = 0; i < attn_params_count(to); i++) {
        attn_param_info info;
        attn_param_id id;
        CHECK_OK(attn_params_info(to, (attn_param_id)i, &info));
        const float *now = attn_params_data(to, (attn_param_id)i, ATTN_PARAM_VALUES);
        if (attn_params_find(from, info.name, &id) == ATTN_OK) {
            CHECK(memcmp(now, attn_params_data(from, id, ATTN_PARAM_VALUES),
                         (size_t)info.numel * sizeof(float)) == 0,
                  "%s is the encoder's, bit for bit", info.name);
            copied++;
        } else {
            attn_clear_error();
            CHECK(memcmp(now, before + info.offset, (size_t)info.numel * sizeof(float)) == 0,
                  "%s (the head) is left as it was", info.name);
        }
    }
    CHECK(copied + 1 == attn_params_count(from), "every encoder parameter but generator.bias");
    /* A classifier of another shape, or the models the wrong way round, are refused. */
    CHECK_FAILS(attn_model_copy_encoder(encoder, classifier, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_model_config wider = c;
    wider.ffn_dim = 16;
    attn_model *other = new_model(&wider, 9, MODEL_OWN_INIT);
    CHECK_FAILS(attn_model_copy_encoder(other, encoder, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "linear1.weight") != NULL, "%s", attn_last_error());
    attn_model_destroy(other);
    free(before);
    attn_model_destroy(classifier);
    attn_model_destroy(encoder);
}

static void test_padding_and_future_are_invisible(void)
{
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    attn_model *m = new_model(&c, 5, MODEL_OWN_INIT);
    attn_model_batch batch = fixed_batch();
    size_t n;
    float *base = logits_of(m, &batch, &n);
    const int64_t steps = TGT_LEN - 1, vocab = c.tgt_vocab;
    CHECK(n == (size_t)(BATCH * steps * vocab), "logits [3, 5, 11]");

    /* Other padding ids in source and target change no logit of a real position. */
    int32_t src[BATCH * SRC_LEN], tgt[BATCH * TGT_LEN];
    memcpy(src, batch_src, sizeof src);
    memcpy(tgt, batch_tgt, sizeof tgt);
    for (int b = 0; b < BATCH; b++) {
        for (int j = batch_src_lengths[b]; j < SRC_LEN; j++)
            src[b * SRC_LEN + j] = 8;
        for (int j = batch_tgt_lengths[b]; j < TGT_LEN; j++)
            tgt[b * TGT_LEN + j] = 9;
    }
    attn_model_batch padded = batch;
    padded.src = src;
    padded.tgt = tgt;
    float *other = logits_of(m, &padded, &n);
    int same = 1;
    for (int b = 0; b < BATCH; b++)
        for (int t = 0; t < batch_tgt_lengths[b] - 1; t++)
            same &= memcmp(base + (b * steps + t) * vocab, other + (b * steps + t) * vocab,
                           (size_t)vocab * sizeof(float)) == 0;
    CHECK(same, "padding changes no real position's logits");
    free(other);

    /* A later target token changes no earlier prediction. */
    memcpy(tgt, batch_tgt, sizeof tgt);
    tgt[3] = 4; /* sentence 0, position 3 */
    padded.src = batch_src;
    padded.tgt = tgt;
    other = logits_of(m, &padded, &n);
    CHECK(memcmp(base, other, 3 * (size_t)vocab * sizeof(float)) == 0,
          "positions 0..2 do not see position 3");
    CHECK(memcmp(base + 3 * vocab, other + 3 * vocab, (size_t)vocab * sizeof(float)) != 0,
          "position 3 sees itself");
    free(other);
    free(base);
    attn_model_destroy(m);
}

/* ---- save and load ----------------------------------------------------------------------- */

static void test_save_and_load_give_identical_logits(void)
{
    for (int arch = 0; arch < 3; arch++) {
        attn_model_config c = tiny_config((attn_model_arch)arch);
        c.norm_first = arch == 1;
        attn_model *m = new_model(&c, 6, MODEL_OWN_INIT);
        const char *path = test_scratch_path("model.safetensors");
        attn_metadata_entry extra = {"tokenizer", "{\"kind\": \"char\"}"};
        CHECK_OK(attn_model_save(m, path, &extra, 1));
        attn_model *back = NULL;
        CHECK_OK(attn_model_load(path, &back));
        attn_model_batch batch = fixed_batch();
        size_t n1 = 0, n2 = 0;
        float *a = logits_of(m, &batch, &n1);
        float *b = back ? logits_of(back, &batch, &n2) : NULL;
        CHECK(back && n1 == n2 && n1 > 0 && memcmp(a, b, n1 * sizeof(float)) == 0,
              "arch %d: identical logits after a round trip", arch);
        attn_tensor_file *file = NULL;
        const char *value = NULL;
        CHECK_OK(attn_tensor_file_open(path, &file));
        CHECK_OK(attn_tensor_file_metadata(file, "tokenizer", &value));
        CHECK(value && strcmp(value, "{\"kind\": \"char\"}") == 0, "extra metadata kept");
        CHECK_OK(attn_tensor_file_metadata(file, ATTN_MODEL_CONFIG_KEY, &value));
        attn_model_config stored;
        CHECK_OK(attn_model_config_from_json(value, &stored));
        CHECK(stored.arch == c.arch && stored.norm_first == c.norm_first, "config stored");
        attn_tensor_file_close(file);
        free(a);
        free(b);
        attn_model_destroy(back);

        attn_metadata_entry clash = {ATTN_MODEL_CONFIG_KEY, "{}"};
        CHECK_FAILS(attn_model_save(m, path, &clash, 1), ATTN_ERR_INVALID_ARGUMENT);
        attn_model_destroy(m);
    }

    /* A file without a config, or with weights of another model. */
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    attn_model *m = new_model(&c, 6, MODEL_OWN_INIT);
    const char *bare = test_scratch_path("bare.safetensors");
    CHECK_OK(attn_params_save(attn_model_params(m), bare, NULL, 0));
    attn_model *back = NULL;
    CHECK_FAILS(attn_model_load(bare, &back), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), ATTN_MODEL_CONFIG_KEY) != NULL, "%s", attn_last_error());
    attn_model_config bigger = c;
    bigger.ffn_dim = 16;
    attn_model *other = new_model(&bigger, 1, MODEL_OWN_INIT);
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(bare, &file));
    CHECK_FAILS(attn_model_load_weights(other, file), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "linear1") != NULL, "names the mismatch: %s",
          attn_last_error());
    attn_tensor_file_close(file);
    CHECK_FAILS(attn_model_load(test_scratch_path("missing.safetensors"), &back), ATTN_ERR_IO);
    attn_model_destroy(other);
    attn_model_destroy(m);
}

/* ---- memory ------------------------------------------------------------------------------ */

static void test_no_arena_growth_after_the_first_step(void)
{
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    c.dropout = 0.1;
    attn_model *m = new_model(&c, 7, MODEL_OWN_INIT);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    /* The full batch, then a shorter one (the first two sentences, cut), alternately. */
    attn_model_batch full = fixed_batch(), shorter = fixed_batch();
    const int32_t short_src[2 * 3] = {4, 5, 6, 5, 5, 0}, short_src_lengths[2] = {3, 2};
    const int32_t short_tgt[2 * 3] = {1, 4, 2, 1, 2, 0}, short_tgt_lengths[2] = {3, 2};
    shorter.size = 2;
    shorter.src_len = 3;
    shorter.src = short_src;
    shorter.src_lengths = short_src_lengths;
    shorter.tgt_len = 3;
    shorter.tgt = short_tgt;
    shorter.tgt_lengths = short_tgt_lengths;
    size_t peak = 0, used = 0;
    float *loss_address = NULL;
    int stable = 1;
    for (int step = 0; step < 6; step++) {
        attn_model_batch *batch = step % 2 == 0 ? &full : &shorter;
        attn_graph_reset(g);
        attn_graph_set_dropout_seed(g, 1, (uint64_t)step);
        attn_params_zero_grad(attn_model_params(m));
        attn_var *loss = NULL;
        CHECK_OK(attn_model_forward_loss(m, g, batch, &loss));
        CHECK_OK(attn_graph_backward(g, loss));
        if (step == 0) {
            peak = attn_graph_memory_peak(g);
            used = attn_graph_memory_used(g);
            loss_address = loss ? loss->value.data : NULL;
        } else if (batch == &full) {
            stable &= attn_graph_memory_peak(g) == peak && attn_graph_memory_used(g) == used &&
                      loss != NULL && loss->value.data == loss_address;
        } else {
            stable &= attn_graph_memory_peak(g) == peak && attn_graph_memory_used(g) < used;
        }
    }
    CHECK(stable, "later steps reuse step 1's arena exactly (peak %zu bytes)", peak);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

/* ---- learning a copy task ---------------------------------------------------------------- */

enum { COPY_SYMBOLS = 8, COPY_VOCAB = FIRST_SYMBOL + COPY_SYMBOLS, COPY_BATCH = 16, COPY_MAX = 6 };

typedef struct copy_data {
    int32_t src[COPY_BATCH * COPY_MAX];
    int32_t src_lengths[COPY_BATCH];
    int32_t tgt[COPY_BATCH * (COPY_MAX + 2)];
    int32_t tgt_lengths[COPY_BATCH];
} copy_data;

static void make_copy_data(copy_data *d, uint64_t seed)
{
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    memset(d, 0, sizeof *d);
    for (int b = 0; b < COPY_BATCH; b++) {
        int len = 3 + (int)attn_rng_below(&rng, COPY_MAX - 2);
        d->src_lengths[b] = len;
        d->tgt_lengths[b] = len + 2;
        int32_t *tgt = d->tgt + b * (COPY_MAX + 2);
        tgt[0] = BOS;
        for (int j = 0; j < len; j++) {
            int32_t symbol = FIRST_SYMBOL + (int32_t)attn_rng_below(&rng, COPY_SYMBOLS);
            d->src[b * COPY_MAX + j] = symbol;
            tgt[j + 1] = symbol;
        }
        tgt[len + 1] = EOS;
    }
}

/* One Adam step over the whole parameter buffer (the real optimizer comes with training). */
static void adam_step(attn_params *store, int step, float lr)
{
    const float beta1 = 0.9f, beta2 = 0.98f, eps = 1e-9f;
    float *p = attn_params_buffer(store, ATTN_PARAM_VALUES);
    const float *g = attn_params_buffer(store, ATTN_PARAM_GRADS);
    float *mom = attn_params_buffer(store, ATTN_PARAM_ADAM_M);
    float *vel = attn_params_buffer(store, ATTN_PARAM_ADAM_V);
    const float c1 = 1.0f - powf(beta1, (float)step), c2 = 1.0f - powf(beta2, (float)step);
    for (size_t i = 0; i < attn_params_buffer_floats(store); i++) {
        mom[i] = beta1 * mom[i] + (1 - beta1) * g[i];
        vel[i] = beta2 * vel[i] + (1 - beta2) * g[i] * g[i];
        p[i] -= lr * (mom[i] / c1) / (sqrtf(vel[i] / c2) + eps);
    }
}

/* Greedy decoding through attn_model_encode / attn_model_decode; returns how many sentences
 * come back exactly (symbols then </s>). */
static int greedy_exact_matches(attn_model *m, const copy_data *d)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, 0);
    attn_var *memory = NULL;
    CHECK_OK(attn_model_encode(m, g, COPY_BATCH, COPY_MAX, d->src, d->src_lengths, &memory));
    enum { OUT = COPY_MAX + 2 };
    int32_t out[COPY_BATCH * OUT];
    for (int b = 0; b < COPY_BATCH; b++)
        out[b * OUT] = BOS;
    for (int len = 1; len < OUT && memory != NULL; len++) {
        attn_var *logits = NULL;
        CHECK_OK(attn_model_decode(m, g, memory, d->src_lengths, COPY_BATCH, len, out, OUT, NULL,
                                   &logits));
        if (logits == NULL)
            break;
        for (int b = 0; b < COPY_BATCH; b++) {
            const float *row = logits->value.data + ((int64_t)b * len + len - 1) * COPY_VOCAB;
            int best = 0;
            for (int v = 1; v < COPY_VOCAB; v++)
                if (row[v] > row[best])
                    best = v;
            out[b * OUT + len] = best;
        }
    }
    int exact = 0;
    for (int b = 0; b < COPY_BATCH; b++)
        exact += memcmp(out + b * OUT, d->tgt + b * OUT,
                        (size_t)d->tgt_lengths[b] * sizeof(int32_t)) == 0;
    attn_graph_destroy(g);
    return exact;
}

static void test_learns_to_copy(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = 32;
    c.num_heads = 4;
    c.ffn_dim = 64;
    c.encoder_layers = 2;
    c.decoder_layers = 2;
    c.src_vocab = c.tgt_vocab = COPY_VOCAB;
    c.share_embeddings = 1;
    c.dropout = 0.0;
    c.label_smoothing = 0.0;
    c.max_len = 16;
    attn_model *m = new_model(&c, 11, MODEL_OWN_INIT);
    attn_params *store = attn_model_params(m);
    copy_data data;
    make_copy_data(&data, 12);
    attn_model_batch batch = {COPY_BATCH,
                              COPY_MAX,
                              data.src,
                              data.src_lengths,
                              COPY_MAX + 2,
                              data.tgt,
                              data.tgt_lengths,
                              NULL,
                              NULL,
                              0,
                              0.0,
                              NULL};
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    int before = greedy_exact_matches(m, &data);
    float first_loss = 0.0f, loss_value = 0.0f;
    int steps = 0;
    for (steps = 1; steps <= 400; steps++) {
        attn_graph_reset(g);
        attn_params_zero_grad(store);
        attn_var *loss = NULL;
        CHECK_OK(attn_model_forward_loss(m, g, &batch, &loss));
        if (loss == NULL)
            break;
        CHECK_OK(attn_graph_backward(g, loss));
        loss_value = loss->value.data[0];
        if (steps == 1)
            first_loss = loss_value;
        adam_step(store, steps, 5e-3f);
        if (loss_value < 0.03f)
            break;
    }
    int after = greedy_exact_matches(m, &data);
    printf("  copy task: loss %.3f -> %.4f in %d steps; exact %d -> %d of %d\n", first_loss,
           loss_value, steps, before, after, COPY_BATCH);
    CHECK(loss_value < 0.05f, "the loss falls below 0.05 (%g)", loss_value);
    CHECK(after == COPY_BATCH, "greedy decoding copies every sentence (%d of %d)", after,
          COPY_BATCH);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

/* ---- argument checks --------------------------------------------------------------------- */

static void test_bad_arguments_are_rejected(void)
{
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    attn_model *m = new_model(&c, 8, MODEL_OWN_INIT);
    attn_graph *g = NULL, *foreign = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    CHECK_OK(attn_graph_create(NULL, &foreign));
    attn_var *out = NULL;
    attn_model_batch batch = fixed_batch();
    CHECK_FAILS(attn_model_forward_loss(m, foreign, &batch, &out), bad);
    CHECK(strstr(attn_last_error(), "not created for this model") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_model_forward_loss(NULL, g, &batch, &out), bad);
    CHECK_FAILS(attn_model_forward_loss(m, g, NULL, &out), bad);
    CHECK_FAILS(attn_model_forward_loss(m, g, &batch, NULL), bad);

    int32_t lengths[BATCH] = {6, 0, 5};
    attn_model_batch wrong = batch;
    wrong.tgt_lengths = lengths;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    CHECK(strstr(attn_last_error(), "tgt_lengths[1] = 0") != NULL, "%s", attn_last_error());
    lengths[1] = 7;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    int32_t src_lengths[BATCH] = {5, 6, 1};
    wrong = batch;
    wrong.src_lengths = src_lengths;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    int32_t src[BATCH * SRC_LEN];
    memcpy(src, batch_src, sizeof src);
    src[2] = 9; /* vocabulary of 9 */
    wrong = batch;
    wrong.src = src;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    CHECK(strstr(attn_last_error(), "= 9") != NULL, "%s", attn_last_error());
    wrong = batch;
    wrong.tgt = NULL;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    wrong = batch;
    wrong.src_len = 17; /* max_len 16 */
    CHECK_FAILS(attn_model_forward_logits(m, g, &wrong, &out), bad);
    CHECK(strstr(attn_last_error(), "max_len") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_model_decode(m, g, NULL, NULL, 1, 2, batch_tgt, 2, NULL, &out), bad);
    CHECK(strstr(attn_last_error(), "memory") != NULL, "%s", attn_last_error());
    attn_model_batch empty = {0, SRC_LEN, NULL, NULL, TGT_LEN, NULL, NULL, NULL, NULL, 0, 0.0, NULL};
    CHECK_OK(attn_model_forward_loss(m, g, &empty, &out));
    CHECK(out && out->value.data[0] == 0.0f, "an empty batch: loss 0");
    attn_graph_destroy(g);
    attn_model_destroy(m);

    c = tiny_config(ATTN_ARCH_TRANSFORMER_LM);
    m = new_model(&c, 8, MODEL_OWN_INIT);
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    CHECK_FAILS(attn_model_encode(m, g, BATCH, SRC_LEN, batch_src, batch_src_lengths, &out), bad);
    CHECK(strstr(attn_last_error(), "no encoder") != NULL, "%s", attn_last_error());
    CHECK_OK(attn_model_decode(m, g, NULL, NULL, BATCH, 2, batch_tgt, TGT_LEN, NULL, &out));
    CHECK(out && out->value.shape[1] == 2 && out->value.shape[2] == 11, "LM decode logits");
    attn_graph_destroy(g);
    attn_model_destroy(m);

    c = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    m = new_model(&c, 8, MODEL_OWN_INIT);
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    int32_t labels[BATCH] = {0, 3, 1};
    wrong = fixed_batch();
    wrong.labels = labels;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    CHECK(strstr(attn_last_error(), "labels[1] = 3") != NULL, "%s", attn_last_error());
    wrong.labels = NULL;
    CHECK_FAILS(attn_model_forward_loss(m, g, &wrong, &out), bad);
    CHECK_FAILS(attn_model_decode(m, g, NULL, NULL, 1, 1, batch_tgt, 1, NULL, &out), bad);
    batch = fixed_batch();
    CHECK_OK(attn_model_forward_logits(m, g, &batch, &out));
    CHECK(out && out->value.ndim == 2 && out->value.shape[0] == BATCH && out->value.shape[1] == 3,
          "classifier logits [3, 3]");
    attn_graph_destroy(g);
    attn_graph_destroy(foreign);
    attn_model_destroy(m);

    c = tiny_config(ATTN_ARCH_TRANSFORMER);
    c.num_heads = 3;
    CHECK_FAILS(attn_model_create(&c, &m), bad);
    CHECK_FAILS(attn_model_create(NULL, &m), bad);
    CHECK_FAILS(attn_model_init(NULL, 1), bad);
    attn_model_destroy(NULL);
}

int main(void)
{
    RUN_TEST(test_parameter_names);
    RUN_TEST(test_model_gradients_match_finite_differences);
    RUN_TEST(test_every_isa_matches_the_reference);
    RUN_TEST(test_mlm_loss_counts_only_chosen_positions);
    RUN_TEST(test_classifier_takes_the_encoder);
    RUN_TEST(test_padding_and_future_are_invisible);
    RUN_TEST(test_save_and_load_give_identical_logits);
    RUN_TEST(test_no_arena_growth_after_the_first_step);
    RUN_TEST(test_learns_to_copy);
    RUN_TEST(test_bad_arguments_are_rejected);
    return test_summary();
}
