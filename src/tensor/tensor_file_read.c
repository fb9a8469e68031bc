/* Reading safetensors files: the whole file is read into memory and validated before the
 * caller sees anything.
 *
 * The file is read rather than mapped: a mapping turns another program truncating the file
 * into SIGBUS in ours, and attn's checkpoints are small enough that one copy costs little. */
#define _POSIX_C_SOURCE 200809L

#include "tensor/tensor_file_internal.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct tensor_entry {
    const char *name; /* owned by the parsed header */
    attn_dtype dtype;
    int ndim;
    int64_t *shape; /* into attn_tensor_file.dims */
    int64_t numel;
    uint64_t begin, end;
    size_t header_index;
} tensor_entry;

struct attn_tensor_file {
    char *path;
    unsigned char *bytes; /* the whole file */
    size_t size;
    const unsigned char *data; /* the data area, after the header */
    uint64_t data_size;
    cJSON *header;
    tensor_entry *tensors; /* header order */
    tensor_entry **by_name;
    size_t n_tensors;
    int64_t *dims;
    const cJSON **metadata; /* header order; ->string is the key, ->valuestring the value */
    const cJSON **metadata_by_key;
    size_t n_metadata;
};

/* ---- small helpers -------------------------------------------------------------------- */

/* Writes "[2, 3]" into buf, ending in "...]" if it does not fit. */
static const char *format_shape(const int64_t *shape, int ndim, char *buf, size_t size)
{
    size_t used = (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < ndim && used < size; d++)
        used +=
            (size_t)snprintf(buf + used, size - used, "%s%lld", d ? ", " : "", (long long)shape[d]);
    if (used + 2 <= size)
        snprintf(buf + used, size - used, "]");
    else if (size >= 5)
        memcpy(buf + size - 5, "...]", 5);
    return buf;
}

/* A JSON number that is an integer in [0, 2^53]. */
static int json_to_u64(const cJSON *item, uint64_t *out)
{
    if (!cJSON_IsNumber(item))
        return 0;
    double d = item->valuedouble;
    if (!(d >= 0.0 && d <= (double)ATTN_SAFETENSORS_MAX_INTEGER))
        return 0;
    *out = (uint64_t)d;
    return (double)*out == d;
}

static int compare_entry_names(const void *a, const void *b)
{
    return strcmp((*(const tensor_entry *const *)a)->name, (*(const tensor_entry *const *)b)->name);
}

static int compare_name_to_entry(const void *key, const void *element)
{
    return strcmp(key, (*(const tensor_entry *const *)element)->name);
}

