/* Row reductions for the portable kernels. Each keeps ATTN_LANES independent partial
 * results, which the compiler turns into vector registers without having to reorder a
 * float sum (it may not, without -ffast-math), then combines them in a fixed tree order:
 * the same row always gives the same bits, whatever the thread count. */
#ifndef ATTN_KERNELS_PORTABLE_ROWS_H
#define ATTN_KERNELS_PORTABLE_ROWS_H

#include <math.h>
#include <stdint.h>

#include "kernels/fast_math.h"

#define ATTN_LANES 16

static inline float attn_lanes_total(float *acc)
{
    for (int width = ATTN_LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++)
            acc[l] += acc[l + width];
    return acc[0];
}

static inline float attn_lanes_max(float *acc)
{
    for (int width = ATTN_LANES / 2; width >= 1; width /= 2)
        for (int l = 0; l < width; l++)
            acc[l] = acc[l] < acc[l + width] ? acc[l + width] : acc[l];
    return acc[0];
}

static inline float attn_row_max(int64_t n, const float *x)
{
    float acc[ATTN_LANES];
    for (int l = 0; l < ATTN_LANES; l++)
        acc[l] = -INFINITY;
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++)
            acc[l] = acc[l] < x[j + l] ? x[j + l] : acc[l];
    for (int l = 0; j < n; j++, l++)
        acc[l] = acc[l] < x[j] ? x[j] : acc[l];
    return attn_lanes_max(acc);
}

static inline float attn_row_sum(int64_t n, const float *x)
{
    float acc[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++)
            acc[l] += x[j + l];
    for (int l = 0; j < n; j++, l++)
        acc[l] += x[j];
    return attn_lanes_total(acc);
}

static inline float attn_row_dot(int64_t n, const float *a, const float *b)
{
    float acc[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++)
            acc[l] += a[j + l] * b[j + l];
    for (int l = 0; j < n; j++, l++)
        acc[l] += a[j] * b[j];
    return attn_lanes_total(acc);
}

/* sum(exp(x - shift)) */
static inline float attn_row_exp_sum(int64_t n, const float *x, float shift)
{
    float acc[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++)
            acc[l] += attn_fast_exp(x[j + l] - shift);
    for (int l = 0; j < n; j++, l++)
        acc[l] += attn_fast_exp(x[j] - shift);
    return attn_lanes_total(acc);
}

/* out = exp(x - shift); returns sum(out) */
static inline float attn_row_exp_store_sum(int64_t n, const float *x, float shift, float *out)
{
    float acc[ATTN_LANES] = {0};
    int64_t j = 0;
    for (; j + ATTN_LANES <= n; j += ATTN_LANES)
        for (int l = 0; l < ATTN_LANES; l++) {
            float e = attn_fast_exp(x[j + l] - shift);
            out[j + l] = e;
            acc[l] += e;
        }
    for (int l = 0; j < n; j++, l++) {
        float e = attn_fast_exp(x[j] - shift);
        out[j] = e;
        acc[l] += e;
    }
    return attn_lanes_total(acc);
}

#endif /* ATTN_KERNELS_PORTABLE_ROWS_H */
