/* attn training loop: batches in, updates out, with validation, keep-best, early stopping,
 * a time limit, checkpoints and exact resume (layer 5).
 *
 * The loop does not know which architecture it trains. It drives a model through
 * attn_trainable: the model's parameter store (values, gradients and Adam moments in four
 * buffers of one layout), a loss on a batch, and the model's config JSON for the files it
 * writes. attn_trainable_from_model adapts attn_model's Transformers and RNN encoder-decoders;
 * another model plugs in by filling the same three functions.
 *
 * One step: for each of `accumulate` batches, reset the graph, set the dropout seed from
 * (seed, micro-batch number), forward, and backward with d(loss) = the batch's share of the
 * update's target tokens, each batch's gradient from zero and then added to the sum of those
 * before it (so the loss is the mean over every target token of the update, and the sums are
 * the ones an all-reduce over processes makes: see "Data parallelism" below); take the global
 * norm (and clip it), set the rate from the
 * schedule (attn_lr_at_time for Adam's next step after the training time so far, below), and
 * make one Adam/AdamW update of the whole buffer. A non-finite gradient norm
 * skips the update (reported in the event); max_skipped_updates skipped in a row end the run
 * with ATTN_ERR_DIVERGED and write no file, so the last checkpoint and model stay the last
 * good ones. After the first step nothing is allocated per step:
 * the graph's arena and the batcher's buffers are reused, and grow only for a batch larger than
 * any before.
 *
 * Files. Both are safetensors files written atomically (a temporary file renamed over the
 * path), so a run killed at any moment leaves either the previous file or the new one:
 *  - the model file (best_path): the parameter values under their PyTorch names and, in the
 *    metadata, the model config (ATTN_MODEL_CONFIG_KEY), the caller's entries (the tokenizers
 *    under ATTN_SRC_TOKENIZER_KEY and ATTN_TGT_TOKENIZER_KEY) and a short summary
 *    (ATTN_TRAIN_SUMMARY_KEY). It holds the parameters of the best validation loss seen, or
 *    the last ones when there is no validation corpus. attn_model_load reads it.
 *    With options.ema the model file holds the smoothed weights instead (see ema below).
 *  - the checkpoint (checkpoint_path): the same, plus Adam's moments under
 *    ATTN_CHECKPOINT_ADAM_M_PREFIX / ATTN_CHECKPOINT_ADAM_V_PREFIX + name (PyTorch's names for
 *    them), the smoothed weights under ATTN_CHECKPOINT_EMA_PREFIX + name with options.ema,
 *    and the training state (ATTN_TRAIN_STATE_KEY): step, Adam's step count, the batch
 *    position (epoch, batch index), best validation loss, early-stopping count, the training
 *    time, a fingerprint of the training data and every option that shapes the loss curve.
 *    It is written after each evaluation, every checkpoint_every steps, and when the run
 *    stops.
 *
 * Training time: the seconds of the runs before the checkpoint (stored in its state) plus
 * those since this run's attn_trainer_run started, by the clock the time limit reads. Only a
 * cosine annealed over schedule.total_seconds uses it: its rates follow that time, so a
 * resumed run continues the schedule from the stored seconds, and the budget covers every
 * run together (a time limit stays per run: give a resumed run the time left).
 *
 * Exact resume: the state above is everything a step depends on (dropout masks come from
 * (seed, micro-batch number), batches from (seed, epoch)), so a run resumed from a checkpoint
 * reproduces the uninterrupted run's losses bit for bit at the same thread count and
 * instruction set. Stopping rules (epochs, max_steps, time limit, patience, how often to
 * evaluate) may change on resume; options that shape the curve may not. This holds for the
 * schedules of the step; a cosine annealed over total_seconds takes its rates from the clock,
 * so no two of its runs, resumed or not, are the same to the bit.
 */
#ifndef ATTN_TRAINER_H
#define ATTN_TRAINER_H

#include "attn/attn_autodiff.h"
#include "attn/attn_data.h"
#include "attn/attn_models.h"
#include "attn/attn_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- metadata keys ------------------------------------------------------------------- */

