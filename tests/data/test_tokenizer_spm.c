/* SentencePiece tokenizers through the library: learned from lines in memory, a user's model
 * read from its bytes (spm_train's default layout, shifted past attn's specials), the JSON
 * that carries the model, and refusals of bytes that are no model. The comparison with the
 * spm_* tools is tests/python/test_sentencepiece_cli.py's; this runs under the sanitizers. In a
 * build without libsentencepiece, it checks that every way in says so. */
#include "data_test_util.h"

static const char *const lines[] = {
    "the river runs past the old mill and under the stone bridge",
    "in winter the children skate on the frozen pond behind the school",
    "my grandmother keeps bees and sells their honey at the market",
    "the train to hamburg leaves at a quarter past seven",
    "we walked for three hours before we found a place to camp",
    "she reads the newspaper every morning with a cup of black coffee",
};
#define N_LINES ((int64_t)(sizeof lines / sizeof *lines))

/* A model spm_train wrote with its defaults (<unk> 0, <s> 1, </s> 2, no <pad>; 80 pieces,
 * identity normalisation): the fuzz harness's seed. */
static char *seed_model(const char *name, size_t *size)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", __FILE__);
    char *slash = strrchr(path, '/');
    snprintf(slash, sizeof path - (size_t)(slash - path), "/../fuzz/corpus/spm_model/%s", name);
    FILE *file = fopen(path, "rb");
    CHECK(file != NULL, "opens %s", path);
    if (file == NULL)
        return NULL;
    char *bytes = test_alloc(1 << 16);
    *size = fread(bytes, 1, 1 << 16, file);
    fclose(file);
    return bytes;
}

static void test_config_parse(void)
{
    attn_tokenizer_config config;
    CHECK_OK(attn_tokenizer_config_parse("spm:8000", &config));
    CHECK(config.kind == ATTN_TOKENIZER_SPM && config.spm_vocab_size == 8000 && !config.spm_bpe,
          "spm:8000");
    CHECK_OK(attn_tokenizer_config_parse("spm-bpe:500", &config));
    CHECK(config.kind == ATTN_TOKENIZER_SPM && config.spm_vocab_size == 500 && config.spm_bpe,
          "spm-bpe:500");
    static const char *bad[] = {"spm", "spm:", "spm:7", "spm:-5", "spm-bpe:x", "spm-bpe",
                                "spm:99999999999", "spm-unigram:10"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_FAILS(attn_tokenizer_config_parse(bad[i], &config), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strcmp(attn_tokenizer_kind_name(ATTN_TOKENIZER_SPM), "spm") == 0, "spm's name");
}

static void test_without_the_library(void)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("spm:50", &config));
    CHECK_FAILS(attn_tokenizer_train(&config, lines, N_LINES, &tokenizer), ATTN_ERR_UNSUPPORTED);
    CHECK(message_has("built without SentencePiece", "install libsentencepiece-dev"), "%s",
          attn_last_error());
    size_t size = 0;
    char *model = seed_model("unigram_identity.model", &size);
    CHECK_FAILS(attn_tokenizer_from_spm_model(model, size, &tokenizer), ATTN_ERR_UNSUPPORTED);
    CHECK(tokenizer == NULL, "no tokenizer");
    free(model);
}

/* Encodes and decodes each line: a learned model's NFKC leaves these lines as they are. */
static void check_round_trips(const attn_tokenizer *tokenizer)
{
    const int64_t vocab = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    for (int64_t i = 0; i < N_LINES; i++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        CHECK_OK(attn_tokenizer_encode(tokenizer, lines[i], &ids, &n));
        int in_range = n > 0;
        for (int64_t k = 0; k < n; k++)
            in_range &= ids[k] >= ATTN_NUM_SPECIAL_IDS && ids[k] < vocab;
        CHECK(in_range, "line %lld: text pieces only", (long long)i);
        char *text = NULL;
        CHECK_OK(attn_tokenizer_decode(tokenizer, ids, n, &text));
        CHECK(text != NULL && strcmp(text, lines[i]) == 0, "line %lld: '%s'", (long long)i,
              text != NULL ? text : "(null)");
        free(text);
        free(ids);
    }
}

