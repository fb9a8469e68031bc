/* Parallel corpora (TSV, aligned files, memory), their id convention, and length-bucketed
 * batches: token limits, each pair once per epoch, seeded order, exact resume. */
#include "data_test_util.h"

static attn_tokenizer *train(const char *spec, const char *const *lines, int64_t n)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse(spec, &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, n, &tokenizer));
    return tokenizer;
}

/* ---- reading ---------------------------------------------------------------------------- */

static void test_tsv_reads_pairs(void)
{
    const char *path = test_write_scratch_text("ok.tsv", "hello\tHH AH L OW\r\n"
                                                         "world\tW ER L D\n"
                                                         "a b\t c \n");
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_read_tsv(path, &corpus));
    CHECK(attn_corpus_size(corpus) == 3, "3 pairs");
    if (attn_corpus_size(corpus) == 3) {
        const char *const *src = attn_corpus_sources(corpus);
        const char *const *tgt = attn_corpus_targets(corpus);
        CHECK(strcmp(src[0], "hello") == 0 && strcmp(tgt[0], "HH AH L OW") == 0,
              "first pair, \\r stripped: '%s' '%s'", src[0], tgt[0]);
        CHECK(strcmp(src[2], "a b") == 0 && strcmp(tgt[2], " c ") == 0, "raw strings kept");
    }
    attn_corpus_destroy(corpus);
}

