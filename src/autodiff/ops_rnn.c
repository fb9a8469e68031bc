/* The recurrent operations of RNN encoder-decoders: a recurrent layer over padded sentences
 * (one or both directions) and one cell step. The arithmetic is in the kernels (attn_rnn_*),
 * which dispatch on the instruction set themselves and keep their double references.
 *
 * An LSTM step's two outputs (h' and c') make one node (attn_graph_record_outputs), whose
 * backward reads both gradients from its context: either may be NULL when nothing reached
 * that output. */
#include "autodiff/autodiff_internal.h"
#include "kernels/rnn_internal.h"

#include <string.h>

/* ---- recurrent weights ------------------------------------------------------------------ */

static int64_t gate_count(attn_rnn_cell cell)
{
    return cell == ATTN_RNN_LSTM ? 4 : 3;
}

/* Checks one direction's (or one cell's) parameters and reads the hidden size from
 * weight_hh [G*H, H]; input_size is what weight_ih must take. */
static attn_status check_rnn_vars(const char *fn, const char *what, attn_rnn_cell cell,
                                  const attn_rnn_vars *p, int64_t input_size, int64_t *hidden)
{
    char a[96];
    ATTN_CHECK_ARG(p != NULL, "%s: %s must not be NULL", fn, what);
    ATTN_TRY(attn_ad_check_var(fn, "weight_hh", p->weight_hh));
    ATTN_TRY(attn_ad_check_var(fn, "weight_ih", p->weight_ih));
    const int64_t g = gate_count(cell);
    const attn_tensor *whh = &p->weight_hh->value, *wih = &p->weight_ih->value;
    ATTN_CHECK_ARG(whh->ndim == 2 && whh->shape[1] >= 1 && whh->shape[0] == g * whh->shape[1],
                   "%s: %s->weight_hh %s must be [%lld * H, H]", fn, what,
                   attn_ad_shape_text(p->weight_hh, a, sizeof a), (long long)g);
    const int64_t h = whh->shape[1];
    ATTN_CHECK_ARG(wih->ndim == 2 && wih->shape[0] == g * h && wih->shape[1] == input_size,
                   "%s: %s->weight_ih %s must be [%lld, %lld]", fn, what,
                   attn_ad_shape_text(p->weight_ih, a, sizeof a), (long long)(g * h),
                   (long long)input_size);
    attn_var *biases[2] = {p->bias_ih, p->bias_hh};
    for (int i = 0; i < 2; i++) {
        if (biases[i] == NULL)
            continue;
        ATTN_TRY(attn_ad_check_var(fn, i == 0 ? "bias_ih" : "bias_hh", biases[i]));
        ATTN_CHECK_ARG(biases[i]->value.ndim == 1 && biases[i]->value.shape[0] == g * h,
                       "%s: %s->%s %s must be [%lld]", fn, what, i == 0 ? "bias_ih" : "bias_hh",
                       attn_ad_shape_text(biases[i], a, sizeof a), (long long)(g * h));
    }
    *hidden = h;
    return ATTN_OK;
}

static attn_rnn_params raw_rnn_params(const attn_rnn_vars *p)
{
    attn_rnn_params raw = {p->weight_ih->value.data, p->weight_hh->value.data,
                           attn_ad_optional_data(p->bias_ih), attn_ad_optional_data(p->bias_hh)};
    return raw;
}

static attn_status rnn_grads(attn_graph *graph, const attn_rnn_vars *p, attn_rnn_grads *grads)
{
    ATTN_TRY(attn_ad_optional_grad(graph, p->weight_ih, &grads->weight_ih));
    ATTN_TRY(attn_ad_optional_grad(graph, p->weight_hh, &grads->weight_hh));
    ATTN_TRY(attn_ad_optional_grad(graph, p->bias_ih, &grads->bias_ih));
    return attn_ad_optional_grad(graph, p->bias_hh, &grads->bias_hh);
}

/* ---- a recurrent layer over padded sentences ---------------------------------------------- */

typedef struct rnn_layer_ctx {
    attn_rnn_layer_dims dims; /* of the forward direction */
    attn_rnn_vars directions[2];
    int n_directions;
    attn_var *x;
    const int64_t *lengths;
    float *saved[2];
} rnn_layer_ctx;

