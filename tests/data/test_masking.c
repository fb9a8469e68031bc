/* Plain text for a masked language model: reading one text per line, and BERT's masking
 * (attn_mlm_mask): its proportions over a large sample, specials and padding never chosen,
 * masks that depend only on (seed, epoch, line, position), and the batches that carry them. */
#include "data_test_util.h"

#include <math.h>

enum { SAMPLE_TEXTS = 2000, SAMPLE_LENGTH = 50, SAMPLE_VOCAB = 40 };

/* Within `sigmas` standard deviations of a binomial proportion p over n draws. */
static int near_share(int64_t hits, int64_t n, double p, double sigmas)
{
    const double share = (double)hits / (double)n;
    return fabs(share - p) <= sigmas * sqrt(p * (1.0 - p) / (double)n);
}

static void test_proportions_follow_bert(void)
{
    /* 100,000 tokens, one in ten a special (<pad>, <s>, </s>, <unk>) that must never be
     * chosen. */
    int32_t ids[SAMPLE_LENGTH], input[SAMPLE_LENGTH], targets[SAMPLE_LENGTH];
    int64_t ordinary = 0, chosen = 0, masked = 0, random = 0, kept = 0, specials_chosen = 0;
    int64_t random_out_of_range = 0, returned = 0;
    for (int64_t text = 0; text < SAMPLE_TEXTS; text++) {
        for (int i = 0; i < SAMPLE_LENGTH; i++)
            ids[i] = i % 10 == 0 ? (int32_t)(i / 10 % 4)
                                 : ATTN_MLM_FIRST_TOKEN + (int32_t)((text * 7 + i) % 36);
        returned += attn_mlm_mask(42, 0, text, ids, SAMPLE_LENGTH, SAMPLE_VOCAB, input, targets);
        for (int i = 0; i < SAMPLE_LENGTH; i++) {
            if (ids[i] < ATTN_MLM_FIRST_TOKEN) {
                specials_chosen += targets[i] != -1 || input[i] != ids[i];
                continue;
            }
            ordinary++;
            if (targets[i] == -1) {
                CHECK(input[i] == ids[i], "an unchosen token is read as it is");
                continue;
            }
            CHECK(targets[i] == ids[i], "the target is the original token");
            chosen++;
            if (input[i] == ATTN_MLM_MASK_ID)
                masked++;
            else if (input[i] == ids[i])
                kept++; /* or a random draw of the same token: 1 in 36 of the random ones */
            else {
                random++;
                random_out_of_range +=
                    input[i] < ATTN_MLM_FIRST_TOKEN || input[i] >= SAMPLE_VOCAB;
            }
        }
    }
    CHECK(specials_chosen == 0, "%lld specials were chosen or changed", (long long)specials_chosen);
    CHECK(returned == chosen, "the count returned (%lld) is the chosen positions (%lld)",
          (long long)returned, (long long)chosen);
    /* 5 sigmas: a correct rule fails about once in 3 million runs; a wrong share (0.10 or
     * 0.20 chosen, 70/15/15) is tens of sigmas away. */
    CHECK(near_share(chosen, ordinary, ATTN_MLM_CHOSEN_SHARE, 5.0), "chosen %.4f of %lld tokens",
          (double)chosen / (double)ordinary, (long long)ordinary);
    CHECK(near_share(masked, chosen, 0.8, 5.0), "[MASK] %.4f of the chosen",
          (double)masked / (double)chosen);
    /* A random draw lands on the token itself 1 time in 36, and then counts as kept. */
    const double random_share = 0.1 * 35.0 / 36.0;
    CHECK(near_share(random, chosen, random_share, 5.0), "random %.4f of the chosen",
          (double)random / (double)chosen);
    CHECK(near_share(kept, chosen, 1.0 - 0.8 - random_share, 5.0), "kept %.4f of the chosen",
          (double)kept / (double)chosen);
    CHECK(random_out_of_range == 0, "random tokens are ordinary tokens of the vocabulary");
}

static void test_masks_depend_on_seed_epoch_and_line_only(void)
{
    int32_t ids[SAMPLE_LENGTH], a_input[SAMPLE_LENGTH], a_targets[SAMPLE_LENGTH];
    int32_t b_input[SAMPLE_LENGTH], b_targets[SAMPLE_LENGTH];
    for (int i = 0; i < SAMPLE_LENGTH; i++)
        ids[i] = ATTN_MLM_FIRST_TOKEN + i % 30;
    attn_mlm_mask(7, 3, 11, ids, SAMPLE_LENGTH, SAMPLE_VOCAB, a_input, a_targets);
    attn_mlm_mask(7, 3, 11, ids, SAMPLE_LENGTH, SAMPLE_VOCAB, b_input, b_targets);
    CHECK(memcmp(a_input, b_input, sizeof a_input) == 0 &&
              memcmp(a_targets, b_targets, sizeof a_targets) == 0,
          "the same (seed, epoch, line) masks the same way");
    /* In place, as the batcher masks its rows. */
    int32_t in_place[SAMPLE_LENGTH];
    memcpy(in_place, ids, sizeof ids);
    attn_mlm_mask(7, 3, 11, in_place, SAMPLE_LENGTH, SAMPLE_VOCAB, in_place, b_targets);
    CHECK(memcmp(a_input, in_place, sizeof a_input) == 0, "masking in place gives the same");
    const struct {
        uint64_t seed;
        int64_t epoch, line;
    } others[] = {{8, 3, 11}, {7, 4, 11}, {7, 3, 12}};
    for (size_t k = 0; k < sizeof others / sizeof *others; k++) {
        attn_mlm_mask(others[k].seed, others[k].epoch, others[k].line, ids, SAMPLE_LENGTH,
                      SAMPLE_VOCAB, b_input, b_targets);
        CHECK(memcmp(a_targets, b_targets, sizeof a_targets) != 0,
              "another seed, epoch or line chooses other positions (case %zu)", k);
    }
}

