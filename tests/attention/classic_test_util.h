/* Shared by the additive and Luong attention tests: float/double conversion, finite
 * differences and a loop over the instruction sets this CPU supports. */
#ifndef ATTN_CLASSIC_TEST_UTIL_H
#define ATTN_CLASSIC_TEST_UTIL_H

#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static inline double *new_doubles(size_t n)
{
    double *x = test_alloc((n > 0 ? n : 1) * sizeof(double));
    memset(x, 0, (n > 0 ? n : 1) * sizeof(double));
    return x;
}

static inline float *new_floats(size_t n)
{
    float *x = test_alloc((n > 0 ? n : 1) * sizeof(float));
    memset(x, 0, (n > 0 ? n : 1) * sizeof(float));
    return x;
}

/* Random doubles that are exactly representable as floats, so the float library and the
 * double reference see the same inputs. */
static inline double *random_doubles(size_t n, double lo, double hi, uint64_t seed)
{
    double *x = new_doubles(n);
    test_fill_uniform_double(x, n, lo, hi, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (double)(float)x[i];
    return x;
}

static inline float *to_floats(const double *x, size_t n)
{
    float *y = new_floats(n);
    for (size_t i = 0; i < n; i++)
        y[i] = (float)x[i];
    return y;
}

/* Padding at the end of each row (lengths drawn at random, at least 1), then row 1 fully
 * masked (when there are 3 rows or more) and a hole inside row 2's sentence (when long
 * enough), the cases the kernels must tell apart. */
static inline uint8_t *random_mask(int64_t rows, int64_t cols, uint64_t seed)
{
    uint8_t *m = test_alloc((size_t)(rows * cols > 0 ? rows * cols : 1));
    double *u = new_doubles((size_t)rows);
    test_fill_uniform_double(u, (size_t)rows, 0.0, 1.0, seed);
    for (int64_t b = 0; b < rows; b++) {
        int64_t length = 1 + (int64_t)(u[b] * (double)cols);
        length = length > cols ? cols : length;
        for (int64_t j = 0; j < cols; j++)
            m[b * cols + j] = j >= length;
    }
    if (rows >= 3) {
        for (int64_t j = 0; j < cols; j++)
            m[cols + j] = 1;
        if (cols >= 4 && m[2 * cols + 1] == 0 && m[2 * cols + 2] == 0)
            m[2 * cols + 1] = 1;
    }
    free(u);
    return m;
}

typedef double (*loss_fn)(void *ctx);

/* Compares analytic[i] with the central difference of loss() in x[i], for every i. */
static inline int finite_difference_matches(const char *what, double *x, size_t n,
                                            const double *analytic, loss_fn loss, void *ctx)
{
    const double eps = 1e-6;
    double worst = 0;
    size_t worst_at = 0;
    double worst_numeric = 0;
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + eps;
        double up = loss(ctx);
        x[i] = saved - eps;
        double down = loss(ctx);
        x[i] = saved;
        double numeric = (up - down) / (2 * eps);
        double err = fabs(numeric - analytic[i]) / (1e-6 + 1e-6 * fabs(numeric));
        if (err > worst || isnan(err)) {
            worst = isnan(err) ? INFINITY : err;
            worst_at = i;
            worst_numeric = numeric;
        }
    }
    if (worst > 1.0) {
        fprintf(stderr, "  %s[%zu]: analytic %.12g, finite difference %.12g\n", what, worst_at,
                analytic[worst_at], worst_numeric);
        return 0;
    }
    return 1;
}

#define CHECK_GRADIENT(what, x, n, analytic, loss, ctx)                                     \
    CHECK(finite_difference_matches(what, x, n, analytic, loss, ctx),                       \
          "%s: backward differs from finite differences", what)

/* Every instruction set this CPU runs, reference first. */
static inline int supported_isas(attn_isa *out)
{
    int n = 0;
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++)
        if (test_isa_wanted((attn_isa)isa))
            out[n++] = (attn_isa)isa;
    return n;
}

static inline int has_nan(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (isnan(x[i]))
            return 1;
    return 0;
}

static inline int all_zero(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (x[i] != 0.0f)
            return 0;
    return 1;
}

#endif
