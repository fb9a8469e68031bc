/* The NEON build of rnn_gates_simd.h (this file name puts it in the AArch64 build only). */
#include "kernels/rnn_gates_simd.h"
