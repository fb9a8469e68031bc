/* The step decoder's single-query attention with AVX2 and FMA (step_attention.h). */
#include "models/step_attention.h"

#include <immintrin.h>
#include <math.h>

static inline float reduce_add(__m256 v)
{
    const __m128 quad = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    const __m128 pair = _mm_add_ps(quad, _mm_movehl_ps(quad, quad));
    return _mm_cvtss_f32(_mm_add_ss(pair, _mm_shuffle_ps(pair, pair, 1)));
}

void attn_step_attend_avx2(const step_attention *a, int64_t r, int64_t h)
{
    const int64_t dh = a->d_head, n = attn_step_key_count(&a->kv, r);
    const int64_t full = dh - dh % 8;
    const float *q = a->q + r * a->q_stride + h * dh;
    const float *keys = attn_step_keys(a, r, h);
    const float *values = keys + a->kv.value_offset;
    float *p = a->probs + r * a->probs_row_stride + h * a->probs_head_stride;
    float *out = a->out + r * a->out_stride + h * dh;
    float max = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        const float *k = keys + j * dh;
        __m256 acc = _mm256_setzero_ps();
        for (int64_t i = 0; i < full; i += 8)
            acc = _mm256_fmadd_ps(_mm256_loadu_ps(q + i), _mm256_loadu_ps(k + i), acc);
        float s = reduce_add(acc);
        for (int64_t i = full; i < dh; i++)
            s += q[i] * k[i];
        p[j] = s * a->scale;
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
    for (int64_t i = 0; i < full; i += 8) {
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < n; j++)
            acc = _mm256_fmadd_ps(_mm256_set1_ps(p[j]), _mm256_loadu_ps(values + j * dh + i), acc);
        _mm256_storeu_ps(out + i, acc);
    }
    for (int64_t i = full; i < dh; i++) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n; j++)
            acc += p[j] * values[j * dh + i];
        out[i] = acc;
    }
    for (int64_t j = n; j < a->probs_fill; j++)
        p[j] = 0.0f;
}
