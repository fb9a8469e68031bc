/* The Transformer family: encoder-decoder, encoder-only classifier and decoder-only language
 * model, built from the nn layers; the classifiers' pooled head (over a Transformer's or an
 * rnn encoder's states); saving and loading with the config in the metadata. */
#include "core/internal.h"
#include "attn/attn_models.h"
#include "models/models_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- construction ------------------------------------------------------------------------ */

/* A final norm of the kind of the blocks' (a LayerNorm's bias unless the model has none). */
static attn_status register_final_norm(attn_model *m, const char *name, attn_nn_layer_norm *norm)
{
    const attn_model_config *c = &m->config;
    return attn_nn_norm_register(norm, m->params, name, c->norm, c->d_model,
                                 (float)c->layer_norm_eps, c->norm == ATTN_NORM_LAYER && c->bias);
}

static attn_status register_stack(attn_model *m, const attn_nn_block_config *block)
{
    const attn_model_config *c = &m->config;
    const char *fn = "attn_model_create";
    char name[ATTN_NN_MAX_NAME];
    int lm = c->arch == ATTN_ARCH_TRANSFORMER_LM;
    m->n_blocks = lm ? c->decoder_layers : c->encoder_layers;
    m->blocks = calloc((size_t)m->n_blocks, sizeof *m->blocks);
    if (m->blocks == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int64_t i = 0; i < m->n_blocks; i++) {
        snprintf(name, sizeof name, "%s.layers.%lld", lm ? "decoder" : "encoder", (long long)i);
        ATTN_TRY(attn_nn_encoder_layer_register(&m->blocks[i], m->params, name, block));
    }
    if (c->encoder_final_norm) {
        m->has_encoder_norm = 1;
        ATTN_TRY(register_final_norm(m, "encoder.norm", &m->encoder_norm));
    }
    if (c->arch == ATTN_ARCH_TRANSFORMER) {
        m->n_decoder_layers = c->decoder_layers;
        m->decoder_layers = calloc((size_t)m->n_decoder_layers, sizeof *m->decoder_layers);
        if (m->decoder_layers == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        for (int64_t i = 0; i < m->n_decoder_layers; i++) {
            snprintf(name, sizeof name, "decoder.layers.%lld", (long long)i);
            ATTN_TRY(attn_nn_decoder_layer_register(&m->decoder_layers[i], m->params, name, block));
        }
    }
    if (c->decoder_final_norm) {
        m->has_decoder_norm = 1;
        ATTN_TRY(register_final_norm(m, "decoder.norm", &m->decoder_norm));
    }
    return ATTN_OK;
}

/* A table [max_len, d_model] of learned positions. Initialised N(0, std) with std half the
 * token embeddings' as they enter the sum (their N(0, 1/sqrt(d_model)) times the embedding
 * scale): GPT-2's ratio (wte 0.02, wpe 0.01), so positions start as a small perturbation of
 * the tokens whatever d_model and scale_embeddings are, and training sizes them. */
static attn_status register_learned_positions(attn_model *m, const char *name,
                                              attn_nn_embedding *table)
{
    const attn_model_config *c = &m->config;
    const int64_t shape[2] = {c->max_len, c->d_model};
    const double token_std = attn_model_embedding_scale(c) / sqrt((double)c->d_model);
    table->vocab = c->max_len;
    table->dim = c->d_model;
    return attn_params_add(m->params, name, 2, shape, attn_init_normal((float)(0.5 * token_std)),
                           &table->weight);
}

/* The classifiers' head over states of width `width`: attention pooling's W, b and q (with
 * pooling "attention"), then the linear layer to the classes. */
static attn_status register_classifier_head(attn_model *m, int64_t width, int output_bias)
{
    const attn_model_config *c = &m->config;
    if (c->pooling == ATTN_POOLING_ATTENTION) {
        ATTN_TRY(
            attn_nn_linear_register(&m->pool_proj, m->params, "pooling.proj", width, width, 1));
        /* As additive attention's v: U(-1/sqrt(d), 1/sqrt(d)), so the first scores are
         * of order one whatever the width. */
        const int64_t query_shape[2] = {1, width};
        ATTN_TRY(attn_params_add(m->params, "pooling.query", 2, query_shape,
                                 attn_init_uniform((float)(1.0 / sqrt((double)width))),
                                 &m->pool_query));
    }
    return attn_nn_linear_register(&m->classifier, m->params, "classifier", width, c->num_classes,
                                   output_bias);
}

static attn_status build(attn_model *m)
{
    const attn_model_config *c = &m->config;
    ATTN_TRY(attn_params_create(&m->params));
    switch (c->arch) {
    case ATTN_ARCH_TRANSFORMER:
        if (c->share_embeddings) {
            ATTN_TRY(attn_nn_embedding_register(&m->src_embed, m->params, "embed", c->src_vocab,
                                                c->d_model));
            m->tgt_embed = m->src_embed;
        } else {
            ATTN_TRY(attn_nn_embedding_register(&m->src_embed, m->params, "src_embed", c->src_vocab,
                                                c->d_model));
            ATTN_TRY(attn_nn_embedding_register(&m->tgt_embed, m->params, "tgt_embed", c->tgt_vocab,
                                                c->d_model));
        }
        break;
    case ATTN_ARCH_TRANSFORMER_CLASSIFIER:
    case ATTN_ARCH_TRANSFORMER_MLM:
        ATTN_TRY(attn_nn_embedding_register(&m->src_embed, m->params, "embed", c->src_vocab,
                                            c->d_model));
        break;
    case ATTN_ARCH_TRANSFORMER_LM:
        ATTN_TRY(attn_nn_embedding_register(&m->tgt_embed, m->params, "embed", c->tgt_vocab,
                                            c->d_model));
        break;
    case ATTN_ARCH_RNN:
        ATTN_TRY(attn_rnn_model_build(c, m->params, &m->rnn));
        return attn_params_finalize(m->params);
    case ATTN_ARCH_RNN_CLASSIFIER:
        /* Yang et al.'s classifier has a bias everywhere, as the rnn's layers have. */
        ATTN_TRY(attn_rnn_model_build(c, m->params, &m->rnn));
        ATTN_TRY(register_classifier_head(m, attn_rnn_model_annotation_dim(m->rnn), 1));
        return attn_params_finalize(m->params);
    }
    if (c->positions == ATTN_POSITIONS_LEARNED) {
        if (c->arch == ATTN_ARCH_TRANSFORMER) {
            ATTN_TRY(register_learned_positions(m, "src_pos_embed.weight", &m->src_pos_embed));
            ATTN_TRY(register_learned_positions(m, "tgt_pos_embed.weight", &m->tgt_pos_embed));
        } else {
            attn_nn_embedding *table =
                c->arch == ATTN_ARCH_TRANSFORMER_LM ? &m->tgt_pos_embed : &m->src_pos_embed;
            ATTN_TRY(register_learned_positions(m, "pos_embed.weight", table));
        }
    }
    attn_nn_block_config block = {c->d_model,
                                  c->num_heads,
                                  c->ffn_dim,
                                  (float)c->dropout,
                                  c->activation,
                                  c->norm_first,
                                  (float)c->layer_norm_eps,
                                  c->norm,
                                  c->ffn,
                                  !c->bias,
                                  c->positions == ATTN_POSITIONS_ROPE ? c->rope_base : 0.0};
    ATTN_TRY(register_stack(m, &block));
    if (c->arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER) {
        ATTN_TRY(register_classifier_head(m, c->d_model, c->output_bias));
    } else if (c->arch == ATTN_ARCH_TRANSFORMER_MLM) {
        /* Tied, as BERT's: the encoder keeps no weight that only pretraining uses, but the
         * bias (a classifier started from this model takes every other parameter). */
        ATTN_TRY(attn_nn_linear_register_tied(&m->generator, m->params, "generator",
                                              m->src_embed.weight, c->output_bias));
    } else if (c->tie_output) {
        ATTN_TRY(attn_nn_linear_register_tied(&m->generator, m->params, "generator",
                                              m->tgt_embed.weight, c->output_bias));
    } else {
        ATTN_TRY(attn_nn_linear_register(&m->generator, m->params, "generator", c->d_model,
                                         c->tgt_vocab, c->output_bias));
    }
    ATTN_TRY(attn_params_finalize(m->params));
    if (c->positions != ATTN_POSITIONS_SINUSOIDAL)
        return ATTN_OK;
    return attn_nn_positional_init(&m->positions, c->max_len, c->d_model, c->positional_encoding);
}

attn_status attn_model_create(const attn_model_config *config, attn_model **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_TRY(attn_model_config_validate(config));
    attn_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_model_create: out of memory");
    m->config = *config;
    attn_status status = build(m);
    if (status != ATTN_OK) {
        attn_model_destroy(m);
        return status;
    }
    *out = m;
    return ATTN_OK;
}

void attn_model_destroy(attn_model *model)
{
    if (model == NULL)
        return;
    attn_model_free_quantized(model);
    attn_params_destroy(model->params);
    attn_nn_positional_free(&model->positions);
    attn_rnn_model_free(model->rnn);
    free(model->blocks);
    free(model->decoder_layers);
    free(model);
}

attn_status attn_model_init(attn_model *model, uint64_t seed)
{
    ATTN_CHECK_NOT_NULL(model);
    return attn_params_init(model->params, seed);
}

const attn_model_config *attn_model_get_config(const attn_model *model)
{
    return model ? &model->config : NULL;
}

attn_params *attn_model_params(attn_model *model)
{
    return model ? model->params : NULL;
}

attn_rnn_model *attn_model_rnn_part(attn_model *model)
{
    return model ? model->rnn : NULL;
}

/* ---- saving and loading ------------------------------------------------------------------ */

attn_status attn_model_save(attn_model *model, const char *path, const attn_metadata_entry *extra,
                            size_t n_extra)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(path);
    ATTN_CHECK_ARG(n_extra == 0 || extra != NULL, "%s: extra must not be NULL", fn);
    for (size_t i = 0; i < n_extra; i++)
        ATTN_CHECK_ARG(extra[i].key == NULL ||
                           (strcmp(extra[i].key, ATTN_MODEL_CONFIG_KEY) != 0 &&
                            strcmp(extra[i].key, ATTN_MODEL_PRECISION_KEY) != 0),
                       "%s: extra metadata must not use the key \"%s\"", fn, extra[i].key);
    ATTN_CHECK_ARG(n_extra < 1024, "%s: too many metadata entries (%zu)", fn, n_extra);
    char *json = NULL;
    ATTN_TRY(attn_model_config_to_json(&model->config, &json));
    attn_metadata_entry *metadata = malloc((n_extra + 2) * sizeof *metadata);
    if (metadata == NULL) {
        free(json);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    }
    metadata[0].key = ATTN_MODEL_CONFIG_KEY;
    metadata[0].value = json;
    for (size_t i = 0; i < n_extra; i++)
        metadata[i + 1] = extra[i];
    attn_status status;
    if (model->precision == ATTN_PRECISION_FP32) {
        status = attn_params_save(model->params, path, metadata, n_extra + 1);
    } else {
        metadata[n_extra + 1].key = ATTN_MODEL_PRECISION_KEY;
        metadata[n_extra + 1].value = attn_precision_name(model->precision);
        status = attn_model_save_quantized(model, path, metadata, n_extra + 2);
    }
    free(metadata);
    free(json);
    return status;
}

