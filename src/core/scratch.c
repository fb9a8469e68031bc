/* Work buffers that kernels need for the length of one call (per-thread tiles, partial sums),
 * kept across calls: a training step makes the same calls every step, so after the first
 * step every request is served from the cache and the step allocates nothing (and does not
 * page-fault fresh memory in, which cost ~5% of a step when these were malloc'ed per call).
 *
 * The cache holds a few idle buffers; a request takes the smallest idle buffer that is large
 * enough, or else replaces the largest idle one by a new allocation of the size asked for,
 * so the buffers converge to the sizes the calls need. At most CACHED buffers stay idle, and
 * reachable (no leak reports at exit). Callers on several threads may take buffers at once. */
#include "core/internal.h"

#include <pthread.h>
#include <stdlib.h>

enum {
    CACHED = 16,
    /* each buffer starts with a header holding its capacity, padded to keep 64-byte alignment */
    HEADER = 64
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char *idle[CACHED]; /* headers of idle buffers; NULL = empty slot */

static size_t capacity_of(const unsigned char *header) { return *(const size_t *)header; }

void *attn_scratch_acquire(size_t bytes)
{
    unsigned char *found = NULL, *largest = NULL;
    int found_slot = -1, largest_slot = -1;
    pthread_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHED; i++) {
        if (idle[i] == NULL)
            continue;
        size_t capacity = capacity_of(idle[i]);
        if (capacity >= bytes && (found == NULL || capacity < capacity_of(found))) {
            found = idle[i];
            found_slot = i;
        }
        if (largest == NULL || capacity > capacity_of(largest)) {
            largest = idle[i];
            largest_slot = i;
        }
    }
    if (found != NULL)
        idle[found_slot] = NULL;
    else if (largest != NULL)
        idle[largest_slot] = NULL; /* too small: replaced below */
    pthread_mutex_unlock(&cache_lock);
    if (found != NULL)
        return found + HEADER;
    attn_aligned_free(largest);
    if (bytes > SIZE_MAX - HEADER) {
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "scratch of %zu bytes overflows", bytes);
        return NULL;
    }
    unsigned char *fresh = attn_aligned_alloc(HEADER + bytes);
    if (fresh == NULL)
        return NULL;
    *(size_t *)fresh = bytes;
    return fresh + HEADER;
}

void attn_scratch_release(void *p)
{
    if (p == NULL)
        return;
    unsigned char *header = (unsigned char *)p - HEADER;
    unsigned char *evicted = header;
    pthread_mutex_lock(&cache_lock);
    int smallest = -1;
    for (int i = 0; i < CACHED; i++) {
        if (idle[i] == NULL) {
            idle[i] = header;
            evicted = NULL;
            break;
        }
        if (smallest < 0 || capacity_of(idle[i]) < capacity_of(idle[smallest]))
            smallest = i;
    }
    /* full: keep the larger buffers, which can serve more requests */
    if (evicted != NULL && capacity_of(idle[smallest]) < capacity_of(header)) {
        evicted = idle[smallest];
        idle[smallest] = header;
    }
    pthread_mutex_unlock(&cache_lock);
    attn_aligned_free(evicted);
}
