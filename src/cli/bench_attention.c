/* attn bench attention: throughput and memory of scaled dot-product attention.
 *
 * FLOP counts: the forward counts 4 B H Lq Lk d (Q K^T and P V, 2 flops per multiply-add);
 * forward+backward counts 3x that (the backward's four products are twice the forward's).
 * Causal runs are counted the same way, NOT halved, although they skip about half the
 * work: compare their times, not their FLOP rates, with non-causal runs.
 *
 * Memory: "scratch" is the library's own accounting of the work buffers the tiled kernels
 * allocate (attn_sdpa_scratch_bytes, the exact size passed to the allocator). The large
 * memory case also reports the growth of the process's peak resident set (getrusage
 * ru_maxrss) across the calls, measured first, before any other benchmark raises the peak. */
#include "attn/attn.h"
#include "attention/sdpa_internal.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/precision.h"
#include "cli/library_error.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

enum { BATCH = 2, HEADS = 8, DIM = 64, MEMORY_LEN = 16384, MEMORY_HEADS = 8 };

typedef struct attention_buffers {
    attn_tensor q, k, v, out, grad_out, dq, dk, dv;
    float *lse;
    float *storage[9];
} attention_buffers;

static void free_buffers(attention_buffers *buf)
{
    for (int i = 0; i < 9; i++)
        attn_aligned_free(buf->storage[i]);
}

/* Contiguous [batch, heads, len, dim] tensors filled with small pseudo-random values. */
static int alloc_buffers(attention_buffers *buf, int64_t batch, int64_t heads, int64_t len,
                         int64_t dim)
{
    memset(buf, 0, sizeof *buf);
    const int64_t shape[4] = {batch, heads, len, dim};
    size_t count = (size_t)(batch * heads * len * dim);
    attn_tensor *tensors[8] = {&buf->q,        &buf->k,  &buf->v,  &buf->out,
                               &buf->grad_out, &buf->dq, &buf->dk, &buf->dv};
    attn_rng rng;
    attn_rng_seed(&rng, 1234);
    for (int t = 0; t < 8; t++) {
        buf->storage[t] = attn_aligned_alloc(count * sizeof(float));
        if (buf->storage[t] == NULL) {
            free_buffers(buf);
            return 0;
        }
        for (size_t e = 0; e < count; e++)
            buf->storage[t][e] = t >= 5 ? 0.0f : attn_rng_uniform(&rng) * 2.0f - 1.0f;
        *tensors[t] = attn_tensor_view(buf->storage[t], 4, shape);
    }
    buf->storage[8] = attn_aligned_alloc((size_t)(batch * heads * len) * sizeof(float));
    buf->lse = buf->storage[8];
    if (buf->lse == NULL) {
        free_buffers(buf);
        return 0;
    }
    memset(buf->lse, 0, (size_t)(batch * heads * len) * sizeof(float));
    return 1;
}

static attn_status run_forward(attention_buffers *buf, const attn_sdpa_options *options)
{
    return attn_sdpa_forward(&buf->q, &buf->k, &buf->v, options, &buf->out, buf->lse, NULL);
}

static attn_status run_backward(attention_buffers *buf, const attn_sdpa_options *options)
{
    return attn_sdpa_backward(&buf->q, &buf->k, &buf->v, options, &buf->out, buf->lse,
                              &buf->grad_out, &buf->dq, &buf->dk, &buf->dv);
}

/* The scratch the tiled kernels allocate for this shape (forward or backward, whichever is
 * larger), at the current thread count. */
static size_t scratch_bytes(int64_t batch, int64_t heads, int64_t len, int64_t dim,
                            attn_precision precision)
{
    sdpa_problem p;
    memset(&p, 0, sizeof p);
    p.precision = precision;
    p.batch = batch;
    p.heads = heads;
    p.len_q = p.len_k = len;
    p.dim = p.dim_v = dim;
    size_t forward = 0, backward = 0;
    int threads = attn_get_num_threads();
    if (!attn_sdpa_scratch_bytes(&p, 0, threads, &forward) ||
        !attn_sdpa_scratch_bytes(&p, 1, threads, &backward))
        return 0;
    return forward > backward ? forward : backward;
}

static long peak_rss_kib(void)
{
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_maxrss; /* KiB on Linux */
}

typedef struct result {
    int64_t len;
    int causal;
    double forward_s, both_s, forward_gflops, both_gflops;
    size_t scratch;
} result;

