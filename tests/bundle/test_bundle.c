/* The model bundle: a model file and a checkpoint written by the trainer load with their
 * tokenizers (from a path and from an open file); files that are no model, lack tokenizers or
 * are cut short fail with a message naming them; translating through the bundle equals
 * attn_decode on the same ids; encode counts unknown tokens and refuses over-long text. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { PAIRS = 40 };

static char sources[PAIRS][12], targets[PAIRS][12];
static const char *source_texts[PAIRS], *target_texts[PAIRS];
static attn_tokenizer *src_tok, *tgt_tok;

/* A reverse-the-word corpus of letters a..f, and its character tokenizers. */
static void make_data(void)
{
    attn_rng rng;
    attn_rng_seed(&rng, 11);
    for (int i = 0; i < PAIRS; i++) {
        int len = 2 + (int)attn_rng_below(&rng, 5);
        for (int j = 0; j < len; j++)
            sources[i][j] = (char)('a' + attn_rng_below(&rng, 6));
        for (int j = 0; j < len; j++)
            targets[i][j] = sources[i][len - 1 - j];
        source_texts[i] = sources[i];
        target_texts[i] = targets[i];
    }
    attn_tokenizer_config chars;
    CHECK_OK(attn_tokenizer_config_parse("char", &chars));
    CHECK_OK(attn_tokenizer_train(&chars, source_texts, PAIRS, &src_tok));
    CHECK_OK(attn_tokenizer_train(&chars, target_texts, PAIRS, &tgt_tok));
}

static attn_model_config tiny_config(attn_model_arch arch)
{
    const int classifier = arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER;
    attn_model_config c = attn_model_config_default(arch);
    c.d_model = 16;
    c.num_heads = 2;
    c.ffn_dim = 32;
    c.encoder_layers = 1;
    c.decoder_layers = classifier ? 0 : 1;
    c.dropout = 0.0;
    c.src_vocab = attn_vocab_size(attn_tokenizer_vocab(src_tok));
    c.tgt_vocab = classifier ? 0 : attn_vocab_size(attn_tokenizer_vocab(tgt_tok));
    c.num_classes = classifier ? 3 : 0;
    c.max_len = 12;
    return c;
}

/* A few training steps write the model file and the checkpoint, with the tokenizers the
 * bundle describes (attn_bundle_metadata), as attn train does. */
static void train_files(const char *model_path, const char *checkpoint_path)
{
    attn_corpus *corpus = NULL;
    attn_model *model = NULL;
    attn_trainer *trainer = NULL;
    attn_metadata_entry metadata[ATTN_BUNDLE_METADATA_COUNT];
    attn_trainable trainable;
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    CHECK_OK(attn_corpus_from_strings(source_texts, target_texts, PAIRS, &corpus));
    CHECK_OK(attn_corpus_encode(corpus, src_tok, tgt_tok));
    CHECK_OK(attn_model_create(&c, &model));
    CHECK_OK(attn_model_init(model, 3));
    CHECK_OK(attn_bundle_metadata(src_tok, tgt_tok, metadata));
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 64;
    o.max_steps = 4;
    o.best_path = model_path;
    o.checkpoint_path = checkpoint_path;
    o.metadata = metadata;
    o.n_metadata = ATTN_BUNDLE_METADATA_COUNT;
    CHECK_OK(attn_trainable_from_model(model, &trainable));
    CHECK_OK(attn_trainer_create(&trainable, corpus, NULL, &o, &trainer));
    CHECK_OK(attn_trainer_run(trainer));
    attn_trainer_destroy(trainer);
    attn_bundle_metadata_free(metadata);
    CHECK(metadata[0].value == NULL && metadata[1].value == NULL, "metadata values freed");
    attn_model_destroy(model);
    attn_corpus_destroy(corpus);
}

