/* The emulated bf16 kernels (sdpa_bf16_emulated.h) vectorised for AVX-512, for CPUs that
 * have AVX-512 but not AVX512_BF16. */
#include "attention/sdpa_internal.h"

#ifdef ATTN_SDPA_HAVE_X86
#define BF16_EMULATED_NAME attn_sdpa_bf16_kernels_emulated_avx512
#define BF16_EMULATED_BLOCK_COLS 16
#include "attention/sdpa_bf16_emulated.h"
#endif
