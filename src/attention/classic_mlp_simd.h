/* The MLP score v . tanh(q + k) and its backward (classic_internal.h) on SIMD vectors,
 * compiled by classic_mlp_avx2.c and classic_mlp_avx512.c, with a zero-filled partial vector
 * for the tail. */
#include "attention/classic_internal.h"
#include "kernels/simd.h"

float SIMD_NAME(attn_classic_mlp_score)(const float *q, const float *k, const float *v, int64_t n)
{
    vf sum = vf_zero();
    for (int64_t d = 0; d < n; d += SIMD_LANES) {
        int64_t lanes = n - d < SIMD_LANES ? n - d : SIMD_LANES;
        vf t = vf_tanh(vf_add(vf_load_upto(q + d, lanes), vf_load_upto(k + d, lanes)));
        sum = vf_fmadd(vf_load_upto(v + d, lanes), t, sum);
    }
    return vf_sum(sum);
}

void SIMD_NAME(attn_classic_mlp_backward)(const float *q, const float *k, const float *v, float de,
                                          int64_t n, float *dq, float *dk, float *dv_row)
{
    const vf vde = vf_set(de);
    for (int64_t d = 0; d < n; d += SIMD_LANES) {
        int64_t lanes = n - d < SIMD_LANES ? n - d : SIMD_LANES;
        vf t = vf_tanh(vf_add(vf_load_upto(q + d, lanes), vf_load_upto(k + d, lanes)));
        vf slope = vf_fnmadd(t, t, vf_set(1.0f));
        vf g = vf_mul(vf_mul(vde, vf_load_upto(v + d, lanes)), slope);
        vf_store_upto(dq + d, lanes, vf_add(vf_load_upto(dq + d, lanes), g));
        if (dk != NULL)
            vf_store_upto(dk + d, lanes, vf_add(vf_load_upto(dk + d, lanes), g));
        if (dv_row != NULL)
            vf_store_upto(dv_row + d, lanes, vf_fmadd(vde, t, vf_load_upto(dv_row + d, lanes)));
    }
}
