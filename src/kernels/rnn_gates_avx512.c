/* AVX-512 gate math of the GRU and LSTM forward: sigma and tanh (the shared float tanh,
 * sigma(x) = (1 + tanh(x / 2)) / 2) 16 units at a time, masked for the tail. Same
 * operations as rnn_gates.c, fused with FMA. */
#include "kernels/rnn_internal.h"

#include "attention/classic_tanh_simd.h"

static __m512 sigmoid16(__m512 x)
{
    const __m512 half = _mm512_set1_ps(0.5f);
    return _mm512_fmadd_ps(half, attn_tanh16_avx512(_mm512_mul_ps(half, x)), half);
}

static __mmask16 tail_mask(int64_t remaining)
{
    uint32_t bits = remaining >= 16 ? 0xFFFFu : (1u << remaining) - 1u;
    return (__mmask16)bits;
}

void attn_rnn_gru_forward_avx512(int64_t hidden, float *gates, const float *gh, float *h,
                                 float *out)
{
    float *r = gates, *z = gates + hidden, *n = gates + 2 * hidden, *hn = gates + 3 * hidden;
    const float *gh_r = gh, *gh_z = gh + hidden, *gh_n = gh + 2 * hidden;
    for (int64_t j = 0; j < hidden; j += 16) {
        __mmask16 m = tail_mask(hidden - j);
        __m512 rj = sigmoid16(
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, r + j), _mm512_maskz_loadu_ps(m, gh_r + j)));
        __m512 zj = sigmoid16(
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, z + j), _mm512_maskz_loadu_ps(m, gh_z + j)));
        __m512 hnj = _mm512_maskz_loadu_ps(m, gh_n + j);
        __m512 nj = attn_tanh16_avx512(_mm512_fmadd_ps(rj, hnj, _mm512_maskz_loadu_ps(m, n + j)));
        __m512 hj = _mm512_fmadd_ps(zj, _mm512_sub_ps(_mm512_maskz_loadu_ps(m, h + j), nj), nj);
        _mm512_mask_storeu_ps(r + j, m, rj);
        _mm512_mask_storeu_ps(z + j, m, zj);
        _mm512_mask_storeu_ps(n + j, m, nj);
        _mm512_mask_storeu_ps(hn + j, m, hnj);
        _mm512_mask_storeu_ps(h + j, m, hj);
        _mm512_mask_storeu_ps(out + j, m, hj);
    }
}

void attn_rnn_lstm_forward_avx512(int64_t hidden, float *gates, const float *gh, float *h, float *c,
                                  float *out)
{
    float *i = gates, *f = gates + hidden, *g = gates + 2 * hidden, *o = gates + 3 * hidden;
    float *tanh_c = gates + 4 * hidden;
    for (int64_t j = 0; j < hidden; j += 16) {
        __mmask16 m = tail_mask(hidden - j);
        __m512 ij = sigmoid16(
            _mm512_add_ps(_mm512_maskz_loadu_ps(m, i + j), _mm512_maskz_loadu_ps(m, gh + j)));
        __m512 fj = sigmoid16(_mm512_add_ps(_mm512_maskz_loadu_ps(m, f + j),
                                            _mm512_maskz_loadu_ps(m, gh + hidden + j)));
        __m512 gj = attn_tanh16_avx512(_mm512_add_ps(
            _mm512_maskz_loadu_ps(m, g + j), _mm512_maskz_loadu_ps(m, gh + 2 * hidden + j)));
        __m512 oj = sigmoid16(_mm512_add_ps(_mm512_maskz_loadu_ps(m, o + j),
                                            _mm512_maskz_loadu_ps(m, gh + 3 * hidden + j)));
        __m512 cj = _mm512_fmadd_ps(fj, _mm512_maskz_loadu_ps(m, c + j), _mm512_mul_ps(ij, gj));
        __m512 tj = attn_tanh16_avx512(cj);
        __m512 hj = _mm512_mul_ps(oj, tj);
        _mm512_mask_storeu_ps(i + j, m, ij);
        _mm512_mask_storeu_ps(f + j, m, fj);
        _mm512_mask_storeu_ps(g + j, m, gj);
        _mm512_mask_storeu_ps(o + j, m, oj);
        _mm512_mask_storeu_ps(tanh_c + j, m, tj);
        _mm512_mask_storeu_ps(c + j, m, cj);
        _mm512_mask_storeu_ps(h + j, m, hj);
        _mm512_mask_storeu_ps(out + j, m, hj);
    }
}
