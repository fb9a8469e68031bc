/* Gate math of the GRU and LSTM forward on SIMD vectors, compiled by rnn_gates_avx2.c and
 * rnn_gates_avx512.c: the operations of rnn_gates.c, fused with FMA, SIMD_LANES units at a
 * time with a zero-filled partial vector for the tail. */
#include "kernels/rnn_internal.h"
#include "kernels/simd.h"

/* sigma(x) = (1 + tanh(x / 2)) / 2, as in rnn_gates.c */
static inline vf gate_sigmoid(vf x)
{
    vf half = vf_set(0.5f);
    return vf_fmadd(half, vf_tanh(vf_mul(half, x)), half);
}

void SIMD_NAME(attn_rnn_gru_forward)(int64_t hidden, float *gates, const float *gh, float *h,
                                     float *out)
{
    float *r = gates, *z = gates + hidden, *n = gates + 2 * hidden, *hn = gates + 3 * hidden;
    const float *gh_r = gh, *gh_z = gh + hidden, *gh_n = gh + 2 * hidden;
    for (int64_t j = 0; j < hidden; j += SIMD_LANES) {
        int64_t k = hidden - j < SIMD_LANES ? hidden - j : SIMD_LANES;
        vf rj = gate_sigmoid(vf_add(vf_load_upto(r + j, k), vf_load_upto(gh_r + j, k)));
        vf zj = gate_sigmoid(vf_add(vf_load_upto(z + j, k), vf_load_upto(gh_z + j, k)));
        vf hnj = vf_load_upto(gh_n + j, k);
        vf nj = vf_tanh(vf_fmadd(rj, hnj, vf_load_upto(n + j, k)));
        vf hj = vf_fmadd(zj, vf_sub(vf_load_upto(h + j, k), nj), nj);
        vf_store_upto(r + j, k, rj);
        vf_store_upto(z + j, k, zj);
        vf_store_upto(n + j, k, nj);
        vf_store_upto(hn + j, k, hnj);
        vf_store_upto(h + j, k, hj);
        vf_store_upto(out + j, k, hj);
    }
}

void SIMD_NAME(attn_rnn_lstm_forward)(int64_t hidden, float *gates, const float *gh, float *h,
                                      float *c, float *out)
{
    float *i = gates, *f = gates + hidden, *g = gates + 2 * hidden, *o = gates + 3 * hidden;
    float *tanh_c = gates + 4 * hidden;
    for (int64_t j = 0; j < hidden; j += SIMD_LANES) {
        int64_t k = hidden - j < SIMD_LANES ? hidden - j : SIMD_LANES;
        vf ij = gate_sigmoid(vf_add(vf_load_upto(i + j, k), vf_load_upto(gh + j, k)));
        vf fj = gate_sigmoid(vf_add(vf_load_upto(f + j, k), vf_load_upto(gh + hidden + j, k)));
        vf gj = vf_tanh(vf_add(vf_load_upto(g + j, k), vf_load_upto(gh + 2 * hidden + j, k)));
        vf oj = gate_sigmoid(vf_add(vf_load_upto(o + j, k), vf_load_upto(gh + 3 * hidden + j, k)));
        vf cj = vf_fmadd(fj, vf_load_upto(c + j, k), vf_mul(ij, gj));
        vf tj = vf_tanh(cj);
        vf hj = vf_mul(oj, tj);
        vf_store_upto(i + j, k, ij);
        vf_store_upto(f + j, k, fj);
        vf_store_upto(g + j, k, gj);
        vf_store_upto(o + j, k, oj);
        vf_store_upto(tanh_c + j, k, tj);
        vf_store_upto(c + j, k, cj);
        vf_store_upto(h + j, k, hj);
        vf_store_upto(out + j, k, hj);
    }
}