static int measure(int64_t len, int causal, attn_precision precision, int reps, result *r)
{
    attention_buffers buf;
    if (!alloc_buffers(&buf, BATCH, HEADS, len, DIM)) {
        cli_library_error("bench attention");
        return 0;
    }
    attn_sdpa_options options = attn_sdpa_default_options();
    options.causal = causal;
    options.precision = precision;
    double forward[64], both[64];
    /* The forward is timed on its own, back to back, as bench/torch_attention.py times
     * PyTorch's, then forward+backward pairs: a forward timed right after a backward would
     * also pay for the caches the backward left cold. */
    attn_status status = run_forward(&buf, &options); /* warm-up */
    for (int rep = 0; rep < reps && status == ATTN_OK; rep++) {
        double t0 = bench_seconds(CLOCK_MONOTONIC);
        status = run_forward(&buf, &options);
        forward[rep] = bench_seconds(CLOCK_MONOTONIC) - t0;
    }
    for (int rep = 0; rep < reps && status == ATTN_OK; rep++) {
        double t0 = bench_seconds(CLOCK_MONOTONIC);
        status = run_forward(&buf, &options);
        if (status == ATTN_OK)
            status = run_backward(&buf, &options);
        both[rep] = bench_seconds(CLOCK_MONOTONIC) - t0;
    }
    free_buffers(&buf);
    if (status != ATTN_OK) {
        cli_library_error("bench attention");
        return 0;
    }
    double flops = 4.0 * BATCH * HEADS * (double)len * (double)len * DIM;
    r->len = len;
    r->causal = causal;
    r->forward_s = bench_median(forward, reps);
    r->both_s = bench_median(both, reps);
    r->forward_gflops = flops / r->forward_s * 1e-9;
    r->both_gflops = 3.0 * flops / r->both_s * 1e-9;
    r->scratch = scratch_bytes(BATCH, HEADS, len, DIM, precision);
    return 1;
}

typedef struct memory_result {
    double tensors_mib, scratch_kib, peak_rss_growth_mib, seconds;
} memory_result;

/* Forward + backward at B=1, H=8, d=64, n=16384: what it needs beyond its tensors. */
static int measure_memory(attn_precision precision, memory_result *m)
{
    attention_buffers buf;
    if (!alloc_buffers(&buf, 1, MEMORY_HEADS, MEMORY_LEN, DIM)) {
        cli_library_error("bench attention");
        return 0;
    }
    attn_sdpa_options options = attn_sdpa_default_options();
    options.precision = precision;
    long before = peak_rss_kib();
    double t0 = bench_seconds(CLOCK_MONOTONIC);
    attn_status status = run_forward(&buf, &options);
    if (status == ATTN_OK)
        status = run_backward(&buf, &options);
    m->seconds = bench_seconds(CLOCK_MONOTONIC) - t0;
    long after = peak_rss_kib();
    free_buffers(&buf);
    if (status != ATTN_OK) {
        cli_library_error("bench attention");
        return 0;
    }
    double tensor_bytes = 8.0 * MEMORY_HEADS * MEMORY_LEN * DIM * sizeof(float) +
                          (double)MEMORY_HEADS * MEMORY_LEN * sizeof(float);
    m->tensors_mib = tensor_bytes / (1024.0 * 1024.0);
    m->scratch_kib = (double)scratch_bytes(1, MEMORY_HEADS, MEMORY_LEN, DIM, precision) / 1024.0;
    m->peak_rss_growth_mib = (double)(after - before) / 1024.0;
    return 1;
}

typedef struct bench_attention_args {
    int json, quick;
    int64_t reps; /* 0: 7, or 3 with --quick */
    int precision;
} bench_attention_args;

static const char *const precision_names[] = {"auto", "fp32", "bf16", NULL};
static const int precision_values[] = {ATTN_PRECISION_AUTO, ATTN_PRECISION_FP32,
                                       ATTN_PRECISION_BF16};

static const cli_option bench_attention_options[] = {
    {CLI_OPTION("--json", CLI_FLAG, offsetof(bench_attention_args, json), NULL,
                "print one JSON object")},
    {CLI_OPTION("--quick", CLI_FLAG, offsetof(bench_attention_args, quick), NULL,
                "n <= 1024, 3 runs, no memory case")},
    {CLI_OPTION("--reps", CLI_INT, offsetof(bench_attention_args, reps), "N",
                "runs per case, of which the median is reported [7; --quick: 3]"),
     .min = 1, .max = 64},
    {CLI_OPTION("--precision", CLI_CHOICE, offsetof(bench_attention_args, precision),
                "auto|fp32|bf16",
                "operands of the products (attn_sdpa_options.precision); auto: bf16 where "
                "native, else fp32"),
     .choices = precision_names, .choice_values = precision_values, .show_default = 1},
};

