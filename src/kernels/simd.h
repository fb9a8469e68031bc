/* A thin layer over AVX2, AVX-512 and NEON intrinsics, so that each SIMD kernel is written
 * once (in a *_simd.h file) and compiled per instruction set: by its *_avx2.c file at 8 lanes,
 * its *_avx512.c file at 16 lanes and its *_neon.c file (AArch64) at 4 lanes. The instruction
 * set comes from the file's compile flags (AArch64 has NEON in its base architecture).
 *
 * Partial vectors (row tails) use masked loads and stores, which never touch memory past
 * the end, and run the same arithmetic as full vectors, so an element's result does not
 * depend on where a row or a thread's chunk ends. NEON has no masked memory access: its
 * partial vectors go through a 4-float buffer, copied element by element.
 *
 * vf_max(a, b) and vf_min(a, b) return b when either is NaN (the x86 instructions' rule,
 * which the NEON backend reproduces with a compare and select, since its own max and min
 * return the NaN).
 */
#ifndef ATTN_KERNELS_SIMD_H
#define ATTN_KERNELS_SIMD_H

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif
#include <math.h>
#include <stdint.h>

#include "kernels/fast_math.h"

#define SIMD_CONCAT2(a, b) a##_##b
#define SIMD_CONCAT(a, b) SIMD_CONCAT2(a, b)
/* SIMD_NAME(attn_softmax_forward_rows) -> attn_softmax_forward_rows_avx512 (or _avx2) */
#define SIMD_NAME(name) SIMD_CONCAT(name, SIMD_ISA)

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && defined(__AVX512VL__)

#define SIMD_ISA avx512
#define SIMD_LANES 16
typedef __m512 vf;
typedef __m512i vi;
typedef __mmask16 vmask;
/* Doubles, half as many per vector */
#define SIMD_DOUBLE_LANES 8
typedef __m512d vd;

static inline vf vf_set(float a)
{
    return _mm512_set1_ps(a);
}
static inline vf vf_zero(void)
{
    return _mm512_setzero_ps();
}
static inline vf vf_load(const float *p)
{
    return _mm512_loadu_ps(p);
}
static inline void vf_store(float *p, vf v)
{
    _mm512_storeu_ps(p, v);
}
static inline vmask simd_first_lanes(int64_t n)
{
    return (vmask)((1u << n) - 1u);
}
/* The first n < SIMD_LANES values of p; the other lanes hold fill. */
static inline vf vf_load_part(const float *p, int64_t n, float fill)
{
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), simd_first_lanes(n), p);
}
static inline void vf_store_part(float *p, int64_t n, vf v)
{
    _mm512_mask_storeu_ps(p, simd_first_lanes(n), v);
}
static inline vf vf_add(vf a, vf b)
{
    return _mm512_add_ps(a, b);
}
static inline vf vf_sub(vf a, vf b)
{
    return _mm512_sub_ps(a, b);
}
static inline vf vf_mul(vf a, vf b)
{
    return _mm512_mul_ps(a, b);
}
static inline vf vf_div(vf a, vf b)
{
    return _mm512_div_ps(a, b);
}
/* a * b + c and c - a * b, each rounded once */
static inline vf vf_fmadd(vf a, vf b, vf c)
{
    return _mm512_fmadd_ps(a, b, c);
}
static inline vf vf_fnmadd(vf a, vf b, vf c)
{
    return _mm512_fnmadd_ps(a, b, c);
}
static inline vf vf_max(vf a, vf b)
{
    return _mm512_max_ps(a, b);
}
static inline vf vf_min(vf a, vf b)
{
    return _mm512_min_ps(a, b);
}
static inline vf vf_abs(vf a)
{
    return _mm512_abs_ps(a);
}
static inline vf vf_sqrt(vf a)
{
    return _mm512_sqrt_ps(a);
}
static inline float vf_sum(vf a)
{
    return _mm512_reduce_add_ps(a);
}
static inline float vf_max_lane(vf a)
{
    return _mm512_reduce_max_ps(a);
}
static inline vmask vf_less(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ);
}
static inline vmask vf_greater_equal(vf a, vf b)
{
    return _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ);
}
/* mask ? if_true : if_false */
static inline vf vf_select(vmask mask, vf if_true, vf if_false)
{
    return _mm512_mask_blend_ps(mask, if_false, if_true);
}
static inline vi vf_bits(vf a)
{
    return _mm512_castps_si512(a);
}
static inline vf vi_as_float(vi a)
{
    return _mm512_castsi512_ps(a);
}
static inline vi vi_set(int32_t a)
{
    return _mm512_set1_epi32(a);
}
static inline vi vi_add(vi a, vi b)
{
    return _mm512_add_epi32(a, b);
}
static inline vi vi_min(vi a, vi b)
{
    return _mm512_min_epi32(a, b);
}
static inline vi vi_and(vi a, vi b)
{
    return _mm512_and_si512(a, b);
}
static inline vi vi_or(vi a, vi b)
{
    return _mm512_or_si512(a, b);
}
#define vi_shift_left(a, count) _mm512_slli_epi32((a), (count))
/* Truncating conversion of floats in [0, 2^31) */
static inline vi vf_to_int(vf a)
{
    return _mm512_cvttps_epi32(a);
}
static inline vf vi_to_float(vi a)
{
    return _mm512_cvtepi32_ps(a);
}
/* table[index] for an eight-entry table and indices in [0, 8) */
static inline vf vf_lookup8(const float *table, vi index)
{
    return _mm512_permutexvar_ps(index, _mm512_zextps256_ps512(_mm256_loadu_ps(table)));
}
static inline vd vd_load(const double *p)
{
    return _mm512_loadu_pd(p);
}
static inline void vd_store(double *p, vd v)
{
    _mm512_storeu_pd(p, v);
}
/* The SIMD_DOUBLE_LANES floats at p, widened (exactly) to double */
static inline vd vd_load_floats(const float *p)
{
    return _mm512_cvtps_pd(_mm256_loadu_ps(p));
}
static inline vd vd_fmadd(vd a, vd b, vd c)
{
    return _mm512_fmadd_pd(a, b, c);
}

