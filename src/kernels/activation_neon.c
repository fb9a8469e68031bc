/* The NEON build of activation_simd.h (this file name puts it in the AArch64 build only). */
#include "kernels/activation_simd.h"
