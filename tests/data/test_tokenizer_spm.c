/* SentencePiece tokenizers through the library: learned from lines in memory, a user's model
 * read from its bytes (spm_train's default layout, shifted past attn's specials), the JSON
 * that carries the model, and refusals of bytes that are no model. The comparison with the
 * spm_* tools is tests/python/test_sentencepiece_cli.py's; this runs under the sanitizers. In a
 * build without libsentencepiece, it checks that every way in says so. */
#include "data_test_util.h"

#include <math.h>
#include <pthread.h>

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
    CHECK_OK(attn_tokenizer_config_parse("bpe:300", &config));
    CHECK(config.kind == ATTN_TOKENIZER_SPM && config.spm_bpe && config.bpe_merges == 300 &&
              config.spm_vocab_size == 0,
          "bpe:300: SentencePiece's BPE, counted in merges");
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
    static const char *learned[] = {"spm:50", "spm-bpe:50", "bpe:20"};
    for (int k = 0; k < 3; k++) {
        CHECK_OK(attn_tokenizer_config_parse(learned[k], &config));
        CHECK_FAILS(attn_tokenizer_train(&config, lines, N_LINES, &tokenizer),
                    ATTN_ERR_UNSUPPORTED);
        CHECK(message_has("bpe:N, spm:N and spm-bpe:N", "install libsentencepiece-dev"), "%s",
              attn_last_error());
    }
    size_t size = 0;
    char *model = seed_model("unigram_identity.model", &size);
    CHECK_FAILS(attn_tokenizer_from_spm_model(model, size, &tokenizer), ATTN_ERR_UNSUPPORTED);
    CHECK(tokenizer == NULL, "no tokenizer");
    free(model);
    CHECK(!attn_tokenizer_can_sample(NULL), "nothing samples");
    /* Subword sampling is SentencePiece's: other tokenizers are refused the same way here. */
    attn_tokenizer *chars = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &chars));
    CHECK(!attn_tokenizer_can_sample(chars), "characters do not sample");
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_FAILS(attn_tokenizer_encode_sampled(chars, lines[0], 0.1, -1, 1, &ids, &n),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_tokenizer_destroy(chars);
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

/* The alphabet as SentencePiece's BPE holds it: the lines' characters, the space as U+2581. */
static int64_t alphabet_of_lines(void)
{
    int seen[256] = {0};
    int64_t count = 0;
    for (int64_t i = 0; i < N_LINES; i++)
        for (const char *c = lines[i]; *c != '\0'; c++)
            if (*c != ' ' && !seen[(unsigned char)*c]++)
                count++;
    return count + 1;
}

/* bpe:N makes N merges on top of the specials, the alphabet and the bytes if any, as attn's
 * own BPE did; the pieces it asked for are what the JSON records. */
static void test_bpe_counts_merges(void)
{
    const int64_t alphabet = alphabet_of_lines();
    for (int bytes = 0; bytes < 2; bytes++) {
        attn_tokenizer_config config;
        attn_tokenizer *tokenizer = NULL;
        CHECK_OK(attn_tokenizer_config_parse("bpe:40", &config));
        config.byte_fallback = bytes;
        CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &tokenizer));
        if (tokenizer == NULL)
            continue;
        const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
        const int64_t expected = ATTN_NUM_SPECIAL_IDS + alphabet + 40 + (bytes ? 256 : 0);
        CHECK(attn_vocab_size(vocab) == expected,
              "byte fallback %d: %lld pieces, expected 4 specials + %lld characters + 40 merges "
              "%s",
              bytes, (long long)attn_vocab_size(vocab), (long long)alphabet,
              bytes ? "+ 256 bytes" : "");
        CHECK((attn_vocab_id(vocab, "<0xFF>") >= ATTN_NUM_SPECIAL_IDS) == bytes,
              "the byte pieces are there exactly when asked");
        CHECK(attn_tokenizer_num_merges(tokenizer) == 0, "no merges of attn's earlier BPE");
        check_round_trips(tokenizer);
        char *json = NULL;
        CHECK_OK(attn_tokenizer_to_json(tokenizer, &json));
        char field[64];
        snprintf(field, sizeof field, "\"spm_vocab_size\":%lld", (long long)expected);
        CHECK(json != NULL && strstr(json, field) != NULL && strstr(json, "\"spm_type\":\"bpe\""),
              "the JSON records the pieces asked for: %s", field);
        free(json);
        attn_tokenizer_destroy(tokenizer);
    }
    /* 768 pieces or more get the bytes without asking, as spm-bpe:N of 1024 or more does. */
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("bpe:800", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &tokenizer));
    if (tokenizer != NULL)
        CHECK(attn_vocab_id(attn_tokenizer_vocab(tokenizer), "<0x00>") >= ATTN_NUM_SPECIAL_IDS,
              "bytes in a large vocabulary");
    attn_tokenizer_destroy(tokenizer);
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

