/* RNN encoder-decoders: Bahdanau attention, Luong attention (dot, general, concat; global,
 * local-m, local-p; input feeding) and the attention-less baseline, as attn_models.h's RNN
 * section describes, and the encoder of the RNN classifier (whose head model.c builds). The encoder
 * is one node per layer; the decoder a few nodes per step, its step outputs stacked so that the
 * output projection is one GEMM over every step. */
#include "models/rnn_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_luong(attn_rnn_attention a)
{
    return a == ATTN_RNN_LUONG_DOT || a == ATTN_RNN_LUONG_GENERAL || a == ATTN_RNN_LUONG_CONCAT;
}

static attn_luong_score luong_score(attn_rnn_attention a)
{
    return a == ATTN_RNN_LUONG_DOT       ? ATTN_LUONG_DOT
           : a == ATTN_RNN_LUONG_GENERAL ? ATTN_LUONG_GENERAL
                                         : ATTN_LUONG_CONCAT;
}

static attn_luong_align luong_align(attn_rnn_local local)
{
    return local == ATTN_RNN_LOCAL_M   ? ATTN_LUONG_LOCAL_M
           : local == ATTN_RNN_LOCAL_P ? ATTN_LUONG_LOCAL_P
                                       : ATTN_LUONG_GLOBAL;
}

/* ---- construction ------------------------------------------------------------------------ */

/* torch.nn.Embedding's N(0, 1): the RNN models do not scale their embeddings. */
static attn_status register_embedding(attn_nn_embedding *m, attn_params *store, const char *name,
                                      int64_t vocab, int64_t dim)
{
    const int64_t shape[2] = {vocab, dim};
    m->vocab = vocab;
    m->dim = dim;
    return attn_params_add(store, name, 2, shape, attn_init_normal(1.0f), &m->weight);
}

static attn_status register_encoder(attn_rnn_model *m, attn_params *store)
{
    const attn_model_config *c = &m->config;
    for (int64_t k = 0; k < c->layers; k++)
        ATTN_TRY(attn_nn_rnn_layer_register(&m->encoder[k], store, "encoder", c->cell, k,
                                            k == 0 ? c->embedding_dim : m->annotation_dim,
                                            c->hidden, c->bidirectional));
    return ATTN_OK;
}

static attn_status register_modules(attn_rnn_model *m, attn_params *store)
{
    const attn_model_config *c = &m->config;
    const char *fn = "attn_model_create";
    const int64_t layers = c->layers, hidden = c->hidden, embed = c->embedding_dim;
    const int64_t annotations = hidden * (c->bidirectional ? 2 : 1);
    const int none = c->attention == ATTN_RNN_NO_ATTENTION, luong = is_luong(c->attention);
    m->annotation_dim = annotations;
    m->encoder = calloc((size_t)layers, sizeof *m->encoder);
    if (c->arch == ATTN_ARCH_RNN_CLASSIFIER) {
        /* The encoder alone, under the encoder-decoder's names. */
        if (m->encoder == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        ATTN_TRY(register_embedding(&m->src_embed, store, "src_embed.weight", c->src_vocab, embed));
        return register_encoder(m, store);
    }
    m->decoder = calloc((size_t)layers, sizeof *m->decoder);
    m->bridge = none ? NULL : calloc((size_t)layers, sizeof *m->bridge);
    if (m->encoder == NULL || m->decoder == NULL || (!none && m->bridge == NULL))
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);

    ATTN_TRY(register_embedding(&m->src_embed, store, "src_embed.weight", c->src_vocab, embed));
    ATTN_TRY(register_embedding(&m->tgt_embed, store, "tgt_embed.weight", c->tgt_vocab, embed));
    ATTN_TRY(register_encoder(m, store));
    /* What step i's first cell reads besides y_{i-1}: the context (Bahdanau's c_i, or u),
     * or Luong's h~_{i-1}. */
    const int64_t context = c->attention == ATTN_RNN_BAHDANAU ? annotations : none ? hidden : 0;
    const int64_t extra = luong ? (c->input_feeding ? hidden : 0) : context;
    char name[ATTN_NN_MAX_NAME];
    for (int64_t k = 0; k < layers; k++) {
        if (!none) {
            snprintf(name, sizeof name, "bridge.%lld", (long long)k);
            ATTN_TRY(attn_nn_linear_register(&m->bridge[k], store, name, hidden, hidden, 1));
        }
        snprintf(name, sizeof name, "decoder.%lld", (long long)k);
        ATTN_TRY(attn_nn_rnn_cell_register(&m->decoder[k], store, name, c->cell,
                                           k == 0 ? embed + extra : hidden, hidden));
    }
    if (c->attention == ATTN_RNN_BAHDANAU)
        ATTN_TRY(attn_nn_additive_attention_register(&m->additive, store, "attention", hidden,
                                                     annotations, c->attention_dim));
    if (luong) {
        ATTN_TRY(attn_nn_luong_attention_register(
            &m->luong, store, "attention", luong_score(c->attention), luong_align(c->local),
            c->window, hidden, annotations, c->attention_dim));
        ATTN_TRY(attn_nn_linear_register(&m->combine, store, "combine", annotations + hidden,
                                         hidden, 0));
        ATTN_TRY(
            attn_nn_linear_register(&m->generator, store, "generator", hidden, c->tgt_vocab, 1));
    } else {
        ATTN_TRY(attn_nn_linear_register(&m->generator, store, "generator",
                                         hidden + embed + context, c->tgt_vocab, 1));
    }
    return ATTN_OK;
}

