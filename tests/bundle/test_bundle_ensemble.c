/* Ensembles and averages of model files: bundles with the same tokenizers make an ensemble
 * (architectures may differ) and two loads of one file translate as the file; tokenizers that
 * differ are refused, naming both files and the difference. attn_bundle_average of one file
 * is the file, of two is their mean to the float (also written over one of its inputs), and
 * files of different configs or tokenizers are refused. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

enum { PAIRS = 30 };

static char sources[PAIRS][10], targets[PAIRS][10];
static const char *source_texts[PAIRS], *target_texts[PAIRS];
static attn_tokenizer *src_tok, *tgt_tok, *other_tgt_tok;

/* A reverse-the-word corpus of letters a..f, its character tokenizers, and a target tokenizer
 * of the same size but another order of tokens (the words reversed again: the same letters,
 * seen in another order). */
static void make_data(void)
{
    attn_rng rng;
    attn_rng_seed(&rng, 5);
    static char shifted[PAIRS][10];
    const char *shifted_texts[PAIRS];
    for (int i = 0; i < PAIRS; i++) {
        int len = 2 + (int)attn_rng_below(&rng, 5);
        for (int j = 0; j < len; j++)
            sources[i][j] = (char)('a' + attn_rng_below(&rng, 6));
        for (int j = 0; j < len; j++) {
            targets[i][j] = sources[i][len - 1 - j];
            shifted[i][j] = (char)('a' + ('f' - sources[i][len - 1 - j]));
        }
        source_texts[i] = sources[i];
        target_texts[i] = targets[i];
        shifted_texts[i] = shifted[i];
    }
    attn_tokenizer_config chars;
    CHECK_OK(attn_tokenizer_config_parse("char", &chars));
    CHECK_OK(attn_tokenizer_train(&chars, source_texts, PAIRS, &src_tok));
    CHECK_OK(attn_tokenizer_train(&chars, target_texts, PAIRS, &tgt_tok));
    CHECK_OK(attn_tokenizer_train(&chars, shifted_texts, PAIRS, &other_tgt_tok));
}

static attn_model_config tiny_config(attn_model_arch arch, int64_t ffn_dim)
{
    attn_model_config c = attn_model_config_default(arch);
    if (arch == ATTN_ARCH_TRANSFORMER) {
        c.d_model = 8;
        c.num_heads = 2;
        c.ffn_dim = ffn_dim;
        c.encoder_layers = 1;
        c.decoder_layers = 1;
    } else {
        c.hidden = 6;
        c.embedding_dim = 4;
        c.attention_dim = 4;
    }
    c.dropout = 0.0;
    c.src_vocab = attn_vocab_size(attn_tokenizer_vocab(src_tok));
    c.tgt_vocab = attn_vocab_size(attn_tokenizer_vocab(tgt_tok));
    c.max_len = 12;
    return c;
}

/* A model file as attn train writes it: weights from seed, config, tokenizers. */
static const char *write_model(const char *name, attn_model_arch arch, int64_t ffn_dim,
                               uint64_t seed, const attn_tokenizer *target)
{
    const char *path = test_scratch_path(name);
    attn_model_config c = tiny_config(arch, ffn_dim);
    attn_model *model = NULL;
    attn_metadata_entry metadata[ATTN_BUNDLE_METADATA_COUNT];
    CHECK_OK(attn_model_create(&c, &model));
    CHECK_OK(attn_model_init(model, seed));
    CHECK_OK(attn_bundle_metadata(src_tok, target, metadata));
    CHECK_OK(attn_model_save(model, path, metadata, ATTN_BUNDLE_METADATA_COUNT));
    attn_bundle_metadata_free(metadata);
    attn_model_destroy(model);
    return path;
}

static attn_bundle *load(const char *path)
{
    attn_bundle *b = NULL;
    CHECK_OK(attn_bundle_load(path, &b));
    return b;
}

static void check_message(const char *needle)
{
    CHECK(strstr(attn_last_error(), needle) != NULL, "message '%s' names '%s'", attn_last_error(),
          needle);
}