attn_status attn_model_load_weights(attn_model *model, const attn_tensor_file *file)
{
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_ARG(model->precision == ATTN_PRECISION_FP32,
                   "attn_model_load_weights: the model runs in %s; load fp32 weights into an fp32 "
                   "model (its stored %s matrices would no longer match)",
                   attn_precision_name(model->precision), attn_precision_name(model->precision));
    return attn_params_load(model->params, file, ATTN_PARAM_VALUES, NULL);
}

attn_status attn_model_copy_encoder(attn_model *classifier, const attn_model *encoder,
                                    int64_t *encoder_floats)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(classifier);
    ATTN_CHECK_NOT_NULL(encoder);
    ATTN_CHECK_ARG(classifier->config.arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER &&
                       encoder->config.arch == ATTN_ARCH_TRANSFORMER_MLM,
                   "%s: copies a masked language model's encoder (arch transformer_mlm) into a "
                   "classifier (arch transformer_classifier)",
                   fn);
    ATTN_CHECK_ARG(classifier->precision == ATTN_PRECISION_FP32 &&
                       encoder->precision == ATTN_PRECISION_FP32,
                   "%s: both models must hold fp32 weights", fn);
    const attn_params *from = encoder->params;
    attn_params *to = classifier->params;
    /* The encoder's parameters are registered first in both, so they are a prefix of the
     * classifier's: the head starts at its first parameter the encoder lacks. */
    int64_t end = (int64_t)attn_params_buffer_floats(to);
    size_t copied = 0;
    for (size_t i = 0; i < attn_params_count(to); i++) {
        attn_param_info mine, theirs;
        attn_param_id id;
        ATTN_TRY(attn_params_info(to, (attn_param_id)i, &mine));
        if (attn_params_find(from, mine.name, &id) != ATTN_OK) {
            attn_clear_error();
            if (end == (int64_t)attn_params_buffer_floats(to))
                end = (int64_t)mine.offset;
            continue;
        }
        ATTN_TRY(attn_params_info(from, id, &theirs));
        if (theirs.ndim != mine.ndim ||
            memcmp(theirs.shape, mine.shape, (size_t)mine.ndim * sizeof *mine.shape) != 0)
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                             "%s: %s has another shape in the encoder (%lld values) than in the "
                             "classifier (%lld): make the classifier's config from the encoder's",
                             fn, mine.name, (long long)theirs.numel, (long long)mine.numel);
        ATTN_CHECK_ARG((int64_t)mine.offset < end,
                       "%s: the classifier's %s comes after its head; the encoder must come first",
                       fn, mine.name);
        memcpy(attn_params_data(to, (attn_param_id)i, ATTN_PARAM_VALUES),
               attn_params_data(from, id, ATTN_PARAM_VALUES), (size_t)mine.numel * sizeof(float));
        copied++;
    }
    /* Every encoder parameter has found its place; only the output bias stays behind. */
    attn_param_id bias;
    const size_t head = attn_params_find(from, "generator.bias", &bias) == ATTN_OK ? 1 : 0;
    attn_clear_error();
    if (copied + head != attn_params_count(from))
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: the classifier took %zu of the encoder's %zu parameters: make the "
                         "classifier's config from the encoder's",
                         fn, copied, attn_params_count(from) - head);
    attn_params_values_changed(to);
    if (encoder_floats != NULL)
        *encoder_floats = end;
    return ATTN_OK;
}

