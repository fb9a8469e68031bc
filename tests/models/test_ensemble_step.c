/* The ensemble step decoder (attn_model_step_ensemble): one member gives that member's logits
 * and maps bit for bit, two copies of one model give the model's, and a Transformer with an
 * rnn gives, after the search's log-softmax, the mean of the two members' log-probabilities
 * renormalised, computed here in double from the members stepped on their own, with the
 * first member's maps, through beam-like selects; members that disagree are refused. */
#include "attn/attn.h"
#include "harness.h"
#include "models_testing.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 2, SRC_LEN = 5, STEPS = 6, MAX_ROWS = 6, SRC_VOCAB = 9, TGT_VOCAB = 11 };

static const int32_t batch_src[BATCH * SRC_LEN] = {4, 5, 6, 7, 8, /**/ 5, 3, 0, 0, 0};
static const int32_t batch_src_lengths[BATCH] = {5, 2};

/* Rows after each step: grow to 3 per sentence, reorder, drop. */
static const int64_t selects[STEPS][MAX_ROWS] = {{0, 0, 1, 1, 1, 0}, {5, 1, 0, 2, 3, 4},
                                                 {0, 2, 2, 4, 5, 1}, {3, 3, 1, 0, 2, 5},
                                                 {1, 4, 4, 0, 2, 3}, {0, 1, 2, 3, 4, 5}};
static const int64_t select_sizes[STEPS] = {6, 6, 6, 6, 5, 5};

static attn_model_config transformer_config(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER);
    c.d_model = 8;
    c.num_heads = 2;
    c.ffn_dim = 12;
    c.encoder_layers = 1;
    c.decoder_layers = 2;
    c.src_vocab = SRC_VOCAB;
    c.tgt_vocab = TGT_VOCAB;
    c.max_len = 16;
    c.dropout = 0.0;
    return c;
}

static attn_model_config rnn_config(int64_t tgt_vocab)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.src_vocab = SRC_VOCAB;
    c.tgt_vocab = tgt_vocab;
    c.hidden = 6;
    c.embedding_dim = 4;
    c.attention_dim = 5;
    c.max_len = 16;
    c.dropout = 0.0;
    return c;
}

/* A member: the model encodes the batch on its own graph and starts a step decoder. */
static attn_step_decoder *start(attn_model *model)
{
    attn_graph *graph = NULL;
    attn_var *memory = NULL;
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(model), &graph));
    if (graph == NULL)
        return NULL;
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    CHECK_OK(
        attn_model_encode(model, graph, BATCH, SRC_LEN, batch_src, batch_src_lengths, &memory));
    if (memory != NULL)
        CHECK_OK(
            attn_model_step_start(model, graph, memory, batch_src_lengths, MAX_ROWS, STEPS, &d));
    attn_graph_destroy(graph);
    return d;
}

/* The tokens fed at a step: a function of the step and row, so every decoder sees the same. */
static void step_ids(int64_t step, int64_t rows, int32_t *ids)
{
    for (int64_t r = 0; r < rows; r++)
        ids[r] = step == 0 ? ATTN_BOS_ID : (int32_t)(3 + (step * 5 + r * 3) % (TGT_VOCAB - 3));
}

static void log_softmax_double(const float *logits, int64_t n, double *out)
{
    double max = logits[0], sum = 0;
    for (int64_t i = 1; i < n; i++)
        max = logits[i] > max ? logits[i] : max;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - max);
    for (int64_t i = 0; i < n; i++)
        out[i] = (double)logits[i] - max - log(sum);
}

/* Steps the ensemble and its members' own twins (started alike) in lockstep through the
 * selects; with `bits`, the ensemble's logits must equal the first twin's bit for bit, else
 * their log-softmax must be the renormalised mean of the twins' log-softmaxes. The maps
 * must always be the first twin's, bit for bit. */
static void check_against_twins(attn_step_decoder *ensemble, attn_step_decoder **twins,
                                int64_t count, int bits, const char *what)
{
    const int64_t maps = attn_model_step_cross_maps(twins[0]);
    CHECK(attn_model_step_cross_maps(ensemble) == maps, "%s: the first member's map count", what);
    float *logits = test_alloc(MAX_ROWS * TGT_VOCAB * sizeof *logits);
    float *twin_logits = test_alloc((size_t)count * MAX_ROWS * TGT_VOCAB * sizeof *twin_logits);
    float *cross = test_alloc((size_t)(MAX_ROWS * maps * SRC_LEN) * sizeof *cross);
    float *twin_cross = test_alloc((size_t)(MAX_ROWS * maps * SRC_LEN) * sizeof *twin_cross);
    double worst = 0;
    int same_bits = 1, same_maps = 1;
    for (int64_t step = 0; step < STEPS; step++) {
        const int64_t rows = attn_model_step_size(ensemble);
        int32_t ids[MAX_ROWS];
        step_ids(step, rows, ids);
        CHECK_OK(attn_model_step(ensemble, ids, logits, cross));
        for (int64_t m = 0; m < count; m++)
            CHECK_OK(attn_model_step(twins[m], ids, twin_logits + m * MAX_ROWS * TGT_VOCAB,
                                     m == 0 ? twin_cross : NULL));
        same_maps &=
            memcmp(cross, twin_cross, (size_t)(rows * maps * SRC_LEN) * sizeof *cross) == 0;
        if (bits)
            same_bits &=
                memcmp(logits, twin_logits, (size_t)(rows * TGT_VOCAB) * sizeof *logits) == 0;
        for (int64_t r = 0; r < rows && !bits; r++) {
            double got[TGT_VOCAB], member[TGT_VOCAB], mean[TGT_VOCAB] = {0};
            log_softmax_double(logits + r * TGT_VOCAB, TGT_VOCAB, got);
            for (int64_t m = 0; m < count; m++) {
                log_softmax_double(twin_logits + (m * MAX_ROWS + r) * TGT_VOCAB, TGT_VOCAB, member);
                for (int v = 0; v < TGT_VOCAB; v++)
                    mean[v] += member[v] / (double)count;
            }
            double z = 0;
            for (int v = 0; v < TGT_VOCAB; v++)
                z += exp(mean[v]);
            for (int v = 0; v < TGT_VOCAB; v++)
                worst = fmax(worst, fabs(got[v] - (mean[v] - log(z))));
        }
        CHECK_OK(attn_model_step_select(ensemble, selects[step], select_sizes[step]));
        for (int64_t m = 0; m < count; m++)
            CHECK_OK(attn_model_step_select(twins[m], selects[step], select_sizes[step]));
    }
    CHECK(same_maps, "%s: the maps are the first member's, bit for bit", what);
    if (bits)
        CHECK(same_bits, "%s: the logits are the model's, bit for bit", what);
    else
        CHECK(worst < 2e-6, "%s: log-softmax = renormalised mean of log-probs (worst %g)", what,
              worst);
    free(logits);
    free(twin_logits);
    free(cross);
    free(twin_cross);
}

