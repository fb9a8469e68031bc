/* Models in bf16 or int8 for inference: the stored weights, their files, and the copies the
 * step decoder and the RNN models multiply with (models_internal.h).
 *
 * Every matrix (parameter of two dimensions: projections, embeddings, the output layer) is
 * stored in the lower precision; vectors (biases, layer norms) stay fp32, as they are small
 * and their error is not averaged away by a dot product. The fp32 values the rest of the
 * model reads (the encoder, the attention maps, the products an RNN model leaves in fp32) are
 * overwritten by the stored values, so every path computes with the same weights and a model
 * quantized at load equals the same model read from its quantized file. The parameter store
 * gets the stored matrices too (attn_ad_params_set_stored), so that the graph's linear
 * operations and RNN cell steps of an RNN model multiply them. */
#include "models/models_internal.h"

#include "autodiff/autodiff_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int precision_rank(attn_precision p)
{
    return p == ATTN_PRECISION_INT8 ? 2 : p == ATTN_PRECISION_BF16 ? 1 : 0;
}

static int is_matrix(const attn_param_info *info)
{
    return info->ndim == 2;
}

void attn_model_free_quantized(attn_model *model)
{
    for (int64_t l = 0; l < model->n_decoder_layers; l++) {
        if (model->cross_q != NULL)
            attn_quantized_matrix_free(&model->cross_q[l]);
        if (model->cross_kv != NULL)
            attn_quantized_matrix_free(&model->cross_kv[l]);
    }
    free(model->cross_q);
    free(model->cross_kv);
    model->cross_q = NULL;
    model->cross_kv = NULL;
    if (model->quantized == NULL)
        return;
    attn_ad_params_set_stored(model->params, NULL);
    const size_t count = attn_params_count(model->params);
    for (size_t i = 0; i < count; i++)
        attn_quantized_matrix_free(&model->quantized[i]);
    free(model->quantized);
    model->quantized = NULL;
}

/* The parameter's values become the stored ones. */
static void write_back(attn_model *model, attn_param_id id, const attn_quantized_matrix *m)
{
    float *values = attn_params_data(model->params, id, ATTN_PARAM_VALUES);
    for (int64_t o = 0; o < m->out; o++)
        attn_quantized_matrix_float_row(m, o, values + o * m->in);
}

/* Rows [first, first + rows) of m as a matrix of their own: the same stored values and
 * scales. */
static attn_status row_range(const char *fn, const attn_quantized_matrix *m, int64_t first,
                             int64_t rows, attn_quantized_matrix *out)
{
    if (m->precision == ATTN_PRECISION_BF16) {
        float *values = malloc((size_t)(rows * m->in) * sizeof(float));
        if (values == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        for (int64_t o = 0; o < rows; o++)
            attn_quantized_matrix_float_row(m, first + o, values + o * m->in);
        const attn_status status =
            attn_quantized_matrix_create(fn, m->precision, rows, m->in, values, out);
        free(values);
        return status;
    }
    int8_t *q = malloc((size_t)(rows * m->in));
    if (q == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t o = 0; o < rows; o++)
        attn_quantized_matrix_int8_row(m, first + o, q + o * m->in);
    const attn_status status =
        attn_quantized_matrix_from_int8(fn, rows, m->in, q, m->scale + first, out);
    free(q);
    return status;
}

/* The packed [3E, E] cross-attention projection is multiplied in two parts: the queries
 * (rows [0, E)) at every step, the keys and values (rows [E, 3E)) once per source. */
static attn_status split_cross_projections(const char *fn, attn_model *model)
{
    if (model->n_decoder_layers == 0)
        return ATTN_OK;
    model->cross_q = calloc((size_t)model->n_decoder_layers, sizeof *model->cross_q);
    model->cross_kv = calloc((size_t)model->n_decoder_layers, sizeof *model->cross_kv);
    if (model->cross_q == NULL || model->cross_kv == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t l = 0; l < model->n_decoder_layers; l++) {
        const attn_nn_mha *mha = &model->decoder_layers[l].multihead_attn;
        const attn_quantized_matrix *packed = &model->quantized[mha->in_proj_weight];
        const int64_t E = mha->embed_dim;
        ATTN_TRY(row_range(fn, packed, 0, E, &model->cross_q[l]));
        ATTN_TRY(row_range(fn, packed, E, 2 * E, &model->cross_kv[l]));
    }
    return ATTN_OK;
}

static attn_status allocate_table(const char *fn, attn_model *model)
{
    const size_t count = attn_params_count(model->params);
    attn_quantized_matrix *table = calloc(count > 0 ? count : 1, sizeof *table);
    if (table == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_model_free_quantized(model);
    model->quantized = table;
    attn_ad_params_set_stored(model->params, table);
    return ATTN_OK;
}

attn_status attn_model_set_precision(attn_model *model, attn_precision precision)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_ARG(precision_rank(precision) > 0 || precision == ATTN_PRECISION_FP32 ||
                       precision == ATTN_PRECISION_AUTO,
                   "%s: unknown precision %d", fn, (int)precision);
    /* auto never raises a quantized model (its fp32 weights are gone) nor lowers one to int8. */
    if (precision == ATTN_PRECISION_AUTO)
        precision = model->precision != ATTN_PRECISION_FP32 ? model->precision
                                                            : attn_precision_resolve(precision);
    if (precision == model->precision)
        return ATTN_OK;
    if (precision_rank(precision) < precision_rank(model->precision))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: the model holds %s weights, which cannot run at %s: use the fp32 "
                         "model file it was quantized from",
                         fn, attn_precision_name(model->precision), attn_precision_name(precision));
    ATTN_TRY(allocate_table(fn, model));
    const size_t count = attn_params_count(model->params);
    for (size_t i = 0; i < count; i++) {
        attn_param_info info;
        ATTN_TRY(attn_params_info(model->params, (attn_param_id)i, &info));
        if (!is_matrix(&info))
            continue;
        const float *values = attn_params_data(model->params, (attn_param_id)i, ATTN_PARAM_VALUES);
        attn_status status = attn_quantized_matrix_create(
            fn, precision, info.shape[0], info.shape[1], values, &model->quantized[i]);
        if (status != ATTN_OK) {
            attn_model_free_quantized(model);
            return status;
        }
        write_back(model, (attn_param_id)i, &model->quantized[i]);
    }
    const attn_status status = split_cross_projections(fn, model);
    if (status != ATTN_OK) {
        attn_model_free_quantized(model);
        return status;
    }
    model->precision = precision;
    return ATTN_OK;
}

