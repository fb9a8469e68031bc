/* What the bundle layer's files share. */
#ifndef ATTN_BUNDLE_INTERNAL_H
#define ATTN_BUNDLE_INTERNAL_H

#include "attn/attn_bundle.h"
#include "core/internal.h"

/* ATTN_OK when other has first's source and target tokenizers (kind, every vocabulary token,
 * BPE merges), else ATTN_ERR_INVALID_ARGUMENT with fn, both files' names and the first
 * difference. */
ATTN_INTERNAL attn_status attn_bundle_check_same_tokenizers(const attn_bundle *first,
                                                            const attn_bundle *other,
                                                            const char *fn);

/* -log softmax(z)[target] over vocab logits, in double; *best (NULL: not wanted) receives the
 * arg-max, the first on ties. */
ATTN_INTERNAL double attn_bundle_token_nats(const float *z, int64_t vocab, int32_t target,
                                            int64_t *best);

#endif /* ATTN_BUNDLE_INTERNAL_H */