/* The bundle's tokenizers write the JSON the file holds, and its model the file's weights. */
static void check_matches_file(const attn_bundle *bundle, const char *path)
{
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    const char *keys[2] = {ATTN_SRC_TOKENIZER_KEY, ATTN_TGT_TOKENIZER_KEY};
    const attn_bundle_side sides[2] = {ATTN_BUNDLE_SOURCE, ATTN_BUNDLE_TARGET};
    for (int i = 0; i < 2; i++) {
        const char *stored = NULL;
        char *json = NULL;
        CHECK_OK(attn_tensor_file_metadata(file, keys[i], &stored));
        CHECK_OK(attn_tokenizer_to_json(attn_bundle_tokenizer(bundle, sides[i]), &json));
        CHECK(stored != NULL && json != NULL && strcmp(stored, json) == 0, "%s round trip",
              keys[i]);
        free(json);
    }
    attn_params *params = attn_model_params(attn_bundle_model(bundle));
    attn_param_info info;
    CHECK_OK(attn_params_info(params, 0, &info));
    attn_tensor_info stored;
    CHECK_OK(attn_tensor_file_find(file, info.name, &stored));
    const float *values = attn_params_data(params, 0, ATTN_PARAM_VALUES);
    CHECK(stored.nbytes == (size_t)info.numel * sizeof(float) &&
              memcmp(stored.data, values, stored.nbytes) == 0,
          "%s holds the file's weights", info.name);
    CHECK(attn_bundle_config(bundle)->arch == ATTN_ARCH_TRANSFORMER &&
              attn_bundle_config(bundle)->d_model == 16,
          "the file's config");
    CHECK(attn_bundle_graph(bundle) != NULL, "a graph to decode on");
    CHECK_OK(attn_bundle_check_encoder_decoder(bundle));
    attn_tensor_file_close(file);
}

static void test_loads_model_and_checkpoint(void)
{
    const char *model_path = test_scratch_path("model.safetensors");
    const char *checkpoint_path = test_scratch_path("model.last.safetensors");
    train_files(model_path, checkpoint_path);

    attn_bundle *bundle = NULL;
    CHECK_OK(attn_bundle_load(model_path, &bundle));
    if (bundle != NULL)
        check_matches_file(bundle, model_path);
    attn_bundle_destroy(bundle);

    /* A checkpoint opened once gives the bundle and the training state. */
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(checkpoint_path, &file));
    bundle = NULL;
    CHECK_OK(attn_bundle_from_file(file, checkpoint_path, &bundle));
    attn_trainer_options o;
    CHECK_OK(attn_trainer_options_from_checkpoint(file, &o));
    CHECK(o.batch_tokens == 64, "the checkpoint's options (batch_tokens %lld)",
          (long long)o.batch_tokens);
    attn_tensor_file_close(file);
    if (bundle != NULL)
        check_matches_file(bundle, checkpoint_path);

    /* A trainer takes the model and tokenizers over. */
    attn_model *model = NULL;
    attn_tokenizer *source = NULL, *target = NULL;
    const attn_model *inside = attn_bundle_model(bundle);
    CHECK_FAILS(attn_bundle_release(bundle, &model, NULL, &target), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_bundle_release(bundle, &model, &source, &target));
    CHECK(model != NULL && model == inside && source != NULL && target != NULL,
          "the parts handed over");
    CHECK(attn_vocab_size(attn_tokenizer_vocab(source)) ==
              attn_vocab_size(attn_tokenizer_vocab(src_tok)),
          "the source tokenizer");
    attn_model_destroy(model);
    attn_tokenizer_destroy(source);
    attn_tokenizer_destroy(target);
    attn_bundle_destroy(NULL);
}

static void check_message(const char *needle)
{
    CHECK(strstr(attn_last_error(), needle) != NULL, "message '%s' names '%s'", attn_last_error(),
          needle);
}

