/* llm.c's GPT-2 checkpoints (src/models/llmc.c): a model written and read back is the same
 * model with the same logits, padded rows come back as given (zeros when none), and broken
 * files and models llm.c cannot hold are refused with messages naming the file and the
 * problem. tests/python/test_convert_cli.py checks the format against a NumPy GPT-2. */
#include "models_testing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static attn_model_config gpt2_config(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = 8;
    c.num_heads = 2;
    c.ffn_dim = 32;
    c.decoder_layers = 2;
    c.tgt_vocab = 10;
    c.max_len = 6;
    c.activation = ATTN_ACT_GELU_TANH;
    c.norm_first = 1;
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    c.scale_embeddings = 0;
    c.dropout = 0.0;
    c.label_smoothing = 0.0;
    return c;
}

static void test_write_then_read_gives_the_same_model(void)
{
    attn_model_config c = gpt2_config();
    attn_model *m = new_model(&c, 4, 0.5f);
    const char *path = test_scratch_path("gpt2.bin");
    CHECK_OK(attn_model_save_llmc(m, path, 0, NULL));
    attn_model *back = NULL;
    int64_t padded_vocab = 0;
    float *padded = NULL;
    CHECK_OK(attn_model_from_llmc(path, &back, &padded_vocab, &padded));
    CHECK(padded_vocab == 128, "V 10 pads to 128, got %lld", (long long)padded_vocab);
    int zeros = padded != NULL;
    for (int64_t i = 0; padded != NULL && i < (128 - 10) * 8; i++)
        zeros &= padded[i] == 0.0f;
    CHECK(zeros, "padded rows are zeros when the model has none");
    if (back != NULL) {
        attn_params *a = attn_model_params(m), *b = attn_model_params(back);
        CHECK(attn_params_count(a) == attn_params_count(b), "the same parameters");
        for (size_t i = 0; i < attn_params_count(a) && i < attn_params_count(b); i++) {
            attn_param_info info;
            CHECK_OK(attn_params_info(a, (attn_param_id)i, &info));
            attn_param_id id = -1;
            CHECK_OK(attn_params_find(b, info.name, &id));
            size_t count = 1;
            for (int d = 0; d < info.ndim; d++)
                count *= (size_t)info.shape[d];
            CHECK(id >= 0 && memcmp(attn_params_data(a, (attn_param_id)i, ATTN_PARAM_VALUES),
                                    attn_params_data(b, id, ATTN_PARAM_VALUES),
                                    count * sizeof(float)) == 0,
                  "%s comes back bit for bit", info.name);
        }
        const attn_model_config *d = attn_model_get_config(back);
        CHECK(d->positions == ATTN_POSITIONS_LEARNED && !d->output_bias && d->tie_output &&
                  d->max_len == 6 && d->tgt_vocab == 10 && d->decoder_layers == 2,
              "a GPT-2 config");
    }
    /* Given rows are written as given. */
    float rows[(16 - 10) * 8];
    for (int i = 0; i < (16 - 10) * 8; i++)
        rows[i] = (float)i * 0.25f;
    CHECK_OK(attn_model_save_llmc(m, path, 16, rows));
    attn_model_destroy(back);
    free(padded);
    back = NULL;
    padded = NULL;
    CHECK_OK(attn_model_from_llmc(path, &back, &padded_vocab, &padded));
    CHECK(padded_vocab == 16 && padded != NULL && memcmp(padded, rows, sizeof rows) == 0,
          "padded rows round trip");
    attn_model_destroy(back);
    free(padded);
    CHECK_FAILS(attn_model_save_llmc(m, path, 9, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "padded_vocab") != NULL, "%s", attn_last_error());
    attn_model_destroy(m);
}

