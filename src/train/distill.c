/* Teachers' distributions at every target position of a training corpus, computed once before
 * a student trains on them (attn_teacher_targets_*; the loss that reads them is
 * attn_op_cross_entropy_with_teacher). Pair i's positions are rows offsets[i] .. offsets[i + 1]
 * of one [positions, vocab] array, so a batch gathers its rows by the pairs' corpus indices. */
#include "core/internal.h"
#include "attn/attn_trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct attn_teacher_targets {
    int64_t vocab, pairs, positions;
    int64_t *offsets; /* [pairs + 1] */
    float *probs;     /* [positions, vocab] */
};

void attn_teacher_targets_destroy(attn_teacher_targets *targets)
{
    if (targets == NULL)
        return;
    free(targets->offsets);
    free(targets->probs);
    free(targets);
}

int64_t attn_teacher_targets_vocab(const attn_teacher_targets *targets)
{
    return targets != NULL ? targets->vocab : 0;
}

int64_t attn_teacher_targets_pairs(const attn_teacher_targets *targets)
{
    return targets != NULL ? targets->pairs : 0;
}

int64_t attn_teacher_targets_positions(const attn_teacher_targets *targets)
{
    return targets != NULL ? targets->positions : 0;
}

/* The positions each pair's target predicts (its tokens after <s>, </s> included), from one
 * pass of the batcher, and the offsets they give. */
static attn_status count_positions(attn_batcher *batcher, int64_t batches, attn_teacher_targets *t)
{
    for (int64_t i = 0; i < batches; i++) {
        const attn_batch *batch;
        ATTN_TRY(attn_batcher_next(batcher, &batch));
        for (int64_t b = 0; b < batch->size; b++)
            t->offsets[batch->pairs[b] + 1] = batch->target_lengths[b] - 1;
    }
    for (int64_t p = 0; p < t->pairs; p++)
        t->offsets[p + 1] += t->offsets[p];
    t->positions = t->offsets[t->pairs];
    return ATTN_OK;
}

/* Adds share x softmax(logits) of each predicted position of the batch to its row. */
static void add_softmaxes(attn_teacher_targets *t, const attn_batch *batch, const float *logits,
                          double share)
{
    const int64_t steps = batch->target_len - 1, vocab = t->vocab;
    for (int64_t b = 0; b < batch->size; b++) {
        float *rows = t->probs + t->offsets[batch->pairs[b]] * vocab;
        for (int64_t s = 0; s < batch->target_lengths[b] - 1; s++) {
            const float *x = logits + (b * steps + s) * vocab;
            float *p = rows + s * vocab;
            double m = -INFINITY, sum = 0.0;
            for (int64_t c = 0; c < vocab; c++)
                m = x[c] > m ? x[c] : m;
            for (int64_t c = 0; c < vocab; c++)
                sum += exp((double)x[c] - m);
            for (int64_t c = 0; c < vocab; c++)
                p[c] += (float)(share * exp((double)x[c] - m) / sum);
        }
    }
}

static attn_status check_teachers(const char *fn, attn_model *const *teachers, int64_t count)
{
    ATTN_CHECK_ARG(teachers != NULL, "%s: teachers must not be NULL", fn);
    ATTN_CHECK_ARG(count >= 1, "%s: %lld teachers, expected at least one", fn, (long long)count);
    for (int64_t k = 0; k < count; k++) {
        ATTN_CHECK_ARG(teachers[k] != NULL, "%s: teachers[%lld] is NULL", fn, (long long)k);
        const attn_model_config *c = attn_model_get_config(teachers[k]);
        ATTN_CHECK_ARG(c->arch == ATTN_ARCH_TRANSFORMER || c->arch == ATTN_ARCH_RNN,
                       "%s: teacher %lld is not an encoder-decoder (arch transformer or rnn)", fn,
                       (long long)k + 1);
        ATTN_CHECK_ARG(attn_model_precision(teachers[k]) == ATTN_PRECISION_FP32,
                       "%s: teacher %lld holds %s weights (attn quantize's output); teach with "
                       "the fp32 model file",
                       fn, (long long)k + 1,
                       attn_precision_name(attn_model_precision(teachers[k])));
        const int64_t vocab = attn_model_get_config(teachers[0])->tgt_vocab;
        ATTN_CHECK_ARG(
            c->tgt_vocab == vocab,
            "%s: teacher %lld has a target vocabulary of %lld tokens, teacher 1 of %lld: "
            "teachers must share the student's target vocabulary",
            fn, (long long)k + 1, (long long)c->tgt_vocab, (long long)vocab);
    }
    return ATTN_OK;
}

