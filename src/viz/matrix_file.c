/* Attention matrices from JSON: one object, or one object per line. */
#define _POSIX_C_SOURCE 200809L

#include "viz/viz_internal.h"

#include "attn/attn_data.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const fn = "attn_viz_matrices_read";

static void free_labels(const char *const *labels, int64_t count)
{
    if (labels == NULL)
        return;
    for (int64_t i = 0; i < count; i++)
        free((void *)labels[i]);
    free((void *)labels);
}

static void free_matrix(attn_viz_matrix *m)
{
    free((void *)m->weights);
    free_labels(m->row_labels, m->rows);
    free_labels(m->col_labels, m->cols);
    free((void *)m->title);
    memset(m, 0, sizeof *m);
}

void attn_viz_matrices_free(attn_viz_matrix *matrices, int64_t count)
{
    if (matrices == NULL)
        return;
    for (int64_t k = 0; k < count; k++)
        free_matrix(&matrices[k]);
    free(matrices);
}

/* Where a record starts, for messages. */
typedef struct record_place {
    const char *path;
    int64_t line;
} record_place;

static attn_status read_weights(const record_place *at, const cJSON *weights, attn_viz_matrix *m)
{
    if (weights == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: the record has no \"weights\"", fn,
                         at->path, (long long)at->line);
    int rows = cJSON_IsArray(weights) ? cJSON_GetArraySize(weights) : 0;
    const cJSON *first = rows > 0 ? cJSON_GetArrayItem(weights, 0) : NULL;
    int cols = cJSON_IsArray(first) ? cJSON_GetArraySize(first) : 0;
    if (rows == 0 || cols == 0)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s:%lld: \"weights\" must be a non-empty array of non-empty "
                         "arrays of numbers (one row per target token)",
                         fn, at->path, (long long)at->line);
    float *values = malloc((size_t)rows * (size_t)cols * sizeof *values);
    if (values == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for a %d x %d matrix", fn,
                         rows, cols);
    m->weights = values;
    m->rows = rows;
    m->cols = cols;
    int i = 0;
    const cJSON *row;
    cJSON_ArrayForEach(row, weights)
    {
        int n = cJSON_IsArray(row) ? cJSON_GetArraySize(row) : -1;
        if (n != cols)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s:%lld: \"weights\" is ragged: row %d has %d values, row 0 "
                             "has %d",
                             fn, at->path, (long long)at->line, i, n < 0 ? 0 : n, cols);
        int j = 0;
        const cJSON *value;
        cJSON_ArrayForEach(value, row)
        {
            float v = cJSON_IsNumber(value) ? (float)value->valuedouble : NAN;
            if (!isfinite(v))
                return attn_fail(ATTN_ERR_FORMAT,
                                 "%s: %s:%lld: \"weights\"[%d][%d] is not a finite number (in "
                                 "float range)",
                                 fn, at->path, (long long)at->line, i, j);
            values[(size_t)i * (size_t)cols + (size_t)j++] = v;
        }
        i++;
    }
    return ATTN_OK;
}

/* BPE tokens that end a word carry "</w>" (attn_data.h), a tokenizer detail that only
 * crowds a picture's labels. */
static void drop_end_of_word(char *label)
{
    label[attn_token_text_length(label)] = '\0';
}

/* Reads the "source" or "target" labels, which must number `expected`. */
static attn_status read_labels(const record_place *at, const cJSON *record, const char *key,
                               int64_t expected, const char *axis,
                               const char *const **out)
{
    const cJSON *array = cJSON_GetObjectItemCaseSensitive(record, key);
    if (array == NULL || cJSON_IsNull(array))
        return ATTN_OK;
    if (!cJSON_IsArray(array))
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: \"%s\" must be an array of strings", fn,
                         at->path, (long long)at->line, key);
    int64_t count = cJSON_GetArraySize(array);
    if (count != expected)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s:%lld: \"%s\" has %lld labels but \"weights\" has %lld %s", fn,
                         at->path, (long long)at->line, key, (long long)count,
                         (long long)expected, axis);
    char **labels = calloc((size_t)count, sizeof *labels);
    if (labels == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    *out = (const char *const *)labels;
    int64_t i = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, array)
    {
        if (!cJSON_IsString(item))
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: \"%s\"[%lld] is not a string", fn,
                             at->path, (long long)at->line, key, (long long)i);
        if (!attn_utf8_valid(item->valuestring, strlen(item->valuestring)))
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: \"%s\"[%lld] is not valid UTF-8", fn,
                             at->path, (long long)at->line, key, (long long)i);
        labels[i] = strdup(item->valuestring);
        if (labels[i] == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        drop_end_of_word(labels[i]);
        i++;
    }
    return ATTN_OK;
}

/* "title", or "line N, layer L, head H" from whichever of the three the record has; a record
 * with a layer but no head holds the mean over the layer's heads (as attn translate
 * --alignment writes it), and says so, so that every panel of a grid has a name. */
