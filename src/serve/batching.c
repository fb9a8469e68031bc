/* The batching policy of attn serve (batching.h). */
#include "serve/batching.h"

static int same_sampling(const attn_sample_options *x, const attn_sample_options *y)
{
    return x->temperature == y->temperature && x->top_k == y->top_k && x->top_p == y->top_p &&
           x->seed == y->seed && x->greedy == y->greedy && x->max_new_tokens == y->max_new_tokens &&
           x->stop_token == y->stop_token;
}

int serve_jobs_compatible(const serve_job *a, const serve_job *b)
{
    if (a->task != b->task)
        return 0;
    if (a->task == SERVE_CLASSIFY)
        return 1;
    if (a->task == SERVE_GENERATE)
        return same_sampling(&a->sampling, &b->sampling);
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
