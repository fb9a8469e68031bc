/* Multiplicative attention (Luong et al. 2015): argument checks, the query projections
 * (attn_gemm), the local-p position predictor and the reductions over the batch; the row
 * loops are in classic_rows.c.
 *
 * Layout of `saved`:      [query rows: B * query_width] [local-p: hidden B * dp] [p_t: B]
 * Layout of `workspace`:  [dscores B * Lk] [dquery rows B * key_width] [concat: dv rows B * da]
 *                         [local-p: dp_t B] [local-p: dhidden B * dp]
 * where the query rows are W^T s (general) or W_1 s (concat) and key_width is the length
 * of the vectors the engine scores (dk, or da for concat). */
#include "attention/classic_internal.h"
#include "attn/attn_kernels.h"

#include <math.h>

attn_luong_config attn_luong_default_config(attn_luong_score score, attn_luong_align align)
{
    attn_luong_config config = {0};
    config.score = score;
    config.align = align;
    return config;
}

static int sizes_fit(const attn_luong_config *c)
{
    int64_t b = c->batch, lk = c->src_len, ds = c->query_dim, dk = c->key_dim;
    int64_t da = c->attn_dim > 0 ? c->attn_dim : 0, dp = c->predict_dim > 0 ? c->predict_dim : 0;
    return attn_classic_count_fits(b, lk, dk) && attn_classic_count_fits(b, lk, c->value_dim) &&
           attn_classic_count_fits(b, lk, da) && attn_classic_count_fits(b, ds + dk + da, 1) &&
           attn_classic_count_fits(da + dk, ds + dk, 1) && attn_classic_count_fits(b, dp + 1, 1) &&
           attn_classic_count_fits(dp, ds, 1);
}

static int config_valid(const attn_luong_config *c)
{
    if (c == NULL || c->batch < 0 || c->src_len < 0 || c->query_dim < 1 || c->key_dim < 1 ||
        c->value_dim < 1 || c->query_dim > ((int64_t)1 << 60) || c->key_dim > ((int64_t)1 << 60) ||
        c->attn_dim > ((int64_t)1 << 60) || c->predict_dim > ((int64_t)1 << 60) || !sizes_fit(c))
        return 0;
    switch (c->score) {
    case ATTN_LUONG_DOT:
        if (c->query_dim != c->key_dim)
            return 0;
        break;
    case ATTN_LUONG_GENERAL:
        break;
    case ATTN_LUONG_CONCAT:
        if (c->attn_dim < 1)
            return 0;
        break;
    default:
        return 0;
    }
    switch (c->align) {
    case ATTN_LUONG_GLOBAL:
        return 1;
    case ATTN_LUONG_LOCAL_M:
        return c->window >= 0;
    case ATTN_LUONG_LOCAL_P:
        return c->window >= 1 && c->predict_dim >= 1;
    default:
        return 0;
    }
}

static attn_status check_config(const char *fn, const attn_luong_config *config)
{
    ATTN_CLASSIC_NOT_NULL(fn, config);
    if (config->precision != ATTN_PRECISION_FP32 && config->precision != ATTN_PRECISION_BF16)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: precision %d: Luong attention multiplies in fp32 or bf16", fn,
                         (int)config->precision);
    if (config_valid(config))
        return ATTN_OK;
    const attn_luong_config *c = config;
    if ((unsigned)c->score > ATTN_LUONG_CONCAT)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown score %d", fn, (int)c->score);
    if ((unsigned)c->align > ATTN_LUONG_LOCAL_P)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown alignment %d", fn, (int)c->align);
    if (c->score == ATTN_LUONG_DOT && c->query_dim != c->key_dim)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: the dot score needs query_dim == key_dim, got %lld and %lld", fn,
                         (long long)c->query_dim, (long long)c->key_dim);
    if (c->align == ATTN_LUONG_LOCAL_M && c->window < 0)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: local-m needs window >= 0, got %lld", fn,
                         (long long)c->window);
    if (c->align == ATTN_LUONG_LOCAL_P && c->window < 1)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: local-p needs window >= 1 (sigma = window / 2), got %lld", fn,
                         (long long)c->window);
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                     "%s: bad sizes batch=%lld src_len=%lld query_dim=%lld key_dim=%lld "
                     "value_dim=%lld attn_dim=%lld predict_dim=%lld (batch and src_len must be "
                     ">= 0, the others >= 1 where the score or alignment uses them, and "
                     "their products below 2^60)",
                     fn, (long long)c->batch, (long long)c->src_len, (long long)c->query_dim,
                     (long long)c->key_dim, (long long)c->value_dim, (long long)c->attn_dim,
                     (long long)c->predict_dim);
}

