/* Decoding one step at a time (attn_model_step_*): every step gives the logits that
 * attn_model_decode computes at that position of the same prefix (transformer post- and
 * pre-norm, the language model, the rnn models; padded sources; every instruction set),
 * selecting rows (beam-like growth, reordering, dropping) decodes each row's own history
 * and source exactly, cross-attention weights are distributions over the real source
 * positions, results do not depend on the run or the thread count, and bad input fails with
 * a message. */
#include "attn/attn.h"
#include "harness.h"
#include "models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BOS = 1, BATCH = 3, SRC_LEN = 5, STEPS = 22, MAX_ROWS = 6 };

/* Values U(-0.5, 0.5) everywhere, so biases and norms are not the identity. */
static const float VALUE_RANGE = 0.5f;

/* Capacities on either side of the step decoder's switch from its small-row linear layer
 * to attn_gemm on transposed weights (at 8 rows). */
static const int64_t capacities[2] = {MAX_ROWS, 16};

static const int32_t batch_src[BATCH * SRC_LEN] = {4,      5, 6, 7, 8, /**/ 5, 3, 0, 0, 0,
                                                   /**/ 0, 0, 0, 0, 0};
static const int32_t batch_src_lengths[BATCH] = {5, 2, 0};

typedef struct variant {
    const char *name;
    attn_model_config config;
} variant;

static attn_model_config transformer(int64_t d_model, int64_t heads, int norm_first)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = d_model;
    c.num_heads = heads;
    c.ffn_dim = 2 * d_model + 3;
    c.encoder_layers = 2;
    c.decoder_layers = 2;
    c.src_vocab = 9;
    c.tgt_vocab = 11;
    c.max_len = 32;
    c.norm_first = norm_first;
    c.dropout = 0.1; /* inference ignores it */
    return c;
}

static attn_model_config rnn(attn_rnn_attention attention, attn_rnn_cell cell)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.src_vocab = 9;
    c.tgt_vocab = 11;
    c.hidden = 5;
    c.embedding_dim = 4;
    c.attention_dim = 6;
    c.layers = 2;
    c.cell = cell;
    c.max_len = 32;
    c.attention = attention;
    c.bidirectional = attention != ATTN_RNN_LUONG_DOT;
    return c;
}

static int make_variants(variant *v)
{
    int n = 0;
    v[n++] = (variant){"transformer post-norm, d_head 4", transformer(12, 3, 0)};
    attn_model_config c = transformer(14, 2, 1);
    c.activation = ATTN_ACT_GELU;
    c.decoder_final_norm = 0;
    c.tie_output = 0;
    v[n++] = (variant){"transformer pre-norm, d_head 7, gelu, no final norm, untied", c};
    c = transformer(3, 3, 0);
    c.decoder_layers = 1;
    c.share_embeddings = 1;
    c.src_vocab = c.tgt_vocab;
    v[n++] = (variant){"transformer post-norm, d_head 1, shared embeddings", c};
    c = transformer(80, 1, 1);
    c.encoder_layers = 1;
    c.decoder_layers = 1;
    c.ffn_dim = 24;
    v[n++] = (variant){"transformer pre-norm, d_head 80", c};
    c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = 16;
    c.num_heads = 2;
    c.ffn_dim = 20;
    c.decoder_layers = 2;
    c.tgt_vocab = 11;
    c.max_len = 32;
    c.norm_first = 1;
    v[n++] = (variant){"language model, pre-norm", c};
    c.activation = ATTN_ACT_GELU_TANH;
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    c.scale_embeddings = 0;
    v[n++] = (variant){"language model as GPT-2: learned positions, no output bias", c};
    c = transformer(12, 3, 1);
    c.positions = ATTN_POSITIONS_LEARNED;
    c.output_bias = 0;
    c.tie_output = 0;
    v[n++] = (variant){"transformer pre-norm, learned positions, untied without bias", c};
    /* LLaMA-style blocks: the cache holds rotated keys, the new query turns at its step. */
    c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    c.d_model = 16;
    c.num_heads = 2;
    c.ffn_dim = 20;
    c.decoder_layers = 2;
    c.tgt_vocab = 11;
    c.max_len = 32;
    c.norm_first = 1;
    c.positions = ATTN_POSITIONS_ROPE;
    c.norm = ATTN_NORM_RMS;
    c.ffn = ATTN_FFN_SWIGLU;
    c.bias = 0;
    c.output_bias = 0;
    c.tie_output = 0;
    c.scale_embeddings = 0;
    v[n++] = (variant){"language model as LLaMA: rope, rms_norm, swiglu, no bias", c};
    c = transformer(12, 3, 0);
    c.positions = ATTN_POSITIONS_ROPE;
    c.norm = ATTN_NORM_RMS;
    c.ffn = ATTN_FFN_SWIGLU;
    c.bias = 0;
    v[n++] = (variant){"transformer post-norm: rope, rms_norm, swiglu, no bias", c};
    c = transformer(12, 2, 1);
    c.positions = ATTN_POSITIONS_ROPE;
    c.bias = 0;
    v[n++] = (variant){"transformer pre-norm: rope, LayerNorms without bias", c};
    v[n++] = (variant){"rnn Bahdanau GRU", rnn(ATTN_RNN_BAHDANAU, ATTN_RNN_GRU)};
    c = rnn(ATTN_RNN_LUONG_GENERAL, ATTN_RNN_LSTM);
    c.local = ATTN_RNN_LOCAL_M;
    c.window = 1;
    c.input_feeding = 1;
    v[n++] = (variant){"rnn Luong general LSTM, local-m, input feeding", c};
    c = rnn(ATTN_RNN_LUONG_CONCAT, ATTN_RNN_GRU);
    c.local = ATTN_RNN_LOCAL_P;
    c.window = 2;
    v[n++] = (variant){"rnn Luong concat GRU, local-p", c};
    v[n++] = (variant){"rnn no attention LSTM", rnn(ATTN_RNN_NO_ATTENTION, ATTN_RNN_LSTM)};
    return n;
}

