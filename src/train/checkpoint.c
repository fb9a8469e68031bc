/* The trainer's files: the model file, the checkpoint (values, Adam moments and the training
 * state as JSON in the metadata) and resuming from it. */
#include "train/loop_internal.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_FORMAT "attn-train-state"
#define STATE_VERSION 1

static const char *const schedule_names[] = {"constant", "noam", "inverse_sqrt", "cosine"};
static const char *const variant_names[] = {"adam", "adamw"};
#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* How the trainer chose the parameters exempt from weight decay. */
static const char *decay_exemption(const attn_trainer *t)
{
    if (t->no_decay != NULL)
        return "vectors";
    return t->options.adam.no_decay_count > 0 ? "caller" : "none";
}

/* ---- writing JSON -------------------------------------------------------------------------- */

static attn_status json_failed(const char *fn)
{
    return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory while writing JSON", fn);
}

static int add_string(cJSON *object, const char *name, const char *value)
{
    return cJSON_AddStringToObject(object, name, value) != NULL;
}

static int add_number(cJSON *object, const char *name, double value)
{
    return attn_json_add_exact_number(object, name, value);
}

static int add_u64(cJSON *object, const char *name, uint64_t value, int hex)
{
    char text[32];
    snprintf(text, sizeof text, hex ? "%016" PRIx64 : "%" PRIu64, value);
    return add_string(object, name, text);
}

static int add_options(cJSON *object, const attn_trainer *t)
{
    const attn_trainer_options *o = &t->options;
    cJSON *adam = cJSON_CreateObject(), *schedule = cJSON_CreateObject();
    int ok = adam != NULL && schedule != NULL;
    ok = ok && add_number(object, "batch_tokens", (double)o->batch_tokens);
    ok = ok && cJSON_AddBoolToObject(object, "shuffle", o->shuffle != 0) != NULL;
    ok = ok && add_u64(object, "seed", o->seed, 0);
    ok = ok && add_number(object, "accumulate", (double)o->accumulate);
    ok = ok && add_number(object, "clip_norm", o->clip_norm);
    ok = ok && add_string(object, "precision", attn_precision_name(o->precision));
    /* Absent when off, as in the checkpoints of builds before it. */
    if (t->train_stream != NULL) {
        ok = ok && add_number(object, "batch_sequences", (double)o->batch_sequences);
        ok = ok && add_number(object, "context", (double)o->context);
    }
    if (o->ema > 0.0)
        ok = ok && add_number(object, "ema", o->ema);
    if (o->teacher_weight > 0.0)
        ok = ok && add_number(object, "teacher_weight", o->teacher_weight);
    if (o->spm_alpha > 0.0) {
        ok = ok && add_number(object, "spm_alpha", o->spm_alpha);
        ok = ok && add_number(object, "spm_nbest", (double)o->spm_nbest);
    }
    if (o->frozen_floats > 0)
        ok = ok && add_number(object, "frozen_floats", (double)o->frozen_floats);
    ok = ok && add_string(adam, "variant", variant_names[o->adam.variant]);
    ok = ok && add_number(adam, "beta1", o->adam.beta1);
    ok = ok && add_number(adam, "beta2", o->adam.beta2);
    ok = ok && add_number(adam, "eps", o->adam.eps);
    ok = ok && add_number(adam, "weight_decay", o->adam.weight_decay);
    ok = ok && add_string(adam, "decay_exempt", decay_exemption(t));
    ok = ok && add_string(schedule, "kind", schedule_names[o->schedule.kind]);
    ok = ok && add_number(schedule, "lr", o->schedule.lr);
    ok = ok && add_number(schedule, "factor", o->schedule.factor);
    ok = ok && add_number(schedule, "d_model", (double)o->schedule.d_model);
    ok = ok && add_number(schedule, "warmup_steps", (double)o->schedule.warmup_steps);
    ok = ok && add_number(schedule, "total_steps", (double)o->schedule.total_steps);
    ok = ok && add_number(schedule, "min_lr", o->schedule.min_lr);
    ok = ok && add_number(schedule, "total_seconds", o->schedule.total_seconds);
    ok = ok && add_number(schedule, "warmup_share", o->schedule.warmup_share);
    if (ok) {
        cJSON_AddItemToObject(object, "optimizer", adam);
        cJSON_AddItemToObject(object, "schedule", schedule);
        return 1;
    }
    cJSON_Delete(adam);
    cJSON_Delete(schedule);
    return 0;
}

