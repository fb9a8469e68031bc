/* Tokenizer and vocabulary JSON: the input goes to attn_tokenizer_from_json and to
 * attn_vocab_from_json. A tokenizer that loads encodes and decodes a few fixed strings and the
 * input itself, and comes back the same through to_json and from_json; a vocabulary that
 * loads answers every id and token, and round-trips too. */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdlib.h>
#include <string.h>

static const char *const sample_texts[] = {"",
                                           "hello world",
                                           "the cat sat on the mat",
                                           "  tabs\tand\nnewlines \r\n",
                                           "<s> <unk> </s> <pad>",
                                           "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
                                           "a</w>b"};

/* Encodes text, checks the ids, decodes them, and checks that decoding gave the text back
 * (characters: exactly; words and BPE: single-spaced) when no token became <unk> (decode drops
 * it) and the text does not itself spell BPE's end-of-word mark. Returns the ids (malloc'ed)
 * or NULL. */
static int32_t *encode_decode(const attn_tokenizer *tokenizer, const char *text, int64_t *n_ids)
{
    int32_t *ids = NULL;
    *n_ids = 0;
    if (attn_tokenizer_encode(tokenizer, text, &ids, n_ids) != ATTN_OK) {
        FUZZ_CHECK(ids == NULL && attn_last_error()[0] != '\0');
        return NULL;
    }
    FUZZ_CHECK(ids != NULL && *n_ids >= 0);
    const int64_t vocab_size = attn_vocab_size(attn_tokenizer_vocab(tokenizer));
    for (int64_t i = 0; i < *n_ids; i++)
        FUZZ_CHECK(ids[i] >= ATTN_UNK_ID && ids[i] < vocab_size);
    char *decoded = NULL;
    FUZZ_CHECK(attn_tokenizer_decode(tokenizer, ids, *n_ids, &decoded) == ATTN_OK);
    FUZZ_CHECK(attn_utf8_valid(decoded, strlen(decoded)));
    int has_unknown = 0;
    for (int64_t i = 0; i < *n_ids; i++)
        has_unknown |= ids[i] == ATTN_UNK_ID;
    if (!has_unknown && strstr(text, "</w>") == NULL) {
        if (attn_tokenizer_get_kind(tokenizer) == ATTN_TOKENIZER_CHAR) {
            FUZZ_CHECK(strcmp(decoded, text) == 0);
        } else {
            char *words = fuzz_single_spaced(text);
            FUZZ_CHECK(words == NULL || strcmp(words, decoded) == 0);
            free(words);
        }
    }
    free(decoded);
    return ids;
}

static void check_tokenizer(const attn_tokenizer *tokenizer, const char *input)
{
    const int64_t merges = attn_tokenizer_num_merges(tokenizer);
    for (int64_t i = 0; i < merges; i++) {
        const char *left = NULL, *right = NULL;
        FUZZ_CHECK(attn_tokenizer_merge(tokenizer, i, &left, &right) == ATTN_OK);
        FUZZ_CHECK(left != NULL && right != NULL);
    }
    char *json = NULL;
    FUZZ_CHECK(attn_tokenizer_to_json(tokenizer, &json) == ATTN_OK);
    attn_tokenizer *again = NULL;
    FUZZ_CHECK(attn_tokenizer_from_json(json, &again) == ATTN_OK);
    char *json_again = NULL;
    FUZZ_CHECK(attn_tokenizer_to_json(again, &json_again) == ATTN_OK);
    FUZZ_CHECK(strcmp(json, json_again) == 0);
    free(json);
    free(json_again);

    const size_t n_samples = sizeof sample_texts / sizeof sample_texts[0];
    for (size_t i = 0; i <= n_samples; i++) {
        const char *text = i < n_samples ? sample_texts[i] : input;
        int64_t n = 0, n_again = 0;
        int32_t *ids = encode_decode(tokenizer, text, &n);
        int32_t *ids_again = encode_decode(again, text, &n_again);
        FUZZ_CHECK((ids == NULL) == (ids_again == NULL));
        FUZZ_CHECK(n == n_again && (n == 0 || memcmp(ids, ids_again, (size_t)n * 4) == 0));
        free(ids);
        free(ids_again);
    }
    attn_tokenizer_destroy(again);
}

static void check_vocab(const attn_vocab *vocab)
{
    const int64_t size = attn_vocab_size(vocab);
    FUZZ_CHECK(size >= ATTN_NUM_SPECIAL_IDS);
    for (int64_t id = 0; id < size; id++) {
        const char *token = attn_vocab_token(vocab, (int32_t)id);
        FUZZ_CHECK(token != NULL && token[0] != '\0');
        FUZZ_CHECK(attn_vocab_id(vocab, token) == id);
    }
    FUZZ_CHECK(attn_vocab_token(vocab, -1) == NULL);
    FUZZ_CHECK(attn_vocab_token(vocab, (int32_t)size) == NULL);
    char *json = NULL;
    FUZZ_CHECK(attn_vocab_to_json(vocab, &json) == ATTN_OK);
    attn_vocab *again = NULL;
    FUZZ_CHECK(attn_vocab_from_json(json, &again) == ATTN_OK);
    FUZZ_CHECK(attn_vocab_size(again) == size);
    attn_vocab_destroy(again);
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *input = fuzz_string(data, size);
    if (input == NULL)
        return 0;
    attn_tokenizer *tokenizer = NULL;
    if (attn_tokenizer_from_json(input, &tokenizer) == ATTN_OK) {
        check_tokenizer(tokenizer, input);
        attn_tokenizer_destroy(tokenizer);
    } else {
        FUZZ_CHECK(tokenizer == NULL && attn_last_error()[0] != '\0');
    }
    attn_vocab *vocab = NULL;
    if (attn_vocab_from_json(input, &vocab) == ATTN_OK) {
        check_vocab(vocab);
        attn_vocab_destroy(vocab);
    } else {
        FUZZ_CHECK(vocab == NULL && attn_last_error()[0] != '\0');
    }
    free(input);
    return 0;
}
