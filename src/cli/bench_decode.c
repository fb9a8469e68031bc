/* attn bench decode: greedy decoding throughput of the SMALL Transformer, in sentences per
 * second, the counterpart of bench/torch_decode.py: d_model 256, 4 heads, 3 + 3 layers, FFN
 * 1024, vocabularies 64 / 64, post-norm with final norms and a tied output, random weights,
 * sources of 12 tokens, generation forced to 10 tokens (no early stop). One sentence batch
 * is: reset the graph, encode, start a step decoder, 10 steps each taking every row's
 * arg-max, destroy. Like the PyTorch script, each repetition decodes batches for at least
 * --min-seconds, and the median of the repetitions' rates is reported.
 *
 * --beam K (> 1) keeps K hypotheses per sentence instead, still for exactly TOKENS steps: each
 * step takes the log-softmax of every row, the K best of each sentence's K x vocab extensions,
 * and selects the decoder's rows, the work of attn_decode's beam search without its stopping
 * rules (which would make the work depend on the random weights and the precision).
 *
 * Beside the wall-clock rate, seqs_per_cpu_s counts sentences per second of CPU time used by
 * the process. On a shared, overloaded machine a single-threaded run's CPU rate is the better
 * estimate of its speed on a quiet one (threads that wait count as CPU time when they spin,
 * so it understates multi-threaded runs).
 *
 * --arch rnn decodes the default RNN model instead (attn_model_config_default: one layer of
 * GRUs, 256 units, bidirectional encoder, Bahdanau attention, 256-wide embeddings), with the
 * same vocabularies, sources and steps: the counterpart for RNN models' precisions. */
#include "attn/attn.h"
#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/library_error.h"
#include "cli/precision.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SRC_LEN = 12, TOKENS = 10, VOCAB = 64, BOS_ID = 1, FIRST_WORD_ID = 3, MAX_REPS = 64 };

static attn_model_config small_config(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = 256;
    c.num_heads = 4;
    c.encoder_layers = 3;
    c.decoder_layers = 3;
    c.ffn_dim = 1024;
    c.src_vocab = VOCAB;
    c.tgt_vocab = VOCAB;
    c.max_len = 256;
    return c;
}

static attn_model_config rnn_config(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.src_vocab = VOCAB;
    c.tgt_vocab = VOCAB;
    c.max_len = 256;
    return c;
}

typedef struct decode_run {
    attn_model *model;
    attn_graph *graph;
    int64_t batch, beam;
    int32_t *src, *src_lengths, *ids, *out;
    float *logits;
    double *scores, *candidates; /* beam: [batch * beam] hypotheses' and new ones' log-probs */
    int64_t *parents;            /* beam: [batch * beam] the row each new hypothesis extends */
} decode_run;

/* Row's log-softmax, in place. */
static void log_softmax(float *row)
{
    float top = row[0];
    for (int v = 1; v < VOCAB; v++)
        top = row[v] > top ? row[v] : top;
    double sum = 0.0;
    for (int v = 0; v < VOCAB; v++)
        sum += exp((double)(row[v] - top));
    const float shift = top + (float)log(sum);
    for (int v = 0; v < VOCAB; v++)
        row[v] -= shift;
}

/* One step of a fixed-length beam: rows = size current hypotheses (beam per sentence, or one
 * at the first step) -> batch * beam new ones, in ids, scores and the decoder's rows. */
static attn_status beam_step(decode_run *r, attn_step_decoder *d, int64_t size, int t)
{
    const int64_t per_sentence = size / r->batch, K = r->beam;
    for (int64_t b = 0; b < r->batch; b++) {
        for (int64_t k = 0; k < K; k++) {
            double best = -INFINITY;
            int64_t best_row = 0;
            int32_t best_token = 0;
            for (int64_t p = 0; p < per_sentence; p++) {
                const int64_t row = b * per_sentence + p;
                const float *logp = r->logits + row * VOCAB;
                for (int32_t v = 0; v < VOCAB; v++) {
                    const double score = r->scores[row] + (double)logp[v];
                    int taken = 0;
                    for (int64_t j = 0; j < k && !taken; j++)
                        taken = r->parents[b * K + j] == row && r->ids[b * K + j] == v;
                    if (!taken && score > best) {
                        best = score;
                        best_row = row;
                        best_token = v;
                    }
                }
            }
            r->candidates[b * K + k] = best;
            r->parents[b * K + k] = best_row;
            r->ids[b * K + k] = best_token;
        }
    }
    memcpy(r->scores, r->candidates, (size_t)(r->batch * K) * sizeof(double));
    for (int64_t b = 0; b < r->batch; b++)
        r->out[b * TOKENS + t] = r->ids[b * K];
    return attn_model_step_select(d, r->parents, r->batch * K);
}

