/* BLEU against sacreBLEU's own published numbers, the 13a tokenizer by hand, statistics, the
 * printed line, and bad input.
 *
 * Sources of the expected numbers (the sacreBLEU repository, github.com/mjpost/sacrebleu):
 *  [T]  test/test_bleu.py at commit 785d26bb42ff5cc738c8aa06efb288cf407fc4fd
 *  [S]  test/test_sentence_bleu.py at commit ad62c9b5a4c1381598c0774c8ea1dc3597638ac0
 *  [R]  README.md at commit 078c440168c6adc89ba75fe6d63f0d922d42bcfe ("Using SacreBLEU from
 *       Python" and "Variable Number of References")
 *  [D]  /work/shared/data/README.md: copying the Spanish source of the Bible test verses
 *       scores 0.07 against the English (sacreBLEU default BLEU).
 * Each check uses the tolerance of the test it comes from ([T] 1e-8 on the score, [S] 1e-3),
 * or compares the printed digits ([R], [D], [T]'s max-order cases). */
#include "../data/data_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <math.h>

/* The README's example, used by [T] and [R]: three hypotheses, two reference streams. */
static const char *const readme_hyps[] = {"The dog bit the man.", "It wasn't surprising.",
                                          "The man had just bitten him."};
static const char *const readme_ref1[] = {"The dog bit the man.", "It was not unexpected.",
                                          "The man bit him first."};
static const char *const readme_ref2[] = {"The dog had bit the man.", "No one was surprised.",
                                          "The man had bitten the dog."};

static attn_bleu_config config_with(attn_bleu_tokenize tokenize, attn_bleu_smooth smooth,
                                    double smooth_value, int effective_order)
{
    attn_bleu_config config;
    attn_bleu_config_default(&config);
    config.tokenize = tokenize;
    config.smooth = smooth;
    config.smooth_value = smooth_value;
    config.effective_order = effective_order;
    return config;
}

/* sacreBLEU's raw_corpus_bleu: no tokenization, floor smoothing, effective order. */
static attn_bleu_config raw_config(double floor)
{
    return config_with(ATTN_BLEU_TOKENIZE_NONE, ATTN_BLEU_SMOOTH_FLOOR, floor, 1);
}

static double bleu_of(const attn_bleu_config *config, const char *const *hyps, int64_t n,
                      const char *const *const *refs, int64_t n_refs)
{
    attn_bleu_result result;
    attn_status status = attn_bleu_corpus(config, hyps, n, refs, n_refs, &result);
    CHECK(status == ATTN_OK, "attn_bleu_corpus: %s", attn_last_error());
    return status == ATTN_OK ? result.score : NAN;
}

static double sentence_bleu(const attn_bleu_config *config, const char *hyp, const char *ref)
{
    const char *const hyps[] = {hyp};
    const char *const refs[] = {ref};
    const char *const *const streams[] = {refs};
    return bleu_of(config, hyps, 1, streams, 1);
}

/* ---- published numbers ------------------------------------------------------------------- */

static void test_sacrebleu_corpus_cases(void)
{
    const char *const *const streams[] = {readme_ref1, readme_ref2};
    attn_bleu_config defaults;
    attn_bleu_config_default(&defaults);
    /* [T] test_corpus_bleu_cases (intl tokenization is not implemented) */
    CHECK_CLOSE(bleu_of(NULL, readme_hyps, 3, streams, 2), 48.530827, 1e-8, 0);
    CHECK_CLOSE(bleu_of(&defaults, readme_hyps, 3, streams, 2), 48.530827, 1e-8, 0);
    const char *const empty[] = {"", "", ""};
    CHECK(bleu_of(NULL, empty, 3, streams, 2) == 0.0, "empty hypotheses score 0");
    attn_bleu_config none = config_with(ATTN_BLEU_TOKENIZE_NONE, ATTN_BLEU_SMOOTH_EXP, -1, 0);
    CHECK_CLOSE(bleu_of(&none, readme_hyps, 3, streams, 2), 49.1919566, 1e-8, 0);
    attn_bleu_config no_smoothing =
        config_with(ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_NONE, -1, 0);
    CHECK_CLOSE(bleu_of(&no_smoothing, readme_hyps, 3, streams, 2), 48.530827, 1e-8, 0);

    /* [T] test_bleu_max_order, compared as printed */
    static const char *const by_order[] = {"77.65", "60.50", "53.93", "48.53", "46.14", "43.28"};
    for (int order = 1; order <= 6; order++) {
        attn_bleu_config config;
        attn_bleu_config_default(&config);
        config.max_order = order;
        char printed[32];
        snprintf(printed, sizeof printed, "%.2f", bleu_of(&config, readme_hyps, 3, streams, 2));
        CHECK(strcmp(printed, by_order[order - 1]) == 0, "max order %d: %s, expected %s", order,
              printed, by_order[order - 1]);
    }
}

