/* attn_generate: continuing prompts with a language model's step decoder, drawing each new
 * token by temperature, top-k and top-p sampling (or the arg-max). The rules are in
 * attn_decode.h. */
#include "decode/decode_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Above this a temperature flattens every distribution to uniform in float logits anyway. */
static const double MAX_TEMPERATURE = 1e6;

attn_sample_options attn_sample_default_options(void)
{
    attn_sample_options options;
    memset(&options, 0, sizeof options);
    options.temperature = 1.0;
    options.top_p = 1.0;
    options.max_new_tokens = 200;
    options.stop_token = -1;
    return options;
}

attn_status attn_sample_options_validate(const attn_sample_options *options)
{
    static const char fn[] = "attn_generate";
    ATTN_CHECK_NOT_NULL(options);
    ATTN_CHECK_ARG(options->temperature > 0.0 && options->temperature <= MAX_TEMPERATURE,
                   "%s: temperature %g is outside (0, %g]; use greedy for the arg-max", fn,
                   options->temperature, MAX_TEMPERATURE);
    ATTN_CHECK_ARG(options->top_k >= 0, "%s: top_k %lld is negative (0 keeps every token)", fn,
                   (long long)options->top_k);
    ATTN_CHECK_ARG(options->top_p > 0.0 && options->top_p <= 1.0,
                   "%s: top_p %g is outside (0, 1] (1 turns nucleus sampling off)", fn,
                   options->top_p);
    ATTN_CHECK_ARG(options->max_new_tokens >= 1, "%s: max_new_tokens %lld must be >= 1", fn,
                   (long long)options->max_new_tokens);
    ATTN_CHECK_ARG(options->stop_token >= -1,
                   "%s: stop_token %d is negative (-1 means no stop token)", fn,
                   (int)options->stop_token);
    return ATTN_OK;
}

void attn_generate_result_destroy(attn_generate_result *result)
{
    if (result == NULL)
        return;
    for (int64_t i = 0; result->generations != NULL && i < result->size; i++)
        free(result->generations[i].tokens);
    free(result->generations);
    free(result);
}

/* New tokens prompt i may get: max_new_tokens, or fewer when they would overflow the context. */
static int64_t new_token_room(int64_t prompt_length, const attn_sample_options *options,
                              int64_t context)
{
    const int64_t room = context - prompt_length;
    return options->max_new_tokens < room ? options->max_new_tokens : room;
}

int64_t attn_sample_steps_needed(int64_t n, const int64_t *prompt_lengths,
                                 const attn_sample_options *options, int64_t context)
{
    /* A row reads its prompt in length steps (the last gives the first new token) and each
     * further new token but the last in one more. */
    int64_t steps = 1;
    for (int64_t i = 0; i < n; i++) {
        const int64_t needed =
            prompt_lengths[i] - 1 + new_token_room(prompt_lengths[i], options, context);
        steps = needed > steps ? needed : steps;
    }
    return steps;
}

/* A candidate token for top-k and top-p: its logit orders it, its weight exp((z - max) / T)
 * is its unnormalised probability. */
typedef struct candidate {
    float logit;
    int32_t id;
    double weight;
} candidate;

