/* The training loop's mechanics: exact resume, determinism, gradient accumulation against a
 * hand-made step, the files it writes, stopping rules, skipped steps, arena reuse, argument
 * and checkpoint errors; greedy decoding against a decoder re-run over each prefix. A tiny
 * Transformer (and tiny RNNs) on a small reversal corpus (trainer_fixture.h) keeps every run
 * short. */
#include "trainer_fixture.h"
#include "../models/models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- fixture ------------------------------------------------------------------------------- */

enum { MAX_STEPS = 24 };

static trainer_fixture fx;

/* The precision busy_options() trains in (the bf16 tests switch it). */
static attn_precision fx_precision = ATTN_PRECISION_FP32;

static void make_fixture(void)
{
    trainer_fixture_make(&fx);
}

static void free_fixture(void)
{
    trainer_fixture_free(&fx);
}

/* Options that exercise every curve-shaping feature: shuffling, dropout, accumulation,
 * AdamW with exempt vectors, clipping that bites, a warm-up schedule. */
static attn_trainer_options busy_options(void)
{
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 96;
    o.seed = 42;
    o.accumulate = 2;
    o.adam = attn_adam_default_options(ATTN_ADAMW);
    o.schedule.kind = ATTN_LR_COSINE;
    o.schedule.lr = 3e-3;
    o.schedule.warmup_steps = 4;
    o.schedule.total_steps = 40;
    o.clip_norm = 0.5;
    o.precision = fx_precision;
    o.max_epochs = 0;
    o.max_steps = MAX_STEPS;
    o.eval_every = 5;
    o.metadata = fx.metadata;
    o.n_metadata = 2;
    return o;
}

/* Everything the callback saw. */
typedef struct recording {
    double loss[4 * MAX_STEPS + 1]; /* by step */
    double grad_norm[4 * MAX_STEPS + 1];
    int steps_seen, evals_seen, skipped_seen;
    int64_t last_step, last_epoch;
    char stop_reason[32];
    int64_t stop_at; /* ask to stop at this step (0: never) */
    double best_valid_loss;
} recording;

static int record_event(const attn_train_event *e, void *user)
{
    recording *r = user;
    if (e->kind == ATTN_TRAIN_EVENT_STEP) {
        if (e->step >= 0 && e->step <= 4 * MAX_STEPS) {
            r->loss[e->step] = e->loss;
            r->grad_norm[e->step] = e->grad_norm;
        }
        r->steps_seen++;
        r->skipped_seen += e->skipped;
        r->last_step = e->step;
        r->last_epoch = e->epoch;
        return r->stop_at > 0 && e->step >= r->stop_at;
    }
    if (e->kind == ATTN_TRAIN_EVENT_EVAL) {
        r->evals_seen++;
        r->best_valid_loss = e->best_valid_loss;
    }
    if (e->kind == ATTN_TRAIN_EVENT_DONE)
        snprintf(r->stop_reason, sizeof r->stop_reason, "%s", e->stop_reason);
    return 0;
}

static float *copy_values(attn_model *m)
{
    attn_params *p = attn_model_params(m);
    size_t n = attn_params_buffer_floats(p);
    float *copy = test_alloc(n * sizeof(float));
    memcpy(copy, attn_params_buffer(p, ATTN_PARAM_VALUES), n * sizeof(float));
    return copy;
}

/* A whole run from a fresh model; returns the final values (malloc'ed). */
static float *run_once(attn_trainer_options o, recording *r, uint64_t init_seed)
{
    attn_model *m = new_model(&fx.config, init_seed, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    o.callback = record_event;
    o.callback_user = r;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &o, &t));
    CHECK_OK(attn_trainer_run(t));
    float *values = copy_values(m);
    attn_trainer_destroy(t);
    attn_model_destroy(m);
    return values;
}

/* ---- exact resume -------------------------------------------------------------------------- */

/* Train MAX_STEPS steps at once; then stop at `stop`, resume from the checkpoint into a model
 * initialised differently, and finish: the losses after `stop` and the final values must be
 * the same bits. */
static void check_resume(int threads, int64_t stop)
{
    attn_set_num_threads(threads);
    attn_trainer_options o = busy_options();
    static recording whole, first, second;
    memset(&whole, 0, sizeof whole);
    memset(&first, 0, sizeof first);
    memset(&second, 0, sizeof second);
    float *whole_values = run_once(o, &whole, 1);
    CHECK(whole.last_step == MAX_STEPS && strcmp(whole.stop_reason, "max_steps") == 0,
          "the uninterrupted run makes %d steps (%lld, %s)", MAX_STEPS, (long long)whole.last_step,
          whole.stop_reason);
    CHECK(whole.last_epoch >= 2, "the run crosses epoch boundaries (%lld epochs)",
          (long long)whole.last_epoch);

    const char *checkpoint = test_scratch_path("resume.ckpt.safetensors");
    o.checkpoint_path = checkpoint;
    o.max_steps = stop;
    free(run_once(o, &first, 1));

    attn_model *m = new_model(&fx.config, 999, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    o.max_steps = MAX_STEPS;
    o.callback = record_event;
    o.callback_user = &second;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &o, &t));
    CHECK_OK(attn_trainer_resume(t, checkpoint));
    attn_trainer_status status;
    CHECK_OK(attn_trainer_get_status(t, &status));
    CHECK(status.step == stop, "the resumed trainer stands at step %lld (%lld)", (long long)stop,
          (long long)status.step);
    CHECK_OK(attn_trainer_run(t));

    int same_losses = 1;
    for (int64_t s = 1; s <= MAX_STEPS; s++) {
        double expected = whole.loss[s];
        double got = s <= stop ? first.loss[s] : second.loss[s];
        if (memcmp(&expected, &got, sizeof got) != 0 ||
            (s > stop && memcmp(&whole.grad_norm[s], &second.grad_norm[s], sizeof got) != 0)) {
            printf("    step %lld: %.17g vs %.17g\n", (long long)s, expected, got);
            same_losses = 0;
        }
    }
    CHECK(same_losses,
          "%d threads, stop at %lld: the resumed run's losses equal the "
          "uninterrupted run's, bit for bit",
          threads, (long long)stop);
    float *resumed_values = copy_values(m);
    size_t n = attn_params_buffer_floats(attn_model_params(m));
    CHECK(memcmp(whole_values, resumed_values, n * sizeof(float)) == 0,
          "%d threads: the final parameters are the same bits", threads);
    CHECK(second.best_valid_loss == whole.best_valid_loss,
          "the best validation loss carries over (%.9g vs %.9g)", second.best_valid_loss,
          whole.best_valid_loss);
    free(whole_values);
    free(resumed_values);
    attn_trainer_destroy(t);
    attn_model_destroy(m);
}

static void test_resume_reproduces_the_curve(void)
{
    check_resume(1, 7);  /* mid-epoch, between evaluations */
    check_resume(1, 10); /* right after an evaluation */
    check_resume(2, 13);
    attn_set_num_threads(1);
}

