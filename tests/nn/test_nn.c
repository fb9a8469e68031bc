/* nn modules: PyTorch's parameter names, gradients of whole layers against finite
 * differences (see tests/autodiff/test_ops.c for why float differences under
 * ATTN_ISA_REFERENCE), what the masks promise, dropout modes, and argument checks. */
#include "../autodiff/autodiff_testing.h"

#include "attn/attn_nn.h"

#include <math.h>
#include <string.h>

enum { D = 8, HEADS = 2, FFN = 12, B = 2, T = 3, S = 4 };

static attn_nn_block_config block_config(int norm_first, float dropout)
{
    attn_nn_block_config c = {
        D, HEADS, FFN, dropout, ATTN_ACT_RELU, norm_first, 1e-5f, ATTN_NORM_LAYER, ATTN_FFN_MLP,
        0, 0.0};
    return c;
}

/* Every value U(-0.5, 0.5): nonzero biases and unequal norm weights test more wiring than
 * the default initialisers. */
static void randomise(attn_params *store, uint64_t seed)
{
    test_fill_uniform(attn_params_buffer(store, ATTN_PARAM_VALUES),
                      attn_params_buffer_floats(store), -0.5f, 0.5f, seed);
}

typedef struct expected_param {
    const char *name;
    int ndim;
    int64_t d0, d1;
} expected_param;

static void check_names(attn_params *store, const char *prefix, const expected_param *expected,
                        size_t n)
{
    CHECK(attn_params_count(store) == n, "%zu parameters, expected %zu", attn_params_count(store),
          n);
    for (size_t i = 0; i < n; i++) {
        char name[256];
        snprintf(name, sizeof name, "%s.%s", prefix, expected[i].name);
        attn_param_id id;
        attn_param_info info;
        int found = attn_params_find(store, name, &id) == ATTN_OK &&
                    attn_params_info(store, id, &info) == ATTN_OK;
        CHECK(found && info.ndim == expected[i].ndim && info.shape[0] == expected[i].d0 &&
                  (info.ndim == 1 || info.shape[1] == expected[i].d1),
              "%s registered with PyTorch's shape", name);
    }
}

/* The state_dict of nn.TransformerEncoderLayer(8, 2, 12) and nn.TransformerDecoderLayer. */
static const expected_param encoder_names[] = {{"self_attn.in_proj_weight", 2, 3 * D, D},
                                               {"self_attn.in_proj_bias", 1, 3 * D, 0},
                                               {"self_attn.out_proj.weight", 2, D, D},
                                               {"self_attn.out_proj.bias", 1, D, 0},
                                               {"linear1.weight", 2, FFN, D},
                                               {"linear1.bias", 1, FFN, 0},
                                               {"linear2.weight", 2, D, FFN},
                                               {"linear2.bias", 1, D, 0},
                                               {"norm1.weight", 1, D, 0},
                                               {"norm1.bias", 1, D, 0},
                                               {"norm2.weight", 1, D, 0},
                                               {"norm2.bias", 1, D, 0}};
static const expected_param decoder_names[] = {{"self_attn.in_proj_weight", 2, 3 * D, D},
                                               {"self_attn.in_proj_bias", 1, 3 * D, 0},
                                               {"self_attn.out_proj.weight", 2, D, D},
                                               {"self_attn.out_proj.bias", 1, D, 0},
                                               {"multihead_attn.in_proj_weight", 2, 3 * D, D},
                                               {"multihead_attn.in_proj_bias", 1, 3 * D, 0},
                                               {"multihead_attn.out_proj.weight", 2, D, D},
                                               {"multihead_attn.out_proj.bias", 1, D, 0},
                                               {"linear1.weight", 2, FFN, D},
                                               {"linear1.bias", 1, FFN, 0},
                                               {"linear2.weight", 2, D, FFN},
                                               {"linear2.bias", 1, D, 0},
                                               {"norm1.weight", 1, D, 0},
                                               {"norm1.bias", 1, D, 0},
                                               {"norm2.weight", 1, D, 0},
                                               {"norm2.bias", 1, D, 0},
                                               {"norm3.weight", 1, D, 0},
                                               {"norm3.bias", 1, D, 0}};

