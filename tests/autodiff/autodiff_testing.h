/* Helpers shared by the autodiff, nn and model tests: a gradient check of anything built on a
 * graph against central finite differences of its forward. */
#ifndef ATTN_TEST_AUTODIFF_TESTING_H
#define ATTN_TEST_AUTODIFF_TESTING_H

#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- finite-difference gradient checks -------------------------------------------------- */

/* Builds an output on the graph from the leaves (the same count, shapes and order every
 * call) and, if the problem has a store, its parameters. Returns the output, or NULL after a
 * failed operation. */
typedef attn_var *(*ad_build_fn)(attn_graph *graph, attn_var **leaves, void *ctx);

typedef struct ad_leaf_spec {
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    float *data; /* the point where gradients are checked; perturbed and restored */
} ad_leaf_spec;

enum { AD_MAX_LEAVES = 16 };

/* A function of leaves and (optionally) a store's parameters whose gradients are checked. */
typedef struct ad_problem {
    const char *what;
    int n_leaves;
    ad_leaf_spec *leaves;
    attn_params *store; /* NULL: leaves only */
    ad_build_fn build;
    void *ctx;
    int training; /* the graph's mode (dropout on or off) */
    /* At most this many elements of each array are checked, spread evenly; 0 = all. */
    int64_t max_checks;
} ad_problem;

static inline int64_t ad_numel(const ad_leaf_spec *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

/* The output with the tape off. */
static inline attn_var *ad_forward(attn_graph *graph, const ad_problem *p)
{
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_var *leaves[AD_MAX_LEAVES];
    for (int i = 0; i < p->n_leaves; i++)
        if (attn_graph_input(graph, p->leaves[i].ndim, p->leaves[i].shape, p->leaves[i].data, 0,
                             &leaves[i]) != ATTN_OK)
            return NULL;
    return p->build(graph, leaves, p->ctx);
}

/* sum(weights * output) in double, with the tape off. */
static inline double ad_weighted_output(attn_graph *graph, const ad_problem *p,
                                        const float *weights)
{
    attn_var *out = ad_forward(graph, p);
    if (out == NULL)
        return NAN;
    double sum = 0.0;
    int64_t n = attn_tensor_numel(&out->value);
    for (int64_t i = 0; i < n; i++)
        sum += (double)weights[i] * (double)out->value.data[i];
    return sum;
}

/* The arrays a problem differentiates: its leaves, then its store's parameters. */
typedef struct ad_array {
    char name[160];
    float *data;
    int64_t numel;
    float *grad; /* the tape's gradient (owned) */
} ad_array;

/* Runs the tape for sum(weights * output), weights ~ U(-1, 1) from seed (allocated into
 * *weights, caller frees), and collects the gradient of every leaf and parameter into
 * arrays (at most AD_MAX_LEAVES + parameter count entries). Returns the number of arrays, or
 * -1 on failure. */
static inline int ad_tape_gradients(attn_graph *graph, const ad_problem *p, uint64_t seed,
                                    float **weights, ad_array *arrays)
{
    if (p->store != NULL)
        attn_params_zero_grad(p->store);
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 1);
    attn_var *leaves[AD_MAX_LEAVES];
    for (int i = 0; i < p->n_leaves; i++)
        if (attn_graph_input(graph, p->leaves[i].ndim, p->leaves[i].shape, p->leaves[i].data, 1,
                             &leaves[i]) != ATTN_OK)
            return -1;
    attn_var *out = p->build(graph, leaves, p->ctx);
    if (out == NULL)
        return -1;
    int64_t n = attn_tensor_numel(&out->value);
    *weights = test_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    test_fill_uniform(*weights, (size_t)n, -1.0f, 1.0f, seed);
    if (attn_graph_backward_from(graph, out, *weights) != ATTN_OK)
        return -1;
    int count = 0;
    for (int i = 0; i < p->n_leaves; i++, count++) {
        ad_array *a = &arrays[count];
        snprintf(a->name, sizeof a->name, "leaf %d", i);
        a->data = p->leaves[i].data;
        a->numel = ad_numel(&p->leaves[i]);
        a->grad = test_alloc((size_t)(a->numel > 0 ? a->numel : 1) * sizeof(float));
        if (leaves[i]->grad != NULL)
            memcpy(a->grad, leaves[i]->grad, (size_t)a->numel * sizeof(float));
        else
            memset(a->grad, 0, (size_t)a->numel * sizeof(float));
    }
    size_t n_params = attn_params_count(p->store);
    for (size_t i = 0; i < n_params; i++, count++) {
        attn_param_info info;
        attn_params_info(p->store, (attn_param_id)i, &info);
        ad_array *a = &arrays[count];
        snprintf(a->name, sizeof a->name, "%s", info.name);
        a->data = attn_params_data(p->store, (attn_param_id)i, ATTN_PARAM_VALUES);
        a->numel = info.numel;
        a->grad = test_alloc((size_t)info.numel * sizeof(float));
        memcpy(a->grad, attn_params_data(p->store, (attn_param_id)i, ATTN_PARAM_GRADS),
               (size_t)info.numel * sizeof(float));
    }
    return count;
}

