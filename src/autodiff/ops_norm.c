/* Layer norm on the tape, alone or fused with the residual addition before it, and RMSNorm. The
 * kernels (attn_layer_norm_*) dispatch on the instruction set; the residual sum only streams
 * memory. */
#include "autodiff/autodiff_internal.h"
#include "kernels/elementwise.h"

#include <math.h>

typedef struct layer_norm_ctx {
    attn_var *x, *residual, *gamma, *beta;
    const float *input; /* what was normalised: x, or x + residual */
    float *mean, *rstd;
} layer_norm_ctx;

/* The checks every norm makes: out and graph, x with a last dimension, gamma (NULL: none) of
 * that size, a finite eps >= 0. */
static attn_status check_norm_arguments(const char *fn, const attn_graph *graph, const attn_var *x,
                                        const attn_var *gamma, float eps, attn_var **out)
{
    char a[96];
    ATTN_CHECK_ARG(out != NULL, "%s: out must not be NULL", fn);
    *out = NULL;
    ATTN_CHECK_ARG(graph != NULL, "%s: graph must not be NULL", fn);
    ATTN_TRY(attn_ad_check_var(fn, "x", x));
    ATTN_CHECK_ARG(x->value.ndim >= 1 && attn_ad_last_dim(x) >= 1,
                   "%s: x needs a last dimension of at least 1, got %s", fn,
                   attn_ad_shape_text(x, a, sizeof a));
    if (gamma != NULL) {
        ATTN_TRY(attn_ad_check_var(fn, "gamma", gamma));
        ATTN_CHECK_ARG(gamma->value.ndim == 1 && gamma->value.shape[0] == attn_ad_last_dim(x),
                       "%s: gamma %s must be [%lld]", fn, attn_ad_shape_text(gamma, a, sizeof a),
                       (long long)attn_ad_last_dim(x));
    }
    ATTN_CHECK_ARG(isfinite(eps) && eps >= 0.0f, "%s: eps must be finite and >= 0, got %g", fn,
                   (double)eps);
    return ATTN_OK;
}

static attn_status layer_norm_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    layer_norm_ctx *ctx = raw;
    const int64_t rows = attn_ad_rows(output), dim = attn_ad_last_dim(output);
    float *dx, *dres = NULL, *dgamma = NULL, *dbeta = NULL;
    int dx_accumulates, dres_accumulates = 1;
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->x, &dx, &dx_accumulates));
    if (ctx->residual != NULL)
        ATTN_TRY(attn_ad_grad_to_write(graph, ctx->residual, &dres, &dres_accumulates));
    if (ctx->gamma != NULL)
        ATTN_TRY(attn_graph_grad(graph, ctx->gamma, &dgamma));
    if (ctx->beta != NULL)
        ATTN_TRY(attn_graph_grad(graph, ctx->beta, &dbeta));
    /* The kernel puts the input's gradient straight into x's or the residual's: one nothing
     * has reached yet (written), or the only one wanted (added to); the other then takes a
     * copy of the written gradient or adds it. Scratch only when both were reached before, or
     * neither is wanted. (When x is the residual, dres is dx and adds the written gradient to
     * itself.) */
    float *dinput;
    int dinput_accumulates = 0;
    if (dx != NULL && (!dx_accumulates || dres == NULL)) {
        dinput = dx;
        dinput_accumulates = dx_accumulates;
        dx = NULL;
    } else if (dres != NULL && (!dres_accumulates || dx == NULL)) {
        dinput = dres;
        dinput_accumulates = dres_accumulates;
        dres = NULL;
    } else {
        dinput = attn_graph_alloc_floats(graph, (size_t)(rows * dim));
        if (dinput == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
    }
    ATTN_TRY(attn_layer_norm_backward_to(
        rows, dim, ctx->input, ctx->gamma ? ctx->gamma->value.data : NULL, ctx->mean, ctx->rstd,
        output->grad, dinput, dgamma, dbeta, dinput_accumulates));
    if (dx != NULL)
        attn_ad_write_or_accumulate(rows * dim, dinput, dx, dx_accumulates);
    if (dres != NULL)
        attn_ad_write_or_accumulate(rows * dim, dinput, dres, dres_accumulates);
    return ATTN_OK;
}

