/* safetensors files: round trips, the exact byte layout, validation of malformed files, and
 * conversion to float32 on load. Failure of the write path itself (full disks, read-only
 * folders, crashes) is tested in test_tensor_file_atomic.c. */
#define _GNU_SOURCE

#include "tensor_file_support.h"

#include <math.h>
#include <stdint.h>

/* ---- round trip --------------------------------------------------------------------- */

static void test_round_trip_keeps_tensors_and_metadata(void)
{
    float weight[3 * 5], bias[5], scalar = -7.25f;
    test_fill_uniform(weight, 15, -2.0f, 2.0f, 1);
    test_fill_uniform(bias, 5, -1.0f, 1.0f, 2);
    int64_t step = 1234567890123LL;
    uint8_t mask[7] = {1, 0, 1, 1, 0, 0, 1};
    int32_t counts[6] = {-3, 0, 7, 2147483647, -2147483647 - 1, 42};
    attn_named_tensor tensors[] = {
        {"encoder.weight", ATTN_DTYPE_F32, 2, {3, 5}, weight},
        {"encoder.bias", ATTN_DTYPE_F32, 1, {5}, bias},
        {"optimizer.step", ATTN_DTYPE_I64, 0, {0}, &step},
        {"mask", ATTN_DTYPE_U8, 1, {7}, mask},
        {"counts", ATTN_DTYPE_I32, 2, {2, 3}, counts},
        {"empty", ATTN_DTYPE_F32, 3, {2, 0, 4}, NULL},
        {"scale \"quoted\" \xc3\xa9", ATTN_DTYPE_F32, 0, {0}, &scalar},
    };
    const size_t n = sizeof tensors / sizeof tensors[0];
    attn_metadata_entry metadata[] = {
        {"config", "{\"d_model\": 64, \"layout\": \"interleaved\",\n \"path\": \"a\\\\b\"}"},
        {"vocabulary", "h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c\ttab"},
        {"empty", ""},
    };
    const char *path = test_scratch_path("round_trip.safetensors");
    CHECK_OK(attn_tensor_file_write(path, tensors, n, metadata, 3));

    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    if (file == NULL)
        return;
    CHECK(attn_tensor_file_count(file) == n, "count %zu", attn_tensor_file_count(file));
    for (size_t i = 0; i < n && i < attn_tensor_file_count(file); i++) {
        attn_tensor_info info;
        CHECK_OK(attn_tensor_file_get(file, i, &info));
        const attn_named_tensor *t = &tensors[i];
        CHECK(strcmp(info.name, t->name) == 0, "tensor %zu is '%s', given '%s'", i, info.name,
              t->name);
        CHECK(info.dtype == t->dtype && info.ndim == t->ndim, "'%s' dtype and rank", t->name);
        int64_t numel = 1;
        int same_shape = info.ndim == t->ndim;
        for (int d = 0; same_shape && d < t->ndim; d++) {
            same_shape = info.shape[d] == t->shape[d];
            numel *= t->shape[d];
        }
        CHECK(same_shape, "'%s' shape", t->name);
        CHECK(info.numel == numel, "'%s' numel %lld", t->name, (long long)info.numel);
        CHECK(info.nbytes == (size_t)numel * attn_dtype_size(t->dtype), "'%s' nbytes", t->name);
        CHECK(info.nbytes == 0 || memcmp(info.data, t->data, info.nbytes) == 0,
              "'%s' bytes survive", t->name);
        CHECK((uintptr_t)info.data % attn_dtype_size(t->dtype) == 0,
              "'%s' is aligned to its element size in memory", t->name);

        attn_tensor_info found;
        CHECK_OK(attn_tensor_file_find(file, t->name, &found));
        CHECK(found.data == info.data && found.name == info.name, "find '%s'", t->name);
        CHECK(attn_tensor_file_contains(file, t->name), "contains '%s'", t->name);
    }
    CHECK(!attn_tensor_file_contains(file, "encoder"), "no prefix match");
    attn_tensor_info missing;
    CHECK_FAILS(attn_tensor_file_find(file, "decoder.weight", &missing), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "decoder.weight") && strstr(attn_last_error(), path),
          "message names the tensor and the file: %s", attn_last_error());

    CHECK(attn_tensor_file_metadata_count(file) == 3, "metadata count");
    for (size_t i = 0; i < 3 && i < attn_tensor_file_metadata_count(file); i++) {
        const char *key = NULL, *value = NULL;
        CHECK_OK(attn_tensor_file_metadata_at(file, i, &key, &value));
        CHECK(key && strcmp(key, metadata[i].key) == 0, "metadata %zu key in order", i);
        CHECK(value && strcmp(value, metadata[i].value) == 0, "metadata %zu value", i);
        const char *looked_up = NULL;
        CHECK_OK(attn_tensor_file_metadata(file, metadata[i].key, &looked_up));
        CHECK(looked_up && strcmp(looked_up, metadata[i].value) == 0, "metadata '%s'",
              metadata[i].key);
    }
    const char *value = NULL;
    CHECK_FAILS(attn_tensor_file_metadata(file, "tokenizer", &value), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "tokenizer") != NULL, "names the key: %s", attn_last_error());

    float weight_back[15];
    int64_t shape[2] = {3, 5};
    CHECK_OK(attn_tensor_file_read_f32(file, "encoder.weight", 2, shape, weight_back));
    CHECK(memcmp(weight_back, weight, sizeof weight) == 0, "read_f32 gives the same bits");
    int64_t step_back = 0;
    CHECK_OK(
        attn_tensor_file_read_raw(file, "optimizer.step", ATTN_DTYPE_I64, 0, NULL, &step_back));
    CHECK(step_back == step, "step %lld", (long long)step_back);
    int64_t empty_shape[3] = {2, 0, 4};
    float untouched = 3.0f;
    CHECK_OK(attn_tensor_file_read_f32(file, "empty", 3, empty_shape, &untouched));
    CHECK(untouched == 3.0f, "an empty tensor copies nothing");
    attn_tensor_file_close(file);
}

