/* Edit distance against brute force, corpus WER and G2P WER/PER worked out by hand (several
 * pronunciations, ties, missing and empty hypotheses), malformed TSV naming file:line, and the
 * real CMUdict test split scored against itself. */
#include "../data/data_test_util.h" /* first: it sets _POSIX_C_SOURCE */
#include "metrics/metrics_internal.h"

/* ---- edit distance ---------------------------------------------------------------------- */

/* The textbook recursion, exponential but obviously right for short sequences. */
static int64_t brute_distance(const uint32_t *a, int64_t n, const uint32_t *b, int64_t m)
{
    if (n == 0)
        return m;
    if (m == 0)
        return n;
    int64_t replace = brute_distance(a + 1, n - 1, b + 1, m - 1) + (a[0] != b[0]);
    int64_t drop_a = brute_distance(a + 1, n - 1, b, m) + 1;
    int64_t drop_b = brute_distance(a, n, b + 1, m - 1) + 1;
    int64_t best = replace < drop_a ? replace : drop_a;
    return best < drop_b ? best : drop_b;
}

static void test_edit_distance_matches_brute_force(void)
{
    attn_rng rng;
    attn_rng_seed(&rng, 7);
    uint32_t a[7], b[7];
    int64_t row[8];
    int mismatches = 0;
    for (int trial = 0; trial < 2000; trial++) {
        int64_t n = (int64_t)attn_rng_below(&rng, 8), m = (int64_t)attn_rng_below(&rng, 8);
        for (int64_t i = 0; i < n; i++)
            a[i] = (uint32_t)attn_rng_below(&rng, 3);
        for (int64_t j = 0; j < m; j++)
            b[j] = (uint32_t)attn_rng_below(&rng, 3);
        int64_t fast = edit_distance(a, n, b, m, row), slow = brute_distance(a, n, b, m);
        int64_t back = edit_distance(b, m, a, n, row);
        mismatches += fast != slow || back != slow;
    }
    CHECK(mismatches == 0, "%d of 2000 random pairs differ from the recursion", mismatches);
    const uint32_t kitten[] = {'k', 'i', 't', 't', 'e', 'n'};
    const uint32_t sitting[] = {'s', 'i', 't', 't', 'i', 'n', 'g'};
    CHECK(edit_distance(kitten, 6, sitting, 7, row) == 3, "kitten -> sitting is 3 edits");
}

/* ---- corpus WER ------------------------------------------------------------------------- */

static void test_wer_by_hand(void)
{
    /* Segment 1: one deletion against 4 words. Segment 2: b -> x and an inserted d, against 3
     * words. Segment 3: an empty hypothesis deletes both words. 5 edits / 9 words. */
    const char *const hyps[] = {"the cat sat", "a b c d", ""};
    const char *const refs[] = {"the cat sat down", "a x c", "two words"};
    const char *const *const streams[] = {refs};
    attn_wer_result result;
    CHECK_OK(attn_wer_corpus(hyps, 3, streams, 1, &result));
    CHECK(result.edits == 5 && result.reference_words == 9 && result.hypothesis_words == 7,
          "edits %lld, reference words %lld, hypothesis words %lld", (long long)result.edits,
          (long long)result.reference_words, (long long)result.hypothesis_words);
    CHECK_CLOSE(result.wer, 100.0 * 5.0 / 9.0, 0, 1e-15);

    /* Whitespace of any kind separates words; case matters. */
    const char *const spaced[] = {"  The\tcat\xE2\x80\x83sat "};
    const char *const plain[] = {"the cat sat"};
    const char *const *const plain_streams[] = {plain};
    CHECK_OK(attn_wer_corpus(spaced, 1, plain_streams, 1, &result));
    CHECK(result.edits == 1 && result.reference_words == 3, "one substitution (The/the)");
}