attn_status attn_rnn_model_build(const attn_model_config *config, attn_params *store,
                                 attn_rnn_model **out)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_model_create: out of memory");
    (*out)->config = *config;
    /* On failure the caller's attn_model_destroy frees what was built. */
    return register_modules(*out, store);
}

int64_t attn_rnn_model_annotation_dim(const attn_rnn_model *m)
{
    return m->annotation_dim;
}

void attn_rnn_model_free(attn_rnn_model *m)
{
    if (m == NULL)
        return;
    free(m->encoder);
    free(m->bridge);
    free(m->decoder);
    free(m);
}

/* ---- encoder ---------------------------------------------------------------------------- */

attn_status attn_rnn_model_encode(const char *fn, const attn_rnn_model *m, attn_graph *graph,
                                  int64_t size, int64_t src_len, const int32_t *src,
                                  const int32_t *src_lengths, attn_var **memory)
{
    const attn_model_config *c = &m->config;
    ATTN_CHECK_ARG(size == 0 || src != NULL, "%s: src must not be NULL", fn);
    /* A copy with the padding set to 0 (its values are never read) and, with reverse_source,
     * each sentence's tokens in reverse order. */
    int32_t *ids = attn_graph_alloc(graph, (size_t)(size * src_len) * sizeof *ids);
    if (ids == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t b = 0; b < size; b++) {
        const int64_t n = src_lengths[b];
        for (int64_t t = 0; t < src_len; t++)
            ids[b * src_len + t] =
                t >= n ? 0 : src[b * src_len + (c->reverse_source ? n - 1 - t : t)];
    }
    attn_var *x;
    ATTN_TRY(
        attn_nn_embedding_forward(&m->src_embed, graph, size, src_len, ids, src_len, 1.0f, &x));
    ATTN_TRY(attn_op_dropout(graph, x, (float)c->dropout, &x));
    for (int64_t k = 0; k < c->layers; k++) {
        ATTN_TRY(attn_nn_rnn_layer_forward(&m->encoder[k], graph, x, src_lengths, &x));
        if (k + 1 < c->layers)
            ATTN_TRY(attn_op_dropout(graph, x, (float)c->dropout, &x));
    }
    *memory = x;
    return ATTN_OK;
}

/* ---- decoder ---------------------------------------------------------------------------- */

