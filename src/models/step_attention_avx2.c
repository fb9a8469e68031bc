/* The AVX2 build of step_attention_simd.h (this file name selects -mavx2 -mfma). */
#include "models/step_attention_simd.h"