static int compare_metadata_keys(const void *a, const void *b)
{
    return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

static int compare_key_to_metadata(const void *key, const void *element)
{
    return strcmp(key, (*(const cJSON *const *)element)->string);
}

/* By position in the data area; ties (empty tensors) keep the header's order. */
static int compare_offsets(const void *a, const void *b)
{
    const tensor_entry *x = *(const tensor_entry *const *)a, *y = *(const tensor_entry *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return x->header_index < y->header_index ? -1 : x->header_index > y->header_index;
}

/* ---- reading the bytes ---------------------------------------------------------------- */

static attn_status io_failure(const char *path, const char *what, int error)
{
    char reason[128];
    if (strerror_r(error, reason, sizeof reason) != 0)
        snprintf(reason, sizeof reason, "error %d", error);
    return attn_fail(ATTN_ERR_IO, "attn_tensor_file_open: %s '%s': %s", what, path, reason);
}

static attn_status read_whole_file(attn_tensor_file *file)
{
    int fd = open(file->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return io_failure(file->path, "cannot open", errno);
    attn_status status = ATTN_OK;
    struct stat info;
    if (fstat(fd, &info) != 0) {
        status = io_failure(file->path, "cannot inspect", errno);
    } else if (!S_ISREG(info.st_mode)) {
        status =
            attn_fail(ATTN_ERR_IO, "attn_tensor_file_open: '%s' is not a regular file", file->path);
    } else if ((uint64_t)info.st_size > (uint64_t)SIZE_MAX / 2) {
        status =
            attn_fail(ATTN_ERR_IO, "attn_tensor_file_open: '%s' is too large to read", file->path);
    } else {
        file->size = (size_t)info.st_size;
        /* 64-byte aligned, so each tensor is as aligned in memory as its offset in the file. */
        file->bytes = attn_aligned_alloc(file->size > 0 ? file->size : 1);
        if (file->bytes == NULL)
            status = attn_fail(ATTN_ERR_OUT_OF_MEMORY,
                               "attn_tensor_file_open: out of memory reading '%s' (%zu bytes)",
                               file->path, file->size);
    }
    for (size_t got = 0; status == ATTN_OK && got < file->size;) {
        ssize_t n = read(fd, file->bytes + got, file->size - got);
        if (n < 0 && errno != EINTR)
            status = io_failure(file->path, "cannot read", errno);
        else if (n == 0)
            status = attn_fail(ATTN_ERR_IO,
                               "attn_tensor_file_open: '%s' shrank from %zu to %zu bytes while "
                               "being read",
                               file->path, file->size, got);
        else if (n > 0)
            got += (size_t)n;
    }
    close(fd);
    return status;
}

/* ---- parsing the header --------------------------------------------------------------- */

static attn_status parse_metadata(attn_tensor_file *file, const cJSON *map)
{
    if (map == NULL || cJSON_IsNull(map))
        return ATTN_OK; /* the reference implementation reads null as "no metadata" */
    if (!cJSON_IsObject(map))
        return attn_fail(ATTN_ERR_FORMAT, "%s: __metadata__ is not a JSON object", file->path);
    size_t count = 0;
    for (const cJSON *item = map->child; item != NULL; item = item->next) {
        if (!cJSON_IsString(item))
            return attn_fail(ATTN_ERR_FORMAT, "%s: metadata '%s' is not a string", file->path,
                             item->string);
        count++;
    }
    file->metadata = malloc((count > 0 ? count : 1) * sizeof *file->metadata);
    file->metadata_by_key = malloc((count > 0 ? count : 1) * sizeof *file->metadata_by_key);
    if (file->metadata == NULL || file->metadata_by_key == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tensor_file_open: out of memory");
    for (const cJSON *item = map->child; item != NULL; item = item->next)
        file->metadata[file->n_metadata++] = item;
    memcpy(file->metadata_by_key, file->metadata, count * sizeof *file->metadata);
    qsort(file->metadata_by_key, count, sizeof *file->metadata_by_key, compare_metadata_keys);
    for (size_t i = 1; i < count; i++)
        if (strcmp(file->metadata_by_key[i - 1]->string, file->metadata_by_key[i]->string) == 0)
            return attn_fail(ATTN_ERR_FORMAT, "%s: metadata key '%s' appears twice", file->path,
                             file->metadata_by_key[i]->string);
    return ATTN_OK;
}

/* The entry's value for key, which must appear exactly once. */
static attn_status entry_field(const attn_tensor_file *file, const cJSON *entry, const char *key,
                               const cJSON **out)
{
    *out = NULL;
    for (const cJSON *item = entry->child; item != NULL; item = item->next) {
        if (strcmp(item->string, key) != 0)
            continue;
        if (*out != NULL)
            return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' has two \"%s\" keys", file->path,
                             entry->string, key);
        *out = item;
    }
    if (*out == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' has no \"%s\"", file->path,
                         entry->string, key);
    return ATTN_OK;
}

static attn_status parse_tensor(attn_tensor_file *file, const cJSON *entry, tensor_entry *t,
                                int64_t *dims)
{
    const char *path = file->path, *name = entry->string;
    t->name = name;
    t->shape = dims;
    if (!cJSON_IsObject(entry))
        return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' is not a JSON object", path, name);
    const cJSON *dtype, *shape, *offsets;
    ATTN_TRY(entry_field(file, entry, "dtype", &dtype));
    ATTN_TRY(entry_field(file, entry, "shape", &shape));
    ATTN_TRY(entry_field(file, entry, "data_offsets", &offsets));

    if (!cJSON_IsString(dtype))
        return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' dtype is not a string", path, name);
    t->dtype = attn_dtype_from_name(dtype->valuestring);
    if (t->dtype == ATTN_DTYPE_COUNT)
        return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' has unknown dtype '%s'", path, name,
                         dtype->valuestring);
    uint64_t element_size = attn_dtype_size(t->dtype);

    if (!cJSON_IsArray(shape))
        return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' shape is not a list", path, name);
    uint64_t numel = 1;
    int too_large = 0;
    for (const cJSON *item = shape->child; item != NULL; item = item->next) {
        uint64_t size;
        if (!json_to_u64(item, &size))
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: tensor '%s' shape[%d] is not a non-negative integer", path, name,
                             t->ndim);
        dims[t->ndim++] = (int64_t)size;
        if (size == 0)
            numel = 0, too_large = 0;
        else if (numel > 0 && !too_large && numel > ATTN_SAFETENSORS_MAX_INTEGER / size)
            too_large = 1;
        else if (!too_large)
            numel *= size;
    }
    char shape_text[96];
    if (too_large || numel > ATTN_SAFETENSORS_MAX_INTEGER / element_size)
        return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' shape %s is too large", path, name,
                         format_shape(t->shape, t->ndim, shape_text, sizeof shape_text));
    t->numel = (int64_t)numel;

    if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 ||
        !json_to_u64(offsets->child, &t->begin) || !json_to_u64(offsets->child->next, &t->end))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: tensor '%s' data_offsets is not a list of two non-negative "
                         "integers",
                         path, name);
    if (t->begin > t->end)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: tensor '%s' data_offsets [%llu, %llu] end before they begin", path,
                         name, (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > file->data_size)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: tensor '%s' data_offsets [%llu, %llu] run past the end of the "
                         "%llu-byte data area: the file is truncated",
                         path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         (unsigned long long)file->data_size);
    if (t->end - t->begin != numel * element_size)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: tensor '%s' data_offsets [%llu, %llu] do not match %s %s (%llu "
                         "bytes)",
                         path, name, (unsigned long long)t->begin, (unsigned long long)t->end,
                         attn_dtype_name(t->dtype),
                         format_shape(t->shape, t->ndim, shape_text, sizeof shape_text),
                         (unsigned long long)(numel * element_size));
    return ATTN_OK;
}

