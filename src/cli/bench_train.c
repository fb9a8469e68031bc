/* attn bench train: training throughput of the Transformer on the two shapes.
 *
 * One step is exactly what the trainer does per update (src/train/loop.c) minus batching,
 * clipping and the schedule: reset the graph, set the dropout seed, zero the gradients,
 * attn_model_forward_loss_counted (the trainer's own loss), attn_graph_backward, one
 * attn_adam_step over the whole parameter buffer (then attn_params_values_changed, so that in
 * bf16 the weights are repacked once per update, as in the trainer). That is also what
 * bench/torch_train.py times (zero_grad, forward, loss, backward, Adam step), so the two figures
 * compare the same work.
 *
 * FLOP count (2 per multiply-add, matrix products only; the element-wise work is a few
 * percent and not counted). With Ns = batch * src_len and Nt = batch * tgt_len tokens:
 *   encoder layer: 8 Ns d^2 (Q, K, V, output projections) + 4 batch src_len^2 d (scores,
 *                  weighted sum) + 4 Ns d ffn (two FFN linears)
 *   decoder layer: self-attention 8 Nt d^2 + 4 batch tgt_len^2 d; cross-attention
 *                  4 Nt d^2 (Q, output) + 4 Ns d^2 (K, V of the memory) + 4 batch tgt_len
 *                  src_len d; FFN 4 Nt d ffn
 *   output projection: 2 Nt d vocab
 * and the backward of a product costs two products, so a step is 3x the forward:
 * SMALL 23.5 GFLOP, BASE 280 GFLOP, as issue 3 states. */
#define _POSIX_C_SOURCE 200809L
#include "attn/attn.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/precision.h"
#include "cli/library_error.h"
#include "train/distributed.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { MAX_STEPS = 1000 };

typedef struct train_shape {
    const char *name;
    int64_t d_model, heads, layers, ffn, vocab, batch, src_len, tgt_len;
    int default_steps;
    int language_model; /* GPT: a decoder alone over windows of tgt_len tokens, no source */
    int64_t classes;    /* a classifier: an encoder alone, mean-pooled, over src_len tokens */
} train_shape;

static const train_shape SHAPES[] = {
    {"small", 256, 4, 3, 1024, 64, 64, 12, 10, 20, 0, 0},
    {"base", 512, 8, 6, 2048, 8000, 32, 30, 30, 6, 0, 0},
    /* GPT-2 124M as llm.c trains it (B 4, T 64 by default). */
    {"gpt2", 768, 12, 12, 3072, 50257, 4, 0, 64, 3, 1, 0},
    /* The word-language task's classifier as attn train --task classify picks it (2.4M
     * parameters, 108 characters, 20 languages) on its batches of 4096 tokens: 340 words of
     * 12 characters (the words are 10.4 on average). */
    {"classify", 256, 4, 3, 1024, 108, 340, 12, 0, 20, 0, 20},
};

/* GPT-2's reach: --context may not exceed it. */
enum { GPT2_MAX_LEN = 1024 };

enum { WARMUP_STEPS = 2 };

typedef struct train_result {
    int64_t params;
    double step_s, cpu_s, loss, gflop;
    /* Under mpirun: the median wait for the gradient sums after the backward (the all-reduce
     * the backward did not hide), and a blocking all-reduce of the whole gradient buffer. */
    double exposed_s, allreduce_s;
    int64_t buckets;
    size_t arena_bytes;
    int arena_stable;
} train_result;

/* See the FLOP count at the top of the file. */
static double step_gflop(const train_shape *s)
{
    const double b = (double)s->batch, S = (double)s->src_len, T = (double)s->tgt_len;
    const double d = (double)s->d_model, f = (double)s->ffn, v = (double)s->vocab;
    const double ns = b * S, nt = b * T;
    const double encoder = 8 * ns * d * d + 4 * b * S * S * d + 4 * ns * d * f;
    if (s->classes > 0)
        return 3 * (double)s->layers * encoder * 1e-9; /* the head is 2 b d classes: nothing */
    if (s->language_model) {
        const double block = 8 * nt * d * d + 4 * b * T * T * d + 4 * nt * d * f;
        return 3 * ((double)s->layers * block + 2 * nt * d * v) * 1e-9;
    }
    const double decoder = 8 * nt * d * d + 4 * b * T * T * d + 4 * nt * d * d + 4 * ns * d * d +
                           4 * b * T * S * d + 4 * nt * d * f;
    const double forward = (double)s->layers * (encoder + decoder) + 2 * nt * d * v;
    return 3 * forward * 1e-9;
}

