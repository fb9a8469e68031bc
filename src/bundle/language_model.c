/* A language model's bundle: prompts in, sampled text out (attn_generate), and the perplexity
 * of a text. The token stream's convention (a line's ids, then </s>) is in attn_bundle.h. */
#include "attn/attn_bundle.h"

#include "bundle/bundle_internal.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static attn_status require_language_model(const attn_bundle *bundle, const char *fn)
{
    const attn_model_config *config = attn_bundle_config(bundle);
    if (config->arch != ATTN_ARCH_TRANSFORMER_LM)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: %s is not a language model (arch transformer_lm)%s", fn,
                         attn_bundle_name(bundle),
                         config->arch == ATTN_ARCH_TRANSFORMER || config->arch == ATTN_ARCH_RNN
                             ? " but an encoder-decoder, which translates"
                             : "");
    return ATTN_OK;
}

attn_status attn_bundle_check_language_model(const attn_bundle *bundle)
{
    ATTN_CHECK_NOT_NULL(bundle);
    return require_language_model(bundle, "attn_bundle_check_language_model");
}

attn_status attn_bundle_encode_prompt(const attn_bundle *bundle, const char *text, int truncate,
                                      int32_t **ids, int64_t *count, int64_t *unknown, int64_t *cut)
{
    static const char fn[] = "attn_bundle_encode_prompt";
    ATTN_CHECK_NOT_NULL(ids);
    *ids = NULL;
    ATTN_CHECK_NOT_NULL(count);
    *count = 0;
    if (unknown != NULL)
        *unknown = 0;
    if (cut != NULL)
        *cut = 0;
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_CHECK_NOT_NULL(text);
    ATTN_TRY(require_language_model(bundle, fn));
    int32_t *tokens = NULL;
    int64_t n = 0;
    ATTN_TRY(attn_tokenizer_encode(attn_bundle_tokenizer(bundle, ATTN_BUNDLE_TARGET), text, &tokens,
                                   &n));
    const int64_t room = attn_bundle_config(bundle)->max_len - 1, total = n + 1;
    if (total > room && !truncate) {
        free(tokens);
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: the prompt is %lld tokens (with the </s> that starts it), above "
                         "the %lld the model's context of max_len %lld leaves for one new "
                         "token; shorten it or cut it to its last tokens (truncate)",
                         fn, (long long)total, (long long)room, (long long)room + 1);
    }
    const int64_t dropped = total > room ? total - room : 0, kept = total - dropped;
    int32_t *prompt = malloc((size_t)kept * sizeof *prompt);
    if (prompt == NULL) {
        free(tokens);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    /* The prompt is </s> then the tokens; a cut keeps the last kept of them. */
    for (int64_t i = 0; i < kept; i++) {
        const int64_t from = dropped + i; /* index into </s> + tokens */
        prompt[i] = from == 0 ? ATTN_EOS_ID : tokens[from - 1];
    }
    free(tokens);
    for (int64_t i = 0; i < kept && unknown != NULL; i++)
        *unknown += prompt[i] == ATTN_UNK_ID;
    if (cut != NULL)
        *cut = dropped;
    *ids = prompt;
    *count = kept;
    return ATTN_OK;
}

attn_status attn_bundle_generate(attn_bundle *bundle, int64_t n, const int32_t *const *ids,
                                 const int64_t *counts, const uint64_t *stream_ids,
                                 const attn_sample_options *options,
                                 attn_generate_callback callback, void *user,
                                 attn_generate_result **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_TRY(require_language_model(bundle, "attn_bundle_generate"));
    return attn_generate(attn_bundle_model(bundle), attn_bundle_graph(bundle), n, ids, counts,
                         stream_ids, options, callback, user, out);
}