static attn_status layer_norm(const char *fn, attn_graph *graph, attn_var *x, attn_var *residual,
                              attn_var *gamma, attn_var *beta, float eps, attn_var **out)
{
    char a[96], b[96];
    ATTN_TRY(check_norm_arguments(fn, graph, x, gamma, eps, out));
    if (residual != NULL) {
        ATTN_TRY(attn_ad_check_var(fn, "residual", residual));
        ATTN_CHECK_ARG(attn_ad_same_shape(x, residual), "%s: shapes differ: x %s, residual %s", fn,
                       attn_ad_shape_text(x, a, sizeof a),
                       attn_ad_shape_text(residual, b, sizeof b));
    }
    ATTN_CHECK_ARG(gamma != NULL || beta == NULL,
                   "%s: beta needs gamma (give gamma alone for a LayerNorm without bias)", fn);
    const int64_t rows = attn_ad_rows(x), dim = attn_ad_last_dim(x);
    if (beta != NULL) {
        ATTN_TRY(attn_ad_check_var(fn, "beta", beta));
        ATTN_CHECK_ARG(beta->value.ndim == 1 && beta->value.shape[0] == dim,
                       "%s: beta %s must be [%lld]", fn, attn_ad_shape_text(beta, b, sizeof b),
                       (long long)dim);
    }

    attn_var *inputs[4] = {x, residual, gamma, beta};
    const int wants = attn_graph_wants_grad(graph, 4, inputs);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, x->value.ndim, x->value.shape, wants, &y));
    const float *input = x->value.data;
    if (residual != NULL) {
        /* The sum is what gets normalised, and what the backward reads. */
        float *sum = attn_graph_alloc_floats(graph, (size_t)(rows * dim));
        if (sum == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        attn_ad_add(rows * dim, x->value.data, residual->value.data, sum);
        input = sum;
    }
    float *mean = NULL, *rstd = NULL;
    if (wants) {
        mean = attn_graph_alloc_floats(graph, (size_t)rows);
        rstd = attn_graph_alloc_floats(graph, (size_t)rows);
        if (mean == NULL || rstd == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
    }
    ATTN_TRY(attn_layer_norm_forward(rows, dim, input, gamma ? gamma->value.data : NULL,
                                     beta ? beta->value.data : NULL, eps, y->value.data, mean,
                                     rstd));
    if (wants) {
        layer_norm_ctx ctx = {x, residual, gamma, beta, input, mean, rstd};
        ATTN_TRY(attn_ad_record(graph, 1, &y, layer_norm_backward, &ctx, sizeof ctx,
                                residual ? "add_layer_norm" : "layer_norm"));
    }
    *out = y;
    return ATTN_OK;
}

attn_status attn_op_layer_norm(attn_graph *graph, attn_var *x, attn_var *gamma, attn_var *beta,
                               float eps, attn_var **out)
{
    return layer_norm(__func__, graph, x, NULL, gamma, beta, eps, out);
}

attn_status attn_op_add_layer_norm(attn_graph *graph, attn_var *x, attn_var *residual,
                                   attn_var *gamma, attn_var *beta, float eps, attn_var **out)
{
    ATTN_CHECK_ARG(residual != NULL, "attn_op_add_layer_norm: residual must not be NULL");
    return layer_norm(__func__, graph, x, residual, gamma, beta, eps, out);
}

/* ---- RMSNorm ----------------------------------------------------------------------------- */

typedef struct rms_norm_ctx {
    attn_var *x, *gamma;
    float *rstd;
} rms_norm_ctx;

static attn_status rms_norm_backward(attn_graph *graph, const attn_var *output, void *raw)
{
    rms_norm_ctx *ctx = raw;
    const int64_t rows = attn_ad_rows(output), dim = attn_ad_last_dim(output);
    float *dx, *dgamma = NULL;
    int dx_accumulates;
    ATTN_TRY(attn_ad_grad_to_write(graph, ctx->x, &dx, &dx_accumulates));
    if (ctx->gamma != NULL)
        ATTN_TRY(attn_graph_grad(graph, ctx->gamma, &dgamma));
    if (dx == NULL) { /* only gamma wants a gradient: x's goes to scratch */
        dx = attn_graph_alloc_floats(graph, (size_t)(rows * dim));
        if (dx == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        dx_accumulates = 0;
    }
    return attn_rms_norm_backward_to(rows, dim, ctx->x->value.data,
                                     ctx->gamma ? ctx->gamma->value.data : NULL, ctx->rstd,
                                     output->grad, dx, dgamma, dx_accumulates);
}

attn_status attn_op_rms_norm(attn_graph *graph, attn_var *x, attn_var *gamma, float eps,
                             attn_var **out)
{
    const char *fn = __func__;
    ATTN_TRY(check_norm_arguments(fn, graph, x, gamma, eps, out));
    const int64_t rows = attn_ad_rows(x), dim = attn_ad_last_dim(x);
    attn_var *inputs[2] = {x, gamma};
    const int wants = attn_graph_wants_grad(graph, 2, inputs);
    attn_var *y;
    ATTN_TRY(attn_graph_new_var(graph, x->value.ndim, x->value.shape, wants, &y));
    float *rstd = NULL;
    if (wants && (rstd = attn_graph_alloc_floats(graph, (size_t)rows)) == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    ATTN_TRY(attn_rms_norm_forward(rows, dim, x->value.data, gamma ? gamma->value.data : NULL, eps,
                                   y->value.data, rstd));
    if (wants) {
        rms_norm_ctx ctx = {x, gamma, rstd};
        ATTN_TRY(attn_ad_record(graph, 1, &y, rms_norm_backward, &ctx, sizeof ctx, "rms_norm"));
    }
    *out = y;
    return ATTN_OK;
}
