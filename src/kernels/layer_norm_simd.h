/* Layer norm rows on SIMD vectors, compiled by layer_norm_avx2.c and layer_norm_avx512.c;
 * the scheme is explained in layer_norm.c. */
#include "kernels/elementwise.h"
#include "kernels/simd.h"

#include <math.h>
#include <string.h>

static float SIMD_NAME(centered_square_sum)(int64_t n, const float *x, float mean)
{
    vf m = vf_set(mean);
    vf s0 = vf_zero(), s1 = s0;
    int64_t j = 0;
    for (; j + 2 * SIMD_LANES <= n; j += 2 * SIMD_LANES) {
        vf d0 = vf_sub(vf_load(x + j), m), d1 = vf_sub(vf_load(x + j + SIMD_LANES), m);
        s0 = vf_fmadd(d0, d0, s0);
        s1 = vf_fmadd(d1, d1, s1);
    }
    for (; j + SIMD_LANES <= n; j += SIMD_LANES) {
        vf d = vf_sub(vf_load(x + j), m);
        s0 = vf_fmadd(d, d, s0);
    }
    if (j < n) {
        vf d = vf_sub(vf_load_part(x + j, n - j, mean), m); /* unused lanes give 0 */
        s1 = vf_fmadd(d, d, s1);
    }
    return vf_sum(vf_add(s0, s1));
}

void SIMD_NAME(attn_layer_norm_forward_rows)(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_layer_norm_job *job = job_ptr;
    const int64_t n = job->dim;
    const float *gamma = job->gamma, *beta = job->beta;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * n;
        float *y = job->y + r * n;
        float mean = simd_row_sum(n, x) / (float)n;
        float rstd = 1.0f / sqrtf(SIMD_NAME(centered_square_sum)(n, x, mean) / (float)n + job->eps);
        vf vm = vf_set(mean), vr = vf_set(rstd);
        for (int64_t j = 0; j < n; j += SIMD_LANES) {
            int64_t k = n - j < SIMD_LANES ? n - j : SIMD_LANES;
            vf v = vf_mul(vf_sub(vf_load_upto(x + j, k), vm), vr);
            if (gamma != NULL)
                v = vf_mul(v, vf_load_upto(gamma + j, k));
            if (beta != NULL)
                v = vf_add(v, vf_load_upto(beta + j, k));
            vf_store_upto(y + j, k, v);
        }
        if (job->mean_out != NULL)
            job->mean_out[r] = mean;
        if (job->rstd_out != NULL)
            job->rstd_out[r] = rstd;
    }
}

void SIMD_NAME(attn_layer_norm_backward_blocks)(void *job_ptr, int64_t begin, int64_t end,
                                                int thread)
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
            vf mean = vf_set(job->mean[r]), rstd = vf_set(job->rstd[r]);
            /* sums of g = dy * gamma and of g * xhat, in two accumulator pairs (even and odd
             * vectors) to halve the dependency chains */
            vf sum_g[2] = {vf_zero(), vf_zero()}, sum_gx[2] = {vf_zero(), vf_zero()};
            for (int64_t j = 0; j < n; j += SIMD_LANES) {
                int64_t k = n - j < SIMD_LANES ? n - j : SIMD_LANES;
                int pair = (int)((j / SIMD_LANES) & 1);
                vf xhat = vf_mul(vf_sub(vf_load_upto(x + j, k), mean), rstd);
                vf g = vf_load_upto(dy + j, k);
                if (gamma != NULL)
                    g = vf_mul(g, vf_load_upto(gamma + j, k));
                sum_g[pair] = vf_add(sum_g[pair], g);
                sum_gx[pair] = vf_fmadd(g, xhat, sum_gx[pair]);
            }
            vf mean_g = vf_set(vf_sum(vf_add(sum_g[0], sum_g[1])) / (float)n);
            vf mean_gx = vf_set(vf_sum(vf_add(sum_gx[0], sum_gx[1])) / (float)n);
            for (int64_t j = 0; j < n; j += SIMD_LANES) {
                int64_t k = n - j < SIMD_LANES ? n - j : SIMD_LANES;
                vf d = vf_load_upto(dy + j, k);
                vf xhat = vf_mul(vf_sub(vf_load_upto(x + j, k), mean), rstd);
                vf g = gamma != NULL ? vf_mul(d, vf_load_upto(gamma + j, k)) : d;
                vf centred = vf_sub(g, vf_fmadd(xhat, mean_gx, mean_g));
                vf prior = job->accumulate ? vf_load_upto(dx + j, k) : vf_zero();
                vf_store_upto(dx + j, k, vf_fmadd(rstd, centred, prior));
                if (gamma_partial != NULL)
                    vf_store_upto(gamma_partial + j, k,
                                  vf_fmadd(d, xhat, vf_load_upto(gamma_partial + j, k)));
                if (beta_partial != NULL)
                    vf_store_upto(beta_partial + j, k,
                                  vf_add(d, vf_load_upto(beta_partial + j, k)));
            }
        }
    }
}
