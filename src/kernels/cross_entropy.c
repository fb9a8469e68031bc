/* Cross-entropy from logits with label smoothing and an ignore index: argument checks,
 * dispatch, the double-precision reference path and the portable kernels. The SIMD
 * kernels are in cross_entropy_simd.h.
 *
 * Per counted row, with lse = log(sum(exp(logits))),
 *   loss = (1 - eps) (lse - x[target]) + eps (lse - mean(x)),
 * computed as (max - x) + log(sum(exp(x - max))) in double so that large logits do not
 * lose the small difference. The row losses are summed in row order, so the total does not
 * depend on the thread count.
 *
 * Last, the cross-entropy against a distribution (a teacher's), for distillation. */
#include "kernels/elementwise.h"
#include "kernels/portable_rows.h"
#include "kernels/ref_elementwise.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

/* ---- portable kernels ------------------------------------------------------------------- */

void attn_cross_entropy_forward_rows_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_cross_entropy_job *job = job_ptr;
    const int64_t n = job->vocab;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->logits + r * n;
        int32_t target = job->targets[r];
        if (target == job->ignore_index) {
            job->row_loss[r] = 0.0;
            if (job->row_lse_out != NULL)
                job->row_lse_out[r] = 0.0f;
            continue;
        }
        float m = attn_row_max(n, x);
        double log_sum = log((double)attn_row_exp_sum(n, x, m));
        double loss = ((double)m - x[target]) + log_sum;
        if (job->smoothing != 0.0f) {
            double mean = (double)attn_row_sum(n, x) / (double)n;
            double eps = job->smoothing;
            loss = (1.0 - eps) * loss + eps * (((double)m - mean) + log_sum);
        }
        job->row_loss[r] = loss;
        if (job->row_lse_out != NULL)
            job->row_lse_out[r] = (float)(m + log_sum);
    }
}

void attn_cross_entropy_backward_rows_portable(void *job_ptr, int64_t begin, int64_t end,
                                               int thread)
{
    const attn_cross_entropy_job *job = job_ptr;
    const int64_t n = job->vocab;
    const float uniform = job->smoothing / (float)n;
    const float scale = job->grad_scale;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        int32_t target = job->targets[r];
        if (target == job->ignore_index)
            continue;
        const float *x = job->logits + r * n;
        float *dx = job->dlogits + r * n;
        float lse = job->row_lse_in[r];
        for (int64_t c = 0; c < n; c++)
            dx[c] += scale * (attn_fast_exp(x[c] - lse) - uniform);
        dx[target] -= scale * (1.0f - job->smoothing);
    }
}

/* ---- reference path ---------------------------------------------------------------------------
 */

static attn_status forward_reference(int64_t rows, int64_t vocab, const float *logits,
                                     const int32_t *targets, int32_t ignore_index, float smoothing,
                                     double *row_loss, float *row_lse)
{
    double *x = attn_ref_doubles((size_t)vocab, 1, "attn_cross_entropy_forward");
    if (x == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t r = 0; r < rows; r++) {
        double lse = 0.0;
        row_loss[r] = 0.0;
        if (targets[r] != ignore_index) {
            for (int64_t c = 0; c < vocab; c++)
                x[c] = logits[r * vocab + c];
            row_loss[r] = attn_ref_cross_entropy_row(vocab, x, targets[r], smoothing, &lse);
        }
        if (row_lse != NULL)
            row_lse[r] = (float)lse;
    }
    free(x);
    return ATTN_OK;
}

static attn_status backward_reference(int64_t rows, int64_t vocab, const float *logits,
                                      const int32_t *targets, int32_t ignore_index, float smoothing,
                                      const float *row_lse, float grad_scale, float *dlogits)
{
    double *buffer = attn_ref_doubles((size_t)vocab, 2, "attn_cross_entropy_backward");
    if (buffer == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    double *x = buffer, *dx = buffer + vocab;
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == ignore_index)
            continue;
        for (int64_t c = 0; c < vocab; c++) {
            x[c] = logits[r * vocab + c];
            dx[c] = dlogits[r * vocab + c];
        }
        attn_ref_cross_entropy_backward_row(vocab, x, targets[r], smoothing, row_lse[r], grad_scale,
                                            dx);
        for (int64_t c = 0; c < vocab; c++)
            dlogits[r * vocab + c] = (float)dx[c];
    }
    free(buffer);
    return ATTN_OK;
}

