/* Sampling (attn_generate's rules) against a scripted language model whose distributions are
 * known: temperature reshapes the distribution as p^(1/T), top-k never leaves the k best, top-p
 * keeps the smallest set reaching p, greedy is the arg-max, a seed repeats its tokens, a prompt
 * gets the same continuation whatever the batch around it, and rows stop at the stop token, at
 * max_new_tokens and when the context is full. Then the same calls on a real transformer_lm:
 * greedy continuation equals the arg-max of the teacher-forced decoder. */
#include "harness.h"
#include "core/internal.h"
#include "decode/decode_internal.h"
#include "models/step_decoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SCRIPT_VOCAB = 8, SCRIPT_MAX_ROWS = 64, SCRIPT_CONTEXT = 4096 };

/* A step decoder for a language model with scripted logits: either the same fixed logits at
 * every step (fixed != NULL), or logits in [-3, 3] hashed from the row's whole history. */
typedef struct scripted_lm {
    attn_step_decoder base;
    const float *fixed;
    uint64_t history[SCRIPT_MAX_ROWS]; /* a hash of the ids each row has read */
    uint64_t history_tmp[SCRIPT_MAX_ROWS];
} scripted_lm;

static double hash_unit(uint64_t h, uint64_t i)
{
    return (double)(attn_index_hash(h, i) >> 40) / 16777216.0;
}

static void history_logits(uint64_t history, float *logits)
{
    for (int64_t v = 0; v < SCRIPT_VOCAB; v++)
        logits[v] = (float)(6.0 * hash_unit(history, (uint64_t)v) - 3.0);
}

static attn_status scripted_step(attn_step_decoder *decoder, const int32_t *ids, float *logits,
                                 float *cross)
{
    (void)cross;
    scripted_lm *m = (scripted_lm *)decoder;
    for (int64_t r = 0; r < m->base.size; r++) {
        m->history[r] = attn_index_hash(m->history[r], (uint64_t)ids[r] + 1);
        if (m->fixed != NULL)
            memcpy(logits + r * SCRIPT_VOCAB, m->fixed, SCRIPT_VOCAB * sizeof *logits);
        else
            history_logits(m->history[r], logits + r * SCRIPT_VOCAB);
    }
    return ATTN_OK;
}

static attn_status scripted_select(attn_step_decoder *decoder, const int64_t *rows,
                                   int64_t new_size)
{
    scripted_lm *m = (scripted_lm *)decoder;
    for (int64_t r = 0; r < new_size; r++)
        m->history_tmp[r] = m->history[rows[r]];
    memcpy(m->history, m->history_tmp, (size_t)new_size * sizeof *m->history);
    return ATTN_OK;
}

/* The tests own their scripted models. */
static void scripted_keep(attn_step_decoder *decoder)
{
    (void)decoder;
}

static const attn_step_decoder_ops scripted_ops = {scripted_step, scripted_select, scripted_keep, NULL};

/* Runs attn_sample_run for n prompts on a fresh scripted model with context positions. */
static attn_status run_scripted(const float *fixed, int64_t context, int64_t n,
                                const int32_t *const *prompts, const int64_t *lengths,
                                const uint64_t *stream_ids, const attn_sample_options *options,
                                attn_generate_callback callback, void *user,
                                attn_generate_result *result)
{
    static scripted_lm m;
    memset(&m, 0, sizeof m);
    const int64_t steps = attn_sample_steps_needed(n, lengths, options, context);
    m.base = (attn_step_decoder){&scripted_ops, n, n, steps, 0, SCRIPT_VOCAB, 0, 0, 0};
    m.fixed = fixed;
    return attn_sample_run(&m.base, context, n, prompts, lengths, stream_ids, options, callback,
                           user, result);
}

static void free_generations(attn_generate_result *result)
{
    for (int64_t i = 0; i < result->size; i++)
        free(result->generations[i].tokens);
    free(result->generations);
    memset(result, 0, sizeof *result);
}

static const int32_t ONE_TOKEN_PROMPT[1] = {ATTN_EOS_ID};

