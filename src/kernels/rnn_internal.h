/* GRU and LSTM internals shared by rnn.c (checks, buffer layout, the GEMM-driven float
 * engine), rnn_reference.c (the double reference) and rnn_gates*.c (the element-wise gate
 * math of one sentence at one step, per instruction set). A one-step cell is a layer with
 * T = 1, so everything here speaks of layers. */
#ifndef ATTN_RNN_INTERNAL_H
#define ATTN_RNN_INTERNAL_H

#include "attn/attn_rnn.h"
#include "core/internal.h"
#include "kernels/quantized_rows.h"

/* Sizes and where each part of the caller's buffers starts (offsets in floats, multiples
 * of 16 so parts stay 64-byte aligned when the buffer is).
 *  saved:      gates [B*T, gate_stride]   GRU r, z, n, W_hn h + b_hn; LSTM i, f, g, o, tanh(c')
 *              h     [B*T, H]             the state before each step (zeros at padding)
 *              c     [B*T, H]             LSTM: the cell before each step
 *  workspace:  order [B] as int64         sentences by length, longest first
 *              state_h, state_c [B, H]    the running state (or its gradient), in that order
 *              rows  [B, G*H]             per step: h W_hh^T, or the gradient fed to W_hh
 *              dgates [B*T, 4H]           gate gradients (pre-activation) of every position:
 *                                         GRU dr, dz, dn, r * dn (the n rows of W_hh); LSTM di,
 *                                         df, dg, do. Zero at padding. */
typedef struct attn_rnn_layout {
    attn_rnn_cell cell;
    int reverse;
    int64_t batch, seq_len, input_size, hidden_size;
    int64_t gate_rows;        /* G*H: rows of W_ih and W_hh */
    int64_t gate_stride;      /* 4H GRU, 5H LSTM */
    int64_t grad_stride;      /* 4H */
    int64_t output_stride;    /* resolved: >= H */
    attn_precision precision; /* of the products over all positions */
    size_t saved_h, saved_c, saved_floats;
    size_t work_state_h, work_state_c, work_rows, work_dgates, workspace_floats;
} attn_rnn_layout;

/* A layer whose weights are also stored in bf16 or int8 (a model decoding in that precision):
 * its input projection and its per-step recurrent product multiply these with
 * attn_quantized_linear instead of the GEMMs, in scratch of attn_rnn_stored_scratch_bytes
 * (64-byte aligned). */
typedef struct attn_rnn_stored {
    const attn_quantized_matrix *w_ih, *w_hh;
    void *scratch;
} attn_rnn_stored;

typedef struct attn_rnn_forward_args {
    attn_rnn_layout layout;
    const attn_rnn_params *params;
    const attn_rnn_stored *stored; /* NULL: the products are GEMMs at layout.precision */
    const float *x;
    const int64_t *lengths; /* NULL = all T */
    const float *h0, *c0;   /* NULL = zeros */
    float *output, *h_n, *c_n;
    float *saved, *workspace;
} attn_rnn_forward_args;

typedef struct attn_rnn_backward_args {
    attn_rnn_layout layout;
    const attn_rnn_params *params;
    const float *x;
    const int64_t *lengths;
    const float *saved;
    const float *doutput, *dh_n, *dc_n; /* NULL = zero */
    float *workspace;
    float *dx, *dh0, *dc0; /* NULL = not wanted */
    attn_rnn_grads grads;  /* NULL fields = not wanted */
} attn_rnn_backward_args;

static inline int64_t attn_rnn_length(const int64_t *lengths, int64_t seq_len, int64_t b)
{
    return lengths != NULL ? lengths[b] : seq_len;
}

/* The position a sentence of the given length processes at step s < length. */
static inline int64_t attn_rnn_position(int reverse, int64_t length, int64_t s)
{
    return reverse ? length - 1 - s : s;
}

/* ATTN_ISA_REFERENCE: per sentence, per step, per unit, every sum in double, no GEMM. */
ATTN_INTERNAL void attn_rnn_reference_forward(const attn_rnn_forward_args *args);
ATTN_INTERNAL void attn_rnn_reference_backward(const attn_rnn_backward_args *args);

ATTN_INTERNAL size_t attn_rnn_stored_scratch_bytes(const attn_rnn_layer_dims *dims,
                                                   const attn_rnn_stored *stored);
/* attn_rnn_layer_forward (no h0, c0 or final states: an encoder's layer) with the products on
 * stored matrices. The reference instruction set ignores them: it computes in double from
 * params, which hold the same stored values. */
