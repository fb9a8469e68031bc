/* The training loop: steps, evaluation, keep-best, stopping rules. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "train/loop_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

attn_trainer_options attn_trainer_default_options(void)
{
    attn_trainer_options o;
    memset(&o, 0, sizeof o);
    o.batch_tokens = 4096;
    o.shuffle = 1;
    o.seed = 1;
    o.accumulate = 1;
    o.adam = attn_adam_default_options(ATTN_ADAM);
    o.adam.beta2 = 0.98;
    o.adam.eps = 1e-9;
    o.schedule.kind = ATTN_LR_INVERSE_SQRT;
    o.schedule.lr = 1e-3;
    o.schedule.warmup_steps = 1000;
    o.clip_norm = 1.0;
    o.max_epochs = 10;
    /* A few non-finite updates happen in healthy runs (an unlucky batch early in warm-up);
     * twenty in a row has only been seen in runs whose weights had already blown up. */
    o.max_skipped_updates = 20;
    o.check_every = 100;
    o.spm_nbest = -1;
    return o;
}

/* ---- creation ------------------------------------------------------------------------------ */

static char *copy_string(const char *s)
{
    if (s == NULL)
        return NULL;
    size_t n = strlen(s) + 1;
    char *copy = malloc(n);
    if (copy != NULL)
        memcpy(copy, s, n);
    return copy;
}

static int is_reserved_key(const char *key)
{
    return strcmp(key, ATTN_MODEL_CONFIG_KEY) == 0 || strcmp(key, ATTN_TRAIN_STATE_KEY) == 0 ||
           strcmp(key, ATTN_TRAIN_SUMMARY_KEY) == 0;
}

static attn_status check_options(const attn_trainer_options *o)
{
    static const char fn[] = "attn_trainer_create";
    ATTN_CHECK_ARG(o->batch_tokens > 0, "%s: batch_tokens must be positive, got %lld", fn,
                   (long long)o->batch_tokens);
    ATTN_CHECK_ARG(o->accumulate >= 1, "%s: accumulate must be >= 1, got %lld", fn,
                   (long long)o->accumulate);
    ATTN_CHECK_ARG(o->precision == ATTN_PRECISION_AUTO || o->precision == ATTN_PRECISION_FP32 ||
                       o->precision == ATTN_PRECISION_BF16,
                   "%s: precision must be auto, fp32 or bf16 for training, got %s", fn,
                   attn_precision_name(o->precision));
    ATTN_CHECK_ARG(o->ema >= 0.0 && o->ema < 1.0,
                   "%s: ema (the smoothing rate) must be in [0, 1), got %g (0 turns it off; "
                   "Marian's usual rate is 1e-4)",
                   fn, o->ema);
    ATTN_CHECK_ARG(o->teacher_weight >= 0.0 && o->teacher_weight <= 1.0,
                   "%s: teacher_weight must be in [0, 1], got %g", fn, o->teacher_weight);
    ATTN_CHECK_ARG(o->teacher == NULL || o->teacher_weight > 0.0,
                   "%s: teacher_weight is 0, so the teachers would teach nothing: give a weight "
                   "in (0, 1]",
                   fn);
    ATTN_CHECK_ARG(o->teacher != NULL || o->teacher_weight == 0.0,
                   "%s: teacher_weight is %g but there are no teachers' distributions (teacher "
                   "is NULL)",
                   fn, o->teacher_weight);
    ATTN_CHECK_ARG(o->clip_norm >= 0.0 && isfinite(o->clip_norm),
                   "%s: clip_norm must be finite and >= 0, got %g", fn, o->clip_norm);
    ATTN_CHECK_ARG(o->frozen_floats >= 0, "%s: frozen_floats must be >= 0, got %lld", fn,
                   (long long)o->frozen_floats);
    ATTN_CHECK_ARG(o->frozen_floats == 0 || o->adam.no_decay == NULL,
                   "%s: with frozen_floats, leave adam.no_decay NULL: the trainer exempts the "
                   "learning parameters' biases and gains itself",
                   fn);
    ATTN_CHECK_ARG(o->max_epochs >= 0 && o->max_steps >= 0,
                   "%s: max_epochs (%lld) and max_steps (%lld) must not be negative", fn,
                   (long long)o->max_epochs, (long long)o->max_steps);
    ATTN_CHECK_ARG(o->time_limit >= 0.0 && !isnan(o->time_limit),
                   "%s: time_limit must be >= 0 seconds, got %g", fn, o->time_limit);
    ATTN_CHECK_ARG(o->max_skipped_updates >= 0, "%s: max_skipped_updates must be >= 0, got %lld",
                   fn, (long long)o->max_skipped_updates);
    ATTN_CHECK_ARG(o->check_every >= 0, "%s: check_every must be >= 0, got %lld", fn,
                   (long long)o->check_every);
    ATTN_CHECK_ARG(o->eval_every >= 0 && o->patience >= 0 && o->checkpoint_every >= 0,
                   "%s: eval_every (%lld), patience (%lld) and checkpoint_every (%lld) must not "
                   "be negative",
                   fn, (long long)o->eval_every, (long long)o->patience,
                   (long long)o->checkpoint_every);
    ATTN_CHECK_ARG(o->n_metadata == 0 || o->metadata != NULL, "%s: metadata must not be NULL", fn);
    for (size_t i = 0; i < o->n_metadata; i++) {
        ATTN_CHECK_ARG(o->metadata[i].key != NULL && o->metadata[i].value != NULL,
                       "%s: metadata[%zu] has a NULL key or value", fn, i);
        ATTN_CHECK_ARG(!is_reserved_key(o->metadata[i].key),
                       "%s: metadata[%zu]: the trainer writes the key \"%s\" itself", fn, i,
                       o->metadata[i].key);
    }
    /* The optimizer and the schedule check their own fields; try them once here so that a bad
     * option fails now rather than at the first step. */
    double lr;
    ATTN_TRY(attn_lr_at_time(&o->schedule, 1, 0.0, &lr));
    attn_adam_options adam = o->adam;
    adam.lr = 0.0;
    int64_t step = 0;
    float p = 0.0f, g = 0.0f, m = 0.0f, v = 0.0f;
    adam.no_decay = NULL;
    adam.no_decay_count = 0;
    return attn_adam_step(&adam, &step, 1, &p, &g, &m, &v);
}

