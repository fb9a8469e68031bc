/* Training logs as JSON lines, and their loss curves. */
#include "viz/viz_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A legend entry: a log's name, then the curve's kind. */
enum { LABEL_BYTES = 160 };

enum { FIELD_STEP, FIELD_EPOCH, FIELD_TRAIN, FIELD_VALID, FIELD_LR, FIELD_COUNT };
static const char *const field_names[FIELD_COUNT] = {"step", "epoch", "train_loss", "valid_loss",
                                                     "lr"};

static double **field_column(attn_viz_training_log *log, int field)
{
    switch (field) {
    case FIELD_STEP:
        return &log->step;
    case FIELD_EPOCH:
        return &log->epoch;
    case FIELD_TRAIN:
        return &log->train_loss;
    case FIELD_VALID:
        return &log->valid_loss;
    default:
        return &log->lr;
    }
}

void attn_viz_training_log_free(attn_viz_training_log *log)
{
    if (log == NULL)
        return;
    if (log->x != log->step && log->x != log->epoch)
        free(log->x);
    for (int f = 0; f < FIELD_COUNT; f++)
        free(*field_column(log, f));
    memset(log, 0, sizeof *log);
}

static int is_blank(const char *text, size_t size)
{
    for (size_t i = 0; i < size; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\r')
            return 0;
    return 1;
}

static attn_status grow_columns(attn_viz_training_log *log, int64_t *capacity)
{
    if (log->count < *capacity)
        return ATTN_OK;
    int64_t grown = *capacity > 0 ? 2 * *capacity : 256;
    for (int f = 0; f < FIELD_COUNT; f++) {
        double **column = field_column(log, f);
        double *bigger = realloc(*column, (size_t)grown * sizeof **column);
        if (bigger == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                             "attn_viz_training_log_read: out of memory for %lld records",
                             (long long)grown);
        *column = bigger;
    }
    *capacity = grown;
    return ATTN_OK;
}

/* Parses one line (size bytes, not NUL-terminated) into record log->count. */
static attn_status parse_record(const char *path, int64_t line_number, const char *line,
                                size_t size, attn_viz_training_log *log)
{
    static const char *fn = "attn_viz_training_log_read";
    const char *end = NULL;
    cJSON *json = cJSON_ParseWithLengthOpts(line, size, &end, 0);
    if (json == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: malformed JSON at column %lld", fn, path,
                         (long long)line_number,
                         (long long)(end != NULL && end >= line ? end - line + 1 : 1));
    attn_status status = ATTN_OK;
    if (!is_blank(end, size - (size_t)(end - line)))
        status = attn_fail(ATTN_ERR_FORMAT,
                           "%s: %s:%lld: text after the JSON object at column %lld (one record "
                           "per line)",
                           fn, path, (long long)line_number, (long long)(end - line + 1));
    else if (!cJSON_IsObject(json))
        status = attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: expected a JSON object", fn, path,
                           (long long)line_number);
    for (int f = 0; f < FIELD_COUNT && status == ATTN_OK; f++) {
        const cJSON *item = cJSON_GetObjectItemCaseSensitive(json, field_names[f]);
        double value = NAN;
        if (item != NULL && !cJSON_IsNull(item)) {
            if (!cJSON_IsNumber(item) || !isfinite(item->valuedouble))
                status = attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: \"%s\" is not a finite number",
                                   fn, path, (long long)line_number, field_names[f]);
            else
                value = item->valuedouble;
        }
        (*field_column(log, f))[log->count] = value;
    }
    cJSON_Delete(json);
    return status;
}

static int column_has_values(const double *column, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        if (!isnan(column[i]))
            return 1;
    return 0;
}

