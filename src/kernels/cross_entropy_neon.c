/* The NEON build of cross_entropy_simd.h (this file name puts it in the AArch64 build only). */
#include "kernels/cross_entropy_simd.h"