/* ---- subword regularisation ---------------------------------------------------------------- */

static int same_ids(const int32_t *a, int64_t na, const int32_t *b, int64_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

typedef struct sample_job {
    const attn_tokenizer *tokenizer;
    const char *text;
    uint64_t seed;
    int32_t *ids;
    int64_t n;
    attn_status status;
} sample_job;

static void *sample_in_thread(void *arg)
{
    sample_job *job = arg;
    job->status = attn_tokenizer_encode_sampled(job->tokenizer, job->text, 0.1, -1, job->seed,
                                                &job->ids, &job->n);
    return NULL;
}

/* Samples decode to the text, differ from the best segmentation for some seed, and depend on
 * the seed alone: not on what was sampled before, nor on the thread. */
static void check_sampling(const attn_tokenizer *tokenizer, int64_t nbest)
{
    int differed = 0;
    for (int64_t i = 0; i < N_LINES; i++) {
        int32_t *best = NULL;
        int64_t n_best = 0;
        CHECK_OK(attn_tokenizer_encode(tokenizer, lines[i], &best, &n_best));
        for (uint64_t seed = 1; seed <= 8; seed++) {
            int32_t *ids = NULL, *again = NULL;
            int64_t n = 0, n_again = 0;
            CHECK_OK(
                attn_tokenizer_encode_sampled(tokenizer, lines[i], 0.1, nbest, seed, &ids, &n));
            char *text = NULL;
            CHECK_OK(attn_tokenizer_decode(tokenizer, ids, n, &text));
            CHECK(text != NULL && strcmp(text, lines[i]) == 0, "line %lld seed %llu: '%s'",
                  (long long)i, (unsigned long long)seed, text != NULL ? text : "");
            free(text);
            differed += !same_ids(ids, n, best, n_best);
            /* Another seed in between must not change what this seed gives. */
            CHECK_OK(attn_tokenizer_encode_sampled(tokenizer, lines[i], 0.1, nbest, seed + 100,
                                                   &again, &n_again));
            free(again);
            CHECK_OK(attn_tokenizer_encode_sampled(tokenizer, lines[i], 0.1, nbest, seed, &again,
                                                   &n_again));
            CHECK(same_ids(ids, n, again, n_again), "line %lld seed %llu: the same ids again",
                  (long long)i, (unsigned long long)seed);
            free(again);
            free(ids);
        }
        free(best);
    }
    CHECK(differed > N_LINES, "%d of %lld samples differ from the best segmentation", differed,
          (long long)(8 * N_LINES));

    /* A thread that never sampled before gives the main thread's ids for the same seed. */
    sample_job job = {tokenizer, lines[2], 77, NULL, 0, ATTN_OK};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, sample_in_thread, &job) == 0, "thread");
    pthread_join(thread, NULL);
    CHECK_OK(job.status);
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_OK(attn_tokenizer_encode_sampled(tokenizer, lines[2], 0.1, -1, 77, &ids, &n));
    CHECK(same_ids(ids, n, job.ids, job.n), "the same ids on another thread");
    free(ids);
    free(job.ids);
}

