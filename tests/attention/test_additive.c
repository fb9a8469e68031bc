/* Additive (Bahdanau) attention: a double reference written from the paper's formula,
 * its backward against finite differences, then every instruction set against it. */
#include "classic_test_util.h"

#include "attention/classic_internal.h"

/* score(s, h_j) = v . tanh(W_s s + W_h h_j + b), softmax over the unmasked j,
 * context = sum_j alpha_j x_j with x the values (x may be h itself). */
typedef struct problem {
    int64_t B, Lk, ds, dh, dv, da;
    double *s, *h, *x, *ws, *wh, *bias, *v; /* bias may be NULL; x may equal h */
    const uint8_t *mask;
    double *dctx, *dwts; /* the loss is sum(dctx * context) + sum(dwts * weights) */
} problem;

typedef struct grads {
    double *s, *h, *x, *ws, *wh, *bias, *v;
} grads;

static int masked(const problem *p, int64_t b, int64_t j)
{
    return p->mask != NULL && p->mask[b * p->Lk + j];
}

/* pre[a] = (W_s s_b + W_h h_bj + b)[a] */
static void preactivation(const problem *p, int64_t b, int64_t j, double *pre)
{
    for (int64_t a = 0; a < p->da; a++) {
        double sum = p->bias != NULL ? p->bias[a] : 0.0;
        for (int64_t i = 0; i < p->ds; i++)
            sum += p->ws[a * p->ds + i] * p->s[b * p->ds + i];
        for (int64_t k = 0; k < p->dh; k++)
            sum += p->wh[a * p->dh + k] * p->h[(b * p->Lk + j) * p->dh + k];
        pre[a] = sum;
    }
}

static double score(const problem *p, int64_t b, int64_t j, double *pre)
{
    preactivation(p, b, j, pre);
    double e = 0;
    for (int64_t a = 0; a < p->da; a++)
        e += p->v[a] * tanh(pre[a]);
    return e;
}

static void forward(const problem *p, double *ctx, double *wts, double *scores)
{
    double *pre = new_doubles((size_t)p->da);
    for (int64_t b = 0; b < p->B; b++) {
        double max = -INFINITY, total = 0;
        for (int64_t j = 0; j < p->Lk; j++) {
            scores[b * p->Lk + j] = score(p, b, j, pre);
            if (!masked(p, b, j) && scores[b * p->Lk + j] > max)
                max = scores[b * p->Lk + j];
        }
        for (int64_t j = 0; j < p->Lk; j++)
            total += masked(p, b, j) ? 0.0 : exp(scores[b * p->Lk + j] - max);
        for (int64_t j = 0; j < p->Lk; j++)
            wts[b * p->Lk + j] = masked(p, b, j) ? 0.0 : exp(scores[b * p->Lk + j] - max) / total;
        for (int64_t d = 0; d < p->dv; d++) {
            double c = 0;
            for (int64_t j = 0; j < p->Lk; j++)
                c += wts[b * p->Lk + j] * p->x[(b * p->Lk + j) * p->dv + d];
            ctx[b * p->dv + d] = c;
        }
    }
    free(pre);
}

static double loss(void *ctx)
{
    const problem *p = ctx;
    double *c = new_doubles((size_t)(p->B * p->dv));
    double *w = new_doubles((size_t)(p->B * p->Lk));
    double *e = new_doubles((size_t)(p->B * p->Lk));
    forward(p, c, w, e);
    double l = 0;
    for (int64_t i = 0; i < p->B * p->dv; i++)
        l += p->dctx[i] * c[i];
    for (int64_t i = 0; i < p->B * p->Lk; i++)
        l += p->dwts[i] * w[i];
    free(c);
    free(w);
    free(e);
    return l;
}