attn_precision attn_model_enter_precision(const attn_model *model, attn_graph *graph)
{
    const attn_precision previous = attn_graph_precision(graph);
    if (model->precision != ATTN_PRECISION_FP32)
        attn_graph_set_precision(graph, model->precision);
    return previous;
}

attn_precision attn_model_precision(const attn_model *model)
{
    return model != NULL ? model->precision : ATTN_PRECISION_FP32;
}

const attn_quantized_matrix *attn_model_quantized(const attn_model *model, attn_param_id id)
{
    if (model->quantized == NULL || id < 0 || model->quantized[id].packed == NULL)
        return NULL;
    return &model->quantized[id];
}

/* ---- files --------------------------------------------------------------------------------- */

/* Names "<parameter>.scale", one block. */
typedef struct file_buffers {
    attn_named_tensor *tensors;
    char *names;
    void *stored; /* the int8 or bf16 matrices, one block */
} file_buffers;

static void free_buffers(file_buffers *f)
{
    free(f->tensors);
    free(f->names);
    free(f->stored);
}

enum { SCALE_NAME_MAX = 512 };

attn_status attn_model_save_quantized(attn_model *model, const char *path,
                                      const attn_metadata_entry *metadata, size_t n_metadata)
{
    const char *fn = "attn_model_save";
    const size_t count = attn_params_count(model->params);
    file_buffers f = {calloc(2 * count + 1, sizeof(attn_named_tensor)),
                      calloc(count + 1, SCALE_NAME_MAX), NULL};
    size_t stored_bytes = 0;
    for (size_t i = 0; i < count; i++)
        if (model->quantized[i].packed != NULL)
            stored_bytes += (size_t)(model->quantized[i].out * model->quantized[i].in) *
                            (model->precision == ATTN_PRECISION_INT8 ? 1 : 2);
    f.stored = malloc(stored_bytes > 0 ? stored_bytes : 1);
    if (f.tensors == NULL || f.names == NULL || f.stored == NULL) {
        free_buffers(&f);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    size_t n = 0;
    unsigned char *next = f.stored;
    attn_status status = ATTN_OK;
    for (size_t i = 0; i < count && status == ATTN_OK; i++) {
        attn_param_info info;
        status = attn_params_info(model->params, (attn_param_id)i, &info);
        if (status != ATTN_OK)
            break;
        attn_named_tensor *t = &f.tensors[n++];
        t->name = info.name;
        t->ndim = info.ndim;
        memcpy(t->shape, info.shape, sizeof t->shape);
        const attn_quantized_matrix *m = &model->quantized[i];
        if (m->packed == NULL) {
            t->dtype = ATTN_DTYPE_F32;
            t->data = attn_params_data(model->params, (attn_param_id)i, ATTN_PARAM_VALUES);
            continue;
        }
        t->data = next;
        if (m->precision == ATTN_PRECISION_BF16) {
            t->dtype = ATTN_DTYPE_BF16;
            for (int64_t o = 0; o < m->out; o++)
                attn_quantized_matrix_bf16_row(m, o, (uint16_t *)(void *)next + o * m->in);
            next += (size_t)(m->out * m->in) * 2;
            continue;
        }
        t->dtype = ATTN_DTYPE_I8;
        for (int64_t o = 0; o < m->out; o++)
            attn_quantized_matrix_int8_row(m, o, (int8_t *)next + o * m->in);
        next += (size_t)(m->out * m->in);
        char *scale_name = f.names + i * SCALE_NAME_MAX;
        if (snprintf(scale_name, SCALE_NAME_MAX, "%s%s", info.name, ATTN_MODEL_SCALE_SUFFIX) >=
            SCALE_NAME_MAX)
            status = attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: parameter name too long: %s", fn,
                               info.name);
        f.tensors[n++] = (attn_named_tensor){scale_name, ATTN_DTYPE_F32, 1, {m->out}, m->scale};
    }
    if (status == ATTN_OK)
        status = attn_tensor_file_write(path, f.tensors, n, metadata, n_metadata);
    free_buffers(&f);
    return status;
}