static void test_sampling_unigram(void)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("spm:60", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &tokenizer));
    CHECK(attn_tokenizer_can_sample(tokenizer), "a unigram model samples");
    check_sampling(tokenizer, -1);
    check_sampling(tokenizer, 8);
    attn_tokenizer_destroy(tokenizer);
}

static void test_sampling_bpe(void)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("spm-bpe:60", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &tokenizer));
    CHECK(attn_tokenizer_can_sample(tokenizer), "a BPE model samples (BPE-dropout)");
    check_sampling(tokenizer, -1);
    /* nbest does not apply to BPE and is ignored, not an error. */
    check_sampling(tokenizer, 8);
    attn_tokenizer_destroy(tokenizer);
}

static void test_sampling_refusals(void)
{
    attn_tokenizer_config config;
    attn_tokenizer *chars = NULL, *spm = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &chars));
    CHECK(!attn_tokenizer_can_sample(chars), "characters do not sample");
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_FAILS(attn_tokenizer_encode_sampled(chars, lines[0], 0.1, -1, 1, &ids, &n),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("only SentencePiece", "char"), "%s", attn_last_error());
    CHECK_OK(attn_tokenizer_config_parse("spm:60", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &spm));
    const double alphas[] = {0.0, -1.0, 2.0, 1.0000001, NAN};
    for (size_t i = 0; i < sizeof alphas / sizeof *alphas; i++)
        CHECK_FAILS(attn_tokenizer_encode_sampled(spm, lines[0], alphas[i], -1, 1, &ids, &n),
                    ATTN_ERR_INVALID_ARGUMENT);
    const int64_t nbests[] = {0, 1, -2, ATTN_SPM_MAX_NBEST + 1};
    for (size_t i = 0; i < sizeof nbests / sizeof *nbests; i++)
        CHECK_FAILS(attn_tokenizer_encode_sampled(spm, lines[0], 0.5, nbests[i], 1, &ids, &n),
                    ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tokenizer_encode_sampled(spm, "\xFF", 0.5, -1, 1, &ids, &n), ATTN_ERR_FORMAT);
    CHECK(ids == NULL && n == 0, "nothing on failure");

    /* A batcher asked to sample with a tokenizer that cannot. */
    const char *const targets[] = {"a", "b", "c", "d", "e", "f"};
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_from_strings(lines, targets, N_LINES, &corpus));
    CHECK_OK(attn_corpus_encode(corpus, spm, chars));
    attn_batcher *batcher = NULL;
    attn_batcher_config batching = {256, 1, 1};
    CHECK_OK(attn_batcher_create(corpus, &batching, &batcher));
    CHECK_FAILS(attn_batcher_sample_subwords(batcher, NULL, chars, 0.1, -1),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("cannot sample", "char"), "%s", attn_last_error());
    CHECK_FAILS(attn_batcher_sample_subwords(batcher, NULL, NULL, 0.1, -1),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_batcher_sample_subwords(batcher, spm, NULL, 1.5, -1),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_batcher_sample_subwords(batcher, spm, NULL, 0.5, 1),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_batcher_destroy(batcher);
    attn_corpus_destroy(corpus);
    attn_tokenizer_destroy(spm);
    attn_tokenizer_destroy(chars);
}

/* Every row of every batch of epochs [0, epochs) as the source and target ids of its pair,
 * flattened per epoch and pair: out[epoch][pair] is a malloc'ed "n ids..." array. */
typedef struct epoch_rows {
    int32_t *rows[4][N_LINES][2];
    int64_t lengths[4][N_LINES][2];
} epoch_rows;