int attn_cmd_bench_attention(int argc, char **argv)
{
    char description[1024];
    snprintf(description, sizeof description,
             "Times attn_sdpa_forward and forward+backward at B=%d, H=%d, d=%d for\n"
             "n = 128, 512, 1024, 2048, 4096, causal and not (median of N runs),\n"
             "then forward+backward at B=1, H=%d, d=%d, n=%d for memory.\n"
             "GFLOP/s count 4*B*H*n*n*d for the forward and 3x that for forward+backward;\n"
             "causal runs are not halved.\n"
             "bf16 runs vdpbf16ps where the CPU has AVX512_BF16 and the instruction set is\n"
             "avx512; elsewhere it emulates the rounding (slower: \"native\" says which).\n"
             "Threads: ATTN_NUM_THREADS; instruction set: ATTN_ISA.\n",
             BATCH, HEADS, DIM, MEMORY_HEADS, DIM, MEMORY_LEN);
    const cli_command command = {"bench attention",
                                 "attn bench attention [--json] [--quick] [--reps N] "
                                 "[--precision auto|fp32|bf16]",
                                 description,
                                 bench_attention_options,
                                 sizeof bench_attention_options / sizeof *bench_attention_options,
                                 NULL};
    bench_attention_args a = {0, 0, 0, ATTN_PRECISION_AUTO};
    int given[sizeof bench_attention_options / sizeof *bench_attention_options] = {0};
    const int code = cli_parse(&command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    const int json = a.json, quick = a.quick;
    const int reps = a.reps > 0 ? (int)a.reps : quick ? 3 : 7;
    const attn_precision precision = attn_precision_resolve((attn_precision)a.precision);
    const char *precision_name = attn_precision_name(precision);
    const int native = attn_precision_native(precision);
    cli_precision_warn_emulated("bench attention", precision);

    memory_result memory = {0, 0, 0, 0};
    if (!quick && !measure_memory(precision, &memory))
        return 1;
    static const int64_t lengths[] = {128, 512, 1024, 2048, 4096};
    int n_lengths = quick ? 3 : 5;
    result results[10];
    int n_results = 0;
    for (int l = 0; l < n_lengths; l++)
        for (int causal = 0; causal <= 1; causal++)
            if (!measure(lengths[l], causal, precision, reps, &results[n_results++]))
                return 1;

    const char *isa = attn_isa_name(attn_get_isa());
    int threads = attn_get_num_threads();
    if (json) {
        printf("{\"benchmark\": \"attention\", \"batch\": %d, \"heads\": %d, \"dim\": %d, "
               "\"threads\": %d, \"isa\": \"%s\", \"precision\": \"%s\", \"native\": %s, "
               "\"reps\": %d, \"causal_flops_halved\": false,\n"
               " \"results\": [\n",
               BATCH, HEADS, DIM, threads, isa, precision_name, native ? "true" : "false", reps);
        for (int r = 0; r < n_results; r++)
            printf(
                "  {\"n\": %lld, \"causal\": %s, \"forward_ms\": %.3f, \"forward_gflops\": %.1f, "
                "\"forward_backward_ms\": %.3f, \"forward_backward_gflops\": %.1f, "
                "\"scratch_bytes\": %zu}%s\n",
                (long long)results[r].len, results[r].causal ? "true" : "false",
                results[r].forward_s * 1e3, results[r].forward_gflops, results[r].both_s * 1e3,
                results[r].both_gflops, results[r].scratch, r + 1 < n_results ? "," : "");
        printf(" ]");
        if (!quick)
            printf(",\n \"memory\": {\"batch\": 1, \"heads\": %d, \"n\": %d, \"dim\": %d, "
                   "\"tensors_mib\": %.1f, \"scratch_kib\": %.1f, \"peak_rss_growth_mib\": %.1f, "
                   "\"forward_backward_s\": %.2f}",
                   MEMORY_HEADS, MEMORY_LEN, DIM, memory.tensors_mib, memory.scratch_kib,
                   memory.peak_rss_growth_mib, memory.seconds);
        printf("}\n");
        return 0;
    }
    printf("attn bench attention: B=%d H=%d d=%d, %d threads, %s, %s (%s), median of %d runs\n",
           BATCH, HEADS, DIM, threads, isa, precision_name, native ? "native" : "emulated", reps);
    printf("GFLOP/s: forward 4*B*H*n*n*d, forward+backward 3x; causal NOT halved\n");
    printf("%6s %6s %10s %10s %12s %12s %12s\n", "n", "causal", "fwd ms", "fwd GF/s", "fwd+bwd ms",
           "fwd+bwd GF/s", "scratch KiB");
    for (int r = 0; r < n_results; r++)
        printf("%6lld %6s %10.3f %10.1f %12.3f %12.1f %12.1f\n", (long long)results[r].len,
               results[r].causal ? "yes" : "no", results[r].forward_s * 1e3,
               results[r].forward_gflops, results[r].both_s * 1e3, results[r].both_gflops,
               (double)results[r].scratch / 1024.0);
    if (!quick)
        printf("memory: B=1 H=%d d=%d n=%d forward+backward in %.2f s: tensors %.1f MiB; extra: "
               "library scratch %.1f KiB, peak RSS growth %.1f MiB (getrusage)\n",
               MEMORY_HEADS, DIM, MEMORY_LEN, memory.seconds, memory.tensors_mib,
               memory.scratch_kib, memory.peak_rss_growth_mib);
    return 0;
}
