/* A language model's training text as one stream of token ids: plain text tokenized line by
 * line, or llm.c's token files mapped from disk, never read whole. */
#define _POSIX_C_SOURCE 200809L
#include "data/data_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

struct attn_token_stream {
    int64_t count;
    /* Exactly one of the two holds the tokens. */
    int32_t *ids;           /* owned: tokenized text */
    const uint16_t *mapped; /* into the mapping: an llm.c token file */
    void *mapping;
    size_t mapping_size;
    int names_tokenizer; /* a token file whose header names its tokenizer */
    uint64_t tokenizer_fingerprint;
};

attn_status attn_token_stream_from_ids(const int32_t *ids, int64_t count, attn_token_stream **out)
{
    static const char fn[] = "attn_token_stream_from_ids";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(count >= 0, "%s: negative count %lld", fn, (long long)count);
    ATTN_CHECK_ARG(count == 0 || ids != NULL, "%s: ids must not be NULL", fn);
    for (int64_t i = 0; i < count; i++)
        ATTN_CHECK_ARG(ids[i] >= 0, "%s: ids[%lld] = %d is negative", fn, (long long)i,
                       (int)ids[i]);
    attn_token_stream *s = calloc(1, sizeof *s);
    size_t bytes;
    if (s == NULL || !attn_mul_size((size_t)count + 1, sizeof *s->ids, &bytes) ||
        (s->ids = malloc(bytes)) == NULL) {
        free(s);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld tokens", fn,
                         (long long)count);
    }
    if (count > 0)
        memcpy(s->ids, ids, (size_t)count * sizeof *ids);
    s->count = count;
    *out = s;
    return ATTN_OK;
}

attn_status attn_token_stream_from_text(const attn_tokenizer *tokenizer, const char *const *lines,
                                        int64_t n, attn_token_stream **out)
{
    static const char fn[] = "attn_token_stream_from_text";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_ARG(n >= 0, "%s: negative line count %lld", fn, (long long)n);
    ATTN_CHECK_ARG(n == 0 || lines != NULL, "%s: lines must not be NULL", fn);
    id_buffer stream = {0};
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < n && status == ATTN_OK; i++) {
        int32_t *ids = NULL;
        int64_t count = 0;
        status = attn_tokenizer_encode(tokenizer, lines[i], &ids, &count);
        if (status == ATTN_OK)
            status = id_buffer_reserve(&stream, stream.size + count + 1);
        if (status == ATTN_OK) {
            if (count > 0)
                memcpy(stream.data + stream.size, ids, (size_t)count * sizeof *ids);
            stream.size += count;
            stream.data[stream.size++] = ATTN_EOS_ID;
        }
        free(ids);
    }
    if (status != ATTN_OK) {
        id_buffer_free(&stream);
        return status;
    }
    attn_token_stream *s = calloc(1, sizeof *s);
    if (s == NULL) {
        id_buffer_free(&stream);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    s->ids = stream.data;
    s->count = stream.size;
    *out = s;
    return ATTN_OK;
}

/* llm.c's token file: 256 int32 (magic, version, token count, then zeros), then the tokens as
 * uint16, little-endian. */
enum { LLMC_TOKENS_MAGIC = 20240520, LLMC_TOKENS_VERSION = 1, LLMC_HEADER_INTS = 256 };