static void test_writes_are_deterministic_and_replace_the_file(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
    attn_named_tensor first = {"x", ATTN_DTYPE_F32, 1, {4}, a};
    attn_named_tensor second = {"x", ATTN_DTYPE_F32, 1, {4}, b};
    const char *path_a = test_scratch_path("same_a.safetensors");
    char path_b[640];
    snprintf(path_b, sizeof path_b, "%s", test_scratch_path("same_b.safetensors"));
    CHECK_OK(attn_tensor_file_write(path_a, &first, 1, NULL, 0));
    CHECK_OK(attn_tensor_file_write(path_b, &first, 1, NULL, 0));
    size_t size_a = 0, size_b = 0;
    unsigned char *bytes_a = read_bytes(path_a, &size_a), *bytes_b = read_bytes(path_b, &size_b);
    CHECK(bytes_a && bytes_b && size_a == size_b && memcmp(bytes_a, bytes_b, size_a) == 0,
          "same inputs, same bytes");
    free(bytes_a);
    free(bytes_b);

    CHECK_OK(attn_tensor_file_write(path_a, &second, 1, NULL, 0));
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path_a, &file));
    float back[4] = {0};
    int64_t shape[1] = {4};
    CHECK_OK(attn_tensor_file_read_f32(file, "x", 1, shape, back));
    CHECK(memcmp(back, b, sizeof b) == 0, "the second write replaced the first");
    attn_tensor_file_close(file);
    CHECK(count_entries(test_scratch_folder(), "same_a.safetensors.tmp.") == 0,
          "no temporary left");
}

static void test_no_tensors_no_metadata(void)
{
    const char *path = test_scratch_path("nothing.safetensors");
    CHECK_OK(attn_tensor_file_write(path, NULL, 0, NULL, 0));
    size_t size = 0;
    unsigned char *bytes = read_bytes(path, &size);
    CHECK(bytes && size == 16 && bytes[0] == 8 && memcmp(bytes + 8, "{}      ", 8) == 0,
          "an empty file is the length 8 and '{}' padded with spaces (%zu bytes)", size);
    free(bytes);
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    CHECK(attn_tensor_file_count(file) == 0 && attn_tensor_file_metadata_count(file) == 0, "empty");
    attn_tensor_file_close(file);
}

/* Plain weight files (PyTorch's save_file without metadata) have no __metadata__ at all: a
 * key lookup must report the key as missing, not search an absent table. */
static void test_lookup_in_a_file_without_metadata(void)
{
    const char *path = test_scratch_path("weights_only.safetensors");
    static const char header[] = "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    const size_t header_len = sizeof header - 1;
    unsigned char bytes[8 + sizeof header + 4] = {0};
    for (int i = 0; i < 8; i++)
        bytes[i] = (unsigned char)(header_len >> (8 * i));
    memcpy(bytes + 8, header, header_len);
    const float one = 1.0f;
    memcpy(bytes + 8 + header_len, &one, sizeof one);
    write_bytes(path, bytes, 8 + header_len + 4);
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    CHECK(attn_tensor_file_count(file) == 1 && attn_tensor_file_metadata_count(file) == 0,
          "one tensor, no metadata");
    const char *value = "untouched";
    CHECK_FAILS(attn_tensor_file_metadata(file, "attn_config", &value), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "no metadata key 'attn_config'") != NULL,
          "the message names the missing key: %s", attn_last_error());
    CHECK(attn_tensor_file_contains(file, "w"), "the tensor is still found");
    attn_tensor_file_close(file);

    path = test_scratch_path("nothing_at_all.safetensors");
    CHECK_OK(attn_tensor_file_write(path, NULL, 0, NULL, 0));
    CHECK_OK(attn_tensor_file_open(path, &file));
    CHECK_FAILS(attn_tensor_file_metadata(file, "k", &value), ATTN_ERR_FORMAT);
    CHECK(!attn_tensor_file_contains(file, "w"), "an empty file contains nothing");
    attn_tensor_file_close(file);
}

