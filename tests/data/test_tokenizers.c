/* Tokenizers: characters, words and BPE; known cases worked out by hand, BPE learning against
 * a slow full-recount reference, round trips on the real corpora, unknown tokens, JSON. */
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
    CHECK(config.kind == ATTN_TOKENIZER_BPE && config.bpe_merges == 8000, "bpe:8000");
    static const char *bad[] = {"bpe",    "bpe:",    "bpe:0",           "bpe:-5",
                                "bpe:+5", "bpe:12x", "bpe:99999999999", "sentencepiece",
                                "",       "Char"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        CHECK_FAILS(attn_tokenizer_config_parse(bad[i], &config), ATTN_ERR_INVALID_ARGUMENT);
    CHECK(message_has("'Char'", NULL), "names the spec: %s", attn_last_error());
    CHECK_FAILS(attn_tokenizer_config_parse(NULL, &config), ATTN_ERR_INVALID_ARGUMENT);
    /* A kind's name parses back to the kind (bpe needs its merges). */
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

/* The example of Sennrich et al. (2016): low x5, lower x2, newest x6, widest x3. Pair counts
 * at the start: (e,s) 9, (s,t</w>) 9, (w,e) 8, (l,o) 7, (n,e) 6, (e,w) 6, (o,w</w>) 5, ...
 * Worked by hand, ties to the bytewise smaller pair:
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
static const char *const classic_lines[] = {
    "low low low low low lower lower",
    "newest newest newest newest newest newest widest widest widest",
};
static const char *const classic_merges[13][2] = {
    {"e", "s"},         {"es", "t</w>"}, {"l", "o"},        {"e", "w"},        {"ew", "est</w>"},
    {"n", "ewest</w>"}, {"lo", "w</w>"}, {"d", "est</w>"},  {"i", "dest</w>"}, {"w", "idest</w>"},
    {"e", "r</w>"},     {"lo", "w"},     {"low", "er</w>"},
};

static void test_bpe_classic_example(void)
{
    attn_tokenizer *tokenizer = train("bpe:100", classic_lines, 2);
    if (tokenizer == NULL)
        return;
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
    attn_tokenizer_destroy(tokenizer);

    /* A vocabulary cut to the 5 most frequent symbols: merges still apply, and what they
     * make outside the vocabulary is <unk>. Counts: e 17, w 11 (both not word-final), then
     * at 9, bytewise: es, est</w>, s, t</w>; so e w es est</w> s are kept. */
    attn_tokenizer_config config = {.kind = ATTN_TOKENIZER_BPE,
                                    .bpe_merges = 100,
                                    .min_count = 1,
                                    .max_vocab = ATTN_NUM_SPECIAL_IDS + 5};
    CHECK_OK(attn_tokenizer_train(&config, classic_lines, 2, &tokenizer));
    if (tokenizer != NULL) {
        CHECK(attn_vocab_size(attn_tokenizer_vocab(tokenizer)) == ATTN_NUM_SPECIAL_IDS + 5,
              "max_vocab respected");
        tokens = encode_to_tokens(tokenizer, "lowest");
        CHECK(strcmp(tokens, "<unk>|est</w>") == 0, "'low' was cut, 'est</w>' kept: %s", tokens);
        free(tokens);
        attn_tokenizer_destroy(tokenizer);
    }

    tokenizer = train("bpe:3", classic_lines, 2);
    if (tokenizer == NULL)
        return;
    CHECK(attn_tokenizer_num_merges(tokenizer) == 3, "bpe:3 stops after 3 merges");
    tokens = encode_to_tokens(tokenizer, "lowest");
    CHECK(strcmp(tokens, "lo|w|est</w>") == 0, "three merges applied: %s", tokens);
    free(tokens);
    attn_tokenizer_destroy(tokenizer);
}

/* ---- a slow reference: recount every pair before every merge ---------------------------- */

typedef struct ref_word {
    char **symbols;
    int length;
    long count;
} ref_word;

typedef struct ref_pair {
    const char *left, *right;
    long count;
} ref_pair;

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int compare_pairs(const void *pa, const void *pb)
{
    const ref_pair *a = pa, *b = pb;
    int c = strcmp(a->left, b->left);
    return c != 0 ? c : strcmp(a->right, b->right);
}

static char *concat(const char *a, const char *b)
{
    char *s = test_alloc(strlen(a) + strlen(b) + 1);
    strcpy(s, a);
    strcat(s, b);
    return s;
}

/* Learns up to max_merges merges the textbook way; returns their count and fills
 * merges[i][0..1] (strings the caller frees). */