/* Appends size bytes to the growing text (*length bytes in *capacity). */
static attn_status append(char **text, size_t *length, size_t *capacity, const char *bytes,
                          size_t size)
{
    if (*length + size + 1 > *capacity) {
        size_t grown = (*capacity > 0 ? *capacity : 64);
        while (grown < *length + size + 1)
            grown *= 2;
        char *larger = realloc(*text, grown);
        if (larger == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_bundle_generated_text: out of memory");
        *text = larger;
        *capacity = grown;
    }
    memcpy(*text + *length, bytes, size);
    *length += size;
    (*text)[*length] = '\0';
    return ATTN_OK;
}

attn_status attn_bundle_generated_text(const attn_bundle *bundle, const int32_t *ids, int64_t count,
                                       char **text)
{
    static const char fn[] = "attn_bundle_generated_text";
    ATTN_CHECK_NOT_NULL(text);
    *text = NULL;
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_CHECK_ARG(count >= 0, "%s: count %lld is negative", fn, (long long)count);
    ATTN_CHECK_ARG(count == 0 || ids != NULL, "%s: ids must not be NULL", fn);
    const attn_tokenizer *tokenizer = attn_bundle_tokenizer(bundle, ATTN_BUNDLE_TARGET);
    char *out = NULL;
    size_t length = 0, capacity = 0;
    attn_status status = append(&out, &length, &capacity, "", 0);
    /* Each line is decoded on its own, so a word tokenizer puts no space across a break. */
    for (int64_t start = 0; start <= count && status == ATTN_OK;) {
        int64_t end = start;
        while (end < count && ids[end] != ATTN_EOS_ID)
            end++;
        char *line = NULL;
        status = attn_tokenizer_decode(tokenizer, ids + start, end - start, &line);
        if (status == ATTN_OK)
            status = append(&out, &length, &capacity, line, strlen(line));
        if (status == ATTN_OK && end < count)
            status = append(&out, &length, &capacity, "\n", 1);
        free(line);
        start = end + 1;
    }
    if (status != ATTN_OK) {
        free(out);
        return status;
    }
    *text = out;
    return ATTN_OK;
}

/* ---- perplexity --------------------------------------------------------------------------- */

static int64_t utf8_characters(const char *text)
{
    int64_t characters = 0;
    for (const unsigned char *c = (const unsigned char *)text; *c != '\0'; c++)
        characters += (*c & 0xC0) != 0x80; /* every byte but a continuation starts one */
    return characters;
}

/* The stream of n lines (malloc'ed in *stream): each line's ids, then </s>. */
static attn_status text_stream(const attn_tokenizer *tokenizer, const char *const *lines, int64_t n,
                               int32_t **stream, int64_t *length, attn_text_score *score)
{
    static const char fn[] = "attn_bundle_score_text";
    int32_t *ids = NULL;
    int64_t count = 0, capacity = 0;
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < n && status == ATTN_OK; i++) {
        int32_t *line = NULL;
        int64_t line_count = 0;
        status = lines[i] != NULL ? attn_tokenizer_encode(tokenizer, lines[i], &line, &line_count)
                                  : attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: lines[%lld] is NULL",
                                              fn, (long long)i);
        if (status == ATTN_OK && count + line_count + 1 > capacity) {
            int64_t grown = capacity > 0 ? capacity : 1024;
            while (grown < count + line_count + 1)
                grown *= 2;
            int32_t *larger = realloc(ids, (size_t)grown * sizeof *ids);
            if (larger == NULL)
                status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
            else
                ids = larger, capacity = grown;
        }
        if (status == ATTN_OK) {
            for (int64_t t = 0; t < line_count; t++)
                score->unknown += line[t] == ATTN_UNK_ID;
            memcpy(ids + count, line, (size_t)line_count * sizeof *ids);
            count += line_count;
            ids[count++] = ATTN_EOS_ID;
            score->characters += utf8_characters(lines[i]) + 1;
        }
        free(line);
    }
    if (status != ATTN_OK) {
        free(ids);
        return status;
    }
    *stream = ids;
    *length = count;
    return ATTN_OK;
}

double attn_bundle_token_nats(const float *z, int64_t vocab, int32_t target, int64_t *best)
{
    int64_t top = 0;
    for (int64_t v = 1; v < vocab; v++)
        top = z[v] > z[top] ? v : top;
    double sum = 0.0;
    for (int64_t v = 0; v < vocab; v++)
        sum += exp((double)z[v] - (double)z[top]);
    if (best != NULL)
        *best = top;
    return (double)z[top] + log(sum) - (double)z[target];
}

/* Scores a batch of windows (tgt [size, tgt_len], lengths) with the step decoder, one position
 * of every row per step: a bf16 or int8 model's step decoder rounds its activations too (int8
 * products quantize each row), so this is the perplexity of the text as attn generate sees it,
 * where the graph's forward would multiply the stored weights with fp32 activations. */
static attn_status stepwise_nats(attn_model *model, attn_graph *graph, const attn_model_batch *batch,
                                 int64_t vocab, double *nats)
{
    const int64_t size = batch->size, steps = batch->tgt_len - 1;
    int32_t *ids = malloc((size_t)size * sizeof *ids);
    float *logits = malloc((size_t)(size * vocab) * sizeof *logits);
    attn_step_decoder *decoder = NULL;
    attn_status status = ids != NULL && logits != NULL
                             ? attn_model_step_start(model, graph, NULL, NULL, size, steps, &decoder)
                             : attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                                         "attn_bundle_score_text: out of memory");
    for (int64_t t = 0; t < steps && status == ATTN_OK; t++) {
        for (int64_t b = 0; b < size; b++) /* a finished row reads padding, never scored */
            ids[b] = t < batch->tgt_lengths[b] ? batch->tgt[b * batch->tgt_len + t] : ATTN_PAD_ID;
        status = attn_model_step(decoder, ids, logits, NULL);
        for (int64_t b = 0; b < size && status == ATTN_OK; b++)
            if (t + 1 < batch->tgt_lengths[b])
                *nats += attn_bundle_token_nats(logits + b * vocab, vocab,
                                                batch->tgt[b * batch->tgt_len + t + 1], NULL);
    }
    attn_model_step_destroy(decoder);
    free(ids);
    free(logits);
    return status;
}