/* Most probable first; equal logits: the lower id first, so the order is total. */
static int compare_candidates(const void *a, const void *b)
{
    const candidate *x = a, *y = b;
    if (x->logit != y->logit)
        return x->logit > y->logit ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* A uniform double in [0, 1) from the generator's top 53 bits: finer than attn_rng_uniform's
 * 24, so tokens of probability far below 2^-24 can still be drawn. */
static double uniform_double(attn_rng *rng)
{
    return (double)(attn_rng_next_u64(rng) >> 11) * 0x1p-53;
}


/* One token from one row's logits [vocab] under options; candidates [vocab] is scratch. */
static attn_status draw_token(const float *logits, int64_t vocab,
                              const attn_sample_options *options, attn_rng *rng,
                              candidate *candidates, int32_t *token)
{
    double max = -INFINITY;
    for (int64_t v = 0; v < vocab; v++) {
        if (isnan(logits[v]))
            return attn_fail(ATTN_ERR_INTERNAL,
                             "attn_generate: the model gave a NaN logit for token %lld",
                             (long long)v);
        max = logits[v] > max ? logits[v] : max;
    }
    if (!isfinite(max))
        return attn_fail(ATTN_ERR_INTERNAL,
                         "attn_generate: the model's largest logit is %g, not a distribution", max);
    if (options->greedy) {
        *token = (int32_t)attn_argmax(vocab, logits);
        return ATTN_OK;
    }
    for (int64_t v = 0; v < vocab; v++)
        candidates[v] = (candidate){logits[v], (int32_t)v,
                                    exp(((double)logits[v] - max) / options->temperature)};
    int64_t kept = vocab;
    const int truncated = (options->top_k > 0 && options->top_k < vocab) || options->top_p < 1.0;
    if (truncated) {
        qsort(candidates, (size_t)vocab, sizeof *candidates, compare_candidates);
        if (options->top_k > 0 && options->top_k < vocab)
            kept = options->top_k;
    }
    if (options->top_p < 1.0) {
        double total = 0.0;
        for (int64_t i = 0; i < kept; i++)
            total += candidates[i].weight;
        double cumulative = 0.0;
        for (int64_t i = 0; i < kept; i++) {
            cumulative += candidates[i].weight;
            if (cumulative >= options->top_p * total) {
                kept = i + 1;
                break;
            }
        }
    }
    double total = 0.0;
    for (int64_t i = 0; i < kept; i++)
        total += candidates[i].weight;
    const double target = uniform_double(rng) * total;
    double cumulative = 0.0;
    /* The arg-max has weight 1, so total >= 1 and the walk ends on a token of weight > 0;
     * rounding can leave target at the very end, where the last such token is the answer. */
    int64_t chosen = 0;
    for (int64_t i = 0; i < kept; i++) {
        if (candidates[i].weight <= 0.0)
            continue;
        chosen = i;
        cumulative += candidates[i].weight;
        if (target < cumulative)
            break;
    }
    *token = candidates[chosen].id;
    return ATTN_OK;
}

/* Records prompt p's new token and tells whether its row stops (and why). */
static int add_token(attn_generation *generation, int64_t prompt_length, int32_t token,
                     const attn_sample_options *options, int64_t context)
{
    if (token == options->stop_token) {
        generation->stop = ATTN_GENERATE_STOP_TOKEN;
        return 1;
    }
    generation->tokens[generation->length++] = token;
    if (generation->length == options->max_new_tokens) {
        generation->stop = ATTN_GENERATE_MAX_NEW_TOKENS;
        return 1;
    }
    if (prompt_length + generation->length == context) {
        generation->stop = ATTN_GENERATE_CONTEXT;
        return 1;
    }
    return 0;
}

/* The per-call buffers: each live row's prompt, generator and next input; logits of a step. */
typedef struct sample_state {
    int64_t *prompt_of;    /* [n] decoder row -> prompt index */
    int64_t *kept;         /* [n] rows to keep after a step */
    int32_t *inputs;       /* [n] each row's input this step */
    attn_rng *rngs;        /* [n] by prompt index */
    float *logits;         /* [n, vocab] */
    candidate *candidates; /* [vocab] */
} sample_state;

static void sample_state_free(sample_state *s)
{
    free(s->prompt_of);
    free(s->kept);
    free(s->inputs);
    free(s->rngs);
    free(s->logits);
    free(s->candidates);
}

static attn_status sample_state_alloc(sample_state *s, int64_t n, int64_t vocab)
{
    memset(s, 0, sizeof *s);
    const size_t rows = (size_t)n;
    s->prompt_of = malloc(rows * sizeof *s->prompt_of);
    s->kept = malloc(rows * sizeof *s->kept);
    s->inputs = malloc(rows * sizeof *s->inputs);
    s->rngs = malloc(rows * sizeof *s->rngs);
    s->logits = malloc(rows * (size_t)vocab * sizeof *s->logits);
    s->candidates = malloc((size_t)vocab * sizeof *s->candidates);
    if (s->prompt_of == NULL || s->kept == NULL || s->inputs == NULL || s->rngs == NULL ||
        s->logits == NULL || s->candidates == NULL) {
        sample_state_free(s);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                         "attn_generate: out of memory for %lld rows of %lld logits", (long long)n,
                         (long long)vocab);
    }
    return ATTN_OK;
}

