/* Float approximations of exp, sigmoid, tanh and erf for the optimized kernels.
 *
 * The scalar functions here are what the portable kernels run. They are branch-free and
 * make their choices with integer masks on the float bits, never with float comparisons:
 * under GCC's default -ftrapping-math a float comparison stops the vectoriser from
 * if-converting a loop, while integer selects let loops over these functions vectorise
 * without -ffast-math. simd.h evaluates the same algorithms with the same constants on
 * AVX2 and AVX-512 vectors, so every optimized version agrees to a few ulp.
 *
 * exp: Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then e^r = 1 + r + r^2 q(r) with
 *   q of degree 4, a minimax fit for relative error (Lawson's reweighted least squares on
 *   4000 Chebyshev nodes; 3e-9 before rounding the coefficients to float). 2^n is applied
 *   as two factors 2^n1 * 2^n2 so that subnormal results round correctly and x > 88.72
 *   overflows to +inf. Measured over every float in [-104, 89]: at most 0.98 ulp.
 *   exp(-inf) = 0, exp(NaN) = NaN.
 * erf: |x| is split into eight intervals of width 1/2 on [0, 4) (erf(4) rounds to 1 in
 *   float); on each a degree-7 polynomial in |x| - centre, fitted the same way for absolute
 *   error. Evaluated in float, at most about 6e-8 absolute (1 ulp of values near 1).
 *   The first interval is centred at 0 with no constant term, so erf(tiny) keeps its
 *   relative accuracy. erf(NaN) = NaN.
 * tanh: for |x| < 0.5625 the odd polynomial x + x^3 P(x^2), P of degree 4 fitted for
 *   relative error; above, sign(x) (1 - 2 / (e^y + 1)) with y = min(2|x|, 20) (past 9.01
 *   tanh rounds to 1), e^y = 2^n e^r, n = round(y / ln2), e^r by its Taylor series to r^7.
 *   Measured over every float in [2^-30, 12] against tanh in double: at most 1.47 ulp
 *   without FMA (portable), 1.53 ulp with it (simd.h), 0.12 ulp on average. (The form
 *   (1 - e)/(1 + e), e = attn_fast_exp(-2|x|), that the activations once used is no better
 *   at worst, 1.52 ulp, and worse on average, 0.15; this one is what the GRU/LSTM gates and
 *   MLP attention scores always ran, so they keep their bits.) The derivative
 *   1 - tanh^2 = 4e / (1 + e)^2, e = exp(-2|x|), is accurate even where tanh rounds to +-1.
 * sigmoid: with e = exp(-|x|) <= 1, 1/(1 + e) for x >= 0 and e/(1 + e) below, so neither
 *   side loses relative accuracy; its derivative is e / (1 + e)^2.
 */
#ifndef ATTN_KERNELS_FAST_MATH_H
#define ATTN_KERNELS_FAST_MATH_H

#include "core/internal.h"

#include <stdint.h>
#include <string.h>

/* exp(x) rounds to 0 below this argument, and overflows above 88.72 (the argument is
 * clamped to 89 only to keep the exponent arithmetic in range). */
#define ATTN_EXP_MIN_ARG (-104.0f)
#define ATTN_EXP_MAX_ARG 89.0f
#define ATTN_LOG2E 1.44269504f
/* ln 2 split in two: ATTN_LN2_HI has 9 significant bits, so n * ATTN_LN2_HI is exact for
 * the |n| <= 150 that occur and the reduction x - n ln2 loses nothing. */
#define ATTN_LN2_HI 0.693359375f
#define ATTN_LN2_LO (-2.12194440e-4f)
/* 1.5 * 2^23: adding it rounds a float of magnitude below 2^22 to an integer, which then
 * sits in the low bits of the sum's mantissa. */
#define ATTN_ROUND_MAGIC 12582912.0f
/* e^r = 1 + r + r^2 (C2 + C3 r + C4 r^2 + C5 r^3 + C6 r^4) on |r| <= ln2/2 */
#define ATTN_EXP_C2 0.49999994f
#define ATTN_EXP_C3 0.166665211f
#define ATTN_EXP_C4 0.041668389f
#define ATTN_EXP_C5 0.00836874545f
#define ATTN_EXP_C6 0.00138145406f

/* tanh(x) = x + x^3 (T0 + T1 z + T2 z^2 + T3 z^3 + T4 z^4), z = x^2, for |x| < 0.5625 */
#define ATTN_TANH_POLY_LIMIT 0.5625f
#define ATTN_TANH_T0 (-0.3333331346511841f)
#define ATTN_TANH_T1 0.1333245187997818f
#define ATTN_TANH_T2 (-0.05383743345737457f)
#define ATTN_TANH_T3 0.021007470786571503f
#define ATTN_TANH_T4 (-0.0061798254027962685f)
/* Above the polynomial: e^y for y = min(2|x|, ATTN_TANH_MAX_2X), reduced by n ln2 with ln2
 * split so that n * ATTN_TANH_LN2_HI is exact for n <= 29, then e^r = sum r^k / k!, k <= 7. */
