/* A minimal test harness: checks count failures instead of stopping, and every test
 * program ends by printing "N passed, N failed" and exiting non-zero on any failure. */
#ifndef ATTN_TEST_HARNESS_H
#define ATTN_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "attn/attn.h"

/* Whether a test runs instruction set isa: the CPU has it and ATTN_ISA, when set, names it
 * (the reference, every test's ground truth, always runs). A run per path, such as
 * `ATTN_ISA=portable ctest -L kernels` in make cross-test, then checks that path alone
 * against the reference; unset, every path the CPU has is checked. */
static inline int test_isa_wanted(attn_isa isa)
{
    const char *only = getenv("ATTN_ISA");
    if (only != NULL && *only != '\0' && isa != ATTN_ISA_REFERENCE &&
        strcmp(only, attn_isa_name(isa)) != 0)
        return 0;
    return attn_isa_supported(isa);
}

/* test_summary's exit status when ATTN_ISA names a path this CPU lacks (CTest: skipped). */
#define TEST_SKIPPED 77

extern int test_checks_failed;
extern int test_checks_passed;

void test_record(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#define CHECK(cond, ...) test_record((cond) ? 1 : 0, __FILE__, __LINE__, __VA_ARGS__)
/* |a - b| <= atol + rtol * |b| */
#define CHECK_CLOSE(a, b, atol, rtol)                                                        \
    test_record(test_close((double)(a), (double)(b), (atol), (rtol)), __FILE__, __LINE__,   \
                "%s = %.9g, expected %s = %.9g", #a, (double)(a), #b, (double)(b))
#define CHECK_OK(expr)                                                                       \
    do {                                                                                     \
        attn_status check_status_ = (expr);                                                  \
        test_record(check_status_ == ATTN_OK, __FILE__, __LINE__, "%s failed: %s (%s)",     \
                    #expr, attn_status_name(check_status_), attn_last_error());             \
    } while (0)
/* The call must fail with the given status and leave a non-empty message. */
#define CHECK_FAILS(expr, status)                                                            \
    do {                                                                                     \
        attn_clear_error();                                                                  \
        attn_status check_status_ = (expr);                                                  \
        test_record(check_status_ == (status) && attn_last_error()[0] != '\0', __FILE__,     \
                    __LINE__, "%s returned %s ('%s'), expected %s", #expr,                   \
                    attn_status_name(check_status_), attn_last_error(),                      \
                    attn_status_name(status));                                               \
    } while (0)

#define RUN_TEST(fn)                                                                         \
    do {                                                                                     \
        int failed_before_ = test_checks_failed;                                             \
        fn();                                                                                \
        printf("%-6s %s\n", test_checks_failed == failed_before_ ? "ok" : "FAIL", #fn);      \
    } while (0)

int test_close(double a, double b, double atol, double rtol);
/* Prints the summary line and returns the process exit code. */
int test_summary(void);

/* Deterministic test data. */
void test_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed);
void test_fill_uniform_double(double *x, size_t n, double lo, double hi, uint64_t seed);
/* Largest |a - b| and largest |b| over n values. */
double test_max_abs_diff(const float *a, const float *b, size_t n);
double test_max_abs_diff_double(const double *a, const double *b, size_t n);
double test_max_abs(const float *a, size_t n);
/* Compare a float array with a double reference: every |a-b| <= atol + rtol*|b|.
 * Prints the worst element on failure. */
int test_arrays_close(const char *what, const float *a, const double *b, size_t n,
                      double atol, double rtol);
/* Checks "ok" with a message naming the array. */
#define CHECK_ARRAYS_CLOSE(what, a, b, n, atol, rtol)                                        \
    test_record(test_arrays_close(what, a, b, n, atol, rtol), __FILE__, __LINE__,            \
                "%s differs from reference", what)

void *test_alloc(size_t bytes); /* exits the test program on failure */

/* The files a test program writes go in one fresh folder under $TMPDIR (or /tmp),
 * attn_test_XXXXXX, made at the first call; when the program exits, the folder goes with
 * everything in it, whatever a test left (read-only folders included). */
const char *test_scratch_folder(void);
/* "<scratch folder>/<name>": a string of its own, valid until the program exits. */
const char *test_scratch_path(const char *name);
/* Writes the bytes to <scratch folder>/<name> (exits the program on failure); its path. */
const char *test_write_scratch(const char *name, const void *bytes, size_t size);
const char *test_write_scratch_text(const char *name, const char *text);

#endif
