/* The AVX-512 build of step_attention_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "models/step_attention_simd.h"
