/* UTF-8 validation, growable arrays and the string table the data layer builds on. */
#include "data/data_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ------------------------------------------------------------------------------ */

size_t utf8_sequence_length(const unsigned char *text, size_t size)
{
    if (size == 0)
        return 0;
    unsigned char c = text[0];
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    size_t length;
    uint32_t min_code, code;
    if ((c & 0xE0) == 0xC0) {
        length = 2, min_code = 0x80, code = c & 0x1Fu;
    } else if ((c & 0xF0) == 0xE0) {
        length = 3, min_code = 0x800, code = c & 0x0Fu;
    } else if ((c & 0xF8) == 0xF0) {
        length = 4, min_code = 0x10000, code = c & 0x07u;
    } else {
        return 0; /* a continuation byte, or 0xF8..0xFF */
    }
    if (size < length)
        return 0;
    for (size_t i = 1; i < length; i++) {
        if ((text[i] & 0xC0) != 0x80)
            return 0;
        code = (code << 6) | (text[i] & 0x3Fu);
    }
    if (code < min_code || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF))
        return 0;
    return length;
}

size_t utf8_first_invalid(const char *text, size_t size)
{
    const unsigned char *bytes = (const unsigned char *)text;
    size_t i = 0;
    while (i < size) {
        if (bytes[i] >= 0x01 && bytes[i] < 0x80) {
            i++;
            continue;
        }
        size_t length = utf8_sequence_length(bytes + i, size - i);
        if (length == 0)
            return i;
        i += length;
    }
    return size;
}

int attn_utf8_valid(const char *text, size_t size)
{
    if (text == NULL)
        return size == 0;
    return utf8_first_invalid(text, size) == size;
}

/* ---- growable arrays -------------------------------------------------------------------- */

attn_status grow_array(void **array, int64_t *capacity, int64_t needed, size_t element_size)
{
    if (needed <= *capacity)
        return ATTN_OK;
    int64_t new_capacity = *capacity < 16 ? 16 : *capacity;
    while (new_capacity < needed) {
        if (new_capacity > INT64_MAX / 2)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "array of %lld elements is too large",
                             (long long)needed);
        new_capacity *= 2;
    }
    size_t bytes;
    if (!attn_mul_size((size_t)new_capacity, element_size, &bytes))
        return ATTN_ERR_OUT_OF_MEMORY;
    void *grown = realloc(*array, bytes);
    if (grown == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory growing an array to %zu bytes",
                         bytes);
    *array = grown;
    *capacity = new_capacity;
    return ATTN_OK;
}

attn_status id_buffer_reserve(id_buffer *buf, int64_t capacity)
{
    return grow_array((void **)&buf->data, &buf->capacity, capacity, sizeof *buf->data);
}

attn_status id_buffer_push(id_buffer *buf, int32_t id)
{
    if (buf->size == buf->capacity)
        ATTN_TRY(id_buffer_reserve(buf, buf->size + 1));
    buf->data[buf->size++] = id;
    return ATTN_OK;
}

void id_buffer_free(id_buffer *buf)
{
    free(buf->data);
    memset(buf, 0, sizeof *buf);
}

attn_status byte_buffer_append(byte_buffer *buf, const char *bytes, size_t size)
{
    if (size > SIZE_MAX / 2 - buf->size)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "text of %zu bytes is too large", size);
    size_t needed = buf->size + size + 1;
    if (needed > buf->capacity) {
        size_t capacity = buf->capacity < 64 ? 64 : buf->capacity;
        while (capacity < needed)
            capacity *= 2;
        char *grown = realloc(buf->data, capacity);
        if (grown == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory growing text to %zu bytes",
                             capacity);
        buf->data = grown;
        buf->capacity = capacity;
    }
    if (size > 0)
        memcpy(buf->data + buf->size, bytes, size);
    buf->size += size;
    buf->data[buf->size] = '\0';
    return ATTN_OK;
}

void byte_buffer_free(byte_buffer *buf)
{
    free(buf->data);
    memset(buf, 0, sizeof *buf);
}

/* ---- string table ----------------------------------------------------------------------- */

