/* The small models the decode tests search over (tests/decode/test_decode_models.c and
 * test_decode_ensemble.c): one Transformer and one RNN shape over shared vocabularies, and a
 * model with its weights scaled up. */
#ifndef ATTN_TEST_DECODE_TESTING_H
#define ATTN_TEST_DECODE_TESTING_H

#include "attn/attn.h"
#include "harness.h"

enum { SRC_VOCAB = 11, TGT_VOCAB = 13, MAX_LEN = 40 };

static inline attn_model_config decode_transformer_config(int norm_first)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = 16;
    c.num_heads = 2;
    c.ffn_dim = 24;
    c.encoder_layers = 1;
    c.decoder_layers = 2;
    c.dropout = 0.0;
    c.src_vocab = SRC_VOCAB;
    c.tgt_vocab = TGT_VOCAB;
    c.max_len = MAX_LEN;
    c.norm_first = norm_first;
    c.tie_output = 0;
    return c;
}

/* Luong attention gets input feeding, Bahdanau (the default) and no attention do not. */
static inline attn_model_config decode_rnn_config(attn_rnn_attention attention, int64_t tgt_vocab)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.src_vocab = SRC_VOCAB;
    c.tgt_vocab = tgt_vocab;
    c.hidden = 12;
    c.embedding_dim = 8;
    c.attention_dim = 8;
    c.dropout = 0.0;
    c.max_len = MAX_LEN;
    c.attention = attention;
    c.input_feeding = attention != ATTN_RNN_BAHDANAU && attention != ATTN_RNN_NO_ATTENTION;
    return c;
}

/* A model with its weights times `scale` (NULL after a failed CHECK): large logits, so some
 * sentences end early and others run long, and the best continuation often is not the locally
 * best token. */
static inline attn_model *scaled_model(const attn_model_config *c, uint64_t seed, float scale)
{
    attn_model *m = NULL;
    CHECK_OK(attn_model_create(c, &m));
    if (m == NULL)
        return NULL;
    CHECK_OK(attn_model_init(m, seed));
    attn_params *store = attn_model_params(m);
    float *values = attn_params_buffer(store, ATTN_PARAM_VALUES);
    for (size_t i = 0; i < attn_params_buffer_floats(store); i++)
        values[i] *= scale;
    return m;
}

#endif
