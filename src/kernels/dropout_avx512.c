/* Dropout on AVX-512: the mask hash (attn_index_hash) for 8 indices at a time in 64-bit
 * lanes (AVX-512DQ multiplies them natively), 16 elements per step. The hash is the same
 * integer function as the portable kernel's, so the mask is identical bit for bit. */
#include "kernels/elementwise.h"

#include <immintrin.h>

static inline __m512i hash8(__m512i index, __m512i seed)
{
    __m512i z = _mm512_xor_si512(
        seed, _mm512_mullo_epi64(index, _mm512_set1_epi64((long long)0xd1342543de82ef95ULL)));
    z = _mm512_add_epi64(z, _mm512_set1_epi64((long long)0x9e3779b97f4a7c15ULL));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                           _mm512_set1_epi64((long long)0xbf58476d1ce4e5b9ULL));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                           _mm512_set1_epi64((long long)0x94d049bb133111ebULL));
    return _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
}

/* Which of the 16 elements starting at index first are kept. */
static inline __mmask16 keep16(const attn_dropout_job *job, uint64_t first)
{
    const __m512i seed = _mm512_set1_epi64((long long)job->seed);
    const __m512i threshold = _mm512_set1_epi64((long long)job->keep_threshold);
    __m512i low = _mm512_add_epi64(_mm512_set1_epi64((long long)first),
                                   _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    __m512i high = _mm512_add_epi64(low, _mm512_set1_epi64(8));
    __mmask8 keep_low = _mm512_cmpge_epu64_mask(_mm512_srli_epi64(hash8(low, seed), 40), threshold);
    __mmask8 keep_high =
        _mm512_cmpge_epu64_mask(_mm512_srli_epi64(hash8(high, seed), 40), threshold);
    return (__mmask16)(keep_low | (keep_high << 8));
}

static inline __mmask16 first_lanes(int64_t k)
{
    return (__mmask16)(k >= 16 ? 0xffffu : (1u << k) - 1u);
}

/* The mask bits of 16 elements, of which the first k are there: only the bytes that hold
 * them, since the mask ends with the last element's byte. */
static inline void store_bits(uint8_t *bytes, __mmask16 bits, int64_t k)
{
    bytes[0] = (uint8_t)bits;
    if (k > 8)
        bytes[1] = (uint8_t)(bits >> 8);
}

static inline __mmask16 load_bits(const uint8_t *bytes, int64_t k)
{
    return (__mmask16)(bytes[0] | (k > 8 ? bytes[1] << 8 : 0));
}

void attn_dropout_forward_range_avx512(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const __m512 scale = _mm512_set1_ps(job->scale);
    (void)thread;
    for (int64_t i = lo; i < hi; i += 16) {
        __mmask16 valid = first_lanes(hi - i);
        __mmask16 keep = keep16(job, job->offset + (uint64_t)i) & valid;
        __m512 x = _mm512_maskz_loadu_ps(valid, job->in + i);
        _mm512_mask_storeu_ps(job->out + i, valid, _mm512_maskz_mul_ps(keep, x, scale));
        if (job->mask != NULL)
            _mm_mask_storeu_epi8(job->mask + i, valid, _mm_maskz_mov_epi8(keep, _mm_set1_epi8(1)));
        if (job->keep_bits_out != NULL) /* i is a multiple of 16: bytes i / 8 and i / 8 + 1 */
            store_bits(job->keep_bits_out + i / 8, keep, hi - i);
    }
}

void attn_dropout_backward_range_avx512(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const __m512 scale = _mm512_set1_ps(job->scale);
    (void)thread;
    for (int64_t i = lo; i < hi; i += 16) {
        __mmask16 valid = first_lanes(hi - i);
        __mmask16 keep = keep16(job, job->offset + (uint64_t)i) & valid;
        __m512 dy = _mm512_maskz_loadu_ps(valid, job->in + i);
        __m512 dx = _mm512_maskz_loadu_ps(valid, job->out + i);
        _mm512_mask_storeu_ps(job->out + i, valid,
                              _mm512_add_ps(dx, _mm512_maskz_mul_ps(keep, dy, scale)));
    }
}

void attn_dropout_backward_bits_range_avx512(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const __m512 scale = _mm512_set1_ps(job->scale);
    (void)thread;
    for (int64_t i = lo; i < hi; i += 16) {
        __mmask16 valid = first_lanes(hi - i);
        __mmask16 keep = load_bits(job->keep_bits_in + i / 8, hi - i) & valid;
        __m512 dy = _mm512_maskz_loadu_ps(valid, job->in + i);
        __m512 dx =
            job->accumulate ? _mm512_maskz_loadu_ps(valid, job->out + i) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(job->out + i, valid,
                              _mm512_add_ps(dx, _mm512_maskz_mul_ps(keep, dy, scale)));
    }
}
