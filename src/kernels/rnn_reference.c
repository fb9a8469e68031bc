/* The GRU and LSTM reference (ATTN_ISA_REFERENCE): the formulas of attn_rnn.h written out
 * per sentence, per step and per unit, every sum and activation in double, no GEMM. It
 * fills the same saved buffer as the float engine; intermediate values are stored as float
 * there and in the workspace, as the float engine does. */
#include "kernels/rnn_internal.h"

#include <math.h>
#include <string.h>

static double sigmoid(double x)
{
    return 1.0 / (1.0 + exp(-x));
}

/* b[row] + W[row, :] . v over n columns; bias may be NULL. */
static double affine(const float *w, const float *bias, int64_t row, const float *v, int64_t n)
{
    double sum = bias != NULL ? bias[row] : 0.0;
    for (int64_t k = 0; k < n; k++)
        sum += (double)w[row * n + k] * v[k];
    return sum;
}

static void copy_or_zero(float *dst, const float *src, int64_t n)
{
    if (src != NULL)
        memcpy(dst, src, (size_t)n * sizeof(float));
    else
        memset(dst, 0, (size_t)n * sizeof(float));
}

/* One step of sentence b at position p: reads the saved state before the step, writes the
 * saved gates, the output and (LSTM) the new cell into c_next. */
static void step_forward(const attn_rnn_forward_args *a, int64_t row, float *c_next)
{
    const attn_rnn_layout *l = &a->layout;
    const attn_rnn_params *pr = a->params;
    int64_t H = l->hidden_size, I = l->input_size;
    const float *x = a->x + row * I;
    const float *h = a->saved + l->saved_h + row * H;
    float *gates = a->saved + row * l->gate_stride;
    float *out = a->output + row * l->output_stride;
    for (int64_t j = 0; j < H; j++) {
        double pre_i[4], pre_h[4];
        for (int q = 0; q < (l->cell == ATTN_RNN_GRU ? 3 : 4); q++) {
            pre_i[q] = affine(pr->weight_ih, pr->bias_ih, q * H + j, x, I);
            pre_h[q] = affine(pr->weight_hh, pr->bias_hh, q * H + j, h, H);
        }
        if (l->cell == ATTN_RNN_GRU) {
            double r = sigmoid(pre_i[0] + pre_h[0]);
            double z = sigmoid(pre_i[1] + pre_h[1]);
            double n = tanh(pre_i[2] + r * pre_h[2]);
            gates[j] = (float)r;
            gates[H + j] = (float)z;
            gates[2 * H + j] = (float)n;
            gates[3 * H + j] = (float)pre_h[2];
            out[j] = (float)((1.0 - z) * n + z * h[j]);
        } else {
            const float *c = a->saved + l->saved_c + row * H;
            double i = sigmoid(pre_i[0] + pre_h[0]);
            double f = sigmoid(pre_i[1] + pre_h[1]);
            double g = tanh(pre_i[2] + pre_h[2]);
            double o = sigmoid(pre_i[3] + pre_h[3]);
            double c_new = f * c[j] + i * g;
            gates[j] = (float)i;
            gates[H + j] = (float)f;
            gates[2 * H + j] = (float)g;
            gates[3 * H + j] = (float)o;
            gates[4 * H + j] = (float)tanh(c_new);
            out[j] = (float)(o * tanh(c_new));
            if (c_next != NULL)
                c_next[j] = (float)c_new;
        }
    }
}