attn_status attn_trainer_state_json(const attn_trainer *t, char **json)
{
    static const char fn[] = "attn_trainer_save_checkpoint";
    int64_t epoch, batch_index;
    attn_batcher_position(t->train_batches, &epoch, &batch_index);
    cJSON *root = cJSON_CreateObject(), *options = cJSON_CreateObject();
    int ok = root != NULL && options != NULL;
    ok = ok && add_string(root, "format", STATE_FORMAT);
    ok = ok && add_number(root, "version", STATE_VERSION);
    ok = ok && add_number(root, "step", (double)t->step);
    ok = ok && add_number(root, "adam_step", (double)t->adam_step);
    ok = ok && add_number(root, "epoch", (double)epoch);
    ok = ok && add_number(root, "batch_index", (double)batch_index);
    if (ok && isfinite(t->best_valid_loss))
        ok = add_number(root, "best_valid_loss", t->best_valid_loss);
    else if (ok)
        ok = cJSON_AddNullToObject(root, "best_valid_loss") != NULL;
    ok = ok && add_number(root, "best_step", (double)t->best_step);
    ok = ok && add_number(root, "evals_since_best", (double)t->evals_since_best);
    ok = ok && add_number(root, "last_eval_step", (double)t->last_eval_step);
    ok = ok && add_number(root, "train_seconds", attn_trainer_seconds(t));
    ok = ok && add_number(root, t->train_stream != NULL ? "train_tokens" : "train_pairs",
                          (double)t->train_size);
    ok = ok && add_u64(root, "data_fingerprint", t->data_fingerprint, 1);
    /* Where the run was made: resuming elsewhere works, but only the same thread count and
     * instruction set reproduce the curve to the bit. */
    ok = ok && add_number(root, "threads", attn_get_num_threads());
    ok = ok && add_string(root, "isa", attn_isa_name(attn_get_isa()));
    ok = ok && add_options(options, t);
    if (ok) {
        cJSON_AddItemToObject(root, "options", options);
        options = NULL;
        *json = cJSON_PrintUnformatted(root);
        ok = *json != NULL;
    }
    cJSON_Delete(options);
    cJSON_Delete(root);
    return ok ? ATTN_OK : json_failed(fn);
}

static attn_status summary_json(const attn_trainer *t, char **json)
{
    int64_t epoch;
    attn_batcher_position(t->train_batches, &epoch, NULL);
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL;
    ok = ok && add_number(root, "step", (double)t->step);
    ok = ok && add_number(root, "epoch", (double)epoch);
    /* The precision the products used, which auto chose by the processor: the file tells. */
    ok = ok && add_string(root, "precision", attn_precision_name(t->options.precision));
    if (ok && isfinite(t->last_loss))
        ok = add_number(root, "train_loss", t->last_loss);
    if (ok && t->valid_batches != NULL && isfinite(t->best_valid_loss)) {
        ok = add_number(root, "valid_loss", t->best_valid_loss);
        ok = ok && add_number(root, "valid_accuracy", t->last_valid_accuracy);
    }
    if (ok) {
        *json = cJSON_PrintUnformatted(root);
        ok = *json != NULL;
    }
    cJSON_Delete(root);
    return ok ? ATTN_OK : json_failed("attn_trainer_write_model_file");
}

/* ---- the files ------------------------------------------------------------------------------- */

