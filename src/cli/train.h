/* The parts of `attn train` (train.c is the command itself): its options (train_args.c), the
 * model the flags or --config describe (train_model.c), the --teacher models' distributions
 * (train_teachers.c), and the progress display and JSON log (train_progress.c). */
#ifndef ATTN_CLI_TRAIN_H
#define ATTN_CLI_TRAIN_H

#include "attn/attn.h"
#include "cli/options.h"
#include "cli/translator.h"

#include <stdio.h>

/* ---- options (train_args.c) --------------------------------------------------------------- */

/* Which options --resume allows: the model and its tokenizers come from the checkpoint. */
typedef enum train_group { GROUP_DATA, GROUP_MODEL, GROUP_TRAINING, GROUP_RUN } train_group;

enum { TRAIN_MAX_OPTIONS = 80 };

/* What the run learns (--task): one switch over one loop; each task has its own reader of
 * the data and its own model (train_lm.c, train_classify.c), and shares the rest. */
typedef enum train_task {
    TRAIN_TASK_TRANSLATE = 0,
    TRAIN_TASK_LM = 1,
    TRAIN_TASK_CLASSIFY = 2,
    TRAIN_TASK_MLM = 3
} train_task;

typedef struct train_args {
    const char *train, *valid, *train_src, *train_tgt, *valid_src, *valid_tgt, *out;
    const char *src_tokens, *tgt_tokens, *config, *checkpoint, *resume, *log;
    int task;                                /* train_task */
    const char *train_tokens, *valid_tokens; /* --task lm: llm.c token files */
    const char *init;   /* --task lm: the model to start from; classify: the pretrained encoder */
    int freeze_encoder; /* --task classify --init: only the new head learns */
    const char *tokenizer;                   /* --task lm: a new model's tokenizer file */
    const char *src_spm, *tgt_spm;           /* SentencePiece .model files to use unchanged */
    int64_t context, batch_sequences;        /* --task lm: window length, windows per batch */
    int shuffle_none;                        /* --shuffle none */
    double beta1, beta2, eps;                /* Adam's, when given */
    int arch;                                /* attn_model_arch */
    int cell, attention, local;              /* attn_rnn_cell, _attention, _local when given */
    int schedule;                            /* attn_lr_kind */
    int optimizer;                           /* attn_adam_variant */
    int precision;                           /* attn_precision: auto, fp32 or bf16 */
    int norm, ffn_kind, positions, no_bias;  /* --task lm, classify: block options, when given */
    int pooling;                             /* --task classify: attn_pooling */
    int64_t window, layers, d_model, heads, ffn, hidden, embedding_dim, attention_dim;
    int bidirectional, no_bidirectional, input_feeding, reverse_source, no_valid;
    double dropout, label_smoothing;
    double lr, min_lr, weight_decay, clip_norm, time_limit;
    double ema;            /* the smoothing rate of the weights' moving average (0: off) */
    const char *teacher;   /* comma-separated model files to distil from (NULL: none) */
    double teacher_weight; /* the teachers' share of the training loss */
    /* Subword regularisation: SentencePiece's sampling parameter (0: off) and how many of the
     * best segmentations it samples from (-1: all) */
    double spm_alpha;
    int64_t spm_nbest;
    int64_t warmup, batch_tokens, accumulate, epochs, max_steps, seed, threads;
    int64_t eval_every, patience, checkpoint_every, log_every, max_skipped, check_every;
    int64_t max_len; /* longest pair kept, in tokens of either side (0: no limit) */
    /* Processes of the run (mpirun -np N; 1 alone): an update is accumulate x ranks batches. */
    int64_t ranks;
    int given[TRAIN_MAX_OPTIONS]; /* by the option's place in the table */
} train_args;

/* Parses and checks the command line. Returns CLI_GO_ON, or the exit code (0 after --help). */
int train_args_parse(int argc, char **argv, train_args *a);

