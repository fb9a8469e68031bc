/* The NEON build of layer_norm_simd.h (this file name puts it in the AArch64 build only). */
#include "kernels/layer_norm_simd.h"
