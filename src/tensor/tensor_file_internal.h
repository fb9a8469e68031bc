/* Helpers shared by the safetensors reader and writer; not part of the public API. */
#ifndef ATTN_TENSOR_FILE_INTERNAL_H
#define ATTN_TENSOR_FILE_INTERNAL_H

#include "attn/attn_tensor_file.h"
#include "core/internal.h"

#include <stddef.h>
#include <stdio.h>

/* The header may not exceed this many bytes (the reference implementation's limit, which
 * keeps a hostile file from making the JSON parser allocate without bound). */
#define ATTN_SAFETENSORS_MAX_HEADER ((uint64_t)100000000)

/* Offsets and sizes travel through JSON numbers, which cJSON holds as doubles: integers are
 * exact up to 2^53, and no real file comes near it. */
#define ATTN_SAFETENSORS_MAX_INTEGER ((uint64_t)1 << 53)

/* The dtype whose file name is `name`, or ATTN_DTYPE_COUNT if none is. */
ATTN_INTERNAL attn_dtype attn_dtype_from_name(const char *name);

/* Offset of the first byte of s[0..n) that breaks well-formed UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF included) or is NUL, which JSON text never holds
 * raw; n if there is none. */
ATTN_INTERNAL size_t attn_utf8_error_offset(const char *s, size_t n);

#endif /* ATTN_TENSOR_FILE_INTERNAL_H */
