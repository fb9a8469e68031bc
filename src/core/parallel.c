/* The library's one thread pool. Every parallel kernel goes through attn_parallel_for, so
 * the thread count is decided here and nowhere else. */
#include "core/internal.h"

#include <stdlib.h>
#include <unistd.h>
#ifdef ATTN_HAVE_OPENMP
#include <omp.h>
#endif

static int requested_threads; /* 0 = not decided yet */

static int default_threads(void)
{
    const char *env = getenv("ATTN_NUM_THREADS");
    if (env != NULL && *env != '\0') {
        char *end = NULL;
        long n = strtol(env, &end, 10);
        if (end != env && *end == '\0' && n > 0 && n <= 1024)
            return (int)n;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 ? (int)cores : 1;
}

attn_status attn_set_num_threads(int n)
{
    if (n < 0 || n > 1024)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_set_num_threads: %d is not between 0 and 1024", n);
    requested_threads = n == 0 ? default_threads() : n;
    return ATTN_OK;
}

int attn_get_num_threads(void)
{
    if (requested_threads == 0)
        requested_threads = default_threads();
#ifdef ATTN_HAVE_OPENMP
    return requested_threads;
#else
    return 1;
#endif
}

int attn_parallel_threads(void)
{
#ifdef ATTN_HAVE_OPENMP
    if (omp_in_parallel())
        return 1;
#endif
    return attn_get_num_threads();
}

void attn_parallel_for(int64_t n, int64_t min_chunk, attn_range_fn body, void *ctx)
{
    if (n <= 0)
        return;
    if (min_chunk < 1)
        min_chunk = 1;
    int64_t threads = attn_parallel_threads();
    if (threads > n / min_chunk)
        threads = n / min_chunk;
    if (threads <= 1) {
        body(ctx, 0, n, 0);
        return;
    }
#ifdef ATTN_HAVE_OPENMP
#pragma omp parallel num_threads((int)threads)
    {
        int64_t t = omp_get_thread_num();
        int64_t count = omp_get_num_threads();
        int64_t begin = n * t / count;
        int64_t end = n * (t + 1) / count;
        if (begin < end)
            body(ctx, begin, end, (int)t);
    }
#else
    body(ctx, 0, n, 0);
#endif
}
