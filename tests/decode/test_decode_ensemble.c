/* attn_decode_ensemble: an ensemble of one model, and of two copies of it, decode exactly as
 * the model (greedy and beam, n-best, alignments); a Transformer with an rnn decodes greedily
 * as the arg-max of the renormalised mean of the two models' log-probabilities computed here by
 * stepping each model on its own, and every beam hypothesis re-scores by teacher forcing both
 * models to its log-prob, with the first model's alignment; models whose vocabularies differ
 * are refused. */
#include "decode_testing.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Greedy keeps SENTENCES rows, within the Transformer step decoder's small-row kernel (up to 8
 * rows), which one-sentence decoding by hand also runs: GEMM's other rounding, amplified by the
 * scaled weights, can move a greedy path's log P by more than a tolerance could tell apart from
 * a wrong combination. */
enum { SENTENCES = 8, SRC_MAX = 8 };

typedef struct sources {
    int32_t src[SENTENCES * SRC_MAX];
    int32_t lengths[SENTENCES];
} sources;

static void make_sources(sources *s, uint64_t seed)
{
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    memset(s, 0, sizeof *s);
    for (int i = 0; i < SENTENCES; i++) {
        s->lengths[i] = 1 + (int32_t)attn_rng_below(&rng, SRC_MAX);
        for (int j = 0; j < s->lengths[i]; j++)
            s->src[i * SRC_MAX + j] =
                ATTN_NUM_SPECIAL_IDS +
                (int32_t)attn_rng_below(&rng, SRC_VOCAB - ATTN_NUM_SPECIAL_IDS);
    }
}

static attn_decode_options options_for(int64_t beam, int64_t nbest, int align)
{
    attn_decode_options o = attn_decode_default_options();
    o.beam_size = beam;
    o.nbest = nbest;
    o.max_len_ratio = 1.0;
    o.max_len_offset = 6;
    o.alignments = align;
    return o;
}

static int same_results(const attn_decode_result *x, const attn_decode_result *y)
{
    if (x == NULL || y == NULL || x->size != y->size || x->cross_maps != y->cross_maps)
        return 0;
    for (int64_t i = 0; i < x->size; i++) {
        const attn_decode_sentence *a = &x->sentences[i], *b = &y->sentences[i];
        if (a->count != b->count)
            return 0;
        for (int64_t j = 0; j < a->count; j++) {
            const attn_hypothesis *p = &a->hypotheses[j], *q = &b->hypotheses[j];
            const size_t floats = (size_t)(p->steps * x->cross_maps * a->src_length);
            if (p->length != q->length || p->finished != q->finished || p->steps != q->steps ||
                p->log_prob != q->log_prob || p->score != q->score ||
                memcmp(p->tokens, q->tokens, (size_t)p->length * sizeof *p->tokens) != 0 ||
                (floats > 0 && memcmp(p->cross, q->cross, floats * sizeof *p->cross) != 0))
                return 0;
        }
    }
    return 1;
}

/* One model, and two copies of it (two models of the same weights, each on its own graph). */
static void check_copies_are_the_model(const attn_model_config *c, uint64_t seed, float scale,
                                       const char *what)
{
    attn_model *model = scaled_model(c, seed, scale), *copy = scaled_model(c, seed, scale);
    attn_graph *graphs[2] = {NULL, NULL};
    CHECK_OK(attn_graph_create(attn_model_params(model), &graphs[0]));
    CHECK_OK(attn_graph_create(attn_model_params(copy), &graphs[1]));
    attn_model *models[2] = {model, copy};
    sources s;
    make_sources(&s, 17);
    const attn_decode_options cases[2] = {options_for(1, 1, 1), options_for(4, 3, 1)};
    for (int k = 0; k < 2; k++) {
        attn_decode_result *alone = NULL, *one = NULL, *two = NULL;
        CHECK_OK(
            attn_decode(model, graphs[0], SENTENCES, SRC_MAX, s.src, s.lengths, &cases[k], &alone));
        CHECK_OK(attn_decode_ensemble(models, graphs, 1, SENTENCES, SRC_MAX, s.src, s.lengths,
                                      &cases[k], &one));
        CHECK_OK(attn_decode_ensemble(models, graphs, 2, SENTENCES, SRC_MAX, s.src, s.lengths,
                                      &cases[k], &two));
        CHECK(same_results(alone, one), "%s beam %lld: an ensemble of one is the model", what,
              (long long)cases[k].beam_size);
        CHECK(same_results(alone, two), "%s beam %lld: two copies are the model, bit for bit", what,
              (long long)cases[k].beam_size);
        attn_decode_result_destroy(alone);
        attn_decode_result_destroy(one);
        attn_decode_result_destroy(two);
    }
    attn_graph_destroy(graphs[0]);
    attn_graph_destroy(graphs[1]);
    attn_model_destroy(model);
    attn_model_destroy(copy);
}