/* One batch: encode, then TOKENS greedy (or beam) steps; out [batch, TOKENS] gets the tokens
 * (of the best hypothesis at each step, with a beam). */
static attn_status decode_batch(decode_run *r)
{
    attn_graph_reset(r->graph);
    attn_var *memory;
    attn_step_decoder *d = NULL;
    attn_status status =
        attn_model_encode(r->model, r->graph, r->batch, SRC_LEN, r->src, r->src_lengths, &memory);
    if (status == ATTN_OK)
        status = attn_model_step_start(r->model, r->graph, memory, r->src_lengths,
                                       r->batch * r->beam, TOKENS, &d);
    for (int64_t b = 0; b < r->batch; b++) {
        r->ids[b] = BOS_ID;
        if (r->beam > 1)
            r->scores[b] = 0.0;
    }
    for (int t = 0; t < TOKENS && status == ATTN_OK && r->beam > 1; t++) {
        const int64_t size = attn_model_step_size(d);
        status = attn_model_step(d, r->ids, r->logits, NULL);
        for (int64_t row = 0; row < size && status == ATTN_OK; row++)
            log_softmax(r->logits + row * VOCAB);
        if (status == ATTN_OK)
            status = beam_step(r, d, size, t);
    }
    for (int t = 0; t < TOKENS && status == ATTN_OK && r->beam == 1; t++) {
        status = attn_model_step(d, r->ids, r->logits, NULL);
        for (int64_t b = 0; b < r->batch && status == ATTN_OK; b++) {
            const int32_t best = (int32_t)attn_argmax(VOCAB, r->logits + b * VOCAB);
            r->ids[b] = best;
            r->out[b * TOKENS + t] = best;
        }
    }
    attn_model_step_destroy(d);
    return status;
}

/* The median wall-clock and CPU-time rates over reps repetitions of at least min_seconds
 * each; 0 on failure. */
static int measure(decode_run *r, int reps, double min_seconds, double *rate, double *cpu_rate)
{
    double rates[MAX_REPS], cpu_rates[MAX_REPS];
    if (decode_batch(r) != ATTN_OK) /* warm-up: the arena and GEMM buffers grow once */
        return 0;
    for (int i = 0; i < reps; i++) {
        long calls = 0;
        const double start = bench_seconds(CLOCK_MONOTONIC);
        const double cpu_start = bench_seconds(CLOCK_PROCESS_CPUTIME_ID);
        double elapsed;
        do {
            if (decode_batch(r) != ATTN_OK)
                return 0;
            calls++;
            elapsed = bench_seconds(CLOCK_MONOTONIC) - start;
        } while (elapsed < min_seconds);
        const double cpu = bench_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
        rates[i] = (double)r->batch * (double)calls / elapsed;
        cpu_rates[i] = (double)r->batch * (double)calls / (cpu > 0.0 ? cpu : elapsed);
    }
    *rate = bench_median(rates, reps);
    *cpu_rate = bench_median(cpu_rates, reps);
    return 1;
}

