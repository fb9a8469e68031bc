/* Layer norm over the last dimension: argument checks, dispatch, the double-precision
 * reference path and the portable kernels. The SIMD kernels are in layer_norm_simd.h.
 *
 * The variance is computed in two passes (mean, then mean of squared deviations), which
 * stays accurate when |mean| >> std. The backward's dgamma and dbeta are sums over rows:
 * rows are cut into at most MAX_BLOCKS blocks by a rule that depends only on the row
 * count, each block sums its rows into its own partial row, and the partials are then
 * added in block order. So dgamma and dbeta, like dx, do not depend on the thread count. */
#include "kernels/elementwise.h"
#include "kernels/portable_rows.h"
#include "kernels/ref_elementwise.h"

#include <stdlib.h>
#include <string.h>

#define MAX_BLOCKS 64

/* ---- portable kernels ------------------------------------------------------------------- */

static float centered_square_sum(int64_t n, const float *x, float mean)
{
    float acc[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) {
            float d = x[j + l] - mean;
            acc[l] += d * d;
        }
    for (int l = 0; j < n; j++, l++) {
        float d = x[j] - mean;
        acc[l] += d * d;
    }
    return attn_lanes_total(acc);
}

void attn_layer_norm_forward_rows_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_layer_norm_job *job = job_ptr;
    const int64_t n = job->dim;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * n;
        float *y = job->y + r * n;
        float mean = attn_row_sum(n, x) / (float)n;
        float rstd = 1.0f / sqrtf(centered_square_sum(n, x, mean) / (float)n + job->eps);
        for (int64_t j = 0; j < n; j++)
            y[j] = (x[j] - mean) * rstd;
        if (job->gamma != NULL)
            for (int64_t j = 0; j < n; j++)
                y[j] *= job->gamma[j];
        if (job->beta != NULL)
            for (int64_t j = 0; j < n; j++)
                y[j] += job->beta[j];
        if (job->mean_out != NULL)
            job->mean_out[r] = mean;
        if (job->rstd_out != NULL)
            job->rstd_out[r] = rstd;
    }
}

/* sum(g) and sum(g * xhat) with g = dy * gamma (dy if gamma is NULL); inlined into its two
 * call sites so that each loop is compiled without the test on gamma. */
static inline void gradient_sums(int64_t n, const float *x, const float *dy, const float *gamma,
                                 float mean, float rstd, float *sum_g, float *sum_g_xhat)
{
    float acc_g[ATTN_LANES] = {0}, acc_gx[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) {
            float g = gamma != NULL ? dy[j + l] * gamma[j + l] : dy[j + l];
            acc_g[l] += g;
            acc_gx[l] += g * ((x[j + l] - mean) * rstd);
        }
    for (int l = 0; j < n; j++, l++) {
        float g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
        acc_g[l] += g;
        acc_gx[l] += g * ((x[j] - mean) * rstd);
    }
    *sum_g = attn_lanes_total(acc_g);
    *sum_g_xhat = attn_lanes_total(acc_gx);
}

