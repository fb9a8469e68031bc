/* Beam search against scripted models whose distributions are known: exact search equals brute
 * force (so the stopping rule never cuts a better hypothesis off), the case where a short
 * hypothesis finishes early and a longer one overtakes it, beam 1 is greedy, a batch gives what
 * each sentence gives alone, and the returned alignments and log-probs are exactly the steps
 * that produced the returned tokens. */
#include "harness.h"
#include "core/internal.h"
#include "decode/decode_internal.h"
#include "models/step_decoder.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { SCRIPT_MAX_STEPS = 16, SCRIPT_MAX_TOKENS = SCRIPT_MAX_STEPS + 1 };

typedef struct scripted scripted;
/* The next-token logits after prefix (which starts with <s>). */
typedef void (*script_fn)(const scripted *m, uint64_t seed, const int32_t *prefix, int64_t len,
                          float *logits);

/* A step decoder (models/step_decoder.h) whose logits and cross maps are scripted: base.size
 * rows, base.steps steps so far, base.cross_maps maps of base.src_len columns. */
struct scripted {
    attn_step_decoder base;
    script_fn logits_of;
    float eos_bias;      /* hash_logits: added to </s> (more or fewer early endings) */
    uint64_t *seed;      /* [max_rows] which sentence a row decodes */
    int32_t *src_length; /* [max_rows] */
    int32_t *prefix;     /* [max_rows, SCRIPT_MAX_TOKENS] */
    int64_t *len;        /* [max_rows] */
    uint64_t *seed_tmp;
    int32_t *src_length_tmp, *prefix_tmp;
    int64_t *len_tmp;
    int64_t most_rows; /* the most rows ever held */
};

static uint64_t prefix_hash(uint64_t seed, const int32_t *prefix, int64_t len)
{
    uint64_t h = seed;
    for (int64_t i = 0; i < len; i++)
        h = attn_index_hash(h, (uint64_t)prefix[i] + 1);
    return h;
}

static double hash_unit(uint64_t h, uint64_t i)
{
    return (double)(attn_index_hash(h, i) >> 40) / 16777216.0;
}

/* Logits in [-3, 3] (</s>: plus eos_bias) that depend on every token of the prefix. */
static void hash_logits(const scripted *m, uint64_t seed, const int32_t *prefix, int64_t len,
                        float *logits)
{
    uint64_t h = prefix_hash(seed, prefix, len);
    for (int64_t v = 0; v < m->base.vocab; v++)
        logits[v] = (float)(6.0 * hash_unit(h, (uint64_t)v) - 3.0);
    logits[ATTN_EOS_ID] += m->eos_bias;
}

/* Distributions where stopping at the first finished hypothesis is wrong once lengths are
 * penalised: </s> right away has p 0.5 (score log 0.5 / lp(0)); "4 5 </s>" has p 0.4 * 0.99 *
 * 0.99 (log P -0.936, lower) but a better score at alpha 1 (-0.802 against -0.832). */
static void short_or_long_logits(const scripted *m, uint64_t seed, const int32_t *prefix,
                                 int64_t len, float *logits)
{
    (void)seed;
    double p[8] = {1e-6, 1e-6, 0.9, 0.05, 0.025, 0.025, 0, 0};
    if (len == 1) {
        p[2] = 0.5, p[3] = 0.05, p[4] = 0.4, p[5] = 0.05;
    } else if (len == 2 && prefix[1] == 4) {
        p[2] = 0.004, p[3] = 0.003, p[4] = 0.003, p[5] = 0.99;
    } else if (len == 3 && prefix[1] == 4 && prefix[2] == 5) {
        p[2] = 0.99, p[3] = 0.004, p[4] = 0.003, p[5] = 0.003;
    }
    for (int64_t v = 0; v < m->base.vocab; v++)
        logits[v] = (float)log(p[v] > 0 ? p[v] : 1e-9);
}