static int is_lm(const attn_model_config *c)
{
    return c->arch == ATTN_ARCH_TRANSFORMER_LM;
}

static attn_graph *inference_graph(attn_model *m)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    if (g != NULL) {
        attn_graph_set_recording(g, 0);
        attn_graph_set_training(g, 0);
    }
    return g;
}

/* The memory of the sentences (NULL for the language model). */
static attn_var *encode(attn_model *m, attn_graph *g, int64_t size, const int32_t *src,
                        const int32_t *lengths)
{
    if (is_lm(attn_model_get_config(m)))
        return NULL;
    attn_var *memory = NULL;
    CHECK_OK(attn_model_encode(m, g, size, SRC_LEN, src, lengths, &memory));
    return memory;
}

static int32_t token(uint64_t seed, int64_t row, int64_t t, int64_t vocab)
{
    if (t == 0)
        return BOS;
    return (int32_t)(attn_hash_uniform(seed, (uint64_t)(row * 1000 + t)) * (float)vocab);
}

static double relative_error(const float *a, const float *b, int64_t n)
{
    double worst = 0.0;
    for (int64_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - (double)b[i]) / (1.0 + fabs((double)b[i])));
    return worst;
}

/* ---- steps equal the whole-prefix decoder ------------------------------------------------ */

static void check_steps_match_decode(const variant *v, attn_isa isa, int64_t max_rows)
{
    const attn_model_config *c = &v->config;
    const int64_t V = c->tgt_vocab;
    attn_model *m = new_model(c, 7, VALUE_RANGE);
    attn_graph *g = inference_graph(m);
    int32_t tgt[BATCH * STEPS];
    for (int b = 0; b < BATCH; b++)
        for (int t = 0; t < STEPS; t++)
            tgt[b * STEPS + t] = token(3, b, t, V);
    const int32_t *lengths = is_lm(c) ? NULL : batch_src_lengths;
    attn_var *memory = encode(m, g, BATCH, batch_src, lengths), *all = NULL;
    CHECK_OK(attn_model_decode(m, g, memory, lengths, BATCH, STEPS, tgt, STEPS, NULL, &all));
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_model_step_start(m, g, memory, lengths, max_rows, STEPS, &d));
    /* The decoder keeps its own copies: the graph may go. */
    float *expected = test_alloc((size_t)(BATCH * STEPS * V) * sizeof(float));
    if (all != NULL)
        memcpy(expected, all->value.data, (size_t)(BATCH * STEPS * V) * sizeof(float));
    attn_graph_reset(g);
    if (is_lm(c) && d != NULL) {
        /* A language model starts with max_rows rows: keep BATCH of them. */
        CHECK(attn_model_step_size(d) == max_rows, "%s: starts with max_rows rows", v->name);
        const int64_t first[BATCH] = {0, 1, 2};
        CHECK_OK(attn_model_step_select(d, first, BATCH));
    }
    CHECK(attn_model_step_size(d) == BATCH, "%s: starts with one row per sentence", v->name);
    double worst = 0.0;
    for (int64_t t = 0; t < STEPS && d != NULL && all != NULL; t++) {
        int32_t ids[BATCH];
        float logits[BATCH * 11];
        for (int b = 0; b < BATCH; b++)
            ids[b] = tgt[b * STEPS + t];
        CHECK_OK(attn_model_step(d, ids, logits, NULL));
        for (int b = 0; b < BATCH; b++)
            worst = fmax(worst, relative_error(logits + b * V, expected + (b * STEPS + t) * V, V));
    }
    CHECK(worst < 1e-5, "%s, %s, max_rows %lld: %d steps give attn_model_decode's logits (%g)",
          v->name, attn_isa_name(isa), (long long)max_rows, STEPS, worst);
    CHECK(attn_model_step_count(d) == STEPS, "%s: counts its steps", v->name);
    free(expected);
    attn_model_step_destroy(d);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_steps_match_decode(void)
{
    variant v[16];
    const int n = make_variants(v);
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (!attn_isa_supported((attn_isa)isa))
            continue;
        CHECK_OK(attn_set_isa((attn_isa)isa));
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 2; k++)
                check_steps_match_decode(&v[i], (attn_isa)isa, capacities[k]);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* ---- prefill equals its steps ------------------------------------------------------------ */

