/* GPT-2 checkpoints of llm.c's train_gpt2 (github.com/karpathy/llm.c), both ways.
 *
 * The file is 256 int32 (magic 20240326, version 3, maxT, V, L, NH, C, Vp, then zeros) and
 * the float32 parameters, tensor after tensor, every per-layer tensor holding its L layers
 * one after the other. Each layer's slice has PyTorch's layout, which is attn's: a linear
 * weight is [out, in], and the attention's qkv projection [3C, C] holds the queries', keys'
 * and values' rows in that order with each head a contiguous run of C / NH rows, as
 * nn.MultiheadAttention's in_proj_weight. So the conversion copies slices and renames them.
 *
 * The token table has Vp >= V rows, padded for llm.c's kernels; rows V .. Vp-1 are never
 * read by llm.c's forward and have no place in attn's model, so they travel beside it (the
 * caller's padded_rows, in a model file the tensor ATTN_LLMC_PADDED_ROWS) so that a converted
 * checkpoint converts back byte for byte. */
#include "models/models_internal.h"

#include "tensor/tensor_file_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum { LLMC_HEADER_INTS = 256, LLMC_MAGIC = 20240326, LLMC_VERSION = 3 };

/* The header's sizes, as llm.c names them. */
typedef struct llmc_sizes {
    int64_t max_t, vocab, layers, heads, channels, padded_vocab;
} llmc_sizes;

/* llm.c's parameter tensors in file order (train_gpt2.c's fill_in_parameter_sizes) and
 * attn's name for each (of layer i when per_layer). */
typedef struct llmc_tensor {
    const char *llmc_name;
    const char *attn_name;
    int per_layer;
} llmc_tensor;

static const llmc_tensor llmc_tensors[] = {
    {"wte", "embed.weight", 0},
    {"wpe", "pos_embed.weight", 0},
    {"ln1w", "norm1.weight", 1},
    {"ln1b", "norm1.bias", 1},
    {"qkvw", "self_attn.in_proj_weight", 1},
    {"qkvb", "self_attn.in_proj_bias", 1},
    {"attprojw", "self_attn.out_proj.weight", 1},
    {"attprojb", "self_attn.out_proj.bias", 1},
    {"ln2w", "norm2.weight", 1},
    {"ln2b", "norm2.bias", 1},
    {"fcw", "linear1.weight", 1},
    {"fcb", "linear1.bias", 1},
    {"fcprojw", "linear2.weight", 1},
    {"fcprojb", "linear2.bias", 1},
    {"lnfw", "decoder.norm.weight", 0},
    {"lnfb", "decoder.norm.bias", 0},
};
#define LLMC_TENSORS ((int)(sizeof llmc_tensors / sizeof *llmc_tensors))

/* One contiguous run of the file: a tensor's (or one layer's slice of it) floats. */
typedef attn_status (*chunk_visitor)(void *context, const char *llmc_name, int64_t layer,
                                     float *data, size_t count);

/* Visits the model's parameters in the file's order; the token table's rows V .. Vp-1 come
 * from padded (count (Vp - V) * C) right after wte's first V rows. */
static attn_status visit_chunks(const char *fn, attn_model *m, float *padded, size_t padded_count,
                                chunk_visitor visit, void *context)
{
    attn_params *store = m->params;
    for (int k = 0; k < LLMC_TENSORS; k++) {
        const llmc_tensor *t = &llmc_tensors[k];
        const int64_t layers = t->per_layer ? m->n_blocks : 1;
        for (int64_t l = 0; l < layers; l++) {
            char name[ATTN_NN_MAX_NAME];
            if (t->per_layer)
                snprintf(name, sizeof name, "decoder.layers.%" PRId64 ".%s", l, t->attn_name);
            else
                snprintf(name, sizeof name, "%s", t->attn_name);
            attn_param_id id;
            attn_param_info info;
            if (attn_params_find(store, name, &id) != ATTN_OK ||
                attn_params_info(store, id, &info) != ATTN_OK)
                return attn_fail(ATTN_ERR_INTERNAL, "%s: the model has no parameter '%s'", fn,
                                 name);
            size_t count = 1;
            for (int d = 0; d < info.ndim; d++)
                count *= (size_t)info.shape[d];
            float *data = attn_params_data(store, id, ATTN_PARAM_VALUES);
            ATTN_TRY(visit(context, t->llmc_name, t->per_layer ? l : -1, data, count));
            if (k == 0 && padded_count > 0)
                ATTN_TRY(visit(context, "wte (padded rows)", -1, padded, padded_count));
        }
    }
    return ATTN_OK;
}

