/* The graph: an arena for one step's variables, and the tape of backward nodes. */
#include "autodiff/autodiff_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tape_node {
    struct tape_node *prev;
    attn_backward_fn backward;
    void *ctx;
    attn_var **outputs;
    int n_outputs;
    const char *name;
} tape_node;

struct attn_graph {
    attn_arena *arena;
    size_t arena_block; /* the size of the arena's blocks */
    attn_params *store;
    int recording, training;
    attn_precision precision;
    const volatile sig_atomic_t *cancel_flag;
    int backward_done;
    uint64_t dropout_seed, dropout_step, dropout_count;
    tape_node *last;
    size_t nodes;
    attn_attention_observer observer;
    void *observer_ctx;
    int64_t attention_ops; /* multi-head attention ops since the reset */
    /* Per parameter id: the tape's length when the step first read it (SIZE_MAX: not yet).
     * Allocated at the first recorded read of a parameter. */
    size_t *first_node;
    size_t first_node_count;
    attn_backward_observer backward_observer;
    void *backward_observer_ctx;
};

enum { GRAPH_ARENA_BYTES = 4 << 20 };

attn_status attn_graph_create(attn_params *store, attn_graph **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    attn_graph *g = calloc(1, sizeof *g);
    if (g == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_graph_create: out of memory");
    attn_status status = attn_arena_create(GRAPH_ARENA_BYTES, &g->arena);
    if (status != ATTN_OK) {
        free(g);
        return status;
    }
    g->arena_block = GRAPH_ARENA_BYTES;
    g->store = store;
    g->recording = 1;
    g->training = 1;
    *out = g;
    return ATTN_OK;
}

void attn_graph_destroy(attn_graph *graph)
{
    if (graph == NULL)
        return;
    attn_arena_destroy(graph->arena);
    free(graph->first_node);
    free(graph);
}

attn_params *attn_graph_params(const attn_graph *graph)
{
    return graph ? graph->store : NULL;
}

/* A step that outgrew one block left its memory spread over several, and steps of other
 * shapes (batches of other lengths) could keep adding blocks around the gaps. One block with
 * room for the largest step so far ends that: once the largest batch has been seen, the
 * graph allocates nothing. If the new block cannot be had, the old arena stays. */
static void consolidate_arena(attn_graph *graph)
{
    size_t peak = attn_arena_peak(graph->arena);
    if (peak <= graph->arena_block || peak > SIZE_MAX / 2)
        return;
    size_t block = peak + peak / 4;
    attn_arena *bigger = NULL;
    if (attn_arena_create(block, &bigger) != ATTN_OK) {
        attn_clear_error();
        return;
    }
    attn_arena_destroy(graph->arena);
    graph->arena = bigger;
    graph->arena_block = block;
}

void attn_graph_reset(attn_graph *graph)
{
    if (graph == NULL)
        return;
    attn_arena_reset(graph->arena);
    consolidate_arena(graph);
    graph->last = NULL;
    graph->nodes = 0;
    graph->dropout_count = 0;
    graph->backward_done = 0;
    graph->attention_ops = 0;
    for (size_t i = 0; i < graph->first_node_count; i++)
        graph->first_node[i] = SIZE_MAX;
}

void attn_graph_set_backward_observer(attn_graph *graph, attn_backward_observer observer, void *ctx)
{
    if (graph == NULL)
        return;
    graph->backward_observer = observer;
    graph->backward_observer_ctx = observer != NULL ? ctx : NULL;
}

size_t attn_graph_param_first_node(const attn_graph *graph, attn_param_id id)
{
    if (graph == NULL || id < 0 || (size_t)id >= graph->first_node_count)
        return SIZE_MAX;
    return graph->first_node[id];
}

/* Remembers when the step first read parameter id: a node pushed before then cannot have it
 * as an input, so cannot add to its gradient. */
static attn_status note_param_read(attn_graph *graph, attn_param_id id)
{
    if (graph->first_node == NULL) {
        size_t count = attn_params_count(graph->store);
        graph->first_node = malloc((count > 0 ? count : 1) * sizeof *graph->first_node);
        if (graph->first_node == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_graph_param: out of memory");
        graph->first_node_count = count;
        for (size_t i = 0; i < count; i++)
            graph->first_node[i] = SIZE_MAX;
    }
    if ((size_t)id < graph->first_node_count && graph->first_node[id] == SIZE_MAX)
        graph->first_node[id] = graph->nodes;
    return ATTN_OK;
}

void attn_graph_set_attention_observer(attn_graph *graph, attn_attention_observer observer,
                                       void *ctx)
{
    if (graph == NULL)
        return;
    graph->observer = observer;
    graph->observer_ctx = observer != NULL ? ctx : NULL;
}

int64_t attn_ad_next_attention_op(attn_graph *graph, attn_attention_observer *observer, void **ctx)
{
    *observer = graph->observer;
    *ctx = graph->observer_ctx;
    return graph->attention_ops++;
}

void attn_graph_set_recording(attn_graph *graph, int on)
{
    if (graph != NULL)
        graph->recording = on != 0;
}
int attn_graph_is_recording(const attn_graph *graph)
{
    return graph != NULL && graph->recording;
}

void attn_graph_set_training(attn_graph *graph, int on)
{
    if (graph != NULL)
        graph->training = on != 0;
}
int attn_graph_is_training(const attn_graph *graph)
{
    return graph != NULL && graph->training;
}
void attn_graph_set_precision(attn_graph *graph, attn_precision precision)
{
    if (graph != NULL)
        graph->precision = precision;
}
attn_precision attn_graph_precision(const attn_graph *graph)
{
    return graph != NULL ? graph->precision : ATTN_PRECISION_FP32;
}
void attn_graph_set_cancel_flag(attn_graph *graph, const volatile sig_atomic_t *flag)
{
    if (graph != NULL)
        graph->cancel_flag = flag;
}

attn_precision attn_ad_product_precision(const attn_graph *graph)
{
    return attn_graph_precision(graph) == ATTN_PRECISION_BF16 ? ATTN_PRECISION_BF16
                                                              : ATTN_PRECISION_FP32;
}

void attn_graph_set_dropout_seed(attn_graph *graph, uint64_t seed, uint64_t step)
{
    if (graph == NULL)
        return;
    graph->dropout_seed = seed;
    graph->dropout_step = step;
}

/* splitmix64's finaliser: spreads (seed, step, k) into unrelated mask seeds. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t attn_graph_next_dropout_seed(attn_graph *graph)
{
    uint64_t k = graph->dropout_count++;
    uint64_t h = mix64(graph->dropout_seed + 0x9e3779b97f4a7c15ULL);
    h = mix64(h ^ (graph->dropout_step + 0x632be59bd9b4e019ULL));
    return mix64(h ^ (k + 0x85ebca6b0f3e2c1dULL));
}

size_t attn_graph_memory_used(const attn_graph *graph)
{
    return graph ? attn_arena_used(graph->arena) : 0;
}
size_t attn_graph_memory_peak(const attn_graph *graph)
{
    return graph ? attn_arena_peak(graph->arena) : 0;
}
size_t attn_graph_node_count(const attn_graph *graph)
{
    return graph ? graph->nodes : 0;
}

void *attn_graph_alloc(attn_graph *graph, size_t bytes)
{
    if (graph == NULL) {
        attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_graph_alloc: graph must not be NULL");
        return NULL;
    }
    return attn_arena_alloc(graph->arena, bytes);
}

float *attn_graph_alloc_floats(attn_graph *graph, size_t count)
{
    size_t bytes;
    if (!attn_mul_size(count, sizeof(float), &bytes))
        return NULL;
    return attn_graph_alloc(graph, bytes);
}

static attn_status check_shape(const char *fn, int ndim, const int64_t *shape, int64_t *numel)
{
    ATTN_CHECK_ARG(ndim >= 0 && ndim <= ATTN_MAX_DIMS, "%s: ndim must be 0..%d, got %d", fn,
                   ATTN_MAX_DIMS, ndim);
    ATTN_CHECK_ARG(ndim == 0 || shape != NULL, "%s: shape must not be NULL", fn);
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) {
        ATTN_CHECK_ARG(shape[d] >= 0, "%s: dimension %d is negative (%lld)", fn, d,
                       (long long)shape[d]);
        ATTN_CHECK_ARG(shape[d] == 0 || n <= INT64_MAX / 8 / shape[d], "%s: too many elements", fn);
        n *= shape[d];
    }
    *numel = n;
    return ATTN_OK;
}

static attn_status check_cancel(const char *fn, const attn_graph *graph)
{
    if (graph->cancel_flag != NULL && *graph->cancel_flag != 0)
        return attn_fail(ATTN_ERR_CANCELLED, "%s: cancelled (the graph's cancel flag is set)", fn);
    return ATTN_OK;
}

static attn_status new_var(const char *fn, attn_graph *graph, int ndim, const int64_t *shape,
                           int requires_grad, attn_var **out)
{
    ATTN_CHECK_ARG(graph != NULL, "%s: graph must not be NULL", fn);
    ATTN_CHECK_ARG(out != NULL, "%s: out must not be NULL", fn);
    *out = NULL;
    /* Every operation makes its output here first, so a set flag stops a forward pass within
     * one operation, recording or not. */
    ATTN_TRY(check_cancel(fn, graph));
    ATTN_CHECK_ARG(requires_grad == 0 || requires_grad == 1,
                   "%s: requires_grad must be 0 or 1, got %d", fn, requires_grad);
    int64_t numel = 0;
    ATTN_TRY(check_shape(fn, ndim, shape, &numel));
    attn_var *v = attn_arena_alloc(graph->arena, sizeof *v);
    float *data = attn_graph_alloc_floats(graph, (size_t)numel);
    if (v == NULL || data == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    static const int64_t scalar_shape[1] = {1};
    v->value = attn_tensor_view(data, ndim, ndim == 0 ? scalar_shape : shape);
    v->grad = NULL;
    v->requires_grad = requires_grad && graph->recording;
    *out = v;
    return ATTN_OK;
}

attn_status attn_graph_new_var(attn_graph *graph, int ndim, const int64_t *shape, int requires_grad,
                               attn_var **out)
{
    return new_var(__func__, graph, ndim, shape, requires_grad, out);
}

attn_status attn_graph_input(attn_graph *graph, int ndim, const int64_t *shape, const float *data,
                             int requires_grad, attn_var **out)
{
    ATTN_TRY(new_var(__func__, graph, ndim, shape, requires_grad, out));
    size_t bytes = (size_t)attn_tensor_numel(&(*out)->value) * sizeof(float);
    if (data != NULL)
        memcpy((*out)->value.data, data, bytes);
    else
        memset((*out)->value.data, 0, bytes);
    return ATTN_OK;
}

attn_status attn_graph_param(attn_graph *graph, attn_param_id id, attn_var **out)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_ARG(graph->store != NULL, "%s: the graph was created without a parameter store", fn);
    ATTN_CHECK_ARG(attn_params_is_finalized(graph->store),
                   "%s: the parameter store is not finalised", fn);
    attn_param_info info;
    ATTN_TRY(attn_params_info(graph->store, id, &info));
    if (graph->recording)
        ATTN_TRY(note_param_read(graph, id));
    attn_var *v = attn_arena_alloc(graph->arena, sizeof *v);
    if (v == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    v->value = attn_tensor_view(attn_params_data(graph->store, id, ATTN_PARAM_VALUES), info.ndim,
                                info.shape);
    v->requires_grad = graph->recording;
    v->grad = graph->recording ? attn_params_data(graph->store, id, ATTN_PARAM_GRADS) : NULL;
    *out = v;
    return ATTN_OK;
}

int attn_graph_wants_grad(const attn_graph *graph, int n, attn_var *const *inputs)
{
    if (graph == NULL || !graph->recording || inputs == NULL)
        return 0;
    for (int i = 0; i < n; i++)
        if (inputs[i] != NULL && inputs[i]->requires_grad)
            return 1;
    return 0;
}

attn_status attn_graph_record_outputs(attn_graph *graph, int n_outputs, attn_var *const *outputs,
                                      attn_backward_fn backward, void *ctx, const char *name)
{
    const char *fn = __func__;
    name = name ? name : "?";
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_NOT_NULL(outputs);
    ATTN_CHECK_NOT_NULL(backward);
    ATTN_CHECK_ARG(n_outputs >= 1, "%s: %s: n_outputs must be >= 1, got %d", fn, name, n_outputs);
    for (int i = 0; i < n_outputs; i++)
        ATTN_CHECK_ARG(outputs[i] != NULL, "%s: %s: outputs[%d] must not be NULL", fn, name, i);
    ATTN_CHECK_ARG(graph->recording, "%s: %s: the graph is not recording", fn, name);
    ATTN_CHECK_ARG(!graph->backward_done,
                   "%s: %s: backward already ran on this graph; reset it first", fn, name);
    tape_node *node = attn_arena_alloc(graph->arena, sizeof *node);
    attn_var **copy = attn_arena_alloc(graph->arena, (size_t)n_outputs * sizeof *copy);
    if (node == NULL || copy == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    for (int i = 0; i < n_outputs; i++) {
        copy[i] = outputs[i];
        copy[i]->requires_grad = 1;
    }
    node->prev = graph->last;
    node->backward = backward;
    node->ctx = ctx;
    node->outputs = copy;
    node->n_outputs = n_outputs;
    node->name = name;
    graph->last = node;
    graph->nodes++;
    return ATTN_OK;
}

attn_status attn_graph_record(attn_graph *graph, attn_var *output, attn_backward_fn backward,
                              void *ctx, const char *name)
{
    return attn_graph_record_outputs(graph, 1, &output, backward, ctx, name);
}

attn_status attn_graph_grad(attn_graph *graph, attn_var *var, float **grad)
{
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_NOT_NULL(var);
    ATTN_CHECK_NOT_NULL(grad);
    int accumulate;
    ATTN_TRY(attn_ad_grad_to_write(graph, var, grad, &accumulate));
    if (*grad != NULL && !accumulate)
        attn_ad_zero(attn_tensor_numel(&var->value), *grad);
    return ATTN_OK;
}

attn_status attn_ad_grad_to_write(attn_graph *graph, attn_var *var, float **grad, int *accumulate)
{
    *grad = NULL;
    *accumulate = 1;
    if (!var->requires_grad)
        return ATTN_OK;
    if (var->grad == NULL) {
        var->grad = attn_graph_alloc_floats(graph, (size_t)attn_tensor_numel(&var->value));
        if (var->grad == NULL)
            return ATTN_ERR_OUT_OF_MEMORY;
        *accumulate = 0;
    }
    *grad = var->grad;
    return ATTN_OK;
}

static attn_status observe_backward(attn_backward_observer observer, void *ctx, size_t remaining)
{
    attn_clear_error();
    attn_status status = observer(ctx, remaining);
    if (status == ATTN_OK)
        return ATTN_OK;
    char inner[512];
    snprintf(inner, sizeof inner, "%s",
             attn_last_error()[0] ? attn_last_error() : attn_status_name(status));
    return attn_fail(status, "attn_graph_backward: the backward observer failed: %s", inner);
}

static attn_status run_tape(attn_graph *graph)
{
    graph->backward_done = 1;
    attn_backward_observer observer = graph->backward_observer;
    void *observer_ctx = graph->backward_observer_ctx;
    size_t remaining = graph->nodes;
    if (observer != NULL)
        ATTN_TRY(observe_backward(observer, observer_ctx, remaining));
    for (tape_node *node = graph->last; node != NULL; node = node->prev) {
        remaining--;
        int reached = 0;
        for (int i = 0; i < node->n_outputs; i++)
            reached |= node->outputs[i]->grad != NULL;
        if (reached) {
            ATTN_TRY(check_cancel("attn_graph_backward", graph));
            attn_status status = node->backward(graph, node->outputs[0], node->ctx);
            if (status != ATTN_OK) {
                char inner[512];
                snprintf(inner, sizeof inner, "%s", attn_last_error());
                return attn_fail(status, "attn_graph_backward: %s: %s", node->name, inner);
            }
        }
        if (observer != NULL)
            ATTN_TRY(observe_backward(observer, observer_ctx, remaining));
    }
    return ATTN_OK;
}

static attn_status check_backward_start(const char *fn, attn_graph *graph, attn_var *output)
{
    ATTN_CHECK_NOT_NULL(graph);
    ATTN_CHECK_NOT_NULL(output);
    ATTN_CHECK_ARG(!graph->backward_done,
                   "%s: backward already ran on this graph; reset it before the next step", fn);
    ATTN_CHECK_ARG(output->requires_grad,
                   "%s: the output does not depend on anything that requires a gradient (was "
                   "the graph recording?)",
                   fn);
    return ATTN_OK;
}

attn_status attn_graph_backward(attn_graph *graph, attn_var *loss)
{
    const char *fn = __func__;
    ATTN_TRY(check_backward_start(fn, graph, loss));
    ATTN_CHECK_ARG(attn_tensor_numel(&loss->value) == 1,
                   "%s: the loss must have one element, got %lld", fn,
                   (long long)attn_tensor_numel(&loss->value));
    float *seed;
    ATTN_TRY(attn_graph_grad(graph, loss, &seed));
    seed[0] += 1.0f;
    return run_tape(graph);
}

attn_status attn_graph_backward_from(attn_graph *graph, attn_var *output, const float *grad_output)
{
    ATTN_TRY(check_backward_start(__func__, graph, output));
    ATTN_CHECK_NOT_NULL(grad_output);
    float *grad;
    int accumulate;
    ATTN_TRY(attn_ad_grad_to_write(graph, output, &grad, &accumulate));
    attn_ad_write_or_accumulate(attn_tensor_numel(&output->value), grad_output, grad, accumulate);
    return run_tape(graph);
}

/* ---- helpers for the operations --------------------------------------------------------- */

attn_status attn_ad_check_var(const char *fn, const char *what, const attn_var *v)
{
    ATTN_CHECK_ARG(v != NULL, "%s: %s must not be NULL", fn, what);
    ATTN_CHECK_ARG(v->value.data != NULL || attn_tensor_numel(&v->value) == 0,
                   "%s: %s has no value", fn, what);
    return ATTN_OK;
}

const float *attn_ad_optional_data(const attn_var *v)
{
    return v != NULL ? v->value.data : NULL;
}

attn_status attn_ad_optional_grad(attn_graph *graph, attn_var *v, float **grad)
{
    *grad = NULL;
    return v == NULL ? ATTN_OK : attn_graph_grad(graph, v, grad);
}

attn_status attn_ad_record(attn_graph *graph, int n_outputs, attn_var *const *outputs,
                           attn_backward_fn backward, const void *ctx, size_t n_ctx_bytes,
                           const char *name)
{
    void *saved = attn_graph_alloc(graph, n_ctx_bytes);
    if (saved == NULL)
        return ATTN_ERR_OUT_OF_MEMORY;
    memcpy(saved, ctx, n_ctx_bytes);
    return attn_graph_record_outputs(graph, n_outputs, outputs, backward, saved, name);
}

int64_t attn_ad_last_dim(const attn_var *v)
{
    return v->value.ndim == 0 ? 1 : v->value.shape[v->value.ndim - 1];
}

int64_t attn_ad_rows(const attn_var *v)
{
    int64_t rows = 1;
    for (int d = 0; d + 1 < v->value.ndim; d++)
        rows *= v->value.shape[d];
    return rows;
}

int attn_ad_same_shape(const attn_var *a, const attn_var *b)
{
    if (a->value.ndim != b->value.ndim)
        return 0;
    for (int d = 0; d < a->value.ndim; d++)
        if (a->value.shape[d] != b->value.shape[d])
            return 0;
    return 1;
}

const char *attn_ad_shape_text(const attn_var *v, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, size, "[");
    for (int d = 0; d < v->value.ndim && used < size; d++)
        used += (size_t)snprintf(buf + used, size - used, d == 0 ? "%lld" : ", %lld",
                                 (long long)v->value.shape[d]);
    if (used < size)
        snprintf(buf + used, size - used, "]");
    return buf;
}

enum { STREAM_CHUNK = 1 << 14 };

typedef struct stream_job {
    const float *a, *b;
    float *dst;
} stream_job;

static void accumulate_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const stream_job *job = ctx;
    for (int64_t i = begin; i < end; i++)
        job->dst[i] += job->a[i];
}

/* 0 + src rather than a plain copy: the bits of adding src to zeros, -0 included. */
static void write_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const stream_job *job = ctx;
    for (int64_t i = begin; i < end; i++)
        job->dst[i] = 0.0f + job->a[i];
}

