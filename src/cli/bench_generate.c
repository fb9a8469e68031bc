/* attn bench generate: how fast a language model writes, the counterpart of
 * bench/torch_generate.py. The model is GPT-2 124M (cli_gpt2_config) with random weights.
 * One repetition starts a step decoder for `batch` rows, reads a prompt of --prompt random
 * tokens in one prefill (attn_model_step_prefill, as attn_generate does; timed apart), then takes --new-tokens greedy steps, each row's arg-max
 * fed back (no early stop, so every precision does the same work). The figure is new tokens
 * per second of the generation phase, over all rows; the median of --reps repetitions.
 *
 * Generating one token for one row reads every weight matrix once (the blocks' projections
 * and the tied output layer), so batch-1 generation is bound by memory bandwidth, not by
 * arithmetic. The benchmark therefore also measures the machine's read bandwidth (the library's
 * thread count of threads summing a 1 GiB buffer, with 1 to 16 streams a thread: the best
 * median of five passes) and
 * reports the weight bytes a batch-1 run reads per second as a share of it. The key/value
 * cache's reads (2 x layers x position x d_model floats a token, under 2% of the weights at
 * GPT-2's size and these lengths) are left out of the count, which errs on the low side. */
#define _ISOC11_SOURCE          /* aligned_alloc */
#define _POSIX_C_SOURCE 200809L /* pthreads */
#include "attn/attn.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "cli/library_error.h"
#include "cli/options.h"
#include "cli/precision.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_REPS = 64, BANDWIDTH_PASSES = 5, MAX_BANDWIDTH_THREADS = 256 };
static const size_t BANDWIDTH_BYTES = (size_t)1 << 30;

/* ---- the machine's read bandwidth ------------------------------------------------------- */

/* 64-byte lanes of 64-bit words: the compiler turns each into the widest loads the build's
 * instruction set has, so one core asks for far more than memory can deliver. */
typedef uint64_t lane __attribute__((vector_size(64)));
enum { MAX_STREAMS = 16 };

/* A thread's share: `streams` equal runs of lanes read side by side, the way a product reads
 * several rows of a weight matrix at once (one stream alone gets about half of what several
 * get from the same memory here: the prefetchers and the open requests are per stream). */
typedef struct read_share {
    const lane *lanes;
    size_t count;
    int streams;
    uint64_t sum; /* kept, so the compiler cannot drop the reads */
} read_share;

static void *read_lanes(void *arg)
{
    read_share *s = arg;
    lane acc[MAX_STREAMS];
    memset(acc, 0, sizeof acc);
    const size_t per_stream = s->count / (size_t)s->streams;
    for (size_t i = 0; i < per_stream; i++)
        for (int j = 0; j < s->streams; j++)
            acc[j] += s->lanes[(size_t)j * per_stream + i];
    uint64_t sum = 0;
    for (int j = 0; j < s->streams; j++)
        for (size_t k = 0; k < sizeof(lane) / sizeof(uint64_t); k++)
            sum += acc[j][k];
    s->sum = sum;
    return NULL;
}

/* One pass of `threads` threads over the buffer, `streams` streams each: bytes per second, or
 * 0 when a thread cannot be started or the sum is wrong (the reads were not all made). */
static double read_pass(const uint64_t *words, size_t count, int threads, int streams)
{
    pthread_t ids[MAX_BANDWIDTH_THREADS];
    read_share shares[MAX_BANDWIDTH_THREADS];
    const size_t words_per_lane = sizeof(lane) / sizeof(uint64_t);
    /* Every stream of every thread gets the same whole number of lanes. */
    const size_t per_stream = count / words_per_lane / (size_t)(threads * streams);
    const double start = bench_seconds(CLOCK_MONOTONIC);
    int started = 0, ok = 1;
    for (int t = 0; t < threads; t++) {
        const size_t lanes = per_stream * (size_t)streams;
        shares[t] = (read_share){(const lane *)words + (size_t)t * lanes, lanes, streams, 0};
        if (t > 0 && pthread_create(&ids[t], NULL, read_lanes, &shares[t]) != 0) {
            ok = 0;
            break;
        }
        started = t + 1;
    }
    if (ok)
        read_lanes(&shares[0]);
    for (int t = 1; t < started; t++)
        pthread_join(ids[t], NULL);
    const double seconds = bench_seconds(CLOCK_MONOTONIC) - start;
    /* words[i] = i: the lanes read sum to the sum of their indices. */
    const uint64_t read = (uint64_t)(per_stream * (size_t)(threads * streams) * words_per_lane);
    uint64_t sum = 0;
    for (int t = 0; t < started; t++)
        sum += shares[t].sum;
    const int complete = ok && sum == read * (read - 1) / 2;
    return complete ? (double)(read * sizeof(uint64_t)) / seconds : 0.0;
}

