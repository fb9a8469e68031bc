/* Corpus readers: the input is read as a TSV file (attn_corpus_read_tsv), as a pair of
 * parallel files (attn_corpus_read_files: the source is the input up to its first NUL byte,
 * the target what follows; without a NUL both files hold the whole input) and as labelled
 * lines (attn_corpus_read_labelled). A corpus that reads is encoded with character tokenizers
 * trained on it (labelled lines: and its classes, whose JSON must read back the same) and cut
 * into batches. */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_BATCHES = 64 };

static attn_tokenizer *char_tokenizer(const char *const *lines, int64_t n)
{
    attn_tokenizer_config config = {.kind = ATTN_TOKENIZER_CHAR, .min_count = 1};
    attn_tokenizer *tokenizer = NULL;
    FUZZ_CHECK(attn_tokenizer_train(&config, lines, n, &tokenizer) == ATTN_OK);
    return tokenizer;
}

static void check_ids(const attn_corpus *corpus, int64_t i)
{
    const int32_t *ids = NULL;
    int64_t length = 0;
    FUZZ_CHECK(attn_corpus_source_ids(corpus, i, &ids, &length) == ATTN_OK);
    FUZZ_CHECK(length >= 1);
    FUZZ_CHECK(attn_corpus_target_ids(corpus, i, &ids, &length) == ATTN_OK);
    FUZZ_CHECK(length >= 3 && ids[0] == ATTN_BOS_ID && ids[length - 1] == ATTN_EOS_ID);
}

static void batch_corpus(const attn_corpus *corpus, int shuffle, int64_t classes)
{
    attn_batcher_config config = {64, 7, shuffle};
    attn_batcher *batcher = NULL;
    FUZZ_CHECK(attn_batcher_create(corpus, &config, &batcher) == ATTN_OK);
    int64_t rows = 0;
    const int64_t n_batches = attn_batcher_num_batches(batcher);
    for (int64_t b = 0; b < n_batches && b < MAX_BATCHES; b++) {
        const attn_batch *batch = NULL;
        FUZZ_CHECK(attn_batcher_next(batcher, &batch) == ATTN_OK);
        FUZZ_CHECK(batch->size >= 1);
        for (int64_t r = 0; r < batch->size; r++) {
            FUZZ_CHECK(batch->source_lengths[r] <= batch->source_len);
            FUZZ_CHECK(batch->target_lengths[r] <= batch->target_len);
            FUZZ_CHECK(batch->pairs[r] >= 0 && batch->pairs[r] < attn_corpus_size(corpus));
            FUZZ_CHECK((batch->labels != NULL) == (classes > 0));
            FUZZ_CHECK(classes == 0 || (batch->labels[r] >= 0 && batch->labels[r] < classes));
        }
        rows += batch->size;
    }
    FUZZ_CHECK(n_batches > MAX_BATCHES || rows == attn_corpus_size(corpus));
    attn_batcher_destroy(batcher);
}

static void check_corpus(attn_corpus *corpus)
{
    const int64_t n = attn_corpus_size(corpus);
    FUZZ_CHECK(n >= 1);
    const char *const *sources = attn_corpus_sources(corpus);
    const char *const *targets = attn_corpus_targets(corpus);
    for (int64_t i = 0; i < n; i++)
        FUZZ_CHECK(sources[i][0] != '\0' && targets[i][0] != '\0');
    const int32_t *ids = NULL;
    int64_t length = 0;
    FUZZ_CHECK(attn_corpus_source_ids(corpus, 0, &ids, &length) != ATTN_OK);

    attn_tokenizer *source = char_tokenizer(sources, n);
    attn_tokenizer *target = char_tokenizer(targets, n);
    if (attn_corpus_encode(corpus, source, target) == ATTN_OK) {
        for (int64_t i = 0; i < n; i++)
            check_ids(corpus, i);
        batch_corpus(corpus, 0, 0);
        batch_corpus(corpus, 1, 0);
    }
    attn_tokenizer_destroy(source);
    attn_tokenizer_destroy(target);
}