#define ATTN_SRC_TOKENIZER_KEY "attn_src_tokenizer"
#define ATTN_TGT_TOKENIZER_KEY "attn_tgt_tokenizer"
/* A classifier's class names (attn_labels_to_json), beside its source tokenizer. */
#define ATTN_LABELS_KEY "attn_labels"
#define ATTN_TRAIN_STATE_KEY "attn_train_state"
#define ATTN_TRAIN_SUMMARY_KEY "attn_train_summary"
#define ATTN_CHECKPOINT_ADAM_M_PREFIX "optimizer.exp_avg."
#define ATTN_CHECKPOINT_ADAM_V_PREFIX "optimizer.exp_avg_sq."
#define ATTN_CHECKPOINT_EMA_PREFIX "ema."

/* ---- what the loop trains ------------------------------------------------------------- */

typedef struct attn_trainable {
    void *self;
    /* The parameter store (finalised). */
    attn_params *(*params)(void *self);
    /* The mean cross-entropy over the batch's predicted tokens as a scalar variable on graph
     * (a graph of params(self); the caller sets training and recording). smoothed != 0: the
     * model's training loss (with its label smoothing); 0: plain cross-entropy (validation).
     * *tokens gets the number of predicted tokens and *correct how many of them have the
     * target as the arg-max of the logits. */
    attn_status (*forward_loss)(void *self, attn_graph *graph, const attn_model_batch *batch,
                                int smoothed, attn_var **loss, int64_t *tokens, int64_t *correct);
    /* The model config as JSON (malloc'ed), stored under ATTN_MODEL_CONFIG_KEY. */
    attn_status (*config_json)(void *self, char **json);
} attn_trainable;

/* The Transformer encoder-decoder, the language model, the classifier (trained on a
 * labelled corpus, whose batches carry labels: attn_corpus_read_labelled) and the RNN
 * encoder-decoder (arch "rnn"). The model must outlive the trainable. */
ATTN_API attn_status attn_trainable_from_model(attn_model *model, attn_trainable *out);

/* A batcher's batch as a model reads it (views of the same arrays, the labels of a labelled
 * corpus included; no teacher). */
ATTN_API attn_model_batch attn_model_batch_of(const attn_batch *batch);

/* ---- distillation ------------------------------------------------------------------------ */

/* Teachers' distributions over the target vocabulary at every target position of a training
 * corpus, for token-level knowledge distillation (Hinton et al. 2015; Kim and Rush 2016's
 * word level, Sun et al. 2019 for G2P): each teacher reads pair i's source and its gold target
 * prefix (teacher forcing, no dropout, fp32), and the mean of the teachers' softmaxes is kept
 * for every position the student predicts. Computed once before training, so the student's
 * steps cost what they cost without teachers; memory: 4 bytes x vocabulary x target tokens
 * (+ </s> per pair). */
typedef struct attn_teacher_targets attn_teacher_targets;

/* Runs count >= 1 teachers (encoder-decoders of fp32 weights with the same target vocabulary,
 * whose tokenizers encoded corpus: attn_bundle_check_tokenizers) over the encoded corpus in
 * batches of batch_tokens padded tokens. The corpus must not change afterwards (the pairs are
 * found by index). */
ATTN_API attn_status attn_teacher_targets_compute(attn_model *const *teachers, int64_t count,
                                                  const attn_corpus *corpus, int64_t batch_tokens,
                                                  attn_teacher_targets **out);
ATTN_API void attn_teacher_targets_destroy(attn_teacher_targets *targets);
/* The target vocabulary (the distributions' width), the pairs and the positions held. */
ATTN_API int64_t attn_teacher_targets_vocab(const attn_teacher_targets *targets);
ATTN_API int64_t attn_teacher_targets_pairs(const attn_teacher_targets *targets);
ATTN_API int64_t attn_teacher_targets_positions(const attn_teacher_targets *targets);
/* The distributions of a batch of that corpus in the logits' layout, out [size, target_len - 1,
 * vocab]: row (b, t) for t < target_lengths[b] - 1, zeros past each target's end. A batch of
 * another corpus (a pair out of range, or of another length) is ATTN_ERR_INVALID_ARGUMENT. */
