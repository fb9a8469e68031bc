/* Helpers shared by the nn modules; not part of the public API. */
#ifndef ATTN_NN_INTERNAL_H
#define ATTN_NN_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_nn.h"

/* out[ATTN_NN_MAX_NAME] = "<prefix>.<suffix>" (just suffix for an empty prefix); a name too
 * long is an error naming fn. */
ATTN_INTERNAL attn_status attn_nn_name(const char *fn, char *out, const char *prefix,
                                       const char *suffix);
/* Registers "<prefix>.<suffix>" of shape [d0] (ndim 1) or [d0, d1] (ndim 2). */
ATTN_INTERNAL attn_status attn_nn_add_param(const char *fn, attn_params *store,
                                            const char *prefix, const char *suffix, int ndim,
                                            int64_t d0, int64_t d1, attn_init init,
                                            attn_param_id *id);

#endif /* ATTN_NN_INTERNAL_H */
