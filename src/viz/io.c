/* Byte buffers, UTF-8 helpers, reading whole files and writing output files atomically. */
#define _POSIX_C_SOURCE 200809L

#include "viz/viz_internal.h"

#include "attn/attn_data.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- buffers ----------------------------------------------------------------------------- */

static int buffer_reserve(viz_buffer *buf, size_t extra)
{
    if (buf->failed)
        return 0;
    if (extra >= SIZE_MAX / 2 - buf->size) {
        buf->failed = 1;
        return 0;
    }
    size_t needed = buf->size + extra + 1;
    if (needed <= buf->capacity)
        return 1;
    size_t capacity = buf->capacity > 0 ? buf->capacity : 256;
    while (capacity < needed)
        capacity *= 2;
    char *data = realloc(buf->data, capacity);
    if (data == NULL) {
        buf->failed = 1;
        return 0;
    }
    buf->data = data;
    buf->capacity = capacity;
    return 1;
}

void viz_buffer_append(viz_buffer *buf, const char *bytes, size_t size)
{
    if (!buffer_reserve(buf, size))
        return;
    memcpy(buf->data + buf->size, bytes, size);
    buf->size += size;
    buf->data[buf->size] = '\0';
}

void viz_buffer_puts(viz_buffer *buf, const char *text)
{
    viz_buffer_append(buf, text, strlen(text));
}

void viz_buffer_printf(viz_buffer *buf, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    int needed = vsnprintf(NULL, 0, fmt, args);
    va_end(args);
    if (needed < 0) {
        buf->failed = 1;
        return;
    }
    if (!buffer_reserve(buf, (size_t)needed))
        return;
    va_start(args, fmt);
    vsnprintf(buf->data + buf->size, (size_t)needed + 1, fmt, args);
    va_end(args);
    buf->size += (size_t)needed;
}

void viz_buffer_free(viz_buffer *buf)
{
    free(buf->data);
    memset(buf, 0, sizeof *buf);
}

/* ---- UTF-8 ------------------------------------------------------------------------------- */

uint32_t viz_utf8_next(const char **text)
{
    const unsigned char *s = (const unsigned char *)*text;
    if (s[0] == 0)
        return 0;
    if (s[0] < 0x80) {
        *text += 1;
        return s[0];
    }
    int length = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : 2;
    uint32_t cp = s[0] & (0x3Fu >> (length - 1));
    for (int i = 1; i < length; i++)
        cp = (cp << 6) | (s[i] & 0x3Fu);
    *text += length;
    return cp;
}

typedef struct codepoint_range {
    uint32_t first, last;
} codepoint_range;

static int in_ranges(uint32_t cp, const codepoint_range *ranges, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (cp >= ranges[i].first && cp <= ranges[i].last)
            return 1;
    return 0;
}

int viz_codepoint_columns(uint32_t cp)
{
    /* The common blocks only: enough to keep tables of words in step, without a Unicode
     * database. */
    static const codepoint_range combining[] = {
        {0x0300, 0x036F}, {0x0483, 0x0489}, {0x0591, 0x05BD}, {0x0610, 0x061A}, {0x064B, 0x065F},
        {0x0E31, 0x0E31}, {0x0E34, 0x0E3A}, {0x0E47, 0x0E4E}, {0x1AB0, 0x1AFF}, {0x1DC0, 0x1DFF},
        {0x200B, 0x200F}, {0x20D0, 0x20FF}, {0xFE00, 0xFE0F}, {0xFE20, 0xFE2F}};
    static const codepoint_range wide[] = {
        {0x1100, 0x115F},   {0x2E80, 0x303E},   {0x3041, 0x33FF},  {0x3400, 0x4DBF},
        {0x4E00, 0x9FFF},   {0xA000, 0xA4CF},   {0xAC00, 0xD7A3},  {0xF900, 0xFAFF},
        {0xFE30, 0xFE4F},   {0xFF00, 0xFF60},   {0xFFE0, 0xFFE6},  {0x1F300, 0x1F64F},
        {0x1F900, 0x1F9FF}, {0x20000, 0x2FFFD}, {0x30000, 0x3FFFD}};
    if (in_ranges(cp, combining, sizeof combining / sizeof combining[0]))
        return 0;
    if (in_ranges(cp, wide, sizeof wide / sizeof wide[0]))
        return 2;
    return 1;
}

