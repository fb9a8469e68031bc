/* Element-wise activations and their derivatives: argument checks, dispatch, the
 * double-precision reference path and the portable kernels. The SIMD kernels are in
 * activation_simd.h; the approximations both use are described in fast_math.h.
 *
 * The tanh form of GELU is evaluated as x * sigmoid(2 z), z = sqrt(2/pi) (x + 0.044715 x^3),
 * which equals 0.5 x (1 + tanh z) but keeps its relative accuracy for negative x, where
 * 1 + tanh z cancels. Exact GELU is x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2, as in
 * PyTorch. */
#include "kernels/elementwise.h"
#include "kernels/fast_math.h"
#include "kernels/ref_elementwise.h"

/* Elements per parallel block: chunks start on multiples of it, so that two threads never
 * write the same cache line. */
#define BLOCK ATTN_ELEMENT_BLOCK

/* ---- portable kernels ------------------------------------------------------------------- */

static inline float gelu_cdf(float x)
{
    return 0.5f + 0.5f * attn_fast_erf(x * ATTN_SQRT1_2);
}

static inline float gelu_tanh_arg(float x)
{
    return ATTN_SQRT_2_OVER_PI * (x + ATTN_GELU_TANH_CUBIC * x * x * x);
}

void attn_activation_forward_range_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_activation_job *job = job_ptr;
    const float *x = job->x;
    float *y = job->out;
    int64_t lo = begin * BLOCK, hi = end * BLOCK < job->n ? end * BLOCK : job->n;
    (void)thread;
    switch (job->act) {
    case ATTN_ACT_RELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] < 0.0f ? 0.0f : x[i];
        break;
    case ATTN_ACT_GELU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] * gelu_cdf(x[i]);
        break;
    case ATTN_ACT_GELU_TANH:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] * attn_fast_sigmoid(2.0f * gelu_tanh_arg(x[i]));
        break;
    case ATTN_ACT_TANH:
        for (int64_t i = lo; i < hi; i++)
            y[i] = attn_fast_tanh(x[i]);
        break;
    case ATTN_ACT_SIGMOID:
        for (int64_t i = lo; i < hi; i++)
            y[i] = attn_fast_sigmoid(x[i]);
        break;
    case ATTN_ACT_SILU:
        for (int64_t i = lo; i < hi; i++)
            y[i] = x[i] * attn_fast_sigmoid(x[i]);
        break;
    }
}

/* What dx[i] adds to: itself, or zero when the backward writes dx (the same bits, even for a
 * product of -0). */
static inline float prior(const attn_activation_job *job, const float *dx, int64_t i)
{
    return job->accumulate ? dx[i] : 0.0f;
}

