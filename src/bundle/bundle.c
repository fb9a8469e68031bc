/* attn_bundle: a model file's model and tokenizers, read once; text in, hypotheses out. */
#include "attn/attn_bundle.h"

#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct attn_bundle {
    char *name; /* the file's path, for messages */
    attn_model *model;
    attn_tokenizer *tokenizers[2]; /* by attn_bundle_side */
    attn_labels *classes;          /* a classifier's; NULL for other models */
    attn_graph *graph;
};

static const char *const TOKENIZER_KEYS[2] = {ATTN_SRC_TOKENIZER_KEY, ATTN_TGT_TOKENIZER_KEY};

void attn_bundle_destroy(attn_bundle *bundle)
{
    if (bundle == NULL)
        return;
    attn_graph_destroy(bundle->graph);
    attn_model_destroy(bundle->model);
    attn_tokenizer_destroy(bundle->tokenizers[0]);
    attn_tokenizer_destroy(bundle->tokenizers[1]);
    attn_labels_destroy(bundle->classes);
    free(bundle->name);
    free(bundle);
}

attn_status attn_bundle_release(attn_bundle *bundle, attn_model **model, attn_tokenizer **source,
                                attn_tokenizer **target)
{
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(source);
    ATTN_CHECK_NOT_NULL(target);
    *model = bundle->model;
    *source = bundle->tokenizers[ATTN_BUNDLE_SOURCE];
    *target = bundle->tokenizers[ATTN_BUNDLE_TARGET];
    bundle->model = NULL;
    bundle->tokenizers[ATTN_BUNDLE_SOURCE] = bundle->tokenizers[ATTN_BUNDLE_TARGET] = NULL;
    attn_bundle_destroy(bundle);
    return ATTN_OK;
}

/* The file's tokenizers: both for an encoder-decoder, the target's for a language model
 * (which reads and writes target text only; its file may still carry a source tokenizer). A
 * missing key means the file is a bare model (attn_model_save without the bundle's metadata),
 * which deserves a hint rather than "no metadata key". */
static attn_status read_tokenizers(const attn_tensor_file *file, const char *fn, attn_bundle *b)
{
    const attn_model_arch arch = attn_model_get_config(b->model)->arch;
    const int language_model = arch == ATTN_ARCH_TRANSFORMER_LM;
    const int classifier = attn_model_arch_is_classifier(arch);
    /* A masked language model reads and predicts source text: it has no target side. */
    const int source_only = classifier || arch == ATTN_ARCH_TRANSFORMER_MLM;
    for (int side = 0; side < 2; side++) {
        const char *json = NULL;
        const int missing = attn_tensor_file_metadata(file, TOKENIZER_KEYS[side], &json) != ATTN_OK;
        if (missing && language_model && side == ATTN_BUNDLE_SOURCE)
            continue;
        if (source_only && side == ATTN_BUNDLE_TARGET) /* a classifier writes classes */
            continue;
        if (missing)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s has no tokenizers (\"%s\" metadata); use a model written by "
                             "'attn train'",
                             fn, b->name, TOKENIZER_KEYS[side]);
        attn_status status = attn_tokenizer_from_json(json, &b->tokenizers[side]);
        if (status != ATTN_OK) {
            char inner[512];
            snprintf(inner, sizeof inner, "%s", attn_last_error());
            return attn_fail(status, "%s: %s: \"%s\": %s", fn, b->name, TOKENIZER_KEYS[side],
                             inner);
        }
    }
    if (!classifier)
        return ATTN_OK;
    const char *json = NULL;
    if (attn_tensor_file_metadata(file, ATTN_LABELS_KEY, &json) != ATTN_OK)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s is a classifier without its class names (\"%s\" metadata); use "
                         "a model written by 'attn train --task classify'",
                         fn, b->name, ATTN_LABELS_KEY);
    attn_status status = attn_labels_from_json(json, &b->classes);
    if (status != ATTN_OK) {
        char inner[512];
        snprintf(inner, sizeof inner, "%s", attn_last_error());
        return attn_fail(status, "%s: %s: \"%s\": %s", fn, b->name, ATTN_LABELS_KEY, inner);
    }
    const int64_t classes = attn_model_get_config(b->model)->num_classes;
    if (attn_labels_count(b->classes) != classes)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s names %lld classes, but its model has %lld", fn,
                         b->name, (long long)attn_labels_count(b->classes), (long long)classes);
    return ATTN_OK;
}