/* A tiny RNN encoder-decoder with the fixture's vocabularies: Luong attention with every
 * option that keeps state across steps (LSTM cells, two layers, input feeding, local-p). */
static attn_model_config tiny_rnn_config(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.cell = ATTN_RNN_LSTM;
    c.layers = 2;
    c.hidden = 12;
    c.embedding_dim = 8;
    c.attention_dim = 10;
    c.attention = ATTN_RNN_LUONG_CONCAT;
    c.local = ATTN_RNN_LOCAL_P;
    c.window = 2;
    c.input_feeding = 1;
    c.dropout = 0.1;
    c.label_smoothing = 0.1;
    c.src_vocab = fx.config.src_vocab;
    c.tgt_vocab = fx.config.tgt_vocab;
    c.max_len = fx.config.max_len;
    return c;
}

static void test_rnn_resume_reproduces_the_curve(void)
{
    attn_model_config saved = fx.config;
    fx.config = tiny_rnn_config();
    check_resume(1, 7);
    check_resume(2, 13);
    attn_set_num_threads(1);
    fx.config = saved;
}

/* Mixed precision keeps every promise of fp32 training: exact resume at a fixed thread
 * count (the Transformer, and the RNN whose layers multiply in bf16 too). */
static void test_bf16_resume_reproduces_the_curve(void)
{
    fx_precision = ATTN_PRECISION_BF16;
    check_resume(1, 7);
    check_resume(2, 13);
    attn_model_config saved = fx.config;
    fx.config = tiny_rnn_config();
    check_resume(2, 13);
    fx.config = saved;
    fx_precision = ATTN_PRECISION_FP32;
    attn_set_num_threads(1);
}

/* A bf16 run is deterministic, its products really are rounded (the curve is not fp32's to
 * the bit), and its loss curve stays within a few percent of fp32's. */
static void test_bf16_curve_follows_fp32(void)
{
    static recording fp32, bf16, again;
    memset(&fp32, 0, sizeof fp32);
    memset(&bf16, 0, sizeof bf16);
    memset(&again, 0, sizeof again);
    attn_trainer_options o = busy_options();
    float *v32 = run_once(o, &fp32, 3);
    o.precision = ATTN_PRECISION_BF16;
    float *v16 = run_once(o, &bf16, 3), *v16_again = run_once(o, &again, 3);
    attn_model *m = new_model(&fx.config, 3, MODEL_OWN_INIT);
    size_t floats = attn_params_buffer_floats(attn_model_params(m));
    CHECK(memcmp(bf16.loss, again.loss, sizeof bf16.loss) == 0 &&
              memcmp(v16, v16_again, floats * sizeof(float)) == 0,
          "two bf16 runs give the same losses and parameters");
    CHECK(memcmp(v16, v32, floats * sizeof(float)) != 0, "bf16 parameters differ from fp32's");
    double worst = 0;
    for (int s = 1; s <= MAX_STEPS; s++) {
        double gap = fabs(bf16.loss[s] - fp32.loss[s]) / fp32.loss[s];
        worst = gap > worst ? gap : worst;
    }
    CHECK(worst <= 0.03, "bf16 losses within 3%% of fp32's at every step (worst %.4f)", worst);
    CHECK(bf16.loss[MAX_STEPS] < bf16.loss[1], "the bf16 loss falls (%.4f -> %.4f)", bf16.loss[1],
          bf16.loss[MAX_STEPS]);
    attn_model_destroy(m);
    free(v32);
    free(v16);
    free(v16_again);
}

static void test_runs_are_deterministic(void)
{
    static recording a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    attn_trainer_options o = busy_options();
    o.max_steps = 8;
    float *va = run_once(o, &a, 3), *vb = run_once(o, &b, 3);
    CHECK(memcmp(a.loss, b.loss, sizeof a.loss) == 0, "two runs give the same losses");
    attn_model *m = new_model(&fx.config, 3, MODEL_OWN_INIT);
    size_t floats = attn_params_buffer_floats(attn_model_params(m));
    CHECK(memcmp(va, vb, floats * sizeof(float)) == 0, "two runs give the same parameters");
    CHECK(a.loss[8] < a.loss[1], "the loss falls (%.4f -> %.4f)", a.loss[1], a.loss[8]);
    attn_model_destroy(m);
    free(va);
    free(vb);
}

/* ---- one step against a hand-made one ---------------------------------------------------- */

/* With accumulate = 2: the gradient is the mean of two batches' gradients, clipped to the
 * global norm, then one AdamW update at the schedule's first rate, with biases and norms
 * exempt from decay. */
static void test_step_matches_hand_made_update(void)
{
    attn_model_config saved = fx.config;
    fx.config.dropout = 0.0; /* the hand-made step does not draw masks */
    attn_trainer_options o = busy_options();
    o.max_steps = 1;
    o.eval_every = 0;
    o.clip_norm = 0.05;

    attn_model *trained = new_model(&fx.config, 11, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(trained, &model));
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    CHECK_OK(attn_trainer_run(t));

    attn_model *by_hand = new_model(&fx.config, 11, MODEL_OWN_INIT);
    attn_params *p = attn_model_params(by_hand);
    attn_batcher_config bc = {o.batch_tokens, o.seed, o.shuffle};
    attn_batcher *batches = NULL;
    CHECK_OK(attn_batcher_create(fx.train, &bc, &batches));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(p, &g));
    /* The loss is the mean over both batches' target tokens: batch i's gradient is computed
     * from zero with d(loss_i) = its share of the tokens, and the two are added, g0 + g1, as
     * an all-reduce over two processes adds them. */
    const attn_batch *b = NULL;
    int64_t tokens[2] = {0, 0};
    for (int i = 0; i < 2; i++) {
        CHECK_OK(attn_batcher_next(batches, &b));
        for (int64_t r = 0; r < b->size; r++)
            tokens[i] += b->target_lengths[r] - 1;
    }
    CHECK(tokens[0] != tokens[1], "the batches have different token counts (%lld, %lld)",
          (long long)tokens[0], (long long)tokens[1]);
    CHECK_OK(attn_batcher_seek(batches, 0, 0));
    int64_t n = (int64_t)attn_params_buffer_floats(p);
    float *grads = attn_params_buffer(p, ATTN_PARAM_GRADS);
    float *first = test_alloc((size_t)n * sizeof *first);
    attn_params_zero_grad(p);
    for (int i = 0; i < 2; i++) {
        CHECK_OK(attn_batcher_next(batches, &b));
        attn_model_batch mb = attn_model_batch_of(b);
        if (i == 1) {
            memcpy(first, grads, (size_t)n * sizeof *first);
            attn_params_zero_grad(p);
        }
        attn_graph_reset(g);
        attn_var *loss = NULL;
        CHECK_OK(attn_model_forward_loss(by_hand, g, &mb, &loss));
        const float share = (float)((double)tokens[i] / (double)(tokens[0] + tokens[1]));
        CHECK_OK(attn_graph_backward_from(g, loss, &share));
    }
    for (int64_t i = 0; i < n; i++)
        grads[i] = first[i] + grads[i];
    free(first);
    double norm = 0.0;
    CHECK_OK(attn_clip_grad_norm(n, grads, o.clip_norm, &norm));
    CHECK(norm > o.clip_norm, "clipping takes effect (norm %g)", norm);
    attn_adam_options adam = o.adam;
    CHECK_OK(attn_lr_at(&o.schedule, 1, &adam.lr));
    attn_param_range exempt[64];
    int64_t n_exempt = 0;
    for (size_t i = 0; i < attn_params_count(p); i++) {
        attn_param_info info;
        CHECK_OK(attn_params_info(p, (attn_param_id)i, &info));
        if (info.ndim == 1 && n_exempt < 64)
            exempt[n_exempt++] = (attn_param_range){(int64_t)info.offset, info.numel};
    }
    adam.no_decay = exempt;
    adam.no_decay_count = n_exempt;
    int64_t step = 0;
    CHECK_OK(attn_adam_step(&adam, &step, n, attn_params_buffer(p, ATTN_PARAM_VALUES), grads,
                            attn_params_buffer(p, ATTN_PARAM_ADAM_M),
                            attn_params_buffer(p, ATTN_PARAM_ADAM_V)));
    CHECK(memcmp(attn_params_buffer(p, ATTN_PARAM_VALUES),
                 attn_params_buffer(attn_model_params(trained), ATTN_PARAM_VALUES),
                 (size_t)n * sizeof(float)) == 0,
          "the trainer's update equals the hand-made one, bit for bit");
    attn_trainer_status status;
    CHECK_OK(attn_trainer_get_status(t, &status));
    CHECK(status.adam_step == 1 && status.step == 1 && status.batch_index == 2,
          "one update from two batches (step %lld, adam %lld, next batch %lld)",
          (long long)status.step, (long long)status.adam_step, (long long)status.batch_index);

    attn_graph_destroy(g);
    attn_batcher_destroy(batches);
    attn_model_destroy(by_hand);
    attn_trainer_destroy(t);
    attn_model_destroy(trained);
    fx.config = saved;
}

