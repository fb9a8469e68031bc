/* Safetensors files: the input, written to a temporary file, is opened with
 * attn_tensor_file_open and every accessor is called on what opened; what opened is written
 * again with attn_tensor_file_write and must read back the same; then attn_model_load reads
 * the input as a model (config metadata and weights). */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdlib.h>
#include <string.h>

/* Sizes up to which a fuzzed config is built into a model. A config is only JSON: one that
 * asks for gigabytes of parameters is a legitimate out-of-memory, not a finding, and would
 * only trip libFuzzer's memory limit. */
enum { MAX_FUZZ_WIDTH = 512, MAX_FUZZ_LAYERS = 4, MAX_FUZZ_VOCAB = 4096, MAX_FUZZ_LEN = 2048 };

static void read_tensor(const attn_tensor_file *file, const attn_tensor_info *info)
{
    FUZZ_CHECK(info->name != NULL && info->ndim >= 0 && info->ndim <= ATTN_MAX_DIMS);
    FUZZ_CHECK(info->nbytes == (size_t)info->numel * attn_dtype_size(info->dtype));
    attn_tensor_info found;
    FUZZ_CHECK(attn_tensor_file_find(file, info->name, &found) == ATTN_OK);
    FUZZ_CHECK(found.data == info->data && found.nbytes == info->nbytes);
    FUZZ_CHECK(attn_tensor_file_contains(file, info->name));
    /* Touch every byte, so ASan sees a tensor that lies outside the file. */
    unsigned char checksum = 0;
    for (size_t i = 0; i < info->nbytes; i++)
        checksum ^= ((const unsigned char *)info->data)[i];
    (void)checksum;

    void *raw = malloc(info->nbytes > 0 ? info->nbytes : 1);
    float *values = malloc(info->numel > 0 ? (size_t)info->numel * sizeof *values : 1);
    if (raw != NULL)
        FUZZ_CHECK(attn_tensor_file_read_raw(file, info->name, info->dtype, info->ndim, info->shape,
                                             raw) == ATTN_OK);
    if (values != NULL) {
        attn_status status =
            attn_tensor_file_read_f32(file, info->name, info->ndim, info->shape, values);
        int floating = info->dtype == ATTN_DTYPE_F32 || info->dtype == ATTN_DTYPE_F16 ||
                       info->dtype == ATTN_DTYPE_BF16 || info->dtype == ATTN_DTYPE_F64;
        FUZZ_CHECK(floating || status != ATTN_OK);
        FUZZ_CHECK(info->dtype != ATTN_DTYPE_F32 || status == ATTN_OK);
    }
    free(raw);
    free(values);
    /* A shape that differs from the file's is refused, never read past. */
    if (info->ndim > 0 && info->numel > 0) {
        int64_t other[ATTN_MAX_DIMS];
        memcpy(other, info->shape, (size_t)info->ndim * sizeof *other);
        other[0] += 1;
        float sink[1];
        FUZZ_CHECK(attn_tensor_file_read_f32(file, info->name, info->ndim, other, sink) != ATTN_OK);
    }
}

static void check_same(const attn_tensor_info *a, const attn_tensor_info *b)
{
    FUZZ_CHECK(strcmp(a->name, b->name) == 0 && a->dtype == b->dtype && a->ndim == b->ndim);
    FUZZ_CHECK(a->ndim == 0 || memcmp(a->shape, b->shape, (size_t)a->ndim * 8) == 0);
    FUZZ_CHECK(a->nbytes == b->nbytes);
    FUZZ_CHECK(a->nbytes == 0 || memcmp(a->data, b->data, a->nbytes) == 0);
}

