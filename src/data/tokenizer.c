/* Tokenizers: characters, whitespace-separated words, SentencePiece (its own file,
 * tokenizer_spm.c; it learns every BPE) and the BPE of attn's earlier model files (bpe.c).
 * Training, encoding, decoding and the JSON form a checkpoint carries. */
#include "data/data_internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOKENIZER_FORMAT "attn-tokenizer"
#define TOKENIZER_VERSION 1

struct attn_tokenizer {
    attn_tokenizer_config config;
    attn_vocab *vocab;
    bpe_model bpe; /* ATTN_TOKENIZER_BPE only */
    byte_fallback fallback;
    spm_tokenizer spm; /* ATTN_TOKENIZER_SPM only */
};

#define BYTE_TOKEN_FORMAT "<0x%02X>"

/* The byte tokens' ids from the vocabulary; ATTN_ERR_FORMAT naming fn when one is missing. */
static attn_status link_byte_fallback(const char *fn, attn_tokenizer *tokenizer)
{
    byte_fallback *f = &tokenizer->fallback;
    memset(f, 0, sizeof *f);
    f->word_end_id = -1;
    if (!tokenizer->config.byte_fallback)
        return ATTN_OK;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, BYTE_TOKEN_FORMAT, b);
        f->byte_ids[b] = attn_vocab_id(tokenizer->vocab, name);
        if (f->byte_ids[b] < ATTN_NUM_SPECIAL_IDS)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: a byte-fallback tokenizer's vocabulary lacks the token %s", fn,
                             name);
    }
    if (tokenizer->config.kind == ATTN_TOKENIZER_BPE) {
        f->word_end_id = attn_vocab_id(tokenizer->vocab, END_OF_WORD);
        if (f->word_end_id < ATTN_NUM_SPECIAL_IDS)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: a byte-fallback bpe tokenizer's vocabulary lacks \"%s\"", fn,
                             END_OF_WORD);
    }
    f->enabled = 1;
    return ATTN_OK;
}

/* Appends the byte tokens to a character vocabulary just learned. */
static attn_status add_byte_tokens(attn_tokenizer *tokenizer)
{
    strtab *tokens = &tokenizer->vocab->tokens;
    for (int b = 0; b < 256; b++) {
        char name[8];
        int32_t id;
        snprintf(name, sizeof name, BYTE_TOKEN_FORMAT, b);
        ATTN_TRY(strtab_intern(tokens, name, strlen(name), &id, NULL));
    }
    return ATTN_OK;
}

/* The byte token's value (0-255) of id, or -1 for any other id. */
static int byte_of(const byte_fallback *f, int32_t id)
{
    if (!f->enabled || id < f->byte_ids[0] || id > f->byte_ids[255])
        return -1;
    /* Learned vocabularies hold the 256 in order; a loaded one is searched. */
    if (f->byte_ids[id - f->byte_ids[0]] == id)
        return id - f->byte_ids[0];
    for (int b = 0; b < 256; b++)
        if (f->byte_ids[b] == id)
            return b;
    return -1;
}

const char *attn_tokenizer_kind_name(attn_tokenizer_kind kind)
{
    switch (kind) {
    case ATTN_TOKENIZER_CHAR:
        return "char";
    case ATTN_TOKENIZER_WORD:
        return "word";
    case ATTN_TOKENIZER_BPE:
        return "bpe";
    case ATTN_TOKENIZER_SPM:
        return "spm";
    }
    return "unknown";
}

/* ---- configuration ---------------------------------------------------------------------- */

/* attn's four specials and a few pieces: less cannot spell any text. */
#define SPM_MIN_PIECES 8

attn_status attn_tokenizer_config_parse(const char *spec, attn_tokenizer_config *out)
{
    ATTN_CHECK_NOT_NULL(out);
    ATTN_CHECK_NOT_NULL(spec);
    attn_tokenizer_config config = {.kind = ATTN_TOKENIZER_CHAR, .min_count = 1};
    if (strcmp(spec, "char") == 0) {
        config.kind = ATTN_TOKENIZER_CHAR;
    } else if (strcmp(spec, "word") == 0) {
        config.kind = ATTN_TOKENIZER_WORD;
    } else if (strncmp(spec, "bpe:", 4) == 0) {
        const char *digits = spec + 4;
        char *end = NULL;
        errno = 0;
        long long merges = digits[0] >= '0' && digits[0] <= '9' ? strtoll(digits, &end, 10) : 0;
        ATTN_CHECK_ARG(end != NULL && *end == '\0' && errno == 0 && merges > 0 &&
                           merges < INT32_MAX,
                       "attn_tokenizer_config_parse: '%s': expected bpe:N with N a positive "
                       "number of merges",
                       spec);
        config.kind = ATTN_TOKENIZER_SPM;
        config.spm_bpe = 1;
        config.bpe_merges = merges;
    } else if (strncmp(spec, "spm:", 4) == 0 || strncmp(spec, "spm-bpe:", 8) == 0) {
        const int bpe = spec[3] == '-';
        const char *digits = spec + (bpe ? 8 : 4);
        char *end = NULL;
        errno = 0;
        long long pieces = digits[0] >= '0' && digits[0] <= '9' ? strtoll(digits, &end, 10) : 0;
        ATTN_CHECK_ARG(end != NULL && *end == '\0' && errno == 0 && pieces >= SPM_MIN_PIECES &&
                           pieces < INT32_MAX,
                       "attn_tokenizer_config_parse: '%s': expected %s:N with N at least %d "
                       "pieces",
                       spec, bpe ? "spm-bpe" : "spm", SPM_MIN_PIECES);
        config.kind = ATTN_TOKENIZER_SPM;
        config.spm_vocab_size = pieces;
        config.spm_bpe = bpe;
    } else {
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "attn_tokenizer_config_parse: unknown tokenizer '%s' (expected char, "
                         "word, bpe:N, spm:N or spm-bpe:N)",
                         spec);
    }
    *out = config;
    return ATTN_OK;
}

