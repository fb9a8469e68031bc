/* The defaults of the architectures on the rnn encoder ("rnn", "rnn_classifier") and the
 * constraints between their fields. */
#include "models/models_internal.h"

#include <string.h>

attn_model_config attn_rnn_config_default(attn_model_arch arch)
{
    attn_model_config c;
    memset(&c, 0, sizeof c);
    c.version = ATTN_MODEL_CONFIG_VERSION;
    c.arch = arch;
    c.dropout = 0.1;
    c.max_len = 1024;
    c.cell = ATTN_RNN_GRU;
    c.layers = 1;
    c.hidden = 256;
    c.embedding_dim = 256;
    c.attention_dim = 256;
    c.bidirectional = 1;
    c.attention = ATTN_RNN_BAHDANAU;
    c.local = ATTN_RNN_GLOBAL;
    c.window = 10;
    if (arch == ATTN_ARCH_RNN_CLASSIFIER) {
        /* No decoder: its fields stay 0. Yang et al.'s word attention pools the states. */
        c.attention_dim = 0;
        c.window = 0;
        c.pooling = ATTN_POOLING_ATTENTION;
    }
    return c;
}

static int is_luong(attn_rnn_attention a)
{
    return a == ATTN_RNN_LUONG_DOT || a == ATTN_RNN_LUONG_GENERAL || a == ATTN_RNN_LUONG_CONCAT;
}

attn_status attn_rnn_config_validate(const char *fn, const attn_model_config *c)
{
    ATTN_CHECK_ARG(c->layers <= 1024, "%s: layers must be in [1, 1024], got %lld", fn,
                   (long long)c->layers);
    ATTN_CHECK_ARG(c->arch != ATTN_ARCH_RNN_CLASSIFIER || c->pooling != ATTN_POOLING_CLS,
                   "%s: pooling \"cls\" does not apply to rnn_classifier: a recurrent encoder has "
                   "no token whose state has read the whole text both ways (use \"attention\" "
                   "or \"mean\")",
                   fn);
    ATTN_CHECK_ARG(c->attention != ATTN_RNN_LUONG_DOT || !c->bidirectional,
                   "%s: attention \"luong-dot\" scores s . h_j and needs annotations of the "
                   "decoder's size: a bidirectional encoder's are 2 * hidden (use "
                   "\"luong-general\" or bidirectional false)",
                   fn);
    ATTN_CHECK_ARG(c->local == ATTN_RNN_GLOBAL || is_luong(c->attention),
                   "%s: local attention (\"m\" or \"p\") needs Luong attention", fn);
    ATTN_CHECK_ARG(!c->input_feeding || is_luong(c->attention),
                   "%s: input_feeding applies to Luong attention only", fn);
    return ATTN_OK;
}