ATTN_API attn_status attn_teacher_targets_gather(const attn_teacher_targets *targets,
                                                 const attn_batch *batch, float *out);

/* ---- options ----------------------------------------------------------------------------- */

typedef enum attn_train_event_kind {
    ATTN_TRAIN_EVENT_STEP = 0, /* an update was made (or skipped) */
    ATTN_TRAIN_EVENT_EVAL = 1, /* the validation corpus was scored */
    ATTN_TRAIN_EVENT_DONE = 2  /* the run stopped; stop_reason says why */
} attn_train_event_kind;

typedef struct attn_train_event {
    attn_train_event_kind kind;
    int64_t step;             /* updates made so far (the one just made included) */
    int64_t epoch;            /* epochs completed */
    int64_t batch_index;      /* next batch of the current epoch */
    int64_t epoch_batches;    /* batches in the current epoch */
    int64_t planned_steps;    /* the step the run will stop at, by epochs and max_steps (0: no
                                 bound) */
    double loss;              /* STEP: training loss per target token of the update's batches;
                                 EVAL: validation cross-entropy per token */
    double accuracy;          /* STEP: token accuracy of the update's batches; EVAL: validation */
    int64_t tokens;           /* target tokens scored */
    double lr;                /* STEP: the rate used */
    double grad_norm;         /* STEP: global norm before clipping */
    int skipped;              /* STEP: non-finite gradient norm, no update */
    int improved;             /* EVAL: a new best validation loss (the model file was written) */
    double best_valid_loss;   /* INFINITY before the first evaluation */
    double elapsed;           /* seconds since attn_trainer_run started */
    double tokens_per_second; /* training target tokens per second in this run */
    const char *stop_reason;  /* DONE: "epochs", "max_steps", "time_limit", "early_stopping",
                                 "stopped" (the callback asked), "cancelled" (the cancel flag,
                                 attn_trainer_set_cancel_flag) */
} attn_train_event;

/* Called after each event; return nonzero to stop the run (a checkpoint is still written).
 * The event and its strings are valid during the call only. */
typedef int (*attn_train_callback)(const attn_train_event *event, void *user);

