/* Inverted dropout with a counter-based mask: element i is kept iff
 * attn_hash_uniform(seed, offset + i) >= p, so the mask depends only on (seed, offset + i),
 * never on the thread count. The backward either regenerates it (no memory) or reads the
 * bits the forward stored (one bit per element, no hashing: what the graph's op does).
 * Argument checks, dispatch, the reference path and the portable kernels (whose 64-bit
 * hash stays scalar on baseline x86-64, which has no 64-bit vector multiply; the AVX2 and
 * AVX-512 versions hash 4 and 8 indices at a time). */
#include "kernels/elementwise.h"
#include "kernels/fast_math.h"

#include <math.h>
#include <string.h>

#define BLOCK ATTN_ELEMENT_BLOCK

/* ---- portable kernels ------------------------------------------------------------------- */

void attn_dropout_forward_range_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * BLOCK, hi = end * BLOCK < job->n ? end * BLOCK : job->n;
    (void)thread;
    unsigned byte = 0;
    for (int64_t i = lo; i < hi; i++) {
        uint64_t hash = attn_index_hash(job->seed, job->offset + (uint64_t)i);
        int keep = (hash >> 40) >= job->keep_threshold;
        job->out[i] =
            attn_bits_float(attn_float_bits(job->in[i] * job->scale) & attn_mask_if(keep));
        if (job->mask != NULL)
            job->mask[i] = (uint8_t)keep;
        byte |= (unsigned)keep << (i & 7);
        if (job->keep_bits_out != NULL && ((i & 7) == 7 || i + 1 == hi)) {
            job->keep_bits_out[i >> 3] = (uint8_t)byte;
            byte = 0;
        }
    }
}

void attn_dropout_backward_range_portable(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * BLOCK, hi = end * BLOCK < job->n ? end * BLOCK : job->n;
    (void)thread;
    for (int64_t i = lo; i < hi; i++) {
        uint64_t hash = attn_index_hash(job->seed, job->offset + (uint64_t)i);
        int keep = (hash >> 40) >= job->keep_threshold;
        job->out[i] +=
            attn_bits_float(attn_float_bits(job->in[i] * job->scale) & attn_mask_if(keep));
    }
}

void attn_dropout_backward_bits_range_portable(void *job_ptr, int64_t begin, int64_t end,
                                               int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * BLOCK, hi = end * BLOCK < job->n ? end * BLOCK : job->n;
    (void)thread;
    for (int64_t i = lo; i < hi; i++) {
        int keep = (job->keep_bits_in[i >> 3] >> (i & 7)) & 1;
        float prior = job->accumulate ? job->out[i] : 0.0f;
        job->out[i] =
            prior + attn_bits_float(attn_float_bits(job->in[i] * job->scale) & attn_mask_if(keep));
    }
}

/* ---- reference path: the contract's formula, element by element --------------------------------
 */

static void forward_reference(int64_t n, float p, uint64_t seed, uint64_t offset, const float *x,
                              float *y, uint8_t *mask, uint8_t *keep_bits)
{
    if (keep_bits != NULL)
        memset(keep_bits, 0, (size_t)(n + 7) / 8);
    for (int64_t i = 0; i < n; i++) {
        int keep = attn_hash_uniform(seed, offset + (uint64_t)i) >= p;
        y[i] = keep ? (float)((double)x[i] / (1.0 - (double)p)) : 0.0f;
        if (mask != NULL)
            mask[i] = (uint8_t)keep;
        if (keep_bits != NULL)
            keep_bits[i / 8] |= (uint8_t)(keep << (i % 8));
    }
}

static void backward_reference(int64_t n, float p, uint64_t seed, uint64_t offset, const float *dy,
                               float *dx)
{
    for (int64_t i = 0; i < n; i++)
        if (attn_hash_uniform(seed, offset + (uint64_t)i) >= p)
            dx[i] = (float)(dx[i] + (double)dy[i] / (1.0 - (double)p));
}

static void backward_bits_reference(int64_t n, float p, const uint8_t *keep_bits, const float *dy,
                                    float *dx, int accumulate)
{
    for (int64_t i = 0; i < n; i++) {
        double prior = accumulate ? dx[i] : 0.0;
        if ((keep_bits[i / 8] >> (i % 8)) & 1)
            dx[i] = (float)(prior + (double)dy[i] / (1.0 - (double)p));
        else
            dx[i] = (float)prior;
    }
}

/* ---- entry points -------------------------------------------------------------------------------
 */

