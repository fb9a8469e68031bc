/* The library's one thread pool. Every parallel kernel goes through attn_parallel_for, so
 * the thread count is decided here and nowhere else.
 *
 * Why not OpenMP's fork-join: a training step runs a few thousand parallel regions of tens to
 * hundreds of microseconds. On a machine whose cores are shared with other processes, a
 * fork-join region ends only when every team thread has been scheduled and finished its
 * share, and the threads that arrive first spin at the barrier meanwhile: with two threads on
 * two busy cores a step took 4-5x longer than with one. Here the chunks of a call are claimed
 * from a shared counter by whichever thread is free, the calling thread included, so a worker
 * that is not running simply leaves its chunk to the caller. The partition into chunks is the
 * same whoever runs them (it depends on n, min_chunk and the thread count only), and each
 * chunk runs whole on one thread, so results stay bit-identical.
 *
 * Workers spin briefly for the next call (calls come back to back within a step), then sleep
 * on a condition variable until the next call wakes them. */
#define _POSIX_C_SOURCE 200809L /* pthread_sigmask, sysconf */
#include "core/internal.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

enum {
    MAX_THREADS = 1024, /* chunks fit the 16 bits they have in pool.claims */
    /* pause instructions a worker spins for the next call before sleeping: ~100-200 us */
    WORKER_SPINS = 4096,
    /* pause instructions the caller spins for a worker's last chunk before yielding */
    CALLER_SPINS = 1024
};

static int requested_threads; /* 0 = not decided yet */

static int default_threads(void)
{
    const char *env = getenv("ATTN_NUM_THREADS");
    if (env != NULL && *env != '\0') {
        char *end = NULL;
        long n = strtol(env, &end, 10);
        if (end != env && *end == '\0' && n > 0 && n <= MAX_THREADS)
            return (int)n;
    }
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    return cores > 0 ? (int)(cores < MAX_THREADS ? cores : MAX_THREADS) : 1;
}

attn_status attn_check_threads_variable(void)
{
    const char *env = getenv("ATTN_NUM_THREADS");
    if (env == NULL || *env == '\0')
        return ATTN_OK;
    char *end = NULL;
    errno = 0;
    long n = strtol(env, &end, 10);
    if (end == env || *end != '\0' || errno != 0 || n < 0 || n > MAX_THREADS)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "ATTN_NUM_THREADS=%s is not a thread count; set a whole number from 1 "
                         "to %d, or 0 (or unset it) for every core",
                         env, MAX_THREADS);
    return ATTN_OK;
}

attn_status attn_set_num_threads(int n)
{
    if (n < 0 || n > MAX_THREADS)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_set_num_threads: %d is not between 0 and %d", n, MAX_THREADS);
    requested_threads = n == 0 ? default_threads() : n;
    return ATTN_OK;
}

int attn_get_num_threads(void)
{
    if (requested_threads == 0)
        requested_threads = default_threads();
    return requested_threads;
}

/* Set while this thread runs a chunk: a nested attn_parallel_for runs inline. */
static _Thread_local int inside_chunk;

int attn_parallel_threads(void)
{
    return inside_chunk ? 1 : attn_get_num_threads();
}

/* ---- the pool ---------------------------------------------------------------------------- */

/* The call being run. Its fields are written by the caller before it publishes the call in
 * `claims` and read by a worker only after it has claimed a chunk, and the caller does not
 * return (and so never rewrites them) before every claimed chunk is done. */
typedef struct pool_call {
    attn_range_fn body;
    void *ctx;
    int64_t n, chunks;
} pool_call;

/* claims packs (call number << 32) | (chunks << 16) | next unclaimed chunk. A worker claims
 * with a CAS that fails once the call number moved on, so it never takes a chunk of a later
 * call thinking it belongs to an earlier one, and it learns whether a chunk is left without
 * reading the call's fields. */
#define CLAIM_CALL(word) ((uint32_t)((word) >> 32))
#define CLAIM_CHUNKS(word) ((int64_t)(((word) >> 16) & 0xffffu))
#define CLAIM_NEXT(word) ((int64_t)((word)&0xffffu))

static struct {
    pthread_mutex_t lock; /* guards sleeping workers and the worker count */
    pthread_cond_t wake;
    atomic_uint_fast64_t claims;
    atomic_int_fast64_t done; /* chunks finished in the current call */
    atomic_int sleepers;
    atomic_flag busy; /* a call is running (another user thread then runs its call inline) */
    pool_call call;
    int workers;
    uint32_t call_number;
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0,
          ATOMIC_FLAG_INIT,          {NULL, NULL, 0, 0},       0, 0};

static void run_chunk(const pool_call *call, int64_t chunk)
{
    int64_t begin = call->n * chunk / call->chunks;
    int64_t end = call->n * (chunk + 1) / call->chunks;
    inside_chunk = 1;
    if (begin < end)
        call->body(call->ctx, begin, end, (int)chunk);
    inside_chunk = 0;
}

