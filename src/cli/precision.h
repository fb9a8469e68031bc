/* A command's precision as its user reads it: what auto chose and why, and the one warning
 * when an explicitly asked precision runs emulated. */
#ifndef ATTN_CLI_PRECISION_H
#define ATTN_CLI_PRECISION_H

#include "attn/attn.h"

#include <stddef.h>

/* How the requested precision runs under the instruction set selected now, into text (of
 * size bytes, returned): "auto -> bf16 (native AVX512_BF16)", "auto -> fp32 (no native
 * AVX512_BF16 on the avx2 path)", "fp32", "bf16 (native AVX512_BF16)", "int8 (emulated: no
 * native AVX512_VNNI on the avx2 path, slower)". */
const char *cli_precision_describe(attn_precision requested, char *text, size_t size);

/* When precision (already resolved) runs emulated: one warning line on stderr, "attn
 * COMMAND: warning: ...", at most once per process whatever the command asks again. */
void cli_precision_warn_emulated(const char *command, attn_precision precision);

#endif
