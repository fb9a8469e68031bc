/* The AVX-512 build of softmax_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "kernels/softmax_simd.h"
