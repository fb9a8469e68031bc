/* attn_decode on real models (Transformer and RNN encoder-decoders, weights scaled up so the
 * distributions are peaked and the search has real choices): every returned hypothesis re-scores
 * by teacher forcing to its log-prob and its alignment, beam 1 is greedy decoding done by hand
 * with the full decoder, a wider beam never finds a lower log P than greedy, a batch gives what
 * each sentence gives alone, and bad input fails with a message. */
#include "decode_testing.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SENTENCES = 12, SRC_MAX = 9 };

typedef struct sources {
    int32_t src[SENTENCES * SRC_MAX];
    int32_t lengths[SENTENCES];
} sources;

static void make_sources(sources *s, uint64_t seed, int64_t src_vocab)
{
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    memset(s, 0, sizeof *s);
    for (int i = 0; i < SENTENCES; i++) {
        s->lengths[i] = 1 + (int32_t)attn_rng_below(&rng, SRC_MAX);
        for (int j = 0; j < s->lengths[i]; j++)
            s->src[i * SRC_MAX + j] =
                ATTN_NUM_SPECIAL_IDS +
                (int32_t)attn_rng_below(&rng, (uint64_t)src_vocab - ATTN_NUM_SPECIAL_IDS);
    }
}

static attn_decode_options options_for(int64_t beam, int64_t nbest, double alpha, int align)
{
    attn_decode_options o = attn_decode_default_options();
    o.beam_size = beam;
    o.nbest = nbest;
    o.length_penalty = alpha;
    o.max_len_ratio = 1.0;
    o.max_len_offset = 6;
    o.alignments = align;
    return o;
}

/* Teacher forcing with the whole decoder (attn_model_decode on one sentence): log P of the
 * hypothesis's tokens (and </s> when finished), in double from the float logits. *scale gets
 * the sum over steps of the largest |logit|: float rounding of the two computations differs
 * by a small multiple of it times the float epsilon. */
static double teacher_forced_log_prob(attn_model *model, attn_graph *graph, const int32_t *src,
                                      int32_t src_length, const attn_hypothesis *h, double *scale)
{
    int32_t input[MAX_LEN + 1];
    input[0] = ATTN_BOS_ID;
    memcpy(input + 1, h->tokens, (size_t)h->length * sizeof *input);
    const int64_t steps = h->steps;
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    attn_var *memory = NULL, *logits = NULL;
    CHECK_OK(attn_model_encode(model, graph, 1, src_length, src, &src_length, &memory));
    CHECK_OK(attn_model_decode(model, graph, memory, &src_length, 1, steps, input, steps, NULL,
                               &logits));
    if (logits == NULL)
        return NAN;
    const int64_t vocab = attn_model_get_config(model)->tgt_vocab;
    double total = 0;
    *scale = 0;
    for (int64_t t = 0; t < steps; t++) {
        const float *row = logits->value.data + t * vocab;
        double max = row[0], sum = 0, largest = 0;
        for (int v = 1; v < vocab; v++)
            max = row[v] > max ? row[v] : max;
        for (int v = 0; v < vocab; v++)
            largest = fmax(largest, fabs((double)row[v]));
        *scale += largest;
        for (int v = 0; v < vocab; v++)
            sum += exp(row[v] - max);
        int32_t next = t < h->length ? h->tokens[t] : ATTN_EOS_ID;
        total += row[next] - max - log(sum);
    }
    return total;
}

/* The maps a fresh one-row step decoder gives for the hypothesis's tokens; worst difference
 * from the returned maps, and the worst |row sum - 1| over the source. */
