/* Luong attention: every score (dot, general, concat) with every alignment (global, local-m,
 * local-p). A double reference transcribes the paper's formulas literally (the general
 * score as s^T W h_j, the concat score on the concatenation [s; h_j]); its backward is
 * checked against finite differences, then every instruction set against it. */
#include "classic_test_util.h"

#include <stdint.h>

typedef struct problem {
    attn_luong_config c;
    int64_t t;                               /* target position, local-m */
    double *s, *h, *x, *w, *v, *wp, *vp;     /* x may be h */
    const uint8_t *mask;
    double *dctx, *dwts;
} problem;

typedef struct grads {
    double *s, *h, *x, *w, *v, *wp, *vp;
} grads;

static size_t n_s(const problem *p) { return (size_t)(p->c.batch * p->c.query_dim); }
static size_t n_h(const problem *p) { return (size_t)(p->c.batch * p->c.src_len * p->c.key_dim); }
static size_t n_x(const problem *p) { return (size_t)(p->c.batch * p->c.src_len * p->c.value_dim); }
static size_t n_w(const problem *p)
{
    const attn_luong_config *c = &p->c;
    return c->score == ATTN_LUONG_GENERAL  ? (size_t)(c->query_dim * c->key_dim)
           : c->score == ATTN_LUONG_CONCAT ? (size_t)(c->attn_dim * (c->query_dim + c->key_dim))
                                           : 0;
}
static size_t n_v(const problem *p) { return p->c.score == ATTN_LUONG_CONCAT ? (size_t)p->c.attn_dim : 0; }
static size_t n_wp(const problem *p)
{
    return p->c.align == ATTN_LUONG_LOCAL_P ? (size_t)(p->c.predict_dim * p->c.query_dim) : 0;
}
static size_t n_vp(const problem *p)
{
    return p->c.align == ATTN_LUONG_LOCAL_P ? (size_t)p->c.predict_dim : 0;
}

static int masked(const problem *p, int64_t b, int64_t j)
{
    return p->mask != NULL && p->mask[b * p->c.src_len + j];
}

static int64_t sentence_length(const problem *p, int64_t b)
{
    int64_t length = 0;
    for (int64_t j = 0; j < p->c.src_len; j++)
        if (!masked(p, b, j))
            length = j + 1;
    return length;
}

static double sigmoid(double z) { return 1.0 / (1.0 + exp(-z)); }

/* z = v_p . tanh(W_p s_b); hidden receives tanh(W_p s_b). */
static double predictor(const problem *p, int64_t b, double *hidden)
{
    int64_t ds = p->c.query_dim;
    double z = 0;
    for (int64_t k = 0; k < p->c.predict_dim; k++) {
        double pre = 0;
        for (int64_t i = 0; i < ds; i++)
            pre += p->wp[k * ds + i] * p->s[b * ds + i];
        hidden[k] = tanh(pre);
        z += p->vp[k] * hidden[k];
    }
    return z;
}

static const double *s_row(const problem *p, int64_t b) { return p->s + b * p->c.query_dim; }
static const double *h_row(const problem *p, int64_t b, int64_t j)
{
    return p->h + (b * p->c.src_len + j) * p->c.key_dim;
}

/* pre[a] = (W [s; h_j])[a] for the concat score. */
static void concat_pre(const problem *p, int64_t b, int64_t j, double *pre)
{
    int64_t ds = p->c.query_dim, dk = p->c.key_dim;
    for (int64_t a = 0; a < p->c.attn_dim; a++) {
        double sum = 0;
        for (int64_t i = 0; i < ds + dk; i++)
            sum += p->w[a * (ds + dk) + i] * (i < ds ? s_row(p, b)[i] : h_row(p, b, j)[i - ds]);
        pre[a] = sum;
    }
}

static double score(const problem *p, int64_t b, int64_t j)
{
    int64_t ds = p->c.query_dim, dk = p->c.key_dim;
    const double *s = s_row(p, b), *h = h_row(p, b, j);
    double e = 0;
    if (p->c.score == ATTN_LUONG_DOT) {
        for (int64_t i = 0; i < ds; i++)
            e += s[i] * h[i];
    } else if (p->c.score == ATTN_LUONG_GENERAL) {
        for (int64_t i = 0; i < ds; i++)
            for (int64_t k = 0; k < dk; k++)
                e += s[i] * p->w[i * dk + k] * h[k];
    } else {
        double pre[128];
        concat_pre(p, b, j, pre);
        for (int64_t a = 0; a < p->c.attn_dim; a++)
            e += p->v[a] * tanh(pre[a]);
    }
    return e;
}

/* One row: alpha (softmax over the window) and a (the weights), p_t and the Gaussian. */
typedef struct row {
    double alpha[160], a[160], gauss[160];
    double center;
    int64_t lo, hi;
} row;

