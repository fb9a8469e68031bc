/* The step decoder's single-query attention (step_attention.h) on SIMD vectors, compiled by
 * step_attention_avx2.c, step_attention_avx512.c and step_attention_neon.c, over a cache of
 * floats or of bf16 values. A head's last d_head % SIMD_LANES features go through a
 * zero-filled partial vector, in the same accumulator as the others. */
#include "kernels/simd.h"
#include "models/step_attention.h"

#include <math.h>

enum { PV_VECTORS = 4 };

/* Vector loads of the cache, floats or bf16 (bf16 is a constant in each caller, so each
 * version compiles to its own loads alone). */
static inline vf kv_load(const void *pool, int bf16, int64_t at)
{
    return bf16 ? vf_load_bf16((const uint16_t *)pool + at) : vf_load((const float *)pool + at);
}

static inline vf kv_load_upto(const void *pool, int bf16, int64_t at, int64_t k)
{
    if (k == SIMD_LANES)
        return kv_load(pool, bf16, at);
    return bf16 ? vf_load_bf16_part((const uint16_t *)pool + at, k)
                : vf_load_part((const float *)pool + at, k, 0.0f);
}

static inline __attribute__((always_inline)) void attend(const step_attention *a, int64_t r,
                                                         int64_t h, const int bf16)
{
    const int64_t dh = a->d_head, n = attn_step_key_count(&a->kv, r);
    const int64_t full = dh - dh % SIMD_LANES, tail = dh - full;
    const float *q = a->q + r * a->q_stride + h * dh;
    const void *pool = a->kv.pool;
    const int64_t keys = attn_step_keys_at(a, r, h), values = keys + a->kv.value_offset;
    float *p = a->probs + r * a->probs_row_stride + h * a->probs_head_stride;
    float *out = a->out + r * a->out_stride + h * dh;
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        const int64_t k = keys + j * dh;
        vf acc = vf_zero();
        for (int64_t i = 0; i < full; i += SIMD_LANES)
            acc = vf_fmadd(vf_load(q + i), kv_load(pool, bf16, k + i), acc);
        if (tail)
            acc = vf_fmadd(vf_load_part(q + full, tail, 0.0f),
                           kv_load_upto(pool, bf16, k + full, tail), acc);
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
                const int64_t v = values + j * dh + i0;
                for (int c = 0; c < PV_VECTORS; c++)
                    acc[c] = vf_fmadd(pj, kv_load(pool, bf16, v + c * SIMD_LANES), acc[c]);
            }
        } else {
            for (int64_t j = 0; j < n; j++) {
                const vf pj = vf_set(p[j]);
                const int64_t v = values + j * dh + i0;
                for (int c = 0; c < PV_VECTORS && lanes[c] > 0; c++)
                    acc[c] = vf_fmadd(pj, kv_load_upto(pool, bf16, v + c * SIMD_LANES, lanes[c]),
                                      acc[c]);
            }
        }
        for (int c = 0; c < PV_VECTORS && lanes[c] > 0; c++)
            vf_store_upto(out + i0 + c * SIMD_LANES, lanes[c], acc[c]);
    }
    for (int64_t j = n; j < a->probs_fill; j++)
        p[j] = 0.0f;
}

void SIMD_NAME(attn_step_attend)(const step_attention *a, int64_t r, int64_t h)
{
    attend(a, r, h, 0);
}

void SIMD_NAME(attn_step_attend_bf16)(const step_attention *a, int64_t r, int64_t h)
{
    attend(a, r, h, 1);
}
