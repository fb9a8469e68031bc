/* Softmax and log-softmax over the last dimension: argument checks, dispatch, the
 * double-precision reference path and the portable kernels. The SIMD kernels are in
 * softmax_simd.h.
 *
 * Fully masked rows: a row of all -inf has softmax 0 everywhere (not 0/0 = NaN) and
 * log-softmax -inf everywhere; their backward follows the formulas with those values. */
#include "kernels/elementwise.h"
#include "kernels/portable_rows.h"
#include "kernels/ref_elementwise.h"

#include <stdlib.h>
#include <string.h>

/* ---- portable kernels ------------------------------------------------------------------- */

void attn_softmax_forward_rows_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->in + r * n;
        float *y = job->out + r * n;
        float m = attn_row_max(n, x);
        if (m == -INFINITY) {
            memset(y, 0, (size_t)n * sizeof *y);
            continue;
        }
        float inv_sum = 1.0f / attn_row_exp_store_sum(n, x, m, y);
        for (int64_t j = 0; j < n; j++)
            y[j] *= inv_sum;
    }
}

void attn_softmax_backward_rows_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *y = job->in + r * n, *dy = job->dy + r * n;
        float *dx = job->out + r * n;
        float dot = attn_row_dot(n, dy, y);
        for (int64_t j = 0; j < n; j++)
            dx[j] += y[j] * (dy[j] - dot);
    }
}

void attn_log_softmax_forward_rows_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->in + r * n;
        float *y = job->out + r * n;
        float m = attn_row_max(n, x);
        if (m == -INFINITY) {
            for (int64_t j = 0; j < n; j++)
                y[j] = -INFINITY;
            continue;
        }
        float log_sum = logf(attn_row_exp_sum(n, x, m));
        for (int64_t j = 0; j < n; j++)
            y[j] = (x[j] - m) - log_sum;
    }
}

void attn_log_softmax_backward_rows_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *y = job->in + r * n, *dy = job->dy + r * n;
        float *dx = job->out + r * n;
        float sum = attn_row_sum(n, dy);
        for (int64_t j = 0; j < n; j++)
            dx[j] += dy[j] - attn_fast_exp(y[j]) * sum;
    }
}

/* ---- reference path: each row through the double-precision formulas ---------------------- */

typedef enum { FORWARD, BACKWARD } direction;

static attn_status run_reference(const char *function, direction dir, int log_space, int64_t rows,
                                 int64_t cols, const float *in, const float *dy, float *out)
{
    double *buffer = attn_ref_doubles((size_t)cols, 3, function);
    if (buffer == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    double *a = buffer, *b = buffer + cols, *result = buffer + 2 * cols;
    for (int64_t r = 0; r < rows; r++) {
        const float *in_row = in + r * cols;
        float *out_row = out + r * cols;
        for (int64_t j = 0; j < cols; j++)
            a[j] = in_row[j];
        if (dir == FORWARD) {
            if (log_space)
                attn_ref_log_softmax_row(cols, a, result);
            else
                attn_ref_softmax_row(cols, a, result);
        } else {
            for (int64_t j = 0; j < cols; j++) {
                b[j] = dy[r * cols + j];
                result[j] = out_row[j];
            }
            if (log_space)
                attn_ref_log_softmax_backward_row(cols, a, b, result);
            else
                attn_ref_softmax_backward_row(cols, a, b, result);
        }
        for (int64_t j = 0; j < cols; j++)
            out_row[j] = (float)result[j];
    }
    free(buffer);
    return ATTN_OK;
}

/* ---- entry points -------------------------------------------------------------------------- */

static attn_status run(const char *function, direction dir, int log_space, int64_t rows,
                       int64_t cols, const float *in, const float *dy, float *out,
                       attn_range_fn kernel)
{
    attn_isa isa = attn_active_isa();
    if (isa == ATTN_ISA_REFERENCE)
        return run_reference(function, dir, log_space, rows, cols, in, dy, out);
    attn_softmax_job job = {cols, in, dy, out};
    attn_parallel_for(rows, attn_rows_per_chunk(cols),
                      kernel, &job);
    return ATTN_OK;
}

#define CHECK_SIZES(rows, cols)                                                                    \
    ATTN_CHECK_ARG((rows) >= 0 && (cols) >= 0, "%s: negative size (rows=%lld, cols=%lld)",         \
                   __func__, (long long)(rows), (long long)(cols))

attn_status attn_softmax_forward(int64_t rows, int64_t cols, const float *x, float *y)
{
    CHECK_SIZES(rows, cols);
    if (rows == 0 || cols == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(x);
    ATTN_CHECK_NOT_NULL(y);
    return run(__func__, FORWARD, 0, rows, cols, x, NULL, y, ATTN_PICK_KERNEL(attn_active_isa(), attn_softmax_forward_rows));
}

attn_status attn_softmax_backward(int64_t rows, int64_t cols, const float *y, const float *dy,
                                  float *dx)
{
    CHECK_SIZES(rows, cols);
    if (rows == 0 || cols == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(y);
    ATTN_CHECK_NOT_NULL(dy);
    ATTN_CHECK_NOT_NULL(dx);
    return run(__func__, BACKWARD, 0, rows, cols, y, dy, dx, ATTN_PICK_KERNEL(attn_active_isa(), attn_softmax_backward_rows));
}

attn_status attn_log_softmax_forward(int64_t rows, int64_t cols, const float *x, float *y)
{
    CHECK_SIZES(rows, cols);
    if (rows == 0 || cols == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(x);
    ATTN_CHECK_NOT_NULL(y);
    return run(__func__, FORWARD, 1, rows, cols, x, NULL, y, ATTN_PICK_KERNEL(attn_active_isa(), attn_log_softmax_forward_rows));
}

attn_status attn_log_softmax_backward(int64_t rows, int64_t cols, const float *y, const float *dy,
                                      float *dx)
{
    CHECK_SIZES(rows, cols);
    if (rows == 0 || cols == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(y);
    ATTN_CHECK_NOT_NULL(dy);
    ATTN_CHECK_NOT_NULL(dx);
    return run(__func__, BACKWARD, 1, rows, cols, y, dy, dx,
               ATTN_PICK_KERNEL(attn_active_isa(), attn_log_softmax_backward_rows));
}