ATTN_INTERNAL attn_status attn_rnn_layer_forward_stored(
    const attn_rnn_layer_dims *dims, const attn_rnn_params *params, const attn_rnn_stored *stored,
    const float *x, const int64_t *lengths, float *output, float *saved, float *workspace);

/* Gate math of one sentence at one step, biases already inside the projections:
 *  gates [gate_stride]: in, x W_ih^T + b_ih (G*H); out, what the saved layout holds
 *  gh [G*H]: h W_hh^T + b_hh
 *  h [H] (and c [H]): in, the state; out, the new state, also written to out [H]. */
typedef void (*attn_rnn_gru_forward_fn)(int64_t hidden, float *gates, const float *gh, float *h,
                                        float *out);
typedef void (*attn_rnn_lstm_forward_fn)(int64_t hidden, float *gates, const float *gh, float *h,
                                         float *c, float *out);
ATTN_INTERNAL void attn_rnn_gru_forward_portable(int64_t hidden, float *gates, const float *gh,
                                                 float *h, float *out);
ATTN_INTERNAL void attn_rnn_lstm_forward_portable(int64_t hidden, float *gates, const float *gh,
                                                  float *h, float *c, float *out);
ATTN_INTERNAL void attn_rnn_gru_forward_avx2(int64_t hidden, float *gates, const float *gh,
                                             float *h, float *out);
ATTN_INTERNAL void attn_rnn_lstm_forward_avx2(int64_t hidden, float *gates, const float *gh,
                                              float *h, float *c, float *out);
ATTN_INTERNAL void attn_rnn_gru_forward_avx512(int64_t hidden, float *gates, const float *gh,
                                               float *h, float *out);
ATTN_INTERNAL void attn_rnn_lstm_forward_avx512(int64_t hidden, float *gates, const float *gh,
                                                float *h, float *c, float *out);
ATTN_INTERNAL void attn_rnn_gru_forward_neon(int64_t hidden, float *gates, const float *gh,
                                             float *h, float *out);
ATTN_INTERNAL void attn_rnn_lstm_forward_neon(int64_t hidden, float *gates, const float *gh,
                                              float *h, float *c, float *out);

/* One step of a cell whose two projections the caller computed (a model decoding with
 * weights stored in bf16 or int8 multiplies them with those): gates [batch, stride] holds
 * x W_ih^T + b_ih in its first G = 3H (GRU) or 4H (LSTM) columns, stride =
 * attn_rnn_cell_gate_stride, and is overwritten; gh [batch, G] = h W_hh^T + b_hh. h and c
 * [batch, H] (NULL: zeros; c for LSTM only) give h_out and c_out [batch, H]; h_out may be h
 * and c_out c. The gate math is the cell's own (attn_rnn_cell_forward's), rows in parallel. */
ATTN_INTERNAL int64_t attn_rnn_cell_gate_stride(attn_rnn_cell cell, int64_t hidden);
ATTN_INTERNAL void attn_rnn_cell_forward_projected(attn_rnn_cell cell, int64_t batch,
                                                   int64_t hidden, float *gates, const float *gh,
                                                   const float *h, const float *c, float *h_out,
                                                   float *c_out);

/* The backward of one sentence at one step, in float, for every instruction set: with no
 * transcendental function left it takes ~0.8 us per sentence and step at H = 256, a few
 * percent of the step's GEMMs, so SIMD would buy nothing measurable. No pointer aliases
 * another.
 *  gates: the saved row; h_prev / c_prev: the saved state before the step
 *  dout [H] or NULL: the output's gradient, added to dh
 *  dh [H]: in, the gradient of the new state h'; out, GRU: its direct share dh' * z of
 *          dh (the caller adds the W_hh part); LSTM: dh' (the caller overwrites it)
 *  dc [H] (LSTM): in, the gradient of c'; out, that of c
 *  dgates [4H]: the row of the dgates layout; dgh [G*H]: the gradient fed to W_hh. */
ATTN_INTERNAL void attn_rnn_gru_backward_row(int64_t hidden, const float *restrict gates,
                                             const float *restrict h_prev,
                                             const float *restrict dout, float *restrict dh,
                                             float *restrict dgates, float *restrict dgh);
ATTN_INTERNAL void attn_rnn_lstm_backward_row(int64_t hidden, const float *restrict gates,
                                              const float *restrict c_prev,
                                              const float *restrict dout, float *restrict dh,
                                              float *restrict dc, float *restrict dgates,
                                              float *restrict dgh);

#endif /* ATTN_RNN_INTERNAL_H */