enum { PREFILL = 19 };

/* Decoder a reads PREFILL tokens of every row in one prefill, decoder b steps through them;
 * then both take two more steps. Every logit is the same bit (the prefill spans several passes
 * at both capacities: 64 rows of scratch hold 10 positions of 6 rows, 4 of 16). */
static void check_prefill(const variant *v, attn_isa isa, int64_t max_rows, attn_precision p)
{
    const attn_model_config *c = &v->config;
    const int64_t V = c->tgt_vocab, rows = max_rows;
    attn_model *m = new_model(c, 7, VALUE_RANGE);
    CHECK_OK(attn_model_set_precision(m, p));
    attn_graph *g = inference_graph(m);
    attn_step_decoder *a = NULL, *b = NULL;
    CHECK_OK(attn_model_step_start(m, g, NULL, NULL, max_rows, STEPS, &a));
    CHECK_OK(attn_model_step_start(m, g, NULL, NULL, max_rows, STEPS, &b));
    int32_t *prompt = test_alloc((size_t)(rows * PREFILL) * sizeof(int32_t));
    float *from_prefill = test_alloc((size_t)(rows * V) * sizeof(float));
    float *from_steps = test_alloc((size_t)(rows * V) * sizeof(float));
    int32_t column[16];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t t = 0; t < PREFILL; t++)
            prompt[r * PREFILL + t] = token(5, r, t, V);
    int same = a != NULL && b != NULL;
    if (same) {
        CHECK_OK(attn_model_step_prefill(a, prompt, PREFILL, from_prefill));
        for (int64_t t = 0; t < PREFILL; t++) {
            for (int64_t r = 0; r < rows; r++)
                column[r] = prompt[r * PREFILL + t];
            CHECK_OK(attn_model_step(b, column, from_steps, NULL));
        }
        same = memcmp(from_prefill, from_steps, (size_t)(rows * V) * sizeof(float)) == 0;
        for (int step = 0; step < 2 && same; step++) {
            for (int64_t r = 0; r < rows; r++)
                column[r] = token(6, r, step, V);
            CHECK_OK(attn_model_step(a, column, from_prefill, NULL));
            CHECK_OK(attn_model_step(b, column, from_steps, NULL));
            same = memcmp(from_prefill, from_steps, (size_t)(rows * V) * sizeof(float)) == 0;
        }
        CHECK(attn_model_step_count(a) == PREFILL + 2, "%s: a prefill counts its steps",
              v->name);
    }
    CHECK(same, "%s, %s, %s, max_rows %lld: a prefill of %d tokens and the steps after it equal "
          "stepping, to the bit", v->name, attn_isa_name(isa), attn_precision_name(p),
          (long long)max_rows, PREFILL);
    free(prompt);
    free(from_prefill);
    free(from_steps);
    attn_model_step_destroy(a);
    attn_model_step_destroy(b);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_prefill_equals_steps(void)
{
    variant v[16];
    const int n = make_variants(v);
    const attn_precision precisions[3] = {ATTN_PRECISION_FP32, ATTN_PRECISION_BF16,
                                          ATTN_PRECISION_INT8};
    for (int isa = ATTN_ISA_REFERENCE; isa <= ATTN_ISA_LAST; isa++) {
        if (!attn_isa_supported((attn_isa)isa))
            continue;
        CHECK_OK(attn_set_isa((attn_isa)isa));
        for (int i = 0; i < n; i++)
            for (int k = 0; k < 2 && is_lm(&v[i].config); k++)
                for (int p = 0; p < 3; p++)
                    check_prefill(&v[i], (attn_isa)isa, capacities[k], precisions[p]);
    }
    CHECK_OK(attn_set_isa(ATTN_ISA_AUTO));
}

