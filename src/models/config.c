/* Model configs: defaults, validation, and JSON both ways (cJSON). */
#include "core/internal.h"
#include "attn/attn_models.h"
#include "models/models_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names of enumerations ---------------------------------------------------------- */

static const char *const arch_names[] = {"transformer", "transformer_classifier", "transformer_lm",
                                         "rnn",         "transformer_mlm",        "rnn_classifier"};
static const char *const activation_names[] = {"relu", "gelu", "gelu_tanh"};
static const char *const layout_names[] = {"interleaved", "concatenated"};
static const char *const positions_names[] = {"sinusoidal", "learned", "rope"};
static const char *const norm_names[] = {"layer_norm", "rms_norm"};
static const char *const ffn_names[] = {"mlp", "swiglu"};
static const char *const pooling_names[] = {"mean", "cls", "attention"};
static const char *const cell_names[] = {"gru", "lstm"};
static const char *const attention_names[] = {"bahdanau", "luong-dot", "luong-general",
                                              "luong-concat", "none"};
static const char *const local_names[] = {"none", "m", "p"};

#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* ---- which fields each architecture has ----------------------------------------------- */

typedef enum field_kind { FIELD_INT, FIELD_NUMBER, FIELD_BOOL, FIELD_ENUM } field_kind;

enum {
    ARCH_TRANSFORMER = 1 << ATTN_ARCH_TRANSFORMER,
    ARCH_CLASSIFIER = 1 << ATTN_ARCH_TRANSFORMER_CLASSIFIER,
    ARCH_LM = 1 << ATTN_ARCH_TRANSFORMER_LM,
    ARCH_MLM = 1 << ATTN_ARCH_TRANSFORMER_MLM,
    ARCH_ALL = ARCH_TRANSFORMER | ARCH_CLASSIFIER | ARCH_LM | ARCH_MLM, /* the Transformer family */
    ARCH_ENCODER = ARCH_TRANSFORMER | ARCH_CLASSIFIER | ARCH_MLM,       /* with an encoder */
    ARCH_RNN = 1 << ATTN_ARCH_RNN,
    ARCH_RNN_CLASSIFIER = 1 << ATTN_ARCH_RNN_CLASSIFIER,
    ARCH_CLASSIFIERS = ARCH_CLASSIFIER | ARCH_RNN_CLASSIFIER,
    ARCH_RECURRENT = ARCH_RNN | ARCH_RNN_CLASSIFIER /* the rnn encoder's fields */
};

typedef struct field_spec {
    const char *name;
    field_kind kind;
    int archs;                /* ARCH_* bits */
    size_t offset;            /* into attn_model_config */
    const char *const *names; /* FIELD_ENUM: the JSON strings, by value */
    int n_names;
} field_spec;

#define FIELD(name, kind, archs)                                                                   \
    {                                                                                              \
#name, kind, archs, offsetof(attn_model_config, name), NULL, 0                             \
    }
#define ENUM_FIELD(name, archs, table)                                                             \
    {                                                                                              \
#name, FIELD_ENUM, archs, offsetof(attn_model_config, name), table, COUNT(table)           \
    }

