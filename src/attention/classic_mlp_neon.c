/* The NEON build of classic_mlp_simd.h (this file name puts it in the AArch64 build only). */
#include "attention/classic_mlp_simd.h"