static attn_status check_config(const char *fn, const attn_tokenizer_config *config)
{
    ATTN_CHECK_ARG(!config->byte_fallback || config->kind != ATTN_TOKENIZER_WORD,
                   "%s: a word tokenizer has no byte fallback (its tokens are whole words): use "
                   "char or bpe:N",
                   fn);
    ATTN_CHECK_ARG(config->kind == ATTN_TOKENIZER_CHAR || config->kind == ATTN_TOKENIZER_WORD ||
                       config->kind == ATTN_TOKENIZER_BPE || config->kind == ATTN_TOKENIZER_SPM,
                   "%s: unknown tokenizer kind %d", fn, (int)config->kind);
    /* A learned BPE's size is its pieces or its merges on top of the alphabet, not both. */
    const int by_merges = config->spm_bpe && config->bpe_merges != 0;
    ATTN_CHECK_ARG(config->kind != ATTN_TOKENIZER_SPM || !by_merges ||
                       (config->bpe_merges > 0 && config->bpe_merges < INT32_MAX &&
                        config->spm_vocab_size == 0),
                   "%s: SentencePiece's BPE takes bpe_merges (in [1, 2^31)) or spm_vocab_size, "
                   "not both; got bpe_merges %lld and spm_vocab_size %lld",
                   fn, (long long)config->bpe_merges, (long long)config->spm_vocab_size);
    ATTN_CHECK_ARG(config->kind != ATTN_TOKENIZER_SPM || by_merges ||
                       (config->spm_vocab_size >= SPM_MIN_PIECES &&
                        config->spm_vocab_size < INT32_MAX),
                   "%s: spm_vocab_size must be in [%d, 2^31), got %lld", fn, SPM_MIN_PIECES,
                   (long long)config->spm_vocab_size);
    ATTN_CHECK_ARG(config->max_vocab == 0 || (config->max_vocab >= ATTN_NUM_SPECIAL_IDS &&
                                              config->max_vocab <= INT32_MAX),
                   "%s: max_vocab must be 0 (no limit) or in [%d, 2^31), got %lld", fn,
                   ATTN_NUM_SPECIAL_IDS, (long long)config->max_vocab);
    /* Ids are int32, so larger limits mean nothing; keeping them in int32 range also keeps
     * them exact in JSON. */
    ATTN_CHECK_ARG(config->min_count >= INT32_MIN && config->min_count <= INT32_MAX,
                   "%s: min_count %lld is out of range", fn, (long long)config->min_count);
    return ATTN_OK;
}

/* ---- training --------------------------------------------------------------------------- */

typedef struct token_counter {
    strtab tokens;
    int64_t *counts;
    int64_t capacity;
} token_counter;

static attn_status count_token(token_counter *counter, const char *bytes, size_t size)
{
    int32_t id;
    int added;
    ATTN_TRY(strtab_intern(&counter->tokens, bytes, size, &id, &added));
    if (added) {
        ATTN_TRY(grow_array((void **)&counter->counts, &counter->capacity, (int64_t)id + 1,
                            sizeof *counter->counts));
        counter->counts[id] = 0;
    }
    counter->counts[id]++;
    return ATTN_OK;
}

static attn_status count_line(token_counter *counter, attn_tokenizer_kind kind, const char *text)
{
    size_t size = strlen(text);
    size_t pos = 0;
    if (kind == ATTN_TOKENIZER_CHAR) {
        while (pos < size) {
            size_t length = utf8_sequence_length((const unsigned char *)text + pos, size - pos);
            ATTN_TRY(count_token(counter, text + pos, length));
            pos += length;
        }
        return ATTN_OK;
    }
    for (;;) {
        while (pos < size && is_ascii_space(text[pos]))
            pos++;
        if (pos == size)
            return ATTN_OK;
        size_t start = pos;
        while (pos < size && !is_ascii_space(text[pos]))
            pos++;
        ATTN_TRY(count_token(counter, text + start, pos - start));
    }
}

static attn_status train_counted(const attn_tokenizer_config *config, const char *const *lines,
                                 int64_t n, attn_vocab **vocab)
{
    token_counter counter = {0};
    attn_status status = ATTN_OK;
    for (int64_t i = 0; i < n && status == ATTN_OK; i++)
        status = count_line(&counter, config->kind, lines[i]);
    if (status == ATTN_OK)
        status = vocab_from_counts(&counter.tokens, counter.counts, config->min_count,
                                   config->max_vocab, vocab);
    strtab_free(&counter.tokens);
    free(counter.counts);
    return status;
}

