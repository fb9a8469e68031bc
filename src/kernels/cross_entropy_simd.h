/* Cross-entropy rows on SIMD vectors, compiled by cross_entropy_avx2.c and
 * cross_entropy_avx512.c; the formulas are explained in cross_entropy.c. */
#include "kernels/elementwise.h"
#include "kernels/simd.h"

#include <math.h>

void SIMD_NAME(attn_cross_entropy_forward_rows)(void *job_ptr, int64_t begin, int64_t end,
                                                int thread)
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
        float m = simd_row_max(n, x);
        double log_sum = log((double)simd_row_exp_sum(n, x, m, NULL));
        double loss = ((double)m - x[target]) + log_sum;
        if (job->smoothing != 0.0f) {
            double mean = (double)simd_row_sum(n, x) / (double)n;
            double eps = job->smoothing;
            loss = (1.0 - eps) * loss + eps * (((double)m - mean) + log_sum);
        }
        job->row_loss[r] = loss;
        if (job->row_lse_out != NULL)
            job->row_lse_out[r] = (float)(m + log_sum);
    }
}

void SIMD_NAME(attn_cross_entropy_backward_rows)(void *job_ptr, int64_t begin, int64_t end,
                                                 int thread)
{
    const attn_cross_entropy_job *job = job_ptr;
    const int64_t n = job->vocab;
    const vf uniform = vf_set(job->smoothing / (float)n);
    const vf scale = vf_set(job->grad_scale);
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        int32_t target = job->targets[r];
        if (target == job->ignore_index)
            continue;
        const float *x = job->logits + r * n;
        float *dx = job->dlogits + r * n;
        vf lse = vf_set(job->row_lse_in[r]);
        int64_t c = 0;
        for (; c + SIMD_LANES <= n; c += SIMD_LANES) {
            vf g = vf_sub(vf_exp(vf_sub(vf_load(x + c), lse)), uniform);
            vf_store(dx + c, vf_fmadd(scale, g, vf_load(dx + c)));
        }
        if (c < n) {
            int64_t k = n - c;
            vf g = vf_sub(vf_exp(vf_sub(vf_load_part(x + c, k, 0.0f), lse)), uniform);
            vf_store_part(dx + c, k, vf_fmadd(scale, g, vf_load_part(dx + c, k, 0.0f)));
        }
        dx[target] -= job->grad_scale * (1.0f - job->smoothing);
    }
}
