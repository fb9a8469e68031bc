/* A language model's data: text as one token stream (each line's ids, then </s>), llm.c's
 * token files mapped and written (from a stream, or from text a line at a time), the line
 * reader beside attn_lines_read, tokenizer files, and the windows batches are cut into (llm.c's
 * loader order, shuffled epochs, wrapping, resume by position). */
#include "data_test_util.h"

static attn_token_stream *stream_of(const int32_t *ids, int64_t n)
{
    attn_token_stream *s = NULL;
    CHECK_OK(attn_token_stream_from_ids(ids, n, &s));
    return s;
}

static void test_text_ends_each_line_with_eos(void)
{
    const char *lines[] = {"ab", "", "ba"};
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, 3, &tokenizer));
    attn_token_stream *s = NULL;
    CHECK_OK(attn_token_stream_from_text(tokenizer, lines, 3, &s));
    CHECK(attn_token_stream_size(s) == 7, "ab </s>, </s>, ba </s>: 7 tokens, got %lld",
          (long long)attn_token_stream_size(s));
    int32_t ids[7] = {0};
    CHECK_OK(attn_token_stream_read(s, 0, 7, ids));
    int32_t *a = NULL, *b = NULL;
    int64_t na = 0, nb = 0;
    CHECK_OK(attn_tokenizer_encode(tokenizer, "ab", &a, &na));
    CHECK_OK(attn_tokenizer_encode(tokenizer, "ba", &b, &nb));
    CHECK(na == 2 && nb == 2 && ids[0] == a[0] && ids[1] == a[1] && ids[2] == ATTN_EOS_ID &&
              ids[3] == ATTN_EOS_ID && ids[4] == b[0] && ids[5] == b[1] && ids[6] == ATTN_EOS_ID,
          "ab </s> </s> ba </s>");
    CHECK_FAILS(attn_token_stream_read(s, 5, 3, ids), ATTN_ERR_INVALID_ARGUMENT);
    free(a);
    free(b);
    attn_token_stream_destroy(s);
    attn_tokenizer_destroy(tokenizer);
}

static void test_llmc_token_file_round_trip_and_refusals(void)
{
    int32_t ids[300];
    for (int i = 0; i < 300; i++)
        ids[i] = (i * 7919) % 65536;
    attn_token_stream *s = stream_of(ids, 300);
    const char *path = test_write_scratch_text("tokens.bin", "");
    CHECK_OK(attn_token_stream_write_llmc(s, path));
    attn_token_stream *mapped = NULL;
    CHECK_OK(attn_token_stream_map_llmc(path, &mapped));
    int32_t back[300] = {0};
    CHECK_OK(attn_token_stream_read(mapped, 0, 300, back));
    CHECK(attn_token_stream_size(mapped) == 300 && memcmp(back, ids, sizeof ids) == 0,
          "the mapped file gives the ids back");
    CHECK(attn_token_stream_fingerprint(mapped) == attn_token_stream_fingerprint(s),
          "the same tokens, the same fingerprint, whatever holds them");
    CHECK(attn_token_stream_max_id(mapped) == attn_token_stream_max_id(s), "max id");
    CHECK(attn_token_stream_tokenizer(mapped, NULL) == 0, "a file of ids names no tokenizer");
    attn_token_stream_destroy(mapped);

    /* llm.c's header: magic 20240520 at byte 0, the count at byte 8. */
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL, "reopen");
    if (f != NULL) {
        unsigned char wrong[4] = {0x59, 0x09, 0x35, 0x01}; /* 20240521 */
        fwrite(wrong, 1, 4, f);
        fclose(f);
    }
    CHECK_FAILS(attn_token_stream_map_llmc(path, &mapped), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "not an llm.c token file") != NULL, "names the problem: %s",
          attn_last_error());
    CHECK_OK(attn_token_stream_write_llmc(s, path));
    CHECK(truncate(path, 1024 + 2 * 299) == 0, "truncate");
    CHECK_FAILS(attn_token_stream_map_llmc(path, &mapped), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "truncated") != NULL, "says truncated: %s", attn_last_error());
    const char *tiny = test_write_scratch_text("tiny.bin", "short");
    CHECK_FAILS(attn_token_stream_map_llmc(tiny, &mapped), ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_token_stream_map_llmc("/nonexistent/t.bin", &mapped), ATTN_ERR_IO);
    attn_token_stream_destroy(s);

    int32_t big[1] = {70000};
    s = stream_of(big, 1);
    CHECK_FAILS(attn_token_stream_write_llmc(s, path), ATTN_ERR_INVALID_ARGUMENT);
    attn_token_stream_destroy(s);
}