/* In the order the JSON is written. version and arch come first and are handled apart. */
static const field_spec fields[] = {
    FIELD(d_model, FIELD_INT, ARCH_ALL),
    FIELD(num_heads, FIELD_INT, ARCH_ALL),
    FIELD(ffn_dim, FIELD_INT, ARCH_ALL),
    FIELD(encoder_layers, FIELD_INT, ARCH_ENCODER),
    FIELD(decoder_layers, FIELD_INT, ARCH_TRANSFORMER | ARCH_LM),
    FIELD(dropout, FIELD_NUMBER, ARCH_ALL | ARCH_RECURRENT),
    ENUM_FIELD(activation, ARCH_ALL, activation_names),
    FIELD(norm_first, FIELD_BOOL, ARCH_ALL),
    FIELD(encoder_final_norm, FIELD_BOOL, ARCH_ENCODER),
    FIELD(decoder_final_norm, FIELD_BOOL, ARCH_TRANSFORMER | ARCH_LM),
    FIELD(src_vocab, FIELD_INT, ARCH_ENCODER | ARCH_RECURRENT),
    FIELD(tgt_vocab, FIELD_INT, ARCH_TRANSFORMER | ARCH_LM | ARCH_RNN),
    FIELD(num_classes, FIELD_INT, ARCH_CLASSIFIERS),
    ENUM_FIELD(pooling, ARCH_CLASSIFIERS, pooling_names),
    FIELD(share_embeddings, FIELD_BOOL, ARCH_TRANSFORMER),
    FIELD(tie_output, FIELD_BOOL, ARCH_TRANSFORMER | ARCH_LM),
    FIELD(output_bias, FIELD_BOOL, ARCH_ALL),
    FIELD(scale_embeddings, FIELD_BOOL, ARCH_ALL),
    ENUM_FIELD(positional_encoding, ARCH_ALL, layout_names),
    ENUM_FIELD(positions, ARCH_ALL, positions_names),
    FIELD(rope_base, FIELD_NUMBER, ARCH_ALL),
    ENUM_FIELD(norm, ARCH_ALL, norm_names),
    ENUM_FIELD(ffn, ARCH_ALL, ffn_names),
    FIELD(bias, FIELD_BOOL, ARCH_ALL),
    FIELD(max_len, FIELD_INT, ARCH_ALL | ARCH_RECURRENT),
    FIELD(layer_norm_eps, FIELD_NUMBER, ARCH_ALL),
    FIELD(label_smoothing, FIELD_NUMBER, ARCH_ALL | ARCH_RECURRENT),
    ENUM_FIELD(cell, ARCH_RECURRENT, cell_names),
    FIELD(layers, FIELD_INT, ARCH_RECURRENT),
    FIELD(hidden, FIELD_INT, ARCH_RECURRENT),
    FIELD(embedding_dim, FIELD_INT, ARCH_RECURRENT),
    FIELD(attention_dim, FIELD_INT, ARCH_RNN),
    FIELD(bidirectional, FIELD_BOOL, ARCH_RECURRENT),
    ENUM_FIELD(attention, ARCH_RNN, attention_names),
    ENUM_FIELD(local, ARCH_RNN, local_names),
    FIELD(window, FIELD_INT, ARCH_RNN),
    FIELD(input_feeding, FIELD_BOOL, ARCH_RNN),
    FIELD(reverse_source, FIELD_BOOL, ARCH_RNN),
};

/* Enumerations and bools are read and written as int. */
_Static_assert(sizeof(attn_activation) == sizeof(int) && sizeof(attn_pe_layout) == sizeof(int) &&
                   sizeof(attn_positions) == sizeof(int) && sizeof(attn_norm_kind) == sizeof(int) &&
                   sizeof(attn_ffn_kind) == sizeof(int) && sizeof(attn_pooling) == sizeof(int),
               "enumerations in attn_model_config must be int-sized");
_Static_assert(sizeof(attn_rnn_cell) == sizeof(int) && sizeof(attn_rnn_attention) == sizeof(int) &&
                   sizeof(attn_rnn_local) == sizeof(int),
               "enumerations in attn_model_config must be int-sized");

static int has_field(const field_spec *f, attn_model_arch arch)
{
    return (f->archs >> arch) & 1;
}

int attn_model_arch_is_classifier(attn_model_arch arch)
{
    return arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER || arch == ATTN_ARCH_RNN_CLASSIFIER;
}

int64_t attn_model_config_source_limit(const attn_model_config *c)
{
    const int cls =
        c->arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER && c->pooling == ATTN_POOLING_CLS ? 1 : 0;
    return c->max_len - cls;
}

/* The architectures built on the rnn encoder (rnn_config.c checks their fields). */
static int is_recurrent(attn_model_arch arch)
{
    return arch == ATTN_ARCH_RNN || arch == ATTN_ARCH_RNN_CLASSIFIER;
}

static int64_t *int_at(attn_model_config *c, const field_spec *f)
{
    return (int64_t *)(void *)((char *)c + f->offset);
}
static double *number_at(attn_model_config *c, const field_spec *f)
{
    return (double *)(void *)((char *)c + f->offset);
}
static int *small_at(attn_model_config *c, const field_spec *f)
{
    return (int *)(void *)((char *)c + f->offset);
}

/* ---- defaults and validation -------------------------------------------------------- */

