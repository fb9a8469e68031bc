/* Exponential smoothing of the weights (attn_ema_update, attn_trainer_options.ema): the update
 * against a double-precision recomputation, the trainer's average against one recomputed from
 * the weights after each update, validation and the model file on the average with the
 * training weights left alone (fp32 and bf16), exact resume, and the refusals. A tiny
 * Transformer on a small reversal corpus keeps every run short. */
#include "trainer_fixture.h"
#include "../models/models_testing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- attn_ema_update ------------------------------------------------------------------------ */

static double reference_decay(double rate, int64_t updates_before)
{
    const double t = (double)updates_before;
    const double warm = 1.0 - (t + 1.0) / (t + 10.0);
    return rate > warm ? rate : warm;
}

/* Twenty updates cross from the warm-up term (9 / (t + 10)) to the rate (0.3 from t = 20 on,
 * here from t = 21): each step against double arithmetic on the same float inputs, with the
 * float result's two roundings as the only difference. */
static void test_update_matches_double(void)
{
    enum { N = 1000, STEPS = 40 };
    const double rate = 0.3;
    float *smoothed = test_alloc(N * sizeof(float)), *values = test_alloc(N * sizeof(float));
    double *expected = test_alloc(N * sizeof(double));
    attn_rng rng;
    attn_rng_seed(&rng, 7);
    for (int i = 0; i < N; i++) {
        smoothed[i] = attn_rng_uniform(&rng) * 4.0f - 2.0f;
        expected[i] = smoothed[i];
    }
    double worst = 0.0;
    for (int64_t t = 0; t < STEPS; t++) {
        for (int i = 0; i < N; i++)
            values[i] = attn_rng_uniform(&rng) * 4.0f - 2.0f;
        CHECK_OK(attn_ema_update(N, smoothed, values, rate, t));
        const double d = reference_decay(rate, t);
        for (int i = 0; i < N; i++) {
            /* From the float average before this step (in expected), so errors do not pile
             * up and each step is checked on its own. */
            const double want = (1.0 - d) * expected[i] + d * (double)values[i];
            const double error = fabs((double)smoothed[i] - want);
            if (error > worst)
                worst = error;
            expected[i] = smoothed[i];
        }
    }
    /* |S|, |W| <= 2: two products and a sum rounded, and the factors' roundings: a few ulps. */
    CHECK(worst <= 4.0 * 2.0 * 0x1p-23, "the float update is within a few ulps of double (%g)",
          worst);
    free(smoothed);
    free(values);
    free(expected);
}

/* The decay itself: 0.9 at the first update, the rate once 9 / (t + 10) falls below it. */
static void test_update_uses_marians_decay(void)
{
    float s = 0.0f;
    const float w = 1.0f;
    CHECK_OK(attn_ema_update(1, &s, &w, 1e-4, 0));
    CHECK(s == 0.9f, "d = 0.9 at t = 0 (%.9g)", (double)s);
    s = 0.0f;
    CHECK_OK(attn_ema_update(1, &s, &w, 1e-4, 80));
    CHECK(s == (float)(9.0 / 90.0), "d = 9 / 90 at t = 80 (%.9g)", (double)s);
    s = 0.0f;
    CHECK_OK(attn_ema_update(1, &s, &w, 0.25, 80));
    CHECK(s == 0.25f, "d = the rate once it is larger (%.9g)", (double)s);
}

/* Every element on its own: the thread count changes no bit. */
static void test_update_ignores_thread_count(void)
{
    enum { N = 300001 };
    float *a = test_alloc(N * sizeof(float)), *b = test_alloc(N * sizeof(float));
    float *w = test_alloc(N * sizeof(float));
    attn_rng rng;
    attn_rng_seed(&rng, 9);
    for (int i = 0; i < N; i++) {
        a[i] = b[i] = attn_rng_uniform(&rng);
        w[i] = attn_rng_uniform(&rng);
    }
    attn_set_num_threads(1);
    CHECK_OK(attn_ema_update(N, a, w, 1e-3, 5000));
    attn_set_num_threads(3);
    CHECK_OK(attn_ema_update(N, b, w, 1e-3, 5000));
    attn_set_num_threads(1);
    CHECK(memcmp(a, b, N * sizeof(float)) == 0, "1 and 3 threads give the same bits");
    free(a);
    free(b);
    free(w);
}

