/* safetensors element types and UTF-8 checks shared by the reader and the writer. */
#include "tensor/tensor_file_internal.h"

#include <string.h>

/* The format stores raw host bytes; converting on big-endian hosts is not implemented. */
#if defined(__BYTE_ORDER__) && defined(__ORDER_LITTLE_ENDIAN__)
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "safetensors files are little-endian; attn reads and writes them byte for byte");
#endif

static const struct {
    const char *name;
    size_t size;
} dtype_table[ATTN_DTYPE_COUNT] = {
    [ATTN_DTYPE_BOOL] = {"BOOL", 1},       [ATTN_DTYPE_U8] = {"U8", 1},
    [ATTN_DTYPE_I8] = {"I8", 1},           [ATTN_DTYPE_F8_E5M2] = {"F8_E5M2", 1},
    [ATTN_DTYPE_F8_E4M3] = {"F8_E4M3", 1}, [ATTN_DTYPE_I16] = {"I16", 2},
    [ATTN_DTYPE_U16] = {"U16", 2},         [ATTN_DTYPE_F16] = {"F16", 2},
    [ATTN_DTYPE_BF16] = {"BF16", 2},       [ATTN_DTYPE_I32] = {"I32", 4},
    [ATTN_DTYPE_U32] = {"U32", 4},         [ATTN_DTYPE_F32] = {"F32", 4},
    [ATTN_DTYPE_F64] = {"F64", 8},         [ATTN_DTYPE_I64] = {"I64", 8},
    [ATTN_DTYPE_U64] = {"U64", 8},
};

static int dtype_is_valid(attn_dtype dtype)
{
    return (int)dtype >= 0 && (int)dtype < ATTN_DTYPE_COUNT;
}

const char *attn_dtype_name(attn_dtype dtype)
{
    return dtype_is_valid(dtype) ? dtype_table[dtype].name : "?";
}

size_t attn_dtype_size(attn_dtype dtype)
{
    return dtype_is_valid(dtype) ? dtype_table[dtype].size : 0;
}

attn_dtype attn_dtype_from_name(const char *name)
{
    for (int d = 0; d < ATTN_DTYPE_COUNT; d++)
        if (strcmp(dtype_table[d].name, name) == 0)
            return (attn_dtype)d;
    return ATTN_DTYPE_COUNT;
}

size_t attn_utf8_error_offset(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c == 0)
            return i;
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t length;
        unsigned min_code;
        unsigned code;
        if (c >= 0xC2 && c <= 0xDF) {
            length = 2, min_code = 0x80, code = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            length = 3, min_code = 0x800, code = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            length = 4, min_code = 0x10000, code = c & 0x07;
        } else {
            return i; /* a continuation byte, an overlong 2-byte lead, or beyond U+10FFFF */
        }
        if (n - i < length)
            return i;
        for (size_t k = 1; k < length; k++) {
            if ((u[i + k] & 0xC0) != 0x80)
                return i;
            code = (code << 6) | (u[i + k] & 0x3F);
        }
        if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
            return i;
        i += length;
    }
    return n;
}