static void test_copies_are_the_model(void)
{
    attn_model_config t = decode_transformer_config(0),
                      r = decode_rnn_config(ATTN_RNN_BAHDANAU, TGT_VOCAB);
    check_copies_are_the_model(&t, 3, 4.0f, "transformer");
    check_copies_are_the_model(&r, 9, 3.0f, "rnn");
}

/* Each model stepped on its own over one sentence: log_p [vocab] of the next token under the
 * ensemble (the mean of the two log-softmaxes, renormalised, in double) after feeding ids
 * [steps] (<s> first), and the first model's maps at each step. */
typedef struct by_hand {
    attn_model *models[2];
    attn_graph *graphs[2];
    attn_step_decoder *decoders[2];
    int64_t maps;
    /* The sum over steps of the largest |logit| (of the two models' mean): a batch runs the
     * Transformer's rows through GEMM, one row through its small-row kernel, whose rounding
     * differs by a small multiple of this times the float epsilon. */
    double logit_scale;
} by_hand;

static void by_hand_start(by_hand *h, const int32_t *src, int32_t length)
{
    for (int m = 0; m < 2; m++) {
        attn_var *memory = NULL;
        attn_graph_reset(h->graphs[m]);
        attn_graph_set_recording(h->graphs[m], 0);
        attn_graph_set_training(h->graphs[m], 0);
        CHECK_OK(attn_model_encode(h->models[m], h->graphs[m], 1, length, src, &length, &memory));
        CHECK_OK(attn_model_step_start(h->models[m], h->graphs[m], memory, &length, 1, MAX_LEN,
                                       &h->decoders[m]));
    }
    h->maps = attn_model_step_cross_maps(h->decoders[0]);
    h->logit_scale = 0;
}

static void by_hand_step(by_hand *h, int32_t id, double *log_p, float *cross)
{
    double mean[TGT_VOCAB] = {0};
    for (int m = 0; m < 2; m++) {
        float logits[TGT_VOCAB];
        CHECK_OK(attn_model_step(h->decoders[m], &id, logits, m == 0 ? cross : NULL));
        double max = logits[0], sum = 0;
        for (int v = 1; v < TGT_VOCAB; v++)
            max = fmax(max, logits[v]);
        double largest = 0;
        for (int v = 0; v < TGT_VOCAB; v++) {
            sum += exp(logits[v] - max);
            largest = fmax(largest, fabs((double)logits[v]));
        }
        h->logit_scale += 0.5 * largest;
        for (int v = 0; v < TGT_VOCAB; v++)
            mean[v] += 0.5 * (logits[v] - max - log(sum));
    }
    double z = 0;
    for (int v = 0; v < TGT_VOCAB; v++)
        z += exp(mean[v]);
    for (int v = 0; v < TGT_VOCAB; v++)
        log_p[v] = mean[v] - log(z);
}

static void by_hand_end(by_hand *h)
{
    attn_model_step_destroy(h->decoders[0]);
    attn_model_step_destroy(h->decoders[1]);
    h->decoders[0] = h->decoders[1] = NULL;
}

