/* Tokenizers: characters, words, SentencePiece's BPE (bpe:N) as they share attn's interface,
 * and the BPE of attn's earlier model files; known cases worked out by hand, round trips on the
 * real corpora, unknown tokens, byte fallback, JSON. */
#include "data_test_util.h"

static attn_tokenizer *train(const char *spec, const char *const *lines, int64_t n)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse(spec, &config));
    CHECK_OK(attn_tokenizer_train(&config, lines, n, &tokenizer));
    return tokenizer;
}

/* The token strings of text's ids, joined by '|'. */
static char *encode_to_tokens(const attn_tokenizer *tokenizer, const char *text)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_OK(attn_tokenizer_encode(tokenizer, text, &ids, &n));
    const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
    size_t size = 1;
    for (int64_t i = 0; i < n; i++)
        size += strlen(attn_vocab_token(vocab, ids[i])) + 1;
    char *joined = test_alloc(size);
    joined[0] = '\0';
    for (int64_t i = 0; i < n; i++) {
        if (i > 0)
            strcat(joined, "|");
        strcat(joined, attn_vocab_token(vocab, ids[i]));
    }
    free(ids);
    return joined;
}

static char *round_trip(const attn_tokenizer *tokenizer, const char *text, int *had_unknown)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    char *back = NULL;
    CHECK_OK(attn_tokenizer_encode(tokenizer, text, &ids, &n));
    *had_unknown = 0;
    for (int64_t i = 0; i < n; i++)
        *had_unknown |= ids[i] == ATTN_UNK_ID;
    CHECK_OK(attn_tokenizer_decode(tokenizer, ids, n, &back));
    free(ids);
    return back != NULL ? back : test_alloc(1);
}

static int64_t count_code_points(const char *text)
{
    int64_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        n += (*p & 0xC0) != 0x80;
    return n;
}