static void test_sacrebleu_raw_cases(void)
{
    attn_bleu_config raw = raw_config(0.01);
    /* [T] test_raw_bleu_cases, scores / 100 */
    const char *const two_hyps[] = {"this is a test", "another test"};
    const char *const two_refs[] = {"ref1", "ref2"};
    const char *const *const two_streams[] = {two_refs};
    CHECK_CLOSE(bleu_of(&raw, two_hyps, 2, two_streams, 1) / 100, 0.0, 1e-8, 0);
    CHECK_CLOSE(sentence_bleu(&raw, "this is a test", "this is a test") / 100, 1.0, 1e-8, 0);
    CHECK_CLOSE(sentence_bleu(&raw, "this is a fest", "this is a test") / 100, 0.223606797749979,
                1e-8, 0);
    /* [T] test_case_effective_order */
    CHECK_CLOSE(sentence_bleu(&raw, "test", "a test") / 100, 0.3678794411714425, 1e-8, 0);
    CHECK_CLOSE(sentence_bleu(&raw, "a test", "a test") / 100, 1.0, 1e-8, 0);
    CHECK_CLOSE(sentence_bleu(&raw, "a little test", "a test") / 100, 0.03218297948685433, 1e-8,
                0);
    /* [T] test_offset: floor 0 and the default floor 0.1 */
    const char *hyp = "am I am a character sequence", *ref = "I am a symbol string sequence a a";
    attn_bleu_config floor0 = raw_config(0.0), floor_default = raw_config(-1.0);
    CHECK_CLOSE(sentence_bleu(&floor0, hyp, ref) / 100, 0.0, 1e-8, 0);
    CHECK_CLOSE(sentence_bleu(&floor_default, hyp, ref) / 100, 0.1555722182, 1e-8, 0);

    /* [T] test_case_statistics */
    const char *const hyps[] = {hyp};
    const char *const refs[] = {ref};
    const char *const *const streams[] = {refs};
    attn_bleu_result result;
    CHECK_OK(attn_bleu_corpus(&raw, hyps, 1, streams, 1, &result));
    const int64_t matches[] = {4, 2, 1, 0}, totals[] = {6, 5, 4, 3};
    for (int n = 0; n < 4; n++)
        CHECK(result.matches[n] == matches[n] && result.totals[n] == totals[n],
              "order %d: %lld/%lld, expected %lld/%lld", n + 1, (long long)result.matches[n],
              (long long)result.totals[n], (long long)matches[n], (long long)totals[n]);
    CHECK(result.hyp_len == 6 && result.ref_len == 8, "lengths %lld %lld",
          (long long)result.hyp_len, (long long)result.ref_len);
}

static void test_sacrebleu_statistics_cases(void)
{
    attn_bleu_result result;
    /* [T] test_case_scoring: BLEU.compute_bleu's own default is smooth_method 'none' */
    attn_bleu_config none = config_with(ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_NONE, -1, 0);
    const int64_t m1[] = {9, 7, 5, 3}, t1[] = {10, 8, 6, 4};
    CHECK_OK(attn_bleu_from_statistics(&none, m1, t1, 11, 11, &result));
    CHECK_CLOSE(result.score / 100, 0.8375922397, 1e-8, 0);

    /* [T] test_degenerate_statistics: floor smoothing, the score exactly 0 */
    struct {
        int64_t matches[4], totals[4], hyp_len, ref_len;
        double floor;
    } cases[] = {
        {{0, 0, 0, 0}, {4, 4, 2, 1}, 0, 1, 0.0},   {{0, 0, 0, 0}, {10, 11, 12, 0}, 14, 10, 0.0},
        {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.0},   {{6, 5, 4, 0}, {6, 5, 4, 3}, 6, 6, 0.0},
        {{0, 0, 0, 0}, {0, 0, 0, 0}, 0, 0, 0.1},   {{0, 0, 0, 0}, {0, 0, 0, 0}, 1, 5, 0.01},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        attn_bleu_config floor =
            config_with(ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_FLOOR, cases[i].floor, 0);
        CHECK_OK(attn_bleu_from_statistics(&floor, cases[i].matches, cases[i].totals,
                                           cases[i].hyp_len, cases[i].ref_len, &result));
        CHECK(result.score == 0.0, "degenerate case %zu scores %g", i, result.score);
    }
}

