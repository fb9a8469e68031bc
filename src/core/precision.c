/* Names of the arithmetic precisions and whether this CPU runs them in hardware. */
#include "core/internal.h"

#include <string.h>

const char *attn_precision_name(attn_precision precision)
{
    switch (precision) {
    case ATTN_PRECISION_AUTO:
        return "auto";
    case ATTN_PRECISION_FP32:
        return "fp32";
    case ATTN_PRECISION_BF16:
        return "bf16";
    case ATTN_PRECISION_INT8:
        return "int8";
    }
    return "unknown";
}

attn_status attn_precision_parse(const char *name, attn_precision *precision)
{
    if (!precision)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_precision_parse: precision is NULL");
    static const attn_precision all[] = {ATTN_PRECISION_AUTO, ATTN_PRECISION_FP32,
                                         ATTN_PRECISION_BF16, ATTN_PRECISION_INT8};
    for (size_t i = 0; name && i < sizeof all / sizeof all[0]; i++) {
        if (strcmp(name, attn_precision_name(all[i])) == 0) {
            *precision = all[i];
            return ATTN_OK;
        }
    }
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                     "unknown precision '%s': choose auto, fp32, bf16 or int8",
                     name ? name : "(null)");
}

int attn_precision_native(attn_precision precision)
{
    if (precision == ATTN_PRECISION_FP32)
        return 1;
#if defined(__x86_64__) || defined(__i386__)
    if (attn_get_isa() != ATTN_ISA_AVX512)
        return 0;
    if (precision == ATTN_PRECISION_BF16)
        return __builtin_cpu_supports("avx512bf16");
    if (precision == ATTN_PRECISION_INT8)
        return __builtin_cpu_supports("avx512vnni");
#elif defined(__aarch64__)
    /* The path can only be selected where the CPU has its instructions (attn_isa_supported). */
    const attn_isa isa = attn_get_isa();
    if (precision == ATTN_PRECISION_BF16)
        return isa == ATTN_ISA_NEON_BF16;
    if (precision == ATTN_PRECISION_INT8)
        return isa == ATTN_ISA_NEON_DOTPROD || isa == ATTN_ISA_NEON_BF16;
#endif
    return 0;
}

attn_precision attn_precision_resolve(attn_precision precision)
{
    if (precision != ATTN_PRECISION_AUTO)
        return precision;
    return attn_precision_native(ATTN_PRECISION_BF16) ? ATTN_PRECISION_BF16 : ATTN_PRECISION_FP32;
}

const char *attn_precision_instructions(attn_precision precision)
{
#if defined(__aarch64__)
    if (precision == ATTN_PRECISION_BF16)
        return "BFDOT";
    if (precision == ATTN_PRECISION_INT8)
        return attn_cpu_has_arm_i8mm() ? "SDOT, SMMLA" : "SDOT";
#else
    if (precision == ATTN_PRECISION_BF16)
        return "AVX512_BF16";
    if (precision == ATTN_PRECISION_INT8)
        return "AVX512_VNNI";
#endif
    return "";
}
