/* Multi-head attention: a double-precision reference written here from the textbook
 * formulas, its backward checked against central finite differences, then attn_mha_forward
 * and attn_mha_backward checked against it for every instruction set the CPU supports, over
 * self, causal and cross attention, packed and separate weights, every mask, both weight
 * outputs and aliased inputs; then determinism, accumulation, empty sizes and bad input. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ALIAS_NONE = 0, ALIAS_SELF = 1, ALIAS_KEY_VALUE = 2 };
enum { MASK_NONE = 0, MASK_2D = 1, MASK_PER_HEAD = 2 };
enum { WEIGHTS_NONE = 0, WEIGHTS_MEAN = 1, WEIGHTS_PER_HEAD = 2 };
enum { PADDING_NONE = 0, PADDING_SOME = 1, PADDING_ONE_ROW_EMPTY = 2 };

typedef struct mha_case {
    const char *name;
    int64_t batch, len_q, len_k, embed, heads, kdim, vdim;
    int packed;      /* in_proj_weight, else q/k/v_proj_weight */
    int alias;       /* which inputs are one pointer */
    int grad_alias;  /* aliased inputs share one gradient buffer too */
    int biases;
    int causal;
    int64_t window;  /* < 0: none */
    int padding;
    int attn_mask;
    int weights;
} mha_case;

/* Every input and parameter in one flat array (so finite differences can walk it), and
 * gradients in a second array of the same layout. W_q, W_k, W_v are adjacent, and so are
 * b_q, b_k, b_v, so that with kdim == vdim == E they form in_proj_weight and in_proj_bias. */
typedef struct layout {
    int64_t xq, xk, xv, wq, wk, wv, bq, bk, bv, wo, bo, total;
} layout;

static layout make_layout(const mha_case *c)
{
    layout l;
    int64_t at = 0;
    l.xq = at, at += c->batch * c->len_q * c->embed;
    l.xk = at, at += c->batch * c->len_k * c->kdim;
    l.xv = at, at += c->batch * c->len_k * c->vdim;
    l.wq = at, at += c->embed * c->embed;
    l.wk = at, at += c->embed * c->kdim;
    l.wv = at, at += c->embed * c->vdim;
    l.bq = at, at += c->embed;
    l.bk = at, at += c->embed;
    l.bv = at, at += c->embed;
    l.wo = at, at += c->embed * c->embed;
    l.bo = at, at += c->embed;
    l.total = at;
    return l;
}

typedef struct masks {
    uint8_t *padding; /* [B, Lk] or NULL */
    float *attn_mask; /* [Lq, Lk] or [B*H, Lq, Lk] or NULL */
} masks;

static masks make_masks(const mha_case *c, uint64_t seed)
{
    masks m = {NULL, NULL};
    if (c->padding != PADDING_NONE) {
        int64_t n = c->batch * c->len_k;
        m.padding = test_alloc((size_t)n);
        float *u = test_alloc((size_t)n * sizeof(float));
        test_fill_uniform(u, (size_t)n, 0, 1, seed);
        for (int64_t b = 0; b < c->batch; b++)
            for (int64_t j = 0; j < c->len_k; j++)
                /* key 0 always stays (unless the row is emptied), so most rows keep keys */
                m.padding[b * c->len_k + j] = (uint8_t)(j > 0 && u[b * c->len_k + j] < 0.3f);
        if (c->padding == PADDING_ONE_ROW_EMPTY)
            memset(m.padding + (c->batch - 1) * c->len_k, 1, (size_t)c->len_k);
        free(u);
    }
    if (c->attn_mask != MASK_NONE) {
        int64_t planes = c->attn_mask == MASK_PER_HEAD ? c->batch * c->heads : 1;
        int64_t n = planes * c->len_q * c->len_k;
        m.attn_mask = test_alloc((size_t)n * sizeof(float));
        test_fill_uniform(m.attn_mask, (size_t)n, -1, 1, seed + 1);
        for (int64_t x = 0; x < n; x++)
            if (x % c->len_k != 0 && m.attn_mask[x] > 0.7f)
                m.attn_mask[x] = -INFINITY;
    }
    return m;
}

static void free_masks(masks *m)
{
    free(m->padding);
    free(m->attn_mask);
}

/* The precision run_library multiplies in (the bf16 test switches it). */
static attn_precision run_precision = ATTN_PRECISION_FP32;

static attn_sdpa_options make_options(const mha_case *c, const masks *m)
{
    attn_sdpa_options o = attn_sdpa_default_options();
    o.precision = run_precision;
    o.causal = c->causal;
    o.window = c->window;
    o.key_padding_mask = m->padding;
    o.attn_mask = m->attn_mask;
    o.attn_mask_per_head = c->attn_mask == MASK_PER_HEAD;
    return o;
}

/* Inputs uniform in [-1, 1]; weights scaled by 1/sqrt(fan-in) so activations stay O(1). When
 * inputs alias, the aliased regions hold the same values. */
static double *make_theta(const mha_case *c, const layout *l, uint64_t seed)
{
    double *t = test_alloc((size_t)l->total * sizeof(double));
    test_fill_uniform_double(t, (size_t)l->total, -1, 1, seed);
    struct { int64_t at, rows, fan_in; } w[] = {{l->wq, c->embed, c->embed},
                                                {l->wk, c->embed, c->kdim},
                                                {l->wv, c->embed, c->vdim},
                                                {l->wo, c->embed, c->embed}};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        for (int64_t x = 0; x < w[i].rows * w[i].fan_in; x++)
            t[w[i].at + x] *= 1.5 / sqrt((double)w[i].fan_in);
    if (!c->biases)
        for (int64_t x = l->bq; x < l->bv + c->embed; x++)
            t[x] = 0;
    if (!c->biases)
        for (int64_t x = 0; x < c->embed; x++)
            t[l->bo + x] = 0;
    if (c->alias == ALIAS_SELF) {
        memcpy(t + l->xk, t + l->xq, (size_t)(c->batch * c->len_q * c->embed) * sizeof(double));
        memcpy(t + l->xv, t + l->xq, (size_t)(c->batch * c->len_q * c->embed) * sizeof(double));
    } else if (c->alias == ALIAS_KEY_VALUE) {
        memcpy(t + l->xv, t + l->xk, (size_t)(c->batch * c->len_k * c->kdim) * sizeof(double));
    }
    return t;
}