/* The chain rule written out; gradients of x go to g->h when x is h. */
static void backward(const problem *p, grads *g)
{
    double *ctx = new_doubles((size_t)(p->B * p->dv));
    double *wts = new_doubles((size_t)(p->B * p->Lk));
    double *scores = new_doubles((size_t)(p->B * p->Lk));
    double *dw = new_doubles((size_t)p->Lk);
    double *pre = new_doubles((size_t)p->da);
    forward(p, ctx, wts, scores);
    double *gx = p->x == p->h ? g->h : g->x;
    for (int64_t b = 0; b < p->B; b++) {
        const double *a = wts + b * p->Lk;
        double dot = 0;
        for (int64_t j = 0; j < p->Lk; j++) {
            dw[j] = p->dwts[b * p->Lk + j];
            for (int64_t d = 0; d < p->dv; d++) {
                dw[j] += p->dctx[b * p->dv + d] * p->x[(b * p->Lk + j) * p->dv + d];
                gx[(b * p->Lk + j) * p->dv + d] += a[j] * p->dctx[b * p->dv + d];
            }
            dot += a[j] * dw[j];
        }
        for (int64_t j = 0; j < p->Lk; j++) {
            double de = a[j] * (dw[j] - dot);
            if (de == 0.0)
                continue;
            preactivation(p, b, j, pre);
            for (int64_t i = 0; i < p->da; i++) {
                double t = tanh(pre[i]);
                double dpre = de * p->v[i] * (1 - t * t);
                g->v[i] += de * t;
                if (g->bias != NULL)
                    g->bias[i] += dpre;
                for (int64_t k = 0; k < p->ds; k++) {
                    g->ws[i * p->ds + k] += dpre * p->s[b * p->ds + k];
                    g->s[b * p->ds + k] += dpre * p->ws[i * p->ds + k];
                }
                for (int64_t k = 0; k < p->dh; k++) {
                    g->wh[i * p->dh + k] += dpre * p->h[(b * p->Lk + j) * p->dh + k];
                    g->h[(b * p->Lk + j) * p->dh + k] += dpre * p->wh[i * p->dh + k];
                }
            }
        }
    }
    free(ctx);
    free(wts);
    free(scores);
    free(dw);
    free(pre);
}

static size_t n_s(const problem *p) { return (size_t)(p->B * p->ds); }
static size_t n_h(const problem *p) { return (size_t)(p->B * p->Lk * p->dh); }
static size_t n_x(const problem *p) { return (size_t)(p->B * p->Lk * p->dv); }
static size_t n_ws(const problem *p) { return (size_t)(p->da * p->ds); }
static size_t n_wh(const problem *p) { return (size_t)(p->da * p->dh); }

static problem make_problem(int64_t B, int64_t Lk, int64_t ds, int64_t dh, int64_t dv,
                            int64_t da, int with_bias, int values_are_keys, int with_mask,
                            uint64_t seed)
{
    problem p;
    memset(&p, 0, sizeof p);
    p.B = B, p.Lk = Lk, p.ds = ds, p.dh = dh, p.dv = values_are_keys ? dh : dv, p.da = da;
    p.s = random_doubles(n_s(&p), -1, 1, seed + 1);
    p.h = random_doubles(n_h(&p), -1, 1, seed + 2);
    p.x = values_are_keys ? p.h : random_doubles(n_x(&p), -1, 1, seed + 3);
    p.ws = random_doubles(n_ws(&p), -0.8, 0.8, seed + 4);
    p.wh = random_doubles(n_wh(&p), -0.8, 0.8, seed + 5);
    p.bias = with_bias ? random_doubles((size_t)da, -0.5, 0.5, seed + 6) : NULL;
    p.v = random_doubles((size_t)da, -1.5, 1.5, seed + 7);
    p.mask = with_mask ? random_mask(B, Lk, seed + 8) : NULL;
    p.dctx = random_doubles((size_t)(B * p.dv), -1, 1, seed + 9);
    p.dwts = random_doubles((size_t)(B * Lk), -1, 1, seed + 10);
    return p;
}

static void free_problem(problem *p)
{
    if (p->x != p->h)
        free(p->x);
    free(p->s);
    free(p->h);
    free(p->ws);
    free(p->wh);
    free(p->bias);
    free(p->v);
    free((void *)p->mask);
    free(p->dctx);
    free(p->dwts);
}

static grads new_grads(const problem *p)
{
    grads g = {new_doubles(n_s(p)),  new_doubles(n_h(p)),           new_doubles(n_x(p)),
               new_doubles(n_ws(p)), new_doubles(n_wh(p)),
               p->bias != NULL ? new_doubles((size_t)p->da) : NULL, new_doubles((size_t)p->da)};
    return g;
}