/* Counts of each token over rows x max_new_tokens draws from fixed logits. */
static void count_draws(const float *logits, const attn_sample_options *options, int64_t rows,
                        int64_t *counts)
{
    const int32_t *prompts[SCRIPT_MAX_ROWS];
    int64_t lengths[SCRIPT_MAX_ROWS];
    for (int64_t i = 0; i < rows; i++)
        prompts[i] = ONE_TOKEN_PROMPT, lengths[i] = 1;
    attn_generate_result result = {0};
    CHECK_OK(run_scripted(logits, SCRIPT_CONTEXT, rows, prompts, lengths, NULL, options, NULL, NULL,
                          &result));
    memset(counts, 0, SCRIPT_VOCAB * sizeof *counts);
    for (int64_t i = 0; i < result.size; i++) {
        CHECK(result.generations[i].length == options->max_new_tokens, "row %lld drew %lld",
              (long long)i, (long long)result.generations[i].length);
        for (int64_t t = 0; t < result.generations[i].length; t++)
            counts[result.generations[i].tokens[t]]++;
    }
    free_generations(&result);
}

/* Each count within 5 standard deviations of draws * expected[v]. */
static void check_frequencies(const int64_t *counts, const double *expected, int64_t draws,
                              const char *what)
{
    for (int64_t v = 0; v < SCRIPT_VOCAB; v++) {
        const double mean = (double)draws * expected[v];
        const double sd = sqrt((double)draws * expected[v] * (1.0 - expected[v]));
        CHECK(fabs((double)counts[v] - mean) <= 5.0 * sd + 1e-9,
              "%s: token %lld drawn %lld times, expected %.1f +- %.1f", what, (long long)v,
              (long long)counts[v], mean, sd);
    }
}

static const double BASE_P[SCRIPT_VOCAB] = {0.02, 0.08, 0.3, 0.05, 0.2, 0.15, 0.1, 0.1};

static void base_logits(float *logits)
{
    for (int64_t v = 0; v < SCRIPT_VOCAB; v++)
        logits[v] = (float)log(BASE_P[v]) + 1.5f; /* a shift changes nothing */
}

static void test_temperature_shapes_the_distribution(void)
{
    float logits[SCRIPT_VOCAB];
    base_logits(logits);
    const double temperatures[3] = {1.0, 0.5, 2.0};
    for (int k = 0; k < 3; k++) {
        attn_sample_options options = attn_sample_default_options();
        options.temperature = temperatures[k];
        options.max_new_tokens = 1000;
        options.seed = 11;
        int64_t counts[SCRIPT_VOCAB];
        count_draws(logits, &options, 20, counts);
        double expected[SCRIPT_VOCAB], total = 0;
        for (int64_t v = 0; v < SCRIPT_VOCAB; v++)
            total += expected[v] = pow(BASE_P[v], 1.0 / temperatures[k]);
        for (int64_t v = 0; v < SCRIPT_VOCAB; v++)
            expected[v] /= total;
        char what[64];
        snprintf(what, sizeof what, "temperature %g", temperatures[k]);
        check_frequencies(counts, expected, 20000, what);
    }
}

static void test_top_k_keeps_the_k_best(void)
{
    float logits[SCRIPT_VOCAB];
    base_logits(logits);
    /* The three best: ids 2 (0.3), 4 (0.2), 5 (0.15), renormalised. */
    attn_sample_options options = attn_sample_default_options();
    options.top_k = 3;
    options.max_new_tokens = 1000;
    int64_t counts[SCRIPT_VOCAB];
    count_draws(logits, &options, 10, counts);
    double expected[SCRIPT_VOCAB] = {0};
    expected[2] = 0.3 / 0.65, expected[4] = 0.2 / 0.65, expected[5] = 0.15 / 0.65;
    check_frequencies(counts, expected, 10000, "top_k 3");
    /* Ties at the k-th place go to the lower id: ids 6 and 7 have equal logits. */
    options.top_k = 4;
    count_draws(logits, &options, 10, counts);
    CHECK(counts[6] > 0 && counts[7] == 0 && counts[1] == 0,
          "top_k 4 drew ids 1, 6, 7: %lld %lld %lld", (long long)counts[1], (long long)counts[6],
          (long long)counts[7]);
}

