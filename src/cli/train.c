/* attn train: read a parallel corpus, learn tokenizers, build a model, run the training loop
 * with a progress display, a plain or JSON-lines log, checkpoints and resume. */
#define _POSIX_C_SOURCE 200809L /* kill, opendir, isatty, fileno */

#include "attn/attn.h"
#include "cli/commands.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* ---- options ------------------------------------------------------------------------------ */

/* OPT_FLAG takes no value: giving it sets its int field to 1. */
typedef enum option_kind { OPT_STRING, OPT_INT, OPT_NUMBER, OPT_FLAG } option_kind;

/* Which options --resume allows: the model and its tokenizers come from the checkpoint. */
typedef enum option_group { GROUP_DATA, GROUP_MODEL, GROUP_TRAINING, GROUP_RUN } option_group;

typedef struct train_args {
    const char *train, *valid, *train_src, *train_tgt, *valid_src, *valid_tgt, *out;
    const char *arch, *cell, *attention, *local, *src_tokens, *tgt_tokens, *config;
    const char *schedule, *optimizer, *checkpoint, *resume, *log;
    int64_t window, layers, d_model, heads, ffn, hidden, embedding_dim, attention_dim;
    int bidirectional, no_bidirectional, input_feeding, reverse_source;
    double dropout, label_smoothing;
    double lr, min_lr, weight_decay, clip_norm, time_limit;
    int64_t warmup, batch_tokens, accumulate, epochs, max_steps, seed, threads;
    int64_t eval_every, patience, checkpoint_every, log_every;
} train_args;

typedef struct option_spec {
    const char *name;
    option_kind kind;
    option_group group;
    size_t offset;
    const char *value_name;
    const char *help;
} option_spec;

#define OPT(field, kind, group, value, help) {"--" #field, kind, group, offsetof(train_args, field), value, help}
#define OPT_NAMED(name, field, kind, group, value, help) {name, kind, group, offsetof(train_args, field), value, help}

static const option_spec options[] = {
    OPT(train, OPT_STRING, GROUP_DATA, "FILE", "training pairs, one 'source<TAB>target' per line"),
    OPT(valid, OPT_STRING, GROUP_DATA, "FILE",
        "validation pairs (TSV): loss and token accuracy, keep-best, early stopping"),
    OPT_NAMED("--train-src", train_src, OPT_STRING, GROUP_DATA, "FILE",
              "training sources, one sentence per line (with --train-tgt)"),
    OPT_NAMED("--train-tgt", train_tgt, OPT_STRING, GROUP_DATA, "FILE",
              "training targets, line i translating line i of --train-src"),
    OPT_NAMED("--valid-src", valid_src, OPT_STRING, GROUP_DATA, "FILE", "validation sources"),
    OPT_NAMED("--valid-tgt", valid_tgt, OPT_STRING, GROUP_DATA, "FILE", "validation targets"),
    OPT(out, OPT_STRING, GROUP_RUN, "MODEL.safetensors",
        "the model file: the best validation loss's weights (the last without --valid)"),
    OPT(arch, OPT_STRING, GROUP_MODEL, "transformer|rnn",
        "architecture [transformer, or --config's]"),
    OPT_NAMED("--src-tokens", src_tokens, OPT_STRING, GROUP_MODEL, "char|word|bpe:N",
              "source tokenizer, learned from the training sources [char]"),
    OPT_NAMED("--tgt-tokens", tgt_tokens, OPT_STRING, GROUP_MODEL, "char|word|bpe:N",
              "target tokenizer, learned from the training targets [char]"),
    OPT(config, OPT_STRING, GROUP_MODEL, "FILE.json",
        "model config JSON (as stored in model files); the flags below override it and the "
        "vocabulary sizes come from the tokenizers"),
    OPT(layers, OPT_INT, GROUP_MODEL, "N", "encoder and decoder layers [transformer 3, rnn 1]"),
    OPT_NAMED("--d-model", d_model, OPT_INT, GROUP_MODEL, "N", "transformer: model width [256]"),
    OPT(heads, OPT_INT, GROUP_MODEL, "N", "transformer: attention heads [4]"),
    OPT(ffn, OPT_INT, GROUP_MODEL, "N", "transformer: feed-forward hidden width [1024]"),
    OPT(cell, OPT_STRING, GROUP_MODEL, "gru|lstm", "rnn: recurrent cell [gru]"),
    OPT(hidden, OPT_INT, GROUP_MODEL, "N",
        "rnn: units per encoder direction and in the decoder (the rnn's width) [256]"),
    OPT_NAMED("--embedding-dim", embedding_dim, OPT_INT, GROUP_MODEL, "N",
              "rnn: source and target embedding width [256]"),
    OPT(attention, OPT_STRING, GROUP_MODEL,
        "bahdanau|luong-dot|luong-general|luong-concat|none",
        "rnn: the decoder's attention (see above) [bahdanau]"),
    OPT_NAMED("--attention-dim", attention_dim, OPT_INT, GROUP_MODEL, "N",
              "rnn: hidden width of the bahdanau, luong-concat and local-p scoring nets [256]"),
    OPT(local, OPT_STRING, GROUP_MODEL, "m|p",
        "rnn, luong-*: local attention over a window at i (m) or at a predicted p_i (p) "
        "[global]"),
    OPT(window, OPT_INT, GROUP_MODEL, "D", "rnn, --local: the window's half width D >= 1 [10]"),
    OPT(bidirectional, OPT_FLAG, GROUP_MODEL, "",
        "rnn: the encoder reads both ways; annotations are 2 x hidden wide [on, except "
        "luong-dot]"),
    OPT_NAMED("--no-bidirectional", no_bidirectional, OPT_FLAG, GROUP_MODEL, "",
              "rnn: a one-direction encoder (luong-dot needs one)"),
    OPT_NAMED("--input-feeding", input_feeding, OPT_FLAG, GROUP_MODEL, "",
              "rnn, luong-*: feed the last attentional state h~_{i-1} into step i [off]"),
    OPT_NAMED("--reverse-source", reverse_source, OPT_FLAG, GROUP_MODEL, "",
              "rnn: read each source sentence backwards (Sutskever et al.) [off]"),
    OPT(dropout, OPT_NUMBER, GROUP_MODEL, "P", "dropout probability [0.1]"),
    OPT_NAMED("--label-smoothing", label_smoothing, OPT_NUMBER, GROUP_MODEL, "E",
              "label smoothing of the training loss [0.1]"),
    OPT(lr, OPT_NUMBER, GROUP_TRAINING, "RATE",
        "peak learning rate [1e-3]; noam: the factor [1]"),
    OPT(warmup, OPT_INT, GROUP_TRAINING, "STEPS", "warm-up steps [1000]"),
    OPT(schedule, OPT_STRING, GROUP_TRAINING, "inverse-sqrt|noam|cosine|constant",
        "learning-rate schedule [inverse-sqrt]; cosine decays to --min-lr at the last step "
        "(by --max-steps, else --epochs), or with --epochs 0 over the --time-limit (by the "
        "clock; not reproducible to the bit)"),
    OPT_NAMED("--min-lr", min_lr, OPT_NUMBER, GROUP_TRAINING, "RATE", "cosine: final rate [0]"),
    OPT(optimizer, OPT_STRING, GROUP_TRAINING, "adam|adamw",
        "Adam (betas 0.9, 0.98, eps 1e-9) or AdamW [adam]"),
    OPT_NAMED("--weight-decay", weight_decay, OPT_NUMBER, GROUP_TRAINING, "W",
              "weight decay; biases and norms are exempt [0; adamw: 0.01]"),
    OPT_NAMED("--clip-norm", clip_norm, OPT_NUMBER, GROUP_TRAINING, "N",
              "clip the global gradient norm (0: off) [1]"),
    OPT_NAMED("--batch-tokens", batch_tokens, OPT_INT, GROUP_TRAINING, "N",
              "padded source + target tokens per batch [4096]"),
    OPT(accumulate, OPT_INT, GROUP_TRAINING, "K", "batches per update [1]"),
    OPT(seed, OPT_INT, GROUP_TRAINING, "N",
        "seed of the initial weights, batch order and dropout [1]"),
    OPT(epochs, OPT_INT, GROUP_RUN, "N", "stop after N epochs (0: no limit) [10]"),
    OPT_NAMED("--max-steps", max_steps, OPT_INT, GROUP_RUN, "N",
              "stop at update N (0: no limit) [0]"),
    OPT_NAMED("--time-limit", time_limit, OPT_NUMBER, GROUP_RUN, "SECONDS",
              "stop after this long, writing a checkpoint (0: none) [0]; counts this run "
              "only: on --resume of a cosine over the time limit, give the time left"),
    OPT_NAMED("--eval-every", eval_every, OPT_INT, GROUP_RUN, "N",
              "validate every N updates (0: each epoch) [0]"),
    OPT(patience, OPT_INT, GROUP_RUN, "N",
        "stop after N validations without a new best (0: never) [0]"),
    OPT(checkpoint, OPT_STRING, GROUP_RUN, "FILE",
        "resume checkpoint: weights, Adam moments, state [MODEL.last.safetensors]"),
    OPT_NAMED("--checkpoint-every", checkpoint_every, OPT_INT, GROUP_RUN, "N",
              "also write the checkpoint every N updates (it is written after each "
              "validation and at the end) [0]"),
    OPT(resume, OPT_STRING, GROUP_RUN, "CKPT",
        "continue the run a checkpoint holds (same data; the model, tokenizers and "
        "curve-shaping options come from it; stopping rules may change)"),
    OPT(log, OPT_STRING, GROUP_RUN, "FILE.jsonl",
        "append one JSON object per update, validation and end, for plots"),
    OPT_NAMED("--log-every", log_every, OPT_INT, GROUP_RUN, "N",
              "plain progress line every N updates when stderr is not a terminal [50]"),
    OPT(threads, OPT_INT, GROUP_RUN, "N",
        "threads (0: ATTN_NUM_THREADS or all cores); exact resume needs the same count [0]"),
};
#define N_OPTIONS (sizeof options / sizeof options[0])