/* The tensors must tile the data area: sorted by offset, each starts where the previous one
 * ends, the first at 0 and the last at the end. */
static attn_status check_tiling(const attn_tensor_file *file)
{
    tensor_entry **by_offset =
        malloc((file->n_tensors > 0 ? file->n_tensors : 1) * sizeof *by_offset);
    if (by_offset == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tensor_file_open: out of memory");
    for (size_t i = 0; i < file->n_tensors; i++)
        by_offset[i] = &file->tensors[i];
    qsort(by_offset, file->n_tensors, sizeof *by_offset, compare_offsets);
    attn_status status = ATTN_OK;
    uint64_t covered = 0;
    for (size_t i = 0; i < file->n_tensors && status == ATTN_OK; i++) {
        const tensor_entry *t = by_offset[i];
        if (t->begin < covered)
            status = attn_fail(ATTN_ERR_FORMAT,
                               "%s: tensors '%s' data_offsets [%llu, %llu] and '%s' "
                               "data_offsets [%llu, %llu] overlap",
                               file->path, by_offset[i - 1]->name,
                               (unsigned long long)by_offset[i - 1]->begin,
                               (unsigned long long)by_offset[i - 1]->end, t->name,
                               (unsigned long long)t->begin, (unsigned long long)t->end);
        else if (t->begin > covered)
            status = attn_fail(ATTN_ERR_FORMAT,
                               "%s: bytes [%llu, %llu) of the data area, before tensor '%s', "
                               "belong to no tensor",
                               file->path, (unsigned long long)covered,
                               (unsigned long long)t->begin, t->name);
        covered = t->end;
    }
    if (status == ATTN_OK && covered != file->data_size)
        status = attn_fail(ATTN_ERR_FORMAT,
                           "%s: %llu bytes of extra data after the last tensor (the tensors "
                           "end at byte %llu of the %llu-byte data area)",
                           file->path, (unsigned long long)(file->data_size - covered),
                           (unsigned long long)covered, (unsigned long long)file->data_size);
    free(by_offset);
    return status;
}

static attn_status parse_tensors(attn_tensor_file *file)
{
    const cJSON *root = file->header;
    size_t count = 0, total_dims = 0;
    const cJSON *metadata = NULL;
    for (const cJSON *item = root->child; item != NULL; item = item->next) {
        if (strcmp(item->string, "__metadata__") == 0) {
            if (metadata != NULL)
                return attn_fail(ATTN_ERR_FORMAT, "%s: __metadata__ appears twice", file->path);
            metadata = item;
            continue;
        }
        count++;
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
        total_dims += cJSON_IsArray(shape) ? (size_t)cJSON_GetArraySize(shape) : 0;
    }
    ATTN_TRY(parse_metadata(file, metadata));

    file->tensors = calloc(count > 0 ? count : 1, sizeof *file->tensors);
    file->by_name = malloc((count > 0 ? count : 1) * sizeof *file->by_name);
    file->dims = malloc((total_dims > 0 ? total_dims : 1) * sizeof *file->dims);
    if (file->tensors == NULL || file->by_name == NULL || file->dims == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tensor_file_open: out of memory");
    int64_t *dims = file->dims;
    for (const cJSON *item = root->child; item != NULL; item = item->next) {
        if (item == metadata)
            continue;
        tensor_entry *t = &file->tensors[file->n_tensors];
        t->header_index = file->n_tensors++;
        ATTN_TRY(parse_tensor(file, item, t, dims));
        dims += t->ndim;
        file->by_name[t->header_index] = t;
    }
    qsort(file->by_name, count, sizeof *file->by_name, compare_entry_names);
    for (size_t i = 1; i < count; i++)
        if (strcmp(file->by_name[i - 1]->name, file->by_name[i]->name) == 0)
            return attn_fail(ATTN_ERR_FORMAT, "%s: tensor name '%s' appears twice", file->path,
                             file->by_name[i]->name);
    return check_tiling(file);
}

static attn_status parse_file(attn_tensor_file *file)
{
    const char *path = file->path;
    if (file->size < 8)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s is not a safetensors model file: it is %zu bytes, shorter than the "
                         "8-byte header length",
                         path, file->size);
    uint64_t header_length = 0;
    for (int b = 7; b >= 0; b--)
        header_length = header_length << 8 | file->bytes[b];
    /* A text file or another format read as a length gives an absurd number: the file is
     * something else, which is what a user needs to hear, not the number. */
    const int json_follows = file->size > 8 && file->bytes[8] == '{';
    if (header_length > ATTN_SAFETENSORS_MAX_HEADER ||
        (header_length > file->size - 8 && !json_follows))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s is not a safetensors model file: its first 8 bytes are not the "
                         "length of a JSON header that follows them",
                         path);
    if (header_length > file->size - 8)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: header length %llu runs past the end of the file (%zu bytes): the "
                         "file is truncated",
                         path, (unsigned long long)header_length, file->size);
    const char *text = (const char *)file->bytes + 8;
    size_t length = (size_t)header_length;
    if (length == 0 || text[0] != '{')
        return attn_fail(ATTN_ERR_FORMAT, "%s: the header does not start with '{'", path);
    size_t bad = attn_utf8_error_offset(text, length);
    if (bad < length)
        return attn_fail(ATTN_ERR_FORMAT, "%s: the header has invalid UTF-8 or a NUL at byte %zu",
                         path, bad);
    const char *end = NULL;
    file->header = cJSON_ParseWithLengthOpts(text, length, &end, 0);
    if (file->header == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: the header is not valid JSON (near byte %td)", path,
                         end != NULL ? end - text : (ptrdiff_t)0);
    for (const char *p = end; p < text + length; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: the header has text after its JSON object (byte %td)", path,
                             p - text);
    if (!cJSON_IsObject(file->header))
        return attn_fail(ATTN_ERR_FORMAT, "%s: the header is not a JSON object", path);
    file->data = file->bytes + 8 + length;
    file->data_size = file->size - 8 - length;
    return parse_tensors(file);
}

