/* The AVX-512 build of step_linear_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "models/step_linear_simd.h"