/* ---- byte layout -------------------------------------------------------------------- */

static uint64_t little_endian_u64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int b = 7; b >= 0; b--)
        v = v << 8 | p[b];
    return v;
}

/* The header must be json padded with spaces to a multiple of 8, then exactly `data`. */
static void check_layout(const char *path, const char *json, const void *data, size_t data_size)
{
    size_t size = 0;
    unsigned char *bytes = read_bytes(path, &size);
    if (!bytes || size < 8) {
        CHECK(0, "%s is readable", path);
        free(bytes);
        return;
    }
    uint64_t n = little_endian_u64(bytes);
    size_t json_length = strlen(json);
    CHECK(n % 8 == 0, "header length %llu is a multiple of 8", (unsigned long long)n);
    CHECK(n >= json_length && n < json_length + 8, "header length %llu pads %zu bytes of JSON",
          (unsigned long long)n, json_length);
    CHECK(size == 8 + n + data_size, "file size %zu = 8 + %llu + %zu", size, (unsigned long long)n,
          data_size);
    if (size != 8 + n + data_size || n < json_length) {
        free(bytes);
        return;
    }
    CHECK(memcmp(bytes + 8, json, json_length) == 0, "header is %s, file has %.*s", json, (int)n,
          (const char *)bytes + 8);
    int spaces = 1;
    for (size_t i = json_length; i < n; i++)
        spaces &= bytes[8 + i] == ' ';
    CHECK(spaces, "padding is spaces");
    CHECK(memcmp(bytes + 8 + n, data, data_size) == 0, "data bytes follow the header");
    free(bytes);
}

