/* AVX2 gate math of the GRU and LSTM forward: sigma and tanh (the shared float tanh,
 * sigma(x) = (1 + tanh(x / 2)) / 2) 8 units at a time, masked for the tail. Same
 * operations as rnn_gates.c, fused with FMA. */
#include "kernels/rnn_internal.h"

#include "attention/classic_tanh_simd.h"

static __m256 sigmoid8(__m256 x)
{
    const __m256 half = _mm256_set1_ps(0.5f);
    return _mm256_fmadd_ps(half, attn_tanh8_avx2(_mm256_mul_ps(half, x)), half);
}

/* Lanes [0, remaining) on, the rest off, for masked loads and stores. */
static __m256i tail_mask(int64_t remaining)
{
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int32_t count = remaining >= 8 ? 8 : (int32_t)remaining;
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(count), lanes);
}

void attn_rnn_gru_forward_avx2(int64_t hidden, float *gates, const float *gh, float *h, float *out)
{
    float *r = gates, *z = gates + hidden, *n = gates + 2 * hidden, *hn = gates + 3 * hidden;
    const float *gh_r = gh, *gh_z = gh + hidden, *gh_n = gh + 2 * hidden;
    for (int64_t j = 0; j < hidden; j += 8) {
        __m256i m = tail_mask(hidden - j);
        __m256 rj =
            sigmoid8(_mm256_add_ps(_mm256_maskload_ps(r + j, m), _mm256_maskload_ps(gh_r + j, m)));
        __m256 zj =
            sigmoid8(_mm256_add_ps(_mm256_maskload_ps(z + j, m), _mm256_maskload_ps(gh_z + j, m)));
        __m256 hnj = _mm256_maskload_ps(gh_n + j, m);
        __m256 nj = attn_tanh8_avx2(_mm256_fmadd_ps(rj, hnj, _mm256_maskload_ps(n + j, m)));
        __m256 hj = _mm256_fmadd_ps(zj, _mm256_sub_ps(_mm256_maskload_ps(h + j, m), nj), nj);
        _mm256_maskstore_ps(r + j, m, rj);
        _mm256_maskstore_ps(z + j, m, zj);
        _mm256_maskstore_ps(n + j, m, nj);
        _mm256_maskstore_ps(hn + j, m, hnj);
        _mm256_maskstore_ps(h + j, m, hj);
        _mm256_maskstore_ps(out + j, m, hj);
    }
}

void attn_rnn_lstm_forward_avx2(int64_t hidden, float *gates, const float *gh, float *h, float *c,
                                float *out)
{
    float *i = gates, *f = gates + hidden, *g = gates + 2 * hidden, *o = gates + 3 * hidden;
    float *tanh_c = gates + 4 * hidden;
    for (int64_t j = 0; j < hidden; j += 8) {
        __m256i m = tail_mask(hidden - j);
        __m256 ij =
            sigmoid8(_mm256_add_ps(_mm256_maskload_ps(i + j, m), _mm256_maskload_ps(gh + j, m)));
        __m256 fj = sigmoid8(
            _mm256_add_ps(_mm256_maskload_ps(f + j, m), _mm256_maskload_ps(gh + hidden + j, m)));
        __m256 gj = attn_tanh8_avx2(_mm256_add_ps(_mm256_maskload_ps(g + j, m),
                                                  _mm256_maskload_ps(gh + 2 * hidden + j, m)));
        __m256 oj = sigmoid8(_mm256_add_ps(_mm256_maskload_ps(o + j, m),
                                           _mm256_maskload_ps(gh + 3 * hidden + j, m)));
        __m256 cj = _mm256_fmadd_ps(fj, _mm256_maskload_ps(c + j, m), _mm256_mul_ps(ij, gj));
        __m256 tj = attn_tanh8_avx2(cj);
        __m256 hj = _mm256_mul_ps(oj, tj);
        _mm256_maskstore_ps(i + j, m, ij);
        _mm256_maskstore_ps(f + j, m, fj);
        _mm256_maskstore_ps(g + j, m, gj);
        _mm256_maskstore_ps(o + j, m, oj);
        _mm256_maskstore_ps(tanh_c + j, m, tj);
        _mm256_maskstore_ps(c + j, m, cj);
        _mm256_maskstore_ps(h + j, m, hj);
        _mm256_maskstore_ps(out + j, m, hj);
    }
}