attn_model_config attn_model_config_default(attn_model_arch arch)
{
    attn_model_config c;
    memset(&c, 0, sizeof c);
    if ((int)arch < 0 || (int)arch >= COUNT(arch_names))
        arch = ATTN_ARCH_TRANSFORMER;
    if (is_recurrent(arch))
        return attn_rnn_config_default(arch);
    c.version = ATTN_MODEL_CONFIG_VERSION;
    c.arch = arch;
    c.d_model = 512;
    c.num_heads = 8;
    c.ffn_dim = 2048;
    c.dropout = 0.1;
    c.activation = ATTN_ACT_RELU;
    c.norm_first = 0;
    c.scale_embeddings = 1;
    c.positional_encoding = ATTN_PE_INTERLEAVED;
    c.positions = ATTN_POSITIONS_SINUSOIDAL;
    c.rope_base = 10000.0;
    c.norm = ATTN_NORM_LAYER;
    c.ffn = ATTN_FFN_MLP;
    c.bias = 1;
    c.output_bias = 1;
    c.max_len = 1024;
    c.layer_norm_eps = 1e-5;
    c.label_smoothing = 0.1;
    if (arch != ATTN_ARCH_TRANSFORMER_LM) {
        c.encoder_layers = 6;
        c.encoder_final_norm = 1;
    }
    if (arch != ATTN_ARCH_TRANSFORMER_CLASSIFIER && arch != ATTN_ARCH_TRANSFORMER_MLM) {
        c.decoder_layers = 6;
        c.decoder_final_norm = 1;
        c.tie_output = 1;
    }
    return c;
}

/* Largest size a field may hold: keeps products of sizes far from overflow. */
#define MAX_SIZE ((int64_t)1 << 30)

attn_status attn_model_config_validate(const attn_model_config *config)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(config);
    attn_model_config c = *config;
    if (c.version > ATTN_MODEL_CONFIG_VERSION)
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "%s: config version %d is newer than this build's %d", fn, c.version,
                         ATTN_MODEL_CONFIG_VERSION);
    ATTN_CHECK_ARG(c.version >= 1, "%s: version must be >= 1, got %d", fn, c.version);
    ATTN_CHECK_ARG((int)c.arch >= 0 && (int)c.arch < COUNT(arch_names), "%s: unknown arch %d", fn,
                   (int)c.arch);
    const attn_model_arch arch = c.arch;
    for (int i = 0; i < COUNT(fields); i++) {
        const field_spec *f = &fields[i];
        int present = has_field(f, arch);
        switch (f->kind) {
        case FIELD_INT: {
            int64_t v = *int_at(&c, f);
            if (!present)
                ATTN_CHECK_ARG(v == 0, "%s: %s does not apply to %s and must be 0, got %lld", fn,
                               f->name, arch_names[arch], (long long)v);
            else if (strcmp(f->name, "encoder_layers") == 0 ||
                     strcmp(f->name, "decoder_layers") == 0)
                ATTN_CHECK_ARG(v >= 1 && v <= 1024, "%s: %s must be in [1, 1024], got %lld", fn,
                               f->name, (long long)v);
            else
                ATTN_CHECK_ARG(v >= 1 && v <= MAX_SIZE, "%s: %s must be in [1, %lld], got %lld", fn,
                               f->name, (long long)MAX_SIZE, (long long)v);
            break;
        }
        case FIELD_NUMBER: {
            double v = *number_at(&c, f);
            ATTN_CHECK_ARG(isfinite(v), "%s: %s must be finite", fn, f->name);
            break;
        }
        case FIELD_BOOL: {
            int v = *small_at(&c, f);
            ATTN_CHECK_ARG(v == 0 || v == 1, "%s: %s must be 0 or 1, got %d", fn, f->name, v);
            if (!present)
                ATTN_CHECK_ARG(v == 0, "%s: %s does not apply to %s and must be 0", fn, f->name,
                               arch_names[arch]);
            break;
        }
        case FIELD_ENUM: {
            int v = *small_at(&c, f);
            ATTN_CHECK_ARG(v >= 0 && v < f->n_names, "%s: unknown %s %d", fn, f->name, v);
            /* The first name is the value an architecture without the field holds. */
            if (!present && f->archs == ARCH_CLASSIFIERS)
                ATTN_CHECK_ARG(v == 0, "%s: %s does not apply to %s and must be \"%s\"", fn,
                               f->name, arch_names[arch], f->names[0]);
            break;
        }
        }
    }
    if (is_recurrent(arch))
        ATTN_TRY(attn_rnn_config_validate(fn, &c));
    else
        ATTN_CHECK_ARG(c.d_model % c.num_heads == 0,
                       "%s: num_heads %lld does not divide d_model %lld", fn,
                       (long long)c.num_heads, (long long)c.d_model);
    ATTN_CHECK_ARG(c.dropout >= 0.0 && c.dropout < 1.0, "%s: dropout must be in [0, 1), got %g", fn,
                   c.dropout);
    ATTN_CHECK_ARG(is_recurrent(arch) || (c.layer_norm_eps > 0.0 && c.layer_norm_eps < 1.0),
                   "%s: layer_norm_eps must be in (0, 1), got %g", fn, c.layer_norm_eps);
    if (!is_recurrent(arch)) {
        ATTN_CHECK_ARG(c.rope_base > 0.0, "%s: rope_base must be > 0, got %g", fn, c.rope_base);
        ATTN_CHECK_ARG(c.positions != ATTN_POSITIONS_ROPE || (c.d_model / c.num_heads) % 2 == 0,
                       "%s: positions \"rope\" turns pairs of features, so the head size "
                       "d_model / num_heads = %lld must be even",
                       fn, (long long)(c.d_model / c.num_heads));
    } else {
        ATTN_CHECK_ARG(c.rope_base == 0.0, "%s: rope_base does not apply to %s and must be 0", fn,
                       arch_names[arch]);
    }
    ATTN_CHECK_ARG(c.label_smoothing >= 0.0 && c.label_smoothing <= 1.0,
                   "%s: label_smoothing must be in [0, 1], got %g", fn, c.label_smoothing);
    ATTN_CHECK_ARG(!c.share_embeddings || c.src_vocab == c.tgt_vocab,
                   "%s: share_embeddings needs src_vocab == tgt_vocab, got %lld and %lld", fn,
                   (long long)c.src_vocab, (long long)c.tgt_vocab);
    return ATTN_OK;
}