static const float *weights(const attn_bundle *b)
{
    return attn_params_buffer(attn_model_params(attn_bundle_model(b)), ATTN_PARAM_VALUES);
}

static size_t weight_count(const attn_bundle *b)
{
    return attn_params_buffer_floats(attn_model_params(attn_bundle_model(b)));
}

static void test_ensemble(void)
{
    const char *a = write_model("a.safetensors", ATTN_ARCH_TRANSFORMER, 16, 1, tgt_tok);
    const char *r = write_model("r.safetensors", ATTN_ARCH_RNN, 0, 2, tgt_tok);
    const char *other =
        write_model("other.safetensors", ATTN_ARCH_TRANSFORMER, 16, 3, other_tgt_tok);
    attn_bundle *bundles[3] = {load(a), load(r), load(other)};
    attn_bundle *copies[2] = {bundles[0], load(a)};
    CHECK_OK(attn_bundle_check_ensemble(bundles, 2));
    CHECK_FAILS(attn_bundle_check_ensemble(bundles, 3), ATTN_ERR_INVALID_ARGUMENT);
    check_message("a.safetensors and");
    check_message("other.safetensors have different target vocabularies (id 4 is");
    CHECK_FAILS(attn_bundle_check_ensemble(bundles, 0), ATTN_ERR_INVALID_ARGUMENT);

    /* Two loads of one file translate as the file, hypothesis for hypothesis. */
    int32_t *ids[3] = {NULL, NULL, NULL};
    int64_t counts[3] = {0, 0, 0};
    const char *texts[3] = {"abc", "fed", "aabbe"};
    for (int i = 0; i < 3; i++)
        CHECK_OK(attn_bundle_encode(bundles[0], texts[i], &ids[i], &counts[i], NULL));
    attn_decode_options o = attn_decode_default_options();
    o.beam_size = 3;
    o.nbest = 2;
    o.alignments = 1;
    attn_decode_result *alone = NULL, *twice = NULL, *mixed = NULL, *refused = NULL;
    CHECK_OK(attn_bundle_decode(bundles[0], 3, (const int32_t *const *)ids, counts, &o, &alone));
    CHECK_OK(
        attn_bundle_decode_ensemble(copies, 2, 3, (const int32_t *const *)ids, counts, &o, &twice));
    CHECK_OK(attn_bundle_decode_ensemble(bundles, 2, 3, (const int32_t *const *)ids, counts, &o,
                                         &mixed));
    CHECK_FAILS(attn_bundle_decode_ensemble(bundles, 3, 3, (const int32_t *const *)ids, counts, &o,
                                            &refused),
                ATTN_ERR_INVALID_ARGUMENT);
    int same = alone != NULL && twice != NULL;
    for (int i = 0; same && i < 3; i++) {
        const attn_decode_sentence *x = &alone->sentences[i], *y = &twice->sentences[i];
        same = x->count == y->count;
        for (int64_t j = 0; same && j < x->count; j++) {
            const attn_hypothesis *p = &x->hypotheses[j], *q = &y->hypotheses[j];
            same =
                p->length == q->length && p->log_prob == q->log_prob &&
                memcmp(p->tokens, q->tokens, (size_t)p->length * sizeof *p->tokens) == 0 &&
                memcmp(p->cross, q->cross,
                       (size_t)(p->steps * alone->cross_maps * counts[i]) * sizeof *p->cross) == 0;
        }
    }
    CHECK(same, "two loads of one file translate as the file, bit for bit");
    CHECK(mixed != NULL && mixed->cross_maps == 2 && mixed->sentences[0].count == 2,
          "a Transformer with an rnn: the Transformer's maps, n-best lists");
    CHECK(refused == NULL, "no result after a refusal");
    attn_decode_result_destroy(alone);
    attn_decode_result_destroy(twice);
    attn_decode_result_destroy(mixed);
    for (int i = 0; i < 3; i++) {
        free(ids[i]);
        attn_bundle_destroy(bundles[i]);
    }
    attn_bundle_destroy(copies[1]);
}

