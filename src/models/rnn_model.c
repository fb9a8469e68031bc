/* RNN encoder-decoders: Bahdanau attention, Luong attention (dot, general, concat; global,
 * local-m, local-p; input feeding) and the attention-less baseline, as attn_models.h's RNN
 * section describes. The encoder is one node per layer; the decoder a few nodes per step,
 * its step outputs stacked so that the output projection is one GEMM over every step. */
#include "models/models_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct attn_rnn_model {
    attn_model_config config;
    attn_nn_embedding src_embed, tgt_embed;
    attn_nn_rnn_layer *encoder; /* [layers] */
    attn_nn_linear *bridge;     /* [layers]; NULL for attention "none" */
    attn_nn_rnn_cell *decoder;  /* [layers] */
    attn_nn_additive_attention additive;
    attn_nn_luong_attention luong;
    attn_nn_linear combine; /* Luong's W_c */
    attn_nn_linear generator;
    int64_t annotation_dim; /* A */
};

struct attn_rnn_decoder {
    const attn_rnn_model *model;
    attn_graph *graph;
    int64_t size, src_len, step;
    int32_t *src_lengths;         /* in the arena; NULL: every source is src_len long */
    attn_var *annotations, *keys; /* keys: what the attention scores (NULL for "none") */
    attn_var *summary;            /* u, the encoder's last state */
    attn_var **h, **c;            /* [layers]; c[k] NULL for GRU and before an LSTM's first step */
    attn_var *feed;               /* Luong input feeding: h~ of the last step (NULL at first) */
};

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

static attn_status register_modules(attn_rnn_model *m, attn_params *store)
{
    const attn_model_config *c = &m->config;
    const char *fn = "attn_model_create";
    const int64_t layers = c->layers, hidden = c->hidden, embed = c->embedding_dim;
    const int64_t annotations = hidden * (c->bidirectional ? 2 : 1);
    const int none = c->attention == ATTN_RNN_NO_ATTENTION, luong = is_luong(c->attention);
    m->annotation_dim = annotations;
    m->encoder = calloc((size_t)layers, sizeof *m->encoder);
    m->decoder = calloc((size_t)layers, sizeof *m->decoder);
    m->bridge = none ? NULL : calloc((size_t)layers, sizeof *m->bridge);
    if (m->encoder == NULL || m->decoder == NULL || (!none && m->bridge == NULL))
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);

    ATTN_TRY(register_embedding(&m->src_embed, store, "src_embed.weight", c->src_vocab, embed));
    ATTN_TRY(register_embedding(&m->tgt_embed, store, "tgt_embed.weight", c->tgt_vocab, embed));
    for (int64_t k = 0; k < layers; k++)
        ATTN_TRY(attn_nn_rnn_layer_register(&m->encoder[k], store, "encoder", c->cell, k,
                                            k == 0 ? embed : annotations, hidden,
                                            c->bidirectional));
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
    return attn_params_finalize(store);
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

static attn_status start(const char *fn, const attn_rnn_model *m, attn_graph *graph,
                         attn_var *memory, const int32_t *src_lengths, attn_rnn_decoder **out)
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

/* One step from the previous tokens ids [size]: what the generator reads (before dropout),
 * and the attention weights when weights is not NULL. */
static attn_status step_features(attn_rnn_decoder *d, const int32_t *ids, attn_var **features,
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
    ATTN_TRY(start(fn, m, graph, memory, src_lengths, &d));
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
        ATTN_TRY(step_features(d, column, &features[t], NULL));
    }
    attn_var *stacked;
    ATTN_TRY(attn_op_stack(graph, len, features, &stacked));
    ATTN_TRY(attn_op_dropout(graph, stacked, (float)m->config.dropout, &stacked));
    return attn_nn_linear_forward(&m->generator, graph, stacked, logits);
}

/* ---- step by step ----------------------------------------------------------------------- */

attn_status attn_model_rnn_decoder_start(attn_model *model, attn_graph *graph, attn_var *memory,
                                         const int32_t *src_lengths, attn_rnn_decoder **decoder)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(decoder);
    *decoder = NULL;
    ATTN_CHECK_NOT_NULL(model);
    ATTN_CHECK_NOT_NULL(graph);
    const attn_rnn_model *m = attn_model_rnn_part(model);
    ATTN_CHECK_ARG(m != NULL, "%s: the model's arch is not \"rnn\"", fn);
    ATTN_CHECK_ARG(attn_graph_params(graph) == attn_model_params(model),
                   "%s: the graph was not created for this model's parameters", fn);
    return start(fn, m, graph, memory, src_lengths, decoder);
}

