/* The trainer tests' fixture: a tiny Transformer config and a reversal task of 48 training
 * and 12 validation strings over six letters, tokenized by characters, with the tokenizers'
 * JSON as the files' metadata. Small enough that a run of a few dozen updates takes
 * milliseconds. */
#ifndef ATTN_TEST_TRAINER_FIXTURE_H
#define ATTN_TEST_TRAINER_FIXTURE_H

#include "harness.h"

#include <stdio.h>
#include <stdlib.h>

enum { TRAIN_PAIRS = 48, VALID_PAIRS = 12 };

typedef struct trainer_fixture {
    char sources[TRAIN_PAIRS + VALID_PAIRS][12];
    char targets[TRAIN_PAIRS + VALID_PAIRS][12];
    attn_corpus *train, *valid;
    attn_tokenizer *src_tok, *tgt_tok;
    char *src_json, *tgt_json;
    attn_metadata_entry metadata[2];
    attn_model_config config;
} trainer_fixture;

static void trainer_fixture_make(trainer_fixture *fx)
{
    attn_rng rng;
    attn_rng_seed(&rng, 5);
    const char *src[TRAIN_PAIRS + VALID_PAIRS], *tgt[TRAIN_PAIRS + VALID_PAIRS];
    for (int i = 0; i < TRAIN_PAIRS + VALID_PAIRS; i++) {
        int len = 2 + (int)attn_rng_below(&rng, 6);
        for (int j = 0; j < len; j++)
            fx->sources[i][j] = (char)('a' + attn_rng_below(&rng, 6));
        fx->sources[i][len] = '\0';
        for (int j = 0; j < len; j++)
            fx->targets[i][j] = fx->sources[i][len - 1 - j];
        fx->targets[i][len] = '\0';
        src[i] = fx->sources[i];
        tgt[i] = fx->targets[i];
    }
    CHECK_OK(attn_corpus_from_strings(src, tgt, TRAIN_PAIRS, &fx->train));
    CHECK_OK(
        attn_corpus_from_strings(src + TRAIN_PAIRS, tgt + TRAIN_PAIRS, VALID_PAIRS, &fx->valid));
    attn_tokenizer_config chars;
    CHECK_OK(attn_tokenizer_config_parse("char", &chars));
    CHECK_OK(attn_tokenizer_train(&chars, src, TRAIN_PAIRS, &fx->src_tok));
    CHECK_OK(attn_tokenizer_train(&chars, tgt, TRAIN_PAIRS, &fx->tgt_tok));
    CHECK_OK(attn_corpus_encode(fx->train, fx->src_tok, fx->tgt_tok));
    CHECK_OK(attn_corpus_encode(fx->valid, fx->src_tok, fx->tgt_tok));
    CHECK_OK(attn_tokenizer_to_json(fx->src_tok, &fx->src_json));
    CHECK_OK(attn_tokenizer_to_json(fx->tgt_tok, &fx->tgt_json));
    fx->metadata[0] = (attn_metadata_entry){ATTN_SRC_TOKENIZER_KEY, fx->src_json};
    fx->metadata[1] = (attn_metadata_entry){ATTN_TGT_TOKENIZER_KEY, fx->tgt_json};

    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = 16;
    c.num_heads = 2;
    c.ffn_dim = 32;
    c.encoder_layers = 1;
    c.decoder_layers = 1;
    c.dropout = 0.1; /* masks must be redrawn identically on resume */
    c.label_smoothing = 0.1;
    c.src_vocab = attn_vocab_size(attn_tokenizer_vocab(fx->src_tok));
    c.tgt_vocab = attn_vocab_size(attn_tokenizer_vocab(fx->tgt_tok));
    c.max_len = 16;
    fx->config = c;
}

static void trainer_fixture_free(trainer_fixture *fx)
{
    attn_corpus_destroy(fx->train);
    attn_corpus_destroy(fx->valid);
    attn_tokenizer_destroy(fx->tgt_tok);
    attn_tokenizer_destroy(fx->src_tok);
    free(fx->src_json);
    free(fx->tgt_json);
}

#endif
