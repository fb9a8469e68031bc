/* The server's batching policy, apart from HTTP and the model so that tests can drive it: the
 * worker's list of queued jobs and which of their sentences the next batch takes. */
#ifndef ATTN_SERVE_BATCHING_H
#define ATTN_SERVE_BATCHING_H

#include "attn/attn_decode.h"

#include <stdint.h>

/* What a job asks for: translations (beam search), continuations of prompts (sampling) or
 * classes of texts. */
typedef enum serve_task { SERVE_TRANSLATE = 0, SERVE_GENERATE = 1, SERVE_CLASSIFY = 2 } serve_task;

/* One request as the worker sees it: its search options and the sentences still to decode.
 * The server keeps more per request around it (server.c). */
typedef struct serve_job {
    struct serve_job *next; /* the worker's FIFO list */
    int64_t arrival_ms;     /* when the request was queued (a monotonic clock) */
    serve_task task;
    attn_decode_options options;  /* SERVE_TRANSLATE */
    attn_sample_options sampling; /* SERVE_GENERATE */
    int64_t decodable;            /* sentences (or prompts) to decode (those with tokens) */
    int64_t taken;                /* of them, how many batches have taken so far, in order */
} serve_job;

/* Whether two jobs may share a batch: the same task and the same search (or sampling options,
 * seed included: each prompt's stream is then (seed, its index in its request)), so every
 * sentence gets the answer it would get alone. Classifications always may. */
int serve_jobs_compatible(const serve_job *a, const serve_job *b);

/* The next batch from the list at head (jobs with sentences left, oldest first). Returns how
 * many sentences to take now, 0 to wait: *wait_ms then says how long at most (until the oldest
 * sentence has waited max_wait_ms; new jobs may fill the batch before). A batch takes the
 * sentences left of the jobs compatible with the first, in list order, up to max_batch (a job
 * may be split over batches). It closes when it is full, when the oldest has waited max_wait_ms,
 * or at once when draining (the server is stopping). */
int64_t serve_plan_batch(const serve_job *head, int64_t now_ms, int64_t max_batch,
                         int64_t max_wait_ms, int draining, int64_t *wait_ms);

#endif
