/* The step decoder's single-query attention (step_attention.h) on SIMD vectors, compiled by
 * step_attention_avx2.c and step_attention_avx512.c. A head's last d_head % SIMD_LANES
 * features go through a zero-filled partial vector, in the same accumulator as the others. */
#include "kernels/simd.h"
#include "models/step_attention.h"

#include <math.h>

enum { PV_VECTORS = 4 };

void SIMD_NAME(attn_step_attend)(const step_attention *a, int64_t r, int64_t h)
{
    const int64_t dh = a->d_head, n = attn_step_key_count(&a->kv, r);
    const int64_t full = dh - dh % SIMD_LANES, tail = dh - full;
    const float *q = a->q + r * a->q_stride + h * dh;
    const float *keys = attn_step_keys(a, r, h);
    const float *values = keys + a->kv.value_offset;
    float *p = a->probs + r * a->probs_row_stride + h * a->probs_head_stride;
    float *out = a->out + r * a->out_stride + h * dh;
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        const float *k = keys + j * dh;
        vf acc = vf_zero();
        for (int64_t i = 0; i < full; i += SIMD_LANES)
            acc = vf_fmadd(vf_load(q + i), vf_load(k + i), acc);
        if (tail)
            acc = vf_fmadd(vf_load_part(q + full, tail, 0.0f), vf_load_part(k + full, tail, 0.0f),
                           acc);
        p[j] = vf_sum(acc) * a->scale;
        max = p[j] > max ? p[j] : max;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < n; j++) {
        p[j] = expf(p[j] - max);
        sum += p[j];
    }
    const float inverse = n > 0 ? 1.0f / sum : 0.0f;
    for (int64_t j = 0; j < n; j++)
        p[j] *= inverse;
    /* Four vectors of the output at a time: four chains of multiply-adds side by side, where
     * one vector's chain alone waited on the previous key's sum (a batch-32 GPT-2 step spent
     * a third of its time here). Each vector's chain is the one it had alone, so the bits
     * are too. */
    for (int64_t i0 = 0; i0 < dh; i0 += PV_VECTORS * SIMD_LANES) {
        int64_t lanes[PV_VECTORS];
        vf acc[PV_VECTORS];
        for (int c = 0; c < PV_VECTORS; c++) {
            const int64_t left = dh - i0 - c * SIMD_LANES;
            lanes[c] = left <= 0 ? 0 : left < SIMD_LANES ? left : SIMD_LANES;
            acc[c] = vf_zero();
        }
        if (lanes[PV_VECTORS - 1] == SIMD_LANES) {
            for (int64_t j = 0; j < n; j++) {
                const vf pj = vf_set(p[j]);
                const float *v = values + j * dh + i0;
                for (int c = 0; c < PV_VECTORS; c++)
                    acc[c] = vf_fmadd(pj, vf_load(v + c * SIMD_LANES), acc[c]);
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                const vf pj = vf_set(p[j]);
                const float *v = values + j * dh + i0;
                for (int c = 0; c < PV_VECTORS && lanes[c] > 0; c++)
                    acc[c] = vf_fmadd(pj, vf_load_upto(v + c * SIMD_LANES, lanes[c]), acc[c]);
            }
        }
        for (int c = 0; c < PV_VECTORS && lanes[c] > 0; c++)
            vf_store_upto(out + i0 + c * SIMD_LANES, lanes[c], acc[c]);
    }
    for (int64_t j = n; j < a->probs_fill; j++)
        p[j] = 0.0f;
}