/* Every 1-dimensional parameter (biases, layer-norm gains and shifts), as sorted ranges. */
/* The 1-dimensional parameters that learn, as ranges from the first float that learns (the
 * optimizer sees the buffer from there). */
static attn_status choose_no_decay(attn_trainer *t)
{
    const int64_t frozen = t->options.frozen_floats;
    size_t count = attn_params_count(t->params);
    t->no_decay = malloc((count + 1) * sizeof *t->no_decay);
    if (t->no_decay == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_trainer_create: out of memory");
    int64_t n = 0;
    for (size_t i = 0; i < count; i++) {
        attn_param_info info;
        ATTN_TRY(attn_params_info(t->params, (attn_param_id)i, &info));
        if (info.ndim == 1 && (int64_t)info.offset >= frozen)
            t->no_decay[n++] = (attn_param_range){(int64_t)info.offset - frozen, info.numel};
    }
    /* Registration order is offset order, but sort anyway: the optimizer requires it. */
    for (int64_t i = 1; i < n; i++)
        for (int64_t j = i; j > 0 && t->no_decay[j - 1].offset > t->no_decay[j].offset; j--) {
            attn_param_range r = t->no_decay[j];
            t->no_decay[j] = t->no_decay[j - 1];
            t->no_decay[j - 1] = r;
        }
    t->options.adam.no_decay = t->no_decay;
    t->options.adam.no_decay_count = n;
    return ATTN_OK;
}

/* The frozen prefix ends where a parameter starts (or at the buffer's end), so no parameter
 * is half frozen. */
static attn_status check_frozen(const attn_trainer *t)
{
    const int64_t frozen = t->options.frozen_floats;
    if (frozen == 0 || frozen == (int64_t)attn_params_buffer_floats(t->params))
        return ATTN_OK;
    for (size_t i = 0; i < attn_params_count(t->params); i++) {
        attn_param_info info;
        ATTN_TRY(attn_params_info(t->params, (attn_param_id)i, &info));
        if ((int64_t)info.offset == frozen)
            return ATTN_OK;
    }
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                     "attn_trainer_create: frozen_floats %lld is not where a parameter starts",
                     (long long)frozen);
}

