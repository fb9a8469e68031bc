/* The AVX-512 build of rnn_gates_simd.h (this file name selects -mavx512f/bw/dq/vl). */
#include "kernels/rnn_gates_simd.h"
