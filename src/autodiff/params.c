/* The parameter store: named parameters laid out in one contiguous buffer, with gradients
 * and Adam moments in three more buffers of the same layout. */
#include "core/internal.h"
#include "attn/attn_autodiff.h"
#include "autodiff/autodiff_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Each parameter starts on a 64-byte boundary so SIMD loops over one parameter need no
 * peeling and no two parameters share a cache line. */
enum { PARAM_ALIGN_FLOATS = 16 };

#define BUFFER_COUNT 4

typedef struct param_entry {
    char *name;
    int ndim;
    int64_t shape[ATTN_MAX_DIMS];
    int64_t numel;
    size_t offset;
    attn_init init;
} param_entry;

/* Prefixed names handed out by attn_params_tensors, one set per buffer. */
typedef struct name_set {
    char *text;
    size_t capacity;
} name_set;

/* A weight's copy packed for bf16 products in one layout, and the values' version it was
 * packed from. */
typedef struct packed_weight {
    attn_gemm_packed_b *packed;
    uint64_t version;
} packed_weight;

struct attn_params {
    param_entry *entries;
    size_t count, capacity;
    int finalized;
    size_t buffer_floats;
    int64_t numel;
    float *buffers[BUFFER_COUNT];
    name_set names[BUFFER_COUNT];
    /* Per parameter, its two layouts as a product's op(B) (W^T, then W); NULL until a bf16
     * product first asks. values_version counts the writes of the values. */
    packed_weight *packed;
    uint64_t values_version;
    const attn_quantized_matrix *stored; /* attn_ad_params_set_stored; NULL: none */
};

attn_init attn_init_zeros(void)
{
    return (attn_init){ATTN_INIT_ZEROS, 0.0f};
}
attn_init attn_init_ones(void)
{
    return (attn_init){ATTN_INIT_ONES, 0.0f};
}
attn_init attn_init_normal(float std)
{
    return (attn_init){ATTN_INIT_NORMAL, std};
}
attn_init attn_init_uniform(float bound)
{
    return (attn_init){ATTN_INIT_UNIFORM, bound};
}
attn_init attn_init_xavier_uniform(float gain)
{
    return (attn_init){ATTN_INIT_XAVIER_UNIFORM, gain};
}

attn_status attn_params_create(attn_params **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_params_create: out of memory");
    return ATTN_OK;
}

void attn_params_destroy(attn_params *store)
{
    if (store == NULL)
        return;
    for (size_t i = 0; i < store->count; i++)
        free(store->entries[i].name);
    free(store->entries);
    for (size_t i = 0; store->packed != NULL && i < 2 * store->count; i++)
        attn_gemm_packed_b_destroy(store->packed[i].packed);
    free(store->packed);
    for (int b = 0; b < BUFFER_COUNT; b++) {
        attn_aligned_free(store->buffers[b]);
        free(store->names[b].text);
    }
    free(store);
}

static const char *init_kind_name(attn_init_kind kind)
{
    switch (kind) {
    case ATTN_INIT_ZEROS:
        return "zeros";
    case ATTN_INIT_ONES:
        return "ones";
    case ATTN_INIT_NORMAL:
        return "normal";
    case ATTN_INIT_UNIFORM:
        return "uniform";
    case ATTN_INIT_XAVIER_UNIFORM:
        return "xavier_uniform";
    }
    return "?";
}

static attn_status check_init(const char *name, int ndim, attn_init init)
{
    const char *fn = "attn_params_add";
    ATTN_CHECK_ARG(init.kind >= ATTN_INIT_ZEROS && init.kind <= ATTN_INIT_XAVIER_UNIFORM,
                   "%s: '%s': unknown initialiser %d", fn, name, (int)init.kind);
    ATTN_CHECK_ARG(isfinite(init.scale) && init.scale >= 0.0f,
                   "%s: '%s': %s initialiser needs a finite scale >= 0, got %g", fn, name,
                   init_kind_name(init.kind), (double)init.scale);
    ATTN_CHECK_ARG(init.kind != ATTN_INIT_XAVIER_UNIFORM || ndim >= 2,
                   "%s: '%s': xavier_uniform needs at least 2 dimensions, got %d", fn, name, ndim);
    return ATTN_OK;
}

