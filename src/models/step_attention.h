/* The step decoder's attention of ONE query row per sentence and head over cached keys and
 * values (its own past for self-attention, the source for cross-attention). With a single
 * query there is nothing to tile: each (row, head) is a softmax over a few dozen dot
 * products, so this is a direct loop rather than the flash kernel. Not part of the public
 * API. */
#ifndef ATTN_STEP_ATTENTION_H
#define ATTN_STEP_ATTENTION_H

#include "core/internal.h"

/* Where one layer's keys and values of a row are: slab slab_of_row[r] of pool, at offset;
 * head h's keys at + h * head_stride ([count][d_head]), its values value_offset further.
 * Offsets count elements: floats, or bf16 values (bf16.h's uint16_t) when bf16 is set, as a
 * bf16 or int8 model's cache holds them (half the bytes a step reads; the products round
 * their operands to bf16 or coarser anyway). */
typedef struct kv_cache_view {
    const void *pool;
    int bf16;
    const int64_t *slab_of_row;
    int64_t slab_elements, offset, head_stride, value_offset;
    int64_t count;         /* keys of every row, unless counts */
    const int32_t *counts; /* per row (source lengths), or NULL */
} kv_cache_view;

/* For each row r and head h: p = softmax over the row's keys of (q . k_j) * scale, written to
 * probs (and zeros from the row's key count up to probs_fill), and out = sum_j p_j v_j. A
 * row without keys gets zeros. */
typedef struct step_attention {
    int64_t heads, d_head;
    float scale;
    const float *q; /* row r, head h at q + r * q_stride + h * d_head */
    int64_t q_stride;
    kv_cache_view kv;
    float *probs; /* row r, head h at probs + r * probs_row_stride + h * probs_head_stride */
    int64_t probs_row_stride, probs_head_stride, probs_fill;
    float *out; /* row r, head h at out + r * out_stride + h * d_head */
    int64_t out_stride;
} step_attention;

/* One (row, head); the _bf16 versions read a bf16 cache. */
typedef void (*step_attend_fn)(const step_attention *a, int64_t row, int64_t head);
ATTN_INTERNAL void attn_step_attend_avx2(const step_attention *a, int64_t row, int64_t head);
ATTN_INTERNAL void attn_step_attend_avx512(const step_attention *a, int64_t row, int64_t head);
ATTN_INTERNAL void attn_step_attend_neon(const step_attention *a, int64_t row, int64_t head);
ATTN_INTERNAL void attn_step_attend_bf16_avx2(const step_attention *a, int64_t row, int64_t head);
ATTN_INTERNAL void attn_step_attend_bf16_avx512(const step_attention *a, int64_t row,
                                                int64_t head);
ATTN_INTERNAL void attn_step_attend_bf16_neon(const step_attention *a, int64_t row, int64_t head);

/* Every (row, head) of rows rows; keys_hint (the typical key count) decides how many threads
 * are worth waking. Each (row, head) is computed by one thread in a fixed order, so results
 * do not depend on the thread count or on the other rows. */
ATTN_INTERNAL void attn_step_attend(const step_attention *a, int64_t rows, int64_t keys_hint);

/* Shared by the versions: where (row, head)'s operands are. */
static inline int64_t attn_step_key_count(const kv_cache_view *kv, int64_t row)
{
    return kv->counts != NULL ? kv->counts[row] : kv->count;
}

/* The element index in the pool of (row, head)'s first key. */
static inline int64_t attn_step_keys_at(const step_attention *a, int64_t row, int64_t head)
{
    return a->kv.slab_of_row[row] * a->kv.slab_elements + a->kv.offset + head * a->kv.head_stride;
}

#endif /* ATTN_STEP_ATTENTION_H */
