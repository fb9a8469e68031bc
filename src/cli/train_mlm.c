/* attn train --task mlm: plain text, one text a line, becomes a text corpus whose batches are
 * masked (BERT's rule, in the data layer); the tokenizer is learned from the training lines
 * (or read from the checkpoint) and a masked language model is made to fit them. The loop,
 * checkpoints and progress are translation's. Lines rather than windows of a token stream:
 * a classifier reads one line at a time, so an encoder pretrained on lines sees the inputs it
 * will be fine-tuned on (a word, a quotation), never several lines run together. */
#include "cli/library_error.h"
#include "cli/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_mlm_data_free(train_mlm_data *d)
{
    attn_corpus_destroy(d->train);
    attn_corpus_destroy(d->valid);
    free(d->tokenizer_json);
    memset(d, 0, sizeof *d);
}

static int library_failure(void)
{
    cli_library_error("train");
    return 1;
}

/* The checkpoint's model and tokenizer. */
static int read_checkpoint(const train_args *a, attn_tensor_file *file, attn_model **model,
                           attn_tokenizer **tokenizer)
{
    attn_bundle *bundle = NULL;
    if (attn_bundle_from_file(file, a->resume, &bundle) != ATTN_OK) {
        cli_library_error_in("train", "--resume %s", a->resume);
        return 1;
    }
    if (attn_bundle_config(bundle)->arch != ATTN_ARCH_TRANSFORMER_MLM) {
        fprintf(stderr,
                "attn train: --resume %s is not a masked language model (arch transformer_mlm): "
                "resume it without --task mlm\n",
                a->resume);
        attn_bundle_destroy(bundle);
        return 1;
    }
    attn_tokenizer *target = NULL;
    const attn_status status = attn_bundle_release(bundle, model, tokenizer, &target);
    attn_tokenizer_destroy(target);
    return status == ATTN_OK ? 0 : library_failure();
}

int train_mlm_prepare(const train_args *a, const attn_model_config *described,
                      attn_tensor_file *resume_file, train_mlm_data *d, attn_model **model,
                      attn_trainer_options *o)
{
    attn_tokenizer *tokenizer = NULL;
    int code = 0;
    if (attn_corpus_read_text(a->train, &d->train) != ATTN_OK ||
        (a->valid != NULL && attn_corpus_read_text(a->valid, &d->valid) != ATTN_OK))
        return library_failure();
    if (resume_file != NULL) {
        code = read_checkpoint(a, resume_file, model, &tokenizer);
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
        if (train_hold_out_validation(a, (uint64_t)a->seed, "lines", d->train, &d->valid) !=
                ATTN_OK ||
            train_side_tokenizer(a->src_tokens, a->src_spm, attn_corpus_sources(d->train),
                                 attn_corpus_size(d->train), &tokenizer) != ATTN_OK)
            code = library_failure();
    }
    if (code == 0 &&
        (attn_corpus_encode_text(d->train, tokenizer) != ATTN_OK ||
         (d->valid != NULL && attn_corpus_encode_text(d->valid, tokenizer) != ATTN_OK)))
        code = library_failure();
    if (code == 0)
        code = train_drop_long_lines(a, d->train, d->valid);
    if (code == 0 && attn_tokenizer_to_json(tokenizer, &d->tokenizer_json) != ATTN_OK)
        code = library_failure();
    int64_t longest = 0, ignored = 0;
    train_longest(d->train, &longest, &ignored);
    train_longest(d->valid, &longest, &ignored);
    const int64_t vocabulary = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    attn_tokenizer_destroy(tokenizer);
    if (code != 0)
        return code;

    if (resume_file != NULL) {
        const int64_t reach = attn_model_get_config(*model)->max_len;
        if (longest > reach) {
            fprintf(stderr,
                    "attn train: a text has %lld tokens, above the checkpoint model's max_len "
                    "%lld\n",
                    (long long)longest, (long long)reach);
            return 1;
        }
        return 0;
    }
    attn_model_config c;
    code = train_fit_encoder_to_data(a, described, vocabulary, 0, longest, &c);
    if (code != 0)
        return code;
    if (attn_model_create(&c, model) != ATTN_OK || attn_model_init(*model, (uint64_t)a->seed) != ATTN_OK)
        return library_failure();
    return train_options_for_corpus(a, d->train, c.d_model, d->tokenizer_json, o) == ATTN_OK
               ? 0
               : library_failure();
}
