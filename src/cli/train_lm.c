/* attn train --task lm: plain text or llm.c token files become token streams, a language model
 * is made (or read from --init or --resume) to fit them, and the trainer's windows are sized. */
#include "cli/library_error.h"
#include "cli/lm_tokenizer.h"
#include "cli/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_lm_data_free(train_lm_data *d)
{
    attn_token_stream_destroy(d->train);
    attn_token_stream_destroy(d->valid);
    free(d->tokenizer_json);
    memset(d, 0, sizeof *d);
}

static int library_failure(void)
{
    cli_library_error("train");
    return 1;
}

/* A text file's token stream, through the tokenizer, and its characters per token. */
static int stream_of_text(const char *path, const attn_tokenizer *tokenizer,
                          attn_token_stream **out, double *chars_per_token)
{
    attn_lines lines;
    if (attn_lines_read(path, &lines) != ATTN_OK)
        return library_failure();
    const attn_status status =
        attn_token_stream_from_text(tokenizer, (const char *const *)lines.line, lines.count, out);
    int64_t characters = lines.count; /* each line's end */
    for (int64_t i = 0; i < lines.count; i++)
        for (const unsigned char *c = (const unsigned char *)lines.line[i]; *c != '\0'; c++)
            characters += (*c & 0xC0) != 0x80; /* not a UTF-8 continuation byte */
    attn_lines_free(&lines);
    if (status != ATTN_OK)
        return library_failure();
    *chars_per_token = (double)characters / (double)attn_token_stream_size(*out);
    return 0;
}

/* The model and tokenizer a file holds: --init's start or --resume's checkpoint. A file from
 * `attn convert --from llmc` has no tokenizer: it reads token files only. */
static int read_model_file(const attn_tensor_file *file, const char *flag, const char *path,
                           attn_model **model, attn_tokenizer **tokenizer)
{
    if (attn_model_from_file(file, path, model) != ATTN_OK) {
        cli_library_error_in("train", "%s %s", flag, path);
        return 1;
    }
    if (attn_model_get_config(*model)->arch != ATTN_ARCH_TRANSFORMER_LM) {
        fprintf(stderr,
                "attn train: %s %s holds an encoder-decoder or classifier, not a language model "
                "(arch transformer_lm)\n",
                flag, path);
        return 1;
    }
    const char *json = NULL;
    if (attn_tensor_file_metadata(file, ATTN_TGT_TOKENIZER_KEY, &json) == ATTN_OK &&
        attn_tokenizer_from_json(json, tokenizer) != ATTN_OK) {
        cli_library_error_in("train", "%s %s: its tokenizer", flag, path);
        return 1;
    }
    attn_clear_error();
    return 0;
}

/* --init's model with --dropout and --label-smoothing, when given, over its config: the
 * weights are the same, how they are trained may change. */
static int apply_training_flags(const train_args *a, attn_model **model)
{
    attn_model_config c = *attn_model_get_config(*model);
    const int dropout = train_args_given(a, "--dropout");
    const int smoothing = train_args_given(a, "--label-smoothing");
    if (!dropout && !smoothing)
        return 0;
    if (dropout)
        c.dropout = a->dropout;
    if (smoothing)
        c.label_smoothing = a->label_smoothing;
    attn_model *changed = NULL;
    if (attn_model_create(&c, &changed) != ATTN_OK)
        return train_usage_error("the model: %s", attn_last_error());
    /* Same architecture, so the same parameter layout: one copy of the values. */
    attn_params *from = attn_model_params(*model), *to = attn_model_params(changed);
    memcpy(attn_params_buffer(to, ATTN_PARAM_VALUES), attn_params_buffer(from, ATTN_PARAM_VALUES),
           attn_params_buffer_floats(from) * sizeof(float));
    attn_params_values_changed(to);
    attn_model_destroy(*model);
    *model = changed;
    return 0;
}

/* A new model: the flags over the language model's defaults (GPT's: pre-norm, GELU, a final
 * norm, tied output; no label smoothing, so the loss is the perplexity's), with the data's
 * vocabulary and the context as max_len. */
static int describe_new_model(const train_args *a, int64_t vocab, attn_model_config *c)
{
    attn_model_config lm = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    if (a->config == NULL) {
        lm.norm_first = 1;
        lm.activation = ATTN_ACT_GELU;
        lm.decoder_final_norm = 1;
        lm.tie_output = 1;
        lm.decoder_layers = a->layers;
        lm.d_model = a->d_model;
        lm.num_heads = a->heads;
        lm.ffn_dim = a->ffn;
        lm.dropout = a->dropout;
        lm.label_smoothing = train_args_given(a, "--label-smoothing") ? a->label_smoothing : 0.0;
        lm.max_len = a->context;
        *c = lm;
    } else {
        const int code = train_describe_model(a, c);
        if (code != 0)
            return code;
        if (c->max_len < a->context) {
            fprintf(stderr, "attn train: --config %s: max_len %lld is below --context %lld\n",
                    a->config, (long long)c->max_len, (long long)a->context);
            return 1;
        }
    }
    /* The block options override --config's, as the size flags do for a translation model. */
    train_apply_block_options(a, c);
    c->tgt_vocab = vocab;
    if (attn_model_config_validate(c) != ATTN_OK)
        return train_usage_error("the model: %s", attn_last_error());
    return 0;
}

