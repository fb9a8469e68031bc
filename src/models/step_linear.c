/* The step decoder's small-row linear layer (step_linear.h): the double reference, the
 * portable version and the dispatch. */
#include "models/step_linear.h"

static void linear_reference(const step_linear_args *a, int64_t begin, int64_t end)
{
    for (int64_t r = 0; r < a->rows; r++)
        for (int64_t o = begin; o < end; o++) {
            double sum = a->b != NULL ? (double)a->b[o] : 0.0;
            for (int64_t i = 0; i < a->in; i++)
                sum += (double)a->x[r * a->ldx + i] * (double)a->w[o * a->in + i];
            a->y[r * a->ldy + o] = (float)sum;
        }
}

/* Sixteen independent partial sums per output, which the compiler keeps in vector
 * registers; the tail and the lanes are added in a fixed order. */
static void linear_portable(const step_linear_args *a, int64_t begin, int64_t end)
{
    const int64_t in = a->in, full = in - in % 16;
    for (int64_t r = 0; r < a->rows; r++) {
        const float *x = a->x + r * a->ldx;
        for (int64_t o = begin; o < end; o++) {
            const float *w = a->w + o * in;
            float lanes[16] = {0};
            for (int64_t i = 0; i < full; i += 16)
                for (int l = 0; l < 16; l++)
                    lanes[l] += w[i + l] * x[i + l];
            float sum = 0.0f;
            for (int l = 0; l < 16; l++)
                sum += lanes[l];
            for (int64_t i = full; i < in; i++)
                sum += w[i] * x[i];
            a->y[r * a->ldy + o] = sum + (a->b != NULL ? a->b[o] : 0.0f);
        }
    }
}

typedef struct linear_job {
    const step_linear_args *args;
    step_linear_fn fn;
} linear_job;

static void linear_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const linear_job *job = ctx;
    job->fn(job->args, begin, end);
}

/* Below this many multiply-adds per thread, waking a thread costs more than it saves. */
#define STEP_LINEAR_MIN_WORK_PER_THREAD 65536

void attn_step_linear(const step_linear_args *a)
{
    linear_job job = {a, linear_portable};
    const attn_isa isa = attn_active_isa();
    job.fn = isa == ATTN_ISA_REFERENCE ? linear_reference
                                       : ATTN_FOR_ISA(isa, attn_step_linear, linear_portable);
    const int64_t per_output = a->rows * a->in;
    const int64_t min_chunk = per_output >= STEP_LINEAR_MIN_WORK_PER_THREAD
                                  ? 1
                                  : STEP_LINEAR_MIN_WORK_PER_THREAD / per_output;
    attn_parallel_for(a->out, min_chunk, linear_range, &job);
}