/* bf16 values (the top halves of floats, as bf16.h stores them) widened to floats: exact. */
static inline vf vf_load_bf16(const uint16_t *p)
{
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}
/* The first n < SIMD_LANES bf16 values of p; the other lanes hold 0. */
static inline vf vf_load_bf16_part(const uint16_t *p, int64_t n)
{
    const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(simd_first_lanes(n), p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
}

#elif defined(__AVX2__) && defined(__FMA__)

#define SIMD_ISA avx2
#define SIMD_LANES 8
typedef __m256 vf;
typedef __m256i vi;
typedef __m256 vmask;
#define SIMD_DOUBLE_LANES 4
typedef __m256d vd;

static inline vf vf_set(float a)
{
    return _mm256_set1_ps(a);
}
static inline vf vf_zero(void)
{
    return _mm256_setzero_ps();
}
static inline vf vf_load(const float *p)
{
    return _mm256_loadu_ps(p);
}
static inline void vf_store(float *p, vf v)
{
    _mm256_storeu_ps(p, v);
}
static inline vi simd_first_lanes(int64_t n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)n),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
static inline vf vf_load_part(const float *p, int64_t n, float fill)
{
    vi lanes = simd_first_lanes(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, lanes),
                            _mm256_castsi256_ps(lanes));
}
static inline void vf_store_part(float *p, int64_t n, vf v)
{
    _mm256_maskstore_ps(p, simd_first_lanes(n), v);
}
static inline vf vf_add(vf a, vf b)
{
    return _mm256_add_ps(a, b);
}
static inline vf vf_sub(vf a, vf b)
{
    return _mm256_sub_ps(a, b);
}
static inline vf vf_mul(vf a, vf b)
{
    return _mm256_mul_ps(a, b);
}
static inline vf vf_div(vf a, vf b)
{
    return _mm256_div_ps(a, b);
}
static inline vf vf_fmadd(vf a, vf b, vf c)
{
    return _mm256_fmadd_ps(a, b, c);
}
static inline vf vf_fnmadd(vf a, vf b, vf c)
{
    return _mm256_fnmadd_ps(a, b, c);
}
static inline vf vf_max(vf a, vf b)
{
    return _mm256_max_ps(a, b);
}
static inline vf vf_min(vf a, vf b)
{
    return _mm256_min_ps(a, b);
}
static inline vf vf_abs(vf a)
{
    return _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}
