/* chrF against sacreBLEU's own published numbers, hand-worked statistics, and bad input.
 *
 * Sources of the expected numbers (the sacreBLEU repository, github.com/mjpost/sacrebleu):
 *  [C]  test/test_chrf.py at commit 27bec349d41c900990d5aa669056766d0543d710, checked to its
 *       EPSILON of 1e-4
 *  [R]  README.md at commit 078c440168c6adc89ba75fe6d63f0d922d42bcfe: "chrF2 = 59.73" for
 *       its three-sentence, two-reference example. */
#include "../data/data_test_util.h" /* first: it sets _POSIX_C_SOURCE */

#include <math.h>

typedef struct chrf_case {
    const char *hyps[2];
    const char *refs[2];
    int n;
    double expected;
} chrf_case;

static double chrf_of(const attn_chrf_config *config, const char *const *hyps, int64_t n,
                      const char *const *const *refs, int64_t n_refs)
{
    attn_chrf_result result;
    attn_status status = attn_chrf_corpus(config, hyps, n, refs, n_refs, &result);
    CHECK(status == ATTN_OK, "attn_chrf_corpus: %s", attn_last_error());
    return status == ATTN_OK ? result.score : NAN;
}

static void run_cases(const char *what, const attn_chrf_config *config, const chrf_case *cases,
                      size_t count)
{
    for (size_t i = 0; i < count; i++) {
        const char *const *const streams[] = {cases[i].refs};
        double score = chrf_of(config, cases[i].hyps, cases[i].n, streams, 1);
        CHECK(fabs(score - cases[i].expected) < 1e-4, "%s case %zu ('%s'): %.7f, expected %.7f",
              what, i, cases[i].hyps[0], score, cases[i].expected);
    }
}

static attn_chrf_config config_with(int beta, int whitespace, int eps_smoothing)
{
    attn_chrf_config config;
    attn_chrf_config_default(&config);
    config.beta = beta;
    config.whitespace = whitespace;
    config.eps_smoothing = eps_smoothing;
    return config;
}

static void test_sacrebleu_eps_smoothing_cases(void)
{
    /* [C] test_cases: corpus_chrf(char_order=6, word_order=0, beta=3, eps_smoothing=True) */
    static const chrf_case cases[] = {
        {{"abcdefg"}, {"hijklmnop"}, 1, 0.0},
        {{"a"}, {"b"}, 1, 0.0},
        {{""}, {"b"}, 1, 0.0},
        {{""}, {"ref"}, 1, 0.0},
        {{""}, {"reference"}, 1, 0.0},
        {{"aa"}, {"ab"}, 1, 8.3333},
        {{"a", "b"}, {"a", "c"}, 2, 8.3333},
        {{"a"}, {"a"}, 1, 16.6667},
        {{"a b c"}, {"a b c"}, 1, 50.0},
        {{"a b c"}, {"abc"}, 1, 50.0},
        {{" risk assessment must be made of those who are qualified and expertise in the sector "
          "- these are the scientists ."},
         {"risk assessment has to be undertaken by those who are qualified and expert in that "
          "area - that is the scientists ."},
         1,
         63.361730},
        {{" Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. "},
         {"Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade "
          "freundschaftlich."},
         1,
         64.1302698},
        {{"Niemand hat die Absicht, eine Mauer zu errichten"},
         {"Niemand hat die Absicht, eine Mauer zu errichten"},
         1,
         100.0},
    };
    attn_chrf_config config = config_with(3, 0, 1);
    run_cases("eps smoothing", &config, cases, sizeof cases / sizeof *cases);
}

static void test_sacrebleu_effective_order_cases(void)
{
    /* [C] test_cases_effective_order: beta=3, eps_smoothing=False (sacreBLEU >= 2 default) */
    static const chrf_case cases[] = {
        {{"a"}, {"a"}, 1, 100.0},         {{""}, {"reference"}, 1, 0.0},
        {{"a b c"}, {"a b c"}, 1, 100.0}, {{"a b c"}, {"abc"}, 1, 100.0},
        {{""}, {"c"}, 1, 0.0},            {{"a", "b"}, {"a", "c"}, 2, 50.0},
        {{"aa"}, {"ab"}, 1, 25.0},
    };
    attn_chrf_config config = config_with(3, 0, 0);
    run_cases("effective order", &config, cases, sizeof cases / sizeof *cases);
}