static void test_files_that_are_not_bundles(void)
{
    attn_bundle *bundle = NULL;
    const char *model_path = test_scratch_path("model.safetensors");

    /* Not a safetensors file at all. */
    const char *text = test_scratch_path("text.safetensors");
    FILE *f = fopen(text, "w");
    CHECK(f != NULL, "write %s", text);
    if (f != NULL) {
        fputs("not a model\n", f);
        fclose(f);
    }
    CHECK_FAILS(attn_bundle_load(text, &bundle), ATTN_ERR_FORMAT);
    check_message("text.safetensors");
    CHECK(bundle == NULL, "no bundle on failure");

    /* A missing file. */
    CHECK_FAILS(attn_bundle_load(test_scratch_path("missing.safetensors"), &bundle), ATTN_ERR_IO);
    check_message("missing.safetensors");

    /* Tensors but no model config. */
    const float weights[4] = {1, 2, 3, 4};
    attn_named_tensor tensor = {"w", ATTN_DTYPE_F32, 1, {4}, weights};
    const char *bare = test_scratch_path("weights.safetensors");
    CHECK_OK(attn_tensor_file_write(bare, &tensor, 1, NULL, 0));
    CHECK_FAILS(attn_bundle_load(bare, &bundle), ATTN_ERR_FORMAT);
    check_message("not a model saved by attn");
    check_message("weights.safetensors");

    /* A model without tokenizers (attn_model_save alone). */
    attn_model_config c = tiny_config(ATTN_ARCH_TRANSFORMER);
    attn_model *model = NULL;
    CHECK_OK(attn_model_create(&c, &model));
    CHECK_OK(attn_model_init(model, 1));
    const char *untokenized = test_scratch_path("untokenized.safetensors");
    CHECK_OK(attn_model_save(model, untokenized, NULL, 0));
    attn_model_destroy(model);
    CHECK_FAILS(attn_bundle_load(untokenized, &bundle), ATTN_ERR_FORMAT);
    check_message("use a model written by 'attn train'");
    check_message("untokenized.safetensors");

    /* A tokenizer whose JSON does not parse. */
    attn_metadata_entry broken[2] = {{ATTN_SRC_TOKENIZER_KEY, "{\"format\": 1}"},
                                     {ATTN_TGT_TOKENIZER_KEY, "{}"}};
    CHECK_OK(attn_model_create(&c, &model));
    CHECK_OK(attn_model_init(model, 1));
    const char *bad_json = test_scratch_path("bad_tokenizer.safetensors");
    CHECK_OK(attn_model_save(model, bad_json, broken, 2));
    attn_model_destroy(model);
    CHECK_FAILS(attn_bundle_load(bad_json, &bundle), ATTN_ERR_FORMAT);
    check_message(ATTN_SRC_TOKENIZER_KEY);

    /* Cut short: the data area ends early. */
    FILE *in = fopen(model_path, "rb");
    CHECK(in != NULL, "read %s", model_path);
    if (in != NULL) {
        char buffer[4096];
        size_t got = fread(buffer, 1, sizeof buffer, in);
        fclose(in);
        const char *truncated = test_scratch_path("truncated.safetensors");
        FILE *out = fopen(truncated, "wb");
        CHECK(out != NULL && got == sizeof buffer, "write %s", truncated);
        if (out != NULL) {
            fwrite(buffer, 1, got, out);
            fclose(out);
        }
        CHECK_FAILS(attn_bundle_load(truncated, &bundle), ATTN_ERR_FORMAT);
        check_message("truncated.safetensors");
    }

    /* A classifier needs its class names; with them it loads and classifies, but does not
     * translate. */
    attn_model_config classifier = tiny_config(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    attn_metadata_entry metadata[ATTN_BUNDLE_METADATA_COUNT];
    CHECK_OK(attn_bundle_metadata(src_tok, tgt_tok, metadata));
    CHECK_OK(attn_model_create(&classifier, &model));
    CHECK_OK(attn_model_init(model, 1));
    const char *classifier_path = test_scratch_path("classifier.safetensors");
    CHECK_OK(attn_model_save(model, classifier_path, metadata, ATTN_BUNDLE_METADATA_COUNT));
    CHECK_FAILS(attn_bundle_load(classifier_path, &bundle), ATTN_ERR_FORMAT);
    check_message("without its class names");
    const char *names[3] = {"neg", "neutral", "pos"};
    attn_labels *labels = NULL;
    char *labels_json = NULL;
    CHECK_OK(attn_labels_from_names(names, 3, &labels));
    CHECK_OK(attn_labels_to_json(labels, &labels_json));
    attn_labels_destroy(labels);
    const attn_metadata_entry with_labels[2] = {{ATTN_SRC_TOKENIZER_KEY, metadata[0].value},
                                                {ATTN_LABELS_KEY, labels_json}};
    CHECK(strcmp(metadata[0].key, ATTN_SRC_TOKENIZER_KEY) == 0, "the source tokenizer first");
    CHECK_OK(attn_model_save(model, classifier_path, with_labels, 2));
    attn_model_destroy(model);
    attn_bundle_metadata_free(metadata);
    free(labels_json);
    CHECK_OK(attn_bundle_load(classifier_path, &bundle));
    CHECK_FAILS(attn_bundle_check_encoder_decoder(bundle), ATTN_ERR_INVALID_ARGUMENT);
    check_message("not an encoder-decoder");
    int32_t ids[2] = {4, 5};
    const int32_t *rows[1] = {ids};
    int64_t counts[1] = {2};
    attn_decode_result *result = NULL;
    CHECK_FAILS(attn_bundle_decode(bundle, 1, rows, counts, NULL, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(result == NULL, "no result on failure");
    CHECK_OK(attn_bundle_check_classifier(bundle));
    CHECK(attn_labels_count(attn_bundle_classes(bundle)) == 3 &&
              strcmp(attn_labels_name(attn_bundle_classes(bundle), 2), "pos") == 0,
          "the class names");
    float probabilities[3];
    CHECK_OK(attn_bundle_classify(bundle, 1, rows, counts, probabilities));
    CHECK(fabs(probabilities[0] + probabilities[1] + probabilities[2] - 1.0) < 1e-5,
          "probabilities sum to one");
    attn_bundle_destroy(bundle);

    CHECK_FAILS(attn_bundle_load(NULL, &bundle), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bundle_from_file(NULL, "x", &bundle), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_encode(void)
{
    attn_bundle *bundle = NULL;
    CHECK_OK(attn_bundle_load(test_scratch_path("model.safetensors"), &bundle));
    if (bundle == NULL)
        return;
    int32_t *ids = NULL, *plain = NULL;
    int64_t count = -1, plain_count = -1, unknown = -1;
    CHECK_OK(attn_bundle_encode(bundle, "abcab", &ids, &count, &unknown));
    CHECK_OK(attn_tokenizer_encode(src_tok, "abcab", &plain, &plain_count));
    CHECK(count == plain_count && count == 5 && memcmp(ids, plain, 5 * sizeof *ids) == 0,
          "the source tokenizer's ids");
    CHECK(unknown == 0, "no unknown tokens (%lld)", (long long)unknown);
    free(ids);
    free(plain);

    CHECK_OK(attn_bundle_encode(bundle, "azzb", &ids, &count, &unknown));
    CHECK(count == 4 && unknown == 2 && ids[1] == ATTN_UNK_ID, "two unknown tokens (%lld)",
          (long long)unknown);
    free(ids);
    CHECK_OK(attn_bundle_encode(bundle, "", &ids, &count, NULL));
    CHECK(ids != NULL && count == 0, "an empty text has no ids");
    free(ids);

    CHECK_FAILS(attn_bundle_encode(bundle, "abcabcabcabca", &ids, &count, &unknown),
                ATTN_ERR_INVALID_ARGUMENT);
    check_message("13 tokens, above the 12 the model reads (max_len 12)");
    CHECK(ids == NULL && count == 0, "nothing on failure");
    CHECK(attn_bundle_source_limit(bundle) == 12, "a translator reads max_len source ids");

    /* Truncated: the head's ids, exactly as the head alone encodes, and the count cut. */
    int32_t *head = NULL;
    int64_t head_count = 0, cut = -1;
    CHECK_OK(attn_bundle_encode_truncated(bundle, "abcabcabcabzbzz", &ids, &count, &unknown, &cut));
    CHECK_OK(attn_bundle_encode(bundle, "abcabcabcabz", &head, &head_count, NULL));
    CHECK(count == 12 && head_count == 12 && cut == 3, "12 ids kept, 3 cut (%lld, %lld)",
          (long long)count, (long long)cut);
    CHECK(memcmp(ids, head, 12 * sizeof *ids) == 0, "the kept ids are the head's");
    CHECK(unknown == 1, "only the kept ids' <unk> count (%lld)", (long long)unknown);
    free(ids);
    free(head);
    CHECK_OK(attn_bundle_encode_truncated(bundle, "abc", &ids, &count, NULL, &cut));
    CHECK(count == 3 && cut == 0, "a short text is not cut");
    free(ids);

    const char *labels[3];
    const int32_t some[3] = {ATTN_BOS_ID, 4, 1000};
    CHECK_OK(attn_bundle_labels(bundle, ATTN_BUNDLE_TARGET, some, 3, labels));
    CHECK(strcmp(labels[0], "<s>") == 0 && strcmp(labels[2], "?") == 0, "labels %s %s", labels[0],
          labels[2]);
    CHECK(strcmp(labels[1], attn_vocab_token(attn_tokenizer_vocab(tgt_tok), 4)) == 0,
          "label of id 4");
    CHECK_FAILS(attn_bundle_labels(bundle, (attn_bundle_side)2, some, 3, labels),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_bundle_tokenizer(bundle, (attn_bundle_side)2) == NULL, "no third tokenizer");
    attn_bundle_destroy(bundle);
}

/* Translating through the bundle is attn_decode on the same padded ids, hypothesis for
 * hypothesis, and the text is the target tokenizer's. */
static void test_decode_equals_attn_decode(void)
{
    attn_bundle *bundle = NULL;
    CHECK_OK(attn_bundle_load(test_scratch_path("model.safetensors"), &bundle));
    if (bundle == NULL)
        return;
    const char *texts[3] = {"abc", "fedcba", "a"};
    int32_t *ids[3] = {NULL, NULL, NULL};
    int64_t counts[3];
    for (int i = 0; i < 3; i++)
        CHECK_OK(attn_bundle_encode(bundle, texts[i], &ids[i], &counts[i], NULL));
    attn_decode_options options = attn_decode_default_options();
    options.beam_size = 3;
    options.nbest = 2;
    options.alignments = 1;
    attn_decode_result *ours = NULL, *reference = NULL;
    CHECK_OK(attn_bundle_decode(bundle, 3, (const int32_t *const *)ids, counts, &options, &ours));

    int32_t src[3 * 6] = {0}, lengths[3];
    for (int i = 0; i < 3; i++) {
        memcpy(src + i * 6, ids[i], (size_t)counts[i] * sizeof *src);
        lengths[i] = (int32_t)counts[i];
    }
    attn_model *model = NULL;
    attn_graph *graph = NULL;
    CHECK_OK(attn_model_load(test_scratch_path("model.safetensors"), &model));
    CHECK_OK(attn_graph_create(attn_model_params(model), &graph));
    CHECK_OK(attn_decode(model, graph, 3, 6, src, lengths, &options, &reference));
    CHECK(ours != NULL && reference != NULL && ours->size == 3 && reference->size == 3 &&
              ours->cross_maps == reference->cross_maps,
          "three sentences");
    for (int64_t i = 0; ours != NULL && reference != NULL && i < 3; i++) {
        const attn_decode_sentence *a = &ours->sentences[i], *b = &reference->sentences[i];
        CHECK(a->count == b->count && a->src_length == b->src_length, "sentence %lld",
              (long long)i);
        for (int64_t j = 0; j < a->count && j < b->count; j++) {
            const attn_hypothesis *x = &a->hypotheses[j], *y = &b->hypotheses[j];
            const size_t cross = (size_t)(x->steps * ours->cross_maps * a->src_length);
            CHECK(x->length == y->length && x->score == y->score && x->steps == y->steps &&
                      memcmp(x->tokens, y->tokens, (size_t)x->length * sizeof *x->tokens) == 0 &&
                      memcmp(x->cross, y->cross, cross * sizeof *x->cross) == 0,
                  "sentence %lld hypothesis %lld", (long long)i, (long long)j);
            char *text = NULL, *expected = NULL;
            CHECK_OK(attn_bundle_text(bundle, x, &text));
            CHECK_OK(attn_tokenizer_decode(tgt_tok, y->tokens, y->length, &expected));
            CHECK(text != NULL && expected != NULL && strcmp(text, expected) == 0, "text '%s'",
                  text != NULL ? text : "(null)");
            free(text);
            free(expected);
        }
    }
    attn_decode_result_destroy(ours);
    attn_decode_result_destroy(reference);

    /* Default options: greedy. */
    CHECK_OK(attn_bundle_decode(bundle, 1, (const int32_t *const *)ids, counts, NULL, &ours));
    CHECK(ours != NULL && ours->sentences[0].count == 1, "one hypothesis by default");
    attn_decode_result_destroy(ours);

    int64_t empty[1] = {0};
    CHECK_FAILS(attn_bundle_decode(bundle, 1, (const int32_t *const *)ids, empty, NULL, &ours),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bundle_decode(bundle, 0, (const int32_t *const *)ids, counts, NULL, &ours),
                ATTN_ERR_INVALID_ARGUMENT);
    for (int i = 0; i < 3; i++)
        free(ids[i]);
    attn_graph_destroy(graph);
    attn_model_destroy(model);
    attn_bundle_destroy(bundle);
}

int main(void)
{
    make_data();
    RUN_TEST(test_loads_model_and_checkpoint);
    RUN_TEST(test_files_that_are_not_bundles);
    RUN_TEST(test_encode);
    RUN_TEST(test_decode_equals_attn_decode);
    attn_tokenizer_destroy(src_tok);
    attn_tokenizer_destroy(tgt_tok);
    return test_summary();
}