static void test_config_parse(void)
{
    attn_tokenizer_config config;
    CHECK_OK(attn_tokenizer_config_parse("char", &config));
    CHECK(config.kind == ATTN_TOKENIZER_CHAR && config.min_count == 1 && config.max_vocab == 0,
          "char");
    CHECK_OK(attn_tokenizer_config_parse("word", &config));
    CHECK(config.kind == ATTN_TOKENIZER_WORD, "word");
    CHECK_OK(attn_tokenizer_config_parse("bpe:8000", &config));
    CHECK(config.kind == ATTN_TOKENIZER_SPM && config.spm_bpe && config.bpe_merges == 8000 &&
              config.spm_vocab_size == 0,
          "bpe:8000 is SentencePiece's BPE of 8000 merges");
    static const char *bad[] = {"bpe",    "bpe:",    "bpe:0",           "bpe:-5",
                                "bpe:+5", "bpe:12x", "bpe:99999999999", "sentencepiece",
                                "",       "Char"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_FAILS(attn_tokenizer_config_parse(bad[i], &config), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("'Char'", NULL), "names the spec: %s", attn_last_error());
    CHECK_FAILS(attn_tokenizer_config_parse(NULL, &config), ATTN_ERR_INVALID_ARGUMENT);
    /* A kind's name parses back to the kind (bpe, which SentencePiece learns, needs its
     * merges). */
    CHECK_OK(attn_tokenizer_config_parse(attn_tokenizer_kind_name(ATTN_TOKENIZER_CHAR), &config));
    CHECK(config.kind == ATTN_TOKENIZER_CHAR, "char's name");
    CHECK_OK(attn_tokenizer_config_parse(attn_tokenizer_kind_name(ATTN_TOKENIZER_WORD), &config));
    CHECK(config.kind == ATTN_TOKENIZER_WORD, "word's name");
    CHECK(strcmp(attn_tokenizer_kind_name(ATTN_TOKENIZER_BPE), "bpe") == 0, "bpe's name");
    CHECK(strcmp(attn_tokenizer_kind_name((attn_tokenizer_kind)7), "unknown") == 0,
          "a value outside the enum");
}

static void test_char_tokenizer(void)
{
    const char *lines[] = {"hello", "h\xC3\xA9llo w\xC3\xB6rld"};
    attn_tokenizer *tokenizer = train("char", lines, 2);
    if (tokenizer == NULL)
        return;
    CHECK(attn_tokenizer_get_kind(tokenizer) == ATTN_TOKENIZER_CHAR, "kind");
    char *tokens = encode_to_tokens(tokenizer, "hello");
    CHECK(strcmp(tokens, "h|e|l|l|o") == 0, "hello -> %s", tokens);
    free(tokens);
    tokens = encode_to_tokens(tokenizer, "w\xC3\xB6rld");
    CHECK(strcmp(tokens, "w|\xC3\xB6|r|l|d") == 0, "a code point, not a byte: %s", tokens);
    free(tokens);
    /* 'l' is the most frequent character (5), so it gets the first id after the specials. */
    CHECK(attn_vocab_id(attn_tokenizer_vocab(tokenizer), "l") == ATTN_NUM_SPECIAL_IDS,
          "most frequent first");
    CHECK(attn_vocab_id(attn_tokenizer_vocab(tokenizer), " ") >= 0, "the space is a token");

    int unknown;
    char *back = round_trip(tokenizer, "  hello  w\xC3\xB6rld ", &unknown);
    CHECK(!unknown && strcmp(back, "  hello  w\xC3\xB6rld ") == 0,
          "spaces are tokens, text restored exactly: '%s'", back);
    free(back);
    back = round_trip(tokenizer, "hexlo\xE2\x82\xAC", &unknown);
    CHECK(unknown && strcmp(back, "helo") == 0, "unknown characters become <unk>, dropped: %s",
          back);
    free(back);
    attn_tokenizer_destroy(tokenizer);
}

static void test_word_tokenizer(void)
{
    const char *lines[] = {"HH AH L OW", "W ER L D", "L OW <s>"};
    attn_tokenizer *tokenizer = train("word", lines, 3);
    if (tokenizer == NULL)
        return;
    const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
    CHECK(attn_vocab_size(vocab) == 4 + 7, "7 words + specials, got %lld",
          (long long)attn_vocab_size(vocab));
    CHECK(attn_vocab_id(vocab, "L") == 4 && attn_vocab_id(vocab, "OW") == 5,
          "L (3) then OW (2) first");
    char *tokens = encode_to_tokens(tokenizer, "  HH\tAH  L OW\n");
    CHECK(strcmp(tokens, "HH|AH|L|OW") == 0, "split on whitespace: %s", tokens);
    free(tokens);
    tokens = encode_to_tokens(tokenizer, "OW XX <s> </s> <pad>");
    CHECK(strcmp(tokens, "OW|<unk>|<unk>|<unk>|<unk>") == 0,
          "unknown words and spelled specials are <unk>: %s", tokens);
    free(tokens);
    int unknown;
    char *back = round_trip(tokenizer, " W  ER\tL D ", &unknown);
    CHECK(!unknown && strcmp(back, "W ER L D") == 0, "single spaces on decode: '%s'", back);
    free(back);
    const int32_t with_specials[] = {ATTN_BOS_ID, 4, ATTN_PAD_ID, 5, ATTN_EOS_ID, ATTN_PAD_ID};
    CHECK_OK(attn_tokenizer_decode(tokenizer, with_specials, 6, &back));
    CHECK(back != NULL && strcmp(back, "L OW") == 0, "specials dropped: '%s'", back);
    free(back);
    attn_tokenizer_destroy(tokenizer);

    attn_tokenizer_config config = {.kind = ATTN_TOKENIZER_WORD, .min_count = 2};
    CHECK_OK(attn_tokenizer_train(&config, lines, 3, &tokenizer));
    CHECK(attn_vocab_size(attn_tokenizer_vocab(tokenizer)) == 4 + 2, "min_count 2: L and OW");
    attn_tokenizer_destroy(tokenizer);
    config = (attn_tokenizer_config){.kind = ATTN_TOKENIZER_WORD, .min_count = 1, .max_vocab = 5};
    CHECK_OK(attn_tokenizer_train(&config, lines, 3, &tokenizer));
    tokens = encode_to_tokens(tokenizer, "L OW");
    CHECK(strcmp(tokens, "L|<unk>") == 0, "max_vocab 5 keeps only L: %s", tokens);
    free(tokens);
    attn_tokenizer_destroy(tokenizer);
}

/* attn's own BPE of earlier versions, as its model files hold it: the tokenizer its learner
 * made (commit cea9c5c, attn_tokenizer_to_json) of the example of Sennrich et al. (2016), low
 * x5, lower x2, newest x6, widest x3, whose 13 merges were worked by hand, ties going to the
 * bytewise smaller pair:
 *   1 e s        9 (ties with s t</w>; "e" < "s")
 *   2 es t</w>   9
 *   3 l o        7
 *   4 e w        6 (ties with n e and w est</w>; "e" smallest)
 *   5 ew est</w> 6 (ties with n ew)
 *   6 n ewest</w> 6
 *   7 lo w</w>   5
 *   8 d est</w>  3 (ties with i d and w i)
 *   9 i dest</w> 3
 *  10 w idest</w> 3
 *  11 e r</w>    2 (ties with lo w and w e)
 *  12 lo w       2 (ties with w er</w>)
 *  13 low er</w> 2
 * after which every word is one symbol. */
static const char classic_bpe_json[] =
    "{\"format\":\"attn-tokenizer\",\"version\":1,\"kind\":\"bpe\",\"min_count\":1,"
    "\"max_vocab\":0,\"merges\":[[\"e\",\"s\"],[\"es\",\"t</w>\"],[\"l\",\"o\"],[\"e\","
    "\"w\"],[\"ew\",\"est</w>\"],[\"n\",\"ewest</w>\"],[\"lo\",\"w</w>\"],[\"d\","
    "\"est</w>\"],[\"i\",\"dest</w>\"],[\"w\",\"idest</w>\"],[\"e\",\"r</w>\"],[\"lo\","
    "\"w\"],[\"low\",\"er</w>\"]],\"bpe_merges\":100,\"vocab\":{\"tokens\":[\"<pad>\","
    "\"<s>\",\"</s>\",\"<unk>\",\"e\",\"w\",\"es\",\"est</w>\",\"s\",\"t</w>\",\"l\",\"lo\","
    "\"o\",\"ew\",\"ewest</w>\",\"n\",\"newest</w>\",\"low</w>\",\"w</w>\",\"d\","
    "\"dest</w>\",\"i\",\"idest</w>\",\"widest</w>\",\"er</w>\",\"low\",\"lower</w>\","
    "\"r</w>\"]}}";
static const char *const classic_lines[] = {
    "low low low low low lower lower",
    "newest newest newest newest newest newest widest widest widest",
};
static const char *const classic_merges[13][2] = {
    {"e", "s"},         {"es", "t</w>"}, {"l", "o"},        {"e", "w"},        {"ew", "est</w>"},
    {"n", "ewest</w>"}, {"lo", "w</w>"}, {"d", "est</w>"},  {"i", "dest</w>"}, {"w", "idest</w>"},
    {"e", "r</w>"},     {"lo", "w"},     {"low", "er</w>"},
};

static attn_tokenizer *from_json(const char *json)
{
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_from_json(json, &tokenizer));
    return tokenizer;
}

