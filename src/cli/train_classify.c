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

/* What a model file other than a masked language model holds, for the message refusing it. */
static const char *what_it_holds(attn_model_arch arch)
{
    switch (arch) {
    case ATTN_ARCH_TRANSFORMER:
        return "a translation model (arch transformer)";
    case ATTN_ARCH_TRANSFORMER_CLASSIFIER:
        return "a classifier (arch transformer_classifier)";
    case ATTN_ARCH_TRANSFORMER_LM:
        return "a causal language model (arch transformer_lm)";
    case ATTN_ARCH_RNN:
        return "an rnn encoder-decoder (arch rnn)";
    case ATTN_ARCH_RNN_CLASSIFIER:
        return "an rnn classifier (arch rnn_classifier)";
    case ATTN_ARCH_TRANSFORMER_MLM:
        break;
    }
    return "a masked language model";
}

/* --init's pretrained encoder and the tokenizer it learned, which the classifier must read its
 * text with (the embedding's rows are that tokenizer's ids). */
static int read_encoder(const train_args *a, attn_model **encoder, attn_tokenizer **tokenizer)
{
    attn_tensor_file *file = NULL;
    attn_bundle *bundle = NULL;
    if (attn_tensor_file_open(a->init, &file) != ATTN_OK ||
        attn_bundle_from_file(file, a->init, &bundle) != ATTN_OK) {
        cli_library_error_in("train", "--init %s", a->init);
        attn_tensor_file_close(file);
        return 1;
    }
    attn_tensor_file_close(file);
    const attn_model_arch arch = attn_bundle_config(bundle)->arch;
    if (arch != ATTN_ARCH_TRANSFORMER_MLM) {
        attn_bundle_destroy(bundle);
        return train_usage_error("--init %s holds %s, not a pretrained encoder: give a masked "
                                 "language model that 'attn train --task mlm' wrote, or leave "
                                 "--init out to train the classifier from scratch",
                                 a->init, what_it_holds(arch));
    }
    attn_tokenizer *target = NULL;
    const attn_status status = attn_bundle_release(bundle, encoder, tokenizer, &target);
    attn_tokenizer_destroy(target);
    return status == ATTN_OK ? 0 : library_failure();
}

/* The shape flags given with --init must be the encoder's: the weights cannot be reshaped. */
static int check_flags_match_encoder(const train_args *a, const attn_model_config *e)
{
    const struct {
        const char *flag;
        long long asked, has;
        int size; /* a number worth printing, not a kind */
    } shape[] = {
        {"--layers", (long long)a->layers, (long long)e->encoder_layers, 1},
        {"--d-model", (long long)a->d_model, (long long)e->d_model, 1},
        {"--heads", (long long)a->heads, (long long)e->num_heads, 1},
        {"--ffn", (long long)a->ffn, (long long)e->ffn_dim, 1},
        {"--norm", a->norm, e->norm, 0},
        {"--ffn-kind", a->ffn_kind, e->ffn, 0},
        {"--positions", a->positions, e->positions, 0},
        {"--no-bias", 1, !e->bias, 0}, /* given: no bias asked for */
    };
    for (size_t i = 0; i < sizeof shape / sizeof *shape; i++) {
        if (!train_args_given(a, shape[i].flag) || shape[i].asked == shape[i].has)
            continue;
        if (!shape[i].size)
            return train_usage_error("%s disagrees with the encoder of --init %s: leave it out "
                                     "(the encoder's shape and blocks come from --init)",
                                     shape[i].flag, a->init);
        return train_usage_error("%s %lld disagrees with the encoder of --init %s, which has %lld: "
                                 "leave %s out (the encoder's shape comes from --init)",
                                 shape[i].flag, shape[i].asked, a->init, shape[i].has,
                                 shape[i].flag);
    }
    return 0;
}

/* The classifier over --init's encoder: its config with the run's classes, pooling, dropout
 * and label smoothing, its weights copied, and with --freeze-encoder the trainer told to keep
 * them. */
