/* General-purpose operations on the tape: linear, embedding, additions, activation, dropout,
 * and moving values around (concatenation, stacking a decoder's steps, gathering one
 * position per sentence).
 *
 * The arithmetic is in the kernels (attn_gemm_precision in the graph's precision, attn_embedding_*,
 * attn_activation_*, attn_dropout_*), which dispatch on the instruction set themselves. What is
 * left here (broadcasting a bias, adding arrays, summing bias gradients, copying) only streams
 * memory, so portable loops serve every instruction set. */
#include "autodiff/autodiff_internal.h"
#include "kernels/elementwise.h"

#include <math.h>
#include <string.h>

/* ---- linear ------------------------------------------------------------------------------ */

/* c = x op(W) + beta c for x [rows, k]: op(W) = W^T (trans) or W. In bf16 a weight of the store
 * is read from its copy packed once per update (attn_ad_packed_weight). */
static attn_status times_weight(attn_graph *graph, attn_transpose trans, int64_t rows,
                                const float *x, int64_t ldx, const attn_var *weight, float beta,
                                float *c, int64_t ldc)
{
    const attn_precision precision = attn_ad_product_precision(graph);
    const int64_t w_rows = weight->value.shape[0], w_cols = weight->value.shape[1];
    const attn_gemm_packed_b *packed = NULL;
    if (precision == ATTN_PRECISION_BF16)
        ATTN_TRY(attn_ad_packed_weight(attn_graph_params(graph), weight, trans, &packed));
    if (packed != NULL)
        return attn_gemm_with_packed_b(ATTN_NO_TRANS, rows, 1.0f, x, ldx, packed, beta, c, ldc);
    return attn_gemm_precision(precision, ATTN_NO_TRANS, trans, rows,
                               trans == ATTN_TRANS ? w_rows : w_cols,
                               trans == ATTN_TRANS ? w_cols : w_rows, 1.0f, x, ldx,
                               weight->value.data, w_cols, beta, c, ldc);
}

attn_status attn_ad_linear_rows(attn_graph *graph, int64_t rows, const float *x, int64_t ldx,
                                const attn_var *weight, const float *bias, float *y, int64_t ldy)
{
    const int64_t out = weight->value.shape[0];
    const attn_quantized_matrix *stored = attn_ad_stored_weight(graph, weight);
    if (stored != NULL) {
        if (rows == 0)
            return ATTN_OK;
        void *scratch = attn_graph_alloc(graph, attn_quantized_linear_scratch_bytes(rows, stored));
        if (scratch == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                             "attn_ad_linear_rows: out of memory for %lld rows of "
                             "quantized activations",
                             (long long)rows);
        const quantized_linear_args args = {rows, x, ldx, stored, bias, y, ldy, scratch};
        attn_quantized_linear(&args);
        return ATTN_OK;
    }
    if (bias != NULL && ldy == out)
        attn_ad_fill_rows(rows, out, bias, y);
    else if (bias != NULL)
        for (int64_t r = 0; r < rows; r++)
            memcpy(y + r * ldy, bias, (size_t)out * sizeof(float));
    return times_weight(graph, ATTN_TRANS, rows, x, ldx, weight, bias != NULL ? 1.0f : 0.0f, y,
                        ldy);
}

typedef struct linear_ctx {
    attn_var *x, *weight, *bias;
} linear_ctx;

