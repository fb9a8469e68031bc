/* Activations on SIMD vectors, compiled by activation_avx2.c and activation_avx512.c; the
 * formulas are those of activation.c. */
#include "kernels/elementwise.h"
#include "kernels/simd.h"

static inline vf SIMD_NAME(activation)(attn_activation act, vf x)
{
    switch (act) {
    case ATTN_ACT_RELU:
        return vf_max(vf_zero(), x); /* NaN passes through */
    case ATTN_ACT_GELU:
        return vf_mul(
            x, vf_fmadd(vf_set(0.5f), vf_erf(vf_mul(x, vf_set(ATTN_SQRT1_2))), vf_set(0.5f)));
    case ATTN_ACT_GELU_TANH: {
        vf x3 = vf_mul(vf_mul(x, x), x);
        vf z = vf_mul(vf_set(ATTN_SQRT_2_OVER_PI), vf_fmadd(vf_set(ATTN_GELU_TANH_CUBIC), x3, x));
        return vf_mul(x, vf_sigmoid(vf_add(z, z)));
    }
    case ATTN_ACT_TANH:
        return vf_tanh(x);
    case ATTN_ACT_SIGMOID:
        return vf_sigmoid(x);
    case ATTN_ACT_SILU:
        return vf_mul(x, vf_sigmoid(x));
    }
    return x;
}

static inline vf SIMD_NAME(derivative)(attn_activation act, vf x)
{
    switch (act) {
    case ATTN_ACT_RELU:
        return vf_select(vf_less(vf_zero(), x), vf_set(1.0f), vf_zero());
    case ATTN_ACT_GELU: {
        vf cdf = vf_fmadd(vf_set(0.5f), vf_erf(vf_mul(x, vf_set(ATTN_SQRT1_2))), vf_set(0.5f));
        vf pdf = vf_mul(vf_exp(vf_mul(vf_set(-0.5f), vf_mul(x, x))), vf_set(ATTN_INV_SQRT_2PI));
        return vf_fmadd(x, pdf, cdf);
    }
    case ATTN_ACT_GELU_TANH: {
        vf x2 = vf_mul(x, x);
        vf z = vf_mul(vf_set(ATTN_SQRT_2_OVER_PI),
                      vf_fmadd(vf_set(ATTN_GELU_TANH_CUBIC), vf_mul(x2, x), x));
        vf u = vf_add(z, z);
        vf du = vf_mul(vf_set(2.0f * ATTN_SQRT_2_OVER_PI),
                       vf_fmadd(vf_set(3.0f * ATTN_GELU_TANH_CUBIC), x2, vf_set(1.0f)));
        return vf_fmadd(vf_mul(x, vf_sigmoid_derivative(u)), du, vf_sigmoid(u));
    }
    case ATTN_ACT_TANH:
        return vf_tanh_derivative(x);
    case ATTN_ACT_SIGMOID:
        return vf_sigmoid_derivative(x);
    case ATTN_ACT_SILU:
        return vf_fmadd(x, vf_sigmoid_derivative(x), vf_sigmoid(x));
    }
    return x;
}

/* The switch on the activation sits outside the loop: each case gets its own loop with
 * the activation's code inlined. */
#define SIMD_FOR_EACH_ACTIVATION(act, body)                                                        \
    switch (act) {                                                                                 \
    case ATTN_ACT_RELU:                                                                            \
        body(ATTN_ACT_RELU);                                                                       \
        break;                                                                                     \
    case ATTN_ACT_GELU:                                                                            \
        body(ATTN_ACT_GELU);                                                                       \
        break;                                                                                     \
    case ATTN_ACT_GELU_TANH:                                                                       \
        body(ATTN_ACT_GELU_TANH);                                                                  \
        break;                                                                                     \
    case ATTN_ACT_TANH:                                                                            \
        body(ATTN_ACT_TANH);                                                                       \
        break;                                                                                     \
    case ATTN_ACT_SIGMOID:                                                                         \
        body(ATTN_ACT_SIGMOID);                                                                    \
        break;                                                                                     \
    case ATTN_ACT_SILU:                                                                            \
        body(ATTN_ACT_SILU);                                                                       \
        break;                                                                                     \
    }

void SIMD_NAME(attn_activation_forward_range)(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_activation_job *job = job_ptr;
    const float *x = job->x;
    float *y = job->out;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    (void)thread;
#define FORWARD_LOOP(ACT)                                                                          \
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {                                                \
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;                                     \
        vf_store_upto(y + i, k, SIMD_NAME(activation)(ACT, vf_load_upto(x + i, k)));               \
    }
    SIMD_FOR_EACH_ACTIVATION(job->act, FORWARD_LOOP)
#undef FORWARD_LOOP
}

void SIMD_NAME(attn_activation_backward_range)(void *job_ptr, int64_t begin, int64_t end,
                                               int thread)
{
    const attn_activation_job *job = job_ptr;
    const float *x = job->x, *dy = job->dy;
    float *dx = job->out;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    (void)thread;
#define BACKWARD_LOOP(ACT)                                                                         \
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {                                                \
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;                                     \
        vf d = SIMD_NAME(derivative)(ACT, vf_load_upto(x + i, k));                                 \
        vf prior = job->accumulate ? vf_load_upto(dx + i, k) : vf_zero();                          \
        vf_store_upto(dx + i, k, vf_fmadd(d, vf_load_upto(dy + i, k), prior));                     \
    }
    SIMD_FOR_EACH_ACTIVATION(job->act, BACKWARD_LOOP)
#undef BACKWARD_LOOP
}