static inline vf vf_sqrt(vf a)
{
    return _mm256_sqrt_ps(a);
}
/* Fixed pairwise order: lanes (0..3)+(4..7), then halves again. */
static inline float vf_sum(vf a)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline float vf_max_lane(vf a)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
static inline vmask vf_less(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_LT_OQ);
}
static inline vmask vf_greater_equal(vf a, vf b)
{
    return _mm256_cmp_ps(a, b, _CMP_GE_OQ);
}
static inline vf vf_select(vmask mask, vf if_true, vf if_false)
{
    return _mm256_blendv_ps(if_false, if_true, mask);
}
static inline vi vf_bits(vf a)
{
    return _mm256_castps_si256(a);
}
static inline vf vi_as_float(vi a)
{
    return _mm256_castsi256_ps(a);
}
static inline vi vi_set(int32_t a)
{
    return _mm256_set1_epi32(a);
}
static inline vi vi_add(vi a, vi b)
{
    return _mm256_add_epi32(a, b);
}
static inline vi vi_min(vi a, vi b)
{
    return _mm256_min_epi32(a, b);
}
static inline vi vi_and(vi a, vi b)
{
    return _mm256_and_si256(a, b);
}
static inline vi vi_or(vi a, vi b)
{
    return _mm256_or_si256(a, b);
}
#define vi_shift_left(a, count) _mm256_slli_epi32((a), (count))
static inline vi vf_to_int(vf a)
{
    return _mm256_cvttps_epi32(a);
}
static inline vf vi_to_float(vi a)
{
    return _mm256_cvtepi32_ps(a);
}
static inline vf vf_lookup8(const float *table, vi index)
{
    return _mm256_permutevar8x32_ps(_mm256_loadu_ps(table), index);
}
static inline vd vd_load(const double *p)
{
    return _mm256_loadu_pd(p);
}
static inline void vd_store(double *p, vd v)
{
    _mm256_storeu_pd(p, v);
}
static inline vd vd_load_floats(const float *p)
{
    return _mm256_cvtps_pd(_mm_loadu_ps(p));
}
static inline vd vd_fmadd(vd a, vd b, vd c)
{
    return _mm256_fmadd_pd(a, b, c);
}

/* bf16 values (the top halves of floats, as bf16.h stores them) widened to floats: exact. */
static inline vf vf_load_bf16(const uint16_t *p)
{
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
}
/* The first n < SIMD_LANES bf16 values of p; the other lanes hold 0. Through a buffer, so no
 * byte past p[n - 1] is read. */
static inline vf vf_load_bf16_part(const uint16_t *p, int64_t n)
{
    uint16_t lanes[SIMD_LANES] = {0};
    for (int64_t l = 0; l < n; l++)
        lanes[l] = p[l];
    return vf_load_bf16(lanes);
}

#elif defined(__aarch64__) && defined(__ARM_NEON)

#define SIMD_ISA neon
#define SIMD_LANES 4
typedef float32x4_t vf;
typedef int32x4_t vi;
typedef uint32x4_t vmask;
#define SIMD_DOUBLE_LANES 2
typedef float64x2_t vd;

static inline vf vf_set(float a)
{
    return vdupq_n_f32(a);
}
static inline vf vf_zero(void)
{
    return vdupq_n_f32(0.0f);
}
static inline vf vf_load(const float *p)
{
    return vld1q_f32(p);
}
static inline void vf_store(float *p, vf v)
{
    vst1q_f32(p, v);
}
/* The first n < SIMD_LANES values of p; the other lanes hold fill. Through a buffer, so no
 * byte past p[n - 1] is read. */
