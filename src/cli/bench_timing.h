/* The clock and the median every attn bench command reports with. */
#ifndef ATTN_CLI_BENCH_TIMING_H
#define ATTN_CLI_BENCH_TIMING_H

#include <time.h>

/* Seconds on clock (CLOCK_MONOTONIC for wall time, CLOCK_PROCESS_CPUTIME_ID for CPU time). */
double bench_seconds(clockid_t clock);
/* qsort's order of doubles, ascending. */
int bench_compare_doubles(const void *a, const void *b);
/* The median of x[0..n), n >= 1; sorts x. */
double bench_median(double *x, int n);

#endif
