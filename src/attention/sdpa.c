/* Scaled dot-product attention: argument checks, dispatch, and the scalar reference.
 *
 * ATTN_ISA_REFERENCE runs the reference below; every other instruction set runs the tiled
 * flash-attention algorithm (sdpa_tiled.c) with its own kernels. The reference is the
 * textbook formula in double precision, one row of scores at a time, and is what the tests
 * compare every optimized version with: the float entry points copy the (possibly strided)
 * views into contiguous doubles, run it, and copy the results back. */
#include "attention/sdpa_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

attn_sdpa_options attn_sdpa_default_options(void)
{
    attn_sdpa_options options;
    memset(&options, 0, sizeof options);
    options.window = -1;
    options.precision = ATTN_PRECISION_FP32;
    return options;
}

/* ---- double-precision reference ------------------------------------------------------- */

/* x as an operand of a product: rounded to bfloat16 in the bf16 precision. */
static double operand(const sdpa_problem *p, double x)
{
    return p->precision == ATTN_PRECISION_BF16 ? (double)attn_bf16_round((float)x) : x;
}

/* Fills scores[0..Lk) with the scaled, masked scores of query row i (-INFINITY where a mask
 * excludes the pair) and returns their maximum. */
static double reference_score_row(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                                  const double *q_row, const double *k_head, double *scores)
{
    const uint8_t *padding_row =
        p->key_padding_mask != NULL ? p->key_padding_mask + b * p->len_k : NULL;
    const float *mask_row = sdpa_attn_mask_row(p, b, h, i);
    double max = -INFINITY;
    for (int64_t j = 0; j < p->len_k; j++) {
        scores[j] = -INFINITY;
        if (!sdpa_pair_allowed(p, padding_row, i, j))
            continue;
        if (mask_row != NULL && mask_row[j] == -INFINITY)
            continue;
        double dot = 0;
        for (int64_t x = 0; x < p->dim; x++)
            dot += operand(p, q_row[x]) * operand(p, k_head[j * p->dim + x]);
        scores[j] = dot * (double)p->scale + (mask_row != NULL ? (double)mask_row[j] : 0.0);
        if (scores[j] > max)
            max = scores[j];
    }
    return max;
}

/* out_row [dv] = sum_j softmax(scores)_j v_j for a row whose maximum score is max > -inf.
 * In bf16 the unnormalised probabilities exp(s - max) are rounded as operands of P V and
 * the sum divides afterwards, as the tiled kernels do. */
static void reference_output_row(const sdpa_problem *p, const double *scores, double max,
                                 const double *v_head, double *out_row)
{
    double sum = 0;
    for (int64_t x = 0; x < p->dim_v; x++)
        out_row[x] = 0;
    for (int64_t j = 0; j < p->len_k; j++) {
        const double weight = exp(scores[j] - max);
        sum += weight;
        for (int64_t x = 0; x < p->dim_v; x++)
            out_row[x] += operand(p, weight) * operand(p, v_head[j * p->dim_v + x]);
    }
    for (int64_t x = 0; x < p->dim_v; x++)
        out_row[x] /= sum;
}

/* Turns the scores of one row into probabilities in place; returns the log-sum-exp. */
static double reference_softmax_row(double *scores, int64_t len, double max)
{
    double sum = 0;
    for (int64_t j = 0; j < len; j++)
        sum += exp(scores[j] - max);
    for (int64_t j = 0; j < len; j++)
        scores[j] = exp(scores[j] - max) / sum;
    return max + log(sum);
}

static double *alloc_doubles(int64_t count)
{
    size_t bytes;
    if (!attn_mul_size((size_t)count, sizeof(double), &bytes))
        return NULL;
    double *p = malloc(bytes > 0 ? bytes : 1);
    if (p == NULL)
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "sdpa reference: cannot allocate %zu bytes", bytes);
    return p;
}

