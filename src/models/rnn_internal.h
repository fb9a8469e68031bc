/* What rnn_model.c shares with the rnn step decoder (rnn_step.c): the modules and the
 * decoder that both run one target position at a time. Not part of the public API. */
#ifndef ATTN_MODELS_RNN_INTERNAL_H
#define ATTN_MODELS_RNN_INTERNAL_H

#include "models/models_internal.h"

struct attn_rnn_model {
    attn_model_config config;
    attn_nn_embedding src_embed, tgt_embed;
    attn_nn_rnn_layer *encoder; /* [layers] */
    attn_nn_linear *bridge;     /* [layers]; NULL for attention "none" */
    attn_nn_rnn_cell *decoder;  /* [layers] */
    attn_nn_additive_attention additive;
    attn_nn_luong_attention luong;
    attn_nn_linear combine; /* Luong's W_c */
    attn_nn_linear generator;
    int64_t annotation_dim; /* A */
};

/* The decoder between steps: its state lives in variables of graph. */
typedef struct attn_rnn_decoder {
    const attn_rnn_model *model;
    attn_graph *graph;
    int64_t size, src_len, step;
    int32_t *src_lengths;         /* in the arena; NULL: every source is src_len long */
    attn_var *annotations, *keys; /* keys: what the attention scores (NULL for "none") */
    attn_var *summary;            /* u, the encoder's last state */
    attn_var **h, **c;            /* [layers]; c[k] NULL for GRU and before an LSTM's first step */
    attn_var *feed;               /* Luong input feeding: h~ of the last step (NULL at first) */
} attn_rnn_decoder;

/* Starts the decoder from memory = attn_model_encode's output on graph and its src_lengths
 * (NULL: all src_len); the state lives in graph's arena. fn names the caller. */
ATTN_INTERNAL attn_status attn_rnn_decoder_start(const char *fn, const attn_rnn_model *m,
                                                 attn_graph *graph, attn_var *memory,
                                                 const int32_t *src_lengths,
                                                 attn_rnn_decoder **out);
/* One step from the previous tokens ids [size]: what the generator reads (before dropout),
 * and the attention weights [size, src_len] when weights is not NULL (NULL for attention
 * "none"). */
ATTN_INTERNAL attn_status attn_rnn_decoder_features(attn_rnn_decoder *d, const int32_t *ids,
                                                    attn_var **features, attn_var **weights);

#endif /* ATTN_MODELS_RNN_INTERNAL_H */