attn_status viz_check_labels(const char *fn, const char *what, const char *const *labels,
                             int64_t count)
{
    if (labels == NULL)
        return ATTN_OK;
    for (int64_t i = 0; i < count; i++) {
        if (labels[i] == NULL)
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s[%lld] is NULL", fn, what,
                             (long long)i);
        if (!attn_utf8_valid(labels[i], strlen(labels[i])))
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s[%lld] is not valid UTF-8", fn, what,
                             (long long)i);
    }
    return ATTN_OK;
}

/* ---- files ------------------------------------------------------------------------------- */

attn_status attn_viz_format_from_path(const char *path, attn_viz_format *format)
{
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_NOT_NULL(format);
    const char *slash = strrchr(path, '/');
    const char *dot = strrchr(slash != NULL ? slash + 1 : path, '.');
    if (dot != NULL && strcasecmp(dot, ".svg") == 0) {
        *format = ATTN_VIZ_SVG;
        return ATTN_OK;
    }
    if (dot != NULL && strcasecmp(dot, ".png") == 0) {
        *format = ATTN_VIZ_PNG;
        return ATTN_OK;
    }
    if (dot == NULL)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_viz_format_from_path: '%s' has no extension (use .svg or .png)",
                         path);
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                     "attn_viz_format_from_path: '%s': unknown extension '%s' (use .svg or .png)",
                     path, dot);
}

static attn_status io_error(const char *fn, const char *path, const char *step, int error)
{
    char reason[128];
    if (strerror_r(error, reason, sizeof reason) != 0)
        snprintf(reason, sizeof reason, "error %d", error);
    return attn_fail(ATTN_ERR_IO, "%s: '%s': %s failed: %s", fn, path, step, reason);
}

attn_status viz_read_file(const char *fn, const char *path, char **text, size_t *size)
{
    errno = 0;
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return io_error(fn, path, "opening", errno);
    viz_buffer buf = {0};
    char chunk[65536];
    size_t got;
    while ((got = fread(chunk, 1, sizeof chunk, f)) > 0)
        viz_buffer_append(&buf, chunk, got);
    int read_error = ferror(f) ? (errno != 0 ? errno : EIO) : 0;
    fclose(f);
    if (read_error != 0) {
        viz_buffer_free(&buf);
        return io_error(fn, path, "reading", read_error);
    }
    if (buf.failed) {
        viz_buffer_free(&buf);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory reading '%s'", fn, path);
    }
    if (buf.data == NULL) {
        buf.data = calloc(1, 1);
        if (buf.data == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory reading '%s'", fn, path);
    }
    *text = buf.data;
    *size = buf.size;
    return ATTN_OK;
}

attn_status viz_scene_encode(const viz_scene *scene, attn_viz_format format, const char *fn,
                             unsigned char **bytes, size_t *size)
{
    if (format == ATTN_VIZ_SVG)
        return viz_scene_svg(scene, fn, bytes, size);
    if (format == ATTN_VIZ_PNG)
        return viz_scene_png(scene, fn, bytes, size);
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: unknown format %d", fn, (int)format);
}

attn_status viz_scene_write(const viz_scene *scene, const char *fn, const char *path)
{
    attn_viz_format format;
    ATTN_TRY(attn_viz_format_from_path(path, &format));
    unsigned char *bytes = NULL;
    size_t size = 0;
    ATTN_TRY(viz_scene_encode(scene, format, fn, &bytes, &size));
    attn_status status = attn_file_write_bytes_atomically(fn, path, bytes, size);
    free(bytes);
    return status;
}
