/* Edit-distance metrics: corpus word error rate, and G2P word and phoneme error rates against
 * several reference pronunciations per word. */
#include "metrics/metrics_internal.h"

#include <stdlib.h>
#include <string.h>

int64_t edit_distance(const uint32_t *a, int64_t a_len, const uint32_t *b, int64_t b_len,
                      int64_t *row)
{
    /* row[j] = distance between a[0..i) and b[0..j), one row at a time. */
    for (int64_t j = 0; j <= b_len; j++)
        row[j] = j;
    for (int64_t i = 1; i <= a_len; i++) {
        int64_t diagonal = row[0];
        row[0] = i;
        for (int64_t j = 1; j <= b_len; j++) {
            int64_t above = row[j];
            int64_t best = diagonal + (a[i - 1] != b[j - 1]);
            if (above + 1 < best)
                best = above + 1;
            if (row[j - 1] + 1 < best)
                best = row[j - 1] + 1;
            row[j] = best;
            diagonal = above;
        }
    }
    return row[b_len];
}

/* Grows a scratch row to hold n + 1 entries. */
static attn_status reserve_row(int64_t **row, int64_t *capacity, int64_t n)
{
    return grow_array((void **)row, capacity, n + 1, sizeof **row);
}

/* The closest of several references: fewest edits, then the longer, then the earlier. */
static int closer(int64_t edits, int64_t length, int64_t best_edits, int64_t best_length)
{
    return best_edits < 0 || edits < best_edits || (edits == best_edits && length > best_length);
}

/* ---- corpus WER -------------------------------------------------------------------------- */

attn_status attn_wer_corpus(const char *const *hypotheses, int64_t n,
                            const char *const *const *references, int64_t n_refs,
                            attn_wer_result *out)
{
    static const char fn[] = "attn_wer_corpus";
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_TRY(check_corpus_args(fn, hypotheses, n, references, n_refs));
    strtab tokens = {0};
    symbol_seq hyp = {0}, ref = {0};
    int64_t *row = NULL, row_capacity = 0;
    attn_status status = ATTN_OK;
    int64_t edits = 0, reference_words = 0, hypothesis_words = 0;
    for (int64_t i = 0; status == ATTN_OK && i < n; i++) {
        status = check_segment(fn, "hypothesis", i, hypotheses[i]);
        hyp.size = 0;
        if (status == ATTN_OK)
            status = split_tokens(hypotheses[i], strlen(hypotheses[i]), &tokens, &hyp);
        int64_t best_edits = -1, best_length = 0;
        for (int64_t r = 0; status == ATTN_OK && r < n_refs; r++) {
            const char *text = references[r][i];
            if (reference_absent(text))
                continue;
            status = check_segment(fn, "reference", i, text);
            ref.size = 0;
            if (status == ATTN_OK)
                status = split_tokens(text, strlen(text), &tokens, &ref);
            if (status == ATTN_OK)
                status = reserve_row(&row, &row_capacity, ref.size);
            if (status != ATTN_OK)
                break;
            int64_t d = edit_distance(hyp.data, hyp.size, ref.data, ref.size, row);
            if (closer(d, ref.size, best_edits, best_length)) {
                best_edits = d;
                best_length = ref.size;
            }
        }
        if (status == ATTN_OK && best_edits < 0)
            status = attn_fail(ATTN_ERR_FORMAT, "%s: segment %lld has no reference (all empty)",
                               fn, (long long)(i + 1));
        if (status != ATTN_OK)
            break;
        edits += best_edits;
        reference_words += best_length;
        hypothesis_words += hyp.size;
    }
    if (status == ATTN_OK) {
        out->edits = edits;
        out->reference_words = reference_words;
        out->hypothesis_words = hypothesis_words;
        /* Every present reference has a word, so only an empty corpus has none. */
        out->wer = n > 0 ? 100.0 * (double)edits / (double)reference_words : 0.0;
    }
    strtab_free(&tokens);
    symbol_seq_free(&hyp);
    symbol_seq_free(&ref);
    free(row);
    return status;
}

/* ---- G2P --------------------------------------------------------------------------------- */

typedef struct g2p_lexicon {
    strtab words;
    strtab phonemes;
    symbol_seq pool;   /* every pronunciation's phoneme ids, one after another */
    /* per reference line (entry) */
    int32_t *entry_word;
    int64_t *entry_start, *entry_length;
    int64_t entries, entry_capacity;
    /* per word: its entries, in file order (first_entry[w] .. first_entry[w + 1]) */
    int64_t *first_entry, *word_entries;
} g2p_lexicon;

