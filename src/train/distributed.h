/* Data parallelism behind one small interface: the ranks of a run, the sum of the gradient
 * buffer over them (in buckets, started while the backward still runs), and the few small
 * agreements the loop needs. distributed.c is the only file that includes mpi.h; built without
 * MPI, or opened for one process, it is a single rank and every sum is the identity, so the
 * trainer has one code path. */
#ifndef ATTN_TRAIN_DISTRIBUTED_H
#define ATTN_TRAIN_DISTRIBUTED_H

#include "core/internal.h"
#include "attn/attn_autodiff.h"

typedef struct attn_dist attn_dist;

/* use_mpi nonzero: the processes of MPI_COMM_WORLD (attn_distributed_start runs first, so MPI
 * is initialised only when asked); 0: one process, no MPI call at all. The gradient buffer of
 * store is cut into buckets at parameter boundaries. */
ATTN_INTERNAL attn_status attn_dist_open(int use_mpi, attn_params *store, attn_dist **out);
ATTN_INTERNAL void attn_dist_close(attn_dist *dist);
ATTN_INTERNAL int attn_dist_rank(const attn_dist *dist);
ATTN_INTERNAL int attn_dist_size(const attn_dist *dist);

/* Runs the backward of loss on graph with d(loss) = seed, and sums the store's gradient buffer
 * over the ranks: each bucket, as soon as the backward has made it final (see
 * attn_graph_set_backward_observer), gets local_sum added (a micro-batch gradient summed
 * earlier on this rank; NULL: none) and its all-reduce started, from the last bucket to the
 * first. Returns when every bucket is summed. graph NULL: no backward, the buffer as it is (a
 * rank with no batch in this update) is summed. */
ATTN_INTERNAL attn_status attn_dist_backward_and_sum(attn_dist *dist, attn_graph *graph,
                                                     attn_var *loss, float seed,
                                                     const float *local_sum);

/* Seconds of the last attn_dist_backward_and_sum: in the backward (with the all-reduces it
 * started on the way) and waiting afterwards for the sums not yet done (the communication the
 * backward did not hide). */
typedef struct attn_dist_timing {
    double backward_seconds, exposed_seconds;
    int64_t buckets;
} attn_dist_timing;
ATTN_INTERNAL attn_dist_timing attn_dist_last_timing(const attn_dist *dist);

/* In place, element-wise sum over the ranks of n doubles (exact for integers below 2^53 and
 * for one nonzero contribution). */
ATTN_INTERNAL attn_status attn_dist_sum_doubles(attn_dist *dist, double *values, int n);
/* Fails with ATTN_ERR_INTERNAL on every rank, naming the ranks, when value (a checksum of the
 * parameters) is not the same on all of them. */
ATTN_INTERNAL attn_status attn_dist_check_same(attn_dist *dist, uint64_t value, int64_t step);
/* Every rank waits here until all have arrived. */
ATTN_INTERNAL attn_status attn_dist_barrier(attn_dist *dist);
/* Median seconds of a blocking all-reduce (sum) of n floats over the ranks, repeats times (the
 * figure docs/distributed.md compares with the ring algorithm's bound). */
ATTN_INTERNAL attn_status attn_dist_time_allreduce(attn_dist *dist, float *buffer, int64_t n,
                                                   int repeats, double *seconds);

#endif /* ATTN_TRAIN_DISTRIBUTED_H */
