/* attn autodiff: the parameter store and the tape (layer 2).
 *
 * Parameters. A model registers every parameter by name (PyTorch's state_dict names where a
 * counterpart exists), shape and initialiser, then finalises the store. Finalising lays all
 * parameters out in ONE contiguous float buffer, each starting at a 64-byte aligned offset,
 * and allocates three more buffers of exactly the same layout: gradients and Adam's first
 * and second moments. So zeroing every gradient is one memset, an optimizer step is one loop
 * over four parallel arrays, and a checkpoint is one file write.
 *
 * The tape. A graph owns an arena that holds everything one step creates: variables, their
 * values and gradients, saved buffers and the tape itself. attn_graph_reset frees it all at
 * once and keeps the memory, so after the first step a training loop allocates nothing.
 * Operations (attn_op_*) run eagerly. While the graph records and an input requires a
 * gradient, an operation also pushes a node (its backward function and context) on the
 * tape; attn_graph_backward walks the nodes in reverse. Operations are coarse (a whole
 * multi-head attention, a residual add fused into its layer norm, a whole loss), so the tape
 * stays short. With recording off (inference) no node and no saved buffer is made.
 *
 * Gradients accumulate: a variable used twice gets the sum, and parameter gradients add up
 * in the store's gradient buffer across backward passes until attn_params_zero_grad.
 *
 * Variables never change after the operation that made them returns: every operation
 * writes a fresh output, which is what lets a backward read its inputs later.
 */
#ifndef ATTN_AUTODIFF_H
#define ATTN_AUTODIFF_H

#include "attn/attn_core.h"
#include "attn/attn_attention.h"
#include "attn/attn_kernels.h"
#include "attn/attn_rnn.h"
#include "attn/attn_tensor_file.h"

#include <signal.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- initialisers ------------------------------------------------------------------- */

typedef enum attn_init_kind {
    ATTN_INIT_ZEROS = 0,
    ATTN_INIT_ONES = 1,
    ATTN_INIT_NORMAL = 2,        /* N(0, scale^2) */
    ATTN_INIT_UNIFORM = 3,       /* U(-scale, scale) */
    /* U(-a, a), a = scale * sqrt(6 / (fan_in + fan_out)) (scale is the gain), fans as
     * torch.nn.init: fan_out = shape[0] * r, fan_in = shape[1] * r, r = product of the
     * remaining dimensions; needs at least 2 dimensions. */
    ATTN_INIT_XAVIER_UNIFORM = 4
} attn_init_kind;

typedef struct attn_init {
    attn_init_kind kind;
    float scale;
} attn_init;

ATTN_API attn_init attn_init_zeros(void);
ATTN_API attn_init attn_init_ones(void);
ATTN_API attn_init attn_init_normal(float std);
ATTN_API attn_init attn_init_uniform(float bound);
ATTN_API attn_init attn_init_xavier_uniform(float gain);

/* ---- parameter store ---------------------------------------------------------------- */

typedef struct attn_params attn_params;

/* A parameter's index in its store, in registration order. */
typedef int32_t attn_param_id;

/* The four buffers of a finalised store, all with the same layout. */
typedef enum attn_param_buffer {
    ATTN_PARAM_VALUES = 0,
    ATTN_PARAM_GRADS = 1,
    ATTN_PARAM_ADAM_M = 2,
    ATTN_PARAM_ADAM_V = 3
} attn_param_buffer;

typedef struct attn_param_info {
    const char *name; /* valid while the store lives */
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t numel;
    size_t offset; /* in floats from the start of each buffer; a multiple of 16 */
    attn_init init;
} attn_param_info;

ATTN_API attn_status attn_params_create(attn_params **out);
/* Frees the store and its buffers; NULL is ignored. */
ATTN_API void attn_params_destroy(attn_params *store);

/* Registers a parameter before finalising. The name (non-empty, unique, UTF-8 as given) is
 * copied; ndim is 1..ATTN_MAX_DIMS with positive dimensions. id may be NULL. */
ATTN_API attn_status attn_params_add(attn_params *store, const char *name, int ndim,
                                     const int64_t *shape, attn_init init, attn_param_id *id);
