/* The AVX-512 build of cross_entropy_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "kernels/cross_entropy_simd.h"