/* ---- files --------------------------------------------------------------------------------- */

static void test_files(void)
{
    const char *best = test_scratch_path("model.safetensors");
    const char *checkpoint = test_scratch_path("model.last.safetensors");
    attn_trainer_options o = busy_options();
    /* Numbers whose last bit a 15-digit JSON printer loses must come back exactly. */
    o.clip_norm = 0.1 + 0.2;
    o.schedule.lr = nextafter(o.schedule.lr, 1.0);
    o.adam.beta2 = nextafter(o.adam.beta2, 0.0);
    o.max_steps = 10;
    o.best_path = best;
    o.checkpoint_path = checkpoint;
    static recording r;
    memset(&r, 0, sizeof r);
    free(run_once(o, &r, 4));
    CHECK(r.evals_seen == 2, "evaluations at steps 5 and 10 (%d)", r.evals_seen);

    /* The model file: loadable as a model, with the tokenizers and a summary. */
    attn_model *loaded = NULL;
    CHECK_OK(attn_model_load(best, &loaded));
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(best, &file));
    const char *value = NULL;
    CHECK_OK(attn_tensor_file_metadata(file, ATTN_SRC_TOKENIZER_KEY, &value));
    CHECK(value != NULL && strcmp(value, fx.src_json) == 0, "the model file has the source "
                                                            "tokenizer");
    CHECK_OK(attn_tensor_file_metadata(file, ATTN_TRAIN_SUMMARY_KEY, &value));
    CHECK(value != NULL && strstr(value, "\"precision\":\"fp32\"") != NULL,
          "the summary records the precision trained in: %s", value ? value : "");
    CHECK(value != NULL && strstr(value, "\"valid_loss\"") != NULL,
          "a summary with the "
          "validation loss: %s",
          value ? value : "");
    CHECK(!attn_tensor_file_contains(file, "optimizer.exp_avg.generator.bias"),
          "the model file holds no optimizer state");
    attn_tensor_file_close(file);

    /* The checkpoint: values, both moments and the state. */
    CHECK_OK(attn_tensor_file_open(checkpoint, &file));
    attn_params *p = attn_model_params(loaded);
    CHECK(attn_tensor_file_count(file) == 3 * attn_params_count(p),
          "values and two moments per parameter (%zu tensors)", attn_tensor_file_count(file));
    CHECK(attn_tensor_file_contains(file, "optimizer.exp_avg_sq.generator.bias"),
          "moments under PyTorch's names");
    CHECK_OK(attn_tensor_file_metadata(file, ATTN_TRAIN_STATE_KEY, &value));
    CHECK(value != NULL && strstr(value, "\"step\":10") != NULL, "the state says step 10: %s",
          value ? value : "");
    attn_trainer_options read = attn_trainer_default_options();
    CHECK_OK(attn_trainer_options_from_checkpoint(file, &read));
    CHECK(read.seed == o.seed && read.accumulate == o.accumulate &&
              read.adam.variant == ATTN_ADAMW && read.schedule.kind == ATTN_LR_COSINE &&
              read.schedule.total_steps == 40 && read.clip_norm == o.clip_norm &&
              read.batch_tokens == o.batch_tokens && read.max_steps == 0 &&
              read.schedule.lr == o.schedule.lr && read.adam.beta2 == o.adam.beta2,
          "the curve-shaping options come back from the checkpoint, the others stay");
    attn_tensor_file_close(file);

    /* A model file cannot be resumed; a missing file is an I/O error. */
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(loaded, &model));
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &o, &t));
    CHECK_FAILS(attn_trainer_resume(t, best), ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_trainer_resume(t, test_scratch_path("missing.safetensors")), ATTN_ERR_IO);
    attn_trainer_destroy(t);
    attn_model_destroy(loaded);
}

