/* Reading UTF-8 text as lines, reporting a bad line by file name and line number. */
#include "data/data_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Splits the text owned by `storage` (size bytes plus a NUL) into lines in place. */
static attn_status split_lines(const char *fn, const char *name, char *storage, size_t size,
                               attn_lines *out)
{
    char *text = storage;
    if (size >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) {
        text += 3;
        size -= 3;
    }
    int64_t count = 0;
    for (size_t i = 0; i < size; i++)
        count += text[i] == '\n';
    if (size > 0 && text[size - 1] != '\n')
        count++;
    if (count == 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s: no sentences", fn, name);

    size_t bytes;
    if (!attn_mul_size((size_t)count, sizeof(char *), &bytes))
        return ATTN_ERR_OUT_OF_MEMORY;
    char **line = malloc(bytes);
    if (line == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld lines of %s", fn,
                         (long long)count, name);
    char *start = text;
    char *end_of_text = text + size;
    for (int64_t index = 0; index < count; index++) {
        char *newline = memchr(start, '\n', (size_t)(end_of_text - start));
        char *end = newline != NULL ? newline : end_of_text;
        if (end > start && end[-1] == '\r')
            end--;
        size_t length = (size_t)(end - start);
        size_t bad = utf8_first_invalid(start, length);
        if (bad != length) {
            free(line);
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: %s at byte %zu of the line", fn,
                             name, (long long)(index + 1),
                             start[bad] == '\0' ? "NUL byte" : "invalid UTF-8", bad + 1);
        }
        *end = '\0';
        line[index] = start;
        start = newline != NULL ? newline + 1 : end_of_text;
    }
    out->count = count;
    out->line = line;
    out->storage = storage;
    return ATTN_OK;
}

attn_status attn_lines_parse(const char *name, const char *text, size_t size, attn_lines *out)
{
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(name);
    ATTN_CHECK_ARG(text != NULL || size == 0, "attn_lines_parse: text is NULL but size is %zu",
                   size);
    ATTN_CHECK_ARG(size < SIZE_MAX, "attn_lines_parse: size %zu is too large", size);
    char *storage = malloc(size + 1);
    if (storage == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_lines_parse: out of memory for %zu bytes",
                         size);
    if (size > 0)
        memcpy(storage, text, size);
    storage[size] = '\0';
    attn_status status = split_lines("attn_lines_parse", name, storage, size, out);
    if (status != ATTN_OK)
        free(storage);
    return status;
}

/* Reads a whole file into a malloc'ed, NUL-terminated buffer. */
static attn_status read_file(const char *fn, const char *path, char **data, size_t *size)
{
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return attn_fail(ATTN_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(errno));
    byte_buffer buf = {0};
    char chunk[1 << 16];
    attn_status status = ATTN_OK;
    for (;;) {
        size_t got = fread(chunk, 1, sizeof chunk, file);
        if (got > 0) {
            status = byte_buffer_append(&buf, chunk, got);
            if (status != ATTN_OK)
                break;
        }
        if (got < sizeof chunk) {
            if (ferror(file))
                status = attn_fail(ATTN_ERR_IO, "%s: cannot read '%s': %s", fn, path,
                                   strerror(errno));
            break;
        }
    }
    fclose(file);
    if (status == ATTN_OK && buf.data == NULL)
        status = byte_buffer_append(&buf, "", 0);
    if (status != ATTN_OK) {
        byte_buffer_free(&buf);
        return status;
    }
    *data = buf.data;
    *size = buf.size;
    return ATTN_OK;
}

attn_status lines_read_for(const char *fn, const char *path, attn_lines *out)
{
    memset(out, 0, sizeof *out);
    char *storage;
    size_t size;
    ATTN_TRY(read_file(fn, path, &storage, &size));
    attn_status status = split_lines(fn, path, storage, size, out);
    if (status != ATTN_OK)
        free(storage);
    return status;
}

attn_status attn_lines_read(const char *path, attn_lines *out)
{
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(path);
    return lines_read_for("attn_lines_read", path, out);
}

void attn_lines_free(attn_lines *lines)
{
    if (lines == NULL)
        return;
    free(lines->line);
    free(lines->storage);
    memset(lines, 0, sizeof *lines);
}