/* The stored config JSON. Looked up entry by entry: a file without metadata is common here
 * (plain weight files) and must give this message. */
static attn_status find_config(const attn_tensor_file *file, const char *fn, const char *name,
                               const char **json)
{
    for (size_t i = 0; i < attn_tensor_file_metadata_count(file); i++) {
        const char *key, *value;
        ATTN_TRY(attn_tensor_file_metadata_at(file, i, &key, &value));
        if (strcmp(key, ATTN_MODEL_CONFIG_KEY) == 0) {
            *json = value;
            return ATTN_OK;
        }
    }
    return attn_fail(ATTN_ERR_FORMAT, "%s: %s: no metadata key '%s' (not a model saved by attn)",
                     fn, name, ATTN_MODEL_CONFIG_KEY);
}

/* fp32 without the precision key. */
static attn_status stored_precision(const attn_tensor_file *file, const char *fn, const char *name,
                                    attn_precision *precision)
{
    for (size_t i = 0; i < attn_tensor_file_metadata_count(file); i++) {
        const char *key, *value;
        ATTN_TRY(attn_tensor_file_metadata_at(file, i, &key, &value));
        if (strcmp(key, ATTN_MODEL_PRECISION_KEY) != 0)
            continue;
        if (attn_precision_parse(value, precision) != ATTN_OK || *precision == ATTN_PRECISION_FP32)
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s: metadata '%s' is \"%s\", not bf16 or int8",
                             fn, name, ATTN_MODEL_PRECISION_KEY, value);
        return ATTN_OK;
    }
    *precision = ATTN_PRECISION_FP32;
    return ATTN_OK;
}

