/* What the generic model code (config.c, model.c) needs from the RNN models; not part
 * of the public API. */
#ifndef ATTN_MODELS_INTERNAL_H
#define ATTN_MODELS_INTERNAL_H

#include "core/internal.h"
#include "attn/attn_models.h"
#include "kernels/quantized_rows.h"

typedef struct attn_rnn_model attn_rnn_model;

/* model.c builds it; transformer_step.c reads the modules. */
struct attn_model {
    attn_model_config config;
    attn_params *params;
    /* The classifier reads src_embed, the language model tgt_embed; shared embeddings are
     * one parameter in both. */
    attn_nn_embedding src_embed, tgt_embed;
    attn_nn_positional positions; /* sinusoidal positions (table NULL with learned ones) */
    /* Learned positions: the encoder's and the decoder's tables; the classifier's
     * (src_pos_embed) and the language model's (tgt_pos_embed) one table is "pos_embed". */
    attn_nn_embedding src_pos_embed, tgt_pos_embed;
    /* Self-attention blocks: the encoder's, or the language model's causal ones. */
    attn_nn_encoder_layer *blocks;
    int64_t n_blocks;
    attn_nn_decoder_layer *decoder_layers;
    int64_t n_decoder_layers;
    attn_nn_layer_norm encoder_norm, decoder_norm;
    int has_encoder_norm, has_decoder_norm;
    attn_nn_linear generator, classifier;
    /* The classifier's attention pooling (config pooling "attention"): W and b of
     * u_t = tanh(W h_t + b), and the query q [1, d_model]. */
    attn_nn_linear pool_proj;
    attn_param_id pool_query;
    attn_rnn_model *rnn; /* arch "rnn" and "rnn_classifier": its modules (rnn_model.c); NULL
                          * otherwise */
    /* bf16 / int8 (quantized.c): the stored matrix of each parameter id (packed NULL for the
     * parameters kept in fp32); NULL in an fp32 model. */
    attn_precision precision;
    attn_quantized_matrix *quantized;
    /* [n_decoder_layers]: rows [0, E) and [E, 3E) of multihead_attn's in_proj_weight */
    attn_quantized_matrix *cross_q, *cross_kv;
    int watched; /* attn_model_attention_weights is running: take the graph's operations */
};

/* quantized_encoder.c: whether encode takes attn_quantized_encode (a bf16 or int8
 * Transformer, a graph that neither records nor trains, no attention watched), which has
 * encode's contract (arguments checked by the caller). */
ATTN_INTERNAL int attn_quantized_encoder_applies(const attn_model *m, const attn_graph *graph);
ATTN_INTERNAL attn_status attn_quantized_encode(const char *fn, attn_model *m, attn_graph *graph,
                                                int64_t size, int64_t len, const int32_t *src,
                                                const int32_t *src_lengths, attn_var **memory);

/* quantized.c: the stored matrix of a parameter, NULL when it is fp32. */
ATTN_INTERNAL const attn_quantized_matrix *attn_model_quantized(const attn_model *model,
                                                                attn_param_id id);
ATTN_INTERNAL void attn_model_free_quantized(attn_model *model);
/* An RNN model held in bf16 or int8 multiplies its stored matrices (attn_ad_stored_weight) on
 * every graph it runs on: sets graph's precision to the model's for one call into the RNN
 * model and returns the precision to set back after it. fp32 models leave graph alone. */
ATTN_INTERNAL attn_precision attn_model_enter_precision(const attn_model *model, attn_graph *graph);

/* attn_model_save and attn_model_from_file for a bf16 or int8 model; metadata includes the
 * config and the precision. */
ATTN_INTERNAL attn_status attn_model_save_quantized(attn_model *model, const char *path,
                                                    const attn_metadata_entry *metadata,
                                                    size_t n_metadata);
ATTN_INTERNAL attn_status attn_model_load_quantized(attn_model *model, const attn_tensor_file *file,
                                                    attn_precision precision);

/* model.c: what the embeddings are multiplied by (sqrt(d_model) or 1). */
ATTN_INTERNAL float attn_model_embedding_scale(const attn_model_config *c);
/* model.c: the rows [max_len, d_model] added to the source's (source != 0) or the target's
 * embeddings: the sinusoidal table, or the learned table's current values; NULL for rotary
 * positions, which add nothing. */
ATTN_INTERNAL const float *attn_model_position_rows(const attn_model *m, int source);
/* model.c: y [rows, dim] = the module's norm (LayerNorm or RMSNorm) of x on the kernels,
 * off the tape (the step decoder and the quantized encoder). */
ATTN_INTERNAL attn_status attn_model_norm_rows(const attn_model *m, const attn_nn_layer_norm *norm,
                                               int64_t rows, const float *x, float *y);

/* rnn_config.c: the defaults of arch "rnn" or "rnn_classifier", and the constraints between
 * their fields (each field's own range is checked by the table in config.c). fn names the
 * caller. */
ATTN_INTERNAL attn_model_config attn_rnn_config_default(attn_model_arch arch);
ATTN_INTERNAL attn_status attn_rnn_config_validate(const char *fn, const attn_model_config *c);

/* rnn_model.c: registers the modules' parameters in store: an "rnn" model's all, an
 * "rnn_classifier"'s embedding and encoder (model.c adds its head). The store is not
 * finalised. */
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

/* rnn_model.c: the width A of the encoder's annotations (2 * hidden or hidden). */
ATTN_INTERNAL int64_t attn_rnn_model_annotation_dim(const attn_rnn_model *m);

/* model.c: a model's RNN part, NULL unless its arch is "rnn" or "rnn_classifier". */
ATTN_INTERNAL attn_rnn_model *attn_model_rnn_part(attn_model *model);

#endif /* ATTN_MODELS_INTERNAL_H */