/* ---- the double-precision reference ---------------------------------------------------- */

typedef struct reference {
    const mha_case *c;
    const masks *m;
    layout l;
    double *q, *k, *v, *a, *probs; /* [B,Lq,E], [B,Lk,E], [B,Lk,E], [B,Lq,E], [B,H,Lq,Lk] */
} reference;

static reference reference_new(const mha_case *c, const masks *m)
{
    reference r;
    r.c = c;
    r.m = m;
    r.l = make_layout(c);
    r.q = test_alloc((size_t)(c->batch * c->len_q * c->embed) * sizeof(double));
    r.k = test_alloc((size_t)(c->batch * c->len_k * c->embed) * sizeof(double));
    r.v = test_alloc((size_t)(c->batch * c->len_k * c->embed) * sizeof(double));
    r.a = test_alloc((size_t)(c->batch * c->len_q * c->embed) * sizeof(double));
    r.probs = test_alloc((size_t)(c->batch * c->heads * c->len_q * c->len_k) * sizeof(double));
    return r;
}

static void reference_free(reference *r)
{
    free(r->q);
    free(r->k);
    free(r->v);
    free(r->a);
    free(r->probs);
}

/* y[rows, E] = x[rows, in] w^T + b */
static void linear(int64_t rows, int64_t in, int64_t out_dim, const double *x, const double *w,
                   const double *b, double *y)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out_dim; o++) {
            double sum = b[o];
            for (int64_t i = 0; i < in; i++)
                sum += x[r * in + i] * w[o * in + i];
            y[r * out_dim + o] = sum;
        }
}

static int pair_allowed(const reference *r, int64_t b, int64_t h, int64_t i, int64_t j,
                        double *additive)
{
    const mha_case *c = r->c;
    *additive = 0;
    if (r->m->padding != NULL && r->m->padding[b * c->len_k + j])
        return 0;
    if (c->causal && j > i)
        return 0;
    if (c->window >= 0 && llabs((long long)(i - j)) > c->window)
        return 0;
    if (r->m->attn_mask != NULL) {
        int64_t plane = c->attn_mask == MASK_PER_HEAD ? b * c->heads + h : 0;
        float add = r->m->attn_mask[(plane * c->len_q + i) * c->len_k + j];
        if (add == -INFINITY)
            return 0;
        *additive = add;
    }
    return 1;
}

/* out [B, Lq, E]; also leaves Q, K, V, A and the probabilities in r. */
static void reference_forward(reference *r, const double *t, double *out)
{
    const mha_case *c = r->c;
    const layout *l = &r->l;
    const int64_t e = c->embed, d = e / c->heads;
    const double scale = 1.0 / sqrt((double)d);
    linear(c->batch * c->len_q, e, e, t + l->xq, t + l->wq, t + l->bq, r->q);
    linear(c->batch * c->len_k, c->kdim, e, t + l->xk, t + l->wk, t + l->bk, r->k);
    linear(c->batch * c->len_k, c->vdim, e, t + l->xv, t + l->wv, t + l->bv, r->v);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t i = 0; i < c->len_q; i++) {
                double *p = r->probs + ((b * c->heads + h) * c->len_q + i) * c->len_k;
                const double *q = r->q + (b * c->len_q + i) * e + h * d;
                double max = -INFINITY;
                for (int64_t j = 0; j < c->len_k; j++) {
                    double additive;
                    p[j] = -INFINITY;
                    if (!pair_allowed(r, b, h, i, j, &additive))
                        continue;
                    const double *k = r->k + (b * c->len_k + j) * e + h * d;
                    double dot = 0;
                    for (int64_t x = 0; x < d; x++)
                        dot += q[x] * k[x];
                    p[j] = dot * scale + additive;
                    max = fmax(max, p[j]);
                }
                double sum = 0;
                for (int64_t j = 0; j < c->len_k; j++) {
                    p[j] = max == -INFINITY ? 0 : exp(p[j] - max);
                    sum += p[j];
                }
                double *a = r->a + (b * c->len_q + i) * e + h * d;
                for (int64_t x = 0; x < d; x++)
                    a[x] = 0;
                for (int64_t j = 0; j < c->len_k; j++) {
                    if (sum > 0)
                        p[j] /= sum;
                    const double *v = r->v + (b * c->len_k + j) * e + h * d;
                    for (int64_t x = 0; x < d; x++)
                        a[x] += p[j] * v[x];
                }
            }
    linear(c->batch * c->len_q, e, e, r->a, t + l->wo, t + l->bo, out);
}

/* The backward of y = x w^T + b for dy: dx += dy w, dw += dy^T x, db += sum dy. */
static void linear_backward(int64_t rows, int64_t in, int64_t out_dim, const double *x,
                            const double *w, const double *dy, double *dx, double *dw,
                            double *db)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t o = 0; o < out_dim; o++) {
            double g = dy[r * out_dim + o];
            db[o] += g;
            for (int64_t i = 0; i < in; i++) {
                dx[r * in + i] += g * w[o * in + i];
                dw[o * in + i] += g * x[r * in + i];
            }
        }
}

