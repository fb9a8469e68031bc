/* A classifier's predictions against gold labels: accuracy, per-class precision, recall and F1,
 * their macro average, and the confusion matrix. */
#include "metrics/metrics_internal.h"

#include <stdlib.h>
#include <string.h>

void attn_classification_report_destroy(attn_classification_report *r)
{
    if (r == NULL)
        return;
    free(r->labels); /* the strings live in the same block */
    free(r->gold);
    free(r->predicted);
    free(r->precision);
    free(r->recall);
    free(r->f1);
    free(r->confusion);
    free(r);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The class of a label: a binary search of the sorted labels. */
static int64_t class_of(const attn_classification_report *r, const char *label)
{
    int64_t lo = 0, hi = r->classes - 1;
    while (lo <= hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        const int c = strcmp(r->labels[mid], label);
        if (c == 0)
            return mid;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

static attn_status check_label(const char *fn, const char *what, int64_t i, const char *label)
{
    ATTN_TRY(check_segment(fn, what, i, label));
    if (label[0] == '\0')
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s label %lld is empty", fn, what,
                         (long long)(i + 1));
    return ATTN_OK;
}

/* The distinct labels of both lists, sorted, copied into one block with their pointers. */
static attn_status collect_labels(const char *fn, const char *const *gold,
                                  const char *const *predicted, int64_t n,
                                  attn_classification_report *r)
{
    const char **all = malloc(2 * (size_t)n * sizeof *all);
    if (all == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t i = 0; i < n; i++) {
        all[2 * i] = gold[i];
        all[2 * i + 1] = predicted[i];
    }
    qsort(all, 2 * (size_t)n, sizeof *all, compare_strings);
    int64_t distinct = 0;
    size_t bytes = 0;
    for (int64_t i = 0; i < 2 * n; i++)
        if (distinct == 0 || strcmp(all[distinct - 1], all[i]) != 0) {
            all[distinct++] = all[i];
            bytes += strlen(all[i]) + 1;
        }
    r->labels = malloc((size_t)distinct * sizeof *r->labels + bytes);
    if (r->labels == NULL) {
        free(all);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    char *text = (char *)(r->labels + distinct);
    for (int64_t k = 0; k < distinct; k++) {
        const size_t size = strlen(all[k]) + 1;
        r->labels[k] = memcpy(text, all[k], size);
        text += size;
    }
    r->classes = distinct;
    free(all);
    return ATTN_OK;
}

static double share(int64_t part, int64_t whole)
{
    return whole > 0 ? 100.0 * (double)part / (double)whole : 0.0;
}

static attn_status score(const char *fn, const char *const *gold, const char *const *predicted,
                         int64_t n, attn_classification_report *r)
{
    ATTN_TRY(collect_labels(fn, gold, predicted, n, r));
    const size_t k = (size_t)r->classes;
    r->gold = calloc(k, sizeof *r->gold);
    r->predicted = calloc(k, sizeof *r->predicted);
    r->precision = calloc(k, sizeof *r->precision);
    r->recall = calloc(k, sizeof *r->recall);
    r->f1 = calloc(k, sizeof *r->f1);
    r->confusion = calloc(k * k, sizeof *r->confusion);
    if (r->gold == NULL || r->predicted == NULL || r->precision == NULL || r->recall == NULL ||
        r->f1 == NULL || r->confusion == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu classes", fn, k);
    for (int64_t i = 0; i < n; i++) {
        const int64_t g = class_of(r, gold[i]), p = class_of(r, predicted[i]);
        r->gold[g]++;
        r->predicted[p]++;
        r->confusion[g * r->classes + p]++;
        r->correct += g == p;
    }
    r->lines = n;
    r->accuracy = share(r->correct, n);
    double f1_sum = 0.0;
    for (int64_t c = 0; c < r->classes; c++) {
        const int64_t right = r->confusion[c * r->classes + c];
        r->precision[c] = share(right, r->predicted[c]);
        r->recall[c] = share(right, r->gold[c]);
        /* 2PR / (P + R) = 2 right / (predicted + gold), with no division by zero. */
        r->f1[c] = share(2 * right, r->predicted[c] + r->gold[c]);
        f1_sum += r->f1[c];
    }
    r->macro_f1 = f1_sum / (double)r->classes;
    return ATTN_OK;
}

attn_status attn_classification_score(const char *const *gold, const char *const *predicted,
                                      int64_t n, attn_classification_report **out)
{
    static const char fn[] = "attn_classification_score";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(n >= 1, "%s: need at least one line, got %lld", fn, (long long)n);
    ATTN_CHECK_NOT_NULL(gold);
    ATTN_CHECK_NOT_NULL(predicted);
    for (int64_t i = 0; i < n; i++) {
        ATTN_TRY(check_label(fn, "gold", i, gold[i]));
        ATTN_TRY(check_label(fn, "predicted", i, predicted[i]));
    }
    attn_classification_report *r = calloc(1, sizeof *r);
    if (r == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    const attn_status status = score(fn, gold, predicted, n, r);
    if (status != ATTN_OK) {
        attn_classification_report_destroy(r);
        return status;
    }
    *out = r;
    return ATTN_OK;
}