static int32_t read_le32(const unsigned char *p)
{
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

attn_status attn_token_stream_map_llmc(const char *path, attn_token_stream **out)
{
    static const char fn[] = "attn_token_stream_map_llmc";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return attn_fail(ATTN_ERR_IO, "%s: cannot open %s: %s", fn, path, strerror(errno));
    struct stat info;
    if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
        close(fd);
        return attn_fail(ATTN_ERR_IO, "%s: %s is not a regular file", fn, path);
    }
    const size_t header_bytes = LLMC_HEADER_INTS * sizeof(int32_t);
    const size_t size = (size_t)info.st_size;
    if (size < header_bytes) {
        close(fd);
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s has %zu bytes, less than the 1024-byte header of an llm.c token "
                         "file",
                         fn, path, size);
    }
    void *mapping = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (mapping == MAP_FAILED)
        return attn_fail(ATTN_ERR_IO, "%s: cannot map %s: %s", fn, path, strerror(errno));
    const unsigned char *bytes = mapping;
    const int32_t magic = read_le32(bytes), version = read_le32(bytes + 4);
    const int64_t count = read_le32(bytes + 8);
    attn_status status = ATTN_OK;
    if (magic != LLMC_TOKENS_MAGIC)
        status = attn_fail(ATTN_ERR_FORMAT,
                           "%s: %s is not an llm.c token file (magic %d, expected %d); plain text "
                           "goes to --train, not --train-tokens",
                           fn, path, (int)magic, LLMC_TOKENS_MAGIC);
    else if (version != LLMC_TOKENS_VERSION)
        status = attn_fail(ATTN_ERR_FORMAT, "%s: %s: token file version %d, expected %d", fn, path,
                           (int)version, LLMC_TOKENS_VERSION);
    else if (count < 0 || (uint64_t)count * 2 != size - header_bytes)
        status = attn_fail(ATTN_ERR_FORMAT,
                           "%s: %s: the header counts %lld tokens (%lld bytes) but %zu bytes "
                           "follow it: the file is truncated or not a token file",
                           fn, path, (long long)count, (long long)count * 2, size - header_bytes);
    attn_token_stream *s = NULL;
    if (status == ATTN_OK && (s = calloc(1, sizeof *s)) == NULL)
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (status != ATTN_OK) {
        munmap(mapping, size);
        return status;
    }
    /* Windows are read from first to last in file order, or scattered when shuffled; the
     * kernel's default read-ahead suits the first and costs little in the second. */
    s->mapping = mapping;
    s->mapping_size = size;
    s->mapped = (const uint16_t *)(bytes + header_bytes);
    s->count = count;
    if ((uint32_t)read_le32(bytes + 12) == ATTN_TOKEN_FILE_TOKENIZER_TAG) {
        s->names_tokenizer = 1;
        s->tokenizer_fingerprint = (uint64_t)(uint32_t)read_le32(bytes + 16) |
                                   (uint64_t)(uint32_t)read_le32(bytes + 20) << 32;
    }
    *out = s;
    return ATTN_OK;
}

int attn_token_stream_tokenizer(const attn_token_stream *stream, uint64_t *fingerprint)
{
    if (stream == NULL || !stream->names_tokenizer)
        return 0;
    if (fingerprint != NULL)
        *fingerprint = stream->tokenizer_fingerprint;
    return 1;
}

void attn_token_stream_destroy(attn_token_stream *stream)
{
    if (stream == NULL)
        return;
    if (stream->mapping != NULL)
        munmap(stream->mapping, stream->mapping_size);
    free(stream->ids);
    free(stream);
}

int64_t attn_token_stream_size(const attn_token_stream *stream)
{
    return stream == NULL ? 0 : stream->count;
}

attn_status attn_token_stream_read(const attn_token_stream *stream, int64_t start, int64_t count,
                                   int32_t *out)
{
    static const char fn[] = "attn_token_stream_read";
    ATTN_CHECK_NOT_NULL(stream);
    ATTN_CHECK_ARG(count == 0 || out != NULL, "%s: out must not be NULL", fn);
    ATTN_CHECK_ARG(start >= 0 && count >= 0 && start <= stream->count &&
                       count <= stream->count - start,
                   "%s: tokens [%lld, %lld) are outside the stream's %lld", fn, (long long)start,
                   (long long)(start + count), (long long)stream->count);
    if (stream->ids != NULL) {
        if (count > 0)
            memcpy(out, stream->ids + start, (size_t)count * sizeof *out);
        return ATTN_OK;
    }
    for (int64_t i = 0; i < count; i++) {
        /* The file is little-endian whatever the host. */
        const unsigned char *p = (const unsigned char *)(stream->mapped + start + i);
        out[i] = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
    }
    return ATTN_OK;
}

