/* The rnn models' step decoder (step_decoder.h): the recurrent state of every row kept on the
 * heap, each step run on a private graph (rnn_model.c's decoder, one position) and reset. */
#include "models/rnn_internal.h"
#include "models/step_decoder.h"

#include <stdlib.h>
#include <string.h>

/* One per-row state of the decoder kept on the heap with room for max_rows rows; var views
 * the current buffer. Selecting rows gathers into the other buffer (rows may repeat, so the
 * gather cannot work in place) and swaps. */
typedef struct row_state {
    attn_var var;
    float *buffers[2];
    int64_t per_row;
    int current;
} row_state;

typedef struct rnn_step_decoder {
    attn_step_decoder base;
    attn_rnn_decoder d; /* its variables are the row states' views, its graph ours */
    attn_graph *graph;  /* private: each step runs on it and resets it */
    row_state annotations, keys, summary, feed;
    row_state *h, *c;    /* [layers] */
    int has_keys;        /* keys apart from the annotations */
    int has_c, has_feed; /* they exist after the first step (LSTM; input feeding) */
    int32_t *lengths[2]; /* src_lengths, gathered like the states (NULL: all src_len) */
    int lengths_current;
} rnn_step_decoder;

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

static void rnn_destroy(attn_step_decoder *decoder)
{
    rnn_step_decoder *s = (rnn_step_decoder *)decoder;
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
static void point_at_states(rnn_step_decoder *s)
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

static attn_status hold_first_state(rnn_step_decoder *s, const attn_rnn_decoder *first,
                                    int64_t max_rows)
{
    const attn_rnn_model *m = first->model;
    const attn_model_config *c = &m->config;
    const int64_t layers = c->layers;
    s->d = *first;
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

static attn_status rnn_step(attn_step_decoder *decoder, const int32_t *ids, float *logits,
                            float *weights)
{
    rnn_step_decoder *s = (rnn_step_decoder *)decoder;
    attn_rnn_decoder *d = &s->d;
    const attn_rnn_model *m = d->model;
    const int64_t step = d->step;
    attn_var *features, *w = NULL, *out = NULL;
    attn_status status = attn_rnn_decoder_features(d, ids, &features, weights != NULL ? &w : NULL);
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

static attn_status rnn_select(attn_step_decoder *decoder, const int64_t *rows, int64_t new_size)
{
    rnn_step_decoder *s = (rnn_step_decoder *)decoder;
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

static const attn_step_decoder_ops rnn_ops = {rnn_step, rnn_select, rnn_destroy, NULL};

attn_status attn_rnn_step_start(const char *fn, attn_model *model, attn_graph *graph,
                                attn_var *memory, const int32_t *src_lengths, int64_t max_rows,
                                int64_t max_steps, attn_step_decoder **out)
{
    *out = NULL;
    const attn_rnn_model *m = attn_model_rnn_part(model);
    attn_rnn_decoder *first;
    const attn_precision previous = attn_model_enter_precision(model, graph);
    const attn_status started = attn_rnn_decoder_start(fn, m, graph, memory, src_lengths, &first);
    attn_graph_set_precision(graph, previous);
    ATTN_TRY(started);
    ATTN_CHECK_ARG(max_rows >= first->size, "%s: max_rows %lld is below the batch size %lld", fn,
                   (long long)max_rows, (long long)first->size);
    rnn_step_decoder *s = calloc(1, sizeof *s);
    if (s == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    /* One cross map: the attention weights over the source. */
    s->base = (attn_step_decoder){
        &rnn_ops, first->size, max_rows, max_steps, 0, m->config.tgt_vocab, first->src_len, 1, 1};
    attn_status status = attn_graph_create(attn_model_params(model), &s->graph);
    if (status == ATTN_OK) {
        attn_graph_set_recording(s->graph, 0);
        attn_graph_set_training(s->graph, 0);
        attn_model_enter_precision(model, s->graph); /* kept: the graph is the decoder's own */
        status = hold_first_state(s, first, max_rows);
    }
    if (status != ATTN_OK) {
        s->d.model = m;
        rnn_destroy(&s->base);
        return status;
    }
    *out = &s->base;
    return ATTN_OK;
}
