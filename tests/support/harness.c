#define _XOPEN_SOURCE 700 /* mkdtemp, nftw */

#include "harness.h"

#include <ftw.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int test_checks_failed;
int test_checks_passed;

void test_record(int ok, const char *file, int line, const char *fmt, ...)
{
    if (ok) {
        test_checks_passed++;
        return;
    }
    test_checks_failed++;
    fprintf(stderr, "%s:%d: check failed: ", file, line);
    va_list args;
    va_start(args, fmt);
    vfprintf(stderr, fmt, args);
    va_end(args);
    fputc('\n', stderr);
}

int test_close(double a, double b, double atol, double rtol)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b))
        return a == b;
    return fabs(a - b) <= atol + rtol * fabs(b);
}

/* ATTN_ISA naming a path this CPU lacks (or no path) leaves every check to the reference and
 * the best path: the run did not test what it was asked to, so it says so and reports itself
 * skipped (CTest's SKIP_RETURN_CODE, tests/CMakeLists.txt) rather than passed. */
static int forced_isa_missing(void)
{
    const char *only = getenv("ATTN_ISA");
    if (only == NULL || *only == '\0')
        return 0;
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++)
        if (strcmp(only, attn_isa_name((attn_isa)isa)) == 0)
            return !attn_isa_supported((attn_isa)isa);
    return 1;
}

int test_summary(void)
{
    printf("%d passed, %d failed\n", test_checks_passed, test_checks_failed);
    if (test_checks_failed != 0)
        return 1;
    if (forced_isa_missing()) {
        printf("SKIPPED: ATTN_ISA=%s is not a path this CPU supports; nothing ran on it\n",
               getenv("ATTN_ISA"));
        return TEST_SKIPPED;
    }
    return 0;
}

static uint64_t next_state(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void test_fill_uniform(float *x, size_t n, float lo, float hi, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * (float)((double)(next_state(&s) >> 11) / 9007199254740992.0);
}

void test_fill_uniform_double(double *x, size_t n, double lo, double hi, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++)
        x[i] = lo + (hi - lo) * ((double)(next_state(&s) >> 11) / 9007199254740992.0);
}

double test_max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

double test_max_abs_diff_double(const double *a, const double *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(a[i] - b[i]);
        if (d > m || isnan(d))
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

double test_max_abs(const float *a, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        if (fabs((double)a[i]) > m)
            m = fabs((double)a[i]);
    return m;
}

int test_arrays_close(const char *what, const float *a, const double *b, size_t n,
                      double atol, double rtol)
{
    size_t worst = 0;
    double worst_excess = 0;
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        double limit = atol + rtol * fabs(b[i]);
        double d = (double)a[i] == b[i] ? 0.0 : fabs((double)a[i] - b[i]); /* equal infinities */
        if (!(d <= limit)) {
            double excess = isnan(d) ? INFINITY : d - limit;
            if (ok || excess > worst_excess) {
                worst = i;
                worst_excess = excess;
            }
            ok = 0;
        }
    }
    if (!ok)
        fprintf(stderr, "  %s: worst at [%zu]: got %.9g, expected %.9g\n", what, worst,
                (double)a[worst], b[worst]);
    return ok;
}

void *test_alloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    if (p == NULL) {
        fprintf(stderr, "test: out of memory (%zu bytes)\n", bytes);
        exit(2);
    }
    return p;
}

static char scratch_root[512];
static pid_t scratch_owner;
static char **scratch_paths;
static size_t scratch_path_count, scratch_path_capacity;

static int remove_scratch_entry(const char *path, const struct stat *info, int type,
                                struct FTW *ftw)
{
    (void)info, (void)type, (void)ftw;
    chmod(path, 0700); /* a folder a test made read-only must be emptied too */
    return remove(path);
}

static void remove_scratch_folder(void)
{
    /* A forked child that exits must not take the parent's files with it. */
    if (getpid() == scratch_owner)
        nftw(scratch_root, remove_scratch_entry, 16, FTW_DEPTH | FTW_PHYS);
    for (size_t i = 0; i < scratch_path_count; i++)
        free(scratch_paths[i]);
    free(scratch_paths);
}

const char *test_scratch_folder(void)
{
    if (scratch_root[0] == '\0') {
        const char *base = getenv("TMPDIR");
        snprintf(scratch_root, sizeof scratch_root, "%s/attn_test_XXXXXX",
                 base != NULL && base[0] != '\0' ? base : "/tmp");
        if (mkdtemp(scratch_root) == NULL) {
            perror("mkdtemp");
            exit(2);
        }
        scratch_owner = getpid();
        atexit(remove_scratch_folder);
    }
    return scratch_root;
}

const char *test_scratch_path(const char *name)
{
    const char *folder = test_scratch_folder();
    if (scratch_path_count == scratch_path_capacity) {
        scratch_path_capacity = scratch_path_capacity == 0 ? 64 : 2 * scratch_path_capacity;
        char **grown = realloc(scratch_paths, scratch_path_capacity * sizeof *grown);
        if (grown == NULL) {
            perror("test_scratch_path");
            exit(2);
        }
        scratch_paths = grown;
    }
    const size_t bytes = strlen(folder) + 1 + strlen(name) + 1;
    char *path = test_alloc(bytes);
    snprintf(path, bytes, "%s/%s", folder, name);
    scratch_paths[scratch_path_count++] = path;
    return path;
}

const char *test_write_scratch(const char *name, const void *bytes, size_t size)
{
    const char *path = test_scratch_path(name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(bytes, 1, size, f) != size || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
    return path;
}

const char *test_write_scratch_text(const char *name, const char *text)
{
    return test_write_scratch(name, text, strlen(text));
}
