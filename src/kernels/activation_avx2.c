/* The AVX2 build of activation_simd.h (this file name selects -mavx2 -mfma). */
#include "kernels/activation_simd.h"