attn_status attn_tokenizer_train(const attn_tokenizer_config *config, const char *const *lines,
                                 int64_t n, attn_tokenizer **out)
{
    static const char fn[] = "attn_tokenizer_train";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(config);
    ATTN_TRY(check_config(fn, config));
    if (config->kind == ATTN_TOKENIZER_BPE)
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "%s: attn's own BPE only reads the model files it made: a BPE is learned "
                         "by SentencePiece (kind ATTN_TOKENIZER_SPM with spm_bpe set, as "
                         "attn_tokenizer_config_parse makes of \"bpe:N\")",
                         fn);
    ATTN_CHECK_ARG(n > 0, "%s: need at least one line of training text, got n = %lld", fn,
                   (long long)n);
    ATTN_CHECK_NOT_NULL(lines);
    for (int64_t i = 0; i < n; i++) {
        ATTN_CHECK_ARG(lines[i] != NULL, "%s: lines[%lld] is NULL", fn, (long long)i);
        size_t size = strlen(lines[i]);
        size_t bad = utf8_first_invalid(lines[i], size);
        if (bad != size)
            return attn_fail(ATTN_ERR_FORMAT,
                             "%s: training line %lld is not valid UTF-8 (byte %zu)", fn,
                             (long long)(i + 1), bad + 1);
    }
    attn_tokenizer *tokenizer = calloc(1, sizeof *tokenizer);
    if (tokenizer == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    tokenizer->config = *config;
    attn_status status;
    if (config->kind == ATTN_TOKENIZER_SPM) {
        /* libsentencepiece spells missing characters in bytes itself, when its model has them.
         * The pieces a BPE of bpe_merges merges needs become the config's spm_vocab_size, as
         * its JSON records. */
        status = spm_tokenizer_learn(fn, &tokenizer->config, lines, n, &tokenizer->spm,
                                     &tokenizer->vocab);
    } else {
        status = train_counted(config, lines, n, &tokenizer->vocab);
        if (status == ATTN_OK && config->byte_fallback)
            status = add_byte_tokens(tokenizer);
        if (status == ATTN_OK)
            status = link_byte_fallback(fn, tokenizer);
    }
    if (status != ATTN_OK) {
        attn_tokenizer_destroy(tokenizer);
        return status;
    }
    *out = tokenizer;
    return ATTN_OK;
}