static void test_wer_closest_reference(void)
{
    /* "a b c" is 1 edit from both "a b" and "a b c d": the tie goes to the longer. */
    const char *const hyps[] = {"a b c"};
    const char *const shorter[] = {"a b"};
    const char *const longer[] = {"a b c d"};
    const char *const *const streams[] = {shorter, longer};
    attn_wer_result result;
    CHECK_OK(attn_wer_corpus(hyps, 1, streams, 2, &result));
    CHECK(result.edits == 1 && result.reference_words == 4, "tie: the longer reference (%lld)",
          (long long)result.reference_words);
    /* Fewer edits win over length; absent references are skipped. */
    const char *const far[] = {"x y z w v"};
    const char *const absent[] = {""};
    const char *const near[] = {"a b d"};
    const char *const *const three[] = {far, absent, near};
    CHECK_OK(attn_wer_corpus(hyps, 1, three, 3, &result));
    CHECK(result.edits == 1 && result.reference_words == 3, "fewest edits (%lld, %lld)",
          (long long)result.edits, (long long)result.reference_words);

    const char *const *const none[] = {absent};
    CHECK_FAILS(attn_wer_corpus(hyps, 1, none, 1, &result), ATTN_ERR_FORMAT);
    CHECK_FAILS(attn_wer_corpus(NULL, 1, streams, 2, &result), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_wer_corpus(hyps, 1, streams, 0, &result), ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_wer_corpus(hyps, 1, streams, 2, NULL), ATTN_ERR_INVALID_ARGUMENT);
    const char *const bad[] = {"a \xC0\xAF"}; /* overlong "/" */
    CHECK_FAILS(attn_wer_corpus(bad, 1, streams, 2, &result), ATTN_ERR_FORMAT);
    CHECK_OK(attn_wer_corpus(NULL, 0, streams, 2, &result));
    CHECK(result.wer == 0.0 && result.edits == 0, "no segments");
}

/* ---- G2P --------------------------------------------------------------------------------- */

static const char *const lexicon[] = {
    "read\tR IY D",        "read\tR EH D",      "a\tAH",         "a\tEY",
    "either\tIY DH ER",    "either\tAY DH ER",  "cat\tK AE T",   "tomato\tT AH M EY T OW",
    "tomato\tT AH M AA T OW",
};
enum { LEXICON_LINES = sizeof lexicon / sizeof *lexicon };

static void test_g2p_by_hand(void)
{
    /* read: equals its second pronunciation (0 edits of 3).
     * a: AE is 1 edit from AH and from EY, equally long: the first, 1 edit of 1.
     * either: IY DH is 1 edit from IY DH ER, 2 from AY DH ER: 1 of 3.
     * tomato: drops OW: 1 edit from the first, 2 from the second: 1 of 6.
     * cat: missing, so K AE T is deleted: 3 of 3.
     * WER 4/5 words; PER (0 + 1 + 1 + 1 + 3) / (3 + 1 + 3 + 6 + 3) = 6/16. */
    const char *const hyp[] = {"read\tR  EH D ", "a\tAE", "either\tIY DH",
                               "tomato\tT AH M EY T"};
    attn_g2p_result result;
    CHECK_OK(attn_g2p_score("ref.tsv", lexicon, LEXICON_LINES, "hyp.tsv", hyp, 4, &result));
    CHECK(result.words == 5 && result.words_wrong == 4 && result.words_missing == 1,
          "words %lld, wrong %lld, missing %lld", (long long)result.words,
          (long long)result.words_wrong, (long long)result.words_missing);
    CHECK(result.phoneme_edits == 6 && result.reference_phonemes == 16,
          "edits %lld / %lld phonemes", (long long)result.phoneme_edits,
          (long long)result.reference_phonemes);
    CHECK_CLOSE(result.wer, 80.0, 0, 1e-15);
    CHECK_CLOSE(result.per, 37.5, 0, 1e-15);

    /* All right, in any order, with an empty pronunciation for cat: 3 edits of 3. */
    const char *const good[] = {"cat\t", "tomato\tT AH M AA T OW", "a\tEY", "either\tAY DH ER",
                                "read\tR IY D"};
    CHECK_OK(attn_g2p_score("ref.tsv", lexicon, LEXICON_LINES, "hyp.tsv", good, 5, &result));
    CHECK(result.words_wrong == 1 && result.words_missing == 0 && result.phoneme_edits == 3 &&
              result.reference_phonemes == 16,
          "empty pronunciation: wrong %lld, edits %lld", (long long)result.words_wrong,
          (long long)result.phoneme_edits);

    /* No hypotheses at all: every word wrong, each shortest pronunciation deleted. */
    CHECK_OK(attn_g2p_score("ref.tsv", lexicon, LEXICON_LINES, "hyp.tsv", NULL, 0, &result));
    CHECK(result.words_wrong == 5 && result.words_missing == 5, "all missing");
    CHECK(result.phoneme_edits == 16 && result.reference_phonemes == 16 && result.per == 100.0,
          "PER 100 (%lld / %lld)", (long long)result.phoneme_edits,
          (long long)result.reference_phonemes);
}