static inline vf vf_load_part(const float *p, int64_t n, float fill)
{
    float lanes[SIMD_LANES] = {fill, fill, fill, fill};
    for (int64_t l = 0; l < n; l++)
        lanes[l] = p[l];
    return vld1q_f32(lanes);
}
static inline void vf_store_part(float *p, int64_t n, vf v)
{
    float lanes[SIMD_LANES];
    vst1q_f32(lanes, v);
    for (int64_t l = 0; l < n; l++)
        p[l] = lanes[l];
}
static inline vf vf_add(vf a, vf b)
{
    return vaddq_f32(a, b);
}
static inline vf vf_sub(vf a, vf b)
{
    return vsubq_f32(a, b);
}
static inline vf vf_mul(vf a, vf b)
{
    return vmulq_f32(a, b);
}
static inline vf vf_div(vf a, vf b)
{
    return vdivq_f32(a, b);
}
static inline vf vf_fmadd(vf a, vf b, vf c)
{
    return vfmaq_f32(c, a, b);
}
static inline vf vf_fnmadd(vf a, vf b, vf c)
{
    return vfmsq_f32(c, a, b);
}
/* a > b ? a : b, which is b when either is NaN, as maxps */
static inline vf vf_max(vf a, vf b)
{
    return vbslq_f32(vcgtq_f32(a, b), a, b);
}
static inline vf vf_min(vf a, vf b)
{
    return vbslq_f32(vcltq_f32(a, b), a, b);
}
static inline vf vf_abs(vf a)
{
    return vabsq_f32(a);
}
static inline vf vf_sqrt(vf a)
{
    return vsqrtq_f32(a);
}
/* Fixed pairwise order, as the x86 backends: lanes (0, 1) + (2, 3), then the two sums. */
static inline float vf_sum(vf a)
{
    float32x2_t s = vadd_f32(vget_low_f32(a), vget_high_f32(a));
    return vget_lane_f32(s, 0) + vget_lane_f32(s, 1);
}
static inline float vf_max_lane(vf a)
{
    vf halves = vf_max(a, vcombine_f32(vget_high_f32(a), vget_high_f32(a)));
    float low = vgetq_lane_f32(halves, 0), high = vgetq_lane_f32(halves, 1);
    return low > high ? low : high;
}
static inline vmask vf_less(vf a, vf b)
{
    return vcltq_f32(a, b);
}
static inline vmask vf_greater_equal(vf a, vf b)
{
    return vcgeq_f32(a, b);
}
static inline vf vf_select(vmask mask, vf if_true, vf if_false)
{
    return vbslq_f32(mask, if_true, if_false);
}
static inline vi vf_bits(vf a)
{
    return vreinterpretq_s32_f32(a);
}
static inline vf vi_as_float(vi a)
{
    return vreinterpretq_f32_s32(a);
}
static inline vi vi_set(int32_t a)
{
    return vdupq_n_s32(a);
}
static inline vi vi_add(vi a, vi b)
{
    return vaddq_s32(a, b);
}
static inline vi vi_min(vi a, vi b)
{
    return vminq_s32(a, b);
}
static inline vi vi_and(vi a, vi b)
{
    return vandq_s32(a, b);
}
static inline vi vi_or(vi a, vi b)
{
    return vorrq_s32(a, b);
}
#define vi_shift_left(a, count) vshlq_n_s32((a), (count))
/* Truncating conversion of floats in [0, 2^31) (NEON saturates outside it, and gives 0 for
 * NaN, where x86 gives INT32_MIN: callers never use such lanes). */
static inline vi vf_to_int(vf a)
{
    return vcvtq_s32_f32(a);
}
static inline vf vi_to_float(vi a)
{
    return vcvtq_f32_s32(a);
}
/* table[index] for an eight-entry table and indices in [0, 8): a byte lookup over the
 * table's 32 bytes, float i being bytes 4i .. 4i + 3. */
static inline vf vf_lookup8(const float *table, vi index)
{
    uint8x16x2_t bytes = {{vld1q_u8((const uint8_t *)table), vld1q_u8((const uint8_t *)table + 16)}};
    uint32x4_t first_byte = vmulq_n_u32(vreinterpretq_u32_s32(index), 4u * 0x01010101u);
    uint8x16_t which = vreinterpretq_u8_u32(vaddq_u32(first_byte, vdupq_n_u32(0x03020100u)));
    return vreinterpretq_f32_u8(vqtbl2q_u8(bytes, which));
}
static inline vd vd_load(const double *p)
{
    return vld1q_f64(p);
}
static inline void vd_store(double *p, vd v)
{
    vst1q_f64(p, v);
}
static inline vd vd_load_floats(const float *p)
{
    return vcvt_f64_f32(vld1_f32(p));
}
static inline vd vd_fmadd(vd a, vd b, vd c)
{
    return vfmaq_f64(c, a, b);
}