static void test_tsv_errors_name_file_and_line(void)
{
    struct {
        const char *name, *text, *must_contain;
    } cases[] = {
        {"no_tab.tsv", "a\tb\nc\td\nno tab here\ne\tf\n", "no_tab.tsv:3:"},
        {"two_tabs.tsv", "a\tb\nc\td\te\n", "two_tabs.tsv:2:"},
        {"empty_source.tsv", "a\tb\n\tb\n", "empty_source.tsv:2: empty source"},
        {"empty_target.tsv", "a\tb\nc\td\ne\t\n", "empty_target.tsv:3: empty target"},
        {"blank_line.tsv", "a\tb\n\nc\td\n", "blank_line.tsv:2:"},
        {"bad_utf8.tsv", "a\tb\nc\td\n\xC3\x28\tx\n", "bad_utf8.tsv:3:"},
        {"empty.tsv", "", "no sentences"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *path = test_write_scratch_text(cases[i].name, cases[i].text);
        attn_corpus *corpus = NULL;
        CHECK_FAILS(attn_corpus_read_tsv(path, &corpus), ATTN_ERR_FORMAT);
        CHECK(corpus == NULL, "no corpus from %s", cases[i].name);
        CHECK(message_has(cases[i].must_contain, NULL), "%s: message '%s' names '%s'",
              cases[i].name, attn_last_error(), cases[i].must_contain);
    }
    attn_corpus *corpus = NULL;
    CHECK_FAILS(attn_corpus_read_tsv("/nonexistent/attn.tsv", &corpus), ATTN_ERR_IO);
    CHECK_FAILS(attn_corpus_read_tsv(NULL, &corpus), ATTN_ERR_INVALID_ARGUMENT);
    const char *path = test_write_scratch_text("tabs_message.tsv", "a\tb\tc\td\n");
    CHECK_FAILS(attn_corpus_read_tsv(path, &corpus), ATTN_ERR_FORMAT);
    CHECK(message_has("3 TABs", NULL), "counts the TABs: %s", attn_last_error());
}

static void test_aligned_files(void)
{
    const char *es = test_write_scratch_text("a.es", "hola mundo\nbuenos d\xC3\xAD"
                                                     "as\n");
    const char *en = test_write_scratch_text("a.en", "hello world\ngood morning\n");
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_read_files(es, en, &corpus));
    CHECK(attn_corpus_size(corpus) == 2, "2 pairs");
    if (corpus != NULL)
        CHECK(strcmp(attn_corpus_targets(corpus)[1], "good morning") == 0, "aligned by line");
    attn_corpus_destroy(corpus);
    corpus = NULL;

    const char *short_en = test_write_scratch_text("short.en", "hello world\n");
    CHECK_FAILS(attn_corpus_read_files(es, short_en, &corpus), ATTN_ERR_FORMAT);
    CHECK(message_has("a.es' has 2 lines", "short.en' has 1"), "names both files and counts: %s",
          attn_last_error());
    const char *gap = test_write_scratch_text("gap.en", "hello world\n\n");
    CHECK_FAILS(attn_corpus_read_files(es, gap, &corpus), ATTN_ERR_FORMAT);
    CHECK(message_has("gap.en:2", "empty"), "empty line by file:line: %s", attn_last_error());
    const char *bad = test_write_scratch_text("bad.en", "hello\n\xE2\x82\n");
    CHECK_FAILS(attn_corpus_read_files(es, bad, &corpus), ATTN_ERR_FORMAT);
    CHECK(message_has("bad.en:2", "UTF-8"), "invalid UTF-8 by file:line: %s", attn_last_error());
    const char *empty = test_write_scratch_text("empty.en", "");
    CHECK_FAILS(attn_corpus_read_files(empty, en, &corpus), ATTN_ERR_FORMAT);
    CHECK(message_has("empty.en", "no sentences"), "empty file: %s", attn_last_error());
    CHECK_FAILS(attn_corpus_read_files(es, "/nonexistent/x.en", &corpus), ATTN_ERR_IO);
    CHECK_FAILS(attn_corpus_read_files(es, NULL, &corpus), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(corpus == NULL, "no corpus after failures");
}

static void test_real_corpora_read(void)
{
    const char *es = shared_data_file(0, "bible/dev.es");
    const char *en = shared_data_file(1, "bible/dev.en");
    const char *tsv = shared_data_file(2, "g2p-std/dev.tsv");
    if (es == NULL) {
        skipped("test_real_corpora_read");
        return;
    }
    attn_lines lines;
    CHECK_OK(attn_lines_read(en, &lines));
    attn_corpus *bible = NULL, *g2p = NULL;
    CHECK_OK(attn_corpus_read_files(es, en, &bible));
    CHECK(attn_corpus_size(bible) == lines.count, "one pair per verse");
    attn_lines_free(&lines);
    CHECK_OK(attn_lines_read(tsv, &lines));
    CHECK_OK(attn_corpus_read_tsv(tsv, &g2p));
    CHECK(attn_corpus_size(g2p) == lines.count, "one pair per TSV line");
    int split_ok = 1;
    for (int64_t i = 0; i < lines.count && g2p != NULL; i++) {
        size_t source_size = strlen(attn_corpus_sources(g2p)[i]);
        split_ok &= strncmp(lines.line[i], attn_corpus_sources(g2p)[i], source_size) == 0 &&
                    lines.line[i][source_size] == '\t' &&
                    strcmp(lines.line[i] + source_size + 1, attn_corpus_targets(g2p)[i]) == 0;
    }
    CHECK(split_ok, "every line split at its TAB");
    attn_lines_free(&lines);
    attn_corpus_destroy(bible);
    attn_corpus_destroy(g2p);
}

/* ---- encoding --------------------------------------------------------------------------- */

static void test_encode_convention(void)
{
    const char *sources[] = {"hello", "low", "hi"};
    const char *targets[] = {"HH AH L OW", "L OW", "HH AY"};
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_from_strings(sources, targets, 3, &corpus));
    if (corpus == NULL)
        return;
    attn_tokenizer *letters = train("char", sources, 3);
    attn_tokenizer *phonemes = train("word", targets, 3);
    const int32_t *ids;
    int64_t length;
    CHECK_FAILS(attn_corpus_source_ids(corpus, 0, &ids, &length), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("not encoded", NULL), "says why: %s", attn_last_error());
    CHECK_OK(attn_corpus_encode(corpus, letters, phonemes));
    for (int64_t i = 0; i < 3; i++) {
        int32_t *expected;
        int64_t n;
        CHECK_OK(attn_tokenizer_encode(letters, sources[i], &expected, &n));
        CHECK_OK(attn_corpus_source_ids(corpus, i, &ids, &length));
        CHECK(length == n && memcmp(ids, expected, (size_t)n * sizeof *ids) == 0,
              "source %lld: the tokens, no specials", (long long)i);
        free(expected);
        CHECK_OK(attn_tokenizer_encode(phonemes, targets[i], &expected, &n));
        CHECK_OK(attn_corpus_target_ids(corpus, i, &ids, &length));
        CHECK(length == n + 2 && ids[0] == ATTN_BOS_ID && ids[n + 1] == ATTN_EOS_ID &&
                  memcmp(ids + 1, expected, (size_t)n * sizeof *ids) == 0,
              "target %lld: <s> tokens </s>", (long long)i);
        free(expected);
    }
    CHECK_FAILS(attn_corpus_target_ids(corpus, 3, &ids, &length), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_corpus_target_ids(corpus, -1, &ids, &length), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_corpus_encode(corpus, NULL, phonemes), ATTN_ERR_INVALID_ARGUMENT);
    /* Encoding again with other tokenizers replaces the ids. */
    CHECK_OK(attn_corpus_encode(corpus, phonemes, phonemes));
    CHECK_OK(attn_corpus_source_ids(corpus, 0, &ids, &length));
    CHECK(length == 1 && ids[0] == ATTN_UNK_ID, "re-encoded: 'hello' is one unknown word");
    attn_corpus_destroy(corpus);

    /* A source with no tokens is reported by file and line. */
    const char *path = test_write_scratch_text("blank_source.tsv", "hello\tHH AH L OW\n \tX\n");
    CHECK_OK(attn_corpus_read_tsv(path, &corpus));
    if (corpus != NULL) {
        CHECK_FAILS(attn_corpus_encode(corpus, phonemes, phonemes), ATTN_ERR_FORMAT);
        CHECK(message_has("blank_source.tsv:2", "no tokens"), "names file:line: %s",
              attn_last_error());
        CHECK_FAILS(attn_corpus_source_ids(corpus, 0, &ids, &length), ATTN_ERR_INVALID_ARGUMENT);
        CHECK_OK(attn_corpus_encode(corpus, letters, phonemes));
    }
    attn_corpus_destroy(corpus);

    const char *empty[] = {""};
    CHECK_FAILS(attn_corpus_from_strings(empty, targets, 1, &corpus), ATTN_ERR_FORMAT);
    const char *bad[] = {"\xFF"};
    CHECK_FAILS(attn_corpus_from_strings(sources, bad, 1, &corpus), ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_corpus_from_strings(sources, targets, 0, &corpus), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_corpus_from_strings(NULL, targets, 1, &corpus), ATTN_ERR_INVALID_ARGUMENT);
    attn_tokenizer_destroy(letters);
    attn_tokenizer_destroy(phonemes);
}