/* ---- select --------------------------------------------------------------------------------- */

/* The rows of a beam-like run: each row's sentence and tokens so far. */
typedef struct rows_state {
    int64_t size;
    int sentence[MAX_ROWS];
    int32_t history[MAX_ROWS * STEPS];
} rows_state;

static void apply_select(rows_state *s, const int64_t *rows, int64_t new_size)
{
    rows_state next = *s;
    next.size = new_size;
    for (int64_t r = 0; r < new_size; r++) {
        next.sentence[r] = s->sentence[rows[r]];
        memcpy(next.history + r * STEPS, s->history + rows[r] * STEPS, sizeof(int32_t) * STEPS);
    }
    *s = next;
}

/* attn_model_decode over every row's own source and prefix: logits of position t. */
static void decode_rows(attn_model *m, const rows_state *s, int64_t t, float *out)
{
    const int64_t V = attn_model_get_config(m)->tgt_vocab;
    int32_t src[MAX_ROWS * SRC_LEN], lengths[MAX_ROWS];
    for (int64_t r = 0; r < s->size; r++) {
        memcpy(src + r * SRC_LEN, batch_src + s->sentence[r] * SRC_LEN, sizeof(int32_t) * SRC_LEN);
        lengths[r] = batch_src_lengths[s->sentence[r]];
    }
    const int lm = is_lm(attn_model_get_config(m));
    attn_graph *g = inference_graph(m);
    attn_var *memory = encode(m, g, s->size, src, lengths), *all = NULL;
    CHECK_OK(attn_model_decode(m, g, memory, lm ? NULL : lengths, s->size, t + 1, s->history, STEPS,
                               NULL, &all));
    for (int64_t r = 0; all != NULL && r < s->size; r++)
        memcpy(out + r * V, all->value.data + (r * (t + 1) + t) * V, sizeof(float) * (size_t)V);
    attn_graph_destroy(g);
}

/* A decoder started on the final rows (their sources gathered) and fed their histories from
 * the first step: its last logits, for the bitwise comparison. */
static void replay_rows(attn_model *m, const rows_state *s, int64_t max_rows, float *out)
{
    int32_t src[MAX_ROWS * SRC_LEN], lengths[MAX_ROWS], ids[MAX_ROWS];
    for (int64_t r = 0; r < s->size; r++) {
        memcpy(src + r * SRC_LEN, batch_src + s->sentence[r] * SRC_LEN, sizeof(int32_t) * SRC_LEN);
        lengths[r] = batch_src_lengths[s->sentence[r]];
    }
    const int lm = is_lm(attn_model_get_config(m));
    attn_graph *g = inference_graph(m);
    attn_var *memory = encode(m, g, s->size, src, lengths);
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_model_step_start(m, g, memory, lm ? NULL : lengths, max_rows, STEPS, &d));
    if (lm && d != NULL) {
        int64_t first[MAX_ROWS];
        for (int64_t r = 0; r < s->size; r++)
            first[r] = r;
        CHECK_OK(attn_model_step_select(d, first, s->size));
    }
    for (int64_t t = 0; t < STEPS && d != NULL; t++) {
        for (int64_t r = 0; r < s->size; r++)
            ids[r] = s->history[r * STEPS + t];
        CHECK_OK(attn_model_step(d, ids, out, NULL));
    }
    attn_model_step_destroy(d);
    attn_graph_destroy(g);
}

