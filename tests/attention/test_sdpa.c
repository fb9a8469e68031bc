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

static sdpa_case case_make(int64_t batch, int64_t heads, int64_t len_q, int64_t len_k,
                           int64_t dim, int64_t dim_v, const mask_spec *spec, uint64_t seed)
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

static size_t q_count(const sdpa_case *c) { return (size_t)(c->batch * c->heads * c->len_q * c->dim); }
static size_t k_count(const sdpa_case *c) { return (size_t)(c->batch * c->heads * c->len_k * c->dim); }
static size_t v_count(const sdpa_case *c) { return (size_t)(c->batch * c->heads * c->len_k * c->dim_v); }
static size_t o_count(const sdpa_case *c) { return (size_t)(c->batch * c->heads * c->len_q * c->dim_v); }
static size_t rows(const sdpa_case *c) { return (size_t)(c->batch * c->heads * c->len_q); }

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
static void dense_forward(const sdpa_case *c, const double *q, const double *k,
                          const double *v, double *out, double *lse, double *weights)
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
        CHECK(test_max_abs_diff_double(weights, dense_weights, w_count) < 1e-13,
              "%s: weights", c.spec.name);
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
static double reference_loss(const sdpa_case *c, const double *q, const double *k,
                             const double *v, const double *grad_out, double *out_scratch)
{
    attn_sdpa_reference_forward_f64(&c->problem, q, k, v, out_scratch, NULL, NULL);
    double loss = 0;
    for (size_t e = 0; e < o_count(c); e++)
        loss += out_scratch[e] * grad_out[e];
    return loss;
}

/* Central differences of the loss in each element of x, against the analytic gradient. */
static int check_gradient(const sdpa_case *c, const char *what, double *x, size_t n,
                          const double *analytic, const double *q, const double *k,
                          const double *v, const double *grad_out, double *out_scratch)
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
    CHECK(check_gradient(&c, "q", q, q_count(&c), dq, q, k, v, grad_out, out), "%s: dq (Lq=%lld Lk=%lld)",
          spec->name, (long long)len_q, (long long)len_k);
    CHECK(check_gradient(&c, "k", k, k_count(&c), dk, q, k, v, grad_out, out), "%s: dk (Lq=%lld Lk=%lld)",
          spec->name, (long long)len_q, (long long)len_k);
    CHECK(check_gradient(&c, "v", v, v_count(&c), dv, q, k, v, grad_out, out), "%s: dv (Lq=%lld Lk=%lld)",
          spec->name, (long long)len_q, (long long)len_k);
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

int main(void)
{
    RUN_TEST(test_reference_matches_dense_formulation);
    RUN_TEST(test_reference_gradients_match_finite_differences);
    return test_summary();
}