static void print_help(void)
{
    printf("usage: attn train --train TRAIN.tsv [--valid VALID.tsv] --out MODEL.safetensors "
           "[options]\n"
           "       attn train --train-src S --train-tgt T [--valid-src S --valid-tgt T] "
           "--out MODEL.safetensors [options]\n"
           "       attn train --resume MODEL.last.safetensors --train ... --out ... "
           "[stopping rules]\n\n"
           "Trains a sequence-to-sequence model. Files are UTF-8. MODEL.safetensors holds the\n"
           "weights, the model config and both tokenizers ('attn translate --model' reads it);\n"
           "the checkpoint also holds Adam's moments and the training state, and a run resumed\n"
           "from it reproduces the uninterrupted run's losses exactly at the same thread "
           "count.\n"
           "Progress goes to stderr: a bar on a terminal, plain lines otherwise. Ctrl-C stops\n"
           "after the current update and writes the checkpoint.\n\n"
           "--arch transformer is the encoder-decoder of \"Attention Is All You Need\" (sized by\n"
           "--layers, --d-model, --heads, --ffn). --arch rnn is a GRU or LSTM encoder-decoder\n"
           "(sized by --layers, --hidden, --embedding-dim) whose decoder attends by --attention:\n"
           "  bahdanau       additive scores v.tanh(W s_{i-1} + U h_j) from the previous state\n"
           "                 (Bahdanau et al. 2015)\n"
           "  luong-dot      scores s_i . h_j from the current state (Luong et al. 2015); needs\n"
           "                 a one-direction encoder, which is then the default\n"
           "  luong-general  scores s_i . W h_j\n"
           "  luong-concat   scores v.tanh(W [s_i; h_j])\n"
           "  none           no attention: the encoder's last state is the context of every\n"
           "                 step (Cho et al. 2014; with --reverse-source, Sutskever et al. 2014)\n"
           "--config FILE.json gives the whole model (arch \"transformer\" or \"rnn\"); flags\n"
           "of that architecture override it, flags of the other are an error.\n\noptions:\n");
    for (size_t i = 0; i < N_OPTIONS; i++) {
        char left[96];
        snprintf(left, sizeof left, "%s %s", options[i].name, options[i].value_name);
        if (options[i].kind == OPT_FLAG)
            snprintf(left, sizeof left, "%s", options[i].name);
        if (strlen(left) > 26)
            printf("  %s\n  %-26s %s\n", left, "", options[i].help);
        else
            printf("  %-26s %s\n", left, options[i].help);
    }
    printf("  %-26s %s\n", "--help", "this text");
}

