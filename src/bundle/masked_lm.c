/* A masked language model's bundle: the masked-token loss of a text (attn_bundle_score_masked,
 * for attn eval --metric perplexity). */
#include "attn/attn_bundle.h"

#include "bundle/bundle_internal.h"
#include "core/internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One batch of masked texts: src [size, len] and targets [size, len] (-1: not chosen). */
static attn_status score_batch(attn_bundle *bundle, int64_t size, int64_t len, const int32_t *src,
                               const int32_t *lengths, const int32_t *targets,
                               attn_masked_score *score)
{
    attn_model *model = attn_bundle_model(bundle);
    attn_graph *graph = attn_bundle_graph(bundle);
    const int64_t vocab = attn_bundle_config(bundle)->src_vocab;
    attn_model_batch batch = {0};
    batch.size = size;
    batch.src_len = len;
    batch.src = src;
    batch.src_lengths = lengths;
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    attn_var *logits = NULL;
    const attn_status status = attn_model_forward_logits(model, graph, &batch, &logits);
    for (int64_t r = 0; status == ATTN_OK && r < size * len; r++) {
        if (targets[r] == -1)
            continue;
        int64_t best = 0;
        score->nats +=
            attn_bundle_token_nats(logits->value.data + r * vocab, vocab, targets[r], &best);
        score->masked++;
        score->correct += best == targets[r];
    }
    attn_graph_reset(graph);
    return status;
}

attn_status attn_bundle_score_masked(attn_bundle *bundle, const char *const *lines, int64_t n,
                                     uint64_t seed, int64_t batch_rows, attn_masked_score *out)
{
    static const char fn[] = "attn_bundle_score_masked";
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(bundle);
    const attn_model_config *c = attn_bundle_config(bundle);
    ATTN_CHECK_ARG(c->arch == ATTN_ARCH_TRANSFORMER_MLM,
                   "%s: %s is not a masked language model (arch transformer_mlm)", fn,
                   attn_bundle_name(bundle));
    ATTN_CHECK_ARG(attn_model_precision(attn_bundle_model(bundle)) == ATTN_PRECISION_FP32,
                   "%s: %s holds %s weights; score the fp32 model", fn, attn_bundle_name(bundle),
                   attn_precision_name(attn_model_precision(attn_bundle_model(bundle))));
    ATTN_CHECK_ARG(n >= 1 && lines != NULL, "%s: %lld lines; give at least one", fn, (long long)n);
    ATTN_CHECK_ARG(batch_rows >= 1, "%s: batch_rows %lld must be >= 1", fn, (long long)batch_rows);
    const attn_tokenizer *tokenizer = attn_bundle_tokenizer(bundle, ATTN_BUNDLE_SOURCE);
    const int64_t width = c->max_len, cells = batch_rows * width;
    int32_t *src = malloc((size_t)cells * sizeof *src);
    int32_t *targets = malloc((size_t)cells * sizeof *targets);
    int32_t *lengths = malloc((size_t)batch_rows * sizeof *lengths);
    attn_status status = src != NULL && targets != NULL && lengths != NULL
                             ? ATTN_OK
                             : attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_masked_score score = {0};
    int64_t rows = 0;
    for (int64_t i = 0; i < n && status == ATTN_OK; i++) {
        int32_t *ids = NULL;
        int64_t count = 0;
        status = lines[i] != NULL ? attn_tokenizer_encode(tokenizer, lines[i], &ids, &count)
                                  : attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: lines[%lld] is NULL",
                                              fn, (long long)i);
        if (status == ATTN_OK && count > width)
            status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                               "%s: line %lld has %lld tokens, more than the model's max_len %lld",
                               fn, (long long)(i + 1), (long long)count, (long long)width);
        if (status == ATTN_OK && count > 0) {
            /* Rows keep the full width; a batch is scored at that width, padding masked. */
            int32_t *row = src + rows * width, *row_targets = targets + rows * width;
            attn_mlm_mask(seed, 0, i, ids, count, c->src_vocab, row, row_targets);
            for (int64_t t = count; t < width; t++) {
                row[t] = ATTN_PAD_ID;
                row_targets[t] = -1;
            }
            for (int64_t t = 0; t < count; t++)
                score.unknown += ids[t] == ATTN_UNK_ID;
            lengths[rows++] = (int32_t)count;
            score.lines++;
            score.tokens += count;
        }
        free(ids);
        if (status == ATTN_OK && (rows == batch_rows || (i + 1 == n && rows > 0))) {
            status = score_batch(bundle, rows, width, src, lengths, targets, &score);
            rows = 0;
        }
    }
    free(src);
    free(targets);
    free(lengths);
    ATTN_TRY(status);
    if (score.masked == 0)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: no token of the %lld lines was chosen for masking (%lld tokens, "
                         "each chosen with probability %g): give more text",
                         fn, (long long)n, (long long)score.tokens, ATTN_MLM_CHOSEN_SHARE);
    score.cross_entropy = score.nats / (double)score.masked;
    score.perplexity = exp(score.cross_entropy);
    *out = score;
    return ATTN_OK;
}