/* ---- reading ---------------------------------------------------------------------------- */

typedef struct reader {
    const char *fn, *path;
    FILE *file;
} reader;

static attn_status read_chunk(void *context, const char *llmc_name, int64_t layer, float *data,
                              size_t count)
{
    reader *r = context;
    if (fread(data, sizeof(float), count, r->file) != count)
        return attn_fail(ATTN_ERR_IO, "%s: '%s': reading %s failed: %s", r->fn, r->path, llmc_name,
                         ferror(r->file) ? strerror(errno) : "the file ended early");
    char where[96];
    if (layer >= 0)
        snprintf(where, sizeof where, "%s of layer %" PRId64, llmc_name, layer);
    else
        snprintf(where, sizeof where, "%s", llmc_name);
    for (size_t i = 0; i < count; i++)
        if (!isfinite(data[i]))
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: '%s': %s, element %zu, is %s, not a weight (the checkpoint of "
                             "a diverged run?)",
                             r->fn, r->path, where, i, isnan(data[i]) ? "NaN" : "infinite");
    return ATTN_OK;
}

/* Elements of the parameters the header describes, or 0 when they overflow. */
static size_t parameter_count(const llmc_sizes *s)
{
    const size_t C = (size_t)s->channels, L = (size_t)s->layers;
    /* per layer: ln1 2C, qkv 3C*C + 3C, attproj C*C + C, ln2 2C, fc 4C*C + 4C, fcproj 4C*C + C */
    size_t square, per_layer, layers, tokens, positions, total;
    if (!attn_mul_size(C, C, &square) || !attn_mul_size(square, 12, &per_layer) ||
        per_layer > SIZE_MAX - 13 * C || !attn_mul_size(per_layer + 13 * C, L, &layers) ||
        !attn_mul_size((size_t)s->padded_vocab, C, &tokens) ||
        !attn_mul_size((size_t)s->max_t, C, &positions))
        return 0;
    total = layers;
    if (total > SIZE_MAX - tokens - positions - 2 * C)
        return 0;
    return total + tokens + positions + 2 * C;
}

static attn_status read_header(const char *fn, const char *path, FILE *file, llmc_sizes *sizes)
{
    int32_t header[LLMC_HEADER_INTS];
    if (fread(header, sizeof header, 1, file) != 1)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: '%s' is shorter than llm.c's header of %d int32: not a checkpoint",
                         fn, path, LLMC_HEADER_INTS);
    if (header[0] != LLMC_MAGIC)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: '%s' starts with %d, not llm.c's checkpoint magic %d (a token file "
                         "starts with 20240520)",
                         fn, path, (int)header[0], LLMC_MAGIC);
    if (header[1] != LLMC_VERSION)
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "%s: '%s' is llm.c checkpoint version %d; only version %d (float32) is "
                         "read (version 5 is bfloat16: export float32 from llm.c)",
                         fn, path, (int)header[1], LLMC_VERSION);
    static const char *const names[] = {"maxT", "V", "L", "NH", "C", "Vp"};
    for (int i = 0; i < 6; i++)
        if (header[2 + i] < 1)
            return attn_fail(ATTN_ERR_FORMAT, "%s: '%s': header %s = %d must be positive", fn, path,
                             names[i], (int)header[2 + i]);
    *sizes = (llmc_sizes){header[2], header[3], header[4], header[5], header[6], header[7]};
    if (sizes->padded_vocab < sizes->vocab)
        return attn_fail(ATTN_ERR_FORMAT, "%s: '%s': header Vp = %" PRId64 " is below V = %" PRId64,
                         fn, path, sizes->padded_vocab, sizes->vocab);
    if (sizes->channels % sizes->heads != 0)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: '%s': header NH = %" PRId64 " does not divide C = %" PRId64, fn, path,
                         sizes->heads, sizes->channels);
    return ATTN_OK;
}