static attn_status linear_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    linear_ctx *ctx = raw;
    const int64_t rows = attn_ad_rows(ctx->x), in = attn_ad_last_dim(ctx->x);
    const int64_t out = ctx->weight->value.shape[0];
    const float *dy = output->grad;
    const attn_precision precision = attn_ad_product_precision(graph);
    float *dx, *dw, *db = NULL;
    int dx_accumulates;
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->x, &dx, &dx_accumulates));
    ATTN_TRY(attn_graph_grad(graph, ctx->weight, &dw));
    if (ctx->bias != NULL)
        ATTN_TRY(attn_graph_grad(graph, ctx->bias, &db));
    if (dx != NULL)
        ATTN_TRY(times_weight(graph, ATTN_NO_TRANS, rows, dy, out, ctx->weight,
                              dx_accumulates ? 1.0f : 0.0f, dx, in));
    if (dw != NULL)
        ATTN_TRY(attn_gemm_precision(precision, ATTN_TRANS, ATTN_NO_TRANS, out, in, rows, 1.0f, dy,
                                     out, ctx->x->value.data, in, 1.0f, dw, in));
    if (db != NULL)
        attn_ad_add_column_sums(rows, out, dy, db);
    return ATTN_OK;
}

attn_status attn_op_linear(attn_graph *graph, attn_var *x, attn_var *weight, attn_var *bias,
                           attn_var **out)
{
    const char *fn = __func__;
    char a[96], b[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_TRY(attn_ad_check_var(fn, "weight", weight));
    ATTN_CHECK_ARG(x->value.ndim >= 1, "%s: x must have at least one dimension", fn);
    ATTN_CHECK_ARG(weight->value.ndim == 2 && weight->value.shape[1] == attn_ad_last_dim(x),
                   "%s: weight %s does not fit x %s (expected [out, %lld])", fn,
                   attn_ad_shape_text(weight, a, sizeof a), attn_ad_shape_text(x, b, sizeof b),
                   (long long)attn_ad_last_dim(x));
    const int64_t rows = attn_ad_rows(x), in = attn_ad_last_dim(x);
    const int64_t features = weight->value.shape[0];
    if (bias != NULL) {
        ATTN_TRY(attn_ad_check_var(fn, "bias", bias));
        ATTN_CHECK_ARG(bias->value.ndim == 1 && bias->value.shape[0] == features,
                       "%s: bias %s does not fit weight %s", fn,
                       attn_ad_shape_text(bias, a, sizeof a),
                       attn_ad_shape_text(weight, b, sizeof b));
    }

    attn_var *inputs[3] = {x, weight, bias};
    const int wants = attn_graph_wants_grad(graph, 3, inputs);
    int64_t shape[ATTN_MAX_DIMS];
    memcpy(shape, x->value.shape, sizeof shape);
    shape[x->value.ndim - 1] = features;
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, x->value.ndim, shape, wants, &y));
    ATTN_TRY(attn_ad_linear_rows(graph, rows, x->value.data, in, weight,
                                 attn_ad_optional_data(bias), y->value.data, features));
    if (wants) {
        linear_ctx ctx = {x, weight, bias};
        ATTN_TRY(attn_ad_record(graph, 1, &y, linear_backward, &ctx, sizeof ctx, "linear"));
    }
    *out = y;
    return ATTN_OK;
}

/* ---- embedding --------------------------------------------------------------------------- */

typedef struct embedding_ctx {
    attn_var *table;
    int64_t tokens;
    const int32_t *ids;
    float scale;
} embedding_ctx;

static attn_status embedding_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    embedding_ctx *ctx = raw;
    float *dtable;
    ATTN_TRY(attn_graph_grad(graph, ctx->table, &dtable));
    return attn_embedding_backward(ctx->tokens, ctx->table->value.shape[0],
                                   ctx->table->value.shape[1], ctx->ids, ctx->scale, output->grad,
                                   dtable);
}

