/* bench_timing.h: one clock and one median for the benchmarks. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "cli/bench_timing.h"

#include <stdlib.h>

double bench_seconds(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int bench_compare_doubles(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, bench_compare_doubles);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}