static void free_grads(grads *g)
{
    free(g->s);
    free(g->h);
    free(g->x);
    free(g->ws);
    free(g->wh);
    free(g->bias);
    free(g->v);
}

static void test_reference_backward_matches_finite_differences(void)
{
    for (int variant = 0; variant < 3; variant++) {
        /* 0: values are the annotations (the gradient of h takes both paths), with a bias
         * and a mask; 1: separate values, no bias; 2: one position, one feature. */
        problem p = variant == 0   ? make_problem(3, 5, 4, 3, 0, 6, 1, 1, 1, 100)
                    : variant == 1 ? make_problem(2, 4, 3, 5, 2, 3, 0, 0, 0, 200)
                                   : make_problem(2, 1, 1, 1, 1, 1, 1, 0, 0, 300);
        grads g = new_grads(&p);
        backward(&p, &g);
        CHECK_GRADIENT("ds", p.s, n_s(&p), g.s, loss, &p);
        CHECK_GRADIENT("dh", p.h, n_h(&p), g.h, loss, &p);
        if (p.x != p.h)
            CHECK_GRADIENT("dvalues", p.x, n_x(&p), g.x, loss, &p);
        CHECK_GRADIENT("dW_s", p.ws, n_ws(&p), g.ws, loss, &p);
        CHECK_GRADIENT("dW_h", p.wh, n_wh(&p), g.wh, loss, &p);
        CHECK_GRADIENT("dv", p.v, (size_t)p.da, g.v, loss, &p);
        if (p.bias != NULL)
            CHECK_GRADIENT("db", p.bias, (size_t)p.da, g.bias, loss, &p);
        free_grads(&g);
        free_problem(&p);
    }
}

/* The library's results for one problem, float, from prefilled gradient buffers. */
typedef struct library_run {
    float *ctx, *wts, *scores;
    float *ds, *dh, *dx, *dws, *dwh, *db, *dv;
} library_run;

static float *prefilled(size_t n, uint64_t seed)
{
    float *x = new_floats(n);
    test_fill_uniform(x, n, -0.5f, 0.5f, seed);
    return x;
}

static library_run run_library(const problem *p, uint64_t prefill_seed)
{
    attn_additive_dims dims = {p->B, p->Lk, p->ds, p->dh, p->dv, p->da, ATTN_PRECISION_FP32};
    float *s = to_floats(p->s, n_s(p)), *h = to_floats(p->h, n_h(p));
    float *x = p->x == p->h ? h : to_floats(p->x, n_x(p));
    float *ws = to_floats(p->ws, n_ws(p)), *wh = to_floats(p->wh, n_wh(p));
    float *bias = p->bias != NULL ? to_floats(p->bias, (size_t)p->da) : NULL;
    float *v = to_floats(p->v, (size_t)p->da);
    float *dctx = to_floats(p->dctx, (size_t)(p->B * p->dv));
    float *dwts = to_floats(p->dwts, (size_t)(p->B * p->Lk));
    float *keys = new_floats((size_t)(p->B * p->Lk * p->da));
    float *dkeys = new_floats((size_t)(p->B * p->Lk * p->da));
    float *saved = new_floats(attn_additive_saved_floats(&dims));
    float *work = new_floats(attn_additive_workspace_floats(&dims));
    library_run r = {
        new_floats((size_t)(p->B * p->dv)), new_floats((size_t)(p->B * p->Lk)),
        new_floats((size_t)(p->B * p->Lk)), prefilled(n_s(p), prefill_seed + 1),
        prefilled(n_h(p), prefill_seed + 2), prefilled(n_x(p), prefill_seed + 3),
        prefilled(n_ws(p), prefill_seed + 4), prefilled(n_wh(p), prefill_seed + 5),
        prefilled((size_t)p->da, prefill_seed + 6), prefilled((size_t)p->da, prefill_seed + 7)};
    attn_additive_params params = {ws, bias, v};
    attn_additive_grads pg = {r.dws, r.db, r.dv};
    /* With values = annotations, both gradient paths accumulate into one buffer. */
    float *dvalues = p->x == p->h ? r.dh : r.dx;

    CHECK_OK(attn_additive_project_keys(&dims, h, wh, keys));
    CHECK_OK(attn_additive_scores(&dims, &params, s, keys, r.scores, saved));
    CHECK_OK(attn_additive_forward(&dims, &params, s, keys, x, p->mask, r.ctx, r.wts, saved));
    CHECK_OK(attn_additive_backward(&dims, &params, s, keys, x, p->mask, r.wts, saved, dctx,
                                    dwts, r.ds, dkeys, dvalues, &pg, work));
    CHECK_OK(attn_additive_project_keys_backward(&dims, h, wh, dkeys, r.dh, r.dwh));

    if (x != h)
        free(x);
    free(s);
    free(h);
    free(ws);
    free(wh);
    free(bias);
    free(v);
    free(dctx);
    free(dwts);
    free(keys);
    free(dkeys);
    free(saved);
    free(work);
    return r;
}

