/* Row loops of additive and Luong attention: a scalar reference in double and a float
 * version threaded over the batch. Sentences are independent, so each row writes only its
 * own outputs and the results do not depend on the thread count. The float version's time
 * goes into tanh for MLP scores, so only that part (classic_mlp_simd.h) has SIMD versions; dot
 * scores, softmax and context read every key and value once and are memory-bound, so AVX2 and
 * AVX-512 share the portable loops for them. */
#include "attention/classic_internal.h"
#include "kernels/fast_math.h"

#include <math.h>
#include <string.h>

int attn_classic_count_fits(int64_t a, int64_t b, int64_t c)
{
    const int64_t limit = (int64_t)1 << 60;
    if (a == 0 || b == 0 || c == 0)
        return 1;
    return a <= limit / b && a * b <= limit / c;
}

int64_t attn_classic_sentence_length(const uint8_t *mask, int64_t src_len, int64_t b)
{
    if (mask == NULL)
        return src_len;
    const uint8_t *row = mask + b * src_len;
    for (int64_t j = src_len; j > 0; j--)
        if (row[j - 1] == 0)
            return j;
    return 0;
}

/* The positions [lo, hi] a row may attend to (before masking) and its Gaussian. */
typedef struct row_window {
    int64_t lo, hi; /* inclusive; lo > hi when empty */
    int gaussian;
    double center;           /* p_t */
    double inv_two_sigma_sq; /* 1 / (2 sigma^2) with sigma = D / 2 */
} row_window;

static row_window window_of_row(const attn_classic_step *step, int64_t b)
{
    row_window w = {0, step->src_len - 1, 0, 0.0, 0.0};
    if (step->align == ATTN_LUONG_GLOBAL)
        return w;
    int64_t length = attn_classic_sentence_length(step->mask, step->src_len, b);
    int64_t d = step->window;
    int64_t center = step->position;
    if (step->align == ATTN_LUONG_LOCAL_P) {
        w.gaussian = 1;
        w.center = step->centers[b];
        w.inv_two_sigma_sq = 2.0 / ((double)d * (double)d);
        center = (int64_t)floor(w.center + 0.5);
    }
    /* Written so that a huge t or D cannot overflow. */
    w.lo = center > d ? center - d : 0;
    w.hi = center >= length - 1 - d ? length - 1 : center + d;
    return w;
}

static int is_active(const attn_classic_step *step, const row_window *w, int64_t b, int64_t j)
{
    return j >= w->lo && j <= w->hi &&
           (step->mask == NULL || step->mask[b * step->src_len + j] == 0);
}

static double gaussian_at(const row_window *w, int64_t j)
{
    double offset = (double)j - w->center;
    return exp(-offset * offset * w->inv_two_sigma_sq);
}

static int64_t rows_per_chunk(const attn_classic_step *step)
{
    /* Enough work per thread to pay for waking it: about 32k multiply-adds. */
    int64_t per_row = step->src_len * (step->key_dim + step->value_dim) + 1;
    int64_t rows = 32768 / per_row;
    return rows > 1 ? rows : 1;
}

/* ---- reference: textbook loops, every sum in double ------------------------------------ */

static double score_reference(const attn_classic_step *step, int64_t b, int64_t j)
{
    int64_t n = step->key_dim;
    const float *q = step->query + b * n;
    const float *k = step->keys + (b * step->src_len + j) * n;
    double sum = 0;
    for (int64_t d = 0; d < n; d++) {
        if (step->score == ATTN_CLASSIC_DOT)
            sum += (double)q[d] * k[d];
        else
            sum += (double)step->v[d] * tanh((double)q[d] + k[d]);
    }
    return sum;
}

static void scores_reference(const attn_classic_step *step, float *scores)
{
    for (int64_t b = 0; b < step->batch; b++)
        for (int64_t j = 0; j < step->src_len; j++)
            scores[b * step->src_len + j] = (float)score_reference(step, b, j);
}

