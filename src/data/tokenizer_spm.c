/* SentencePiece tokenizers: a model learned by libsentencepiece from the training text, or a
 * user's .model file, behind attn's tokenizer interface (sentencepiece.h is the C++ shim). */
#include "data/data_internal.h"
#include "data/sentencepiece.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The status of a shim call, its message naming fn and the subject (a file, "learning a
 * SentencePiece model", ...); `refusal` says what a format error means for that subject. */
static attn_status spm_status(const char *fn, const char *subject, const char *refusal,
                              spm_result result, const char *error)
{
    switch (result) {
    case SPM_OK:
        return ATTN_OK;
    case SPM_ERR_MEMORY:
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: %s: out of memory", fn, subject);
    case SPM_ERR_INVALID:
        return attn_fail(ATTN_ERR_INVALID_ARGUMENT, "%s: %s: %s", fn, subject, error);
    case SPM_ERR_MISSING:
        return attn_fail(ATTN_ERR_UNSUPPORTED, "%s: %s", fn, error);
    case SPM_ERR_FORMAT:
        break;
    }
    return attn_fail(ATTN_ERR_FORMAT, "%s: %s %s (%s)", fn, subject, refusal, error);
}

int attn_tokenizer_spm_available(void)
{
    return spm_available();
}

void spm_tokenizer_free(spm_tokenizer *spm)
{
    spm_processor_free(spm->processor);
    free(spm->model);
    memset(spm, 0, sizeof *spm);
}

/* A model piece's name in attn's vocabulary. With an offset the model's own specials would
 * repeat attn's names ("<unk>", "<s>", ...): they are never produced from text, so they keep
 * their text inside a marker that says whose they are. */
static attn_status add_piece(const char *fn, const char *name, const spm_tokenizer *spm, int32_t id,
                             attn_vocab *vocab)
{
    const char *piece = spm_piece(spm->processor, id);
    const spm_piece_kind kind = spm_piece_kind_of(spm->processor, id);
    byte_buffer marked = {0};
    attn_status status = ATTN_OK;
    if (spm->offset > 0 && (kind == SPM_PIECE_CONTROL || kind == SPM_PIECE_UNKNOWN)) {
        status = byte_buffer_append(&marked, "<model ", 7);
        if (status == ATTN_OK)
            status = byte_buffer_append(&marked, piece, strlen(piece));
        if (status == ATTN_OK)
            status = byte_buffer_append(&marked, ">", 1);
        piece = marked.data;
    }
    int32_t vocab_id = -1;
    int added = 0;
    if (status == ATTN_OK)
        status = strtab_intern(&vocab->tokens, piece, strlen(piece), &vocab_id, &added);
    if (status == ATTN_OK && (!added || vocab_id != id + spm->offset))
        status = attn_fail(ATTN_ERR_FORMAT,
                           "%s: %s: piece %d \"%s\" has the name of another token of attn's "
                           "vocabulary",
                           fn, name, (int)id, piece);
    byte_buffer_free(&marked);
    return status;
}

/* Loads the processor from spm->model and builds the vocabulary. */
static attn_status attach(const char *fn, const char *name, spm_tokenizer *spm, attn_vocab **vocab)
{
    char error[512] = "";
    ATTN_TRY(spm_status(
        fn, name, "is not a SentencePiece model",
        spm_processor_load(spm->model, spm->model_size, &spm->processor, error, sizeof error),
        error));
    int32_t unk, bos, eos, pad;
    spm_special_ids(spm->processor, &unk, &bos, &eos, &pad);
    spm->unk_id = unk;
    spm->offset =
        pad == ATTN_PAD_ID && bos == ATTN_BOS_ID && eos == ATTN_EOS_ID && unk == ATTN_UNK_ID
            ? 0
            : ATTN_NUM_SPECIAL_IDS;
    const int32_t pieces = spm_piece_count(spm->processor);
    if ((int64_t)pieces + spm->offset > INT32_MAX)
        return attn_fail(ATTN_ERR_FORMAT, "%s: %s has too many pieces (%d)", fn, name, (int)pieces);
    ATTN_TRY(new_vocab_with_specials(vocab));
    attn_status status = ATTN_OK;
    /* Without an offset the model's first four pieces are attn's specials themselves. */
    for (int32_t id = spm->offset == 0 ? ATTN_NUM_SPECIAL_IDS : 0; id < pieces && status == ATTN_OK;
         id++)
        status = add_piece(fn, name, spm, id, *vocab);
    if (status != ATTN_OK) {
        attn_vocab_destroy(*vocab);
        *vocab = NULL;
    }
    return status;
}

