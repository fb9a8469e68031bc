/* attn train's model: the one the flags describe, over --config's JSON if given, sized to the
 * data once the tokenizers exist. */
#include "cli/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --config's JSON. The vocabulary sizes come from the tokenizers, which do not exist yet: they
 * stand at 1 until fit_model_to_data. Returns 0 or an exit code. */
static int read_config_file(const char *path, train_task task, attn_model_config *config)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "attn train: --config %s: %s\n", path, strerror(errno));
        return 1;
    }
    char *text = NULL;
    size_t size = 0, capacity = 0;
    for (;;) {
        if (size + 4096 + 1 > capacity) {
            capacity = 2 * capacity + 8192;
            char *grown = realloc(text, capacity);
            if (grown == NULL) {
                free(text);
                fclose(f);
                fprintf(stderr, "attn train: --config %s: out of memory\n", path);
                return 1;
            }
            text = grown;
        }
        size_t got = fread(text + size, 1, 4096, f);
        size += got;
        if (got < 4096)
            break;
    }
    fclose(f);
    text[size] = '\0';
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (root == NULL || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        fprintf(stderr, "attn train: --config %s: not a JSON object\n", path);
        return 1;
    }
    /* A classifier's classes come from the labels, as vocabularies from the tokenizers; a
     * masked language model has the source vocabulary alone. */
    const int classify = task == TRAIN_TASK_CLASSIFY, mlm = task == TRAIN_TASK_MLM;
    const char *const sizes[] = {"src_vocab", classify ? "num_classes" : "tgt_vocab"};
    for (int i = 0; i < (mlm ? 1 : 2); i++) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, sizes[i]);
        cJSON_AddNumberToObject(root, sizes[i], 1.0);
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (json == NULL) {
        fprintf(stderr, "attn train: --config %s: out of memory\n", path);
        return 1;
    }
    attn_status status = attn_model_config_from_json(json, config);
    free(json);
    if (status != ATTN_OK) {
        fprintf(stderr, "attn train: --config %s: %s\n", path, attn_last_error());
        return 1;
    }
    if (classify && !attn_model_arch_is_classifier(config->arch)) {
        fprintf(stderr,
                "attn train: --config %s: arch must be \"transformer_classifier\" or "
                "\"rnn_classifier\" for --task classify\n",
                path);
        return 1;
    }
    if (mlm && config->arch != ATTN_ARCH_TRANSFORMER_MLM) {
        fprintf(stderr,
                "attn train: --config %s: arch must be \"transformer_mlm\" for --task mlm\n",
                path);
        return 1;
    }
    if (!classify && !mlm && config->arch != ATTN_ARCH_TRANSFORMER &&
        config->arch != ATTN_ARCH_RNN) {
        fprintf(stderr,
                "attn train: --config %s: arch must be \"transformer\" or \"rnn\" (an "
                "encoder-decoder) to train on sentence pairs\n",
                path);
        return 1;
    }
    return 0;
}

static int is_luong(attn_rnn_attention attention)
{
    return attention == ATTN_RNN_LUONG_DOT || attention == ATTN_RNN_LUONG_GENERAL ||
           attention == ATTN_RNN_LUONG_CONCAT;
}

/* In attn_rnn_attention's order. */
static const char *const attention_names[] = {"bahdanau", "luong-dot", "luong-general",
                                              "luong-concat", "none"};