attn_model_config cli_gpt2_config(void)
{
    /* GPT-2 124M as attn convert --from llmc describes it. */
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = 768;
    c.num_heads = 12;
    c.decoder_layers = 12;
    c.ffn_dim = 3072;
    c.tgt_vocab = 50257;
    c.max_len = GPT2_MAX_LEN;
    c.dropout = 0.0;
    c.label_smoothing = 0.0;
    c.activation = ATTN_ACT_GELU_TANH;
    c.norm_first = 1;
    c.decoder_final_norm = 1;
    c.tie_output = 1;
    c.output_bias = 0;
    c.scale_embeddings = 0;
    c.positions = ATTN_POSITIONS_LEARNED;
    return c;
}

static attn_model_config shape_config(const train_shape *s)
{
    if (s->language_model)
        return cli_gpt2_config();
    attn_model_config c = attn_model_config_default(
        s->classes > 0 ? ATTN_ARCH_TRANSFORMER_CLASSIFIER : ATTN_ARCH_TRANSFORMER);
    c.d_model = s->d_model;
    c.num_heads = s->heads;
    c.encoder_layers = s->layers;
    c.decoder_layers = s->classes > 0 ? 0 : s->layers;
    c.ffn_dim = s->ffn;
    c.src_vocab = s->vocab;
    c.tgt_vocab = s->classes > 0 ? 0 : s->vocab;
    c.num_classes = s->classes;
    if (s->classes > 0) {
        c.dropout = 0.1;
        c.label_smoothing = 0.1;
        return c;
    }
    c.dropout = 0.1;
    c.label_smoothing = 0.1;
    c.tie_output = 1;
    return c;
}

typedef struct train_run {
    attn_model *model;
    attn_graph *graph;
    attn_dist *dist; /* the ranks of an mpirun, or one process */
    int32_t *ids;    /* source ids, target ids, source lengths, target lengths */
} train_run;

static void free_run(train_run *run)
{
    attn_graph_destroy(run->graph);
    attn_dist_close(run->dist);
    attn_model_destroy(run->model);
    free(run->ids);
}

/* Random word ids (4.. as attn's vocabularies number them after <pad> <s> </s> <unk>) of
 * exactly the configured lengths; each target starts with <s> and scores tgt_len tokens; a
 * classifier's texts have random classes instead. */
static int make_batch(const train_shape *s, train_run *run, attn_model_batch *batch)
{
    const int64_t tgt_len = s->tgt_len + 1;
    const size_t n = (size_t)(s->batch * (s->src_len + tgt_len + 3));
    run->ids = malloc(n * sizeof *run->ids);
    if (run->ids == NULL)
        return 0;
    int32_t *src = run->ids, *tgt = src + s->batch * s->src_len;
    int32_t *src_lengths = tgt + s->batch * tgt_len, *tgt_lengths = src_lengths + s->batch;
    attn_rng rng;
    attn_rng_seed(&rng, 1);
    for (int64_t i = 0; i < s->batch * s->src_len; i++)
        src[i] = 4 + (int32_t)attn_rng_below(&rng, (uint64_t)s->vocab - 4);
    for (int64_t i = 0; i < s->batch * tgt_len; i++)
        tgt[i] = i % tgt_len == 0 && !s->language_model
                     ? 1
                     : 4 + (int32_t)attn_rng_below(&rng, (uint64_t)s->vocab - 4);
    for (int64_t b = 0; b < s->batch; b++) {
        src_lengths[b] = (int32_t)s->src_len;
        tgt_lengths[b] = (int32_t)tgt_len;
    }
    *batch = (attn_model_batch){s->batch,    s->src_len, src,  src_lengths, tgt_len, tgt,
                                tgt_lengths, NULL,       NULL, 0,           0.0, NULL};
    if (s->classes > 0) {
        int32_t *labels = tgt_lengths + s->batch;
        for (int64_t b = 0; b < s->batch; b++)
            labels[b] = (int32_t)attn_rng_below(&rng, (uint64_t)s->classes);
        batch->tgt_len = 0;
        batch->tgt = batch->tgt_lengths = NULL;
        batch->labels = labels;
    }
    return 1;
}