static attn_status rnn_layer_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    rnn_layer_ctx *ctx = raw;
    float *workspace = attn_graph_alloc_floats(graph, attn_rnn_layer_workspace_floats(&ctx->dims));
    if (workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    float *dx;
    ATTN_TRY(attn_graph_grad(graph, ctx->x, &dx));
    for (int d = 0; d < ctx->n_directions; d++) {
        attn_rnn_layer_dims dims = ctx->dims;
        dims.reverse = d;
        attn_rnn_params params = raw_rnn_params(&ctx->directions[d]);
        attn_rnn_grads grads;
        ATTN_TRY(rnn_grads(graph, &ctx->directions[d], &grads));
        ATTN_TRY(attn_rnn_layer_backward(&dims, &params, ctx->x->value.data, ctx->lengths,
                                         ctx->saved[d], output->grad + d * dims.hidden_size, NULL,
                                         NULL, workspace, dx, NULL, NULL, &grads));
    }
    return ATTN_OK;
}

attn_status attn_op_rnn_layer(attn_graph *graph, attn_rnn_cell cell, const attn_rnn_vars *forward,
                              const attn_rnn_vars *reverse, attn_var *x, const int32_t *lengths,
                              attn_var **out)
{
    const char *fn = __func__;
    char a[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_ARG(cell == ATTN_RNN_GRU || cell == ATTN_RNN_LSTM, "%s: unknown cell %d", fn,
                   (int)cell);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG(x->value.ndim == 3 && x->value.shape[2] >= 1,
                   "%s: x must be [batch, len, features >= 1], got %s", fn,
                   attn_ad_shape_text(x, a, sizeof a));
    const int64_t batch = x->value.shape[0], len = x->value.shape[1], in = x->value.shape[2];
    int64_t hidden = 0, hidden_reverse = 0;
    ATTN_TRY(check_rnn_vars(fn, "forward", cell, forward, in, &hidden));
    if (reverse != NULL) {
        ATTN_TRY(check_rnn_vars(fn, "reverse", cell, reverse, in, &hidden_reverse));
        ATTN_CHECK_ARG(hidden_reverse == hidden,
                       "%s: the directions' hidden sizes differ (%lld and %lld)", fn,
                       (long long)hidden, (long long)hidden_reverse);
    }
    int64_t *lengths64 = NULL;
    if (lengths != NULL) {
        lengths64 = attn_graph_alloc(graph, (size_t)batch * sizeof *lengths64);
        if (lengths64 == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        for (int64_t b = 0; b < batch; b++) {
            ATTN_CHECK_ARG(lengths[b] >= 0 && lengths[b] <= len,
                           "%s: lengths[%lld] = %d is outside [0, %lld]", fn, (long long)b,
                           (int)lengths[b], (long long)len);
            lengths64[b] = lengths[b];
        }
    }

    const int n_directions = reverse != NULL ? 2 : 1;
    attn_rnn_layer_dims dims = {
        cell, batch, len, in, hidden, 0, n_directions * hidden, attn_ad_product_precision(graph)};
    attn_var *inputs[9] = {x,
                           forward->weight_ih,
                           forward->weight_hh,
                           forward->bias_ih,
                           forward->bias_hh,
                           reverse ? reverse->weight_ih : NULL,
                           reverse ? reverse->weight_hh : NULL,
                           reverse ? reverse->bias_ih : NULL,
                           reverse ? reverse->bias_hh : NULL};
    const int wants = attn_graph_wants_grad(graph, 9, inputs);
    const int64_t shape[3] = {batch, len, n_directions * hidden};
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 3, shape, wants, &y));
    float *workspace = attn_graph_alloc_floats(graph, attn_rnn_layer_workspace_floats(&dims));
    if (workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    rnn_layer_ctx ctx = {dims, {*forward, {0}}, n_directions, x, lengths64, {NULL, NULL}};
    if (reverse != NULL)
        ctx.directions[1] = *reverse;
    for (int d = 0; d < n_directions; d++) {
        attn_rnn_layer_dims direction = dims;
        direction.reverse = d;
        ctx.saved[d] = attn_graph_alloc_floats(graph, attn_rnn_layer_saved_floats(&direction));
        if (ctx.saved[d] == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        attn_rnn_params params = raw_rnn_params(&ctx.directions[d]);
        attn_rnn_stored stored = {attn_ad_stored_weight(graph, ctx.directions[d].weight_ih),
                                  attn_ad_stored_weight(graph, ctx.directions[d].weight_hh), NULL};
        if (!wants && stored.w_ih != NULL && stored.w_hh != NULL) {
            stored.scratch =
                attn_graph_alloc(graph, attn_rnn_stored_scratch_bytes(&direction, &stored));
            if (stored.scratch == NULL)
                return ATTN_ERR_OUT_OF_MEMORY;
            ATTN_TRY(attn_rnn_layer_forward_stored(&direction, &params, &stored, x->value.data,
                                                   lengths64, y->value.data + d * hidden,
                                                   ctx.saved[d], workspace));
            continue;
        }
        ATTN_TRY(attn_rnn_layer_forward(&direction, &params, x->value.data, lengths64, NULL, NULL,
                                        y->value.data + d * hidden, NULL, NULL, ctx.saved[d],
                                        workspace));
    }
    if (wants)
        ATTN_TRY(attn_ad_record(graph, 1, &y, rnn_layer_backward, &ctx, sizeof ctx, "rnn_layer"));
    *out = y;
    return ATTN_OK;
}

/* ---- one cell step ------------------------------------------------------------------------ */

typedef struct rnn_cell_ctx {
    attn_rnn_cell_dims dims;
    attn_rnn_vars params;
    attn_var *x, *h, *c, *h_out, *c_out;
    float *saved;
} rnn_cell_ctx;

static attn_status rnn_cell_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    (void)output;
    rnn_cell_ctx *ctx = raw;
    float *workspace = attn_graph_alloc_floats(graph, attn_rnn_cell_workspace_floats(&ctx->dims));
    if (workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    float *dx, *dh, *dc;
    ATTN_TRY(attn_graph_grad(graph, ctx->x, &dx));
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->h, &dh));
    ATTN_TRY(attn_ad_optional_grad(graph, ctx->c, &dc));
    attn_rnn_grads grads;
    ATTN_TRY(rnn_grads(graph, &ctx->params, &grads));
    attn_rnn_params params = raw_rnn_params(&ctx->params);
    return attn_rnn_cell_backward(&ctx->dims, &params, ctx->x->value.data, ctx->saved,
                                  ctx->h_out->grad, ctx->c_out ? ctx->c_out->grad : NULL, workspace,
                                  dx, dh, dc, &grads);
}

