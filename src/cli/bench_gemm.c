/* attn bench gemm: GFLOP/s of attn_gemm_precision per instruction set on the shapes attention
 * and transformer layers use, as medians of several timed repetitions; in bf16 also the
 * ratio to fp32 on the fastest instruction set, measured in the same run. */
#define _POSIX_C_SOURCE 200809L

#include "attn/attn.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/library_error.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct gemm_shape {
    const char *name;
    attn_transpose ta, tb;
    int64_t m, n, k;
    int with_reference; /* the scalar reference is slow: only on small shapes */
    /* B is a weight converted and packed once (attn_gemm_packed_b), as training and decoding
     * multiply it: the call times the product alone. */
    int b_packed_once;
} gemm_shape;

static const gemm_shape shapes[] = {
    {"square", ATTN_NO_TRANS, ATTN_NO_TRANS, 2048, 2048, 2048, 0, 0},
    {"square", ATTN_NO_TRANS, ATTN_NO_TRANS, 1024, 1024, 1024, 0, 0},
    {"scores QK^T", ATTN_NO_TRANS, ATTN_TRANS, 512, 512, 64, 0, 0},
    {"scores QK^T", ATTN_NO_TRANS, ATTN_TRANS, 1024, 1024, 64, 0, 0},
    {"scores QK^T", ATTN_NO_TRANS, ATTN_TRANS, 2048, 2048, 64, 0, 0},
    {"k=64", ATTN_NO_TRANS, ATTN_NO_TRANS, 2048, 2048, 64, 0, 0},
    {"weights PV", ATTN_NO_TRANS, ATTN_NO_TRANS, 1024, 64, 1024, 0, 0},
    {"long k", ATTN_NO_TRANS, ATTN_NO_TRANS, 512, 512, 2048, 0, 0},
    {"tall-skinny", ATTN_NO_TRANS, ATTN_NO_TRANS, 2048, 256, 256, 0, 0},
    {"small", ATTN_NO_TRANS, ATTN_NO_TRANS, 64, 1024, 256, 0, 0},
    {"small weight", ATTN_NO_TRANS, ATTN_NO_TRANS, 64, 1024, 256, 0, 1},
    {"reference", ATTN_NO_TRANS, ATTN_NO_TRANS, 192, 192, 192, 1, 0},
};

/* Every path, fastest first: each column is one the CPU supports (or --isa's). */
static const attn_isa isas[] = {ATTN_ISA_AVX512,       ATTN_ISA_AVX2,        ATTN_ISA_NEON_BF16,
                                ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON,        ATTN_ISA_PORTABLE,
                                ATTN_ISA_REFERENCE};
#define ISA_COUNT (sizeof isas / sizeof isas[0])

typedef struct operands {
    float *a, *b, *c;
    attn_gemm_packed_b *packed_b; /* for shapes with b_packed_once, during measure() */
} operands;

static int time_call(attn_precision precision, const gemm_shape *s, const operands *ops,
                     double *seconds)
{
    int64_t lda = s->ta == ATTN_NO_TRANS ? s->k : s->m;
    int64_t ldb = s->tb == ATTN_NO_TRANS ? s->n : s->k;
    double start = bench_seconds(CLOCK_MONOTONIC);
    attn_status st = ops->packed_b != NULL
                         ? attn_gemm_with_packed_b(s->ta, s->m, 1.0f, ops->a, lda, ops->packed_b,
                                                   0.0f, ops->c, s->n)
                         : attn_gemm_precision(precision, s->ta, s->tb, s->m, s->n, s->k, 1.0f,
                                               ops->a, lda, ops->b, ldb, 0.0f, ops->c, s->n);
    *seconds = bench_seconds(CLOCK_MONOTONIC) - start;
    if (st != ATTN_OK) {
        cli_library_error("bench gemm");
        return 0;
    }
    return 1;
}

/* Median GFLOP/s over `reps` repetitions, each long enough (>= 20 ms) to time well. */
static int measure_calls(attn_precision precision, const gemm_shape *s, const operands *ops,
                         int reps, double *gflops)
{
    double once;
    if (!time_call(precision, s, ops, &once) ||
        !time_call(precision, s, ops, &once)) /* warm-up, then estimate */
        return 0;
    int calls = once >= 0.02 ? 1 : (int)(0.02 / (once > 1e-7 ? once : 1e-7)) + 1;
    double rates[64];
    if (reps > 64)
        reps = 64;
    for (int r = 0; r < reps; r++) {
        double total = 0;
        for (int i = 0; i < calls; i++) {
            if (!time_call(precision, s, ops, &once))
                return 0;
            total += once;
        }
        rates[r] = 2.0 * (double)s->m * (double)s->n * (double)s->k * calls / total * 1e-9;
    }
    qsort(rates, (size_t)reps, sizeof rates[0], bench_compare_doubles);
    *gflops = rates[reps / 2];
    return 1;
}