/* The model of an open file; messages start with fn and name the file. */
static attn_status model_from_file(const attn_tensor_file *file, const char *fn, const char *name,
                                   attn_model **out)
{
    const char *json = NULL;
    attn_model_config config;
    attn_model *model = NULL;
    attn_status status = find_config(file, fn, name, &json);
    if (status == ATTN_OK) {
        status = attn_model_config_from_json(json, &config);
        if (status != ATTN_OK) {
            char inner[512];
            snprintf(inner, sizeof inner, "%s", attn_last_error());
            status = attn_fail(status, "%s: %s: %s", fn, name, inner);
        }
    }
    if (status == ATTN_OK)
        status = attn_model_create(&config, &model);
    attn_precision precision = ATTN_PRECISION_FP32;
    if (status == ATTN_OK)
        status = stored_precision(file, fn, name, &precision);
    if (status == ATTN_OK)
        status = precision == ATTN_PRECISION_FP32
                     ? attn_model_load_weights(model, file)
                     : attn_model_load_quantized(model, file, precision);
    if (status != ATTN_OK) {
        attn_model_destroy(model);
        return status;
    }
    *out = model;
    return ATTN_OK;
}

attn_status attn_model_from_file(const attn_tensor_file *file, const char *name, attn_model **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(file);
    return model_from_file(file, "attn_model_from_file", name != NULL ? name : "the file", out);
}

attn_status attn_model_load(const char *path, attn_model **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    attn_tensor_file *file = NULL;
    ATTN_TRY(attn_tensor_file_open(path, &file));
    attn_status status = model_from_file(file, "attn_model_load", path, out);
    attn_tensor_file_close(file);
    return status;
}

/* ---- running ----------------------------------------------------------------------------- */

static attn_status check_graph(const char *fn, const attn_model *model, const attn_graph *graph)
{
    ATTN_CHECK_ARG(model != NULL, "%s: model must not be NULL", fn);
    ATTN_CHECK_ARG(graph != NULL, "%s: graph must not be NULL", fn);
    ATTN_CHECK_ARG(attn_graph_params(graph) == model->params,
                   "%s: the graph was not created for this model's parameters "
                   "(attn_graph_create(attn_model_params(model), ...))",
                   fn);
    return ATTN_OK;
}

static attn_status check_lengths(const char *fn, const char *what, int64_t size,
                                 const int32_t *lengths, int32_t lo, int64_t hi)
{
    ATTN_CHECK_ARG(size == 0 || lengths != NULL, "%s: %s must not be NULL", fn, what);
    for (int64_t b = 0; b < size; b++)
        ATTN_CHECK_ARG(lengths[b] >= lo && lengths[b] <= hi,
                       "%s: %s[%lld] = %d is outside [%d, %lld]", fn, what, (long long)b,
                       (int)lengths[b], (int)lo, (long long)hi);
    return ATTN_OK;
}

float attn_model_embedding_scale(const attn_model_config *c)
{
    return c->scale_embeddings ? (float)sqrt((double)c->d_model) : 1.0f;
}

const float *attn_model_position_rows(const attn_model *m, int source)
{
    if (m->config.positions != ATTN_POSITIONS_LEARNED)
        return m->positions.table;
    const attn_nn_embedding *table = source ? &m->src_pos_embed : &m->tgt_pos_embed;
    return attn_params_data(m->params, table->weight, ATTN_PARAM_VALUES);
}

attn_status attn_model_norm_rows(const attn_model *m, const attn_nn_layer_norm *norm, int64_t rows,
                                 const float *x, float *y)
{
    const float *weight = attn_params_data(m->params, norm->weight, ATTN_PARAM_VALUES);
    if (norm->kind == ATTN_NORM_RMS)
        return attn_rms_norm_forward(rows, norm->dim, x, weight, norm->eps, y, NULL);
    const float *bias =
        norm->bias >= 0 ? attn_params_data(m->params, norm->bias, ATTN_PARAM_VALUES) : NULL;
    return attn_layer_norm_forward(rows, norm->dim, x, weight, bias, norm->eps, y, NULL, NULL);
}

/* x + positions 0 .. len-1 of a learned table: an embedding lookup of those ids, so the
 * table learns through the tape like the token embeddings. */
static attn_status add_learned_positions(const attn_nn_embedding *table, attn_graph *graph,
                                         attn_var *x, attn_var **out)
{
    const int64_t size = x->value.shape[0], len = x->value.shape[1];
    int32_t *ids = attn_graph_alloc(graph, (size_t)(size * len) * sizeof *ids);
    if (ids == NULL && size * len > 0)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < size; b++)
        for (int64_t t = 0; t < len; t++)
            ids[b * len + t] = (int32_t)t;
    attn_var *positions;
    ATTN_TRY(attn_nn_embedding_forward(table, graph, size, len, ids, len, 1.0f, &positions));
    return attn_op_add(graph, x, positions, out);
}

/* dropout(embed(ids) * scale + positions); positions is the learned table of this side (used
 * only when the config's positions are learned). */