/* ---- batches ---------------------------------------------------------------------------- */

/* n pairs of random lengths: source "w3 w1 ...", target "v2 v7 ...", encoded by words. */
typedef struct synthetic {
    attn_corpus *corpus;
    attn_tokenizer *tokenizer;
} synthetic;

static synthetic make_synthetic(int n, int max_len, uint64_t seed)
{
    synthetic s = {NULL, NULL};
    char **sources = test_alloc((size_t)n * sizeof *sources);
    char **targets = test_alloc((size_t)n * sizeof *targets);
    attn_rng rng;
    attn_rng_seed(&rng, seed);
    for (int i = 0; i < n; i++) {
        for (int side = 0; side < 2; side++) {
            int len = 1 + (int)attn_rng_below(&rng, (uint64_t)max_len);
            char *text = test_alloc((size_t)len * 8 + 1);
            text[0] = '\0';
            for (int j = 0; j < len; j++)
                sprintf(text + strlen(text), "%s%c%d", j ? " " : "", side ? 'v' : 'w',
                        (int)attn_rng_below(&rng, 20));
            (side ? targets : sources)[i] = text;
        }
    }
    CHECK_OK(attn_corpus_from_strings((const char *const *)sources, (const char *const *)targets, n,
                                      &s.corpus));
    char **both = test_alloc(2 * (size_t)n * sizeof *both);
    memcpy(both, sources, (size_t)n * sizeof *both);
    memcpy(both + n, targets, (size_t)n * sizeof *both);
    s.tokenizer = train("word", (const char *const *)both, 2 * n);
    CHECK_OK(attn_corpus_encode(s.corpus, s.tokenizer, s.tokenizer));
    for (int i = 0; i < n; i++) {
        free(sources[i]);
        free(targets[i]);
    }
    free(sources);
    free(targets);
    free(both);
    return s;
}

static void free_synthetic(synthetic *s)
{
    attn_corpus_destroy(s->corpus);
    attn_tokenizer_destroy(s->tokenizer);
}

/* Checks one batch against the corpus: shapes, padding, lengths, the token budget. */
static int batch_is_consistent(const attn_corpus *corpus, const attn_batch *batch,
                               int64_t batch_tokens)
{
    int ok = batch->size > 0;
    int32_t longest_source = 0, longest_target = 0;
    for (int64_t r = 0; r < batch->size; r++) {
        const int32_t *ids;
        int64_t length;
        attn_corpus_source_ids(corpus, batch->pairs[r], &ids, &length);
        ok &= batch->source_lengths[r] == length;
        for (int64_t j = 0; j < batch->source_len; j++)
            ok &= batch->source[r * batch->source_len + j] == (j < length ? ids[j] : ATTN_PAD_ID);
        attn_corpus_target_ids(corpus, batch->pairs[r], &ids, &length);
        ok &= batch->target_lengths[r] == length;
        for (int64_t j = 0; j < batch->target_len; j++)
            ok &= batch->target[r * batch->target_len + j] == (j < length ? ids[j] : ATTN_PAD_ID);
        if (batch->source_lengths[r] > longest_source)
            longest_source = batch->source_lengths[r];
        if (batch->target_lengths[r] > longest_target)
            longest_target = batch->target_lengths[r];
    }
    ok &= batch->source_len == longest_source && batch->target_len == longest_target;
    ok &= batch->size == 1 || batch->size * (batch->source_len + batch->target_len) <= batch_tokens;
    return ok;
}