int32_t attn_token_stream_max_id(const attn_token_stream *stream)
{
    if (stream == NULL || stream->count == 0)
        return -1;
    int32_t best = 0;
    if (stream->ids != NULL) {
        for (int64_t i = 0; i < stream->count; i++)
            best = stream->ids[i] > best ? stream->ids[i] : best;
        return best;
    }
    for (int64_t i = 0; i < stream->count; i++) {
        const unsigned char *p = (const unsigned char *)(stream->mapped + i);
        const int32_t id = (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8);
        best = id > best ? id : best;
    }
    return best;
}

uint64_t attn_token_stream_fingerprint(const attn_token_stream *stream)
{
    /* FNV-1a over the count and every token: a resumed run must see the same text. */
    uint64_t h = 0xcbf29ce484222325ULL;
    const int64_t n = attn_token_stream_size(stream);
    for (int b = 0; b < 8; b++) {
        h ^= ((uint64_t)n >> (8 * b)) & 0xffu;
        h *= 0x100000001b3ULL;
    }
    int32_t chunk[4096];
    for (int64_t start = 0; start < n; start += 4096) {
        const int64_t count = n - start < 4096 ? n - start : 4096;
        attn_token_stream_read(stream, start, count, chunk);
        for (int64_t i = 0; i < count; i++)
            for (int b = 0; b < 4; b++) {
                h ^= ((uint32_t)chunk[i] >> (8 * b)) & 0xffu;
                h *= 0x100000001b3ULL;
            }
    }
    return h;
}

/* The 1024-byte header of a file of count tokens, naming its tokenizer when tokenizer is not
 * NULL. */
static int write_llmc_header(FILE *f, int64_t count, const uint64_t *tokenizer)
{
    unsigned char header[LLMC_HEADER_INTS * sizeof(int32_t)] = {0};
    const uint32_t fields[6] = {LLMC_TOKENS_MAGIC,
                                LLMC_TOKENS_VERSION,
                                (uint32_t)count,
                                tokenizer != NULL ? ATTN_TOKEN_FILE_TOKENIZER_TAG : 0,
                                tokenizer != NULL ? (uint32_t)*tokenizer : 0,
                                tokenizer != NULL ? (uint32_t)(*tokenizer >> 32) : 0};
    for (int i = 0; i < 6; i++)
        for (int b = 0; b < 4; b++)
            header[4 * i + b] = (unsigned char)(fields[i] >> (8 * b));
    return fwrite(header, 1, sizeof header, f) == sizeof header;
}

/* Writes the header and the tokens in chunks: no copy of the whole file in memory. */
static int write_llmc_body(FILE *f, void *context)
{
    const attn_token_stream *stream = context;
    if (!write_llmc_header(f, stream->count, NULL))
        return 0;
    int32_t chunk[4096];
    unsigned char bytes[2 * 4096];
    for (int64_t start = 0; start < stream->count; start += 4096) {
        const int64_t count = stream->count - start < 4096 ? stream->count - start : 4096;
        attn_token_stream_read(stream, start, count, chunk);
        for (int64_t i = 0; i < count; i++) {
            bytes[2 * i] = (unsigned char)(chunk[i] & 0xff);
            bytes[2 * i + 1] = (unsigned char)((uint32_t)chunk[i] >> 8);
        }
        if (fwrite(bytes, 2, (size_t)count, f) != (size_t)count)
            return 0;
    }
    return 1;
}

attn_status attn_token_stream_write_llmc(const attn_token_stream *stream, const char *path)
{
    static const char fn[] = "attn_token_stream_write_llmc";
    ATTN_CHECK_NOT_NULL(stream);
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_ARG(stream->count <= INT32_MAX,
                   "%s: %lld tokens do not fit an llm.c token file's int32 count", fn,
                   (long long)stream->count);
    const int32_t max_id = attn_token_stream_max_id(stream);
    ATTN_CHECK_ARG(max_id <= UINT16_MAX,
                   "%s: token id %d does not fit an llm.c token file's uint16 tokens", fn,
                   (int)max_id);
    /* The writer only reads the stream. */
    return attn_file_write_atomically(fn, path, write_llmc_body, (void *)stream);
}