static void test_top_p_keeps_the_smallest_set_reaching_p(void)
{
    float logits[SCRIPT_VOCAB];
    base_logits(logits);
    /* Sorted: 0.3 (id 2), 0.2 (4), 0.15 (5), 0.1 (6), ... The running sums 0.3, 0.5, 0.65:
     * top_p 0.55 keeps the first three, 0.28 only the first, 0.45 the first two. */
    const double top_ps[3] = {0.55, 0.28, 0.45};
    const int kept[3] = {3, 1, 2};
    const int32_t order[3] = {2, 4, 5};
    for (int k = 0; k < 3; k++) {
        attn_sample_options options = attn_sample_default_options();
        options.top_p = top_ps[k];
        options.max_new_tokens = 1000;
        options.seed = 5;
        int64_t counts[SCRIPT_VOCAB];
        count_draws(logits, &options, 10, counts);
        double expected[SCRIPT_VOCAB] = {0}, total = 0;
        for (int i = 0; i < kept[k]; i++)
            total += BASE_P[order[i]];
        for (int i = 0; i < kept[k]; i++)
            expected[order[i]] = BASE_P[order[i]] / total;
        char what[64];
        snprintf(what, sizeof what, "top_p %g", top_ps[k]);
        check_frequencies(counts, expected, 10000, what);
    }
    /* top-k first, then top-p over the renormalised k: 0.3 / 0.5 = 0.6 reaches 0.55. */
    attn_sample_options options = attn_sample_default_options();
    options.top_k = 2;
    options.top_p = 0.55;
    options.max_new_tokens = 200;
    int64_t counts[SCRIPT_VOCAB];
    count_draws(logits, &options, 5, counts);
    CHECK(counts[2] == 1000, "top_k 2 then top_p 0.55 keeps only id 2 (%lld of 1000)",
          (long long)counts[2]);
}

/* Records what the callback sees: row, token, in order. */
typedef struct seen_tokens {
    int64_t count;
    int64_t rows[4096];
    int32_t tokens[4096];
} seen_tokens;

static attn_status remember_token(void *user, int64_t prompt, int32_t token)
{
    seen_tokens *seen = user;
    if (seen->count < 4096) {
        seen->rows[seen->count] = prompt;
        seen->tokens[seen->count] = token;
    }
    seen->count++;
    return ATTN_OK;
}

/* Prompts of lengths 1..6 over the scripted vocabulary. */
static int32_t PROMPT_IDS[6][6];
static const int32_t *PROMPTS[6];
static int64_t PROMPT_LENGTHS[6];

static void make_prompts(void)
{
    for (int i = 0; i < 6; i++) {
        PROMPT_LENGTHS[i] = 1 + (i * 5) % 6;
        for (int t = 0; t < 6; t++)
            PROMPT_IDS[i][t] = (int32_t)((i * 7 + t * 3) % SCRIPT_VOCAB);
        PROMPTS[i] = PROMPT_IDS[i];
    }
}

static void test_greedy_is_the_arg_max(void)
{
    make_prompts();
    attn_sample_options options = attn_sample_default_options();
    options.greedy = 1;
    options.temperature = 0.01; /* ignored */
    options.top_k = 1;
    options.max_new_tokens = 12;
    attn_generate_result result = {0};
    CHECK_OK(run_scripted(NULL, SCRIPT_CONTEXT, 6, PROMPTS, PROMPT_LENGTHS, NULL, &options, NULL,
                          NULL, &result));
    for (int64_t i = 0; i < result.size; i++) {
        /* Replay the row's history: each new token is the arg-max after everything before. */
        uint64_t history = 0;
        for (int64_t t = 0; t < PROMPT_LENGTHS[i]; t++)
            history = attn_index_hash(history, (uint64_t)PROMPTS[i][t] + 1);
        const attn_generation *g = &result.generations[i];
        CHECK(g->length == 12 && g->stop == ATTN_GENERATE_MAX_NEW_TOKENS,
              "prompt %lld: %lld tokens, stop %d", (long long)i, (long long)g->length,
              (int)g->stop);
        for (int64_t t = 0; t < g->length; t++) {
            float logits[SCRIPT_VOCAB];
            history_logits(history, logits);
            int32_t best = 0;
            for (int32_t v = 1; v < SCRIPT_VOCAB; v++)
                if (logits[v] > logits[best])
                    best = v;
            CHECK(g->tokens[t] == best, "prompt %lld token %lld: %d, arg-max %d", (long long)i,
                  (long long)t, (int)g->tokens[t], (int)best);
            history = attn_index_hash(history, (uint64_t)g->tokens[t] + 1);
        }
    }
    free_generations(&result);
}

static int same_generation(const attn_generation *a, const attn_generation *b)
{
    return a->length == b->length && a->stop == b->stop &&
           memcmp(a->tokens, b->tokens, (size_t)a->length * sizeof *a->tokens) == 0;
}