/* Without a validation corpus, the model file holds the last parameters. */
static void test_model_file_without_validation(void)
{
    const char *best = test_scratch_path("last-only.safetensors");
    attn_model *m = new_model(&fx.config, 6, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer_options o = busy_options();
    o.max_steps = 3;
    o.best_path = best;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    CHECK_OK(attn_trainer_run(t));
    double loss, accuracy;
    CHECK_FAILS(attn_trainer_evaluate(t, &loss, &accuracy), ATTN_ERR_INVALID_ARGUMENT);
    attn_model *loaded = NULL;
    CHECK_OK(attn_model_load(best, &loaded));
    size_t n = attn_params_buffer_floats(attn_model_params(m));
    CHECK(loaded != NULL && memcmp(attn_params_buffer(attn_model_params(m), ATTN_PARAM_VALUES),
                                   attn_params_buffer(attn_model_params(loaded), ATTN_PARAM_VALUES),
                                   n * sizeof(float)) == 0,
          "the model file holds the final parameters");
    attn_model_destroy(loaded);
    attn_trainer_destroy(t);
    attn_model_destroy(m);
}

/* ---- stopping rules ------------------------------------------------------------------------ */

static void test_stopping_rules(void)
{
    static recording r;
    attn_trainer_options o = busy_options();

    /* Epochs: with accumulate 1 and no step limit, one step per batch. */
    memset(&r, 0, sizeof r);
    o.accumulate = 1;
    o.max_steps = 0;
    o.max_epochs = 2;
    o.eval_every = 0;
    free(run_once(o, &r, 2));
    attn_batcher_config bc = {o.batch_tokens, o.seed, 0};
    attn_batcher *batches = NULL;
    CHECK_OK(attn_batcher_create(fx.train, &bc, &batches));
    int64_t per_epoch = attn_batcher_num_batches(batches);
    attn_batcher_destroy(batches);
    CHECK(strcmp(r.stop_reason, "epochs") == 0 && r.last_epoch == 2,
          "stops after 2 epochs (%s, epoch %lld)", r.stop_reason, (long long)r.last_epoch);
    CHECK(r.evals_seen == 2, "one evaluation per epoch (%d)", r.evals_seen);
    CHECK(r.last_step >= 2 * per_epoch - 2 && r.last_step <= 2 * per_epoch + 2,
          "about %lld steps (%lld)", (long long)(2 * per_epoch), (long long)r.last_step);

    /* Early stopping: at lr 0 nothing improves after the first evaluation. */
    memset(&r, 0, sizeof r);
    o = busy_options();
    o.schedule.kind = ATTN_LR_CONSTANT;
    o.schedule.lr = 0.0;
    o.max_steps = 100;
    o.eval_every = 2;
    o.patience = 2;
    free(run_once(o, &r, 2));
    CHECK(strcmp(r.stop_reason, "early_stopping") == 0 && r.last_step == 6 && r.evals_seen == 3,
          "early stopping after 2 evaluations without a new best (%s at step %lld, %d "
          "evaluations)",
          r.stop_reason, (long long)r.last_step, r.evals_seen);

    /* The callback asks to stop. */
    memset(&r, 0, sizeof r);
    o = busy_options();
    r.stop_at = 3;
    free(run_once(o, &r, 2));
    CHECK(strcmp(r.stop_reason, "stopped") == 0 && r.last_step == 3,
          "the callback stops the run (%s at step %lld)", r.stop_reason, (long long)r.last_step);

    /* A time limit already spent stops before the first step. */
    memset(&r, 0, sizeof r);
    o = busy_options();
    o.time_limit = 1e-9;
    free(run_once(o, &r, 2));
    CHECK(strcmp(r.stop_reason, "time_limit") == 0 && r.steps_seen == 0,
          "the time limit stops the run (%s after %d steps)", r.stop_reason, r.steps_seen);
}

/* An update that overflows the weights makes every later gradient NaN; those steps are
 * reported as skipped and leave Adam's count alone. */
static void test_non_finite_gradients_skip_the_update(void)
{
    attn_model *m = new_model(&fx.config, 8, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer_options o = busy_options();
    o.schedule.kind = ATTN_LR_CONSTANT;
    o.schedule.lr = 1e38;
    o.clip_norm = 0.0;
    o.max_steps = 4;
    o.eval_every = 0;
    static recording r;
    memset(&r, 0, sizeof r);
    o.callback = record_event;
    o.callback_user = &r;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    CHECK_OK(attn_trainer_run(t));
    attn_trainer_status status;
    CHECK_OK(attn_trainer_get_status(t, &status));
    CHECK(r.skipped_seen > 0 && status.step == 4 && status.adam_step == 4 - r.skipped_seen,
          "skipped steps are counted apart (%d skipped, step %lld, adam %lld)", r.skipped_seen,
          (long long)status.step, (long long)status.adam_step);
    attn_trainer_destroy(t);
    attn_model_destroy(m);
}

/* After the first epoch every batch shape has been seen: the arena stops growing. */
static void test_arena_stops_growing(void)
{
    attn_model *m = new_model(&fx.config, 9, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer_options o = busy_options();
    o.shuffle = 0;
    o.accumulate = 1;
    o.max_steps = 0;
    o.max_epochs = 1;
    o.eval_every = 0;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    CHECK_OK(attn_trainer_run(t));
    attn_trainer_status after_one, after_four;
    CHECK_OK(attn_trainer_get_status(t, &after_one));
    attn_trainer_destroy(t);
    o.max_epochs = 4;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    CHECK_OK(attn_trainer_run(t));
    CHECK_OK(attn_trainer_get_status(t, &after_four));
    CHECK(after_one.graph_memory_peak > 0 &&
              after_four.graph_memory_peak == after_one.graph_memory_peak,
          "the arena's peak stays at %zu bytes over further epochs (%zu)",
          after_one.graph_memory_peak, after_four.graph_memory_peak);
    attn_trainer_destroy(t);
    attn_model_destroy(m);
}

/* ---- a cosine over a time budget ---------------------------------------------------------- */

/* Checks each STEP event's rate as it comes, so a run of any length fits. The rate of step k
 * is taken after step k - 1 was reported and before step k is, so its training time lies
 * between seconds_before + the two events' elapsed times; since the rate falls with the time,
 * it lies between the schedule's rates at those two times, whatever the machine's speed. */
typedef struct rate_check {
    attn_lr_schedule schedule;
    double seconds_before; /* training time stored in the checkpoint resumed from */
    double previous_elapsed, previous_lr;
    int previous_after_warmup;
    int steps, out_of_range, rising, outside_bracket;
    int after_budget, at_min_after_budget; /* steps whose rate was taken after the budget */
    double first_lr, last_lr, last_elapsed;
    double longest_step; /* seconds between two reports, or from the start to the first */
    char stop_reason[32];
} rate_check;

static double rate_after(const attn_lr_schedule *s, double seconds)
{
    double lr = NAN;
    CHECK_OK(attn_lr_at_time(s, s->warmup_steps + 1, seconds, &lr));
    return lr;
}

static int check_rate_event(const attn_train_event *e, void *user)
{
    rate_check *c = user;
    if (e->kind == ATTN_TRAIN_EVENT_DONE)
        snprintf(c->stop_reason, sizeof c->stop_reason, "%s", e->stop_reason);
    if (e->kind != ATTN_TRAIN_EVENT_STEP)
        return 0;
    const attn_lr_schedule *s = &c->schedule;
    if (c->steps++ == 0)
        c->first_lr = e->lr;
    const int after_warmup = e->step > s->warmup_steps;
    if (!after_warmup) {
        c->out_of_range += !(e->lr >= 0.0 && e->lr <= s->lr);
    } else {
        c->out_of_range += !(e->lr >= s->min_lr && e->lr <= s->lr);
        c->rising += c->previous_after_warmup && e->lr > c->previous_lr;
        const double earliest = c->seconds_before + c->previous_elapsed;
        const double latest = c->seconds_before + e->elapsed;
        const double slack = 1e-12 * s->lr; /* cos rounded, not the ordering of the times */
        if (e->lr > rate_after(s, earliest) + slack || e->lr < rate_after(s, latest) - slack) {
            if (c->outside_bracket++ < 3)
                printf("    step %lld: rate %.17g outside [%.17g, %.17g] (%.6f .. %.6f s)\n",
                       (long long)e->step, e->lr, rate_after(s, latest), rate_after(s, earliest),
                       earliest, latest);
        }
        if (earliest >= s->total_seconds) {
            c->after_budget++;
            c->at_min_after_budget += e->lr == s->min_lr;
        }
    }
    if (e->elapsed - c->previous_elapsed > c->longest_step)
        c->longest_step = e->elapsed - c->previous_elapsed;
    c->previous_elapsed = c->last_elapsed = e->elapsed;
    c->previous_lr = c->last_lr = e->lr;
    c->previous_after_warmup = after_warmup;
    return 0;
}

static attn_trainer_options time_budget_options(double total_seconds)
{
    attn_trainer_options o = busy_options();
    o.schedule.kind = ATTN_LR_COSINE;
    o.schedule.lr = 3e-3;
    o.schedule.min_lr = 3e-4;
    o.schedule.warmup_steps = 2;
    o.schedule.total_steps = 0;
    o.schedule.total_seconds = total_seconds;
    o.max_epochs = 0;
    o.max_steps = 0;
    o.eval_every = 0;
    return o;
}

/* Runs o on model m, checking its rates in c; returns the trainer's training time after. */
static double run_checking_rates(attn_model *m, attn_trainer_options o, const char *resume_from,
                                 rate_check *c)
{
    memset(c, 0, sizeof *c);
    c->schedule = o.schedule;
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    o.callback = check_rate_event;
    o.callback_user = c;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    attn_trainer_status status;
    if (resume_from != NULL) {
        CHECK_OK(attn_trainer_resume(t, resume_from));
        CHECK_OK(attn_trainer_get_status(t, &status));
        c->seconds_before = status.train_seconds;
    }
    CHECK_OK(attn_trainer_run(t));
    CHECK_OK(attn_trainer_get_status(t, &status));
    attn_trainer_destroy(t);
    return status.train_seconds;
}

/* A run that stops by the clock, its budget (a quarter of a second) spent well before the
 * time limit. Nothing assumes how fast the machine runs: a process starved of its core makes
 * fewer steps, and each step is checked against the times around it. */
static void test_cosine_over_a_time_budget(void)
{
    attn_trainer_options o = time_budget_options(0.25);
    o.time_limit = 1.0;
    static rate_check c;
    attn_model *m = new_model(&fx.config, 12, MODEL_OWN_INIT);
    double seconds = run_checking_rates(m, o, NULL, &c);
    attn_model_destroy(m);
    CHECK(strcmp(c.stop_reason, "time_limit") == 0 && c.steps > 0,
          "stops by the clock (%s after %d steps)", c.stop_reason, c.steps);
    CHECK(c.out_of_range == 0,
          "the warm-up's rates in [0, lr], the others in [min_lr, lr] (%d of %d outside)",
          c.out_of_range, c.steps);
    CHECK(c.rising == 0, "after the warm-up the rate never rises (%d rises)", c.rising);
    CHECK(c.outside_bracket == 0,
          "each rate is the schedule's at a time between the step before and the step (%d "
          "not)",
          c.outside_bracket);
    CHECK(c.at_min_after_budget == c.after_budget,
          "once the budget is spent the rate is min_lr (%d of %d steps)", c.at_min_after_budget,
          c.after_budget);
    /* The run goes on until 1 s, so some rate is taken after the 0.25 s budget, unless one
     * step lasted from before 0.25 s to the end (a process kept off its core). */
    CHECK(c.after_budget > 0 || c.longest_step > 0.5,
          "steps after the budget (%d of %d; longest step %.3f s)", c.after_budget, c.steps,
          c.longest_step);
    CHECK(seconds >= o.time_limit && seconds >= c.last_elapsed,
          "the trainer counts the run's time (%.3f s, limit %.3f s)", seconds, o.time_limit);
}

static double state_number(const char *state, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    const char *at = strstr(state, quoted);
    return at != NULL ? strtod(at + strlen(quoted), NULL) : NAN;
}

/* Stopped part way through its budget and resumed: the checkpoint keeps the training time and
 * the budget, and the resumed run's rates continue from that time, so none is above the last
 * rate before the checkpoint (a clock restarted at 0 would go back up towards the peak). */
static void test_cosine_over_a_time_budget_resumes(void)
{
    const char *checkpoint = test_scratch_path("timed.ckpt.safetensors");
    attn_trainer_options o = time_budget_options(30.0);
    o.max_steps = 6;
    o.checkpoint_path = checkpoint;
    static rate_check first, second;
    attn_model *m = new_model(&fx.config, 13, MODEL_OWN_INIT);
    double seconds = run_checking_rates(m, o, NULL, &first);
    attn_model_destroy(m);
    CHECK(first.steps == 6 && first.outside_bracket == 0 && first.rising == 0,
          "the first run: 6 steps (%d), rates by the clock (%d not), falling (%d rises)",
          first.steps, first.outside_bracket, first.rising);

    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(checkpoint, &file));
    const char *state = NULL;
    CHECK_OK(attn_tensor_file_metadata(file, ATTN_TRAIN_STATE_KEY, &state));
    const double stored = state != NULL ? state_number(state, "train_seconds") : NAN;
    CHECK(stored > 0.0 && stored >= first.last_elapsed && stored <= seconds,
          "the checkpoint stores the training time when it was written (%.6f s; last step at "
          "%.6f s, run over at %.6f s)",
          stored, first.last_elapsed, seconds);
    CHECK(state != NULL && state_number(state, "total_seconds") == 30.0,
          "the checkpoint stores the budget: %s", state != NULL ? state : "");
    attn_trainer_options read = attn_trainer_default_options();
    CHECK_OK(attn_trainer_options_from_checkpoint(file, &read));
    CHECK(read.schedule.kind == ATTN_LR_COSINE && read.schedule.total_seconds == 30.0 &&
              read.schedule.total_steps == 0,
          "the budget comes back with the options (%g s, %lld steps)", read.schedule.total_seconds,
          (long long)read.schedule.total_steps);
    attn_tensor_file_close(file);

    m = new_model(&fx.config, 999, MODEL_OWN_INIT);
    o.max_steps = 12;
    o.checkpoint_path = NULL;
    run_checking_rates(m, o, checkpoint, &second);
    CHECK(second.seconds_before == stored,
          "the resumed trainer starts from the stored time (%.17g vs %.17g)", second.seconds_before,
          stored);
    CHECK(second.steps == 6 && strcmp(second.stop_reason, "max_steps") == 0,
          "the resumed run makes the 6 steps left (%d, %s)", second.steps, second.stop_reason);
    CHECK(second.first_lr <= first.last_lr && second.last_lr <= second.first_lr,
          "no resumed rate above the last before the checkpoint (%.17g, then %.17g; before "
          "%.17g)",
          second.first_lr, second.last_lr, first.last_lr);
    CHECK(second.outside_bracket == 0 && second.rising == 0 && second.out_of_range == 0,
          "the resumed rates follow the clock from the stored time (%d not, %d rises)",
          second.outside_bracket, second.rising);

    /* The budget shapes the curve: another one is refused on resume, naming it. */
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer_options other = o;
    other.schedule.total_seconds = 60.0;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "total_seconds") != NULL, "the message names total_seconds: %s",
          attn_last_error());
    attn_trainer_destroy(t);
    attn_model_destroy(m);
    remove(checkpoint);
}