static int parse_int(const char *name, const char *text, int64_t *out)
{
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0') {
        fprintf(stderr, "attn train: %s expects an integer, got '%s'\n", name, text);
        return 0;
    }
    *out = value;
    return 1;
}

static int parse_number(const char *name, const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !isfinite(value)) {
        fprintf(stderr, "attn train: %s expects a number, got '%s'\n", name, text);
        return 0;
    }
    *out = value;
    return 1;
}

/* Fills args and marks given[i] for each option seen. Returns 0 to go on, or an exit code. */
static int parse_args(int argc, char **argv, train_args *args, int *given)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help();
            return -1;
        }
        const char *eq = strchr(arg, '=');
        size_t name_len = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
        size_t k = 0;
        while (k < N_OPTIONS && !(strlen(options[k].name) == name_len &&
                                  strncmp(options[k].name, arg, name_len) == 0))
            k++;
        if (k == N_OPTIONS) {
            fprintf(stderr, "attn train: unknown option '%.*s' (see 'attn train --help')\n",
                    (int)name_len, arg);
            return 2;
        }
        const option_spec *o = &options[k];
        const char *value = eq != NULL ? eq + 1 : NULL;
        if (o->kind == OPT_FLAG && value != NULL) {
            fprintf(stderr, "attn train: %s takes no value\n", o->name);
            return 2;
        }
        if (value == NULL && o->kind != OPT_FLAG) {
            if (i + 1 >= argc) {
                fprintf(stderr, "attn train: %s needs a value (%s)\n", o->name, o->value_name);
                return 2;
            }
            value = argv[++i];
        }
        if (given[k]) {
            fprintf(stderr, "attn train: %s given twice\n", o->name);
            return 2;
        }
        given[k] = 1;
        void *field = (char *)args + o->offset;
        int ok = 1;
        if (o->kind == OPT_FLAG)
            *(int *)field = 1;
        else if (o->kind == OPT_STRING)
            *(const char **)field = value;
        else if (o->kind == OPT_INT)
            ok = parse_int(o->name, value, (int64_t *)field);
        else
            ok = parse_number(o->name, value, (double *)field);
        if (!ok)
            return 2;
    }
    return 0;
}

static int was_given(const int *given, const char *name)
{
    for (size_t k = 0; k < N_OPTIONS; k++)
        if (strcmp(options[k].name, name) == 0)
            return given[k];
    return 0;
}

static train_args default_args(void)
{
    train_args a;
    memset(&a, 0, sizeof a);
    a.arch = "transformer";
    a.src_tokens = "char";
    a.tgt_tokens = "char";
    a.schedule = "inverse-sqrt";
    a.optimizer = "adam";
    a.layers = 3;
    a.d_model = 256;
    a.heads = 4;
    a.ffn = 1024;
    a.dropout = 0.1;
    a.label_smoothing = 0.1;
    a.lr = 1e-3;
    a.warmup = 1000;
    a.clip_norm = 1.0;
    a.batch_tokens = 4096;
    a.accumulate = 1;
    a.epochs = 10;
    a.seed = 1;
    a.log_every = 50;
    return a;
}

/* ---- checks on the command line -------------------------------------------------------------- */

static int one_of(const char *value, const char *const *names, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(value, names[i]) == 0)
            return (int)i;
    return -1;
}

#define ONE_OF(value, ...)                                                                    \
    one_of(value, (const char *const[]){__VA_ARGS__},                                         \
           sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *))

static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "attn train: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, " (see 'attn train --help')\n");
    return 2;
}

static int check_args(const train_args *a, const int *given)
{
    int tsv = a->train != NULL, files = a->train_src != NULL || a->train_tgt != NULL;
    if (!tsv && !files)
        return usage_error("no training data: give --train FILE.tsv or --train-src and "
                           "--train-tgt%s%s", "", "");
    if (tsv && files)
        return usage_error("give --train or --train-src/--train-tgt, not both%s%s", "", "");
    if (files && (a->train_src == NULL || a->train_tgt == NULL))
        return usage_error("--train-src and --train-tgt go together%s%s", "", "");
    if (a->valid != NULL && (a->valid_src != NULL || a->valid_tgt != NULL))
        return usage_error("give --valid or --valid-src/--valid-tgt, not both%s%s", "", "");
    if ((a->valid_src == NULL) != (a->valid_tgt == NULL))
        return usage_error("--valid-src and --valid-tgt go together%s%s", "", "");
    if (a->out == NULL)
        return usage_error("--out MODEL.safetensors is required%s%s", "", "");
    if (ONE_OF(a->arch, "transformer", "rnn") < 0)
        return usage_error("--arch must be transformer or rnn, not '%s'%s", a->arch, "");
    if (a->cell != NULL && ONE_OF(a->cell, "gru", "lstm") < 0)
        return usage_error("--cell must be gru or lstm, not '%s'%s", a->cell, "");
    if (a->attention != NULL && ONE_OF(a->attention, "bahdanau", "luong-dot", "luong-general",
                                       "luong-concat", "none") < 0)
        return usage_error("--attention must be bahdanau, luong-dot, luong-general, "
                           "luong-concat or none, not '%s'%s", a->attention, "");
    if (a->local != NULL && ONE_OF(a->local, "m", "p") < 0)
        return usage_error("--local must be m or p, not '%s'%s", a->local, "");
    if (was_given(given, "--window") && a->window < 1)
        return usage_error("--window must be at least 1 (local attention's half width)%s%s", "",
                           "");
    if (a->bidirectional && a->no_bidirectional)
        return usage_error("give --bidirectional or --no-bidirectional, not both%s%s", "", "");
    if (ONE_OF(a->schedule, "inverse-sqrt", "noam", "cosine", "constant") < 0)
        return usage_error("--schedule must be inverse-sqrt, noam, cosine or constant, not "
                           "'%s'%s", a->schedule, "");
    /* The checkpoint holds a resumed run's schedule; a new one must know where it ends. */
    if (a->resume == NULL && strcmp(a->schedule, "cosine") == 0 && a->max_steps <= 0 &&
        a->epochs <= 0 && !(a->time_limit > 0.0))
        return usage_error("--schedule cosine needs --max-steps, --epochs or --time-limit to "
                           "know where it ends%s%s", "", "");
    if (ONE_OF(a->optimizer, "adam", "adamw") < 0)
        return usage_error("--optimizer must be adam or adamw, not '%s'%s", a->optimizer, "");
    if (a->threads < 0 || a->log_every < 1 || a->seed < 0)
        return usage_error("--threads and --seed must not be negative, --log-every must be "
                           "positive%s%s", "", "");
    if (a->resume != NULL)
        for (size_t k = 0; k < N_OPTIONS; k++)
            if (given[k] && options[k].group == GROUP_MODEL)
                return usage_error("%s cannot be used with --resume: the checkpoint fixes the "
                                   "model and its tokenizers%s", options[k].name, "");
    return 0;
}

