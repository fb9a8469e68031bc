/* attn train --task classify: labelled lines (label<TAB>text) become a labelled corpus, the
 * text tokenizer and the classes are learned from the training lines (or read from the
 * checkpoint), a classifier is made to fit them, and the class balance is reported. The loop,
 * checkpoints and progress are translation's. */
#include "cli/library_error.h"
#include "cli/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_classify_data_free(train_classify_data *d)
{
    attn_corpus_destroy(d->train);
    attn_corpus_destroy(d->valid);
    free(d->tokenizer_json);
    free(d->labels_json);
    memset(d, 0, sizeof *d);
}

static int library_failure(void)
{
    cli_library_error("train");
    return 1;
}

/* The checkpoint's model, tokenizer and classes. */
static int read_checkpoint(const train_args *a, attn_tensor_file *file, attn_model **model,
                           attn_tokenizer **tokenizer, attn_labels **labels)
{
    attn_bundle *bundle = NULL;
    if (attn_bundle_from_file(file, a->resume, &bundle) != ATTN_OK) {
        cli_library_error_in("train", "--resume %s", a->resume);
        return 1;
    }
    if (attn_bundle_check_classifier(bundle) != ATTN_OK) {
        fprintf(stderr,
                "attn train: --resume %s holds an encoder-decoder or language model, not a "
                "classifier: resume it without --task classify\n",
                a->resume);
        attn_bundle_destroy(bundle);
        return 1;
    }
    char *json = NULL;
    attn_tokenizer *target = NULL;
    attn_status status = attn_labels_to_json(attn_bundle_classes(bundle), &json);
    if (status == ATTN_OK)
        status = attn_labels_from_json(json, labels);
    free(json);
    if (status == ATTN_OK)
        status = attn_bundle_release(bundle, model, tokenizer, &target);
    else
        attn_bundle_destroy(bundle);
    attn_tokenizer_destroy(target);
    return status == ATTN_OK ? 0 : library_failure();
}

/* Lines per class, and a note when the classes are far from balanced: a model that always
 * answers the largest class then scores its share, which accuracy alone hides. */
static void report_classes(const attn_corpus *train, const attn_labels *labels)
{
    const int64_t classes = attn_labels_count(labels), lines = attn_corpus_size(train);
    int64_t *counts = calloc((size_t)classes, sizeof *counts);
    if (counts == NULL)
        return;
    for (int64_t i = 0; i < lines; i++) {
        const int32_t *ids;
        int64_t length;
        if (attn_corpus_target_ids(train, i, &ids, &length) == ATTN_OK && length == 1)
            counts[ids[0]]++;
    }
    int64_t largest = 0, smallest = 0;
    fprintf(stderr, "attn train: %lld classes; training lines per class:", (long long)classes);
    for (int64_t k = 0; k < classes; k++) {
        fprintf(stderr, "%s %s %lld (%.1f%%)", k == 0 ? "" : ",", attn_labels_name(labels, k),
                (long long)counts[k], 100.0 * (double)counts[k] / (double)lines);
        largest = counts[k] > counts[largest] ? k : largest;
        smallest = counts[k] < counts[smallest] ? k : smallest;
    }
    fprintf(stderr, "\n");
    if (classes == 1)
        fprintf(stderr,
                "attn train: note: every training line has the label \"%s\": the model "
                "can only learn to answer it\n",
                attn_labels_name(labels, 0));
    else if (counts[largest] >= 3 * counts[smallest])
        fprintf(stderr,
                "attn train: note: the classes are imbalanced (\"%s\" has %.1fx the lines of "
                "\"%s\"); always answering \"%s\" would score %.1f%% accuracy, so judge the "
                "model by macro-F1 too (attn eval --metric f1)\n",
                attn_labels_name(labels, largest),
                (double)counts[largest] / (double)(counts[smallest] > 0 ? counts[smallest] : 1),
                attn_labels_name(labels, smallest), attn_labels_name(labels, largest),
                100.0 * (double)counts[largest] / (double)lines);
    free(counts);
}

/* The model the flags describe, with the block options, the data's vocabulary and classes, and
 * a max_len that covers the longest text (and the classification token). */
static int describe(const train_args *a, const attn_model_config *described, int64_t vocabulary,
                    int64_t classes, int64_t longest, attn_model_config *c)
{
    *c = *described;
    if (train_args_given(a, "--norm"))
        c->norm = (attn_norm_kind)a->norm;
    if (train_args_given(a, "--ffn-kind"))
        c->ffn = (attn_ffn_kind)a->ffn_kind;
    if (train_args_given(a, "--positions"))
        c->positions = (attn_positions)a->positions;
    if (a->no_bias)
        c->bias = c->output_bias = 0;
    c->src_vocab = vocabulary;
    c->num_classes = classes;
    const int64_t needed = longest + (c->pooling == ATTN_POOLING_CLS ? 1 : 0);
    if (needed > c->max_len) {
        if (a->config != NULL) {
            fprintf(stderr,
                    "attn train: --config %s: max_len %lld is below the longest text (%lld "
                    "positions with the classification token)\n",
                    a->config, (long long)c->max_len, (long long)needed);
            return 1;
        }
        c->max_len = needed;
    }
    if (attn_model_config_validate(c) != ATTN_OK)
        return train_usage_error("the model: %s", attn_last_error());
    return 0;
}