static void test_one_member_is_the_model(void)
{
    attn_model_config c = transformer_config();
    attn_model *model = new_model(&c, 3, 0.5f);
    attn_step_decoder *member = start(model), *twin = start(model), *ensemble = NULL;
    CHECK_OK(attn_model_step_ensemble(&member, 1, &ensemble));
    if (ensemble != NULL && twin != NULL)
        check_against_twins(ensemble, &twin, 1, 1, "one member");
    attn_model_step_destroy(ensemble);
    attn_model_step_destroy(twin);
    attn_model_destroy(model);
}

static void test_two_copies_are_the_model(void)
{
    attn_model_config c = rnn_config(TGT_VOCAB);
    attn_model *model = new_model(&c, 5, 0.5f);
    attn_step_decoder *members[2] = {start(model), start(model)}, *twin = start(model);
    attn_step_decoder *ensemble = NULL;
    CHECK_OK(attn_model_step_ensemble(members, 2, &ensemble));
    if (ensemble != NULL && twin != NULL)
        check_against_twins(ensemble, &twin, 1, 1, "two copies");
    attn_model_step_destroy(ensemble);
    attn_model_step_destroy(twin);
    attn_model_destroy(model);
}

static void test_transformer_with_rnn(void)
{
    attn_model_config ct = transformer_config(), cr = rnn_config(TGT_VOCAB);
    attn_model *transformer = new_model(&ct, 7, 0.5f), *rnn = new_model(&cr, 8, 0.5f);
    attn_step_decoder *members[2] = {start(transformer), start(rnn)};
    attn_step_decoder *twins[2] = {start(transformer), start(rnn)}, *ensemble = NULL;
    CHECK_OK(attn_model_step_ensemble(members, 2, &ensemble));
    if (ensemble != NULL && twins[0] != NULL && twins[1] != NULL)
        check_against_twins(ensemble, twins, 2, 0, "transformer + rnn");
    attn_model_step_destroy(ensemble);
    attn_model_step_destroy(twins[0]);
    attn_model_step_destroy(twins[1]);
    attn_model_destroy(transformer);
    attn_model_destroy(rnn);
}

static void check_message(const char *needle)
{
    CHECK(strstr(attn_last_error(), needle) != NULL, "message '%s' mentions '%s'",
          attn_last_error(), needle);
}

static void test_refused(void)
{
    attn_model_config ct = transformer_config(), cr = rnn_config(TGT_VOCAB + 1);
    attn_model *transformer = new_model(&ct, 7, 0.5f), *rnn = new_model(&cr, 8, 0.5f);
    attn_step_decoder *members[2] = {start(transformer), start(rnn)}, *ensemble = NULL;
    CHECK_FAILS(attn_model_step_ensemble(members, 2, &ensemble), ATTN_ERR_INVALID_ARGUMENT);
    check_message("target vocabulary of 12, member 0 of 11");
    CHECK(ensemble == NULL, "no ensemble after a failure");
    CHECK_FAILS(attn_model_step_ensemble(members, 0, &ensemble), ATTN_ERR_INVALID_ARGUMENT);
    attn_step_decoder *same[2] = {members[0], members[0]};
    CHECK_FAILS(attn_model_step_ensemble(same, 2, &ensemble), ATTN_ERR_INVALID_ARGUMENT);
    check_message("one decoder");
    /* A member that has stepped is out of step with a fresh one. */
    attn_step_decoder *fresh = start(transformer), *stepped = start(transformer);
    float logits[BATCH * TGT_VOCAB];
    const int32_t ids[BATCH] = {ATTN_BOS_ID, ATTN_BOS_ID};
    CHECK_OK(attn_model_step(stepped, ids, logits, NULL));
    attn_step_decoder *apart[2] = {fresh, stepped};
    CHECK_FAILS(attn_model_step_ensemble(apart, 2, &ensemble), ATTN_ERR_INVALID_ARGUMENT);
    check_message("steps");
    /* The members still belong to the caller. */
    attn_model_step_destroy(members[0]);
    attn_model_step_destroy(members[1]);
    attn_model_step_destroy(fresh);
    attn_model_step_destroy(stepped);
    attn_model_destroy(transformer);
    attn_model_destroy(rnn);
}

int main(void)
{
    RUN_TEST(test_one_member_is_the_model);
    RUN_TEST(test_two_copies_are_the_model);
    RUN_TEST(test_transformer_with_rnn);
    RUN_TEST(test_refused);
    return test_summary();
}