static void test_header_layout_is_byte_exact(void)
{
    /* Little-endian floats written out by hand: 1.5 = 0x3FC00000, -2 = 0xC0000000. */
    const unsigned char float_bytes[8] = {0x00, 0x00, 0xC0, 0x3F, 0x00, 0x00, 0x00, 0xC0};
    float values[2] = {1.5f, -2.0f};
    attn_named_tensor a = {"a", ATTN_DTYPE_F32, 1, {2}, values};
    const char *path = test_scratch_path("layout.safetensors");
    CHECK_OK(attn_tensor_file_write(path, &a, 1, NULL, 0));
    check_layout(path, "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                 float_bytes, 8);

    attn_metadata_entry meta = {"k", "v"};
    CHECK_OK(attn_tensor_file_write(path, &a, 1, &meta, 1));
    check_layout(path,
                 "{\"__metadata__\":{\"k\":\"v\"},"
                 "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                 float_bytes, 8);

    /* Mixed sizes: the header keeps the given order; the data area puts 8-byte elements first,
     * then 4, then 1, so each tensor starts at a multiple of its element size. */
    uint8_t mask[3] = {7, 8, 9};
    int64_t step = 0x0102030405060708LL;
    attn_named_tensor mixed[] = {
        {"m", ATTN_DTYPE_U8, 1, {3}, mask},
        {"w", ATTN_DTYPE_F32, 1, {2}, values},
        {"s", ATTN_DTYPE_I64, 0, {0}, &step},
    };
    unsigned char data[19];
    memcpy(data, &step, 8);
    memcpy(data + 8, float_bytes, 8);
    memcpy(data + 16, mask, 3);
    CHECK_OK(attn_tensor_file_write(path, mixed, 3, NULL, 0));
    check_layout(path,
                 "{\"m\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[16,19]},"
                 "\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]},"
                 "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]}}",
                 data, sizeof data);
}

/* ---- malformed files ---------------------------------------------------------------- */

typedef struct malformed_case {
    const char *what;
    const char *header; /* written unpadded by write_crafted */
    size_t data_size;
    const char *message; /* must appear in the error */
} malformed_case;

static const malformed_case malformed_cases[] = {
    {"not '{'", "[1, 2]", 0, "does not start with '{'"},
    {"empty header", "", 0, "does not start with '{'"},
    {"bad UTF-8", "{\"a\xff\": 1}", 0, "invalid UTF-8 or a NUL at byte 3"},
    {"overlong UTF-8", "{\"\xc0\xaf\": 1}", 0, "invalid UTF-8 or a NUL at byte 2"},
    {"UTF-16 surrogate", "{\"\xed\xa0\x80\": 1}", 0, "invalid UTF-8 or a NUL at byte 2"},
    {"not JSON", "{\"a\": }", 0, "not valid JSON"},
    {"unterminated JSON", "{\"a\": {", 0, "not valid JSON"},
    {"text after the object", "{} x", 0, "text after its JSON object"},
    {"second object", "{}{}", 0, "text after its JSON object"},
    {"metadata not an object", "{\"__metadata__\": 3}", 0, "__metadata__ is not a JSON object"},
    {"metadata value not a string", "{\"__metadata__\": {\"epoch\": 3}}", 0,
     "metadata 'epoch' is not a string"},
    {"metadata key twice", "{\"__metadata__\": {\"k\": \"a\", \"k\": \"b\"}}", 0,
     "metadata key 'k' appears twice"},
    {"__metadata__ twice", "{\"__metadata__\": {}, \"__metadata__\": {}}", 0,
     "__metadata__ appears twice"},
    {"tensor not an object", "{\"x\": [0, 4]}", 4, "tensor 'x' is not a JSON object"},
    {"no dtype", "{\"x\": {\"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'x' has no \"dtype\""},
    {"no shape", "{\"x\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4]}}", 4,
     "tensor 'x' has no \"shape\""},
    {"no offsets", "{\"x\": {\"dtype\": \"F32\", \"shape\": [1]}}", 4,
     "tensor 'x' has no \"data_offsets\""},
    {"dtype twice",
     "{\"x\": {\"dtype\": \"F32\", \"dtype\": \"F16\", \"shape\": [1], \"data_offsets\": [0, 4]}}",
     4, "tensor 'x' has two \"dtype\" keys"},
    {"unknown dtype", "{\"x\": {\"dtype\": \"F128\", \"shape\": [1], \"data_offsets\": [0, 16]}}",
     16, "tensor 'x' has unknown dtype 'F128'"},
    {"dtype not a string", "{\"x\": {\"dtype\": 32, \"shape\": [1], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'x' dtype is not a string"},
    {"shape not a list", "{\"x\": {\"dtype\": \"F32\", \"shape\": 1, \"data_offsets\": [0, 4]}}", 4,
     "tensor 'x' shape is not a list"},
    {"negative dimension",
     "{\"x\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'x' shape[1] is not a non-negative integer"},
    {"fractional dimension",
     "{\"x\": {\"dtype\": \"F32\", \"shape\": [1.5], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'x' shape[0] is not a non-negative integer"},
    {"string dimension",
     "{\"x\": {\"dtype\": \"F32\", \"shape\": [\"1\"], \"data_offsets\": [0, 4]}}", 4,
     "tensor 'x' shape[0] is not a non-negative integer"},
    {"huge shape",
     "{\"x\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296], \"data_offsets\": [0, "
     "4]}}",
     4, "tensor 'x' shape [4294967296, 4294967296] is too large"},
    {"one offset", "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4]}}", 4,
     "data_offsets is not a list of two non-negative integers"},
    {"three offsets", "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4, 8]}}",
     8, "data_offsets is not a list of two non-negative integers"},
    {"negative offset", "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [-4, 0]}}",
     4, "data_offsets is not a list of two non-negative integers"},
    {"offset beyond 2^53",
     "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 1e300]}}", 4,
     "data_offsets is not a list of two non-negative integers"},
    {"offsets reversed", "{\"x\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [4, 0]}}",
     4, "tensor 'x' data_offsets [4, 0] end before they begin"},
    {"size mismatch", "{\"x\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 12]}}",
     12, "tensor 'x' data_offsets [0, 12] do not match F32 [2, 2] (16 bytes)"},
    {"truncated data", "{\"x\": {\"dtype\": \"F32\", \"shape\": [4], \"data_offsets\": [0, 16]}}",
     10,
     "tensor 'x' data_offsets [0, 16] run past the end of the 10-byte data area: the file is "
     "truncated"},
    {"overlap",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
     12, "tensors 'a' data_offsets [0, 8] and 'b' data_offsets [4, 12] overlap"},
    {"same bytes twice",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"b\": {\"dtype\": \"I32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
     8, "overlap"},
    {"empty tensor inside another",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"b\": {\"dtype\": \"F32\", \"shape\": [0], \"data_offsets\": [4, 4]}}",
     8, "overlap"},
    {"gap",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [12, 20]}}",
     20, "bytes [8, 12) of the data area, before tensor 'b', belong to no tensor"},
    {"first tensor not at 0",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 12,
     "bytes [0, 4) of the data area, before tensor 'a', belong to no tensor"},
    {"extra data", "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 11,
     "3 bytes of extra data after the last tensor"},
    {"data but no tensors", "{}", 4, "4 bytes of extra data after the last tensor"},
    {"duplicate tensor",
     "{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
     " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
     16, "tensor name 'a' appears twice"},
};

static void check_rejected(const char *path, const char *what, const char *message)
{
    static char sentinel;
    attn_tensor_file *file = (attn_tensor_file *)(void *)&sentinel; /* must be reset to NULL */
    CHECK_FAILS(attn_tensor_file_open(path, &file), ATTN_ERR_FORMAT);
    CHECK(file == NULL, "%s: no file handle on failure", what);
    const char *error = attn_last_error();
    CHECK(strstr(error, path) != NULL && strstr(error, message) != NULL,
          "%s: message '%s' should name the file and say '%s'", what, error, message);
}

