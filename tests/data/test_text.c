/* UTF-8 validation, reading lines (errors by file and line), vocabularies and their JSON. */
#include "data_test_util.h"

static void test_utf8_accepts_valid_text(void)
{
    static const char *valid[] = {
        "",
        "plain ASCII ~",
        "a\xC3\xB1o",          /* año */
        "\xE2\x82\xAC",        /* euro sign */
        "\xF0\x9D\x84\x9E",    /* U+1D11E, four bytes */
        "\xED\x9F\xBF",        /* U+D7FF, just below the surrogates */
        "\xEE\x80\x80",        /* U+E000, just above them */
        "\xF4\x8F\xBF\xBF",    /* U+10FFFF, the last code point */
        "\xC2\x80\xDF\xBF",    /* the first and last two-byte code points */
    };
    for (size_t i = 0; i < sizeof valid / sizeof *valid; i++)
        CHECK(attn_utf8_valid(valid[i], strlen(valid[i])), "valid UTF-8 #%zu accepted", i);
}

static void test_utf8_rejects_invalid_text(void)
{
    static const char *invalid[] = {
        "\x80",                /* continuation byte alone */
        "a\xC3",               /* truncated two-byte sequence */
        "\xE2\x82",            /* truncated three-byte sequence */
        "\xC0\xAF",            /* overlong '/' */
        "\xC1\xBF",            /* overlong */
        "\xE0\x80\xAF",        /* overlong, three bytes */
        "\xF0\x80\x80\xAF",    /* overlong, four bytes */
        "\xED\xA0\x80",        /* U+D800, a surrogate */
        "\xED\xBF\xBF",        /* U+DFFF */
        "\xF4\x90\x80\x80",    /* U+110000 */
        "\xF5\x80\x80\x80",    /* lead byte beyond the range */
        "\xFF",
        "\xC3\x28",            /* lead byte followed by ASCII */
    };
    for (size_t i = 0; i < sizeof invalid / sizeof *invalid; i++)
        CHECK(!attn_utf8_valid(invalid[i], strlen(invalid[i])), "invalid UTF-8 #%zu rejected",
              i);
    CHECK(!attn_utf8_valid("a\0b", 3), "a NUL byte is rejected");
}

static void test_lines_split_and_strip(void)
{
    attn_lines lines;
    const char text[] = "\xEF\xBB\xBF" "first\r\n\nthird line\rx\nlast";
    CHECK_OK(attn_lines_parse("mem", text, sizeof text - 1, &lines));
    CHECK(lines.count == 4, "4 lines, got %lld", (long long)lines.count);
    if (lines.count == 4) {
        CHECK(strcmp(lines.line[0], "first") == 0, "BOM and \\r dropped: '%s'", lines.line[0]);
        CHECK(strcmp(lines.line[1], "") == 0, "empty line kept");
        CHECK(strcmp(lines.line[2], "third line\rx") == 0, "inner \\r kept");
        CHECK(strcmp(lines.line[3], "last") == 0, "last line without newline");
    }
    attn_lines_free(&lines);
    CHECK(lines.count == 0 && lines.line == NULL, "free zeroes");
    attn_lines_free(&lines); /* twice is harmless */

    CHECK_OK(attn_lines_parse("mem", "one\ntwo\n", 8, &lines));
    CHECK(lines.count == 2, "a final newline does not start a line");
    attn_lines_free(&lines);
    CHECK_OK(attn_lines_parse("mem", "\n", 1, &lines));
    CHECK(lines.count == 1 && lines.line[0][0] == '\0', "one empty line");
    attn_lines_free(&lines);
}

