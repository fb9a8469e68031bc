/* Multi-head attention: input projections (attn_gemm_precision in the options' precision),
 * attention (attn_sdpa_forward and attn_sdpa_backward over strided views of the
 * projections, so heads are never transposed into place), the output projection, and the
 * backward of all three.
 *
 * The arithmetic lives in attn_gemm and attn_sdpa_*, which dispatch on the instruction set
 * themselves (ATTN_ISA_REFERENCE makes the whole of MHA run on scalar references). The
 * loops here (broadcasting biases, summing bias gradients, averaging heads) are memory-bound
 * passes over data the GEMMs just touched, so one portable version serves every ISA. */
#include "attention/mha_internal.h"

#include <math.h>
#include <string.h>

/* Where everything lives. The projections P sit at the start of the saved buffer (and their
 * gradients at the start of the backward scratch, with the same layout):
 *  - self-attention with the packed weight: one [B, L, 3E] block, rows of (Q | K | V);
 *  - otherwise Q as [B, Lq, E], then K and V side by side as [B, Lk, 2E], so that K and V
 *    of one shared memory (key == value) come from one GEMM.
 * After P come A [B, Lq, E] (attention output before the output projection) and the
 * log-sum-exp [B, H, Lq]. */
typedef struct mha_plan {
    int64_t batch, len_q, len_k, embed, heads, head_dim, kdim, vdim;
    int packed;     /* in_proj_weight is used */
    int self_fused; /* query == key == value with packed weights: one QKV GEMM */
    int kv_fused;   /* key == value with packed weights: one KV GEMM */
    const float *w_q, *w_k, *w_v;
    const float *b_q, *b_k, *b_v;
    int64_t q_offset, k_offset, v_offset; /* into P */
    int64_t q_ld, kv_ld;
    int64_t proj_floats, attn_offset, lse_offset, saved_floats;
    double rope_base;                  /* 0, or Q and K turn by position (attn_rope_rotate) */
    attn_precision precision;          /* of the projections: the options' (the attention's own) */
    attn_mha_packed_weights prepacked; /* all NULL when none was given */
} mha_plan;

/* a * b for non-negative sizes, failing instead of overflowing. */
static int mul_count(int64_t a, int64_t b, int64_t *out)
{
    if (a != 0 && b > INT64_MAX / a)
        return 0;
    *out = a * b;
    return 1;
}