/* One training update as the trainer makes it (see the top of the file). */
static attn_status train_step(train_run *run, const attn_model_batch *batch,
                              const attn_adam_options *adam, int64_t *adam_step, int step,
                              double *loss)
{
    attn_params *params = attn_model_params(run->model);
    attn_graph_reset(run->graph);
    attn_graph_set_training(run->graph, 1);
    attn_graph_set_recording(run->graph, 1);
    attn_graph_set_dropout_seed(run->graph, 1, (uint64_t)step);
    attn_params_zero_grad(params);
    attn_var *loss_var;
    int64_t tokens, correct;
    attn_status status = attn_model_forward_loss_counted(run->model, run->graph, batch, 1,
                                                         &loss_var, &tokens, &correct);
    /* Under mpirun the gradients are summed over the ranks as the backward finishes them, as
     * the trainer does; alone this is the plain backward. */
    if (status == ATTN_OK)
        status = attn_dist_backward_and_sum(run->dist, run->graph, loss_var, 1.0f, NULL);
    if (status != ATTN_OK)
        return status;
    *loss = (double)loss_var->value.data[0];
    status = attn_adam_step(adam, adam_step, (int64_t)attn_params_buffer_floats(params),
                            attn_params_buffer(params, ATTN_PARAM_VALUES),
                            attn_params_buffer(params, ATTN_PARAM_GRADS),
                            attn_params_buffer(params, ATTN_PARAM_ADAM_M),
                            attn_params_buffer(params, ATTN_PARAM_ADAM_V));
    attn_params_values_changed(params);
    return status;
}

static int measure(const train_shape *s, attn_precision precision, int steps, train_result *r)
{
    train_run run = {NULL, NULL, NULL, NULL};
    attn_model_batch batch;
    attn_model_config config = shape_config(s);
    attn_status status = attn_model_create(&config, &run.model);
    if (status == ATTN_OK)
        status = attn_model_init(run.model, 1);
    if (status == ATTN_OK)
        status = attn_graph_create(attn_model_params(run.model), &run.graph);
    if (status == ATTN_OK)
        status = attn_dist_open(attn_distributed_launched() && attn_distributed_built(),
                                attn_model_params(run.model), &run.dist);
    if (status == ATTN_OK && !make_batch(s, &run, &batch))
        status = ATTN_ERR_OUT_OF_MEMORY;
    attn_adam_options adam = attn_adam_default_options(ATTN_ADAM);
    adam.lr = 1e-4;
    adam.beta2 = 0.98;
    adam.eps = 1e-9;
    attn_graph_set_precision(run.graph, precision);
    int64_t adam_step = 0;
    double wall[MAX_STEPS], cpu[MAX_STEPS], exposed[MAX_STEPS];
    size_t arena_after_warmup = 0;
    r->arena_stable = 1;
    for (int step = 0; step < WARMUP_STEPS + steps && status == ATTN_OK; step++) {
        double wall0 = bench_seconds(CLOCK_MONOTONIC), cpu0 = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
        status = train_step(&run, &batch, &adam, &adam_step, step, &r->loss);
        if (step >= WARMUP_STEPS) {
            wall[step - WARMUP_STEPS] = bench_seconds(CLOCK_MONOTONIC) - wall0;
            cpu[step - WARMUP_STEPS] = bench_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu0;
            exposed[step - WARMUP_STEPS] = attn_dist_last_timing(run.dist).exposed_seconds;
            /* the arena stops growing after the first step: no step after it allocates */
            if (attn_graph_memory_peak(run.graph) != arena_after_warmup)
                r->arena_stable = 0;
        } else {
            arena_after_warmup = attn_graph_memory_peak(run.graph);
        }
    }
    if (status != ATTN_OK) {
        cli_library_error_in("bench train", "%s", s->name);
        free_run(&run);
        return 0;
    }
    attn_params *params = attn_model_params(run.model);
    if (attn_dist_time_allreduce(run.dist, attn_params_buffer(params, ATTN_PARAM_GRADS),
                                 (int64_t)attn_params_buffer_floats(params), 5,
                                 &r->allreduce_s) != ATTN_OK) {
        cli_library_error_in("bench train", "%s", s->name);
        free_run(&run);
        return 0;
    }
    r->exposed_s = bench_median(exposed, steps);
    r->buckets = attn_dist_last_timing(run.dist).buckets;
    r->params = attn_params_numel(params);
    r->arena_bytes = attn_graph_memory_peak(run.graph);
    r->step_s = bench_median(wall, steps);
    r->cpu_s = bench_median(cpu, steps);
    r->gflop = step_gflop(s);
    free_run(&run);
    return 1;
}

