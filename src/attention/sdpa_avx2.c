/* AVX2 + FMA kernels of the tiled attention: 8-float vectors, a 6 x 2-vector GEMM register
 * block (12 of the 16 ymm registers accumulate), masked tails through maskload/maskstore,
 * and 2^n built in the exponent bits (results below FLT_MIN flush to 0). */
#include "attention/sdpa_internal.h"

#ifdef ATTN_SDPA_HAVE_X86
#include <immintrin.h>

typedef __m256 vfloat;
typedef __m256i vmask;
#define VLEN 8
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, x) _mm256_storeu_ps(p, x)
#define V_LOADM(m, p) _mm256_maskload_ps(p, m)
#define V_STOREM(m, p, x) _mm256_maskstore_ps(p, m, x)
#define V_MASK_FIRST(n)                                                                            \
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_MIN(a, b) _mm256_min_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_ROUND(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_EXP_SCALE(y, n, x) avx2_exp_scale(y, n, x)
#define V_WHERE_EQ(x, c, r) _mm256_blendv_ps(x, r, _mm256_cmp_ps(x, c, _CMP_EQ_OQ))
typedef __m256i vint;
#define V_LANE_OFFSETS(s)                                                                          \
    _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(s))
#define V_GATHERM(m, p, o)                                                                         \
    _mm256_mask_i32gather_ps(_mm256_setzero_ps(), p, o, _mm256_castsi256_ps(m), 4)
/* ln(FLT_MIN): below it 2^n leaves the normal exponent range, so the result is 0. */
#define EXP_INPUT_MIN -87.33654f
/* Keeps n <= 127 so 2^n stays finite. */
#define EXP_INPUT_MAX 88.37f
#define SDPA_MR 6
#define SDPA_NV 2
#define SDPA_KERNELS_NAME attn_sdpa_kernels_avx2

static inline __m256 avx2_exp_scale(__m256 y, __m256 n, __m256 x)
{
    __m256i exponent = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    __m256 result = _mm256_mul_ps(y, _mm256_castsi256_ps(_mm256_slli_epi32(exponent, 23)));
    __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(EXP_INPUT_MIN), _CMP_LT_OQ);
    return _mm256_andnot_ps(underflow, result);
}

#include "attention/sdpa_simd.h"

#endif