/* The file must hold the header and exactly the parameters the header describes. */
static attn_status check_length(const char *fn, const char *path, FILE *file,
                                const llmc_sizes *sizes)
{
    struct stat st;
    if (fstat(fileno(file), &st) != 0)
        return attn_fail(ATTN_ERR_IO, "%s: '%s': %s", fn, path, strerror(errno));
    const size_t floats = parameter_count(sizes);
    const uint64_t header_bytes = LLMC_HEADER_INTS * sizeof(int32_t);
    if (floats == 0 || floats > (SIZE_MAX - header_bytes) / sizeof(float))
        return attn_fail(ATTN_ERR_FORMAT, "%s: '%s': the header's sizes overflow", fn, path);
    const uint64_t expected = header_bytes + (uint64_t)floats * sizeof(float);
    const uint64_t actual = (uint64_t)st.st_size;
    if (actual < expected)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: '%s' is truncated: the header describes %zu float32 parameters "
                         "(%" PRIu64 " bytes with the header), the file has %" PRIu64 " bytes",
                         fn, path, floats, expected, actual);
    if (actual > expected)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: '%s' has %" PRIu64 " bytes after the %zu float32 parameters its "
                         "header describes",
                         fn, path, actual - expected, floats);
    return ATTN_OK;
}

static attn_model_config config_of(const llmc_sizes *s)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = s->channels;
    c.num_heads = s->heads;
    c.ffn_dim = 4 * s->channels;
    c.decoder_layers = s->layers;
    c.tgt_vocab = s->vocab;
    c.max_len = s->max_t;
    c.activation = ATTN_ACT_GELU_TANH;
    c.norm_first = 1;
    c.decoder_final_norm = 1;
    c.tie_output = 1;
    c.output_bias = 0;
    c.positions = ATTN_POSITIONS_LEARNED;
    c.scale_embeddings = 0;
    c.dropout = 0.0;
    c.layer_norm_eps = 1e-5; /* llm.c's layernorm_forward */
    c.label_smoothing = 0.0;
    return c;
}

static attn_status read_checkpoint(const char *fn, const char *path, FILE *file, attn_model **model,
                                   int64_t *padded_vocab, float **padded_rows)
{
    llmc_sizes sizes = {0, 0, 0, 0, 0, 0};
    ATTN_TRY(read_header(fn, path, file, &sizes));
    ATTN_TRY(check_length(fn, path, file, &sizes));
    const attn_model_config config = config_of(&sizes);
    attn_status status = attn_model_create(&config, model);
    if (status != ATTN_OK) {
        char inner[512];
        snprintf(inner, sizeof inner, "%s", attn_last_error());
        return attn_fail(status, "%s: '%s': attn cannot hold this model: %s", fn, path, inner);
    }
    const size_t padded_count = (size_t)(sizes.padded_vocab - sizes.vocab) * (size_t)sizes.channels;
    float *padded = NULL;
    if (padded_count > 0 && (padded = malloc(padded_count * sizeof *padded)) == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu padded rows' values",
                         fn, padded_count);
    reader r = {fn, path, file};
    status = visit_chunks(fn, *model, padded, padded_count, read_chunk, &r);
    attn_params_values_changed(attn_model_params(*model));
    if (status == ATTN_OK && padded_rows != NULL) {
        *padded_rows = padded;
        padded = NULL;
    }
    if (status == ATTN_OK && padded_vocab != NULL)
        *padded_vocab = sizes.padded_vocab;
    free(padded);
    return status;
}

