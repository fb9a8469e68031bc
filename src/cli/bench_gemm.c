/* attn bench gemm: GFLOP/s of attn_gemm per instruction set on the shapes attention and
 * transformer layers use, as medians of several timed repetitions. */
#define _POSIX_C_SOURCE 200809L

#include "attn/attn.h"
#include "cli/commands.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct gemm_shape {
    const char *name;
    attn_transpose ta, tb;
    int64_t m, n, k;
    int with_reference; /* the scalar reference is slow: only on small shapes */
} gemm_shape;

static const gemm_shape shapes[] = {
    {"square", ATTN_NO_TRANS, ATTN_NO_TRANS, 2048, 2048, 2048, 0},
    {"square", ATTN_NO_TRANS, ATTN_NO_TRANS, 1024, 1024, 1024, 0},
    {"scores QK^T", ATTN_NO_TRANS, ATTN_TRANS, 512, 512, 64, 0},
    {"scores QK^T", ATTN_NO_TRANS, ATTN_TRANS, 1024, 1024, 64, 0},
    {"scores QK^T", ATTN_NO_TRANS, ATTN_TRANS, 2048, 2048, 64, 0},
    {"k=64", ATTN_NO_TRANS, ATTN_NO_TRANS, 2048, 2048, 64, 0},
    {"weights PV", ATTN_NO_TRANS, ATTN_NO_TRANS, 1024, 64, 1024, 0},
    {"long k", ATTN_NO_TRANS, ATTN_NO_TRANS, 512, 512, 2048, 0},
    {"tall-skinny", ATTN_NO_TRANS, ATTN_NO_TRANS, 2048, 256, 256, 0},
    {"small", ATTN_NO_TRANS, ATTN_NO_TRANS, 64, 1024, 256, 0},
    {"reference", ATTN_NO_TRANS, ATTN_NO_TRANS, 192, 192, 192, 1},
};

static const attn_isa isas[] = {ATTN_ISA_AVX512, ATTN_ISA_AVX2, ATTN_ISA_PORTABLE,
                                ATTN_ISA_REFERENCE};
#define ISA_COUNT (sizeof isas / sizeof isas[0])

static double seconds_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int compare_doubles(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

typedef struct operands {
    float *a, *b, *c;
} operands;

static int time_call(const gemm_shape *s, const operands *ops, double *seconds)
{
    int64_t lda = s->ta == ATTN_NO_TRANS ? s->k : s->m;
    int64_t ldb = s->tb == ATTN_NO_TRANS ? s->n : s->k;
    double start = seconds_now();
    attn_status st = attn_gemm(s->ta, s->tb, s->m, s->n, s->k, 1.0f, ops->a, lda, ops->b, ldb,
                               0.0f, ops->c, s->n);
    *seconds = seconds_now() - start;
    if (st != ATTN_OK) {
        fprintf(stderr, "attn bench gemm: %s\n", attn_last_error());
        return 0;
    }
    return 1;
}

/* Median GFLOP/s over `reps` repetitions, each long enough (>= 20 ms) to time well. */
static int measure(const gemm_shape *s, const operands *ops, int reps, double *gflops)
{
    double once;
    if (!time_call(s, ops, &once) || !time_call(s, ops, &once)) /* warm-up, then estimate */
        return 0;
    int calls = once >= 0.02 ? 1 : (int)(0.02 / (once > 1e-7 ? once : 1e-7)) + 1;
    double rates[64];
    if (reps > 64)
        reps = 64;
    for (int r = 0; r < reps; r++) {
        double total = 0;
        for (int i = 0; i < calls; i++) {
            if (!time_call(s, ops, &once))
                return 0;
            total += once;
        }
        rates[r] = 2.0 * (double)s->m * (double)s->n * (double)s->k * calls / total * 1e-9;
    }
    qsort(rates, (size_t)reps, sizeof rates[0], compare_doubles);
    *gflops = rates[reps / 2];
    return 1;
}

static float *random_floats(int64_t count, uint64_t seed)
{
    float *x = attn_aligned_alloc((size_t)count * sizeof(float));
    if (x == NULL)
        return NULL;
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    for (int64_t i = 0; i < count; i++)
        x[i] = 2.0f * attn_rng_uniform(&rng) - 1.0f;
    return x;
}

static void print_usage(FILE *out)
{
    fprintf(out, "usage: attn bench gemm [--json] [--threads N] [--reps N] [--isa NAME]\n\n"
                 "GFLOP/s (median of N repetitions, default 5) of attn_gemm for each\n"
                 "instruction set this CPU supports (or only --isa NAME), on square, attention\n"
                 "and transformer shapes; the scalar reference runs on a small shape only. The\n"
                 "ratio is to the best instruction set on the same shape. --json prints one\n"
                 "JSON object per shape.\n");
}

static int parse_positive(const char *text, int *out)
{
    char *end = NULL;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < 1 || v > 1024)
        return 0;
    *out = (int)v;
    return 1;
}