/* config, the caller's entries, then one entry of the trainer's (state or summary). */
static attn_status write_file(attn_trainer *t, const char *path, size_t n_tensors,
                              const char *last_key, const char *last_value)
{
    static const char fn[] = "attn_trainer_write";
    char *config = NULL;
    ATTN_TRY(t->model.config_json(t->model.self, &config));
    size_t n = t->options.n_metadata + 2;
    attn_metadata_entry *metadata = malloc(n * sizeof *metadata);
    if (metadata == NULL) {
        free(config);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    metadata[0] = (attn_metadata_entry){ATTN_MODEL_CONFIG_KEY, config};
    for (size_t i = 0; i < t->options.n_metadata; i++)
        metadata[i + 1] = t->metadata[i];
    metadata[n - 1] = (attn_metadata_entry){last_key, last_value};
    attn_status status = attn_tensor_file_write(path, t->tensors, n_tensors, metadata, n);
    free(metadata);
    free(config);
    return status;
}

/* Points tensors (described over the values buffer) at the same places in the smoothed
 * weights, under names (NULL: keep the values' names). */
static void point_at_smoothed(const attn_trainer *t, const float *smoothed,
                              attn_named_tensor *tensors, size_t count, char *const *names)
{
    const float *values = attn_params_buffer(t->params, ATTN_PARAM_VALUES);
    for (size_t i = 0; i < count; i++) {
        tensors[i].data = smoothed + ((const float *)tensors[i].data - values);
        if (names != NULL)
            tensors[i].name = names[i];
    }
}

attn_status attn_trainer_write_model_file(attn_trainer *t, const char *path)
{
    size_t count = attn_params_count(t->params);
    ATTN_TRY(attn_params_tensors(t->params, ATTN_PARAM_VALUES, NULL, t->tensors, count));
    const float *smoothed = attn_trainer_smoothed(t);
    if (smoothed != NULL)
        point_at_smoothed(t, smoothed, t->tensors, count, NULL);
    char *summary = NULL;
    ATTN_TRY(summary_json(t, &summary));
    attn_status status = write_file(t, path, count, ATTN_TRAIN_SUMMARY_KEY, summary);
    free(summary);
    return status;
}

attn_status attn_trainer_save_checkpoint(attn_trainer *trainer, const char *path)
{
    ATTN_CHECK_NOT_NULL(trainer);
    ATTN_CHECK_NOT_NULL(path);
    attn_trainer *t = trainer;
    attn_params *store = t->params;
    size_t count = attn_params_count(store);
    ATTN_TRY(attn_params_tensors(store, ATTN_PARAM_VALUES, NULL, t->tensors, count));
    ATTN_TRY(attn_params_tensors(store, ATTN_PARAM_ADAM_M, ATTN_CHECKPOINT_ADAM_M_PREFIX,
                                 t->tensors + count, count));
    ATTN_TRY(attn_params_tensors(store, ATTN_PARAM_ADAM_V, ATTN_CHECKPOINT_ADAM_V_PREFIX,
                                 t->tensors + 2 * count, count));
    size_t n_tensors = 3 * count;
    const float *smoothed = attn_trainer_smoothed(t);
    if (smoothed != NULL) {
        memcpy(t->tensors + n_tensors, t->tensors, count * sizeof *t->tensors);
        point_at_smoothed(t, smoothed, t->tensors + n_tensors, count, t->smoothed_names);
        n_tensors += count;
    }
    char *state = NULL;
    ATTN_TRY(attn_trainer_state_json(t, &state));
    attn_status status = write_file(t, path, n_tensors, ATTN_TRAIN_STATE_KEY, state);
    free(state);
    return status;
}

/* ---- reading JSON -------------------------------------------------------------------------- */

typedef struct json_reader {
    const char *fn;
    const char *path; /* for messages */
} json_reader;

static attn_status field(const json_reader *r, const cJSON *object, const char *name,
                         const cJSON **out)
{
    *out = cJSON_GetObjectItemCaseSensitive(object, name);
    if (*out == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s: the training state has no \"%s\"", r->fn,
                         r->path, name);
    return ATTN_OK;
}

static attn_status read_number(const json_reader *r, const cJSON *object, const char *name,
                               double *out)
{
    const cJSON *item;
    ATTN_TRY(field(r, object, name, &item));
    if (!cJSON_IsNumber(item))
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s: training state field \"%s\" must be a number",
                         r->fn, r->path, name);
    *out = item->valuedouble;
    return ATTN_OK;
}

/* A field that checkpoints of older builds lack, read as `absent` then, so they still load. */
static attn_status read_number_or(const json_reader *r, const cJSON *object, const char *name,
                                  double absent, double *out)
{
    if (cJSON_GetObjectItemCaseSensitive(object, name) == NULL) {
        *out = absent;
        return ATTN_OK;
    }
    return read_number(r, object, name, out);
}

static attn_status read_int(const json_reader *r, const cJSON *object, const char *name,
                            int64_t min, int64_t *out)
{
    double value;
    ATTN_TRY(read_number(r, object, name, &value));
    if (value != floor(value) || value < (double)min || value > 9007199254740992.0)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"%s\" must be an integer >= %lld, got %g",
                         r->fn, r->path, name, (long long)min, value);
    *out = (int64_t)value;
    return ATTN_OK;
}

