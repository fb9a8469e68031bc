/* The AVX-512 build of layer_norm_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "kernels/layer_norm_simd.h"