static void forward_reference(const attn_classic_step *step, float *context, float *weights)
{
    int64_t lk = step->src_len, dv = step->value_dim;
    for (int64_t b = 0; b < step->batch; b++) {
        row_window w = window_of_row(step, b);
        float *a = weights + b * lk;
        double max = -INFINITY;
        for (int64_t j = 0; j < lk; j++) {
            a[j] = 0.0f;
            if (is_active(step, &w, b, j)) {
                double e = score_reference(step, b, j);
                max = e > max ? e : max;
            }
        }
        double total = 0;
        for (int64_t j = 0; j < lk; j++)
            if (is_active(step, &w, b, j))
                total += exp(score_reference(step, b, j) - max);
        for (int64_t j = 0; j < lk; j++)
            if (is_active(step, &w, b, j)) {
                double alpha = exp(score_reference(step, b, j) - max) / total;
                a[j] = (float)(w.gaussian ? alpha * gaussian_at(&w, j) : alpha);
            }
        for (int64_t d = 0; d < dv; d++) {
            double sum = 0;
            for (int64_t j = 0; j < lk; j++)
                sum += (double)a[j] * step->values[(b * lk + j) * dv + d];
            context[b * dv + d] = (float)sum;
        }
    }
}

static void backward_reference(const attn_classic_step *step, const float *weights,
                               const float *dcontext, const float *dweights,
                               const attn_classic_grads *g)
{
    int64_t lk = step->src_len, n = step->key_dim, dv = step->value_dim;
    for (int64_t b = 0; b < step->batch; b++) {
        row_window w = window_of_row(step, b);
        const float *a = weights + b * lk;
        const float *dc = dcontext + b * dv;
        float *ds = g->dscores + b * lk;

        /* d(loss)/d(weight_j), then through the Gaussian into p_t and through the softmax
         * into the scores: with alpha the softmax and a = alpha * g,
         * de_j = a_j dA_j - alpha_j sum_k a_k dA_k. */
        double weighted_sum = 0, dcenter = 0;
        for (int64_t j = 0; j < lk; j++) {
            ds[j] = 0.0f;
            if (!is_active(step, &w, b, j))
                continue;
            double da = dweights != NULL ? dweights[b * lk + j] : 0.0;
            for (int64_t d = 0; d < dv; d++)
                da += (double)dc[d] * step->values[(b * lk + j) * dv + d];
            ds[j] = (float)da;
            weighted_sum += a[j] * da;
            dcenter += da * a[j] * ((double)j - w.center);
            if (g->dvalues != NULL)
                for (int64_t d = 0; d < dv; d++)
                    g->dvalues[(b * lk + j) * dv + d] += (float)((double)a[j] * dc[d]);
        }
        if (step->align == ATTN_LUONG_LOCAL_P)
            g->dcenters[b] = (float)(dcenter * 2.0 * w.inv_two_sigma_sq);
        for (int64_t j = 0; j < lk; j++) {
            if (!is_active(step, &w, b, j))
                continue;
            double alpha = w.gaussian ? a[j] / gaussian_at(&w, j) : a[j];
            ds[j] = (float)(a[j] * (double)ds[j] - alpha * weighted_sum);
        }

        const float *q = step->query + b * n;
        for (int64_t d = 0; d < n; d++) {
            double dq = 0, dv_sum = 0;
            for (int64_t j = 0; j < lk; j++) {
                if (!is_active(step, &w, b, j))
                    continue;
                size_t at = (size_t)((b * lk + j) * n + d);
                double k = step->keys[at];
                double dkey;
                if (step->score == ATTN_CLASSIC_DOT) {
                    dq += ds[j] * k;
                    dkey = (double)ds[j] * q[d];
                } else {
                    double t = tanh((double)q[d] + k);
                    dkey = (double)ds[j] * step->v[d] * (1.0 - t * t);
                    dq += dkey;
                    dv_sum += ds[j] * t;
                }
                if (g->dkeys != NULL)
                    g->dkeys[at] += (float)dkey;
            }
            g->dquery[b * n + d] = (float)dq;
            if (step->score == ATTN_CLASSIC_MLP && g->dv_rows != NULL)
                g->dv_rows[b * n + d] = (float)dv_sum;
        }
    }
}

/* ---- float version, threaded over the batch --------------------------------------------- */

