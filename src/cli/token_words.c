/* Tokens back to words (see token_words.h). */
#include "cli/token_words.h"

#include <string.h>

static int ends_with_marker(const char *label)
{
    return attn_token_text_length(label) != strlen(label);
}

static int is_special(const char *label)
{
    return strcmp(label, "<pad>") == 0 || strcmp(label, "<s>") == 0 || strcmp(label, "</s>") == 0 ||
           strcmp(label, "<unk>") == 0;
}

int64_t cli_token_words(attn_tokenizer_kind kind, const char *const *labels, int64_t count,
                        int64_t *word_of)
{
    int64_t words = 0;
    int in_word = 0;
    for (int64_t i = 0; i < count; i++) {
        const char *label = labels[i];
        switch (kind) {
        case ATTN_TOKENIZER_WORD:
            word_of[i] = words++;
            break;
        case ATTN_TOKENIZER_CHAR:
            if (strchr(" \t\n\v\f\r", label[0]) != NULL && label[0] != '\0') {
                word_of[i] = -1;
                in_word = 0;
            } else {
                words += !in_word;
                in_word = 1;
                word_of[i] = words - 1;
            }
            break;
        case ATTN_TOKENIZER_SPM:
            /* A piece that starts with SentencePiece's "▁" (the space it replaced) starts
             * a word; specials stand alone. */
            if (is_special(label) || strncmp(label, "\xE2\x96\x81", 3) == 0 || i == 0)
                words++;
            word_of[i] = words - 1;
            break;
        case ATTN_TOKENIZER_BPE:
            words += !in_word;
            word_of[i] = words - 1;
            in_word = !(ends_with_marker(label) || is_special(label));
            break;
        }
    }
    return words;
}