/* Reads one whole epoch; returns the number of batches and fills pairs (in visiting order). */
static int64_t read_epoch(attn_batcher *batcher, const attn_corpus *corpus, int64_t batch_tokens,
                          int64_t *pairs, int64_t *batch_sizes, int *consistent)
{
    int64_t epoch, index, filled = 0;
    attn_batcher_position(batcher, &epoch, &index);
    int64_t batches = attn_batcher_num_batches(batcher);
    *consistent = index == 0;
    for (int64_t b = 0; b < batches; b++) {
        const attn_batch *batch = NULL;
        CHECK_OK(attn_batcher_next(batcher, &batch));
        if (batch == NULL)
            return b;
        *consistent &= batch->epoch == epoch && batch->index == b &&
                       batch_is_consistent(corpus, batch, batch_tokens);
        memcpy(pairs + filled, batch->pairs, (size_t)batch->size * sizeof *pairs);
        filled += batch->size;
        batch_sizes[b] = batch->size;
    }
    int64_t next_epoch, next_index;
    attn_batcher_position(batcher, &next_epoch, &next_index);
    *consistent &= next_epoch == epoch + 1 && next_index == 0 && filled == attn_corpus_size(corpus);
    return batches;
}

static int each_once(const int64_t *pairs, int64_t n)
{
    int *seen = calloc((size_t)n, sizeof *seen);
    int ok = seen != NULL;
    for (int64_t i = 0; i < n && ok; i++) {
        ok = pairs[i] >= 0 && pairs[i] < n && !seen[pairs[i]];
        if (ok)
            seen[pairs[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_batches_cover_each_pair_once_within_budget(void)
{
    const int n = 700;
    synthetic s = make_synthetic(n, 30, 11);
    if (s.corpus == NULL)
        return;
    int64_t budgets[] = {64, 500, 4096, 1000000};
    int64_t *pairs = test_alloc((size_t)n * sizeof *pairs);
    int64_t *sizes = test_alloc((size_t)n * sizeof *sizes);
    for (int b = 0; b < 4; b++) {
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            attn_batcher_config config = {budgets[b], 5, shuffle};
            attn_batcher *batcher = NULL;
            CHECK_OK(attn_batcher_create(s.corpus, &config, &batcher));
            if (batcher == NULL)
                continue;
            for (int epoch = 0; epoch < 3; epoch++) {
                int consistent;
                int64_t batches =
                    read_epoch(batcher, s.corpus, budgets[b], pairs, sizes, &consistent);
                CHECK(consistent,
                      "budget %lld shuffle %d epoch %d: batches match the corpus, "
                      "padded with <pad>, within the budget",
                      (long long)budgets[b], shuffle, epoch);
                CHECK(each_once(pairs, n), "budget %lld shuffle %d epoch %d: every pair once",
                      (long long)budgets[b], shuffle, epoch);
                if (budgets[b] == 1000000)
                    CHECK(batches == 1, "a budget above the corpus: one batch");
            }
            attn_batcher_destroy(batcher);
        }
    }
    free(pairs);
    free(sizes);
    free_synthetic(&s);
}

/* Without shuffling, batches come in length order, and each one is full: the first pair of
 * the next batch would not have fit. */
static void test_batches_are_bucketed_and_full(void)
{
    const int n = 500;
    synthetic s = make_synthetic(n, 25, 12);
    if (s.corpus == NULL)
        return;
    const int64_t budget = 300;
    attn_batcher_config config = {budget, 0, 0};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(s.corpus, &config, &batcher));
    if (batcher == NULL)
        return;
    int64_t batches = attn_batcher_num_batches(batcher);
    int sorted = 1, full = 1;
    int32_t last_source = 0, last_target = 0;
    int32_t previous_longest_source = 0, previous_longest_target = 0;
    int64_t previous_size = 0;
    for (int64_t b = 0; b < batches; b++) {
        const attn_batch *batch = NULL;
        CHECK_OK(attn_batcher_next(batcher, &batch));
        if (batch == NULL)
            break;
        if (b > 0) {
            int32_t s0 = batch->source_lengths[0], t0 = batch->target_lengths[0];
            int64_t longest_s = s0 > previous_longest_source ? s0 : previous_longest_source;
            int64_t longest_t = t0 > previous_longest_target ? t0 : previous_longest_target;
            full &= (previous_size + 1) * (longest_s + longest_t) > budget;
        }
        for (int64_t r = 0; r < batch->size; r++) {
            int32_t sl = batch->source_lengths[r], tl = batch->target_lengths[r];
            sorted &= sl > last_source || (sl == last_source && tl >= last_target);
            last_source = sl;
            last_target = tl;
        }
        previous_size = batch->size;
        previous_longest_source = (int32_t)batch->source_len;
        previous_longest_target = (int32_t)batch->target_len;
    }
    CHECK(sorted, "rows in (source length, target length) order");
    CHECK(full, "greedy: no batch could have taken the next pair");
    attn_batcher_destroy(batcher);
    free_synthetic(&s);
}

static void epoch_order(attn_batcher *batcher, const attn_corpus *corpus, int64_t *pairs,
                        int64_t *sizes, int64_t *batches)
{
    int consistent;
    *batches = read_epoch(batcher, corpus, 400, pairs, sizes, &consistent);
    CHECK(consistent, "epoch consistent");
}

static void test_seeded_order_and_exact_resume(void)
{
    const int n = 600;
    synthetic s = make_synthetic(n, 20, 13);
    if (s.corpus == NULL)
        return;
    attn_batcher_config config = {400, 42, 1};
    attn_batcher *a = NULL, *b = NULL;
    CHECK_OK(attn_batcher_create(s.corpus, &config, &a));
    CHECK_OK(attn_batcher_create(s.corpus, &config, &b));
    config.seed = 43;
    attn_batcher *other = NULL;
    CHECK_OK(attn_batcher_create(s.corpus, &config, &other));
    if (a == NULL || b == NULL || other == NULL)
        return;
    int64_t *pa[3], *pb[3], *po = test_alloc((size_t)n * sizeof *po);
    int64_t *sizes = test_alloc((size_t)n * sizeof *sizes);
    int64_t batches[3], batches_b, batches_other;
    for (int e = 0; e < 3; e++) {
        pa[e] = test_alloc((size_t)n * sizeof *pa[e]);
        pb[e] = test_alloc((size_t)n * sizeof *pb[e]);
        epoch_order(a, s.corpus, pa[e], sizes, &batches[e]);
        epoch_order(b, s.corpus, pb[e], sizes, &batches_b);
        CHECK(batches[e] == batches_b && memcmp(pa[e], pb[e], (size_t)n * sizeof *pa[e]) == 0,
              "epoch %d: same seed, same order", e);
    }
    epoch_order(other, s.corpus, po, sizes, &batches_other);
    CHECK(memcmp(pa[0], po, (size_t)n * sizeof *po) != 0, "another seed, another order");
    CHECK(memcmp(pa[0], pa[1], (size_t)n * sizeof *po) != 0 &&
              memcmp(pa[1], pa[2], (size_t)n * sizeof *po) != 0,
          "each epoch is shuffled anew");

    /* Resume: a fresh batcher seeking to (epoch 1, batch k) gives the rest of epoch 1 and then
     * epoch 2 exactly as the uninterrupted run did. */
    attn_batcher *resumed = NULL;
    config.seed = 42;
    CHECK_OK(attn_batcher_create(s.corpus, &config, &resumed));
    int64_t k = batches[1] / 2;
    CHECK_OK(attn_batcher_seek(resumed, 1, k));
    int64_t epoch, index;
    attn_batcher_position(resumed, &epoch, &index);
    CHECK(epoch == 1 && index == k, "position after seek");
    CHECK(attn_batcher_num_batches(resumed) == batches[1], "the epoch's batch count");
    /* The pairs of batches 0..k-1 of epoch 1, to skip in the recorded order. */
    attn_batcher *counter = NULL;
    CHECK_OK(attn_batcher_create(s.corpus, &config, &counter));
    CHECK_OK(attn_batcher_seek(counter, 1, 0));
    int64_t skipped_pairs = 0;
    for (int64_t i = 0; i < k; i++) {
        const attn_batch *batch;
        CHECK_OK(attn_batcher_next(counter, &batch));
        skipped_pairs += batch->size;
    }
    int same = 1;
    int64_t offset = skipped_pairs;
    while (1) {
        const attn_batch *batch = NULL;
        attn_batcher_position(resumed, &epoch, &index);
        if (epoch == 3)
            break;
        CHECK_OK(attn_batcher_next(resumed, &batch));
        if (batch == NULL)
            break;
        if (epoch == 2 && index == 0)
            offset = 0;
        same &= memcmp(batch->pairs, pa[epoch] + offset, (size_t)batch->size * sizeof *po) == 0;
        offset += batch->size;
    }
    CHECK(same, "resumed run matches the uninterrupted one");

    CHECK_FAILS(attn_batcher_seek(resumed, 0, attn_batcher_num_batches(a) + 1000),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_batcher_position(resumed, &epoch, &index);
    CHECK(epoch == 3 && index == 0, "a failed seek leaves the position alone");
    CHECK_FAILS(attn_batcher_seek(resumed, -1, 0), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_batcher_seek(resumed, 0, -1), ATTN_ERR_INVALID_ARGUMENT);

    for (int e = 0; e < 3; e++) {
        free(pa[e]);
        free(pb[e]);
    }
    free(po);
    free(sizes);
    attn_batcher_destroy(a);
    attn_batcher_destroy(b);
    attn_batcher_destroy(other);
    attn_batcher_destroy(resumed);
    attn_batcher_destroy(counter);
    free_synthetic(&s);
}

static void test_unshuffled_epochs_repeat(void)
{
    synthetic s = make_synthetic(200, 15, 14);
    if (s.corpus == NULL)
        return;
    attn_batcher_config config = {200, 7, 0};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(s.corpus, &config, &batcher));
    if (batcher == NULL)
        return;
    int64_t first[200], second[200], sizes[200], b1, b2;
    int consistent;
    b1 = read_epoch(batcher, s.corpus, 200, first, sizes, &consistent);
    b2 = read_epoch(batcher, s.corpus, 200, second, sizes, &consistent);
    CHECK(b1 == b2 && memcmp(first, second, sizeof first) == 0, "same order every epoch");
    attn_batcher_destroy(batcher);
    free_synthetic(&s);
}

static void test_oversized_pair_is_alone(void)
{
    const char *sources[] = {"a", "a b", "a b c d e f g h i j k l", "b", "a a"};
    const char *targets[] = {"x", "x y", "x", "y", "y y"};
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_from_strings(sources, targets, 5, &corpus));
    attn_tokenizer *words = train("word", sources, 5);
    attn_tokenizer *target_words = train("word", targets, 5);
    CHECK_OK(attn_corpus_encode(corpus, words, target_words));
    attn_batcher_config config = {10, 1, 1};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(corpus, &config, &batcher));
    int64_t pairs[5], sizes[5];
    int consistent = 0;
    int64_t batches =
        batcher != NULL ? read_epoch(batcher, corpus, 10, pairs, sizes, &consistent) : 0;
    CHECK(consistent && each_once(pairs, 5), "consistent epoch");
    int alone = 0;
    for (int64_t b = 0, offset = 0; b < batches; offset += sizes[b], b++)
        for (int64_t r = 0; r < sizes[b]; r++)
            if (pairs[offset + r] == 2)
                alone = sizes[b] == 1;
    CHECK(alone, "the 12-token source (15 tokens with its target) forms a batch of its own");
    attn_batcher_destroy(batcher);

    config.batch_tokens = 0;
    CHECK_FAILS(attn_batcher_create(corpus, &config, &batcher), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_batcher_create(NULL, &config, &batcher), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_batcher_create(corpus, NULL, &batcher), ATTN_ERR_INVALID_ARGUMENT);
    const attn_batch *batch;
    CHECK_FAILS(attn_batcher_next(NULL, &batch), ATTN_ERR_INVALID_ARGUMENT);
    attn_corpus *raw = NULL;
    CHECK_OK(attn_corpus_from_strings(sources, targets, 5, &raw));
    config.batch_tokens = 10;
    CHECK_FAILS(attn_batcher_create(raw, &config, &batcher), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("encoded", NULL), "says the corpus needs encoding: %s", attn_last_error());
    attn_corpus_destroy(raw);
    attn_corpus_destroy(corpus);
    attn_tokenizer_destroy(words);
    attn_tokenizer_destroy(target_words);
}

