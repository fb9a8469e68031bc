/* Scaled dot-product attention: the double reference against finite differences and an
 * independent dense formulation, every optimized version against the reference, masks,
 * strided views, weights and lse, determinism and bad input. */
#include "harness.h"
#include "attention/sdpa_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- test cases: shapes and masks ----------------------------------------------------- */

enum additive_kind { ADDITIVE_NONE, ADDITIVE_SHARED, ADDITIVE_PER_HEAD };

typedef struct mask_spec {
    const char *name;
    int causal;
    int64_t window; /* < 0: none */
    int padding;    /* pad some keys (every third one, shifted by the batch index) */
    enum additive_kind additive;
    int fully_masked_row; /* row 1 of every head sees no key (additive -inf row) */
} mask_spec;

static const mask_spec mask_kinds[] = {
    {"none", 0, -1, 0, ADDITIVE_NONE, 0},
    {"padding", 0, -1, 1, ADDITIVE_NONE, 0},
    {"causal", 1, -1, 0, ADDITIVE_NONE, 0},
    {"window", 0, 2, 0, ADDITIVE_NONE, 0},
    {"additive", 0, -1, 0, ADDITIVE_SHARED, 0},
    {"additive per head", 0, -1, 0, ADDITIVE_PER_HEAD, 0},
    {"causal+window+padding", 1, 3, 1, ADDITIVE_NONE, 0},
    {"causal+padding+additive per head", 1, -1, 1, ADDITIVE_PER_HEAD, 0},
    {"window+additive+masked row", 0, 1, 0, ADDITIVE_SHARED, 1},
    {"padding+masked row", 0, -1, 1, ADDITIVE_PER_HEAD, 1},
};
#define MASK_KINDS ((int)(sizeof mask_kinds / sizeof mask_kinds[0]))

/* A problem with its masks materialised; free with case_free. */
typedef struct sdpa_case {
    int64_t batch, heads, len_q, len_k, dim, dim_v;
    mask_spec spec;
    uint8_t *padding;
    float *additive;
    attn_sdpa_options options;
    sdpa_problem problem; /* masks and scale only, for the double reference */
} sdpa_case;

static sdpa_case case_make(int64_t batch, int64_t heads, int64_t len_q, int64_t len_k, int64_t dim,
                           int64_t dim_v, const mask_spec *spec, uint64_t seed)
{
    sdpa_case c;
    memset(&c, 0, sizeof c);
    c.batch = batch;
    c.heads = heads;
    c.len_q = len_q;
    c.len_k = len_k;
    c.dim = dim;
    c.dim_v = dim_v;
    c.spec = *spec;
    c.options = attn_sdpa_default_options();
    c.options.causal = spec->causal;
    c.options.window = spec->window;
    if (spec->padding) {
        c.padding = test_alloc((size_t)(batch * len_k));
        for (int64_t b = 0; b < batch; b++)
            for (int64_t j = 0; j < len_k; j++)
                c.padding[b * len_k + j] = (uint8_t)((j + b) % 3 == 2);
        c.options.key_padding_mask = c.padding;
    }
    if (spec->additive != ADDITIVE_NONE) {
        int64_t planes = spec->additive == ADDITIVE_PER_HEAD ? batch * heads : 1;
        size_t count = (size_t)(planes * len_q * len_k);
        c.additive = test_alloc(count * sizeof(float));
        test_fill_uniform(c.additive, count, -1.0f, 1.0f, seed ^ 0xadd);
        for (size_t e = 0; e < count; e++) {
            int64_t i = (int64_t)(e / (size_t)len_k) % len_q, j = (int64_t)(e % (size_t)len_k);
            if ((i * 7 + j * 3 + (int64_t)(e / (size_t)(len_q * len_k))) % 5 == 0)
                c.additive[e] = -INFINITY;
            if (spec->fully_masked_row && i == 1)
                c.additive[e] = -INFINITY;
        }
        c.options.attn_mask = c.additive;
        c.options.attn_mask_per_head = spec->additive == ADDITIVE_PER_HEAD;
    }
    c.problem.batch = batch;
    c.problem.heads = heads;
    c.problem.len_q = len_q;
    c.problem.len_k = len_k;
    c.problem.dim = dim;
    c.problem.dim_v = dim_v;
    c.problem.scale = dim > 0 ? (float)(1.0 / sqrt((double)dim)) : 1.0f;
    c.problem.causal = spec->causal;
    c.problem.window = spec->window;
    c.problem.key_padding_mask = c.padding;
    c.problem.attn_mask = c.additive;
    c.problem.attn_mask_per_head = spec->additive == ADDITIVE_PER_HEAD;
    return c;
}

static void case_free(sdpa_case *c)
{
    free(c->padding);
    free(c->additive);
}

static size_t q_count(const sdpa_case *c)
{
    return (size_t)(c->batch * c->heads * c->len_q * c->dim);
}
static size_t k_count(const sdpa_case *c)
{
    return (size_t)(c->batch * c->heads * c->len_k * c->dim);
}
static size_t v_count(const sdpa_case *c)
{
    return (size_t)(c->batch * c->heads * c->len_k * c->dim_v);
}
static size_t o_count(const sdpa_case *c)
{
    return (size_t)(c->batch * c->heads * c->len_q * c->dim_v);
}
static size_t rows(const sdpa_case *c)
{
    return (size_t)(c->batch * c->heads * c->len_q);
}

/* Whether (b, h, i, j) takes part, straight from the mask definitions. */
static int pair_allowed(const sdpa_case *c, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (c->padding != NULL && c->padding[b * c->len_k + j])
        return 0;
    if (c->spec.causal && j > i)
        return 0;
    if (c->spec.window >= 0 && llabs(i - j) > c->spec.window)
        return 0;
    if (c->additive != NULL) {
        int64_t plane = c->spec.additive == ADDITIVE_PER_HEAD ? b * c->heads + h : 0;
        if (c->additive[(plane * c->len_q + i) * c->len_k + j] == -INFINITY)
            return 0;
    }
    return 1;
}

static double additive_value(const sdpa_case *c, int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (c->additive == NULL)
        return 0;
    int64_t plane = c->spec.additive == ADDITIVE_PER_HEAD ? b * c->heads + h : 0;
    return c->additive[(plane * c->len_q + i) * c->len_k + j];
}

/* ---- the double reference ------------------------------------------------------------- */

/* Independent dense formulation: the full score matrix of a head, explicit mask predicate,
 * softmax, then weights times values. */
static void dense_forward(const sdpa_case *c, const double *q, const double *k, const double *v,
                          double *out, double *lse, double *weights)
{
    for (int64_t b = 0; b < c->batch; b++)
        for (int64_t h = 0; h < c->heads; h++)
            for (int64_t i = 0; i < c->len_q; i++) {
                int64_t head = b * c->heads + h, row = head * c->len_q + i;
                double *w = weights + row * c->len_k;
                double max = -INFINITY;
                for (int64_t j = 0; j < c->len_k; j++) {
                    double dot = 0;
                    for (int64_t x = 0; x < c->dim; x++)
                        dot += q[row * c->dim + x] * k[(head * c->len_k + j) * c->dim + x];
                    w[j] = pair_allowed(c, b, h, i, j)
                               ? dot * (double)c->problem.scale + additive_value(c, b, h, i, j)
                               : -INFINITY;
                    max = fmax(max, w[j]);
                }
                double total = 0;
                for (int64_t j = 0; j < c->len_k; j++)
                    total += w[j] == -INFINITY ? 0 : exp(w[j] - max);
                lse[row] = total > 0 ? max + log(total) : -INFINITY;
                for (int64_t j = 0; j < c->len_k; j++)
                    w[j] = total > 0 && w[j] != -INFINITY ? exp(w[j] - max) / total : 0;
                for (int64_t y = 0; y < c->dim_v; y++) {
                    double sum = 0;
                    for (int64_t j = 0; j < c->len_k; j++)
                        sum += w[j] * v[(head * c->len_k + j) * c->dim_v + y];
                    out[row * c->dim_v + y] = sum;
                }
            }
}

