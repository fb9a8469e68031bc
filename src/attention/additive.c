/* Additive attention (Bahdanau et al. 2015): argument checks, the projections (attn_gemm)
 * and the reductions over the batch; the row loops are in classic_rows.c. */
#include "attention/classic_internal.h"
#include "attn/attn_kernels.h"

static int dims_valid(const attn_additive_dims *d)
{
    if (d == NULL || d->batch < 0 || d->src_len < 0 || d->query_dim < 1 || d->key_dim < 1 ||
        d->value_dim < 1 || d->attn_dim < 1)
        return 0;
    int64_t b = d->batch, lk = d->src_len, da = d->attn_dim;
    return attn_classic_count_fits(b, lk, d->key_dim) &&
           attn_classic_count_fits(b, lk, d->value_dim) && attn_classic_count_fits(b, lk, da) &&
           attn_classic_count_fits(b, d->query_dim, 1) && attn_classic_count_fits(b, da, 1) &&
           attn_classic_count_fits(da, d->query_dim, 1) &&
           attn_classic_count_fits(da, d->key_dim, 1);
}

static attn_status check_dims(const char *fn, const attn_additive_dims *dims)
{
    ATTN_CLASSIC_NOT_NULL(fn, dims);
    const attn_additive_dims *d = dims;
    if (d->precision != ATTN_PRECISION_FP32 && d->precision != ATTN_PRECISION_BF16)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: precision %d: additive attention multiplies in fp32 or bf16", fn,
                         (int)d->precision);
    if (!dims_valid(d))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: bad sizes batch=%lld src_len=%lld query_dim=%lld key_dim=%lld "
                         "value_dim=%lld attn_dim=%lld (batch and src_len must be >= 0, the "
                         "others >= 1, and their products below 2^60)",
                         fn, (long long)d->batch, (long long)d->src_len, (long long)d->query_dim,
                         (long long)d->key_dim, (long long)d->value_dim, (long long)d->attn_dim);
    return ATTN_OK;
}

static attn_status check_params(const char *fn, const attn_additive_params *params)
{
    ATTN_CLASSIC_NOT_NULL(fn, params);
    ATTN_CLASSIC_NOT_NULL(fn, params->w_query);
    ATTN_CLASSIC_NOT_NULL(fn, params->v);
    return ATTN_OK;
}

size_t attn_additive_saved_floats(const attn_additive_dims *dims)
{
    if (!dims_valid(dims))
        return 0;
    return (size_t)dims->batch * (size_t)dims->attn_dim;
}

size_t attn_additive_workspace_floats(const attn_additive_dims *dims)
{
    if (!dims_valid(dims))
        return 0;
    return (size_t)dims->batch * (2 * (size_t)dims->attn_dim + (size_t)dims->src_len);
}

attn_status attn_additive_project_keys(const attn_additive_dims *dims, const float *annotations,
                                       const float *w_key, float *keys)
{
    ATTN_TRY(check_dims(__func__, dims));
    int64_t rows = dims->batch * dims->src_len;
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(annotations);
    ATTN_CHECK_NOT_NULL(w_key);
    ATTN_CHECK_NOT_NULL(keys);
    return attn_gemm_precision(dims->precision, ATTN_NO_TRANS, ATTN_TRANS, rows, dims->attn_dim,
                               dims->key_dim, 1.0f, annotations, dims->key_dim, w_key,
                               dims->key_dim, 0.0f, keys, dims->attn_dim);
}

attn_status attn_additive_project_keys_backward(const attn_additive_dims *dims,
                                                const float *annotations, const float *w_key,
                                                const float *dkeys, float *dannotations,
                                                float *dw_key)
{
    ATTN_TRY(check_dims(__func__, dims));
    int64_t rows = dims->batch * dims->src_len, da = dims->attn_dim, dh = dims->key_dim;
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(dkeys);
    if (dannotations != NULL) {
        ATTN_CHECK_NOT_NULL(w_key);
        ATTN_TRY(attn_gemm_precision(dims->precision, ATTN_NO_TRANS, ATTN_NO_TRANS, rows, dh, da,
                                     1.0f, dkeys, da, w_key, dh, 1.0f, dannotations, dh));
    }
    if (dw_key != NULL) {
        ATTN_CHECK_NOT_NULL(annotations);
        ATTN_TRY(attn_gemm_precision(dims->precision, ATTN_TRANS, ATTN_NO_TRANS, da, dh, rows, 1.0f,
                                     dkeys, da, annotations, dh, 1.0f, dw_key, dh));
    }
    return ATTN_OK;
}

/* saved = W_s s + b, the bias preloaded so the GEMM adds it in its own precision. */
static attn_status project_query(const attn_additive_dims *dims, const attn_additive_params *params,
                                 const float *query, float *saved)
{
    int64_t da = dims->attn_dim;
    for (int64_t b = 0; b < dims->batch; b++)
        for (int64_t d = 0; d < da; d++)
            saved[b * da + d] = params->bias != NULL ? params->bias[d] : 0.0f;
    return attn_gemm_precision(dims->precision, ATTN_NO_TRANS, ATTN_TRANS, dims->batch, da,
                               dims->query_dim, 1.0f, query, dims->query_dim, params->w_query,
                               dims->query_dim, 1.0f, saved, da);
}

