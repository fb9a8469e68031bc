/* Operations for RNN encoder-decoders: a recurrent layer over padded sentences (one or both
 * directions), one cell step, additive and Luong attention steps, Luong's key projection,
 * and the plumbing a step-by-step decoder needs (concatenation, stacking the steps,
 * gathering one position per sentence).
 *
 * The arithmetic is in the kernels (attn_rnn_*, attn_additive_*, attn_luong_*), which
 * dispatch on the instruction set themselves and keep their double references; the
 * plumbing only moves memory, so one portable loop serves every instruction set.
 *
 * Two outputs (an LSTM step's h' and c'; an attention step's context and weights) make one
 * node (attn_graph_record_outputs), whose backward reads both gradients from its context:
 * either may be NULL when nothing reached that output. */
#include "autodiff/autodiff_internal.h"

#include <string.h>

/* ---- shared helpers ------------------------------------------------------------------- */

static attn_status grad_of(attn_graph *graph, attn_var *v, float **grad)
{
    *grad = NULL;
    return v == NULL ? ATTN_OK : attn_graph_grad(graph, v, grad);
}

static const float *data_of(const attn_var *v)
{
    return v != NULL ? v->value.data : NULL;
}

/* Padding mask [B, S] (1 = padding) from key_lengths in [0, S] (NULL: no padding). */
static attn_status padding_mask(const char *fn, attn_graph *graph, int64_t batch, int64_t len,
                                const int32_t *key_lengths, uint8_t **mask)
{
    *mask = NULL;
    if (key_lengths == NULL)
        return ATTN_OK;
    uint8_t *m = attn_graph_alloc(graph, (size_t)(batch * len));
    if (m == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < batch; b++) {
        ATTN_CHECK_ARG(key_lengths[b] >= 0 && key_lengths[b] <= len,
                       "%s: key_lengths[%lld] = %d is outside [0, %lld]", fn, (long long)b,
                       (int)key_lengths[b], (long long)len);
        for (int64_t j = 0; j < len; j++)
            m[b * len + j] = j >= key_lengths[b];
    }
    *mask = m;
    return ATTN_OK;
}

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
    attn_rnn_params raw = {p->weight_ih->value.data, p->weight_hh->value.data, data_of(p->bias_ih),
                           data_of(p->bias_hh)};
    return raw;
}