static int classifier_from_encoder(const train_args *a, const attn_model_config *described,
                                   const attn_model *encoder, int64_t classes, int64_t longest,
                                   attn_model **model, int64_t *encoder_floats)
{
    attn_model_config c = *attn_model_get_config(encoder);
    c.arch = ATTN_ARCH_TRANSFORMER_CLASSIFIER;
    c.num_classes = classes;
    c.pooling = described->pooling;
    c.dropout = described->dropout;
    c.label_smoothing = described->label_smoothing;
    const int64_t needed = longest + (c.pooling == ATTN_POOLING_CLS);
    if (needed > c.max_len) {
        fprintf(stderr,
                "attn train: a text has %lld positions%s, beyond the max_len %lld of --init %s's "
                "encoder: leave longer lines out (--max-len %lld)\n",
                (long long)needed,
                c.pooling == ATTN_POOLING_CLS ? " with the classification token" : "",
                (long long)c.max_len, a->init,
                (long long)(c.max_len - (c.pooling == ATTN_POOLING_CLS)));
        return 1;
    }
    if (attn_model_config_validate(&c) != ATTN_OK)
        return train_usage_error("the model: %s", attn_last_error());
    if (attn_model_create(&c, model) != ATTN_OK ||
        attn_model_init(*model, (uint64_t)a->seed) != ATTN_OK ||
        attn_model_copy_encoder(*model, encoder, encoder_floats) != ATTN_OK)
        return library_failure();
    return 0;
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

int train_classify_prepare(const train_args *a, const attn_model_config *described,
                           attn_tensor_file *resume_file, train_classify_data *d,
                           attn_model **model, attn_trainer_options *o)
{
    attn_tokenizer *tokenizer = NULL;
    attn_labels *labels = NULL;
    attn_model *encoder = NULL;
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
        if (a->init != NULL)
            code = read_encoder(a, &encoder, &tokenizer);
        if (code == 0 && a->init != NULL)
            code = check_flags_match_encoder(a, attn_model_get_config(encoder));
        if (code == 0 &&
            (train_hold_out_validation(a, (uint64_t)a->seed, "lines", d->train, &d->valid) !=
                 ATTN_OK ||
             (tokenizer == NULL &&
              train_side_tokenizer(a->src_tokens, a->src_spm, attn_corpus_sources(d->train),
                                   attn_corpus_size(d->train), &tokenizer) != ATTN_OK) ||
             attn_labels_from_corpus(d->train, &labels) != ATTN_OK))
            code = library_failure();
    }
    /* Encoding names the line of a label only the validation file has. */
    if (code == 0 &&
        (attn_corpus_encode_labelled(d->train, tokenizer, labels) != ATTN_OK ||
         (d->valid != NULL && attn_corpus_encode_labelled(d->valid, tokenizer, labels) != ATTN_OK)))
        code = library_failure();
    if (code == 0)
        code = train_drop_long_lines(a, d->train, d->valid);
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
    if (code != 0) {
        attn_model_destroy(encoder);
        return code;
    }

    if (resume_file != NULL) {
        const attn_model_config *c = attn_model_get_config(*model);
        const int64_t reach = attn_model_config_source_limit(c);
        if (longest > reach) {
            fprintf(stderr,
                    "attn train: a text has %lld tokens, above the checkpoint model's reach "
                    "(%lld)\n",
                    (long long)longest, (long long)reach);
            return 1;
        }
        return 0;
    }
    int64_t encoder_floats = 0;
    if (encoder != NULL) {
        code = classifier_from_encoder(a, described, encoder, classes, longest, model,
                                       &encoder_floats);
        attn_model_destroy(encoder);
    } else {
        attn_model_config c;
        code = train_fit_encoder_to_data(a, described, vocabulary, classes, longest, &c);
        if (code == 0 && (attn_model_create(&c, model) != ATTN_OK ||
                          attn_model_init(*model, (uint64_t)a->seed) != ATTN_OK))
            code = library_failure();
    }
    if (code != 0)
        return code;
    /* The Noam schedule scales by the model's width: the rnn's is its hidden size. */
    const attn_model_config *built = attn_model_get_config(*model);
    const int64_t width = built->arch == ATTN_ARCH_RNN_CLASSIFIER ? built->hidden : built->d_model;
    if (train_options_for_corpus(a, d->train, width, d->tokenizer_json, o) != ATTN_OK)
        return library_failure();
    if (a->init != NULL) {
        fprintf(stderr, "attn train: the encoder and its tokenizer come from --init %s; %s\n",
                a->init,
                a->freeze_encoder ? "--freeze-encoder: only the new head learns"
                                  : "the encoder learns on with the new head");
        if (a->freeze_encoder)
            o->frozen_floats = encoder_floats;
    }
    return 0;
}