/* ---- the public functions ------------------------------------------------------------- */

attn_status attn_tensor_file_open(const char *path, attn_tensor_file **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    attn_tensor_file *file = calloc(1, sizeof *file);
    if (file == NULL || (file->path = strdup(path)) == NULL) {
        free(file);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tensor_file_open: out of memory");
    }
    attn_status status = read_whole_file(file);
    if (status == ATTN_OK)
        status = parse_file(file);
    if (status != ATTN_OK) {
        attn_tensor_file_close(file);
        return status;
    }
    *out = file;
    return ATTN_OK;
}

void attn_tensor_file_close(attn_tensor_file *file)
{
    if (file == NULL)
        return;
    cJSON_Delete(file->header);
    free(file->tensors);
    free(file->by_name);
    free(file->dims);
    free(file->metadata);
    free(file->metadata_by_key);
    attn_aligned_free(file->bytes);
    free(file->path);
    free(file);
}

size_t attn_tensor_file_count(const attn_tensor_file *file)
{
    return file != NULL ? file->n_tensors : 0;
}

static void describe(const attn_tensor_file *file, const tensor_entry *t, attn_tensor_info *out)
{
    out->name = t->name;
    out->dtype = t->dtype;
    out->ndim = t->ndim;
    out->shape = t->shape;
    out->numel = t->numel;
    out->nbytes = (size_t)(t->end - t->begin);
    out->data = file->data + t->begin;
}