static void teacher_forced_maps(attn_model *model, attn_graph *graph, const int32_t *src,
                                int32_t src_length, const attn_hypothesis *h, int64_t maps,
                                double *max_diff, double *max_sum_error)
{
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    attn_var *memory = NULL;
    attn_step_decoder *d = NULL;
    CHECK_OK(attn_model_encode(model, graph, 1, src_length, src, &src_length, &memory));
    CHECK_OK(attn_model_step_start(model, graph, memory, &src_length, 1, h->steps, &d));
    if (d == NULL)
        return;
    float logits[64], cross[8 * SRC_MAX];
    int32_t input = ATTN_BOS_ID;
    for (int64_t t = 0; t < h->steps; t++) {
        CHECK_OK(attn_model_step(d, &input, logits, cross));
        for (int64_t k = 0; k < maps; k++) {
            double sum = 0;
            for (int64_t j = 0; j < src_length; j++) {
                float got = h->cross[(t * maps + k) * src_length + j];
                double diff = fabs((double)got - (double)cross[k * src_length + j]);
                *max_diff = diff > *max_diff ? diff : *max_diff;
                sum += got;
            }
            double error = fabs(sum - 1.0);
            *max_sum_error = error > *max_sum_error ? error : *max_sum_error;
        }
        input = t < h->length ? h->tokens[t] : ATTN_EOS_ID;
    }
    attn_model_step_destroy(d);
}

/* expect_cut: the case must include hypotheses cut at the maximum length (random weights). */
static void check_rescoring(attn_model *model, const char *what, int expect_cut)
{
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(model), &graph));
    sources s;
    make_sources(&s, 7, attn_model_get_config(model)->src_vocab);
    attn_decode_options o = options_for(4, 3, 0.6, 1);
    attn_decode_result *result = NULL;
    CHECK_OK(attn_decode(model, graph, SENTENCES, SRC_MAX, s.src, s.lengths, &o, &result));
    if (result == NULL) {
        attn_graph_destroy(graph);
        return;
    }
    CHECK(result->size == SENTENCES && result->cross_maps == result->cross_layers *
                                                                result->cross_heads,
          "%s: result layout", what);
    double worst_log_prob = 0, worst_map = 0, worst_sum = 0, scale = 0;
    int counts = 1, scores = 1, finished = 0, cut = 0, sorted = 1;
    for (int i = 0; i < SENTENCES; i++) {
        const attn_decode_sentence *sentence = &result->sentences[i];
        const int32_t *src = s.src + i * SRC_MAX;
        counts &= sentence->count == 3 && sentence->src_length == s.lengths[i];
        for (int64_t j = 0; j < sentence->count; j++) {
            const attn_hypothesis *h = &sentence->hypotheses[j];
            double tf = teacher_forced_log_prob(model, graph, src, s.lengths[i], h, &scale);
            /* in units of the rounding the logits allow */
            double diff = fabs(tf - h->log_prob) / (4e-6 * scale + 1e-6);
            worst_log_prob = diff > worst_log_prob ? diff : worst_log_prob;
            teacher_forced_maps(model, graph, src, s.lengths[i], h, result->cross_maps,
                                &worst_map, &worst_sum);
            scores &= fabs(h->score - h->log_prob / attn_decode_length_penalty(h->length, 0.6)) <
                      1e-12;
            finished += h->finished;
            cut += !h->finished;
            if (j > 0)
                sorted &= sentence->hypotheses[j - 1].score >= h->score;
            for (int64_t t = 0; t < h->length; t++)
                counts &= h->tokens[t] >= ATTN_EOS_ID + 1 &&
                          h->tokens[t] < attn_model_get_config(model)->tgt_vocab;
        }
    }
    CHECK(counts, "%s: 3 hypotheses per sentence, tokens in range, no specials but <unk>", what);
    CHECK(scores && sorted, "%s: score = log P / lp(length), best first", what);
    CHECK(worst_log_prob < 1.0, "%s: log P equals teacher forcing (worst diff %g x 4e-6 of the "
                                "logits' size)", what, worst_log_prob);
    /* The search steps every row at once, so its products are GEMMs; the one-row decoder's
     * are dot products (step_linear): the maps differ by those products' rounding, which the
     * softmax amplifies (measured: 0 on portable, 2.5e-5 on AVX2 and AVX-512, 1.7e-4 on NEON's
     * 4 lanes). A map reordered with the wrong beam differs by the size of the weights. */
    CHECK(worst_map < 1e-3, "%s: maps equal teacher forcing (worst diff %g)", what, worst_map);
    CHECK(worst_sum < 1e-5 || result->cross_maps == 0,
          "%s: each map sums to 1 over the source (worst %g)", what, worst_sum);
    CHECK(finished > 0 && (cut > 0 || !expect_cut), "%s: the case has finished (%d) and cut (%d) hypotheses",
          what, finished, cut);
    attn_decode_result_destroy(result);
    attn_graph_destroy(graph);
}