static void test_lines_errors_name_file_and_line(void)
{
    attn_lines lines;
    const char *bad =
        test_write_scratch_text("bad.txt", "fine\nstill fine\nbroken \xC3\x28 here\nok\n");
    CHECK_FAILS(attn_lines_read(bad, &lines), ATTN_ERR_FORMAT);
    CHECK(message_has("bad.txt:3:", "UTF-8"), "names file and line 3: %s", attn_last_error());
    CHECK(lines.count == 0 && lines.line == NULL, "nothing returned on failure");

    const char *nul = test_write_scratch("nul.txt", "a\nb\0c\n", 6);
    CHECK_FAILS(attn_lines_read(nul, &lines), ATTN_ERR_FORMAT);
    CHECK(message_has("nul.txt:2:", "NUL"), "NUL byte on line 2: %s", attn_last_error());

    const char *empty = test_write_scratch_text("empty.txt", "");
    CHECK_FAILS(attn_lines_read(empty, &lines), ATTN_ERR_FORMAT);
    CHECK(message_has("empty.txt", "no sentences"), "empty file: %s", attn_last_error());
    const char *bom_only = test_write_scratch_text("bom.txt", "\xEF\xBB\xBF");
    CHECK_FAILS(attn_lines_read(bom_only, &lines), ATTN_ERR_FORMAT);

    CHECK_FAILS(attn_lines_read("/nonexistent/attn/file.txt", &lines), ATTN_ERR_IO);
    CHECK(message_has("/nonexistent/attn/file.txt", NULL), "names the path: %s",
          attn_last_error());
    CHECK_FAILS(attn_lines_read(NULL, &lines), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_lines_read(bad, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_lines_parse("mem", NULL, 3, &lines), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_lines_read_real_corpus(void)
{
    const char *path = shared_data_file(0, "bible/dev.es");
    if (path == NULL) {
        skipped("test_lines_read_real_corpus");
        return;
    }
    FILE *f = fopen(path, "rb");
    long newlines = 0;
    for (int c; f != NULL && (c = fgetc(f)) != EOF;)
        newlines += c == '\n';
    if (f != NULL)
        fclose(f);
    attn_lines lines;
    CHECK_OK(attn_lines_read(path, &lines));
    CHECK(lines.count == newlines, "one line per newline: %lld vs %ld", (long long)lines.count,
          newlines);
    int all_valid = 1;
    for (int64_t i = 0; i < lines.count; i++)
        all_valid &= attn_utf8_valid(lines.line[i], strlen(lines.line[i]));
    CHECK(all_valid, "every line is valid UTF-8");
    attn_lines_free(&lines);
}

/* ---- vocabularies ---------------------------------------------------------------------- */

static void test_vocab_order_and_limits(void)
{
    const char *tokens[] = {"b", "a", "c", "d", "\xC3\xB1", "<unk>", "aa"};
    const int64_t counts[] = {2, 2, 5, 1, 2, 9, 2};
    attn_vocab *vocab;
    CHECK_OK(attn_vocab_build(tokens, counts, 7, 0, 0, &vocab));
    /* specials, then count descending, ties bytewise: c(5) a aa b \xC3\xB1 (2), d(1) */
    const char *expected[] = {"<pad>", "<s>", "</s>", "<unk>", "c", "a", "aa", "b", "\xC3\xB1", "d"};
    CHECK(attn_vocab_size(vocab) == 10, "10 ids, got %lld", (long long)attn_vocab_size(vocab));
    for (int32_t id = 0; id < 10 && attn_vocab_size(vocab) == 10; id++) {
        CHECK(strcmp(attn_vocab_token(vocab, id), expected[id]) == 0, "id %d is %s, expected %s",
              id, attn_vocab_token(vocab, id), expected[id]);
        CHECK(attn_vocab_id(vocab, expected[id]) == id, "lookup of %s", expected[id]);
    }
    CHECK(attn_vocab_id(vocab, "zzz") == -1, "absent token");
    CHECK(attn_vocab_token(vocab, 10) == NULL && attn_vocab_token(vocab, -1) == NULL,
          "ids out of range");
    attn_vocab_destroy(vocab);

    CHECK_OK(attn_vocab_build(tokens, counts, 7, 2, 0, &vocab));
    CHECK(attn_vocab_size(vocab) == 9 && attn_vocab_id(vocab, "d") == -1, "min_count drops d");
    attn_vocab_destroy(vocab);
    CHECK_OK(attn_vocab_build(tokens, counts, 7, 0, 6, &vocab));
    CHECK(attn_vocab_size(vocab) == 6 && attn_vocab_id(vocab, "a") == 5 &&
              attn_vocab_id(vocab, "aa") == -1,
          "max_size keeps the 2 most frequent");
    attn_vocab_destroy(vocab);

    /* The order of the input does not matter. */
    const char *reversed[] = {"aa", "<unk>", "\xC3\xB1", "d", "c", "a", "b"};
    const int64_t reversed_counts[] = {2, 9, 2, 1, 5, 2, 2};
    attn_vocab *other;
    CHECK_OK(attn_vocab_build(tokens, counts, 7, 0, 0, &vocab));
    CHECK_OK(attn_vocab_build(reversed, reversed_counts, 7, 0, 0, &other));
    char *a = NULL, *b = NULL;
    CHECK_OK(attn_vocab_to_json(vocab, &a));
    CHECK_OK(attn_vocab_to_json(other, &b));
    CHECK(a != NULL && b != NULL && strcmp(a, b) == 0, "same vocabulary from any input order");
    free(a);
    free(b);
    attn_vocab_destroy(vocab);
    attn_vocab_destroy(other);
}

static void test_vocab_rejects_bad_input(void)
{
    attn_vocab *vocab;
    const char *dup[] = {"x", "y", "x"};
    const int64_t counts[] = {1, 1, 1};
    CHECK_FAILS(attn_vocab_build(dup, counts, 3, 0, 0, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("'x'", "twice"), "names the duplicate: %s", attn_last_error());
    const char *empty[] = {"x", ""};
    CHECK_FAILS(attn_vocab_build(empty, counts, 2, 0, 0, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    const char *bad_utf8[] = {"\xFF"};
    CHECK_FAILS(attn_vocab_build(bad_utf8, counts, 1, 0, 0, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    const char *with_null[] = {"x", NULL};
    CHECK_FAILS(attn_vocab_build(with_null, counts, 2, 0, 0, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    const int64_t negative[] = {1, -1};
    CHECK_FAILS(attn_vocab_build(dup, negative, 2, 0, 0, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_vocab_build(dup, counts, -1, 0, 0, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_vocab_build(dup, counts, 2, 0, 3, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_vocab_build(NULL, counts, 2, 0, 0, &vocab), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_vocab_build(dup, counts, 2, 0, 0, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_vocab_build(NULL, NULL, 0, 0, 0, &vocab));
    CHECK(attn_vocab_size(vocab) == ATTN_NUM_SPECIAL_IDS, "no tokens: only the specials");
    attn_vocab_destroy(vocab);
    CHECK(attn_vocab_id(NULL, "x") == -1 && attn_vocab_size(NULL) == 0, "NULL vocabulary");
}

static void test_vocab_json_round_trip(void)
{
    const char *tokens[] = {"hola", "\"quoted\"", "back\\slash", "\xE2\x80\x99", "tab\there"};
    const int64_t counts[] = {5, 4, 3, 2, 1};
    attn_vocab *vocab, *back;
    CHECK_OK(attn_vocab_build(tokens, counts, 5, 0, 0, &vocab));
    char *json = NULL;
    CHECK_OK(attn_vocab_to_json(vocab, &json));
    CHECK_OK(attn_vocab_from_json(json, &back));
    CHECK(attn_vocab_size(back) == attn_vocab_size(vocab), "same size");
    int same = 1;
    for (int32_t id = 0; id < attn_vocab_size(vocab) && back != NULL; id++)
        same &= strcmp(attn_vocab_token(vocab, id), attn_vocab_token(back, id)) == 0;
    CHECK(same, "same tokens in the same order");
    free(json);
    attn_vocab_destroy(vocab);
    attn_vocab_destroy(back);

    static const char *malformed[] = {
        "not json",
        "{\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]} trailing",
        "{\"words\": []}",
        "{\"tokens\": [\"<pad>\", \"<s>\", \"</s>\"]}",
        "{\"tokens\": [\"<s>\", \"<pad>\", \"</s>\", \"<unk>\"]}",
        "{\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\", \"a\", \"a\"]}",
        "{\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\", 7]}",
        "{\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\", \"\"]}",
        "[1, 2]",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
        CHECK_FAILS(attn_vocab_from_json(malformed[i], &back), ATTN_ERR_FORMAT);
        CHECK(back == NULL, "no vocabulary from malformed JSON #%zu", i);
    }
    CHECK_FAILS(attn_vocab_from_json(NULL, &back), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_vocab_to_json(NULL, &json), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_utf8_accepts_valid_text);
    RUN_TEST(test_utf8_rejects_invalid_text);
    RUN_TEST(test_lines_split_and_strip);
    RUN_TEST(test_lines_errors_name_file_and_line);
    RUN_TEST(test_lines_read_real_corpus);
    RUN_TEST(test_vocab_order_and_limits);
    RUN_TEST(test_vocab_rejects_bad_input);
    RUN_TEST(test_vocab_json_round_trip);
    return test_summary();
}