static attn_status read_title(const record_place *at, const cJSON *record, attn_viz_matrix *m)
{
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(record, "title");
    char text[96] = "";
    if (title != NULL && !cJSON_IsNull(title)) {
        if (!cJSON_IsString(title) ||
            !attn_utf8_valid(title->valuestring, strlen(title->valuestring)))
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: \"title\" must be a UTF-8 string",
                             fn, at->path, (long long)at->line);
        m->title = strdup(title->valuestring);
        return m->title != NULL ? ATTN_OK
                                : attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    static const char *const keys[3] = {"line", "layer", "head"};
    int has_layer = 0, has_head = 0;
    for (int k = 0; k < 3; k++) {
        const cJSON *number = cJSON_GetObjectItemCaseSensitive(record, keys[k]);
        if (number == NULL || cJSON_IsNull(number))
            continue;
        double v = cJSON_IsNumber(number) ? number->valuedouble : NAN;
        if (!(v >= 0 && v <= 1e9 && v == floor(v)))
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s:%lld: \"%s\" must be a non-negative integer", fn, at->path,
                             (long long)at->line, keys[k]);
        size_t used = strlen(text);
        snprintf(text + used, sizeof text - used, "%s%s %lld", used > 0 ? ", " : "", keys[k],
                 (long long)v);
        has_layer |= k == 1;
        has_head |= k == 2;
    }
    if (has_layer && !has_head) {
        size_t used = strlen(text);
        snprintf(text + used, sizeof text - used, ", mean of heads");
    }
    if (text[0] == '\0')
        return ATTN_OK;
    m->title = strdup(text);
    return m->title != NULL ? ATTN_OK : attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
}

static attn_status read_matrix(const record_place *at, const cJSON *record, attn_viz_matrix *m)
{
    if (!cJSON_IsObject(record))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s:%lld: expected a JSON object {\"source\": [...], \"target\": "
                         "[...], \"weights\": [[...], ...]}",
                         fn, at->path, (long long)at->line);
    ATTN_TRY(read_weights(at, cJSON_GetObjectItemCaseSensitive(record, "weights"), m));
    ATTN_TRY(read_labels(at, record, "source", m->cols, "columns", &m->col_labels));
    ATTN_TRY(read_labels(at, record, "target", m->rows, "rows", &m->row_labels));
    return read_title(at, record, m);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int64_t count_newlines(const char *from, const char *to)
{
    int64_t n = 0;
    for (const char *p = from; p < to; p++)
        n += *p == '\n';
    return n;
}

static int64_t column_of(const char *text, const char *at)
{
    const char *line_start = at;
    while (line_start > text && line_start[-1] != '\n')
        line_start--;
    return (int64_t)(at - line_start) + 1;
}

static attn_status parse_all(const char *path, const char *text, size_t size,
                             attn_viz_matrix **matrices, int64_t *count)
{
    const char *p = text, *end_of_text = text + size;
    if (size >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    int64_t line = 1, capacity = 0;
    const char *counted = text;
    for (;;) {
        while (p < end_of_text && is_space(*p))
            p++;
        if (p == end_of_text)
            break;
        line += count_newlines(counted, p);
        counted = p;
        const char *end = NULL;
        cJSON *record = cJSON_ParseWithLengthOpts(p, (size_t)(end_of_text - p), &end, 0);
        if (record == NULL) {
            const char *at = end != NULL && end >= p ? end : p;
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: malformed JSON at column %lld", fn,
                             path, (long long)(line + count_newlines(p, at)),
                             (long long)column_of(text, at));
        }
        if (*count == capacity) {
            int64_t grown = capacity > 0 ? 2 * capacity : 8;
            attn_viz_matrix *bigger = realloc(*matrices, (size_t)grown * sizeof *bigger);
            if (bigger == NULL) {
                cJSON_Delete(record);
                return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
            }
            *matrices = bigger;
            capacity = grown;
        }
        attn_viz_matrix *m = &(*matrices)[(*count)++];
        memset(m, 0, sizeof *m);
        record_place at = {path, line};
        attn_status status = read_matrix(&at, record, m);
        cJSON_Delete(record);
        ATTN_TRY(status);
        p = end;
    }
    if (*count == 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s: no matrices in the file", fn, path);
    return ATTN_OK;
}

attn_status attn_viz_matrices_read(const char *path, attn_viz_matrix **matrices, int64_t *count)
{
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_NOT_NULL(matrices);
    ATTN_CHECK_NOT_NULL(count);
    *matrices = NULL;
    *count = 0;
    char *text = NULL;
    size_t size = 0;
    ATTN_TRY(viz_read_file(fn, path, &text, &size));
    attn_status status = parse_all(path, text, size, matrices, count);
    free(text);
    if (status != ATTN_OK) {
        attn_viz_matrices_free(*matrices, *count);
        *matrices = NULL;
        *count = 0;
    }
    return status;
}