/* The classic tokenizer's JSON as a language model's of the same version had it: byte fallback,
 * the 256 byte tokens and the lone "</w>" after the symbols (malloc'ed). */
static char *classic_bpe_json_with_bytes(void)
{
    const char *tokens_end = strrchr(classic_bpe_json, ']');
    const char *kind = strstr(classic_bpe_json, "\"merges\"");
    size_t size = sizeof classic_bpe_json + 256 * 10 + 64;
    char *json = test_alloc(size);
    size_t at = (size_t)(kind - classic_bpe_json);
    memcpy(json, classic_bpe_json, at);
    at += (size_t)snprintf(json + at, size - at, "\"byte_fallback\":true,");
    const size_t middle = (size_t)(tokens_end - kind);
    memcpy(json + at, kind, middle);
    at += middle;
    for (int b = 0; b < 256; b++)
        at += (size_t)snprintf(json + at, size - at, ",\"<0x%02X>\"", b);
    snprintf(json + at, size - at, ",\"</w>\"%s", tokens_end);
    return json;
}

static void test_earlier_bpe_model_files(void)
{
    attn_tokenizer *tokenizer = from_json(classic_bpe_json);
    if (tokenizer == NULL)
        return;
    CHECK(attn_tokenizer_get_kind(tokenizer) == ATTN_TOKENIZER_BPE, "kind bpe");
    CHECK(attn_tokenizer_num_merges(tokenizer) == 13, "13 merges, got %lld",
          (long long)attn_tokenizer_num_merges(tokenizer));
    for (int64_t i = 0; i < 13 && i < attn_tokenizer_num_merges(tokenizer); i++) {
        const char *left, *right;
        CHECK_OK(attn_tokenizer_merge(tokenizer, i, &left, &right));
        CHECK(strcmp(left, classic_merges[i][0]) == 0 && strcmp(right, classic_merges[i][1]) == 0,
              "merge %lld: (%s, %s), expected (%s, %s)", (long long)i + 1, left, right,
              classic_merges[i][0], classic_merges[i][1]);
    }
    char *tokens = encode_to_tokens(tokenizer, "lowest newer widest");
    CHECK(strcmp(tokens, "low|est</w>|n|ew|er</w>|widest</w>") == 0, "merges in order: %s", tokens);
    free(tokens);
    int unknown;
    char *back = round_trip(tokenizer, "lowest  newer\twidest", &unknown);
    CHECK(!unknown && strcmp(back, "lowest newer widest") == 0, "decoded: '%s'", back);
    free(back);
    tokens = encode_to_tokens(tokenizer, "lox");
    CHECK(strcmp(tokens, "lo|<unk>") == 0, "an unseen character is <unk>: %s", tokens);
    free(tokens);
    CHECK_FAILS(attn_tokenizer_merge(tokenizer, 13, &(const char *){0}, &(const char *){0}),
                ATTN_ERR_INVALID_ARGUMENT);
    char *json = NULL;
    CHECK_OK(attn_tokenizer_to_json(tokenizer, &json));
    CHECK(json != NULL && strcmp(json, classic_bpe_json) == 0, "written back as it was read");
    free(json);
    attn_tokenizer_destroy(tokenizer);

    /* A language model's: unseen characters in bytes, a word spelled so ending in "</w>". */
    json = classic_bpe_json_with_bytes();
    tokenizer = from_json(json);
    free(json);
    if (tokenizer == NULL)
        return;
    tokens = encode_to_tokens(tokenizer, "lox low");
    CHECK(strcmp(tokens, "lo|<0x78>|</w>|low</w>") == 0, "bytes for 'x': %s", tokens);
    free(tokens);
    back = round_trip(tokenizer, "newest l\xC3\xB6wer", &unknown);
    CHECK(!unknown && strcmp(back, "newest l\xC3\xB6wer") == 0, "decoded: '%s'", back);
    free(back);
    attn_tokenizer_destroy(tokenizer);

    /* Its learner is gone: SentencePiece learns every BPE. */
    attn_tokenizer_config config = {.kind = ATTN_TOKENIZER_BPE, .bpe_merges = 100, .min_count = 1};
    CHECK_FAILS(attn_tokenizer_train(&config, classic_lines, 2, &tokenizer), ATTN_ERR_UNSUPPORTED);
    CHECK(message_has("SentencePiece", "bpe:N"), "says what learns a BPE: %s", attn_last_error());
    CHECK(tokenizer == NULL, "no tokenizer");
}