static void free_run(library_run *r)
{
    float *all[] = {r->ctx, r->wts, r->scores, r->ds, r->dh, r->dx, r->dws, r->dwh, r->db, r->dv};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

/* expected = the prefilled value + the reference gradient, since backward accumulates. */
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
    double *ctx = new_doubles((size_t)(p->B * p->dv));
    double *wts = new_doubles((size_t)(p->B * p->Lk));
    double *scores = new_doubles((size_t)(p->B * p->Lk));
    forward(p, ctx, wts, scores);
    grads g = new_grads(p);
    backward(p, &g);
    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_OK(attn_set_isa(isas[i]));
        library_run r = run_library(p, 77);
        char what[160];
#define NAME(field) (snprintf(what, sizeof what, "%s %s %s", label, attn_isa_name(isas[i]), field), what)
        CHECK_ARRAYS_CLOSE(NAME("scores"), r.scores, scores, (size_t)(p->B * p->Lk), 2e-5, 1e-5);
        CHECK_ARRAYS_CLOSE(NAME("context"), r.ctx, ctx, (size_t)(p->B * p->dv), 2e-6, 1e-5);
        CHECK_ARRAYS_CLOSE(NAME("weights"), r.wts, wts, (size_t)(p->B * p->Lk), 1e-6, 1e-5);
        const double atol = 2e-5, rtol = 1e-4;
        check_accumulated(NAME("dquery"), r.ds, g.s, n_s(p), 78, atol, rtol);
        check_accumulated(NAME("dannotations"), r.dh, g.h, n_h(p), 79, atol, rtol);
        if (p->x != p->h)
            check_accumulated(NAME("dvalues"), r.dx, g.x, n_x(p), 80, atol, rtol);
        check_accumulated(NAME("dW_s"), r.dws, g.ws, n_ws(p), 81, atol, rtol);
        check_accumulated(NAME("dW_h"), r.dwh, g.wh, n_wh(p), 82, atol, rtol);
        if (p->bias != NULL)
            check_accumulated(NAME("db"), r.db, g.bias, (size_t)p->da, 83, atol, rtol);
        check_accumulated(NAME("dv"), r.dv, g.v, (size_t)p->da, 84, atol, rtol);
#undef NAME
        free_run(&r);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free(ctx);
    free(wts);
    free(scores);
    free_grads(&g);
}

static void test_every_isa_matches_reference(void)
{
    /* B, Lk, ds, dh, dv, da: odd sizes and the dims 1, 7, 64, 80. */
    static const int64_t cases[][6] = {
        {1, 1, 1, 1, 1, 1},   {3, 7, 7, 1, 7, 64},   {17, 17, 64, 80, 7, 7},
        {3, 129, 80, 7, 64, 80}, {4, 3, 7, 64, 80, 1},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t *k = cases[c];
        for (int variant = 0; variant < 2; variant++) {
            problem p = make_problem(k[0], k[1], k[2], k[3], k[4], k[5], variant == 0,
                                     variant == 1, 1, 1000 + 10 * c + (uint64_t)variant);
            char label[96];
            snprintf(label, sizeof label, "case %zu%s", c,
                     variant == 1 ? " values=annotations" : " bias");
            check_against_reference(&p, label);
            free_problem(&p);
        }
    }
}