/* FNV-1a over every pair's lengths and ids: resuming on other data is refused. */
static uint64_t hash_word(uint64_t h, uint32_t word)
{
    for (int byte = 0; byte < 4; byte++) {
        h ^= (word >> (8 * byte)) & 0xffu;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t fingerprint(const attn_corpus *corpus)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    int64_t n = attn_corpus_size(corpus);
    for (int64_t i = 0; i < n; i++) {
        const int32_t *ids;
        int64_t length;
        attn_corpus_source_ids(corpus, i, &ids, &length);
        h = hash_word(h, (uint32_t)length);
        for (int64_t j = 0; j < length; j++)
            h = hash_word(h, (uint32_t)ids[j]);
        attn_corpus_target_ids(corpus, i, &ids, &length);
        h = hash_word(h, (uint32_t)length);
        for (int64_t j = 0; j < length; j++)
            h = hash_word(h, (uint32_t)ids[j]);
    }
    return h;
}

/* The smoothed weights' buffer and their names in the checkpoint (prefix + name). */
static attn_status create_smoothed(attn_trainer *t)
{
    static const char fn[] = "attn_trainer_create";
    const size_t count = attn_params_count(t->params);
    const size_t prefix = strlen(ATTN_CHECKPOINT_EMA_PREFIX);
    size_t text = 0;
    for (size_t i = 0; i < count; i++) {
        attn_param_info info;
        ATTN_TRY(attn_params_info(t->params, (attn_param_id)i, &info));
        text += prefix + strlen(info.name) + 1;
    }
    /* calloc: the padding between parameters stays zero, as in the store's buffers. */
    t->smoothed = calloc(attn_params_buffer_floats(t->params) + 1, sizeof(float));
    t->smoothed_names = malloc((count + 1) * sizeof *t->smoothed_names + text);
    if (t->smoothed == NULL || t->smoothed_names == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    char *cursor = (char *)(t->smoothed_names + count + 1);
    for (size_t i = 0; i < count; i++) {
        attn_param_info info;
        ATTN_TRY(attn_params_info(t->params, (attn_param_id)i, &info));
        const size_t length = strlen(info.name) + 1;
        t->smoothed_names[i] = cursor;
        memcpy(cursor, ATTN_CHECKPOINT_EMA_PREFIX, prefix);
        memcpy(cursor + prefix, info.name, length);
        cursor += prefix + length;
    }
    return ATTN_OK;
}

/* The training and validation data: a corpus of pairs or a token stream's windows. */
typedef struct trainer_data {
    const attn_corpus *train, *valid;
    const attn_token_stream *train_stream, *valid_stream;
} trainer_data;

static attn_status create_batchers(attn_trainer *t, const trainer_data *data)
{
    const attn_trainer_options *o = &t->options;
    if (data->train_stream != NULL) {
        attn_window_config windows = {o->batch_sequences, o->context, o->seed, o->shuffle};
        ATTN_TRY(attn_batcher_create_windows(data->train_stream, &windows, &t->train_batches));
        if (data->valid_stream != NULL) {
            windows.shuffle = 0;
            ATTN_TRY(attn_batcher_create_windows(data->valid_stream, &windows, &t->valid_batches));
        }
        t->train_size = attn_token_stream_size(data->train_stream);
        t->data_fingerprint = attn_token_stream_fingerprint(data->train_stream);
        return ATTN_OK;
    }
    attn_batcher_config batching = {o->batch_tokens, o->seed, o->shuffle};
    ATTN_TRY(attn_batcher_create(data->train, &batching, &t->train_batches));
    if (o->spm_alpha > 0.0)
        ATTN_TRY(attn_batcher_sample_subwords(t->train_batches, o->sample_source, o->sample_target,
                                              o->spm_alpha, o->spm_nbest));
    if (data->valid != NULL) {
        attn_batcher_config in_order = {o->batch_tokens, o->seed, 0};
        ATTN_TRY(attn_batcher_create(data->valid, &in_order, &t->valid_batches));
    }
    t->train_size = attn_corpus_size(data->train);
    t->data_fingerprint = fingerprint(data->train);
    return ATTN_OK;
}

static attn_status create(attn_trainer *t, const attn_trainable *model, const trainer_data *data,
                          const attn_trainer_options *options)
{
    static const char fn[] = "attn_trainer_create";
    t->model = *model;
    t->train = data->train;
    t->valid = data->valid;
    t->train_stream = data->train_stream;
    t->options = *options;
    /* Decided once, here: the checkpoint stores and a resume compares the precision used. */
    t->options.precision = attn_precision_resolve(options->precision);
    t->params = model->params(model->self);
    ATTN_CHECK_ARG(t->params != NULL && attn_params_is_finalized(t->params),
                   "%s: the model's parameter store must be finalised", fn);
    if (options->best_path != NULL && (t->best_path = copy_string(options->best_path)) == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (options->checkpoint_path != NULL &&
        (t->checkpoint_path = copy_string(options->checkpoint_path)) == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    t->options.best_path = t->best_path;
    t->options.checkpoint_path = t->checkpoint_path;
    t->options.metadata = NULL;
    t->options.n_metadata = 0;
    if (options->n_metadata > 0) {
        t->metadata = calloc(options->n_metadata, sizeof *t->metadata);
        if (t->metadata == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        for (size_t i = 0; i < options->n_metadata; i++) {
            t->options.n_metadata = i + 1;
            t->metadata[i].key = copy_string(options->metadata[i].key);
            t->metadata[i].value = copy_string(options->metadata[i].value);
            if (t->metadata[i].key == NULL || t->metadata[i].value == NULL)
                return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        }
        t->options.metadata = t->metadata;
    }
    ATTN_TRY(check_frozen(t));
    if (options->adam.weight_decay > 0.0 && options->adam.no_decay == NULL)
        ATTN_TRY(choose_no_decay(t));

    ATTN_TRY(create_batchers(t, data));
    ATTN_TRY(attn_graph_create(t->params, &t->graph));
    ATTN_TRY(attn_dist_open(options->distributed, t->params, &t->dist));
    const int64_t ranks = attn_dist_size(t->dist);
    if ((options->accumulate + ranks - 1) / ranks > 1) {
        t->local_sum = malloc(attn_params_buffer_floats(t->params) * sizeof(float));
        if (t->local_sum == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    size_t count = attn_params_count(t->params);
    t->tensors = calloc(4 * count + 1, sizeof *t->tensors);
    if (t->tensors == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    size_t floats = attn_params_buffer_floats(t->params);
    if (options->ema > 0.0)
        ATTN_TRY(create_smoothed(t));
    memset(attn_params_buffer(t->params, ATTN_PARAM_ADAM_M), 0, floats * sizeof(float));
    memset(attn_params_buffer(t->params, ATTN_PARAM_ADAM_V), 0, floats * sizeof(float));
    attn_graph_set_precision(t->graph, t->options.precision);
    t->best_valid_loss = INFINITY;
    t->last_loss = NAN;
    t->last_eval_step = -1;
    t->run_start = -1.0;
    return ATTN_OK;
}

static attn_status create_checked(const attn_trainable *model, const trainer_data *data,
                                  const attn_trainer_options *options, attn_trainer **out)
{
    attn_trainer *t = calloc(1, sizeof *t);
    if (t == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_trainer_create: out of memory");
    attn_status status = create(t, model, data, options);
    if (status != ATTN_OK) {
        attn_trainer_destroy(t);
        return status;
    }
    *out = t;
    return ATTN_OK;
}

attn_status attn_trainer_create(const attn_trainable *model, const attn_corpus *train,
                                const attn_corpus *valid, const attn_trainer_options *options,
                                attn_trainer **out)
{
    static const char fn[] = "attn_trainer_create";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_ARG(model->params != NULL && model->forward_loss != NULL &&
                       model->config_json != NULL,
                   "%s: the model must provide params, forward_loss and config_json", fn);
    ATTN_CHECK_NOT_NULL(train);
    ATTN_CHECK_NOT_NULL(options);
    ATTN_TRY(check_options(options));
    ATTN_CHECK_ARG(options->teacher == NULL ||
                       attn_teacher_targets_pairs(options->teacher) == attn_corpus_size(train),
                   "%s: the teachers' distributions cover %lld pairs, the training corpus has "
                   "%lld: compute them on this corpus",
                   fn, (long long)attn_teacher_targets_pairs(options->teacher),
                   (long long)attn_corpus_size(train));
    ATTN_CHECK_ARG(options->teacher == NULL || options->spm_alpha == 0.0 ||
                       options->sample_target == NULL,
                   "%s: the teachers' distributions follow the targets' best segmentation: "
                   "sample the source alone (sample_target NULL) or train without teachers",
                   fn);
    const trainer_data data = {train, valid, NULL, NULL};
    return create_checked(model, &data, options, out);
}

attn_status attn_trainer_create_lm(const attn_trainable *model, const attn_token_stream *train,
                                   const attn_token_stream *valid,
                                   const attn_trainer_options *options, attn_trainer **out)
{
    static const char fn[] = "attn_trainer_create_lm";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_ARG(model->params != NULL && model->forward_loss != NULL &&
                       model->config_json != NULL,
                   "%s: the model must provide params, forward_loss and config_json", fn);
    ATTN_CHECK_NOT_NULL(train);
    ATTN_CHECK_NOT_NULL(options);
    ATTN_TRY(check_options(options));
    ATTN_CHECK_ARG(options->batch_sequences >= 1 && options->context >= 1,
                   "%s: batch_sequences (%lld) and context (%lld) must be positive", fn,
                   (long long)options->batch_sequences, (long long)options->context);
    ATTN_CHECK_ARG(options->teacher == NULL,
                   "%s: teachers' distributions are for pairs of a corpus, not a token stream", fn);
    ATTN_CHECK_ARG(options->spm_alpha == 0.0,
                   "%s: subword regularisation (spm_alpha) is not there yet for a language "
                   "model's token stream, whose windows are cut from one tokenization of the text",
                   fn);
    const trainer_data data = {NULL, NULL, train, valid};
    return create_checked(model, &data, options, out);
}

void attn_trainer_destroy(attn_trainer *trainer)
{
    if (trainer == NULL)
        return;
    attn_graph_destroy(trainer->graph);
    attn_dist_close(trainer->dist);
    free(trainer->local_sum);
    attn_batcher_destroy(trainer->train_batches);
    attn_batcher_destroy(trainer->valid_batches);
    for (size_t i = 0; i < trainer->options.n_metadata; i++) {
        free((char *)trainer->metadata[i].key);
        free((char *)trainer->metadata[i].value);
    }
    free(trainer->metadata);
    free(trainer->no_decay);
    free(trainer->tensors);
    free(trainer->smoothed);
    free(trainer->smoothed_names);
    free(trainer->best_path);
    free(trainer->checkpoint_path);
    free(trainer);
}

attn_status attn_trainer_get_status(const attn_trainer *trainer, attn_trainer_status *out)
{
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(trainer);
    out->rank = attn_dist_rank(trainer->dist);
    out->ranks = attn_dist_size(trainer->dist);
    out->step = trainer->step;
    out->adam_step = trainer->adam_step;
    attn_batcher_position(trainer->train_batches, &out->epoch, &out->batch_index);
    out->best_valid_loss = trainer->best_valid_loss;
    out->best_step = trainer->best_step;
    out->evals_since_best = trainer->evals_since_best;
    out->last_loss = trainer->last_loss;
    out->graph_memory_peak = attn_graph_memory_peak(trainer->graph);
    out->train_seconds = attn_trainer_seconds(trainer);
    return ATTN_OK;
}

double attn_trainer_seconds(const attn_trainer *trainer)
{
    if (trainer->run_start < 0.0)
        return trainer->train_seconds;
    return trainer->train_seconds + (now_seconds() - trainer->run_start);
}

/* ---- one step ------------------------------------------------------------------------------ */

/* The teachers' distributions of the batch's positions, on the graph's arena (freed at the
 * next reset), for the training loss. */
static attn_status teacher_rows(attn_trainer *t, const attn_batch *b, attn_model_batch *input)
{
    const attn_teacher_targets *teacher = t->options.teacher;
    const int64_t vocab = attn_teacher_targets_vocab(teacher);
    const int64_t steps = b->target_len > 1 ? b->target_len - 1 : 0;
    size_t floats;
    if (!attn_mul_size((size_t)(b->size * steps), (size_t)vocab, &floats))
        return ATTN_ERR_OUT_OF_MEMORY;
    float *rows = attn_graph_alloc_floats(t->graph, floats);
    if (rows == NULL && floats > 0)
        return ATTN_ERR_OUT_OF_MEMORY;
    ATTN_TRY(attn_teacher_targets_gather(teacher, b, rows));
    input->teacher = rows;
    input->teacher_vocab = vocab;
    input->teacher_weight = t->options.teacher_weight;
    return ATTN_OK;
}

/* The target tokens a batch's loss scores: every position after each target's first (a
 * model predicts token t + 1 from those up to t), as attn_model_forward_loss_counted counts
 * them. */
static int64_t predicted_tokens(const attn_batch *b)
{
    if (b->labels != NULL) /* a classifier scores one label per row */
        return b->size;
    int64_t tokens = 0;
    if (b->mlm_targets != NULL) { /* a masked language model scores the chosen positions */
        for (int64_t i = 0; i < b->size * b->source_len; i++)
            tokens += b->mlm_targets[i] != -1;
        return tokens;
    }
    for (int64_t i = 0; i < b->size; i++) {
        int64_t length =
            b->target_lengths[i] < b->target_len ? b->target_lengths[i] : b->target_len;
        tokens += length > 1 ? length - 1 : 0;
    }
    return tokens;
}

/* The tokens of the update's `accumulate` batches, all ranks' together (every rank reads
 * every batch), leaving the batcher where it was. */
static attn_status update_tokens(attn_trainer *t, int64_t *tokens)
{
    int64_t epoch, index;
    attn_batcher_position(t->train_batches, &epoch, &index);
    *tokens = 0;
    for (int64_t micro = 0; micro < t->options.accumulate; micro++) {
        const attn_batch *batch;
        ATTN_TRY(attn_batcher_next(t->train_batches, &batch));
        *tokens += predicted_tokens(batch);
    }
    return attn_batcher_seek(t->train_batches, epoch, index);
}

/* The update's gradient, summed over the ranks. The loss is the mean over the target tokens of
 * all the update's batches: batch j's gradient is computed from zero with d(loss_j) = its
 * share of the tokens, and the batches' gradients are added one to the next on a rank, then
 * summed over the ranks; for two ranks that is g0 + g1 whichever way, so two ranks equal one
 * process with accumulate 2 to the bit. With one batch per update the share is 1 and this is
 * the plain backward. */
static attn_status compute_gradients(attn_trainer *t, double *loss_sum, int64_t *tokens,
                                     int64_t *correct)
{
    const attn_trainer_options *o = &t->options;
    attn_params *store = t->params;
    attn_graph *graph = t->graph;
    const int64_t n = (int64_t)attn_params_buffer_floats(store);
    float *grads = attn_params_buffer(store, ATTN_PARAM_GRADS);
    const int64_t batches = o->accumulate, ranks = attn_dist_size(t->dist);
    const int64_t rank = attn_dist_rank(t->dist);
    const int64_t first = rank * batches / ranks, end = (rank + 1) * batches / ranks;
    int64_t all_tokens = 0;
    if (batches > 1)
        ATTN_TRY(update_tokens(t, &all_tokens));
    for (int64_t micro = 0; micro < batches; micro++) {
        const attn_batch *batch;
        ATTN_TRY(attn_batcher_next(t->train_batches, &batch));
        if (micro < first || micro >= end)
            continue;
        const double share = batches == 1     ? 1.0
                             : all_tokens > 0 ? (double)predicted_tokens(batch) / (double)all_tokens
                                              : 1.0 / (double)batches;
        const float *earlier = micro > first ? t->local_sum : NULL;
        if (earlier != NULL) {
            memcpy(t->local_sum, grads, (size_t)n * sizeof(float));
            attn_params_zero_grad(store);
        }
        attn_model_batch input = attn_model_batch_of(batch);
        attn_graph_reset(graph);
        if (o->teacher != NULL)
            ATTN_TRY(teacher_rows(t, batch, &input));
        attn_graph_set_training(graph, 1);
        attn_graph_set_recording(graph, 1);
        attn_graph_set_dropout_seed(graph, o->seed, (uint64_t)(t->step * batches + micro));
        attn_var *loss;
        int64_t batch_tokens = 0, batch_correct = 0;
        ATTN_TRY(t->model.forward_loss(t->model.self, graph, &input, 1, &loss, &batch_tokens,
                                       &batch_correct));
        const float seed = (float)share;
        if (micro + 1 < end) {
            ATTN_TRY(seed == 1.0f ? attn_graph_backward(graph, loss)
                                  : attn_graph_backward_from(graph, loss, &seed));
            if (earlier != NULL)
                for (int64_t i = 0; i < n; i++)
                    grads[i] = earlier[i] + grads[i];
        } else {
            /* The last batch: its buckets are summed over the ranks as the backward ends them. */
            ATTN_TRY(attn_dist_backward_and_sum(t->dist, graph, loss, seed, earlier));
        }
        *loss_sum += share * (double)loss->value.data[0];
        *tokens += batch_tokens;
        *correct += batch_correct;
    }
    if (first == end) /* no batch for this rank in this update: it adds zeros */
        ATTN_TRY(attn_dist_backward_and_sum(t->dist, NULL, NULL, 1.0f, NULL));
    if (ranks > 1) {
        double figures[3] = {*loss_sum, (double)*tokens, (double)*correct};
        ATTN_TRY(attn_dist_sum_doubles(t->dist, figures, 3));
        *loss_sum = figures[0];
        *tokens = (int64_t)figures[1];
        *correct = (int64_t)figures[2];
    }
    return ATTN_OK;
}

static attn_status train_step(attn_trainer *t, attn_train_event *event)
{
    const attn_trainer_options *o = &t->options;
    attn_params *store = t->params;
    attn_params_zero_grad(store);
    double loss_sum = 0.0;
    int64_t tokens = 0, correct = 0;
    int64_t epoch_before, batch_before;
    attn_batcher_position(t->train_batches, &epoch_before, &batch_before);
    attn_status status = compute_gradients(t, &loss_sum, &tokens, &correct);
    if (status == ATTN_ERR_CANCELLED) {
        /* Drop the unfinished update whole: the weights are untouched, and the batches go back
         * so that a resumed run makes exactly this update first. */
        attn_params_zero_grad(store);
        attn_graph_reset(t->graph);
        ATTN_TRY(attn_batcher_seek(t->train_batches, epoch_before, batch_before));
        return status;
    }
    ATTN_TRY(status);
    /* The optimizer sees the buffers from the first float that learns. */
    const int64_t frozen = o->frozen_floats;
    const int64_t n = (int64_t)attn_params_buffer_floats(store) - frozen;
    float *grads = attn_params_buffer(store, ATTN_PARAM_GRADS) + frozen;
    const int64_t ranks = attn_dist_size(t->dist);
    double norm;
    if (o->clip_norm > 0.0)
        ATTN_TRY(attn_clip_grad_norm(n, grads, o->clip_norm, &norm));
    else
        ATTN_TRY(attn_grad_norm(n, grads, &norm));
    double lr;
    const double seconds = ranks > 1 ? t->agreed_seconds : attn_trainer_seconds(t);
    ATTN_TRY(attn_lr_at_time(&o->schedule, t->adam_step + 1, seconds, &lr));
    const int skipped = !isfinite(norm);
    if (!skipped) {
        attn_adam_options adam = o->adam;
        adam.lr = lr;
        const int64_t updates_before = t->adam_step;
        float *values = attn_params_buffer(store, ATTN_PARAM_VALUES) + frozen;
        /* Fixes the average's start at the weights before the first update. */
        attn_trainer_smoothed(t);
        ATTN_TRY(attn_adam_step(&adam, &t->adam_step, n, values, grads,
                                attn_params_buffer(store, ATTN_PARAM_ADAM_M) + frozen,
                                attn_params_buffer(store, ATTN_PARAM_ADAM_V) + frozen));
        attn_params_values_changed(store);
        if (t->smoothed != NULL)
            ATTN_TRY(attn_ema_update(n, t->smoothed + frozen, values, o->ema, updates_before));
    }
    t->step++;
    t->last_loss = loss_sum;
    event->kind = ATTN_TRAIN_EVENT_STEP;
    event->loss = t->last_loss;
    event->accuracy = tokens > 0 ? (double)correct / (double)tokens : 0.0;
    event->tokens = tokens;
    event->lr = lr;
    event->grad_norm = norm;
    event->skipped = skipped;
    return ATTN_OK;
}

/* A hash of the parameters' bits, equal on every rank while they train one model. */
static uint64_t parameter_checksum(const attn_params *store)
{
    const float *values = attn_params_buffer(store, ATTN_PARAM_VALUES);
    const size_t n = attn_params_buffer_floats(store);
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) {
        uint32_t bits;
        memcpy(&bits, &values[i], sizeof bits);
        h = (h ^ bits) * 0x100000001b3ULL;
    }
    return h;
}

/* Rank 0 writes the files; the others hold the same weights. */
static int writes_files(const attn_trainer *t)
{
    return attn_dist_rank(t->dist) == 0;
}

/* ---- evaluation ---------------------------------------------------------------------------- */

const float *attn_trainer_smoothed(attn_trainer *trainer)
{
    if (trainer->smoothed == NULL)
        return NULL;
    if (!trainer->smoothed_ready) {
        memcpy(trainer->smoothed, attn_params_buffer(trainer->params, ATTN_PARAM_VALUES),
               attn_params_buffer_floats(trainer->params) * sizeof(float));
        trainer->smoothed_ready = 1;
    }
    return trainer->smoothed;
}

/* Exchanges the weights and the smoothed weights in place: twice leaves both as they were, to
 * the bit, and needs no third copy. */
static void swap_smoothed(attn_trainer *t)
{
    float *values = attn_params_buffer(t->params, ATTN_PARAM_VALUES);
    const size_t n = attn_params_buffer_floats(t->params);
    for (size_t i = 0; i < n; i++) {
        const float value = values[i];
        values[i] = t->smoothed[i];
        t->smoothed[i] = value;
    }
    attn_params_values_changed(t->params);
}

/* Scores the parameter values as they are. */
static attn_status score_values(attn_trainer *trainer, double *loss, double *accuracy,
                                int64_t *scored)
{
    attn_batcher *batches = trainer->valid_batches;
    ATTN_TRY(attn_batcher_seek(batches, 0, 0));
    const int64_t count = attn_batcher_num_batches(batches);
    double loss_sum = 0.0;
    int64_t tokens = 0, correct = 0;
    for (int64_t i = 0; i < count; i++) {
        const attn_batch *batch;
        ATTN_TRY(attn_batcher_next(batches, &batch));
        attn_model_batch input = attn_model_batch_of(batch);
        attn_graph_reset(trainer->graph);
        attn_graph_set_training(trainer->graph, 0);
        attn_graph_set_recording(trainer->graph, 0);
        attn_var *batch_loss;
        int64_t batch_tokens = 0, batch_correct = 0;
        ATTN_TRY(trainer->model.forward_loss(trainer->model.self, trainer->graph, &input, 0,
                                             &batch_loss, &batch_tokens, &batch_correct));
        loss_sum += (double)batch_loss->value.data[0] * (double)batch_tokens;
        tokens += batch_tokens;
        correct += batch_correct;
    }
    attn_graph_reset(trainer->graph);
    *loss = tokens > 0 ? loss_sum / (double)tokens : 0.0;
    *accuracy = tokens > 0 ? (double)correct / (double)tokens : 0.0;
    *scored = tokens;
    return ATTN_OK;
}

/* Scores the weights validation judges: the smoothed ones with options.ema. */
static attn_status score_validation(attn_trainer *trainer, double *loss, double *accuracy,
                                    int64_t *scored)
{
    if (attn_trainer_smoothed(trainer) == NULL)
        return score_values(trainer, loss, accuracy, scored);
    swap_smoothed(trainer);
    attn_status status = score_values(trainer, loss, accuracy, scored);
    swap_smoothed(trainer);
    return status;
}

attn_status attn_trainer_evaluate(attn_trainer *trainer, double *loss, double *accuracy)
{
    static const char fn[] = "attn_trainer_evaluate";
    ATTN_CHECK_NOT_NULL(trainer);
    ATTN_CHECK_NOT_NULL(loss);
    ATTN_CHECK_NOT_NULL(accuracy);
    ATTN_CHECK_ARG(trainer->valid_batches != NULL, "%s: the trainer has no validation corpus", fn);
    int64_t tokens;
    return score_validation(trainer, loss, accuracy, &tokens);
}

/* Scores the validation corpus, writes the model file on a new best. */
static attn_status evaluate_and_keep_best(attn_trainer *t, attn_train_event *event)
{
    double loss, accuracy;
    int64_t tokens;
    ATTN_TRY(score_validation(t, &loss, &accuracy, &tokens));
    t->last_eval_step = t->step;
    t->last_valid_accuracy = accuracy;
    const int improved = loss < t->best_valid_loss;
    if (improved) {
        t->best_valid_loss = loss;
        t->best_step = t->step;
        t->evals_since_best = 0;
        if (t->best_path != NULL)
            ATTN_TRY(attn_trainer_write_model_file(t, t->best_path));
    } else {
        t->evals_since_best++;
    }
    event->kind = ATTN_TRAIN_EVENT_EVAL;
    event->loss = loss;
    event->accuracy = accuracy;
    event->tokens = tokens;
    event->improved = improved;
    event->best_valid_loss = t->best_valid_loss;
    return ATTN_OK;
}

/* ---- the run ------------------------------------------------------------------------------- */

typedef struct run_clock {
    double start;
    int64_t tokens;
} run_clock;

/* The step the run stops at by max_steps and max_epochs (0: unbounded); epochs beyond the
 * current one are assumed to have as many batches as it has. */
static int64_t planned_steps(const attn_trainer *t)
{
    const attn_trainer_options *o = &t->options;
    int64_t plan = o->max_steps;
    if (o->max_epochs > 0) {
        int64_t epoch, index;
        attn_batcher_position(t->train_batches, &epoch, &index);
        int64_t per_epoch = attn_batcher_num_batches(t->train_batches);
        int64_t batches =
            o->max_epochs > epoch ? per_epoch - index + (o->max_epochs - epoch - 1) * per_epoch : 0;
        int64_t by_epochs = t->step + (batches + o->accumulate - 1) / o->accumulate;
        if (plan == 0 || by_epochs < plan)
            plan = by_epochs;
    }
    return plan;
}

static void fill_position(const attn_trainer *t, const run_clock *clock, attn_train_event *e)
{
    e->step = t->step;
    attn_batcher_position(t->train_batches, &e->epoch, &e->batch_index);
    e->epoch_batches = attn_batcher_num_batches(t->train_batches);
    e->planned_steps = planned_steps(t);
    e->best_valid_loss = t->best_valid_loss;
    e->elapsed = now_seconds() - clock->start;
    e->tokens_per_second = e->elapsed > 0.0 ? (double)clock->tokens / e->elapsed : 0.0;
}

/* Reports an event; nonzero when the callback asks to stop. */
static int report(const attn_trainer *t, const run_clock *clock, attn_train_event *event)
{
    fill_position(t, clock, event);
    if (t->options.callback == NULL)
        return 0;
    return t->options.callback(event, t->options.callback_user);
}

static const char *stop_reason(const attn_trainer *t, const run_clock *clock)
{
    const attn_trainer_options *o = &t->options;
    int64_t epoch;
    attn_batcher_position(t->train_batches, &epoch, NULL);
    if (o->max_epochs > 0 && epoch >= o->max_epochs)
        return "epochs";
    if (o->max_steps > 0 && t->step >= o->max_steps)
        return "max_steps";
    if (o->patience > 0 && t->evals_since_best >= o->patience)
        return "early_stopping";
    if (o->time_limit > 0.0 && now_seconds() - clock->start >= o->time_limit)
        return "time_limit";
    return NULL;
}

static int evaluation_due(const attn_trainer *t, int64_t epoch_before)
{
    if (t->valid_batches == NULL || !writes_files(t))
        return 0;
    if (t->options.eval_every > 0)
        return t->step % t->options.eval_every == 0;
    int64_t epoch;
    attn_batcher_position(t->train_batches, &epoch, NULL);
    return epoch > epoch_before;
}

static attn_status save_checkpoint_if_set(attn_trainer *t)
{
    if (t->checkpoint_path == NULL || !writes_files(t))
        return ATTN_OK;
    return attn_trainer_save_checkpoint(t, t->checkpoint_path);
}

static int cancelled(const attn_trainer *t)
{
    return t->cancel_flag != NULL && *t->cancel_flag != 0;
}

/* A cancelled run keeps what it finished: the checkpoint of the last whole update, and the
 * model file when there is no validation to choose it. */
static attn_status finish_cancelled(attn_trainer *t, run_clock *clock)
{
    attn_graph_reset(t->graph);
    if (t->valid_batches == NULL && t->best_path != NULL && t->step > 0)
        ATTN_TRY(attn_trainer_write_model_file(t, t->best_path));
    ATTN_TRY(save_checkpoint_if_set(t));
    attn_train_event event;
    memset(&event, 0, sizeof event);
    event.kind = ATTN_TRAIN_EVENT_DONE;
    event.loss = t->last_loss;
    event.stop_reason = "cancelled";
    report(t, clock, &event);
    return ATTN_OK;
}

static const char *const STOP_REASONS[] = {"epochs", "max_steps", "early_stopping", "time_limit",
                                           "stopped"};
enum { STOPPED_BY_CALLBACK = 4 };

/* Whether the run stops now, and why: the callback asked (stop_asked) or a stopping rule holds.
 * With several ranks, rank 0's rules (its clock, its validations) decide, any rank's callback
 * may stop the run, and every rank takes rank 0's training time for the schedule. */
static attn_status agree_on_stop(attn_trainer *t, const run_clock *clock, int stop_asked,
                                 const char **reason)
{
    if (attn_dist_size(t->dist) == 1) {
        *reason = stop_asked ? STOP_REASONS[STOPPED_BY_CALLBACK] : stop_reason(t, clock);
        return ATTN_OK;
    }
    double agreed[3] = {stop_asked ? 1.0 : 0.0, 0.0, 0.0};
    if (attn_dist_rank(t->dist) == 0) {
        const char *rule = stop_reason(t, clock);
        for (int i = 0; rule != NULL && i < STOPPED_BY_CALLBACK; i++)
            if (strcmp(rule, STOP_REASONS[i]) == 0)
                agreed[1] = (double)(i + 1);
        agreed[2] = attn_trainer_seconds(t);
    }
    ATTN_TRY(attn_dist_sum_doubles(t->dist, agreed, 3));
    t->agreed_seconds = agreed[2];
    *reason = agreed[1] > 0.0   ? STOP_REASONS[(int)agreed[1] - 1]
              : agreed[0] > 0.0 ? STOP_REASONS[STOPPED_BY_CALLBACK]
                                : NULL;
    return ATTN_OK;
}

/* What rank 0 does when the run stops: score the final parameters too (so the model file is
 * the best of all of them), write the model without validation, and the checkpoint. */
static attn_status write_final_files(attn_trainer *t, run_clock *clock)
{
    if (!writes_files(t))
        return ATTN_OK;
    attn_train_event event;
    if (t->valid_batches != NULL && t->last_eval_step != t->step && t->step > 0 && !cancelled(t)) {
        memset(&event, 0, sizeof event);
        attn_status eval_status = evaluate_and_keep_best(t, &event);
        if (eval_status == ATTN_ERR_CANCELLED) {
            ATTN_TRY(finish_cancelled(t, clock));
            return ATTN_ERR_CANCELLED; /* finished: the run reported it */
        }
        ATTN_TRY(eval_status);
        report(t, clock, &event);
    }
    if (t->valid_batches == NULL && t->best_path != NULL)
        ATTN_TRY(attn_trainer_write_model_file(t, t->best_path));
    return save_checkpoint_if_set(t);
}

static attn_status run(attn_trainer *t)
{
    run_clock clock = {t->run_start, 0};
    const char *reason = NULL;
    ATTN_TRY(agree_on_stop(t, &clock, 0, &reason));
    while (reason == NULL) {
        int64_t epoch_before;
        attn_batcher_position(t->train_batches, &epoch_before, NULL);
        attn_train_event event;
        memset(&event, 0, sizeof event);
        attn_status step_status = train_step(t, &event);
        if (step_status == ATTN_ERR_CANCELLED)
            return finish_cancelled(t, &clock);
        ATTN_TRY(step_status);
        if (attn_dist_size(t->dist) > 1 && t->options.check_every > 0 &&
            t->step % t->options.check_every == 0)
            ATTN_TRY(attn_dist_check_same(t->dist, parameter_checksum(t->params), t->step));
        clock.tokens += event.tokens;
        int stop = report(t, &clock, &event);
        t->skipped_in_a_row = event.skipped ? t->skipped_in_a_row + 1 : 0;
        if (t->options.max_skipped_updates > 0 &&
            t->skipped_in_a_row >= t->options.max_skipped_updates)
            return attn_fail(ATTN_ERR_DIVERGED,
                             "training diverged: the last %lld updates (to step %lld) had "
                             "non-finite gradients and were skipped; the run stops without writing "
                             "the model or checkpoint again. Lower the learning rate (or "
                             "lengthen the warm-up) and start again",
                             (long long)t->skipped_in_a_row, (long long)t->step);
        int wrote_checkpoint = 0;
        if (evaluation_due(t, epoch_before)) {
            memset(&event, 0, sizeof event);
            attn_status eval_status = evaluate_and_keep_best(t, &event);
            if (eval_status == ATTN_ERR_CANCELLED)
                return finish_cancelled(t, &clock);
            ATTN_TRY(eval_status);
            stop |= report(t, &clock, &event);
            /* Not over the last good checkpoint while the updates are being skipped. */
            if (t->skipped_in_a_row == 0)
                ATTN_TRY(save_checkpoint_if_set(t));
            wrote_checkpoint = 1;
        }
        if (!wrote_checkpoint && t->options.checkpoint_every > 0 &&
            t->step % t->options.checkpoint_every == 0 && t->skipped_in_a_row == 0)
            ATTN_TRY(save_checkpoint_if_set(t));
        ATTN_TRY(agree_on_stop(t, &clock, stop, &reason));
    }
    attn_status written = write_final_files(t, &clock);
    if (written == ATTN_ERR_CANCELLED)
        return ATTN_OK;
    if (attn_dist_size(t->dist) > 1) {
        /* The other ranks wait for rank 0's files, and fail with it. */
        double failed = written != ATTN_OK ? 1.0 : 0.0;
        char message[1024] = "";
        if (written != ATTN_OK)
            snprintf(message, sizeof message, "%s", attn_last_error());
        ATTN_TRY(attn_dist_sum_doubles(t->dist, &failed, 1));
        if (written != ATTN_OK)
            return attn_fail(written, "%s", message);
        if (failed > 0.0)
            return attn_fail(ATTN_ERR_IO, "data-parallel training: rank 0 could not write the "
                                          "model or checkpoint at the end (its message says why)");
    }
    ATTN_TRY(written);
    attn_train_event event;
    memset(&event, 0, sizeof event);
    event.kind = ATTN_TRAIN_EVENT_DONE;
    event.loss = t->last_loss;
    event.stop_reason = reason;
    report(t, &clock, &event);
    return ATTN_OK;
}

void attn_trainer_set_cancel_flag(attn_trainer *trainer, const volatile sig_atomic_t *flag)
{
    if (trainer == NULL)
        return;
    trainer->cancel_flag = flag;
    attn_graph_set_cancel_flag(trainer->graph, flag);
}

attn_status attn_trainer_run(attn_trainer *trainer)
{
    ATTN_CHECK_NOT_NULL(trainer);
    trainer->run_start = now_seconds();
    attn_status status = run(trainer);
    /* Counted on failure too: the time was spent, and a checkpoint may already hold it. */
    trainer->train_seconds += now_seconds() - trainer->run_start;
    trainer->run_start = -1.0;
    return status;
}
