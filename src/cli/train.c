/* attn train: read a parallel corpus, learn tokenizers, build a model, run the training loop
 * with a progress display, a plain or JSON-lines log, checkpoints and resume. The options, the
 * model description and the progress display live in train_*.c (see train.h). */
#include "attn/attn.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/precision.h"
#include "cli/train.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the processes of an mpirun ----------------------------------------------------------- */

/* Under mpirun every rank runs this command; rank 0 speaks, logs and writes the files. The
 * others keep quiet (their stderr goes to /dev/null) except for their own failures. */
typedef struct train_ranks {
    int started; /* MPI was started (this is one rank of an mpirun) */
    int rank, size;
    int stderr_fd; /* the real stderr of a quiet rank; -1 on rank 0 */
} train_ranks;

static train_ranks ranks = {0, 0, 1, -1};

static int join_the_ranks(void)
{
    if (!attn_distributed_launched())
        return 0;
    if (!attn_distributed_built()) {
        fprintf(stderr, "attn train: started by mpirun, but this attn was built without MPI: "
                        "each process would train alone and write the same files. Install "
                        "Debian's libopenmpi-dev and build again, or run one process\n");
        return 2;
    }
    if (attn_distributed_start(&ranks.rank, &ranks.size) != ATTN_OK) {
        cli_library_error("train");
        return 1;
    }
    ranks.started = 1;
    if (ranks.rank != 0) {
        fflush(stderr);
        ranks.stderr_fd = dup(STDERR_FILENO);
        int quiet = open("/dev/null", O_WRONLY);
        if (ranks.stderr_fd >= 0 && quiet >= 0)
            dup2(quiet, STDERR_FILENO);
        if (quiet >= 0)
            close(quiet);
    }
    return 0;
}

static int speaks(void)
{
    return ranks.rank == 0;
}

/* ---- failures ------------------------------------------------------------------------------ */