static int runs_identical(const library_run *a, const library_run *b, const problem *p)
{
    return memcmp(a->ctx, b->ctx, (size_t)(p->B * p->dv) * sizeof(float)) == 0 &&
           memcmp(a->wts, b->wts, (size_t)(p->B * p->Lk) * sizeof(float)) == 0 &&
           memcmp(a->ds, b->ds, n_s(p) * sizeof(float)) == 0 &&
           memcmp(a->dh, b->dh, n_h(p) * sizeof(float)) == 0 &&
           memcmp(a->dws, b->dws, n_ws(p) * sizeof(float)) == 0 &&
           memcmp(a->dwh, b->dwh, n_wh(p) * sizeof(float)) == 0 &&
           memcmp(a->dv, b->dv, (size_t)p->da * sizeof(float)) == 0 &&
           memcmp(a->db, b->db, (size_t)p->da * sizeof(float)) == 0;
}

static void test_runs_are_bit_identical(void)
{
    problem p = make_problem(33, 19, 16, 24, 0, 32, 1, 1, 1, 5000);
    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_OK(attn_set_isa(isas[i]));
        library_run a = run_library(&p, 5);
        library_run b = run_library(&p, 5);
        CHECK(runs_identical(&a, &b, &p), "%s: two runs differ", attn_isa_name(isas[i]));
        free_run(&a);
        free_run(&b);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free_problem(&p);
}