static int wanted(attn_isa isa, attn_isa only)
{
    return only == ATTN_ISA_AUTO ? attn_isa_supported(isa) : isa == only;
}

static int parse_isa(const char *text, attn_isa *out)
{
    for (size_t i = 0; i < ISA_COUNT; i++)
        if (strcmp(text, attn_isa_name(isas[i])) == 0 && attn_isa_supported(isas[i])) {
            *out = isas[i];
            return 1;
        }
    return 0;
}

int attn_bench_gemm(int argc, char **argv)
{
    int json = 0, reps = 5, threads = 0;
    attn_isa only = ATTN_ISA_AUTO;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            print_usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
            if (!parse_positive(argv[++i], &threads)) {
                fprintf(stderr, "attn bench gemm: --threads needs a number from 1 to 1024\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            if (!parse_positive(argv[++i], &reps) || reps > 64) {
                fprintf(stderr, "attn bench gemm: --reps needs a number from 1 to 64\n");
                return 2;
            }
        } else if (strcmp(argv[i], "--isa") == 0 && i + 1 < argc) {
            if (!parse_isa(argv[++i], &only)) {
                fprintf(stderr, "attn bench gemm: --isa needs an instruction set this CPU "
                                "supports (reference, portable, avx2, avx512)\n");
                return 2;
            }
        } else {
            fprintf(stderr, "attn bench gemm: unexpected argument '%s'\n", argv[i]);
            print_usage(stderr);
            return 2;
        }
    }
    if (threads > 0 && attn_set_num_threads(threads) != ATTN_OK) {
        fprintf(stderr, "attn bench gemm: %s\n", attn_last_error());
        return 2;
    }
    attn_isa chosen = attn_get_isa();
    if (!json)
        printf("attn bench gemm: %d threads, GEMM backend %s; GFLOP/s, median of %d "
               "(ratio to the best)\n%-12s %-2s %5s %5s %5s",
               attn_get_num_threads(), attn_gemm_backend(), reps, "shape", "op", "m", "n",
               "k");
    for (size_t i = 0; i < ISA_COUNT && !json; i++)
        if (wanted(isas[i], only))
            printf("  %15s", attn_isa_name(isas[i]));
    if (!json)
        printf("\n");

    int status = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0] && status == 0; si++) {
        const gemm_shape *s = &shapes[si];
        operands ops = {random_floats(s->m * s->k, 1), random_floats(s->k * s->n, 2),
                        random_floats(s->m * s->n, 3)};
        double gflops[ISA_COUNT] = {0}, best = 0;
        int measured[ISA_COUNT] = {0};
        if (ops.a == NULL || ops.b == NULL || ops.c == NULL) {
            fprintf(stderr, "attn bench gemm: %s\n", attn_last_error());
            status = 1;
        }
        for (size_t i = 0; i < ISA_COUNT && status == 0; i++) {
            if (!wanted(isas[i], only) || (isas[i] == ATTN_ISA_REFERENCE && !s->with_reference))
                continue;
            attn_set_isa(isas[i]);
            if (!measure(s, &ops, reps, &gflops[i]))
                status = 1;
            measured[i] = 1;
            if (gflops[i] > best)
                best = gflops[i];
        }
        const char *op = s->tb == ATTN_TRANS ? "NT" : "NN";
        if (status == 0 && json) {
            printf("{\"bench\":\"gemm\",\"shape\":\"%s\",\"op\":\"%s\",\"m\":%lld,\"n\":%lld,"
                   "\"k\":%lld,\"threads\":%d,\"reps\":%d,\"results\":[",
                   s->name, op, (long long)s->m, (long long)s->n, (long long)s->k,
                   attn_get_num_threads(), reps);
            const char *sep = "";
            for (size_t i = 0; i < ISA_COUNT; i++)
                if (measured[i]) {
                    printf("%s{\"isa\":\"%s\",\"gflops\":%.2f,\"ratio_to_best\":%.3f}", sep,
                           attn_isa_name(isas[i]), gflops[i], gflops[i] / best);
                    sep = ",";
                }
            printf("]}\n");
        } else if (status == 0) {
            printf("%-12s %-2s %5lld %5lld %5lld", s->name, op, (long long)s->m,
                   (long long)s->n, (long long)s->k);
            for (size_t i = 0; i < ISA_COUNT; i++)
                if (measured[i])
                    printf("  %7.1f (%5.3f)", gflops[i], gflops[i] / best);
                else if (wanted(isas[i], only))
                    printf("  %15s", "-");
            printf("\n");
        }
        fflush(stdout);
        attn_aligned_free(ops.a);
        attn_aligned_free(ops.b);
        attn_aligned_free(ops.c);
    }
    attn_set_isa(chosen);
    return status;
}