static attn_status embed(const attn_model *m, const attn_nn_embedding *table,
                         const attn_nn_embedding *positions, attn_graph *graph, int64_t size,
                         int64_t len, const int32_t *ids, int64_t stride, attn_var **out)
{
    attn_var *x;
    ATTN_TRY(attn_nn_embedding_forward(table, graph, size, len, ids, stride,
                                       attn_model_embedding_scale(&m->config), &x));
    if (m->config.positions == ATTN_POSITIONS_LEARNED)
        ATTN_TRY(add_learned_positions(positions, graph, x, &x));
    else if (m->config.positions == ATTN_POSITIONS_SINUSOIDAL)
        ATTN_TRY(attn_nn_positional_forward(&m->positions, graph, x, &x));
    /* rotary positions enter in the self-attentions instead */
    return attn_op_dropout(graph, x, (float)m->config.dropout, out);
}

static attn_status encode(const char *fn, attn_model *model, attn_graph *graph, int64_t size,
                          int64_t src_len, const int32_t *src, const int32_t *src_lengths,
                          attn_var **memory)
{
    const attn_model_config *c = &model->config;
    ATTN_CHECK_ARG(c->arch != ATTN_ARCH_TRANSFORMER_LM, "%s: a language model has no encoder", fn);
    ATTN_CHECK_ARG(size >= 0, "%s: negative batch size %lld", fn, (long long)size);
    ATTN_CHECK_ARG(src_len >= 1 && src_len <= c->max_len,
                   "%s: source length %lld is outside [1, max_len %lld]", fn, (long long)src_len,
                   (long long)c->max_len);
    ATTN_TRY(check_lengths(fn, "src_lengths", size, src_lengths, 0, src_len));
    if (model->rnn != NULL) {
        const attn_precision previous = attn_model_enter_precision(model, graph);
        const attn_status status =
            attn_rnn_model_encode(fn, model->rnn, graph, size, src_len, src, src_lengths, memory);
        attn_graph_set_precision(graph, previous);
        return status;
    }
    if (attn_quantized_encoder_applies(model, graph))
        return attn_quantized_encode(fn, model, graph, size, src_len, src, src_lengths, memory);
    attn_var *x;
    ATTN_TRY(embed(model, &model->src_embed, &model->src_pos_embed, graph, size, src_len, src,
                   src_len, &x));
    attn_attention_mask mask = {src_lengths, 0};
    for (int64_t i = 0; i < model->n_blocks; i++)
        ATTN_TRY(attn_nn_encoder_layer_forward(&model->blocks[i], graph, x, &mask, &x));
    if (model->has_encoder_norm)
        ATTN_TRY(attn_nn_layer_norm_forward(&model->encoder_norm, graph, x, &x));
    *memory = x;
    return ATTN_OK;
}

attn_status attn_model_encode(attn_model *model, attn_graph *graph, int64_t size, int64_t src_len,
                              const int32_t *src, const int32_t *src_lengths, attn_var **memory)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(memory);
    *memory = NULL;
    ATTN_TRY(check_graph(fn, model, graph));
    return encode(fn, model, graph, size, src_len, src, src_lengths, memory);
}

static attn_status decode(const char *fn, attn_model *model, attn_graph *graph, attn_var *memory,
                          const int32_t *src_lengths, int64_t size, int64_t len, const int32_t *ids,
                          int64_t ids_stride, const int32_t *lengths, attn_var **logits)
{
    const attn_model_config *c = &model->config;
    ATTN_CHECK_ARG(!attn_model_arch_is_classifier(c->arch) && c->arch != ATTN_ARCH_TRANSFORMER_MLM,
                   "%s: a classifier or masked language model has no decoder", fn);
    ATTN_CHECK_ARG(size >= 0, "%s: negative batch size %lld", fn, (long long)size);
    ATTN_CHECK_ARG(len >= 0 && len <= c->max_len,
                   "%s: decoder length %lld is outside [0, max_len %lld]", fn, (long long)len,
                   (long long)c->max_len);
    if (lengths != NULL)
        ATTN_TRY(check_lengths(fn, "lengths", size, lengths, 0, len));
    if (model->rnn != NULL) {
        const attn_precision previous = attn_model_enter_precision(model, graph);
        const attn_status status =
            attn_rnn_model_decode(fn, model->rnn, graph, memory, src_lengths, size, len, ids,
                                  ids_stride, lengths, logits);
        attn_graph_set_precision(graph, previous);
        return status;
    }
    int64_t src_len = 0;
    if (c->arch == ATTN_ARCH_TRANSFORMER) {
        ATTN_CHECK_ARG(memory != NULL, "%s: the transformer's decoder needs the memory", fn);
        ATTN_CHECK_ARG(memory->value.ndim == 3 && memory->value.shape[0] == size &&
                           memory->value.shape[2] == c->d_model,
                       "%s: memory must be [%lld, src_len, %lld]", fn, (long long)size,
                       (long long)c->d_model);
        src_len = memory->value.shape[1];
        if (src_lengths != NULL)
            ATTN_TRY(check_lengths(fn, "src_lengths", size, src_lengths, 0, src_len));
    } else {
        ATTN_CHECK_ARG(memory == NULL && src_lengths == NULL,
                       "%s: a language model takes no memory", fn);
    }
    attn_var *x;
    ATTN_TRY(embed(model, &model->tgt_embed, &model->tgt_pos_embed, graph, size, len, ids,
                   ids_stride, &x));
    attn_attention_mask self_mask = {lengths, 1}, memory_mask = {src_lengths, 0};
    if (c->arch == ATTN_ARCH_TRANSFORMER) {
        for (int64_t i = 0; i < model->n_decoder_layers; i++)
            ATTN_TRY(attn_nn_decoder_layer_forward(&model->decoder_layers[i], graph, x, &self_mask,
                                                   memory, &memory_mask, &x));
    } else {
        for (int64_t i = 0; i < model->n_blocks; i++)
            ATTN_TRY(attn_nn_encoder_layer_forward(&model->blocks[i], graph, x, &self_mask, &x));
    }
    if (model->has_decoder_norm)
        ATTN_TRY(attn_nn_layer_norm_forward(&model->decoder_norm, graph, x, &x));
    return attn_nn_linear_forward(&model->generator, graph, x, logits);
}