attn_status attn_model_rnn_decoder_step(attn_rnn_decoder *decoder, const int32_t *ids,
                                        attn_var **logits, attn_var **weights)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(logits);
    *logits = NULL;
    if (weights != NULL)
        *weights = NULL;
    ATTN_CHECK_NOT_NULL(decoder);
    ATTN_CHECK_ARG(decoder->size == 0 || ids != NULL, "%s: ids must not be NULL", fn);
    const attn_rnn_model *m = decoder->model;
    attn_var *features;
    ATTN_TRY(step_features(decoder, ids, &features, weights));
    ATTN_TRY(attn_op_dropout(decoder->graph, features, (float)m->config.dropout, &features));
    return attn_nn_linear_forward(&m->generator, decoder->graph, features, logits);
}

/* A copy of v whose row r (a slice along the first dimension) is v's row rows[r]. */
static attn_status select_rows(attn_graph *graph, attn_var *v, const int64_t *rows, attn_var **out)
{
    if (v == NULL) {
        *out = NULL;
        return ATTN_OK;
    }
    const int64_t size = v->value.shape[0];
    const int64_t per_row = size > 0 ? attn_tensor_numel(&v->value) / size : 0;
    ATTN_TRY(attn_graph_new_var(graph, v->value.ndim, v->value.shape, 0, out));
    for (int64_t r = 0; r < size; r++)
        memcpy((*out)->value.data + r * per_row, v->value.data + rows[r] * per_row,
               (size_t)per_row * sizeof(float));
    return ATTN_OK;
}

attn_status attn_model_rnn_decoder_reorder(attn_rnn_decoder *decoder, const int64_t *rows)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(decoder);
    attn_rnn_decoder *d = decoder;
    attn_graph *graph = d->graph;
    ATTN_CHECK_ARG(!attn_graph_is_recording(graph),
                   "%s: reordering is for inference; turn the graph's recording off", fn);
    ATTN_CHECK_ARG(d->size == 0 || rows != NULL, "%s: rows must not be NULL", fn);
    for (int64_t r = 0; r < d->size; r++)
        ATTN_CHECK_ARG(rows[r] >= 0 && rows[r] < d->size,
                       "%s: rows[%lld] = %lld is outside [0, %lld)", fn, (long long)r,
                       (long long)rows[r], (long long)d->size);
    const int64_t layers = d->model->config.layers;
    /* Every per-sentence value, so rows may also move between sentences. */
    const int keys_are_annotations = d->keys == d->annotations;
    ATTN_TRY(select_rows(graph, d->annotations, rows, &d->annotations));
    if (keys_are_annotations)
        d->keys = d->annotations;
    else
        ATTN_TRY(select_rows(graph, d->keys, rows, &d->keys));
    ATTN_TRY(select_rows(graph, d->summary, rows, &d->summary));
    ATTN_TRY(select_rows(graph, d->feed, rows, &d->feed));
    for (int64_t k = 0; k < layers; k++) {
        ATTN_TRY(select_rows(graph, d->h[k], rows, &d->h[k]));
        ATTN_TRY(select_rows(graph, d->c[k], rows, &d->c[k]));
    }
    if (d->src_lengths != NULL) {
        int32_t *lengths = attn_graph_alloc(graph, (size_t)d->size * sizeof *lengths);
        if (lengths == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        for (int64_t r = 0; r < d->size; r++)
            lengths[r] = d->src_lengths[rows[r]];
        d->src_lengths = lengths;
    }
    return ATTN_OK;
}

/* ---- the step decoder's rnn part ---------------------------------------------------------- */

/* One per-row state of the decoder kept on the heap with room for max_rows rows; var views
 * the current buffer. Selecting rows gathers into the other buffer (rows may repeat, so the
 * gather cannot work in place) and swaps. */
typedef struct row_state {
    attn_var var;
    float *buffers[2];
    int64_t per_row;
    int current;
} row_state;

struct attn_rnn_stepper {
    attn_rnn_decoder d;    /* its variables are the row states' views, its graph ours */
    attn_graph *graph;     /* private: each step runs on it and resets it */
    int64_t max_rows;
    row_state annotations, keys, summary, feed;
    row_state *h, *c;      /* [layers] */
    int has_keys;          /* keys apart from the annotations */
    int has_c, has_feed;   /* they exist after the first step (LSTM; input feeding) */
    int32_t *lengths[2];   /* src_lengths, gathered like the states (NULL: all src_len) */
    int lengths_current;
};

static void row_state_view(row_state *st, int64_t rows)
{
    int64_t shape[ATTN_MAX_DIMS];
    memcpy(shape, st->var.value.shape, sizeof shape);
    shape[0] = rows;
    st->var.value = attn_tensor_view(st->buffers[st->current], st->var.value.ndim, shape);
}