static attn_status read_string(const json_reader *r, const cJSON *object, const char *name,
                               const char **out)
{
    const cJSON *item;
    ATTN_TRY(field(r, object, name, &item));
    if (!cJSON_IsString(item))
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s: training state field \"%s\" must be a string",
                         r->fn, r->path, name);
    *out = item->valuestring;
    return ATTN_OK;
}

static attn_status read_u64(const json_reader *r, const cJSON *object, const char *name, int hex,
                            uint64_t *out)
{
    const char *text;
    ATTN_TRY(read_string(r, object, name, &text));
    char *end = NULL;
    unsigned long long value = strtoull(text, &end, hex ? 16 : 10);
    if (text[0] == '\0' || text[0] == '-' || text[0] == '+' || *end != '\0')
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"%s\" is not a %s number: \"%s\"", r->fn,
                         r->path, name, hex ? "hexadecimal" : "decimal", text);
    *out = (uint64_t)value;
    return ATTN_OK;
}

static attn_status read_name(const json_reader *r, const cJSON *object, const char *name,
                             const char *const *names, int n_names, int *out)
{
    const char *text;
    ATTN_TRY(read_string(r, object, name, &text));
    for (int i = 0; i < n_names; i++)
        if (strcmp(text, names[i]) == 0) {
            *out = i;
            return ATTN_OK;
        }
    return attn_fail(ATTN_ERR_FORMAT, "%s: %s: training state field \"%s\": unknown value \"%s\"",
                     r->fn, r->path, name, text);
}

static attn_status read_object(const json_reader *r, const cJSON *object, const char *name,
                               const cJSON **out)
{
    ATTN_TRY(field(r, object, name, out));
    if (!cJSON_IsObject(*out))
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s: training state field \"%s\" must be an object",
                         r->fn, r->path, name);
    return ATTN_OK;
}

/* Checkpoints from before mixed precision have no "precision": their runs were fp32. */
static attn_status read_precision(const json_reader *r, const cJSON *options,
                                  attn_precision *precision)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(options, "precision");
    if (item == NULL) {
        *precision = ATTN_PRECISION_FP32;
        return ATTN_OK;
    }
    /* The state holds the precision a run used, never the request auto. */
    if (!cJSON_IsString(item) || attn_precision_parse(item->valuestring, precision) != ATTN_OK ||
        (*precision != ATTN_PRECISION_FP32 && *precision != ATTN_PRECISION_BF16)) {
        attn_clear_error();
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"precision\" must be \"fp32\" or "
                         "\"bf16\"",
                         r->fn, r->path);
    }
    return ATTN_OK;
}