/* A tokenizer of a model's bytes; fn and name for messages. */
static attn_status tokenizer_of_spm_model(const char *fn, const char *name, const void *bytes,
                                          size_t size, attn_tokenizer **out)
{
    attn_tokenizer *tokenizer = calloc(1, sizeof *tokenizer);
    if (tokenizer == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    tokenizer->config = (attn_tokenizer_config){.kind = ATTN_TOKENIZER_SPM, .min_count = 1};
    const attn_status status =
        spm_tokenizer_from_model(fn, name, bytes, size, &tokenizer->spm, &tokenizer->vocab);
    if (status != ATTN_OK) {
        attn_tokenizer_destroy(tokenizer);
        return status;
    }
    *out = tokenizer;
    return ATTN_OK;
}

attn_status attn_tokenizer_from_spm_model(const void *bytes, size_t size, attn_tokenizer **out)
{
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    if (size > 0)
        ATTN_CHECK_NOT_NULL(bytes);
    return tokenizer_of_spm_model("attn_tokenizer_from_spm_model", "the model", bytes, size, out);
}

attn_status attn_tokenizer_load_spm(const char *path, attn_tokenizer **out)
{
    static const char fn[] = "attn_tokenizer_load_spm";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    char *bytes = NULL;
    size_t size = 0;
    ATTN_TRY(read_whole_file(fn, path, &bytes, &size));
    char name[1024];
    snprintf(name, sizeof name, "'%s'", path);
    const attn_status status = tokenizer_of_spm_model(fn, name, bytes, size, out);
    free(bytes);
    return status;
}

void attn_tokenizer_destroy(attn_tokenizer *tokenizer)
{
    if (tokenizer == NULL)
        return;
    attn_vocab_destroy(tokenizer->vocab);
    bpe_model_free(&tokenizer->bpe);
    spm_tokenizer_free(&tokenizer->spm);
    free(tokenizer);
}

attn_tokenizer_kind attn_tokenizer_get_kind(const attn_tokenizer *tokenizer)
{
    return tokenizer == NULL ? ATTN_TOKENIZER_CHAR : tokenizer->config.kind;
}

const attn_vocab *attn_tokenizer_vocab(const attn_tokenizer *tokenizer)
{
    return tokenizer == NULL ? NULL : tokenizer->vocab;
}

int64_t attn_tokenizer_num_merges(const attn_tokenizer *tokenizer)
{
    return tokenizer == NULL ? 0 : tokenizer->bpe.num_merges;
}

attn_status attn_tokenizer_merge(const attn_tokenizer *tokenizer, int64_t i, const char **left,
                                 const char **right)
{
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_NOT_NULL(left);
    ATTN_CHECK_NOT_NULL(right);
    ATTN_CHECK_ARG(i >= 0 && i < tokenizer->bpe.num_merges,
                   "attn_tokenizer_merge: merge %lld out of range (the tokenizer has %lld)",
                   (long long)i, (long long)tokenizer->bpe.num_merges);
    *left = strtab_string(&tokenizer->bpe.symbols, tokenizer->bpe.merge_left[i]);
    *right = strtab_string(&tokenizer->bpe.symbols, tokenizer->bpe.merge_right[i]);
    return ATTN_OK;
}

/* ---- encoding --------------------------------------------------------------------------- */

/* Id of a text token: <unk> if the vocabulary lacks it or it spells a special. */
static int32_t text_token_id(const attn_vocab *vocab, const char *bytes, size_t size)
{
    int32_t id = vocab_find(vocab, bytes, size);
    return id < ATTN_NUM_SPECIAL_IDS ? ATTN_UNK_ID : id;
}

static attn_status encode_bpe_word(const bpe_model *model, const byte_fallback *fallback,
                                   const char *word, size_t size, encode_cache *cache,
                                   id_buffer *out)
{
    if (cache == NULL)
        return bpe_encode_word(model, fallback, word, size, out);
    int32_t entry = strtab_find(&cache->words, word, size);
    if (entry < 0) {
        int64_t start = out->size;
        ATTN_TRY(bpe_encode_word(model, fallback, word, size, out));
        int64_t count = out->size - start;
        ATTN_TRY(strtab_intern(&cache->words, word, size, &entry, NULL));
        int64_t c1 = cache->capacity, c2 = cache->capacity;
        ATTN_TRY(grow_array((void **)&cache->start, &c1, (int64_t)entry + 1, sizeof *cache->start));
        ATTN_TRY(grow_array((void **)&cache->count, &c2, (int64_t)entry + 1, sizeof *cache->count));
        cache->capacity = c1;
        cache->start[entry] = cache->ids.size;
        cache->count[entry] = (int32_t)count;
        ATTN_TRY(id_buffer_reserve(&cache->ids, cache->ids.size + count));
        memcpy(cache->ids.data + cache->ids.size, out->data + start,
               (size_t)count * sizeof *out->data);
        cache->ids.size += count;
        return ATTN_OK;
    }
    int32_t count = cache->count[entry];
    ATTN_TRY(id_buffer_reserve(out, out->size + count));
    memcpy(out->data + out->size, cache->ids.data + cache->start[entry],
           (size_t)count * sizeof *out->data);
    out->size += count;
    return ATTN_OK;
}

void encode_cache_free(encode_cache *cache)
{
    strtab_free(&cache->words);
    free(cache->start);
    free(cache->count);
    id_buffer_free(&cache->ids);
    memset(cache, 0, sizeof *cache);
}

attn_status tokenizer_encode_append(const attn_tokenizer *tokenizer, const char *text, size_t size,
                                    encode_cache *cache, id_buffer *out)
{
    const attn_vocab *vocab = tokenizer->vocab;
    size_t pos = 0;
    if (tokenizer->config.kind == ATTN_TOKENIZER_SPM)
        return spm_tokenizer_encode_append(&tokenizer->spm, text, size, out);
    if (tokenizer->config.kind == ATTN_TOKENIZER_CHAR) {
        while (pos < size) {
            size_t length = utf8_sequence_length((const unsigned char *)text + pos, size - pos);
            const int32_t id = text_token_id(vocab, text + pos, length);
            if (id == ATTN_UNK_ID && tokenizer->fallback.enabled)
                for (size_t i = 0; i < length; i++)
                    ATTN_TRY(id_buffer_push(
                        out, tokenizer->fallback.byte_ids[(unsigned char)text[pos + i]]));
            else
                ATTN_TRY(id_buffer_push(out, id));
            pos += length;
        }
        return ATTN_OK;
    }
    for (;;) {
        while (pos < size && is_ascii_space(text[pos]))
            pos++;
        if (pos == size)
            return ATTN_OK;
        size_t start = pos;
        while (pos < size && !is_ascii_space(text[pos]))
            pos++;
        if (tokenizer->config.kind == ATTN_TOKENIZER_WORD)
            ATTN_TRY(id_buffer_push(out, text_token_id(vocab, text + start, pos - start)));
        else
            ATTN_TRY(encode_bpe_word(&tokenizer->bpe, &tokenizer->fallback, text + start,
                                     pos - start, cache, out));
    }
}

attn_status attn_tokenizer_encode(const attn_tokenizer *tokenizer, const char *text, int32_t **ids,
                                  int64_t *n_ids)
{
    ATTN_CHECK_NOT_NULL(ids);
    ATTN_CHECK_NOT_NULL(n_ids);
    *ids = NULL;
    *n_ids = 0;
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_NOT_NULL(text);
    size_t size = strlen(text);
    size_t bad = utf8_first_invalid(text, size);
    if (bad != size)
        return attn_fail(ATTN_ERR_FORMAT,
                         "attn_tokenizer_encode: text is not valid UTF-8 "
                         "(byte %zu)",
                         bad + 1);
    id_buffer out = {0};
    attn_status status = id_buffer_reserve(&out, 1);
    if (status == ATTN_OK)
        status = tokenizer_encode_append(tokenizer, text, size, NULL, &out);
    if (status != ATTN_OK) {
        id_buffer_free(&out);
        return status;
    }
    *ids = out.data;
    *n_ids = out.size;
    return ATTN_OK;
}

attn_status tokenizer_sample_append(const attn_tokenizer *tokenizer, const char *text, size_t size,
                                    double alpha, int64_t nbest, uint64_t seed, id_buffer *out)
{
    return spm_tokenizer_sample_append(&tokenizer->spm, text, size, alpha, nbest, seed, out);
}

int attn_tokenizer_can_sample(const attn_tokenizer *tokenizer)
{
    return tokenizer != NULL && tokenizer->config.kind == ATTN_TOKENIZER_SPM &&
           spm_tokenizer_can_sample(&tokenizer->spm);
}

attn_status attn_tokenizer_encode_sampled(const attn_tokenizer *tokenizer, const char *text,
                                          double alpha, int64_t nbest, uint64_t seed, int32_t **ids,
                                          int64_t *n_ids)
{
    static const char fn[] = "attn_tokenizer_encode_sampled";
    ATTN_CHECK_NOT_NULL(ids);
    ATTN_CHECK_NOT_NULL(n_ids);
    *ids = NULL;
    *n_ids = 0;
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_NOT_NULL(text);
    ATTN_CHECK_ARG(alpha > 0.0 && alpha <= 1.0, "%s: alpha must be in (0, 1], got %g", fn, alpha);
    ATTN_CHECK_ARG(nbest == -1 || (nbest >= 2 && nbest <= ATTN_SPM_MAX_NBEST),
                   "%s: nbest must be -1 (every segmentation) or in [2, %d], got %lld", fn,
                   ATTN_SPM_MAX_NBEST, (long long)nbest);
    if (tokenizer->config.kind != ATTN_TOKENIZER_SPM)
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                         "%s: only SentencePiece tokenizers sample segmentations, not a %s one", fn,
                         attn_tokenizer_kind_name(tokenizer->config.kind));
    const size_t size = strlen(text);
    const size_t bad = utf8_first_invalid(text, size);
    if (bad != size)
        return attn_fail(ATTN_ERR_FORMAT, "%s: text is not valid UTF-8 (byte %zu)", fn, bad + 1);
    id_buffer out = {0};
    attn_status status = id_buffer_reserve(&out, 1);
    if (status == ATTN_OK)
        status = spm_tokenizer_sample_append(&tokenizer->spm, text, size, alpha, nbest, seed, &out);
    if (status != ATTN_OK) {
        id_buffer_free(&out);
        return status;
    }
    *ids = out.data;
    *n_ids = out.size;
    return ATTN_OK;
}

