/* Reading UTF-8 text as lines, reporting a bad line by file name and line number: a whole file
 * at once (attn_lines_read) or one line at a time (attn_line_reader), by the same rules. */
#define _POSIX_C_SOURCE 200809L
#include "data/data_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char byte_order_mark[3] = {'\xEF', '\xBB', '\xBF'};

/* The rule for one line, [start, *end) with *end its "\n" or the text's end: a trailing "\r"
 * is dropped and the rest must be UTF-8 without NUL bytes. index is 0-based, for the message. */
static attn_status check_line(const char *fn, const char *name, int64_t index, const char *start,
                              const char **end)
{
    if (*end > start && (*end)[-1] == '\r')
        (*end)--;
    const size_t length = (size_t)(*end - start);
    const size_t bad = utf8_first_invalid(start, length);
    if (bad != length)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: %s at byte %zu of the line", fn, name,
                         (long long)(index + 1), start[bad] == '\0' ? "NUL byte" : "invalid UTF-8",
                         bad + 1);
    return ATTN_OK;
}

static attn_status no_sentences(const char *fn, const char *name)
{
    return attn_fail(ATTN_ERR_FORMAT, "%s: %s: no sentences", fn, name);
}

/* Splits the text owned by `storage` (size bytes plus a NUL) into lines in place. */
static attn_status split_lines(const char *fn, const char *name, char *storage, size_t size,
                               attn_lines *out)
{
    char *text = storage;
    if (size >= 3 && memcmp(text, byte_order_mark, 3) == 0) {
        text += 3;
        size -= 3;
    }
    int64_t count = 0;
    for (size_t i = 0; i < size; i++)
        count += text[i] == '\n';
    if (size > 0 && text[size - 1] != '\n')
        count++;
    if (count == 0)
        return no_sentences(fn, name);

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
        const char *end = newline != NULL ? newline : end_of_text;
        const attn_status status = check_line(fn, name, index, start, &end);
        if (status != ATTN_OK) {
            free(line);
            return status;
        }
        start[end - start] = '\0';
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
attn_status read_whole_file(const char *fn, const char *path, char **data, size_t *size)
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
    ATTN_TRY(read_whole_file(fn, path, &storage, &size));
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

/* ---- one line at a time ------------------------------------------------------------------ */

struct attn_line_reader {
    FILE *file;
    int owns_file; /* not stdin */
    char *name;    /* the path, or "stdin" */
    char *line;    /* getline's buffer */
    size_t capacity;
    int64_t lines; /* handed out so far */
    int done;
};

attn_status attn_line_reader_open(const char *path, attn_line_reader **out)
{
    static const char fn[] = "attn_line_reader_open";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    attn_line_reader *r = calloc(1, sizeof *r);
    if (r == NULL || (r->name = strdup(path != NULL ? path : "stdin")) == NULL) {
        free(r);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    r->file = path != NULL ? fopen(path, "rb") : stdin;
    r->owns_file = path != NULL;
    if (r->file == NULL) {
        const attn_status status =
            attn_fail(ATTN_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(errno));
        attn_line_reader_close(r);
        return status;
    }
    *out = r;
    return ATTN_OK;
}

attn_status attn_line_reader_next(attn_line_reader *r, const char **line)
{
    static const char fn[] = "attn_line_reader_next";
    ATTN_CHECK_NOT_NULL(line);
    *line = NULL;
    ATTN_CHECK_NOT_NULL(r);
    if (r->done)
        return ATTN_OK;
    errno = 0;
    const ssize_t got = getline(&r->line, &r->capacity, r->file);
    if (got < 0) {
        r->done = 1;
        if (ferror(r->file))
            return attn_fail(errno == ENOMEM ? ATTN_ERR_OUT_OF_MEMORY : ATTN_ERR_IO,
                             "%s: cannot read '%s': %s", fn, r->name,
                             strerror(errno != 0 ? errno : EIO));
        /* As attn_lines_read: a file without a line is refused, not read as no text. */
        return r->lines == 0 ? no_sentences(fn, r->name) : ATTN_OK;
    }
    char *start = r->line;
    const char *end = r->line + got;
    const int newline = end[-1] == '\n';
    end -= newline;
    if (r->lines == 0 && end - start >= 3 && memcmp(start, byte_order_mark, 3) == 0)
        start += 3;
    if (!newline && end == start) {
        /* A byte-order mark alone: no line, as attn_lines_read sees it. */
        r->done = 1;
        return r->lines == 0 ? no_sentences(fn, r->name) : ATTN_OK;
    }
    ATTN_TRY(check_line(fn, r->name, r->lines, start, &end));
    start[end - start] = '\0';
    r->lines++;
    *line = start;
    return ATTN_OK;
}

int64_t attn_line_reader_lines(const attn_line_reader *r)
{
    return r == NULL ? 0 : r->lines;
}

void attn_line_reader_close(attn_line_reader *r)
{
    if (r == NULL)
        return;
    if (r->owns_file && r->file != NULL)
        fclose(r->file);
    free(r->line);
    free(r->name);
    free(r);
}