static double *random_doubles(size_t n, uint64_t seed)
{
    double *x = test_alloc(n * sizeof(double));
    test_fill_uniform_double(x, n, -1.0, 1.0, seed);
    return x;
}

static void test_reference_matches_dense_formulation(void)
{
    for (int m = 0; m < MASK_KINDS; m++) {
        sdpa_case c = case_make(2, 3, 6, 9, 5, 4, &mask_kinds[m], (uint64_t)m);
        double *q = random_doubles(q_count(&c), 1), *k = random_doubles(k_count(&c), 2);
        double *v = random_doubles(v_count(&c), 3);
        size_t w_count = rows(&c) * (size_t)c.len_k;
        double *out = test_alloc(o_count(&c) * sizeof(double));
        double *lse = test_alloc(rows(&c) * sizeof(double));
        double *weights = test_alloc(w_count * sizeof(double));
        double *dense_out = test_alloc(o_count(&c) * sizeof(double));
        double *dense_lse = test_alloc(rows(&c) * sizeof(double));
        double *dense_weights = test_alloc(w_count * sizeof(double));
        CHECK_OK(attn_sdpa_reference_forward_f64(&c.problem, q, k, v, out, lse, weights));
        dense_forward(&c, q, k, v, dense_out, dense_lse, dense_weights);
        CHECK(test_max_abs_diff_double(out, dense_out, o_count(&c)) < 1e-13, "%s: out",
              c.spec.name);
        CHECK(test_max_abs_diff_double(weights, dense_weights, w_count) < 1e-13, "%s: weights",
              c.spec.name);
        int lse_ok = 1, masked_rows = 0;
        for (size_t r = 0; r < rows(&c); r++) {
            if (dense_lse[r] == -INFINITY) {
                masked_rows++;
                lse_ok &= lse[r] == -INFINITY;
            } else {
                lse_ok &= fabs(lse[r] - dense_lse[r]) < 1e-13;
            }
        }
        CHECK(lse_ok, "%s: lse", c.spec.name);
        CHECK(!c.spec.fully_masked_row || masked_rows > 0, "%s: has a fully masked row",
              c.spec.name);
        free(q), free(k), free(v), free(out), free(lse), free(weights);
        free(dense_out), free(dense_lse), free(dense_weights);
        case_free(&c);
    }
}

/* loss = sum(out * grad_out), so d loss / d x is what the backward returns for grad_out. */
static double reference_loss(const sdpa_case *c, const double *q, const double *k, const double *v,
                             const double *grad_out, double *out_scratch)
{
    attn_sdpa_reference_forward_f64(&c->problem, q, k, v, out_scratch, NULL, NULL);
    double loss = 0;
    for (size_t e = 0; e < o_count(c); e++)
        loss += out_scratch[e] * grad_out[e];
    return loss;
}

/* Central differences of the loss in each element of x, against the analytic gradient. */
static int check_gradient(const sdpa_case *c, const char *what, double *x, size_t n,
                          const double *analytic, const double *q, const double *k, const double *v,
                          const double *grad_out, double *out_scratch)
{
    const double eps = 1e-6;
    int ok = 1;
    for (size_t e = 0; e < n; e++) {
        double saved = x[e];
        x[e] = saved + eps;
        double plus = reference_loss(c, q, k, v, grad_out, out_scratch);
        x[e] = saved - eps;
        double minus = reference_loss(c, q, k, v, grad_out, out_scratch);
        x[e] = saved;
        double numeric = (plus - minus) / (2 * eps);
        if (!test_close(analytic[e], numeric, 1e-8, 1e-6)) {
            if (ok)
                fprintf(stderr, "  %s d%s[%zu]: analytic %.12g, numeric %.12g\n", c->spec.name,
                        what, e, analytic[e], numeric);
            ok = 0;
        }
    }
    return ok;
}

static void gradient_check_case(int64_t batch, int64_t heads, int64_t len_q, int64_t len_k,
                                int64_t dim, int64_t dim_v, const mask_spec *spec, uint64_t seed)
{
    sdpa_case c = case_make(batch, heads, len_q, len_k, dim, dim_v, spec, seed);
    double *q = random_doubles(q_count(&c), seed + 1), *k = random_doubles(k_count(&c), seed + 2);
    double *v = random_doubles(v_count(&c), seed + 3);
    double *grad_out = random_doubles(o_count(&c), seed + 4);
    double *out = test_alloc(o_count(&c) * sizeof(double));
    /* Start the gradients from a non-zero value to check that the backward accumulates. */
    double *dq = random_doubles(q_count(&c), seed + 5), *dk = random_doubles(k_count(&c), seed + 6);
    double *dv = random_doubles(v_count(&c), seed + 7);
    double *dq0 = test_alloc(q_count(&c) * sizeof(double));
    double *dk0 = test_alloc(k_count(&c) * sizeof(double));
    double *dv0 = test_alloc(v_count(&c) * sizeof(double));
    memcpy(dq0, dq, q_count(&c) * sizeof(double));
    memcpy(dk0, dk, k_count(&c) * sizeof(double));
    memcpy(dv0, dv, v_count(&c) * sizeof(double));
    CHECK_OK(attn_sdpa_reference_backward_f64(&c.problem, q, k, v, grad_out, dq, dk, dv));
    for (size_t e = 0; e < q_count(&c); e++)
        dq[e] -= dq0[e];
    for (size_t e = 0; e < k_count(&c); e++)
        dk[e] -= dk0[e];
    for (size_t e = 0; e < v_count(&c); e++)
        dv[e] -= dv0[e];
    CHECK(check_gradient(&c, "q", q, q_count(&c), dq, q, k, v, grad_out, out),
          "%s: dq (Lq=%lld Lk=%lld)", spec->name, (long long)len_q, (long long)len_k);
    CHECK(check_gradient(&c, "k", k, k_count(&c), dk, q, k, v, grad_out, out),
          "%s: dk (Lq=%lld Lk=%lld)", spec->name, (long long)len_q, (long long)len_k);
    CHECK(check_gradient(&c, "v", v, v_count(&c), dv, q, k, v, grad_out, out),
          "%s: dv (Lq=%lld Lk=%lld)", spec->name, (long long)len_q, (long long)len_k);
    if (spec->fully_masked_row) {
        int zero = 1;
        for (int64_t head = 0; head < batch * heads; head++)
            for (int64_t x = 0; x < dim; x++)
                zero &= dq[(head * len_q + 1) * dim + x] == 0.0;
        CHECK(zero, "%s: a fully masked row gets a zero dq", spec->name);
    }
    free(q), free(k), free(v), free(grad_out), free(out);
    free(dq), free(dk), free(dv), free(dq0), free(dk0), free(dv0);
    case_free(&c);
}