attn_status attn_tensor_file_get(const attn_tensor_file *file, size_t index, attn_tensor_info *out)
{
    ATTN_CHECK_NOT_NULL(file);
    ATTN_CHECK_NOT_NULL(out);
    ATTN_CHECK_ARG(index < file->n_tensors,
                   "attn_tensor_file_get: index %zu is out of range: '%s' has %zu tensors", index,
                   file->path, file->n_tensors);
    describe(file, &file->tensors[index], out);
    return ATTN_OK;
}

static const tensor_entry *lookup(const attn_tensor_file *file, const char *name)
{
    tensor_entry *const *found =
        bsearch(name, file->by_name, file->n_tensors, sizeof *file->by_name, compare_name_to_entry);
    return found != NULL ? *found : NULL;
}

static attn_status find_entry(const attn_tensor_file *file, const char *name,
                              const tensor_entry **out)
{
    *out = lookup(file, name);
    if (*out == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: no tensor named '%s'", file->path, name);
    return ATTN_OK;
}

attn_status attn_tensor_file_find(const attn_tensor_file *file, const char *name,
                                  attn_tensor_info *out)
{
    ATTN_CHECK_NOT_NULL(file);
    ATTN_CHECK_NOT_NULL(name);
    ATTN_CHECK_NOT_NULL(out);
    const tensor_entry *t;
    ATTN_TRY(find_entry(file, name, &t));
    describe(file, t, out);
    return ATTN_OK;
}

int attn_tensor_file_contains(const attn_tensor_file *file, const char *name)
{
    return file != NULL && name != NULL && lookup(file, name) != NULL;
}

size_t attn_tensor_file_metadata_count(const attn_tensor_file *file)
{
    return file != NULL ? file->n_metadata : 0;
}

attn_status attn_tensor_file_metadata_at(const attn_tensor_file *file, size_t index,
                                         const char **key, const char **value)
{
    ATTN_CHECK_NOT_NULL(file);
    ATTN_CHECK_NOT_NULL(key);
    ATTN_CHECK_NOT_NULL(value);
    ATTN_CHECK_ARG(index < file->n_metadata,
                   "attn_tensor_file_metadata_at: index %zu is out of range: '%s' has %zu "
                   "metadata entries",
                   index, file->path, file->n_metadata);
    *key = file->metadata[index]->string;
    *value = file->metadata[index]->valuestring;
    return ATTN_OK;
}

attn_status attn_tensor_file_metadata(const attn_tensor_file *file, const char *key,
                                      const char **value)
{
    ATTN_CHECK_NOT_NULL(file);
    ATTN_CHECK_NOT_NULL(key);
    ATTN_CHECK_NOT_NULL(value);
    /* A file without __metadata__ has no key array at all, and bsearch must not see NULL. */
    const cJSON *const *found =
        file->n_metadata == 0 ? NULL
                              : bsearch(key, file->metadata_by_key, file->n_metadata,
                                        sizeof *file->metadata_by_key, compare_key_to_metadata);
    if (found == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: no metadata key '%s'", file->path, key);
    *value = (*found)->valuestring;
    return ATTN_OK;
}

/* ---- copying out, with conversion to float32 ------------------------------------------ */

static float float_from_bits(uint32_t bits)
{
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* IEEE half precision: 1 sign, 5 exponent (bias 15) and 10 mantissa bits. Every half is
 * exactly a float; NaN payloads are kept. */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1Fu;
    uint32_t mantissa = h & 0x3FFu;
    if (exponent == 0x1F)
        return float_from_bits(sign | 0x7F800000u | mantissa << 13);
    if (exponent == 0) {
        /* zero or subnormal: mantissa * 2^-24, exact in float */
        float magnitude = (float)mantissa * 0x1p-24f;
        return sign ? -magnitude : magnitude;
    }
    return float_from_bits(sign | (exponent + 127 - 15) << 23 | mantissa << 13);
}

/* bfloat16 is the top half of a float32. */
static float bfloat16_to_float(uint16_t h)
{
    return float_from_bits((uint32_t)h << 16);
}

static attn_status check_request(const attn_tensor_file *file, const char *name, int ndim,
                                 const int64_t *shape, const void *out, const char *fn)
{
    ATTN_CHECK_ARG(file != NULL, "%s: file must not be NULL", fn);
    ATTN_CHECK_ARG(name != NULL, "%s: name must not be NULL", fn);
    ATTN_CHECK_ARG(out != NULL, "%s: out must not be NULL", fn);
    ATTN_CHECK_ARG(ndim >= 0, "%s: ndim is %d, must be >= 0", fn, ndim);
    ATTN_CHECK_ARG(shape != NULL || ndim == 0, "%s: shape must not be NULL when ndim is %d", fn,
                   ndim);
    return ATTN_OK;
}

static attn_status check_shape(const attn_tensor_file *file, const tensor_entry *t, int ndim,
                               const int64_t *shape)
{
    int same = t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++)
        same = t->shape[d] == shape[d];
    if (same)
        return ATTN_OK;
    char found[96], expected[96];
    return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' has shape %s, expected %s", file->path,
                     t->name, format_shape(t->shape, t->ndim, found, sizeof found),
                     format_shape(shape, ndim, expected, sizeof expected));
}

