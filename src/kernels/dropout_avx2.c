/* Dropout on AVX2: the mask hash (attn_index_hash) for 4 indices at a time in 64-bit
 * lanes, 8 elements per step. AVX2 has no 64-bit multiply, so each one is built from
 * three 32 x 32 -> 64-bit products; the result is the same integer hash as the portable
 * kernel's, so the mask is identical bit for bit. */
#include "kernels/elementwise.h"
#include "kernels/simd.h"

/* a * b mod 2^64 in each lane: lo(a) lo(b) + ((hi(a) lo(b) + lo(a) hi(b)) << 32) */
static inline __m256i multiply64(__m256i a, uint64_t b)
{
    __m256i b_low = _mm256_set1_epi64x((long long)(b & 0xffffffffu));
    __m256i b_high = _mm256_set1_epi64x((long long)(b >> 32));
    __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b_low),
                                     _mm256_mul_epu32(a, b_high));
    return _mm256_add_epi64(_mm256_mul_epu32(a, b_low), _mm256_slli_epi64(cross, 32));
}

static inline __m256i hash4(__m256i index, __m256i seed)
{
    __m256i z = _mm256_xor_si256(seed, multiply64(index, 0xd1342543de82ef95ULL));
    z = _mm256_add_epi64(z, _mm256_set1_epi64x((long long)0x9e3779b97f4a7c15ULL));
    z = multiply64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), 0xbf58476d1ce4e5b9ULL);
    z = multiply64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), 0x94d049bb133111ebULL);
    return _mm256_xor_si256(z, _mm256_srli_epi64(z, 31));
}

/* All ones in the float lanes of the 8 elements from index first that are kept. */
static inline __m256 keep8(const attn_dropout_job *job, uint64_t first)
{
    const __m256i seed = _mm256_set1_epi64x((long long)job->seed);
    /* top-24-bit values and the threshold are below 2^25, so a signed compare works */
    const __m256i below = _mm256_set1_epi64x((long long)job->keep_threshold - 1);
    __m256i low =
        _mm256_add_epi64(_mm256_set1_epi64x((long long)first), _mm256_setr_epi64x(0, 1, 2, 3));
    __m256i high = _mm256_add_epi64(low, _mm256_set1_epi64x(4));
    __m256i keep_low = _mm256_cmpgt_epi64(_mm256_srli_epi64(hash4(low, seed), 40), below);
    __m256i keep_high = _mm256_cmpgt_epi64(_mm256_srli_epi64(hash4(high, seed), 40), below);
    /* gather the low 32 bits of each 64-bit mask into elements 0..3 and 4..7 */
    const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    return _mm256_castsi256_ps(
        _mm256_permute2x128_si256(_mm256_permutevar8x32_epi32(keep_low, pick),
                                  _mm256_permutevar8x32_epi32(keep_high, pick), 0x20));
}

void attn_dropout_forward_range_avx2(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const vf scale = vf_set(job->scale);
    (void)thread;
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;
        __m256 keep = keep8(job, job->offset + (uint64_t)i);
        vf_store_upto(job->out + i, k,
                      _mm256_and_ps(keep, vf_mul(vf_load_upto(job->in + i, k), scale)));
        int bits = _mm256_movemask_ps(keep) & ((1 << k) - 1);
        if (job->mask != NULL)
            for (int64_t l = 0; l < k; l++)
                job->mask[i + l] = (uint8_t)((bits >> l) & 1);
        if (job->keep_bits_out != NULL)
            job->keep_bits_out[i / 8] = (uint8_t)bits; /* i is a multiple of 8 */
    }
}

void attn_dropout_backward_range_avx2(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const vf scale = vf_set(job->scale);
    (void)thread;
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;
        __m256 keep = keep8(job, job->offset + (uint64_t)i);
        vf g = _mm256_and_ps(keep, vf_mul(vf_load_upto(job->in + i, k), scale));
        vf_store_upto(job->out + i, k, vf_add(vf_load_upto(job->out + i, k), g));
    }
}

void attn_dropout_backward_bits_range_avx2(void *job_ptr, int64_t begin, int64_t end, int thread)
{
    const attn_dropout_job *job = job_ptr;
    int64_t lo = begin * ATTN_ELEMENT_BLOCK;
    int64_t hi = end * ATTN_ELEMENT_BLOCK < job->n ? end * ATTN_ELEMENT_BLOCK : job->n;
    const vf scale = vf_set(job->scale);
    /* lane l tests bit l of the byte that holds the 8 elements' mask */
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    (void)thread;
    for (int64_t i = lo; i < hi; i += SIMD_LANES) {
        int64_t k = hi - i < SIMD_LANES ? hi - i : SIMD_LANES;
        __m256i byte = _mm256_set1_epi32(job->keep_bits_in[i / 8]);
        __m256 keep =
            _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_and_si256(byte, lane_bit), lane_bit));
        vf g = _mm256_and_ps(keep, vf_mul(vf_load_upto(job->in + i, k), scale));
        vf prior = job->accumulate ? vf_load_upto(job->out + i, k) : vf_zero();
        vf_store_upto(job->out + i, k, vf_add(prior, g));
    }
}