static attn_status rnn_grads(attn_graph *graph, const attn_rnn_vars *p, attn_rnn_grads *grads)
{
    ATTN_TRY(grad_of(graph, p->weight_ih, &grads->weight_ih));
    ATTN_TRY(grad_of(graph, p->weight_hh, &grads->weight_hh));
    ATTN_TRY(grad_of(graph, p->bias_ih, &grads->bias_ih));
    return grad_of(graph, p->bias_hh, &grads->bias_hh);
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
    attn_rnn_layer_dims dims = {cell, batch, len, in, hidden, 0, n_directions * hidden};
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
        ATTN_TRY(attn_rnn_layer_forward(&direction, &params, x->value.data, lengths64, NULL, NULL,
                                        y->value.data + d * hidden, NULL, NULL, ctx.saved[d],
                                        workspace));
    }
    if (wants) {
        rnn_layer_ctx *saved_ctx = attn_graph_alloc(graph, sizeof *saved_ctx);
        if (saved_ctx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *saved_ctx = ctx;
        ATTN_TRY(attn_graph_record(graph, y, rnn_layer_backward, saved_ctx, "rnn_layer"));
    }
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
    ATTN_TRY(grad_of(graph, ctx->h, &dh));
    ATTN_TRY(grad_of(graph, ctx->c, &dc));
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
    float *saved = attn_graph_alloc_floats(graph, attn_rnn_cell_saved_floats(&dims));
    float *workspace = attn_graph_alloc_floats(graph, attn_rnn_cell_workspace_floats(&dims));
    if (saved == NULL || workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_rnn_params raw = raw_rnn_params(params);
    ATTN_TRY(attn_rnn_cell_forward(&dims, &raw, x->value.data, data_of(h), data_of(c),
                                   h_new->value.data, lstm ? c_new->value.data : NULL, saved,
                                   workspace));
    if (wants) {
        rnn_cell_ctx *ctx = attn_graph_alloc(graph, sizeof *ctx);
        if (ctx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *ctx = (rnn_cell_ctx){dims, *params, x, h, c, h_new, c_new, saved};
        attn_var *outputs[2] = {h_new, c_new};
        ATTN_TRY(attn_graph_record_outputs(graph, lstm ? 2 : 1, outputs, rnn_cell_backward, ctx,
                                           "rnn_cell"));
    }
    *h_out = h_new;
    if (c_out != NULL)
        *c_out = c_new;
    return ATTN_OK;
}

/* ---- concatenation and stacking ------------------------------------------------------------ */

enum { COPY_CHUNK = 1 << 14, MAX_PIECES = 1 << 20 };

typedef struct concat_ctx {
    int n;
    attn_var **inputs; /* in the arena */
    int64_t rows, width;
} concat_ctx;

typedef struct concat_job {
    const concat_ctx *ctx;
    float *out;        /* forward: the output */
    const float *grad; /* backward: the output's gradient */
    float **grads;     /* backward: each input's gradient, NULL to skip */
} concat_job;

static void concat_rows(void *raw, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const concat_job *job = raw;
    const concat_ctx *ctx = job->ctx;
    for (int64_t r = begin; r < end; r++) {
        float *dst = job->out + r * ctx->width;
        for (int i = 0; i < ctx->n; i++) {
            const int64_t w = attn_ad_last_dim(ctx->inputs[i]);
            memcpy(dst, ctx->inputs[i]->value.data + r * w, (size_t)w * sizeof(float));
            dst += w;
        }
    }
}

static void concat_backward_rows(void *raw, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const concat_job *job = raw;
    const concat_ctx *ctx = job->ctx;
    for (int64_t r = begin; r < end; r++) {
        const float *src = job->grad + r * ctx->width;
        for (int i = 0; i < ctx->n; i++) {
            const int64_t w = attn_ad_last_dim(ctx->inputs[i]);
            if (job->grads[i] != NULL) {
                float *dst = job->grads[i] + r * w;
                for (int64_t c = 0; c < w; c++)
                    dst[c] += src[c];
            }
            src += w;
        }
    }
}

static int64_t rows_per_chunk(int64_t width)
{
    return 1 + COPY_CHUNK / (width > 0 ? width : 1);
}

static attn_status concat_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    const concat_ctx *ctx = raw;
    float **grads = attn_graph_alloc(graph, (size_t)ctx->n * sizeof *grads);
    if (grads == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    /* An input given twice gets one buffer, and its slices add into it in input order on
     * the thread that owns the row. */
    for (int i = 0; i < ctx->n; i++)
        ATTN_TRY(attn_graph_grad(graph, ctx->inputs[i], &grads[i]));
    concat_job job = {ctx, NULL, output->grad, grads};
    attn_parallel_for(ctx->rows, rows_per_chunk(ctx->width), concat_backward_rows, &job);
    return ATTN_OK;
}

/* Shared by concat and stack, which differ only in the output's shape. */
static attn_status concat_into(const char *fn, attn_graph *graph, int64_t n,
                               attn_var *const *inputs, int stack, attn_var **out)
{
    char a[96], b[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_ARG(n >= 1 && n <= MAX_PIECES, "%s: n must be in [1, %d], got %lld", fn, MAX_PIECES,
                   (long long)n);
    ATTN_CHECK_ARG(inputs != NULL, "%s: inputs must not be NULL", fn);
    concat_ctx ctx = {(int)n, NULL, 0, 0};
    ctx.inputs = attn_graph_alloc(graph, (size_t)n * sizeof *ctx.inputs);
    if (ctx.inputs == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < ctx.n; i++) {
        ATTN_CHECK_ARG(inputs[i] != NULL, "%s: inputs[%d] must not be NULL", fn, i);
        ATTN_TRY(attn_ad_check_var(fn, "an input", inputs[i]));
        ATTN_CHECK_ARG(inputs[i]->value.ndim >= 1,
                       "%s: inputs[%d] must have at least one dimension", fn, i);
        ATTN_CHECK_ARG(attn_ad_rows(inputs[i]) == attn_ad_rows(inputs[0]),
                       "%s: inputs[%d] %s has other rows than inputs[0] %s", fn, i,
                       attn_ad_shape_text(inputs[i], a, sizeof a),
                       attn_ad_shape_text(inputs[0], b, sizeof b));
        ATTN_CHECK_ARG(!stack || attn_ad_last_dim(inputs[i]) == attn_ad_last_dim(inputs[0]),
                       "%s: inputs[%d] %s differs in its last dimension from inputs[0] %s", fn, i,
                       attn_ad_shape_text(inputs[i], a, sizeof a),
                       attn_ad_shape_text(inputs[0], b, sizeof b));
        ctx.inputs[i] = inputs[i];
        ctx.width += attn_ad_last_dim(inputs[i]);
    }
    ctx.rows = attn_ad_rows(inputs[0]);
    const int wants = attn_graph_wants_grad(graph, ctx.n, ctx.inputs);
    attn_var *y;
    if (stack) {
        const int64_t shape[3] = {ctx.rows, n, attn_ad_last_dim(inputs[0])};
        ATTN_TRY(attn_graph_new_var(graph, 3, shape, wants, &y));
    } else {
        int64_t shape[ATTN_MAX_DIMS];
        memcpy(shape, inputs[0]->value.shape, sizeof shape);
        shape[inputs[0]->value.ndim - 1] = ctx.width;
        ATTN_TRY(attn_graph_new_var(graph, inputs[0]->value.ndim, shape, wants, &y));
    }
    concat_job job = {&ctx, y->value.data, NULL, NULL};
    attn_parallel_for(ctx.rows, rows_per_chunk(ctx.width), concat_rows, &job);
    if (wants) {
        concat_ctx *saved = attn_graph_alloc(graph, sizeof *saved);
        if (saved == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *saved = ctx;
        ATTN_TRY(attn_graph_record(graph, y, concat_backward, saved, stack ? "stack" : "concat"));
    }
    *out = y;
    return ATTN_OK;
}

attn_status attn_op_concat(attn_graph *graph, int n, attn_var *const *inputs, attn_var **out)
{
    return concat_into(__func__, graph, n, inputs, 0, out);
}

attn_status attn_op_stack(attn_graph *graph, int64_t n, attn_var *const *inputs, attn_var **out)
{
    return concat_into(__func__, graph, n, inputs, 1, out);
}

/* ---- one position per sentence ------------------------------------------------------------- */

typedef struct gather_ctx {
    attn_var *x;
    const int32_t *positions;
    int64_t first, count;
} gather_ctx;

static attn_status gather_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    const gather_ctx *ctx = raw;
    float *dx;
    ATTN_TRY(attn_graph_grad(graph, ctx->x, &dx));
    const int64_t batch = ctx->x->value.shape[0], len = ctx->x->value.shape[1];
    const int64_t dim = ctx->x->value.shape[2];
    for (int64_t b = 0; b < batch; b++) {
        if (ctx->positions[b] < 0)
            continue;
        float *dst = dx + (b * len + ctx->positions[b]) * dim + ctx->first;
        const float *src = output->grad + b * ctx->count;
        for (int64_t c = 0; c < ctx->count; c++)
            dst[c] += src[c];
    }
    return ATTN_OK;
}

attn_status attn_op_gather_positions(attn_graph *graph, attn_var *x, const int32_t *positions,
                                     int64_t first, int64_t count, attn_var **out)
{
    const char *fn = __func__;
    char a[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG(x->value.ndim == 3, "%s: x must be [batch, len, dim], got %s", fn,
                   attn_ad_shape_text(x, a, sizeof a));
    const int64_t batch = x->value.shape[0], len = x->value.shape[1], dim = x->value.shape[2];
    ATTN_CHECK_ARG(first >= 0 && count >= 0 && first <= dim && count <= dim - first,
                   "%s: columns [%lld, %lld + %lld) are outside x's %lld", fn, (long long)first,
                   (long long)first, (long long)count, (long long)dim);
    ATTN_CHECK_ARG(batch == 0 || positions != NULL, "%s: positions must not be NULL", fn);
    int32_t *copy = attn_graph_alloc(graph, (size_t)batch * sizeof *copy);
    if (copy == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < batch; b++) {
        ATTN_CHECK_ARG(positions[b] >= -1 && positions[b] < len,
                       "%s: positions[%lld] = %d is outside [-1, %lld)", fn, (long long)b,
                       (int)positions[b], (long long)len);
        copy[b] = positions[b];
    }
    attn_var *inputs[1] = {x};
    const int wants = attn_graph_wants_grad(graph, 1, inputs);
    const int64_t shape[2] = {batch, count};
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 2, shape, wants, &y));
    for (int64_t b = 0; b < batch; b++) {
        float *dst = y->value.data + b * count;
        if (copy[b] < 0)
            memset(dst, 0, (size_t)count * sizeof(float));
        else
            memcpy(dst, x->value.data + (b * len + copy[b]) * dim + first,
                   (size_t)count * sizeof(float));
    }
    if (wants) {
        gather_ctx *ctx = attn_graph_alloc(graph, sizeof *ctx);
        if (ctx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *ctx = (gather_ctx){x, copy, first, count};
        ATTN_TRY(attn_graph_record(graph, y, gather_backward, ctx, "gather_positions"));
    }
    *out = y;
    return ATTN_OK;
}

/* ---- attention steps: shared checks --------------------------------------------------------- */

/* query [..., ds] with B rows, keys [B, S, dk], values [B, S, dv]. */
static attn_status check_attention_inputs(const char *fn, const attn_var *query,
                                          const attn_var *keys, const attn_var *values)
{
    char a[96], b[96];
    ATTN_TRY(attn_ad_check_var(fn, "query", query));
    ATTN_TRY(attn_ad_check_var(fn, "keys", keys));
    ATTN_TRY(attn_ad_check_var(fn, "values", values));
    ATTN_CHECK_ARG(keys->value.ndim == 3, "%s: keys must be [batch, src_len, dim], got %s", fn,
                   attn_ad_shape_text(keys, a, sizeof a));
    ATTN_CHECK_ARG(values->value.ndim == 3 && values->value.shape[0] == keys->value.shape[0] &&
                       values->value.shape[1] == keys->value.shape[1],
                   "%s: values %s do not fit keys %s", fn, attn_ad_shape_text(values, a, sizeof a),
                   attn_ad_shape_text(keys, b, sizeof b));
    ATTN_CHECK_ARG(query->value.ndim >= 1 && attn_ad_rows(query) == keys->value.shape[0],
                   "%s: query %s must have one row per sentence of keys %s", fn,
                   attn_ad_shape_text(query, a, sizeof a), attn_ad_shape_text(keys, b, sizeof b));
    return ATTN_OK;
}

/* A parameter of exactly [d0] (ndim 1) or [d0, d1]. */
static attn_status check_param_shape(const char *fn, const char *what, const attn_var *p, int ndim,
                                     int64_t d0, int64_t d1)
{
    char a[96];
    ATTN_TRY(attn_ad_check_var(fn, what, p));
    int ok =
        p->value.ndim == ndim && p->value.shape[0] == d0 && (ndim == 1 || p->value.shape[1] == d1);
    if (ndim == 1)
        ATTN_CHECK_ARG(ok, "%s: %s %s must be [%lld]", fn, what, attn_ad_shape_text(p, a, sizeof a),
                       (long long)d0);
    ATTN_CHECK_ARG(ok, "%s: %s %s must be [%lld, %lld]", fn, what,
                   attn_ad_shape_text(p, a, sizeof a), (long long)d0, (long long)d1);
    return ATTN_OK;
}

/* The two outputs of an attention step: context [B, dv] and weights [B, S]. The weights
 * buffer is made even when the caller does not want it, as the backward reads it. */
static attn_status attention_outputs(attn_graph *graph, int wants, int64_t batch, int64_t len,
                                     int64_t value_dim, attn_var **context, attn_var **weights)
{
    const int64_t context_shape[2] = {batch, value_dim}, weights_shape[2] = {batch, len};
    ATTN_TRY(attn_graph_new_var(graph, 2, context_shape, wants, context));
    return attn_graph_new_var(graph, 2, weights_shape, wants, weights);
}

/* The weights are an output of the node only when the caller has them. */
static attn_status record_attention(attn_graph *graph, attn_var *context, attn_var *weights,
                                    int weights_wanted, attn_backward_fn backward, void *ctx,
                                    const char *name)
{
    attn_var *outputs[2] = {context, weights};
    return attn_graph_record_outputs(graph, weights_wanted ? 2 : 1, outputs, backward, ctx, name);
}

/* ---- additive attention --------------------------------------------------------------------- */

typedef struct additive_ctx {
    attn_additive_dims dims;
    attn_additive_vars params;
    attn_var *query, *keys, *values, *context, *weights;
    int weights_wanted;
    const uint8_t *mask;
    float *saved;
} additive_ctx;

static attn_additive_params raw_additive(const attn_additive_vars *p)
{
    attn_additive_params raw = {p->w_query->value.data, data_of(p->bias), p->v->value.data};
    return raw;
}

static attn_status additive_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    (void)output;
    additive_ctx *ctx = raw;
    float *dcontext; /* zeros when only the weights received a gradient */
    ATTN_TRY(attn_graph_grad(graph, ctx->context, &dcontext));
    float *workspace = attn_graph_alloc_floats(graph, attn_additive_workspace_floats(&ctx->dims));
    if (workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    float *dq, *dk, *dv;
    ATTN_TRY(attn_graph_grad(graph, ctx->query, &dq));
    ATTN_TRY(attn_graph_grad(graph, ctx->keys, &dk));
    ATTN_TRY(attn_graph_grad(graph, ctx->values, &dv));
    attn_additive_grads grads;
    ATTN_TRY(grad_of(graph, ctx->params.w_query, &grads.w_query));
    ATTN_TRY(grad_of(graph, ctx->params.bias, &grads.bias));
    ATTN_TRY(grad_of(graph, ctx->params.v, &grads.v));
    attn_additive_params params = raw_additive(&ctx->params);
    return attn_additive_backward(
        &ctx->dims, &params, ctx->query->value.data, ctx->keys->value.data, ctx->values->value.data,
        ctx->mask, ctx->weights->value.data, ctx->saved, dcontext,
        ctx->weights_wanted ? ctx->weights->grad : NULL, dq, dk, dv, &grads, workspace);
}

attn_status attn_op_additive_attention(attn_graph *graph, const attn_additive_vars *params,
                                       attn_var *query, attn_var *keys, attn_var *values,
                                       const int32_t *key_lengths, attn_var **context,
                                       attn_var **weights)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(context);
    *context = NULL;
    if (weights != NULL)
        *weights = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_NOT_NULL(params);
    ATTN_TRY(check_attention_inputs(fn, query, keys, values));
    const int64_t batch = keys->value.shape[0], len = keys->value.shape[1];
    const int64_t attn_dim = keys->value.shape[2], query_dim = attn_ad_last_dim(query);
    const int64_t value_dim = values->value.shape[2];
    ATTN_CHECK_ARG(attn_dim >= 1 && value_dim >= 1 && query_dim >= 1,
                   "%s: feature sizes must be >= 1", fn);
    ATTN_TRY(check_param_shape(fn, "params->w_query", params->w_query, 2, attn_dim, query_dim));
    ATTN_TRY(check_param_shape(fn, "params->v", params->v, 1, attn_dim, 0));
    if (params->bias != NULL)
        ATTN_TRY(check_param_shape(fn, "params->bias", params->bias, 1, attn_dim, 0));
    uint8_t *mask;
    ATTN_TRY(padding_mask(fn, graph, batch, len, key_lengths, &mask));

    attn_additive_dims dims = {batch, len, query_dim, attn_dim, value_dim, attn_dim};
    attn_var *inputs[6] = {query, keys, values, params->w_query, params->bias, params->v};
    const int wants = attn_graph_wants_grad(graph, 6, inputs);
    attn_var *ctx_out, *w_out;
    ATTN_TRY(attention_outputs(graph, wants, batch, len, value_dim, &ctx_out, &w_out));
    float *saved = attn_graph_alloc_floats(graph, attn_additive_saved_floats(&dims));
    if (saved == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_additive_params raw = raw_additive(params);
    ATTN_TRY(attn_additive_forward(&dims, &raw, query->value.data, keys->value.data,
                                   values->value.data, mask, ctx_out->value.data, w_out->value.data,
                                   saved));
    if (wants) {
        additive_ctx *ctx = attn_graph_alloc(graph, sizeof *ctx);
        if (ctx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *ctx = (additive_ctx){dims,    *params, query,           keys, values,
                              ctx_out, w_out,   weights != NULL, mask, saved};
        ATTN_TRY(record_attention(graph, ctx_out, w_out, weights != NULL, additive_backward, ctx,
                                  "additive_attention"));
    }
    *context = ctx_out;
    if (weights != NULL)
        *weights = w_out;
    return ATTN_OK;
}

/* ---- Luong attention ------------------------------------------------------------------------ */

static attn_luong_params raw_luong(const attn_luong_vars *p)
{
    attn_luong_params raw = {data_of(p->w), data_of(p->v), data_of(p->w_p), data_of(p->v_p)};
    return raw;
}

static attn_status luong_grads(attn_graph *graph, const attn_luong_vars *p, attn_luong_grads *g)
{
    ATTN_TRY(grad_of(graph, p->w, &g->w));
    ATTN_TRY(grad_of(graph, p->v, &g->v));
    ATTN_TRY(grad_of(graph, p->w_p, &g->w_p));
    return grad_of(graph, p->v_p, &g->v_p);
}

typedef struct project_ctx {
    attn_luong_config config;
    attn_var *annotations, *w;
} project_ctx;

static attn_status project_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    project_ctx *ctx = raw;
    float *dannotations, *dw;
    ATTN_TRY(attn_graph_grad(graph, ctx->annotations, &dannotations));
    ATTN_TRY(attn_graph_grad(graph, ctx->w, &dw));
    return attn_luong_project_keys_backward(&ctx->config, ctx->annotations->value.data,
                                            ctx->w->value.data, output->grad, dannotations, dw);
}

attn_status attn_op_luong_project_keys(attn_graph *graph, attn_var *annotations, attn_var *w,
                                       attn_var **keys)
{
    const char *fn = __func__;
    char a[96], b[96];
    ATTN_CHECK_NOT_NULL(keys);
    *keys = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "annotations", annotations));
    ATTN_TRY(attn_ad_check_var(fn, "w", w));
    ATTN_CHECK_ARG(annotations->value.ndim == 3 && annotations->value.shape[2] >= 1,
                   "%s: annotations must be [batch, src_len, dk >= 1], got %s", fn,
                   attn_ad_shape_text(annotations, a, sizeof a));
    const int64_t key_dim = annotations->value.shape[2];
    ATTN_CHECK_ARG(w->value.ndim == 2 && w->value.shape[0] >= 1 && w->value.shape[1] > key_dim,
                   "%s: w %s must be [da, ds + %lld] for annotations %s", fn,
                   attn_ad_shape_text(w, a, sizeof a), (long long)key_dim,
                   attn_ad_shape_text(annotations, b, sizeof b));
    attn_luong_config config = attn_luong_default_config(ATTN_LUONG_CONCAT, ATTN_LUONG_GLOBAL);
    config.batch = annotations->value.shape[0];
    config.src_len = annotations->value.shape[1];
    config.query_dim = w->value.shape[1] - key_dim;
    config.key_dim = key_dim;
    config.value_dim = key_dim;
    config.attn_dim = w->value.shape[0];
    attn_var *inputs[2] = {annotations, w};
    const int wants = attn_graph_wants_grad(graph, 2, inputs);
    const int64_t shape[3] = {config.batch, config.src_len, config.attn_dim};
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 3, shape, wants, &y));
    ATTN_TRY(
        attn_luong_project_keys(&config, annotations->value.data, w->value.data, y->value.data));
    if (wants) {
        project_ctx *ctx = attn_graph_alloc(graph, sizeof *ctx);
        if (ctx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *ctx = (project_ctx){config, annotations, w};
        ATTN_TRY(attn_graph_record(graph, y, project_backward, ctx, "luong_project_keys"));
    }
    *keys = y;
    return ATTN_OK;
}

