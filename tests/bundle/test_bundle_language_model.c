/* A language model's bundle: a file with only a target tokenizer loads (an encoder-decoder
 * without a source tokenizer is still refused), a prompt starts with </s> and is refused or cut
 * when it leaves no room in the context, generated ids turn into lines, generating through the
 * bundle equals attn_generate, and perplexity is the mean cross-entropy of the stream's
 * windows computed from the model's own logits. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_LEN = 10 };

static const char *const TEXT[3] = {"abc", "cab bad", "a"};

static attn_tokenizer *char_tokenizer(void)
{
    attn_tokenizer_config chars;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &chars));
    CHECK_OK(attn_tokenizer_train(&chars, TEXT, 3, &tokenizer));
    return tokenizer;
}

/* Writes a model of arch with only the target tokenizer in its metadata; its path. */
static const char *write_model(attn_model_arch arch, const attn_tokenizer *tokenizer,
                               const char *name)
{
    attn_model_config c = attn_model_config_default(arch);
    c.d_model = 16;
    c.num_heads = 2;
    c.ffn_dim = 24;
    c.encoder_layers = arch == ATTN_ARCH_TRANSFORMER ? 1 : 0;
    c.decoder_layers = 1;
    c.dropout = 0.0;
    c.src_vocab = arch == ATTN_ARCH_TRANSFORMER ? 8 : 0;
    c.tgt_vocab = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    c.max_len = MAX_LEN;
    attn_model *model = NULL;
    char *json = NULL;
    const char *path = test_scratch_path(name);
    CHECK_OK(attn_model_create(&c, &model));
    CHECK_OK(attn_model_init(model, 9));
    CHECK_OK(attn_tokenizer_to_json(tokenizer, &json));
    const attn_metadata_entry entry = {ATTN_TGT_TOKENIZER_KEY, json};
    CHECK_OK(attn_model_save(model, path, &entry, 1));
    free(json);
    attn_model_destroy(model);
    return path;
}

static void test_loading(void)
{
    attn_tokenizer *tokenizer = char_tokenizer();
    attn_bundle *bundle = NULL;
    CHECK_OK(attn_bundle_load(write_model(ATTN_ARCH_TRANSFORMER_LM, tokenizer, "lm.safetensors"),
                              &bundle));
    CHECK(bundle != NULL && attn_bundle_tokenizer(bundle, ATTN_BUNDLE_SOURCE) == NULL &&
              attn_bundle_tokenizer(bundle, ATTN_BUNDLE_TARGET) != NULL,
          "a language model has its target tokenizer only");
    CHECK_OK(attn_bundle_check_language_model(bundle));
    CHECK_FAILS(attn_bundle_check_encoder_decoder(bundle), ATTN_ERR_INVALID_ARGUMENT);
    int32_t *ids = NULL;
    int64_t count = 0;
    CHECK_FAILS(attn_bundle_encode(bundle, "abc", &ids, &count, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_bundle_encode_prompt") != NULL, "message: %s",
          attn_last_error());
    const char *label = NULL;
    CHECK_FAILS(attn_bundle_labels(bundle, ATTN_BUNDLE_SOURCE, ids, 0, &label),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_bundle_destroy(bundle);

    bundle = NULL;
    CHECK_FAILS(
        attn_bundle_load(write_model(ATTN_ARCH_TRANSFORMER, tokenizer, "mt.safetensors"), &bundle),
        ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), ATTN_SRC_TOKENIZER_KEY) != NULL, "message: %s",
          attn_last_error());
    attn_tokenizer_destroy(tokenizer);
}