static const attn_step_decoder_ops scripted_ops;

static void scripted_init(scripted *m, int64_t vocab, int64_t maps, int64_t src_len,
                          script_fn logits_of, int64_t max_rows, int64_t max_steps)
{
    memset(m, 0, sizeof *m);
    m->base =
        (attn_step_decoder){&scripted_ops, 0, max_rows, max_steps, 0, vocab, src_len, maps, 1};
    m->logits_of = logits_of;
    size_t r = (size_t)max_rows;
    m->seed = test_alloc(r * sizeof *m->seed);
    m->src_length = test_alloc(r * sizeof *m->src_length);
    m->prefix = test_alloc(r * SCRIPT_MAX_TOKENS * sizeof *m->prefix);
    m->len = test_alloc(r * sizeof *m->len);
    m->seed_tmp = test_alloc(r * sizeof *m->seed_tmp);
    m->src_length_tmp = test_alloc(r * sizeof *m->src_length_tmp);
    m->prefix_tmp = test_alloc(r * SCRIPT_MAX_TOKENS * sizeof *m->prefix_tmp);
    m->len_tmp = test_alloc(r * sizeof *m->len_tmp);
}

/* Row b decodes sentence seeds[b] with a source of src_lengths[b] tokens. */
static void scripted_start(scripted *m, int64_t size, const uint64_t *seeds,
                           const int32_t *src_lengths)
{
    m->base.size = m->most_rows = size;
    m->base.steps = 0;
    for (int64_t b = 0; b < size; b++) {
        m->seed[b] = seeds[b];
        m->src_length[b] = src_lengths[b];
        m->len[b] = 0;
    }
}

static void scripted_free(scripted *m)
{
    free(m->seed);
    free(m->src_length);
    free(m->prefix);
    free(m->len);
    free(m->seed_tmp);
    free(m->src_length_tmp);
    free(m->prefix_tmp);
    free(m->len_tmp);
}

/* Cross maps that depend on the whole prefix, normalised over the row's source. */
static void scripted_cross(const scripted *m, int64_t row, float *cross)
{
    uint64_t h = prefix_hash(m->seed[row] ^ 0x5eedULL, m->prefix + row * SCRIPT_MAX_TOKENS,
                             m->len[row]);
    for (int64_t k = 0; k < m->base.cross_maps; k++) {
        float *map = cross + k * m->base.src_len;
        double sum = 0;
        for (int64_t j = 0; j < m->base.src_len; j++) {
            map[j] = j < m->src_length[row]
                         ? (float)(0.1 + hash_unit(h, (uint64_t)(k * m->base.src_len + j)))
                         : 0.0f;
            sum += map[j];
        }
        for (int64_t j = 0; j < m->base.src_len; j++)
            map[j] = (float)(map[j] / sum);
    }
}

/* attn_model_step and attn_model_step_select check the arguments against base (rows within
 * max_rows and the current size, steps within max_steps) before they call these. */
static attn_status scripted_step(attn_step_decoder *decoder, const int32_t *ids, float *logits,
                                 float *cross)
{
    scripted *m = (scripted *)decoder;
    const int64_t vocab = m->base.vocab, map_floats = m->base.cross_maps * m->base.src_len;
    for (int64_t r = 0; r < m->base.size; r++) {
        int32_t *prefix = m->prefix + r * SCRIPT_MAX_TOKENS;
        prefix[m->len[r]++] = ids[r];
        m->logits_of(m, m->seed[r], prefix, m->len[r], logits + r * vocab);
        if (cross != NULL)
            scripted_cross(m, r, cross + r * map_floats);
    }
    return ATTN_OK;
}