static attn_status bundle_from_file(const attn_tensor_file *file, const char *fn, const char *name,
                                    attn_bundle **out)
{
    attn_bundle *b = calloc(1, sizeof *b);
    if (b == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = ATTN_OK;
    const size_t name_size = strlen(name) + 1;
    if ((b->name = malloc(name_size)) == NULL)
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    else
        memcpy(b->name, name, name_size);
    if (status == ATTN_OK)
        status = attn_model_from_file(file, name, &b->model);
    if (status == ATTN_OK)
        status = read_tokenizers(file, fn, b);
    if (status == ATTN_OK)
        status = attn_graph_create(attn_model_params(b->model), &b->graph);
    if (status != ATTN_OK) {
        attn_bundle_destroy(b);
        return status;
    }
    *out = b;
    return ATTN_OK;
}

attn_status attn_bundle_from_file(const attn_tensor_file *file, const char *name, attn_bundle **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(file);
    return bundle_from_file(file, "attn_bundle_from_file", name != NULL ? name : "the file", out);
}

attn_status attn_bundle_load(const char *path, attn_bundle **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    attn_tensor_file *file = NULL;
    ATTN_TRY(attn_tensor_file_open(path, &file));
    attn_status status = bundle_from_file(file, "attn_bundle_load", path, out);
    attn_tensor_file_close(file);
    return status;
}

attn_model *attn_bundle_model(const attn_bundle *bundle)
{
    return bundle != NULL ? bundle->model : NULL;
}

const attn_model_config *attn_bundle_config(const attn_bundle *bundle)
{
    return bundle != NULL ? attn_model_get_config(bundle->model) : NULL;
}

const attn_tokenizer *attn_bundle_tokenizer(const attn_bundle *bundle, attn_bundle_side side)
{
    if (bundle == NULL || (side != ATTN_BUNDLE_SOURCE && side != ATTN_BUNDLE_TARGET))
        return NULL;
    return bundle->tokenizers[side];
}

const attn_labels *attn_bundle_classes(const attn_bundle *bundle)
{
    return bundle != NULL ? bundle->classes : NULL;
}

attn_graph *attn_bundle_graph(const attn_bundle *bundle)
{
    return bundle != NULL ? bundle->graph : NULL;
}

const char *attn_bundle_name(const attn_bundle *bundle)
{
    return bundle != NULL ? bundle->name : NULL;
}

/* Search needs an encoder to read the source and a decoder to step. */
static attn_status require_encoder_decoder(const attn_bundle *bundle, const char *fn)
{
    const attn_model_arch arch = attn_model_get_config(bundle->model)->arch;
    if (arch == ATTN_ARCH_TRANSFORMER || arch == ATTN_ARCH_RNN)
        return ATTN_OK;
    /* Say what the model is for, so that the reader knows which command takes it. */
    const char *what = arch == ATTN_ARCH_TRANSFORMER_LM      ? "a language model (attn generate)"
                       : attn_model_arch_is_classifier(arch) ? "a classifier (attn classify)"
                                                             : "an encoder alone";
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                     "%s: %s is not an encoder-decoder model (arch transformer or rnn) but %s",
                     fn, bundle->name, what);
}

attn_status attn_bundle_check_encoder_decoder(const attn_bundle *bundle)
{
    ATTN_CHECK_NOT_NULL(bundle);
    return require_encoder_decoder(bundle, "attn_bundle_check_encoder_decoder");
}

/* attn_bundle_encode and attn_bundle_encode_truncated: one tokenization, which refuses a text
 * too long for the model or, with truncate, keeps its head (BERT's convention: a document's
 * opening says most about what it is). */
static attn_status encode_source(const attn_bundle *bundle, const char *text, int truncate,
                                 int32_t **ids, int64_t *count, int64_t *unknown, int64_t *cut)
{
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
    ATTN_CHECK_ARG(bundle->tokenizers[ATTN_BUNDLE_SOURCE] != NULL,
                   "attn_bundle_encode: %s has no source tokenizer (a language model); encode "
                   "a prompt with attn_bundle_encode_prompt",
                   bundle->name);
    ATTN_TRY(attn_tokenizer_encode(bundle->tokenizers[ATTN_BUNDLE_SOURCE], text, ids, count));
    const int64_t limit = attn_bundle_source_limit(bundle);
    if (*count > limit && !truncate) {
        const long long tokens = (long long)*count;
        free(*ids);
        *ids = NULL;
        *count = 0;
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_bundle_encode: %lld tokens, above the %lld the model reads "
                         "(max_len %lld%s); shorten the text or keep its first %lld tokens "
                         "(attn_bundle_encode_truncated)",
                         tokens, (long long)limit, (long long)attn_bundle_config(bundle)->max_len,
                         limit < attn_bundle_config(bundle)->max_len
                             ? " less the classification token's place"
                             : "",
                         (long long)limit);
    }
    if (*count > limit) {
        if (cut != NULL)
            *cut = *count - limit;
        *count = limit; /* the tail stays allocated: *ids is freed whole */
    }
    for (int64_t i = 0; i < *count && unknown != NULL; i++)
        *unknown += (*ids)[i] == ATTN_UNK_ID;
    return ATTN_OK;
}