/* Whatever the reader accepts, the writer writes, and the reader reads back unchanged. */
static void rewrite(const attn_tensor_file *file)
{
    const size_t count = attn_tensor_file_count(file);
    const size_t n_metadata = attn_tensor_file_metadata_count(file);
    const char *path = fuzz_temp_path("rewritten.safetensors");
    attn_named_tensor *tensors = calloc(count > 0 ? count : 1, sizeof *tensors);
    attn_metadata_entry *metadata = calloc(n_metadata > 0 ? n_metadata : 1, sizeof *metadata);
    if (path == NULL || tensors == NULL || metadata == NULL) {
        free(tensors);
        free(metadata);
        return;
    }
    for (size_t i = 0; i < count; i++) {
        attn_tensor_info info;
        FUZZ_CHECK(attn_tensor_file_get(file, i, &info) == ATTN_OK);
        tensors[i].name = info.name;
        tensors[i].dtype = info.dtype;
        tensors[i].ndim = info.ndim;
        if (info.ndim > 0)
            memcpy(tensors[i].shape, info.shape, (size_t)info.ndim * sizeof *info.shape);
        tensors[i].data = info.data;
    }
    for (size_t i = 0; i < n_metadata; i++)
        FUZZ_CHECK(attn_tensor_file_metadata_at(file, i, &metadata[i].key, &metadata[i].value) ==
                   ATTN_OK);
    FUZZ_CHECK(attn_tensor_file_write(path, tensors, count, metadata, n_metadata) == ATTN_OK);
    attn_tensor_file *again = NULL;
    FUZZ_CHECK(attn_tensor_file_open(path, &again) == ATTN_OK);
    FUZZ_CHECK(attn_tensor_file_count(again) == count);
    FUZZ_CHECK(attn_tensor_file_metadata_count(again) == n_metadata);
    for (size_t i = 0; i < count; i++) {
        attn_tensor_info before, after;
        FUZZ_CHECK(attn_tensor_file_get(file, i, &before) == ATTN_OK);
        FUZZ_CHECK(attn_tensor_file_get(again, i, &after) == ATTN_OK);
        check_same(&before, &after);
    }
    for (size_t i = 0; i < n_metadata; i++) {
        const char *key, *value;
        FUZZ_CHECK(attn_tensor_file_metadata_at(again, i, &key, &value) == ATTN_OK);
        FUZZ_CHECK(strcmp(key, metadata[i].key) == 0 && strcmp(value, metadata[i].value) == 0);
    }
    attn_tensor_file_close(again);
    free(tensors);
    free(metadata);
}

static int small_enough(const attn_model_config *c)
{
    const int64_t widths[] = {c->d_model, c->ffn_dim, c->hidden, c->embedding_dim,
                              c->attention_dim};
    const int64_t vocabs[] = {c->src_vocab, c->tgt_vocab, c->num_classes};
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i] > MAX_FUZZ_WIDTH)
            return 0;
    for (size_t i = 0; i < sizeof vocabs / sizeof vocabs[0]; i++)
        if (vocabs[i] > MAX_FUZZ_VOCAB)
            return 0;
    return c->encoder_layers <= MAX_FUZZ_LAYERS && c->decoder_layers <= MAX_FUZZ_LAYERS &&
           c->layers <= MAX_FUZZ_LAYERS && c->max_len <= MAX_FUZZ_LEN;
}

static void load_model(const char *path, const attn_tensor_file *file)
{
    const char *json = NULL;
    attn_model_config config;
    if (attn_tensor_file_metadata(file, ATTN_MODEL_CONFIG_KEY, &json) != ATTN_OK ||
        attn_model_config_from_json(json, &config) != ATTN_OK || !small_enough(&config))
        return;
    attn_model *model = NULL;
    if (attn_model_load(path, &model) == ATTN_OK) {
        const attn_model_config *loaded = attn_model_get_config(model);
        FUZZ_CHECK(loaded->arch == config.arch && loaded->d_model == config.d_model);
        attn_params *params = attn_model_params(model);
        FUZZ_CHECK(attn_params_count(params) <= attn_tensor_file_count(file));
    } else {
        FUZZ_CHECK(model == NULL && attn_last_error()[0] != '\0');
    }
    attn_model_destroy(model);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_temp_file("input.safetensors", data, size);
    if (path == NULL)
        return 0;
    attn_tensor_file *file = NULL;
    if (attn_tensor_file_open(path, &file) != ATTN_OK) {
        FUZZ_CHECK(file == NULL && attn_last_error()[0] != '\0');
        return 0;
    }
    FUZZ_CHECK(strcmp(attn_tensor_file_path(file), path) == 0);
    const size_t count = attn_tensor_file_count(file);
    for (size_t i = 0; i < count; i++) {
        attn_tensor_info info;
        FUZZ_CHECK(attn_tensor_file_get(file, i, &info) == ATTN_OK);
        read_tensor(file, &info);
    }
    attn_tensor_info missing;
    FUZZ_CHECK(attn_tensor_file_get(file, count, &missing) != ATTN_OK);
    const size_t n_metadata = attn_tensor_file_metadata_count(file);
    for (size_t i = 0; i < n_metadata; i++) {
        const char *key = NULL, *value = NULL, *again = NULL;
        FUZZ_CHECK(attn_tensor_file_metadata_at(file, i, &key, &value) == ATTN_OK);
        FUZZ_CHECK(attn_tensor_file_metadata(file, key, &again) == ATTN_OK && again == value);
        FUZZ_CHECK(attn_utf8_valid(key, strlen(key)) && attn_utf8_valid(value, strlen(value)));
    }
    rewrite(file);
    load_model(path, file);
    attn_tensor_file_close(file);
    return 0;
}