attn_status attn_model_decode(attn_model *model, attn_graph *graph, attn_var *memory,
                              const int32_t *src_lengths, int64_t size, int64_t len,
                              const int32_t *ids, int64_t ids_stride, const int32_t *lengths,
                              attn_var **logits)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(logits);
    *logits = NULL;
    ATTN_TRY(check_graph(fn, model, graph));
    return decode(fn, model, graph, memory, src_lengths, size, len, ids, ids_stride, lengths,
                  logits);
}

/* labels: the batch is for a loss, so a classifier's batch needs its labels. */
static attn_status check_batch(const char *fn, const attn_model *model,
                               const attn_model_batch *batch, int labels)
{
    const attn_model_config *c = &model->config;
    ATTN_CHECK_ARG(batch != NULL, "%s: batch must not be NULL", fn);
    ATTN_CHECK_ARG(batch->size >= 0, "%s: negative batch size %lld", fn, (long long)batch->size);
    if (c->arch == ATTN_ARCH_TRANSFORMER_MLM) {
        ATTN_CHECK_ARG(!labels || batch->size == 0 || batch->mlm_targets != NULL,
                       "%s: batch->mlm_targets must not be NULL (a masked text's batch: "
                       "attn_corpus_read_text)",
                       fn);
        ATTN_CHECK_ARG(batch->teacher == NULL,
                       "%s: the masked language model learns from its text, not a teacher's "
                       "distributions",
                       fn);
        return ATTN_OK;
    }
    if (!attn_model_arch_is_classifier(c->arch)) {
        ATTN_CHECK_ARG(batch->tgt_len >= 1 && batch->tgt_len - 1 <= c->max_len,
                       "%s: tgt_len %lld is outside [1, max_len + 1 = %lld]", fn,
                       (long long)batch->tgt_len, (long long)(c->max_len + 1));
        ATTN_CHECK_ARG(batch->size == 0 || batch->tgt != NULL, "%s: batch->tgt must not be NULL",
                       fn);
        ATTN_TRY(
            check_lengths(fn, "tgt_lengths", batch->size, batch->tgt_lengths, 1, batch->tgt_len));
    } else {
        ATTN_CHECK_ARG(!labels || batch->size == 0 || batch->labels != NULL,
                       "%s: batch->labels must not be NULL", fn);
        ATTN_CHECK_ARG(batch->teacher == NULL,
                       "%s: the classifier learns from labels, not a teacher's distributions", fn);
    }
    /* The loss reads tgt_vocab floats a position; its op checks the weight. */
    ATTN_CHECK_ARG(batch->teacher == NULL || batch->teacher_vocab == c->tgt_vocab,
                   "%s: the teacher's distributions are over %lld target tokens, the model's "
                   "vocabulary has %lld",
                   fn, (long long)batch->teacher_vocab, (long long)c->tgt_vocab);
    return ATTN_OK;
}

/* The classifier's sentence vectors [size, width]: the encoder over the batch's sources
 * (after a classification token with pooling "cls"), pooled as the config says. weights (NULL:
 * not wanted) gets attention pooling's weights [size, src_len] (NULL for the other poolings). */
static attn_status pool(const char *fn, attn_model *model, attn_graph *graph,
                        const attn_model_batch *batch, attn_var **pooled, attn_var **weights)
{
    const attn_model_config *c = &model->config;
    if (weights != NULL)
        *weights = NULL;
    attn_var *memory;
    if (c->pooling == ATTN_POOLING_CLS) {
        /* <s> before every source: row b reads <s> then its tokens, one position longer. */
        ATTN_CHECK_ARG(batch->src_len + 1 <= c->max_len,
                       "%s: source length %lld and the classification token exceed max_len %lld",
                       fn, (long long)batch->src_len, (long long)c->max_len);
        const int64_t size = batch->size, len = batch->src_len + 1;
        int32_t *src = attn_graph_alloc(graph, (size_t)(size * len) * sizeof *src);
        int32_t *lengths = attn_graph_alloc(graph, (size_t)size * sizeof *lengths);
        if ((src == NULL || lengths == NULL) && size > 0)
            return ATTN_ERR_OUT_OF_MEMORY;
        for (int64_t b = 0; b < size; b++) {
            src[b * len] = ATTN_MODEL_CLS_ID;
            memcpy(src + b * len + 1, batch->src + b * batch->src_len,
                   (size_t)batch->src_len * sizeof *src);
            lengths[b] = batch->src_lengths[b] + 1;
        }
        ATTN_TRY(encode(fn, model, graph, size, len, src, lengths, &memory));
        int32_t *first = attn_graph_alloc(graph, (size_t)size * sizeof *first);
        if (first == NULL && size > 0)
            return ATTN_ERR_OUT_OF_MEMORY;
        for (int64_t b = 0; b < size; b++)
            first[b] = 0;
        return attn_op_gather_positions(graph, memory, first, 0, c->d_model, pooled);
    }
    ATTN_TRY(encode(fn, model, graph, batch->size, batch->src_len, batch->src, batch->src_lengths,
                    &memory));
    if (c->pooling == ATTN_POOLING_MEAN)
        return attn_op_mean_pool(graph, memory, batch->src_lengths, pooled);
    /* Attention pooling is Luong's dot score between the query and the keys u_t: the query,
     * one row per sentence, is an embedding lookup of q's only row, so its gradient sums over
     * the batch. */
    attn_var *keys, *query_table, *query;
    ATTN_TRY(attn_nn_linear_forward(&model->pool_proj, graph, memory, &keys));
    ATTN_TRY(attn_op_activation(graph, keys, ATTN_ACT_TANH, &keys));
    ATTN_TRY(attn_graph_param(graph, model->pool_query, &query_table));
    int32_t *zeros = attn_graph_alloc(graph, (size_t)batch->size * sizeof *zeros);
    if (zeros == NULL && batch->size > 0)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < batch->size; b++)
        zeros[b] = 0;
    ATTN_TRY(attn_op_embedding(graph, query_table, batch->size, 1, zeros, 1, 1.0f, &query));
    const attn_luong_vars none = {NULL, NULL, NULL, NULL};
    return attn_op_luong_attention(graph, ATTN_LUONG_DOT, ATTN_LUONG_GLOBAL, 0, &none, 0, query,
                                   keys, memory, batch->src_lengths, pooled, weights);
}

