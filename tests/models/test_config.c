/* Model configs: JSON round trips for every architecture, defaults for missing fields, and
 * rejection of bad configs with a message naming the field. */
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static attn_model_config filled(attn_model_arch arch)
{
    attn_model_config c = attn_model_config_default(arch);
    if (arch != ATTN_ARCH_TRANSFORMER_LM)
        c.src_vocab = 100;
    if (arch != ATTN_ARCH_TRANSFORMER_CLASSIFIER)
        c.tgt_vocab = 120;
    if (arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER)
        c.num_classes = 3;
    return c;
}

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
           a->rope_base == b->rope_base && a->norm == b->norm && a->ffn == b->ffn &&
           a->bias == b->bias;
}

static void test_round_trips(void)
{
    for (int arch = 0; arch < 3; arch++) {
        attn_model_config c = filled((attn_model_arch)arch);
        c.d_model = 96;
        c.num_heads = 3;
        c.dropout = 0.3;
        c.activation = ATTN_ACT_GELU;
        c.norm_first = 1;
        c.positional_encoding = ATTN_PE_CONCATENATED;
        c.max_len = 77;
        c.layer_norm_eps = 1e-6;
        c.label_smoothing = 0.05;
        c.scale_embeddings = 0;
        c.positions = ATTN_POSITIONS_LEARNED;
        c.output_bias = 0;
        if (arch == ATTN_ARCH_TRANSFORMER) {
            c.tgt_vocab = c.src_vocab;
            c.share_embeddings = 1;
            c.tie_output = 0;
            c.encoder_layers = 2;
            c.decoder_final_norm = 0;
        }
        char *json = NULL;
        CHECK_OK(attn_model_config_to_json(&c, &json));
        attn_model_config back;
        memset(&back, 0x5a, sizeof back);
        CHECK_OK(attn_model_config_from_json(json, &back));
        CHECK(same_config(&c, &back), "arch %d: every field survives JSON: %s", arch, json);
        char *again = NULL;
        CHECK_OK(attn_model_config_to_json(&back, &again));
        CHECK(json && again && strcmp(json, again) == 0, "same JSON twice");
        CHECK(json && strstr(json, "\"dropout\":0.3") && strstr(json, "\"activation\":\"gelu\"") &&
                  strstr(json, "\"positional_encoding\":\"concatenated\"") &&
                  strstr(json, "\"norm_first\":true") &&
                  strstr(json, "\"positions\":\"learned\"") &&
                  strstr(json, "\"output_bias\":false"),
              "readable values: %s", json);
        int has_classes = json && strstr(json, "num_classes") != NULL;
        int has_decoder = json && strstr(json, "decoder_layers") != NULL;
        int has_encoder = json && strstr(json, "encoder_layers") != NULL;
        CHECK(has_classes == (arch == ATTN_ARCH_TRANSFORMER_CLASSIFIER) &&
                  has_decoder == (arch != ATTN_ARCH_TRANSFORMER_CLASSIFIER) &&
                  has_encoder == (arch != ATTN_ARCH_TRANSFORMER_LM),
              "only the architecture's fields: %s", json);
        free(json);
        free(again);
    }
}