static attn_status scripted_select(attn_step_decoder *decoder, const int64_t *rows,
                                   int64_t new_size)
{
    scripted *m = (scripted *)decoder;
    for (int64_t r = 0; r < new_size; r++) {
        int64_t from = rows[r];
        m->seed_tmp[r] = m->seed[from];
        m->src_length_tmp[r] = m->src_length[from];
        m->len_tmp[r] = m->len[from];
        memcpy(m->prefix_tmp + r * SCRIPT_MAX_TOKENS, m->prefix + from * SCRIPT_MAX_TOKENS,
               SCRIPT_MAX_TOKENS * sizeof *m->prefix);
    }
    memcpy(m->seed, m->seed_tmp, (size_t)new_size * sizeof *m->seed);
    memcpy(m->src_length, m->src_length_tmp, (size_t)new_size * sizeof *m->src_length);
    memcpy(m->len, m->len_tmp, (size_t)new_size * sizeof *m->len);
    memcpy(m->prefix, m->prefix_tmp, (size_t)new_size * SCRIPT_MAX_TOKENS * sizeof *m->prefix);
    if (new_size > m->most_rows)
        m->most_rows = new_size;
    return ATTN_OK;
}

/* The tests own their scripted models (scripted_free). */
static void scripted_keep(attn_step_decoder *decoder)
{
    (void)decoder;
}

static const attn_step_decoder_ops scripted_ops = {scripted_step, scripted_select, scripted_keep, NULL};

/* Runs the search over sentences (seeds, src_lengths, max_lengths) on a fresh scripted model. */
static attn_status search_sentences(scripted *m, int64_t size, const uint64_t *seeds,
                                    const int32_t *src_lengths, const int64_t *max_lengths,
                                    const attn_decode_options *options,
                                    attn_decode_result *result)
{
    scripted_start(m, size, seeds, src_lengths);
    memset(result, 0, sizeof *result);
    result->size = size;
    return attn_search_run(&m->base, size, src_lengths, max_lengths, options, result);
}

static attn_decode_options beam_options(int64_t beam, int64_t nbest, double alpha)
{
    attn_decode_options o = attn_decode_default_options();
    o.beam_size = beam;
    o.nbest = nbest;
    o.length_penalty = alpha;
    return o;
}

/* log p of each token of the prefix's continuation, by the same float kernel the search uses. */
static double step_log_prob(const scripted *m, uint64_t seed, const int32_t *prefix,
                            int64_t len, int32_t token)
{
    float logits[64];
    m->logits_of(m, seed, prefix, len, logits);
    attn_log_softmax_forward(1, m->base.vocab, logits, logits);
    return (double)logits[token];
}

/* ---- brute force ---------------------------------------------------------------------------- */

typedef struct enumerated {
    int32_t tokens[SCRIPT_MAX_TOKENS];
    int64_t length;
    int finished;
    double log_prob, score;
} enumerated;

typedef struct enumeration {
    enumerated *items;
    int64_t count, capacity;
} enumeration;

static void enumerate(const scripted *m, uint64_t seed, int32_t *prefix, int64_t len,
                      double log_prob, int64_t max_length, double alpha, enumeration *out)
{
    const int64_t length = len - 1; /* tokens after <s> */
    if (length == max_length) {
        enumerated *e = &out->items[out->count++];
        memcpy(e->tokens, prefix + 1, (size_t)length * sizeof *prefix);
        e->length = length;
        e->finished = 0;
        e->log_prob = log_prob;
        e->score = log_prob / attn_decode_length_penalty(length, alpha);
        return;
    }
    for (int32_t v = ATTN_EOS_ID; v < m->base.vocab; v++) {
        double lp = log_prob + step_log_prob(m, seed, prefix, len, v);
        if (v == ATTN_EOS_ID) {
            enumerated *e = &out->items[out->count++];
            memcpy(e->tokens, prefix + 1, (size_t)length * sizeof *prefix);
            e->length = length;
            e->finished = 1;
            e->log_prob = lp;
            e->score = lp / attn_decode_length_penalty(length, alpha);
            continue;
        }
        prefix[len] = v;
        enumerate(m, seed, prefix, len + 1, lp, max_length, alpha, out);
    }
}