/* Allocates the four buffers, all zero. No parameter can be added afterwards. A store with
 * no parameter is fine. */
ATTN_API attn_status attn_params_finalize(attn_params *store);
ATTN_API int attn_params_is_finalized(const attn_params *store);

/* Fills every value from its initialiser. Each parameter draws from its own generator,
 * seeded from (seed, name), so a parameter's initial value does not depend on which other
 * parameters exist or their order. Leaves gradients and moments alone. */
ATTN_API attn_status attn_params_init(attn_params *store, uint64_t seed);

ATTN_API size_t attn_params_count(const attn_params *store);
/* Sum of the parameters' element counts (without the alignment padding). */
ATTN_API int64_t attn_params_numel(const attn_params *store);
/* Length in floats of each buffer (with the padding, which stays zero). */
ATTN_API size_t attn_params_buffer_floats(const attn_params *store);
/* The start of one buffer (NULL before finalising). */
ATTN_API float *attn_params_buffer(const attn_params *store, attn_param_buffer which);

/* ATTN_ERR_INVALID_ARGUMENT naming the parameter when there is none of that name. */
ATTN_API attn_status attn_params_find(const attn_params *store, const char *name,
                                      attn_param_id *id);
ATTN_API attn_status attn_params_info(const attn_params *store, attn_param_id id,
                                      attn_param_info *info);
/* The parameter's slice of one buffer (NULL for a bad id or before finalising). */
ATTN_API float *attn_params_data(const attn_params *store, attn_param_id id,
                                 attn_param_buffer which);

/* Says that the values were written (an optimizer step): the bf16 copies of weights that
 * products in bf16 pack once per update (see attn_graph_set_precision) are repacked at their
 * next use. attn_params_init and attn_params_load say it themselves; whoever else writes the
 * values buffer must call it before the next bf16 product, or that product reads the old
 * weights. */
ATTN_API void attn_params_values_changed(attn_params *store);

/* Sets every gradient to zero (one memset). */
ATTN_API void attn_params_zero_grad(attn_params *store);

/* Describes every parameter's slice of one buffer as tensors to write: out[count] gets
 * name = prefix + parameter name (prefix may be NULL or ""), F32, the shape, and data in
 * that buffer. The names stay valid until the next call for the same buffer or the store's
 * destruction, so a checkpoint can write values and moments together in one
 * attn_tensor_file_write. */
ATTN_API attn_status attn_params_tensors(attn_params *store, attn_param_buffer which,
                                         const char *prefix, attn_named_tensor *out,
                                         size_t capacity);
/* Writes every value (names without prefix) and the metadata as one safetensors file. */
ATTN_API attn_status attn_params_save(attn_params *store, const char *path,
                                      const attn_metadata_entry *metadata, size_t n_metadata);
/* Reads every parameter (prefix + name) of one buffer from a file: F32, F16, BF16 or F64,
 * of exactly the parameter's shape. A missing parameter or a wrong shape or dtype is
 * ATTN_ERR_FORMAT naming it, and then the buffer may be partly overwritten. So is a value
 * that is not finite, or a negative Adam second moment (ATTN_PARAM_ADAM_V): no run writes
 * them, and training or decoding from them only turns every later number into NaN. Tensors in
 * the file that are not parameters are ignored (a checkpoint also holds optimizer state). */
ATTN_API attn_status attn_params_load(attn_params *store, const attn_tensor_file *file,
                                      attn_param_buffer which, const char *prefix);

/* ---- graph and variables ----------------------------------------------------------- */

typedef struct attn_graph attn_graph;

/* A value on the graph: a contiguous view into the graph's arena (or into the parameter
 * store, or caller memory for constants), and its gradient. */
typedef struct attn_var {
    attn_tensor value;
    /* Same shape as value. NULL until the backward reaches the variable (allocated then and
     * zeroed); a parameter's points into the store's gradient buffer. */
    float *grad;
    int requires_grad;
} attn_var;

/* A graph for one store (NULL: a graph without parameters). Defaults: recording on,
 * training on (dropout active), dropout seed 0 at step 0. */