static attn_status check_dims(const char *fn, const attn_mha_dims *dims, mha_plan *plan)
{
    memset(plan, 0, sizeof *plan);
    ATTN_CHECK_ARG(dims != NULL, "%s: dims must not be NULL", fn);
    ATTN_CHECK_ARG(dims->batch >= 0 && dims->len_q >= 0 && dims->len_k >= 0,
                   "%s: negative size (batch=%lld len_q=%lld len_k=%lld)", fn,
                   (long long)dims->batch, (long long)dims->len_q, (long long)dims->len_k);
    ATTN_CHECK_ARG(dims->embed_dim > 0, "%s: embed_dim must be positive, got %lld", fn,
                   (long long)dims->embed_dim);
    ATTN_CHECK_ARG(dims->num_heads > 0, "%s: num_heads must be positive, got %lld", fn,
                   (long long)dims->num_heads);
    ATTN_CHECK_ARG(dims->embed_dim % dims->num_heads == 0,
                   "%s: num_heads %lld does not divide embed_dim %lld", fn,
                   (long long)dims->num_heads, (long long)dims->embed_dim);
    ATTN_CHECK_ARG(dims->kdim >= 0 && dims->vdim >= 0,
                   "%s: kdim and vdim must be positive (or 0 for embed_dim), got %lld and %lld", fn,
                   (long long)dims->kdim, (long long)dims->vdim);
    ATTN_CHECK_ARG(dims->rope_base == 0.0 || (isfinite(dims->rope_base) && dims->rope_base > 0.0),
                   "%s: rope_base must be 0 (no rotary positions) or finite and > 0, got %g", fn,
                   dims->rope_base);
    ATTN_CHECK_ARG(dims->rope_base == 0.0 || (dims->embed_dim / dims->num_heads) % 2 == 0,
                   "%s: rotary positions turn pairs of features, so the head size embed_dim / "
                   "num_heads = %lld must be even",
                   fn, (long long)(dims->embed_dim / dims->num_heads));
    plan->rope_base = dims->rope_base;
    plan->batch = dims->batch;
    plan->len_q = dims->len_q;
    plan->len_k = dims->len_k;
    plan->embed = dims->embed_dim;
    plan->heads = dims->num_heads;
    plan->head_dim = dims->embed_dim / dims->num_heads;
    plan->kdim = dims->kdim == 0 ? dims->embed_dim : dims->kdim;
    plan->vdim = dims->vdim == 0 ? dims->embed_dim : dims->vdim;

    /* Every buffer is at most 4 * max(q_floats, k_floats, lse_floats) floats. */
    int64_t rows_q, rows_k, q_floats, k_floats, lse_floats;
    int ok =
        mul_count(plan->batch, plan->len_q, &rows_q) &&
        mul_count(plan->batch, plan->len_k, &rows_k) && mul_count(rows_q, plan->embed, &q_floats) &&
        mul_count(rows_k, plan->embed, &k_floats) && mul_count(rows_q, plan->heads, &lse_floats) &&
        q_floats <= INT64_MAX / 8 && k_floats <= INT64_MAX / 8 && lse_floats <= INT64_MAX / 8;
    ATTN_CHECK_ARG(ok, "%s: sizes too large (batch=%lld len_q=%lld len_k=%lld embed_dim=%lld)", fn,
                   (long long)plan->batch, (long long)plan->len_q, (long long)plan->len_k,
                   (long long)plan->embed);
    plan->proj_floats = q_floats + 2 * k_floats;
    plan->attn_offset = plan->proj_floats;
    plan->lse_offset = plan->attn_offset + q_floats;
    plan->saved_floats = plan->lse_offset + lse_floats;
    return ATTN_OK;
}

/* Resolves the weight form and the fused paths; the same inputs give the same plan in the
 * forward and the backward, which is what lets the backward read the saved layout. */
static attn_status check_params(const char *fn, const attn_mha_params *params, const float *query,
                                const float *key, const float *value, mha_plan *plan)
{
    ATTN_CHECK_ARG(params != NULL, "%s: params must not be NULL", fn);
    ATTN_CHECK_ARG(params->out_proj_weight != NULL, "%s: params->out_proj_weight must not be NULL",
                   fn);
    const int64_t e = plan->embed;
    plan->packed = params->in_proj_weight != NULL;
    if (plan->packed) {
        ATTN_CHECK_ARG(params->q_proj_weight == NULL && params->k_proj_weight == NULL &&
                           params->v_proj_weight == NULL,
                       "%s: give params->in_proj_weight or q/k/v_proj_weight, not both", fn);
        ATTN_CHECK_ARG(plan->kdim == e && plan->vdim == e,
                       "%s: params->in_proj_weight needs kdim == vdim == embed_dim (%lld), got "
                       "kdim=%lld vdim=%lld; use q/k/v_proj_weight",
                       fn, (long long)e, (long long)plan->kdim, (long long)plan->vdim);
        plan->w_q = params->in_proj_weight;
        plan->w_k = params->in_proj_weight + e * e;
        plan->w_v = params->in_proj_weight + 2 * e * e;
    } else {
        ATTN_CHECK_ARG(params->q_proj_weight != NULL && params->k_proj_weight != NULL &&
                           params->v_proj_weight != NULL,
                       "%s: params needs in_proj_weight or all of q_proj_weight, k_proj_weight "
                       "and v_proj_weight",
                       fn);
        plan->w_q = params->q_proj_weight;
        plan->w_k = params->k_proj_weight;
        plan->w_v = params->v_proj_weight;
    }
    if (params->in_proj_bias != NULL) {
        plan->b_q = params->in_proj_bias;
        plan->b_k = params->in_proj_bias + e;
        plan->b_v = params->in_proj_bias + 2 * e;
    }
    plan->self_fused = plan->packed && query == key && key == value && plan->len_q == plan->len_k;
    plan->kv_fused = plan->packed && key == value;
    if (plan->self_fused) {
        plan->q_offset = 0;
        plan->k_offset = e;
        plan->v_offset = 2 * e;
        plan->q_ld = plan->kv_ld = 3 * e;
    } else {
        plan->q_offset = 0;
        plan->q_ld = e;
        plan->k_offset = plan->batch * plan->len_q * e;
        plan->v_offset = plan->k_offset + e;
        plan->kv_ld = 2 * e;
    }
    return ATTN_OK;
}