/* The real G2P training set, char -> word, one epoch: every pair once, budget kept. */
static void test_batches_on_g2p(void)
{
    const char *path = shared_data_file(0, "g2p-std/dev.tsv");
    if (path == NULL) {
        skipped("test_batches_on_g2p");
        return;
    }
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_read_tsv(path, &corpus));
    if (corpus == NULL)
        return;
    int64_t n = attn_corpus_size(corpus);
    attn_tokenizer *letters = train("char", attn_corpus_sources(corpus), n);
    attn_tokenizer *phonemes = train("word", attn_corpus_targets(corpus), n);
    CHECK_OK(attn_corpus_encode(corpus, letters, phonemes));
    attn_batcher_config config = {2048, 3, 1};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create(corpus, &config, &batcher));
    int64_t *pairs = test_alloc((size_t)n * sizeof *pairs);
    int64_t *sizes = test_alloc((size_t)n * sizeof *sizes);
    int consistent = 0;
    int64_t batches =
        batcher != NULL ? read_epoch(batcher, corpus, 2048, pairs, sizes, &consistent) : 0;
    CHECK(consistent && each_once(pairs, n), "G2P epoch: %lld batches, each pair once",
          (long long)batches);
    free(pairs);
    free(sizes);
    attn_batcher_destroy(batcher);
    attn_tokenizer_destroy(letters);
    attn_tokenizer_destroy(phonemes);
    attn_corpus_destroy(corpus);
}