void attn_rnn_reference_forward(const attn_rnn_forward_args *a)
{
    const attn_rnn_layout *l = &a->layout;
    int64_t T = l->seq_len, H = l->hidden_size;
    int lstm = l->cell == ATTN_RNN_LSTM;
    for (int64_t b = 0; b < l->batch; b++) {
        int64_t length = attn_rnn_length(a->lengths, T, b);
        const float *h_init = a->h0 != NULL ? a->h0 + b * H : NULL;
        const float *c_init = a->c0 != NULL ? a->c0 + b * H : NULL;
        for (int64_t p = length; p < T; p++) {
            int64_t row = b * T + p;
            memset(a->output + row * l->output_stride, 0, (size_t)H * sizeof(float));
            memset(a->saved + l->saved_h + row * H, 0, (size_t)H * sizeof(float));
            if (lstm)
                memset(a->saved + l->saved_c + row * H, 0, (size_t)H * sizeof(float));
        }
        int64_t last_row = -1;
        for (int64_t s = 0; s < length; s++) {
            int64_t row = b * T + attn_rnn_position(l->reverse, length, s);
            float *h = a->saved + l->saved_h + row * H;
            if (s == 0) {
                copy_or_zero(h, h_init, H);
                if (lstm)
                    copy_or_zero(a->saved + l->saved_c + row * H, c_init, H);
            } else {
                memcpy(h, a->output + last_row * l->output_stride, (size_t)H * sizeof(float));
            }
            /* The new cell goes where the next step reads it, or to c_n after the last. */
            float *c_next = NULL;
            if (lstm && s + 1 < length)
                c_next = a->saved + l->saved_c +
                         (b * T + attn_rnn_position(l->reverse, length, s + 1)) * H;
            else if (lstm && a->c_n != NULL)
                c_next = a->c_n + b * H;
            step_forward(a, row, c_next);
            last_row = row;
        }
        if (a->h_n != NULL) {
            if (length > 0)
                memcpy(a->h_n + b * H, a->output + last_row * l->output_stride,
                       (size_t)H * sizeof(float));
            else
                copy_or_zero(a->h_n + b * H, h_init, H);
        }
        if (lstm && a->c_n != NULL && length == 0)
            copy_or_zero(a->c_n + b * H, c_init, H);
    }
}

/* Column m of the gradient fed to W_hh, from a row of the dgates layout. */
static double dgh_at(const attn_rnn_layout *l, const float *dgates, int64_t m)
{
    int64_t H = l->hidden_size;
    return l->cell == ATTN_RNN_GRU && m >= 2 * H ? dgates[m + H] : dgates[m];
}

/* One step backward: dh (carried, [H]) and dc (LSTM) in, the gradients of the state before
 * the step out; writes the row's gate gradients. */
static void step_backward(const attn_rnn_backward_args *a, int64_t row, float *dh, float *dc)
{
    const attn_rnn_layout *l = &a->layout;
    int64_t H = l->hidden_size, G = l->gate_rows;
    const float *gates = a->saved + row * l->gate_stride;
    const float *dout = a->doutput != NULL ? a->doutput + row * l->output_stride : NULL;
    float *dg = a->workspace + l->work_dgates + row * l->grad_stride;
    for (int64_t j = 0; j < H; j++) {
        double d = (double)dh[j] + (dout != NULL ? dout[j] : 0.0);
        if (l->cell == ATTN_RNN_GRU) {
            double r = gates[j], z = gates[H + j], n = gates[2 * H + j];
            double hn = gates[3 * H + j], h = a->saved[l->saved_h + row * H + j];
            double dn = d * (1.0 - z) * (1.0 - n * n);
            dg[j] = (float)(dn * hn * r * (1.0 - r));
            dg[H + j] = (float)(d * (h - n) * z * (1.0 - z));
            dg[2 * H + j] = (float)dn;
            dg[3 * H + j] = (float)(dn * r);
            dh[j] = (float)(d * z); /* the direct path; the W_hh path is added below */
        } else {
            double i = gates[j], f = gates[H + j], g = gates[2 * H + j];
            double o = gates[3 * H + j], t = gates[4 * H + j];
            double c = a->saved[l->saved_c + row * H + j];
            double dcell = dc[j] + d * o * (1.0 - t * t);
            dg[j] = (float)(dcell * g * i * (1.0 - i));
            dg[H + j] = (float)(dcell * c * f * (1.0 - f));
            dg[2 * H + j] = (float)(dcell * i * (1.0 - g * g));
            dg[3 * H + j] = (float)(d * t * o * (1.0 - o));
            dc[j] = (float)(dcell * f);
            dh[j] = 0.0f;
        }
    }
    for (int64_t j = 0; j < H; j++) {
        double sum = dh[j];
        for (int64_t m = 0; m < G; m++)
            sum += dgh_at(l, dg, m) * a->params->weight_hh[m * H + j];
        dh[j] = (float)sum;
    }
}

