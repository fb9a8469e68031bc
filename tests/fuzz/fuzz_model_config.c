/* Model config JSON: attn_model_config_from_json on the input; a config it accepts must
 * validate, and must come back unchanged through attn_model_config_to_json and from_json. */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdlib.h>
#include <string.h>

/* Field by field: the struct's padding bytes are not part of the config. */
static int same_config(const attn_model_config *a, const attn_model_config *b)
{
    return a->version == b->version && a->arch == b->arch && a->d_model == b->d_model &&
           a->num_heads == b->num_heads && a->ffn_dim == b->ffn_dim &&
           a->encoder_layers == b->encoder_layers && a->decoder_layers == b->decoder_layers &&
           a->dropout == b->dropout && a->activation == b->activation &&
           a->norm_first == b->norm_first && a->encoder_final_norm == b->encoder_final_norm &&
           a->decoder_final_norm == b->decoder_final_norm && a->src_vocab == b->src_vocab &&
           a->tgt_vocab == b->tgt_vocab && a->num_classes == b->num_classes &&
           a->share_embeddings == b->share_embeddings && a->tie_output == b->tie_output &&
           a->scale_embeddings == b->scale_embeddings &&
           a->positional_encoding == b->positional_encoding && a->positions == b->positions &&
           a->output_bias == b->output_bias && a->max_len == b->max_len &&
           a->layer_norm_eps == b->layer_norm_eps && a->label_smoothing == b->label_smoothing &&
           a->cell == b->cell && a->layers == b->layers && a->hidden == b->hidden &&
           a->embedding_dim == b->embedding_dim && a->attention_dim == b->attention_dim &&
           a->bidirectional == b->bidirectional && a->attention == b->attention &&
           a->local == b->local && a->window == b->window && a->input_feeding == b->input_feeding &&
           a->reverse_source == b->reverse_source;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *json = fuzz_string(data, size);
    if (json == NULL)
        return 0;
    attn_model_config config;
    if (attn_model_config_from_json(json, &config) == ATTN_OK) {
        FUZZ_CHECK(attn_model_config_validate(&config) == ATTN_OK);
        char *written = NULL;
        FUZZ_CHECK(attn_model_config_to_json(&config, &written) == ATTN_OK);
        attn_model_config again;
        FUZZ_CHECK(attn_model_config_from_json(written, &again) == ATTN_OK);
        FUZZ_CHECK(same_config(&config, &again));
        free(written);
    } else {
        FUZZ_CHECK(attn_last_error()[0] != '\0');
    }
    free(json);
    return 0;
}