/* Every id of the data must have a row in the model's embedding. */
static int check_vocabulary(const train_lm_data *d, const attn_model *model)
{
    const int64_t vocab = attn_model_get_config(model)->tgt_vocab;
    const attn_token_stream *streams[2] = {d->train, d->valid};
    for (int i = 0; i < 2; i++) {
        const int32_t largest = attn_token_stream_max_id(streams[i]);
        if (largest >= vocab) {
            fprintf(stderr,
                    "attn train: the %s tokens include id %d, but the model's vocabulary has %lld "
                    "entries: the token file was made with another tokenizer\n",
                    i == 0 ? "training" : "validation", (int)largest, (long long)vocab);
            return 1;
        }
    }
    return 0;
}

/* A token file attn tokenize wrote names the tokenizer that made it: it must be the model's
 * (tokenizer, from the flag origin), or, for token files alone, the same for both files. Ids
 * of another tokenizer would train and validate on nonsense without an error. */
static int check_token_files_tokenizer(const train_args *a, const train_lm_data *d,
                                       const attn_tokenizer *tokenizer)
{
    const char *origin = a->resume != NULL      ? "--resume"
                         : a->init != NULL      ? "--init"
                         : a->tokenizer != NULL ? "--tokenizer"
                         : a->tgt_spm != NULL   ? "--tgt-spm"
                                                : NULL;
    const char *origin_path = a->resume != NULL    ? a->resume
                              : a->init != NULL    ? a->init
                              : a->tgt_spm != NULL ? a->tgt_spm
                                                   : a->tokenizer;
    uint64_t expected = 0;
    if (tokenizer != NULL && attn_tokenizer_fingerprint(tokenizer, &expected) != ATTN_OK)
        return library_failure();
    const char *first_file = NULL;
    const attn_token_stream *streams[2] = {d->train, d->valid};
    const char *flags[2] = {"--train-tokens", "--valid-tokens"};
    const char *paths[2] = {a->train_tokens, a->valid_tokens};
    for (int i = 0; i < 2; i++) {
        uint64_t made_by = 0;
        if (paths[i] == NULL || !attn_token_stream_tokenizer(streams[i], &made_by))
            continue;
        if (tokenizer == NULL && first_file == NULL) {
            expected = made_by;
            first_file = paths[i];
            continue;
        }
        if (made_by == expected)
            continue;
        if (tokenizer == NULL)
            fprintf(stderr,
                    "attn train: %s %s and --train-tokens %s were made with different "
                    "tokenizers: make both with the same (attn tokenize --tokenizer FILE)\n",
                    flags[i], paths[i], first_file);
        else if (origin == NULL)
            fprintf(stderr,
                    "attn train: %s %s was made with another tokenizer than the one learned "
                    "from --train\n",
                    flags[i], paths[i]);
        else
            fprintf(stderr,
                    "attn train: %s %s was made with another tokenizer than %s %s holds: make it "
                    "again with attn tokenize %s %s\n",
                    flags[i], paths[i], origin, origin_path,
                    strcmp(origin, "--tokenizer") == 0 ? "--tokenizer"
                    : strcmp(origin, "--tgt-spm") == 0 ? "--spm"
                                                       : "--model",
                    origin_path);
        return 1;
    }
    return 0;
}