static void test_sacrebleu_sentence_cases(void)
{
    /* [S] Example from sacreBLEU's issue #98, sentence BLEU with effective order. */
    const char *ref = "producţia de zahăr brut se exprimă în zahăr alb;";
    const char *sys = "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;";
    struct {
        attn_bleu_tokenize tokenize;
        attn_bleu_smooth smooth;
        double value;
        double expected;
    } cases[] = {
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_EXP, -1, 8.493},
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_NONE, -1, 0.0},
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_FLOOR, -1, 4.51688},
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_FLOOR, 0.1, 4.51688},
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_FLOOR, 0.5, 10.10},
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_ADD_K, -1, 14.882},
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_ADD_K, 1, 14.882},
        {ATTN_BLEU_TOKENIZE_13A, ATTN_BLEU_SMOOTH_ADD_K, 2, 21.389},
        {ATTN_BLEU_TOKENIZE_NONE, ATTN_BLEU_SMOOTH_EXP, -1, 7.347},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        attn_bleu_config config =
            config_with(cases[i].tokenize, cases[i].smooth, cases[i].value, 1);
        double score = sentence_bleu(&config, sys, ref);
        CHECK(fabs(score - cases[i].expected) < 1e-3, "case %zu: %.6f, expected %g", i, score,
              cases[i].expected);
    }
    /* [S] Example from issue #141: no match at all scores 0 with every smoothing. */
    for (int smooth = ATTN_BLEU_SMOOTH_EXP; smooth <= ATTN_BLEU_SMOOTH_ADD_K; smooth++) {
        attn_bleu_config config =
            config_with(ATTN_BLEU_TOKENIZE_13A, (attn_bleu_smooth)smooth, -1, 1);
        CHECK(sentence_bleu(&config, "this is a cat", "okay thanks") == 0.0,
              "smooth %d: no match scores 0", smooth);
    }
}

static void test_readme_lines(void)
{
    /* [R] the lines sacreBLEU prints */
    const char *const *const streams[] = {readme_ref1, readme_ref2};
    attn_bleu_result result;
    char line[256];
    CHECK_OK(attn_bleu_corpus(NULL, readme_hyps, 3, streams, 2, &result));
    CHECK_OK(attn_bleu_format(&result, 2, line, sizeof line));
    const char *expected =
        "BLEU = 48.53 82.4/50.0/45.5/37.5 (BP = 0.943 ratio = 0.944 hyp_len = 17 ref_len = 18)";
    CHECK(strcmp(line, expected) == 0, "'%s'\n   expected '%s'", line, expected);

    /* The first sentence loses its first reference: an empty entry is absent. */
    const char *const ref1_gap[] = {"", "It was not unexpected.", "The man bit him first."};
    const char *const *const gap_streams[] = {ref1_gap, readme_ref2};
    CHECK_OK(attn_bleu_corpus(NULL, readme_hyps, 3, gap_streams, 2, &result));
    CHECK_OK(attn_bleu_format(&result, 2, line, sizeof line));
    expected =
        "BLEU = 29.44 82.4/42.9/27.3/12.5 (BP = 0.889 ratio = 0.895 hyp_len = 17 ref_len = 19)";
    CHECK(strcmp(line, expected) == 0, "'%s'\n   expected '%s'", line, expected);
    /* NULL is absent too, and so is a line of only whitespace. */
    const char *const ref1_null[] = {NULL, "It was not unexpected.", "The man bit him first."};
    const char *const ref1_blank[] = {" \t\xC2\xA0", "It was not unexpected.",
                                      "The man bit him first."};
    const char *const *const null_streams[] = {ref1_null, readme_ref2};
    const char *const *const blank_streams[] = {ref1_blank, readme_ref2};
    attn_bleu_result other;
    CHECK_OK(attn_bleu_corpus(NULL, readme_hyps, 3, null_streams, 2, &other));
    CHECK(other.score == result.score, "NULL reference is absent");
    CHECK_OK(attn_bleu_corpus(NULL, readme_hyps, 3, blank_streams, 2, &other));
    CHECK(other.score == result.score, "whitespace-only reference is absent");
}