static void test_malformed_files_are_rejected(void)
{
    const char *path = test_scratch_path("malformed.safetensors");
    for (size_t i = 0; i < sizeof malformed_cases / sizeof malformed_cases[0]; i++) {
        const malformed_case *c = &malformed_cases[i];
        write_crafted(path, c->header, c->data_size);
        check_rejected(path, c->what, c->message);
    }

    write_bytes(path, "\x02\0\0", 3);
    check_rejected(path, "3-byte file",
                   "is not a safetensors model file: it is 3 bytes, shorter than the 8-byte");
    unsigned char huge[16] = {0x00, 0xE2, 0xF5, 0x05, 0, 0, 0, 0, '{', '}'}; /* 100000256 */
    write_bytes(path, huge, sizeof huge);
    check_rejected(path, "huge header length", "is not a safetensors model file");
    /* Text read as a length: a corpus line given as --model. */
    static const char text[] = "ab\tba\nxy\tyx\n";
    write_bytes(path, text, sizeof text - 1);
    check_rejected(path, "a text file", "is not a safetensors model file: its first 8 bytes");
    unsigned char no_json[12] = {40, 0, 0, 0, 0, 0, 0, 0, 'P', 'K', 3, 4};
    write_bytes(path, no_json, sizeof no_json);
    check_rejected(path, "a short length and no JSON", "is not a safetensors model file");
    unsigned char past_end[12] = {40, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' '};
    write_bytes(path, past_end, sizeof past_end);
    check_rejected(path, "header past the end",
                   "header length 40 runs past the end of the file (12 bytes): the file is "
                   "truncated");
    unsigned char nul[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', '\0', ' ', ' ', ' ', ' '};
    write_bytes(path, nul, sizeof nul);
    check_rejected(path, "NUL in the header", "invalid UTF-8 or a NUL at byte 3");
}

static void test_unusual_but_valid_files_are_accepted(void)
{
    static const struct {
        const char *what, *header;
        size_t data_size;
        size_t tensors;
    } cases[] = {
        {"offsets listed out of order",
         "{\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}",
         16, 2},
        {"empty tensors anywhere",
         "{\"e\": {\"dtype\": \"F32\", \"shape\": [0, 3], \"data_offsets\": [0, 0]},"
         " \"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
         " \"f\": {\"dtype\": \"I64\", \"shape\": [5, 0], \"data_offsets\": [4, 4]}}",
         4, 3},
        {"whitespace, null metadata, unknown keys, no padding",
         "\t{ \"__metadata__\" : null , \"a\" : { \"dtype\" : \"U8\" , \"shape\" : [ 3 ] ,"
         " \"data_offsets\" : [ 0 , 3 ], \"note\": [1, {}] } }\n\r ",
         3, 1},
        {"scalar, integer written as 2.0",
         "{\"s\": {\"dtype\": \"BF16\", \"shape\": [],"
         " \"data_offsets\": [0, 2.0]}}",
         2, 1},
    };
    const char *path = test_scratch_path("unusual.safetensors");
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_crafted(path, cases[i].header, cases[i].data_size);
        attn_tensor_file *file = NULL;
        attn_status status = attn_tensor_file_open(path, &file);
        /* A header starting with whitespace is not allowed: the format wants '{' first. */
        if (cases[i].header[0] != '{') {
            CHECK(status == ATTN_ERR_FORMAT, "%s: leading whitespace is rejected", cases[i].what);
            write_crafted(path, cases[i].header + 1, cases[i].data_size);
            status = attn_tensor_file_open(path, &file);
        }
        CHECK(status == ATTN_OK, "%s: accepted (%s)", cases[i].what, attn_last_error());
        CHECK(attn_tensor_file_count(file) == cases[i].tensors, "%s: tensor count", cases[i].what);
        for (size_t t = 0; t < attn_tensor_file_count(file); t++) {
            attn_tensor_info info;
            CHECK_OK(attn_tensor_file_get(file, t, &info));
            const unsigned char *data = info.data;
            int bytes_ok = 1;
            /* write_crafted fills data byte k with k: each tensor sees its own offsets. */
            for (size_t k = 1; k < info.nbytes; k++)
                bytes_ok &= data[k] == (unsigned char)(data[0] + k);
            CHECK(bytes_ok, "%s: tensor '%s' points at its bytes", cases[i].what, info.name);
        }
        attn_tensor_file_close(file);
    }
}