static attn_status forward_logits(const char *fn, attn_model *model, attn_graph *graph,
                                  const attn_model_batch *batch, attn_var **logits)
{
    const attn_model_config *c = &model->config;
    attn_var *memory = NULL;
    const int classifier = attn_model_arch_is_classifier(c->arch);
    if (c->arch != ATTN_ARCH_TRANSFORMER_LM && !classifier)
        ATTN_TRY(encode(fn, model, graph, batch->size, batch->src_len, batch->src,
                        batch->src_lengths, &memory));
    if (classifier) {
        attn_var *pooled;
        ATTN_TRY(pool(fn, model, graph, batch, &pooled, NULL));
        ATTN_TRY(attn_op_dropout(graph, pooled, (float)c->dropout, &pooled));
        return attn_nn_linear_forward(&model->classifier, graph, pooled, logits);
    }
    if (c->arch == ATTN_ARCH_TRANSFORMER_MLM)
        return attn_nn_linear_forward(&model->generator, graph, memory, logits);
    /* The decoder reads each target without its last token. */
    int32_t *lengths = attn_graph_alloc(graph, (size_t)batch->size * sizeof *lengths);
    if (lengths == NULL && batch->size > 0)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < batch->size; b++)
        lengths[b] = batch->tgt_lengths[b] - 1;
    return decode(fn, model, graph, memory,
                  c->arch != ATTN_ARCH_TRANSFORMER_LM ? batch->src_lengths : NULL, batch->size,
                  batch->tgt_len - 1, batch->tgt, batch->tgt_len, lengths, logits);
}

attn_status attn_model_forward_logits(attn_model *model, attn_graph *graph,
                                      const attn_model_batch *batch, attn_var **logits)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(logits);
    *logits = NULL;
    ATTN_TRY(check_graph(fn, model, graph));
    ATTN_TRY(check_batch(fn, model, batch, 0));
    return forward_logits(fn, model, graph, batch, logits);
}

/* "cls": the classification token's row of the last encoder layer's maps, which run over <s>
 * then the text. */
static attn_status cls_pooling_weights(attn_model *model, attn_graph *graph, const int32_t *src,
                                       int64_t src_len, float *weights)
{
    const attn_model_config *c = &model->config;
    const int64_t len = src_len + 1;
    int32_t *with_cls = malloc((size_t)len * sizeof *with_cls);
    float *maps = malloc((size_t)(c->num_heads * len * len) * sizeof *maps);
    attn_status status = ATTN_ERR_OUT_OF_MEMORY;
    if (with_cls != NULL && maps != NULL) {
        with_cls[0] = ATTN_MODEL_CLS_ID;
        memcpy(with_cls + 1, src, (size_t)src_len * sizeof *src);
        status = attn_model_attention_weights(model, graph, with_cls, len, NULL, 0,
                                              ATTN_ENCODER_SELF_ATTENTION, c->encoder_layers - 1,
                                              maps);
    }
    if (status == ATTN_OK)
        for (int64_t t = 0; t < src_len; t++) {
            double sum = 0.0;
            for (int64_t h = 0; h < c->num_heads; h++)
                sum += maps[h * len * len + 1 + t];
            weights[t] = (float)(sum / (double)c->num_heads);
        }
    free(with_cls);
    free(maps);
    return status == ATTN_ERR_OUT_OF_MEMORY
               ? attn_fail(status, "attn_model_pooling_weights: out of memory for %lld tokens",
                           (long long)src_len)
               : status;
}