typedef struct bench_train_args {
    int json, config;       /* config: an index into config_names */
    int precision;          /* attn_precision: auto, fp32 or bf16 */
    int64_t steps, threads; /* 0: each config's default; ATTN_NUM_THREADS or all cores */
    int64_t batch, context; /* 0: the config's */
} bench_train_args;

static const char *const config_names[] = {"small", "base", "both", "gpt2", "classify", NULL};
static const char *const precision_names[] = {"auto", "fp32", "bf16", NULL};
static const int precision_values[] = {ATTN_PRECISION_AUTO, ATTN_PRECISION_FP32,
                                       ATTN_PRECISION_BF16};

static const cli_option bench_train_options[] = {
    {CLI_OPTION("--config", CLI_CHOICE, offsetof(bench_train_args, config),
                "small|base|both|gpt2|classify", "the model sizes timed (both: small and base)"),
     .choices = config_names, .show_default = 1},
    {CLI_OPTION("--batch", CLI_INT, offsetof(bench_train_args, batch), "B",
                "sentences (gpt2: sequences; classify: texts) per batch [the config's]"),
     .min = 1, .max = 1 << 16},
    {CLI_OPTION("--context", CLI_INT, offsetof(bench_train_args, context), "T",
                "gpt2: tokens per sequence [64]"),
     .min = 1, .max = GPT2_MAX_LEN},
    {CLI_OPTION("--steps", CLI_INT, offsetof(bench_train_args, steps), "N",
                "timed steps [small 20, base 6]"),
     .min = 1, .max = MAX_STEPS},
    {CLI_OPTION("--threads", CLI_INT, offsetof(bench_train_args, threads), "N",
                "threads (default: ATTN_NUM_THREADS or all cores)"),
     .min = 1, .max = 1024},
    {CLI_OPTION("--json", CLI_FLAG, offsetof(bench_train_args, json), NULL,
                "print one JSON object per config")},
    {CLI_OPTION("--precision", CLI_CHOICE, offsetof(bench_train_args, precision), "auto|fp32|bf16",
                "operands of the products, as attn train --precision (bf16: mixed precision; "
                "auto: bf16 where native, else fp32)"),
     .choices = precision_names, .choice_values = precision_values, .show_default = 1},
};

/* Under mpirun: what the ranks do together, and where the step's time goes. The ring
 * all-reduce moves 2 (N - 1) / N of the buffer in and out of each rank; that over the measured
 * time is the bandwidth the all-reduce reached (docs/distributed.md). */
static void print_ranks(const train_shape *s, const train_result *r, int ranks, int json)
{
    const double tokens = (double)(ranks * s->batch * (s->classes > 0 ? s->src_len : s->tgt_len));
    const double bytes = (double)r->params * sizeof(float);
    const double ring_bytes = 2.0 * (ranks - 1) / ranks * bytes;
    if (json) {
        printf("{\"bench\": \"attn_train_ranks\", \"config\": \"%s\", \"ranks\": %d, "
               "\"tgt_tokens_per_s\": %.1f, \"median_step_s\": %.5f, \"compute_s\": %.5f, "
               "\"allreduce_exposed_s\": %.5f, \"exposed_share\": %.4f, \"buckets\": %lld, "
               "\"gradient_bytes\": %.0f, \"allreduce_s\": %.5f, \"ring_bytes_per_rank\": %.0f, "
               "\"allreduce_gbit_per_s\": %.3f}\n",
               s->name, ranks, tokens / r->step_s, r->step_s, r->step_s - r->exposed_s,
               r->exposed_s, r->exposed_s / r->step_s, (long long)r->buckets, bytes, r->allreduce_s,
               ring_bytes, r->allreduce_s > 0.0 ? 8e-9 * ring_bytes / r->allreduce_s : 0.0);
    } else {
        printf("%s over %d processes: %.0f target tokens/s together; step %.1f ms = compute "
               "%.1f ms + all-reduce not hidden %.1f ms (%.1f%%, %lld buckets); the whole "
               "%.1f MB gradient all-reduced alone: %.1f ms (%.2f Gbit/s over the ring's "
               "2(N-1)/N x bytes)\n",
               s->name, ranks, tokens / r->step_s, r->step_s * 1e3,
               (r->step_s - r->exposed_s) * 1e3, r->exposed_s * 1e3,
               100.0 * r->exposed_s / r->step_s, (long long)r->buckets, bytes / 1e6,
               r->allreduce_s * 1e3,
               r->allreduce_s > 0.0 ? 8e-9 * ring_bytes / r->allreduce_s : 0.0);
    }
}