static int by_score_desc(const void *a, const void *b)
{
    double x = ((const enumerated *)a)->score, y = ((const enumerated *)b)->score;
    return x > y ? -1 : x < y ? 1 : 0;
}

static int same_tokens(const attn_hypothesis *h, const int32_t *tokens, int64_t length)
{
    return h->length == length &&
           (length == 0 || memcmp(h->tokens, tokens, (size_t)length * sizeof *tokens) == 0);
}

/* With a beam wide enough to hold every prefix, beam search is exact: its n-best list must be
 * the brute-force n-best, whatever alpha, even though the stopping rule ends the search before
 * the maximum length whenever it can. */
static void test_exact_search_equals_brute_force(void)
{
    const int64_t vocab = 7, max_length = 4, nbest = 4;
    const int64_t non_eos = vocab - ATTN_EOS_ID - 1;
    int64_t beam = 1;
    for (int64_t i = 0; i < max_length - 1; i++)
        beam *= non_eos;
    beam *= non_eos + 1; /* every candidate of the widest step */
    const double alphas[] = {0.0, 0.6, 1.5, 4.0};
    enumeration all = {test_alloc(4096 * sizeof(enumerated)), 0, 4096};
    scripted m;
    scripted_init(&m, vocab, 1, 3, hash_logits, beam, max_length);
    int stopped_early = 0, mismatches = 0, cases = 0;
    for (uint64_t seed = 1; seed <= 12; seed++) {
        m.eos_bias = seed % 2 == 0 ? 0.0f : 3.0f;
        for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++) {
            attn_decode_options o = beam_options(beam, nbest, alphas[a]);
            int32_t src_length = 3;
            attn_decode_result result;
            attn_status status = search_sentences(&m, 1, &seed, &src_length, &max_length, &o,
                                                  &result);
            CHECK(status == ATTN_OK, "search: %s", attn_last_error());
            if (status != ATTN_OK)
                continue;
            cases++;
            stopped_early += m.base.steps < max_length;
            all.count = 0;
            int32_t prefix[SCRIPT_MAX_TOKENS] = {ATTN_BOS_ID};
            enumerate(&m, seed, prefix, 1, 0.0, max_length, alphas[a], &all);
            qsort(all.items, (size_t)all.count, sizeof *all.items, by_score_desc);
            const attn_decode_sentence *s = &result.sentences[0];
            CHECK(s->count == nbest, "n-best count %lld", (long long)s->count);
            for (int64_t j = 0; j < s->count && j < nbest; j++) {
                const attn_hypothesis *h = &s->hypotheses[j];
                const enumerated *e = &all.items[j];
                int ok = same_tokens(h, e->tokens, e->length) && h->finished == e->finished &&
                         fabs(h->score - e->score) <= 1e-12 &&
                         fabs(h->log_prob - e->log_prob) <= 1e-12;
                if (!ok && mismatches++ < 3)
                    CHECK(0, "seed %llu alpha %g rank %lld: length %lld score %.12g, brute "
                             "force length %lld score %.12g",
                          (unsigned long long)seed, alphas[a], (long long)j, (long long)h->length,
                          h->score, (long long)e->length, e->score);
            }
            CHECK(m.most_rows <= beam && m.base.steps <= max_length,
                  "the search stayed within its rows and steps");
            attn_decode_free_sentences(&result);
        }
    }
    CHECK(mismatches == 0, "%d of %d searches differ from brute force", mismatches, cases);
    CHECK(stopped_early > 0, "the stopping rule ended some searches early (%d of %d)",
          stopped_early, cases);
    scripted_free(&m);
    free(all.items);
}