static void row_forward(const problem *p, int64_t b, row *r)
{
    const attn_luong_config *c = &p->c;
    int64_t length = sentence_length(p, b), lk = c->src_len;
    r->lo = 0;
    r->hi = lk - 1;
    r->center = 0;
    if (c->align != ATTN_LUONG_GLOBAL) {
        double hidden[64];
        double center = c->align == ATTN_LUONG_LOCAL_M
                            ? (double)p->t
                            : (double)length * sigmoid(predictor(p, b, hidden));
        r->center = center;
        double mid = c->align == ATTN_LUONG_LOCAL_M ? center : floor(center + 0.5);
        r->lo = (int64_t)fmax(0.0, mid - (double)c->window);
        r->hi = (int64_t)fmin((double)(length - 1), mid + (double)c->window);
    }
    double sigma = (double)c->window / 2.0;
    double max = -INFINITY, total = 0;
    for (int64_t j = 0; j < lk; j++) {
        r->alpha[j] = r->a[j] = 0;
        r->gauss[j] = c->align == ATTN_LUONG_LOCAL_P
                          ? exp(-((double)j - r->center) * ((double)j - r->center) / (2 * sigma * sigma))
                          : 1.0;
        if (j >= r->lo && j <= r->hi && !masked(p, b, j))
            max = fmax(max, score(p, b, j));
    }
    for (int64_t j = r->lo; j <= r->hi; j++)
        if (!masked(p, b, j))
            total += exp(score(p, b, j) - max);
    for (int64_t j = r->lo; j <= r->hi; j++)
        if (!masked(p, b, j)) {
            r->alpha[j] = exp(score(p, b, j) - max) / total;
            r->a[j] = r->alpha[j] * r->gauss[j];
        }
}

static void forward(const problem *p, double *ctx, double *wts, double *scores,
                    double *centers)
{
    const attn_luong_config *c = &p->c;
    row r;
    for (int64_t b = 0; b < c->batch; b++) {
        row_forward(p, b, &r);
        centers[b] = r.center;
        for (int64_t j = 0; j < c->src_len; j++) {
            wts[b * c->src_len + j] = r.a[j];
            scores[b * c->src_len + j] = score(p, b, j);
        }
        for (int64_t d = 0; d < c->value_dim; d++) {
            double sum = 0;
            for (int64_t j = 0; j < c->src_len; j++)
                sum += r.a[j] * p->x[(b * c->src_len + j) * c->value_dim + d];
            ctx[b * c->value_dim + d] = sum;
        }
    }
}

static double loss(void *ctx)
{
    const problem *p = ctx;
    const attn_luong_config *c = &p->c;
    double l = 0;
    row r;
    for (int64_t b = 0; b < c->batch; b++) {
        row_forward(p, b, &r);
        for (int64_t j = 0; j < c->src_len; j++) {
            l += p->dwts[b * c->src_len + j] * r.a[j];
            for (int64_t d = 0; d < c->value_dim; d++)
                l += p->dctx[b * c->value_dim + d] * r.a[j] *
                     p->x[(b * c->src_len + j) * c->value_dim + d];
        }
    }
    return l;
}

/* The chain rule written out; gradients of x go to g->h when x is h. */
static void backward(const problem *p, grads *g)
{
    const attn_luong_config *c = &p->c;
    int64_t ds = c->query_dim, dk = c->key_dim, dv = c->value_dim, lk = c->src_len;
    double *gx = p->x == p->h ? g->h : g->x;
    double sigma2 = (double)c->window * (double)c->window / 4.0;
    row r;
    for (int64_t b = 0; b < c->batch; b++) {
        row_forward(p, b, &r);
        double dalpha[160], dcenter = 0, dot = 0;
        for (int64_t j = 0; j < lk; j++) {
            double da = p->dwts[b * lk + j];
            for (int64_t d = 0; d < dv; d++) {
                da += p->dctx[b * dv + d] * p->x[(b * lk + j) * dv + d];
                gx[(b * lk + j) * dv + d] += r.a[j] * p->dctx[b * dv + d];
            }
            dalpha[j] = da * r.gauss[j];
            dcenter += da * r.alpha[j] * r.gauss[j] * ((double)j - r.center) / sigma2;
            dot += r.alpha[j] * dalpha[j];
        }
        const double *s = s_row(p, b);
        for (int64_t j = 0; j < lk; j++) {
            double de = r.alpha[j] * (dalpha[j] - dot);
            if (de == 0.0)
                continue;
            const double *h = h_row(p, b, j);
            double *gh = g->h + (b * lk + j) * dk;
            if (c->score == ATTN_LUONG_DOT) {
                for (int64_t i = 0; i < ds; i++) {
                    g->s[b * ds + i] += de * h[i];
                    gh[i] += de * s[i];
                }
            } else if (c->score == ATTN_LUONG_GENERAL) {
                for (int64_t i = 0; i < ds; i++)
                    for (int64_t k = 0; k < dk; k++) {
                        g->s[b * ds + i] += de * p->w[i * dk + k] * h[k];
                        g->w[i * dk + k] += de * s[i] * h[k];
                        gh[k] += de * s[i] * p->w[i * dk + k];
                    }
            } else {
                double pre[128];
                concat_pre(p, b, j, pre);
                for (int64_t a = 0; a < c->attn_dim; a++) {
                    double t = tanh(pre[a]);
                    double dpre = de * p->v[a] * (1 - t * t);
                    g->v[a] += de * t;
                    for (int64_t i = 0; i < ds + dk; i++) {
                        double in = i < ds ? s[i] : h[i - ds];
                        g->w[a * (ds + dk) + i] += dpre * in;
                        if (i < ds)
                            g->s[b * ds + i] += dpre * p->w[a * (ds + dk) + i];
                        else
                            gh[i - ds] += dpre * p->w[a * (ds + dk) + i];
                    }
                }
            }
        }
        if (c->align == ATTN_LUONG_LOCAL_P) {
            double hidden[64];
            double z = predictor(p, b, hidden);
            double dz = dcenter * (double)sentence_length(p, b) * sigmoid(z) * (1 - sigmoid(z));
            for (int64_t k = 0; k < c->predict_dim; k++) {
                g->vp[k] += dz * hidden[k];
                double dpre = dz * p->vp[k] * (1 - hidden[k] * hidden[k]);
                for (int64_t i = 0; i < ds; i++) {
                    g->wp[k * ds + i] += dpre * s[i];
                    g->s[b * ds + i] += dpre * p->wp[k * ds + i];
                }
            }
        }
    }
}