static attn_status check_params(const char *fn, const attn_luong_config *config,
                                const attn_luong_params *params)
{
    ATTN_CLASSIC_NOT_NULL(fn, params);
    if (config->score != ATTN_LUONG_DOT)
        ATTN_CLASSIC_NOT_NULL(fn, params->w);
    if (config->score == ATTN_LUONG_CONCAT)
        ATTN_CLASSIC_NOT_NULL(fn, params->v);
    if (config->align == ATTN_LUONG_LOCAL_P) {
        ATTN_CLASSIC_NOT_NULL(fn, params->w_p);
        ATTN_CLASSIC_NOT_NULL(fn, params->v_p);
    }
    return ATTN_OK;
}

/* Length of the query rows kept in `saved` (dot scores use the query itself). */
static int64_t query_width(const attn_luong_config *c)
{
    return c->score == ATTN_LUONG_DOT       ? 0
           : c->score == ATTN_LUONG_GENERAL ? c->key_dim
                                            : c->attn_dim;
}

/* Length of the vectors that are scored: the keys' last dimension. */
static int64_t key_width(const attn_luong_config *c)
{
    return c->score == ATTN_LUONG_CONCAT ? c->attn_dim : c->key_dim;
}

static int64_t predictor_floats(const attn_luong_config *c)
{
    return c->align == ATTN_LUONG_LOCAL_P ? c->batch * (c->predict_dim + 1) : 0;
}

size_t attn_luong_saved_floats(const attn_luong_config *config)
{
    if (!config_valid(config))
        return 0;
    return (size_t)(config->batch * query_width(config) + predictor_floats(config));
}

size_t attn_luong_workspace_floats(const attn_luong_config *config)
{
    if (!config_valid(config))
        return 0;
    const attn_luong_config *c = config;
    int64_t dv_rows = c->score == ATTN_LUONG_CONCAT ? c->batch * c->attn_dim : 0;
    return (size_t)(c->batch * c->src_len + c->batch * key_width(c) + dv_rows +
                    predictor_floats(c));
}

static attn_status check_concat(const char *fn, const attn_luong_config *config)
{
    ATTN_TRY(check_config(fn, config));
    if (config->score != ATTN_LUONG_CONCAT)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: only concat scores project their keys (score is %d)", fn,
                         (int)config->score);
    return ATTN_OK;
}

attn_status attn_luong_project_keys(const attn_luong_config *config, const float *annotations,
                                    const float *w, float *keys)
{
    ATTN_TRY(check_concat(__func__, config));
    int64_t rows = config->batch * config->src_len, ds = config->query_dim;
    int64_t dk = config->key_dim, da = config->attn_dim;
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(annotations);
    ATTN_CHECK_NOT_NULL(w);
    ATTN_CHECK_NOT_NULL(keys);
    return attn_gemm_precision(config->precision, ATTN_NO_TRANS, ATTN_TRANS, rows, da, dk, 1.0f,
                               annotations, dk, w + ds, ds + dk, 0.0f, keys, da);
}