/* ---- a token file written as the text is read ------------------------------------------- */

enum { TEXT_CHUNK_TOKENS = 1 << 15 };

typedef struct text_writer {
    const attn_tokenizer *tokenizer;
    uint64_t fingerprint; /* the tokenizer's, for the header */
    attn_line_source next_line;
    void *context;
    int64_t count;
    unsigned char chunk[2 * TEXT_CHUNK_TOKENS]; /* little-endian uint16, waiting for fwrite */
    size_t filled;                              /* tokens in chunk */
    /* A failure that is not the file's: the atomic writer would report it as a failed write,
     * so it is kept here and raised again after. */
    attn_status status;
    char message[1024];
} text_writer;

static int keep_failure(text_writer *w, attn_status status)
{
    w->status = status;
    snprintf(w->message, sizeof w->message, "%s", attn_last_error());
    return 0;
}

static int put_token(FILE *f, text_writer *w, int32_t id)
{
    if (w->count == INT32_MAX)
        return keep_failure(w, attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                                         "attn_token_file_write_text: the text has more than %d "
                                         "tokens, more than an llm.c "
                                         "token file counts (int32): split it into several files",
                                         INT32_MAX));
    w->chunk[2 * w->filled] = (unsigned char)(id & 0xff);
    w->chunk[2 * w->filled + 1] = (unsigned char)((uint32_t)id >> 8);
    w->count++;
    if (++w->filled == TEXT_CHUNK_TOKENS) {
        if (fwrite(w->chunk, 2, w->filled, f) != w->filled)
            return 0;
        w->filled = 0;
    }
    return 1;
}

/* A placeholder header, the tokens line by line, then the header with the count. */
static int write_text_body(FILE *f, void *context)
{
    text_writer *w = context;
    if (!write_llmc_header(f, 0, &w->fingerprint))
        return 0;
    for (;;) {
        const char *line = NULL;
        attn_status status = w->next_line(w->context, &line);
        if (status != ATTN_OK)
            return keep_failure(w, status);
        if (line == NULL)
            break;
        int32_t *ids = NULL;
        int64_t count = 0;
        status = attn_tokenizer_encode(w->tokenizer, line, &ids, &count);
        if (status != ATTN_OK)
            return keep_failure(w, status);
        int ok = 1;
        for (int64_t i = 0; ok && i < count; i++)
            ok = put_token(f, w, ids[i]);
        free(ids);
        if (!ok || !put_token(f, w, ATTN_EOS_ID))
            return 0;
    }
    if (w->filled > 0 && fwrite(w->chunk, 2, w->filled, f) != w->filled)
        return 0;
    return fseek(f, 0, SEEK_SET) == 0 && write_llmc_header(f, w->count, &w->fingerprint);
}

attn_status attn_token_file_write_text(const attn_tokenizer *tokenizer, attn_line_source next_line,
                                       void *context, const char *path, int64_t *tokens)
{
    static const char fn[] = "attn_token_file_write_text";
    if (tokens != NULL)
        *tokens = 0;
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_NOT_NULL(next_line);
    ATTN_CHECK_NOT_NULL(path);
    const int64_t vocab = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    ATTN_CHECK_ARG(vocab <= (int64_t)UINT16_MAX + 1,
                   "%s: the tokenizer has %lld ids, but an llm.c token file holds ids below "
                   "65536 (uint16)",
                   fn, (long long)vocab);
    text_writer *w = calloc(1, sizeof *w);
    if (w == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    w->tokenizer = tokenizer;
    attn_status status = attn_tokenizer_fingerprint(tokenizer, &w->fingerprint);
    if (status != ATTN_OK) {
        free(w);
        return status;
    }
    w->next_line = next_line;
    w->context = context;
    status = attn_file_write_atomically(fn, path, write_text_body, w);
    if (status != ATTN_OK && w->status != ATTN_OK)
        status = attn_fail(w->status, "%s", w->message);
    if (status == ATTN_OK && tokens != NULL)
        *tokens = w->count;
    free(w);
    return status;
}