/* ---- entry points ------------------------------------------------------------------------------
 */

/* Checks sizes, smoothing and every target; counts the rows that are not ignored. */
static attn_status check_arguments(const char *function, int64_t rows, int64_t vocab,
                                   const int32_t *targets, int32_t ignore_index, float smoothing,
                                   int64_t *counted)
{
    ATTN_CHECK_ARG(rows >= 0, "%s: negative rows (%lld)", function, (long long)rows);
    ATTN_CHECK_ARG(vocab > 0, "%s: vocab must be positive, got %lld", function, (long long)vocab);
    ATTN_CHECK_ARG(smoothing >= 0.0f && smoothing <= 1.0f,
                   "%s: smoothing must be in [0, 1], got %g", function, (double)smoothing);
    *counted = 0;
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(targets != NULL, "%s: targets must not be NULL", function);
    for (int64_t r = 0; r < rows; r++) {
        int32_t t = targets[r];
        if (t == ignore_index)
            continue;
        ATTN_CHECK_ARG(t >= 0 && t < vocab,
                       "%s: targets[%lld] = %d is outside [0, %lld) and is not ignore_index (%d)",
                       function, (long long)r, (int)t, (long long)vocab, (int)ignore_index);
        (*counted)++;
    }
    return ATTN_OK;
}

attn_status attn_cross_entropy_forward(int64_t rows, int64_t vocab, const float *logits,
                                       const int32_t *targets, int32_t ignore_index,
                                       float smoothing, double *loss_sum, int64_t *counted,
                                       float *row_lse)
{
    ATTN_CHECK_NOT_NULL(loss_sum);
    ATTN_CHECK_NOT_NULL(counted);
    *loss_sum = 0.0;
    *counted = 0;
    int64_t rows_counted;
    ATTN_TRY(
        check_arguments(__func__, rows, vocab, targets, ignore_index, smoothing, &rows_counted));
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(logits);

    size_t row_loss_bytes;
    if (!attn_mul_size((size_t)rows, sizeof(double), &row_loss_bytes))
        return ATTN_ERR_OUT_OF_MEMORY;
    double *row_loss = attn_scratch_acquire(row_loss_bytes);
    if (row_loss == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_isa isa = attn_active_isa();
    if (isa == ATTN_ISA_REFERENCE) {
        attn_status status = forward_reference(rows, vocab, logits, targets, ignore_index,
                                               smoothing, row_loss, row_lse);
        if (status != ATTN_OK) {
            attn_scratch_release(row_loss);
            return status;
        }
    } else {
        attn_cross_entropy_job job = {.vocab = vocab,
                                      .logits = logits,
                                      .targets = targets,
                                      .ignore_index = ignore_index,
                                      .smoothing = smoothing,
                                      .row_loss = row_loss,
                                      .row_lse_out = row_lse};
        attn_parallel_for(rows, attn_rows_per_chunk(vocab),
                          ATTN_PICK_KERNEL(isa, attn_cross_entropy_forward_rows),
                          &job);
    }
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++)
        total += row_loss[r];
    attn_scratch_release(row_loss);
    *loss_sum = total;
    *counted = rows_counted;
    return ATTN_OK;
}

attn_status attn_cross_entropy_backward(int64_t rows, int64_t vocab, const float *logits,
                                        const int32_t *targets, int32_t ignore_index,
                                        float smoothing, const float *row_lse, float grad_scale,
                                        float *dlogits)
{
    int64_t rows_counted;
    ATTN_TRY(
        check_arguments(__func__, rows, vocab, targets, ignore_index, smoothing, &rows_counted));
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(logits);
    ATTN_CHECK_NOT_NULL(row_lse);
    ATTN_CHECK_NOT_NULL(dlogits);

    attn_isa isa = attn_active_isa();
    if (isa == ATTN_ISA_REFERENCE)
        return backward_reference(rows, vocab, logits, targets, ignore_index, smoothing, row_lse,
                                  grad_scale, dlogits);
    attn_cross_entropy_job job = {.vocab = vocab,
                                  .logits = logits,
                                  .targets = targets,
                                  .ignore_index = ignore_index,
                                  .smoothing = smoothing,
                                  .row_lse_in = row_lse,
                                  .grad_scale = grad_scale,
                                  .dlogits = dlogits};
    attn_parallel_for(rows, attn_rows_per_chunk(vocab),
                      ATTN_PICK_KERNEL(isa, attn_cross_entropy_backward_rows),
                      &job);
    return ATTN_OK;
}