void attn_ad_write_or_accumulate(int64_t n, const float *src, float *dst, int accumulate)
{
    stream_job job = {src, NULL, dst};
    attn_parallel_for(n, STREAM_CHUNK, accumulate ? accumulate_range : write_range, &job);
}

static void zero_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const stream_job *job = ctx;
    memset(job->dst + begin, 0, (size_t)(end - begin) * sizeof(float));
}

void attn_ad_zero(int64_t n, float *dst)
{
    stream_job job = {NULL, NULL, dst};
    attn_parallel_for(n, 4 * STREAM_CHUNK, zero_range, &job);
}

static void add_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const stream_job *job = ctx;
    for (int64_t i = begin; i < end; i++)
        job->dst[i] = job->a[i] + job->b[i];
}

void attn_ad_add(int64_t n, const float *a, const float *b, float *dst)
{
    stream_job job = {a, b, dst};
    attn_parallel_for(n, STREAM_CHUNK, add_range, &job);
}

typedef struct rows_job {
    int64_t rows, cols;
    const float *src;
    float *dst;
} rows_job;

static void fill_rows_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const rows_job *job = ctx;
    for (int64_t r = begin; r < end; r++)
        memcpy(job->dst + r * job->cols, job->src, (size_t)job->cols * sizeof(float));
}