/* bf16 values (the top halves of floats, as bf16.h stores them) widened to floats: exact. */
static inline vf vf_load_bf16(const uint16_t *p)
{
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
/* The first n < SIMD_LANES bf16 values of p; the other lanes hold 0. */
static inline vf vf_load_bf16_part(const uint16_t *p, int64_t n)
{
    uint16_t lanes[SIMD_LANES] = {0};
    for (int64_t l = 0; l < n; l++)
        lanes[l] = p[l];
    return vf_load_bf16(lanes);
}

#else
#error "simd.h needs AVX2 + FMA, AVX-512F/BW/DQ/VL or AArch64 NEON (compile as *_avx2.c, *_avx512.c or *_neon.c)"
#endif

/* The k <= SIMD_LANES values at p: a full vector, or a part padded with zeros. */
static inline vf vf_load_upto(const float *p, int64_t k)
{
    return k == SIMD_LANES ? vf_load(p) : vf_load_part(p, k, 0.0f);
}

static inline void vf_store_upto(float *p, int64_t k, vf v)
{
    if (k == SIMD_LANES)
        vf_store(p, v);
    else
        vf_store_part(p, k, v);
}

/* ---- the fast_math.h algorithms on vectors ----------------------------------------------- */

static inline vf vf_pow2_of_rounded(vf rounded_plus_magic)
{
    return vi_as_float(vi_add(vi_shift_left(vf_bits(rounded_plus_magic), 23), vi_set(127 << 23)));
}

static inline vf vf_exp(vf x)
{
    /* Operand order keeps NaN: vf_max/vf_min return their second operand on NaN. */
    vf xc = vf_min(vf_set(ATTN_EXP_MAX_ARG), vf_max(vf_set(ATTN_EXP_MIN_ARG), x));
    vf magic = vf_set(ATTN_ROUND_MAGIC);
    vf t = vf_fmadd(xc, vf_set(ATTN_LOG2E), magic);
    vf n = vf_sub(t, magic);
    vf r = vf_fnmadd(n, vf_set(ATTN_LN2_HI), xc);
    r = vf_fnmadd(n, vf_set(ATTN_LN2_LO), r);
    vf q = vf_fmadd(vf_set(ATTN_EXP_C6), r, vf_set(ATTN_EXP_C5));
    q = vf_fmadd(q, r, vf_set(ATTN_EXP_C4));
    q = vf_fmadd(q, r, vf_set(ATTN_EXP_C3));
    q = vf_fmadd(q, r, vf_set(ATTN_EXP_C2));
    vf p = vf_add(vf_set(1.0f), vf_fmadd(vf_mul(r, r), q, r));
    vf t1 = vf_fmadd(n, vf_set(0.5f), magic);
    vf n1 = vf_sub(t1, magic);
    vf t2 = vf_add(vf_sub(n, n1), magic);
    return vf_mul(vf_mul(p, vf_pow2_of_rounded(t1)), vf_pow2_of_rounded(t2));
}

static inline vf vf_copy_sign(vf magnitude, vf sign_source)
{
    vi sign = vi_and(vf_bits(sign_source), vi_set((int32_t)0x80000000u));
    return vi_as_float(vi_or(vf_bits(magnitude), sign));
}

static inline vf vf_sigmoid(vf x)
{
    vf e = vf_exp(vf_sub(vf_zero(), vf_abs(x)));
    vf numerator = vf_select(vf_less(x, vf_zero()), e, vf_set(1.0f));
    return vf_div(numerator, vf_add(vf_set(1.0f), e));
}

static inline vf vf_sigmoid_derivative(vf x)
{
    vf e = vf_exp(vf_sub(vf_zero(), vf_abs(x)));
    vf d = vf_add(vf_set(1.0f), e);
    return vf_div(e, vf_mul(d, d));
}

static inline vf vf_tanh(vf x)
{
    vf a = vf_abs(x);
    vf z = vf_mul(x, x);
    vf poly = vf_fmadd(vf_set(ATTN_TANH_T4), z, vf_set(ATTN_TANH_T3));
    poly = vf_fmadd(poly, z, vf_set(ATTN_TANH_T2));
    poly = vf_fmadd(poly, z, vf_set(ATTN_TANH_T1));
    poly = vf_fmadd(poly, z, vf_set(ATTN_TANH_T0));
    vf small = vf_fmadd(vf_mul(x, z), poly, x);

    /* vf_min gives the cap for NaN, which the select below sends to the polynomial. */
    vf y = vf_min(vf_add(a, a), vf_set(ATTN_TANH_MAX_2X));
    vi n = vf_to_int(vf_fmadd(y, vf_set(ATTN_LOG2E), vf_set(0.5f)));
    vf nf = vi_to_float(n);
    vf r = vf_fnmadd(nf, vf_set(ATTN_TANH_LN2_HI), y);
    r = vf_fnmadd(nf, vf_set(ATTN_TANH_LN2_LO), r);
    vf e = vf_fmadd(vf_set(ATTN_TANH_E7), r, vf_set(ATTN_TANH_E6));
    e = vf_fmadd(e, r, vf_set(ATTN_TANH_E5));
    e = vf_fmadd(e, r, vf_set(ATTN_TANH_E4));
    e = vf_fmadd(e, r, vf_set(ATTN_TANH_E3));
    e = vf_fmadd(e, r, vf_set(ATTN_TANH_E2));
    vf one = vf_set(1.0f);
    e = vf_fmadd(e, r, one);
    e = vf_fmadd(e, r, one);
    e = vf_mul(e, vi_as_float(vi_shift_left(vi_add(n, vi_set(127)), 23)));
    vf large = vf_copy_sign(vf_sub(one, vf_div(vf_set(2.0f), vf_add(e, one))), x);
    return vf_select(vf_greater_equal(a, vf_set(ATTN_TANH_POLY_LIMIT)), large, small);
}

static inline vf vf_tanh_derivative(vf x)
{
    vf e = vf_exp(vf_mul(vf_set(-2.0f), vf_abs(x)));
    vf d = vf_add(vf_set(1.0f), e);
    return vf_div(vf_mul(vf_set(4.0f), e), vf_mul(d, d));
}

static inline vf vf_erf(vf x)
{
    /* min(limit, |x|) keeps NaN, which then flows through the polynomial; the index of a
     * NaN lane is garbage, but the permutes read only its low bits. */
    vf a = vf_min(vf_set(ATTN_ERF_LIMIT), vf_abs(x));
    vi interval = vi_min(vf_to_int(vf_mul(a, vf_set(2.0f))), vi_set(ATTN_ERF_INTERVALS - 1));
    vf u = vf_sub(a, vf_lookup8(attn_erf_centre, interval));
    vf p = vf_lookup8(attn_erf_coeff[ATTN_ERF_DEGREE], interval);
    for (int k = ATTN_ERF_DEGREE - 1; k >= 0; k--)
        p = vf_fmadd(p, u, vf_lookup8(attn_erf_coeff[k], interval));
    return vf_copy_sign(p, x);
}

/* ---- row reductions ---------------------------------------------------------------------- */
/* Four vector accumulators keep the adds independent; they combine in a fixed order, so a
 * row always gives the same bits. */

static inline float simd_row_max(int64_t n, const float *x)
{
    vf m0 = vf_set(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int64_t j = 0;
    for (; j + 4 * SIMD_LANES <= n; j += 4 * SIMD_LANES) {
        m0 = vf_max(m0, vf_load(x + j));
        m1 = vf_max(m1, vf_load(x + j + SIMD_LANES));
        m2 = vf_max(m2, vf_load(x + j + 2 * SIMD_LANES));
        m3 = vf_max(m3, vf_load(x + j + 3 * SIMD_LANES));
    }
    for (; j + SIMD_LANES <= n; j += SIMD_LANES)
        m0 = vf_max(m0, vf_load(x + j));
    if (j < n)
        m1 = vf_max(m1, vf_load_part(x + j, n - j, -INFINITY));
    return vf_max_lane(vf_max(vf_max(m0, m1), vf_max(m2, m3)));
}

static inline float simd_row_sum(int64_t n, const float *x)
{
    vf s0 = vf_zero(), s1 = s0, s2 = s0, s3 = s0;
    int64_t j = 0;
    for (; j + 4 * SIMD_LANES <= n; j += 4 * SIMD_LANES) {
        s0 = vf_add(s0, vf_load(x + j));
        s1 = vf_add(s1, vf_load(x + j + SIMD_LANES));
        s2 = vf_add(s2, vf_load(x + j + 2 * SIMD_LANES));
        s3 = vf_add(s3, vf_load(x + j + 3 * SIMD_LANES));
    }
    for (; j + SIMD_LANES <= n; j += SIMD_LANES)
        s0 = vf_add(s0, vf_load(x + j));
    if (j < n)
        s1 = vf_add(s1, vf_load_part(x + j, n - j, 0.0f));
    return vf_sum(vf_add(vf_add(s0, s1), vf_add(s2, s3)));
}

static inline float simd_row_dot(int64_t n, const float *a, const float *b)
{
    vf s0 = vf_zero(), s1 = s0, s2 = s0, s3 = s0;
    int64_t j = 0;
    for (; j + 4 * SIMD_LANES <= n; j += 4 * SIMD_LANES) {
        s0 = vf_fmadd(vf_load(a + j), vf_load(b + j), s0);
        s1 = vf_fmadd(vf_load(a + j + SIMD_LANES), vf_load(b + j + SIMD_LANES), s1);
        s2 = vf_fmadd(vf_load(a + j + 2 * SIMD_LANES), vf_load(b + j + 2 * SIMD_LANES), s2);
        s3 = vf_fmadd(vf_load(a + j + 3 * SIMD_LANES), vf_load(b + j + 3 * SIMD_LANES), s3);
    }
    for (; j + SIMD_LANES <= n; j += SIMD_LANES)
        s0 = vf_fmadd(vf_load(a + j), vf_load(b + j), s0);
    if (j < n)
        s1 = vf_fmadd(vf_load_part(a + j, n - j, 0.0f), vf_load_part(b + j, n - j, 0.0f), s1);
    return vf_sum(vf_add(vf_add(s0, s1), vf_add(s2, s3)));
}

/* sum(exp(x - shift)) for a finite shift; if out is not NULL it receives exp(x - shift). */
static inline float simd_row_exp_sum(int64_t n, const float *x, float shift, float *out)
{
    vf s = vf_set(shift);
    vf a0 = vf_zero(), a1 = a0, a2 = a0, a3 = a0;
    int64_t j = 0;
    for (; j + 4 * SIMD_LANES <= n; j += 4 * SIMD_LANES) {
        vf e0 = vf_exp(vf_sub(vf_load(x + j), s));
        vf e1 = vf_exp(vf_sub(vf_load(x + j + SIMD_LANES), s));
        vf e2 = vf_exp(vf_sub(vf_load(x + j + 2 * SIMD_LANES), s));
        vf e3 = vf_exp(vf_sub(vf_load(x + j + 3 * SIMD_LANES), s));
        if (out != NULL) {
            vf_store(out + j, e0);
            vf_store(out + j + SIMD_LANES, e1);
            vf_store(out + j + 2 * SIMD_LANES, e2);
            vf_store(out + j + 3 * SIMD_LANES, e3);
        }
        a0 = vf_add(a0, e0);
        a1 = vf_add(a1, e1);
        a2 = vf_add(a2, e2);
        a3 = vf_add(a3, e3);
    }
    for (; j + SIMD_LANES <= n; j += SIMD_LANES) {
        vf e = vf_exp(vf_sub(vf_load(x + j), s));
        if (out != NULL)
            vf_store(out + j, e);
        a0 = vf_add(a0, e);
    }
    if (j < n) {
        /* exp(-inf - shift) = 0 in the unused lanes */
        vf e = vf_exp(vf_sub(vf_load_part(x + j, n - j, -INFINITY), s));
        if (out != NULL)
            vf_store_part(out + j, n - j, e);
        a1 = vf_add(a1, e);
    }
    return vf_sum(vf_add(vf_add(a0, a1), vf_add(a2, a3)));
}

/* x = value */
static inline void simd_row_fill(int64_t n, float *x, float value)
{
    vf v = vf_set(value);
    int64_t j = 0;
    for (; j + SIMD_LANES <= n; j += SIMD_LANES)
        vf_store(x + j, v);
    if (j < n)
        vf_store_part(x + j, n - j, v);
}

/* x *= factor */
static inline void simd_row_scale(int64_t n, float *x, float factor)
{
    vf f = vf_set(factor);
    int64_t j = 0;
    for (; j + SIMD_LANES <= n; j += SIMD_LANES)
        vf_store(x + j, vf_mul(vf_load(x + j), f));
    if (j < n)
        vf_store_part(x + j, n - j, vf_mul(vf_load_part(x + j, n - j, 0.0f), f));
}

#endif /* ATTN_KERNELS_SIMD_H */