/* The same seed gives the same tokens; a prompt's tokens do not depend on the batch around it
 * (alone, in another order) as long as it keeps its stream id; another seed differs. */
static void test_seeds_and_batches(void)
{
    make_prompts();
    attn_sample_options options = attn_sample_default_options();
    options.seed = 42;
    options.max_new_tokens = 20;
    options.temperature = 1.3;
    options.top_p = 0.95;
    attn_generate_result all = {0}, again = {0}, other_seed = {0};
    CHECK_OK(run_scripted(NULL, SCRIPT_CONTEXT, 6, PROMPTS, PROMPT_LENGTHS, NULL, &options, NULL,
                          NULL, &all));
    CHECK_OK(run_scripted(NULL, SCRIPT_CONTEXT, 6, PROMPTS, PROMPT_LENGTHS, NULL, &options, NULL,
                          NULL, &again));
    options.seed = 43;
    CHECK_OK(run_scripted(NULL, SCRIPT_CONTEXT, 6, PROMPTS, PROMPT_LENGTHS, NULL, &options, NULL,
                          NULL, &other_seed));
    options.seed = 42;
    int differs = 0;
    for (int64_t i = 0; i < 6; i++) {
        CHECK(same_generation(&all.generations[i], &again.generations[i]),
              "prompt %lld: the same seed gave other tokens", (long long)i);
        differs |= !same_generation(&all.generations[i], &other_seed.generations[i]);
    }
    CHECK(differs, "seeds 42 and 43 gave the same tokens for every prompt");

    /* Reversed order, stream ids following the prompts. */
    const int32_t *reversed[6];
    int64_t reversed_lengths[6];
    uint64_t reversed_streams[6];
    for (int64_t i = 0; i < 6; i++) {
        reversed[i] = PROMPTS[5 - i];
        reversed_lengths[i] = PROMPT_LENGTHS[5 - i];
        reversed_streams[i] = (uint64_t)(5 - i);
    }
    attn_generate_result backwards = {0};
    CHECK_OK(run_scripted(NULL, SCRIPT_CONTEXT, 6, reversed, reversed_lengths, reversed_streams,
                          &options, NULL, NULL, &backwards));
    for (int64_t i = 0; i < 6; i++)
        CHECK(same_generation(&all.generations[5 - i], &backwards.generations[i]),
              "prompt %lld: other tokens in reversed order", (long long)(5 - i));
    /* Each alone. */
    for (int64_t i = 0; i < 6; i++) {
        attn_generate_result alone = {0};
        const uint64_t stream = (uint64_t)i;
        CHECK_OK(run_scripted(NULL, SCRIPT_CONTEXT, 1, &PROMPTS[i], &PROMPT_LENGTHS[i], &stream,
                              &options, NULL, NULL, &alone));
        CHECK(same_generation(&all.generations[i], &alone.generations[0]),
              "prompt %lld: other tokens alone than in the batch", (long long)i);
        free_generations(&alone);
    }
    free_generations(&all);
    free_generations(&again);
    free_generations(&other_seed);
    free_generations(&backwards);
}

/* The stop token ends a row without entering its tokens; the callback sees it; every row
 * stops by one of the three rules; the context rule leaves prompt + tokens = context. */