attn_status attn_model_from_llmc(const char *path, attn_model **out, int64_t *padded_vocab,
                                 float **padded_rows)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    if (padded_rows != NULL)
        *padded_rows = NULL;
    if (padded_vocab != NULL)
        *padded_vocab = 0;
    ATTN_CHECK_NOT_NULL(path);
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return attn_fail(ATTN_ERR_IO, "%s: cannot open '%s': %s", fn, path, strerror(errno));
    attn_model *model = NULL;
    const attn_status status = read_checkpoint(fn, path, file, &model, padded_vocab, padded_rows);
    fclose(file);
    if (status != ATTN_OK) {
        attn_model_destroy(model);
        return status;
    }
    *out = model;
    return ATTN_OK;
}

/* ---- writing ---------------------------------------------------------------------------- */

/* Appends "; field is X (llm.c needs Y)" to a message of what differs. */
static void add_difference(char *out, size_t size, int *count, const char *field, const char *value,
                           const char *needed)
{
    const size_t used = strlen(out);
    snprintf(out + used, size - used, "%s%s is %s (llm.c needs %s)", *count > 0 ? "; " : "", field,
             value, needed);
    (*count)++;
}

/* ATTN_ERR_INVALID_ARGUMENT naming every field llm.c's GPT-2 cannot represent, and the model's
 * file when there is one (name; NULL: none). */
static attn_status check_representable(const char *fn, const char *name, const attn_model_config *c)
{
    char model[512] = "the model";
    if (name != NULL)
        snprintf(model, sizeof model, "the model in '%s'", name);
    char differences[1024] = "";
    int n = 0;
    char value[64];
    const size_t size = sizeof differences;
    if (c->arch != ATTN_ARCH_TRANSFORMER_LM)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: llm.c holds GPT-2 language models only; %s has arch %s", fn, model,
                         c->arch == ATTN_ARCH_TRANSFORMER ? "\"transformer\""
                         : c->arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER
                             ? "\"transformer_classifier\""
                         : c->arch == ATTN_ARCH_TRANSFORMER_MLM ? "\"transformer_mlm\""
                         : c->arch == ATTN_ARCH_RNN_CLASSIFIER  ? "\"rnn_classifier\""
                                                                : "\"rnn\"");
    if (c->positions != ATTN_POSITIONS_LEARNED)
        add_difference(differences, size, &n, "positions",
                       c->positions == ATTN_POSITIONS_ROPE ? "\"rope\"" : "\"sinusoidal\"",
                       "\"learned\"");
    if (c->norm != ATTN_NORM_LAYER)
        add_difference(differences, size, &n, "norm", "\"rms_norm\"", "\"layer_norm\"");
    if (c->ffn != ATTN_FFN_MLP)
        add_difference(differences, size, &n, "ffn", "\"swiglu\"", "\"mlp\"");
    if (!c->bias)
        add_difference(differences, size, &n, "bias", "false", "true");
    if (c->activation != ATTN_ACT_GELU_TANH)
        add_difference(differences, size, &n, "activation",
                       c->activation == ATTN_ACT_RELU ? "\"relu\"" : "\"gelu\"", "\"gelu_tanh\"");
    if (!c->norm_first)
        add_difference(differences, size, &n, "norm_first", "false (post-norm)", "true");
    if (!c->decoder_final_norm)
        add_difference(differences, size, &n, "decoder_final_norm", "false", "true");
    if (!c->tie_output)
        add_difference(differences, size, &n, "tie_output", "false", "true");
    if (c->output_bias)
        add_difference(differences, size, &n, "output_bias", "true", "false");
    if (c->scale_embeddings)
        add_difference(differences, size, &n, "scale_embeddings", "true", "false");
    if (c->ffn_dim != 4 * c->d_model) {
        snprintf(value, sizeof value, "%" PRId64, c->ffn_dim);
        char needed[64];
        snprintf(needed, sizeof needed, "4 * d_model = %" PRId64, 4 * c->d_model);
        add_difference(differences, size, &n, "ffn_dim", value, needed);
    }
    if (c->layer_norm_eps != 1e-5) {
        snprintf(value, sizeof value, "%g", c->layer_norm_eps);
        add_difference(differences, size, &n, "layer_norm_eps", value, "1e-05");
    }
    if (n > 0)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: %s is not one llm.c's GPT-2 can represent: %s", fn, model,
                         differences);
    return ATTN_OK;
}

