/* The NEON build of step_linear_simd.h (this file name puts it in the AArch64 build only). */
#include "models/step_linear_simd.h"