void attn_activation_backward_range_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_activation_job *job = job_ptr;
    const float *x = job->x, *dy = job->dy;
    float *dx = job->out;
    int64_t lo = begin * BLOCK, hi = end * BLOCK < job->n ? end * BLOCK : job->n;
    (void)thread;
    switch (job->act) {
    case ATTN_ACT_RELU:
        /* x > 0 exactly when x's bits, read as a signed integer, are positive and at most
         * those of +inf (NaN excluded, as in the reference) */
        for (int64_t i = lo; i < hi; i++) {
            uint32_t bits = attn_float_bits(x[i]);
            uint32_t positive = attn_mask_if(((int32_t)bits > 0) & (bits <= 0x7f800000u));
            dx[i] = prior(job, dx, i) + attn_bits_float(attn_float_bits(dy[i]) & positive);
        }
        break;
    case ATTN_ACT_GELU:
        for (int64_t i = lo; i < hi; i++) {
            float pdf = attn_fast_exp(-0.5f * x[i] * x[i]) * ATTN_INV_SQRT_2PI;
            dx[i] = prior(job, dx, i) + (gelu_cdf(x[i]) + x[i] * pdf) * dy[i];
        }
        break;
    case ATTN_ACT_GELU_TANH:
        for (int64_t i = lo; i < hi; i++) {
            float u = 2.0f * gelu_tanh_arg(x[i]);
            float du =
                2.0f * ATTN_SQRT_2_OVER_PI * (1.0f + 3.0f * ATTN_GELU_TANH_CUBIC * x[i] * x[i]);
            float d = attn_fast_sigmoid(u) + x[i] * attn_fast_sigmoid_derivative(u) * du;
            dx[i] = prior(job, dx, i) + d * dy[i];
        }
        break;
    case ATTN_ACT_TANH:
        for (int64_t i = lo; i < hi; i++)
            dx[i] = prior(job, dx, i) + attn_fast_tanh_derivative(x[i]) * dy[i];
        break;
    case ATTN_ACT_SIGMOID:
        for (int64_t i = lo; i < hi; i++)
            dx[i] = prior(job, dx, i) + attn_fast_sigmoid_derivative(x[i]) * dy[i];
        break;
    case ATTN_ACT_SILU:
        for (int64_t i = lo; i < hi; i++) {
            float d = attn_fast_sigmoid(x[i]) + x[i] * attn_fast_sigmoid_derivative(x[i]);
            dx[i] = prior(job, dx, i) + d * dy[i];
        }
        break;
    }
}

/* ---- entry points --------------------------------------------------------------------------- */

static attn_status check_arguments(const char *function, attn_activation act, int64_t n)
{
    ATTN_CHECK_ARG((int)act >= ATTN_ACT_RELU && (int)act <= ATTN_ACT_SILU,
                   "%s: unknown activation %d", function, (int)act);
    ATTN_CHECK_ARG(n >= 0, "%s: negative size n=%lld", function, (long long)n);
    return ATTN_OK;
}

static void run(attn_activation_job *job, attn_range_fn kernel)
{
    attn_parallel_for((job->n + BLOCK - 1) / BLOCK, ATTN_MIN_ELEMENTS_PER_CHUNK / BLOCK,
                      kernel, job);
}

attn_status attn_activation_forward(attn_activation act, int64_t n, const float *x, float *y)
{
    ATTN_TRY(check_arguments(__func__, act, n));
    if (n == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(x);
    ATTN_CHECK_NOT_NULL(y);
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        for (int64_t i = 0; i < n; i++)
            y[i] = (float)attn_ref_activation(act, x[i]);
        return ATTN_OK;
    }
    attn_activation_job job = {.act = act, .n = n, .x = x, .out = y};
    run(&job, ATTN_PICK_KERNEL(attn_active_isa(), attn_activation_forward_range));
    return ATTN_OK;
}

static attn_status backward(const char *function, attn_activation act, int64_t n, const float *x,
                            const float *dy, float *dx, int accumulate)
{
    ATTN_TRY(check_arguments(function, act, n));
    if (n == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(x != NULL && dy != NULL && dx != NULL, "%s: x, dy and dx must not be NULL",
                   function);
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        for (int64_t i = 0; i < n; i++)
            dx[i] = (float)((accumulate ? dx[i] : 0.0) +
                            attn_ref_activation_derivative(act, x[i]) * dy[i]);
        return ATTN_OK;
    }
    attn_activation_job job = {
        .act = act, .n = n, .x = x, .dy = dy, .out = dx, .accumulate = accumulate};
    run(&job, ATTN_PICK_KERNEL(attn_active_isa(), attn_activation_backward_range));
    return ATTN_OK;
}

attn_status attn_activation_backward(attn_activation act, int64_t n, const float *x,
                                     const float *dy, float *dx)
{
    return backward(__func__, act, n, x, dy, dx, 1);
}

attn_status attn_activation_backward_to(attn_activation act, int64_t n, const float *x,
                                        const float *dy, float *dx, int accumulate)
{
    return backward(__func__, act, n, x, dy, dx, accumulate);
}
