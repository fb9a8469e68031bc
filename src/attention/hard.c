/* Hard attention: one position per row, by argmax or by a seeded draw from the softmax.
 * The row work is a selection and a copy, done in double with no reduction across rows, so
 * a single implementation serves every instruction set: ATTN_ISA_REFERENCE runs it serially,
 * the others spread the rows over the threads. */
#include "attention/classic_internal.h"

#include <math.h>
#include <string.h>

typedef struct hard_job {
    int64_t src_len, value_dim;
    const float *scores;
    const uint8_t *mask;
    const float *values;
    attn_hard_mode mode;
    int64_t *chosen; /* holds each row's 53 random bits on entry when sampling */
    float *weights;
    float *context;
} hard_job;

static int selectable(const hard_job *job, int64_t b, int64_t j)
{
    float s = job->scores[b * job->src_len + j];
    return (job->mask == NULL || job->mask[b * job->src_len + j] == 0) && s != -INFINITY &&
           !isnan(s);
}

/* random53: a uniform 53-bit integer, u = random53 / 2^53. */
static int64_t choose(const hard_job *job, int64_t b, int64_t random53)
{
    const float *s = job->scores + b * job->src_len;
    int64_t best = -1;
    for (int64_t j = 0; j < job->src_len; j++)
        if (selectable(job, b, j) && (best < 0 || s[j] > s[best]))
            best = j;
    if (best < 0 || job->mode == ATTN_HARD_ARGMAX)
        return best;

    /* Inverse CDF of the softmax: the first position whose cumulative weight exceeds
     * u * total. A position whose weight underflows to 0 can never be chosen. */
    double max = s[best], total = 0;
    for (int64_t j = 0; j < job->src_len; j++)
        if (selectable(job, b, j))
            total += exp((double)s[j] - max);
    double target = (double)random53 * (1.0 / 9007199254740992.0) * total;
    double cumulative = 0;
    for (int64_t j = 0; j < job->src_len; j++) {
        if (!selectable(job, b, j))
            continue;
        cumulative += exp((double)s[j] - max);
        if (target < cumulative)
            return j;
    }
    /* Not reached: the loop repeats the sum that gave total, and u < 1 keeps
     * target = u * total below it even after rounding. */
    return best;
}

static void hard_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const hard_job *job = ctx;
    for (int64_t b = begin; b < end; b++) {
        int64_t c = choose(job, b, job->chosen[b]);
        job->chosen[b] = c;
        float *out = job->context + b * job->value_dim;
        if (c < 0)
            memset(out, 0, (size_t)job->value_dim * sizeof(float));
        else
            memcpy(out, job->values + (b * job->src_len + c) * job->value_dim,
                   (size_t)job->value_dim * sizeof(float));
        if (job->weights != NULL) {
            float *w = job->weights + b * job->src_len;
            memset(w, 0, (size_t)job->src_len * sizeof(float));
            if (c >= 0)
                w[c] = 1.0f;
        }
    }
}

attn_status attn_hard_attention(int64_t batch, int64_t src_len, int64_t value_dim,
                                 const float *scores, const uint8_t *mask, const float *values,
                                 attn_hard_mode mode, attn_rng *rng, int64_t *chosen,
                                 float *weights, float *context)
{
    ATTN_CHECK_ARG(batch >= 0 && src_len >= 0 && value_dim >= 1 &&
                       attn_classic_count_fits(batch, src_len, value_dim) &&
                       attn_classic_count_fits(batch, src_len + value_dim, 1),
                   "attn_hard_attention: bad sizes batch=%lld src_len=%lld value_dim=%lld "
                   "(batch and src_len must be >= 0, value_dim >= 1, the product below 2^60)",
                   (long long)batch, (long long)src_len, (long long)value_dim);
    ATTN_CHECK_ARG(mode == ATTN_HARD_ARGMAX || mode == ATTN_HARD_SAMPLE,
                   "attn_hard_attention: unknown mode %d", (int)mode);
    if (batch == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(scores);
    ATTN_CHECK_NOT_NULL(values);
    ATTN_CHECK_NOT_NULL(chosen);
    ATTN_CHECK_NOT_NULL(context);
    if (mode == ATTN_HARD_SAMPLE)
        ATTN_CHECK_NOT_NULL(rng);

    /* Draw in row order before the rows are split between threads, so the result depends
     * only on the seed; chosen carries each row's draw until the row overwrites it. */
    for (int64_t b = 0; b < batch; b++)
        chosen[b] = mode == ATTN_HARD_SAMPLE ? (int64_t)(attn_rng_next_u64(rng) >> 11) : 0;
    hard_job job = {src_len, value_dim, scores, mask, values, mode, chosen, weights, context};
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        hard_rows(&job, 0, batch, 0);
    } else {
        int64_t per_row = src_len + value_dim + 1;
        int64_t min_rows = 65536 / per_row;
        attn_parallel_for(batch, min_rows > 1 ? min_rows : 1, hard_rows, &job);
    }
    return ATTN_OK;
}
