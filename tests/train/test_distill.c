/* Token-level distillation: the teachers' distributions (attn_teacher_targets_*) against each
 * teacher's softmax recomputed in double for batches of another order and size, a student
 * that learns them through the trainer (attn_trainer_options.teacher), the weight a checkpoint
 * keeps, and the refusals. A tiny Transformer on a small reversal corpus keeps it fast. */
#include "trainer_fixture.h"
#include "../models/models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static trainer_fixture fx;

/* The mean of the teachers' softmaxes in double for the batch's positions, [size, steps, V]. */
static double *teachers_mean(attn_model *const *teachers, int count, const attn_batch *b)
{
    const int64_t vocab = fx.config.tgt_vocab, steps = b->target_len - 1;
    double *mean = test_alloc((size_t)(b->size * steps * vocab) * sizeof(double));
    memset(mean, 0, (size_t)(b->size * steps * vocab) * sizeof(double));
    attn_model_batch input = attn_model_batch_of(b);
    for (int k = 0; k < count; k++) {
        attn_graph *g = NULL;
        CHECK_OK(attn_graph_create(attn_model_params(teachers[k]), &g));
        attn_graph_set_training(g, 0);
        attn_var *logits = NULL;
        CHECK_OK(attn_model_forward_logits(teachers[k], g, &input, &logits));
        for (int64_t r = 0; logits != NULL && r < b->size * steps; r++) {
            const float *x = logits->value.data + r * vocab;
            double z = 0.0;
            for (int64_t c = 0; c < vocab; c++)
                z += exp((double)x[c]);
            for (int64_t c = 0; c < vocab; c++)
                mean[r * vocab + c] += exp((double)x[c]) / z / count;
        }
        attn_graph_destroy(g);
    }
    return mean;
}

/* Two teachers' mean, gathered for the shuffled batches a trainer reads (another size and
 * order than the batches the teachers read), is their softmaxes' mean at each predicted
 * position and zero past each target's end; the positions are the targets' tokens after <s>. */
static void test_targets_are_the_teachers_mean(void)
{
    attn_model *teachers[2] = {new_model(&fx.config, 1, 0.3f), new_model(&fx.config, 2, 0.3f)};
    attn_teacher_targets *targets = NULL;
    CHECK_OK(attn_teacher_targets_compute(teachers, 2, fx.train, 40, &targets));
    const int64_t vocab = fx.config.tgt_vocab;
    CHECK(attn_teacher_targets_vocab(targets) == vocab, "vocabulary %lld",
          (long long)attn_teacher_targets_vocab(targets));
    CHECK(attn_teacher_targets_pairs(targets) == TRAIN_PAIRS, "pairs %lld",
          (long long)attn_teacher_targets_pairs(targets));
    int64_t positions = 0;
    for (int i = 0; i < TRAIN_PAIRS; i++)
        positions += (int64_t)strlen(fx.targets[i]) + 1; /* its characters and </s> */
    CHECK(attn_teacher_targets_positions(targets) == positions, "%lld positions, expected %lld",
          (long long)attn_teacher_targets_positions(targets), (long long)positions);

    attn_batcher_config config = {72, 9, 1};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(fx.train, &config, &batcher));
    double worst = 0.0, worst_sum = 0.0, past_end = 0.0;
    int64_t rows_seen = 0;
    for (int64_t i = 0; i < attn_batcher_num_batches(batcher); i++) {
        const attn_batch *b = NULL;
        CHECK_OK(attn_batcher_next(batcher, &b));
        const int64_t steps = b->target_len - 1;
        float *got = test_alloc((size_t)(b->size * steps * vocab) * sizeof(float));
        CHECK_OK(attn_teacher_targets_gather(targets, b, got));
        double *want = teachers_mean(teachers, 2, b);
        for (int64_t row = 0; row < b->size; row++)
            for (int64_t s = 0; s < steps; s++) {
                const float *g = got + (row * steps + s) * vocab;
                const double *w = want + (row * steps + s) * vocab;
                double sum = 0.0;
                for (int64_t c = 0; c < vocab; c++) {
                    if (s < b->target_lengths[row] - 1)
                        worst = fmax(worst, fabs(g[c] - w[c]));
                    else
                        past_end = fmax(past_end, fabs(g[c]));
                    sum += g[c];
                }
                if (s < b->target_lengths[row] - 1) {
                    worst_sum = fmax(worst_sum, fabs(sum - 1.0));
                    rows_seen++;
                }
            }
        free(got);
        free(want);
    }
    CHECK(rows_seen == positions, "every position once: %lld of %lld", (long long)rows_seen,
          (long long)positions);
    CHECK(worst <= 1e-6, "the gathered rows are the teachers' mean (worst %g)", worst);
    CHECK(worst_sum <= 1e-5, "each row sums to 1 (worst %g)", worst_sum);
    CHECK(past_end == 0.0, "zeros past a target's end (%g)", past_end);

    /* One teacher twice is that teacher. */
    attn_teacher_targets *one = NULL, *twice = NULL;
    attn_model *same[2] = {teachers[0], teachers[0]};
    CHECK_OK(attn_teacher_targets_compute(teachers, 1, fx.train, 1000, &one));
    CHECK_OK(attn_teacher_targets_compute(same, 2, fx.train, 1000, &twice));
    const attn_batch *b = NULL;
    CHECK_OK(attn_batcher_next(batcher, &b));
    const size_t n = (size_t)(b->size * (b->target_len - 1) * vocab);
    float *a = test_alloc(n * sizeof(float)), *c = test_alloc(n * sizeof(float));
    CHECK_OK(attn_teacher_targets_gather(one, b, a));
    CHECK_OK(attn_teacher_targets_gather(twice, b, c));
    double apart = 0.0;
    for (size_t i = 0; i < n; i++)
        apart = fmax(apart, fabs(a[i] - c[i]));
    CHECK(apart <= 1e-7, "a teacher twice is that teacher (%g)", apart);
    free(a);
    free(c);
    attn_batcher_destroy(batcher);
    attn_teacher_targets_destroy(one);
    attn_teacher_targets_destroy(twice);
    attn_teacher_targets_destroy(targets);
    attn_model_destroy(teachers[0]);
    attn_model_destroy(teachers[1]);
}