static void test_prompts_and_text(void)
{
    attn_tokenizer *tokenizer = char_tokenizer();
    attn_bundle *bundle = NULL;
    CHECK_OK(attn_bundle_load(write_model(ATTN_ARCH_TRANSFORMER_LM, tokenizer, "lm2.safetensors"),
                              &bundle));
    attn_tokenizer_destroy(tokenizer);
    if (bundle == NULL)
        return;
    int32_t *ids = NULL;
    int64_t count = 0, unknown = 0, cut = 0;
    CHECK_OK(attn_bundle_encode_prompt(bundle, "abz", 0, &ids, &count, &unknown, &cut));
    CHECK(count == 4 && ids[0] == ATTN_EOS_ID && ids[3] == ATTN_UNK_ID && unknown == 1 && cut == 0,
          "prompt \"abz\": %lld ids, %lld unknown", (long long)count, (long long)unknown);
    free(ids);
    /* 9 ids (</s> and 8 characters) fit a context of 10; 10 do not. */
    CHECK_OK(attn_bundle_encode_prompt(bundle, "abcabcab", 0, &ids, &count, NULL, NULL));
    CHECK(count == MAX_LEN - 1, "a prompt of max_len - 1 ids is taken (%lld)", (long long)count);
    free(ids);
    CHECK_FAILS(attn_bundle_encode_prompt(bundle, "abcabcabc", 0, &ids, &count, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "10 tokens") != NULL, "message: %s", attn_last_error());
    CHECK_OK(attn_bundle_encode_prompt(bundle, "bbbbcabca", 1, &ids, &count, NULL, &cut));
    char *text = NULL;
    CHECK(count == MAX_LEN - 1 && cut == 1 && ids[0] != ATTN_EOS_ID, "cut: %lld ids, %lld cut",
          (long long)count, (long long)cut);
    CHECK_OK(attn_bundle_generated_text(bundle, ids, count, &text));
    CHECK(text != NULL && strcmp(text, "bbbbcabca") == 0, "the cut keeps the last tokens: %s",
          text);
    free(text);

    /* </s> is a line break, anywhere. */
    const int32_t eos = ATTN_EOS_ID;
    int32_t lines[8];
    int64_t n = 0;
    lines[n++] = eos;
    lines[n++] = ids[4]; /* c */
    lines[n++] = eos;
    lines[n++] = eos;
    lines[n++] = ids[5]; /* a */
    CHECK_OK(attn_bundle_generated_text(bundle, lines, n, &text));
    CHECK(text != NULL && strcmp(text, "\nc\n\na") == 0, "generated text: \"%s\"", text);
    free(text);
    free(ids);

    /* Through the bundle, what attn_generate gives. */
    const int32_t prompt[3] = {ATTN_EOS_ID, 4, 5};
    const int32_t *prompts[1] = {prompt};
    const int64_t length = 3;
    attn_sample_options options = attn_sample_default_options();
    options.seed = 17;
    options.max_new_tokens = 5;
    attn_generate_result *a = NULL, *b = NULL;
    CHECK_OK(attn_bundle_generate(bundle, 1, prompts, &length, NULL, &options, NULL, NULL, &a));
    CHECK_OK(attn_generate(attn_bundle_model(bundle), attn_bundle_graph(bundle), 1, prompts,
                           &length, NULL, &options, NULL, NULL, &b));
    CHECK(a != NULL && b != NULL && a->generations[0].length == b->generations[0].length &&
              memcmp(a->generations[0].tokens, b->generations[0].tokens,
                     (size_t)a->generations[0].length * sizeof(int32_t)) == 0,
          "attn_bundle_generate equals attn_generate");
    attn_generate_result_destroy(a);
    attn_generate_result_destroy(b);
    attn_bundle_destroy(bundle);
}

/* The stream "abc</s>cab bad</s>a</s>" (15 ids) in windows of 11 ids overlapping by one: ids
 * 0..10 and 10..14; its cross-entropy from attn_model_forward_logits on each window. */
static void test_perplexity(void)
{
    attn_tokenizer *tokenizer = char_tokenizer();
    attn_bundle *bundle = NULL;
    CHECK_OK(attn_bundle_load(write_model(ATTN_ARCH_TRANSFORMER_LM, tokenizer, "lm3.safetensors"),
                              &bundle));
    if (bundle == NULL) {
        attn_tokenizer_destroy(tokenizer);
        return;
    }
    int32_t stream[32];
    int64_t length = 0;
    for (int i = 0; i < 3; i++) {
        int32_t *ids = NULL;
        int64_t count = 0;
        CHECK_OK(attn_tokenizer_encode(tokenizer, TEXT[i], &ids, &count));
        memcpy(stream + length, ids, (size_t)count * sizeof *ids);
        length += count;
        stream[length++] = ATTN_EOS_ID;
        free(ids);
    }
    attn_tokenizer_destroy(tokenizer);
    const int64_t vocab = attn_bundle_config(bundle)->tgt_vocab;
    double nats = 0;
    for (int64_t start = 0; start + 1 < length; start += MAX_LEN) {
        const int32_t window =
            (int32_t)(length - start < MAX_LEN + 1 ? length - start : MAX_LEN + 1);
        attn_model_batch batch = {0};
        batch.size = 1;
        batch.tgt_len = window;
        batch.tgt = stream + start;
        batch.tgt_lengths = &window;
        attn_graph *graph = attn_bundle_graph(bundle);
        attn_graph_reset(graph);
        attn_graph_set_recording(graph, 0);
        attn_var *logits = NULL;
        CHECK_OK(attn_model_forward_logits(attn_bundle_model(bundle), graph, &batch, &logits));
        for (int64_t t = 0; logits != NULL && t + 1 < window; t++) {
            const float *z = logits->value.data + t * vocab;
            double sum = 0;
            for (int64_t v = 0; v < vocab; v++)
                sum += exp((double)z[v]);
            nats += log(sum) - z[stream[start + t + 1]];
        }
    }
    attn_text_score score;
    CHECK_OK(attn_bundle_score_text(bundle, TEXT, 3, 1, &score));
    CHECK(score.tokens == length - 1 && score.characters == 3 + 1 + 7 + 1 + 1 + 1,
          "%lld tokens, %lld characters", (long long)score.tokens, (long long)score.characters);
    CHECK_CLOSE(score.nats, nats, 1e-9, 1e-6);
    CHECK_CLOSE(score.perplexity, exp(nats / (double)(length - 1)), 0, 1e-6);
    CHECK_CLOSE(score.bits_per_character, nats / log(2.0) / 14.0, 0, 1e-6);
    attn_text_score batched;
    CHECK_OK(attn_bundle_score_text(bundle, TEXT, 3, 8, &batched));
    CHECK_CLOSE(batched.nats, score.nats, 0, 1e-6);
    const char *empty[1] = {""};
    CHECK_FAILS(attn_bundle_score_text(bundle, empty, 1, 1, &score), ATTN_ERR_INVALID_ARGUMENT);
    attn_bundle_destroy(bundle);
}

int main(void)
{
    RUN_TEST(test_loading);
    RUN_TEST(test_prompts_and_text);
    RUN_TEST(test_perplexity);
    return test_summary();
}