/* A dot product in eight interleaved partial sums: a fixed order that the compiler can
 * turn into vector lanes without -ffast-math. */
static float dot_lanes(const float *x, const float *y, int64_t n)
{
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; l++)
            lane[l] += x[i + l] * y[i + l];
    float tail = 0;
    for (; i < n; i++)
        tail += x[i] * y[i];
    return ((lane[0] + lane[4]) + (lane[1] + lane[5])) +
           ((lane[2] + lane[6]) + (lane[3] + lane[7])) + tail;
}

float attn_classic_mlp_score_portable(const float *q, const float *k, const float *v, int64_t n)
{
    float sum = 0;
    for (int64_t d = 0; d < n; d++)
        sum += v[d] * attn_fast_tanh(q[d] + k[d]);
    return sum;
}

void attn_classic_mlp_backward_portable(const float *q, const float *k, const float *v, float de,
                                        int64_t n, float *dq, float *dk, float *dv_row)
{
    for (int64_t d = 0; d < n; d++) {
        float t = attn_fast_tanh(q[d] + k[d]);
        float g = de * v[d] * (1.0f - t * t);
        dq[d] += g;
        if (dk != NULL)
            dk[d] += g;
        if (dv_row != NULL)
            dv_row[d] += de * t;
    }
}

typedef struct row_job {
    const attn_classic_step *step;
    attn_classic_mlp_score_fn mlp_score;
    attn_classic_mlp_backward_fn mlp_backward;
    float *scores, *context, *weights;
    const float *dcontext, *dweights, *weights_in;
    const attn_classic_grads *grads;
} row_job;

static float score_fast(const row_job *job, int64_t b, int64_t j)
{
    const attn_classic_step *step = job->step;
    int64_t n = step->key_dim;
    const float *q = step->query + b * n;
    const float *k = step->keys + (b * step->src_len + j) * n;
    return step->score == ATTN_CLASSIC_DOT ? dot_lanes(q, k, n) : job->mlp_score(q, k, step->v, n);
}

static row_job make_job(const attn_classic_step *step)
{
    const attn_isa isa = attn_active_isa();
    row_job job = {
        .step = step,
        .mlp_score = ATTN_FOR_ISA(isa, attn_classic_mlp_score, attn_classic_mlp_score_portable),
        .mlp_backward =
            ATTN_FOR_ISA(isa, attn_classic_mlp_backward, attn_classic_mlp_backward_portable)};
    return job;
}

static void scores_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const row_job *job = ctx;
    const attn_classic_step *step = job->step;
    for (int64_t b = begin; b < end; b++)
        for (int64_t j = 0; j < step->src_len; j++)
            job->scores[b * step->src_len + j] = score_fast(job, b, j);
}

static void forward_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const row_job *job = ctx;
    const attn_classic_step *step = job->step;
    int64_t lk = step->src_len, dv = step->value_dim;
    for (int64_t b = begin; b < end; b++) {
        row_window w = window_of_row(step, b);
        float *a = job->weights + b * lk;
        float *c = job->context + b * dv;
        memset(a, 0, (size_t)lk * sizeof(float));
        memset(c, 0, (size_t)dv * sizeof(float));
        float max = -INFINITY;
        int64_t active = 0;
        for (int64_t j = w.lo; j <= w.hi; j++)
            if (is_active(step, &w, b, j)) {
                a[j] = score_fast(job, b, j);
                max = a[j] > max ? a[j] : max;
                active++;
            }
        if (active == 0)
            continue;
        float total = 0;
        for (int64_t j = w.lo; j <= w.hi; j++)
            if (is_active(step, &w, b, j)) {
                a[j] = expf(a[j] - max);
                total += a[j];
            }
        float inv_total = 1.0f / total;
        for (int64_t j = w.lo; j <= w.hi; j++) {
            a[j] *= inv_total; /* inactive positions hold 0 */
            if (w.gaussian)
                a[j] = (float)(a[j] * gaussian_at(&w, j));
            if (a[j] == 0.0f)
                continue;
            const float *val = step->values + (b * lk + j) * dv;
            for (int64_t d = 0; d < dv; d++)
                c[d] += a[j] * val[d];
        }
    }
}

