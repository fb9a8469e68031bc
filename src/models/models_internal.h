/* What the generic model code (config.c, transformer.c) needs from the RNN models; not part
 * of the public API. */
#ifndef ATTN_MODELS_INTERNAL_H
#define ATTN_MODELS_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_models.h"

typedef struct attn_rnn_model attn_rnn_model;

/* rnn_config.c: the "rnn" defaults, and the constraints between the rnn fields (each
 * field's own range is checked by the table in config.c). fn names the caller. */
ATTN_INTERNAL attn_model_config attn_rnn_config_default(void);
ATTN_INTERNAL attn_status attn_rnn_config_validate(const char *fn, const attn_model_config *c);

/* rnn_model.c: registers the modules' parameters in store and finalises it. */
ATTN_INTERNAL attn_status attn_rnn_model_build(const attn_model_config *config, attn_params *store,
                                               attn_rnn_model **out);
/* NULL is ignored. */
ATTN_INTERNAL void attn_rnn_model_free(attn_rnn_model *m);
/* attn_model_encode / attn_model_decode after their shared checks (fn names the caller). */
ATTN_INTERNAL attn_status attn_rnn_model_encode(const char *fn, const attn_rnn_model *m,
                                                attn_graph *graph, int64_t size, int64_t src_len,
                                                const int32_t *src, const int32_t *src_lengths,
                                                attn_var **memory);
ATTN_INTERNAL attn_status attn_rnn_model_decode(const char *fn, const attn_rnn_model *m,
                                                attn_graph *graph, attn_var *memory,
                                                const int32_t *src_lengths, int64_t size,
                                                int64_t len, const int32_t *ids, int64_t ids_stride,
                                                const int32_t *lengths, attn_var **logits);

/* transformer.c: a model's RNN part, NULL unless its arch is "rnn". */
ATTN_INTERNAL attn_rnn_model *attn_model_rnn_part(attn_model *model);

#endif /* ATTN_MODELS_INTERNAL_H */