void attn_layer_norm_backward_blocks_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_layer_norm_job *job = job_ptr;
    const int64_t n = job->dim;
    const float *gamma = job->gamma;
    (void)thread;
    for (int64_t block = begin; block < end; block++) {
        float *gamma_partial = job->gamma_partial ? job->gamma_partial + block * n : NULL;
        float *beta_partial = job->beta_partial ? job->beta_partial + block * n : NULL;
        if (gamma_partial != NULL)
            memset(gamma_partial, 0, (size_t)n * sizeof(float));
        if (beta_partial != NULL)
            memset(beta_partial, 0, (size_t)n * sizeof(float));
        int64_t row_end = (block + 1) * job->block_rows;
        if (row_end > job->rows)
            row_end = job->rows;
        for (int64_t r = block * job->block_rows; r < row_end; r++) {
            const float *x = job->x + r * n, *dy = job->dy + r * n;
            float *dx = job->dx + r * n;
            const float mean = job->mean[r], rstd = job->rstd[r];
            float sum_g, sum_g_xhat;
            if (gamma != NULL)
                gradient_sums(n, x, dy, gamma, mean, rstd, &sum_g, &sum_g_xhat);
            else
                gradient_sums(n, x, dy, NULL, mean, rstd, &sum_g, &sum_g_xhat);
            const float mean_g = sum_g / (float)n, mean_g_xhat = sum_g_xhat / (float)n;
            for (int64_t j = 0; j < n; j++) {
                float g = gamma != NULL ? dy[j] * gamma[j] : dy[j];
                float xhat = (x[j] - mean) * rstd;
                float prior = job->accumulate ? dx[j] : 0.0f;
                dx[j] = prior + rstd * (g - (mean_g + xhat * mean_g_xhat));
            }
            if (gamma_partial != NULL)
                for (int64_t j = 0; j < n; j++)
                    gamma_partial[j] += dy[j] * ((x[j] - mean) * rstd);
            if (beta_partial != NULL)
                for (int64_t j = 0; j < n; j++)
                    beta_partial[j] += dy[j];
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
                                     const float *beta, float eps, float *y, float *mean,
                                     float *rstd)
{
    double *buffer = attn_ref_doubles((size_t)dim, 4, "attn_layer_norm_forward");
    if (buffer == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    double *xd = buffer, *yd = buffer + dim, *gd = buffer + 2 * dim, *bd = buffer + 3 * dim;
    if (gamma != NULL)
        to_double(dim, gamma, gd);
    if (beta != NULL)
        to_double(dim, beta, bd);
    for (int64_t r = 0; r < rows; r++) {
        double row_mean, row_rstd;
        to_double(dim, x + r * dim, xd);
        attn_ref_layer_norm_row(dim, xd, gamma ? gd : NULL, beta ? bd : NULL, eps, yd, &row_mean,
                                &row_rstd);
        for (int64_t j = 0; j < dim; j++)
            y[r * dim + j] = (float)yd[j];
        if (mean != NULL)
            mean[r] = (float)row_mean;
        if (rstd != NULL)
            rstd[r] = (float)row_rstd;
    }
    free(buffer);
    return ATTN_OK;
}

static attn_status backward_reference(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                      const float *mean, const float *rstd, const float *dy,
                                      float *dx, float *dgamma, float *dbeta, int accumulate)
{
    double *buffer = attn_ref_doubles((size_t)dim, 6, "attn_layer_norm_backward");
    if (buffer == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    double *xd = buffer, *dyd = buffer + dim, *dxd = buffer + 2 * dim, *gd = buffer + 3 * dim;
    double *dgd = buffer + 4 * dim, *dbd = buffer + 5 * dim;
    if (gamma != NULL)
        to_double(dim, gamma, gd);
    for (int64_t j = 0; j < dim; j++)
        dgd[j] = dbd[j] = 0.0;
    for (int64_t r = 0; r < rows; r++) {
        to_double(dim, x + r * dim, xd);
        to_double(dim, dy + r * dim, dyd);
        if (accumulate)
            to_double(dim, dx + r * dim, dxd);
        else
            for (int64_t j = 0; j < dim; j++)
                dxd[j] = 0.0;
        attn_ref_layer_norm_backward_row(dim, xd, gamma ? gd : NULL, mean[r], rstd[r], dyd, dxd,
                                         dgd, dbd);
        for (int64_t j = 0; j < dim; j++)
            dx[r * dim + j] = (float)dxd[j];
    }
    for (int64_t j = 0; j < dim; j++) {
        if (dgamma != NULL)
            dgamma[j] = (float)(dgamma[j] + dgd[j]);
        if (dbeta != NULL)
            dbeta[j] = (float)(dbeta[j] + dbd[j]);
    }
    free(buffer);
    return ATTN_OK;
}

/* ---- entry points ---------------------------------------------------------------------------- */

#define CHECK_SIZES(rows, dim)                                                                     \
    do {                                                                                           \
        ATTN_CHECK_ARG((rows) >= 0, "%s: negative rows (%lld)", __func__, (long long)(rows));      \
        ATTN_CHECK_ARG((dim) > 0, "%s: dim must be positive, got %lld", __func__,                  \
                       (long long)(dim));                                                          \
    } while (0)

attn_status attn_layer_norm_forward(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                    const float *beta, float eps, float *y, float *mean,
                                    float *rstd)
{
    CHECK_SIZES(rows, dim);
    ATTN_CHECK_ARG(eps >= 0.0f && eps < INFINITY, "%s: eps must be finite and >= 0, got %g",
                   __func__, (double)eps);
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(x);
    ATTN_CHECK_NOT_NULL(y);

    attn_isa isa = attn_active_isa();
    if (isa == ATTN_ISA_REFERENCE)
        return forward_reference(rows, dim, x, gamma, beta, eps, y, mean, rstd);
    attn_layer_norm_job job = {.rows = rows,
                               .dim = dim,
                               .x = x,
                               .gamma = gamma,
                               .beta = beta,
                               .eps = eps,
                               .y = y,
                               .mean_out = mean,
                               .rstd_out = rstd};
    attn_parallel_for(rows, attn_rows_per_chunk(dim),
                      ATTN_PICK_KERNEL(isa, attn_layer_norm_forward_rows),
                      &job);
    return ATTN_OK;
}

static attn_status backward(const char *function, int64_t rows, int64_t dim, const float *x,
                            const float *gamma, const float *mean, const float *rstd,
                            const float *dy, float *dx, float *dgamma, float *dbeta, int accumulate)
{
    ATTN_CHECK_ARG(rows >= 0, "%s: negative rows (%lld)", function, (long long)rows);
    ATTN_CHECK_ARG(dim > 0, "%s: dim must be positive, got %lld", function, (long long)dim);
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(x != NULL && mean != NULL && rstd != NULL && dy != NULL && dx != NULL,
                   "%s: x, mean, rstd, dy and dx must not be NULL", function);

    attn_isa isa = attn_active_isa();
    if (isa == ATTN_ISA_REFERENCE)
        return backward_reference(rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta,
                                  accumulate);

    const int64_t block_rows = (rows + MAX_BLOCKS - 1) / MAX_BLOCKS;
    const int64_t blocks = (rows + block_rows - 1) / block_rows;
    float *partials = NULL;
    if (dgamma != NULL || dbeta != NULL) {
        size_t count;
        if (!attn_mul_size((size_t)blocks * 2, (size_t)dim, &count))
            return ATTN_ERR_OUT_OF_MEMORY;
        partials = attn_scratch_acquire(count * sizeof(float));
        if (partials == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
    }
    attn_layer_norm_job job = {.rows = rows,
                               .dim = dim,
                               .x = x,
                               .gamma = gamma,
                               .dy = dy,
                               .mean = mean,
                               .rstd = rstd,
                               .dx = dx,
                               .accumulate = accumulate,
                               .block_rows = block_rows,
                               .gamma_partial = dgamma ? partials : NULL,
                               .beta_partial = dbeta ? partials + blocks * dim : NULL};
    int64_t elements_per_block = block_rows * dim;
    attn_parallel_for(blocks, ATTN_MIN_ELEMENTS_PER_CHUNK / elements_per_block + 1,
                      ATTN_PICK_KERNEL(isa, attn_layer_norm_backward_blocks),
                      &job);
    for (int64_t j = 0; j < dim; j++) {
        double sum_gamma = 0.0, sum_beta = 0.0;
        for (int64_t b = 0; b < blocks; b++) {
            if (dgamma != NULL)
                sum_gamma += job.gamma_partial[b * dim + j];
            if (dbeta != NULL)
                sum_beta += job.beta_partial[b * dim + j];
        }
        if (dgamma != NULL)
            dgamma[j] = (float)(dgamma[j] + sum_gamma);
        if (dbeta != NULL)
            dbeta[j] = (float)(dbeta[j] + sum_beta);
    }
    attn_scratch_release(partials);
    return ATTN_OK;
}

attn_status attn_layer_norm_backward(int64_t rows, int64_t dim, const float *x, const float *gamma,
                                     const float *mean, const float *rstd, const float *dy,
                                     float *dx, float *dgamma, float *dbeta)
{
    return backward(__func__, rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, 1);
}

attn_status attn_layer_norm_backward_to(int64_t rows, int64_t dim, const float *x,
                                        const float *gamma, const float *mean, const float *rstd,
                                        const float *dy, float *dx, float *dgamma, float *dbeta,
                                        int accumulate)
{
    return backward(__func__, rows, dim, x, gamma, mean, rstd, dy, dx, dgamma, dbeta, accumulate);
}
