/* Embedding lookup and its backward. Both are memory-bound copies whose portable loops
 * the compiler vectorises, so they serve every instruction set (at 4096 x 1024 they run
 * at 17-35 GB/s on one core, near memory speed). The backward gives each thread
 * a range of embedding columns and walks the tokens in order, so repeated ids add up in a
 * fixed order without atomics, and the result does not depend on the thread count. */
#include "kernels/elementwise.h"

/* Columns per backward work unit: one 64-byte cache line of floats. */
#define COLUMN_BLOCK 16

typedef struct {
    int64_t tokens, dim;
    const float *table;
    const int32_t *ids;
    float scale;
    const float *dout;
    float *out; /* forward output, or the table gradient */
} embedding_job;

/* out[t, :] = table[ids[t], :] * scale; rounding the exact float product once, as the
 * reference's double arithmetic does, so both give the same bits. */
static void forward_tokens(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const embedding_job *job = job_ptr;
    const int64_t dim = job->dim;
    (void)thread;
    for (int64_t t = begin; t < end; t++) {
        const float *row = job->table + (int64_t)job->ids[t] * dim;
        float *out = job->out + t * dim;
        for (int64_t j = 0; j < dim; j++)
            out[j] = row[j] * job->scale;
    }
}

/* dtable[ids[t], cols] += scale * dout[t, cols] for the columns of blocks [begin, end),
 * each sum computed in double and rounded once, as in the reference. */
static void backward_columns(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const embedding_job *job = job_ptr;
    const int64_t dim = job->dim;
    const int64_t lo = begin * COLUMN_BLOCK,
                  hi = end * COLUMN_BLOCK < dim ? end * COLUMN_BLOCK : dim;
    const double scale = job->scale;
    (void)thread;
    for (int64_t t = 0; t < job->tokens; t++) {
        float *row = job->out + (int64_t)job->ids[t] * dim;
        const float *grad = job->dout + t * dim;
        for (int64_t j = lo; j < hi; j++)
            row[j] = (float)((double)row[j] + scale * (double)grad[j]);
    }
}

static attn_status check_arguments(const char *function, int64_t tokens, int64_t vocab, int64_t dim,
                                   const int32_t *ids)
{
    ATTN_CHECK_ARG(tokens >= 0 && dim >= 0, "%s: negative size (tokens=%lld, dim=%lld)", function,
                   (long long)tokens, (long long)dim);
    ATTN_CHECK_ARG(vocab > 0, "%s: vocab must be positive, got %lld", function, (long long)vocab);
    if (tokens == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(ids != NULL, "%s: ids must not be NULL", function);
    for (int64_t t = 0; t < tokens; t++)
        ATTN_CHECK_ARG(ids[t] >= 0 && ids[t] < vocab, "%s: ids[%lld] = %d is outside [0, %lld)",
                       function, (long long)t, (int)ids[t], (long long)vocab);
    return ATTN_OK;
}

attn_status attn_embedding_forward(int64_t tokens, int64_t vocab, int64_t dim, const float *table,
                                   const int32_t *ids, float scale, float *out)
{
    ATTN_TRY(check_arguments(__func__, tokens, vocab, dim, ids));
    if (tokens == 0 || dim == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(table);
    ATTN_CHECK_NOT_NULL(out);
    embedding_job job = {
        .tokens = tokens, .dim = dim, .table = table, .ids = ids, .scale = scale, .out = out};
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        for (int64_t t = 0; t < tokens; t++)
            for (int64_t j = 0; j < dim; j++)
                out[t * dim + j] = (float)((double)table[(int64_t)ids[t] * dim + j] * scale);
        return ATTN_OK;
    }
    attn_parallel_for(tokens, attn_rows_per_chunk(dim), forward_tokens, &job);
    return ATTN_OK;
}

attn_status attn_embedding_backward(int64_t tokens, int64_t vocab, int64_t dim, const int32_t *ids,
                                    float scale, const float *dout, float *dtable)
{
    ATTN_TRY(check_arguments(__func__, tokens, vocab, dim, ids));
    if (tokens == 0 || dim == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(dout);
    ATTN_CHECK_NOT_NULL(dtable);
    embedding_job job = {
        .tokens = tokens, .dim = dim, .ids = ids, .scale = scale, .dout = dout, .out = dtable};
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        for (int64_t t = 0; t < tokens; t++)
            for (int64_t j = 0; j < dim; j++) {
                float *cell = &dtable[(int64_t)ids[t] * dim + j];
                *cell = (float)((double)*cell + (double)scale * dout[t * dim + j]);
            }
        return ATTN_OK;
    }
    int64_t blocks = (dim + COLUMN_BLOCK - 1) / COLUMN_BLOCK;
    attn_parallel_for(blocks, ATTN_MIN_ELEMENTS_PER_CHUNK / (tokens * COLUMN_BLOCK) + 1,
                      backward_columns, &job);
    return ATTN_OK;
}