static void test_sacrebleu_whitespace_cases(void)
{
    /* [C] test_cases_keep_whitespace: beta=3, remove_whitespace=False */
    static const chrf_case cases[] = {
        {{"Die Beziehung zwischen Obama und Netanjahu ist nicht gerade freundlich."},
         {"Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade "
          "freundschaftlich."},
         1,
         67.3481606},
        {{"risk assessment must be made of those who are qualified and expertise in the sector "
          "- these are the scientists ."},
         {"risk assessment has to be undertaken by those who are qualified and expert in that "
          "area - that is the scientists ."},
         1,
         65.2414427},
    };
    attn_chrf_config config = config_with(3, 1, 0);
    run_cases("whitespace", &config, cases, sizeof cases / sizeof *cases);
}

static void test_sacrebleu_sentence_cases(void)
{
    /* [C] test_sentence_level_chrf: sentence_chrf(..., eps_smoothing=True), default beta 2 */
    static const chrf_case cases[] = {
        {{"Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře."},
         {"Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo zemře."},
         1,
         39.14078509},
        {{"Nebo prostě nemají vybavení, které by jim pomohlo, uvedli lékaři."},
         {"A někdy nemáme ani potřebný materiál, abychom jim pomohli, popsali lékaři."},
         1,
         31.22557079},
        {{"Lapali po dechu, jejich životy skončily dřív, než skutečně začaly."},
         {"Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, "
          "připomněli."},
         1,
         57.15704367},
    };
    attn_chrf_config config = config_with(2, 0, 1);
    run_cases("sentence", &config, cases, sizeof cases / sizeof *cases);
}

static void test_readme_line(void)
{
    /* [R] the README's example with sacreBLEU's default chrF */
    const char *const hyps[] = {"The dog bit the man.", "It wasn't surprising.",
                                "The man had just bitten him."};
    const char *const ref1[] = {"The dog bit the man.", "It was not unexpected.",
                                "The man bit him first."};
    const char *const ref2[] = {"The dog had bit the man.", "No one was surprised.",
                                "The man had bitten the dog."};
    const char *const *const streams[] = {ref1, ref2};
    attn_chrf_result result, again;
    CHECK_OK(attn_chrf_corpus(NULL, hyps, 3, streams, 2, &result));
    char line[64];
    CHECK_OK(attn_chrf_format(&result, 2, line, sizeof line));
    CHECK(strcmp(line, "chrF2 = 59.73") == 0, "'%s', expected 'chrF2 = 59.73'", line);
    CHECK_OK(attn_chrf_corpus(NULL, hyps, 3, streams, 2, &again));
    CHECK(memcmp(&result, &again, sizeof result) == 0, "two runs, identical bits");
}

