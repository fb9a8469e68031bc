/* The emulated bf16 kernels (sdpa_bf16_emulated.h) for the baseline instruction set. */
#define BF16_EMULATED_NAME attn_sdpa_bf16_kernels_emulated
#define BF16_EMULATED_BLOCK_COLS 8
#include "attention/sdpa_bf16_emulated.h"