attn_status attn_mha_sizes(const attn_mha_dims *dims, attn_mha_buffer_sizes *sizes)
{
    mha_plan plan;
    ATTN_CHECK_NOT_NULL(sizes);
    memset(sizes, 0, sizeof *sizes);
    ATTN_TRY(check_dims(__func__, dims, &plan));
    int64_t head_rows, head_weights;
    ATTN_CHECK_ARG(mul_count(plan.heads, plan.len_q, &head_rows) &&
                       mul_count(head_rows, plan.len_k, &head_weights),
                   "%s: heads * len_q * len_k overflows", __func__);
    sizes->saved_floats = (size_t)plan.saved_floats;
    sizes->forward_scratch_floats = (size_t)head_weights;
    sizes->backward_scratch_floats =
        (size_t)(plan.proj_floats + plan.batch * plan.len_q * plan.embed);
    return ATTN_OK;
}

/* ---- memory-bound helpers ------------------------------------------------------------- */

typedef struct bias_rows_job {
    int64_t cols, ld;
    const float *bias;
    float *dst;
} bias_rows_job;

static void bias_rows_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const bias_rows_job *job = ctx;
    for (int64_t r = begin; r < end; r++)
        memcpy(job->dst + r * job->ld, job->bias, (size_t)job->cols * sizeof(float));
}

/* Every row of dst[rows, cols] (leading dimension ld) becomes a copy of bias. */
static void fill_bias_rows(int64_t rows, int64_t cols, const float *bias, float *dst, int64_t ld)
{
    bias_rows_job job = {cols, ld, bias, dst};
    attn_parallel_for(rows, 1 + 16384 / cols, bias_rows_range, &job);
}

enum { COLUMN_BLOCK = 64 };

typedef struct column_sums_job {
    int64_t rows, cols, ld;
    const float *src;
    float *dst;
} column_sums_job;

static void column_sums_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const column_sums_job *job = ctx;
    for (int64_t block = begin; block < end; block++) {
        int64_t first = block * COLUMN_BLOCK;
        int64_t width = job->cols - first < COLUMN_BLOCK ? job->cols - first : COLUMN_BLOCK;
        double sums[COLUMN_BLOCK] = {0};
        for (int64_t r = 0; r < job->rows; r++) {
            const float *row = job->src + r * job->ld + first;
            for (int64_t c = 0; c < width; c++)
                sums[c] += row[c];
        }
        for (int64_t c = 0; c < width; c++)
            job->dst[first + c] = (float)((double)job->dst[first + c] + sums[c]);
    }
}

/* dst[c] += sum over rows of src[r, c]; each column's sum runs in a fixed row order. */
static void add_column_sums(int64_t rows, int64_t cols, const float *src, int64_t ld, float *dst)
{
    column_sums_job job = {rows, cols, ld, src, dst};
    attn_parallel_for((cols + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, column_sums_range, &job);
}

typedef struct head_average_job {
    int64_t heads, plane;
    const float *per_head;
    float *mean;
} head_average_job;

static void head_average_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const head_average_job *job = ctx;
    for (int64_t x = begin; x < end; x++) {
        double sum = 0;
        for (int64_t h = 0; h < job->heads; h++)
            sum += job->per_head[h * job->plane + x];
        job->mean[x] = (float)(sum / (double)job->heads);
    }
}