typedef struct writer {
    attn_model *model;
    int32_t header[LLMC_HEADER_INTS];
    float *padded;
    size_t padded_count;
} writer;

static attn_status write_chunk(void *context, const char *llmc_name, int64_t layer, float *data,
                               size_t count)
{
    (void)llmc_name;
    (void)layer;
    FILE *f = context;
    if (fwrite(data, sizeof(float), count, f) != count)
        return ATTN_ERR_IO;
    return ATTN_OK;
}

static int write_body(FILE *f, void *context)
{
    writer *w = context;
    if (fwrite(w->header, sizeof w->header, 1, f) != 1)
        return 0;
    return visit_chunks("attn_model_save_llmc", w->model, w->padded, w->padded_count, write_chunk,
                        f) == ATTN_OK;
}

attn_status attn_model_save_llmc(attn_model *model, const char *path, int64_t padded_vocab,
                                 const float *padded_rows)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(path);
    const attn_model_config *c = &model->config;
    ATTN_TRY(check_representable(fn, NULL, c));
    const int64_t V = c->tgt_vocab, C = c->d_model;
    if (padded_vocab == 0)
        padded_vocab = (V + 127) / 128 * 128; /* llm.c's own exporter's choice */
    ATTN_CHECK_ARG(padded_vocab >= V && padded_vocab <= INT32_MAX,
                   "%s: padded_vocab %" PRId64 " must be in [tgt_vocab %" PRId64 ", 2^31)", fn,
                   padded_vocab, V);
    writer w;
    memset(&w, 0, sizeof w);
    w.model = model;
    const int32_t sizes[8] = {LLMC_MAGIC,
                              LLMC_VERSION,
                              (int32_t)c->max_len,
                              (int32_t)V,
                              (int32_t)c->decoder_layers,
                              (int32_t)c->num_heads,
                              (int32_t)C,
                              (int32_t)padded_vocab};
    memcpy(w.header, sizes, sizeof sizes);
    w.padded_count = (size_t)(padded_vocab - V) * (size_t)C;
    if (w.padded_count > 0) {
        /* Without the rows of a checkpoint, zeros, as llm.c's exporter pads. */
        w.padded = calloc(w.padded_count, sizeof *w.padded);
        if (w.padded == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %zu padded values", fn,
                             w.padded_count);
        if (padded_rows != NULL)
            memcpy(w.padded, padded_rows, w.padded_count * sizeof *w.padded);
    }
    const attn_status status = attn_file_write_atomically(fn, path, write_body, &w);
    free(w.padded);
    return status;
}

/* ---- model files ------------------------------------------------------------------------- */

attn_status attn_llmc_to_model_file(const char *llmc_path, const char *model_path,
                                    attn_model_config *config)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(llmc_path);
    ATTN_CHECK_NOT_NULL(model_path);
    attn_model *model = NULL;
    int64_t padded_vocab = 0;
    float *padded = NULL;
    ATTN_TRY(attn_model_from_llmc(llmc_path, &model, &padded_vocab, &padded));
    const attn_model_config *c = &model->config;
    attn_params *store = model->params;
    const size_t n_params = attn_params_count(store);
    attn_named_tensor *tensors = calloc(n_params + 1, sizeof *tensors);
    char *json = NULL;
    attn_status status =
        tensors != NULL ? ATTN_OK : attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (status == ATTN_OK)
        status = attn_params_tensors(store, ATTN_PARAM_VALUES, NULL, tensors, n_params);
    if (status == ATTN_OK)
        status = attn_model_config_to_json(c, &json);
    if (status == ATTN_OK) {
        size_t n = n_params;
        if (padded != NULL)
            tensors[n++] = (attn_named_tensor){ATTN_LLMC_PADDED_ROWS,
                                               ATTN_DTYPE_F32,
                                               2,
                                               {padded_vocab - c->tgt_vocab, c->d_model},
                                               padded};
        char vp[32];
        snprintf(vp, sizeof vp, "%" PRId64, padded_vocab);
        const attn_metadata_entry metadata[2] = {{ATTN_MODEL_CONFIG_KEY, json},
                                                 {ATTN_LLMC_PADDED_VOCAB_KEY, vp}};
        status = attn_tensor_file_write(model_path, tensors, n, metadata, 2);
    }
    if (status == ATTN_OK && config != NULL)
        *config = *c;
    free(json);
    free(tensors);
    free(padded);
    attn_model_destroy(model);
    return status;
}