attn_status attn_op_embedding(attn_graph *graph, attn_var *table, int64_t rows, int64_t cols,
                              const int32_t *ids, int64_t ids_stride, float scale, attn_var **out)
{
    const char *fn = __func__;
    char a[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "table", table));
    ATTN_CHECK_ARG(table->value.ndim == 2, "%s: table must be [vocab, dim], got %s", fn,
                   attn_ad_shape_text(table, a, sizeof a));
    ATTN_CHECK_ARG(rows >= 0 && cols >= 0, "%s: negative size (rows=%lld, cols=%lld)", fn,
                   (long long)rows, (long long)cols);
    ATTN_CHECK_ARG(ids_stride >= cols, "%s: ids_stride %lld is below cols %lld", fn,
                   (long long)ids_stride, (long long)cols);
    ATTN_CHECK_ARG(isfinite(scale), "%s: scale must be finite", fn);
    ATTN_CHECK_ARG(cols == 0 || rows <= INT64_MAX / 8 / cols, "%s: too many ids", fn);
    const int64_t tokens = rows * cols, vocab = table->value.shape[0];
    const int64_t dim = table->value.shape[1];
    ATTN_CHECK_ARG(tokens == 0 || ids != NULL, "%s: ids must not be NULL", fn);

    int32_t *copy = attn_graph_alloc(graph, (size_t)tokens * sizeof *copy);
    if (copy == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) {
            int32_t id = ids[r * ids_stride + c];
            ATTN_CHECK_ARG(id >= 0 && id < vocab, "%s: ids[%lld, %lld] = %d is outside [0, %lld)",
                           fn, (long long)r, (long long)c, (int)id, (long long)vocab);
            copy[r * cols + c] = id;
        }

    attn_var *inputs[1] = {table};
    const int wants = attn_graph_wants_grad(graph, 1, inputs);
    const int64_t shape[3] = {rows, cols, dim};
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 3, shape, wants, &y));
    ATTN_TRY(
        attn_embedding_forward(tokens, vocab, dim, table->value.data, copy, scale, y->value.data));
    if (wants) {
        embedding_ctx ctx = {table, tokens, copy, scale};
        ATTN_TRY(attn_ad_record(graph, 1, &y, embedding_backward, &ctx, sizeof ctx, "embedding"));
    }
    *out = y;
    return ATTN_OK;
}

/* ---- additions --------------------------------------------------------------------------- */

typedef struct add_ctx {
    attn_var *a, *b;
} add_ctx;

static attn_status add_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    add_ctx *ctx = raw;
    const int64_t n = attn_tensor_numel(&output->value);
    float *da, *db;
    int accumulate;
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->a, &da, &accumulate));
    if (da != NULL)
        attn_ad_write_or_accumulate(n, output->grad, da, accumulate);
    if (ctx->b != NULL) {
        ATTN_TRY(attn_ad_grad_to_write(graph, ctx->b, &db, &accumulate));
        if (db != NULL)
            attn_ad_write_or_accumulate(n, output->grad, db, accumulate);
    }
    return ATTN_OK;
}

/* The arguments of an element-wise operation of two variables of one shape. */
static attn_status check_same_shape_operands(const char *fn, const attn_graph *graph,
                                             const attn_var *a, const attn_var *b, attn_var **out)
{
    char sa[96], sb[96];
    ATTN_CHECK_ARG(out != NULL, "%s: out must not be NULL", fn);
    *out = NULL;
    ATTN_CHECK_ARG(graph != NULL, "%s: graph must not be NULL", fn);
    ATTN_TRY(attn_ad_check_var(fn, "a", a));
    ATTN_TRY(attn_ad_check_var(fn, "b", b));
    ATTN_CHECK_ARG(attn_ad_same_shape(a, b), "%s: shapes differ: a %s, b %s", fn,
                   attn_ad_shape_text(a, sa, sizeof sa), attn_ad_shape_text(b, sb, sizeof sb));
    return ATTN_OK;
}

attn_status attn_op_add(attn_graph *graph, attn_var *a, attn_var *b, attn_var **out)
{
    const char *fn = __func__;
    ATTN_TRY(check_same_shape_operands(fn, graph, a, b, out));
    attn_var *inputs[2] = {a, b};
    const int wants = attn_graph_wants_grad(graph, 2, inputs);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, a->value.ndim, a->value.shape, wants, &y));
    attn_ad_add(attn_tensor_numel(&a->value), a->value.data, b->value.data, y->value.data);
    if (wants) {
        add_ctx ctx = {a, b};
        ATTN_TRY(attn_ad_record(graph, 1, &y, add_backward, &ctx, sizeof ctx, "add"));
    }
    *out = y;
    return ATTN_OK;
}