attn_status attn_params_add(attn_params *store, const char *name, int ndim, const int64_t *shape,
                            attn_init init, attn_param_id *id)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(store);
    ATTN_CHECK_NOT_NULL(name);
    ATTN_CHECK_ARG(name[0] != '\0', "%s: name must not be empty", fn);
    ATTN_CHECK_ARG(!store->finalized, "%s: '%s': the store is already finalised", fn, name);
    ATTN_CHECK_ARG(ndim >= 1 && ndim <= ATTN_MAX_DIMS, "%s: '%s': ndim must be 1..%d, got %d", fn,
                   name, ATTN_MAX_DIMS, ndim);
    ATTN_CHECK_NOT_NULL(shape);
    ATTN_CHECK_ARG(store->count < (size_t)INT32_MAX, "%s: too many parameters", fn);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        ATTN_CHECK_ARG(shape[d] >= 1, "%s: '%s': dimension %d must be positive, got %lld", fn, name,
                       d, (long long)shape[d]);
        ATTN_CHECK_ARG(numel <= INT64_MAX / 4 / shape[d], "%s: '%s': too many elements", fn, name);
        numel *= shape[d];
    }
    ATTN_TRY(check_init(name, ndim, init));
    for (size_t i = 0; i < store->count; i++)
        ATTN_CHECK_ARG(strcmp(store->entries[i].name, name) != 0,
                       "%s: a parameter named '%s' already exists", fn, name);

    if (store->count == store->capacity) {
        size_t capacity = store->capacity == 0 ? 32 : 2 * store->capacity;
        param_entry *grown = realloc(store->entries, capacity * sizeof *grown);
        if (grown == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        store->entries = grown;
        store->capacity = capacity;
    }
    size_t name_bytes = strlen(name) + 1;
    char *copy = malloc(name_bytes);
    if (copy == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    memcpy(copy, name, name_bytes);

    param_entry *e = &store->entries[store->count];
    memset(e, 0, sizeof *e);
    e->name = copy;
    e->ndim = ndim;
    memcpy(e->shape, shape, (size_t)ndim * sizeof *shape);
    e->numel = numel;
    e->init = init;
    if (id != NULL)
        *id = (attn_param_id)store->count;
    store->count++;
    return ATTN_OK;
}

attn_status attn_params_finalize(attn_params *store)
{
    const char *fn = __func__;
    ATTN_CHECK_NOT_NULL(store);
    ATTN_CHECK_ARG(!store->finalized, "%s: the store is already finalised", fn);
    size_t offset = 0;
    int64_t numel = 0;
    for (size_t i = 0; i < store->count; i++) {
        param_entry *e = &store->entries[i];
        e->offset = offset;
        size_t padded =
            ((size_t)e->numel + PARAM_ALIGN_FLOATS - 1) / PARAM_ALIGN_FLOATS * PARAM_ALIGN_FLOATS;
        ATTN_CHECK_ARG(offset <= SIZE_MAX / sizeof(float) / 2 - padded, "%s: parameters too large",
                       fn);
        offset += padded;
        numel += e->numel;
    }
    size_t bytes = (offset == 0 ? PARAM_ALIGN_FLOATS : offset) * sizeof(float);
    for (int b = 0; b < BUFFER_COUNT; b++) {
        store->buffers[b] = attn_aligned_alloc(bytes);
        if (store->buffers[b] == NULL) {
            for (int f = 0; f < b; f++) {
                attn_aligned_free(store->buffers[f]);
                store->buffers[f] = NULL;
            }
            return ATTN_ERR_OUT_OF_MEMORY;
        }
        memset(store->buffers[b], 0, bytes);
    }
    store->buffer_floats = offset;
    store->numel = numel;
    store->finalized = 1;
    return ATTN_OK;
}

int attn_params_is_finalized(const attn_params *store)
{
    return store != NULL && store->finalized;
}

static attn_status check_finalized(const char *fn, const attn_params *store)
{
    ATTN_CHECK_ARG(store != NULL, "%s: store must not be NULL", fn);
    ATTN_CHECK_ARG(store->finalized, "%s: the store is not finalised (attn_params_finalize)", fn);
    return ATTN_OK;
}

/* FNV-1a of the name: mixed with the seed so each parameter has its own stream. */
static uint64_t name_hash(const char *name)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p != '\0'; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void init_values(const param_entry *e, uint64_t seed, float *values)
{
    attn_rng rng;
    attn_rng_seed(&rng, seed ^ name_hash(e->name));
    float bound = e->init.scale;
    if (e->init.kind == ATTN_INIT_XAVIER_UNIFORM) {
        int64_t receptive = 1;
        for (int d = 2; d < e->ndim; d++)
            receptive *= e->shape[d];
        double fan_out = (double)(e->shape[0] * receptive);
        double fan_in = (double)(e->shape[1] * receptive);
        bound = (float)((double)e->init.scale * sqrt(6.0 / (fan_in + fan_out)));
    }
    for (int64_t i = 0; i < e->numel; i++) {
        switch (e->init.kind) {
        case ATTN_INIT_ZEROS:
            values[i] = 0.0f;
            break;
        case ATTN_INIT_ONES:
            values[i] = 1.0f;
            break;
        case ATTN_INIT_NORMAL:
            values[i] = e->init.scale * attn_rng_normal(&rng);
            break;
        case ATTN_INIT_UNIFORM:
        case ATTN_INIT_XAVIER_UNIFORM:
            values[i] = bound * (2.0f * attn_rng_uniform(&rng) - 1.0f);
            break;
        }
    }
}

attn_status attn_params_init(attn_params *store, uint64_t seed)
{
    ATTN_TRY(check_finalized(__func__, store));
    for (size_t i = 0; i < store->count; i++)
        init_values(&store->entries[i], seed,
                    store->buffers[ATTN_PARAM_VALUES] + store->entries[i].offset);
    attn_params_values_changed(store);
    return ATTN_OK;
}

void attn_params_values_changed(attn_params *store)
{
    if (store != NULL)
        store->values_version++;
}

/* The parameter whose values start at `value` (binary search: offsets grow with the id). */
static const param_entry *entry_at(const attn_params *store, const float *value, size_t *index)
{
    const float *base = store->buffers[ATTN_PARAM_VALUES];
    if (base == NULL || value < base || value >= base + store->buffer_floats)
        return NULL;
    size_t offset = (size_t)(value - base), lo = 0, hi = store->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (store->entries[mid].offset < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == store->count || store->entries[lo].offset != offset)
        return NULL;
    *index = lo;
    return &store->entries[lo];
}

attn_status attn_ad_packed_weight(attn_params *store, const attn_var *weight, attn_transpose trans,
                                  const attn_gemm_packed_b **out)
{
    *out = NULL;
    size_t index = 0;
    const param_entry *e =
        store != NULL && store->finalized ? entry_at(store, weight->value.data, &index) : NULL;
    if (e == NULL || e->ndim != 2)
        return ATTN_OK;
    if (store->packed == NULL) {
        store->packed = calloc(2 * store->count, sizeof *store->packed);
        if (store->packed == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_ad_packed_weight: out of memory");
    }
    packed_weight *p = &store->packed[2 * index + (trans == ATTN_TRANS ? 0 : 1)];
    const int64_t rows = e->shape[0], cols = e->shape[1];
    if (p->packed == NULL)
        ATTN_TRY(attn_gemm_packed_b_create(
            ATTN_PRECISION_BF16, trans, trans == ATTN_TRANS ? cols : rows,
            trans == ATTN_TRANS ? rows : cols, weight->value.data, cols, &p->packed));
    else if (p->version != store->values_version)
        ATTN_TRY(attn_gemm_packed_b_refresh(p->packed));
    p->version = store->values_version;
    *out = p->packed;
    return ATTN_OK;
}

void attn_ad_params_set_stored(attn_params *store, const attn_quantized_matrix *table)
{
    if (store != NULL)
        store->stored = table;
}

const attn_quantized_matrix *attn_ad_stored_weight(attn_graph *graph, const attn_var *weight)
{
    const attn_params *store = attn_graph_params(graph);
    size_t index = 0;
    if (store == NULL || store->stored == NULL || !store->finalized ||
        entry_at(store, weight->value.data, &index) == NULL)
        return NULL;
    const attn_quantized_matrix *m = &store->stored[index];
    if (m->packed == NULL || m->precision != attn_graph_precision(graph) ||
        weight->value.ndim != 2 || weight->value.shape[0] != m->out ||
        weight->value.shape[1] != m->in)
        return NULL;
    return m;
}

size_t attn_params_count(const attn_params *store)
{
    return store ? store->count : 0;
}
int64_t attn_params_numel(const attn_params *store)
{
    return store ? store->numel : 0;
}
size_t attn_params_buffer_floats(const attn_params *store)
{
    return store ? store->buffer_floats : 0;
}

float *attn_params_buffer(const attn_params *store, attn_param_buffer which)
{
    if (store == NULL || !store->finalized || (int)which < 0 || (int)which >= BUFFER_COUNT)
        return NULL;
    return store->buffers[which];
}

attn_status attn_params_find(const attn_params *store, const char *name, attn_param_id *id)
{
    ATTN_CHECK_NOT_NULL(store);
    ATTN_CHECK_NOT_NULL(name);
    ATTN_CHECK_NOT_NULL(id);
    for (size_t i = 0; i < store->count; i++)
        if (strcmp(store->entries[i].name, name) == 0) {
            *id = (attn_param_id)i;
            return ATTN_OK;
        }
    return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_params_find: no parameter named '%s'", name);
}

attn_status attn_params_info(const attn_params *store, attn_param_id id, attn_param_info *info)
{
    ATTN_CHECK_NOT_NULL(store);
    ATTN_CHECK_NOT_NULL(info);
    ATTN_CHECK_ARG(id >= 0 && (size_t)id < store->count,
                   "attn_params_info: id %d out of range [0, %zu)", (int)id, store->count);
    const param_entry *e = &store->entries[id];
    memset(info, 0, sizeof *info);
    info->name = e->name;
    info->ndim = e->ndim;
    memcpy(info->shape, e->shape, sizeof info->shape);
    info->numel = e->numel;
    info->offset = e->offset;
    info->init = e->init;
    return ATTN_OK;
}

float *attn_params_data(const attn_params *store, attn_param_id id, attn_param_buffer which)
{
    float *base = attn_params_buffer(store, which);
    if (base == NULL || id < 0 || (size_t)id >= store->count)
        return NULL;
    return base + store->entries[id].offset;
}

void attn_params_zero_grad(attn_params *store)
{
    if (store == NULL || !store->finalized)
        return;
    attn_ad_zero((int64_t)store->buffer_floats, store->buffers[ATTN_PARAM_GRADS]);
}

static attn_status check_buffer(const char *fn, attn_param_buffer which)
{
    ATTN_CHECK_ARG((int)which >= 0 && (int)which < BUFFER_COUNT, "%s: unknown buffer %d", fn,
                   (int)which);
    return ATTN_OK;
}

/* Writes prefix + name for every parameter into the buffer's name set; names[i] point into it. */
static attn_status build_names(const char *fn, attn_params *store, attn_param_buffer which,
                               const char *prefix, const char **names)
{
    size_t prefix_len = prefix ? strlen(prefix) : 0, total = 0;
    for (size_t i = 0; i < store->count; i++)
        total += prefix_len + strlen(store->entries[i].name) + 1;
    name_set *set = &store->names[which];
    if (total > set->capacity) {
        char *grown = realloc(set->text, total);
        if (grown == NULL)
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
        set->text = grown;
        set->capacity = total;
    }
    char *cursor = set->text;
    for (size_t i = 0; i < store->count; i++) {
        size_t len = strlen(store->entries[i].name);
        names[i] = cursor;
        if (prefix_len > 0)
            memcpy(cursor, prefix, prefix_len);
        memcpy(cursor + prefix_len, store->entries[i].name, len + 1);
        cursor += prefix_len + len + 1;
    }
    return ATTN_OK;
}

attn_status attn_params_tensors(attn_params *store, attn_param_buffer which, const char *prefix,
                                attn_named_tensor *out, size_t capacity)
{
    const char *fn = __func__;
    ATTN_TRY(check_finalized(fn, store));
    ATTN_TRY(check_buffer(fn, which));
    ATTN_CHECK_ARG(capacity >= store->count, "%s: capacity %zu below the %zu parameters", fn,
                   capacity, store->count);
    if (store->count == 0)
        return ATTN_OK;
    ATTN_CHECK_NOT_NULL(out);
    const char **names = malloc(store->count * sizeof *names);
    if (names == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = build_names(fn, store, which, prefix, names);
    for (size_t i = 0; status == ATTN_OK && i < store->count; i++) {
        const param_entry *e = &store->entries[i];
        memset(&out[i], 0, sizeof out[i]);
        out[i].name = names[i];
        out[i].dtype = ATTN_DTYPE_F32;
        out[i].ndim = e->ndim;
        memcpy(out[i].shape, e->shape, sizeof out[i].shape);
        out[i].data = store->buffers[which] + e->offset;
    }
    free(names);
    return status;
}

attn_status attn_params_save(attn_params *store, const char *path,
                             const attn_metadata_entry *metadata, size_t n_metadata)
{
    const char *fn = __func__;
    ATTN_TRY(check_finalized(fn, store));
    ATTN_CHECK_NOT_NULL(path);
    attn_named_tensor *tensors = calloc(store->count + 1, sizeof *tensors);
    if (tensors == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = attn_params_tensors(store, ATTN_PARAM_VALUES, NULL, tensors, store->count);
    if (status == ATTN_OK)
        status = attn_tensor_file_write(path, tensors, store->count, metadata, n_metadata);
    free(tensors);
    return status;
}

/* A corrupted or diverged file must be refused at load, not discovered as NaN output later. */
static attn_status check_loaded(const char *fn, const attn_tensor_file *file, const char *name,
                                const float *values, int64_t count, attn_param_buffer which)
{
    for (int64_t i = 0; i < count; i++) {
        if (!isfinite(values[i]))
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s: tensor '%s' holds %g at element %lld; the file is corrupted "
                             "or was written by a run that diverged: use an earlier model or "
                             "checkpoint",
                             fn, attn_tensor_file_path(file), name, (double)values[i],
                             (long long)i);
        if (which == ATTN_PARAM_ADAM_V && values[i] < 0.0f)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: %s: tensor '%s' holds a negative Adam second moment (%g at "
                             "element %lld); the checkpoint is corrupted: resume from an earlier "
                             "one or start again",
                             fn, attn_tensor_file_path(file), name, (double)values[i],
                             (long long)i);
    }
    return ATTN_OK;
}

attn_status attn_params_load(attn_params *store, const attn_tensor_file *file,
                             attn_param_buffer which, const char *prefix)
{
    const char *fn = __func__;
    ATTN_TRY(check_finalized(fn, store));
    ATTN_TRY(check_buffer(fn, which));
    ATTN_CHECK_NOT_NULL(file);
    if (store->count == 0)
        return ATTN_OK;
    const char **names = malloc(store->count * sizeof *names);
    if (names == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    attn_status status = build_names(fn, store, which, prefix, names);
    for (size_t i = 0; status == ATTN_OK && i < store->count; i++) {
        const param_entry *e = &store->entries[i];
        status = attn_tensor_file_read_f32(file, names[i], e->ndim, e->shape,
                                           store->buffers[which] + e->offset);
        if (status == ATTN_OK)
            status = check_loaded(fn, file, names[i], store->buffers[which] + e->offset, e->numel,
                                  which);
    }
    free(names);
    if (which == ATTN_PARAM_VALUES)
        attn_params_values_changed(store);
    return status;
}
