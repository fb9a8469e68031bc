/* Training-step throughput of the RNN encoder-decoders, until `attn bench` grows an rnn
 * mode. Not built by CMake; from the source tree after `make`:
 *
 *   cc -O2 -std=c11 -Iinclude bench/rnn_step.c build/libattn.a -lcjson -lpng -lm -fopenmp \
 *      -o build/rnn_step
 *   ATTN_NUM_THREADS=2 build/rnn_step bahdanau     # or: luong
 *
 * bahdanau: bidirectional GRU encoder and GRU decoder, 1 layer, hidden, embeddings and
 * attention 256, vocabularies 8000. luong: 2-layer LSTM encoder and decoder, hidden 256,
 * general scores, input feeding. Batch 64 of 20 source and 20 target tokens. A step is
 * forward, backward and a plain SGD update. Prints the median of several steps after two
 * warm-up steps, in wall time and in this process's CPU time (the machine may be shared: CPU
 * time divided by the thread count is the less noisy figure then). */
#define _POSIX_C_SOURCE 200809L
#include "attn/attn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double seconds(clockid_t clock)
{
    struct timespec t;
    clock_gettime(clock, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int ascending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int fail(const char *what)
{
    fprintf(stderr, "rnn_step: %s: %s\n", what, attn_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    int luong = argc > 1 && strcmp(argv[1], "luong") == 0;
    if (argc > 2 || (argc == 2 && !luong && strcmp(argv[1], "bahdanau") != 0)) {
        fprintf(stderr, "usage: rnn_step [bahdanau|luong]\n");
        return 2;
    }
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.src_vocab = c.tgt_vocab = 8000;
    c.dropout = 0.0;
    if (luong) {
        c.cell = ATTN_RNN_LSTM;
        c.layers = 2;
        c.bidirectional = 0;
        c.attention = ATTN_RNN_LUONG_GENERAL;
        c.input_feeding = 1;
    }
    const int64_t batch_size = 64, src_len = 20, tgt_len = 20 + 1; /* <s> + predicted */
    enum { STEPS = 7 };

    attn_model *model = NULL;
    if (attn_model_create(&c, &model) != ATTN_OK || attn_model_init(model, 1) != ATTN_OK)
        return fail("model");
    attn_params *params = attn_model_params(model);
    int32_t *src = malloc((size_t)(batch_size * src_len) * sizeof *src);
    int32_t *tgt = malloc((size_t)(batch_size * tgt_len) * sizeof *tgt);
    int32_t *src_lengths = malloc((size_t)batch_size * sizeof *src_lengths);
    int32_t *tgt_lengths = malloc((size_t)batch_size * sizeof *tgt_lengths);
    if (!src || !tgt || !src_lengths || !tgt_lengths)
        return fail("out of memory");
    attn_rng rng;
    attn_rng_seed(&rng, 1);
    for (int64_t i = 0; i < batch_size * src_len; i++)
        src[i] = 4 + (int32_t)attn_rng_below(&rng, (uint64_t)c.src_vocab - 4);
    for (int64_t i = 0; i < batch_size * tgt_len; i++)
        tgt[i] = 4 + (int32_t)attn_rng_below(&rng, (uint64_t)c.tgt_vocab - 4);
    for (int64_t b = 0; b < batch_size; b++) {
        src_lengths[b] = (int32_t)src_len;
        tgt_lengths[b] = (int32_t)tgt_len;
        tgt[b * tgt_len] = 1;
    }
    attn_model_batch batch = {batch_size, src_len, src, src_lengths,
                              tgt_len,    tgt,     tgt_lengths, NULL};
    attn_graph *graph = NULL;
    if (attn_graph_create(params, &graph) != ATTN_OK)
        return fail("graph");

    double wall[STEPS], cpu[STEPS];
    float *values = attn_params_buffer(params, ATTN_PARAM_VALUES);
    const float *grads = attn_params_buffer(params, ATTN_PARAM_GRADS);
    const size_t n_values = attn_params_buffer_floats(params);
    for (int step = 0; step < STEPS + 2; step++) {
        double wall0 = seconds(CLOCK_MONOTONIC), cpu0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
        attn_graph_reset(graph);
        attn_params_zero_grad(params);
        attn_var *loss = NULL;
        if (attn_model_forward_loss(model, graph, &batch, &loss) != ATTN_OK)
            return fail("forward");
        if (attn_graph_backward(graph, loss) != ATTN_OK)
            return fail("backward");
        for (size_t i = 0; i < n_values; i++)
            values[i] -= 1e-4f * grads[i];
        if (step >= 2) {
            wall[step - 2] = seconds(CLOCK_MONOTONIC) - wall0;
            cpu[step - 2] = seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
        }
    }
    qsort(wall, STEPS, sizeof *wall, ascending);
    qsort(cpu, STEPS, sizeof *cpu, ascending);
    const double tokens = (double)(batch_size * (tgt_len - 1));
    const int threads = attn_get_num_threads();
    printf("%s (%lld parameters, %d threads, %s): step %.1f ms wall, %.0f target tokens/s; "
           "%.1f ms CPU, %.0f tokens/s per CPU-second x %d threads; arena %.0f MB\n",
           luong ? "luong" : "bahdanau", (long long)attn_params_numel(params), threads,
           attn_isa_name(attn_get_isa()), wall[STEPS / 2] * 1e3, tokens / wall[STEPS / 2],
           cpu[STEPS / 2] * 1e3, tokens / cpu[STEPS / 2] * threads, threads,
           (double)attn_graph_memory_peak(graph) / 1e6);
    attn_graph_destroy(graph);
    attn_model_destroy(model);
    free(src);
    free(tgt);
    free(src_lengths);
    free(tgt_lengths);
    return 0;
}