#define ATTN_TANH_MAX_2X 20.0f
#define ATTN_TANH_LN2_HI 0.693145751953125f
#define ATTN_TANH_LN2_LO 1.428606765330187e-06f
#define ATTN_TANH_E7 (1.0f / 5040.0f)
#define ATTN_TANH_E6 (1.0f / 720.0f)
#define ATTN_TANH_E5 (1.0f / 120.0f)
#define ATTN_TANH_E4 (1.0f / 24.0f)
#define ATTN_TANH_E3 (1.0f / 6.0f)
#define ATTN_TANH_E2 0.5f

/* erf on [0, 4): interval i = floor(2|x|) covers [i/2, (i+1)/2); its polynomial is
 * sum_k attn_erf_coeff[k][i] * u^k with u = |x| - attn_erf_centre[i]. Stored by power so
 * that one power's eight values form one SIMD lookup table. */
#define ATTN_ERF_LIMIT 4.0f
#define ATTN_ERF_INTERVALS 8
#define ATTN_ERF_DEGREE 7
ATTN_INTERNAL extern const float attn_erf_centre[ATTN_ERF_INTERVALS];
ATTN_INTERNAL extern const float attn_erf_coeff[ATTN_ERF_DEGREE + 1][ATTN_ERF_INTERVALS];

#define ATTN_SQRT1_2 0.707106781f      /* 1/sqrt(2) */
#define ATTN_INV_SQRT_2PI 0.398942280f /* 1/sqrt(2 pi) */
#define ATTN_SQRT_2_OVER_PI 0.797884561f
#define ATTN_GELU_TANH_CUBIC 0.044715f

/* ---- bit-level helpers ------------------------------------------------------------------ */

static inline uint32_t attn_float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float attn_bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* mask ? a : b, for a mask of all ones or all zeros */
static inline uint32_t attn_select_bits(uint32_t mask, uint32_t a, uint32_t b)
{
    return (a & mask) | (b & ~mask);
}

static inline uint32_t attn_mask_if(int condition)
{
    return 0u - (uint32_t)(condition != 0);
}

static inline float attn_abs(float x)
{
    return attn_bits_float(attn_float_bits(x) & 0x7fffffffu);
}

static inline int attn_is_nan_bits(uint32_t u)
{
    return (u & 0x7fffffffu) > 0x7f800000u;
}

/* 2^n for an integer-valued float n in [-126, 127] */
static inline float attn_pow2_of_rounded(float rounded_plus_magic)
{
    /* rounded_plus_magic = ATTN_ROUND_MAGIC + n holds n in its low mantissa bits; shifting
     * them into the exponent field and adding the bias gives 2^n (arithmetic mod 2^32). */
    return attn_bits_float((attn_float_bits(rounded_plus_magic) << 23) + (127u << 23));
}

/* ---- the functions ---------------------------------------------------------------------- */

static inline float attn_fast_exp(float x)
{
    uint32_t bits = attn_float_bits(x);
    /* Clamp to [ATTN_EXP_MIN_ARG, ATTN_EXP_MAX_ARG] on the bits: as unsigned, negative floats
     * grow with magnitude; as signed, positive floats grow with value. NaN is restored below. */
    uint32_t low_limit = attn_float_bits(ATTN_EXP_MIN_ARG);
    uint32_t clamped = bits < low_limit ? bits : low_limit;
    int32_t high_limit = (int32_t)attn_float_bits(ATTN_EXP_MAX_ARG);
    clamped = (uint32_t)((int32_t)clamped < high_limit ? (int32_t)clamped : high_limit);
    float xc = attn_bits_float(clamped);

    float t = xc * ATTN_LOG2E + ATTN_ROUND_MAGIC;
    float n = t - ATTN_ROUND_MAGIC;
    float r = xc - n * ATTN_LN2_HI;
    r = r - n * ATTN_LN2_LO;
    float q = ATTN_EXP_C6;
    q = q * r + ATTN_EXP_C5;
    q = q * r + ATTN_EXP_C4;
    q = q * r + ATTN_EXP_C3;
    q = q * r + ATTN_EXP_C2;
    float p = 1.0f + (r + r * r * q);

    float t1 = n * 0.5f + ATTN_ROUND_MAGIC;
    float n1 = t1 - ATTN_ROUND_MAGIC;
    float t2 = (n - n1) + ATTN_ROUND_MAGIC;
    float result = p * attn_pow2_of_rounded(t1) * attn_pow2_of_rounded(t2);
    return attn_bits_float(
        attn_select_bits(attn_mask_if(attn_is_nan_bits(bits)), bits, attn_float_bits(result)));
}

