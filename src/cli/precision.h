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

/* Runs the model at precision ("auto", "fp32", "bf16", "int8"; NULL: the file's own): an fp32
 * model is quantized here; a quantized file refuses a higher precision and auto keeps it
 * (attn_model_set_precision). Warns once when this CPU emulates the precision the model then
 * runs at. Returns 0, or 1 after printing the message. */
int cli_set_model_precision(const char *command, attn_model *model, const char *precision);

/* The help of the inference commands' --precision, whose default is "auto". */
#define CLI_INFERENCE_PRECISION_HELP                                                               \
    "the products' precision: an fp32 model is quantized at load, a file from attn quantize "      \
    "runs at its own; auto: an fp32 model in bf16 where bf16 is native, else fp32 [auto]"

#endif