/* Checks the tape's gradient of every leaf and parameter element (or an even spread of
 * max_checks of each) against a central difference with step h of the float forward:
 * |tape - fd| <= atol + rtol * |fd|. Prints the worst element of a failing array. */
static inline int ad_check_problem(const ad_problem *p, double h, double atol, double rtol)
{
    attn_graph *graph = NULL;
    if (attn_graph_create(p->store, &graph) != ATTN_OK)
        return 0;
    /* Training mode is fine: a dropout mask depends only on (seed, step, k) and every
     * evaluation restarts k with a reset. */
    attn_graph_set_training(graph, p->training);
    size_t n_arrays = (size_t)p->n_leaves + attn_params_count(p->store);
    ad_array *arrays = test_alloc(n_arrays * sizeof *arrays + 1);
    float *weights = NULL;
    int count = ad_tape_gradients(graph, p, 99, &weights, arrays);
    int ok = count >= 0;
    if (!ok)
        printf("  %s: tape failed: %s\n", p->what, attn_last_error());
    for (int i = 0; ok && i < count; i++) {
        ad_array *a = &arrays[i];
        int64_t step = p->max_checks > 0 && a->numel > p->max_checks ? a->numel / p->max_checks : 1;
        double worst = -INFINITY, worst_tape = 0.0, worst_fd = 0.0;
        int64_t worst_at = -1;
        for (int64_t j = (int64_t)i % step; j < a->numel; j += step) {
            float saved = a->data[j];
            /* Divide by the step the float inputs actually took. */
            float up = (float)(saved + h), down = (float)(saved - h);
            a->data[j] = up;
            double plus = ad_weighted_output(graph, p, weights);
            a->data[j] = down;
            double minus = ad_weighted_output(graph, p, weights);
            a->data[j] = saved;
            double fd = (plus - minus) / ((double)up - (double)down);
            double excess = fabs((double)a->grad[j] - fd) - (atol + rtol * fabs(fd));
            if (isnan(excess))
                excess = INFINITY;
            if (excess > worst) {
                worst = excess;
                worst_at = j;
                worst_tape = a->grad[j];
                worst_fd = fd;
            }
        }
        if (!(worst <= 0.0)) {
            printf("  %s: %s element %lld: tape %.9g, finite difference %.9g\n", p->what, a->name,
                   (long long)worst_at, worst_tape, worst_fd);
            ok = 0;
        }
    }
    for (int i = 0; i < count; i++)
        free(arrays[i].grad);
    free(arrays);
    free(weights);
    attn_graph_destroy(graph);
    return ok;
}

/* The leaves-only form, every element. */
static inline int ad_check_gradients(const char *what, int n_leaves, ad_leaf_spec *specs,
                                     ad_build_fn build, void *ctx, int training, double h,
                                     double atol, double rtol)
{
    ad_problem p = {what, n_leaves, specs, NULL, build, ctx, training, 0};
    return ad_check_problem(&p, h, atol, rtol);
}

/* ---- operation cases (tests/autodiff/test_ops*.c) ---------------------------------------- */

/* In an ad_build_fn: return NULL when the operation fails. */
#define AD_TRY_OP(expr)                                                                            \
    do {                                                                                           \
        if ((expr) != ATTN_OK)                                                                     \
            return NULL;                                                                           \
    } while (0)

/* One operation test: build(graph, leaves, ctx) over leaves of these shapes, on a graph in
 * training mode (dropout on) or not. */
typedef struct ad_op_case {
    const char *name;
    ad_build_fn build;
    void *ctx;
    int n_leaves;
    ad_leaf_spec leaves[AD_MAX_LEAVES];
    int training;
} ad_op_case;

static inline ad_leaf_spec ad_spec(int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    ad_leaf_spec s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    s.shape[0] = d0;
    s.shape[1] = d1;
    s.shape[2] = d2;
    return s;
}

/* Fills every leaf with U(-1, 1) (leaf i from seed + i), keeping |x| >= 0.1 so that a kink
 * at zero (ReLU's) is never inside a finite-difference step. */
static inline void ad_fill_leaves(ad_op_case *c, uint64_t seed)
{
    for (int i = 0; i < c->n_leaves; i++) {
        int64_t n = ad_numel(&c->leaves[i]);
        float *x = test_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
        test_fill_uniform(x, (size_t)n, -1.0f, 1.0f, seed + (uint64_t)i);
        for (int64_t j = 0; j < n; j++)
            if (fabsf(x[j]) < 0.1f)
                x[j] += x[j] < 0 ? -0.1f : 0.1f;
        c->leaves[i].data = x;
    }
}