/* llm.c's loader: batch k holds tokens [k B T, k B T + B T + 1), row b the window starting at
 * k B T + b T; after the last whole batch it starts again. */
static void test_windows_in_file_order_wrap_like_llmc(void)
{
    enum { N = 2 * 3 * 4 + 5, B = 3, T = 4 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = 100 + i;
    attn_token_stream *s = stream_of(ids, N);
    attn_window_config config = {B, T, 7, 0};
    attn_batcher *batcher = NULL;
    CHECK_OK(attn_batcher_create_windows(s, &config, &batcher));
    CHECK(attn_batcher_num_batches(batcher) == 2, "(N - 1) / T = 7 windows, 2 batches of 3");
    for (int step = 0; step < 5; step++) {
        const attn_batch *batch = NULL;
        CHECK_OK(attn_batcher_next(batcher, &batch));
        if (batch == NULL)
            break;
        const int k = step % 2;
        int ok = batch->size == B && batch->target_len == T + 1 && batch->source_len == 0;
        for (int b = 0; ok && b < B; b++) {
            ok = batch->target_lengths[b] == T + 1 && batch->pairs[b] == k * B + b;
            for (int t = 0; t <= T; t++)
                ok = ok && batch->target[b * (T + 1) + t] == ids[k * B * T + b * T + t];
        }
        CHECK(ok, "step %d reads batch %d in file order", step, k);
        CHECK(batch->epoch == step / 2, "epoch %lld at step %d", (long long)batch->epoch, step);
    }
    attn_batcher_destroy(batcher);

    config.sequences = 8;
    CHECK_FAILS(attn_batcher_create_windows(s, &config, &batcher), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "too few") != NULL, "says why: %s", attn_last_error());
    attn_token_stream_destroy(s);
}

/* Shuffled: each epoch's windows are a permutation drawn from (seed, epoch); every window in a
 * whole batch is used at most once per epoch; seeking back reproduces a batch. */
