/* AVX-512 kernels of the tiled attention: 16-float vectors, a 6 x 4-vector GEMM register
 * block (24 of the 32 zmm registers accumulate), masked tails, and scalef for 2^n, which
 * also rounds results below FLT_MIN correctly. */
#include "attention/sdpa_internal.h"

#ifdef ATTN_SDPA_HAVE_X86
#include <immintrin.h>

typedef __m512 vfloat;
typedef __mmask16 vmask;
#define VLEN 16
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, x) _mm512_storeu_ps(p, x)
#define V_LOADM(m, p) _mm512_maskz_loadu_ps(m, p)
#define V_STOREM(m, p, x) _mm512_mask_storeu_ps(p, m, x)
#define V_MASK_FIRST(n) ((__mmask16)((1u << (unsigned)(n)) - 1u))
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_MIN(a, b) _mm512_min_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define V_ROUND(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define V_EXP_SCALE(y, n, x) _mm512_scalef_ps(y, n)
#define V_WHERE_EQ(x, c, r) _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, c, _CMP_EQ_OQ), x, r)
typedef __m512i vint;
#define V_LANE_OFFSETS(s)                                                                          \
    _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),    \
                       _mm512_set1_epi32(s))
#define V_GATHERM(m, p, o) _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, o, p, 4)
/* e^-110 * 2^0.5 is below half the smallest denormal: scalef rounds it to exactly 0. */
#define EXP_INPUT_MIN -110.0f
/* Above ln(FLT_MAX); scalef overflows to +inf as exp should. */
#define EXP_INPUT_MAX 89.0f
#define SDPA_MR 6
#define SDPA_NV 4
#define SDPA_KERNELS_NAME attn_sdpa_kernels_avx512

#include "attention/sdpa_simd.h"

#endif