/* ---- failures ------------------------------------------------------------------------------ */

static int fail(attn_status status)
{
    fprintf(stderr, "attn train: %s\n", attn_last_error()[0] ? attn_last_error()
                                                             : attn_status_name(status));
    return 1;
}

#define TRY(expr)                                                                             \
    do {                                                                                      \
        attn_status try_status_ = (expr);                                                     \
        if (try_status_ != ATTN_OK) {                                                         \
            exit_code = fail(try_status_);                                                    \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

/* A failure reading the checkpoint to resume from, which the message may not name. */
#define TRY_RESUME(expr)                                                                      \
    do {                                                                                      \
        attn_status try_status_ = (expr);                                                     \
        if (try_status_ != ATTN_OK) {                                                         \
            fprintf(stderr, "attn train: --resume %s: %s\n", a.resume, attn_last_error());   \
            exit_code = 1;                                                                    \
            goto done;                                                                        \
        }                                                                                     \
    } while (0)

/* ---- the model ----------------------------------------------------------------------------- */

/* --config's JSON. The vocabulary sizes come from the tokenizers, which do not exist yet: they
 * stand at 1 until fit_model_to_data. Returns 0 or an exit code. */
static int read_config_file(const char *path, attn_model_config *config)
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
    cJSON_DeleteItemFromObjectCaseSensitive(root, "src_vocab");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "tgt_vocab");
    cJSON_AddNumberToObject(root, "src_vocab", 1.0);
    cJSON_AddNumberToObject(root, "tgt_vocab", 1.0);
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
    if (config->arch != ATTN_ARCH_TRANSFORMER && config->arch != ATTN_ARCH_RNN) {
        fprintf(stderr, "attn train: --config %s: arch must be \"transformer\" or \"rnn\" (an "
                        "encoder-decoder) to train on sentence pairs\n", path);
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
static int describe_rnn(const train_args *a, const int *given, attn_model_config *c)
{
    if (was_given(given, "--layers"))
        c->layers = a->layers;
    if (was_given(given, "--hidden"))
        c->hidden = a->hidden;
    if (was_given(given, "--embedding-dim"))
        c->embedding_dim = a->embedding_dim;
    if (was_given(given, "--attention-dim"))
        c->attention_dim = a->attention_dim;
    if (a->cell != NULL)
        c->cell = strcmp(a->cell, "lstm") == 0 ? ATTN_RNN_LSTM : ATTN_RNN_GRU;
    if (a->attention != NULL)
        c->attention = (attn_rnn_attention)ONE_OF(a->attention, "bahdanau", "luong-dot",
                                                  "luong-general", "luong-concat", "none");
    if (a->local != NULL)
        c->local = strcmp(a->local, "m") == 0 ? ATTN_RNN_LOCAL_M : ATTN_RNN_LOCAL_P;
    if (was_given(given, "--window"))
        c->window = a->window;
    if (a->input_feeding)
        c->input_feeding = 1;
    if (a->reverse_source)
        c->reverse_source = 1;
    /* Bahdanau's encoder reads both ways; luong-dot cannot use such an encoder (below); the
     * other choices keep the config's setting. */
    if (a->bidirectional || a->no_bidirectional)
        c->bidirectional = a->bidirectional;
    else if (c->attention == ATTN_RNN_BAHDANAU && a->attention != NULL)
        c->bidirectional = 1;
    else if (c->attention == ATTN_RNN_LUONG_DOT && a->attention != NULL)
        c->bidirectional = 0;

    const char *attention = attention_names[c->attention];
    if (c->attention == ATTN_RNN_LUONG_DOT && c->bidirectional)
        return usage_error("attention luong-dot scores s_i . h_j, so the annotations h_j must "
                           "be as wide as the decoder, and a bidirectional encoder's are 2 x "
                           "hidden: use --no-bidirectional%s, or luong-general%s",
                           a->bidirectional ? " instead of --bidirectional" : "", "");
    if (c->local != ATTN_RNN_GLOBAL && !is_luong(c->attention))
        return usage_error("--local needs Luong attention (--attention luong-dot, luong-general "
                           "or luong-concat), not %s%s", attention, "");
    if (was_given(given, "--window") && c->local == ATTN_RNN_GLOBAL)
        return usage_error("--window is local attention's half width: give --local m or p "
                           "too%s%s", "", "");
    if (c->input_feeding && !is_luong(c->attention))
        return usage_error("--input-feeding needs Luong attention (--attention luong-dot, "
                           "luong-general or luong-concat), not %s%s", attention, "");
    return 0;
}

/* The model the flags (over --config's, if given) describe, before the data fixes its
 * vocabulary sizes and max_len (fit_model_to_data). Returns 0 or an exit code. */
static int describe_model(const train_args *a, const int *given, attn_model_config *c)
{
    int from_file = a->config != NULL;
    if (from_file) {
        int code = read_config_file(a->config, c);
        if (code != 0)
            return code;
        const char *file_arch = c->arch == ATTN_ARCH_RNN ? "rnn" : "transformer";
        if (was_given(given, "--arch") && strcmp(a->arch, file_arch) != 0)
            return usage_error("--arch %s contradicts --config, whose arch is \"%s\"", a->arch,
                               file_arch);
    } else {
        *c = attn_model_config_default(strcmp(a->arch, "rnn") == 0 ? ATTN_ARCH_RNN
                                                                   : ATTN_ARCH_TRANSFORMER);
        c->src_vocab = c->tgt_vocab = 1;
    }
    const int rnn = c->arch == ATTN_ARCH_RNN;
    static const char *const transformer_only[] = {"--d-model", "--heads", "--ffn"};
    static const char *const rnn_only[] = {
        "--cell",   "--hidden",        "--embedding-dim",    "--attention",
        "--attention-dim", "--local",  "--window",           "--bidirectional",
        "--no-bidirectional", "--input-feeding", "--reverse-source"};
    for (size_t i = 0; rnn && i < sizeof transformer_only / sizeof *transformer_only; i++)
        if (was_given(given, transformer_only[i]))
            return usage_error("%s applies to --arch transformer only (the rnn's sizes are "
                               "--hidden, --embedding-dim and --attention-dim)%s",
                               transformer_only[i], "");
    for (size_t i = 0; !rnn && i < sizeof rnn_only / sizeof *rnn_only; i++)
        if (was_given(given, rnn_only[i]))
            return usage_error("%s applies to --arch rnn only%s", rnn_only[i], "");

    if (!from_file || was_given(given, "--dropout"))
        c->dropout = a->dropout;
    if (!from_file || was_given(given, "--label-smoothing"))
        c->label_smoothing = a->label_smoothing;
    if (rnn) {
        int code = describe_rnn(a, given, c);
        if (code != 0)
            return code;
    } else {
        if (!from_file || was_given(given, "--layers"))
            c->encoder_layers = c->decoder_layers = a->layers;
        if (!from_file || was_given(given, "--d-model"))
            c->d_model = a->d_model;
        if (!from_file || was_given(given, "--heads"))
            c->num_heads = a->heads;
        if (!from_file || was_given(given, "--ffn"))
            c->ffn_dim = a->ffn;
    }
    if (attn_model_config_validate(c) != ATTN_OK) {
        fprintf(stderr, "attn train: the model: %s (see 'attn train --help')\n",
                attn_last_error());
        return 2;
    }
    return 0;
}

/* Longest source and target (with <s> and </s>) in a corpus. */
static void longest(const attn_corpus *corpus, int64_t *source, int64_t *target)
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

/* The vocabulary sizes the tokenizers give, and a max_len that covers every sentence.
 * Returns 0 or an exit code. */
static int fit_model_to_data(const char *config_path, int64_t src_vocab, int64_t tgt_vocab,
                             int64_t longest_source, int64_t longest_target,
                             attn_model_config *c)
{
    c->src_vocab = src_vocab;
    c->tgt_vocab = tgt_vocab;
    /* The decoder reads a target without its last token. */
    int64_t needed = longest_source > longest_target - 1 ? longest_source : longest_target - 1;
    if (needed > c->max_len) {
        if (config_path != NULL) {
            fprintf(stderr, "attn train: --config %s: max_len %lld is below the longest "
                            "sentence (%lld tokens)\n", config_path, (long long)c->max_len,
                    (long long)needed);
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

/* ---- the optimizer and schedule ------------------------------------------------------------- */

static attn_status build_options(const train_args *a, const int *given, int64_t d_model,
                                 int64_t batches_per_epoch, attn_trainer_options *o)
{
    *o = attn_trainer_default_options();
    o->batch_tokens = a->batch_tokens;
    o->accumulate = a->accumulate;
    o->seed = (uint64_t)a->seed;
    o->clip_norm = a->clip_norm;
    int adamw = strcmp(a->optimizer, "adamw") == 0;
    double beta2 = o->adam.beta2, eps = o->adam.eps;
    o->adam = attn_adam_default_options(adamw ? ATTN_ADAMW : ATTN_ADAM);
    o->adam.beta2 = beta2;
    o->adam.eps = eps;
    if (was_given(given, "--weight-decay"))
        o->adam.weight_decay = a->weight_decay;
    attn_lr_schedule *s = &o->schedule;
    memset(s, 0, sizeof *s);
    s->lr = a->lr;
    s->warmup_steps = a->warmup;
    switch (ONE_OF(a->schedule, "inverse-sqrt", "noam", "cosine", "constant")) {
    case 0:
        s->kind = ATTN_LR_INVERSE_SQRT;
        break;
    case 1:
        s->kind = ATTN_LR_NOAM;
        s->factor = was_given(given, "--lr") ? a->lr : 1.0;
        s->d_model = d_model;
        break;
    case 2: {
        s->kind = ATTN_LR_COSINE;
        s->min_lr = a->min_lr;
        int64_t per_epoch = (batches_per_epoch + a->accumulate - 1) / (a->accumulate > 0 ? a->accumulate : 1);
        s->total_steps = a->max_steps > 0 ? a->max_steps : a->epochs * per_epoch;
        if (s->total_steps <= 0) {
            /* No last step to aim at (check_args made sure of the time limit): anneal over
             * the time limit instead, so a run for "an hour on this machine" ends at min_lr
             * however many steps the machine makes. */
            s->total_steps = 0;
            s->total_seconds = a->time_limit;
            fprintf(stderr, "attn train: cosine schedule annealed over the %.15g s time limit\n",
                    a->time_limit);
            break;
        }
        if (s->total_steps <= s->warmup_steps) {
            s->warmup_steps = s->total_steps / 10;
            fprintf(stderr, "attn train: the warm-up is not shorter than the %lld cosine steps; "
                            "using %lld warm-up steps\n", (long long)s->total_steps,
                    (long long)s->warmup_steps);
        }
        break;
    }
    default:
        s->kind = ATTN_LR_CONSTANT;
        break;
    }
    return ATTN_OK;
}

/* The run's own stopping rules and files, which --resume may change. */
static void apply_run_options(const train_args *a, const char *checkpoint,
                              attn_trainer_options *o)
{
    o->max_epochs = a->epochs;
    o->max_steps = a->max_steps;
    o->time_limit = a->time_limit;
    o->eval_every = a->eval_every;
    o->patience = a->patience;
    o->checkpoint_every = a->checkpoint_every;
    o->best_path = a->out;
    o->checkpoint_path = checkpoint;
}

/* On resume the curve-shaping options come from the checkpoint; flags given again override
 * them, and the trainer refuses a change that breaks exact resume, naming it. */
static void overlay_training_flags(const train_args *a, const int *given, attn_trainer_options *o)
{
    if (was_given(given, "--batch-tokens"))
        o->batch_tokens = a->batch_tokens;
    if (was_given(given, "--accumulate"))
        o->accumulate = a->accumulate;
    if (was_given(given, "--seed"))
        o->seed = (uint64_t)a->seed;
    if (was_given(given, "--clip-norm"))
        o->clip_norm = a->clip_norm;
    if (was_given(given, "--weight-decay"))
        o->adam.weight_decay = a->weight_decay;
    if (was_given(given, "--optimizer"))
        o->adam.variant = strcmp(a->optimizer, "adamw") == 0 ? ATTN_ADAMW : ATTN_ADAM;
    if (was_given(given, "--lr")) {
        if (o->schedule.kind == ATTN_LR_NOAM)
            o->schedule.factor = a->lr;
        else
            o->schedule.lr = a->lr;
    }
    if (was_given(given, "--warmup"))
        o->schedule.warmup_steps = a->warmup;
    if (was_given(given, "--min-lr"))
        o->schedule.min_lr = a->min_lr;
    if (was_given(given, "--schedule")) {
        static const attn_lr_kind kinds[] = {ATTN_LR_INVERSE_SQRT, ATTN_LR_NOAM, ATTN_LR_COSINE,
                                             ATTN_LR_CONSTANT};
        o->schedule.kind =
            kinds[ONE_OF(a->schedule, "inverse-sqrt", "noam", "cosine", "constant")];
    }
}

/* ---- stale temporary files -------------------------------------------------------------- */

/* A run killed while writing leaves "<path>.tmp.<pid>" beside its files (never a broken file at
 * the path itself). Remove those whose writer is gone. */
static void remove_stale_temporaries(const char *path)
{
    char folder[4096];
    const char *slash = strrchr(path, '/');
    const char *base = slash != NULL ? slash + 1 : path;
    if (slash == NULL)
        snprintf(folder, sizeof folder, ".");
    else if (slash == path)
        snprintf(folder, sizeof folder, "/");
    else
        snprintf(folder, sizeof folder, "%.*s", (int)(slash - path), path);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s.tmp.", base);
    size_t prefix_len = strlen(prefix);
    DIR *dir = opendir(folder);
    if (dir == NULL)
        return;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (strncmp(entry->d_name, prefix, prefix_len) != 0)
            continue;
        char *end = NULL;
        long pid = strtol(entry->d_name + prefix_len, &end, 10);
        if (end == entry->d_name + prefix_len || *end != '\0' || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char full[8400];
        snprintf(full, sizeof full, "%s/%s", folder, entry->d_name);
        remove(full);
    }
    closedir(dir);
}

/* ---- progress -------------------------------------------------------------------------------- */

typedef struct progress {
    FILE *log;          /* JSON lines, or NULL */
    int terminal;       /* stderr is a terminal: one redrawn line */
    int64_t log_every;
    int bar_drawn;
    double last_drawn; /* elapsed seconds at the last redraw */
    double time_limit;
} progress;

static volatile sig_atomic_t interrupted;

static void on_interrupt(int signal_number)
{
    interrupted = 1;
    signal(signal_number, SIG_DFL); /* a second Ctrl-C ends the program at once */
}

static void format_duration(double seconds, char *out, size_t size)
{
    if (!(seconds >= 0.0) || seconds > 1e8) {
        snprintf(out, size, "?");
        return;
    }
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(out, size, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else
        snprintf(out, size, "%ld:%02ld", s / 60, s % 60);
}

static double eta_seconds(const progress *p, const attn_train_event *e, int64_t first_step)
{
    double eta = -1.0;
    int64_t done = e->step - first_step;
    if (e->planned_steps > 0 && done > 0)
        eta = (double)(e->planned_steps - e->step) * e->elapsed / (double)done;
    if (p->time_limit > 0.0) {
        double left = p->time_limit - e->elapsed;
        if (eta < 0.0 || left < eta)
            eta = left > 0.0 ? left : 0.0;
    }
    return eta;
}

static void write_json_event(FILE *log, const attn_train_event *e)
{
    if (e->kind == ATTN_TRAIN_EVENT_STEP)
        fprintf(log,
                "{\"event\":\"step\",\"step\":%lld,\"epoch\":%lld,\"batch\":%lld,"
                "\"train_loss\":%.17g,\"train_accuracy\":%.17g,\"tokens\":%lld,\"lr\":%.17g,"
                "\"grad_norm\":%.17g,\"skipped\":%s,\"tokens_per_second\":%.1f,"
                "\"elapsed\":%.3f}\n",
                (long long)e->step, (long long)e->epoch, (long long)e->batch_index, e->loss,
                e->accuracy, (long long)e->tokens, e->lr, isfinite(e->grad_norm) ? e->grad_norm
                                                                                 : -1.0,
                e->skipped ? "true" : "false", e->tokens_per_second, e->elapsed);
    else if (e->kind == ATTN_TRAIN_EVENT_EVAL)
        fprintf(log,
                "{\"event\":\"eval\",\"step\":%lld,\"epoch\":%lld,\"valid_loss\":%.17g,"
                "\"valid_accuracy\":%.17g,\"tokens\":%lld,\"improved\":%s,"
                "\"best_valid_loss\":%.17g,"
                "\"elapsed\":%.3f}\n",
                (long long)e->step, (long long)e->epoch, e->loss, e->accuracy,
                (long long)e->tokens, e->improved ? "true" : "false", e->best_valid_loss,
                e->elapsed);
    else
        fprintf(log, "{\"event\":\"done\",\"step\":%lld,\"epoch\":%lld,\"reason\":\"%s\","
                     "\"elapsed\":%.3f}\n",
                (long long)e->step, (long long)e->epoch, e->stop_reason, e->elapsed);
    fflush(log);
}

static int64_t run_first_step = -1;

static int on_event(const attn_train_event *e, void *user)
{
    progress *p = user;
    if (run_first_step < 0)
        run_first_step = e->kind == ATTN_TRAIN_EVENT_STEP ? e->step - 1 : e->step;
    if (p->log != NULL)
        write_json_event(p->log, e);
    char eta[32], elapsed[32];
    /* Epochs as a decimal: completed ones plus the share of the current one. */
    double epoch = (double)e->epoch +
                   (e->epoch_batches > 0 ? (double)e->batch_index / (double)e->epoch_batches : 0);
    format_duration(eta_seconds(p, e, run_first_step), eta, sizeof eta);
    format_duration(e->elapsed, elapsed, sizeof elapsed);
    if (e->kind == ATTN_TRAIN_EVENT_STEP) {
        char planned[32] = "";
        if (e->planned_steps > 0)
            snprintf(planned, sizeof planned, "/%lld", (long long)e->planned_steps);
        if (p->terminal && (e->elapsed - p->last_drawn >= 0.1 || e->step == e->planned_steps ||
                            e->skipped)) {
            p->last_drawn = e->elapsed;
            char bar[21];
            double done = e->planned_steps > 0 ? (double)e->step / (double)e->planned_steps : 0;
            for (int i = 0; i < 20; i++)
                bar[i] = (double)i < done * 20.0 ? '#' : '.';
            bar[20] = '\0';
            fprintf(stderr, "\r\033[Kepoch %.2f step %lld%s [%s] loss %.4f lr %.2e %.0f tok/s "
                            "ETA %s%s",
                    epoch, (long long)e->step, planned, bar, e->loss, e->lr,
                    e->tokens_per_second, eta, e->skipped ? " (skipped: non-finite gradient)"
                                                          : "");
            p->bar_drawn = 1;
        } else if (!p->terminal && (e->step % p->log_every == 0 || e->skipped)) {
            fprintf(stderr, "step %lld%s epoch %.2f loss %.4f acc %.4f lr %.3e grad %.3f tok/s "
                            "%.0f elapsed %s ETA %s%s\n",
                    (long long)e->step, planned, epoch, e->loss, e->accuracy,
                    e->lr, e->grad_norm, e->tokens_per_second, elapsed, eta,
                    e->skipped ? " skipped: non-finite gradient" : "");
        }
    } else if (e->kind == ATTN_TRAIN_EVENT_EVAL) {
        if (p->bar_drawn)
            fprintf(stderr, "\r\033[K");
        p->bar_drawn = 0;
        fprintf(stderr, "step %lld epoch %.2f: valid loss %.4f (perplexity %.2f), token accuracy "
                        "%.2f%%%s\n",
                (long long)e->step, epoch, e->loss, exp(e->loss),
                100.0 * e->accuracy, e->improved ? ", new best: model written" : "");
    } else {
        if (p->bar_drawn)
            fprintf(stderr, "\n");
        p->bar_drawn = 0;
    }
    return interrupted != 0;
}

/* ---- data ------------------------------------------------------------------------------------ */

static attn_status read_corpus(const char *tsv, const char *src, const char *tgt,
                               attn_corpus **out)
{
    if (tsv != NULL)
        return attn_corpus_read_tsv(tsv, out);
    if (src != NULL)
        return attn_corpus_read_files(src, tgt, out);
    *out = NULL;
    return ATTN_OK;
}

/* "M.safetensors" -> "M.last.safetensors"; other names get ".last.safetensors" appended. */
static char *default_checkpoint_path(const char *out)
{
    static const char suffix[] = ".safetensors";
    size_t n = strlen(out), s = sizeof suffix - 1;
    size_t stem = n > s && strcmp(out + n - s, suffix) == 0 ? n - s : n;
    char *path = malloc(stem + sizeof ".last.safetensors");
    if (path != NULL)
        snprintf(path, stem + sizeof ".last.safetensors", "%.*s.last.safetensors", (int)stem, out);
    return path;
}

/* Resuming works at any thread count, but only the checkpoint's reproduces its curve exactly. */
static void warn_if_other_threads(const attn_tensor_file *file)
{
    const char *text = NULL;
    if (attn_tensor_file_metadata(file, ATTN_TRAIN_STATE_KEY, &text) != ATTN_OK)
        return;
    cJSON *state = cJSON_Parse(text);
    const cJSON *threads = cJSON_GetObjectItemCaseSensitive(state, "threads");
    if (cJSON_IsNumber(threads) && threads->valuedouble != (double)attn_get_num_threads())
        fprintf(stderr, "attn train: note: the checkpoint's run used %g threads and this one "
                        "uses %d, so its losses will differ slightly from an uninterrupted run "
                        "(use --threads %g to reproduce it exactly)\n",
                threads->valuedouble, attn_get_num_threads(), threads->valuedouble);
    cJSON_Delete(state);
}

/* A resumed cosine over a time budget goes on from the time the checkpoint's runs trained,
 * while --time-limit counts this run only: say how much of the budget is left to give it. */
static void note_time_budget_left(const attn_trainer *trainer, const attn_lr_schedule *s)
{
    attn_trainer_status status;
    if (s->kind != ATTN_LR_COSINE || !(s->total_seconds > 0.0) ||
        attn_trainer_get_status(trainer, &status) != ATTN_OK)
        return;
    const double left = s->total_seconds - status.train_seconds;
    if (left > 0.0)
        fprintf(stderr, "attn train: cosine schedule annealed over %.15g s of training, %.1f s "
                        "of them before this run: %.1f s left\n",
                s->total_seconds, status.train_seconds, left);
    else
        fprintf(stderr, "attn train: cosine schedule annealed over %.15g s of training, all "
                        "spent before this run (%.1f s): the rate stays at its minimum\n",
                s->total_seconds, status.train_seconds);
}

/* ---- the command -------------------------------------------------------------------------- */

int attn_cmd_train(int argc, char **argv)
{
    train_args a = default_args();
    int given[N_OPTIONS] = {0};
    int parsed = parse_args(argc, argv, &a, given);
    if (parsed != 0)
        return parsed < 0 ? 0 : parsed;
    int usage = check_args(&a, given);
    attn_model_config described;
    if (usage == 0 && a.resume == NULL)
        usage = describe_model(&a, given, &described);
    if (usage != 0)
        return usage;

    int exit_code = 0;
    attn_corpus *train = NULL, *valid = NULL;
    attn_tokenizer *src_tok = NULL, *tgt_tok = NULL;
    attn_tensor_file *resume_file = NULL;
    attn_bundle *resumed = NULL;
    attn_model *model = NULL;
    attn_trainer *trainer = NULL;
    attn_metadata_entry metadata[ATTN_BUNDLE_METADATA_COUNT] = {{NULL, NULL}, {NULL, NULL}};
    char *checkpoint = NULL;
    progress p = {NULL, isatty(fileno(stderr)), a.log_every, 0, -1.0, a.time_limit};
    attn_trainer_options o = attn_trainer_default_options();

    if (a.threads > 0)
        TRY(attn_set_num_threads((int)a.threads));
    TRY(read_corpus(a.train, a.train_src, a.train_tgt, &train));
    TRY(read_corpus(a.valid, a.valid_src, a.valid_tgt, &valid));

    if (a.resume != NULL) {
        /* The model and tokenizers the checkpoint's run used, and its state: one read. */
        TRY(attn_tensor_file_open(a.resume, &resume_file));
        TRY_RESUME(attn_bundle_from_file(resume_file, a.resume, &resumed));
        TRY_RESUME(attn_bundle_release(resumed, &model, &src_tok, &tgt_tok));
        resumed = NULL;
        TRY_RESUME(attn_trainer_options_from_checkpoint(resume_file, &o));
        warn_if_other_threads(resume_file);
        overlay_training_flags(&a, given, &o);
    } else {
        attn_tokenizer_config src_config, tgt_config;
        TRY(attn_tokenizer_config_parse(a.src_tokens, &src_config));
        TRY(attn_tokenizer_config_parse(a.tgt_tokens, &tgt_config));
        TRY(attn_tokenizer_train(&src_config, attn_corpus_sources(train), attn_corpus_size(train),
                                 &src_tok));
        TRY(attn_tokenizer_train(&tgt_config, attn_corpus_targets(train), attn_corpus_size(train),
                                 &tgt_tok));
    }
    TRY(attn_corpus_encode(train, src_tok, tgt_tok));
    if (valid != NULL)
        TRY(attn_corpus_encode(valid, src_tok, tgt_tok));

    int64_t longest_source = 0, longest_target = 0;
    longest(train, &longest_source, &longest_target);
    longest(valid, &longest_source, &longest_target);
    if (model == NULL) {
        exit_code = fit_model_to_data(a.config, attn_vocab_size(attn_tokenizer_vocab(src_tok)),
                                      attn_vocab_size(attn_tokenizer_vocab(tgt_tok)),
                                      longest_source, longest_target, &described);
        if (exit_code != 0)
            goto done;
        TRY(attn_model_create(&described, &model));
        TRY(attn_model_init(model, (uint64_t)a.seed));
        attn_batcher *counting = NULL;
        attn_batcher_config in_order = {a.batch_tokens, 0, 0};
        TRY(attn_batcher_create(train, &in_order, &counting));
        int64_t batches = attn_batcher_num_batches(counting);
        attn_batcher_destroy(counting);
        /* The Noam schedule scales by the model's width: the rnn's is its hidden size. */
        int64_t width = described.arch == ATTN_ARCH_RNN ? described.hidden : described.d_model;
        TRY(build_options(&a, given, width, batches, &o));
    } else {
        const attn_model_config *config = attn_model_get_config(model);
        int64_t needed = longest_source > longest_target - 1 ? longest_source : longest_target - 1;
        if (needed > config->max_len) {
            fprintf(stderr, "attn train: a sentence has %lld tokens, above the checkpoint "
                            "model's max_len %lld\n", (long long)needed,
                    (long long)config->max_len);
            exit_code = 1;
            goto done;
        }
    }

    checkpoint = a.checkpoint != NULL ? NULL : default_checkpoint_path(a.out);
    if (a.checkpoint == NULL && checkpoint == NULL) {
        fprintf(stderr, "attn train: out of memory\n");
        exit_code = 1;
        goto done;
    }
    apply_run_options(&a, a.checkpoint != NULL ? a.checkpoint : checkpoint, &o);
    TRY(attn_bundle_metadata(src_tok, tgt_tok, metadata));
    o.metadata = metadata;
    o.n_metadata = ATTN_BUNDLE_METADATA_COUNT;
    o.callback = on_event;
    o.callback_user = &p;
    attn_trainable trainable;
    TRY(attn_trainable_from_model(model, &trainable));
    TRY(attn_trainer_create(&trainable, train, valid, &o, &trainer));
    if (a.resume != NULL) {
        TRY(attn_trainer_resume_from_file(trainer, resume_file, a.resume));
        attn_tensor_file_close(resume_file);
        resume_file = NULL;
        note_time_budget_left(trainer, &o.schedule);
    }
    remove_stale_temporaries(a.out);
    remove_stale_temporaries(o.checkpoint_path);
    if (a.log != NULL) {
        p.log = fopen(a.log, a.resume != NULL ? "a" : "w");
        if (p.log == NULL) {
            fprintf(stderr, "attn train: --log %s: %s\n", a.log, strerror(errno));
            exit_code = 1;
            goto done;
        }
    }

    attn_trainer_status status;
    TRY(attn_trainer_get_status(trainer, &status));
    char validation[48] = "";
    if (valid != NULL)
        snprintf(validation, sizeof validation, ", validation %lld",
                 (long long)attn_corpus_size(valid));
    fprintf(stderr, "attn train: %lld training pairs%s; vocabularies %lld + %lld; %lld "
                    "parameters; %d threads, %s; %s step %lld\n",
            (long long)attn_corpus_size(train), validation,
            (long long)attn_vocab_size(attn_tokenizer_vocab(src_tok)),
            (long long)attn_vocab_size(attn_tokenizer_vocab(tgt_tok)),
            (long long)attn_params_numel(attn_model_params(model)), attn_get_num_threads(),
            attn_isa_name(attn_get_isa()), a.resume != NULL ? "resuming at" : "starting at",
            (long long)status.step);
    signal(SIGINT, on_interrupt);
    signal(SIGTERM, on_interrupt);
    TRY(attn_trainer_run(trainer));
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    TRY(attn_trainer_get_status(trainer, &status));
    fprintf(stderr, "attn train: stopped at step %lld, %lld epochs complete", (long long)status.step,
            (long long)status.epoch);
    if (isfinite(status.best_valid_loss))
        fprintf(stderr, "; best valid loss %.4f at step %lld", status.best_valid_loss,
                (long long)status.best_step);
    fprintf(stderr, "\n  model: %s\n  checkpoint: %s\n", a.out, o.checkpoint_path);

done:
    if (p.log != NULL)
        fclose(p.log);
    attn_trainer_destroy(trainer);
    attn_model_destroy(model);
    attn_tensor_file_close(resume_file);
    attn_bundle_destroy(resumed);
    attn_tokenizer_destroy(src_tok);
    attn_tokenizer_destroy(tgt_tok);
    attn_corpus_destroy(train);
    attn_corpus_destroy(valid);
    attn_bundle_metadata_free(metadata);
    free(checkpoint);
    return exit_code;
}
