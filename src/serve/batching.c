/* The batching policy of attn serve (batching.h). */
#include "serve/batching.h"

int serve_jobs_compatible(const serve_job *a, const serve_job *b)
{
    const attn_decode_options *x = &a->options, *y = &b->options;
    return x->beam_size == y->beam_size && x->nbest == y->nbest && x->alignments == y->alignments &&
           x->length_penalty == y->length_penalty && x->max_len == y->max_len &&
           x->max_len_ratio == y->max_len_ratio && x->max_len_offset == y->max_len_offset;
}

int64_t serve_plan_batch(const serve_job *head, int64_t now_ms, int64_t max_batch,
                         int64_t max_wait_ms, int draining, int64_t *wait_ms)
{
    *wait_ms = 0;
    if (head == NULL)
        return 0;
    int64_t ready = 0;
    for (const serve_job *job = head; job != NULL && ready < max_batch; job = job->next)
        if (serve_jobs_compatible(head, job))
            ready += job->decodable - job->taken;
    if (ready > max_batch)
        ready = max_batch;
    const int64_t waited = now_ms - head->arrival_ms;
    if (ready == max_batch || waited >= max_wait_ms || draining)
        return ready;
    *wait_ms = max_wait_ms - waited;
    return 0;
}