/* Every prefix of a valid file is a truncated file, and must be reported, never read. */
static void test_every_truncation_is_detected(void)
{
    float w[6] = {1, 2, 3, 4, 5, 6};
    int64_t step = 9;
    attn_named_tensor tensors[] = {{"w", ATTN_DTYPE_F32, 2, {2, 3}, w},
                                   {"step", ATTN_DTYPE_I64, 0, {0}, &step}};
    attn_metadata_entry meta = {"config", "{\"layers\": 2}"};
    const char *path = test_scratch_path("full.safetensors");
    CHECK_OK(attn_tensor_file_write(path, tensors, 2, &meta, 1));
    size_t size = 0;
    unsigned char *bytes = read_bytes(path, &size);
    if (bytes == NULL)
        return;
    const char *cut_path = test_scratch_path("cut.safetensors");
    int all_rejected = 1;
    for (size_t length = 0; length < size; length++) {
        write_bytes(cut_path, bytes, length);
        attn_tensor_file *file = NULL;
        attn_status status = attn_tensor_file_open(cut_path, &file);
        if (status != ATTN_ERR_FORMAT || strstr(attn_last_error(), cut_path) == NULL) {
            all_rejected = 0;
            fprintf(stderr, "  %zu of %zu bytes: %s: %s\n", length, size, attn_status_name(status),
                    attn_last_error());
        }
        attn_tensor_file_close(file);
    }
    CHECK(all_rejected, "every one of the %zu truncations is a format error", size);
    unsigned char *longer = test_alloc(size + 1);
    memcpy(longer, bytes, size);
    write_bytes(cut_path, longer, size + 1);
    check_rejected(cut_path, "one byte appended", "1 bytes of extra data after the last tensor");
    free(longer);
    free(bytes);
}

/* Random byte changes in the header: each file is accepted or rejected as malformed, never
 * crashes (the sanitizer build watches every read), and what is accepted lies in the file. */
static void test_corrupted_headers_never_crash(void)
{
    float w[8] = {0};
    uint8_t m[5] = {0};
    attn_named_tensor tensors[] = {{"weights", ATTN_DTYPE_F32, 2, {2, 4}, w},
                                   {"mask", ATTN_DTYPE_U8, 1, {5}, m}};
    attn_metadata_entry meta = {"k", "v"};
    const char *path = test_scratch_path("fuzz.safetensors");
    CHECK_OK(attn_tensor_file_write(path, tensors, 2, &meta, 1));
    size_t size = 0;
    unsigned char *original = read_bytes(path, &size);
    if (original == NULL)
        return;
    unsigned char *bytes = test_alloc(size);
    attn_rng rng;
    attn_rng_seed(&rng, 2024);
    static const char alphabet[] = "{}[]\",:0123456789-.e \\x\xff";
    int unexpected = 0, accepted = 0;
    unsigned checksum = 0;
    for (int trial = 0; trial < 3000; trial++) {
        memcpy(bytes, original, size);
        int edits = 1 + (int)attn_rng_below(&rng, 3);
        for (int e = 0; e < edits; e++) {
            size_t at = 8 + (size_t)attn_rng_below(&rng, size - 8 - 37); /* header bytes */
            bytes[at] = (unsigned char)alphabet[attn_rng_below(&rng, sizeof alphabet - 1)];
        }
        write_bytes(path, bytes, size);
        attn_tensor_file *file = NULL;
        attn_status status = attn_tensor_file_open(path, &file);
        if (status == ATTN_OK) {
            accepted++;
            size_t total = 0;
            for (size_t t = 0; t < attn_tensor_file_count(file); t++) {
                attn_tensor_info info;
                attn_tensor_file_get(file, t, &info);
                total += info.nbytes;
                for (size_t k = 0; k < info.nbytes; k++) /* the sanitizers check each byte */
                    checksum += ((const unsigned char *)info.data)[k];
            }
            unexpected += total != 37;
        } else {
            unexpected += status != ATTN_ERR_FORMAT;
        }
        attn_tensor_file_close(file);
    }
    CHECK(unexpected == 0, "%d corrupted files gave another error or lost data", unexpected);
    CHECK(checksum == 0, "the data area is all zeros, as written");
    printf("       %d of 3000 corrupted headers were still valid files\n", accepted);
    free(bytes);
    free(original);
}

static void test_missing_file_and_folders_are_io_errors(void)
{
    const char *path = test_scratch_path("does_not_exist.safetensors");
    attn_tensor_file *file = NULL;
    CHECK_FAILS(attn_tensor_file_open(path, &file), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), path) && strstr(attn_last_error(), strerror(ENOENT)),
          "message names the file and the reason: %s", attn_last_error());
    CHECK_FAILS(attn_tensor_file_open(test_scratch_folder(), &file), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "not a regular file") != NULL, "a folder: %s",
          attn_last_error());
}

/* ---- conversion to float32 ---------------------------------------------------------- */

/* The textbook value of a binary float with the given field widths, in double. */
static double decode_binary_float(uint32_t bits, int exponent_bits, int mantissa_bits)
{
    uint32_t mantissa = bits & ((1u << mantissa_bits) - 1);
    uint32_t exponent = (bits >> mantissa_bits) & ((1u << exponent_bits) - 1);
    int negative = (bits >> (mantissa_bits + exponent_bits)) & 1;
    int bias = (1 << (exponent_bits - 1)) - 1;
    double value;
    if (exponent == (1u << exponent_bits) - 1)
        value = mantissa ? NAN : INFINITY;
    else if (exponent == 0)
        value = ldexp((double)mantissa, 1 - bias - mantissa_bits);
    else
        value = ldexp(1.0 + ldexp((double)mantissa, -mantissa_bits), (int)exponent - bias);
    return negative ? -value : value;
}