static attn_status check_state(const char *fn, const char *what, const attn_var *s, int64_t batch,
                               int64_t hidden)
{
    char a[96];
    if (s == NULL)
        return ATTN_OK;
    ATTN_TRY(attn_ad_check_var(fn, what, s));
    ATTN_CHECK_ARG(s->value.ndim >= 1 && attn_ad_rows(s) == batch && attn_ad_last_dim(s) == hidden,
                   "%s: %s %s must have %lld rows of %lld", fn, what,
                   attn_ad_shape_text(s, a, sizeof a), (long long)batch, (long long)hidden);
    return ATTN_OK;
}

/* A step of a model decoding with its weights stored in bf16 or int8 (attn_ad_stored_weight):
 * both projections multiply the stored matrices, packed once at load, where the cell kernel
 * would multiply their fp32 copies; then the kernel's own gate math. Nothing is recorded, so
 * the kernel's saved buffer (for the backward) is not needed. */
static attn_status rnn_cell_stored(attn_graph *graph, attn_rnn_cell cell,
                                   const attn_rnn_vars *params, const attn_var *x,
                                   const attn_var *h, const attn_var *c, attn_var *h_new,
                                   attn_var *c_new)
{
    const int64_t batch = attn_ad_rows(x), in = attn_ad_last_dim(x);
    const int64_t hidden = params->weight_hh->value.shape[1];
    const int64_t gates = gate_count(cell) * hidden;
    const int64_t stride = attn_rnn_cell_gate_stride(cell, hidden);
    float *projected = attn_graph_alloc_floats(graph, (size_t)(batch * stride));
    float *gh = attn_graph_alloc_floats(graph, (size_t)(batch * gates));
    if (projected == NULL || gh == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    ATTN_TRY(attn_ad_linear_rows(graph, batch, x->value.data, in, params->weight_ih,
                                 attn_ad_optional_data(params->bias_ih), projected, stride));
    const float *bias_hh = attn_ad_optional_data(params->bias_hh);
    if (h != NULL)
        ATTN_TRY(attn_ad_linear_rows(graph, batch, h->value.data, hidden, params->weight_hh,
                                     bias_hh, gh, gates));
    else
        for (int64_t b = 0; b < batch; b++) {
            if (bias_hh != NULL)
                memcpy(gh + b * gates, bias_hh, (size_t)gates * sizeof(float));
            else
                memset(gh + b * gates, 0, (size_t)gates * sizeof(float));
        }
    attn_rnn_cell_forward_projected(cell, batch, hidden, projected, gh, attn_ad_optional_data(h),
                                    attn_ad_optional_data(c), h_new->value.data,
                                    c_new != NULL ? c_new->value.data : NULL);
    return ATTN_OK;
}

attn_status attn_op_rnn_cell(attn_graph *graph, attn_rnn_cell cell, const attn_rnn_vars *params,
                             attn_var *x, attn_var *h, attn_var *c, attn_var **h_out,
                             attn_var **c_out)
{
    const char *fn = __func__;
    const int lstm = cell == ATTN_RNN_LSTM;
    ATTN_CHECK_NOT_NULL(h_out);
    *h_out = NULL;
    if (c_out != NULL)
        *c_out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_ARG(cell == ATTN_RNN_GRU || lstm, "%s: unknown cell %d", fn, (int)cell);
    ATTN_CHECK_ARG(!lstm || c_out != NULL, "%s: an LSTM step needs c_out", fn);
    ATTN_CHECK_ARG(lstm || c == NULL, "%s: a GRU has no cell state; c must be NULL", fn);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG(x->value.ndim >= 1, "%s: x must have at least one dimension", fn);
    const int64_t batch = attn_ad_rows(x), in = attn_ad_last_dim(x);
    int64_t hidden = 0;
    ATTN_TRY(check_rnn_vars(fn, "params", cell, params, in, &hidden));
    ATTN_TRY(check_state(fn, "h", h, batch, hidden));
    ATTN_TRY(check_state(fn, "c", c, batch, hidden));

    attn_rnn_cell_dims dims = {cell, batch, in, hidden};
    attn_var *inputs[7] = {
        x, h, c, params->weight_ih, params->weight_hh, params->bias_ih, params->bias_hh};
    const int wants = attn_graph_wants_grad(graph, 7, inputs);
    const int64_t shape[2] = {batch, hidden};
    attn_var *h_new, *c_new = NULL;
    ATTN_TRY(attn_graph_new_var(graph, 2, shape, wants, &h_new));
    if (lstm)
        ATTN_TRY(attn_graph_new_var(graph, 2, shape, wants, &c_new));
    if (!wants && attn_ad_stored_weight(graph, params->weight_ih) != NULL &&
        attn_ad_stored_weight(graph, params->weight_hh) != NULL) {
        ATTN_TRY(rnn_cell_stored(graph, cell, params, x, h, c, h_new, c_new));
        *h_out = h_new;
        if (c_out != NULL)
            *c_out = c_new;
        return ATTN_OK;
    }
    float *saved = attn_graph_alloc_floats(graph, attn_rnn_cell_saved_floats(&dims));
    float *workspace = attn_graph_alloc_floats(graph, attn_rnn_cell_workspace_floats(&dims));
    if (saved == NULL || workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_rnn_params raw = raw_rnn_params(params);
    ATTN_TRY(attn_rnn_cell_forward(&dims, &raw, x->value.data, attn_ad_optional_data(h),
                                   attn_ad_optional_data(c), h_new->value.data,
                                   lstm ? c_new->value.data : NULL, saved, workspace));
    if (wants) {
        rnn_cell_ctx ctx = {dims, *params, x, h, c, h_new, c_new, saved};
        attn_var *outputs[2] = {h_new, c_new};
        ATTN_TRY(attn_ad_record(graph, lstm ? 2 : 1, outputs, rnn_cell_backward, &ctx, sizeof ctx,
                                "rnn_cell"));
    }
    *h_out = h_new;
    if (c_out != NULL)
        *c_out = c_new;
    return ATTN_OK;
}