/* The LLaMA-style block options of every Transformer architecture. */
static void test_block_options_round_trip(void)
{
    for (int arch = 0; arch < 3; arch++) {
        attn_model_config c = filled((attn_model_arch)arch);
        c.positions = ATTN_POSITIONS_ROPE;
        c.rope_base = 500000.0;
        c.norm = ATTN_NORM_RMS;
        c.ffn = ATTN_FFN_SWIGLU;
        c.bias = 0;
        char *json = NULL;
        CHECK_OK(attn_model_config_to_json(&c, &json));
        attn_model_config back;
        CHECK_OK(attn_model_config_from_json(json, &back));
        CHECK(same_config(&c, &back), "arch %d: the block options survive JSON: %s", arch, json);
        CHECK(json && strstr(json, "\"positions\":\"rope\"") &&
                  strstr(json, "\"rope_base\":500000") && strstr(json, "\"norm\":\"rms_norm\"") &&
                  strstr(json, "\"ffn\":\"swiglu\"") && strstr(json, "\"bias\":false"),
              "readable values: %s", json);
        free(json);
    }
    attn_model_config c;
    CHECK_OK(attn_model_config_from_json(
        "{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":50}", &c));
    CHECK(c.positions == ATTN_POSITIONS_SINUSOIDAL && c.rope_base == 10000.0 &&
              c.norm == ATTN_NORM_LAYER && c.ffn == ATTN_FFN_MLP && c.bias == 1,
          "a file without the fields keeps LayerNorms, the MLP and biases");
    CHECK_OK(attn_model_config_from_json("{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,"
                                         "\"tgt_vocab\":5}",
                                         &c));
    CHECK(c.rope_base == 0.0 && c.bias == 0 && c.norm == 0 && c.ffn == 0, "rnn has none of them");
    /* The classifier's pooling: older files have none and mean-pool, as they always did. */
    CHECK_OK(attn_model_config_from_json(
        "{\"version\":1,\"arch\":\"transformer_classifier\",\"src_vocab\":5,\"num_classes\":2}",
        &c));
    CHECK(c.pooling == ATTN_POOLING_MEAN, "a file without pooling mean-pools");
    const char *const poolings[] = {"mean", "cls", "attention"};
    for (int p = 0; p < 3; p++) {
        c.pooling = (attn_pooling)p;
        char *json = NULL;
        CHECK_OK(attn_model_config_to_json(&c, &json));
        char expected[48];
        snprintf(expected, sizeof expected, "\"pooling\":\"%s\"", poolings[p]);
        attn_model_config back;
        CHECK_OK(attn_model_config_from_json(json, &back));
        CHECK(json && strstr(json, expected) && back.pooling == c.pooling, "pooling %s: %s",
              poolings[p], json);
        free(json);
    }
    c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.tgt_vocab = 5;
    c.pooling = ATTN_POOLING_CLS;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "pooling does not apply") != NULL, "%s", attn_last_error());
}

static void test_missing_fields_take_defaults(void)
{
    attn_model_config c;
    CHECK_OK(attn_model_config_from_json(
        "{\"version\": 1, \"arch\": \"transformer\", \"src_vocab\": 10, \"tgt_vocab\": 12}", &c));
    attn_model_config expected = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    expected.src_vocab = 10;
    expected.tgt_vocab = 12;
    CHECK(same_config(&c, &expected), "defaults filled in");
    CHECK(c.d_model == 512 && c.num_heads == 8 && c.encoder_layers == 6 && c.ffn_dim == 2048 &&
              c.dropout == 0.1 && c.label_smoothing == 0.1 && c.tie_output == 1,
          "the paper's base model");
    CHECK(c.positions == ATTN_POSITIONS_SINUSOIDAL && c.output_bias == 1,
          "a file without the fields keeps sinusoidal positions and the output bias");
    CHECK_OK(attn_model_config_from_json(
        "{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":50,\"d_model\":64,"
        "\"num_heads\":4,\"decoder_layers\":2}",
        &c));
    CHECK(c.arch == ATTN_ARCH_TRANSFORMER_LM && c.encoder_layers == 0 && c.src_vocab == 0 &&
              c.decoder_layers == 2 && c.d_model == 64,
          "language model");
}

typedef struct bad_case {
    const char *json;
    attn_status status;
    const char *mentions;
} bad_case;