void attn_rnn_reference_backward(const attn_rnn_backward_args *a)
{
    const attn_rnn_layout *l = &a->layout;
    int64_t B = l->batch, T = l->seq_len, H = l->hidden_size, I = l->input_size;
    int64_t G = l->gate_rows;
    int lstm = l->cell == ATTN_RNN_LSTM;
    float *dgates = a->workspace + l->work_dgates;
    for (int64_t b = 0; b < B; b++) {
        int64_t length = attn_rnn_length(a->lengths, T, b);
        float *dh = a->workspace + l->work_state_h + b * H;
        float *dc = lstm ? a->workspace + l->work_state_c + b * H : NULL;
        copy_or_zero(dh, a->dh_n != NULL ? a->dh_n + b * H : NULL, H);
        if (lstm)
            copy_or_zero(dc, a->dc_n != NULL ? a->dc_n + b * H : NULL, H);
        for (int64_t p = length; p < T; p++)
            memset(dgates + (b * T + p) * l->grad_stride, 0,
                   (size_t)l->grad_stride * sizeof(float));
        for (int64_t s = length - 1; s >= 0; s--)
            step_backward(a, b * T + attn_rnn_position(l->reverse, length, s), dh, dc);
        for (int64_t j = 0; j < H; j++) {
            if (a->dh0 != NULL)
                a->dh0[b * H + j] += dh[j];
            if (lstm && a->dc0 != NULL)
                a->dc0[b * H + j] += dc[j];
        }
    }

    /* The parameters and the input, summed over every real position in order. */
    const attn_rnn_grads *g = &a->grads;
    for (int64_t m = 0; m < G; m++) {
        for (int64_t k = 0; k < I && g->weight_ih != NULL; k++) {
            double sum = 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t p = 0; p < attn_rnn_length(a->lengths, T, b); p++)
                    sum += (double)dgates[(b * T + p) * l->grad_stride + m] *
                           a->x[(b * T + p) * I + k];
            g->weight_ih[m * I + k] = (float)(g->weight_ih[m * I + k] + sum);
        }
        for (int64_t k = 0; k < H && g->weight_hh != NULL; k++) {
            double sum = 0;
            for (int64_t b = 0; b < B; b++)
                for (int64_t p = 0; p < attn_rnn_length(a->lengths, T, b); p++)
                    sum += dgh_at(l, dgates + (b * T + p) * l->grad_stride, m) *
                           a->saved[l->saved_h + (b * T + p) * H + k];
            g->weight_hh[m * H + k] = (float)(g->weight_hh[m * H + k] + sum);
        }
        double sum_ih = 0, sum_hh = 0;
        for (int64_t b = 0; b < B; b++)
            for (int64_t p = 0; p < attn_rnn_length(a->lengths, T, b); p++) {
                const float *row = dgates + (b * T + p) * l->grad_stride;
                sum_ih += row[m];
                sum_hh += dgh_at(l, row, m);
            }
        if (g->bias_ih != NULL)
            g->bias_ih[m] = (float)(g->bias_ih[m] + sum_ih);
        if (g->bias_hh != NULL)
            g->bias_hh[m] = (float)(g->bias_hh[m] + sum_hh);
    }
    if (a->dx != NULL)
        for (int64_t b = 0; b < B; b++)
            for (int64_t p = 0; p < attn_rnn_length(a->lengths, T, b); p++)
                for (int64_t k = 0; k < I; k++) {
                    double sum = 0;
                    for (int64_t m = 0; m < G; m++)
                        sum += (double)dgates[(b * T + p) * l->grad_stride + m] *
                               a->params->weight_ih[m * I + k];
                    a->dx[(b * T + p) * I + k] = (float)(a->dx[(b * T + p) * I + k] + sum);
                }
}