/* ---- bad input ----------------------------------------------------------------------------- */

static void test_resume_refuses_another_run(void)
{
    const char *checkpoint = test_scratch_path("other.ckpt.safetensors");
    attn_trainer_options o = busy_options();
    o.max_steps = 2;
    o.checkpoint_path = checkpoint;
    static recording r;
    memset(&r, 0, sizeof r);
    free(run_once(o, &r, 1));

    attn_model *m = new_model(&fx.config, 1, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer *t = NULL;
    /* another seed, another rate, another optimizer, other data */
    attn_trainer_options other = o;
    other.seed = 43;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "seed") != NULL, "the message names the seed: %s",
          attn_last_error());
    attn_trainer_destroy(t);
    other = o;
    other.schedule.lr = 1e-3;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
    attn_trainer_destroy(t);
    other = o;
    other.precision = ATTN_PRECISION_BF16;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "precision is fp32 in the checkpoint but bf16 here") != NULL,
          "the message names the precisions: %s", attn_last_error());
    attn_trainer_destroy(t);
    /* auto is resolved before the comparison: an fp32 run resumes under auto where bf16 is
     * not native (the portable path), and is refused, naming bf16, where it is. */
    const attn_isa isa = attn_get_isa();
    for (int portable = 0; portable <= 1; portable++) {
        if (portable)
            CHECK_OK(attn_set_isa(ATTN_ISA_PORTABLE));
        other = o;
        other.precision = ATTN_PRECISION_AUTO;
        CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &other, &t));
        if (attn_precision_native(ATTN_PRECISION_BF16)) {
            CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
            CHECK(strstr(attn_last_error(), "fp32 in the checkpoint but bf16 here") != NULL,
                  "auto resolved to bf16 before the comparison: %s", attn_last_error());
        } else {
            CHECK_OK(attn_trainer_resume(t, checkpoint));
        }
        attn_trainer_destroy(t);
    }
    CHECK_OK(attn_set_isa(isa));
    other = o;
    other.adam.variant = ATTN_ADAM;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &other, &t));
    CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
    attn_trainer_destroy(t);
    CHECK_OK(attn_trainer_create(&model, fx.valid, NULL, &o, &t));
    CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "training data") != NULL, "the message names the data: %s",
          attn_last_error());
    attn_trainer_destroy(t);

    /* Another model config. */
    attn_model_config other_config = fx.config;
    other_config.ffn_dim = 24;
    attn_model *other_model = new_model(&other_config, 1, MODEL_OWN_INIT);
    attn_trainable other_trainable;
    CHECK_OK(attn_trainable_from_model(other_model, &other_trainable));
    CHECK_OK(attn_trainer_create(&other_trainable, fx.train, fx.valid, &o, &t));
    CHECK_FAILS(attn_trainer_resume(t, checkpoint), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "config") != NULL, "the message names the config: %s",
          attn_last_error());
    attn_trainer_destroy(t);
    attn_model_destroy(other_model);

    /* A truncated checkpoint. */
    FILE *in = fopen(checkpoint, "rb");
    CHECK(in != NULL, "the checkpoint exists");
    static char bytes[1 << 20];
    size_t size = in ? fread(bytes, 1, sizeof bytes, in) : 0;
    if (in)
        fclose(in);
    const char *truncated = test_scratch_path("truncated.safetensors");
    FILE *out = fopen(truncated, "wb");
    if (out) {
        fwrite(bytes, 1, size / 2, out);
        fclose(out);
    }
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &o, &t));
    CHECK_FAILS(attn_trainer_resume(t, truncated), ATTN_ERR_FORMAT);
    attn_trainer_destroy(t);
    remove(truncated);
    attn_model_destroy(m);
}