static char *concat(const char *a, const char *b)
{
    char *s = test_alloc(strlen(a) + strlen(b) + 1);
    strcpy(s, a);
    strcat(s, b);
    return s;
}

static char *tokenizer_json(const attn_tokenizer *tokenizer)
{
    char *json = NULL;
    CHECK_OK(attn_tokenizer_to_json(tokenizer, &json));
    return json != NULL ? json : test_alloc(1);
}

/* Every line restored (exactly, or with single spaces for word and BPE) when no token was
 * unknown; returns how many lines had an unknown token. */
static int64_t check_round_trips(const char *what, const attn_tokenizer *tokenizer,
                                 char *const *lines, int64_t n, int exact)
{
    int64_t with_unknown = 0, wrong = 0, first_wrong = -1;
    for (int64_t i = 0; i < n; i++) {
        int unknown;
        char *back = round_trip(tokenizer, lines[i], &unknown);
        char *expected = exact ? concat(lines[i], "") : normalise_spaces(lines[i]);
        with_unknown += unknown;
        if (!unknown && strcmp(back, expected) != 0) {
            wrong++;
            if (first_wrong < 0)
                first_wrong = i;
        }
        free(back);
        free(expected);
    }
    CHECK(wrong == 0, "%s: %lld lines not restored (first: line %lld)", what, (long long)wrong,
          (long long)first_wrong + 1);
    return with_unknown;
}

static void test_round_trips_on_g2p(void)
{
    const char *path = shared_data_file(0, "g2p-std/train.tsv");
    const char *dev_path = shared_data_file(1, "g2p-std/dev.tsv");
    if (path == NULL) {
        skipped("test_round_trips_on_g2p");
        return;
    }
    attn_corpus *train_set = NULL, *dev = NULL;
    CHECK_OK(attn_corpus_read_tsv(path, &train_set));
    CHECK_OK(attn_corpus_read_tsv(dev_path, &dev));
    if (train_set == NULL || dev == NULL)
        return;
    int64_t n = attn_corpus_size(train_set) < 4000 ? attn_corpus_size(train_set) : 4000;
    attn_tokenizer *letters = train("char", attn_corpus_sources(train_set), n);
    attn_tokenizer *phonemes = train("word", attn_corpus_targets(train_set), n);
    char *const *words = (char *const *)attn_corpus_sources(dev);
    char *const *prons = (char *const *)attn_corpus_targets(dev);
    int64_t dev_n = attn_corpus_size(dev) < 2000 ? attn_corpus_size(dev) : 2000;
    check_round_trips("g2p words, char", letters, (char *const *)attn_corpus_sources(train_set), n,
                      1);
    check_round_trips("g2p words, char (dev)", letters, words, dev_n, 1);
    check_round_trips("g2p phonemes, word", phonemes, prons, dev_n, 0);
    /* One token per letter and per phoneme. */
    int lengths_ok = 1;
    for (int64_t i = 0; i < dev_n; i++) {
        int32_t *ids = NULL;
        int64_t count = 0;
        attn_tokenizer_encode(letters, words[i], &ids, &count);
        lengths_ok &= count == count_code_points(words[i]);
        free(ids);
    }
    CHECK(lengths_ok, "char: one id per code point");
    attn_tokenizer_destroy(letters);
    attn_tokenizer_destroy(phonemes);
    attn_corpus_destroy(train_set);
    attn_corpus_destroy(dev);
}