/* Distance of every p_t from a rounding boundary (x.5), which must exceed the finite
 * difference steps and float error for the window to be the same everywhere. */
static double rounding_margin(const problem *p)
{
    double margin = 1.0;
    if (p->c.align != ATTN_LUONG_LOCAL_P)
        return margin;
    row r;
    for (int64_t b = 0; b < p->c.batch; b++) {
        row_forward(p, b, &r);
        margin = fmin(margin, fabs(r.center - floor(r.center) - 0.5));
    }
    return margin;
}

static problem make_problem(attn_luong_score score_kind, attn_luong_align align, int64_t B,
                            int64_t Lk, int64_t ds, int64_t dk, int64_t dv, int64_t da,
                            int64_t dp, int64_t window, int64_t t, int values_are_keys,
                            int with_mask, uint64_t seed)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.c = attn_luong_default_config(score_kind, align);
    p.c.batch = B;
    p.c.src_len = Lk;
    p.c.query_dim = score_kind == ATTN_LUONG_DOT ? dk : ds;
    p.c.key_dim = dk;
    p.c.value_dim = values_are_keys ? dk : dv;
    p.c.attn_dim = score_kind == ATTN_LUONG_CONCAT ? da : 0;
    p.c.predict_dim = align == ATTN_LUONG_LOCAL_P ? dp : 0;
    p.c.window = window;
    p.t = t;
    p.s = random_doubles(n_s(&p), -1, 1, seed + 1);
    p.h = random_doubles(n_h(&p), -1, 1, seed + 2);
    p.x = values_are_keys ? p.h : random_doubles(n_x(&p), -1, 1, seed + 3);
    p.w = random_doubles(n_w(&p), -0.6, 0.6, seed + 4);
    p.v = random_doubles(n_v(&p), -1.5, 1.5, seed + 5);
    p.wp = random_doubles(n_wp(&p), -1, 1, seed + 6);
    p.vp = random_doubles(n_vp(&p), -2, 2, seed + 7);
    p.mask = with_mask ? random_mask(B, Lk, seed + 8) : NULL;
    p.dctx = random_doubles((size_t)(B * p.c.value_dim), -1, 1, seed + 9);
    p.dwts = random_doubles((size_t)(B * Lk), -1, 1, seed + 10);
    return p;
}

static void free_problem(problem *p)
{
    if (p->x != p->h)
        free(p->x);
    double *all[] = {p->s, p->h, p->w, p->v, p->wp, p->vp, p->dctx, p->dwts};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    free((void *)p->mask);
}

/* A problem whose p_t are all at least `margin` away from a rounding boundary: the seed
 * moves on until one is found. */
static problem make_clear_problem(attn_luong_score score_kind, attn_luong_align align, int64_t B,
                                  int64_t Lk, int64_t ds, int64_t dk, int64_t dv, int64_t da,
                                  int64_t dp, int64_t window, int64_t t, int values_are_keys,
                                  int with_mask, uint64_t seed, double margin)
{
    for (int attempt = 0; attempt < 200; attempt++) {
        problem p = make_problem(score_kind, align, B, Lk, ds, dk, dv, da, dp, window, t,
                                 values_are_keys, with_mask, seed + 1000 * (uint64_t)attempt);
        if (rounding_margin(&p) >= margin)
            return p;
        free_problem(&p);
    }
    CHECK(0, "no seed gives p_t clear of rounding boundaries");
    return make_problem(score_kind, align, B, Lk, ds, dk, dv, da, dp, window, t,
                        values_are_keys, with_mask, seed);
}