/* ---- greedy decoding ------------------------------------------------------------------------ */

static int32_t argmax(const float *row, int64_t n)
{
    int64_t best = 0;
    for (int64_t v = 1; v < n; v++)
        if (row[v] > row[best])
            best = v;
    return (int32_t)best;
}

/* Greedy decoding of one source alone, the plain way: run the whole decoder over <s> y1 .. yt
 * (attn_model_decode) for every t and take the arg-max of the last position. Returns the
 * number of tokens before </s> (max_len if none came). */
static int64_t greedy_by_prefix(attn_model *m, const int32_t *src, int32_t src_len, int64_t max_len,
                                int32_t *tokens)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, 0);
    int32_t prefix[32] = {ATTN_BOS_ID};
    int64_t produced = max_len;
    for (int64_t len = 1; len <= max_len; len++) {
        attn_graph_reset(g);
        attn_var *memory = NULL, *logits = NULL;
        CHECK_OK(attn_model_encode(m, g, 1, src_len, src, &src_len, &memory));
        CHECK_OK(attn_model_decode(m, g, memory, &src_len, 1, len, prefix, len, NULL, &logits));
        if (logits == NULL)
            break;
        const int64_t vocab = logits->value.shape[2];
        int32_t next = argmax(logits->value.data + (len - 1) * vocab, vocab);
        if (next == ATTN_EOS_ID) {
            produced = len - 1;
            break;
        }
        tokens[len - 1] = prefix[len] = next;
    }
    attn_graph_destroy(g);
    return produced;
}

/* A model trained a little (so that some outputs end with </s> and some run to max_len),
 * decoded greedily as a padded batch; each row must be what the plain decoding of its source
 * alone gives, the rnn's step decoder included. */