/* The curve-shaping options, and how decay exemptions were chosen. */
static attn_status read_options(const json_reader *r, const cJSON *root, attn_trainer_options *o,
                                const char **exemption)
{
    const cJSON *options, *adam, *schedule, *shuffle;
    ATTN_TRY(read_object(r, root, "options", &options));
    ATTN_TRY(read_int(r, options, "batch_tokens", 1, &o->batch_tokens));
    ATTN_TRY(field(r, options, "shuffle", &shuffle));
    if (!cJSON_IsBool(shuffle))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"shuffle\" must be a "
                         "boolean",
                         r->fn, r->path);
    o->shuffle = cJSON_IsTrue(shuffle);
    ATTN_TRY(read_u64(r, options, "seed", 0, &o->seed));
    ATTN_TRY(read_int(r, options, "accumulate", 1, &o->accumulate));
    ATTN_TRY(read_number(r, options, "clip_norm", &o->clip_norm));
    ATTN_TRY(read_precision(r, options, &o->precision));
    double windows[2];
    ATTN_TRY(read_number_or(r, options, "batch_sequences", 0.0, &windows[0]));
    ATTN_TRY(read_number_or(r, options, "context", 0.0, &windows[1]));
    o->batch_sequences = (int64_t)windows[0];
    o->context = (int64_t)windows[1];
    ATTN_TRY(read_number_or(r, options, "ema", 0.0, &o->ema));
    if (!(o->ema >= 0.0 && o->ema < 1.0))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"ema\" must be in [0, 1), got %g", r->fn,
                         r->path, o->ema);
    ATTN_TRY(read_number_or(r, options, "teacher_weight", 0.0, &o->teacher_weight));
    if (!(o->teacher_weight >= 0.0 && o->teacher_weight <= 1.0))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"teacher_weight\" must be in [0, 1], got "
                         "%g",
                         r->fn, r->path, o->teacher_weight);
    ATTN_TRY(read_number_or(r, options, "spm_alpha", 0.0, &o->spm_alpha));
    if (!(o->spm_alpha >= 0.0 && o->spm_alpha <= 1.0))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"spm_alpha\" must be in [0, 1], got %g",
                         r->fn, r->path, o->spm_alpha);
    double nbest;
    ATTN_TRY(read_number_or(r, options, "spm_nbest", -1.0, &nbest));
    if (!(nbest == -1.0 ||
          (nbest >= 2.0 && nbest <= ATTN_SPM_MAX_NBEST && nbest == floor(nbest))))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"spm_nbest\" must be -1 or a whole "
                         "number in [2, %d], got %g",
                         r->fn, r->path, ATTN_SPM_MAX_NBEST, nbest);
    o->spm_nbest = (int64_t)nbest;
    double frozen;
    ATTN_TRY(read_number_or(r, options, "frozen_floats", 0.0, &frozen));
    if (!(frozen >= 0.0 && frozen <= 9007199254740992.0 && frozen == floor(frozen)))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"frozen_floats\" must be a whole number "
                         ">= 0, got %g",
                         r->fn, r->path, frozen);
    o->frozen_floats = (int64_t)frozen;
    ATTN_TRY(read_object(r, options, "optimizer", &adam));
    int variant = 0, kind = 0;
    ATTN_TRY(read_name(r, adam, "variant", variant_names, COUNT(variant_names), &variant));
    o->adam.variant = (attn_adam_variant)variant;
    ATTN_TRY(read_number(r, adam, "beta1", &o->adam.beta1));
    ATTN_TRY(read_number(r, adam, "beta2", &o->adam.beta2));
    ATTN_TRY(read_number(r, adam, "eps", &o->adam.eps));
    ATTN_TRY(read_number(r, adam, "weight_decay", &o->adam.weight_decay));
    ATTN_TRY(read_string(r, adam, "decay_exempt", exemption));
    o->adam.no_decay = NULL;
    o->adam.no_decay_count = 0;
    ATTN_TRY(read_object(r, options, "schedule", &schedule));
    ATTN_TRY(read_name(r, schedule, "kind", schedule_names, COUNT(schedule_names), &kind));
    o->schedule.kind = (attn_lr_kind)kind;
    ATTN_TRY(read_number(r, schedule, "lr", &o->schedule.lr));
    ATTN_TRY(read_number(r, schedule, "factor", &o->schedule.factor));
    ATTN_TRY(read_int(r, schedule, "d_model", 0, &o->schedule.d_model));
    ATTN_TRY(read_int(r, schedule, "warmup_steps", 0, &o->schedule.warmup_steps));
    ATTN_TRY(read_int(r, schedule, "total_steps", 0, &o->schedule.total_steps));
    ATTN_TRY(read_number(r, schedule, "min_lr", &o->schedule.min_lr));
    ATTN_TRY(read_number_or(r, schedule, "total_seconds", 0.0, &o->schedule.total_seconds));
    ATTN_TRY(read_number_or(r, schedule, "warmup_share", 0.0, &o->schedule.warmup_share));
    return ATTN_OK;
}

static attn_status parse_state(const json_reader *r, const attn_tensor_file *file, cJSON **root)
{
    const char *text;
    if (attn_tensor_file_metadata(file, ATTN_TRAIN_STATE_KEY, &text) != ATTN_OK)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s is not a training checkpoint (no \"%s\" metadata; a model file "
                         "holds no optimizer state to resume from)",
                         r->fn, r->path, ATTN_TRAIN_STATE_KEY);
    *root = cJSON_Parse(text);
    if (*root == NULL || !cJSON_IsObject(*root)) {
        cJSON_Delete(*root);
        *root = NULL;
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s: the training state is not a JSON object", r->fn,
                         r->path);
    }
    const char *format;
    int64_t version;
    attn_status status = read_string(r, *root, "format", &format);
    if (status == ATTN_OK && strcmp(format, STATE_FORMAT) != 0)
        status = attn_fail(ATTN_ERR_FORMAT,
                           "%s: %s: the training state's format is \"%s\", not "
                           "\"%s\"",
                           r->fn, r->path, format, STATE_FORMAT);
    if (status == ATTN_OK)
        status = read_int(r, *root, "version", 1, &version);
    if (status == ATTN_OK && version > STATE_VERSION)
        status = attn_fail(ATTN_ERR_UNSUPPORTED,
                           "%s: %s: training state version %lld is newer "
                           "than this build reads (%d)",
                           r->fn, r->path, (long long)version, STATE_VERSION);
    if (status != ATTN_OK) {
        cJSON_Delete(*root);
        *root = NULL;
    }
    return status;
}