/* Pairs over either limit go; the rest keep their order, strings, ids and file lines. */
static void test_drop_longer(void)
{
    const char *sources[] = {"abc", "abcdefgh", "ab", "a", "abcd"};
    const char *targets[] = {"x y", "x", "x y z w", "y", "x y z"};
    attn_corpus *corpus = NULL;
    CHECK_OK(attn_corpus_from_strings(sources, targets, 5, &corpus));
    if (corpus == NULL)
        return;
    attn_tokenizer *letters = train("char", sources, 5);
    attn_tokenizer *words = train("word", targets, 5);
    int64_t dropped = -1;
    CHECK_FAILS(attn_corpus_drop_longer(corpus, 4, 3, &dropped), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("not encoded", NULL), "says why: %s", attn_last_error());
    CHECK_OK(attn_corpus_encode(corpus, letters, words));
    CHECK_FAILS(attn_corpus_drop_longer(corpus, 0, 3, &dropped), ATTN_ERR_INVALID_ARGUMENT);
    /* "abcdefgh" has 8 > 4 source tokens; "x y z w" has 4 > 3 target tokens. */
    CHECK_OK(attn_corpus_drop_longer(corpus, 4, 3, &dropped));
    CHECK(dropped == 2, "dropped %lld, expected 2", (long long)dropped);
    const int kept[] = {0, 3, 4};
    CHECK(attn_corpus_size(corpus) == 3, "size %lld", (long long)attn_corpus_size(corpus));
    for (int64_t k = 0; k < attn_corpus_size(corpus) && k < 3; k++) {
        const int i = kept[k];
        CHECK(strcmp(attn_corpus_sources(corpus)[k], sources[i]) == 0 &&
                  strcmp(attn_corpus_targets(corpus)[k], targets[i]) == 0,
              "pair %lld is the old pair %d", (long long)k, i);
        int32_t *expected;
        int64_t n, length;
        const int32_t *ids;
        CHECK_OK(attn_tokenizer_encode(letters, sources[i], &expected, &n));
        CHECK_OK(attn_corpus_source_ids(corpus, k, &ids, &length));
        CHECK(length == n && memcmp(ids, expected, (size_t)n * sizeof *ids) == 0,
              "source ids of pair %lld", (long long)k);
        free(expected);
        CHECK_OK(attn_tokenizer_encode(words, targets[i], &expected, &n));
        CHECK_OK(attn_corpus_target_ids(corpus, k, &ids, &length));
        CHECK(length == n + 2 && memcmp(ids + 1, expected, (size_t)n * sizeof *ids) == 0,
              "target ids of pair %lld", (long long)k);
        free(expected);
    }
    /* Limits that every pair meets drop nothing. */
    CHECK_OK(attn_corpus_drop_longer(corpus, 4, 3, &dropped));
    CHECK(dropped == 0 && attn_corpus_size(corpus) == 3, "nothing more to drop");
    attn_tokenizer_destroy(letters);
    attn_tokenizer_destroy(words);
    attn_corpus_destroy(corpus);
}