static void test_update_refuses_bad_arguments(void)
{
    float s[4] = {0}, w[4] = {0};
    CHECK_FAILS(attn_ema_update(4, s, w, 1.0, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "[0, 1)") != NULL, "the message gives the range: %s",
          attn_last_error());
    CHECK_FAILS(attn_ema_update(4, s, w, -0.1, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_ema_update(4, s, w, NAN, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_ema_update(4, s, w, 0.1, -1), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_ema_update(-1, s, w, 0.1, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_ema_update(4, s, s + 2, 0.1, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_ema_update(4, NULL, w, 0.1, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_ema_update(0, NULL, NULL, 0.1, 0));
}

/* ---- the trainer ------------------------------------------------------------------------------
 */

enum { STEPS = 8 };

static trainer_fixture fx;

static void make_fixture(void)
{
    trainer_fixture_make(&fx);
}

static void free_fixture(void)
{
    trainer_fixture_free(&fx);
}

static const char *const FILE_NAMES[] = {"a.safetensors", "a.ckpt.safetensors", "b.safetensors",
                                         "b.ckpt.safetensors"};

static const char *scratch_path(int which)
{
    return test_scratch_path(FILE_NAMES[which]);
}

/* Shuffling, dropout, accumulation, AdamW and clipping: what exact resume must carry. A rate
 * of 0.25 takes over from 9 / (t + 10) only at t = 27, so the short runs below use the warm-up
 * term; test_update_uses_marians_decay covers the other. */
static attn_trainer_options ema_options(double ema)
{
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 96;
    o.seed = 42;
    o.accumulate = 2;
    o.adam = attn_adam_default_options(ATTN_ADAMW);
    o.schedule.kind = ATTN_LR_CONSTANT;
    o.schedule.lr = 3e-3;
    o.clip_norm = 0.5;
    o.max_epochs = 0;
    o.max_steps = STEPS;
    o.ema = ema;
    o.metadata = fx.metadata;
    o.n_metadata = 2;
    return o;
}

/* The weights after each update, in double, to recompute the average from. */
typedef struct weights_seen {
    attn_params *params; /* during the run only */
    int64_t n;
    double *after[STEPS + 1]; /* [0]: before the first update */
    int updates, skipped;
    double eval_loss;
    int evals;
} weights_seen;

static double *copy_as_double(const attn_params *p)
{
    const size_t n = attn_params_buffer_floats(p);
    const float *values = attn_params_buffer(p, ATTN_PARAM_VALUES);
    double *copy = test_alloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++)
        copy[i] = values[i];
    return copy;
}

static int record_weights(const attn_train_event *e, void *user)
{
    weights_seen *w = user;
    if (e->kind == ATTN_TRAIN_EVENT_STEP) {
        w->skipped += e->skipped;
        if (!e->skipped && w->updates < STEPS)
            w->after[++w->updates] = copy_as_double(w->params);
    }
    if (e->kind == ATTN_TRAIN_EVENT_EVAL) {
        w->eval_loss = e->loss;
        w->evals++;
    }
    return 0;
}

static void free_weights(weights_seen *w)
{
    for (int i = 0; i <= STEPS; i++)
        free(w->after[i]);
}

/* One run from a fresh model (init seed 1); the final weights W (malloc'ed) if asked. */
static void train(attn_trainer_options o, const attn_corpus *valid, weights_seen *seen,
                  float **final_weights)
{
    attn_model *m = new_model(&fx.config, 1, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    if (seen != NULL) {
        memset(seen, 0, sizeof *seen);
        seen->params = attn_model_params(m);
        seen->n = (int64_t)attn_params_buffer_floats(seen->params);
        seen->after[0] = copy_as_double(seen->params);
        o.callback = record_weights;
        o.callback_user = seen;
    }
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, valid, &o, &t));
    CHECK_OK(attn_trainer_run(t));
    if (final_weights != NULL) {
        const size_t n = attn_params_buffer_floats(attn_model_params(m));
        *final_weights = test_alloc(n * sizeof(float));
        memcpy(*final_weights, attn_params_buffer(attn_model_params(m), ATTN_PARAM_VALUES),
               n * sizeof(float));
    }
    attn_trainer_destroy(t);
    attn_model_destroy(m);
}

/* The values a file holds under prefix (NULL: the weights' own names), as a model's buffer. */
static float *read_values(const char *path, const char *prefix)
{
    attn_model *m = new_model(&fx.config, 3, MODEL_OWN_INIT);
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    attn_params *p = attn_model_params(m);
    CHECK_OK(attn_params_load(p, file, ATTN_PARAM_VALUES, prefix));
    attn_tensor_file_close(file);
    const size_t n = attn_params_buffer_floats(p);
    float *values = test_alloc(n * sizeof(float));
    memcpy(values, attn_params_buffer(p, ATTN_PARAM_VALUES), n * sizeof(float));
    attn_model_destroy(m);
    return values;
}

/* The model file holds the average of the weights after each update, by Marian's formula in
 * double; the checkpoint holds the weights and that average. */
static void test_model_file_holds_the_average(void)
{
    const double rate = 0.25;
    attn_trainer_options o = ema_options(rate);
    o.best_path = scratch_path(0);
    o.checkpoint_path = scratch_path(1);
    static weights_seen seen;
    float *weights = NULL;
    train(o, NULL, &seen, &weights);
    CHECK(seen.updates == STEPS && seen.skipped == 0, "%d updates, none skipped (%d, %d)", STEPS,
          seen.updates, seen.skipped);
    const int64_t n = seen.n;
    double *expected = test_alloc((size_t)n * sizeof(double));
    memcpy(expected, seen.after[0], (size_t)n * sizeof(double));
    for (int64_t t = 0; t < seen.updates; t++) {
        const double d = reference_decay(rate, t);
        for (int64_t i = 0; i < n; i++)
            expected[i] = (1.0 - d) * expected[i] + d * seen.after[t + 1][i];
    }
    float *model = read_values(scratch_path(0), NULL);
    double worst = 0.0, moved = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double error = fabs((double)model[i] - expected[i]) / (1.0 + fabs(expected[i]));
        worst = error > worst ? error : worst;
        const double gap = fabs((double)weights[i] - expected[i]);
        moved = gap > moved ? gap : moved;
    }
    CHECK(worst < 1e-6, "the model file is the average recomputed in double (error %g)", worst);
    CHECK(moved > 1e-4, "and not the last weights (they differ by up to %g)", moved);
    float *checkpoint_weights = read_values(scratch_path(1), NULL);
    float *checkpoint_average = read_values(scratch_path(1), ATTN_CHECKPOINT_EMA_PREFIX);
    CHECK(memcmp(checkpoint_weights, weights, (size_t)n * sizeof(float)) == 0,
          "the checkpoint holds the training weights");
    CHECK(memcmp(checkpoint_average, model, (size_t)n * sizeof(float)) == 0,
          "and the average, the model file's bits");
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(scratch_path(1), &file));
    attn_trainer_options stored = attn_trainer_default_options();
    CHECK_OK(attn_trainer_options_from_checkpoint(file, &stored));
    CHECK(stored.ema == rate, "the checkpoint stores the rate (%g)", stored.ema);
    attn_tensor_file_close(file);
    free(expected);
    free(model);
    free(weights);
    free(checkpoint_weights);
    free(checkpoint_average);
    free_weights(&seen);
}

/* Validation scores the average (a model loaded from the file scores the same bits), and
 * swapping it in and out leaves training as it was: the weights of a run that validated after
 * every update equal those of a run that never did. In bf16 too, where products read packed
 * copies of the weights that must follow the swaps. */
static void check_validation_scores_the_average(attn_precision precision)
{
    attn_trainer_options o = ema_options(0.25);
    o.precision = precision;
    o.best_path = scratch_path(2);
    o.eval_every = 1;
    static weights_seen seen;
    float *validated = NULL, *unvalidated = NULL;
    train(o, fx.valid, &seen, &validated);
    CHECK(seen.evals == STEPS, "%s: one validation per update (%d)", attn_precision_name(precision),
          seen.evals);
    o.best_path = NULL;
    train(o, NULL, NULL, &unvalidated);
    const size_t n = (size_t)seen.n; /* the store itself is gone with its model */
    CHECK(memcmp(validated, unvalidated, n * sizeof(float)) == 0,
          "%s: validating the average leaves the training weights' bits alone",
          attn_precision_name(precision));

    /* The last validation's loss, of the model file when it was a new best; score the file. */
    o = ema_options(0.25);
    o.precision = precision;
    o.eval_every = 100; /* only the final validation: the model file is that step's average */
    o.best_path = scratch_path(2);
    free_weights(&seen);
    train(o, fx.valid, &seen, NULL);
    attn_model *m = NULL;
    CHECK_OK(attn_model_load(scratch_path(2), &m));
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer_options plain = attn_trainer_default_options();
    plain.batch_tokens = o.batch_tokens;
    plain.seed = o.seed;
    plain.precision = precision;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &plain, &t));
    double loss, accuracy;
    CHECK_OK(attn_trainer_evaluate(t, &loss, &accuracy));
    CHECK(seen.evals == 1 && loss == seen.eval_loss,
          "%s: the validation loss is the model file's (%.17g vs %.17g)",
          attn_precision_name(precision), seen.eval_loss, loss);
    attn_trainer_destroy(t);
    attn_model_destroy(m);
    free(validated);
    free(unvalidated);
    free_weights(&seen);
}