static void test_hand_worked(void)
{
    /* "ab" against "abb" (character orders 1..2, beta 1): unigrams a1 b1 vs a1 b2 -> 2
     * matches of 2 hyp / 3 ref; bigrams "ab" vs "ab" "bb" -> 1 of 1 / 2. Precision
     * (1 + 1) / 2 = 1, recall (2/3 + 1/2) / 2 = 7/12, F1 = 2 * 7/12 / (1 + 7/12) = 14/19. */
    attn_chrf_config config;
    attn_chrf_config_default(&config);
    config.char_order = 2;
    config.beta = 1;
    const char *const hyps[] = {"a b"};
    const char *const refs[] = {"ab\xC2\xA0" "b"}; /* NBSP is whitespace: removed */
    const char *const *const streams[] = {refs};
    attn_chrf_result result;
    CHECK_OK(attn_chrf_corpus(&config, hyps, 1, streams, 1, &result));
    CHECK(result.hyp_ngrams[0] == 2 && result.ref_ngrams[0] == 3 && result.matches[0] == 2,
          "unigram statistics %lld %lld %lld", (long long)result.hyp_ngrams[0],
          (long long)result.ref_ngrams[0], (long long)result.matches[0]);
    CHECK(result.hyp_ngrams[1] == 1 && result.ref_ngrams[1] == 2 && result.matches[1] == 1,
          "bigram statistics");
    CHECK_CLOSE(result.score, 100.0 * 14.0 / 19.0, 0, 1e-14);

    /* Code points, not bytes: "é" is one character, so "éé" has one bigram. */
    const char *const accented[] = {"\xC3\xA9\xC3\xA9"};
    const char *const *const accented_streams[] = {accented};
    CHECK_OK(attn_chrf_corpus(&config, accented, 1, accented_streams, 1, &result));
    CHECK(result.hyp_ngrams[0] == 2 && result.hyp_ngrams[1] == 1, "code-point n-grams");
    CHECK_CLOSE(result.score, 100.0, 0, 1e-14);

    /* A hypothesis order counts 0 n-grams when the reference has none of that order:
     * "abc" against "a" at order 2 gives (0, 0, 0), so only unigrams count: P 1/3, R 1. */
    const char *const long_hyp[] = {"abc"};
    const char *const short_ref[] = {"a"};
    const char *const *const short_streams[] = {short_ref};
    CHECK_OK(attn_chrf_corpus(&config, long_hyp, 1, short_streams, 1, &result));
    CHECK(result.hyp_ngrams[1] == 0 && result.ref_ngrams[1] == 0, "order without reference");
    CHECK_CLOSE(result.score, 100.0 * 2.0 * (1.0 / 3.0) / (1.0 / 3.0 + 1.0), 0, 1e-14);

    /* Several references: per segment the best one's statistics are summed. Segment 1 matches
     * its second reference exactly, segment 2 its first. */
    const char *const two_hyps[] = {"xy", "pq"};
    const char *const first[] = {"zz", "pq"};
    const char *const second[] = {"xy", "zz"};
    const char *const *const two_streams[] = {first, second};
    CHECK_OK(attn_chrf_corpus(&config, two_hyps, 2, two_streams, 2, &result));
    CHECK_CLOSE(result.score, 100.0, 0, 1e-14);
    CHECK(result.matches[0] == 4 && result.ref_ngrams[0] == 4, "best references summed");
}

static void test_bad_input(void)
{
    const char *const hyps[] = {"a b"};
    const char *const refs[] = {"a b"};
    const char *const *const streams[] = {refs};
    attn_chrf_result result;
    attn_chrf_config config;
    CHECK_FAILS(attn_chrf_corpus(NULL, hyps, 1, streams, 1, NULL), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_chrf_corpus(NULL, NULL, 1, streams, 1, &result), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_chrf_corpus(NULL, hyps, 1, streams, 0, &result), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_chrf_corpus(NULL, hyps, -2, streams, 1, &result), ATTN_ERR_INVALID_ARGUMENT);
    int bad_orders[] = {0, ATTN_CHRF_MAX_ORDER + 1};
    for (size_t i = 0; i < 2; i++) {
        attn_chrf_config_default(&config);
        config.char_order = bad_orders[i];
        CHECK_FAILS(attn_chrf_corpus(&config, hyps, 1, streams, 1, &result),
                    ATTN_ERR_INVALID_ARGUMENT);
    }
    attn_chrf_config_default(&config);
    config.beta = -1;
    CHECK_FAILS(attn_chrf_corpus(&config, hyps, 1, streams, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    const char *const bad[] = {"\xED\xA0\x80"}; /* an encoded surrogate */
    CHECK_FAILS(attn_chrf_corpus(NULL, bad, 1, streams, 1, &result), ATTN_ERR_FORMAT);
    const char *const blank[] = {" "};
    const char *const *const blank_streams[] = {blank};
    CHECK_FAILS(attn_chrf_corpus(NULL, hyps, 1, blank_streams, 1, &result), ATTN_ERR_FORMAT);
    CHECK_OK(attn_chrf_corpus(NULL, hyps, 1, streams, 1, &result));
    char small[8], line[64];
    CHECK_FAILS(attn_chrf_format(&result, 2, small, sizeof small), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_chrf_format(&result, -1, line, sizeof line), ATTN_ERR_INVALID_ARGUMENT);
}

int main(void)
{
    RUN_TEST(test_sacrebleu_eps_smoothing_cases);
    RUN_TEST(test_sacrebleu_effective_order_cases);
    RUN_TEST(test_sacrebleu_whitespace_cases);
    RUN_TEST(test_sacrebleu_sentence_cases);
    RUN_TEST(test_readme_line);
    RUN_TEST(test_hand_worked);
    RUN_TEST(test_bad_input);
    return test_summary();
}
