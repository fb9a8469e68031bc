/* RMSNorm over the last dimension (Zhang and Sennrich 2019): argument checks, the
 * double-precision reference and one portable kernel for every instruction set.
 *
 *   y = x * rstd * gamma,  rstd = 1 / sqrt(mean(x^2) + eps)
 *
 * no mean subtracted and no bias. The backward, with xhat = x * rstd and g = dy * gamma:
 *   dx = rstd * (g - xhat * mean(g * xhat)),  dgamma = sum over rows of dy * xhat.
 * It is one streaming pass over a row with two reductions, which the compiler vectorises
 * from the lanes of portable_rows.h; a SIMD version would gain little beside the GEMMs
 * around it. dgamma is summed as layer_norm.c sums its: rows cut into at most MAX_BLOCKS
 * blocks by a rule of the row count alone, each block into its own partial row, the
 * partials added in block order, so no result depends on the thread count. */
#include "kernels/elementwise.h"
#include "kernels/portable_rows.h"
#include "kernels/ref_elementwise.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 64

typedef struct rms_norm_job {
    int64_t rows, dim;
    const float *x, *gamma, *dy, *rstd;
    float eps;
    float *y, *rstd_out;  /* forward */
    float *dx;            /* backward */
    int accumulate;       /* backward: dx += (1) or dx = (0) */
    int64_t block_rows;   /* backward: rows of a block */
    float *gamma_partial; /* backward: [blocks, dim], or NULL */
} rms_norm_job;

/* ---- portable kernels ------------------------------------------------------------------- */

static void forward_rows(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const rms_norm_job *job = job_ptr;
    const int64_t n = job->dim;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * n;
        float *y = job->y + r * n;
        const float rstd = 1.0f / sqrtf(attn_row_dot(n, x, x) / (float)n + job->eps);
        if (job->gamma != NULL)
            for (int64_t j = 0; j < n; j++)
                y[j] = x[j] * rstd * job->gamma[j];
        else
            for (int64_t j = 0; j < n; j++)
                y[j] = x[j] * rstd;
        if (job->rstd_out != NULL)
            job->rstd_out[r] = rstd;
    }
}

/* sum(g * xhat) with g = dy * gamma (dy without gamma). */
static float gradient_sum(int64_t n, const float *x, const float *dy, const float *gamma,
                          float rstd)
{
    float acc[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) {
            float g = gamma != NULL ? dy[j + l] * gamma[j + l] : dy[j + l];
            acc[l] += g * (x[j + l] * rstd);
        }
    for (int l = 0; j < n; j++, l++) {
        float g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
        acc[l] += g * (x[j] * rstd);
    }
    return attn_lanes_total(acc);
}

static void backward_blocks(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const rms_norm_job *job = job_ptr;
    const int64_t n = job->dim;
    const float *gamma = job->gamma;
    (void)thread;
    for (int64_t block = begin; block < end; block++) {
        float *gamma_partial = job->gamma_partial ? job->gamma_partial + block * n : NULL;
        if (gamma_partial != NULL)
            memset(gamma_partial, 0, (size_t)n * sizeof(float));
        int64_t row_end = (block + 1) * job->block_rows;
        if (row_end > job->rows)
            row_end = job->rows;
        for (int64_t r = block * job->block_rows; r < row_end; r++) {
            const float *x = job->x + r * n, *dy = job->dy + r * n;
            float *dx = job->dx + r * n;
            const float rstd = job->rstd[r];
            const float mean_g_xhat = gradient_sum(n, x, dy, gamma, rstd) / (float)n;
            for (int64_t j = 0; j < n; j++) {
                float g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
                float prior = job->accumulate ? dx[j] : 0.0f;
                dx[j] = prior + rstd * (g - (x[j] * rstd) * mean_g_xhat);
            }
            if (gamma_partial != NULL)
                for (int64_t j = 0; j < n; j++)
                    gamma_partial[j] += dy[j] * (x[j] * rstd);
        }
    }
}

/* ---- reference path ------------------------------------------------------------------------ */

static void to_double(int64_t n, const float *in, double *out)
{
    for (int64_t j = 0; j < n; j++)
        out[j] = in[j];
}