/* ---- decoding --------------------------------------------------------------------------- */

int utf8_unfinished_character(const unsigned char *text, size_t size)
{
    const unsigned char lead = text[0];
    const size_t needed = lead >= 0xC2 && lead <= 0xDF   ? 2
                          : lead >= 0xE0 && lead <= 0xEF ? 3
                          : lead >= 0xF0 && lead <= 0xF4 ? 4
                                                         : 0;
    if (needed == 0 || size >= needed)
        return 0;
    /* The second byte's range narrows after these leads (no overlong forms, surrogates or
     * code points above U+10FFFF). */
    if (size >= 2) {
        const unsigned char second = text[1];
        const unsigned char lo = lead == 0xE0 ? 0xA0 : lead == 0xF0 ? 0x90 : 0x80;
        const unsigned char hi = lead == 0xED ? 0x9F : lead == 0xF4 ? 0x8F : 0xBF;
        if (second < lo || second > hi)
            return 0;
    }
    for (size_t i = 2; i < size; i++)
        if ((text[i] & 0xC0) != 0x80)
            return 0;
    return 1;
}

/* Bytes a model put together that are not UTF-8 (a sampled language model may) become U+FFFD,
 * one per byte, so the text stays valid UTF-8; a character still missing its last bytes at the
 * end is left out, not replaced, so the text of a growing sequence of ids only ever grows at
 * its end (what a stream has printed stays right). */
static attn_status replace_invalid_utf8(byte_buffer *buf)
{
    if (utf8_first_invalid(buf->data, buf->size) == buf->size)
        return ATTN_OK;
    byte_buffer clean = {0};
    attn_status status = byte_buffer_append(&clean, "", 0);
    for (size_t pos = 0; pos < buf->size && status == ATTN_OK;) {
        const unsigned char *at = (const unsigned char *)buf->data + pos;
        size_t length = utf8_sequence_length(at, buf->size - pos);
        if (length == 0 && utf8_unfinished_character(at, buf->size - pos))
            break;
        if (length == 0) {
            status = byte_buffer_append(&clean, "\xEF\xBF\xBD", 3);
            pos++;
        } else {
            status = byte_buffer_append(&clean, buf->data + pos, length);
            pos += length;
        }
    }
    if (status != ATTN_OK) {
        byte_buffer_free(&clean);
        return status;
    }
    byte_buffer_free(buf);
    *buf = clean;
    return ATTN_OK;
}