/* ---- projections ---------------------------------------------------------------------- */

/* p[r, 0:cols] = x[r, :] w^T + bias for rows r, w [cols, in_dim], p with leading dim ldp;
 * w_t (may be NULL) is w^T packed. */
static attn_status project(attn_precision precision, int64_t rows, int64_t in_dim, const float *x,
                           const float *w, const attn_gemm_packed_b *w_t, int64_t cols,
                           const float *bias, float *p, int64_t ldp)
{
    if (bias != NULL)
        fill_bias_rows(rows, cols, bias, p, ldp);
    const float beta = bias != NULL ? 1.0f : 0.0f;
    if (w_t != NULL)
        return attn_gemm_with_packed_b(ATTN_NO_TRANS, rows, 1.0f, x, in_dim, w_t, beta, p, ldp);
    return attn_gemm_precision(precision, ATTN_NO_TRANS, ATTN_TRANS, rows, cols, in_dim, 1.0f, x,
                               in_dim, w, in_dim, beta, p, ldp);
}

/* The backward of project() for dp (leading dim ldp): dx += dp w, dw += dp^T x,
 * dbias += column sums of dp. Any output may be NULL; w_packed (may be NULL) is w packed. */
static attn_status project_backward(attn_precision precision, int64_t rows, int64_t in_dim,
                                    const float *x, const float *w,
                                    const attn_gemm_packed_b *w_packed, int64_t cols,
                                    const float *dp, int64_t ldp, float *dx, float *dw,
                                    float *dbias)
{
    if (dx != NULL && w_packed != NULL)
        ATTN_TRY(attn_gemm_with_packed_b(ATTN_NO_TRANS, rows, 1.0f, dp, ldp, w_packed, 1.0f, dx,
                                         in_dim));
    else if (dx != NULL)
        ATTN_TRY(attn_gemm_precision(precision, ATTN_NO_TRANS, ATTN_NO_TRANS, rows, in_dim, cols,
                                     1.0f, dp, ldp, w, in_dim, 1.0f, dx, in_dim));
    if (dw != NULL)
        ATTN_TRY(attn_gemm_precision(precision, ATTN_TRANS, ATTN_NO_TRANS, cols, in_dim, rows, 1.0f,
                                     dp, ldp, x, in_dim, 1.0f, dw, in_dim));
    if (dbias != NULL)
        add_column_sums(rows, cols, dp, ldp, dbias);
    return ATTN_OK;
}

/* A [B, H, L, head_dim] view over a batch-first [B, L, ld] buffer whose head h starts at
 * column h * head_dim of each row. */
static attn_tensor head_view(const mha_plan *plan, const float *base, int64_t batch, int64_t len,
                             int64_t ld)
{
    attn_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (float *)base; /* views are not const-qualified; inputs are only read */
    t.ndim = 4;
    t.shape[0] = batch;
    t.shape[1] = plan->heads;
    t.shape[2] = len;
    t.shape[3] = plan->head_dim;
    t.stride[0] = len * ld;
    t.stride[1] = plan->head_dim;
    t.stride[2] = ld;
    t.stride[3] = 1;
    return t;
}

/* ---- forward -------------------------------------------------------------------------- */

static attn_status check_inputs(const char *fn, const mha_plan *plan, const float *query,
                                const float *key, const float *value)
{
    ATTN_CHECK_ARG(query != NULL, "%s: query must not be NULL", fn);
    if (plan->len_k > 0) {
        ATTN_CHECK_ARG(key != NULL, "%s: key must not be NULL", fn);
        ATTN_CHECK_ARG(value != NULL, "%s: value must not be NULL", fn);
    }
    return ATTN_OK;
}