/* ---- to JSON ------------------------------------------------------------------------- */

attn_status attn_model_config_to_json(const attn_model_config *config, char **json)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(json);
    *json = NULL;
    ATTN_TRY(attn_model_config_validate(config));
    attn_model_config c = *config;
    cJSON *root = cJSON_CreateObject();
    int ok = root != NULL && cJSON_AddNumberToObject(root, "version", c.version) != NULL &&
             cJSON_AddStringToObject(root, "arch", arch_names[c.arch]) != NULL;
    for (int i = 0; ok && i < COUNT(fields); i++) {
        const field_spec *f = &fields[i];
        if (!has_field(f, c.arch))
            continue;
        switch (f->kind) {
        case FIELD_INT:
            ok = cJSON_AddNumberToObject(root, f->name, (double)*int_at(&c, f)) != NULL;
            break;
        case FIELD_NUMBER:
            ok = attn_json_add_exact_number(root, f->name, *number_at(&c, f));
            break;
        case FIELD_BOOL:
            ok = cJSON_AddBoolToObject(root, f->name, *small_at(&c, f)) != NULL;
            break;
        case FIELD_ENUM:
            ok = cJSON_AddStringToObject(root, f->name, f->names[*small_at(&c, f)]) != NULL;
            break;
        }
    }
    *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (*json == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    return ATTN_OK;
}

/* ---- from JSON ----------------------------------------------------------------------- */

static int enum_value(const char *const *names, int n, const char *text)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], text) == 0)
            return i;
    return -1;
}

/* "a", "b" or "c" for a message. */
static void list_names(const char *const *names, int n, char *out, size_t size)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < n && used < size; i++)
        used += (size_t)snprintf(out + used, size - used, "%s\"%s\"",
                                 i == 0       ? ""
                                 : i == n - 1 ? " or "
                                              : ", ",
                                 names[i]);
}