/* The rnn flags over c (the rnn defaults or --config's). Returns 0 or an exit code. */
static int describe_rnn(const train_args *a, attn_model_config *c)
{
    if (train_args_given(a, "--layers"))
        c->layers = a->layers;
    if (train_args_given(a, "--hidden"))
        c->hidden = a->hidden;
    if (train_args_given(a, "--embedding-dim"))
        c->embedding_dim = a->embedding_dim;
    if (train_args_given(a, "--attention-dim"))
        c->attention_dim = a->attention_dim;
    const int attention_given = train_args_given(a, "--attention");
    if (train_args_given(a, "--cell"))
        c->cell = (attn_rnn_cell)a->cell;
    if (attention_given)
        c->attention = (attn_rnn_attention)a->attention;
    if (train_args_given(a, "--local"))
        c->local = (attn_rnn_local)a->local;
    if (train_args_given(a, "--window"))
        c->window = a->window;
    if (a->input_feeding)
        c->input_feeding = 1;
    if (a->reverse_source)
        c->reverse_source = 1;
    /* Bahdanau's encoder reads both ways; luong-dot cannot use such an encoder (below); the
     * other choices keep the config's setting. */
    if (a->bidirectional || a->no_bidirectional)
        c->bidirectional = a->bidirectional;
    else if (c->attention == ATTN_RNN_BAHDANAU && attention_given)
        c->bidirectional = 1;
    else if (c->attention == ATTN_RNN_LUONG_DOT && attention_given)
        c->bidirectional = 0;

    const char *attention = attention_names[c->attention];
    if (c->attention == ATTN_RNN_LUONG_DOT && c->bidirectional)
        return train_usage_error("attention luong-dot scores s_i . h_j, so the annotations h_j "
                                 "must be as wide as the decoder, and a bidirectional encoder's "
                                 "are 2 x hidden: use --no-bidirectional%s, or luong-general",
                                 a->bidirectional ? " instead of --bidirectional" : "");
    if (c->local != ATTN_RNN_GLOBAL && !is_luong(c->attention))
        return train_usage_error("--local needs Luong attention (--attention luong-dot, "
                                 "luong-general or luong-concat), not %s",
                                 attention);
    if (train_args_given(a, "--window") && c->local == ATTN_RNN_GLOBAL)
        return train_usage_error("--window is local attention's half width: give --local m or "
                                 "p too");
    if (c->input_feeding && !is_luong(c->attention))
        return train_usage_error("--input-feeding needs Luong attention (--attention luong-dot, "
                                 "luong-general or luong-concat), not %s",
                                 attention);
    return 0;
}

int train_describe_model(const train_args *a, attn_model_config *c)
{
    int from_file = a->config != NULL;
    const int classify = a->task == TRAIN_TASK_CLASSIFY, mlm = a->task == TRAIN_TASK_MLM;
    if (from_file) {
        int code = read_config_file(a->config, (train_task)a->task, c);
        if (code != 0)
            return code;
        const int file_rnn = c->arch == ATTN_ARCH_RNN || c->arch == ATTN_ARCH_RNN_CLASSIFIER;
        const char *file_arch = c->arch == ATTN_ARCH_RNN              ? "rnn"
                                : c->arch == ATTN_ARCH_RNN_CLASSIFIER ? "rnn_classifier"
                                : classify                            ? "transformer_classifier"
                                                                      : "transformer";
        if (!mlm && train_args_given(a, "--arch") && (a->arch == ATTN_ARCH_RNN) != file_rnn)
            return train_usage_error("--arch %s contradicts --config, whose arch is \"%s\"",
                                     a->arch == ATTN_ARCH_RNN ? "rnn" : "transformer", file_arch);
    } else if (classify) {
        /* The sizes the data gives (vocabulary, classes) stand at 1 until they are known. */
        *c = attn_model_config_default(a->arch == ATTN_ARCH_RNN ? ATTN_ARCH_RNN_CLASSIFIER
                                                                : ATTN_ARCH_TRANSFORMER_CLASSIFIER);
        c->src_vocab = c->num_classes = 1;
    } else if (mlm) {
        *c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_MLM);
        c->src_vocab = 1;
    } else {
        *c = attn_model_config_default((attn_model_arch)a->arch);
        c->src_vocab = c->tgt_vocab = 1;
    }
    const int rnn_classifier = c->arch == ATTN_ARCH_RNN_CLASSIFIER;
    const int rnn = c->arch == ATTN_ARCH_RNN || rnn_classifier;
    /* The block options reach here only with --task classify (the others refuse them first). */
    static const char *const transformer_only[] = {
        "--d-model", "--heads", "--ffn", "--norm", "--ffn-kind", "--positions", "--no-bias"};
    static const char *const rnn_only[] = {
        "--cell",          "--hidden", "--embedding-dim", "--attention",        "--attention-dim",
        "--local",         "--window", "--bidirectional", "--no-bidirectional", "--input-feeding",
        "--reverse-source"};
    /* The classifier has the encoder alone: no decoder to attend with. */
    static const char *const decoder_only[] = {"--attention",     "--attention-dim",
                                               "--local",         "--window",
                                               "--input-feeding", "--reverse-source"};
    for (size_t i = 0; rnn && i < sizeof transformer_only / sizeof *transformer_only; i++)
        if (train_args_given(a, transformer_only[i]))
            return train_usage_error(
                "%s applies to --arch transformer only (%s)", transformer_only[i],
                i >= 3           ? "an rnn has no Transformer blocks to change"
                : rnn_classifier ? "the rnn's sizes are --hidden, --embedding-dim and "
                                   "--layers"
                                 : "the rnn's sizes are --hidden, --embedding-dim and "
                                   "--attention-dim");
    for (size_t i = 0; !rnn && i < sizeof rnn_only / sizeof *rnn_only; i++)
        if (train_args_given(a, rnn_only[i]))
            return train_usage_error("%s applies to --arch rnn only", rnn_only[i]);
    for (size_t i = 0; rnn_classifier && i < sizeof decoder_only / sizeof *decoder_only; i++)
        if (train_args_given(a, decoder_only[i]))
            return train_usage_error("%s applies to the rnn encoder-decoder's decoder; the rnn "
                                     "classifier is its encoder alone, pooled by --pooling",
                                     decoder_only[i]);
    if (rnn_classifier && train_args_given(a, "--pooling") && a->pooling == ATTN_POOLING_CLS)
        return train_usage_error("--pooling cls needs --arch transformer: a recurrent encoder "
                                 "has no token whose state has read the whole text both ways; "
                                 "use --pooling attention (the default) or mean");

    if (!from_file || train_args_given(a, "--dropout"))
        c->dropout = a->dropout;
    if (!from_file || train_args_given(a, "--label-smoothing"))
        c->label_smoothing = a->label_smoothing;
    /* As a language model's: no smoothing unless asked, so the loss is the perplexity's. */
    if (mlm && !from_file && !train_args_given(a, "--label-smoothing"))
        c->label_smoothing = 0.0;
    if (rnn) {
        int code = describe_rnn(a, c);
        if (code != 0)
            return code;
        if (rnn_classifier && train_args_given(a, "--pooling"))
            c->pooling = (attn_pooling)a->pooling;
    } else {
        if (!from_file || train_args_given(a, "--layers")) {
            c->encoder_layers = a->layers;
            if (c->arch == ATTN_ARCH_TRANSFORMER)
                c->decoder_layers = a->layers;
        }
        if (c->arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER &&
            (!from_file || train_args_given(a, "--pooling")))
            c->pooling = (attn_pooling)a->pooling;
        if (!from_file || train_args_given(a, "--d-model"))
            c->d_model = a->d_model;
        if (!from_file || train_args_given(a, "--heads"))
            c->num_heads = a->heads;
        if (!from_file || train_args_given(a, "--ffn"))
            c->ffn_dim = a->ffn;
    }
    if (attn_model_config_validate(c) != ATTN_OK)
        return train_usage_error("the model: %s", attn_last_error());
    return 0;
}

