/* Data parallelism over MPI, and the one-process stand-in used without it (distributed.h).
 *
 * MPI is initialised only when a program asks (attn_distributed_start, or a trainer with
 * options.distributed set): a program that embeds the library and never asks makes no MPI call,
 * under mpirun or not. Every call goes through a duplicate of MPI_COMM_WORLD whose error
 * handler returns codes (MPI_ERRORS_RETURN), so a failure becomes an attn_status with a message
 * instead of MPI's default abort. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include "train/distributed.h"

#include "attn/attn_trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef ATTN_HAVE_MPI
#include <mpi.h>
#endif

/* 8 MiB of gradients per all-reduce: large enough that the per-message latency is small against
 * the transfer (tens of microseconds against milliseconds), small enough that a BASE model has
 * about twenty of them to overlap with its backward. */
enum { BUCKET_FLOATS = 2 << 20 };

typedef struct bucket {
    int64_t begin, end;        /* floats of the gradient buffer */
    attn_param_id first, last; /* the parameters in it */
    size_t ready_at;           /* final once the backward has this many nodes or fewer left */
} bucket;

struct attn_dist {
    int rank, size;
    float *grads;
    int64_t floats;
    bucket *buckets;
    int64_t n_buckets;
    /* ---- the backward being summed ---- */
    attn_graph *graph;
    const float *local_sum;
    int64_t next; /* the next bucket to start, counting down */
    attn_dist_timing timing;
#ifdef ATTN_HAVE_MPI
    MPI_Comm comm;         /* MPI_COMM_NULL: one process */
    MPI_Request *requests; /* one per bucket */
    /* From four ranks on, a copy of each bucket is what the all-reduce sends: Open MPI's
     * non-blocking all-reduce (libnbc) sums an in-place buffer over a binomial tree, which
     * moves 2 log2(N) times the bucket through a link, and a separate send buffer of 64 KiB
     * or more by reduce-scatter + all-gather, 2 (N - 1) / N times (docs/distributed.md).
     * Below four ranks it takes the binomial tree either way. NULL then. */
    float *send;
#endif
};

static double now_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the process-wide part (public, attn_trainer.h) ------------------------------------------ */

#ifdef ATTN_HAVE_MPI
static int initialised_here;