/* The summed -log p of the batch's predicted ids, from the logits [rows, tgt_len - 1, vocab]. */
static double batch_nats(const float *logits, const attn_model_batch *batch, int64_t vocab)
{
    const int64_t steps = batch->tgt_len - 1;
    double nats = 0.0;
    for (int64_t b = 0; b < batch->size; b++)
        for (int64_t t = 0; t + 1 < batch->tgt_lengths[b]; t++)
            nats += attn_bundle_token_nats(logits + (b * steps + t) * vocab, vocab,
                                           batch->tgt[b * batch->tgt_len + t + 1], NULL);
    return nats;
}

/* Scores the windows of the stream, batch_rows at a time, adding to score->nats. */
static attn_status score_windows(attn_bundle *bundle, const int32_t *stream, int64_t length,
                                 int64_t batch_rows, attn_text_score *score)
{
    attn_model *model = attn_bundle_model(bundle);
    attn_graph *graph = attn_bundle_graph(bundle);
    const int64_t max_len = attn_bundle_config(bundle)->max_len;
    const int64_t vocab = attn_bundle_config(bundle)->tgt_vocab;
    const int64_t window = max_len + 1, windows = (length - 1 + max_len - 1) / max_len;
    const int64_t rows = batch_rows < windows ? batch_rows : windows;
    int32_t *tgt = malloc((size_t)(rows * window) * sizeof *tgt);
    int32_t *lengths = malloc((size_t)rows * sizeof *lengths);
    if (tgt == NULL || lengths == NULL) {
        free(tgt);
        free(lengths);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_bundle_score_text: out of memory");
    }
    attn_status status = ATTN_OK;
    for (int64_t first = 0; first < windows && status == ATTN_OK; first += rows) {
        const int64_t size = windows - first < rows ? windows - first : rows;
        int64_t longest = 2;
        for (int64_t b = 0; b < size; b++) {
            /* Window w starts at w * max_len: its first id is the previous window's last. */
            const int64_t start = (first + b) * max_len;
            const int64_t ids = length - start < window ? length - start : window;
            memcpy(tgt + b * window, stream + start, (size_t)ids * sizeof *tgt);
            for (int64_t t = ids; t < window; t++)
                tgt[b * window + t] = ATTN_PAD_ID; /* never read: lengths mark the end */
            lengths[b] = (int32_t)ids;
            longest = ids > longest ? ids : longest;
        }
        /* Rows keep the full window's stride; the batch reads the first longest columns. */
        for (int64_t b = 1; b < size && longest < window; b++)
            memmove(tgt + b * longest, tgt + b * window, (size_t)longest * sizeof *tgt);
        attn_model_batch batch = {0};
        batch.size = size;
        batch.tgt_len = longest;
        batch.tgt = tgt;
        batch.tgt_lengths = lengths;
        attn_graph_reset(graph);
        attn_graph_set_recording(graph, 0);
        attn_graph_set_training(graph, 0);
        if (attn_model_precision(model) != ATTN_PRECISION_FP32) {
            status = stepwise_nats(model, graph, &batch, vocab, &score->nats);
        } else {
            attn_var *logits = NULL;
            status = attn_model_forward_logits(model, graph, &batch, &logits);
            if (status == ATTN_OK)
                score->nats += batch_nats(logits->value.data, &batch, vocab);
        }
        attn_graph_reset(graph);
    }
    free(tgt);
    free(lengths);
    return status;
}

attn_status attn_bundle_score_text(attn_bundle *bundle, const char *const *lines, int64_t n,
                                   int64_t batch_rows, attn_text_score *out)
{
    static const char fn[] = "attn_bundle_score_text";
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_TRY(require_language_model(bundle, fn));
    ATTN_CHECK_ARG(n >= 1 && lines != NULL, "%s: %lld lines; give at least one", fn, (long long)n);
    ATTN_CHECK_ARG(batch_rows >= 1, "%s: batch_rows %lld must be >= 1", fn, (long long)batch_rows);
    attn_text_score score = {0};
    int32_t *stream = NULL;
    int64_t length = 0;
    ATTN_TRY(text_stream(attn_bundle_tokenizer(bundle, ATTN_BUNDLE_TARGET), lines, n, &stream,
                         &length, &score));
    attn_status status = ATTN_OK;
    if (length < 2)
        status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                           "%s: the text is %lld token long; a score needs at least 2", fn,
                           (long long)length);
    if (status == ATTN_OK)
        status = score_windows(bundle, stream, length, batch_rows, &score);
    free(stream);
    if (status != ATTN_OK)
        return status;
    score.tokens = length - 1;
    score.cross_entropy = score.nats / (double)score.tokens;
    score.perplexity = exp(score.cross_entropy);
    score.bits_per_token = score.cross_entropy / log(2.0);
    score.bits_per_character = score.nats / log(2.0) / (double)score.characters;
    *out = score;
    return ATTN_OK;
}