/* dt (layout of t, zeroed by the caller) += gradient of sum(out * grad_out). */
static void reference_backward(reference *r, const double *t, const double *grad_out, double *dt)
{
    const mha_case *c = r->c;
    const layout *l = &r->l;
    const int64_t e = c->embed, d = e / c->heads;
    const double scale = 1.0 / sqrt((double)d);
    double *out = test_alloc((size_t)(c->batch * c->len_q * e) * sizeof(double));
    reference_forward(r, t, out);
    free(out);
    size_t q_bytes = (size_t)(c->batch * c->len_q * e) * sizeof(double);
    size_t k_bytes = (size_t)(c->batch * c->len_k * e) * sizeof(double);
    double *da = test_alloc(q_bytes), *dq = test_alloc(q_bytes);
    double *dk = test_alloc(k_bytes), *dv = test_alloc(k_bytes);
    double *dp = test_alloc((size_t)c->len_k * sizeof(double));
    linear_backward(c->batch * c->len_q, e, e, r->a, t + l->wo, grad_out, da, dt + l->wo,
                    dt + l->bo);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t i = 0; i < c->len_q; i++) {
                const double *p = r->probs + ((b * c->heads + h) * c->len_q + i) * c->len_k;
                const double *q = r->q + (b * c->len_q + i) * e + h * d;
                const double *g = da + (b * c->len_q + i) * e + h * d;
                double weighted = 0;
                for (int64_t j = 0; j < c->len_k; j++) {
                    const double *v = r->v + (b * c->len_k + j) * e + h * d;
                    dp[j] = 0;
                    for (int64_t x = 0; x < d; x++)
                        dp[j] += g[x] * v[x];
                    weighted += p[j] * dp[j];
                }
                for (int64_t j = 0; j < c->len_k; j++) {
                    double ds = p[j] * (dp[j] - weighted) * scale;
                    const double *k = r->k + (b * c->len_k + j) * e + h * d;
                    for (int64_t x = 0; x < d; x++) {
                        dq[(b * c->len_q + i) * e + h * d + x] += ds * k[x];
                        dk[(b * c->len_k + j) * e + h * d + x] += ds * q[x];
                        dv[(b * c->len_k + j) * e + h * d + x] += p[j] * g[x];
                    }
                }
            }
    linear_backward(c->batch * c->len_q, e, e, t + l->xq, t + l->wq, dq, dt + l->xq, dt + l->wq,
                    dt + l->bq);
    linear_backward(c->batch * c->len_k, c->kdim, e, t + l->xk, t + l->wk, dk, dt + l->xk,
                    dt + l->wk, dt + l->bk);
    linear_backward(c->batch * c->len_k, c->vdim, e, t + l->xv, t + l->wv, dv, dt + l->xv,
                    dt + l->wv, dt + l->bv);
    free(da);
    free(dq);
    free(dk);
    free(dv);
    free(dp);
}

static double reference_loss(reference *r, double *t, const double *grad_out, double *out)
{
    reference_forward(r, t, out);
    double loss = 0;
    for (int64_t x = 0; x < r->c->batch * r->c->len_q * r->c->embed; x++)
        loss += out[x] * grad_out[x];
    return loss;
}

/* The reference backward against central differences of the reference forward, for every
 * input and parameter. */
static void check_reference_gradients(const mha_case *c)
{
    masks m = make_masks(c, 11);
    reference r = reference_new(c, &m);
    double *t = make_theta(c, &r.l, 21);
    int64_t n_out = c->batch * c->len_q * c->embed;
    double *grad_out = test_alloc((size_t)n_out * sizeof(double));
    double *out = test_alloc((size_t)n_out * sizeof(double));
    double *dt = test_alloc((size_t)r.l.total * sizeof(double));
    double *fd = test_alloc((size_t)r.l.total * sizeof(double));
    test_fill_uniform_double(grad_out, (size_t)n_out, -1, 1, 31);
    reference_backward(&r, t, grad_out, dt);
    const double eps = 1e-6;
    for (int64_t x = 0; x < r.l.total; x++) {
        double saved = t[x];
        t[x] = saved + eps;
        double up = reference_loss(&r, t, grad_out, out);
        t[x] = saved - eps;
        double down = reference_loss(&r, t, grad_out, out);
        t[x] = saved;
        fd[x] = (up - down) / (2 * eps);
    }
    int ok = 1;
    int64_t worst = 0;
    for (int64_t x = 0; x < r.l.total; x++)
        if (!test_close(dt[x], fd[x], 1e-7, 1e-6)) {
            if (ok || fabs(dt[x] - fd[x]) > fabs(dt[worst] - fd[worst]))
                worst = x;
            ok = 0;
        }
    CHECK(ok, "%s: reference backward matches finite differences (worst [%lld]: %.12g vs %.12g)",
          c->name, (long long)worst, dt[worst], fd[worst]);
    double largest = 0;
    for (int64_t x = 0; x < r.l.total; x++)
        largest = fmax(largest, fabs(dt[x]));
    CHECK(largest > 1e-3, "%s: gradients are not trivially zero (%g)", c->name, largest);
    free(grad_out);
    free(out);
    free(dt);
    free(fd);
    free(t);
    reference_free(&r);
    free_masks(&m);
}

/* ---- running the library on a case ----------------------------------------------------- */

typedef struct float_run {
    float *out, *weights, *grads; /* grads: layout of theta */
} float_run;

static attn_mha_dims dims_of(const mha_case *c)
{
    attn_mha_dims d = {c->batch, c->len_q, c->len_k, c->embed, c->heads, c->kdim, c->vdim, 0.0};
    return d;
}

static attn_mha_params params_of(const mha_case *c, const layout *l, const float *t)
{
    attn_mha_params p;
    memset(&p, 0, sizeof p);
    if (c->packed) {
        p.in_proj_weight = t + l->wq;
    } else {
        p.q_proj_weight = t + l->wq;
        p.k_proj_weight = t + l->wk;
        p.v_proj_weight = t + l->wv;
    }
    p.in_proj_bias = c->biases ? t + l->bq : NULL;
    p.out_proj_weight = t + l->wo;
    p.out_proj_bias = c->biases ? t + l->bo : NULL;
    return p;
}

static attn_mha_grads grads_of(const mha_case *c, const layout *l, float *g)
{
    attn_mha_grads p;
    memset(&p, 0, sizeof p);
    if (c->packed) {
        p.in_proj_weight = g + l->wq;
    } else {
        p.q_proj_weight = g + l->wq;
        p.k_proj_weight = g + l->wk;
        p.v_proj_weight = g + l->wv;
    }
    p.in_proj_bias = c->biases ? g + l->bq : NULL;
    p.out_proj_weight = g + l->wo;
    p.out_proj_bias = c->biases ? g + l->bo : NULL;
    return p;
}