static void lexicon_free(g2p_lexicon *lex)
{
    strtab_free(&lex->words);
    strtab_free(&lex->phonemes);
    symbol_seq_free(&lex->pool);
    free(lex->entry_word);
    free(lex->entry_start);
    free(lex->entry_length);
    free(lex->first_entry);
    free(lex->word_entries);
}

/* Splits line `index` of a TSV into its word (word, word_size) and pronunciation (the rest). */
static attn_status split_line(const char *fn, const char *name, int64_t index, const char *line,
                              const char **pronunciation, size_t *word_size)
{
    if (line == NULL)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: line %lld of %s is NULL", fn,
                         (long long)(index + 1), name);
    size_t size = strlen(line);
    size_t bad = utf8_first_invalid(line, size);
    if (bad != size)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: invalid UTF-8 at byte %zu of the line",
                         fn, name, (long long)(index + 1), bad + 1);
    if (size == 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: empty line (expected word<TAB>phonemes)",
                         fn, name, (long long)(index + 1));
    const char *tab = strchr(line, '\t');
    if (tab == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: no TAB (expected word<TAB>phonemes)", fn,
                         name, (long long)(index + 1));
    if (strchr(tab + 1, '\t') != NULL)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: %s:%lld: more than one TAB (expected word<TAB>phonemes)", fn, name,
                         (long long)(index + 1));
    if (tab == line)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: empty word", fn, name,
                         (long long)(index + 1));
    *word_size = (size_t)(tab - line);
    *pronunciation = tab + 1;
    return ATTN_OK;
}

static attn_status read_reference(const char *fn, const char *name, const char *const *lines,
                                  int64_t n, g2p_lexicon *lex)
{
    for (int64_t i = 0; i < n; i++) {
        const char *pron;
        size_t word_size;
        ATTN_TRY(split_line(fn, name, i, lines[i], &pron, &word_size));
        int64_t start = lex->pool.size;
        ATTN_TRY(split_tokens(pron, strlen(pron), &lex->phonemes, &lex->pool));
        if (lex->pool.size == start)
            return attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: empty pronunciation", fn, name,
                             (long long)(i + 1));
        int32_t word;
        ATTN_TRY(strtab_intern(&lex->words, lines[i], word_size, &word, NULL));
        if (lex->entries == lex->entry_capacity) {
            int64_t capacity = lex->entry_capacity;
            ATTN_TRY(grow_array((void **)&lex->entry_word, &capacity, lex->entries + 1,
                                sizeof *lex->entry_word));
            capacity = lex->entry_capacity;
            ATTN_TRY(grow_array((void **)&lex->entry_start, &capacity, lex->entries + 1,
                                sizeof *lex->entry_start));
            capacity = lex->entry_capacity;
            ATTN_TRY(grow_array((void **)&lex->entry_length, &capacity, lex->entries + 1,
                                sizeof *lex->entry_length));
            lex->entry_capacity = capacity;
        }
        lex->entry_word[lex->entries] = word;
        lex->entry_start[lex->entries] = start;
        lex->entry_length[lex->entries] = lex->pool.size - start;
        lex->entries++;
    }
    /* Group the entries by word (a counting sort keeps file order within a word). */
    int64_t words = lex->words.count;
    lex->first_entry = calloc((size_t)words + 1, sizeof *lex->first_entry);
    lex->word_entries = malloc((size_t)lex->entries * sizeof *lex->word_entries);
    if (lex->first_entry == NULL || lex->word_entries == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld words", fn,
                         (long long)words);
    for (int64_t e = 0; e < lex->entries; e++)
        lex->first_entry[lex->entry_word[e] + 1]++;
    for (int64_t w = 0; w < words; w++)
        lex->first_entry[w + 1] += lex->first_entry[w];
    int64_t *next = malloc((size_t)words * sizeof *next);
    if (next == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld words", fn,
                         (long long)words);
    memcpy(next, lex->first_entry, (size_t)words * sizeof *next);
    for (int64_t e = 0; e < lex->entries; e++)
        lex->word_entries[next[lex->entry_word[e]]++] = e;
    free(next);
    return ATTN_OK;
}