/* Greedy with the whole decoder re-run over the prefix: the arg-max of <unk>..V-1 and </s>. */
static int64_t greedy_by_hand(attn_model *model, attn_graph *graph, const int32_t *src,
                              int32_t src_length, int64_t max_length, int32_t *out,
                              double *log_prob)
{
    int32_t input[MAX_LEN + 1] = {ATTN_BOS_ID};
    int64_t length = 0;
    *log_prob = 0;
    attn_graph_reset(graph);
    attn_graph_set_recording(graph, 0);
    attn_graph_set_training(graph, 0);
    attn_var *memory = NULL;
    const int64_t vocab = attn_model_get_config(model)->tgt_vocab;
    CHECK_OK(attn_model_encode(model, graph, 1, src_length, src, &src_length, &memory));
    for (;;) {
        attn_var *logits = NULL;
        CHECK_OK(attn_model_decode(model, graph, memory, &src_length, 1, length + 1, input,
                                   length + 1, NULL, &logits));
        if (logits == NULL)
            return -1;
        const float *row = logits->value.data + length * vocab;
        int32_t best = ATTN_EOS_ID;
        double max = row[0], sum = 0;
        for (int v = 0; v < vocab; v++) {
            max = row[v] > max ? row[v] : max;
            if (v > ATTN_EOS_ID && row[v] > row[best])
                best = v;
        }
        for (int v = 0; v < vocab; v++)
            sum += exp(row[v] - max);
        *log_prob += row[best] - max - log(sum);
        if (best == ATTN_EOS_ID)
            return length;
        out[length++] = best;
        input[length] = best;
        if (length == max_length)
            return length;
    }
}

/* Beam 1 against greedy by hand; with compare_beam, beam 5 against greedy too (a property of
 * trained models, not a theorem: on adversarial weights a beam can lose greedy's path). */
static void check_greedy_and_beam(attn_model *model, const char *what, int compare_beam)
{
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(model), &graph));
    sources s;
    make_sources(&s, 11, attn_model_get_config(model)->src_vocab);
    attn_decode_options greedy = options_for(1, 1, 0.0, 0), beam = options_for(5, 1, 0.0, 0);
    attn_decode_result *g = NULL, *b = NULL;
    CHECK_OK(attn_decode(model, graph, SENTENCES, SRC_MAX, s.src, s.lengths, &greedy, &g));
    CHECK_OK(attn_decode(model, graph, SENTENCES, SRC_MAX, s.src, s.lengths, &beam, &b));
    int same_as_by_hand = 0, lower = 0, higher = 0;
    for (int i = 0; g != NULL && b != NULL && i < SENTENCES; i++) {
        const attn_hypothesis *hg = &g->sentences[i].hypotheses[0];
        const attn_hypothesis *hb = &b->sentences[i].hypotheses[0];
        int32_t tokens[MAX_LEN];
        double log_prob;
        int64_t max_length = attn_decode_max_output_length(&greedy, s.lengths[i], MAX_LEN);
        int64_t length = greedy_by_hand(model, graph, s.src + i * SRC_MAX, s.lengths[i],
                                        max_length, tokens, &log_prob);
        same_as_by_hand += length == hg->length &&
                           memcmp(tokens, hg->tokens, (size_t)length * sizeof *tokens) == 0 &&
                           fabs(log_prob - hg->log_prob) < 1e-4;
        lower += hb->log_prob < hg->log_prob - 1e-6;
        higher += hb->log_prob > hg->log_prob + 1e-6;
    }
    CHECK(same_as_by_hand == SENTENCES, "%s: beam 1 is greedy decoding (%d of %d)", what,
          same_as_by_hand, SENTENCES);
    if (compare_beam) {
        CHECK(lower == 0, "%s: beam 5 never finds a lower log P than greedy (%d lower)", what,
              lower);
        CHECK(higher > 0, "%s: beam 5 finds a higher log P than greedy somewhere (%d)", what,
              higher);
    }
    attn_decode_result_destroy(g);
    attn_decode_result_destroy(b);
    attn_graph_destroy(graph);
}