attn_status attn_sdpa_reference_forward_f64(const sdpa_problem *p, const double *q, const double *k,
                                            const double *v, double *out, double *lse,
                                            double *weights)
{
    double *probs = alloc_doubles(p->len_k);
    if (probs == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++) {
            int64_t head = b * p->heads + h;
            const double *k_head = k + head * p->len_k * p->dim;
            const double *v_head = v + head * p->len_k * p->dim_v;
            for (int64_t i = 0; i < p->len_q; i++) {
                int64_t row = head * p->len_q + i;
                double max = reference_score_row(p, b, h, i, q + row * p->dim, k_head, probs);
                double *out_row = out + row * p->dim_v;
                for (int64_t x = 0; x < p->dim_v; x++)
                    out_row[x] = 0;
                if (max == -INFINITY) {
                    /* Every key excluded: zeros, not the NaN of 0/0. */
                    for (int64_t j = 0; j < p->len_k; j++)
                        probs[j] = 0;
                    if (lse != NULL)
                        lse[row] = -INFINITY;
                } else if (p->precision == ATTN_PRECISION_BF16) {
                    reference_output_row(p, probs, max, v_head, out_row);
                    double row_lse = reference_softmax_row(probs, p->len_k, max);
                    if (lse != NULL)
                        lse[row] = row_lse;
                } else {
                    double row_lse = reference_softmax_row(probs, p->len_k, max);
                    if (lse != NULL)
                        lse[row] = row_lse;
                    for (int64_t j = 0; j < p->len_k; j++)
                        for (int64_t x = 0; x < p->dim_v; x++)
                            out_row[x] += probs[j] * v_head[j * p->dim_v + x];
                }
                if (weights != NULL)
                    memcpy(weights + row * p->len_k, probs, (size_t)p->len_k * sizeof(double));
            }
        }
    free(probs);
    return ATTN_OK;
}

attn_status attn_sdpa_reference_backward_f64(const sdpa_problem *p, const double *q,
                                             const double *k, const double *v,
                                             const double *grad_out, double *dq, double *dk,
                                             double *dv)
{
    double *probs = alloc_doubles(p->len_k);
    double *grad_probs = alloc_doubles(p->len_k);
    double *out_row = alloc_doubles(p->dim_v);
    if (probs == NULL || grad_probs == NULL || out_row == NULL) {
        free(probs);
        free(grad_probs);
        free(out_row);
        return ATTN_ERR_OUT_OF_MEMORY;
    }
    const double scale = (double)p->scale;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++) {
            int64_t head = b * p->heads + h;
            const double *k_head = k + head * p->len_k * p->dim;
            const double *v_head = v + head * p->len_k * p->dim_v;
            double *dk_head = dk + head * p->len_k * p->dim;
            double *dv_head = dv + head * p->len_k * p->dim_v;
            for (int64_t i = 0; i < p->len_q; i++) {
                int64_t row = head * p->len_q + i;
                const double *q_row = q + row * p->dim;
                const double *grad_row = grad_out + row * p->dim_v;
                double *dq_row = dq + row * p->dim;
                double max = reference_score_row(p, b, h, i, q_row, k_head, probs);
                if (max == -INFINITY)
                    continue; /* a fully masked row has zero output whatever the inputs */
                const int bf16 = p->precision == ATTN_PRECISION_BF16;
                if (bf16)
                    reference_output_row(p, probs, max, v_head, out_row);
                reference_softmax_row(probs, p->len_k, max);
                /* dP = dO V^T; the softmax Jacobian gives dS = P * (dP - sum_j P dP). In bf16,
                 * sum_j P dP is taken as dO . O (what the kernels compute from the forward's
                 * output), which differs from it by the rounding of the operands. */
                double weighted = 0;
                for (int64_t j = 0; j < p->len_k; j++) {
                    double dot = 0;
                    for (int64_t x = 0; x < p->dim_v; x++)
                        dot += operand(p, grad_row[x]) * operand(p, v_head[j * p->dim_v + x]);
                    grad_probs[j] = dot;
                    weighted += probs[j] * dot;
                }
                if (bf16) {
                    weighted = 0;
                    for (int64_t x = 0; x < p->dim_v; x++)
                        weighted += grad_row[x] * out_row[x];
                }
                for (int64_t j = 0; j < p->len_k; j++) {
                    if (probs[j] == 0)
                        continue;
                    double grad_score = operand(p, probs[j] * (grad_probs[j] - weighted) * scale);
                    double prob = operand(p, probs[j]);
                    for (int64_t x = 0; x < p->dim; x++) {
                        dq_row[x] += grad_score * operand(p, k_head[j * p->dim + x]);
                        dk_head[j * p->dim + x] += grad_score * operand(p, q_row[x]);
                    }
                    for (int64_t x = 0; x < p->dim_v; x++)
                        dv_head[j * p->dim_v + x] += prob * operand(p, grad_row[x]);
                }
            }
        }
    free(probs);
    free(grad_probs);
    free(out_row);
    return ATTN_OK;
}

