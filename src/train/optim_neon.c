/* The NEON build of optim_simd.h (this file name puts it in the AArch64 build only). */
#include "train/optim_simd.h"