typedef struct luong_ctx {
    attn_luong_config config;
    attn_luong_vars params;
    int64_t position;
    attn_var *query, *keys, *values, *context, *weights;
    int weights_wanted;
    const uint8_t *mask;
    float *saved;
} luong_ctx;

static attn_status luong_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    (void)output;
    luong_ctx *ctx = raw;
    float *dcontext; /* zeros when only the weights received a gradient */
    ATTN_TRY(attn_graph_grad(graph, ctx->context, &dcontext));
    float *workspace = attn_graph_alloc_floats(graph, attn_luong_workspace_floats(&ctx->config));
    if (workspace == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    float *dq, *dk, *dv;
    ATTN_TRY(attn_graph_grad(graph, ctx->query, &dq));
    ATTN_TRY(attn_graph_grad(graph, ctx->keys, &dk));
    ATTN_TRY(attn_graph_grad(graph, ctx->values, &dv));
    attn_luong_grads grads;
    ATTN_TRY(luong_grads(graph, &ctx->params, &grads));
    attn_luong_params params = raw_luong(&ctx->params);
    return attn_luong_backward(
        &ctx->config, &params, ctx->position, ctx->query->value.data, ctx->keys->value.data,
        ctx->values->value.data, ctx->mask, ctx->weights->value.data, ctx->saved, dcontext,
        ctx->weights_wanted ? ctx->weights->grad : NULL, dq, dk, dv, &grads, workspace);
}