static void backward_rows(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const row_job *job = ctx;
    const attn_classic_step *step = job->step;
    const attn_classic_grads *g = job->grads;
    int64_t lk = step->src_len, n = step->key_dim, dv = step->value_dim;
    for (int64_t b = begin; b < end; b++) {
        row_window w = window_of_row(step, b);
        const float *a = job->weights_in + b * lk;
        const float *dc = job->dcontext + b * dv;
        float *ds = g->dscores + b * lk;
        float *dq = g->dquery + b * n;
        float *dv_row = g->dv_rows != NULL ? g->dv_rows + b * n : NULL;
        memset(dq, 0, (size_t)n * sizeof(float));
        if (dv_row != NULL)
            memset(dv_row, 0, (size_t)n * sizeof(float));

        float weighted_sum = 0, dcenter = 0;
        for (int64_t j = w.lo; j <= w.hi; j++) {
            if (!is_active(step, &w, b, j))
                continue;
            const float *val = step->values + (b * lk + j) * dv;
            float da = dot_lanes(dc, val, dv);
            if (job->dweights != NULL)
                da += job->dweights[b * lk + j];
            ds[j] = da;
            weighted_sum += a[j] * da;
            dcenter += da * a[j] * (float)((double)j - w.center);
            if (g->dvalues != NULL) {
                float *dval = g->dvalues + (b * lk + j) * dv;
                for (int64_t d = 0; d < dv; d++)
                    dval[d] += a[j] * dc[d];
            }
        }
        if (step->align == ATTN_LUONG_LOCAL_P)
            g->dcenters[b] = (float)(dcenter * 2.0 * w.inv_two_sigma_sq);

        const float *q = step->query + b * n;
        for (int64_t j = w.lo; j <= w.hi; j++) {
            if (!is_active(step, &w, b, j))
                continue;
            float alpha = w.gaussian ? (float)(a[j] / gaussian_at(&w, j)) : a[j];
            float de = a[j] * ds[j] - alpha * weighted_sum;
            const float *k = step->keys + (b * lk + j) * n;
            float *dk = g->dkeys != NULL ? g->dkeys + (b * lk + j) * n : NULL;
            if (step->score == ATTN_CLASSIC_MLP) {
                job->mlp_backward(q, k, step->v, de, n, dq, dk, dv_row);
                continue;
            }
            for (int64_t d = 0; d < n; d++)
                dq[d] += de * k[d];
            if (dk != NULL)
                for (int64_t d = 0; d < n; d++)
                    dk[d] += de * q[d];
        }
    }
}

/* ---- dispatch ------------------------------------------------------------------------ */

void attn_classic_scores(const attn_classic_step *step, float *scores)
{
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        scores_reference(step, scores);
        return;
    }
    row_job job = make_job(step);
    job.scores = scores;
    attn_parallel_for(step->batch, rows_per_chunk(step), scores_rows, &job);
}

void attn_classic_forward(const attn_classic_step *step, float *context, float *weights)
{
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        forward_reference(step, context, weights);
        return;
    }
    row_job job = make_job(step);
    job.context = context;
    job.weights = weights;
    attn_parallel_for(step->batch, rows_per_chunk(step), forward_rows, &job);
}

void attn_classic_backward(const attn_classic_step *step, const float *weights,
                           const float *dcontext, const float *dweights,
                           const attn_classic_grads *grads)
{
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        backward_reference(step, weights, dcontext, dweights, grads);
        return;
    }
    row_job job = make_job(step);
    job.weights_in = weights;
    job.dcontext = dcontext;
    job.dweights = dweights;
    job.grads = grads;
    attn_parallel_for(step->batch, rows_per_chunk(step), backward_rows, &job);
}

void attn_classic_sum_rows(int64_t rows, int64_t cols, const float *in, float *out)
{
    for (int64_t j = 0; j < cols; j++) {
        double sum = 0;
        for (int64_t b = 0; b < rows; b++)
            sum += in[b * cols + j];
        out[j] += (float)sum;
    }
}