static size_t weights_count(const mha_case *c)
{
    int64_t per_row = c->weights == WEIGHTS_PER_HEAD ? c->heads : 1;
    return (size_t)(c->batch * per_row * c->len_q * c->len_k);
}

/* Forward and backward through the library, inputs aliased as the case says. */
static float_run run_library(const mha_case *c, const layout *l, const float *t, const masks *m,
                             const float *grad_out)
{
    float_run run;
    attn_mha_dims dims = dims_of(c);
    attn_mha_buffer_sizes sizes;
    CHECK_OK(attn_mha_sizes(&dims, &sizes));
    float *saved = test_alloc(sizes.saved_floats * sizeof(float));
    float *fscratch = test_alloc(sizes.forward_scratch_floats * sizeof(float));
    float *bscratch = test_alloc(sizes.backward_scratch_floats * sizeof(float));
    run.out = test_alloc((size_t)(c->batch * c->len_q * c->embed) * sizeof(float));
    run.weights = test_alloc(weights_count(c) * sizeof(float) + 1);
    run.grads = test_alloc((size_t)l->total * sizeof(float));

    const float *query = t + l->xq, *key = t + l->xk, *value = t + l->xv;
    float *grad_query = run.grads + l->xq, *grad_key = run.grads + l->xk;
    float *grad_value = run.grads + l->xv;
    if (c->alias == ALIAS_SELF) {
        key = value = query;
        if (c->grad_alias)
            grad_key = grad_value = grad_query;
    } else if (c->alias == ALIAS_KEY_VALUE) {
        value = key;
        if (c->grad_alias)
            grad_value = grad_key;
    }
    attn_mha_params params = params_of(c, l, t);
    attn_mha_grads grads = grads_of(c, l, run.grads);
    attn_sdpa_options options = make_options(c, m);
    CHECK_OK(attn_mha_forward(&dims, &params, query, key, value, &options, run.out,
                              c->weights != WEIGHTS_NONE ? run.weights : NULL,
                              c->weights == WEIGHTS_MEAN, saved, fscratch));
    CHECK_OK(attn_mha_backward(&dims, &params, query, key, value, &options, saved, grad_out,
                               bscratch, grad_query, grad_key, grad_value, &grads));
    free(saved);
    free(fscratch);
    free(bscratch);
    return run;
}

static void free_run(float_run *run)
{
    free(run->out);
    free(run->weights);
    free(run->grads);
}

static float *to_float(const double *x, int64_t n)
{
    float *f = test_alloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)x[i];
    return f;
}

static double max_abs_double(const double *x, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++)
        m = fmax(m, fabs(x[i]));
    return m;
}

/* Float results against the double reference: tolerances relative to each array's scale. */
static void check_close_to(const mha_case *c, const char *isa, const char *what, const float *got,
                           const double *want, int64_t n)
{
    char label[160];
    snprintf(label, sizeof label, "%s [%s] %s", c->name, isa, what);
    double scale = fmax(1.0, max_abs_double(want, n));
    CHECK_ARRAYS_CLOSE(label, got, want, (size_t)n, 2e-5 * scale, 1e-4);
}

static void check_against_reference(const mha_case *c)
{
    masks m = make_masks(c, 101);
    reference r = reference_new(c, &m);
    const layout *l = &r.l;
    double *t = make_theta(c, l, 202);
    float *tf = to_float(t, l->total);
    /* The reference runs on exactly the float inputs. */
    for (int64_t x = 0; x < l->total; x++)
        t[x] = tf[x];
    const int64_t n_out = c->batch * c->len_q * c->embed;
    double *grad_out = test_alloc((size_t)n_out * sizeof(double));
    test_fill_uniform_double(grad_out, (size_t)n_out, -1, 1, 303);
    float *grad_out_f = to_float(grad_out, n_out);
    for (int64_t x = 0; x < n_out; x++)
        grad_out[x] = grad_out_f[x];

    double *out = test_alloc((size_t)n_out * sizeof(double));
    double *dt = test_alloc((size_t)l->total * sizeof(double));
    reference_forward(&r, t, out);
    reference_backward(&r, t, grad_out, dt);

    /* What the library should report for each input region after aliasing. */
    const int64_t nq = c->batch * c->len_q * c->embed, nk = c->batch * c->len_k * c->kdim;
    const int64_t nv = c->batch * c->len_k * c->vdim;
    if (c->alias == ALIAS_SELF && c->grad_alias)
        for (int64_t x = 0; x < nq; x++)
            dt[l->xq + x] += dt[l->xk + x] + dt[l->xv + x];
    if (c->alias == ALIAS_KEY_VALUE && c->grad_alias)
        for (int64_t x = 0; x < nk; x++)
            dt[l->xk + x] += dt[l->xv + x];

    const int64_t plane = c->len_q * c->len_k;
    double *weights = test_alloc(weights_count(c) * sizeof(double) + 1);
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t x = 0; x < plane; x++) {
                double p = r.probs[(b * c->heads + h) * plane + x];
                if (c->weights == WEIGHTS_PER_HEAD)
                    weights[(b * c->heads + h) * plane + x] = p;
                else if (c->weights == WEIGHTS_MEAN)
                    weights[b * plane + x] += p / (double)c->heads;
            }

    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (!test_isa_wanted((attn_isa)isa))
            continue;
        CHECK_OK(attn_set_isa((attn_isa)isa));
        const char *name = attn_isa_name((attn_isa)isa);
        float_run run = run_library(c, l, tf, &m, grad_out_f);
        check_close_to(c, name, "out", run.out, out, n_out);
        if (c->weights != WEIGHTS_NONE)
            check_close_to(c, name, "weights", run.weights, weights, (int64_t)weights_count(c));
        check_close_to(c, name, "d query", run.grads + l->xq, dt + l->xq, nq);
        if (!(c->alias == ALIAS_SELF && c->grad_alias))
            check_close_to(c, name, "d key", run.grads + l->xk, dt + l->xk, nk);
        if (c->alias == ALIAS_NONE || !c->grad_alias)
            check_close_to(c, name, "d value", run.grads + l->xv, dt + l->xv, nv);
        check_close_to(c, name, "d W_q", run.grads + l->wq, dt + l->wq, c->embed * c->embed);
        check_close_to(c, name, "d W_k", run.grads + l->wk, dt + l->wk, c->embed * c->kdim);
        check_close_to(c, name, "d W_v", run.grads + l->wv, dt + l->wv, c->embed * c->vdim);
        check_close_to(c, name, "d W_out", run.grads + l->wo, dt + l->wo, c->embed * c->embed);
        if (c->biases) {
            check_close_to(c, name, "d in_proj_bias", run.grads + l->bq, dt + l->bq, 3 * c->embed);
            check_close_to(c, name, "d b_out", run.grads + l->bo, dt + l->bo, c->embed);
        }
        if (c->padding == PADDING_ONE_ROW_EMPTY) {
            /* The last batch element sees no key: its output is b_out exactly. */
            const float *last = run.out + (c->batch - 1) * c->len_q * c->embed;
            int is_bias = 1;
            for (int64_t i = 0; i < c->len_q; i++)
                for (int64_t x = 0; x < c->embed; x++)
                    is_bias &= last[i * c->embed + x] == (c->biases ? tf[l->bo + x] : 0.0f);
            CHECK(is_bias, "%s [%s]: a fully masked row gives b_out", c->name, name);
        }
        free_run(&run);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(weights);
    free(out);
    free(dt);
    free(grad_out);
    free(grad_out_f);
    free(tf);
    free(t);
    reference_free(&r);
    free_masks(&m);
}