static void test_bible_spanish_copy(void)
{
    /* [D] the untranslated Spanish source of the test verses against the English */
    const char *es_path = shared_data_file(0, "bible/test.es");
    const char *en_path = shared_data_file(1, "bible/test.en");
    if (es_path == NULL) {
        skipped("test_bible_spanish_copy");
        return;
    }
    attn_lines es, en;
    CHECK_OK(attn_lines_read(es_path, &es));
    CHECK_OK(attn_lines_read(en_path, &en));
    CHECK(es.count == 1013 && en.count == 1013, "1013 verses");
    const char *const *const streams[] = {(const char *const *)en.line};
    attn_bleu_result result;
    CHECK_OK(attn_bleu_corpus(NULL, (const char *const *)es.line, es.count, streams, 1, &result));
    char printed[32];
    snprintf(printed, sizeof printed, "%.2f", result.score);
    CHECK(strcmp(printed, "0.07") == 0, "Spanish copy scores %s, expected 0.07", printed);
    /* The English against itself is perfect. */
    CHECK_OK(attn_bleu_corpus(NULL, (const char *const *)en.line, en.count, streams, 1, &result));
    CHECK(result.brevity_penalty == 1.0, "no brevity penalty");
    CHECK_CLOSE(result.score, 100.0, 0, 1e-13);
    attn_lines_free(&es);
    attn_lines_free(&en);
}

/* ---- the tokenizer, by hand ------------------------------------------------------------- */

static void check_tokens(attn_bleu_tokenize tokenize, const char *text, const char *expected)
{
    char *tokens = NULL;
    CHECK_OK(attn_bleu_tokenize_text(tokenize, text, &tokens));
    CHECK(tokens != NULL && strcmp(tokens, expected) == 0, "'%s' -> '%s', expected '%s'", text,
          tokens ? tokens : "(null)", expected);
    free(tokens);
}

static void test_13a_rules(void)
{
    attn_bleu_tokenize t = ATTN_BLEU_TOKENIZE_13A;
    check_tokens(t, "Hello, world.", "Hello , world .");
    check_tokens(t, "It wasn't (quite) 100% \"ok\"!", "It wasn't ( quite ) 100 % \" ok \" !");
    /* A period or comma stays inside a number, and is split elsewhere. */
    check_tokens(t, "pi is 3.14, or 1,000.5 / 1000", "pi is 3.14 , or 1,000.5 / 1000");
    check_tokens(t, "U.S.A. .5 5.", "U . S . A . . 5 5 .");
    /* A dash splits after a digit only. */
    check_tokens(t, "well-known 1990-2000 -5", "well-known 1990 - 2000 -5");
    /* Entities are decoded in sacreBLEU's order, one pass each: &amp;lt; becomes <. */
    check_tokens(t, "&quot;a&quot; &amp; b &lt;c&gt; &amp;lt;", "\" a \" & b < c > <");
    check_tokens(t, "one<skipped>two", "onetwo");
    /* Every ASCII symbol of 13a's class is its own token. */
    check_tokens(t, "a{b|c}d~e[f\\g]h^i_j`k!l#m$n*o+p:q;r=s?t@u/v",
                 "a { b | c } d ~ e [ f \\ g ] h ^ i _ j ` k ! l # m $ n * o + p : q ; r = s ? "
                 "t @ u / v");
    /* Python's whitespace separates tokens (NBSP, thin space, ideographic space, U+001F);
     * a zero-width space does not. */
    check_tokens(t, "a\xC2\xA0" "b\xE2\x80\x89" "c\xE3\x80\x80" "d\x1F" "e\xE2\x80\x8B" "f",
                 "a b c d e\xE2\x80\x8B" "f");
    /* Non-ASCII letters before a period split like ASCII ones. */
    check_tokens(t, "caf\xC3\xA9. na\xC3\xAFve,", "caf\xC3\xA9 . na\xC3\xAFve ,");
    check_tokens(t, "  \t ", "");
    check_tokens(t, "", "");
    /* The segment's trailing whitespace goes before the tokenizer runs: "-\n" is not removed
     * at the end, only inside. */
    check_tokens(t, "ab-\ncd-\n", "abcd-");

    attn_bleu_tokenize none = ATTN_BLEU_TOKENIZE_NONE;
    check_tokens(none, "  Hello, world.\t ok ", "Hello, world. ok");
    check_tokens(none, "a\xC2\xA0" "b", "a b");
}

/* ---- behaviour --------------------------------------------------------------------------- */

