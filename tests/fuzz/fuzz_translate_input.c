/* What `attn translate` does with each line of stdin before decoding: split at "\n", drop a
 * byte-order mark on the first line and a trailing "\r", refuse a line that attn_utf8_valid
 * rejects (translate stops there), then attn_tokenizer_encode the line with the model's
 * source tokenizer; the output side decodes ids with attn_tokenizer_decode. Here the line is
 * encoded with a character, a word and (in a build with SentencePiece) a BPE tokenizer trained
 * once on a fixed text, and the ids decoded again. The same input also goes through attn_lines_parse (how eval reads files),
 * which must split it into the same lines. */
#include "attn/attn.h"
#include "harness_support.h"

#include <stdlib.h>
#include <string.h>

enum { N_TOKENIZERS = 3 };

static const char *const training_text[] = {
    "the quick brown fox jumps over the lazy dog",
    "le renard brun rapide saute par-dessus le chien paresseux",
    "caf\xC3\xA9 na\xC3\xAFve \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xCE\xB1\xCE\xB2\xCE\xB3",
    "one two three four five six seven eight nine ten", "HH AH L OW . , ; : ! ? ' \" ( ) 0 1 2 3"};

static attn_tokenizer *tokenizers[N_TOKENIZERS];

static void destroy_tokenizers(void)
{
    for (int i = 0; i < N_TOKENIZERS; i++)
        attn_tokenizer_destroy(tokenizers[i]);
}

static int make_tokenizers(void)
{
    if (tokenizers[0] != NULL)
        return 1;
    const char *specs[N_TOKENIZERS] = {"char", "word", "bpe:40"};
    const int64_t n = (int64_t)(sizeof training_text / sizeof training_text[0]);
    for (int i = 0; i < (attn_tokenizer_spm_available() ? N_TOKENIZERS : N_TOKENIZERS - 1); i++) {
        attn_tokenizer_config config;
        FUZZ_CHECK(attn_tokenizer_config_parse(specs[i], &config) == ATTN_OK);
        if (attn_tokenizer_train(&config, training_text, n, &tokenizers[i]) != ATTN_OK) {
            destroy_tokenizers();
            memset(tokenizers, 0, sizeof tokenizers);
            return 0;
        }
    }
    atexit(destroy_tokenizers);
    return 1;
}

static void translate_line(const char *line)
{
    for (int t = 0; t < N_TOKENIZERS && tokenizers[t] != NULL; t++) {
        int32_t *ids = NULL;
        int64_t n = 0;
        FUZZ_CHECK(attn_tokenizer_encode(tokenizers[t], line, &ids, &n) == ATTN_OK);
        const int64_t vocab_size = attn_vocab_size(attn_tokenizer_vocab(tokenizers[t]));
        for (int64_t i = 0; i < n; i++)
            FUZZ_CHECK(ids[i] >= ATTN_UNK_ID && ids[i] < vocab_size);
        char *text = NULL;
        FUZZ_CHECK(attn_tokenizer_decode(tokenizers[t], ids, n, &text) == ATTN_OK);
        FUZZ_CHECK(attn_utf8_valid(text, strlen(text)));
        free(text);
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!make_tokenizers())
        return 0;
    attn_lines parsed;
    const int parsed_ok = attn_lines_parse("stdin", (const char *)data, size, &parsed) == ATTN_OK;
    const char *text = (const char *)data;
    size_t start = 0;
    int64_t n_lines = 0;
    int all_valid = 1;
    while (start < size) {
        const char *begin = text + start;
        const char *newline = memchr(begin, '\n', size - start);
        size_t length = newline != NULL ? (size_t)(newline - begin) : size - start;
        start += length + (newline != NULL);
        if (n_lines == 0 && length >= 3 && memcmp(begin, "\xEF\xBB\xBF", 3) == 0) {
            begin += 3;
            length -= 3;
        }
        if (length > 0 && begin[length - 1] == '\r')
            length--;
        if (!attn_utf8_valid(begin, length)) {
            all_valid = 0;
            break;
        }
        char *line = fuzz_string((const uint8_t *)begin, length);
        if (line == NULL)
            break;
        if (parsed_ok)
            FUZZ_CHECK(n_lines < parsed.count && strcmp(parsed.line[n_lines], line) == 0);
        translate_line(line);
        free(line);
        n_lines++;
    }
    /* attn_lines_parse drops the mark before looking for lines: a mark alone has none. */
    const int mark_only = size == 3 && memcmp(data, "\xEF\xBB\xBF", 3) == 0;
    FUZZ_CHECK(parsed_ok == (all_valid && n_lines > 0 && !mark_only));
    if (parsed_ok) {
        FUZZ_CHECK(parsed.count == n_lines);
        attn_lines_free(&parsed);
    }
    return 0;
}