static void test_parameter_names_are_pytorchs(void)
{
    attn_nn_block_config c = block_config(0, 0.1f);
    attn_params *store = NULL;
    attn_nn_encoder_layer enc;
    CHECK_OK(attn_params_create(&store));
    CHECK_OK(attn_nn_encoder_layer_register(&enc, store, "encoder.layers.0", &c));
    check_names(store, "encoder.layers.0", encoder_names,
                sizeof encoder_names / sizeof *encoder_names);
    attn_params_destroy(store);

    attn_nn_decoder_layer dec;
    CHECK_OK(attn_params_create(&store));
    CHECK_OK(attn_nn_decoder_layer_register(&dec, store, "decoder.layers.5", &c));
    check_names(store, "decoder.layers.5", decoder_names,
                sizeof decoder_names / sizeof *decoder_names);
    attn_params_destroy(store);
}

/* ---- gradients of whole layers ----------------------------------------------------------- */

static const int32_t src_lengths[B] = {4, 2};
static const int32_t tgt_lengths[B] = {3, 2};

typedef struct layer_ctx {
    attn_nn_encoder_layer enc;
    attn_nn_decoder_layer dec;
    int causal;
} layer_ctx;

static attn_var *build_encoder(attn_graph *g, attn_var **x, void *raw)
{
    layer_ctx *c = raw;
    attn_attention_mask mask = {src_lengths, c->causal};
    attn_var *y;
    return attn_nn_encoder_layer_forward(&c->enc, g, x[0], &mask, &y) == ATTN_OK ? y : NULL;
}

static attn_var *build_decoder(attn_graph *g, attn_var **x, void *raw)
{
    layer_ctx *c = raw;
    attn_attention_mask self_mask = {tgt_lengths, 1}, memory_mask = {src_lengths, 0};
    attn_var *y;
    return attn_nn_decoder_layer_forward(&c->dec, g, x[0], &self_mask, x[1], &memory_mask, &y) ==
                   ATTN_OK
               ? y
               : NULL;
}

static ad_leaf_spec sequence_leaf(int64_t len, uint64_t seed)
{
    ad_leaf_spec s;
    memset(&s, 0, sizeof s);
    s.ndim = 3;
    s.shape[0] = B;
    s.shape[1] = len;
    s.shape[2] = D;
    s.data = test_alloc((size_t)(B * len * D) * sizeof(float));
    test_fill_uniform(s.data, (size_t)(B * len * D), -1.0f, 1.0f, seed);
    return s;
}

static void check_layer(const char *what, int decoder, int norm_first, int causal, int training)
{
    attn_nn_block_config c = block_config(norm_first, training ? 0.25f : 0.0f);
    c.activation = ATTN_ACT_GELU;
    layer_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.causal = causal;
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    if (decoder)
        CHECK_OK(attn_nn_decoder_layer_register(&ctx.dec, store, "layer", &c));
    else
        CHECK_OK(attn_nn_encoder_layer_register(&ctx.enc, store, "layer", &c));
    CHECK_OK(attn_params_finalize(store));
    randomise(store, 5);
    ad_leaf_spec leaves[2] = {sequence_leaf(decoder ? T : S, 6), sequence_leaf(S, 7)};
    ad_problem p = {what, decoder ? 2 : 1, leaves, store, decoder ? build_decoder : build_encoder,
                    &ctx, training,        24};
    CHECK(ad_check_problem(&p, 1e-2, 3e-3, 1e-2), "%s: tape gradients match finite differences",
          what);
    free(leaves[0].data);
    free(leaves[1].data);
    attn_params_destroy(store);
}