static void test_reference_gradients_match_finite_differences(void)
{
    for (int m = 0; m < MASK_KINDS; m++) {
        gradient_check_case(2, 2, 5, 5, 3, 2, &mask_kinds[m], 100 + (uint64_t)m);
        gradient_check_case(1, 2, 4, 7, 5, 3, &mask_kinds[m], 200 + (uint64_t)m);
        gradient_check_case(2, 1, 7, 3, 1, 4, &mask_kinds[m], 300 + (uint64_t)m);
    }
}

/* ---- the float API against the double reference ------------------------------------- */

/* Float tensors for one case. Each lives inside a larger buffer laid out [B, L, H, width + 3]
 * and is viewed as [B, H, L, width], so the views are strided in every dimension but the
 * last, like heads read in place from a batch-first projection. */
typedef struct strided {
    float *storage;
    size_t storage_count;
    attn_tensor view;
} strided;

static strided strided_make(int64_t batch, int64_t heads, int64_t len, int64_t width,
                            int interleaved)
{
    strided t;
    const int64_t pad = interleaved ? 3 : 0;
    t.storage_count = (size_t)(batch * len * heads * (width + pad));
    t.storage = test_alloc(t.storage_count * sizeof(float));
    memset(&t.view, 0, sizeof t.view);
    t.view.data = t.storage;
    t.view.ndim = 4;
    t.view.shape[0] = batch;
    t.view.shape[1] = heads;
    t.view.shape[2] = len;
    t.view.shape[3] = width;
    if (interleaved) {
        t.view.stride[0] = len * heads * (width + pad);
        t.view.stride[1] = width + pad;
        t.view.stride[2] = heads * (width + pad);
    } else {
        t.view.stride[0] = heads * len * width;
        t.view.stride[1] = len * width;
        t.view.stride[2] = width;
    }
    t.view.stride[3] = 1;
    return t;
}

static float *strided_at(const strided *t, int64_t b, int64_t h, int64_t l)
{
    return t->view.data + b * t->view.stride[0] + h * t->view.stride[1] + l * t->view.stride[2];
}

/* Fills the viewed elements (and only them) from a contiguous double array. */
static void strided_set(strided *t, const double *src)
{
    const int64_t *shape = t->view.shape;
    for (int64_t b = 0; b < shape[0]; b++)
        for (int64_t h = 0; h < shape[1]; h++)
            for (int64_t l = 0; l < shape[2]; l++)
                for (int64_t x = 0; x < shape[3]; x++)
                    strided_at(t, b, h, l)[x] = (float)*src++;
}

static void strided_get(const strided *t, float *dst)
{
    const int64_t *shape = t->view.shape;
    for (int64_t b = 0; b < shape[0]; b++)
        for (int64_t h = 0; h < shape[1]; h++)
            for (int64_t l = 0; l < shape[2]; l++)
                for (int64_t x = 0; x < shape[3]; x++)
                    *dst++ = strided_at(t, b, h, l)[x];
}

/* Doubles that are exactly representable as floats, so float runs see the same inputs. */
static double *random_float_values(size_t n, uint64_t seed, double range)
{
    double *x = random_doubles(n, seed);
    for (size_t e = 0; e < n; e++)
        x[e] = (double)(float)(x[e] * range);
    return x;
}

typedef struct run_result {
    float *out, *lse, *weights, *dq, *dk, *dv;
} run_result;

static void run_result_free(run_result *r)
{
    free(r->out), free(r->lse), free(r->weights), free(r->dq), free(r->dk), free(r->dv);
}

/* Runs the float forward (with lse and weights) and backward through the public API on the
 * current instruction set. Gradients start from random values so accumulation is
 * exercised; the returned gradients have them subtracted back out. Memory around the viewed
 * elements holds NaN, which would leak into any result that reads it. */
static int run_api(const sdpa_case *c, const double *q, const double *k, const double *v,
                   const double *grad_out, int interleaved, run_result *r)
{
    strided tq = strided_make(c->batch, c->heads, c->len_q, c->dim, interleaved);
    strided tk = strided_make(c->batch, c->heads, c->len_k, c->dim, interleaved);
    strided tv = strided_make(c->batch, c->heads, c->len_k, c->dim_v, interleaved);
    strided to = strided_make(c->batch, c->heads, c->len_q, c->dim_v, interleaved);
    strided tg = strided_make(c->batch, c->heads, c->len_q, c->dim_v, interleaved);
    strided tdq = strided_make(c->batch, c->heads, c->len_q, c->dim, interleaved);
    strided tdk = strided_make(c->batch, c->heads, c->len_k, c->dim, interleaved);
    strided tdv = strided_make(c->batch, c->heads, c->len_k, c->dim_v, interleaved);
    strided *all[] = {&tq, &tk, &tv, &to, &tg, &tdq, &tdk, &tdv};
    for (int t = 0; t < 8; t++)
        for (size_t e = 0; e < all[t]->storage_count; e++)
            all[t]->storage[e] = NAN;
    strided_set(&tq, q);
    strided_set(&tk, k);
    strided_set(&tv, v);
    strided_set(&tg, grad_out);
    double *init_q = random_float_values(q_count(c), 91, 1.0);
    double *init_k = random_float_values(k_count(c), 92, 1.0);
    double *init_v = random_float_values(v_count(c), 93, 1.0);
    strided_set(&tdq, init_q);
    strided_set(&tdk, init_k);
    strided_set(&tdv, init_v);

    r->out = test_alloc(o_count(c) * sizeof(float));
    r->lse = test_alloc(rows(c) * sizeof(float));
    r->weights = test_alloc(rows(c) * (size_t)c->len_k * sizeof(float));
    r->dq = test_alloc(q_count(c) * sizeof(float));
    r->dk = test_alloc(k_count(c) * sizeof(float));
    r->dv = test_alloc(v_count(c) * sizeof(float));
    for (size_t e = 0; e < rows(c) * (size_t)c->len_k; e++)
        r->weights[e] = NAN;
    attn_status forward =
        attn_sdpa_forward(&tq.view, &tk.view, &tv.view, &c->options, &to.view, r->lse, r->weights);
    attn_status backward =
        forward != ATTN_OK ? forward
                           : attn_sdpa_backward(&tq.view, &tk.view, &tv.view, &c->options, &to.view,
                                                r->lse, &tg.view, &tdq.view, &tdk.view, &tdv.view);
    strided_get(&to, r->out);
    strided_get(&tdq, r->dq);
    strided_get(&tdk, r->dk);
    strided_get(&tdv, r->dv);
    for (size_t e = 0; e < q_count(c); e++)
        r->dq[e] = (float)((double)r->dq[e] - init_q[e]);
    for (size_t e = 0; e < k_count(c); e++)
        r->dk[e] = (float)((double)r->dk[e] - init_k[e]);
    for (size_t e = 0; e < v_count(c); e++)
        r->dv[e] = (float)((double)r->dv[e] - init_v[e]);
    free(init_q), free(init_k), free(init_v);
    for (int t = 0; t < 8; t++)
        free(all[t]->storage);
    CHECK(forward == ATTN_OK && backward == ATTN_OK, "%s: %s", c->spec.name, attn_last_error());
    return forward == ATTN_OK && backward == ATTN_OK;
}