/* measure_calls, with B packed first (for the active instruction set) when the shape says. */
static int measure(attn_precision precision, const gemm_shape *s, operands *ops, int reps,
                   double *gflops)
{
    if (!s->b_packed_once)
        return measure_calls(precision, s, ops, reps, gflops);
    const int64_t ldb = s->tb == ATTN_NO_TRANS ? s->n : s->k;
    if (attn_gemm_packed_b_create(precision, s->tb, s->k, s->n, ops->b, ldb, &ops->packed_b) !=
        ATTN_OK) {
        cli_library_error("bench gemm");
        return 0;
    }
    const int ok = measure_calls(precision, s, ops, reps, gflops);
    attn_gemm_packed_b_destroy(ops->packed_b);
    ops->packed_b = NULL;
    return ok;
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

typedef struct bench_gemm_args {
    int json, isa; /* isa: an attn_isa, or ATTN_ISA_AUTO for every supported one */
    int precision;
    int64_t threads, reps;
} bench_gemm_args;

static const char *const isa_names[] = {"reference", "portable",     "avx2",      "avx512",
                                         "neon",      "neon-dotprod", "neon-bf16", NULL};
static const int isa_values[] = {ATTN_ISA_REFERENCE, ATTN_ISA_PORTABLE, ATTN_ISA_AVX2,
                                 ATTN_ISA_AVX512, ATTN_ISA_NEON, ATTN_ISA_NEON_DOTPROD, ATTN_ISA_NEON_BF16};

static const char *const precision_names[] = {"fp32", "bf16", NULL};
static const int precision_values[] = {ATTN_PRECISION_FP32, ATTN_PRECISION_BF16};

static const cli_option bench_gemm_options[] = {
    {CLI_OPTION("--json", CLI_FLAG, offsetof(bench_gemm_args, json), NULL,
                "print one JSON object per shape")},
    {CLI_OPTION("--threads", CLI_INT, offsetof(bench_gemm_args, threads), "N",
                "threads (default: ATTN_NUM_THREADS or all cores)"),
     .min = 1, .max = 1024},
    {CLI_OPTION("--reps", CLI_INT, offsetof(bench_gemm_args, reps), "N",
                "repetitions, of which the median is reported"),
     .min = 1, .max = 64, .show_default = 1},
    {CLI_OPTION("--isa", CLI_CHOICE, offsetof(bench_gemm_args, isa), "NAME",
                "only this instruction set (one this CPU supports)"),
     .choices = isa_names, .choice_values = isa_values},
    {CLI_OPTION("--precision", CLI_CHOICE, offsetof(bench_gemm_args, precision), "P",
                "operands in fp32 or bf16 (sums in fp32); bf16 also times fp32 on the fastest "
                "instruction set for the ratio"),
     .choices = precision_names, .choice_values = precision_values, .show_default = 1},
};

static const cli_command bench_gemm_command = {
    "bench gemm",
    "attn bench gemm [--json] [--threads N] [--reps N] [--isa NAME] [--precision fp32|bf16]",
    "GFLOP/s (median of N repetitions) of attn_gemm for each instruction set this CPU\n"
    "supports (or only --isa NAME), on square, attention and transformer shapes; the\n"
    "scalar reference runs on a small shape only; \"small weight\" is \"small\" with B\n"
    "converted and packed once beforehand (attn_gemm_packed_b), as a weight is between two\n"
    "updates. The ratio is to the best instruction\n"
    "set on the same shape. With --precision bf16 the operands are rounded to bfloat16\n"
    "(vdpbf16ps where the CPU has AVX512_BF16, emulated elsewhere) and the last column is\n"
    "the ratio to fp32 on the fastest instruction set.\n",
    bench_gemm_options,
    sizeof bench_gemm_options / sizeof *bench_gemm_options,
    NULL};

static int wanted(attn_isa isa, attn_isa only)
{
    return only == ATTN_ISA_AUTO ? attn_isa_supported(isa) : isa == only;
}

int attn_bench_gemm(int argc, char **argv)
{
    bench_gemm_args a = {0, ATTN_ISA_AUTO, ATTN_PRECISION_FP32, 0, 5};
    int given[sizeof bench_gemm_options / sizeof *bench_gemm_options] = {0};
    const int code = cli_parse(&bench_gemm_command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    const attn_isa only = (attn_isa)a.isa;
    if (only != ATTN_ISA_AUTO && !attn_isa_supported(only))
        return cli_usage_error(&bench_gemm_command, "--isa %s: this CPU does not support it",
                               attn_isa_name(only));
    const int json = a.json, reps = (int)a.reps;
    const attn_precision precision = (attn_precision)a.precision;
    const int against_fp32 = precision != ATTN_PRECISION_FP32;
    if (a.threads > 0 && attn_set_num_threads((int)a.threads) != ATTN_OK) {
        cli_library_error("bench gemm");
        return 2;
    }
    attn_isa chosen = attn_get_isa();
    if (!json)
        printf("attn bench gemm: %d threads, GEMM backend %s; GFLOP/s, median of %d "
               "(ratio to the best), operands in %s%s\n%-12s %-2s %5s %5s %5s",
               attn_get_num_threads(), attn_gemm_backend(), reps, attn_precision_name(precision),
               precision == ATTN_PRECISION_BF16 && !attn_precision_native(precision)
                   ? " (emulated: no native bf16 product on this CPU)"
                   : "",
               "shape", "op", "m", "n", "k");
    for (size_t i = 0; i < ISA_COUNT && !json; i++)
        if (wanted(isas[i], only))
            printf("  %15s", attn_isa_name(isas[i]));
    if (!json)
        printf(against_fp32 ? "  %8s\n" : "\n", "x fp32");

    int status = 0;
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0] && status == 0; si++) {
        const gemm_shape *s = &shapes[si];
        operands ops = {random_floats(s->m * s->k, 1), random_floats(s->k * s->n, 2),
                        random_floats(s->m * s->n, 3), NULL};
        double gflops[ISA_COUNT] = {0}, best = 0, fp32_gflops = 0;
        int measured[ISA_COUNT] = {0};
        size_t fastest = ISA_COUNT;
        if (ops.a == NULL || ops.b == NULL || ops.c == NULL) {
            cli_library_error("bench gemm");
            status = 1;
        }
        for (size_t i = 0; i < ISA_COUNT && status == 0; i++) {
            if (!wanted(isas[i], only) || (isas[i] == ATTN_ISA_REFERENCE && !s->with_reference))
                continue;
            attn_set_isa(isas[i]);
            if (!measure(precision, s, &ops, reps, &gflops[i]))
                status = 1;
            measured[i] = 1;
            if (gflops[i] > best) {
                best = gflops[i];
                fastest = i;
            }
        }
        if (status == 0 && against_fp32 && fastest < ISA_COUNT) {
            attn_set_isa(isas[fastest]);
            if (!measure(ATTN_PRECISION_FP32, s, &ops, reps, &fp32_gflops))
                status = 1;
        }
        const char *op = s->tb == ATTN_TRANS ? "NT" : "NN";
        if (status == 0 && json) {
            printf("{\"bench\":\"gemm\",\"shape\":\"%s\",\"op\":\"%s\",\"m\":%lld,\"n\":%lld,"
                   "\"k\":%lld,\"threads\":%d,\"reps\":%d,\"precision\":\"%s\",",
                   s->name, op, (long long)s->m, (long long)s->n, (long long)s->k,
                   attn_get_num_threads(), reps, attn_precision_name(precision));
            if (against_fp32 && fp32_gflops > 0)
                printf("\"fp32_isa\":\"%s\",\"fp32_gflops\":%.2f,\"ratio_to_fp32\":%.3f,",
                       attn_isa_name(isas[fastest]), fp32_gflops, best / fp32_gflops);
            printf("\"results\":[");
            const char *sep = "";
            for (size_t i = 0; i < ISA_COUNT; i++)
                if (measured[i]) {
                    printf("%s{\"isa\":\"%s\",\"gflops\":%.2f,\"ratio_to_best\":%.3f}", sep,
                           attn_isa_name(isas[i]), gflops[i], gflops[i] / best);
                    sep = ",";
                }
            printf("]}\n");
        } else if (status == 0) {
            printf("%-12s %-2s %5lld %5lld %5lld", s->name, op, (long long)s->m, (long long)s->n,
                   (long long)s->k);
            for (size_t i = 0; i < ISA_COUNT; i++)
                if (measured[i])
                    printf("  %7.1f (%5.3f)", gflops[i], gflops[i] / best);
                else if (wanted(isas[i], only))
                    printf("  %15s", "-");
            if (against_fp32 && fp32_gflops > 0)
                printf("  %7.2fx", best / fp32_gflops);
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