void attn_ad_fill_rows(int64_t rows, int64_t cols, const float *row, float *dst)
{
    if (cols <= 0)
        return;
    rows_job job = {rows, cols, row, dst};
    attn_parallel_for(rows, 1 + STREAM_CHUNK / cols, fill_rows_range, &job);
}

/* Columns are split over the threads in blocks of COLUMN_BLOCK; a thread sums up to
 * COLUMN_SPAN of its columns in one pass down the rows, so each row is read as one long
 * contiguous run (a 64-column pass per block re-read the matrix with a stride, 3% of a
 * training step). Each column is still summed in row order, so the bits do not depend on
 * the blocking. */
enum { COLUMN_BLOCK = 64, COLUMN_SPAN = 1024 };

static void column_sums_range(void *ctx, int64_t begin, int64_t end, int thread_index)
{
    (void)thread_index;
    const rows_job *job = ctx;
    const int64_t last = job->cols < end * COLUMN_BLOCK ? job->cols : end * COLUMN_BLOCK;
    for (int64_t first = begin * COLUMN_BLOCK; first < last; first += COLUMN_SPAN) {
        int64_t width = last - first < COLUMN_SPAN ? last - first : COLUMN_SPAN;
        double sums[COLUMN_SPAN];
        for (int64_t c = 0; c < width; c++)
            sums[c] = 0.0;
        for (int64_t r = 0; r < job->rows; r++) {
            const float *row = job->src + r * job->cols + first;
            for (int64_t c = 0; c < width; c++)
                sums[c] += row[c];
        }
        for (int64_t c = 0; c < width; c++)
            job->dst[first + c] = (float)((double)job->dst[first + c] + sums[c]);
    }
}

void attn_ad_add_column_sums(int64_t rows, int64_t cols, const float *src, float *dst)
{
    rows_job job = {rows, cols, src, dst};
    attn_parallel_for((cols + COLUMN_BLOCK - 1) / COLUMN_BLOCK, 1, column_sums_range, &job);
}