/* Whether the option (its name, "--window") was on the command line. */
int train_args_given(const train_args *a, const char *name);

/* "attn train: MESSAGE (see 'attn train --help')"; returns the usage exit code. */
int train_usage_error(const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* The default cosine's warm-up: this share of the planned updates (of the time limit under
 * the clock), at most TRAIN_WARMUP_CAP updates. A share, because a fixed 1000 updates left a
 * 150 s run on a small task below its peak rate when the clock stopped; capped, because a long
 * run needs no longer warm-up than the recipes' tuned 1000. */
#define TRAIN_WARMUP_SHARE 0.05
enum { TRAIN_WARMUP_CAP = 1000 };

/* Without --valid, TRAIN_HOLD_OUT_SHARE of the training pairs, at most TRAIN_HOLD_OUT_MAX, are
 * held out for validation, when the corpus has at least TRAIN_HOLD_OUT_MIN_PAIRS. */
#define TRAIN_HOLD_OUT_SHARE 0.05
enum { TRAIN_HOLD_OUT_MAX = 1000, TRAIN_HOLD_OUT_MIN_PAIRS = 1000 };

/* The default --batch-tokens for a corpus of this many source + target tokens: about 100
 * batches an epoch (a few thousand short pairs want many small updates), rounded down to a
 * multiple of 256 and kept within [512, 4096] (4096: the size large corpora were tuned at). */
int64_t train_default_batch_tokens(int64_t training_tokens);

/* The trainer's options for a new run: the flags, and the schedule attn_lr_schedule_plan
 * derives for a model of this width over epochs of this many batches of batch_tokens (with a
 * note on stderr when the plan adjusts what was asked). */
attn_status train_options_for_new_run(const train_args *a, int64_t width, int64_t batch_tokens,
                                      int64_t batches_per_epoch, attn_trainer_options *o);

/* train_options_for_new_run for a corpus whose batches are cut by tokens (pairs, labelled
 * lines, texts): --batch-tokens, or about 100 batches an epoch by the corpus's source and target
 * tokens (a label is one token of the budget). */
/* The batches of batch_tokens in an epoch of train: with --spm-alpha, of segmentations sampled
 * by the sides' tokenizers that can (either may be NULL), as training will cut them. */
attn_status train_count_batches(const train_args *a, const attn_corpus *train, int64_t batch_tokens,
                                const attn_tokenizer *source, const attn_tokenizer *target,
                                int64_t *batches);
attn_status train_options_for_corpus(const train_args *a, const attn_corpus *train, int64_t width,
                                     const char *tokenizer_json, attn_trainer_options *o);

/* --beta1, --beta2 and --eps over o->adam, those given. */
void train_adam_flags(const train_args *a, attn_trainer_options *o);
/* On --resume the curve-shaping options come from the checkpoint; flags given again override
 * them, and the trainer refuses a change that breaks exact resume, naming it. */
void train_options_overlay(const train_args *a, attn_trainer_options *o);

/* The run's own stopping rules and files, which --resume may change. */
void train_options_for_this_run(const train_args *a, const char *checkpoint,
                                attn_trainer_options *o);

/* Without --valid (and without --no-valid), a share of the training pairs (a classifier's
 * lines) becomes the validation set, drawn from the seed so that --resume holds out the same
 * ones; says which case holds. what: "pairs" or "lines", for the messages. */
attn_status train_hold_out_validation(const train_args *a, uint64_t seed, const char *what,
                                      attn_corpus *train, attn_corpus **valid);

/* One side's tokenizer: the SentencePiece model at spm_path as it is (--src-spm, --tgt-spm),
 * or else one spec (--src-tokens, --tgt-tokens) learns from the n lines. */
attn_status train_side_tokenizer(const char *spec, const char *spm_path,
                                 const char *const *lines, int64_t n, attn_tokenizer **out);