/* 1 / (1 + e^-x) */
static inline float attn_fast_sigmoid(float x)
{
    float e = attn_fast_exp(-attn_abs(x));
    uint32_t negative = 0u - (attn_float_bits(x) >> 31);
    float numerator =
        attn_bits_float(attn_select_bits(negative, attn_float_bits(e), attn_float_bits(1.0f)));
    return numerator / (1.0f + e);
}

/* sigmoid'(x) = sigmoid(x) (1 - sigmoid(x)) */
static inline float attn_fast_sigmoid_derivative(float x)
{
    float e = attn_fast_exp(-attn_abs(x));
    float d = 1.0f + e;
    return e / (d * d);
}

static inline float attn_fast_tanh(float x)
{
    uint32_t bits = attn_float_bits(x);
    uint32_t abs_bits = bits & 0x7fffffffu;
    float a = attn_bits_float(abs_bits);
    float z = x * x;
    float poly = ATTN_TANH_T4;
    poly = poly * z + ATTN_TANH_T3;
    poly = poly * z + ATTN_TANH_T2;
    poly = poly * z + ATTN_TANH_T1;
    poly = poly * z + ATTN_TANH_T0;
    float small = x + (x * z) * poly;

    /* min(2|x|, cap) on the bits of non-negative floats; NaN becomes the cap, and the
     * select below gives it the polynomial, which keeps it NaN. */
    uint32_t twice_bits = attn_float_bits(2.0f * a);
    uint32_t cap_bits = attn_float_bits(ATTN_TANH_MAX_2X);
    float y = attn_bits_float(twice_bits < cap_bits ? twice_bits : cap_bits);
    int32_t n = (int32_t)(y * ATTN_LOG2E + 0.5f); /* round to nearest, y >= 0 */
    float nf = (float)n;
    float r = (y - nf * ATTN_TANH_LN2_HI) - nf * ATTN_TANH_LN2_LO;
    float e = ATTN_TANH_E7;
    e = e * r + ATTN_TANH_E6;
    e = e * r + ATTN_TANH_E5;
    e = e * r + ATTN_TANH_E4;
    e = e * r + ATTN_TANH_E3;
    e = e * r + ATTN_TANH_E2;
    e = e * r + 1.0f;
    e = e * r + 1.0f;
    e *= attn_bits_float((uint32_t)(n + 127) << 23); /* 2^n, n in [0, 29] */
    /* 1 - 2 / (e + 1) > 0 here, so or-ing the sign in is copysign */
    float large = attn_bits_float(attn_float_bits(1.0f - 2.0f / (e + 1.0f)) | (bits & 0x80000000u));

    uint32_t is_large = attn_mask_if(abs_bits >= attn_float_bits(ATTN_TANH_POLY_LIMIT)) &
                        ~attn_mask_if(attn_is_nan_bits(bits));
    return attn_bits_float(
        attn_select_bits(is_large, attn_float_bits(large), attn_float_bits(small)));
}

/* tanh'(x) = 1 - tanh(x)^2 */
static inline float attn_fast_tanh_derivative(float x)
{
    float e = attn_fast_exp(-2.0f * attn_abs(x));
    float d = 1.0f + e;
    return 4.0f * e / (d * d);
}

/* Table lookups do not vectorise on baseline x86-64, so this one stays scalar in the
 * portable kernels; the SIMD versions look the coefficients up with permutes. */
static inline float attn_fast_erf(float x)
{
    uint32_t bits = attn_float_bits(x);
    if (attn_is_nan_bits(bits))
        return x;
    float a = attn_abs(x);
    a = a < ATTN_ERF_LIMIT ? a : ATTN_ERF_LIMIT;
    int interval = (int)(a * 2.0f);
    interval = interval < ATTN_ERF_INTERVALS - 1 ? interval : ATTN_ERF_INTERVALS - 1;
    float u = a - attn_erf_centre[interval];
    float p = attn_erf_coeff[ATTN_ERF_DEGREE][interval];
    for (int k = ATTN_ERF_DEGREE - 1; k >= 0; k--)
        p = p * u + attn_erf_coeff[k][interval];
    return attn_bits_float(attn_float_bits(p) | (bits & 0x80000000u));
}

#endif /* ATTN_KERNELS_FAST_MATH_H */
