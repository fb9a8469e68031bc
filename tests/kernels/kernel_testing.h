/* Helpers shared by the element-wise and row-wise kernel tests: instruction-set loops,
 * float/double conversions, bit comparisons and finite differences. */
#ifndef ATTN_TEST_KERNEL_TESTING_H
#define ATTN_TEST_KERNEL_TESTING_H

#include "harness.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Every instruction set, reference first. Loops over them read:
 *   for (int k = 0; k < TEST_ISA_COUNT; k++) { if (!test_use_isa(test_isas[k])) continue; ... }
 * and end with attn_set_isa(ATTN_ISA_AUTO). */
static const attn_isa test_isas[] = {ATTN_ISA_REFERENCE, ATTN_ISA_PORTABLE, ATTN_ISA_AVX2,
                                     ATTN_ISA_AVX512, ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};
#define TEST_ISA_COUNT ((int)(sizeof test_isas / sizeof test_isas[0]))

/* Selects isa if this CPU has it and ATTN_ISA allows it (test_isa_wanted). */
static inline int test_use_isa(attn_isa isa)
{
    return test_isa_wanted(isa) && attn_set_isa(isa) == ATTN_OK;
}

/* The odd sizes every row-wise kernel is checked on. */
static const int64_t test_row_counts[] = {1, 3, 17, 129};
static const int64_t test_col_counts[] = {1, 7, 64, 80, 1037};
#define TEST_ROW_COUNTS ((int)(sizeof test_row_counts / sizeof test_row_counts[0]))
#define TEST_COL_COUNTS ((int)(sizeof test_col_counts / sizeof test_col_counts[0]))

static inline float *test_floats(size_t n)
{
    return test_alloc(n * sizeof(float));
}
static inline double *test_doubles(size_t n)
{
    return test_alloc(n * sizeof(double));
}

static inline double *test_to_double(const float *x, size_t n)
{
    double *d = test_doubles(n);
    for (size_t i = 0; i < n; i++)
        d[i] = x[i];
    return d;
}

static inline int test_same_bits(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}

/* Central differences of a scalar objective: grad[i] = (f(x + h e_i) - f(x - h e_i)) / 2h. */
typedef double (*test_objective)(void *ctx, const double *x);

static inline void test_numeric_gradient(test_objective f, void *ctx, double *x, size_t n, double h,
                                         double *grad)
{
    for (size_t i = 0; i < n; i++) {
        double saved = x[i];
        x[i] = saved + h;
        double up = f(ctx, x);
        x[i] = saved - h;
        double down = f(ctx, x);
        x[i] = saved;
        grad[i] = (up - down) / (2.0 * h);
    }
}

/* Every |a - b| <= atol + rtol * |b|, for two double arrays; prints the worst on failure. */
static inline int test_doubles_close(const char *what, const double *a, const double *b, size_t n,
                                     double atol, double rtol)
{
    size_t worst = 0;
    double worst_excess = -1.0;
    for (size_t i = 0; i < n; i++) {
        double excess = fabs(a[i] - b[i]) - (atol + rtol * fabs(b[i]));
        if (isnan(excess))
            excess = INFINITY;
        if (excess > worst_excess) {
            worst_excess = excess;
            worst = i;
        }
    }
    if (worst_excess > 0.0)
        fprintf(stderr, "  %s: worst at [%zu]: %.12g vs %.12g\n", what, worst, a[worst], b[worst]);
    return worst_excess <= 0.0;
}

/* Distance from got to exact in units in the last place of exact, as a float. A result
 * that overflows float counts as exact when got is +-inf. */
static inline double test_ulp_error(float got, double exact)
{
    if (isnan(exact))
        return isnan(got) ? 0.0 : INFINITY;
    if (isinf((float)exact) || isinf(got))
        return (double)got == (double)(float)exact ? 0.0 : INFINITY;
    int exponent;
    frexp(exact, &exponent);
    double ulp = ldexp(1.0, exponent - 24);
    double smallest = ldexp(1.0, -149); /* subnormal spacing */
    return fabs((double)got - exact) / (ulp > smallest ? ulp : smallest);
}

/* Like CHECK_ARRAYS_CLOSE, but equal values (including equal infinities) always pass. */
static inline int test_close_to_reference(const char *what, const float *a, const double *b,
                                          size_t n, double atol, double rtol)
{
    size_t worst = 0;
    double worst_excess = 0.0;
    for (size_t i = 0; i < n; i++) {
        if ((double)a[i] == b[i])
            continue;
        double excess = fabs((double)a[i] - b[i]) - (atol + rtol * fabs(b[i]));
        if (!(excess <= 0.0) && !(excess <= worst_excess)) {
            worst_excess = isnan(excess) ? INFINITY : excess;
            worst = i;
        }
    }
    if (worst_excess > 0.0)
        fprintf(stderr, "  %s: worst at [%zu]: got %.9g, expected %.9g\n", what, worst,
                (double)a[worst], b[worst]);
    return worst_excess <= 0.0;
}
/* Every |a[i] - b[i]| <= bound[i] (equal values always pass). */
static inline int test_within_bounds(const char *what, const float *a, const double *b,
                                     const double *bound, size_t n)
{
    size_t worst = 0;
    double worst_ratio = 1.0;
    for (size_t i = 0; i < n; i++) {
        if ((double)a[i] == b[i])
            continue;
        double ratio = fabs((double)a[i] - b[i]) / bound[i];
        if (!(ratio <= worst_ratio)) {
            worst_ratio = isnan(ratio) ? INFINITY : ratio;
            worst = i;
        }
    }
    if (worst_ratio > 1.0)
        fprintf(stderr, "  %s: worst at [%zu]: got %.9g, expected %.9g, allowed error %.3g\n", what,
                worst, (double)a[worst], b[worst], bound[worst]);
    return worst_ratio <= 1.0;
}
#define CHECK_WITHIN_BOUNDS(what, a, b, bound, n)                                                  \
    test_record(test_within_bounds(what, a, b, bound, n), __FILE__, __LINE__,                      \
                "%s differs from the reference", what)

/* The float unit roundoff, 2^-24. */
#define TEST_FLOAT_EPS 5.9604644775390625e-08

#define CHECK_NEAR_REFERENCE(what, a, b, n, atol, rtol)                                            \
    test_record(test_close_to_reference(what, a, b, n, atol, rtol), __FILE__, __LINE__,            \
                "%s differs from the reference", what)

#endif