static void test_layer_gradients_match_finite_differences(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    check_layer("encoder layer, post-norm", 0, 0, 0, 0);
    check_layer("encoder layer, pre-norm", 0, 1, 0, 0);
    check_layer("causal encoder layer (language model block)", 0, 1, 1, 0);
    check_layer("encoder layer with dropout", 0, 0, 0, 1);
    check_layer("decoder layer, post-norm", 1, 0, 0, 0);
    check_layer("decoder layer, pre-norm, dropout", 1, 1, 0, 1);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

typedef struct embed_ctx {
    attn_nn_embedding embed;
    attn_nn_positional pe;
    attn_nn_linear out;
    attn_nn_layer_norm norm;
} embed_ctx;

static const int32_t token_ids[B * T] = {3, 1, 4, 1, 5, 0};

/* norm(embed(ids) * sqrt(D) + PE) projected back on the embedding (tied) plus a bias. */
static attn_var *build_embed(attn_graph *g, attn_var **x, void *raw)
{
    (void)x;
    embed_ctx *c = raw;
    attn_var *h;
    if (attn_nn_embedding_forward(&c->embed, g, B, T, token_ids, T, sqrtf((float)D), &h) ||
        attn_nn_positional_forward(&c->pe, g, h, &h) ||
        attn_nn_layer_norm_forward(&c->norm, g, h, &h) || attn_nn_linear_forward(&c->out, g, h, &h))
        return NULL;
    return h;
}

static void test_embedding_and_tied_projection_gradients(void)
{
    CHECK_OK(attn_set_isa(ATTN_ISA_REFERENCE));
    embed_ctx c;
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    CHECK_OK(attn_nn_embedding_register(&c.embed, store, "embed", 6, D));
    CHECK_OK(attn_nn_layer_norm_register(&c.norm, store, "norm", D, 1e-5f));
    CHECK_OK(attn_nn_linear_register_tied(&c.out, store, "generator", c.embed.weight, 1));
    CHECK(c.out.in_features == D && c.out.out_features == 6, "tied linear takes the table's shape");
    CHECK_OK(attn_params_finalize(store));
    CHECK(attn_params_count(store) == 4, "embed.weight, norm.*, generator.bias");
    CHECK_OK(attn_nn_positional_init(&c.pe, 5, D, ATTN_PE_INTERLEAVED));
    randomise(store, 9);
    ad_problem p = {
        "embedding, positions, norm, tied projection", 0, NULL, store, build_embed, &c, 0, 0};
    CHECK(ad_check_problem(&p, 1e-2, 2e-3, 5e-3), "tied table gets both gradients");
    attn_nn_positional_free(&c.pe);
    attn_nn_positional_free(&c.pe);
    attn_params_destroy(store);
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* ---- what the masks and modes promise ---------------------------------------------------- */

/* Runs one layer without the tape on x (and memory); returns a copy of the output. */
static float *run_layer(layer_ctx *ctx, attn_params *store, int decoder, const float *x,
                        const float *memory, int training)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, training);
    const int64_t x_shape[3] = {B, decoder ? T : S, D}, m_shape[3] = {B, S, D};
    attn_var *leaves[2];
    CHECK_OK(attn_graph_input(g, 3, x_shape, x, 0, &leaves[0]));
    CHECK_OK(attn_graph_input(g, 3, m_shape, memory, 0, &leaves[1]));
    attn_var *y = decoder ? build_decoder(g, leaves, ctx) : build_encoder(g, leaves, ctx);
    CHECK(y != NULL, "layer runs: %s", attn_last_error());
    size_t n = (size_t)(B * x_shape[1] * D);
    float *copy = test_alloc(n * sizeof(float));
    if (y != NULL)
        memcpy(copy, y->value.data, n * sizeof(float));
    attn_graph_destroy(g);
    return copy;
}

static int rows_equal(const float *a, const float *b, int64_t len, int64_t batch, int64_t first,
                      int64_t last)
{
    for (int64_t t = first; t < last; t++)
        if (memcmp(a + (batch * len + t) * D, b + (batch * len + t) * D, D * sizeof(float)) != 0)
            return 0;
    return 1;
}