/* The student's loss against the teacher alone (weight 1, no smoothing), over the corpus. */
static double loss_against(attn_model *student, const attn_teacher_targets *targets)
{
    attn_batcher_config config = {1000, 0, 0};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(fx.train, &config, &batcher));
    const attn_batch *b = NULL;
    CHECK_OK(attn_batcher_next(batcher, &b));
    const int64_t vocab = attn_teacher_targets_vocab(targets);
    float *rows = test_alloc((size_t)(b->size * (b->target_len - 1) * vocab) * sizeof(float));
    CHECK_OK(attn_teacher_targets_gather(targets, b, rows));
    attn_model_batch input = attn_model_batch_of(b);
    input.teacher = rows;
    input.teacher_vocab = vocab;
    input.teacher_weight = 1.0;
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(student), &g));
    attn_graph_set_training(g, 0);
    attn_var *loss = NULL;
    CHECK_OK(attn_model_forward_loss(student, g, &input, &loss));
    const double value = loss != NULL ? loss->value.data[0] : NAN;
    attn_graph_destroy(g);
    free(rows);
    attn_batcher_destroy(batcher);
    return value;
}

static attn_trainer_options student_options(const attn_teacher_targets *targets, double weight)
{
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 96;
    o.seed = 3;
    o.schedule.kind = ATTN_LR_CONSTANT;
    o.schedule.lr = 3e-3;
    o.max_epochs = 0;
    o.max_steps = 60;
    o.teacher = targets;
    o.teacher_weight = weight;
    o.metadata = fx.metadata;
    o.n_metadata = 2;
    return o;
}

/* A student trained on the teacher alone comes closer to it: its cross-entropy against the
 * teacher's distributions falls by most of the way to the teacher's own entropy. */