ATTN_API attn_status attn_graph_create(attn_params *store, attn_graph **out);
/* NULL is ignored. */
ATTN_API void attn_graph_destroy(attn_graph *graph);
/* The store the graph was created for (NULL if none). */
ATTN_API attn_params *attn_graph_params(const attn_graph *graph);
/* Forgets every variable and node (their pointers become invalid) and keeps the memory for
 * the next step (see attn_graph_memory_peak). Restarts the count of dropout operations (see
 * attn_graph_set_dropout_seed). */
ATTN_API void attn_graph_reset(attn_graph *graph);

/* Recording off: operations push nothing and their outputs never require a gradient
 * (inference). */
ATTN_API void attn_graph_set_recording(attn_graph *graph, int on);
ATTN_API int attn_graph_is_recording(const attn_graph *graph);
/* Training off: dropout passes its input through (evaluation and inference). */
ATTN_API void attn_graph_set_training(attn_graph *graph, int on);
ATTN_API int attn_graph_is_training(const attn_graph *graph);
/* The precision of the operands of the graph's products (see attn_precision; fp32 when the
 * graph is created); attn_graph_reset keeps it. The operations read it when they run. */
ATTN_API void attn_graph_set_precision(attn_graph *graph, attn_precision precision);
ATTN_API attn_precision attn_graph_precision(const attn_graph *graph);
/* While *flag is non-zero (a signal handler may set it), every operation and every step of
 * the backward fails with ATTN_ERR_CANCELLED, so a long step ends within one operation.
 * NULL (the default) removes it; attn_graph_reset keeps it. */
ATTN_API void attn_graph_set_cancel_flag(attn_graph *graph, const volatile sig_atomic_t *flag);
/* The k-th dropout operation after a reset draws its mask from (seed, step, k) only, so a
 * training run that sets the step before each step draws the same masks when resumed. */
ATTN_API void attn_graph_set_dropout_seed(attn_graph *graph, uint64_t seed, uint64_t step);

/* Watching attention. While an observer is set, every multi-head attention operation on the
 * graph also computes its attention weights and calls observer(ctx, index, weights, batch,
 * heads, len_q, len_k) before it returns: index counts the graph's attention operations
 * since the last reset, from 0, in the order they run; weights [batch, heads, len_q, len_k]
 * are the probabilities of each head (a query that sees no key has zeros), valid during the
 * call only. A status other than ATTN_OK fails the operation with it (and a message). The
 * weights cost an extra pass over the scores and memory of their size in the arena: observe
 * one sentence to look at it (attn_model_attention_weights), not a training run. NULL
 * removes it; attn_graph_reset keeps it. */
typedef attn_status (*attn_attention_observer)(void *ctx, int64_t index, const float *weights,
                                               int64_t batch, int64_t heads, int64_t len_q,
                                               int64_t len_k);
ATTN_API void attn_graph_set_attention_observer(attn_graph *graph,
                                                attn_attention_observer observer, void *ctx);

/* Watching the backward, so that data-parallel training can start summing a gradient over
 * processes while the backward still runs. While an observer is set, attn_graph_backward calls
 * observer(ctx, remaining) once before the first node (remaining = attn_graph_node_count) and
 * after each node (remaining = the nodes still to run, 0 after the last). The gradient of
 * parameter id is final once remaining <= attn_graph_param_first_node(graph, id): only nodes
 * pushed after the step first read a parameter can add to its gradient. A status other than
 * ATTN_OK stops the backward with it. NULL removes it; attn_graph_reset keeps it. */
typedef attn_status (*attn_backward_observer)(void *ctx, size_t remaining);
ATTN_API void attn_graph_set_backward_observer(attn_graph *graph, attn_backward_observer observer,
                                               void *ctx);
/* The tape's length when the step (since the last reset) first read parameter id through
 * attn_graph_param while recording; SIZE_MAX when it has not read it (its gradient is final
 * throughout the backward). */
ATTN_API size_t attn_graph_param_first_node(const attn_graph *graph, attn_param_id id);

/* Bytes in use now, and the most in use in one step, in the graph's arena. When a step
 * outgrows the arena, the next reset replaces it with one block 25% larger than that step
 * needed (and the peak starts over), so once the largest batch has been seen no step
 * allocates. */