static attn_tokenizer *char_tokenizer(const attn_corpus *corpus)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    CHECK_OK(attn_tokenizer_train(&config, attn_corpus_sources(corpus), attn_corpus_size(corpus),
                                  &tokenizer));
    return tokenizer;
}

static void test_text_corpus_and_masked_batches(void)
{
    const char *path = test_write_scratch_text("text.txt", "abcabcabcabc\nab\nbcbcbcbcbcbcbcbc\n");
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_read_text(path, &corpus));
    CHECK(attn_corpus_is_text(corpus) && !attn_corpus_is_labelled(corpus) &&
              attn_corpus_size(corpus) == 3,
          "three texts");
    attn_tokenizer *tokenizer = char_tokenizer(corpus);
    CHECK_FAILS(attn_corpus_encode(corpus, tokenizer, tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_corpus_encode_text(corpus, tokenizer));
    const int32_t *ids;
    int64_t length;
    CHECK_OK(attn_corpus_source_ids(corpus, 1, &ids, &length));
    CHECK(length == 2 && ids[0] >= ATTN_MLM_FIRST_TOKEN, "a text is its tokens, no <s> or </s>");
    CHECK_OK(attn_corpus_target_ids(corpus, 1, &ids, &length));
    CHECK(length == 0, "and has no target");

    attn_batcher_config config = {16, 5, 1}; /* a batch a line */
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(corpus, &config, &batcher));
    int64_t chosen = 0;
    for (int64_t step = 0; step < 40; step++) {
        const attn_batch *batch = NULL;
        CHECK_OK(attn_batcher_next(batcher, &batch));
        CHECK(batch->mlm_targets != NULL && batch->labels == NULL, "a masked batch");
        for (int64_t r = 0; r < batch->size; r++) {
            const int32_t *original;
            int64_t n;
            CHECK_OK(attn_corpus_source_ids(corpus, batch->pairs[r], &original, &n));
            int32_t expected_input[32], expected_targets[32];
            attn_mlm_mask(5, batch->epoch, batch->pairs[r], original, n,
                          attn_vocab_size(attn_tokenizer_vocab(tokenizer)), expected_input,
                          expected_targets);
            const int32_t *input = batch->source + r * batch->source_len;
            const int32_t *targets = batch->mlm_targets + r * batch->source_len;
            CHECK(memcmp(input, expected_input, (size_t)n * sizeof *input) == 0 &&
                      memcmp(targets, expected_targets, (size_t)n * sizeof *targets) == 0,
                  "row %lld of epoch %lld is its line masked by (seed, epoch, line)", (long long)r,
                  (long long)batch->epoch);
            for (int64_t j = n; j < batch->source_len; j++)
                CHECK(targets[j] == -1 && input[j] == ATTN_PAD_ID, "padding is never chosen");
            for (int64_t j = 0; j < n; j++)
                chosen += targets[j] != -1;
        }
    }
    CHECK(chosen > 0, "some tokens were chosen");
    /* Seeking back gives the same masks: a resumed run trains on what the first one would. */
    const attn_batch *batch = NULL;
    CHECK_OK(attn_batcher_seek(batcher, 2, 1));
    CHECK_OK(attn_batcher_next(batcher, &batch));
    int32_t first_input[64], first_targets[64];
    const size_t cells = (size_t)(batch->size * batch->source_len);
    memcpy(first_input, batch->source, cells * sizeof *first_input);
    memcpy(first_targets, batch->mlm_targets, cells * sizeof *first_targets);
    CHECK_OK(attn_batcher_seek(batcher, 2, 1));
    CHECK_OK(attn_batcher_next(batcher, &batch));
    CHECK(memcmp(first_input, batch->source, cells * sizeof *first_input) == 0 &&
              memcmp(first_targets, batch->mlm_targets, cells * sizeof *first_targets) == 0,
          "a position's batch is masked the same each time");
    attn_batcher_destroy(batcher);

    /* Held-out texts stay texts. */
    attn_corpus *all = NULL, *held = NULL;
    CHECK_OK(attn_corpus_read_text(path, &all));
    CHECK_OK(attn_corpus_hold_out(all, 1, 3, &held));
    CHECK(attn_corpus_is_text(held) && attn_corpus_is_text(all), "both text");
    CHECK_OK(attn_corpus_encode_text(held, tokenizer));
    attn_corpus_destroy(held);
    attn_corpus_destroy(all);
    attn_tokenizer_destroy(tokenizer);
    attn_corpus_destroy(corpus);

    path = test_write_scratch_text("empty_line.txt", "abc\n\nabc\n");
    CHECK_FAILS(attn_corpus_read_text(path, &corpus), ATTN_ERR_FORMAT);
    CHECK(message_has("empty_line.txt:2", "empty line"), "%s", attn_last_error());
}

int main(void)
{
    RUN_TEST(test_proportions_follow_bert);
    RUN_TEST(test_masks_depend_on_seed_epoch_and_line_only);
    RUN_TEST(test_text_corpus_and_masked_batches);
    return test_summary();
}