static inline void ad_free_leaves(ad_op_case *c)
{
    for (int i = 0; i < c->n_leaves; i++)
        free(c->leaves[i].data);
}

static inline ad_problem ad_case_problem(ad_op_case *c)
{
    ad_problem p = {c->name, c->n_leaves, c->leaves, NULL, c->build, c->ctx, c->training, 0};
    return p;
}

/* Output, then the gradient of every leaf, at one instruction set, as one flat array (caller
 * frees); *count gets its length. */
static inline float *ad_run_case(ad_op_case *c, attn_isa isa, int64_t *count)
{
    CHECK_OK(attn_set_isa(isa));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(NULL, &g));
    attn_graph_set_training(g, c->training);
    ad_problem problem = ad_case_problem(c);
    attn_var *out = ad_forward(g, &problem);
    CHECK(out != NULL, "%s runs at %s", c->name, attn_isa_name(isa));
    int64_t n_out = out ? attn_tensor_numel(&out->value) : 0, total = n_out;
    for (int i = 0; i < c->n_leaves; i++)
        total += ad_numel(&c->leaves[i]);
    float *flat = test_alloc((size_t)total * sizeof(float) + 1);
    memset(flat, 0, (size_t)total * sizeof(float));
    if (out != NULL)
        memcpy(flat, out->value.data, (size_t)n_out * sizeof(float));
    float *weights = NULL;
    ad_array arrays[AD_MAX_LEAVES];
    int n_arrays = ad_tape_gradients(g, &problem, 5, &weights, arrays);
    CHECK(n_arrays == c->n_leaves, "%s backward runs at %s", c->name, attn_isa_name(isa));
    int64_t at = n_out;
    for (int i = 0; i < n_arrays; i++) {
        memcpy(flat + at, arrays[i].grad, (size_t)arrays[i].numel * sizeof(float));
        at += arrays[i].numel;
        free(arrays[i].grad);
    }
    free(weights);
    attn_graph_destroy(g);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
    *count = total;
    return flat;
}

/* Every case's tape gradients against finite differences of its forward at
 * ATTN_ISA_REFERENCE (step 1e-2, atol 2e-3, rtol 5e-3: see test_ops.c); case i's leaves are filled
 * from seed + 17 i. */
static inline void ad_check_case_gradients(ad_op_case *cases, int n, uint64_t seed)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    for (int i = 0; i < n; i++) {
        ad_fill_leaves(&cases[i], seed + 17 * (uint64_t)i);
        ad_problem p = ad_case_problem(&cases[i]);
        CHECK(ad_check_problem(&p, 1e-2, 2e-3, 5e-3), "%s: tape gradients match finite differences",
              cases[i].name);
        ad_free_leaves(&cases[i]);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* Every case at every supported instruction set against the reference (atol, rtol 1e-4),
 * and two runs at each giving identical bits, on 2 threads; leaves from seed + 13 i. */
static inline void ad_check_cases_across_isas(ad_op_case *cases, int n, uint64_t seed, double atol)
{
    CHECK_OK(attn_set_num_threads(2));
    const attn_isa isas[] = {ATTN_ISA_PORTABLE, ATTN_ISA_AVX2, ATTN_ISA_AVX512,
                             ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
    for (int i = 0; i < n; i++) {
        ad_fill_leaves(&cases[i], seed + 13 * (uint64_t)i);
        int64_t count;
        float *reference = ad_run_case(&cases[i], ATTN_ISA_REFERENCE, &count);
        double *as_double = test_alloc((size_t)count * sizeof(double) + 1);
        for (int64_t j = 0; j < count; j++)
            as_double[j] = reference[j];
        for (int k = 0; k < (int)(sizeof isas / sizeof isas[0]); k++) {
            if (!attn_isa_supported(isas[k]))
                continue;
            int64_t again;
            float *fast = ad_run_case(&cases[i], isas[k], &again);
            float *twice = ad_run_case(&cases[i], isas[k], &again);
            char what[160];
            snprintf(what, sizeof what, "%s at %s", cases[i].name, attn_isa_name(isas[k]));
            CHECK_ARRAYS_CLOSE(what, fast, as_double, (size_t)count, atol, 1e-4);
            CHECK(memcmp(fast, twice, (size_t)count * sizeof(float)) == 0,
                  "%s: two runs give identical bits", what);
            free(fast);
            free(twice);
        }
        free(as_double);
        free(reference);
        ad_free_leaves(&cases[i]);
    }
    CHECK_OK(attn_set_num_threads(0));
}

/* A zero-filled leaf of shape [d0] (ndim 1), [d0, d1] or [d0, d1, d2] for argument checks. */
static inline attn_var *ad_var_of(attn_graph *g, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    const int64_t shape[3] = {d0, d1, d2};
    attn_var *v = NULL;
    CHECK_OK(attn_graph_input(g, ndim, shape, NULL, 1, &v));
    return v;
}

#endif /* ATTN_TEST_AUTODIFF_TESTING_H */
