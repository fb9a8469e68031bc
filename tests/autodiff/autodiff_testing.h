/* Helpers shared by the autodiff, nn and model tests: a scratch folder, and a gradient check
 * of anything built on a graph against central finite differences of its forward.
 * Include it first: it asks for POSIX (mkdtemp, nftw). */
#ifndef ATTN_TEST_AUTODIFF_TESTING_H
#define ATTN_TEST_AUTODIFF_TESTING_H

#define _XOPEN_SOURCE 700

#include "harness.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- scratch files ---------------------------------------------------------------------- */

static char ad_scratch_root[512];

static inline int ad_remove_entry(const char *path, const struct stat *info, int type,
                                  struct FTW *ftw)
{
    (void)info, (void)type, (void)ftw;
    return remove(path);
}

static inline void ad_scratch_remove_all(void)
{
    if (ad_scratch_root[0] != '\0')
        nftw(ad_scratch_root, ad_remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* "<fresh folder under $TMPDIR or /tmp>/<name>", in one of two static buffers. The folder is
 * removed when the program exits. */
static inline const char *ad_scratch_path(const char *name)
{
    if (ad_scratch_root[0] == '\0') {
        const char *base = getenv("TMPDIR");
        snprintf(ad_scratch_root, sizeof ad_scratch_root, "%s/attn_autodiff_XXXXXX",
                 base != NULL && base[0] != '\0' ? base : "/tmp");
        if (mkdtemp(ad_scratch_root) == NULL) {
            perror("mkdtemp");
            exit(2);
        }
        atexit(ad_scratch_remove_all);
    }
    static char path[2][640];
    static int which;
    which ^= 1;
    snprintf(path[which], sizeof path[which], "%s/%s", ad_scratch_root, name);
    return path[which];
}

/* ---- finite-difference gradient checks -------------------------------------------------- */

/* Builds an output on the graph from the leaves (the same count, shapes and order every
 * call). Returns the output, or NULL after a failed operation. */
typedef attn_var *(*ad_build_fn)(attn_graph *graph, attn_var **leaves, void *ctx);

typedef struct ad_leaf_spec {
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    float *data; /* the point where gradients are checked; perturbed and restored */
} ad_leaf_spec;

static inline int64_t ad_numel(const ad_leaf_spec *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++)
        n *= s->shape[d];
    return n;
}

/* sum(weights * output) in double, with the tape off. */
static inline double ad_weighted_output(attn_graph *graph, int n_leaves, ad_leaf_spec *specs,
                                        ad_build_fn build, void *ctx, const float *weights)
{
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_var *leaves[16];
    for (int i = 0; i < n_leaves; i++)
        if (attn_graph_input(graph, specs[i].ndim, specs[i].shape, specs[i].data, 0,
                             &leaves[i]) != ATTN_OK)
            return NAN;
    attn_var *out = build(graph, leaves, ctx);
    if (out == NULL)
        return NAN;
    double sum = 0.0;
    int64_t n = attn_tensor_numel(&out->value);
    for (int64_t i = 0; i < n; i++)
        sum += (double)weights[i] * (double)out->value.data[i];
    return sum;
}

/* The tape's gradients of sum(weights * output) with respect to every leaf, into grads[i]
 * (numel of leaf i each). weights gets the output's size (allocated, caller frees). Returns
 * the number of output elements, or -1 on failure. */
static inline int64_t ad_tape_gradients(attn_graph *graph, int n_leaves, ad_leaf_spec *specs,
                                        ad_build_fn build, void *ctx, uint64_t seed,
                                        float **weights, float **grads)
{
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 1);
    attn_var *leaves[16];
    for (int i = 0; i < n_leaves; i++)
        if (attn_graph_input(graph, specs[i].ndim, specs[i].shape, specs[i].data, 1,
                             &leaves[i]) != ATTN_OK)
            return -1;
    attn_var *out = build(graph, leaves, ctx);
    if (out == NULL)
        return -1;
    int64_t n = attn_tensor_numel(&out->value);
    *weights = test_alloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    test_fill_uniform(*weights, (size_t)n, -1.0f, 1.0f, seed);
    if (attn_graph_backward_from(graph, out, *weights) != ATTN_OK)
        return -1;
    for (int i = 0; i < n_leaves; i++) {
        int64_t m = ad_numel(&specs[i]);
        grads[i] = test_alloc((size_t)(m > 0 ? m : 1) * sizeof(float));
        if (leaves[i]->grad != NULL)
            memcpy(grads[i], leaves[i]->grad, (size_t)m * sizeof(float));
        else
            memset(grads[i], 0, (size_t)m * sizeof(float));
    }
    return n;
}

/* Checks the tape's gradient of every leaf element against a central difference with step h
 * of the float forward: |tape - fd| <= atol + rtol * |fd|. Prints the worst element of a
 * failing leaf. training sets the graph's mode (dropout on or off). */
static inline int ad_check_gradients(const char *what, int n_leaves, ad_leaf_spec *specs,
                                     ad_build_fn build, void *ctx, int training, double h,
                                     double atol, double rtol)
{
    attn_graph *graph = NULL;
    if (attn_graph_create(NULL, &graph) != ATTN_OK)
        return 0;
    /* Training mode is fine: a dropout mask depends only on (seed, step, k) and every
     * evaluation restarts k with a reset. */
    attn_graph_set_training(graph, training);
    float *weights = NULL, *grads[16] = {0};
    int ok = ad_tape_gradients(graph, n_leaves, specs, build, ctx, 99, &weights, grads) >= 0;
    if (!ok)
        printf("  %s: tape failed: %s\n", what, attn_last_error());
    for (int i = 0; ok && i < n_leaves; i++) {
        int64_t m = ad_numel(&specs[i]);
        double worst = -INFINITY, worst_tape = 0.0, worst_fd = 0.0;
        int64_t worst_at = -1;
        for (int64_t j = 0; j < m; j++) {
            float saved = specs[i].data[j];
            /* Divide by the step the float inputs actually took. */
            float up = (float)(saved + h), down = (float)(saved - h);
            specs[i].data[j] = up;
            double plus = ad_weighted_output(graph, n_leaves, specs, build, ctx, weights);
            specs[i].data[j] = down;
            double minus = ad_weighted_output(graph, n_leaves, specs, build, ctx, weights);
            specs[i].data[j] = saved;
            double fd = (plus - minus) / ((double)up - (double)down);
            double excess = fabs((double)grads[i][j] - fd) - (atol + rtol * fabs(fd));
            if (isnan(excess))
                excess = INFINITY;
            if (excess > worst) {
                worst = excess;
                worst_at = j;
                worst_tape = grads[i][j];
                worst_fd = fd;
            }
        }
        if (!(worst <= 0.0)) {
            printf("  %s: leaf %d element %lld: tape %.9g, finite difference %.9g\n", what, i,
                   (long long)worst_at, worst_tape, worst_fd);
            ok = 0;
        }
    }
    for (int i = 0; i < n_leaves; i++)
        free(grads[i]);
    free(weights);
    attn_graph_destroy(graph);
    return ok;
}

#endif /* ATTN_TEST_AUTODIFF_TESTING_H */
