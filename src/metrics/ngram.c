/* Dense ids for the n-grams of one segment, built one order at a time from the previous
 * order's ids, so that counting is array indexing and needs no hashing of whole n-grams. */
#include "metrics/metrics_internal.h"

#include <stdlib.h>
#include <string.h>

static size_t slot_of(uint64_t key, size_t mask)
{
    key ^= key >> 29;
    key *= 0xbf58476d1ce4e5b9ULL;
    key ^= key >> 32;
    return (size_t)key & mask;
}

attn_status ngram_ids_begin_order(ngram_ids *map, int64_t expected)
{
    map->count = 0;
    if (expected >= INT32_MAX / 2)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "metrics: a segment of %lld n-grams is too long",
                         (long long)expected);
    size_t needed = 16;
    while (needed < 2 * (size_t)expected)
        needed *= 2;
    /* Shrink too after a long segment, so that clearing stays proportional to this one. */
    if (map->slot_count < needed || map->slot_count > 8 * needed) {
        free(map->keys);
        free(map->values);
        map->keys = malloc(needed * sizeof *map->keys);
        map->values = malloc(needed * sizeof *map->values);
        if (map->keys == NULL || map->values == NULL) {
            ngram_ids_free(map);
            return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "metrics: out of memory for %zu n-grams",
                             needed);
        }
        map->slot_count = needed;
    }
    memset(map->values, 0, map->slot_count * sizeof *map->values);
    return ATTN_OK;
}

attn_status ngram_ids_next_order(ngram_ids *map, const uint32_t *symbols, int64_t length,
                                 int order, uint32_t *gram)
{
    size_t mask = map->slot_count - 1;
    for (int64_t i = 0; i + order <= length; i++) {
        uint64_t key = (uint64_t)gram[i] << 32 | symbols[i + order - 1];
        size_t slot = slot_of(key, mask);
        while (map->values[slot] != 0 && map->keys[slot] != key)
            slot = (slot + 1) & mask;
        if (map->values[slot] == 0) {
            if ((size_t)map->count * 2 >= map->slot_count)
                return attn_fail(ATTN_ERR_INTERNAL, "metrics: n-gram table overfull");
            map->keys[slot] = key;
            map->values[slot] = ++map->count;
        }
        gram[i] = (uint32_t)(map->values[slot] - 1);
    }
    return ATTN_OK;
}

void ngram_ids_free(ngram_ids *map)
{
    free(map->keys);
    free(map->values);
    memset(map, 0, sizeof *map);
}