/* Bytes per second that `threads` threads read together from a buffer far larger than the
 * caches: for 1, 2, 4, 8 and 16 streams a thread, the median of BANDWIDTH_PASSES passes; the
 * best of those medians. 0 when the buffer or a thread cannot be had. */
static double read_bandwidth(int threads)
{
    if (threads < 1)
        threads = 1;
    if (threads > MAX_BANDWIDTH_THREADS)
        threads = MAX_BANDWIDTH_THREADS;
    uint64_t *words = aligned_alloc(sizeof(lane), BANDWIDTH_BYTES);
    if (words == NULL)
        return 0.0;
    const size_t count = BANDWIDTH_BYTES / sizeof *words;
    for (size_t i = 0; i < count; i++) /* touch every page, so the passes do not fault */
        words[i] = i;
    double best = 0.0;
    for (int streams = 1; streams <= MAX_STREAMS; streams *= 2) {
        double rates[BANDWIDTH_PASSES];
        for (int pass = 0; pass < BANDWIDTH_PASSES; pass++) {
            rates[pass] = read_pass(words, count, threads, streams);
            if (rates[pass] == 0.0) {
                free(words);
                return 0.0;
            }
        }
        const double rate = bench_median(rates, BANDWIDTH_PASSES);
        best = rate > best ? rate : best;
    }
    free(words);
    return best;
}

/* ---- generation ----------------------------------------------------------------------------- */

/* Bytes of weight matrices one step of one row reads: every block's projections and the
 * output layer, at the model's storage precision (int8 adds a float scale per row). */
static double weight_bytes_per_token(const attn_model_config *c, attn_precision precision)
{
    const double d = (double)c->d_model, f = (double)c->ffn_dim, v = (double)c->tgt_vocab;
    const double ffn_matrices = c->ffn == ATTN_FFN_SWIGLU ? 3.0 : 2.0;
    const double block_rows = 3 * d + d + (ffn_matrices == 3.0 ? 2 * f : f) + d;
    const double elements = (double)c->decoder_layers * (4 * d * d + ffn_matrices * d * f) + v * d;
    const double rows = (double)c->decoder_layers * block_rows + v;
    switch (precision) {
    case ATTN_PRECISION_INT8:
        return elements + 4 * rows;
    case ATTN_PRECISION_BF16:
        return 2 * elements;
    default:
        return 4 * elements;
    }
}

typedef struct generate_run {
    attn_model *model;
    attn_graph *graph;
    int64_t batch, prompt, new_tokens;
    int32_t *prompts; /* [batch, prompt] */
    int32_t *ids;     /* [batch] */
    float *logits;    /* [batch, vocab] */
    int64_t vocab;
} generate_run;

/* One repetition: prefill seconds and generation seconds. */
static attn_status generate_once(generate_run *r, double *prefill_s, double *generate_s)
{
    attn_graph_reset(r->graph);
    attn_step_decoder *d = NULL;
    const double start = bench_seconds(CLOCK_MONOTONIC);
    attn_status status = attn_model_step_start(r->model, r->graph, NULL, NULL, r->batch,
                                               r->prompt + r->new_tokens, &d);
    if (status == ATTN_OK) /* as attn_generate reads a prompt */
        status = attn_model_step_prefill(d, r->prompts, r->prompt, r->logits);
    const double prefilled = bench_seconds(CLOCK_MONOTONIC);
    /* The prompt's last step gave the first new token's logits; each step after feeds one. */
    for (int64_t t = 0; t < r->new_tokens && status == ATTN_OK; t++) {
        for (int64_t b = 0; b < r->batch; b++)
            r->ids[b] = (int32_t)attn_argmax(r->vocab, r->logits + b * r->vocab);
        if (t + 1 < r->new_tokens)
            status = attn_model_step(d, r->ids, r->logits, NULL);
    }
    const double end = bench_seconds(CLOCK_MONOTONIC);
    attn_model_step_destroy(d);
    *prefill_s = prefilled - start;
    *generate_s = end - prefilled;
    return status;
}

