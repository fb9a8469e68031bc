/* The loss (cross-entropy, one node from logits to the mean, with a teacher's distributions
 * mixed in for distillation) and mean pooling over the
 * unpadded positions (for sequence classifiers). Pooling reads each element once, so one
 * portable loop serves every instruction set. */
#include "autodiff/autodiff_internal.h"

#include <math.h>
#include <string.h>

typedef struct cross_entropy_ctx {
    attn_var *logits;
    const int32_t *targets;
    int32_t ignore_index;
    float smoothing;
    int64_t counted;
    float *row_lse;
    const float *teacher; /* [rows, vocab] or NULL */
    float teacher_weight;
} cross_entropy_ctx;

static attn_status cross_entropy_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    cross_entropy_ctx *ctx = raw;
    float *dlogits;
    ATTN_TRY(attn_graph_grad(graph, ctx->logits, &dlogits));
    if (dlogits == NULL || ctx->counted == 0)
        return ATTN_OK;
    const int64_t rows = attn_ad_rows(ctx->logits), vocab = attn_ad_last_dim(ctx->logits);
    const double mean = (double)output->grad[0] / (double)ctx->counted;
    const double weight = ctx->teacher != NULL ? (double)ctx->teacher_weight : 0.0;
    if (weight < 1.0)
        ATTN_TRY(attn_cross_entropy_backward(rows, vocab, ctx->logits->value.data, ctx->targets,
                                             ctx->ignore_index, ctx->smoothing, ctx->row_lse,
                                             (float)(mean * (1.0 - weight)), dlogits));
    if (weight > 0.0)
        ATTN_TRY(attn_soft_cross_entropy_backward(rows, vocab, ctx->logits->value.data,
                                                  ctx->teacher, ctx->targets, ctx->ignore_index,
                                                  (float)(mean * weight), dlogits));
    return ATTN_OK;
}

attn_status attn_op_cross_entropy(attn_graph *graph, attn_var *logits, const int32_t *targets,
                                  int32_t ignore_index, float smoothing, attn_var **out)
{
    return attn_op_cross_entropy_with_teacher(graph, logits, targets, ignore_index, smoothing, NULL,
                                              0.0f, out);
}

attn_status attn_op_cross_entropy_with_teacher(attn_graph *graph, attn_var *logits,
                                               const int32_t *targets, int32_t ignore_index,
                                               float smoothing, const float *teacher,
                                               float teacher_weight, attn_var **out)
{
    const char *fn = teacher != NULL ? __func__ : "attn_op_cross_entropy";
    char a[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "logits", logits));
    ATTN_CHECK_ARG(logits->value.ndim >= 1 && attn_ad_last_dim(logits) >= 1,
                   "%s: logits need a class dimension of at least 1, got %s", fn,
                   attn_ad_shape_text(logits, a, sizeof a));
    ATTN_CHECK_ARG(smoothing >= 0.0f && smoothing <= 1.0f,
                   "%s: smoothing must be in [0, 1], got %g", fn, (double)smoothing);
    ATTN_CHECK_ARG(teacher_weight >= 0.0f && teacher_weight <= 1.0f,
                   "%s: teacher_weight must be in [0, 1], got %g", fn, (double)teacher_weight);
    const int64_t rows = attn_ad_rows(logits), vocab = attn_ad_last_dim(logits);
    ATTN_CHECK_ARG(rows == 0 || targets != NULL, "%s: targets must not be NULL", fn);
    for (int64_t r = 0; r < rows; r++)
        ATTN_CHECK_ARG(targets[r] == ignore_index || (targets[r] >= 0 && targets[r] < vocab),
                       "%s: targets[%lld] = %d is outside [0, %lld) and is not the ignore index "
                       "%d",
                       fn, (long long)r, (int)targets[r], (long long)vocab, (int)ignore_index);
    /* Without a teacher, or with none of its weight, this is the plain loss to the bit. */
    const double weight = teacher != NULL ? (double)teacher_weight : 0.0;

    attn_var *inputs[1] = {logits};
    const int wants = attn_graph_wants_grad(graph, 1, inputs);
    attn_var *loss;
    ATTN_TRY(attn_graph_new_var(graph, 0, NULL, wants, &loss));
    int32_t *copy = NULL;
    float *row_lse = NULL, *teacher_copy = NULL;
    if (wants) {
        copy = attn_graph_alloc(graph, (size_t)rows * sizeof *copy);
        row_lse = attn_graph_alloc_floats(graph, (size_t)rows);
        if (copy == NULL || row_lse == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        if (rows > 0)
            memcpy(copy, targets, (size_t)rows * sizeof *copy);
        /* The caller's array need only live through this call, as the targets. */
        if (weight > 0.0 && rows > 0) {
            teacher_copy = attn_graph_alloc_floats(graph, (size_t)(rows * vocab));
            if (teacher_copy == NULL)
                return ATTN_ERR_OUT_OF_MEMORY;
            memcpy(teacher_copy, teacher, (size_t)(rows * vocab) * sizeof *teacher_copy);
        }
    }
    double sum;
    int64_t counted;
    ATTN_TRY(attn_cross_entropy_forward(rows, vocab, logits->value.data, targets, ignore_index,
                                        smoothing, &sum, &counted, row_lse));
    if (weight > 0.0) {
        double teacher_sum;
        int64_t teacher_counted;
        ATTN_TRY(attn_soft_cross_entropy_forward(rows, vocab, logits->value.data, teacher, targets,
                                                 ignore_index, &teacher_sum, &teacher_counted));
        sum = (1.0 - weight) * sum + weight * teacher_sum;
    }
    loss->value.data[0] = counted > 0 ? (float)(sum / (double)counted) : 0.0f;
    if (wants) {
        cross_entropy_ctx ctx = {logits,  copy,    ignore_index, smoothing,
                                 counted, row_lse, teacher_copy, (float)weight};
        ATTN_TRY(attn_ad_record(graph, 1, &loss, cross_entropy_backward, &ctx, sizeof ctx,
                                "cross_entropy"));
    }
    *out = loss;
    return ATTN_OK;
}