attn_status attn_trainer_options_from_checkpoint(const attn_tensor_file *file,
                                                 attn_trainer_options *options)
{
    static const char fn[] = "attn_trainer_options_from_checkpoint";
    ATTN_CHECK_NOT_NULL(file);
    ATTN_CHECK_NOT_NULL(options);
    json_reader r = {fn, "the file"};
    cJSON *root = NULL;
    ATTN_TRY(parse_state(&r, file, &root));
    attn_trainer_options read = *options;
    const char *exemption;
    attn_status status = read_options(&r, root, &read, &exemption);
    if (status == ATTN_OK)
        *options = read;
    cJSON_Delete(root);
    return status;
}

/* ---- resuming ------------------------------------------------------------------------------ */

static attn_status differs(const json_reader *r, const char *what, const char *stored,
                           const char *ours)
{
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                     "%s: %s: %s is %s in the checkpoint but %s here; exact resume needs the "
                     "run's own settings",
                     r->fn, r->path, what, stored, ours);
}

static attn_status compare_number(const json_reader *r, const char *what, double stored,
                                  double ours)
{
    if (stored == ours)
        return ATTN_OK;
    char a[40], b[40];
    snprintf(a, sizeof a, "%.17g", stored);
    snprintf(b, sizeof b, "%.17g", ours);
    return differs(r, what, a, b);
}

static attn_status compare_options(const json_reader *r, const attn_trainer *t,
                                   const attn_trainer_options *s, const char *exemption)
{
    const attn_trainer_options *o = &t->options;
    ATTN_TRY(compare_number(r, "batch_tokens", (double)s->batch_tokens, (double)o->batch_tokens));
    ATTN_TRY(compare_number(r, "shuffle", s->shuffle != 0, o->shuffle != 0));
    if (s->seed != o->seed) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%" PRIu64, s->seed);
        snprintf(b, sizeof b, "%" PRIu64, o->seed);
        return differs(r, "seed", a, b);
    }
    ATTN_TRY(compare_number(r, "accumulate", (double)s->accumulate, (double)o->accumulate));
    if (t->train_stream != NULL) {
        ATTN_TRY(compare_number(r, "batch_sequences", (double)s->batch_sequences,
                                (double)o->batch_sequences));
        ATTN_TRY(compare_number(r, "context", (double)s->context, (double)o->context));
    }
    ATTN_TRY(compare_number(r, "clip_norm", s->clip_norm, o->clip_norm));
    ATTN_TRY(compare_number(r, "frozen_floats (the frozen encoder)", (double)s->frozen_floats,
                            (double)o->frozen_floats));
    if (s->ema == 0.0 && o->ema > 0.0)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: %s: the checkpoint's run had no ema (exponential smoothing), so it "
                         "holds no smoothed weights to continue; resume it without ema, or start "
                         "a new run with ema",
                         r->fn, r->path);
    ATTN_TRY(compare_number(r, "ema (the smoothing rate)", s->ema, o->ema));
    ATTN_TRY(
        compare_number(r, "teacher_weight (0: no teachers)", s->teacher_weight, o->teacher_weight));
    ATTN_TRY(
        compare_number(r, "spm_alpha (0: no subword regularisation)", s->spm_alpha, o->spm_alpha));
    if (o->spm_alpha > 0.0)
        ATTN_TRY(compare_number(r, "spm_nbest", (double)s->spm_nbest, (double)o->spm_nbest));
    if (s->precision != o->precision)
        return differs(r, "the precision", attn_precision_name(s->precision),
                       attn_precision_name(o->precision));
    if (s->adam.variant != o->adam.variant)
        return differs(r, "the optimizer", variant_names[s->adam.variant],
                       variant_names[o->adam.variant]);
    ATTN_TRY(compare_number(r, "beta1", s->adam.beta1, o->adam.beta1));
    ATTN_TRY(compare_number(r, "beta2", s->adam.beta2, o->adam.beta2));
    ATTN_TRY(compare_number(r, "eps", s->adam.eps, o->adam.eps));
    ATTN_TRY(compare_number(r, "weight_decay", s->adam.weight_decay, o->adam.weight_decay));
    if (strcmp(exemption, decay_exemption(t)) != 0)
        return differs(r, "the weight-decay exemption", exemption, decay_exemption(t));
    if (s->schedule.kind != o->schedule.kind)
        return differs(r, "the schedule", schedule_names[s->schedule.kind],
                       schedule_names[o->schedule.kind]);
    ATTN_TRY(compare_number(r, "the schedule's lr", s->schedule.lr, o->schedule.lr));
    ATTN_TRY(compare_number(r, "the schedule's factor", s->schedule.factor, o->schedule.factor));
    ATTN_TRY(compare_number(r, "the schedule's d_model", (double)s->schedule.d_model,
                            (double)o->schedule.d_model));
    ATTN_TRY(compare_number(r, "warmup_steps", (double)s->schedule.warmup_steps,
                            (double)o->schedule.warmup_steps));
    ATTN_TRY(compare_number(r, "total_steps", (double)s->schedule.total_steps,
                            (double)o->schedule.total_steps));
    ATTN_TRY(compare_number(r, "the schedule's total_seconds", s->schedule.total_seconds,
                            o->schedule.total_seconds));
    ATTN_TRY(compare_number(r, "the schedule's warmup_share", s->schedule.warmup_share,
                            o->schedule.warmup_share));
    return compare_number(r, "min_lr", s->schedule.min_lr, o->schedule.min_lr);
}