/* Pairs "<i>" -> "t<i>", for checking which pairs went where. */
static attn_corpus *numbered_corpus(int64_t n)
{
    char **sources = calloc((size_t)n, sizeof *sources),
         **targets = calloc((size_t)n, sizeof *targets);
    attn_corpus *corpus = NULL;
    for (int64_t i = 0; sources != NULL && targets != NULL && i < n; i++) {
        sources[i] = malloc(24);
        targets[i] = malloc(24);
        if (sources[i] != NULL && targets[i] != NULL) {
            snprintf(sources[i], 24, "%lld", (long long)i);
            snprintf(targets[i], 24, "t%lld", (long long)i);
        }
    }
    CHECK_OK(attn_corpus_from_strings((const char *const *)sources, (const char *const *)targets, n,
                                      &corpus));
    for (int64_t i = 0; sources != NULL && targets != NULL && i < n; i++) {
        free(sources[i]);
        free(targets[i]);
    }
    free(sources);
    free(targets);
    return corpus;
}

static void test_hold_out_is_a_seeded_split(void)
{
    enum { N = 200, HELD = 10 };
    attn_corpus *a = numbered_corpus(N), *b = numbered_corpus(N), *c = numbered_corpus(N);
    attn_corpus *held_a = NULL, *held_b = NULL, *held_c = NULL;
    if (a == NULL || b == NULL || c == NULL)
        goto done;
    CHECK_OK(attn_corpus_hold_out(a, HELD, 7, &held_a));
    CHECK_OK(attn_corpus_hold_out(b, HELD, 7, &held_b));
    CHECK_OK(attn_corpus_hold_out(c, HELD, 8, &held_c));
    if (held_a == NULL || held_b == NULL || held_c == NULL)
        goto done;
    CHECK(attn_corpus_size(a) == N - HELD && attn_corpus_size(held_a) == HELD, "sizes %lld + %lld",
          (long long)attn_corpus_size(a), (long long)attn_corpus_size(held_a));
    /* The same seed holds out the same pairs (what --resume relies on); another seed others. */
    int same = 1, other = 1;
    for (int64_t i = 0; i < HELD; i++) {
        same &= strcmp(attn_corpus_sources(held_a)[i], attn_corpus_sources(held_b)[i]) == 0;
        other &= strcmp(attn_corpus_sources(held_a)[i], attn_corpus_sources(held_c)[i]) == 0;
    }
    CHECK(same, "seed 7 twice holds out the same pairs");
    CHECK(!other, "seeds 7 and 8 hold out different pairs");
    /* Every pair is in exactly one part, with its own target, both parts in file order. */
    int seen[N] = {0};
    const attn_corpus *parts[] = {a, held_a};
    for (int part = 0; part < 2; part++) {
        long previous = -1;
        for (int64_t i = 0; i < attn_corpus_size(parts[part]); i++) {
            const long k = strtol(attn_corpus_sources(parts[part])[i], NULL, 10);
            char target[24];
            snprintf(target, sizeof target, "t%ld", k);
            CHECK(k > previous && strcmp(attn_corpus_targets(parts[part])[i], target) == 0,
                  "part %d pair %lld: %s -> %s", part, (long long)i,
                  attn_corpus_sources(parts[part])[i], attn_corpus_targets(parts[part])[i]);
            if (k >= 0 && k < N)
                seen[k]++;
            previous = k;
        }
    }
    int once = 1;
    for (int k = 0; k < N; k++)
        once &= seen[k] == 1;
    CHECK(once, "every pair lands in exactly one part");
    attn_corpus *none = NULL;
    CHECK_FAILS(attn_corpus_hold_out(a, 0, 7, &none), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_corpus_hold_out(a, N - HELD, 7, &none), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(none == NULL, "no corpus after a failure");
done:
    attn_corpus_destroy(held_a);
    attn_corpus_destroy(held_b);
    attn_corpus_destroy(held_c);
    attn_corpus_destroy(a);
    attn_corpus_destroy(b);
    attn_corpus_destroy(c);
}

int main(void)
{
    RUN_TEST(test_tsv_reads_pairs);
    RUN_TEST(test_hold_out_is_a_seeded_split);
    RUN_TEST(test_tsv_errors_name_file_and_line);
    RUN_TEST(test_aligned_files);
    RUN_TEST(test_real_corpora_read);
    RUN_TEST(test_encode_convention);
    RUN_TEST(test_drop_longer);
    RUN_TEST(test_batches_cover_each_pair_once_within_budget);
    RUN_TEST(test_batches_are_bucketed_and_full);
    RUN_TEST(test_seeded_order_and_exact_resume);
    RUN_TEST(test_unshuffled_epochs_repeat);
    RUN_TEST(test_oversized_pair_is_alone);
    RUN_TEST(test_batches_on_g2p);
    return test_summary();
}