static void test_statistics_and_line(void)
{
    /* Hand-worked: hyp "a b a b" vs refs "a b c" and "b a b a b". Unigrams: a x2 (max in a
     * ref 2), b x2 (max 3) -> 4/4; bigrams: "a b" x2 (max 2), "b a" x1 (max 2) -> 3/3;
     * trigrams "a b a" (max 1), "b a b" (max 2) -> 2/2; 4-gram "a b a b" (max 1) -> 1/1.
     * Lengths 3 and 5 are equally near 4: the shorter counts. */
    const char *const hyps[] = {"a b a b"};
    const char *const ref1[] = {"a b c"};
    const char *const ref2[] = {"b a b a b"};
    const char *const *const streams[] = {ref1, ref2};
    attn_bleu_result result;
    CHECK_OK(attn_bleu_corpus(NULL, hyps, 1, streams, 2, &result));
    const int64_t matches[] = {4, 3, 2, 1}, totals[] = {4, 3, 2, 1};
    for (int n = 0; n < 4; n++)
        CHECK(result.matches[n] == matches[n] && result.totals[n] == totals[n],
              "order %d: %lld/%lld", n + 1, (long long)result.matches[n],
              (long long)result.totals[n]);
    CHECK(result.hyp_len == 4 && result.ref_len == 3, "closest reference length %lld",
          (long long)result.ref_len);
    CHECK_CLOSE(result.score, 100.0, 0, 1e-13); /* all precisions 1, no brevity penalty */

    /* Clipping: "the the the" against "the cat" matches 1 of 3 unigrams. A shorter
     * hypothesis gets the brevity penalty exp(1 - 4/3). Exp smoothing: the first order with
     * no match gets 1 / (2 * total), the next 1 / (4 * total). */
    const char *const h2[] = {"the the the"};
    const char *const r2[] = {"the cat sat down"};
    const char *const *const s2[] = {r2};
    CHECK_OK(attn_bleu_corpus(NULL, h2, 1, s2, 1, &result));
    CHECK(result.matches[0] == 1 && result.totals[0] == 3, "clipped unigrams");
    CHECK_CLOSE(result.brevity_penalty, exp(1.0 - 4.0 / 3.0), 0, 1e-15);
    CHECK_CLOSE(result.precisions[0], 100.0 / 3.0, 0, 1e-15);
    CHECK_CLOSE(result.precisions[1], 100.0 / (2.0 * 2.0), 0, 1e-15);
    CHECK_CLOSE(result.precisions[2], 100.0 / (4.0 * 1.0), 0, 1e-15);
    CHECK(result.precisions[3] == 0.0, "no 4-grams: the loop stops, precision 0");
    CHECK(result.score < 1e-300, "an order without n-grams zeroes the score");

    /* The corpus score is the score of the summed statistics. */
    const char *const *const streams_readme[] = {readme_ref1, readme_ref2};
    attn_bleu_result corpus, recomputed, again;
    CHECK_OK(attn_bleu_corpus(NULL, readme_hyps, 3, streams_readme, 2, &corpus));
    CHECK_OK(attn_bleu_from_statistics(NULL, corpus.matches, corpus.totals, corpus.hyp_len,
                                       corpus.ref_len, &recomputed));
    CHECK(memcmp(&corpus, &recomputed, sizeof corpus) == 0, "same result from statistics");
    CHECK_OK(attn_bleu_corpus(NULL, readme_hyps, 3, streams_readme, 2, &again));
    CHECK(memcmp(&corpus, &again, sizeof corpus) == 0, "two runs, identical bits");

    char line[256];
    CHECK_OK(attn_bleu_format(&corpus, 4, line, sizeof line));
    CHECK(strncmp(line, "BLEU = 48.5308 82.4/", 20) == 0, "width 4: %s", line);
    attn_bleu_config order2;
    attn_bleu_config_default(&order2);
    order2.max_order = 2;
    CHECK_OK(attn_bleu_corpus(&order2, readme_hyps, 3, streams_readme, 2, &corpus));
    CHECK_OK(attn_bleu_format(&corpus, 2, line, sizeof line));
    CHECK(strncmp(line, "BLEU = 60.50 82.4/50.0 (BP", 26) == 0, "two precisions: %s", line);

    /* No segments: a score of 0. */
    CHECK_OK(attn_bleu_corpus(NULL, NULL, 0, streams_readme, 2, &corpus));
    CHECK(corpus.score == 0.0 && corpus.hyp_len == 0, "empty corpus");
}