static attn_status project_inputs(const mha_plan *plan, const float *query, const float *key,
                                  const float *value, float *proj)
{
    const int64_t e = plan->embed;
    const int64_t rows_q = plan->batch * plan->len_q, rows_k = plan->batch * plan->len_k;
    if (plan->self_fused)
        return project(plan->precision, rows_q, e, query, plan->w_q, plan->prepacked.in_proj_t,
                       3 * e, plan->b_q, proj, 3 * e);
    ATTN_TRY(project(plan->precision, rows_q, e, query, plan->w_q, NULL, e, plan->b_q,
                     proj + plan->q_offset, plan->q_ld));
    if (plan->kv_fused)
        return project(plan->precision, rows_k, e, key, plan->w_k, NULL, 2 * e, plan->b_k,
                       proj + plan->k_offset, plan->kv_ld);
    ATTN_TRY(project(plan->precision, rows_k, plan->kdim, key, plan->w_k, NULL, e, plan->b_k,
                     proj + plan->k_offset, plan->kv_ld));
    return project(plan->precision, rows_k, plan->vdim, value, plan->w_v, NULL, e, plan->b_v,
                   proj + plan->v_offset, plan->kv_ld);
}

/* With rotary positions, Q and K in the projections (or their gradients, in the same
 * layout) turn by each row's position, or back (inverse: the backward). The saved Q and K
 * are the turned ones, which is what the attention's backward reads. */
static attn_status rotate_queries_and_keys(const mha_plan *plan, float *proj, int inverse)
{
    if (plan->rope_base == 0.0)
        return ATTN_OK;
    ATTN_TRY(attn_rope_rotate(proj + plan->q_offset, plan->batch, plan->len_q, 0, plan->q_ld,
                              plan->heads, plan->head_dim, plan->rope_base, inverse));
    return attn_rope_rotate(proj + plan->k_offset, plan->batch, plan->len_k, 0, plan->kv_ld,
                            plan->heads, plan->head_dim, plan->rope_base, inverse);
}

/* Attention one batch element at a time, so the per-head weights need only [H, Lq, Lk] of
 * scratch before they are averaged into weights [B, Lq, Lk]. */
static attn_status attend_with_mean_weights(const mha_plan *plan, const attn_sdpa_options *options,
                                            float *saved, float *weights, float *scratch)
{
    const float *proj = saved;
    const int64_t e = plan->embed, plane = plan->len_q * plan->len_k;
    attn_sdpa_options one = options != NULL ? *options : attn_sdpa_default_options();
    for (int64_t b = 0; b < plan->batch; b++) {
        attn_tensor q = head_view(plan, proj + plan->q_offset + b * plan->len_q * plan->q_ld, 1,
                                  plan->len_q, plan->q_ld);
        attn_tensor k = head_view(plan, proj + plan->k_offset + b * plan->len_k * plan->kv_ld, 1,
                                  plan->len_k, plan->kv_ld);
        attn_tensor v = head_view(plan, proj + plan->v_offset + b * plan->len_k * plan->kv_ld, 1,
                                  plan->len_k, plan->kv_ld);
        attn_tensor a =
            head_view(plan, saved + plan->attn_offset + b * plan->len_q * e, 1, plan->len_q, e);
        if (options != NULL && options->key_padding_mask != NULL)
            one.key_padding_mask = options->key_padding_mask + b * plan->len_k;
        if (options != NULL && options->attn_mask != NULL && options->attn_mask_per_head)
            one.attn_mask = options->attn_mask + b * plan->heads * plane;
        ATTN_TRY(attn_sdpa_forward(&q, &k, &v, &one, &a,
                                   saved + plan->lse_offset + b * plan->heads * plan->len_q,
                                   scratch));
        head_average_job job = {plan->heads, plane, scratch, weights + b * plane};
        attn_parallel_for(plane, 16384, head_average_range, &job);
    }
    return ATTN_OK;
}