static void check_all_16_bit_patterns(attn_dtype dtype, int exponent_bits, int mantissa_bits)
{
    uint16_t *patterns = test_alloc(65536 * sizeof *patterns);
    float *loaded = test_alloc(65536 * sizeof *loaded);
    for (uint32_t i = 0; i < 65536; i++)
        patterns[i] = (uint16_t)i;
    attn_named_tensor t = {"all", dtype, 2, {256, 256}, patterns};
    const char *path = test_scratch_path("patterns.safetensors");
    CHECK_OK(attn_tensor_file_write(path, &t, 1, NULL, 0));
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    int64_t shape[2] = {256, 256};
    CHECK_OK(attn_tensor_file_read_f32(file, "all", 2, shape, loaded));
    int wrong = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        double expected = decode_binary_float(i, exponent_bits, mantissa_bits);
        int ok = isnan(expected)
                     ? isnan(loaded[i]) != 0
                     : (double)loaded[i] == expected && !signbit(loaded[i]) == !signbit(expected);
        if (!ok && wrong++ < 5)
            fprintf(stderr, "  %s 0x%04x: got %.9g, expected %.9g\n", attn_dtype_name(dtype), i,
                    (double)loaded[i], expected);
    }
    CHECK(wrong == 0, "%s: %d of 65536 values converted wrongly", attn_dtype_name(dtype), wrong);
    attn_tensor_file_close(file);
    free(patterns);
    free(loaded);
}

static void test_half_and_bfloat16_load_exactly(void)
{
    check_all_16_bit_patterns(ATTN_DTYPE_F16, 5, 10);
    check_all_16_bit_patterns(ATTN_DTYPE_BF16, 8, 7);
}

static void test_double_loads_rounded_and_checked(void)
{
    double values[6] = {0.1, -1e-30, 3.0e38, -INFINITY, NAN, 1e-50};
    attn_named_tensor ok_tensor = {"d", ATTN_DTYPE_F64, 1, {6}, values};
    double too_big[2] = {1.0, -1e39};
    attn_named_tensor big_tensor = {"big", ATTN_DTYPE_F64, 1, {2}, too_big};
    attn_named_tensor both[2] = {ok_tensor, big_tensor};
    const char *path = test_scratch_path("double.safetensors");
    CHECK_OK(attn_tensor_file_write(path, both, 2, NULL, 0));
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    float out[6];
    int64_t six = 6, two = 2;
    CHECK_OK(attn_tensor_file_read_f32(file, "d", 1, &six, out));
    int same = 1;
    for (int i = 0; i < 6; i++) {
        volatile float rounded = (float)values[i]; /* the C conversion, round to nearest */
        same &= isnan(values[i]) ? isnan(out[i]) != 0 : out[i] == rounded;
    }
    CHECK(same, "F64 rounds to the nearest float; infinities and NaN pass");
    CHECK_FAILS(attn_tensor_file_read_f32(file, "big", 1, &two, out), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "element 1") && strstr(attn_last_error(), "range"),
          "names the element out of range: %s", attn_last_error());
    attn_tensor_file_close(file);
}