static void check_select(const variant *v, int64_t max_rows)
{
    const attn_model_config *c = &v->config;
    const int64_t V = c->tgt_vocab;
    const int lm = is_lm(c);
    attn_model *m = new_model(c, 11, VALUE_RANGE);
    attn_graph *g = inference_graph(m);
    rows_state s;
    memset(&s, 0, sizeof s);
    /* The language model starts with max_rows rows: keep the first MAX_ROWS. */
    s.size = lm ? MAX_ROWS : BATCH;
    for (int r = 0; r < s.size; r++)
        s.sentence[r] = r % BATCH;
    attn_var *memory = encode(m, g, BATCH, batch_src, batch_src_lengths);
    attn_step_decoder *d = NULL;
    CHECK_OK(
        attn_model_step_start(m, g, memory, lm ? NULL : batch_src_lengths, max_rows, STEPS, &d));
    attn_graph_reset(g);
    /* Beam-like: grow with repeats, reorder and drop, duplicate one row, shrink to one. */
    static const int64_t select_at[] = {1, 4, 9, 15};
    static const int64_t sizes[] = {6, 4, 6, 1};
    static const int64_t choices[][MAX_ROWS] = {
        {2, 0, 0, 1, 2, 2}, {5, 1, 0, 3, 0, 0}, {3, 3, 3, 0, 1, 3}, {4, 0, 0, 0, 0, 0}};
    float logits[MAX_ROWS * 11], expected[MAX_ROWS * 11], replayed[MAX_ROWS * 11];
    double worst = 0.0;
    int sizes_follow = 1;
    if (lm && d != NULL) {
        int64_t first[MAX_ROWS];
        for (int64_t r = 0; r < MAX_ROWS; r++)
            first[r] = r;
        CHECK_OK(attn_model_step_select(d, first, MAX_ROWS));
    }
    for (int64_t t = 0, k = 0; t < STEPS && d != NULL; t++) {
        if (k < 4 && t == select_at[k]) {
            int64_t rows[MAX_ROWS];
            for (int64_t r = 0; r < sizes[k]; r++)
                rows[r] = choices[k][r] % s.size;
            CHECK_OK(attn_model_step_select(d, rows, sizes[k]));
            apply_select(&s, rows, sizes[k]);
            sizes_follow &= attn_model_step_size(d) == s.size;
            k++;
        }
        int32_t ids[MAX_ROWS];
        for (int64_t r = 0; r < s.size; r++)
            s.history[r * STEPS + t] = ids[r] = token(5, r, t, V);
        CHECK_OK(attn_model_step(d, ids, logits, NULL));
        decode_rows(m, &s, t, expected);
        worst = fmax(worst, relative_error(logits, expected, s.size * V));
    }
    CHECK(sizes_follow, "%s: the size follows the selects", v->name);
    CHECK(worst < 1e-5,
          "%s, max_rows %lld: after selects every row decodes its own source and history (%g)",
          v->name, (long long)max_rows, worst);
    replay_rows(m, &s, max_rows, replayed);
    CHECK(memcmp(logits, replayed, sizeof(float) * (size_t)(s.size * V)) == 0,
          "%s, max_rows %lld: bit for bit what a decoder started on the selected rows gives",
          v->name, (long long)max_rows);
    attn_model_step_destroy(d);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_select_follows_rows(void)
{
    variant v[16];
    const int n = make_variants(v);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 2; k++)
            check_select(&v[i], capacities[k]);
}

/* Selecting no row, stepping an empty batch, growing is then impossible (no row to copy). */
static void test_empty_selection(void)
{
    variant v[16];
    const int n = make_variants(v);
    for (int i = 0; i < n; i++) {
        const int lm = is_lm(&v[i].config);
        attn_model *m = new_model(&v[i].config, 2, VALUE_RANGE);
        attn_graph *g = inference_graph(m);
        attn_var *memory = encode(m, g, BATCH, batch_src, batch_src_lengths);
        attn_step_decoder *d = NULL;
        CHECK_OK(attn_model_step_start(m, g, memory, lm ? NULL : batch_src_lengths, BATCH, 4, &d));
        CHECK_OK(attn_model_step_select(d, NULL, 0));
        CHECK(attn_model_step_size(d) == 0, "%s: no row left", v[i].name);
        CHECK_OK(attn_model_step(d, NULL, NULL, NULL));
        const int64_t row = 0;
        CHECK_FAILS(attn_model_step_select(d, &row, 1), ATTN_ERR_INVALID_ARGUMENT);
        attn_model_step_destroy(d);
        attn_graph_destroy(g);
        attn_model_destroy(m);
    }
}

/* ---- cross-attention weights ------------------------------------------------------------------
 */