static void read_epochs(attn_batcher *batcher, int64_t first, int64_t epochs, epoch_rows *out)
{
    CHECK_OK(attn_batcher_seek(batcher, first, 0));
    for (int64_t e = first; e < first + epochs; e++) {
        int64_t seen = 0;
        const int64_t count = attn_batcher_num_batches(batcher);
        for (int64_t k = 0; k < count; k++) {
            const attn_batch *batch = NULL;
            CHECK_OK(attn_batcher_next(batcher, &batch));
            if (batch == NULL)
                return;
            CHECK(batch->epoch == e, "epoch %lld", (long long)e);
            for (int64_t r = 0; r < batch->size; r++) {
                const int64_t pair = batch->pairs[r];
                const int32_t *cells[2] = {batch->source + r * batch->source_len,
                                           batch->target + r * batch->target_len};
                const int64_t lengths[2] = {batch->source_lengths[r], batch->target_lengths[r]};
                for (int side = 0; side < 2; side++) {
                    out->lengths[e][pair][side] = lengths[side];
                    out->rows[e][pair][side] = test_alloc((size_t)lengths[side] * 4 + 4);
                    memcpy(out->rows[e][pair][side], cells[side], (size_t)lengths[side] * 4);
                }
                seen++;
            }
        }
        CHECK(seen == N_LINES, "epoch %lld reads every pair once (%lld)", (long long)e,
              (long long)seen);
    }
}

static void free_epochs(epoch_rows *rows)
{
    for (int e = 0; e < 4; e++)
        for (int64_t i = 0; i < N_LINES; i++)
            for (int side = 0; side < 2; side++) {
                free(rows->rows[e][i][side]);
                rows->rows[e][i][side] = NULL;
            }
}

/* The batcher samples each epoch anew, both sides, from (seed, epoch, pair) alone: seeking back
 * to an epoch, a second batcher and another thread count give the same ids; every row decodes to
 * its text; a batcher without sampling (validation) reads the best segmentation every epoch. */