/* A classifier's or masked language model's lines (texts of valid, NULL: none) within
 * --max-len tokens (0: no limit), saying how many were skipped. Returns 0 or an exit code
 * after a message (every line too long is an error). */
int train_drop_long_lines(const train_args *a, attn_corpus *train, attn_corpus *valid);

/* ---- the outputs (train_outputs.c) ---------------------------------------------------------- */

/* Refuses outputs (--out, the checkpoint, --log) that name an input or each other (exit 2),
 * checks that the model and checkpoint can be written now and locks both against a second run
 * (exit 1), each with a message. On 0, locks[0] and locks[1] hold the locks. */
int train_guard_outputs(const train_args *a, const char *checkpoint, attn_tensor_file_lock **locks);

/* ---- the model (train_model.c) -------------------------------------------------------------- */

/* The model the flags (over --config's, if given) describe, before the data fixes its
 * vocabulary sizes and max_len (train_fit_model_to_data). Returns 0 or an exit code after a
 * message. */
int train_describe_model(const train_args *a, attn_model_config *c);

/* Longest source and target (with <s> and </s>) in a corpus (NULL: none), over the values
 * already in *source and *target. */
void train_longest(const attn_corpus *corpus, int64_t *source, int64_t *target);

/* The vocabulary sizes the tokenizers give, and a max_len that covers every sentence.
 * Returns 0 or an exit code after a message. */
int train_fit_model_to_data(const char *config_path, int64_t src_vocab, int64_t tgt_vocab,
                            int64_t longest_source, int64_t longest_target, attn_model_config *c);

/* The block options given on the command line (--norm, --ffn-kind, --positions, --no-bias) over
 * c's, as the size flags override --config's. */
void train_apply_block_options(const train_args *a, attn_model_config *c);

/* The encoder-only model (classifier or masked language model) the flags describe, with the
 * block options, the data's vocabulary (and classes: ignored by the masked language model) and
 * a max_len that covers the longest text (and the classification token). Returns 0 or an exit
 * code after a message. */
int train_fit_encoder_to_data(const train_args *a, const attn_model_config *described,
                              int64_t vocabulary, int64_t classes, int64_t longest,
                              attn_model_config *c);

/* ---- a language model's run (train_lm.c) --------------------------------------------------- */

typedef struct train_lm_data {
    attn_token_stream *train, *valid; /* valid NULL: none */
    char *tokenizer_json; /* the tokenizer's JSON for the files (NULL: token files alone) */
    int64_t vocabulary;   /* the tokenizer's vocabulary (0: none) */
    /* UTF-8 characters (each line's end counted as one) per token of the texts; 0 for token
     * files, whose characters are unknown. */
    double train_chars_per_token, valid_chars_per_token;
} train_lm_data;

/* For --task lm: the model (new, from --init, or from the checkpoint resume_file when not
 * NULL), its tokenizer's JSON, the token streams, and the trainer's options (a new run's
 * schedule and windows, or the checkpoint's with the flags given over them). Returns 0 or an
 * exit code after a message. */
int train_lm_prepare(const train_args *a, attn_tensor_file *resume_file, train_lm_data *d,
                     attn_model **model, attn_trainer_options *o);
void train_lm_data_free(train_lm_data *d);

/* ---- a classifier's run (train_classify.c) ------------------------------------------------- */

typedef struct train_classify_data {
    attn_corpus *train, *valid;         /* encoded labelled lines; valid NULL: none */
    char *tokenizer_json, *labels_json; /* for the files */
} train_classify_data;

/* For --task classify: the labelled lines (label<TAB>text), the text tokenizer and the classes
 * (learned, or the checkpoint's when resume_file is not NULL), the model (new, as described
 * by train_describe_model and sized to the data, or the checkpoint's) and the trainer's
 * options; reports the lines per class. Returns 0 or an exit
 * code after a message. */