static void test_student_learns_the_teacher(void)
{
    attn_model *teacher = new_model(&fx.config, 1, 0.3f);
    attn_model *student = new_model(&fx.config, 5, MODEL_OWN_INIT);
    attn_teacher_targets *targets = NULL;
    CHECK_OK(attn_teacher_targets_compute(&teacher, 1, fx.train, 200, &targets));
    const double before = loss_against(student, targets);
    /* The teacher's entropy: the least any student can reach. */
    const double floor = loss_against(teacher, targets);
    attn_trainable trainable;
    CHECK_OK(attn_trainable_from_model(student, &trainable));
    attn_trainer_options o = student_options(targets, 1.0);
    o.checkpoint_path = test_scratch_path("student.ckpt.safetensors");
    attn_trainer *trainer = NULL;
    CHECK_OK(attn_trainer_create(&trainable, fx.train, NULL, &o, &trainer));
    CHECK_OK(attn_trainer_run(trainer));
    attn_trainer_destroy(trainer);
    const double after = loss_against(student, targets);
    CHECK(after < floor + 0.5 * (before - floor),
          "closer to the teacher: %.4f before, %.4f after, the teacher's entropy %.4f", before,
          after, floor);

    /* The checkpoint keeps the weight; the trainer refuses to resume it without the teachers,
     * and a run without them refuses to resume with them. */
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(o.checkpoint_path, &file));
    attn_trainer_options stored = attn_trainer_default_options();
    CHECK_OK(attn_trainer_options_from_checkpoint(file, &stored));
    CHECK(stored.teacher_weight == 1.0, "the checkpoint keeps the weight (%g)",
          stored.teacher_weight);
    attn_tensor_file_close(file);
    attn_trainer_options without = student_options(NULL, 0.0);
    CHECK_OK(attn_trainer_create(&trainable, fx.train, NULL, &without, &trainer));
    CHECK_FAILS(attn_trainer_resume(trainer, o.checkpoint_path), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "teacher_weight") != NULL, "the message names it: %s",
          attn_last_error());
    attn_trainer_destroy(trainer);

    remove(o.checkpoint_path);
    attn_teacher_targets_destroy(targets);
    attn_model_destroy(teacher);
    attn_model_destroy(student);
}

static void test_refusals(void)
{
    attn_model *teacher = new_model(&fx.config, 1, 0.3f);
    attn_teacher_targets *targets = NULL;
    CHECK_FAILS(attn_teacher_targets_compute(&teacher, 0, fx.train, 200, &targets),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_teacher_targets_compute(&teacher, 1, fx.train, 0, &targets),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_model_config wider = fx.config;
    wider.tgt_vocab += 3;
    attn_model *other = new_model(&wider, 2, 0.3f);
    attn_model *mixed[2] = {teacher, other};
    CHECK_FAILS(attn_teacher_targets_compute(mixed, 2, fx.train, 200, &targets),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "target vocabulary") != NULL, "%s", attn_last_error());
    CHECK(targets == NULL, "nothing on failure");

    /* Distributions of the validation corpus do not fit the training corpus. */
    CHECK_OK(attn_teacher_targets_compute(&teacher, 1, fx.valid, 200, &targets));
    attn_model *student = new_model(&fx.config, 5, MODEL_OWN_INIT);
    attn_trainable trainable;
    CHECK_OK(attn_trainable_from_model(student, &trainable));
    attn_trainer *trainer = NULL;
    attn_trainer_options o = student_options(targets, 0.5);
    CHECK_FAILS(attn_trainer_create(&trainable, fx.train, NULL, &o, &trainer),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "pairs") != NULL, "%s", attn_last_error());
    attn_batcher_config config = {1000, 0, 0};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(fx.train, &config, &batcher));
    const attn_batch *b = NULL;
    CHECK_OK(attn_batcher_next(batcher, &b));
    float *rows =
        test_alloc((size_t)(b->size * b->target_len * fx.config.tgt_vocab) * sizeof(float));
    CHECK_FAILS(attn_teacher_targets_gather(targets, b, rows), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "another corpus") != NULL, "%s", attn_last_error());
    free(rows);
    attn_batcher_destroy(batcher);

    /* A weight without teachers, teachers without a weight, a weight out of range. */
    o = student_options(NULL, 0.5);
    CHECK_FAILS(attn_trainer_create(&trainable, fx.train, NULL, &o, &trainer),
                ATTN_ERR_INVALID_ARGUMENT);
    o = student_options(targets, 0.0);
    CHECK_FAILS(attn_trainer_create(&trainable, fx.train, NULL, &o, &trainer),
                ATTN_ERR_INVALID_ARGUMENT);
    o = student_options(targets, 1.5);
    CHECK_FAILS(attn_trainer_create(&trainable, fx.train, NULL, &o, &trainer),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(trainer == NULL, "no trainer on failure");

    attn_teacher_targets_destroy(targets);
    attn_model_destroy(student);
    attn_model_destroy(other);
    attn_model_destroy(teacher);
}

int main(void)
{
    trainer_fixture_make(&fx);
    RUN_TEST(test_targets_are_the_teachers_mean);
    RUN_TEST(test_student_learns_the_teacher);
    RUN_TEST(test_refusals);
    trainer_fixture_free(&fx);
    return test_summary();
}