/* Checks the parameters the score and alignment use and fills the config's sizes from
 * them; the parameters they do not use must be NULL. */
static attn_status luong_config_of(const char *fn, attn_luong_score score, attn_luong_align align,
                                   int64_t window, const attn_luong_vars *p, const attn_var *query,
                                   const attn_var *keys, const attn_var *values,
                                   attn_luong_config *config)
{
    ATTN_CHECK_ARG(p != NULL, "%s: params must not be NULL", fn);
    ATTN_CHECK_ARG((unsigned)score <= ATTN_LUONG_CONCAT, "%s: unknown score %d", fn, (int)score);
    ATTN_CHECK_ARG((unsigned)align <= ATTN_LUONG_LOCAL_P, "%s: unknown alignment %d", fn,
                   (int)align);
    *config = attn_luong_default_config(score, align);
    config->batch = keys->value.shape[0];
    config->src_len = keys->value.shape[1];
    config->query_dim = attn_ad_last_dim(query);
    config->value_dim = values->value.shape[2];
    config->window = window;
    const int64_t ds = config->query_dim, width = keys->value.shape[2];
    switch (score) {
    case ATTN_LUONG_DOT:
        config->key_dim = width;
        ATTN_CHECK_ARG(p->w == NULL && p->v == NULL, "%s: the dot score takes no w or v", fn);
        ATTN_CHECK_ARG(ds == width,
                       "%s: the dot score needs query and keys of one size, got %lld and %lld", fn,
                       (long long)ds, (long long)width);
        break;
    case ATTN_LUONG_GENERAL:
        config->key_dim = width;
        ATTN_TRY(check_param_shape(fn, "params->w", p->w, 2, ds, width));
        ATTN_CHECK_ARG(p->v == NULL, "%s: the general score takes no v", fn);
        break;
    case ATTN_LUONG_CONCAT:
        ATTN_TRY(attn_ad_check_var(fn, "params->w", p->w));
        ATTN_CHECK_ARG(p->w->value.ndim == 2 && p->w->value.shape[0] == width &&
                           p->w->value.shape[1] > ds,
                       "%s: params->w must be [da = %lld, ds + dk] with ds = %lld", fn,
                       (long long)width, (long long)ds);
        config->attn_dim = width;
        config->key_dim = p->w->value.shape[1] - ds;
        ATTN_TRY(check_param_shape(fn, "params->v", p->v, 1, width, 0));
        break;
    }
    if (align == ATTN_LUONG_LOCAL_P) {
        ATTN_TRY(attn_ad_check_var(fn, "params->w_p", p->w_p));
        ATTN_CHECK_ARG(p->w_p->value.ndim == 2 && p->w_p->value.shape[1] == ds,
                       "%s: params->w_p must be [dp, %lld]", fn, (long long)ds);
        config->predict_dim = p->w_p->value.shape[0];
        ATTN_TRY(check_param_shape(fn, "params->v_p", p->v_p, 1, config->predict_dim, 0));
    } else {
        ATTN_CHECK_ARG(p->w_p == NULL && p->v_p == NULL,
                       "%s: w_p and v_p belong to local-p alignment only", fn);
    }
    return ATTN_OK;
}