/* ---- against a distribution ------------------------------------------------------------ */

/* log(sum(exp(x))) of one row in double, from its maximum so large logits keep their
 * differences; -inf for a row of -inf. */
static double row_log_sum_exp(int64_t vocab, const float *x)
{
    double m = -INFINITY;
    for (int64_t c = 0; c < vocab; c++)
        m = x[c] > m ? x[c] : m;
    if (m == -INFINITY)
        return m;
    double sum = 0.0;
    for (int64_t c = 0; c < vocab; c++)
        sum += exp((double)x[c] - m);
    return m + log(sum);
}

static attn_status check_soft_arguments(const char *function, int64_t rows, int64_t vocab,
                                        const float *logits, const float *probs,
                                        const int32_t *targets, int32_t ignore_index,
                                        int64_t *counted)
{
    ATTN_CHECK_ARG(rows >= 0, "%s: negative rows (%lld)", function, (long long)rows);
    ATTN_CHECK_ARG(vocab > 0, "%s: vocab must be positive, got %lld", function, (long long)vocab);
    *counted = 0;
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(logits != NULL, "%s: logits must not be NULL", function);
    ATTN_CHECK_ARG(probs != NULL, "%s: probs must not be NULL", function);
    ATTN_CHECK_ARG(targets != NULL, "%s: targets must not be NULL", function);
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == ignore_index)
            continue;
        for (int64_t c = 0; c < vocab; c++) {
            const float p = probs[r * vocab + c];
            ATTN_CHECK_ARG(p >= 0.0f && p <= FLT_MAX,
                           "%s: probs[%lld, %lld] = %g: a distribution's entries must be finite "
                           "and non-negative",
                           function, (long long)r, (long long)c, (double)p);
        }
        (*counted)++;
    }
    return ATTN_OK;
}

attn_status attn_soft_cross_entropy_forward(int64_t rows, int64_t vocab, const float *logits,
                                            const float *probs, const int32_t *targets,
                                            int32_t ignore_index, double *loss_sum,
                                            int64_t *counted)
{
    ATTN_CHECK_NOT_NULL(loss_sum);
    ATTN_CHECK_NOT_NULL(counted);
    *loss_sum = 0.0;
    *counted = 0;
    int64_t rows_counted;
    ATTN_TRY(check_soft_arguments(__func__, rows, vocab, logits, probs, targets, ignore_index,
                                  &rows_counted));
    double total = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == ignore_index)
            continue;
        const float *x = logits + r * vocab, *p = probs + r * vocab;
        const double lse = row_log_sum_exp(vocab, x);
        double loss = 0.0;
        for (int64_t c = 0; c < vocab; c++)
            if (p[c] != 0.0f)
                loss += (double)p[c] * (lse - (double)x[c]);
        total += loss;
    }
    *loss_sum = total;
    *counted = rows_counted;
    return ATTN_OK;
}

attn_status attn_soft_cross_entropy_backward(int64_t rows, int64_t vocab, const float *logits,
                                             const float *probs, const int32_t *targets,
                                             int32_t ignore_index, float grad_scale, float *dlogits)
{
    int64_t rows_counted;
    ATTN_TRY(check_soft_arguments(__func__, rows, vocab, logits, probs, targets, ignore_index,
                                  &rows_counted));
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(dlogits);
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == ignore_index)
            continue;
        const float *x = logits + r * vocab, *p = probs + r * vocab;
        float *dx = dlogits + r * vocab;
        const double lse = row_log_sum_exp(vocab, x);
        double mass = 0.0;
        for (int64_t c = 0; c < vocab; c++)
            mass += p[c];
        for (int64_t c = 0; c < vocab; c++)
            dx[c] += (float)((double)grad_scale * (mass * exp((double)x[c] - lse) - (double)p[c]));
    }
    return ATTN_OK;
}