static int lse_close(const float *lse, const double *ref, size_t n, double atol)
{
    int ok = 1;
    for (size_t e = 0; e < n; e++) {
        if (ref[e] == -INFINITY)
            ok &= lse[e] == -INFINITY;
        else
            ok &= fabs((double)lse[e] - ref[e]) <= atol * (1 + fabs(ref[e]));
    }
    return ok;
}

static int all_finite(const float *x, size_t n)
{
    for (size_t e = 0; e < n; e++)
        if (!isfinite(x[e]))
            return 0;
    return 1;
}

/* Float results of the current instruction set against the double reference. Tolerances:
 * float rounding of scores of size up to ~sqrt(d) and sums over up to 150 keys, with
 * gradients looser than outputs because they chain two such sums. */
static void compare_with_reference(int64_t batch, int64_t heads, int64_t len_q, int64_t len_k,
                                   int64_t dim, int64_t dim_v, const mask_spec *spec,
                                   int interleaved, uint64_t seed)
{
    sdpa_case c = case_make(batch, heads, len_q, len_k, dim, dim_v, spec, seed);
    double *q = random_float_values(q_count(&c), seed + 1, 2.0);
    double *k = random_float_values(k_count(&c), seed + 2, 2.0);
    double *v = random_float_values(v_count(&c), seed + 3, 1.0);
    double *grad_out = random_float_values(o_count(&c), seed + 4, 1.0);
    double *out = test_alloc(o_count(&c) * sizeof(double));
    double *lse = test_alloc(rows(&c) * sizeof(double));
    double *weights = test_alloc(rows(&c) * (size_t)len_k * sizeof(double));
    double *dq = test_alloc(q_count(&c) * sizeof(double));
    double *dk = test_alloc(k_count(&c) * sizeof(double));
    double *dv = test_alloc(v_count(&c) * sizeof(double));
    CHECK_OK(attn_sdpa_reference_forward_f64(&c.problem, q, k, v, out, lse, weights));
    CHECK_OK(attn_sdpa_reference_backward_f64(&c.problem, q, k, v, grad_out, dq, dk, dv));

    run_result r;
    if (run_api(&c, q, k, v, grad_out, interleaved, &r)) {
        char what[160];
        const double atol = 2e-5 * (1 + sqrt((double)dim) / 4), rtol = 1e-4;
        snprintf(what, sizeof what, "%s %s Lq=%lld Lk=%lld d=%lld dv=%lld%s",
                 attn_isa_name(attn_get_isa()), spec->name, (long long)len_q, (long long)len_k,
                 (long long)dim, (long long)dim_v, interleaved ? " strided" : "");
        CHECK_ARRAYS_CLOSE(what, r.out, out, o_count(&c), atol, rtol);
        CHECK(lse_close(r.lse, lse, rows(&c), 1e-5), "%s: lse", what);
        CHECK_ARRAYS_CLOSE(what, r.weights, weights, rows(&c) * (size_t)len_k, atol, rtol);
        CHECK_ARRAYS_CLOSE(what, r.dq, dq, q_count(&c), 8 * atol, 8 * rtol);
        CHECK_ARRAYS_CLOSE(what, r.dk, dk, k_count(&c), 8 * atol, 8 * rtol);
        CHECK_ARRAYS_CLOSE(what, r.dv, dv, v_count(&c), 8 * atol, 8 * rtol);
        CHECK(all_finite(r.out, o_count(&c)) && all_finite(r.dq, q_count(&c)) &&
                  all_finite(r.dk, k_count(&c)) && all_finite(r.dv, v_count(&c)),
              "%s: no NaN or inf", what);
    }
    run_result_free(&r);
    free(q), free(k), free(v), free(grad_out), free(out), free(lse), free(weights);
    free(dq), free(dk), free(dv);
    case_free(&c);
}