static void test_batcher_samples_each_epoch(void)
{
    attn_tokenizer_config config;
    attn_tokenizer *source = NULL, *target = NULL;
    CHECK_OK(attn_tokenizer_config_parse("spm:60", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &source));
    CHECK_OK(attn_tokenizer_config_parse("spm-bpe:60", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, N_LINES, &target));
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_from_strings(lines, lines, N_LINES, &corpus));
    CHECK_OK(attn_corpus_encode(corpus, source, target));

    attn_batcher_config batching = {256, 5, 1};
    attn_batcher *batcher = NULL, *twin = NULL, *best = NULL;
    CHECK_OK(attn_batcher_create(corpus, &batching, &batcher));
    CHECK_OK(attn_batcher_sample_subwords(batcher, source, target, 0.2, -1));
    CHECK_OK(attn_batcher_create(corpus, &batching, &twin));
    CHECK_OK(attn_batcher_sample_subwords(twin, source, target, 0.2, -1));
    CHECK_OK(attn_batcher_create(corpus, &batching, &best));

    static epoch_rows first, again, other, fixed;
    read_epochs(batcher, 0, 4, &first);
    read_epochs(batcher, 1, 2, &again); /* seeking back re-samples epochs 1 and 2 */
    CHECK_OK(attn_set_num_threads(2));
    read_epochs(twin, 0, 4, &other);
    CHECK_OK(attn_set_num_threads(1));
    read_epochs(best, 0, 4, &fixed);

    /* The trainer's look-ahead: the last batch of an epoch, over the edge and back. */
    const int64_t last = attn_batcher_num_batches(batcher) - 1;
    for (int round = 0; round < 2; round++) {
        CHECK_OK(attn_batcher_seek(batcher, 2, last));
        const attn_batch *batch = NULL;
        CHECK_OK(attn_batcher_next(batcher, &batch));
        CHECK_OK(attn_batcher_next(batcher, &batch)); /* epoch 3's first */
        CHECK(batch != NULL && batch->epoch == 3, "over the edge");
        for (int64_t r = 0; batch != NULL && r < batch->size; r++) {
            const int64_t pair = batch->pairs[r];
            CHECK(same_ids(batch->source + r * batch->source_len, batch->source_lengths[r],
                           first.rows[3][pair][0], first.lengths[3][pair][0]),
                  "round %d pair %lld: epoch 3 samples as before", round, (long long)pair);
        }
        CHECK_OK(attn_batcher_seek(batcher, 2, last));
        CHECK_OK(attn_batcher_next(batcher, &batch));
        for (int64_t r = 0; batch != NULL && r < batch->size; r++) {
            const int64_t pair = batch->pairs[r];
            CHECK(same_ids(batch->target + r * batch->target_len, batch->target_lengths[r],
                           first.rows[2][pair][1], first.lengths[2][pair][1]),
                  "round %d pair %lld: back in epoch 2, its samples", round, (long long)pair);
        }
    }

    int changed = 0, differs_from_best = 0;
    for (int64_t i = 0; i < N_LINES; i++) {
        const int32_t *corpus_ids[2];
        int64_t corpus_lengths[2];
        attn_corpus_source_ids(corpus, i, &corpus_ids[0], &corpus_lengths[0]);
        attn_corpus_target_ids(corpus, i, &corpus_ids[1], &corpus_lengths[1]);
        for (int side = 0; side < 2; side++) {
            const attn_tokenizer *tokenizer = side == 0 ? source : target;
            for (int e = 0; e < 4; e++) {
                const int32_t *ids = first.rows[e][i][side];
                const int64_t n = first.lengths[e][i][side];
                char *text = NULL;
                CHECK_OK(attn_tokenizer_decode(tokenizer, ids, n, &text));
                CHECK(text != NULL && strcmp(text, lines[i]) == 0, "pair %lld side %d epoch %d",
                      (long long)i, side, e);
                free(text);
                CHECK(side == 0 || (n >= 2 && ids[0] == ATTN_BOS_ID && ids[n - 1] == ATTN_EOS_ID),
                      "a sampled target keeps <s> and </s>");
                CHECK(same_ids(ids, n, other.rows[e][i][side], other.lengths[e][i][side]),
                      "pair %lld side %d epoch %d: a second batcher at 2 threads agrees",
                      (long long)i, side, e);
                if (e >= 1 && e <= 2)
                    CHECK(same_ids(ids, n, again.rows[e][i][side], again.lengths[e][i][side]),
                          "pair %lld side %d epoch %d: seeking back samples the same", (long long)i,
                          side, e);
                CHECK(same_ids(fixed.rows[e][i][side], fixed.lengths[e][i][side], corpus_ids[side],
                               corpus_lengths[side]),
                      "without sampling every epoch reads the best segmentation");
                differs_from_best += !same_ids(ids, n, corpus_ids[side], corpus_lengths[side]);
                if (e > 0)
                    changed += !same_ids(ids, n, first.rows[e - 1][i][side],
                                         first.lengths[e - 1][i][side]);
            }
        }
    }
    CHECK(changed > 0 && differs_from_best > 0,
          "segmentations change between epochs (%d) and differ from the best (%d)", changed,
          differs_from_best);
    free_epochs(&first);
    free_epochs(&again);
    free_epochs(&other);
    free_epochs(&fixed);
    attn_batcher_destroy(batcher);
    attn_batcher_destroy(twin);
    attn_batcher_destroy(best);
    attn_corpus_destroy(corpus);
    attn_tokenizer_destroy(source);
    attn_tokenizer_destroy(target);
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
    RUN_TEST(test_bpe_counts_merges);
    RUN_TEST(test_users_model_is_shifted_past_the_specials);
    RUN_TEST(test_sampling_unigram);
    RUN_TEST(test_sampling_bpe);
    RUN_TEST(test_sampling_refusals);
    RUN_TEST(test_batcher_samples_each_epoch);
    return test_summary();
}