ATTN_API size_t attn_graph_memory_used(const attn_graph *graph);
ATTN_API size_t attn_graph_memory_peak(const attn_graph *graph);
/* Nodes on the tape now. */
ATTN_API size_t attn_graph_node_count(const attn_graph *graph);

/* A parameter as a variable: value and gradient are views into the store (which must be
 * finalised); requires_grad follows recording. */
ATTN_API attn_status attn_graph_param(attn_graph *graph, attn_param_id id, attn_var **out);
/* A new variable of the given shape (ndim 0..ATTN_MAX_DIMS, dimensions >= 0) in the arena,
 * its value copied from data (or zero-filled when data is NULL). requires_grad (0 or 1)
 * makes it a leaf whose gradient the backward fills in (when recording). */
ATTN_API attn_status attn_graph_input(attn_graph *graph, int ndim, const int64_t *shape,
                                      const float *data, int requires_grad, attn_var **out);

/* Backward from a scalar loss (one element): seeds d(loss) = 1 and runs every node in
 * reverse order. Nodes whose output no gradient reached are skipped. */
ATTN_API attn_status attn_graph_backward(attn_graph *graph, attn_var *loss);
/* The same from any variable with a given gradient of its shape (copied). */
ATTN_API attn_status attn_graph_backward_from(attn_graph *graph, attn_var *output,
                                              const float *grad_output);

/* ---- writing an operation ---------------------------------------------------------- */

/* What ops_*.c use, and what a new operation elsewhere (e.g. an RNN cell) needs:
 *   1. check the inputs; 2. attn_graph_new_var for the output; 3. compute it;
 *   4. if attn_graph_wants_grad(inputs), store a context (attn_graph_alloc) holding the
 *      inputs and anything saved, and attn_graph_record(output, backward, context).
 * A backward function gets the output (its grad is set) and the context, and adds into
 * each input's gradient, obtained with attn_graph_grad (NULL: that input needs none). */
typedef attn_status (*attn_backward_fn)(attn_graph *graph, const attn_var *output, void *ctx);

/* Arena memory for the current step, 64-byte aligned; NULL with attn_last_error set. */
ATTN_API void *attn_graph_alloc(attn_graph *graph, size_t bytes);
ATTN_API float *attn_graph_alloc_floats(attn_graph *graph, size_t count);
/* A new variable with an uninitialised value; requires_grad 0 or 1 (forced to 0 when not
 * recording). */
ATTN_API attn_status attn_graph_new_var(attn_graph *graph, int ndim, const int64_t *shape,
                                        int requires_grad, attn_var **out);
/* 1 if the graph records and any of the n inputs (NULL entries are skipped) requires a
 * gradient. */
ATTN_API int attn_graph_wants_grad(const attn_graph *graph, int n, attn_var *const *inputs);
/* Pushes a node; name (a string literal) is kept for error messages. */
ATTN_API attn_status attn_graph_record(attn_graph *graph, attn_var *output,
                                       attn_backward_fn backward, void *ctx, const char *name);
/* A node with several outputs (e.g. an RNN layer's outputs and final state): it runs when a
 * gradient reached any of them, with outputs[0] as its output argument; the backward finds
 * the others in its context, and an output whose grad is still NULL had zero gradient. */
ATTN_API attn_status attn_graph_record_outputs(attn_graph *graph, int n_outputs,
                                               attn_var *const *outputs,
                                               attn_backward_fn backward, void *ctx,
                                               const char *name);
/* The variable's gradient buffer, allocated and zeroed on first use; *grad = NULL when the
 * variable requires no gradient. */
ATTN_API attn_status attn_graph_grad(attn_graph *graph, attn_var *var, float **grad);
/* Draws the seed of the next dropout mask (see attn_graph_set_dropout_seed). */
ATTN_API uint64_t attn_graph_next_dropout_seed(attn_graph *graph);

/* ---- operations ---------------------------------------------------------------------- */