static attn_status compare_config(const json_reader *r, attn_trainer *t,
                                  const attn_tensor_file *file)
{
    const char *stored;
    if (attn_tensor_file_metadata(file, ATTN_MODEL_CONFIG_KEY, &stored) != ATTN_OK)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s has no model config (\"%s\" metadata)", r->fn,
                         r->path, ATTN_MODEL_CONFIG_KEY);
    char *ours = NULL;
    ATTN_TRY(t->model.config_json(t->model.self, &ours));
    cJSON *a = cJSON_Parse(stored), *b = cJSON_Parse(ours);
    int same = a != NULL && b != NULL && cJSON_Compare(a, b, 1);
    cJSON_Delete(a);
    cJSON_Delete(b);
    attn_status status = ATTN_OK;
    if (!same)
        status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                           "%s: %s: the checkpoint's model config %s differs from this model's %s",
                           r->fn, r->path, stored, ours);
    free(ours);
    return status;
}

static attn_status load_smoothed(attn_trainer *t, const json_reader *r,
                                 const attn_tensor_file *file)
{
    const size_t count = attn_params_count(t->params);
    for (size_t i = 0; i < count; i++) {
        attn_param_info info;
        ATTN_TRY(attn_params_info(t->params, (attn_param_id)i, &info));
        const char *name = t->smoothed_names[i];
        float *smoothed = t->smoothed + info.offset;
        if (!attn_tensor_file_contains(file, name))
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s: the checkpoint's run had ema but the file has no smoothed "
                             "weights \"%s\"",
                             r->fn, r->path, name);
        ATTN_TRY(attn_tensor_file_read_f32(file, name, info.ndim, info.shape, smoothed));
        for (int64_t j = 0; j < info.numel; j++)
            if (!isfinite(smoothed[j]))
                return attn_fail(ATTN_ERR_FORMAT,
                                 "%s: %s: tensor '%s' holds %g at element %lld; the checkpoint is "
                                 "corrupted",
                                 r->fn, r->path, name, (double)smoothed[j], (long long)j);
    }
    return ATTN_OK;
}