attn_status attn_tokenizer_decode(const attn_tokenizer *tokenizer, const int32_t *ids,
                                  int64_t n_ids, char **text)
{
    ATTN_CHECK_NOT_NULL(text);
    *text = NULL;
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_ARG(n_ids >= 0, "attn_tokenizer_decode: n_ids must not be negative, got %lld",
                   (long long)n_ids);
    if (n_ids > 0)
        ATTN_CHECK_NOT_NULL(ids);
    const attn_vocab *vocab = tokenizer->vocab;
    int64_t vocab_size = attn_vocab_size(vocab);
    for (int64_t i = 0; i < n_ids; i++)
        ATTN_CHECK_ARG(ids[i] >= 0 && ids[i] < vocab_size,
                       "attn_tokenizer_decode: ids[%lld] = %d is outside the vocabulary of %lld",
                       (long long)i, (int)ids[i], (long long)vocab_size);
    if (tokenizer->config.kind == ATTN_TOKENIZER_SPM)
        return spm_tokenizer_decode(&tokenizer->spm, ids, n_ids, text);
    byte_buffer buf = {0};
    attn_status status = byte_buffer_append(&buf, "", 0);
    /* Word and BPE tokens of a new word are preceded by a space, except the first. */
    int space_before_next = 0;
    for (int64_t i = 0; i < n_ids && status == ATTN_OK; i++) {
        if (ids[i] < ATTN_NUM_SPECIAL_IDS)
            continue;
        const char *token = strtab_string(&vocab->tokens, ids[i]);
        size_t size = strtab_length(&vocab->tokens, ids[i]);
        int ends_word = 1;
        const int byte = byte_of(&tokenizer->fallback, ids[i]);
        char raw = (char)byte;
        if (byte == '\n') {
            /* Text is read line by line, so no text spells a line break in bytes: one sampled
             * must not split a line in two. */
            token = "\xEF\xBF\xBD";
            size = 3;
            ends_word = 0;
        } else if (byte >= 0) {
            /* A byte spells part of a character or piece: never a word's end by itself. */
            token = &raw;
            size = 1;
            ends_word = 0;
        } else if (ids[i] == tokenizer->fallback.word_end_id) {
            size = 0;
        } else if (tokenizer->config.kind == ATTN_TOKENIZER_BPE) {
            ends_word = size >= END_OF_WORD_SIZE &&
                        memcmp(token + size - END_OF_WORD_SIZE, END_OF_WORD, END_OF_WORD_SIZE) == 0;
            if (ends_word)
                size -= END_OF_WORD_SIZE;
        }
        if (space_before_next && buf.size > 0)
            status = byte_buffer_append(&buf, " ", 1);
        if (status == ATTN_OK)
            status = byte_buffer_append(&buf, token, size);
        space_before_next = tokenizer->config.kind != ATTN_TOKENIZER_CHAR && ends_word;
    }
    if (status == ATTN_OK && tokenizer->fallback.enabled)
        status = replace_invalid_utf8(&buf);
    if (status != ATTN_OK) {
        byte_buffer_free(&buf);
        return status;
    }
    *text = buf.data;
    return ATTN_OK;
}

/* ---- JSON ------------------------------------------------------------------------------- */

/* An spm tokenizer's own fields, added to the object the others share; no "vocab": the
 * model's bytes hold it. */
static attn_status spm_to_cjson(const attn_tokenizer *tokenizer, cJSON *object, cJSON **out)
{
    const attn_tokenizer_config *config = &tokenizer->config;
    char *model = NULL;
    attn_status status = spm_model_to_base64(&tokenizer->spm, &model);
    if (status == ATTN_OK &&
        !(cJSON_AddNumberToObject(object, "spm_vocab_size", (double)config->spm_vocab_size) &&
          cJSON_AddStringToObject(object, "spm_type",
                                  config->spm_vocab_size == 0 ? ""
                                  : config->spm_bpe           ? "bpe"
                                                              : "unigram") &&
          cJSON_AddStringToObject(object, "spm_model", model)))
        status = attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_to_json: out of memory");
    free(model);
    if (status != ATTN_OK) {
        cJSON_Delete(object);
        return status;
    }
    *out = object;
    return ATTN_OK;
}

static attn_status tokenizer_to_cjson(const attn_tokenizer *tokenizer, cJSON **out)
{
    const attn_tokenizer_config *config = &tokenizer->config;
    cJSON *object = cJSON_CreateObject();
    int ok = object != NULL && cJSON_AddStringToObject(object, "format", TOKENIZER_FORMAT) &&
             cJSON_AddNumberToObject(object, "version", TOKENIZER_VERSION) &&
             cJSON_AddStringToObject(object, "kind", attn_tokenizer_kind_name(config->kind)) &&
             cJSON_AddNumberToObject(object, "min_count", (double)config->min_count) &&
             cJSON_AddNumberToObject(object, "max_vocab", (double)config->max_vocab);
    /* Absent when off, as in the tokenizers written before it. */
    if (ok && config->byte_fallback)
        ok = cJSON_AddTrueToObject(object, "byte_fallback") != NULL;
    if (ok && config->kind == ATTN_TOKENIZER_SPM)
        return spm_to_cjson(tokenizer, object, out);
    if (ok && config->kind == ATTN_TOKENIZER_BPE) {
        const bpe_model *bpe = &tokenizer->bpe;
        cJSON *merges = cJSON_CreateArray();
        ok = merges != NULL && cJSON_AddItemToObject(object, "merges", merges);
        if (!ok)
            cJSON_Delete(merges);
        ok = ok && cJSON_AddNumberToObject(object, "bpe_merges", (double)config->bpe_merges);
        for (int64_t i = 0; ok && i < bpe->num_merges; i++) {
            const char *pair[2] = {strtab_string(&bpe->symbols, bpe->merge_left[i]),
                                   strtab_string(&bpe->symbols, bpe->merge_right[i])};
            cJSON *item = cJSON_CreateStringArray(pair, 2);
            ok = item != NULL && cJSON_AddItemToArray(merges, item);
            if (!ok)
                cJSON_Delete(item);
        }
    }
    cJSON *vocab = NULL;
    attn_status status = ok ? vocab_to_cjson(tokenizer->vocab, &vocab) : ATTN_ERR_OUT_OF_MEMORY;
    if (status == ATTN_OK && !cJSON_AddItemToObject(object, "vocab", vocab)) {
        cJSON_Delete(vocab);
        status = ATTN_ERR_OUT_OF_MEMORY;
    }
    if (status != ATTN_OK) {
        cJSON_Delete(object);
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_to_json: out of memory");
    }
    *out = object;
    return ATTN_OK;
}