/* ---- element-wise product ------------------------------------------------------------------ */

typedef struct mul_ctx {
    attn_var *a, *b;
} mul_ctx;

typedef struct mul_job {
    const float *a, *b; /* forward: the factors; backward: the other factor and dy */
    float *out;
    int accumulate;
} mul_job;

static void mul_range(void *raw, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const mul_job *job = raw;
    for (int64_t i = begin; i < end; i++)
        job->out[i] = (job->accumulate ? job->out[i] : 0.0f) + job->a[i] * job->b[i];
}

/* out = a * b (accumulate 0) or out += a * b (1), over the threads. */
static void multiply(int64_t n, const float *a, const float *b, float *out, int accumulate)
{
    mul_job job = {a, b, out, accumulate};
    attn_parallel_for(n, 16384, mul_range, &job);
}

static attn_status mul_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    mul_ctx *ctx = raw;
    const int64_t n = attn_tensor_numel(&output->value);
    float *grad;
    int accumulate;
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->a, &grad, &accumulate));
    if (grad != NULL)
        multiply(n, ctx->b->value.data, output->grad, grad, accumulate);
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->b, &grad, &accumulate));
    if (grad != NULL)
        multiply(n, ctx->a->value.data, output->grad, grad, accumulate);
    return ATTN_OK;
}

attn_status attn_op_mul(attn_graph *graph, attn_var *a, attn_var *b, attn_var **out)
{
    const char *fn = __func__;
    ATTN_TRY(check_same_shape_operands(fn, graph, a, b, out));
    ATTN_CHECK_ARG(a != b,
                   "%s: a and b must be different variables (square with an activation "
                   "instead)",
                   fn);
    attn_var *inputs[2] = {a, b};
    const int wants = attn_graph_wants_grad(graph, 2, inputs);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, a->value.ndim, a->value.shape, wants, &y));
    multiply(attn_tensor_numel(&a->value), a->value.data, b->value.data, y->value.data, 0);
    if (wants) {
        mul_ctx ctx = {a, b};
        ATTN_TRY(attn_ad_record(graph, 1, &y, mul_backward, &ctx, sizeof ctx, "mul"));
    }
    *out = y;
    return ATTN_OK;
}

typedef struct position_job {
    int64_t len, dim;
    const float *x, *table;
    float *y;
} position_job;

static void add_position_range(void *raw, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const position_job *job = raw;
    for (int64_t r = begin; r < end; r++) {
        const float *x = job->x + r * job->dim, *pe = job->table + (r % job->len) * job->dim;
        float *y = job->y + r * job->dim;
        for (int64_t c = 0; c < job->dim; c++)
            y[c] = x[c] + pe[c];
    }
}

attn_status attn_op_add_position_table(attn_graph *graph, attn_var *x, const float *table,
                                       int64_t table_rows, attn_var **out)
{
    const char *fn = __func__;
    char a[96];
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG(x->value.ndim == 3, "%s: x must be [batch, len, dim], got %s", fn,
                   attn_ad_shape_text(x, a, sizeof a));
    const int64_t len = x->value.shape[1], dim = x->value.shape[2];
    ATTN_CHECK_ARG(len <= table_rows, "%s: sequence length %lld exceeds the table's %lld positions",
                   fn, (long long)len, (long long)table_rows);
    ATTN_CHECK_ARG(len * dim == 0 || table != NULL, "%s: table must not be NULL", fn);
    attn_var *inputs[1] = {x};
    const int wants = attn_graph_wants_grad(graph, 1, inputs);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, 3, x->value.shape, wants, &y));
    if (len > 0 && dim > 0) {
        position_job job = {len, dim, x->value.data, table, y->value.data};
        attn_parallel_for(x->value.shape[0] * len, 1 + 16384 / dim, add_position_range, &job);
    }
    if (wants) {
        add_ctx ctx = {x, NULL};
        ATTN_TRY(
            attn_ad_record(graph, 1, &y, add_backward, &ctx, sizeof ctx, "add_position_table"));
    }
    *out = y;
    return ATTN_OK;
}

