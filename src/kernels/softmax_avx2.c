/* The AVX2 build of softmax_simd.h (this file name selects -mavx2 -mfma). */
#include "kernels/softmax_simd.h"