attn_status attn_g2p_score(const char *ref_name, const char *const *ref_lines, int64_t n_ref,
                           const char *hyp_name, const char *const *hyp_lines, int64_t n_hyp,
                           attn_g2p_result *out)
{
    static const char fn[] = "attn_g2p_score";
    ATTN_CHECK_NOT_NULL(out);
    memset(out, 0, sizeof *out);
    ATTN_CHECK_NOT_NULL(ref_name);
    ATTN_CHECK_NOT_NULL(hyp_name);
    ATTN_CHECK_NOT_NULL(ref_lines);
    ATTN_CHECK_ARG(n_ref >= 1, "%s: need at least one reference line, got %lld", fn,
                   (long long)n_ref);
    ATTN_CHECK_ARG(n_hyp >= 0, "%s: n_hyp must be >= 0, got %lld", fn, (long long)n_hyp);
    ATTN_CHECK_ARG(hyp_lines != NULL || n_hyp == 0, "%s: hyp_lines must not be NULL", fn);

    g2p_lexicon lex;
    memset(&lex, 0, sizeof lex);
    symbol_seq hyp_pool = {0};
    /* Per reference word: the line of its hypothesis (-1 if none) and its phonemes there. */
    int64_t *hyp_line = NULL, *hyp_start = NULL, *hyp_length = NULL;
    int64_t *row = NULL, row_capacity = 0;
    attn_status status = read_reference(fn, ref_name, ref_lines, n_ref, &lex);
    int64_t words = lex.words.count;
    if (status == ATTN_OK) {
        hyp_line = malloc((size_t)words * sizeof *hyp_line);
        hyp_start = malloc((size_t)words * sizeof *hyp_start);
        hyp_length = calloc((size_t)words, sizeof *hyp_length);
        if (hyp_line == NULL || hyp_start == NULL || hyp_length == NULL)
            status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld words", fn,
                               (long long)words);
        for (int64_t w = 0; status == ATTN_OK && w < words; w++)
            hyp_line[w] = -1;
    }
    for (int64_t i = 0; status == ATTN_OK && i < n_hyp; i++) {
        const char *pron;
        size_t word_size;
        status = split_line(fn, hyp_name, i, hyp_lines[i], &pron, &word_size);
        if (status != ATTN_OK)
            break;
        int32_t w = strtab_find(&lex.words, hyp_lines[i], word_size);
        if (w < 0) {
            status = attn_fail(ATTN_ERR_FORMAT, "%s: %s:%lld: word '%.*s' is not in %s", fn,
                               hyp_name, (long long)(i + 1), (int)word_size, hyp_lines[i],
                               ref_name);
            break;
        }
        if (hyp_line[w] >= 0) {
            status = attn_fail(ATTN_ERR_FORMAT,
                               "%s: %s:%lld: word '%.*s' again (first on line %lld)", fn,
                               hyp_name, (long long)(i + 1), (int)word_size, hyp_lines[i],
                               (long long)(hyp_line[w] + 1));
            break;
        }
        hyp_line[w] = i;
        hyp_start[w] = hyp_pool.size;
        status = split_tokens(pron, strlen(pron), &lex.phonemes, &hyp_pool);
        hyp_length[w] = hyp_pool.size - hyp_start[w];
    }

    attn_g2p_result result;
    memset(&result, 0, sizeof result);
    result.words = words;
    for (int64_t w = 0; status == ATTN_OK && w < words; w++) {
        const uint32_t *hyp = hyp_line[w] >= 0 ? hyp_pool.data + hyp_start[w] : NULL;
        result.words_missing += hyp_line[w] < 0;
        int64_t best_edits = -1, best_length = 0;
        for (int64_t k = lex.first_entry[w]; k < lex.first_entry[w + 1]; k++) {
            int64_t e = lex.word_entries[k];
            int64_t length = lex.entry_length[e];
            status = reserve_row(&row, &row_capacity, length);
            if (status != ATTN_OK)
                break;
            int64_t d = edit_distance(hyp, hyp_length[w], lex.pool.data + lex.entry_start[e],
                                      length, row);
            if (closer(d, length, best_edits, best_length)) {
                best_edits = d;
                best_length = length;
            }
        }
        result.words_wrong += best_edits != 0;
        result.phoneme_edits += best_edits;
        result.reference_phonemes += best_length;
    }
    if (status == ATTN_OK) {
        result.wer = 100.0 * (double)result.words_wrong / (double)result.words;
        result.per = 100.0 * (double)result.phoneme_edits / (double)result.reference_phonemes;
        *out = result;
    }
    lexicon_free(&lex);
    symbol_seq_free(&hyp_pool);
    free(hyp_line);
    free(hyp_start);
    free(hyp_length);
    free(row);
    return status;
}
