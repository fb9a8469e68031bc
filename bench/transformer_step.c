/* Training-step throughput of the Transformer on the two benchmark shapes, until
 * `attn bench` grows a transformer mode. Not built by CMake; from the source tree after `make`:
 *
 *   cc -O2 -std=c11 -Iinclude bench/transformer_step.c build/libattn.a -lcjson -lm -fopenmp \
 *      -o build/transformer_step
 *   ATTN_NUM_THREADS=2 build/transformer_step small     # or: base
 *
 * SMALL: d_model 256, 4 heads, 3+3 layers, FFN 1024, vocabularies 64, batch 64 of source
 * length 12 and 10 target tokens. BASE: 512, 8 heads, 6+6, FFN 2048, vocabularies 8000, batch
 * 32 of 30 and 30. A step is forward, backward and a plain SGD update over the parameter
 * buffer (the real optimizer comes with the training work). Prints the median of several
 * steps after two warm-up steps, in wall time and in this process's CPU time (the machine may
 * be shared: CPU time divided by the thread count is the less noisy figure then). */
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
    fprintf(stderr, "transformer_step: %s: %s\n", what, attn_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    int base = argc > 1 && strcmp(argv[1], "base") == 0;
    if (argc > 2 || (argc == 2 && !base && strcmp(argv[1], "small") != 0)) {
        fprintf(stderr, "usage: transformer_step [small|base]\n");
        return 2;
    }
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = base ? 512 : 256;
    c.num_heads = base ? 8 : 4;
    c.encoder_layers = c.decoder_layers = base ? 6 : 3;
    c.ffn_dim = base ? 2048 : 1024;
    c.src_vocab = c.tgt_vocab = base ? 8000 : 64;
    const int64_t batch_size = base ? 32 : 64, src_len = base ? 30 : 12;
    const int64_t tgt_len = (base ? 30 : 10) + 1; /* <s> + the predicted tokens */
    const int steps = base ? 5 : 11;

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

    double wall[16], cpu[16];
    float *values = attn_params_buffer(params, ATTN_PARAM_VALUES);
    const float *grads = attn_params_buffer(params, ATTN_PARAM_GRADS);
    const size_t n_values = attn_params_buffer_floats(params);
    for (int step = 0; step < steps + 2; step++) {
        double wall0 = seconds(CLOCK_MONOTONIC), cpu0 = seconds(CLOCK_PROCESS_CPUTIME_ID);
        attn_graph_reset(graph);
        attn_graph_set_dropout_seed(graph, 1, (uint64_t)step);
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
    qsort(wall, (size_t)steps, sizeof *wall, ascending);
    qsort(cpu, (size_t)steps, sizeof *cpu, ascending);
    const double tokens = (double)(batch_size * (tgt_len - 1));
    const int threads = attn_get_num_threads();
    printf("%s (%lld parameters, %d threads, %s): step %.1f ms wall, %.0f target tokens/s; "
           "%.1f ms CPU, %.0f tokens/s per CPU-second x %d threads; arena %.0f MB\n",
           base ? "BASE" : "SMALL", (long long)attn_params_numel(params), threads,
           attn_isa_name(attn_get_isa()), wall[steps / 2] * 1e3, tokens / wall[steps / 2],
           cpu[steps / 2] * 1e3, tokens / cpu[steps / 2] * threads, threads,
           (double)attn_graph_memory_peak(graph) / 1e6);
    attn_graph_destroy(graph);
    attn_model_destroy(model);
    free(src);
    free(tgt);
    free(src_lengths);
    free(tgt_lengths);
    return 0;
}