static attn_status mpi_failure(int code, const char *what, int rank)
{
    char text[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    MPI_Error_string(code, text, &length);
    return attn_fail(ATTN_ERR_IO,
                     "data-parallel training: %s failed on rank %d: %s (another process of the "
                     "run has probably stopped; its own message says why)",
                     what, rank, text);
}
#define MPI_TRY(dist, call, what)                                                                  \
    do {                                                                                           \
        int mpi_code_ = (call);                                                                    \
        if (mpi_code_ != MPI_SUCCESS)                                                              \
            return mpi_failure(mpi_code_, what, (dist)->rank);                                     \
    } while (0)
#endif

int attn_distributed_built(void)
{
#ifdef ATTN_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

const char *attn_distributed_description(void)
{
#ifdef ATTN_HAVE_MPI
    static char description[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    if (description[0] == '\0' && MPI_Get_library_version(description, &length) == MPI_SUCCESS) {
        /* The first line names the implementation and version; the rest is build detail. */
        char *end = strpbrk(description, "\r\n,");
        if (end != NULL)
            *end = '\0';
    }
    return description;
#else
    return "none: built without MPI (one process)";
#endif
}

int attn_distributed_launched(void)
{
    /* Open MPI's mpirun, and the PMI/PMIx launchers of MPICH and Slurm. */
    return getenv("OMPI_COMM_WORLD_SIZE") != NULL || getenv("PMI_SIZE") != NULL ||
           getenv("PMIX_RANK") != NULL;
}

attn_status attn_distributed_start(int *rank, int *size)
{
    ATTN_CHECK_NOT_NULL(rank);
    ATTN_CHECK_NOT_NULL(size);
    *rank = 0;
    *size = 1;
#ifdef ATTN_HAVE_MPI
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    if (finalised)
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "attn_distributed_start: MPI was already finalised in this process");
    if (!initialised) {
        /* Only the thread that called this makes MPI calls; the pool's threads never do. */
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
            return attn_fail(ATTN_ERR_IO, "attn_distributed_start: MPI_Init_thread failed");
        initialised_here = 1;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return ATTN_OK;
#else
    return attn_fail(ATTN_ERR_UNSUPPORTED,
                     "attn_distributed_start: this build of attn has no MPI (install Debian's "
                     "libopenmpi-dev and openmpi-bin and build again)");
#endif
}

void attn_distributed_finish(void)
{
#ifdef ATTN_HAVE_MPI
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (initialised_here && !finalised)
        MPI_Finalize();
#endif
}

void attn_distributed_abort(int code)
{
#ifdef ATTN_HAVE_MPI
    int initialised = 0, finalised = 0;
    MPI_Initialized(&initialised);
    MPI_Finalized(&finalised);
    if (initialised && !finalised)
        MPI_Abort(MPI_COMM_WORLD, code);
#else
    (void)code;
#endif
}

/* ---- a run's ranks ------------------------------------------------------------------------- */

static int is_distributed(const attn_dist *dist)
{
    return dist->size > 1;
}

/* Buckets of about BUCKET_FLOATS at parameter boundaries, covering the whole buffer (the
 * alignment padding between parameters included, which is zero). */
static attn_status cut_buckets(attn_dist *dist, attn_params *store)
{
    const size_t count = attn_params_count(store);
    dist->buckets = malloc((count > 0 ? count : 1) * sizeof *dist->buckets);
    if (dist->buckets == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_trainer_create: out of memory");
    int64_t n = 0;
    for (size_t i = 0; i < count; i++) {
        attn_param_info info;
        ATTN_TRY(attn_params_info(store, (attn_param_id)i, &info));
        bucket *open = n > 0 ? &dist->buckets[n - 1] : NULL;
        if (open != NULL && (int64_t)info.offset - open->begin < BUCKET_FLOATS) {
            open->last = (attn_param_id)i;
            continue;
        }
        if (open != NULL)
            open->end = (int64_t)info.offset;
        dist->buckets[n++] =
            (bucket){(int64_t)info.offset, 0, (attn_param_id)i, (attn_param_id)i, SIZE_MAX};
    }
    if (n > 0) {
        dist->buckets[0].begin = 0;
        dist->buckets[n - 1].end = dist->floats;
    }
    dist->n_buckets = n;
    return ATTN_OK;
}

attn_status attn_dist_open(int use_mpi, attn_params *store, attn_dist **out)
{
    *out = NULL;
    attn_dist *dist = calloc(1, sizeof *dist);
    if (dist == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_trainer_create: out of memory");
    dist->size = 1;
    dist->floats = (int64_t)attn_params_buffer_floats(store);
    dist->grads = attn_params_buffer(store, ATTN_PARAM_GRADS);
#ifdef ATTN_HAVE_MPI
    dist->comm = MPI_COMM_NULL;
#endif
    attn_status status = cut_buckets(dist, store);
    if (status == ATTN_OK && use_mpi) {
#ifdef ATTN_HAVE_MPI
        int rank, size;
        status = attn_distributed_start(&rank, &size);
        if (status == ATTN_OK && MPI_Comm_dup(MPI_COMM_WORLD, &dist->comm) != MPI_SUCCESS)
            status = attn_fail(ATTN_ERR_IO, "attn_trainer_create: MPI_Comm_dup failed");
        if (status == ATTN_OK) {
            MPI_Comm_set_errhandler(dist->comm, MPI_ERRORS_RETURN);
            MPI_Comm_rank(dist->comm, &dist->rank);
            MPI_Comm_size(dist->comm, &dist->size);
            dist->requests = malloc((size_t)(dist->n_buckets > 0 ? dist->n_buckets : 1) *
                                    sizeof *dist->requests);
            if (dist->requests == NULL)
                status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_trainer_create: out of memory");
            for (int64_t b = 0; status == ATTN_OK && b < dist->n_buckets; b++)
                dist->requests[b] = MPI_REQUEST_NULL;
            if (status == ATTN_OK && dist->size >= 4) {
                dist->send = malloc((size_t)(dist->floats > 0 ? dist->floats : 1) * sizeof(float));
                if (dist->send == NULL)
                    status =
                        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_trainer_create: out of memory");
            }
        }
#else
        status = attn_fail(ATTN_ERR_UNSUPPORTED,
                           "attn_trainer_create: options.distributed is set, but this build of "
                           "attn has no MPI (install Debian's libopenmpi-dev and build again)");
#endif
    }
    if (status != ATTN_OK) {
        attn_dist_close(dist);
        return status;
    }
    *out = dist;
    return ATTN_OK;
}

void attn_dist_close(attn_dist *dist)
{
    if (dist == NULL)
        return;
#ifdef ATTN_HAVE_MPI
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (dist->comm != MPI_COMM_NULL && !finalised)
        MPI_Comm_free(&dist->comm);
    free(dist->requests);
    free(dist->send);
#endif
    free(dist->buckets);
    free(dist);
}

int attn_dist_rank(const attn_dist *dist)
{
    return dist->rank;
}
int attn_dist_size(const attn_dist *dist)
{
    return dist->size;
}
attn_dist_timing attn_dist_last_timing(const attn_dist *dist)
{
    return dist->timing;
}

/* ---- the gradient sum -------------------------------------------------------------------- */

static attn_status start_bucket(attn_dist *dist, int64_t b)
{
    const bucket *k = &dist->buckets[b];
    float *g = dist->grads;
    if (dist->local_sum != NULL)
        for (int64_t i = k->begin; i < k->end; i++)
            g[i] = dist->local_sum[i] + g[i];
#ifdef ATTN_HAVE_MPI
    if (is_distributed(dist)) {
        const void *send = MPI_IN_PLACE;
        if (dist->send != NULL) {
            memcpy(dist->send + k->begin, g + k->begin, (size_t)(k->end - k->begin) * sizeof *g);
            send = dist->send + k->begin;
        }
        MPI_TRY(dist,
                MPI_Iallreduce(send, g + k->begin, (int)(k->end - k->begin), MPI_FLOAT, MPI_SUM,
                               dist->comm, &dist->requests[b]),
                "MPI_Iallreduce of a gradient bucket");
    }
#endif
    return ATTN_OK;
}

/* The backward observer: start, in order, every bucket the backward has finished, and give
 * MPI a chance to move the ones in flight (Open MPI progresses a non-blocking collective only
 * inside MPI calls). */
static attn_status on_backward_progress(void *ctx, size_t remaining)
{
    attn_dist *dist = ctx;
    while (dist->next >= 0 && remaining <= dist->buckets[dist->next].ready_at)
        ATTN_TRY(start_bucket(dist, dist->next--));
#ifdef ATTN_HAVE_MPI
    if (is_distributed(dist) && dist->next + 1 < dist->n_buckets) {
        int done = 0;
        MPI_TRY(dist,
                MPI_Testall((int)(dist->n_buckets - dist->next - 1),
                            dist->requests + dist->next + 1, &done, MPI_STATUSES_IGNORE),
                "MPI_Testall of the gradient buckets");
    }
#endif
    return ATTN_OK;
}

/* A bucket is final when the backward has run every node that can add to one of its
 * parameters' gradients: those pushed after the step first read the parameter. */
static void plan_buckets(attn_dist *dist, const attn_graph *graph)
{
    for (int64_t b = 0; b < dist->n_buckets; b++) {
        bucket *k = &dist->buckets[b];
        k->ready_at = SIZE_MAX;
        if (graph == NULL)
            continue;
        for (attn_param_id p = k->first; p <= k->last; p++) {
            size_t first = attn_graph_param_first_node(graph, p);
            if (first < k->ready_at)
                k->ready_at = first;
        }
    }
}

attn_status attn_dist_backward_and_sum(attn_dist *dist, attn_graph *graph, attn_var *loss,
                                       float seed, const float *local_sum)
{
    const double start = now_seconds();
    dist->local_sum = local_sum;
    dist->next = dist->n_buckets - 1;
    plan_buckets(dist, graph);
    attn_status status = ATTN_OK;
    if (graph != NULL) {
        attn_graph_set_backward_observer(graph, on_backward_progress, dist);
        status = seed == 1.0f ? attn_graph_backward(graph, loss)
                              : attn_graph_backward_from(graph, loss, &seed);
        attn_graph_set_backward_observer(graph, NULL, NULL);
    }
    /* Buckets of parameters no node read; all of them when there was no backward. */
    if (status == ATTN_OK)
        status = on_backward_progress(dist, 0);
    const double backward_done = now_seconds();
#ifdef ATTN_HAVE_MPI
    /* Even after a failure: no bucket may stay in flight over a buffer that is reused. */
    if (is_distributed(dist)) {
        int code = MPI_Waitall((int)dist->n_buckets, dist->requests, MPI_STATUSES_IGNORE);
        if (code != MPI_SUCCESS && status == ATTN_OK)
            status = mpi_failure(code, "MPI_Waitall of the gradient buckets", dist->rank);
    }
#endif
    dist->local_sum = NULL;
    dist->timing.backward_seconds = backward_done - start;
    dist->timing.exposed_seconds = now_seconds() - backward_done;
    dist->timing.buckets = dist->n_buckets;
    return status;
}

/* ---- small agreements ----------------------------------------------------------------------- */

attn_status attn_dist_sum_doubles(attn_dist *dist, double *values, int n)
{
#ifdef ATTN_HAVE_MPI
    if (is_distributed(dist))
        MPI_TRY(dist, MPI_Allreduce(MPI_IN_PLACE, values, n, MPI_DOUBLE, MPI_SUM, dist->comm),
                "MPI_Allreduce of the step's figures");
#else
    (void)dist;
    (void)values;
    (void)n;
#endif
    return ATTN_OK;
}

attn_status attn_dist_barrier(attn_dist *dist)
{
#ifdef ATTN_HAVE_MPI
    if (is_distributed(dist))
        MPI_TRY(dist, MPI_Barrier(dist->comm), "MPI_Barrier");
#else
    (void)dist;
#endif
    return ATTN_OK;
}

attn_status attn_dist_check_same(attn_dist *dist, uint64_t value, int64_t step)
{
#ifdef ATTN_HAVE_MPI
    if (!is_distributed(dist))
        return ATTN_OK;
    uint64_t *all = malloc((size_t)dist->size * sizeof *all);
    if (all == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_trainer_run: out of memory");
    int code = MPI_Allgather(&value, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, dist->comm);
    if (code != MPI_SUCCESS) {
        free(all);
        return mpi_failure(code, "MPI_Allgather of the parameter checksums", dist->rank);
    }
    char ranks[256] = "";
    size_t used = 0;
    int differing = 0;
    for (int r = 1; r < dist->size; r++) {
        if (all[r] == all[0])
            continue;
        differing++;
        if (used + 16 < sizeof ranks)
            used += (size_t)snprintf(ranks + used, sizeof ranks - used, "%s%d",
                                     differing > 1 ? ", " : "", r);
    }
    const uint64_t first = all[0];
    free(all);
    if (differing > 0)
        return attn_fail(ATTN_ERR_INTERNAL,
                         "data-parallel training: after update %lld the parameters of rank%s %s "
                         "differ from rank 0's (checksum %016llx): the processes no longer "
                         "train one model, so the run stops instead of going on. Resume from the "
                         "last checkpoint; if it happens again, a machine of the run is faulty",
                         (long long)step, differing > 1 ? "s" : "", ranks,
                         (unsigned long long)first);
#else
    (void)dist;
    (void)value;
    (void)step;
#endif
    return ATTN_OK;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

attn_status attn_dist_time_allreduce(attn_dist *dist, float *buffer, int64_t n, int repeats,
                                     double *seconds)
{
    *seconds = 0.0;
    if (!is_distributed(dist) || repeats < 1)
        return ATTN_OK;
    double *times = malloc((size_t)repeats * sizeof *times);
    if (times == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_dist_time_allreduce: out of memory");
    attn_status status = ATTN_OK;
#ifdef ATTN_HAVE_MPI
    for (int i = 0; i < repeats && status == ATTN_OK; i++) {
        status = attn_dist_barrier(dist);
        const double start = now_seconds();
        int code = MPI_Allreduce(MPI_IN_PLACE, buffer, (int)n, MPI_FLOAT, MPI_SUM, dist->comm);
        times[i] = now_seconds() - start;
        if (code != MPI_SUCCESS && status == ATTN_OK)
            status = mpi_failure(code, "MPI_Allreduce of the gradient buffer", dist->rank);
    }
#else
    (void)buffer;
    (void)n;
#endif
    if (status == ATTN_OK) {
        qsort(times, (size_t)repeats, sizeof *times, compare_doubles);
        *seconds =
            repeats % 2 ? times[repeats / 2] : 0.5 * (times[repeats / 2 - 1] + times[repeats / 2]);
    }
    free(times);
    return status;
}