/* Labelled lines: non-empty labels and texts, classes that survive their JSON, a class id per
 * line, batches that carry them. */
static void check_labelled(attn_corpus *corpus)
{
    const int64_t n = attn_corpus_size(corpus);
    FUZZ_CHECK(n >= 1 && attn_corpus_is_labelled(corpus));
    const char *const *texts = attn_corpus_sources(corpus);
    for (int64_t i = 0; i < n; i++)
        FUZZ_CHECK(texts[i][0] != '\0' && attn_corpus_targets(corpus)[i][0] != '\0');
    attn_labels *labels = NULL, *back = NULL;
    FUZZ_CHECK(attn_labels_from_corpus(corpus, &labels) == ATTN_OK);
    char *json = NULL;
    FUZZ_CHECK(attn_labels_to_json(labels, &json) == ATTN_OK);
    FUZZ_CHECK(attn_labels_from_json(json, &back) == ATTN_OK);
    const int64_t classes = attn_labels_count(labels);
    FUZZ_CHECK(attn_labels_count(back) == classes);
    for (int64_t k = 0; k < classes; k++)
        FUZZ_CHECK(strcmp(attn_labels_name(labels, k), attn_labels_name(back, k)) == 0);
    attn_tokenizer *tokenizer = char_tokenizer(texts, n);
    if (attn_corpus_encode_labelled(corpus, tokenizer, labels) == ATTN_OK) {
        for (int64_t i = 0; i < n; i++) {
            const int32_t *ids = NULL;
            int64_t length = 0;
            FUZZ_CHECK(attn_corpus_target_ids(corpus, i, &ids, &length) == ATTN_OK);
            FUZZ_CHECK(length == 1 && ids[0] >= 0 && ids[0] < classes);
            FUZZ_CHECK(strcmp(attn_labels_name(labels, ids[0]), attn_corpus_targets(corpus)[i]) ==
                       0);
        }
        batch_corpus(corpus, 0, classes);
        batch_corpus(corpus, 1, classes);
    }
    attn_tokenizer_destroy(tokenizer);
    free(json);
    attn_labels_destroy(back);
    attn_labels_destroy(labels);
}

static void read_labelled(const uint8_t *data, size_t size)
{
    const char *path = fuzz_temp_file("labelled.tsv", data, size);
    attn_corpus *corpus = NULL;
    if (path == NULL)
        return;
    if (attn_corpus_read_labelled(path, &corpus) == ATTN_OK)
        check_labelled(corpus);
    else
        FUZZ_CHECK(corpus == NULL && attn_last_error()[0] != '\0');
    attn_corpus_destroy(corpus);
}

static void read_tsv(const uint8_t *data, size_t size)
{
    const char *path = fuzz_temp_file("pairs.tsv", data, size);
    attn_corpus *corpus = NULL;
    if (path == NULL)
        return;
    if (attn_corpus_read_tsv(path, &corpus) == ATTN_OK)
        check_corpus(corpus);
    else
        FUZZ_CHECK(corpus == NULL && attn_last_error()[0] != '\0');
    attn_corpus_destroy(corpus);
}

static void read_parallel(const uint8_t *data, size_t size)
{
    const uint8_t *separator = size > 0 ? memchr(data, '\0', size) : NULL;
    size_t source_size = separator != NULL ? (size_t)(separator - data) : size;
    const uint8_t *target = separator != NULL ? separator + 1 : data;
    size_t target_size = separator != NULL ? size - source_size - 1 : size;
    const char *source_path = fuzz_temp_file("source.txt", data, source_size);
    const char *target_path = fuzz_temp_file("target.txt", target, target_size);
    attn_corpus *corpus = NULL;
    if (source_path == NULL || target_path == NULL)
        return;
    if (attn_corpus_read_files(source_path, target_path, &corpus) == ATTN_OK)
        check_corpus(corpus);
    else
        FUZZ_CHECK(corpus == NULL && attn_last_error()[0] != '\0');
    attn_corpus_destroy(corpus);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    read_tsv(data, size);
    read_parallel(data, size);
    read_labelled(data, size);
    return 0;
}