/* One teacher over the whole corpus, adding share x its distributions. */
static attn_status run_teacher(attn_model *teacher, attn_batcher *batcher, int64_t batches,
                               attn_teacher_targets *t, double share)
{
    attn_graph *graph = NULL;
    ATTN_TRY(attn_graph_create(attn_model_params(teacher), &graph));
    attn_graph_set_training(graph, 0);
    attn_graph_set_recording(graph, 0);
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < batches && status == ATTN_OK; i++) {
        const attn_batch *batch;
        status = attn_batcher_next(batcher, &batch);
        if (status != ATTN_OK)
            break;
        attn_model_batch input = attn_model_batch_of(batch);
        attn_var *logits;
        attn_graph_reset(graph);
        status = attn_model_forward_logits(teacher, graph, &input, &logits);
        if (status == ATTN_OK)
            add_softmaxes(t, batch, logits->value.data, share);
    }
    attn_graph_destroy(graph);
    return status;
}

attn_status attn_teacher_targets_compute(attn_model *const *teachers, int64_t count,
                                         const attn_corpus *corpus, int64_t batch_tokens,
                                         attn_teacher_targets **out)
{
    static const char fn[] = "attn_teacher_targets_compute";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_TRY(check_teachers(fn, teachers, count));
    ATTN_CHECK_ARG(batch_tokens >= 1, "%s: batch_tokens must be at least 1, got %lld", fn,
                   (long long)batch_tokens);
    ATTN_CHECK_ARG(attn_corpus_size(corpus) >= 1, "%s: the corpus has no pairs", fn);

    attn_teacher_targets *t = calloc(1, sizeof *t);
    if (t == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    t->vocab = attn_model_get_config(teachers[0])->tgt_vocab;
    t->pairs = attn_corpus_size(corpus);
    attn_batcher_config config = {batch_tokens, 0, 0};
    attn_batcher *batcher = NULL;
    attn_status status = attn_batcher_create(corpus, &config, &batcher);
    int64_t batches = status == ATTN_OK ? attn_batcher_num_batches(batcher) : 0;
    if (status == ATTN_OK) {
        t->offsets = calloc((size_t)t->pairs + 1, sizeof *t->offsets);
        status = t->offsets != NULL ? count_positions(batcher, batches, t) : ATTN_ERR_OUT_OF_MEMORY;
    }
    if (status == ATTN_OK) {
        size_t floats;
        if (!attn_mul_size((size_t)t->positions, (size_t)t->vocab, &floats) ||
            (t->probs = calloc(floats, sizeof *t->probs)) == NULL)
            status = attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                               "%s: no memory for the teachers' distributions (%lld positions x "
                               "%lld tokens x 4 bytes)",
                               fn, (long long)t->positions, (long long)t->vocab);
    }
    for (int64_t k = 0; k < count && status == ATTN_OK; k++)
        status = run_teacher(teachers[k], batcher, batches, t, 1.0 / (double)count);
    attn_batcher_destroy(batcher);
    if (status != ATTN_OK) {
        attn_teacher_targets_destroy(t);
        return status;
    }
    *out = t;
    return ATTN_OK;
}

attn_status attn_teacher_targets_gather(const attn_teacher_targets *targets,
                                        const attn_batch *batch, float *out)
{
    static const char fn[] = "attn_teacher_targets_gather";
    ATTN_CHECK_NOT_NULL(targets);
    ATTN_CHECK_NOT_NULL(batch);
    ATTN_CHECK_NOT_NULL(out);
    const int64_t steps = batch->target_len - 1, vocab = targets->vocab;
    ATTN_CHECK_ARG(steps >= 0, "%s: target_len %lld, expected at least 1", fn,
                   (long long)batch->target_len);
    for (int64_t b = 0; b < batch->size; b++) {
        const int64_t pair = batch->pairs[b], length = batch->target_lengths[b] - 1;
        ATTN_CHECK_ARG(pair >= 0 && pair < targets->pairs,
                       "%s: the batch's pair %lld is outside the %lld pairs the teachers read: "
                       "the distributions belong to another corpus",
                       fn, (long long)pair, (long long)targets->pairs);
        const int64_t held = targets->offsets[pair + 1] - targets->offsets[pair];
        ATTN_CHECK_ARG(length == held && length <= steps,
                       "%s: pair %lld predicts %lld target positions, the teachers read %lld: "
                       "the distributions belong to another corpus",
                       fn, (long long)pair, (long long)length, (long long)held);
        float *rows = out + b * steps * vocab;
        memcpy(rows, targets->probs + targets->offsets[pair] * vocab,
               (size_t)(length * vocab) * sizeof *rows);
        memset(rows + length * vocab, 0, (size_t)((steps - length) * vocab) * sizeof *rows);
    }
    return ATTN_OK;
}
