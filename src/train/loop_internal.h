/* The trainer's state, shared by the loop (loop.c) and the files it writes (checkpoint.c). */
#ifndef ATTN_TRAIN_LOOP_INTERNAL_H
#define ATTN_TRAIN_LOOP_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_trainer.h"
#include "train/distributed.h"

struct attn_trainer {
    attn_trainable model;
    attn_params *params;
    /* The data: a corpus of pairs, or a language model's token streams (train NULL then). */
    const attn_corpus *train, *valid;
    const attn_token_stream *train_stream;
    /* Pairs of the corpus, or tokens of the stream: with the fingerprint, how a checkpoint
     * recognises its data. */
    int64_t train_size;
    /* The caller's options with the paths and metadata pointing at our own copies. */
    attn_trainer_options options;
    char *best_path, *checkpoint_path;
    attn_metadata_entry *metadata;
    /* Parameters exempt from weight decay, when the trainer chose them. */
    attn_param_range *no_decay;
    attn_batcher *train_batches, *valid_batches;
    attn_graph *graph;
    /* The ranks of the run (one, without options.distributed). */
    attn_dist *dist;
    /* This rank's earlier micro-batches of an update, summed, while the next one's gradient
     * is computed from zero (NULL when this rank never has more than one per update). */
    float *local_sum;
    /* Space to describe values, both moments and the smoothed weights for one checkpoint
     * write. */
    attn_named_tensor *tensors;
    /* With options.ema: the smoothed weights (the values buffer's layout) and their tensor
     * names in the checkpoint (one block of strings); NULL without. */
    float *smoothed;
    char **smoothed_names;
    uint64_t data_fingerprint;

    /* ---- the state a checkpoint keeps ---- */
    int64_t step, adam_step;
    double best_valid_loss;
    int64_t best_step, evals_since_best;
    int64_t last_eval_step; /* -1: none yet */
    /* smoothed holds the average (copied from the weights at step 0, or read on resume). */
    int smoothed_ready;
    const volatile sig_atomic_t *cancel_flag;
    /* Training time of the finished runs, those before the checkpoint included: with the
     * current run's time, the clock of a cosine annealed over total_seconds. */
    double train_seconds;

    /* ---- this run only ---- */
    double run_start; /* the monotonic clock when attn_trainer_run started; < 0 outside it */
    int64_t skipped_in_a_row;
    double last_loss;
    double last_valid_accuracy;
    /* With several ranks: rank 0's training time, agreed after each update, so that a cosine
     * over a time budget gives every rank the same rate. */
    double agreed_seconds;
};

/* Training time so far: train_seconds plus the current run's (the clock its time limit
 * reads). */
ATTN_INTERNAL double attn_trainer_seconds(const attn_trainer *trainer);
/* The smoothed weights with options.ema (NULL without): a copy of the weights until the first
 * update is applied. */
ATTN_INTERNAL const float *attn_trainer_smoothed(attn_trainer *trainer);
/* JSON of the training state (malloc'ed). */
ATTN_INTERNAL attn_status attn_trainer_state_json(const attn_trainer *trainer, char **json);
/* Writes the model file (values, or the smoothed weights with options.ema; config, caller
 * metadata, a summary) to path. */
ATTN_INTERNAL attn_status attn_trainer_write_model_file(attn_trainer *trainer, const char *path);

#endif /* ATTN_TRAIN_LOOP_INTERNAL_H */