/* ---- mean pooling ------------------------------------------------------------------------ */

typedef struct pool_job {
    int64_t len, dim;
    const int32_t *lengths;
    const float *src;
    float *dst;
} pool_job;

static void pool_forward_range(void *raw, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const pool_job *job = raw;
    for (int64_t b = begin; b < end; b++) {
        const int64_t length = job->lengths[b];
        float *y = job->dst + b * job->dim;
        for (int64_t c = 0; c < job->dim; c++) {
            double sum = 0.0;
            for (int64_t t = 0; t < length; t++)
                sum += job->src[(b * job->len + t) * job->dim + c];
            y[c] = length > 0 ? (float)(sum / (double)length) : 0.0f;
        }
    }
}

static void pool_backward_range(void *raw, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const pool_job *job = raw;
    for (int64_t b = begin; b < end; b++) {
        const int64_t length = job->lengths[b];
        if (length == 0)
            continue;
        const float inv = (float)(1.0 / (double)length);
        const float *dy = job->src + b * job->dim;
        for (int64_t t = 0; t < length; t++) {
            float *dx = job->dst + (b * job->len + t) * job->dim;
            for (int64_t c = 0; c < job->dim; c++)
                dx[c] += dy[c] * inv;
        }
    }
}

typedef struct pool_ctx {
    attn_var *x;
    const int32_t *lengths;
} pool_ctx;

static attn_status mean_pool_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    pool_ctx *ctx = raw;
    float *dx;
    ATTN_TRY(attn_graph_grad(graph, ctx->x, &dx));
    if (dx == NULL)
        return ATTN_OK;
    const attn_tensor *x = &ctx->x->value;
    pool_job job = {x->shape[1], x->shape[2], ctx->lengths, output->grad, dx};
    attn_parallel_for(x->shape[0], 1, pool_backward_range, &job);
    return ATTN_OK;
}

attn_status attn_op_mean_pool(attn_graph *graph, attn_var *x, const int32_t *lengths,
                              attn_var **out)
{
    const char *fn = __func__;
    char a[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG(x->value.ndim == 3, "%s: x must be [batch, len, dim], got %s", fn,
                   attn_ad_shape_text(x, a, sizeof a));
    const int64_t batch = x->value.shape[0], len = x->value.shape[1], dim = x->value.shape[2];
    ATTN_CHECK_ARG(batch == 0 || lengths != NULL, "%s: lengths must not be NULL", fn);
    for (int64_t b = 0; b < batch; b++)
        ATTN_CHECK_ARG(lengths[b] >= 0 && lengths[b] <= len,
                       "%s: lengths[%lld] = %d is outside [0, %lld]", fn, (long long)b,
                       (int)lengths[b], (long long)len);
    int32_t *copy = attn_graph_alloc(graph, (size_t)batch * sizeof *copy);
    if (copy == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    if (batch > 0)
        memcpy(copy, lengths, (size_t)batch * sizeof *copy);

    attn_var *inputs[1] = {x};
    const int wants = attn_graph_wants_grad(graph, 1, inputs);
    const int64_t shape[2] = {batch, dim};
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 2, shape, wants, &y));
    pool_job job = {len, dim, copy, x->value.data, y->value.data};
    attn_parallel_for(batch, 1, pool_forward_range, &job);
    if (wants) {
        pool_ctx ctx = {x, copy};
        ATTN_TRY(attn_ad_record(graph, 1, &y, mean_pool_backward, &ctx, sizeof ctx, "mean_pool"));
    }
    *out = y;
    return ATTN_OK;
}