static attn_status forward(const char *fn, const attn_mha_dims *dims, const attn_mha_params *params,
                           const attn_mha_packed_weights *packed, const float *query,
                           const float *key, const float *value, const attn_sdpa_options *options,
                           float *out, float *weights, int average_attn_weights, float *saved,
                           float *scratch)
{
    mha_plan plan;
    ATTN_TRY(check_dims(fn, dims, &plan));
    plan.precision = options != NULL ? options->precision : ATTN_PRECISION_FP32;
    if (packed != NULL)
        plan.prepacked = *packed;
    ATTN_TRY(check_params(fn, params, query, key, value, &plan));
    ATTN_CHECK_ARG(average_attn_weights == 0 || average_attn_weights == 1,
                   "%s: average_attn_weights must be 0 or 1, got %d", fn, average_attn_weights);
    if (plan.batch == 0 || plan.len_q == 0)
        return ATTN_OK;
    ATTN_TRY(check_inputs(fn, &plan, query, key, value));
    ATTN_CHECK_ARG(out != NULL, "%s: out must not be NULL", fn);
    ATTN_CHECK_ARG(saved != NULL, "%s: saved must not be NULL (attn_mha_sizes gives its size)", fn);
    const int mean_weights = weights != NULL && average_attn_weights;
    ATTN_CHECK_ARG(!mean_weights || scratch != NULL,
                   "%s: scratch must not be NULL when averaging weights over heads "
                   "(attn_mha_sizes gives its size)",
                   fn);

    const int64_t e = plan.embed;
    ATTN_TRY(project_inputs(&plan, query, key, value, saved));
    ATTN_TRY(rotate_queries_and_keys(&plan, saved, 0));
    if (mean_weights) {
        ATTN_TRY(attend_with_mean_weights(&plan, options, saved, weights, scratch));
    } else {
        attn_tensor q = head_view(&plan, saved + plan.q_offset, plan.batch, plan.len_q, plan.q_ld);
        attn_tensor k = head_view(&plan, saved + plan.k_offset, plan.batch, plan.len_k, plan.kv_ld);
        attn_tensor v = head_view(&plan, saved + plan.v_offset, plan.batch, plan.len_k, plan.kv_ld);
        attn_tensor a = head_view(&plan, saved + plan.attn_offset, plan.batch, plan.len_q, e);
        ATTN_TRY(attn_sdpa_forward(&q, &k, &v, options, &a, saved + plan.lse_offset, weights));
    }
    return project(plan.precision, plan.batch * plan.len_q, e, saved + plan.attn_offset,
                   params->out_proj_weight, plan.prepacked.out_proj_t, e, params->out_proj_bias,
                   out, e);
}

attn_status attn_mha_forward(const attn_mha_dims *dims, const attn_mha_params *params,
                             const float *query, const float *key, const float *value,
                             const attn_sdpa_options *options, float *out, float *weights,
                             int average_attn_weights, float *saved, float *scratch)
{
    return forward(__func__, dims, params, NULL, query, key, value, options, out, weights,
                   average_attn_weights, saved, scratch);
}

attn_status attn_mha_forward_packed(const attn_mha_dims *dims, const attn_mha_params *params,
                                    const attn_mha_packed_weights *packed, const float *query,
                                    const float *key, const float *value,
                                    const attn_sdpa_options *options, float *out, float *weights,
                                    int average_attn_weights, float *saved, float *scratch)
{
    return forward(__func__, dims, params, packed, query, key, value, options, out, weights,
                   average_attn_weights, saved, scratch);
}

/* ---- backward ------------------------------------------------------------------------- */

/* The gradient pointers of W_q, W_k, W_v and their biases, in the weight form of plan. */
typedef struct mha_param_grads {
    float *w_q, *w_k, *w_v, *b_q, *b_k, *b_v, *w_out, *b_out;
} mha_param_grads;

