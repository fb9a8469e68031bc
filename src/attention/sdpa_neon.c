/* NEON kernels of the tiled attention (AArch64): 4-float vectors, a 6 x 4-vector GEMM
 * register block (24 of the 32 vector registers accumulate, 4 hold the B vectors of a step and
 * one the broadcast A value), and 2^n built in the exponent bits (results below FLT_MIN flush
 * to 0). NEON has no masked loads, stores or gathers: a lane mask is the count of leading
 * lanes, and partial vectors go through a 4-float buffer, so no byte past the last lane is
 * read or written. */
#include "attention/sdpa_internal.h"

#include <arm_neon.h>

typedef float32x4_t vfloat;
typedef int vmask; /* the first vmask lanes, 1 <= vmask <= VLEN */
#define VLEN 4

static inline float32x4_t neon_load_first(int lanes, const float *p)
{
    if (lanes == VLEN)
        return vld1q_f32(p);
    float part[VLEN] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int l = 0; l < lanes; l++)
        part[l] = p[l];
    return vld1q_f32(part);
}

static inline void neon_store_first(int lanes, float *p, float32x4_t x)
{
    if (lanes == VLEN) {
        vst1q_f32(p, x);
        return;
    }
    float part[VLEN];
    vst1q_f32(part, x);
    for (int l = 0; l < lanes; l++)
        p[l] = part[l];
}

static inline float32x4_t neon_gather_first(int lanes, const float *p, int32x4_t offsets)
{
    int32_t at[VLEN];
    vst1q_s32(at, offsets);
    float part[VLEN] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int l = 0; l < lanes; l++)
        part[l] = p[at[l]];
    return vld1q_f32(part);
}

/* b where either is NaN, as maxps and minps: the shared body relies on it for NaN inputs */
static inline float32x4_t neon_max(float32x4_t a, float32x4_t b)
{
    return vbslq_f32(vcgtq_f32(a, b), a, b);
}
static inline float32x4_t neon_min(float32x4_t a, float32x4_t b)
{
    return vbslq_f32(vcltq_f32(a, b), a, b);
}

#define V_ZERO() vdupq_n_f32(0.0f)
#define V_SET1(x) vdupq_n_f32(x)
#define V_LOAD(p) vld1q_f32(p)
#define V_STORE(p, x) vst1q_f32(p, x)
#define V_LOADM(m, p) neon_load_first(m, p)
#define V_STOREM(m, p, x) neon_store_first(m, p, x)
#define V_MASK_FIRST(n) (n)
#define V_ADD(a, b) vaddq_f32(a, b)
#define V_SUB(a, b) vsubq_f32(a, b)
#define V_MUL(a, b) vmulq_f32(a, b)
#define V_MAX(a, b) neon_max(a, b)
#define V_MIN(a, b) neon_min(a, b)
#define V_FMA(a, b, c) vfmaq_f32(c, a, b)
#define V_FNMA(a, b, c) vfmsq_f32(c, a, b)
#define V_ROUND(x) vrndnq_f32(x)
#define V_EXP_SCALE(y, n, x) neon_exp_scale(y, n, x)
#define V_WHERE_EQ(x, c, r) vbslq_f32(vceqq_f32(x, c), r, x)
typedef int32x4_t vint;
#define V_LANE_OFFSETS(s) vmulq_n_s32((int32x4_t){0, 1, 2, 3}, s)
#define V_GATHERM(m, p, o) neon_gather_first(m, p, o)
/* ln(FLT_MIN): below it 2^n leaves the normal exponent range, so the result is 0. */
#define EXP_INPUT_MIN -87.33654f
/* Keeps n <= 127 so 2^n stays finite. */
#define EXP_INPUT_MAX 88.37f
#define SDPA_MR 6
#define SDPA_NV 4
#define SDPA_KERNELS_NAME attn_sdpa_kernels_neon

static inline float32x4_t neon_exp_scale(float32x4_t y, float32x4_t n, float32x4_t x)
{
    int32x4_t exponent = vaddq_s32(vcvtnq_s32_f32(n), vdupq_n_s32(127));
    float32x4_t result = vmulq_f32(y, vreinterpretq_f32_s32(vshlq_n_s32(exponent, 23)));
    uint32x4_t underflow = vcltq_f32(x, vdupq_n_f32(EXP_INPUT_MIN));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(result), underflow));
}

#include "attention/sdpa_simd.h"