attn_status attn_luong_project_keys_backward(const attn_luong_config *config,
                                             const float *annotations, const float *w,
                                             const float *dkeys, float *dannotations, float *dw)
{
    ATTN_TRY(check_concat(__func__, config));
    int64_t rows = config->batch * config->src_len, ds = config->query_dim;
    int64_t dk = config->key_dim, da = config->attn_dim;
    if (rows == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(dkeys);
    if (dannotations != NULL) {
        ATTN_CHECK_NOT_NULL(w);
        ATTN_TRY(attn_gemm_precision(config->precision, ATTN_NO_TRANS, ATTN_NO_TRANS, rows, dk, da,
                                     1.0f, dkeys, da, w + ds, ds + dk, 1.0f, dannotations, dk));
    }
    if (dw != NULL) {
        ATTN_CHECK_NOT_NULL(annotations);
        ATTN_TRY(attn_gemm_precision(config->precision, ATTN_TRANS, ATTN_NO_TRANS, da, dk, rows,
                                     1.0f, dkeys, da, annotations, dk, 1.0f, dw + ds, ds + dk));
    }
    return ATTN_OK;
}

/* The per-step query rows: W^T s for general, W_1 s for concat, s itself for dot. */
static attn_status project_query(const attn_luong_config *c, const attn_luong_params *params,
                                 const float *query, float *saved, const float **rows)
{
    int64_t ds = c->query_dim;
    switch (c->score) {
    case ATTN_LUONG_GENERAL:
        *rows = saved;
        return attn_gemm_precision(c->precision, ATTN_NO_TRANS, ATTN_NO_TRANS, c->batch, c->key_dim,
                                   ds, 1.0f, query, ds, params->w, c->key_dim, 0.0f, saved,
                                   c->key_dim);
    case ATTN_LUONG_CONCAT:
        *rows = saved;
        return attn_gemm_precision(c->precision, ATTN_NO_TRANS, ATTN_TRANS, c->batch, c->attn_dim,
                                   ds, 1.0f, query, ds, params->w, ds + c->key_dim, 0.0f, saved,
                                   c->attn_dim);
    default:
        *rows = query;
        return ATTN_OK;
    }
}

/* p_t = S * sigmoid(v_p . tanh(W_p s)) for every sentence; hidden and p_t go to saved. */
static attn_status predict_positions(const attn_luong_config *c, const attn_luong_params *params,
                                     const float *query, const uint8_t *mask, float *hidden,
                                     float *centers)
{
    int64_t dp = c->predict_dim;
    ATTN_TRY(attn_gemm_precision(c->precision, ATTN_NO_TRANS, ATTN_TRANS, c->batch, dp,
                                 c->query_dim, 1.0f, query, c->query_dim, params->w_p, c->query_dim,
                                 0.0f, hidden, dp));
    for (int64_t b = 0; b < c->batch; b++) {
        double z = 0;
        for (int64_t k = 0; k < dp; k++) {
            hidden[b * dp + k] = (float)tanh((double)hidden[b * dp + k]);
            z += (double)params->v_p[k] * hidden[b * dp + k];
        }
        double length = (double)attn_classic_sentence_length(mask, c->src_len, b);
        centers[b] = (float)(length / (1.0 + exp(-z)));
    }
    return ATTN_OK;
}

static attn_classic_step make_step(const attn_luong_config *c, const attn_luong_params *params,
                                   int64_t position, const float *query_rows, const float *keys,
                                   const float *values, const uint8_t *mask, const float *centers)
{
    attn_classic_step step = {
        .score = c->score == ATTN_LUONG_CONCAT ? ATTN_CLASSIC_MLP : ATTN_CLASSIC_DOT,
        .align = c->align,
        .batch = c->batch,
        .src_len = c->src_len,
        .key_dim = key_width(c),
        .value_dim = c->value_dim,
        .query = query_rows,
        .keys = keys,
        .v = params->v,
        .values = values,
        .mask = mask,
        .window = c->window,
        .position = position,
        .centers = centers,
    };
    return step;
}

static attn_status check_saved(const char *fn, const attn_luong_config *config, const float *saved)
{
    if (saved == NULL && attn_luong_saved_floats(config) > 0)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: saved must not be NULL (this configuration needs %zu floats)", fn,
                         attn_luong_saved_floats(config));
    return ATTN_OK;
}