attn_status attn_tokenizer_to_json(const attn_tokenizer *tokenizer, char **json)
{
    ATTN_CHECK_NOT_NULL(json);
    *json = NULL;
    ATTN_CHECK_NOT_NULL(tokenizer);
    cJSON *object = NULL;
    ATTN_TRY(tokenizer_to_cjson(tokenizer, &object));
    *json = cJSON_PrintUnformatted(object);
    cJSON_Delete(object);
    if (*json == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_to_json: out of memory");
    return ATTN_OK;
}

/* An integer field in [lo, hi]. */
static attn_status integer_field(const char *fn, const cJSON *object, const char *name, int64_t lo,
                                 int64_t hi, int64_t *value)
{
    const cJSON *item = cJSON_GetObjectItemCaseSensitive(object, name);
    double number = cJSON_IsNumber(item) ? cJSON_GetNumberValue(item) : NAN;
    if (!(number >= (double)lo && number <= (double)hi && number == floor(number)))
        return attn_fail(ATTN_ERR_FORMAT, "%s: \"%s\" must be an integer in [%lld, %lld]", fn, name,
                         (long long)lo, (long long)hi);
    *value = (int64_t)number;
    return ATTN_OK;
}

static attn_status merge_symbol(const char *fn, int64_t index, const cJSON *item,
                                const char **symbol)
{
    *symbol = cJSON_GetStringValue(item);
    size_t size = *symbol == NULL ? 0 : strlen(*symbol);
    int ok = size > 0 && attn_utf8_valid(*symbol, size);
    for (size_t i = 0; ok && i < size; i++)
        ok = !is_ascii_space((*symbol)[i]);
    if (!ok)
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: merge %lld: symbols must be non-empty UTF-8 "
                         "strings without whitespace",
                         fn, (long long)index);
    return ATTN_OK;
}

static attn_status spm_from_cjson(const char *fn, const cJSON *json, attn_tokenizer *tokenizer)
{
    attn_tokenizer_config *config = &tokenizer->config;
    ATTN_TRY(integer_field(fn, json, "spm_vocab_size", 0, INT32_MAX - 1, &config->spm_vocab_size));
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(json, "spm_type"));
    if (type == NULL || !(strcmp(type, "unigram") == 0 || strcmp(type, "bpe") == 0 ||
                          (type[0] == '\0' && config->spm_vocab_size == 0)))
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: \"spm_type\" must be \"unigram\" or \"bpe\" (\"\" for a model "
                         "attn did not learn)",
                         fn);
    config->spm_bpe = strcmp(type, "bpe") == 0;
    const char *model = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(json, "spm_model"));
    if (model == NULL)
        return attn_fail(ATTN_ERR_FORMAT, "%s: an spm tokenizer needs its \"spm_model\"", fn);
    return spm_tokenizer_from_base64(fn, model, &tokenizer->spm, &tokenizer->vocab);
}