/* ---- float reference: copy views to contiguous doubles and back ----------------------- */

static void gather(const sdpa_view *view, const sdpa_problem *p, int64_t len, int64_t width,
                   double *dst)
{
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t l = 0; l < len; l++) {
                const float *src = view->data + b * view->batch_stride + h * view->head_stride +
                                   l * view->row_stride;
                for (int64_t x = 0; x < width; x++)
                    *dst++ = src[x];
            }
}

/* Stores src into the view, or adds it (rounding the sum once) when accumulate is set. */
static void scatter(const double *src, const sdpa_problem *p, int64_t len, int64_t width,
                    const sdpa_view *view, int accumulate)
{
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t h = 0; h < p->heads; h++)
            for (int64_t l = 0; l < len; l++) {
                float *dst = view->data + b * view->batch_stride + h * view->head_stride +
                             l * view->row_stride;
                for (int64_t x = 0; x < width; x++, src++)
                    dst[x] = (float)(accumulate ? (double)dst[x] + *src : *src);
            }
}

static attn_status reference_forward(const sdpa_problem *p)
{
    int64_t heads = p->batch * p->heads;
    double *q = alloc_doubles(heads * p->len_q * p->dim);
    double *k = alloc_doubles(heads * p->len_k * p->dim);
    double *v = alloc_doubles(heads * p->len_k * p->dim_v);
    double *out = alloc_doubles(heads * p->len_q * p->dim_v);
    double *lse = alloc_doubles(heads * p->len_q);
    double *weights = p->weights != NULL ? alloc_doubles(heads * p->len_q * p->len_k) : NULL;
    attn_status status = ATTN_ERR_OUT_OF_MEMORY;
    if (q != NULL && k != NULL && v != NULL && out != NULL && lse != NULL &&
        (p->weights == NULL || weights != NULL)) {
        gather(&p->q, p, p->len_q, p->dim, q);
        gather(&p->k, p, p->len_k, p->dim, k);
        gather(&p->v, p, p->len_k, p->dim_v, v);
        status = attn_sdpa_reference_forward_f64(p, q, k, v, out, lse, weights);
    }
    if (status == ATTN_OK) {
        scatter(out, p, p->len_q, p->dim_v, &p->out, 0);
        if (p->lse != NULL)
            for (int64_t r = 0; r < heads * p->len_q; r++)
                p->lse[r] = (float)lse[r];
        if (p->weights != NULL)
            for (int64_t r = 0; r < heads * p->len_q * p->len_k; r++)
                p->weights[r] = (float)weights[r];
    }
    free(q);
    free(k);
    free(v);
    free(out);
    free(lse);
    free(weights);
    return status;
}