static void test_unrepresentable_models_are_refused(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = 8;
    c.num_heads = 2;
    c.ffn_dim = 12;
    c.decoder_layers = 1;
    c.tgt_vocab = 10;
    c.max_len = 6;
    attn_model *m = new_model(&c, 1, MODEL_OWN_INIT);
    const char *path = test_scratch_path("refused.bin");
    CHECK_FAILS(attn_model_save_llmc(m, path, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    const char *fields[] = {"positions",   "activation",       "norm_first",
                            "output_bias", "scale_embeddings", "ffn_dim"};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++)
        CHECK(strstr(attn_last_error(), fields[i]) != NULL, "names %s: %s", fields[i],
              attn_last_error());
    FILE *f = fopen(path, "rb");
    CHECK(f == NULL, "nothing written");
    if (f != NULL)
        fclose(f);
    attn_model_destroy(m);

    c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = 8;
    c.num_heads = 2;
    c.encoder_layers = c.decoder_layers = 1;
    c.src_vocab = c.tgt_vocab = 10;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK_FAILS(attn_model_save_llmc(m, path, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "\"transformer\"") != NULL, "%s", attn_last_error());
    attn_model_destroy(m);

    /* GPT-2 but for the LLaMA-style block options: each is named. */
    c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = 8;
    c.num_heads = 2;
    c.ffn_dim = 32;
    c.decoder_layers = 1;
    c.tgt_vocab = 10;
    c.norm_first = 1;
    c.activation = ATTN_ACT_GELU_TANH;
    c.output_bias = 0;
    c.scale_embeddings = 0;
    c.positions = ATTN_POSITIONS_ROPE;
    c.norm = ATTN_NORM_RMS;
    c.ffn = ATTN_FFN_SWIGLU;
    c.bias = 0;
    m = new_model(&c, 1, MODEL_OWN_INIT);
    CHECK_FAILS(attn_model_save_llmc(m, path, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    const char *const llama[] = {"\"rope\"", "rms_norm", "swiglu", "bias"};
    for (int i = 0; i < 4; i++)
        CHECK(strstr(attn_last_error(), llama[i]) != NULL, "names %s: %s", llama[i],
              attn_last_error());
    attn_model_destroy(m);
}

static void write_header(const char *name, const int32_t *first, int n, size_t floats)
{
    size_t bytes = 1024 + floats * sizeof(float);
    unsigned char *data = calloc(1, bytes);
    CHECK(data != NULL, "memory");
    if (data == NULL)
        return;
    memcpy(data, first, (size_t)n * sizeof *first);
    test_write_scratch(name, data, bytes);
    free(data);
}

static void test_broken_files_are_refused(void)
{
    attn_model *m = (attn_model *)1;
    CHECK_FAILS(attn_model_from_llmc(test_scratch_path("missing.bin"), &m, NULL, NULL),
                ATTN_ERR_IO);
    CHECK(m == NULL && strstr(attn_last_error(), "missing.bin") != NULL, "%s", attn_last_error());

    const int32_t bad_magic[8] = {12345, 3, 4, 5, 1, 1, 4, 8};
    write_header("magic.bin", bad_magic, 8, 0);
    CHECK_FAILS(attn_model_from_llmc(test_scratch_path("magic.bin"), &m, NULL, NULL),
                ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "magic") && strstr(attn_last_error(), "magic.bin"), "%s",
          attn_last_error());

    const int32_t bf16[8] = {20240326, 5, 4, 5, 1, 1, 4, 8};
    write_header("bf16.bin", bf16, 8, 0);
    CHECK_FAILS(attn_model_from_llmc(test_scratch_path("bf16.bin"), &m, NULL, NULL),
                ATTN_ERR_UNSUPPORTED);

    /* maxT 4, V 5, L 1, NH 1, C 4, Vp 8: 32 + 16 + (12*16 + 13*4) + 8 = 300 floats. */
    const int32_t sizes[8] = {20240326, 3, 4, 5, 1, 1, 4, 8};
    write_header("short.bin", sizes, 8, 299);
    CHECK_FAILS(attn_model_from_llmc(test_scratch_path("short.bin"), &m, NULL, NULL),
                ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "truncated") != NULL, "%s", attn_last_error());
    write_header("exact.bin", sizes, 8, 300);
    CHECK_OK(attn_model_from_llmc(test_scratch_path("exact.bin"), &m, NULL, NULL));
    attn_model_destroy(m);

    const int32_t huge[8] = {20240326, 3, 4, 5, 2147483647, 1, 2147483647, 2147483647};
    write_header("huge.bin", huge, 8, 0);
    CHECK_FAILS(attn_model_from_llmc(test_scratch_path("huge.bin"), &m, NULL, NULL),
                ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "overflow") != NULL, "%s", attn_last_error());
}

int main(void)
{
    RUN_TEST(test_write_then_read_gives_the_same_model);
    RUN_TEST(test_unrepresentable_models_are_refused);
    RUN_TEST(test_broken_files_are_refused);
    return test_summary();
}