typedef struct attn_trainer_options {
    /* ---- shape the loss curve: stored in the checkpoint, fixed on resume ---- */
    int64_t batch_tokens; /* padded source + target tokens per batch (attn_batcher) */
    /* A language model's batches (attn_trainer_create_lm): windows of context + 1 tokens per
     * batch and the tokens the model reads per window (attn_batcher_create_windows); batch_tokens
     * is not used then. */
    int64_t batch_sequences, context;
    int shuffle;        /* shuffle batches each epoch (from seed and epoch) */
    uint64_t seed;      /* batches and dropout masks */
    int64_t accumulate; /* batches per update (>= 1), over all ranks together */
    /* The optimizer; lr is replaced by the schedule's rate at each step. With weight decay
     * and no_decay NULL, every 1-dimensional parameter (biases, layer-norm gains) is exempt
     * from decay, as is usual for Transformers; ranges the caller gives must outlive the
     * trainer. */
    attn_adam_options adam;
    attn_lr_schedule schedule;
    double clip_norm; /* clip the global gradient norm to this (0: no clipping) */
    /* The first frozen_floats floats of the parameter buffer (the parameters registered
     * first, up to a parameter's offset: a classifier's encoder, before its head) keep their
     * values: they are neither updated nor counted in the gradient's norm, and their Adam
     * moments stay zero. 0: every parameter learns. With it, no_decay must be NULL (the
     * trainer chooses the exempt ranges of the parameters that learn). */
    int64_t frozen_floats;
    /* Operands of the model's products (attn_graph_set_precision on the trainer's graph, for
     * training and validation): fp32, or bf16 for mixed precision (bf16 operands, fp32 sums;
     * weights, gradients and Adam's moments stay fp32, as do softmax, layer norm and the
     * loss). int8 is refused: it is a precision for decoding. auto (attn train's default)
     * is resolved by attn_trainer_create with attn_precision_resolve; the trainer keeps, the
     * checkpoint stores and a resume compares the precision it resolved to. */
    attn_precision precision;
    /* Exponential smoothing of the weights (Marian's --exponential-smoothing), the rate in
     * [0, 1); 0: off. On, the trainer keeps a smoothed copy S of the parameters, S = W when
     * the run starts at step 0, and after every applied update (not a skipped one)
     * attn_ema_update moves S towards the new weights W. Validation (keep-best,
     * attn_trainer_evaluate) scores S and the model file holds S; the checkpoint holds W, the
     * moments and S (under ATTN_CHECKPOINT_EMA_PREFIX + name). Costs one more copy of the
     * parameters, and one pass over them per update. */
    double ema;
    /* Token-level distillation: with teacher (NULL: none), each training batch's loss mixes in
     * the teachers' distributions with teacher_weight in (0, 1] (attn_op_cross_entropy_with_
     * teacher); validation stays the plain cross-entropy against the gold targets. teacher
     * must be computed on this trainer's training corpus and outlive the trainer. The
     * checkpoint stores the weight, not the distributions: a resumed run is given the teachers
     * again. */
    const attn_teacher_targets *teacher;
    double teacher_weight;
    /* Subword regularisation (Kudo 2018; BPE-dropout for SentencePiece's BPE): with spm_alpha
     * in (0, 1] (0: off), every epoch trains on segmentations of the training text sampled
     * anew by the tokenizers sample_source and sample_target (SentencePiece ones; NULL keeps
     * that side's best segmentation), each from a seed of (seed, epoch, pair, side): see
     * attn_batcher_config. Validation reads the best segmentations. spm_alpha and spm_nbest
     * (-1: every segmentation, the default; 2..ATTN_SPM_MAX_NBEST: the best N) are stored in
     * the checkpoint; the tokenizers are not (they travel as metadata): give them again on
     * resume. Not for a language model's token stream, nor with teacher and a sampled target
     * (the teachers' distributions follow the best segmentation of the targets). */
    double spm_alpha;
    int64_t spm_nbest;
    const attn_tokenizer *sample_source, *sample_target;
    /* ---- stopping rules, evaluation and files: may change on resume ---- */
    int64_t max_epochs;          /* stop after this many epochs (0: no limit) */
    int64_t max_steps;           /* stop at this step (0: no limit) */
    double time_limit;           /* stop after this many seconds of this run (0: none) */
    int64_t eval_every;          /* evaluate every N steps (0: at the end of each epoch) */
    int64_t patience;            /* stop after N evaluations without a new best (0: never) */
    int64_t checkpoint_every;    /* also write the checkpoint every N steps (0: no) */
    int64_t max_skipped_updates; /* give up after N non-finite updates in a row (0: never) */
    const char *best_path;       /* model file (NULL: none) */
    const char *checkpoint_path; /* checkpoint (NULL: none) */
    /* Extra metadata for both files (the tokenizers' JSON); keys must not be the ones the
     * trainer writes (config, state, summary). Copied by attn_trainer_create. */
    const attn_metadata_entry *metadata;
    size_t n_metadata;
    attn_train_callback callback; /* may be NULL */
    void *callback_user;
    /* ---- several processes (see "Data parallelism" below): may change on resume ---- */
    /* Nonzero: this process is one rank of a data-parallel run over MPI_COMM_WORLD (MPI is
     * initialised by attn_trainer_create if the program has not). 0 (the default): one
     * process, no MPI call. */
    int distributed;
    /* With several ranks, compare a checksum of the parameters every N updates and stop the
     * run with ATTN_ERR_INTERNAL when the ranks disagree (0: never; default 100). */
    int64_t check_every;
} attn_trainer_options;

/* batch_tokens 4096, shuffle on, seed 1, accumulate 1; Adam with betas (0.9, 0.98), eps 1e-9
 * and no weight decay ("Attention Is All You Need"); the inverse square root schedule to a peak
 * of 1e-3 after 1000 warm-up steps; clipping at 1.0; 10 epochs, no step or time limit,
 * evaluation each epoch, no early stopping, 20 skipped updates in a row end the run, no files,
 * no callback. */
