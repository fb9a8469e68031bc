/* The step decoder's single-query attention (step_attention.h): the double reference, the
 * portable version and the dispatch. */
#include "models/step_attention.h"

#include "kernels/bf16.h"

#include <math.h>

/* Element at of the cache, floats or bf16 (bf16 is a constant in each caller, so each version
 * compiles to its own loads alone). */
static inline float kv_at(const void *pool, int bf16, int64_t at)
{
    return bf16 ? attn_bf16_to_float(((const uint16_t *)pool)[at]) : ((const float *)pool)[at];
}

static inline double score_reference(const float *q, const void *pool, int bf16, int64_t key,
                                     int64_t dh, float scale)
{
    double s = 0.0;
    for (int64_t i = 0; i < dh; i++)
        s += (double)q[i] * (double)kv_at(pool, bf16, key + i);
    return s * (double)scale;
}

/* The textbook formula in double: what ATTN_ISA_REFERENCE runs. The output is summed in
 * blocks of 64 features so that the double accumulators fit on the stack. */
static inline __attribute__((always_inline)) void attend_reference(const step_attention *a,
                                                                   int64_t r, int64_t h,
                                                                   const int bf16)
{
    const int64_t dh = a->d_head, n = attn_step_key_count(&a->kv, r);
    const float *q = a->q + r * a->q_stride + h * dh;
    const void *pool = a->kv.pool;
    const int64_t keys = attn_step_keys_at(a, r, h), values = keys + a->kv.value_offset;
    float *p = a->probs + r * a->probs_row_stride + h * a->probs_head_stride;
    float *out = a->out + r * a->out_stride + h * dh;
    double max = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < n; j++) {
        const double s = score_reference(q, pool, bf16, keys + j * dh, dh, a->scale);
        max = s > max ? s : max;
    }
    for (int64_t j = 0; j < n; j++)
        sum += exp(score_reference(q, pool, bf16, keys + j * dh, dh, a->scale) - max);
    for (int64_t first = 0; first < dh; first += 64) {
        const int64_t width = dh - first < 64 ? dh - first : 64;
        double acc[64] = {0};
        for (int64_t j = 0; j < n; j++) {
            const double w =
                exp(score_reference(q, pool, bf16, keys + j * dh, dh, a->scale) - max) / sum;
            for (int64_t i = 0; i < width; i++)
                acc[i] += w * (double)kv_at(pool, bf16, values + j * dh + first + i);
        }
        for (int64_t i = 0; i < width; i++)
            out[first + i] = (float)acc[i];
    }
    for (int64_t j = 0; j < n; j++)
        p[j] = (float)(exp(score_reference(q, pool, bf16, keys + j * dh, dh, a->scale) - max) /
                       sum);
    for (int64_t j = n; j < a->probs_fill; j++)
        p[j] = 0.0f;
}

/* Sixteen independent partial sums, which the compiler turns into one vector register. */
static inline float dot(const float *a, const void *pool, int bf16, int64_t at, int64_t n)
{
    float lanes[16] = {0};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; l++)
            lanes[l] += a[i + l] * kv_at(pool, bf16, at + i + l);
    float sum = 0.0f;
    for (; i < n; i++)
        sum += a[i] * kv_at(pool, bf16, at + i);
    for (int l = 0; l < 16; l++)
        sum += lanes[l];
    return sum;
}

static inline __attribute__((always_inline)) void attend_portable(const step_attention *a,
                                                                  int64_t r, int64_t h,
                                                                  const int bf16)
{
    const int64_t dh = a->d_head, n = attn_step_key_count(&a->kv, r);
    const float *q = a->q + r * a->q_stride + h * dh;
    const void *pool = a->kv.pool;
    const int64_t keys = attn_step_keys_at(a, r, h), values = keys + a->kv.value_offset;
    float *p = a->probs + r * a->probs_row_stride + h * a->probs_head_stride;
    float *out = a->out + r * a->out_stride + h * dh;
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        p[j] = dot(q, pool, bf16, keys + j * dh, dh) * a->scale;
        max = p[j] > max ? p[j] : max;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        p[j] = expf(p[j] - max);
        sum += p[j];
    }
    const float inverse = n > 0 ? 1.0f / sum : 0.0f;
    for (int64_t i = 0; i < dh; i++)
        out[i] = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        p[j] *= inverse;
        const float pj = p[j];
        const int64_t v = values + j * dh;
        for (int64_t i = 0; i < dh; i++)
            out[i] += pj * kv_at(pool, bf16, v + i);
    }
    for (int64_t j = n; j < a->probs_fill; j++)
        p[j] = 0.0f;
}

static void attend_reference_f32(const step_attention *a, int64_t r, int64_t h)
{
    attend_reference(a, r, h, 0);
}

static void attend_reference_bf16(const step_attention *a, int64_t r, int64_t h)
{
    attend_reference(a, r, h, 1);
}

static void attend_portable_f32(const step_attention *a, int64_t r, int64_t h)
{
    attend_portable(a, r, h, 0);
}

static void attend_portable_bf16(const step_attention *a, int64_t r, int64_t h)
{
    attend_portable(a, r, h, 1);
}

typedef struct attend_job {
    const step_attention *args;
    step_attend_fn fn;
} attend_job;

static void attend_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const attend_job *job = ctx;
    for (int64_t task = begin; task < end; task++)
        job->fn(job->args, task / job->args->heads, task % job->args->heads);
}

/* Each (row, head) is independent and written by one thread, so results do not depend on
 * the thread count. A chunk gets at least ~64k flops: a batch-1 step's few hundred would
 * not pay for waking a thread. */
void attn_step_attend(const step_attention *a, int64_t rows, int64_t keys_hint)
{
    attend_job job = {a, NULL};
    const attn_isa isa = attn_active_isa();
    if (a->kv.bf16)
        job.fn = isa == ATTN_ISA_REFERENCE
                     ? attend_reference_bf16
                     : ATTN_FOR_ISA(isa, attn_step_attend_bf16, attend_portable_bf16);
    else
        job.fn = isa == ATTN_ISA_REFERENCE
                     ? attend_reference_f32
                     : ATTN_FOR_ISA(isa, attn_step_attend, attend_portable_f32);
    const int64_t work = 4 * (keys_hint > 0 ? keys_hint : 1) * a->d_head;
    const int64_t min_chunk = work >= 65536 ? 1 : 65536 / work;
    attn_parallel_for(rows * a->heads, min_chunk, attend_range, &job);
}

