/* Labelled lines for classifiers: reading label<TAB>text, the classes and their JSON, encoding
 * (a label only the validation file has is named with its line), held-out lines, and batches
 * that carry each row's class. */
#include "data_test_util.h"

static attn_tokenizer *char_tokenizer(const attn_corpus *corpus)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    CHECK_OK(attn_tokenizer_train(&config, attn_corpus_sources(corpus), attn_corpus_size(corpus),
                                  &tokenizer));
    return tokenizer;
}

static void test_reads_label_then_text(void)
{
    const char *path = test_write_scratch_text("labelled.tsv", "pos\tgood film\r\n"
                                                               "neg\tbad\tfilm\n"
                                                               "pos\tfine\n");
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_read_labelled(path, &corpus));
    CHECK(attn_corpus_is_labelled(corpus) && attn_corpus_size(corpus) == 3, "3 labelled lines");
    if (attn_corpus_size(corpus) == 3) {
        const char *const *text = attn_corpus_sources(corpus);
        const char *const *label = attn_corpus_targets(corpus);
        CHECK(strcmp(text[0], "good film") == 0 && strcmp(label[0], "pos") == 0, "line 1: %s %s",
              label[0], text[0]);
        CHECK(strcmp(text[1], "bad\tfilm") == 0 && strcmp(label[1], "neg") == 0,
              "the text keeps TABs after the first: '%s'", text[1]);
    }
    attn_labels *labels = NULL;
    CHECK_OK(attn_labels_from_corpus(corpus, &labels));
    CHECK(attn_labels_count(labels) == 2 && strcmp(attn_labels_name(labels, 0), "neg") == 0 &&
              strcmp(attn_labels_name(labels, 1), "pos") == 0,
          "distinct labels in bytewise order");
    CHECK(attn_labels_find(labels, "pos") == 1 && attn_labels_find(labels, "POS") == -1 &&
              attn_labels_name(labels, 2) == NULL,
          "lookups");
    attn_labels_destroy(labels);
    attn_corpus_destroy(corpus);
    /* A corpus of pairs is not labelled, and its targets are no classes. */
    path = test_write_scratch_text("pairs.tsv", "a\tb\n");
    CHECK_OK(attn_corpus_read_tsv(path, &corpus));
    CHECK(!attn_corpus_is_labelled(corpus), "pairs are not labelled lines");
    CHECK_FAILS(attn_labels_from_corpus(corpus, &labels), ATTN_ERR_INVALID_ARGUMENT);
    attn_corpus_destroy(corpus);
}

static void test_errors_name_file_and_line(void)
{
    struct {
        const char *name, *text, *must_contain;
    } cases[] = {
        {"no_tab.tsv", "a\tb\nno tab here\n", "no_tab.tsv:2: expected label<TAB>text"},
        {"empty_label.tsv", "a\tb\n\tb\n", "empty_label.tsv:2: empty label"},
        {"empty_text.tsv", "a\tb\nc\td\ne\t\n", "empty_text.tsv:3: empty text"},
        {"bad_utf8.tsv", "a\tb\nc\t\xC3\x28\n", "bad_utf8.tsv:2:"},
        {"empty.tsv", "", "no sentences"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = test_write_scratch_text(cases[i].name, cases[i].text);
        attn_corpus *corpus = NULL;
        CHECK_FAILS(attn_corpus_read_labelled(path, &corpus), ATTN_ERR_FORMAT);
        CHECK(corpus == NULL, "no corpus from %s", cases[i].name);
        CHECK(message_has(cases[i].must_contain, NULL), "%s: message '%s' names '%s'",
              cases[i].name, attn_last_error(), cases[i].must_contain);
    }
}

static void test_labels_json_round_trip_and_refusals(void)
{
    const char *names[] = {"sports", "world news", "\xC3\xA9t\xC3\xA9"};
    attn_labels *labels = NULL, *back = NULL;
    CHECK_OK(attn_labels_from_names(names, 3, &labels));
    char *json = NULL;
    CHECK_OK(attn_labels_to_json(labels, &json));
    CHECK_OK(attn_labels_from_json(json, &back));
    CHECK(attn_labels_count(back) == 3, "three classes back");
    for (int64_t i = 0; i < 3; i++)
        CHECK(strcmp(attn_labels_name(back, i), names[i]) == 0, "class %lld keeps its name",
              (long long)i);
    free(json);
    attn_labels_destroy(back);
    attn_labels_destroy(labels);

    const char *twice[] = {"a", "b", "a"};
    CHECK_FAILS(attn_labels_from_names(twice, 3, &labels), ATTN_ERR_FORMAT);
    CHECK(message_has("\"a\" appears twice", NULL), "%s", attn_last_error());
    const char *empty[] = {""};
    CHECK_FAILS(attn_labels_from_names(empty, 1, &labels), ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_labels_from_names(names, 0, &labels), ATTN_ERR_INVALID_ARGUMENT);
    const char *bad[] = {
        "{\"format\":\"attn-tokenizer\",\"version\":1,\"labels\":[\"a\"]}",
        "{\"format\":\"attn-labels\",\"version\":1,\"labels\":[]}",
        "{\"format\":\"attn-labels\",\"version\":1,\"labels\":[\"a\",3]}",
        "{\"format\":\"attn-labels\",\"version\":1,\"labels\":[\"a\",\"a\"]}",
        "{\"format\":\"attn-labels\",\"version\":1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(attn_labels_from_json(bad[i], &labels) == ATTN_ERR_FORMAT && labels == NULL,
              "refused: %s", bad[i]);
    }
    CHECK_FAILS(attn_labels_from_json(
                    "{\"format\":\"attn-labels\",\"version\":2,\"labels\":[\"a\"]}", &labels),
                ATTN_ERR_UNSUPPORTED);
}