typedef struct generate_figures {
    double tokens_per_s, prefill_s;
} generate_figures;

static int run_batch(attn_model *model, attn_graph *graph, int64_t batch, int64_t prompt,
                     int64_t new_tokens, int reps, generate_figures *out)
{
    const attn_model_config *config = attn_model_get_config(model);
    generate_run r = {model, graph, batch, prompt, new_tokens, NULL, NULL, NULL,
                      config->tgt_vocab};
    r.prompts = malloc((size_t)(batch * prompt) * sizeof(int32_t));
    r.ids = malloc((size_t)batch * sizeof(int32_t));
    r.logits = malloc((size_t)(batch * r.vocab) * sizeof(float));
    int ok = r.prompts != NULL && r.ids != NULL && r.logits != NULL;
    if (!ok)
        fprintf(stderr, "attn bench generate: out of memory\n");
    if (ok) {
        attn_rng rng;
        attn_rng_seed(&rng, 1);
        for (int64_t i = 0; i < batch * prompt; i++)
            r.prompts[i] = (int32_t)attn_rng_below(&rng, (uint64_t)r.vocab);
        double rates[MAX_REPS], prefills[MAX_REPS], prefill_s, generate_s;
        ok = generate_once(&r, &prefill_s, &generate_s) == ATTN_OK; /* warm-up */
        for (int i = 0; i < reps && ok; i++) {
            ok = generate_once(&r, &prefill_s, &generate_s) == ATTN_OK;
            rates[i] = (double)(batch * new_tokens) / generate_s;
            prefills[i] = prefill_s;
        }
        if (ok) {
            out->tokens_per_s = bench_median(rates, reps);
            out->prefill_s = bench_median(prefills, reps);
        } else {
            cli_library_error("bench generate");
        }
    }
    free(r.prompts);
    free(r.ids);
    free(r.logits);
    return ok;
}

typedef struct bench_generate_args {
    int json, batch;      /* batch 0: both */
    const char *precision; /* auto, fp32, bf16 or int8 */
    int64_t prompt, new_tokens, reps;
} bench_generate_args;

static const char *const batch_names[] = {"1", "32", "both", NULL};
static const int batch_values[] = {1, 32, 0};

static const cli_option bench_generate_options[] = {
    {CLI_OPTION("--json", CLI_FLAG, offsetof(bench_generate_args, json), NULL,
                "print one JSON object per batch size")},
    {CLI_OPTION("--batch", CLI_CHOICE, offsetof(bench_generate_args, batch), "1|32|both",
                "rows generated together"),
     .choices = batch_names, .choice_values = batch_values, .show_default = 1},
    {CLI_OPTION("--precision", CLI_STRING, offsetof(bench_generate_args, precision),
                "auto|fp32|bf16|int8", "the model's weights (attn generate --precision) [auto]")},
    {CLI_OPTION("--prompt", CLI_INT, offsetof(bench_generate_args, prompt), "N",
                "prompt tokens read before generating [64]"),
     .min = 1, .max = 512},
    {CLI_OPTION("--new-tokens", CLI_INT, offsetof(bench_generate_args, new_tokens), "N",
                "tokens generated per row [64]"),
     .min = 1, .max = 512},
    {CLI_OPTION("--reps", CLI_INT, offsetof(bench_generate_args, reps), "N",
                "repetitions, of which the median is reported [3]"),
     .min = 1, .max = MAX_REPS},
};