attn_status spm_tokenizer_from_model(const char *fn, const char *name, const void *bytes,
                                     size_t size, spm_tokenizer *out, attn_vocab **vocab)
{
    memset(out, 0, sizeof *out);
    *vocab = NULL;
    out->model = malloc(size > 0 ? size : 1);
    if (out->model == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory for %s", fn, name);
    if (size > 0)
        memcpy(out->model, bytes, size);
    out->model_size = size;
    const attn_status status = attach(fn, name, out, vocab);
    if (status != ATTN_OK)
        spm_tokenizer_free(out);
    return status;
}

/* SentencePiece's word boundary, U+2581: it replaces every space and starts every line. */
#define SPM_SPACE "\xE2\x96\x81"

/* Distinct characters of the text as SentencePiece's alphabet holds them (a space as its
 * U+2581, which every line starts with), counted up to `limit`. */
static int64_t distinct_characters(const char *const *lines, int64_t n, int64_t limit)
{
    strtab seen = {0};
    int64_t count = 0;
    int32_t id;
    int added = 0;
    if (strtab_intern(&seen, SPM_SPACE, strlen(SPM_SPACE), &id, &added) != ATTN_OK)
        count = limit; /* out of memory: a large alphabet is the safe guess */
    count += added;
    for (int64_t i = 0; i < n && count < limit; i++) {
        const char *text = lines[i];
        const size_t size = strlen(text);
        for (size_t pos = 0; pos < size && count < limit;) {
            const size_t length =
                utf8_sequence_length((const unsigned char *)text + pos, size - pos);
            const int space = length == 1 && text[pos] == ' ';
            if (length == 0 || strtab_intern(&seen, space ? SPM_SPACE : text + pos,
                                             space ? strlen(SPM_SPACE) : length, &id,
                                             &added) != ATTN_OK) {
                count = limit;
                break;
            }
            count += added;
            pos += length;
        }
    }
    strtab_free(&seen);
    attn_clear_error();
    return count;
}

/* Alphabets above this many characters (Chinese, Japanese) learn with SentencePiece's usual
 * coverage of 0.9995, leaving the rarest characters to the bytes or <unk>; smaller ones keep
 * every character (1.0), as SentencePiece's documentation advises. */
#define LARGE_ALPHABET 1000
/* Byte fallback costs 256 pieces: learned when they are at most a quarter of the vocabulary
 * (or when asked, as a language model does); below, a character the model lacks is <unk>. */
#define BYTE_FALLBACK_MIN_VOCAB (4 * 256)

attn_status spm_tokenizer_learn(const char *fn, attn_tokenizer_config *config,
                                const char *const *lines, int64_t n, spm_tokenizer *out,
                                attn_vocab **vocab)
{
    memset(out, 0, sizeof *out);
    *vocab = NULL;
    if (!spm_available())
        return attn_fail(ATTN_ERR_UNSUPPORTED,
                         "%s: bpe:N, spm:N and spm-bpe:N are learned by SentencePiece, and this "
                         "build is without it: install libsentencepiece-dev and rebuild attn, or "
                         "use char or word tokens",
                         fn);
    /* A BPE sized in merges needs the whole alphabet; otherwise it only decides the
     * coverage, and counting past LARGE_ALPHABET would read the whole text for nothing. */
    const int by_merges = config->spm_bpe && config->bpe_merges > 0;
    const int64_t alphabet =
        distinct_characters(lines, n, by_merges ? INT32_MAX : LARGE_ALPHABET + 1);
    int64_t vocab_size = config->spm_vocab_size;
    int with_bytes = config->byte_fallback;
    if (by_merges) {
        /* SentencePiece's BPE holds the specials, the alphabet, the bytes if any, then one
         * piece per merge: bpe:N makes N merges, as attn's own BPE did. */
        vocab_size = ATTN_NUM_SPECIAL_IDS + alphabet + config->bpe_merges;
        with_bytes = with_bytes || vocab_size + 256 >= BYTE_FALLBACK_MIN_VOCAB;
        vocab_size += with_bytes ? 256 : 0;
        if (vocab_size >= INT32_MAX)
            return attn_fail(ATTN_ERR_INVALID_ARGUMENT,
                             "%s: %lld merges on an alphabet of %lld characters make too many "
                             "pieces: ask for fewer merges",
                             fn, (long long)config->bpe_merges, (long long)alphabet);
    } else {
        with_bytes = with_bytes || vocab_size >= BYTE_FALLBACK_MIN_VOCAB;
    }
    spm_train_options options = {
        .bpe = config->spm_bpe,
        .vocab_size = vocab_size,
        .character_coverage = alphabet > LARGE_ALPHABET ? 0.9995 : 1.0,
        .byte_fallback = with_bytes,
        .pad_id = ATTN_PAD_ID,
        .bos_id = ATTN_BOS_ID,
        .eos_id = ATTN_EOS_ID,
        .unk_id = ATTN_UNK_ID,
    };
    char error[512] = "";
    ATTN_TRY(spm_status(
        fn, "learning a SentencePiece model", "failed",
        spm_train(lines, n, &options, &out->model, &out->model_size, error, sizeof error), error));
    const attn_status status = attach(fn, "the model learned", out, vocab);
    if (status != ATTN_OK) {
        spm_tokenizer_free(out);
        return status;
    }
    config->spm_vocab_size = vocab_size;
    return ATTN_OK;
}

/* The model's ids (malloc'ed by the shim, freed here) as attn's, appended. */
static attn_status append_model_ids(const spm_tokenizer *spm, int32_t *ids, int64_t count,
                                    id_buffer *out)
{
    attn_status status = id_buffer_reserve(out, out->size + count);
    for (int64_t i = 0; i < count && status == ATTN_OK; i++)
        out->data[out->size++] = ids[i] == spm->unk_id ? ATTN_UNK_ID : ids[i] + spm->offset;
    free(ids);
    return status;
}

attn_status spm_tokenizer_encode_append(const spm_tokenizer *spm, const char *text, size_t size,
                                        id_buffer *out)
{
    char error[512] = "";
    int32_t *ids = NULL;
    int64_t count = 0;
    ATTN_TRY(spm_status("attn_tokenizer_encode", "libsentencepiece", "could not encode the text",
                        spm_encode(spm->processor, text, size, &ids, &count, error, sizeof error),
                        error));
    return append_model_ids(spm, ids, count, out);
}

attn_status spm_tokenizer_sample_append(const spm_tokenizer *spm, const char *text, size_t size,
                                        double alpha, int64_t nbest, uint64_t seed, id_buffer *out)
{
    char error[512] = "";
    int32_t *ids = NULL;
    int64_t count = 0;
    ATTN_TRY(spm_status("attn_tokenizer_encode_sampled", "libsentencepiece",
                        "could not sample a segmentation of the text",
                        spm_sample_encode(spm->processor, text, size, (float)alpha, (int)nbest,
                                          seed, &ids, &count, error, sizeof error),
                        error));
    return append_model_ids(spm, ids, count, out);
}

int spm_tokenizer_can_sample(const spm_tokenizer *spm)
{
    return spm_can_sample(spm->processor);
}

/* Text is read line by line, so no text holds a line break: one a model spelled in bytes
 * (<0x0A>) reads as U+FFFD, as attn's own byte fallback does, and never splits a line. */
static attn_status replace_line_breaks(const char *decoded, char **text)
{
    byte_buffer out = {0};
    attn_status status = byte_buffer_append(&out, "", 0);
    for (const char *c = decoded; *c != '\0' && status == ATTN_OK; c++)
        status = *c == '\n' ? byte_buffer_append(&out, "\xEF\xBF\xBD", 3)
                             : byte_buffer_append(&out, c, 1);
    if (status != ATTN_OK) {
        byte_buffer_free(&out);
        return status;
    }
    *text = out.data;
    return ATTN_OK;
}

/* How many of the last pieces are byte pieces spelling a character whose last bytes have not
 * come yet: left out, as attn's own byte fallback leaves them, so the text of a growing
 * sequence of ids only ever grows at its end (libsentencepiece would give U+FFFD, and then a
 * stream would have printed it). */
static int64_t unfinished_tail(const spm_tokenizer *spm, const int32_t *pieces, int64_t count)
{
    unsigned char bytes[3];
    int64_t run = 0;
    while (run < 3 && run < count &&
           spm_piece_kind_of(spm->processor, pieces[count - 1 - run]) == SPM_PIECE_BYTE) {
        unsigned value = 0;
        if (sscanf(spm_piece(spm->processor, pieces[count - 1 - run]), "<0x%2X>", &value) != 1)
            break;
        bytes[2 - run] = (unsigned char)value;
        run++;
    }
    for (int64_t t = 1; t <= run; t++)
        if (utf8_unfinished_character(bytes + 3 - t, (size_t)t))
            return t;
    return 0;
}

attn_status spm_tokenizer_decode(const spm_tokenizer *spm, const int32_t *ids, int64_t n_ids,
                                 char **text)
{
    int32_t *pieces = malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof *pieces);
    if (pieces == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_decode: out of memory");
    int64_t count = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        if (ids[i] < ATTN_NUM_SPECIAL_IDS)
            continue;
        const int32_t id = ids[i] - spm->offset;
        const spm_piece_kind kind = spm_piece_kind_of(spm->processor, id);
        if (kind != SPM_PIECE_CONTROL && kind != SPM_PIECE_UNKNOWN)
            pieces[count++] = id;
    }
    count -= unfinished_tail(spm, pieces, count);
    char error[512] = "";
    char *decoded = NULL;
    attn_status status =
        spm_status("attn_tokenizer_decode", "libsentencepiece", "could not decode the ids",
                   spm_decode(spm->processor, pieces, count, &decoded, error, sizeof error), error);
    free(pieces);
    if (status == ATTN_OK)
        status = replace_line_breaks(decoded, text);
    free(decoded);
    return status;
}