static void check_greedy_decoding(const char *what, attn_model_config config)
{
    attn_model *m = new_model(&config, 21, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer_options o = busy_options();
    o.max_steps = MAX_STEPS;
    o.eval_every = 0;
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&model, fx.train, NULL, &o, &t));
    CHECK_OK(attn_trainer_run(t));
    attn_trainer_destroy(t);

    enum { ROWS = VALID_PAIRS, SRC_LEN = 8, OUT_LEN = 9 };
    int32_t src[ROWS * SRC_LEN] = {0}, lengths[ROWS], out[ROWS * OUT_LEN];
    int64_t out_lengths[ROWS];
    for (int64_t i = 0; i < ROWS; i++) {
        const int32_t *ids;
        int64_t n;
        attn_corpus_source_ids(fx.valid, i, &ids, &n);
        memcpy(src + i * SRC_LEN, ids, (size_t)n * sizeof *ids);
        lengths[i] = (int32_t)n;
    }
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    CHECK_OK(attn_greedy_decode(m, g, ROWS, SRC_LEN, src, lengths, OUT_LEN, out, out_lengths));
    int agree = 1, ended = 0;
    for (int64_t i = 0; i < ROWS; i++) {
        int32_t expected[OUT_LEN];
        int64_t n = greedy_by_prefix(m, src + i * SRC_LEN, lengths[i], OUT_LEN, expected);
        ended += n < OUT_LEN;
        int same = out_lengths[i] == n &&
                   memcmp(out + i * OUT_LEN, expected, (size_t)n * sizeof *expected) == 0;
        for (int64_t j = n; j < OUT_LEN; j++)
            same = same && out[i * OUT_LEN + j] == ATTN_PAD_ID;
        if (!same)
            printf("    %s, row %lld: %lld tokens, expected %lld\n", what, (long long)i,
                   (long long)out_lengths[i], (long long)n);
        agree = agree && same;
    }
    CHECK(agree, "%s: batched greedy decoding equals each source's prefix-by-prefix decoding",
          what);
    CHECK(ended > 0, "%s: some outputs end with </s> (%d of %d)", what, ended, ROWS);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_greedy_decoding_matches_prefix_decoding(void)
{
    check_greedy_decoding("transformer", fx.config);
    attn_model_config c = tiny_rnn_config();
    check_greedy_decoding("rnn, LSTM + Luong concat, local-p, input feeding", c);
    c = attn_model_config_default(ATTN_ARCH_RNN);
    c.hidden = 12;
    c.embedding_dim = 8;
    c.attention_dim = 10;
    c.src_vocab = fx.config.src_vocab;
    c.tgt_vocab = fx.config.tgt_vocab;
    c.max_len = fx.config.max_len;
    check_greedy_decoding("rnn, GRU + Bahdanau", c);
    c.attention = ATTN_RNN_NO_ATTENTION;
    c.reverse_source = 1;
    check_greedy_decoding("rnn, no attention, reversed source", c);
}

