/* The AVX-512 build of classic_mlp_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "attention/classic_mlp_simd.h"