static attn_status alloc_generations(int64_t n, const int64_t *prompt_lengths,
                                     const attn_sample_options *options, int64_t context,
                                     attn_generate_result *result)
{
    result->size = n;
    result->generations = calloc((size_t)n, sizeof *result->generations);
    if (result->generations == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_generate: out of memory");
    for (int64_t i = 0; i < n; i++) {
        const int64_t room = new_token_room(prompt_lengths[i], options, context);
        result->generations[i].tokens = malloc((size_t)room * sizeof(int32_t));
        if (result->generations[i].tokens == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_generate: out of memory");
    }
    return ATTN_OK;
}

/* Steps every live row once, draws for the rows past their prompt and drops the finished. */
static attn_status sample_step(attn_step_decoder *decoder, int64_t step, int64_t context,
                               const int32_t *const *prompts, const int64_t *prompt_lengths,
                               const attn_sample_options *options, attn_generate_callback callback,
                               void *user, sample_state *s, attn_generate_result *result)
{
    const int64_t rows = attn_model_step_size(decoder), vocab = decoder->vocab;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t p = s->prompt_of[r];
        const attn_generation *g = &result->generations[p];
        s->inputs[r] = step < prompt_lengths[p] ? prompts[p][step] : g->tokens[g->length - 1];
    }
    ATTN_TRY(attn_model_step(decoder, s->inputs, s->logits, NULL));
    int64_t live = 0;
    for (int64_t r = 0; r < rows; r++) {
        const int64_t p = s->prompt_of[r];
        int stops = 0;
        if (step >= prompt_lengths[p] - 1) {
            int32_t token = 0;
            ATTN_TRY(draw_token(s->logits + r * vocab, vocab, options, &s->rngs[p], s->candidates,
                                &token));
            const attn_status told = callback != NULL ? callback(user, p, token) : ATTN_OK;
            if (told != ATTN_OK)
                return attn_fail(told,
                                 "attn_generate: the callback stopped the generation at "
                                 "prompt %lld (status %s)",
                                 (long long)p, attn_status_name(told));
            stops = add_token(&result->generations[p], prompt_lengths[p], token, options, context);
        }
        if (!stops)
            s->kept[live++] = r;
    }
    if (live < rows) {
        ATTN_TRY(attn_model_step_select(decoder, s->kept, live));
        for (int64_t r = 0; r < live; r++)
            s->prompt_of[r] = s->prompt_of[s->kept[r]];
    }
    return ATTN_OK;
}

attn_status attn_sample_run(attn_step_decoder *decoder, int64_t context, int64_t n,
                            const int32_t *const *prompts, const int64_t *prompt_lengths,
                            const uint64_t *stream_ids, const attn_sample_options *options,
                            attn_generate_callback callback, void *user,
                            attn_generate_result *result)
{
    result->size = 0;
    result->generations = NULL;
    if (n == 0)
        return ATTN_OK;
    sample_state s;
    attn_status status = alloc_generations(n, prompt_lengths, options, context, result);
    if (status == ATTN_OK)
        status = sample_state_alloc(&s, n, decoder->vocab);
    if (status != ATTN_OK) {
        for (int64_t i = 0; result->generations != NULL && i < n; i++)
            free(result->generations[i].tokens);
        free(result->generations);
        result->generations = NULL;
        return status;
    }
    for (int64_t i = 0; i < n; i++) {
        s.prompt_of[i] = i;
        attn_rng_seed(&s.rngs[i], attn_index_hash(options->seed, stream_ids != NULL ? stream_ids[i]
                                                                                    : (uint64_t)i));
    }
    /* The positions before the shortest prompt's last token draw nothing: read them in one
     * prefill, which equals stepping through them. */
    int64_t step = 0, shared = prompt_lengths[0] - 1;
    for (int64_t i = 1; i < n; i++)
        shared = prompt_lengths[i] - 1 < shared ? prompt_lengths[i] - 1 : shared;
    if (shared > 0) {
        int32_t *ids = malloc((size_t)(n * shared) * sizeof *ids);
        status = ids != NULL ? ATTN_OK
                             : attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_generate: out of memory");
        for (int64_t i = 0; i < n && status == ATTN_OK; i++)
            memcpy(ids + i * shared, prompts[i], (size_t)shared * sizeof *ids);
        if (status == ATTN_OK)
            status = attn_model_step_prefill(decoder, ids, shared, s.logits);
        free(ids);
        step = shared;
    }
    for (; status == ATTN_OK && attn_model_step_size(decoder) > 0; step++)
        status = sample_step(decoder, step, context, prompts, prompt_lengths, options, callback,
                             user, &s, result);
    sample_state_free(&s);
    if (status != ATTN_OK) {
        for (int64_t i = 0; i < n; i++)
            free(result->generations[i].tokens);
        free(result->generations);
        result->generations = NULL;
    }
    return status;
}

static attn_status check_prompts(const attn_model_config *config, int64_t n,
                                 const int32_t *const *prompts, const int64_t *prompt_lengths)
{
    static const char fn[] = "attn_generate";
    ATTN_CHECK_NOT_NULL(prompts);
    ATTN_CHECK_NOT_NULL(prompt_lengths);
    for (int64_t i = 0; i < n; i++) {
        ATTN_CHECK_ARG(prompt_lengths[i] >= 1 && prompt_lengths[i] < config->max_len,
                       "%s: prompt %lld has %lld tokens; the model's context of max_len %lld "
                       "takes 1 to %lld (room for one new token): shorten or cut the prompt",
                       fn, (long long)i, (long long)prompt_lengths[i], (long long)config->max_len,
                       (long long)config->max_len - 1);
        ATTN_CHECK_ARG(prompts[i] != NULL, "%s: prompts[%lld] is NULL", fn, (long long)i);
        for (int64_t t = 0; t < prompt_lengths[i]; t++)
            ATTN_CHECK_ARG(prompts[i][t] >= 0 && prompts[i][t] < config->tgt_vocab,
                           "%s: prompts[%lld][%lld] = %d is outside the vocabulary [0, %lld)", fn,
                           (long long)i, (long long)t, (int)prompts[i][t],
                           (long long)config->tgt_vocab);
    }
    return ATTN_OK;
}

attn_status attn_generate(attn_model *model, attn_graph *graph, int64_t n,
                          const int32_t *const *prompts, const int64_t *prompt_lengths,
                          const uint64_t *stream_ids, const attn_sample_options *options,
                          attn_generate_callback callback, void *user, attn_generate_result **out)
{
    static const char fn[] = "attn_generate";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_TRY(attn_sample_options_validate(options));
    const attn_model_config *config = attn_model_get_config(model);
    ATTN_CHECK_ARG(config->arch == ATTN_ARCH_TRANSFORMER_LM,
                   "%s: the model is not a language model (arch transformer_lm); an "
                   "encoder-decoder translates (attn_decode) instead",
                   fn);
    ATTN_CHECK_ARG(attn_graph_params(graph) == attn_model_params(model),
                   "%s: graph is not a graph of the model's parameters", fn);
    ATTN_CHECK_ARG(n >= 0, "%s: negative prompt count %lld", fn, (long long)n);
    if (n > 0)
        ATTN_TRY(check_prompts(config, n, prompts, prompt_lengths));

    attn_generate_result *result = calloc(1, sizeof *result);
    if (result == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = ATTN_OK;
    if (n > 0) {
        attn_graph_reset(graph);
        attn_graph_set_recording(graph, 0);
        attn_graph_set_training(graph, 0);
        attn_step_decoder *decoder = NULL;
        status = attn_model_step_start(
            model, graph, NULL, NULL, n,
            attn_sample_steps_needed(n, prompt_lengths, options, config->max_len), &decoder);
        if (status == ATTN_OK)
            status = attn_sample_run(decoder, config->max_len, n, prompts, prompt_lengths,
                                     stream_ids, options, callback, user, result);
        attn_model_step_destroy(decoder);
    }
    if (status != ATTN_OK) {
        attn_generate_result_destroy(result);
        return status;
    }
    *out = result;
    return ATTN_OK;
}