static attn_status restore(attn_trainer *t, const json_reader *r, const attn_tensor_file *file,
                           const cJSON *root)
{
    ATTN_TRY(compare_config(r, t, file));
    int64_t size;
    uint64_t stored_fingerprint;
    const char *unit = t->train_stream != NULL ? "tokens" : "pairs";
    const char *key = t->train_stream != NULL ? "train_tokens" : "train_pairs";
    if (cJSON_GetObjectItemCaseSensitive(root, key) == NULL)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: %s: the checkpoint's run trained on %s, this one on %s: resume it "
                         "with the same task",
                         r->fn, r->path,
                         t->train_stream != NULL ? "pairs" : "a token stream (a language model)",
                         t->train_stream != NULL ? "a token stream (a language model)" : "pairs");
    ATTN_TRY(read_int(r, root, key, 0, &size));
    ATTN_TRY(read_u64(r, root, "data_fingerprint", 1, &stored_fingerprint));
    if (size != t->train_size || stored_fingerprint != t->data_fingerprint)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: %s: the training data differ from the checkpoint's run (%lld %s "
                         "there, %lld here%s); exact resume needs the same data and tokenizers",
                         r->fn, r->path, (long long)size, unit, (long long)t->train_size,
                         size == t->train_size ? ", with other contents" : "");
    attn_trainer_options stored = t->options;
    const char *exemption;
    ATTN_TRY(read_options(r, root, &stored, &exemption));
    ATTN_TRY(compare_options(r, t, &stored, exemption));

    int64_t step, adam_step, epoch, batch_index, best_step, evals_since_best, last_eval_step;
    ATTN_TRY(read_int(r, root, "step", 0, &step));
    ATTN_TRY(read_int(r, root, "adam_step", 0, &adam_step));
    ATTN_TRY(read_int(r, root, "epoch", 0, &epoch));
    ATTN_TRY(read_int(r, root, "batch_index", 0, &batch_index));
    ATTN_TRY(read_int(r, root, "best_step", 0, &best_step));
    ATTN_TRY(read_int(r, root, "evals_since_best", 0, &evals_since_best));
    ATTN_TRY(read_int(r, root, "last_eval_step", -1, &last_eval_step));
    double best = INFINITY;
    const cJSON *best_item;
    ATTN_TRY(field(r, root, "best_valid_loss", &best_item));
    if (!cJSON_IsNull(best_item))
        ATTN_TRY(read_number(r, root, "best_valid_loss", &best));
    double train_seconds;
    ATTN_TRY(read_number_or(r, root, "train_seconds", 0.0, &train_seconds));
    if (!(train_seconds >= 0.0 && isfinite(train_seconds)))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: training state field \"train_seconds\" must be finite and "
                         ">= 0, got %g",
                         r->fn, r->path, train_seconds);
    if (adam_step > step || best_step > step || last_eval_step > step)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: inconsistent training state (step %lld, adam_step %lld, "
                         "best_step %lld, last_eval_step %lld)",
                         r->fn, r->path, (long long)step, (long long)adam_step,
                         (long long)best_step, (long long)last_eval_step);
    if (attn_batcher_seek(t->train_batches, epoch, batch_index) != ATTN_OK)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s: the checkpoint's position (epoch %lld, batch "
                         "%lld) is not in the training data",
                         r->fn, r->path, (long long)epoch, (long long)batch_index);

    attn_params *store = t->params;
    ATTN_TRY(attn_params_load(store, file, ATTN_PARAM_VALUES, NULL));
    ATTN_TRY(attn_params_load(store, file, ATTN_PARAM_ADAM_M, ATTN_CHECKPOINT_ADAM_M_PREFIX));
    ATTN_TRY(attn_params_load(store, file, ATTN_PARAM_ADAM_V, ATTN_CHECKPOINT_ADAM_V_PREFIX));
    if (t->smoothed != NULL) {
        ATTN_TRY(load_smoothed(t, r, file));
        t->smoothed_ready = 1;
    }
    t->step = step;
    t->adam_step = adam_step;
    t->best_valid_loss = best;
    t->best_step = best_step;
    t->evals_since_best = evals_since_best;
    t->last_eval_step = last_eval_step;
    t->train_seconds = train_seconds;
    return ATTN_OK;
}

static attn_status resume_from(attn_trainer *trainer, const attn_tensor_file *file,
                               const json_reader *r)
{
    cJSON *root = NULL;
    attn_status status = parse_state(r, file, &root);
    if (status == ATTN_OK)
        status = restore(trainer, r, file, root);
    cJSON_Delete(root);
    return status;
}

attn_status attn_trainer_resume_from_file(attn_trainer *trainer, const attn_tensor_file *file,
                                          const char *name)
{
    ATTN_CHECK_NOT_NULL(trainer);
    ATTN_CHECK_NOT_NULL(file);
    json_reader r = {"attn_trainer_resume_from_file", name != NULL ? name : "the file"};
    return resume_from(trainer, file, &r);
}

attn_status attn_trainer_resume(attn_trainer *trainer, const char *checkpoint_path)
{
    ATTN_CHECK_NOT_NULL(trainer);
    ATTN_CHECK_NOT_NULL(checkpoint_path);
    attn_tensor_file *file = NULL;
    ATTN_TRY(attn_tensor_file_open(checkpoint_path, &file));
    json_reader r = {"attn_trainer_resume", checkpoint_path};
    attn_status status = resume_from(trainer, file, &r);
    attn_tensor_file_close(file);
    return status;
}
