/* The AVX2 build of optim_simd.h (this file name selects -mavx2 -mfma). */
#include "train/optim_simd.h"