/* ---- the cases ------------------------------------------------------------------------ */

/* Small enough to difference every input and parameter. */
static const mha_case gradient_cases[] = {
    {"fd self causal", 2, 3, 3, 4, 2, 4, 4, 1, ALIAS_NONE, 0, 1, 1, -1, PADDING_SOME, MASK_2D,
     WEIGHTS_NONE},
    {"fd cross kdim/vdim", 2, 3, 4, 4, 2, 3, 5, 0, ALIAS_NONE, 0, 1, 0, 1, PADDING_NONE,
     MASK_PER_HEAD, WEIGHTS_NONE},
    {"fd empty row", 2, 2, 3, 6, 3, 6, 6, 1, ALIAS_NONE, 0, 1, 0, -1, PADDING_ONE_ROW_EMPTY,
     MASK_NONE, WEIGHTS_NONE},
};

/* Sizes 1, 3, 5, 17, 129 and head dims 1, 4, 7, 16, 64, 80. */
static const mha_case library_cases[] = {
    {"tiny self", 1, 1, 1, 1, 1, 1, 1, 1, ALIAS_SELF, 1, 1, 0, -1, PADDING_NONE, MASK_NONE,
     WEIGHTS_MEAN},
    {"self causal fused grads", 2, 17, 17, 14, 2, 14, 14, 1, ALIAS_SELF, 1, 1, 1, -1,
     PADDING_NONE, MASK_NONE, WEIGHTS_MEAN},
    {"self split grads", 2, 3, 3, 8, 2, 8, 8, 1, ALIAS_SELF, 0, 1, 0, -1, PADDING_SOME,
     MASK_NONE, WEIGHTS_PER_HEAD},
    {"self separate weights", 2, 5, 5, 12, 3, 12, 12, 0, ALIAS_SELF, 1, 1, 1, -1, PADDING_NONE,
     MASK_2D, WEIGHTS_NONE},
    {"cross key==value", 3, 5, 17, 64, 1, 64, 64, 1, ALIAS_KEY_VALUE, 1, 1, 0, -1,
     PADDING_ONE_ROW_EMPTY, MASK_2D, WEIGHTS_MEAN},
    {"cross key==value split grads", 2, 3, 5, 8, 2, 8, 8, 1, ALIAS_KEY_VALUE, 0, 0, 0, -1,
     PADDING_SOME, MASK_NONE, WEIGHTS_PER_HEAD},
    {"cross kdim/vdim", 2, 17, 3, 160, 2, 7, 5, 0, ALIAS_NONE, 0, 0, 0, -1, PADDING_NONE,
     MASK_PER_HEAD, WEIGHTS_PER_HEAD},
    {"distinct packed", 2, 4, 4, 12, 3, 12, 12, 1, ALIAS_NONE, 0, 1, 1, -1, PADDING_SOME,
     MASK_PER_HEAD, WEIGHTS_MEAN},
    {"long window", 1, 129, 129, 16, 4, 16, 16, 1, ALIAS_SELF, 1, 1, 1, 5, PADDING_NONE,
     MASK_NONE, WEIGHTS_NONE},
};

static void test_reference_matches_finite_differences(void)
{
    for (size_t i = 0; i < sizeof gradient_cases / sizeof gradient_cases[0]; i++)
        check_reference_gradients(&gradient_cases[i]);
}

static void test_library_matches_reference(void)
{
    for (size_t i = 0; i < sizeof library_cases / sizeof library_cases[0]; i++)
        check_against_reference(&library_cases[i]);
}

/* Self-attention through the fused QKV path equals the same inputs passed as three copies
 * (three separate GEMMs), and one shared gradient buffer receives the sum of the three. */
