/* Aligned allocation, tensor views and the per-step arena. */
#include "core/internal.h"

#include <stdlib.h>
#include <string.h>

#define ATTN_ALIGNMENT 64

void *attn_aligned_alloc(size_t bytes)
{
    if (bytes == 0)
        bytes = ATTN_ALIGNMENT;
    size_t rounded = (bytes + ATTN_ALIGNMENT - 1) / ATTN_ALIGNMENT * ATTN_ALIGNMENT;
    if (rounded < bytes) {
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "allocation of %zu bytes overflows", bytes);
        return NULL;
    }
    void *p = aligned_alloc(ATTN_ALIGNMENT, rounded);
    if (p == NULL)
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "out of memory allocating %zu bytes", bytes);
    return p;
}

void attn_aligned_free(void *p) { free(p); }

attn_tensor attn_tensor_view(float *data, int ndim, const int64_t *shape)
{
    attn_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.ndim = ndim < 0 ? 0 : ndim > ATTN_MAX_DIMS ? ATTN_MAX_DIMS : ndim;
    int64_t stride = 1;
    for (int i = t.ndim - 1; i >= 0; i--) {
        t.shape[i] = shape[i];
        t.stride[i] = stride;
        stride *= shape[i];
    }
    return t;
}

int64_t attn_tensor_numel(const attn_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}

int attn_tensor_is_contiguous(const attn_tensor *t)
{
    int64_t stride = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != stride)
            return 0;
        stride *= t->shape[i];
    }
    return 1;
}

/* ---- arena ---------------------------------------------------------------------------- */

typedef struct arena_block {
    struct arena_block *next;
    size_t capacity;
    size_t used;
    unsigned char *memory;
} arena_block;

struct attn_arena {
    arena_block *first;
    arena_block *current;
    size_t used;
    size_t peak;
    size_t default_block;
};

static arena_block *block_new(size_t capacity)
{
    arena_block *b = malloc(sizeof *b);
    if (b == NULL) {
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "arena: out of memory");
        return NULL;
    }
    b->memory = attn_aligned_alloc(capacity);
    if (b->memory == NULL) {
        free(b);
        return NULL;
    }
    b->next = NULL;
    b->capacity = capacity;
    b->used = 0;
    return b;
}

attn_status attn_arena_create(size_t initial_bytes, attn_arena **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    attn_arena *a = calloc(1, sizeof *a);
    if (a == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "arena: out of memory");
    a->default_block = initial_bytes < (1u << 20) ? (1u << 20) : initial_bytes;
    a->first = a->current = block_new(a->default_block);
    if (a->first == NULL) {
        free(a);
        return ATTN_ERR_OUT_OF_MEMORY;
    }
    *out = a;
    return ATTN_OK;
}

void attn_arena_destroy(attn_arena *arena)
{
    if (arena == NULL)
        return;
    arena_block *b = arena->first;
    while (b != NULL) {
        arena_block *next = b->next;
        attn_aligned_free(b->memory);
        free(b);
        b = next;
    }
    free(arena);
}

void *attn_arena_alloc(attn_arena *arena, size_t bytes)
{
    if (arena == NULL) {
        attn_fail(ATTN_ERR_INVALID_ARGUMENT, "attn_arena_alloc: arena must not be NULL");
        return NULL;
    }
    size_t rounded = (bytes + ATTN_ALIGNMENT - 1) / ATTN_ALIGNMENT * ATTN_ALIGNMENT;
    if (rounded < bytes) {
        attn_fail(ATTN_ERR_OUT_OF_MEMORY, "arena: request of %zu bytes overflows", bytes);
        return NULL;
    }
    /* Walk forward through blocks kept from earlier steps before allocating a new one. */
    arena_block *b = arena->current;
    while (b->capacity - b->used < rounded) {
        if (b->next == NULL) {
            size_t capacity = rounded > arena->default_block ? rounded : arena->default_block;
            b->next = block_new(capacity);
            if (b->next == NULL)
                return NULL;
        }
        b = b->next;
        b->used = 0;
    }
    arena->current = b;
    void *p = b->memory + b->used;
    b->used += rounded;
    arena->used += rounded;
    if (arena->used > arena->peak)
        arena->peak = arena->used;
    return p;
}

float *attn_arena_floats(attn_arena *arena, size_t count)
{
    size_t bytes;
    if (!attn_mul_size(count, sizeof(float), &bytes))
        return NULL;
    return attn_arena_alloc(arena, bytes);
}

void attn_arena_reset(attn_arena *arena)
{
    if (arena == NULL)
        return;
    for (arena_block *b = arena->first; b != NULL; b = b->next)
        b->used = 0;
    arena->current = arena->first;
    arena->used = 0;
}

size_t attn_arena_used(const attn_arena *arena) { return arena ? arena->used : 0; }
size_t attn_arena_peak(const attn_arena *arena) { return arena ? arena->peak : 0; }