/* One matrix of an int8 file: the I8 values and their row scales. */
static attn_status load_int8(const char *fn, attn_model *model, const attn_tensor_file *file,
                             attn_param_id id, const attn_param_info *info)
{
    const int64_t out = info->shape[0], in = info->shape[1];
    char scale_name[SCALE_NAME_MAX];
    snprintf(scale_name, sizeof scale_name, "%s%s", info->name, ATTN_MODEL_SCALE_SUFFIX);
    int8_t *q = malloc((size_t)(out * in > 0 ? out * in : 1));
    float *scale = malloc((size_t)(out > 0 ? out : 1) * sizeof(float));
    attn_status status = q != NULL && scale != NULL
                             ? ATTN_OK
                             : attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    if (status == ATTN_OK)
        status = attn_tensor_file_read_raw(file, info->name, ATTN_DTYPE_I8, 2, info->shape, q);
    if (status == ATTN_OK)
        status = attn_tensor_file_read_raw(file, scale_name, ATTN_DTYPE_F32, 1, info->shape, scale);
    if (status == ATTN_OK)
        status = attn_quantized_matrix_from_int8(fn, out, in, q, scale, &model->quantized[id]);
    if (status == ATTN_OK)
        write_back(model, id, &model->quantized[id]);
    free(q);
    free(scale);
    return status;
}

attn_status attn_model_load_quantized(attn_model *model, const attn_tensor_file *file,
                                      attn_precision precision)
{
    const char *fn = "attn_model_load";
    ATTN_TRY(allocate_table(fn, model));
    const size_t count = attn_params_count(model->params);
    attn_status status = ATTN_OK;
    for (size_t i = 0; i < count && status == ATTN_OK; i++) {
        attn_param_info info;
        status = attn_params_info(model->params, (attn_param_id)i, &info);
        float *values = attn_params_data(model->params, (attn_param_id)i, ATTN_PARAM_VALUES);
        if (status != ATTN_OK)
            break;
        if (!is_matrix(&info)) {
            status = attn_tensor_file_read_f32(file, info.name, info.ndim, info.shape, values);
        } else if (precision == ATTN_PRECISION_INT8) {
            status = load_int8(fn, model, file, (attn_param_id)i, &info);
        } else {
            /* bf16 values read as fp32 are exact, and rounding them again changes nothing */
            status = attn_tensor_file_read_f32(file, info.name, info.ndim, info.shape, values);
            if (status == ATTN_OK)
                status = attn_quantized_matrix_create(fn, precision, info.shape[0], info.shape[1],
                                                      values, &model->quantized[i]);
        }
    }
    if (status == ATTN_OK)
        status = split_cross_projections(fn, model);
    if (status != ATTN_OK) {
        attn_model_free_quantized(model);
        return status;
    }
    model->precision = precision;
    return ATTN_OK;
}