static void test_masks(void)
{
    problem p = make_problem(5, 9, 4, 6, 0, 8, 1, 1, 1, 7000);
    attn_isa isas[ATTN_ISA_LAST + 1];
    int n_isas = supported_isas(isas);
    for (int i = 0; i < n_isas; i++) {
        CHECK_OK(attn_set_isa(isas[i]));
        library_run r = run_library(&p, 3);
        int masked_zero = 1, sums_ok = 1;
        for (int64_t b = 0; b < p.B; b++) {
            double sum = 0;
            int any = 0;
            for (int64_t j = 0; j < p.Lk; j++) {
                if (masked(&p, b, j))
                    masked_zero &= r.wts[b * p.Lk + j] == 0.0f;
                else
                    any = 1;
                sum += r.wts[b * p.Lk + j];
            }
            sums_ok &= any ? fabs(sum - 1.0) < 1e-5 : sum == 0.0;
        }
        CHECK(masked_zero, "%s: masked positions get weight 0", attn_isa_name(isas[i]));
        CHECK(sums_ok, "%s: rows sum to 1, fully masked rows to 0", attn_isa_name(isas[i]));
        CHECK(all_zero(r.ctx + p.dv, (size_t)p.dv), "%s: fully masked row: zero context",
              attn_isa_name(isas[i]));
        free_run(&r);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    free_problem(&p);
}

/* Every row masked, or no positions at all: zeros everywhere, no NaN, nothing accumulated. */
static void test_fully_masked_batch(void)
{
    for (int empty = 0; empty < 2; empty++) {
        attn_additive_dims dims = {3, empty ? 0 : 4, 2, 3, 3, 5, ATTN_PRECISION_FP32};
        size_t n_keys = (size_t)(dims.batch * dims.src_len * dims.attn_dim);
        size_t n_vals = (size_t)(dims.batch * dims.src_len * dims.value_dim);
        float *s = prefilled(6, 1), *keys = prefilled(n_keys, 2), *x = prefilled(n_vals, 3);
        float *ws = prefilled(10, 4), *v = prefilled(5, 5), *bias = prefilled(5, 6);
        uint8_t mask[12];
        memset(mask, 1, sizeof mask);
        float ctx[9], wts[12], dctx[9], dwts[12];
        float ds[6] = {0}, dws[10] = {0}, db[5] = {0}, dv[5] = {0};
        float *dkeys = new_floats(n_keys), *dx = new_floats(n_vals);
        float *saved = new_floats(attn_additive_saved_floats(&dims));
        float *work = new_floats(attn_additive_workspace_floats(&dims));
        test_fill_uniform(dctx, 9, -1, 1, 7);
        test_fill_uniform(dwts, 12, -1, 1, 8);
        memset(ctx, 0xff, sizeof ctx); /* NaN patterns that the forward must overwrite */
        memset(wts, 0xff, sizeof wts);
        attn_additive_params params = {ws, bias, v};
        attn_additive_grads pg = {dws, db, dv};
        attn_isa isas[ATTN_ISA_LAST + 1];
        int n_isas = supported_isas(isas);
        for (int i = 0; i < n_isas; i++) {
            CHECK_OK(attn_set_isa(isas[i]));
            CHECK_OK(attn_additive_forward(&dims, &params, s, keys, x, mask, ctx, wts, saved));
            CHECK(all_zero(ctx, 9), "%s: zero context", attn_isa_name(isas[i]));
            CHECK(all_zero(wts, (size_t)(3 * dims.src_len)), "zero weights");
            CHECK_OK(attn_additive_backward(&dims, &params, s, keys, x, mask, wts, saved, dctx,
                                            dwts, ds, dkeys, dx, &pg, work));
            CHECK(all_zero(ds, 6) && all_zero(dws, 10) && all_zero(db, 5) && all_zero(dv, 5) &&
                      all_zero(dkeys, n_keys) && all_zero(dx, n_vals),
                  "%s: zero gradients (src_len %lld)", attn_isa_name(isas[i]),
                  (long long)dims.src_len);
        }
        CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
        float *all[] = {s, keys, x, ws, v, bias, dkeys, dx, saved, work};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
            free(all[i]);
    }
}

static void test_bad_input(void)
{
    attn_additive_dims dims = {2, 3, 4, 5, 6, 7, ATTN_PRECISION_FP32};
    float buf[256] = {0};
    uint8_t mask[6] = {0};
    attn_additive_params params = {buf, NULL, buf};
    attn_additive_grads pg = {NULL, NULL, NULL};
    CHECK_FAILS(attn_additive_forward(NULL, &params, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_forward(&dims, NULL, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_additive_forward") != NULL, "names the function: %s",
          attn_last_error());
    attn_additive_params no_v = {buf, NULL, NULL};
    CHECK_FAILS(attn_additive_forward(&dims, &no_v, buf, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "v") != NULL, "names the argument: %s", attn_last_error());
    CHECK_FAILS(attn_additive_forward(&dims, &params, NULL, buf, buf, mask, buf, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_forward(&dims, &params, buf, buf, buf, mask, buf, buf, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_forward(&dims, &params, buf, buf, buf, mask, buf, NULL, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_backward(&dims, &params, buf, buf, buf, mask, buf, buf, buf, NULL,
                                       buf, buf, buf, &pg, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_backward(&dims, &params, buf, buf, buf, mask, buf, buf, NULL, NULL,
                                       buf, buf, buf, &pg, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_scores(&dims, &params, buf, NULL, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_project_keys(&dims, buf, NULL, buf), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_additive_project_keys_backward(&dims, buf, buf, NULL, buf, buf),
                ATTN_ERR_INVALID_ARGUMENT);
    const int64_t huge = (int64_t)1 << 31;
    const int64_t bad[][6] = {{-1, 3, 4, 5, 6, 7},      {2, -3, 4, 5, 6, 7},
                              {2, 3, 0, 5, 6, 7},       {2, 3, 4, 0, 6, 7},
                              {2, 3, 4, 5, 0, 7},       {2, 3, 4, 5, 6, -7},
                              {huge, huge, 4, 5, 6, 7}, {huge, 0, 4, 5, 6, huge},
                              {2, 3, huge, 5, 6, huge}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_additive_dims d = {bad[i][0], bad[i][1], bad[i][2], bad[i][3], bad[i][4], bad[i][5],
                                    ATTN_PRECISION_FP32};
        CHECK_FAILS(attn_additive_forward(&d, &params, buf, buf, buf, mask, buf, buf, buf),
                    ATTN_ERR_INVALID_ARGUMENT);
        CHECK(attn_additive_saved_floats(&d) == 0 && attn_additive_workspace_floats(&d) == 0,
              "no buffer size for bad sizes");
    }
    CHECK(attn_additive_saved_floats(&dims) == 14, "saved = B * da");
    CHECK(attn_additive_workspace_floats(&dims) == 2 * (14 + 3), "workspace = B (2 da + Lk)");
    /* An empty batch is a valid no-op, even without buffers. */
    attn_additive_dims empty = {0, 3, 4, 5, 6, 7, ATTN_PRECISION_FP32};
    CHECK_OK(attn_additive_forward(&empty, &params, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
}

/* The float tanh behind every MLP score, reached through the one-feature score
 * v . tanh(q + k) with k = 0 and v = 1, in each version this CPU can run. */
static void test_tanh_versions(void)
{
    struct {
        const char *name;
        attn_isa isa;
        attn_classic_mlp_score_fn score;
        attn_classic_mlp_backward_fn backward;
    } versions[] = {
        {"portable", ATTN_ISA_PORTABLE, attn_classic_mlp_score_portable,
         attn_classic_mlp_backward_portable},
#if defined(ATTN_HAVE_X86_KERNELS)
        {"avx2", ATTN_ISA_AVX2, attn_classic_mlp_score_avx2, attn_classic_mlp_backward_avx2},
        {"avx512", ATTN_ISA_AVX512, attn_classic_mlp_score_avx512,
         attn_classic_mlp_backward_avx512},
#elif defined(ATTN_HAVE_NEON_KERNELS)
        {"neon", ATTN_ISA_NEON, attn_classic_mlp_score_neon, attn_classic_mlp_backward_neon},
#endif
    };
    const float zero = 0.0f, one = 1.0f;
    for (size_t i = 0; i < sizeof versions / sizeof versions[0]; i++) {
        if (!attn_isa_supported(versions[i].isa))
            continue;
        double worst_ulps = 0, worst_x = 0;
        for (float x = 1e-30f; x < 30.0f; x *= 1.0002f)
            for (int sign = -1; sign <= 1; sign += 2) {
                float xs = (float)sign * x;
                double exact = tanh((double)xs);
                float rounded = (float)fabs(exact);
                double ulp = (double)nextafterf(rounded, INFINITY) - (double)rounded;
                double err = fabs(versions[i].score(&xs, &zero, &one, 1) - exact) / ulp;
                if (err > worst_ulps) {
                    worst_ulps = err;
                    worst_x = xs;
                }
            }
        CHECK(worst_ulps <= 2.0, "%s tanh: %.2f ulp at %g", versions[i].name, worst_ulps,
              worst_x);
        float inf = INFINITY, minus_inf = -INFINITY, nan_value = NAN;
        CHECK(versions[i].score(&inf, &zero, &one, 1) == 1.0f &&
                  versions[i].score(&minus_inf, &zero, &one, 1) == -1.0f &&
                  isnan(versions[i].score(&nan_value, &zero, &one, 1)),
              "%s tanh: +-inf and NaN", versions[i].name);

        /* Every length around the vector width, against double. */
        float q[67], k[67], v[67], dq[67], dk[67], dv[67];
        test_fill_uniform(q, 67, -3, 3, 1);
        test_fill_uniform(k, 67, -3, 3, 2);
        test_fill_uniform(v, 67, -1, 1, 3);
        int ok = 1;
        for (int64_t n = 1; n <= 67; n++) {
            double sum = 0;
            for (int64_t d = 0; d < n; d++)
                sum += (double)v[d] * tanh((double)q[d] + k[d]);
            ok &= test_close(versions[i].score(q, k, v, n), sum, 1e-6, 1e-6);
            memset(dq, 0, sizeof dq);
            memset(dk, 0, sizeof dk);
            memset(dv, 0, sizeof dv);
            versions[i].backward(q, k, v, 0.75f, n, dq, dk, dv);
            for (int64_t d = 0; d < 67; d++) {
                double t = d < n ? tanh((double)q[d] + k[d]) : 0.0;
                double g = d < n ? 0.75 * v[d] * (1 - t * t) : 0.0;
                ok &= test_close(dq[d], g, 1e-7, 1e-6) && dk[d] == dq[d] &&
                      test_close(dv[d], 0.75 * t, 1e-7, 1e-6);
            }
        }
        CHECK(ok, "%s: score and backward for every length 1..67, nothing past the end",
              versions[i].name);
    }
}

int main(void)
{
    RUN_TEST(test_tanh_versions);
    RUN_TEST(test_reference_backward_matches_finite_differences);
    RUN_TEST(test_every_isa_matches_reference);
    RUN_TEST(test_runs_are_bit_identical);
    RUN_TEST(test_masks);
    RUN_TEST(test_fully_masked_batch);
    RUN_TEST(test_bad_input);
    return test_summary();
}
