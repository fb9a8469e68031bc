/* BERT's masking of a text for a masked language model (attn_mlm_mask). */
#include "data/data_internal.h"

/* A position's draws come from one 64-bit hash: its top 24 bits choose it, the next 24 pick
 * [MASK], random or kept, and a hash of that hash picks the random token. */
int64_t attn_mlm_mask(uint64_t seed, int64_t epoch, int64_t sequence, const int32_t *ids,
                      int64_t length, int64_t vocab, int32_t *input, int32_t *targets)
{
    const uint64_t text_seed =
        attn_index_hash(attn_index_hash(seed, (uint64_t)epoch), (uint64_t)sequence);
    const double unit = 1.0 / 16777216.0; /* 2^-24 */
    const int64_t ordinary = vocab - ATTN_MLM_FIRST_TOKEN;
    int64_t chosen = 0;
    for (int64_t i = 0; i < length; i++) {
        const int32_t id = ids[i];
        input[i] = id;
        targets[i] = -1;
        if (id < ATTN_MLM_FIRST_TOKEN)
            continue;
        const uint64_t h = attn_index_hash(text_seed, (uint64_t)i);
        if ((double)(h >> 40) * unit >= ATTN_MLM_CHOSEN_SHARE)
            continue;
        chosen++;
        targets[i] = id;
        const double kind = (double)((h >> 16) & 0xFFFFFF) * unit;
        if (kind < ATTN_MLM_MASKED_SHARE)
            input[i] = ATTN_MLM_MASK_ID;
        else if (kind < ATTN_MLM_MASKED_SHARE + ATTN_MLM_RANDOM_SHARE && ordinary > 0)
            /* Multiply-shift: uniform over the ordinary ids within 2^-32 of exactly. */
            input[i] = (int32_t)(ATTN_MLM_FIRST_TOKEN +
                                 (int64_t)(((attn_index_hash(h, 0) >> 32) * (uint64_t)ordinary) >>
                                           32));
    }
    return chosen;
}