static void test_stopping(void)
{
    make_prompts();
    attn_sample_options options = attn_sample_default_options();
    options.seed = 3;
    options.max_new_tokens = 40;
    options.stop_token = 2;
    static seen_tokens seen;
    memset(&seen, 0, sizeof seen);
    attn_generate_result result = {0};
    CHECK_OK(run_scripted(NULL, SCRIPT_CONTEXT, 6, PROMPTS, PROMPT_LENGTHS, NULL, &options,
                          remember_token, &seen, &result));
    int64_t stopped_by_token = 0, seen_total = 0;
    for (int64_t i = 0; i < 6; i++) {
        const attn_generation *g = &result.generations[i];
        for (int64_t t = 0; t < g->length; t++)
            CHECK(g->tokens[t] != 2, "prompt %lld holds the stop token", (long long)i);
        stopped_by_token += g->stop == ATTN_GENERATE_STOP_TOKEN;
        CHECK(g->stop == ATTN_GENERATE_STOP_TOKEN || g->length == 40,
              "prompt %lld: %lld tokens, stop %d", (long long)i, (long long)g->length,
              (int)g->stop);
        /* The callback saw this row's tokens in order, then the stop token. */
        int64_t k = 0;
        for (int64_t s = 0; s < seen.count; s++) {
            if (seen.rows[s] != i)
                continue;
            const int32_t want = k < g->length ? g->tokens[k] : 2;
            CHECK(seen.tokens[s] == want, "prompt %lld callback token %lld: %d, expected %d",
                  (long long)i, (long long)k, (int)seen.tokens[s], (int)want);
            k++;
        }
        CHECK(k == g->length + (g->stop == ATTN_GENERATE_STOP_TOKEN),
              "prompt %lld: the callback saw %lld tokens", (long long)i, (long long)k);
        seen_total += k;
    }
    CHECK(stopped_by_token > 0, "no prompt drew the stop token in 40 draws");
    CHECK(seen_total == seen.count, "the callback saw %lld tokens, rows hold %lld",
          (long long)seen.count, (long long)seen_total);
    free_generations(&result);

    /* A context of 8 positions: a prompt of p tokens gets 8 - p new ones. */
    options.stop_token = -1;
    CHECK_OK(
        run_scripted(NULL, 8, 6, PROMPTS, PROMPT_LENGTHS, NULL, &options, NULL, NULL, &result));
    for (int64_t i = 0; i < 6; i++) {
        const attn_generation *g = &result.generations[i];
        CHECK(g->stop == ATTN_GENERATE_CONTEXT && g->length == 8 - PROMPT_LENGTHS[i],
              "prompt %lld of %lld tokens: %lld new, stop %d", (long long)i,
              (long long)PROMPT_LENGTHS[i], (long long)g->length, (int)g->stop);
    }
    free_generations(&result);
}

static attn_status refuse_token(void *user, int64_t prompt, int32_t token)
{
    (void)user, (void)prompt, (void)token;
    return attn_fail(ATTN_ERR_IO, "refuse_token: the output is closed");
}

static void test_options_and_callback_failure(void)
{
    attn_sample_options options = attn_sample_default_options();
    CHECK_OK(attn_sample_options_validate(&options));
    options.temperature = 0;
    CHECK_FAILS(attn_sample_options_validate(&options), ATTN_ERR_INVALID_ARGUMENT);
    options = attn_sample_default_options();
    options.top_p = 0;
    CHECK_FAILS(attn_sample_options_validate(&options), ATTN_ERR_INVALID_ARGUMENT);
    options = attn_sample_default_options();
    options.top_k = -1;
    CHECK_FAILS(attn_sample_options_validate(&options), ATTN_ERR_INVALID_ARGUMENT);
    options = attn_sample_default_options();
    options.max_new_tokens = 0;
    CHECK_FAILS(attn_sample_options_validate(&options), ATTN_ERR_INVALID_ARGUMENT);

    make_prompts();
    options = attn_sample_default_options();
    attn_generate_result result = {0};
    CHECK_FAILS(run_scripted(NULL, SCRIPT_CONTEXT, 6, PROMPTS, PROMPT_LENGTHS, NULL, &options,
                             refuse_token, NULL, &result),
                ATTN_ERR_IO);
    CHECK(result.generations == NULL, "a failed run keeps its generations");
}

/* ---- a real language model ------------------------------------------------------------- */

enum { LM_VOCAB = 12, LM_MAX_LEN = 16 };

static attn_model *tiny_lm(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = 16;
    c.num_heads = 2;
    c.ffn_dim = 24;
    c.decoder_layers = 2;
    c.dropout = 0.0;
    c.tgt_vocab = LM_VOCAB;
    c.max_len = LM_MAX_LEN;
    attn_model *m = NULL;
    CHECK_OK(attn_model_create(&c, &m));
    if (m != NULL) {
        CHECK_OK(attn_model_init(m, 7));
        /* Larger weights: sharper distributions, so the arg-max is no near tie. */
        attn_params *store = attn_model_params(m);
        float *values = attn_params_buffer(store, ATTN_PARAM_VALUES);
        for (size_t i = 0; i < attn_params_buffer_floats(store); i++)
            values[i] *= 3.0f;
    }
    return m;
}

/* Greedy continuation from the step decoder equals the arg-max of the teacher-forced decoder
 * (attn_model_decode) over prompt + continuation, for prompts of different lengths in one
 * batch; the context rule holds; too long a prompt and an encoder-decoder are refused. */