static int fail(attn_status status)
{
    char command[32] = "train";
    if (ranks.stderr_fd >= 0) {
        fflush(stderr);
        dup2(ranks.stderr_fd, STDERR_FILENO);
        snprintf(command, sizeof command, "train (rank %d)", ranks.rank);
    }
    attn_last_error()[0] ? cli_library_error(command)
                         : cli_library_error_in(command, "%s", attn_status_name(status));
    return 1;
}

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        attn_status try_status_ = (expr);                                                          \
        if (try_status_ != ATTN_OK) {                                                              \
            exit_code = fail(try_status_);                                                         \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* A failure reading the checkpoint to resume from, which the message may not name. */
#define TRY_RESUME(expr)                                                                           \
    do {                                                                                           \
        attn_status try_status_ = (expr);                                                          \
        if (try_status_ != ATTN_OK) {                                                              \
            cli_library_error_in("train", "--resume %s", a.resume);                                \
            exit_code = 1;                                                                         \
            goto done;                                                                             \
        }                                                                                          \
    } while (0)

/* ---- data ------------------------------------------------------------------------------------ */

static attn_status read_corpus(const char *tsv, const char *src, const char *tgt, attn_corpus **out)
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
        fprintf(stderr,
                "attn train: note: the checkpoint's run used %g threads and this one "
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
        fprintf(stderr,
                "attn train: cosine schedule annealed over %.15g s of training, %.1f s "
                "of them before this run: %.1f s left\n",
                s->total_seconds, status.train_seconds, left);
    else
        fprintf(stderr,
                "attn train: cosine schedule annealed over %.15g s of training, all "
                "spent before this run (%.1f s): the rate stays at its minimum\n",
                s->total_seconds, status.train_seconds);
}

attn_status train_side_tokenizer(const char *spec, const char *spm_path,
                                 const char *const *lines, int64_t n, attn_tokenizer **out)
{
    if (spm_path != NULL)
        return attn_tokenizer_load_spm(spm_path, out);
    attn_tokenizer_config config;
    const attn_status status = attn_tokenizer_config_parse(spec, &config);
    return status != ATTN_OK ? status : attn_tokenizer_train(&config, lines, n, out);
}

attn_status train_hold_out_validation(const train_args *a, uint64_t seed, const char *what,
                                      attn_corpus *train, attn_corpus **valid)
{
    if (*valid != NULL || a->no_valid)
        return ATTN_OK;
    const int64_t pairs = attn_corpus_size(train);
    if (pairs < TRAIN_HOLD_OUT_MIN_PAIRS) {
        fprintf(stderr,
                "attn train: no validation set, and %lld training %s are too few to hold "
                "some out (%d or more): training on all of them and keeping the last weights\n",
                (long long)pairs, what, TRAIN_HOLD_OUT_MIN_PAIRS);
        return ATTN_OK;
    }
    int64_t count = (int64_t)ceil(TRAIN_HOLD_OUT_SHARE * (double)pairs);
    if (count > TRAIN_HOLD_OUT_MAX)
        count = TRAIN_HOLD_OUT_MAX;
    fprintf(stderr,
            "attn train: no validation set given: holding out %lld of the %lld training %s "
            "(%g%%, at most %d, chosen by --seed) for validation and keep-best; --valid FILE "
            "gives one, --no-valid trains on all of them\n",
            (long long)count, (long long)pairs, what, 100.0 * TRAIN_HOLD_OUT_SHARE,
            TRAIN_HOLD_OUT_MAX);
    return attn_corpus_hold_out(train, count, seed, valid);
}

int train_drop_long_lines(const train_args *a, attn_corpus *train, attn_corpus *valid)
{
    if (a->max_len <= 0)
        return 0;
    int64_t dropped_train = 0, dropped_valid = 0;
    if (attn_corpus_drop_longer(train, a->max_len, a->max_len, &dropped_train) != ATTN_OK ||
        (valid != NULL &&
         attn_corpus_drop_longer(valid, a->max_len, a->max_len, &dropped_valid) != ATTN_OK)) {
        cli_library_error("train");
        return 1;
    }
    if (dropped_train + dropped_valid > 0)
        fprintf(stderr,
                "attn train: skipped %lld training and %lld validation lines longer than "
                "--max-len %lld tokens\n",
                (long long)dropped_train, (long long)dropped_valid, (long long)a->max_len);
    if (attn_corpus_size(train) == 0 || (valid != NULL && attn_corpus_size(valid) == 0)) {
        fprintf(stderr,
                "attn train: every %s line is longer than --max-len %lld tokens; raise it (0: no "
                "limit)\n",
                attn_corpus_size(train) == 0 ? "training" : "validation", (long long)a->max_len);
        return 1;
    }
    return 0;
}

static int64_t corpus_tokens(const attn_corpus *corpus)
{
    int64_t total = 0;
    for (int64_t i = 0; i < attn_corpus_size(corpus); i++) {
        const int32_t *ids;
        int64_t source, target;
        attn_corpus_source_ids(corpus, i, &ids, &source);
        attn_corpus_target_ids(corpus, i, &ids, &target);
        total += source + target;
    }
    return total;
}

/* A very large target vocabulary makes the output projection most of each step (d x V per
 * target token) and spreads the training signal thin over rare words; subwords fix both. */
static void note_large_vocabulary(const train_args *a, const attn_tokenizer *target)
{
    const int64_t size = attn_vocab_size(attn_tokenizer_vocab(target));
    if (a->resume == NULL && size > 50000)
        fprintf(stderr,
                "attn train: note: the target vocabulary has %lld entries, so the output "
                "projection takes most of each update; --tgt-tokens bpe:8000 (or bpe:16000) "
                "keeps it small and still spells every word\n",
                (long long)size);
}

/* What the defaults chose, before the time is spent. */
static void say_plan(const attn_trainer_options *o, double time_limit)
{
    static const char *const kinds[] = {"constant", "noam", "inverse-sqrt", "cosine"};
    const attn_lr_schedule *s = &o->schedule;
    fprintf(stderr, "attn train: plan: %s schedule", kinds[s->kind]);
    if (s->kind == ATTN_LR_COSINE && s->total_steps > 0)
        fprintf(stderr, " over %lld updates, warm-up %lld", (long long)s->total_steps,
                (long long)s->warmup_steps);
    else if (s->kind == ATTN_LR_COSINE && s->warmup_share > 0.0)
        fprintf(stderr, " over the %.15g s time limit, warm-up %lld updates or %.15g s",
                s->total_seconds, (long long)s->warmup_steps, s->warmup_share * s->total_seconds);
    else if (s->kind == ATTN_LR_COSINE)
        fprintf(stderr, " over the %.15g s time limit, warm-up %lld updates", s->total_seconds,
                (long long)s->warmup_steps);
    else if (s->kind != ATTN_LR_CONSTANT)
        fprintf(stderr, ", warm-up %lld", (long long)s->warmup_steps);
    if (s->kind == ATTN_LR_NOAM)
        fprintf(stderr, ", factor %g (width %lld)", s->factor, (long long)s->d_model);
    else
        fprintf(stderr, ", peak rate %g", s->lr);
    if (s->kind == ATTN_LR_COSINE)
        fprintf(stderr, " down to %g", s->min_lr);
    if (o->context > 0)
        fprintf(stderr, "; batches of %lld windows of %lld tokens", (long long)o->batch_sequences,
                (long long)o->context);
    else
        fprintf(stderr, "; batches of %lld tokens", (long long)o->batch_tokens);
    if (o->accumulate > 1)
        fprintf(stderr, " x %lld", (long long)o->accumulate);
    if (o->ema > 0.0)
        fprintf(stderr, "; validates and saves the weights' moving average (ema %g)", o->ema);
    if (o->max_epochs > 0)
        fprintf(stderr, "; stops after %lld epochs", (long long)o->max_epochs);
    if (o->max_steps > 0)
        fprintf(stderr, "%s %lld updates", o->max_epochs > 0 ? " or" : "; stops at",
                (long long)o->max_steps);
    if (time_limit > 0.0)
        fprintf(stderr, "%s %.15g s",
                o->max_epochs > 0 || o->max_steps > 0 ? " or after" : "; stops after", time_limit);
    char precision[128];
    fprintf(stderr, "; precision %s\n",
            cli_precision_describe(o->precision, precision, sizeof precision));
    cli_precision_warn_emulated("train", attn_precision_resolve(o->precision));
}

/* ---- the command -------------------------------------------------------------------------- */

/* --spm-alpha: every side whose tokenizer can sample does (a sampled target only without
 * teachers, whose distributions follow the best segmentation of the targets); said once.
 * Returns 0, or the usage exit code after a message when no side can. */
static int choose_samplers(const attn_tokenizer *source, const attn_tokenizer *target,
                           attn_trainer_options *o)
{
    o->sample_source = attn_tokenizer_can_sample(source) ? source : NULL;
    o->sample_target =
        o->teacher_weight == 0.0 && attn_tokenizer_can_sample(target) ? target : NULL;
    if (o->sample_source == NULL && o->sample_target == NULL) {
        const char *source_kind =
            source != NULL ? attn_tokenizer_kind_name(attn_tokenizer_get_kind(source)) : "none";
        const char *target_kind =
            target != NULL ? attn_tokenizer_kind_name(attn_tokenizer_get_kind(target)) : "none";
        fprintf(stderr,
                "attn train: --spm-alpha samples segmentations of a SentencePiece unigram or BPE "
                "model, and this run's tokenizers are %s (source) and %s (target)%s\n",
                source_kind, target_kind,
                target != NULL && attn_tokenizer_can_sample(target)
                    ? "; the target's is not sampled with --teacher"
                    : "");
        return CLI_EXIT_USAGE;
    }
    if (speaks())
        fprintf(stderr,
                "attn train: subword regularisation: each epoch samples the %s segmentations "
                "anew (alpha %g, nbest %lld); validation reads the best ones\n",
                o->sample_source != NULL && o->sample_target != NULL ? "source and target"
                : o->sample_source != NULL                           ? "source"
                                                                     : "target",
                o->spm_alpha, (long long)o->spm_nbest);
    return 0;
}

int attn_cmd_train(int argc, char **argv)
{
    train_args a;
    const int parsed = train_args_parse(argc, argv, &a);
    if (parsed != CLI_GO_ON)
        return parsed;
    const int joined = join_the_ranks();
    if (joined != 0)
        return joined;
    a.ranks = ranks.size;
    attn_model_config described;
    if (a.resume == NULL) {
        const int usage = train_describe_model(&a, &described);
        if (usage != 0)
            return usage;
    }

    int exit_code = 0;
    attn_corpus *train = NULL, *valid = NULL;
    attn_tokenizer *src_tok = NULL, *tgt_tok = NULL;
    attn_tokenizer *text_tok = NULL; /* a classifier's or masked LM's, when it samples */
    attn_tensor_file *resume_file = NULL;
    attn_bundle *resumed = NULL;
    attn_model *model = NULL;
    attn_trainer *trainer = NULL;
    attn_teacher_targets *teacher = NULL;
    cli_translator teachers = {0};
    attn_metadata_entry metadata[ATTN_BUNDLE_METADATA_COUNT] = {{NULL, NULL}, {NULL, NULL}};
    char *checkpoint = NULL;
    attn_tensor_file_lock *locks[2] = {NULL, NULL};
    train_progress p;
    train_progress_init(&p, a.log_every, a.time_limit);
    int run_ended = 0; /* every rank got to the end of the run together */
    attn_trainer_options o = attn_trainer_default_options();
    train_lm_data lm = {0};
    train_classify_data labelled = {0};
    train_mlm_data texts = {0};

    checkpoint = a.checkpoint != NULL ? NULL : default_checkpoint_path(a.out);
    if (a.checkpoint == NULL && checkpoint == NULL) {
        fprintf(stderr, "attn train: out of memory\n");
        return 1;
    }
    if (speaks()) {
        exit_code =
            train_guard_outputs(&a, a.checkpoint != NULL ? a.checkpoint : checkpoint, locks);
        if (exit_code != 0)
            goto done;
    }
    if (a.threads > 0)
        TRY(attn_set_num_threads((int)a.threads));
    if (a.task == TRAIN_TASK_LM) {
        if (a.resume != NULL)
            TRY(attn_tensor_file_open(a.resume, &resume_file));
        exit_code = train_lm_prepare(&a, resume_file, &lm, &model, &o);
        if (exit_code != 0)
            goto done;
        p.language_model = 1;
        p.train_chars_per_token = lm.train_chars_per_token;
        p.valid_chars_per_token = lm.valid_chars_per_token;
    } else if (a.task == TRAIN_TASK_CLASSIFY) {
        if (a.resume != NULL) {
            TRY(attn_tensor_file_open(a.resume, &resume_file));
            warn_if_other_threads(resume_file);
        }
        exit_code = train_classify_prepare(&a, a.resume != NULL ? NULL : &described, resume_file,
                                           &labelled, &model, &o);
        if (exit_code != 0)
            goto done;
        p.classifier = 1;
    } else if (a.task == TRAIN_TASK_MLM) {
        if (a.resume != NULL) {
            TRY(attn_tensor_file_open(a.resume, &resume_file));
            warn_if_other_threads(resume_file);
        }
        exit_code = train_mlm_prepare(&a, a.resume != NULL ? NULL : &described, resume_file,
                                      &texts, &model, &o);
        if (exit_code != 0)
            goto done;
        p.language_model = 1;
        p.masked_lm = 1;
    } else {
        TRY(read_corpus(a.train, a.train_src, a.train_tgt, &train));
        TRY(read_corpus(a.valid, a.valid_src, a.valid_tgt, &valid));
        if (a.teacher != NULL &&
            (exit_code = cli_translator_load(&teachers, "train", a.teacher)) != 0)
            goto done;

        if (a.resume != NULL) {
            /* The model and tokenizers the checkpoint's run used, and its state: one read. */
            TRY(attn_tensor_file_open(a.resume, &resume_file));
            TRY_RESUME(attn_bundle_from_file(resume_file, a.resume, &resumed));
            TRY_RESUME(attn_bundle_release(resumed, &model, &src_tok, &tgt_tok));
            resumed = NULL;
            TRY_RESUME(attn_trainer_options_from_checkpoint(resume_file, &o));
            warn_if_other_threads(resume_file);
            train_options_overlay(&a, &o);
            TRY(train_hold_out_validation(&a, o.seed, "pairs", train, &valid));
        } else {
            TRY(train_hold_out_validation(&a, (uint64_t)a.seed, "pairs", train, &valid));
            if (a.teacher != NULL) {
                exit_code = train_adopt_teacher_tokenizers(&a, &teachers, &src_tok, &tgt_tok);
                if (exit_code != 0)
                    goto done;
            } else {
                TRY(train_side_tokenizer(a.src_tokens, a.src_spm, attn_corpus_sources(train),
                                         attn_corpus_size(train), &src_tok));
                TRY(train_side_tokenizer(a.tgt_tokens, a.tgt_spm, attn_corpus_targets(train),
                                         attn_corpus_size(train), &tgt_tok));
            }
        }
        TRY(attn_corpus_encode(train, src_tok, tgt_tok));
        if (valid != NULL)
            TRY(attn_corpus_encode(valid, src_tok, tgt_tok));
        note_large_vocabulary(&a, tgt_tok);

        if (a.max_len > 0) {
            int64_t dropped_train = 0, dropped_valid = 0;
            TRY(attn_corpus_drop_longer(train, a.max_len, a.max_len, &dropped_train));
            if (valid != NULL)
                TRY(attn_corpus_drop_longer(valid, a.max_len, a.max_len, &dropped_valid));
            if (dropped_train + dropped_valid > 0)
                fprintf(stderr,
                        "attn train: skipped %lld training and %lld validation pairs longer than "
                        "--max-len %lld tokens\n",
                        (long long)dropped_train, (long long)dropped_valid, (long long)a.max_len);
            if (attn_corpus_size(train) == 0 || (valid != NULL && attn_corpus_size(valid) == 0)) {
                fprintf(stderr,
                        "attn train: every %s pair is longer than --max-len %lld tokens; "
                        "raise it (0: no limit)\n",
                        attn_corpus_size(train) == 0 ? "training" : "validation",
                        (long long)a.max_len);
                exit_code = 1;
                goto done;
            }
        }
        int64_t longest_source = 0, longest_target = 0;
        train_longest(train, &longest_source, &longest_target);
        train_longest(valid, &longest_source, &longest_target);
        if (model == NULL) {
            exit_code =
                train_fit_model_to_data(a.config, attn_vocab_size(attn_tokenizer_vocab(src_tok)),
                                        attn_vocab_size(attn_tokenizer_vocab(tgt_tok)),
                                        longest_source, longest_target, &described);
            if (exit_code != 0)
                goto done;
            TRY(attn_model_create(&described, &model));
            TRY(attn_model_init(model, (uint64_t)a.seed));
            const int64_t batch_tokens = train_args_given(&a, "--batch-tokens")
                                             ? a.batch_tokens
                                             : train_default_batch_tokens(corpus_tokens(train));
            int64_t batches = 0;
            TRY(train_count_batches(&a, train, batch_tokens, src_tok,
                                    a.teacher != NULL ? NULL : tgt_tok, &batches));
            /* The Noam schedule scales by the model's width: the rnn's is its hidden size. */
            int64_t width = described.arch == ATTN_ARCH_RNN ? described.hidden : described.d_model;
            TRY(train_options_for_new_run(&a, width, batch_tokens, batches, &o));
        } else {
            const attn_model_config *config = attn_model_get_config(model);
            int64_t needed =
                longest_source > longest_target - 1 ? longest_source : longest_target - 1;
            if (needed > config->max_len) {
                fprintf(stderr,
                        "attn train: a sentence has %lld tokens, above the checkpoint "
                        "model's max_len %lld\n",
                        (long long)needed, (long long)config->max_len);
                exit_code = 1;
                goto done;
            }
        }
    }

    train_options_for_this_run(&a, a.checkpoint != NULL ? a.checkpoint : checkpoint, &o);
    if (a.task == TRAIN_TASK_LM) {
        /* A language model keeps the one tokenizer it reads and writes with (none for token
         * files alone). */
        metadata[0] = (attn_metadata_entry){ATTN_TGT_TOKENIZER_KEY, lm.tokenizer_json};
        o.metadata = metadata;
        o.n_metadata = lm.tokenizer_json != NULL ? 1 : 0;
    } else if (a.task == TRAIN_TASK_CLASSIFY) {
        /* A classifier reads text with its source tokenizer and names its classes. */
        metadata[0] = (attn_metadata_entry){ATTN_SRC_TOKENIZER_KEY, labelled.tokenizer_json};
        metadata[1] = (attn_metadata_entry){ATTN_LABELS_KEY, labelled.labels_json};
        o.metadata = metadata;
        o.n_metadata = 2;
    } else if (a.task == TRAIN_TASK_MLM) {
        /* A masked language model reads and predicts text with its source tokenizer, the one
         * a classifier started from it takes. */
        metadata[0] = (attn_metadata_entry){ATTN_SRC_TOKENIZER_KEY, texts.tokenizer_json};
        o.metadata = metadata;
        o.n_metadata = 1;
    } else {
        TRY(attn_bundle_metadata(src_tok, tgt_tok, metadata));
        o.metadata = metadata;
        o.n_metadata = ATTN_BUNDLE_METADATA_COUNT;
    }
    if (o.spm_alpha > 0.0) {
        const char *text_json = a.task == TRAIN_TASK_CLASSIFY ? labelled.tokenizer_json
                                : a.task == TRAIN_TASK_MLM    ? texts.tokenizer_json
                                                              : NULL;
        if (text_json != NULL)
            TRY(attn_tokenizer_from_json(text_json, &text_tok));
        exit_code = text_tok != NULL ? choose_samplers(text_tok, NULL, &o)
                                     : choose_samplers(src_tok, tgt_tok, &o);
        if (exit_code != 0)
            goto done;
    }
    o.callback = speaks() ? train_progress_on_event : NULL;
    o.callback_user = speaks() ? &p : NULL;
    o.distributed = ranks.started;
    if (a.teacher != NULL || o.teacher_weight > 0.0) {
        exit_code = train_teach(&a, &o, a.teacher != NULL ? &teachers : NULL, train, src_tok,
                                tgt_tok, &teacher);
        if (exit_code != 0)
            goto done;
        o.teacher = teacher;
        cli_translator_free(&teachers); /* their part is done: free their memory for training */
    }
    attn_trainable trainable;
    TRY(attn_trainable_from_model(model, &trainable));
    if (a.task == TRAIN_TASK_LM)
        TRY(attn_trainer_create_lm(&trainable, lm.train, lm.valid, &o, &trainer));
    else if (a.task == TRAIN_TASK_CLASSIFY)
        TRY(attn_trainer_create(&trainable, labelled.train, labelled.valid, &o, &trainer));
    else if (a.task == TRAIN_TASK_MLM)
        TRY(attn_trainer_create(&trainable, texts.train, texts.valid, &o, &trainer));
    else
        TRY(attn_trainer_create(&trainable, train, valid, &o, &trainer));
    if (a.resume != NULL) {
        TRY(attn_trainer_resume_from_file(trainer, resume_file, a.resume));
        attn_tensor_file_close(resume_file);
        resume_file = NULL;
        note_time_budget_left(trainer, &o.schedule);
    }
    /* Leftovers of a killed run; a folder that cannot be cleaned fails the first write, with
     * a message, so a failure here needs none of its own. */
    if (speaks()) {
        (void)attn_tensor_file_remove_stale_temporaries(a.out, NULL);
        (void)attn_tensor_file_remove_stale_temporaries(o.checkpoint_path, NULL);
    }
    if (a.log != NULL && speaks()) {
        p.log = fopen(a.log, a.resume != NULL ? "a" : "w");
        if (p.log == NULL) {
            fprintf(stderr, "attn train: --log %s: %s\n", a.log, strerror(errno));
            exit_code = 1;
            goto done;
        }
    }

    attn_trainer_status status;
    TRY(attn_trainer_get_status(trainer, &status));
    char validation[48] = "", data[160];
    if (lm.valid != NULL || valid != NULL || labelled.valid != NULL || texts.valid != NULL)
        snprintf(validation, sizeof validation, ", validation %lld",
                 (long long)(lm.valid != NULL         ? attn_token_stream_size(lm.valid)
                             : labelled.valid != NULL ? attn_corpus_size(labelled.valid)
                             : texts.valid != NULL    ? attn_corpus_size(texts.valid)
                                                      : attn_corpus_size(valid)));
    if (a.task == TRAIN_TASK_CLASSIFY)
        snprintf(data, sizeof data, "%lld training lines%s; vocabulary %lld; %lld classes",
                 (long long)attn_corpus_size(labelled.train), validation,
                 (long long)attn_model_get_config(model)->src_vocab,
                 (long long)attn_model_get_config(model)->num_classes);
    else if (a.task == TRAIN_TASK_MLM)
        snprintf(data, sizeof data,
                 "%lld training lines%s; vocabulary %lld; %g%% of the tokens chosen for the "
                 "masked-token loss",
                 (long long)attn_corpus_size(texts.train), validation,
                 (long long)attn_model_get_config(model)->src_vocab, 100.0 * ATTN_MLM_CHOSEN_SHARE);
    else if (a.task == TRAIN_TASK_LM)
        snprintf(data, sizeof data, "%lld training tokens%s; vocabulary %lld",
                 (long long)attn_token_stream_size(lm.train), validation,
                 (long long)attn_model_get_config(model)->tgt_vocab);
    else
        snprintf(data, sizeof data, "%lld training pairs%s; vocabularies %lld + %lld",
                 (long long)attn_corpus_size(train), validation,
                 (long long)attn_vocab_size(attn_tokenizer_vocab(src_tok)),
                 (long long)attn_vocab_size(attn_tokenizer_vocab(tgt_tok)));
    const int threads = attn_get_num_threads();
    fprintf(stderr, "attn train: %s; %lld parameters; %d thread%s%s, %s; %s step %lld\n", data,
            (long long)attn_params_numel(attn_model_params(model)), threads,
            threads == 1 ? "" : "s", ranks.size > 1 ? " in each of the processes" : "",
            attn_isa_name(attn_get_isa()), a.resume != NULL ? "resuming at" : "starting at",
            (long long)status.step);
    if (ranks.size > 1)
        fprintf(stderr,
                "attn train: %d processes (mpirun): each update is %lld batches, %lld per "
                "process; rank 0 validates and writes the files\n",
                ranks.size, (long long)o.accumulate,
                (long long)(o.accumulate + ranks.size - 1) / ranks.size);
    say_plan(&o, a.time_limit);
    train_progress_catch_interrupts(speaks());
    /* Under mpirun, Ctrl-C and SIGTERM go to mpirun, which ends every rank: a rank that
     * dropped its update alone would leave the others waiting in the all-reduce. */
    if (ranks.size == 1)
        attn_trainer_set_cancel_flag(trainer, train_progress_interrupt_flag());
    TRY(attn_trainer_run(trainer));
    run_ended = 1;
    train_progress_catch_interrupts(0);
    if (!speaks())
        goto done;
    TRY(attn_trainer_get_status(trainer, &status));
    fprintf(stderr, "attn train: stopped at step %lld, %lld epochs complete",
            (long long)status.step, (long long)status.epoch);
    if (isfinite(status.best_valid_loss))
        fprintf(stderr, "; best valid loss %.4f at step %lld", status.best_valid_loss,
                (long long)status.best_step);
    fprintf(stderr, "\n");
    /* Say what is on disk, not what was meant to be: a run stopped before its first
     * validation, or whose every validation loss was NaN, keeps no model. */
    struct stat written;
    if (stat(a.out, &written) == 0) {
        fprintf(stderr, "  model: %s\n", a.out);
    } else {
        fprintf(stderr, "  model: not written (%s); the last weights are in the checkpoint\n",
                train_progress_interrupted_by() != 0
                    ? "interrupted before any validation kept weights"
                    : "no validation loss was finite, so none was kept");
        exit_code = 1;
    }
    fprintf(stderr, "  checkpoint: %s\n", o.checkpoint_path);
    const int signal_number = train_progress_interrupted_by();
    if (signal_number != 0) {
        /* Scripts must tell an interrupted run from a finished one. */
        fprintf(stderr, "attn train: stopped by %s; resume with --resume %s (exit %d)\n",
                signal_number == SIGINT ? "Ctrl-C (SIGINT)" : "SIGTERM", o.checkpoint_path,
                128 + signal_number);
        exit_code = 128 + signal_number;
    }

done:
    if (ranks.started) {
        /* A rank that fails alone would leave the others waiting for it: end them all. */
        if (exit_code != 0 && !run_ended && ranks.size > 1)
            attn_distributed_abort(exit_code);
        attn_distributed_finish();
    }
    if (p.log != NULL)
        fclose(p.log);
    attn_trainer_destroy(trainer);
    attn_tokenizer_destroy(text_tok);
    attn_teacher_targets_destroy(teacher);
    cli_translator_free(&teachers);
    attn_model_destroy(model);
    attn_tensor_file_close(resume_file);
    attn_bundle_destroy(resumed);
    attn_tokenizer_destroy(src_tok);
    attn_tokenizer_destroy(tgt_tok);
    attn_corpus_destroy(train);
    attn_corpus_destroy(valid);
    if (a.task == TRAIN_TASK_TRANSLATE)
        attn_bundle_metadata_free(metadata);
    train_lm_data_free(&lm);
    train_classify_data_free(&labelled);
    train_mlm_data_free(&texts);
    attn_tensor_file_unlock(locks[0]);
    attn_tensor_file_unlock(locks[1]);
    free(checkpoint);
    return exit_code;
}