int attn_cmd_bench_generate(int argc, char **argv)
{
    const cli_command command = {
        "bench generate",
        "attn bench generate [--json] [--batch 1|32|both] [--precision auto|fp32|bf16|int8]\n"
        "                           [--prompt N] [--new-tokens N] [--reps N]",
        "Greedy generation with GPT-2 124M (12 layers, 12 heads, 768 wide, vocabulary\n"
        "50257, random weights) and the step decoder's key/value cache: a prompt of N\n"
        "random tokens, then exactly --new-tokens tokens per row. New tokens per second of\n"
        "the generation phase (all rows), median of the repetitions; the prompt's time is\n"
        "reported apart. Batch 1 also reports the weight bytes read per second against\n"
        "the machine's read bandwidth measured in the same run.\n"
        "Threads: ATTN_NUM_THREADS; instruction set: ATTN_ISA.\n",
        bench_generate_options,
        sizeof bench_generate_options / sizeof *bench_generate_options,
        NULL};
    bench_generate_args a = {0, 0, "auto", 64, 64, 3};
    int given[sizeof bench_generate_options / sizeof *bench_generate_options] = {0};
    const int code = cli_parse(&command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    const int reps = (int)a.reps;
    const int64_t batches[2] = {a.batch != 0 ? a.batch : 1, 32};
    const int n_batches = a.batch != 0 ? 1 : 2;

    attn_model_config config = cli_gpt2_config();
    attn_model *model = NULL;
    attn_graph *graph = NULL;
    int ok = attn_model_create(&config, &model) == ATTN_OK &&
             attn_model_init(model, 0) == ATTN_OK &&
             attn_graph_create(attn_model_params(model), &graph) == ATTN_OK;
    if (!ok) {
        cli_library_error("bench generate");
        attn_graph_destroy(graph);
        attn_model_destroy(model);
        return 1;
    }
    if (cli_set_model_precision("bench generate", model, a.precision) != 0) {
        attn_graph_destroy(graph);
        attn_model_destroy(model);
        return 1;
    }
    const attn_precision precision = attn_model_precision(model);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    const char *isa = attn_isa_name(attn_get_isa());
    const int threads = attn_get_num_threads();
    const double weight_bytes = weight_bytes_per_token(&config, precision);
    if (!a.json)
        printf("attn bench generate: GPT-2 124M, %lld-token prompt, %lld new tokens, %d threads, "
               "%s, %s, median of %d runs\n",
               (long long)a.prompt, (long long)a.new_tokens, threads, isa,
               attn_precision_name(precision), reps);
    for (int i = 0; i < n_batches && ok; i++) {
        generate_figures f;
        ok = run_batch(model, graph, batches[i], a.prompt, a.new_tokens, reps, &f);
        if (!ok)
            break;
        double bandwidth = 0.0, share = 0.0;
        if (batches[i] == 1) {
            bandwidth = read_bandwidth(threads);
            share = bandwidth > 0.0 ? weight_bytes * f.tokens_per_s / bandwidth : 0.0;
        }
        if (a.json) {
            printf("{\"bench\": \"attn_generate\", \"config\": \"gpt2\", \"batch\": %lld, "
                   "\"new_tokens_per_s\": %.2f, \"prefill_s\": %.4f, \"prompt\": %lld, "
                   "\"new_tokens\": %lld, \"reps\": %d, \"threads\": %d, \"isa\": \"%s\", "
                   "\"precision\": \"%s\", \"weight_bytes_per_token\": %.0f",
                   (long long)batches[i], f.tokens_per_s, f.prefill_s, (long long)a.prompt,
                   (long long)a.new_tokens, reps, threads, isa, attn_precision_name(precision),
                   weight_bytes);
            if (batches[i] == 1)
                printf(", \"read_bandwidth_gb_s\": %.2f, \"weight_gb_s\": %.2f, "
                       "\"bandwidth_share\": %.3f",
                       bandwidth * 1e-9, weight_bytes * f.tokens_per_s * 1e-9, share);
            printf("}\n");
        } else {
            printf("batch %lld: %.1f new tokens/s (prompt read in %.3f s)\n", (long long)batches[i],
                   f.tokens_per_s, f.prefill_s);
            if (batches[i] == 1)
                printf("  weights read: %.1f MB a token, %.2f GB/s; the machine reads %.2f GB/s "
                       "(%d threads): %.0f%%\n",
                       weight_bytes * 1e-6, weight_bytes * f.tokens_per_s * 1e-9, bandwidth * 1e-9,
                       threads, 100.0 * share);
        }
        fflush(stdout);
    }
    attn_graph_destroy(graph);
    attn_model_destroy(model);
    return ok ? 0 : 1;
}