ATTN_API attn_trainer_options attn_trainer_default_options(void);

/* ---- the trainer ---------------------------------------------------------------------- */

typedef struct attn_trainer attn_trainer;

/* A trainer over an encoded training corpus (and an optional encoded validation corpus,
 * NULL for none). The model and corpora must outlive the trainer. The parameters are used
 * as they are (initialise them first); the Adam moments are zeroed. */
/* A labelled corpus (attn_corpus_encode_labelled) trains a classifier: the loss is the mean
 * cross-entropy over its lines, accuracy the share of lines whose arg-max is the label. */
ATTN_API attn_status attn_trainer_create(const attn_trainable *model, const attn_corpus *train,
                                         const attn_corpus *valid,
                                         const attn_trainer_options *options, attn_trainer **out);
/* A trainer of a language model (arch transformer_lm) on the windows of a token stream
 * (attn_batcher_create_windows with options.batch_sequences, options.context, seed and
 * shuffle; validation windows in order), and an optional validation stream (NULL: none). The
 * loss, updates, validation, files and resume are as attn_trainer_create's; a checkpoint
 * recognises its stream by the token count and a hash of the tokens. No teachers. Token ids
 * must be below the model's vocabulary (attn_token_stream_max_id). */
ATTN_API attn_status attn_trainer_create_lm(const attn_trainable *model,
                                            const attn_token_stream *train,
                                            const attn_token_stream *valid,
                                            const attn_trainer_options *options,
                                            attn_trainer **out);
/* NULL is ignored. */
ATTN_API void attn_trainer_destroy(attn_trainer *trainer);

/* Restores the parameters, the moments, the smoothed weights and the state from a checkpoint,
 * so that run continues where it stopped. Fails, naming what differs, when the checkpoint's
 * model config, training data fingerprint or any curve-shaping option differ from this
 * trainer's (ATTN_ERR_INVALID_ARGUMENT; a checkpoint written without ema holds no smoothed
 * weights, so a trainer with ema refuses it rather than start the average over), or when the
 * file is not a checkpoint (ATTN_ERR_FORMAT). Every check runs before anything changes, except
 * that a tensor missing or malformed in the file is found while reading, and then the
 * parameters may be partly overwritten. */
ATTN_API attn_status attn_trainer_resume(attn_trainer *trainer, const char *checkpoint_path);
/* The same from a checkpoint already open (read once with the model and tokenizers it holds:
 * attn_bundle_from_file); name is how messages call the file (NULL: "the file"). */
ATTN_API attn_status attn_trainer_resume_from_file(attn_trainer *trainer,
                                                   const attn_tensor_file *file, const char *name);

/* Trains until a stopping rule holds: max_epochs epochs completed, max_steps reached, the
 * time limit passed, patience evaluations without improvement, or the callback asked. Then
 * writes the checkpoint (and the model file when there is no validation corpus). A run whose
 * rules already hold stops at once. */
ATTN_API attn_status attn_trainer_run(attn_trainer *trainer);

/* A stop that cannot wait for the end of an update (a signal handler sets *flag). While it is
 * non-zero, attn_trainer_run stops within one operation of the model: an update in progress
 * is dropped whole (the weights, optimizer state and batch position stay those of the last
 * finished update, so a resumed run makes that update first and matches an uninterrupted
 * one), an evaluation in progress is abandoned, then the checkpoint (and the model file when
 * there is no validation corpus) is written and the run returns ATTN_OK with the stop reason
 * "cancelled". NULL removes it. */
ATTN_API void attn_trainer_set_cancel_flag(attn_trainer *trainer,
                                           const volatile sig_atomic_t *flag);

/* Scores the validation corpus: plain cross-entropy per target token and token accuracy,
 * with dropout off, of the smoothed weights with options.ema (the training weights are left
 * as they were, to the bit). Fails without a validation corpus. */
ATTN_API attn_status attn_trainer_evaluate(attn_trainer *trainer, double *loss, double *accuracy);