attn_status attn_op_luong_attention(attn_graph *graph, attn_luong_score score,
                                    attn_luong_align align, int64_t window,
                                    const attn_luong_vars *params, int64_t position,
                                    attn_var *query, attn_var *keys, attn_var *values,
                                    const int32_t *key_lengths, attn_var **context,
                                    attn_var **weights)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(context);
    *context = NULL;
    if (weights != NULL)
        *weights = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(check_attention_inputs(fn, query, keys, values));
    attn_luong_config config;
    ATTN_TRY(luong_config_of(fn, score, align, window, params, query, keys, values, &config));
    ATTN_CHECK_ARG(align != ATTN_LUONG_LOCAL_M || position >= 0,
                   "%s: local-m needs a target position >= 0, got %lld", fn, (long long)position);
    uint8_t *mask;
    ATTN_TRY(padding_mask(fn, graph, config.batch, config.src_len, key_lengths, &mask));

    attn_var *inputs[7] = {query, keys, values, params->w, params->v, params->w_p, params->v_p};
    const int wants = attn_graph_wants_grad(graph, 7, inputs);
    attn_var *ctx_out, *w_out;
    ATTN_TRY(attention_outputs(graph, wants, config.batch, config.src_len, config.value_dim,
                               &ctx_out, &w_out));
    float *saved = attn_graph_alloc_floats(graph, attn_luong_saved_floats(&config));
    if (saved == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    attn_luong_params raw = raw_luong(params);
    ATTN_TRY(attn_luong_forward(&config, &raw, position, query->value.data, keys->value.data,
                                values->value.data, mask, ctx_out->value.data, w_out->value.data,
                                saved));
    if (wants) {
        luong_ctx *ctx = attn_graph_alloc(graph, sizeof *ctx);
        if (ctx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *ctx = (luong_ctx){config,  *params, position,        query, keys, values,
                           ctx_out, w_out,   weights != NULL, mask,  saved};
        ATTN_TRY(record_attention(graph, ctx_out, w_out, weights != NULL, luong_backward, ctx,
                                  "luong_attention"));
    }
    *context = ctx_out;
    if (weights != NULL)
        *weights = w_out;
    return ATTN_OK;
}
