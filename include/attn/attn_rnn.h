/* attn recurrent layers: GRU and LSTM with PyTorch's weight layout and gate order, as one
 * step (the decoder of an RNN encoder-decoder runs one step at a time) and as a layer over
 * a padded batch of sentences (the encoder), each with its backward.
 *
 * Backward functions ACCUMULATE into their gradient outputs (see attn_core.h).
 */
#ifndef ATTN_RNN_H
#define ATTN_RNN_H

#include "attn/attn_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- cells and parameters ----------------------------------------------------------- */

/* With input x [I], state h [H] (and, for LSTM, the cell c [H]), as torch.nn.GRUCell and
 * torch.nn.LSTMCell, sigma the logistic function:
 *
 *   GRU (gates r, z, n: G = 3)
 *     r  = sigma(W_ir x + b_ir + W_hr h + b_hr)
 *     z  = sigma(W_iz x + b_iz + W_hz h + b_hz)
 *     n  = tanh(W_in x + b_in + r * (W_hn h + b_hn))
 *     h' = (1 - z) * n + z * h
 *
 *   LSTM (gates i, f, g, o: G = 4)
 *     i = sigma(W_ii x + b_ii + W_hi h + b_hi)     f = sigma(... f rows ...)
 *     g = tanh(W_ig x + b_ig + W_hg h + b_hg)      o = sigma(... o rows ...)
 *     c' = f * c + i * g,  h' = o * tanh(c')
 */
typedef enum attn_rnn_cell { ATTN_RNN_GRU = 0, ATTN_RNN_LSTM = 1 } attn_rnn_cell;

/* PyTorch's layout: the gates' rows stacked in the order above (weight_ih_l0 of nn.GRU is
 * [W_ir; W_iz; W_in]). Either bias may be NULL (none; PyTorch's bias=False drops both). */
typedef struct attn_rnn_params {
    const float *weight_ih; /* [G*H, I] */
    const float *weight_hh; /* [G*H, H] */
    const float *bias_ih;   /* [G*H] or NULL */
    const float *bias_hh;   /* [G*H] or NULL */
} attn_rnn_params;

/* Gradients with the layout of the parameters; each accumulates, NULL skips it. */
typedef struct attn_rnn_grads {
    float *weight_ih;
    float *weight_hh;
    float *bias_ih;
    float *bias_hh;
} attn_rnn_grads;

/* Shared by cells and layers:
 *  - No call allocates. A forward writes what its backward needs into the caller's `saved`
 *    buffer (attn_rnn_*_saved_floats floats: keep one per step or layer for training); both
 *    directions use a scratch `workspace` (attn_rnn_*_workspace_floats floats, reusable).
 *    Each buffer is split into parts that start on 64-byte boundaries when the buffer does
 *    (attn_aligned_alloc), which the GEMMs prefer.
 *  - batch = 0 (and seq_len = 0) are allowed; input_size and hidden_size must be >= 1.
 *  - ATTN_ISA_REFERENCE runs scalar loops in double (no GEMM). The other instruction sets
 *    run every matrix product through attn_gemm and the element-wise gate math in float,
 *    threaded over the batch, with the float tanh of the attention kernels (sigma(x) =
 *    (1 + tanh(x / 2)) / 2); the forward gate math is vectorised for AVX2 and AVX-512 (7x
 *    faster than plain C), the backward's (no transcendental functions, a few percent of
 *    the step's GEMMs) is plain C for all of them.
 *    The saved buffer has one layout for every instruction set. */

/* ---- one step ----------------------------------------------------------------------- */

typedef struct attn_rnn_cell_dims {
    attn_rnn_cell cell;
    int64_t batch;       /* B */
    int64_t input_size;  /* I */
    int64_t hidden_size; /* H */
} attn_rnn_cell_dims;

/* 0 when the dims are invalid. */
ATTN_API size_t attn_rnn_cell_saved_floats(const attn_rnn_cell_dims *dims);
ATTN_API size_t attn_rnn_cell_workspace_floats(const attn_rnn_cell_dims *dims);

/* x [B, I], h [B, H] (NULL = zeros), c [B, H] (LSTM; NULL = zeros) -> h_out [B, H] and, for
 * LSTM, c_out [B, H] (may be NULL when not wanted). h_out may be h and c_out may be c (the
 * state updated in place); nothing else may overlap. saved keeps a copy of h and c, so the
 * backward needs neither. */
ATTN_API attn_status attn_rnn_cell_forward(const attn_rnn_cell_dims *dims,
                                           const attn_rnn_params *params, const float *x,
                                           const float *h, const float *c, float *h_out,
                                           float *c_out, float *saved, float *workspace);

/* From dh_out [B, H] and dc_out [B, H] (LSTM; each NULL = zero), accumulates dx [B, I],
 * dh [B, H], dc [B, H] (LSTM) and the parameter gradients; any may be NULL. x and saved
 * are the forward's. */
ATTN_API attn_status attn_rnn_cell_backward(const attn_rnn_cell_dims *dims,
                                            const attn_rnn_params *params, const float *x,
                                            const float *saved, const float *dh_out,
                                            const float *dc_out, float *workspace, float *dx,
                                            float *dh, float *dc, const attn_rnn_grads *grads);

/* ---- a layer over a padded batch ---------------------------------------------------- */