int64_t attn_bundle_source_limit(const attn_bundle *bundle)
{
    if (bundle == NULL)
        return 0;
    return attn_model_config_source_limit(attn_model_get_config(bundle->model));
}

attn_status attn_bundle_encode(const attn_bundle *bundle, const char *text, int32_t **ids,
                               int64_t *count, int64_t *unknown)
{
    return encode_source(bundle, text, 0, ids, count, unknown, NULL);
}

attn_status attn_bundle_encode_truncated(const attn_bundle *bundle, const char *text,
                                         int32_t **ids, int64_t *count, int64_t *unknown,
                                         int64_t *cut)
{
    return encode_source(bundle, text, 1, ids, count, unknown, cut);
}

attn_status attn_bundle_decode(attn_bundle *bundle, int64_t n, const int32_t *const *ids,
                               const int64_t *counts, const attn_decode_options *options,
                               attn_decode_result **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(bundle);
    return attn_bundle_decode_ensemble(&bundle, 1, n, ids, counts, options, out);
}

attn_status attn_bundle_text(const attn_bundle *bundle, const attn_hypothesis *hypothesis,
                             char **text)
{
    ATTN_CHECK_NOT_NULL(text);
    *text = NULL;
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_CHECK_NOT_NULL(hypothesis);
    return attn_tokenizer_decode(bundle->tokenizers[ATTN_BUNDLE_TARGET], hypothesis->tokens,
                                 hypothesis->length, text);
}

attn_status attn_bundle_labels(const attn_bundle *bundle, attn_bundle_side side, const int32_t *ids,
                               int64_t count, const char **labels)
{
    ATTN_CHECK_NOT_NULL(bundle);
    ATTN_CHECK_ARG(side == ATTN_BUNDLE_SOURCE || side == ATTN_BUNDLE_TARGET,
                   "attn_bundle_labels: side %d is neither source nor target", (int)side);
    ATTN_CHECK_ARG(count >= 0, "attn_bundle_labels: count %lld is negative", (long long)count);
    ATTN_CHECK_ARG(count == 0 || (ids != NULL && labels != NULL),
                   "attn_bundle_labels: ids and labels must not be NULL");
    ATTN_CHECK_ARG(bundle->tokenizers[side] != NULL,
                   "attn_bundle_labels: %s has no source tokenizer (a language model)",
                   bundle->name);
    const attn_vocab *vocab = attn_tokenizer_vocab(bundle->tokenizers[side]);
    for (int64_t i = 0; i < count; i++) {
        const char *token = attn_vocab_token(vocab, ids[i]);
        labels[i] = token != NULL ? token : "?";
    }
    return ATTN_OK;
}

void attn_bundle_metadata_free(attn_metadata_entry entries[ATTN_BUNDLE_METADATA_COUNT])
{
    if (entries == NULL)
        return;
    for (int side = 0; side < ATTN_BUNDLE_METADATA_COUNT; side++) {
        /* The values are the JSON this file malloc'ed; the entry type only reads them. */
        free((void *)(uintptr_t)entries[side].value);
        entries[side].value = NULL;
    }
}

attn_status attn_bundle_metadata(const attn_tokenizer *source, const attn_tokenizer *target,
                                 attn_metadata_entry entries[ATTN_BUNDLE_METADATA_COUNT])
{
    ATTN_CHECK_NOT_NULL(entries);
    const attn_tokenizer *tokenizers[ATTN_BUNDLE_METADATA_COUNT] = {source, target};
    for (int side = 0; side < ATTN_BUNDLE_METADATA_COUNT; side++)
        entries[side] = (attn_metadata_entry){TOKENIZER_KEYS[side], NULL};
    ATTN_CHECK_NOT_NULL(source);
    ATTN_CHECK_NOT_NULL(target);
    for (int side = 0; side < ATTN_BUNDLE_METADATA_COUNT; side++) {
        char *json = NULL;
        attn_status status = attn_tokenizer_to_json(tokenizers[side], &json);
        if (status != ATTN_OK) {
            attn_bundle_metadata_free(entries);
            return status;
        }
        entries[side].value = json;
    }
    return ATTN_OK;
}
