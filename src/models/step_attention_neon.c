/* The NEON build of step_attention_simd.h (this file name puts it in the AArch64 build only). */
#include "models/step_attention_simd.h"
