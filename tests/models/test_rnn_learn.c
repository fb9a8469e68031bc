/* Learnability: an RNN encoder-decoder with Bahdanau attention and one with Luong attention
 * each learn to copy, reverse and sort sequences of 3..8 symbols, drawn afresh for every
 * batch, until greedy decoding (encode once, then step) gets all of 100 held-out sentences
 * exactly right.
 *
 * One thread: a step here is a few hundred operations on [64, 64]-sized arrays, far too
 * little work to share; measured on the shared 2-core machine, two threads made the copy
 * task 8x slower in wall time (each tiny parallel region waits for the other core).
 * Measured over four initialisation seeds, no task needed more than 550 steps (Bahdanau or
 * Luong concat; Luong general scores took up to 1650), so the cap of 1500 leaves room. */
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { BOS = 1, EOS = 2, FIRST_SYMBOL = 4, SYMBOLS = 10, VOCAB = FIRST_SYMBOL + SYMBOLS };
enum { MIN_LEN = 3, MAX_LEN = 8, TGT_MAX = MAX_LEN + 2, BATCH = 64, HELD_OUT = 100 };
enum { EVERY = 50, MAX_STEPS = 1500 };

typedef enum task { COPY, REVERSE, SORT } task;
static const char *const task_names[] = {"copy", "reverse", "sort"};

typedef struct sentences {
    int64_t size;
    int32_t src[HELD_OUT * MAX_LEN];
    int32_t src_lengths[HELD_OUT];
    int32_t tgt[HELD_OUT * TGT_MAX];
    int32_t tgt_lengths[HELD_OUT];
} sentences;

static int by_value(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* size sentences of the task: <s> target </s>, padding 0. */
static void draw(sentences *d, int64_t size, task t, attn_rng *rng)
{
    memset(d, 0, sizeof *d);
    d->size = size;
    for (int64_t b = 0; b < size; b++) {
        int len = MIN_LEN + (int)attn_rng_below(rng, MAX_LEN - MIN_LEN + 1);
        int32_t *src = d->src + b * MAX_LEN, *tgt = d->tgt + b * TGT_MAX;
        d->src_lengths[b] = len;
        d->tgt_lengths[b] = len + 2;
        for (int j = 0; j < len; j++)
            src[j] = FIRST_SYMBOL + (int32_t)attn_rng_below(rng, SYMBOLS);
        tgt[0] = BOS;
        for (int j = 0; j < len; j++)
            tgt[j + 1] = t == REVERSE ? src[len - 1 - j] : src[j];
        if (t == SORT)
            qsort(tgt + 1, (size_t)len, sizeof *tgt, by_value);
        tgt[len + 1] = EOS;
    }
}

/* Adam (beta 0.9, 0.999) on the gradients clipped to a global norm of 5, as Luong et al. */
static void adam_step(attn_params *store, int step, float lr)
{
    float *p = attn_params_buffer(store, ATTN_PARAM_VALUES);
    const float *g = attn_params_buffer(store, ATTN_PARAM_GRADS);
    float *mom = attn_params_buffer(store, ATTN_PARAM_ADAM_M);
    float *vel = attn_params_buffer(store, ATTN_PARAM_ADAM_V);
    const size_t n = attn_params_buffer_floats(store);
    double norm = 0.0;
    for (size_t i = 0; i < n; i++)
        norm += (double)g[i] * (double)g[i];
    norm = sqrt(norm);
    const float clip = norm > 5.0 ? (float)(5.0 / norm) : 1.0f;
    const float c1 = 1.0f - powf(0.9f, (float)step), c2 = 1.0f - powf(0.999f, (float)step);
    for (size_t i = 0; i < n; i++) {
        const float grad = clip * g[i];
        mom[i] = 0.9f * mom[i] + 0.1f * grad;
        vel[i] = 0.999f * vel[i] + 0.001f * grad * grad;
        p[i] -= lr * (mom[i] / c1) / (sqrtf(vel[i] / c2) + 1e-8f);
    }
}

/* Greedy decoding through the step API; the number of sentences whose output is exactly
 * the target up to and including </s>. */
static int exact_matches(attn_model *m, const sentences *d)
{
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(m), &g));
    attn_graph_set_recording(g, 0);
    attn_graph_set_training(g, 0);
    attn_var *memory = NULL;
    attn_rnn_decoder *decoder = NULL;
    CHECK_OK(attn_model_encode(m, g, d->size, MAX_LEN, d->src, d->src_lengths, &memory));
    if (memory != NULL)
        CHECK_OK(attn_model_rnn_decoder_start(m, g, memory, d->src_lengths, &decoder));
    int32_t previous[HELD_OUT], out[HELD_OUT * TGT_MAX];
    for (int64_t b = 0; b < d->size; b++)
        previous[b] = out[b * TGT_MAX] = BOS;
    for (int t = 1; t < TGT_MAX && decoder != NULL; t++) {
        attn_var *logits = NULL;
        CHECK_OK(attn_model_rnn_decoder_step(decoder, previous, &logits, NULL));
        if (logits == NULL)
            break;
        for (int64_t b = 0; b < d->size; b++) {
            const float *row = logits->value.data + b * VOCAB;
            int best = 0;
            for (int v = 1; v < VOCAB; v++)
                if (row[v] > row[best])
                    best = v;
            previous[b] = out[b * TGT_MAX + t] = best;
        }
    }
    int exact = 0;
    for (int64_t b = 0; b < d->size; b++)
        exact += memcmp(out + b * TGT_MAX, d->tgt + b * TGT_MAX,
                        (size_t)d->tgt_lengths[b] * sizeof(int32_t)) == 0;
    attn_graph_destroy(g);
    return exact;
}