/* Under mpirun every rank times its own steps, its gradients summed with the others'; rank 0
 * prints (the others' stdout goes to /dev/null). */
static int join_the_ranks(int *rank, int *ranks)
{
    *rank = 0;
    *ranks = 1;
    if (!attn_distributed_launched() || !attn_distributed_built())
        return 1;
    if (attn_distributed_start(rank, ranks) != ATTN_OK) {
        cli_library_error("bench train");
        return 0;
    }
    if (*rank != 0 && freopen("/dev/null", "w", stdout) == NULL)
        return 0;
    return 1;
}

static int bench_train(int argc, char **argv, int ranks);

int attn_cmd_bench_train(int argc, char **argv)
{
    int rank, ranks;
    if (!join_the_ranks(&rank, &ranks))
        return 1;
    const int code = bench_train(argc, argv, ranks);
    if (code != 0 && ranks > 1)
        attn_distributed_abort(code);
    attn_distributed_finish();
    return code;
}

static int bench_train(int argc, char **argv, int ranks)
{
    char description[2048];
    snprintf(description, sizeof description,
             "Times Transformer training steps (forward, backward, Adam update of every\n"
             "parameter) through the trainer's own loss (attn_model_forward_loss_counted),\n"
             "attn_graph_backward and attn_adam_step\n"
             "on random batches, and prints target tokens per second at the median step time\n"
             "after %d warm-up steps.\n"
             "  small: d_model 256, 4 heads, 3+3 layers, FFN 1024, vocabularies 64,\n"
             "         64 sentences of source length 12 and 10 target tokens\n"
             "  base:  d_model 512, 8 heads, 6+6 layers, FFN 2048, vocabularies 8000,\n"
             "         32 sentences of 30 and 30\n"
             "  gpt2:  GPT-2 124M (12 layers, 12 heads, 768 wide, vocabulary 50257, learned\n"
             "         positions, pre-norm, GELU tanh, tied output), 4 sequences of 64 tokens\n"
             "         (--batch, --context), no dropout, as llm.c trains it\n"
             "  classify: the word-language classifier (an encoder alone: d_model 256, 4 heads,\n"
             "         3 layers, FFN 1024, 108 characters, mean pooling, 20 classes), 340 texts\n"
             "         of 12 tokens; its figure is text tokens per second\n"
             "Both: dropout 0.1, label smoothing 0.1, output projection tied to the target\n"
             "embedding, Adam (betas 0.9/0.98, eps 1e-9). GFLOP/s count the matrix products\n"
             "(forward 2 flops per multiply-add, backward twice the forward): 23.5 GFLOP per\n"
             "small step, 280 per base step.\n"
             "Under mpirun -np N each process times its own steps, the gradients summed over\n"
             "the processes as the trainer sums them (all-reduces started during the backward),\n"
             "and a second line gives the tokens/s of all of them, the compute and the\n"
             "all-reduce time the backward did not hide, and a whole-buffer all-reduce.\n",
             WARMUP_STEPS);
    const cli_command command = {
        "bench train",
        "attn bench train [--config small|base|both|gpt2|classify] [--steps N] [--threads N]\n"
        "                 [--json] [--precision auto|fp32|bf16] [--batch B] [--context T]",
        description,
        bench_train_options,
        sizeof bench_train_options / sizeof *bench_train_options,
        NULL};
    bench_train_args a = {0, 2, ATTN_PRECISION_AUTO, 0, 0, 0, 0};
    int given[sizeof bench_train_options / sizeof *bench_train_options] = {0};
    const int code = cli_parse(&command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    const int json = a.json, steps = (int)a.steps;
    const attn_precision requested = (attn_precision)a.precision;
    const attn_precision precision = attn_precision_resolve(requested);
    const char *precision_name = attn_precision_name(precision);
    const char *config = config_names[a.config];
    if (a.threads > 0 && attn_set_num_threads((int)a.threads) != ATTN_OK) {
        cli_library_error("bench train");
        return 2;
    }
    const char *isa = attn_isa_name(attn_get_isa());
    const int used_threads = attn_get_num_threads();
    char described[128];
    if (!json)
        printf("attn bench train: %d threads, %s, precision %s; median step after %d warm-up "
               "steps (indicative on a shared machine)\n",
               used_threads, isa, cli_precision_describe(requested, described, sizeof described),
               WARMUP_STEPS);
    cli_precision_warn_emulated("bench train", precision);
    if (a.context > 0 && strcmp(config, "gpt2") != 0)
        return cli_usage_error(&command, "--context is gpt2's window; the other configs have "
                                         "fixed sentence lengths");
    for (size_t c = 0; c < sizeof SHAPES / sizeof SHAPES[0]; c++) {
        train_shape shape = SHAPES[c];
        const train_shape *s = &shape;
        if (strcmp(config, s->name) != 0 &&
            (strcmp(config, "both") != 0 || s->language_model || s->classes > 0))
            continue;
        if (a.batch > 0)
            shape.batch = a.batch;
        if (a.context > 0)
            shape.tgt_len = a.context;
        const int n_steps = steps > 0 ? steps : s->default_steps;
        train_result r;
        memset(&r, 0, sizeof r);
        if (!measure(s, precision, n_steps, &r))
            return 1;
        /* A classifier's tokens are its texts'. */
        const double tokens = (double)(s->batch * (s->classes > 0 ? s->src_len : s->tgt_len));
        const double tokens_per_s = tokens / r.step_s;
        if (json) {
            printf("{\"bench\": \"attn_train\", \"config\": \"%s\", \"batch\": %lld, "
                   "\"context\": %lld, \"tgt_tokens_per_s\": %.1f, "
                   "\"tgt_tokens_per_step\": %.0f, \"median_step_s\": %.5f, "
                   "\"median_cpu_s_per_step\": %.5f, \"gflop_per_step\": %.2f, "
                   "\"gflops\": %.1f, \"steps\": %d, \"warmup_steps\": %d, \"params\": %lld, "
                   "\"final_loss\": %.4f, \"arena_mib\": %.1f, \"arena_stable\": %s, "
                   "\"threads\": %d, \"isa\": \"%s\", \"precision\": \"%s\"}\n",
                   s->name, (long long)s->batch,
                   (long long)(s->classes > 0 ? s->src_len : s->tgt_len), tokens_per_s, tokens,
                   r.step_s, r.cpu_s, r.gflop, r.gflop / r.step_s, n_steps, WARMUP_STEPS,
                   (long long)r.params, r.loss, (double)r.arena_bytes / (1024.0 * 1024.0),
                   r.arena_stable ? "true" : "false", used_threads, isa, precision_name);
        } else {
            printf("%s: %.0f %s tokens/s, %.1f GFLOP/s (median step %.1f ms wall, %.1f ms "
                   "CPU over %d steps; %.0f tokens and %.1f GFLOP per step; %.2f M parameters; "
                   "arena %.1f MiB%s; loss %.3f)\n",
                   s->name, tokens_per_s, s->classes > 0 ? "text" : "target", r.gflop / r.step_s,
                   r.step_s * 1e3, r.cpu_s * 1e3,
                   n_steps, tokens, r.gflop, (double)r.params / 1e6,
                   (double)r.arena_bytes / (1024.0 * 1024.0),
                   r.arena_stable ? "" : ", GREW after the warm-up", r.loss);
        }
        if (ranks > 1)
            print_ranks(s, &r, ranks, json);
        fflush(stdout);
    }
    return 0;
}
