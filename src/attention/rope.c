/* Rotary position embeddings (attn_rope_rotate): the "rotate half" pairing. The cosines and
 * sines depend on the position and the pair only, so they are computed once per call, in
 * double, into a table [len, head_dim / 2] that every row of the batch and every head then
 * reads: a batch of 4096 tokens would otherwise recompute the same angles for each of its
 * sequences. Rows are independent, so threads take ranges of rows. */
#include "core/internal.h"
#include "attn/attn_attention.h"

#include <math.h>

typedef struct rope_job {
    float *x;
    int64_t len, row_stride, heads, head_dim;
    const double *cosines, *sines; /* [len, head_dim / 2]; sines negated for the inverse */
} rope_job;

static void rotate_rows(void *raw, int64_t begin, int64_t end, int thread)
{
    const rope_job *job = raw;
    const int64_t half = job->head_dim / 2;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        float *row = job->x + r * job->row_stride;
        const double *c = job->cosines + (r % job->len) * half;
        const double *s = job->sines + (r % job->len) * half;
        for (int64_t h = 0; h < job->heads; h++) {
            float *head = row + h * job->head_dim;
            for (int64_t i = 0; i < half; i++) {
                const double first = head[i], second = head[i + half];
                head[i] = (float)(first * c[i] - second * s[i]);
                head[i + half] = (float)(second * c[i] + first * s[i]);
            }
        }
    }
}

attn_status attn_rope_rotate(float *x, int64_t batch, int64_t len, int64_t first_position,
                             int64_t row_stride, int64_t heads, int64_t head_dim, double base,
                             int inverse)
{
    const char *fn = __func__;
    ATTN_CHECK_ARG(batch >= 0 && len >= 0, "%s: negative size (batch=%lld, len=%lld)", fn,
                   (long long)batch, (long long)len);
    ATTN_CHECK_ARG(heads >= 1 && head_dim >= 2 && head_dim % 2 == 0,
                   "%s: heads must be positive and head_dim even (pairs of features turn "
                   "together), got heads=%lld head_dim=%lld",
                   fn, (long long)heads, (long long)head_dim);
    ATTN_CHECK_ARG(row_stride >= heads * head_dim,
                   "%s: row_stride %lld is shorter than heads * head_dim = %lld", fn,
                   (long long)row_stride, (long long)(heads * head_dim));
    ATTN_CHECK_ARG(first_position >= 0, "%s: first_position must be >= 0, got %lld", fn,
                   (long long)first_position);
    ATTN_CHECK_ARG(isfinite(base) && base > 0.0, "%s: base must be finite and > 0, got %g", fn,
                   base);
    ATTN_CHECK_ARG(inverse == 0 || inverse == 1, "%s: inverse must be 0 or 1, got %d", fn,
                   inverse);
    if (batch == 0 || len == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(x);
    const int64_t half = head_dim / 2;
    size_t entries;
    if (!attn_mul_size((size_t)len, (size_t)half, &entries) ||
        entries > SIZE_MAX / (2 * sizeof(double)))
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: len %lld times head_dim %lld is too large",
                         fn, (long long)len, (long long)head_dim);
    double *table = attn_scratch_acquire(2 * entries * sizeof(double));
    if (table == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                         "%s: out of memory for the angles of %lld positions", fn, (long long)len);
    double *cosines = table, *sines = table + entries;
    const double sign = inverse ? -1.0 : 1.0;
    for (int64_t i = 0; i < half; i++) {
        const double frequency = pow(base, -(double)(2 * i) / (double)head_dim);
        for (int64_t t = 0; t < len; t++) {
            const double angle = (double)(first_position + t) * frequency;
            cosines[t * half + i] = cos(angle);
            sines[t * half + i] = sign * sin(angle);
        }
    }
    rope_job job = {x, len, row_stride, heads, head_dim, cosines, sines};
    attn_parallel_for(batch * len, 16384 / (heads * head_dim) + 1, rotate_rows, &job);
    attn_scratch_release(table);
    return ATTN_OK;
}