static void test_short_early_hypothesis_does_not_win(void)
{
    scripted m;
    scripted_init(&m, 6, 1, 2, short_or_long_logits, 8, 10);
    uint64_t seed = 0;
    int32_t src_length = 2;
    int64_t max_length = 10;
    attn_decode_result result;

    /* Without a length penalty the immediate </s> is the best hypothesis... */
    attn_decode_options o = beam_options(2, 1, 0.0);
    CHECK_OK(search_sentences(&m, 1, &seed, &src_length, &max_length, &o, &result));
    const attn_hypothesis *h = &result.sentences[0].hypotheses[0];
    CHECK(h->length == 0 && h->finished, "alpha 0: the empty hypothesis (length %lld)",
          (long long)h->length);
    attn_decode_free_sentences(&result);

    /* ... with alpha 1 it finishes first, with the best score so far, and must lose. */
    o = beam_options(2, 1, 1.0);
    CHECK_OK(search_sentences(&m, 1, &seed, &src_length, &max_length, &o, &result));
    h = &result.sentences[0].hypotheses[0];
    const int32_t expected[] = {4, 5};
    CHECK(same_tokens(h, expected, 2) && h->finished, "alpha 1: '4 5 </s>' (length %lld)",
          (long long)h->length);
    double log_prob = log(0.4) + 2 * log(0.99);
    CHECK_CLOSE(h->log_prob, log_prob, 1e-5, 0);
    CHECK_CLOSE(h->score, log_prob / (7.0 / 6.0), 1e-5, 0);
    attn_decode_free_sentences(&result);

    /* n-best 2: both, the longer first. */
    o = beam_options(2, 2, 1.0);
    CHECK_OK(search_sentences(&m, 1, &seed, &src_length, &max_length, &o, &result));
    const attn_decode_sentence *s = &result.sentences[0];
    CHECK(s->count == 2 && s->hypotheses[0].length == 2 && s->hypotheses[1].length == 0,
          "n-best: '4 5' then the empty hypothesis");
    attn_decode_free_sentences(&result);
    scripted_free(&m);
}

/* Greedy by hand: the arg-max (not <pad> or <s>) until </s> or the maximum length. */
static void greedy_by_hand(const scripted *m, uint64_t seed, int64_t max_length,
                           enumerated *out)
{
    int32_t prefix[SCRIPT_MAX_TOKENS] = {ATTN_BOS_ID};
    int64_t len = 1;
    double log_prob = 0;
    memset(out, 0, sizeof *out);
    for (;;) {
        float logits[64];
        m->logits_of(m, seed, prefix, len, logits);
        attn_log_softmax_forward(1, m->base.vocab, logits, logits);
        int32_t best = ATTN_EOS_ID;
        for (int32_t v = ATTN_EOS_ID; v < m->base.vocab; v++)
            if (logits[v] > logits[best])
                best = v;
        log_prob += (double)logits[best];
        if (best == ATTN_EOS_ID) {
            out->finished = 1;
            break;
        }
        prefix[len++] = best;
        if (len - 1 == max_length)
            break;
    }
    out->length = len - 1;
    memcpy(out->tokens, prefix + 1, (size_t)out->length * sizeof *prefix);
    out->log_prob = log_prob;
}

static void test_beam_one_is_greedy(void)
{
    scripted m;
    scripted_init(&m, 5, 1, 4, hash_logits, 1, 12);
    int differ = 0, finished = 0, cut = 0;
    for (uint64_t seed = 100; seed < 160; seed++) {
        m.eos_bias = seed % 2 == 0 ? 0.0f : -4.0f;
        for (int a = 0; a < 2; a++) {
            attn_decode_options o = beam_options(1, 1, a == 0 ? 0.0 : 1.0);
            int32_t src_length = 4;
            int64_t max_length = 12;
            attn_decode_result result;
            if (search_sentences(&m, 1, &seed, &src_length, &max_length, &o, &result) !=
                ATTN_OK) {
                CHECK(0, "search: %s", attn_last_error());
                continue;
            }
            enumerated g;
            greedy_by_hand(&m, seed, max_length, &g);
            const attn_hypothesis *h = &result.sentences[0].hypotheses[0];
            differ += !(same_tokens(h, g.tokens, g.length) && h->finished == g.finished &&
                        h->log_prob == g.log_prob);
            finished += g.finished;
            cut += !g.finished;
            CHECK(result.sentences[0].count == 1 && m.most_rows == 1,
                  "one hypothesis, one row");
            attn_decode_free_sentences(&result);
        }
    }
    CHECK(differ == 0, "%d greedy searches differ from greedy by hand", differ);
    CHECK(finished > 0 && cut > 0, "both endings occur (%d finished, %d cut)", finished, cut);
    scripted_free(&m);
}