/* x [B, T, I] batch-first, sentence b holding lengths[b] real tokens (0 <= lengths[b] <= T)
 * followed by padding, as torch.nn.GRU / nn.LSTM (batch_first=True) given
 * pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False):
 *  - the forward direction runs t = 0 .. lengths[b] - 1; the reverse direction runs from
 *    each sentence's own last real token t = lengths[b] - 1 down to 0;
 *  - output [b, t] = the state after token t; padding positions get zeros;
 *  - the final state h_n[b] (c_n[b]) is the state after the last token processed; a
 *    sentence of length 0 keeps its initial state.
 * The padding of x is read by the input GEMM (its values have no effect) and must be
 * finite, as zeros are.
 *
 * output_stride (floats between output[b, t] and output[b, t + 1]; 0 means H) lets the
 * two directions of a bidirectional layer share one [B, T, 2H] buffer: the forward
 * direction writes output + 0, the reverse one output + H, both with output_stride 2H. The
 * output gradient is read with the same stride.
 *
 * The work: ONE GEMM projects the input of all B * T positions, then each time step is one
 * GEMM h W_hh^T over the sentences still running (sorted by length once, longest first,
 * ties by index, so that they form a prefix) and the fused gate math. The backward runs
 * the same steps in reverse, and finishes with one GEMM each for dx and dW_ih over all
 * gate gradients, and for dW_hh over the saved states (two for GRU, whose n rows take
 * r * dn). */
typedef struct attn_rnn_layer_dims {
    attn_rnn_cell cell;
    int64_t batch;         /* B */
    int64_t seq_len;       /* T */
    int64_t input_size;    /* I */
    int64_t hidden_size;   /* H */
    int reverse;           /* nonzero: the reverse direction */
    int64_t output_stride; /* 0 = H; else >= H */
    /* Operands of the products over all positions (the input projection, dx, dW_ih, dW_hh):
     * fp32 or bf16 (attn_gemm_precision; the sums stay fp32). The per-step recurrent product
     * h W_hh^T stays fp32: few rows, where rounding the weight each step would cost more
     * than it saves, and an error there would compound over the steps. The reference
     * instruction set computes everything in double. */
    attn_precision precision;
} attn_rnn_layer_dims;

/* 0 when the dims are invalid. The saved buffer holds, per position, the gates (GRU r, z,
 * n and W_hn h + b_hn; LSTM i, f, g, o and tanh(c')) and the state before the step
 * (h, and c for LSTM): about B * T * 5H floats for GRU and 7H for LSTM. The workspace
 * holds the gate gradients of every position (B * T * 4H) and a few [B, G*H] rows. */
ATTN_API size_t attn_rnn_layer_saved_floats(const attn_rnn_layer_dims *dims);
ATTN_API size_t attn_rnn_layer_workspace_floats(const attn_rnn_layer_dims *dims);

/* lengths [B] (NULL = every sentence has T tokens); h0, c0 [B, H] initial states (NULL =
 * zeros; c0 for LSTM only); output [B, T, output_stride] (required); h_n, c_n [B, H]
 * final states (NULL = not wanted; c_n for LSTM only). Outputs must not overlap inputs or
 * buffers. */
ATTN_API attn_status attn_rnn_layer_forward(const attn_rnn_layer_dims *dims,
                                            const attn_rnn_params *params, const float *x,
                                            const int64_t *lengths, const float *h0,
                                            const float *c0, float *output, float *h_n, float *c_n,
                                            float *saved, float *workspace);

/* From doutput [B, T, output_stride] (read at real positions only), dh_n and dc_n [B, H]
 * (each NULL = zero), accumulates dx [B, T, I] (nothing at padding), dh0, dc0 [B, H] and the
 * parameter gradients; any may be NULL. x, lengths and saved are the forward's. */
ATTN_API attn_status attn_rnn_layer_backward(const attn_rnn_layer_dims *dims,
                                             const attn_rnn_params *params, const float *x,
                                             const int64_t *lengths, const float *saved,
                                             const float *doutput, const float *dh_n,
                                             const float *dc_n, float *workspace, float *dx,
                                             float *dh0, float *dc0, const attn_rnn_grads *grads);

/* ---- stacking and bidirectionality -------------------------------------------------- */

/* torch.nn.GRU / nn.LSTM(input_size, H, num_layers=L, bidirectional=True, batch_first=True)
 * over packed sentences is composed from layers; parameter k of direction d is
 * weight_ih_l{k}{suffix} etc., suffix "" for d = 0 and "_reverse" for d = 1, and torch's
 * h_0 / h_n [L * 2, B, H] holds layer k direction d at index 2k + d.
 *
 *   forward: for k = 0 .. L-1, with in_k = x (I features) for k = 0, else out_{k-1}:
 *     attn_rnn_layer_forward(dims{reverse = 0, input_size = I_k, output_stride = 2H},
 *                            params_k_0, in_k, lengths, h0[2k], ..., out_k + 0, h_n[2k], ...)
 *     attn_rnn_layer_forward(dims{reverse = 1, ...}, params_k_1, in_k, lengths, h0[2k+1],
 *                            ..., out_k + H, h_n[2k+1], ...)
 *     with out_k [B, T, 2H], I_0 = I and I_k = 2H after, and one saved buffer per layer and
 *     direction. out_{L-1} is torch's padded output (zeros at padding).
 *   backward: zero d_out_k [B, T, 2H] for k < L-1 (d_out_{L-1} is the loss gradient), then
 *     for k = L-1 .. 0 and both directions: attn_rnn_layer_backward(..., doutput =
 *     d_out_k + d * H, dh_n[2k + d], ..., dx = (k > 0 ? d_out_{k-1} : dx), dh0[2k + d], ...):
 *     both directions accumulate into the same dx.
 * One direction only (bidirectional=False) is the same with output_stride H and index k.
 * Dropout between layers is not applied. */

#ifdef __cplusplus
}
#endif

#endif /* ATTN_RNN_H */