void train_longest(const attn_corpus *corpus, int64_t *source, int64_t *target)
{
    for (int64_t i = 0; corpus != NULL && i < attn_corpus_size(corpus); i++) {
        const int32_t *ids;
        int64_t n;
        attn_corpus_source_ids(corpus, i, &ids, &n);
        *source = n > *source ? n : *source;
        attn_corpus_target_ids(corpus, i, &ids, &n);
        *target = n > *target ? n : *target;
    }
}

int train_fit_model_to_data(const char *config_path, int64_t src_vocab, int64_t tgt_vocab,
                            int64_t longest_source, int64_t longest_target, attn_model_config *c)
{
    c->src_vocab = src_vocab;
    c->tgt_vocab = tgt_vocab;
    /* The decoder reads a target without its last token. */
    int64_t needed = longest_source > longest_target - 1 ? longest_source : longest_target - 1;
    if (needed > c->max_len) {
        if (config_path != NULL) {
            fprintf(stderr,
                    "attn train: --config %s: max_len %lld is below the longest "
                    "sentence (%lld tokens)\n",
                    config_path, (long long)c->max_len, (long long)needed);
            return 1;
        }
        c->max_len = needed;
    }
    if (attn_model_config_validate(c) != ATTN_OK) {
        fprintf(stderr, "attn train: the model: %s\n", attn_last_error());
        return 1;
    }
    return 0;
}

void train_apply_block_options(const train_args *a, attn_model_config *c)
{
    if (train_args_given(a, "--norm"))
        c->norm = (attn_norm_kind)a->norm;
    if (train_args_given(a, "--ffn-kind"))
        c->ffn = (attn_ffn_kind)a->ffn_kind;
    if (train_args_given(a, "--positions"))
        c->positions = (attn_positions)a->positions;
    if (a->no_bias)
        c->bias = c->output_bias = 0;
}

int train_fit_encoder_to_data(const train_args *a, const attn_model_config *described,
                              int64_t vocabulary, int64_t classes, int64_t longest,
                              attn_model_config *c)
{
    *c = *described;
    train_apply_block_options(a, c);
    c->src_vocab = vocabulary;
    const int classifier = attn_model_arch_is_classifier(c->arch);
    if (classifier)
        c->num_classes = classes;
    const int64_t needed = longest + (classifier && c->pooling == ATTN_POOLING_CLS);
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