static int reference_bpe(const char *const *lines, int n_lines, int max_merges, char *(*merges)[2])
{
    /* The distinct words and their counts. */
    int n_all = 0, capacity = 64;
    char **all = test_alloc((size_t)capacity * sizeof *all);
    for (int i = 0; i < n_lines; i++) {
        char *copy = concat(lines[i], "");
        for (char *word = strtok(copy, " \t\n\v\f\r"); word; word = strtok(NULL, " \t\n\v\f\r")) {
            if (n_all == capacity) {
                capacity *= 2;
                all = realloc(all, (size_t)capacity * sizeof *all);
            }
            all[n_all++] = concat(word, "");
        }
        free(copy);
    }
    qsort(all, (size_t)n_all, sizeof *all, compare_strings);
    ref_word *words = test_alloc(((size_t)n_all + 1) * sizeof *words);
    int n_words = 0;
    for (int i = 0; i < n_all; i++) {
        if (n_words > 0 && i > 0 && strcmp(all[i], all[i - 1]) == 0) {
            words[n_words - 1].count++;
            continue;
        }
        ref_word *w = &words[n_words++];
        w->symbols = test_alloc((strlen(all[i]) + 1) * sizeof *w->symbols);
        w->length = 0;
        w->count = 1;
        for (const char *p = all[i]; *p;) {
            const char *start = p++;
            while ((*p & 0xC0) == 0x80)
                p++;
            char piece[16] = {0};
            memcpy(piece, start, (size_t)(p - start));
            w->symbols[w->length++] = concat(piece, *p ? "" : "</w>");
        }
    }
    for (int i = 0; i < n_all; i++)
        free(all[i]);
    free(all);

    int made = 0;
    while (made < max_merges) {
        int n_pairs = 0;
        for (int w = 0; w < n_words; w++)
            n_pairs += words[w].length > 1 ? words[w].length - 1 : 0;
        if (n_pairs == 0)
            break;
        ref_pair *pairs = test_alloc((size_t)n_pairs * sizeof *pairs);
        n_pairs = 0;
        for (int w = 0; w < n_words; w++)
            for (int i = 0; i + 1 < words[w].length; i++)
                pairs[n_pairs++] =
                    (ref_pair){words[w].symbols[i], words[w].symbols[i + 1], words[w].count};
        qsort(pairs, (size_t)n_pairs, sizeof *pairs, compare_pairs);
        /* Sorted by (left, right): the first of equal best counts is the bytewise smallest. */
        ref_pair best = {NULL, NULL, 0};
        for (int i = 0; i < n_pairs;) {
            ref_pair sum = pairs[i];
            int j = i + 1;
            for (; j < n_pairs && compare_pairs(&pairs[i], &pairs[j]) == 0; j++)
                sum.count += pairs[j].count;
            if (sum.count > best.count)
                best = sum;
            i = j;
        }
        if (best.count < 2) {
            free(pairs);
            break;
        }
        merges[made][0] = concat(best.left, "");
        merges[made][1] = concat(best.right, "");
        free(pairs);
        for (int w = 0; w < n_words; w++) {
            char **s = words[w].symbols;
            int kept = 0;
            for (int i = 0; i < words[w].length; i++) {
                if (i + 1 < words[w].length && strcmp(s[i], merges[made][0]) == 0 &&
                    strcmp(s[i + 1], merges[made][1]) == 0) {
                    char *joined = concat(s[i], s[i + 1]);
                    free(s[i]);
                    free(s[i + 1]);
                    s[kept++] = joined;
                    i++;
                } else {
                    s[kept++] = s[i];
                }
            }
            words[w].length = kept;
        }
        made++;
    }
    for (int w = 0; w < n_words; w++) {
        for (int i = 0; i < words[w].length; i++)
            free(words[w].symbols[i]);
        free(words[w].symbols);
    }
    free(words);
    return made;
}

static void check_against_reference(const char *what, const char *const *lines, int n,
                                    int max_merges)
{
    char *(*expected)[2] = test_alloc((size_t)max_merges * sizeof *expected);
    int made = reference_bpe(lines, n, max_merges, expected);
    attn_tokenizer_config config = {
        .kind = ATTN_TOKENIZER_BPE, .bpe_merges = max_merges, .min_count = 1};
    attn_tokenizer *tokenizer = NULL;
    CHECK_OK(attn_tokenizer_train(&config, lines, n, &tokenizer));
    CHECK(attn_tokenizer_num_merges(tokenizer) == made, "%s: %lld merges, reference %d", what,
          (long long)attn_tokenizer_num_merges(tokenizer), made);
    int first_difference = -1;
    for (int i = 0; i < made && i < attn_tokenizer_num_merges(tokenizer); i++) {
        const char *left = "", *right = "";
        attn_tokenizer_merge(tokenizer, i, &left, &right);
        if (first_difference < 0 &&
            (strcmp(left, expected[i][0]) != 0 || strcmp(right, expected[i][1]) != 0))
            first_difference = i;
    }
    CHECK(first_difference < 0,
          "%s: merges match the full-recount reference (first difference "
          "at %d)",
          what, first_difference);
    for (int i = 0; i < made; i++) {
        free(expected[i][0]);
        free(expected[i][1]);
    }
    free(expected);
    attn_tokenizer_destroy(tokenizer);
}