/* Teacher-forces a hypothesis through a fresh one-row model: its log-prob and every step's
 * maps must be the returned ones, bit for bit. */
static int replays_exactly(scripted *fresh, uint64_t seed, int32_t src_length,
                           const attn_hypothesis *h)
{
    int32_t one = src_length;
    scripted_start(fresh, 1, &seed, &one);
    float logits[64], cross[8 * 16];
    double log_prob = 0;
    int ok = 1;
    int32_t input = ATTN_BOS_ID;
    for (int64_t t = 0; t < h->steps; t++) {
        ok &= attn_model_step(&fresh->base, &input, logits, cross) == ATTN_OK;
        attn_log_softmax_forward(1, fresh->base.vocab, logits, logits);
        int32_t next = t < h->length ? h->tokens[t] : ATTN_EOS_ID;
        log_prob += (double)logits[next];
        const int64_t maps = fresh->base.cross_maps;
        for (int64_t k = 0; k < maps; k++)
            ok &= memcmp(cross + k * fresh->base.src_len, h->cross + (t * maps + k) * src_length,
                         (size_t)src_length * sizeof *cross) == 0;
        input = next;
    }
    return ok && log_prob == h->log_prob && h->steps == h->length + h->finished;
}

static void test_batch_equals_one_by_one_and_alignments_replay(void)
{
    enum { SENTENCES = 7 };
    const int64_t beam = 4, nbest = 3, maps = 3, src_len = 9, vocab = 12;
    uint64_t seeds[SENTENCES];
    int32_t src_lengths[SENTENCES];
    int64_t max_lengths[SENTENCES];
    for (int i = 0; i < SENTENCES; i++) {
        seeds[i] = 1000 + 17 * (uint64_t)i;
        src_lengths[i] = 1 + (i * 5) % (int)src_len;
        max_lengths[i] = 1 + (i * 3) % 9;
    }
    attn_decode_options o = beam_options(beam, nbest, 0.6);
    o.alignments = 1;
    scripted batch, alone, fresh;
    scripted_init(&batch, vocab, maps, src_len, hash_logits, SENTENCES * beam, 10);
    scripted_init(&alone, vocab, maps, src_len, hash_logits, beam, 10);
    scripted_init(&fresh, vocab, maps, src_len, hash_logits, 1, 10);
    attn_decode_result together;
    CHECK_OK(search_sentences(&batch, SENTENCES, seeds, src_lengths, max_lengths, &o,
                              &together));
    CHECK(batch.most_rows <= SENTENCES * beam, "rows within size * beam (%lld)",
          (long long)batch.most_rows);
    int same = 1, replayed = 1, ordered = 1, distinct = 1, reordered = 0;
    for (int i = 0; i < SENTENCES && together.sentences != NULL; i++) {
        attn_decode_result single;
        CHECK_OK(search_sentences(&alone, 1, &seeds[i], &src_lengths[i], &max_lengths[i], &o,
                                  &single));
        const attn_decode_sentence *a = &together.sentences[i], *b = &single.sentences[0];
        same &= a->count == b->count && a->src_length == src_lengths[i];
        for (int64_t j = 0; same && j < a->count; j++) {
            const attn_hypothesis *x = &a->hypotheses[j], *y = &b->hypotheses[j];
            same &= same_tokens(x, y->tokens, y->length) && x->finished == y->finished &&
                    x->log_prob == y->log_prob && x->score == y->score && x->steps == y->steps &&
                    memcmp(x->cross, y->cross,
                           (size_t)(x->steps * maps * src_lengths[i]) * sizeof *x->cross) == 0;
        }
        for (int64_t j = 0; j < a->count; j++) {
            const attn_hypothesis *h = &a->hypotheses[j];
            replayed &= replays_exactly(&fresh, seeds[i], src_lengths[i], h);
            if (j > 0)
                ordered &= a->hypotheses[j - 1].score >= h->score;
            for (int64_t k = 0; k < j; k++)
                distinct &= !(same_tokens(&a->hypotheses[k], h->tokens, h->length) &&
                              a->hypotheses[k].finished == h->finished);
            /* A hypothesis that is not the first step's best token went through reordering. */
            reordered += j > 0 && h->length > 1;
        }
        attn_decode_free_sentences(&single);
    }
    CHECK(same, "each sentence of the batch equals its search alone, bit for bit");
    CHECK(replayed, "every returned hypothesis replays to its log-prob and maps exactly");
    CHECK(ordered, "n-best lists are sorted by score");
    CHECK(distinct, "n-best hypotheses are distinct");
    CHECK(reordered > 0, "the case exercises reordered beams");
    attn_decode_free_sentences(&together);
    scripted_free(&batch);
    scripted_free(&alone);
    scripted_free(&fresh);
}