static void test_fused_self_attention_equals_copies(void)
{
    const mha_case fused = {"fused", 2, 6, 6, 16, 4, 16, 16, 1, ALIAS_SELF, 1, 1, 1, -1,
                            PADDING_SOME, MASK_NONE, WEIGHTS_NONE};
    mha_case copies = fused;
    copies.alias = ALIAS_NONE;
    copies.grad_alias = 0;
    layout l = make_layout(&fused);
    masks m = make_masks(&fused, 5);
    double *t = make_theta(&fused, &l, 6);
    float *tf = to_float(t, l.total);
    const int64_t n_out = fused.batch * fused.len_q * fused.embed;
    float *grad_out = test_alloc((size_t)n_out * sizeof(float));
    test_fill_uniform(grad_out, (size_t)n_out, -1, 1, 7);
    float_run a = run_library(&fused, &l, tf, &m, grad_out);
    float_run b = run_library(&copies, &l, tf, &m, grad_out);
    double *summed = test_alloc((size_t)n_out * sizeof(double));
    for (int64_t x = 0; x < n_out; x++)
        summed[x] = (double)b.grads[l.xq + x] + b.grads[l.xk + x] + b.grads[l.xv + x];
    double *out_b = test_alloc((size_t)n_out * sizeof(double));
    for (int64_t x = 0; x < n_out; x++)
        out_b[x] = b.out[x];
    CHECK_ARRAYS_CLOSE("fused out", a.out, out_b, (size_t)n_out, 1e-5, 1e-5);
    CHECK_ARRAYS_CLOSE("fused gradient sum", a.grads + l.xq, summed, (size_t)n_out, 1e-5, 1e-5);
    free_run(&a);
    free_run(&b);
    free(summed);
    free(out_b);
    free(grad_out);
    free(tf);
    free(t);
    free_masks(&m);
}

/* Same inputs, same thread count: identical bits, forward and backward, twice over. */
/* options.precision bf16 reaches the projections (and the attention): outputs and every
 * gradient move from fp32's, by no more than bf16's 8 significant bits allow. */
static void test_bf16_stays_close_to_fp32(void)
{
    for (size_t i = 1; i < sizeof library_cases / sizeof library_cases[0]; i++) {
        const mha_case *c = &library_cases[i];
        masks m = make_masks(c, 11);
        layout l = make_layout(c);
        double *t = make_theta(c, &l, 12);
        float *tf = to_float(t, l.total);
        const int64_t n_out = c->batch * c->len_q * c->embed;
        float *grad_out = test_alloc((size_t)n_out * sizeof(float));
        test_fill_uniform(grad_out, (size_t)n_out, -1.0f, 1.0f, 13);
        float_run fp32 = run_library(c, &l, tf, &m, grad_out);
        run_precision = ATTN_PRECISION_BF16;
        float_run bf16 = run_library(c, &l, tf, &m, grad_out);
        run_precision = ATTN_PRECISION_FP32;
        double out_scale = fmax(1.0, test_max_abs(fp32.out, (size_t)n_out));
        double grad_scale = fmax(1.0, test_max_abs(fp32.grads, (size_t)l.total));
        double out_gap = test_max_abs_diff(fp32.out, bf16.out, (size_t)n_out);
        double grad_gap = test_max_abs_diff(fp32.grads, bf16.grads, (size_t)l.total);
        CHECK(out_gap > 0 && grad_gap > 0, "%s: bf16 changes the results", c->name);
        CHECK(out_gap <= 3e-2 * out_scale && grad_gap <= 3e-2 * grad_scale,
              "%s: bf16 within 3%% of fp32 (output %.3g of %.3g, gradients %.3g of %.3g)", c->name,
              out_gap, out_scale, grad_gap, grad_scale);
        free_run(&fp32);
        free_run(&bf16);
        free(grad_out);
        free(tf);
        free(t);
        free_masks(&m);
    }
}

static void test_deterministic(void)
{
    const mha_case c = {"determinism", 2, 33, 33, 32, 4, 32, 32, 1, ALIAS_SELF, 1, 1, 1, -1,
                        PADDING_SOME, MASK_2D, WEIGHTS_MEAN};
    layout l = make_layout(&c);
    masks m = make_masks(&c, 8);
    double *t = make_theta(&c, &l, 9);
    float *tf = to_float(t, l.total);
    const int64_t n_out = c.batch * c.len_q * c.embed;
    float *grad_out = test_alloc((size_t)n_out * sizeof(float));
    test_fill_uniform(grad_out, (size_t)n_out, -1, 1, 10);
    CHECK_OK(attn_set_num_threads(2));
    float_run a = run_library(&c, &l, tf, &m, grad_out);
    float_run b = run_library(&c, &l, tf, &m, grad_out);
    CHECK(memcmp(a.out, b.out, (size_t)n_out * sizeof(float)) == 0, "out bit-identical");
    CHECK(memcmp(a.weights, b.weights, weights_count(&c) * sizeof(float)) == 0,
          "weights bit-identical");
    CHECK(memcmp(a.grads, b.grads, (size_t)l.total * sizeof(float)) == 0,
          "gradients bit-identical");
    CHECK_OK(attn_set_num_threads(0));
    free_run(&a);
    free_run(&b);
    free(grad_out);
    free(tf);
    free(t);
    free_masks(&m);
}

/* Shared state for the remaining tests: a small self-attention problem with buffers. */
typedef struct fixture {
    mha_case c;
    layout l;
    attn_mha_dims dims;
    attn_mha_buffer_sizes sizes;
    float *t, *grads, *out, *weights, *saved, *fscratch, *bscratch, *grad_out;
    attn_mha_params params;
    attn_mha_grads param_grads;
} fixture;

static fixture fixture_new(void)
{
    fixture f;
    const mha_case c = {"fixture", 2, 3, 4, 8, 2, 8, 8, 1, ALIAS_NONE, 0, 1, 0, -1,
                        PADDING_NONE, MASK_NONE, WEIGHTS_NONE};
    f.c = c;
    f.l = make_layout(&f.c);
    f.dims = dims_of(&f.c);
    attn_mha_sizes(&f.dims, &f.sizes);
    double *t = make_theta(&f.c, &f.l, 44);
    f.t = to_float(t, f.l.total);
    free(t);
    f.grads = test_alloc((size_t)f.l.total * sizeof(float));
    f.out = test_alloc((size_t)(c.batch * c.len_q * c.embed) * sizeof(float));
    f.grad_out = test_alloc((size_t)(c.batch * c.len_q * c.embed) * sizeof(float));
    test_fill_uniform(f.grad_out, (size_t)(c.batch * c.len_q * c.embed), -1, 1, 45);
    f.weights = test_alloc((size_t)(c.batch * c.heads * c.len_q * c.len_k) * sizeof(float));
    f.saved = test_alloc(f.sizes.saved_floats * sizeof(float));
    f.fscratch = test_alloc(f.sizes.forward_scratch_floats * sizeof(float));
    f.bscratch = test_alloc(f.sizes.backward_scratch_floats * sizeof(float));
    f.params = params_of(&f.c, &f.l, f.t);
    f.param_grads = grads_of(&f.c, &f.l, f.grads);
    return f;
}