static grads new_grads(const problem *p)
{
    grads g = {new_doubles(n_s(p)), new_doubles(n_h(p)),  new_doubles(n_x(p)),
               new_doubles(n_w(p)), new_doubles(n_v(p)),  new_doubles(n_wp(p)),
               new_doubles(n_vp(p))};
    return g;
}

static void free_grads(grads *g)
{
    double *all[] = {g->s, g->h, g->x, g->w, g->v, g->wp, g->vp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static const char *score_name(attn_luong_score s)
{
    return s == ATTN_LUONG_DOT ? "dot" : s == ATTN_LUONG_GENERAL ? "general" : "concat";
}

static const char *align_name(attn_luong_align a)
{
    return a == ATTN_LUONG_GLOBAL ? "global" : a == ATTN_LUONG_LOCAL_M ? "local-m" : "local-p";
}

static void check_gradients(problem *p, const char *label)
{
    grads g = new_grads(p);
    backward(p, &g);
    char what[128];
#define NAME(field) (snprintf(what, sizeof what, "%s %s", label, field), what)
    CHECK_GRADIENT(NAME("ds"), p->s, n_s(p), g.s, loss, p);
    CHECK_GRADIENT(NAME("dh"), p->h, n_h(p), g.h, loss, p);
    if (p->x != p->h)
        CHECK_GRADIENT(NAME("dvalues"), p->x, n_x(p), g.x, loss, p);
    CHECK_GRADIENT(NAME("dW"), p->w, n_w(p), g.w, loss, p);
    CHECK_GRADIENT(NAME("dv"), p->v, n_v(p), g.v, loss, p);
    CHECK_GRADIENT(NAME("dW_p"), p->wp, n_wp(p), g.wp, loss, p);
    CHECK_GRADIENT(NAME("dv_p"), p->vp, n_vp(p), g.vp, loss, p);
#undef NAME
    free_grads(&g);
}

static void test_reference_backward_matches_finite_differences(void)
{
    for (int sc = ATTN_LUONG_DOT; sc <= ATTN_LUONG_CONCAT; sc++)
        for (int al = ATTN_LUONG_GLOBAL; al <= ATTN_LUONG_LOCAL_P; al++)
            for (int variant = 0; variant < 2; variant++) {
                /* 0: values are the annotations, masked, window 2, t inside the sentence;
                 * 1: separate values, no mask, window 1 (local-m: D = 0 at t = 0). */
                int64_t window = variant == 0 ? 2 : (al == ATTN_LUONG_LOCAL_M ? 0 : 1);
                problem p = make_clear_problem(
                    (attn_luong_score)sc, (attn_luong_align)al, 3, 7, 3, 4, 2, 5, 3, window,
                    variant == 0 ? 3 : 0, variant == 0, variant == 0, 100 + 10 * (uint64_t)sc,
                    1e-3);
                char label[64];
                snprintf(label, sizeof label, "%s %s v%d", score_name(p.c.score),
                         align_name(p.c.align), variant);
                check_gradients(&p, label);
                free_problem(&p);
            }
}

/* The library's results for one problem, float, from prefilled gradient buffers. */
typedef struct library_run {
    float *ctx, *wts, *scores;
    float *ds, *dh, *dx, *dw, *dv, *dwp, *dvp;
} library_run;

static float *prefilled(size_t n, uint64_t seed)
{
    float *x = new_floats(n);
    test_fill_uniform(x, n, -0.5f, 0.5f, seed);
    return x;
}

static library_run run_library(const problem *p, uint64_t prefill)
{
    const attn_luong_config *c = &p->c;
    size_t n_keys = c->score == ATTN_LUONG_CONCAT
                        ? (size_t)(c->batch * c->src_len * c->attn_dim)
                        : n_h(p);
    float *s = to_floats(p->s, n_s(p)), *h = to_floats(p->h, n_h(p));
    float *x = p->x == p->h ? h : to_floats(p->x, n_x(p));
    float *w = to_floats(p->w, n_w(p)), *v = to_floats(p->v, n_v(p));
    float *wp = to_floats(p->wp, n_wp(p)), *vp = to_floats(p->vp, n_vp(p));
    float *dctx = to_floats(p->dctx, (size_t)(c->batch * c->value_dim));
    float *dwts = to_floats(p->dwts, (size_t)(c->batch * c->src_len));
    float *saved = new_floats(attn_luong_saved_floats(c));
    float *work = new_floats(attn_luong_workspace_floats(c));
    library_run r = {new_floats((size_t)(c->batch * c->value_dim)),
                     new_floats((size_t)(c->batch * c->src_len)),
                     new_floats((size_t)(c->batch * c->src_len)),
                     prefilled(n_s(p), prefill + 1),
                     prefilled(n_h(p), prefill + 2),
                     prefilled(n_x(p), prefill + 3),
                     prefilled(n_w(p), prefill + 4),
                     prefilled(n_v(p), prefill + 5),
                     prefilled(n_wp(p), prefill + 6),
                     prefilled(n_vp(p), prefill + 7)};
    attn_luong_params params = {w, v, wp, vp};
    attn_luong_grads pg = {r.dw, r.dv, r.dwp, r.dvp};
    float *dvalues = p->x == p->h ? r.dh : r.dx;

    if (c->score == ATTN_LUONG_CONCAT) {
        float *keys = new_floats(n_keys), *dkeys = new_floats(n_keys);
        CHECK_OK(attn_luong_project_keys(c, h, w, keys));
        CHECK_OK(attn_luong_scores(c, &params, s, keys, r.scores, saved));
        CHECK_OK(attn_luong_forward(c, &params, p->t, s, keys, x, p->mask, r.ctx, r.wts, saved));
        CHECK_OK(attn_luong_backward(c, &params, p->t, s, keys, x, p->mask, r.wts, saved, dctx,
                                     dwts, r.ds, dkeys, dvalues, &pg, work));
        CHECK_OK(attn_luong_project_keys_backward(c, h, w, dkeys, r.dh, r.dw));
        free(keys);
        free(dkeys);
    } else {
        /* The keys are the annotations: dkeys and dvalues may share one buffer. */
        CHECK_OK(attn_luong_scores(c, &params, s, h, r.scores, saved));
        CHECK_OK(attn_luong_forward(c, &params, p->t, s, h, x, p->mask, r.ctx, r.wts, saved));
        CHECK_OK(attn_luong_backward(c, &params, p->t, s, h, x, p->mask, r.wts, saved, dctx,
                                     dwts, r.ds, r.dh, dvalues, &pg, work));
    }
    if (x != h)
        free(x);
    float *all[] = {s, h, w, v, wp, vp, dctx, dwts, saved, work};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    return r;
}

static void free_run(library_run *r)
{
    float *all[] = {r->ctx, r->wts, r->scores, r->ds, r->dh, r->dx, r->dw, r->dv, r->dwp, r->dvp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static void check_accumulated(const char *what, const float *got, const double *grad, size_t n,
                              uint64_t prefill_seed, double atol, double rtol)
{
    float *before = prefilled(n, prefill_seed);
    double *expected = new_doubles(n);
    for (size_t i = 0; i < n; i++)
        expected[i] = (double)before[i] + grad[i];
    CHECK_ARRAYS_CLOSE(what, got, expected, n, atol, rtol);
    free(before);
    free(expected);
}

static void check_against_reference(const problem *p, const char *label)
{
    const attn_luong_config *c = &p->c;
    double *ctx = new_doubles((size_t)(c->batch * c->value_dim));
    double *wts = new_doubles((size_t)(c->batch * c->src_len));
    double *scores = new_doubles((size_t)(c->batch * c->src_len));
    double *centers = new_doubles((size_t)c->batch);
    forward(p, ctx, wts, scores, centers);
    grads g = new_grads(p);
    backward(p, &g);
    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_OK(attn_set_isa(isas[i]));
        library_run r = run_library(p, 40);
        char what[160];
#define NAME(field) (snprintf(what, sizeof what, "%s %s %s", label, attn_isa_name(isas[i]), field), what)
        CHECK_ARRAYS_CLOSE(NAME("scores"), r.scores, scores, (size_t)(c->batch * c->src_len),
                           2e-5, 1e-5);
        CHECK_ARRAYS_CLOSE(NAME("context"), r.ctx, ctx, (size_t)(c->batch * c->value_dim), 5e-6,
                           1e-5);
        CHECK_ARRAYS_CLOSE(NAME("weights"), r.wts, wts, (size_t)(c->batch * c->src_len), 2e-6,
                           1e-5);
        const double atol = 5e-5, rtol = 1e-4;
        check_accumulated(NAME("dquery"), r.ds, g.s, n_s(p), 41, atol, rtol);
        check_accumulated(NAME("dannotations"), r.dh, g.h, n_h(p), 42, atol, rtol);
        if (p->x != p->h)
            check_accumulated(NAME("dvalues"), r.dx, g.x, n_x(p), 43, atol, rtol);
        check_accumulated(NAME("dW"), r.dw, g.w, n_w(p), 44, atol, rtol);
        check_accumulated(NAME("dv"), r.dv, g.v, n_v(p), 45, atol, rtol);
        check_accumulated(NAME("dW_p"), r.dwp, g.wp, n_wp(p), 46, atol, rtol);
        check_accumulated(NAME("dv_p"), r.dvp, g.vp, n_vp(p), 47, atol, rtol);
#undef NAME
        free_run(&r);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(ctx);
    free(wts);
    free(scores);
    free(centers);
    free_grads(&g);
}

static void test_every_isa_matches_reference(void)
{
    /* B, Lk, ds, dk, dv, da, dp: odd sizes and the dims 1, 7, 64, 80. */
    static const int64_t cases[][7] = {
        {1, 1, 1, 1, 1, 1, 1},
        {3, 7, 7, 64, 1, 7, 7},
        {17, 17, 64, 7, 80, 64, 1},
        {3, 129, 80, 80, 7, 1, 64},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int sc = ATTN_LUONG_DOT; sc <= ATTN_LUONG_CONCAT; sc++)
            for (int al = ATTN_LUONG_GLOBAL; al <= ATTN_LUONG_LOCAL_P; al++) {
                const int64_t *n = cases[k];
                int values_are_keys = (k + (size_t)sc) % 2 == 0;
                int64_t window = 1 + (int64_t)k * 2;
                problem p = make_clear_problem(
                    (attn_luong_score)sc, (attn_luong_align)al, n[0], n[1], n[2], n[3], n[4],
                    n[5], n[6], window, n[1] / 2, values_are_keys, 1,
                    2000 + 100 * k + 10 * (uint64_t)sc + (uint64_t)al, 1e-4);
                char label[96];
                snprintf(label, sizeof label, "case %zu %s %s", k, score_name(p.c.score),
                         align_name(p.c.align));
                check_against_reference(&p, label);
                free_problem(&p);
            }
}

static void test_runs_are_bit_identical(void)
{
    for (int sc = ATTN_LUONG_DOT; sc <= ATTN_LUONG_CONCAT; sc++) {
        problem p = make_problem((attn_luong_score)sc, ATTN_LUONG_LOCAL_P, 33, 19, 16, 16, 8, 24,
                                 8, 3, 0, 0, 1, 9000 + (uint64_t)sc);
        size_t sizes[] = {(size_t)(33 * 8), (size_t)(33 * 19), n_s(&p), n_h(&p), n_x(&p),
                          n_w(&p),          n_v(&p),           n_wp(&p), n_vp(&p)};
        attn_isa isas[ATTN_ISA_LAST + 1];
        int n_isas = supported_isas(isas);
        for (int i = 0; i < n_isas; i++) {
            CHECK_OK(attn_set_isa(isas[i]));
            library_run a = run_library(&p, 5);
            library_run b = run_library(&p, 5);
            const float *xa[] = {a.ctx, a.wts, a.ds, a.dh, a.dx, a.dw, a.dv, a.dwp, a.dvp};
            const float *xb[] = {b.ctx, b.wts, b.ds, b.dh, b.dx, b.dw, b.dv, b.dwp, b.dvp};
            int same = 1;
            for (size_t f = 0; f < sizeof sizes / sizeof sizes[0]; f++)
                same &= memcmp(xa[f], xb[f], sizes[f] * sizeof(float)) == 0;
            CHECK(same, "%s %s: two runs differ", score_name(p.c.score), attn_isa_name(isas[i]));
            free_run(&a);
            free_run(&b);
        }
        CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
        free_problem(&p);
    }
}

/* Rows never share work, so the row loops give the same bits at any thread count (dot
 * scores with local-m use no GEMM, whose own partition is not this test's business). */
static void test_thread_count_does_not_change_bits(void)
{
    /* 129 rows: enough work per row chunk for the loops to split between two threads. */
    problem p = make_problem(ATTN_LUONG_DOT, ATTN_LUONG_LOCAL_M, 129, 23, 0, 24, 16, 0, 0, 5, 9,
                             0, 1, 8000);
    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int i = 1; i < n_isas; i++) {
        CHECK_OK(attn_set_isa(isas[i]));
        CHECK_OK(attn_set_num_threads(1));
        library_run one = run_library(&p, 5);
        CHECK_OK(attn_set_num_threads(2));
        library_run two = run_library(&p, 5);
        int same = memcmp(one.ctx, two.ctx, 129 * 16 * sizeof(float)) == 0 &&
                   memcmp(one.wts, two.wts, 129 * 23 * sizeof(float)) == 0 &&
                   memcmp(one.ds, two.ds, n_s(&p) * sizeof(float)) == 0 &&
                   memcmp(one.dh, two.dh, n_h(&p) * sizeof(float)) == 0 &&
                   memcmp(one.dx, two.dx, n_x(&p) * sizeof(float)) == 0;
        CHECK(same, "%s: 1 and 2 threads agree", attn_isa_name(isas[i]));
        free_run(&one);
        free_run(&two);
    }
    CHECK_OK(attn_set_num_threads(0));
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free_problem(&p);
}

/* local-m weights live only inside [t - D, t + D] and the sentence; a window wider than any
 * sentence (even D = INT64_MAX) is global attention; a t past the sentence leaves nothing. */
static void test_local_windows(void)
{
    problem p = make_problem(ATTN_LUONG_GENERAL, ATTN_LUONG_LOCAL_M, 5, 11, 4, 6, 0, 0, 0, 2, 4,
                             1, 1, 333);
    library_run r = run_library(&p, 1);
    int inside = 1;
    for (int64_t b = 0; b < 5; b++)
        for (int64_t j = 0; j < 11; j++)
            if (r.wts[b * 11 + j] != 0.0f)
                inside &= j >= 2 && j <= 6 && !masked(&p, b, j);
    CHECK(inside, "local-m: weights only inside the window");
    free_run(&r);

    problem global = make_problem(ATTN_LUONG_GENERAL, ATTN_LUONG_GLOBAL, 5, 11, 4, 6, 0, 0, 0, 0,
                                  0, 1, 1, 333);
    library_run g = run_library(&global, 1);
    p.c.window = INT64_MAX;
    p.t = INT64_MAX;
    library_run wide = run_library(&p, 1);
    CHECK(memcmp(wide.wts, g.wts, 5 * 11 * sizeof(float)) == 0 &&
              memcmp(wide.ctx, g.ctx, 5 * 6 * sizeof(float)) == 0,
          "local-m with an unbounded window is global attention");
    free_run(&wide);
    free_run(&g);

    p.c.window = 0;
    library_run past = run_library(&p, 1);
    CHECK(all_zero(past.wts, 5 * 11) && all_zero(past.ctx, 5 * 6),
          "t past every sentence: zero weights and context");
    CHECK(!has_nan(past.ds, n_s(&p)) && !has_nan(past.dh, n_h(&p)), "and no NaN gradients");
    free_run(&past);
    free_problem(&global);
    free_problem(&p);
}

/* local-p: the predicted p_t lies in [0, S] and weights sit within D of round(p_t). */
static void test_local_p_window_follows_prediction(void)
{
    problem p = make_problem(ATTN_LUONG_DOT, ATTN_LUONG_LOCAL_P, 9, 23, 0, 5, 3, 0, 4, 3, 0, 0,
                             1, 444);
    double *ctx = new_doubles(9 * 3), *wts = new_doubles(9 * 23), *sc = new_doubles(9 * 23);
    double *centers = new_doubles(9);
    forward(&p, ctx, wts, sc, centers);
    library_run r = run_library(&p, 1);
    int ok = 1;
    for (int64_t b = 0; b < 9; b++) {
        double length = (double)sentence_length(&p, b);
        ok &= centers[b] >= 0 && centers[b] <= length;
        double mid = floor(centers[b] + 0.5);
        for (int64_t j = 0; j < 23; j++)
            if (r.wts[b * 23 + j] != 0.0f)
                ok &= fabs((double)j - mid) <= 3 && j < (int64_t)length;
    }
    CHECK(ok, "weights within D of round(p_t), inside the sentence");
    free_run(&r);
    free(ctx);
    free(wts);
    free(sc);
    free(centers);
    free_problem(&p);
}

static void test_fully_masked_rows(void)
{
    for (int sc = ATTN_LUONG_DOT; sc <= ATTN_LUONG_CONCAT; sc++)
        for (int al = ATTN_LUONG_GLOBAL; al <= ATTN_LUONG_LOCAL_P; al++) {
            problem p = make_problem((attn_luong_score)sc, (attn_luong_align)al, 3, 6, 4, 4, 0,
                                     5, 3, 2, 1, 1, 1, 555);
            memset((void *)p.mask, 1, 18);
            attn_isa isas[ATTN_ISA_LAST + 1];
            int n_isas = supported_isas(isas);
            for (int i = 0; i < n_isas; i++) {
                CHECK_OK(attn_set_isa(isas[i]));
                library_run r = run_library(&p, 9);
                float *before_s = prefilled(n_s(&p), 9 + 1), *before_h = prefilled(n_h(&p), 9 + 2);
                float *before_w = prefilled(n_w(&p), 9 + 4), *before_v = prefilled(n_v(&p), 9 + 5);
                float *before_wp = prefilled(n_wp(&p), 9 + 6), *before_vp = prefilled(n_vp(&p), 9 + 7);
                int unchanged = memcmp(r.ds, before_s, n_s(&p) * sizeof(float)) == 0 &&
                                memcmp(r.dh, before_h, n_h(&p) * sizeof(float)) == 0 &&
                                memcmp(r.dw, before_w, n_w(&p) * sizeof(float)) == 0 &&
                                memcmp(r.dv, before_v, n_v(&p) * sizeof(float)) == 0 &&
                                memcmp(r.dwp, before_wp, n_wp(&p) * sizeof(float)) == 0 &&
                                memcmp(r.dvp, before_vp, n_vp(&p) * sizeof(float)) == 0;
                CHECK(all_zero(r.wts, 18) && all_zero(r.ctx, 12),
                      "%s %s %s: zero weights and context", score_name(p.c.score),
                      align_name(p.c.align), attn_isa_name(isas[i]));
                CHECK(unchanged, "%s %s %s: no gradient added", score_name(p.c.score),
                      align_name(p.c.align), attn_isa_name(isas[i]));
                free(before_v);
                free(before_vp);
                free(before_s);
                free(before_h);
                free(before_w);
                free(before_wp);
                free_run(&r);
            }
            CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
            free_problem(&p);
        }
}

static void test_bad_input(void)
{
    float buf[512] = {0};
    uint8_t mask[64] = {0};
    attn_luong_config c = attn_luong_default_config(ATTN_LUONG_CONCAT, ATTN_LUONG_LOCAL_P);
    c.batch = 2, c.src_len = 3, c.query_dim = 4, c.key_dim = 5, c.value_dim = 6;
    c.attn_dim = 7, c.predict_dim = 2, c.window = 1;
    attn_luong_params params = {buf, buf, buf, buf};
    CHECK_OK(attn_luong_forward(&c, &params, 0, buf, buf, buf, mask, buf + 200, buf + 300,
                                buf + 400));
    CHECK(attn_luong_saved_floats(&c) == 2 * 7 + 2 * 3, "saved size: B da + B (dp + 1)");
    CHECK(attn_luong_workspace_floats(&c) == 2 * 3 + 2 * 7 * 2 + 2 * 3, "workspace size");

    CHECK_FAILS(attn_luong_forward(NULL, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_luong_config bad = c;
    bad.window = 0;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "window") != NULL, "local-p window 0: %s", attn_last_error());
    CHECK(attn_luong_saved_floats(&bad) == 0, "no sizes for a bad config");
    bad = c;
    bad.predict_dim = 0;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = c;
    bad.attn_dim = 0;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = c;
    bad.score = (attn_luong_score)7;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = c;
    bad.align = (attn_luong_align)-1;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = c;
    bad.src_len = -1;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = c;
    bad.batch = bad.src_len = (int64_t)1 << 31; /* B * Lk * d overflows */
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_luong_saved_floats(&bad) == 0 && attn_luong_workspace_floats(&bad) == 0,
          "no sizes when they overflow");
    bad = c;
    bad.value_dim = 0;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = c;
    bad.score = ATTN_LUONG_DOT; /* query_dim 4 != key_dim 5 */
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "query_dim") != NULL, "dot size mismatch: %s",
          attn_last_error());
    CHECK_FAILS(attn_luong_project_keys(&bad, buf, buf, buf), ATTN_ERR_INVALID_ARGUMENT);
    bad.key_dim = 4;
    CHECK_FAILS(attn_luong_project_keys(&bad, buf, buf, buf), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "concat") != NULL, "project_keys needs concat: %s",
          attn_last_error());
    bad = c;
    bad.align = ATTN_LUONG_LOCAL_M;
    CHECK_FAILS(attn_luong_forward(&bad, &params, -1, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "position") != NULL, "negative t: %s", attn_last_error());
    bad.window = -1;
    CHECK_FAILS(attn_luong_forward(&bad, &params, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);

    attn_luong_params missing = params;
    missing.w_p = NULL;
    CHECK_FAILS(attn_luong_forward(&c, &missing, 0, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "w_p") != NULL, "names w_p: %s", attn_last_error());
    missing = params;
    missing.v = NULL;
    CHECK_FAILS(attn_luong_scores(&c, &missing, buf, buf, buf, buf), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_luong_forward(&c, &params, 0, buf, buf, buf, mask, buf, buf, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_luong_forward(&c, &params, 0, buf, NULL, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_luong_backward(&c, &params, 0, buf, buf, buf, mask, buf, buf, buf, NULL,
                                    buf, buf, buf, NULL, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_luong_backward(&c, &params, 0, buf, buf, buf, mask, buf, buf, NULL, NULL,
                                    buf, buf, buf, NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);

    /* dot needs no parameters and no saved buffer. */
    attn_luong_config dot = attn_luong_default_config(ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL);
    dot.batch = 2, dot.src_len = 3, dot.query_dim = 4, dot.key_dim = 4, dot.value_dim = 2;
    attn_luong_params none = {NULL, NULL, NULL, NULL};
    CHECK(attn_luong_saved_floats(&dot) == 0, "dot saves nothing");
    CHECK_OK(attn_luong_forward(&dot, &none, 0, buf, buf, buf, NULL, buf + 100, buf + 200, NULL));
    dot.batch = 0;
    CHECK_OK(attn_luong_forward(&dot, &none, 0, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
}

int main(void)
{
    RUN_TEST(test_reference_backward_matches_finite_differences);
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_runs_are_bit_identical);
    RUN_TEST(test_thread_count_does_not_change_bits);
    RUN_TEST(test_local_windows);
    RUN_TEST(test_local_p_window_follows_prediction);
    RUN_TEST(test_fully_masked_rows);
    RUN_TEST(test_bad_input);
    return test_summary();
}