int train_classify_prepare(const train_args *a, const attn_model_config *described,
                           attn_tensor_file *resume_file, train_classify_data *d,
                           attn_model **model, attn_trainer_options *o)
{
    attn_tokenizer *tokenizer = NULL;
    attn_labels *labels = NULL;
    int code = 0;
    if (attn_corpus_read_labelled(a->train, &d->train) != ATTN_OK ||
        (a->valid != NULL && attn_corpus_read_labelled(a->valid, &d->valid) != ATTN_OK))
        return library_failure();
    if (resume_file != NULL) {
        code = read_checkpoint(a, resume_file, model, &tokenizer, &labels);
        if (code == 0 && attn_trainer_options_from_checkpoint(resume_file, o) != ATTN_OK) {
            cli_library_error_in("train", "--resume %s", a->resume);
            code = 1;
        }
        if (code == 0) {
            train_options_overlay(a, o);
            if (train_hold_out_validation(a, o->seed, "lines", d->train, &d->valid) != ATTN_OK)
                code = library_failure();
        }
    } else {
        attn_tokenizer_config config;
        if (train_hold_out_validation(a, (uint64_t)a->seed, "lines", d->train, &d->valid) !=
                ATTN_OK ||
            attn_tokenizer_config_parse(a->src_tokens, &config) != ATTN_OK ||
            (a->src_spm != NULL
                 ? attn_tokenizer_load_spm(a->src_spm, &tokenizer)
                 : attn_tokenizer_train(&config, attn_corpus_sources(d->train),
                                        attn_corpus_size(d->train), &tokenizer)) != ATTN_OK ||
            attn_labels_from_corpus(d->train, &labels) != ATTN_OK)
            code = library_failure();
    }
    /* Encoding names the line of a label only the validation file has. */
    if (code == 0 &&
        (attn_corpus_encode_labelled(d->train, tokenizer, labels) != ATTN_OK ||
         (d->valid != NULL && attn_corpus_encode_labelled(d->valid, tokenizer, labels) != ATTN_OK)))
        code = library_failure();
    if (code == 0 && a->max_len > 0) {
        int64_t dropped_train = 0, dropped_valid = 0;
        if (attn_corpus_drop_longer(d->train, a->max_len, a->max_len, &dropped_train) != ATTN_OK ||
            (d->valid != NULL &&
             attn_corpus_drop_longer(d->valid, a->max_len, a->max_len, &dropped_valid) != ATTN_OK))
            code = library_failure();
        else if (dropped_train + dropped_valid > 0)
            fprintf(stderr,
                    "attn train: skipped %lld training and %lld validation lines longer than "
                    "--max-len %lld tokens\n",
                    (long long)dropped_train, (long long)dropped_valid, (long long)a->max_len);
        if (code == 0 && (attn_corpus_size(d->train) == 0 ||
                          (d->valid != NULL && attn_corpus_size(d->valid) == 0))) {
            fprintf(stderr,
                    "attn train: every %s line is longer than --max-len %lld tokens; raise it "
                    "(0: no limit)\n",
                    attn_corpus_size(d->train) == 0 ? "training" : "validation",
                    (long long)a->max_len);
            code = 1;
        }
    }
    if (code == 0 && (attn_tokenizer_to_json(tokenizer, &d->tokenizer_json) != ATTN_OK ||
                      attn_labels_to_json(labels, &d->labels_json) != ATTN_OK))
        code = library_failure();
    if (code == 0)
        report_classes(d->train, labels);
    int64_t longest = 0, ignored = 0;
    train_longest(d->train, &longest, &ignored);
    train_longest(d->valid, &longest, &ignored);
    const int64_t vocabulary = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    const int64_t classes = attn_labels_count(labels);
    attn_tokenizer_destroy(tokenizer);
    attn_labels_destroy(labels);
    if (code != 0)
        return code;

    if (resume_file != NULL) {
        const attn_model_config *c = attn_model_get_config(*model);
        const int64_t reach = c->max_len - (c->pooling == ATTN_POOLING_CLS ? 1 : 0);
        if (longest > reach) {
            fprintf(stderr,
                    "attn train: a text has %lld tokens, above the checkpoint model's reach "
                    "(%lld)\n",
                    (long long)longest, (long long)reach);
            return 1;
        }
        return 0;
    }
    attn_model_config c;
    code = describe(a, described, vocabulary, classes, longest, &c);
    if (code != 0)
        return code;
    if (attn_model_create(&c, model) != ATTN_OK || attn_model_init(*model, (uint64_t)a->seed))
        return library_failure();
    /* Batches as translation sizes them: about 100 an epoch, by the text's tokens (a label
     * is one token of the budget). */
    int64_t tokens = 0;
    for (int64_t i = 0; i < attn_corpus_size(d->train); i++) {
        const int32_t *ids;
        int64_t length;
        attn_corpus_source_ids(d->train, i, &ids, &length);
        tokens += length + 1;
    }
    const int64_t batch_tokens = train_args_given(a, "--batch-tokens")
                                     ? a->batch_tokens
                                     : train_default_batch_tokens(tokens);
    attn_batcher *counting = NULL;
    attn_batcher_config in_order = {batch_tokens, 0, 0};
    if (attn_batcher_create(d->train, &in_order, &counting) != ATTN_OK)
        return library_failure();
    const int64_t batches = attn_batcher_num_batches(counting);
    attn_batcher_destroy(counting);
    if (train_options_for_new_run(a, c.d_model, batch_tokens, batches, o) != ATTN_OK)
        return library_failure();
    return 0;
}
