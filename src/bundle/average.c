/* attn_bundle_average: the element-wise mean of several model files' weights (fairseq's
 * average_checkpoints), written as a model file with the first file's config and tokenizers. */
#include "attn/attn_bundle.h"

#include "bundle/bundle_internal.h"
#include "core/internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char FN[] = "attn_bundle_average";

/* The first config field whose value differs between the two JSON texts, as
 * "\"name\": A vs B" in what (empty: none). Both come from attn_model_config_to_json, so they
 * hold the same fields when the architectures agree. */
static attn_status config_difference(const char *json_a, const char *json_b, char *what,
                                     size_t size)
{
    what[0] = '\0';
    if (strcmp(json_a, json_b) == 0)
        return ATTN_OK;
    cJSON *a = cJSON_Parse(json_a), *b = cJSON_Parse(json_b);
    attn_status status = ATTN_OK;
    if (a == NULL || b == NULL) {
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", FN);
    } else {
        for (const cJSON *field = a->child; field != NULL && what[0] == '\0'; field = field->next) {
            const cJSON *other = cJSON_GetObjectItemCaseSensitive(b, field->string);
            char *text_a = cJSON_PrintUnformatted(field);
            char *text_b = other != NULL ? cJSON_PrintUnformatted(other) : NULL;
            if (text_a != NULL && (text_b == NULL || strcmp(text_a, text_b) != 0))
                snprintf(what, size, "\"%s\": %s vs %s", field->string, text_a,
                         text_b != NULL ? text_b : "(none)");
            free(text_a);
            free(text_b);
        }
        if (what[0] == '\0')
            snprintf(what, size, "their fields differ");
    }
    cJSON_Delete(a);
    cJSON_Delete(b);
    return status;
}

/* The same config (hence the same tensor names and shapes) and tokenizers as the first. */
static attn_status check_same_model(const attn_bundle *first, const char *first_json,
                                    const attn_bundle *other)
{
    char *json = NULL;
    ATTN_TRY(attn_model_config_to_json(attn_bundle_config(other), &json));
    char what[512];
    attn_status status = config_difference(first_json, json, what, sizeof what);
    free(json);
    ATTN_TRY(status);
    if (what[0] != '\0')
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: %s and %s have different model configs (%s, in that order): only "
                         "models of one config average",
                         FN, attn_bundle_name(first), attn_bundle_name(other), what);
    return attn_bundle_check_same_tokenizers(first, other, FN);
}

/* A bf16 or int8 file's fp32 weights are gone, and saving would write its stored matrices. */
static attn_status check_fp32(const attn_bundle *bundle)
{
    const attn_precision precision = attn_model_precision(attn_bundle_model(bundle));
    ATTN_CHECK_ARG(precision == ATTN_PRECISION_FP32,
                   "%s: %s holds %s weights (attn quantize's output): average the fp32 files, "
                   "then quantize the average",
                   FN, attn_bundle_name(bundle), attn_precision_name(precision));
    return ATTN_OK;
}

static void add_values(double *sum, const attn_bundle *bundle, size_t floats)
{
    const float *values =
        attn_params_buffer(attn_model_params(attn_bundle_model(bundle)), ATTN_PARAM_VALUES);
    for (size_t i = 0; i < floats; i++)
        sum[i] += (double)values[i];
}

attn_status attn_bundle_average(const char *const *paths, int64_t count, const char *out_path)
{
    ATTN_CHECK_NOT_NULL(paths);
    ATTN_CHECK_NOT_NULL(out_path);
    ATTN_CHECK_ARG(count >= 1, "%s: %lld files, expected at least one", FN, (long long)count);
    for (int64_t i = 0; i < count; i++)
        ATTN_CHECK_ARG(paths[i] != NULL, "%s: paths[%lld] is NULL", FN, (long long)i);
    attn_bundle *first = NULL;
    ATTN_TRY(attn_bundle_load(paths[0], &first));
    attn_params *store = attn_model_params(attn_bundle_model(first));
    const size_t floats = attn_params_buffer_floats(store);
    char *first_json = NULL;
    double *sum = calloc(floats > 0 ? floats : 1, sizeof *sum);
    attn_status status = sum != NULL ? ATTN_OK
                                     : attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                                                 "%s: out of memory for %zu weights", FN, floats);
    if (status == ATTN_OK)
        status = check_fp32(first);
    if (status == ATTN_OK)
        status = attn_model_config_to_json(attn_bundle_config(first), &first_json);
    if (status == ATTN_OK)
        add_values(sum, first, floats);
    /* One other file in memory at a time. */
    for (int64_t i = 1; i < count && status == ATTN_OK; i++) {
        attn_bundle *other = NULL;
        status = attn_bundle_load(paths[i], &other);
        if (status == ATTN_OK)
            status = check_fp32(other);
        if (status == ATTN_OK)
            status = check_same_model(first, first_json, other);
        if (status == ATTN_OK)
            add_values(sum, other, floats);
        attn_bundle_destroy(other);
    }
    if (status == ATTN_OK) {
        float *values = attn_params_buffer(store, ATTN_PARAM_VALUES);
        for (size_t i = 0; i < floats; i++)
            values[i] = (float)(sum[i] / (double)count);
        attn_metadata_entry entries[ATTN_BUNDLE_METADATA_COUNT];
        status = attn_bundle_metadata(attn_bundle_tokenizer(first, ATTN_BUNDLE_SOURCE),
                                      attn_bundle_tokenizer(first, ATTN_BUNDLE_TARGET), entries);
        if (status == ATTN_OK)
            status = attn_model_save(attn_bundle_model(first), out_path, entries,
                                     ATTN_BUNDLE_METADATA_COUNT);
        attn_bundle_metadata_free(entries);
    }
    free(first_json);
    free(sum);
    attn_bundle_destroy(first);
    return status;
}