/* The padded vocabulary a model file records (0: none recorded) and its padded rows (NULL:
 * none stored); messages name the file. */
static attn_status stored_padding(const char *fn, const attn_tensor_file *file, const char *path,
                                  const attn_model_config *c, int64_t *padded_vocab,
                                  float **padded_rows)
{
    *padded_vocab = 0;
    *padded_rows = NULL;
    const char *text = NULL;
    if (attn_tensor_file_metadata(file, ATTN_LLMC_PADDED_VOCAB_KEY, &text) == ATTN_OK) {
        char *end = NULL;
        errno = 0;
        const long long value = strtoll(text, &end, 10);
        if (errno != 0 || end == text || *end != '\0' || value < c->tgt_vocab || value > INT32_MAX)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: '%s': metadata '%s' is \"%s\", not a vocabulary size in "
                             "[tgt_vocab %" PRId64 ", 2^31)",
                             fn, path, ATTN_LLMC_PADDED_VOCAB_KEY, text, c->tgt_vocab);
        *padded_vocab = value;
    }
    attn_clear_error();
    attn_tensor_info info;
    if (attn_tensor_file_find(file, ATTN_LLMC_PADDED_ROWS, &info) != ATTN_OK) {
        attn_clear_error();
        return ATTN_OK;
    }
    if (*padded_vocab == 0 && info.ndim == 2)
        *padded_vocab = c->tgt_vocab + info.shape[0];
    const int64_t shape[2] = {*padded_vocab - c->tgt_vocab, c->d_model};
    if (shape[0] < 1)
        return attn_fail(ATTN_ERR_FORMAT, "%s: '%s': tensor '%s' is there but '%s' says no rows",
                         fn, path, ATTN_LLMC_PADDED_ROWS, ATTN_LLMC_PADDED_VOCAB_KEY);
    float *rows = malloc((size_t)(shape[0] * shape[1]) * sizeof *rows);
    if (rows == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    const attn_status status =
        attn_tensor_file_read_f32(file, ATTN_LLMC_PADDED_ROWS, 2, shape, rows);
    if (status != ATTN_OK) {
        free(rows);
        return status;
    }
    *padded_rows = rows;
    return ATTN_OK;
}

attn_status attn_model_file_to_llmc(const char *model_path, const char *llmc_path,
                                    attn_model_config *config)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(model_path);
    ATTN_CHECK_NOT_NULL(llmc_path);
    attn_tensor_file *file = NULL;
    attn_model *model = NULL;
    float *padded = NULL;
    int64_t padded_vocab = 0;
    attn_status status = attn_tensor_file_open(model_path, &file);
    if (status == ATTN_OK)
        status = attn_model_from_file(file, model_path, &model);
    if (status == ATTN_OK)
        status = check_representable(fn, model_path, &model->config);
    if (status == ATTN_OK)
        status = stored_padding(fn, file, model_path, &model->config, &padded_vocab, &padded);
    if (status == ATTN_OK)
        status = attn_model_save_llmc(model, llmc_path, padded_vocab, padded);
    if (status == ATTN_OK && config != NULL)
        *config = model->config;
    free(padded);
    attn_model_destroy(model);
    attn_tensor_file_close(file);
    return status;
}