static int same_hypothesis(const attn_hypothesis *x, const attn_hypothesis *y, int64_t floats)
{
    return x->length == y->length && x->finished == y->finished && x->steps == y->steps &&
           x->log_prob == y->log_prob && x->score == y->score &&
           memcmp(x->tokens, y->tokens, (size_t)x->length * sizeof *x->tokens) == 0 &&
           memcmp(x->cross, y->cross, (size_t)floats * sizeof *x->cross) == 0;
}

/* The same tokens, and values within tol (tol 0: the same bits). */
static int close_hypothesis(const attn_hypothesis *x, const attn_hypothesis *y, int64_t floats,
                            double tol)
{
    if (tol == 0)
        return same_hypothesis(x, y, floats);
    int ok = x->length == y->length && x->finished == y->finished && x->steps == y->steps &&
             memcmp(x->tokens, y->tokens, (size_t)x->length * sizeof *x->tokens) == 0 &&
             fabs(x->log_prob - y->log_prob) <= tol * (1 + fabs(y->log_prob));
    for (int64_t i = 0; ok && i < floats; i++)
        ok = fabs((double)x->cross[i] - (double)y->cross[i]) <= tol;
    return ok;
}

/* Each sentence of a batch against decoding it alone: bit for bit when the model's step
 * decoder computes a row the same way whatever the row count (bits != 0: the rnn models);
 * the Transformer's step decoder takes a small-row kernel up to 8 rows and GEMM above, which
 * agree to float rounding only, so there the tokens must agree and the numbers closely. A
 * second run of the batch must give the same bits either way. */
static void check_batch_equals_one_by_one(attn_model *model, const char *what, int bits)
{
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(model), &graph));
    sources s;
    make_sources(&s, 23, attn_model_get_config(model)->src_vocab);
    attn_decode_options o = options_for(3, 2, 1.0, 1);
    attn_decode_result *together = NULL, *again = NULL;
    CHECK_OK(attn_decode(model, graph, SENTENCES, SRC_MAX, s.src, s.lengths, &o, &together));
    CHECK_OK(attn_decode(model, graph, SENTENCES, SRC_MAX, s.src, s.lengths, &o, &again));
    int same = 1, repeat = 1;
    for (int i = 0; together != NULL && again != NULL && i < SENTENCES; i++) {
        attn_decode_result *alone = NULL;
        CHECK_OK(attn_decode(model, graph, 1, s.lengths[i], s.src + i * SRC_MAX, &s.lengths[i],
                             &o, &alone));
        if (alone == NULL)
            continue;
        const attn_decode_sentence *x = &together->sentences[i], *y = &alone->sentences[0],
                                   *z = &again->sentences[i];
        same &= x->count == y->count;
        repeat &= x->count == z->count;
        for (int64_t j = 0; j < x->count && j < y->count && j < z->count; j++) {
            int64_t floats = x->hypotheses[j].steps * together->cross_maps * s.lengths[i];
            same &= close_hypothesis(&x->hypotheses[j], &y->hypotheses[j], floats,
                                     bits ? 0.0 : 1e-4);
            repeat &= same_hypothesis(&x->hypotheses[j], &z->hypotheses[j], floats);
        }
        attn_decode_result_destroy(alone);
    }
    CHECK(repeat, "%s: a second run gives identical bits", what);
    CHECK(same, "%s: each sentence of the batch equals decoding it alone%s", what,
          bits ? ", bit for bit" : " (same tokens, numbers to 1e-4)");
    attn_decode_result_destroy(together);
    attn_decode_result_destroy(again);
    attn_graph_destroy(graph);
}