int train_classify_prepare(const train_args *a, const attn_model_config *described,
                           attn_tensor_file *resume_file, train_classify_data *d,
                           attn_model **model, attn_trainer_options *o);
void train_classify_data_free(train_classify_data *d);

/* ---- a masked language model's run (train_mlm.c) ------------------------------------------- */

typedef struct train_mlm_data {
    attn_corpus *train, *valid; /* encoded texts, one a line; valid NULL: none */
    char *tokenizer_json;       /* for the files */
} train_mlm_data;

/* For --task mlm: the texts (one a line, as a classifier reads them), the tokenizer (learned
 * by --src-tokens, or the checkpoint's when resume_file is not NULL), the model (new, as
 * described by train_describe_model and sized to the data, or the checkpoint's) and the
 * trainer's options. Returns 0 or an exit code after a message. */
int train_mlm_prepare(const train_args *a, const attn_model_config *described,
                      attn_tensor_file *resume_file, train_mlm_data *d, attn_model **model,
                      attn_trainer_options *o);
void train_mlm_data_free(train_mlm_data *d);

/* ---- teachers (train_teachers.c) ------------------------------------------------------------ */

/* A new run with --teacher reads and writes with its teachers' tokenizers (copies in *source
 * and *target), not ones learned from its data: the teachers' distributions are over their
 * vocabulary, and the data may hold more than the teachers saw (words they pronounce). A
 * --src-tokens or --tgt-tokens of another kind is refused. Returns 0, or an exit code after
 * a message. */
int train_adopt_teacher_tokenizers(const train_args *a, const cli_translator *teachers,
                                   attn_tokenizer **source, attn_tokenizer **target);

/* The distributions of the teachers (NULL: no --teacher) over the encoded training corpus, in
 * batches of o->batch_tokens, after checking that they tokenize as source and target and
 * warning of tokens they lack; on --resume, that teachers are given exactly when the
 * checkpoint's run had them (o->teacher_weight > 0). Returns 0, or an exit code after a
 * message. */
int train_teach(const train_args *a, const attn_trainer_options *o, const cli_translator *teachers,
                const attn_corpus *train, const attn_tokenizer *source,
                const attn_tokenizer *target, attn_teacher_targets **out);

/* ---- progress (train_progress.c) ------------------------------------------------------------ */

typedef struct train_progress {
    FILE *log;    /* JSON lines, or NULL */
    int terminal; /* stderr is a terminal: one redrawn line */
    int64_t log_every;
    int bar_drawn;
    double last_drawn; /* elapsed seconds at the last redraw */
    double time_limit;
    int64_t first_step; /* the step this run started after, or -1 before the first event */
    /* A language model's run: its losses are also shown as perplexity and, when the text's
     * characters per token are known (> 0; not for token files), bits per character. */
    int language_model;
    double train_chars_per_token, valid_chars_per_token;
    /* A classifier's run: accuracy (of lines, not tokens) is the figure to watch. */
    int classifier;
    /* A masked language model's run (with language_model): the loss, perplexity, accuracy
     * and rate are of the masked tokens alone. */
    int masked_lm;
} train_progress;

void train_progress_init(train_progress *p, int64_t log_every, double time_limit);

/* The trainer's callback (user: the train_progress): draws the bar or prints a line, appends
 * to the JSON log, and asks the trainer to stop after Ctrl-C or SIGTERM. */
int train_progress_on_event(const attn_train_event *e, void *user);

/* While on, the first Ctrl-C or SIGTERM stops the run within one operation of the model,
 * dropping the unfinished update (a second one ends the program at once). */
void train_progress_catch_interrupts(int on);

/* The signal (SIGINT, SIGTERM) that stopped the run, or 0. */
int train_progress_interrupted_by(void);
/* Set by the first Ctrl-C or SIGTERM: the trainer's cancel flag, so a long update or
 * validation stops within one operation rather than at its end. */
const volatile sig_atomic_t *train_progress_interrupt_flag(void);

#endif