static double seconds_since(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - start->tv_sec) + 1e-9 * (double)(now.tv_nsec - start->tv_nsec);
}

static void learn(const char *name, attn_model_config c, task t)
{
    c.src_vocab = c.tgt_vocab = VOCAB;
    c.hidden = 64;
    c.embedding_dim = 32;
    c.attention_dim = 64;
    c.dropout = 0.0;
    c.label_smoothing = 0.0;
    c.max_len = TGT_MAX;
    attn_model *m = NULL;
    CHECK_OK(attn_model_create(&c, &m));
    if (m == NULL)
        return;
    CHECK_OK(attn_model_init(m, 1));
    attn_params *store = attn_model_params(m);
    attn_graph *g = NULL;
    CHECK_OK(attn_graph_create(store, &g));
    attn_rng data_rng, held_rng;
    attn_rng_seed(&data_rng, 7);
    attn_rng_seed(&held_rng, 99);
    static sentences held, batch;
    draw(&held, HELD_OUT, t, &held_rng);
    int before = exact_matches(m, &held), exact = before, step = 0;
    struct timespec start;
    clock_gettime(CLOCK_MONOTONIC, &start);
    float loss_value = NAN;
    while (step < MAX_STEPS && exact < HELD_OUT) {
        draw(&batch, BATCH, t, &data_rng);
        attn_model_batch input = {BATCH,   MAX_LEN,   batch.src,         batch.src_lengths,
                                  TGT_MAX, batch.tgt, batch.tgt_lengths, NULL};
        attn_graph_reset(g);
        attn_params_zero_grad(store);
        attn_var *loss = NULL;
        CHECK_OK(attn_model_forward_loss(m, g, &input, &loss));
        if (loss == NULL)
            break;
        CHECK_OK(attn_graph_backward(g, loss));
        loss_value = loss->value.data[0];
        adam_step(store, ++step, 3e-3f);
        if (step % EVERY == 0)
            exact = exact_matches(m, &held);
    }
    printf("  %s, %s: %d steps (%.1f s), loss %.4f, held-out exact %d -> %d of %d\n", name,
           task_names[t], step, seconds_since(&start), (double)loss_value, before, exact, HELD_OUT);
    CHECK(exact == HELD_OUT, "%s learns to %s: greedy decoding gets every held-out sentence (%d)",
          name, task_names[t], exact);
    attn_graph_destroy(g);
    attn_model_destroy(m);
}

static void test_bahdanau_learns_copy_reverse_sort(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    for (int t = COPY; t <= SORT; t++)
        learn("GRU + Bahdanau attention", c, (task)t);
}

static void test_luong_learns_copy_reverse_sort(void)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN);
    c.attention = ATTN_RNN_LUONG_CONCAT;
    c.input_feeding = 1;
    for (int t = COPY; t <= SORT; t++)
        learn("GRU + Luong concat attention, input feeding", c, (task)t);
}

int main(void)
{
    CHECK_OK(attn_set_num_threads(1));
    RUN_TEST(test_bahdanau_learns_copy_reverse_sort);
    RUN_TEST(test_luong_learns_copy_reverse_sort);
    return test_summary();
}
