/* A classifier's bundle: texts' ids in, class probabilities out. */
#include "attn/attn_bundle.h"

#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

attn_status attn_bundle_check_classifier(const attn_bundle *bundle)
{
    ATTN_CHECK_NOT_NULL(bundle);
    if (!attn_model_arch_is_classifier(attn_bundle_config(bundle)->arch))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_bundle_check_classifier: %s is not a text classifier (arch "
                         "transformer_classifier or rnn_classifier, written by 'attn train "
                         "--task classify')",
                         attn_bundle_name(bundle));
    return ATTN_OK;
}

attn_status attn_bundle_classify(attn_bundle *bundle, int64_t n, const int32_t *const *ids,
                                 const int64_t *counts, float *probabilities)
{
    static const char fn[] = "attn_bundle_classify";
    ATTN_TRY(attn_bundle_check_classifier(bundle));
    ATTN_CHECK_ARG(n >= 1, "%s: need at least one text, got %lld", fn, (long long)n);
    ATTN_CHECK_NOT_NULL(ids);
    ATTN_CHECK_NOT_NULL(counts);
    ATTN_CHECK_NOT_NULL(probabilities);
    const attn_model_config *c = attn_bundle_config(bundle);
    const int64_t limit = attn_bundle_source_limit(bundle);
    int64_t longest = 0;
    for (int64_t i = 0; i < n; i++) {
        ATTN_CHECK_ARG(ids[i] != NULL && counts[i] >= 1 && counts[i] <= limit,
                       "%s: text %lld has %lld ids; give 1 to %lld (attn_bundle_encode)", fn,
                       (long long)i, (long long)counts[i], (long long)limit);
        longest = counts[i] > longest ? counts[i] : longest;
    }
    size_t cells;
    ATTN_CHECK_ARG(attn_mul_size((size_t)n, (size_t)longest, &cells), "%s: too many texts", fn);
    int32_t *src = malloc(cells * sizeof *src + 1);
    int32_t *lengths = malloc((size_t)n * sizeof *lengths);
    if (src == NULL || lengths == NULL) {
        free(src);
        free(lengths);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld texts", fn,
                         (long long)n);
    }
    for (int64_t i = 0; i < n; i++) {
        memcpy(src + i * longest, ids[i], (size_t)counts[i] * sizeof *src);
        for (int64_t j = counts[i]; j < longest; j++)
            src[i * longest + j] = 0; /* padding, never read for meaning */
        lengths[i] = (int32_t)counts[i];
    }
    attn_model_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.size = n;
    batch.src_len = longest;
    batch.src = src;
    batch.src_lengths = lengths;
    attn_graph *graph = attn_bundle_graph(bundle);
    attn_graph_reset(graph);
    attn_graph_set_training(graph, 0);
    attn_graph_set_recording(graph, 0);
    attn_var *logits = NULL;
    attn_status status =
        attn_model_forward_logits(attn_bundle_model(bundle), graph, &batch, &logits);
    if (status == ATTN_OK)
        status = attn_softmax_forward(n, c->num_classes, logits->value.data, probabilities);
    attn_graph_reset(graph);
    free(src);
    free(lengths);
    return status;
}

attn_status attn_bundle_pooling_weights(attn_bundle *bundle, const int32_t *ids, int64_t count,
                                        float *weights)
{
    ATTN_TRY(attn_bundle_check_classifier(bundle));
    return attn_model_pooling_weights(attn_bundle_model(bundle), attn_bundle_graph(bundle), ids,
                                      count, weights);
}