static void fixture_free(fixture *f)
{
    free(f->t);
    free(f->grads);
    free(f->out);
    free(f->grad_out);
    free(f->weights);
    free(f->saved);
    free(f->fscratch);
    free(f->bscratch);
}

static attn_status fixture_forward(fixture *f)
{
    return attn_mha_forward(&f->dims, &f->params, f->t + f->l.xq, f->t + f->l.xk, f->t + f->l.xv,
                            NULL, f->out, NULL, 0, f->saved, NULL);
}

static attn_status fixture_backward(fixture *f)
{
    return attn_mha_backward(&f->dims, &f->params, f->t + f->l.xq, f->t + f->l.xk,
                             f->t + f->l.xv, NULL, f->saved, f->grad_out, f->bscratch,
                             f->grads + f->l.xq, f->grads + f->l.xk, f->grads + f->l.xv,
                             &f->param_grads);
}

static void test_backward_accumulates(void)
{
    fixture f = fixture_new();
    CHECK_OK(fixture_forward(&f));
    CHECK_OK(fixture_backward(&f));
    float *once = test_alloc((size_t)f.l.total * sizeof(float));
    memcpy(once, f.grads, (size_t)f.l.total * sizeof(float));
    CHECK(test_max_abs(once, (size_t)f.l.total) > 0, "some gradient is non-zero");
    CHECK_OK(fixture_backward(&f));
    double *twice = test_alloc((size_t)f.l.total * sizeof(double));
    for (int64_t x = 0; x < f.l.total; x++)
        twice[x] = 2.0 * once[x];
    CHECK_ARRAYS_CLOSE("second backward adds", f.grads, twice, (size_t)f.l.total, 1e-6, 1e-6);

    /* NULL gradients are skipped and leave the others as they are. */
    memset(f.grads, 0, (size_t)f.l.total * sizeof(float));
    attn_mha_grads only_out;
    memset(&only_out, 0, sizeof only_out);
    only_out.out_proj_weight = f.grads + f.l.wo;
    CHECK_OK(attn_mha_backward(&f.dims, &f.params, f.t + f.l.xq, f.t + f.l.xk, f.t + f.l.xv,
                               NULL, f.saved, f.grad_out, f.bscratch, NULL, NULL, NULL,
                               &only_out));
    int others_zero = 1;
    for (int64_t x = 0; x < f.l.total; x++)
        if (x < f.l.wo || x >= f.l.wo + f.c.embed * f.c.embed)
            others_zero &= f.grads[x] == 0.0f;
    double *w_out = test_alloc((size_t)(f.c.embed * f.c.embed) * sizeof(double));
    for (int64_t x = 0; x < f.c.embed * f.c.embed; x++)
        w_out[x] = once[f.l.wo + x];
    CHECK(others_zero, "only the requested gradient is written");
    CHECK_ARRAYS_CLOSE("d W_out alone", f.grads + f.l.wo, w_out, (size_t)(f.c.embed * f.c.embed),
                       1e-6, 1e-6);
    free(w_out);
    free(once);
    free(twice);
    fixture_free(&f);
}

static void test_empty_sizes(void)
{
    fixture f = fixture_new();
    /* No batch or no query: nothing to do, even with NULL buffers. */
    attn_mha_dims empty = f.dims;
    empty.batch = 0;
    CHECK_OK(attn_mha_forward(&empty, &f.params, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL));
    CHECK_OK(attn_mha_backward(&empty, &f.params, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
                               NULL, NULL, NULL));
    empty = f.dims;
    empty.len_q = 0;
    CHECK_OK(attn_mha_forward(&empty, &f.params, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, NULL));

    /* No keys: every row is fully masked, so the output is b_out and A gets no gradient. */
    attn_mha_dims no_keys = f.dims;
    no_keys.len_k = 0;
    attn_mha_buffer_sizes sizes;
    CHECK_OK(attn_mha_sizes(&no_keys, &sizes));
    CHECK(sizes.saved_floats <= f.sizes.saved_floats, "no keys need no more memory");
    CHECK_OK(attn_mha_forward(&no_keys, &f.params, f.t + f.l.xq, NULL, NULL, NULL, f.out, f.weights,
                              1, f.saved, f.fscratch));
    int is_bias = 1;
    for (int64_t r = 0; r < f.c.batch * f.c.len_q; r++)
        for (int64_t x = 0; x < f.c.embed; x++)
            is_bias &= f.out[r * f.c.embed + x] == f.t[f.l.bo + x];
    CHECK(is_bias, "no keys: out = b_out");
    memset(f.grads, 0, (size_t)f.l.total * sizeof(float));
    CHECK_OK(attn_mha_backward(&no_keys, &f.params, f.t + f.l.xq, NULL, NULL, NULL, f.saved,
                               f.grad_out, f.bscratch, f.grads + f.l.xq, NULL, NULL,
                               &f.param_grads));
    CHECK(test_max_abs(f.grads + f.l.xq, (size_t)(f.c.batch * f.c.len_q * f.c.embed)) == 0,
          "no keys: the query gets no gradient");
    CHECK(test_max_abs(f.grads + f.l.bo, (size_t)f.c.embed) > 0, "no keys: b_out still learns");
    fixture_free(&f);
}