/* Room for max_rows rows shaped like one row of like. */
static attn_status row_state_init(row_state *st, const attn_var *like, int64_t max_rows)
{
    int64_t per_row = 1;
    for (int i = 1; i < like->value.ndim; i++)
        per_row *= like->value.shape[i];
    size_t count;
    if (!attn_mul_size((size_t)max_rows, (size_t)per_row, &count) || count > SIZE_MAX / 8)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_model_step_start: max_rows %lld is too large", (long long)max_rows);
    for (int i = 0; i < 2; i++) {
        st->buffers[i] = attn_aligned_alloc((count > 0 ? count : 1) * sizeof(float));
        if (st->buffers[i] == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_model_step_start: out of memory");
    }
    st->per_row = per_row;
    st->current = 0;
    st->var.value.ndim = like->value.ndim;
    memcpy(st->var.value.shape, like->value.shape, sizeof st->var.value.shape);
    st->var.grad = NULL;
    st->var.requires_grad = 0;
    row_state_view(st, like->value.shape[0]);
    return ATTN_OK;
}

/* The current buffer takes v's rows (v is contiguous, as every operation's output). */
static attn_var *row_state_store(row_state *st, const attn_var *v)
{
    const int64_t rows = v->value.shape[0];
    if (rows > 0)
        memcpy(st->buffers[st->current], v->value.data,
               (size_t)(rows * st->per_row) * sizeof(float));
    row_state_view(st, rows);
    return &st->var;
}

static void row_state_gather(row_state *st, const int64_t *rows, int64_t n)
{
    const float *from = st->buffers[st->current];
    float *to = st->buffers[!st->current];
    for (int64_t r = 0; r < n; r++)
        memcpy(to + r * st->per_row, from + rows[r] * st->per_row,
               (size_t)st->per_row * sizeof(float));
    st->current = !st->current;
    row_state_view(st, n);
}

static void row_state_free(row_state *st)
{
    attn_aligned_free(st->buffers[0]);
    attn_aligned_free(st->buffers[1]);
}

void attn_rnn_stepper_free(attn_rnn_stepper *s)
{
    if (s == NULL)
        return;
    const int64_t layers = s->d.model != NULL ? s->d.model->config.layers : 0;
    row_state_free(&s->annotations);
    row_state_free(&s->keys);
    row_state_free(&s->summary);
    row_state_free(&s->feed);
    for (int64_t k = 0; s->h != NULL && k < layers; k++)
        row_state_free(&s->h[k]);
    for (int64_t k = 0; s->c != NULL && k < layers; k++)
        row_state_free(&s->c[k]);
    free(s->h);
    free(s->c);
    free(s->d.h); /* d.c is its second half */
    free(s->lengths[0]);
    free(s->lengths[1]);
    attn_graph_destroy(s->graph);
    free(s);
}

/* Points the decoder's variables at the row states (after a step, or a failed one). */
static void point_at_states(attn_rnn_stepper *s)
{
    attn_rnn_decoder *d = &s->d;
    d->annotations = &s->annotations.var;
    d->keys = s->has_keys ? &s->keys.var : d->keys != NULL ? d->annotations : NULL;
    d->summary = &s->summary.var;
    d->feed = s->has_feed ? &s->feed.var : NULL;
    for (int64_t k = 0; k < d->model->config.layers; k++) {
        d->h[k] = &s->h[k].var;
        d->c[k] = s->has_c ? &s->c[k].var : NULL;
    }
    d->src_lengths = s->lengths[0] != NULL ? s->lengths[s->lengths_current] : NULL;
}

static attn_status stepper_build(attn_rnn_stepper *s, const attn_rnn_decoder *first,
                                 int64_t max_rows)
{
    const attn_rnn_model *m = first->model;
    const attn_model_config *c = &m->config;
    const int64_t layers = c->layers;
    s->d = *first;
    s->max_rows = max_rows;
    s->h = calloc((size_t)layers, sizeof *s->h);
    s->c = calloc((size_t)layers, sizeof *s->c);
    s->d.h = calloc(2 * (size_t)layers, sizeof *s->d.h);
    if (s->h == NULL || s->c == NULL || s->d.h == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_model_step_start: out of memory");
    s->d.c = s->d.h + layers;
    ATTN_TRY(row_state_init(&s->annotations, first->annotations, max_rows));
    row_state_store(&s->annotations, first->annotations);
    s->has_keys = first->keys != NULL && first->keys != first->annotations;
    if (s->has_keys) {
        ATTN_TRY(row_state_init(&s->keys, first->keys, max_rows));
        row_state_store(&s->keys, first->keys);
    }
    ATTN_TRY(row_state_init(&s->summary, first->summary, max_rows));
    row_state_store(&s->summary, first->summary);
    /* h, c and the fed-back h~ are all [rows, hidden], like h_0. */
    ATTN_TRY(row_state_init(&s->feed, first->h[0], max_rows));
    for (int64_t k = 0; k < layers; k++) {
        ATTN_TRY(row_state_init(&s->h[k], first->h[k], max_rows));
        row_state_store(&s->h[k], first->h[k]);
        ATTN_TRY(row_state_init(&s->c[k], first->h[k], max_rows));
    }
    if (first->src_lengths != NULL) {
        const size_t bytes = (size_t)(max_rows > 0 ? max_rows : 1) * sizeof(int32_t);
        s->lengths[0] = malloc(bytes);
        s->lengths[1] = malloc(bytes);
        if (s->lengths[0] == NULL || s->lengths[1] == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_model_step_start: out of memory");
        memcpy(s->lengths[0], first->src_lengths, (size_t)first->size * sizeof(int32_t));
    }
    s->d.graph = s->graph;
    point_at_states(s);
    return ATTN_OK;
}

attn_status attn_rnn_stepper_start(const char *fn, attn_model *model, attn_graph *graph,
                                   attn_var *memory, const int32_t *src_lengths, int64_t max_rows,
                                   attn_rnn_stepper **out)
{
    const attn_rnn_model *m = attn_model_rnn_part(model);
    attn_rnn_decoder *first;
    ATTN_TRY(start(fn, m, graph, memory, src_lengths, &first));
    ATTN_CHECK_ARG(max_rows >= first->size, "%s: max_rows %lld is below the batch size %lld", fn,
                   (long long)max_rows, (long long)first->size);
    attn_rnn_stepper *s = calloc(1, sizeof *s);
    if (s == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = attn_graph_create(attn_model_params(model), &s->graph);
    if (status == ATTN_OK) {
        attn_graph_set_recording(s->graph, 0);
        attn_graph_set_training(s->graph, 0);
        status = stepper_build(s, first, max_rows);
    }
    if (status != ATTN_OK) {
        s->d.model = m;
        attn_rnn_stepper_free(s);
        return status;
    }
    *out = s;
    return ATTN_OK;
}

attn_status attn_rnn_stepper_step(attn_rnn_stepper *s, const int32_t *ids,
                                  float *logits, float *weights)
{
    attn_rnn_decoder *d = &s->d;
    const attn_rnn_model *m = d->model;
    const int64_t step = d->step;
    attn_var *features, *w = NULL, *out = NULL;
    attn_status status = step_features(d, ids, &features, weights != NULL ? &w : NULL);
    if (status == ATTN_OK)
        status = attn_nn_linear_forward(&m->generator, s->graph, features, &out);
    if (status == ATTN_OK) {
        const int64_t n = d->size;
        memcpy(logits, out->value.data, (size_t)(n * m->config.tgt_vocab) * sizeof(float));
        if (weights != NULL && w != NULL)
            memcpy(weights, w->value.data, (size_t)(n * d->src_len) * sizeof(float));
        else if (weights != NULL)
            memset(weights, 0, (size_t)(n * d->src_len) * sizeof(float));
        for (int64_t k = 0; k < m->config.layers; k++) {
            row_state_store(&s->h[k], d->h[k]);
            if (d->c[k] != NULL) {
                row_state_store(&s->c[k], d->c[k]);
                s->has_c = 1;
            }
        }
        if (d->feed != NULL) {
            row_state_store(&s->feed, d->feed);
            s->has_feed = 1;
        }
    } else {
        d->step = step;
    }
    point_at_states(s);
    attn_graph_reset(s->graph);
    return status;
}

attn_status attn_rnn_stepper_select(attn_rnn_stepper *s, const int64_t *rows, int64_t new_size)
{
    row_state_gather(&s->annotations, rows, new_size);
    if (s->has_keys)
        row_state_gather(&s->keys, rows, new_size);
    row_state_gather(&s->summary, rows, new_size);
    if (s->has_feed)
        row_state_gather(&s->feed, rows, new_size);
    for (int64_t k = 0; k < s->d.model->config.layers; k++) {
        row_state_gather(&s->h[k], rows, new_size);
        if (s->has_c)
            row_state_gather(&s->c[k], rows, new_size);
    }
    if (s->lengths[0] != NULL) {
        const int32_t *from = s->lengths[s->lengths_current];
        int32_t *to = s->lengths[!s->lengths_current];
        for (int64_t r = 0; r < new_size; r++)
            to[r] = from[rows[r]];
        s->lengths_current = !s->lengths_current;
    }
    s->d.size = new_size;
    point_at_states(s);
    return ATTN_OK;
}

int64_t attn_rnn_stepper_size(const attn_rnn_stepper *s) { return s->d.size; }