static void test_round_trips_on_bible(void)
{
    const char *names[2][2] = {{"bible/train.es", "bible/dev.es"},
                               {"bible/train.en", "bible/dev.en"}};
    for (int lang = 0; lang < 2; lang++) {
        const char *path = shared_data_file(0, names[lang][0]);
        const char *dev_path = shared_data_file(1, names[lang][1]);
        if (path == NULL) {
            skipped("test_round_trips_on_bible");
            return;
        }
        attn_lines lines, dev;
        CHECK_OK(attn_lines_read(path, &lines));
        CHECK_OK(attn_lines_read(dev_path, &dev));
        int64_t n = lines.count < 2000 ? lines.count : 2000;
        int64_t dev_n = dev.count < 300 ? dev.count : 300;
        const char *const *train_lines = (const char *const *)lines.line;
        attn_tokenizer *chars = train("char", train_lines, n);
        CHECK(check_round_trips("char, training lines", chars, lines.line, n, 1) == 0,
              "char: no unknown in the training text");
        check_round_trips("char, dev lines", chars, dev.line, dev_n, 1);
        attn_tokenizer_destroy(chars);
        /* bpe:N is SentencePiece's; its round trips are test_tokenizer_spm's. */
        attn_tokenizer *bpe = attn_tokenizer_spm_available() ? train("bpe:1000", train_lines, n)
                                                             : NULL;
        if (bpe == NULL) {
            skipped("bpe:1000 on the Bible (no SentencePiece)");
            attn_lines_free(&lines);
            attn_lines_free(&dev);
            continue;
        }
        CHECK(check_round_trips("bpe, training lines", bpe, lines.line, n, 0) == 0,
              "%s: no unknown token in the training text", names[lang][0]);
        CHECK(check_round_trips("bpe, dev lines", bpe, dev.line, dev_n, 0) == 0,
              "%s: bytes spell the characters the training text lacked", names[lang][1]);

        /* Subwords: fewer tokens than characters, more than words. */
        int64_t bpe_tokens = 0, characters = 0, words = 0;
        for (int64_t i = 0; i < dev_n; i++) {
            int32_t *ids = NULL;
            int64_t count = 0;
            attn_tokenizer_encode(bpe, dev.line[i], &ids, &count);
            bpe_tokens += count;
            characters += count_code_points(dev.line[i]);
            char *single = normalise_spaces(dev.line[i]);
            for (char *p = single; *p; p++)
                words += *p == ' ';
            words += single[0] != '\0';
            free(single);
            free(ids);
        }
        CHECK(bpe_tokens > words && bpe_tokens < characters / 2,
              "bpe:1000 gives subwords: %lld tokens for %lld words, %lld characters",
              (long long)bpe_tokens, (long long)words, (long long)characters);
        attn_tokenizer_destroy(bpe);
        attn_lines_free(&lines);
        attn_lines_free(&dev);
    }
}

static void check_json_round_trip(const char *what, const attn_tokenizer *tokenizer,
                                  const char *const *samples, int n)
{
    char *json = tokenizer_json(tokenizer);
    attn_tokenizer *back = NULL;
    CHECK_OK(attn_tokenizer_from_json(json, &back));
    if (back == NULL) {
        free(json);
        return;
    }
    char *again = tokenizer_json(back);
    CHECK(strcmp(json, again) == 0, "%s: JSON -> tokenizer -> JSON is stable", what);
    CHECK(attn_tokenizer_get_kind(back) == attn_tokenizer_get_kind(tokenizer) &&
              attn_tokenizer_num_merges(back) == attn_tokenizer_num_merges(tokenizer),
          "%s: kind and merges", what);
    int same = 1;
    for (int i = 0; i < n; i++) {
        int32_t *a = NULL, *b = NULL;
        int64_t na = 0, nb = 0;
        attn_tokenizer_encode(tokenizer, samples[i], &a, &na);
        attn_tokenizer_encode(back, samples[i], &b, &nb);
        same &= na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
        free(a);
        free(b);
    }
    CHECK(same, "%s: the loaded tokenizer encodes like the original", what);
    free(json);
    free(again);
    attn_tokenizer_destroy(back);
}