/* Writes the checkpoint now (the run does this by itself). */
ATTN_API attn_status attn_trainer_save_checkpoint(attn_trainer *trainer, const char *path);

/* Where the run stands. */
typedef struct attn_trainer_status {
    int64_t step;           /* updates made (skipped ones included) */
    int64_t adam_step;      /* updates Adam made (its bias-correction count) */
    int64_t epoch;          /* epoch of the next batch */
    int64_t batch_index;    /* index of the next batch in that epoch */
    double best_valid_loss; /* INFINITY before the first evaluation */
    int64_t best_step;      /* step of the best validation loss (0: none) */
    int64_t evals_since_best;
    double last_loss;         /* training loss of the last update (NaN before the first) */
    size_t graph_memory_peak; /* most bytes the step's arena has held */
    double train_seconds;     /* training time of the runs so far, a running one included: the
                                 clock of a cosine annealed over total_seconds */
    int rank, ranks;          /* this process's rank and the number of ranks (0 and 1 alone) */
} attn_trainer_status;

ATTN_API attn_status attn_trainer_get_status(const attn_trainer *trainer, attn_trainer_status *out);

/* ---- data parallelism -------------------------------------------------------------------- */

/* `mpirun -np N prog` runs N copies of a program; a trainer created in each with
 * options.distributed set is one rank of a data-parallel run. Every rank holds the whole model
 * and corpus and reads the same sequence of batches (a function of seed and epoch): an update
 * is `accumulate` consecutive batches, and rank r of N takes batches [r·A/N, (r+1)·A/N) of them
 * (A = accumulate; a rank may get none when N > A). Each rank computes its batches' gradients,
 * the gradient buffer is summed over the ranks with MPI all-reduces, in buckets started while
 * the backward still runs, and every rank makes the same optimizer step. The loss is normalised
 * by the target tokens of the whole update (every rank knows every batch), on one process as on
 * several, so N ranks with accumulate N give the same weights, to the bit at N = 2, as one
 * process with accumulate N (docs/distributed.md: the order of the sums for N > 2). Rank 0 alone
 * validates, reports EVAL events, and writes the model file and the checkpoint; the stopping
 * decision (its clock, patience, any rank's callback asking to stop) is agreed after every
 * update. A checkpoint resumes on any number of ranks. The cancel flag
 * (attn_trainer_set_cancel_flag) is for one process: a rank that dropped its update alone would
 * leave the others waiting; end a run of several ranks with attn_distributed_abort, or let
 * mpirun end it. */

/* 1 when this build of the library has MPI. */
ATTN_API int attn_distributed_built(void);
/* The MPI library's name and version ("Open MPI v4.1.4"), or a sentence saying there is none. */
ATTN_API const char *attn_distributed_description(void);
/* 1 when the environment says this process was started by mpirun (Open MPI, or a PMI/PMIx
 * launcher). The library never starts MPI on its own because of it. */
ATTN_API int attn_distributed_launched(void);
/* Initialises MPI (unless the program already has) and gives this process's rank and the
 * number of ranks. ATTN_ERR_UNSUPPORTED in a build without MPI. */
ATTN_API attn_status attn_distributed_start(int *rank, int *size);
/* Finalises MPI if attn_distributed_start initialised it; call once, before the program exits
 * normally. */
ATTN_API void attn_distributed_finish(void);
/* For a program whose rank failed: ends every rank of the run (MPI_Abort) with code, so that
 * none waits for it. Does nothing without MPI. The library itself never calls it. */
ATTN_API void attn_distributed_abort(int code);

/* ---- checkpoints -------------------------------------------------------------------------- */

/* The curve-shaping options stored in a checkpoint's state (batch_tokens, shuffle, seed,
 * accumulate, adam without no_decay, schedule, clip_norm, precision, ema, teacher_weight),
 * written over
 * *options; the other fields are left alone. Lets a program resume with the options the run
 * started with. The file is one opened with attn_tensor_file_open. */
ATTN_API attn_status attn_trainer_options_from_checkpoint(const attn_tensor_file *file,
                                                          attn_trainer_options *options);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_TRAINER_H */