static void test_language_model(void)
{
    attn_model *m = tiny_lm();
    attn_graph *graph = NULL;
    if (m == NULL)
        return;
    CHECK_OK(attn_graph_create(attn_model_params(m), &graph));
    const int32_t a[3] = {2, 5, 7}, b[1] = {2}, c[6] = {2, 4, 4, 9, 10, 11};
    const int32_t *prompts[3] = {a, b, c};
    const int64_t lengths[3] = {3, 1, 6};
    attn_sample_options options = attn_sample_default_options();
    options.greedy = 1;
    options.max_new_tokens = 8;
    attn_generate_result *result = NULL;
    CHECK_OK(attn_generate(m, graph, 3, prompts, lengths, NULL, &options, NULL, NULL, &result));
    for (int64_t i = 0; result != NULL && i < 3; i++) {
        const attn_generation *g = &result->generations[i];
        const int64_t expected = lengths[i] + 8 <= LM_MAX_LEN ? 8 : LM_MAX_LEN - lengths[i];
        CHECK(g->length == expected, "prompt %lld: %lld new tokens, expected %lld", (long long)i,
              (long long)g->length, (long long)expected);
        int32_t ids[LM_MAX_LEN];
        const int64_t len = lengths[i] + g->length;
        memcpy(ids, prompts[i], (size_t)lengths[i] * sizeof *ids);
        memcpy(ids + lengths[i], g->tokens, (size_t)g->length * sizeof *ids);
        attn_graph_reset(graph);
        attn_graph_set_recording(graph, 0);
        attn_var *logits = NULL;
        CHECK_OK(attn_model_decode(m, graph, NULL, NULL, 1, len, ids, len, NULL, &logits));
        if (logits == NULL)
            continue;
        const float *z = logits->value.data;
        for (int64_t t = lengths[i] - 1; t + 1 < len; t++) {
            int32_t best = 0;
            for (int32_t v = 1; v < LM_VOCAB; v++)
                if (z[t * LM_VOCAB + v] > z[t * LM_VOCAB + best])
                    best = v;
            CHECK(ids[t + 1] == best, "prompt %lld position %lld: %d, teacher-forced arg-max %d",
                  (long long)i, (long long)(t + 1), (int)ids[t + 1], (int)best);
        }
    }
    attn_generate_result_destroy(result);
    result = NULL;

    int32_t long_prompt[LM_MAX_LEN] = {0};
    const int32_t *long_prompts[1] = {long_prompt};
    const int64_t too_long = LM_MAX_LEN, longest = LM_MAX_LEN - 1;
    CHECK_FAILS(
        attn_generate(m, graph, 1, long_prompts, &too_long, NULL, &options, NULL, NULL, &result),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "16 tokens") != NULL, "message: %s", attn_last_error());
    CHECK_OK(
        attn_generate(m, graph, 1, long_prompts, &longest, NULL, &options, NULL, NULL, &result));
    CHECK(result != NULL && result->generations[0].length == 1 &&
              result->generations[0].stop == ATTN_GENERATE_CONTEXT,
          "a prompt of max_len - 1 tokens gets one new token");
    attn_generate_result_destroy(result);
    attn_graph_destroy(graph);
    attn_model_destroy(m);

    attn_model_config config = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    config.d_model = 8;
    config.num_heads = 2;
    config.ffn_dim = 8;
    config.encoder_layers = 1;
    config.decoder_layers = 1;
    config.src_vocab = config.tgt_vocab = LM_VOCAB;
    config.max_len = LM_MAX_LEN;
    attn_model *translator = NULL;
    CHECK_OK(attn_model_create(&config, &translator));
    if (translator != NULL) {
        CHECK_OK(attn_graph_create(attn_model_params(translator), &graph));
        CHECK_FAILS(attn_generate(translator, graph, 1, prompts, lengths, NULL, &options, NULL,
                                  NULL, &result),
                    ATTN_ERR_INVALID_ARGUMENT);
        attn_graph_destroy(graph);
    }
    attn_model_destroy(translator);
}

int main(void)
{
    RUN_TEST(test_temperature_shapes_the_distribution);
    RUN_TEST(test_top_k_keeps_the_k_best);
    RUN_TEST(test_top_p_keeps_the_smallest_set_reaching_p);
    RUN_TEST(test_greedy_is_the_arg_max);
    RUN_TEST(test_seeds_and_batches);
    RUN_TEST(test_stopping);
    RUN_TEST(test_options_and_callback_failure);
    RUN_TEST(test_language_model);
    return test_summary();
}