static attn_status forward_reference(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                     float eps, float *y, float *rstd)
{
    double *buffer = attn_ref_doubles((size_t)dim, 3, "attn_rms_norm_forward");
    if (buffer == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    double *xd = buffer, *yd = buffer + dim, *gd = buffer + 2 * dim;
    if (gamma != NULL)
        to_double(dim, gamma, gd);
    for (int64_t r = 0; r < rows; r++) {
        double row_rstd;
        to_double(dim, x + r * dim, xd);
        attn_ref_rms_norm_row(dim, xd, gamma ? gd : NULL, eps, yd, &row_rstd);
        for (int64_t j = 0; j < dim; j++)
            y[r * dim + j] = (float)yd[j];
        if (rstd != NULL)
            rstd[r] = (float)row_rstd;
    }
    free(buffer);
    return ATTN_OK;
}

static attn_status backward_reference(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                      const float *rstd, const float *dy, float *dx, float *dgamma,
                                      int accumulate)
{
    double *buffer = attn_ref_doubles((size_t)dim, 5, "attn_rms_norm_backward");
    if (buffer == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    double *xd = buffer, *dyd = buffer + dim, *dxd = buffer + 2 * dim, *gd = buffer + 3 * dim;
    double *dgd = buffer + 4 * dim;
    if (gamma != NULL)
        to_double(dim, gamma, gd);
    for (int64_t j = 0; j < dim; j++)
        dgd[j] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        to_double(dim, x + r * dim, xd);
        to_double(dim, dy + r * dim, dyd);
        for (int64_t j = 0; j < dim; j++)
            dxd[j] = accumulate ? dx[r * dim + j] : 0.0;
        attn_ref_rms_norm_backward_row(dim, xd, gamma ? gd : NULL, rstd[r], dyd, dxd, dgd);
        for (int64_t j = 0; j < dim; j++)
            dx[r * dim + j] = (float)dxd[j];
    }
    if (dgamma != NULL)
        for (int64_t j = 0; j < dim; j++)
            dgamma[j] = (float)(dgamma[j] + dgd[j]);
    free(buffer);
    return ATTN_OK;
}

/* ---- entry points ---------------------------------------------------------------------------- */

attn_status attn_rms_norm_forward(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                  float eps, float *y, float *rstd)
{
    ATTN_CHECK_ARG(rows >= 0, "%s: negative rows (%lld)", __func__, (long long)rows);
    ATTN_CHECK_ARG(dim > 0, "%s: dim must be positive, got %lld", __func__, (long long)dim);
    ATTN_CHECK_ARG(eps >= 0.0f && eps < INFINITY, "%s: eps must be finite and >= 0, got %g",
                   __func__, (double)eps);
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(x);
    ATTN_CHECK_NOT_NULL(y);
    if (attn_active_isa() == ATTN_ISA_REFERENCE)
        return forward_reference(rows, dim, x, gamma, eps, y, rstd);
    rms_norm_job job = {
        .rows = rows, .dim = dim, .x = x, .gamma = gamma, .eps = eps, .y = y, .rstd_out = rstd};
    attn_parallel_for(rows, attn_rows_per_chunk(dim), forward_rows, &job);
    return ATTN_OK;
}

static attn_status backward(const char *function, int64_t rows, int64_t dim, const float *x,
                            const float *gamma, const float *rstd, const float *dy, float *dx,
                            float *dgamma, int accumulate)
{
    ATTN_CHECK_ARG(rows >= 0, "%s: negative rows (%lld)", function, (long long)rows);
    ATTN_CHECK_ARG(dim > 0, "%s: dim must be positive, got %lld", function, (long long)dim);
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(x != NULL && rstd != NULL && dy != NULL && dx != NULL,
                   "%s: x, rstd, dy and dx must not be NULL", function);
    if (attn_active_isa() == ATTN_ISA_REFERENCE)
        return backward_reference(rows, dim, x, gamma, rstd, dy, dx, dgamma, accumulate);

    const int64_t block_rows = (rows + MAX_BLOCKS - 1) / MAX_BLOCKS;
    const int64_t blocks = (rows + block_rows - 1) / block_rows;
    float *partials = NULL;
    if (dgamma != NULL) {
        size_t count;
        if (!attn_mul_size((size_t)blocks, (size_t)dim, &count))
            return ATTN_ERR_OUT_OF_MEMORY;
        partials = attn_scratch_acquire(count * sizeof(float));
        if (partials == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
    }
    rms_norm_job job = {.rows = rows,
                        .dim = dim,
                        .x = x,
                        .gamma = gamma,
                        .dy = dy,
                        .rstd = rstd,
                        .dx = dx,
                        .accumulate = accumulate,
                        .block_rows = block_rows,
                        .gamma_partial = partials};
    attn_parallel_for(blocks, ATTN_MIN_ELEMENTS_PER_CHUNK / (block_rows * dim) + 1, backward_blocks,
                      &job);
    if (dgamma != NULL) {
        for (int64_t j = 0; j < dim; j++) {
            double sum = 0.0;
            for (int64_t b = 0; b < blocks; b++)
                sum += partials[b * dim + j];
            dgamma[j] = (float)(dgamma[j] + sum);
        }
        attn_scratch_release(partials);
    }
    return ATTN_OK;
}

attn_status attn_rms_norm_backward(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                   const float *rstd, const float *dy, float *dx, float *dgamma)
{
    return backward(__func__, rows, dim, x, gamma, rstd, dy, dx, dgamma, 1);
}

attn_status attn_rms_norm_backward_to(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                      const float *rstd, const float *dy, float *dx, float *dgamma,
                                      int accumulate)
{
    return backward(__func__, rows, dim, x, gamma, rstd, dy, dx, dgamma, accumulate);
}