static void test_reads_check_name_dtype_and_shape(void)
{
    float w[6] = {0};
    int64_t step = 3;
    attn_named_tensor tensors[] = {{"w", ATTN_DTYPE_F32, 2, {2, 3}, w},
                                   {"step", ATTN_DTYPE_I64, 1, {1}, &step}};
    const char *path = test_scratch_path("checks.safetensors");
    CHECK_OK(attn_tensor_file_write(path, tensors, 2, NULL, 0));
    attn_tensor_file *file = NULL;
    CHECK_OK(attn_tensor_file_open(path, &file));
    float out[6];
    int64_t transposed[2] = {3, 2}, right[2] = {2, 3}, flat[1] = {6}, one[1] = {1};
    CHECK_FAILS(attn_tensor_file_read_f32(file, "w", 2, transposed, out), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "has shape [2, 3], expected [3, 2]") != NULL, "%s",
          attn_last_error());
    CHECK_FAILS(attn_tensor_file_read_f32(file, "w", 1, flat, out), ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_tensor_file_read_f32(file, "v", 2, right, out), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "no tensor named 'v'") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_tensor_file_read_f32(file, "step", 1, one, out), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "is I64; only F32, F16, BF16 and F64") != NULL, "%s",
          attn_last_error());
    int32_t step32;
    CHECK_FAILS(attn_tensor_file_read_raw(file, "step", ATTN_DTYPE_I32, 1, one, &step32),
                ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "is I64, expected I32") != NULL, "%s", attn_last_error());

    CHECK_FAILS(attn_tensor_file_read_f32(NULL, "w", 2, right, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_read_f32(file, NULL, 2, right, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_read_f32(file, "w", 2, NULL, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_read_f32(file, "w", 2, right, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_read_f32(file, "w", -1, right, out), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_read_raw(file, "w", ATTN_DTYPE_F32, 2, right, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_tensor_info info;
    const char *key, *value;
    CHECK_FAILS(attn_tensor_file_get(file, 2, &info), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_get(NULL, 0, &info), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_get(file, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_find(file, NULL, &info), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_metadata_at(file, 0, &key, &value), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_metadata(file, NULL, &value), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(!attn_tensor_file_contains(NULL, "w") && !attn_tensor_file_contains(file, NULL),
          "contains with NULL is 0");
    CHECK(attn_tensor_file_count(NULL) == 0 && attn_tensor_file_metadata_count(NULL) == 0,
          "counts of NULL are 0");
    attn_tensor_file_close(file);
    attn_tensor_file_close(NULL);
    CHECK_FAILS(attn_tensor_file_open(NULL, &file), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_open(path, NULL), ATTN_ERR_INVALID_ARGUMENT);
}

/* ---- bad arguments to the writer ---------------------------------------------------- */

static void test_writer_rejects_bad_arguments(void)
{
    float data[4] = {0};
    const char *path = test_scratch_path("rejected.safetensors");
    const attn_named_tensor good = {"g", ATTN_DTYPE_F32, 1, {4}, data};
    struct {
        const char *what;
        attn_named_tensor tensor;
    } bad[] = {
        {"NULL name", {NULL, ATTN_DTYPE_F32, 1, {4}, data}},
        {"empty name", {"", ATTN_DTYPE_F32, 1, {4}, data}},
        {"reserved name", {"__metadata__", ATTN_DTYPE_F32, 1, {4}, data}},
        {"invalid UTF-8 name", {"bad\xc3", ATTN_DTYPE_F32, 1, {4}, data}},
        {"unknown dtype", {"x", (attn_dtype)99, 1, {4}, data}},
        {"negative dtype", {"x", (attn_dtype)-1, 1, {4}, data}},
        {"ndim 7", {"x", ATTN_DTYPE_F32, 7, {1}, data}},
        {"ndim -1", {"x", ATTN_DTYPE_F32, -1, {1}, data}},
        {"negative size", {"x", ATTN_DTYPE_F32, 2, {2, -2}, data}},
        {"NULL data", {"x", ATTN_DTYPE_F32, 1, {4}, NULL}},
        {"too large", {"x", ATTN_DTYPE_F32, 2, {1LL << 40, 1LL << 40}, data}},
        {"duplicate of 'g'", {"g", ATTN_DTYPE_U8, 1, {1}, data}},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        attn_named_tensor pair[2] = {good, bad[i].tensor};
        CHECK_FAILS(attn_tensor_file_write(path, pair, 2, NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
        CHECK(!path_exists(path), "%s: nothing written", bad[i].what);
    }
    attn_metadata_entry bad_metadata[][2] = {
        {{"a", "1"}, {NULL, "2"}},   {{"a", "1"}, {"b", NULL}},       {{"a", "1"}, {"a", "2"}},
        {{"a", "1"}, {"b", "\xff"}}, {{"a", "1"}, {"\xe2\x82", "2"}},
    };
    for (size_t i = 0; i < sizeof bad_metadata / sizeof bad_metadata[0]; i++)
        CHECK_FAILS(attn_tensor_file_write(path, &good, 1, bad_metadata[i], 2),
                    ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_write(NULL, &good, 1, NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_write("", &good, 1, NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_write(path, NULL, 1, NULL, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tensor_file_write(path, &good, 1, NULL, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(!path_exists(path) && count_entries(test_scratch_folder(), "rejected.") == 0,
          "bad arguments leave no file and no temporary");
    CHECK(strcmp(attn_dtype_name(ATTN_DTYPE_BF16), "BF16") == 0 &&
              strcmp(attn_dtype_name((attn_dtype)77), "?") == 0,
          "dtype names");
    CHECK(attn_dtype_size(ATTN_DTYPE_I64) == 8 && attn_dtype_size(ATTN_DTYPE_COUNT) == 0,
          "dtype sizes");
}

int main(void)
{
    RUN_TEST(test_round_trip_keeps_tensors_and_metadata);
    RUN_TEST(test_writes_are_deterministic_and_replace_the_file);
    RUN_TEST(test_no_tensors_no_metadata);
    RUN_TEST(test_lookup_in_a_file_without_metadata);
    RUN_TEST(test_header_layout_is_byte_exact);
    RUN_TEST(test_malformed_files_are_rejected);
    RUN_TEST(test_unusual_but_valid_files_are_accepted);
    RUN_TEST(test_every_truncation_is_detected);
    RUN_TEST(test_corrupted_headers_never_crash);
    RUN_TEST(test_missing_file_and_folders_are_io_errors);
    RUN_TEST(test_half_and_bfloat16_load_exactly);
    RUN_TEST(test_double_loads_rounded_and_checked);
    RUN_TEST(test_reads_check_name_dtype_and_shape);
    RUN_TEST(test_writer_rejects_bad_arguments);
    return test_summary();
}
