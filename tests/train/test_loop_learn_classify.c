/* Learnability of a classifier through the training loop, for each pooling of the Transformer
 * classifier and each cell of the RNN one (arch "rnn_classifier"): labelled lines
 * (label<TAB>text, read by attn_corpus_read_labelled) of three classes a single letter decides
 * ("a" anywhere, else "b" anywhere, else neither), a tiny model trained by attn_trainer on them,
 * and its held-out accuracy from attn_trainer_evaluate, which must be far above chance (1/3).
 * Also: the loss reported is per line, the held-out accuracy is the share of lines whose arg-max
 * is their label (checked against the model directly), and, for the RNN's attention pooling,
 * Yang et al.'s reading of it: on the held-out lines one letter decides (one "a", or no "a" and
 * one "b"), the largest pooling weight falls on that letter. */
#include "harness.h"

#include <stdlib.h>
#include <string.h>

enum { TRAIN_LINES = 3000, VALID_LINES = 300, MAX_LETTERS = 10 };

static const char *label_of(const char *text)
{
    return strchr(text, 'a') != NULL ? "has_a" : strchr(text, 'b') != NULL ? "has_b" : "neither";
}

/* Lines of 3..10 letters over a..h, each line's label first. */
static const char *write_lines(const char *name, int64_t n, uint64_t seed)
{
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    char *text = test_alloc((size_t)n * (MAX_LETTERS + 16) + 1);
    size_t used = 0;
    for (int64_t i = 0; i < n; i++) {
        char line[MAX_LETTERS + 1];
        const int length = 3 + (int)attn_rng_below(&rng, MAX_LETTERS - 2);
        for (int j = 0; j < length; j++)
            line[j] = (char)('a' + attn_rng_below(&rng, 8));
        line[length] = '\0';
        used += (size_t)sprintf(text + used, "%s\t%s\n", label_of(line), line);
    }
    const char *path = test_write_scratch_text(name, text);
    free(text);
    return path;
}

static int count_of(const char *text, char letter)
{
    int n = 0;
    for (; *text != '\0'; text++)
        n += *text == letter;
    return n;
}

/* The letter that decides text's class when exactly one letter does, else 0. */
static char deciding_letter(const char *text)
{
    if (count_of(text, 'a') == 1)
        return 'a';
    if (count_of(text, 'a') == 0 && count_of(text, 'b') == 1)
        return 'b';
    return 0;
}

/* On the held-out lines one letter decides, the largest pooling weight is on that letter. */
static void check_pooling_reads_the_deciding_letter(attn_model *model, const attn_corpus *valid,
                                                    const char *what)
{
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(model), &graph));
    int64_t decided = 0, on_the_letter = 0;
    const char *const *texts = attn_corpus_sources(valid);
    for (int64_t i = 0; i < attn_corpus_size(valid); i++) {
        const char letter = deciding_letter(texts[i]);
        const int32_t *ids;
        int64_t n;
        CHECK_OK(attn_corpus_source_ids(valid, i, &ids, &n));
        if (letter == 0 || n != (int64_t)strlen(texts[i]))
            continue;
        float weights[MAX_LETTERS];
        CHECK_OK(attn_model_pooling_weights(model, graph, ids, n, weights));
        int64_t best = 0;
        for (int64_t t = 1; t < n; t++)
            best = weights[t] > weights[best] ? t : best;
        decided++;
        on_the_letter += texts[i][best] == letter;
    }
    printf("%s: the largest pooling weight on the deciding letter in %lld of %lld lines\n", what,
           (long long)on_the_letter, (long long)decided);
    CHECK(decided >= 50 && on_the_letter >= 0.9 * (double)decided,
          "%s: the pooling reads the deciding letter (%lld of %lld lines)", what,
          (long long)on_the_letter, (long long)decided);
    attn_graph_destroy(graph);
}