static attn_status read_field(const field_spec *f, const cJSON *item, attn_model_config *c)
{
    const char *fn = "attn_model_config_from_json";
    switch (f->kind) {
    case FIELD_INT: {
        double v = item->valuedouble;
        if (!cJSON_IsNumber(item) || v != floor(v) || fabs(v) > 9007199254740992.0)
            return attn_fail(ATTN_ERR_FORMAT, "%s: \"%s\" must be an integer", fn, f->name);
        *int_at(c, f) = (int64_t)v;
        return ATTN_OK;
    }
    case FIELD_NUMBER:
        if (!cJSON_IsNumber(item))
            return attn_fail(ATTN_ERR_FORMAT, "%s: \"%s\" must be a number", fn, f->name);
        *number_at(c, f) = item->valuedouble;
        return ATTN_OK;
    case FIELD_BOOL:
        if (!cJSON_IsBool(item))
            return attn_fail(ATTN_ERR_FORMAT, "%s: \"%s\" must be true or false", fn, f->name);
        *small_at(c, f) = cJSON_IsTrue(item) ? 1 : 0;
        return ATTN_OK;
    case FIELD_ENUM: {
        char allowed[128];
        list_names(f->names, f->n_names, allowed, sizeof allowed);
        int v = cJSON_IsString(item) ? enum_value(f->names, f->n_names, item->valuestring) : -1;
        if (v < 0)
            return attn_fail(ATTN_ERR_FORMAT, "%s: \"%s\" must be %s", fn, f->name, allowed);
        *small_at(c, f) = v;
        return ATTN_OK;
    }
    }
    return attn_fail(ATTN_ERR_INTERNAL, "%s: bad field table", fn);
}

static attn_status parse(const cJSON *root, attn_model_config *config)
{
    const char *fn = "attn_model_config_from_json";
    if (!cJSON_IsObject(root))
        return attn_fail(ATTN_ERR_FORMAT, "%s: the config must be a JSON object", fn);
    /* Duplicate keys: cJSON keeps both, so look for them before reading anything. */
    for (const cJSON *a = root->child; a != NULL; a = a->next)
        for (const cJSON *b = a->next; b != NULL; b = b->next)
            if (strcmp(a->string, b->string) == 0)
                return attn_fail(ATTN_ERR_FORMAT, "%s: field \"%s\" appears twice", fn, a->string);

    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (version == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: missing field \"version\"", fn);
    if (!cJSON_IsNumber(version) || version->valuedouble != floor(version->valuedouble) ||
        version->valuedouble < 1 || version->valuedouble > 1e6)
        return attn_fail(ATTN_ERR_FORMAT, "%s: \"version\" must be a positive integer", fn);
    if (version->valuedouble > ATTN_MODEL_CONFIG_VERSION)
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "%s: config version %d is newer than this build's %d", fn,
                         (int)version->valuedouble, ATTN_MODEL_CONFIG_VERSION);
    const cJSON *arch_item = cJSON_GetObjectItemCaseSensitive(root, "arch");
    char allowed[160];
    list_names(arch_names, COUNT(arch_names), allowed, sizeof allowed);
    if (arch_item == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: missing field \"arch\" (%s)", fn, allowed);
    int arch = cJSON_IsString(arch_item)
                   ? enum_value(arch_names, COUNT(arch_names), arch_item->valuestring)
                   : -1;
    if (arch < 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: \"arch\" must be %s", fn, allowed);

    attn_model_config c = attn_model_config_default((attn_model_arch)arch);
    c.version = (int)version->valuedouble;
    for (const cJSON *item = root->child; item != NULL; item = item->next) {
        if (strcmp(item->string, "version") == 0 || strcmp(item->string, "arch") == 0)
            continue;
        const field_spec *f = NULL;
        for (int i = 0; i < COUNT(fields) && f == NULL; i++)
            if (strcmp(fields[i].name, item->string) == 0)
                f = &fields[i];
        if (f == NULL)
            return attn_fail(ATTN_ERR_FORMAT, "%s: unknown field \"%s\"", fn, item->string);
        if (!has_field(f, (attn_model_arch)arch))
            return attn_fail(ATTN_ERR_FORMAT, "%s: field \"%s\" does not apply to arch \"%s\"", fn,
                             item->string, arch_names[arch]);
        ATTN_TRY(read_field(f, item, &c));
    }
    ATTN_TRY(attn_model_config_validate(&c));
    *config = c;
    return ATTN_OK;
}

attn_status attn_model_config_from_json(const char *json, attn_model_config *config)
{
    ATTN_CHECK_NOT_NULL(json);
    ATTN_CHECK_NOT_NULL(config);
    cJSON *root = cJSON_ParseWithOpts(json, NULL, 1); /* nothing may follow the object */
    if (root == NULL)
        return attn_fail(ATTN_ERR_FORMAT,
                         "attn_model_config_from_json: not valid JSON (near \"%.20s\")",
                         cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() : json);
    attn_status status = parse(root, config);
    cJSON_Delete(root);
    return status;
}
