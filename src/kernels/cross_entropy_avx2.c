/* The AVX2 build of cross_entropy_simd.h (this file name selects -mavx2 -mfma). */
#include "kernels/cross_entropy_simd.h"