static void test_options_and_lengths(void)
{
    CHECK_CLOSE(attn_decode_length_penalty(0, 0.0), 1.0, 0, 0);
    CHECK_CLOSE(attn_decode_length_penalty(1, 0.6), 1.0, 1e-15, 0);
    CHECK_CLOSE(attn_decode_length_penalty(7, 1.0), 2.0, 1e-15, 0);
    CHECK_CLOSE(attn_decode_length_penalty(13, 0.5), sqrt(3.0), 1e-15, 0);
    attn_decode_options o = attn_decode_default_options();
    CHECK_OK(attn_decode_options_validate(&o));
    CHECK(attn_decode_max_output_length(&o, 10, 1024) == 25, "1.5 * 10 + 10");
    CHECK(attn_decode_max_output_length(&o, 7, 1024) == 20, "floor(1.5 * 7) + 10");
    CHECK(attn_decode_max_output_length(&o, 100, 64) == 64, "capped by the model");
    o.max_len = 3;
    CHECK(attn_decode_max_output_length(&o, 100, 64) == 3, "a fixed maximum");
    o.max_len = 0;
    o.max_len_ratio = 0;
    o.max_len_offset = 0;
    CHECK(attn_decode_max_output_length(&o, 5, 64) == 1, "at least one token");

    o = attn_decode_default_options();
    o.beam_size = 0;
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    o = beam_options(3, 4, 0.6);
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "nbest") != NULL, "names nbest: %s", attn_last_error());
    o = beam_options(3, 0, 0.6);
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    o = beam_options(3, 1, -0.1);
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    o = beam_options(3, 1, NAN);
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    o = beam_options(3, 1, 0.6);
    o.max_len_ratio = -1;
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    o = beam_options(3, 1, 0.6);
    o.max_len_offset = -1;
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    o = beam_options(3, 1, 0.6);
    o.max_len = -2;
    CHECK_FAILS(attn_decode_options_validate(&o), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_decode_options_validate(NULL), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_options_and_lengths);
    RUN_TEST(test_exact_search_equals_brute_force);
    RUN_TEST(test_short_early_hypothesis_does_not_win);
    RUN_TEST(test_beam_one_is_greedy);
    RUN_TEST(test_batch_equals_one_by_one_and_alignments_replay);
    return test_summary();
}