static void test_learned(int bpe)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse(bpe ? "spm-bpe:60" : "spm:60", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &tokenizer));
    CHECK(attn_tokenizer_get_kind(tokenizer) == ATTN_TOKENIZER_SPM, "kind");
    const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
    CHECK(attn_vocab_size(vocab) > 30 && attn_vocab_size(vocab) <= 60, "%lld pieces",
          (long long)attn_vocab_size(vocab));
    CHECK(strcmp(attn_vocab_token(vocab, ATTN_UNK_ID), "<unk>") == 0, "attn's <unk> at 3");
    check_round_trips(tokenizer);

    /* Without byte fallback (60 pieces) an unseen character is <unk>; specials spelled in the
     * text are text. */
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_OK(attn_tokenizer_encode(tokenizer, "the \xD0\xB6 <s>", &ids, &n));
    int unknown = 0, special = 0;
    for (int64_t k = 0; k < n; k++) {
        unknown += ids[k] == ATTN_UNK_ID;
        special += ids[k] < ATTN_UNK_ID;
    }
    CHECK(unknown >= 1 && special == 0, "%d unknown, %d special", unknown, special);
    free(ids);

    /* The JSON carries the model: the copy encodes alike and has the same fingerprint. */
    char *json = NULL;
    CHECK_OK(attn_tokenizer_to_json(tokenizer, &json));
    attn_tokenizer *copy = NULL;
    CHECK_OK(attn_tokenizer_from_json(json, &copy));
    check_round_trips(copy);
    uint64_t a = 0, b = 0;
    CHECK_OK(attn_tokenizer_fingerprint(tokenizer, &a));
    CHECK_OK(attn_tokenizer_fingerprint(copy, &b));
    CHECK(a == b, "fingerprints");

    /* The same lines learn the same model. */
    attn_tokenizer *again = NULL;
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &again));
    char *json_again = NULL;
    CHECK_OK(attn_tokenizer_to_json(again, &json_again));
    CHECK(strcmp(json, json_again) == 0, "deterministic");

    /* A broken "spm_model" is refused. */
    char *at = strstr(json, "\"spm_model\":\"");
    CHECK(at != NULL, "the JSON has the model");
    if (at != NULL) {
        at[13] = '#';
        attn_tokenizer *broken = NULL;
        CHECK_FAILS(attn_tokenizer_from_json(json, &broken), ATTN_ERR_FORMAT);
        CHECK(message_has("spm_model", NULL), "%s", attn_last_error());
    }
    free(json);
    free(json_again);
    attn_tokenizer_destroy(again);
    attn_tokenizer_destroy(copy);
    attn_tokenizer_destroy(tokenizer);
}

static void test_learned_unigram(void)
{
    test_learned(0);
}

static void test_learned_bpe(void)
{
    test_learned(1);
}

static void test_users_model_is_shifted_past_the_specials(void)
{
    size_t size = 0;
    char *model = seed_model("unigram_identity.model", &size);
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_from_spm_model(model, size, &tokenizer));
    const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
    CHECK(attn_vocab_size(vocab) == 80 + ATTN_NUM_SPECIAL_IDS, "%lld ids",
          (long long)attn_vocab_size(vocab));
    CHECK(strcmp(attn_vocab_token(vocab, ATTN_PAD_ID), "<pad>") == 0 &&
              strcmp(attn_vocab_token(vocab, 4), "<model <unk>>") == 0 &&
              strcmp(attn_vocab_token(vocab, 5), "<model <s>>") == 0,
          "the model's own specials, renamed");
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_OK(attn_tokenizer_encode(tokenizer, "the river \xD0\xB6", &ids, &n));
    CHECK(n >= 3 && ids[n - 1] == ATTN_UNK_ID && ids[0] > 6, "ids shifted, <unk> attn's");
    char *text = NULL;
    CHECK_OK(attn_tokenizer_decode(tokenizer, ids, n, &text));
    /* <unk> is left out; the space piece before it stays, as spm_decode keeps it. */
    CHECK(text != NULL && strcmp(text, "the river ") == 0, "'%s'", text != NULL ? text : "");
    free(text);
    free(ids);
    attn_tokenizer_destroy(tokenizer);

    /* What is not a model: nothing, a truncation, noise. */
    const size_t cuts[] = {0, size / 2, 7};
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        CHECK_FAILS(attn_tokenizer_from_spm_model(model, cuts[i], &tokenizer), ATTN_ERR_FORMAT);
        CHECK(tokenizer == NULL && message_has("not a SentencePiece model", NULL), "%s",
              attn_last_error());
    }
    for (size_t i = 0; i < size; i++)
        model[i] = (char)(i * 37 + 11);
    CHECK_FAILS(attn_tokenizer_from_spm_model(model, size, &tokenizer), ATTN_ERR_FORMAT);
    free(model);
    CHECK_FAILS(attn_tokenizer_load_spm("/nonexistent/x.model", &tokenizer), ATTN_ERR_IO);
    CHECK(message_has("/nonexistent/x.model", NULL), "%s", attn_last_error());
}

int main(void)
{
    RUN_TEST(test_config_parse);
    if (!attn_tokenizer_spm_available()) {
        RUN_TEST(test_without_the_library);
        return test_summary();
    }
    RUN_TEST(test_learned_unigram);
    RUN_TEST(test_learned_bpe);
    RUN_TEST(test_users_model_is_shifted_past_the_specials);
    return test_summary();
}
