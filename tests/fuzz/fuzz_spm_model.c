/* SentencePiece models: the input is a .model file's bytes for attn_tokenizer_from_spm_model
 * (libsentencepiece parses it behind attn's C++ shim). A model that loads encodes a few fixed
 * strings, each of its ids inside the vocabulary, decodes them to valid UTF-8 on one line, and
 * comes back the same through the tokenizer's JSON; anything else is refused with a message.
 * In a build without libsentencepiece every input is refused, which the harness checks too. */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdlib.h>
#include <string.h>

static const char *const sample_texts[] = {"",
                                           "hello world",
                                           "Der Fluss flie\xC3\x9F" "t an der M\xC3\xBC" "hle vorbei.",
                                           "  tabs\tand spaces  ",
                                           "<s> <unk> </s> <pad> <0x41>",
                                           "caf\xC3\xA9 \xE6\x97\xA5\xE6\x9C\xAC \xF0\x9F\x98\x80",
                                           "\xEF\xBC\xA1\xEF\xBC\xA2 \xE2\x85\xA0 \xEF\xAC\x81"};

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
    if (attn_tokenizer_decode(tokenizer, ids, *n_ids, &decoded) == ATTN_OK) {
        FUZZ_CHECK(attn_utf8_valid(decoded, strlen(decoded)));
        FUZZ_CHECK(strchr(decoded, '\n') == NULL);
        free(decoded);
    } else {
        FUZZ_CHECK(decoded == NULL && attn_last_error()[0] != '\0');
    }
    return ids;
}

static void check_tokenizer(const attn_tokenizer *tokenizer)
{
    FUZZ_CHECK(attn_tokenizer_get_kind(tokenizer) == ATTN_TOKENIZER_SPM);
    const attn_vocab *vocab = attn_tokenizer_vocab(tokenizer);
    const int64_t size = attn_vocab_size(vocab);
    FUZZ_CHECK(size > ATTN_NUM_SPECIAL_IDS);
    for (int64_t id = 0; id < size; id++)
        FUZZ_CHECK(attn_vocab_token(vocab, (int32_t)id) != NULL);
    char *json = NULL;
    FUZZ_CHECK(attn_tokenizer_to_json(tokenizer, &json) == ATTN_OK);
    attn_tokenizer *again = NULL;
    FUZZ_CHECK(attn_tokenizer_from_json(json, &again) == ATTN_OK);
    free(json);
    FUZZ_CHECK(attn_vocab_size(attn_tokenizer_vocab(again)) == size);
    for (size_t i = 0; i < sizeof sample_texts / sizeof sample_texts[0]; i++) {
        int64_t n = 0, n_again = 0;
        int32_t *ids = encode_decode(tokenizer, sample_texts[i], &n);
        int32_t *ids_again = encode_decode(again, sample_texts[i], &n_again);
        FUZZ_CHECK((ids == NULL) == (ids_again == NULL));
        FUZZ_CHECK(n == n_again && (n == 0 || memcmp(ids, ids_again, (size_t)n * 4) == 0));
        free(ids);
        free(ids_again);
    }
    attn_tokenizer_destroy(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    attn_tokenizer *tokenizer = NULL;
    if (attn_tokenizer_from_spm_model(data, size, &tokenizer) == ATTN_OK) {
        FUZZ_CHECK(attn_tokenizer_spm_available());
        check_tokenizer(tokenizer);
        attn_tokenizer_destroy(tokenizer);
    } else {
        FUZZ_CHECK(tokenizer == NULL && attn_last_error()[0] != '\0');
    }
    return 0;
}
