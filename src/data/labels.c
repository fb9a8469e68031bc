/* A classifier's classes: their names in class order, and their JSON for the model file. */
#include "data/data_internal.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LABELS_FORMAT "attn-labels"
#define LABELS_VERSION 1

struct attn_labels {
    int64_t count;
    char **name; /* [count], each its own allocation */
};

void attn_labels_destroy(attn_labels *labels)
{
    if (labels == NULL)
        return;
    for (int64_t i = 0; i < labels->count; i++)
        free(labels->name[i]);
    free(labels->name);
    free(labels);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Checks the names (non-empty, UTF-8, distinct) and copies them in the order given. */
static attn_status make(const char *fn, const char *const *names, int64_t n, attn_labels **out)
{
    ATTN_CHECK_ARG(n >= 1, "%s: need at least one label, got %lld", fn, (long long)n);
    ATTN_CHECK_NOT_NULL(names);
    for (int64_t i = 0; i < n; i++) {
        ATTN_CHECK_ARG(names[i] != NULL, "%s: label %lld is NULL", fn, (long long)i);
        const size_t size = strlen(names[i]);
        if (size == 0 || utf8_first_invalid(names[i], size) != size)
            return attn_fail(ATTN_ERR_FORMAT, "%s: label %lld is %s", fn, (long long)i,
                             size == 0 ? "empty" : "not valid UTF-8");
    }
    /* Duplicates, found on a sorted copy of the pointers. */
    const char **sorted = malloc((size_t)n * sizeof *sorted);
    if (sorted == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    memcpy(sorted, names, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_strings);
    for (int64_t i = 1; i < n; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0) {
            attn_status status =
                attn_fail(ATTN_ERR_FORMAT, "%s: label \"%s\" appears twice", fn, sorted[i]);
            free(sorted);
            return status;
        }
    free(sorted);
    attn_labels *labels = calloc(1, sizeof *labels);
    if (labels == NULL || (labels->name = calloc((size_t)n, sizeof *labels->name)) == NULL) {
        free(labels);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    labels->count = n;
    for (int64_t i = 0; i < n; i++) {
        const size_t size = strlen(names[i]) + 1;
        labels->name[i] = malloc(size);
        if (labels->name[i] == NULL) {
            attn_labels_destroy(labels);
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        }
        memcpy(labels->name[i], names[i], size);
    }
    *out = labels;
    return ATTN_OK;
}

attn_status attn_labels_from_names(const char *const *names, int64_t n, attn_labels **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    return make("attn_labels_from_names", names, n, out);
}

attn_status attn_labels_from_corpus(const attn_corpus *corpus, attn_labels **out)
{
    static const char fn[] = "attn_labels_from_corpus";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(corpus);
    ATTN_CHECK_ARG(attn_corpus_is_labelled(corpus),
                   "%s: the corpus holds pairs, not labelled lines (attn_corpus_read_labelled)",
                   fn);
    const int64_t n = attn_corpus_size(corpus);
    ATTN_CHECK_ARG(n >= 1, "%s: the corpus has no lines", fn);
    const char **sorted = malloc((size_t)n * sizeof *sorted);
    if (sorted == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    memcpy(sorted, attn_corpus_targets(corpus), (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, compare_strings);
    int64_t distinct = 0;
    for (int64_t i = 0; i < n; i++)
        if (distinct == 0 || strcmp(sorted[distinct - 1], sorted[i]) != 0)
            sorted[distinct++] = sorted[i];
    attn_status status = make(fn, sorted, distinct, out);
    free(sorted);
    return status;
}

int64_t attn_labels_count(const attn_labels *labels)
{
    return labels == NULL ? 0 : labels->count;
}

const char *attn_labels_name(const attn_labels *labels, int64_t i)
{
    if (labels == NULL || i < 0 || i >= labels->count)
        return NULL;
    return labels->name[i];
}

/* A linear search: classifiers have tens of classes, and it runs once per line encoded. */
int64_t attn_labels_find(const attn_labels *labels, const char *name)
{
    if (labels == NULL || name == NULL)
        return -1;
    for (int64_t i = 0; i < labels->count; i++)
        if (strcmp(labels->name[i], name) == 0)
            return i;
    return -1;
}

attn_status attn_labels_to_json(const attn_labels *labels, char **json)
{
    static const char fn[] = "attn_labels_to_json";
    ATTN_CHECK_NOT_NULL(json);
    *json = NULL;
    ATTN_CHECK_NOT_NULL(labels);
    cJSON *root = cJSON_CreateObject();
    cJSON *names = cJSON_CreateArray();
    int ok = root != NULL && names != NULL &&
             cJSON_AddStringToObject(root, "format", LABELS_FORMAT) != NULL &&
             cJSON_AddNumberToObject(root, "version", LABELS_VERSION) != NULL;
    for (int64_t i = 0; ok && i < labels->count; i++) {
        cJSON *name = cJSON_CreateString(labels->name[i]);
        ok = name != NULL && cJSON_AddItemToArray(names, name);
    }
    if (ok && cJSON_AddItemToObject(root, "labels", names))
        names = NULL; /* the object owns it now */
    else
        ok = 0;
    *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(names);
    cJSON_Delete(root);
    if (*json == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    return ATTN_OK;
}

static attn_status parse(const char *fn, const cJSON *root, attn_labels **out)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *names = cJSON_GetObjectItemCaseSensitive(root, "labels");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, LABELS_FORMAT) != 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: not a label list (\"format\" is not \"%s\")", fn,
                         LABELS_FORMAT);
    if (!cJSON_IsNumber(version) || version->valuedouble != LABELS_VERSION)
        return attn_fail(ATTN_ERR_UNSUPPORTED, "%s: label list version %g; this build reads %d", fn,
                         cJSON_IsNumber(version) ? version->valuedouble : 0.0, LABELS_VERSION);
    if (!cJSON_IsArray(names) || cJSON_GetArraySize(names) < 1)
        return attn_fail(ATTN_ERR_FORMAT, "%s: \"labels\" must be an array of at least one name",
                         fn);
    const int64_t n = cJSON_GetArraySize(names);
    const char **list = malloc((size_t)n * sizeof *list);
    if (list == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    int64_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, names)
    {
        if (!cJSON_IsString(item)) {
            free(list);
            return attn_fail(ATTN_ERR_FORMAT, "%s: label %lld is not a string", fn, (long long)i);
        }
        list[i++] = item->valuestring;
    }
    attn_status status = make(fn, list, n, out);
    free(list);
    return status;
}

attn_status attn_labels_from_json(const char *json, attn_labels **out)
{
    static const char fn[] = "attn_labels_from_json";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(json);
    cJSON *root = cJSON_ParseWithOpts(json, NULL, 1);
    if (root == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: not valid JSON", fn);
    attn_status status = parse(fn, root, out);
    cJSON_Delete(root);
    return status;
}