static void test_bpe_matches_full_recount(void)
{
    /* Runs of one character (merging (a, a) in "aaaa" gives "aa aa", in "aaa" "aa a"), words
     * that meet the same pair twice, one-character words, and multi-byte characters. */
    const char *tricky[] = {
        "aaaa aaa aa a aaaaa banana bandana ananas a a b",
        "\xC3\xB1\xC3\xB1\xC3\xB1 ma\xC3\xB1\xC3\xB1"
        "ana ma\xC3\xB1"
        "ana abab ababab ba ba",
        "abcabc cabcab abc abc bca",
    };
    check_against_reference("tricky words", tricky, 3, 200);
    check_against_reference("classic", classic_lines, 2, 100);

    const char *files[] = {"bible/train.en", "bible/train.es", "g2p-std/dev.tsv"};
    for (int f = 0; f < 3; f++) {
        const char *path = shared_data_file(0, files[f]);
        if (path == NULL) {
            skipped("BPE on real text against the reference");
            return;
        }
        attn_lines lines;
        CHECK_OK(attn_lines_read(path, &lines));
        int n = lines.count < 120 ? (int)lines.count : 120;
        check_against_reference(files[f], (const char *const *)lines.line, n, 150);
        attn_lines_free(&lines);
    }
}

static char *tokenizer_json(const attn_tokenizer *tokenizer)
{
    char *json = NULL;
    CHECK_OK(attn_tokenizer_to_json(tokenizer, &json));
    return json != NULL ? json : test_alloc(1);
}

static void test_bpe_is_deterministic(void)
{
    const char *path = shared_data_file(0, "bible/train.es");
    attn_lines lines;
    if (path == NULL) {
        const char *text = "el la los las en un una de del y que por para con sin sobre";
        CHECK_OK(attn_lines_parse("mem", text, strlen(text), &lines));
    } else {
        CHECK_OK(attn_lines_read(path, &lines));
    }
    int64_t n = lines.count < 1500 ? lines.count : 1500;
    attn_tokenizer *a = train("bpe:500", (const char *const *)lines.line, n);
    attn_tokenizer *b = train("bpe:500", (const char *const *)lines.line, n);
    /* The same text in reverse line order: same word counts, so the same merges. */
    char **reversed = test_alloc((size_t)n * sizeof *reversed);
    for (int64_t i = 0; i < n; i++)
        reversed[i] = lines.line[n - 1 - i];
    attn_tokenizer *c = train("bpe:500", (const char *const *)reversed, n);
    char *ja = tokenizer_json(a), *jb = tokenizer_json(b), *jc = tokenizer_json(c);
    CHECK(strcmp(ja, jb) == 0, "two trainings give the same tokenizer");
    CHECK(strcmp(ja, jc) == 0, "line order does not matter");
    free(ja);
    free(jb);
    free(jc);
    free(reversed);
    attn_tokenizer_destroy(a);
    attn_tokenizer_destroy(b);
    attn_tokenizer_destroy(c);
    attn_lines_free(&lines);
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
        attn_tokenizer *bpe = train("bpe:1000", train_lines, n);
        attn_tokenizer *chars = train("char", train_lines, n);
        CHECK(check_round_trips("bpe, training lines", bpe, lines.line, n, 0) == 0,
              "%s: no unknown token in the training text", names[lang][0]);
        int64_t unknown = check_round_trips("bpe, dev lines", bpe, dev.line, dev_n, 0);
        CHECK(unknown * 10 < dev_n, "%s: few dev lines meet unseen characters (%lld of %lld)",
              names[lang][1], (long long)unknown, (long long)dev_n);
        CHECK(check_round_trips("char, training lines", chars, lines.line, n, 1) == 0,
              "char: no unknown in the training text");
        check_round_trips("char, dev lines", chars, dev.line, dev_n, 1);

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
        attn_tokenizer_destroy(chars);
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
    for (int s = 0; s < 4; s++) {
        attn_tokenizer *tokenizer = train(specs[s], classic_lines, 2);
        if (tokenizer != NULL)
            check_json_round_trip(specs[s], tokenizer, samples, 5);
        attn_tokenizer_destroy(tokenizer);
    }
    const char *path = shared_data_file(0, "bible/train.en");
    if (path == NULL) {
        skipped("JSON round trip on the Bible");
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
    attn_tokenizer_config bad = {.kind = ATTN_TOKENIZER_BPE, .min_count = 1};
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
    for (int k = 0; k < 2; k++) {
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
    RUN_TEST(test_bpe_classic_example);
    RUN_TEST(test_bpe_matches_full_recount);
    RUN_TEST(test_bpe_is_deterministic);
    RUN_TEST(test_round_trips_on_g2p);
    RUN_TEST(test_round_trips_on_bible);
    RUN_TEST(test_json_round_trip);
    RUN_TEST(test_json_rejects_malformed);
    RUN_TEST(test_bad_arguments);
    return test_summary();
}