/* Every operation checks its inputs (NULL, shapes, ranges: ATTN_ERR_INVALID_ARGUMENT naming
 * the operation and the argument), writes a new output variable to *out, and records
 * itself when a gradient is wanted. Integer inputs (ids, targets, lengths) are copied, so
 * the caller's arrays need not outlive the call. "[..., n]" means any leading dimensions. */

/* out [..., out_features] = x [..., in_features] W^T + b, W [out_features, in_features]
 * (PyTorch's layout), b [out_features] or NULL. A tied output projection passes the
 * embedding table as W. */
ATTN_API attn_status attn_op_linear(attn_graph *graph, attn_var *x, attn_var *weight,
                                    attn_var *bias, attn_var **out);
/* out [rows, cols, dim] = table[ids[r * ids_stride + c]] * scale, table [vocab, dim]; ids
 * outside [0, vocab) are an error. ids_stride >= cols lets a column slice of a wider array
 * (a decoder's input, the target without its last column) be read in place. */
ATTN_API attn_status attn_op_embedding(attn_graph *graph, attn_var *table, int64_t rows,
                                       int64_t cols, const int32_t *ids, int64_t ids_stride,
                                       float scale, attn_var **out);
/* out = a + b, same shapes. */
ATTN_API attn_status attn_op_add(attn_graph *graph, attn_var *a, attn_var *b, attn_var **out);
/* out[b, t, :] = x[b, t, :] + table[t, :] for x [B, T, D] and a constant table of at least
 * T rows of D (e.g. sinusoidal positions; it must outlive the graph's step). */
ATTN_API attn_status attn_op_add_position_table(attn_graph *graph, attn_var *x,
                                                const float *table, int64_t table_rows,
                                                attn_var **out);
/* Layer norm over the last dimension; gamma and beta [D]: both, gamma alone (no bias), or
 * neither. */
ATTN_API attn_status attn_op_layer_norm(attn_graph *graph, attn_var *x, attn_var *gamma,
                                        attn_var *beta, float eps, attn_var **out);
/* layer_norm(x + residual): a post-norm sublayer's residual connection in one node. */
ATTN_API attn_status attn_op_add_layer_norm(attn_graph *graph, attn_var *x, attn_var *residual,
                                            attn_var *gamma, attn_var *beta, float eps,
                                            attn_var **out);
/* RMSNorm over the last dimension (attn_rms_norm_forward); gamma [D] or NULL. */
ATTN_API attn_status attn_op_rms_norm(attn_graph *graph, attn_var *x, attn_var *gamma, float eps,
                                      attn_var **out);
/* out = a * b element-wise, same shapes, a and b different variables (a SwiGLU's gate times
 * its up projection). */
ATTN_API attn_status attn_op_mul(attn_graph *graph, attn_var *a, attn_var *b, attn_var **out);
/* Element-wise activation (attn_activation). */
ATTN_API attn_status attn_op_activation(attn_graph *graph, attn_var *x, attn_activation act,
                                        attn_var **out);
/* Inverted dropout with probability p in [0, 1). When the graph is not training, or
 * p = 0, *out = x itself (no copy, no node). */
ATTN_API attn_status attn_op_dropout(attn_graph *graph, attn_var *x, float p, attn_var **out);

/* Multi-head attention parameters as variables (PyTorch's nn.MultiheadAttention names):
 * in_proj_weight [3E, E], in_proj_bias [3E] or NULL, out_proj_weight [E, E],
 * out_proj_bias [E] or NULL. */
typedef struct attn_mha_vars {
    attn_var *in_proj_weight;
    attn_var *in_proj_bias;
    attn_var *out_proj_weight;
    attn_var *out_proj_bias;
} attn_mha_vars;

/* Which keys a query may see. key_lengths [B] (NULL: all): key j of batch row b is padding
 * when j >= key_lengths[b] (0 <= key_lengths[b] <= Lk). causal: key j is hidden from query
 * i when j > i. A query that sees no key gets the output projection's bias. */
typedef struct attn_attention_mask {
    const int32_t *key_lengths;
    int causal;
} attn_attention_mask;

/* out [B, Lq, E] = multi-head attention (attn_mha_forward) of query [B, Lq, E] over key and
 * value [B, Lk, E]. Pass the same variable as query, key and value for self-attention (one
 * fused QKV projection) and as key and value for cross-attention (one fused KV projection).
 * mask may be NULL. No dropout on the attention weights. */