/* Claims and runs chunks of call number `number` while any are left. */
static void run_claims(uint32_t number)
{
    uint_fast64_t word = atomic_load_explicit(&pool.claims, memory_order_acquire);
    while (CLAIM_CALL(word) == number && CLAIM_NEXT(word) < CLAIM_CHUNKS(word)) {
        if (!atomic_compare_exchange_weak_explicit(&pool.claims, &word, word + 1,
                                                   memory_order_acq_rel, memory_order_acquire))
            continue;
        run_chunk(&pool.call, CLAIM_NEXT(word));
        atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
        word = atomic_load_explicit(&pool.claims, memory_order_acquire);
    }
}

static void *worker_main(void *unused)
{
    (void)unused;
    uint32_t seen = CLAIM_CALL(atomic_load_explicit(&pool.claims, memory_order_acquire));
    for (;;) {
        uint32_t number = seen;
        for (int spin = 0; spin < WORKER_SPINS && number == seen; spin++) {
            CPU_RELAX();
            number = CLAIM_CALL(atomic_load_explicit(&pool.claims, memory_order_acquire));
        }
        if (number == seen) {
            pthread_mutex_lock(&pool.lock);
            atomic_fetch_add(&pool.sleepers, 1);
            while ((number = CLAIM_CALL(atomic_load(&pool.claims))) == seen)
                pthread_cond_wait(&pool.wake, &pool.lock);
            atomic_fetch_sub(&pool.sleepers, 1);
            pthread_mutex_unlock(&pool.lock);
        }
        seen = number;
        run_claims(number);
    }
    return NULL;
}

/* Starts workers up to `wanted` (they live as long as the process); fewer if the system
 * refuses, which only means the caller runs more chunks itself. */
static void ensure_workers(int wanted)
{
    if (pool.workers >= wanted)
        return;
    /* Workers start with every signal blocked, so signals meant for the process (Ctrl-C in
     * attn train) reach the application's own threads, as they did without a pool. */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    pthread_mutex_lock(&pool.lock);
    while (pool.workers < wanted) {
        pthread_t thread;
        pthread_attr_t attr;
        if (pthread_attr_init(&attr) != 0)
            break;
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&thread, &attr, worker_main, NULL);
        pthread_attr_destroy(&attr);
        if (failed)
            break;
        pool.workers++;
    }
    pthread_mutex_unlock(&pool.lock);
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
}

/* A forked child has the pool's memory but none of its workers. */
static void forget_workers_after_fork(void)
{
    pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_wake = PTHREAD_COND_INITIALIZER;
    pool.lock = fresh_lock;
    pool.wake = fresh_wake;
    atomic_store(&pool.sleepers, 0);
    atomic_flag_clear(&pool.busy);
    pool.workers = 0;
}

static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;

static void install_fork_handler(void)
{
    pthread_atfork(NULL, NULL, forget_workers_after_fork);
}

static void run_inline(attn_range_fn body, void *ctx, int64_t n, int64_t chunks)
{
    pool_call call = {body, ctx, n, chunks};
    for (int64_t chunk = 0; chunk < chunks; chunk++)
        run_chunk(&call, chunk);
}

void attn_parallel_for(int64_t n, int64_t min_chunk, attn_range_fn body, void *ctx)
{
    if (n <= 0)
        return;
    if (min_chunk < 1)
        min_chunk = 1;
    int64_t chunks = attn_parallel_threads();
    if (chunks > n / min_chunk)
        chunks = n / min_chunk;
    if (chunks <= 1) {
        body(ctx, 0, n, 0);
        return;
    }
    /* Another user thread is running a call: run this one's chunks here, same partition. */
    if (atomic_flag_test_and_set_explicit(&pool.busy, memory_order_acquire)) {
        run_inline(body, ctx, n, chunks);
        return;
    }
    pthread_once(&fork_handler_once, install_fork_handler);
    ensure_workers((int)chunks - 1);

    pool.call = (pool_call){body, ctx, n, chunks};
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    uint32_t number = ++pool.call_number;
    atomic_store_explicit(&pool.claims, (uint_fast64_t)number << 32 | (uint_fast64_t)chunks << 16,
                          memory_order_seq_cst);
    if (atomic_load(&pool.sleepers) > 0) {
        pthread_mutex_lock(&pool.lock);
        pthread_cond_broadcast(&pool.wake);
        pthread_mutex_unlock(&pool.lock);
    }
    run_claims(number);
    for (int spin = 0; atomic_load_explicit(&pool.done, memory_order_acquire) < chunks; spin++) {
        if (spin < CALLER_SPINS)
            CPU_RELAX();
        else
            sched_yield();
    }
    atomic_flag_clear_explicit(&pool.busy, memory_order_release);
}