static void test_shuffled_windows_are_a_seeded_permutation(void)
{
    enum { N = 10 * 5 + 1, B = 2, T = 5, W = 10 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = i;
    attn_token_stream *s = stream_of(ids, N);
    attn_window_config config = {B, T, 3, 1};
    attn_batcher *one = NULL, *two = NULL;
    CHECK_OK(attn_batcher_create_windows(s, &config, &one));
    CHECK_OK(attn_batcher_create_windows(s, &config, &two));
    int64_t first_epoch[W], second_epoch[W];
    for (int e = 0; e < 2; e++) {
        int seen[W] = {0};
        for (int k = 0; k < W / B; k++) {
            const attn_batch *batch = NULL;
            CHECK_OK(attn_batcher_next(one, &batch));
            for (int b = 0; batch != NULL && b < B; b++) {
                const int64_t w = batch->pairs[b];
                (e == 0 ? first_epoch : second_epoch)[k * B + b] = w;
                CHECK(w >= 0 && w < W && batch->target[b * (T + 1)] == w * T,
                      "row holds window %lld", (long long)w);
                if (w >= 0 && w < W)
                    seen[w]++;
            }
        }
        int once = 1;
        for (int w = 0; w < W; w++)
            once = once && seen[w] == 1;
        CHECK(once, "epoch %d visits every window once", e);
    }
    CHECK(memcmp(first_epoch, second_epoch, sizeof first_epoch) != 0, "epochs differ in order");
    CHECK_OK(attn_batcher_seek(two, 1, 2));
    const attn_batch *batch = NULL;
    CHECK_OK(attn_batcher_next(two, &batch));
    CHECK(batch != NULL && batch->pairs[0] == second_epoch[4] && batch->pairs[1] == second_epoch[5],
          "seek(1, 2) gives epoch 1's third batch again");
    attn_batcher_destroy(one);
    attn_batcher_destroy(two);
    attn_token_stream_destroy(s);
}

/* The line reader gives what attn_lines_read gives, line for line, and fails where it fails
 * with the same message: the token file and the text must hold the same lines. */
static void test_line_reader_reads_as_lines_read_does(void)
{
    static const struct {
        const char *bytes;
        size_t size;
    } texts[] = {
        {"a\nb\n", 4},       {"a\nb", 3},           {"\n\n", 2}, {"\xEF\xBB\xBFx\r\ny", 8},
        {"\xEF\xBB\xBF", 3}, {"\xEF\xBB\xBF\n", 4}, {"", 0},     {"ok\nbad\xFF\n", 8},
        {"ok\nnul\0x\n", 9}, {"r\r\r\n\r", 5},
    };
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        const char *path = test_write_scratch("reader.txt", texts[t].bytes, texts[t].size);
        attn_lines whole;
        const attn_status expected = attn_lines_read(path, &whole);
        char expected_message[512];
        snprintf(expected_message, sizeof expected_message, "%s",
                 strchr(attn_last_error(), ' ') != NULL ? strchr(attn_last_error(), ' ') : "");
        attn_line_reader *reader = NULL;
        CHECK_OK(attn_line_reader_open(path, &reader));
        attn_status status = ATTN_OK;
        int64_t n = 0;
        int same = 1;
        for (;;) {
            const char *line = NULL;
            status = attn_line_reader_next(reader, &line);
            if (status != ATTN_OK || line == NULL)
                break;
            same =
                same && expected == ATTN_OK && n < whole.count && strcmp(line, whole.line[n]) == 0;
            n++;
        }
        CHECK(status == expected, "text %zu: reader says %d, attn_lines_read %d", t, (int)status,
              (int)expected);
        if (expected == ATTN_OK)
            CHECK(same && n == whole.count && attn_line_reader_lines(reader) == n,
                  "text %zu: the same %lld lines", t, (long long)whole.count);
        else
            CHECK(strstr(attn_last_error(), expected_message) != NULL,
                  "text %zu: the same message, '%s' in '%s'", t, expected_message,
                  attn_last_error());
        attn_line_reader_close(reader);
        attn_lines_free(&whole);
    }
    attn_line_reader *reader = NULL;
    CHECK_FAILS(attn_line_reader_open("/nonexistent/text.txt", &reader), ATTN_ERR_IO);
    CHECK(strstr(attn_last_error(), "/nonexistent/text.txt") != NULL, "names the file: %s",
          attn_last_error());
}

typedef struct lines_in_memory {
    const char *const *lines;
    int64_t n, next;
} lines_in_memory;

static attn_status next_in_memory(void *context, const char **line)
{
    lines_in_memory *m = context;
    *line = m->next < m->n ? m->lines[m->next++] : NULL;
    return ATTN_OK;
}

static attn_status next_from_reader(void *context, const char **line)
{
    return attn_line_reader_next(context, line);
}

/* Written a line at a time, the file holds the stream attn_token_stream_from_text makes; a
 * failure of the text leaves the file that was there. */