ATTN_API attn_status attn_op_multi_head_attention(attn_graph *graph, const attn_mha_vars *params,
                                                  int64_t num_heads, attn_var *query,
                                                  attn_var *key, attn_var *value,
                                                  const attn_attention_mask *mask,
                                                  attn_var **out);
/* The same with rotary positions (attn_rope_rotate with base rope_base > 0, in the "rotate
 * half" layout): each head's projected q and k turn by their position in the sequence
 * (query row t and key row t at position t) before the attention; the backward turns their
 * gradients back. For self-attention (E / num_heads must be even). */
ATTN_API attn_status attn_op_multi_head_attention_rotary(attn_graph *graph,
                                                         const attn_mha_vars *params,
                                                         int64_t num_heads, double rope_base,
                                                         attn_var *query, attn_var *key,
                                                         attn_var *value,
                                                         const attn_attention_mask *mask,
                                                         attn_var **out);

/* The mean over non-ignored rows of the cross-entropy of logits [..., V] against targets
 * (one per row), with label smoothing (attn_cross_entropy_forward); *out is a scalar
 * (ndim 0). No counted row gives a loss of 0 and zero gradients. */
ATTN_API attn_status attn_op_cross_entropy(attn_graph *graph, attn_var *logits,
                                           const int32_t *targets, int32_t ignore_index,
                                           float smoothing, attn_var **out);
/* Token-level knowledge distillation (Hinton et al. 2015; Kim and Rush 2016's word level):
 * the mean over non-ignored rows of
 *   (1 - teacher_weight) * the loss above + teacher_weight * H(teacher[r], softmax(logits[r])),
 * the second term the cross-entropy against the teacher's distribution over the classes
 * (attn_soft_cross_entropy_forward), teacher [rows, V] read during this call only.
 * teacher_weight in [0, 1]; with teacher NULL (or weight 0) it is attn_op_cross_entropy to the
 * bit. */
ATTN_API attn_status attn_op_cross_entropy_with_teacher(attn_graph *graph, attn_var *logits,
                                                        const int32_t *targets,
                                                        int32_t ignore_index, float smoothing,
                                                        const float *teacher,
                                                        float teacher_weight, attn_var **out);
/* out [B, D] = mean of x[b, t, :] over t < lengths[b] for x [B, T, D]
 * (0 <= lengths[b] <= T; a length of 0 gives zeros). */
ATTN_API attn_status attn_op_mean_pool(attn_graph *graph, attn_var *x, const int32_t *lengths,
                                       attn_var **out);

/* ---- pieces of RNN encoder-decoders (ops_rnn.c; ops_basic.c, ops_attention.c) ------ */

/* Pieces of RNN encoder-decoders. Lengths and positions are int32 like the model batches;
 * a "row" is one sentence of the batch (x [..., n] has rows = the product of its leading
 * dimensions). Operations with two outputs (an LSTM's state and cell; an attention's
 * context and weights) differentiate through both. */

/* One direction of a recurrent layer, or one cell, in PyTorch's layout (attn_rnn.h):
 * weight_ih [G*H, I], weight_hh [G*H, H], bias_ih and bias_hh [G*H] or both NULL. */
typedef struct attn_rnn_vars {
    attn_var *weight_ih;
    attn_var *weight_hh;
    attn_var *bias_ih;
    attn_var *bias_hh;
} attn_rnn_vars;

/* out [B, T, H] (reverse NULL) or [B, T, 2H] (bidirectional: the forward direction's
 * states in [..., 0:H], the reverse direction's in [..., H:2H]) = a recurrent layer over the
 * padded sentences x [B, T, I] from zero initial states (attn_rnn_layer_forward);
 * lengths [B] in [0, T] (NULL: all T). Padding positions of out are zero. */
ATTN_API attn_status attn_op_rnn_layer(attn_graph *graph, attn_rnn_cell cell,
                                       const attn_rnn_vars *forward, const attn_rnn_vars *reverse,
                                       attn_var *x, const int32_t *lengths, attn_var **out);

