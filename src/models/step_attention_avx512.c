/* The step decoder's single-query attention with AVX-512 (step_attention.h). */
#include "models/step_attention.h"

#include <immintrin.h>
#include <math.h>

void attn_step_attend_avx512(const step_attention *a, int64_t r, int64_t h)
{
    const int64_t dh = a->d_head, n = attn_step_key_count(&a->kv, r);
    const int64_t full = dh - dh % 16;
    const __mmask16 tail = (__mmask16)((1u << (dh % 16)) - 1u);
    const float *q = a->q + r * a->q_stride + h * dh;
    const float *keys = attn_step_keys(a, r, h);
    const float *values = keys + a->kv.value_offset;
    float *p = a->probs + r * a->probs_row_stride + h * a->probs_head_stride;
    float *out = a->out + r * a->out_stride + h * dh;
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        const float *k = keys + j * dh;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t i = 0; i < full; i += 16)
            acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), _mm512_loadu_ps(k + i), acc);
        if (tail)
            acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, q + full),
                                  _mm512_maskz_loadu_ps(tail, k + full), acc);
        p[j] = _mm512_reduce_add_ps(acc) * a->scale;
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
    for (int64_t i = 0; i < dh; i += 16) {
        const __mmask16 lanes = i + 16 <= dh ? (__mmask16)0xffff : tail;
        __m512 acc = _mm512_setzero_ps();
        for (int64_t j = 0; j < n; j++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(p[j]),
                                  _mm512_maskz_loadu_ps(lanes, values + j * dh + i), acc);
        _mm512_mask_storeu_ps(out + i, lanes, acc);
    }
    for (int64_t j = n; j < a->probs_fill; j++)
        p[j] = 0.0f;
}
