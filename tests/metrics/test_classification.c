/* A classifier's scores: accuracy, per-class precision, recall and F1, macro-F1 (scikit-learn's
 * average="macro" over gold and predicted labels) and the confusion matrix, on cases worked by
 * hand; refusals of empty and invalid labels. */
#include "harness.h"

#include <math.h>
#include <string.h>

static int close_to(double a, double b)
{
    return fabs(a - b) < 1e-9;
}

static void test_scores_worked_by_hand(void)
{
    /* gold a b b c d, predicted a b c c c: classes a b c d. */
    const char *gold[] = {"a", "b", "b", "c", "d"};
    const char *predicted[] = {"a", "b", "c", "c", "c"};
    attn_classification_report *r = NULL;
    CHECK_OK(attn_classification_score(gold, predicted, 5, &r));
    CHECK(r->lines == 5 && r->correct == 3 && close_to(r->accuracy, 60.0), "accuracy %g",
          r->accuracy);
    CHECK(r->classes == 4 && strcmp(r->labels[0], "a") == 0 && strcmp(r->labels[3], "d") == 0,
          "labels of both lists, sorted");
    /* a: P 1 R 1; b: P 1 R 1/2; c: P 1/3 R 1; d: never predicted, P 0 R 0. */
    const double precision[] = {100.0, 100.0, 100.0 / 3.0, 0.0};
    const double recall[] = {100.0, 50.0, 100.0, 0.0};
    const double f1[] = {100.0, 200.0 / 3.0, 50.0, 0.0};
    for (int c = 0; c < 4; c++)
        CHECK(close_to(r->precision[c], precision[c]) && close_to(r->recall[c], recall[c]) &&
                  close_to(r->f1[c], f1[c]),
              "class %s: %g %g %g", r->labels[c], r->precision[c], r->recall[c], r->f1[c]);
    CHECK(close_to(r->macro_f1, (100.0 + 200.0 / 3.0 + 50.0 + 0.0) / 4.0), "macro-F1 %g",
          r->macro_f1);
    const int64_t confusion[16] = {1, 0, 0, 0, /**/ 0, 1, 1, 0, /**/ 0, 0, 1, 0, /**/ 0, 0, 1, 0};
    CHECK(memcmp(r->confusion, confusion, sizeof confusion) == 0, "confusion matrix");
    CHECK(r->gold[1] == 2 && r->predicted[2] == 3, "support and predictions per class");
    attn_classification_report_destroy(r);
    attn_classification_report_destroy(NULL);
}

static void test_refusals(void)
{
    const char *gold[] = {"a", ""};
    const char *predicted[] = {"a", "b"};
    attn_classification_report *r = NULL;
    CHECK_FAILS(attn_classification_score(gold, predicted, 2, &r), ATTN_ERR_FORMAT);
    CHECK(r == NULL && strstr(attn_last_error(), "gold label 2 is empty") != NULL, "%s",
          attn_last_error());
    const char *bad[] = {"a", "\xC3\x28"};
    CHECK_FAILS(attn_classification_score(predicted, bad, 2, &r), ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_classification_score(gold, predicted, 0, &r), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_scores_worked_by_hand);
    RUN_TEST(test_refusals);
    return test_summary();
}
