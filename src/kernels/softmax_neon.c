/* The NEON build of softmax_simd.h (this file name puts it in the AArch64 build only). */
#include "kernels/softmax_simd.h"