static void test_bad_configs_are_rejected(void)
{
    const bad_case cases[] = {
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,\"dropuot\":0.1}",
         ATTN_ERR_FORMAT, "dropuot"},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"encoder_layers\":2}",
         ATTN_ERR_FORMAT, "encoder_layers"},
        {"{\"version\":1,\"arch\":\"transformer_classifier\",\"src_vocab\":5,\"num_classes\":2,"
         "\"tie_output\":true}",
         ATTN_ERR_FORMAT, "tie_output"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"src_vocab\":6,\"tgt_vocab\":5}",
         ATTN_ERR_FORMAT, "twice"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":\"5\",\"tgt_vocab\":5}",
         ATTN_ERR_FORMAT, "src_vocab"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5.5,\"tgt_vocab\":5}",
         ATTN_ERR_FORMAT, "integer"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"tie_output\":1}",
         ATTN_ERR_FORMAT, "tie_output"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"activation\":\"swish\"}",
         ATTN_ERR_FORMAT, "\"relu\", \"gelu\" or \"gelu_tanh\""},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"positional_encoding\":\"learned\"}",
         ATTN_ERR_FORMAT, "positional_encoding"},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,"
         "\"positions\":\"rotary\"}",
         ATTN_ERR_FORMAT, "\"positions\" must be \"sinusoidal\", \"learned\" or \"rope\""},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"output_bias\":0}",
         ATTN_ERR_FORMAT, "output_bias"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"positions\":\"learned\"}",
         ATTN_ERR_FORMAT, "positions"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"output_bias\":false}",
         ATTN_ERR_FORMAT, "output_bias"},
        {"{\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5}", ATTN_ERR_FORMAT, "version"},
        {"{\"version\":1,\"src_vocab\":5,\"tgt_vocab\":5}", ATTN_ERR_FORMAT, "arch"},
        {"{\"version\":1,\"arch\":\"seq2seq\"}", ATTN_ERR_FORMAT, "transformer_lm"},
        {"{\"version\":2,\"arch\":\"transformer\"}", ATTN_ERR_UNSUPPORTED, "version 2"},
        {"{\"version\":0,\"arch\":\"transformer\"}", ATTN_ERR_FORMAT, "version"},
        {"{\"version\":\"1\",\"arch\":\"transformer\"}", ATTN_ERR_FORMAT, "version"},
        {"[1, 2]", ATTN_ERR_FORMAT, "object"},
        {"{\"version\":1,", ATTN_ERR_FORMAT, "JSON"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5} x",
         ATTN_ERR_FORMAT, "JSON"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"num_heads\":7}",
         ATTN_ERR_INVALID_ARGUMENT, "num_heads 7"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"dropout\":1.0}",
         ATTN_ERR_INVALID_ARGUMENT, "dropout"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":6,"
         "\"share_embeddings\":true}",
         ATTN_ERR_INVALID_ARGUMENT, "share_embeddings"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"encoder_layers\":-1}",
         ATTN_ERR_INVALID_ARGUMENT, "encoder_layers"},
        {"{\"version\":1,\"arch\":\"transformer\",\"tgt_vocab\":5}", ATTN_ERR_INVALID_ARGUMENT,
         "src_vocab"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"layer_norm_eps\":0}",
         ATTN_ERR_INVALID_ARGUMENT, "layer_norm_eps"},
        {"{\"version\":1,\"arch\":\"transformer\",\"src_vocab\":5,\"tgt_vocab\":5,"
         "\"label_smoothing\":1.5}",
         ATTN_ERR_INVALID_ARGUMENT, "label_smoothing"},
        {"{\"version\":1,\"arch\":\"transformer_classifier\",\"src_vocab\":5}",
         ATTN_ERR_INVALID_ARGUMENT, "num_classes"},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"norm\":\"rms\"}",
         ATTN_ERR_FORMAT, "\"norm\" must be \"layer_norm\" or \"rms_norm\""},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"ffn\":\"geglu\"}",
         ATTN_ERR_FORMAT, "\"ffn\" must be \"mlp\" or \"swiglu\""},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"bias\":0}", ATTN_ERR_FORMAT,
         "\"bias\" must be true or false"},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"rope_base\":0}",
         ATTN_ERR_INVALID_ARGUMENT, "rope_base must be > 0"},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"positions\":\"rope\","
         "\"d_model\":24,\"num_heads\":8}",
         ATTN_ERR_INVALID_ARGUMENT, "d_model / num_heads = 3 must be even"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"norm\":\"rms_norm\"}",
         ATTN_ERR_FORMAT, "\"norm\" does not apply to arch \"rnn\""},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"bias\":false}",
         ATTN_ERR_FORMAT, "\"bias\" does not apply"},
        {"{\"version\":1,\"arch\":\"rnn\",\"src_vocab\":5,\"tgt_vocab\":5,\"rope_base\":10}",
         ATTN_ERR_FORMAT, "rope_base"},
        {"{\"version\":1,\"arch\":\"transformer_lm\",\"tgt_vocab\":5,\"pooling\":\"mean\"}",
         ATTN_ERR_FORMAT, "\"pooling\" does not apply to arch \"transformer_lm\""},
        {"{\"version\":1,\"arch\":\"transformer_classifier\",\"src_vocab\":5,\"num_classes\":2,"
         "\"pooling\":\"max\"}",
         ATTN_ERR_FORMAT, "\"pooling\" must be \"mean\", \"cls\" or \"attention\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        attn_model_config c;
        CHECK_FAILS(attn_model_config_from_json(cases[i].json, &c), cases[i].status);
        CHECK(strstr(attn_last_error(), cases[i].mentions) != NULL,
              "case %zu: message mentions '%s': %s", i, cases[i].mentions, attn_last_error());
    }
    attn_model_config c;
    CHECK_FAILS(attn_model_config_from_json(NULL, &c), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_config_from_json("{}", NULL), ATTN_ERR_INVALID_ARGUMENT);

    /* The struct side: validation and writing refuse the same things. */
    c = filled(ATTN_ARCH_TRANSFORMER_LM);
    c.num_classes = 4;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "num_classes") != NULL, "%s", attn_last_error());
    char *json = NULL;
    CHECK_FAILS(attn_model_config_to_json(&c, &json), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(json == NULL, "nothing written");
    c = filled(ATTN_ARCH_TRANSFORMER);
    c.norm_first = 2;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    c = filled(ATTN_ARCH_TRANSFORMER);
    c.positions = (attn_positions)3;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "positions") != NULL, "%s", attn_last_error());
    c = filled(ATTN_ARCH_TRANSFORMER);
    c.output_bias = 2;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "output_bias") != NULL, "%s", attn_last_error());
    c = filled(ATTN_ARCH_TRANSFORMER);
    c.arch = (attn_model_arch)9;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    c = filled(ATTN_ARCH_TRANSFORMER);
    c.activation = (attn_activation)7;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    c = filled(ATTN_ARCH_TRANSFORMER);
    c.d_model = (int64_t)1 << 40;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_INVALID_ARGUMENT);
    c = filled(ATTN_ARCH_TRANSFORMER);
    c.version = 3;
    CHECK_FAILS(attn_model_config_validate(&c), ATTN_ERR_UNSUPPORTED);
    CHECK_FAILS(attn_model_config_validate(NULL), ATTN_ERR_INVALID_ARGUMENT);
    c = attn_model_config_default((attn_model_arch)42);
    CHECK(c.arch == ATTN_ARCH_TRANSFORMER, "unknown arch: the transformer's defaults");
}

