/* Dropout on NEON. The mask hash (attn_index_hash) is computed per element with scalar 64-bit
 * multiplies: NEON has no 64-bit lane multiply, and AArch64's scalar one is as cheap as the
 * three 32 x 32-bit products a vector lane would need. Scaling, masking and storing are
 * vector operations, 4 elements per step; the integers are the portable kernel's, so the mask
 * is identical bit for bit. */
#include "kernels/elementwise.h"
#include "kernels/simd.h"

/* All ones in the lanes of the k <= 4 elements from index first that are kept, zeros in the
 * others; bits receives the kept lanes as bits 0..k-1. */
static inline vmask keep4(const attn_dropout_job *job, uint64_t first, int64_t k, int *bits)
{
    uint32_t lanes[SIMD_LANES] = {0, 0, 0, 0};
    *bits = 0;
    for (int64_t l = 0; l < k; l++)
        if ((attn_index_hash(job->seed, first + (uint64_t)l) >> 40) >= job->keep_threshold) {
            lanes[l] = UINT32_MAX;
            *bits |= 1 << l;
        }
    return vld1q_u32(lanes);
}

/* x where keep, +0.0f elsewhere */
static inline vf masked(vmask keep, vf x)
{
    return vreinterpretq_f32_u32(vandq_u32(keep, vreinterpretq_u32_f32(x)));
}

void attn_dropout_forward_range_neon(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const vf scale = vf_set(job->scale);
    (void)thread;
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;
        int bits;
        vmask keep = keep4(job, job->offset + (uint64_t)i, k, &bits);
        vf_store_upto(job->out + i, k, masked(keep, vf_mul(vf_load_upto(job->in + i, k), scale)));
        if (job->mask != NULL)
            for (int64_t l = 0; l < k; l++)
                job->mask[i + l] = (uint8_t)((bits >> l) & 1);
        /* i is a multiple of 4: the low or the high half of byte i / 8 (a range starts at a
         * whole block, so no other thread writes this byte) */
        if (job->keep_bits_out != NULL) {
            uint8_t *byte = &job->keep_bits_out[i / 8];
            if (i % 8 == 0)
                *byte = (uint8_t)bits;
            else
                *byte = (uint8_t)(*byte | (bits << 4));
        }
    }
}

void attn_dropout_backward_range_neon(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const vf scale = vf_set(job->scale);
    (void)thread;
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;
        int bits;
        vmask keep = keep4(job, job->offset + (uint64_t)i, k, &bits);
        vf g = masked(keep, vf_mul(vf_load_upto(job->in + i, k), scale));
        vf_store_upto(job->out + i, k, vf_add(vf_load_upto(job->out + i, k), g));
    }
}

void attn_dropout_backward_bits_range_neon(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const vf scale = vf_set(job->scale);
    /* lane l tests bit l of the 4 bits that hold its elements' mask */
    const uint32x4_t lane_bit = {1, 2, 4, 8};
    (void)thread;
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;
        uint32_t four_bits = (uint32_t)(job->keep_bits_in[i / 8] >> (i % 8));
        vmask keep = vtstq_u32(vdupq_n_u32(four_bits), lane_bit);
        vf g = masked(keep, vf_mul(vf_load_upto(job->in + i, k), scale));
        vf prior = job->accumulate ? vf_load_upto(job->out + i, k) : vf_zero();
        vf_store_upto(job->out + i, k, vf_add(prior, g));
    }
}
