/* Softmax and log-softmax rows on SIMD vectors, compiled by softmax_avx2.c and
 * softmax_avx512.c. Each row stays in L1 across its passes (max, exp and sum, scale). */
#include "kernels/elementwise.h"
#include "kernels/simd.h"

#include <math.h>

void SIMD_NAME(attn_softmax_forward_rows)(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->in + r * n;
        float *y = job->out + r * n;
        float m = simd_row_max(n, x);
        if (m == -INFINITY) {
            simd_row_fill(n, y, 0.0f);
            continue;
        }
        simd_row_scale(n, y, 1.0f / simd_row_exp_sum(n, x, m, y));
    }
}

void SIMD_NAME(attn_softmax_backward_rows)(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *y = job->in + r * n, *dy = job->dy + r * n;
        float *dx = job->out + r * n;
        vf dot = vf_set(simd_row_dot(n, dy, y));
        int64_t j = 0;
        for (; j + SIMD_LANES <= n; j += SIMD_LANES) {
            vf g = vf_sub(vf_load(dy + j), dot);
            vf_store(dx + j, vf_fmadd(vf_load(y + j), g, vf_load(dx + j)));
        }
        if (j < n) {
            int64_t k = n - j;
            vf g = vf_sub(vf_load_part(dy + j, k, 0.0f), dot);
            vf_store_part(dx + j, k,
                          vf_fmadd(vf_load_part(y + j, k, 0.0f), g, vf_load_part(dx + j, k, 0.0f)));
        }
    }
}

void SIMD_NAME(attn_log_softmax_forward_rows)(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->in + r * n;
        float *y = job->out + r * n;
        float m = simd_row_max(n, x);
        if (m == -INFINITY) {
            simd_row_fill(n, y, -INFINITY);
            continue;
        }
        vf vm = vf_set(m), log_sum = vf_set(logf(simd_row_exp_sum(n, x, m, NULL)));
        int64_t j = 0;
        for (; j + SIMD_LANES <= n; j += SIMD_LANES)
            vf_store(y + j, vf_sub(vf_sub(vf_load(x + j), vm), log_sum));
        if (j < n)
            vf_store_part(y + j, n - j,
                          vf_sub(vf_sub(vf_load_part(x + j, n - j, 0.0f), vm), log_sum));
    }
}

void SIMD_NAME(attn_log_softmax_backward_rows)(void *job_ptr, int64_t begin, int64_t end,
                                               int thread)
{
    const attn_softmax_job *job = job_ptr;
    const int64_t n = job->cols;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        const float *y = job->in + r * n, *dy = job->dy + r * n;
        float *dx = job->out + r * n;
        vf sum = vf_set(simd_row_sum(n, dy));
        int64_t j = 0;
        for (; j + SIMD_LANES <= n; j += SIMD_LANES) {
            vf g = vf_fnmadd(vf_exp(vf_load(y + j)), sum, vf_load(dy + j));
            vf_store(dx + j, vf_add(vf_load(dx + j), g));
        }
        if (j < n) {
            int64_t k = n - j;
            vf g =
                vf_fnmadd(vf_exp(vf_load_part(y + j, k, 0.0f)), sum, vf_load_part(dy + j, k, 0.0f));
            vf_store_part(dx + j, k, vf_add(vf_load_part(dx + j, k, 0.0f), g));
        }
    }
}