/* ---- activation -------------------------------------------------------------------------- */

typedef struct activation_ctx {
    attn_var *x;
    attn_activation act;
} activation_ctx;

static attn_status activation_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    activation_ctx *ctx = raw;
    float *dx;
    int accumulate;
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->x, &dx, &accumulate));
    return attn_activation_backward_to(ctx->act, attn_tensor_numel(&output->value),
                                       ctx->x->value.data, output->grad, dx, accumulate);
}

attn_status attn_op_activation(attn_graph *graph, attn_var *x, attn_activation act, attn_var **out)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG((int)act >= ATTN_ACT_RELU && (int)act <= ATTN_ACT_SILU,
                   "%s: unknown activation %d", fn, (int)act);
    attn_var *inputs[1] = {x};
    const int wants = attn_graph_wants_grad(graph, 1, inputs);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, x->value.ndim, x->value.shape, wants, &y));
    ATTN_TRY(
        attn_activation_forward(act, attn_tensor_numel(&x->value), x->value.data, y->value.data));
    if (wants) {
        activation_ctx ctx = {x, act};
        ATTN_TRY(attn_ad_record(graph, 1, &y, activation_backward, &ctx, sizeof ctx, "activation"));
    }
    *out = y;
    return ATTN_OK;
}

/* ---- dropout ----------------------------------------------------------------------------- */

typedef struct dropout_ctx {
    attn_var *x;
    float p;
    const uint8_t *keep_bits; /* the forward's mask, in the arena: the backward does not hash */
} dropout_ctx;

static attn_status dropout_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    dropout_ctx *ctx = raw;
    float *dx;
    int accumulate;
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->x, &dx, &accumulate));
    return attn_dropout_backward_bits_to(attn_tensor_numel(&output->value), ctx->p, ctx->keep_bits,
                                         output->grad, dx, accumulate);
}

attn_status attn_op_dropout(attn_graph *graph, attn_var *x, float p, attn_var **out)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG(p >= 0.0f && p < 1.0f, "%s: p must be in [0, 1), got %g", fn, (double)p);
    if (!attn_graph_is_training(graph) || p == 0.0f) {
        *out = x;
        return ATTN_OK;
    }
    attn_var *inputs[1] = {x};
    const int wants = attn_graph_wants_grad(graph, 1, inputs);
    const uint64_t seed = attn_graph_next_dropout_seed(graph);
    const int64_t n = attn_tensor_numel(&x->value);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, x->value.ndim, x->value.shape, wants, &y));
    if (!wants) {
        ATTN_TRY(attn_dropout_forward(n, p, seed, 0, x->value.data, y->value.data, NULL));
        *out = y;
        return ATTN_OK;
    }
    uint8_t *keep_bits = attn_graph_alloc(graph, (size_t)(n + 7) / 8);
    if (keep_bits == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    ATTN_TRY(attn_dropout_forward_bits(n, p, seed, 0, x->value.data, y->value.data, keep_bits));
    dropout_ctx ctx = {x, p, keep_bits};
    ATTN_TRY(attn_ad_record(graph, 1, &y, dropout_backward, &ctx, sizeof ctx, "dropout"));
    *out = y;
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
    if (wants)
        ATTN_TRY(attn_ad_record(graph, 1, &y, concat_backward, &ctx, sizeof ctx,
                                stack ? "stack" : "concat"));
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
        gather_ctx ctx = {x, copy, first, count};
        ATTN_TRY(
            attn_ad_record(graph, 1, &y, gather_backward, &ctx, sizeof ctx, "gather_positions"));
    }
    *out = y;
    return ATTN_OK;
}
