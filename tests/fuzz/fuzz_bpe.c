/* BPE learning and merges: the input's lines (attn_lines_parse) train a BPE tokenizer with up
 * to 64 merges (the first byte picks how many), whose merges are read back; every line is
 * encoded and decoded, and the tokenizer round-trips through its JSON (which reloads the
 * merges) to one that encodes every line the same way. */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_MERGES = 64 };

/* The line encodes the same with the reloaded tokenizer, and decodes (when nothing became
 * <unk>, which decode drops) to its words joined by single spaces. */
static void check_line(const attn_tokenizer *tokenizer, const attn_tokenizer *reloaded,
                       const char *line)
{
    int32_t *ids = NULL, *ids_again = NULL;
    int64_t n = 0, n_again = 0;
    FUZZ_CHECK(attn_tokenizer_encode(tokenizer, line, &ids, &n) == ATTN_OK);
    FUZZ_CHECK(attn_tokenizer_encode(reloaded, line, &ids_again, &n_again) == ATTN_OK);
    FUZZ_CHECK(n == n_again && (n == 0 || memcmp(ids, ids_again, (size_t)n * sizeof *ids) == 0));
    char *text = NULL;
    FUZZ_CHECK(attn_tokenizer_decode(tokenizer, ids, n, &text) == ATTN_OK);
    int has_unknown = 0;
    for (int64_t i = 0; i < n; i++)
        has_unknown |= ids[i] == ATTN_UNK_ID;
    if (!has_unknown && strstr(line, "</w>") == NULL) {
        char *words = fuzz_single_spaced(line);
        FUZZ_CHECK(words == NULL || strcmp(words, text) == 0);
        free(words);
    }
    free(text);
    free(ids);
    free(ids_again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    const int64_t merges = 1 + data[0] % MAX_MERGES;
    attn_lines lines;
    if (attn_lines_parse("input", (const char *)data + 1, size - 1, &lines) != ATTN_OK)
        return 0;
    attn_tokenizer_config config = {
        .kind = ATTN_TOKENIZER_BPE, .bpe_merges = merges, .min_count = 1};
    attn_tokenizer *tokenizer = NULL;
    if (attn_tokenizer_train(&config, (const char *const *)lines.line, lines.count, &tokenizer) !=
        ATTN_OK) {
        FUZZ_CHECK(tokenizer == NULL && attn_last_error()[0] != '\0');
        attn_lines_free(&lines);
        return 0;
    }
    const int64_t learned = attn_tokenizer_num_merges(tokenizer);
    FUZZ_CHECK(learned >= 0 && learned <= merges);
    for (int64_t i = 0; i < learned; i++) {
        const char *left = NULL, *right = NULL;
        FUZZ_CHECK(attn_tokenizer_merge(tokenizer, i, &left, &right) == ATTN_OK);
        FUZZ_CHECK(left[0] != '\0' && right[0] != '\0');
    }
    char *json = NULL;
    attn_tokenizer *reloaded = NULL;
    FUZZ_CHECK(attn_tokenizer_to_json(tokenizer, &json) == ATTN_OK);
    FUZZ_CHECK(attn_tokenizer_from_json(json, &reloaded) == ATTN_OK);
    FUZZ_CHECK(attn_tokenizer_num_merges(reloaded) == learned);
    for (int64_t i = 0; i < lines.count; i++)
        check_line(tokenizer, reloaded, lines.line[i]);
    free(json);
    attn_tokenizer_destroy(reloaded);
    attn_tokenizer_destroy(tokenizer);
    attn_lines_free(&lines);
    return 0;
}