static void test_transformer_post_norm(void)
{
    attn_model_config c = decode_transformer_config(0);
    attn_model *m = scaled_model(&c, 3, 4.0f);
    check_rescoring(m, "transformer post-norm", 1);
    check_greedy_and_beam(m, "transformer post-norm", 0);
    check_batch_equals_one_by_one(m, "transformer post-norm", 0);
    attn_model_destroy(m);
}

static void test_transformer_pre_norm(void)
{
    attn_model_config c = decode_transformer_config(1);
    attn_model *m = scaled_model(&c, 5, 4.0f);
    check_rescoring(m, "transformer pre-norm", 1);
    check_greedy_and_beam(m, "transformer pre-norm", 0);
    attn_model_destroy(m);
}

static void test_rnn_models(void)
{
    const attn_rnn_attention kinds[] = {ATTN_RNN_BAHDANAU, ATTN_RNN_LUONG_GENERAL,
                                        ATTN_RNN_NO_ATTENTION};
    const char *names[] = {"rnn bahdanau", "rnn luong-general", "rnn none"};
    for (int k = 0; k < 3; k++) {
        attn_model_config c = decode_rnn_config(kinds[k], TGT_VOCAB);
        attn_model *m = scaled_model(&c, 9 + (uint64_t)k, 3.0f);
        if (kinds[k] != ATTN_RNN_NO_ATTENTION)
            check_rescoring(m, names[k], 1);
        check_greedy_and_beam(m, names[k], 0);
        if (k == 0)
            check_batch_equals_one_by_one(m, names[k], 1);
        attn_model_destroy(m);
    }
}

/* ---- trained models ------------------------------------------------------------------------ */

/* The rnn models through the trainer: the model's own loss; token accuracy is not needed. */
static attn_params *rnn_params(void *self) { return attn_model_params(self); }

static attn_status rnn_forward_loss(void *self, attn_graph *graph, const attn_model_batch *batch,
                                    int smoothed, attn_var **loss, int64_t *tokens,
                                    int64_t *correct)
{
    (void)smoothed;
    *tokens = 0;
    for (int64_t b = 0; b < batch->size; b++)
        *tokens += batch->tgt_lengths[b] - 1;
    *correct = 0;
    return attn_model_forward_loss(self, graph, batch, loss);
}

static attn_status rnn_config_json(void *self, char **json)
{
    return attn_model_config_to_json(attn_model_get_config(self), json);
}

/* A model trained briefly to reverse strings of 2..8 letters a..i: far from perfect, so the
 * search has real choices to make, but with the peaked, structured distributions of a trained
 * model. */
