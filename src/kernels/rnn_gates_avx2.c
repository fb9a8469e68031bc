/* The AVX2 build of rnn_gates_simd.h (this file name selects -mavx2 -mfma). */
#include "kernels/rnn_gates_simd.h"