static attn_status read_records(const char *path, const char *text, size_t size,
                                attn_viz_training_log *log)
{
    int64_t capacity = 0;
    int64_t line_number = 0;
    for (size_t start = 0; start < size;) {
        const char *newline = memchr(text + start, '\n', size - start);
        size_t end = newline != NULL ? (size_t)(newline - text) : size;
        line_number++;
        if (!is_blank(text + start, end - start)) {
            ATTN_TRY(grow_columns(log, &capacity));
            ATTN_TRY(parse_record(path, line_number, text + start, end - start, log));
            log->count++;
        }
        start = end + 1;
    }
    if (log->count == 0)
        return attn_fail(ATTN_ERR_FORMAT, "attn_viz_training_log_read: %s: no records", path);
    if (column_has_values(log->step, log->count)) {
        log->x_name = "step";
        log->x = log->step;
    } else if (column_has_values(log->epoch, log->count)) {
        log->x_name = "epoch";
        log->x = log->epoch;
    } else {
        log->x = malloc((size_t)log->count * sizeof *log->x);
        if (log->x == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_viz_training_log_read: out of memory");
        for (int64_t i = 0; i < log->count; i++)
            log->x[i] = (double)(i + 1);
        log->x_name = "record";
    }
    return ATTN_OK;
}

attn_status attn_viz_training_log_read(const char *path, attn_viz_training_log *log)
{
    static const char *fn = "attn_viz_training_log_read";
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_NOT_NULL(log);
    memset(log, 0, sizeof *log);
    char *text = NULL;
    size_t size = 0;
    ATTN_TRY(viz_read_file(fn, path, &text, &size));
    attn_status status = read_records(path, text, size, log);
    free(text);
    if (status != ATTN_OK)
        attn_viz_training_log_free(log);
    return status;
}

attn_status attn_viz_loss_curves_write(const char *path, const attn_viz_training_log *logs,
                                       const char *const *names, int64_t count,
                                       const attn_viz_chart_options *options)
{
    static const char *fn = "attn_viz_loss_curves_write";
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_NOT_NULL(logs);
    ATTN_CHECK_ARG(count >= 1 && count <= 64, "%s: count must be 1..64, got %lld", fn,
                   (long long)count);
    ATTN_CHECK_ARG(count == 1 || names != NULL, "%s: %lld logs need names", fn, (long long)count);
    size_t floats = 0;
    for (int64_t l = 0; l < count; l++) {
        const attn_viz_training_log *log = &logs[l];
        ATTN_CHECK_ARG(log->count >= 1 && log->x != NULL && log->train_loss != NULL &&
                           log->valid_loss != NULL,
                       "%s: log %lld has no records", fn, (long long)l);
        ATTN_CHECK_ARG(names == NULL || names[l] != NULL, "%s: names[%lld] is NULL", fn,
                       (long long)l);
        floats += 4 * (size_t)log->count;
    }
    /* Records log one loss or the other (validation runs less often): each curve joins the
     * records that have its value, rather than breaking at the others. */
    double *points = malloc(floats * sizeof *points);
    attn_viz_series *series = malloc(2 * (size_t)count * sizeof *series);
    char *labels = malloc(2 * (size_t)count * LABEL_BYTES);
    if (points == NULL || series == NULL || labels == NULL) {
        free(points);
        free(series);
        free(labels);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    /* attn train logs the loss it optimises, label smoothing included, and validates with
     * plain cross-entropy: the legend says so, or the gap between the curves misleads. */
    static const char *const kinds[2] = {"train (with label smoothing, if any)",
                                         "valid (plain cross-entropy)"};
    int64_t drawn = 0;
    double *next = points;
    for (int64_t l = 0; l < count; l++) {
        const attn_viz_training_log *log = &logs[l];
        const double *losses[2] = {log->train_loss, log->valid_loss};
        for (int k = 0; k < 2; k++) {
            double *x = next, *y = x + log->count;
            next += 2 * log->count;
            int64_t n = 0;
            for (int64_t i = 0; i < log->count; i++)
                if (isfinite(log->x[i]) && isfinite(losses[k][i])) {
                    x[n] = log->x[i];
                    y[n++] = losses[k][i];
                }
            if (n == 0)
                continue;
            char *label = labels + (size_t)drawn * LABEL_BYTES;
            if (names != NULL)
                snprintf(label, LABEL_BYTES, "%s: %s", names[l], kinds[k]);
            else
                snprintf(label, LABEL_BYTES, "%s", kinds[k]);
            series[drawn] = (attn_viz_series){label, x, y, n};
            drawn++;
        }
    }
    attn_status status;
    if (drawn == 0) {
        status = attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                           "%s: the log has no train_loss or valid_loss values to plot", fn);
    } else {
        attn_viz_chart_options chosen = {0};
        if (options != NULL)
            chosen = *options;
        if (chosen.title == NULL)
            chosen.title = "loss";
        if (chosen.x_label == NULL)
            chosen.x_label = logs[0].x_name != NULL ? logs[0].x_name : "step";
        if (chosen.y_label == NULL)
            chosen.y_label = "loss";
        status = attn_viz_chart_write(path, series, drawn, &chosen);
    }
    free(points);
    free(series);
    free(labels);
    return status;
}
