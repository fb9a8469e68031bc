/* The AVX2 build of classic_mlp_simd.h (this file name selects -mavx2 -mfma). */
#include "attention/classic_mlp_simd.h"