static void test_json_round_trip(void)
{
    const char *samples[] = {"lowest newer widest", "low", "  x  y ", "\xC3\xB1 lo\xE2\x82\xAC",
                             "newest widest lower"};
    const char *specs[] = {"char", "word", "bpe:8", "bpe:100"};
    const int n_specs = attn_tokenizer_spm_available() ? 4 : 2;
    for (int s = 0; s < n_specs; s++) {
        attn_tokenizer *tokenizer = train(specs[s], classic_lines, 2);
        if (tokenizer != NULL)
            check_json_round_trip(specs[s], tokenizer, samples, 5);
        attn_tokenizer_destroy(tokenizer);
    }
    const char *path = shared_data_file(0, "bible/train.en");
    if (path == NULL || !attn_tokenizer_spm_available()) {
        skipped("JSON round trip of bpe:800 on the Bible");
        return;
    }
    attn_lines lines;
    CHECK_OK(attn_lines_read(path, &lines));
    int64_t n = lines.count < 1000 ? lines.count : 1000;
    attn_tokenizer *tokenizer = train("bpe:800", (const char *const *)lines.line, n);
    if (tokenizer != NULL)
        check_json_round_trip("bible bpe:800", tokenizer, (const char *const *)lines.line + n, 200);
    attn_tokenizer_destroy(tokenizer);
    attn_lines_free(&lines);
}

