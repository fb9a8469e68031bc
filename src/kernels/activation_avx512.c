/* The AVX-512 build of activation_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "kernels/activation_simd.h"
