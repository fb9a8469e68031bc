/* Rotary position embeddings (attn_rope_rotate): the "rotate half" pairing, angles in
 * double. Rows are independent, so threads take ranges of rows. */
#include "core/internal.h"
#include "attn/attn_attention.h"

#include <math.h>

typedef struct rope_job {
    float *x;
    int64_t len, first_position, row_stride, heads, head_dim;
    double log_base;
    double sign; /* +1 rotates, -1 rotates back */
} rope_job;

static void rotate_rows(void *raw, int64_t begin, int64_t end, int thread)
{
    const rope_job *job = raw;
    const int64_t half = job->head_dim / 2;
    (void)thread;
    for (int64_t r = begin; r < end; r++) {
        float *row = job->x + r * job->row_stride;
        const double position = (double)(job->first_position + r % job->len);
        for (int64_t i = 0; i < half; i++) {
            const double angle =
                position * exp(-(double)(2 * i) / (double)job->head_dim * job->log_base);
            const double c = cos(angle), s = job->sign * sin(angle);
            for (int64_t h = 0; h < job->heads; h++) {
                float *pair = row + h * job->head_dim + i;
                const double first = pair[0], second = pair[half];
                pair[0] = (float)(first * c - second * s);
                pair[half] = (float)(second * c + first * s);
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
    ATTN_CHECK_ARG(inverse == 0 || inverse == 1, "%s: inverse must be 0 or 1, got %d", fn, inverse);
    if (batch == 0 || len == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(x);
    rope_job job = {x,     len,      first_position, row_stride,
                    heads, head_dim, log(base),      inverse ? -1.0 : 1.0};
    attn_parallel_for(batch * len, 16384 / (heads * head_dim) + 1, rotate_rows, &job);
    return ATTN_OK;
}
