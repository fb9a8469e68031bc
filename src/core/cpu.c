/* Run-time choice of instruction set: what the CPU supports, capped by the user's choice. */
#include "core/internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
/* The kernel's feature bits (arch/arm64/include/uapi/asm/hwcap.h), spelled out because older
 * C libraries' <asm/hwcap.h> lack the newer ones. */
#define ARM_HWCAP_ASIMD (1UL << 1)
#define ARM_HWCAP_ASIMDDP (1UL << 20)
#define ARM_HWCAP2_I8MM (1UL << 13)
#define ARM_HWCAP2_BF16 (1UL << 14)
#endif

static int isa_initialised;
static attn_isa chosen_isa = ATTN_ISA_AUTO;

int attn_isa_supported(attn_isa isa)
{
    switch (isa) {
    case ATTN_ISA_AUTO:
    case ATTN_ISA_REFERENCE:
    case ATTN_ISA_PORTABLE:
        return 1;
#if defined(ATTN_HAVE_X86_KERNELS)
    case ATTN_ISA_AVX2:
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ATTN_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case ATTN_ISA_NEON:
    case ATTN_ISA_NEON_DOTPROD:
    case ATTN_ISA_NEON_BF16:
        return 0;
#elif defined(ATTN_HAVE_NEON_KERNELS)
    case ATTN_ISA_AVX2:
    case ATTN_ISA_AVX512:
        return 0;
#if defined(__linux__)
    /* ASIMD is part of the AArch64 base architecture, but Linux still reports it: a kernel
     * that disabled it (no FP/SIMD context switching) leaves the portable path. Each level
     * above neon needs the one below it, so a forced level never runs on a CPU missing an
     * instruction of a lower one. */
    case ATTN_ISA_NEON:
        return (getauxval(AT_HWCAP) & ARM_HWCAP_ASIMD) != 0;
    case ATTN_ISA_NEON_DOTPROD:
        return attn_isa_supported(ATTN_ISA_NEON) && (getauxval(AT_HWCAP) & ARM_HWCAP_ASIMDDP) != 0;
    case ATTN_ISA_NEON_BF16:
        return attn_isa_supported(ATTN_ISA_NEON_DOTPROD) &&
               (getauxval(AT_HWCAP2) & ARM_HWCAP2_BF16) != 0;
#else
    /* Without the auxiliary vector only the base architecture can be assumed. */
    case ATTN_ISA_NEON:
        return 1;
    case ATTN_ISA_NEON_DOTPROD:
    case ATTN_ISA_NEON_BF16:
        return 0;
#endif
#else
    case ATTN_ISA_AVX2:
    case ATTN_ISA_AVX512:
    case ATTN_ISA_NEON:
    case ATTN_ISA_NEON_DOTPROD:
    case ATTN_ISA_NEON_BF16:
        return 0;
#endif
    }
    return 0;
}

const char *attn_isa_name(attn_isa isa)
{
    switch (isa) {
    case ATTN_ISA_AUTO:
        return "auto";
    case ATTN_ISA_REFERENCE:
        return "reference";
    case ATTN_ISA_PORTABLE:
        return "portable";
    case ATTN_ISA_AVX2:
        return "avx2";
    case ATTN_ISA_AVX512:
        return "avx512";
    case ATTN_ISA_NEON:
        return "neon";
    case ATTN_ISA_NEON_DOTPROD:
        return "neon-dotprod";
    case ATTN_ISA_NEON_BF16:
        return "neon-bf16";
    }
    return "unknown";
}

/* Appends name to the space-separated list when the CPU has it. */
static void add_feature(char *list, size_t size, const char *name, int present)
{
    if (present)
        snprintf(list + strlen(list), size - strlen(list), "%s%s", list[0] != '\0' ? " " : "",
                 name);
}

