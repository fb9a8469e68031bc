#include "core/internal.h"
#include "build_info.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

attn_status attn_fail(attn_status status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, args);
    va_end(args);
    return status;
}

const char *attn_last_error(void)
{
    return last_error;
}

void attn_clear_error(void)
{
    last_error[0] = '\0';
}

const char *attn_status_name(attn_status status)
{
    switch (status) {
    case ATTN_OK:
        return "ok";
    case ATTN_ERR_INVALID_ARGUMENT:
        return "invalid argument";
    case ATTN_ERR_OUT_OF_MEMORY:
        return "out of memory";
    case ATTN_ERR_IO:
        return "input/output error";
    case ATTN_ERR_FORMAT:
        return "malformed input";
    case ATTN_ERR_UNSUPPORTED:
        return "unsupported";
    case ATTN_ERR_INTERNAL:
        return "internal error";
    case ATTN_ERR_DIVERGED:
        return "training diverged";
    case ATTN_ERR_CANCELLED:
        return "cancelled";
    }
    return "unknown status";
}

const char *attn_version(void)
{
    return ATTN_VERSION_STRING;
}

const char *attn_build_info(void)
{
    static _Thread_local char info[256];
    snprintf(info, sizeof info, "attn %s; threading %s (%d threads); ISA %s (best supported %s)",
             ATTN_VERSION_STRING, ATTN_THREADING_NAME, attn_get_num_threads(),
             attn_isa_name(attn_get_isa()),
             attn_isa_name(attn_best_isa()));
    return info;
}

int attn_mul_size(size_t a, size_t b, size_t *out)
{
    if (a != 0 && b > SIZE_MAX / a) {
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "allocation size overflows (%zu x %zu)", a, b);
        return 0;
    }
    *out = a * b;
    return 1;
}