static attn_model *trained_model(attn_model_arch arch, int64_t steps)
{
    enum { PAIRS = 2000, LONGEST = 8 };
    static char sources_text[PAIRS][LONGEST + 1], targets_text[PAIRS][LONGEST + 1];
    static const char *sources_ptr[PAIRS], *targets_ptr[PAIRS];
    attn_rng rng;
    attn_rng_seed(&rng, 42);
    for (int i = 0; i < PAIRS; i++) {
        int len = 2 + (int)attn_rng_below(&rng, LONGEST - 1);
        for (int j = 0; j < len; j++)
            sources_text[i][j] = (char)('a' + attn_rng_below(&rng, 9));
        for (int j = 0; j < len; j++)
            targets_text[i][j] = sources_text[i][len - 1 - j];
        sources_text[i][len] = targets_text[i][len] = '\0';
        sources_ptr[i] = sources_text[i];
        targets_ptr[i] = targets_text[i];
    }
    attn_corpus *corpus = NULL;
    attn_tokenizer *src_tok = NULL, *tgt_tok = NULL;
    attn_tokenizer_config chars;
    CHECK_OK(attn_tokenizer_config_parse("char", &chars));
    CHECK_OK(attn_corpus_from_strings(sources_ptr, targets_ptr, PAIRS, &corpus));
    CHECK_OK(attn_tokenizer_train(&chars, sources_ptr, PAIRS, &src_tok));
    CHECK_OK(attn_tokenizer_train(&chars, targets_ptr, PAIRS, &tgt_tok));
    CHECK_OK(attn_corpus_encode(corpus, src_tok, tgt_tok));
    attn_model_config c = arch == ATTN_ARCH_RNN
                              ? decode_rnn_config(ATTN_RNN_LUONG_GENERAL, TGT_VOCAB)
                              : decode_transformer_config(0);
    if (arch == ATTN_ARCH_RNN) {
        c.hidden = 32;
        c.embedding_dim = 16;
        c.attention_dim = 16;
    } else {
        c.d_model = 32;
        c.ffn_dim = 64;
        c.decoder_layers = 1;
    }
    c.src_vocab = attn_vocab_size(attn_tokenizer_vocab(src_tok));
    c.tgt_vocab = attn_vocab_size(attn_tokenizer_vocab(tgt_tok));
    c.label_smoothing = 0.0;
    attn_model *model = scaled_model(&c, 1, 1.0f);
    attn_trainable trainable = {model, rnn_params, rnn_forward_loss, rnn_config_json};
    if (arch != ATTN_ARCH_RNN)
        CHECK_OK(attn_trainable_from_model(model, &trainable));
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 600;
    o.schedule.kind = ATTN_LR_CONSTANT;
    o.schedule.lr = 3e-3;
    o.schedule.warmup_steps = 20;
    o.max_epochs = 0;
    o.max_steps = steps;
    attn_trainer *trainer = NULL;
    CHECK_OK(attn_trainer_create(&trainable, corpus, NULL, &o, &trainer));
    CHECK_OK(attn_trainer_run(trainer));
    attn_trainer_destroy(trainer);
    attn_corpus_destroy(corpus);
    attn_tokenizer_destroy(src_tok);
    attn_tokenizer_destroy(tgt_tok);
    return model;
}

static void test_trained_models(void)
{
    attn_model *transformer = trained_model(ATTN_ARCH_TRANSFORMER, 60);
    check_greedy_and_beam(transformer, "trained transformer", 1);
    check_rescoring(transformer, "trained transformer", 0);
    attn_model_destroy(transformer);
    attn_model *rnn = trained_model(ATTN_ARCH_RNN, 60);
    check_greedy_and_beam(rnn, "trained rnn", 1);
    check_batch_equals_one_by_one(rnn, "trained rnn", 1);
    attn_model_destroy(rnn);
}