static void test_bad_input(void)
{
    const char *const hyps[] = {"a b", "c d"};
    const char *const refs[] = {"a b", "c d"};
    const char *const *const streams[] = {refs};
    attn_bleu_result result;
    CHECK_FAILS(attn_bleu_corpus(NULL, hyps, 2, streams, 1, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_corpus(NULL, NULL, 2, streams, 1, &result), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_corpus(NULL, hyps, 2, NULL, 1, &result), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_corpus(NULL, hyps, -1, streams, 1, &result), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_corpus(NULL, hyps, 2, streams, 0, &result), ATTN_ERR_INVALID_ARGUMENT);
    const char *const *const null_stream[] = {NULL};
    CHECK_FAILS(attn_bleu_corpus(NULL, hyps, 2, null_stream, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    const char *const null_hyp[] = {"a", NULL};
    CHECK_FAILS(attn_bleu_corpus(NULL, null_hyp, 2, streams, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(strstr(attn_last_error(), "hypothesis 2") != NULL, "names the segment: %s",
          attn_last_error());

    const char *const bad_utf8[] = {"a b", "c \xC3\x28"};
    CHECK_FAILS(attn_bleu_corpus(NULL, bad_utf8, 2, streams, 1, &result), ATTN_ERR_FORMAT);
    const char *const *const bad_ref[] = {bad_utf8};
    CHECK_FAILS(attn_bleu_corpus(NULL, hyps, 2, bad_ref, 1, &result), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "reference 2") != NULL, "names the segment: %s",
          attn_last_error());
    const char *const no_ref[] = {"a b", "  "};
    const char *const *const no_ref_streams[] = {no_ref, no_ref};
    CHECK_FAILS(attn_bleu_corpus(NULL, hyps, 2, no_ref_streams, 2, &result), ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), "segment 2") != NULL, "names the segment: %s",
          attn_last_error());

    attn_bleu_config config;
    int bad_orders[] = {0, -1, ATTN_BLEU_MAX_ORDER + 1};
    for (size_t i = 0; i < sizeof bad_orders / sizeof *bad_orders; i++) {
        attn_bleu_config_default(&config);
        config.max_order = bad_orders[i];
        CHECK_FAILS(attn_bleu_corpus(&config, hyps, 2, streams, 1, &result),
                    ATTN_ERR_INVALID_ARGUMENT);
    }
    attn_bleu_config_default(&config);
    config.smooth = (attn_bleu_smooth)7;
    CHECK_FAILS(attn_bleu_corpus(&config, hyps, 2, streams, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_bleu_config_default(&config);
    config.tokenize = (attn_bleu_tokenize)9;
    CHECK_FAILS(attn_bleu_corpus(&config, hyps, 2, streams, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    attn_bleu_config_default(&config);
    config.smooth_value = NAN;
    CHECK_FAILS(attn_bleu_corpus(&config, hyps, 2, streams, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);

    const int64_t matches[] = {3, 1, 0, 0}, totals[] = {2, 1, 0, 0};
    CHECK_FAILS(attn_bleu_from_statistics(NULL, matches, totals, 2, 2, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_from_statistics(NULL, totals, totals, -1, 2, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_from_statistics(NULL, NULL, totals, 2, 2, &result),
                ATTN_ERR_INVALID_ARGUMENT);

    CHECK_OK(attn_bleu_corpus(NULL, hyps, 2, streams, 1, &result));
    char small[20], line[256];
    CHECK_FAILS(attn_bleu_format(&result, 2, small, sizeof small), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_format(&result, 18, line, sizeof line), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_bleu_format(NULL, 2, line, sizeof line), ATTN_ERR_INVALID_ARGUMENT);
    char *tokens = (char *)1;
    CHECK_FAILS(attn_bleu_tokenize_text(ATTN_BLEU_TOKENIZE_13A, NULL, &tokens),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK(tokens == NULL, "no tokens on failure");
    CHECK_FAILS(attn_bleu_tokenize_text(ATTN_BLEU_TOKENIZE_13A, "\xFF", &tokens),
                ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_bleu_tokenize_text(ATTN_BLEU_TOKENIZE_13A, "a", NULL),
                ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_sacrebleu_corpus_cases);
    RUN_TEST(test_sacrebleu_raw_cases);
    RUN_TEST(test_sacrebleu_statistics_cases);
    RUN_TEST(test_sacrebleu_sentence_cases);
    RUN_TEST(test_readme_lines);
    RUN_TEST(test_bible_spanish_copy);
    RUN_TEST(test_13a_rules);
    RUN_TEST(test_statistics_and_line);
    RUN_TEST(test_bad_input);
    return test_summary();
}