static attn_status check_grads(const char *fn, const mha_plan *plan, const attn_mha_grads *grads,
                               mha_param_grads *g)
{
    memset(g, 0, sizeof *g);
    if (grads == NULL)
        return ATTN_OK;
    const int64_t e = plan->embed;
    if (plan->packed) {
        ATTN_CHECK_ARG(grads->q_proj_weight == NULL && grads->k_proj_weight == NULL &&
                           grads->v_proj_weight == NULL,
                       "%s: the parameters use in_proj_weight, so grads->q/k/v_proj_weight must "
                       "be NULL (use grads->in_proj_weight)",
                       fn);
        if (grads->in_proj_weight != NULL) {
            g->w_q = grads->in_proj_weight;
            g->w_k = grads->in_proj_weight + e * e;
            g->w_v = grads->in_proj_weight + 2 * e * e;
        }
    } else {
        ATTN_CHECK_ARG(grads->in_proj_weight == NULL,
                       "%s: the parameters use q/k/v_proj_weight, so grads->in_proj_weight must "
                       "be NULL",
                       fn);
        g->w_q = grads->q_proj_weight;
        g->w_k = grads->k_proj_weight;
        g->w_v = grads->v_proj_weight;
    }
    if (grads->in_proj_bias != NULL) {
        g->b_q = grads->in_proj_bias;
        g->b_k = grads->in_proj_bias + e;
        g->b_v = grads->in_proj_bias + 2 * e;
    }
    g->w_out = grads->out_proj_weight;
    g->b_out = grads->out_proj_bias;
    return ATTN_OK;
}

/* Back through the input projections. Gradients of fused projections stay fused only when
 * their input gradients share a pointer too; otherwise each part goes its own way. */
static attn_status project_inputs_backward(const mha_plan *plan, const float *query,
                                           const float *key, const float *value, const float *dproj,
                                           float *grad_query, float *grad_key, float *grad_value,
                                           const mha_param_grads *g)
{
    const int64_t e = plan->embed;
    const int64_t rows_q = plan->batch * plan->len_q, rows_k = plan->batch * plan->len_k;
    if (plan->self_fused && grad_query == grad_key && grad_key == grad_value)
        return project_backward(plan->precision, rows_q, e, query, plan->w_q,
                                plan->prepacked.in_proj, 3 * e, dproj, 3 * e, grad_query, g->w_q,
                                g->b_q);
    ATTN_TRY(project_backward(plan->precision, rows_q, e, query, plan->w_q, NULL, e,
                              dproj + plan->q_offset, plan->q_ld, grad_query, g->w_q, g->b_q));
    if (plan->kv_fused && grad_key == grad_value)
        return project_backward(plan->precision, rows_k, e, key, plan->w_k, NULL, 2 * e,
                                dproj + plan->k_offset, plan->kv_ld, grad_key, g->w_k, g->b_k);
    ATTN_TRY(project_backward(plan->precision, rows_k, plan->kdim, key, plan->w_k, NULL, e,
                              dproj + plan->k_offset, plan->kv_ld, grad_key, g->w_k, g->b_k));
    return project_backward(plan->precision, rows_k, plan->vdim, value, plan->w_v, NULL, e,
                            dproj + plan->v_offset, plan->kv_ld, grad_value, g->w_v, g->b_v);
}

