/* Learnability of a classifier through the training loop, for each pooling: labelled lines
 * (label<TAB>text, read by attn_corpus_read_labelled) of three classes a single letter decides
 * ("a" anywhere, else "b" anywhere, else neither), a tiny Transformer classifier trained by
 * attn_trainer on them, and its held-out accuracy from attn_trainer_evaluate, which must be
 * far above chance (1/3). Also: the loss reported is per line, and the held-out accuracy is
 * the share of lines whose arg-max is their label (checked against the model directly). */
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

static void learn(attn_pooling pooling, const char *what)
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

    attn_model_config c = attn_model_config_default(ATTN_ARCH_TRANSFORMER_CLASSIFIER);
    c.d_model = 32;
    c.num_heads = 4;
    c.ffn_dim = 64;
    c.encoder_layers = 1;
    c.dropout = 0.0;
    c.label_smoothing = 0.0;
    c.max_len = 32;
    c.norm_first = 1;
    c.src_vocab = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    c.num_classes = attn_labels_count(labels);
    c.pooling = pooling;
    attn_model *model = NULL;
    CHECK_OK(attn_model_create(&c, &model));
    CHECK_OK(attn_model_init(model, 3));
    attn_trainable trainable;
    CHECK_OK(attn_trainable_from_model(model, &trainable));
    attn_trainer_options o = attn_trainer_default_options();
    o.batch_tokens = 512;
    o.schedule.kind = ATTN_LR_COSINE;
    o.schedule.lr = 3e-3;
    o.schedule.warmup_steps = 30;
    o.schedule.total_steps = 400;
    o.max_epochs = 0;
    o.max_steps = 400;
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
    attn_trainer_destroy(trainer);
    attn_model_destroy(model);
    attn_tokenizer_destroy(tokenizer);
    attn_labels_destroy(labels);
    attn_corpus_destroy(train);
    attn_corpus_destroy(valid);
}

static void test_mean_pooling_learns(void)
{
    learn(ATTN_POOLING_MEAN, "mean");
}

static void test_cls_pooling_learns(void)
{
    learn(ATTN_POOLING_CLS, "cls");
}

static void test_attention_pooling_learns(void)
{
    learn(ATTN_POOLING_ATTENTION, "attention");
}

int main(void)
{
    RUN_TEST(test_mean_pooling_learns);
    RUN_TEST(test_cls_pooling_learns);
    RUN_TEST(test_attention_pooling_learns);
    return test_summary();
}