static void test_encoding_and_batches_carry_classes(void)
{
    const char *train_path = test_write_scratch_text("train.tsv", "b\txyz\n"
                                                                  "a\tx\n"
                                                                  "c\tyy\n"
                                                                  "a\tzzzz\n");
    attn_corpus *train = NULL;
    CHECK_OK(attn_corpus_read_labelled(train_path, &train));
    attn_labels *labels = NULL;
    CHECK_OK(attn_labels_from_corpus(train, &labels));
    attn_tokenizer *tokenizer = char_tokenizer(train);
    CHECK_FAILS(attn_corpus_encode(train, tokenizer, tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_corpus_encode_labelled(train, tokenizer, labels));
    const int64_t expected[4] = {1, 0, 2, 0};
    for (int64_t i = 0; i < 4; i++) {
        const int32_t *ids;
        int64_t length;
        CHECK_OK(attn_corpus_target_ids(train, i, &ids, &length));
        CHECK(length == 1 && ids[0] == expected[i], "line %lld: its class alone", (long long)i + 1);
    }
    /* Every line once an epoch, each row with its class. */
    attn_batcher *batcher = NULL;
    attn_batcher_config config = {12, 5, 1};
    CHECK_OK(attn_batcher_create(train, &config, &batcher));
    int seen[4] = {0, 0, 0, 0};
    for (int64_t k = 0; k < attn_batcher_num_batches(batcher); k++) {
        const attn_batch *batch;
        CHECK_OK(attn_batcher_next(batcher, &batch));
        CHECK(batch->labels != NULL && batch->target_len == 1, "a batch of classes");
        for (int64_t r = 0; r < batch->size; r++) {
            seen[batch->pairs[r]]++;
            CHECK(batch->labels[r] == expected[batch->pairs[r]], "row %lld's class", (long long)r);
        }
    }
    CHECK(seen[0] == 1 && seen[1] == 1 && seen[2] == 1 && seen[3] == 1, "each line once");
    attn_batcher_destroy(batcher);

    /* A label the training lines lack is named with its place. */
    const char *valid_path = test_write_scratch_text("valid.tsv", "a\txy\nd\tz\n");
    attn_corpus *valid = NULL;
    CHECK_OK(attn_corpus_read_labelled(valid_path, &valid));
    CHECK_FAILS(attn_corpus_encode_labelled(valid, tokenizer, labels), ATTN_ERR_FORMAT);
    CHECK(message_has("valid.tsv:2", "label \"d\" is not one of the 3 labels"), "%s",
          attn_last_error());
    attn_corpus_destroy(valid);

    /* Held-out lines stay labelled lines. */
    attn_corpus *all = NULL, *held = NULL;
    CHECK_OK(attn_corpus_read_labelled(train_path, &all));
    CHECK_OK(attn_corpus_hold_out(all, 1, 3, &held));
    CHECK(attn_corpus_is_labelled(held) && attn_corpus_is_labelled(all), "both labelled");
    CHECK_OK(attn_corpus_encode_labelled(held, tokenizer, labels));
    attn_corpus_destroy(held);
    attn_corpus_destroy(all);

    attn_tokenizer_destroy(tokenizer);
    attn_labels_destroy(labels);
    attn_corpus_destroy(train);
}

int main(void)
{
    RUN_TEST(test_reads_label_then_text);
    RUN_TEST(test_errors_name_file_and_line);
    RUN_TEST(test_labels_json_round_trip_and_refusals);
    RUN_TEST(test_encoding_and_batches_carry_classes);
    return test_summary();
}