static void test_g2p_tie_goes_to_longer(void)
{
    /* A B C is 1 edit from A B C D (listed second) and from A B: the longer one counts, PER
     * 1/4 rather than 1/2. */
    const char *const ref[] = {"x\tA B", "x\tA B C D"};
    const char *const hyp[] = {"x\tA B C"};
    attn_g2p_result result;
    CHECK_OK(attn_g2p_score("ref.tsv", ref, 2, "hyp.tsv", hyp, 1, &result));
    CHECK(result.phoneme_edits == 1 && result.reference_phonemes == 4, "tie: %lld / %lld",
          (long long)result.phoneme_edits, (long long)result.reference_phonemes);
    CHECK_CLOSE(result.per, 25.0, 0, 1e-15);
}

static void check_g2p_error(const char *const *ref, int64_t n_ref, const char *const *hyp,
                            int64_t n_hyp, const char *must_contain)
{
    attn_g2p_result result;
    CHECK_FAILS(attn_g2p_score("ref.tsv", ref, n_ref, "hyp.tsv", hyp, n_hyp, &result),
                ATTN_ERR_FORMAT);
    CHECK(strstr(attn_last_error(), must_contain) != NULL, "message '%s' names '%s'",
          attn_last_error(), must_contain);
}

static void test_g2p_malformed(void)
{
    const char *const ok_ref[] = {"a\tAH", "b\tB IY"};
    const char *const ok_hyp[] = {"a\tAH"};
    struct {
        const char *lines[3];
        int n;
        const char *must_contain;
    } bad_refs[] = {
        {{"a\tAH", "no tab here"}, 2, "ref.tsv:2: no TAB"},
        {{"a\tAH\tAA"}, 1, "ref.tsv:1: more than one TAB"},
        {{"a\tAH", "\tAH"}, 2, "ref.tsv:2: empty word"},
        {{"a\tAH", "b\t  "}, 2, "ref.tsv:2: empty pronunciation"},
        {{"a\tAH", "", "b\tB"}, 3, "ref.tsv:2: empty line"},
        {{"a\tAH", "b\tB \xE2\x82"}, 2, "ref.tsv:2: invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad_refs / sizeof *bad_refs; i++)
        check_g2p_error(bad_refs[i].lines, bad_refs[i].n, ok_hyp, 1, bad_refs[i].must_contain);

    struct {
        const char *lines[3];
        int n;
        const char *must_contain;
    } bad_hyps[] = {
        {{"a\tAH", "c\tK"}, 2, "hyp.tsv:2: word 'c' is not in ref.tsv"},
        {{"a\tAH", "b\tB", "a\tEY"}, 3, "hyp.tsv:3: word 'a' again (first on line 1)"},
        {{"a AH"}, 1, "hyp.tsv:1: no TAB"},
        {{"a\tAH", "b\tB\t"}, 2, "hyp.tsv:2: more than one TAB"},
        {{"\xFF\tAH"}, 1, "hyp.tsv:1: invalid UTF-8"},
    };
    for (size_t i = 0; i < sizeof bad_hyps / sizeof *bad_hyps; i++)
        check_g2p_error(ok_ref, 2, bad_hyps[i].lines, bad_hyps[i].n, bad_hyps[i].must_contain);

    attn_g2p_result result;
    CHECK_FAILS(attn_g2p_score("ref.tsv", ok_ref, 0, "hyp.tsv", ok_hyp, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_g2p_score("ref.tsv", NULL, 2, "hyp.tsv", ok_hyp, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_g2p_score("ref.tsv", ok_ref, 2, "hyp.tsv", NULL, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_g2p_score(NULL, ok_ref, 2, "hyp.tsv", ok_hyp, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
    CHECK_FAILS(attn_g2p_score("ref.tsv", ok_ref, 2, "hyp.tsv", ok_hyp, 1, NULL),
                ATTN_ERR_INVALID_ARGUMENT);
    const char *const null_line[] = {"a\tAH", NULL};
    CHECK_FAILS(attn_g2p_score("ref.tsv", null_line, 2, "hyp.tsv", ok_hyp, 1, &result),
                ATTN_ERR_INVALID_ARGUMENT);
}

static void test_g2p_real_test_split(void)
{
    const char *path = shared_data_file(0, "g2p-std/test.tsv");
    if (path == NULL) {
        skipped("test_g2p_real_test_split");
        return;
    }
    attn_lines ref;
    CHECK_OK(attn_lines_read(path, &ref));
    CHECK(ref.count == 12828, "12,828 lines");
    /* The hypothesis: each word's last pronunciation, once. */
    const char **hyp = test_alloc((size_t)ref.count * sizeof *hyp);
    int64_t n_hyp = 0;
    for (int64_t i = 0; i < ref.count; i++) {
        size_t word = strcspn(ref.line[i], "\t");
        int same_as_next = i + 1 < ref.count && strncmp(ref.line[i], ref.line[i + 1], word) == 0 &&
                           ref.line[i + 1][word] == '\t';
        if (!same_as_next)
            hyp[n_hyp++] = ref.line[i];
    }
    attn_g2p_result result;
    CHECK_OK(attn_g2p_score(path, (const char *const *)ref.line, ref.count, "hyp", hyp, n_hyp,
                            &result));
    CHECK(result.words == 11994 && n_hyp == 11994, "11,994 words (%lld, %lld)",
          (long long)result.words, (long long)n_hyp);
    CHECK(result.words_wrong == 0 && result.phoneme_edits == 0 && result.per == 0.0,
          "the reference scores perfectly");
    /* Every other word missing: exactly those are wrong and fully deleted. */
    int64_t kept = 0;
    for (int64_t i = 0; i < n_hyp; i += 2)
        hyp[kept++] = hyp[i];
    CHECK_OK(attn_g2p_score(path, (const char *const *)ref.line, ref.count, "hyp", hyp, kept,
                            &result));
    CHECK(result.words_missing == 11994 - kept && result.words_wrong == result.words_missing,
          "missing words are the wrong ones");
    CHECK(result.phoneme_edits > 0 && result.phoneme_edits < result.reference_phonemes,
          "edits only for missing words");
    free(hyp);
    attn_lines_free(&ref);
}

int main(void)
{
    RUN_TEST(test_edit_distance_matches_brute_force);
    RUN_TEST(test_wer_by_hand);
    RUN_TEST(test_wer_closest_reference);
    RUN_TEST(test_g2p_by_hand);
    RUN_TEST(test_g2p_tie_goes_to_longer);
    RUN_TEST(test_g2p_malformed);
    RUN_TEST(test_g2p_real_test_split);
    return test_summary();
}