static attn_status reference_backward(const sdpa_problem *p)
{
    int64_t heads = p->batch * p->heads;
    int64_t q_count = heads * p->len_q * p->dim, k_count = heads * p->len_k * p->dim;
    int64_t v_count = heads * p->len_k * p->dim_v;
    double *q = alloc_doubles(q_count), *k = alloc_doubles(k_count), *v = alloc_doubles(v_count);
    double *grad_out = alloc_doubles(heads * p->len_q * p->dim_v);
    double *dq = alloc_doubles(q_count), *dk = alloc_doubles(k_count);
    double *dv = alloc_doubles(v_count);
    attn_status status = ATTN_ERR_OUT_OF_MEMORY;
    if (q != NULL && k != NULL && v != NULL && grad_out != NULL && dq != NULL && dk != NULL &&
        dv != NULL) {
        gather(&p->q, p, p->len_q, p->dim, q);
        gather(&p->k, p, p->len_k, p->dim, k);
        gather(&p->v, p, p->len_k, p->dim_v, v);
        gather(&p->grad_out, p, p->len_q, p->dim_v, grad_out);
        memset(dq, 0, (size_t)q_count * sizeof(double));
        memset(dk, 0, (size_t)k_count * sizeof(double));
        memset(dv, 0, (size_t)v_count * sizeof(double));
        status = attn_sdpa_reference_backward_f64(p, q, k, v, grad_out, dq, dk, dv);
    }
    if (status == ATTN_OK) {
        scatter(dq, p, p->len_q, p->dim, &p->dq, 1);
        scatter(dk, p, p->len_k, p->dim, &p->dk, 1);
        scatter(dv, p, p->len_k, p->dim_v, &p->dv, 1);
    }
    free(q);
    free(k);
    free(v);
    free(grad_out);
    free(dq);
    free(dk);
    free(dv);
    return status;
}

/* ---- argument checks ------------------------------------------------------------------ */

static attn_status check_view(const char *fn, const char *name, const attn_tensor *t,
                              sdpa_view *view)
{
    ATTN_CHECK_ARG(t != NULL, "%s: %s must not be NULL", fn, name);
    ATTN_CHECK_ARG(t->ndim == 4, "%s: %s must be 4-D [batch, heads, len, dim], got %d dims", fn,
                   name, t->ndim);
    int empty = 0;
    for (int axis = 0; axis < 4; axis++) {
        ATTN_CHECK_ARG(t->shape[axis] >= 0, "%s: %s has negative size %lld in dim %d", fn, name,
                       (long long)t->shape[axis], axis);
        empty |= t->shape[axis] == 0;
    }
    ATTN_CHECK_ARG(t->stride[3] == 1,
                   "%s: %s must have a contiguous last dimension (stride 1), got stride %lld", fn,
                   name, (long long)t->stride[3]);
    ATTN_CHECK_ARG(empty || t->data != NULL, "%s: %s->data must not be NULL", fn, name);
    view->data = t->data;
    view->batch_stride = t->stride[0];
    view->head_stride = t->stride[1];
    view->row_stride = t->stride[2];
    return ATTN_OK;
}

static attn_status check_shape(const char *fn, const char *name, const attn_tensor *t, int64_t b,
                               int64_t h, int64_t len, int64_t width)
{
    ATTN_CHECK_ARG(
        t->shape[0] == b && t->shape[1] == h && t->shape[2] == len && t->shape[3] == width,
        "%s: %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld, %lld, %lld]", fn, name,
        (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2],
        (long long)t->shape[3], (long long)b, (long long)h, (long long)len, (long long)width);
    return ATTN_OK;
}