attn_status attn_luong_scores(const attn_luong_config *config, const attn_luong_params *params,
                              const float *query, const float *keys, float *scores, float *saved)
{
    ATTN_TRY(check_config(__func__, config));
    if (config->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(__func__, config, params));
    ATTN_CHECK_NOT_NULL(query);
    ATTN_CHECK_NOT_NULL(keys);
    ATTN_CHECK_NOT_NULL(scores);
    ATTN_TRY(check_saved(__func__, config, saved));
    const float *rows = NULL;
    ATTN_TRY(project_query(config, params, query, saved, &rows));
    attn_classic_step step = make_step(config, params, 0, rows, keys, NULL, NULL, NULL);
    attn_classic_scores(&step, scores);
    return ATTN_OK;
}

static attn_status check_position(const char *fn, const attn_luong_config *config, int64_t position)
{
    if (config->align == ATTN_LUONG_LOCAL_M && position < 0)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: position must be >= 0, got %lld", fn,
                         (long long)position);
    return ATTN_OK;
}

attn_status attn_luong_forward(const attn_luong_config *config, const attn_luong_params *params,
                               int64_t position, const float *query, const float *keys,
                               const float *values, const uint8_t *mask, float *context,
                               float *weights, float *saved)
{
    ATTN_TRY(check_config(__func__, config));
    ATTN_TRY(check_position(__func__, config, position));
    if (config->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(__func__, config, params));
    ATTN_CHECK_NOT_NULL(query);
    ATTN_CHECK_NOT_NULL(keys);
    ATTN_CHECK_NOT_NULL(values);
    ATTN_CHECK_NOT_NULL(context);
    ATTN_CHECK_NOT_NULL(weights);
    ATTN_TRY(check_saved(__func__, config, saved));
    const float *rows = NULL;
    ATTN_TRY(project_query(config, params, query, saved, &rows));
    float *centers = NULL;
    if (config->align == ATTN_LUONG_LOCAL_P) {
        float *hidden = saved + config->batch * query_width(config);
        centers = hidden + config->batch * config->predict_dim;
        ATTN_TRY(predict_positions(config, params, query, mask, hidden, centers));
    }
    attn_classic_step step = make_step(config, params, position, rows, keys, values, mask, centers);
    attn_classic_forward(&step, context, weights);
    return ATTN_OK;
}

/* d(loss)/d(p_t) -> W_p, v_p and the query, through p_t = S sigmoid(z), z = v_p . h,
 * h = tanh(W_p s); dp/dz = S sigmoid (1 - sigmoid) = p (1 - p / S). */
static attn_status predictor_backward(const attn_luong_config *c, const attn_luong_params *params,
                                      const float *query, const uint8_t *mask, const float *hidden,
                                      const float *centers, float *dcenters, float *dhidden,
                                      float *dquery, const attn_luong_grads *grads)
{
    int64_t bsz = c->batch, dp = c->predict_dim, ds = c->query_dim;
    for (int64_t b = 0; b < bsz; b++) {
        double length = (double)attn_classic_sentence_length(mask, c->src_len, b);
        double p = centers[b];
        double dz = length > 0 ? dcenters[b] * p * (1.0 - p / length) : 0.0;
        dcenters[b] = (float)dz;
        for (int64_t k = 0; k < dp; k++) {
            double h = hidden[b * dp + k];
            dhidden[b * dp + k] = (float)(dz * params->v_p[k] * (1.0 - h * h));
        }
    }
    if (grads->v_p != NULL)
        for (int64_t k = 0; k < dp; k++) {
            double sum = 0;
            for (int64_t b = 0; b < bsz; b++)
                sum += (double)dcenters[b] * hidden[b * dp + k];
            grads->v_p[k] += (float)sum;
        }
    if (grads->w_p != NULL)
        ATTN_TRY(attn_gemm_precision(c->precision, ATTN_TRANS, ATTN_NO_TRANS, dp, ds, bsz, 1.0f,
                                     dhidden, dp, query, ds, 1.0f, grads->w_p, ds));
    if (dquery != NULL)
        ATTN_TRY(attn_gemm_precision(c->precision, ATTN_NO_TRANS, ATTN_NO_TRANS, bsz, ds, dp, 1.0f,
                                     dhidden, dp, params->w_p, ds, 1.0f, dquery, ds));
    return ATTN_OK;
}