/* Trains c (its vocabulary and classes filled in here) at peak rate lr for steps updates. */
static void learn(attn_model_config c, double lr, int64_t steps, const char *what)
{
    attn_corpus *train = NULL, *valid = NULL;
    CHECK_OK(attn_corpus_read_labelled(write_lines("train.tsv", TRAIN_LINES, 1), &train));
    CHECK_OK(attn_corpus_read_labelled(write_lines("valid.tsv", VALID_LINES, 2), &valid));
    attn_labels *labels = NULL;
    CHECK_OK(attn_labels_from_corpus(train, &labels));
    attn_tokenizer_config tokens;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &tokens));
    CHECK_OK(attn_tokenizer_train(&tokens, attn_corpus_sources(train), attn_corpus_size(train),
                                  &tokenizer));
    CHECK_OK(attn_corpus_encode_labelled(train, tokenizer, labels));
    CHECK_OK(attn_corpus_encode_labelled(valid, tokenizer, labels));

    c.src_vocab = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    c.num_classes = attn_labels_count(labels);
    attn_model *model = NULL;
    CHECK_OK(attn_model_create(&c, &model));
    CHECK_OK(attn_model_init(model, 3));
    attn_trainable trainable;
    CHECK_OK(attn_trainable_from_model(model, &trainable));
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 512;
    o.schedule.kind = ATTN_LR_COSINE;
    o.schedule.lr = lr;
    o.schedule.warmup_steps = 30;
    o.schedule.total_steps = steps;
    o.max_epochs = 0;
    o.max_steps = steps;
    attn_trainer *trainer = NULL;
    CHECK_OK(attn_trainer_create(&trainable, train, valid, &o, &trainer));
    CHECK_OK(attn_trainer_run(trainer));
    double loss = 0.0, accuracy = 0.0;
    CHECK_OK(attn_trainer_evaluate(trainer, &loss, &accuracy));
    printf("%s: held-out loss %.4f per line, accuracy %.3f\n", what, loss, accuracy);
    CHECK(accuracy >= 0.95, "%s: held-out accuracy %.3f, far above chance", what, accuracy);

    /* The accuracy is the share of lines whose arg-max is their label. */
    attn_graph *graph = NULL;
    CHECK_OK(attn_graph_create(attn_model_params(model), &graph));
    attn_batcher *batches = NULL;
    attn_batcher_config in_order = {512, 0, 0};
    CHECK_OK(attn_batcher_create(valid, &in_order, &batches));
    int64_t right = 0, lines = 0;
    for (int64_t k = 0; k < attn_batcher_num_batches(batches); k++) {
        const attn_batch *batch;
        CHECK_OK(attn_batcher_next(batches, &batch));
        attn_model_batch input = attn_model_batch_of(batch);
        attn_graph_reset(graph);
        attn_var *logits;
        CHECK_OK(attn_model_forward_logits(model, graph, &input, &logits));
        for (int64_t r = 0; r < batch->size; r++) {
            const float *row = logits->value.data + r * c.num_classes;
            int64_t best = 0;
            for (int64_t v = 1; v < c.num_classes; v++)
                best = row[v] > row[best] ? v : best;
            right += best == batch->labels[r];
            lines++;
        }
    }
    CHECK(lines == VALID_LINES && (double)right / (double)lines == accuracy,
          "%s: %lld of %lld right, the trainer said %.4f", what, (long long)right, (long long)lines,
          accuracy);
    attn_batcher_destroy(batches);
    attn_graph_destroy(graph);
    if (c.arch == ATTN_ARCH_RNN_CLASSIFIER)
        check_pooling_reads_the_deciding_letter(model, valid, what);
    attn_trainer_destroy(trainer);
    attn_model_destroy(model);
    attn_tokenizer_destroy(tokenizer);
    attn_labels_destroy(labels);
    attn_corpus_destroy(train);
    attn_corpus_destroy(valid);
}

/* A tiny Transformer classifier with the given pooling. */
static attn_model_config transformer(attn_pooling pooling)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.d_model = 32;
    c.num_heads = 4;
    c.ffn_dim = 64;
    c.encoder_layers = 1;
    c.dropout = 0.0;
    c.label_smoothing = 0.0;
    c.max_len = 32;
    c.norm_first = 1;
    c.pooling = pooling;
    return c;
}

/* A small bidirectional RNN classifier with attention pooling. */
static attn_model_config rnn(attn_rnn_cell cell)
{
    attn_model_config c = attn_model_config_default(ATTN_ARCH_RNN_CLASSIFIER);
    c.cell = cell;
    c.hidden = 24;
    c.embedding_dim = 16;
    c.layers = 1;
    c.dropout = 0.0;
    c.label_smoothing = 0.0;
    c.max_len = 32;
    return c;
}

static void test_mean_pooling_learns(void)
{
    learn(transformer(ATTN_POOLING_MEAN), 3e-3, 400, "mean");
}

static void test_cls_pooling_learns(void)
{
    learn(transformer(ATTN_POOLING_CLS), 3e-3, 400, "cls");
}

static void test_attention_pooling_learns(void)
{
    learn(transformer(ATTN_POOLING_ATTENTION), 3e-3, 400, "attention");
}

static void test_gru_classifier_learns(void)
{
    learn(rnn(ATTN_RNN_GRU), 1e-2, 300, "GRU");
}

static void test_lstm_classifier_learns(void)
{
    learn(rnn(ATTN_RNN_LSTM), 1e-2, 300, "LSTM");
}

int main(void)
{
    RUN_TEST(test_mean_pooling_learns);
    RUN_TEST(test_cls_pooling_learns);
    RUN_TEST(test_attention_pooling_learns);
    RUN_TEST(test_gru_classifier_learns);
    RUN_TEST(test_lstm_classifier_learns);
    return test_summary();
}