/* Checks q, k, v, the options and out, and fills everything in p but the backward views. */
static attn_status check_common(const char *fn, const attn_tensor *q, const attn_tensor *k,
                                const attn_tensor *v, const attn_sdpa_options *options,
                                const attn_tensor *out, sdpa_problem *p)
{
    memset(p, 0, sizeof *p);
    ATTN_TRY(check_view(fn, "q", q, &p->q));
    ATTN_TRY(check_view(fn, "k", k, &p->k));
    ATTN_TRY(check_view(fn, "v", v, &p->v));
    ATTN_TRY(check_view(fn, "out", out, &p->out));
    p->batch = q->shape[0];
    p->heads = q->shape[1];
    p->len_q = q->shape[2];
    p->dim = q->shape[3];
    p->len_k = k->shape[2];
    p->dim_v = v->shape[3];
    ATTN_TRY(check_shape(fn, "k", k, p->batch, p->heads, p->len_k, p->dim));
    ATTN_TRY(check_shape(fn, "v", v, p->batch, p->heads, p->len_k, p->dim_v));
    ATTN_TRY(check_shape(fn, "out", out, p->batch, p->heads, p->len_q, p->dim_v));

    attn_sdpa_options defaults = attn_sdpa_default_options();
    if (options == NULL)
        options = &defaults;
    ATTN_CHECK_ARG(isfinite(options->scale), "%s: options->scale must be finite, got %g", fn,
                   (double)options->scale);
    ATTN_CHECK_ARG(options->causal == 0 || options->causal == 1,
                   "%s: options->causal must be 0 or 1, got %d", fn, options->causal);
    ATTN_CHECK_ARG(options->attn_mask_per_head == 0 || options->attn_mask_per_head == 1,
                   "%s: options->attn_mask_per_head must be 0 or 1, got %d", fn,
                   options->attn_mask_per_head);
    ATTN_CHECK_ARG(!options->attn_mask_per_head || options->attn_mask != NULL,
                   "%s: options->attn_mask_per_head is set but options->attn_mask is NULL", fn);
    p->scale = options->scale != 0.0f ? options->scale
               : p->dim > 0           ? (float)(1.0 / sqrt((double)p->dim))
                                      : 1.0f;
    p->causal = options->causal;
    /* A window at least as wide as both lengths excludes nothing. */
    int window_covers_all = options->window >= p->len_q && options->window >= p->len_k;
    p->window = options->window < 0 || window_covers_all ? -1 : options->window;
    p->key_padding_mask = options->key_padding_mask;
    p->attn_mask = options->attn_mask;
    p->attn_mask_per_head = options->attn_mask_per_head;
    ATTN_CHECK_ARG(options->precision == ATTN_PRECISION_FP32 ||
                       options->precision == ATTN_PRECISION_BF16,
                   "%s: options->precision must be fp32 or bf16, got %s (%d)", fn,
                   attn_precision_name(options->precision), (int)options->precision);
    p->precision = options->precision;
    return ATTN_OK;
}

/* ---- entry points --------------------------------------------------------------------- */

attn_status attn_sdpa_forward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                              const attn_sdpa_options *options, attn_tensor *out, float *lse,
                              float *weights)
{
    sdpa_problem p;
    ATTN_TRY(check_common(__func__, q, k, v, options, out, &p));
    if (p.batch == 0 || p.heads == 0 || p.len_q == 0)
        return ATTN_OK;
    p.lse = lse;
    p.weights = p.len_k > 0 ? weights : NULL;
    const sdpa_kernels *kern = attn_sdpa_kernels_for(attn_active_isa());
    return kern != NULL ? attn_sdpa_tiled_forward(&p, kern) : reference_forward(&p);
}

attn_status attn_sdpa_backward(const attn_tensor *q, const attn_tensor *k, const attn_tensor *v,
                               const attn_sdpa_options *options, const attn_tensor *out,
                               const float *lse, const attn_tensor *grad_out, attn_tensor *dq,
                               attn_tensor *dk, attn_tensor *dv)
{
    const char *fn = __func__;
    sdpa_problem p;
    ATTN_TRY(check_common(fn, q, k, v, options, out, &p));
    ATTN_TRY(check_view(fn, "grad_out", grad_out, &p.grad_out));
    ATTN_TRY(check_view(fn, "dq", dq, &p.dq));
    ATTN_TRY(check_view(fn, "dk", dk, &p.dk));
    ATTN_TRY(check_view(fn, "dv", dv, &p.dv));
    ATTN_TRY(check_shape(fn, "grad_out", grad_out, p.batch, p.heads, p.len_q, p.dim_v));
    ATTN_TRY(check_shape(fn, "dq", dq, p.batch, p.heads, p.len_q, p.dim));
    ATTN_TRY(check_shape(fn, "dk", dk, p.batch, p.heads, p.len_k, p.dim));
    ATTN_TRY(check_shape(fn, "dv", dv, p.batch, p.heads, p.len_k, p.dim_v));
    if (p.batch == 0 || p.heads == 0 || p.len_q == 0 || p.len_k == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(lse != NULL, "%s: lse must not be NULL (pass the forward's lse)", fn);
    p.saved_lse = lse;
    const sdpa_kernels *kern = attn_sdpa_kernels_for(attn_active_isa());
    return kern != NULL ? attn_sdpa_tiled_backward(&p, kern) : reference_backward(&p);
}