/* ---- base64, for the model's bytes inside the tokenizer's JSON ---------------------------- */

static const char base64_digits[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

attn_status spm_model_to_base64(const spm_tokenizer *spm, char **text)
{
    const unsigned char *bytes = (const unsigned char *)spm->model;
    const size_t size = spm->model_size;
    char *out = malloc((size + 2) / 3 * 4 + 1);
    if (out == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "attn_tokenizer_to_json: out of memory");
    size_t o = 0;
    for (size_t i = 0; i < size; i += 3) {
        const size_t left = size - i;
        const uint32_t group = (uint32_t)bytes[i] << 16 |
                               (left > 1 ? (uint32_t)bytes[i + 1] << 8 : 0) |
                               (left > 2 ? (uint32_t)bytes[i + 2] : 0);
        out[o++] = base64_digits[group >> 18 & 63];
        out[o++] = base64_digits[group >> 12 & 63];
        out[o++] = left > 1 ? base64_digits[group >> 6 & 63] : '=';
        out[o++] = left > 2 ? base64_digits[group & 63] : '=';
    }
    out[o] = '\0';
    *text = out;
    return ATTN_OK;
}

static int base64_value(char c)
{
    const char *at = c != '\0' ? strchr(base64_digits, c) : NULL;
    return at != NULL ? (int)(at - base64_digits) : -1;
}

attn_status spm_tokenizer_from_base64(const char *fn, const char *text, spm_tokenizer *out,
                                      attn_vocab **vocab)
{
    memset(out, 0, sizeof *out);
    *vocab = NULL;
    const size_t length = strlen(text);
    if (length == 0 || length % 4 != 0)
        return attn_fail(ATTN_ERR_FORMAT, "%s: \"spm_model\" must be a model's bytes in base64",
                         fn);
    unsigned char *bytes = malloc(length / 4 * 3);
    if (bytes == NULL)
        return attn_fail(ATTN_ERR_OUT_OF_MEMORY, "%s: out of memory", fn);
    size_t size = 0;
    int ok = 1;
    for (size_t i = 0; i < length && ok; i += 4) {
        const int last = i + 4 == length;
        const int padding = last ? (text[i + 3] == '=') + (text[i + 2] == '=') : 0;
        const int v[4] = {base64_value(text[i]), base64_value(text[i + 1]),
                          padding < 2 ? base64_value(text[i + 2]) : 0,
                          padding < 1 ? base64_value(text[i + 3]) : 0};
        ok = v[0] >= 0 && v[1] >= 0 && v[2] >= 0 && v[3] >= 0;
        const uint32_t group =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        bytes[size++] = (unsigned char)(group >> 16);
        if (padding < 2)
            bytes[size++] = (unsigned char)(group >> 8 & 255);
        if (padding < 1)
            bytes[size++] = (unsigned char)(group & 255);
    }
    attn_status status =
        ok ? spm_tokenizer_from_model(fn, "its \"spm_model\"", bytes, size, out, vocab)
           : attn_fail(ATTN_ERR_FORMAT, "%s: \"spm_model\" must be a model's bytes in base64", fn);
    free(bytes);
    return status;
}
