/* Several bundles as one ensemble (attn_bundle_check_ensemble, attn_bundle_decode_ensemble), and
 * the one check ensembles, averaging and distillation make: two files (or a file and a
 * student's tokenizers) tokenize alike. */
#include "attn/attn_bundle.h"

#include "bundle/bundle_internal.h"
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const SIDE_NAMES[2] = {"source", "target"};

/* What tells a and b apart for encoding and decoding, written into what (empty: nothing). */
static void tokenizer_difference(const attn_tokenizer *a, const attn_tokenizer *b, char *what,
                                 size_t size)
{
    what[0] = '\0';
    /* A language model's file has no source tokenizer. */
    if (a == NULL || b == NULL) {
        if (a != b)
            snprintf(what, size, "%s vs %s", a != NULL ? "a tokenizer" : "no tokenizer",
                     b != NULL ? "a tokenizer" : "no tokenizer");
        return;
    }
    if (attn_tokenizer_get_kind(a) != attn_tokenizer_get_kind(b)) {
        snprintf(what, size, "tokenizer kind %s vs %s",
                 attn_tokenizer_kind_name(attn_tokenizer_get_kind(a)),
                 attn_tokenizer_kind_name(attn_tokenizer_get_kind(b)));
        return;
    }
    const attn_vocab *va = attn_tokenizer_vocab(a), *vb = attn_tokenizer_vocab(b);
    const int64_t na = attn_vocab_size(va), nb = attn_vocab_size(vb);
    for (int64_t id = 0; id < na && id < nb; id++) {
        const char *ta = attn_vocab_token(va, (int32_t)id), *tb = attn_vocab_token(vb, (int32_t)id);
        if (strcmp(ta, tb) != 0) {
            snprintf(what, size, "id %lld is \"%s\" vs \"%s\"", (long long)id, ta, tb);
            return;
        }
    }
    if (na != nb) {
        snprintf(what, size, "%lld tokens vs %lld", (long long)na, (long long)nb);
        return;
    }
    const int64_t ma = attn_tokenizer_num_merges(a), mb = attn_tokenizer_num_merges(b);
    for (int64_t i = 0; i < ma && i < mb; i++) {
        const char *la, *ra, *lb, *rb;
        if (attn_tokenizer_merge(a, i, &la, &ra) != ATTN_OK ||
            attn_tokenizer_merge(b, i, &lb, &rb) != ATTN_OK) {
            snprintf(what, size, "BPE merge %lld unreadable", (long long)i);
            return;
        }
        if (strcmp(la, lb) != 0 || strcmp(ra, rb) != 0) {
            snprintf(what, size, "BPE merge %lld is \"%s\" + \"%s\" vs \"%s\" + \"%s\"",
                     (long long)i, la, ra, lb, rb);
            return;
        }
    }
    if (ma != mb)
        snprintf(what, size, "%lld BPE merges vs %lld", (long long)ma, (long long)mb);
}

static attn_status check_tokenizers(const char *fn, const char *first_name,
                                    const attn_tokenizer *const first[2], const char *other_name,
                                    const attn_tokenizer *const other[2])
{
    for (int side = 0; side < 2; side++) {
        char what[640];
        tokenizer_difference(first[side], other[side], what, sizeof what);
        if (what[0] != '\0')
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                             "%s: %s and %s have different %s vocabularies (%s, in that order)", fn,
                             first_name, other_name, SIDE_NAMES[side], what);
    }
    return ATTN_OK;
}

attn_status attn_bundle_check_same_tokenizers(const attn_bundle *first, const attn_bundle *other,
                                              const char *fn)
{
    const attn_tokenizer *a[2] = {attn_bundle_tokenizer(first, ATTN_BUNDLE_SOURCE),
                                  attn_bundle_tokenizer(first, ATTN_BUNDLE_TARGET)};
    const attn_tokenizer *b[2] = {attn_bundle_tokenizer(other, ATTN_BUNDLE_SOURCE),
                                  attn_bundle_tokenizer(other, ATTN_BUNDLE_TARGET)};
    return check_tokenizers(fn, attn_bundle_name(first), a, attn_bundle_name(other), b);
}