/* One step (attn_rnn_cell_forward): x [..., I] with B rows, h [B, H] (NULL: zeros) and, for
 * LSTM, c [B, H] (NULL: zeros) give h_out [B, H] and, for LSTM, c_out [B, H] (c_out must be
 * non-NULL for LSTM; for GRU c must be NULL and *c_out, if given, is set to NULL). */
ATTN_API attn_status attn_op_rnn_cell(attn_graph *graph, attn_rnn_cell cell,
                                      const attn_rnn_vars *params, attn_var *x, attn_var *h,
                                      attn_var *c, attn_var **h_out, attn_var **c_out);

/* out = the n >= 1 inputs side by side along the last dimension: every input has the same
 * number of rows; out has the first input's leading dimensions. */
ATTN_API attn_status attn_op_concat(attn_graph *graph, int n, attn_var *const *inputs,
                                    attn_var **out);
/* out [B, n, D] from n >= 1 inputs of B rows of D each (the steps of a decoder). */
ATTN_API attn_status attn_op_stack(attn_graph *graph, int64_t n, attn_var *const *inputs,
                                   attn_var **out);
/* out [B, count] = x[b, positions[b], first .. first + count - 1] for x [B, T, D];
 * positions[b] in [-1, T), -1 giving a row of zeros (e.g. the last state of an empty
 * sentence). */
ATTN_API attn_status attn_op_gather_positions(attn_graph *graph, attn_var *x,
                                              const int32_t *positions, int64_t first,
                                              int64_t count, attn_var **out);

/* Additive attention parameters (attn_additive_params): w_query [da, ds], bias [da] or NULL,
 * v [da]. The keys W_h h_j are projected once per sentence, e.g. by attn_op_linear with W_h
 * [da, dh] and no bias. */
typedef struct attn_additive_vars {
    attn_var *w_query;
    attn_var *bias;
    attn_var *v;
} attn_additive_vars;

/* One decoder step of additive attention (attn_additive_forward): query [B, ds], keys
 * [B, S, da], values [B, S, dv] (may be the same variable as keys when the sizes agree);
 * key_lengths [B] in [0, S] (NULL: all S) hide positions j >= key_lengths[b]. context
 * [B, dv]; weights [B, S] (pass NULL if not wanted). */
ATTN_API attn_status attn_op_additive_attention(attn_graph *graph,
                                                const attn_additive_vars *params,
                                                attn_var *query, attn_var *keys,
                                                attn_var *values, const int32_t *key_lengths,
                                                attn_var **context, attn_var **weights);

/* Luong attention parameters (attn_luong_params), those of the score and alignment in use:
 * w (general [ds, dk]; concat [da, ds + dk]), v [da] (concat), w_p [dp, ds] and v_p [dp]
 * (local-p); the others NULL. */
typedef struct attn_luong_vars {
    attn_var *w;
    attn_var *v;
    attn_var *w_p;
    attn_var *v_p;
} attn_luong_vars;

/* Concat scores only, once per sentence: keys [B, S, da] = W_2 annotations[b, j] for
 * annotations [B, S, dk] and w = [W_1 | W_2] [da, ds + dk] (attn_luong_project_keys). */
ATTN_API attn_status attn_op_luong_project_keys(attn_graph *graph, attn_var *annotations,
                                                attn_var *w, attn_var **keys);

/* One decoder step of Luong attention (attn_luong_forward) with the given score, alignment
 * and window D (local only): query [B, ds]; keys [B, S, dk] (dot, general: the annotations)
 * or [B, S, da] (concat: attn_op_luong_project_keys); values [B, S, dv]; position = the
 * target position t (local-m); key_lengths and outputs as attn_op_additive_attention. */
ATTN_API attn_status attn_op_luong_attention(attn_graph *graph, attn_luong_score score,
                                             attn_luong_align align, int64_t window,
                                             const attn_luong_vars *params, int64_t position,
                                             attn_var *query, attn_var *keys, attn_var *values,
                                             const int32_t *key_lengths, attn_var **context,
                                             attn_var **weights);

#ifdef __cplusplus
}
#endif

#endif /* ATTN_AUTODIFF_H */