static int run_batch(attn_model *model, attn_graph *graph, int64_t batch, int64_t beam, int reps,
                     double min_seconds, double *rate, double *cpu_rate)
{
    decode_run r = {model, graph, batch, beam, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    const size_t rows = (size_t)(batch * beam);
    r.src = malloc((size_t)(batch * SRC_LEN) * sizeof(int32_t));
    r.src_lengths = malloc((size_t)batch * sizeof(int32_t));
    r.ids = malloc(rows * sizeof(int32_t));
    r.scores = malloc(rows * sizeof(double));
    r.candidates = malloc(rows * sizeof(double));
    r.parents = malloc(rows * sizeof(int64_t));
    r.out = malloc((size_t)(batch * TOKENS) * sizeof(int32_t));
    r.logits = malloc(rows * VOCAB * sizeof(float));
    int ok = r.src != NULL && r.src_lengths != NULL && r.ids != NULL && r.out != NULL &&
             r.logits != NULL && r.scores != NULL && r.candidates != NULL && r.parents != NULL;
    if (ok) {
        attn_rng rng;
        attn_rng_seed(&rng, 1);
        for (int64_t i = 0; i < batch * SRC_LEN; i++)
            r.src[i] = FIRST_WORD_ID + (int32_t)attn_rng_below(&rng, VOCAB - FIRST_WORD_ID);
        for (int64_t b = 0; b < batch; b++)
            r.src_lengths[b] = SRC_LEN;
        ok = measure(&r, reps, min_seconds, rate, cpu_rate);
        if (!ok)
            cli_library_error("bench decode");
    } else {
        fprintf(stderr, "attn bench decode: out of memory\n");
    }
    free(r.src);
    free(r.src_lengths);
    free(r.ids);
    free(r.out);
    free(r.logits);
    free(r.scores);
    free(r.candidates);
    free(r.parents);
    return ok;
}

typedef struct bench_decode_args {
    int json, quick, batch; /* batch 0: both */
    int64_t reps;           /* 0: 5, or 3 with --quick */
    double min_seconds;     /* 0: 0.5, or 0.2 with --quick */
    const char *precision;  /* auto, fp32, bf16 or int8 */
    int64_t beam;           /* 0: 1 (greedy) */
    int rnn;                /* --arch rnn */
} bench_decode_args;

static const char *const batch_names[] = {"1", "64", "both", NULL};
static const int batch_values[] = {1, 64, 0};
static const char *const arch_names[] = {"transformer", "rnn", NULL};
static const int arch_values[] = {0, 1};

static const cli_option bench_decode_options[] = {
    {CLI_OPTION("--json", CLI_FLAG, offsetof(bench_decode_args, json), NULL,
                "print one JSON object per batch size")},
    {CLI_OPTION("--quick", CLI_FLAG, offsetof(bench_decode_args, quick), NULL,
                "3 repetitions of 0.2 s")},
    {CLI_OPTION("--batch", CLI_CHOICE, offsetof(bench_decode_args, batch), "1|64|both",
                "sentences decoded together"),
     .choices = batch_names, .choice_values = batch_values, .show_default = 1},
    {CLI_OPTION("--reps", CLI_INT, offsetof(bench_decode_args, reps), "N",
                "repetitions, of which the median is reported [5; --quick: 3]"),
     .min = 1, .max = MAX_REPS},
    {CLI_OPTION("--min-seconds", CLI_NUMBER, offsetof(bench_decode_args, min_seconds), "S",
                "the shortest repetition [0.5; --quick: 0.2]"),
     .min = 0.001, .max = 600},
    {CLI_OPTION("--beam", CLI_INT, offsetof(bench_decode_args, beam), "K",
                "hypotheses per sentence, each for all the tokens (no early stop) [1: greedy]"),
     .min = 1, .max = 64},
    {CLI_OPTION("--precision", CLI_STRING, offsetof(bench_decode_args, precision),
                "auto|fp32|bf16|int8",
                "the step decoder's products (attn translate --precision) [auto]")},
    {CLI_OPTION("--arch", CLI_CHOICE, offsetof(bench_decode_args, rnn), "transformer|rnn",
                "the SMALL Transformer, or the default RNN model [transformer]"),
     .choices = arch_names, .choice_values = arch_values},
};

int attn_cmd_bench_decode(int argc, char **argv)
{
    char description[1024];
    snprintf(description, sizeof description,
             "Greedy (or --beam K) decoding of the SMALL Transformer (d_model 256, 4 heads,\n"
             "3 + 3 layers, FFN 1024, vocabularies 64 / 64, random weights), sources of %d\n"
             "tokens, exactly %d tokens generated, with the step decoder's key/value cache;\n"
             "the encoder is included. --precision bf16|int8 quantizes the model first (as\n"
             "attn translate --precision does). --arch rnn: the default RNN model (one layer\n"
             "of GRUs, 256 units, bidirectional encoder, Bahdanau attention) instead.\n"
             "Sentences per second, median of N repetitions\n"
             "of at least S seconds\n"
             "each. Also sentences per CPU-second of the process: on an overloaded machine,\n"
             "the better estimate of a single-threaded run's speed.\n"
             "Threads: ATTN_NUM_THREADS; instruction set: ATTN_ISA.\n",
             SRC_LEN, TOKENS);
    const cli_command command = {
        "bench decode",
        "attn bench decode [--json] [--quick] [--batch 1|64|both] [--reps N]\n"
        "                         [--min-seconds S] [--beam K] [--precision auto|fp32|bf16|int8]\n"
        "                         [--arch transformer|rnn]",
        description,
        bench_decode_options,
        sizeof bench_decode_options / sizeof *bench_decode_options,
        NULL};
    bench_decode_args a = {0, 0, 0, 0, 0.0, "auto", 0, 0};
    int given[sizeof bench_decode_options / sizeof *bench_decode_options] = {0};
    const int code = cli_parse(&command, argc, argv, &a, given);
    if (code != CLI_GO_ON)
        return code;
    const int json = a.json;
    const int64_t beam = a.beam > 0 ? a.beam : 1;
    const int reps = a.reps > 0 ? (int)a.reps : a.quick ? 3 : 5;
    const double min_seconds = a.min_seconds > 0.0 ? a.min_seconds : a.quick ? 0.2 : 0.5;
    const int batches[2] = {a.batch != 0 ? a.batch : 1, 64};
    const int n_batches = a.batch != 0 ? 1 : 2;

    attn_model_config config = a.rnn ? rnn_config() : small_config();
    const char *config_name = a.rnn ? "rnn" : "small";
    attn_model *model = NULL;
    attn_graph *graph = NULL;
    int ok = attn_model_create(&config, &model) == ATTN_OK &&
             attn_model_init(model, 0) == ATTN_OK &&
             attn_graph_create(attn_model_params(model), &graph) == ATTN_OK;
    if (!ok) {
        cli_library_error("bench decode");
        attn_model_destroy(model);
        return 1;
    }
    if (cli_set_model_precision("bench decode", model, a.precision) != 0) {
        attn_graph_destroy(graph);
        attn_model_destroy(model);
        return 1;
    }
    const char *precision = attn_precision_name(attn_model_precision(model));
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    const char *isa = attn_isa_name(attn_get_isa());
    const int threads = attn_get_num_threads();
    if (!json)
        printf("attn bench decode: %s, %d source tokens, %d generated, beam "
               "%lld, %d threads, %s, %s, median of %d runs of >= %.2f s\n",
               a.rnn ? "default RNN model" : "small Transformer", SRC_LEN, TOKENS, (long long)beam,
               threads, isa, precision, reps, min_seconds);
    for (int i = 0; i < n_batches && ok; i++) {
        double rate = 0.0, cpu_rate = 0.0;
        ok = run_batch(model, graph, batches[i], beam, reps, min_seconds, &rate, &cpu_rate);
        if (!ok)
            break;
        if (json)
            printf("{\"bench\": \"attn_decode\", \"config\": \"%s\", \"batch\": %d, "
                   "\"seqs_per_s\": %.2f, \"seqs_per_cpu_s\": %.2f, \"tokens\": %d, "
                   "\"src_len\": %d, \"reps\": %d, \"threads\": %d, \"isa\": \"%s\", "
                   "\"precision\": \"%s\", \"beam\": %lld}\n",
                   config_name, batches[i], rate, cpu_rate, TOKENS, SRC_LEN, reps, threads, isa,
                   precision, (long long)beam);
        else
            printf("%s, batch %d: %.1f sentences/s (%.1f per CPU-second)\n", config_name,
                   batches[i], rate, cpu_rate);
        fflush(stdout);
    }
    attn_graph_destroy(graph);
    attn_model_destroy(model);
    return ok ? 0 : 1;
}