static void check_cross_weights(const variant *v, int uniform)
{
    const attn_model_config *c = &v->config;
    const int64_t V = c->tgt_vocab;
    attn_model *m = new_model(c, 13, VALUE_RANGE);
    attn_params *store = attn_model_params(m);
    if (uniform) {
        /* No query projection: every score is 0, so the weights are uniform. */
        for (int64_t l = 0; l < c->decoder_layers; l++) {
            char name[96];
            attn_param_id id;
            attn_param_info info;
            snprintf(name, sizeof name, "decoder.layers.%lld.multihead_attn.in_proj_weight",
                     (long long)l);
            CHECK_OK(attn_params_find(store, name, &id));
            CHECK_OK(attn_params_info(store, id, &info));
            memset(attn_params_data(store, id, ATTN_PARAM_VALUES), 0,
                   sizeof(float) * (size_t)(c->d_model * c->d_model));
            snprintf(name, sizeof name, "decoder.layers.%lld.multihead_attn.in_proj_bias",
                     (long long)l);
            if (!c->bias) /* a bias-free model has no query bias to clear */
                continue;
            CHECK_OK(attn_params_find(store, name, &id));
            memset(attn_params_data(store, id, ATTN_PARAM_VALUES), 0,
                   sizeof(float) * (size_t)c->d_model);
        }
    }
    attn_graph *g = inference_graph(m);
    attn_var *memory = encode(m, g, BATCH, batch_src, batch_src_lengths);
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_model_step_start(m, g, memory, batch_src_lengths, BATCH, 6, &d));
    const int64_t maps = attn_model_step_cross_maps(d);
    const int64_t expected_maps = c->arch == ATTN_ARCH_RNN ? 1 : c->decoder_layers * c->num_heads;
    CHECK(maps == expected_maps, "%s: %lld cross maps, expected %lld", v->name, (long long)maps,
          (long long)expected_maps);
    CHECK(attn_model_step_src_len(d) == SRC_LEN, "%s: src_len", v->name);
    float *cross = test_alloc(sizeof(float) * (size_t)(BATCH * maps * SRC_LEN));
    float logits[BATCH * 11];
    double worst_sum = 0.0, worst_padding = 0.0, worst_uniform = 0.0;
    const int none = c->arch == ATTN_ARCH_RNN && c->attention == ATTN_RNN_NO_ATTENTION;
    for (int64_t t = 0; t < 6 && d != NULL; t++) {
        int32_t ids[BATCH];
        for (int b = 0; b < BATCH; b++)
            ids[b] = token(9, b, t, V);
        for (int64_t i = 0; i < BATCH * maps * SRC_LEN; i++)
            cross[i] = NAN;
        CHECK_OK(attn_model_step(d, ids, logits, cross));
        for (int64_t b = 0; b < BATCH; b++)
            for (int64_t k = 0; k < maps; k++) {
                const float *w = cross + (b * maps + k) * SRC_LEN;
                const int32_t n = batch_src_lengths[b];
                double sum = 0.0;
                for (int j = 0; j < SRC_LEN; j++) {
                    if (j >= n)
                        worst_padding = fmax(worst_padding, fabs((double)w[j]));
                    else
                        sum += (double)w[j];
                    if (uniform && j < n)
                        worst_uniform = fmax(worst_uniform, fabs((double)w[j] - 1.0 / n));
                }
                /* Nothing to attend: no attention, an empty source, or local-m's window
                 * [t - D, t + D] past the sentence's end. */
                const int nothing = none || n == 0 ||
                                    (c->arch == ATTN_ARCH_RNN && c->local == ATTN_RNN_LOCAL_M &&
                                     t - c->window >= n);
                worst_sum = fmax(worst_sum, fabs(sum - (nothing ? 0.0 : 1.0)));
            }
    }
    CHECK(worst_sum < 1e-5 && !(worst_padding != 0.0),
          "%s: weights sum to 1 over the real positions (%g), 0 beyond (%g)", v->name, worst_sum,
          worst_padding);
    if (uniform)
        CHECK(worst_uniform < 1e-6, "%s: equal scores give uniform weights (%g)", v->name,
              worst_uniform);
    free(cross);
    attn_model_step_destroy(d);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_cross_weights(void)
{
    variant v[16];
    const int n = make_variants(v);
    for (int i = 0; i < n; i++) {
        if (is_lm(&v[i].config))
            continue;
        /* local-p scales its window by a Gaussian: its weights need not sum to 1. */
        if (v[i].config.local == ATTN_RNN_LOCAL_P && v[i].config.arch == ATTN_ARCH_RNN)
            continue;
        check_cross_weights(&v[i], 0);
        if (v[i].config.arch == ATTN_ARCH_TRANSFORMER)
            check_cross_weights(&v[i], 1);
    }
}

/* ---- determinism ---------------------------------------------------------------------------- */

/* A batch big enough for the attention to use both threads: logits and weights of every
 * step, run twice at 2 threads and once at 1. */