/* cJSON's own printing writes 0.30000000000000004 as 0.3 (it reads back within an epsilon);
 * a config must come back to the bit, and still read as short as it can. */
static void test_numbers_survive_to_the_last_bit(void)
{
    attn_model_config c = filled(ATTN_ARCH_TRANSFORMER);
    c.dropout = 0.1 + 0.2;
    c.label_smoothing = 1.0 - 0x1p-53;
    c.layer_norm_eps = 0x1p-1070; /* subnormal */
    char *json = NULL;
    CHECK_OK(attn_model_config_to_json(&c, &json));
    attn_model_config back;
    memset(&back, 0x5a, sizeof back);
    CHECK_OK(attn_model_config_from_json(json, &back));
    CHECK(back.dropout == c.dropout && back.label_smoothing == c.label_smoothing &&
              back.layer_norm_eps == c.layer_norm_eps,
          "every bit of every number survives JSON: %s", json);
    c = filled(ATTN_ARCH_TRANSFORMER);
    free(json);
    json = NULL;
    CHECK_OK(attn_model_config_to_json(&c, &json));
    CHECK(json && strstr(json, "\"dropout\":0.1,") && strstr(json, "\"layer_norm_eps\":1e-05,"),
          "numbers stay as short as they can: %s", json);
    free(json);
}

int main(void)
{
    RUN_TEST(test_round_trips);
    RUN_TEST(test_block_options_round_trip);
    RUN_TEST(test_numbers_survive_to_the_last_bit);
    RUN_TEST(test_missing_fields_take_defaults);
    RUN_TEST(test_bad_configs_are_rejected);
    return test_summary();
}
