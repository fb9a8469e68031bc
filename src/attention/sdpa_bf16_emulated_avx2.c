/* The emulated bf16 kernels (sdpa_bf16_emulated.h) vectorised for AVX2 (CPUs without
 * AVX512_BF16 run bf16 attention through them when the instruction set is avx2). */
#include "attention/sdpa_internal.h"

#ifdef ATTN_SDPA_HAVE_X86
#define BF16_EMULATED_NAME attn_sdpa_bf16_kernels_emulated_avx2
#define BF16_EMULATED_BLOCK_COLS 8
#include "attention/sdpa_bf16_emulated.h"
#endif
