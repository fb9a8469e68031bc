/* bfloat16: the top half of a float32 (8 exponent bits, 7 mantissa bits). One rounding for
 * every bf16 path of the kernels, so the scalar reference, the emulated path and the
 * AVX512_BF16 kernel see the same operands: round to nearest, ties to even; a NaN stays a
 * NaN (made quiet, so rounding can never carry it into an infinity); subnormals round like
 * any other value (bf16 has float32's exponent range). */
#ifndef ATTN_KERNELS_BF16_H
#define ATTN_KERNELS_BF16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t attn_bf16_from_float(float x)
{
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u)
        return (uint16_t)((bits >> 16) | 0x0040u);
    bits += 0x7FFFu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

static inline float attn_bf16_to_float(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float x;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* x rounded to the nearest bf16, as a float. */
static inline float attn_bf16_round(float x)
{
    return attn_bf16_to_float(attn_bf16_from_float(x));
}

#endif /* ATTN_KERNELS_BF16_H */