static attn_status backward(const char *fn, const attn_mha_dims *dims,
                            const attn_mha_params *params, const attn_mha_packed_weights *packed,
                            const float *query, const float *key, const float *value,
                            const attn_sdpa_options *options, const float *saved,
                            const float *grad_out, float *scratch, float *grad_query,
                            float *grad_key, float *grad_value, const attn_mha_grads *grads)
{
    mha_plan plan;
    mha_param_grads g;
    ATTN_TRY(check_dims(fn, dims, &plan));
    plan.precision = options != NULL ? options->precision : ATTN_PRECISION_FP32;
    if (packed != NULL)
        plan.prepacked = *packed;
    ATTN_TRY(check_params(fn, params, query, key, value, &plan));
    ATTN_TRY(check_grads(fn, &plan, grads, &g));
    if (plan.batch == 0 || plan.len_q == 0)
        return ATTN_OK;
    ATTN_TRY(check_inputs(fn, &plan, query, key, value));
    ATTN_CHECK_ARG(saved != NULL, "%s: saved must not be NULL (pass the forward's)", fn);
    ATTN_CHECK_ARG(grad_out != NULL, "%s: grad_out must not be NULL", fn);
    ATTN_CHECK_ARG(scratch != NULL, "%s: scratch must not be NULL (attn_mha_sizes gives its size)",
                   fn);

    const int64_t e = plan.embed, rows_q = plan.batch * plan.len_q;
    const float *attn_out = saved + plan.attn_offset;
    float *dproj = scratch;
    float *dattn = scratch + plan.proj_floats;

    memset(dattn, 0, (size_t)(rows_q * e) * sizeof(float));
    ATTN_TRY(project_backward(plan.precision, rows_q, e, attn_out, params->out_proj_weight,
                              plan.prepacked.out_proj, e, grad_out, e, dattn, g.w_out, g.b_out));

    const int need_dproj = grad_query != NULL || grad_key != NULL || grad_value != NULL ||
                           g.w_q != NULL || g.w_k != NULL || g.w_v != NULL || g.b_q != NULL;
    if (!need_dproj)
        return ATTN_OK;
    memset(dproj, 0, (size_t)plan.proj_floats * sizeof(float));
    attn_tensor q = head_view(&plan, saved + plan.q_offset, plan.batch, plan.len_q, plan.q_ld);
    attn_tensor k = head_view(&plan, saved + plan.k_offset, plan.batch, plan.len_k, plan.kv_ld);
    attn_tensor v = head_view(&plan, saved + plan.v_offset, plan.batch, plan.len_k, plan.kv_ld);
    attn_tensor a = head_view(&plan, attn_out, plan.batch, plan.len_q, e);
    attn_tensor da = head_view(&plan, dattn, plan.batch, plan.len_q, e);
    attn_tensor dq = head_view(&plan, dproj + plan.q_offset, plan.batch, plan.len_q, plan.q_ld);
    attn_tensor dk = head_view(&plan, dproj + plan.k_offset, plan.batch, plan.len_k, plan.kv_ld);
    attn_tensor dv = head_view(&plan, dproj + plan.v_offset, plan.batch, plan.len_k, plan.kv_ld);
    ATTN_TRY(
        attn_sdpa_backward(&q, &k, &v, options, &a, saved + plan.lse_offset, &da, &dq, &dk, &dv));
    ATTN_TRY(rotate_queries_and_keys(&plan, dproj, 1));
    return project_inputs_backward(&plan, query, key, value, dproj, grad_query, grad_key,
                                   grad_value, &g);
}

attn_status attn_mha_backward(const attn_mha_dims *dims, const attn_mha_params *params,
                              const float *query, const float *key, const float *value,
                              const attn_sdpa_options *options, const float *saved,
                              const float *grad_out, float *scratch, float *grad_query,
                              float *grad_key, float *grad_value, const attn_mha_grads *grads)
{
    return backward(__func__, dims, params, NULL, query, key, value, options, saved, grad_out,
                    scratch, grad_query, grad_key, grad_value, grads);
}

attn_status attn_mha_backward_packed(const attn_mha_dims *dims, const attn_mha_params *params,
                                     const attn_mha_packed_weights *packed, const float *query,
                                     const float *key, const float *value,
                                     const attn_sdpa_options *options, const float *saved,
                                     const float *grad_out, float *scratch, float *grad_query,
                                     float *grad_key, float *grad_value,
                                     const attn_mha_grads *grads)
{
    return backward(__func__, dims, params, packed, query, key, value, options, saved, grad_out,
                    scratch, grad_query, grad_key, grad_value, grads);
}