/* FNV-1a, then a final mix so that the low bits used for slots depend on every byte. */
static uint64_t strtab_hash(const char *bytes, size_t size)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < size; i++) {
        h ^= (unsigned char)bytes[i];
        h *= 0x100000001b3ULL;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    return h;
}

static int32_t probe(const strtab *table, const char *bytes, size_t size, uint64_t hash,
                     size_t *slot_out)
{
    size_t mask = table->slot_count - 1;
    size_t slot = (size_t)hash & mask;
    for (;;) {
        int32_t entry = table->slots[slot];
        if (entry == 0) {
            *slot_out = slot;
            return -1;
        }
        int32_t id = entry - 1;
        if (table->hash[id] == hash && table->length[id] == size &&
            memcmp(table->pool + table->offset[id], bytes, size) == 0) {
            *slot_out = slot;
            return id;
        }
        slot = (slot + 1) & mask;
    }
}

int32_t strtab_find(const strtab *table, const char *bytes, size_t size)
{
    if (table->count == 0)
        return -1;
    size_t slot;
    return probe(table, bytes, size, strtab_hash(bytes, size), &slot);
}

static attn_status rehash(strtab *table, size_t slot_count)
{
    int32_t *slots = calloc(slot_count, sizeof *slots);
    if (slots == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for a table of %zu slots",
                         slot_count);
    size_t mask = slot_count - 1;
    for (int32_t id = 0; id < table->count; id++) {
        size_t slot = (size_t)table->hash[id] & mask;
        while (slots[slot] != 0)
            slot = (slot + 1) & mask;
        slots[slot] = id + 1;
    }
    free(table->slots);
    table->slots = slots;
    table->slot_count = slot_count;
    return ATTN_OK;
}

attn_status strtab_intern(strtab *table, const char *bytes, size_t size, int32_t *id, int *added)
{
    if (added != NULL)
        *added = 0;
    uint64_t hash = strtab_hash(bytes, size);
    size_t slot = 0;
    if (table->count > 0) {
        int32_t found = probe(table, bytes, size, hash, &slot);
        if (found >= 0) {
            *id = found;
            return ATTN_OK;
        }
    }
    if (table->count == INT32_MAX - 1 || size > UINT32_MAX)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "too many or too long strings in a table");
    /* Keep the load factor at most 1/2 so probes stay short. */
    if ((size_t)table->count + 1 > table->slot_count / 2) {
        ATTN_TRY(rehash(table, table->slot_count == 0 ? 64 : table->slot_count * 2));
        probe(table, bytes, size, hash, &slot);
    }
    if (table->count == table->capacity) {
        int64_t capacity = table->capacity;
        int64_t needed = (int64_t)table->count + 1;
        int64_t c1 = capacity, c2 = capacity, c3 = capacity;
        ATTN_TRY(grow_array((void **)&table->offset, &c1, needed, sizeof *table->offset));
        ATTN_TRY(grow_array((void **)&table->length, &c2, needed, sizeof *table->length));
        ATTN_TRY(grow_array((void **)&table->hash, &c3, needed, sizeof *table->hash));
        table->capacity = (int32_t)(c1 < INT32_MAX ? c1 : INT32_MAX);
    }
    size_t needed_pool = table->pool_size + size + 1;
    if (needed_pool > table->pool_capacity) {
        size_t capacity = table->pool_capacity < 256 ? 256 : table->pool_capacity;
        while (capacity < needed_pool)
            capacity *= 2;
        char *pool = realloc(table->pool, capacity);
        if (pool == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory for %zu bytes of strings",
                             capacity);
        table->pool = pool;
        table->pool_capacity = capacity;
    }
    int32_t new_id = table->count++;
    table->offset[new_id] = table->pool_size;
    table->length[new_id] = (uint32_t)size;
    table->hash[new_id] = hash;
    if (size > 0)
        memcpy(table->pool + table->pool_size, bytes, size);
    table->pool[table->pool_size + size] = '\0';
    table->pool_size = needed_pool;
    table->slots[slot] = new_id + 1;
    *id = new_id;
    if (added != NULL)
        *added = 1;
    return ATTN_OK;
}

void strtab_free(strtab *table)
{
    free(table->pool);
    free(table->offset);
    free(table->length);
    free(table->hash);
    free(table->slots);
    memset(table, 0, sizeof *table);
}
