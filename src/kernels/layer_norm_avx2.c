/* The AVX2 build of layer_norm_simd.h (this file name selects -mavx2 -mfma). */
#include "kernels/layer_norm_simd.h"