static void test_masks_hide_what_they_promise(void)
{
    attn_nn_block_config c = block_config(0, 0.5f);
    layer_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    CHECK_OK(attn_nn_encoder_layer_register(&ctx.enc, store, "enc", &c));
    CHECK_OK(attn_nn_decoder_layer_register(&ctx.dec, store, "dec", &c));
    CHECK_OK(attn_params_finalize(store));
    CHECK_OK(attn_params_init(store, 3));
    float x[B * S * D], x2[B * S * D], memory[B * S * D], memory2[B * S * D];
    test_fill_uniform(x, B * S * D, -1, 1, 1);
    test_fill_uniform(memory, B * S * D, -1, 1, 2);

    /* Encoder: sentence 1 has 2 tokens; changing its padding changes none of its real rows. */
    float *base = run_layer(&ctx, store, 0, x, memory, 0);
    memcpy(x2, x, sizeof x);
    for (int i = (1 * S + 2) * D; i < B * S * D; i++)
        x2[i] += 3.0f;
    float *padded = run_layer(&ctx, store, 0, x2, memory, 0);
    CHECK(rows_equal(base, padded, S, 1, 0, 2), "encoder: padding keys are never attended");
    CHECK(rows_equal(base, padded, S, 0, 0, S), "other sentences untouched");
    double mean = 0, var = 0;
    for (int i = 0; i < D; i++)
        mean += base[i] / D;
    for (int i = 0; i < D; i++)
        var += (base[i] - mean) * (base[i] - mean) / D;
    CHECK(fabs(mean) < 1e-5 && fabs(var - 1.0) < 1e-3,
          "post-norm output rows are normalised (mean %g, var %g)", mean, var);

    /* Training mode drops; evaluation repeats exactly. */
    float *train = run_layer(&ctx, store, 0, x, memory, 1);
    float *again = run_layer(&ctx, store, 0, x, memory, 0);
    CHECK(memcmp(train, base, sizeof x) != 0, "dropout changes training outputs");
    CHECK(memcmp(again, base, sizeof x) == 0, "evaluation repeats exactly");
    free(base);
    free(padded);
    free(train);
    free(again);

    /* Decoder: position t never sees t' > t, nor the source's padding. */
    base = run_layer(&ctx, store, 1, x, memory, 0);
    memcpy(x2, x, sizeof x);
    for (int i = 2 * D; i < 3 * D; i++)
        x2[i] -= 2.0f; /* sentence 0, position 2 */
    float *later = run_layer(&ctx, store, 1, x2, memory, 0);
    CHECK(rows_equal(base, later, T, 0, 0, 2), "decoder: earlier positions ignore later ones");
    CHECK(!rows_equal(base, later, T, 0, 2, 3), "the changed position itself changes");
    memcpy(memory2, memory, sizeof memory);
    for (int i = (1 * S + 2) * D; i < B * S * D; i++)
        memory2[i] *= -4.0f;
    float *source = run_layer(&ctx, store, 1, x, memory2, 0);
    CHECK(rows_equal(base, source, T, 1, 0, T) && rows_equal(base, source, T, 0, 0, T),
          "decoder: padded memory is never attended");
    free(base);
    free(later);
    free(source);
    attn_params_destroy(store);
}

/* ---- argument checks --------------------------------------------------------------------- */