static void test_average(void)
{
    const char *a = write_model("avg_a.safetensors", ATTN_ARCH_TRANSFORMER, 16, 11, tgt_tok);
    const char *b = write_model("avg_b.safetensors", ATTN_ARCH_TRANSFORMER, 16, 12, tgt_tok);
    const char *wide = write_model("wide.safetensors", ATTN_ARCH_TRANSFORMER, 24, 13, tgt_tok);
    const char *other =
        write_model("avg_other.safetensors", ATTN_ARCH_TRANSFORMER, 16, 14, other_tgt_tok);
    const char *out = test_scratch_path("mean.safetensors");

    const char *one[1] = {a};
    CHECK_OK(attn_bundle_average(one, 1, out));
    attn_bundle *x = load(a), *y = load(b), *mean = load(out);
    const size_t n = x != NULL ? weight_count(x) : 0;
    CHECK(mean != NULL && weight_count(mean) == n &&
              memcmp(weights(mean), weights(x), n * sizeof(float)) == 0,
          "the average of one file is the file");
    char *json_x = NULL, *json_mean = NULL;
    if (mean != NULL && x != NULL) {
        CHECK_OK(attn_model_config_to_json(attn_bundle_config(x), &json_x));
        CHECK_OK(attn_model_config_to_json(attn_bundle_config(mean), &json_mean));
        CHECK(json_x != NULL && json_mean != NULL && strcmp(json_x, json_mean) == 0,
              "the config carried over");
        CHECK_OK(attn_bundle_check_ensemble((attn_bundle *[]){x, mean}, 2));
    }
    free(json_x);
    free(json_mean);
    attn_bundle_destroy(mean);

    const char *two[2] = {a, b};
    CHECK_OK(attn_bundle_average(two, 2, out));
    mean = load(out);
    int exact = mean != NULL && y != NULL && weight_count(mean) == n, differs = 0;
    for (size_t i = 0; exact && i < n; i++) {
        const float expected = (float)(((double)weights(x)[i] + (double)weights(y)[i]) / 2.0);
        exact = weights(mean)[i] == expected;
        differs |= weights(x)[i] != weights(y)[i];
    }
    CHECK(exact && differs, "the average of two files is their mean, to the float");
    attn_bundle_destroy(mean);

    /* Over one of its inputs: every input is read before the output is written. */
    const char *copy = test_scratch_path("copy.safetensors");
    CHECK_OK(attn_bundle_average(one, 1, copy));
    const char *onto[2] = {copy, b};
    CHECK_OK(attn_bundle_average(onto, 2, copy));
    mean = load(copy);
    attn_bundle *from_two = load(out);
    CHECK(mean != NULL && from_two != NULL &&
              memcmp(weights(mean), weights(from_two), n * sizeof(float)) == 0,
          "averaging over an input gives the same mean");
    attn_bundle_destroy(mean);
    attn_bundle_destroy(from_two);

    const char *shapes[2] = {a, wide};
    CHECK_FAILS(attn_bundle_average(shapes, 2, out), ATTN_ERR_INVALID_ARGUMENT);
    check_message("avg_a.safetensors and");
    check_message("wide.safetensors have different model configs (\"ffn_dim\": 16 vs 24");
    const char *vocabularies[2] = {a, other};
    CHECK_FAILS(attn_bundle_average(vocabularies, 2, out), ATTN_ERR_INVALID_ARGUMENT);
    check_message("different target vocabularies");
    const char *missing[2] = {a, test_scratch_path("missing.safetensors")};
    CHECK_FAILS(attn_bundle_average(missing, 2, out), ATTN_ERR_IO);
    check_message("missing.safetensors");
    CHECK_FAILS(attn_bundle_average(one, 0, out), ATTN_ERR_INVALID_ARGUMENT);
    attn_bundle_destroy(x);
    attn_bundle_destroy(y);
}

int main(void)
{
    make_data();
    RUN_TEST(test_ensemble);
    RUN_TEST(test_average);
    attn_tokenizer_destroy(src_tok);
    attn_tokenizer_destroy(tgt_tok);
    attn_tokenizer_destroy(other_tgt_tok);
    return test_summary();
}
