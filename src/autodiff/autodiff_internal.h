/* Helpers shared by the graph and the operations; not part of the public API. */
#ifndef ATTN_AUTODIFF_INTERNAL_H
#define ATTN_AUTODIFF_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_autodiff.h"
#include "kernels/quantized_rows.h"

/* A variable argument must be non-NULL with a value (checked by every operation). */
ATTN_INTERNAL attn_status attn_ad_check_var(const char *fn, const char *what, const attn_var *v);
/* Size of the last dimension (1 for a scalar) and the number of rows before it. */
ATTN_INTERNAL int64_t attn_ad_last_dim(const attn_var *v);
ATTN_INTERNAL int64_t attn_ad_rows(const attn_var *v);
ATTN_INTERNAL int attn_ad_same_shape(const attn_var *a, const attn_var *b);
/* "[2, 3, 4]" into buf (for messages). */
ATTN_INTERNAL const char *attn_ad_shape_text(const attn_var *v, char *buf, size_t size);

/* The gradient of var (NULL when var needs none) for a backward that writes every element
 * of it: *accumulate is 0 when nothing has reached var yet, and the buffer is then new and
 * uninitialised (write it: dx = ...), else 1 (add to it: dx += ...). Writing the first
 * contribution saves zeroing the buffer and reading the zeros back, a sizeable share of a
 * Transformer step's memory traffic; attn_graph_grad is this plus the zeroing. */
ATTN_INTERNAL attn_status attn_ad_grad_to_write(attn_graph *graph, attn_var *var, float **grad,
                                                int *accumulate);

/* For optional inputs (a bias, a second direction's weights): the value's data, or NULL for
 * a NULL variable; and its gradient (attn_graph_grad), or NULL for a NULL variable. */
ATTN_INTERNAL const float *attn_ad_optional_data(const attn_var *v);
ATTN_INTERNAL attn_status attn_ad_optional_grad(attn_graph *graph, attn_var *v, float **grad);

/* The precision an operation's GEMMs use: the graph's when it is bf16, else fp32 (int8 is a
 * precision of stored weights for decoding, not of a graph's products). */
ATTN_INTERNAL attn_precision attn_ad_product_precision(const attn_graph *graph);

/* A weight (a whole two-dimensional parameter of the store) packed in bf16 as a product's
 * op(B): trans ATTN_TRANS for W^T (x W^T, a linear layer's forward), ATTN_NO_TRANS for W (dy W,
 * its backward). Packed at first use and again after attn_params_values_changed, so once per
 * update and never per product. *out is NULL when weight is not such a parameter (the caller
 * then multiplies the plain way). */
ATTN_INTERNAL attn_status attn_ad_packed_weight(attn_params *store, const attn_var *weight,
                                                attn_transpose trans,
                                                const attn_gemm_packed_b **out);

/* A model held in bf16 or int8 for inference (attn_model_set_precision) hands its stored
 * matrices to its parameter store: table[id] for parameter id, with packed NULL where there is
 * none (vectors). NULL takes them back. The model owns the table and the store. */
ATTN_INTERNAL void attn_ad_params_set_stored(attn_params *store,
                                             const attn_quantized_matrix *table);
/* The stored matrix of weight (a whole parameter) when the graph runs at its precision, so
 * that its products multiply the stored values packed once at load; NULL otherwise. */
ATTN_INTERNAL const attn_quantized_matrix *attn_ad_stored_weight(attn_graph *graph,
                                                                 const attn_var *weight);
/* y [rows, out] (row stride ldy) = x [rows, in] (row stride ldx) W^T + bias (NULL: none) for
 * weight W [out, in]: on its stored matrix (attn_quantized_linear, as the Transformer's step
 * decoder) when attn_ad_stored_weight gives one, else a GEMM at the graph's product precision. */
ATTN_INTERNAL attn_status attn_ad_linear_rows(attn_graph *graph, int64_t rows, const float *x,
                                              int64_t ldx, const attn_var *weight,
                                              const float *bias, float *y, int64_t ldy);

/* How every operation ends when a gradient is wanted: copies the n_ctx_bytes at ctx (the
 * inputs and saved buffers its backward reads) into the arena, where they outlive the
 * operation's stack, and pushes the node for its outputs (attn_graph_record_outputs). */
ATTN_INTERNAL attn_status attn_ad_record(attn_graph *graph, int n_outputs, attn_var *const *outputs,
                                         attn_backward_fn backward, const void *ctx,
                                         size_t n_ctx_bytes, const char *name);

/* Memory-bound passes, threaded through attn_parallel_for with a split that depends only on
 * the size. They only stream memory, so one portable loop serves every instruction set. */
/* dst[i] += src[i] (accumulate 1) or dst[i] = src[i] (0; the bits adding to zeros gives) */
ATTN_INTERNAL void attn_ad_write_or_accumulate(int64_t n, const float *src, float *dst,
                                               int accumulate);
/* dst[0, n) = 0, split over the threads: zeroing gradients is a large share of a step's
 * otherwise serial work (attn_graph_grad, attn_params_zero_grad). */
ATTN_INTERNAL void attn_ad_zero(int64_t n, float *dst);
/* dst[i] = a[i] + b[i] */
ATTN_INTERNAL void attn_ad_add(int64_t n, const float *a, const float *b, float *dst);
/* Every row of dst [rows, cols] becomes a copy of row. */
ATTN_INTERNAL void attn_ad_fill_rows(int64_t rows, int64_t cols, const float *row, float *dst);
/* dst[c] += sum over r of src[r, c], each column summed in row order (in double). */
ATTN_INTERNAL void attn_ad_add_column_sums(int64_t rows, int64_t cols, const float *src,
                                           float *dst);

/* For a multi-head attention op: its index among the graph's attention ops since the reset
 * (counting on), and the observer to show its weights to (NULL: none). */
ATTN_INTERNAL int64_t attn_ad_next_attention_op(attn_graph *graph,
                                                attn_attention_observer *observer, void **ctx);

#endif /* ATTN_AUTODIFF_INTERNAL_H */