static attn_status check_arguments(const char *function, int64_t n, float p)
{
    ATTN_CHECK_ARG(n >= 0, "%s: negative size n=%lld", function, (long long)n);
    ATTN_CHECK_ARG(p >= 0.0f && p < 1.0f, "%s: p must be in [0, 1), got %g", function, (double)p);
    return ATTN_OK;
}

static void run(attn_dropout_job *job, int64_t n, float p, attn_range_fn kernel)
{
    job->n = n;
    /* hash >> 40 is the 24-bit integer k with attn_hash_uniform = k / 2^24, and k / 2^24 >= p
     * exactly when k >= ceil(p 2^24) (p 2^24 is exact in double). */
    job->keep_threshold = (uint64_t)ceil((double)p * 16777216.0);
    job->scale = (float)(1.0 / (1.0 - (double)p)); /* one rounding, as PyTorch's double p */
    attn_parallel_for((n + BLOCK - 1) / BLOCK, ATTN_MIN_ELEMENTS_PER_CHUNK / BLOCK,
                      kernel, job);
}

/* The forward with either mask (or neither). */
static attn_status forward(const char *function, int64_t n, float p, uint64_t seed, uint64_t offset,
                           const float *x, float *y, uint8_t *mask, uint8_t *keep_bits)
{
    ATTN_TRY(check_arguments(function, n, p));
    if (n == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(x != NULL, "%s: x must not be NULL", function);
    ATTN_CHECK_ARG(y != NULL, "%s: y must not be NULL", function);
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        forward_reference(n, p, seed, offset, x, y, mask, keep_bits);
        return ATTN_OK;
    }
    attn_dropout_job job = {.seed = seed,
                            .offset = offset,
                            .in = x,
                            .out = y,
                            .mask = mask,
                            .keep_bits_out = keep_bits};
    run(&job, n, p, ATTN_PICK_KERNEL(attn_active_isa(), attn_dropout_forward_range));
    return ATTN_OK;
}

attn_status attn_dropout_forward(int64_t n, float p, uint64_t seed, uint64_t offset, const float *x,
                                 float *y, uint8_t *mask)
{
    return forward(__func__, n, p, seed, offset, x, y, mask, NULL);
}

attn_status attn_dropout_forward_bits(int64_t n, float p, uint64_t seed, uint64_t offset,
                                      const float *x, float *y, uint8_t *keep_bits)
{
    ATTN_CHECK_ARG(n <= 0 || keep_bits != NULL, "%s: keep_bits must not be NULL", __func__);
    return forward(__func__, n, p, seed, offset, x, y, NULL, keep_bits);
}

attn_status attn_dropout_backward(int64_t n, float p, uint64_t seed, uint64_t offset,
                                  const float *dy, float *dx)
{
    ATTN_TRY(check_arguments(__func__, n, p));
    if (n == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(dy);
    ATTN_CHECK_NOT_NULL(dx);
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        backward_reference(n, p, seed, offset, dy, dx);
        return ATTN_OK;
    }
    attn_dropout_job job = {.seed = seed, .offset = offset, .in = dy, .out = dx};
    run(&job, n, p, ATTN_PICK_KERNEL(attn_active_isa(), attn_dropout_backward_range));
    return ATTN_OK;
}

static attn_status backward_bits(const char *function, int64_t n, float p, const uint8_t *keep_bits,
                                 const float *dy, float *dx, int accumulate)
{
    ATTN_TRY(check_arguments(function, n, p));
    if (n == 0)
        return ATTN_OK;
    ATTN_CHECK_ARG(keep_bits != NULL && dy != NULL && dx != NULL,
                   "%s: keep_bits, dy and dx must not be NULL", function);
    if (attn_active_isa() == ATTN_ISA_REFERENCE) {
        backward_bits_reference(n, p, keep_bits, dy, dx, accumulate);
        return ATTN_OK;
    }
    attn_dropout_job job = {
        .in = dy, .out = dx, .keep_bits_in = keep_bits, .accumulate = accumulate};
    run(&job, n, p, ATTN_PICK_KERNEL(attn_active_isa(), attn_dropout_backward_bits_range));
    return ATTN_OK;
}

attn_status attn_dropout_backward_bits(int64_t n, float p, const uint8_t *keep_bits,
                                       const float *dy, float *dx)
{
    return backward_bits(__func__, n, p, keep_bits, dy, dx, 1);
}

attn_status attn_dropout_backward_bits_to(int64_t n, float p, const uint8_t *keep_bits,
                                          const float *dy, float *dx, int accumulate)
{
    return backward_bits(__func__, n, p, keep_bits, dy, dx, accumulate);
}