static const attn_isa all_isas[] = {ATTN_ISA_REFERENCE, ATTN_ISA_PORTABLE, ATTN_ISA_AVX2,
                                    ATTN_ISA_AVX512, ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
#define ISA_COUNT ((int)(sizeof all_isas / sizeof all_isas[0]))

static void test_every_isa_matches_reference_over_sizes(void)
{
    static const int64_t lengths[] = {1, 3, 17, 129};
    static const int64_t dims[] = {1, 7, 64, 80};
    CHECK_OK(attn_set_num_threads(2));
    for (int s = 0; s < ISA_COUNT; s++) {
        if (!test_isa_wanted(all_isas[s]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[s]));
        for (int l = 0; l < 4; l++)
            for (int d = 0; d < 4; d++) {
                const mask_spec *spec = &mask_kinds[(l * 4 + d) % MASK_KINDS];
                compare_with_reference(1, 2, lengths[l], lengths[l], dims[d], dims[d], spec,
                                       (l + d) % 2, (uint64_t)(l * 10 + d));
            }
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    CHECK_OK(attn_set_num_threads(0));
}

static void test_every_isa_matches_reference_for_every_mask(void)
{
    CHECK_OK(attn_set_num_threads(2));
    for (int s = 0; s < ISA_COUNT; s++) {
        if (!test_isa_wanted(all_isas[s]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[s]));
        for (int m = 0; m < MASK_KINDS; m++) {
            /* Lengths that leave partial tiles, cross attention both ways, dv != d. */
            /* 3 heads and 1 head on 2 threads: the backward splits heads into key groups. */
            compare_with_reference(1, 3, 70, 70, 16, 16, &mask_kinds[m], 1, 500 + (uint64_t)m);
            compare_with_reference(1, 2, 130, 67, 24, 40, &mask_kinds[m], 0, 600 + (uint64_t)m);
            compare_with_reference(1, 1, 19, 150, 33, 9, &mask_kinds[m], 1, 700 + (uint64_t)m);
            compare_with_reference(2, 4, 40, 90, 8, 8, &mask_kinds[m], 0, 800 + (uint64_t)m);
        }
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    CHECK_OK(attn_set_num_threads(0));
}

/* Two runs with the same thread count give identical bits. */
static void test_results_are_deterministic(void)
{
    const mask_spec *spec = &mask_kinds[7];
    for (int run = 0; run < 4; run++) {
        const int threads = 1 + run % 2;
        CHECK_OK(attn_set_num_threads(threads));
        sdpa_case c = case_make(1, 3, 150, 140, 40, 24, spec, 11); /* key groups at 2 threads */
        c.options.precision = run < 2 ? ATTN_PRECISION_FP32 : ATTN_PRECISION_BF16;
        double *q = random_float_values(q_count(&c), 1, 2.0);
        double *k = random_float_values(k_count(&c), 2, 2.0);
        double *v = random_float_values(v_count(&c), 3, 1.0);
        double *g = random_float_values(o_count(&c), 4, 1.0);
        run_result first, second;
        memset(&first, 0, sizeof first);
        memset(&second, 0, sizeof second);
        int ok = run_api(&c, q, k, v, g, 1, &first) && run_api(&c, q, k, v, g, 1, &second);
        CHECK(ok && memcmp(first.out, second.out, o_count(&c) * sizeof(float)) == 0 &&
                  memcmp(first.lse, second.lse, rows(&c) * sizeof(float)) == 0 &&
                  memcmp(first.dq, second.dq, q_count(&c) * sizeof(float)) == 0 &&
                  memcmp(first.dk, second.dk, k_count(&c) * sizeof(float)) == 0 &&
                  memcmp(first.dv, second.dv, v_count(&c) * sizeof(float)) == 0,
              "%d threads, %s: identical bits", threads, attn_precision_name(c.options.precision));
        run_result_free(&first);
        run_result_free(&second);
        free(q), free(k), free(v), free(g);
        case_free(&c);
    }
    CHECK_OK(attn_set_num_threads(0));
}

/* Every key padded in batch 1: all its rows are fully masked. */
static void test_fully_masked_rows_give_zeros(void)
{
    const mask_spec none = {"all keys padded", 0, -1, 0, ADDITIVE_NONE, 0};
    for (int run = 0; run < 2 * ISA_COUNT; run++) {
        const int s = run % ISA_COUNT;
        if (!test_isa_wanted(all_isas[s]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[s]));
        sdpa_case c = case_make(2, 2, 20, 70, 8, 8, &none, 5);
        c.options.precision = run < 4 ? ATTN_PRECISION_FP32 : ATTN_PRECISION_BF16;
        c.padding = test_alloc((size_t)(2 * 70));
        for (int64_t j = 0; j < 70; j++)
            c.padding[70 + j] = 1;
        c.options.key_padding_mask = c.padding;
        double *q = random_float_values(q_count(&c), 1, 2.0);
        double *k = random_float_values(k_count(&c), 2, 2.0);
        double *v = random_float_values(v_count(&c), 3, 1.0);
        double *g = random_float_values(o_count(&c), 4, 1.0);
        run_result r;
        if (run_api(&c, q, k, v, g, 0, &r)) {
            size_t half_rows = rows(&c) / 2;
            int zeros = 1, lse_inf = 1, weights_zero = 1, grads_zero = 1;
            for (size_t e = o_count(&c) / 2; e < o_count(&c); e++)
                zeros &= r.out[e] == 0.0f;
            for (size_t e = half_rows; e < rows(&c); e++)
                lse_inf &= r.lse[e] == -INFINITY;
            for (size_t e = half_rows * 70; e < rows(&c) * 70; e++)
                weights_zero &= r.weights[e] == 0.0f;
            for (size_t e = q_count(&c) / 2; e < q_count(&c); e++)
                grads_zero &= r.dq[e] == 0.0f;
            for (size_t e = k_count(&c) / 2; e < k_count(&c); e++)
                grads_zero &= r.dk[e] == 0.0f;
            for (size_t e = v_count(&c) / 2; e < v_count(&c); e++)
                grads_zero &= r.dv[e] == 0.0f;
            CHECK(zeros && lse_inf && weights_zero && grads_zero,
                  "%s: fully masked rows: out %d lse %d weights %d grads %d",
                  attn_isa_name(all_isas[s]), zeros, lse_inf, weights_zero, grads_zero);
            CHECK(all_finite(r.out, o_count(&c)), "%s: no NaN", attn_isa_name(all_isas[s]));
            CHECK(r.lse[0] > -INFINITY, "%s: the unmasked batch has a finite lse",
                  attn_isa_name(all_isas[s]));
        }
        run_result_free(&r);
        free(q), free(k), free(v), free(g);
        case_free(&c);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* The kernels' exponential: within 2 ulp of exp over the normal range, exp(-inf) = 0. */
static void test_fast_exp_accuracy(void)
{
    enum { N = 20001 };
    static float x[N], y[N], shift[N];
    for (int e = 0; e < N; e++)
        x[e] = -87.0f + 175.0f * (float)e / (float)(N - 1); /* [-87, 88] */
    for (int s = 1; s < ISA_COUNT; s++) {
        const sdpa_kernels *kern = attn_sdpa_kernels_for(all_isas[s]);
        if (!test_isa_wanted(all_isas[s]) || kern == NULL)
            continue;
        memcpy(y, x, sizeof y);
        kern->exp_columns(y, 1, N, N, shift);
        double worst = 0;
        for (int e = 0; e < N; e++) {
            float expected = (float)exp((double)x[e]);
            double ulp = (double)nextafterf(expected, INFINITY) - (double)expected;
            double err = fabs((double)y[e] - exp((double)x[e])) / ulp;
            worst = err > worst ? err : worst;
        }
        CHECK(worst <= 2.0, "%s exp: worst error %.2f ulp", attn_isa_name(all_isas[s]), worst);
        float special[4] = {-INFINITY, 0.0f, -200.0f, NAN};
        kern->exp_columns(special, 1, 4, 4, shift);
        CHECK(special[0] == 0.0f && special[1] == 1.0f && special[2] == 0.0f && isnan(special[3]),
              "%s exp(-inf, 0, -200, nan) = %g %g %g %g", attn_isa_name(all_isas[s]),
              (double)special[0], (double)special[1], (double)special[2], (double)special[3]);
    }
}

/* The kernels' transpose, with and without per-column scales, for strides that fit the
 * gathers' 32-bit offsets, negative ones, and ones too large for them. */
static void test_kernel_transpose(void)
{
    enum { ROWS = 19, COLS = 23, SRC_STRIDE = 29, DST_STRIDE = 31 };
    static float src[ROWS * SRC_STRIDE], dst[COLS * DST_STRIDE], scale[COLS];
    test_fill_uniform(src, ROWS * SRC_STRIDE, -1.0f, 1.0f, 3);
    test_fill_uniform(scale, COLS, 0.5f, 2.0f, 4);
    for (int s = 1; s < ISA_COUNT; s++) {
        const sdpa_kernels *kern = attn_sdpa_kernels_for(all_isas[s]);
        if (!test_isa_wanted(all_isas[s]) || kern == NULL)
            continue;
        int ok = 1;
        for (int scaled = 0; scaled <= 1; scaled++) {
            kern->transpose(src, SRC_STRIDE, ROWS, COLS, dst, DST_STRIDE, scaled ? scale : NULL,
                            0.25f);
            for (int r = 0; r < ROWS; r++)
                for (int c = 0; c < COLS; c++)
                    ok &= dst[c * DST_STRIDE + r] ==
                          src[r * SRC_STRIDE + c] * (scaled ? scale[c] : 0.25f);
        }
        /* Rows read backwards through a negative stride. */
        kern->transpose(src + (ROWS - 1) * SRC_STRIDE, -SRC_STRIDE, ROWS, COLS, dst, DST_STRIDE,
                        NULL, 1.0f);
        for (int r = 0; r < ROWS; r++)
            for (int c = 0; c < COLS; c++)
                ok &= dst[c * DST_STRIDE + r] == src[(ROWS - 1 - r) * SRC_STRIDE + c];
        /* One row with a stride beyond 32-bit gather offsets: only that row is read. */
        kern->transpose(src, (int64_t)1 << 40, 1, COLS, dst, DST_STRIDE, NULL, 2.0f);
        for (int c = 0; c < COLS; c++)
            ok &= dst[c * DST_STRIDE] == src[c] * 2.0f;
        CHECK(ok, "%s transpose", attn_isa_name(all_isas[s]));
    }
}

/* ---- bf16 operands --------------------------------------------------------------------- */

/* The largest |a - exact| over n values; -inf lse entries must match exactly (else inf). */
static double max_error(const float *a, const double *exact, size_t n)
{
    double worst = 0;
    for (size_t e = 0; e < n; e++) {
        if (exact[e] == -INFINITY) {
            worst = a[e] == -INFINITY ? worst : INFINITY;
            continue;
        }
        double err = fabs((double)a[e] - exact[e]);
        worst = err > worst || isnan(err) ? err : worst;
    }
    return worst;
}

static double max_error_double(const double *a, const double *exact, size_t n)
{
    double worst = 0;
    for (size_t e = 0; e < n; e++)
        if (exact[e] != -INFINITY) {
            double err = fabs(a[e] - exact[e]);
            worst = err > worst ? err : worst;
        }
    return worst;
}

/* The double reference (fp32: exact; bf16: the naive computation with the kernels'
 * rounding of the operands) of one case: out, lse, dq, dk, dv. */
typedef struct reference_run {
    double *out, *lse, *weights, *dq, *dk, *dv;
} reference_run;

static reference_run reference_run_make(sdpa_case *c, attn_precision precision, const double *q,
                                        const double *k, const double *v, const double *grad_out)
{
    reference_run r;
    r.out = test_alloc(o_count(c) * sizeof(double));
    r.lse = test_alloc(rows(c) * sizeof(double));
    r.weights = test_alloc(rows(c) * (size_t)c->len_k * sizeof(double) + sizeof(double));
    r.dq = calloc(q_count(c) + 1, sizeof(double));
    r.dk = calloc(k_count(c) + 1, sizeof(double));
    r.dv = calloc(v_count(c) + 1, sizeof(double));
    c->problem.precision = precision;
    CHECK_OK(attn_sdpa_reference_forward_f64(&c->problem, q, k, v, r.out, r.lse, r.weights));
    CHECK_OK(attn_sdpa_reference_backward_f64(&c->problem, q, k, v, grad_out, r.dq, r.dk, r.dv));
    c->problem.precision = ATTN_PRECISION_FP32;
    return r;
}

static void reference_run_free(reference_run *r)
{
    free(r->out), free(r->lse), free(r->weights), free(r->dq), free(r->dk), free(r->dv);
}

/* FlashAttention's rule on the current instruction set: the bf16 kernels' largest error
 * against float64 is at most twice that of the naive computation with the same rounding of
 * the operands, for the output, lse, weights and all three gradients. */
static void check_bf16_rule(int64_t batch, int64_t heads, int64_t len_q, int64_t len_k, int64_t dim,
                            int64_t dim_v, const mask_spec *spec, int interleaved, uint64_t seed)
{
    sdpa_case c = case_make(batch, heads, len_q, len_k, dim, dim_v, spec, seed);
    c.options.precision = ATTN_PRECISION_BF16;
    double *q = random_float_values(q_count(&c), seed + 1, 2.0);
    double *k = random_float_values(k_count(&c), seed + 2, 2.0);
    double *v = random_float_values(v_count(&c), seed + 3, 1.0);
    double *grad_out = random_float_values(o_count(&c), seed + 4, 1.0);
    reference_run exact = reference_run_make(&c, ATTN_PRECISION_FP32, q, k, v, grad_out);
    reference_run naive = reference_run_make(&c, ATTN_PRECISION_BF16, q, k, v, grad_out);
    run_result r;
    if (run_api(&c, q, k, v, grad_out, interleaved, &r)) {
        const char *names[] = {"out", "lse", "weights", "dq", "dk", "dv"};
        const float *kernel[] = {r.out, r.lse, r.weights, r.dq, r.dk, r.dv};
        const double *exact_values[] = {exact.out, exact.lse, exact.weights,
                                        exact.dq,  exact.dk,  exact.dv};
        const double *naive_values[] = {naive.out, naive.lse, naive.weights,
                                        naive.dq,  naive.dk,  naive.dv};
        const size_t counts[] = {o_count(&c), rows(&c),    rows(&c) * (size_t)len_k,
                                 q_count(&c), k_count(&c), v_count(&c)};
        for (int t = 0; t < 6; t++) {
            double kernel_error = max_error(kernel[t], exact_values[t], counts[t]);
            double naive_error = max_error_double(naive_values[t], exact_values[t], counts[t]);
            /* The floor covers results the rounding leaves exact (fully masked rows). */
            CHECK(kernel_error <= 2 * naive_error + 1e-6,
                  "%s bf16 %s Lq=%lld Lk=%lld d=%lld dv=%lld%s: %s error %.3g, naive bf16 %.3g",
                  attn_isa_name(attn_get_isa()), spec->name, (long long)len_q, (long long)len_k,
                  (long long)dim, (long long)dim_v, interleaved ? " strided" : "", names[t],
                  kernel_error, naive_error);
        }
        CHECK(all_finite(r.out, o_count(&c)) && all_finite(r.dq, q_count(&c)) &&
                  all_finite(r.dk, k_count(&c)) && all_finite(r.dv, v_count(&c)),
              "%s bf16 %s: no NaN or inf", attn_isa_name(attn_get_isa()), spec->name);
    }
    run_result_free(&r);
    reference_run_free(&exact);
    reference_run_free(&naive);
    free(q), free(k), free(v), free(grad_out);
    case_free(&c);
}

/* Every instruction set: the reference, the emulated rounding (portable, AVX2, and AVX-512
 * on CPUs without AVX512_BF16) and vdpbf16ps where the CPU has it. */
static void test_bf16_meets_flash_attention_rule(void)
{
    CHECK_OK(attn_set_num_threads(2));
    for (int s = 0; s < ISA_COUNT; s++) {
        if (!test_isa_wanted(all_isas[s]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[s]));
        for (int m = 0; m < MASK_KINDS; m++) {
            /* Partial tiles, odd lengths and dims (padded pairs), cross attention both ways,
             * dv != d, key groups (3 heads and 1 head on 2 threads), strided heads. */
            check_bf16_rule(1, 3, 70, 70, 16, 16, &mask_kinds[m], 1, 900 + (uint64_t)m);
            check_bf16_rule(1, 2, 131, 67, 24, 40, &mask_kinds[m], 0, 1000 + (uint64_t)m);
            check_bf16_rule(1, 1, 19, 151, 33, 9, &mask_kinds[m], 1, 1100 + (uint64_t)m);
            check_bf16_rule(2, 2, 129, 129, 64, 64, &mask_kinds[m], m % 2, 1200 + (uint64_t)m);
        }
        check_bf16_rule(1, 2, 1, 1, 1, 1, &mask_kinds[0], 0, 1300);
        check_bf16_rule(1, 2, 3, 5, 7, 3, &mask_kinds[2], 1, 1301);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    CHECK_OK(attn_set_num_threads(0));
}

#ifdef ATTN_SDPA_HAVE_X86 /* only x86 has bf16 kernels beside the plain C emulation */
/* One bf16 kernel table against the portable emulation on the same operands: packing
 * rounds to the same bits (normal numbers), products and softmax agree to float rounding. */
static void compare_bf16_kernels(const char *name, const sdpa_bf16_kernels *fast)
{
    enum { ROWS = 37, COLS = 45, STRIDE = 53, PAIRS = (COLS + 1) / 2, LD = 70 };
    static float src[ROWS * STRIDE], b_src[COLS * LD], c_fast[ROWS * LD], c_slow[ROWS * LD];
    static float scale[LD], stats_fast[3][LD], stats_slow[3][LD];
    static sdpa_bf16_pair fast_pairs[3][ROWS * LD], slow_pairs[3][ROWS * LD];
    const sdpa_bf16_kernels *slow = &attn_sdpa_bf16_kernels_emulated;
    test_fill_uniform(src, ROWS * STRIDE, -3.0f, 3.0f, 17);
    test_fill_uniform(scale, LD, 0.0f, 1.0f, 18);
    test_fill_uniform(b_src, COLS * LD, -3.0f, 3.0f, 20);
    /* Rows of pairs, pairs across contiguous rows, rows into columns, and the generic case. */
    const int64_t layouts[4][4] = {
        {STRIDE, 1, PAIRS, 1}, {1, STRIDE, 1, COLS}, {STRIDE, 1, 1, ROWS}, {1, STRIDE, PAIRS, 1}};
    for (int l = 0; l < 4; l++) {
        const int64_t *x = layouts[l];
        int64_t rows = x[0] == 1 ? COLS : ROWS, cols = x[0] == 1 ? ROWS : COLS;
        memset(fast_pairs, 0, sizeof fast_pairs);
        memset(slow_pairs, 0, sizeof slow_pairs);
        fast->pack(src, x[0], x[1], rows, cols, fast_pairs[0], x[2], x[3]);
        slow->pack(src, x[0], x[1], rows, cols, slow_pairs[0], x[2], x[3]);
        CHECK(memcmp(fast_pairs, slow_pairs, sizeof fast_pairs) == 0,
              "%s pack layout %d: same bits", name, l);
    }
    /* A [ROWS x PAIRS] rows of pairs times B [PAIRS x n] for n over the panel widths. */
    slow->pack(src, STRIDE, 1, ROWS, COLS, slow_pairs[0], PAIRS, 1);
    slow->pack(b_src, 1, LD, LD, COLS, slow_pairs[1], 1, LD);
    static const int64_t widths[] = {1, 16, 23, 48, 64, 46};
    const sdpa_gemm_mode modes[] = {SDPA_GEMM_STORE, SDPA_GEMM_ADD, SDPA_GEMM_SCALE_ROWS};
    for (int w = 0; w < 6; w++)
        for (int mode = 0; mode < 3; mode++) {
            test_fill_uniform(c_fast, ROWS * LD, -1.0f, 1.0f, 19);
            memcpy(c_slow, c_fast, sizeof c_fast);
            fast->gemm(ROWS, widths[w], PAIRS, slow_pairs[0], PAIRS, 1, slow_pairs[1], LD, c_fast,
                       LD, 0.5f, modes[mode], scale);
            slow->gemm(ROWS, widths[w], PAIRS, slow_pairs[0], PAIRS, 1, slow_pairs[1], LD, c_slow,
                       LD, 0.5f, modes[mode], scale);
            CHECK(test_max_abs_diff(c_fast, c_slow, ROWS * LD) <= 1e-4,
                  "%s gemm n=%lld mode %d: %.3g from the emulation", name, (long long)widths[w],
                  mode, test_max_abs_diff(c_fast, c_slow, ROWS * LD));
        }
    /* Base-2 softmax over scores [ROWS x 64] (an odd row count pads a pair), with one column
     * fully masked and running statistics from an earlier tile. */
    for (int64_t e = 0; e < ROWS * LD; e++)
        c_fast[e] = e % LD == 5 ? -INFINITY : src[e % (ROWS * STRIDE)];
    for (int64_t c = 0; c < LD; c++) {
        stats_fast[0][c] = stats_slow[0][c] = c == 5 ? -INFINITY : scale[c];
        stats_fast[1][c] = stats_slow[1][c] = c == 5 ? 0.0f : 1.0f + scale[c];
    }
    memset(fast_pairs, 0, sizeof fast_pairs);
    memset(slow_pairs, 0, sizeof slow_pairs);
    fast->softmax_columns(c_fast, ROWS, 64, LD, stats_fast[0], stats_fast[1], stats_fast[2],
                          fast_pairs[0]);
    slow->softmax_columns(c_fast, ROWS, 64, LD, stats_slow[0], stats_slow[1], stats_slow[2],
                          slow_pairs[0]);
    double worst = 0;
    for (int t = 0; t < 3; t++)
        for (int64_t c = 0; c < 64; c++) {
            double diff = fabs((double)stats_fast[t][c] - (double)stats_slow[t][c]);
            worst = stats_fast[t][c] == stats_slow[t][c] ? worst : diff > worst ? diff : worst;
        }
    int close_pairs = 1;
    for (int64_t e = 0; e < (ROWS + 1) / 2 * LD; e++) {
        if (e % LD >= 64)
            continue;
        for (int half = 0; half < 2; half++) {
            float a = attn_bf16_to_float((uint16_t)(fast_pairs[0][e] >> (16 * half) & 0xffffu));
            float b = attn_bf16_to_float((uint16_t)(slow_pairs[0][e] >> (16 * half) & 0xffffu));
            close_pairs &= fabsf(a - b) <= 1e-2f * fabsf(b) + 1e-30f;
        }
    }
    CHECK(worst <= 1e-5 && close_pairs, "%s softmax: statistics %.3g apart, pairs close %d", name,
          worst, close_pairs);
    /* Softmax gradient: rows [ROWS x 64] of base-2 scores and dP, one row fully masked. */
    float lse[ROWS], delta[ROWS];
    for (int64_t r = 0; r < ROWS; r++) {
        lse[r] = r == 3 ? -INFINITY : 4.0f + scale[r];
        delta[r] = scale[r + 1] - 0.5f;
    }
    memset(fast_pairs, 0, sizeof fast_pairs);
    memset(slow_pairs, 0, sizeof slow_pairs);
    fast->softmax_grad_rows(c_fast, b_src, ROWS, 64, LD, lse, delta, 0.3f, fast_pairs[0],
                            fast_pairs[1], fast_pairs[2], 32);
    slow->softmax_grad_rows(c_fast, b_src, ROWS, 64, LD, lse, delta, 0.3f, slow_pairs[0],
                            slow_pairs[1], slow_pairs[2], 32);
    close_pairs = 1;
    for (int t = 0; t < 3; t++)
        for (int64_t e = 0; e < ROWS * LD; e++)
            for (int half = 0; half < 2; half++) {
                float a = attn_bf16_to_float((uint16_t)(fast_pairs[t][e] >> (16 * half) & 0xffffu));
                float b = attn_bf16_to_float((uint16_t)(slow_pairs[t][e] >> (16 * half) & 0xffffu));
                close_pairs &= fabsf(a - b) <= 1e-2f * fabsf(b) + 1e-30f;
            }
    CHECK(close_pairs, "%s softmax gradient: pairs within a bf16 step", name);
}
#endif

static void test_bf16_kernels_match_the_emulation(void)
{
#ifdef ATTN_SDPA_HAVE_X86
    if (attn_isa_supported(ATTN_ISA_AVX2))
        compare_bf16_kernels("emulated avx2", &attn_sdpa_bf16_kernels_emulated_avx2);
    if (attn_isa_supported(ATTN_ISA_AVX512))
        compare_bf16_kernels("emulated avx512", &attn_sdpa_bf16_kernels_emulated_avx512);
    int native = 0;
    if (attn_isa_supported(ATTN_ISA_AVX512)) {
        CHECK_OK(attn_set_isa(ATTN_ISA_AVX512));
        native = attn_precision_native(ATTN_PRECISION_BF16);
    }
    if (native)
        compare_bf16_kernels("avx512bf16", &attn_sdpa_bf16_kernels_avx512bf16);
    else
        printf("  (no AVX512_BF16 on this CPU: the emulated path runs everywhere)\n");
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
#else
    printf("  (bf16 attention runs the plain C emulation on this target: nothing to compare)\n");
#endif
}

/* ---- bad input ------------------------------------------------------------------------ */

static void test_bad_input_is_rejected(void)
{
    float data[2 * 2 * 3 * 4] = {0};
    float lse[2 * 2 * 3];
    const int64_t shape[4] = {2, 2, 3, 4};
    attn_tensor q = attn_tensor_view(data, 4, shape), k = q, v = q, out = q, g = q, dq = q, dk = q,
                dv = q;
    attn_sdpa_options o = attn_sdpa_default_options();
    CHECK_OK(attn_sdpa_forward(&q, &k, &v, &o, &out, lse, NULL));
    CHECK_OK(attn_sdpa_forward(&q, &k, &v, NULL, &out, NULL, NULL));
    CHECK_FAILS(attn_sdpa_forward(NULL, &k, &v, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_sdpa_forward") && strstr(attn_last_error(), "q"),
          "message names the function and argument: %s", attn_last_error());
    o.precision = ATTN_PRECISION_INT8; /* no int8 attention */
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "precision") && strstr(attn_last_error(), "int8"),
          "message names the precision: %s", attn_last_error());
    o.precision = ATTN_PRECISION_BF16;
    CHECK_OK(attn_sdpa_forward(&q, &k, &v, &o, &out, lse, NULL));
    o.precision = ATTN_PRECISION_FP32;
    CHECK_FAILS(attn_sdpa_forward(NULL, &k, &v, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_sdpa_forward") && strstr(attn_last_error(), "q"),
          "message names the function and argument: %s", attn_last_error());
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &o, NULL, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);

    attn_tensor bad = q;
    bad.ndim = 3;
    CHECK_FAILS(attn_sdpa_forward(&q, &bad, &v, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.stride[3] = 2;
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &bad, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "stride") != NULL, "message: %s", attn_last_error());
    bad = q;
    bad.shape[3] = 3; /* d of k differs from q */
    CHECK_FAILS(attn_sdpa_forward(&q, &bad, &v, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.shape[0] = 1; /* batch of v differs */
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &bad, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.shape[2] = 2; /* Lk of v differs from k */
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &bad, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.shape[1] = 1; /* out has the wrong number of heads */
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &o, &bad, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.shape[2] = -1;
    CHECK_FAILS(attn_sdpa_forward(&bad, &k, &v, &o, &out, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.data = NULL;
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &o, &bad, lse, NULL), ATTN_ERR_INVALID_ARGUMENT);

    attn_sdpa_options bad_options = o;
    bad_options.attn_mask_per_head = 1; /* per-head flag without a mask */
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &bad_options, &out, lse, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_mask") != NULL, "message: %s", attn_last_error());
    float mask[3 * 3] = {0};
    bad_options = o;
    bad_options.attn_mask = mask;
    bad_options.attn_mask_per_head = 2;
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &bad_options, &out, lse, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    bad_options.attn_mask_per_head = 0;
    CHECK_OK(attn_sdpa_forward(&q, &k, &v, &bad_options, &out, lse, NULL));
    bad_options = o;
    bad_options.causal = 2;
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &bad_options, &out, lse, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    bad_options = o;
    bad_options.scale = NAN;
    CHECK_FAILS(attn_sdpa_forward(&q, &k, &v, &bad_options, &out, lse, NULL),
                ATTN_ERR_INVALID_ARGUMENT);

    CHECK_OK(attn_sdpa_backward(&q, &k, &v, &o, &out, lse, &g, &dq, &dk, &dv));
    CHECK_FAILS(attn_sdpa_backward(&q, &k, &v, &o, &out, NULL, &g, &dq, &dk, &dv),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "attn_sdpa_backward") && strstr(attn_last_error(), "lse"),
          "message: %s", attn_last_error());
    CHECK_FAILS(attn_sdpa_backward(&q, &k, &v, &o, NULL, lse, &g, &dq, &dk, &dv),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_sdpa_backward(&q, &k, &v, &o, &out, lse, NULL, &dq, &dk, &dv),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_sdpa_backward(&q, &k, &v, &o, &out, lse, &g, &dq, NULL, &dv),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.shape[3] = 3;
    CHECK_FAILS(attn_sdpa_backward(&q, &k, &v, &o, &out, lse, &g, &bad, &dk, &dv),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "dq") != NULL, "message: %s", attn_last_error());
    bad = q;
    bad.shape[2] = 2;
    CHECK_FAILS(attn_sdpa_backward(&q, &k, &v, &o, &out, lse, &bad, &dq, &dk, &dv),
                ATTN_ERR_INVALID_ARGUMENT);
    bad = q;
    bad.stride[3] = 0;
    CHECK_FAILS(attn_sdpa_backward(&q, &k, &v, &o, &out, lse, &g, &dq, &dk, &bad),
                ATTN_ERR_INVALID_ARGUMENT);
}

/* Zero-sized dimensions that mean "nothing to do" succeed; no keys at all means every row is
 * fully masked. */
static void test_empty_sizes(void)
{
    float data[2 * 2 * 3 * 4];
    float lse[2 * 2 * 3];
    const int64_t shape[4] = {2, 2, 3, 4}, no_keys[4] = {2, 2, 0, 4};
    const int64_t no_queries[4] = {2, 2, 0, 4};
    attn_tensor q = attn_tensor_view(data, 4, shape), out = q;
    attn_tensor k = attn_tensor_view(data, 4, no_keys), v = k;
    attn_tensor q0 = attn_tensor_view(NULL, 4, no_queries), out0 = q0;
    for (int s = 0; s < ISA_COUNT; s++) {
        if (!test_isa_wanted(all_isas[s]))
            continue;
        CHECK_OK(attn_set_isa(all_isas[s]));
        for (int e = 0; e < 48; e++)
            data[e] = 1.0f;
        CHECK_OK(attn_sdpa_forward(&q, &k, &v, NULL, &out, lse, NULL));
        int zeros = 1;
        for (int e = 0; e < 48; e++)
            zeros &= data[e] == 0.0f;
        CHECK(zeros && lse[0] == -INFINITY, "%s: no keys gives zeros and lse = -inf",
              attn_isa_name(all_isas[s]));
        CHECK_OK(attn_sdpa_forward(&q0, &q, &q, NULL, &out0, NULL, NULL));
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

int main(void)
{
    RUN_TEST(test_reference_matches_dense_formulation);
    RUN_TEST(test_reference_gradients_match_finite_differences);
    RUN_TEST(test_fast_exp_accuracy);
    RUN_TEST(test_kernel_transpose);
    RUN_TEST(test_every_isa_matches_reference_over_sizes);
    RUN_TEST(test_every_isa_matches_reference_for_every_mask);
    RUN_TEST(test_results_are_deterministic);
    RUN_TEST(test_fully_masked_rows_give_zeros);
    RUN_TEST(test_bf16_meets_flash_attention_rule);
    RUN_TEST(test_bf16_kernels_match_the_emulation);
    RUN_TEST(test_bad_input_is_rejected);
    RUN_TEST(test_empty_sizes);
    return test_summary();
}