static void test_bad_input(void)
{
    attn_model_config c = decode_transformer_config(0);
    attn_model *m = scaled_model(&c, 3, 1.0f);
    attn_graph *graph = NULL, *other = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &graph));
    CHECK_OK(attn_graph_create(NULL, &other));
    int32_t src[4] = {4, 5, 6, 0};
    int32_t lengths[2] = {3, 2};
    attn_decode_options o = options_for(2, 1, 0.6, 1);
    attn_decode_result *r = NULL;
    CHECK_FAILS(attn_decode(NULL, graph, 2, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode(m, NULL, 2, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode(m, graph, 2, 2, src, lengths, &o, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode(m, graph, 2, 2, src, lengths, NULL, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode(m, graph, 2, 2, NULL, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode(m, graph, 2, 2, src, NULL, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode(m, other, 2, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode(m, graph, -1, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    /* lengths[0] = 3 is above src_len 2 */
    CHECK_FAILS(attn_decode(m, graph, 2, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "src_lengths[0]") != NULL, "names the length: %s",
          attn_last_error());
    lengths[0] = 0;
    CHECK_FAILS(attn_decode(m, graph, 2, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    lengths[0] = 2;
    src[1] = SRC_VOCAB;
    CHECK_FAILS(attn_decode(m, graph, 2, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "src[0, 1]") != NULL, "names the token: %s",
          attn_last_error());
    src[1] = 5;
    o.nbest = 3;
    CHECK_FAILS(attn_decode(m, graph, 2, 2, src, lengths, &o, &r), ATTN_ERR_INVALID_ARGUMENT);
    o.nbest = 1;
    CHECK(r == NULL, "no result after failures");
    CHECK_OK(attn_decode(m, graph, 0, 2, NULL, NULL, &o, &r));
    CHECK(r != NULL && r->size == 0, "an empty batch gives an empty result");
    attn_decode_result_destroy(r);
    r = NULL;
    CHECK_OK(attn_decode(m, graph, 2, 2, src, lengths, &o, &r));
    float out[MAX_LEN * 2];
    if (r != NULL) {
        const attn_hypothesis *h = &r->sentences[0].hypotheses[0];
        CHECK_OK(attn_decode_alignment(r, h, 2, -1, -1, out));
        CHECK_FAILS(attn_decode_alignment(r, h, 2, 2, -1, out), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(attn_decode_alignment(r, h, 2, 0, 2, out), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_FAILS(attn_decode_alignment(r, NULL, 2, 0, 0, out), ATTN_ERR_INVALID_ARGUMENT);
        /* the mean over heads is the mean of the heads */
        float h0[MAX_LEN * 2], h1[MAX_LEN * 2];
        CHECK_OK(attn_decode_alignment(r, h, 2, 1, 0, h0));
        CHECK_OK(attn_decode_alignment(r, h, 2, 1, 1, h1));
        double worst = 0;
        for (int64_t i = 0; i < h->steps * 2; i++)
            worst = fmax(worst, fabs(out[i] - 0.5 * ((double)h0[i] + h1[i])));
        CHECK(worst < 1e-6, "mean of heads (worst %g)", worst);
    }
    attn_decode_result_destroy(r);
    r = NULL;
    o.alignments = 0;
    CHECK_OK(attn_decode(m, graph, 2, 2, src, lengths, &o, &r));
    if (r != NULL)
        CHECK_FAILS(attn_decode_alignment(r, &r->sentences[0].hypotheses[0], 2, -1, -1, out),
                    ATTN_ERR_INVALID_ARGUMENT);
    attn_decode_result_destroy(r);

    attn_model_config lm = attn_model_config_default(ATTN_ARCH_TRANSFORMER_LM);
    lm.d_model = 8;
    lm.num_heads = 2;
    lm.ffn_dim = 8;
    lm.decoder_layers = 1;
    lm.tgt_vocab = 9;
    attn_model *language_model = scaled_model(&lm, 1, 1.0f);
    attn_graph *lm_graph = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(language_model), &lm_graph));
    r = NULL;
    CHECK_FAILS(attn_decode(language_model, lm_graph, 2, 2, src, lengths, &o, &r),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_graph_destroy(lm_graph);
    attn_model_destroy(language_model);
    attn_graph_destroy(graph);
    attn_graph_destroy(other);
    attn_model_destroy(m);
}

int main(void)
{
    /* Tiny models gain nothing from a second thread on a machine shared with other jobs. */
    attn_set_num_threads(1);
    RUN_TEST(test_bad_input);
    RUN_TEST(test_transformer_post_norm);
    RUN_TEST(test_transformer_pre_norm);
    RUN_TEST(test_rnn_models);
    RUN_TEST(test_trained_models);
    return test_summary();
}