static void test_bad_arguments_are_rejected(void)
{
    const attn_status bad = ATTN_ERR_INVALID_ARGUMENT;
    attn_params *store = NULL;
    CHECK_OK(attn_params_create(&store));
    attn_nn_encoder_layer enc;
    attn_nn_block_config c = block_config(0, 0.1f);
    c.num_heads = 3;
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    CHECK(strstr(attn_last_error(), "num_heads 3") != NULL, "%s", attn_last_error());
    c = block_config(0, 1.0f);
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    c = block_config(2, 0.1f);
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    c = block_config(0, 0.1f);
    c.ffn_dim = 0;
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    c = block_config(0, 0.1f);
    c.layer_norm_eps = -1.0f;
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", NULL), bad);
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, NULL, &(attn_nn_block_config){0}), bad);
    char long_prefix[300];
    memset(long_prefix, 'x', sizeof long_prefix - 1);
    long_prefix[sizeof long_prefix - 1] = '\0';
    c = block_config(0, 0.1f);
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, long_prefix, &c), bad);
    CHECK(strstr(attn_last_error(), "longer than") != NULL, "%s", attn_last_error());

    attn_nn_linear lin;
    attn_nn_embedding emb;
    attn_nn_layer_norm norm;
    attn_nn_mha mha;
    CHECK_FAILS(attn_nn_linear_register(&lin, store, "l", 0, 3, 1), bad);
    CHECK_FAILS(attn_nn_linear_register(&lin, store, "l", 2, 3, 2), bad);
    CHECK_FAILS(attn_nn_linear_register(&lin, NULL, "l", 2, 3, 1), bad);
    CHECK_FAILS(attn_nn_embedding_register(&emb, store, "emb", 0, 4), bad);
    CHECK_FAILS(attn_nn_layer_norm_register(&norm, store, "n", 4, NAN), bad);
    CHECK_FAILS(attn_nn_mha_register(&mha, store, "a", 6, 4, 1), bad);
    CHECK_FAILS(attn_nn_mha_register(&mha, store, "a", 6, 3, 2), bad);
    CHECK_FAILS(attn_nn_norm_register(&norm, store, "r", ATTN_NORM_RMS, 4, 1e-5f, 1), bad);
    CHECK(strstr(attn_last_error(), "RMSNorm (it has no bias)") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_nn_norm_register(&norm, store, "r", (attn_norm_kind)2, 4, 1e-5f, 0), bad);
    c = block_config(0, 0.1f);
    c.rope_base = 10000.0;
    CHECK_OK(attn_nn_encoder_layer_register(&enc, store, "rope_ok", &c));
    c.num_heads = 8; /* one feature a head: no pair to turn */
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    CHECK(strstr(attn_last_error(), "even head size") != NULL, "%s", attn_last_error());
    c.num_heads = HEADS;
    c.rope_base = -1.0;
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    CHECK(strstr(attn_last_error(), "rope_base") != NULL, "%s", attn_last_error());
    c = block_config(0, 0.1f);
    c.ffn = (attn_ffn_kind)2;
    CHECK_FAILS(attn_nn_encoder_layer_register(&enc, store, "e", &c), bad);
    CHECK(strstr(attn_last_error(), "feed-forward kind") != NULL, "%s", attn_last_error());
    CHECK_OK(attn_nn_layer_norm_register(&norm, store, "n", 4, 1e-5f));
    CHECK_FAILS(attn_nn_linear_register_tied(&lin, store, "t", norm.weight, 1), bad);
    CHECK(strstr(attn_last_error(), "n.weight") != NULL, "%s", attn_last_error());
    CHECK_FAILS(attn_nn_linear_register_tied(&lin, store, "t", 99, 1), bad);
    CHECK_OK(attn_nn_linear_register(&lin, store, "l", 4, 3, 0));
    CHECK(lin.bias == -1, "no bias");
    CHECK_OK(attn_params_finalize(store));

    attn_nn_positional pe;
    CHECK_FAILS(attn_nn_positional_init(&pe, 0, 4, ATTN_PE_INTERLEAVED), bad);
    CHECK_FAILS(attn_nn_positional_init(&pe, 4, 4, (attn_pe_layout)5), bad);
    CHECK(pe.table == NULL, "nothing allocated on failure");
    CHECK_OK(attn_nn_positional_init(&pe, 2, 4, ATTN_PE_CONCATENATED));
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    const int64_t shape[3] = {1, 3, 4};
    attn_var *x, *y;
    CHECK_OK(attn_graph_input(g, 3, shape, NULL, 1, &x));
    CHECK_FAILS(attn_nn_positional_forward(&pe, g, x, &y), bad);
    CHECK(strstr(attn_last_error(), "exceeds") != NULL, "too long for the table: %s",
          attn_last_error());
    const int64_t wide[3] = {1, 2, 5};
    CHECK_OK(attn_graph_input(g, 3, wide, NULL, 1, &x));
    CHECK_FAILS(attn_nn_positional_forward(&pe, g, x, &y), bad);
    CHECK_FAILS(attn_nn_linear_forward(&lin, g, x, &y), bad);
    CHECK_FAILS(attn_nn_linear_forward(NULL, g, x, &y), bad);
    attn_nn_positional_free(&pe);
    attn_graph_destroy(g);
    attn_params_destroy(store);
}

int main(void)
{
    RUN_TEST(test_parameter_names_are_pytorchs);
    RUN_TEST(test_layer_gradients_match_finite_differences);
    RUN_TEST(test_embedding_and_tied_projection_gradients);
    RUN_TEST(test_masks_hide_what_they_promise);
    RUN_TEST(test_bad_arguments_are_rejected);
    return test_summary();
}