static void run_big_batch(attn_model *m, float *logits, float *cross)
{
    enum { ROWS = 40, RUN_STEPS = 8 };
    const attn_model_config *c = attn_model_get_config(m);
    const int64_t V = c->tgt_vocab, maps = c->decoder_layers * c->num_heads;
    int32_t src[ROWS * SRC_LEN], lengths[ROWS];
    for (int r = 0; r < ROWS; r++) {
        lengths[r] = 1 + r % SRC_LEN;
        for (int j = 0; j < SRC_LEN; j++)
            src[r * SRC_LEN + j] = token(17, r, j + 1, c->src_vocab);
    }
    attn_graph *g = inference_graph(m);
    attn_var *memory = NULL;
    CHECK_OK(attn_model_encode(m, g, ROWS, SRC_LEN, src, lengths, &memory));
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_model_step_start(m, g, memory, lengths, ROWS, RUN_STEPS, &d));
    for (int64_t t = 0; t < RUN_STEPS && d != NULL; t++) {
        int32_t ids[ROWS];
        for (int r = 0; r < ROWS; r++)
            ids[r] = token(19, r, t, V);
        CHECK_OK(attn_model_step(d, ids, logits + t * ROWS * V, cross + t * ROWS * maps * SRC_LEN));
    }
    attn_model_step_destroy(d);
    attn_graph_destroy(g);
}

static void test_determinism(void)
{
    attn_model_config c = transformer(64, 4, 0);
    c.tgt_vocab = 40;
    attn_model *m = new_model(&c, 21, VALUE_RANGE);
    const size_t n_logits = 8 * 40 * 40, n_cross = 8 * 40 * 8 * SRC_LEN;
    float *runs[3], *weights[3];
    const int threads[3] = {2, 2, 1};
    const int saved = attn_get_num_threads();
    for (int i = 0; i < 3; i++) {
        runs[i] = test_alloc(n_logits * sizeof(float));
        weights[i] = test_alloc(n_cross * sizeof(float));
        CHECK_OK(attn_set_num_threads(threads[i]));
        run_big_batch(m, runs[i], weights[i]);
    }
    CHECK_OK(attn_set_num_threads(saved));
    CHECK(memcmp(runs[0], runs[1], n_logits * sizeof(float)) == 0 &&
              memcmp(weights[0], weights[1], n_cross * sizeof(float)) == 0,
          "two runs give identical bits");
    CHECK(memcmp(runs[0], runs[2], n_logits * sizeof(float)) == 0 &&
              memcmp(weights[0], weights[2], n_cross * sizeof(float)) == 0,
          "1 and 2 threads give identical bits");
    for (int i = 0; i < 3; i++) {
        free(runs[i]);
        free(weights[i]);
    }
    attn_model_destroy(m);
}

/* ---- bad input ------------------------------------------------------------------------------ */