attn_status attn_model_pooling_weights(attn_model *model, attn_graph *graph, const int32_t *src,
                                       int64_t src_len, float *weights)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(src);
    ATTN_CHECK_NOT_NULL(weights);
    ATTN_TRY(check_graph(fn, model, graph));
    const attn_model_config *c = &model->config;
    ATTN_CHECK_ARG(attn_model_arch_is_classifier(c->arch),
                   "%s: only a classifier (arch transformer_classifier or rnn_classifier) pools "
                   "its encoder",
                   fn);
    const int64_t limit = attn_model_config_source_limit(c);
    ATTN_CHECK_ARG(src_len >= 1 && src_len <= limit, "%s: the text has %lld tokens; give 1 to %lld",
                   fn, (long long)src_len, (long long)limit);
    if (c->pooling == ATTN_POOLING_MEAN) {
        for (int64_t t = 0; t < src_len; t++)
            weights[t] = 1.0f / (float)src_len;
        return ATTN_OK;
    }
    if (c->pooling == ATTN_POOLING_CLS)
        return cls_pooling_weights(model, graph, src, src_len, weights);
    const int recording = attn_graph_is_recording(graph), training = attn_graph_is_training(graph);
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    const int32_t length = (int32_t)src_len;
    attn_model_batch batch;
    memset(&batch, 0, sizeof batch);
    batch.size = 1;
    batch.src_len = src_len;
    batch.src = src;
    batch.src_lengths = &length;
    attn_var *pooled, *pooling;
    attn_status status = pool(fn, model, graph, &batch, &pooled, &pooling);
    if (status == ATTN_OK)
        memcpy(weights, pooling->value.data, (size_t)src_len * sizeof *weights);
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, recording);
    attn_graph_set_training(graph, training);
    return status;
}

/* Row r of logits [rows, classes] is scored when labels[r] != -1: *scored counts those rows,
 * *correct those whose arg-max (the first on ties) is the label. */
static void count_predictions(const float *logits, int64_t rows, int64_t classes,
                              const int32_t *labels, int64_t *scored, int64_t *correct)
{
    int64_t counted = 0, right = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (labels[r] == -1)
            continue;
        const int64_t best = attn_argmax(classes, logits + r * classes);
        counted++;
        right += best == labels[r];
    }
    *scored = counted;
    *correct = right;
}

/* The one place a batch's loss is built: attn_model_forward_loss, the trainer (through
 * attn_model_forward_loss_counted) and attn bench train all run it. tokens and correct are
 * both NULL (not counted) or both set. */
static attn_status forward_loss(const char *fn, attn_model *model, attn_graph *graph,
                                const attn_model_batch *batch, int smoothed, attn_var **loss,
                                int64_t *tokens, int64_t *correct)
{
    ATTN_CHECK_ARG(loss != NULL, "%s: loss must not be NULL", fn);
    *loss = NULL;
    ATTN_TRY(check_graph(fn, model, graph));
    ATTN_TRY(check_batch(fn, model, batch, 1));
    const attn_model_config *c = &model->config;
    const int classifier = attn_model_arch_is_classifier(c->arch);
    if (classifier)
        for (int64_t b = 0; b < batch->size; b++)
            ATTN_CHECK_ARG(batch->labels[b] >= 0 && batch->labels[b] < c->num_classes,
                           "%s: labels[%lld] = %d is outside [0, %lld)", fn, (long long)b,
                           (int)batch->labels[b], (long long)c->num_classes);
    attn_var *logits;
    ATTN_TRY(forward_logits(fn, model, graph, batch, &logits));
    int64_t rows = batch->size;
    const int32_t *labels = batch->labels;
    if (c->arch == ATTN_ARCH_TRANSFORMER_MLM) {
        /* Row (b, t) predicts the original token at a chosen position; the others are -1. */
        rows = batch->size * batch->src_len;
        labels = batch->mlm_targets;
        for (int64_t r = 0; r < rows; r++)
            ATTN_CHECK_ARG(labels[r] >= -1 && labels[r] < c->src_vocab,
                           "%s: mlm_targets[%lld] = %d is outside [-1, %lld)", fn, (long long)r,
                           (int)labels[r], (long long)c->src_vocab);
    } else if (!classifier) {
        /* Row (b, t) predicts tgt[b, t + 1]; rows past the target's end are ignored (-1). */
        const int64_t steps = batch->tgt_len - 1;
        rows = batch->size * steps;
        int32_t *shifted = attn_graph_alloc(graph, (size_t)rows * sizeof *shifted);
        if (shifted == NULL && rows > 0)
            return ATTN_ERR_OUT_OF_MEMORY;
        for (int64_t b = 0; b < batch->size; b++)
            for (int64_t t = 0; t < steps; t++)
                shifted[b * steps + t] =
                    t + 1 < batch->tgt_lengths[b] ? batch->tgt[b * batch->tgt_len + t + 1] : -1;
        labels = shifted;
    }
    if (tokens != NULL)
        count_predictions(logits->value.data, rows, logits->value.shape[logits->value.ndim - 1],
                          labels, tokens, correct);
    const float smoothing = smoothed ? (float)c->label_smoothing : 0.0f;
    if (smoothed && batch->teacher != NULL)
        return attn_op_cross_entropy_with_teacher(graph, logits, labels, -1, smoothing,
                                                  batch->teacher, (float)batch->teacher_weight,
                                                  loss);
    return attn_op_cross_entropy(graph, logits, labels, -1, smoothing, loss);
}

attn_status attn_model_forward_loss(attn_model *model, attn_graph *graph,
                                    const attn_model_batch *batch, attn_var **loss)
{
    return forward_loss(__func__, model, graph, batch, 1, loss, NULL, NULL);
}

attn_status attn_model_forward_loss_counted(attn_model *model, attn_graph *graph,
                                            const attn_model_batch *batch, int smoothed,
                                            attn_var **loss, int64_t *tokens, int64_t *correct)
{
    ATTN_CHECK_NOT_NULL(tokens);
    ATTN_CHECK_NOT_NULL(correct);
    *tokens = 0;
    *correct = 0;
    return forward_loss(__func__, model, graph, batch, smoothed, loss, tokens, correct);
}