const char *attn_cpu_features(void)
{
    static _Thread_local char features[160];
    features[0] = '\0';
#if defined(ATTN_HAVE_X86_KERNELS)
    add_feature(features, sizeof features, "avx2", __builtin_cpu_supports("avx2"));
    add_feature(features, sizeof features, "fma", __builtin_cpu_supports("fma"));
    add_feature(features, sizeof features, "avx512f", __builtin_cpu_supports("avx512f"));
    add_feature(features, sizeof features, "avx512vnni", __builtin_cpu_supports("avx512vnni"));
    add_feature(features, sizeof features, "avx512bf16", __builtin_cpu_supports("avx512bf16"));
#elif defined(ATTN_HAVE_NEON_KERNELS) && defined(__linux__)
    const unsigned long hwcap = getauxval(AT_HWCAP), hwcap2 = getauxval(AT_HWCAP2);
    add_feature(features, sizeof features, "asimd", (hwcap & ARM_HWCAP_ASIMD) != 0);
    add_feature(features, sizeof features, "asimddp", (hwcap & ARM_HWCAP_ASIMDDP) != 0);
    add_feature(features, sizeof features, "i8mm", (hwcap2 & ARM_HWCAP2_I8MM) != 0);
    add_feature(features, sizeof features, "bf16", (hwcap2 & ARM_HWCAP2_BF16) != 0);
#endif
    if (features[0] == '\0')
        snprintf(features, sizeof features, "none that attn uses");
    return features;
}

int attn_cpu_has_arm_i8mm(void)
{
#if defined(ATTN_HAVE_NEON_KERNELS) && defined(__linux__)
    return (getauxval(AT_HWCAP2) & ARM_HWCAP2_I8MM) != 0;
#else
    return 0;
#endif
}

static attn_isa best_supported(void)
{
    if (attn_isa_supported(ATTN_ISA_NEON_BF16))
        return ATTN_ISA_NEON_BF16;
    if (attn_isa_supported(ATTN_ISA_NEON_DOTPROD))
        return ATTN_ISA_NEON_DOTPROD;
    if (attn_isa_supported(ATTN_ISA_NEON))
        return ATTN_ISA_NEON;
    if (attn_isa_supported(ATTN_ISA_AVX512))
        return ATTN_ISA_AVX512;
    if (attn_isa_supported(ATTN_ISA_AVX2))
        return ATTN_ISA_AVX2;
    return ATTN_ISA_PORTABLE;
}

static void init_from_environment(void)
{
    if (isa_initialised)
        return;
    isa_initialised = 1;
    const char *env = getenv("ATTN_ISA");
    if (env == NULL || *env == '\0')
        return;
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (strcmp(env, attn_isa_name((attn_isa)isa)) == 0 && attn_isa_supported((attn_isa)isa)) {
            chosen_isa = (attn_isa)isa;
            return;
        }
    }
    /* An unknown or unsupported ATTN_ISA falls back to the best supported set. */
}

static attn_status check_isa_variable(void)
{
    const char *env = getenv("ATTN_ISA");
    if (env == NULL || *env == '\0')
        return ATTN_OK;
    char supported[96] = "";
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++)
        if (attn_isa_supported((attn_isa)isa))
            snprintf(supported + strlen(supported), sizeof supported - strlen(supported), "%s%s",
                     supported[0] != '\0' ? ", " : "", attn_isa_name((attn_isa)isa));
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (strcmp(env, attn_isa_name((attn_isa)isa)) != 0)
            continue;
        if (attn_isa_supported((attn_isa)isa))
            return ATTN_OK;
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "ATTN_ISA=%s: this CPU does not support it; set one of %s, or unset "
                         "ATTN_ISA for the best one",
                         env, supported);
    }
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                     "ATTN_ISA=%s is not an instruction set; set one of %s, or unset ATTN_ISA "
                     "for the best one",
                     env, supported);
}

attn_status attn_check_environment(void)
{
    ATTN_TRY(attn_check_threads_variable());
    return check_isa_variable();
}

attn_status attn_set_isa(attn_isa isa)
{
    isa_initialised = 1;
    if (isa < ATTN_ISA_AUTO || isa > ATTN_ISA_LAST)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_set_isa: unknown instruction set %d",
                         (int)isa);
    if (!attn_isa_supported(isa))
        return attn_fail(ATTN_ERR_UNSUPPORTED, "attn_set_isa: this CPU does not support %s",
                         attn_isa_name(isa));
    chosen_isa = isa;
    return ATTN_OK;
}

attn_isa attn_get_isa(void)
{
    init_from_environment();
    return chosen_isa == ATTN_ISA_AUTO ? best_supported() : chosen_isa;
}

attn_isa attn_best_isa(void)
{
    return best_supported();
}

attn_isa attn_active_isa(void)
{
    return attn_get_isa();
}