static void test_bad_arguments(void)
{
    attn_model *m = new_model(&fx.config, 1, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(m, &model));
    attn_trainer_options o = busy_options();
    attn_trainer *t = NULL;
    CHECK_FAILS(attn_trainer_create(NULL, fx.train, NULL, &o, &t), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_create(&model, NULL, NULL, &o, &t), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, NULL, &t), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &o, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_trainable broken = model;
    broken.forward_loss = NULL;
    CHECK_FAILS(attn_trainer_create(&broken, fx.train, NULL, &o, &t), ATTN_ERR_INVALID_ARGUMENT);

    attn_trainer_options bad = o;
    bad.batch_tokens = 0;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.accumulate = 0;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.clip_norm = -1.0;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.precision = ATTN_PRECISION_INT8;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "int8") != NULL, "the message names the precision: %s",
          attn_last_error());
    bad = o;
    bad.max_steps = -1;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.time_limit = NAN;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.patience = -2;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.schedule.total_steps = 2; /* not beyond the warm-up */
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.schedule.total_seconds = 60.0; /* and total_steps too */
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "not both") != NULL, "the message says why: %s",
          attn_last_error());
    bad = o;
    bad.adam.beta1 = 1.0;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    attn_metadata_entry reserved = {ATTN_TRAIN_STATE_KEY, "{}"};
    bad = o;
    bad.metadata = &reserved;
    bad.n_metadata = 1;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    bad = o;
    bad.metadata = NULL;
    CHECK_FAILS(attn_trainer_create(&model, fx.train, NULL, &bad, &t), ATTN_ERR_INVALID_ARGUMENT);
    /* A corpus that is not encoded. */
    const char *one = "ab";
    attn_corpus *raw = NULL;
    CHECK_OK(attn_corpus_from_strings(&one, &one, 1, &raw));
    CHECK_FAILS(attn_trainer_create(&model, raw, NULL, &o, &t), ATTN_ERR_INVALID_ARGUMENT);
    attn_corpus_destroy(raw);

    CHECK_FAILS(attn_trainer_run(NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_resume(NULL, "x"), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_save_checkpoint(NULL, "x"), ATTN_ERR_INVALID_ARGUMENT);
    attn_trainer_status status;
    CHECK_FAILS(attn_trainer_get_status(NULL, &status), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &o, &t));
    CHECK_FAILS(attn_trainer_resume(t, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_save_checkpoint(t, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_save_checkpoint(t, "/nonexistent-folder/x.safetensors"), ATTN_ERR_IO);
    double loss;
    CHECK_FAILS(attn_trainer_evaluate(t, NULL, &loss), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_trainer_options_from_checkpoint(NULL, &o), ATTN_ERR_INVALID_ARGUMENT);
    attn_trainer_destroy(t);
    attn_trainer_destroy(NULL);

    /* The classifier trains too (on labelled corpora: test_classifier_trains). */
    attn_model_config cc = attn_model_config_default(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    cc.d_model = 8;
    cc.num_heads = 2;
    cc.ffn_dim = 8;
    cc.encoder_layers = 1;
    cc.src_vocab = 10;
    cc.num_classes = 2;
    attn_model *classifier = NULL;
    CHECK_OK(attn_model_create(&cc, &classifier));
    attn_trainable ct;
    CHECK_OK(attn_trainable_from_model(classifier, &ct));
    CHECK_FAILS(attn_trainable_from_model(NULL, &ct), ATTN_ERR_INVALID_ARGUMENT);

    /* Greedy decoding. */
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    int32_t src[4] = {4, 5, 6, 0}, out[2 * 5];
    int64_t out_lengths[2];
    int32_t ok_lengths[2] = {2, 1};
    CHECK_OK(attn_greedy_decode(m, g, 2, 2, src, ok_lengths, 5, out, out_lengths));
    CHECK(out_lengths[0] >= 0 && out_lengths[0] <= 5 && out_lengths[1] >= 0 && out_lengths[1] <= 5,
          "decoded lengths within max_len (%lld, %lld)", (long long)out_lengths[0],
          (long long)out_lengths[1]);
    int32_t long_lengths[2] = {3, 1};
    CHECK_FAILS(attn_greedy_decode(m, g, 2, 2, src, long_lengths, 5, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_greedy_decode(m, g, 0, 2, NULL, NULL, 5, NULL, NULL));
    CHECK_FAILS(attn_greedy_decode(m, g, 2, 2, src, ok_lengths, 0, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_greedy_decode(m, g, 2, 2, src, ok_lengths, 17, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    int32_t zero_lengths[2] = {0, 1};
    CHECK_FAILS(attn_greedy_decode(m, g, 2, 2, src, zero_lengths, 5, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_greedy_decode(m, g, 2, 2, NULL, ok_lengths, 5, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_greedy_decode(m, g, -1, 2, src, ok_lengths, 5, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_greedy_decode(classifier, g, 2, 2, src, ok_lengths, 5, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    int32_t bad_ids[4] = {4, 99, 6, 0};
    CHECK_FAILS(attn_greedy_decode(m, g, 2, 2, bad_ids, ok_lengths, 5, out, out_lengths),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(g);
    attn_model_destroy(classifier);
    attn_model_destroy(m);
}

/* ---- cancelling a run mid-update ----------------------------------------------------------- */

/* A model that raises the cancel flag at a chosen call of its loss: before the forward (so the
 * forward's first operation fails), after it (so the backward fails), or in a validation pass. */
typedef enum cancel_point {
    CANCEL_IN_FORWARD,
    CANCEL_IN_BACKWARD,
    CANCEL_IN_VALIDATION
} cancel_point;

typedef struct cancelling_model {
    attn_trainable inner;
    cancel_point point;
    int64_t calls, cancel_at_call; /* counted over training calls, or validation calls */
    volatile sig_atomic_t flag;
} cancelling_model;

static attn_params *cancelling_params(void *self)
{
    cancelling_model *c = self;
    return c->inner.params(c->inner.self);
}

static attn_status cancelling_config(void *self, char **json)
{
    cancelling_model *c = self;
    return c->inner.config_json(c->inner.self, json);
}

static attn_status cancelling_forward(void *self, attn_graph *graph, const attn_model_batch *batch,
                                      int smoothed, attn_var **loss, int64_t *tokens,
                                      int64_t *correct)
{
    cancelling_model *c = self;
    const int counted = c->point == CANCEL_IN_VALIDATION ? !smoothed : smoothed;
    const int now = counted && ++c->calls == c->cancel_at_call;
    if (now && c->point != CANCEL_IN_BACKWARD)
        c->flag = 1;
    attn_status status =
        c->inner.forward_loss(c->inner.self, graph, batch, smoothed, loss, tokens, correct);
    if (now && c->point == CANCEL_IN_BACKWARD)
        c->flag = 1;
    return status;
}

/* The run stops at the update (or validation) where the flag went up, keeps the checkpoint of
 * the last finished update, and a resumed run ends with the uninterrupted run's bits. */
static void check_cancel(cancel_point point, int64_t cancel_at_call, int64_t expected_step)
{
    attn_set_num_threads(1);
    attn_trainer_options o = busy_options();
    static recording whole, first, second;
    memset(&whole, 0, sizeof whole);
    memset(&first, 0, sizeof first);
    memset(&second, 0, sizeof second);
    float *whole_values = run_once(o, &whole, 1);

    const char *checkpoint = test_scratch_path("cancel.ckpt.safetensors");
    remove(checkpoint);
    o.checkpoint_path = checkpoint;
    o.callback = record_event;
    o.callback_user = &first;
    attn_model *m = new_model(&fx.config, 1, MODEL_OWN_INIT);
    cancelling_model c;
    memset(&c, 0, sizeof c);
    CHECK_OK(attn_trainable_from_model(m, &c.inner));
    c.point = point;
    c.cancel_at_call = cancel_at_call;
    attn_trainable wrapped = {&c, cancelling_params, cancelling_forward, cancelling_config};
    attn_trainer *t = NULL;
    CHECK_OK(attn_trainer_create(&wrapped, fx.train, fx.valid, &o, &t));
    attn_trainer_set_cancel_flag(t, &c.flag);
    CHECK_OK(attn_trainer_run(t));
    attn_trainer_status status;
    CHECK_OK(attn_trainer_get_status(t, &status));
    CHECK(strcmp(first.stop_reason, "cancelled") == 0 && status.step == expected_step,
          "point %d: the run stops cancelled at step %lld (%s, step %lld)", (int)point,
          (long long)expected_step, first.stop_reason, (long long)status.step);
    CHECK(first.last_step == expected_step, "no event for the dropped update (last %lld)",
          (long long)first.last_step);
    attn_trainer_destroy(t);
    attn_model_destroy(m);

    attn_model *resumed = new_model(&fx.config, 999, MODEL_OWN_INIT);
    attn_trainable model;
    CHECK_OK(attn_trainable_from_model(resumed, &model));
    o.callback_user = &second;
    CHECK_OK(attn_trainer_create(&model, fx.train, fx.valid, &o, &t));
    CHECK_OK(attn_trainer_resume(t, checkpoint));
    CHECK_OK(attn_trainer_get_status(t, &status));
    CHECK(status.step == expected_step, "the checkpoint holds step %lld (%lld)",
          (long long)expected_step, (long long)status.step);
    CHECK_OK(attn_trainer_run(t));
    int same = 1;
    for (int64_t s = expected_step + 1; s <= MAX_STEPS; s++)
        same &= memcmp(&whole.loss[s], &second.loss[s], sizeof(double)) == 0;
    CHECK(same, "point %d: the resumed losses equal the uninterrupted run's", (int)point);
    float *resumed_values = copy_values(resumed);
    size_t n = attn_params_buffer_floats(attn_model_params(resumed));
    CHECK(memcmp(whole_values, resumed_values, n * sizeof(float)) == 0,
          "point %d: the final parameters are the same bits", (int)point);
    free(whole_values);
    free(resumed_values);
    attn_trainer_destroy(t);
    attn_model_destroy(resumed);
}

static void test_cancel_flag_drops_the_unfinished_update(void)
{
    /* busy_options accumulates 2 batches per update: call 16 is update 8's second batch, after
     * its first batch's backward already added into the gradients. */
    check_cancel(CANCEL_IN_FORWARD, 16, 7);
    check_cancel(CANCEL_IN_BACKWARD, 15, 7);
    /* the second batch of the first validation (after update 5) */
    check_cancel(CANCEL_IN_VALIDATION, 2, 5);
}

int main(void)
{
    attn_set_num_threads(1);
    make_fixture();
    RUN_TEST(test_resume_reproduces_the_curve);
    RUN_TEST(test_rnn_resume_reproduces_the_curve);
    RUN_TEST(test_bf16_resume_reproduces_the_curve);
    RUN_TEST(test_bf16_curve_follows_fp32);
    RUN_TEST(test_runs_are_deterministic);
    RUN_TEST(test_step_matches_hand_made_update);
    RUN_TEST(test_files);
    RUN_TEST(test_model_file_without_validation);
    RUN_TEST(test_stopping_rules);
    RUN_TEST(test_non_finite_gradients_skip_the_update);
    RUN_TEST(test_arena_stops_growing);
    RUN_TEST(test_cosine_over_a_time_budget);
    RUN_TEST(test_cosine_over_a_time_budget_resumes);
    RUN_TEST(test_resume_refuses_another_run);
    RUN_TEST(test_greedy_decoding_matches_prefix_decoding);
    RUN_TEST(test_bad_arguments);
    RUN_TEST(test_cancel_flag_drops_the_unfinished_update);
    free_fixture();
    return test_summary();
}