static void test_sizes(void)
{
    attn_mha_dims dims = {3, 5, 7, 12, 4, 0, 0, 0.0};
    attn_mha_buffer_sizes sizes;
    CHECK_OK(attn_mha_sizes(&dims, &sizes));
    /* Q, K, V and A, plus one log-sum-exp per head and query row. */
    CHECK(sizes.saved_floats == (size_t)(3 * 5 * 12 + 2 * 3 * 7 * 12 + 3 * 5 * 12 + 3 * 4 * 5),
          "saved floats: %zu", sizes.saved_floats);
    CHECK(sizes.forward_scratch_floats == (size_t)(4 * 5 * 7), "forward scratch: %zu",
          sizes.forward_scratch_floats);
    CHECK(sizes.backward_scratch_floats == (size_t)(2 * 3 * 5 * 12 + 2 * 3 * 7 * 12),
          "backward scratch: %zu", sizes.backward_scratch_floats);
    CHECK_FAILS(attn_mha_sizes(NULL, &sizes), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_mha_sizes(&dims, NULL), ATTN_ERR_INVALID_ARGUMENT);
    dims.batch = INT64_MAX / 2;
    CHECK_FAILS(attn_mha_sizes(&dims, &sizes), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_bad_input(void)
{
    fixture f = fixture_new();
    const float *q = f.t + f.l.xq, *k = f.t + f.l.xk, *v = f.t + f.l.xv;
    attn_mha_dims d = f.dims;
    attn_mha_params p = f.params;

#define FORWARD_FAILS(dims_ptr, params_ptr, query, opts, out, saved)                            \
    CHECK_FAILS(attn_mha_forward(dims_ptr, params_ptr, query, k, v, opts, out, NULL, 0, saved,  \
                                 NULL),                                                        \
                ATTN_ERR_INVALID_ARGUMENT)

    FORWARD_FAILS(NULL, &p, q, NULL, f.out, f.saved);
    FORWARD_FAILS(&d, NULL, q, NULL, f.out, f.saved);
    FORWARD_FAILS(&d, &p, NULL, NULL, f.out, f.saved);
    FORWARD_FAILS(&d, &p, q, NULL, NULL, f.saved);
    FORWARD_FAILS(&d, &p, q, NULL, f.out, NULL);
    CHECK(strstr(attn_last_error(), "saved") != NULL, "names the buffer: %s", attn_last_error());
    CHECK_FAILS(attn_mha_forward(&d, &p, q, NULL, v, NULL, f.out, NULL, 0, f.saved, NULL),
                ATTN_ERR_INVALID_ARGUMENT);

    d.num_heads = 3;
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    CHECK(strstr(attn_last_error(), "num_heads 3") != NULL, "names num_heads: %s",
          attn_last_error());
    d = f.dims;
    d.num_heads = 0;
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    d = f.dims;
    d.embed_dim = -8;
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    d = f.dims;
    d.len_k = -1;
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    d = f.dims;
    d.kdim = -2;
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    d = f.dims;
    d.kdim = 5; /* the packed weight cannot project 5 features */
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    CHECK(strstr(attn_last_error(), "kdim=5") != NULL, "names kdim: %s", attn_last_error());
    d = f.dims;

    p.q_proj_weight = f.t + f.l.wq; /* both weight forms */
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    p = f.params;
    p.in_proj_weight = NULL; /* neither */
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    p.q_proj_weight = f.t + f.l.wq;
    p.k_proj_weight = f.t + f.l.wk; /* v_proj_weight missing */
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    p = f.params;
    p.out_proj_weight = NULL;
    FORWARD_FAILS(&d, &p, q, NULL, f.out, f.saved);
    p = f.params;

    /* Options are checked by the attention itself; its message comes through. */
    attn_sdpa_options o = attn_sdpa_default_options();
    o.causal = 2;
    FORWARD_FAILS(&d, &p, q, &o, f.out, f.saved);
    o = attn_sdpa_default_options();
    o.attn_mask_per_head = 1;
    FORWARD_FAILS(&d, &p, q, &o, f.out, f.saved);
    o.scale = NAN;
    o.attn_mask_per_head = 0;
    FORWARD_FAILS(&d, &p, q, &o, f.out, f.saved);

    CHECK_FAILS(attn_mha_forward(&d, &p, q, k, v, NULL, f.out, f.weights, 1, f.saved, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "scratch") != NULL, "names scratch: %s", attn_last_error());
    CHECK_FAILS(attn_mha_forward(&d, &p, q, k, v, NULL, f.out, f.weights, 2, f.saved, f.fscratch),
                ATTN_ERR_INVALID_ARGUMENT);
#undef FORWARD_FAILS

    CHECK_OK(fixture_forward(&f));
    float *gq = f.grads + f.l.xq;
#define BACKWARD_FAILS(saved, grad_out, scratch, grads)                                         \
    CHECK_FAILS(attn_mha_backward(&d, &p, q, k, v, NULL, saved, grad_out, scratch, gq, NULL,    \
                                  NULL, grads),                                                \
                ATTN_ERR_INVALID_ARGUMENT)
    BACKWARD_FAILS(NULL, f.grad_out, f.bscratch, &f.param_grads);
    BACKWARD_FAILS(f.saved, NULL, f.bscratch, &f.param_grads);
    BACKWARD_FAILS(f.saved, f.grad_out, NULL, &f.param_grads);
    attn_mha_grads wrong_form = f.param_grads;
    wrong_form.q_proj_weight = f.grads + f.l.wq;
    BACKWARD_FAILS(f.saved, f.grad_out, f.bscratch, &wrong_form);
    CHECK(strstr(attn_last_error(), "in_proj_weight") != NULL, "explains the weight form: %s",
          attn_last_error());
    d.num_heads = 5;
    BACKWARD_FAILS(f.saved, f.grad_out, f.bscratch, &f.param_grads);
#undef BACKWARD_FAILS
    fixture_free(&f);
}

int main(void)
{
    RUN_TEST(test_reference_matches_finite_differences);
    RUN_TEST(test_library_matches_reference);
    RUN_TEST(test_bf16_stays_close_to_fp32);
    RUN_TEST(test_fused_self_attention_equals_copies);
    RUN_TEST(test_deterministic);
    RUN_TEST(test_backward_accumulates);
    RUN_TEST(test_empty_sizes);
    RUN_TEST(test_sizes);
    RUN_TEST(test_bad_input);
    return test_summary();
}
