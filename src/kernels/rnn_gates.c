/* Gate math of GRU and LSTM for one sentence at one step, in plain C: the forward for
 * ATTN_ISA_PORTABLE (rnn_gates_simd.h vectorises it) and the backward for every float
 * instruction set. The forward's time goes into sigma and tanh, both the kernels' float tanh
 * (fast_math.h; sigma(x) = (1 + tanh(x / 2)) / 2). */
#include "kernels/fast_math.h"
#include "kernels/rnn_internal.h"

static inline float sigmoid_approx(float x)
{
    return 0.5f * attn_fast_tanh(0.5f * x) + 0.5f;
}

void attn_rnn_gru_forward_portable(int64_t hidden, float *gates, const float *gh, float *h,
                                   float *out)
{
    float *r = gates, *z = gates + hidden, *n = gates + 2 * hidden, *hn = gates + 3 * hidden;
    const float *gh_r = gh, *gh_z = gh + hidden, *gh_n = gh + 2 * hidden;
    for (int64_t j = 0; j < hidden; j++) {
        float rj = sigmoid_approx(r[j] + gh_r[j]);
        float zj = sigmoid_approx(z[j] + gh_z[j]);
        float nj = attn_fast_tanh(n[j] + rj * gh_n[j]);
        float hj = nj + zj * (h[j] - nj);
        r[j] = rj;
        z[j] = zj;
        n[j] = nj;
        hn[j] = gh_n[j];
        h[j] = hj;
        out[j] = hj;
    }
}

void attn_rnn_lstm_forward_portable(int64_t hidden, float *gates, const float *gh, float *h,
                                    float *c, float *out)
{
    float *i = gates, *f = gates + hidden, *g = gates + 2 * hidden, *o = gates + 3 * hidden;
    float *tanh_c = gates + 4 * hidden;
    for (int64_t j = 0; j < hidden; j++) {
        float ij = sigmoid_approx(i[j] + gh[j]);
        float fj = sigmoid_approx(f[j] + gh[hidden + j]);
        float gj = attn_fast_tanh(g[j] + gh[2 * hidden + j]);
        float oj = sigmoid_approx(o[j] + gh[3 * hidden + j]);
        float cj = fj * c[j] + ij * gj;
        float tj = attn_fast_tanh(cj);
        float hj = oj * tj;
        i[j] = ij;
        f[j] = fj;
        g[j] = gj;
        o[j] = oj;
        tanh_c[j] = tj;
        c[j] = cj;
        h[j] = hj;
        out[j] = hj;
    }
}

void attn_rnn_gru_backward_row(int64_t hidden, const float *restrict gates,
                               const float *restrict h_prev, const float *restrict dout,
                               float *restrict dh, float *restrict dgates, float *restrict dgh)
{
    const float *r = gates, *z = gates + hidden, *n = gates + 2 * hidden;
    const float *hn = gates + 3 * hidden;
    if (dout != NULL)
        for (int64_t j = 0; j < hidden; j++)
            dh[j] += dout[j];
    for (int64_t j = 0; j < hidden; j++) {
        float d = dh[j];
        float dn = d * (1.0f - z[j]) * (1.0f - n[j] * n[j]);
        float dz = d * (h_prev[j] - n[j]) * z[j] * (1.0f - z[j]);
        float dr = dn * hn[j] * r[j] * (1.0f - r[j]);
        float dn_h = dn * r[j];
        dgates[j] = dr;
        dgates[hidden + j] = dz;
        dgates[2 * hidden + j] = dn;
        dgates[3 * hidden + j] = dn_h;
        dgh[j] = dr;
        dgh[hidden + j] = dz;
        dgh[2 * hidden + j] = dn_h;
        dh[j] = d * z[j];
    }
}

void attn_rnn_lstm_backward_row(int64_t hidden, const float *gates, const float *c_prev,
                                const float *dout, float *dh, float *dc, float *dgates, float *dgh)
{
    const float *i = gates, *f = gates + hidden, *g = gates + 2 * hidden;
    const float *o = gates + 3 * hidden, *tanh_c = gates + 4 * hidden;
    if (dout != NULL)
        for (int64_t j = 0; j < hidden; j++)
            dh[j] += dout[j];
    for (int64_t j = 0; j < hidden; j++) {
        float t = tanh_c[j];
        float dcell = dc[j] + dh[j] * o[j] * (1.0f - t * t);
        float di = dcell * g[j] * i[j] * (1.0f - i[j]);
        float df = dcell * c_prev[j] * f[j] * (1.0f - f[j]);
        float dg = dcell * i[j] * (1.0f - g[j] * g[j]);
        float d_o = dh[j] * t * o[j] * (1.0f - o[j]);
        dgates[j] = dgh[j] = di;
        dgates[hidden + j] = dgh[hidden + j] = df;
        dgates[2 * hidden + j] = dgh[2 * hidden + j] = dg;
        dgates[3 * hidden + j] = dgh[3 * hidden + j] = d_o;
        dc[j] = dcell * f[j];
    }
}