attn_status attn_luong_backward(const attn_luong_config *config, const attn_luong_params *params,
                                int64_t position, const float *query, const float *keys,
                                const float *values, const uint8_t *mask, const float *weights,
                                const float *saved, const float *dcontext, const float *dweights,
                                float *dquery, float *dkeys, float *dvalues,
                                const attn_luong_grads *grads, float *workspace)
{
    ATTN_TRY(check_config(__func__, config));
    ATTN_TRY(check_position(__func__, config, position));
    if (config->batch == 0)
        return ATTN_OK;
    ATTN_TRY(check_params(__func__, config, params));
    ATTN_CHECK_NOT_NULL(query);
    ATTN_CHECK_NOT_NULL(keys);
    ATTN_CHECK_NOT_NULL(values);
    ATTN_CHECK_NOT_NULL(weights);
    ATTN_TRY(check_saved(__func__, config, saved));
    ATTN_CHECK_NOT_NULL(dcontext);
    ATTN_CHECK_NOT_NULL(workspace);
    attn_luong_grads none = {NULL, NULL, NULL, NULL};
    const attn_luong_grads *pg = grads != NULL ? grads : &none;

    const attn_luong_config *c = config;
    int64_t bsz = c->batch, ds = c->query_dim, dk = c->key_dim, da = c->attn_dim;
    int64_t width = key_width(c);
    const float *rows = c->score == ATTN_LUONG_DOT ? query : saved;
    const float *hidden = NULL, *centers = NULL;
    if (c->align == ATTN_LUONG_LOCAL_P) {
        hidden = saved + bsz * query_width(c);
        centers = hidden + bsz * c->predict_dim;
    }

    float *dscores = workspace;
    float *dq = dscores + bsz * c->src_len;
    float *next = dq + bsz * width;
    float *dv_rows = NULL;
    if (c->score == ATTN_LUONG_CONCAT) {
        dv_rows = next;
        next += bsz * da;
    }
    float *dcenters = c->align == ATTN_LUONG_LOCAL_P ? next : NULL;
    attn_classic_grads g = {
        .dquery = dq,
        .dkeys = dkeys,
        .dvalues = dvalues,
        .dv_rows = pg->v != NULL ? dv_rows : NULL,
        .dcenters = dcenters,
        .dscores = dscores,
    };
    attn_classic_step step = make_step(c, params, position, rows, keys, values, mask, centers);
    attn_classic_backward(&step, weights, dcontext, dweights, &g);

    switch (c->score) {
    case ATTN_LUONG_DOT:
        if (dquery != NULL)
            for (int64_t i = 0; i < bsz * ds; i++)
                dquery[i] += dq[i];
        break;
    case ATTN_LUONG_GENERAL:
        if (dquery != NULL)
            ATTN_TRY(attn_gemm_precision(config->precision, ATTN_NO_TRANS, ATTN_TRANS, bsz, ds, dk,
                                         1.0f, dq, dk, params->w, dk, 1.0f, dquery, ds));
        if (pg->w != NULL)
            ATTN_TRY(attn_gemm_precision(config->precision, ATTN_TRANS, ATTN_NO_TRANS, ds, dk, bsz,
                                         1.0f, query, ds, dq, dk, 1.0f, pg->w, dk));
        break;
    case ATTN_LUONG_CONCAT:
        if (dquery != NULL)
            ATTN_TRY(attn_gemm_precision(config->precision, ATTN_NO_TRANS, ATTN_NO_TRANS, bsz, ds,
                                         da, 1.0f, dq, da, params->w, ds + dk, 1.0f, dquery, ds));
        if (pg->w != NULL)
            ATTN_TRY(attn_gemm_precision(config->precision, ATTN_TRANS, ATTN_NO_TRANS, da, ds, bsz,
                                         1.0f, dq, da, query, ds, 1.0f, pg->w, ds + dk));
        if (pg->v != NULL)
            attn_classic_sum_rows(bsz, da, dv_rows, pg->v);
        break;
    }
    if (c->align == ATTN_LUONG_LOCAL_P)
        ATTN_TRY(predictor_backward(c, params, query, mask, hidden, centers, dcenters,
                                    dcenters + bsz, dquery, pg));
    return ATTN_OK;
}