static void test_transformer_with_rnn(void)
{
    attn_model_config t = decode_transformer_config(0),
                      r = decode_rnn_config(ATTN_RNN_BAHDANAU, TGT_VOCAB);
    by_hand h;
    memset(&h, 0, sizeof h);
    h.models[0] = scaled_model(&t, 5, 4.0f);
    h.models[1] = scaled_model(&r, 6, 3.0f);
    CHECK_OK(attn_graph_create(attn_model_params(h.models[0]), &h.graphs[0]));
    CHECK_OK(attn_graph_create(attn_model_params(h.models[1]), &h.graphs[1]));
    sources s;
    make_sources(&s, 29);
    const attn_decode_options greedy = options_for(1, 1, 0), beam = options_for(5, 3, 1);
    attn_decode_result *g = NULL, *b = NULL;
    CHECK_OK(attn_decode_ensemble(h.models, h.graphs, 2, SENTENCES, SRC_MAX, s.src, s.lengths,
                                  &greedy, &g));
    CHECK_OK(attn_decode_ensemble(h.models, h.graphs, 2, SENTENCES, SRC_MAX, s.src, s.lengths,
                                  &beam, &b));
    int greedy_same = 0, finished = 0, sorted = 1;
    double worst_log_prob = 0, worst_map = 0;
    float cross[16 * SRC_MAX];
    for (int i = 0; g != NULL && b != NULL && i < SENTENCES; i++) {
        const int32_t *src = s.src + i * SRC_MAX;
        /* Greedy: the arg-max of </s> and <unk>..V-1 under the ensemble, step by step. */
        const int64_t max_length = attn_decode_max_output_length(&greedy, s.lengths[i], MAX_LEN);
        by_hand_start(&h, src, s.lengths[i]);
        int32_t tokens[MAX_LEN], id = ATTN_BOS_ID;
        int64_t length = 0;
        double log_prob = 0;
        for (;;) {
            double log_p[TGT_VOCAB];
            by_hand_step(&h, id, log_p, cross);
            int32_t best = ATTN_EOS_ID;
            for (int v = ATTN_EOS_ID + 1; v < TGT_VOCAB; v++)
                best = log_p[v] > log_p[best] ? v : best;
            log_prob += log_p[best];
            if (best == ATTN_EOS_ID)
                break;
            tokens[length++] = id = best;
            if (length == max_length)
                break;
        }
        by_hand_end(&h);
        const attn_hypothesis *hg = &g->sentences[i].hypotheses[0];
        const int same = hg->length == length &&
                         memcmp(hg->tokens, tokens, (size_t)length * sizeof *tokens) == 0 &&
                         fabs(hg->log_prob - log_prob) < 4e-6 * h.logit_scale + 1e-6;
        greedy_same += same;
        /* Beam: teacher forcing both models gives each hypothesis's log P and maps. */
        const attn_decode_sentence *sentence = &b->sentences[i];
        for (int64_t j = 0; j < sentence->count; j++) {
            const attn_hypothesis *hb = &sentence->hypotheses[j];
            by_hand_start(&h, src, s.lengths[i]);
            double total = 0;
            id = ATTN_BOS_ID;
            for (int64_t step = 0; step < hb->steps; step++) {
                double log_p[TGT_VOCAB];
                by_hand_step(&h, id, log_p, cross);
                id = step < hb->length ? hb->tokens[step] : ATTN_EOS_ID;
                total += log_p[id];
                for (int64_t k = 0; k < h.maps * s.lengths[i]; k++)
                    worst_map =
                        fmax(worst_map, fabs((double)cross[k] -
                                             (double)hb->cross[step * h.maps * s.lengths[i] + k]));
            }
            by_hand_end(&h);
            /* in units of the rounding the logits allow */
            worst_log_prob =
                fmax(worst_log_prob, fabs(total - hb->log_prob) / (4e-6 * h.logit_scale + 1e-6));
            finished += hb->finished;
            if (j > 0)
                sorted &= sentence->hypotheses[j - 1].score >= hb->score;
        }
        CHECK(sentence->count == 3, "sentence %d: 3 hypotheses", i);
    }
    CHECK(g != NULL && g->cross_maps == 0, "no maps asked, none given");
    CHECK(b != NULL && b->cross_maps == 2 * 2 && b->cross_layers == 2 && b->cross_heads == 2,
          "the maps have the first model's layout (2 layers x 2 heads)");
    CHECK(greedy_same == SENTENCES, "greedy is the arg-max of the ensemble (%d of %d)", greedy_same,
          SENTENCES);
    CHECK(worst_log_prob < 1.0,
          "beam log P equals teacher forcing the ensemble (worst %g x 4e-6 of the logits' size)",
          worst_log_prob);
    CHECK(worst_map < 1e-4, "beam maps are the first model's (worst %g)", worst_map);
    CHECK(finished > 0 && sorted, "finished hypotheses (%d), best first", finished);
    attn_decode_result_destroy(g);
    attn_decode_result_destroy(b);
    for (int m = 0; m < 2; m++) {
        attn_graph_destroy(h.graphs[m]);
        attn_model_destroy(h.models[m]);
    }
}

static void test_refused(void)
{
    attn_model_config t = decode_transformer_config(0),
                      r = decode_rnn_config(ATTN_RNN_BAHDANAU, TGT_VOCAB + 2);
    attn_model *models[2] = {scaled_model(&t, 1, 1.0f), scaled_model(&r, 2, 1.0f)};
    attn_graph *graphs[2] = {NULL, NULL};
    CHECK_OK(attn_graph_create(attn_model_params(models[0]), &graphs[0]));
    CHECK_OK(attn_graph_create(attn_model_params(models[1]), &graphs[1]));
    sources s;
    make_sources(&s, 3);
    attn_decode_options o = options_for(2, 1, 0);
    attn_decode_result *out = NULL;
    CHECK_FAILS(
        attn_decode_ensemble(models, graphs, 2, SENTENCES, SRC_MAX, s.src, s.lengths, &o, &out),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "models[1] has a target vocabulary of 15, models[0] of 13") !=
              NULL,
          "message names the vocabularies: %s", attn_last_error());
    attn_graph *shared[2] = {graphs[0], graphs[0]};
    attn_model *same[2] = {models[0], models[0]};
    CHECK_FAILS(
        attn_decode_ensemble(same, shared, 2, SENTENCES, SRC_MAX, s.src, s.lengths, &o, &out),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(
        attn_decode_ensemble(models, graphs, 0, SENTENCES, SRC_MAX, s.src, s.lengths, &o, &out),
        ATTN_ERR_INVALID_ARGUMENT);
    CHECK(out == NULL, "no result after a failure");
    for (int m = 0; m < 2; m++) {
        attn_graph_destroy(graphs[m]);
        attn_model_destroy(models[m]);
    }
}

int main(void)
{
    RUN_TEST(test_copies_are_the_model);
    RUN_TEST(test_transformer_with_rnn);
    RUN_TEST(test_refused);
    return test_summary();
}