static attn_classic_step make_step(const attn_additive_dims *dims,
                                   const attn_additive_params *params, const float *saved,
                                   const float *keys, const float *values, const uint8_t *mask)
{
    attn_classic_step step = {
        .score = ATTN_CLASSIC_MLP,
        .align = ATTN_LUONG_GLOBAL,
        .batch = dims->batch,
        .src_len = dims->src_len,
        .key_dim = dims->attn_dim,
        .value_dim = dims->value_dim,
        .query = saved,
        .keys = keys,
        .v = params->v,
        .values = values,
        .mask = mask,
    };
    return step;
}

attn_status attn_additive_scores(const attn_additive_dims *dims, const attn_additive_params *params,
                                 const float *query, const float *keys, float *scores, float *saved)
{
    ATTN_TRY(check_dims(__func__, dims));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(__func__, params));
    ATTN_CHECK_NOT_NULL(query);
    ATTN_CHECK_NOT_NULL(keys);
    ATTN_CHECK_NOT_NULL(scores);
    ATTN_CHECK_NOT_NULL(saved);
    ATTN_TRY(project_query(dims, params, query, saved));
    attn_classic_step step = make_step(dims, params, saved, keys, NULL, NULL);
    attn_classic_scores(&step, scores);
    return ATTN_OK;
}

attn_status attn_additive_forward(const attn_additive_dims *dims,
                                  const attn_additive_params *params, const float *query,
                                  const float *keys, const float *values, const uint8_t *mask,
                                  float *context, float *weights, float *saved)
{
    ATTN_TRY(check_dims(__func__, dims));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(__func__, params));
    ATTN_CHECK_NOT_NULL(query);
    ATTN_CHECK_NOT_NULL(saved);
    ATTN_TRY(project_query(dims, params, query, saved));
    return attn_additive_forward_projected(dims, params, keys, values, mask, context, weights,
                                           saved);
}

attn_status attn_additive_forward_projected(const attn_additive_dims *dims,
                                            const attn_additive_params *params, const float *keys,
                                            const float *values, const uint8_t *mask,
                                            float *context, float *weights, float *saved)
{
    const char *fn = "attn_additive_forward";
    ATTN_TRY(check_dims(fn, dims));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(fn, params));
    ATTN_CLASSIC_NOT_NULL(fn, keys);
    ATTN_CLASSIC_NOT_NULL(fn, values);
    ATTN_CLASSIC_NOT_NULL(fn, context);
    ATTN_CLASSIC_NOT_NULL(fn, weights);
    ATTN_CLASSIC_NOT_NULL(fn, saved);
    attn_classic_step step = make_step(dims, params, saved, keys, values, mask);
    attn_classic_forward(&step, context, weights);
    return ATTN_OK;
}

attn_status attn_additive_backward(const attn_additive_dims *dims,
                                   const attn_additive_params *params, const float *query,
                                   const float *keys, const float *values, const uint8_t *mask,
                                   const float *weights, const float *saved, const float *dcontext,
                                   const float *dweights, float *dquery, float *dkeys,
                                   float *dvalues, const attn_additive_grads *grads,
                                   float *workspace)
{
    ATTN_TRY(check_dims(__func__, dims));
    if (dims->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(__func__, params));
    ATTN_CHECK_NOT_NULL(query);
    ATTN_CHECK_NOT_NULL(keys);
    ATTN_CHECK_NOT_NULL(values);
    ATTN_CHECK_NOT_NULL(weights);
    ATTN_CHECK_NOT_NULL(saved);
    ATTN_CHECK_NOT_NULL(dcontext);
    ATTN_CHECK_NOT_NULL(workspace);
    attn_additive_grads none = {NULL, NULL, NULL};
    const attn_additive_grads *pg = grads != NULL ? grads : &none;

    int64_t bsz = dims->batch, da = dims->attn_dim, ds = dims->query_dim;
    float *dq = workspace;
    float *dv_rows = workspace + bsz * da;
    attn_classic_grads g = {
        .dquery = dq,
        .dkeys = dkeys,
        .dvalues = dvalues,
        .dv_rows = pg->v != NULL ? dv_rows : NULL,
        .dscores = workspace + 2 * bsz * da,
    };
    attn_classic_step step = make_step(dims, params, saved, keys, values, mask);
    attn_classic_backward(&step, weights, dcontext, dweights, &g);

    if (dquery != NULL)
        ATTN_TRY(attn_gemm_precision(dims->precision, ATTN_NO_TRANS, ATTN_NO_TRANS, bsz, ds, da,
                                     1.0f, dq, da, params->w_query, ds, 1.0f, dquery, ds));
    if (pg->w_query != NULL)
        ATTN_TRY(attn_gemm_precision(dims->precision, ATTN_TRANS, ATTN_NO_TRANS, da, ds, bsz, 1.0f,
                                     dq, da, query, ds, 1.0f, pg->w_query, ds));
    if (pg->bias != NULL)
        attn_classic_sum_rows(bsz, da, dq, pg->bias);
    if (pg->v != NULL)
        attn_classic_sum_rows(bsz, da, dv_rows, pg->v);
    return ATTN_OK;
}