static void test_json_rejects_malformed(void)
{
    static const char *malformed[] = {
        "",
        "{}",
        "{\"format\": \"attn-tokenizer\", \"version\": 2, \"kind\": \"char\", \"min_count\": 1, "
        "\"max_vocab\": 0, \"vocab\": {\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]}}",
        "{\"format\": \"attn-tokenizer\", \"version\": 1, \"kind\": \"chars\", \"min_count\": 1, "
        "\"max_vocab\": 0, \"vocab\": {\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]}}",
        "{\"format\": \"attn-tokenizer\", \"version\": 1, \"kind\": \"char\", \"min_count\": 1.5, "
        "\"max_vocab\": 0, \"vocab\": {\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]}}",
        "{\"format\": \"attn-tokenizer\", \"version\": 1, \"kind\": \"char\", \"min_count\": 1, "
        "\"max_vocab\": 0}",
        "{\"format\": \"attn-tokenizer\", \"version\": 1, \"kind\": \"bpe\", \"min_count\": 1, "
        "\"max_vocab\": 0, \"bpe_merges\": 5, "
        "\"vocab\": {\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]}}",
        "{\"format\": \"attn-tokenizer\", \"version\": 1, \"kind\": \"bpe\", \"min_count\": 1, "
        "\"max_vocab\": 0, \"bpe_merges\": 5, \"merges\": [[\"a\"]], "
        "\"vocab\": {\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]}}",
        "{\"format\": \"attn-tokenizer\", \"version\": 1, \"kind\": \"bpe\", \"min_count\": 1, "
        "\"max_vocab\": 0, \"bpe_merges\": 5, \"merges\": [[\"a\", \"b c\"]], "
        "\"vocab\": {\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]}}",
        "{\"format\": \"attn-tokenizer\", \"version\": 1, \"kind\": \"bpe\", \"min_count\": 1, "
        "\"max_vocab\": 0, \"bpe_merges\": 5, \"merges\": [[\"a\", \"\"]], "
        "\"vocab\": {\"tokens\": [\"<pad>\", \"<s>\", \"</s>\", \"<unk>\"]}}",
    };
    for (size_t i = 0; i < sizeof malformed / sizeof *malformed; i++) {
        attn_tokenizer *tokenizer = NULL;
        CHECK_FAILS(attn_tokenizer_from_json(malformed[i], &tokenizer), ATTN_ERR_FORMAT);
        CHECK(tokenizer == NULL, "nothing from malformed JSON #%zu", i);
    }
    attn_tokenizer *tokenizer = NULL;
    CHECK_FAILS(attn_tokenizer_from_json(NULL, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
}

static void test_bad_arguments(void)
{
    const char *lines[] = {"good line", "bad \xC3\x28 line"};
    attn_tokenizer_config config = {.kind = ATTN_TOKENIZER_WORD, .min_count = 1};
    attn_tokenizer *tokenizer = NULL;
    CHECK_FAILS(attn_tokenizer_train(&config, lines, 2, &tokenizer), ATTN_ERR_FORMAT);
    CHECK(message_has("line 2", NULL), "names the training line: %s", attn_last_error());
    CHECK_FAILS(attn_tokenizer_train(&config, lines, 0, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tokenizer_train(&config, NULL, 1, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tokenizer_train(NULL, lines, 1, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    const char *with_null[] = {"a", NULL};
    CHECK_FAILS(attn_tokenizer_train(&config, with_null, 2, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    attn_tokenizer_config bad = {
        .kind = ATTN_TOKENIZER_SPM, .spm_bpe = 1, .bpe_merges = 10, .spm_vocab_size = 100};
    CHECK_FAILS(attn_tokenizer_train(&bad, lines, 1, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("not both", NULL), "merges or pieces: %s", attn_last_error());
    bad = (attn_tokenizer_config){.kind = ATTN_TOKENIZER_SPM, .spm_bpe = 1, .bpe_merges = -1};
    CHECK_FAILS(attn_tokenizer_train(&bad, lines, 1, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    bad = (attn_tokenizer_config){.kind = (attn_tokenizer_kind)7, .min_count = 1};
    CHECK_FAILS(attn_tokenizer_train(&bad, lines, 1, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    bad = (attn_tokenizer_config){.kind = ATTN_TOKENIZER_CHAR, .min_count = 1, .max_vocab = 2};
    CHECK_FAILS(attn_tokenizer_train(&bad, lines, 1, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    bad = (attn_tokenizer_config){.kind = ATTN_TOKENIZER_CHAR, .min_count = (int64_t)1 << 40};
    CHECK_FAILS(attn_tokenizer_train(&bad, lines, 1, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(tokenizer == NULL, "no tokenizer after failures");

    CHECK_OK(attn_tokenizer_train(&config, lines, 1, &tokenizer));
    int32_t *ids = NULL;
    int64_t n = 0;
    CHECK_FAILS(attn_tokenizer_encode(tokenizer, "ok \xFF", &ids, &n), ATTN_ERR_FORMAT);
    CHECK(message_has("byte 4", NULL), "names the byte: %s", attn_last_error());
    CHECK_FAILS(attn_tokenizer_encode(tokenizer, NULL, &ids, &n), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tokenizer_encode(NULL, "x", &ids, &n), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_tokenizer_encode(tokenizer, "   ", &ids, &n));
    CHECK(ids != NULL && n == 0, "no words: no ids, and a pointer to free");
    free(ids);
    char *text = NULL;
    const int32_t out_of_range[] = {4, 6};
    CHECK_FAILS(attn_tokenizer_decode(tokenizer, out_of_range, 2, &text),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("ids[1] = 6", NULL), "names the id: %s", attn_last_error());
    const int32_t negative[] = {-1};
    CHECK_FAILS(attn_tokenizer_decode(tokenizer, negative, 1, &text), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tokenizer_decode(tokenizer, NULL, 1, &text), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_tokenizer_decode(tokenizer, out_of_range, -1, &text),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_OK(attn_tokenizer_decode(tokenizer, NULL, 0, &text));
    CHECK(text != NULL && text[0] == '\0', "no ids: empty text");
    free(text);
    CHECK_FAILS(attn_tokenizer_merge(tokenizer, 0, &(const char *){0}, &(const char *){0}),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_tokenizer_destroy(tokenizer);
    attn_tokenizer_destroy(NULL);
}

/* What a reader sees of a token: a BPE word end loses its marker, nothing else changes. */
static void test_token_text_length(void)
{
    CHECK(attn_token_text_length("low</w>") == 3, "word end");
    CHECK(attn_token_text_length("lo") == 2, "inner piece");
    CHECK(attn_token_text_length("</w>") == 4, "the marker alone is a token's whole text");
    CHECK(attn_token_text_length("a</w>b") == 6, "the marker only counts at the end");
    CHECK(attn_token_text_length("") == 0 && attn_token_text_length(NULL) == 0, "empty, NULL");
}

/* Byte fallback: text with characters the training text lacked encodes without <unk>, to
 * bytes the decoder puts back exactly; the tokenizer survives JSON; bytes that are not UTF-8
 * decode as U+FFFD. */
static attn_tokenizer *train_with_bytes(const char *spec, const char *const *lines, int64_t n)
{
    attn_tokenizer_config config;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse(spec, &config));
    config.byte_fallback = 1;
    CHECK_OK(attn_tokenizer_train(&config, lines, n, &tokenizer));
    return tokenizer;
}

static void check_exact_round_trip(const attn_tokenizer *tokenizer, const char *text,
                                   const char *expected, const char *what)
{
    int32_t *ids = NULL;
    int64_t n = 0;
    char *back = NULL;
    CHECK_OK(attn_tokenizer_encode(tokenizer, text, &ids, &n));
    int unknown = 0;
    for (int64_t i = 0; i < n; i++)
        unknown += ids[i] == ATTN_UNK_ID;
    CHECK(unknown == 0, "%s: no <unk> in '%s'", what, text);
    CHECK_OK(attn_tokenizer_decode(tokenizer, ids, n, &back));
    CHECK(back != NULL && strcmp(back, expected) == 0, "%s: '%s' decodes to '%s', not '%s'", what,
          text, back ? back : "(null)", expected);
    free(back);
    free(ids);
}

static void test_byte_fallback(void)
{
    const char *lines[] = {"the cat sat on the mat", "a cat and a hat"};
    const char *unseen = "the \xc5\xbelut\xc3\xbd k\xc5\xaf\xc5\x88 sat \xe2\x9c\x93!";
    const char *specs[] = {"char", "bpe:20"};
    for (int k = 0; k < (attn_tokenizer_spm_available() ? 2 : 1); k++) {
        attn_tokenizer *tokenizer = train_with_bytes(specs[k], lines, 2);
        if (tokenizer == NULL)
            continue;
        const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
        CHECK(attn_vocab_id(vocab, "<0x00>") >= ATTN_NUM_SPECIAL_IDS &&
                  attn_vocab_id(vocab, "<0xFF>") >= ATTN_NUM_SPECIAL_IDS,
              "%s: the byte tokens are in the vocabulary", specs[k]);
        check_exact_round_trip(tokenizer, unseen, unseen, specs[k]);
        check_exact_round_trip(tokenizer, "the cat", "the cat", specs[k]);
        /* Unseen characters at a word's end, then another word: BPE keeps the space. */
        check_exact_round_trip(tokenizer, "cat\xc3\xbd mat", "cat\xc3\xbd mat", specs[k]);

        char *json = NULL;
        attn_tokenizer *loaded = NULL;
        CHECK_OK(attn_tokenizer_to_json(tokenizer, &json));
        CHECK(json != NULL && strstr(json, "\"byte_fallback\":true") != NULL, "JSON says so");
        CHECK_OK(attn_tokenizer_from_json(json, &loaded));
        if (loaded != NULL)
            check_exact_round_trip(loaded, unseen, unseen, "loaded from JSON");

        /* A lone lead byte and a stray continuation byte are not UTF-8. */
        const int32_t broken[] = {attn_vocab_id(vocab, "<0xC3>"), attn_vocab_id(vocab, "<0x41>"),
                                  attn_vocab_id(vocab, "<0xBD>")};
        char *text = NULL;
        CHECK_OK(attn_tokenizer_decode(tokenizer, broken, 3, &text));
        CHECK(text != NULL && strcmp(text, "\xef\xbf\xbd"
                                           "A\xef\xbf\xbd") == 0,
              "%s: invalid bytes read as U+FFFD: '%s'", specs[k], text ? text : "(null)");
        free(text);
        /* A character whose last bytes have not come yet is left out, so the text of a growing
         * sequence of ids only grows at its end (streamed generation relies on it). */
        const int32_t growing[] = {attn_vocab_id(vocab, "<0x41>"), attn_vocab_id(vocab, "<0xE2>"),
                                   attn_vocab_id(vocab, "<0x9C>"), attn_vocab_id(vocab, "<0x93>"),
                                   attn_vocab_id(vocab, "<0xE2>"), attn_vocab_id(vocab, "<0x41>")};
        const char *expected[] = {"A",
                                  "A",
                                  "A",
                                  "A\xe2\x9c\x93",
                                  "A\xe2\x9c\x93",
                                  "A\xe2\x9c\x93\xef\xbf\xbd"
                                  "A"};
        for (int n = 1; n <= 6; n++) {
            CHECK_OK(attn_tokenizer_decode(tokenizer, growing, n, &text));
            CHECK(text != NULL && strcmp(text, expected[n - 1]) == 0,
                  "%s: the first %d bytes read '%s'", specs[k], n, text ? text : "(null)");
            free(text);
        }
        const int32_t line_break[] = {attn_vocab_id(vocab, "<0x41>"),
                                      attn_vocab_id(vocab, "<0x0A>")};
        CHECK_OK(attn_tokenizer_decode(tokenizer, line_break, 2, &text));
        CHECK(text != NULL && strcmp(text, "A\xef\xbf\xbd") == 0,
              "%s: a line break in bytes reads as U+FFFD", specs[k]);
        free(text);
        free(json);
        attn_tokenizer_destroy(loaded);
        attn_tokenizer_destroy(tokenizer);
    }
    attn_tokenizer_config word;
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_config_parse("word", &word));
    word.byte_fallback = 1;
    CHECK_FAILS(attn_tokenizer_train(&word, lines, 2, &tokenizer), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_byte_fallback);
    RUN_TEST(test_config_parse);
    RUN_TEST(test_token_text_length);
    RUN_TEST(test_char_tokenizer);
    RUN_TEST(test_word_tokenizer);
    RUN_TEST(test_earlier_bpe_model_files);
    RUN_TEST(test_round_trips_on_g2p);
    RUN_TEST(test_round_trips_on_bible);
    RUN_TEST(test_json_round_trip);
    RUN_TEST(test_json_rejects_malformed);
    RUN_TEST(test_bad_arguments);
    return test_summary();
}