attn_status attn_rnn_decoder_start(const char *fn, const attn_rnn_model *m, attn_graph *graph,
                                   attn_var *memory, const int32_t *src_lengths,
                                   attn_rnn_decoder **out)
{
    const attn_model_config *c = &m->config;
    ATTN_CHECK_ARG(memory != NULL,
                   "%s: the rnn decoder needs the memory (attn_model_encode's output)", fn);
    ATTN_CHECK_ARG(memory->value.ndim == 3 && memory->value.shape[2] == m->annotation_dim &&
                       memory->value.shape[1] >= 1,
                   "%s: memory must be [size, src_len >= 1, %lld] (attn_model_encode's output)", fn,
                   (long long)m->annotation_dim);
    const int64_t size = memory->value.shape[0], src_len = memory->value.shape[1];
    const int64_t hidden = c->hidden;
    attn_rnn_decoder *d = attn_graph_alloc(graph, sizeof *d);
    int32_t *positions = attn_graph_alloc(graph, (size_t)size * sizeof *positions);
    attn_var **states = attn_graph_alloc(graph, 2 * (size_t)c->layers * sizeof *states);
    if (d == NULL || positions == NULL || states == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    memset(d, 0, sizeof *d);
    d->model = m;
    d->graph = graph;
    d->size = size;
    d->src_len = src_len;
    d->annotations = memory;
    if (src_lengths != NULL) {
        d->src_lengths = attn_graph_alloc(graph, (size_t)size * sizeof *d->src_lengths);
        if (d->src_lengths == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        for (int64_t b = 0; b < size; b++) {
            ATTN_CHECK_ARG(src_lengths[b] >= 0 && src_lengths[b] <= src_len,
                           "%s: src_lengths[%lld] = %d is outside [0, %lld]", fn, (long long)b,
                           (int)src_lengths[b], (long long)src_len);
            d->src_lengths[b] = src_lengths[b];
        }
    }
    /* u: the reverse direction ends at position 0, the forward one at the last real token;
     * an empty source has no state (-1 gives zeros). */
    for (int64_t b = 0; b < size; b++) {
        const int32_t n = d->src_lengths != NULL ? d->src_lengths[b] : (int32_t)src_len;
        positions[b] = c->bidirectional ? (n > 0 ? 0 : -1) : n - 1;
    }
    ATTN_TRY(attn_op_gather_positions(graph, memory, positions, c->bidirectional ? hidden : 0,
                                      hidden, &d->summary));
    d->h = states;
    d->c = states + c->layers;
    for (int64_t k = 0; k < c->layers; k++) {
        d->c[k] = NULL;
        if (m->bridge == NULL) {
            d->h[k] = d->summary;
        } else {
            attn_var *projected;
            ATTN_TRY(attn_nn_linear_forward(&m->bridge[k], graph, d->summary, &projected));
            ATTN_TRY(attn_op_activation(graph, projected, ATTN_ACT_TANH, &d->h[k]));
        }
    }
    if (c->attention == ATTN_RNN_BAHDANAU)
        ATTN_TRY(attn_nn_additive_attention_keys(&m->additive, graph, memory, &d->keys));
    else if (is_luong(c->attention))
        ATTN_TRY(attn_nn_luong_attention_keys(&m->luong, graph, memory, &d->keys));
    *out = d;
    return ATTN_OK;
}

attn_status attn_rnn_decoder_features(attn_rnn_decoder *d, const int32_t *ids, attn_var **features,
                                      attn_var **weights)
{
    const attn_rnn_model *m = d->model;
    const attn_model_config *c = &m->config;
    attn_graph *graph = d->graph;
    const float dropout = (float)c->dropout;
    const int lstm = c->cell == ATTN_RNN_LSTM;
    attn_var *y, *input, *context = NULL;
    if (weights != NULL)
        *weights = NULL;
    ATTN_TRY(attn_nn_embedding_forward(&m->tgt_embed, graph, d->size, 1, ids, 1, 1.0f, &y));
    ATTN_TRY(attn_op_dropout(graph, y, dropout, &y));
    input = y;
    if (c->attention == ATTN_RNN_BAHDANAU) {
        ATTN_TRY(attn_nn_additive_attention_forward(&m->additive, graph, d->h[c->layers - 1],
                                                    d->keys, d->annotations, d->src_lengths,
                                                    &context, weights));
    } else if (c->attention == ATTN_RNN_NO_ATTENTION) {
        context = d->summary;
    } else if (c->input_feeding) {
        attn_var *feed = d->feed;
        if (feed == NULL) {
            const int64_t shape[2] = {d->size, c->hidden};
            ATTN_TRY(attn_graph_input(graph, 2, shape, NULL, 0, &feed));
        }
        attn_var *pieces[2] = {y, feed};
        ATTN_TRY(attn_op_concat(graph, 2, pieces, &input));
    }
    if (context != NULL) {
        attn_var *pieces[2] = {y, context};
        ATTN_TRY(attn_op_concat(graph, 2, pieces, &input));
    }
    for (int64_t k = 0; k < c->layers; k++) {
        attn_var *x = input;
        if (k > 0)
            ATTN_TRY(attn_op_dropout(graph, d->h[k - 1], dropout, &x));
        ATTN_TRY(attn_nn_rnn_cell_forward(&m->decoder[k], graph, x, d->h[k], d->c[k], &d->h[k],
                                          lstm ? &d->c[k] : NULL));
    }
    attn_var *top = d->h[c->layers - 1];
    d->step++;
    if (is_luong(c->attention)) {
        ATTN_TRY(attn_nn_luong_attention_forward(&m->luong, graph, d->step - 1, top, d->keys,
                                                 d->annotations, d->src_lengths, &context,
                                                 weights));
        attn_var *pieces[2] = {context, top}, *joined, *combined;
        ATTN_TRY(attn_op_concat(graph, 2, pieces, &joined));
        ATTN_TRY(attn_nn_linear_forward(&m->combine, graph, joined, &combined));
        ATTN_TRY(attn_op_activation(graph, combined, ATTN_ACT_TANH, &d->feed));
        *features = d->feed;
        return ATTN_OK;
    }
    attn_var *pieces[3] = {top, y, context};
    return attn_op_concat(graph, 3, pieces, features);
}

static attn_status check_decoder_fit(const char *fn, const attn_rnn_decoder *d, int64_t size)
{
    ATTN_CHECK_ARG(d->size == size, "%s: memory holds %lld sentences, the batch %lld", fn,
                   (long long)d->size, (long long)size);
    return ATTN_OK;
}

attn_status attn_rnn_model_decode(const char *fn, const attn_rnn_model *m, attn_graph *graph,
                                  attn_var *memory, const int32_t *src_lengths, int64_t size,
                                  int64_t len, const int32_t *ids, int64_t ids_stride,
                                  const int32_t *lengths, attn_var **logits)
{
    ATTN_CHECK_ARG(ids_stride >= len, "%s: ids_stride %lld is below len %lld", fn,
                   (long long)ids_stride, (long long)len);
    ATTN_CHECK_ARG(size * len == 0 || ids != NULL, "%s: ids must not be NULL", fn);
    attn_rnn_decoder *d;
    ATTN_TRY(attn_rnn_decoder_start(fn, m, graph, memory, src_lengths, &d));
    ATTN_TRY(check_decoder_fit(fn, d, size));
    if (len == 0) {
        const int64_t shape[3] = {size, 0, m->config.tgt_vocab};
        return attn_graph_new_var(graph, 3, shape, 0, logits);
    }
    attn_var **features = attn_graph_alloc(graph, (size_t)len * sizeof *features);
    int32_t *column = attn_graph_alloc(graph, (size_t)size * sizeof *column);
    if (features == NULL || column == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int64_t t = 0; t < len; t++) {
        /* Past a row's length its inputs are padding, never read: token 0 stands in. */
        for (int64_t b = 0; b < size; b++)
            column[b] = lengths == NULL || t < lengths[b] ? ids[b * ids_stride + t] : 0;
        ATTN_TRY(attn_rnn_decoder_features(d, column, &features[t], NULL));
    }
    attn_var *stacked;
    ATTN_TRY(attn_op_stack(graph, len, features, &stacked));
    ATTN_TRY(attn_op_dropout(graph, stacked, (float)m->config.dropout, &stacked));
    return attn_nn_linear_forward(&m->generator, graph, stacked, logits);
}