attn_status attn_bundle_check_tokenizers(const attn_bundle *bundle, const attn_tokenizer *source,
                                         const attn_tokenizer *target, const char *name)
{
    static const char fn[] = "attn_bundle_check_tokenizers";
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_CHECK_NOT_NULL(source);
    ATTN_CHECK_NOT_NULL(target);
    const attn_tokenizer *a[2] = {attn_bundle_tokenizer(bundle, ATTN_BUNDLE_SOURCE),
                                  attn_bundle_tokenizer(bundle, ATTN_BUNDLE_TARGET)};
    const attn_tokenizer *b[2] = {source, target};
    return check_tokenizers(fn, attn_bundle_name(bundle), a, name != NULL ? name : "the tokenizers",
                            b);
}

static attn_status check_ensemble(attn_bundle *const *bundles, int64_t count, const char *fn)
{
    ATTN_CHECK_ARG(bundles != NULL, "%s: bundles must not be NULL", fn);
    ATTN_CHECK_ARG(count >= 1, "%s: %lld models, expected at least one", fn, (long long)count);
    for (int64_t m = 0; m < count; m++) {
        ATTN_CHECK_ARG(bundles[m] != NULL, "%s: bundles[%lld] is NULL", fn, (long long)m);
        ATTN_TRY(attn_bundle_check_encoder_decoder(bundles[m]));
        if (m > 0)
            ATTN_TRY(attn_bundle_check_same_tokenizers(bundles[0], bundles[m], fn));
    }
    return ATTN_OK;
}

attn_status attn_bundle_check_ensemble(attn_bundle *const *bundles, int64_t count)
{
    return check_ensemble(bundles, count, "attn_bundle_check_ensemble");
}

attn_status attn_bundle_decode_ensemble(attn_bundle *const *bundles, int64_t count, int64_t n,
                                        const int32_t *const *ids, const int64_t *counts,
                                        const attn_decode_options *options,
                                        attn_decode_result **out)
{
    static const char fn[] = "attn_bundle_decode";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(ids);
    ATTN_CHECK_NOT_NULL(counts);
    ATTN_CHECK_ARG(n >= 1, "%s: n is %lld, expected at least one sentence", fn, (long long)n);
    ATTN_TRY(check_ensemble(bundles, count, fn));
    int64_t longest = 1;
    for (int64_t i = 0; i < n; i++) {
        ATTN_CHECK_ARG(ids[i] != NULL && counts[i] >= 1,
                       "%s: sentence %lld has no ids (counts[%lld] = %lld)", fn, (long long)i,
                       (long long)i, (long long)counts[i]);
        longest = counts[i] > longest ? counts[i] : longest;
    }
    ATTN_CHECK_ARG(
        longest <= INT32_MAX && (uint64_t)n <= SIZE_MAX / sizeof(int32_t) / (uint64_t)longest,
        "%s: %lld sentences of up to %lld ids are too many", fn, (long long)n, (long long)longest);
    const attn_decode_options defaults = attn_decode_default_options();
    /* One padded [n, longest] batch, as attn_decode takes it: padding is never read. */
    int32_t *src = calloc((size_t)n * (size_t)longest, sizeof *src);
    int32_t *lengths = calloc((size_t)n, sizeof *lengths);
    attn_model **models = calloc((size_t)count, sizeof *models);
    attn_graph **graphs = calloc((size_t)count, sizeof *graphs);
    attn_status status;
    if (src == NULL || lengths == NULL || models == NULL || graphs == NULL) {
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    } else {
        for (int64_t i = 0; i < n; i++) {
            memcpy(src + i * longest, ids[i], (size_t)counts[i] * sizeof *src);
            lengths[i] = (int32_t)counts[i];
        }
        for (int64_t m = 0; m < count; m++) {
            models[m] = attn_bundle_model(bundles[m]);
            graphs[m] = attn_bundle_graph(bundles[m]);
        }
        status = attn_decode_ensemble(models, graphs, count, n, longest, src, lengths,
                                      options != NULL ? options : &defaults, out);
    }
    free(src);
    free(lengths);
    free(models);
    free(graphs);
    return status;
}
