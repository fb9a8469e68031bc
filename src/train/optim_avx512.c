/* The AVX-512 build of optim_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "train/optim_simd.h"