static void test_bad_input(void)
{
    attn_model_config c = transformer(12, 3, 0);
    attn_model *m = new_model(&c, 1, VALUE_RANGE);
    attn_graph *g = inference_graph(m);
    attn_var *memory = encode(m, g, BATCH, batch_src, batch_src_lengths);
    attn_step_decoder *d = NULL;
    const int32_t *lengths = batch_src_lengths;
    CHECK_FAILS(attn_model_step_start(NULL, g, memory, lengths, 3, 4, &d),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step_start(m, NULL, memory, lengths, 3, 4, &d),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step_start(m, g, memory, lengths, 3, 4, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step_start(m, g, NULL, lengths, 3, 4, &d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(d == NULL, "a failed start leaves *out NULL");
    CHECK_FAILS(attn_model_step_start(m, g, memory, lengths, 2, 4, &d),
                ATTN_ERR_INVALID_ARGUMENT); /* max_rows below the batch */
    CHECK_FAILS(attn_model_step_start(m, g, memory, lengths, 3, 0, &d), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step_start(m, g, memory, lengths, 3, c.max_len + 1, &d),
                ATTN_ERR_INVALID_ARGUMENT);
    const int32_t too_long[BATCH] = {5, 6, 0};
    CHECK_FAILS(attn_model_step_start(m, g, memory, too_long, 3, 4, &d), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_set_recording(g, 1);
    CHECK_FAILS(attn_model_step_start(m, g, memory, lengths, 3, 4, &d), ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_set_recording(g, 0);
    attn_model *other = new_model(&c, 2, VALUE_RANGE);
    attn_graph *other_graph = inference_graph(other);
    CHECK_FAILS(attn_model_step_start(m, other_graph, memory, lengths, 3, 4, &d),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_var *wrong = NULL;
    const int64_t shape[3] = {BATCH, SRC_LEN, 13};
    CHECK_OK(attn_graph_input(g, 3, shape, NULL, 0, &wrong));
    CHECK_FAILS(attn_model_step_start(m, g, wrong, lengths, 3, 4, &d), ATTN_ERR_INVALID_ARGUMENT);

    CHECK_OK(attn_model_step_start(m, g, memory, lengths, 4, 2, &d));
    int32_t ids[BATCH] = {BOS, BOS, BOS};
    float logits[BATCH * 11];
    CHECK_FAILS(attn_model_step(NULL, ids, logits, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step(d, NULL, logits, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step(d, ids, NULL, NULL), ATTN_ERR_INVALID_ARGUMENT);
    ids[1] = 11;
    CHECK_FAILS(attn_model_step(d, ids, logits, NULL), ATTN_ERR_INVALID_ARGUMENT);
    ids[1] = -1;
    CHECK_FAILS(attn_model_step(d, ids, logits, NULL), ATTN_ERR_INVALID_ARGUMENT);
    ids[1] = BOS;
    CHECK(attn_model_step_count(d) == 0, "failed steps are not counted");
    CHECK_OK(attn_model_step(d, ids, logits, NULL));
    const int64_t rows[5] = {0, 1, 2, 0, 0};
    CHECK_FAILS(attn_model_step_select(NULL, rows, 3), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step_select(d, NULL, 3), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step_select(d, rows, 5), ATTN_ERR_INVALID_ARGUMENT); /* > max_rows */
    CHECK_FAILS(attn_model_step_select(d, rows, -1), ATTN_ERR_INVALID_ARGUMENT);
    const int64_t out_of_range[2] = {0, 3};
    CHECK_FAILS(attn_model_step_select(d, out_of_range, 2), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_model_step_size(d) == BATCH, "failed selects change nothing");
    CHECK_OK(attn_model_step_select(d, rows, 4));
    int32_t more[4] = {BOS, 3, 4, 5};
    float more_logits[4 * 11];
    CHECK_OK(attn_model_step(d, more, more_logits, NULL));
    CHECK_FAILS(attn_model_step(d, more, more_logits, NULL), ATTN_ERR_INVALID_ARGUMENT);
    attn_model_step_destroy(d);
    attn_model_step_destroy(NULL);
    CHECK(attn_model_step_size(NULL) == 0 && attn_model_step_cross_maps(NULL) == 0 &&
              attn_model_step_count(NULL) == 0 && attn_model_step_src_len(NULL) == 0,
          "queries of NULL give 0");

    /* A classifier has no decoder; a language model takes no memory. */
    attn_model_config k = attn_model_config_default(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    k.d_model = 8;
    k.num_heads = 2;
    k.ffn_dim = 8;
    k.encoder_layers = 1;
    k.src_vocab = 9;
    k.num_classes = 3;
    attn_model *classifier = new_model(&k, 3, VALUE_RANGE);
    attn_graph *classifier_graph = inference_graph(classifier);
    CHECK_FAILS(attn_model_step_start(classifier, classifier_graph, NULL, NULL, 3, 4, &d),
                ATTN_ERR_INVALID_ARGUMENT);
    variant v[16];
    make_variants(v);
    attn_model *lm = new_model(&v[4].config, 4, VALUE_RANGE);
    attn_graph *lm_graph = inference_graph(lm);
    CHECK(is_lm(&v[4].config), "variant 4 is the language model");
    CHECK_FAILS(attn_model_step_start(lm, lm_graph, memory, NULL, 3, 4, &d),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_model_step_start(lm, lm_graph, NULL, NULL, 2, 4, &d));
    CHECK(attn_model_step_size(d) == 2 && attn_model_step_cross_maps(d) == 0,
          "a language model starts with max_rows rows and has no cross-attention");
    const int32_t prompt[2 * 5] = {1, 2, 3, 4, 5, 1, 2, 3, 4, 5};
    float prefill_logits[2 * 11];
    CHECK_FAILS(attn_model_step_prefill(d, prompt, 5, prefill_logits), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_model_step_prefill(d, prompt, 0, prefill_logits), ATTN_ERR_INVALID_ARGUMENT);
    const int32_t outside[2 * 2] = {1, 2, 11, 3};
    CHECK_FAILS(attn_model_step_prefill(d, outside, 2, prefill_logits),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(attn_model_step_count(d) == 0, "a refused prefill takes no step");
    CHECK_OK(attn_model_step_prefill(d, prompt, 4, prefill_logits));
    attn_model_step_destroy(d);

    attn_graph_destroy(lm_graph);
    attn_model_destroy(lm);
    attn_graph_destroy(classifier_graph);
    attn_model_destroy(classifier);
    attn_graph_destroy(other_graph);
    attn_model_destroy(other);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

int main(void)
{
    RUN_TEST(test_steps_match_decode);
    RUN_TEST(test_prefill_equals_steps);
    RUN_TEST(test_select_follows_rows);
    RUN_TEST(test_empty_selection);
    RUN_TEST(test_cross_weights);
    RUN_TEST(test_determinism);
    RUN_TEST(test_bad_input);
    return test_summary();
}