int train_lm_prepare(const train_args *a, attn_tensor_file *resume_file, train_lm_data *d,
                     attn_model **model, attn_trainer_options *o)
{
    attn_tokenizer *tokenizer = NULL;
    int code = 0;
    attn_tensor_file *init_file = NULL;
    if (resume_file != NULL) {
        code = read_model_file(resume_file, "--resume", a->resume, model, &tokenizer);
        if (code == 0 && attn_trainer_options_from_checkpoint(resume_file, o) != ATTN_OK) {
            cli_library_error_in("train", "--resume %s", a->resume);
            code = 1;
        }
        if (code == 0)
            train_options_overlay(a, o);
    } else if (a->init != NULL) {
        if (attn_tensor_file_open(a->init, &init_file) != ATTN_OK)
            code = library_failure();
        else
            code = read_model_file(init_file, "--init", a->init, model, &tokenizer);
        attn_tensor_file_close(init_file);
        if (code == 0)
            code = apply_training_flags(a, model);
    }
    if (code == 0 && a->train != NULL && *model != NULL && tokenizer == NULL) {
        fprintf(stderr,
                "attn train: %s %s has no tokenizer to read --train's text with (a model "
                "converted from llm.c reads token files): give --train-tokens\n",
                resume_file != NULL ? "--resume" : "--init",
                resume_file != NULL ? a->resume : a->init);
        code = 1;
    }
    /* A new model's tokenizer: attn tokenize's file, or learned from the text as attn
     * tokenize learns one. */
    if (code == 0 && a->tokenizer != NULL)
        code = lm_tokenizer_load("train", "--tokenizer", a->tokenizer, &tokenizer);
    if (code == 0 && a->tgt_spm != NULL)
        code = lm_tokenizer_load_spm("train", "--tgt-spm", a->tgt_spm, &tokenizer);
    if (code == 0 && a->train != NULL && tokenizer == NULL) {
        attn_lines lines;
        if (attn_lines_read(a->train, &lines) != ATTN_OK)
            code = library_failure();
        else {
            code = lm_tokenizer_learn("train", a->tgt_tokens, (const char *const *)lines.line,
                                      lines.count, &tokenizer);
            attn_lines_free(&lines);
        }
    }
    /* The data, through the tokenizer or straight from token files. */
    if (code == 0 && a->train != NULL)
        code = stream_of_text(a->train, tokenizer, &d->train, &d->train_chars_per_token);
    if (code == 0 && a->valid != NULL)
        code = stream_of_text(a->valid, tokenizer, &d->valid, &d->valid_chars_per_token);
    if (code == 0 && a->train_tokens != NULL &&
        attn_token_stream_map_llmc(a->train_tokens, &d->train) != ATTN_OK)
        code = library_failure();
    if (code == 0 && a->valid_tokens != NULL &&
        attn_token_stream_map_llmc(a->valid_tokens, &d->valid) != ATTN_OK)
        code = library_failure();
    if (code == 0)
        code = check_token_files_tokenizer(a, d, tokenizer);
    if (code == 0 && tokenizer != NULL &&
        attn_tokenizer_to_json(tokenizer, &d->tokenizer_json) != ATTN_OK)
        code = library_failure();
    if (code == 0 && tokenizer == NULL && *model == NULL)
        fprintf(stderr,
                "attn train: token files without --tokenizer: the model will hold no tokenizer, "
                "so attn generate and attn eval cannot read text with it (give the tokenizer "
                "file attn tokenize wrote beside the tokens)\n");
    if (code == 0 && d->valid == NULL && !a->no_valid)
        fprintf(stderr, "attn train: no validation text (--valid): training on all of it and "
                        "keeping the last weights\n");
    if (code == 0)
        d->vocabulary = tokenizer != NULL ? attn_vocab_size(attn_tokenizer_vocab(tokenizer)) : 0;
    attn_tokenizer_destroy(tokenizer);
    if (code != 0)
        return code;

    if (*model == NULL) {
        int64_t vocab = d->vocabulary;
        if (vocab == 0) {
            /* Token files alone: the ids they hold size the vocabulary. */
            const int32_t a_max = attn_token_stream_max_id(d->train);
            const int32_t b_max = attn_token_stream_max_id(d->valid);
            vocab = (int64_t)(a_max > b_max ? a_max : b_max) + 1;
        }
        attn_model_config c;
        code = describe_new_model(a, vocab, &c);
        if (code != 0)
            return code;
        if (attn_model_create(&c, model) != ATTN_OK || attn_model_init(*model, (uint64_t)a->seed))
            return library_failure();
    }
    code = check_vocabulary(d, *model);
    if (code != 0)
        return code;
    const attn_model_config *c = attn_model_get_config(*model);
    if (resume_file != NULL)
        return 0;

    /* The windows: --context tokens each (at most the model's reach), 4096 tokens a batch. */
    const int64_t context = a->context;
    if (context > c->max_len) {
        fprintf(stderr,
                "attn train: --context %lld is beyond the model's reach (max_len %lld): give "
                "--context %lld or less\n",
                (long long)context, (long long)c->max_len, (long long)c->max_len);
        return 1;
    }
    int64_t sequences =
        train_args_given(a, "--batch-sequences") ? a->batch_sequences : 4096 / context;
    sequences = sequences < 1 ? 1 : sequences;
    const int64_t windows = (attn_token_stream_size(d->train) - 1) / context;
    if (!train_args_given(a, "--batch-sequences") && windows >= 1 && sequences > windows)
        sequences = windows;
    if (windows < sequences) {
        fprintf(stderr,
                "attn train: the training text has %lld tokens, too few for one batch of %lld "
                "windows of %lld tokens: give more text, or a smaller --context or "
                "--batch-sequences\n",
                (long long)attn_token_stream_size(d->train), (long long)sequences,
                (long long)context);
        return 1;
    }
    if (train_options_for_new_run(a, c->d_model, sequences * (context + 1), windows / sequences,
                                  o) != ATTN_OK)
        return library_failure();
    o->batch_sequences = sequences;
    o->context = context;
    return 0;
}