static void test_validation_scores_the_average(void)
{
    check_validation_scores_the_average(ATTN_PRECISION_FP32);
    check_validation_scores_the_average(ATTN_PRECISION_BF16);
}

static unsigned char *read_bytes(const char *path, long *size)
{
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "open %s", path);
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    *size = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *bytes = test_alloc((size_t)*size + 1);
    CHECK(fread(bytes, 1, (size_t)*size, f) == (size_t)*size, "read %s", path);
    fclose(f);
    return bytes;
}

/* STEPS updates at once, or STEPS / 2, a checkpoint, and the rest in a new trainer over a model
 * initialised otherwise: the same model file, byte for byte, and the same checkpoint tensors. */
static void check_resume(int threads)
{
    attn_set_num_threads(threads);
    attn_trainer_options o = ema_options(0.25);
    o.best_path = scratch_path(0);
    o.checkpoint_path = scratch_path(1);
    train(o, NULL, NULL, NULL);

    o.best_path = scratch_path(2);
    o.checkpoint_path = scratch_path(3);
    o.max_steps = STEPS / 2;
    train(o, NULL, NULL, NULL);
    attn_model *m = new_model(&fx.config, 999, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    o.max_steps = STEPS;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    CHECK_OK(attn_trainer_resume(t, scratch_path(3)));
    CHECK_OK(attn_trainer_run(t));
    attn_trainer_destroy(t);
    attn_model_destroy(m);

    long whole_size = 0, resumed_size = 0;
    unsigned char *whole = read_bytes(scratch_path(0), &whole_size);
    unsigned char *resumed = read_bytes(scratch_path(2), &resumed_size);
    CHECK(whole != NULL && resumed != NULL && whole_size == resumed_size &&
              memcmp(whole, resumed, (size_t)whole_size) == 0,
          "%d threads: the resumed run's model file equals the whole run's, byte for byte",
          threads);
    float *a = read_values(scratch_path(1), ATTN_CHECKPOINT_EMA_PREFIX);
    float *b = read_values(scratch_path(3), ATTN_CHECKPOINT_EMA_PREFIX);
    float *wa = read_values(scratch_path(1), NULL);
    float *wb = read_values(scratch_path(3), NULL);
    m = new_model(&fx.config, 1, MODEL_OWN_INIT);
    const size_t n = attn_params_buffer_floats(attn_model_params(m));
    attn_model_destroy(m);
    CHECK(memcmp(a, b, n * sizeof(float)) == 0 && memcmp(wa, wb, n * sizeof(float)) == 0,
          "%d threads: and its checkpoint's weights and average", threads);
    free(whole);
    free(resumed);
    free(a);
    free(b);
    free(wa);
    free(wb);
    attn_set_num_threads(1);
}

static void test_resume_is_exact(void)
{
    check_resume(1);
    check_resume(2);
}

static void test_resume_refuses_another_rate(void)
{
    /* A checkpoint without the average. */
    attn_trainer_options o = ema_options(0.0);
    o.checkpoint_path = scratch_path(1);
    o.max_steps = 2;
    train(o, NULL, NULL, NULL);
    attn_model *m = new_model(&fx.config, 1, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer *t = NULL;
    attn_trainer_options other = ema_options(1e-3);
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, scratch_path(1)), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "had no ema") != NULL &&
              strstr(attn_last_error(), "no smoothed weights") != NULL,
          "a checkpoint without ema: the message says why: %s", attn_last_error());
    attn_trainer_destroy(t);

    /* One with it, resumed at another rate or without. */
    o = ema_options(0.25);
    o.checkpoint_path = scratch_path(1);
    o.max_steps = 2;
    train(o, NULL, NULL, NULL);
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, scratch_path(1)), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "ema (the smoothing rate) is 0.25") != NULL &&
              strstr(attn_last_error(), "0.001") != NULL,
          "another rate is named: %s", attn_last_error());
    attn_trainer_destroy(t);
    other = ema_options(0.0);
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, scratch_path(1)), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "is 0.25 in the checkpoint but 0 here") != NULL,
          "resuming without ema is refused too: %s", attn_last_error());
    attn_trainer_destroy(t);
    attn_model_destroy(m);
}

static void test_rate_out_of_range(void)
{
    attn_model *m = new_model(&fx.config, 1, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    const double bad[] = {1.0, 1.5, -1e-3, NAN, INFINITY};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_trainer_options o = ema_options(bad[i]);
        attn_trainer *t = (attn_trainer *)&model; /* must come back NULL */
        CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &o, &t), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(t == NULL && strstr(attn_last_error(), "ema") != NULL &&
                  strstr(attn_last_error(), "[0, 1)") != NULL,
              "ema %g is refused, naming the range: %s", bad[i], attn_last_error());
    }
    attn_model_destroy(m);
}

int main(void)
{
    attn_set_num_threads(1);
    RUN_TEST(test_update_matches_double);
    RUN_TEST(test_update_uses_marians_decay);
    RUN_TEST(test_update_ignores_thread_count);
    RUN_TEST(test_update_refuses_bad_arguments);
    make_fixture();
    RUN_TEST(test_model_file_holds_the_average);
    RUN_TEST(test_validation_scores_the_average);
    RUN_TEST(test_resume_is_exact);
    RUN_TEST(test_resume_refuses_another_rate);
    RUN_TEST(test_rate_out_of_range);
    free_fixture();
    return test_summary();
}