static attn_status tokenizer_from_cjson(const char *fn, const cJSON *json,
                                        attn_tokenizer *tokenizer)
{
    const char *format = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(json, "format"));
    if (format == NULL || strcmp(format, TOKENIZER_FORMAT) != 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: not a tokenizer (\"format\" must be \"%s\")", fn,
                         TOKENIZER_FORMAT);
    int64_t version;
    ATTN_TRY(integer_field(fn, json, "version", TOKENIZER_VERSION, TOKENIZER_VERSION, &version));
    const char *kind = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(json, "kind"));
    attn_tokenizer_config *config = &tokenizer->config;
    if (kind != NULL && strcmp(kind, "char") == 0)
        config->kind = ATTN_TOKENIZER_CHAR;
    else if (kind != NULL && strcmp(kind, "word") == 0)
        config->kind = ATTN_TOKENIZER_WORD;
    else if (kind != NULL && strcmp(kind, "bpe") == 0)
        config->kind = ATTN_TOKENIZER_BPE;
    else if (kind != NULL && strcmp(kind, "spm") == 0)
        config->kind = ATTN_TOKENIZER_SPM;
    else
        return attn_fail(ATTN_ERR_FORMAT,
                         "%s: \"kind\" must be \"char\", \"word\", \"bpe\" or \"spm\"", fn);
    ATTN_TRY(integer_field(fn, json, "min_count", INT32_MIN, INT32_MAX, &config->min_count));
    ATTN_TRY(integer_field(fn, json, "max_vocab", 0, INT32_MAX, &config->max_vocab));
    const cJSON *fallback = cJSON_GetObjectItemCaseSensitive(json, "byte_fallback");
    if (fallback != NULL && !cJSON_IsBool(fallback))
        return attn_fail(ATTN_ERR_FORMAT, "%s: \"byte_fallback\" must be true or false", fn);
    config->byte_fallback = cJSON_IsTrue(fallback);
    if (config->byte_fallback && config->kind == ATTN_TOKENIZER_WORD)
        return attn_fail(ATTN_ERR_FORMAT, "%s: a word tokenizer has no byte fallback", fn);
    if (config->kind == ATTN_TOKENIZER_SPM)
        return spm_from_cjson(fn, json, tokenizer);
    ATTN_TRY(
        vocab_from_cjson(fn, cJSON_GetObjectItemCaseSensitive(json, "vocab"), &tokenizer->vocab));
    if (config->kind != ATTN_TOKENIZER_BPE)
        return link_byte_fallback(fn, tokenizer);

    ATTN_TRY(integer_field(fn, json, "bpe_merges", 1, INT32_MAX - 1, &config->bpe_merges));
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(json, "merges");
    if (!cJSON_IsArray(merges))
        return attn_fail(ATTN_ERR_FORMAT, "%s: a bpe tokenizer needs a \"merges\" array", fn);
    int64_t index = 0;
    const cJSON *merge;
    cJSON_ArrayForEach(merge, merges)
    {
        if (!cJSON_IsArray(merge) || cJSON_GetArraySize(merge) != 2)
            return attn_fail(ATTN_ERR_FORMAT, "%s: merge %lld must be a [left, right] pair", fn,
                             (long long)index);
        const char *left, *right;
        ATTN_TRY(merge_symbol(fn, index, cJSON_GetArrayItem(merge, 0), &left));
        ATTN_TRY(merge_symbol(fn, index, cJSON_GetArrayItem(merge, 1), &right));
        ATTN_TRY(bpe_add_merge(&tokenizer->bpe, left, strlen(left), right, strlen(right)));
        index++;
    }
    ATTN_TRY(bpe_link_vocab(&tokenizer->bpe, tokenizer->vocab));
    return link_byte_fallback(fn, tokenizer);
}

attn_status attn_tokenizer_from_json(const char *json, attn_tokenizer **out)
{
    static const char fn[] = "attn_tokenizer_from_json";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(json);
    cJSON *parsed;
    ATTN_TRY(json_parse(fn, json, &parsed));
    attn_tokenizer *tokenizer = calloc(1, sizeof *tokenizer);
    attn_status status = tokenizer != NULL
                             ? tokenizer_from_cjson(fn, parsed, tokenizer)
                             : attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    cJSON_Delete(parsed);
    if (status != ATTN_OK) {
        attn_tokenizer_destroy(tokenizer);
        return status;
    }
    *out = tokenizer;
    return ATTN_OK;
}

attn_status attn_tokenizer_save(const attn_tokenizer *tokenizer, const char *path)
{
    static const char fn[] = "attn_tokenizer_save";
    ATTN_CHECK_NOT_NULL(tokenizer);
    ATTN_CHECK_NOT_NULL(path);
    char *json = NULL;
    ATTN_TRY(attn_tokenizer_to_json(tokenizer, &json));
    const attn_status status = attn_file_write_bytes_atomically(fn, path, json, strlen(json));
    free(json);
    return status;
}

attn_status attn_tokenizer_load(const char *path, attn_tokenizer **out)
{
    static const char fn[] = "attn_tokenizer_load";
    ATTN_CHECK_NOT_NULL(out);
    *out = NULL;
    ATTN_CHECK_NOT_NULL(path);
    char *text = NULL;
    size_t size = 0;
    ATTN_TRY(read_whole_file(fn, path, &text, &size));
    /* A model or token file would stop at its first NUL and be judged on a fragment. */
    if (strlen(text) != size) {
        free(text);
        return attn_fail(ATTN_ERR_FORMAT, "%s: '%s' is a binary file, not a tokenizer's JSON", fn,
                         path);
    }
    const attn_status status = attn_tokenizer_from_json(text, out);
    free(text);
    if (status == ATTN_OK)
        return ATTN_OK;
    char reason[512];
    const char *inner = attn_last_error();
    const char prefix[] = "attn_tokenizer_from_json: ";
    if (strncmp(inner, prefix, sizeof prefix - 1) == 0)
        inner += sizeof prefix - 1;
    snprintf(reason, sizeof reason, "%s", inner);
    return attn_fail(status, "%s: '%s' is not a tokenizer's JSON: %s", fn, path, reason);
}

attn_status attn_tokenizer_fingerprint(const attn_tokenizer *tokenizer, uint64_t *fingerprint)
{
    ATTN_CHECK_NOT_NULL(fingerprint);
    *fingerprint = 0;
    char *json = NULL;
    ATTN_TRY(attn_tokenizer_to_json(tokenizer, &json));
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a */
    for (const unsigned char *c = (const unsigned char *)json; *c != '\0'; c++) {
        h ^= *c;
        h *= 0x100000001b3ULL;
    }
    free(json);
    *fingerprint = h;
    return ATTN_OK;
}

size_t attn_token_text_length(const char *token)
{
    const size_t size = token != NULL ? strlen(token) : 0;
    return size > END_OF_WORD_SIZE &&
                   memcmp(token + size - END_OF_WORD_SIZE, END_OF_WORD, END_OF_WORD_SIZE) == 0
               ? size - END_OF_WORD_SIZE
               : size;
}