const char *attn_tensor_file_path(const attn_tensor_file *file)
{
    return file != NULL ? file->path : "";
}

attn_status attn_tensor_file_read_f32(const attn_tensor_file *file, const char *name, int ndim,
                                      const int64_t *shape, float *out)
{
    ATTN_TRY(check_request(file, name, ndim, shape, out, "attn_tensor_file_read_f32"));
    const tensor_entry *t;
    ATTN_TRY(find_entry(file, name, &t));
    ATTN_TRY(check_shape(file, t, ndim, shape));
    const unsigned char *src = file->data + t->begin;
    size_t n = (size_t)t->numel;
    switch (t->dtype) {
    case ATTN_DTYPE_F32:
        memcpy(out, src, n * sizeof *out);
        return ATTN_OK;
    case ATTN_DTYPE_F16:
    case ATTN_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, src + 2 * i, sizeof h);
            out[i] = t->dtype == ATTN_DTYPE_F16 ? half_to_float(h) : bfloat16_to_float(h);
        }
        return ATTN_OK;
    case ATTN_DTYPE_F64:
        for (size_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, src + 8 * i, sizeof d);
            if (isfinite(d) && fabs(d) > FLT_MAX)
                return attn_fail(ATTN_ERR_FORMAT,
                                 "%s: tensor '%s' element %zu = %g is outside float32's range",
                                 file->path, t->name, i, d);
            out[i] = (float)d;
        }
        return ATTN_OK;
    default:
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: tensor '%s' is %s; only F32, F16, BF16 and F64 load as float32",
                         file->path, t->name, attn_dtype_name(t->dtype));
    }
}

attn_status attn_tensor_file_read_raw(const attn_tensor_file *file, const char *name,
                                      attn_dtype dtype, int ndim, const int64_t *shape, void *out)
{
    ATTN_TRY(check_request(file, name, ndim, shape, out, "attn_tensor_file_read_raw"));
    const tensor_entry *t;
    ATTN_TRY(find_entry(file, name, &t));
    if (t->dtype != dtype)
        return attn_fail(ATTN_ERR_FORMAT, "%s: tensor '%s' is %s, expected %s", file->path, t->name,
                         attn_dtype_name(t->dtype), attn_dtype_name(dtype));
    ATTN_TRY(check_shape(file, t, ndim, shape));
    memcpy(out, file->data + t->begin, (size_t)(t->end - t->begin));
    return ATTN_OK;
}