static void test_token_file_written_from_text_equals_the_stream(void)
{
    const char *lines[] = {"the cat", "", "sat on the mat", "\xC3\xA9t\xC3\xA9"};
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    config.byte_fallback = 1;
    CHECK_OK(attn_tokenizer_train(&config, lines, 3, &tokenizer)); /* not the last line */
    attn_token_stream *expected = NULL;
    CHECK_OK(attn_token_stream_from_text(tokenizer, lines, 4, &expected));
    const char *path = test_write_scratch_text("from_text.bin", "");
    lines_in_memory source = {lines, 4, 0};
    int64_t tokens = 0;
    CHECK_OK(attn_token_file_write_text(tokenizer, next_in_memory, &source, path, &tokens));
    attn_token_stream *written = NULL;
    CHECK_OK(attn_token_stream_map_llmc(path, &written));
    const int64_t n = attn_token_stream_size(expected);
    CHECK(tokens == n && attn_token_stream_size(written) == n &&
              attn_token_stream_fingerprint(written) == attn_token_stream_fingerprint(expected),
          "the same %lld tokens (wrote %lld)", (long long)n, (long long)tokens);
    uint64_t made_by = 0, fingerprint = 1;
    CHECK_OK(attn_tokenizer_fingerprint(tokenizer, &fingerprint));
    CHECK(attn_token_stream_tokenizer(written, &made_by) == 1 && made_by == fingerprint,
          "the header names the tokenizer");
    CHECK(attn_token_stream_tokenizer(expected, &made_by) == 0, "text names none");
    attn_token_stream_destroy(written);

    const char *bad = test_write_scratch_text("bad.txt", "the cat\nsat \xFF\n");
    attn_line_reader *reader = NULL;
    CHECK_OK(attn_line_reader_open(bad, &reader));
    CHECK_FAILS(attn_token_file_write_text(tokenizer, next_from_reader, reader, path, &tokens),
                ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "bad.txt:2: invalid UTF-8") != NULL,
          "the text's message, not a failed write's: %s", attn_last_error());
    attn_line_reader_close(reader);
    CHECK_OK(attn_token_stream_map_llmc(path, &written));
    CHECK(attn_token_stream_fingerprint(written) == attn_token_stream_fingerprint(expected),
          "a failed write leaves the old file");
    attn_token_stream_destroy(written);
    attn_token_stream_destroy(expected);
    attn_tokenizer_destroy(tokenizer);

    /* More ids than uint16 holds: refused before anything is read. */
    enum { WORDS = 65600 };
    char **words = malloc(WORDS * sizeof *words);
    for (int i = 0; words != NULL && i < WORDS; i++) {
        words[i] = malloc(16);
        snprintf(words[i], 16, "w%d", i);
    }
    CHECK_OK(attn_tokenizer_config_parse("word", &config));
    CHECK_OK(attn_tokenizer_train(&config, (const char *const *)words, WORDS, &tokenizer));
    source = (lines_in_memory){(const char *const *)words, WORDS, 0};
    CHECK_FAILS(attn_token_file_write_text(tokenizer, next_in_memory, &source, path, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "65536") != NULL && source.next == 0,
          "says why, reads nothing: %s", attn_last_error());
    attn_tokenizer_destroy(tokenizer);
    for (int i = 0; words != NULL && i < WORDS; i++)
        free(words[i]);
    free(words);
}

static void test_tokenizer_file_round_trip_and_refusals(void)
{
    const char *lines[] = {"low lower lowest", "newer newest"};
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL, *back = NULL;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    config.byte_fallback = 1;
    CHECK_OK(attn_tokenizer_train(&config, lines, 2, &tokenizer));
    const char *path = test_write_scratch_text("tokenizer.json", "");
    CHECK_OK(attn_tokenizer_save(tokenizer, path));
    CHECK_OK(attn_tokenizer_load(path, &back));
    char *a = NULL, *b = NULL;
    CHECK_OK(attn_tokenizer_to_json(tokenizer, &a));
    CHECK_OK(attn_tokenizer_to_json(back, &b));
    CHECK(a != NULL && b != NULL && strcmp(a, b) == 0, "the same tokenizer back");
    uint64_t fa = 0, fb = 1;
    CHECK_OK(attn_tokenizer_fingerprint(tokenizer, &fa));
    CHECK_OK(attn_tokenizer_fingerprint(back, &fb));
    CHECK(fa == fb, "the same fingerprint back");
    free(a);
    free(b);
    attn_tokenizer_destroy(back);
    attn_tokenizer_destroy(tokenizer);

    const char *text = test_write_scratch_text("not_tokenizer.json", "{\"tokens\": []}");
    CHECK_FAILS(attn_tokenizer_load(text, &back), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "not a tokenizer's JSON") != NULL &&
              strstr(attn_last_error(), "not_tokenizer.json") != NULL,
          "names file and problem: %s", attn_last_error());
    const char binary[] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
    const char *model = test_write_scratch("model.safetensors", binary, sizeof binary);
    CHECK_FAILS(attn_tokenizer_load(model, &back), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "binary file") != NULL, "says binary: %s", attn_last_error());
    CHECK_FAILS(attn_tokenizer_load("/nonexistent/t.json", &back), ATTN_ERR_IO);
    CHECK(back == NULL, "nothing on failure");
}

int main(void)
{
    RUN_TEST(test_text_ends_each_line_with_eos);
    RUN_TEST(test_llmc_token_file_round_trip_and_refusals);
    RUN_TEST(test_windows_in_file_order_wrap_like_llmc);
    RUN_TEST(test_shuffled_windows_are_a_seeded_permutation);
    RUN_TEST(test_line_reader_reads_as_lines_read_does);
    RUN_TEST(test_token_file_written_from_text_equals_the_stream);
    RUN_TEST(test_tokenizer_file_round_trip_and_refusals);
    return test_summary();
}
